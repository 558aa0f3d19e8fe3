// test_studio_planner.cpp — the Planner tab's view-model without a window: the background
// search publishes progress and results, cancels, re-runs; the table sorts by every column
// and filters non-fitting layouts; clicking a row applies its layout and the job stays
// valid; the current job's rank; stale results after edits; refused searches.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "commands.h"
#include "studio_state.h"
#include "studio_test_util.h"

using namespace ptd;
using namespace ptd::studio;

namespace {

StudioState default_state() { return ptd_test::default_studio_state(); }

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// Run a search to the end (bounded).
void run_search(StudioState& s) {
    ASSERT_TRUE(planner_start(s)) << s.planner.error;
    ASSERT_TRUE(planner_wait(s, 60)) << "the search did not finish in 60 s";
    ASSERT_EQ(s.planner.status, PlannerStatus::done) << s.planner.error;
    ASSERT_TRUE(s.planner.result);
}

// The value a column sorts by (text columns: see order_text).
double column_key(const PlanRow& r, PlanColumn c) {
    const LayoutChoice& ch = r.entry.choice;
    const LayoutScore& sc = r.entry.score;
    switch (c) {
        case PlanColumn::rank: return r.fits ? (double)r.number : 1e18;
        case PlanColumn::tokens_per_s: return sc.tokens_per_s;
        case PlanColumn::mfu: return sc.mfu;
        case PlanColumn::step_s: return sc.step_s;
        case PlanColumn::peak: return sc.peak_bytes;
        case PlanColumn::headroom: return sc.usable_bytes - sc.peak_bytes;
        case PlanColumn::tp: return ch.tp;
        case PlanColumn::pp: return ch.pp;
        case PlanColumn::dp: return ch.dp;
        case PlanColumn::cp: return ch.cp;
        case PlanColumn::ep: return ch.ep;
        case PlanColumn::etp: return ch.etp > 0 ? ch.etp : ch.tp;
        case PlanColumn::vpp: return ch.vpp;
        case PlanColumn::micro_batch: return ch.micro_batch;
        case PlanColumn::zero: return ch.distributed_optimizer ? 0.5 : ch.zero;
        case PlanColumn::recompute: return (double)ch.recompute;
        case PlanColumn::sp: return ch.sequence_parallel;
        case PlanColumn::order: return 0;
    }
    return 0;
}

}  // namespace

TEST(StudioPlanner, BackgroundSearchPublishesResults) {
    StudioState s = default_state();
    EXPECT_EQ(s.planner.status, PlannerStatus::never_run);
    EXPECT_EQ(studio_wakeup_s(s), 0);
    ASSERT_TRUE(planner_start(s));
    EXPECT_EQ(s.planner.status, PlannerStatus::running);
    EXPECT_TRUE(planner_running(s));
    EXPECT_GT(studio_wakeup_s(s), 0) << "the window must keep waking up while a search runs";
    ASSERT_TRUE(planner_wait(s, 60));
    EXPECT_FALSE(planner_running(s));
    EXPECT_EQ(studio_wakeup_s(s), 0);
    ASSERT_EQ(s.planner.status, PlannerStatus::done) << s.planner.error;
    ASSERT_TRUE(s.planner.result);

    // The same answer as a search on this thread, and as `ptd plan` would list.
    PlanOptions o;
    o.top_k = s.planner.settings.top_k;
    auto direct = plan_layouts(s.job, o);
    ASSERT_TRUE(direct);
    ASSERT_EQ(s.planner.result->top.size(), direct->top.size());
    EXPECT_EQ(s.planner.result->feasible, direct->feasible);
    EXPECT_EQ(s.planner.result->top[0].score.tokens_per_s, direct->top[0].score.tokens_per_s);
    EXPECT_EQ(s.planner.evaluated, direct->evaluated) << "the last progress report is (evaluated, evaluated)";

    // Rows: the fitting ones best first with ranks, then the near misses.
    ASSERT_FALSE(s.planner.rows.empty());
    EXPECT_EQ(s.planner.rows[0].rank, 1);
    EXPECT_TRUE(s.planner.rows[0].fits);
    // The "#" column numbers the fitting rows 1, 2, 3, ... as `ptd plan` does (rank, among
    // all fitting layouts, skips numbers where layouts the list leaves out are faster).
    int64_t want = 0;
    for (const PlanRow& r : s.planner.rows) {
        if (!r.fits) continue;
        EXPECT_EQ(r.number, ++want);
        EXPECT_EQ(plan_cell_text(s, r, PlanColumn::rank), group_thousands(want));
        EXPECT_GE(r.rank, r.number == 1 ? 1 : 2);
    }
    EXPECT_EQ(want, (int64_t)s.planner.result->top.size());
    EXPECT_TRUE(contains(planner_summary_text(s), "fit, in")) << planner_summary_text(s);
    EXPECT_FALSE(planner_stale(s));

    // The default job fits and is ranked as the planner ranks it.
    ASSERT_EQ(s.planner.job_rank.kind, JobRank::Kind::ranked) << job_rank_text(s);
    ASSERT_GE(direct->job_rank, 0);
    EXPECT_EQ(s.planner.job_rank.rank, direct->job_rank + 1);
    EXPECT_EQ(s.planner.job_rank.of, direct->feasible);
    EXPECT_EQ(job_rank_text(s), "your job ranks #" + group_thousands(direct->job_rank + 1) + " of " +
                                    group_thousands(direct->feasible) + " fitting layouts");
}

TEST(StudioPlanner, AutostartOnlyOnce) {
    StudioState s = default_state();
    EXPECT_TRUE(planner_autostart(s));
    EXPECT_FALSE(planner_autostart(s));
    ASSERT_TRUE(planner_wait(s, 60));
    EXPECT_FALSE(planner_autostart(s)) << "results exist: re-running is the user's call";
    EXPECT_EQ(s.planner.starts, 1);
}

TEST(StudioPlanner, CancelStopsALongSearch) {
    StudioState s = default_state();
    // ~180,000 evaluations (a 720-layer model on 40,320 GPUs): long enough to cancel midway.
    ASSERT_TRUE(edit_int(s, "model.layers", 720));
    ASSERT_TRUE(edit_int(s, "cluster.nodes", 5040));
    ASSERT_TRUE(edit_int(s, "training.global_batch", 241920));
    s.planner.settings.tp_beyond_node = true;
    ASSERT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    ASSERT_TRUE(planner_start(s));
    // Wait for the first progress report, then cancel.
    const auto t0 = std::chrono::steady_clock::now();
    while (s.planner.evaluated == 0 && s.planner.status == PlannerStatus::running &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
        planner_tick(s);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    ASSERT_EQ(s.planner.status, PlannerStatus::running) << "finished before it could be cancelled";
    EXPECT_GT(s.planner.total, s.planner.evaluated);
    EXPECT_TRUE(contains(planner_progress_text(s), "evaluated")) << planner_progress_text(s);
    planner_cancel(s);
    ASSERT_TRUE(planner_wait(s, 60));
    EXPECT_EQ(s.planner.status, PlannerStatus::cancelled);
    ASSERT_TRUE(s.planner.result);
    EXPECT_TRUE(s.planner.result->cancelled);
    EXPECT_LT(s.planner.result->evaluated, s.planner.total);
    EXPECT_TRUE(contains(planner_summary_text(s), "cancelled")) << planner_summary_text(s);
}

TEST(StudioPlanner, RestartingCancelsTheRunningSearch) {
    StudioState s = default_state();
    ASSERT_TRUE(planner_start(s));
    ASSERT_TRUE(planner_start(s));
    EXPECT_EQ(s.planner.starts, 2);
    ASSERT_TRUE(planner_wait(s, 60));
    EXPECT_EQ(s.planner.status, PlannerStatus::done);
    EXPECT_TRUE(s.planner.retired.empty());
    EXPECT_FALSE(s.planner.worker);
}

TEST(StudioPlanner, SortsByEveryColumnBothWays) {
    StudioState s = default_state();
    run_search(s);
    planner_set_fits_only(s, false);
    const auto& rows = s.planner.rows;
    for (int c = 0; c < kPlanColumns; ++c) {
        const PlanColumn col = (PlanColumn)c;
        for (bool asc : {true, false}) {
            planner_sort(s, col, asc);
            const auto& v = s.planner.view;
            ASSERT_EQ(v.size(), rows.size());
            for (size_t i = 1; i < v.size(); ++i) {
                const PlanRow &a = rows[(size_t)v[i - 1]], &b = rows[(size_t)v[i]];
                if (col == PlanColumn::order) {
                    const std::string ta = plan_cell_text(s, a, col), tb = plan_cell_text(s, b, col);
                    EXPECT_TRUE(asc ? ta <= tb : ta >= tb) << plan_column_label(col) << " row " << i;
                } else if (asc) {
                    EXPECT_LE(column_key(a, col), column_key(b, col)) << plan_column_label(col) << " row " << i;
                } else {
                    EXPECT_GE(column_key(a, col), column_key(b, col)) << plan_column_label(col) << " row " << i;
                }
            }
        }
    }
    // Ties keep the planner's order: by tp ascending, the first tp-1 row is the best tp-1 row.
    planner_sort(s, PlanColumn::tp, true);
    const int first = s.planner.view[0];
    for (int i = 0; i < first; ++i)
        if (rows[(size_t)i].entry.choice.tp == rows[(size_t)first].entry.choice.tp) ADD_FAILURE() << "row " << i;
}

// fold: a row standing for its layout at other interleaving depths too says so in its vpp
// cell ("16+"); the tooltip names them (folded_row_text).
TEST(StudioPlanner, AVppCellMarksARowThatStandsForOtherDepths) {
    StudioState s = default_state();
    run_search(s);
    int marked = 0, plain = 0;
    for (const PlanRow& r : s.planner.rows) {
        bool depths = false;
        for (const FoldedVariant& v : r.entry.folded) depths |= v.vpp != r.entry.choice.vpp;
        const std::string cell = plan_cell_text(s, r, PlanColumn::vpp);
        EXPECT_EQ(cell, std::to_string(r.entry.choice.vpp) + (depths ? "+" : "")) << r.number;
        (depths ? marked : plain) += 1;
    }
    EXPECT_GT(marked, 0) << "the default job's list folds no depth: the case shows nothing";
    EXPECT_GT(plain, 0);
}

// fold, hsdp: a row standing for its layout at other replica counts too says so in its zero
// cell ("dopt+", "3 r4+"), as the default job (the distributed optimizer on 4 nodes) runs.
TEST(StudioPlanner, AZeroCellMarksARowThatStandsForOtherReplicaCounts) {
    StudioState s = default_state();
    run_search(s);
    int marked = 0;
    for (const PlanRow& r : s.planner.rows) {
        bool replicas = false;
        for (const FoldedVariant& v : r.entry.folded) replicas |= v.dp_replicate != r.entry.choice.dp_replicate;
        const std::string cell = plan_cell_text(s, r, PlanColumn::zero);
        EXPECT_EQ(!cell.empty() && cell.back() == '+', replicas) << r.number << ": " << cell;
        marked += replicas;
    }
    EXPECT_GT(marked, 0) << "the default job's list folds no replica count: the case shows nothing";
}

TEST(StudioPlanner, FitsOnlyFilter) {
    StudioState s = default_state();
    run_search(s);
    const auto& rows = s.planner.rows;
    const auto unfit = std::count_if(rows.begin(), rows.end(), [](const PlanRow& r) { return !r.fits; });
    ASSERT_GT(unfit, 0) << "the default job has layouts that do not fit";
    EXPECT_TRUE(s.planner.fits_only);
    EXPECT_EQ(s.planner.view.size(), rows.size() - (size_t)unfit);
    for (int i : s.planner.view) EXPECT_TRUE(rows[(size_t)i].fits);
    planner_set_fits_only(s, false);
    EXPECT_EQ(s.planner.view.size(), rows.size());
    for (const PlanRow& r : rows)
        if (!r.fits) {
            EXPECT_EQ(r.rank, 0);
            EXPECT_LT(r.entry.score.usable_bytes - r.entry.score.peak_bytes, 0);
            EXPECT_EQ(plan_cell_text(s, r, PlanColumn::rank), "-");
            EXPECT_EQ(plan_cell_text(s, r, PlanColumn::headroom).front(), '-');
        }
    planner_set_fits_only(s, true);
    EXPECT_EQ(s.planner.view.size(), rows.size() - (size_t)unfit);
}

TEST(StudioPlanner, ApplyingARowSetsTheLayoutAndTheJobStaysValid) {
    StudioState s = default_state();
    run_search(s);
    const int64_t global_batch = s.job.training.global_batch;
    int applied = 0;
    for (int i = 0; i < (int)s.planner.rows.size() && applied < 12; ++i) {
        const PlanRow row = s.planner.rows[(size_t)i];
        if (!row.fits) continue;
        ASSERT_TRUE(planner_apply_row(s, i)) << i;
        ++applied;
        const LayoutChoice& c = row.entry.choice;
        EXPECT_EQ(s.job.parallel.tp, c.tp);
        EXPECT_EQ(s.job.parallel.pp, c.pp);
        EXPECT_EQ(s.job.parallel.dp, c.dp);
        EXPECT_EQ(s.job.parallel.vpp, c.vpp);
        EXPECT_EQ(s.job.parallel.zero, c.zero);
        EXPECT_EQ(s.job.parallel.distributed_optimizer, c.distributed_optimizer);
        EXPECT_EQ(s.job.parallel.sequence_parallel, c.sequence_parallel);
        EXPECT_EQ(s.job.parallel.recompute, c.recompute);
        EXPECT_EQ(s.job.parallel.order, plan_cell_text(s, row, PlanColumn::order));
        EXPECT_EQ(s.job.training.micro_batch, c.micro_batch);
        EXPECT_EQ(s.job.training.global_batch, global_batch);
        ASSERT_TRUE(job_valid(s)) << "row " << i << ": " << s.diagnostics[0].message;
        EXPECT_FALSE(planner_stale(s)) << "a layout-only change leaves the table current";
        planner_tick(s);
        EXPECT_TRUE(planner_row_is_job(s, i));
        ASSERT_EQ(s.planner.job_rank.kind, JobRank::Kind::ranked) << job_rank_text(s);
        EXPECT_EQ(s.planner.job_rank.rank, row.rank) << "row " << i;
        EXPECT_EQ(s.planner.job_rank.row, i);
    }
    EXPECT_GE(applied, 2);
    EXPECT_FALSE(planner_apply_row(s, -1));
    EXPECT_FALSE(planner_apply_row(s, (int)s.planner.rows.size()));
}

// fold: a job whose layout is a variant folded into a row (another replica count or
// interleaving depth of the same layout) is that row: highlighted, and the line above the
// table says which variant it is.
TEST(StudioPlanner, AJobAtAFoldedVariantIsItsRow) {
    StudioState s = default_state();
    run_search(s);
    int row = -1;
    FoldedVariant variant;
    for (int i = 0; i < (int)s.planner.rows.size() && row < 0; ++i) {
        const PlanRow& r = s.planner.rows[(size_t)i];
        for (const FoldedVariant& v : r.entry.folded)
            if (r.fits && row < 0 && (v.vpp != r.entry.choice.vpp || v.dp_replicate != r.entry.choice.dp_replicate))
                row = i, variant = v;
    }
    ASSERT_GE(row, 0) << "the default job's list folds no variant: the case shows nothing";
    ASSERT_TRUE(planner_apply_row(s, row));
    planner_tick(s);
    ASSERT_EQ(s.planner.job_rank.row, row);
    EXPECT_FALSE(s.planner.job_rank.folded);
    EXPECT_EQ(job_row_note(s), " (highlighted below)");
    s.job.parallel.vpp = variant.vpp;
    s.job.parallel.dp_replicate = variant.dp_replicate;
    recompute(s);
    ASSERT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    planner_tick(s);
    ASSERT_EQ(s.planner.job_rank.kind, JobRank::Kind::ranked) << job_rank_text(s);
    EXPECT_EQ(s.planner.job_rank.row, row);
    EXPECT_TRUE(s.planner.job_rank.folded);
    EXPECT_TRUE(planner_row_is_job(s, row));
    const PlanRow& r = s.planner.rows[(size_t)row];
    const std::string note = job_row_note(s);
    EXPECT_TRUE(contains(note, "folded into row " + std::to_string(r.number))) << note;
    if (variant.dp_replicate != r.entry.choice.dp_replicate)
        EXPECT_TRUE(contains(note, "dp_replicate " + std::to_string(variant.dp_replicate))) << note;
    if (variant.vpp != r.entry.choice.vpp) EXPECT_TRUE(contains(note, "vpp " + std::to_string(variant.vpp))) << note;
    // Another replica count that is not folded into the row is not the row.
    s.job.parallel.dp_replicate = 1000;
    recompute(s);
    planner_tick(s);
    EXPECT_FALSE(planner_row_is_job(s, row));
}

// A job file that leaves its overlap keys to its stack (Megatron-LM's command line: off): the
// Job panel lists them as stack defaults; once a row is applied they are the planner's
// choice and leave the list, while the defaults the planner does not choose stay.
TEST(StudioPlanner, AnAppliedRowsKeysLeaveTheStackDefaults) {
    StudioState s = default_state();
    auto job = load_job_arg(PTD_SOURCE_DIR "/assets/jobs/llama3-8b-h100.toml", s.presets);
    ASSERT_TRUE(job) << job.error().str();
    s = make_state(s.presets, *job);
    auto keys = [&s] {
        std::string text;
        for (const StackDefault& d : stack_defaults_view(s).rows) text += d.key + " = " + d.value + "\n";
        return text;
    };
    ASSERT_TRUE(contains(keys(), "parallel.overlap_grad_reduce = false\n")) << keys();
    run_search(s);
    int row = -1;
    for (int i = 0; i < (int)s.planner.rows.size() && row < 0; ++i)
        if (s.planner.rows[(size_t)i].fits) row = i;
    ASSERT_GE(row, 0);
    ASSERT_TRUE(planner_apply_row(s, row));
    for (const char* key : {"parallel.distributed_optimizer", "parallel.overlap_grad_reduce", "parallel.overlap_param_gather",
                            "parallel.tp_comm_overlap", "parallel.recompute "})
        EXPECT_FALSE(contains(keys(), key)) << key << " is the planner's choice now\n" << keys();
    EXPECT_TRUE(contains(keys(), "parallel.grad_reduce_in_fp32 = true")) << "a default the planner does not choose stays\n" << keys();
}

// Right-click "Pin for Compare": the row's layout goes to the Compare tab as side A and the
// job stays as it is; applying the same row afterwards makes the two sides equal.
TEST(StudioPlanner, PinningARowComparesItWithoutChangingTheJob) {
    StudioState s = default_state();
    run_search(s);
    int row = -1;
    for (int i = 0; i < (int)s.planner.rows.size() && row < 0; ++i)
        if (s.planner.rows[(size_t)i].fits && !planner_row_is_job(s, i)) row = i;
    ASSERT_GE(row, 0);
    const JobSpec before = s.job;
    ASSERT_TRUE(compare_pin_plan_row(s, row));
    EXPECT_EQ(s.job.parallel.tp, before.parallel.tp);
    EXPECT_EQ(s.job.parallel.pp, before.parallel.pp);
    EXPECT_EQ(s.job.training.micro_batch, before.training.micro_batch);
    ASSERT_TRUE(s.compare.pinned);
    EXPECT_EQ(s.compare.pinned->name, "planner row #" + std::to_string(s.planner.rows[(size_t)row].number));
    int differ = 0;
    for (const CompareRow& r : compare_view_rows(s)) differ += r.differs;
    EXPECT_GT(differ, 0);
    ASSERT_TRUE(planner_apply_row(s, row));
    differ = 0;
    for (const CompareRow& r : compare_view_rows(s)) differ += r.differs;
    EXPECT_EQ(differ, 0) << "the applied row is the pinned one";
    EXPECT_FALSE(compare_pin_plan_row(s, -1));
}

TEST(StudioPlanner, ModelEditsMakeTheResultStaleLayoutEditsDoNot) {
    StudioState s = default_state();
    run_search(s);
    ASSERT_TRUE(edit_int(s, "parallel.tp", 8));
    planner_tick(s);
    EXPECT_FALSE(planner_stale(s));
    EXPECT_EQ(s.planner.job_rank.kind, JobRank::Kind::ranked);

    ASSERT_TRUE(edit_int(s, "model.layers", 40));
    planner_tick(s);
    EXPECT_TRUE(planner_stale(s));
    EXPECT_EQ(s.planner.job_rank.kind, JobRank::Kind::stale);
    EXPECT_TRUE(contains(job_rank_text(s), "re-run")) << job_rank_text(s);
    EXPECT_FALSE(planner_apply_row(s, 0)) << "a stale row would not fit the job it was planned for";
    ASSERT_TRUE(edit_int(s, "model.layers", 32));
    EXPECT_FALSE(planner_stale(s));

    // Options count too.
    s.planner.settings.tp_beyond_node = true;
    EXPECT_TRUE(planner_stale(s));
    run_search(s);
    EXPECT_FALSE(planner_stale(s));
}

TEST(StudioPlanner, RanksAJobThatDoesNotFitAndAnInvalidOne) {
    StudioState s = default_state();
    ASSERT_TRUE(edit_int(s, "parallel.tp", 1));
    ASSERT_TRUE(edit_int(s, "parallel.pp", 1));  // a whole 7B replica with Adam per GPU
    ASSERT_TRUE(edit_int(s, "parallel.zero", 0)); // nothing sharded
    set_sequence_parallel(s, false);              // needs tp > 1
    ASSERT_TRUE(job_valid(s));
    run_search(s);
    ASSERT_EQ(s.planner.job_rank.kind, JobRank::Kind::no_fit) << job_rank_text(s);
    EXPECT_GT(s.planner.job_rank.peak_bytes, s.planner.job_rank.usable_bytes);
    EXPECT_TRUE(contains(job_rank_text(s), "does not fit")) << job_rank_text(s);

    ASSERT_TRUE(edit_int(s, "parallel.tp", 3));  // does not divide 32 heads: invalid layout
    planner_tick(s);
    EXPECT_EQ(s.planner.job_rank.kind, JobRank::Kind::invalid) << job_rank_text(s);
    // The planner still runs: it replaces the layout.
    EXPECT_EQ(planner_blocker(s), "") << planner_blocker(s);
}

// A layout that fits but that the job's framework cannot export (torchtitan's current config
// has no tensorwise float8) is said to be refused, with the export's reason, not ranked among
// none (ptd plan's job_refused).
TEST(StudioPlanner, RanksAJobWhoseFrameworkRefusesItsLayout) {
    const PresetCatalog& presets = embedded_presets();
    auto job = load_job_text("[model]\npreset = \"llama3-8b\"\n[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n"
                             "[parallel]\ntp = 1\npp = 1\ndp = 8\nzero = 3\nrecompute = \"full\"\n"
                             "[training]\nframework = \"torchtitan\"\nglobal_batch = 16\ntorch_compile = true\n"
                             "fp8 = \"tensorwise\"\n",
                             "titan.toml", presets);
    ASSERT_TRUE(job) << job.error().str();
    StudioState s = make_state(presets, *job);
    ASSERT_TRUE(job_valid(s));
    run_search(s);
    ASSERT_TRUE(s.planner.result);
    ASSERT_TRUE(s.planner.result->job_refused) << job_rank_text(s);
    EXPECT_EQ(s.planner.job_rank.kind, JobRank::Kind::refused) << job_rank_text(s);
    EXPECT_TRUE(contains(job_rank_text(s), "fits, but `ptd export --format torchtitan` refuses it: training.fp8"))
        << job_rank_text(s);
}

TEST(StudioPlanner, AnotherGpuCount) {
    StudioState s = default_state();
    s.planner.settings.gpus = 64;
    run_search(s);
    for (const PlanRow& r : s.planner.rows) {
        const LayoutChoice& c = r.entry.choice;
        EXPECT_EQ(c.tp * c.pp * c.dp * c.cp, 64);
    }
    EXPECT_EQ(s.planner.job_rank.kind, JobRank::Kind::different_gpus);
    EXPECT_TRUE(contains(job_rank_text(s), "32 GPUs")) << job_rank_text(s);
    // Applying a row moves the job to 64 GPUs (8 nodes) and keeps it valid.
    ASSERT_TRUE(planner_apply_row(s, 0));
    EXPECT_EQ(s.job.cluster.nodes, 8);
    ASSERT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    planner_tick(s);
    EXPECT_EQ(s.planner.job_rank.kind, JobRank::Kind::ranked) << job_rank_text(s);
    EXPECT_EQ(s.planner.job_rank.rank, 1);
}

TEST(StudioPlanner, RefusesBadOptionsAndJobs) {
    StudioState s = default_state();
    s.planner.settings.gpus = 12;  // not whole nodes of 8
    EXPECT_TRUE(contains(planner_setting_error(s, "gpus"), "multiple of cluster.gpus_per_node (8)"))
        << planner_setting_error(s, "gpus");
    EXPECT_FALSE(planner_start(s));
    EXPECT_EQ(s.planner.status, PlannerStatus::failed);
    EXPECT_TRUE(contains(s.planner.error, "gpus")) << s.planner.error;
    s.planner.settings.gpus = 0;
    s.planner.settings.top_k = 0;
    EXPECT_FALSE(planner_setting_error(s, "top_k").empty());
    s.planner.settings.top_k = 10;
    s.planner.settings.job_headroom = false;
    s.planner.settings.headroom = 0.95;
    EXPECT_FALSE(planner_setting_error(s, "headroom").empty());
    s.planner.settings.headroom = 0.2;
    EXPECT_EQ(planner_setting_error(s, "headroom"), "");

    ASSERT_TRUE(edit_int(s, "model.hidden", 4097));  // not divisible by 32 heads
    EXPECT_TRUE(contains(planner_blocker(s), "model.hidden")) << planner_blocker(s);
    EXPECT_FALSE(planner_start(s));
    EXPECT_FALSE(planner_running(s));
    ASSERT_TRUE(edit_int(s, "model.hidden", 4096));
    // Headroom: more reserve, fewer fitting layouts.
    run_search(s);
    const int64_t with_reserve = s.planner.result->feasible;
    s.planner.settings.job_headroom = true;
    run_search(s);
    EXPECT_LT(with_reserve, s.planner.result->feasible);
}

TEST(StudioPlanner, CellText) {
    EXPECT_EQ(group_thousands(0), "0");
    EXPECT_EQ(group_thousands(999), "999");
    EXPECT_EQ(group_thousands(1000), "1,000");
    EXPECT_EQ(group_thousands(1234567), "1,234,567");
    EXPECT_EQ(group_thousands(-45000), "-45,000");
    StudioState s = default_state();
    run_search(s);
    const PlanRow& r = s.planner.rows[0];
    EXPECT_EQ(plan_cell_text(s, r, PlanColumn::rank), "1");
    EXPECT_TRUE(contains(plan_cell_text(s, r, PlanColumn::mfu), "%"));
    EXPECT_TRUE(contains(plan_cell_text(s, r, PlanColumn::peak), "GiB"));
    EXPECT_TRUE(contains(plan_cell_text(s, r, PlanColumn::step_s), " s"));
    for (int c = 0; c < kPlanColumns; ++c) {
        EXPECT_STRNE(plan_column_label((PlanColumn)c), "?");
        EXPECT_STRNE(plan_column_help((PlanColumn)c), "");
    }
}

// ---- issue 12: a bare job (model + cluster + global batch, no [parallel]) ----

namespace {
StudioState bare_state(bool with_global_batch) {
    const PresetCatalog& presets = embedded_presets();
    std::string text = "[model]\npreset = \"llama3-8b\"\n[cluster]\nnodes = 4\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n";
    if (with_global_batch) text += "[training]\nglobal_batch = 256\n";
    auto job = load_job_text(text, "bare.toml", presets);
    EXPECT_TRUE(job) << (job ? "" : job.error().str());
    return make_state(presets, job ? *job : default_job(presets));
}
}  // namespace

TEST(StudioPlanner, BareJobShowsNoLayoutChosenAndThePlannerWorksOnIt) {
    StudioState s = bare_state(true);
    // Not an error about tp1·pp1·dp32 (which the user never wrote): a prompt to plan.
    EXPECT_TRUE(s.diagnostics.empty()) << s.diagnostics.front().message;
    EXPECT_FALSE(s.layout);
    EXPECT_FALSE(job_valid(s));
    EXPECT_TRUE(contains(no_layout_message(s), "no layout chosen")) << no_layout_message(s);
    EXPECT_TRUE(contains(no_layout_message(s), "planner")) << no_layout_message(s);
    EXPECT_EQ(job_estimate(s), nullptr);  // the memory tab shows the prompt, not numbers
    EXPECT_EQ(s.job.training.global_batch, 256);

    run_search(s);
    ASSERT_FALSE(s.planner.rows.empty());
    EXPECT_TRUE(contains(job_rank_text(s), "no layout yet")) << job_rank_text(s);
    for (int i = 0; i < (int)s.planner.rows.size(); ++i) EXPECT_FALSE(planner_row_is_job(s, i));
    ASSERT_TRUE(planner_apply_row(s, 0));
    EXPECT_TRUE(s.job.has_layout());
    EXPECT_TRUE(job_valid(s)) << (s.diagnostics.empty() ? "" : s.diagnostics.front().message);
    EXPECT_TRUE(no_layout_message(s).empty());
    EXPECT_NE(job_estimate(s), nullptr);
    EXPECT_EQ(s.job.training.global_batch, 256);  // kept, not re-derived
}

TEST(StudioPlanner, BareJobWithoutGlobalBatchAsksForIt) {
    StudioState s = bare_state(false);
    EXPECT_TRUE(s.diagnostics.empty());
    EXPECT_EQ(s.job.training.global_batch, 0);  // not micro_batch · 32 invented
    EXPECT_FALSE(planner_start(s));
    EXPECT_TRUE(contains(s.planner.error, "training.global_batch")) << s.planner.error;
    ASSERT_TRUE(edit_int(s, "training.global_batch", 128));
    run_search(s);
    EXPECT_FALSE(s.planner.rows.empty());
}

TEST(StudioPlanner, EditingALayoutFieldChoosesTheLayout) {
    StudioState s = bare_state(true);
    ASSERT_TRUE(edit_int(s, "parallel.tp", 8));
    EXPECT_TRUE(s.job.has_layout());
    EXPECT_TRUE(job_valid(s)) << (s.diagnostics.empty() ? "" : s.diagnostics.front().message);
    EXPECT_EQ(s.job.parallel.dp, 4);
}

TEST(StudioPlanner, PrecisionFollowsTheGpuUntilChosen) {
    StudioState s = bare_state(true);
    EXPECT_EQ(s.job.training.precision, Precision::bf16);
    ASSERT_TRUE(set_gpu_preset(s, "v100-32gb"));
    EXPECT_EQ(s.job.training.precision, Precision::fp16);  // before: bf16, an error on V100
    EXPECT_FALSE(s.job.training.flash_attention);
    ASSERT_TRUE(set_gpu_preset(s, "cpu"));
    EXPECT_EQ(s.job.training.precision, Precision::fp32);
    EXPECT_TRUE(field_error(s, "training.precision").empty());
    set_precision(s, Precision::fp32);
    ASSERT_TRUE(set_gpu_preset(s, "h100-sxm"));
    EXPECT_EQ(s.job.training.precision, Precision::fp32);  // chosen now: kept
}

namespace {

// Issue 28 points 1-2 in the Planner tab: the search is bounded by the job's framework (the
// default job is Megatron-LM: no ZeRO-2/3 row), says so with the headroom it left, and the
// "any framework" option widens it.
TEST(StudioPlanner, SearchIsBoundedByTheJobsFrameworkAndSaysSo) {
    StudioState s = default_state();
    run_search(s);
    const std::string bounds = planner_bounds_text(s);
    EXPECT_TRUE(contains(bounds, "framework megatron (Megatron-LM main d98e8a6)")) << bounds;
    EXPECT_TRUE(contains(bounds, "headroom 5% (megatron's default)")) << bounds;
    for (const PlanRow& row : s.planner.rows) EXPECT_LT(row.entry.choice.zero, 2);
    const int64_t bounded = s.planner.result->enumerated;
    s.planner.settings.any_framework = true;
    EXPECT_TRUE(planner_stale(s));
    run_search(s);
    EXPECT_TRUE(contains(planner_bounds_text(s), "the layouts any framework runs")) << planner_bounds_text(s);
    EXPECT_GT(s.planner.result->enumerated, bounded);
    bool marked = false;
    for (const PlanRow& row : s.planner.rows) marked = marked || !row.entry.frameworks.empty();
    EXPECT_TRUE(marked);
}

}  // namespace
