// deepspeed.cpp — JobSpec → a DeepSpeed ds_config JSON (runtime/config.py, engine.py,
// zero/config.py, lr_schedules.py of master, edaa722, 2026-08).
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "export/export_internal.h"
#include "ptd/model/model_stats.h"

namespace ptd::export_internal {

Result<ExportOutput> export_deepspeed(const JobSpec& job) {
    if (auto bad = unsupported_outside_megatron(job, "DeepSpeed")) return *bad;  // zb, state dtypes, recompute modules
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    const EstimateSpec& e = job.estimate;
    if (p.zero >= 2 && p.pp > 1)
        return job_error(job, "parallel.zero",
                         "got " + std::to_string(p.zero) + " with pp = " + std::to_string(p.pp) +
                             "; DeepSpeed's pipeline engine supports ZeRO stage 0 or 1 only; allowed for --format "
                             "deepspeed: zero 0 or 1 with pp > 1");
    // mlaio: ds_config carries no model, so what matters is whether some model code DeepSpeed
    // trains has the part. Multi-token prediction: none (Megatron-DeepSpeed has no MTP, and
    // transformers' DeepseekV3ForCausalLM drops the MTP module's weights). MLA: transformers'
    // DeepseekV3ForCausalLM has it, without tensor or pipeline parallelism; Megatron-DeepSpeed,
    // which supplies those, has no MLA.
    if (job.model.mtp_layers > 0)
        return job_error(job, "model.mtp_layers",
                         "got " + std::to_string(job.model.mtp_layers) + "; no model code DeepSpeed trains has "
                         "multi-token prediction (Megatron-DeepSpeed has none; transformers' DeepseekV3ForCausalLM "
                         "leaves the MTP module out); allowed for --format deepspeed: 0, or --format megatron / torchtitan");
    if (job.model.mla() && (p.tp > 1 || p.pp > 1))
        return job_error(job, "model.kv_lora_rank",
                         "got " + std::to_string(job.model.kv_lora_rank) + " (multi-head latent attention) with tp " +
                             std::to_string(p.tp) + " × pp " + std::to_string(p.pp) + "; Megatron-DeepSpeed, which "
                             "DeepSpeed's tensor / pipeline parallelism needs, has no MLA; allowed for --format "
                             "deepspeed: tp = pp = 1 (transformers' DeepseekV3ForCausalLM under ZeRO), or --format "
                             "megatron / torchtitan");
    ExportOutput out;
    if (job.model.moe_ffn_hidden > 0 || job.model.shared_expert_ffn_hidden > 0 || job.model.first_dense_layers > 0)
        out.notes.push_back("model.moe_ffn_hidden / shared_expert_ffn_hidden / first_dense_layers: the experts' width, the "
                            "shared experts and the dense first layers are built by the model code "
                            "(deepspeed.moe.layer.MoE wraps the expert module it is given)");
    if (job.model.mla())
        out.notes.push_back("model.kv_lora_rank: multi-head latent attention is transformers' DeepseekV3ForCausalLM "
                            "(model_type deepseek_v3) in the training script; its routed experts run without expert "
                            "parallelism there");
    nlohmann::ordered_json ds;
    ds["train_batch_size"] = t.global_batch;
    ds["train_micro_batch_size_per_gpu"] = t.micro_batch;
    ds["gradient_accumulation_steps"] = job.grad_accum();
    ds["gradient_clipping"] = t.grad_clip;
    ds["bf16"] = {{"enabled", t.precision == Precision::bf16}};
    // issue 28: with bf16, DeepSpeed accumulates gradients in the model's dtype unless
    // data_types.grad_accum_dtype says otherwise (engine.py get_data_types). The estimate
    // counts fp32 main gradients unless parallel.grad_reduce_in_fp32 = false, so the dtype is
    // written either way; fp32 needs ZeRO (_do_optimizer_sanity_check raises NotImplementedError
    // for a bf16 model with fp32 accumulation and no ZeRO; ZeRO-1 runs BF16_Optimizer then).
    const int zero_stage = p.distributed_optimizer ? 1 : p.zero;
    if (t.precision == Precision::bf16) {
        if (p.grad_reduce_in_fp32 && zero_stage == 0)
            return job_error(job, "parallel.grad_reduce_in_fp32",
                             "true with bf16 and zero = 0; DeepSpeed accumulates bf16 gradients in fp32 only under ZeRO "
                             "(engine.py _do_optimizer_sanity_check: \"unsupported mix of model_dtype and "
                             "grad_accum_dtype\"); allowed for --format deepspeed: zero ≥ 1, or grad_reduce_in_fp32 = false "
                             "(bf16 gradient accumulation)");
        ds["data_types"] = {{"grad_accum_dtype", p.grad_reduce_in_fp32 ? "fp32" : "bf16"}};
    }
    if (t.fp8 != Fp8Recipe::none)
        out.notes.push_back(std::string("training.fp8 = \"") + to_string(t.fp8) +
                            "\": DeepSpeed has no native FP8 training; ds_config trains in bf16 (the estimate "
                            "assumed FP8 GEMMs). Wrap the model's linear layers in Transformer Engine "
                            "(te.fp8_autocast) in the training script, or export to Megatron-LM or torchtitan");
    if (t.precision == Precision::fp16) ds["fp16"] = {{"enabled", true}, {"loss_scale", 0}};  // 0 = dynamic
    else ds["fp16"] = {{"enabled", false}};

    const int stage = zero_stage;
    const long long bucket = std::llround(e.zero_bucket_elements);
    nlohmann::ordered_json zero;
    zero["stage"] = stage;
    zero["overlap_comm"] = p.overlap_grad_reduce;
    zero["contiguous_gradients"] = true;
    zero["reduce_bucket_size"] = bucket;
    if (stage == 3) {
        // parallel.fsdp_prefetch layers ahead, in parameters (0 turns prefetching off).
        const ParamCounts pc = count_parameters(job.model);
        zero["stage3_prefetch_bucket_size"] = (long long)p.fsdp_prefetch * pc.per_layer;
        // hsdp: MiCS shards inside groups of mics_shard_size ranks and replicates across them
        // (validate_job allows dp_replicate > 1 with DeepSpeed only under ZeRO-3).
        if (p.dp_replicate > 1) zero["mics_shard_size"] = p.dp / p.dp_replicate;
    } else {
        zero["allgather_bucket_size"] = bucket;
    }
    // offload: ZeRO-Offload (offload_optimizer, stages 1-3) and ZeRO-3's offload_param, in
    // pinned host memory as the estimate assumes.
    if (p.offload_optimizer == OffloadDevice::cpu) zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
    if (p.offload_params) zero["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
    ds["zero_optimization"] = zero;
    if (p.overlap_param_gather && stage != 3)
        out.notes.push_back("parallel.overlap_param_gather: DeepSpeed ZeRO-1/2 all-gathers the updated parameters "
                            "inside step(), not behind the next forward; there is no ds_config key for it");
    if (p.async_tp && p.tp > 1)  // tt405
        out.notes.push_back("parallel.async_tp: PyTorch's micro-pipelined TP is torchtitan's (Inductor) feature; "
                            "DeepSpeed has no ds_config key for it");
    if (p.tp_comm_overlap)
        out.notes.push_back("parallel.tp_comm_overlap: tensor-parallel GEMM/communication overlap is part of the "
                            "model code (Megatron-DeepSpeed with Transformer Engine: --tp-comm-overlap), not ds_config");
    if (p.distributed_optimizer)
        out.notes.push_back("parallel.distributed_optimizer is written as ZeRO stage 1 (the same sharding of "
                            "optimizer state over data-parallel ranks)");

    nlohmann::ordered_json opt;
    if (t.optimizer == Optimizer::sgd) {
        // "SGD" is not one of DeepSpeed's own optimizers, so the engine builds torch.optim.SGD.
        opt = {{"type", "SGD"}, {"params", {{"lr", t.lr}, {"momentum", kSgdMomentum}, {"weight_decay", t.weight_decay}}}};
    } else if (t.optimizer == Optimizer::adamw) {
        opt = {{"type", "AdamW"}, {"params", {{"lr", t.lr}, {"weight_decay", t.weight_decay}, {"betas", {0.9, 0.95}}}}};
    } else {
        // DeepSpeed's Adam is decoupled (AdamW) unless adam_w_mode is false.
        opt = {{"type", "Adam"},
               {"params", {{"lr", t.lr}, {"weight_decay", t.weight_decay}, {"betas", {0.9, 0.95}}, {"adam_w_mode", false}}}};
    }
    ds["optimizer"] = opt;
    // issue 28: torch.optim.SGD is not one of ZeRO's tested optimizers (is_zero_supported_optimizer),
    // and the engine asserts unless the config allows it.
    if (t.optimizer == Optimizer::sgd && stage > 0) ds["zero_allow_untested_optimizer"] = true;
    // WarmupCosineLR (lr_schedules.py) raises unless warmup_num_steps is an integer >= 1,
    // and warms up over max(2, warmup_num_steps) steps from warmup_min_ratio·lr. So a job
    // without warmup (0, or 1: our step 0 already gets the full lr) is written as one
    // warmup step from ratio 1.0 — the full lr from the start, then the cosine.
    // cos_min_ratio = min_lr / lr lies in [0, 1] (validate_job: min_lr <= lr); the cosine
    // runs over total_num_steps − warmup (it takes max(1, ·), and warmup <= steps).
    const bool no_warmup = t.warmup <= 1;
    ds["scheduler"] = {{"type", "WarmupCosineLR"},
                       {"params",
                        {{"total_num_steps", t.steps},
                         {"warmup_num_steps", no_warmup ? 1 : t.warmup},
                         {"warmup_min_ratio", no_warmup ? 1.0 : 0.0},
                         {"cos_min_ratio", t.lr > 0 ? decimal_ratio(t.min_lr, t.lr) : 0.0},
                         {"warmup_type", "linear"}}}};
    if (no_warmup)
        out.notes.push_back("training.warmup = " + std::to_string(t.warmup) + ": DeepSpeed's WarmupCosineLR needs "
                            "warmup_num_steps >= 1 (and warms up over at least 2 steps), so it is written as "
                            "warmup_num_steps = 1 with warmup_min_ratio = 1.0: the full lr until the cosine starts");
    if (p.recompute == Recompute::full) {
        // papers: partition_activations splits each checkpoint over the model-parallel group.
        ds["activation_checkpointing"] = {{"partition_activations", p.distribute_saved_activations},
                                          {"contiguous_memory_optimization", false},
                                          {"cpu_checkpointing", false}};
        out.notes.push_back("parallel.recompute = \"full\": activation_checkpointing configures "
                            "deepspeed.checkpointing; the model must call deepspeed.checkpointing.checkpoint per layer");
    } else if (p.recompute == Recompute::selective) {
        out.notes.push_back("parallel.recompute = \"selective\": ds_config has no selective recomputation; "
                            "recompute the attention core in the model code (Megatron-DeepSpeed: its recompute flags)");
    }

    if (!t.masked_softmax_fusion)  // papers
        out.notes.push_back("training.masked_softmax_fusion = false: the attention softmax is model code "
                            "(Megatron-DeepSpeed: --no-masked-softmax-fusion)");
    if (job.estimate.memory_efficient_norm)  // menorm
        out.notes.push_back("estimate.memory_efficient_norm: the norms are model code (Megatron-DeepSpeed: "
                            "--memory-efficient-layer-norm, LayerNorm only; Apex FusedRMSNorm memory_efficient=True)");
    // What lives outside ds_config.
    out.notes.push_back("the model ([model], flash_attention, vocab padding), the data and the seed are set in the "
                        "training script; ds_config carries batch, precision, ZeRO, optimizer and schedule");
    if (p.tp > 1 || p.pp > 1)
        out.notes.push_back("tp " + std::to_string(p.tp) + " × pp " + std::to_string(p.pp) +
                            " is set outside ds_config (Megatron-DeepSpeed: --tensor-model-parallel-size " +
                            std::to_string(p.tp) + " --pipeline-model-parallel-size " + std::to_string(p.pp) +
                            "; plain DeepSpeed: PipelineModule(num_stages=" + std::to_string(p.pp) +
                            ")); train_batch_size assumes data-parallel size " + std::to_string(p.dp));
    if (p.vpp > 1)
        out.notes.push_back("parallel.vpp = " + std::to_string(p.vpp) +
                            ": DeepSpeed's pipeline engine has no interleaved schedule; expect a larger bubble");
    if (p.pp > 1 && (p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split))  // l405
        out.notes.push_back("parallel.account_for_*_in_pipeline_split: DeepSpeed's PipelineModule splits by "
                            "partition_method (\"parameters\" by default, or \"type:transformer\"); give the embedding "
                            "and the loss layer's share there");
    if (p.cp > 1)
        out.notes.push_back("parallel.cp = " + std::to_string(p.cp) +
                            ": DeepSpeed has no ring-attention context parallelism in ds_config; DeepSpeed-Ulysses "
                            "sequence parallelism is a different algorithm, set in code");
    if (p.ep > 1)
        out.notes.push_back("parallel.ep = " + std::to_string(p.ep) +
                            ": expert parallelism is set in the model code (deepspeed.moe.layer.MoE(ep_size=" +
                            std::to_string(p.ep) + "))");
    // deepep: DeepSpeed-MoE's layer exchanges tokens with its own all-to-all.
    if (p.moe_dispatcher != MoeDispatcher::alltoall || p.moe_a2a_overlap)
        out.notes.push_back("parallel.moe_dispatcher / moe_a2a_overlap: Megatron-core's flex dispatcher (DeepEP / "
                            "HybridEP) and --overlap-moe-expert-parallel-comm have no ds_config equivalent; "
                            "DeepSpeed-MoE runs a plain all-to-all, so expect more EP time than the estimate's");
    if (p.sequence_parallel)
        out.notes.push_back("parallel.sequence_parallel: Megatron-style sequence parallelism is part of the "
                            "tensor-parallel model code, not ds_config");
    if (effective_order(job, p.order) != effective_order(job, "tp-cp-ep-dp-pp"))
        out.notes.push_back("parallel.order = \"" + p.order + "\": rank placement is decided by the launcher and "
                            "the model's process groups, not ds_config");
    if (std::string note = nvlink_domain_note(job, "DeepSpeed"); !note.empty()) out.notes.push_back(note);  // gb200
    out.text = ds.dump(2) + "\n";
    return out;
}

}  // namespace ptd::export_internal
