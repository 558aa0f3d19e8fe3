// test_oompt.cpp — issue 15 ("every published layout is predicted to fit on the GPUs it ran
// on"), helper oompt: llm-foundry's loss. llm-foundry computes MPT's loss with flash-attn's
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
#include "ptd/timeline/timeline.h"

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

TEST(OomptFusedCrossEntropy, TomlRoundTripAndRefusal) {
    JobSpec j = mpt7b({"estimate.cross_entropy=fused"});
    EXPECT_EQ(j.estimate.cross_entropy, CrossEntropyImpl::fused);
    EXPECT_STREQ(to_string(CrossEntropyImpl::fused), "fused");
    auto again = load_job_text(save_job_toml(j), "saved.toml", presets());
    ASSERT_TRUE(again) << again.error().str();
    EXPECT_EQ(again->estimate.cross_entropy, CrossEntropyImpl::fused);
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
TEST(OomptFusedCrossEntropy, TwoBytesPerLogitInBf16) {
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
TEST(OomptFusedCrossEntropy, Mpt7b8kFitsTheA100ItRanOn) {
    const Estimate fused = estimate_job(mpt7b({"estimate.cross_entropy=fused"}));
    const Estimate eager = estimate_job(mpt7b({"estimate.cross_entropy=pytorch"}));
    EXPECT_TRUE(fused.fits) << fused.stages.back().mem.total() / kGiB << " GiB";
    EXPECT_FALSE(eager.fits) << eager.stages.back().mem.total() / kGiB << " GiB";
}

// The schedule simulation with a block order that has a cycle: Megatron's interleaved order
// with a group size N < pp (here N = 2, pp = 4) makes stage 0 wait for a chunk-0 forward
// that the last stage runs only after a backward that waits on stage 0. Job validation
// refuses such N (parallel.microbatch_group_size); were it reached, the simulation must stop
// loudly rather than return the makespan of the blocks it managed to place (it used to break
// out of its loop in release builds, where the assertion is compiled out).
TEST(OomptScheduleSimulationDeathTest, CyclicBlockOrderStopsInsteadOfReturningAPartialMakespan) {
    const int p = 4, v = 2, m = 8;
    const std::vector<double> fwd((size_t)p * v, 1.0), bwd((size_t)p * v, 2.0);
    PipelineDurations d{p, v, m, fwd, bwd};
    d.schedule = PipelineSchedule::interleaved;
    d.group = 2;
    std::vector<double> end((size_t)p);
    EXPECT_DEATH(simulate_pipeline(d, end), "deadlocked");
}

// The Llama 3 paper's "fewer micro-batches than the number of stages" (arXiv 2407.21783
// §3.3.2) is the one N < pp case its schedule defines: N = M, every micro-batch through each
// chunk in turn, all forwards before the backwards. The simulation runs it with the default
// N (the last, only group holds all M micro-batches) and places every block.
TEST(OomptScheduleSimulation, FewerMicroBatchesThanStagesPlacesEveryBlock) {
    const int p = 4, v = 2, m = 2;
    const std::vector<double> fwd((size_t)p * v, 1.0), bwd((size_t)p * v, 2.0);
    PipelineDurations d{p, v, m, fwd, bwd};
    d.schedule = PipelineSchedule::interleaved;
    std::vector<double> end((size_t)p);
    std::vector<PlacedOp> placed;
    const double makespan = simulate_pipeline(d, end, &placed);
    EXPECT_EQ((int)placed.size(), 2 * p * v * m);
    // Every forward precedes every backward on each stage (breadth-first), and the makespan
    // is at least the critical path of one micro-batch: v·p forwards then v·p backwards.
    EXPECT_GE(makespan, v * p * (1.0 + 2.0));
    for (int s = 0; s < p; ++s) {
        bool seen_backward = false;
        for (const PlacedOp& op : placed) {
            if (op.stage != s) continue;
            if (op.op.pass == Pass::backward) seen_backward = true;
            else EXPECT_FALSE(seen_backward) << "stage " << s;
        }
    }
}

// Job validation refuses, with N left at pp, the micro-batch counts whose last interleaved group
// is short of pp (Megatron-LM raises for them; the order of p 4, v 3, m 5 has a cycle), so the
// simulation's stop is unreachable from a job; fewer micro-batches than stages and multiples of
// pp stay accepted.
TEST(OomptScheduleSimulation, ShortLastInterleavedGroupIsRefusedByValidation) {
    auto job = [](int global_batch) {
        return std::string("[model]\narch = \"llama\"\nlayers = 24\nhidden = 1024\nheads = 8\nkv_heads = 8\n"
                           "vocab = 32000\nseq_len = 1024\n[cluster]\nnodes = 1\ngpus_per_node = 4\n"
                           "gpu = \"h100-sxm\"\n[parallel]\ntp = 1\npp = 4\nvpp = 3\n[training]\nmicro_batch = 1\n"
                           "global_batch = ") + std::to_string(global_batch) + "\n";
    };
    auto bad = load_job_text(job(5), "bad.toml", presets());
    ASSERT_FALSE(bad);
    const std::string msg = bad.error().str();
    EXPECT_NE(msg.find("training.global_batch"), std::string::npos) << msg;
    EXPECT_NE(msg.find("5 micro-batches"), std::string::npos) << msg;
    for (int ok : {2, 4, 8}) {
        auto j = load_job_text(job(ok), "ok.toml", presets());
        ASSERT_TRUE(j) << ok << ": " << j.error().str();
        EXPECT_GT(estimate_job(*j).step_s, 0.0);
    }
}

}  // namespace
