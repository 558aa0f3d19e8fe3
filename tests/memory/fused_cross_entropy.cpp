// fused_cross_entropy.cpp — llm-foundry's loss (a published layout must be predicted to fit the GPUs it ran on). llm-foundry computes MPT's loss with flash-attn's
// fused cross entropy (loss_fn "fused_crossentropy", its default), which keeps the 16-bit
// logits and writes a 16-bit gradient (estimate.cross_entropy = "fused", 2e bytes per
// logit), where F.cross_entropy(logits.float()) holds 12. The tests pin the key's TOML round
// trip and refusal, the bytes per logit on the last stage, and that MPT-7B at 8k tokens with
// llm-foundry's published layout fits an A100 80GB with the fused loss (it did not with 12).
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/spec/job_overrides.h"
#include "ptd/spec/presets.h"

#include "job_test_util.h"

namespace {

using namespace ptd;

#define EXPECT_REL(got, want) EXPECT_NEAR((got), (want), 1e-9 * std::abs((double)(want)) + 1e-6)

const PresetCatalog& presets() { return embedded_presets(); }
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// MPT-7B (llm-foundry scripts/train/yamls/pretrain/mpt-7b.yaml: 32 layers, d_model 4096,
// 32 heads, expansion 4, vocab 50368) at seq 8192 on one node of 8 A100 80GB: FSDP
// FULL_SHARD, activation checkpointing of every block, micro-batch 8, global batch 128 — the
// benchmarking README's row (bench/accuracy/published_runs.toml llmfoundry-a100-80gb-mpt-7b-8k).
const char* kMpt7b8k = R"(
[model]
arch = "gpt"
layers = 32
hidden = 4096
heads = 32
kv_heads = 32
ffn_hidden = 16384
vocab = 50368
seq_len = 8192
[cluster]
nodes = 1
gpus_per_node = 8
gpu = "a100-80gb"
[parallel]
tp = 1
pp = 1
zero = 3
recompute = "full"
[training]
framework = "pytorch-fsdp"
flash_attention = true
micro_batch = 8
global_batch = 128
precision = "bf16"
)";

JobSpec mpt7b(const std::vector<std::string>& sets) {
    auto j = load_job_text_with_overrides(kMpt7b8k, "mpt7b.toml", sets, presets());
    EXPECT_TRUE(j) << (j ? "" : j.error().str());
    return j ? *j : JobSpec{};
}

TEST(FusedCrossEntropy, TomlRoundTripAndRefusal) {
    JobSpec j = mpt7b({"estimate.cross_entropy=fused"});
    EXPECT_EQ(j.estimate.cross_entropy, CrossEntropyImpl::fused);
    EXPECT_STREQ(to_string(CrossEntropyImpl::fused), "fused");
    EXPECT_EQ(ptd_test::reloaded(save_job_toml(j)).estimate.cross_entropy, CrossEntropyImpl::fused);
    // A misspelt word is refused with the allowed ones, "fused" among them.
    auto bad = load_job_text_with_overrides(kMpt7b8k, "mpt7b.toml", {"estimate.cross_entropy=fuse"}, presets());
    ASSERT_FALSE(bad);
    const std::string msg = bad.error().str();
    EXPECT_NE(msg.find("cross_entropy"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fused"), std::string::npos) << msg;
}

// The fused loss keeps 2e = 4 bytes per logit where F.cross_entropy(logits.float()) keeps 12:
// the last stage's activations differ by 8 · T · V_p (T = micro-batch · seq tokens), and
// equal those of the compiled PyTorch loss (also 2e).
TEST(FusedCrossEntropy, TwoBytesPerLogitInBf16) {
    auto acts = [](const char* ce) {
        const Estimate e = estimate_job(mpt7b({std::string("estimate.cross_entropy=") + ce}));
        return e.stages.back().mem.activations;
    };
    const double T = 8.0 * 8192.0;
    const double Vp = (double)padded_vocab(50368, mpt7b({}).estimate.vocab_pad, 1);
    EXPECT_REL(acts("pytorch") - acts("fused"), (12.0 - 4.0) * T * Vp);
    EXPECT_REL(acts("fused"), acts("pytorch-compiled"));
    // fp32 training keeps fp32 logits and an fp32 gradient: 2 · 4 bytes.
    const Estimate f32 = estimate_job(mpt7b({"estimate.cross_entropy=fused", "training.precision=fp32"}));
    const Estimate f32pt = estimate_job(mpt7b({"estimate.cross_entropy=pytorch", "training.precision=fp32"}));
    EXPECT_REL(f32pt.stages.back().mem.activations - f32.stages.back().mem.activations, (12.0 - 8.0) * T * Vp);
}

// llm-foundry ran this layout (3206 tokens/s/GPU in the README): with the fused loss it fits
// the A100 80GB; with F.cross_entropy's 12 bytes per logit (the model before) it did not.
TEST(FusedCrossEntropy, Mpt7b8kFitsTheA100ItRanOn) {
    const Estimate fused = estimate_job(mpt7b({"estimate.cross_entropy=fused"}));
    const Estimate eager = estimate_job(mpt7b({"estimate.cross_entropy=pytorch"}));
    EXPECT_TRUE(fused.fits) << fused.stages.back().mem.total() / kGiB << " GiB";
    EXPECT_FALSE(eager.fits) << eager.stages.back().mem.total() / kGiB << " GiB";
}

}  // namespace
