// overlap.cpp — what communication hides behind compute, what is left exposed, and what the
// hiding costs the compute it runs beside:
//  - the data-parallel gradient reduction (parallel.overlap_grad_reduce: Megatron-LM starts a
//    bucket's reduction as soon as its gradients are ready in the last micro-batch's backward;
//    the last bucket, ready when the backward ends, stays exposed);
//  - the sharded optimizer's parameter all-gather (parallel.overlap_param_gather: bucket by
//    bucket during the next forward, the first bucket exposed);
//  - with the interleaved schedule, both per model chunk (dpchunk): Megatron-core reduces a
//    chunk's gradients when its last backward is done and gathers chunk k + 1's parameters
//    when chunk k starts, so they hide behind the other chunks' compute;
//  - the tensor-parallel all-gather / reduce-scatter of sequence parallelism
//    (parallel.tp_comm_overlap: Transformer Engine's userbuffers pipeline them with the
//    adjacent GEMMs in t ring steps; the last reduce-scatter step cannot overlap);
//  - PyTorch's micro-pipelined TP (parallel.async_tp, torchtitan's enable_async_tensor_parallel):
//    which all-gathers / reduce-scatters Inductor fuses with a matmul and what each fused op
//    leaves exposed (tt405, hide_tp_comm_async below);
//  - torch.distributed.pipelining with FSDP2 (torchtitan's PP): the gradient reduce-scatters
//    start after the stage's last backward, all exposed (tt405, stage_tail);
//  - Megatron's asynchronous TP collectives in a column-parallel linear's backward (recomp:
//    parallel.async_tensor_model_parallel_allreduce; the input gradient's all-reduce or
//    reduce-scatter beside the weight-gradient GEMM, hide_tp_dgrad);
//  - ZeRO-3 / FSDP per-layer parameter gathers and gradient reduce-scatters, prefetched
//    parallel.fsdp_prefetch layers ahead;
//  - the MoE dispatch / combine all-to-alls beside another micro-batch's compute
//    (deepep: parallel.moe_a2a_overlap, Megatron-core's combined 1F1B schedule, hide_ep_a2a);
//  - SM contention: compute that runs beside a collective is slowed (NCCL's kernels occupy
//    SMs and memory bandwidth), TimeModelConstants::overlap_slowdown;
//  - DeepSpeed's pipeline engine (dsthru): its TrainSchedule issues ReduceGrads, then
//    OptimizerStep, as the last instructions of the step's last pipeline step, after the final
//    backward (deepspeed/runtime/pipe/schedule.py TrainSchedule.steps; pipe/engine.py
//    _exec_reduce_grads: allreduce_gradients / buffered_allreduce_fallback in buckets of
//    MEMORY_OPT_ALLREDUCE_SIZE = 5e8 elements): nothing of the reduction (nor ZeRO-1's
//    parameter all-gather after the step) overlaps the backward, whatever overlap_comm says;
//  - and the optimizer step itself (memory bound), with the passes a Megatron step makes over
//    its whole gradient buffer whatever the data-parallel size (gradbuf: zeroing, the 1/dp
//    scaling, 2022-10 to 2024-01 the gathered parameters' copy).
// Sources: Megatron-LM's DDP and distributed optimizer (docs/source/api-guide/dist_optimizer.md;
// megatron/core/distributed/distributed_data_parallel_config.py: overlap_grad_reduce,
// overlap_param_gather, bucket_size default max(40M, 1M·dp) parameters; megatron/training/
// arguments.py); Transformer Engine userbuffers, Megatron's tp_comm_overlap
// (megatron/core/model_parallel_config.py: ring-exchange AG/RS overlap with the GEMMs);
// PyTorch's async TP — torch/_inductor/fx_passes/micro_pipeline_tp.py (fuse_all_gather_matmul,
// fuse_matmul_reduce_scatter) and torch/distributed/_symmetric_memory/__init__.py (the fused
// ops' pipelines), torchtitan parallelize_llama.py apply_tp (enable_async_tp);
// ZeRO-3 prefetching — Rajbhandari et al. 2020 §7, DeepSpeed stage3_prefetch_bucket_size;
// FSDP2 (torch fully_shard: per-module all-gather one module ahead, reduce-scatter after each
// module's backward; torchtitan reshards after forward without pipelining); SM contention —
// Lee et al. 2025, "Characterizing Compute-Communication Overlap in GPU-Accelerated
// Distributed Deep Learning" (arXiv 2507.03114): compute overlapped with NCCL collectives is
// 18.9% slower on average (A100, H100, MI250, MI210; max 40%). Offload: the PCIe copies and
// the CPU optimizer step of ZeRO-Offload (Ren et al. 2021 §4) and Megatron's
// --optimizer-cpu-offload, at the host CPU's CPU-Adam rate (bits: cluster presets, from
// DeepSpeed's DGX-2 log scaled by DRAM bandwidth and SuperOffload's GH200 figure).
// docs/estimators.md writes every term out.
#include "model/estimate_internal.h"

#include <algorithm>

namespace ptd::est {

double overlapped_cost(double comm_s, double window_s) {
    if (comm_s <= 0) return 0;
    const double sigma = time_model_constants().overlap_slowdown;
    // While the collective runs, compute advances at 1/(1 + σ): a window of w seconds of
    // compute beside c seconds of communication ends after max(c, w + c·σ/(1 + σ)).
    return std::max(comm_s - window_s, comm_s * sigma / (1.0 + sigma));
}

double prefetched_pass_exposed(const double* comm_s, const double* compute_s, int units, int depth) {
    // Two streams: unit i's gather may start once the one before it is gathered and a buffer
    // is free (unit i − 1 − depth has finished computing); its compute once it is gathered and
    // the previous unit has computed. depth 0: nothing is fetched before it is needed.
    constexpr int kMaxDepth = 64;
    double done[kMaxDepth + 1];  // compute end of the last depth + 1 units (ring)
    const int ring = std::min(depth, kMaxDepth) + 1;
    double comm_end = 0, comp_end = 0, compute_sum = 0, comm_sum = 0;
    for (int i = 0; i < units; ++i) {
        const double gate = i - ring >= 0 ? done[(i - ring) % ring] : 0.0;
        comm_end = std::max(comm_end, gate) + comm_s[i];
        comp_end = std::max(comp_end, comm_end) + compute_s[i];
        done[i % ring] = comp_end;
        compute_sum += compute_s[i];
        comm_sum += comm_s[i];
    }
    const double exposed = std::max(0.0, comp_end - compute_sum);
    // The communication that ran beside compute slowed it (SM contention).
    const double sigma = time_model_constants().overlap_slowdown;
    const double hidden = depth > 0 ? std::max(0.0, comm_sum - exposed) : 0.0;
    return exposed + hidden * sigma / (1.0 + sigma);
}

namespace {

// tt405: PyTorch's micro-pipelined TP (torch/_inductor/fx_passes/micro_pipeline_tp.py, run by
// Inductor on the compiled forward and backward graphs; the fused ops in
// torch/distributed/_symmetric_memory/__init__.py). The pass fuses
//   - an all-gather with the matmuls that take its output as their left operand
//     (fused_all_gather_matmul): the sequence-parallel gather in front of Q, K, V and in front
//     of the MLP's w1 (w3) in forward, and in backward the gather of the gradient of a
//     row-parallel output (wo, w2) with its data-gradient matmul;
//   - a matmul whose output only feeds a reduce-scatter (fused_matmul_reduce_scatter): wo and
//     w2 in forward. In backward the reduce-scatter of a column-parallel input's gradient
//     takes the SUM of the Q, K, V (w1, w3) data-gradient matmuls, not one matmul's output,
//     so it stays an NCCL reduce-scatter, exposed.
// A fused all-gather first copies the local shard into the symmetric buffer and waits on a
// barrier (exposed: a read and write of T/t × h), then copy-engine p2p copies of the other
// shards run beside the matmul of the shard before (_pipelined_all_gather_and_consume). A
// fused reduce-scatter produces one chunk per peer beside the peers' copies, then sums the t
// partial chunks (exposed: read T × h, write T/t × h; _pipelined_produce_and_all2all). The
// copies' transfer time is the NCCL all-gather's (collectives.cpp); what the matmul does not
// cover is exposed, and compute beside it is slowed by overlap_slowdown (overlapped_cost).
// Under full recompute the recomputed forward is fused like the forward. MoE expert matmuls
// are grouped GEMMs after the token dispatch, not consumers the pass matches: the MLP's
// collectives stay NCCL ones.
// ttasync: the pass fuses an all-gather only with the matmuls (aten.mm / aten._scaled_mm,
// optionally behind a reshape) that read the gathered tensor itself (micro_pipeline_tp.py
// _find_consumer_matmuls). Under torchao rowwise float8 the gathered tensor is bf16 and its
// consumers are the quantization ops (L.fp8_cast_after_tp_gather), so no gather is fused —
// forward or backward — and only the matmul → reduce-scatter fusions remain (torchtitan
// issue 866: rowwise with async TP ran at about vanilla TP's speed).
void hide_tp_comm_async(const LayoutDerived& L, double layers, ChunkTime& c) {
    const double T = L.tokens, h = L.h, hd = L.heads_l * L.d, kvd = L.kv_l * L.d;
    const double coll = nccl_time(Collective::all_gather, L.e * T * h, L.net_tp);  // one AG or RS (block_comm)
    // The forward's gathers of the norm output (float8 under torchao float8 TP, block_comm).
    const double in_bytes = L.dtensor_sp ? dtensor_gathered_bytes(L) : L.e;
    const double coll_in = nccl_time(Collective::all_gather, in_bytes * T * h, L.net_tp);
    const double qkv = titan_qkv_gemm(L);  // ttasync: wq, wk, wv share the fused gather
    const double proj = linear_gemm_time(L, T, h, hd);
    const double up = titan_up_gemm(L);
    const double down = linear_gemm_time(L, T, h, L.f_l);
    const double partial_sum = L.e * T * h * (1.0 + 1.0 / L.t) / L.hbm;
    // lean: a fused op runs its matmul shard by shard, t matmuls of T/t rows (one per peer's
    // shard in _pipelined_all_gather_and_consume, one per output chunk in
    // _pipelined_produce_and_all2all), which reach less of the peak: the M factor of
    // gemm_efficiency, as for userbuffers' ring exchange (ub_chunking_cost), no SM margin.
    const double d0 = time_model_constants().gemm_half_dim, cut = (T + L.t * d0) / (T + d0) - 1.0;
    // asynctp: the copies of one fused op run one peer at a time ("cp from different streams
    // cannot overlap", _pipelined_all_gather_and_consume), each beside the matmul of a piece
    // already there: the local shard's piece runs beside the first copy and the last peer's
    // piece after the last copy. A fused reduce-scatter mirrors it: a peer pulls its chunk only
    // after the chunk's matmul and the barrier (_pipelined_produce_and_all2all), so the first
    // piece runs before any copy. Either way the transfer hides behind t − 1 of the t pieces.
    const double hiding = (L.t - 1.0) / L.t;
    // A gather of `bytes` per element fused with a matmul of `gemm` seconds (c: its transfer).
    auto gather_mm = [&](double c, double bytes, double gemm) {
        if (L.fp8_cast_after_tp_gather) return c;  // ttasync: an NCCL all-gather, exposed
        return 2.0 * bytes * T * h / L.t / L.hbm + overlapped_cost(c, hiding * gemm) + cut * gemm;
    };
    auto mm_scatter = [&](double gemm) { return overlapped_cost(coll, hiding * gemm) + partial_sum + cut * gemm; };
    const bool dense = !L.moe;
    const double fwd = gather_mm(coll_in, in_bytes, qkv) + mm_scatter(proj) +
                       (dense ? gather_mm(coll_in, in_bytes, up) + mm_scatter(down) : coll_in + coll);
    const double bwd = gather_mm(coll, L.e, proj) + (dense ? gather_mm(coll, L.e, down) : coll) + 2.0 * coll;
    const bool full = L.rc == Recompute::full;
    // ttasync: under torchtitan's op-level selective checkpointing the backward gathers the two
    // inputs again (block_comm); the recomputed K and, for a dense SwiGLU MLP, w3 read them
    // as their left operand, so each gather is fused with that matmul.
    const bool op_sac = L.rc == Recompute::selective && L.rc_style == RecomputeStyle::torchtitan_op;
    const double sac_block = op_sac ? 2.0 * coll_in : 0.0;
    const double sac_async = op_sac ? gather_mm(coll_in, in_bytes, linear_gemm_time(L, T, kvd, h)) +
                                          (dense && L.swiglu ? gather_mm(coll_in, in_bytes, linear_gemm_time(L, T, L.f_l, h))
                                                             : coll_in)
                                    : 0.0;
    // block_comm's per-layer TP time: 2 gathers of the input + 2 reduce-scatters forward, 4
    // collectives backward (+ the forward's again when recomputed).
    const double block_fwd = 2.0 * coll_in + 2.0 * coll;
    c.fwd.tp -= layers * (block_fwd - fwd);
    c.bwd.tp -= layers * (4.0 * coll + (full ? block_fwd : 0.0) + sac_block - bwd - (full ? fwd : 0.0) - sac_async);
}

}  // namespace

// lean: what Transformer Engine's userbuffers cost the GEMMs they overlap (TE
// transformer_engine/pytorch/module/base.py initialize_ub, default methods and configs; NeMo's
// and Megatron-Bridge's tp_overlap_configs/userbuffers.py for the performance recipes). Each
// GEMM next to a TP all-gather or reduce-scatter runs in pieces, not whole:
//  - "ring_exchange" (QKV and FC1 forward with their all-gather; proj and FC2 data gradient
//    with theirs): t GEMMs of T/t rows each, one per ring step (num_splits = tp size), the
//    copies on the copy engines;
//  - "pipeline" (proj and FC2 forward with their reduce-scatter, bf16): 4 GEMMs of T/4 rows
//    (num_splits 4) on the SMs the reduce-scatter kernel leaves (set_sm_margin: 24 SMs beside
//    proj, 16 beside FC2 in the Llama 3 70B H100 config — the recipes use 16 – 32 and 8 – 24;
//    TE's default is 16 each); every FP8 config runs these two as "ring_exchange" instead
//    (t pieces, 1 SM), so under a Transformer Engine FP8 recipe they are cut like the others;
//  - "bulk" (QKV / FC1 data and weight gradients): the GEMM runs whole beside the collective,
//    which overlapped_cost already charges.
// Smaller pieces reach less of the peak (gemm_efficiency's M factor; FP8's longer reduction,
// fp8_reduction_factor), so a layer's forward pays Σ splits·g(T/splits) / (1 − margin) − g(T)
// over its four GEMMs and its backward over the two ring-exchange data gradients.
UbChunking ub_chunking_cost(const LayoutDerived& L, const LayerTime& lt) {
    UbChunking u;
    const double T = L.tokens, t = L.t, h = L.h;
    if (T <= 0 || t <= 1) return u;
    const bool rs_ring = L.fp8 != Fp8Recipe::none;  // FP8 configs: the reduce-scatter GEMMs by ring exchange
    const double rs_splits = rs_ring ? t : 4.0;
    const double margin_proj = L.sms > 0 && !rs_ring ? 24.0 / L.sms : 0.0, margin_fc2 = L.sms > 0 && !rs_ring ? 16.0 / L.sms : 0.0;
    auto pieces = [&](double m, double n, double k, double splits, double margin) {
        const double whole = linear_gemm_time(L, m, n, k);
        return std::max(0.0, splits * linear_gemm_time(L, m / splits, n, k) / (1.0 - margin) - whole);
    };
    if (L.mla) {
        // MLA's projections are several GEMMs (lt.gemm_qkv): the same row split, by its M factor.
        const double d0 = time_model_constants().gemm_half_dim;
        const double ring = (T + t * d0) / (T + d0) - 1.0, pipe = (T + rs_splits * d0) / (T + d0) / (1.0 - margin_proj) - 1.0;
        u.fwd = ring * lt.gemm_qkv + pipe * lt.gemm_proj;
        u.bwd = ring * lt.gemm_proj;
        return u;
    }
    const double hd = L.heads_l * L.d, kvd = L.kv_l * L.d;
    u.fwd = pieces(T, hd + 2.0 * kvd, h, t, 0.0) + pieces(T, h, hd, rs_splits, margin_proj);
    u.bwd = pieces(T, hd, h, t, 0.0);
    if (!L.moe) {  // moe: the experts' GEMMs are not userbuffers GEMMs (hide_tp_comm)
        const double mats_in = L.swiglu ? 2.0 : 1.0;
        u.fwd += pieces(T, mats_in * L.f_l, h, t, 0.0) + pieces(T, h, L.f_l, rs_splits, margin_fc2);
        u.bwd += pieces(T, L.f_l, h, t, 0.0);
    }
    return u;
}

void hide_tp_comm(const LayoutDerived& L, const LayerTime& lt, double layers, ChunkTime& c) {
    // tt405; mla: not for MLA layers, whose TP collectives this pass does not describe (kept exposed)
    if (L.async_tp && layers > 0 && !L.mla) return hide_tp_comm_async(L, layers, c);
    if (!L.tp_comm_overlap || L.t <= 1 || !L.sp || layers <= 0) return;
    auto exposed = [&](double comm, double gemm) {
        // Half of it is reduce-scatter; its last ring step follows the last GEMM piece.
        const double residue = 0.5 * comm / L.t;
        return residue + overlapped_cost(comm - residue, gemm);
    };
    // Backward: data- and weight-gradient GEMMs (2× forward); with full recompute the
    // recomputed forward's GEMMs and collectives too.
    const bool full = L.rc == Recompute::full;
    // lean: the GEMMs run in pieces beside their collectives (ub_chunking_cost), counted with
    // the TP time they hide; the recomputed forward (full recompute) runs in pieces again.
    const UbChunking chunking = ub_chunking_cost(L, lt);
    c.fwd.tp += layers * chunking.fwd;
    c.bwd.tp += layers * (chunking.bwd + (full ? chunking.fwd : 0.0));
    if (L.moe) {
        // moe: userbuffers pair the attention's TE linears (QKV, proj) with their collectives;
        // an MoE layer's all-gather and reduce-scatter are the token dispatcher's NCCL calls
        // between the all-to-alls (tp_mlp_comm) and stay exposed — Megatron-core's
        // MoEAlltoAllTokenDispatcher has no userbuffers path (token_dispatcher.py).
        const double attn = tp_attention_comm(L), attn_gemm = lt.gemm_qkv + lt.gemm_proj;
        const double attn_bwd = attn * (full ? 2.0 : 1.0), attn_bwd_gemm = attn_gemm * (full ? 3.0 : 2.0);
        c.fwd.tp -= layers * (attn - exposed(attn, attn_gemm));
        c.bwd.tp -= layers * (attn_bwd - exposed(attn_bwd, attn_bwd_gemm));
        return;
    }
    // One layer's TP traffic as the collectives model counts it (the embedding and the
    // cross-entropy collectives of the first and last chunk are not GEMM-adjacent: they stay).
    ChunkTime one;
    block_comm(L, lt, 1.0, false, false, one);
    const double bwd_gemm = 2.0 * lt.gemm + (full ? lt.gemm : 0.0);
    c.fwd.tp -= layers * (one.fwd.tp - exposed(one.fwd.tp, lt.gemm));
    c.bwd.tp -= layers * (one.bwd.tp - exposed(one.bwd.tp, bwd_gemm));
}

// blackwell: Megatron-core's interleaved schedule with overlap_p2p_comm
// (megatron/core/pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving,
// p2p_communication.py send_forward_recv_forward / send_backward_recv_backward with
// overlap_p2p_comm=True): after a chunk's forward its output send and the next input's receive
// are posted as async isend / irecv and waited for only before the chunk that consumes them, and
// the same in the backward; the hop runs while the rank computes its next chunk. The next chunk
// is the same work in a balanced split, so the window is this chunk's compute; NCCL's p2p
// kernels slow it like any collective (overlapped_cost). The receiver still waits for the
// bytes: the schedule delays every block that depends on another stage by the hop (p2pdep,
// PipelineDurations::hop), which matters where nothing else covers it — the warm-up's chain
// of forwards through all p·v chunks and the cool-down's chain of backwards.
void hide_p2p(const LayoutDerived& L, ChunkTime& c) {
    if (!L.overlap_p2p) return;
    c.fwd.p2p = overlapped_cost(c.fwd.p2p, c.fwd.compute);
    c.bwd.p2p = overlapped_cost(c.bwd.p2p, c.bwd.compute);
}

// deepep: Megatron-core's --overlap-moe-expert-parallel-comm (combined_1f1b.py: "the forward
// pass of Transformer layers for one micro-batch runs in parallel with the backward pass of
// another ... EP A2A in forward step is hidden by the attention/mlp computation in the backward
// step, and vice versa"): in a paired step the chunk's forward and backward all-to-alls run on
// the communication stream beside the pair's compute (forward, backward and its recompute), at
// the SM-contention cost of overlapped_cost; the unpaired warm-up forwards and cool-down
// backwards (1 − a2a_paired of them) keep theirs exposed. Both directions keep their share.
void hide_ep_a2a(const LayoutDerived& L, ChunkTime& c) {
    if (L.a2a_paired <= 0) return;
    const double comm = c.fwd.ep + c.bwd.ep;
    if (comm <= 0) return;
    const double window = c.fwd.compute + c.bwd.compute + c.bwd.recompute;
    const double exposed = (1.0 - L.a2a_paired) * comm + L.a2a_paired * overlapped_cost(comm, window);
    const double keep = exposed / comm;
    c.fwd.ep *= keep;
    c.bwd.ep *= keep;
}

// recomp: Megatron-LM's LinearWithGradAccumulationAndAsyncCommunication.backward
// (megatron/core/tensor_parallel/layers.py; megatron/mpu/layers.py from Sep 2021, when
// --no-async-tensor-model-parallel-allreduce could turn it off — until Apr 2024, ignored
// since), relying on CUDA_DEVICE_MAX_CONNECTIONS=1 for the order, and Transformer Engine's
// Linear / LayerNormLinear backward ("overlap dgrad-RS/AR with wgrad", transformer_engine/
// pytorch/module/linear.py): without SP the input gradient's all-reduce is issued before the
// weight-gradient GEMM and waited for after it; with SP the saved input shard is
// re-all-gathered beside the data-gradient GEMM and the input gradient reduce-scattered
// beside the weight-gradient GEMM. Korthikanti et al. 2022 §6.2 name this overlap as why a
// full recompute costs 39% of the 22B layer, not 33%: the recomputed forward's all-reduces
// have nothing to hide behind. Only the column-parallel linears (QKV, the dense MLP's FC1)
// have it; the row-parallel linears' backward all-gather under SP stays exposed, and MoE
// expert layers' TP communication is the token dispatcher's.
double tp_dgrad_delta(const LayoutDerived& L, const LayerTime& lt) {
    if (!L.tp_dgrad_async || L.tp_comm_overlap || L.t <= 1) return 0.0;
    const double msg = L.e * L.tokens * L.h;
    // Without SP: the all-reduce block_comm counted exposed. With SP: the reduce-scatter it
    // counted exposed (the same time as an all-gather) and the re-gather it did not count.
    const double one = nccl_time(L.sp ? Collective::all_gather : Collective::all_reduce, msg, L.net_tp);
    // mla: MLA's up projections' backward collective carries the latents (collectives.cpp
    // tp_attention_comm), not h.
    const double one_qkv = !L.mla ? one
                         : nccl_time(L.sp ? Collective::all_gather : Collective::all_reduce,
                                     L.e * L.tokens * ((L.q_lora > 0 ? L.q_lora : L.h) + L.kv_lora + L.d_rope), L.net_tp);
    double delta = 0;  // change of one layer's backward TP time
    for (int k = 0; k < 2; ++k) {
        const double window = k == 0 ? lt.gemm_qkv : lt.gemm_fc1, coll = k == 0 ? one_qkv : one;
        if (window <= 0) continue;
        delta += (L.sp ? 2.0 : 1.0) * overlapped_cost(coll, window) - coll;
    }
    return delta;
}

void hide_tp_dgrad(double delta, double layers, ChunkTime& c) {
    if (delta == 0 || layers <= 0) return;  // tp_dgrad_delta is 0 where nothing overlaps
    c.bwd.tp = std::max(0.0, c.bwd.tp + layers * delta);
}

void hide_tp_dgrad(const LayoutDerived& L, const LayerTime& lt, double layers, ChunkTime& c) {
    hide_tp_dgrad(tp_dgrad_delta(L, lt), layers, c);
}

namespace {

// Parameters per DP bucket: Megatron's DDP default max(40M, 1M·dp) (distributed_data_parallel_
// config.py), DeepSpeed's reduce / all-gather bucket for ZeRO-1/2 (estimate.zero_bucket_elements).
double bucket_params(const EstimateContext& ctx, const LayoutDerived& L) {
    if (L.zero >= 1) return ctx.job.estimate.zero_bucket_elements;
    return std::max(40e6, 1e6 * L.dp * L.c);
}

// ZeRO-3 / FSDP: every micro-batch gathers each layer's parameters for its forward and again
// for its backward and reduce-scatters its gradients after the backward (DeepSpeed ZeRO-3;
// FSDP2 as torchtitan runs it without pipelining, reshard_after_forward). Units in forward
// order: the embedding, the layers, the output layer (and final norm).
double zero3_exposed(const EstimateContext& ctx, const LayoutDerived& L, double dense_params, double expert_params,
                     int layers, double fwd_s, double bwd_s) {
    const JobSpec& job = ctx.job;
    // fsdpreduce: the gradients reduce-scatter in the stack's reduce dtype: fp32 where a torch
    // stack's FSDP casts them up first (grad_reduce_in_fp32; torchtitan's default), else the
    // parameter dtype (stack_defaults.cpp; collectives.cpp dp_grad_bytes, as the DP traffic).
    const Framework fw = job.training.framework;
    const double grad_e = dp_grad_bytes(job, L);
    // One unit's all-gather (or reduce-scatter, the same bus traffic) as NCCL runs it over
    // the DP group and the expert-DP group (collectives.cpp).
    auto gather = [&](double dense, double expert, double bytes_per) {
        return nccl_time(Collective::all_gather, bytes_per * dense, L.net_dp) +
               nccl_time(Collective::all_gather, bytes_per * expert, L.net_edp);
    };
    const double layer_dense = layers > 0 ? L.layer_dense_params : 0.0;
    const double layer_expert = layers > 0 ? expert_params / layers : 0.0;
    const double ends = std::max(0.0, dense_params - layers * layer_dense);
    const double embed = std::min(ends, L.embed_params), out = ends - embed;

    // Compute per unit: one layer from the layer model, the ends take the rest of the stage's.
    const LayerTime lt = layer_forward_time(L);
    ChunkTime one;
    block_compute(L, lt, 1.0, false, false, one);
    const double lf = one.fwd.compute, lb = one.bwd.compute;
    const double ef = std::max(0.0, fwd_s - layers * lf), eb = std::max(0.0, bwd_s - layers * lb);
    const double emb_share = ends > 0 ? embed / ends : 0.5;
    // fsdp8gather: torchao's tensorwise float8 with enable_fsdp_float8_all_gather
    // (training.fp8_param_gather on torchtitan) casts each layer's Float8Linear weights to
    // float8 before FSDP2's gather (torchao float8/fsdp_utils.py fsdp_pre_all_gather): 1 byte
    // a weight; the embedding, the output layer (OLMo-core's modules_to_ignore {"w_out"},
    // torchtitan's filter_fqns ["output"]), the norms and grouped expert weights stay 16-bit.
    const double layer_e = fw == Framework::torchtitan && L.fp8 == Fp8Recipe::tensorwise &&
                                   job.training.fp8_param_gather
                               ? 1.0
                               : L.e;
    auto layer_gather = [&](double bytes_dense, double bytes_expert) {
        return nccl_time(Collective::all_gather, bytes_dense * layer_dense, L.net_dp) +
               nccl_time(Collective::all_gather, bytes_expert * layer_expert, L.net_edp);
    };

    thread_local std::vector<double> comm, comp;
    const int n = layers + 2;
    comm.assign((size_t)n, 0.0);
    comp.assign((size_t)n, 0.0);
    // Forward.
    comm[0] = gather(embed, 0, L.e), comp[0] = ef * emb_share;
    for (int i = 1; i <= layers; ++i) comm[(size_t)i] = layer_gather(layer_e, L.e), comp[(size_t)i] = lf;
    comm[(size_t)n - 1] = gather(out, 0, L.e), comp[(size_t)n - 1] = ef * (1 - emb_share);
    const int depth = std::max(0, job.parallel.fsdp_prefetch);
    const double fwd_exposed = prefetched_pass_exposed(comm.data(), comp.data(), n, depth);
    // Backward, output first: each unit's gather plus the reduce-scatter of the unit before
    // it (ready when that unit's backward ends); the last unit's reduce-scatter follows.
    // hsdp: each unit's reduce-scatter is followed by the all-reduce of its shard across the
    // replicas (FSDP2's post-backward with a replicate dim, FSDP1's HYBRID_SHARD). DeepSpeed's
    // MiCS runs it at the accumulation boundary only (collectives.cpp dp_traffic): one
    // micro-batch's worth, spread here over the step's micro-batches.
    const double across_share = fw == Framework::deepspeed ? 1.0 / L.mbs : 1.0;
    auto replicas = [&](double dense, double expert) {
        return across_share * (nccl_time(Collective::all_reduce, grad_e * dense / L.net_dp.n, L.net_dp_rep) +
                               nccl_time(Collective::all_reduce, grad_e * expert / L.net_edp.n, L.net_edp_rep));
    };
    auto rs = [&](int unit) {
        if (unit == 0) return gather(embed, 0, grad_e) + replicas(embed, 0);
        if (unit == n - 1) return gather(out, 0, grad_e) + replicas(out, 0);
        return gather(layer_dense, layer_expert, grad_e) + replicas(layer_dense, layer_expert);
    };
    for (int k = 0; k < n; ++k) {
        const int unit = n - 1 - k;
        const double g = unit == 0 ? gather(embed, 0, L.e)
                         : unit == n - 1 ? gather(out, 0, L.e)
                                         : layer_gather(layer_e, L.e);
        comm[(size_t)k] = g + (k > 0 ? rs(unit + 1) : 0.0);
        comp[(size_t)k] = unit == 0 ? eb * emb_share : unit == n - 1 ? eb * (1 - emb_share) : lb;
    }
    const double bwd_exposed = prefetched_pass_exposed(comm.data(), comp.data(), n, depth) + rs(0);
    // fsdpcopy: FSDP2 (torch fully_shard: torchtitan's FSDP, and OLMo-core's, written as
    // torchtitan) also copies what it moves, per micro-batch and on the compute stream's path.
    // After each gather, foreach_all_gather_copy_out runs split_with_sizes_copy from the gather
    // buffer into the unsharded parameters on the current stream (a read and a write of the
    // unit, forward and backward). Before each reduce-scatter, foreach_reduce_scatter_copy_in
    // runs _chunk_cat of the unit's 16-bit gradients into the reduce buffer in the reduce dtype
    // (a 16-bit read, a grad_e write) on the reduce-scatter stream, and the current stream waits
    // for it (current_stream.wait_stream(reduce_scatter_stream)) before the next unit's
    // backward. Memory bound and serial with compute: exposed. (torch/distributed/
    // _composable/fsdp/_fsdp_collectives.py.) FSDP1's flat parameter gathers in place, and
    // ZeRO-3's buffers are its own: not counted here.
    double copy_s = 0;
    if (fw == Framework::torchtitan) {
        const double unsharded = dense_params + expert_params;
        const double float8_saved = layers * layer_dense * (L.e - layer_e);  // bytes a gather copies less
        copy_s = (2.0 * 2.0 * (unsharded * L.e - float8_saved) + unsharded * (L.e + grad_e)) / L.hbm;
    }
    return L.mbs * (fwd_exposed + bwd_exposed + copy_s);
}

}  // namespace

static double chunked_grad_exposed(double grad_s, double bwd_s, int v, double group, double last_bucket) {
    if (grad_s <= 0) return 0;
    // Times from the end of the first chunk's last backward. The stage's backwards of one
    // micro-batch take bwd_s, one chunk's bwd_s / v; between two chunks' last backwards the
    // stage runs `group` micro-batches of the next chunk (the cool-down's idle slots, which
    // would hide more, are left out). The DP stream runs one reduction at a time.
    const double bc = bwd_s / v, gap = group * bc, gc = grad_s / v;
    double q = 0;  // when the DP stream is free
    for (int k = 0; k + 1 < v; ++k) q = std::max(q, k * gap) + gc;
    // The last chunk's buckets fill during its last micro-batch's backward (as without
    // interleaving); the one holding the first layers is ready only when it ends.
    const double end = (v - 1) * gap;
    const double rest_start = std::max(q, end - bc);
    const double done = std::max(end, rest_start + (1 - last_bucket) * gc) + last_bucket * gc;
    // Exposed: what runs after the backward, or at least the SM contention of what ran beside
    // it (overlapped_cost's floor).
    const double sigma = time_model_constants().overlap_slowdown;
    return std::max(done - end, grad_s * sigma / (1.0 + sigma));
}

static double chunked_param_exposed(double param_s, double fwd_s, int v, double group, double first_bucket) {
    if (param_s <= 0) return 0;
    // Chunks 0 and 1 are gathered before the first forward; chunk k + 1 when chunk k starts its
    // first forward. Chunk k's first forward waits for its first bucket; the rest of its
    // buckets are gathered while it computes. Stalls delay everything after them.
    const double fc = fwd_s / v, gap = group * fc, pc = param_s / v;
    double q = 0, clock = 0, stall = 0;  // DP stream free; compute clock (with stalls)
    for (int k = 0; k < v; ++k) {
        const double release = k <= 1 ? 0.0 : clock - gap;  // chunk k − 1's first forward began
        const double start = std::max(q, std::max(0.0, release));
        const double first_ready = start + first_bucket * pc;
        q = start + pc;
        const double wait = std::max(0.0, first_ready - clock);
        stall += wait;
        clock += wait;
        // The chunk's first micro-batch needs all its buckets, one ahead of the layer using it.
        const double rest = std::max(0.0, q - (clock + fc));
        stall += rest;
        clock += rest + gap;
    }
    const double sigma = time_model_constants().overlap_slowdown;
    return std::max(stall, param_s * sigma / (1.0 + sigma));
}

double grad_buffer_pass_bytes(const JobSpec& job, const LayoutDerived& L) {
    // Megatron's DDP (Megatron-LM's LocalDDP with contiguous buffers, then Megatron-core's
    // DistributedDataParallel) holds every local gradient in one buffer per model chunk; the
    // bucketed reduction and ZeRO-1 sharding do not shrink these passes, so they weigh the same
    // at any data-parallel size. DeepSpeed's and the torch stacks' buffers are not counted here.
    const TrainingSpec& t = job.training;
    if (!runs_megatron_core(t.framework) || L.zero != 0 || L.ds_pipe) return 0;
    const double grad_e = dp_grad_bytes(job, L);
    // train_step zeroes the whole buffer every step (Megatron-LM 285068c8 training.py:
    // partition.zero_grad_buffer(); today's model_chunk.zero_grad_buffer()): one write.
    double bytes = grad_e;
    const bool replicas = (long long)L.dp * L.c > 1;
    // Megatron-LM divides the buffer by the data-parallel size before reducing it, a read and a
    // write: 285068c8's DistributedOptimizer.reduce_model_grads (`gbuf.data /=
    // data_parallel_world_size`) and LocalDDP.allreduce_gradients; Megatron-core's
    // start_grad_sync (`bucket.grad_data *= bucket.gradient_scaling_factor`) unless
    // average_in_collective, off on Megatron-LM's command line and set by the NeMo 2 /
    // Megatron-Bridge recipes (DistributedDataParallelConfig(average_in_collective = True)),
    // whose NCCL call averages instead.
    if (t.framework == Framework::megatron && replicas) bytes += 2.0 * grad_e;
    // From 2022-09-30 (57bfa7c: the all-gather in the parameter dtype) until 2024-02-14
    // (293e104: parameters laid out in the contiguous buffer), the distributed optimizer
    // gathered the updated parameters into a separate buffer and copied every local parameter
    // out of it (gather_model_params: `param.view(-1).detach().copy_(param_buf_shard)`): a
    // 16-bit read and write of all of them.
    const bool copies_gathered = t.framework == Framework::megatron && t.framework_version >= 202210 &&
                                 t.framework_version < 202402;
    if (copies_gathered && L.optimizer_sharded && replicas) bytes += 2.0 * L.e;
    return bytes;
}

StageTail stage_tail(const EstimateContext& ctx, const LayoutDerived& L, const DpTraffic& dp, double dense_params,
                     double expert_params, double fwd_s, double bwd_s) {
    const JobSpec& job = ctx.job;
    StageTail tail;
    tail.grad_s = dp.grad_s;
    tail.param_s = dp.param_s;
    if (L.zero == 3) {
        // Per layer and micro-batch (zero3_exposed); ZeRO-3 needs pp = 1, so the stage holds
        // every layer and what is exposed inside its blocks may as well be added after them.
        tail.grad_exposed_s = dp.grad_s + dp.param_s > 0
                                  ? zero3_exposed(ctx, L, dense_params, expert_params, L.m->layers, fwd_s, bwd_s)
                                  : 0.0;
    } else if (L.ds_pipe) {
        // dsthru: DeepSpeed's pipeline engine reduces after the last backward and gathers
        // ZeRO-1's updated parameters after the step: both exposed.
        tail.grad_exposed_s = dp.grad_s;
        tail.param_exposed_s = dp.param_s;
    } else if (L.torch_pipelining) {
        // tt405: torch.distributed.pipelining with FSDP2 (torchtitan's PP): the stage's
        // backward_maybe_with_nosync turns FSDP's gradient sync off for every micro-batch but
        // runs the post-backward of every FSDP unit (its reduce-scatter) only after the last
        // micro-batch's whole backward has returned (stage.py: `if last_backward: ...
        // post_backward()`), so no gradient reduction overlaps backward compute. The
        // parameters are gathered in the next step's first forward, one unit ahead (FSDP2's
        // implicit prefetch), as the buckets below.
        const double stage_params = dense_params + expert_params;
        const double first_unit = stage_params > 0 ? std::min(1.0, bucket_params(ctx, L) / stage_params) : 1.0;
        tail.grad_exposed_s = dp.grad_s;
        tail.param_exposed_s = L.overlap_param_gather ? first_unit * dp.param_s +
                                                            overlapped_cost((1 - first_unit) * dp.param_s, fwd_s)
                                                      : dp.param_s;
    } else if (L.zero == 2 && L.p > 1) {
        // Per-micro-batch reduce-scatters (collectives.cpp) hide behind the backwards but
        // the last micro-batch's; the parameter gather as below.
        tail.grad_exposed_s = overlapped_cost(dp.grad_s * (L.mbs - 1) / L.mbs, (L.mbs - 1) * bwd_s) + dp.grad_s / L.mbs;
        tail.param_exposed_s = L.overlap_param_gather ? overlapped_cost(dp.param_s, fwd_s) : dp.param_s;
    } else if (L.v > 1 && L.p > 1 && (L.overlap_grad_reduce || L.overlap_param_gather)) {
        // dpchunk (issue 29 point 2): Megatron-core's interleaved schedule syncs each model chunk
        // on its own (interleaved_1f1b forward_backward_pipelining_with_interleaving: grad_sync_func
        // when a chunk's last backward is done, param_sync_func for chunk k + 1 when chunk k runs
        // its first forward), so a chunk's reduction hides behind the later chunks' backwards and
        // its gather behind the earlier chunks' forwards, not just one micro-batch's.
        const double stage_params = dense_params + expert_params;
        const double chunk_params = stage_params / L.v;
        const double lb = chunk_params > 0 ? std::min(1.0, bucket_params(ctx, L) / chunk_params) : 1.0;
        const double group = std::max(1, std::min(L.mb_group, L.mbs));
        tail.grad_exposed_s = L.overlap_grad_reduce ? chunked_grad_exposed(dp.grad_s, bwd_s, L.v, group, lb) : dp.grad_s;
        tail.param_exposed_s = L.overlap_param_gather ? chunked_param_exposed(dp.param_s, fwd_s, L.v, group, lb) : dp.param_s;
    } else {
        // Megatron's buckets: the last one to fill (the first layers' gradients) is reduced
        // after the backward; the first one gathered before the forward can start.
        const double stage_params = dense_params + expert_params;
        const double last_bucket = stage_params > 0 ? std::min(1.0, bucket_params(ctx, L) / stage_params) : 1.0;
        tail.grad_exposed_s = L.overlap_grad_reduce ? last_bucket * dp.grad_s +
                                                          overlapped_cost((1 - last_bucket) * dp.grad_s, bwd_s)
                                                    : dp.grad_s;
        tail.param_exposed_s = L.overlap_param_gather ? last_bucket * dp.param_s +
                                                            overlapped_cost((1 - last_bucket) * dp.param_s, fwd_s)
                                                      : dp.param_s;
    }

    // Optimizer step: memory bound over this rank's optimizer shard. Adam touches
    // grad (4), master (4+4), m (4+4), v (4+4), writes the weight: ~30 bytes/param.
    const bool sharded = L.optimizer_sharded;
    const double opt_params = dense_params / (sharded ? L.dense_shards : 1) + expert_params / (sharded ? L.expert_shards : 1);
    // oom4: with the states' own widths (training.*_dtype; fp32 each gives 30 and 18): the
    // master read and written (none: the 16-bit weight itself, which is then not written again).
    const OptimizerStateWidths& w = L.state_widths;
    const double weight_write = w.main > 0 ? 2.0 : 0.0, master_rw = 2.0 * (w.main > 0 ? w.main : L.e);
    const double moments_rw = job.training.optimizer == Optimizer::sgd ? w.exp_avg : 2.0 * (w.exp_avg + w.exp_avg_sq);
    const double opt_bytes = 4.0 + master_rw + moments_rw + weight_write;
    tail.optimizer_s = opt_params * opt_bytes / L.hbm;
    // gradbuf: the passes a Megatron step makes over its whole local buffers, not the shard.
    tail.optimizer_s += (dense_params + expert_params) * grad_buffer_pass_bytes(job, L) / L.hbm;

    // offload (ZeRO-Offload, Ren et al. 2021 §4.1-4.2): each step the gradient shard goes
    // device→host (16-bit in DeepSpeed, Megatron's fp32 main grads), the CPU steps (every GPU
    // process of the node shares its cores), the updated 16-bit parameters come back. The
    // gradient copy overlaps the last backward as the reduction does; the parameter copy is
    // pipelined with the CPU step (DeepSpeed's CPU-Adam copies each updated tile while the next
    // steps; Megatron's --overlap-cpu-optimizer-d2h-h2d), so the longer of the two shows.
    // ZeRO-3's offload_param fetches the shard host→device before each gather (forward and
    // backward of every micro-batch), prefetched behind compute on the copy engines. The
    // one-step delayed parameter update (DPU) is not modelled: it changes the training math.
    if (L.offload_optimizer || L.offload_params) {
        const double param_bytes = opt_params * L.e;  // this rank's 16-bit parameter shard
        if (L.offload_optimizer) {
            tail.offload_d2h_s = opt_params * (L.zero == 0 ? 4.0 : L.e) / L.pcie;
            tail.cpu_optimizer_s = opt_params * L.gpus_per_node / L.cpu_adam_params_per_s;
            tail.offload_h2d_s = L.offload_params ? 0.0 : param_bytes / L.pcie;  // with offload_params they stay on host
            tail.optimizer_s = 0;  // the GPU no longer steps
        } else {
            tail.offload_d2h_s = param_bytes / L.pcie;  // GPU step, then the shard goes back to host
        }
        if (L.offload_params) tail.offload_param_fetch_s = 2.0 * L.mbs * param_bytes / L.pcie;
        const double d2h_exposed = L.offload_optimizer && L.overlap_grad_reduce
                                       ? std::max(0.0, tail.offload_d2h_s - bwd_s)
                                       : tail.offload_d2h_s;
        const double fetch_exposed = std::max(0.0, tail.offload_param_fetch_s - L.mbs * (fwd_s + bwd_s));
        tail.offload_s = d2h_exposed + std::max(tail.cpu_optimizer_s, tail.offload_h2d_s) + fetch_exposed;
    }
    return tail;
}

}  // namespace ptd::est
