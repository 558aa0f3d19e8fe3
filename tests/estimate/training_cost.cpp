// training_cost.cpp — time, cost, energy and checkpoints of a whole run
// (estimators/src/model/training_cost.cpp, issue 28 point 5): Young's interval and the goodput
// on hand-worked numbers, every figure of training_cost() against its formula, the checkpoint
// bytes per parameter, the job's own interval (launch.checkpoint_every), the sourced defaults, and the estimate carrying the run for Llama 3 70B
// on 1,024 H100 against Meta's published GPU-hours.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/model/training_cost.h"

#include "job_test_util.h"
#include "text_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

// Young: τ = √(2 · δ · M). A 10 s save and a failure every 50 h: √(2 · 10 · 180,000) = 1,897.4 s.
TEST(TrainingCost, YoungIntervalByHand) {
    EXPECT_NEAR(young_interval_s(10, 180000), 1897.366596, 1e-5);
    EXPECT_EQ(young_interval_s(0, 180000), 0);  // no save time: no interval to suggest
    EXPECT_EQ(young_interval_s(10, 0), 0);
}

// goodput = τ/(τ+δ) · (1 − (R + (τ+δ)/2)/M): τ 1,000 s, δ 10 s, R 20 s, M 100,000 s →
// 1000/1010 · (1 − (20 + 505)/100000) = 0.990099 · 0.99475 = 0.984901.
TEST(TrainingCost, GoodputByHand) {
    EXPECT_NEAR(checkpoint_goodput(1000, 10, 20, 100000), 1000.0 / 1010.0 * (1 - 525.0 / 100000.0), 1e-12);
    EXPECT_NEAR(checkpoint_goodput(1000, 10, 20, 100000), 0.984901, 1e-6);
    EXPECT_DOUBLE_EQ(checkpoint_goodput(1000, 0, 0, 0), 1.0);   // no failures, free saves
    EXPECT_DOUBLE_EQ(checkpoint_goodput(1000, 10, 0, 400), 0);  // failures outpace the work: clamped
}

// Young's interval is the first-order optimum: saving half or twice as often loses more.
TEST(TrainingCost, YoungIntervalMaximisesTheGoodput) {
    const double save = 30, mtbf = 40 * 3600.0;
    const double tau = young_interval_s(save, mtbf);
    const double best = checkpoint_goodput(tau, save, save, mtbf);
    for (double f : {0.5, 0.8, 1.25, 2.0}) EXPECT_GT(best, checkpoint_goodput(tau * f, save, save, mtbf)) << f;
}

TrainingCostInputs hand_inputs() {
    TrainingCostInputs in;
    in.step_s = 10;
    in.step_range = {9, 12};
    in.step_confidence = 0.8;
    in.tokens_per_step = 1e6;
    in.tokens = 1.0005e9;  // 1,000.5 steps → 1,001
    in.gpus = 64, in.nodes = 8;
    in.gpu_power_w = 700, in.host_power_w = 4600, in.pue = 1.1;
    in.gpu_hour_usd = 2;
    in.checkpoint_bytes = 1e12, in.storage_gbps = 100;  // 10 s each way
    in.failures_per_gpu_hour = 1e-4;                    // 64 GPUs: a failure every 3600 / 0.0064 = 562,500 s
    return in;
}

// Every figure against its formula, on round numbers.
TEST(TrainingCost, EveryFigureByItsFormula) {
    const TrainingCostInputs in = hand_inputs();
    const TrainingCost c = training_cost(in);
    ASSERT_TRUE(c.known);
    EXPECT_EQ(c.steps, 1001);  // tokens rounded up to whole steps
    EXPECT_EQ(c.tokens, 1001e6);
    EXPECT_DOUBLE_EQ(c.compute_s, 10010);
    EXPECT_DOUBLE_EQ(c.compute_range.lo, 9009);
    EXPECT_DOUBLE_EQ(c.compute_range.hi, 12012);
    EXPECT_DOUBLE_EQ(c.save_s, 10);
    EXPECT_DOUBLE_EQ(c.load_s, 10);
    const double mtbf = 3600.0 / (1e-4 * 64);  // 562,500 s
    EXPECT_DOUBLE_EQ(c.mtbf_s, mtbf);
    EXPECT_DOUBLE_EQ(c.interval_s, std::sqrt(2 * 10 * mtbf));
    EXPECT_EQ(c.interval_steps, std::round(std::sqrt(2 * 10 * mtbf) / 10));
    const double goodput = checkpoint_goodput(c.interval_s, 10, 10, mtbf);
    EXPECT_DOUBLE_EQ(c.goodput, goodput);
    EXPECT_DOUBLE_EQ(c.wall_s, 10010 / goodput);
    EXPECT_DOUBLE_EQ(c.wall_range.hi, 12012 / goodput);
    EXPECT_DOUBLE_EQ(c.expected_failures, c.wall_s / mtbf);
    EXPECT_DOUBLE_EQ(c.gpu_hours, c.wall_s * 64 / 3600);
    EXPECT_DOUBLE_EQ(c.gpu_hours_range.lo, 9009 / goodput * 64 / 3600);
    ASSERT_TRUE(c.has_cost);
    EXPECT_DOUBLE_EQ(c.cost_usd, c.gpu_hours * 2);
    EXPECT_DOUBLE_EQ(c.cost_range.hi, c.gpu_hours_range.hi * 2);
    ASSERT_TRUE(c.has_energy);
    EXPECT_DOUBLE_EQ(c.power_kw, (64 * 700.0 + 8 * 4600.0) * 1.1 / 1000);  // 89.76 kW
    EXPECT_NEAR(c.energy_kwh, 89.76 * c.wall_s / 3600, 1e-9);
    EXPECT_NEAR(c.energy_range.lo, 89.76 * c.wall_range.lo / 3600, 1e-9);
}

// issue 31: the job's own interval (launch.checkpoint_every) beside Young's. Every 100 steps
// of 10 s: τ = 1,000 s, goodput = 1000/1010 · (1 − (10 + 505)/562,500); each failure throws away
// half an interval, so lost steps = failures · 100 / 2 (Young's at its own interval likewise).
TEST(TrainingCost, TheJobsCheckpointIntervalBesideYoungs) {
    TrainingCostInputs in = hand_inputs();
    in.job_interval_steps = 100;
    const TrainingCost c = training_cost(in);
    const double mtbf = 562500;
    EXPECT_DOUBLE_EQ(c.job_interval_s, 1000);
    EXPECT_DOUBLE_EQ(c.job_goodput, 1000.0 / 1010.0 * (1 - (10 + 505.0) / mtbf));
    EXPECT_DOUBLE_EQ(c.job_expected_failures, 10010 / c.job_goodput / mtbf);
    EXPECT_DOUBLE_EQ(c.job_expected_steps_lost, c.job_expected_failures * 50);
    EXPECT_DOUBLE_EQ(c.expected_steps_lost, c.expected_failures * c.interval_steps / 2);
    EXPECT_LT(c.job_goodput, c.goodput);  // Young's interval (about 335 steps) loses less
    in.job_interval_steps = 0;
    EXPECT_EQ(training_cost(in).job_interval_s, 0);  // none named: nothing computed
}

TEST(TrainingCost, StepsWithoutATokenBudgetAndNothingInvented) {
    TrainingCostInputs in = hand_inputs();
    in.tokens = 0, in.steps = 500;
    in.gpu_hour_usd = 0;  // no price: no cost
    in.gpu_power_w = 0;   // no power: no energy
    in.step_range = {};   // no interval
    const TrainingCost c = training_cost(in);
    EXPECT_EQ(c.steps, 500);
    EXPECT_DOUBLE_EQ(c.compute_s, 5000);
    EXPECT_EQ(c.compute_range.hi, 0);
    EXPECT_EQ(c.wall_range.hi, 0);
    EXPECT_FALSE(c.has_cost);
    EXPECT_EQ(c.cost_usd, 0);
    EXPECT_FALSE(c.has_energy);
    EXPECT_EQ(c.energy_kwh, 0);
}

TEST(TrainingCost, FailuresOutpacingTheSavesNeverFinish) {
    TrainingCostInputs in = hand_inputs();
    in.checkpoint_bytes = 1e15;  // a 10,000 s save
    in.failures_per_gpu_hour = 0.01;  // 64 GPUs: a failure every 5,625 s, shorter than save + load
    const TrainingCost c = training_cost(in);
    EXPECT_EQ(c.goodput, 0);
    EXPECT_EQ(c.wall_s, 0);
    EXPECT_FALSE(c.has_cost);
}

// Weights in the training dtype + master weights + Adam's m and v; no gradients.
TEST(TrainingCost, CheckpointBytesPerParameter) {
    TrainingSpec t;  // bf16, adamw, fp32 states
    EXPECT_DOUBLE_EQ(checkpoint_bytes_per_param(t), 2 + 4 + 4 + 4);
    t.optimizer = Optimizer::sgd;  // momentum only
    EXPECT_DOUBLE_EQ(checkpoint_bytes_per_param(t), 2 + 4 + 4);
    t = TrainingSpec{};
    t.precision = Precision::fp32;  // the weights are the master copy
    EXPECT_DOUBLE_EQ(checkpoint_bytes_per_param(t), 4 + 4 + 4);
    t = TrainingSpec{};
    t.exp_avg_dtype = t.exp_avg_sq_dtype = StateDtype::bf16;  // precision-aware optimizer
    EXPECT_DOUBLE_EQ(checkpoint_bytes_per_param(t), 2 + 4 + 2 + 2);
}

TEST(TrainingCost, SourcedDefaults) {
    // Llama 3: 419 interruptions / (54 days · 24 h · 16,384 GPUs).
    EXPECT_NEAR(kLlama3FailuresPerGpuHour, 1.97328e-5, 1e-9);
    EXPECT_NEAR(kLlama3StorageGbpsPerGpu, 0.1220703, 1e-6);
    ClusterSpec c;
    c.gpus_per_node = 8;
    c.gpu.name = "h100-sxm";  // DGX H100: 10.2 kW − 8 × 700 W
    std::string why;
    EXPECT_DOUBLE_EQ(default_host_power_w(c, &why), 4600);
    expect_mentions(why, {"DGX H100", "upper bound"});
    c.gpu.name = "a100-80gb";  // DGX A100: 6.5 kW − 8 × 400 W
    EXPECT_DOUBLE_EQ(default_host_power_w(c, nullptr), 3300);
    c.gpu.name = "l40s";  // no published system: nothing assumed
    EXPECT_EQ(default_host_power_w(c, &why), 0);
    expect_mentions(why, {"cluster.host_power_w"});
}

// The done case: Llama 3 70B for 15T tokens on 1,024 H100. Meta's model card gives
// 6.4M H100 GPU-hours for Llama 3 70B; the estimate of this Megatron layout (tp 8, pp 4, vpp 5,
// 4M-token batches) must land within a factor of two of it, and every part must be there.
TEST(TrainingCost, Llama3_70bOn1024H100ForFifteenTrillionTokens) {
    const JobSpec job = load_asset("llama3-70b-h100.toml", {"cluster.nodes=128", "training.tokens=15e12",
                                                            "cluster.gpu_hour_usd=2.5"});
    const Estimate est = estimate_job(job);
    const TrainingCost& c = est.training;
    ASSERT_TRUE(c.known);
    EXPECT_EQ(c.steps, std::ceil(15e12 / (512.0 * 8192)));
    EXPECT_GT(c.gpu_hours, 6.4e6 / 2);
    EXPECT_LT(c.gpu_hours, 6.4e6 * 2);
    EXPECT_LT(c.gpu_hours_range.lo, c.gpu_hours);
    EXPECT_GT(c.gpu_hours_range.hi, c.gpu_hours);
    EXPECT_DOUBLE_EQ(c.cost_usd, c.gpu_hours * 2.5);
    EXPECT_TRUE(c.has_energy);
    // The checkpoint: every parameter's 14 bytes once; per rank the memory model's weights + states.
    EXPECT_DOUBLE_EQ(c.checkpoint_bytes, (double)est.params.total * 14);
    const MemoryBreakdown& worst = est.stages[(size_t)est.worst_stage].mem;
    EXPECT_GE(c.checkpoint_rank_bytes, worst.params + worst.optimizer);
    EXPECT_DOUBLE_EQ(c.save_s, c.checkpoint_bytes / (kLlama3StorageGbpsPerGpu * 1024 * 1e9));
    EXPECT_GT(c.goodput, 0.9);
    EXPECT_LT(c.goodput, 1.0);
    expect_mentions(c.inputs.sources.failures, {"2407.21783"});
}

}  // namespace
