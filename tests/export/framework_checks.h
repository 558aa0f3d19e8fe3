// framework_checks.h — the frameworks' own checks, restated in C++ for the export tests: the
// options each framework has and what it refuses after parsing (Megatron-LM validate_args and
// TransformerConfig.__post_init__, DeepSpeed's engine sanity checks, Megatron-Bridge's
// ConfigContainer fields). Each block cites the file and commit it restates.
#pragma once

#include <algorithm>
#include <map>
#include <cctype>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "job_test_util.h"

namespace ptd_test {

// Megatron-LM options this exporter may write (megatron/training/arguments.py).
inline const std::set<std::string> kMegatronOptions = {
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage",
    "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers", "--context-parallel-size",
    "--expert-model-parallel-size", "--sequence-parallel", "--use-distributed-optimizer", "--overlap-grad-reduce",
    "--overlap-param-gather", "--use-tp-pp-dp-mapping", "--num-layers", "--hidden-size", "--ffn-hidden-size",
    "--num-attention-heads", "--group-query-attention", "--num-query-groups", "--seq-length",
    "--max-position-embeddings", "--make-vocab-size-divisible-by", "--position-embedding-type", "--rotary-base",
    "--normalization", "--norm-epsilon", "--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
    "--add-qkv-bias", "--num-experts", "--moe-router-topk", "--use-flash-attn", "--attention-backend",
    // fusedce2: ModelParallelConfig cross_entropy_loss_fusion / cross_entropy_fusion_impl (Megatron-LM d98e8a6)
    "--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl",
    "--micro-batch-size", "--global-batch-size", "--bf16", "--fp16", "--recompute-granularity", "--recompute-method",
    "--recompute-num-layers", "--optimizer", "--adam-beta1", "--adam-beta2", "--lr", "--min-lr", "--lr-decay-style",
    "--lr-warmup-iters", "--train-iters", "--weight-decay", "--clip-grad", "--seed", "--mock-data", "--tokenizer-type",
    "--vocab-size", "--data-path", "--pipeline-model-parallel-layout", "--sgd-momentum",
    "--tp-comm-overlap", "--grad-reduce-in-bf16",
    // hsdp: the distributed optimizer's instances across the data-parallel domain
    // (arguments.py _add_distributed_args: --num-distributed-optimizer-instances, default 1)
    "--num-distributed-optimizer-instances",
    // offload (Megatron-Core's HybridDeviceOptimizer)
    "--optimizer-cpu-offload", "--optimizer-offload-fraction", "--use-precision-aware-optimizer",
    "--overlap-cpu-optimizer-d2h-h2d",
    // oom4: dropout off, the precision-aware optimizer's state dtypes
    "--hidden-dropout", "--attention-dropout", "--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype",
    // moe: the all-to-all token dispatcher the estimate models
    "--moe-token-dispatcher-type"};

inline int int_of(const std::vector<std::pair<std::string, std::string>>& args, const std::string& flag, int absent = -1) {
    std::string v = value_of(args, flag);
    return v == "<absent>" ? absent : std::stoi(v);
}

// The checks Megatron-LM applies to the arguments we write (validate_args in
// megatron/training/arguments.py, TransformerConfig.__post_init__ and
// PipelineParallelLayerLayout in megatron/core, main d98e8a6), restated here: every
// violation as text, none when Megatron would accept them. `dp` is the data-parallel
// size Megatron derives from the world size.
inline std::vector<std::string> megatron_violations(const std::vector<std::pair<std::string, std::string>>& args, int dp) {
    std::vector<std::string> bad;
    auto check = [&](bool ok, const std::string& what) {
        if (!ok) bad.push_back(what);
    };
    const int tp = int_of(args, "--tensor-model-parallel-size", 1), pp = int_of(args, "--pipeline-model-parallel-size", 1);
    const int layers = int_of(args, "--num-layers"), heads = int_of(args, "--num-attention-heads");
    const int per_vstage = int_of(args, "--num-layers-per-virtual-pipeline-stage");
    const int first = int_of(args, "--decoder-first-pipeline-num-layers"), last = int_of(args, "--decoder-last-pipeline-num-layers");
    std::string layout = value_of(args, "--pipeline-model-parallel-layout");
    const bool has_layout = layout != "<absent>";
    check(heads % tp == 0, "num-attention-heads % tp");
    if (value_of(args, "--group-query-attention") == "")
        check(int_of(args, "--num-query-groups") % tp == 0 || tp % int_of(args, "--num-query-groups") == 0,
              "num-query-groups a multiple or divisor of tp");
    check(int_of(args, "--global-batch-size") % (int_of(args, "--micro-batch-size") * dp) == 0, "global batch % (micro·dp)");
    check((per_vstage >= 0) + has_layout <= 1, "more than one of the vpp arguments");
    int vpp = 1;
    if (has_layout) {
        check(first < 0 && last < 0, "layout with first/last");
        check(layout.size() >= 2 && layout.front() == '"' && layout.back() == '"', "layout not quoted for the shell");
        layout = layout.substr(1, layout.size() - 2);
        // Unroll "(…)*n" groups, then "x*n" (Megatron-core's order: pipeline_parallel_layer_layout.py
        // parse_str_to_list), then one stage per '|'.
        for (size_t open = layout.find('('); open != std::string::npos; open = layout.find('(')) {
            const size_t close = layout.find(')', open), star = close + 1;
            size_t end = star + 1;
            while (end < layout.size() && std::isdigit((unsigned char)layout[end])) ++end;
            if (close == std::string::npos || star >= layout.size() || layout[star] != '*' || end == star + 1) {
                check(false, "layout group without )*n");
                break;
            }
            std::string group;
            for (int k = std::stoi(layout.substr(star + 1, end - star - 1)); k > 0; --k) group += layout.substr(open + 1, close - open - 1);
            layout.replace(open, end - open, group);
        }
        std::string flat;
        for (size_t i = 0; i < layout.size(); ++i) {
            if (layout[i] == '*') {
                size_t j = i + 1;
                while (j < layout.size() && std::isdigit((unsigned char)layout[j])) ++j;
                flat.append((size_t)std::stoi(layout.substr(i + 1, j - i - 1)) - 1, flat.back());
                i = j - 1;
            } else {
                flat += layout[i];
            }
        }
        const int stages = 1 + (int)std::count(flat.begin(), flat.end(), '|');
        check(stages % pp == 0, "layout stages % pp");
        vpp = stages / pp;
        check(flat.find_first_not_of("EtL|") == std::string::npos, "layout characters");
        check(!flat.empty() && flat.front() == 'E' && flat.back() == 'L', "layout must start with E and end with L");
        check(std::count(flat.begin(), flat.end(), 'E') == 1 && std::count(flat.begin(), flat.end(), 'L') == 1, "one E, one L");
        check(std::count(flat.begin(), flat.end(), 't') == layers, "layout layers == num-layers");
    } else if (per_vstage >= 0) {
        check(first < 0 && last < 0, "num-layers-per-virtual-pipeline-stage with first/last");
        check(layers % pp == 0, "layers % pp");
        check(per_vstage > 0 && (layers / pp) % per_vstage == 0, "layers per stage % per virtual stage");
        vpp = per_vstage > 0 ? layers / pp / per_vstage : 1;
    } else if (first >= 0 || last >= 0) {
        int rest = layers, middle = pp;
        if (first >= 0) check(first > 0, "first > 0"), rest -= first, --middle;
        if (last >= 0) check(last > 0, "last > 0"), rest -= last, --middle;
        check((rest != 0) == (middle != 0), "middle layers and middle stages");
        if (middle) check(rest % middle == 0, "middle layers % middle stages");
    } else {
        check(layers % pp == 0, "layers % pp");
    }
    if (vpp > 1) check(pp > 1, "interleaved schedule needs pp > 1");
    if (value_of(args, "--overlap-param-gather") == "")
        check(value_of(args, "--use-distributed-optimizer") == "" && value_of(args, "--overlap-grad-reduce") == "",
              "--overlap-param-gather needs the distributed optimizer and --overlap-grad-reduce");
    return bad;
}

// What a launch script adds to the Megatron-LM arguments (issue 28), each an option of
// Megatron-LM d98e8a6 (megatron/training/config/training_config.py: save, save_interval, load,
// tensorboard_dir, tokenizer_type, tokenizer_model; core/transformer/transformer_config.py:
// moe_grouped_gemm, moe_router_load_balancing_type, moe_aux_loss_coeff,
// moe_router_score_function, moe_router_enable_expert_bias — the same flags are Megatron-Bridge's
// scripts/translate_mlm_to_bridge.py ARG_MAP keys).
inline const std::set<std::string> kMegatronLaunchOptions = {
    "--save", "--save-interval", "--load", "--tensorboard-dir", "--tokenizer-model", "--tokenizer-type",
    "--moe-grouped-gemm", "--moe-router-load-balancing-type", "--moe-aux-loss-coeff", "--moe-router-score-function",
    "--moe-router-enable-expert-bias"};

// Megatron-LM d98e8a6 megatron/core/transformer/transformer_config.py __post_init__ (the
// recompute block): "distribute_saved_activations: True must be false when sequence parallel
// is enabled" (ValueError).
inline std::vector<std::string> transformer_config_violations(const std::vector<std::pair<std::string, std::string>>& args) {
    std::vector<std::string> bad;
    const bool full = value_of(args, "--recompute-granularity") == "full";
    if (full && value_of(args, "--distribute-saved-activations") == "" && value_of(args, "--sequence-parallel") == "")
        bad.push_back("distribute_saved_activations with sequence_parallel");
    if (value_of(args, "--recompute-granularity") == "selective" && value_of(args, "--recompute-num-layers") != "<absent>")
        bad.push_back("recompute_num_layers with selective recompute");
    if (value_of(args, "--tp-comm-overlap") == "") {
        if (value_of(args, "--sequence-parallel") != "") bad.push_back("tp_comm_overlap without sequence_parallel");
    }
    return bad;
}

// DeepSpeed edaa722 deepspeed/runtime/engine.py _do_optimizer_sanity_check: with ZeRO on, an
// optimizer outside is_zero_supported_optimizer (torch.optim.SGD is one) needs
// zero_allow_untested_optimizer; without ZeRO a model dtype differing from grad_accum_dtype
// raises NotImplementedError ("unsupported mix").
inline std::vector<std::string> deepspeed_engine_violations(const nlohmann::json& ds) {
    std::vector<std::string> bad;
    const int stage = ds["zero_optimization"]["stage"].get<int>();
    const std::string type = ds["optimizer"]["type"].get<std::string>();
    const bool tested = type == "Adam" || type == "AdamW" || type == "Lamb" || type == "OneBitAdam";
    if (stage > 0 && !tested && !ds.value("zero_allow_untested_optimizer", false)) bad.push_back("untested ZeRO optimizer");
    const std::string model = ds["bf16"]["enabled"].get<bool>() ? "bf16" : ds["fp16"]["enabled"].get<bool>() ? "fp16" : "fp32";
    const std::string accum = ds.contains("data_types") ? ds["data_types"].value("grad_accum_dtype", model) : model;
    if (stage == 0 && model != accum) bad.push_back("unsupported mix of model_dtype and grad_accum_dtype");
    return bad;
}

// What torchtitan main b5bcd76 checks of a config after parsing, restated: ParallelDims._validate
// (torchtitan/distributed/parallel_dims.py: dp_replicate · dp_shard · cp · tp · pp = world size;
// ep divides dp_shard · cp · tp) and Decoder.Config.update_from_config
// (torchtitan/models/common/decoder.py: tp divides n_heads and n_kv_heads; no weight tying with
// pipeline parallelism). `dims` are the ParallelismConfig keyword arguments the export wrote.
inline std::vector<std::string> torchtitan_violations(const std::map<std::string, std::string>& dims, int world, int heads,
                                                      int kv_heads, bool tied) {
    std::vector<std::string> bad;
    auto dim = [&](const char* k) { return dims.contains(k) ? std::stoi(dims.at(k)) : 1; };
    const int rep = dim("data_parallel_replicate_degree"), shard = dim("data_parallel_shard_degree"),
              cp = dim("context_parallel_degree"), tp = dim("tensor_parallel_degree"), pp = dim("pipeline_parallel_degree"),
              ep = dim("expert_parallel_degree");
    if (rep * shard * cp * tp * pp != world) bad.push_back("dp_replicate * dp_shard * cp * tp * pp != WORLD_SIZE");
    if ((shard * cp * tp) % ep != 0) bad.push_back("expert_parallel_degree must divide dp_shard * cp * tp");
    if (heads % tp != 0) bad.push_back("tensor_parallel_degree must divide n_heads");
    if (kv_heads % tp != 0) bad.push_back("tensor_parallel_degree must divide n_kv_heads");
    if (tied && pp > 1) bad.push_back("Weight tying is not supported with Pipeline Parallel");
    return bad;
}

// Megatron-Bridge main 067f987's ConfigContainer fields the nemo export may set, per section:
// model = GPTModelProvider / MLAModelProvider (Megatron-LM d98e8a6 ModelParallelConfig +
// TransformerConfig + MLATransformerConfig), train = TrainingConfig, optimizer = OptimizerConfig
// (core/optimizer/optimizer_config.py), ddp = DistributedDataParallelConfig, scheduler,
// checkpoint, logger, tokenizer (training/config/training_config.py), rng (common_config.py
// RNGConfig), dist (common_config.py use_tp_pp_dp_mapping), dataset (Bridge GPTDatasetConfig:
// seq_length, data_path), mixed_precision (Bridge training/mixed_precision.py MixedPrecisionConfig).
inline const std::set<std::string> kBridgeFields = {
    "model.tensor_model_parallel_size", "model.pipeline_model_parallel_size", "model.virtual_pipeline_model_parallel_size",
    "model.num_layers_in_first_pipeline_stage", "model.num_layers_in_last_pipeline_stage",
    "model.pipeline_model_parallel_layout", "model.account_for_embedding_in_pipeline_split",
    "model.account_for_loss_in_pipeline_split", "model.microbatch_group_size_per_vp_stage", "model.context_parallel_size",
    "model.expert_model_parallel_size", "model.expert_tensor_parallel_size", "model.moe_shared_expert_overlap",
    "model.overlap_moe_expert_parallel_comm", "model.cuda_graph_impl", "model.cuda_graph_scope",
    "model.moe_expert_capacity_factor", "model.moe_pad_expert_input_to_capacity", "model.sequence_parallel",
    "model.overlap_p2p_comm", "model.num_layers", "model.hidden_size", "model.ffn_hidden_size", "model.num_attention_heads",
    "model.num_query_groups", "model.kv_channels", "model.q_lora_rank", "model.kv_lora_rank", "model.qk_head_dim",
    "model.qk_pos_emb_head_dim", "model.v_head_dim", "model.qk_layernorm", "model.mtp_num_layers", "model.seq_length",
    "model.max_position_embeddings", "model.make_vocab_size_divisible_by", "model.position_embedding_type",
    "model.rotary_base", "model.normalization", "model.layernorm_epsilon", "model.memory_efficient_layer_norm",
    "model.gated_linear_unit", "model.activation_func", "model.share_embeddings_and_output_weights", "model.add_bias_linear",
    "model.add_qkv_bias", "model.num_moe_experts", "model.moe_router_topk", "model.moe_token_dispatcher_type",
    "model.moe_flex_dispatcher_backend", "model.moe_router_num_groups", "model.moe_router_group_topk",
    "model.moe_ffn_hidden_size", "model.moe_shared_expert_intermediate_size", "model.moe_layer_freq", "model.hidden_dropout",
    "model.attention_dropout", "model.attention_backend", "model.masked_softmax_fusion", "model.cross_entropy_loss_fusion",
    "model.cross_entropy_fusion_impl", "model.recompute_granularity",
    "model.recompute_method", "model.recompute_num_layers", "model.recompute_modules", "model.distribute_saved_activations",
    "model.moe_grouped_gemm", "model.moe_router_load_balancing_type", "model.moe_aux_loss_coeff",
    "model.moe_router_score_function", "model.moe_router_enable_expert_bias",
    "train.micro_batch_size", "train.global_batch_size", "train.train_iters",
    "optimizer.optimizer", "optimizer.lr", "optimizer.min_lr", "optimizer.weight_decay", "optimizer.adam_beta1",
    "optimizer.adam_beta2", "optimizer.clip_grad", "optimizer.use_distributed_optimizer", "optimizer.sgd_momentum",
    "optimizer.use_precision_aware_optimizer", "optimizer.optimizer_cpu_offload", "optimizer.optimizer_offload_fraction",
    "optimizer.overlap_cpu_optimizer_d2h_h2d", "optimizer.main_params_dtype", "optimizer.exp_avg_dtype",
    "optimizer.exp_avg_sq_dtype",
    "ddp.overlap_grad_reduce", "ddp.overlap_param_gather", "ddp.use_distributed_optimizer", "ddp.check_for_nan_in_grad",
    // hsdp: megatron/core/distributed/distributed_data_parallel_config.py
    "ddp.num_distributed_optimizer_instances",
    "scheduler.lr_decay_style", "scheduler.lr_warmup_iters", "checkpoint.save", "checkpoint.load",
    "checkpoint.save_interval", "logger.tensorboard_dir", "tokenizer.tokenizer_type", "tokenizer.tokenizer_model",
    "tokenizer.vocab_size", "rng.seed", "dist.use_tp_pp_dp_mapping", "dataset.seq_length", "dataset.data_path",
    "mixed_precision.fp8", "mixed_precision.fp8_recipe", "mixed_precision.fp8_amax_history_len",
    "mixed_precision.fp8_amax_compute_algo", "mixed_precision.first_last_layers_bf16",
    "mixed_precision.num_layers_at_start_in_bf16", "mixed_precision.num_layers_at_end_in_bf16",
    "mixed_precision.fp8_param_gather", "mixed_precision.grad_reduce_in_fp32"};

// The `cfg.<section>.<field>` names a nemo module assigns (whole sections such as
// `cfg.mixed_precision = ...` or `cfg.comm_overlap = ...` count as their section name).
inline std::vector<std::string> bridge_assignments(const std::string& py) {
    std::vector<std::string> out;
    size_t at = 0;
    while ((at = py.find("\n    cfg.", at)) != std::string::npos) {
        at += 9;  // "\n    cfg."
        const size_t eq = py.find(" = ", at);
        if (eq == std::string::npos) break;
        out.push_back(py.substr(at, eq - at));
    }
    return out;
}

}  // namespace ptd_test
