// megatron_interleaved_rule.cpp — megatron-LM's interleaved schedule refuses layouts PTD can simulate: fewer micro-batches
// per step than its group size N (default pp). `ptd validate` / `ptd estimate` warn for jobs
// that run Megatron-LM, `ptd export --format megatron` refuses with the key, the value, what
// Megatron allows and the fix, and the planner does not offer them.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/plan/planner.h"
#include "ptd/spec/presets.h"

#include "job_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

// Llama 3 70B on 64 H100 (tp 8 · pp 4 · dp 2, vpp 5): global_batch 4 gives 2 micro-batches
// per step, fewer than pp = 4.
const std::vector<std::string> kTwoMicroBatches = {"training.global_batch=4"};

TEST(MegatronInterleavedRule, MegatronRuleIsSchedulesPys) {
    // core_r0.10+ forward_backward_pipelining_with_interleaving: pp ≤ N ≤ m, m mod N ∈ {0} ∪ [pp, N).
    EXPECT_FALSE(megatron_runs_interleaved(4, 2, 2, 0));   // m < N = pp
    EXPECT_TRUE(megatron_runs_interleaved(4, 2, 4, 0));
    EXPECT_FALSE(megatron_runs_interleaved(4, 2, 6, 0));   // last group 2 < pp
    EXPECT_TRUE(megatron_runs_interleaved(4, 2, 12, 0));
    EXPECT_FALSE(megatron_runs_interleaved(4, 2, 8, 6));   // last group 2 < pp
    EXPECT_TRUE(megatron_runs_interleaved(4, 2, 10, 6));   // last group 4 = pp
    EXPECT_FALSE(megatron_runs_interleaved(4, 2, 8, 3));   // N < pp
    EXPECT_FALSE(megatron_runs_interleaved(4, 2, 8, 9));   // N > m
    EXPECT_TRUE(megatron_runs_interleaved(4, 1, 2, 0));    // no interleaving: 1F1B runs any m
    EXPECT_TRUE(megatron_runs_interleaved(1, 2, 1, 0));
}

TEST(MegatronInterleavedRule, FewerMicroBatchesThanStagesIsValidButMegatronRefusesIt) {
    const JobSpec job = load_asset("llama3-70b-h100.toml", kTwoMicroBatches);
    ASSERT_TRUE(validate_job(job).empty());  // PTD simulates it: one group of 2
    ASSERT_EQ(job.training.framework, Framework::megatron);
    const auto refused = megatron_interleaved_refusal(job);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->key, "training.global_batch");
    EXPECT_TRUE(contains(refused->message, "2 micro-batches per step")) << refused->message;
    EXPECT_TRUE(contains(refused->message, "[PP=4 , M=2]")) << refused->message;  // Megatron's own words
    EXPECT_TRUE(contains(refused->message, "--set training.global_batch=8")) << refused->message;  // the fix
    EXPECT_TRUE(contains(refused->message, "vpp = 1")) << refused->message;

    // export --format megatron refuses with that diagnostic; the other formats do not care.
    auto exported = export_job(job, ExportFormat::megatron);
    ASSERT_FALSE(exported);
    ASSERT_EQ(exported.error().diagnostics.size(), 1u);
    EXPECT_EQ(exported.error().diagnostics[0].key, "training.global_batch");
    EXPECT_TRUE(contains(exported.error().str(), "[PP=4 , M=2]")) << exported.error().str();

    // The estimate still answers, and says Megatron-LM would not run it.
    const Estimate est = estimate_job(job);
    EXPECT_GT(est.step_s, 0);
    EXPECT_TRUE(any_note(est, "Megatron-LM would refuse this layout: training.global_batch"));

    // A job that runs on torchtitan gets no such note (its schedules run m < pp).
    JobSpec titan = job;
    titan.training.framework = Framework::torchtitan;
    EXPECT_FALSE(any_note(estimate_job(titan), "Megatron-LM would refuse"));

    // m = pp runs.
    const JobSpec enough = load_asset("llama3-70b-h100.toml", {"training.global_batch=8"});
    EXPECT_FALSE(megatron_interleaved_refusal(enough));
    EXPECT_TRUE(export_job(enough, ExportFormat::megatron));
    EXPECT_FALSE(any_note(estimate_job(enough), "Megatron-LM would refuse"));
    // Without interleaving Megatron's 1F1B runs 2 micro-batches on 4 stages.
    EXPECT_FALSE(megatron_interleaved_refusal(load_asset("llama3-70b-h100.toml", {"training.global_batch=4", "parallel.vpp=1"})));
}

// Runs `cmd` through the shell, stderr captured to a file; returns {exit status, stderr}.
std::pair<int, std::string> run_stderr(const std::string& cmd) {
    const std::string err = ::testing::TempDir() + "/ptd_interleaved_rule_" + std::to_string(getpid()) + ".err";
    const int status = std::system((cmd + " >/dev/null 2>" + err).c_str());
    std::ifstream in(err);
    std::ostringstream ss;
    ss << in.rdbuf();
    std::remove(err.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ss.str()};
}

TEST(MegatronInterleavedRule, ValidateWarnsOnlyWhereTheJobRunsMegatron) {
    const std::string ptd = std::string(PTD_BIN_DIR) + "/ptd validate " + kJobs + "llama3-70b-h100.toml";
    auto [rc, err] = run_stderr(ptd + " --set training.global_batch=4");
    EXPECT_EQ(rc, 0) << err;  // valid: a warning, not an error
    EXPECT_TRUE(contains(err, "warning: training.global_batch: Megatron-LM would refuse this layout")) << err;
    auto [rc_titan, err_titan] = run_stderr(ptd + " --set training.global_batch=4 --set training.framework=torchtitan");
    EXPECT_EQ(rc_titan, 0) << err_titan;
    EXPECT_FALSE(contains(err_titan, "Megatron-LM would refuse")) << err_titan;
    auto [rc_ok, err_ok] = run_stderr(ptd);
    EXPECT_EQ(rc_ok, 0) << err_ok;
    EXPECT_FALSE(contains(err_ok, "warning")) << err_ok;
    // Export refuses, exit status 2 (a job problem), naming the key.
    auto [rc_export, err_export] = run_stderr(std::string(PTD_BIN_DIR) + "/ptd export --format megatron " + kJobs +
                                              "llama3-70b-h100.toml --set training.global_batch=4");
    EXPECT_EQ(rc_export, 2) << err_export;
    EXPECT_TRUE(contains(err_export, "error: training.global_batch")) << err_export;
}

TEST(MegatronInterleavedRule, PlannerOffersNoInterleavedLayoutMegatronRefuses) {
    // The job's own group size N = 6 is valid for its layout (256 micro-batches: last group 4 =
    // pp) but not for every layout the planner tries (128 micro-batches leave a group of 2).
    JobSpec job = load_asset("llama3-70b-h100.toml", {"parallel.microbatch_group_size=6"});
    ASSERT_TRUE(validate_job(job).empty());
    PlanOptions opt;
    opt.top_k = 200;
    opt.vary_zero = false, opt.vary_order = false, opt.vary_cp = false;
    auto plan = plan_layouts(job, opt);
    ASSERT_TRUE(plan) << plan.error().str();
    int interleaved = 0;
    for (const PlanEntry& e : plan->top) {
        const JobSpec applied = apply_plan_entry(job, e);
        EXPECT_TRUE(validate_job(applied).empty()) << format_diagnostics(validate_job(applied));
        const auto refused = megatron_interleaved_refusal(applied);
        EXPECT_FALSE(refused) << refused->message;
        if (e.choice.vpp > 1) ++interleaved;
    }
    EXPECT_GT(interleaved, 0);  // the rule removes some interleaved layouts, not all
    // With 4 sequences per step no interleaved layout with pp > 1 has enough micro-batches.
    auto small = plan_layouts(load_asset("llama3-70b-h100.toml", kTwoMicroBatches), opt);
    ASSERT_TRUE(small) << small.error().str();
    for (const PlanEntry& e : small->top) EXPECT_FALSE(e.choice.vpp > 1 && e.choice.pp > 1) << e.choice.vpp;
}

TEST(MegatronInterleavedRule, PlanEntryKeepsAGroupSizeItsLayoutRuns) {
    const JobSpec job = load_asset("llama3-70b-h100.toml", {"parallel.microbatch_group_size=8"});
    PlanEntry e;
    e.choice = layout_choice_of(job);
    e.choice.vpp = 1;  // 1F1B: no group size
    EXPECT_EQ(apply_plan_entry(job, e).parallel.microbatch_group_size, 0);
    EXPECT_TRUE(validate_job(apply_plan_entry(job, e)).empty());
    e.choice.vpp = 5, e.choice.pp = 4, e.choice.micro_batch = 64;  // 4 micro-batches: N = 8 > m, clamped to pp
    const JobSpec clamped = apply_plan_entry(job, e);
    EXPECT_EQ(clamped.parallel.microbatch_group_size, 4);
    EXPECT_TRUE(validate_job(clamped).empty()) << format_diagnostics(validate_job(clamped));
}

}  // namespace
