// userbuffers_chunking.cpp — the check set's optimistic lean: Transformer Engine's
// userbuffers (parallel.tp_comm_overlap) run the GEMMs they overlap in pieces, not whole —
// t row blocks for a ring-exchange all-gather / data gradient, 4 row blocks on the SMs a
// pipelined reduce-scatter leaves (overlap.cpp ub_chunking_cost; TE module/base.py
// initialize_ub, NeMo / Megatron-Bridge tp_overlap_configs). Smaller GEMMs reach less of the
// peak, so hiding TP traffic behind them costs GEMM time the model used to leave out; the
// rows that use userbuffers were predicted 10% faster than published (docs/accuracy.md).
#include <gtest/gtest.h>

#include "model/estimate_internal.h"
#include "ptd/model/estimate.h"
#include "ptd/spec/job_spec.h"

#include "job_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

// A Llama-3-8B-like layer (SwiGLU, GQA 32/8 heads) on t TP ranks with sequence parallelism and
// userbuffers, `tokens` rows per micro-batch, on a GPU with `sms` SMs (H100: 132).
est::LayoutDerived llama_layer(int t, double tokens, int sms, Fp8Recipe fp8 = Fp8Recipe::none) {
    est::LayoutDerived L{};
    L.t = t, L.p = 1, L.v = 1, L.c = 1, L.ep = 1, L.dp = 1, L.b = 1, L.mbs = 1;
    L.s_local = tokens, L.tokens = tokens, L.e = 2, L.vocab = 128256;
    L.h = 4096, L.d = 128, L.heads_l = 32.0 / t, L.kv_l = 8.0 / t, L.f_l = 14336.0 / t;
    L.swiglu = true, L.sp = t > 1, L.flash = true, L.tp_comm_overlap = true;
    L.peak = 989e12, L.peak_fp8 = 1979e12, L.hbm = 0.8 * 3.35e12, L.gemm_eff_max = 0.68, L.flash_eff = 0.5;
    L.elementwise_factor = 1.0;
    L.fp8 = fp8;
    L.fp8_cast = est::fp8_cast_bytes(fp8, 1, GpuGeneration::hopper);
    L.layer_linear_params = 4096.0 * (4096 + 1024 + 1024 + 4096) / t + 3.0 * 4096 * 14336 / t;
    L.sms = sms;
    return L;
}

double gemm(const est::LayoutDerived& L, double m, double n, double k) { return est::gemm_time(L.peak, m, n, k, L.gemm_eff_max); }

// In bf16 a GEMM of T rows cut into s row blocks takes (T + s·d0) / (T + d0) of its time (the
// N and K factors of gemm_efficiency cancel), and 1 / (1 − margin) more on the SMs a pipelined
// reduce-scatter leaves. At T = 4096, t = 4 on an H100: ring exchange +9.09%, proj's pipelined
// reduce-scatter (24 of 132 SMs) +33.3%, FC2's (16 SMs) +24.1%.
TEST(UbChunking, HandComputedOnAnH100Layer) {
    const est::LayoutDerived L = llama_layer(4, 4096, 132);
    const double T = 4096, d0 = time_model_constants().gemm_half_dim;
    ASSERT_DOUBLE_EQ(d0, 128.0);
    const double ring = (T + 4 * d0) / (T + d0) - 1, proj = (T + 4 * d0) / (T + d0) / (1 - 24.0 / 132) - 1,
                 fc2 = (T + 4 * d0) / (T + d0) / (1 - 16.0 / 132) - 1;
    EXPECT_NEAR(ring, 0.0909, 1e-4);
    EXPECT_NEAR(proj, 0.3333, 1e-4);
    EXPECT_NEAR(fc2, 0.2414, 1e-4);
    const double g_qkv = gemm(L, T, 1024 + 2 * 256, 4096), g_proj = gemm(L, T, 4096, 1024),
                 g_fc1 = gemm(L, T, 2 * 3584, 4096), g_fc2 = gemm(L, T, 4096, 3584);
    const est::UbChunking u = est::ub_chunking_cost(L, est::layer_forward_time(L));
    const double fwd = ring * (g_qkv + g_fc1) + proj * g_proj + fc2 * g_fc2, bwd = ring * (g_proj + g_fc2);
    EXPECT_NEAR(u.fwd, fwd, 1e-9 * fwd);
    EXPECT_NEAR(u.bwd, bwd, 1e-9 * bwd);
    // About 15% of the layer's forward GEMM time at this shape: by FLOPs (n·k) QKV 6.3M and FC1
    // 29.4M at +9.1%, proj 4.2M at +33.3%, FC2 14.7M at +24.1%, over 54.5M.
    EXPECT_NEAR(u.fwd / est::layer_forward_time(L).gemm, 0.150, 0.003);
}

// More TP ranks, more ring steps: the pieces get smaller and the cost grows; shorter sequences
// (fewer rows per piece) lose more of their GEMM time.
TEST(UbChunking, GrowsWithTpRanksAndWithShorterSequences) {
    auto cost = [](int t, double tokens) {
        const est::LayoutDerived L = llama_layer(t, tokens, 132);
        const est::LayerTime lt = est::layer_forward_time(L);
        const est::UbChunking u = est::ub_chunking_cost(L, lt);
        return (u.fwd + u.bwd) / lt.gemm;
    };
    EXPECT_GT(cost(2, 8192), 0.0);
    EXPECT_GT(cost(4, 8192), cost(2, 8192));
    EXPECT_GT(cost(8, 8192), cost(4, 8192));
    EXPECT_GT(cost(8, 2048), cost(8, 8192));
    EXPECT_GT(cost(8, 8192), cost(8, 65536));
}

// Nothing to cut without TP; without a known SM count only the row blocks are charged; FP8
// GEMMs, which need longer dimensions to reach their peak, lose more to the same cut.
TEST(UbChunking, ZeroWithoutTpNoMarginWithoutSmsMoreUnderFp8) {
    {
        const est::LayoutDerived L = llama_layer(1, 8192, 132);
        const est::UbChunking u = est::ub_chunking_cost(L, est::layer_forward_time(L));
        EXPECT_EQ(u.fwd, 0.0);
        EXPECT_EQ(u.bwd, 0.0);
    }
    const est::LayoutDerived with = llama_layer(4, 4096, 132), without = llama_layer(4, 4096, 0);
    const est::UbChunking a = est::ub_chunking_cost(with, est::layer_forward_time(with)),
                          b = est::ub_chunking_cost(without, est::layer_forward_time(without));
    EXPECT_GT(a.fwd, b.fwd);
    EXPECT_DOUBLE_EQ(a.bwd, b.bwd) << "the backward's ring-exchange pieces take no SMs from the GEMM";
    const double d0 = 128, T = 4096, pieces = (T + 4 * d0) / (T + d0) - 1;
    const double g_all = gemm(without, T, 1536, 4096) + gemm(without, T, 4096, 1024) + gemm(without, T, 7168, 4096) +
                         gemm(without, T, 4096, 3584);
    EXPECT_NEAR(b.fwd, pieces * g_all, 1e-9 * b.fwd);
    auto relative = [](Fp8Recipe r) {
        const est::LayoutDerived L = llama_layer(8, 4096, 132, r);
        const est::LayerTime lt = est::layer_forward_time(L);
        return est::ub_chunking_cost(L, lt).fwd / lt.gemm;
    };
    EXPECT_GT(relative(Fp8Recipe::delayed), relative(Fp8Recipe::none));
}

// Every FP8 userbuffers config of the NeMo / Megatron-Bridge recipes runs proj's and FC2's
// forward reduce-scatter by ring exchange (1 SM, t pieces), not as a pipelined reduce-scatter
// with an SM margin: all four forward GEMMs are cut into t row blocks, whatever the SM count.
TEST(UbChunking, Fp8ConfigsCutTheReduceScatterGemmsByRingExchange) {
    const est::LayoutDerived L = llama_layer(4, 4096, 132, Fp8Recipe::current), bare = llama_layer(4, 4096, 0, Fp8Recipe::current);
    const est::UbChunking u = est::ub_chunking_cost(L, est::layer_forward_time(L));
    EXPECT_DOUBLE_EQ(u.fwd, est::ub_chunking_cost(bare, est::layer_forward_time(bare)).fwd);
    const double T = 4096;
    auto cut = [&](double n, double k) { return 4.0 * est::linear_gemm_time(L, T / 4, n, k) - est::linear_gemm_time(L, T, n, k); };
    EXPECT_NEAR(u.fwd, cut(1536, 4096) + cut(4096, 1024) + cut(7168, 4096) + cut(4096, 3584), 1e-9 * u.fwd);
    EXPECT_NEAR(u.bwd, cut(1024, 4096) + cut(3584, 4096), 1e-9 * u.bwd);
}

// PyTorch's async TP (torchtitan) fuses gather→matmul and matmul→scatter and runs the matmul
// shard by shard as well: t matmuls of T/t rows, no SM margin. The forward's fused ops each
// cost their transfer beside the matmul plus the pieces' (T + t·d0) / (T + d0) − 1 of it.
TEST(UbChunking, AsyncTpRunsItsFusedMatmulsShardByShard) {
    const JobSpec j = load_asset("llama3-70b-h100.toml");
    est::LayoutDerived L = llama_layer(8, 4096, 132);
    L.tp_comm_overlap = false, L.async_tp = true;
    est::assign_group_links(j.cluster, j.parallel.order.c_str(), L);
    const est::LayerTime lt = est::layer_forward_time(L);
    ChunkTime c;
    est::block_comm(L, lt, 1.0, false, false, c);
    est::hide_tp_comm(L, lt, 1.0, c);
    const double T = 4096, h = 4096, t = 8, d0 = 128, cut = (T + t * d0) / (T + d0) - 1;
    const double coll = est::nccl_time(est::Collective::all_gather, 2.0 * T * h, L.net_tp);
    const double copy_in = 2.0 * 2.0 * T * h / t / L.hbm, partial_sum = 2.0 * T * h * (1 + 1 / t) / L.hbm;
    const double qkv = gemm(L, T, 512 + 2 * 128, h), proj = gemm(L, T, h, 512), up = gemm(L, T, 2 * 1792, h),
                 down = gemm(L, T, h, 1792);
    // The transfer hides behind t − 1 of the t pieces (async_tp.cpp, TheFirstPieceHidesNothing).
    const double hiding = (t - 1) / t;
    auto gather_mm = [&](double g) { return copy_in + est::overlapped_cost(coll, hiding * g) + cut * g; };
    auto mm_scatter = [&](double g) { return est::overlapped_cost(coll, hiding * g) + partial_sum + cut * g; };
    EXPECT_NEAR(c.fwd.tp, gather_mm(qkv) + mm_scatter(proj) + gather_mm(up) + mm_scatter(down), 1e-12);
    EXPECT_GT(cut * (qkv + proj + up + down), 0.05 * c.fwd.tp);
}

// An MoE layer: only the attention's QKV and proj are userbuffers GEMMs (the experts' GEMMs
// follow the token dispatcher's NCCL collectives).
TEST(UbChunking, MoeLayersCutOnlyTheAttentionGemms) {
    est::LayoutDerived L = llama_layer(4, 4096, 132);
    L.moe = true;
    const double T = 4096, d0 = 128, ring = (T + 4 * d0) / (T + d0) - 1, proj = (T + 4 * d0) / (T + d0) / (1 - 24.0 / 132) - 1;
    const double g_qkv = gemm(L, T, 1536, 4096), g_proj = gemm(L, T, 4096, 1024);
    const est::UbChunking u = est::ub_chunking_cost(L, est::LayerTime{});
    EXPECT_NEAR(u.fwd, ring * g_qkv + proj * g_proj, 1e-9 * u.fwd);
    EXPECT_NEAR(u.bwd, ring * g_proj, 1e-9 * u.bwd);
}

// hide_tp_comm charges it: the TP time left after hiding is what the GEMMs do not hide plus the
// pieces' cost, per layer; with full recompute the recomputed forward runs in pieces again.
TEST(UbChunking, HideTpCommAddsItPerLayerAndAgainForTheRecomputedForward) {
    const JobSpec j = load_asset("llama3-70b-h100.toml");
    for (Recompute rc : {Recompute::none, Recompute::full}) {
        est::LayoutDerived L = llama_layer(4, 8192, 132);
        L.rc = rc;
        est::assign_group_links(j.cluster, j.parallel.order.c_str(), L);
        const est::LayerTime lt = est::layer_forward_time(L);
        const double layers = 4.0;
        ChunkTime one, c;
        est::block_comm(L, lt, 1.0, false, false, one);
        est::block_comm(L, lt, layers, false, false, c);
        est::hide_tp_comm(L, lt, layers, c);
        auto exposed = [&](double comm, double window) {
            const double residue = 0.5 * comm / L.t;
            return residue + est::overlapped_cost(comm - residue, window);
        };
        const bool full = rc == Recompute::full;
        const est::UbChunking u = est::ub_chunking_cost(L, lt);
        ASSERT_GT(u.fwd, 0.0);
        EXPECT_NEAR(c.fwd.tp, layers * (exposed(one.fwd.tp, lt.gemm) + u.fwd), 1e-12);
        EXPECT_NEAR(c.bwd.tp, layers * (exposed(one.bwd.tp, (full ? 3.0 : 2.0) * lt.gemm) + u.bwd + (full ? u.fwd : 0.0)),
                    1e-12);
    }
}

// End to end: estimate_job's TP time for a userbuffers job (Llama 3 70B, TP 8, PP 4 × VPP 5,
// selective recompute) holds, for every layer of every micro-batch, what the GEMMs do not hide
// plus the pieces' cost (the embedding's and the loss's collectives come on top).
TEST(UbChunking, EstimateJobChargesTheTermUnderTpCommOverlap) {
    const JobSpec off = load_asset("llama3-70b-h100.toml");
    const JobSpec on = load_asset("llama3-70b-h100.toml", {"parallel.tp_comm_overlap=true"});
    const Estimate e = estimate_job(on);
    EXPECT_LT(e.time.tp_comm, estimate_job(off).time.tp_comm) << "userbuffers still hide most of the TP traffic";
    est::LayoutDerived L = llama_layer(8, 8192, 132);
    L.h = 8192, L.heads_l = 64.0 / 8, L.kv_l = 1, L.f_l = 28672.0 / 8;
    L.gemm_eff_max = time_model_constants().kernel(GpuGeneration::hopper).gemm_eff_max;
    L.rc = Recompute::selective;
    est::assign_group_links(on.cluster, on.parallel.order.c_str(), L);
    const est::LayerTime lt = est::layer_forward_time(L);
    ChunkTime one;
    est::block_comm(L, lt, 1.0, false, false, one);
    auto exposed = [&](double comm, double window) {
        const double residue = 0.5 * comm / L.t;
        return residue + est::overlapped_cost(comm - residue, window);
    };
    const est::UbChunking u = est::ub_chunking_cost(L, lt);
    // 80 layers over pp 4: 20 per stage; 512 / 2 = 256 micro-batches per replica.
    const double per_layer = exposed(one.fwd.tp, lt.gemm) + exposed(one.bwd.tp, 2.0 * lt.gemm) + u.fwd + u.bwd;
    const double layers_and_microbatches = 256.0 * 20.0;
    EXPECT_GT(u.fwd + u.bwd, 0.3 * per_layer) << "the pieces are a large part of what userbuffers leave";
    EXPECT_GE(e.time.tp_comm, layers_and_microbatches * per_layer * (1.0 - 1e-9));
    EXPECT_LT(e.time.tp_comm, layers_and_microbatches * per_layer * 1.05);
}

}  // namespace
