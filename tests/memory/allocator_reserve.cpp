// allocator_reserve.cpp — which bytes the caching allocator's reserve (estimate.fragmentation)
// is charged on (issue 29 point 6: a run that happened cannot be OOM). Megatron-core's
// DistributedDataParallel allocates the parameters and gradients as contiguous buffers when
// the model is built, which never return to the cache; everything allocated and freed over the
// step (activations, buffers, optimizer states, FSDP / ZeRO shards and gathers) is.
#include <string>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"

#include "job_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

// Llama 3 8B on 8 H100, distributed optimizer, under `framework`.
JobSpec llama8b_under(const std::string& framework, const std::string& parallel_extra = "distributed_optimizer = true\n") {
    return job_from_text(llama8b_h100x8_job(parallel_extra, "framework = \"" + framework + "\"\n", 128));
}

TEST(AllocatorReserve, MegatronCoreParamAndGradBuffersAddNoReserve) {
    for (const char* framework : {"megatron", "nemo"}) {
        const Estimate e = estimate_job(llama8b_under(framework));
        ASSERT_FALSE(e.stages.empty()) << framework;
        const MemoryBreakdown& m = e.stages[0].mem;
        ASSERT_GT(m.params, 0.0);
        ASSERT_GT(m.grads, 0.0);
        // The reserve is 5% of what churns: the optimizer states, activations and buffers.
        EXPECT_NEAR(m.fragmentation, 0.05 * (m.optimizer + m.activations + m.temp), 1e-6 * m.fragmentation)
            << framework;
        EXPECT_LT(m.fragmentation, 0.05 * (m.model_states() + m.activations + m.temp)) << framework;
    }
}

TEST(AllocatorReserve, ShardedAndFsdpStatesStillCountInTheReserve) {
    // ZeRO / FSDP allocate and free their shards and gathers through the step (DeepSpeed's
    // partitioned gradients, FSDP2's per-module all-gathers): the whole model state counts.
    const Estimate titan = estimate_job(llama8b_under("torchtitan", "zero = 3\n"));
    const Estimate ds = estimate_job(llama8b_under("deepspeed", "zero = 1\n"));
    for (const Estimate* e : {&titan, &ds}) {
        ASSERT_FALSE(e->stages.empty());
        const MemoryBreakdown& m = e->stages[0].mem;
        EXPECT_NEAR(m.fragmentation, 0.05 * (m.model_states() + m.activations + m.temp), 1e-6 * m.fragmentation);
    }
}

TEST(AllocatorReserve, TheReserveFollowsEstimateFragmentation) {
    JobSpec job = llama8b_under("nemo");
    job.estimate.fragmentation = 0.1;
    const Estimate e = estimate_job(job);
    ASSERT_FALSE(e.stages.empty());
    const MemoryBreakdown& m = e.stages[0].mem;
    EXPECT_NEAR(m.fragmentation, 0.1 * (m.optimizer + m.activations + m.temp), 1e-6 * m.fragmentation);
    EXPECT_NEAR(m.total(), m.model_states() + m.activations + m.temp + m.cuda_context + m.nccl + m.fragmentation,
                1e-6 * m.total());
}

}  // namespace
