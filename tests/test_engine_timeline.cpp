// test_engine_timeline.cpp — ptd-engine's measured timeline from a real 8-rank CPU run
// (tiny-gpt, TP 2 · PP 2 · DP 2): every rank's file holds every forward and backward block
// of every micro-batch of the recorded steps, in the order the estimators' schedule gives
// for its stage, plus the DP reduction and the optimizer; `ptd trace` turns the run into
// trace event JSON; the flags reject bad values. And the straggler rule on the timeline:
// each rank's compute against the ranks of its pipeline stage, on hand-made timelines and
// on a real run whose rank 5 is slowed (the engine's PTD_ENGINE_INJECT_SLOW_RANK hook),
// named by `ptd launch` and `ptd watch`; the gradient phase's TP calls are not taken from
// a rank's compute.
#include <cstdlib>
#include <map>
#include <set>

#include "engine_run.h"
#include "ptd/timeline/stragglers.h"
#include "ptd/timeline/timeline.h"

namespace {

using namespace engine_run;

TEST(EngineTimeline, EightRankRunRecordsEveryBlockInScheduleOrder) {
    TinyJob tj;
    tj.tp = 2;
    tj.pp = 2;
    tj.dp = 2;
    tj.steps = 3;
    tj.recompute = "full";  // the recompute forwards are recorded as their own blocks
    const std::string job = write_job(tj, "timeline-8rank");
    const std::string run_dir = (temp_root() / "timeline-run").string();
    const auto runs = run_engine(job, 8, {"--run-dir", run_dir, "--timeline-steps", "2"});
    ASSERT_EQ(runs.size(), 8u);
    for (const RankRun& r : runs) ASSERT_EQ(r.exit_code, 0) << describe(runs);

    auto ranks = ptd::read_measured_timeline(run_dir);
    ASSERT_TRUE(ranks.has_value()) << ranks.error().str();
    ASSERT_EQ(ranks->size(), 8u);
    const int p = 2, m = 8 / (2 * 2);  // global batch 8 / (micro-batch 2 · dp 2)
    for (const ptd::MeasuredRank& rank : *ranks) {
        const int stage = rank.header.stage;
        const auto expected = ptd::stage_schedule(p, 1, m, stage);
        std::map<int, std::vector<ptd::ScheduleOp>> compute_by_step;
        std::map<int, int> dp_by_step, optimizer_by_step;
        for (const ptd::TimelineBlock& b : rank.blocks) {
            EXPECT_LE(b.start_s, b.end_s);
            if (b.kind == ptd::BlockKind::forward || b.kind == ptd::BlockKind::backward)
                compute_by_step[b.step].push_back(
                    {b.kind == ptd::BlockKind::forward ? ptd::Pass::forward : ptd::Pass::backward, b.chunk, b.micro_batch});
            if (b.kind == ptd::BlockKind::dp_comm) ++dp_by_step[b.step];
            if (b.kind == ptd::BlockKind::optimizer) ++optimizer_by_step[b.step];
        }
        // Inside every forward and backward block: its TP collectives (TP 2) as `tp` blocks on
        // the communication stream; inside every backward: its recompute forwards on the
        // compute stream. Both tagged with the block's micro-batch and chunk.
        auto inside = [&](const ptd::TimelineBlock& outer, ptd::BlockKind kind, int stream) {
            int n = 0;
            for (const ptd::TimelineBlock& b : rank.blocks)
                if (b.kind == kind && b.stream == stream && b.step == outer.step && b.micro_batch == outer.micro_batch &&
                    b.chunk == outer.chunk && b.start_s >= outer.start_s && b.end_s <= outer.end_s)
                    ++n;
            return n;
        };
        int tp_blocks = 0, recompute_blocks = 0;
        for (const ptd::TimelineBlock& b : rank.blocks) {
            tp_blocks += b.kind == ptd::BlockKind::tp_comm;
            recompute_blocks += b.kind == ptd::BlockKind::recompute;
            if (b.kind == ptd::BlockKind::tp_comm) {
                EXPECT_EQ(b.stream, ptd::kStreamComm);
            }
            if (b.kind != ptd::BlockKind::forward && b.kind != ptd::BlockKind::backward) continue;
            EXPECT_GE(inside(b, ptd::BlockKind::tp_comm, ptd::kStreamComm), 1)
                << "rank " << rank.header.rank << " step " << b.step << " " << ptd::block_kind_name(b.kind) << " mb "
                << b.micro_batch;
            if (b.kind == ptd::BlockKind::backward) {
                EXPECT_GE(inside(b, ptd::BlockKind::recompute, ptd::kStreamCompute), 1)
                    << "rank " << rank.header.rank << " step " << b.step << " bwd mb " << b.micro_batch;
            }
        }
        EXPECT_GT(tp_blocks, 0);
        EXPECT_GT(recompute_blocks, 0);
        // Steps 1 and 2 recorded, step 3 not (--timeline-steps 2).
        ASSERT_EQ(compute_by_step.size(), 2u) << "rank " << rank.header.rank;
        for (int step : {1, 2}) {
            ASSERT_EQ(compute_by_step[step].size(), expected.size()) << "rank " << rank.header.rank << " step " << step;
            for (size_t k = 0; k < expected.size(); ++k)
                EXPECT_EQ(compute_by_step[step][k], expected[k])
                    << "rank " << rank.header.rank << " (stage " << stage << ") step " << step << " block " << k;
            EXPECT_GE(dp_by_step[step], 1) << "rank " << rank.header.rank;
            EXPECT_EQ(optimizer_by_step[step], 1) << "rank " << rank.header.rank;
        }
    }

    // `ptd trace` on the run: valid trace event JSON with one process per rank.
    const std::string trace = (temp_root() / "timeline-trace.json").string();
    const std::string cmd = std::string(PTD_BIN_DIR "/ptd trace ") + run_dir + " -o " + trace + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const json t = json::parse(slurp(trace));
    const json& events = t.is_object() ? t.at("traceEvents") : t;
    ASSERT_TRUE(events.is_array());
    std::set<int> pids;
    size_t complete = 0;
    for (const json& e : events) {
        ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
        if (e["ph"] == "X") {
            ++complete;
            EXPECT_GE(e.at("dur").get<double>(), 0.0);
            EXPECT_TRUE(e.at("ts").is_number());
        }
        pids.insert(e["pid"].get<int>());
    }
    EXPECT_EQ(pids.size(), 8u);
    size_t blocks = 0;
    for (const ptd::MeasuredRank& rank : *ranks) blocks += rank.blocks.size();
    EXPECT_EQ(complete, blocks);
}

TEST(EngineTimeline, BadFlagsAreRejected) {
    TinyJob tj;
    const std::string job = write_job(tj, "timeline-flags");
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"--timeline-steps", "-1"}, {"--timeline-steps", "x"},
          {"--timeline-steps", "2", "--timeline-all"}}) {
        const auto runs = run_engine(job, 1, args);
        ASSERT_EQ(runs.size(), 1u);
        EXPECT_EQ(runs[0].exit_code, 2) << runs[0].err;
        EXPECT_NE(runs[0].err.find("--timeline"), std::string::npos) << runs[0].err;
    }
}

// ---- stragglers --------------------------------------------------------------------------

// One rank's timeline: `steps` steps of 100 ms, each with 4 forward and 4 backward blocks of
// `compute_ms` in all, of which `tp_wait_ms` is a TP collective nested in them.
ptd::MeasuredRank rank_timeline(int rank, int stage, double compute_ms, double tp_wait_ms = 0, int steps = 3) {
    ptd::MeasuredRank m;
    m.header.rank = rank, m.header.stage = stage;
    for (int step = 1; step <= steps; ++step) {
        double t = step * 0.1;
        for (int k = 0; k < 8; ++k) {
            ptd::TimelineBlock b;
            b.kind = k < 4 ? ptd::BlockKind::forward : ptd::BlockKind::backward;
            b.step = step, b.row = rank, b.micro_batch = k % 4, b.start_s = t, b.end_s = t + compute_ms / 8e3;
            m.blocks.push_back(b);
            if (tp_wait_ms > 0) {
                ptd::TimelineBlock w = b;
                w.kind = ptd::BlockKind::tp_comm, w.stream = ptd::kStreamComm, w.end_s = w.start_s + tp_wait_ms / 8e3;
                m.blocks.push_back(w);
            }
            t = b.end_s;
        }
        ptd::TimelineBlock last;  // the step ends at step·0.1 + 0.1 s: 100 ms steps
        last.kind = ptd::BlockKind::optimizer, last.step = step, last.row = rank, last.start_s = step * 0.1 + 0.099,
        last.end_s = step * 0.1 + 0.1;
        m.blocks.push_back(last);
    }
    return m;
}

TEST(Stragglers, TheSlowRankOfAStageNotItsWaitingTpPeer) {
    // Stage 0: ranks 0–3 at 20 ms, except rank 2 at 40 ms; its TP peer rank 3 waits 20 ms
    // inside its blocks (a TP collective): 40 ms of blocks, 20 of them waiting.
    std::vector<ptd::MeasuredRank> ranks = {rank_timeline(0, 0, 20), rank_timeline(1, 0, 21), rank_timeline(2, 0, 40),
                                            rank_timeline(3, 0, 40, 20), rank_timeline(4, 1, 30), rank_timeline(5, 1, 30)};
    const ptd::StragglerReport r = ptd::find_stragglers(ranks);
    EXPECT_EQ(r.slow_ranks(), std::vector<int>{2});
    EXPECT_EQ(r.steps, 3);
    EXPECT_NEAR(r.step_s, 0.1, 1e-9);
    EXPECT_NEAR(r.ranks[2].compute_s, 0.040, 1e-9);
    EXPECT_NEAR(r.ranks[2].peers_s, 0.0205, 1e-9);  // the median of 20, 21, 40, 20 ms
    EXPECT_NEAR(r.ranks[3].compute_s, 0.020, 1e-9);
}

TEST(Stragglers, SlowerByLessThanTheStepShareIsNotNamed) {
    // Two peers, one 50 % slower, but 4 ms of a 100 ms step (under 5 %): not named.
    const ptd::StragglerReport r = ptd::find_stragglers({rank_timeline(0, 0, 8), rank_timeline(1, 0, 12)});
    EXPECT_TRUE(r.slow_ranks().empty());
    EXPECT_NEAR(r.ranks[1].verdict.slower, 0.5, 1e-9);
    // 10 ms of it: named.
    EXPECT_EQ(ptd::find_stragglers({rank_timeline(0, 0, 8), rank_timeline(1, 0, 18)}).slow_ranks(), std::vector<int>{1});
}

TEST(Stragglers, TheGradientPhasesTpCallsAreNotTakenFromCompute) {
    // Rank 1's gradient phase (micro-batch −1, after its backwards): 15 ms of TP all-reduces
    // of the SP-replicated tensors, outside every compute block. Its compute stays 20 ms.
    ptd::MeasuredRank r1 = rank_timeline(1, 0, 20);
    for (int step = 1; step <= 3; ++step) {
        ptd::TimelineBlock g;
        g.kind = ptd::BlockKind::tp_comm, g.stream = ptd::kStreamComm, g.step = step, g.row = 1, g.micro_batch = -1,
        g.chunk = -1, g.start_s = step * 0.1 + 0.05, g.end_s = step * 0.1 + 0.065;
        r1.blocks.push_back(g);
    }
    const ptd::StragglerReport r = ptd::find_stragglers({rank_timeline(0, 0, 20), r1});
    EXPECT_NEAR(r.ranks[1].compute_s, 0.020, 1e-9);
    EXPECT_TRUE(r.slow_ranks().empty());
}

// A real 8-rank run (tiny-gpt-8rank: TP 2 · PP 2 · DP 2) through `ptd launch`, rank 5's
// forward and backward blocks 20 ms longer each: the end of the launch and `ptd watch`
// name rank 5, its host and its stage, and no other rank.
TEST(Stragglers, ASlowRankIsNamedByLaunchAndWatch) {
    ptd_test::TempDir dir("ptd_straggler");
    const std::string ptd = PTD_BIN_DIR "/ptd";
    const auto run = ptd_test::run_captured("PTD_ENGINE_INJECT_SLOW_RANK=5:20 " + ptd + " launch " PTD_SOURCE_DIR
                                            "/assets/jobs/tiny-gpt-8rank.toml --steps 4 --run-id slow --run-root " +
                                            (dir / "runs"));
    ASSERT_EQ(run.rc, 0) << run.out << run.err;
    const std::string named = "straggler: rank 5 on host 0 (localhost (local)) computes ";
    EXPECT_NE(run.out.find(named), std::string::npos) << run.out;
    EXPECT_NE(run.out.find("% slower than the other ranks of PP stage 1 ("), std::string::npos) << run.out;
    const auto count = [](const std::string& text) {
        size_t n = 0;
        for (size_t at = 0; (at = text.find("straggler: rank ", at)) != std::string::npos; ++at) ++n;
        return n;
    };
    EXPECT_EQ(count(run.out), 1u) << run.out;
    const auto watch = ptd_test::run_captured(ptd + " watch " + (dir / "runs/slow") + " --once");
    ASSERT_EQ(watch.rc, 0) << watch.err;
    EXPECT_NE(watch.out.find(named), std::string::npos) << watch.out;
    EXPECT_EQ(count(watch.out), 1u) << watch.out;
}

TEST(Stragglers, TheTestHookRefusesABadValue) {
    TinyJob tj;
    const std::string job = write_job(tj, "slow-hook");
    setenv("PTD_ENGINE_INJECT_SLOW_RANK", "5", 1);
    const auto runs = run_engine(job, 1, {});
    unsetenv("PTD_ENGINE_INJECT_SLOW_RANK");
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_NE(runs[0].exit_code, 0);
    EXPECT_NE(runs[0].err.find("PTD_ENGINE_INJECT_SLOW_RANK: got \"5\"; allowed: RANK:MS"), std::string::npos) << runs[0].err;
}

}  // namespace
