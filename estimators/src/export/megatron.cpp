// megatron.cpp — JobSpec → Megatron-LM pretrain_gpt.py arguments (arguments.py,
// transformer_config.py and pipeline_parallel_layer_layout.py of main, d98e8a6, 2026-08).
#include <algorithm>
#include <cmath>
#include <functional>

#include "export/export_internal.h"
#include "ptd/spec/pipeline_layout.h"
#include "ptd/spec/stack_defaults.h"

namespace ptd::export_internal {

namespace {

// The arguments written so far, in Megatron-LM's order, and the notes for the user.
struct MegatronArgs {
    std::vector<std::string> args;
    ExportOutput out;
    void arg(std::string flag, std::string value = {}) { args.push_back(value.empty() ? flag : flag + " " + value); }
    void note(std::string text) { out.notes.push_back(std::move(text)); }
};

std::string str(long long v) { return std::to_string(v); }

// ZeRO-2/3 would be another training run: Megatron-LM shards only optimizer state.
std::optional<std::unexpected<Error>> refuse_zero_2_3(const JobSpec& job) {
    const ParallelSpec& p = job.parallel;
    if (p.zero >= 2)
        return job_error(job, "parallel.zero",
                         "got " + str(p.zero) + "; Megatron-LM has no ZeRO-2/3 (it shards only optimizer state, with "
                         "--use-distributed-optimizer); allowed for --format megatron: zero = 0 or 1, or set "
                         "distributed_optimizer = true (--set parallel.zero=0 --set parallel.distributed_optimizer=true)");
    return std::nullopt;
}

// How the layers split over pipeline stages and model chunks (pp > 1).
void write_pipeline_split(const JobSpec& job, MegatronArgs& a) {
    const ModelSpec& m = job.model;
    const ParallelSpec& p = job.parallel;
    // Megatron-LM's three ways to split layers over pipeline stages, simplest first
    // (validate_args and TransformerConfig's checks in comments):
    //  - even chunks: nothing (layers % pp == 0), or --num-layers-per-virtual-pipeline-stage
    //    with vpp > 1 (layers/pp divisible by it);
    //  - vpp = 1, every stage but the first and last equal, each written one > 0:
    //    --decoder-first/last-pipeline-num-layers (the rest split evenly);
    //  - anything else: --pipeline-model-parallel-layout, one "|"-separated entry per model
    //    chunk in model order ("E" embedding first, "L" loss last, "t" per layer; written
    //    compactly by format_pipeline_layout), which Megatron maps to pipeline rank k mod pp,
    //    virtual stage k / pp — our chunk order. A layout string the job wrote goes as written.
    const std::vector<int> chunks = chunk_layers(job), stages = stage_layers(job);
    const bool even_chunks = std::adjacent_find(chunks.begin(), chunks.end(), std::not_equal_to<>()) == chunks.end();
    const int n = (int)stages.size();
    const std::vector<int> middle(stages.begin() + 1, stages.end() - 1);
    const bool middle_even = std::adjacent_find(middle.begin(), middle.end(), std::not_equal_to<>()) == middle.end();
    const int mid = middle.empty() ? -1 : middle.front();
    const bool first_last_fits = p.vpp == 1 && middle_even && stages.front() > 0 && stages.back() > 0 && mid != 0;
    const bool accounted = p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split;
    if (!p.pipeline_layout.empty()) {
        // The job's own layout string (validate_job checked it against pp, vpp and the model):
        // written as the job has it.
        a.arg("--pipeline-model-parallel-layout", "\"" + p.pipeline_layout + "\"");
    } else if (accounted) {
        // l405: Megatron's own flags (arguments.py): layers + embedding + loss split evenly
        // into chunks of --num-layers-per-virtual-pipeline-stage.
        if (p.account_for_embedding_in_pipeline_split) a.arg("--account-for-embedding-in-pipeline-split");
        if (p.account_for_loss_in_pipeline_split) a.arg("--account-for-loss-in-pipeline-split");
        if (p.vpp > 1)
            a.arg("--num-layers-per-virtual-pipeline-stage",
                str((m.layers + (p.account_for_embedding_in_pipeline_split ? 1 : 0) +
                   (p.account_for_loss_in_pipeline_split ? 1 : 0)) / ((long long)p.pp * p.vpp)));
    } else if (even_chunks && chunks.front() > 0) {
        if (p.vpp > 1) a.arg("--num-layers-per-virtual-pipeline-stage", str(chunks.front()));
    } else if (first_last_fits) {
        if (n == 2 || stages.front() != mid) a.arg("--decoder-first-pipeline-num-layers", str(stages.front()));
        if (n == 2 || stages.back() != mid) a.arg("--decoder-last-pipeline-num-layers", str(stages.back()));
    } else {
        // mlaio: pipeline_parallel_layer_layout.py validate_layer_layout counts "m" (MTP) against
        // --mtp-num-layers, after every decoder layer, in the last chunk.
        a.arg("--pipeline-model-parallel-layout",
              "\"" + format_pipeline_layout(layout_of_split(chunks, m.mtp_layers)) + "\"");
    }
}

// The interleaved schedule's micro-batch groups: the layouts Megatron-LM refuses, and N
// where it differs from pp.
std::optional<std::unexpected<Error>> check_interleaved_groups(const JobSpec& job, MegatronArgs& a) {
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
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
                             "got " + str(n) + "; Megatron-LM's interleaved schedule needs pp ≤ N ≤ micro-batches per step; "
                             "allowed for --format megatron: " + str(p.pp) + " to " + str(mbs));
        if (mbs % n != 0 && mbs % n < p.pp)
            return job_error(job, "parallel.microbatch_group_size",
                             "got " + str(n) + " with " + str(mbs) + " micro-batches per step: the last group holds " + str(mbs % n) +
                                 " < pp = " + str(p.pp) + " (Megatron-LM raises: dependency bubbles); allowed for --format "
                                 "megatron: N dividing " + str(mbs) + ", or leaving a last group of at least pp");
        if (n != p.pp) a.arg("--microbatch-group-size-per-virtual-pipeline-stage", str(n));
    }
    return std::nullopt;
}

// Context, expert and sequence parallelism, MoE overlap, CUDA graphs, and the notes on
// pipeline / TP communication modes Megatron-LM no longer has.
void write_parallel_modes(const JobSpec& job, MegatronArgs& a) {
    const ModelSpec& m = job.model;
    const ParallelSpec& p = job.parallel;
    if (p.cp > 1) a.arg("--context-parallel-size", str(p.cp));
    if (m.experts > 1) a.arg("--expert-model-parallel-size", str(p.ep));
    // moe2: MoE parallel folding; Megatron's default is tp, so written only where it differs.
    if (m.experts > 1 && p.etp() != p.tp) a.arg("--expert-tensor-parallel-size", str(p.etp()));
    if (m.experts > 1 && p.moe_shared_expert_overlap) a.arg("--moe-shared-expert-overlap");
    if (m.experts > 1 && p.moe_a2a_overlap) a.arg("--overlap-moe-expert-parallel-comm");  // deepep
    if (m.experts > 1 && p.moe_permute_fusion) a.arg("--moe-permute-fusion");  // moeperm
    if (m.experts > 1 && p.moe_router_fusion) a.arg("--moe-router-fusion");  // moerouter
    // hostov: CUDA graphs (transformer_config.py cuda_graph_impl / cuda_graph_scope; Megatron-LM
    // since 2026 also spells the scope --cuda-graph-modules and full_iteration
    // --cuda-graph-impl full_iteration, and migrates these flags), static expert inputs: drop-and-pad
    // at capacity 1 (the estimate's balanced loads).
    if (p.cuda_graph_impl != CudaGraphImpl::none) {
        a.arg("--cuda-graph-impl", to_string(p.cuda_graph_impl));
        if (p.cuda_graph_scope != 0) {
            std::string words;
            for (const std::string& w : cuda_graph_scope_words(p.cuda_graph_scope)) words += (words.empty() ? "" : " ") + w;
            a.arg("--cuda-graph-scope", words);
        }
        if (p.cuda_graph_scope & kGraphFullIteration) a.arg("--no-check-for-nan-in-loss-and-grad");
    }
    if (m.experts > 1 && p.moe_router_padding_for_fp8) a.arg("--moe-router-padding-for-fp8");  // moefp8pad
    if (m.experts > 1 && p.moe_pad_to_capacity) {
        a.arg("--moe-expert-capacity-factor", "1.0");
        a.arg("--moe-pad-expert-input-to-capacity");
    }
    if (p.sequence_parallel) a.arg("--sequence-parallel");
    // p2psg: the scatter/gather pipeline send was Megatron-LM's default from Feb 2021 until
    // Megatron-Core dropped it (Mar 2023); today's Megatron-LM has neither the code nor, since
    // Apr 2026, the --no-scatter-gather-tensors-in-pipeline flag, so there is nothing to pass.
    if (p.scatter_gather_tensors_in_pipeline && p.pp > 1 && p.tp > 1 && !p.sequence_parallel)
        a.note("parallel.scatter_gather_tensors_in_pipeline = true: Megatron-LM sent 1/tp of each "
                            "pipeline activation per rank only from Feb 2021 to Mar 2023 (on by default there); "
                            "current Megatron-LM sends the whole tensor without --sequence-parallel, so expect the "
                            "estimate's pipeline send / recv to be low; --sequence-parallel shards it instead");
    // recomp: --no-async-tensor-model-parallel-allreduce turned the overlap off from Sep 2021
    // until Apr 2024; Megatron-LM has ignored it since and removed it in Jan 2026.
    if (!p.async_tensor_model_parallel_allreduce && p.tp > 1)
        a.note("parallel.async_tensor_model_parallel_allreduce = false: Megatron-LM before Sep 2021 (or "
                            "--no-async-tensor-model-parallel-allreduce until Apr 2024) left the backward TP "
                            "all-reduce exposed; current Megatron-LM always runs it beside the weight-gradient GEMM, "
                            "so expect the estimate's TP time to be high");
}

// The distributed optimizer, optimizer offload and the communication overlaps.
void write_sharding_and_overlap(const JobSpec& job, MegatronArgs& a) {
    const ParallelSpec& p = job.parallel;
    if (p.distributed_optimizer || p.zero == 1) a.arg("--use-distributed-optimizer");
    // hsdp: the distributed optimizer's copies across the data-parallel domain.
    if (p.dp_replicate > 1) a.arg("--num-distributed-optimizer-instances", std::to_string(p.dp_replicate));
    if (p.offload_optimizer == OffloadDevice::cpu) {
        // offload: Megatron-Core's HybridDeviceOptimizer (arguments.py: it needs the
        // precision-aware optimizer); the whole shard on the host, its copies overlapped.
        a.arg("--optimizer-cpu-offload");
        a.arg("--optimizer-offload-fraction", "1.0");
        a.arg("--use-precision-aware-optimizer");
        a.arg("--overlap-cpu-optimizer-d2h-h2d");
    }
    if (p.zero == 1)
        a.note("parallel.zero = 1 is written as --use-distributed-optimizer, Megatron-LM's sharding of "
                            "optimizer state over data-parallel ranks (the ZeRO-1 equivalent)");
    if (p.overlap_grad_reduce) a.arg("--overlap-grad-reduce");
    if (!p.grad_reduce_in_fp32 && job.training.precision == Precision::bf16) a.arg("--grad-reduce-in-bf16");  // oomnemo
    if (p.activation_offload_layers > 0) a.note(
        "parallel.activation_offload_layers = " + std::to_string(p.activation_offload_layers) +
        " is Megatron-core's TransformerConfig cpu_offloading / cpu_offloading_num_layers (NeMo, Megatron-Bridge); "
        "Megatron-LM's pretrain_gpt.py has no command-line flag for it");
    if (p.overlap_param_gather && (p.distributed_optimizer || p.zero == 1)) a.arg("--overlap-param-gather");
    // Transformer Engine userbuffers (needs --sequence-parallel, which validate_job requires).
    if (p.tp_comm_overlap && p.tp > 1) a.arg("--tp-comm-overlap");
    // blackwell: Megatron-LM overlaps the interleaved schedule's p2p by default (arguments.py
    // --no-overlap-p2p-communication); a job that keeps every hop exposed says so.
    if (!p.overlap_p2p_comm && p.pp > 1 && p.vpp > 1) a.arg("--no-overlap-p2p-communication");
    // tt405: PyTorch's micro-pipelined TP has no Megatron-LM flag; TE's userbuffers is the nearest.
    if (p.async_tp && p.tp > 1)
        a.note("parallel.async_tp: PyTorch's micro-pipelined TP (torchtitan's enable_async_tensor_parallel) "
                            "has no Megatron-LM flag; the nearest is Transformer Engine's userbuffers "
                            "(--tp-comm-overlap, parallel.tp_comm_overlap)");
}

// The rank order (Megatron-LM knows two) and the NVLink domain note.
void write_rank_order(const JobSpec& job, MegatronArgs& a) {
    const ParallelSpec& p = job.parallel;
    const std::string order = effective_order(job, p.order);
    if (order == effective_order(job, "tp-cp-ep-pp-dp") && order != effective_order(job, "tp-cp-ep-dp-pp"))
        a.arg("--use-tp-pp-dp-mapping");
    else if (order != effective_order(job, "tp-cp-ep-dp-pp"))
        a.note("parallel.order = \"" + p.order + "\": Megatron-LM places ranks tp-cp-ep-dp-pp (or tp-cp-ep-pp-dp "
                            "with --use-tp-pp-dp-mapping); this order has no flag, so ranks will be placed differently");
    if (std::string note = nvlink_domain_note(job, "Megatron-LM / NeMo"); !note.empty()) a.note(note);  // gb200
}

// The model's shape: layers, widths, attention kind, positions, norms, MLP and bias.
void write_model_shape(const JobSpec& job, MegatronArgs& a) {
    const ModelSpec& m = job.model;
    const EstimateSpec& e = job.estimate;
    a.arg("--num-layers", str(m.layers));
    a.arg("--hidden-size", str(m.hidden));
    a.arg("--ffn-hidden-size", str(m.ffn_hidden));
    a.arg("--num-attention-heads", str(m.heads));
    if (m.kv_heads != m.heads) {
        a.arg("--group-query-attention");
        a.arg("--num-query-groups", str(m.kv_heads));
    }
    {  // mlaio: head width and multi-head latent attention (arguments.py main d98e8a6: --kv-channels
       // and --multi-latent-attention from TransformerConfig via ArgumentGroupFactory, _add_mla_args'
       // --q-lora-rank (default None: queries projected directly) --kv-lora-rank --qk-head-dim
       // --qk-pos-emb-head-dim --v-head-dim; validate_args asserts hidden % heads == 0 unless
       // --kv-channels is given). --qk-layernorm builds MLA's RMSNorms on the query and key/value
       // latents (gpt_layer_specs: IdentityOp without it), which DeepSeek-V2/V3 have.
        if (m.head_dim_given > 0) a.arg("--kv-channels", str(m.head_dim_given));
        if (m.mla()) {
            a.arg("--multi-latent-attention");
            if (m.q_lora_rank > 0) a.arg("--q-lora-rank", str(m.q_lora_rank));
            a.arg("--kv-lora-rank", str(m.kv_lora_rank));
            a.arg("--qk-head-dim", str(m.head_dim()));
            a.arg("--qk-pos-emb-head-dim", str(m.qk_rope_head_dim));
            a.arg("--v-head-dim", str(m.v_head_dim));
        }
        // --qk-layernorm: MLA's latent norms (above), or the per-head query / key norms of
        // model.qk_layernorm (Qwen3; Megatron-Bridge's Qwen3 providers set qk_layernorm).
        if (m.mla() || m.qk_layernorm) a.arg("--qk-layernorm");
        if (m.mtp_layers > 0) a.arg("--mtp-num-layers", str(m.mtp_layers));
    }
    a.arg("--seq-length", str(m.seq_len));
    a.arg("--max-position-embeddings", str(m.seq_len));
    a.arg("--make-vocab-size-divisible-by", str(e.vocab_pad));
    if (m.position == Position::rope) {
        a.arg("--position-embedding-type", "rope");
        // --rotary-base is an integer argument.
        if (m.rope_theta == std::floor(m.rope_theta)) a.arg("--rotary-base", str((long long)m.rope_theta));
        else a.note("model.rope_theta = " + num(m.rope_theta) + " is not an integer; Megatron-LM's "
                                 "--rotary-base takes an integer, so it is not written (default 10000)");
    } else {
        a.arg("--position-embedding-type", "learned_absolute");
    }
    a.arg("--normalization", m.norm == Norm::rmsnorm ? "RMSNorm" : "LayerNorm");
    a.arg("--norm-epsilon", num(m.norm_eps));
    // menorm: Megatron-core passes memory_efficient to Apex's FusedLayerNorm only (its local,
    // non-Transformer-Engine layer spec); an RMSNorm or a TE norm keeps its input.
    if (job.estimate.memory_efficient_norm) {
        if (m.norm == Norm::layernorm) {
            a.arg("--memory-efficient-layer-norm");
            a.note("estimate.memory_efficient_norm: --memory-efficient-layer-norm takes effect with "
                                "--transformer-impl local (Apex FusedLayerNorm); with Transformer Engine layers the "
                                "norms keep their inputs and use more activation memory than estimated");
        } else {
            a.note("estimate.memory_efficient_norm with RMSNorm: Megatron-LM's --memory-efficient-layer-norm "
                                "covers LayerNorm only, so the run's norms keep their inputs and use more activation "
                                "memory than estimated (Apex's FusedRMSNorm has memory_efficient=True in model code)");
        }
    }
    // Llama 3 §3.3.2: Megatron-core frees each chunk's output after its send
    // (deallocate_pipeline_outputs, always on in Megatron-LM) but keeps its input until its backward.
    if (job.estimate.deallocate_pipeline_inputs && job.parallel.pp > 1)
        a.note("estimate.deallocate_pipeline_inputs: Megatron-LM has no option for it (it frees each pipeline "
               "chunk's output after the send, not its input, which the first layer's norm saves), so the run holds "
               "one more activation per in-flight chunk than estimated");
    if (m.activation == Activation::swiglu) a.arg("--swiglu");
    if (!m.tied_embeddings) a.arg("--untie-embeddings-and-output-weights");
    if (!m.bias) {
        a.arg("--disable-bias-linear");
        if (m.qkv_bias) a.arg("--add-qkv-bias");
    }
}

// Mixture-of-experts: experts, routing, the token dispatcher and the dense first layers.
void write_moe(const JobSpec& job, MegatronArgs& a) {
    const ModelSpec& m = job.model;
    const ParallelSpec& p = job.parallel;
    if (m.experts > 1) {
        a.arg("--num-experts", str(m.experts));
        a.arg("--moe-router-topk", str(m.top_k));
        // moe: the estimate models Megatron-core's all-to-all token dispatcher (collectives.cpp
        // ep_all_to_all_bytes, tp_mlp_comm); Megatron's default is "allgather".
        // deepep: parallel.moe_dispatcher deepep / hybridep is the flex dispatcher with that backend
        // (Megatron-core transformer_config.py moe_flex_dispatcher_backend; --moe-enable-deepep is
        // its deprecated spelling of deepep).
        if (p.moe_dispatcher == MoeDispatcher::alltoall) {
            a.arg("--moe-token-dispatcher-type", "alltoall");
        } else {
            a.arg("--moe-token-dispatcher-type", "flex");
            a.arg("--moe-flex-dispatcher-backend", p.moe_dispatcher == MoeDispatcher::deepep ? "deepep" : "hybridep");
        }
        if (m.moe_router_num_groups > 0) {  // deepep: group-limited routing
            a.arg("--moe-router-num-groups", str(m.moe_router_num_groups));
            a.arg("--moe-router-group-topk", str(m.moe_router_group_topk));
        }
        // mlaio: the experts' own width, the shared experts (one MLP of their total width, as
        // TransformerConfig.moe_shared_expert_intermediate_size documents) and the dense first
        // layers as --moe-layer-freq's list pattern (arguments.py moe_freq_type: digits, [ ] ( ) + *
        // only; gpt_layer_specs asserts its length is num_layers).
        if (m.moe_ffn_hidden > 0) a.arg("--moe-ffn-hidden-size", str(m.moe_ffn_hidden));
        if (m.shared_expert_ffn_hidden > 0) a.arg("--moe-shared-expert-intermediate-size", str(m.shared_expert_ffn_hidden));
        if (m.first_dense_layers > 0)
            a.arg("--moe-layer-freq", "\"([0]*" + str(m.first_dense_layers) + "+[1]*" + str(m.layers - m.first_dense_layers) + ")\"");
        if (p.tp > 1 && !p.sequence_parallel)
            a.note("model.experts with parallel.tp > 1 and no sequence parallelism: Megatron-core's MoELayer "
                                "raises in training unless --sequence-parallel is set; set parallel.sequence_parallel = true");
    }
}

// Dropout, the attention backend and softmax fusion.
// fusedce2: the loss's kernels (estimate.cross_entropy), as the job's Megatron-LM has them:
// --cross-entropy-loss-fusion from June 2024 (commit 7b4a6d7), --cross-entropy-fusion-impl te
// from March 2025 (0f60adb) until Megatron-LM refused it on 2026-06-03 (168cb15, "Disable TE
// cross entropy loss fusion"). Where the date has no such flag the nearest loss it has is
// written, with a note.
// --cross-entropy-fusion-impl te: from Megatron-LM 0f60adb (March 2025) until 168cb15 (June 2026).
constexpr int kMegatronTeLossSince = 202503, kMegatronTeLossRefusedSince = 202606;

void write_loss(const JobSpec& job, MegatronArgs& a) {
    const CrossEntropyImpl ce = job.estimate.cross_entropy;
    const int v = job.training.framework_version;  // 0 = today
    const bool dated = v > 0;
    if (ce == CrossEntropyImpl::megatron_fused || ce == CrossEntropyImpl::te) {
        if (dated && v < kMegatronFusedLossSince) {
            a.note(std::string(kMegatronLossFlagsByDate) + "estimate.cross_entropy = \"" + to_string(ce) +
                   "\", but Megatron-LM of " + framework_version_text(v) +
                   " has no --cross-entropy-loss-fusion (June 2024), so its unfused loss runs, which moves 38 + 14 "
                   "bytes per bf16 logit where the estimate counted fewer");
            return;
        }
        a.arg("--cross-entropy-loss-fusion");
    }
    if (ce == CrossEntropyImpl::te) {
        if (dated && v >= kMegatronTeLossSince && v < kMegatronTeLossRefusedSince) a.arg("--cross-entropy-fusion-impl", "te");
        else
            a.note(std::string(kMegatronLossFlagsByDate) + "estimate.cross_entropy = \"te\", but Megatron-LM " +
                   (dated && v < kMegatronTeLossSince ? "has no --cross-entropy-fusion-impl before March 2025"
                                        : "refuses Transformer Engine's fused loss since 2026-06 (arguments.py: "
                                          "\"disabled due to stability issues\")") +
                   ", so the native fused loss is written, which moves 22 + 6 bytes per bf16 logit where the estimate "
                   "counted 6 + 4; Megatron-Bridge / NeMo take cross_entropy_fusion_impl = \"te\" as estimated");
    }
    if (ce == CrossEntropyImpl::pytorch || ce == CrossEntropyImpl::pytorch_compiled || ce == CrossEntropyImpl::fused)
        a.note(std::string("estimate.cross_entropy = \"") + to_string(ce) +
               "\" is not Megatron-LM's: it computes the loss with its unfused vocab-parallel cross entropy "
               "(estimate.cross_entropy = \"megatron\"), or the fused one with --cross-entropy-loss-fusion");
}

void write_attention_kernels(const JobSpec& job, MegatronArgs& a) {
    const ModelSpec& m = job.model;
    const TrainingSpec& t = job.training;
    // oom4: the estimate counts no dropout masks for a model without dropout (model.dropout, by
    // arch: llama has none); Megatron-LM's defaults are 0.1 each.
    if (!m.dropout_on()) {
        a.arg("--hidden-dropout", "0.0");
        a.arg("--attention-dropout", "0.0");
    }
    if (t.flash_attention) {
        a.arg("--use-flash-attn");
        // teflash: FlashAttention-2 named on a Megatron-core stack is Transformer Engine's
        // FlashAttention backend, which Megatron-LM selects with --attention-backend flash from
        // 2024-12-07 (fa0dcc4, "Attention as a config option in mcore"); before, only the
        // environment chose it (NVTE_FUSED_ATTN=0).
        if (t.flash_kernel == FlashKernel::flash_attn_2) {
            const int v = t.framework_version;  // 0 = today
            if (v == 0 || v >= kMegatronAttentionBackendSince)
                a.arg("--attention-backend", "flash");
            else
                a.note(std::string(kMegatronAttentionBackendByDate) +
                       "training.flash_attention_kernel = \"flash-attn-2\", but Megatron-LM of " + framework_version_text(v) +
                       " has no --attention-backend (December 2024); run with NVTE_FUSED_ATTN=0 so Transformer Engine "
                       "takes its FlashAttention backend (the flash-attn package) instead of cuDNN's fused attention, "
                       "which it prefers on Hopper and later");
        }
    } else {
        a.arg("--attention-backend", "unfused");
    }
    if (!t.masked_softmax_fusion) a.arg("--no-masked-softmax-fusion");  // papers
    write_loss(job, a);
}

// Batch sizes, bf16 / fp16 and the FP8 recipe.
std::optional<std::unexpected<Error>> write_batch_and_precision(const JobSpec& job, MegatronArgs& a) {
    const TrainingSpec& t = job.training;
    a.arg("--micro-batch-size", str(t.micro_batch));
    a.arg("--global-batch-size", str(t.global_batch));
    if (t.precision == Precision::bf16) a.arg("--bf16");
    else if (t.precision == Precision::fp16) a.arg("--fp16");
    if (t.fp8 != Fp8Recipe::none) {
        // fp8 (issue 15 point 3): Megatron-LM's Transformer-Engine arguments (arguments.py:
        // --fp8-format e4m3|hybrid, --fp8-recipe tensorwise|delayed|mxfp8|blockwise; its
        // "tensorwise" builds TE's Float8CurrentScaling).
        if (t.fp8 == Fp8Recipe::rowwise)
            return job_error(job, "training.fp8",
                             "got \"rowwise\"; Megatron-LM's --fp8-recipe has no row-wise scaling (torchao's recipe); "
                             "allowed for --format megatron: \"delayed\", \"current\", \"tensorwise\", \"mxfp8\"");
        a.arg("--fp8-format", to_string(t.fp8_format));
        a.arg("--fp8-recipe", t.fp8 == Fp8Recipe::delayed ? "delayed" : t.fp8 == Fp8Recipe::mxfp8 ? "mxfp8" : "tensorwise");
        if (t.fp8 == Fp8Recipe::delayed) {
            // Megatron's defaults (history 1, most_recent) differ from TE's DelayedScaling
            // defaults (1024, max), which the estimate and the job key follow.
            a.arg("--fp8-amax-history-len", str(t.fp8_amax_history_len));
            a.arg("--fp8-amax-compute-algo", "max");
        }
        if (t.fp8 == Fp8Recipe::tensorwise)
            a.note("training.fp8 = \"tensorwise\": Megatron-LM's --fp8-recipe tensorwise runs Transformer "
                                "Engine's Float8CurrentScaling (ptd's \"current\"), which caches FP8 weights per step "
                                "and keeps FP8 activations, unlike torchao's tensorwise that the estimate modelled");
        if (t.fp8_bf16_first_layers > 0 || t.fp8_bf16_last_layers > 0) {
            a.arg("--first-last-layers-bf16");
            a.arg("--num-layers-at-start-in-bf16", str(t.fp8_bf16_first_layers));
            a.arg("--num-layers-at-end-in-bf16", str(t.fp8_bf16_last_layers));
        }
        if (t.fp8_param_gather) a.arg("--fp8-param-gather");  // oomnemo
    }
    return std::nullopt;
}

// Activation recomputation.
void write_recompute(const JobSpec& job, MegatronArgs& a) {
    const ParallelSpec& p = job.parallel;
    if (p.recompute == Recompute::selective) {
        a.arg("--recompute-granularity", "selective");
        if (p.recompute_modules != kRecomputeCoreAttn) {  // recmod: Megatron-core's module list
            std::string words;
            for (const std::string& w : recompute_module_words(p.recompute_modules)) words += (words.empty() ? "" : " ") + w;
            a.arg("--recompute-modules", words);
        }
        if (p.recompute_style == RecomputeStyle::torchtitan_op)
            a.note("parallel.recompute_style = \"torchtitan-op\": Megatron-LM has no op-level selective "
                                "checkpointing; --recompute-granularity selective recomputes the attention core, which "
                                "keeps a different set of activations (ptd estimate --set parallel.recompute_style=megatron)");
    } else if (p.recompute == Recompute::full) {
        a.arg("--recompute-granularity", "full");
        a.arg("--recompute-method", "uniform");
        a.arg("--recompute-num-layers", "1");
        // papers; issue 28: TransformerConfig.__post_init__ raises for distribute_saved_activations
        // with sequence parallelism (the checkpointed input is already 1/tp there), so it is
        // written only without it.
        if (p.distribute_saved_activations && !p.sequence_parallel) a.arg("--distribute-saved-activations");
        else if (p.distribute_saved_activations)
            a.note("parallel.distribute_saved_activations: not written — Megatron-core's TransformerConfig refuses it "
                   "with --sequence-parallel, where each TP rank already keeps 1/tp of the checkpointed input");
    }
}

// The optimizer, its state dtypes, the learning-rate schedule and the seed.
std::optional<std::unexpected<Error>> write_optimizer(const JobSpec& job, MegatronArgs& a) {
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    a.arg("--optimizer", t.optimizer == Optimizer::sgd ? "sgd" : "adam");
    if (t.optimizer == Optimizer::adam)
        a.note("training.optimizer = \"adam\": Megatron-LM's --optimizer adam applies decoupled weight "
                            "decay (AdamW); there is no L2-coupled Adam");
    if (t.optimizer != Optimizer::sgd) {
        // PTD assumes the usual LLM pre-training betas (GPT-3, Llama): Megatron's default β2 is 0.999.
        a.arg("--adam-beta1", "0.9");
        a.arg("--adam-beta2", "0.95");
    } else {
        // The estimate counts one fp32 momentum buffer for sgd (kSgdMomentum); written
        // explicitly although it is Megatron's default.
        a.arg("--sgd-momentum", num(kSgdMomentum));
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
            if (p.offload_optimizer != OffloadDevice::cpu) a.arg("--use-precision-aware-optimizer");
            // fp32-remainders: --main-params-dtype fp32 with OptimizerConfig.store_param_remainders,
            // True by default (Transformer Engine ≥ 2.1).
            if (t.main_params_dtype == StateDtype::fp16) a.arg("--main-params-dtype", "fp16");
            if (t.exp_avg_dtype != StateDtype::fp32) a.arg("--exp-avg-dtype", to_string(t.exp_avg_dtype));
            if (t.exp_avg_sq_dtype != StateDtype::fp32) a.arg("--exp-avg-sq-dtype", to_string(t.exp_avg_sq_dtype));
        }
    }
    a.arg("--lr", num(t.lr));
    a.arg("--min-lr", num(t.min_lr));
    a.arg("--lr-decay-style", "cosine");
    a.arg("--lr-warmup-iters", str(t.warmup));
    a.arg("--train-iters", str(t.steps));
    a.arg("--weight-decay", num(t.weight_decay));
    a.arg("--clip-grad", num(t.grad_clip));
    a.arg("--seed", str(t.seed));
    return std::nullopt;
}

// Synthetic data, or an indexed dataset by prefix.
void write_data(const JobSpec& job, MegatronArgs& a) {
    const ModelSpec& m = job.model;
    const TrainingSpec& t = job.training;
    if (t.data == "synthetic") {
        a.arg("--mock-data");
        a.arg("--tokenizer-type", "NullTokenizer");
        a.arg("--vocab-size", str(m.vocab));
    } else {
        a.arg("--data-path", t.data);
        a.note("training.data = \"" + t.data + "\": Megatron-LM reads indexed datasets (.bin/.idx from "
                            "tools/preprocess_data.py) by prefix; add --tokenizer-type/--tokenizer-model for a "
                            "tokenizer with " + str(m.vocab) + " tokens");
    }
}

}  // namespace

DeviceConnections megatron_device_connections(const JobSpec& job) {
    const ParallelSpec& p = job.parallel;
    if (p.tp == 1 && p.cp == 1) return {};
    if (job.cluster.gpu.generation == GpuGeneration::blackwell)
        return {"", "Megatron-LM requires CUDA_DEVICE_MAX_CONNECTIONS=1 with tp or cp > 1 only before Blackwell "
                    "(arguments.py validate_args)"};
    if (p.moe_a2a_overlap)
        return {"32", "--overlap-moe-expert-parallel-comm wants several connections (validate_args: 1 favours the tp/cp "
                      "overlap, 32 the expert-parallel one)"};
    return {"1", "Megatron-LM asserts it with tp or cp > 1 before Blackwell (arguments.py validate_args): the TP/CP "
                 "communication kernels are queued ahead of the GEMMs they overlap"};
}

Result<ExportOutput> export_megatron(const JobSpec& job) {
    if (auto bad = unsupported_schedule(job, "Megatron-LM")) return *bad;  // zb
    if (auto bad = refuse_zero_2_3(job)) return *bad;
    MegatronArgs a;
    a.arg("--tensor-model-parallel-size", str(job.parallel.tp));
    a.arg("--pipeline-model-parallel-size", str(job.parallel.pp));
    if (job.parallel.pp > 1) write_pipeline_split(job, a);
    if (auto bad = check_interleaved_groups(job, a)) return *bad;
    write_parallel_modes(job, a);
    write_sharding_and_overlap(job, a);
    write_rank_order(job, a);
    write_model_shape(job, a);
    write_moe(job, a);
    write_attention_kernels(job, a);
    if (auto bad = write_batch_and_precision(job, a)) return *bad;
    write_recompute(job, a);
    if (auto bad = write_optimizer(job, a)) return *bad;
    write_data(job, a);
    // issue 28: the environment Megatron-LM checks, said where the arguments cannot carry it.
    if (const DeviceConnections c = megatron_device_connections(job); !c.value.empty())
        a.note("run with CUDA_DEVICE_MAX_CONNECTIONS=" + c.value + ": " + c.why +
               " (ptd export --launcher writes it into the script)");
    ExportOutput& out = a.out;
    for (size_t i = 0; i < a.args.size(); ++i) out.text += a.args[i] + (i + 1 < a.args.size() ? " \\\n" : "\n");
    return std::move(out);
}

}  // namespace ptd::export_internal
