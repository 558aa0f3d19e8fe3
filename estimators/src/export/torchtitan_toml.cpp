// torchtitan_toml.cpp — the train-config TOML of torchtitan up to v0.2.2 (--job.config_file;
// torchtitan/config/job_config.py of v0.2.2, 73a0e69).
#include <algorithm>
#include <cmath>

#include "export/export_internal.h"
#include "spec/job_toml_internal.h"

namespace ptd::export_internal {

// The train-config TOML of torchtitan v0.2.x (job_config.py of v0.2.2).
Result<ExportOutput> export_torchtitan_toml(const JobSpec& job) {
    const ModelSpec& m = job.model;
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    auto plan = plan_torchtitan(job, ExportFormat::torchtitan_toml, "output");
    if (!plan) return std::unexpected(plan.error());
    ExportOutput out;
    out.notes = plan->notes;

    TomlWriter w;
    w.comment("torchtitan train config written by `ptd export --format torchtitan-toml` from " + job.origin.file);
    w.comment("for torchtitan up to v0.2.2 (torchtitan/config/job_config.py); pass with --job.config_file");
    w.header("job");
    w.str("description", m.name + " on " + std::to_string(job.world_size()) + " GPUs (ptd export)");

    w.header("model");
    if (plan->flavor) {
        w.str("name", plan->family);  // mlaio: llama3, qwen3 or deepseek_v3 (v0.2.2 has all three)
        w.str("flavor", plan->flavor);
    } else {
        w.comment("no torchtitan flavor matches " + m.name + " (" + std::to_string(m.layers) + " layers, hidden " +
                  std::to_string(m.hidden) + ", " + std::to_string(m.heads) + " heads, " + std::to_string(m.kv_heads) +
                  " KV heads, ffn " + std::to_string(m.ffn_hidden) + ", vocab " + std::to_string(m.vocab) +
                  "): register one and set name / flavor");
    }
    if (plan->fp8) w.strings("converters", {t.fp8 == Fp8Recipe::mxfp8 ? "quantize.linear.mx" : "quantize.linear.float8"});

    w.header("optimizer");
    w.str("name", t.optimizer == Optimizer::adam ? "Adam" : "AdamW");
    w.dbl("lr", t.lr);
    w.dbl("beta1", 0.9);
    w.dbl("beta2", 0.95);
    w.dbl("weight_decay", t.weight_decay);

    w.header("lr_scheduler");
    w.int_("warmup_steps", t.warmup);
    w.str("decay_type", "cosine");
    w.dbl("min_lr_factor", t.lr > 0 ? decimal_ratio(t.min_lr, t.lr) : 0.0, "min_lr as a fraction of lr");

    // With pipelining torchtitan splits each rank's local batch into micro-batches of
    // pipeline_parallel_microbatch_size; without it, global > local·dp means accumulation.
    const int local = p.pp > 1 ? t.global_batch / p.dp : t.micro_batch;
    w.header("training");
    w.int_("local_batch_size", local);
    w.int_("global_batch_size", t.global_batch);
    w.int_("seq_len", m.seq_len);
    w.dbl("max_norm", t.grad_clip);
    w.int_("steps", t.steps);
    w.str("mixed_precision_param", t.precision == Precision::bf16 ? "bfloat16" : "float32");
    if (plan->cpu_offload) w.boolean("enable_cpu_offload", true, "parameters, gradients, optimizer state in host memory");
    if (plan->fp8) {
        // fp8 (issue 15 point 3): torchtitan v0.2.x job_config.py — model.converters
        // ["quantize.linear.float8"] with [quantize.linear.float8] recipe_name, or
        // ["quantize.linear.mx"] with [quantize.linear.mx] (Blackwell; its default recipe
        // mxfp8_cublas); filter_fqns skips modules whose name contains an entry
        // (components/quantization/utils.py module_filter_fn): the output layer, bf16 layers.
        const bool mx = t.fp8 == Fp8Recipe::mxfp8;
        w.header(mx ? "quantize.linear.mx" : "quantize.linear.float8");
        if (!mx) w.str("recipe_name", t.fp8 == Fp8Recipe::rowwise ? "rowwise" : "tensorwise");
        w.strings("filter_fqns", plan->fp8_filter_fqns);
        // fsdp8gather: training.fp8_param_gather is torchao's float8 all-gather of FSDP's weights.
        if (!mx && t.fp8 == Fp8Recipe::tensorwise && t.fp8_param_gather)
            w.boolean("enable_fsdp_float8_all_gather", true, "gather the Float8Linear weights in float8");
    }

    w.header("parallelism");
    w.int_("data_parallel_replicate_degree", plan->replicate_degree);
    w.int_("data_parallel_shard_degree", plan->shard_degree);
    if (!plan->replicate && p.dp > 1 && p.zero != 3)
        w.str("fsdp_reshard_after_forward", "never", "keep gathered parameters to backward (≈ ZeRO-2)");
    w.int_("tensor_parallel_degree", p.tp);
    if (p.tp > 1 && !p.sequence_parallel)
        out.notes.push_back("parallel.sequence_parallel = false: torchtitan v0.2's tensor parallelism always shards "
                            "norms and dropout over the sequence (Megatron-style sequence parallelism)");
    w.int_("pipeline_parallel_degree", p.pp);
    if (p.pp > 1) {
        w.str("pipeline_parallel_schedule", p.vpp > 1 ? "Interleaved1F1B" : "1F1B");
        w.int_("pipeline_parallel_microbatch_size", t.micro_batch);
        w.string_lists("module_fqns_per_model_part", plan->chunk_modules);
    }
    w.int_("context_parallel_degree", p.cp);
    if (m.experts > 1) w.int_("expert_parallel_degree", p.ep);
    // etp: torchtitan v0.2.x's default expert_tensor_parallel_degree is 1; tp is written (plan_torchtitan
    // refuses any other value).
    if (m.experts > 1 && p.ep > 1 && p.etp() != 1) w.int_("expert_tensor_parallel_degree", p.etp());
    // parallel.tp_comm_overlap: async TP, which torchtitan runs only under torch.compile.
    const bool async_tp = (p.tp_comm_overlap || p.async_tp) && p.tp > 1;  // tt405: parallel.async_tp is the same key
    if (async_tp)
        w.boolean("enable_async_tensor_parallel", true,
                  p.async_tp ? "parallel.async_tp (needs [compile])" : "parallel.tp_comm_overlap (needs [compile])");
    // issue 28: [compile] is always written, so no base config's value is inherited.
    w.header("compile");
    const bool compile = t.torch_compile || plan->fp8 || async_tp;
    w.boolean("enable", compile,
              async_tp ? "async TP needs the model compiled" : plan->fp8 ? "torchao's FP8 casts are fused by torch.compile (the estimate assumes it)"
                                                                   : compile ? "training.torch_compile" : "training.torch_compile = false");
    if (compile) w.strings("components", {"model", "loss"});

    w.header("activation_checkpoint");
    w.str("mode", to_string(p.recompute));
    if (p.recompute == Recompute::selective) w.str("selective_ac_option", "op");

    w.header("debug");
    w.int_("seed", t.seed);
    out.text = w.text();
    return out;
}

}  // namespace ptd::export_internal
