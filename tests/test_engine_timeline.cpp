// test_engine_timeline.cpp — ptd-engine's measured timeline from a real 8-rank CPU run
// (tiny-gpt, TP 2 · PP 2 · DP 2): every rank's file holds every forward and backward block
// of every micro-batch of the recorded steps, in the order the estimators' schedule gives
// for its stage, plus the DP reduction and the optimizer; `ptd trace` turns the run into
// trace event JSON; the flags reject bad values.
#include <cstdlib>
#include <map>
#include <set>

#include "engine_run.h"
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
            if (b.kind == ptd::BlockKind::tp_comm) EXPECT_EQ(b.stream, ptd::kStreamComm);
            if (b.kind != ptd::BlockKind::forward && b.kind != ptd::BlockKind::backward) continue;
            EXPECT_GE(inside(b, ptd::BlockKind::tp_comm, ptd::kStreamComm), 1)
                << "rank " << rank.header.rank << " step " << b.step << " " << ptd::block_kind_name(b.kind) << " mb "
                << b.micro_batch;
            if (b.kind == ptd::BlockKind::backward)
                EXPECT_GE(inside(b, ptd::BlockKind::recompute, ptd::kStreamCompute), 1)
                    << "rank " << rank.header.rank << " step " << b.step << " bwd mb " << b.micro_batch;
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

}  // namespace
