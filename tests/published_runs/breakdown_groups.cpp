// breakdown_groups.cpp — the groups bench_accuracy breaks the error down by besides generation,
// source and framework (issue 29's method): size band by total parameters (MoE: every expert),
// scale band by GPU count, and the features a run uses (several per run). Pinned on published
// rows whose size is known from their sources, and on small rows at the bands' edges; and the
// small-model check rows added for issue 29 point 3.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "published_run.h"
#include "published_runs_test_util.h"

namespace {

using namespace ptd_test;

const ::Run& row(const std::string& name) {
    const std::vector<::Run>& runs = published_runs();
    const auto it = std::find_if(runs.begin(), runs.end(), [&](const ::Run& r) { return r.name == name; });
    if (it == runs.end()) ADD_FAILURE() << "no published row " << name;
    static const ::Run none{};
    return it == runs.end() ? none : *it;
}

// A dense row on `gpus` GPUs of one GPU per node with the run keys `keys` added.
::Run small_row(const std::string& file, int gpus, const std::string& keys = "") {
    const std::vector<::Run> runs = load_run_text(
        file, "[[run]]\nname = \"x-1\"\ngpu = \"h100-sxm\"\ngpus = " + std::to_string(gpus) +
                  "\ngpus_per_node = 1\nlayers = 4\nhidden = 256\nheads = 4\nglobal_batch = " + std::to_string(gpus * 4) +
                  "\niteration_s = 1.0\n" + keys);
    EXPECT_EQ(runs.size(), 1u);
    return runs.empty() ? ::Run{} : runs.front();
}

TEST(BreakdownGroups, SizeBandCountsTotalParameters) {
    EXPECT_EQ(size_band_of(row("llmfoundry-h100-mpt-1b-2k")), "<5B");
    EXPECT_EQ(size_band_of(row("megatron21-t1-1.7b")), "<5B");
    EXPECT_EQ(size_band_of(row("dgxc2411-nemotron4-15b-16gpu-bf16")), "5-30B");
    EXPECT_EQ(size_band_of(row("dgxc2411-llama31-70b-64gpu-bf16")), "30-100B");
    EXPECT_EQ(size_band_of(row("llama3-t4-405b-8k-8192gpu")), ">=100B");
}

TEST(BreakdownGroups, MoeSizeBandCountsEveryExpertNotTheActiveOnes) {
    // Qwen3-30B-A3B: 30.5B in all, 3.3B active per token; Grok-1 at full depth (64 layers): 314B
    // in all. The bands count the row's model as modelled: the 8-GPU Grok-1 proxy has 2 layers.
    EXPECT_EQ(size_band_of(row("mbridge2608-qwen3-30b-a3b-gb200-mxfp8")), "30-100B");
    EXPECT_EQ(size_band_of(row("dgxc2411-grok1-314b-2048gpu-fp8")), ">=100B");
    EXPECT_EQ(size_band_of(row("dgxc2411-grok1-314b-8gpu-fp8")), "5-30B");
}

// Issue 29 point 3: the small-model check rows (MPT 350m and 760m, and 1b / 3b at other
// scales) are modelled and land in the <5B band, with the model shape of their yamls.
TEST(BreakdownGroups, SmallModelCheckRowsFillTheSmallestBand) {
    int small_checks = 0;
    for (const ::Run& r : published_runs())
        if (r.skip.empty() && r.use == "check" && size_band_of(r) == "<5B") ++small_checks;
    EXPECT_GE(small_checks, 16);
    const ::Run& mpt350m = row("llmfoundry-a100-80gb-mpt-350m-2k-8gpu");
    EXPECT_TRUE(mpt350m.skip.empty()) << mpt350m.skip;
    EXPECT_EQ(mpt350m.job.model.hidden, 1024);
    EXPECT_EQ(size_band_of(mpt350m), "<5B");
    const ::Run& mpt760m = row("llmfoundry-a100-40gb-mpt-760m-2k-64gpu");
    EXPECT_EQ(mpt760m.job.model.heads, 12);
    EXPECT_EQ(scale_band_of(mpt760m), "<=64");
    EXPECT_EQ(row("llmfoundry-h100-mpt-1b-8k-8gpu").job.model.seq_len, 8192);
}

TEST(BreakdownGroups, ScaleBandEdgesBelongToTheLowerBand) {
    EXPECT_EQ(scale_band_of(small_row("scale64.toml", 64, "dp = 64\n")), "<=64");
    EXPECT_EQ(scale_band_of(small_row("scale65.toml", 65, "dp = 65\n")), "65-512");
    EXPECT_EQ(scale_band_of(small_row("scale512.toml", 512, "dp = 512\n")), "65-512");
    EXPECT_EQ(scale_band_of(small_row("scale513.toml", 513, "dp = 513\n")), "513-4096");
    EXPECT_EQ(scale_band_of(small_row("scale4096.toml", 4096, "dp = 4096\n")), "513-4096");
    EXPECT_EQ(scale_band_of(small_row("scale4097.toml", 4097, "dp = 4097\n")), ">4096");
}

TEST(BreakdownGroups, ARunIsInEveryFeatureItUses) {
    const ::Run plain = small_row("plain.toml", 8, "dp = 8\n");
    EXPECT_TRUE(features_of(plain).empty());
    const ::Run many = small_row("many.toml", 16,
                                 "tp = 2\npp = 2\nvpp = 2\ncp = 2\ndp = 2\nkv_heads = 2\nfp8 = \"current\"\n"
                                 "sequence_parallel = true\nrecompute = \"selective\"\n");
    EXPECT_EQ(features_of(many), (std::vector<std::string>{"fp8", "context-parallel", "interleaved-pp",
                                                           "sequence-parallel", "gqa", "recompute-selective"}));
    const ::Run fsdp = small_row("fsdp.toml", 8, "dp = 8\nfsdp = true\nrecompute = \"full\"\n");
    EXPECT_EQ(features_of(fsdp), (std::vector<std::string>{"fsdp-zero3", "recompute-full"}));
    EXPECT_EQ(features_of(row("dgxc2411-grok1-314b-8gpu-fp8"))[1], "moe");
}

}  // namespace
