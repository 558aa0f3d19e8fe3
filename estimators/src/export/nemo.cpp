// nemo.cpp — JobSpec → a Megatron-Bridge (NeMo 2 successor) training script: a Python module
// that starts from Megatron-Bridge's vanilla_gpt_pretrain_config() — the recipe whose every
// field is Megatron-Core / pretrain_gpt.py's default, made for Megatron-LM ↔ Bridge runs — and
// sets each setting PTD planned on the ConfigContainer, then calls pretrain().
//
// The settings are the Megatron-LM export's arguments (megatron.cpp, the same checks and
// refusals), each translated to its ConfigContainer field. The translation restates
// Megatron-Bridge's own table, scripts/translate_mlm_to_bridge.py ARG_MAP, with the field names
// checked against Megatron-Bridge main 067f987 (2026-08: training/config.py,
// training/mixed_precision.py, training/comm_overlap.py, models/mla_provider.py,
// recipes/gpt/h100/vanilla_gpt.py) and Megatron-LM d98e8a6 (the dataclasses Bridge inherits:
// core/model_parallel_config.py, core/transformer/transformer_config.py,
// core/optimizer/optimizer_config.py, core/distributed/distributed_data_parallel_config.py,
// training/config/*.py).
#include <algorithm>
#include <map>

#include "export/export_internal.h"
#include "ptd/spec/stack_defaults.h"

namespace ptd::export_internal {

namespace {

// How one Megatron-LM argument becomes ConfigContainer fields.
enum class Kind {
    value,        // field = the value (a number, or a quoted string for `text`)
    text,         // field = "value"
    flag,         // field = True
    flag_invert,  // field = False
    skip,         // nothing: implied by another field, or Bridge's default (said in the comment)
    special,      // written by translate() itself
};
struct Field {
    Kind kind;
    const char* target;  // "section.field"; for skip, why
};

// ARG_MAP of scripts/translate_mlm_to_bridge.py (Megatron-Bridge 067f987), for the arguments the
// Megatron-LM export writes, plus those ARG_MAP leaves out, mapped to the dataclass field of
// the same meaning (named in each comment).
const std::map<std::string, Field>& bridge_fields() {
    static const std::map<std::string, Field> m = {
        {"--tensor-model-parallel-size", {Kind::value, "model.tensor_model_parallel_size"}},
        {"--pipeline-model-parallel-size", {Kind::value, "model.pipeline_model_parallel_size"}},
        {"--num-layers-per-virtual-pipeline-stage", {Kind::special, "model.virtual_pipeline_model_parallel_size"}},
        // not in ARG_MAP: ModelParallelConfig / TransformerConfig fields of the same meaning
        {"--decoder-first-pipeline-num-layers", {Kind::value, "model.num_layers_in_first_pipeline_stage"}},
        {"--decoder-last-pipeline-num-layers", {Kind::value, "model.num_layers_in_last_pipeline_stage"}},
        {"--pipeline-model-parallel-layout", {Kind::text, "model.pipeline_model_parallel_layout"}},
        {"--account-for-embedding-in-pipeline-split", {Kind::flag, "model.account_for_embedding_in_pipeline_split"}},
        {"--account-for-loss-in-pipeline-split", {Kind::flag, "model.account_for_loss_in_pipeline_split"}},
        {"--microbatch-group-size-per-virtual-pipeline-stage", {Kind::value, "model.microbatch_group_size_per_vp_stage"}},
        {"--context-parallel-size", {Kind::value, "model.context_parallel_size"}},
        {"--expert-model-parallel-size", {Kind::value, "model.expert_model_parallel_size"}},
        {"--expert-tensor-parallel-size", {Kind::value, "model.expert_tensor_parallel_size"}},
        {"--moe-shared-expert-overlap", {Kind::flag, "model.moe_shared_expert_overlap"}},
        {"--overlap-moe-expert-parallel-comm", {Kind::flag, "model.overlap_moe_expert_parallel_comm"}},
        {"--cuda-graph-impl", {Kind::text, "model.cuda_graph_impl"}},
        {"--cuda-graph-scope", {Kind::special, "model.cuda_graph_scope"}},
        {"--no-check-for-nan-in-loss-and-grad", {Kind::flag_invert, "ddp.check_for_nan_in_grad"}},
        {"--moe-expert-capacity-factor", {Kind::value, "model.moe_expert_capacity_factor"}},
        {"--moe-pad-expert-input-to-capacity", {Kind::flag, "model.moe_pad_expert_input_to_capacity"}},
        {"--sequence-parallel", {Kind::flag, "model.sequence_parallel"}},
        {"--use-distributed-optimizer", {Kind::special, "ddp.use_distributed_optimizer"}},
        {"--num-distributed-optimizer-instances", {Kind::value, "ddp.num_distributed_optimizer_instances"}},
        {"--optimizer-cpu-offload", {Kind::flag, "optimizer.optimizer_cpu_offload"}},
        {"--optimizer-offload-fraction", {Kind::value, "optimizer.optimizer_offload_fraction"}},
        {"--use-precision-aware-optimizer", {Kind::flag, "optimizer.use_precision_aware_optimizer"}},
        {"--overlap-cpu-optimizer-d2h-h2d", {Kind::flag, "optimizer.overlap_cpu_optimizer_d2h_h2d"}},
        {"--overlap-grad-reduce", {Kind::flag, "ddp.overlap_grad_reduce"}},
        {"--overlap-param-gather", {Kind::flag, "ddp.overlap_param_gather"}},
        // MixedPrecisionConfig.grad_reduce_in_fp32 is copied onto ddp (update_config_with_precision_overrides)
        {"--grad-reduce-in-bf16", {Kind::flag_invert, "mixed_precision.grad_reduce_in_fp32"}},
        {"--tp-comm-overlap", {Kind::special, "comm_overlap"}},
        {"--no-overlap-p2p-communication", {Kind::flag_invert, "model.overlap_p2p_comm"}},
        {"--use-tp-pp-dp-mapping", {Kind::flag, "dist.use_tp_pp_dp_mapping"}},
        {"--num-layers", {Kind::value, "model.num_layers"}},
        {"--hidden-size", {Kind::value, "model.hidden_size"}},
        {"--ffn-hidden-size", {Kind::value, "model.ffn_hidden_size"}},
        {"--num-attention-heads", {Kind::value, "model.num_attention_heads"}},
        {"--group-query-attention", {Kind::skip, "implied by model.num_query_groups"}},
        {"--num-query-groups", {Kind::value, "model.num_query_groups"}},
        {"--kv-channels", {Kind::value, "model.kv_channels"}},
        {"--multi-latent-attention", {Kind::special, "model.multi_latent_attention"}},
        {"--q-lora-rank", {Kind::value, "model.q_lora_rank"}},
        {"--kv-lora-rank", {Kind::value, "model.kv_lora_rank"}},
        {"--qk-head-dim", {Kind::value, "model.qk_head_dim"}},
        {"--qk-pos-emb-head-dim", {Kind::value, "model.qk_pos_emb_head_dim"}},
        {"--v-head-dim", {Kind::value, "model.v_head_dim"}},
        {"--qk-layernorm", {Kind::flag, "model.qk_layernorm"}},
        {"--mtp-num-layers", {Kind::value, "model.mtp_num_layers"}},
        {"--seq-length", {Kind::special, "model.seq_length"}},
        {"--max-position-embeddings", {Kind::value, "model.max_position_embeddings"}},
        {"--make-vocab-size-divisible-by", {Kind::value, "model.make_vocab_size_divisible_by"}},
        {"--position-embedding-type", {Kind::text, "model.position_embedding_type"}},
        {"--rotary-base", {Kind::value, "model.rotary_base"}},
        {"--normalization", {Kind::text, "model.normalization"}},
        {"--norm-epsilon", {Kind::value, "model.layernorm_epsilon"}},
        {"--memory-efficient-layer-norm", {Kind::flag, "model.memory_efficient_layer_norm"}},
        {"--swiglu", {Kind::special, "model.gated_linear_unit"}},
        {"--untie-embeddings-and-output-weights", {Kind::flag_invert, "model.share_embeddings_and_output_weights"}},
        {"--disable-bias-linear", {Kind::flag_invert, "model.add_bias_linear"}},
        {"--add-qkv-bias", {Kind::flag, "model.add_qkv_bias"}},
        {"--num-experts", {Kind::value, "model.num_moe_experts"}},
        {"--moe-router-topk", {Kind::value, "model.moe_router_topk"}},
        {"--moe-token-dispatcher-type", {Kind::text, "model.moe_token_dispatcher_type"}},
        {"--moe-flex-dispatcher-backend", {Kind::text, "model.moe_flex_dispatcher_backend"}},
        // not in ARG_MAP: TransformerConfig moe_permute_fusion / moe_router_fusion (Megatron-LM
        // transformer_config.py), which Megatron-Bridge's MoE providers and recipes set
        {"--moe-permute-fusion", {Kind::flag, "model.moe_permute_fusion"}},
        {"--moe-router-fusion", {Kind::flag, "model.moe_router_fusion"}},
        {"--moe-router-padding-for-fp8", {Kind::flag, "model.moe_router_padding_for_fp8"}},
        {"--moe-router-num-groups", {Kind::value, "model.moe_router_num_groups"}},
        {"--moe-router-group-topk", {Kind::value, "model.moe_router_group_topk"}},
        {"--moe-ffn-hidden-size", {Kind::value, "model.moe_ffn_hidden_size"}},
        {"--moe-shared-expert-intermediate-size", {Kind::value, "model.moe_shared_expert_intermediate_size"}},
        {"--moe-layer-freq", {Kind::special, "model.moe_layer_freq"}},
        {"--hidden-dropout", {Kind::value, "model.hidden_dropout"}},
        {"--attention-dropout", {Kind::value, "model.attention_dropout"}},
        {"--use-flash-attn", {Kind::skip, "Bridge's default attention backend (auto) picks the flash / fused kernels"}},
        {"--attention-backend", {Kind::special, "model.attention_backend"}},
        {"--no-masked-softmax-fusion", {Kind::skip, "model.masked_softmax_fusion is always written"}},
        {"--cross-entropy-loss-fusion", {Kind::skip, "model.cross_entropy_loss_fusion is always written"}},
        {"--cross-entropy-fusion-impl", {Kind::skip, "model.cross_entropy_fusion_impl is always written"}},
        {"--micro-batch-size", {Kind::value, "train.micro_batch_size"}},
        {"--global-batch-size", {Kind::value, "train.global_batch_size"}},
        {"--bf16", {Kind::skip, "cfg.mixed_precision = bf16_mixed()"}},
        {"--fp16", {Kind::skip, "cfg.mixed_precision = fp16_mixed()"}},
        {"--fp8-format", {Kind::text, "mixed_precision.fp8"}},
        {"--fp8-recipe", {Kind::text, "mixed_precision.fp8_recipe"}},
        {"--fp8-amax-history-len", {Kind::value, "mixed_precision.fp8_amax_history_len"}},
        {"--fp8-amax-compute-algo", {Kind::text, "mixed_precision.fp8_amax_compute_algo"}},
        {"--first-last-layers-bf16", {Kind::flag, "mixed_precision.first_last_layers_bf16"}},
        {"--num-layers-at-start-in-bf16", {Kind::value, "mixed_precision.num_layers_at_start_in_bf16"}},
        {"--num-layers-at-end-in-bf16", {Kind::value, "mixed_precision.num_layers_at_end_in_bf16"}},
        {"--fp8-param-gather", {Kind::skip, "mixed_precision.fp8_param_gather is always written"}},
        {"--recompute-granularity", {Kind::text, "model.recompute_granularity"}},
        {"--recompute-method", {Kind::text, "model.recompute_method"}},
        {"--recompute-num-layers", {Kind::value, "model.recompute_num_layers"}},
        {"--recompute-modules", {Kind::special, "model.recompute_modules"}},
        {"--distribute-saved-activations", {Kind::flag, "model.distribute_saved_activations"}},
        {"--optimizer", {Kind::text, "optimizer.optimizer"}},
        {"--adam-beta1", {Kind::value, "optimizer.adam_beta1"}},
        {"--adam-beta2", {Kind::value, "optimizer.adam_beta2"}},
        {"--sgd-momentum", {Kind::value, "optimizer.sgd_momentum"}},
        // Megatron-LM maps these words to torch dtypes (arguments.py dtype_map; fp8 → torch.uint8)
        {"--main-params-dtype", {Kind::special, "optimizer.main_params_dtype"}},
        {"--exp-avg-dtype", {Kind::special, "optimizer.exp_avg_dtype"}},
        {"--exp-avg-sq-dtype", {Kind::special, "optimizer.exp_avg_sq_dtype"}},
        {"--lr", {Kind::value, "optimizer.lr"}},
        {"--min-lr", {Kind::value, "optimizer.min_lr"}},
        {"--lr-decay-style", {Kind::text, "scheduler.lr_decay_style"}},
        {"--lr-warmup-iters", {Kind::value, "scheduler.lr_warmup_iters"}},
        {"--train-iters", {Kind::value, "train.train_iters"}},
        {"--weight-decay", {Kind::value, "optimizer.weight_decay"}},
        {"--clip-grad", {Kind::value, "optimizer.clip_grad"}},
        {"--seed", {Kind::value, "rng.seed"}},
        // MCore's BlendedMegatronDatasetConfig sets mock = (no blend) itself (its field is init=False)
        {"--mock-data", {Kind::skip, "no dataset.data_path: Megatron-Core builds mock data"}},
        {"--tokenizer-type", {Kind::text, "tokenizer.tokenizer_type"}},
        {"--vocab-size", {Kind::value, "tokenizer.vocab_size"}},
        {"--data-path", {Kind::text, "dataset.data_path"}},
        // What a launch script adds (launch_script.cpp): paths, logging and the MoE runtime flags.
        {"--tokenizer-model", {Kind::text, "tokenizer.tokenizer_model"}},
        {"--save", {Kind::text, "checkpoint.save"}},
        {"--load", {Kind::text, "checkpoint.load"}},
        {"--save-interval", {Kind::value, "checkpoint.save_interval"}},
        {"--tensorboard-dir", {Kind::text, "logger.tensorboard_dir"}},
        {"--moe-grouped-gemm", {Kind::flag, "model.moe_grouped_gemm"}},
        {"--moe-router-load-balancing-type", {Kind::text, "model.moe_router_load_balancing_type"}},
        {"--moe-aux-loss-coeff", {Kind::value, "model.moe_aux_loss_coeff"}},
        {"--moe-router-score-function", {Kind::text, "model.moe_router_score_function"}},
        {"--moe-router-enable-expert-bias", {Kind::flag, "model.moe_router_enable_expert_bias"}},
    };
    return m;
}

std::string unquote(std::string v) {
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    return v;
}

// A string value: a launch script's "${NAME}" is read from the environment it exports.
std::string py_text(const std::string& value) {
    const std::string v = unquote(value);
    if (v.size() > 3 && v.starts_with("${") && v.back() == '}') return "os.environ[" + py_str(v.substr(2, v.size() - 3)) + "]";
    return py_str(v);
}

std::string py_words(const std::string& words) {  // "a b c" → ["a", "b", "c"]
    std::string out = "[";
    size_t start = 0;
    while (start < words.size()) {
        size_t end = words.find(' ', start);
        if (end == std::string::npos) end = words.size();
        out += (out.size() > 1 ? ", " : "") + py_str(words.substr(start, end - start));
        start = end + 1;
    }
    return out + "]";
}

std::string torch_dtype(const std::string& word) {
    return word == "fp16" ? "torch.float16" : word == "bf16" ? "torch.bfloat16" : word == "fp8" ? "torch.uint8" : "torch.float32";
}

}  // namespace

// The Megatron-LM arguments of the export (`--flag value` lines joined by " \\\n").
std::vector<std::pair<std::string, std::string>> split_megatron_args(const std::string& text) {
    std::vector<std::pair<std::string, std::string>> out;
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find(" \\\n", start);
        std::string item = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (!item.empty() && item.back() == '\n') item.pop_back();
        const size_t space = item.find(' ');
        out.emplace_back(item.substr(0, space), space == std::string::npos ? "" : item.substr(space + 1));
        if (end == std::string::npos) break;
        start = end + 3;
    }
    return out;
}

Result<ExportOutput> export_nemo(const JobSpec& job) { return nemo_module(job, {}); }

Result<ExportOutput> nemo_module(const JobSpec& job, const std::vector<std::pair<std::string, std::string>>& extra_args) {
    auto megatron = export_megatron(job);
    if (!megatron) return std::unexpected(megatron.error());
    std::vector<std::pair<std::string, std::string>> args = split_megatron_args(megatron->text);
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    const ModelSpec& m = job.model;
    const TrainingSpec& t = job.training;
    ExportOutput out;
    for (const std::string& n : megatron->notes) {
        if (n.starts_with(kMegatronLossFlagsByDate)) continue;  // fusedce2: Bridge takes the loss as estimated
        if (n.starts_with(kMegatronAttentionBackendByDate)) continue;  // teflash: written below
        out.notes.push_back(n.find("Megatron-LM") != std::string::npos && n.find("NeMo") == std::string::npos
                                ? n + " (Megatron-Bridge runs Megatron-Core: the same applies)"
                                : n);
    }
    std::vector<std::string> sets;  // "cfg.<section>.<field> = <python>"
    auto set = [&](const std::string& target, const std::string& value, const std::string& comment = {}) {
        sets.push_back("    cfg." + target + " = " + value + (comment.empty() ? "" : "  # " + comment));
    };
    bool mla = false;
    for (const auto& [flag, value] : args) {
        auto it = bridge_fields().find(flag);
        if (it == bridge_fields().end())
            return job_error(job, "training.framework",
                             "the Megatron-LM argument " + flag + " has no Megatron-Bridge field in this export; allowed: "
                             "--format megatron (please report: every argument the Megatron-LM export writes is mapped)");
        const Field& f = it->second;
        switch (f.kind) {
            case Kind::value: set(f.target, value); break;
            case Kind::text: set(f.target, py_text(value)); break;
            case Kind::flag: set(f.target, "True"); break;
            case Kind::flag_invert: set(f.target, "False"); break;
            case Kind::skip: break;
            case Kind::special:
                if (flag == "--num-layers-per-virtual-pipeline-stage")
                    set(f.target, std::to_string(job.parallel.vpp), "--num-layers-per-virtual-pipeline-stage " + value);
                else if (flag == "--cuda-graph-scope" || flag == "--recompute-modules")
                    set(f.target, py_words(value));
                else if (flag == "--use-distributed-optimizer") {
                    set("ddp.use_distributed_optimizer", "True");
                    set("optimizer.use_distributed_optimizer", "True");
                } else if (flag == "--tp-comm-overlap")
                    // mbrecipe: CommOverlapConfig.setup copies its own overlap_moe_expert_parallel_comm
                    // (False unless given) onto the model config, so the EP overlap goes in it too.
                    set("comm_overlap",
                        job.parallel.moe_a2a_overlap ? "CommOverlapConfig(tp_comm_overlap=True, overlap_moe_expert_parallel_comm=True)"
                                                     : "CommOverlapConfig(tp_comm_overlap=True)",
                        "Transformer Engine userbuffers");
                else if (flag == "--multi-latent-attention")
                    mla = true;
                else if (flag == "--seq-length") {
                    set("model.seq_length", value);
                    set("dataset.seq_length", value);
                } else if (flag == "--swiglu") {
                    set("model.gated_linear_unit", "True");
                    set("model.activation_func", "F.silu");
                } else if (flag == "--moe-layer-freq")
                    set(f.target, unquote(value), "a Python list: dense layers 0, MoE layers 1");
                else if (flag == "--attention-backend")
                    set(f.target, "AttnBackend." + value);
                else if (flag == "--main-params-dtype" || flag == "--exp-avg-dtype" || flag == "--exp-avg-sq-dtype")
                    set(f.target, torch_dtype(value));
                break;
        }
    }
    // Always written: Megatron-LM's argument default that GPTModelProvider does not share
    // (TransformerConfig.masked_softmax_fusion defaults to False), and FP8 weights' gather.
    set("model.masked_softmax_fusion", t.masked_softmax_fusion ? "True" : "False");
    // fusedce2: GPTModelProvider fuses the loss unless told not to; the job's loss as estimated.
    const CrossEntropyImpl ce = job.estimate.cross_entropy;
    const bool fused_loss = ce == CrossEntropyImpl::megatron_fused || ce == CrossEntropyImpl::te;
    set("model.cross_entropy_loss_fusion", fused_loss ? "True" : "False");
    if (fused_loss) set("model.cross_entropy_fusion_impl", ce == CrossEntropyImpl::te ? "\"te\"" : "\"native\"");
    if (mla && m.q_lora_rank == 0) set("model.q_lora_rank", "None", "queries projected directly (no q LoRA)");
    // teflash: Transformer Engine's FlashAttention backend where the job names FlashAttention-2,
    // whatever date kept --attention-backend out of the Megatron-LM arguments.
    const bool backend_flag = std::any_of(args.begin(), args.end(), [](const auto& a) { return a.first == "--attention-backend"; });
    if (t.flash_attention && t.flash_kernel == FlashKernel::flash_attn_2 && !backend_flag)
        set("model.attention_backend", "AttnBackend.flash");

    std::string py;
    auto line = [&](const std::string& l = {}) { py += l + "\n"; };
    line("# Megatron-Bridge training script written by `ptd export --format nemo` from " + job.origin.file);
    line("# Targets Megatron-Bridge main 067f987 (2026-08) on Megatron-Core d98e8a6; NeMo 2 recipes run the same");
    line("# ConfigContainer. Run it on every node under torchrun (" + std::to_string(job.cluster.gpus_per_node) +
         " processes per node, " + std::to_string(job.world_size()) + " GPUs):");
    line("#   torchrun --nnodes " + std::to_string(job.cluster.nodes) + " --nproc-per-node " +
         std::to_string(job.cluster.gpus_per_node) + " ... ptd_job.py");
    line("# It starts from vanilla_gpt_pretrain_config() (every field at Megatron-Core / pretrain_gpt.py's default)");
    line("# and sets what ptd planned; each field is the Megatron-LM argument of `ptd export --format megatron`.");
    // mbrecipe: the MoE settings came from a performance recipe; say which, and where NVIDIA's own
    // configuration of it lives (its environment variables and HybridEP tuning are not written here).
    if (const PerfRecipe* r = applied_perf_recipe(job)) {
        std::string module = std::string(r->file).substr(0, std::string(r->file).find(".py"));
        std::replace(module.begin(), module.end(), '/', '.');
        line(std::string("# The MoE dispatcher, EP overlap, CUDA graphs and capacity are Megatron-Bridge's performance recipe ") +
             r->name + ",");
        line("# written out as fields; NVIDIA's own run of it (with its environment variables and HybridEP tuning) is");
        line("#   from megatron.bridge.perf_recipes." + module + " import " + r->name + "_config");
    }
    line("import os  # noqa: F401 (a launch script's paths come from its environment)");
    line();
    line("import torch");
    line("import torch.nn.functional as F");
    line("from megatron.core.transformer.enums import AttnBackend  # noqa: F401 (used when the attention backend is set)");
    line();
    line("from megatron.bridge.recipes.gpt.vanilla_gpt import vanilla_gpt_pretrain_config");
    if (mla) line("from megatron.bridge.models.mla_provider import MLAModelProvider");
    line("from megatron.bridge.training.comm_overlap import CommOverlapConfig  # noqa: F401");
    line("from megatron.bridge.training.gpt_step import forward_step");
    line(std::string("from megatron.bridge.training.mixed_precision import ") +
         (t.precision == Precision::fp16 ? "fp16_mixed" : "bf16_mixed"));
    line("from megatron.bridge.training.pretrain import pretrain");
    line();
    line();
    line("def ptd_job_config():");
    line("    cfg = vanilla_gpt_pretrain_config()");
    if (mla) line("    cfg.model = MLAModelProvider()  # multi-head latent attention (the translator's choice for MLA)");
    if (t.precision == Precision::fp32) {
        line("    cfg.mixed_precision = None  # fp32 training");
    } else {
        line(std::string("    cfg.mixed_precision = ") + (t.precision == Precision::fp16 ? "fp16_mixed()" : "bf16_mixed()"));
        line(std::string("    cfg.mixed_precision.fp8_param_gather = ") + (t.fp8 != Fp8Recipe::none && t.fp8_param_gather ? "True" : "False"));
    }
    for (const std::string& s : sets) line(s);
    line("    return cfg");
    line();
    line();
    line("if __name__ == \"__main__\":");
    line("    pretrain(config=ptd_job_config(), forward_step_func=forward_step)");
    out.text = py;
    return out;
}

}  // namespace ptd::export_internal
