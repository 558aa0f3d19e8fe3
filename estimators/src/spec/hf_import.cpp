// hf_import.cpp — a Hugging Face config.json → ModelSpec (see docs/hf-import.md).
//
// Structure:
//   1. parse the text with nlohmann::json; a parse error is reported with the line and
//      column computed from the byte offset the parser gives;
//   2. find where each top-level key is written (a small scanner over the already-valid
//      text) so that field errors point at their line;
//   3. map the fields of one family (llama-like — Llama, Mistral, Mixtral, Qwen2/3, Qwen3-MoE,
//      DeepSeek-V2/V3 —, gpt2, gpt_neox) through typed getters
//      that collect every problem instead of stopping at the first;
//   4. every top-level field neither mapped nor on the family's allow-list of harmless
//      fields becomes a note "field X is not understood by PTD and was ignored".
// Nothing here throws out of the public functions: the whole body is wrapped, and the
// code is fuzzed (tests/fuzz/fuzz_hf_config.cpp).
#include "ptd/spec/hf_import.h"

#include "ptd/common/file_read.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

namespace ptd {
namespace {

using nlohmann::json;

// Same upper bounds as the [model] keys of a job file (job_toml.cpp), so that an imported
// model is always one the job loader would accept when written out explicitly.
constexpr long long kMaxDim = 1LL << 24;
constexpr long long kMaxLayers = 100000;
constexpr long long kMaxHeads = 65536;
constexpr long long kMaxVocab = 1LL << 28;
constexpr long long kMaxSeq = 1LL << 26;
constexpr long long kMaxExperts = 65536;

const char* const kSupported =
    "llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, deepseek_v2, deepseek_v3, gpt2, gpt_neox";

// mlaio: qwen3 / qwen3_moe (head_dim ≠ hidden/heads, q/k norms, 128 experts) and
// deepseek_v2 / deepseek_v3 (multi-head latent attention, shared experts, dense first
// layers, multi-token prediction) map onto the ModelSpec keys of the same names.
enum class Family { llama, mistral, mixtral, qwen2, gpt2, gpt_neox, qwen3, qwen3_moe, deepseek_v2, deepseek_v3 };

// ---- text positions ------------------------------------------------------------------

// 1-based line and column of byte `offset` in `text`. Columns count characters (UTF-8
// continuation bytes are not counted), so they match what an editor shows.
std::pair<int, int> line_column(std::string_view text, size_t offset) {
    offset = std::min(offset, text.size());
    int line = 1, column = 1;
    for (size_t i = 0; i < offset; ++i) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n') {
            ++line;
            column = 1;
        } else if ((c & 0xC0) != 0x80) {
            ++column;
        }
    }
    return {line, column};
}

// Byte offset of every top-level key of a JSON object (the text must already have parsed
// as an object). For a duplicated key the last one wins, like nlohmann's parser.
std::map<std::string, size_t> top_level_key_offsets(std::string_view text) {
    std::map<std::string, size_t> out;
    int depth = 0;
    size_t i = 0;
    const size_t n = text.size();
    while (i < n) {
        char c = text[i];
        if (c == '"') {
            size_t start = i++;
            while (i < n && text[i] != '"') i += (text[i] == '\\') ? 2 : 1;
            size_t end = std::min(i + 1, n);  // one past the closing quote
            i = end;
            if (depth != 1) continue;
            size_t k = end;
            while (k < n && (text[k] == ' ' || text[k] == '\t' || text[k] == '\n' || text[k] == '\r')) ++k;
            if (k < n && text[k] == ':') {
                // Decode the escapes of the key the same way the parser did.
                json key = json::parse(text.substr(start, end - start), nullptr, false);
                if (key.is_string()) out[key.get<std::string>()] = start;
            }
            continue;
        }
        if (c == '{' || c == '[') ++depth;
        else if (c == '}' || c == ']') --depth;
        ++i;
    }
    return out;
}

// ---- describing JSON values ----------------------------------------------------------

const char* type_phrase(const json& v) {
    switch (v.type()) {
        case json::value_t::null: return "null";
        case json::value_t::boolean: return "a boolean";
        case json::value_t::number_integer:
        case json::value_t::number_unsigned: return "an integer";
        case json::value_t::number_float: return "a number with a fraction or exponent";
        case json::value_t::string: return "a string";
        case json::value_t::array: return "an array";
        case json::value_t::object: return "an object";
        default: return "an unsupported value";
    }
}

// The value as written (re-serialised), shortened for messages.
std::string show(const json& v) {
    if (v.is_string()) return quote_input(v.get_ref<const std::string&>());
    std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (s.size() > 60) s = s.substr(0, 57) + "\u2026 (" + format_count(s.size()) + " characters)";
    return s;
}

// A field name for a message: as is when it is plain, else JSON-quoted (control
// characters, spaces and the like become visible escapes).
std::string show_key(const std::string& key) {
    bool plain = !key.empty() && key.size() <= 80;
    for (unsigned char c : key)
        if (c <= ' ' || c == '"' || c == '\\' || c == 0x7F) plain = false;
    if (plain) return key;
    return quote_input(key);
}

std::string fmt_double(double d) {
    std::ostringstream os;
    os << d;
    return os.str();
}

// ---- the mapper ----------------------------------------------------------------------

class Mapper {
public:
    Mapper(const json& root, std::string_view text, const std::string& file)
        : root_(root), text_(text), file_(file), offsets_(top_level_key_offsets(text)) {}

    std::vector<Diagnostic> errors;
    std::vector<std::string> notes;

    SourceLoc at(const std::string& key) const {
        SourceLoc loc{file_, 0, 0};
        auto it = offsets_.find(key);
        if (it != offsets_.end()) {
            auto [line, column] = line_column(text_, it->second);
            loc.line = line;
            loc.column = column;
        }
        return loc;
    }

    void error(const std::string& key, std::string message) {
        errors.push_back(Diagnostic{at(key), key, std::move(message)});
    }
    void note(std::string text) { notes.push_back(std::move(text)); }
    bool has_errors() const { return !errors.empty(); }

    // Marks `key` as understood and returns its value; nullptr when absent or null.
    const json* get(const std::string& key) {
        known_.insert(key);
        auto it = root_.find(key);
        if (it == root_.end() || it->is_null()) return nullptr;
        return &*it;
    }
    // The value without marking the key understood; nullptr when absent or null.
    const json* peek(const std::string& key) const {
        auto it = root_.find(key);
        if (it == root_.end() || it->is_null()) return nullptr;
        return &*it;
    }
    bool understood(const std::string& key) const { return known_.count(key) > 0; }
    const json& root() const { return root_; }
    bool present(const std::string& key) {
        known_.insert(key);
        auto it = root_.find(key);
        return it != root_.end() && !it->is_null();
    }
    // Fields that are known not to change parameter, FLOP or memory counts.
    void allow(std::initializer_list<const char*> keys) {
        for (const char* k : keys) known_.insert(k);
    }

    // A positive integer in [1, max]. `what` explains the field in messages.
    // Returns `fallback` (and records an error where appropriate) when unusable.
    std::optional<int> int_field(const std::string& key, long long max, const char* what,
                                 std::optional<int> fallback) {
        const json* v = get(key);
        if (!v) {
            if (fallback) return fallback;
            auto it = root_.find(key);
            if (it != root_.end())
                error(key, std::string("got null, expected a positive integer (") + what + ")");
            else
                error(key, std::string("is required but missing; expected a positive integer (") +
                               what + ")");
            return std::nullopt;
        }
        std::string expected = std::string("expected a positive integer (") + what + ")";
        if (v->is_number_unsigned()) {
            uint64_t u = v->get<uint64_t>();
            if (u == 0) {
                error(key, "got 0, " + expected);
                return std::nullopt;
            }
            if (u > (uint64_t)max) {
                error(key, "got " + std::to_string(u) + ", which is too large (at most " +
                               std::to_string(max) + ")");
                return std::nullopt;
            }
            return (int)u;
        }
        if (v->is_number_integer()) {  // negative (non-negative ones are unsigned)
            error(key, "got " + std::to_string(v->get<int64_t>()) + ", " + expected);
            return std::nullopt;
        }
        if (v->is_number_float()) {
            double d = v->get<double>();
            if (std::isfinite(d) && d == std::floor(d) && d > (double)max)
                error(key, "got " + show(*v) + ", which is too large (at most " +
                               std::to_string(max) + "), and not an integer literal");
            else
                error(key, "got " + show(*v) + " (" + type_phrase(*v) + "), expected an integer without a "
                           "fraction or exponent (" + what + ")");
            return std::nullopt;
        }
        error(key, "got " + show(*v) + " (" + type_phrase(*v) + "), " + expected);
        return std::nullopt;
    }

    // A finite number in (lo, hi]; `fallback` when absent or null.
    double number_field(const std::string& key, double lo, double hi, const char* what,
                        double fallback) {
        const json* v = get(key);
        if (!v) return fallback;
        if (!v->is_number()) {
            error(key, "got " + show(*v) + " (" + type_phrase(*v) + "), expected a number (" + what + ")");
            return fallback;
        }
        double d = v->get<double>();
        if (!std::isfinite(d) || !(d > lo) || d > hi) {
            error(key, "got " + show(*v) + ", expected a number greater than " + fmt_double(lo) +
                           " and at most " + fmt_double(hi) + " (" + what + ")");
            return fallback;
        }
        return d;
    }

    bool bool_field(const std::string& key, bool fallback) {
        const json* v = get(key);
        if (!v) return fallback;
        if (!v->is_boolean()) {
            error(key, "got " + show(*v) + " (" + type_phrase(*v) + "), expected true or false");
            return fallback;
        }
        return v->get<bool>();
    }

    std::optional<std::string> string_field(const std::string& key) {
        const json* v = get(key);
        if (!v) return std::nullopt;
        if (!v->is_string()) {
            error(key, "got " + show(*v) + " (" + type_phrase(*v) + "), expected a string");
            return std::nullopt;
        }
        return v->get<std::string>();
    }

    // An object, or absent/null. Wrong types are errors.
    const json* object_field(const std::string& key) {
        const json* v = get(key);
        if (!v) return nullptr;
        if (!v->is_object()) {
            error(key, "got " + show(*v) + " (" + type_phrase(*v) + "), expected an object or null");
            return nullptr;
        }
        return v;
    }

    // Notes for every top-level field nobody asked for, in file order.
    void note_unknown_fields() {
        std::vector<std::pair<size_t, std::string>> unknown;
        for (auto it = root_.begin(); it != root_.end(); ++it) {
            if (known_.count(it.key())) continue;
            auto off = offsets_.find(it.key());
            unknown.emplace_back(off == offsets_.end() ? SIZE_MAX : off->second, it.key());
        }
        std::sort(unknown.begin(), unknown.end());
        for (const auto& [offset, key] : unknown)
            note("field " + show_key(key) + " is not understood by PTD and was ignored");
    }

private:
    const json& root_;
    std::string_view text_;
    const std::string& file_;
    std::map<std::string, size_t> offsets_;
    std::set<std::string> known_;
};

// Fields of transformers' PretrainedConfig and of the exported file itself that describe
// tokens, generation, bookkeeping or numerics — never the shapes PTD counts.
void allow_common(Mapper& m) {
    m.allow({"_name_or_path", "model_type", "architectures", "auto_map", "torch_dtype",
             "transformers_version", "_commit_hash", "_attn_implementation",
             "_attn_implementation_autoset", "bos_token_id", "eos_token_id", "pad_token_id",
             "sep_token_id", "decoder_start_token_id", "forced_bos_token_id",
             "forced_eos_token_id", "initializer_range", "use_cache", "return_dict",
             "output_hidden_states", "output_attentions", "torchscript", "use_bfloat16",
             "tf_legacy_loss", "is_decoder", "tie_encoder_decoder", "chunk_size_feed_forward",
             "finetuning_task", "id2label", "label2id", "num_labels", "tokenizer_class",
             "prefix", "task_specific_params", "problem_type", "max_length", "min_length",
             "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
             "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
             "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
             "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate",
             "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
             "begin_suppress_tokens", "classifier_dropout"});
}

// Fields that are harmless at their default but change the architecture otherwise.
void check_default_only(Mapper& m) {
    if (m.present("add_cross_attention") && m.bool_field("add_cross_attention", false))
        m.error("add_cross_attention",
                "got true (a cross-attention block in every layer, for encoder-decoder use), "
                "which PTD cannot model; allowed: false");
    if (m.present("is_encoder_decoder") && m.bool_field("is_encoder_decoder", false))
        m.error("is_encoder_decoder", "got true, but PTD models decoder-only transformers; allowed: false");
    if (const json* p = m.object_field("pruned_heads"); p && !p->empty())
        m.error("pruned_heads", "got " + show(*p) + ", but PTD cannot model pruned attention heads; "
                                "allowed: {} (no pruning)");
}

// rope_scaling, and transformers 5's rope_parameters (which also holds rope_theta): the
// scaling kind is noted (the pre-training length it keeps is read by set_seq_len).
void note_rope_scaling(Mapper& m) {
    for (const char* holder : {"rope_scaling", "rope_parameters"}) {
        const json* rs = m.object_field(holder);
        if (!rs) continue;
        std::string kind;
        for (const char* k : {"rope_type", "type"}) {
            auto it = rs->find(k);
            if (it != rs->end() && it->is_string()) {
                kind = it->get<std::string>();
                break;
            }
        }
        if (kind == "default" && std::string(holder) == "rope_parameters") continue;  // no scaling
        std::string factor;
        if (auto it = rs->find("factor"); it != rs->end() && it->is_number())
            factor = ", factor " + show(*it);
        m.note(std::string(holder) + " (" + (kind.empty() ? std::string("unnamed") : "type " + show(json(kind))) +
               factor + ") is ignored: RoPE scaling changes neither parameter nor FLOP counts");
    }
}

// rope_theta, or in transformers 5 configs rope_parameters.rope_theta.
double read_rope_theta(Mapper& m, double fallback) {
    if (const json* rp = m.peek("rope_parameters"); rp && rp->is_object() && !m.present("rope_theta")) {
        auto it = rp->find("rope_theta");
        if (it != rp->end() && !it->is_null()) {
            if (it->is_number() && std::isfinite(it->get<double>()) && it->get<double>() > 0 && it->get<double>() <= 1e12)
                return it->get<double>();
            m.error("rope_parameters", "rope_theta: got " + show(*it) +
                                           ", expected a number greater than 0 and at most 1e+12 (the RoPE base)");
            return fallback;
        }
    }
    return m.number_field("rope_theta", 0, 1e12, "the RoPE base", fallback);
}

// Fields of other model families that change the shapes PTD counts. transformers itself
// ignores a field its config class does not know, so a DeepSeek-V3 config relabelled
// "llama" would import as a 38.6B dense model instead of the 671B MoE it describes: each
// of these is an error (naming the field, its value and what it means) whenever it is
// set to something other than "off" (null, 0, false, an empty list, or only full
// attention). Fields the family maps itself are understood before this runs.
struct ArchitectureField {
    const char* key;
    const char* meaning;
};
const ArchitectureField kArchitectureFields[] = {
    {"kv_lora_rank", "low-rank compressed keys and values (multi-head latent attention, DeepSeek-V2/V3)"},
    {"q_lora_rank", "low-rank compressed queries (multi-head latent attention, DeepSeek-V2/V3)"},
    {"qk_rope_head_dim", "a separate RoPE part of each query/key head (multi-head latent attention)"},
    {"qk_nope_head_dim", "a separate non-RoPE part of each query/key head (multi-head latent attention)"},
    {"v_head_dim", "a value head width different from the query/key heads"},
    {"n_routed_experts", "routed mixture-of-experts layers (DeepSeek)"},
    {"n_shared_experts", "shared experts that every token passes through (DeepSeek MoE)"},
    {"num_experts", "mixture-of-experts layers (Qwen-MoE, OLMoE naming)"},
    {"num_local_experts", "mixture-of-experts layers (Mixtral naming)"},
    {"num_experts_per_tok", "tokens routed to several experts (a mixture-of-experts model)"},
    {"moe_intermediate_size", "expert MLPs with their own width"},
    {"shared_expert_intermediate_size", "a shared expert MLP with its own width (Qwen-MoE)"},
    {"first_k_dense_replace", "dense layers before the mixture-of-experts layers (DeepSeek)"},
    {"moe_layer_freq", "how often a layer is a mixture-of-experts layer"},
    {"decoder_sparse_step", "how often a layer is a mixture-of-experts layer (Qwen-MoE)"},
    {"interleave_moe_layer_step", "mixture-of-experts layers interleaved with dense ones (Llama 4)"},
    {"mlp_only_layers", "dense layers among the mixture-of-experts layers (Qwen-MoE)"},
    {"num_nextn_predict_layers", "extra multi-token-prediction layers (DeepSeek-V3)"},
    {"layer_types", "a per-layer attention type (sliding-window layers alternating with full attention)"},
    {"sliding_window_pattern", "sliding-window layers alternating with full attention (Gemma)"},
    {"attention_chunk_size", "chunked local attention (Llama 4)"},
    {"no_rope_layers", "layers without RoPE (Llama 4)"},
    {"sliding_window", "sliding-window attention, which this model_type does not have"},
    {"use_sliding_window", "sliding-window attention, which this model_type does not have"},
    {"num_kv_heads", "grouped key/value heads under another family's name (Falcon)"},
    {"n_kv_heads", "grouped key/value heads under another family's name"},
    {"multi_query", "multi-query attention (one key/value head, Falcon/StarCoder)"},
    {"new_decoder_architecture", "Falcon's parallel attention/MLP block with grouped heads"},
    {"parallel_attn", "attention and MLP in parallel (Falcon)"},
    {"encoder_layers", "an encoder stack (an encoder-decoder model)"},
    {"decoder_layers", "a separate decoder stack (an encoder-decoder model)"},
    {"text_config", "a multimodal model whose language model is described in text_config"},
    {"vision_config", "a vision tower (a multimodal model)"},
    {"audio_config", "an audio tower (a multimodal model)"},
    {"cross_attention_layers", "cross-attention layers (a multimodal model)"},
};

// "Off" values of the fields above: null, 0, false, "", [], {}, or a layer_types list of
// full attention only.
bool field_is_off(const std::string& key, const json& v) {
    if (v.is_null()) return true;
    if (v.is_boolean()) return !v.get<bool>();
    if (v.is_number()) return v.get<double>() == 0;
    if (v.is_string()) return v.get_ref<const std::string&>().empty();
    if (v.is_array() && key == "layer_types")
        return std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string() && e.get<std::string>() == "full_attention"; });
    if (v.is_array() || v.is_object()) return v.empty();
    return false;
}

void check_architecture_fields(Mapper& m, const std::string& model_type) {
    for (const ArchitectureField& f : kArchitectureFields) {
        if (m.understood(f.key)) continue;
        auto it = m.root().find(f.key);
        if (it == m.root().end()) continue;
        m.allow({f.key});
        if (field_is_off(f.key, *it)) continue;
        m.error(f.key, "got " + show(*it) + ": " + f.meaning + ". PTD's model_type " + quote_input(model_type) +
                           " has no such part, so parameter, FLOP and memory counts would be wrong; import "
                           "the config under its own model_type if PTD supports it (" + kSupported +
                           "), or write the [model] keys by hand");
    }
}

// Fields that are read but change no count PTD makes: a note says why each is ignored.
void note_harmless_fields(Mapper& m) {
    struct Harmless {
        const char* key;
        const char* why;
    };
    static const Harmless kHarmless[] = {
        {"quantization_config", "weight quantization is a storage format; PTD counts training in the job's precision"},
        {"partial_rotary_factor", "RoPE on part of each head changes neither parameter nor FLOP counts"},
        {"attn_logit_softcapping", "capping attention logits changes no count"},
        {"final_logit_softcapping", "capping output logits changes no count"},
        {"query_pre_attn_scalar", "an attention scale changes no count"},
        {"use_qk_norm", "q/k normalisation (2 x head_dim parameters per layer) is read for Qwen3 only; set model.qk_layernorm = true in the job for this family"},
        {"qk_layernorm", "q/k normalisation (2 x head_dim parameters per layer) is read for Qwen3 only; set model.qk_layernorm = true in the job for this family"},
        {"router_aux_loss_coef", "a training loss weight changes no count"},
        {"output_router_logits", "returning router logits changes no count"},
    };
    for (const Harmless& h : kHarmless) {
        if (m.understood(h.key)) continue;
        auto it = m.root().find(h.key);
        if (it == m.root().end()) continue;
        m.allow({h.key});
        m.note("field " + std::string(h.key) + " = " + show(*it) + " is ignored: " + h.why);
    }
}

// Cross-field checks on the attention shape. Only run when the fields themselves parsed.
void check_heads(Mapper& m, const ModelSpec& s, const char* hidden_key, const char* heads_key,
                 const char* kv_key) {
    // mlaio: a given head_dim (Qwen3, MLA's qk_nope_head_dim) frees hidden from being heads × d.
    if (s.head_dim_given == 0 && s.hidden % s.heads != 0) {
        m.error(heads_key, "hidden size " + std::to_string(s.hidden) + " (" + hidden_key +
                               ") is not divisible by " + std::to_string(s.heads) + " heads; PTD needs a "
                               "whole head dimension hidden/heads");
        return;
    }
    if (kv_key && (s.kv_heads > s.heads || s.heads % s.kv_heads != 0))
        m.error(kv_key, "got " + std::to_string(s.kv_heads) + ", but " + heads_key + " (" +
                            std::to_string(s.heads) + ") must be a multiple of it (grouped-query "
                            "attention shares each key/value head among heads/kv_heads query heads)");
}

// The context the model was pre-trained with, where RoPE scaling (Llama 3.1's "llama3",
// YaRN, LongRoPE, ...) stretched max_position_embeddings beyond it: the scaling object
// keeps the original length. Returns the field's name and value, or nothing.
std::optional<std::pair<std::string, int>> pretraining_context(Mapper& m) {
    for (const char* holder : {"rope_scaling", "rope_parameters"}) {
        const json* rs = m.peek(holder);
        if (!rs || !rs->is_object()) continue;
        auto it = rs->find("original_max_position_embeddings");
        if (it == rs->end() || it->is_null()) continue;
        const std::string field = std::string(holder) + ".original_max_position_embeddings";
        if (!it->is_number_unsigned() || it->get<uint64_t>() == 0 || it->get<uint64_t>() > (uint64_t)kMaxSeq) {
            m.error(holder, field + ": got " + show(*it) + ", expected a positive integer at most " +
                                std::to_string(kMaxSeq) + " (the context length of pre-training)");
            return std::nullopt;
        }
        return std::make_pair(field, (int)it->get<uint64_t>());
    }
    return std::nullopt;
}

// seq_len from the config's context length, unless overridden. A note always says which
// value was taken and from where: a 131,072-token max_position_embeddings taken silently
// makes every activation estimate 16 times too large.
void set_seq_len(Mapper& m, ModelSpec& s, const std::vector<const char*>& keys, int override_len) {
    std::optional<int> ctx;
    const char* used = nullptr;
    for (const char* k : keys) {
        if (m.present(k)) {
            ctx = m.int_field(k, kMaxSeq, "the context length", std::nullopt);
            used = k;
            break;
        }
        // An explicit null still counts as "not given" for this key.
    }
    const auto original = pretraining_context(m);
    if (override_len > 0) {
        s.seq_len = override_len;
        std::string config_side;
        if (original) config_side = original->first + " = " + format_count(original->second);
        if (ctx) config_side += std::string(config_side.empty() ? "" : ", ") + used + " = " + format_count(*ctx);
        m.note("seq_len = " + format_count(override_len) + " from the job's [model] seq_len" +
               (config_side.empty() ? std::string() : " (the config has " + config_side + ")"));
        if (ctx && override_len > *ctx)
            m.note("sequence length " + std::to_string(override_len) + " is longer than " + used + " (" +
                   std::to_string(*ctx) + ") the model was built for");
        return;
    }
    if (original && (!ctx || original->second <= *ctx)) {
        s.seq_len = original->second;
        m.note("seq_len = " + format_count(original->second) + " from " + original->first +
               ", the context of pre-training" +
               (ctx ? "; " + std::string(used) + " = " + format_count(*ctx) +
                          " is the context RoPE scaling extends it to (set [model] seq_len to train longer)"
                    : std::string()));
    } else if (ctx) {
        s.seq_len = *ctx;
        m.note("seq_len = " + format_count(*ctx) + " from " + used + " (set [model] seq_len to train shorter)");
    } else if (!used) {
        // Let int_field write the standard "missing" message for the primary key.
        m.int_field(keys.front(), kMaxSeq, "the context length, used as the training sequence length",
                    std::nullopt);
    }
}

// ---- families ------------------------------------------------------------------------

// mlaio: a count that may be 0 (n_shared_experts, first_k_dense_replace); null or absent
// gives `fallback`.
std::optional<int> count_field(Mapper& m, const std::string& key, long long max, const char* what, int fallback) {
    const json* v = m.peek(key);
    m.allow({key.c_str()});
    if (!v) return fallback;
    if (v->is_number_unsigned() && v->get<uint64_t>() == 0) return 0;
    return m.int_field(key, max, what, std::nullopt);
}

// mlaio: the MoE shape of qwen3_moe and DeepSeek, read before the base shape is known.
struct MoeFields {
    bool present = false;               // an MoE model (experts > 0)
    std::optional<int> experts, top_k, expert_ffn;
    int shared_ffn = 0, dense_first = 0;
    int groups = 0, group_topk = 0;     // deepep: node-limited routing (n_group / topk_group)
    const char* experts_key = "";
};

// qwen3_moe (transformers' Qwen3MoeDecoderLayer): layer i is sparse when i is not in
// mlp_only_layers, num_experts > 0 and (i + 1) % decoder_sparse_step == 0. PTD models every
// layer sparse, so only decoder_sparse_step 1 with mlp_only_layers empty is accepted.
MoeFields read_qwen3_moe(Mapper& m) {
    MoeFields f;
    f.present = true;
    f.experts_key = "num_experts";
    f.experts = m.int_field("num_experts", kMaxExperts, "routed experts per MoE layer", std::nullopt);
    f.top_k = m.int_field("num_experts_per_tok", kMaxExperts, "experts each token is routed to", std::nullopt);
    f.expert_ffn = m.int_field("moe_intermediate_size", kMaxDim * 8, "each expert's MLP width", std::nullopt);
    if (auto step = count_field(m, "decoder_sparse_step", kMaxLayers, "every n-th layer is sparse", 1); step && *step != 1)
        m.error("decoder_sparse_step", "got " + std::to_string(*step) + ": one layer in " + std::to_string(*step) +
                                           " is a mixture-of-experts layer, the others dense; PTD models dense "
                                           "layers only before the MoE layers (first_dense_layers); allowed: 1");
    if (const json* only = m.get("mlp_only_layers"); only && !(only->is_array() && only->empty()))
        m.error("mlp_only_layers", "got " + show(*only) + ": these layers have a dense MLP among the mixture-of-"
                                   "experts layers, which PTD cannot place; allowed: [] (every layer sparse)");
    m.allow({"router_aux_loss_coef", "output_router_logits", "max_window_layers"});
    if (const json* n = m.get("norm_topk_prob"))
        m.note("norm_topk_prob = " + show(*n) + " is ignored: how the top-k routing weights are normalised changes no count");
    return f;
}

// DeepSeek-V2/V3 (transformers' DeepseekV3DecoderLayer): layer i has the MoE block when
// n_routed_experts is set, i >= first_k_dense_replace and i % moe_layer_freq == 0; the
// shared experts are n_shared_experts MLPs of moe_intermediate_size, run as one MLP of
// n_shared_experts × moe_intermediate_size (Megatron --moe-shared-expert-intermediate-size).
MoeFields read_deepseek_moe(Mapper& m) {
    MoeFields f;
    f.experts_key = "n_routed_experts";
    f.present = m.present("n_routed_experts") && !field_is_off("n_routed_experts", *m.peek("n_routed_experts"));
    // Routing details: which experts win, not how many run or how wide they are.
    std::vector<std::string> routing;
    // deepep: n_group / topk_group (DeepSeek's group-limited routing: each token's experts come
    // from topk_group of n_group groups) are model.moe_router_num_groups / moe_router_group_topk
    // (Megatron --moe-router-num-groups / --moe-router-group-topk), which bound the nodes a
    // token's dispatch reaches; one group is no limit.
    if (f.present) {
        auto groups = count_field(m, "n_group", kMaxExperts, "expert groups for group-limited routing", 0);
        auto group_topk = count_field(m, "topk_group", kMaxExperts, "groups each token's experts come from", 0);
        if (groups && group_topk && *groups > 1) f.groups = *groups, f.group_topk = *group_topk;
    } else {
        m.allow({"n_group", "topk_group"});
    }
    for (const char* k : {"topk_method", "routed_scaling_factor", "scoring_func",
                          "norm_topk_prob", "aux_loss_alpha", "seq_aux", "ep_size"})
        if (const json* v = m.get(k)) routing.push_back(std::string(k) + " = " + show(*v));
    if (!routing.empty()) {
        std::string list;
        for (const auto& r : routing) list += (list.empty() ? "" : ", ") + r;
        m.note(list + " are ignored: routing and load-balancing details change no parameter, FLOP or memory count");
    }
    if (!f.present) {
        // Without routed experts every layer is dense (transformers builds no MoE block), so
        // the other MoE fields describe nothing.
        for (const char* k : {"num_experts_per_tok", "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace", "moe_layer_freq"})
            m.allow({k});
        return f;
    }
    f.experts = m.int_field("n_routed_experts", kMaxExperts, "routed experts per MoE layer", std::nullopt);
    f.top_k = m.int_field("num_experts_per_tok", kMaxExperts, "experts each token is routed to", std::nullopt);
    f.expert_ffn = m.int_field("moe_intermediate_size", kMaxDim * 8, "each routed expert's MLP width", std::nullopt);
    auto shared = count_field(m, "n_shared_experts", kMaxExperts, "shared experts every token passes", 0);
    auto dense = count_field(m, "first_k_dense_replace", kMaxLayers, "leading layers with a dense MLP", 0);
    if (auto freq = count_field(m, "moe_layer_freq", kMaxLayers, "every n-th layer is an MoE layer", 1); freq && *freq != 1)
        m.error("moe_layer_freq", "got " + std::to_string(*freq) + ": after first_k_dense_replace, one layer in " +
                                      std::to_string(*freq) + " is a mixture-of-experts layer, the others dense; PTD "
                                      "models dense layers only before the MoE layers (first_dense_layers); allowed: 1");
    if (shared && f.expert_ffn) {
        if ((long long)*shared * *f.expert_ffn > kMaxDim * 8)
            m.error("n_shared_experts", "got " + std::to_string(*shared) + ": n_shared_experts × moe_intermediate_size is "
                                        "too large (at most " + std::to_string(kMaxDim * 8) + ")");
        else
            f.shared_ffn = *shared * *f.expert_ffn;
    }
    if (dense) f.dense_first = *dense;
    return f;
}

// Multi-head latent attention (DeepSeek-V2/V3): queries through a q_lora_rank bottleneck
// (null: projected directly, DeepSeek-V2-Lite), keys and values from a kv_lora_rank latent,
// heads of qk_nope_head_dim + qk_rope_head_dim (queries/keys) and v_head_dim (values).
struct MlaFields {
    std::optional<int> kv_lora, nope, rope, v;
    int q_lora = 0;
    bool q_lora_ok = true;
};

MlaFields read_mla(Mapper& m) {
    MlaFields f;
    f.kv_lora = m.int_field("kv_lora_rank", kMaxDim, "the key/value latent width of multi-head latent attention", std::nullopt);
    if (!m.root().contains("q_lora_rank")) {
        m.int_field("q_lora_rank", kMaxDim, "the query latent width, or null for directly projected queries", std::nullopt);
        f.q_lora_ok = false;
    } else if (m.present("q_lora_rank")) {
        auto q = m.int_field("q_lora_rank", kMaxDim, "the query latent width, or null for directly projected queries", std::nullopt);
        f.q_lora_ok = q.has_value();
        f.q_lora = q.value_or(0);
    }
    f.nope = m.int_field("qk_nope_head_dim", kMaxHeads, "each query/key head's width without RoPE", std::nullopt);
    f.rope = m.int_field("qk_rope_head_dim", kMaxHeads, "each query/key head's RoPE width", std::nullopt);
    f.v = m.int_field("v_head_dim", kMaxHeads, "each value head's width", std::nullopt);
    if (m.present("attention_bias") && m.bool_field("attention_bias", false))
        m.error("attention_bias", "got true (biases on MLA's projections), which PTD cannot model; allowed: false");
    m.allow({"rope_interleave", "mscale", "mscale_all_dim"});
    return f;
}

void apply_mla(Mapper& m, const MlaFields& f, ModelSpec& s) {
    if (!(f.kv_lora && f.nope && f.rope && f.v && f.q_lora_ok)) return;
    s.kv_lora_rank = *f.kv_lora;
    s.q_lora_rank = f.q_lora;
    s.head_dim_given = *f.nope;
    s.qk_rope_head_dim = *f.rope;
    s.v_head_dim = *f.v;
    if (s.kv_heads != s.heads)
        m.note("num_key_value_heads = " + std::to_string(s.kv_heads) + " is ignored: multi-head latent attention "
               "gives every one of the " + std::to_string(s.heads) + " heads its own key and value");
    s.kv_heads = s.heads;
    m.note("multi-head latent attention: the RMSNorms on the query and key/value latents (q_lora_rank + "
           "kv_lora_rank parameters per layer) are left out");
}

void apply_moe(Mapper& m, const MoeFields& f, ModelSpec& s) {
    if (!f.present || !(f.experts && f.top_k && f.expert_ffn)) return;
    if (*f.experts < 2) {
        m.error(f.experts_key, "got " + std::to_string(*f.experts) + ", but a mixture-of-experts model needs at least "
                               "2 experts; allowed: 2 or more");
        return;
    }
    if (*f.top_k > *f.experts) {
        m.error("num_experts_per_tok", "got " + std::to_string(*f.top_k) + ", but only " + std::to_string(*f.experts) +
                                           " experts exist (" + f.experts_key + ")");
        return;
    }
    if (f.dense_first >= s.layers) {
        m.error("first_k_dense_replace", "got " + std::to_string(f.dense_first) + " with " + std::to_string(s.layers) +
                                             " layers (num_hidden_layers): no mixture-of-experts layer would remain; "
                                             "allowed: 0 .. " + std::to_string(s.layers - 1));
        return;
    }
    s.experts = *f.experts;
    s.top_k = *f.top_k;
    s.moe_ffn_hidden = *f.expert_ffn;
    s.shared_expert_ffn_hidden = f.shared_ffn;
    s.first_dense_layers = f.dense_first;
    s.moe_router_num_groups = f.groups;  // deepep
    s.moe_router_group_topk = f.group_topk;
}


// The shape every family reads (kv_heads = heads where the family has no GQA); false, with
// nothing written, when a field was missing or invalid (its diagnostic is recorded already).
bool take_shape(ModelSpec& s, std::optional<int> layers, std::optional<int> hidden, std::optional<int> heads,
                std::optional<int> kv_heads, std::optional<int> vocab) {
    if (!(layers && hidden && heads && kv_heads && vocab)) return false;
    s.layers = *layers;
    s.hidden = *hidden;
    s.heads = *heads;
    s.kv_heads = *kv_heads;
    s.vocab = *vocab;
    return true;
}

void map_llama_like(Mapper& m, Family fam, ModelSpec& s, int seq_override) {
    s.arch = Arch::llama;
    s.norm = Norm::rmsnorm;
    s.activation = Activation::swiglu;
    s.position = Position::rope;
    s.bias = false;
    s.qkv_bias = fam == Family::qwen2;  // Qwen2 always has q/k/v biases

    auto layers = m.int_field("num_hidden_layers", kMaxLayers, "the number of transformer blocks", std::nullopt);
    auto hidden = m.int_field("hidden_size", kMaxDim, "the model width", std::nullopt);
    auto heads = m.int_field("num_attention_heads", kMaxHeads, "the number of query heads", std::nullopt);
    std::optional<int> kv = m.int_field("num_key_value_heads", kMaxHeads, "the number of key/value heads",
                                        heads ? heads : std::optional<int>(1));
    auto ffn = m.int_field("intermediate_size", kMaxDim * 8, "the MLP inner width", std::nullopt);
    auto vocab = m.int_field("vocab_size", kMaxVocab, "the vocabulary size", std::nullopt);
    set_seq_len(m, s, {"max_position_embeddings"}, seq_override);
    s.tied_embeddings = m.bool_field("tie_word_embeddings", false);
    s.norm_eps = m.number_field("rms_norm_eps", 0, 1, "the RMSNorm epsilon",
                                fam == Family::mixtral ? 1e-5 : 1e-6);
    s.rope_theta = read_rope_theta(m, 10000.0);

    if (auto act = m.string_field("hidden_act"); act && *act != "silu" && *act != "swish")
        m.error("hidden_act", "got " + show(json(*act)) + ", but llama-style configs must use \"silu\" (a SwiGLU MLP); allowed: silu, swish");

    // Biases. Llama's attention_bias puts a bias on q, k, v and o; mlp_bias on gate/up/down.
    // mlaio: Qwen3's attention_bias is Llama's (q, k, v and o); DeepSeek's is checked in map_deepseek.
    const bool llama_biases = fam == Family::llama || fam == Family::qwen3 || fam == Family::qwen3_moe;
    bool attention_bias = llama_biases && m.bool_field("attention_bias", false);
    bool mlp_bias = fam == Family::llama && m.bool_field("mlp_bias", false);
    if (attention_bias && mlp_bias) {
        s.bias = true;
        s.qkv_bias = false;
        m.note("attention_bias and mlp_bias are both true: modelled as biases on every linear layer (bias = true)");
    } else if (attention_bias) {
        s.qkv_bias = true;
        m.note("attention_bias = true puts biases on the q, k, v and o projections; PTD models the q/k/v "
               "biases (qkv_bias = true) and approximates the o_proj bias (hidden_size parameters per "
               "layer) by leaving it out");
    } else if (mlp_bias) {
        m.error("mlp_bias", "got true (biases on the MLP projections only), which PTD cannot model; allowed: "
                            "false, or true together with attention_bias = true (biases everywhere)");
    }

    if (fam == Family::mixtral) {
        auto experts = m.int_field("num_local_experts", kMaxExperts, "experts per MoE layer", std::nullopt);
        auto top_k = m.int_field("num_experts_per_tok", kMaxExperts, "experts each token is routed to", std::nullopt);
        if (experts && top_k) {
            s.experts = *experts;
            s.top_k = *top_k;
            if (*top_k > *experts)
                m.error("num_experts_per_tok", "got " + std::to_string(*top_k) + ", but only " +
                                                   std::to_string(*experts) + " experts exist (num_local_experts)");
        }
        m.allow({"router_aux_loss_coef", "output_router_logits", "router_jitter_noise"});
    }

    // Sliding-window attention: same weights, fewer attended tokens.
    const bool qwen = fam == Family::qwen2 || fam == Family::qwen3 || fam == Family::qwen3_moe;  // mlaio
    if (fam == Family::mistral || fam == Family::mixtral || qwen) {
        bool use_window = !qwen;
        if (qwen) {
            use_window = m.bool_field("use_sliding_window", false);
            m.allow({"max_window_layers"});
        }
        if (m.present("sliding_window")) {
            auto window = m.int_field("sliding_window", INT_MAX, "the attention window in tokens", std::nullopt);
            if (window && use_window)
                m.note("sliding_window = " + std::to_string(*window) + " is ignored: a sliding attention "
                       "window does not change parameter counts (attention FLOPs are counted for full "
                       "causal attention)");
        }
    }

    note_rope_scaling(m);
    m.allow({"attention_dropout", "pretraining_tp"});
    // mlaio: the MoE and MLA fields of qwen3_moe and DeepSeek; checked against the shape below.
    MoeFields moe;
    if (fam == Family::qwen3_moe) moe = read_qwen3_moe(m);
    MlaFields mla;
    const bool deepseek = fam == Family::deepseek_v2 || fam == Family::deepseek_v3;
    std::optional<int> mtp = 0;
    if (deepseek) {
        mla = read_mla(m);
        moe = read_deepseek_moe(m);
        // DeepSeek-V3's multi-token-prediction modules (V2 has none: the field is then an error).
        if (fam == Family::deepseek_v3)
            mtp = count_field(m, "num_nextn_predict_layers", 64, "multi-token-prediction modules", 0);
    }
    // Qwen3's q_norm / k_norm (an RMSNorm over each head's query and key): model.qk_layernorm.
    const bool qk_norm = fam == Family::qwen3 || fam == Family::qwen3_moe;
    std::optional<int> head_dim;
    if (deepseek) m.allow({"head_dim"});  // transformers writes qk_rope_head_dim there; MLA's widths are read above
    else if (m.present("head_dim")) head_dim = m.int_field("head_dim", kMaxHeads, "the per-head width", std::nullopt);

    if (!ffn || !take_shape(s, layers, hidden, heads, kv, vocab)) return;
    s.ffn_hidden = *ffn;
    // mlaio: head_dim ≠ hidden/heads (Qwen3: 128 with hidden 5120 and 64 heads) is modelled
    // (ModelSpec::head_dim_given, Megatron --kv-channels); equal to it, it changes nothing.
    if (head_dim && (s.hidden % s.heads != 0 || *head_dim != s.hidden / s.heads)) s.head_dim_given = *head_dim;
    if (deepseek) apply_mla(m, mla, s);
    check_heads(m, s, "hidden_size", "num_attention_heads", deepseek ? nullptr : "num_key_value_heads");
    apply_moe(m, moe, s);
    if (mtp) s.mtp_layers = *mtp;
    s.qk_layernorm = qk_norm;
}

bool is_gelu(const std::string& a) { return a.starts_with("gelu") || a == "quick_gelu"; }

void check_gelu(Mapper& m, const char* key, const char* fallback) {
    auto act = m.string_field(key);
    std::string a = act ? *act : fallback;
    if (!is_gelu(a))
        m.error(key, "got " + show(json(a)) + ", but PTD models GPT-style MLPs with GELU; allowed: gelu, "
                                              "gelu_new, gelu_fast, gelu_pytorch_tanh (any gelu variant)");
}

// The GPT block both GPT families share: LayerNorm, a GELU MLP, biases on every linear layer
// (qkv_bias is implied by bias), at the family's position embedding.
void set_gpt_block(ModelSpec& s, Position position) {
    s.arch = Arch::gpt;
    s.norm = Norm::layernorm;
    s.activation = Activation::gelu;
    s.position = position;
    s.bias = true;
    s.qkv_bias = false;  // implied by bias
}

void map_gpt2(Mapper& m, ModelSpec& s, int seq_override) {
    set_gpt_block(s, Position::learned);

    auto layers = m.int_field("n_layer", kMaxLayers, "the number of transformer blocks", std::nullopt);
    auto hidden = m.int_field("n_embd", kMaxDim, "the model width", std::nullopt);
    auto heads = m.int_field("n_head", kMaxHeads, "the number of attention heads", std::nullopt);
    auto vocab = m.int_field("vocab_size", kMaxVocab, "the vocabulary size", std::nullopt);
    set_seq_len(m, s, {"n_positions", "n_ctx"}, seq_override);
    m.present("n_ctx");  // read as the fallback above; known either way
    std::optional<int> inner;
    if (m.present("n_inner"))
        inner = m.int_field("n_inner", kMaxDim * 8, "the MLP inner width; null means 4*n_embd", std::nullopt);
    s.norm_eps = m.number_field("layer_norm_epsilon", 0, 1, "the LayerNorm epsilon", 1e-5);
    s.tied_embeddings = m.bool_field("tie_word_embeddings", true);
    check_gelu(m, "activation_function", "gelu_new");
    m.allow({"attn_pdrop", "embd_pdrop", "resid_pdrop", "summary_type", "summary_use_proj",
             "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
             "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"});

    if (!take_shape(s, layers, hidden, heads, heads, vocab)) return;
    if (m.present("n_inner")) {
        if (!inner) return;
        s.ffn_hidden = *inner;
    } else if (4LL * s.hidden > kMaxDim * 8) {
        m.error("n_embd", "got " + std::to_string(s.hidden) + ", which makes the default MLP width 4*n_embd too large");
        return;
    } else {
        s.ffn_hidden = 4 * s.hidden;
    }
    check_heads(m, s, "n_embd", "n_head", nullptr);
}

void map_gpt_neox(Mapper& m, ModelSpec& s, int seq_override) {
    set_gpt_block(s, Position::rope);

    auto layers = m.int_field("num_hidden_layers", kMaxLayers, "the number of transformer blocks", std::nullopt);
    auto hidden = m.int_field("hidden_size", kMaxDim, "the model width", std::nullopt);
    auto heads = m.int_field("num_attention_heads", kMaxHeads, "the number of attention heads", std::nullopt);
    auto ffn = m.int_field("intermediate_size", kMaxDim * 8, "the MLP inner width", std::nullopt);
    auto vocab = m.int_field("vocab_size", kMaxVocab, "the vocabulary size", std::nullopt);
    set_seq_len(m, s, {"max_position_embeddings"}, seq_override);
    s.norm_eps = m.number_field("layer_norm_eps", 0, 1, "the LayerNorm epsilon", 1e-5);
    s.tied_embeddings = m.bool_field("tie_word_embeddings", false);
    check_gelu(m, "hidden_act", "gelu");
    // Newer transformers call the RoPE base rope_theta, older ones rotary_emb_base.
    double base = m.number_field("rotary_emb_base", 0, 1e12, "the RoPE base", 10000.0);
    s.rope_theta = m.number_field("rope_theta", 0, 1e12, "the RoPE base", base);

    if (m.present("rotary_pct")) {
        double pct = m.number_field("rotary_pct", 0, 1, "the fraction of each head rotated by RoPE", 1.0);
        if (pct != 1.0)
            m.note("rotary_pct = " + fmt_double(pct) + " (RoPE on " + fmt_double(pct * 100) +
                   "% of each head's dimensions) is ignored: partial rotary changes neither parameter nor "
                   "FLOP counts");
    }
    if (m.bool_field("use_parallel_residual", true))
        m.note("use_parallel_residual = true (attention and MLP read the same block input) is ignored: it "
               "changes neither parameter nor FLOP counts");
    if (m.present("attention_bias") && !m.bool_field("attention_bias", true))
        m.note("attention_bias = false: PTD models biases on every linear layer (bias = true), so the "
               "attention biases (4*hidden_size parameters per layer) are over-counted");
    note_rope_scaling(m);
    m.allow({"hidden_dropout", "attention_dropout", "attention_probs_dropout_prob",
             "hidden_dropout_prob"});

    if (!ffn || !take_shape(s, layers, hidden, heads, heads, vocab)) return;
    s.ffn_hidden = *ffn;
    check_heads(m, s, "hidden_size", "num_attention_heads", nullptr);
}

// Real config.json files nest 3 or 4 levels (task_specific_params, quantization_config).
// nlohmann parses any depth, but printing a value (every message shows what was given)
// recurses once per level: an 8 MB "[[[[..." would overflow the stack. Refused first.
constexpr int kMaxJsonNesting = 64;

Result<void> check_json_depth(std::string_view text, const std::string& file) {
    int depth = 0;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '"') {
            for (++i; i < text.size() && text[i] != '"'; ++i)
                if (text[i] == '\\') ++i;
        } else if (c == '[' || c == '{') {
            if (++depth > kMaxJsonNesting) {
                auto [line, column] = line_column(text, i);
                return fail(SourceLoc{file, line, column}, "",
                            "objects and arrays nested more than " + std::to_string(kMaxJsonNesting) +
                                " deep; allowed: at most " + std::to_string(kMaxJsonNesting) +
                                " (a config.json nests 3 or 4)");
            }
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return {};
}

Result<HfImport> import_impl(std::string_view text, const std::string& file, int seq_len_override) {
    if (auto deep = check_json_depth(text, file); !deep) return std::unexpected(deep.error());
    json root;
    try {
        root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/true,
                           /*ignore_comments=*/false);
    } catch (const json::parse_error& e) {
        // e.byte counts the characters read, the offending one included.
        size_t offset = e.byte > 0 ? e.byte - 1 : 0;
        auto [line, column] = line_column(text, offset);
        // Keep nlohmann's explanation, without its own "[json.exception...] ... column N: " prefix.
        std::string what = e.what();
        if (size_t p = what.find(": "); p != std::string::npos) what = what.substr(p + 2);
        return fail(SourceLoc{file, line, column}, "", "invalid JSON: " + what);
    }
    if (!root.is_object()) {
        size_t first = text.find_first_not_of(" \t\r\n\xEF\xBB\xBF");  // skip a BOM too
        auto [line, column] = line_column(text, first == std::string_view::npos ? 0 : first);
        return fail(SourceLoc{file, line, column}, "",
                    std::string("the top level of a Hugging Face config.json must be an object ({...}); got ") +
                        type_phrase(root));
    }

    Mapper m(root, text, file);
    allow_common(m);
    auto model_type = m.string_field("model_type");
    if (!model_type) {
        if (!m.has_errors())
            m.error("model_type", std::string("is required but missing; supported: ") + kSupported);
        return std::unexpected(Error(std::move(m.errors)));
    }
    static const std::vector<std::pair<std::string, Family>> kFamilies = {
        {"llama", Family::llama}, {"mistral", Family::mistral}, {"mixtral", Family::mixtral},
        {"qwen2", Family::qwen2}, {"gpt2", Family::gpt2},       {"gpt_neox", Family::gpt_neox},
        // mlaio
        {"qwen3", Family::qwen3}, {"qwen3_moe", Family::qwen3_moe}, {"deepseek_v2", Family::deepseek_v2},
        {"deepseek_v3", Family::deepseek_v3}};
    auto fam_it = std::find_if(kFamilies.begin(), kFamilies.end(),
                               [&](const auto& f) { return f.first == *model_type; });
    if (fam_it == kFamilies.end()) {
        std::vector<std::string> names;
        for (const auto& f : kFamilies) names.push_back(f.first);
        std::string hint = closest_match(*model_type, names);
        m.error("model_type", "got " + show(json(*model_type)) + ", which PTD cannot import" +
                                  (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)") +
                                  "; supported: " + kSupported);
        return std::unexpected(Error(std::move(m.errors)));
    }

    HfImport out;
    ModelSpec& s = out.model;
    s = ModelSpec{};
    switch (fam_it->second) {
        case Family::gpt2: map_gpt2(m, s, seq_len_override); break;
        case Family::gpt_neox: map_gpt_neox(m, s, seq_len_override); break;
        default: map_llama_like(m, fam_it->second, s, seq_len_override); break;
    }
    check_default_only(m);
    check_architecture_fields(m, *model_type);
    auto name = m.string_field("_name_or_path");
    s.name = name && !name->empty() ? *name : *model_type;

    if (m.has_errors()) {
        // File order, so that a long list reads top to bottom.
        std::stable_sort(m.errors.begin(), m.errors.end(), [](const Diagnostic& a, const Diagnostic& b) {
            auto ka = a.where.line == 0 ? INT_MAX : a.where.line;
            auto kb = b.where.line == 0 ? INT_MAX : b.where.line;
            return ka < kb;
        });
        return std::unexpected(Error(std::move(m.errors)));
    }
    note_harmless_fields(m);
    m.note_unknown_fields();
    out.notes = std::move(m.notes);
    return out;
}

}  // namespace

Result<HfImport> import_hf_config_text(std::string_view json_text, const std::string& file,
                                       int seq_len_override) {
    try {
        return import_impl(json_text, file, seq_len_override);
    } catch (const std::exception& e) {
        return fail(SourceLoc{file, 0, 0}, "", std::string("cannot import the config: ") + e.what());
    } catch (...) {
        return fail(SourceLoc{file, 0, 0}, "", "cannot import the config: unknown error");
    }
}

Result<HfImport> import_hf_config_file(const std::string& path, int seq_len_override) {
    try {
        auto text = read_regular_file(path, file_kind::hf_config);
        if (!text) return std::unexpected(text.error());
        return import_hf_config_text(*text, path, seq_len_override);
    } catch (const std::exception& e) {
        return fail(SourceLoc{path, 0, 0}, "", "cannot read " + path + ": " + e.what());
    } catch (...) {
        return fail(SourceLoc{path, 0, 0}, "", "cannot read " + path + ": unknown error");
    }
}

}  // namespace ptd
