// run_file.h — opens a bench/accuracy data file (published_runs.toml, published_memory.toml)
// and hands back its [[run]] tables, for bench_accuracy and bench_memory alike. A file that is
// not TOML, has no [[run]] array or a [[run]] that is not a table stops the program with
// "file:line: message" and exit status 2, as every other error in these files does.
// ttmem: it also holds what both benches must read the same way: a run's FSDP under pipeline
// parallelism, its loss, and the part of a prediction that a measured memory figure covers.
// bits (D6): and the [[run]]'s layout keys (read_run_layout), read by one code path for both;
// and the arguments and presets every accuracy bench starts from (take_bench_arg, presets_or_exit).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <toml++/toml.h>

#include "ptd/model/estimate.h"
#include "ptd/spec/presets.h"

// The arguments every accuracy bench reads alike, after its own options: --help prints
// `usage` and exits 0; another word starting with '-' is an error naming `program` (exit
// status 2); any other word is the runs file, into `path`.
inline void take_bench_arg(const char* program, const char* usage, const char* arg, std::string& path) {
    if (std::strcmp(arg, "--help") == 0) {
        std::printf("%s", usage);
        std::exit(0);
    }
    if (arg[0] == '-') {
        std::fprintf(stderr, "%s: unknown option or missing value \"%s\"\n%s", program, arg, usage);
        std::exit(2);
    }
    path = arg;
}

// The presets the benches predict with; presets that do not load stop the program with
// their diagnostics and exit status 2.
inline ptd::PresetCatalog presets_or_exit() {
    auto presets = ptd::load_presets();
    if (!presets) {
        std::fprintf(stderr, "%s", presets.error().str().c_str());
        std::exit(2);
    }
    return std::move(*presets);
}

// `doc` owns the tables; the returned pointers live as long as it does.
inline std::vector<const toml::table*> load_run_tables(const std::string& path, toml::table& doc) {
    try {
        doc = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
        std::fprintf(stderr, "%s:%d:%d: invalid TOML: %s\n", path.c_str(), (int)e.source().begin.line,
                     (int)e.source().begin.column, std::string(e.description()).c_str());
        std::exit(2);
    }
    const toml::array* arr = doc["run"].as_array();
    if (!arr || arr->empty()) {
        std::fprintf(stderr, "%s: no [[run]] entries\n", path.c_str());
        std::exit(2);
    }
    std::vector<const toml::table*> tables;
    for (const toml::node& n : *arr) {
        if (!n.is_table()) {
            std::fprintf(stderr, "%s:%d: each [[run]] must be a table\n", path.c_str(), (int)n.source().begin.line);
            std::exit(2);
        }
        tables.push_back(n.as_table());
    }
    return tables;
}

// FSDP (fsdp = true) as PTD's layout: zero 3, what a job file writes for it. Without pipeline
// parallelism that is ZeRO-3. With it (only torchtitan's runs have both) the estimate runs it
// as torchtitan does (effective_sharding, estimate.h "ttfsdp"): parallelize_llama.py apply_fsdp
// at 9dec370 keeps the blocks' parameters unsharded after forward (reshard_after_forward =
// False when pp is enabled) and torch.distributed.pipelining's stage (backward_maybe_with_nosync)
// defers FSDP's gradient reduce-scatter to the last micro-batch, so whole 16-bit parameters
// and whole fp32 (reduce dtype) gradients live through the step and only the fp32 parameter
// and Adam states stay sharded.
inline void apply_fsdp_layout(ptd::ParallelSpec& p) {
    p.zero = 3;
    p.distributed_optimizer = false;
}

// torchtitan's loss: F.cross_entropy(pred.float()), compiled with training.compile from 2025
// (components/loss.py build_cross_entropy_loss) and never at 9dec370 (train.py: "compiling
// loss function causes CUDA errors, turning off for now"); the run file says which
// (compiled_loss).
inline ptd::CrossEntropyImpl pytorch_cross_entropy(bool compiled_loss) {
    return compiled_loss ? ptd::CrossEntropyImpl::pytorch_compiled : ptd::CrossEntropyImpl::pytorch;
}

// The part of one stage's prediction that a measured figure of `kind` covers:
//   max_reserved   model states + activations + temporary buffers + fragmentation
//                  (the caching allocator's segments; no CUDA context, no NCCL buffers)
//   max_allocated  model states + activations + temporary buffers (live tensors only)
//   nvidia-smi     everything, CUDA context and NCCL buffers included
inline double predicted_view_bytes(const ptd::MemoryBreakdown& m, const std::string& kind) {
    const double allocated = m.model_states() + m.activations + m.temp;
    if (kind == "max_allocated") return allocated;
    if (kind == "max_reserved") return allocated + m.fragmentation;
    return m.total();
}

// A published figure is the maximum over all GPUs: the stage whose prediction in that view
// is largest.
inline double predicted_view_gib(const ptd::Estimate& e, const std::string& kind) {
    double worst = 0;
    for (const ptd::StageEstimate& s : e.stages) worst = std::max(worst, predicted_view_bytes(s.mem, kind));
    return worst / (1024.0 * 1024.0 * 1024.0);
}

// bits (D6): "file:line: message" on stderr and exit status 2, the line of `n` (else `fallback_line`).
[[noreturn]] inline void run_file_fail(const std::string& path, const toml::node* n, int fallback_line,
                                       const std::string& msg) {
    const int line = n ? (int)n->source().begin.line : fallback_line;
    std::fprintf(stderr, "%s:%d: %s\n", path.c_str(), line, msg.c_str());
    std::exit(2);
}

// A run key's value, or `fallback` when absent. A value of the wrong type is an error naming
// the file, line and key (never a silent default). toml++'s value<T>() converts between
// booleans and numbers (`sequence_parallel = 1` read as true, `tp = true` as 1, `tp = 2.0` as
// 2), so only the exact TOML type is taken: a boolean for bool, an integer for int, a string
// for strings; a number of either kind for double.
template <class T>
T run_key(const std::string& path, const toml::table& t, const char* key, T fallback) {
    const toml::node* n = t.get(key);
    if (!n) return fallback;
    bool exact_type = true;
    if constexpr (std::is_same_v<T, bool>) exact_type = n->is_boolean();
    else if constexpr (std::is_integral_v<T>) exact_type = n->is_integer();
    else if constexpr (std::is_floating_point_v<T>) exact_type = n->is_number();
    else exact_type = n->is_string();
    std::optional<T> v = exact_type ? n->value<T>() : std::nullopt;
    if (!v) run_file_fail(path, n, 0, std::string("run key \"") + key + "\" has the wrong type");
    return *v;
}

// A string run key that must be one of `allowed`.
inline std::string run_word(const std::string& path, const toml::table& t, const char* key, const std::string& fallback,
                            std::initializer_list<const char*> allowed) {
    const std::string v = run_key<std::string>(path, t, key, fallback);
    for (const char* a : allowed)
        if (v == a) return v;
    std::string list;
    for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    run_file_fail(path, t.get(key), 0, std::string("run key \"") + key + "\" is \"" + v + "\"; allowed: " + list);
}

// A model given by its shape, as both data files' rows give it: arch "gpt" (Megatron-LM's GPT
// defaults: GELU, LayerNorm, learned positions, tied embeddings, dropout) or "llama", layers,
// hidden, heads, kv_heads (= heads), ffn_hidden (4·hidden), vocab (51200), seq_len (2048);
// then the arch's defaults, and dropout (oom4), tied_embeddings and position where the row
// states them.
inline void read_run_model_shape(const std::string& path, const toml::table& t, ptd::ModelSpec& m) {
    m.arch = run_word(path, t, "arch", "gpt", {"gpt", "llama"}) == "llama" ? ptd::Arch::llama : ptd::Arch::gpt;
    m.layers = run_key<int>(path, t, "layers", 0);
    m.hidden = run_key<int>(path, t, "hidden", 0);
    m.heads = run_key<int>(path, t, "heads", 0);
    m.kv_heads = run_key<int>(path, t, "kv_heads", m.heads);
    m.ffn_hidden = run_key<int>(path, t, "ffn_hidden", 4 * m.hidden);
    m.vocab = run_key<int>(path, t, "vocab", 51200);
    m.seq_len = run_key<int>(path, t, "seq_len", 2048);
    ptd::ModelKeysGiven given;
    given.kv_heads = given.ffn_hidden = true;
    ptd::fill_model_defaults(m, given);
    if (t.get("dropout")) m.dropout = run_key<bool>(path, t, "dropout", true);
    if (t.get("tied_embeddings")) m.tied_embeddings = run_key<bool>(path, t, "tied_embeddings", true);
    // A gpt-shaped model with rotary positions (Nemotron-4: position_embedding_type rope) has no
    // s·h learned position table on the first stage.
    if (t.get("position"))
        m.position = run_word(path, t, "position", "learned", {"learned", "rope"}) == "rope" ? ptd::Position::rope
                                                                                         : ptd::Position::learned;
}

// The shape keys past the dense transformer's, as both data files' rows give them (read after
// read_run_model_shape): routed experts and experts per token (experts, top_k), and the recent
// open models' keys (ModelSpec's model_shape_keys: head_dim, moe_ffn_hidden, MLA's ranks,
// mtp_layers, ...) with qk_layernorm; each checked where it is read, so a typo stops the bench.
inline void read_run_moe_mla_shape(const std::string& path, const toml::table& t, ptd::ModelSpec& m) {
    {  // moe: routed experts per layer and experts per token, as model.experts / model.top_k
        m.experts = run_key<int>(path, t, "experts", 0);
        m.top_k = run_key<int>(path, t, "top_k", 0);
        if (m.experts == 1 || m.experts < 0)
            run_file_fail(path, t.get("experts"), 0, "run key \"experts\" is " + std::to_string(m.experts) +
                                              "; allowed: 0 (dense MLP) or at least 2");
        if (m.experts > 1 && (m.top_k < 1 || m.top_k > m.experts))
            run_file_fail(path, t.get("top_k") ? t.get("top_k") : t.get("experts"), 0,
                    "run key \"top_k\" is " + std::to_string(m.top_k) + " with experts = " +
                        std::to_string(m.experts) + "; allowed: 1 .. experts");
        if (m.experts == 0 && t.get("top_k"))
            run_file_fail(path, t.get("top_k"), 0, "run key \"top_k\" without \"experts\"; allowed: top_k with experts >= 2");
    }
    {  // mlarows: the shape keys of recent open models (ModelSpec, docs/job-spec.md [model]), checked
       // where they are read so a typo stops the bench instead of skipping the run
        auto shape_key = [&](const char* key) {
            const int v = run_key<int>(path, t, key, 0);
            if (v < 0)
                run_file_fail(path, t.get(key), 0, std::string("run key \"") + key + "\" is " + std::to_string(v) +
                                           "; allowed: 0 (not used) or more");
            return v;
        };
        for (const ptd::ModelShapeKey& k : ptd::model_shape_keys()) m.*k.member = shape_key(k.name);
        m.qk_layernorm = run_key<bool>(path, t, "qk_layernorm", false);  // mla: Qwen3's per-head q / k norms
        for (const char* key : {"moe_ffn_hidden", "shared_expert_ffn_hidden", "first_dense_layers"})
            if (m.experts < 2 && run_key<int>(path, t, key, 0) != 0)
                run_file_fail(path, t.get(key), 0, std::string("run key \"") + key + "\" for a dense model; allowed: 0 unless experts >= 2");
        if (m.experts >= 2 && m.first_dense_layers >= m.layers)
            run_file_fail(path, t.get("first_dense_layers"), 0, "run key \"first_dense_layers\" is " + std::to_string(m.first_dense_layers) +
                                                        " with " + std::to_string(m.layers) + " layers; allowed: 0 .. layers - 1");
        if (!m.mla()) {
            for (const char* key : {"q_lora_rank", "qk_rope_head_dim", "v_head_dim"})
                if (run_key<int>(path, t, key, 0) != 0)
                    run_file_fail(path, t.get(key), 0, std::string("run key \"") + key +
                                               "\" without \"kv_lora_rank\"; allowed: 0, or kv_lora_rank > 0 (MLA)");
        } else {
            for (const char* key : {"qk_rope_head_dim", "v_head_dim"})
                if (run_key<int>(path, t, key, 0) < 1)
                    run_file_fail(path, t.get("kv_lora_rank"), 0, std::string("run key \"kv_lora_rank\" without \"") + key +
                                                          "\"; allowed: MLA with qk_rope_head_dim and v_head_dim >= 1");
            if (t.get("kv_heads") && m.kv_heads != m.heads)
                run_file_fail(path, t.get("kv_heads"), 0, "run key \"kv_heads\" is " + std::to_string(m.kv_heads) +
                                                  " with kv_lora_rank (MLA); allowed: heads (" + std::to_string(m.heads) + ") or leave it out");
        }
    }
}

// The experts' layout keys (read after read_run_layout): ep, expert_tp (unset = tp), the token
// dispatcher and its all-to-all overlap.
inline void read_run_expert_layout(const std::string& path, const toml::table& t, const ptd::ModelSpec& m,
                                   ptd::ParallelSpec& p) {
    // moe: expert parallelism (Megatron --expert-model-parallel-size; validate_job checks that it
    // divides the experts and, with expert_tp, tp·cp·dp).
    p.ep = run_key<int>(path, t, "ep", 1);
    if (p.ep < 1) run_file_fail(path, t.get("ep"), 0, "run key \"ep\" is " + std::to_string(p.ep) + "; allowed: 1 or more");
    if (p.ep > 1 && m.experts < 2)
        run_file_fail(path, t.get("ep"), 0, "run key \"ep\" is " + std::to_string(p.ep) + " for a dense model; allowed: 1 unless experts >= 2");

    // mlarows: the experts' own tensor parallelism (Megatron --expert-tensor-parallel-size, "MoE
    // parallel folding"), parallel.expert_tp; unset = tp, as Megatron-core defaults it.
    const int expert_tp = run_key<int>(path, t, "expert_tp", p.tp);
    if (expert_tp < 1)
        run_file_fail(path, t.get("expert_tp"), 0, "run key \"expert_tp\" is " + std::to_string(expert_tp) + "; allowed: 1 or more");
    if (t.get("expert_tp") && m.experts < 2)
        run_file_fail(path, t.get("expert_tp"), 0, "run key \"expert_tp\" for a dense model; allowed: expert_tp with experts >= 2");
    p.expert_tp = expert_tp == p.tp ? 0 : expert_tp;
    // deepep: Megatron-core's token dispatcher (flex with the deepep / hybridep backend, or the
    // all-to-all one) and --overlap-moe-expert-parallel-comm (Megatron-Bridge moe_a2a_overlap);
    // validate_job checks the overlap's preconditions.
    const std::string dispatcher = run_word(path, t, "moe_dispatcher", "alltoall", {"alltoall", "deepep", "hybridep"});
    p.moe_dispatcher = dispatcher == "deepep"     ? ptd::MoeDispatcher::deepep
                     : dispatcher == "hybridep" ? ptd::MoeDispatcher::hybridep
                                                : ptd::MoeDispatcher::alltoall;
    p.moe_a2a_overlap = run_key<bool>(path, t, "moe_a2a_overlap", false);
    for (const char* key : {"moe_dispatcher", "moe_a2a_overlap"})
        if (t.get(key) && m.experts < 2)
            run_file_fail(path, t.get(key), 0, std::string("run key \"") + key + "\" for a dense model; allowed: with experts >= 2");
}

// A run key that lists words of a bit set (word_of(k) names bit k, k < count), as that bit
// set: `n` must be an array (a non-empty one if `non_empty`; else the message says what it
// must be, as `what`), and an entry that is no such word is an error listing the allowed ones.
inline uint32_t run_word_bits(const std::string& path, const toml::node& n, const char* key, bool non_empty,
                              const char* what, const char* (*word_of)(int), int count) {
    const toml::array* arr = n.as_array();
    if (!arr || (non_empty && arr->empty()))
        run_file_fail(path, &n, 0, std::string("run key \"") + key + "\" must be " + what);
    uint32_t bits = 0;
    for (const toml::node& e : *arr) {
        const std::optional<std::string> w = e.value<std::string>();
        int bit = -1;
        std::string allowed;
        for (int k = 0; k < count; ++k) {
            if (w && *w == word_of(k)) bit = k;
            allowed += std::string(k ? ", " : "") + word_of(k);
        }
        if (bit < 0)
            run_file_fail(path, &e, 0, std::string("run key \"") + key + "\" has " + (w ? "\"" + *w + "\"" : std::string("a non-string entry")) +
                                           "; allowed: " + allowed);
        bits |= 1u << bit;
    }
    return bits;
}

// What a run leaves unstated takes its stack's value (published_run.cpp: NeMo and
// Megatron-Bridge recipes use the distributed optimizer, and sequence parallelism with TP).
struct RunLayoutDefaults {
    bool distributed_optimizer = false;  // with zero 0 and no fsdp
    bool sequence_parallel = false;      // with tp > 1
};

// The [[run]]'s layout keys into `p`: tp, pp, dp, cp, vpp, zero, distributed_optimizer, fsdp
// (apply_fsdp_layout; zero, when written, must be 3, and distributed_optimizer is not
// written with it), sequence_parallel, recompute, the pipeline-split accounting and the
// interleaved group size (l405), the scatter/gather pipeline send (p2psg); an explicit split
// (layers_per_stage, mlarows), else an uneven split balanced over model chunks, the shortfall
// on the first and last chunk. Returns fsdp.
inline bool read_run_layout(const std::string& path, const toml::table& t, int layers, const RunLayoutDefaults& d,
                            ptd::ParallelSpec& p) {
    p.tp = run_key<int>(path, t, "tp", 1);
    p.pp = run_key<int>(path, t, "pp", 1);
    p.dp = run_key<int>(path, t, "dp", 1);
    p.cp = run_key<int>(path, t, "cp", 1);
    p.vpp = run_key<int>(path, t, "vpp", 1);
    p.zero = run_key<int>(path, t, "zero", 0);
    const bool fsdp = run_key<bool>(path, t, "fsdp", false);
    if (fsdp && t.get("zero") && p.zero != 3)
        run_file_fail(path, t.get("zero"), 0, "run key \"zero\" is " + std::to_string(p.zero) + " with fsdp = true; allowed: 3, or leave it out (fsdp sets it, run_file.h)");
    if (fsdp && t.get("distributed_optimizer"))
        run_file_fail(path, t.get("distributed_optimizer"), 0,
                      "run key \"distributed_optimizer\" with fsdp = true; allowed: fsdp alone (it sets zero / distributed_optimizer, run_file.h)");
    p.distributed_optimizer = run_key<bool>(path, t, "distributed_optimizer", d.distributed_optimizer && p.zero == 0 && !fsdp);
    if (fsdp) apply_fsdp_layout(p);
    p.dp_replicate = run_key<int>(path, t, "dp_replicate", 1);  // hsdp: FSDP's HYBRID_SHARD, torchtitan's HSDP
    p.sequence_parallel = run_key<bool>(path, t, "sequence_parallel", d.sequence_parallel && p.tp > 1);
    const std::string rc = run_word(path, t, "recompute", "none", {"none", "selective", "full"});
    p.recompute = rc == "full" ? ptd::Recompute::full : rc == "selective" ? ptd::Recompute::selective : ptd::Recompute::none;
    // recmod: Megatron-core's --recompute-modules (parallel.recompute_modules); validate_job
    // checks that it goes with recompute = "selective" and the model's features.
    if (const toml::node* n = t.get("recompute_modules"))
        p.recompute_modules = run_word_bits(path, *n, "recompute_modules", true, "a non-empty array of Megatron-core module words",
                                            ptd::recompute_module_word, ptd::kRecomputeModuleCount);
    p.account_for_embedding_in_pipeline_split = run_key<bool>(path, t, "account_for_embedding_in_pipeline_split", false);
    p.account_for_loss_in_pipeline_split = run_key<bool>(path, t, "account_for_loss_in_pipeline_split", false);
    p.microbatch_group_size = run_key<int>(path, t, "microbatch_group_size", 0);
    p.scatter_gather_tensors_in_pipeline = run_key<bool>(path, t, "scatter_gather_tensors_in_pipeline", false);
    // mlarows: an explicit split (Megatron-Bridge's pipeline_model_parallel_layout, Megatron's
    // --decoder-first/last-pipeline-num-layers), pp or pp·vpp entries of zero or more layers (a 0
    // is a chunk holding only the embedding, the MTP layers or the loss, as the job file allows);
    // validate_job checks the count and the sum, as for a job file's parallel.layers_per_stage.
    if (const toml::node* n = t.get("layers_per_stage")) {
        const toml::array* arr = n->as_array();
        if (!arr || arr->empty())
            run_file_fail(path, n, 0, "run key \"layers_per_stage\" must be a non-empty array of integers (transformer layers per pipeline chunk)");
        p.layers_per_stage.clear();
        for (const toml::node& e : *arr) {
            const std::optional<int64_t> v = e.value<int64_t>();
            if (!v || *v < 0 || *v > 100000)
                run_file_fail(path, &e, 0, "run key \"layers_per_stage\" has an entry that is not an integer 0 .. 100000; "
                                           "allowed: transformer layers per pipeline chunk, each at least 0");
            p.layers_per_stage.push_back((int)*v);
        }
    }
    const int split_extra = (p.account_for_embedding_in_pipeline_split ? 1 : 0) + (p.account_for_loss_in_pipeline_split ? 1 : 0);
    if (split_extra == 0 && p.layers_per_stage.empty() && p.pp * p.vpp > 0 && layers % (p.pp * p.vpp) != 0)
        p.layers_per_stage = ptd::balanced_layers_per_stage(layers, p.pp * p.vpp);
    return fsdp;
}
