// torchtitan_plan.cpp — what both torchtitan forms share: the checks, the model flavor and
// family, and the layout in torchtitan's terms (per-chunk module lists, fp8 filters).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "export/export_internal.h"
#include "ptd/model/estimate.h"

namespace ptd::export_internal {

Result<TitanPlan> plan_torchtitan(const JobSpec& job, ExportFormat format, const char* output_module) {
    if (auto bad = unsupported_outside_megatron(job, "torchtitan")) return *bad;  // zb, state dtypes, recompute modules
    const ModelSpec& m = job.model;
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    const std::string fmt = to_string(format);
    TitanPlan tp;
    if (t.precision == Precision::fp16)
        return job_error(job, "training.precision",
                         "got \"fp16\"; torchtitan's mixed_precision_param allows bfloat16 or float32 only; "
                         "allowed for --format " + fmt + ": bf16, fp32");
    if (t.optimizer == Optimizer::sgd)
        return job_error(job, "training.optimizer",
                         "got \"sgd\"; torchtitan builds Adam and AdamW only; allowed for --format " + fmt + ": adamw, adam");

    // torchtitan knows a model by name + flavor; only exact presets map to a flavor.
    // mlaio: Qwen3 (torchtitan/models/qwen3: 8B, 32B, 30B-A3B, 235B-A22B) and DeepSeek-V3
    // (models/deepseek_v3: 671B, whose model_registry takes num_mtp_layers, so mtp_layers may
    // differ from the preset's) beside Llama 3; baselines from each family's config_registry.py.
    struct TitanFlavor {
        const char* preset;
        const char* family;
        const char* flavor;
        const char* baseline;
    };
    static const TitanFlavor kFlavors[] = {
        {"llama3-8b", "llama3", "8B", "llama3_8b"},       {"llama3-70b", "llama3", "70B", "llama3_70b"},
        {"llama3-405b", "llama3", "405B", "llama3_405b"}, {"qwen3-8b", "qwen3", "8B", nullptr},
        {"qwen3-32b", "qwen3", "32B", "qwen3_32b"},       {"qwen3-30b-a3b", "qwen3", "30B-A3B", "qwen3_30b_a3b"},
        {"qwen3-235b-a22b", "qwen3", "235B-A22B", nullptr}, {"deepseek-v3", "deepseek_v3", "671B", "deepseek_v3_671b"}};
    // A flavored preset whose architecture keys the job changed: said so in the refusal.
    const TitanFlavor* edited = nullptr;
    if (job.origin.model_base) {
        // The sequence length is the run's (training.seq_len; the model's max_seq_len follows it,
        // models/llama3/model/args.py update_from_config), not the flavor's.
        ModelSpec same = m;
        same.mtp_layers = job.origin.model_base->mtp_layers;
        same.seq_len = job.origin.model_base->seq_len;
        for (const TitanFlavor& f : kFlavors)
            if (same == *job.origin.model_base && job.origin.model_preset == f.preset &&
                (m.mtp_layers == 0 || std::string_view(f.family) == "deepseek_v3")) {
                tp.flavor = f.flavor;
                tp.family = f.family;
                tp.baseline = f.baseline;
            }
        for (const TitanFlavor& f : kFlavors)
            if (!tp.flavor && job.origin.model_preset == f.preset) edited = &f;
    }
    const std::string which = edited ? "model \"" + m.name + "\" (the " + edited->preset + " preset with its architecture changed: torchtitan's " +
                                           edited->family + " " + edited->flavor + " flavor is the preset's)"
                                     : "model \"" + m.name + "\"";
    if (!tp.flavor) {
        // The family whose model code has the model's parts, for the flavor to register.
        if (m.mla() || m.mtp_layers > 0 || m.shared_expert_ffn_hidden > 0 || m.first_dense_layers > 0)
            tp.family = "deepseek_v3";
        else if (m.head_dim_given > 0 || m.moe_ffn_hidden > 0)
            tp.family = "qwen3";
        tp.notes.push_back(which + " has no torchtitan flavor (only the llama3-8b/70b/405b presets "
                           "map to llama3 8B/70B/405B" +
                           std::string(std::string_view(tp.family) == "llama3" ? "" : ", qwen3-* to qwen3, deepseek-v3 to deepseek_v3 671B") +
                           "); register a flavor" +
                           (std::string_view(tp.family) == "llama3" ? std::string() : " in torchtitan/models/" + std::string(tp.family)) +
                           " and set the model");
    }
    // issue 28: attention heads split over tp (main b5bcd76 models/common/decoder.py
    // Decoder.Config.update_from_config raises unless tp divides n_heads and n_kv_heads; v0.2.x
    // shards wq/wk/wv column-wise over tp, which needs whole KV heads per rank too).
    if (p.tp > 1 && !m.mla() && (m.heads % p.tp != 0 || m.kv_heads % p.tp != 0))
        return job_error(job, "parallel.tp",
                         "got " + std::to_string(p.tp) + " with " + std::to_string(m.heads) + " attention heads and " +
                             std::to_string(m.kv_heads) + " KV heads; torchtitan needs tp to divide both (update_from_config: "
                             "\"tensor_parallel_degree must divide n_kv_heads\"); allowed for --format " + fmt + ": tp dividing " +
                             std::to_string(std::gcd(m.heads, m.kv_heads)) + ", or --format megatron (which replicates KV heads)");
    // issue 28: main b5bcd76 models/common/decoder.py update_from_config: "Weight tying is not
    // supported with Pipeline Parallel" (the embedding and the output layer on different stages).
    if (format == ExportFormat::torchtitan && m.tied_embeddings && p.pp > 1)
        return job_error(job, "parallel.pp",
                         "got " + std::to_string(p.pp) + " with tied embeddings; torchtitan refuses weight tying with "
                         "pipeline parallelism (update_from_config); allowed for --format " + fmt + ": pp = 1, or "
                         "model.tied_embeddings = false, or --format megatron");
    // issue 28: v0.2.2's DeepSeek-V3 flavors use FlexAttention (attn_type "flex"), and its
    // DeepSeekV3ModelArgs.update_from_config raises for context parallelism with anything but SDPA.
    if (format == ExportFormat::torchtitan_toml && p.cp > 1 && std::string_view(tp.family) == "deepseek_v3")
        return job_error(job, "parallel.cp",
                         "got " + std::to_string(p.cp) + "; torchtitan v0.2.2's DeepSeek-V3 runs FlexAttention, and its "
                         "update_from_config refuses context parallelism with it (\"Context Parallel only supports SDPA "
                         "attention\"); allowed for --format " + fmt + ": cp = 1, or --format torchtitan (main: CP with "
                         "FlexAttention) / megatron");
    // mlaio: torchtitan's DeepSeek-V3 MTP (models/deepseek_v3/MTP.md) rejects pipeline and
    // context parallelism; v0.2.x (the TOML form) has no MTP at all.
    if (m.mtp_layers > 0 && format == ExportFormat::torchtitan_toml)
        return job_error(job, "model.mtp_layers",
                         "got " + std::to_string(m.mtp_layers) + "; torchtitan v0.2.x has no multi-token prediction "
                         "(torchtitan's DeepSeek-V3 gained model_registry(..., num_mtp_layers=N) after the Python-config "
                         "refactor); allowed for --format " + fmt + ": 0, or --format torchtitan");
    if (m.mtp_layers > 0 && (p.pp > 1 || p.cp > 1))
        return job_error(job, p.pp > 1 ? "parallel.pp" : "parallel.cp",
                         "got " + std::to_string(p.pp > 1 ? p.pp : p.cp) + " with model.mtp_layers = " +
                             std::to_string(m.mtp_layers) + "; torchtitan's multi-token prediction rejects pipeline and "
                             "context parallelism (models/deepseek_v3/MTP.md); allowed for --format " + fmt + ": 1, or "
                             "model.mtp_layers = 0, or --format megatron");
    if (m.mtp_layers > 0 && !tp.flavor)
        tp.notes.push_back("model.mtp_layers = " + std::to_string(m.mtp_layers) + ": pass num_mtp_layers=" +
                           std::to_string(m.mtp_layers) + " to the deepseek_v3 model_registry and use MTPLoss");
    if (job.estimate.memory_efficient_norm)  // menorm
        tp.notes.push_back("estimate.memory_efficient_norm: torchtitan's RMSNorm keeps its input; a norm that saves "
                           "its output instead (Apex FusedRMSNorm memory_efficient=True) is a model-code change");
    // deepep: the keys name Megatron-core's dispatcher and schedule; nothing is written for them here.
    if (m.experts > 1 && (p.moe_dispatcher != MoeDispatcher::alltoall || p.moe_a2a_overlap))
        tp.notes.push_back("parallel.moe_dispatcher / moe_a2a_overlap: Megatron-core's flex dispatcher (DeepEP / HybridEP) "
                           "and --overlap-moe-expert-parallel-comm; this export writes no torchtitan setting for them, so "
                           "its expert-parallel all-to-all is torchtitan's own");
    // etp: the routed experts' tensor parallelism. torchtitan v0.2.x (distributed/parallel_dims.py)
    // splits them parallelism.expert_tensor_parallel_degree ways when ep > 1 — 1 (its default) or
    // tp, written below — and tp ways when ep = 1; torchtitan main removed expert TP (#3167,
    // models/common/moe_sharding.py): with ep > 1 the experts split over ep only, with ep = 1 tp
    // ways. Any other split would run a different layout than the one estimated.
    if (m.experts > 1) {
        const int etp = p.etp();
        const bool toml = format == ExportFormat::torchtitan_toml;
        const bool ok = p.ep == 1 ? etp == p.tp : etp == 1 || (toml && etp == p.tp);
        if (!ok)
            return job_error(
                job, "parallel.expert_tp",
                "got " + std::to_string(etp) + (p.expert_tp == 0 ? " (= tp)" : "") + " with tp " + std::to_string(p.tp) +
                    " and ep " + std::to_string(p.ep) + "; " +
                    (p.ep == 1 ? "torchtitan splits the routed experts tp ways when ep = 1; allowed for --format " + fmt +
                                     ": 0 (= tp), or --format megatron"
                     : toml    ? "torchtitan v0.2.x splits them expert_tensor_parallel_degree ways, 1 or tp; allowed for "
                                 "--format " + fmt + ": 1 or " + std::to_string(p.tp) + ", or --format megatron"
                               : "torchtitan main has no expert tensor parallelism (#3167): with ep > 1 the routed experts "
                                 "split over ep only; allowed for --format " + fmt +
                                     ": 1 (--set parallel.expert_tp=1), or --format torchtitan-toml / megatron"));
    }

    // offload: torchtitan's training.enable_cpu_offload puts FSDP2's CPUOffloadPolicy on every
    // module: parameters, gradients and optimizer state go to host memory together.
    if (p.offload_optimizer != OffloadDevice::none || p.offload_params) {
        if (p.zero != 3 || !p.offload_params || p.offload_optimizer != OffloadDevice::cpu)
            return job_error(job, p.offload_params ? "parallel.offload_params" : "parallel.offload_optimizer",
                             std::string("offload_optimizer = \"") + to_string(p.offload_optimizer) +
                                 "\", offload_params = " + (p.offload_params ? "true" : "false") + " with zero = " +
                                 std::to_string(p.zero) +
                                 "; torchtitan's training.enable_cpu_offload (FSDP2 CPUOffloadPolicy) offloads "
                                 "parameters, gradients and optimizer state together; allowed for --format " + fmt +
                                 ": zero = 3 with offload_optimizer = \"cpu\" and offload_params = true, or no offload");
        tp.cpu_offload = true;
    }

    // torchtitan's DDP path is for pure data parallelism; with any other dimension the
    // data-parallel ranks shard with FSDP2.
    const bool pure_dp = p.tp == 1 && p.pp == 1 && p.cp == 1 && p.ep == 1;
    tp.replicate = pure_dp && p.zero == 0 && !p.distributed_optimizer;
    // hsdp: FSDP2 over a 2-D mesh; the replicas outermost (torchtitan's ParallelDims).
    tp.replicate_degree = tp.replicate ? p.dp : std::max(1, p.dp_replicate);
    tp.shard_degree = p.dp / tp.replicate_degree;
    // With one rank per sharding group and no cp, torchtitan applies DDP instead of FSDP
    // (parallelize_llama: `elif parallel_dims.dp_replicate_enabled`), which it runs on a 1-D
    // mesh only ("DDP has not supported > 1D parallelism").
    if (!tp.replicate && tp.replicate_degree > 1 && tp.shard_degree == 1 && p.cp == 1 && !pure_dp)
        return job_error(job, "parallel.dp_replicate",
                         "got " + std::to_string(p.dp_replicate) + " = dp: data_parallel_shard_degree would be 1, and "
                         "torchtitan then applies DDP, which it runs without tensor, pipeline or expert parallelism only "
                         "(\"DDP has not supported > 1D parallelism\"); allowed for --format " + fmt +
                         ": a dp_replicate below dp, or tp = pp = ep = 1");
    // ttfsdp: under pipelining the estimate runs zero 2 and 3 and the distributed optimizer as
    // torchtitan's FSDP2 does there (effective_sharding): nothing differs to note.
    const Sharding ran = effective_sharding(Framework::torchtitan, p.pp, p.zero, p.distributed_optimizer);
    const Sharding fsdp = effective_sharding(Framework::torchtitan, p.pp, 3, false);
    const bool same_sharding = ran.zero == fsdp.zero && ran.distributed_optimizer == fsdp.distributed_optimizer;
    if (!tp.replicate && p.dp > 1 && !same_sharding)
        tp.notes.push_back("parallel.zero = " + std::to_string(p.zero) + (p.distributed_optimizer ? " + distributed_optimizer" : "") +
                           ": torchtitan shards data-parallel ranks with FSDP2 (parameters, gradients and optimizer "
                           "state); written as data_parallel_shard_degree = " + std::to_string(p.dp) +
                           " with fsdp_reshard_after_forward = \"never\" (≈ ZeRO-2), so memory differs from the estimate");

    if (p.pp > 1) {
        // Every chunk's modules, in model order: the embedding on the first, the final
        // norm and output projection on the last (torchtitan's own default split uses
        // the same names).
        tp.micro_batches = t.global_batch / (t.micro_batch * p.dp);
        const std::vector<int> chunks = chunk_layers(job);
        int layer = 0;
        for (size_t k = 0; k < chunks.size(); ++k) {
            std::vector<std::string> mods;
            if (k == 0) mods.push_back("tok_embeddings");
            for (int i = 0; i < chunks[k]; ++i) mods.push_back("layers." + std::to_string(layer++));
            if (k + 1 == chunks.size()) {
                mods.push_back("norm");
                mods.push_back(output_module);
            }
            tp.chunk_modules.push_back(std::move(mods));
        }
    }
    const std::string order = effective_order(job, p.order);
    if (order != effective_order(job, "tp-cp-ep-dp-pp"))
        tp.notes.push_back("parallel.order = \"" + p.order + "\": torchtitan's device mesh is fixed (pp, dp, cp, tp "
                           "from outermost to innermost)");
    if (p.pp > 1 && p.vpp > 1 && p.microbatch_group_size > 0 && p.microbatch_group_size != p.pp)  // l405
        tp.notes.push_back("parallel.microbatch_group_size = " + std::to_string(p.microbatch_group_size) +
                           ": PyTorch's Interleaved1F1B runs micro-batches in groups of pp; the estimate assumed groups of " +
                           std::to_string(p.microbatch_group_size));
    if (std::string note = nvlink_domain_note(job, "torchtitan"); !note.empty()) tp.notes.push_back(note);  // gb200
    // overlap: FSDP2 always overlaps its collectives and prefetches one module ahead.
    if (!p.overlap_grad_reduce && p.dp > 1)
        tp.notes.push_back("parallel.overlap_grad_reduce = false: torchtitan's FSDP2 / DDP always overlap the "
                           "gradient reduction with the backward; the estimate assumed no overlap");
    if (p.zero == 3 && p.fsdp_prefetch != 1)
        tp.notes.push_back("parallel.fsdp_prefetch = " + std::to_string(p.fsdp_prefetch) +
                           ": FSDP2 prefetches one module ahead; other depths need set_modules_to_forward_prefetch / "
                           "set_modules_to_backward_prefetch in the model code");
    if (p.recompute == Recompute::selective && p.recompute_style == RecomputeStyle::megatron)
        tp.notes.push_back("parallel.recompute = \"selective\" with recompute_style = \"megatron\": torchtitan's "
                           "op-level selective checkpointing (selective_ac_option = \"op\") saves every other matmul, "
                           "not Megatron's attention-core recompute; memory differs (estimate it with "
                           "--set parallel.recompute_style=torchtitan-op)");
    if (t.data != "synthetic")
        tp.notes.push_back("training.data = \"" + t.data + "\": set a torchtitan dataset and tokenizer");
    else
        tp.notes.push_back("training.data = \"synthetic\": torchtitan has no synthetic dataset");
    if (!t.flash_attention)
        tp.notes.push_back("training.flash_attention = false: torchtitan always uses scaled_dot_product_attention "
                           "(flash kernels where available)");
    // papers: torchtitan's activation checkpointing keeps every saved layer input whole.
    if (job.parallel.distribute_saved_activations && job.parallel.recompute == Recompute::full && job.parallel.tp > 1 &&
        !job.parallel.sequence_parallel)
        tp.notes.push_back("parallel.distribute_saved_activations = true: torchtitan has no equivalent; each TP rank "
                           "keeps the whole checkpointed layer input, tp times what the estimate counted "
                           "(ptd estimate --set parallel.distribute_saved_activations=false)");
    if (t.fp8 != Fp8Recipe::none) {
        // fp8 (issue 15 point 3): torchao's float8 / mx converters. torchao has no delayed
        // scaling (removed); its tensorwise recipe is dynamic (current) scaling.
        if (t.fp8 == Fp8Recipe::delayed)
            return job_error(job, "training.fp8",
                             "got \"delayed\"; torchtitan's float8 (torchao) scales dynamically and has no delayed "
                             "scaling; allowed for --format " + fmt + ": \"tensorwise\", \"rowwise\", \"mxfp8\", "
                             "\"current\" (written as tensorwise)");
        if (t.fp8 == Fp8Recipe::current)
            tp.notes.push_back("training.fp8 = \"current\": written as torchao's tensorwise recipe (dynamic per-tensor "
                               "scaling, the same scaling); torchao re-casts weights every micro-batch and keeps bf16 "
                               "activations, unlike Transformer Engine's current scaling that the estimate modelled");
        if (t.fp8_format != Fp8Format::hybrid)
            tp.notes.push_back(std::string("training.fp8_format = \"") + to_string(t.fp8_format) +
                               "\": torchtitan has no format key; torchao's recipe fixes the FP8 formats");
        tp.fp8 = true;
        tp.fp8_filter_fqns.push_back(output_module);  // the output layer stays bf16, as the estimate assumes
        for (int i = 0; i < t.fp8_bf16_first_layers; ++i) tp.fp8_filter_fqns.push_back("layers." + std::to_string(i) + ".");
        for (int i = m.layers - t.fp8_bf16_last_layers; i < m.layers; ++i)
            tp.fp8_filter_fqns.push_back("layers." + std::to_string(i) + ".");
        // The Python config (main b5bcd76): Float8LinearConverter offers rowwise recipes only;
        // MXFP8LinearConverter converts the Linear modules whose name contains an entry of fqns.
        if (format == ExportFormat::torchtitan && (t.fp8 == Fp8Recipe::tensorwise || t.fp8 == Fp8Recipe::current))
            return job_error(job, "training.fp8",
                             std::string("got \"") + to_string(t.fp8) +
                                 "\"; torchtitan's Float8LinearConverter (current config system) has rowwise recipes only; "
                                 "allowed for --format torchtitan: \"rowwise\", \"mxfp8\" (tensorwise: --format "
                                 "torchtitan-toml, v0.2)");
        if (format == ExportFormat::torchtitan && !tp.flavor)
            tp.notes.push_back(std::string("training.fp8 = \"") + to_string(t.fp8) +
                               "\": pass the FP8 converter to model_registry(..., converters=[...]) once the model is "
                               "registered");
        if (t.fp8 == Fp8Recipe::mxfp8)
            for (int i = t.fp8_bf16_first_layers; i < m.layers - t.fp8_bf16_last_layers; ++i)
                tp.fp8_layers.push_back("layers." + std::to_string(i) + ".");
    }
    // issue 28 (last, so a more specific refusal is named first): v0.2.x reads name / flavor from the file and falls back to the family's 6-layer
    // debugmodel when they are absent, so a model without a flavor would silently train another
    // model (and a pipeline split naming its layers would name layers that do not exist).
    if (!tp.flavor && format == ExportFormat::torchtitan_toml)
        return job_error(job, job.origin.model_preset.empty() ? "model.layers" : "model.preset",
                         which + " has no torchtitan flavor; torchtitan v0.2.x would train its debug "
                         "model instead; allowed for --format " + fmt + ": the presets llama3-8b / llama3-70b / llama3-405b, "
                         "qwen3-8b / qwen3-32b / qwen3-30b-a3b / qwen3-235b-a22b, deepseek-v3 unchanged, or --format "
                         "torchtitan (a module whose _model_spec() you fill in) / megatron");
    return tp;
}

}  // namespace ptd::export_internal
