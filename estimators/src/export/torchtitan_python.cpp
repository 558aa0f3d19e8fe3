// torchtitan_python.cpp — a Python config module for torchtitan's config system (Feb 2026 on:
// torchtitan/trainer.py, config/configs.py, components/optimizer,
// distributed/activation_checkpoint.py of main, b5bcd76, 2026-08).
#include <algorithm>
#include <cmath>

#include "export/export_internal.h"

namespace ptd::export_internal {

// A Python module for torchtitan's config system (Feb 2026 on): a function returning a
// Trainer.Config, run with `-m torchtitan.train --module <file> --config <function>`.
Result<ExportOutput> export_torchtitan_python(const JobSpec& job) {
    const ModelSpec& m = job.model;
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    auto plan = plan_torchtitan(job, ExportFormat::torchtitan, "lm_head");
    if (!plan) return std::unexpected(plan.error());
    ExportOutput out;
    out.notes = plan->notes;

    // torchtitan checks that each pipeline micro-batch's tokens split evenly over the
    // sequence-parallel tp ranks and 2·cp context chunks (Trainer.__init__).
    const long long tokens_per_micro = (long long)t.micro_batch * m.seq_len;
    const long long divisor = (long long)(p.sequence_parallel || p.tp == 1 ? p.tp : 1) * (p.cp > 1 ? 2 * p.cp : 1);
    if (tokens_per_micro % divisor != 0)
        return job_error(job, "model.seq_len",
                         "micro-batch of " + std::to_string(tokens_per_micro) + " tokens (micro_batch " +
                             std::to_string(t.micro_batch) + " × seq_len " + std::to_string(m.seq_len) +
                             "): torchtitan needs it divisible by tp × 2·cp = " + std::to_string(divisor) +
                             "; allowed for --format torchtitan: seq_len a multiple of " + std::to_string(divisor));

    // mlaio: the family's own baseline for the flavor, else its debugmodel (whose loss is then
    // given the model's vocabulary, as each baseline derives it: decoder_vocab_size(model_spec)).
    const std::string family = plan->family;
    const std::string baseline = plan->baseline ? plan->baseline : family + "_debugmodel";
    const bool set_loss = plan->flavor && !plan->baseline;
    const bool mtp_loss = plan->flavor && m.mtp_layers > 0;
    if (set_loss)
        out.notes.push_back("torchtitan has no Trainer.Config baseline for " + family + " " + plan->flavor + ": data, "
                            "tokenizer and checkpoints come from " + baseline + "() (a test tokenizer); set "
                            "config.hf_assets_path to the model's tokenizer");
    std::string py;
    auto line = [&](const std::string& l = {}) { py += l + "\n"; };
    line("# torchtitan config written by `ptd export --format torchtitan` from " + job.origin.file);
    line("# for torchtitan's Python config system (Feb 2026 on; checked against main b5bcd76).");
    line("# Save it as ptd_job.py where Python finds it (e.g. the torchtitan checkout) and run");
    line("#   torchrun --nproc_per_node=<GPUs per node> ... -m torchtitan.train --module ptd_job --config ptd_job");
    line("# on " + std::to_string(job.world_size()) + " GPUs. Data, tokenizer, loss, checkpoints and metrics come from");
    line("# torchtitan's " + baseline + "(); everything ptd plans is set below.");
    line("from torchtitan.components.optimizer import LRSchedulersContainer, OptimizersContainer, ParamGroupConfig");
    const bool async_tp = (p.tp_comm_overlap || p.async_tp) && p.tp > 1;  // parallel.tp_comm_overlap / async_tp (tt405)
    line("from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig");
    if (p.recompute != Recompute::none)
        line(std::string("from torchtitan.distributed.activation_checkpoint import ") +
             (p.recompute == Recompute::full ? "FullAC" : "SelectiveAC"));
    if (plan->fp8)
        line(std::string("from torchtitan.components.quantization import ") +
             (t.fp8 == Fp8Recipe::mxfp8 ? "MXFP8LinearConverter" : "Float8LinearConverter"));
    if (set_loss && !mtp_loss) line("from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss");
    if (set_loss || mtp_loss) line("from torchtitan.models.common.config_utils import decoder_vocab_size");
    if (plan->flavor) line("from torchtitan.models." + family + " import " + (mtp_loss ? "MTPLoss, " : "") + "model_registry");
    line("from torchtitan.models." + family + ".config_registry import " + baseline);
    line("from torchtitan.trainer import Trainer");
    line();
    if (!plan->flavor) {
        line();
        line("def _model_spec():");
        line("    # No torchtitan flavor matches " + m.name + " (" + std::to_string(m.layers) + " layers, hidden " +
             std::to_string(m.hidden) + ", " + std::to_string(m.heads) + " heads, " + std::to_string(m.kv_heads) +
             " KV heads,");
        line("    # ffn " + std::to_string(m.ffn_hidden) + ", vocab " + std::to_string(m.vocab) +
             "). Register one and return its ModelSpec here (and set the loss's global_vocab_size).");
        line("    raise NotImplementedError(" + py_str("ptd export: no torchtitan model flavor matches " + m.name) + ")");
        line();
    }
    line();
    line("def ptd_job() -> Trainer.Config:");
    line("    config = " + baseline + "()");
    if (plan->flavor && plan->fp8) {
        // fp8 (issue 15 point 3): the converter goes into the model spec; torch.compile fuses the casts.
        auto py_list = [](const std::vector<std::string>& v) {
            std::string l = "[";
            for (size_t i = 0; i < v.size(); ++i) l += (i ? ", " : "") + py_str(v[i]);
            return l + "]";
        };
        line("    config.model_spec = model_registry(");
        line("        " + py_str(plan->flavor) + "," + (mtp_loss ? " num_mtp_layers=" + std::to_string(m.mtp_layers) + "," : ""));
        line("        converters=[");
        if (t.fp8 == Fp8Recipe::mxfp8)
            line("            MXFP8LinearConverter.Config(fqns=" +
                 (t.fp8_bf16_first_layers + t.fp8_bf16_last_layers > 0 ? py_list(plan->fp8_layers) : std::string("[\"layers.\"]")) +
                 ", model_compile_enabled=True),  # the transformer layers, not lm_head");
        else
            line("            Float8LinearConverter.Config(recipe_name=\"rowwise\", filter_fqns=" + py_list(plan->fp8_filter_fqns) +
                 ", model_compile_enabled=True),");
        line("        ],");
        line("    )");
    } else {
        const std::string mtp_arg = mtp_loss ? ", num_mtp_layers=" + std::to_string(m.mtp_layers) : "";  // mlaio
        line(plan->flavor ? "    config.model_spec = model_registry(" + py_str(plan->flavor) + mtp_arg + ")" : "    config.model_spec = _model_spec()");
    }
    // mlaio: DeepSeek-V3's multi-token prediction trains with MTPLoss (deepseek_v3_debugmodel_mtp);
    // a debugmodel baseline's loss is sized for the debug vocabulary.
    if (mtp_loss)
        line("    config.loss = MTPLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec))");
    else if (set_loss)
        line("    config.loss = ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size="
             "decoder_vocab_size(config.model_spec)))");
    line("    config.optimizer = OptimizersContainer.Config(");
    line("        param_groups=[");
    line("            ParamGroupConfig(");
    line("                pattern=r\".*\",");
    line(std::string("                optimizer_name=") + (t.optimizer == Optimizer::adam ? "\"Adam\"" : "\"AdamW\"") + ",");
    line("                optimizer_kwargs={\"lr\": " + py_float(t.lr) + ", \"betas\": (0.9, 0.95), \"weight_decay\": " +
         py_float(t.weight_decay) + "},");
    line("            )");
    line("        ]");
    line("    )");
    line("    config.lr_scheduler = LRSchedulersContainer.Config(");
    line("        warmup_steps=" + std::to_string(t.warmup) + ",");
    line("        decay_type=\"cosine\",");
    line("        min_lr_factor=" + py_float(t.lr > 0 ? decimal_ratio(t.min_lr, t.lr) : 0.0) + ",  # min_lr as a fraction of lr");
    line("    )");
    line("    config.training = TrainingConfig(");
    line("        num_tokens_per_microbatch_per_dp_rank=" + std::to_string(tokens_per_micro) + ",  # micro-batch " +
         std::to_string(t.micro_batch) + " × " + std::to_string(m.seq_len) + " tokens");
    line("        num_tokens_per_train_step=" + std::to_string((long long)t.global_batch * m.seq_len) + ",  # global batch " +
         std::to_string(t.global_batch) + " × " + std::to_string(m.seq_len) + " tokens");
    line("        max_context_length=" + std::to_string(m.seq_len) + ",");
    line("        max_norm=" + py_float(t.grad_clip) + ",");
    line("        steps=" + std::to_string(t.steps) + ",");
    line(std::string("        mixed_precision_param=") + (t.precision == Precision::bf16 ? "\"bfloat16\"" : "\"float32\"") + ",");
    // Trainer.Config refuses CUDA graphs with pipelining, and with expert parallelism
    // unless a host-sync-free token dispatcher is configured.
    if (p.pp > 1 || p.ep > 1) line("        disable_cuda_graphs=True,");
    if (plan->cpu_offload) line("        enable_cpu_offload=True,  # parameters, gradients, optimizer state in host memory");
    line("    )");
    line("    config.parallelism = ParallelismConfig(");
    line("        data_parallel_replicate_degree=" + std::to_string(plan->replicate_degree) + ",");
    line("        data_parallel_shard_degree=" + std::to_string(plan->shard_degree) + ",");
    if (!plan->replicate && p.dp > 1 && p.zero != 3)
        line("        fsdp_reshard_after_forward=\"never\",  # keep gathered parameters to backward (≈ ZeRO-2)");
    line("        tensor_parallel_degree=" + std::to_string(p.tp) + ",");
    if (p.tp > 1) line(std::string("        enable_sequence_parallel=") + (p.sequence_parallel ? "True" : "False") + ",");
    line("        pipeline_parallel_degree=" + std::to_string(p.pp) + ",");
    if (p.pp > 1) {
        line(std::string("        pipeline_parallel_schedule=") + (p.vpp > 1 ? "\"Interleaved1F1B\"" : "\"1F1B\"") + ",");
        line("        num_pp_microbatches=" + std::to_string(plan->micro_batches) + ",");
        line("        module_fqns_per_model_part=[");
        for (const auto& chunk : plan->chunk_modules) {
            std::string l = "            [";
            for (size_t i = 0; i < chunk.size(); ++i) l += (i ? ", " : "") + py_str(chunk[i]);
            line(l + "],");
        }
        line("        ],");
    }
    line("        context_parallel_degree=" + std::to_string(p.cp) + ",");
    if (m.experts > 1) line("        expert_parallel_degree=" + std::to_string(p.ep) + ",");
    line("    )");
    // issue 28: always written, so nothing is inherited from the baseline (llama3_405b() turns on
    // compile and async TP, deepseek_v3_671b() compiles the loss). Async TP runs only under
    // torch.compile of the model (CompileConfig.__post_init__); torchao's FP8 casts are fused by it.
    const bool compile = t.torch_compile || plan->fp8 || async_tp;
    line(std::string("    config.compile = CompileConfig(enable=") + (compile ? "True" : "False") +
         (async_tp ? ", enable_async_tensor_parallel=True" : "") + ")  # " +
         (async_tp ? (p.async_tp ? "parallel.async_tp" : "parallel.tp_comm_overlap")
          : plan->fp8 ? "torchao's FP8 casts are fused by torch.compile"
          : compile ? "training.torch_compile" : "training.torch_compile = false, no async TP"));
    line(p.recompute == Recompute::full        ? "    config.activation_checkpoint = FullAC.Config()"
         : p.recompute == Recompute::selective ? "    config.activation_checkpoint = SelectiveAC.Config()"
                                               : "    config.activation_checkpoint = None");
    line("    config.debug.seed = " + std::to_string(t.seed));
    line("    return config");
    out.text = py;
    return out;
}

}  // namespace ptd::export_internal
