// fp8_amax_reduction.cpp — Transformer Engine's current-scaling FP8 under sequence parallelism
// (curamax): the TP ranks gather FP8 shards cast with one shared scale, so each quantizer of a
// column-parallel input (QKV, FC1) and of a row-parallel output gradient (output projection,
// FC2) all-reduces its amax over the TP group before it casts: two tiny all-reduces a layer
// forward, two backward, two more backward under full recompute; none without sequence
// parallelism and none under delayed scaling, whose scales come from the amax history.
#include <gtest/gtest.h>

#include "job_test_util.h"
#include "ptd/model/estimate.h"

namespace {

// Llama 3 8B on 8 H100 (tp 2, 32 layers, one stage) under `recipe`.
ptd::Estimate llama8b(const std::string& recipe, std::vector<std::string> sets = {}) {
    sets.push_back("training.fp8=" + recipe);
    sets.push_back("training.framework=megatron");
    return ptd::estimate_job(ptd_test::load_asset("llama3-8b-h100.toml", sets));
}

TEST(Fp8AmaxReduction, CurrentScalingAddsFourSmallAllReducesALayerUnderSequenceParallelism) {
    const ptd::Estimate cur = llama8b("current"), del = llama8b("delayed");
    ASSERT_EQ(cur.stages.size(), 1u);
    const double extra = cur.stages[0].tp_s - del.stages[0].tp_s;  // per micro-batch
    const double one = extra / (32 * 4);
    // A 4-byte all-reduce over two NVLink ranks: latency, microseconds.
    EXPECT_GT(one, 2e-6);
    EXPECT_LT(one, 50e-6);
    // Full recompute casts the forward's inputs again in the backward: six a layer.
    const ptd::Estimate cur_full = llama8b("current", {"parallel.recompute=full"});
    const ptd::Estimate del_full = llama8b("delayed", {"parallel.recompute=full"});
    EXPECT_NEAR(cur_full.stages[0].tp_s - del_full.stages[0].tp_s, 32 * 6 * one, 1e-12);
    // Without sequence parallelism nothing is gathered in FP8: no reduction.
    const ptd::Estimate cur_nosp = llama8b("current", {"parallel.sequence_parallel=false"});
    const ptd::Estimate del_nosp = llama8b("delayed", {"parallel.sequence_parallel=false"});
    EXPECT_DOUBLE_EQ(cur_nosp.stages[0].tp_s, del_nosp.stages[0].tp_s);
}

}  // namespace
