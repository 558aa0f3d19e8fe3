// expert_tp_search.cpp — the planner searches the experts' tensor parallelism: a MoE job
// that leaves parallel.expert_tp at 0 (= tp) has it tried over the divisors of tp, as
// Megatron-core's MoE parallel folding runs the published DeepSeek-V3 / Qwen3-MoE recipes
// (TP 2 with expert_tp 1). Checked: DeepSeek-V3 and Qwen3-235B-A22B on clusters where expert_tp
// 1 under TP 2 wins, and that the winner validates and estimates the same when written as a job;
// a job that fixes expert_tp keeps it; dense models see no extra layouts; the candidate count of
// a small MoE job grows by the divisors of each tp, counted by hand.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/plan/planner.h"
#include "ptd/spec/presets.h"

#include "job_test_util.h"

namespace {

using namespace ptd;

JobSpec load_ok(const std::string& text) {
    auto job = load_job_text(text, "etp.toml", embedded_presets());
    EXPECT_TRUE(job.has_value()) << (job ? "" : job.error().str());
    return job ? *job : JobSpec{};
}

int etp_of(const LayoutChoice& c) { return c.etp > 0 ? c.etp : c.tp; }

// A search narrowed to what these tests need (the rest of the space is the planner tests'):
// the job's ZeRO / distributed optimizer, recompute and rank order, context parallel off.
PlanOptions narrow() {
    PlanOptions o;
    o.vary_zero = false, o.vary_recompute = false, o.vary_order = false, o.vary_cp = false;
    o.max_micro_batch = 2;
    o.max_bubble_share = -1;
    // No headroom beyond the estimate's own fragmentation (planfw: the default leaves 5% free):
    // the published TP 2 runs these tests compare with fill their GPUs closer than that.
    o.headroom = 0;
    return o;
}

// DeepSeek-V3 on 64 GB200 nodes of 4 GPUs (256 GPUs), 2048 sequences per step, as NVIDIA's
// DGX Cloud benchmark ran it (dgxc-benchmarking v25.05: TP 2, PP 4, EP 64, expert_tp 1,
// distributed optimizer); here the planner chooses tp, pp, dp, ep, vpp and expert_tp.
// Both MoE jobs: the planner chooses the layout; distributed optimizer, selective recompute.
std::string moe_job(const std::string& preset, int nodes, int gpus_per_node, const std::string& gpu) {
    return ptd_test::job_text({.preset = preset,
                               .nodes = nodes,
                               .gpus_per_node = gpus_per_node,
                               .gpu = gpu,
                               .parallel = "distributed_optimizer = true\nrecompute = \"selective\"",
                               .training = "micro_batch = 1\nglobal_batch = 2048\n"});
}

const std::string kDeepSeekV3 = moe_job("deepseek-v3", 64, 4, "gb200");

// Qwen3-235B-A22B on 32 nodes of 8 H100 (256 GPUs), 2048 sequences per step (Megatron-Bridge's
// H100 recipe: TP 2, PP 8, EP 32, expert_tp 1).
const std::string kQwen3_235B = moe_job("qwen3-235b-a22b", 32, 8, "h100-sxm");

// The winner, written back as a job (apply_plan_entry, then saved and loaded as TOML), carries
// its expert_tp, validates, and estimates exactly what the search scored.
void expect_round_trip(const JobSpec& job, const PlanEntry& best) {
    const JobSpec applied = apply_plan_entry(job, best);
    EXPECT_EQ(applied.parallel.etp(), etp_of(best.choice));
    EXPECT_TRUE(validate_job(applied).empty()) << (validate_job(applied).empty() ? "" : validate_job(applied)[0].message);
    const Estimate est = estimate_job(applied);
    EXPECT_DOUBLE_EQ(est.tokens_per_s, best.score.tokens_per_s);
    const JobSpec reloaded = load_ok(save_job_toml(applied));
    EXPECT_EQ(reloaded.parallel.expert_tp, applied.parallel.expert_tp);
    EXPECT_DOUBLE_EQ(estimate_job(reloaded).tokens_per_s, best.score.tokens_per_s);
    // The Megatron-LM export names the folding.
    auto exported = export_job(reloaded, ExportFormat::megatron);
    ASSERT_TRUE(exported) << exported.error().str();
    EXPECT_NE(exported->text.find("--expert-tensor-parallel-size " + std::to_string(etp_of(best.choice))), std::string::npos);
}

// The planner's winner for `text` (no layout given) folds the experts to expert_tp 1 under
// TP, and the published recipe's tp 2 with expert_tp 1 is among the top rows within 1% of it
// (rows that close are within the estimate's error of each other, so their order is not a
// prediction — `ptd plan` says so).
void expect_folds_under_tp2(const std::string& text) {
    const JobSpec job = load_ok(text);
    auto plan = plan_layouts(job, narrow());
    ASSERT_TRUE(plan) << plan.error().str();
    ASSERT_FALSE(plan->top.empty()) << plan->why_best;
    const PlanEntry& best = plan->top.front();
    EXPECT_GT(best.choice.tp, 1) << plan->why_best;
    EXPECT_EQ(etp_of(best.choice), 1) << plan->why_best;
    bool recipe_close = false;
    for (const PlanEntry& e : plan->top)
        recipe_close |= e.choice.tp == 2 && etp_of(e.choice) == 1 && e.score.tokens_per_s >= 0.99 * best.score.tokens_per_s;
    EXPECT_TRUE(recipe_close) << plan->why_best;
    expect_round_trip(job, best);
}

TEST(PlannerExpertTp, DeepSeekV3FoldsExpertsUnderTp2) { expect_folds_under_tp2(kDeepSeekV3); }

TEST(PlannerExpertTp, Qwen3_235BFoldsExpertsUnderTp2) { expect_folds_under_tp2(kQwen3_235B); }

// The layout that wins with its experts folded, scored with expert_tp = tp instead (where that
// is a valid layout): slower — the folding is what wins, not the rest of the layout.
TEST(PlannerExpertTp, TheSameLayoutUnfoldedIsSlower) {
    const JobSpec job = load_ok(kDeepSeekV3);
    auto plan = plan_layouts(job, narrow());
    ASSERT_TRUE(plan && !plan->top.empty());
    ASSERT_NE(etp_of(plan->top.front().choice), plan->top.front().choice.tp);
    // Folding also admits ep up to tp·cp·dp / expert_tp, which has no unfolded twin; so the
    // winner is compared at the largest ep that also divides dp·cp, folded and not.
    JobSpec folded = apply_plan_entry(job, plan->top.front());
    const int dp_cp = folded.parallel.dp * std::max(1, folded.parallel.cp);
    while (dp_cp % folded.parallel.ep != 0) folded.parallel.ep /= 2;
    ASSERT_TRUE(validate_job(folded).empty()) << validate_job(folded)[0].message;
    JobSpec unfolded = folded;
    unfolded.parallel.expert_tp = 0;
    ASSERT_TRUE(validate_job(unfolded).empty()) << validate_job(unfolded)[0].message;
    EXPECT_LT(estimate_job(unfolded).tokens_per_s, estimate_job(folded).tokens_per_s) << folded.parallel.ep;
}

// A job whose own layout leaves expert_tp at tp: the planner's answer folds the experts, and the
// "why" line says so on both sides (the winner's ·etp1, the job's etp2).
TEST(PlannerExpertTp, WhyNamesExpertTpAgainstTheJobsLayout) {
    std::string stages;  // 94 layers over 8 stages, split as the planner splits them
    for (int n : balanced_layers_per_stage(94, 8)) stages += (stages.empty() ? "" : ", ") + std::to_string(n);
    std::string text = kQwen3_235B;
    text.replace(text.find("[parallel]\n"), 11,
                 "[parallel]\ntp = 2\npp = 8\nep = 8\nsequence_parallel = true\nlayers_per_stage = [" + stages + "]\n");
    const JobSpec job = load_ok(text);
    ASSERT_EQ(job.parallel.etp(), 2);
    auto plan = plan_layouts(job, narrow());
    ASSERT_TRUE(plan && !plan->top.empty());
    ASSERT_EQ(etp_of(plan->top.front().choice), 1);
    EXPECT_GE(plan->job_rank, 1) << plan->why_best;  // ranked, and not first
    EXPECT_NE(plan->why_best.find("·etp1"), std::string::npos) << plan->why_best;
    EXPECT_NE(plan->why_best.find("beats your layout tp2·pp8·dp16·ep8"), std::string::npos) << plan->why_best;
    EXPECT_NE(plan->why_best.find(" etp2"), std::string::npos) << plan->why_best;
}

// A job that fixes expert_tp keeps it in every layout the planner lists, and searches fewer.
TEST(PlannerExpertTp, FixedExpertTpIsKept) {
    std::string text = kQwen3_235B;
    text.replace(text.find("[parallel]\n"), 11, "[parallel]\nexpert_tp = 2\n");
    const JobSpec fixed = load_ok(text);
    ASSERT_EQ(fixed.parallel.expert_tp, 2);
    PlanOptions o = narrow();
    o.top_k = 50;
    auto plan = plan_layouts(fixed, o);
    ASSERT_TRUE(plan && !plan->top.empty());
    for (const auto* list : {&plan->top, &plan->pareto})
        for (const PlanEntry& e : *list) {
            EXPECT_EQ(e.choice.etp, 2);
            EXPECT_EQ(apply_plan_entry(fixed, e).parallel.expert_tp, 2);
        }
    auto searched = plan_layouts(load_ok(kQwen3_235B), o);
    ASSERT_TRUE(searched);
    EXPECT_LT(plan->enumerated, searched->enumerated);
    // ...unless the caller asks for expert_tp to be searched anyway (bench_plan_published).
    o.vary_expert_tp = true;
    auto varied = plan_layouts(fixed, o);
    ASSERT_TRUE(varied && !varied->top.empty());
    EXPECT_EQ(etp_of(varied->top.front().choice), 1);
}

// ---- counts on a small model, by hand ----
// 2 layers, 4 heads, on one node of 4 GPUs, 8 sequences per step; everything but tp, pp, dp,
// sequence parallelism and expert_tp held at the job's values, micro-batch 1. (tp, pp) with
// tp·pp dividing 4: (1,1), (1,2), (2,1), (2,2), (4,1) — and sequence parallelism on or off where
// tp > 1: 1 + 1 + 2 + 2 + 2 = 8 layouts. Searching expert_tp multiplies each by the divisors of
// tp (1, 1, 2, 2, 3: ep 1 folds under any of them): 1 + 1 + 4 + 4 + 6 = 16. Each sequence-
// parallel layout (tp > 1) that fits is also tried with tp_comm_overlap on (planfw; they all
// fit here): 3 more of the dense 8 (11), 7 more of the searched 16 (23).
std::string small_job(const std::string& moe, const std::string& parallel = "") {
    return "[model]\narch = \"llama\"\nlayers = 2\nhidden = 256\nheads = 4\nkv_heads = 4\nffn_hidden = 512\n"
           "vocab = 1024\nseq_len = 128\n" + moe +
           "[cluster]\nnodes = 1\ngpus_per_node = 4\ngpu = \"h100-sxm\"\n[parallel]\ntp = 1\n" + parallel +
           "[training]\nmicro_batch = 1\nglobal_batch = 8\n";
}
const char* kExperts = "experts = 4\ntop_k = 2\nmoe_ffn_hidden = 256\n";

PlanOptions counting() {
    PlanOptions o = narrow();
    o.vary_ep = false, o.max_micro_batch = 1;
    return o;
}

TEST(PlannerExpertTp, DenseModelsSearchNoMoreLayouts) {
    const JobSpec dense = load_ok(small_job(""));
    for (bool exhaustive : {false, true}) {
        PlanOptions o = counting();
        o.exhaustive = exhaustive;
        auto plan = plan_layouts(dense, o);
        ASSERT_TRUE(plan) << plan.error().str();
        EXPECT_EQ(plan->enumerated, 11);
        for (const PlanEntry& e : plan->top) EXPECT_EQ(e.choice.etp, 0);
        o.vary_expert_tp = true;  // nothing to vary without experts
        auto again = plan_layouts(dense, o);
        ASSERT_TRUE(again);
        EXPECT_EQ(again->enumerated, 11);
        EXPECT_EQ(again->why_best, plan->why_best);
    }
}

TEST(PlannerExpertTp, MoeCandidatesGrowByTheDivisorsOfTp) {
    auto searched = plan_layouts(load_ok(small_job(kExperts)), counting());
    ASSERT_TRUE(searched) << searched.error().str();
    EXPECT_EQ(searched->enumerated, 23);
    // Fixed at 1 (or at any value), one expert_tp per layout: the dense count.
    auto fixed = plan_layouts(load_ok(small_job(kExperts, "expert_tp = 1\n")), counting());
    ASSERT_TRUE(fixed) << fixed.error().str();
    EXPECT_EQ(fixed->enumerated, 11);
    // Every searched layout that fits validates as a job.
    PlanOptions all = counting();
    all.top_k = 100;
    auto listed = plan_layouts(load_ok(small_job(kExperts)), all);
    ASSERT_TRUE(listed);
    for (const PlanEntry& e : listed->top) {
        const JobSpec j = apply_plan_entry(load_ok(small_job(kExperts)), e);
        EXPECT_TRUE(validate_job(j).empty()) << "tp " << e.choice.tp << " etp " << e.choice.etp;
    }
}

// ---- torchtitan exports: the experts' split must be one torchtitan runs ----
// torchtitan v0.2.x (the TOML form) splits the routed experts expert_tensor_parallel_degree ways
// when ep > 1 (1 by default, or tp) and tp ways when ep = 1; torchtitan main (the Python form)
// removed expert TP (#3167): ep > 1 means expert_tp 1. The planner's folded winners export to
// both; an unfolded tp > 1, ep > 1 layout only to the TOML form, which now writes the degree.
const char* kQwen3_30B = R"(
[model]
preset = "qwen3-30b-a3b"
[cluster]
nodes = 2
gpus_per_node = 8
gpu = "h100-sxm"
[parallel]
tp = 2
ep = 8
sequence_parallel = true
[training]
micro_batch = 1
global_batch = 64
)";

JobSpec qwen30(int expert_tp, int ep = 8) {
    JobSpec job = load_ok(kQwen3_30B);
    job.parallel.expert_tp = expert_tp, job.parallel.ep = ep;
    EXPECT_TRUE(validate_job(job).empty());
    return job;
}

TEST(PlannerExpertTp, TorchtitanExportsWriteOrRefuseTheExpertsSplit) {
    // expert_tp = tp (2) under ep 8: v0.2.x is told so; main cannot run it.
    auto toml = export_job(qwen30(0), ExportFormat::torchtitan_toml);
    ASSERT_TRUE(toml) << toml.error().str();
    EXPECT_NE(toml->text.find("expert_tensor_parallel_degree = 2"), std::string::npos) << toml->text;
    auto main_form = export_job(qwen30(0), ExportFormat::torchtitan);
    ASSERT_FALSE(main_form);
    EXPECT_NE(main_form.error().str().find("parallel.expert_tp: got 2 (= tp) with tp 2 and ep 8"), std::string::npos)
        << main_form.error().str();
    // expert_tp 1 (folded): torchtitan's default in v0.2.x, the only split on main.
    auto folded_toml = export_job(qwen30(1), ExportFormat::torchtitan_toml);
    ASSERT_TRUE(folded_toml) << folded_toml.error().str();
    EXPECT_EQ(folded_toml->text.find("expert_tensor_parallel_degree"), std::string::npos);
    EXPECT_TRUE(export_job(qwen30(1), ExportFormat::torchtitan)) << "expert_tp 1 under ep 8";
    // ep 1: torchtitan splits the experts tp ways; expert_tp 1 cannot be written.
    for (ExportFormat f : {ExportFormat::torchtitan, ExportFormat::torchtitan_toml}) {
        EXPECT_TRUE(export_job(qwen30(0, 1), f)) << to_string(f);
        auto refused = export_job(qwen30(1, 1), f);
        ASSERT_FALSE(refused) << to_string(f);
        EXPECT_NE(refused.error().str().find("parallel.expert_tp: got 1 with tp 2 and ep 1"), std::string::npos);
    }
}

}  // namespace
