// slowest_gpu.cpp — the slowest GPU sets a synchronous step's pace (issue 29 point 5, slowest):
// the expected slowest of n GPUs in standard deviations (Blom's approximation, checked against
// exact order statistics and an independent inversion of the normal distribution), and what it
// does to a job's kernel rates: GEMMs and attention on a GPU slow by 1 + spread · E[max of n],
// n the GPUs in the job; a CPU job and a single GPU keep their rates.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "model/estimate_internal.h"
#include "ptd/model/estimate.h"

#include "job_test_util.h"

namespace {

using namespace ptd;

// Φ⁻¹(q) by bisection on std::erfc: slow, independent of the rational approximation.
double inverse_normal_by_bisection(double q) {
    double lo = -10, hi = 10;
    for (int i = 0; i < 200; ++i) {
        const double mid = 0.5 * (lo + hi);
        (0.5 * std::erfc(-mid / std::sqrt(2.0)) < q ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
}

TEST(SlowestGpu, ExpectedSlowestOfIsBlomsOrderStatistic) {
    EXPECT_EQ(expected_slowest_of(0), 0.0);
    EXPECT_EQ(expected_slowest_of(1), 0.0);
    // Exact expected maxima of n standard normals: 1/√π for 2, 1.4236 for 8 (tables of normal
    // order statistics); Blom's form is within 0.03 of both.
    EXPECT_NEAR(expected_slowest_of(2), 1.0 / std::sqrt(M_PI), 0.03);
    EXPECT_NEAR(expected_slowest_of(8), 1.4236, 0.015);
    double previous = 0;
    for (int n = 2; n <= 65536; n *= 2) {
        const double e = expected_slowest_of(n);
        EXPECT_NEAR(e, inverse_normal_by_bisection((n - 0.375) / (n + 0.25)), 1e-6) << n;
        EXPECT_GT(e, previous) << n;  // more GPUs, a slower slowest one
        previous = e;
    }
    EXPECT_NEAR(expected_slowest_of(8192), 3.787, 0.001);
}

// A job of `model` on nodes × 8 GPUs of `gpu`, TP tp and PP pp, 8 sequences a node per step.
JobSpec job_of(const std::string& model, const std::string& gpu, int nodes, int tp, int pp) {
    return ptd_test::job_from_text(ptd_test::job_text(
        {.preset = model,
         .nodes = nodes,
         .gpu = gpu,
         .parallel = "tp = " + std::to_string(tp) + "\npp = " + std::to_string(pp) + "\n",
         .training = "global_batch = " + std::to_string(8 * nodes) + "\nmicro_batch = 1\n"}));
}

est::LayoutDerived layout_of(int t, int p, int dp, int c) {
    est::LayoutDerived L{};
    L.t = t, L.p = p, L.dp = dp, L.c = c;
    return L;
}

TEST(SlowestGpu, TheJobsGpuCountSlowsItsTensorCoreKernels) {
    const JobSpec job = job_of("llama3-8b", "h100-sxm", 128, 8, 1);
    const double spread = time_model_constants().gpu_speed_spread;
    ASSERT_GT(spread, 0.0);
    est::LayoutDerived one = layout_of(1, 1, 1, 1), many = layout_of(8, 4, 16, 2);
    est::assign_kernel_profile(job, one);
    est::assign_kernel_profile(job, many);
    // One GPU has no slower peer: the generation's fitted rates as they are.
    const KernelEfficiency k = time_model_constants().kernel(GpuGeneration::hopper);
    EXPECT_DOUBLE_EQ(one.gemm_eff_max, k.gemm_eff_max);
    // 1,024 GPUs (t·p·dp·c): both rates slow by the expected slowest of 1,024.
    const double slowest = 1.0 + spread * expected_slowest_of(1024);
    EXPECT_NEAR(one.gemm_eff_max / many.gemm_eff_max, slowest, 1e-12);
    EXPECT_NEAR(one.flash_eff / many.flash_eff, slowest, 1e-12);
    EXPECT_GT(slowest, 1.04);  // 1.5% · 3.23
}

TEST(SlowestGpu, ACpuJobKeepsItsRatesAndNoSpreadMeansNoSlowdown) {
    const JobSpec cpu = job_of("tiny-gpt", "cpu", 1, 2, 2);
    est::LayoutDerived one = layout_of(1, 1, 1, 1), eight = layout_of(2, 2, 2, 1);
    est::assign_kernel_profile(cpu, one);
    est::assign_kernel_profile(cpu, eight);
    EXPECT_DOUBLE_EQ(one.gemm_eff_max, eight.gemm_eff_max);
    EXPECT_DOUBLE_EQ(one.flash_eff, eight.flash_eff);

    TimeModelConstants& k = time_model_constants();
    const double saved = k.gpu_speed_spread;
    k.gpu_speed_spread = 0;
    const JobSpec gpu = job_of("llama3-8b", "h100-sxm", 16, 1, 1);
    est::LayoutDerived a = layout_of(1, 1, 1, 1), b = layout_of(8, 1, 16, 1);
    est::assign_kernel_profile(gpu, a);
    est::assign_kernel_profile(gpu, b);
    k.gpu_speed_spread = saved;
    EXPECT_DOUBLE_EQ(a.gemm_eff_max, b.gemm_eff_max);
}

}  // namespace
