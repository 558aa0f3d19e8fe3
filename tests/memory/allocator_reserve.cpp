// allocator_reserve.cpp — which bytes the caching allocator's reserve (estimate.fragmentation)
// is charged on (issue 29 point 6: a run that happened cannot be OOM). Megatron-core's
// DistributedDataParallel allocates the parameters and gradients as contiguous buffers when
// the model is built, which never return to the cache, and its mixed-precision optimizers make
// the fp32 main weights when they are constructed (NeMo 1.x's Apex DistributedFusedAdam its
// whole state); everything allocated and freed over the step (activations, buffers, Adam's
// moments made at the first step, FSDP / ZeRO shards and gathers) is. The user*
// rows of bench/accuracy/published_runs.toml (runs written from their published description
// only) check what that means for a run that happened, and the run file's tied_embeddings key.
#include <string>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/spec/stack_defaults.h"

#include "job_test_util.h"
#include "published_runs_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

constexpr double kGiB = 1024.0 * 1024 * 1024;

// Llama 3 8B on 8 H100, distributed optimizer, under `framework`.
JobSpec llama8b_under(const std::string& framework, const std::string& parallel_extra = "distributed_optimizer = true\n",
                      const std::string& training_extra = "") {
    return job_from_text(llama8b_h100x8_job(parallel_extra, "framework = \"" + framework + "\"\n" + training_extra, 128));
}

// The fp32 main weights' share of a bf16 Adam rank's optimizer bytes: 4 of 4 + 4 + 4.
constexpr double kMasterShare = 4.0 / 12.0;

TEST(AllocatorReserve, MegatronCoreParamAndGradBuffersAddNoReserve) {
    for (const char* framework : {"megatron", "nemo"}) {
        const Estimate e = estimate_job(llama8b_under(framework));
        ASSERT_FALSE(e.stages.empty()) << framework;
        const MemoryBreakdown& m = e.stages[0].mem;
        ASSERT_GT(m.params, 0.0);
        ASSERT_GT(m.grads, 0.0);
        // The reserve is 5% of what churns: Adam's moments, activations and buffers.
        EXPECT_NEAR(m.fragmentation, 0.05 * (m.optimizer * (1 - kMasterShare) + m.activations + m.temp),
                    1e-6 * m.fragmentation)
            << framework;
        EXPECT_LT(m.fragmentation, 0.05 * (m.model_states() + m.activations + m.temp)) << framework;
    }
}

TEST(AllocatorReserve, MainWeightsMadeByThePrecisionAwareOptimizerStillCountInTheReserve) {
    // --use-precision-aware-optimizer: Transformer Engine's FusedAdam holds the master copy in its
    // state, made at the first step like the moments: the whole optimizer shard churns.
    for (const char* dtypes : {"exp_avg_dtype = \"bf16\"\nexp_avg_sq_dtype = \"bf16\"\n",
                               "main_params_dtype = \"fp32-remainders\"\n"}) {
        const Estimate e = estimate_job(llama8b_under("megatron", "distributed_optimizer = true\n", dtypes));
        ASSERT_FALSE(e.stages.empty()) << dtypes;
        const MemoryBreakdown& m = e.stages[0].mem;
        ASSERT_GT(m.optimizer, 0.0) << dtypes;
        EXPECT_NEAR(m.fragmentation, 0.05 * (m.optimizer + m.activations + m.temp), 1e-6 * m.fragmentation) << dtypes;
    }
    // Without the distributed optimizer the fp32 main weights are whole, and still made up front.
    const Estimate whole = estimate_job(llama8b_under("megatron", ""));
    ASSERT_FALSE(whole.stages.empty());
    const MemoryBreakdown& w = whole.stages[0].mem;
    EXPECT_NEAR(w.fragmentation, 0.05 * (w.optimizer * (1 - kMasterShare) + w.activations + w.temp),
                1e-6 * w.fragmentation);
}

TEST(AllocatorReserve, ApexDistributedAdamStateBucketsAddNoReserve) {
    // NeMo 1.x's Apex DistributedFusedAdam with store_params = False (no master copy: the
    // optimizer dtype is the weights' bf16): MegatronBaseModel.configure_optimizers initialises
    // every parameter's state before training, one contiguous exp_avg / exp_avg_sq shard per
    // bucket, so no optimizer byte churns. Worked example: Llama 3 8B, 8 H100, dp 8, bf16
    // moments, 2 + 2 = 4 bytes per parameter over 8 ranks.
    const std::string apex = "main_params_dtype = \"none\"\nexp_avg_dtype = \"bf16\"\nexp_avg_sq_dtype = \"bf16\"\n";
    for (const char* framework : {"megatron", "nemo"}) {
        const Estimate e = estimate_job(llama8b_under(framework, "distributed_optimizer = true\n", apex));
        ASSERT_FALSE(e.stages.empty()) << framework;
        const MemoryBreakdown& m = e.stages[0].mem;
        ASSERT_NEAR(m.optimizer, m.params * 4.0 / 2.0 / 8.0, 1e-6 * m.optimizer) << framework;
        EXPECT_NEAR(m.fragmentation, 0.05 * (m.activations + m.temp), 1e-6 * m.fragmentation) << framework;
    }
    // A 2-byte master of remainders may be Transformer Engine's FusedAdam state (Megatron-core's
    // --store-param-remainders), made at the first step: it still counts.
    const Estimate rem = estimate_job(llama8b_under("nemo", "distributed_optimizer = true\n",
                                                    "main_params_dtype = \"fp32-remainders\"\n"));
    ASSERT_FALSE(rem.stages.empty());
    const MemoryBreakdown& r = rem.stages[0].mem;
    EXPECT_NEAR(r.fragmentation, 0.05 * (r.optimizer + r.activations + r.temp), 1e-6 * r.fragmentation);
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
    EXPECT_NEAR(m.fragmentation, 0.1 * (m.optimizer * (1 - kMasterShare) + m.activations + m.temp),
                1e-6 * m.fragmentation);
    EXPECT_NEAR(m.total(), m.model_states() + m.activations + m.temp + m.cuda_context + m.nccl + m.fragmentation,
                1e-6 * m.total());
}

TEST(AllocatorReserve, NemotronFp8WithTheStacksFp32StatesFitsTheH100ItRanOn) {
    // dgxc-benchmarking's Nemotron-4 340B FP8 on 128 H100 (TP8 PP8 VP12, DP 2), written from the
    // README and the report with NeMo's stack defaults alone (distributed optimizer, bf16
    // gradient buffer, FP8 parameter gather), fp32 Adam states: the user row without the recipe
    // its README names (which keeps bf16 states) and with learned positions, as it was written
    // before the row named them.
    const ::Run& r = published_run("user2411-nemotron4-340b-128gpu-fp8");
    ASSERT_TRUE(r.skip.empty()) << r.skip;
    EXPECT_FALSE(r.job.model.tied_embeddings);  // the run file's tied_embeddings = false reached the job
    JobSpec stack_only = r.job;
    stack_only.training.recipe.clear();
    stack_only.model.position = Position::learned;
    apply_stack_defaults(stack_only);
    ASSERT_EQ(stack_only.training.exp_avg_dtype, StateDtype::fp32);
    const Estimate e = estimate_job(stack_only);
    const MemoryBreakdown& m = e.stages[(size_t)e.worst_stage].mem;
    EXPECT_TRUE(e.fits) << m.total() / kGiB << " GiB";
    // Charged on the contiguous parameter and gradient buffers and the main weights too, the
    // reserve would push it over.
    EXPECT_GT(m.total() + 0.05 * (m.params + m.grads + m.optimizer * kMasterShare), e.usable_bytes)
        << m.total() / kGiB << " GiB";
}

TEST(AllocatorReserve, Llama405bFp8WithFp8ParamGatherAsAUserWritesItFits) {
    // Megatron-Bridge's Llama 3.1 405B FP8-CS on 1024 H100 (TP8 PP8 CP2 VP8), the embedding and
    // loss counted in the pipeline split as ptd validate proposes.
    const ::Run& r = published_run("user2511-llama31-405b-h100-fp8");
    ASSERT_TRUE(r.skip.empty()) << r.skip;
    EXPECT_TRUE(r.job.training.fp8_param_gather);  // the nemo FP8 recipes' default
    const Estimate e = estimate_job(r.job);
    EXPECT_TRUE(e.fits) << e.stages[(size_t)e.worst_stage].mem.total() / kGiB << " GiB";
}

TEST(AllocatorReserve, RunFileTiedEmbeddingsKeyIsReadAndChecked) {
    const std::string row = "[[run]]\nname = \"x-1\"\nframework = \"nemo\"\ngpu = \"h100-sxm\"\ngpus = 8\n"
                            "arch = \"gpt\"\nlayers = 4\nhidden = 256\nheads = 4\nglobal_batch = 8\n"
                            "iteration_s = 1.0\npp = 2\n";
    const std::vector<::Run> by_arch = load_run_text("tied_default.toml", row);
    const std::vector<::Run> untied = load_run_text("tied_false.toml", row + "tied_embeddings = false\n");
    ASSERT_EQ(by_arch.size(), 1u);
    ASSERT_EQ(untied.size(), 1u);
    EXPECT_TRUE(by_arch[0].job.model.tied_embeddings);  // gpt: tied by default
    EXPECT_FALSE(untied[0].job.model.tied_embeddings);
    // Untied with pp > 1: no embedding group on the first and last stage.
    const Estimate a = estimate_job(by_arch[0].job), b = estimate_job(untied[0].job);
    EXPECT_GT(a.stages[0].mem.nccl, b.stages[0].mem.nccl);
}

}  // namespace
