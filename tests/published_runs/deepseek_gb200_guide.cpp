// deepseek_gb200_guide.cpp — the check rows of Megatron-LM's DeepSeek-V3 GB200 optimization
// guide (docs/discussions/deepseek-v3-gb200-optimization, dev branch eb0783b6d3; mcoreds25): the
// same model, GPUs and layout at the start (494.46 TFLOP/s a GPU) and at the end (970.01) of
// its optimization history. The tests pin what the rows' notes claim: the figures are Megatron-
// LM's own count (flops_convention megatron-lm-2025, worked by hand below), the two rows share
// the layout and carry the switches the guide turned between them, and the layout fits.
#include <string>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"

#include "published_runs_test_util.h"

namespace {

using namespace ptd;

using ptd_test::load_run_text;
using ptd_test::published_runs;

const ::Run* find_run(const std::string& name) {
    for (const ::Run& r : published_runs())
        if (r.name == name) return &r;
    return nullptr;
}

// Megatron-LM's num_floating_point_operations for DeepSeek-V3 without MTP, per token, by hand:
//  - MLPs: 12·h·1.5·(3 dense layers · 18432 + 58 MoE layers · (8 · 2048 + 2048)) = 1.4507e11
//  - attention, per layer: 6·(1536·(7168 + 128·192 + 1) + 512·(7168 + 128·256 + 1) + 7168·64 +
//    128·128·7168 + 4096·128·192/2 + 4096·128·128/2) = 1.6259e9; 61 layers: 9.918e10
//  - logits: 6·7168·129280 = 5.560e9
// = 2.4981e11 a token; the step of 2048 sequences of 4096 at 970.01 TFLOP/s on 256 GPUs is
// 2.4981e11 · 2048 · 4096 / (970.01e12 · 256) = 8.439 s, at 494.46: 16.555 s.
TEST(DeepSeekGb200GuideRows, TheFiguresAreMegatronLmsOwnCount) {
    const double h = 7168, mlp = 12.0 * h * 1.5 * (3 * 18432.0 + 58 * (8 * 2048.0 + 2048));
    const double attn = 6.0 * (1536 * (h + 128 * 192 + 1) + 512 * (h + 128 * 256 + 1) + h * 64 + 128 * 128 * h +
                               4096 * 128 * 192 / 2.0 + 4096 * 128 * 128 / 2.0);
    const double per_token = mlp + 61 * attn + 6 * h * 129280;
    EXPECT_NEAR(per_token, 2.4981e11, 0.0001e11);
    for (const auto& [name, tflops, step] : {std::tuple{"mcoreds25-deepseek-v3-gb200-mxfp8-baseline", 494.46, 16.555},
                                             std::tuple{"mcoreds25-deepseek-v3-gb200-mxfp8-final", 970.01, 8.439}}) {
        const ::Run* r = find_run(name);
        ASSERT_TRUE(r) << name << " is not in published_runs.toml";
        ASSERT_TRUE(r->skip.empty()) << name << ": " << r->skip;
        EXPECT_EQ(r->use, "check") << name;
        EXPECT_EQ(r->convention, "megatron-lm-2025") << name;
        EXPECT_NEAR(r->source_flops / (2048.0 * 4096), per_token, per_token * 1e-9) << name;
        EXPECT_NEAR(r->published_step, step, 0.001) << name;
        EXPECT_NEAR(r->source_flops / (r->published_step * 256), tflops * 1e12, 1e6) << name;
    }
}

// For a dense model with as many query groups as heads and a GELU MLP of 4h, the count is
// Korthikanti et al.'s eq. 7 with the causal half of the scores: 72·B·s·L·h²·(1 + s/(12h) +
// V/(12·h·L)) — what Megatron-LM's code came to count after r0.8.0's full-score version.
TEST(DeepSeekGb200GuideRows, OnADenseGptTheCountIsEq7WithCausalScores) {
    const std::vector<::Run> runs = load_run_text("dense_megatron_2025.toml", R"(
[[run]]
name = "t-dense"
use = "check"
framework = "megatron"
gpu = "h100-sxm"
gpus = 8
gpus_per_node = 8
arch = "gpt"
layers = 24
hidden = 2048
heads = 16
ffn_hidden = 8192
vocab = 51200
seq_len = 2048
tp = 1
pp = 1
dp = 8
micro_batch = 1
global_batch = 64
precision = "bf16"
tflops_per_gpu = 400.0
flops_convention = "megatron-lm-2025"
)");
    ASSERT_EQ(runs.size(), 1u);
    const double B = 64, s = 2048, L = 24, h = 2048, V = 51200;
    EXPECT_NEAR(runs[0].source_flops / (72.0 * B * s * L * h * h * (1 + s / (12 * h) + V / (12 * h * L))), 1.0, 1e-12);
}

// The baseline and the final row: the same shape, GPUs, layout and batch; among what the guide
// changed between them: the dispatcher (all-to-all → HybridEP), the router fusion, the recompute
// modules (mlp + mla_up_proj → moe_act + mlp), the partial CUDA graphs, the FP8 routing padding
// and the cross-entropy kernel (Megatron's fused → Transformer Engine's).
TEST(DeepSeekGb200GuideRows, TheTwoRowsShareTheLayoutAndDifferInTheGuidesSwitches) {
    const ::Run* base = find_run("mcoreds25-deepseek-v3-gb200-mxfp8-baseline");
    const ::Run* last = find_run("mcoreds25-deepseek-v3-gb200-mxfp8-final");
    ASSERT_TRUE(base && last);
    const JobSpec &b = base->job, &f = last->job;
    EXPECT_EQ(b.world_size(), 256);
    EXPECT_EQ(f.world_size(), 256);
    for (const JobSpec* j : {&b, &f}) {
        EXPECT_EQ(j->parallel.tp, 1);
        EXPECT_EQ(j->parallel.pp, 8);
        EXPECT_EQ(j->parallel.vpp, 4);
        EXPECT_EQ(j->parallel.ep, 32);
        EXPECT_EQ(j->training.micro_batch, 1);
        EXPECT_EQ(j->training.global_batch, 2048);
        EXPECT_EQ(j->training.fp8, Fp8Recipe::mxfp8);
        EXPECT_EQ(j->model.mtp_layers, 0);
        // Et|(tt|)*30L: the embedding and one layer, thirty chunks of two, the loss alone.
        ASSERT_EQ(j->parallel.layers_per_stage.size(), 32u);
        EXPECT_EQ(j->parallel.layers_per_stage.front(), 1);
        EXPECT_EQ(j->parallel.layers_per_stage.back(), 0);
    }
    EXPECT_EQ(b.parallel.moe_dispatcher, MoeDispatcher::alltoall);
    EXPECT_EQ(f.parallel.moe_dispatcher, MoeDispatcher::hybridep);
    EXPECT_FALSE(b.parallel.moe_router_fusion);
    EXPECT_TRUE(f.parallel.moe_router_fusion);
    EXPECT_EQ(b.parallel.cuda_graph_impl, CudaGraphImpl::none);
    EXPECT_EQ(f.parallel.cuda_graph_impl, CudaGraphImpl::transformer_engine);
    EXPECT_EQ(b.parallel.recompute_modules, kRecomputeMlp | kRecomputeMlaUpProj);
    EXPECT_EQ(f.parallel.recompute_modules, kRecomputeMoeAct | kRecomputeMlp);
    for (const JobSpec* j : {&b, &f}) EXPECT_TRUE(estimate_job(*j).fits) << (j == &b ? base->name : last->name);
    // The model orders them as the guide did: the final run is the faster.
    EXPECT_LT(estimate_job(f).step_s, estimate_job(b).step_s);
}

}  // namespace
