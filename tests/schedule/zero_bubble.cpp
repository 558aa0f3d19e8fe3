// zero_bubble.cpp — the zero-bubble ZB-H1 schedule and DualPipe
// (estimators/src/model/schedule.cpp, memory.cpp, estimate.cpp). ZB-H1's block order against the
// paper's figure (Qi et al. 2023, Fig. 3: p = 4, m = 8), its times worked by hand, its
// bubble against 1F1B's, the planner's shortcut and bounds against the full simulation;
// memory (ZB-H1 keeps 1F1B's peak, DualPipe holds two stages' parameters and p + 1
// micro-batches); the schedule key's validation; the makespan memo.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/plan/planner.h"
#include "ptd/spec/presets.h"
#include "ptd/timeline/timeline.h"

#include "job_test_util.h"
#include "timeline_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

#define EXPECT_REL(got, want) EXPECT_NEAR((got), (want), 1e-9 * std::abs((double)(want)) + 1e-12)

std::string zb_order(int p, int m, int stage) {
    std::string s;
    for (const ScheduleOp& op : stage_schedule(PipelineSchedule::zb_h1, p, 1, m, stage)) {
        if (!s.empty()) s += ' ';
        s += op.pass == Pass::forward ? 'F' : op.pass == Pass::backward ? 'B' : 'W';
        s += std::to_string(op.micro_batch);
    }
    return s;
}

// Fig. 3 of the paper (ZB-H1, p = 4, m = 8), micro-batches from 0: stage s defers the W of
// its first s backwards and runs them at the end.
TEST(ZbH1, OrderMatchesPaperFigure) {
    EXPECT_EQ(zb_order(4, 8, 0), "F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7");
    EXPECT_EQ(zb_order(4, 8, 1), "F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7");
    EXPECT_EQ(zb_order(4, 8, 2), "F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7");
    EXPECT_EQ(zb_order(4, 8, 3), "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7");
}

// Every block once, W after its B, and the micro-batches in flight (forward done, W not)
// never above p — 1F1B's peak on stage 0 — for any p and m (also m < p).
TEST(ZbH1, EveryBlockOnceAndInFlightAtMostP) {
    for (int p = 2; p <= 9; ++p)
        for (int m = 1; m <= 3 * p + 2; ++m)
            for (int s = 0; s < p; ++s) {
                const auto ops = stage_schedule(PipelineSchedule::zb_h1, p, 1, m, s);
                ASSERT_EQ((int)ops.size(), 3 * m);
                std::vector<int> state((size_t)m, 0);  // 0 none, 1 F, 2 B, 3 W
                int in_flight = 0, peak = 0;
                for (const ScheduleOp& op : ops) {
                    const int want = op.pass == Pass::forward ? 0 : op.pass == Pass::backward ? 1 : 2;
                    ASSERT_EQ(state[(size_t)op.micro_batch], want) << p << " " << m << " " << s;
                    state[(size_t)op.micro_batch] = want + 1;
                    in_flight += op.pass == Pass::forward ? 1 : op.pass == Pass::weight ? -1 : 0;
                    peak = std::max(peak, in_flight);
                }
                EXPECT_LE(peak, std::min(p, m)) << p << " " << m << " " << s;
                // 1F1B's own stage-s peak is p − s; ZB-H1 holds its deferred W on top.
                EXPECT_GE(peak, std::min(p - s, m));
            }
}

// Unit F, B and W: worked by hand from the figure. Stage 3 starts F0 at 3 and alternates;
// stage 0 gets B0 back at 4 + 3 = 7; every stage ends at 3m + p − 1 = 27: the bubble is
// (p − 1)(F + B − W) = 3, a third of 1F1B's (p − 1)(F + B + W) = 9 with the same blocks.
TEST(ZbH1, HandWorkedTimes) {
    const int p = 4, m = 8;
    std::vector<double> f(p, 1.0), b(p, 1.0), w(p, 1.0), b_full(p, 2.0), end(p);
    std::vector<PlacedOp> placed;
    PipelineDurations d{p, 1, m, f, b, PipelineSchedule::zb_h1, w};
    EXPECT_DOUBLE_EQ(simulate_pipeline(d, end, &placed), 27.0);
    EXPECT_EQ(end, (std::vector<double>{27, 27, 27, 27}));
    auto start_of = [&](int stage, Pass pass, int mb) { return ptd_test::start_of(placed, stage, pass, mb); };
    EXPECT_DOUBLE_EQ(start_of(3, Pass::forward, 0), 3.0);
    EXPECT_DOUBLE_EQ(start_of(3, Pass::backward, 0), 4.0);
    EXPECT_DOUBLE_EQ(start_of(3, Pass::weight, 0), 11.0);  // after F3 B3: the first triple
    EXPECT_DOUBLE_EQ(start_of(2, Pass::backward, 0), 5.0);
    EXPECT_DOUBLE_EQ(start_of(0, Pass::backward, 0), 7.0);
    EXPECT_DOUBLE_EQ(start_of(0, Pass::weight, 0), 8.0);
    EXPECT_DOUBLE_EQ(start_of(3, Pass::weight, 7), 26.0);   // the deferred W fill the end
    EXPECT_DOUBLE_EQ(start_of(1, Pass::forward, 7), 19.0);
    PipelineDurations one{p, 1, m, f, b_full};
    EXPECT_DOUBLE_EQ(simulate_pipeline(one, end), 33.0);  // 1F1B: (m + p − 1)·3
}

// The paper's closed form at F = B = W for m ≥ p (what pipeline_makespan_upper relies on), and ZB-H1's
// bubble below 1F1B's with the same blocks for uneven durations too.
TEST(ZbH1, BubbleAThirdOfOneFOneBAndNeverMore) {
    std::mt19937 rng(15);
    std::uniform_real_distribution<double> u(0.3, 2.0);
    for (int p = 2; p <= 8; ++p)
        for (int m = 1; m <= 4 * p; ++m) {
            std::vector<double> one((size_t)p, 1.0), two((size_t)p, 2.0), end((size_t)p);
            // m < p: the fill and drain add p − m blocks (the paper assumes m ≥ p).
            EXPECT_REL(simulate_pipeline(PipelineDurations{p, 1, m, one, one, PipelineSchedule::zb_h1, one}, end),
                       3.0 * m + (p - 1) + std::max(0, p - m));
            EXPECT_REL(simulate_pipeline(PipelineDurations{p, 1, m, one, two}, end), 3.0 * (m + p - 1));
            std::vector<double> f((size_t)p), b((size_t)p), w((size_t)p), full((size_t)p);
            for (int s = 0; s < p; ++s) f[(size_t)s] = u(rng), b[(size_t)s] = u(rng), w[(size_t)s] = 0.8 * b[(size_t)s], full[(size_t)s] = b[(size_t)s] + w[(size_t)s];
            const double zb = simulate_pipeline(PipelineDurations{p, 1, m, f, b, PipelineSchedule::zb_h1, w}, end);
            const double ofob = simulate_pipeline(PipelineDurations{p, 1, m, f, full}, end);
            EXPECT_LE(zb, ofob * (1 + 1e-12)) << p << " " << m;
        }
}

// What the planner calls (steady-state shortcut, compiled schedules, the memo) equals the
// full simulation for ZB-H1 with uneven stages, every stage's end; asked twice (the memo
// answers the second time) the same. The bounds enclose it.
TEST(ZbH1, ShortcutMemoAndBoundsMatchTheSimulation) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> u(0.2, 3.0);
    int checked = 0;
    for (int p = 2; p <= 7; ++p)
        for (int m = 1; m <= 10 * p + 3; ++m)
            for (int trial = 0; trial < 4; ++trial) {
                std::vector<double> f((size_t)p), b((size_t)p), w((size_t)p);
                for (int s = 0; s < p; ++s) {
                    const bool ends = trial < 2;
                    f[(size_t)s] = ends ? 1.0 + (s == p - 1 ? 0.9 * u(rng) : 0) : u(rng);
                    b[(size_t)s] = ends ? 1.1 + (s == p - 1 ? 0.8 * u(rng) : 0) : u(rng);
                    w[(size_t)s] = ends ? 0.9 + (s == p - 1 ? 0.4 * u(rng) : 0) : u(rng);
                }
                PipelineDurations d{p, 1, m, f, b, PipelineSchedule::zb_h1, w};
                std::vector<double> full((size_t)p), fast((size_t)p), again((size_t)p), lo((size_t)p);
                const double a = simulate_pipeline(d, full);
                const double c = pipeline_makespan(d, fast), c2 = pipeline_makespan(d, again);
                EXPECT_NEAR(c, a, 1e-9 * a) << "p " << p << " m " << m << " trial " << trial;
                EXPECT_EQ(c2, c);
                for (int s = 0; s < p; ++s) {
                    EXPECT_NEAR(fast[(size_t)s], full[(size_t)s], 1e-9 * a) << "stage " << s;
                    EXPECT_EQ(again[(size_t)s], fast[(size_t)s]);
                }
                const double lower = pipeline_makespan_lower(d, lo), upper = pipeline_makespan_upper(d);
                EXPECT_LE(lower, a * (1 + 1e-12));
                EXPECT_GE(upper, a * (1 - 1e-12));
                for (int s = 0; s < p; ++s) EXPECT_LE(lo[(size_t)s], full[(size_t)s] * (1 + 1e-12));
                ++checked;
            }
    EXPECT_GT(checked, 1000);
}

// The memo keys on every duration: a question that differs in one duration by one ulp is
// not answered from it.
TEST(MakespanMemo, OneDurationChangedIsANewQuestion) {
    const int p = 4, m = 12;
    std::vector<double> f(p, 1.0), b(p, 2.0), end(p), end2(p);
    const double a = pipeline_makespan(PipelineDurations{p, 1, m, f, b}, end);
    b[3] = 5.0;
    const double c = pipeline_makespan(PipelineDurations{p, 1, m, f, b}, end2);
    EXPECT_DOUBLE_EQ(a, (m + p - 1) * 3.0);
    EXPECT_DOUBLE_EQ(c, simulate_pipeline(PipelineDurations{p, 1, m, f, b}, end));
    EXPECT_GT(c, a);
}

// DualPipe's closed form at unit blocks: F = B = W = 1 (whole backward 2), nothing hidden:
// m·3 + (p/2 − 1)(F&B + B − 3W) = 3m + (p/2 − 1)·2; hidden communication shortens the F&B
// pairs (m − 3p/2 + h + 1 on rank h) and the bubble.
TEST(DualPipe, ClosedFormOfTheReport) {
    const int p = 8, m = 20;
    std::vector<double> one((size_t)p, 1.0), end((size_t)p), none;
    PipelineDurations d{p, 1, m, one, one, PipelineSchedule::dualpipe, one};
    EXPECT_DOUBLE_EQ(dualpipe_makespan(d, none, end), 3.0 * m + (p / 2 - 1) * 2.0);
    std::vector<double> hidden((size_t)p, 0.5);
    const double with_hidden = dualpipe_makespan(d, hidden, end);
    // Rank 0 (h = 0): m − 3p/2 + 1 = 9 pairs, each 0.5 shorter; the bubble 3·(2.5 + 2 − 3).
    EXPECT_DOUBLE_EQ(end[0], 3.0 * m - 9 * 0.5 + 3 * 1.5);
    EXPECT_DOUBLE_EQ(with_hidden, end[0]);  // the rank with the fewest pairs is the slowest
    // Its bubble is below ZB-H1's (p − 1)(F + B − W) = 7 and 1F1B's 3(p − 1) = 21 here.
    EXPECT_LT((p / 2 - 1) * 2.0, 7.0);
}

// ---- the estimator ------------------------------------------------------------------------

JobSpec llama_job(PipelineSchedule sched, int pp, int global_batch) {
    JobSpec j = load_asset("llama3-8b-h100.toml");
    const int world = j.world_size();
    j.parallel.tp = 2;
    j.parallel.pp = pp;
    j.parallel.vpp = 1;
    j.parallel.cp = 1;
    j.parallel.ep = 1;
    j.parallel.dp = world / (2 * pp);
    j.parallel.layers_per_stage.clear();
    j.parallel.schedule = sched;
    j.training.micro_batch = 1;
    j.training.global_batch = global_batch;
    j.origin.vpp_given = j.origin.micro_batch_given = true;  // set here, as a file that writes them
    return j;
}

// ZB-H1 against 1F1B on the same layout: a shorter step (the bubble cut, the blocks the
// same), stage 0's activations equal (no W deferred there) and no stage above 1F1B's peak
// stage; the predicted timeline shows W blocks and ends at the step time.
TEST(ZbH1Estimate, ShorterStepSamePeakActivations) {
    const JobSpec a = llama_job(PipelineSchedule::one_f_one_b, 4, 64), z = llama_job(PipelineSchedule::zb_h1, 4, 64);
    ASSERT_TRUE(validate_job(a).empty());
    ASSERT_TRUE(validate_job(z).empty()) << validate_job(z).front().message;
    const Estimate ea = estimate_job(a), ez = estimate_job(z);
    EXPECT_LT(ez.step_s, ea.step_s);
    EXPECT_LT(ez.time.bubble, ea.time.bubble);
    EXPECT_REL(ez.time.compute, ea.time.compute);
    double peak_a = 0, peak_z = 0;
    for (int s = 0; s < 4; ++s) {
        peak_a = std::max(peak_a, ea.stages[(size_t)s].mem.activations);
        peak_z = std::max(peak_z, ez.stages[(size_t)s].mem.activations);
        if (s > 0) {
            EXPECT_GT(ez.stages[(size_t)s].mem.activations, ea.stages[(size_t)s].mem.activations);  // deferred W
        }
    }
    EXPECT_EQ(ez.stages[0].mem.activations, ea.stages[0].mem.activations);
    // Llama's SwiGLU MLP: a deferred W keeps fc1's output gradient (2·f wide) beside its
    // inputs, about what the saved activations take, so later stages can pass stage 0.
    (void)peak_z, (void)peak_a;
    // GPT-3 (GELU, full attention heads), no recompute: a deferred W's operands (32·sbh/…
    // in the paper's terms) are less than a micro-batch's activations, so no stage passes
    // 1F1B's peak: the paper's "same peak memory as 1F1B".
    JobSpec g1 = load_asset("gpt3-175b-a100.toml");
    g1.parallel.recompute = Recompute::none;
    g1.parallel.sequence_parallel = true;
    g1.parallel.schedule = PipelineSchedule::one_f_one_b;
    JobSpec gz = g1;
    gz.parallel.schedule = PipelineSchedule::zb_h1;
    ASSERT_TRUE(validate_job(gz).empty());
    const Estimate e1 = estimate_job(g1), e2 = estimate_job(gz);
    double act1 = 0, act2 = 0;
    for (size_t s = 0; s < e1.stages.size(); ++s) {
        act1 = std::max(act1, e1.stages[s].mem.activations);
        act2 = std::max(act2, e2.stages[s].mem.activations);
    }
    EXPECT_EQ(act2, act1);
    EXPECT_LT(e2.step_s, e1.step_s);
    const Timeline t = predicted_timeline(z);
    EXPECT_REL(t.makespan_s, ez.step_s);
    int w_blocks = 0;
    for (const TimelineBlock& b : t.blocks) w_blocks += b.kind == BlockKind::weight_grad;
    EXPECT_EQ(w_blocks, 4 * ez.micro_batches);
    EXPECT_EQ(std::string(block_kind_name(BlockKind::weight_grad)), "wgrad");
}

// DualPipe: rank i holds stage i and stage p − 1 − i (2× parameters, their gradients and
// optimizer state) and p + 1 micro-batches at its peak.
TEST(DualPipeEstimate, TwoStagesOfParametersAndPPlusOneInFlight) {
    const JobSpec a = llama_job(PipelineSchedule::one_f_one_b, 4, 64), d = llama_job(PipelineSchedule::dualpipe, 4, 64);
    ASSERT_TRUE(validate_job(d).empty()) << validate_job(d).front().message;
    const Estimate ea = estimate_job(a), ed = estimate_job(d);
    for (int s = 0; s < 4; ++s) {
        EXPECT_REL(ed.stages[(size_t)s].params_count,
                   ea.stages[(size_t)s].params_count + ea.stages[(size_t)(3 - s)].params_count);
        EXPECT_REL(ed.stages[(size_t)s].mem.params, ea.stages[(size_t)s].mem.params + ea.stages[(size_t)(3 - s)].mem.params);
        EXPECT_DOUBLE_EQ(ed.stages[(size_t)s].in_flight, 5.0);
    }
    const Timeline t = predicted_timeline(d);
    EXPECT_REL(t.makespan_s, ed.step_s);
}

// Inconsistent combinations are refused with the key and what is allowed.
TEST(ScheduleKey, InconsistentCombinationsAreRefused) {
    auto message = [](const JobSpec& j) {
        const auto errs = validate_job(j);
        for (const auto& e : errs)
            if (e.key == "parallel.schedule") return e.message;
        return std::string();
    };
    JobSpec j = llama_job(PipelineSchedule::interleaved, 4, 64);
    EXPECT_NE(message(j).find("needs vpp ≥ 2"), std::string::npos) << message(j);
    j = llama_job(PipelineSchedule::zb_h1, 4, 64);
    j.parallel.vpp = 2;
    EXPECT_NE(message(j).find("only the interleaved schedule runs several chunks"), std::string::npos) << message(j);
    j = llama_job(PipelineSchedule::zb_h1, 1, 64);
    EXPECT_NE(message(j).find("needs pp ≥ 2"), std::string::npos) << message(j);
    j = llama_job(PipelineSchedule::dualpipe, 4, 64);
    j.training.global_batch = j.parallel.dp * 6;  // 6 micro-batches < 2·pp
    EXPECT_NE(message(j).find("at least 2·pp = 8"), std::string::npos) << message(j);
    j.training.global_batch = j.parallel.dp * 9;  // odd
    EXPECT_NE(message(j).find("an even number"), std::string::npos) << message(j);
    EXPECT_TRUE(message(llama_job(PipelineSchedule::automatic, 4, 64)).empty());
}

TEST(ScheduleKey, TomlReadsAndWritesTheWord) {
    auto job = load_job_text("[model]\npreset = \"llama3-8b\"\n[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n"
                             "[parallel]\ntp = 2\npp = 4\nschedule = \"zb-h1\"\n[training]\nglobal_batch = 64\n",
                             "zb.toml", presets());
    ASSERT_TRUE(job) << job.error().str();
    EXPECT_EQ(job->parallel.schedule, PipelineSchedule::zb_h1);
    EXPECT_NE(save_job_toml(*job).find("schedule = \"zb-h1\""), std::string::npos);
    auto bad = load_job_text("[model]\npreset = \"llama3-8b\"\n[parallel]\npp = 2\nschedule = \"zb-h2\"\n", "bad.toml", presets());
    ASSERT_FALSE(bad);
    const std::string msg = bad.error().str();
    EXPECT_NE(msg.find("bad.toml:5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("zb-h2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dualpipe"), std::string::npos) << msg;
}

// The planner picks ZB-H1 only when the framework runs it: off by default (stock
// Megatron-LM), on with try_zb_h1 or when the job names it; then its best pipelined
// layout is ZB-H1 (same memory as 1F1B at stage 0, a shorter step).
TEST(ZbPlanner, PicksZbH1OnlyWhereAFrameworkRunsIt) {
    JobSpec j = llama_job(PipelineSchedule::automatic, 4, 64);
    PlanOptions opt;
    opt.top_k = 50;
    opt.vary_cp = false;
    opt.vary_order = false;
    auto count_zb = [](const PlanResult& r) {
        int n = 0;
        for (const PlanEntry& e : r.top) n += e.choice.schedule == PipelineSchedule::zb_h1;
        return n;
    };
    auto plain = plan_layouts(j, opt);
    ASSERT_TRUE(plain) << plain.error().str();
    EXPECT_EQ(count_zb(*plain), 0);
    for (const PlanEntry& e : plain->top) EXPECT_NE(e.choice.schedule, PipelineSchedule::dualpipe);
    opt.try_zb_h1 = true;
    auto zb = plan_layouts(j, opt);
    ASSERT_TRUE(zb);
    EXPECT_GT(count_zb(*zb), 0);
    // Among pipelined layouts the first ZB-H1 one beats its 1F1B twin.
    for (const PlanEntry& e : zb->top) {
        if (e.choice.schedule != PipelineSchedule::zb_h1) continue;
        LayoutChoice twin = e.choice;
        twin.schedule = PipelineSchedule::automatic;
        const EstimateContext ctx = make_estimate_context(apply_plan_entry(j, e));
        const LayoutScore a = evaluate_layout(ctx, twin, e.layers_per_stage, nullptr);
        EXPECT_GT(e.score.tokens_per_s, a.tokens_per_s);
        const JobSpec applied = apply_plan_entry(j, e);
        EXPECT_EQ(applied.parallel.schedule, PipelineSchedule::zb_h1);
        break;
    }
    // The job naming zb-h1 is searched with it, without the option.
    opt.try_zb_h1 = false;
    auto named = plan_layouts(llama_job(PipelineSchedule::zb_h1, 4, 64), opt);
    ASSERT_TRUE(named);
    EXPECT_GT(count_zb(*named), 0);
}

// Export refuses ZB-H1 and DualPipe for every format, naming the key and what runs them.
TEST(ZbExport, RefusesAndNamesWhatRunsTheSchedule) {
    for (ExportFormat f : kExportFormats) {
        auto r = export_job(llama_job(PipelineSchedule::zb_h1, 4, 64), f);
        ASSERT_FALSE(r) << to_string(f);
        const std::string msg = r.error().str();
        EXPECT_NE(msg.find("parallel.schedule"), std::string::npos) << msg;
        EXPECT_NE(msg.find("sail-sg/zero-bubble-pipeline-parallelism"), std::string::npos) << msg;
        auto d = export_job(llama_job(PipelineSchedule::dualpipe, 4, 64), f);
        ASSERT_FALSE(d);
        EXPECT_NE(d.error().str().find("deepseek-ai/DualPipe"), std::string::npos) << d.error().str();
        EXPECT_TRUE(export_job(llama_job(PipelineSchedule::one_f_one_b, 4, 64), f) || f != ExportFormat::megatron);
    }
    EXPECT_TRUE(export_job(llama_job(PipelineSchedule::one_f_one_b, 4, 64), ExportFormat::megatron));
}

}  // namespace
