// megatron_core_scaling.cpp — the check rows of Megatron-Core r0.8.0's weak-scaling table
// (NVIDIA/Megatron-LM README, images/model_table.png; mcore08), read from
// bench/accuracy/published_runs.toml as bench_accuracy reads them. The tests pin what the rows'
// note claims: the table's per-GPU TFLOP/s is Megatron-LM's own count (Korthikanti eq. 7 for
// these shapes) and gives back its MFU column at the H100's 16-bit peak; the rows leave the
// micro-batch and interleaving depth unwritten and the loader chooses them (batchchoice), the
// PP rows interleaved; every row fits the GPUs it ran on.
#include <cmath>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"

#include "published_runs_test_util.h"

namespace {

using namespace ptd;

using ptd_test::published_runs;
using ptd_test::starts_with;

// The table's MFU column, rounded to a point.
const std::map<std::string, double> kPrintedMfu = {
    {"mcore08-gpt-1.7b-48gpu", 0.41},    {"mcore08-gpt-7.1b-96gpu", 0.47},    {"mcore08-gpt-16b-192gpu", 0.49},
    {"mcore08-gpt-32b-384gpu", 0.46},    {"mcore08-gpt-70b-768gpu", 0.42},    {"mcore08-gpt-119b-1536gpu", 0.43},
    {"mcore08-gpt-177b-2304gpu", 0.44},  {"mcore08-gpt-314b-3072gpu", 0.48},  {"mcore08-gpt-462b-6144gpu", 0.47}};

TEST(MegatronCoreScalingRows, PerGpuFiguresGiveBackTheMfuColumnAtTheH100Peak) {
    int seen = 0;
    for (const ::Run& r : published_runs()) {
        const auto it = kPrintedMfu.find(r.name);
        if (it == kPrintedMfu.end()) continue;
        ++seen;
        ASSERT_TRUE(r.skip.empty()) << r.name << ": " << r.skip;
        EXPECT_EQ(r.convention, "korthikanti-eq7-model") << r.name;
        const double peak = r.job.cluster.gpu.peak_tflops(r.job.training.precision) * 1e12;
        EXPECT_NEAR(peak, 989e12, 1e12) << r.name;
        const double mfu = r.source_flops / (r.published_step * r.job.world_size() * peak);
        // Rounded to a point, and against 989 TFLOP/s where the preset has 989.4: the 462B row's
        // 459.9 is 46.50% of 989 (printed 47%) and 46.48% of 989.4.
        EXPECT_NEAR(mfu, it->second, 0.0055) << r.name;
        // Megatron-LM's num_floating_point_operations at f2e5db402c for this shape (GELU, ffn 4h,
        // query groups = heads): 12·B·s·L·h²·((1 + 1 + s/h) + 4 + V/(2·L·h)).
        const ModelSpec& m = r.job.model;
        const double B = r.job.training.global_batch, s = m.seq_len, L = m.layers, h = m.hidden, V = m.vocab;
        const double megatron = 12.0 * B * s * L * h * h * ((2.0 + s / h) + 4.0 + V / (2.0 * L * h));
        EXPECT_NEAR(r.source_flops / megatron, 1.0, 1e-12) << r.name;
    }
    EXPECT_EQ(seen, 9);
}

TEST(MegatronCoreScalingRows, MicroBatchAndDepthAreChosenAndThePipelineRowsInterleave) {
    int seen = 0;
    for (const ::Run& r : published_runs()) {
        if (!starts_with(r.name, "mcore08-")) continue;
        ++seen;
        const JobSpec& j = r.job;
        EXPECT_EQ(r.use, "check") << r.name;
        EXPECT_EQ(j.parallel.dp, 48) << r.name;
        EXPECT_FALSE(j.origin.micro_batch_given) << r.name;
        EXPECT_EQ(j.training.global_batch % (j.training.micro_batch * j.parallel.dp), 0) << r.name;
        // The README's overlaps; Megatron-LM r0.8.0 reduces bf16 gradients in fp32.
        EXPECT_TRUE(j.parallel.overlap_grad_reduce && j.parallel.overlap_param_gather) << r.name;
        EXPECT_TRUE(j.parallel.distributed_optimizer) << r.name;
        EXPECT_TRUE(j.parallel.grad_reduce_in_fp32) << r.name;
        if (j.parallel.pp > 1) {
            EXPECT_EQ(j.parallel.schedule, PipelineSchedule::interleaved) << r.name;
            EXPECT_FALSE(j.origin.vpp_given) << r.name;
            EXPECT_GE(j.parallel.vpp, 2) << r.name;
            EXPECT_EQ(j.model.layers % (j.parallel.pp * j.parallel.vpp), 0) << r.name;
        }
        EXPECT_TRUE(estimate_job(j).fits) << r.name;
    }
    EXPECT_EQ(seen, 9);
}

// The 32B row (TP 8, PP 1, four sequences a replica) is the one the chosen micro-batch decides:
// at micro-batch 1 the fp32 reduce-scatter can only start in the last of four backwards.
TEST(MegatronCoreScalingRows, TheTp8RowWithoutPipelineTakesOneMicroBatchOfFour) {
    for (const ::Run& r : published_runs()) {
        if (r.name != "mcore08-gpt-32b-384gpu") continue;
        EXPECT_EQ(r.job.training.micro_batch, 4);
        JobSpec one = r.job;
        one.training.micro_batch = 1;
        const Estimate chosen = estimate_job(r.job), at_one = estimate_job(one);
        EXPECT_LT(chosen.time.dp_comm, 0.5 * at_one.time.dp_comm);
        return;
    }
    FAIL() << "mcore08-gpt-32b-384gpu is not in published_runs.toml";
}

}  // namespace
