// batch_choice.cpp — an unwritten micro-batch and interleaving depth (batchchoice,
// plan/batch_choice.h): the loader picks the fastest candidate that fits (the fewest chunks,
// then the smallest micro-batch, within kBatchChoiceTolerance of the fastest), lists the
// choice with the stack's defaults, keeps a written value, leaves the choice unwritten when
// saving, and says so when nothing fits; a planned layout's micro-batch is the job's own.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/plan/batch_choice.h"
#include "ptd/plan/planner.h"

#include "job_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

// Megatron-Core r0.8.0's weak-scaling 32B GPT (Megatron-LM README): TP 8 × DP 48 on 48 DGX
// H100, a global batch of 192 (4 sequences a replica), the DP overlaps on. `training` is added
// to the [training] table.
std::string gpt32b(const std::string& training, const std::string& parallel = "") {
    return "[model]\narch = \"gpt\"\nlayers = 48\nhidden = 7168\nheads = 56\nffn_hidden = 28672\n"
           "vocab = 131072\nseq_len = 4096\ntied_embeddings = false\n"
           "[cluster]\npreset = \"dgx-h100\"\nnodes = 48\n"
           "[parallel]\ntp = 8\npp = 1\nsequence_parallel = true\ntp_comm_overlap = true\n"
           "distributed_optimizer = true\noverlap_grad_reduce = true\noverlap_param_gather = true\n" +
           parallel +
           "[training]\nframework = \"megatron\"\nframework_version = \"2024-07\"\nprecision = \"bf16\"\n" + training;
}

const StackDefault* listed_default(const JobSpec& job, const std::string& key) {
    for (const StackDefault& d : job.origin.stack_defaults)
        if (d.key == key) return &d;
    return nullptr;
}

double tokens_per_s(JobSpec job, int micro_batch, int vpp = 0) {
    job.training.micro_batch = micro_batch;
    if (vpp > 0) job.parallel.vpp = vpp;
    return estimate_job(job).tokens_per_s;
}

TEST(BatchChoice, AnUnwrittenMicroBatchIsTheOneWhoseReductionHides) {
    // Four sequences a replica: at micro-batch 1 the fp32 gradient reduce-scatter (4 B
    // parameters a GPU, 16 GB) can only start in the last of four backwards and is mostly
    // exposed; at 4 it runs beside the whole backward.
    const JobSpec job = job_from_text(gpt32b("global_batch = 192\n"));
    EXPECT_EQ(job.training.micro_batch, 4);
    EXPECT_FALSE(job.origin.micro_batch_given);
    const StackDefault* d = listed_default(job, "training.micro_batch");
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->value, "4");
    EXPECT_NE(d->source.find("1, 2 or 4"), std::string::npos) << d->source;
    EXPECT_GT(tokens_per_s(job, 4), 1.3 * tokens_per_s(job, 1));
}

TEST(BatchChoice, TheChoiceIsTheSmallestWithinTheToleranceOfTheFastest) {
    // A 124M GPT on one H100 with 64 sequences a step: every divisor up to 64 runs and fits.
    const JobSpec job = job_from_text(
        "[model]\npreset = \"gpt2-124m\"\n[cluster]\nnodes = 1\ngpus_per_node = 1\ngpu = \"h100-sxm\"\n"
        "[parallel]\ntp = 1\n[training]\nglobal_batch = 64\n");
    double best = 0;
    for (int mb : {1, 2, 4, 8, 16, 32, 64}) best = std::max(best, tokens_per_s(job, mb));
    int expected = 0;
    for (int mb : {1, 2, 4, 8, 16, 32, 64})
        if (!expected && tokens_per_s(job, mb) >= best * (1.0 - kBatchChoiceTolerance)) expected = mb;
    EXPECT_EQ(job.training.micro_batch, expected);
    EXPECT_GT(expected, 1);  // small GEMMs: more than one sequence a micro-batch pays
}

TEST(BatchChoice, AWrittenMicroBatchIsKept) {
    const JobSpec job = job_from_text(gpt32b("micro_batch = 1\nglobal_batch = 192\n"));
    EXPECT_EQ(job.training.micro_batch, 1);
    EXPECT_TRUE(job.origin.micro_batch_given);
    EXPECT_EQ(listed_default(job, "training.micro_batch"), nullptr);
}

TEST(BatchChoice, WithoutAGlobalBatchTheMicroBatchIsOneAndTheBatchFollows) {
    const JobSpec job = job_from_text(gpt32b(""));
    EXPECT_EQ(job.training.micro_batch, 1);
    EXPECT_EQ(job.training.global_batch, 48);  // micro_batch · dp
    EXPECT_EQ(listed_default(job, "training.micro_batch"), nullptr);
}

TEST(BatchChoice, AnInterleavedScheduleWithoutVppGetsADepthThatRuns) {
    const JobSpec job = load_asset("llama3-70b-h100.toml", {"parallel.vpp=1"});  // a written vpp is kept
    EXPECT_EQ(job.parallel.vpp, 1);
    auto text = save_job_toml(load_asset("llama3-70b-h100.toml"));
    const std::string vpp_line = "vpp = 5";
    text.replace(text.find(vpp_line), vpp_line.size(), "schedule = \"interleaved\"");
    const JobSpec chosen = reloaded(text);
    EXPECT_FALSE(chosen.origin.vpp_given);
    const std::vector<int> depths = interleaved_depths(chosen);
    ASSERT_FALSE(depths.empty());
    EXPECT_NE(std::find(depths.begin(), depths.end(), chosen.parallel.vpp), depths.end());
    EXPECT_GE(chosen.parallel.vpp, 2);
    const StackDefault* d = listed_default(chosen, "parallel.vpp");
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->value, std::to_string(chosen.parallel.vpp));
    // The fewest chunks within the tolerance of the fastest depth.
    double best = 0;
    for (int v : depths) best = std::max(best, tokens_per_s(chosen, 1, v));
    for (int v : depths) {
        if (v == chosen.parallel.vpp) break;
        EXPECT_LT(tokens_per_s(chosen, 1, v), best * (1.0 - kBatchChoiceTolerance)) << "vpp " << v << " was close enough";
    }
}

TEST(BatchChoice, InterleavedWithoutAnyDepthThatRunsIsRefusedWithTheReason) {
    // 48 layers on pp 48: one layer a stage, so no stage splits into chunks.
    std::string text = gpt32b("global_batch = 192\n");
    text.replace(text.find("nodes = 48"), 10, "nodes = 288");
    text.replace(text.find("pp = 1\n"), 7, "pp = 48\nschedule = \"interleaved\"\n");
    const auto job = load_job_text(text, "job.toml", presets());
    ASSERT_FALSE(job);
    EXPECT_NE(job.error().str().find("without parallel.vpp"), std::string::npos) << job.error().str();
}

TEST(BatchChoice, SavingLeavesTheChoiceUnwrittenAndReloadingChoosesAgain) {
    const JobSpec job = job_from_text(gpt32b("global_batch = 192\n"));
    const std::string text = save_job_toml(job);
    EXPECT_NE(text.find("# micro_batch = 4 (not written"), std::string::npos) << text;
    EXPECT_EQ(text.find("\nmicro_batch ="), std::string::npos) << text;
    const JobSpec again = reloaded(text);
    EXPECT_FALSE(again.origin.micro_batch_given);
    EXPECT_EQ(again.training.micro_batch, 4);
}

TEST(BatchChoice, WhenNothingFitsTheMicroBatchStaysOneAndTheListSaysSo) {
    // The model at 96 layers (63B) on one node without sharding its optimizer: 8 B
    // parameters a GPU need 16 B each for weights, fp32 gradients and Adam, 120 GiB a GPU.
    std::string text = gpt32b("global_batch = 64\n");
    text.replace(text.find("nodes = 48"), 10, "nodes = 1");
    text.replace(text.find("layers = 48"), 11, "layers = 96");
    text.replace(text.find("distributed_optimizer = true\noverlap_grad_reduce = true\noverlap_param_gather = true\n"),
                 std::string("distributed_optimizer = true\noverlap_grad_reduce = true\noverlap_param_gather = true\n").size(),
                 "");
    const JobSpec job = job_from_text(text);
    EXPECT_EQ(job.training.micro_batch, 1);
    EXPECT_FALSE(estimate_job(job).fits);
    const StackDefault* d = listed_default(job, "training.micro_batch");
    ASSERT_NE(d, nullptr);
    EXPECT_NE(d->source.find("no micro-batch of"), std::string::npos) << d->source;
}

TEST(BatchChoice, APlannedLayoutsMicroBatchIsTheJobsOwn) {
    const JobSpec job = job_from_text(gpt32b("global_batch = 192\n"));
    PlanEntry entry;
    entry.choice = layout_choice_of(job);
    entry.choice.micro_batch = 2;
    const JobSpec planned = apply_plan_entry(job, entry);
    EXPECT_TRUE(planned.origin.micro_batch_given);
    EXPECT_EQ(planned.training.micro_batch, 2);
    EXPECT_EQ(listed_default(planned, "training.micro_batch"), nullptr);
    EXPECT_NE(save_job_toml(planned).find("\nmicro_batch = 2"), std::string::npos);
}

TEST(BatchChoice, ANamedPerformanceRecipeSetsItsMicroBatch) {
    // Megatron-Bridge's qwen3_30b_a3b_pretrain_16gpu_h100_bf16: micro-batch 1 of 1,024 on 16 H100, EP 16.
    const JobSpec job = job_from_text(
        "[model]\npreset = \"qwen3-30b-a3b\"\n[cluster]\npreset = \"dgx-h100\"\nnodes = 2\n"
        "[parallel]\ntp = 1\nep = 16\n"
        "[training]\nframework = \"nemo\"\nrecipe = \"qwen3_30b_a3b_pretrain_16gpu_h100_bf16\"\nglobal_batch = 1024\n");
    EXPECT_EQ(job.training.micro_batch, 1);
    const StackDefault* d = listed_default(job, "training.micro_batch");
    ASSERT_NE(d, nullptr);
    EXPECT_NE(d->source.find("qwen3_30b_a3b_pretrain_16gpu_h100_bf16"), std::string::npos) << d->source;
}

TEST(BatchChoice, AnInterleavedSplitWithoutVppSaysItsDepth) {
    // 48 layers on pp 2 in eight chunks of 6: the split says vpp 4, nothing is chosen.
    std::string text = gpt32b("micro_batch = 1\nglobal_batch = 192\n",
                              "schedule = \"interleaved\"\nlayers_per_stage = [6, 6, 6, 6, 6, 6, 6, 6]\n");
    text.replace(text.find("pp = 1\n"), 7, "pp = 2\n");
    const JobSpec job = job_from_text(text);
    EXPECT_EQ(job.parallel.vpp, 4);
    EXPECT_EQ(listed_default(job, "parallel.vpp"), nullptr);
}

}  // namespace
