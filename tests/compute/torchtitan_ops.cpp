// torchtitan_ops.cpp — the mechanisms found while checking the estimator on
// torchtitan's async-TP benchmark (benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md):
//  - torchtitan's op-level selective checkpointing recomputes, in the backward, the matmuls
//    its policy drops that the backward reads (K, the SwiGLU up projection; eagerly also the
//    output projection) and the element-wise forward, not the attention core (compute.cpp
//    op_sac_recompute), and gathers the TP inputs again (collectives.cpp block_comm);
//  - torchtitan's Llama runs wq, wk, wv and w1, w3 as separate GEMMs (compute.cpp titan_qkv_gemm);
//  - torchao rowwise float8 under torchtitan's TP gathers in bf16 and quantizes the gathered,
//    full-sequence tensors (compute.cpp, LayoutDerived::fp8_cast_after_tp_gather);
//  - so async TP cannot fuse those gathers with a matmul: only the matmul → reduce-scatter
//    fusions remain (overlap.cpp hide_tp_comm_async).
//  - DTensor's sequence-dim gathers and scatters copy the whole activation once each
//    (functional collectives chunk + cat; compute.cpp dtensor_sp_copies).
//  - PyTorch's ring attention (context parallelism) merges and accumulates in fp32 around
//    each flash call and gathers K, V once (compute.cpp torch_ring_merge_bytes, block_comm).
//  - torchao's rowwise Float8Linear costs, in the backward, 7.8 ps more per input and weight
//    element than tensorwise (rowwise8: compute.cpp torchao_rowwise_backward_time), measured
//    from torchao's rowwise sweep; at tp = 1 it reproduces torchao's measured rowwise /
//    tensorwise throughput on Llama 3 8B, on H100 and on B200.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/estimate_internal.h"
#include "ptd/model/estimate.h"
#include "ptd/spec/job_spec.h"

#include "job_test_util.h"
#include "layer_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

// A bare Llama-3-8B-like layer (SwiGLU, GQA 32/8 heads) on tp ranks for the compute functions,
// with the fields derive() fills for them.
est::LayoutDerived llama_layer(int t, bool sp) {
    est::LayoutDerived L{};
    L.t = t, L.p = 1, L.v = 1, L.c = 1, L.ep = 1, L.dp = 1, L.b = 2, L.mbs = 1;
    L.s_local = 8192, L.tokens = 2 * 8192, L.e = 2, L.vocab = 128256;
    L.h = 4096, L.d = 128, L.heads_l = 32.0 / t, L.kv_l = 8.0 / t, L.f_l = 14336.0 / t;
    L.swiglu = true, L.sp = sp, L.flash = true;
    L.peak = 989e12, L.peak_fp8 = 1979e12, L.hbm = 0.8 * 3.35e12, L.gemm_eff_max = 0.68, L.flash_eff = 0.5;
    L.elementwise_factor = 1.0;
    L.fp8 = Fp8Recipe::none;
    L.layer_linear_params = 4096.0 * (4096 + 1024 + 1024 + 4096) / t + 3.0 * 4096 * 14336 / t;
    return L;
}

double gemm(const est::LayoutDerived& L, double peak, double m, double n, double k) {
    return est::gemm_time(peak, m, n, k, L.gemm_eff_max);
}

// ---- op-level selective checkpointing: what the backward runs again ----

// torchtitan's policy saves mm outputs 1, 3, 5, 7 (Q, V, w1, w2), SDPA and the reduce-scatters:
// compiled, the backward recomputes K, w3 and the element-wise forward; the attention core,
// saved, is not run again. Megatron's selective recomputes exactly that core.
TEST(OpSac, RecomputesTheDroppedMatmulsTheBackwardReadsNotTheAttentionCore) {
    auto L = llama_layer(1, false);
    L.rc = Recompute::selective;
    L.rc_style = RecomputeStyle::torchtitan_op;
    const est::LayerTime lt = est::layer_forward_time(L);
    const double T = L.tokens;
    const double k_proj = gemm(L, L.peak, T, 1024, 4096), w3 = gemm(L, L.peak, T, 14336, 4096);
    EXPECT_DOUBLE_EQ(lt.op_sac_recompute, k_proj + w3 + lt.elem);
    ChunkTime op;
    est::block_compute(L, lt, 4.0, false, false, op);
    EXPECT_DOUBLE_EQ(op.bwd.recompute, 4.0 * (k_proj + w3 + lt.elem));

    // Megatron's selective on the same layer: the attention core forward only.
    auto M = L;
    M.rc_style = RecomputeStyle::megatron;
    const est::LayerTime mt = est::layer_forward_time(M);
    ChunkTime meg;
    est::block_compute(M, mt, 4.0, false, false, meg);
    EXPECT_DOUBLE_EQ(meg.bwd.recompute, 4.0 * mt.attn);
    EXPECT_DOUBLE_EQ(op.bwd.compute, meg.bwd.compute) << "the backward proper does not change";
}

// Eagerly, torch.utils.checkpoint replays the block up to the last tensor the backward needs,
// so the output projection (mm 4) runs again too; compiled, the partitioner drops it (its
// output only feeds the saved reduce-scatter).
TEST(OpSac, EagerAlsoRunsTheOutputProjectionAgain) {
    auto L = llama_layer(1, false);
    L.rc = Recompute::selective;
    L.rc_style = RecomputeStyle::torchtitan_op;
    const double compiled = est::layer_forward_time(L).op_sac_recompute;
    L.titan_eager = true;
    const double eager = est::layer_forward_time(L).op_sac_recompute;
    EXPECT_NEAR(eager - compiled, gemm(L, L.peak, L.tokens, 4096, 4096), 1e-15);
}

// Through the whole estimate the job's parallel.recompute_style selects it (Llama 3 8B at
// seq 8192 on one node, compiled: there K and w3 again cost about what the causal attention
// core does, so the two totals are close but not the same).
TEST(OpSac, TheJobsRecomputeStyleSelectsIt) {
    auto compute = [](const std::string& style) {
        const JobSpec j = load_asset("llama3-70b-h100.toml",
                                     {"model.preset=llama3-8b", "cluster.nodes=1", "parallel.tp=1", "parallel.pp=1", "parallel.vpp=1",
                                      "parallel.dp=8", "parallel.sequence_parallel=false", "parallel.distributed_optimizer=false", "parallel.zero=3",
                                      "parallel.recompute=selective", "parallel.recompute_style=" + style,
                                      "training.framework=torchtitan", "training.torch_compile=true",
                                      "training.micro_batch=2", "training.global_batch=16"});
        return estimate_job(j).time.compute;
    };
    EXPECT_NE(compute("torchtitan-op"), compute("megatron"));
}

// The backward gathers the attention and MLP inputs again (the policy saves the reduce-
// scatters' outputs, not the gathers'): two more all-gathers per layer in the backward, in the
// forward's width; Megatron's selective recompute keeps its backward collectives as they were.
TEST(OpSac, TheBackwardGathersTheInputsAgain) {
    auto L = llama_layer(8, true);
    const JobSpec j = load_asset("llama3-70b-h100.toml");
    est::assign_group_links(j.cluster, j.parallel.order.c_str(), L);
    L.dtensor_sp = true;
    L.rc = Recompute::selective;
    L.rc_style = RecomputeStyle::megatron;
    ChunkTime meg, op;
    est::block_comm(L, est::layer_forward_time(L), 4.0, false, false, meg);
    L.rc_style = RecomputeStyle::torchtitan_op;
    est::block_comm(L, est::layer_forward_time(L), 4.0, false, false, op);
    const double gather = est::nccl_time(est::Collective::all_gather, 2.0 * L.tokens * L.h, L.net_tp);
    EXPECT_NEAR(op.bwd.tp - meg.bwd.tp, 4.0 * 2.0 * gather, 1e-12);
    EXPECT_DOUBLE_EQ(op.fwd.tp, meg.fwd.tp);
    // Under async TP the recomputed K and w3 read them first: each is fused with that matmul,
    // so less of them shows than the NCCL gathers, but not nothing.
    L.async_tp = true;
    ChunkTime async_op = op;
    est::hide_tp_comm(L, est::layer_forward_time(L), 4.0, async_op);
    L.rc_style = RecomputeStyle::megatron;
    ChunkTime async_meg = meg;
    est::hide_tp_comm(L, est::layer_forward_time(L), 4.0, async_meg);
    const double more = async_op.bwd.tp - async_meg.bwd.tp;
    EXPECT_GT(more, 0.0);
    EXPECT_LT(more, 4.0 * 2.0 * gather);
}

// ---- dtcopy: the layout copies of DTensor's sequence-dim collectives ----

// DTensor gathers Shard(1) with funcol.all_gather_tensor(gather_dim=1) and reduces to it with
// reduce_scatter_tensor(scatter_dim=1): NCCL works along dim 0, so each call copies the whole
// [b, s, h] tensor once (chunk + cat). Vanilla TP, per layer: forward two gathers and two
// scatters, backward the same four the other way round on 16-bit gradients; op-level SAC
// gathers both inputs again; Megatron's TP (no DTensor) copies nothing.
TEST(DtensorSpCopies, VanillaTpCopiesEachSequenceDimCollectiveOnce) {
    auto L = llama_layer(8, true);
    EXPECT_EQ(est::layer_forward_time(L).sp_copy, 0.0) << "Megatron's TP: no DTensor";
    L.dtensor_sp = true;
    const est::LayerTime lt = est::layer_forward_time(L);
    const double copy = 2.0 * L.e * L.tokens * L.h / L.hbm;  // read + write T·h once
    EXPECT_DOUBLE_EQ(lt.sp_copy, 4.0 * copy);
    EXPECT_DOUBLE_EQ(lt.sp_copy_bwd, 4.0 * copy);
    ChunkTime with, without;
    est::block_compute(L, lt, 4.0, false, false, with);
    est::LayerTime bare = lt;
    bare.sp_copy = bare.sp_copy_bwd = 0;
    est::block_compute(L, bare, 4.0, false, false, without);
    EXPECT_NEAR(with.fwd.compute - without.fwd.compute, 4.0 * 4.0 * copy, 1e-12);
    EXPECT_NEAR(with.bwd.compute - without.bwd.compute, 4.0 * 4.0 * copy, 1e-12);
    // Full recompute runs the forward again, copies included.
    L.rc = Recompute::full;
    ChunkTime full;
    est::block_compute(L, est::layer_forward_time(L), 4.0, false, false, full);
    EXPECT_DOUBLE_EQ(full.bwd.recompute, full.fwd.compute);
    // Op-level SAC gathers the attention and MLP inputs again: two more gather copies.
    L.rc = Recompute::selective;
    L.rc_style = RecomputeStyle::torchtitan_op;
    const double sac = est::layer_forward_time(L).op_sac_recompute;
    L.dtensor_sp = false;
    EXPECT_NEAR(sac - est::layer_forward_time(L).op_sac_recompute, 2.0 * copy, 1e-15);
}

// Tensorwise float8 TP gathers float8 inputs (1 byte: half the gather copies' bytes); the
// scatters and the backward stay 16-bit. Async TP fuses the forward's gathers and scatters and
// the backward's gathers with their matmuls: the backward's two reduce-scatters still copy;
// under rowwise (casts read the gathered tensors) every gather stays an NCCL one and copies.
TEST(DtensorSpCopies, Float8GathersAndAsyncTpCopyLess) {
    auto L = llama_layer(8, true);
    L.dtensor_sp = true;
    const double copy = 2.0 * L.e * L.tokens * L.h / L.hbm;
    L.fp8 = Fp8Recipe::tensorwise;
    L.fp8_cast = est::fp8_cast_bytes(Fp8Recipe::tensorwise, 1, GpuGeneration::hopper);
    est::LayerTime lt = est::layer_forward_time(L);
    EXPECT_DOUBLE_EQ(lt.sp_copy, 2.0 * copy / 2.0 + 2.0 * copy);
    EXPECT_DOUBLE_EQ(lt.sp_copy_bwd, 4.0 * copy);
    L.async_tp = true;
    lt = est::layer_forward_time(L);
    EXPECT_EQ(lt.sp_copy, 0.0);
    EXPECT_DOUBLE_EQ(lt.sp_copy_bwd, 2.0 * copy);
    L.fp8 = Fp8Recipe::rowwise;
    L.fp8_cast = est::fp8_cast_bytes(Fp8Recipe::rowwise, 1, GpuGeneration::hopper);
    L.fp8_cast_after_tp_gather = true;
    lt = est::layer_forward_time(L);
    EXPECT_DOUBLE_EQ(lt.sp_copy, 2.0 * copy);
    EXPECT_DOUBLE_EQ(lt.sp_copy_bwd, 4.0 * copy);
}

// asynctp: torch's fused ops return the gathered [b, s, h] tensor sequence-major (they work on
// A.movedim(gather_dim, 0)) and take wo's input so. In bf16, with more than one sequence per
// micro-batch, each fused gather that feeds a weight gradient (QKV's and w1 / w3's inputs, wo's
// and w2's output gradients) is copied once into the other operand's batch-major order, and the
// attention output (SDPA's, batch-major) once per forward into sequence-major order. One
// sequence per micro-batch: the two orders are the same. Float8: the casts write the order.
TEST(DtensorSpCopies, AsyncTpReordersTheGatheredTensorForBf16WeightGradients) {
    auto L = llama_layer(8, true);  // b = 2
    L.dtensor_sp = true, L.async_tp = true;
    const double copy = 2.0 * L.e * L.tokens * L.h / L.hbm;
    const double attn_out = 2.0 * L.e * L.tokens * L.heads_l * L.d / L.hbm;
    est::LayerTime lt = est::layer_forward_time(L);
    EXPECT_DOUBLE_EQ(lt.sp_copy, attn_out);
    EXPECT_DOUBLE_EQ(lt.sp_copy_bwd, 2.0 * copy + 4.0 * copy) << "the two NCCL reduce-scatters and four reorders";
    // Op-level SAC without a SwiGLU w3: the MLP input's re-gather has no matmul to fuse with
    // (an NCCL gather, contiguous already), so three reorder.
    L.rc = Recompute::selective, L.rc_style = RecomputeStyle::torchtitan_op, L.swiglu = false;
    lt = est::layer_forward_time(L);
    EXPECT_DOUBLE_EQ(lt.sp_copy_bwd, 2.0 * copy + 3.0 * copy);
    L.rc = Recompute::none, L.rc_style = RecomputeStyle::megatron, L.swiglu = true;
    L.b = 1, L.s_local = L.tokens;  // one sequence: sequence-major is batch-major
    lt = est::layer_forward_time(L);
    EXPECT_EQ(lt.sp_copy, 0.0);
    EXPECT_DOUBLE_EQ(lt.sp_copy_bwd, 2.0 * copy);
    L.b = 2, L.s_local = L.tokens / 2;
    L.fp8 = Fp8Recipe::tensorwise;
    L.fp8_cast = est::fp8_cast_bytes(Fp8Recipe::tensorwise, 1, GpuGeneration::hopper);
    lt = est::layer_forward_time(L);
    EXPECT_EQ(lt.sp_copy, 0.0);
    EXPECT_DOUBLE_EQ(lt.sp_copy_bwd, 2.0 * copy);
}

// torchtitan compiles each TransformerBlock only (apply_compile), so async TP's Inductor pass
// never sees the output layer: the final norm's output is gathered by DTensor and copied (one
// T·h copy each way) with or without async TP.
TEST(DtensorSpCopies, TheOutputLayersGatherCopiesUnderAsyncTpToo) {
    auto L = llama_layer(8, true);
    L.async_tp = true;
    const est::LayerTime lt = est::layer_forward_time(L);
    ChunkTime megatron_tp, dtensor_tp;
    est::block_compute(L, lt, 0.0, false, true, megatron_tp);  // the last block's own terms only
    L.dtensor_sp = true;
    est::block_compute(L, lt, 0.0, false, true, dtensor_tp);
    const double copy = 2.0 * L.e * L.tokens * L.h / L.hbm;
    EXPECT_NEAR(dtensor_tp.fwd.compute - megatron_tp.fwd.compute, copy, 1e-12);
    EXPECT_NEAR(dtensor_tp.bwd.compute - megatron_tp.bwd.compute, copy, 1e-12);
}

// ---- ringcp: PyTorch's ring attention under torchtitan's context parallelism ----

// A Llama-3-8B-like layer on cp ranks: the rank holds s/c of one 8192-token sequence.
est::LayoutDerived cp_layer(int c) {
    auto L = llama_layer(1, false);
    L.c = c, L.b = 1, L.s_local = 8192.0 / c, L.tokens = L.s_local;
    return L;
}

// _templated_ring_attention merges each step's output into an fp32 accumulator and
// concatenates K and V into the send buffer; its backward accumulates dQ, dK, dV in fp32 and
// concatenates dK, dV every step. Counted per element on the busiest rank, c = 8, bf16. Eager,
// op by op: forward 278 bytes per output element and 32 per K/V element, backward 90 and 207.
// Compiled, each step's cast + merge (+ partial update) is one pass of 10 bytes and each
// accumulation one of 10: forward 82 and 32, backward 82 and 178 (the send buffers' copies stay).
TEST(RingAttention, MergesAndAccumulatesInFp32AroundEachFlashCall) {
    auto L = cp_layer(8);
    // Megatron's ring (Transformer Engine's) pays its own merges (temerge); without them the
    // two rings' flash calls take the same time.
    est::LayerTime megatron = est::layer_forward_time(L);
    const est::RingMergeBytes te = est::te_ring_merge_bytes(L);
    EXPECT_GT(te.fwd, 0.0);
    megatron.attn -= te.fwd / L.hbm, megatron.attn_bwd -= te.bwd / L.hbm;
    L.titan_model = true;
    const double q = L.tokens * 32 * 128, kv = 2.0 * q;  // repeat_kv: K and V on all 32 heads
    const est::LayerTime compiled = est::layer_forward_time(L);
    EXPECT_NEAR(compiled.attn - megatron.attn, (82.0 * q + 32.0 * kv) / L.hbm, 1e-15);
    EXPECT_NEAR(compiled.attn_bwd - megatron.attn_bwd, (82.0 * q + 178.0 * kv) / L.hbm, 1e-15);
    L.titan_eager = true;
    const est::LayerTime eager = est::layer_forward_time(L);
    EXPECT_NEAR(eager.attn - megatron.attn, (278.0 * q + 32.0 * kv) / L.hbm, 1e-15);
    EXPECT_NEAR(eager.attn_bwd - megatron.attn_bwd, (90.0 * q + 207.0 * kv) / L.hbm, 1e-15);
    // One rank (no ring): a single flash call, nothing merged.
    auto one = cp_layer(1);
    one.titan_model = true;
    EXPECT_EQ(est::torch_ring_merge_bytes(one).fwd, 0.0);
    EXPECT_DOUBLE_EQ(est::layer_forward_time(one).attn, est::layer_forward_time(cp_layer(1)).attn);
}

// K and V (all heads) are all-gathered once, behind the first step's flash call (1/c of the
// core); the backward gathers them again and sends the fp32 dK, dV one hop per step, each
// behind the next step's backward, the last hop exposed. Full recompute gathers again.
TEST(RingAttention, GathersKvOnceAndSendsFp32GradientsPerStep) {
    auto L = cp_layer(8);
    auto node = llama_layer(8, true);  // a group of eight ranks on one node, as the cp group
    const JobSpec j = load_asset("llama3-70b-h100.toml");
    est::assign_group_links(j.cluster, j.parallel.order.c_str(), node);
    L.net_cp = node.net_tp;
    L.titan_model = true;
    const est::LayerTime lt = est::layer_forward_time(L);
    ChunkTime ct;
    est::block_comm(L, lt, 4.0, false, false, ct);
    const double kv = 2.0 * L.e * L.tokens * 32 * 128;
    const double gather = est::nccl_time(est::Collective::all_gather, 8.0 * kv, L.net_cp);
    const double hop = est::p2p_time(2.0 * kv, L.net_cp);  // fp32: twice the bf16 bytes
    EXPECT_DOUBLE_EQ(ct.fwd.cp, 4.0 * std::max(0.0, gather - lt.attn / 8.0));
    EXPECT_DOUBLE_EQ(ct.bwd.cp, 4.0 * (std::max(0.0, gather - lt.attn_bwd / 8.0) +
                                       7.0 * std::max(0.0, hop - lt.attn_bwd / 8.0) + hop));
    EXPECT_GT(ct.bwd.cp, 0.0) << "the last hop is never hidden";
    L.rc = Recompute::full;
    ChunkTime full;
    est::block_comm(L, lt, 4.0, false, false, full);
    EXPECT_DOUBLE_EQ(full.bwd.cp, ct.bwd.cp + ct.fwd.cp);
}

// ---- torchtitan's separate linears ----

// torchtitan's Llama has wq, wk, wv and w1, w3 as separate nn.Linear layers: the K and V
// projections are GEMMs of their own narrow output (kv_heads·d/t = 128 at tp 8), slower on the
// efficiency curve than as part of one fused QKV GEMM; Megatron fuses them.
TEST(TitanModel, SeparateProjectionGemms) {
    auto L = llama_layer(8, true);
    const double fused = est::layer_forward_time(L).gemm_qkv;
    L.titan_model = true;
    const est::LayerTime lt = est::layer_forward_time(L);
    const double T = L.tokens;
    EXPECT_DOUBLE_EQ(lt.gemm_qkv, gemm(L, L.peak, T, 512, 4096) + 2.0 * gemm(L, L.peak, T, 128, 4096));
    EXPECT_GT(lt.gemm_qkv, fused);
    EXPECT_DOUBLE_EQ(lt.gemm_fc1, 2.0 * gemm(L, L.peak, T, 1792, 4096));
    EXPECT_DOUBLE_EQ(est::titan_qkv_gemm(L), lt.gemm_qkv);
}

// ---- torchao rowwise float8 under torchtitan's TP ----

// Tensorwise float8 TP casts the norm outputs before the sequence-parallel gather (on the
// shard) and the row-parallel output gradients likewise; rowwise runs plain TP, so the forward
// casts of the QKV and MLP inputs and the backward casts of the o / w2 output gradients see
// the whole sequence: t times the shard.
TEST(RowwiseTp, CastsTheGatheredFullSequence) {
    auto L = llama_layer(8, true);
    L.fp8 = Fp8Recipe::rowwise;
    L.fp8_cast = est::fp8_cast_bytes(Fp8Recipe::rowwise, 1, GpuGeneration::hopper);
    const est::LayerTime shard = est::layer_forward_time(L);
    L.fp8_cast_after_tp_gather = true;
    const est::LayerTime full = est::layer_forward_time(L);
    const double Th = L.tokens * L.h, more = Th * (1.0 - 1.0 / 8);
    const est::Fp8CastBytes& c = L.fp8_cast;
    EXPECT_NEAR(full.fp8_cast - shard.fp8_cast, c.in_fwd * 2.0 * more / L.hbm, 1e-15);
    const double rowwise8 = est::torchao_rowwise_backward_time(L, 2.0 * more) - est::torchao_rowwise_backward_time(L, 0.0);
    EXPECT_NEAR(full.fp8_cast_bwd - shard.fp8_cast_bwd, (c.in_bwd * 2.0 + c.grad_bwd * 2.0) * more / L.hbm + rowwise8, 1e-15);
    EXPECT_DOUBLE_EQ(full.gemm, shard.gemm) << "the GEMMs do not change";
}

std::vector<std::string> titan_tp8(const std::string& fp8, bool async_tp) {
    std::vector<std::string> sets = {"parallel.pp=1", "parallel.vpp=1", "parallel.dp=8", "parallel.recompute=full",
                                     "training.global_batch=16", "training.framework=torchtitan",
                                     "training.torch_compile=true", "training.fp8=" + fp8};
    if (async_tp) sets.push_back("parallel.async_tp=true");
    return sets;
}

// derive() sets it for torchtitan's rowwise with tp > 1 and SP only: the rowwise job computes
// longer than the tensorwise one, and at tp = 1 (no gather) the two differ by rowwise8 alone:
// 7.8 ps (15 bytes at 80% of 2.4 TB/s) per element of each linear's input (QKV's, proj's,
// FC1's, FC2's: T·(3h + f) for Llama) and weight in the backward, 80 layers, one micro-batch.
TEST(RowwiseTp, OnlyTorchtitansRowwiseWithSequenceParallelTp) {
    auto compute = [](std::vector<std::string> sets) {
        return estimate_job(load_asset("llama3-70b-h100.toml", sets)).time.compute;
    };
    EXPECT_GT(compute(titan_tp8("rowwise", false)), compute(titan_tp8("tensorwise", false)));
    auto tp1 = [](const std::string& fp8) {
        return std::vector<std::string>{"parallel.tp=1", "parallel.pp=1", "parallel.vpp=1", "parallel.dp=64",
                                        "parallel.sequence_parallel=false", "parallel.distributed_optimizer=false", "parallel.zero=3", "parallel.recompute=full",
                                        "training.global_batch=64", "training.framework=torchtitan",
                                        "training.torch_compile=true", "training.fp8=" + fp8};
    };
    const double T = 8192, h = 8192, f = 28672, kv = 8 * 128;
    const double inputs = T * (3 * h + f), weights = h * (h + 2 * kv) + h * h + 3 * h * f;
    const double rowwise8 = 80 * 15.0 / (2400e9 * 0.80) * (inputs + weights);
    EXPECT_NEAR(compute(tp1("rowwise")) - compute(tp1("tensorwise")), rowwise8, 1e-9 * rowwise8);
}

// rowwise8, one layer: the forward is tensorwise's; the backward takes 7.8 ps more per
// element of the four linears' inputs and of the layer's weights (here tp = 1, 8B shapes:
// inputs T·(h + a·d + h + f)) — what 15 bytes take at 80% of the 2.4 TB/s H100 torchao
// measured on, whatever this GPU's bandwidth.
TEST(RowwiseFloat8, TheBackwardPaysTheMeasuredOverheadPerInputAndWeightElement) {
    auto L = llama_layer(1, false);
    L.fp8 = Fp8Recipe::tensorwise;
    L.fp8_cast = est::fp8_cast_bytes(Fp8Recipe::tensorwise, 1, GpuGeneration::hopper);
    const est::LayerTime tensorwise = est::layer_forward_time(L);
    L.fp8 = Fp8Recipe::rowwise;
    L.fp8_cast = est::fp8_cast_bytes(Fp8Recipe::rowwise, 1, GpuGeneration::hopper);
    const est::LayerTime rowwise = est::layer_forward_time(L);
    EXPECT_DOUBLE_EQ(rowwise.fp8_cast, tensorwise.fp8_cast) << "the forward casts are the same";
    EXPECT_DOUBLE_EQ(rowwise.gemm, tensorwise.gemm);
    const double inputs = L.tokens * (4096.0 + 4096 + 4096 + 14336);
    const double rowwise8 = 15.0 / (2400e9 * 0.80) * (inputs + L.layer_linear_params);
    EXPECT_NEAR(rowwise.fp8_cast_bwd - tensorwise.fp8_cast_bwd, rowwise8, 1e-15);
    L.hbm *= 3.0;  // a GPU with three times the bandwidth: the casts shrink, the overhead does not
    EXPECT_DOUBLE_EQ(est::torchao_rowwise_backward_time(L, inputs), rowwise8);
}

// The step of torchao's float8 training benchmarks: torchtitan Llama 3 8B on one node of 8
// GPUs (`cluster`, `gpu` presets), FSDP 8, local batch 1, seq 8192, torch.compile, per-op SAC.
double torchao_bench_8b_step(const std::string& cluster, const std::string& gpu, const std::string& version,
                             const std::string& fp8) {
    const std::vector<std::string> sets = {
        "model.preset=\"llama3-8b\"", "cluster.preset=\"" + cluster + "\"", "cluster.gpu=\"" + gpu + "\"",
        "cluster.nodes=1", "parallel.tp=1", "parallel.pp=1", "parallel.vpp=1", "parallel.dp=8", "parallel.zero=3",
        "parallel.sequence_parallel=false", "parallel.distributed_optimizer=false", "parallel.recompute=selective",
        "training.framework=torchtitan", "training.framework_version=\"" + version + "\"",
        "training.torch_compile=true", "training.micro_batch=1", "training.global_batch=8", "training.fp8=" + fp8};
    return estimate_job(load_asset("llama3-8b-h100.toml", sets)).time.total();
}

// torchao's float8 README (training benchmarks on 8 H100; PyTorch 2.7.0a0, torchao 0.10): bf16
// 6,150 tokens/s, tensorwise (float8 all-gather) 7,689.5, rowwise 6,768 — rowwise / tensorwise
// 0.880. On Meta's H100 (the grand-teton preset) the model gives 0.904; without rowwise8 the
// two recipes were the same speed at tp = 1.
TEST(RowwiseFloat8, ReproducesTorchaosRowwiseOverTensorwiseThroughputOnH100) {
    auto step = [](const std::string& fp8) {
        return torchao_bench_8b_step("grand-teton-h100-96gb", "h100-96gb-500w", "2025-03", fp8);
    };
    EXPECT_NEAR(step("tensorwise") / step("rowwise"), 6768.0 / 7689.5, 0.03) << "published 0.880";
    EXPECT_GT(step("none") / step("rowwise"), 1.0) << "rowwise still beats bf16 here (published 1.10)";
}

// The same on B200 (torchao's MX README, training benchmarks on 8 power-limited B200; PyTorch
// 2.9.0.dev20250815): tensorwise 10,417 tokens/s, rowwise 8,640.5 — 0.829. The model gives
// 0.80; had the overhead scaled with HBM bandwidth (15 bytes at B200's 7.7 TB/s) it would give 0.93.
TEST(RowwiseFloat8, ReproducesTorchaosRowwiseOverTensorwiseThroughputOnB200) {
    auto step = [](const std::string& fp8) { return torchao_bench_8b_step("dgx-b200", "b200", "2025-08", fp8); };
    EXPECT_NEAR(step("tensorwise") / step("rowwise"), 8640.5 / 10417.0, 0.04) << "published 0.829";
}

// Async TP with rowwise: the gathered tensors' consumers are quantization ops, not matmuls,
// so Inductor's micro_pipeline_tp fuses none of the gathers; only the forward's matmul →
// reduce-scatter pairs (o and w2) are fused. Per layer and micro-batch the exposed TP time
// keeps, whole: the forward's two gathers, the recomputed forward's two, the backward's two
// gathers of the row-parallel output gradients and its two reduce-scatters.
TEST(RowwiseTp, AsyncTpFusesNoGather) {
    const JobSpec j = load_asset("llama3-70b-h100.toml", titan_tp8("rowwise", true));
    const double async_tp = estimate_job(j).time.tp_comm;
    const double plain = estimate_job(load_asset("llama3-70b-h100.toml", titan_tp8("rowwise", false))).time.tp_comm;
    const auto [coll, mbs] = ptd_test::tp8_dp8_gather(j);
    EXPECT_LT(async_tp, plain) << "the reduce-scatter fusions still hide something";
    EXPECT_GE(async_tp, mbs * j.model.layers * 8.0 * coll * (1.0 - 1e-9));
    // Tensorwise (float8 gathered, then straight into the matmuls) hides far more.
    const double tensorwise = estimate_job(load_asset("llama3-70b-h100.toml", titan_tp8("tensorwise", true))).time.tp_comm;
    EXPECT_LT(tensorwise, async_tp);
}

}  // namespace
