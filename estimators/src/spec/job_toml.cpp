// job_toml.cpp — TOML ⇄ JobSpec. Reading is strict: every key is typed and range-checked
// at the point it is read, with the file:line:column of the value; unknown keys get a
// "did you mean"; all problems are collected so the user sees them in one go. Writing
// emits a canonical document that reads back into an equal spec.
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <regex>
#include <sstream>

#include <toml++/toml.h>

#include "spec/job_toml_internal.h"
#include "ptd/spec/pipeline_layout.h"
#include "ptd/plan/batch_choice.h"
#include "ptd/common/decimal.h"
#include "ptd/common/file_read.h"
#include "ptd/spec/hf_import.h"
#include "ptd/spec/job_spec.h"
#include "ptd/spec/presets.h"
#include "ptd/spec/stack_defaults.h"

namespace ptd {

// ---- reading ---------------------------------------------------------------------------

SourceLoc TomlContext::loc(const toml::node& n) const {
    const auto& src = n.source();
    return SourceLoc{file, (int)src.begin.line, (int)src.begin.column};
}

void TomlContext::error(SourceLoc where, std::string key, std::string message) {
    diagnostics.push_back({std::move(where), std::move(key), std::move(message)});
}

// "string \"8\"", "integer 8", "table", ... — what the user actually wrote.
static std::string describe(const toml::node& n) {
    std::ostringstream os;
    switch (n.type()) {
        case toml::node_type::string: os << "string " << quote_input(n.as_string()->get()); break;
        case toml::node_type::integer: os << "integer " << n.as_integer()->get(); break;
        case toml::node_type::floating_point: os << "float " << n.as_floating_point()->get(); break;
        case toml::node_type::boolean: os << "boolean " << (n.as_boolean()->get() ? "true" : "false"); break;
        case toml::node_type::array: os << "an array"; break;
        case toml::node_type::table: os << "a table"; break;
        default: os << "a date/time"; break;
    }
    return os.str();
}

TableReader::TableReader(TomlContext& ctx, const toml::table& table, std::string prefix)
    : ctx_(ctx), table_(table), prefix_(std::move(prefix)) {
    if (!prefix_.empty()) ctx_.locations[prefix_] = ctx_.loc(table_);
}

std::string TableReader::full(std::string_view key) const {
    return prefix_.empty() ? std::string(key) : prefix_ + "." + std::string(key);
}

const toml::node* TableReader::find(std::string_view key) {
    known_.emplace_back(key);
    const toml::node* n = table_.get(key);
    if (n) ctx_.locations[full(key)] = ctx_.loc(*n);
    return n;
}

bool TableReader::has(std::string_view key) const { return table_.contains(key); }

SourceLoc TableReader::where(std::string_view key) const {
    if (const toml::node* n = table_.get(key)) return ctx_.loc(*n);
    return ctx_.loc(table_);
}

void TableReader::type_error(const toml::node& n, std::string_view key, const char* expected) {
    ctx_.error(ctx_.loc(n), full(key), "expected " + std::string(expected) + ", got " + describe(n));
}

bool TableReader::read_int(std::string_view key, int& out, long long min, long long max) {
    const toml::node* n = find(key);
    if (!n) return false;
    const auto* v = n->as_integer();
    if (!v) {
        type_error(*n, key, "an integer");
        return false;
    }
    long long x = v->get();
    if (x < min || x > max) {
        ctx_.error(ctx_.loc(*n), full(key),
                   "got " + std::to_string(x) + "; allowed: " + std::to_string(min) + " .. " + std::to_string(max));
        return false;
    }
    out = (int)x;
    return true;
}

const toml::node* TableReader::number(std::string_view key, double& x) {
    const toml::node* n = find(key);
    if (!n) return nullptr;
    if (const auto* f = n->as_floating_point()) x = f->get();
    else if (const auto* i = n->as_integer()) x = (double)i->get();
    else {
        type_error(*n, key, "a number");
        return nullptr;
    }
    return n;
}

bool TableReader::read_double(std::string_view key, double& out, double min, double max) {
    double x = 0;
    const toml::node* n = number(key, x);
    if (!n) return false;
    if (!std::isfinite(x) || x < min || x > max) {
        std::ostringstream os;
        os << "got " << x << "; allowed: " << min << " .. " << max;
        ctx_.error(ctx_.loc(*n), full(key), os.str());
        return false;
    }
    out = x;
    return true;
}

bool TableReader::read_positive(std::string_view key, double& out, double max, const char* unit) {
    double x = 0;
    const toml::node* n = number(key, x);
    if (!n) return false;
    if (std::isfinite(x) && x > 0 && x <= max) {
        out = x;
        return true;
    }
    std::ostringstream os;
    os << "got " << x << "; allowed: a number > 0 and ≤ " << max << " (" << unit << ")";
    ctx_.error(ctx_.loc(*n), full(key), os.str());
    return false;
}

bool TableReader::read_bool(std::string_view key, bool& out) {
    const toml::node* n = find(key);
    if (!n) return false;
    const auto* v = n->as_boolean();
    if (!v) {
        type_error(*n, key, "true or false");
        return false;
    }
    out = v->get();
    return true;
}

bool TableReader::read_string(std::string_view key, std::string& out) {
    const toml::node* n = find(key);
    if (!n) return false;
    const auto* v = n->as_string();
    if (!v) {
        type_error(*n, key, "a string");
        return false;
    }
    out = v->get();
    return true;
}

bool TableReader::read_word(std::string_view key, int& out, const std::vector<std::string>& words) {
    return read_word(key, out, words, {});
}

bool TableReader::read_word(std::string_view key, int& out, const std::vector<std::string>& words,
                            const WordAliases& aliases) {
    std::string s;
    if (!read_string(key, s)) return false;
    std::string_view word = s;
    for (const auto& [alias, canonical] : aliases)
        if (alias == s) word = canonical;
    for (size_t i = 0; i < words.size(); ++i)
        if (words[i] == word) {
            out = (int)i;
            return true;
        }
    std::string allowed;
    for (const std::string& w : words) allowed += (allowed.empty() ? "" : ", ") + w;
    for (const auto& [alias, canonical] : aliases) allowed += ", " + alias + " (= " + canonical + ")";
    std::vector<std::string> spellings = words;
    for (const auto& [alias, canonical] : aliases) spellings.push_back(alias);
    std::string hint = closest_match(s, spellings);
    ctx_.error(where(key), full(key),
               "got " + quote_input(s) + "; allowed: " + allowed + (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)"));
    return false;
}

bool TableReader::read_string_array(std::string_view key, std::vector<std::string>& out) {
    const toml::node* n = find(key);
    if (!n) return false;
    const auto* arr = n->as_array();
    if (!arr) {
        type_error(*n, key, "an array of strings");
        return false;
    }
    std::vector<std::string> values;
    for (size_t i = 0; i < arr->size(); ++i) {
        const toml::node& e = *arr->get(i);
        const auto* s = e.as_string();
        if (!s) {
            ctx_.error(ctx_.loc(e), full(key) + "[" + std::to_string(i) + "]",
                       "expected a string, got " + describe(e));
            return false;
        }
        values.push_back(s->get());
    }
    out = std::move(values);
    return true;
}

bool TableReader::read_int_array(std::string_view key, std::vector<int>& out, long long min, long long max) {
    const toml::node* n = find(key);
    if (!n) return false;
    const auto* arr = n->as_array();
    if (!arr) {
        type_error(*n, key, "an array of integers");
        return false;
    }
    std::vector<int> values;
    for (size_t i = 0; i < arr->size(); ++i) {
        const toml::node& e = *arr->get(i);
        const auto* v = e.as_integer();
        std::string k = full(key) + "[" + std::to_string(i) + "]";
        if (!v) {
            ctx_.error(ctx_.loc(e), k, "expected an integer, got " + describe(e));
            return false;
        }
        if (v->get() < min || v->get() > max) {
            ctx_.error(ctx_.loc(e), k,
                       "got " + std::to_string(v->get()) + "; allowed: " + std::to_string(min) + " .. " +
                           std::to_string(max));
            return false;
        }
        values.push_back((int)v->get());
    }
    out = std::move(values);
    return true;
}

const toml::table* TableReader::subtable(std::string_view key) {
    const toml::node* n = find(key);
    if (!n) return nullptr;
    if (!n->as_table()) {
        type_error(*n, key, "a table");
        return nullptr;
    }
    return n->as_table();
}

const toml::array* TableReader::subarray(std::string_view key) {
    const toml::node* n = find(key);
    if (!n) return nullptr;
    if (!n->as_array()) {
        type_error(*n, key, "an array of tables ([[...]])");
        return nullptr;
    }
    return n->as_array();
}

void TableReader::require(std::string_view key, const char* what) {
    if (!has(key))
        ctx_.error(ctx_.loc(table_), full(key), std::string("missing; required: ") + what);
}

// The names other stacks give a job's settings (Megatron-LM / NeMo arguments with - as _, HF
// config.json fields, DeepSpeed and torchtitan config keys), each with the job spec's key for
// it: users write what their stack calls it, and the message points at the spec's word.
struct ForeignKey {
    const char* name;   // as the other stack spells it
    const char* whose;  // the stack(s) that use the name
    const char* key;    // the job spec's key, "section.key"
    const char* how;    // how the value carries over ("" = as it is)
};
static constexpr ForeignKey kForeignKeys[] = {
    {"tensor_model_parallel_size", "Megatron-LM / NeMo", "parallel.tp", ""},
    {"pipeline_model_parallel_size", "Megatron-LM / NeMo", "parallel.pp", ""},
    {"virtual_pipeline_model_parallel_size", "Megatron-LM / NeMo", "parallel.vpp", ""},
    {"context_parallel_size", "Megatron-LM / NeMo", "parallel.cp", ""},
    {"expert_model_parallel_size", "Megatron-LM / NeMo", "parallel.ep", ""},
    {"expert_tensor_parallel_size", "Megatron-LM / NeMo", "parallel.expert_tp", ""},
    {"data_parallel_size", "Megatron-LM", "parallel.dp", ""},
    {"use_distributed_optimizer", "Megatron-LM / NeMo", "parallel.distributed_optimizer", ""},
    {"recompute_granularity", "Megatron-LM / NeMo", "parallel.recompute", " (\"selective\" or \"full\")"},
    {"activations_checkpoint_granularity", "NeMo 1", "parallel.recompute", " (\"selective\" or \"full\")"},
    {"micro_batch_size", "Megatron-LM / NeMo", "training.micro_batch", ""},
    {"global_batch_size", "Megatron-LM / NeMo / torchtitan", "training.global_batch", ""},
    {"train_micro_batch_size_per_gpu", "DeepSpeed", "training.micro_batch", ""},
    {"train_batch_size", "DeepSpeed", "training.global_batch", ""},
    {"zero_optimization", "DeepSpeed", "parallel.zero", " (its stage)"},
    {"train_iters", "Megatron-LM", "training.steps", ""},
    {"num_layers", "Megatron-LM / NeMo", "model.layers", ""},
    {"num_hidden_layers", "HF config.json", "model.layers", ""},
    {"hidden_size", "Megatron-LM / NeMo / HF config.json", "model.hidden", ""},
    {"num_attention_heads", "Megatron-LM / NeMo / HF config.json", "model.heads", ""},
    {"num_query_groups", "Megatron-LM / NeMo", "model.kv_heads", ""},
    {"num_key_value_heads", "HF config.json", "model.kv_heads", ""},
    {"ffn_hidden_size", "Megatron-LM / NeMo", "model.ffn_hidden", ""},
    {"intermediate_size", "HF config.json", "model.ffn_hidden", ""},
    {"kv_channels", "Megatron-LM / NeMo", "model.head_dim", ""},
    {"seq_length", "Megatron-LM / NeMo", "model.seq_len", ""},
    {"encoder_seq_length", "NeMo 1", "model.seq_len", ""},
    {"vocab_size", "HF config.json", "model.vocab", ""},
    {"padded_vocab_size", "Megatron-LM", "model.vocab", " (the tokenizer's size; estimate.vocab_pad pads it)"},
    {"num_experts", "Megatron-LM / NeMo", "model.experts", ""},
    {"num_local_experts", "HF config.json", "model.experts", ""},
    {"moe_router_topk", "Megatron-LM / NeMo", "model.top_k", ""},
    {"num_experts_per_tok", "HF config.json", "model.top_k", ""},
    {"moe_ffn_hidden_size", "Megatron-LM / NeMo", "model.moe_ffn_hidden", ""},
    {"moe_intermediate_size", "HF config.json", "model.moe_ffn_hidden", ""},
    {"hidden_dropout", "Megatron-LM / NeMo / HF config.json", "model.dropout", " (true or false: 0.0 is false)"},
    {"attention_dropout", "Megatron-LM / NeMo / HF config.json", "model.dropout", " (true or false: 0.0 is false)"},
    {"tensor_parallel_degree", "torchtitan", "parallel.tp", ""},
    {"pipeline_parallel_degree", "torchtitan", "parallel.pp", ""},
    {"context_parallel_degree", "torchtitan", "parallel.cp", ""},
    {"expert_parallel_degree", "torchtitan", "parallel.ep", ""},
    {"data_parallel_shard_degree", "torchtitan", "parallel.dp", " (with parallel.zero = 3: FSDP)"},
    {"data_parallel_replicate_degree", "torchtitan", "parallel.dp_replicate",
     " (parallel.dp is the replicate degree times the shard degree)"},
    {"num_distributed_optimizer_instances", "Megatron-LM / NeMo", "parallel.dp_replicate", ""},
    {"mics_shard_size", "DeepSpeed", "parallel.dp_replicate", " (= dp / mics_shard_size, with zero = 3)"},
    {"local_batch_size", "torchtitan", "training.micro_batch", " (its micro-batch when no gradient accumulation)"},
    {"mixed_precision_param", "torchtitan", "training.precision", " (\"bf16\")"},
};

// " (as Megatron-LM / NeMo call it; this spec's key is [parallel] tp)" for a known foreign name; "".
static std::string foreign_key_hint(std::string_view section, std::string_view key) {
    for (const ForeignKey& f : kForeignKeys) {
        if (key != f.name) continue;
        std::string_view target = f.key;
        size_t dot = target.find('.');
        std::string_view target_section = target.substr(0, dot), target_key = target.substr(dot + 1);
        std::string where = target_section == section ? "\"" + std::string(target_key) + "\""
                                                         : "[" + std::string(target_section) + "] " + std::string(target_key);
        return std::string(" (as ") + f.whose + " call it; this spec's key is " + where + f.how + ")";
    }
    return "";
}

void TableReader::finish() {
    for (const auto& [k, v] : table_) {
        std::string key(k.str());
        bool known = false;
        for (const std::string& n : known_) known = known || n == key;
        if (known) continue;
        std::string hint = foreign_key_hint(prefix_, key);
        if (hint.empty())
            if (std::string near = closest_match(key, known_); !near.empty()) hint = " (did you mean \"" + near + "\"?)";
        std::string allowed;
        for (const std::string& n : known_) allowed += (allowed.empty() ? "" : ", ") + n;
        ctx_.error(ctx_.loc(v), full(key),
                   "unknown key" + hint + "; allowed in " +
                       (prefix_.empty() ? std::string("the document") : "[" + prefix_ + "]") + ": " + allowed);
    }
}

static const std::vector<std::string> kArchWords = {"gpt", "llama"};
static const std::vector<std::string> kNormWords = {"layernorm", "rmsnorm"};
static const std::vector<std::string> kActivationWords = {"gelu", "swiglu"};
static const std::vector<std::string> kPositionWords = {"learned", "rope"};
static const std::vector<std::string> kRecomputeWords = {"none", "selective", "full"};
// zb: in PipelineSchedule's order.
static const std::vector<std::string> kScheduleWords = {"auto", "1f1b", "interleaved", "zb-h1", "dualpipe"};
static const std::vector<std::string> kMoeDispatcherWords = {"alltoall", "deepep", "hybridep"};  // deepep
static const std::vector<std::string> kCudaGraphImplWords = {"none", "local", "transformer_engine"};  // hostov
static const std::vector<std::string> kPrecisionWords = {"fp32", "bf16", "fp16"};
static const std::vector<std::string> kOptimizerWords = {"adamw", "adam", "sgd"};
static const std::vector<std::string> kLaunchWords = {"local", "ssh"};
static const std::vector<std::string> kProfileWords = {"megatron", "ptd-engine"};
static const std::vector<std::string> kAttentionFlopsWords = {"full", "causal"};
static const std::vector<std::string> kFrameworkWords = {"megatron", "deepspeed", "torchtitan", "pytorch-fsdp", "nemo", "llm-foundry"};
// The names users give these stacks: Megatron-Bridge runs Megatron-core with NeMo 2.0's recipe
// defaults (its successor); Megatron-LM's training script is "megatron" whatever its core's name.
static const TableReader::WordAliases kFrameworkAliases = {{"megatron-lm", "megatron"},
                                                           {"megatron-core", "megatron"},
                                                           {"megatron-bridge", "nemo"},
                                                           {"megatron-deepspeed", "deepspeed"},
                                                           {"llmfoundry", "llm-foundry"}};
static const std::vector<std::string> kRecomputeStyleWords = {"megatron", "torchtitan-op"};
static const std::vector<std::string> kCrossEntropyWords = {"megatron", "pytorch", "pytorch-compiled", "fused", "megatron-fused", "te"};
static const std::vector<std::string> kFlashKernelWords = {"by-date", "flash-attn-1", "triton", "flash-attn-2"};  // FlashKernel order
static const std::vector<std::string> kGenerationWords = {"other", "volta", "ampere", "ada",
                                                          "hopper", "blackwell", "cdna3", "cpu"};
static const std::vector<std::string> kGpuLinkWords = {"nvlink", "pcie", "infinity-fabric", "loopback"};  // GpuLink order
// In Fp8Recipe / Fp8Format order.
static const std::vector<std::string> kFp8RecipeWords = {"none", "delayed", "current", "tensorwise", "rowwise", "mxfp8"};
static const std::vector<std::string> kFp8FormatWords = {"hybrid", "e4m3"};
// oom4: the words each optimizer-state key takes (moments in StateDtype order; the master
// copy has no fp8 but may be none).
static const std::vector<std::string> kMainParamsDtypeWords = {"fp32", "bf16", "fp16", "none", "fp32-remainders"};
static const std::vector<std::string> kMomentDtypeWords = {"fp32", "bf16", "fp16", "fp8"};

constexpr long long kMaxDim = 1LL << 24;  // 16M: far above any real model dimension

template <class E>
static bool read_enum(TableReader& r, std::string_view key, E& out, const std::vector<std::string>& words) {
    int i = 0;
    if (!r.read_word(key, i, words)) return false;
    out = (E)i;
    return true;
}

void read_model_keys(TableReader& r, ModelSpec& m, ModelKeysGiven& given, bool from_scratch) {
    if (from_scratch) {
        for (const char* k : {"arch", "layers", "hidden", "heads", "vocab", "seq_len"})
            r.require(k, "an integer (or arch \"gpt\"/\"llama\"), unless preset or hf_config is given");
    }
    read_enum(r, "arch", m.arch, kArchWords);
    r.read_int("layers", m.layers, 1, 100000);
    r.read_int("hidden", m.hidden, 1, kMaxDim);
    r.read_int("heads", m.heads, 1, 65536);
    given.kv_heads = r.read_int("kv_heads", m.kv_heads, 1, 65536);
    given.ffn_hidden = r.read_int("ffn_hidden", m.ffn_hidden, 1, kMaxDim * 8);
    r.read_int("vocab", m.vocab, 1, 1LL << 28);
    r.read_int("seq_len", m.seq_len, 1, 1LL << 26);
    given.tied_embeddings = r.read_bool("tied_embeddings", m.tied_embeddings);
    given.norm = read_enum(r, "norm", m.norm, kNormWords);
    given.activation = read_enum(r, "activation", m.activation, kActivationWords);
    given.position = read_enum(r, "position", m.position, kPositionWords);
    given.bias = r.read_bool("bias", m.bias);
    r.read_bool("qkv_bias", m.qkv_bias);
    r.read_int("experts", m.experts, 0, 65536);
    r.read_int("top_k", m.top_k, 0, 65536);
    r.read_double("rope_theta", m.rope_theta, 1e-9, 1e12);
    r.read_double("norm_eps", m.norm_eps, 0, 1);
    if (bool dropout = false; r.read_bool("dropout", dropout)) m.dropout = dropout;  // oom4
    // mla: recent open models' shapes.
    for (const ModelShapeKey& k : model_shape_keys()) r.read_int(k.name, m.*k.member, 0, k.max);
    r.read_bool("qk_layernorm", m.qk_layernorm);  // mla
    if (m.experts > 1 && !r.has("top_k") && from_scratch) m.top_k = 2;
}

void read_gpu_keys(TableReader& r, GpuSpec& g, bool from_scratch) {
    if (from_scratch)
        for (const char* k : {"memory_gib", "fp32_tflops", "hbm_gbps", "link_gbps"})
            r.require(k, "a number, unless preset is given");
    r.read_string("description", g.description);
    r.read_double("memory_gib", g.memory_gib, 1e-3, 1e6);
    r.read_double("fp32_tflops", g.fp32_tflops, 0, 1e7);
    r.read_double("tf32_tflops", g.tf32_tflops, 0, 1e7);
    r.read_double("bf16_tflops", g.bf16_tflops, 0, 1e7);
    r.read_double("fp16_tflops", g.fp16_tflops, 0, 1e7);
    r.read_double("fp8_tflops", g.fp8_tflops, 0, 1e7);
    r.read_double("hbm_gbps", g.hbm_gbps, 0, 1e7);
    r.read_double("link_gbps", g.link_gbps, 0, 1e7);
    read_enum(r, "generation", g.generation, kGenerationWords);
    read_enum(r, "link", g.link, kGpuLinkWords);
    r.read_positive("power_w", g.power_w, 1e5, "W, the board under load (TDP)");  // cost
}

static std::string preset_list(const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
}

static void read_model(TomlContext& ctx, const toml::table& t, JobSpec& job, const PresetCatalog& presets) {
    TableReader r(ctx, t, "model");
    std::string preset, hf;
    bool has_preset = r.read_string("preset", preset);
    bool has_hf = r.read_string("hf_config", hf);
    std::string name;
    bool has_name = r.read_string("name", name);
    ModelSpec& m = job.model;
    ModelKeysGiven given;
    bool from_scratch = true;
    if (has_preset && has_hf) {
        ctx.error(r.where("hf_config"), "model.hf_config",
                  "given together with preset " + quote_input(preset) + "; allowed: one of preset, hf_config, or explicit keys");
    } else if (has_preset) {
        if (const ModelSpec* p = presets.find_model(preset)) {
            m = *p;
            from_scratch = false;
            job.origin.model_preset = preset;
            job.origin.model_base = m;
        } else {
            std::string hint = closest_match(preset, presets.model_names());
            ctx.error(r.where("preset"), "model.preset",
                      "unknown model preset " + quote_input(preset) +
                          (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)") +
                          "; allowed: " + preset_list(presets.model_names()));
            from_scratch = false;  // don't pile "missing key" errors on top
        }
    } else if (has_hf) {
        std::filesystem::path path(hf);
        if (path.is_relative() && !ctx.file.empty() && ctx.file.front() != '<')
            path = std::filesystem::path(ctx.file).parent_path() / path;
        // A seq_len in the job overrides the config's max_position_embeddings (and stands in
        // for it when the config has none).
        int seq_override = 0;
        if (const toml::node* n = t.get("seq_len"); n && n->as_integer() && n->as_integer()->get() > 0 &&
                                                     n->as_integer()->get() <= (1LL << 26))
            seq_override = (int)n->as_integer()->get();
        auto imported = import_hf_config_file(path.string(), seq_override);
        if (imported) {
            m = imported->model;
            job.origin.model_base = m;
            // seq_len came from the job, not the config: keep it out of the base so saving
            // always writes it (the config may not even have one).
            if (seq_override) job.origin.model_base->seq_len = 0;
            for (const std::string& note : imported->notes) job.origin.notes.push_back("hf_config: " + note);
        } else {
            for (Diagnostic d : imported.error().diagnostics) {
                // Point at the hf_config line of the job, and keep the config's own position.
                d.message = "in hf_config " + quote_input(hf) + " (" + format_diagnostic(d) + ")";
                d.where = r.where("hf_config");
                d.key = "model.hf_config";
                ctx.diagnostics.push_back(std::move(d));
            }
        }
        job.origin.model_hf_config = hf;
        from_scratch = false;
    }
    read_model_keys(r, m, given, from_scratch);
    if (from_scratch) fill_model_defaults(m, given);
    if (has_name) m.name = name;
    else if (m.name.empty()) m.name = "custom";
    r.finish();
}

// nccl: the network. Base: the cluster preset, else the first cluster preset on the job's GPU
// (defaults suit the hardware the job names), else one NIC per GPU at inter_gbps. Then the
// table's own nics_per_node / nic_gbps / rail_optimized / nvls, and inter_gbps (each GPU's
// share of the NIC line rate) as an override of the per-GPU figure.
static void read_cluster_network(TomlContext& ctx, TableReader& r, JobSpec& job, const PresetCatalog& presets,
                                 const ClusterPreset* cluster_preset) {
    ClusterSpec& c = job.cluster;
    const int gpn = std::max(c.gpus_per_node, 1);
    const ClusterPreset* net = cluster_preset;
    if (!net && !job.origin.gpu_preset.empty()) net = presets.default_cluster_for_gpu(job.origin.gpu_preset);
    double nic_gbps = 8.0 * c.inter_gbps;
    c.nics_per_node = 0;  // one NIC per GPU, at inter_gbps
    // issue 32: a named cluster's nodes hold so many GPUs; a job cannot place more ranks on one
    // (a scheduler would leave it pending for ever, or srun refuse it).
    if (cluster_preset && c.gpus_per_node > cluster_preset->gpus_per_node)
        ctx.error(r.where("gpus_per_node"), "cluster.gpus_per_node",
                  "got " + std::to_string(c.gpus_per_node) + ", more than the " + std::to_string(cluster_preset->gpus_per_node) +
                      " GPUs per node of cluster preset \"" + cluster_preset->name + "\"; allowed: 1 .. " +
                      std::to_string(cluster_preset->gpus_per_node) + " (or no cluster preset)");
    if (net) {
        // A node with other GPU count than the preset's keeps its NICs per GPU.
        c.nics_per_node = std::max(1, (int)std::lround((double)net->nics_per_node * gpn / net->gpus_per_node));
        nic_gbps = net->nic_gbps;
        c.rail_optimized = net->rail_optimized;
        c.nvls = net->nvls;
        job.origin.network_source = cluster_preset ? "cluster preset " + net->name
                                                   : net->name + ", the default for gpu " + job.origin.gpu_preset;
        // gb200: the preset's NVLink domain — a default preset's only where this job's nodes are
        // the preset's (4-GPU GB200 trays); a named preset's always (validate_job names a mismatch).
        c.nvlink_domain = cluster_preset || net->gpus_per_node == gpn ? net->nvlink_domain : 0;
        // bits: the host CPU of the same node (a named preset's was set with its other host keys).
        c.cpu_adam_params_per_s = net->cpu_adam_params_per_s;
        c.host_op_us = net->host_op_us;  // hostov
    } else if (c.gpu.link == GpuLink::loopback) {
        // The cpu device has no NICs of its own to describe: on one machine the ranks share
        // loopback (describe_network says so, and nothing more is to be said); across hosts
        // each host's link is the one inter_gbps names, not a NIC per "GPU".
        job.origin.network_source = c.nodes > 1 ? "the cpu device: each host's link at inter_gbps" : "";
    } else {
        job.origin.network_source = "one NIC per GPU at inter_gbps (no cluster preset for this GPU)";
    }
    int nics = 0;
    double nic = 0;
    const bool nics_given = r.read_int("nics_per_node", nics, 1, 1024);
    const bool nic_given = r.read_double("nic_gbps", nic, 1e-3, 1e5);
    r.read_bool("rail_optimized", c.rail_optimized);
    r.read_bool("nvls", c.nvls);
    job.origin.nvlink_domain_given = r.read_int("nvlink_domain", c.nvlink_domain, 1, 1 << 20);  // gb200
    if (nics_given) c.nics_per_node = nics;
    if (nic_given) nic_gbps = nic;
    if (nic_given && job.origin.inter_given)
        ctx.error(r.where("inter_gbps"), "cluster.inter_gbps",
                  "both inter_gbps (GB/s per GPU) and nic_gbps (Gb/s per NIC) give the network bandwidth; "
                  "allowed: one of them (inter_gbps = nics_per_node · nic_gbps / 8 / gpus_per_node)");
    auto add_source = [&](const char* what) {
        std::string& src = job.origin.network_source;
        src += src.empty() ? std::string(what).substr(2) : std::string(what);
    };
    if (nics_given || nic_given) add_source(", with the file's NIC keys");
    job.origin.network_generic = !net && !nics_given && !nic_given && !job.origin.inter_given;
    if (!job.origin.inter_given) c.inter_gbps = (c.nics_per_node > 0 ? c.nics_per_node : gpn) * nic_gbps / 8.0 / gpn;
    else add_source(", inter_gbps from the file");
}

static void read_cluster(TomlContext& ctx, const toml::table& t, JobSpec& job, const PresetCatalog& presets) {
    TableReader r(ctx, t, "cluster");
    ClusterSpec& c = job.cluster;
    // nccl: a cluster preset gives gpu, gpus_per_node, intra/host/PCIe figures and the network;
    // every key the table writes itself overrides it.
    const ClusterPreset* cluster_preset = nullptr;
    if (std::string name; r.read_string("preset", name)) {
        cluster_preset = presets.find_cluster(name);
        const GpuSpec* g = cluster_preset ? presets.find_gpu(cluster_preset->gpu) : nullptr;
        if (cluster_preset && g) {
            c.gpus_per_node = cluster_preset->gpus_per_node;
            c.gpu = *g;
            job.origin.gpu_preset = cluster_preset->gpu;
            job.origin.gpu_base = *g;
            c.intra_gbps = cluster_preset->intra_gbps;
            c.host_memory_gib = cluster_preset->host_memory_gib;
            c.pcie_gbps = cluster_preset->pcie_gbps;
            c.cpu_adam_params_per_s = cluster_preset->cpu_adam_params_per_s;  // bits
            c.host_op_us = cluster_preset->host_op_us;  // hostov
            job.origin.cluster_preset = name;
        } else {
            cluster_preset = nullptr;
            std::string hint = closest_match(name, presets.cluster_names());
            ctx.error(r.where("preset"), "cluster.preset",
                      "unknown cluster preset " + quote_input(name) +
                          (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)") +
                          "; allowed: " + preset_list(presets.cluster_names()));
        }
    }
    r.require("nodes", "an integer ≥ 1");
    if (!cluster_preset) {
        r.require("gpus_per_node", "an integer ≥ 1");
        r.require("gpu", "a GPU preset name (string) or a [cluster.gpu] table");
    }
    r.read_int("nodes", c.nodes, 1, 1 << 20);
    r.read_int("gpus_per_node", c.gpus_per_node, 1, 1024);
    auto use_preset = [&](const std::string& name, std::string_view key) {
        if (const GpuSpec* g = presets.find_gpu(name)) {
            c.gpu = *g;
            job.origin.gpu_preset = name;
            job.origin.gpu_base = *g;
            return true;
        }
        std::string hint = closest_match(name, presets.gpu_names());
        ctx.error(r.where("gpu"), std::string(key),
                  "unknown GPU preset " + quote_input(name) + (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)") +
                      "; allowed: " + preset_list(presets.gpu_names()));
        return false;
    };
    if (const toml::node* g = t.get("gpu"); g && g->is_string()) {
        std::string name;
        r.read_string("gpu", name);
        use_preset(name, "cluster.gpu");
    } else if (const toml::table* gt = r.subtable("gpu")) {
        TableReader gr(ctx, *gt, "cluster.gpu");
        std::string name;
        bool from_scratch = true;
        if (gr.read_string("preset", name)) {
            use_preset(name, "cluster.gpu.preset");
            from_scratch = false;
        }
        gr.read_string("name", c.gpu.name);
        read_gpu_keys(gr, c.gpu, from_scratch);
        if (c.gpu.name.empty()) c.gpu.name = "custom";
        gr.finish();
    }
    job.origin.intra_given = r.read_double("intra_gbps", c.intra_gbps, 1e-6, 1e7);
    job.origin.inter_given = r.read_double("inter_gbps", c.inter_gbps, 1e-6, 1e7);
    read_cluster_network(ctx, r, job, presets, cluster_preset);
    r.read_double("host_memory_gib", c.host_memory_gib, 1e-3, 1e9);
    r.read_double("pcie_gbps", c.pcie_gbps, 1e-3, 1e6);
    r.read_double("cpu_adam_params_per_s", c.cpu_adam_params_per_s, 1e6, 1e13);  // bits
    r.read_double("host_op_us", c.host_op_us, 0.01, 1e5);  // hostov
    // cost: a price, a bandwidth, a power or a rate is a number > 0 (0 and negatives named as such).
    r.read_positive("gpu_hour_usd", c.gpu_hour_usd, 1e6, "USD per GPU-hour");
    r.read_positive("storage_gbps", c.storage_gbps, 1e7, "GB/s, the whole job's checkpoint storage");
    r.read_positive("host_power_w", c.host_power_w, 1e7, "W per node besides its GPUs");
    r.read_positive("failures_per_gpu_hour", c.failures_per_gpu_hour, 1, "failures per GPU-hour");
    if (double pue = 0; r.read_positive("pue", pue, 10, "facility power ÷ IT power")) {
        if (pue >= 1) c.pue = pue;
        else
            ctx.error(r.where("pue"), "cluster.pue",
                      "got " + toml_double(pue) + "; allowed: 1 to 10 (a facility cannot draw less than its IT load)");
    }
    if (r.read_string("profile", c.profile) && c.profile.empty())
        ctx.error(r.where("profile"), "cluster.profile", "empty; allowed: the path of a cluster profile written by `ptd calibrate`");
    r.read_string_array("hosts", c.hosts);
    for (size_t i = 0; i < c.hosts.size(); ++i)
        if (c.hosts[i].empty())
            ctx.error(r.where("hosts"), "cluster.hosts[" + std::to_string(i) + "]",
                      "empty host name; allowed: a hostname or address");
    r.finish();
}

// stackdef: a StackKey read from the file is the job's own; unread, the stack's default
// (stack_defaults.h) fills it in derive_job_defaults.
static void mark_written(JobSpec& job, StackKey k, bool read) {
    if (read) job.origin.stack_keys_written |= stack_key_bit(k);
}
// mbrecipe: a key a Megatron-Bridge performance recipe sets (RecipeKeyBit) is the job's own once written.
static void mark_recipe_key(JobSpec& job, uint16_t bit, bool read) {
    if (read) job.origin.recipe_keys_written |= bit;
}

static void read_parallel(TomlContext& ctx, const toml::table& t, JobSpec& job) {
    TableReader r(ctx, t, "parallel");
    ParallelSpec& p = job.parallel;
    r.read_int("tp", p.tp, 1, 1 << 20);
    r.read_int("pp", p.pp, 1, 1 << 20);
    job.origin.dp_given = r.read_int("dp", p.dp, 1, 1 << 24);
    r.read_int("cp", p.cp, 1, 1 << 20);
    r.read_int("ep", p.ep, 1, 1 << 20);
    const bool vpp_written = r.read_int("vpp", p.vpp, 1, 1024);
    job.origin.vpp_given = vpp_written;  // batchchoice
    r.read_int("zero", p.zero, 0, 3);
    mark_written(job, StackKey::distributed_optimizer, r.read_bool("distributed_optimizer", p.distributed_optimizer));
    mark_written(job, StackKey::sequence_parallel, r.read_bool("sequence_parallel", p.sequence_parallel));
    mark_recipe_key(job, kRecipeRecompute, read_enum(r, "recompute", p.recompute, kRecomputeWords));  // mbrecipe
    mark_written(job, StackKey::recompute_style, read_enum(r, "recompute_style", p.recompute_style, kRecomputeStyleWords));
    // recmod: Megatron-core's module words, each located where it is wrong.
    if (std::vector<std::string> words; r.read_string_array("recompute_modules", words)) {
        mark_recipe_key(job, kRecipeRecomputeModules, true);  // mbrecipe
        uint32_t modules = 0;
        for (size_t i = 0; i < words.size(); ++i) {
            int bit = -1;
            for (int k = 0; k < kRecomputeModuleCount; ++k)
                if (words[i] == recompute_module_word(k)) bit = k;
            if (bit < 0) {
                std::string allowed;
                for (int k = 0; k < kRecomputeModuleCount; ++k)
                    allowed += std::string(k ? ", " : "") + recompute_module_word(k);
                ctx.error(r.where("recompute_modules"), "parallel.recompute_modules[" + std::to_string(i) + "]",
                          "got " + quote_input(words[i]) + "; allowed: " + allowed);
                continue;
            }
            modules |= 1u << bit;
        }
        p.recompute_modules = modules;
    }
    r.read_string("order", p.order);
    const bool lps_written = r.read_int_array("layers_per_stage", p.layers_per_stage, 0, 100000);
    // Megatron-core's layout string: its chunks' transformer layers are the split, and its chunk
    // count over pp the virtual stages unless vpp is written (TransformerConfig detects vpp from
    // it the same way). validate_job checks it against the model and the layout.
    if (r.read_string("pipeline_layout", p.pipeline_layout)) {
        if (lps_written)
            ctx.error(r.where("pipeline_layout"), "parallel.pipeline_layout",
                      "written together with parallel.layers_per_stage; allowed: one of the two (the layout string "
                      "gives each chunk's layers)");
        else if (const auto layout = parse_pipeline_layout(p.pipeline_layout); !layout)
            ctx.error(r.where("pipeline_layout"), "parallel.pipeline_layout",
                      "got " + quote_input(p.pipeline_layout) + ": " + layout.error());
        else {
            const int chunks = (int)layout->chunks.size();
            if (!vpp_written && p.pp > 0 && chunks % p.pp == 0 && chunks / p.pp > 1) p.vpp = chunks / p.pp, job.origin.vpp_given = true;
            p.layers_per_stage = layout_layers_per_chunk(*layout);
        }
    }
    // overlap (docs/job-spec.md): communication that runs concurrently with compute.
    mark_written(job, StackKey::overlap_grad_reduce, r.read_bool("overlap_grad_reduce", p.overlap_grad_reduce));
    mark_written(job, StackKey::overlap_param_gather, r.read_bool("overlap_param_gather", p.overlap_param_gather));
    mark_written(job, StackKey::tp_comm_overlap, r.read_bool("tp_comm_overlap", p.tp_comm_overlap));
    r.read_int("fsdp_prefetch", p.fsdp_prefetch, 0, 64);
    r.read_int("dp_replicate", p.dp_replicate, 1, 1 << 20);  // hsdp
    mark_written(job, StackKey::grad_reduce_in_fp32, r.read_bool("grad_reduce_in_fp32", p.grad_reduce_in_fp32));  // oomnemo
    r.read_int("activation_offload_layers", p.activation_offload_layers, 0, 100000);
    r.read_bool("async_tp", p.async_tp);  // tt405
    mark_written(job, StackKey::overlap_p2p_comm, r.read_bool("overlap_p2p_comm", p.overlap_p2p_comm));  // blackwell
    // offload: "nvme" (ZeRO-Infinity) is named so its rejection says why, not just "unknown".
    if (std::string device; r.read_string("offload_optimizer", device)) {
        if (device == "none" || device == "cpu")
            p.offload_optimizer = device == "cpu" ? OffloadDevice::cpu : OffloadDevice::none;
        else
            ctx.error(r.where("offload_optimizer"), "parallel.offload_optimizer",
                      "got " + quote_input(device) +
                          (device == "nvme" ? std::string("; NVMe offload (ZeRO-Infinity) is not modelled: its "
                                                          "speed depends on the drives' bandwidth, which the "
                                                          "estimator does not know")
                                            : std::string()) +
                          "; allowed: none, cpu");
    }
    r.read_bool("offload_params", p.offload_params);
    read_enum(r, "schedule", p.schedule, kScheduleWords);  // zb
    // l405: the pipeline split's embedding / loss accounting and the interleaved group size.
    // mbrecipe: a performance recipe's pipeline split accounting, unless the job writes its own.
    mark_recipe_key(job, kRecipeAccountForEmbedding,
                    r.read_bool("account_for_embedding_in_pipeline_split", p.account_for_embedding_in_pipeline_split));
    mark_recipe_key(job, kRecipeAccountForLoss,
                    r.read_bool("account_for_loss_in_pipeline_split", p.account_for_loss_in_pipeline_split));
    r.read_int("microbatch_group_size", p.microbatch_group_size, 1, 1 << 20);
    mark_written(job, StackKey::scatter_gather_tensors_in_pipeline,
                 r.read_bool("scatter_gather_tensors_in_pipeline", p.scatter_gather_tensors_in_pipeline));  // p2psg
    r.read_int("expert_tp", p.expert_tp, 0, 1 << 20);  // moe2: 0 = tp
    mark_recipe_key(job, kRecipeSharedExpertOverlap, r.read_bool("moe_shared_expert_overlap", p.moe_shared_expert_overlap));  // moe2
    mark_recipe_key(job, kRecipeMoeDispatcher, read_enum(r, "moe_dispatcher", p.moe_dispatcher, kMoeDispatcherWords));  // deepep
    mark_recipe_key(job, kRecipeMoeA2aOverlap, r.read_bool("moe_a2a_overlap", p.moe_a2a_overlap));  // deepep
    mark_written(job, StackKey::moe_permute_fusion, r.read_bool("moe_permute_fusion", p.moe_permute_fusion));  // moeperm
    mark_written(job, StackKey::moe_router_fusion, r.read_bool("moe_router_fusion", p.moe_router_fusion));  // moerouter
    // hostov: CUDA graphs (Megatron-core cuda_graph_impl / cuda_graph_scope), static expert inputs.
    mark_recipe_key(job, kRecipeCudaGraphImpl, read_enum(r, "cuda_graph_impl", p.cuda_graph_impl, kCudaGraphImplWords));
    if (std::vector<std::string> words; r.read_string_array("cuda_graph_scope", words)) {
        mark_recipe_key(job, kRecipeCudaGraphScope, true);
        uint32_t scope = 0;
        for (size_t i = 0; i < words.size(); ++i) {
            int bit = -1;
            for (int k = 0; k < kCudaGraphScopeCount; ++k)
                if (words[i] == cuda_graph_scope_word(k)) bit = k;
            if (bit < 0) {
                std::string allowed;
                for (int k = 0; k < kCudaGraphScopeCount; ++k) allowed += std::string(k ? ", " : "") + cuda_graph_scope_word(k);
                ctx.error(r.where("cuda_graph_scope"), "parallel.cuda_graph_scope[" + std::to_string(i) + "]",
                          "got " + quote_input(words[i]) + "; allowed: " + allowed);
                continue;
            }
            scope |= 1u << bit;
        }
        p.cuda_graph_scope = scope;
    }
    mark_recipe_key(job, kRecipeMoePadToCapacity, r.read_bool("moe_pad_to_capacity", p.moe_pad_to_capacity));
    r.read_bool("moe_router_padding_for_fp8", p.moe_router_padding_for_fp8);  // moefp8pad
    mark_written(job, StackKey::async_tensor_model_parallel_allreduce,
                 r.read_bool("async_tensor_model_parallel_allreduce", p.async_tensor_model_parallel_allreduce));  // recomp
    r.read_bool("distribute_saved_activations", p.distribute_saved_activations);  // papers
    r.finish();
}

static void read_training(TomlContext& ctx, const toml::table& t, JobSpec& job) {
    TableReader r(ctx, t, "training");
    TrainingSpec& tr = job.training;
    job.origin.micro_batch_given = r.read_int("micro_batch", tr.micro_batch, 1, 1 << 20);  // batchchoice
    job.origin.global_batch_given = r.read_int("global_batch", tr.global_batch, 1, 1 << 30);
    if (read_enum(r, "precision", tr.precision, kPrecisionWords)) job.origin.precision_defaulted = false;
    read_enum(r, "optimizer", tr.optimizer, kOptimizerWords);
    if (int i = 0; r.read_word("framework", i, kFrameworkWords, kFrameworkAliases)) tr.framework = (Framework)i;
    // stackdef: the date of the stack's code, whose defaults the unwritten keys take.
    if (std::string v; r.read_string("framework_version", v)) {
        if (std::optional<int> ym = parse_framework_version(v)) tr.framework_version = *ym;
        else
            ctx.error(r.where("framework_version"), "training.framework_version",
                      "got " + quote_input(v) + "; allowed: the date of the stack's code as \"YYYY-MM\", \"YYYY\", "
                      "a commit date \"YYYY-MM-DD\" or an NGC container tag \"YY.MM\" (e.g. \"2021-04\" for the "
                      "Megatron-LM of Narayanan et al. 2021, \"24.11\" for a NeMo 24.11 container), years 2015-2100; "
                      "a release number (Megatron-Core 0.8.0, DeepSpeed 0.14) is not a date: give the release's date");
    }
    r.read_bool("torch_compile", tr.torch_compile);
    r.read_double("lr", tr.lr, 0, 10);
    bool min_lr_given = r.read_double("min_lr", tr.min_lr, 0, 10);
    // lr / 10 as the decimal it is (3e-4 → 3e-05), not the binary quotient 2.9999999999999997e-05
    // that every export would print (issue 28).
    if (!min_lr_given) tr.min_lr = decimal_ratio(tr.lr, 10);
    r.read_int("warmup", tr.warmup, 0, 1 << 30);
    r.read_int("steps", tr.steps, 1, 1 << 30);
    r.read_positive("tokens", tr.tokens, 1e18, "tokens to train");  // cost
    r.read_double("weight_decay", tr.weight_decay, 0, 10);
    r.read_double("grad_clip", tr.grad_clip, 0, 1e6);
    r.read_int("seed", tr.seed, 0, (1LL << 31) - 1);
    r.read_string("data", tr.data);
    if (r.read_bool("flash_attention", tr.flash_attention)) job.origin.flash_attention_defaulted = false;
    read_enum(r, "flash_attention_kernel", tr.flash_kernel, kFlashKernelWords);  // tritonfa
    // fp8 (issue 15 point 3)
    read_enum(r, "fp8", tr.fp8, kFp8RecipeWords);
    read_enum(r, "fp8_format", tr.fp8_format, kFp8FormatWords);
    r.read_int("fp8_amax_history_len", tr.fp8_amax_history_len, 1, 1 << 20);
    r.read_int("fp8_bf16_first_layers", tr.fp8_bf16_first_layers, 0, kMaxDim);
    r.read_int("fp8_bf16_last_layers", tr.fp8_bf16_last_layers, 0, kMaxDim);
    mark_written(job, StackKey::fp8_param_gather, r.read_bool("fp8_param_gather", tr.fp8_param_gather));  // oomnemo
    if (int i = 0; r.read_word("main_params_dtype", i, kMainParamsDtypeWords)) {  // oom4
        tr.main_params_dtype = i == 3 ? StateDtype::none : i == 4 ? StateDtype::fp32_remainders : (StateDtype)i;
        job.origin.state_dtypes_written |= 1;  // recipe: the job's own, not its recipe's
    }
    if (read_enum(r, "exp_avg_dtype", tr.exp_avg_dtype, kMomentDtypeWords)) job.origin.state_dtypes_written |= 2;
    if (read_enum(r, "exp_avg_sq_dtype", tr.exp_avg_sq_dtype, kMomentDtypeWords)) job.origin.state_dtypes_written |= 4;
    // recipe (issue 29 point 6): the stack's named configuration for the model.
    if (std::string v; r.read_string("recipe", v)) {
        if (const std::optional<Framework> f = recipe_framework(v); !f)
            ctx.error(r.where("recipe"), "training.recipe",
                      "got " + quote_input(v) + "; allowed: " + known_recipes_text(v) + ", or no recipe");
        else if (*f != tr.framework)
            ctx.error(r.where("recipe"), "training.recipe",
                      "got " + quote_input(v) + " with training.framework = \"" + to_string(tr.framework) +
                          "\"; it is a configuration of framework \"" + to_string(*f) + "\"; allowed: " +
                          known_recipes_text(v));
        else
            tr.recipe = v;
    }
    r.read_bool("masked_softmax_fusion", tr.masked_softmax_fusion);  // papers
    if (tr.data.empty())
        ctx.error(r.where("data"), "training.data", "empty; allowed: \"synthetic\" or a path to a text/.bin file");
    r.finish();
}

// [paths] (issue 28): cluster paths for exported launch scripts. They are written into shell
// scripts and YAML, so control characters and quotes are refused.
static void read_paths(TomlContext& ctx, const toml::table& t, JobSpec& job) {
    TableReader r(ctx, t, "paths");
    PathsSpec& p = job.paths;
    const std::pair<const char*, std::string*> keys[] = {
        {"tokenizer", &p.tokenizer}, {"save", &p.save}, {"load", &p.load}, {"logs", &p.logs}};
    for (const auto& [key, value] : keys) {
        r.read_string(key, *value);
        bool ok = true;
        for (char ch : *value) ok = ok && (unsigned char)ch >= 0x20 && ch != 0x7f && ch != '"' && ch != '\'' && ch != '`' && ch != '\\' && ch != '$';
        if (!ok)
            ctx.error(r.where(key), std::string("paths.") + key,
                      quote_input(*value) + " has a quote, backslash, $ or control character; allowed: a path without them "
                                            "(it is written into shell scripts and YAML)");
    }
    r.read_int("save_interval", p.save_interval, 0, 1 << 30);
    r.finish();
}

// [launch.slurm] (issue 32). Each value goes into an #SBATCH line or srun's command line of
// a bash script, so every value is checked for the form Slurm takes and for characters the
// script would misread (whitespace, quotes, $, control characters).
static void read_launch_slurm(TomlContext& ctx, const toml::table& t, JobSpec& job) {
    TableReader r(ctx, t, "launch.slurm");
    SlurmSpec& s = job.launch.slurm;
    auto plain = [](const std::string& v, const char* also_allowed) {
        for (char ch : v)
            if (!(std::isalnum((unsigned char)ch) || std::strchr(also_allowed, ch))) return false;
        return true;
    };
    auto check = [&](const char* key, const std::string& v, bool ok, const std::string& allowed) {
        if (!v.empty() && !ok) ctx.error(r.where(key), std::string("launch.slurm.") + key, "got " + quote_input(v) + "; allowed: " + allowed);
    };
    const std::pair<const char*, std::string*> names[] = {{"partition", &s.partition}, {"account", &s.account}, {"qos", &s.qos}};
    for (const auto& [key, value] : names) {
        r.read_string(key, *value);
        check(key, *value, plain(*value, "_-.+"), "a Slurm name: letters, digits, _ - . + (no spaces)");
    }
    // A string key in one of Slurm's forms; an empty one is refused too.
    auto read_form = [&](const char* key, std::string& value, const std::regex& form, const std::string& allowed) {
        if (r.read_string(key, value) && !std::regex_match(value, form))
            ctx.error(r.where(key), std::string("launch.slurm.") + key, "got " + quote_input(value) + "; allowed: " + allowed);
    };
    static const std::regex time_forms(R"(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|\d+-\d+:\d{1,2}:\d{1,2}|UNLIMITED|INFINITE)");
    read_form("time", s.time, time_forms,
              "Slurm's time forms: MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS, DAYS-HOURS:MINUTES or "
              "DAYS-HOURS:MINUTES:SECONDS (e.g. \"04:00:00\", \"2-00:00:00\"), or \"UNLIMITED\"");
    r.read_bool("exclusive", s.exclusive);
    r.read_int("cpus_per_task", s.cpus_per_task, 1, 4096);
    static const std::regex size(R"(\d+[KMGT]?)");
    read_form("mem", s.mem, size,
              "memory per node as Slurm writes it: a number with an optional K, M, G or T suffix (\"500G\", "
              "\"64000M\"), or \"0\" for all of each node's memory");
    static const std::regex bind(R"((verbose,)?(none|closest|single:\d+|per_task:\d+|map_gpu:[0-9*,]+|mask_gpu:[0-9a-fA-Fx*,]+))");
    read_form("gpu_bind", s.gpu_bind, bind,
              "one of Slurm's --gpu-bind forms: none, closest, single:N, per_task:N, map_gpu:LIST, mask_gpu:LIST "
              "(optionally after \"verbose,\")");
    const std::pair<const char*, std::string*> node_keys[] = {
        {"constraint", &s.constraint}, {"nodelist", &s.nodelist}, {"exclude", &s.exclude}};
    for (const auto& [key, value] : node_keys) {
        r.read_string(key, *value);
        check(key, *value, plain(*value, "_-.,[]&|*!()"),
              std::string(key) == "constraint" ? "node features joined with & | , [ ] * ( ) (no spaces)"
                                                : "node names or ranges such as \"gpu[01-04],gpu07\" (no spaces)");
    }
    r.read_string_array("extra_sbatch", s.extra_sbatch);
    for (const std::string& line : s.extra_sbatch) {
        bool ok = line.size() > 1 && line[0] == '-';
        for (char ch : line) ok = ok && (unsigned char)ch >= 0x20 && ch != 0x7f;
        check("extra_sbatch", line.empty() ? std::string("\"\"") : line, ok,
              "sbatch options, one per entry, each starting with '-' (\"--reservation=big\", \"--signal=USR1@120\"), "
              "without newlines or control characters");
    }
    r.read_string("setup", s.setup);
    for (char ch : s.setup)
        if (((unsigned char)ch < 0x20 && ch != '\n' && ch != '\t') || ch == 0x7f) {
            ctx.error(r.where("setup"), "launch.slurm.setup",
                      "has a control character; allowed: shell lines (newlines and tabs) run before srun");
            break;
        }
    r.read_string("container_image", s.container_image);
    check("container_image", s.container_image, plain(s.container_image, "_-.:/@#+"),
          "an image reference without spaces or quotes (\"nvcr.io#nvidia/pytorch:24.05-py3\", \"/shared/img.sqsh\")");
    r.read_string_array("container_mounts", s.container_mounts);
    for (const std::string& m : s.container_mounts) {
        static const std::regex mount(R"(/[^:,\s'"$`\\]*:/[^:,\s'"$`\\]*(:[a-z+_]+)?)");
        check("container_mounts", m.empty() ? std::string("\"\"") : m, std::regex_match(m, mount),
              "\"SRC:DST\" or \"SRC:DST:FLAGS\" with absolute paths, no spaces, commas or quotes (\"/data:/data:ro\")");
    }
    if (!s.container_mounts.empty() && s.container_image.empty())
        ctx.error(r.where("container_mounts"), "launch.slurm.container_mounts",
                  "given without launch.slurm.container_image; allowed: mounts for the image the ranks run in");
    r.read_bool("sbcast", s.sbcast);
    r.finish();
}

// A Kubernetes label key: an optional DNS-subdomain prefix and "/", then a name of 1..63
// letters, digits, '-', '_', '.' starting and ending with a letter or digit.
static bool k8s_label_key(const std::string& key) {
    static const std::regex form(R"(([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?)");
    const size_t slash = key.find('/');
    const size_t name = slash == std::string::npos ? key.size() : key.size() - slash - 1;
    return std::regex_match(key, form) && name <= 63 && (slash == std::string::npos || slash <= 253);
}

// [launch.k8s] (issue 32): written into YAML manifests, so every value is checked for the
// form Kubernetes takes (label keys and values, an image reference without spaces or quotes).
static void read_launch_k8s(TomlContext& ctx, const toml::table& t, JobSpec& job) {
    TableReader r(ctx, t, "launch.k8s");
    K8sSpec& k = job.launch.k8s;
    auto refuse = [&](const char* key, const std::string& given, const std::string& allowed) {
        ctx.error(r.where(key), std::string("launch.k8s.") + key, "got " + quote_input(given) + "; allowed: " + allowed);
    };
    if (r.read_string("image", k.image)) {
        bool ok = !k.image.empty();
        for (char ch : k.image) ok = ok && (unsigned char)ch > ' ' && ch != '"' && ch != '\'' && ch != '\\' && ch != 0x7f;
        if (!ok) refuse("image", k.image, "a container image reference without spaces or quotes (\"registry.example.com/ptd:1.0\")");
    }
    const char* label_allowed = "a Kubernetes label key: an optional DNS prefix and '/', then up to 63 letters, digits, "
                                "'-', '_' or '.' (\"nvidia.com/gpu.clique\", \"topology.kubernetes.io/zone\")";
    if (r.read_string("topology_key", k.topology_key) && !k8s_label_key(k.topology_key))
        refuse("topology_key", k.topology_key, label_allowed);
    r.read_int("nodes_per_domain", k.nodes_per_domain, 1, 1 << 20);
    if (r.read_string("gpu_product", k.gpu_product)) {
        static const std::regex value(R"([A-Za-z0-9]([-_.A-Za-z0-9]{0,61}[A-Za-z0-9])?)");
        if (!std::regex_match(k.gpu_product, value))
            refuse("gpu_product", k.gpu_product, "a Kubernetes label value: up to 63 letters, digits, '-', '_' or '.' "
                                                 "(\"NVIDIA-H100-80GB-HBM3\")");
    }
    if (r.read_string("gpu_product_label", k.gpu_product_label) && !k8s_label_key(k.gpu_product_label))
        refuse("gpu_product_label", k.gpu_product_label, label_allowed);
    // The domains split the nodes evenly: one Job of nodes_per_domain pods each.
    if (k.nodes_per_domain > 0 && job.cluster.nodes > 0 && job.cluster.nodes % k.nodes_per_domain != 0)
        ctx.error(r.where("nodes_per_domain"), "launch.k8s.nodes_per_domain",
                  "got " + std::to_string(k.nodes_per_domain) + ", which does not divide cluster.nodes = " +
                      std::to_string(job.cluster.nodes) + "; allowed: a divisor of the node count");
    if (r.has("nodes_per_domain") && k.topology_key.empty())
        ctx.error(r.where("nodes_per_domain"), "launch.k8s.nodes_per_domain",
                  "given without launch.k8s.topology_key; allowed: with the node label that names the domains");
    r.finish();
}

static void read_launch(TomlContext& ctx, const toml::table& t, JobSpec& job) {
    TableReader r(ctx, t, "launch");
    LaunchSpec& l = job.launch;
    read_enum(r, "mode", l.mode, kLaunchWords);
    r.read_string("hostfile", l.hostfile);
    r.read_string("user", l.user);
    r.read_int("port", l.port, 1, 65535);
    r.read_string("identity", l.identity);
    r.read_string("engine", l.engine);
    r.read_bool("upload", l.upload);
    r.read_string("run_dir", l.run_dir);
    r.read_string("master_addr", l.master_addr);
    r.read_int("master_port", l.master_port, 0, 65535);
    r.read_string_array("env", l.env);
    r.read_bool("accept_new_host_keys", l.accept_new_host_keys);
    r.read_double("connect_timeout_s", l.connect_timeout_s, 0.1, 3600);
    r.read_double("grace_s", l.grace_s, 0, 3600);
    r.read_int("max_restarts", l.max_restarts, 0, 1000);
    r.read_int("checkpoint_every", l.checkpoint_every, 0, 1 << 30);
    for (const std::string& name : l.env) {
        bool ok = !name.empty() && !std::isdigit((unsigned char)name[0]);
        for (char ch : name) ok = ok && (std::isalnum((unsigned char)ch) || ch == '_');
        if (!ok)
            ctx.error(r.where("env"), "launch.env",
                      quote_input(name) + " is not an environment variable name; allowed: letters, digits and _ "
                                    "(not starting with a digit)");
    }
    // issue 28: NCCL's names, written into exported launch scripts.
    r.read_string_array("nccl_ib_hca", l.nccl_ib_hca);
    r.read_string("nccl_socket_ifname", l.nccl_socket_ifname);
    auto device_name = [](const std::string& name) {
        bool ok = !name.empty() && name.size() <= 64;
        for (char ch : name) ok = ok && (std::isalnum((unsigned char)ch) || ch == '_' || ch == '-' || ch == '.' || ch == ':');
        return ok;
    };
    for (const std::string& name : l.nccl_ib_hca)
        if (!device_name(name))
            ctx.error(r.where("nccl_ib_hca"), "launch.nccl_ib_hca",
                      quote_input(name) + " is not an HCA name; allowed: names such as \"mlx5_0\" or \"mlx5_0:1\" (letters, "
                                          "digits, _ - . :)");
    if (!l.nccl_socket_ifname.empty() && !device_name(l.nccl_socket_ifname.front() == '^' ? l.nccl_socket_ifname.substr(1)
                                                                                           : l.nccl_socket_ifname))
        ctx.error(r.where("nccl_socket_ifname"), "launch.nccl_socket_ifname",
                  quote_input(l.nccl_socket_ifname) + " is not an interface name; allowed: a name or prefix such as "
                  "\"eth0\" or \"ib\", or \"^lo\" to exclude one (NCCL_SOCKET_IFNAME)");
    if (l.engine.empty()) ctx.error(r.where("engine"), "launch.engine", "empty; allowed: a program name or path");
    if (l.run_dir.empty()) ctx.error(r.where("run_dir"), "launch.run_dir", "empty; allowed: a folder path");
    if (const toml::table* slurm = r.subtable("slurm")) read_launch_slurm(ctx, *slurm, job);
    if (const toml::table* k8s = r.subtable("k8s")) read_launch_k8s(ctx, *k8s, job);
    r.finish();
}

static void read_estimate(TomlContext& ctx, const toml::table& t, JobSpec& job) {
    TableReader r(ctx, t, "estimate");
    EstimateSpec& e = job.estimate;
    if (read_enum(r, "activation_profile", e.activation_profile, kProfileWords))
        job.origin.activation_profile_defaulted = false;
    read_enum(r, "attention_flops", e.attention_flops, kAttentionFlopsWords);
    r.read_double("cuda_context_gib", e.cuda_context_gib, 0, 1024);
    r.read_double("nccl_gib", e.nccl_gib, 0, 1024);
    r.read_double("fragmentation", e.fragmentation, 0, 0.9);
    mark_written(job, StackKey::cross_entropy, read_enum(r, "cross_entropy", e.cross_entropy, kCrossEntropyWords));
    r.read_double("cublas_workspace_mib", e.cublas_workspace_mib, 0, 65536);
    r.read_bool("memory_efficient_norm", e.memory_efficient_norm);  // menorm
    r.read_bool("deallocate_pipeline_inputs", e.deallocate_pipeline_inputs);  // Llama 3 §3.3.2
    if (r.read_double("headroom", e.headroom, 0, 0.9)) job.origin.headroom_given = true;  // planfw
    job.origin.vocab_pad_defaulted = !r.read_int("vocab_pad", e.vocab_pad, 1, 1 << 20);
    // The overlap keys moved to [parallel] (with Megatron-LM's default, off): an [estimate]
    // spelling is refused with the new place rather than read, since its old default (on) differs.
    for (const char* moved : {"overlap_grad_reduce", "overlap_param_gather"}) {
        bool ignored = false;
        if (r.read_bool(moved, ignored) || r.has(moved))
            ctx.error(r.where(moved), std::string("estimate.") + moved,
                      std::string("moved to [parallel]: write parallel.") + moved + " = " + (ignored ? "true" : "false") +
                          " there (its default is now false, as in Megatron-LM without --" +
                          (std::string_view(moved) == "overlap_grad_reduce" ? "overlap-grad-reduce" : "overlap-param-gather") +
                          "); allowed in [estimate]: not this key");
    }
    r.read_double("zero_bucket_elements", e.zero_bucket_elements, 1, 1e12);
    r.finish();
}

// toml++ parses dotted keys, headers and nested arrays / inline tables recursively: a key
// of 40,000 parts (an 80 KB line) overflowed the stack. This scan runs first and refuses,
// with the line, any structure deeper than a job could use. It does not validate TOML
// (toml++ does that next); it only has to find keys, brackets and strings.
constexpr int kMaxKeyParts = 32;    // cluster.gpu.memory_gib is the deepest real key (3)
constexpr int kMaxTomlNesting = 32;  // arrays and inline tables inside each other

Result<void> check_toml_depth(std::string_view text, const std::string& file) {
    const size_t n = text.size();
    size_t i = 0;
    int line = 1;
    size_t line_start = 0;
    std::vector<char> open;  // '[' array or '{' inline table, innermost last
    bool expect_key = true;
    auto here = [&](size_t at) { return SourceLoc{file, line, (int)(at - line_start) + 1}; };
    auto newline = [&](size_t at) {
        ++line;
        line_start = at + 1;
    };
    // Skips a string starting at text[i] (a quote), counting the lines of multi-line ones.
    auto skip_string = [&] {
        const char q = text[i];
        const bool triple = i + 2 < n && text[i + 1] == q && text[i + 2] == q;
        i += triple ? 3 : 1;
        while (i < n) {
            const char c = text[i];
            if (c == '\\' && q == '"') {
                // An escape; a line-ending backslash still ends a line.
                i += (i + 1 < n && text[i + 1] != '\n') ? 2 : 1;
                continue;
            }
            if (c == '\n') {
                if (!triple) return;  // unterminated: toml++ reports it
                newline(i);
            }
            if (c == q && (!triple || (i + 2 < n && text[i + 1] == q && text[i + 2] == q))) {
                i += triple ? 3 : 1;
                // A closing """ may be followed by up to two more quotes that belong to the text.
                while (triple && i < n && text[i] == q) ++i;
                return;
            }
            ++i;
        }
    };
    // A key (bare, quoted, dotted) up to '=' or ']'; fails when it has too many parts.
    auto scan_key = [&](int nesting) -> Result<void> {
        const size_t start = i;
        // Where the key starts: a quoted part may span lines (a multi-line string), and the
        // error must point at the key, not at a column counted from a later line's start
        // (a negative column; found by fuzz_cluster_profile).
        const SourceLoc key_at = here(start);
        int parts = 1;
        while (i < n) {
            const char c = text[i];
            if (c == '"' || c == '\'') skip_string();
            else if (c == '.') {
                ++parts;
                ++i;
            } else if (c == '=' || c == ']' || c == '\n' || c == '#' || c == '{' || c == '[' || c == '}' || c == ',')
                break;
            else ++i;
        }
        if (parts > kMaxKeyParts || nesting + parts > kMaxKeyParts + kMaxTomlNesting)
            return fail(key_at, "",
                        "a dotted key of " + format_count((unsigned long long)parts) + " parts" +
                            (nesting ? " inside " + std::to_string(nesting) + " nested tables/arrays" : "") +
                            "; allowed: at most " + std::to_string(kMaxKeyParts) + " parts");
        return {};
    };
    while (i < n) {
        const char c = text[i];
        if (c == '\n') {
            newline(i);
            ++i;
            if (open.empty()) expect_key = true;
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\r') {
            ++i;
            continue;
        }
        if (c == '#') {
            while (i < n && text[i] != '\n') ++i;
            continue;
        }
        if (expect_key) {
            expect_key = false;
            if (open.empty() && c == '[') {  // [table] or [[array.of.tables]]
                i += (i + 1 < n && text[i + 1] == '[') ? 2 : 1;
                if (auto r = scan_key(0); !r) return r;
                while (i < n && text[i] != '\n') ++i;  // the rest of a header line is ']' and a comment
                continue;
            }
            if (c != '}') {
                if (auto r = scan_key((int)open.size()); !r) return r;
                continue;
            }
        }
        if (c == '"' || c == '\'') {
            skip_string();
            continue;
        }
        if (c == '[' || c == '{') {
            if ((int)open.size() >= kMaxTomlNesting)
                return fail(here(i), "",
                            "arrays and inline tables nested more than " + std::to_string(kMaxTomlNesting) +
                                " deep; allowed: at most " + std::to_string(kMaxTomlNesting));
            open.push_back(c);
            expect_key = c == '{';
        } else if ((c == ']' || c == '}') && !open.empty()) {
            open.pop_back();
        } else if (c == ',' && !open.empty() && open.back() == '{') {
            expect_key = true;
        }
        ++i;
    }
    return {};
}

Result<toml::table> parse_toml(std::string_view text, const std::string& file) {
    if (auto deep = check_toml_depth(text, file); !deep) return std::unexpected(deep.error());
    try {
        return toml::parse(text, file);
    } catch (const toml::parse_error& e) {
        const auto& src = e.source();
        return fail(SourceLoc{file, (int)src.begin.line, (int)src.begin.column}, "",
                    "invalid TOML: " + std::string(e.description()));
    }
}

// The one strict reader: files, texts and `--set` overrides (job_load.cpp parses the text,
// writes the overrides into the table, then calls this once) all go through it, so every
// key is checked the same way.
Result<JobSpec> load_job_table(const toml::table& doc, const std::string& file, const PresetCatalog& presets) {
    TomlContext ctx{file, {}, {}};
    JobSpec job;
    job.origin.file = file;
    TableReader top(ctx, doc, "");
    using Section = void (*)(TomlContext&, const toml::table&, JobSpec&, const PresetCatalog&);
    struct Entry {
        const char* name;
        Section read;
        bool required;
    };
    static const Entry sections[] = {
        {"model", [](TomlContext& c, const toml::table& t, JobSpec& j, const PresetCatalog& p) { read_model(c, t, j, p); }, true},
        {"cluster", [](TomlContext& c, const toml::table& t, JobSpec& j, const PresetCatalog& p) { read_cluster(c, t, j, p); }, true},
        {"parallel", [](TomlContext& c, const toml::table& t, JobSpec& j, const PresetCatalog&) { read_parallel(c, t, j); }, false},
        {"training", [](TomlContext& c, const toml::table& t, JobSpec& j, const PresetCatalog&) { read_training(c, t, j); }, false},
        {"launch", [](TomlContext& c, const toml::table& t, JobSpec& j, const PresetCatalog&) { read_launch(c, t, j); }, false},
        {"paths", [](TomlContext& c, const toml::table& t, JobSpec& j, const PresetCatalog&) { read_paths(c, t, j); }, false},
        {"estimate", [](TomlContext& c, const toml::table& t, JobSpec& j, const PresetCatalog&) { read_estimate(c, t, j); }, false},
    };
    // Until [training] says otherwise, precision and flash attention follow the GPU.
    job.origin.precision_defaulted = job.origin.flash_attention_defaulted = true;
    job.origin.activation_profile_defaulted = true;
    job.origin.vocab_pad_defaulted = true;  // until [estimate] writes it
    job.origin.stack_keys_written = 0;       // stackdef: until a table writes them
    job.origin.state_dtypes_written = 0;     // recipe: likewise
    job.origin.recipe_keys_written = 0;      // mbrecipe: likewise
    job.origin.micro_batch_given = job.origin.vpp_given = false;  // batchchoice: likewise
    for (const Entry& e : sections) {
        if (e.required) top.require(e.name, "a table");
        const toml::table* t = top.subtable(e.name);
        if (std::string_view(e.name) == "parallel") job.origin.no_layout = t == nullptr;  // the planner's to choose
        if (t) e.read(ctx, *t, job, presets);
    }
    top.finish();
    if (!ctx.diagnostics.empty()) return std::unexpected(Error(std::move(ctx.diagnostics)));
    job.origin.locations = std::move(ctx.locations);
    std::vector<Diagnostic> problems = derive_job_defaults(job);
    const bool dp_unknown = !problems.empty();
    for (Diagnostic& d : validate_job(job)) {
        // Without a derivable dp, checks that use dp would only repeat the problem.
        if (dp_unknown && (d.key == "parallel.dp" || d.key == "training.global_batch" || d.key == "parallel.ep")) continue;
        problems.push_back(std::move(d));
    }
    if (!problems.empty()) return std::unexpected(Error(std::move(problems)));
    choose_unwritten_batching(job);  // batchchoice: a micro-batch / depth the job leaves out
    return job;
}

Result<std::string> read_text_file(const std::string& path, const FileKind& kind) {
    return read_regular_file(path, kind);
}

// ---- writing ---------------------------------------------------------------------------

std::string toml_quote(std::string_view s) {
    std::string out = "\"";
    for (unsigned char ch : s) {
        switch (ch) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\r': out += "\\r"; break;
            default:
                if (ch < 0x20 || ch == 0x7f) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", ch);
                    out += buf;
                } else {
                    out += (char)ch;
                }
        }
    }
    return out + "\"";
}

// Shortest text that reads back to the same double, always with a '.' or exponent so
// TOML keeps it a float.
std::string toml_double(double v) {
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, v);
    std::string s(buf, res.ptr);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
}

void TomlWriter::key(std::string_view k, std::string_view raw_value, std::string_view comment) {
    out_ += std::string(k) + " = " + std::string(raw_value);
    if (!comment.empty()) out_ += "  # " + std::string(comment);
    out_ += '\n';
}
void TomlWriter::header(std::string_view name) {
    if (!out_.empty()) out_ += '\n';
    out_ += "[" + std::string(name) + "]\n";
}
void TomlWriter::comment(std::string_view text) { out_ += "# " + std::string(text) + "\n"; }
void TomlWriter::int_(std::string_view k, long long v, std::string_view c) { key(k, std::to_string(v), c); }
void TomlWriter::dbl(std::string_view k, double v, std::string_view c) { key(k, toml_double(v), c); }
void TomlWriter::boolean(std::string_view k, bool v, std::string_view c) { key(k, v ? "true" : "false", c); }
void TomlWriter::str(std::string_view k, std::string_view v, std::string_view c) { key(k, toml_quote(v), c); }
void TomlWriter::strings(std::string_view k, const std::vector<std::string>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + toml_quote(v[i]);
    key(k, s + "]");
}
void TomlWriter::ints(std::string_view k, const std::vector<int>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    key(k, s + "]");
}
void TomlWriter::string_lists(std::string_view k, const std::vector<std::vector<std::string>>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) {
        s += i ? ", [" : "[";
        for (size_t j = 0; j < v[i].size(); ++j) s += (j ? ", " : "") + toml_quote(v[i][j]);
        s += "]";
    }
    key(k, s + "]");
}

// Write the model keys of `m`; with a base, only those that differ from it.
void write_model_keys(TomlWriter& w, const ModelSpec& m, const ModelSpec* base) {
    auto differs = [&](auto member) { return !base || m.*member != base->*member; };
    if (differs(&ModelSpec::arch)) w.str("arch", to_string(m.arch));
    if (differs(&ModelSpec::layers)) w.int_("layers", m.layers);
    if (differs(&ModelSpec::hidden)) w.int_("hidden", m.hidden);
    if (differs(&ModelSpec::heads)) w.int_("heads", m.heads);
    if (differs(&ModelSpec::kv_heads)) w.int_("kv_heads", m.kv_heads);
    if (differs(&ModelSpec::ffn_hidden)) w.int_("ffn_hidden", m.ffn_hidden);
    if (differs(&ModelSpec::vocab)) w.int_("vocab", m.vocab);
    if (differs(&ModelSpec::seq_len)) w.int_("seq_len", m.seq_len);
    if (differs(&ModelSpec::tied_embeddings)) w.boolean("tied_embeddings", m.tied_embeddings);
    if (differs(&ModelSpec::norm)) w.str("norm", to_string(m.norm));
    if (differs(&ModelSpec::activation)) w.str("activation", to_string(m.activation));
    if (differs(&ModelSpec::position)) w.str("position", to_string(m.position));
    if (differs(&ModelSpec::bias)) w.boolean("bias", m.bias);
    if (differs(&ModelSpec::qkv_bias)) w.boolean("qkv_bias", m.qkv_bias);
    if (differs(&ModelSpec::experts)) w.int_("experts", m.experts);
    if (differs(&ModelSpec::top_k)) w.int_("top_k", m.top_k);
    if (differs(&ModelSpec::rope_theta)) w.dbl("rope_theta", m.rope_theta);
    if (differs(&ModelSpec::norm_eps)) w.dbl("norm_eps", m.norm_eps);
    if (m.dropout && differs(&ModelSpec::dropout)) w.boolean("dropout", *m.dropout);  // oom4
    // mla: written when set (without a base) or when they differ from the base's.
    auto given = [&](auto member) { return base ? m.*member != base->*member : m.*member != 0; };
    for (const ModelShapeKey& k : model_shape_keys())
        if (given(k.member)) w.int_(k.name, m.*k.member);
    if (base ? m.qk_layernorm != base->qk_layernorm : m.qk_layernorm) w.boolean("qk_layernorm", m.qk_layernorm);
}

void write_gpu_keys(TomlWriter& w, const GpuSpec& g, const GpuSpec* base) {
    auto differs = [&](auto member) { return !base || g.*member != base->*member; };
    if (differs(&GpuSpec::description)) w.str("description", g.description);
    if (differs(&GpuSpec::memory_gib)) w.dbl("memory_gib", g.memory_gib);
    if (differs(&GpuSpec::fp32_tflops)) w.dbl("fp32_tflops", g.fp32_tflops);
    if (differs(&GpuSpec::tf32_tflops)) w.dbl("tf32_tflops", g.tf32_tflops);
    if (differs(&GpuSpec::bf16_tflops)) w.dbl("bf16_tflops", g.bf16_tflops);
    if (differs(&GpuSpec::fp16_tflops)) w.dbl("fp16_tflops", g.fp16_tflops);
    if (differs(&GpuSpec::fp8_tflops)) w.dbl("fp8_tflops", g.fp8_tflops);
    if (differs(&GpuSpec::hbm_gbps)) w.dbl("hbm_gbps", g.hbm_gbps);
    if (differs(&GpuSpec::link_gbps)) w.dbl("link_gbps", g.link_gbps);
    if (differs(&GpuSpec::generation)) w.str("generation", to_string(g.generation));
    if (differs(&GpuSpec::link)) w.str("link", to_string(g.link));
    if (differs(&GpuSpec::power_w) && g.power_w > 0) w.dbl("power_w", g.power_w, "W under load (TDP)");  // cost
}

std::string save_job_toml(const JobSpec& job) {
    TomlWriter w;
    w.comment("PTD Studio job spec — keys are documented in docs/job-spec.md");
    const JobSpec::Origin& o = job.origin;
    const ModelSpec& m = job.model;

    w.header("model");
    const ModelSpec* model_base = o.model_base ? &*o.model_base : nullptr;
    if (!o.model_preset.empty() && model_base) w.str("preset", o.model_preset);
    else if (!o.model_hf_config.empty() && model_base) w.str("hf_config", o.model_hf_config);
    else model_base = nullptr;
    if (!model_base || m.name != model_base->name) w.str("name", m.name);
    write_model_keys(w, m, model_base);

    const ClusterSpec& c = job.cluster;
    w.header("cluster");
    if (!o.cluster_preset.empty()) w.str("preset", o.cluster_preset);
    w.int_("nodes", c.nodes);
    w.int_("gpus_per_node", c.gpus_per_node);
    const GpuSpec* gpu_base = o.gpu_base && !o.gpu_preset.empty() ? &*o.gpu_base : nullptr;
    const bool gpu_is_preset = gpu_base && c.gpu == *gpu_base;
    if (gpu_is_preset) w.str("gpu", o.gpu_preset);
    if (o.intra_given || c.intra_gbps != c.gpu.link_gbps) w.dbl("intra_gbps", c.intra_gbps, "GB/s per GPU");
    w.dbl("inter_gbps", c.inter_gbps, "GB/s per GPU");
    if (c.nics_per_node > 0 || !c.rail_optimized || c.nvls) {
        if (c.nics_per_node > 0) w.int_("nics_per_node", c.nics_per_node);
        w.boolean("rail_optimized", c.rail_optimized);
        w.boolean("nvls", c.nvls, "NVLink SHARP");
    }
    // gb200: written when the file gave it; otherwise the (default) cluster preset gives it again.
    if (o.nvlink_domain_given)
        w.int_("nvlink_domain", c.nvlink_domain, "GPUs per NVLink domain");
    if (c.host_memory_gib > 0) w.dbl("host_memory_gib", c.host_memory_gib, "GiB per node");
    if (c.pcie_gbps > 0) w.dbl("pcie_gbps", c.pcie_gbps, "GB/s per GPU, one direction");
    if (c.cpu_adam_params_per_s > 0) w.dbl("cpu_adam_params_per_s", c.cpu_adam_params_per_s, "CPU-Adam parameters/s per node");  // bits
    if (c.host_op_us > 0) w.dbl("host_op_us", c.host_op_us, "host µs per eager PyTorch op");  // hostov
    // cost: written where given (0 = the documented default)
    if (c.gpu_hour_usd > 0) w.dbl("gpu_hour_usd", c.gpu_hour_usd, "USD per GPU-hour");
    if (c.storage_gbps > 0) w.dbl("storage_gbps", c.storage_gbps, "GB/s, checkpoint storage of the whole job");
    if (c.pue > 0) w.dbl("pue", c.pue, "facility power ÷ IT power");
    if (c.host_power_w > 0) w.dbl("host_power_w", c.host_power_w, "W per node besides its GPUs");
    if (c.failures_per_gpu_hour > 0) w.dbl("failures_per_gpu_hour", c.failures_per_gpu_hour);
    if (!c.profile.empty()) w.str("profile", c.profile, "cluster profile (ptd calibrate), relative to this file");
    if (!c.hosts.empty()) w.strings("hosts", c.hosts);

    const ParallelSpec& p = job.parallel;
    if (!job.has_layout()) {
        w.comment("no [parallel] table: the layout is left to `ptd plan`");
    } else {
    w.header("parallel");
    w.int_("tp", p.tp);
    w.int_("pp", p.pp);
    if (o.dp_given) w.int_("dp", p.dp);
    else w.comment("dp = " + std::to_string(p.dp) + " (derived from the world size)");
    w.int_("cp", p.cp);
    w.int_("ep", p.ep);
    // batchchoice: an unwritten vpp stays unwritten (reloading chooses it again).
    if (o.vpp_given) w.int_("vpp", p.vpp);
    else if (p.vpp > 1)
        w.comment("vpp = " + std::to_string(p.vpp) +
                  (job.training.framework == Framework::torchtitan ? " (not written: torchtitan's two stages per rank)"
                                                                   : " (not written: chosen for the interleaved schedule)"));
    w.int_("zero", p.zero);
    // stackdef: a key the job left to its stack stays unwritten (reloading derives it again);
    // one it wrote is kept where it differs from the stack's default.
    const auto own = [&](StackKey k) { return (o.stack_keys_written & stack_key_bit(k)) != 0; };
    const auto keep = [&](StackKey k) { return own(k) && !stack_value_is_default(k, job); };
    if (own(StackKey::distributed_optimizer)) w.boolean("distributed_optimizer", p.distributed_optimizer);
    if (own(StackKey::sequence_parallel)) w.boolean("sequence_parallel", p.sequence_parallel);
    // mbrecipe: the keys a performance recipe sets are written where they differ from what
    // reloading would give them unwritten (the recipe's value, else the plain default); recompute
    // is always written without a recipe.
    const RecipeKeyValues unwritten = recipe_key_defaults(job);
    if (!applied_perf_recipe(job) || p.recompute != unwritten.recompute) w.str("recompute", to_string(p.recompute));
    if (keep(StackKey::recompute_style)) w.str("recompute_style", to_string(p.recompute_style));
    if (p.recompute_modules != recipe_modules_for(p.recompute, unwritten))
        w.strings("recompute_modules", recompute_module_words(p.recompute_modules));  // recmod
    w.str("order", p.order);
    if (!p.pipeline_layout.empty()) w.str("pipeline_layout", p.pipeline_layout);
    else if (!p.layers_per_stage.empty() && !o.layers_per_stage_from_stack) w.ints("layers_per_stage", p.layers_per_stage);
    const ParallelSpec pd;  // overlap keys: only where they differ from the defaults
    if (keep(StackKey::overlap_grad_reduce)) w.boolean("overlap_grad_reduce", p.overlap_grad_reduce);
    if (keep(StackKey::overlap_param_gather)) w.boolean("overlap_param_gather", p.overlap_param_gather);
    if (keep(StackKey::tp_comm_overlap)) w.boolean("tp_comm_overlap", p.tp_comm_overlap);
    if (p.fsdp_prefetch != pd.fsdp_prefetch) w.int_("fsdp_prefetch", p.fsdp_prefetch);
    if (p.dp_replicate != pd.dp_replicate) w.int_("dp_replicate", p.dp_replicate);  // hsdp
    if (keep(StackKey::grad_reduce_in_fp32)) w.boolean("grad_reduce_in_fp32", p.grad_reduce_in_fp32);  // oomnemo
    if (p.activation_offload_layers != pd.activation_offload_layers) w.int_("activation_offload_layers", p.activation_offload_layers);
    if (p.async_tp != pd.async_tp) w.boolean("async_tp", p.async_tp);  // tt405
    if (keep(StackKey::overlap_p2p_comm)) w.boolean("overlap_p2p_comm", p.overlap_p2p_comm);  // blackwell
    if (p.offload_optimizer != OffloadDevice::none) w.str("offload_optimizer", to_string(p.offload_optimizer));
    if (p.offload_params) w.boolean("offload_params", p.offload_params);
    if (p.schedule != PipelineSchedule::automatic) w.str("schedule", to_string(p.schedule));  // zb
    // l405
    if (p.account_for_embedding_in_pipeline_split != unwritten.account_for_embedding)  // mbrecipe
        w.boolean("account_for_embedding_in_pipeline_split", p.account_for_embedding_in_pipeline_split);
    if (p.account_for_loss_in_pipeline_split != unwritten.account_for_loss)
        w.boolean("account_for_loss_in_pipeline_split", p.account_for_loss_in_pipeline_split);
    if (p.microbatch_group_size > 0) w.int_("microbatch_group_size", p.microbatch_group_size);
    if (keep(StackKey::scatter_gather_tensors_in_pipeline))
        w.boolean("scatter_gather_tensors_in_pipeline", p.scatter_gather_tensors_in_pipeline);  // p2psg
    if (keep(StackKey::async_tensor_model_parallel_allreduce))
        w.boolean("async_tensor_model_parallel_allreduce", p.async_tensor_model_parallel_allreduce);  // recomp
    if (p.distribute_saved_activations) w.boolean("distribute_saved_activations", true);  // papers
    if (p.expert_tp > 0) w.int_("expert_tp", p.expert_tp);  // moe2
    if (p.moe_shared_expert_overlap != unwritten.shared_expert_overlap)
        w.boolean("moe_shared_expert_overlap", p.moe_shared_expert_overlap);  // moe2
    if (p.moe_dispatcher != unwritten.dispatcher)  // deepep
        w.str("moe_dispatcher", kMoeDispatcherWords[(size_t)p.moe_dispatcher]);
    if (p.moe_a2a_overlap != unwritten.a2a_overlap) w.boolean("moe_a2a_overlap", p.moe_a2a_overlap);  // deepep
    if (keep(StackKey::moe_permute_fusion)) w.boolean("moe_permute_fusion", p.moe_permute_fusion);  // moeperm
    if (keep(StackKey::moe_router_fusion)) w.boolean("moe_router_fusion", p.moe_router_fusion);  // moerouter
    if (p.cuda_graph_impl != unwritten.graphs) w.str("cuda_graph_impl", to_string(p.cuda_graph_impl));  // hostov
    if (p.cuda_graph_scope != unwritten.graph_scope)
        w.strings("cuda_graph_scope", cuda_graph_scope_words(p.cuda_graph_scope));  // hostov
    if (p.moe_pad_to_capacity != unwritten.pad_to_capacity) w.boolean("moe_pad_to_capacity", p.moe_pad_to_capacity);  // hostov
    if (p.moe_router_padding_for_fp8) w.boolean("moe_router_padding_for_fp8", true);  // moefp8pad
    }

    const TrainingSpec& t = job.training;
    w.header("training");
    // batchchoice: an unwritten micro-batch stays unwritten (reloading chooses it again).
    if (o.micro_batch_given) {
        w.int_("micro_batch", t.micro_batch);
    } else {
        // Whose it is: a recipe's (mbrecipe), torchtitan's own count (ttmb), else PTD's choice.
        std::string whose = "chosen";
        for (const StackDefault& d : o.stack_defaults)
            if (d.key == "training.micro_batch" && d.source.find("of recipe") != std::string::npos) whose = "the recipe's";
            else if (d.key == "training.micro_batch" && d.source.find("torchtitan") != std::string::npos)
                whose = "torchtitan's pipeline micro-batches";
        w.comment("micro_batch = " + std::to_string(t.micro_batch) + " (not written: " + whose + ")");
    }
    if (o.global_batch_given) w.int_("global_batch", t.global_batch);
    if (o.precision_defaulted) w.comment("precision = \"" + std::string(to_string(t.precision)) + "\" (defaulted for the GPU)");
    else w.str("precision", to_string(t.precision));
    w.str("optimizer", to_string(t.optimizer));
    w.dbl("lr", t.lr);
    w.dbl("min_lr", t.min_lr);
    w.int_("warmup", t.warmup);
    w.int_("steps", t.steps);
    if (t.tokens > 0) w.dbl("tokens", t.tokens, "tokens to train");  // cost
    w.dbl("weight_decay", t.weight_decay);
    w.dbl("grad_clip", t.grad_clip);
    w.int_("seed", t.seed);
    w.str("data", t.data);
    if (o.flash_attention_defaulted) w.comment(std::string("flash_attention = ") + (t.flash_attention ? "true" : "false") + " (defaulted for the GPU)");
    else w.boolean("flash_attention", t.flash_attention);
    if (t.framework != Framework::megatron) w.str("framework", to_string(t.framework));
    if (t.framework_version > 0) w.str("framework_version", framework_version_text(t.framework_version));  // stackdef
    if (t.torch_compile) w.boolean("torch_compile", true);
    {  // fp8 (issue 15 point 3): written where it differs from the default
        const TrainingSpec d;
        if (t.fp8 != d.fp8) w.str("fp8", to_string(t.fp8));
        if (t.fp8_format != d.fp8_format) w.str("fp8_format", to_string(t.fp8_format));
        if (t.fp8_amax_history_len != d.fp8_amax_history_len) w.int_("fp8_amax_history_len", t.fp8_amax_history_len);
        if (t.fp8_bf16_first_layers != d.fp8_bf16_first_layers) w.int_("fp8_bf16_first_layers", t.fp8_bf16_first_layers);
        if (t.fp8_bf16_last_layers != d.fp8_bf16_last_layers) w.int_("fp8_bf16_last_layers", t.fp8_bf16_last_layers);
        if ((o.stack_keys_written & stack_key_bit(StackKey::fp8_param_gather)) &&
            !stack_value_is_default(StackKey::fp8_param_gather, job))
            w.boolean("fp8_param_gather", t.fp8_param_gather);  // oomnemo, stackdef
    }
    if (!t.recipe.empty()) w.str("recipe", t.recipe);  // recipe
    {  // oom4: optimizer state dtypes the job wrote, where they differ from its recipe's (recipe)
        const StateDtypeDefaults d = recipe_state_dtypes(t);
        const auto own = [&](int bit) { return (o.state_dtypes_written & bit) != 0; };
        if (own(1) && t.main_params_dtype != d.main_params) w.str("main_params_dtype", to_string(t.main_params_dtype));
        if (own(2) && t.exp_avg_dtype != d.exp_avg) w.str("exp_avg_dtype", to_string(t.exp_avg_dtype));
        if (own(4) && t.exp_avg_sq_dtype != d.exp_avg_sq) w.str("exp_avg_sq_dtype", to_string(t.exp_avg_sq_dtype));
    }
    if (!t.masked_softmax_fusion) w.boolean("masked_softmax_fusion", false);  // papers
    if (t.flash_kernel != FlashKernel::by_date) w.str("flash_attention_kernel", to_string(t.flash_kernel));  // tritonfa

    const LaunchSpec& l = job.launch;
    const LaunchSpec d;
    w.header("launch");
    w.str("mode", to_string(l.mode));
    if (l.hostfile != d.hostfile) w.str("hostfile", l.hostfile);
    if (l.user != d.user) w.str("user", l.user);
    if (l.port != d.port) w.int_("port", l.port);
    if (l.identity != d.identity) w.str("identity", l.identity);
    if (l.engine != d.engine) w.str("engine", l.engine);
    if (l.upload != d.upload) w.boolean("upload", l.upload);
    if (l.run_dir != d.run_dir) w.str("run_dir", l.run_dir);
    if (l.master_addr != d.master_addr) w.str("master_addr", l.master_addr);
    if (l.master_port != d.master_port) w.int_("master_port", l.master_port);
    if (l.env != d.env) w.strings("env", l.env);
    if (l.accept_new_host_keys != d.accept_new_host_keys) w.boolean("accept_new_host_keys", l.accept_new_host_keys);
    if (l.connect_timeout_s != d.connect_timeout_s) w.dbl("connect_timeout_s", l.connect_timeout_s);
    if (l.grace_s != d.grace_s) w.dbl("grace_s", l.grace_s);
    if (l.max_restarts != d.max_restarts) w.int_("max_restarts", l.max_restarts);
    if (l.checkpoint_every != d.checkpoint_every) w.int_("checkpoint_every", l.checkpoint_every);
    if (l.nccl_ib_hca != d.nccl_ib_hca) w.strings("nccl_ib_hca", l.nccl_ib_hca);
    if (l.nccl_socket_ifname != d.nccl_socket_ifname) w.str("nccl_socket_ifname", l.nccl_socket_ifname);
    if (l.slurm != SlurmSpec{}) {  // issue 32
        const SlurmSpec& s = l.slurm;
        w.header("launch.slurm");
        for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"partition", &s.partition},
                                         {"account", &s.account}, {"qos", &s.qos}, {"time", &s.time}})
            if (!value->empty()) w.str(key, *value);
        if (s.exclusive) w.boolean("exclusive", true);
        if (s.cpus_per_task) w.int_("cpus_per_task", s.cpus_per_task);
        for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"mem", &s.mem}, {"gpu_bind", &s.gpu_bind},
                                         {"constraint", &s.constraint}, {"nodelist", &s.nodelist}, {"exclude", &s.exclude}})
            if (!value->empty()) w.str(key, *value);
        if (!s.extra_sbatch.empty()) w.strings("extra_sbatch", s.extra_sbatch);
        if (!s.setup.empty()) w.str("setup", s.setup);
        if (!s.container_image.empty()) w.str("container_image", s.container_image);
        if (!s.container_mounts.empty()) w.strings("container_mounts", s.container_mounts);
        if (s.sbcast) w.boolean("sbcast", true);
    }
    if (l.k8s != K8sSpec{}) {  // issue 32
        const K8sSpec& k = l.k8s;
        w.header("launch.k8s");
        if (!k.image.empty()) w.str("image", k.image);
        if (!k.topology_key.empty()) w.str("topology_key", k.topology_key);
        if (k.nodes_per_domain) w.int_("nodes_per_domain", k.nodes_per_domain);
        if (!k.gpu_product.empty()) w.str("gpu_product", k.gpu_product);
        if (k.gpu_product_label != K8sSpec{}.gpu_product_label) w.str("gpu_product_label", k.gpu_product_label);
    }

    if (job.paths != PathsSpec{}) {  // issue 28
        const PathsSpec& p = job.paths;
        w.header("paths");
        if (!p.tokenizer.empty()) w.str("tokenizer", p.tokenizer);
        if (!p.save.empty()) w.str("save", p.save);
        if (!p.load.empty()) w.str("load", p.load);
        if (!p.logs.empty()) w.str("logs", p.logs);
        if (p.save_interval != 0) w.int_("save_interval", p.save_interval);
    }

    // [estimate] only when something differs from the defaults (the activation profile's
    // follows the GPU).
    const EstimateSpec& e = job.estimate;
    EstimateSpec ed;
    ed.activation_profile = default_activation_profile(c.gpu);
    ed.vocab_pad = default_vocab_pad(job.training.framework);
    // stackdef: the loss implementation the stack gives is not written either.
    if (!(o.stack_keys_written & stack_key_bit(StackKey::cross_entropy)) || stack_value_is_default(StackKey::cross_entropy, job))
        ed.cross_entropy = e.cross_entropy;
    if (e != ed || job.origin.headroom_given) {
        w.header("estimate");
        if (e.activation_profile != ed.activation_profile) w.str("activation_profile", to_string(e.activation_profile));
        if (e.attention_flops != ed.attention_flops) w.str("attention_flops", to_string(e.attention_flops));
        if (e.cuda_context_gib != ed.cuda_context_gib) w.dbl("cuda_context_gib", e.cuda_context_gib);
        if (e.nccl_gib != ed.nccl_gib) w.dbl("nccl_gib", e.nccl_gib);
        if (e.fragmentation != ed.fragmentation) w.dbl("fragmentation", e.fragmentation);
        if (e.headroom != ed.headroom || job.origin.headroom_given) w.dbl("headroom", e.headroom);  // planfw: a written 0 stays
        if (e.vocab_pad != ed.vocab_pad) w.int_("vocab_pad", e.vocab_pad);
        if (e.zero_bucket_elements != ed.zero_bucket_elements) w.dbl("zero_bucket_elements", e.zero_bucket_elements);
        if (e.cross_entropy != ed.cross_entropy) w.str("cross_entropy", to_string(e.cross_entropy));
        if (e.cublas_workspace_mib != ed.cublas_workspace_mib) w.dbl("cublas_workspace_mib", e.cublas_workspace_mib);
        if (e.memory_efficient_norm != ed.memory_efficient_norm) w.boolean("memory_efficient_norm", e.memory_efficient_norm);  // menorm
        if (e.deallocate_pipeline_inputs != ed.deallocate_pipeline_inputs)
            w.boolean("deallocate_pipeline_inputs", e.deallocate_pipeline_inputs);
    }

    // A GPU that is not exactly a preset is written as a table (it must come after the
    // plain keys of every other table, so it goes last).
    if (!gpu_is_preset) {
        w.header("cluster.gpu");
        if (gpu_base) w.str("preset", o.gpu_preset);
        w.str("name", c.gpu.name);
        write_gpu_keys(w, c.gpu, gpu_base);
    }
    return w.text();
}

}  // namespace ptd
