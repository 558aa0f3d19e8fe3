// test_studio_live.cpp — the studio's Live panel without a window: LaunchEvents folded
// into per-rank series, states and bounded logs; lines per rank, TP group and PP stage;
// the step range (follow, zoom, pan); the hover readout; min/max decimation keeping spikes
// and ends, with and without min/max pyramids (which must match brute force exactly, grow
// and shrink with the series, and keep NaN gaps); axis ticks and units; and a run directory
// written with RunDirWriter, opened and followed until it finished; the step-time series and
// the run's speed prediction (its level, interval and readout; a run directory's own).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "live_model.h"
#include "plot_model.h"
#include "ptd/run_dir.h"
#include "ptd/spec/job_overrides.h"
#include "run_prediction.h"
#include "studio_state.h"

#include "run_manifest_test_util.h"

using namespace ptd;
using namespace ptd::studio;
namespace fs = std::filesystem;

namespace {

// 8 ranks on 2 hosts: tp 2 × dp 2 × pp 2, rank = tp + 2·dp + 4·pp.
RunManifest manifest8() {
    RunManifest m;
    m.run_id = "test-run";
    m.job_name = "tiny-gpt";
    m.state = "starting";
    m.world_size = 8;
    m.steps = 100;
    m.hosts = {"localhost", "node-b"};
    m.ranks = ptd_test::manifest_ranks(2, 2, 2, 4);
    return m;
}

LaunchEvent event(LaunchEventKind k, int rank, std::string text = "", int code = 0) {
    LaunchEvent ev;
    ev.kind = k;
    ev.rank = rank;
    ev.text = std::move(text);
    ev.exit_code = code;
    return ev;
}

// A step metric with memory: total current = 1000 + step + rank, predicted 1000.
LaunchEvent step_event(int rank, int step, double loss, double tokens_per_s = 1000, double mfu = 0.25) {
    MetricRecord m;
    m.kind = MetricKind::step;
    m.rank = rank;
    m.step = step;
    m.loss = loss;
    m.tokens_per_s = tokens_per_s;
    m.mfu = mfu;
    m.times.step = 0.05 + 0.001 * rank;
    m.has_memory = true;
    m.memory[MEM_TOTAL].current = 1000 + step + rank;
    m.memory[MEM_TOTAL].predicted = 1000;
    m.memory[MEM_PARAMS].current = 400;
    m.memory[MEM_PARAMS].predicted = 400;
    m.memory[MEM_WORKSPACE].current = 50;  // no prediction for workspace
    LaunchEvent ev = event(LaunchEventKind::metric, rank);
    ev.metric = m;
    return ev;
}

std::string step_json(int rank, int step, double loss) {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  R"({"schema":"ptd.metrics/1","event":"step","rank":%d,"step":%d,"loss":%.4f,"tokens_per_s":2000,)"
                  R"("mfu":0.3,"memory":{"total":{"current":%d,"peak":%d,"predicted":5000.0}}})",
                  rank, step, loss, 4000 + step, 4000 + step);
    return buf;
}

StudioState fresh_state() {
    const PresetCatalog& presets = embedded_presets();
    return make_state(presets, default_job(presets));
}

// Every value array of a series has a pyramid equal to one built from scratch.
void expect_pyramids_current(const LiveSeries& s) {
    auto check = [](const std::vector<float>& v, const MinMaxPyramid& p, const char* what) {
        MinMaxPyramid fresh;
        fresh.assign(v);
        EXPECT_EQ(p.size(), v.size()) << what;
        EXPECT_TRUE(p == fresh) << what;
    };
    check(s.loss, s.pyramids.loss, "loss");
    check(s.tokens_per_s, s.pyramids.tokens_per_s, "tokens/s");
    check(s.mfu, s.pyramids.mfu, "mfu");
    check(s.step_s, s.pyramids.step_s, "step time");
    for (size_t c = 0; c < (size_t)MEM_CAT_COUNT; ++c) {
        check(s.mem_current[c], s.pyramids.mem_current[c], "memory");
        check(s.mem_predicted[c], s.pyramids.mem_predicted[c], "predicted memory");
    }
}

// The samples decimate_minmax looks at: steps in [lo, hi] plus one on each side.
std::pair<size_t, size_t> visible(const std::vector<int>& steps, const AxisMap& x) {
    size_t i0 = 0, i1 = 0;
    while (i0 < steps.size() && steps[i0] < x.lo) ++i0;
    i1 = i0;
    while (i1 < steps.size() && steps[i1] <= x.hi) ++i1;
    return {i0 > 0 ? i0 - 1 : 0, i1 < steps.size() ? i1 + 1 : i1};
}

}  // namespace

// ---- Folding events ----------------------------------------------------------------------

TEST(LiveModel, EventsGrowSeriesAndSetStates) {
    LiveRun run;
    live_begin(run, manifest8());
    ASSERT_TRUE(run.active);
    ASSERT_TRUE(run.live);
    ASSERT_EQ(run.ranks.size(), 8u);
    EXPECT_EQ(run.state, "starting");
    EXPECT_EQ(run.ranks[5].tp, 1);
    EXPECT_EQ(run.ranks[5].dp, 0);
    EXPECT_EQ(run.ranks[5].pp, 1);
    EXPECT_EQ(run.ranks[5].host, 1);
    EXPECT_EQ(run.ranks[5].state, "starting");

    const uint64_t rev = run.revision;
    LaunchEvent started = event(LaunchEventKind::rank_started, 0, "rank 0");
    started.pid = 4242;
    live_apply(run, started);
    EXPECT_GT(run.revision, rev);
    EXPECT_EQ(run.ranks[0].pid, 4242);
    EXPECT_EQ(run.ranks[0].state, "running");
    EXPECT_EQ(run.state, "running");

    for (int step = 1; step <= 3; ++step)
        for (int r = 0; r < 8; ++r) live_apply(run, step_event(r, step, 5.0 - step));
    const LiveSeries& s = run.ranks[3].series;
    ASSERT_EQ(s.size(), 3u);
    EXPECT_EQ(s.steps, (std::vector<int>{1, 2, 3}));
    EXPECT_FLOAT_EQ(s.loss[2], 2.0f);
    EXPECT_FLOAT_EQ(s.tokens_per_s[0], 1000.0f);
    EXPECT_FLOAT_EQ(s.mfu[1], 0.25f);
    EXPECT_FLOAT_EQ(s.mem_current[MEM_TOTAL][2], 1006.0f);
    EXPECT_FLOAT_EQ(s.mem_predicted[MEM_TOTAL][2], 1000.0f);
    EXPECT_TRUE(std::isnan(s.mem_predicted[MEM_WORKSPACE][0])) << "no prediction must stay NaN, not 0";
    EXPECT_EQ(run.ranks[3].last_step, 3);
    EXPECT_DOUBLE_EQ(run.ranks[3].last_loss, 2.0);
    EXPECT_EQ(run.ranks[3].state, "running");  // a metric line means it runs
    EXPECT_EQ(run.max_step, 3);

    // The heatmap's figure.
    StudioState st = fresh_state();
    EXPECT_FALSE(live_rank_memory_bytes(st, 3));
    st.live.run = run;
    ASSERT_TRUE(live_rank_memory_bytes(st, 3));
    EXPECT_DOUBLE_EQ(*live_rank_memory_bytes(st, 3), 1006.0);
    EXPECT_DOUBLE_EQ(live_max_memory_bytes(st), 1010.0);
    EXPECT_FALSE(live_rank_memory_bytes(st, 8));

    // Exits: 0 → done, N → "exit N"; a lost host → "lost" for its ranks still running.
    live_apply(run, event(LaunchEventKind::rank_exited, 0, "", 0));
    live_apply(run, event(LaunchEventKind::rank_exited, 1, "", 3));
    EXPECT_EQ(run.ranks[0].state, "done");
    EXPECT_EQ(run.ranks[0].exit_code, 0);
    EXPECT_EQ(run.ranks[1].state, "exit 3");
    EXPECT_EQ(run.ranks[1].exit_code, 3);
    LaunchEvent lost = event(LaunchEventKind::host_failed, -1, "connection to node-b lost");
    lost.host = 1;
    live_apply(run, lost);
    for (int r = 4; r < 8; ++r) EXPECT_EQ(run.ranks[(size_t)r].state, "lost") << r;
    EXPECT_EQ(run.ranks[2].state, "running");
    EXPECT_EQ(run.ranks[4].log.back().text, "host failed: connection to node-b lost");
    live_apply(run, event(LaunchEventKind::rank_exited, 4, "", -1));
    EXPECT_EQ(run.ranks[4].exit_code, -1);
    EXPECT_EQ(run.ranks[4].state, "lost");

    LaunchEvent fin = event(LaunchEventKind::finished, 1, "rank 1 on localhost exited 3", 3);
    live_apply(run, fin);
    EXPECT_FALSE(run.live);
    EXPECT_TRUE(run.active);
    EXPECT_EQ(run.state, "failed");
    EXPECT_EQ(run.exit_code, 3);
    EXPECT_EQ(run.reason, "connection to node-b lost");  // the first reason given stays
}

TEST(LiveModel, StoppedRunAndOutOfRangeRanks) {
    LiveRun run;
    live_begin(run, manifest8());
    live_apply(run, event(LaunchEventKind::output, 99, "nobody"));  // no such rank: ignored
    live_apply(run, step_event(-1, 1, 1.0));
    for (const LiveRank& r : run.ranks) EXPECT_TRUE(r.log.empty() && r.series.steps.empty());
    live_apply(run, event(LaunchEventKind::finished, -1, "stopped by user", 130));
    EXPECT_EQ(run.state, "stopped");
    EXPECT_EQ(run.reason, "stopped by user");
}

TEST(LiveModel, LogsAreBoundedNewestKept) {
    LiveRun run;
    live_begin(run, manifest8());
    const int n = (int)kLiveLogLines + 1000;
    for (int i = 0; i < n; ++i) {
        LaunchEvent ev = event(LaunchEventKind::output, 2, "line " + std::to_string(i));
        ev.is_stderr = i % 2 == 1;
        live_apply(run, ev);
    }
    const LiveRank& r = run.ranks[2];
    ASSERT_EQ(r.log.size(), kLiveLogLines);
    EXPECT_EQ(r.log_dropped, 1000u);
    EXPECT_EQ(r.log.front().text, "line 1000");
    EXPECT_EQ(r.log.back().text, "line " + std::to_string(n - 1));
    EXPECT_TRUE(r.log.back().is_stderr);
    // Metrics lines are series, not log text; their warnings and errors are both.
    live_apply(run, step_event(2, 1, 1.0));
    EXPECT_EQ(r.log.back().text, "line " + std::to_string(n - 1));
    MetricRecord err;
    err.kind = MetricKind::error;
    err.rank = 2;
    err.message = "out of memory";
    LaunchEvent ev = event(LaunchEventKind::metric, 2);
    ev.metric = err;
    live_apply(run, ev);
    EXPECT_EQ(r.error, "out of memory");
    EXPECT_EQ(r.log.back().text, "error: out of memory");
}

TEST(LiveModel, AResumeGoingBackReplacesTheTail) {
    LiveRun run;
    live_begin(run, manifest8());
    for (int step = 1; step <= 5; ++step) live_apply(run, step_event(0, step, 10.0 - step));
    live_apply(run, step_event(0, 3, 42.0));  // resumed from the checkpoint of step 2
    const LiveSeries& s = run.ranks[0].series;
    EXPECT_EQ(s.steps, (std::vector<int>{1, 2, 3}));
    EXPECT_FLOAT_EQ(s.loss.back(), 42.0f);
    EXPECT_EQ(s.mem_current[MEM_TOTAL].size(), 3u);
    EXPECT_EQ(s.mem_predicted[MEM_PARAMS].size(), 3u);
    expect_pyramids_current(s);
}

// A restart (issue 31): a marker at the step it resumed from, the failed attempt's exits
// cleared, and the run's events say it.
TEST(LiveModel, ARestartMarksItsStepAndClearsTheExits) {
    LiveRun run;
    live_begin(run, manifest8());
    for (int step = 1; step <= 5; ++step) live_apply(run, step_event(0, step, 10.0 - step));
    live_apply(run, event(LaunchEventKind::rank_exited, 2, "", 137));
    LaunchEvent restart = event(LaunchEventKind::restart, 2,
                                "restart 1 of 3: rank 2 exited with code 137 (signal 9); resuming from the checkpoint of "
                                "step 4 (1 step lost)");
    restart.step = 4;
    live_apply(run, restart);
    EXPECT_EQ(run.restart_steps, (std::vector<double>{4}));
    EXPECT_FALSE(run.ranks[2].exit_code);
    EXPECT_EQ(run.ranks[2].state, "restarting");
    ASSERT_FALSE(run.events.empty());
    EXPECT_EQ(run.events.back(), restart.text);
}

TEST(LiveModel, PyramidsFollowAppendsAndResumes) {
    LiveState live;
    live_begin(live.run, manifest8());
    // Enough steps for several levels, a spike, and a stretch without memory figures (NaN).
    auto step = [&](int rank, int st, double loss, bool memory = true) {
        LaunchEvent ev = step_event(rank, st, loss);
        ev.metric->has_memory = memory;
        live_apply(live.run, ev);
    };
    for (int st = 1; st <= 1000; ++st) step(0, st, 5.0 + std::sin(st * 0.1) + (st == 777 ? 50 : 0), st < 300 || st > 340);
    const LiveSeries& s = live.run.ranks[0].series;
    expect_pyramids_current(s);
    EXPECT_EQ(s.pyramids.loss.level_end(), 10);  // 1000 samples: buckets of up to 512
    EXPECT_EQ(s.pyramids.loss.buckets(9).size(), 1u);
    EXPECT_EQ(s.pyramids.loss.buckets(7).size(), 7u);
    EXPECT_FLOAT_EQ(s.pyramids.loss.buckets(7)[6].hi, (float)(55.0 + std::sin(77.7)));  // steps 769..896

    // A resume from the checkpoint of step 613 (not a bucket boundary), in the NaN stretch
    // too, then on past the old end: the same as building from the arrays.
    step(0, 614, 1.0);
    EXPECT_EQ(s.size(), 614u);
    expect_pyramids_current(s);
    step(0, 320, 2.0, false);
    expect_pyramids_current(s);
    for (int st = 321; st <= 1500; ++st) step(0, st, 3.0 + std::cos(st * 0.05), st > 330);
    expect_pyramids_current(s);
    EXPECT_EQ(s.pyramids.mem_current[MEM_TOTAL].next_gap(0).begin, 299u);  // steps 300..330
    EXPECT_EQ(s.pyramids.mem_current[MEM_TOTAL].next_gap(0).end, 330u);

    // The plots get them: per rank from the series, per group from the cache (rebuilt with
    // the means).
    const SeriesView v = live_line_series(live, 0, LiveMetric::loss, false);
    ASSERT_NE(v.pyramid, nullptr);
    EXPECT_EQ(v.pyramid, &s.pyramids.loss);
    EXPECT_EQ(live_line_series(live, 0, LiveMetric::memory, true).pyramid, &s.pyramids.mem_predicted[MEM_TOTAL]);
    live.run.live = false;
    live_set_aggregate(live, LiveAggregate::pp_stage);
    const SeriesView g = live_line_series(live, 0, LiveMetric::tokens_per_s, false);
    ASSERT_NE(g.pyramid, nullptr);
    MinMaxPyramid fresh;
    fresh.assign(g.values);
    EXPECT_TRUE(*g.pyramid == fresh);
    EXPECT_EQ(g.pyramid->size(), 1500u);
}

// ---- Lines and aggregation ---------------------------------------------------------------

TEST(LiveModel, GroupsByTpGroupAndPpStage) {
    LiveRun run;
    live_begin(run, manifest8());
    const std::vector<LiveGroup> ranks = live_groups(run, LiveAggregate::rank);
    ASSERT_EQ(ranks.size(), 8u);
    EXPECT_EQ(ranks[6].label, "rank 6");

    const std::vector<LiveGroup> tp = live_groups(run, LiveAggregate::tp_group);
    ASSERT_EQ(tp.size(), 4u);  // dp 2 × pp 2 groups of 2
    EXPECT_EQ(tp[0].members, (std::vector<int>{0, 1}));
    EXPECT_EQ(tp[1].members, (std::vector<int>{2, 3}));
    EXPECT_EQ(tp[3].members, (std::vector<int>{6, 7}));
    EXPECT_EQ(tp[3].label, "TP group 3");

    const std::vector<LiveGroup> pp = live_groups(run, LiveAggregate::pp_stage);
    ASSERT_EQ(pp.size(), 2u);
    EXPECT_EQ(pp[1].members, (std::vector<int>{4, 5, 6, 7}));
    EXPECT_EQ(pp[1].label, "PP stage 1");
}

TEST(LiveModel, MeanSeriesOverMembers) {
    LiveState live;
    live_begin(live.run, manifest8());
    for (int step = 1; step <= 4; ++step)
        for (int r = 0; r < 8; ++r) live_apply(live.run, step_event(r, step, 1.0, 100.0 * (r + 1)));
    // Rank 7 is one step ahead.
    live_apply(live.run, step_event(7, 5, 1.0, 800.0));
    live.run.live = false;

    live_set_aggregate(live, LiveAggregate::pp_stage);
    ASSERT_EQ(live_lines(live).size(), 2u);
    const SeriesView stage1 = live_line_series(live, 1, LiveMetric::tokens_per_s, false);
    ASSERT_EQ(stage1.steps.size(), 5u);
    EXPECT_FLOAT_EQ(stage1.values[0], (500 + 600 + 700 + 800) / 4.0f);
    EXPECT_EQ(stage1.steps[4], 5);
    EXPECT_FLOAT_EQ(stage1.values[4], 800.0f);  // only rank 7 reported step 5
    const SeriesView mem0 = live_line_series(live, 0, LiveMetric::memory, false);
    EXPECT_FLOAT_EQ(mem0.values[0], 1000 + 1 + (0 + 1 + 2 + 3) / 4.0f);
    const SeriesView pred0 = live_line_series(live, 0, LiveMetric::memory, true);
    EXPECT_FLOAT_EQ(pred0.values[0], 1000.0f);
    live.view.mem_cat = MEM_WORKSPACE;  // no prediction at all → an empty mean
    EXPECT_TRUE(live_line_series(live, 0, LiveMetric::memory, true).steps.empty());
    EXPECT_FALSE(live_line_series(live, 0, LiveMetric::memory, false).steps.empty());

    live_set_aggregate(live, LiveAggregate::tp_group);
    const SeriesView g3 = live_line_series(live, 3, LiveMetric::tokens_per_s, false);
    EXPECT_FLOAT_EQ(g3.values[0], (700 + 800) / 2.0f);

    // The cache follows new data once the run is not live.
    live_apply(live.run, step_event(6, 5, 1.0, 1000.0));
    live.run.live = false;
    EXPECT_FLOAT_EQ(live_line_series(live, 3, LiveMetric::tokens_per_s, false).values[4], (1000 + 800) / 2.0f);

    // Hiding lines; the grouping change shows them all again.
    live_toggle_line(live, 2);
    EXPECT_FALSE(live_line_visible(live, 2));
    EXPECT_TRUE(live_line_visible(live, 1));
    live_set_aggregate(live, LiveAggregate::rank);
    EXPECT_TRUE(live_line_visible(live, 2));
    live_show_all(live, false);
    EXPECT_FALSE(live_line_visible(live, 7));
}

// More than 8 ranks: a median line per group over its min-max band, and the ranks far from
// the median drawn and named (issue 33): 64 ranks, rank 13 slow.
TEST(LiveModel, GroupsOfManyRanksAreAMedianABandAndTheirOutliers) {
    EXPECT_EQ(live_default_aggregate(8), LiveAggregate::rank);
    EXPECT_EQ(live_default_aggregate(64), LiveAggregate::pp_stage);
    LiveState live;
    RunManifest m = manifest8();
    m.world_size = 64;
    m.ranks = ptd_test::manifest_ranks(4, 2, 8, 8);
    live_begin(live.run, m);
    ASSERT_EQ(live.run.ranks.size(), 64u);
    for (int step = 1; step <= 3; ++step)
        for (int r = 0; r < 64; ++r) live_apply(live.run, step_event(r, step, 1.0, r == 13 ? 400.0 : 1000.0 + r % 4));
    live.run.live = false;
    live_set_aggregate(live, LiveAggregate::all);
    ASSERT_EQ(live_lines(live).size(), 1u);
    EXPECT_EQ(live_lines(live)[0].members.size(), 64u);
    const SeriesView median = live_line_series(live, 0, LiveMetric::tokens_per_s, false);
    ASSERT_EQ(median.steps.size(), 3u);
    EXPECT_FLOAT_EQ(median.values[0], 1001.5f);  // 16 each of 1000..1003, less rank 13's 1001
    const SeriesView band = live_line_band(live, 0, LiveMetric::tokens_per_s);
    ASSERT_EQ(band.steps.size(), 6u);  // each step twice: its min, then its max
    EXPECT_EQ(band.steps[0], 1);
    EXPECT_EQ(band.steps[1], 1);
    EXPECT_FLOAT_EQ(band.values[0], 400.0f);
    EXPECT_FLOAT_EQ(band.values[1], 1003.0f);
    const std::vector<LiveOutlier> out = live_outliers(live, LiveMetric::tokens_per_s);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].rank, 13);
    EXPECT_EQ(out[0].step, 3);
    EXPECT_FLOAT_EQ(out[0].value, 400.0f);
    EXPECT_TRUE(live_outliers(live, LiveMetric::loss).empty());  // every rank the same
    live_set_aggregate(live, LiveAggregate::rank);
    EXPECT_TRUE(live_outliers(live, LiveMetric::tokens_per_s).empty());
    EXPECT_TRUE(live_line_band(live, 0, LiveMetric::tokens_per_s).steps.empty());
}

TEST(LiveModel, HoverReadoutPicksTheNearestStep) {
    const std::vector<int> steps = {10, 20, 30};
    EXPECT_EQ(nearest_step_index(steps, 24), 1);
    EXPECT_EQ(nearest_step_index(steps, 26), 2);
    EXPECT_EQ(nearest_step_index(steps, 25), 1);  // a tie goes to the earlier step
    EXPECT_EQ(nearest_step_index(steps, -100), 0);
    EXPECT_EQ(nearest_step_index(steps, 1e9), 2);
    EXPECT_EQ(nearest_step_index({}, 3), -1);

    LiveState live;
    live_begin(live.run, manifest8());
    for (int step : steps)
        for (int r = 0; r < 8; ++r) live_apply(live.run, step_event(r, step, step / 10.0 + r));
    live_toggle_line(live, 1);
    std::vector<LiveReadoutRow> rows = live_readout(live, LiveMetric::loss, 26.2);
    ASSERT_EQ(rows.size(), 7u);  // rank 1 hidden
    EXPECT_EQ(rows[0].line, 0);
    EXPECT_EQ(rows[0].step, 30);
    EXPECT_FLOAT_EQ(rows[0].value, 3.0f);
    EXPECT_EQ(rows[1].line, 2);
    EXPECT_FLOAT_EQ(rows[1].value, 5.0f);
    EXPECT_TRUE(std::isnan(rows[0].predicted));
    rows = live_readout(live, LiveMetric::memory, 11);
    ASSERT_FALSE(rows.empty());
    EXPECT_EQ(rows[0].step, 10);
    EXPECT_FLOAT_EQ(rows[0].value, 1010.0f);
    EXPECT_FLOAT_EQ(rows[0].predicted, 1000.0f);
}

TEST(LiveModel, FollowZoomPanAndReset) {
    LiveState live;
    live_begin(live.run, manifest8());
    for (int step = 1; step <= 1000; ++step) live_apply(live.run, step_event(0, step, 1.0));
    StepRange r = live_x_range(live);
    EXPECT_DOUBLE_EQ(r.lo, 1);
    EXPECT_DOUBLE_EQ(r.hi, 1000);

    // Following: zooming in keeps the right edge on the newest step.
    live_zoom(live, 500, 3);
    r = live_x_range(live);
    EXPECT_DOUBLE_EQ(r.hi, 1000);
    EXPECT_NEAR(r.hi - r.lo, 999 * 0.512, 1e-6);
    for (int step = 1001; step <= 1100; ++step) live_apply(live.run, step_event(0, step, 1.0));
    r = live_x_range(live);
    EXPECT_DOUBLE_EQ(r.hi, 1100);  // the tail moved, the view with it
    EXPECT_NEAR(r.hi - r.lo, 999 * 0.512, 1e-6);

    // Paused: the range stays while steps arrive; zoom keeps the step under the mouse.
    live_set_follow(live, false);
    const StepRange paused = live_x_range(live);
    live_apply(live.run, step_event(0, 1101, 1.0));
    EXPECT_DOUBLE_EQ(live_x_range(live).hi, paused.hi);
    const double at = paused.lo + (paused.hi - paused.lo) * 0.25;
    live_zoom(live, at, 1);
    r = live_x_range(live);
    EXPECT_NEAR((at - r.lo) / (r.hi - r.lo), 0.25, 1e-9);
    EXPECT_NEAR(r.hi - r.lo, (paused.hi - paused.lo) * 0.8, 1e-6);

    // Dragging pans (and pauses a following view).
    live_reset_view(live);
    EXPECT_TRUE(live.view.follow);
    live_pan(live, -50);
    EXPECT_FALSE(live.view.follow);
    r = live_x_range(live);
    EXPECT_DOUBLE_EQ(r.lo, 1 - 50);
    EXPECT_DOUBLE_EQ(r.hi, 1101 - 50);

    // Double-click: back to everything, following.
    live_reset_view(live);
    r = live_x_range(live);
    EXPECT_DOUBLE_EQ(r.lo, 1);
    EXPECT_DOUBLE_EQ(r.hi, 1101);
}

// ---- Plot geometry -----------------------------------------------------------------------

TEST(PlotModel, DecimationKeepsExtremesAndEnds) {
    const int n = 10000;
    std::vector<int> steps(n);
    std::vector<float> values(n);
    for (int i = 0; i < n; ++i) {
        steps[(size_t)i] = i + 1;
        values[(size_t)i] = 2.0f + std::sin(i * 0.01f);
    }
    values[5003] = 100.0f;   // one-step spike
    values[7777] = -50.0f;   // one-step dip
    values[0] = 7.0f;        // the first and last values differ from their neighbours
    values[n - 1] = -3.0f;
    const AxisMap x{1, (double)n, 100.0f, 300.0f};  // 200 pixel columns
    std::vector<PlotPoint> out;
    decimate_minmax(steps, values, x, out);
    ASSERT_FALSE(out.empty());
    EXPECT_LE(out.size(), 4u * 201u);
    EXPECT_GE(out.size(), 2u * 150u);
    float lo = 1e9f, hi = -1e9f;
    for (size_t i = 0; i < out.size(); ++i) {
        lo = std::min(lo, out[i].y);
        hi = std::max(hi, out[i].y);
        if (i > 0) {
            EXPECT_LE(out[i - 1].x, out[i].x) << i;
        }
    }
    EXPECT_FLOAT_EQ(hi, 100.0f);
    EXPECT_FLOAT_EQ(lo, -50.0f);
    EXPECT_FLOAT_EQ(out.front().y, 7.0f);
    EXPECT_FLOAT_EQ(out.front().x, 100.0f);
    EXPECT_FLOAT_EQ(out.back().y, -3.0f);
    EXPECT_FLOAT_EQ(out.back().x, 300.0f);

    // The same buffer again: no growth beyond what it had.
    const size_t cap = out.capacity();
    decimate_minmax(steps, values, x, out);
    EXPECT_EQ(out.capacity(), cap);

    // The same from a pyramid: columns of whole buckets, the same ends and extremes.
    MinMaxPyramid pyramid;
    pyramid.assign(values);
    std::vector<PlotPoint> fast;
    decimate_minmax(steps, values, x, fast, &pyramid);
    EXPECT_LE(fast.size(), 4u * 201u);
    EXPECT_GE(fast.size(), 2u * 150u);
    EXPECT_EQ(fast.front().x, out.front().x);
    EXPECT_EQ(fast.front().y, 7.0f);
    EXPECT_EQ(fast.back().x, out.back().x);
    EXPECT_EQ(fast.back().y, -3.0f);
    EXPECT_EQ(points_y_range(fast).lo, -50.0f);
    EXPECT_EQ(points_y_range(fast).hi, 100.0f);

    // Zoomed in: one point on each side outside the range, nothing else.
    const AxisMap zoom{5000, 5010, 0.0f, 100.0f};
    decimate_minmax(steps, values, zoom, out, &pyramid);  // too few steps a column: scanned
    ASSERT_EQ(out.size(), 13u);  // steps 4999..5011, one per column
    EXPECT_LT(out.front().x, 0.0f);
    EXPECT_GT(out.back().x, 100.0f);
    EXPECT_TRUE(std::any_of(out.begin(), out.end(), [](const PlotPoint& p) { return p.y == 100.0f; }));
}

TEST(PlotModel, DecimationBreaksAtNaNAndFlattensConstants) {
    std::vector<int> steps;
    std::vector<float> values;
    for (int i = 1; i <= 100; ++i) {
        steps.push_back(i);
        values.push_back(i >= 40 && i < 50 ? NAN : 5.0f);
    }
    std::vector<PlotPoint> out;
    decimate_minmax(steps, values, AxisMap{1, 100, 0, 400}, out);
    // Two flat runs: each reduced to its ends, with one NaN break between them.
    ASSERT_EQ(out.size(), 5u);
    EXPECT_FLOAT_EQ(out[0].y, 5.0f);
    EXPECT_TRUE(std::isnan(out[2].y));
    EXPECT_FLOAT_EQ(out[4].x, 400.0f);
    decimate_minmax({}, {}, AxisMap{1, 100, 0, 400}, out);
    EXPECT_TRUE(out.empty());
}

TEST(PlotModel, PyramidAppendsAndTruncationsEqualARebuild) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> v;
    for (int i = 0; i < 5000; ++i) v.push_back(i % 700 < 13 || i == 4000 ? NAN : u(rng) * (i % 97 == 0 ? 100.0f : 1.0f));
    MinMaxPyramid built;
    for (size_t n = 0; n < v.size();) {  // appended in chunks of 1 to 40
        n = std::min(v.size(), n + 1 + rng() % 40);
        built.extend(std::span(v).first(n));
        if (n % 7 == 0) {
            MinMaxPyramid fresh;
            fresh.assign(std::span(v).first(n));
            ASSERT_TRUE(built == fresh) << n;
        }
    }
    MinMaxPyramid fresh;
    fresh.assign(v);
    EXPECT_TRUE(built == fresh);
    EXPECT_EQ(built.size(), 5000u);
    EXPECT_EQ(built.level_end(), 13);  // 4096-sample buckets
    EXPECT_EQ(built.buckets(3).size(), 625u);
    EXPECT_EQ(built.buckets(12).size(), 1u);
    // The top bucket: the extremes of the first 4096 samples, NaN skipped.
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < 4096; ++i)
        if (std::isfinite(v[i])) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
    EXPECT_EQ(built.buckets(12)[0], (MinMax{lo, hi}));

    // Truncations (resumes) to anywhere, then new values: the same as a rebuild.
    for (int round = 0; round < 30; ++round) {
        const size_t keep = rng() % (v.size() + 1);
        v.resize(keep);
        built.truncate(keep);
        fresh.assign(v);
        ASSERT_TRUE(built == fresh) << "truncated to " << keep;
        const size_t more = rng() % 300;
        for (size_t i = 0; i < more; ++i) {
            v.push_back(rng() % 50 == 0 ? NAN : u(rng));
            if (rng() % 3 == 0) built.extend(v);
        }
        built.extend(v);
        fresh.assign(v);
        ASSERT_TRUE(built == fresh) << "grown to " << v.size();
    }
    built.clear();
    EXPECT_TRUE(built == MinMaxPyramid{});
}

TEST(PlotModel, PyramidColumnsMatchBruteForce) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1, 1);
    int used = 0;
    for (int trial = 0; trial < 400; ++trial) {
        // Steps mostly consecutive, sometimes with jumps; values noisy, some with NaN runs.
        const size_t n = 1 + rng() % 20000;
        std::vector<int> steps(n);
        std::vector<float> values(n);
        int st = (int)(rng() % 100) - 50;
        const bool jumps = trial % 3 == 0, gaps = trial % 2 == 0;
        for (size_t i = 0; i < n; ++i) {
            st += 1 + (jumps && rng() % 500 == 0 ? (int)(rng() % 3000) : 0);
            steps[i] = st;
            values[i] = std::round(u(rng) * 1000) / 8;  // repeated values: ties between extremes
        }
        if (gaps)
            for (int g = 0; g < 5; ++g) {
                const size_t a = rng() % n, len = 1 + rng() % (g == 0 ? 2000 : 20);
                for (size_t i = a; i < std::min(n, a + len); ++i) values[i] = i % 5 == 0 ? INFINITY : NAN;
            }
        MinMaxPyramid p;
        p.assign(values);
        const double first = steps.front(), last = steps.back();
        const double lo = first - 100 + (last - first + 200) * std::uniform_real_distribution<double>(0, 0.9)(rng);
        const double hi = lo + 1 + (last + 100 - lo) * std::uniform_real_distribution<double>(0, 1)(rng);
        const float p0 = std::uniform_real_distribution<float>(0, 60)(rng);
        const AxisMap x{lo, hi, p0, p0 + std::uniform_real_distribution<float>(10, 1200)(rng)};
        const double scale = ((double)x.p1 - x.p0) / (x.hi - x.lo), offset = x.p0 - x.lo * scale;
        auto col = [&](size_t i) { return std::floor(steps[i] * scale + offset); };  // as decimate_minmax
        const auto [i0, i1] = visible(steps, x);

        std::vector<ColumnSpan> spans;
        if (!pyramid_columns(steps, values, p, x, spans)) {
            EXPECT_LE((double)(i1 - i0), 8.0 * std::max(1.0, (double)x.p1 - x.p0)) << trial;
            EXPECT_TRUE(spans.empty());
            continue;
        }
        ++used;
        // The spans and the non-finite samples between them make up [i0, i1) exactly; each
        // span's extremes are brute force's, exactly.
        size_t at = i0;
        for (size_t k = 0; k < spans.size(); ++k) {
            const ColumnSpan& c = spans[k];
            for (; at < c.begin; ++at) ASSERT_FALSE(std::isfinite(values[at])) << trial << " " << at;
            ASSERT_LT(c.begin, c.end);
            MinMax brute;
            for (size_t i = c.begin; i < c.end; ++i) {
                ASSERT_TRUE(std::isfinite(values[i])) << trial << " " << i;
                brute.lo = std::min(brute.lo, values[i]);
                brute.hi = std::max(brute.hi, values[i]);
            }
            ASSERT_EQ(c.range, brute) << trial << " span " << k;
            ASSERT_GE(c.lo_at, c.begin);
            ASSERT_LT(c.lo_at, c.end);
            ASSERT_GE(c.hi_at, c.begin);
            ASSERT_LT(c.hi_at, c.end);
            // One pixel column each, whose edges move by less than a pixel; a new column
            // without a gap before it is the next one to the right.
            ASSERT_LE(col(c.end - 1) - col(c.begin), 1.0) << trial << " span " << k;
            if (k > 0 && c.begin == spans[k - 1].end) {
                ASSERT_GT(col(c.begin), col(spans[k - 1].begin));
            }
            at = c.end;
        }
        for (; at < i1; ++at) ASSERT_FALSE(std::isfinite(values[at])) << trial << " " << at;

        // Decimated from the pyramid: steps ascending, the visible extremes and the end
        // points exact, never more than 4 points per span.
        std::vector<PlotPoint> out;
        decimate_minmax(steps, values, x, out, &p);
        MinMax seen, brute;
        for (size_t i = i0; i < i1; ++i)
            if (std::isfinite(values[i])) brute.lo = std::min(brute.lo, values[i]), brute.hi = std::max(brute.hi, values[i]);
        for (size_t k = 0; k < out.size(); ++k) {
            if (k > 0) {
                ASSERT_LE(out[k - 1].x, out[k].x) << trial;
            }
            if (std::isnan(out[k].y)) continue;
            seen.lo = std::min(seen.lo, out[k].y);
            seen.hi = std::max(seen.hi, out[k].y);
        }
        ASSERT_EQ(seen, brute) << trial;
        ASSERT_LE(out.size(), 5 * spans.size());
        if (std::isfinite(values[i0])) {
            ASSERT_EQ(out.front().y, values[i0]) << trial;
        }
        if (std::isfinite(values[i1 - 1])) {
            ASSERT_EQ(out.back().y, values[i1 - 1]) << trial;
        }
    }
    EXPECT_GT(used, 100);  // most trials are dense enough for the pyramid
}

TEST(PlotModel, PyramidKeepsAOneStepSpikeAtAnyZoom) {
    const int n = 100000;
    std::vector<int> steps(n);
    std::vector<float> values(n);
    for (int i = 0; i < n; ++i) {
        steps[(size_t)i] = i + 1;
        values[(size_t)i] = 2.0f + std::sin(i * 0.001f) * 0.5f;
    }
    values[61234] = 40.0f;  // step 61235
    values[61236] = -9.0f;  // step 61237
    MinMaxPyramid p;
    p.assign(values);
    std::vector<PlotPoint> out;
    int pyramid_zooms = 0;
    for (double width = n; width >= 4; width *= 0.83) {
        for (double t : {0.0, 0.3, 0.5, 0.97}) {
            const double lo = 61235 - width * t;
            const AxisMap x{lo, lo + width, 200.5f, 900.5f};
            std::vector<ColumnSpan> spans;
            pyramid_zooms += pyramid_columns(steps, values, p, x, spans);
            decimate_minmax(steps, values, x, out, &p);
            float top = -1e9f, bottom = 1e9f;
            for (const PlotPoint& q : out) top = std::max(top, q.y), bottom = std::min(bottom, q.y);
            ASSERT_EQ(top, 40.0f) << width << " " << t;
            if (x.hi >= 61236) {  // visible, or the neighbour past the right edge
                ASSERT_EQ(bottom, -9.0f) << width << " " << t;
            }
            // Drawn in the spike's pixel column (or the next: its bucket's middle).
            const float spike_px = x.to_px(61235);
            const auto it = std::find_if(out.begin(), out.end(), [](const PlotPoint& q) { return q.y == 40.0f; });
            ASSERT_LT(std::fabs(it->x - spike_px), 1.0f) << width << " " << t;
        }
    }
    EXPECT_GT(pyramid_zooms, 40);
    // The whole run on 700 pixels takes a few points per column, not 100,000.
    decimate_minmax(steps, values, AxisMap{1, (double)n, 200.5f, 900.5f}, out, &p);
    EXPECT_LE(out.size(), 4u * 702u);
    EXPECT_FLOAT_EQ(out.front().y, values.front());
    EXPECT_FLOAT_EQ(out.back().y, values.back());
}

TEST(PlotModel, PyramidDecimationBreaksAtNaN) {
    const int n = 10000;
    std::vector<int> steps(n);
    std::vector<float> values(n);
    for (int i = 0; i < n; ++i) {
        steps[(size_t)i] = i + 1;
        values[(size_t)i] = (i >= 4000 && i < 4100) || i == 7000 || i < 50 ? NAN : 1.0f + (float)(i % 10);
    }
    MinMaxPyramid p;
    p.assign(values);
    const AxisMap x{1, (double)n, 0.0f, 200.0f};
    std::vector<PlotPoint> out;
    decimate_minmax(steps, values, x, out, &p);
    ASSERT_FALSE(out.empty());
    EXPECT_FALSE(std::isnan(out.front().y));  // no break before the first point
    EXPECT_FALSE(std::isnan(out.back().y));
    std::vector<size_t> breaks;
    for (size_t k = 0; k < out.size(); ++k)
        if (std::isnan(out[k].y)) breaks.push_back(k);
    ASSERT_EQ(breaks.size(), 2u);
    // Nothing joins across a gap: the points around a break lie on either side of it.
    EXPECT_LE(out[breaks[0] - 1].x, x.to_px(4000));
    EXPECT_GE(out[breaks[0] + 1].x, x.to_px(4101));
    EXPECT_LE(out[breaks[1] - 1].x, x.to_px(7000));
    EXPECT_GE(out[breaks[1] + 1].x, x.to_px(7002));
    EXPECT_FLOAT_EQ(out.front().x, x.to_px(51));

    // A series with no value at all (a category without a prediction) draws nothing.
    std::fill(values.begin(), values.end(), NAN);
    p.assign(values);
    decimate_minmax(steps, values, x, out, &p);
    EXPECT_TRUE(out.empty());
    // A pyramid that does not match the series (another size) is not used: the scan draws it.
    p.truncate(n - 1);
    values.assign((size_t)n, 3.0f);
    decimate_minmax(steps, values, x, out, &p);
    ASSERT_EQ(out.size(), 2u);
}

TEST(PlotModel, NiceTicksAndUnits) {
    EXPECT_DOUBLE_EQ(nice_step(10, 5), 2);
    EXPECT_DOUBLE_EQ(nice_step(1, 5), 0.2);
    EXPECT_DOUBLE_EQ(nice_step(1000, 4), 500);
    EXPECT_DOUBLE_EQ(nice_step(7, 7), 1);
    EXPECT_DOUBLE_EQ(nice_step(0, 5), 1);

    auto labels = [](const std::vector<PlotTick>& t) {
        std::vector<std::string> out;
        for (const PlotTick& x : t) out.push_back(x.label);
        return out;
    };
    EXPECT_EQ(labels(axis_ticks(0, 10.0 * (1 << 30), 5, PlotUnit::bytes)),
              (std::vector<std::string>{"0", "2 GiB", "4 GiB", "6 GiB", "8 GiB", "10 GiB"}));
    const std::vector<PlotTick> mib = axis_ticks(0, 1e9, 5, PlotUnit::bytes);  // 954 MiB
    EXPECT_EQ(labels(mib), (std::vector<std::string>{"0", "200 MiB", "400 MiB", "600 MiB", "800 MiB"}));
    EXPECT_DOUBLE_EQ(mib[1].value, 200.0 * 1024 * 1024);
    EXPECT_EQ(labels(axis_ticks(0, 0.5, 5, PlotUnit::fraction)),
              (std::vector<std::string>{"0", "10%", "20%", "30%", "40%", "50%"}));
    EXPECT_EQ(labels(axis_ticks(0, 25000, 5, PlotUnit::per_second)),
              (std::vector<std::string>{"0", "5K/s", "10K/s", "15K/s", "20K/s", "25K/s"}));
    EXPECT_EQ(labels(axis_ticks(2.05, 2.35, 3, PlotUnit::number)), (std::vector<std::string>{"2.1", "2.2", "2.3"}));
    EXPECT_EQ(labels(axis_ticks(1, 3, 10, PlotUnit::step)), (std::vector<std::string>{"1", "2", "3"}));
    EXPECT_EQ(labels(axis_ticks(-1, 1, 2, PlotUnit::number)), (std::vector<std::string>{"-1", "0", "1"}));

    EXPECT_EQ(format_value(1.5 * (1 << 30), PlotUnit::bytes), "1.50 GiB");
    EXPECT_EQ(format_value(512, PlotUnit::bytes), "512 B");
    EXPECT_EQ(format_value(12345, PlotUnit::per_second), "12.3K/s");
    EXPECT_EQ(format_value(0.4213, PlotUnit::fraction), "42.1%");
    EXPECT_EQ(format_value(2.34567, PlotUnit::number), "2.346");
    EXPECT_EQ(format_value(NAN, PlotUnit::number), "-");

    const ValueRange z = padded_range(10, 20, true);
    EXPECT_DOUBLE_EQ(z.lo, 0);
    EXPECT_GT(z.hi, 20);
    const ValueRange l = padded_range(2, 3, false);
    EXPECT_LT(l.lo, 2);
    EXPECT_GT(l.hi, 3);
    const ValueRange flat = padded_range(5, 5, false);
    EXPECT_LT(flat.lo, 5);
    EXPECT_GT(flat.hi, 5);

    const AxisMap y{0, 100, 500, 100};  // bottom pixel 500, top 100
    EXPECT_FLOAT_EQ(y.to_px(0), 500);
    EXPECT_FLOAT_EQ(y.to_px(100), 100);
    EXPECT_NEAR(y.to_data(300), 50, 1e-9);
}

// ---- A run directory ----------------------------------------------------------------------

TEST(LiveModel, OpensARunDirectoryAndFollowsItToTheEnd) {
    const std::string root = (fs::path(::testing::TempDir()) / ("ptd_studio_live_" + std::to_string(getpid()))).string();
    const std::string dir = root + "/run-a";
    fs::remove_all(root);
    RunManifest m = manifest8();
    m.world_size = 2;
    m.ranks.resize(2);
    m.state = "running";
    m.ranks[0].pid = 100;
    m.ranks[1].pid = 101;
    auto w = RunDirWriter::create(dir, "# job\n", m);
    ASSERT_TRUE(w) << w.error().str();
    for (int step = 1; step <= 3; ++step)
        for (int r = 0; r < 2; ++r) (*w)->append_line(r, step_json(r, step, 4.0 - step));
    (*w)->append_line(1, "ptd-engine: rank 1: hello from stderr");

    StudioState s = fresh_state();
    EXPECT_FALSE(live_open_run_dir(s, dir + "/nope"));
    ASSERT_TRUE(live_open_run_dir(s, dir));
    EXPECT_EQ(s.live.dir, dir);
    EXPECT_TRUE(s.live.run.active);
    EXPECT_TRUE(s.live.run.live);
    EXPECT_EQ(s.live.run.manifest.run_id, "test-run");
    EXPECT_GT(studio_wakeup_s(s), 0.0);  // keeps polling while it runs
    for (int i = 0; i < 50 && s.live.run.ranks[1].series.size() < 3; ++i) live_tick(s);
    EXPECT_EQ(s.live.run.ranks[0].series.size(), 3u);
    EXPECT_EQ(s.live.run.ranks[1].series.size(), 3u);
    EXPECT_EQ(s.live.run.ranks[1].log.back().text, "ptd-engine: rank 1: hello from stderr");
    EXPECT_EQ(s.live.run.ranks[0].state, "running");

    // More steps, then the end.
    (*w)->append_line(0, step_json(0, 4, 0.5));
    (*w)->append_line(1, step_json(1, 4, 0.5));
    m.state = "finished";
    m.ranks[0].exit_code = 0;
    m.ranks[1].exit_code = 0;
    m.ended = m.started + 10;
    ASSERT_TRUE((*w)->write_manifest(m));
    for (int i = 0; i < 200 && s.live.run.live; ++i) {
        live_tick(s);
        usleep(5000);  // live_tick polls at most 10 times a second once caught up
    }
    EXPECT_FALSE(s.live.run.live);
    EXPECT_EQ(s.live.run.state, "finished");
    EXPECT_EQ(s.live.run.ranks[0].series.size(), 4u);
    EXPECT_FLOAT_EQ(s.live.run.ranks[1].series.loss.back(), 0.5f);
    EXPECT_EQ(s.live.run.ranks[0].state, "done");
    EXPECT_EQ(s.live.run.ranks[1].exit_code, 0);
    EXPECT_FALSE(s.live.follower);  // done: nothing left to poll
    EXPECT_EQ(studio_wakeup_s(s), 0.0);
    EXPECT_DOUBLE_EQ(*live_rank_memory_bytes(s, 1), 4004.0);

    // The recent-runs list finds it.
    fs::create_directories(root + "/not-a-run");
    const std::vector<std::string> recent = live_recent_run_dirs(root, 10);
    EXPECT_EQ(recent, std::vector<std::string>{dir});
    fs::remove_all(root);
}

// ---- The speed prediction beside the measurement -------------------------------------------

namespace {

JobSpec tiny_job_on(const std::string& gpu) {
    auto job = load_job_file_with_overrides(PTD_SOURCE_DIR "/assets/jobs/tiny-gpt-8rank.toml",
                                            {"cluster.gpu=" + gpu, "training.data=synthetic"}, embedded_presets());
    EXPECT_TRUE(job.has_value()) << job.error().str();
    return *job;
}

}  // namespace

// Each rank's step time is a series like tokens/s; the run's prediction is one level per
// speed plot, with the estimator's interval where it has one and none where it has none.
TEST(LiveSpeed, StepTimeSeriesAndThePredictedLevel) {
    LiveState live;
    live_begin(live.run, manifest8());
    for (int step = 1; step <= 4; ++step)
        for (int r = 0; r < 8; ++r) live_apply(live.run, step_event(r, step, 5.0 - 0.1 * step, 2000 + r));
    const SeriesView st = live_line_series(live, 3, LiveMetric::step_time, false);
    ASSERT_EQ(st.values.size(), 4u);
    EXPECT_FLOAT_EQ(st.values[0], 0.053f);
    EXPECT_EQ(st.pyramid, &live.run.ranks[3].series.pyramids.step_s);
    expect_pyramids_current(live.run.ranks[3].series);
    EXPECT_STREQ(live_metric_title(LiveMetric::step_time), "Step time");
    // No prediction: no level, and the readout has no predicted value.
    EXPECT_FALSE(live_predicted_level(live.run, LiveMetric::tokens_per_s));
    EXPECT_TRUE(std::isnan(live_readout(live, LiveMetric::step_time, 2).front().predicted));
    ASSERT_TRUE(live_recent_median(live.run, LiveMetric::tokens_per_s));
    EXPECT_DOUBLE_EQ(*live_recent_median(live.run, LiveMetric::tokens_per_s), 2003.5);  // ranks' 2000..2007
    // One slow last step does not move it; the last 5 steps of every rank are what counts.
    for (int r = 0; r < 8; ++r) live_apply(live.run, step_event(r, 5, 4.4, r == 0 ? 10 : 2000 + r));
    EXPECT_DOUBLE_EQ(*live_recent_median(live.run, LiveMetric::tokens_per_s), 2003.5);
    EXPECT_DOUBLE_EQ(*live_recent_median(live.run, LiveMetric::tokens_per_s, 1), 2003.5);  // 10, 2001..2007
    EXPECT_FALSE(live_recent_median(LiveRun{}, LiveMetric::tokens_per_s));

    // A GPU preset job: the published runs' interval becomes the band.
    live.run.prediction = predict_run(tiny_job_on("h100-sxm"), std::nullopt);
    const RunPrediction& p = *live.run.prediction;
    ASSERT_TRUE(p.available && p.speed.known);
    const std::optional<PlotLevel> rate = live_predicted_level(live.run, LiveMetric::tokens_per_s);
    ASSERT_TRUE(rate);
    EXPECT_DOUBLE_EQ(rate->value, p.tokens_per_s);
    EXPECT_TRUE(rate->has_band);
    EXPECT_DOUBLE_EQ(rate->lo, p.speed.tokens_per_s.lo);
    EXPECT_DOUBLE_EQ(rate->hi, p.speed.tokens_per_s.hi);
    const std::optional<PlotLevel> step = live_predicted_level(live.run, LiveMetric::step_time);
    ASSERT_TRUE(step);
    EXPECT_DOUBLE_EQ(step->value, p.step_s);
    EXPECT_DOUBLE_EQ(step->lo, p.speed.step_s.lo);
    EXPECT_DOUBLE_EQ(step->hi, p.speed.step_s.hi);
    for (LiveMetric m : {LiveMetric::loss, LiveMetric::mfu, LiveMetric::memory}) EXPECT_FALSE(live_predicted_level(live.run, m));
    const std::vector<LiveReadoutRow> rows = live_readout(live, LiveMetric::step_time, 2);
    ASSERT_EQ(rows.size(), 8u);
    for (const LiveReadoutRow& r : rows) EXPECT_FLOAT_EQ(r.predicted, (float)p.step_s);
    EXPECT_TRUE(std::isnan(live_readout(live, LiveMetric::loss, 2).front().predicted));

    // The CPU: a level without a band (no interval is made up).
    live.run.prediction = predict_run(tiny_job_on("cpu"), std::nullopt);
    ASSERT_FALSE(live.run.prediction->speed.known);
    const std::optional<PlotLevel> cpu = live_predicted_level(live.run, LiveMetric::tokens_per_s);
    ASSERT_TRUE(cpu);
    EXPECT_FALSE(cpu->has_band);
    // No prediction at all (the job could not be read): no level either.
    live.run.prediction = RunPrediction{};
    EXPECT_FALSE(live_predicted_level(live.run, LiveMetric::step_time));
    // A new run clears the old one's prediction.
    live.run.prediction = predict_run(tiny_job_on("cpu"), std::nullopt);
    live_begin(live.run, manifest8());
    EXPECT_FALSE(live.run.prediction);

    // Durations on the axis: µs, ms and s from the larger end of the range.
    auto labels = [](const std::vector<PlotTick>& t) {
        std::vector<std::string> out;
        for (const PlotTick& x : t) out.push_back(x.label);
        return out;
    };
    EXPECT_EQ(labels(axis_ticks(0, 0.08, 4, PlotUnit::seconds)), (std::vector<std::string>{"0", "20 ms", "40 ms", "60 ms", "80 ms"}));
    EXPECT_EQ(labels(axis_ticks(0, 3, 3, PlotUnit::seconds)), (std::vector<std::string>{"0", "1 s", "2 s", "3 s"}));
    EXPECT_EQ(format_value(0.0663, PlotUnit::seconds), "66.3 ms");
    EXPECT_EQ(format_value(0.00085, PlotUnit::seconds), "850 µs");
}

// A finished run directory ROOT/ID of `job` with manifest `m` (its state set to finished), as
// ptd launch writes one; ROOT is emptied first.
static void write_finished_run(const std::string& root, const std::string& id, const JobSpec& job, RunManifest m) {
    fs::remove_all(root);
    m.state = "finished";
    auto w = RunDirWriter::create(root + "/" + id, save_job_toml(job), m);
    ASSERT_TRUE(w) << w.error().str();
}

// The Live tab names the run's job file (its run directory's job.toml) and loads it into the
// editor on request; then the editor holds the run's job (issue 33).
TEST(LiveModel, TheRunsJobLoadsIntoTheEditor) {
    const std::string root = (fs::path(::testing::TempDir()) / ("ptd_studio_runjob_" + std::to_string(getpid()))).string();
    const JobSpec job = tiny_job_on("h100-sxm");
    write_finished_run(root, "run-j", job, manifest8());
    StudioState s = fresh_state();
    EXPECT_EQ(live_run_job_file(s), "");  // no run
    ASSERT_TRUE(live_open_run_dir(s, root + "/run-j"));
    const std::string file = live_run_job_file(s);
    EXPECT_EQ(fs::path(file), fs::absolute(fs::path(root) / "run-j" / "job.toml").lexically_normal());
    EXPECT_FALSE(live_run_job_in_editor(s));
    ASSERT_EQ(request_open(s, file), "");
    EXPECT_TRUE(live_run_job_in_editor(s));
    EXPECT_EQ(s.job.cluster.gpu.name, "h100-sxm");
    EXPECT_EQ(s.job.world_size(), job.world_size());
    fs::remove_all(root);
}

// A run directory opened in the Live tab predicts as `ptd watch` does: its job.toml with
// the profile its manifest records.
TEST(LiveSpeed, ARunDirectoryIsPredictedFromItsJobAndRecordedProfile) {
    const std::string root = (fs::path(::testing::TempDir()) / ("ptd_studio_speed_" + std::to_string(getpid()))).string();
    const JobSpec job = tiny_job_on("h100-sxm");
    RunManifest m = manifest8();
    write_finished_run(root, "run-b", job, m);
    m.state = "finished";
    StudioState s = fresh_state();
    ASSERT_TRUE(live_open_run_dir(s, root + "/run-b"));
    ASSERT_TRUE(s.live.run.prediction);
    const RunPrediction want = predict_run(job, std::nullopt);
    EXPECT_TRUE(s.live.run.prediction->available) << s.live.run.prediction->why_none;
    EXPECT_DOUBLE_EQ(s.live.run.prediction->step_s, want.step_s);
    EXPECT_DOUBLE_EQ(s.live.run.prediction->speed.tokens_per_s.hi, want.speed.tokens_per_s.hi);

    // A manifest naming a profile that is gone: the run shows, without a prediction, saying why.
    m.run_id = "run-c";
    m.profile = RunProfileRecord{root + "/gone.toml", "--profile", "2026-11-29T06:40:00Z"};
    auto w2 = RunDirWriter::create(root + "/run-c", save_job_toml(job), m);
    ASSERT_TRUE(w2) << w2.error().str();
    ASSERT_TRUE(live_open_run_dir(s, root + "/run-c"));
    ASSERT_TRUE(s.live.run.prediction);
    EXPECT_FALSE(s.live.run.prediction->available);
    EXPECT_NE(s.live.run.prediction->why_none.find(root + "/gone.toml"), std::string::npos) << s.live.run.prediction->why_none;
    EXPECT_FALSE(live_predicted_level(s.live.run, LiveMetric::tokens_per_s));
    fs::remove_all(root);
}
