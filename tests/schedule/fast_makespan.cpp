// fast_makespan.cpp — the planner's fast evaluation path gives the slow path's numbers
// (estimators/src/model/schedule.cpp). pipeline_makespan answers 1F1B (m ≥ p) with a closed form
// over "loop stages" instead of placing every block; these tests hold it to simulate_pipeline, the block-by-block event simulation:
// every stage's end within 1e-12 relative, on random stage durations (few kinds of stage as
// a balanced split has, or all different, near-ties included) and on the durations
// evaluate_layout builds for a few hundred varied layouts (1F1B, interleaved, ZB-H1, uneven
// layers_per_stage, cp, ep, ZeRO 0–3), whose estimate must also not depend on whether the
// detail is asked for.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
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

// Every stage's end of the fast path against the simulation, within 1e-12 relative.
void expect_same_ends(const PipelineDurations& d, const std::string& what) {
    std::vector<double> slow((size_t)d.p), fast((size_t)d.p);
    clear_pipeline_makespan_memo();  // the fast path itself, not a remembered answer
    const double want = simulate_pipeline(d, slow);
    const double got = pipeline_makespan(d, fast);
    EXPECT_NEAR(got, want, 1e-12 * want) << what;
    for (int s = 0; s < d.p; ++s) EXPECT_NEAR(fast[(size_t)s], slow[(size_t)s], 1e-12 * slow[(size_t)s]) << what << " stage " << s;
}

// 1F1B on random stages: 1–4 kinds of stage (a balanced split has up to four: first, the
// ones with a layer more, the rest, last) or every stage different; durations that tie or
// nearly tie (1e-3, 1e-9 apart: the slowest stage takes over only after many micro-batches,
// which is what made the old steady-state shortcut fall back to the full simulation).
TEST(OneFOneBFastPath, EqualsTheSimulationOnRandomStages) {
    std::mt19937_64 rng(2026);
    std::uniform_real_distribution<double> u(0.2, 2.0);
    for (int trial = 0; trial < 600; ++trial) {
        const int p = 2 + (int)(rng() % 40);
        // m from p (the closed form's least) up; a quarter below 2p − 1, where how soon a walk
        // can reach its loop stage limits it.
        const int m = trial % 4 == 0 ? p + (int)(rng() % p) : p + (int)(rng() % (8 * p));
        const int kinds = trial % 5 == 4 ? p : 1 + (int)(rng() % 4);
        std::vector<double> kf((size_t)kinds), kb((size_t)kinds);
        for (int k = 0; k < kinds; ++k) kf[(size_t)k] = u(rng), kb[(size_t)k] = u(rng);
        if (trial % 3 == 1 && kinds > 1) kf[1] = kf[0] * (1 + 1e-3), kb[1] = kb[0];
        if (trial % 3 == 2 && kinds > 1) kf[1] = kf[0] * (1 - 1e-9), kb[1] = kb[0];
        std::vector<double> f((size_t)p), b((size_t)p);
        for (int s = 0; s < p; ++s) {
            const int k = kinds == p ? s : (int)(rng() % kinds);
            f[(size_t)s] = kf[(size_t)k], b[(size_t)s] = kb[(size_t)k];
        }
        expect_same_ends(PipelineDurations{p, 1, m, f, b, PipelineSchedule::automatic, {}}, "p " + std::to_string(p) + " m " + std::to_string(m));
    }
}

// Stages whose forward + backward are equal while their split differs (a forward-heavy
// stage beside a backward-heavy one): one loop stage for the run of equal totals, but the
// backward changes from stage to stage, so each stage's end takes the maximum over the later
// rounds afresh, from the stage itself and the ends of each segment between loop stages.
TEST(OneFOneBFastPath, EqualTotalsWithDifferentSplits) {
    std::mt19937_64 rng(29);
    std::uniform_real_distribution<double> u(0.1, 0.9);
    for (int trial = 0; trial < 300; ++trial) {
        const int p = 2 + (int)(rng() % 30);
        const int m = trial % 3 == 0 ? p + (int)(rng() % p) : 2 * p - 1 + (int)(rng() % (4 * p));
        const int runs = 1 + (int)(rng() % 3);  // runs of equal totals, each split differently per stage
        // Multiples of 1/256, so that f + b is the run's total exactly.
        auto grid = [](double x) { return std::round(x * 256.0) / 256.0; };
        std::vector<double> total((size_t)runs);
        for (double& t : total) t = grid(1.0 + 2.0 * u(rng));
        std::vector<double> f((size_t)p), b((size_t)p);
        for (int s = 0; s < p; ++s) {
            const double t = total[(size_t)(s * runs / p)];
            f[(size_t)s] = grid(u(rng) * t), b[(size_t)s] = t - f[(size_t)s];
        }
        expect_same_ends(PipelineDurations{p, 1, m, f, b, PipelineSchedule::automatic, {}}, "p " + std::to_string(p) + " m " + std::to_string(m));
    }
}

// Few micro-batches (p ≤ m < 2p − 1) and stages that get lighter with depth: the best walk
// would loop on the first stage, but a walk must have descended far enough by the
// cool-down, so the entries that count are limited (c_lo in timeline.cpp).
TEST(OneFOneBFastPath, FewMicroBatchesAndHeavyFirstStages) {
    for (int p = 2; p <= 16; ++p)
        for (int m = p; m < 2 * p; ++m)
            for (double slope : {0.25, 0.5, 1.0}) {
                std::vector<double> f((size_t)p), b((size_t)p);
                for (int s = 0; s < p; ++s) f[(size_t)s] = 1.0 + slope * (p - s), b[(size_t)s] = 1.5 + slope * (p - s) * 0.75;
                expect_same_ends(PipelineDurations{p, 1, m, f, b, PipelineSchedule::automatic, {}},
                                 "p " + std::to_string(p) + " m " + std::to_string(m));
            }
}

// The case that cost the old path milliseconds: Llama-3 70B on pp 64 (16 two-layer stages,
// the last stage with the output layer 9% lighter) and 1024 micro-batches; the heavier
// stages take over from the deeper last stage only after hundreds of micro-batches.
TEST(OneFOneBFastPath, SlowTakeoverOfTheSlowestStage) {
    const int p = 64;
    std::vector<double> f((size_t)p, 0.00494199965), b((size_t)p, 0.00852939212);
    f[0] = 0.00570892818;
    for (int s = 1; s <= 16; ++s) f[(size_t)s] = 0.0094421689, b[(size_t)s] = 0.0166169538;
    f[p - 1] = 0.00861243361, b[p - 1] = 0.0151867639;
    for (int m : {64, 100, 127, 128, 200, 256, 512, 1024}) expect_same_ends(PipelineDurations{p, 1, m, f, b, PipelineSchedule::automatic, {}}, "m " + std::to_string(m));
}

JobSpec load(const char* text) { return ptd_test::job_from_text(text); }
const char* const kMixtral = ptd_test::kMixtralPlannerJob;

// The durations evaluate_layout gives the schedule, rebuilt from its detail (estimate.cpp:
// fwd / bwd per chunk, ZB-H1's W blocks out of the backward).
PipelineDurations durations_of(const Estimate& est, const LayoutChoice& c, std::vector<double>& f, std::vector<double>& b,
                               std::vector<double>& w) {
    const int p = c.pp, v = std::max(c.vpp, 1);
    const PipelineSchedule sched = p > 1 ? effective_schedule(c.schedule, v) : PipelineSchedule::one_f_one_b;
    f.assign((size_t)p * v, 0.0), b.assign((size_t)p * v, 0.0), w.assign(sched == PipelineSchedule::zb_h1 ? (size_t)p : 0, 0.0);
    for (int s = 0; s < p; ++s)
        for (int k = 0; k < v; ++k) {
            const ChunkTime& ct = est.stages[(size_t)s].chunks[(size_t)k];
            f[(size_t)(k * p + s)] = ct.fwd.total();
            b[(size_t)(k * p + s)] = ct.bwd.total();
            if (!w.empty()) {
                w[(size_t)s] = ct.bwd.wgrad;
                b[(size_t)s] -= ct.bwd.wgrad;
            }
        }
    PipelineDurations d{p, v, est.micro_batches, f, b, sched, w};
    d.hop = est.pipeline_hops_s;  // p2pdep
    return d;
}

// A few hundred layouts as the planner builds them: each one's pipeline (the fast path that
// evaluate_layout took, its stage ends in the detail) equals the simulation of the same
// durations, and the estimate without detail (the planner's call: the balanced-split
// shortcut, no detail) equals the one with it.
TEST(EvaluateLayoutFastPath, PipelineEqualsTheSimulationOverVariedLayouts) {
    const JobSpec l70 = ptd_test::load_asset(ptd_test::kLlama70bPlannerAsset), mix = load(kMixtral);
    int checked = 0, one_f_one_b = 0, interleaved = 0, zb = 0, uneven = 0;
    auto check = [&](const JobSpec& job, const LayoutChoice& c, const std::vector<int>& lps) {
        const EstimateContext ctx = make_estimate_context(job);
        Estimate est;
        clear_pipeline_makespan_memo();
        const LayoutScore with = evaluate_layout(ctx, c, lps, &est);
        clear_pipeline_makespan_memo();
        const LayoutScore without = evaluate_layout(ctx, c, lps, nullptr);
        const std::string what = job.model.name + " tp" + std::to_string(c.tp) + " pp" + std::to_string(c.pp) + " dp" +
                                 std::to_string(c.dp) + " cp" + std::to_string(c.cp) + " ep" + std::to_string(c.ep) +
                                 " vpp" + std::to_string(c.vpp) + " mb" + std::to_string(c.micro_batch) + " zero" +
                                 std::to_string(c.zero) + " sched " + std::to_string((int)c.schedule) +
                                 (lps.empty() ? "" : " uneven");
        ASSERT_EQ((int)est.stages.size(), c.pp) << what;
        EXPECT_NEAR(without.step_s, with.step_s, 1e-12 * with.step_s) << what;
        EXPECT_NEAR(without.peak_bytes, with.peak_bytes, 1e-12 * with.peak_bytes) << what;
        std::vector<double> f, b, w, slow((size_t)c.pp);
        const PipelineDurations d = durations_of(est, c, f, b, w);
        if (d.schedule == PipelineSchedule::dualpipe) return;
        const double want = simulate_pipeline(d, slow);
        EXPECT_NEAR(est.pipeline_s, want, 1e-12 * want) << what;
        for (int s = 0; s < c.pp; ++s)
            EXPECT_NEAR(est.stages[(size_t)s].pipeline_end_s, slow[(size_t)s], 1e-12 * slow[(size_t)s]) << what << " stage " << s;
        ++checked;
        one_f_one_b += d.v == 1 && d.schedule != PipelineSchedule::zb_h1;
        interleaved += d.v > 1;
        zb += d.schedule == PipelineSchedule::zb_h1;
        uneven += !lps.empty();
    };
    // Llama-3 70B (80 layers) on 512 GPUs: world = tp·pp·dp·cp.
    const std::vector<std::vector<int>> uneven_4 = {{19, 21, 20, 20}, {18, 20, 21, 21}};
    const std::vector<std::vector<int>> uneven_8 = {{9, 10, 10, 10, 10, 10, 10, 11}};
    for (int tp : {2, 8})
        for (int cp : {1, 2})
            for (int pp : {2, 4, 8, 16, 32, 64})
                for (int mb : {1, 2})
                    for (int zero : {0, 1, 2})
                        for (auto sched : {PipelineSchedule::automatic, PipelineSchedule::zb_h1}) {
                            const int dp = 512 / (tp * cp * pp);
                            if (dp < 1 || (1024 / dp) % mb) continue;
                            LayoutChoice c{.tp = tp, .pp = pp, .dp = dp, .cp = cp, .micro_batch = mb, .zero = zero,
                                           .sequence_parallel = true, .recompute = zero == 2 ? Recompute::full : Recompute::selective};
                            c.schedule = sched;
                            std::vector<int> lps;
                            if (80 % pp) lps = balanced_layers_per_stage(80, pp);
                            check(l70, c, lps);
                            if (pp == 4 && zero == 0)
                                for (const auto& u : uneven_4) check(l70, c, u);
                            if (pp == 8 && zero == 1)
                                for (const auto& u : uneven_8) check(l70, c, u);
                            // Interleaved: v chunks of 80 / (pp·v) layers.
                            if (sched == PipelineSchedule::automatic)
                                for (int v : {2, 4, 5})
                                    if (pp > 1 && 80 % (pp * v) == 0) {
                                        LayoutChoice ci = c;
                                        ci.vpp = v;
                                        check(l70, ci, {});
                                    }
                        }
    // ZeRO-3 (no pipeline) and the data-parallel extremes.
    for (int tp : {1, 2, 4, 8})
        for (int zero : {0, 3}) {
            LayoutChoice c{.tp = tp, .pp = 1, .dp = 512 / tp, .micro_batch = 1, .zero = zero, .recompute = Recompute::full};
            check(l70, c, {});
        }
    // Mixtral 8x7B (32 layers, 8 experts) on 128 GPUs with expert parallelism.
    for (int ep : {1, 2, 4, 8})
        for (int pp : {1, 2, 4, 8})
            for (int zero : {0, 1, 3})
                for (auto sched : {PipelineSchedule::automatic, PipelineSchedule::zb_h1}) {
                    const int tp = 2, dp = 128 / (tp * pp);
                    if (zero == 3 && pp > 1) continue;
                    if (sched == PipelineSchedule::zb_h1 && pp == 1) continue;
                    LayoutChoice c{.tp = tp, .pp = pp, .dp = dp, .ep = ep, .micro_batch = 1, .zero = zero,
                                   .sequence_parallel = true, .recompute = Recompute::selective};
                    c.schedule = sched;
                    check(mix, c, {});
                    if (pp == 4 && sched == PipelineSchedule::automatic) check(mix, c, {7, 9, 8, 8});
                }
    EXPECT_GE(checked, 300);
    EXPECT_GT(one_f_one_b, 100);
    EXPECT_GT(interleaved, 20);
    EXPECT_GT(zb, 50);
    EXPECT_GT(uneven, 20);
    std::printf("checked %d layouts: %d 1F1B, %d interleaved, %d ZB-H1, %d with uneven stages\n", checked, one_f_one_b,
                interleaved, zb, uneven);
}

}  // namespace
