// kept_answers.cpp — the planner's per-layout evaluation keeps answers between calls
// (estimators/src: the NCCL cost per message and the groups' placement per thread in
// collectives.cpp, 1F1B makespans of deep pipelines through the makespan memo in timeline.cpp)
// and fills a balanced split's durations and tails by runs of equal stages (estimate.cpp).
// None of it may change a number: every score must be bit for bit the one a thread with
// nothing kept computes, whatever was evaluated before it, and the runs must give exactly
// what evaluating every stage gives.
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "job_test_util.h"
#include "planner_test_jobs.h"

#include "ptd/model/estimate.h"
#include "ptd/plan/planner.h"
#include "ptd/spec/presets.h"
#include "ptd/timeline/timeline.h"

namespace {

using namespace ptd;

JobSpec load(const char* text) { return ptd_test::job_from_text(text); }
const char* const kMixtral = ptd_test::kMixtralPlannerJob;

struct Case {
    const EstimateContext* ctx;
    LayoutChoice choice;
    std::vector<int> lps;
};

std::string name_of(const Case& k) {
    const LayoutChoice& c = k.choice;
    return k.ctx->job.model.name + " tp" + std::to_string(c.tp) + " pp" + std::to_string(c.pp) + " dp" +
           std::to_string(c.dp) + " cp" + std::to_string(c.cp) + " ep" + std::to_string(c.ep) + " vpp" +
           std::to_string(c.vpp) + " mb" + std::to_string(c.micro_batch) + " zero" + std::to_string(c.zero) + " rc" +
           std::to_string((int)c.recompute) + " sp" + std::to_string((int)c.sequence_parallel) + " order" +
           std::to_string(c.order) + " sched" + std::to_string((int)c.schedule);
}

// Every number of a score, bit for bit.
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
void expect_same_score(const LayoutScore& got, const LayoutScore& want, const std::string& what) {
    const double g[] = {got.peak_bytes, got.step_s, got.tokens_per_s, got.mfu, got.hfu, got.time.compute,
                        got.time.tp_comm, got.time.cp_comm, got.time.ep_comm, got.time.pp_comm, got.time.bubble,
                        got.time.dp_comm, got.time.optimizer, got.time.offload, got.worst_mem.total(),
                        got.host_bytes_per_node};
    const double w[] = {want.peak_bytes, want.step_s, want.tokens_per_s, want.mfu, want.hfu, want.time.compute,
                        want.time.tp_comm, want.time.cp_comm, want.time.ep_comm, want.time.pp_comm, want.time.bubble,
                        want.time.dp_comm, want.time.optimizer, want.time.offload, want.worst_mem.total(),
                        want.host_bytes_per_node};
    for (size_t k = 0; k < std::size(g); ++k) EXPECT_TRUE(same_bits(g[k], w[k])) << what << " field " << k << ": " << g[k] << " vs " << w[k];
    EXPECT_EQ(got.fits, want.fits) << what;
    EXPECT_EQ(got.worst_stage, want.worst_stage) << what;
}

// The planner's kind of space: tp, pp (even and uneven splits up to 64 stages), micro-batch,
// ZeRO, recompute, SP, rank order, the one-chunk schedules (1F1B, ZB-H1, DualPipe) and a few
// interleaved ones; Mixtral with ep and cp.
std::vector<Case> planner_cases(const EstimateContext& l70, const EstimateContext& mix) {
    std::vector<Case> out;
    for (int tp : {1, 2, 8})
        for (int pp : {1, 2, 3, 4, 8, 16, 32, 64})
            for (int mb : {1, 2})
                for (int zero : {0, 1, 3})
                    for (auto rc : {Recompute::none, Recompute::full})
                        for (int order : {0, 1, 2})
                          for (bool sp : {true, false})
                            for (auto sched : {PipelineSchedule::automatic, PipelineSchedule::zb_h1, PipelineSchedule::dualpipe}) {
                                if (512 % (tp * pp)) continue;
                                const int dp = 512 / (tp * pp);
                                if (1024 % dp || (1024 / dp) % mb) continue;
                                const int mbs = 1024 / dp / mb;
                                if (zero == 3 && pp > 1) continue;
                                if (!sp && (tp == 1 || order == 1 || mb == 2)) continue;  // fewer: SP off where it asks another collective
                                if (sched != PipelineSchedule::automatic && pp < 2) continue;
                                if (sched == PipelineSchedule::dualpipe && (pp % 2 || 80 % pp || mbs < 2 * pp || mbs % 2)) continue;
                                LayoutChoice c{.tp = tp, .pp = pp, .dp = dp, .micro_batch = mb, .zero = zero,
                                               .sequence_parallel = sp && tp > 1, .recompute = rc, .order = order};
                                c.schedule = sched;
                                std::vector<int> lps;
                                if (80 % pp) lps = balanced_layers_per_stage(80, pp);
                                out.push_back({&l70, c, lps});
                                if (sched == PipelineSchedule::automatic && pp > 1 && 80 % (pp * 2) == 0 && mbs % pp == 0) {
                                    c.vpp = 2;
                                    out.push_back({&l70, c, {}});
                                }
                            }
    for (int ep : {1, 2, 8})
        for (int cp : {1, 2})
            for (int pp : {1, 2, 4, 8})
                for (int zero : {0, 1}) {
                    const int tp = 2, dp = 128 / (tp * pp * cp);
                    if (dp < 1 || (dp * cp) % ep) continue;
                    LayoutChoice c{.tp = tp, .pp = pp, .dp = dp, .cp = cp, .ep = ep, .micro_batch = 1, .zero = zero,
                                   .sequence_parallel = true, .recompute = Recompute::selective};
                    out.push_back({&mix, c, {}});
                }
    return out;
}

// Each layout scored in a thread of its own (nothing kept from before: the answers are
// computed) equals the same layout scored in one thread after hundreds of others in a
// shuffled order (answers kept from layouts that share groups, messages or pipelines).
TEST(PlannerKeptAnswers, ScoreDoesNotDependOnWhatWasEvaluatedBefore) {
    const JobSpec l70_job = ptd_test::load_asset(ptd_test::kLlama70bPlannerAsset), mix_job = load(kMixtral);
    const EstimateContext l70 = make_estimate_context(l70_job), mix = make_estimate_context(mix_job);
    std::vector<Case> cases = planner_cases(l70, mix);
    ASSERT_GT(cases.size(), 1000u);
    std::vector<LayoutScore> fresh(cases.size());
    // The NCCL and group answers have no clear: a new thread starts with nothing kept.
    for (size_t i = 0; i < cases.size(); ++i) {
        std::thread t([&, i] { fresh[i] = evaluate_layout(*cases[i].ctx, cases[i].choice, cases[i].lps, nullptr); });
        t.join();
    }
    std::vector<size_t> order(cases.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::mt19937_64 rng(15);
    for (int round = 0; round < 2; ++round) {
        std::shuffle(order.begin(), order.end(), rng);
        for (size_t i : order) {
            const LayoutScore warm = evaluate_layout(*cases[i].ctx, cases[i].choice, cases[i].lps, nullptr);
            expect_same_score(warm, fresh[i], name_of(cases[i]) + " (round " + std::to_string(round) + ")");
        }
    }
}

// Layouts that differ in one input of their groups or collectives at a time (placement, ZeRO
// collective, group size, all-reduce vs all-gather of the same TP message), scored alternately:
// each gets its own time, not the one kept for the layout asked before.
TEST(PlannerKeptAnswers, LayoutsThatShareGroupsOrMessagesKeepTheirOwnScores) {
    const JobSpec job = ptd_test::load_asset(ptd_test::kLlama70bPlannerAsset);
    const EstimateContext ctx = make_estimate_context(job);
    // Layouts whose DP groups differ only in placement (rank order), size or the ZeRO
    // collective: scored alternately, each must keep its own score.
    LayoutChoice a{.tp = 8, .pp = 4, .dp = 16, .micro_batch = 1, .zero = 0, .sequence_parallel = true, .order = 0};
    LayoutChoice b = a, c = a, d = a, e = a;
    b.order = 2;  // DP innermost: the DP group sits on the node
    c.zero = 1;   // reduce-scatter + all-gather instead of all-reduce
    d.tp = 4, d.dp = 32;
    e.sequence_parallel = false;  // TP all-reduce instead of all-gather + reduce-scatter, same message
    std::vector<LayoutScore> first;
    for (const LayoutChoice& x : {a, b, c, d, e}) {
        LayoutScore s;
        std::thread t([&] { s = evaluate_layout(ctx, x, {}, nullptr); });
        t.join();
        first.push_back(s);
    }
    EXPECT_NE(first[0].step_s, first[1].step_s);
    EXPECT_NE(first[0].step_s, first[2].step_s);
    EXPECT_NE(first[0].step_s, first[3].step_s);
    EXPECT_NE(first[0].step_s, first[4].step_s);
    const LayoutChoice seq[] = {a, b, c, d, e, c, b, a, e, d, a, e};
    const int idx[] = {0, 1, 2, 3, 4, 2, 1, 0, 4, 3, 0, 4};
    for (size_t k = 0; k < std::size(seq); ++k)
        expect_same_score(evaluate_layout(ctx, seq[k], {}, nullptr), first[(size_t)idx[k]], "layout " + std::to_string(idx[k]));
}

// A balanced split without detail (the planner's call) fills its durations and tails by runs
// of equal stages; with detail every stage is evaluated one by one. Both give the same bits,
// with the remainder's extra layer on 0 … p − 2 stages and for 1F1B, ZB-H1 and DualPipe.
TEST(PlannerBalancedRuns, RunsGiveWhatEveryStageGives) {
    const JobSpec job = ptd_test::load_asset(ptd_test::kLlama70bPlannerAsset);
    const EstimateContext ctx = make_estimate_context(job);
    int checked = 0, with_extra = 0, zb = 0, dualpipe = 0;
    for (int pp : {2, 3, 4, 5, 6, 7, 8, 9, 16, 32, 64, 79, 80})
        for (auto sched : {PipelineSchedule::automatic, PipelineSchedule::zb_h1, PipelineSchedule::dualpipe})
            for (int zero : {0, 1})
                for (auto rc : {Recompute::none, Recompute::selective}) {
                    // dp 4 of the 1024-sequence batch: 256 micro-batches, enough for DualPipe.
                    const int dp = 4;
                    if (sched == PipelineSchedule::dualpipe && (pp % 2 || 80 % pp)) continue;
                    LayoutChoice c{.tp = 8, .pp = pp, .dp = dp, .micro_batch = 1, .zero = zero,
                                   .sequence_parallel = true, .recompute = rc};
                    c.schedule = sched;
                    const std::vector<int> lps = 80 % pp ? balanced_layers_per_stage(80, pp) : std::vector<int>{};
                    Estimate est;
                    const LayoutScore every = evaluate_layout(ctx, c, lps, &est);
                    const LayoutScore runs = evaluate_layout(ctx, c, lps, nullptr);
                    const std::string what = "pp " + std::to_string(pp) + " sched " + std::to_string((int)sched) +
                                             " zero " + std::to_string(zero) + " rc " + std::to_string((int)rc);
                    EXPECT_TRUE(same_bits(runs.step_s, every.step_s)) << what << ": " << runs.step_s << " vs " << every.step_s;
                    EXPECT_TRUE(same_bits(runs.tokens_per_s, every.tokens_per_s)) << what;
                    EXPECT_TRUE(same_bits(runs.time.bubble, every.time.bubble)) << what;
                    EXPECT_TRUE(same_bits(runs.time.dp_comm, every.time.dp_comm)) << what;
                    EXPECT_TRUE(same_bits(runs.time.optimizer, every.time.optimizer)) << what;
                    EXPECT_TRUE(same_bits(runs.peak_bytes, every.peak_bytes)) << what;
                    ++checked;
                    with_extra += 80 % pp != 0;
                    zb += sched == PipelineSchedule::zb_h1;
                    dualpipe += sched == PipelineSchedule::dualpipe;
                }
    EXPECT_GT(checked, 100);
    EXPECT_GT(with_extra, 40);
    EXPECT_GT(zb, 40);
    EXPECT_GE(dualpipe, 20);
}

}  // namespace
