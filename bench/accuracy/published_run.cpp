// published_run.cpp — reads bench/accuracy/published_runs.toml into Runs (see published_run.h):
// every key checked, the sources' unstated keys given their stack's defaults, the network from
// the cluster presets, the published figure converted to seconds per iteration.
#include "published_run.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

#include <toml++/toml.h>

#include "ptd/model/model_stats.h"
#include "ptd/plan/batch_choice.h"
#include "ptd/spec/stack_defaults.h"

#include "run_file.h"

namespace {

// Megatron-LM's own count (megatron/training/training.py num_floating_point_operations,
// transformer_flops, at NVIDIA/Megatron-LM ad226e4214, 2025-11; its MLA branch is the same
// since d4f9a6f7b4, 2025-04): per token, 3 passes × 2 FLOPs per multiply-add of every linear
// layer — the dense MLPs, each MoE layer's top-k routed experts and its shared experts, the
// attention projections (MLA: q_lora·(h + a·(d + dr) + 1), kv_lora·(h + a·(d + dv) + 1),
// h·dr, a·dv·h), the causal half of the attention scores (MLA: s·a·(d + dr)/2 + s·a·dv/2;
// otherwise a·d·s), the MTP layers' norms and projection — and the logits once per
// prediction head. The router's GEMM is not counted. The vocabulary is the row's (Megatron's
// padded size where the row writes it so).
double megatron_2025_flops_per_token(const ptd::ModelSpec& m) {
    const double h = m.hidden, a = m.heads, s = m.seq_len, d = m.head_dim();
    const bool moe = m.experts > 1;
    const double gated = m.activation == ptd::Activation::swiglu ? 1.5 : 1.0;
    const double mtp = m.mtp_layers, layers = m.layers + mtp;
    double moe_layers = moe ? m.layers - m.first_dense_layers : 0.0, dense_layers = m.layers - moe_layers;
    if (moe_layers > 0) moe_layers += mtp;  // the MTP block's MLP is of the last layer's kind
    else dense_layers += mtp;
    const double mlp = 12.0 * h *
                       (m.ffn_hidden * gated * dense_layers +
                        (moe ? (m.expert_ffn_hidden() * m.top_k + m.shared_expert_ffn_hidden) * gated * moe_layers : 0.0));
    double attn = 0;
    if (m.mla()) {
        const double dr = m.qk_rope_head_dim, dv = m.v_head_dim > 0 ? m.v_head_dim : d;
        const double q = m.q_lora_rank > 0 ? m.q_lora_rank * (h + a * (d + dr) + 1) : h * a * (d + dr);
        attn = 6.0 * (q + m.kv_lora_rank * (h + a * (d + dv) + 1) + h * dr + a * dv * h + s * a * (d + dr) / 2 +
                      s * a * dv / 2);
    } else {
        const double qd = a * d, kvd = (m.kv_heads > 0 ? m.kv_heads : m.heads) * d;
        attn = 6.0 * (h * (qd + 2 * kvd) + qd * s / 2 * 2 + qd * h);
    }
    const double mtp_proj = 6.0 * mtp * (3 * h + 2 * h * h);
    const double logits = 6.0 * h * m.vocab * (mtp + 1);
    return mlp + attn * layers + mtp_proj + logits;
}

}  // namespace

// FLOPs per iteration the way each source counts them.
double source_flops(const Run& r, const std::string& convention) {
    const ptd::ModelSpec& m = r.job.model;
    const double B = r.job.training.global_batch, s = m.seq_len, L = m.layers, h = m.hidden, V = m.vocab;
    if (convention == "narayanan-eq3-with-recompute")  // Narayanan et al. 2021 eq. 3
        return 96.0 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
    if (convention == "korthikanti-eq7-model")  // Korthikanti et al. 2022 eq. 7
        return 72.0 * B * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L));
    if (convention == "megatron-lm-2025") return megatron_2025_flops_per_token(m) * B * s;
    // PaLM-style model FLOPs (Llama 3 paper, NeMo model TFLOP/s): our full-s² count.
    ptd::FlopsEstimate f = ptd::flops_per_token(m, ptd::Recompute::none, ptd::AttentionFlops::full, (double)V);
    return f.model_per_token * B * s;
}

namespace {

// Every key a [[run]] may hold. Anything else is a typo or a key this bench does not know,
// and is an error rather than silently ignored.
const std::set<std::string> kRunKeys = {
    "name", "source", "use", "framework", "gpu", "gpus", "gpus_per_node", "cluster", "inter_gbps",
    "nics_per_node", "nic_gbps", "arch", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab",
    "seq_len", "tp", "pp", "dp", "cp", "vpp", "schedule", "micro_batch", "global_batch", "recompute",
    "sequence_parallel", "flash_attention", "distributed_optimizer", "zero", "fsdp", "overlap_grad_reduce",
    "overlap_param_gather", "tp_comm_overlap", "torch_compile", "precision", "fp8", "iteration_s",
    "tokens_per_s", "tflops_per_gpu", "mfu", "hfu", "memory_gib_measured", "memory_kind",
    "flops_convention", "note", "compiled_loss", "cross_entropy",
    // stackdef: the date of the run's stack (else its source tag's)
    "framework_version",
    // l405: Megatron's pipeline-split accounting and the interleaved group size N
    "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split", "microbatch_group_size",
    // p2psg: Megatron-LM's scatter/gather pipeline send (2021 – early 2023)
    "scatter_gather_tensors_in_pipeline",
    // hsdp: replicas of the sharded states (parallel.dp_replicate: HSDP, hybrid sharding)
    "dp_replicate",
    // tt405: PyTorch's micro-pipelined TP (torchtitan's enable_async_tensor_parallel)
    "async_tp",
    // recomp: Megatron-LM's asynchronous dgrad all-reduce (Sep 2021 on)
    "async_tensor_model_parallel_allreduce",
    // oomnemo: Megatron-core's DDP grad_reduce_in_fp32 and cpu_offloading_num_layers
    "grad_reduce_in_fp32", "activation_offload_layers",
    // oom4: dropout and the optimizer states' dtypes (training.main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype)
    "dropout", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype", "fp8_param_gather",
    // recipe: the stack's named configuration for the model (training.recipe)
    "recipe",
    // moe: Mixture-of-Experts (model.experts, model.top_k, parallel.ep)
    "experts", "top_k", "ep",
    // papers: each TP rank keeps 1/tp of the full-recompute checkpoints (parallel.distribute_saved_activations)
    "distribute_saved_activations",
    // papers: the attention softmax as separate scale / mask / softmax ops (training.masked_softmax_fusion)
    "masked_softmax_fusion",
    // tritonfa: the flash-attention kernel the stack ran (training.flash_attention_kernel)
    "flash_attention_kernel",
    // blackwell: Megatron's --overlap-p2p-communication (interleaved schedule)
    "overlap_p2p_comm",
    // mlarows: recent open models' shapes (model.* of the same name), the experts' own tensor
    // parallelism (Megatron --expert-tensor-parallel-size) and an explicit pipeline split
    "head_dim", "moe_ffn_hidden", "shared_expert_ffn_hidden", "first_dense_layers", "q_lora_rank", "kv_lora_rank",
    "qk_rope_head_dim", "v_head_dim", "mtp_layers", "qk_layernorm", "expert_tp", "layers_per_stage",
    // The output layer shares the word embedding (model.tied_embeddings; unset = by arch)
    "tied_embeddings",
    // Rotary instead of learned position embeddings (model.position; unset = by arch)
    "position",
    // deepep: the MoE token dispatcher's backend, the EP all-to-all overlap, group-limited routing
    "moe_dispatcher", "moe_a2a_overlap", "moe_router_num_groups", "moe_router_group_topk",
    // recmod: Megatron-core's selective recompute modules (parallel.recompute_modules)
    "recompute_modules",
    // menorm: the norms save their output, not their input (estimate.memory_efficient_norm)
    "memory_efficient_norm",
    // Llama 3 §3.3.2: each pipeline chunk's received input freed after its forward
    "deallocate_pipeline_inputs",
    // hostov: CUDA graphs (parallel.cuda_graph_impl / cuda_graph_scope) and static expert inputs
    "cuda_graph_impl", "cuda_graph_scope", "moe_pad_to_capacity",
    // moefp8pad: the router pads each expert's token count to the FP8 alignment
    "moe_router_padding_for_fp8",
    // moeperm: Megatron-core's fused token permutation (a stack key: unstated, the stack's default)
    "moe_permute_fusion",
    // moerouter: Megatron-core's fused router (a stack key: unstated, the stack's default)
    "moe_router_fusion"};

std::string g_path;

[[noreturn]] void fail_at(const toml::node* n, int fallback_line, const std::string& msg) {
    run_file_fail(g_path, n, fallback_line, msg);
}

// A key's value, or `fallback` when absent (run_file.h run_key: a wrong type is an error).
template <class T>
T get(const toml::table& t, const char* key, T fallback) {
    return run_key<T>(g_path, t, key, fallback);
}

std::optional<bool> get_optional_bool(const toml::table& t, const char* key) {
    if (!t.get(key)) return std::nullopt;
    return get<bool>(t, key, false);
}

// A string key that must be one of `allowed`.
std::string get_word(const toml::table& t, const char* key, const std::string& fallback,
                     std::initializer_list<const char*> allowed) {
    return run_word(g_path, t, key, fallback, allowed);
}

}  // namespace

std::string generation_of(const std::string& gpu) {
    if (gpu.rfind("v100", 0) == 0) return "V100";
    if (gpu.rfind("a100", 0) == 0) return "A100";
    if (gpu.rfind("h100", 0) == 0) return "H100";
    if (gpu.rfind("h200", 0) == 0) return "H200";
    if (gpu.rfind("b200", 0) == 0 || gpu.rfind("gb200", 0) == 0) return "B200";
    return gpu;
}

// The group whose calibration runs are capped at ten (issue 15: A100, H100, H200/B200).
std::string calibration_group(const std::string& generation) {
    return generation == "H200" || generation == "B200" ? "H200/B200" : generation;
}

namespace {

// stackdef: the date in a source tag, as YYYYMM: two digits a year (megatron21 → 202106, mid-
// year), four a year and month (dgxc2411 → 202411); no such digits (llama3, llmfoundry,
// nemotron4r) = 0, today's stack.
int source_date(const std::string& tag) {
    size_t i = 0;
    while (i < tag.size() && !std::isdigit((unsigned char)tag[i])) ++i;
    size_t e = i;
    while (e < tag.size() && std::isdigit((unsigned char)tag[e])) ++e;
    const std::string digits = tag.substr(i, e - i);
    if (digits.size() == 2) return (2000 + std::stoi(digits)) * 100 + 6;
    if (digits.size() == 4) return (2000 + std::stoi(digits.substr(0, 2))) * 100 + std::stoi(digits.substr(2));
    return 0;
}

// Hands the run's issue-15 keys to the job. Keys with a JobSpec field on main are mapped;
// the others are marked for the integrator. Returns why the run cannot be modelled yet
// ("" = it can).
std::string apply_run_to_job(Run& r) {
    ptd::JobSpec& j = r.job;
    // stackdef: what the source states goes in as the job's own; every other stack key takes
    // the default of the run's stack at the source's date (apply_stack_defaults, below), as a
    // job file written from the source's description gets it — so this bench measures what a
    // user writing the run from docs/job-spec.md gets, not a bench-only convention.
    j.parallel.overlap_grad_reduce = r.overlap_grad_reduce.value_or(false);
    j.parallel.overlap_param_gather = r.overlap_param_gather.value_or(false);
    j.parallel.tp_comm_overlap = r.tp_comm_overlap.value_or(false);
    j.parallel.async_tp = j.parallel.tp > 1 && r.async_tp;  // tt405 (ignored at tp 1, as in a job file; needs SP: validate_job)
    j.parallel.overlap_p2p_comm = r.overlap_p2p_comm.value_or(false);
    j.parallel.grad_reduce_in_fp32 = r.grad_reduce_in_fp32.value_or(true);
    j.parallel.activation_offload_layers = r.activation_offload_layers;
    // Whose kernels ran it: NeMo / Megatron-Bridge on Megatron-Core; MegaScale builds on
    // Megatron-LM; llm-foundry is PyTorch FSDP (Composer); "other" (e.g. the Llama 3 paper's own
    // stack) keeps the default.
    j.training.framework_version = r.framework_version;
    if (r.framework == "nemo") j.training.framework = ptd::Framework::nemo;
    else if (r.framework == "deepspeed") j.training.framework = ptd::Framework::deepspeed;
    else if (r.framework == "torchtitan") j.training.framework = ptd::Framework::torchtitan;
    else if (r.framework == "llm-foundry") j.training.framework = ptd::Framework::llm_foundry;
    else if (r.framework == "pytorch-fsdp") j.training.framework = ptd::Framework::pytorch_fsdp;  // hsdp: fms-fsdp
    else j.training.framework = ptd::Framework::megatron;
    j.training.torch_compile = r.torch_compile && (r.framework == "torchtitan" || r.framework == "llm-foundry" ||
                                                   r.framework == "pytorch-fsdp");

    // FP8: the recipe runs inside bf16 mixed precision (training.fp8).
    if (r.fp8 != "none") {
        j.training.precision = ptd::Precision::bf16;
        j.training.fp8 = r.fp8 == "delayed"    ? ptd::Fp8Recipe::delayed
                       : r.fp8 == "current"    ? ptd::Fp8Recipe::current
                       : r.fp8 == "tensorwise" ? ptd::Fp8Recipe::tensorwise
                       : r.fp8 == "mxfp8"      ? ptd::Fp8Recipe::mxfp8  // blackwell: TE MXFP8BlockScaling
                                               : ptd::Fp8Recipe::rowwise;
        // oomnemo: NeMo 2.0's and Megatron-Bridge's FP8 mixed-precision recipes
        // (bf16_with_fp8_mixed, bf16_with_fp8_current_scaling_mixed) set "fp8_param_gather = True".
        // blackwell: Megatron-Bridge's bf16_with_mxfp8_mixed sets it too (training/mixed_precision.py).
        // (stackdef: apply_stack_defaults below, for a run that does not state it.)
        // oom4: where the source (or its stack's recipe) says otherwise, e.g. NeMo 1.x's fp8_params.
        if (r.fp8_param_gather) j.training.fp8_param_gather = *r.fp8_param_gather;
    }
    // The pipeline schedule as the source names it (unstated: Megatron's choice by vpp).
    if (r.schedule == "zb-h1") j.parallel.schedule = ptd::PipelineSchedule::zb_h1;
    else if (r.schedule == "dualpipe") j.parallel.schedule = ptd::PipelineSchedule::dualpipe;
    // PyTorch stacks compute the loss with F.cross_entropy on fp32 logits; torchtitan's
    // "selective" is op-level selective checkpointing (memory.cpp).
    if ((r.stated_stack_keys & ptd::stack_key_bit(ptd::StackKey::cross_entropy)) && r.framework == "torchtitan")
        j.estimate.cross_entropy = pytorch_cross_entropy(r.compiled_loss);
    // fusedce2: the loss where the source's configuration says which (a NeMo 1 yaml without
    // cross_entropy_loss_fusion runs Megatron's unfused one; flash-attn's training scripts, fused).
    for (auto ce : {ptd::CrossEntropyImpl::megatron, ptd::CrossEntropyImpl::megatron_fused, ptd::CrossEntropyImpl::te,
                    ptd::CrossEntropyImpl::fused})
        if (r.cross_entropy == ptd::to_string(ce)) j.estimate.cross_entropy = ce;
    j.origin.stack_keys_written = r.stated_stack_keys;
    ptd::apply_stack_defaults(j);  // stackdef
    // stackdef: unstated flash attention as a job file gets it (the GPU has it and the stack
    // at that date used it by default).
    if (!r.flash_attention_stated)
        j.training.flash_attention = ptd::default_flash_attention(j.cluster.gpu) && ptd::stack_flash_attention(j.training);
    j.estimate.memory_efficient_norm = r.memory_efficient_norm;  // menorm
    j.estimate.deallocate_pipeline_inputs = r.deallocate_pipeline_inputs;  // Llama 3 §3.3.2
    // batchchoice: the interleaved schedule without a stated vpp starts where a job file's does
    // (start_unwritten_depth); the depth is chosen once the job validates.
    if (r.schedule == "interleaved") {
        j.parallel.schedule = ptd::PipelineSchedule::interleaved;
        ptd::start_unwritten_depth(j);
        if (j.parallel.vpp < 2)
            return j.origin.vpp_given ? "schedule = interleaved needs vpp >= 2" : "schedule = interleaved: no vpp >= 2 runs this layout";
    }
    return "";
}

}  // namespace

const std::vector<std::string>& stack_detail_run_keys() {
    // What a run states of how its stack ran — kernels, overlaps, fusions, graphs, the network —
    // beside what it trained (model, layout, batch, precision, recompute), which a user writes.
    static const std::vector<std::string> keys = {
        "flash_attention", "flash_attention_kernel", "sequence_parallel", "distributed_optimizer", "tp_comm_overlap",
        "overlap_grad_reduce", "overlap_param_gather", "overlap_p2p_comm", "scatter_gather_tensors_in_pipeline",
        "async_tensor_model_parallel_allreduce", "grad_reduce_in_fp32", "torch_compile", "compiled_loss", "cross_entropy", "async_tp",
        "fp8_param_gather", "moe_dispatcher", "moe_a2a_overlap", "cuda_graph_impl", "cuda_graph_scope",
        "moe_pad_to_capacity", "moe_router_padding_for_fp8", "moe_permute_fusion", "moe_router_fusion",
        "inter_gbps", "nics_per_node", "nic_gbps", "dropout", "masked_softmax_fusion", "memory_efficient_norm",
        "deallocate_pipeline_inputs", "distribute_saved_activations", "main_params_dtype", "exp_avg_dtype",
        "exp_avg_sq_dtype", "recipe"};
    return keys;
}

std::vector<Run> load_runs(const std::string& path, const ptd::PresetCatalog& presets,
                           const std::vector<std::string>& leave_out) {
    std::vector<Run> runs;
    toml::table doc;
    const std::vector<const toml::table*> tables = load_run_tables(path, doc);
    g_path = path;
    std::set<std::string> names;
    for (const toml::table* table : tables) {
        // --leave-out: the run as a user would write it without those keys.
        std::optional<toml::table> stated;
        if (!leave_out.empty()) {
            stated = *table;
            for (const std::string& key : leave_out) stated->erase(key);
        }
        const toml::table& t = stated ? *stated : *table;
        const toml::node& n = *table;
        for (const auto& [key, value] : t)
            if (!kRunKeys.count(std::string(key.str())))
                fail_at(&value, (int)n.source().begin.line,
                        "unknown run key \"" + std::string(key.str()) +
                            "\" (see the key list at the top of published_runs.toml)");
        Run r;
        r.line = (int)n.source().begin.line;
        r.name = get<std::string>(t, "name", "");
        if (r.name.empty()) fail_at(&n, 0, "run has no name");
        if (!names.insert(r.name).second) fail_at(t.get("name"), 0, "run name \"" + r.name + "\" is used twice");
        r.source_tag = r.name.substr(0, r.name.find('-'));
        r.source = get<std::string>(t, "source", "");
        r.use = get_word(t, "use", "check", {"calibrate", "check"});
        r.framework = get_word(t, "framework", "other",
                               {"megatron", "nemo", "torchtitan", "llm-foundry", "pytorch-fsdp", "deepspeed",
                                "megascale", "other"});
        r.convention = get_word(t, "flops_convention", "",
                                {"", "narayanan-eq3-with-recompute", "korthikanti-eq7-model", "llama3-paper",
                                 "nemo-model-tflops", "megatron-lm-2025"});
        r.fp8 = get_word(t, "fp8", "none", {"none", "delayed", "current", "tensorwise", "rowwise", "mxfp8"});
        r.cluster = get_word(t, "cluster", "", {"", "dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "gb200-nvl72"});
        r.schedule = get_word(t, "schedule", "", {"", "1f1b", "interleaved", "zb-h1", "dualpipe"});
        r.overlap_grad_reduce = get_optional_bool(t, "overlap_grad_reduce");
        r.overlap_param_gather = get_optional_bool(t, "overlap_param_gather");
        r.tp_comm_overlap = get_optional_bool(t, "tp_comm_overlap");
        r.async_tp = get<bool>(t, "async_tp", false);  // tt405
        r.overlap_p2p_comm = get_optional_bool(t, "overlap_p2p_comm");  // blackwell
        r.grad_reduce_in_fp32 = get_optional_bool(t, "grad_reduce_in_fp32");  // oomnemo
        r.activation_offload_layers = get<int>(t, "activation_offload_layers", 0);
        r.fp8_param_gather = get_optional_bool(t, "fp8_param_gather");  // oom4
        r.torch_compile = get<bool>(t, "torch_compile", false);
        r.compiled_loss = get<bool>(t, "compiled_loss", false);
        r.cross_entropy = get_word(t, "cross_entropy", "", {"", "megatron", "megatron-fused", "te", "fused"});  // fusedce2
        r.memory_efficient_norm = get<bool>(t, "memory_efficient_norm", false);  // menorm
        r.deallocate_pipeline_inputs = get<bool>(t, "deallocate_pipeline_inputs", false);
        // stackdef: the StackKey keys this run states (llm-foundry's fused loss, oompt, is the
        // stack's own default: none of the benchmark yamls sets loss_fn).
        for (const auto& [key, k] : std::initializer_list<std::pair<const char*, ptd::StackKey>>{
                 {"distributed_optimizer", ptd::StackKey::distributed_optimizer},
                 {"fsdp", ptd::StackKey::distributed_optimizer},
                 {"sequence_parallel", ptd::StackKey::sequence_parallel},
                 {"overlap_grad_reduce", ptd::StackKey::overlap_grad_reduce},
                 {"overlap_param_gather", ptd::StackKey::overlap_param_gather},
                 {"tp_comm_overlap", ptd::StackKey::tp_comm_overlap},
                 {"grad_reduce_in_fp32", ptd::StackKey::grad_reduce_in_fp32},
                 {"overlap_p2p_comm", ptd::StackKey::overlap_p2p_comm},
                 {"scatter_gather_tensors_in_pipeline", ptd::StackKey::scatter_gather_tensors_in_pipeline},
                 {"async_tensor_model_parallel_allreduce", ptd::StackKey::async_tensor_model_parallel_allreduce},
                 {"fp8_param_gather", ptd::StackKey::fp8_param_gather},
                 {"moe_permute_fusion", ptd::StackKey::moe_permute_fusion},
                 {"moe_router_fusion", ptd::StackKey::moe_router_fusion},
                 {"compiled_loss", ptd::StackKey::cross_entropy},
                 {"cross_entropy", ptd::StackKey::cross_entropy}})
            if (t.get(key)) r.stated_stack_keys |= ptd::stack_key_bit(k);
        // The stack's date: the run's framework_version, else its source's (the digits of the
        // source tag: megatron21 → 2021, taken as mid-year; dgxc2411 → 2024-11); none = today.
        if (const auto v = t.get("framework_version")) {
            const auto parsed = v->value<std::string>() ? ptd::parse_framework_version(*v->value<std::string>()) : std::nullopt;
            if (!parsed) fail_at(v, 0, "run key \"framework_version\": allowed: \"YYYY-MM\" or \"YYYY\"");
            r.framework_version = *parsed;
        } else {
            r.framework_version = source_date(r.source_tag);
        }
        r.nics_per_node = get<int>(t, "nics_per_node", 0);
        r.nic_gbps = get<double>(t, "nic_gbps", 0.0);
        r.memory_gib_measured = get<double>(t, "memory_gib_measured", 0.0);
        r.memory_kind = get_word(t, "memory_kind", "", {"", "max_reserved", "max_allocated", "nvidia-smi"});
        if ((r.memory_gib_measured > 0) != !r.memory_kind.empty())
            fail_at(&n, 0, "run \"" + r.name + "\": memory_gib_measured and memory_kind go together");

        ptd::JobSpec& j = r.job;
        ptd::ModelSpec& m = j.model;
        m.name = r.name;
        read_run_model_shape(g_path, t, m);  // the shape, dropout (oom4) and tied_embeddings
        read_run_moe_mla_shape(g_path, t, m);  // moe, mlarows: experts, top_k and the recent models' keys
        const std::string gpu = get<std::string>(t, "gpu", "a100-80gb");
        r.generation = generation_of(gpu);
        if (const ptd::GpuSpec* g = presets.find_gpu(gpu)) j.cluster.gpu = *g;
        else r.skip = "no GPU preset \"" + gpu + "\" in PTD";
        j.cluster.gpus_per_node = get<int>(t, "gpus_per_node", 8);
        j.cluster.nodes = get<int>(t, "gpus", 8) / j.cluster.gpus_per_node;
        j.cluster.intra_gbps = j.cluster.gpu.link_gbps;
        j.cluster.inter_gbps = get<double>(t, "inter_gbps", 25.0);
        // The network as a job file would get it (job_toml.cpp read_cluster_network): the named
        // cluster preset, else the default cluster of the GPU; the run's own NIC count and
        // per-NIC GB/s (this file's unit) or its per-GPU inter_gbps override.
        {
            const ptd::ClusterPreset* net = !r.cluster.empty() ? presets.find_cluster(r.cluster)
                                                               : presets.default_cluster_for_gpu(gpu);
            const int gpn = std::max(j.cluster.gpus_per_node, 1);
            double nic_gbit = 8.0 * get<double>(t, "inter_gbps", 25.0);  // Gb/s per NIC, one NIC per GPU
            j.cluster.nics_per_node = 0;
            if (net) {
                j.cluster.nics_per_node = std::max(1, (int)std::lround((double)net->nics_per_node * gpn / net->gpus_per_node));
                nic_gbit = net->nic_gbps;
                j.cluster.rail_optimized = net->rail_optimized;
                j.cluster.nvls = net->nvls;
                if (net->intra_gbps > 0 && net->gpu == gpu) j.cluster.intra_gbps = net->intra_gbps;
                // gb200: the preset's NVLink domain, as a job file gets it (job_toml.cpp).
                if (!r.cluster.empty() || net->gpus_per_node == gpn) j.cluster.nvlink_domain = net->nvlink_domain;
                j.cluster.host_op_us = net->host_op_us;  // hostov: the node's host CPU, as a job file gets it
            }
            if (r.nics_per_node > 0) j.cluster.nics_per_node = r.nics_per_node;
            if (r.nic_gbps > 0) nic_gbit = 8.0 * r.nic_gbps;
            const int nics = j.cluster.nics_per_node > 0 ? j.cluster.nics_per_node : gpn;
            j.cluster.inter_gbps = t.contains("inter_gbps") && r.nic_gbps <= 0 ? get<double>(t, "inter_gbps", 25.0)
                                                                               : nics * nic_gbit / 8.0 / gpn;
        }
        ptd::ParallelSpec& p = j.parallel;
        // Keys a source leaves unstated take the value its stack runs with: NeMo and
        // Megatron-Bridge recipes use the distributed optimizer, sequence parallelism with TP
        // and Transformer Engine's fused attention; torchtitan and llm-foundry use flash
        // attention (SDPA). The 2021-22 Megatron and DeepSpeed papers predate flash attention.
        // The layout keys (with FSDP as run_file.h reads it): read_run_layout, as bench_memory.
        const bool nemo = r.framework == "nemo";
        const bool modern = nemo || r.framework == "torchtitan" || r.framework == "llm-foundry" ||
                            r.framework == "pytorch-fsdp";
        r.fsdp = read_run_layout(g_path, t, m.layers, RunLayoutDefaults{nemo, nemo}, p);
        p.async_tensor_model_parallel_allreduce = get<bool>(t, "async_tensor_model_parallel_allreduce", true);  // recomp
        read_run_expert_layout(g_path, t, m, p);  // moe, mlarows, deepep: ep, expert_tp, the dispatcher
        // hostov: the recipe's CUDA graphs (Megatron-Bridge cuda_graph_impl / cuda_graph_scope) and
        // static expert inputs; validate_job checks the combinations.
        const std::string graph_impl = get_word(t, "cuda_graph_impl", "none", {"none", "local", "transformer_engine"});
        p.cuda_graph_impl = graph_impl == "local"                ? ptd::CudaGraphImpl::local
                          : graph_impl == "transformer_engine" ? ptd::CudaGraphImpl::transformer_engine
                                                               : ptd::CudaGraphImpl::none;
        if (const toml::node* n = t.get("cuda_graph_scope"))
            p.cuda_graph_scope = run_word_bits(g_path, *n, "cuda_graph_scope", false, "an array of Megatron-core scope words",
                                               ptd::cuda_graph_scope_word, ptd::kCudaGraphScopeCount);
        p.moe_pad_to_capacity = get<bool>(t, "moe_pad_to_capacity", false);
        p.moe_router_padding_for_fp8 = get<bool>(t, "moe_router_padding_for_fp8", false);  // moefp8pad
        // moeperm: stated, the run's own (stated_stack_keys); else the stack's default applies.
        p.moe_permute_fusion = get<bool>(t, "moe_permute_fusion", false);
        p.moe_router_fusion = get<bool>(t, "moe_router_fusion", false);  // moerouter: likewise

        p.distribute_saved_activations = get<bool>(t, "distribute_saved_activations", false);  // papers
        ptd::TrainingSpec& tr = j.training;
        tr.micro_batch = get<int>(t, "micro_batch", 1);
        tr.global_batch = get<int>(t, "global_batch", 0);
        // batchchoice: what the run states of its micro-batch, interleaving depth and batch, as
        // a job file's loader records it; the unstated ones are chosen below.
        j.origin.micro_batch_given = t.contains("micro_batch");
        j.origin.vpp_given = t.contains("vpp");
        j.origin.global_batch_given = t.contains("global_batch");
        const std::string prec = get_word(t, "precision", "bf16", {"bf16", "fp16", "fp32"});
        tr.precision = prec == "fp16" ? ptd::Precision::fp16 : prec == "fp32" ? ptd::Precision::fp32 : ptd::Precision::bf16;
        tr.optimizer = ptd::Optimizer::adam;
        tr.flash_attention = get<bool>(t, "flash_attention", modern);
        r.flash_attention_stated = t.get("flash_attention") != nullptr;  // stackdef
        tr.masked_softmax_fusion = get<bool>(t, "masked_softmax_fusion", true);  // papers
        {  // tritonfa
            const std::string k = get_word(t, "flash_attention_kernel", "by-date", {"by-date", "flash-attn-1", "triton", "flash-attn-2"});
            tr.flash_kernel = k == "flash-attn-1" ? ptd::FlashKernel::flash_attn_1
                              : k == "triton"     ? ptd::FlashKernel::triton
                              : k == "flash-attn-2" ? ptd::FlashKernel::flash_attn_2
                                                    : ptd::FlashKernel::by_date;
        }
        {  // oom4: the optimizer states' dtypes where the source (or its recipe) states them
            auto state_dtype = [&](const char* key, std::initializer_list<const char*> allowed) {
                const std::string w = get_word(t, key, "fp32", allowed);
                return w == "bf16" ? ptd::StateDtype::bf16 : w == "fp16" ? ptd::StateDtype::fp16
                     : w == "fp8"  ? ptd::StateDtype::fp8  : w == "none" ? ptd::StateDtype::none
                     : w == "fp32-remainders" ? ptd::StateDtype::fp32_remainders : ptd::StateDtype::fp32;
            };
            tr.main_params_dtype = state_dtype("main_params_dtype", {"fp32", "bf16", "fp16", "none", "fp32-remainders"});
            tr.exp_avg_dtype = state_dtype("exp_avg_dtype", {"fp32", "bf16", "fp16", "fp8"});
            tr.exp_avg_sq_dtype = state_dtype("exp_avg_sq_dtype", {"fp32", "bf16", "fp16", "fp8"});
            // recipe: the dtypes the run states are its own; the others take its recipe's
            // (apply_stack_defaults), as in a job file.
            j.origin.state_dtypes_written = (t.get("main_params_dtype") ? 1 : 0) | (t.get("exp_avg_dtype") ? 2 : 0) |
                                            (t.get("exp_avg_sq_dtype") ? 4 : 0);
            if (const toml::node* n = t.get("recipe")) {
                tr.recipe = n->value_or(std::string());
                if (!ptd::recipe_framework(tr.recipe))
                    run_file_fail(g_path, n, 0, "run key \"recipe\" is \"" + tr.recipe + "\"; allowed: " + ptd::known_recipes_text(tr.recipe));
            }
            // mbrecipe: the MoE, CUDA-graph and recompute keys the run states are its own; the others
            // take its performance recipe's values (apply_stack_defaults), as in a job file.
            j.origin.recipe_keys_written = 0;
            for (const auto& [key, bit] : {std::pair{"moe_dispatcher", ptd::kRecipeMoeDispatcher},
                                           {"moe_a2a_overlap", ptd::kRecipeMoeA2aOverlap},
                                           {"cuda_graph_impl", ptd::kRecipeCudaGraphImpl},
                                           {"cuda_graph_scope", ptd::kRecipeCudaGraphScope},
                                           {"moe_pad_to_capacity", ptd::kRecipeMoePadToCapacity},
                                           {"account_for_embedding_in_pipeline_split", ptd::kRecipeAccountForEmbedding},
                                           {"account_for_loss_in_pipeline_split", ptd::kRecipeAccountForLoss},
                                           {"recompute", ptd::kRecipeRecompute},
                                           {"recompute_modules", ptd::kRecipeRecomputeModules}})
                if (t.get(key)) j.origin.recipe_keys_written |= bit;
        }

        if (r.skip.empty()) r.skip = apply_run_to_job(r);
        if (r.skip.empty()) {
            auto problems = ptd::validate_job(j);
            if (!problems.empty()) r.skip = "invalid layout: " + problems[0].key + ": " + problems[0].message;
            else ptd::choose_unwritten_batching(j);  // batchchoice: as load_job_table does
        }
        const int gpus = j.world_size();
        r.source_flops = source_flops(r, r.convention);
        const double iter = get<double>(t, "iteration_s", 0.0);
        const double tokens = get<double>(t, "tokens_per_s", 0.0);
        const double tflops = get<double>(t, "tflops_per_gpu", 0.0);
        const double mfu = get<double>(t, "mfu", 0.0);
        char buf[96] = "";
        if (iter > 0) {
            r.published_step = iter;
            std::snprintf(buf, sizeof buf, "%.2f s/iter", iter);
        } else if (tokens > 0) {  // per GPU, as NeMo, torchtitan and llm-foundry report it
            r.published_step = (double)tr.global_batch * m.seq_len / (tokens * gpus);
            std::snprintf(buf, sizeof buf, "%.0f tok/s/GPU", tokens);
        } else if (tflops > 0) {
            r.published_step = r.source_flops / (tflops * 1e12 * gpus);
            std::snprintf(buf, sizeof buf, "%.0f TFLOP/s", tflops);
        } else if (mfu > 0 && j.cluster.gpu.peak_tflops(tr.precision) > 0) {
            r.published_step = r.source_flops / (mfu * j.cluster.gpu.peak_tflops(tr.precision) * 1e12 * gpus);
            std::snprintf(buf, sizeof buf, "MFU %.1f%%", mfu * 100);
        } else if (r.skip.empty()) {
            r.skip = "no published throughput figure";
        }
        r.published_what = buf;
        runs.push_back(std::move(r));
    }
    // Issue 15: at most ten calibration runs per GPU generation.
    std::map<std::string, int> calibrating;
    for (const Run& r : runs)
        if (r.use == "calibrate" && ++calibrating[calibration_group(r.generation)] > 10) {
            std::fprintf(stderr, "%s:%d: run \"%s\" is the 11th use = \"calibrate\" run of %s; at most 10 per generation\n",
                         path.c_str(), r.line, r.name.c_str(), calibration_group(r.generation).c_str());
            std::exit(2);
        }
    return runs;
}

std::string layout_of(const Run& r) {
    const ptd::ParallelSpec& p = r.job.parallel;
    std::string s = std::to_string(p.tp) + "·" + std::to_string(p.pp) + "·" + std::to_string(p.dp);
    if (p.cp > 1) s += "c" + std::to_string(p.cp);
    if (p.vpp > 1) s += "v" + std::to_string(p.vpp);
    if (p.ep > 1) s += "e" + std::to_string(p.ep);  // moe
    if (p.zero == 3) s += "z3";
    return s;
}

// The issue 29 method reads the signed error by model size, scale and feature: a band whose
// errors are centred off zero points at a cause the bands share.
std::string size_band_of(const Run& r) {
    const double total = (double)ptd::count_parameters(r.job.model).total;  // MoE: every expert
    return total < 5e9 ? "<5B" : total < 30e9 ? "5-30B" : total < 100e9 ? "30-100B" : ">=100B";
}

std::string scale_band_of(const Run& r) {
    const int gpus = r.job.world_size();
    return gpus <= 64 ? "<=64" : gpus <= 512 ? "65-512" : gpus <= 4096 ? "513-4096" : ">4096";
}

std::vector<std::string> features_of(const Run& r) {
    const ptd::JobSpec& j = r.job;
    std::vector<std::string> f;
    if (j.training.fp8 != ptd::Fp8Recipe::none) f.push_back("fp8");  // every recipe, MXFP8 included
    if (j.model.experts >= 2) f.push_back("moe");
    if (j.parallel.cp > 1) f.push_back("context-parallel");
    if (j.parallel.vpp > 1) f.push_back("interleaved-pp");
    if (j.parallel.zero == 3) f.push_back("fsdp-zero3");
    if (j.parallel.sequence_parallel && j.parallel.tp > 1) f.push_back("sequence-parallel");
    if (!j.model.mla() && j.model.kv_heads > 0 && j.model.kv_heads < j.model.heads) f.push_back("gqa");
    if (j.parallel.recompute == ptd::Recompute::full) f.push_back("recompute-full");
    if (j.parallel.recompute == ptd::Recompute::selective) f.push_back("recompute-selective");
    return f;
}
