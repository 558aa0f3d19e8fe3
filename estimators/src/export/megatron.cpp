// megatron.cpp — JobSpec → Megatron-LM pretrain_gpt.py arguments (arguments.py,
// transformer_config.py and pipeline_parallel_layer_layout.py of main, d98e8a6, 2026-08).
#include <algorithm>
#include <cmath>
#include <functional>

#include "export_internal.h"

namespace ptd::export_internal {

Result<ExportOutput> export_megatron(const JobSpec& job) {
    if (auto bad = unsupported_schedule(job, "Megatron-LM")) return *bad;  // zb
    const ModelSpec& m = job.model;
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    const EstimateSpec& e = job.estimate;
    ExportOutput out;
    std::vector<std::string> args;
    auto arg = [&](std::string flag, std::string value = {}) {
        args.push_back(value.empty() ? flag : flag + " " + value);
    };
    auto I = [](long long v) { return std::to_string(v); };

    if (p.zero >= 2)
        return job_error(job, "parallel.zero",
                         "got " + I(p.zero) + "; Megatron-LM has no ZeRO-2/3 (it shards only optimizer state, with "
                         "--use-distributed-optimizer); allowed for --format megatron: zero = 0 or 1, or set "
                         "distributed_optimizer = true (--set parallel.zero=0 --set parallel.distributed_optimizer=true)");

    // Parallelism.
    arg("--tensor-model-parallel-size", I(p.tp));
    arg("--pipeline-model-parallel-size", I(p.pp));
    if (p.pp > 1) {
        // Megatron-LM's three ways to split layers over pipeline stages, simplest first
        // (validate_args and TransformerConfig's checks in comments):
        //  - even chunks: nothing (layers % pp == 0), or --num-layers-per-virtual-pipeline-stage
        //    with vpp > 1 (layers/pp divisible by it);
        //  - vpp = 1, every stage but the first and last equal, each written one > 0:
        //    --decoder-first/last-pipeline-num-layers (the rest split evenly);
        //  - anything else: --pipeline-model-parallel-layout, one "|"-separated entry per model
        //    chunk in model order ("E" embedding first, "L" loss last, "t" per layer), which
        //    Megatron maps to pipeline rank k mod pp, virtual stage k / pp — our chunk order.
        const std::vector<int> chunks = chunk_layers(job), stages = stage_layers(job);
        const bool even_chunks = std::adjacent_find(chunks.begin(), chunks.end(), std::not_equal_to<>()) == chunks.end();
        const int n = (int)stages.size();
        const std::vector<int> middle(stages.begin() + 1, stages.end() - 1);
        const bool middle_even = std::adjacent_find(middle.begin(), middle.end(), std::not_equal_to<>()) == middle.end();
        const int mid = middle.empty() ? -1 : middle.front();
        const bool first_last_fits = p.vpp == 1 && middle_even && stages.front() > 0 && stages.back() > 0 && mid != 0;
        const bool accounted = p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split;
        if (accounted) {
            // l405: Megatron's own flags (arguments.py): layers + embedding + loss split evenly
            // into chunks of --num-layers-per-virtual-pipeline-stage.
            if (p.account_for_embedding_in_pipeline_split) arg("--account-for-embedding-in-pipeline-split");
            if (p.account_for_loss_in_pipeline_split) arg("--account-for-loss-in-pipeline-split");
            if (p.vpp > 1)
                arg("--num-layers-per-virtual-pipeline-stage",
                    I((m.layers + (p.account_for_embedding_in_pipeline_split ? 1 : 0) +
                       (p.account_for_loss_in_pipeline_split ? 1 : 0)) / ((long long)p.pp * p.vpp)));
        } else if (even_chunks && chunks.front() > 0) {
            if (p.vpp > 1) arg("--num-layers-per-virtual-pipeline-stage", I(chunks.front()));
        } else if (first_last_fits) {
            if (n == 2 || stages.front() != mid) arg("--decoder-first-pipeline-num-layers", I(stages.front()));
            if (n == 2 || stages.back() != mid) arg("--decoder-last-pipeline-num-layers", I(stages.back()));
        } else {
            std::string layout;
            for (size_t k = 0; k < chunks.size(); ++k) {
                if (k) layout += '|';
                if (k == 0) layout += 'E';
                if (chunks[k] == 1) layout += 't';
                else if (chunks[k] > 1) layout += "t*" + I(chunks[k]);
                // mlaio: pipeline_parallel_layer_layout.py validate_layer_layout counts "m" (MTP)
                // against --mtp-num-layers, after every decoder layer, in the last chunk.
                if (k + 1 == chunks.size() && m.mtp_layers > 0) layout += m.mtp_layers == 1 ? "m" : "m*" + I(m.mtp_layers);
                if (k + 1 == chunks.size()) layout += 'L';
            }
            arg("--pipeline-model-parallel-layout", "\"" + layout + "\"");
        }
    }
    // bits: the interleaved layouts PTD simulates but Megatron-LM refuses (fewer micro-batches
    // per step than the group size N, default pp; job_spec.h megatron_runs_interleaved).
    if (auto refused = megatron_interleaved_refusal(job)) return std::unexpected(Error(std::move(*refused)));
    if (p.pp > 1 && p.vpp > 1 && p.microbatch_group_size > 0) {
        // l405: schedules.py (forward_backward_pipelining_with_interleaving) raises for a group
        // size outside [pp, micro-batches] and for a last group smaller than pp.
        const long long mbs = t.global_batch / std::max(1LL, (long long)t.micro_batch * p.dp);
        const long long n = p.microbatch_group_size;
        if (n < p.pp || n > mbs)
            return job_error(job, "parallel.microbatch_group_size",
                             "got " + I(n) + "; Megatron-LM's interleaved schedule needs pp ≤ N ≤ micro-batches per step; "
                             "allowed for --format megatron: " + I(p.pp) + " to " + I(mbs));
        if (mbs % n != 0 && mbs % n < p.pp)
            return job_error(job, "parallel.microbatch_group_size",
                             "got " + I(n) + " with " + I(mbs) + " micro-batches per step: the last group holds " + I(mbs % n) +
                                 " < pp = " + I(p.pp) + " (Megatron-LM raises: dependency bubbles); allowed for --format "
                                 "megatron: N dividing " + I(mbs) + ", or leaving a last group of at least pp");
        if (n != p.pp) arg("--microbatch-group-size-per-virtual-pipeline-stage", I(n));
    }
    if (p.cp > 1) arg("--context-parallel-size", I(p.cp));
    if (m.experts > 1) arg("--expert-model-parallel-size", I(p.ep));
    // moe2: MoE parallel folding; Megatron's default is tp, so written only where it differs.
    if (m.experts > 1 && p.etp() != p.tp) arg("--expert-tensor-parallel-size", I(p.etp()));
    if (m.experts > 1 && p.moe_shared_expert_overlap) arg("--moe-shared-expert-overlap");
    if (m.experts > 1 && p.moe_a2a_overlap) arg("--overlap-moe-expert-parallel-comm");  // deepep
    // hostov: CUDA graphs (transformer_config.py cuda_graph_impl / cuda_graph_scope; Megatron-LM
    // since 2026 also spells the scope --cuda-graph-modules and full_iteration
    // --cuda-graph-impl full_iteration, and migrates these flags), static expert inputs: drop-and-pad
    // at capacity 1 (the estimate's balanced loads).
    if (p.cuda_graph_impl != CudaGraphImpl::none) {
        arg("--cuda-graph-impl", to_string(p.cuda_graph_impl));
        if (p.cuda_graph_scope != 0) {
            std::string words;
            for (const std::string& w : cuda_graph_scope_words(p.cuda_graph_scope)) words += (words.empty() ? "" : " ") + w;
            arg("--cuda-graph-scope", words);
        }
        if (p.cuda_graph_scope & kGraphFullIteration) arg("--no-check-for-nan-in-loss-and-grad");
    }
    if (m.experts > 1 && p.moe_pad_to_capacity) {
        arg("--moe-expert-capacity-factor", "1.0");
        arg("--moe-pad-expert-input-to-capacity");
    }
    if (p.sequence_parallel) arg("--sequence-parallel");
    // p2psg: the scatter/gather pipeline send was Megatron-LM's default from Feb 2021 until
    // Megatron-Core dropped it (Mar 2023); today's Megatron-LM has neither the code nor, since
    // Apr 2026, the --no-scatter-gather-tensors-in-pipeline flag, so there is nothing to pass.
    if (p.scatter_gather_tensors_in_pipeline && p.pp > 1 && p.tp > 1 && !p.sequence_parallel)
        out.notes.push_back("parallel.scatter_gather_tensors_in_pipeline = true: Megatron-LM sent 1/tp of each "
                            "pipeline activation per rank only from Feb 2021 to Mar 2023 (on by default there); "
                            "current Megatron-LM sends the whole tensor without --sequence-parallel, so expect the "
                            "estimate's pipeline send / recv to be low; --sequence-parallel shards it instead");
    // recomp: --no-async-tensor-model-parallel-allreduce turned the overlap off from Sep 2021
    // until Apr 2024; Megatron-LM has ignored it since and removed it in Jan 2026.
    if (!p.async_tensor_model_parallel_allreduce && p.tp > 1)
        out.notes.push_back("parallel.async_tensor_model_parallel_allreduce = false: Megatron-LM before Sep 2021 (or "
                            "--no-async-tensor-model-parallel-allreduce until Apr 2024) left the backward TP "
                            "all-reduce exposed; current Megatron-LM always runs it beside the weight-gradient GEMM, "
                            "so expect the estimate's TP time to be high");
    if (p.distributed_optimizer || p.zero == 1) arg("--use-distributed-optimizer");
    if (p.offload_optimizer == OffloadDevice::cpu) {
        // offload: Megatron-Core's HybridDeviceOptimizer (arguments.py: it needs the
        // precision-aware optimizer); the whole shard on the host, its copies overlapped.
        arg("--optimizer-cpu-offload");
        arg("--optimizer-offload-fraction", "1.0");
        arg("--use-precision-aware-optimizer");
        arg("--overlap-cpu-optimizer-d2h-h2d");
    }
    if (p.zero == 1)
        out.notes.push_back("parallel.zero = 1 is written as --use-distributed-optimizer, Megatron-LM's sharding of "
                            "optimizer state over data-parallel ranks (the ZeRO-1 equivalent)");
    if (p.overlap_grad_reduce) arg("--overlap-grad-reduce");
    if (!p.grad_reduce_in_fp32 && job.training.precision == Precision::bf16) arg("--grad-reduce-in-bf16");  // oomnemo
    if (p.activation_offload_layers > 0) out.notes.push_back(
        "parallel.activation_offload_layers = " + std::to_string(p.activation_offload_layers) +
        " is Megatron-core's TransformerConfig cpu_offloading / cpu_offloading_num_layers (NeMo, Megatron-Bridge); "
        "Megatron-LM's pretrain_gpt.py has no command-line flag for it");
    if (p.overlap_param_gather && (p.distributed_optimizer || p.zero == 1)) arg("--overlap-param-gather");
    // Transformer Engine userbuffers (needs --sequence-parallel, which validate_job requires).
    if (p.tp_comm_overlap && p.tp > 1) arg("--tp-comm-overlap");
    // blackwell: Megatron-LM overlaps the interleaved schedule's p2p by default (arguments.py
    // --no-overlap-p2p-communication); a job that keeps every hop exposed says so.
    if (!p.overlap_p2p_comm && p.pp > 1 && p.vpp > 1) arg("--no-overlap-p2p-communication");
    // tt405: PyTorch's micro-pipelined TP has no Megatron-LM flag; TE's userbuffers is the nearest.
    if (p.async_tp && p.tp > 1)
        out.notes.push_back("parallel.async_tp: PyTorch's micro-pipelined TP (torchtitan's enable_async_tensor_parallel) "
                            "has no Megatron-LM flag; the nearest is Transformer Engine's userbuffers "
                            "(--tp-comm-overlap, parallel.tp_comm_overlap)");
    const std::string order = effective_order(job, p.order);
    if (order == effective_order(job, "tp-cp-ep-pp-dp") && order != effective_order(job, "tp-cp-ep-dp-pp"))
        arg("--use-tp-pp-dp-mapping");
    else if (order != effective_order(job, "tp-cp-ep-dp-pp"))
        out.notes.push_back("parallel.order = \"" + p.order + "\": Megatron-LM places ranks tp-cp-ep-dp-pp (or tp-cp-ep-pp-dp "
                            "with --use-tp-pp-dp-mapping); this order has no flag, so ranks will be placed differently");
    if (std::string note = nvlink_domain_note(job, "Megatron-LM / NeMo"); !note.empty()) out.notes.push_back(note);  // gb200

    // Model.
    arg("--num-layers", I(m.layers));
    arg("--hidden-size", I(m.hidden));
    arg("--ffn-hidden-size", I(m.ffn_hidden));
    arg("--num-attention-heads", I(m.heads));
    if (m.kv_heads != m.heads) {
        arg("--group-query-attention");
        arg("--num-query-groups", I(m.kv_heads));
    }
    {  // mlaio: head width and multi-head latent attention (arguments.py main d98e8a6: --kv-channels
       // and --multi-latent-attention from TransformerConfig via ArgumentGroupFactory, _add_mla_args'
       // --q-lora-rank (default None: queries projected directly) --kv-lora-rank --qk-head-dim
       // --qk-pos-emb-head-dim --v-head-dim; validate_args asserts hidden % heads == 0 unless
       // --kv-channels is given). --qk-layernorm builds MLA's RMSNorms on the query and key/value
       // latents (gpt_layer_specs: IdentityOp without it), which DeepSeek-V2/V3 have.
        if (m.head_dim_given > 0) arg("--kv-channels", I(m.head_dim_given));
        if (m.mla()) {
            arg("--multi-latent-attention");
            if (m.q_lora_rank > 0) arg("--q-lora-rank", I(m.q_lora_rank));
            arg("--kv-lora-rank", I(m.kv_lora_rank));
            arg("--qk-head-dim", I(m.head_dim()));
            arg("--qk-pos-emb-head-dim", I(m.qk_rope_head_dim));
            arg("--v-head-dim", I(m.v_head_dim));
        }
        // --qk-layernorm: MLA's latent norms (above), or the per-head query / key norms of
        // model.qk_layernorm (Qwen3; Megatron-Bridge's Qwen3 providers set qk_layernorm).
        if (m.mla() || m.qk_layernorm) arg("--qk-layernorm");
        if (m.mtp_layers > 0) arg("--mtp-num-layers", I(m.mtp_layers));
    }
    arg("--seq-length", I(m.seq_len));
    arg("--max-position-embeddings", I(m.seq_len));
    arg("--make-vocab-size-divisible-by", I(e.vocab_pad));
    if (m.position == Position::rope) {
        arg("--position-embedding-type", "rope");
        // --rotary-base is an integer argument.
        if (m.rope_theta == std::floor(m.rope_theta)) arg("--rotary-base", I((long long)m.rope_theta));
        else out.notes.push_back("model.rope_theta = " + num(m.rope_theta) + " is not an integer; Megatron-LM's "
                                 "--rotary-base takes an integer, so it is not written (default 10000)");
    } else {
        arg("--position-embedding-type", "learned_absolute");
    }
    arg("--normalization", m.norm == Norm::rmsnorm ? "RMSNorm" : "LayerNorm");
    arg("--norm-epsilon", num(m.norm_eps));
    // menorm: Megatron-core passes memory_efficient to Apex's FusedLayerNorm only (its local,
    // non-Transformer-Engine layer spec); an RMSNorm or a TE norm keeps its input.
    if (job.estimate.memory_efficient_norm) {
        if (m.norm == Norm::layernorm) {
            arg("--memory-efficient-layer-norm");
            out.notes.push_back("estimate.memory_efficient_norm: --memory-efficient-layer-norm takes effect with "
                                "--transformer-impl local (Apex FusedLayerNorm); with Transformer Engine layers the "
                                "norms keep their inputs and use more activation memory than estimated");
        } else {
            out.notes.push_back("estimate.memory_efficient_norm with RMSNorm: Megatron-LM's --memory-efficient-layer-norm "
                                "covers LayerNorm only, so the run's norms keep their inputs and use more activation "
                                "memory than estimated (Apex's FusedRMSNorm has memory_efficient=True in model code)");
        }
    }
    if (m.activation == Activation::swiglu) arg("--swiglu");
    if (!m.tied_embeddings) arg("--untie-embeddings-and-output-weights");
    if (!m.bias) {
        arg("--disable-bias-linear");
        if (m.qkv_bias) arg("--add-qkv-bias");
    }
    if (m.experts > 1) {
        arg("--num-experts", I(m.experts));
        arg("--moe-router-topk", I(m.top_k));
        // moe: the estimate models Megatron-core's all-to-all token dispatcher (collectives.cpp
        // ep_all_to_all_bytes, tp_mlp_comm); Megatron's default is "allgather".
        // deepep: parallel.moe_dispatcher deepep / hybridep is the flex dispatcher with that backend
        // (Megatron-core transformer_config.py moe_flex_dispatcher_backend; --moe-enable-deepep is
        // its deprecated spelling of deepep).
        if (p.moe_dispatcher == MoeDispatcher::alltoall) {
            arg("--moe-token-dispatcher-type", "alltoall");
        } else {
            arg("--moe-token-dispatcher-type", "flex");
            arg("--moe-flex-dispatcher-backend", p.moe_dispatcher == MoeDispatcher::deepep ? "deepep" : "hybridep");
        }
        if (m.moe_router_num_groups > 0) {  // deepep: group-limited routing
            arg("--moe-router-num-groups", I(m.moe_router_num_groups));
            arg("--moe-router-group-topk", I(m.moe_router_group_topk));
        }
        // mlaio: the experts' own width, the shared experts (one MLP of their total width, as
        // TransformerConfig.moe_shared_expert_intermediate_size documents) and the dense first
        // layers as --moe-layer-freq's list pattern (arguments.py moe_freq_type: digits, [ ] ( ) + *
        // only; gpt_layer_specs asserts its length is num_layers).
        if (m.moe_ffn_hidden > 0) arg("--moe-ffn-hidden-size", I(m.moe_ffn_hidden));
        if (m.shared_expert_ffn_hidden > 0) arg("--moe-shared-expert-intermediate-size", I(m.shared_expert_ffn_hidden));
        if (m.first_dense_layers > 0)
            arg("--moe-layer-freq", "\"([0]*" + I(m.first_dense_layers) + "+[1]*" + I(m.layers - m.first_dense_layers) + ")\"");
        if (p.tp > 1 && !p.sequence_parallel)
            out.notes.push_back("model.experts with parallel.tp > 1 and no sequence parallelism: Megatron-core's MoELayer "
                                "raises in training unless --sequence-parallel is set; set parallel.sequence_parallel = true");
    }
    // oom4: the estimate counts no dropout masks for a model without dropout (model.dropout, by
    // arch: llama has none); Megatron-LM's defaults are 0.1 each.
    if (!m.dropout_on()) {
        arg("--hidden-dropout", "0.0");
        arg("--attention-dropout", "0.0");
    }
    if (t.flash_attention) arg("--use-flash-attn");
    else arg("--attention-backend", "unfused");
    if (!t.masked_softmax_fusion) arg("--no-masked-softmax-fusion");  // papers

    // Batch, precision, recomputation.
    arg("--micro-batch-size", I(t.micro_batch));
    arg("--global-batch-size", I(t.global_batch));
    if (t.precision == Precision::bf16) arg("--bf16");
    else if (t.precision == Precision::fp16) arg("--fp16");
    if (t.fp8 != Fp8Recipe::none) {
        // fp8 (issue 15 point 3): Megatron-LM's Transformer-Engine arguments (arguments.py:
        // --fp8-format e4m3|hybrid, --fp8-recipe tensorwise|delayed|mxfp8|blockwise; its
        // "tensorwise" builds TE's Float8CurrentScaling).
        if (t.fp8 == Fp8Recipe::rowwise)
            return job_error(job, "training.fp8",
                             "got \"rowwise\"; Megatron-LM's --fp8-recipe has no row-wise scaling (torchao's recipe); "
                             "allowed for --format megatron: \"delayed\", \"current\", \"tensorwise\", \"mxfp8\"");
        arg("--fp8-format", to_string(t.fp8_format));
        arg("--fp8-recipe", t.fp8 == Fp8Recipe::delayed ? "delayed" : t.fp8 == Fp8Recipe::mxfp8 ? "mxfp8" : "tensorwise");
        if (t.fp8 == Fp8Recipe::delayed) {
            // Megatron's defaults (history 1, most_recent) differ from TE's DelayedScaling
            // defaults (1024, max), which the estimate and the job key follow.
            arg("--fp8-amax-history-len", I(t.fp8_amax_history_len));
            arg("--fp8-amax-compute-algo", "max");
        }
        if (t.fp8 == Fp8Recipe::tensorwise)
            out.notes.push_back("training.fp8 = \"tensorwise\": Megatron-LM's --fp8-recipe tensorwise runs Transformer "
                                "Engine's Float8CurrentScaling (ptd's \"current\"), which caches FP8 weights per step "
                                "and keeps FP8 activations, unlike torchao's tensorwise that the estimate modelled");
        if (t.fp8_bf16_first_layers > 0 || t.fp8_bf16_last_layers > 0) {
            arg("--first-last-layers-bf16");
            arg("--num-layers-at-start-in-bf16", I(t.fp8_bf16_first_layers));
            arg("--num-layers-at-end-in-bf16", I(t.fp8_bf16_last_layers));
        }
        if (t.fp8_param_gather) arg("--fp8-param-gather");  // oomnemo
    }
    if (p.recompute == Recompute::selective) {
        arg("--recompute-granularity", "selective");
        if (p.recompute_modules != kRecomputeCoreAttn) {  // recmod: Megatron-core's module list
            std::string words;
            for (const std::string& w : recompute_module_words(p.recompute_modules)) words += (words.empty() ? "" : " ") + w;
            arg("--recompute-modules", words);
        }
        if (p.recompute_style == RecomputeStyle::torchtitan_op)
            out.notes.push_back("parallel.recompute_style = \"torchtitan-op\": Megatron-LM has no op-level selective "
                                "checkpointing; --recompute-granularity selective recomputes the attention core, which "
                                "keeps a different set of activations (ptd estimate --set parallel.recompute_style=megatron)");
    } else if (p.recompute == Recompute::full) {
        arg("--recompute-granularity", "full");
        arg("--recompute-method", "uniform");
        arg("--recompute-num-layers", "1");
        if (p.distribute_saved_activations) arg("--distribute-saved-activations");  // papers
    }

    // Optimizer and schedule.
    arg("--optimizer", t.optimizer == Optimizer::sgd ? "sgd" : "adam");
    if (t.optimizer == Optimizer::adam)
        out.notes.push_back("training.optimizer = \"adam\": Megatron-LM's --optimizer adam applies decoupled weight "
                            "decay (AdamW); there is no L2-coupled Adam");
    if (t.optimizer != Optimizer::sgd) {
        // PTD assumes the usual LLM pre-training betas (GPT-3, Llama): Megatron's default β2 is 0.999.
        arg("--adam-beta1", "0.9");
        arg("--adam-beta2", "0.95");
    } else {
        // The estimate counts one fp32 momentum buffer for sgd (kSgdMomentum); written
        // explicitly although it is Megatron's default.
        arg("--sgd-momentum", num(kSgdMomentum));
    }
    {  // oom4: optimizer state dtypes — Megatron-LM's precision-aware optimizer (TE FusedAdam),
        // which only runs with the distributed optimizer (megatron/core/optimizer/__init__.py).
        const bool states = t.main_params_dtype != StateDtype::fp32 || t.exp_avg_dtype != StateDtype::fp32 ||
                            t.exp_avg_sq_dtype != StateDtype::fp32;
        if (states) {
            if (t.main_params_dtype != StateDtype::fp32 && t.main_params_dtype != StateDtype::fp16 &&
                t.main_params_dtype != StateDtype::fp32_remainders)
                return job_error(job, "training.main_params_dtype",
                                 std::string("got \"") + to_string(t.main_params_dtype) +
                                     "\"; Megatron-LM's --main-params-dtype takes fp32 or fp16 (a bf16 master shard, or "
                                     "none, is Apex DistributedFusedAdam's in NeMo 1.x); allowed for --format megatron: "
                                     "\"fp32\", \"fp32-remainders\", \"fp16\"");
            if (!p.distributed_optimizer && p.zero != 1)
                return job_error(job, "training.exp_avg_dtype",
                                 "optimizer states below fp32 without a sharded optimizer; Megatron-LM's "
                                 "--use-precision-aware-optimizer needs --use-distributed-optimizer; allowed for --format "
                                 "megatron: parallel.distributed_optimizer = true (or zero = 1), or fp32 states");
            if (p.offload_optimizer != OffloadDevice::cpu) arg("--use-precision-aware-optimizer");
            // fp32-remainders: --main-params-dtype fp32 with OptimizerConfig.store_param_remainders,
            // True by default (Transformer Engine ≥ 2.1).
            if (t.main_params_dtype == StateDtype::fp16) arg("--main-params-dtype", "fp16");
            if (t.exp_avg_dtype != StateDtype::fp32) arg("--exp-avg-dtype", to_string(t.exp_avg_dtype));
            if (t.exp_avg_sq_dtype != StateDtype::fp32) arg("--exp-avg-sq-dtype", to_string(t.exp_avg_sq_dtype));
        }
    }
    arg("--lr", num(t.lr));
    arg("--min-lr", num(t.min_lr));
    arg("--lr-decay-style", "cosine");
    arg("--lr-warmup-iters", I(t.warmup));
    arg("--train-iters", I(t.steps));
    arg("--weight-decay", num(t.weight_decay));
    arg("--clip-grad", num(t.grad_clip));
    arg("--seed", I(t.seed));

    // Data.
    if (t.data == "synthetic") {
        arg("--mock-data");
        arg("--tokenizer-type", "NullTokenizer");
        arg("--vocab-size", I(m.vocab));
    } else {
        arg("--data-path", t.data);
        out.notes.push_back("training.data = \"" + t.data + "\": Megatron-LM reads indexed datasets (.bin/.idx from "
                            "tools/preprocess_data.py) by prefix; add --tokenizer-type/--tokenizer-model for a "
                            "tokenizer with " + I(m.vocab) + " tokens");
    }

    for (size_t i = 0; i < args.size(); ++i) out.text += args[i] + (i + 1 < args.size() ? " \\\n" : "\n");
    return out;
}

}  // namespace ptd::export_internal
