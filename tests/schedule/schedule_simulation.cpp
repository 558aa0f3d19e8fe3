// schedule_simulation.cpp — the block-by-block schedule simulation at its edges: a block order with a cycle stops loudly,
// fewer micro-batches than stages places every block, job validation refuses the
// interleaved micro-batch counts whose order would have a cycle, and ranks sharing a host's
// cores compute faster while others wait (processor sharing).
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

// Shared cores (schedule.h CoreSharing). Blocks of 2 s each, all compute, timed with
// 2 ranks on 1 core (measured_share 2): one lone-rank second of work each. p = 2, m = 2,
// 1F1B — stage 0: F0 F1 B0 B1, stage 1: F0 B0 F1 B1:
//   0–1 s0 F0 alone (full speed)    1–3 s0 F1 ∥ s1 F0 (half speed each)
//   3–4 s1 B0 alone                 4–6 s0 B0 ∥ s1 F1
//   6–7 s1 B1 alone                 7–8 s0 B1 alone
// 8 s: the host's 8 s of work over its one core (the work bound), where placing the
// measured 2 s blocks gives 12 s (3 micro-batch slots × 4 s).
TEST(ScheduleSimulation, SharedCoresSpeedUpTheRanksComputingAlone) {
    const int p = 2, m = 2;
    const std::vector<double> two((size_t)p, 2.0);
    PipelineDurations d{p, 1, m, two, two};
    std::vector<double> end((size_t)p);
    EXPECT_DOUBLE_EQ(simulate_pipeline(d, end), 12.0);
    const CoreSharing one_core{.cores = 1, .ranks_per_stage = 1, .measured_share = 2, .fwd_compute = two, .bwd_compute = two};
    d.sharing = &one_core;
    std::vector<PlacedOp> placed;
    EXPECT_NEAR(simulate_pipeline(d, end, &placed), 8.0, 1e-12);
    EXPECT_NEAR(end[0], 8.0, 1e-12);
    EXPECT_NEAR(end[1], 7.0, 1e-12);
    // The planner's entry points give the same placement's makespan.
    EXPECT_NEAR(pipeline_makespan(d, end), 8.0, 1e-12);
    EXPECT_NEAR(pipeline_makespan_lower(d, end), 8.0, 1e-12);
    EXPECT_NEAR(pipeline_makespan_upper(d), 8.0, 1e-12);
    auto block = [&](int stage, Pass pass, int mb) {
        for (const PlacedOp& po : placed)
            if (po.stage == stage && po.op.pass == pass && po.op.micro_batch == mb) return std::pair{po.start_s, po.end_s};
        ADD_FAILURE() << "no block on stage " << stage;
        return std::pair{0.0, 0.0};
    };
    const std::pair<double, double> want[][2] = {{{0, 1}, {1, 3}}, {{1, 3}, {4, 6}}};  // forwards [stage][mb]
    for (int s = 0; s < p; ++s)
        for (int i = 0; i < m; ++i) {
            EXPECT_NEAR(block(s, Pass::forward, i).first, want[s][i].first, 1e-12) << "F" << i << " stage " << s;
            EXPECT_NEAR(block(s, Pass::forward, i).second, want[s][i].second, 1e-12) << "F" << i << " stage " << s;
        }
    EXPECT_NEAR(block(1, Pass::backward, 0).second, 4.0, 1e-12);
    EXPECT_NEAR(block(0, Pass::backward, 0).second, 6.0, 1e-12);
    EXPECT_NEAR(block(1, Pass::backward, 1).second, 7.0, 1e-12);

    // A block's communication takes no core: 3 s blocks of which 2 s compute leave 1 s of
    // waiting after the compute. m = 1: s0 F 0–1 compute, 1–2 wait; s1 F 2–4; s1 B 4–6; s0 B 6–8.
    const std::vector<double> three((size_t)p, 3.0);
    PipelineDurations c{p, 1, 1, three, three};
    c.sharing = &one_core;
    EXPECT_NEAR(simulate_pipeline(c, end), 8.0, 1e-12);

    // Every rank computing all the time (no pipeline, 2 ranks of one stage on the core they
    // were measured on): the blocks take what was measured.
    const std::vector<double> one_stage{2.0};
    PipelineDurations g{1, 1, 3, one_stage, one_stage};
    const CoreSharing busy{.cores = 1, .ranks_per_stage = 2, .measured_share = 2, .fwd_compute = one_stage, .bwd_compute = one_stage};
    g.sharing = &busy;
    std::vector<double> end1(1);
    EXPECT_NEAR(simulate_pipeline(g, end1), 12.0, 1e-12);
}

// Ranks that waited in their collectives while the probes ran (busy 0.5 of their probed time)
// shared the core with 1 + (2 − 1) · 0.5 = 1.5 computing ranks, not 2: a 2 s compute part is
// 2 / 1.5 lone-rank seconds. Alone (p = 2, m = 1: every block runs by itself) each block takes
// that, 4 × 4/3 s, where ranks that never waited would take 4 × 1 s; with every rank of the
// host computing (one stage of 2 ranks on the core) the blocks take their probed 2 s again.
TEST(ScheduleSimulation, RanksThatWaitedWhileProbedRunAloneAtTheShareTheyHad) {
    const int p = 2;
    const std::vector<double> two((size_t)p, 2.0);
    PipelineDurations d{p, 1, 1, two, two};
    std::vector<double> end((size_t)p);
    const CoreSharing never_waited{.cores = 1, .ranks_per_stage = 1, .measured_share = 2, .fwd_compute = two,
                                   .bwd_compute = two};
    d.sharing = &never_waited;
    EXPECT_NEAR(simulate_pipeline(d, end), 4.0, 1e-12);
    const CoreSharing half_busy{.cores = 1, .ranks_per_stage = 1, .measured_share = 2, .busy = 0.5, .fwd_compute = two,
                                .bwd_compute = two};
    d.sharing = &half_busy;
    EXPECT_NEAR(simulate_pipeline(d, end), 4 * 2 / 1.5, 1e-12);

    const std::vector<double> one_stage{2.0};
    PipelineDurations g{1, 1, 3, one_stage, one_stage};
    const CoreSharing all_computing{.cores = 1, .ranks_per_stage = 2, .measured_share = 2, .busy = 0.5,
                                    .fwd_compute = one_stage, .bwd_compute = one_stage};
    g.sharing = &all_computing;
    std::vector<double> end1(1);
    EXPECT_NEAR(simulate_pipeline(g, end1), 12.0, 1e-12);
}

}  // namespace
