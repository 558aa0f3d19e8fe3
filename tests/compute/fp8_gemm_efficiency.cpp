// fp8_gemm_efficiency.cpp — the FP8 GEMM efficiency by shape: an FP8 GEMM
// needs a longer reduction dimension than a bf16 one to reach the same fraction of its peak
// (the K dimension's half-point grows with the math rate: compute.cpp fp8_reduction_factor,
// measured on H100 cuBLAS bf16 and H800 DeepGEMM FP8 tables), so small linear layers gain
// less than the 2× peak ratio and large ones approach it; bf16 GEMMs do not change. Also the
// Hopper-only costs of Transformer Engine's FP8 GEMMs: the split accumulator of the backward
// GEMMs (fp8acc) and the transposes made after a sequence-parallel gather (fp8sp).
#include <utility>

#include <gtest/gtest.h>

#include "model/estimate_internal.h"
#include "ptd/model/estimate.h"

namespace {

using namespace ptd;

// A bare Llama-like layer (SwiGLU, GQA) with hidden size h on one rank, with the fields
// derive() fills for the compute functions; H100 SXM peaks.
est::LayoutDerived layer(double h, double ffn, Fp8Recipe fp8) {
    est::LayoutDerived L{};
    L.t = 1, L.p = 1, L.v = 1, L.c = 1, L.ep = 1, L.dp = 1, L.b = 1, L.mbs = 1;
    L.s_local = 8192, L.tokens = 8192, L.e = 2, L.vocab = 128256;
    L.h = h, L.d = 128, L.heads_l = h / 128, L.kv_l = 8, L.f_l = ffn;
    L.swiglu = true, L.flash = true;
    L.peak = 989e12, L.peak_fp8 = 1979e12, L.hbm = 0.8 * 3.35e12, L.gemm_eff_max = 0.68, L.flash_eff = 0.5;
    L.elementwise_factor = 1.0;
    L.fp8 = fp8;
    L.fp8_cast = est::fp8_cast_bytes(fp8, 1, GpuGeneration::hopper);
    L.layer_linear_params = h * (h + 2.0 * 8 * 128) + h * h + 3.0 * h * ffn;
    return L;
}

// The factor is the mean over the three roles (fprop, dgrad, wgrad) of (K + rate·d0) / (K + d0).
TEST(Fp8GemmEfficiency, ReductionFactorIsTheMeanOverTheThreeRolesOfTheLongerHalfPoint) {
    const double d0 = time_model_constants().gemm_half_dim;
    auto role = [&](double K) { return (K + 2.0 * d0) / (K + d0); };
    EXPECT_DOUBLE_EQ(est::fp8_reduction_factor(8192, 6144, 4096, 2.0), (role(8192) + role(6144) + role(4096)) / 3.0);
    // Symmetric in m, n, k: the backward stays twice the forward.
    EXPECT_DOUBLE_EQ(est::fp8_reduction_factor(8192, 6144, 4096, 2.0), est::fp8_reduction_factor(4096, 8192, 6144, 2.0));
    // No faster math, no longer reduction; a dimension of d0 loses a third more time per role.
    EXPECT_DOUBLE_EQ(est::fp8_reduction_factor(8192, 6144, 4096, 1.0), 1.0);
    EXPECT_DOUBLE_EQ(est::fp8_reduction_factor(d0, d0, d0, 2.0), 1.5);
    // Smaller shapes lose more, large ones approach the peak ratio.
    EXPECT_GT(est::fp8_reduction_factor(2048, 2048, 2048, 2.0), est::fp8_reduction_factor(16384, 16384, 16384, 2.0));
    EXPECT_LT(est::fp8_reduction_factor(65536, 65536, 65536, 2.0), 1.002);
}

// A linear layer's FP8 GEMM: the FP8 peak on the bf16 curve, times the factor; bf16 unchanged.
TEST(Fp8GemmEfficiency, LinearGemmsAtTheFp8PeakPayTheLongerReduction) {
    const auto bf = layer(4096, 14336, Fp8Recipe::none), f8 = layer(4096, 14336, Fp8Recipe::delayed);
    const double T = 8192, h = 4096;
    EXPECT_DOUBLE_EQ(est::linear_gemm_time(bf, T, h, h), est::gemm_time(bf.peak, T, h, h, bf.gemm_eff_max));
    EXPECT_DOUBLE_EQ(est::linear_gemm_time(f8, T, h, h),
                     est::gemm_time(f8.peak_fp8, T, h, h, f8.gemm_eff_max) * est::fp8_reduction_factor(T, h, h, 1979.0 / 989.0));
    const est::LayerTime lb = est::layer_forward_time(bf), lf = est::layer_forward_time(f8);
    EXPECT_DOUBLE_EQ(lf.gemm_proj, est::linear_gemm_time(f8, T, h, h));
    const double speedup = lb.gemm / lf.gemm;
    EXPECT_LT(speedup, 1979.0 / 989.0 * 0.99) << "the FP8 GEMMs do not reach twice the bf16 ones at an 8B layer's shapes";
    EXPECT_GT(speedup, 1.8);
}

// Where the FP8 peak ratio is spent: an 8B-class layer (h 4096) gains less from FP8 in its
// linear GEMMs than a 405B-class one (h 16384) — the published FP8/BF16 step ratios of small
// models sit higher than those of large ones.
TEST(Fp8GemmEfficiency, SmallLayersGainLessFromFp8ThanLargeOnes) {
    auto gain = [](double h, double ffn) {
        return est::layer_forward_time(layer(h, ffn, Fp8Recipe::none)).gemm / est::layer_forward_time(layer(h, ffn, Fp8Recipe::delayed)).gemm;
    };
    EXPECT_LT(gain(4096, 14336), gain(16384, 53248));
}

// fp8acc: on Hopper the data- and weight-gradient FP8 GEMMs run with the split accumulator
// (1.15× the fast-accumulation forward), so a linear GEMM pays (1 + 2·1.15) / 3; Blackwell has
// no fast mode to lose and bf16 GEMMs are untouched.
TEST(Fp8SplitAccumulation, BackwardGemmsPayTheSplitAccumulatorOnHopperOnly) {
    EXPECT_DOUBLE_EQ(est::fp8_split_accum_factor(GpuGeneration::hopper), (1.0 + 2.0 * 1.15) / 3.0);
    EXPECT_DOUBLE_EQ(est::fp8_split_accum_factor(GpuGeneration::ada), (1.0 + 2.0 * 1.15) / 3.0);
    EXPECT_DOUBLE_EQ(est::fp8_split_accum_factor(GpuGeneration::blackwell), 1.0);
    auto hopper = layer(8192, 28672, Fp8Recipe::current);
    const auto fast = hopper;
    hopper.fp8_accum_factor = est::fp8_split_accum_factor(GpuGeneration::hopper);
    const double T = 8192, h = 8192;
    EXPECT_DOUBLE_EQ(est::linear_gemm_time(hopper, T, h, h), est::linear_gemm_time(fast, T, h, h) * 1.1);
    // A dense layer's GEMMs are all linear layers: the whole layer's GEMM time grows by the factor.
    EXPECT_NEAR(est::layer_forward_time(hopper).gemm / est::layer_forward_time(fast).gemm, 1.1, 1e-12);
    auto bf = layer(8192, 28672, Fp8Recipe::none);
    const double bf_gemm = est::linear_gemm_time(bf, T, h, h);
    bf.fp8_accum_factor = est::fp8_split_accum_factor(GpuGeneration::hopper);
    EXPECT_DOUBLE_EQ(est::linear_gemm_time(bf, T, h, h), bf_gemm);
}

// A 70B-class layer on Hopper gains less from FP8 over bf16 than the FP8 peak with fast
// accumulation throughout would give, and still gains well over 1.6×.
TEST(Fp8SplitAccumulation, AHopperLayerGainsLessFromFp8ThanWithFastAccumulation) {
    const auto llama = [](Fp8Recipe r, double accum) {
        auto L = layer(8192, 28672, r);
        L.fp8_accum_factor = accum;
        return est::layer_forward_time(L).gemm;
    };
    const double bf16 = llama(Fp8Recipe::none, 1.0);
    const double h100 = llama(Fp8Recipe::delayed, est::fp8_split_accum_factor(GpuGeneration::hopper));
    const double ideal = llama(Fp8Recipe::delayed, 1.0);
    EXPECT_LT(bf16 / h100, bf16 / ideal);
    EXPECT_GT(bf16 / h100, 1.6) << "FP8 still speeds the GEMMs well up";
}

// fp8sp: under sequence parallelism on a TN-only FP8 GEMM (Hopper) Transformer Engine casts
// a gathered operand's shard to the rowwise orientation only (one byte fewer written) and
// transposes the gathered tensor in the backward (read + write one byte per element, t times
// the shard). MXFP8 and Blackwell make no gathered transpose.
TEST(Fp8SequenceParallel, GatheredOperandsAreTransposedAfterTheGatherOnHopper) {
    for (auto [recipe, shard] : {std::pair{Fp8Recipe::delayed, 3.0}, std::pair{Fp8Recipe::current, 5.0}}) {
        est::Fp8CastBytes c = est::fp8_cast_bytes(recipe, 1, GpuGeneration::hopper);
        est::fp8_sp_gathered_transpose(c, recipe, GpuGeneration::hopper);
        EXPECT_DOUBLE_EQ(c.sp_shard, shard);
        EXPECT_DOUBLE_EQ(c.sp_transpose, 2.0);
        EXPECT_DOUBLE_EQ(c.shard_in(), shard);
        est::Fp8CastBytes b = est::fp8_cast_bytes(recipe, 1, GpuGeneration::blackwell);
        est::fp8_sp_gathered_transpose(b, recipe, GpuGeneration::blackwell);
        EXPECT_DOUBLE_EQ(b.sp_transpose, 0.0);
        EXPECT_DOUBLE_EQ(b.shard_in(), b.in_fwd);
    }
    est::Fp8CastBytes mx = est::fp8_cast_bytes(Fp8Recipe::mxfp8, 1, GpuGeneration::blackwell);
    est::fp8_sp_gathered_transpose(mx, Fp8Recipe::mxfp8, GpuGeneration::blackwell);
    EXPECT_DOUBLE_EQ(mx.sp_transpose, 0.0);

    // One TP-4 layer with sequence parallelism: the two gathered inputs (QKV, FC1) and the two
    // gathered output gradients (proj, FC2), T·h/t elements each on the shard.
    const double t = 4, T = 8192, h = 8192;
    auto tp4 = [&](bool gathered_transpose) {
        auto L = layer(h, 28672 / t, Fp8Recipe::delayed);
        L.t = t, L.sp = true, L.heads_l = h / 128 / t, L.kv_l = 8 / t;
        if (gathered_transpose) est::fp8_sp_gathered_transpose(L.fp8_cast, Fp8Recipe::delayed, GpuGeneration::hopper);
        return est::layer_forward_time(L);
    };
    const est::LayerTime plain = tp4(false), hopper = tp4(true);
    const double shard = 2.0 * T * h / t, hbm = layer(h, 1, Fp8Recipe::none).hbm;
    EXPECT_NEAR(hopper.fp8_cast - plain.fp8_cast, -1.0 * shard / hbm, 1e-12);
    EXPECT_NEAR(hopper.fp8_cast_bwd - plain.fp8_cast_bwd, (-1.0 * shard + 2.0 * t * 2.0 * shard) / hbm, 1e-12);
    EXPECT_GT(hopper.fp8_cast + hopper.fp8_cast_bwd, plain.fp8_cast + plain.fp8_cast_bwd);
}

}  // namespace
