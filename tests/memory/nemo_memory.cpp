// nemo_memory.cpp — what NeMo / Megatron-Bridge runs hold that plain Megatron-LM runs do not
// (a published run cannot be predicted OOM): bf16 gradient buffers and reduction
// (parallel.grad_reduce_in_fp32 = false), TE's FP8 weights under ZeRO-3 / Megatron-FSDP held
// as a shard, FP8 primary weights (training.fp8_param_gather) and Megatron-core's activation
// offloading (parallel.activation_offload_layers).
// One test per mechanism: the key read, checked and written back, and its effect on memory.
#include <string>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/spec/job_overrides.h"
#include "ptd/spec/presets.h"

#include "job_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

constexpr double kGiB = 1024.0 * 1024 * 1024;

// Llama 3 8B on 8 H100 the way dgxc-benchmarking ran it: TP1 PP1, distributed optimizer.
std::string llama8b_job(const std::string& parallel_extra, const std::string& training_extra = "") {
    return llama8b_h100x8_job("distributed_optimizer = true\noverlap_grad_reduce = true\n" + parallel_extra, training_extra, 128);
}

TEST(NemoMemory, GradReduceInBf16HalvesTheGradientBufferAndItsReduction) {
    const JobSpec fp32 = job_from_text(llama8b_job(""));
    const JobSpec bf16 = job_from_text(llama8b_job("grad_reduce_in_fp32 = false"));
    EXPECT_TRUE(fp32.parallel.grad_reduce_in_fp32);  // Megatron-LM's default for bf16
    EXPECT_FALSE(bf16.parallel.grad_reduce_in_fp32);
    const Estimate a = estimate_job(fp32), b = estimate_job(bf16);
    ASSERT_FALSE(a.stages.empty());
    ASSERT_FALSE(b.stages.empty());
    const double params = a.stages[0].params_count;
    // Megatron's fp32 main-grad buffer: 4 bytes per parameter; reduced in bf16: 2.
    EXPECT_NEAR(a.stages[0].mem.grads / params, 4.0, 1e-9);
    EXPECT_NEAR(b.stages[0].mem.grads / params, 2.0, 1e-9);
    // Nothing else of the model states moves.
    EXPECT_DOUBLE_EQ(a.stages[0].mem.params, b.stages[0].mem.params);
    EXPECT_DOUBLE_EQ(a.stages[0].mem.optimizer, b.stages[0].mem.optimizer);
    // Half the bytes on the wire: the data-parallel traffic shrinks.
    EXPECT_LT(b.stages[0].dp_s, a.stages[0].dp_s);
    // Written back only when not the default, and exported as Megatron-LM's flag.
    EXPECT_TRUE(contains(save_job_toml(bf16), "grad_reduce_in_fp32 = false"));
    EXPECT_FALSE(contains(save_job_toml(fp32), "grad_reduce_in_fp32"));
    const std::string out = export_text(bf16, ExportFormat::megatron);
    EXPECT_TRUE(contains(out, "--grad-reduce-in-bf16")) << out;
    const std::string plain = export_text(fp32, ExportFormat::megatron);
    ASSERT_FALSE(plain.empty());
    EXPECT_FALSE(contains(plain, "--grad-reduce-in-bf16")) << plain;
}

TEST(NemoMemory, Fp8WeightsUnderZero3AreHeldAsAShard) {
    // 64-way FSDP with TE FP8: the cached FP8 weights of all layers must not be counted in
    // full on every rank (the Megatron-Bridge Llama 3 70B GB200 FSDP row was 450 GiB).
    const std::string base = job_text({.preset = "llama3-70b",
                                       .nodes = 8,
                                       .parallel = "tp = 1\npp = 1\ndp = 64\nzero = 3",
                                       .training = "global_batch = 64\nmicro_batch = 1\n"});
    const Estimate bf16 = estimate_job(job_from_text(base));
    const Estimate fp8 = estimate_job(job_from_text(base + "fp8 = \"current\"\n"));
    ASSERT_FALSE(bf16.stages.empty());
    ASSERT_FALSE(fp8.stages.empty());
    const double added = fp8.stages[0].mem.params - bf16.stages[0].mem.params;
    // Rowwise + columnwise FP8 copies (2 bytes) of the linear weights, sharded 64 ways:
    // about 70e9 · 2 / 64 ≈ 2 GiB, never the whole model's 130 GiB.
    EXPECT_GT(added, 0.0);
    EXPECT_LT(added, 2.2 * kGiB);
    EXPECT_GT(added, 1.5 * kGiB);
}

TEST(NemoMemory, Fp8ParamGatherDropsTheBf16Weights) {
    const JobSpec cached = job_from_text(llama8b_job("", "fp8 = \"delayed\"\n"));
    const JobSpec primary = job_from_text(llama8b_job("", "fp8 = \"delayed\"\nfp8_param_gather = true\n"));
    EXPECT_TRUE(primary.training.fp8_param_gather);
    const Estimate a = estimate_job(cached), b = estimate_job(primary);
    ASSERT_FALSE(a.stages.empty());
    ASSERT_FALSE(b.stages.empty());
    // Llama 3 8B: 32 layers of 4096·(4096 + 1024 + 1024 + 4096) + 3·4096·14336 linear weights
    // (~6.98e9), each 2 bytes of bf16 fewer; everything else as with the weight cache.
    const double linear = 32.0 * (4096.0 * (4096 + 1024 + 1024 + 4096) + 3.0 * 4096 * 14336);
    EXPECT_NEAR(a.stages[0].mem.params - b.stages[0].mem.params, 2.0 * linear, 1e-6 * linear);
    EXPECT_DOUBLE_EQ(a.stages[0].mem.optimizer, b.stages[0].mem.optimizer);
    EXPECT_TRUE(contains(save_job_toml(primary), "fp8_param_gather = true"));
    auto out = export_job(primary, ExportFormat::megatron);
    ASSERT_TRUE(out) << out.error().str();
    EXPECT_TRUE(contains(out->text, "--fp8-param-gather")) << out->text;
    // Only Transformer Engine recipes have FP8 primary weights.
    auto bad = load_job_text(llama8b_job("", "fp8_param_gather = true\n"), "nofp8.toml", presets());
    ASSERT_FALSE(bad);
    EXPECT_TRUE(contains(bad.error().str(), "training.fp8_param_gather")) << bad.error().str();
}

TEST(NemoMemory, ActivationOffloadMovesLayersToHost) {
    const JobSpec none = job_from_text(llama8b_job(""));
    const JobSpec off = job_from_text(llama8b_job("activation_offload_layers = 8"));
    EXPECT_EQ(off.parallel.activation_offload_layers, 8);
    const Estimate a = estimate_job(none), b = estimate_job(off);
    ASSERT_FALSE(a.stages.empty());
    ASSERT_FALSE(b.stages.empty());
    const double layers = none.model.layers;
    ASSERT_GT(layers, 8);
    // The layer-proportional part: the whole-stage activations of 1 micro-batch minus the
    // embedding / output terms are ≥ layers · per layer; the offloaded ones leave the GPU
    // except the one in transfer, and all eight are held in host memory.
    const double per_layer = b.stages[0].mem.host / 8.0;
    EXPECT_GT(per_layer, 0.0);
    EXPECT_NEAR(a.stages[0].mem.activations - b.stages[0].mem.activations, 7.0 * per_layer, 1.0);
    EXPECT_DOUBLE_EQ(a.stages[0].mem.host, 0.0);
    EXPECT_TRUE(contains(save_job_toml(off), "activation_offload_layers = 8"));
    // Megatron-core refuses it with pipeline parallelism, and for all the layers.
    auto with_pp = load_job_text(llama8b_job("activation_offload_layers = 8") + "", "pp.toml", presets());
    ASSERT_TRUE(with_pp);
    auto bad_pp = load_job_text(job_text({.preset = "llama3-8b",
                                          .parallel = "tp = 1\npp = 2\ndp = 4\nactivation_offload_layers = 4",
                                          .training = "global_batch = 128\n"}),
                                "pp2.toml", presets());
    ASSERT_FALSE(bad_pp);
    EXPECT_TRUE(contains(bad_pp.error().str(), "parallel.activation_offload_layers")) << bad_pp.error().str();
    EXPECT_TRUE(contains(bad_pp.error().str(), "pp = 2")) << bad_pp.error().str();
    auto all_layers = load_job_text(llama8b_job("activation_offload_layers = 32"), "all.toml", presets());
    ASSERT_FALSE(all_layers);
    EXPECT_TRUE(contains(all_layers.error().str(), "fewer than model.layers")) << all_layers.error().str();
}

}  // namespace
