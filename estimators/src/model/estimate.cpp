// estimate.cpp — assembles one layout's estimate: derives the layout's quantities once,
// asks the models for each stage's memory (memory.cpp), block times (compute.cpp,
// collectives.cpp) and tail (overlap.cpp), and places the blocks with the pipeline schedule
// (timeline.h). No allocation on the planner's path. Each model file opens with its sources;
// docs/estimators.md writes every term out.
#include "ptd/model/estimate.h"

#include "model/estimate_internal.h"
#include "ptd/spec/stack_defaults.h"
#include "model/profile_times.h"
#include "ptd/model/schedule.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

namespace ptd {

using namespace est;

// ---- context and one stage ------------------------------------------------------------------

EstimateContext make_estimate_context(const JobSpec& job, const ClusterProfile* profile) {
    EstimateContext ctx;
    ctx.job = job;
    ctx.profile = profile;
    if (profile) ctx.profile_times = std::make_shared<const ProfileTimes>(make_profile_times(*profile));
    ctx.params = count_parameters(job.model);
    ctx.peak_flops = job.cluster.gpu.peak_tflops(job.training.precision) * 1e12;
    ctx.cpu_device = job.cluster.gpu.name == "cpu";
    const HostLinkDefaults host = host_link_defaults(job.cluster);
    ctx.host_memory_gib = host.host_memory_gib, ctx.host_pcie_gbps = host.pcie_gbps;
    return ctx;
}

LayoutChoice layout_choice_of(const JobSpec& job) {
    const ParallelSpec& p = job.parallel;
    LayoutChoice c;
    c.tp = p.tp;
    c.pp = p.pp;
    c.dp = p.dp;
    c.cp = p.cp;
    c.ep = p.ep;
    c.vpp = p.vpp;
    c.micro_batch = job.training.micro_batch;
    c.zero = p.zero;
    c.distributed_optimizer = p.distributed_optimizer;
    c.dp_replicate = std::max(1, p.dp_replicate);  // hsdp
    c.sequence_parallel = p.sequence_parallel;
    c.recompute = p.recompute;
    c.offload_optimizer = p.offload_optimizer;  // offload
    c.offload_params = p.offload_params;
    c.schedule = p.schedule;  // zb
    c.etp = p.expert_tp;      // moe2: 0 = tp
    c.overlap_grad_reduce = p.overlap_grad_reduce;  // planfw
    c.overlap_param_gather = p.overlap_param_gather;
    c.tp_comm_overlap = p.tp_comm_overlap;
    c.order = -1;
    for (int i = 0; i < kPlannerOrderCount; ++i)
        if (p.order == kPlannerOrders[i]) c.order = i;
    return c;
}

const char* layout_choice_order(const EstimateContext& ctx, const LayoutChoice& c) {
    if (c.order >= 0 && c.order < kPlannerOrderCount) return kPlannerOrders[c.order];
    return ctx.job.parallel.order.c_str();
}

namespace {

LayoutDerived derive(const EstimateContext& ctx, const LayoutChoice& ch) {
    const JobSpec& job = ctx.job;
    const ModelSpec& m = job.model;
    const ClusterSpec& cl = job.cluster;
    const EstimateSpec& es = job.estimate;
    LayoutDerived L{};
    L.m = &m;
    L.t = ch.tp;
    L.p = ch.pp;
    L.v = std::max(ch.vpp, 1);
    L.c = std::max(ch.cp, 1);
    L.ep = std::max(ch.ep, 1);
    L.dp = std::max(ch.dp, 1);
    L.b = ch.micro_batch;
    L.mbs = std::max(1, job.training.global_batch / std::max(1, ch.micro_batch * L.dp));
    L.s_local = (double)m.seq_len / L.c;
    L.tokens = L.b * L.s_local;
    L.e = job.training.precision == Precision::fp32 ? 4.0 : 2.0;
    L.vocab = (double)padded_vocab(m.vocab, es.vocab_pad, ch.tp);
    L.h = m.hidden;
    L.d = m.head_dim();
    L.heads_l = (double)m.heads / L.t;
    L.kv_l = m.kv_heads >= L.t ? (double)m.kv_heads / L.t : 1.0;  // GQA: replicated when t > g
    L.f_l = (double)m.ffn_hidden / L.t;
    // moe2: the routed experts' width (moe_ffn_hidden, else ffn_hidden) splits over expert TP.
    L.etp = m.experts > 1 && ch.etp > 0 ? ch.etp : L.t;
    if (m.experts > 1 && (L.etp != L.t || m.moe_ffn_hidden > 0)) L.f_l = (double)m.expert_ffn_hidden() / L.etp;
    L.sp = ch.sequence_parallel && L.t > 1;
    L.flash = job.training.flash_attention;
    L.dropout = m.dropout_on();  // oom4: model.dropout, else by arch
    L.swiglu = m.activation == Activation::swiglu;
    L.moe = m.experts > 1;
    L.layernorm = m.norm == Norm::layernorm;
    L.cpu = ctx.cpu_device;
    // The bundled engine's own op-by-op model (engine_time.cpp) when a profile measured the
    // hosts it runs on; every other framework keeps the preset's model.
    L.profile_times = es.activation_profile == ActivationProfile::ptd_engine ? ctx.profile_times.get() : nullptr;
    // Without a profile, on a GPU, the same op-by-op model from the GPU preset (issue 30
    // point 8): the engine's own kernels, not a framework's.
    L.engine_device = es.activation_profile == ActivationProfile::ptd_engine && !L.profile_times && !ctx.cpu_device;
    // Shared cores: the profile measured one host with more ranks than cores, and this job runs on
    // one host: its ranks share those cores (schedule.h CoreSharing; docs/estimators.md
    // "Shared cores"). Each stage's blocks run on tp · cp · dp ranks at once.
    if (L.profile_times && L.profile_times->shared_cores > 0 && job.cluster.nodes <= 1) {
        L.share_cores = L.profile_times->shared_cores;
        L.share_measured = L.profile_times->shared_ranks_per_core;
        L.share_ranks_per_stage = (double)L.t * L.c * L.dp;
    }
    L.act_dtype = engine_dtype_name(engine_activation_dtype(job.training.precision));
    L.rc = ch.recompute;
    L.rc_style = job.parallel.recompute_style;
    L.rc_modules = job.parallel.recompute_modules;  // recmod
    L.norm_saves_output = es.memory_efficient_norm;  // menorm
    L.stage_inputs_freed = es.deallocate_pipeline_inputs;  // Llama 3 §3.3.2
    L.moe_probs_save_act = L.moe && !L.swiglu && moe_probs_in_activation(job.training);  // moeprobs
    L.edp = std::max(1, L.dp * L.c / L.ep);
    // moe2: MoE parallel folding: the expert-DP group is what is left of tp·cp·dp after etp·ep.
    if (L.etp != L.t) L.edp = std::max(1, L.t * L.c * L.dp / (L.etp * L.ep));
    // Model states: dense parameters shard over dp·cp (Megatron's distributed optimizer and
    // ZeRO both use the data-parallel group incl. context parallel); experts over dp·cp/ep.
    // hsdp: with dp_replicate replicas, over one replica's share of each group.
    L.dp_rep = std::max(1, ch.dp_replicate);
    L.dense_shards = std::max(1, L.dp * L.c / L.dp_rep);
    L.expert_shards = std::max(1, L.edp / L.dp_rep);
    const OptimizerStateWidths widths = optimizer_state_widths(job.training);  // oom4
    L.state_widths = widths;
    const Sharding sh = effective_sharding(job.training.framework, ch.pp, ch.zero, ch.distributed_optimizer);  // ttfsdp
    L.dense_state = state_bytes_per_param(job.training.precision, job.training.optimizer, sh.zero,
                                          sh.distributed_optimizer, (double)L.dense_shards, widths);
    L.optimizer_sharded = sh.zero >= 1 || sh.distributed_optimizer;
    L.zero = sh.zero;
    L.expert_state = state_bytes_per_param(job.training.precision, job.training.optimizer, sh.zero,
                                           sh.distributed_optimizer, (double)L.expert_shards, widths);
    // oomnemo: grad_reduce_in_fp32 = false (Megatron-core DDP config; NeMo / Megatron-Bridge
    // performance recipes): the main-grad buffer is bf16, 2 bytes per parameter, not 4.
    if (!job.parallel.grad_reduce_in_fp32 && sh.zero == 0 && job.training.precision == Precision::bf16) {
        L.dense_state.grads = std::min(L.dense_state.grads, 2.0);
        L.expert_state.grads = std::min(L.expert_state.grads, 2.0);
    }

    // mla: per-head widths (head_dim ≠ hidden / heads needs nothing more: every width below is
    // heads_l · d) and MLA's latent widths; K and V exist per query head after the up projection.
    assign_attention_widths(m, L);

    // Parameters of one layer on one TP rank.
    const double h = L.h, hd = L.heads_l * L.d, kvd = L.kv_l * L.d;
    double attn = h * hd * 2 + h * kvd * 2;
    if (m.bias) attn += hd + 2 * kvd + h;
    else if (m.qkv_bias) attn += hd + 2 * kvd;
    if (L.mla) attn = attention_params_per_rank(L, true);  // mla
    else if (m.qk_layernorm) attn += 2.0 * (L.layernorm ? 2.0 : 1.0) * L.d;  // mla: q / k norms, replicated
    const double mats_in = L.swiglu ? 2.0 : 1.0;
    double expert = (mats_in + 1.0) * h * L.f_l;
    if (m.bias) expert += mats_in * L.f_l + h;
    const double norm = L.layernorm ? 2 * h : h;
    if (L.moe) {
        L.layer_dense_params = attn + 2 * norm + h * m.experts;  // router replicated
        L.layer_expert_params = expert * m.experts / L.ep;
        // moe2: the shared experts are one dense MLP of their width, TP-split (SharedExpertMLP):
        // dense parameters, reduced and sharded over DP like the attention's.
        if (m.shared_expert_ffn_hidden > 0) {
            L.fs_l = (double)m.shared_expert_ffn_hidden / L.t;
            L.layer_dense_params += (mats_in + 1.0) * h * L.fs_l + (m.bias ? mats_in * L.fs_l + h : 0.0);
        }
    } else {
        L.layer_dense_params = attn + 2 * norm + expert;
        L.layer_expert_params = 0;
    }
    L.embed_params = L.vocab * h / L.t + (m.position == Position::learned ? (double)m.seq_len * h : 0.0);
    L.output_params = L.vocab * h / L.t;  // untied, or the tied copy on the last stage when p > 1
    L.final_norm_params = norm;
    // mla: each MTP module (Megatron-core MultiTokenPredictionLayer) on the last stage: its
    // transformer layer (the model's last layer kind), enorm, hnorm, its final norm and eh_proj
    // (ColumnParallelLinear 2h → h, no bias); the embedding and output layer are shared.
    if (L.mtp > 0) {
        L.mtp_params = L.mtp * (L.layer_dense_params + L.layer_expert_params + 2.0 * h * h / L.t + 3.0 * norm);
        L.mtp_expert_params = L.mtp * L.layer_expert_params;
    }

    // moe2: tokens one rank's experts see: its dispatched SP shard gathered over expert TP.
    L.moe_g = L.etp == L.t ? 1.0 : (L.sp ? 1.0 / L.t : 1.0) * L.etp;
    L.shared_overlap = job.parallel.moe_shared_expert_overlap && L.fs_l > 0;
    L.first_dense = L.moe ? m.first_dense_layers : 0;
    L.dense_layer = nullptr, L.stage_dense = nullptr, L.chunk_dense = nullptr;  // evaluate_layout
    // Which groups leave the node, from the rank order (collectives.cpp).
    assign_group_links(cl, layout_choice_order(ctx, ch), L);
    L.peak = std::max(ctx.peak_flops, 1.0);
    L.hbm = std::max(cl.gpu.hbm_gbps, 1e-3) * 1e9 * time_model_constants().hbm_eff;
    assign_kernel_profile(job, L);
    L.nccl_groups = (L.t > 1) + (L.p > 1) + (L.dp > 1) + (L.c > 1) + (L.ep > 1) + (L.ep > 1 && L.edp > 1);
    if (L.moe && L.etp != L.t) L.nccl_groups += (L.etp > 1) + (L.ep == 1 && L.edp > 1);  // moe2: ETP, expert-DP
    if (L.dp_rep > 1) L.nccl_groups += 1 + (L.moe && L.edp > 1);  // hsdp: the replica groups

    // fp8 (issue 15 point 3): the linear layers' GEMMs at the FP8 peak; what the recipe adds
    // in quantization traffic and memory (compute.cpp, memory.cpp; docs/estimators.md).
    const TrainingSpec& tr = job.training;
    L.fp8 = tr.precision == Precision::bf16 && cl.gpu.fp8_tflops > 0 ? tr.fp8 : Fp8Recipe::none;
    if (L.fp8 != Fp8Recipe::none) {
        L.fp8_te = L.fp8 == Fp8Recipe::delayed || L.fp8 == Fp8Recipe::current || L.fp8 == Fp8Recipe::mxfp8;
        L.peak_fp8 = cl.gpu.fp8_tflops * 1e12;
        L.fp8_cast = fp8_cast_bytes(L.fp8, L.mbs, cl.gpu.generation);
        if (L.sp && L.fp8_te) fp8_sp_gathered_transpose(L.fp8_cast, L.fp8, cl.gpu.generation);  // fp8sp
        L.fp8_accum_factor = fp8_split_accum_factor(cl.gpu.generation);                          // fp8acc
        // TE keeps the FP8 input a linear layer's wgrad needs (its columnwise copy) instead of
        // the bf16 input; MXFP8 adds one E8M0 scale per 32 elements. torchao keeps bf16.
        const double mx_scales = L.fp8 == Fp8Recipe::mxfp8 ? 1.0 / 32.0 : 0.0;
        L.fp8_saved_bytes = L.fp8_te ? 1.0 + mx_scales : L.e;
        // TE caches each weight's FP8 rowwise (fprop) and columnwise (dgrad; Hopper's FP8
        // GEMM is TN-only, so a transposed copy) data for the step; per-tensor FP8 on
        // Blackwell keeps the one copy both GEMMs read (fp8one), MXFP8 both directions.
        L.fp8_weight_bytes = L.fp8_te ? (fp8_single_copy(L.fp8, cl.gpu.generation) ? 1.0 : 2.0) * (1.0 + mx_scales) : 0.0;
        // Delayed scaling: per linear module an fp32 amax history for 3 forward (input,
        // weight, output) and 2 backward (grad output, grad input) tensors, plus scale and
        // scale_inv per tensor; 4 linear modules (QKV, proj, FC1, FC2) per layer.
        L.fp8_state_bytes_per_layer =
            L.fp8 == Fp8Recipe::delayed ? 4.0 * 5.0 * 4.0 * (tr.fp8_amax_history_len + 2.0) : 0.0;
        L.layer_linear_params = h * hd * 2 + h * kvd * 2 + (mats_in + 1.0) * h * L.f_l * (L.moe ? (double)m.experts / L.ep : 1.0);
        if (L.mla) L.layer_linear_params += attention_params_per_rank(L, false) - (h * hd * 2 + h * kvd * 2);  // mla
        if (L.fs_l > 0) L.layer_linear_params += (mats_in + 1.0) * h * L.fs_l;  // moe2: shared experts
        L.fp8_bf16_first = tr.fp8_bf16_first_layers;
        L.fp8_bf16_last = tr.fp8_bf16_last_layers;
    }
    L.gemm_workspace_bytes = gemm_workspace_bytes(job, L.fp8_te, L.moe);
    // overlap: the layout's settings (the job's, or the planner's choice: planfw); the param
    // gather only exists with a sharded optimizer, TP overlap only with sequence parallelism
    // (overlap.cpp).
    L.overlap_grad_reduce = ch.overlap_grad_reduce;
    L.overlap_param_gather = ch.overlap_param_gather && L.optimizer_sharded;
    L.tp_comm_overlap = ch.tp_comm_overlap && L.sp;
    // offload: what moves to host memory, and the host side's bandwidth, CPU and RAM.
    L.offload_optimizer = ch.offload_optimizer != OffloadDevice::none;
    L.offload_params = ch.offload_params;
    L.pcie = std::max(ctx.host_pcie_gbps, 1e-3) * 1e9;
    L.cpu_adam_params_per_s = cpu_adam_params_per_s(cl);  // bits: per host CPU (cluster preset)
    L.gpus_per_node = std::max(1, std::min(cl.gpus_per_node, L.world()));
    L.host_capacity_bytes = ctx.host_memory_gib * kGiB;
    L.schedule = L.p > 1 ? effective_schedule(ch.schedule, L.v) : PipelineSchedule::one_f_one_b;  // zb
    // dsthru: DeepSpeed runs pp > 1 in its PipelineEngine (compute.cpp, overlap.cpp).
    L.ds_pipe = job.training.framework == Framework::deepspeed && L.p > 1;
    L.grad_accum_bytes = L.ds_pipe ? ds_grad_accum_bytes(job.training.precision, L.mbs) : 0.0;
    // embgrad: Megatron-core's VocabParallelEmbedding looks its rows up with F.embedding, whose
    // backward writes a dense gradient of the whole local table (embedding_dense_backward: a
    // zero-filled [vocab / tp, h] tensor, 16-bit, then the T rows added in); the embedding is
    // no fused-accumulation linear, so DDP's backward hook adds that gradient into main_grad
    // (distributed_data_parallel.py _make_backward_post_hook: param.main_grad.add_(param.grad))
    // every micro-batch: a write of e, a read of e and a read and write of the main-grad dtype
    // (the grad buffer's: fp32 with grad_reduce_in_fp32, else the parameters').
    if (runs_megatron_core(job.training.framework) && !L.ds_pipe && L.zero < 3)
        L.embed_grad_bytes = 2.0 * L.e + 2.0 * (job.parallel.grad_reduce_in_fp32 ? 4.0 : L.e);
    // p2psg: Megatron-LM (2021 – early 2023) splits the p2p tensor over the TP ranks unless
    // sequence parallelism already has (p2p_communication.py: `not args.sequence_parallel`).
    L.p2p_scatter_gather = job.parallel.scatter_gather_tensors_in_pipeline && !L.ds_pipe && L.p > 1 && L.t > 1 && !L.sp;
    // papers: Megatron's CheckpointFunction splits the saved input only without sequence
    // parallelism (transformer_block.py: distribute_saved_activations and not sequence_parallel).
    L.distribute_saved = job.parallel.distribute_saved_activations && L.rc == Recompute::full && L.t > 1 && !L.sp;
    L.softmax_unfused = !job.training.masked_softmax_fusion && !L.flash;  // papers

    // blackwell: Megatron's overlap_p2p_comm acts in its interleaved schedule only
    // (schedules.py forward_backward_pipelining_with_interleaving; arguments.py turns it off
    // otherwise); DeepSpeed, torchtitan and the ZB-H1 / DualPipe paths send their own way.
    L.overlap_p2p = job.parallel.overlap_p2p_comm && runs_megatron_core(job.training.framework) && L.p > 1 &&
                    L.v > 1 && L.schedule == PipelineSchedule::interleaved;
    // ttmem: torchtitan runs TP as DTensor plans (parallelize_llama.py apply_tp) with
    // loss_parallel unless disabled, and PP with torch.distributed.pipelining (memory.cpp).
    const bool torchtitan = job.training.framework == Framework::torchtitan;
    L.dtensor_sp = torchtitan && L.sp;
    L.loss_parallel = torchtitan && L.t > 1 && es.cross_entropy == CrossEntropyImpl::pytorch;
    loss_bytes_per_logit(es.cross_entropy, L.e, L.ce_fwd_bytes, L.ce_bwd_bytes);  // fusedce
    L.torch_pipelining = torchtitan && L.p > 1;
    // ttaccum: torchtitan shards with FSDP2 whenever there is a data-parallel or context-parallel
    // mesh (parallelize_llama.py: dp_shard or cp enabled); its reduce dtype is fp32 unless
    // grad_reduce_in_fp32 = false.
    if (L.torch_pipelining)
        L.grad_accum_bytes = torch_pipelining_grad_accum_bytes(L.dp * L.c > 1 && job.parallel.grad_reduce_in_fp32,
                                                               job.training.precision, L.mbs);
    L.titan_model = torchtitan;
    L.titan_eager = torchtitan && !job.training.torch_compile;
    // l405: the interleaved group size N as the job gives it (validate_job: pp ≤ N ≤ m), p when
    // not given (Megatron's default); a layout the planner tries with another pp or fewer
    // micro-batches keeps Megatron's range [p, max(p, m)].
    const long long mb_group = microbatch_group_in_range(job.parallel.microbatch_group_size, L.p, L.mbs);
    L.mb_group = mb_group > 0 ? (int)mb_group : L.p;
    L.chunk_layers = nullptr;  // set by evaluate_layout where the chunks of a stage differ
    // tt405: PyTorch's micro-pipelined TP (torchtitan enable_async_tensor_parallel), sequence
    // parallel only (validate_job); overlap.cpp hide_tp_comm.
    L.async_tp = job.parallel.async_tp && L.sp && L.t > 1;
    // recomp: Megatron-LM (Sep 2021 on; Megatron-Core and Transformer Engine's linears always)
    // runs a column-parallel linear's backward collectives asynchronously beside its GEMMs
    // (overlap.cpp hide_tp_dgrad). ZB-H1 / DualPipe defer the weight gradient: nothing to hide behind.
    L.tp_dgrad_async = job.parallel.async_tensor_model_parallel_allreduce && runs_megatron_core(job.training.framework) &&
                       L.t > 1 && L.schedule != PipelineSchedule::zb_h1 && L.schedule != PipelineSchedule::dualpipe;
    // ttasync: torchao rowwise float8 under torchtitan's sequence-parallel TP quantizes after
    // the bf16 all-gather (parallelize_llama.py apply_tp: enable_float8_tensorwise_tp only for
    // tensorwise recipes).
    L.fp8_cast_after_tp_gather = L.dtensor_sp && L.t > 1 && L.fp8 == Fp8Recipe::rowwise;
    // deepep: the flex dispatcher's DeepEP / HybridEP kernels send a token once per node that
    // holds any of its experts (collectives.cpp ep_dispatch_time): the expected other nodes,
    // each node hit with the same probability.
    L.node_dedup = L.moe && L.ep > 1 && job.parallel.moe_dispatcher != MoeDispatcher::alltoall;
    L.ep_remote_nodes = 0;
    if (L.node_dedup && L.net_ep.nodes > 1) {
        const double N = L.net_ep.nodes;
        L.ep_remote_nodes = expected_expert_nodes(m.experts, m.top_k, L.net_ep.nodes, m.moe_router_num_groups,
                                                  m.moe_router_group_topk) * (N - 1.0) / N;
    }
    // moeperm: the flex dispatcher delivers a token once to each EP rank holding any of its
    // experts (each rank holds experts / ep of them: expected_expert_nodes with one "node" per
    // rank); the rank's permute starts from those.
    L.ep_token_ranks = L.node_dedup ? expected_expert_nodes(m.experts, m.top_k, L.ep, m.moe_router_num_groups, m.moe_router_group_topk) : 1.0;
    L.moe_permute_fusion = L.moe && job.parallel.moe_permute_fusion;
    L.moe_router_fusion = L.moe && job.parallel.moe_router_fusion;
    // deepep: --overlap-moe-expert-parallel-comm pairs one micro-batch's forward with another's
    // backward in the 1F1B steady state (pipeline_parallel/combined_1f1b.py): without PP all
    // but the first forward and the last backward (m − 1 of m); interleaved, all but the warm-up
    // forwards and the cool-down backwards, (p − rank − 1)·2 + (v − 1)·N + 1 of the m·v per rank
    // (schedules.py get_pp_rank_microbatches, one extra warm-up forward with the overlap), taken
    // at the mean rank. Megatron refuses pp > 1 without vpp and full recompute (validate_job);
    // a planner layout outside those preconditions runs without the overlap.
    L.a2a_paired = 0;
    if (job.parallel.moe_a2a_overlap && L.moe && L.ep > 1 && (L.p == 1 || L.v > 1) && L.rc != Recompute::full &&
        L.schedule != PipelineSchedule::zb_h1 && L.schedule != PipelineSchedule::dualpipe) {
        const double blocks = (double)L.mbs * L.v;
        const double warmup = L.p > 1 ? (L.p - 1.0) + (L.v - 1.0) * L.mb_group + 1.0 : 1.0;
        L.a2a_paired = std::max(0.0, blocks - warmup) / blocks;
    }
    // hostov: host time (host.cpp): Megatron-core's op counts; what the CUDA graphs capture (an
    // impl with no scope = the whole layer, full_iteration = everything); the dropless MoE
    // dispatcher's host sync unless the expert inputs are padded or the MoE layer is captured.
    L.host_model = runs_megatron_core(job.training.framework) && !L.cpu;
    {
        const ParallelSpec& pa = job.parallel;
        constexpr uint32_t kWholeLayer = kGraphAttn | kGraphMlp | kGraphMoe | kGraphMoeRouter | kGraphMoePreprocess;
        uint32_t graphs = 0;
        if (pa.cuda_graph_impl != CudaGraphImpl::none) graphs = pa.cuda_graph_scope == 0 ? kWholeLayer : pa.cuda_graph_scope;
        if (graphs & kGraphFullIteration) graphs |= kWholeLayer;
        L.graph_scope = graphs;
        L.moe_host_sync = L.moe && !pa.moe_pad_to_capacity && !(graphs & kGraphMoe);
        // moefp8pad: Megatron-core's TEGroupedMLP under a Transformer Engine FP8 recipe pads each
        // local expert's rows to the FP8 GEMM alignment (Fp8Padding) and strips the padding from
        // its output (Fp8Unpadding) whenever a count is not a multiple of it. Dropless routing
        // leaves the counts arbitrary; capacity padding (static capacities) or the router's own
        // padding (--moe-router-padding-for-fp8) align them, and a whole-step graph, which has no
        // host copy of the counts to pad by, runs only with static, aligned expert inputs.
        L.moe_fp8_pad = L.moe && L.fp8_te && runs_megatron_core(job.training.framework) && !pa.moe_pad_to_capacity &&
                        !pa.moe_router_padding_for_fp8 && !(graphs & kGraphFullIteration);
        L.host_op_s = (job.cluster.host_op_us > 0 ? job.cluster.host_op_us : kHostOpUsDefault) * 1e-6;
    }
    return L;
}

// One micro-batch's forward and backward blocks through `layers` layers on one rank
// (`first`: with the embedding, `last`: with the final norm, output layer and loss).
// Linear in layers, so a stage's chunks add up to the stage. p2p is one hop each way.
// `dgrad_delta`: tp_dgrad_delta(L, lt) where the caller has it (pspeed4), else null.
ChunkTime block_time(const LayoutDerived& L, const LayerTime& lt, double layers, bool first, bool last,
                     const double* dgrad_delta = nullptr) {
    ChunkTime c;
    block_compute(L, lt, layers, first, last, c);
    block_comm(L, lt, layers, first, last, c);
    hide_tp_comm(L, lt, layers, c);  // parallel.tp_comm_overlap (overlap.cpp)
    // recomp: Megatron's asynchronous dgrad collectives (overlap.cpp)
    hide_tp_dgrad(dgrad_delta ? *dgrad_delta : tp_dgrad_delta(L, lt), layers, c);
    add_amax_reductions(L, layers, c);  // curamax: current scaling's TP amax all-reduces (collectives.cpp)
    hide_ep_a2a(L, c);  // deepep: parallel.moe_a2a_overlap (overlap.cpp)
    add_host_time(L, lt, layers, c);  // hostov: a host slower than the GPU (host.cpp)
    hide_p2p(L, c);  // blackwell: parallel.overlap_p2p_comm (overlap.cpp)
    return c;
}

// moe2: the layout as one of an MoE model's first_dense_layers sees it: a dense MLP of
// ffn_hidden / t instead of the router, routed and shared experts (Megatron --moe-layer-freq,
// HF first_k_dense_replace). Everything else — attention, groups, states — is L's.
LayoutDerived dense_layer_view(const LayoutDerived& L) {
    LayoutDerived D = L;
    const ModelSpec& m = *L.m;
    const double h = L.h, mats_in = L.swiglu ? 2.0 : 1.0;
    auto mlp = [&](double w) { return (mats_in + 1.0) * h * w + (m.bias ? mats_in * w + h : 0.0); };
    D.moe = false;
    D.f_l = (double)m.ffn_hidden / L.t;
    D.layer_dense_params = L.layer_dense_params - h * m.experts - (L.fs_l > 0 ? mlp(L.fs_l) : 0.0) + mlp(D.f_l);
    D.layer_expert_params = 0;
    if (L.fp8 != Fp8Recipe::none)
        D.layer_linear_params = L.layer_linear_params - (mats_in + 1.0) * h * (L.f_l * m.experts / L.ep + L.fs_l) +
                                (mats_in + 1.0) * h * D.f_l;
    D.fs_l = 0, D.moe_g = 1.0, D.shared_overlap = false;
    D.first_dense = 0, D.dense_layer = nullptr, D.stage_dense = nullptr, D.chunk_dense = nullptr;
    return D;
}

// moe2: a chunk of `layers` layers of which `dense` are dense-MLP layers (L.dense_layer):
// each kind's blocks through its layers, the chunk's one pipeline hop counted once.
ChunkTime block_time_mixed(const LayoutDerived& L, const LayerTime& lt, const LayerTime& lt_dense, double layers,
                           double dense, bool first, bool last) {
    if (dense <= 0 || !L.dense_layer) return block_time(L, lt, layers, first, last);
    const LayoutDerived& D = *L.dense_layer;
    ChunkTime c, d;
    const double moe_layers = layers - dense;
    block_compute(L, lt, moe_layers, first, last, c);
    block_comm(L, lt, moe_layers, first, last, c);
    hide_tp_comm(L, lt, moe_layers, c);
    hide_tp_dgrad(L, lt, moe_layers, c);
    block_compute(D, lt_dense, dense, false, false, d);
    block_comm(D, lt_dense, dense, false, false, d);
    hide_tp_comm(D, lt_dense, dense, d);
    hide_tp_dgrad(D, lt_dense, dense, d);
    add_host_time(L, lt, moe_layers, c);  // hostov: each kind's host time against its own GPU time
    add_host_time(D, lt_dense, dense, d);
    auto add = [](BlockTime& a, const BlockTime& b) {
        a.compute += b.compute, a.recompute += b.recompute, a.tp += b.tp, a.cp += b.cp, a.ep += b.ep, a.wgrad += b.wgrad;
    };
    add(c.fwd, d.fwd);
    add(c.bwd, d.bwd);
    hide_ep_a2a(L, c);  // deepep: the whole chunk's compute is the paired window
    hide_p2p(L, c);
    return c;
}

struct StageEval {
    StageMemory sm;
    double fwd = 0, bwd = 0, recompute = 0, tp = 0, cp = 0, ep = 0, p2p = 0;  // per micro-batch
    DpTraffic dp;  // per iteration, before overlap
};

// pspeed2: one evaluation's block times by kind of chunk. A chunk's time depends only on its
// layer count and whether it holds the embedding or the output layer, so a layout has a few
// kinds however many chunks (a balanced split ≤ 4); with v = 1 a stage is its one chunk, and
// evaluate_stage and the pipeline's durations ask the same question. Each kind keeps its
// block totals; the kind asked for last is tried first (a split's stages come in runs).
struct ChunkKinds {
    struct Kind {
        double layers;
        bool first, last;
        double dense;  // moe2: dense-MLP layers among them
        ChunkTime time;
        double fwd_total, bwd_total;
    };
    Kind known[8];
    Kind spare;  // a ninth kind and beyond (explicit lists), not kept
    int n_known = 0, last_kind = -1;
    const LayerTime* lt_dense = nullptr;  // moe2: a dense-MLP layer's times (L.dense_layer)
    // pspeed4: one layer's dgrad-overlap change of the backward TP time, the same for every
    // kind of (L, lt): computed with the first kind.
    std::optional<double> dgrad_delta;
    const Kind& get(const LayoutDerived& L, const LayerTime& lt, double layers, bool first, bool last, double dense = 0) {
        if (last_kind >= 0 && known[last_kind].layers == layers && known[last_kind].first == first &&
            known[last_kind].last == last && known[last_kind].dense == dense)
            return known[last_kind];
        return find(L, lt, layers, first, last, dense);
    }
    [[gnu::noinline]] const Kind& find(const LayoutDerived& L, const LayerTime& lt, double layers, bool first, bool last,
                                       double dense) {
        auto same = [&](const Kind& k) { return k.layers == layers && k.first == first && k.last == last && k.dense == dense; };
        for (int k = 0; k < n_known; ++k)
            if (same(known[k])) return known[last_kind = k];
        Kind& slot = n_known < 8 ? known[last_kind = n_known++] : spare;
        slot.layers = layers, slot.first = first, slot.last = last, slot.dense = dense;
        if (L.profile_times || L.engine_device) {
            slot.time = engine_block_time(L, layers, first, last);
        } else if (dense > 0 && lt_dense) {
            slot.time = block_time_mixed(L, lt, *lt_dense, layers, dense, first, last);
        } else {
            if (!dgrad_delta) dgrad_delta = tp_dgrad_delta(L, lt);
            slot.time = block_time(L, lt, layers, first, last, &*dgrad_delta);
        }
        slot.fwd_total = slot.time.fwd.total(), slot.bwd_total = slot.time.bwd.total();
        return slot;
    }
};

StageEval evaluate_stage(const EstimateContext& ctx, const LayoutDerived& L, const LayerTime& lt, int i,
                         int layers, ChunkKinds& kinds, const LayerActivation& act) {
    StageEval S;
    S.sm = stage_memory(ctx, L, i, layers, act);
    // Time per micro-batch: the stage's v chunks together (block_time is linear in layers;
    // the embedding and output terms fall on the first and last chunk).
    const ChunkTime& ct = kinds.get(L, lt, layers, i == 0, i == L.p - 1, L.stage_dense ? L.stage_dense[i] : 0.0).time;  // pspeed2
    S.fwd = ct.fwd.compute;
    S.bwd = ct.bwd.compute;
    S.recompute = ct.bwd.recompute;
    S.tp = ct.fwd.tp + ct.bwd.tp;
    S.cp = ct.fwd.cp + ct.bwd.cp;
    S.ep = ct.fwd.ep + ct.bwd.ep;
    S.p2p = L.v * (ct.fwd.p2p + ct.bwd.p2p);  // one hop each way per chunk
    return S;  // ZeRO buffers and DP traffic are added by the caller, which knows the layout
}

// ---- the steps of evaluate_layout -------------------------------------------------------

// How a layout's layers split over its stages and model chunks: the list given (pp or pp·v
// entries), Megatron's split with the embedding / loss counted as layers, or balanced.
struct StageSplit {
    const std::vector<int>* list = nullptr;  // layers_per_stage in effect
    int n_lps = 0, p = 1, v = 1, layers = 0, base = 0, extra = 0;

    // Layers of stage i: from the explicit list (pp or pp·vpp entries), else balanced.
    int stage_layers(int i) const {
        if (n_lps == p) return (*list)[(size_t)i];
        if (n_lps == p * v && n_lps > 0) {
            int sum = 0;
            for (int k = 0; k < v; ++k) sum += (*list)[(size_t)(k * p + i)];
            return sum;
        }
        if (p == 1) return layers;
        return base + (i >= 1 && i <= extra ? 1 : 0);
    }
    // Layers of chunk c of stage i (the list's entry where it has one per chunk).
    double chunk_layers(int c, int i, int stage_total) const {
        return n_lps == p * v && v > 1 ? (double)(*list)[(size_t)(c * p + i)] : (double)stage_total / v;
    }
    // Whether the split is the balanced one (no list, or a list equal to it, as the planner
    // passes when pp does not divide the layers).
    bool balanced() const {
        if (n_lps == 0) return true;
        if (n_lps != p) return false;
        // pspeed4: against the balanced list itself (kept per thread for the last layers and p),
        // a memcmp rather than a comparison per stage.
        thread_local std::vector<int> reference;
        thread_local int reference_layers = -1;
        if (reference_layers != layers || (int)reference.size() != p) {
            reference.resize((size_t)p);
            for (int i = 0; i < p; ++i) reference[(size_t)i] = p == 1 ? layers : base + (i >= 1 && i <= extra ? 1 : 0);
            reference_layers = layers;
        }
        return std::equal(reference.begin(), reference.end(), list->begin());
    }
    // With a balanced split, stages come in runs of equal stages: the first, those with one
    // layer more (1..extra), the rest of the middle, the last. The end of i's run.
    int run_end(int i) const { return i == 0 ? 1 : i == p - 1 ? p : i <= extra ? std::min(extra + 1, p - 1) : p - 1; }
    // The stage evaluated for i's run.
    int representative(int i) const {
        return i == 0 ? 0 : i == p - 1 ? p - 1 : (i <= extra ? 1 : std::min(extra + 1, p - 2));
    }
};

// l405: Megatron's --account-for-embedding/loss-in-pipeline-split: layers + 1 (+ 1) split
// evenly into p·v chunks, the first chunk of the first stage and the last chunk of the last
// stage holding one transformer layer fewer (transformer_config / get_num_layers_to_build).
// Where the count does not divide (a layout the planner tries), the split given is kept.
StageSplit split_layers(const JobSpec& job, LayoutDerived& L, const std::vector<int>& given) {
    const int layers = job.model.layers, p = L.p;
    const int split_extra = (job.parallel.account_for_embedding_in_pipeline_split ? 1 : 0) +
                            (job.parallel.account_for_loss_in_pipeline_split ? 1 : 0);
    const int pv = p * L.v;
    thread_local std::vector<int> accounted_split;
    const bool use_accounted = split_extra > 0 && (int)given.size() != pv && (layers + split_extra) % pv == 0 &&
                               (layers + split_extra) / pv >= 1;
    if (use_accounted) {
        accounted_split.assign((size_t)pv, (layers + split_extra) / pv);
        if (job.parallel.account_for_embedding_in_pipeline_split) --accounted_split.front();
        if (job.parallel.account_for_loss_in_pipeline_split) --accounted_split.back();
    }
    StageSplit s;
    s.list = use_accounted ? &accounted_split : &given;
    if (L.v > 1 && (int)s.list->size() == pv) L.chunk_layers = s.list->data();
    s.n_lps = (int)s.list->size();
    s.p = p, s.v = L.v, s.layers = layers;
    s.base = layers / p, s.extra = layers % p;
    return s;
}

// moe2: where an MoE model's first_dense_layers sit: dense-MLP layers per model chunk (in
// layer order, chunk c of stage i is model chunk c·p + i) and per stage, into L. Returns a
// dense layer's times (null without dense layers) and whether any sit past stage 0.
struct DenseLayers {
    const LayerTime* layer_time = nullptr;
    bool beyond_first_stage = false;
};

DenseLayers place_dense_layers(LayoutDerived& L, const StageSplit& split) {
    // pspeed: per thread, not per call: a LayoutDerived is ~900 bytes whose default members
    // would be initialised for every layout the planner scores, MoE or not.
    thread_local std::vector<double> chunk_dense_v, stage_dense_v;
    thread_local LayoutDerived dense_view;
    thread_local LayerTime lt_dense;
    DenseLayers out;
    if (L.first_dense <= 0) return out;
    const int p = L.p;
    dense_view = dense_layer_view(L);
    lt_dense = layer_forward_time(dense_view);
    chunk_dense_v.assign((size_t)p * L.v, 0.0);
    stage_dense_v.assign((size_t)p, 0.0);
    double start = 0;
    for (int j = 0; j < p * L.v; ++j) {
        const int i = j % p;
        const double size = split.n_lps == p * L.v && L.v > 1 ? (double)(*split.list)[(size_t)j]
                                                             : (double)split.stage_layers(i) / L.v;
        const double dense = std::clamp((double)L.first_dense - start, 0.0, size);
        chunk_dense_v[(size_t)j] = dense;
        stage_dense_v[(size_t)i] += dense;
        start += size;
        if (i > 0 && dense > 0) out.beyond_first_stage = true;
    }
    L.dense_layer = &dense_view;
    L.chunk_dense = chunk_dense_v.data();
    L.stage_dense = stage_dense_v.data();
    out.layer_time = &lt_dense;
    return out;
}

// The stages evaluated: every stage, or (balanced split, no detail) those that can be the
// worst: the first, the first of each run of equal middle stages (most in flight), the last.
struct EvaluatedStages {
    bool all = true;
    int cand[4] = {};
    int n_cand = 0;
    int count = 0;
    int stage(int k) const { return all ? k : cand[k]; }
};

EvaluatedStages pick_stages(const StageSplit& split, bool all) {
    EvaluatedStages e;
    e.all = all;
    const int p = split.p;
    if (!all) {
        auto add = [&](int i) {
            if (i < 0 || i >= p) return;
            for (int k = 0; k < e.n_cand; ++k)
                if (e.cand[k] == i) return;
            e.cand[e.n_cand++] = i;
        };
        add(0);
        add(1);
        add(split.extra + 1 < p - 1 ? split.extra + 1 : -1);
        add(p - 1);
    }
    e.count = all ? p : e.n_cand;
    return e;
}

// Parameters of stage i's experts: DualPipe ranks hold two stages' experts (stage_memory
// counts the mirror stage); only MoE layers hold experts (moe2); plus the MTP modules'
// experts (mla).
double stage_expert_params(const LayoutDerived& L, int i, int layers) {
    const int p = L.p;
    double expert_params = (L.schedule == PipelineSchedule::dualpipe ? 2.0 : 1.0) * layers * L.layer_expert_params;
    if (L.stage_dense)  // moe2: only the MoE layers hold experts (DualPipe: and the mirror stage's)
        expert_params = (layers - L.stage_dense[i] +
                         (L.schedule == PipelineSchedule::dualpipe ? layers - L.stage_dense[p - 1 - i] : 0.0)) *
                        L.layer_expert_params;
    return expert_params + mtp_expert_params_on(L, i);  // mla: the MTP modules' experts
}

// Stage i for the detailed estimate.
StageEstimate stage_estimate(const ModelSpec& m, const StageEval& S, int i, int p, int layers, const StageTail& tail) {
    StageEstimate se;
    se.stage = i;
    se.layers = layers;
    se.has_embedding = i == 0 || (i == p - 1 && (m.tied_embeddings || m.mtp_layers > 0) && p > 1);  // mla: MTP's copy
    se.has_output = i == p - 1;
    se.in_flight = S.sm.in_flight;
    se.params_count = S.sm.params;
    se.mem = S.sm.mem;
    se.act_per_microbatch = S.sm.act_per_mb;
    se.fwd_s = S.fwd;
    se.bwd_s = S.bwd;
    se.recompute_s = S.recompute;
    se.tp_s = S.tp;
    se.cp_s = S.cp;
    se.ep_s = S.ep;
    se.p2p_s = S.p2p;
    se.dp_s = S.dp.grad_s + S.dp.param_s;
    se.tail = tail;
    return se;
}

// What the evaluated stages decide: the slowest stage per micro-batch (the breakdown's) and
// the fullest (the score's worst stage and memory).
struct StageExtremes {
    double worst_total = -1, t_mb_max = 0;
    // The slowest stage's times per micro-batch (only these: a whole StageEval per layout
    // would be copied for nothing on the planner's path).
    double fwd = 0, bwd = 0, recompute = 0, tp = 0, cp = 0, ep = 0, p2p = 0;
};

// Each evaluated stage's memory, block times, data-parallel traffic and tail (into `tails`
// and `stage_host`, indexed by stage), and its StageEstimate with `detail`.
StageExtremes evaluate_stages(const EstimateContext& ctx, const LayoutDerived& L, const LayerTime& lt,
                              const StageSplit& split, const EvaluatedStages& stages, ChunkKinds& kinds,
                              std::vector<StageTail>& tails, std::vector<double>& stage_host, LayoutScore& score,
                              Estimate* detail) {
    StageExtremes x;
    // pspeed3: a middle stage's DP traffic and tail follow from its parameters and block times
    // alone (only the pipeline's ends add the embedding group's all-reduce, and the engine's
    // tail reads the stage), so middle stages alike in those share the last one computed.
    struct {
        bool valid = false;
        double dense = 0, expert = 0, fwd = 0, bwd = 0;
        DpTraffic dp;
        StageTail tail;
    } middle;
    const bool engine_tail = L.profile_times || L.engine_device;
    const LayerActivation act = layer_activation(ctx, L);
    for (int k = 0; k < stages.count; ++k) {
        const int i = stages.stage(k);
        const int layers = split.stage_layers(i);
        StageEval S = evaluate_stage(ctx, L, lt, i, layers, kinds, act);

        // ZeRO buffers, fragmentation, DP traffic and the tail need the layout's stage.
        const double expert_params = stage_expert_params(L, i, layers);
        const double dense_params = S.sm.params - expert_params;
        stage_memory_finish(ctx, L, i, S.sm);
        const bool is_middle = i != 0 && i != L.p - 1 && !engine_tail;
        if (is_middle && middle.valid && middle.dense == dense_params && middle.expert == expert_params &&
            middle.fwd == S.fwd && middle.bwd == S.bwd) {
            S.dp = middle.dp;
            tails[(size_t)i] = middle.tail;
        } else {
            S.dp = dp_traffic(ctx, L, i, dense_params, expert_params);
            tails[(size_t)i] = engine_tail
                                   ? engine_stage_tail(L, i, dense_params, L.mbs * (S.fwd + S.bwd + S.recompute + S.tp))
                                   : stage_tail(ctx, L, S.dp, dense_params, expert_params, S.fwd, S.bwd);
            if (is_middle) {
                middle.valid = true;
                middle.dense = dense_params, middle.expert = expert_params, middle.fwd = S.fwd, middle.bwd = S.bwd;
                middle.dp = S.dp;
                middle.tail = tails[(size_t)i];
            }
        }
        const double t_mb = S.fwd + S.bwd + S.recompute + S.tp + S.cp + S.ep + S.p2p;
        stage_host[(size_t)i] = S.sm.mem.host;

        if (t_mb > x.t_mb_max) {
            x.t_mb_max = t_mb;
            x.fwd = S.fwd, x.bwd = S.bwd, x.recompute = S.recompute;
            x.tp = S.tp, x.cp = S.cp, x.ep = S.ep, x.p2p = S.p2p;
        }
        const double total = S.sm.mem.total();
        if (total > x.worst_total) {
            x.worst_total = total;
            score.worst_stage = i;
            score.worst_mem = S.sm.mem;
        }
        if (detail) detail->stages.push_back(stage_estimate(ctx.job.model, S, i, L.p, layers, tails[(size_t)i]));
    }
    return x;
}

}  // namespace

// Measured (docs/estimators.md, "Shared cores in the schedule"): on gpt2 TP2·PP2 (2 ranks a
// stage, 2 cores) a stage's block run alone took 0.44–0.50 × the same block beside the other
// stage, and its TP calls 0.25–0.42 ×; on tiny TP2·PP2·DP2 (4 ranks a stage, 2 cores) the
// step kept its pipeline bubble: predicted with shrinking TP calls 22–23% too fast.
bool stage_collectives_share_cores(double cores, double ranks_per_stage) { return ranks_per_stage <= cores; }

double core_shared_part(const BlockTime& b, bool collectives_share) {
    return b.compute + b.recompute + (collectives_share ? b.tp + b.cp + b.ep : 0.0);
}

namespace {

// The pipeline schedule's block durations of every chunk (PipelineDurations' arrays, per
// thread), and DualPipe's hidden communication per stage. Chunk times by kind (ChunkKinds,
// pspeed2): with v = 1 the stages above asked already. zb: ZB-H1 runs the backward as B
// then, later, W; DualPipe's pairs hide communication.
struct ChunkDurations {
    PipelineDurations pd;
    std::span<const double> hidden;
    double compute_sum = 0;  // planfw: every chunk's compute per micro-batch (fwd + bwd + recompute), all stages
};

// p2pdep: with overlap_p2p_comm a send runs beside the sender's next chunk (hide_p2p keeps
// only its SM cost in the block), but its receiver still waits for the bytes: the schedule's
// hop over each link (PipelineDurations::hop); none otherwise. Shared cores never arise with
// it (the bundled engine).
void schedule_hops(const LayoutDerived& L, std::vector<double>& hop) {
    if (L.overlap_p2p && L.share_cores <= 0) pipeline_link_hops(L, hop);
    else hop.clear();
}

ChunkDurations chunk_durations(const LayoutDerived& L, const LayerTime& lt, const StageSplit& split, bool all_stages,
                               ChunkKinds& kinds, Estimate* detail) {
    thread_local std::vector<double> fwd_d, bwd_d, wgt_d, hidden_d;
    thread_local std::vector<double> fwd_c, bwd_c, wgt_c;  // shared cores: each block's shared part
    thread_local CoreSharing sharing;
    const int p = L.p, v = L.v;
    const bool split_w = L.schedule == PipelineSchedule::zb_h1, dualpipe = L.schedule == PipelineSchedule::dualpipe;
    const bool shared = L.share_cores > 0 && !dualpipe;
    const bool collectives_share = shared && stage_collectives_share_cores(L.share_cores, L.share_ranks_per_stage);
    fwd_c.assign(shared ? (size_t)p * v : 0, 0.0);
    bwd_c.assign(shared ? (size_t)p * v : 0, 0.0);
    wgt_c.assign(shared && split_w ? (size_t)p * v : 0, 0.0);
    // The shared part of a chunk's blocks (core_shared_part): B without W when ZB-H1 splits
    // them (W is all compute).
    ProbedBusy busy;
    auto compute_parts = [&](size_t cell, const ChunkTime& ct) {
        if (!shared) return;
        busy.add(ct.fwd), busy.add(ct.bwd);
        fwd_c[cell] = core_shared_part(ct.fwd, collectives_share);
        bwd_c[cell] = core_shared_part(ct.bwd, collectives_share) - (split_w ? ct.bwd.wgrad : 0.0);
        if (split_w) wgt_c[cell] = ct.bwd.wgrad;
    };
    wgt_d.assign(split_w || dualpipe ? (size_t)p * v : 0, 0.0);
    hidden_d.assign(dualpipe ? (size_t)p : 0, 0.0);
    fwd_d.resize((size_t)p * v);
    bwd_d.resize((size_t)p * v);
    auto dense_of_stage = [&](int i) { return L.stage_dense ? L.stage_dense[(size_t)i] : 0.0; };
    double compute_sum = 0;  // planfw
    // pspeed2: a balanced split with one chunk per stage (the planner's common case) has runs
    // of equal stages, the same runs as the tails': one chunk kind per run, no detail.
    const bool by_runs = v == 1 && !all_stages;
    for (int i = 0; by_runs && i < p;) {
        const ChunkKinds::Kind& kind = kinds.get(L, lt, (double)split.stage_layers(i), i == 0, i == p - 1, dense_of_stage(i));
        const ChunkTime& ct = kind.time;
        const double wgrad = split_w || dualpipe ? ct.bwd.wgrad : 0.0;
        const double bwd = split_w || dualpipe ? kind.bwd_total - wgrad : kind.bwd_total;
        const double hidden = dualpipe ? std::min(ct.fwd.ep + ct.fwd.p2p + ct.bwd.ep + ct.bwd.p2p,
                                                  ct.fwd.compute + ct.bwd.compute + ct.bwd.recompute)
                                       : 0.0;
        const int run_end = split.run_end(i);
        compute_sum += (run_end - i) * (ct.fwd.compute + ct.bwd.compute + ct.bwd.recompute);  // planfw
        if (shared)
            for (int k = i; k < run_end; ++k) compute_parts((size_t)k, ct);
        // pspeed3: a run's stages take one value each: filled, not tested per stage.
        std::fill(fwd_d.begin() + i, fwd_d.begin() + run_end, kind.fwd_total);
        std::fill(bwd_d.begin() + i, bwd_d.begin() + run_end, bwd);
        if (split_w || dualpipe) std::fill(wgt_d.begin() + i, wgt_d.begin() + run_end, wgrad);
        if (dualpipe) std::fill(hidden_d.begin() + i, hidden_d.begin() + run_end, hidden);
        i = run_end;
    }
    for (int i = 0; i < p && !by_runs; ++i) {
        const int layers = split.stage_layers(i);
        for (int c = 0; c < v; ++c) {
            const ChunkKinds::Kind& kind = kinds.get(L, lt, split.chunk_layers(c, i, layers), i == 0 && c == 0,
                                                     i == p - 1 && c == v - 1,
                                                     L.chunk_dense ? L.chunk_dense[(size_t)(c * p + i)] : 0.0);
            const ChunkTime& ct = kind.time;
            compute_sum += ct.fwd.compute + ct.bwd.compute + ct.bwd.recompute;  // planfw
            compute_parts((size_t)(c * p + i), ct);
            fwd_d[(size_t)(c * p + i)] = kind.fwd_total;
            bwd_d[(size_t)(c * p + i)] = kind.bwd_total;
            if (split_w || dualpipe) {
                wgt_d[(size_t)(c * p + i)] = ct.bwd.wgrad;
                bwd_d[(size_t)(c * p + i)] -= ct.bwd.wgrad;
            }
            // DualPipe: in an F&B pair one direction's all-to-all and p2p run under the other's
            // computation, as far as that computation lasts.
            if (dualpipe)
                hidden_d[(size_t)i] = std::min(ct.fwd.ep + ct.fwd.p2p + ct.bwd.ep + ct.bwd.p2p,
                                               ct.fwd.compute + ct.bwd.compute + ct.bwd.recompute);
            if (detail) detail->stages[(size_t)i].chunks.push_back(ct);
        }
    }
    ChunkDurations d;
    d.pd.p = p, d.pd.v = v, d.pd.m = L.mbs, d.pd.fwd = fwd_d, d.pd.bwd = bwd_d;
    d.pd.schedule = L.schedule, d.pd.wgt = wgt_d;  // zb
    d.pd.group = L.v > 1 && L.mb_group != p ? L.mb_group : 0;  // l405: Megatron's N
    thread_local std::vector<double> hop_d;  // p2pdep
    schedule_hops(L, hop_d);
    d.pd.hop = hop_d;
    if (shared) {
        sharing = CoreSharing{.cores = L.share_cores, .ranks_per_stage = L.share_ranks_per_stage,
                              .measured_share = L.share_measured, .busy = busy.fraction(), .fwd_compute = fwd_c,
                              .bwd_compute = bwd_c, .wgt_compute = wgt_c};
        d.pd.sharing = &sharing;
    }
    d.hidden = hidden_d;
    d.compute_sum = compute_sum;
    return d;
}

// The tail: each stage's exposed gradient reduction from the end of its last backward;
// all stages meet (gradient-norm all-reduce for clipping); each runs its optimizer step
// and the exposed parameter gather. The step ends with the slowest.
// pspeed2: by runs of stages that share a tail, and the step's "after" over the evaluated
// stages only, which visit each tail once in the same order.
struct StepTail {
    double sync = 0, grad_exposed_max = 0;
    double after = 0, after_opt = 0, after_offload = 0;
};

StepTail step_tail(const StageSplit& split, const EvaluatedStages& stages, const std::vector<StageTail>& tails,
                   std::span<const double> stage_end, double pipeline) {
    // Locals, not the struct's members, in the loops: they stay in registers.
    const int p = split.p;
    double sync = pipeline, grad_exposed_max = 0;
    for (int i = 0; i < p;) {
        const double g = tails[(size_t)(stages.all ? i : split.representative(i))].grad_exposed_s;
        const int run_end = stages.all ? i + 1 : split.run_end(i);
        // pspeed3: the run shares g, so its latest stage end decides; four maxima side by
        // side keep the loop off one dependency chain (max is exact in any order).
        double e0 = stage_end[(size_t)i], e1 = e0, e2 = e0, e3 = e0;
        for (++i; i + 4 <= run_end; i += 4) {
            e0 = std::max(e0, stage_end[(size_t)i]), e1 = std::max(e1, stage_end[(size_t)i + 1]);
            e2 = std::max(e2, stage_end[(size_t)i + 2]), e3 = std::max(e3, stage_end[(size_t)i + 3]);
        }
        for (; i < run_end; ++i) e0 = std::max(e0, stage_end[(size_t)i]);
        sync = std::max(sync, std::max(std::max(e0, e1), std::max(e2, e3)) + g);
        grad_exposed_max = std::max(grad_exposed_max, g);
    }
    double after = 0, after_opt = 0, after_offload = 0;
    for (int k = 0; k < stages.count; ++k) {
        const StageTail& t = tails[(size_t)stages.stage(k)];
        if (t.optimizer_s + t.param_exposed_s + t.offload_s > after) {
            after = t.optimizer_s + t.param_exposed_s + t.offload_s;
            after_opt = t.optimizer_s;
            after_offload = t.offload_s;
        }
    }
    return StepTail{sync, grad_exposed_max, after, after_opt, after_offload};
}

// The breakdown: m micro-batches through the slowest stage, the rest of the schedule's
// makespan is bubble; after it the exposed DP time and the last stage's optimizer.
TimeBreakdown time_breakdown(const LayoutDerived& L, const StageExtremes& W, double pipeline, const StepTail& st,
                             double compute_sum) {
    TimeBreakdown tb;
    tb.compute = L.mbs * (W.fwd + W.bwd + W.recompute);
    tb.recompute = L.mbs * W.recompute;  // planfw: parts of compute, for the planner's why line
    tb.imbalance = L.p > 1 ? std::max(0.0, tb.compute - L.mbs * compute_sum / L.p) : 0.0;
    tb.tp_comm = L.mbs * W.tp;
    tb.cp_comm = L.mbs * W.cp;
    tb.ep_comm = L.mbs * W.ep;
    tb.pp_comm = L.mbs * W.p2p;
    // The makespan adds the same durations in another order (closed forms, simulation), so a
    // residue at rounding level is not a bubble (a single stage has none).
    const double idle = pipeline - L.mbs * W.t_mb_max;
    tb.bubble = idle > 1e-12 * pipeline ? idle : 0.0;
    // with shared cores the ranks computing while others wait run faster than the
    // probes (which timed every rank computing at once): the step's compute, and the
    // stage's own collectives where they share the cores (the blocks' shared parts), are
    // that less, each by its share.
    if (L.share_cores > 0 && idle < -1e-12 * pipeline) {
        const bool collectives = stage_collectives_share_cores(L.share_cores, L.share_ranks_per_stage);
        const double shared = tb.compute + (collectives ? tb.tp_comm + tb.cp_comm + tb.ep_comm : 0.0);
        const double keep = shared > 0 ? std::max(0.0, (shared + idle) / shared) : 1.0;
        tb.recompute *= keep, tb.imbalance *= keep;
        tb.compute *= keep;
        if (collectives) tb.tp_comm *= keep, tb.cp_comm *= keep, tb.ep_comm *= keep;
    }
    tb.optimizer = st.after_opt;
    tb.offload = st.after_offload;
    tb.dp_comm = (st.sync - pipeline) + (st.after - st.after_opt - st.after_offload);  // both ≥ 0
    return tb;
}

// The whole-layout figures of the detailed estimate.
void fill_detail(const EstimateContext& ctx, const LayoutDerived& L, const LayoutScore& score, const FlopsEstimate& fl,
                 double capacity, double pipeline, const StepTail& st, std::span<const double> stage_end, int world,
                 Estimate& detail) {
    detail.worst_stage = score.worst_stage;
    detail.capacity_bytes = capacity;
    detail.usable_bytes = score.usable_bytes;
    detail.fits = score.fits;
    detail.host_bytes_per_node = score.host_bytes_per_node;  // offload
    detail.host_capacity_bytes = score.host_capacity_bytes;
    detail.host_fits = L.host_capacity_bytes <= 0 || score.host_bytes_per_node <= L.host_capacity_bytes;
    detail.pcie_gbps = L.pcie / 1e9;
    detail.micro_batches = L.mbs;
    detail.vocab_padded = L.vocab;
    detail.flops = fl;
    detail.time = score.time;
    detail.pipeline_s = pipeline;
    schedule_hops(L, detail.pipeline_hops_s);  // p2pdep
    detail.tail_sync_s = st.sync;
    if (L.share_cores > 0 && L.schedule != PipelineSchedule::dualpipe) {
        detail.share_cores = L.share_cores;
        detail.share_measured = L.share_measured;
        detail.share_ranks_per_stage = L.share_ranks_per_stage;
    }
    for (int i = 0; i < L.p; ++i) detail.stages[(size_t)i].pipeline_end_s = stage_end[(size_t)i];
    detail.step_s = score.step_s;
    detail.tokens_per_s = score.tokens_per_s;
    detail.model_tflops_per_gpu = score.tokens_per_s * fl.model_per_token / world / 1e12;
    detail.hardware_tflops_per_gpu = score.tokens_per_s * fl.hardware_per_token / world / 1e12;
    detail.peak_tflops = L.peak / 1e12;
    detail.mfu = score.mfu;
    detail.hfu = score.hfu;
    detail.params = ctx.params;
    // A TP group wider than an NVLink domain runs its per-layer collectives over the NICs:
    // the layout's most expensive choice, which the rank layout shows but the step alone hides.
    if (L.net_tp.nodes > 1) {
        const ClusterSpec& cl = ctx.job.cluster;
        const bool domains = cl.job_nvlink_domain() > cl.gpus_per_node;
        char buf[400];
        std::snprintf(buf, sizeof buf,
                      "each TP group of %d spans %d %s (%d GPUs each): its per-layer %s "
                      "cross the NICs at %.0f GB/s per GPU instead of NVLink's %.0f (TP comm %.3f s, %.1f%% of the step); "
                      "tp ≤ %d keeps them inside one",
                      L.net_tp.n, L.net_tp.nodes, domains ? "NVLink domains" : "nodes", L.net_tp.per_node,
                      L.sp ? "all-gathers and reduce-scatters" : "all-reduces", cl.inter_gbps,
                      cl.intra_gbps > 0 ? cl.intra_gbps : cl.gpu.link_gbps, score.time.tp_comm,
                      score.step_s > 0 ? 100.0 * score.time.tp_comm / score.step_s : 0.0, std::max(cl.job_nvlink_domain(), 1));
        detail.notes.push_back(buf);
    }
}

}  // namespace

// One layout, step by step: split the layers over the stages, place the dense layers,
// evaluate the stages that can be the worst, place every chunk's blocks with the pipeline
// schedule, add the tail, and score (docs/estimators.md).
LayoutScore evaluate_layout(const EstimateContext& ctx, const LayoutChoice& ch, const std::vector<int>& layers_per_stage_given,
                            Estimate* detail, StepBounds* bounds) {
    assert(!(detail && bounds));
    const JobSpec& job = ctx.job;
    const ModelSpec& m = job.model;
    const EstimateSpec& es = job.estimate;
    LayoutDerived L = derive(ctx, ch);
    const LayerTime lt = layer_forward_time(L);
    const int p = L.p;
    const StageSplit split = split_layers(job, L, layers_per_stage_given);
    const DenseLayers dense = place_dense_layers(L, split);
    // An explicit list that is the balanced split (as the planner passes when pp does not
    // divide the layers) keeps the shortcut; any other list evaluates every stage.
    const EvaluatedStages stages =
        pick_stages(split, detail != nullptr || !split.balanced() || dense.beyond_first_stage);  // moe2: dense layers past stage 0

    const double capacity = job.cluster.gpu.memory_gib * kGiB;
    const double usable = capacity * (1.0 - es.headroom);
    LayoutScore score;
    score.usable_bytes = usable;
    // Per stage: the tail after its last backward (filled for the evaluated stages, then
    // read through the stage that stands for each run), and the end of its last block.
    thread_local std::vector<StageTail> tails;
    thread_local std::vector<double> stage_end;
    thread_local std::vector<double> stage_host;  // offload: host bytes per GPU of each stage
    // pspeed: sized, not filled: every entry read below is written first.
    tails.resize((size_t)p);
    stage_host.assign((size_t)p, 0.0);
    stage_end.resize((size_t)p);
    if (detail) {
        detail->stages.clear();
        detail->stages.reserve((size_t)p);
    }
    ChunkKinds kinds;  // pspeed2: block times by kind of chunk, shared with the schedule below
    kinds.lt_dense = dense.layer_time;  // moe2
    const StageExtremes x = evaluate_stages(ctx, L, lt, split, stages, kinds, tails, stage_host, score, detail);
    // Stages not evaluated (the balanced-split shortcut) hold what their run's stage holds.
    if (!stages.all && (L.offload_optimizer || L.offload_params))
        for (int i = 0; i < p; ++i) stage_host[(size_t)i] = stage_host[(size_t)split.representative(i)];

    // The pipeline schedule: every chunk's forward and backward block, placed by the
    // schedule simulation (timeline.h). Its makespan replaces a closed form, which is exact
    // only when all stages take equally long.
    const ChunkDurations cd = chunk_durations(L, lt, split, stages.all, kinds, detail);
    // Screening: stage_end holds each stage's floor, so sync and step below are lower bounds.
    // DualPipe's closed form is as cheap as its bounds: exact either way.
    const bool dualpipe = L.schedule == PipelineSchedule::dualpipe;
    const double pipeline = dualpipe ? dualpipe_makespan(cd.pd, cd.hidden, stage_end)
                          : bounds   ? pipeline_makespan_lower(cd.pd, stage_end)
                                     : pipeline_makespan(cd.pd, stage_end);
    const StepTail st = step_tail(split, stages, tails, stage_end, pipeline);
    const double step = st.sync + st.after;
    if (bounds) {
        // Every stage ends by the pipeline's upper bound, its gradient reduction after it.
        bounds->lo_s = step;
        bounds->hi_s = dualpipe          ? step
                     : bounds->want_hi ? std::max(step, pipeline_makespan_upper(cd.pd) + st.grad_exposed_max + st.after)
                                       : std::numeric_limits<double>::infinity();
    }

    const int world = L.world();
    const double tokens = (double)job.training.global_batch * m.seq_len;
    const FlopsEstimate fl = flops_per_token(  // recmod: Megatron's recompute_modules
        m, ch.recompute, job.parallel.recompute_style == RecomputeStyle::megatron ? job.parallel.recompute_modules : kRecomputeCoreAttn,
        es.attention_flops, L.vocab);
    score.peak_bytes = x.worst_total;
    score.fits = x.worst_total <= usable;
    // offload: the node's host RAM holds what its GPUs offloaded; a layout that does not fit
    // there does not fit.
    if (L.offload_optimizer || L.offload_params) {
        score.host_bytes_per_node = host_bytes_per_node(L, layout_choice_order(ctx, ch), stage_host);
        score.host_capacity_bytes = L.host_capacity_bytes;
        if (L.host_capacity_bytes > 0 && score.host_bytes_per_node > L.host_capacity_bytes) score.fits = false;
    }
    score.step_s = step;
    score.tokens_per_s = step > 0 ? tokens / step : 0;
    score.mfu = score.tokens_per_s * fl.model_per_token / (world * L.peak);
    score.hfu = score.tokens_per_s * fl.hardware_per_token / (world * L.peak);
    score.time = time_breakdown(L, x, pipeline, st, cd.compute_sum);
    if (detail) fill_detail(ctx, L, score, fl, capacity, pipeline, st, stage_end, world, *detail);
    return score;
}

SpeedInterval score_speed_interval(const JobSpec& job, const LayoutScore& s) {
    return job_speed_interval(job, SpeedPoint{s.step_s, s.tokens_per_s, 0, 0, s.mfu, s.hfu});
}

std::string profile_unused_reason(const JobSpec& job) {
    if (job.estimate.activation_profile == ActivationProfile::ptd_engine) return "";
    return "the time model takes a profile's figures for jobs the bundled engine runs (estimate.activation_profile = "
           "\"ptd-engine\"); this job's framework keeps the preset's";
}

// A profile's error band: the step again with every op at the fast end of what was measured
// (each probe's mean at the 10th percentile of its standard error, then the 10th percentile
// over the ranks that probed it) and at the slow end (90th, 90th). The probes' uncertainty
// and their spread over ranks is what the profile knows of itself. On CPU hosts the model's
// own error is added in quadrature: the closed loop's jobs, each predicted from a fresh
// profile and then launched, land 10–20% from the measured step while the probes' band is
// often under 1% (docs/estimators.md, "Error bars"). On GPUs no closed loop has run, and
// the output says the band is the probes' alone.
ErrorBand profile_error_band(const JobSpec& job, const ClusterProfile& profile, const LayoutChoice& choice,
                             const std::vector<int>& layers_per_stage, double step_s) {
    auto step_at = [&](double q) {
        EstimateContext ctx = make_estimate_context(job, nullptr);
        ctx.profile = &profile;
        ctx.profile_times = std::make_shared<const ProfileTimes>(make_profile_times(profile, q));
        return evaluate_layout(ctx, choice, layers_per_stage, nullptr).step_s;
    };
    const double fast = step_at(0.1), slow = step_at(0.9);
    ErrorBand b;
    b.source = IntervalSource::cluster_profile;
    // actual in [fast, slow] ⇔ e = predicted / actual − 1 in [predicted/slow − 1, predicted/fast − 1].
    b.error_lo = slow > 0 ? std::min(0.0, step_s / slow - 1) : 0;
    b.error_hi = fast > 0 ? std::max(0.0, step_s / fast - 1) : 0;
    b.confidence = 0.8;
    int ranks = 0;
    for (const ProfileHost& h : profile.hosts) ranks += h.ranks;
    b.runs = ranks;
    b.runs_of = "the spread of the cluster profile's probes over its " + std::to_string(ranks) + " rank(s) on " +
                std::to_string(profile.hosts.size()) + " host(s) (each op's mean at the 10th and 90th percentile of its standard error and of its ranks)";
    const bool cpu_hosts = std::all_of(profile.hosts.begin(), profile.hosts.end(), [](const ProfileHost& h) { return h.gpu.empty(); });
    const ErrorBand model = closed_loop_residuals().band();
    if (!cpu_hosts || model.runs == 0) {
        b.runs_of += "; the model's own error on these hosts is not measured (bench/closed_loop.sh runs on CPUs only)";
        return b;
    }
    ErrorBand c = combined_band(b, model);
    char both[96];
    std::snprintf(both, sizeof both, "%+.1f%% … %+.1f%%", 100 * model.error_lo, 100 * model.error_hi);
    c.runs_of += ", and the model's own error, " + std::string(both) + " over " + model.runs_of + ", added in quadrature";
    return c;
}

Estimate estimate_job(const JobSpec& job, const ClusterProfile* profile) {
    EstimateContext ctx = make_estimate_context(job, profile);
    Estimate est;
    LayoutChoice ch = layout_choice_of(job);
    evaluate_layout(ctx, ch, job.parallel.layers_per_stage, &est);
    const SpeedPoint point{est.step_s, est.tokens_per_s, est.model_tflops_per_gpu, est.hardware_tflops_per_gpu, est.mfu, est.hfu};
    est.time_from_profile = ctx.profile_times && profile_unused_reason(job).empty();
    if (profile && !est.time_from_profile) est.time_source_why = profile_unused_reason(job);
    if (est.time_from_profile && profile->precision != to_string(job.training.precision))
        est.notes.push_back("the cluster profile was measured in " + profile->precision + ", this job trains in " +
                            to_string(job.training.precision) + ": its GEMMs and kernels are timed at the profile's dtype "
                            "(calibrate with this job for its own)");
    est.speed = est.time_from_profile ? speed_interval(profile_error_band(job, *profile, layout_choice_of(job), job.parallel.layers_per_stage, est.step_s), point)
                                      : job_speed_interval(job, point);
    // The memory peak's error bars: bench_memory's runs of the job's generation and model kind.
    if (!est.stages.empty())
        est.memory_interval = job_memory_interval(job, est.stages[(size_t)est.worst_stage].mem.total(), est.usable_bytes);
    const ModelSpec& m = job.model;
    const int t = job.parallel.tp;
    if (m.kv_heads > 0 && t > m.kv_heads)
        est.notes.push_back("tp " + std::to_string(t) + " > kv_heads " + std::to_string(m.kv_heads) +
                            ": each rank holds a replica of one KV head (K/V projections replicated " +
                            std::to_string(t / m.kv_heads) + "×)");
    // mbrecipe: a performance recipe's settings apply to the job as written, whatever its layout.
    if (const std::vector<std::string> diff = perf_recipe_differences(job); !diff.empty()) {
        std::string list;
        for (const std::string& d : diff) list += (list.empty() ? "" : ", ") + d;
        est.notes.push_back("training.recipe \"" + job.training.recipe + "\" ran another job; this one differs in " + list +
                            ": the recipe's MoE, CUDA-graph and overlap settings are applied as the recipe states them "
                            "(write a key to keep the job's own)");
    }
    if (const PerfRecipe* r = suggested_perf_recipe(job)) {
        std::string graphs = to_string(r->graphs);
        for (const std::string& w : cuda_graph_scope_words(r->graph_scope)) graphs += " " + w;
        est.notes.push_back(std::string("Megatron-Bridge runs ") + job.origin.model_preset + " on " + std::to_string(r->gpus) +
                            " " + r->gpu + " with its performance recipe \"" + r->name + "\" (perf_recipes/" + r->file +
                            "): the " + to_string(r->dispatcher) + " dispatcher, EP overlap " +
                            (r->a2a_overlap ? "on" : "off") + ", CUDA graphs " + graphs +
                            (r->pad_to_capacity ? ", static expert capacity" : "") +
                            "; this job names no recipe, so the MoE keys it leaves unwritten keep the plain defaults (all-to-all, no overlap, no CUDA "
                            "graphs): write training.recipe = \"" + r->name + "\" to run as the recipe does");
    }
    if (job.origin.network_generic && job.cluster.gpu.link != GpuLink::loopback)
        est.notes.push_back("the network is GENERIC: no cluster preset describes nodes of gpu \"" + job.cluster.gpu.name +
                            "\", so one NIC per GPU at " + std::to_string((long long)std::lround(job.cluster.inter_gbps * 8)) +
                            " Gb/s is assumed; name cluster.preset, or set cluster.nics_per_node and cluster.nic_gbps "
                            "to what the nodes have (docs/presets.md)");
    if ((double)est.vocab_padded != (double)m.vocab)
        est.notes.push_back("vocab padded from " + std::to_string(m.vocab) + " to " +
                            std::to_string((long long)est.vocab_padded) + " (multiple of vocab_pad · tp = " +
                            std::to_string(job.estimate.vocab_pad) + " · " + std::to_string(t) + ")");
    // flashlen: past the lengths flash_eff was fitted at, on a kernel whose rate by length is not
    // measured, the attention core's rate is a guess, and the published runs this long miss the
    // estimate both ways (docs/accuracy.md, "Long sequences"): say so, and whether the speed
    // interval is theirs (a [[long_sequence]] row of the job's generation) or every length's.
    if (job.training.flash_attention && m.seq_len >= kLongSequenceTokens && est::causal_flash_half_rate_tokens(job) == 0) {
        const bool long_band = est.speed.known && est.speed.band.long_sequence;
        est.notes.push_back("attention over " + std::to_string(m.seq_len) + " tokens: the flash kernel runs at the rate "
                            "fitted on 2K–8K sequences, its rate by length being measured for cuDNN on Blackwell only; "
                            "published runs this long land on both sides of this model (its step too long for NeMo's "
                            "H100 long-sequence table, too short for torchtitan's context-parallel one: docs/accuracy.md, "
                            "\"Long sequences\"), " +
                            (long_band ? std::string("so the speed interval is theirs")
                                       : "and none ran on " + std::string(to_string(job.cluster.gpu.generation)) +
                                             " GPUs: the speed interval is that of every length"));
    }
    if (job.estimate.activation_profile == ActivationProfile::megatron && m.dropout_on())
        est.notes.push_back(m.dropout ? "model.dropout = true: dropout masks counted (1 byte per element)"
                                      : "gpt arch: dropout masks counted (1 byte per element), as in Megatron-LM's GPT "
                                        "configs (model.dropout = false: none)");
    if (const TrainingSpec& tr = job.training; tr.main_params_dtype != StateDtype::fp32 ||
                                               tr.exp_avg_dtype != StateDtype::fp32 || tr.exp_avg_sq_dtype != StateDtype::fp32)
        est.notes.push_back(std::string("optimizer states (oom4): master weights ") + to_string(tr.main_params_dtype) +
                            ", exp_avg " + to_string(tr.exp_avg_dtype) + ", exp_avg_sq " + to_string(tr.exp_avg_sq_dtype) +
                            " (fp32 each by default)");
    // menorm: the activation count assumes norms that keep their output; say so, since stock
    // Transformer Engine / PyTorch norms keep their input.
    if (job.estimate.memory_efficient_norm && job.estimate.activation_profile == ActivationProfile::megatron)
        est.notes.push_back("estimate.memory_efficient_norm: the norms keep their output for backward, not their input "
                            "(Apex memory_efficient=True; Megatron-LM --memory-efficient-layer-norm, LayerNorm with "
                            "--transformer-impl local): each layer saves two h-wide tensors per token fewer than with stock "
                            "norms (the norms' inputs, the residual stream; sharded over tp under SP)");
    // Llama 3 §3.3.2: say what the count assumes, since Megatron-core and torch's pipelining keep
    // each in-flight chunk's input for its first layer's backward.
    if (job.estimate.deallocate_pipeline_inputs && job.estimate.activation_profile == ActivationProfile::megatron &&
        job.parallel.pp > 1)
        est.notes.push_back("estimate.deallocate_pipeline_inputs: each pipeline chunk's received input is freed after "
                            "its forward (Llama 3 paper Sec. 3.3.2), so an in-flight chunk does not hold it for its first "
                            "layer's norm: one h-wide tensor per token (sharded over tp under SP) fewer per in-flight chunk "
                            "with a received input; no Megatron-LM or torchtitan option does this");
    // hostov: the host's enqueue time of one layer and what of it the GPU waits for (host.cpp).
    if (runs_megatron_core(job.training.framework) && !ctx.cpu_device) {
        LayoutDerived L = derive(ctx, ch);
        const LayerTime lt = layer_forward_time(L);
        const HostLayerTime h = host_layer_time(L);
        const ChunkTime with = block_time(L, lt, 1, false, false);
        L.host_model = false;
        const ChunkTime without = block_time(L, lt, 1, false, false);
        const double wait_f = with.fwd.compute - without.fwd.compute, wait_b = with.bwd.compute - without.bwd.compute;
        const ParallelSpec& pa = job.parallel;
        if (wait_f + wait_b > 0 || pa.cuda_graph_impl != CudaGraphImpl::none || pa.moe_pad_to_capacity) {
            char buf[512];
            std::snprintf(buf, sizeof buf,
                          "host (hostov): one %s layer's ops take the host %.0f µs forward / %.0f µs backward per "
                          "micro-batch at %.2f µs per eager op (%s)%s; %s",
                          m.experts > 1 ? "MoE" : "dense", h.fwd * 1e6, h.bwd * 1e6,
                          L.host_op_s * 1e6,
                          job.cluster.host_op_us > 0 ? "cluster.host_op_us or cluster preset" : "DGX H100 host assumed",
                          pa.cuda_graph_impl == CudaGraphImpl::none
                              ? ", no CUDA graphs"
                              : (", CUDA graphs " + std::string(to_string(pa.cuda_graph_impl)) +
                                 (pa.cuda_graph_scope ? "" : " (whole layer)"))
                                    .c_str(),
                          wait_f + wait_b > 0
                              ? ("host-bound: the GPU waits " + std::to_string((int)std::lround((wait_f + wait_b) * 1e6)) +
                                 " µs per layer and micro-batch" +
                                 (L.moe && L.moe_host_sync ? " (the MoE dispatcher syncs the host every layer)" : ""))
                                    .c_str()
                              : "the GPU work hides it");
            est.notes.push_back(buf);
        }
    }
    // moe2: what the MoE-side keys make of the layers and of the expert groups.
    if (const ParallelSpec& pa = job.parallel; m.experts > 1 && (m.moe_ffn_hidden > 0 || m.shared_expert_ffn_hidden > 0 ||
                                                                  m.first_dense_layers > 0 || pa.etp() != pa.tp)) {
        std::string s = "MoE: " + std::to_string(m.experts) + " routed experts of " + std::to_string(m.expert_ffn_hidden()) +
                        " (top-" + std::to_string(m.top_k) + ")";
        if (m.shared_expert_ffn_hidden > 0)
            s += " + shared experts of " + std::to_string(m.shared_expert_ffn_hidden) + " on every token" +
                 (pa.moe_shared_expert_overlap ? " (overlapped with the all-to-all)" : "");
        if (m.first_dense_layers > 0)
            s += "; the first " + std::to_string(m.first_dense_layers) + " layers dense (MLP of " +
                 std::to_string(m.ffn_hidden) + ")";
        if (pa.etp() != pa.tp) {
            const long long block = (long long)pa.tp * pa.cp * pa.dp;
            s += "; expert_tp " + std::to_string(pa.etp()) + " ≠ tp " + std::to_string(pa.tp) +
                 " (MoE parallel folding): EP groups of " + std::to_string(pa.ep) + " ranks " + std::to_string(pa.etp()) +
                 " apart, expert states sharded over expert-DP " + std::to_string(block / ((long long)pa.etp() * pa.ep));
        }
        est.notes.push_back(s);
    }
    // deepep: what the dispatcher backend and the all-to-all overlap did to the EP time.
    if (const ParallelSpec& pa = job.parallel;
        m.experts > 1 && pa.ep > 1 && (pa.moe_dispatcher != MoeDispatcher::alltoall || pa.moe_a2a_overlap)) {
        const LayoutDerived D = derive(ctx, ch);
        char buf[160];
        std::string s = "EP all-to-all (deepep):";
        if (pa.moe_dispatcher != MoeDispatcher::alltoall) {
            s += pa.moe_dispatcher == MoeDispatcher::deepep ? " DeepEP" : " HybridEP";
            if (D.net_ep.nodes > 1) {
                std::snprintf(buf, sizeof buf,
                              " sends a token once per remote node holding its experts: %.2f remote nodes on average (the "
                              "EP group spans %d), vs %.2f remote copies for the all-to-all",
                              D.ep_remote_nodes, D.net_ep.nodes,
                              (double)m.top_k * (D.net_ep.n - D.net_ep.per_node) / D.net_ep.n);
                s += buf;
            } else {
                s += " inside one NVLink domain: the same traffic as the all-to-all";
            }
        }
        if (pa.moe_a2a_overlap) {
            if (D.a2a_paired > 0) {
                std::snprintf(buf, sizeof buf, "%s%.0f%% of the blocks run their dispatch / combine beside another "
                                               "micro-batch's compute (combined 1F1B)",
                              pa.moe_dispatcher != MoeDispatcher::alltoall ? "; " : " ", 100.0 * D.a2a_paired);
                s += buf;
            } else {
                s += " overlap off for this layout (it needs vpp with pp > 1 and no full recompute)";
            }
        }
        est.notes.push_back(s);
    }
    // p2pdep: what the asynchronous pipeline sends leave on the schedule.
    if (!est.pipeline_hops_s.empty()) {
        const auto [lo, hi] = std::minmax_element(est.pipeline_hops_s.begin(), est.pipeline_hops_s.end());
        const long long slow = std::count(est.pipeline_hops_s.begin(), est.pipeline_hops_s.end(), *hi);
        char links[160];
        if (*lo < *hi)
            std::snprintf(links, sizeof links, "%.0f µs over the %lld of %zu links that leave a node, %.0f µs over NVLink",
                          *hi * 1e6, slow, est.pipeline_hops_s.size(), *lo * 1e6);
        else
            std::snprintf(links, sizeof links, "%.0f µs per hop", *hi * 1e6);
        char buf[400];
        std::snprintf(buf, sizeof buf,
                      "pipeline sends (p2pdep): overlap_p2p_comm sends each chunk's output beside the next chunk's "
                      "compute, but the receiving stage waits for it: %s; paid in the warm-up and cool-down through "
                      "the %d chunks, where no other block covers it",
                      links, job.parallel.pp * std::max(1, job.parallel.vpp));
        est.notes.push_back(buf);
    }
    if (job.parallel.recompute == Recompute::full)
        est.notes.push_back("full recompute: activations include one layer recomputed during backward");
    // ttfsdp: a torchtitan zero 2 / 3 under pipelining is not ZeRO's per-micro-batch sharding.
    if (const Sharding sh = effective_sharding(job.training.framework, job.parallel.pp, job.parallel.zero,
                                               job.parallel.distributed_optimizer);
        sh.zero != job.parallel.zero && job.parallel.dp * std::max(1, job.parallel.cp) > 1)
        est.notes.push_back("zero " + std::to_string(job.parallel.zero) + " with pp " + std::to_string(job.parallel.pp) +
                            " on torchtitan: FSDP2 under torch.distributed.pipelining keeps the parameters gathered "
                            "through the step and reduce-scatters the whole fp32 gradients once, after the last "
                            "micro-batch (estimated as the distributed optimizer: whole weights and gradients, "
                            "sharded fp32 master and Adam states)");
    // hsdp: where the states shard and what crosses the replicas.
    if (const int r = job.parallel.dp_replicate; r > 1) {
        const long long group = (long long)job.parallel.dp * std::max(1, job.parallel.cp) / r;
        const Framework fw = job.training.framework;
        const char* form = runs_megatron_core(fw)          ? "Megatron-core's distributed optimizer instances"
                           : fw == Framework::deepspeed     ? "DeepSpeed MiCS"
                           : fw == Framework::torchtitan    ? "torchtitan's HSDP (FSDP2 with a replicate dim)"
                                                            : "PyTorch FSDP's hybrid sharding";
        est.notes.push_back("dp_replicate " + std::to_string(r) + " (" + form + "): the model states shard over " +
                            std::to_string(group) + " ranks (dp·cp / " + std::to_string(r) +
                            "), each gradient shard is all-reduced across the " + std::to_string(r) +
                            " replicas after its reduce-scatter; the parameter gathers stay inside the sharding group");
    }
    // mla: what MLA and MTP change, where a reader would not guess it.
    if (m.mla())
        est.notes.push_back("multi-head latent attention: the q / kv down projections are replicated on every TP rank "
                            "(Megatron-core TELinear \"duplicated\"); the attention's entry TP collective carries the "
                            "latents (" + std::to_string(m.q_lora_rank > 0 ? m.q_lora_rank : m.hidden) + " + " +
                            std::to_string(m.kv_lora_rank) + " + " + std::to_string(m.qk_rope_head_dim) + " wide), not hidden");
    if (m.mtp_layers > 0) {
        char mtp_b[32];
        std::snprintf(mtp_b, sizeof mtp_b, "%.2fB", (double)est.params.mtp / 1e9);
        est.notes.push_back("mtp_layers " + std::to_string(m.mtp_layers) + ": the last stage runs the MTP module(s) (a "
                            "transformer layer, eh_proj, another output-layer pass and loss each) and holds their " +
                            mtp_b + " parameters (not in the model's total)" +
                            (job.parallel.pp > 1 && !m.tied_embeddings ? " and a copy of the word embedding" : "") +
                            "; model FLOPs count them, as Megatron-LM's do");
    }
    if (job.parallel.recompute == Recompute::selective && (job.parallel.recompute_modules == kRecomputeCoreAttn ||
                                                           job.parallel.recompute_style != RecomputeStyle::megatron))
        est.notes.push_back("selective recompute: the attention core is recomputed during backward (its scores are not kept)");
    else if (job.parallel.recompute == Recompute::selective) {  // recmod: Megatron-core's module list
        std::string words;
        for (const std::string& w : recompute_module_words(job.parallel.recompute_modules)) words += (words.empty() ? "" : ", ") + w;
        est.notes.push_back("selective recompute of Megatron-core modules " + words +
                            ": their saved tensors are not kept and their forward (with its collectives) runs again during "
                            "backward; hardware FLOPs count it, model FLOPs do not");
    }
    if (job.estimate.activation_profile == ActivationProfile::ptd_engine)
        est.notes.push_back(job.training.flash_attention
                                ? "activation profile ptd-engine: the bundled engine's own buffers (flash attention: an fp32 log-sum-exp per query row instead of the s×s probabilities; 16-bit activations in bf16/fp16, fp32 norm statistics and logits)"
                                : "activation profile ptd-engine: the bundled engine's own buffers (no flash attention; 16-bit activations in bf16/fp16, fp32 norm statistics and logits)");
    if (job.estimate.activation_profile == ActivationProfile::ptd_engine && !ctx.cpu_device && !ctx.profile_times)
        est.notes.push_back("time model ptd-engine on " + job.cluster.gpu.name +
                            ": the engine's own kernels op by op from the GPU preset (cuBLASLt GEMMs at the generation's "
                            "GEMM efficiency, " + std::string(job.training.flash_attention ? "flash attention" : "materialised attention") +
                            ", element-wise kernels at HBM bandwidth, NCCL collectives), not a framework's");
    if (ctx.cpu_device) est.notes.push_back("cpu device: no CUDA context or NCCL buffers counted");
    if (const GpuGeneration gen = job.cluster.gpu.generation;
        gen != GpuGeneration::cpu && !time_model_constants().calibrated(gen)) {
        // No published run of this GPU generation is in the calibration set (docs/accuracy.md):
        // say so, with the ceiling it gets instead.
        char eff[16];
        std::snprintf(eff, sizeof eff, "%.2f", time_model_constants().kernel(gen).gemm_eff_max);
        est.notes.push_back(std::string("no published run calibrates ") + to_string(gen) +
                            " GPUs: GEMMs reach at most " + eff +
                            " of peak (the mean of the calibrated generations); step time and MFU are less certain");
    }
    if (const TrainingSpec& tr = job.training; tr.fp8 != Fp8Recipe::none) {
        // fp8 (issue 15 point 3): say which GEMMs the FP8 peak applies to and what it costs.
        const bool te = tr.fp8 == Fp8Recipe::delayed || tr.fp8 == Fp8Recipe::current || tr.fp8 == Fp8Recipe::mxfp8;
        char peak[64], rate[32];
        std::snprintf(peak, sizeof peak, "%.0f", job.cluster.gpu.fp8_tflops);
        // fp8eff: the reduction length grows with the math rate (compute.cpp fp8_reduction_factor).
        std::snprintf(rate, sizeof rate, "%.3g", job.cluster.gpu.fp8_tflops / std::max(job.cluster.gpu.peak_tflops(tr.precision), 1e-9));
        est.notes.push_back(std::string("fp8 \"") + to_string(tr.fp8) + "\" (" + to_string(tr.fp8_format) +
                            "): the linear layers' GEMMs run at the FP8 peak (" + peak +
                            " TFLOP/s; an FP8 GEMM needs " + rate + "× bf16's reduction length for the same efficiency)"
                            " plus memory-bound quantization passes; attention core, output layer" +
                            (m.experts > 1 ? ", router" : "") + " and embedding stay bf16; MFU/HFU are against the bf16 peak");
        // fp8acc: Hopper's backward FP8 GEMMs run with the split accumulator (compute.cpp).
        if (const double accum = est::fp8_split_accum_factor(job.cluster.gpu.generation); accum > 1.0) {
            char f[32];
            std::snprintf(f, sizeof f, "%.2f", accum);
            est.notes.push_back(std::string("fp8: data- and weight-gradient GEMMs use the split accumulator (fp32 "
                                            "promotion), about 1.15× the fast-accumulation forward on this GPU: FP8 "
                                            "linear GEMMs take ") + f + "× (docs/estimators.md, FP8 training)");
        }
        if (te)
            est.notes.push_back(std::string("fp8 (Transformer Engine): params include the cached FP8 weights ") +
                                (est::fp8_single_copy(tr.fp8, job.cluster.gpu.generation)
                                     ? "(one copy both GEMM layouts read on this GPU, 1 byte per linear weight)"
                                     : "(rowwise + transposed, 2 bytes per linear weight)") +
                                std::string(tr.fp8 == Fp8Recipe::delayed ? " and the amax history" : "") +
                                "; linear inputs are saved for backward in FP8 (1 byte)");
        else
            est.notes.push_back("fp8 (torchao): weights are cast every micro-batch, nothing cached; bf16 inputs are saved "
                                "and cast again in backward");
        if (tr.fp8_bf16_first_layers + tr.fp8_bf16_last_layers > 0)
            est.notes.push_back("fp8: the first " + std::to_string(tr.fp8_bf16_first_layers) + " and last " +
                                std::to_string(tr.fp8_bf16_last_layers) + " transformer layers run in bf16");
    }
    if (ch.offload_optimizer != OffloadDevice::none || ch.offload_params) {
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      "offload: %.1f GiB of host memory per node (%s), %.0f GB/s host<->GPU per GPU%s, CPU optimizer "
                      "at %.1f B params/s per node (DeepSpeed CPU-Adam; %s)",
                      est.host_bytes_per_node / kGiB,
                      est.host_capacity_bytes > 0 ? (est.host_fits ? "fits the node's RAM" : "MORE than the node's RAM")
                                                  : "host RAM unknown: not checked",
                      est.pcie_gbps, job.cluster.pcie_gbps > 0 ? " (cluster.pcie_gbps)" : " (default for the GPU)",
                      cpu_adam_params_per_s(job.cluster) / 1e9,
                      job.cluster.cpu_adam_params_per_s > 0
                          ? (job.origin.cluster_preset.empty() ? "cluster.cpu_adam_params_per_s or the GPU's default cluster preset"
                                                               : "cluster.cpu_adam_params_per_s or cluster preset")
                          : "host CPU unknown: an H100-era x86 node assumed, set cluster.cpu_adam_params_per_s");
        est.notes.push_back(buf);
    }
    // dsthru: what DeepSpeed's pipeline engine adds to the step.
    if (job.training.framework == Framework::deepspeed && job.parallel.pp > 1)
        est.notes.push_back(std::string("deepspeed pipeline engine: gradients accumulate outside the GEMMs after every "
                                        "micro-batch's backward (") +
                            (job.training.precision == Precision::bf16
                                 ? "BF16_Optimizer: 26 bytes of HBM traffic per parameter"
                                 : "autograd adds into .grad from the second micro-batch on: 3 accesses per gradient element") +
                            "), and the data-parallel reduction runs after the last backward (not overlapped)");
    // ttaccum: what torch.distributed.pipelining adds to every micro-batch's backward.
    if (job.training.framework == Framework::torchtitan && job.parallel.pp > 1) {
        const bool upcast = job.parallel.dp * std::max(1, job.parallel.cp) > 1 && job.parallel.grad_reduce_in_fp32 &&
                            job.training.precision != Precision::fp32;
        est.notes.push_back(std::string("torch.distributed.pipelining: gradients accumulate outside the GEMMs after every "
                                        "micro-batch's backward (") +
                            (upcast ? "FSDP2 adds each bf16 gradient into whole fp32 ones: 10 bytes of HBM traffic per "
                                      "parameter, 6 for the first micro-batch"
                                    : "autograd adds into .grad from the second micro-batch on: 3 accesses per gradient element") +
                            ")");
    }
    // bits: a layout PTD simulates but Megatron-LM's interleaved schedule refuses.
    if (runs_megatron_core(job.training.framework))
        if (auto refused = megatron_interleaved_refusal(job))
            est.notes.push_back("Megatron-LM would refuse this layout: " + refused->key + ": " + refused->message);
    // zb: what the non-Megatron schedules change, and where it comes from.
    if (job.parallel.pp > 1 && job.parallel.schedule == PipelineSchedule::zb_h1)
        est.notes.push_back("schedule zb-h1: each backward split into B (input gradient) and W (weight gradient, deferred "
                            "into the bubbles; Qi et al. 2023); stage s also keeps the weight-gradient operands of its "
                            "min(s, …) deferred W blocks; runs in sail-sg/zero-bubble-pipeline-parallelism, not stock Megatron-LM");
    if (job.parallel.pp > 1 && job.parallel.schedule == PipelineSchedule::dualpipe)
        est.notes.push_back("schedule dualpipe: the DeepSeek-V3 report's closed form (Table 2, no block order simulated); "
                            "each rank holds stages i and p−1−i (2× parameters) and p + 1 micro-batches in flight");
    if ((est.mfu > 1.0 || est.hfu > 1.0) && job.estimate.attention_flops == AttentionFlops::full)
        est.notes.push_back(std::string(est.mfu > 1.0 ? "MFU" : "HFU") + " above 100% under the full-s² convention: causal attention kernels execute about half "
                            "of the counted score FLOPs; set estimate.attention_flops = \"causal\" to count what runs");
    // cost: the whole run at this step time (training_cost.h).
    est.training = training_cost(training_cost_inputs(job, est.step_s, est.speed.known ? est.speed.step_s : Range{},
                                                      est.speed.band.confidence, est.tokens_per_s * est.step_s,
                                                      checkpoint_total_bytes(job.training, est.params)));
    for (const StageEstimate& st : est.stages)
        est.training.checkpoint_rank_bytes = std::max(est.training.checkpoint_rank_bytes, st.mem.params + st.mem.optimizer);
    return est;
}

}  // namespace ptd
