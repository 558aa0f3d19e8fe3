// torchtitan_memory.cpp — memory the estimator adds for how torchtitan and PyTorch hold tensors:
// DTensor sequence parallelism saving the all-gathered linear
// inputs, loss_parallel's backward, the compiled loss, and torch.distributed.pipelining's
// receive buffers and kept outputs. Each test pins one mechanism's bytes, so it fails when the
// mechanism is dropped or changed; every one is selected by training.framework = "torchtitan"
// (and estimate.cross_entropy), never by a job's name.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/spec/job_overrides.h"
#include "ptd/spec/presets.h"

namespace {

using namespace ptd;

#define EXPECT_REL(got, want) EXPECT_NEAR((got), (want), 1e-9 * std::abs((double)(want)) + 1e-6)

const std::string kJobs = PTD_SOURCE_DIR "/assets/jobs/";

const PresetCatalog& presets() { return embedded_presets(); }

JobSpec job(const std::string& file, const std::vector<std::string>& sets = {}) {
    auto j = load_job_file_with_overrides(kJobs + file, sets, presets());
    EXPECT_TRUE(j) << (j ? "" : j.error().str());
    return j ? *j : JobSpec{};
}

// Llama 3 70B on 64 H100, tp 8 with sequence parallelism, one pipeline stage (dp 8), one
// micro-batch of 8192 tokens, bf16: the 2D layout of torchtitan's Table 4, smaller.
JobSpec llama70b_2d(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> sets = {"parallel.pp=1", "parallel.vpp=1", "training.global_batch=8"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    return job("llama3-70b-h100.toml", sets);
}

double last_activations(const JobSpec& j) {
    const Estimate e = estimate_job(j);
    return e.stages.back().mem.activations;
}

constexpr double T = 8192, h = 8192, t = 8;
// Llama 3 70B per rank under tp 8: 64 query heads and 8 KV heads of 128 → 1024 and 128 wide.
constexpr double hd8 = 1024, kvd8 = 128;

// torchtitan's TP (parallelize_llama.py apply_tp): PrepareModuleInput all-gathers the
// sequence-sharded norm output before the attention and before the MLP, and the Q/K/V and
// w1/w3 matmuls save that gathered tensor (Megatron saves the sharded one and gathers again
// in backward). Without recompute both gathered inputs stay per layer; the output projection
// (ColwiseParallel with Shard(1) input) saves its gathered input too. The loss is Megatron's
// here so that only the DTensor terms differ.
TEST(TorchtitanMemory, DTensorSequenceParallelSavesGatheredInputs) {
    const std::vector<std::string> none = {"parallel.recompute=none", "estimate.cross_entropy=megatron"};
    JobSpec mega = llama70b_2d(none);
    std::vector<std::string> tt = none;
    tt.push_back("training.framework=torchtitan");
    tt.push_back("training.torch_compile=true");  // no eager terms (EagerNormAndRopeCopies)
    tt.push_back("estimate.vocab_pad=128");       // Megatron's padded vocabulary, as the loss
    JobSpec titan = llama70b_2d(tt);
    const double layers = mega.model.layers, e = 2.0;
    const double gathered = e * T * h * (1.0 - 1.0 / t);  // one full-sequence input minus its shard
    const double repeat_kv = 2.0 * e * T * (hd8 - kvd8);  // RepeatKvCopies
    EXPECT_REL(last_activations(titan) - last_activations(mega), layers * (2.0 * gathered + repeat_kv) + gathered);

    // Full recompute: each layer keeps its (sharded) input only; the two gathered inputs are
    // part of the one layer being recomputed, and the output projection's stays.
    for (std::string& s : tt) if (s == "parallel.recompute=none") s = "parallel.recompute=full";
    std::vector<std::string> full = {"parallel.recompute=full", "estimate.cross_entropy=megatron"};
    EXPECT_REL(last_activations(llama70b_2d(tt)) - last_activations(llama70b_2d(full)), 2.0 * gathered + repeat_kv + gathered);

    // torchao float8 TP (Float8ColwiseParallel / PrepareFloat8ModuleInput) casts before the
    // all-gather: the gathered block inputs hold 1 byte per element; the output layer stays bf16.
    tt.push_back("training.fp8=tensorwise");
    full.push_back("training.fp8=tensorwise");
    EXPECT_REL(last_activations(llama70b_2d(tt)) - last_activations(llama70b_2d(full)),
               2.0 * T * h * (1.0 - 1.0 / t) + repeat_kv + gathered);

    // Megatron-LM jobs keep Megatron's numbers.
    EXPECT_REL(last_activations(mega), last_activations(llama70b_2d(none)));
}

// loss_parallel (torch/distributed/tensor/parallel/loss.py): the nll_loss backward handler
// builds zeros_like(x) and (grad_input + exp(x)) * grad_output next to the saved fp32
// log-softmax x: 16 bytes per local logit at the loss's peak, where F.cross_entropy on whole
// logits holds 12. The compiled loss (torchtitan's components/loss.py under training.compile)
// keeps the 16-bit logits and writes their 16-bit gradient: 4 bytes.
TEST(TorchtitanMemory, LossParallelAndCompiledLossBytesPerLogit) {
    const double Vp = (double)padded_vocab(128256, 1, 8);  // torchtitan keeps the tokenizer's vocabulary
    const std::vector<std::string> tt = {"training.framework=torchtitan", "parallel.recompute=full"};
    auto with = [&](const char* ce) {
        std::vector<std::string> s = tt;
        s.push_back(std::string("estimate.cross_entropy=") + ce);
        return last_activations(llama70b_2d(s));
    };
    EXPECT_REL(with("pytorch") - with("pytorch-compiled"), (16.0 - 4.0) * T * Vp / t);
    // Without TP there is no loss_parallel: F.cross_entropy's 12 bytes.
    const std::vector<std::string> one = {"parallel.tp=1", "parallel.sequence_parallel=false", "training.framework=torchtitan",
                                          "parallel.zero=3", "parallel.distributed_optimizer=false",
                                          "training.global_batch=64"};
    auto tp1 = [&](const char* ce) {
        std::vector<std::string> s = one;
        s.push_back(std::string("estimate.cross_entropy=") + ce);
        return last_activations(llama70b_2d(s));
    };
    const double V1 = (double)padded_vocab(128256, 1, 1);
    EXPECT_REL(tp1("pytorch") - tp1("pytorch-compiled"), (12.0 - 4.0) * T * V1);
}

// torch.distributed.pipelining (stage.py): one activation receive buffer per micro-batch on
// every stage but the first and one gradient receive buffer per micro-batch on every stage
// but the last, allocated once; output_chunks keeps every forward output to the end of the
// step (the last stage's are the logits). Sequence parallelism is off here so that the DTensor
// terms stay out and the stage boundary is a whole T × h tensor.
TEST(TorchtitanMemory, TorchPipeliningBuffers) {
    const std::vector<std::string> base = {"parallel.vpp=1", "parallel.sequence_parallel=false",
                                           "estimate.cross_entropy=megatron", "parallel.recompute=full",
                                           "training.global_batch=16"};
    std::vector<std::string> tt = base;
    tt.push_back("training.framework=torchtitan");
    tt.push_back("training.torch_compile=true");
    tt.push_back("estimate.vocab_pad=128");  // the logits as Megatron pads them: only the buffers differ
    tt.push_back("parallel.layers_per_stage=[20, 20, 20, 20]");  // Megatron's even split, not torchtitan's (ttsplit)
    const JobSpec mj = job("llama3-70b-h100.toml", base);
    const JobSpec tj = job("llama3-70b-h100.toml", tt);
    const Estimate me = estimate_job(mj), te = estimate_job(tj);
    const int p = mj.parallel.pp;
    ASSERT_EQ(p, 4);
    const double m = 16.0 / 2.0;  // global 16 / (micro-batch 1 · dp 2)
    const double boundary = 2.0 * T * h;
    const double Vp = (double)padded_vocab(128256, 128, 8);
    for (int i = 0; i < p; ++i) {
        const double in_flight = std::min<double>(p - i, m);
        double want = 2.0 * 2.0 * T * (hd8 - kvd8);  // the recomputed layer's repeat_kv copies
        if (i > 0) want += (m - in_flight) * boundary;  // receive buffers not holding a live input
        if (i < p - 1) want += 2.0 * m * boundary;      // gradient receive buffers + kept outputs
        else want += m * 2.0 * T * Vp / t;              // the kept logits
        EXPECT_REL(te.stages[(size_t)i].mem.activations - me.stages[(size_t)i].mem.activations, want) << i;
    }
}

// ttfsdp: torchtitan with pp > 1 shards the data-parallel ranks with FSDP2 under
// torch.distributed.pipelining — parameters kept gathered after forward (reshard_after_forward
// False with pp), gradients accumulated whole in fp32 and reduce-scattered once after the last
// micro-batch. zero = 3 (what a torchtitan user writes), zero = 2 (reshard "never") and
// Megatron's distributed optimizer are that one run: the same bytes and the same step.
TEST(TorchtitanMemory, FsdpUnderPipeliningGathersOnceAndKeepsWholeGradients) {
    const std::vector<std::string> base = {"training.framework=torchtitan", "parallel.vpp=1",
                                           "parallel.distributed_optimizer=false", "training.global_batch=16"};
    auto with = [&](std::vector<std::string> extra) {
        extra.insert(extra.begin(), base.begin(), base.end());
        return job("llama3-70b-h100.toml", extra);
    };
    const JobSpec z3 = with({"parallel.zero=3"}), z2 = with({"parallel.zero=2"});
    const JobSpec dist = with({"parallel.zero=0", "parallel.distributed_optimizer=true"});
    ASSERT_EQ(z3.parallel.pp, 4);
    ASSERT_EQ(z3.parallel.dp, 2);
    EXPECT_TRUE(validate_job(z3).empty());
    const Estimate e3 = estimate_job(z3), e2 = estimate_job(z2), ed = estimate_job(dist);
    EXPECT_REL(e3.step_s, ed.step_s);
    EXPECT_REL(e2.step_s, ed.step_s);
    for (size_t i = 0; i < e3.stages.size(); ++i) {
        const MemoryBreakdown& m = e3.stages[i].mem;
        EXPECT_REL(m.total(), ed.stages[i].mem.total()) << i;
        EXPECT_REL(m.total(), e2.stages[i].mem.total()) << i;
        EXPECT_REL(m.grads, 2.0 * m.params) << i;          // whole fp32 gradients beside whole bf16 weights
        EXPECT_REL(m.optimizer, 6.0 / 2.0 * m.params) << i;  // 12 bytes per parameter over dp 2
    }
    // The estimate says how it read zero 3 (and not for the layout written as what it runs).
    auto noted = [](const Estimate& e) {
        for (const std::string& n : e.notes)
            if (n.find("FSDP2 under torch.distributed.pipelining") != std::string::npos) return true;
        return false;
    };
    EXPECT_TRUE(noted(e3));
    EXPECT_FALSE(noted(ed));
    // Reduced once per step: twice the micro-batches leave the exposed reduction as it was.
    const Estimate twice = estimate_job(with({"parallel.zero=3", "training.global_batch=32"}));
    EXPECT_GT(e3.time.dp_comm, 0);
    EXPECT_REL(twice.time.dp_comm, e3.time.dp_comm);
    // Offload under pipelining is not modelled: refused, naming the key.
    auto offload = load_job_file_with_overrides(
        kJobs + std::string("llama3-70b-h100.toml"),
        {"training.framework=torchtitan", "parallel.vpp=1", "parallel.distributed_optimizer=false", "parallel.zero=3",
         "parallel.offload_optimizer=cpu", "parallel.offload_params=true"},
        presets());
    ASSERT_FALSE(offload.has_value());
    EXPECT_NE(offload.error().str().find("parallel.offload_params"), std::string::npos) << offload.error().str();
    EXPECT_NE(offload.error().str().find("not modelled"), std::string::npos) << offload.error().str();
    // Other stacks re-gather ZeRO-3's parameters every micro-batch: refused there.
    auto megatron = load_job_file_with_overrides(kJobs + std::string("llama3-70b-h100.toml"),
                                                 {"parallel.vpp=1", "parallel.distributed_optimizer=false", "parallel.zero=3"},
                                                 presets());
    ASSERT_FALSE(megatron.has_value());
    EXPECT_NE(megatron.error().str().find("parallel.zero"), std::string::npos) << megatron.error().str();
}

// torchtitan's Attention (models/llama/model.py) expands K and V to all query heads with
// repeat_kv (expand + reshape, a copy) before SDPA, which saves the expanded tensors: without
// recompute each layer keeps 2·e·T·(a·d − g·d) more than the GQA-sized K and V.
TEST(TorchtitanMemory, RepeatKvCopies) {
    const std::vector<std::string> base = {"parallel.tp=1", "parallel.sequence_parallel=false", "parallel.zero=3",
                                           "parallel.distributed_optimizer=false", "training.global_batch=64",
                                           "parallel.recompute=none", "estimate.cross_entropy=megatron"};
    std::vector<std::string> tt = base;
    tt.push_back("training.framework=torchtitan");
    tt.push_back("training.torch_compile=true");
    const double layers = 80, e = 2.0, hd = 8192, kvd = 1024;
    EXPECT_REL(last_activations(llama70b_2d(tt)) - last_activations(llama70b_2d(base)), layers * 2.0 * e * T * (hd - kvd));
}

// Run eagerly (training.torch_compile = false), torchtitan's RMSNorm computes in fp32 (pow and
// the multiply save x.float(), the weight multiply the 16-bit normalised tensor) and
// apply_rotary_emb multiplies complex fp32 views of Q and K (saved by the multiply); under
// torch.compile both fuse away. Per layer without recompute: 2·(4 − e)·T·h·r + 4·T·(a_l·d + g_l·d).
TEST(TorchtitanMemory, EagerNormAndRopeCopies) {
    const std::vector<std::string> base = {"parallel.recompute=none", "estimate.cross_entropy=megatron",
                                           "training.framework=torchtitan"};
    std::vector<std::string> compiled = base;
    compiled.push_back("training.torch_compile=true");
    const double layers = 80, e = 2.0;
    EXPECT_REL(last_activations(llama70b_2d(base)) - last_activations(llama70b_2d(compiled)),
               layers * (2.0 * (4.0 - e) * T * h / t + 4.0 * T * (hd8 + kvd8)));
    // With op-level selective checkpointing only the layer being recomputed holds them.
    std::vector<std::string> op = {"parallel.recompute=selective", "parallel.recompute_style=torchtitan-op",
                                   "estimate.cross_entropy=megatron", "training.framework=torchtitan"};
    std::vector<std::string> op_compiled = op;
    op_compiled.push_back("training.torch_compile=true");
    EXPECT_REL(last_activations(llama70b_2d(op)) - last_activations(llama70b_2d(op_compiled)),
               2.0 * (4.0 - e) * T * h / t + 4.0 * T * (hd8 + kvd8));
}

// A job file names the compiled loss as "pytorch-compiled" and writes it back.
TEST(TorchtitanMemory, CompiledLossJobKey) {
    JobSpec j = llama70b_2d({"estimate.cross_entropy=pytorch-compiled"});
    EXPECT_EQ(j.estimate.cross_entropy, CrossEntropyImpl::pytorch_compiled);
    EXPECT_STREQ(to_string(CrossEntropyImpl::pytorch_compiled), "pytorch-compiled");
    auto bad = load_job_file_with_overrides(kJobs + "llama3-70b-h100.toml", {"estimate.cross_entropy=compiled"}, presets());
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().str().find("pytorch-compiled"), std::string::npos) << bad.error().str();
}

}  // namespace
