// schedule_simulation.cpp — the block-by-block schedule simulation at its edges: a block order with a cycle stops loudly,
// fewer micro-batches than stages places every block, and job validation refuses the
// interleaved micro-batch counts whose order would have a cycle.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/timeline/timeline.h"

#include "job_test_util.h"

namespace {

using namespace ptd;
using ptd_test::presets;

// The schedule simulation with a block order that has a cycle: Megatron's interleaved order
// with a group size N < pp (here N = 2, pp = 4) makes stage 0 wait for a chunk-0 forward
// that the last stage runs only after a backward that waits on stage 0. Job validation
// refuses such N (parallel.microbatch_group_size); were it reached, the simulation must stop
// loudly rather than return the makespan of the blocks it managed to place (it used to break
// out of its loop in release builds, where the assertion is compiled out).
TEST(ScheduleSimulationDeathTest, CyclicBlockOrderStopsInsteadOfReturningAPartialMakespan) {
    const int p = 4, v = 2, m = 8;
    const std::vector<double> fwd((size_t)p * v, 1.0), bwd((size_t)p * v, 2.0);
    PipelineDurations d{p, v, m, fwd, bwd};
    d.schedule = PipelineSchedule::interleaved;
    d.group = 2;
    std::vector<double> end((size_t)p);
    EXPECT_DEATH(simulate_pipeline(d, end), "deadlocked");
}

// The Llama 3 paper's "fewer micro-batches than the number of stages" (arXiv 2407.21783
// §3.3.2) is the one N < pp case its schedule defines: N = M, every micro-batch through each
// chunk in turn, all forwards before the backwards. The simulation runs it with the default
// N (the last, only group holds all M micro-batches) and places every block.
TEST(ScheduleSimulation, FewerMicroBatchesThanStagesPlacesEveryBlock) {
    const int p = 4, v = 2, m = 2;
    const std::vector<double> fwd((size_t)p * v, 1.0), bwd((size_t)p * v, 2.0);
    PipelineDurations d{p, v, m, fwd, bwd};
    d.schedule = PipelineSchedule::interleaved;
    std::vector<double> end((size_t)p);
    std::vector<PlacedOp> placed;
    const double makespan = simulate_pipeline(d, end, &placed);
    EXPECT_EQ((int)placed.size(), 2 * p * v * m);
    // Every forward precedes every backward on each stage (breadth-first), and the makespan
    // is at least the critical path of one micro-batch: v·p forwards then v·p backwards.
    EXPECT_GE(makespan, v * p * (1.0 + 2.0));
    for (int s = 0; s < p; ++s) {
        bool seen_backward = false;
        for (const PlacedOp& op : placed) {
            if (op.stage != s) continue;
            if (op.op.pass == Pass::backward) seen_backward = true;
            else EXPECT_FALSE(seen_backward) << "stage " << s;
        }
    }
}

// Job validation refuses, with N left at pp, the micro-batch counts whose last interleaved group
// is short of pp (Megatron-LM raises for them; the order of p 4, v 3, m 5 has a cycle), so the
// simulation's stop is unreachable from a job; fewer micro-batches than stages and multiples of
// pp stay accepted.
TEST(ScheduleSimulation, ShortLastInterleavedGroupIsRefusedByValidation) {
    auto job = [](int global_batch) {
        return std::string("[model]\narch = \"llama\"\nlayers = 24\nhidden = 1024\nheads = 8\nkv_heads = 8\n"
                           "vocab = 32000\nseq_len = 1024\n[cluster]\nnodes = 1\ngpus_per_node = 4\n"
                           "gpu = \"h100-sxm\"\n[parallel]\ntp = 1\npp = 4\nvpp = 3\n[training]\nmicro_batch = 1\n"
                           "global_batch = ") + std::to_string(global_batch) + "\n";
    };
    auto bad = load_job_text(job(5), "bad.toml", presets());
    ASSERT_FALSE(bad);
    const std::string msg = bad.error().str();
    EXPECT_NE(msg.find("training.global_batch"), std::string::npos) << msg;
    EXPECT_NE(msg.find("5 micro-batches"), std::string::npos) << msg;
    for (int ok : {2, 4, 8}) {
        auto j = load_job_text(job(ok), "ok.toml", presets());
        ASSERT_TRUE(j) << ok << ": " << j.error().str();
        EXPECT_GT(estimate_job(*j).step_s, 0.0);
    }
}

}  // namespace
