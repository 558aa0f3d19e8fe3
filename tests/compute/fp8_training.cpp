// fp8_training.cpp — FP8 training: the training.fp8* job keys (read,
// checked, written back), what the estimator does with them (the linear layers' GEMMs at
// the FP8 peak plus memory-bound quantization passes, TE's cached FP8 weights and FP8
// saved inputs) and what each export writes for them.
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/spec/job_overrides.h"
#include "ptd/spec/presets.h"
#include "model/estimate_internal.h"

#include "job_test_util.h"

namespace {

using namespace ptd;

using namespace ptd_test;

// The text from TOML: what a user writes, not what a test builds.
const std::string kFp8Job = job_text(
    {.preset = "llama3-70b",
     .nodes = 8,
     .parallel = "tp = 8\npp = 4\nvpp = 5\ndistributed_optimizer = true\nsequence_parallel = true",
     .training = "global_batch = 512\nfp8 = \"current\"\nfp8_format = \"e4m3\"\nfp8_amax_history_len = 16\n"
                 "fp8_bf16_first_layers = 1\nfp8_bf16_last_layers = 2\n"});

TEST(Fp8Keys, ReadAndWrittenBack) {
    auto j = load_job_text(kFp8Job, "fp8.toml", presets());
    ASSERT_TRUE(j) << j.error().str();
    EXPECT_EQ(j->training.fp8, Fp8Recipe::current);
    EXPECT_EQ(j->training.fp8_format, Fp8Format::e4m3);
    EXPECT_EQ(j->training.fp8_amax_history_len, 16);
    EXPECT_EQ(j->training.fp8_bf16_first_layers, 1);
    EXPECT_EQ(j->training.fp8_bf16_last_layers, 2);
    const std::string saved = save_job_toml(*j);
    EXPECT_TRUE(contains(saved, "fp8 = \"current\"")) << saved;
    EXPECT_EQ(reloaded(saved).training, j->training);
    // A job without FP8 writes no fp8 key (existing job files keep their text).
    EXPECT_FALSE(contains(save_job_toml(load_asset("llama3-70b-h100.toml")), "fp8"));
}

TEST(Fp8Keys, UnknownRecipeNamesTheChoices) {
    const std::string e = load_error("llama3-70b-h100.toml", {"training.fp8=blockwise"});
    ptd_test::expect_mentions(e, {"training.fp8", "delayed", "mxfp8"});
}

TEST(Fp8Keys, A100IsRejectedNamingTheGpu) {
    const std::string e = load_error("gpt3-175b-a100.toml", {"training.fp8=delayed"});
    ptd_test::expect_mentions(e, {"training.fp8", "a100-80gb", "no FP8 tensor cores"});
}

TEST(Fp8Keys, NeedsBf16) {
    for (const char* precision : {"fp32", "fp16"}) {
        const std::string e = load_error("llama3-70b-h100.toml",
                                         {"training.fp8=delayed", std::string("training.precision=") + precision});
        EXPECT_TRUE(contains(e, "training.fp8")) << e;
        EXPECT_TRUE(contains(e, std::string("precision \"") + precision + "\"")) << e;
        EXPECT_TRUE(contains(e, "allowed: precision = \"bf16\"")) << e;
    }
}

TEST(Fp8Keys, Mxfp8NeedsBlackwell) {
    const std::string e = load_error("llama3-70b-h100.toml", {"training.fp8=mxfp8"});
    EXPECT_TRUE(contains(e, "Blackwell")) << e;
    EXPECT_TRUE(load_error("llama3-70b-h100.toml", {"training.fp8=mxfp8", "cluster.gpu=b200"}).empty());
}

TEST(Fp8Keys, DelayedRefusesBf16Layers) {
    const std::string e =
        load_error("llama3-70b-h100.toml", {"training.fp8=delayed", "training.fp8_bf16_first_layers=1"});
    EXPECT_TRUE(contains(e, "training.fp8_bf16_first_layers")) << e;
    EXPECT_TRUE(load_error("llama3-70b-h100.toml", {"training.fp8=current", "training.fp8_bf16_first_layers=1"}).empty());
    const std::string all =
        load_error("llama3-70b-h100.toml", {"training.fp8=current", "training.fp8_bf16_first_layers=40",
                                            "training.fp8_bf16_last_layers=40"});
    EXPECT_TRUE(contains(all, "no layer would run in FP8")) << all;
}

// The FP8 GEMMs are twice as fast at peak, but the attention core, the output layer and the
// quantization passes are not: faster than bf16, short of 2×.
TEST(Fp8Estimate, FasterThanBf16ButShortOfTwice) {
    const Estimate bf16 = estimate_job(load_asset("llama3-70b-h100.toml"));
    for (const char* recipe : {"delayed", "current", "tensorwise", "rowwise"}) {
        const Estimate fp8 = estimate_job(load_asset("llama3-70b-h100.toml", {std::string("training.fp8=") + recipe}));
        EXPECT_LT(fp8.step_s, bf16.step_s) << recipe;
        EXPECT_LT(fp8.time.compute, bf16.time.compute) << recipe;
        EXPECT_GT(fp8.time.compute, 0.5 * bf16.time.compute) << recipe;
    }
    // Current scaling reads each tensor once more for its amax than delayed scaling.
    const Estimate delayed = estimate_job(load_asset("llama3-70b-h100.toml", {"training.fp8=delayed"}));
    const Estimate current = estimate_job(load_asset("llama3-70b-h100.toml", {"training.fp8=current"}));
    EXPECT_GT(current.time.compute, delayed.time.compute);
    // Layers kept in bf16 cost time back.
    const Estimate edges = estimate_job(load_asset("llama3-70b-h100.toml", {"training.fp8=current", "training.fp8_bf16_first_layers=2",
                                                                            "training.fp8_bf16_last_layers=2"}));
    EXPECT_GT(edges.time.compute, current.time.compute);
}

// fp8acc: an FP8 job on Hopper says its backward GEMMs pay the split accumulator, with the
// factor the time model applies; on Blackwell (no fast-accumulation mode) it says nothing.
TEST(Fp8Estimate, HopperJobsNoteTheSplitAccumulator) {
    auto noted = [](const Estimate& e) {
        for (const std::string& n : e.notes)
            if (contains(n, "split accumulator")) return n;
        return std::string();
    };
    const std::string h100 = noted(estimate_job(load_asset("llama3-70b-h100.toml", {"training.fp8=current"})));
    EXPECT_TRUE(contains(h100, "1.10×")) << h100;
    EXPECT_EQ(noted(estimate_job(load_asset("llama3-70b-h100.toml", {"training.fp8=current", "cluster.gpu=b200"}))), "");
    EXPECT_EQ(noted(estimate_job(load_asset("llama3-70b-h100.toml"))), "");
}

// TE caches each FP8 weight twice (rowwise + transposed): 2 bytes per linear weight of each
// FP8 layer on top of bf16's model states; torchao caches nothing.
TEST(Fp8Estimate, WeightCopiesAddTwoBytesPerLinearWeight) {
    const JobSpec base = load_asset("llama3-70b-h100.toml");
    const Estimate bf16 = estimate_job(base);
    const Estimate fp8 = estimate_job(load_asset("llama3-70b-h100.toml", {"training.fp8=current"}));
    ASSERT_EQ(bf16.stages.size(), fp8.stages.size());
    const ModelSpec& m = base.model;
    const double t = 8, h = m.hidden, d = m.head_dim();
    const double linear = h * (m.heads / t) * d * 2 + h * (m.kv_heads / t) * d * 2 + 3.0 * h * m.ffn_hidden / t;
    for (size_t i = 0; i < bf16.stages.size(); ++i) {
        const double layers = bf16.stages[i].layers;
        EXPECT_NEAR(fp8.stages[i].mem.params - bf16.stages[i].mem.params, 2.0 * linear * layers, 1.0) << i;
        EXPECT_EQ(fp8.stages[i].mem.optimizer, bf16.stages[i].mem.optimizer) << i;
        // The FP8 copies of linear inputs TE saves for wgrad are smaller than bf16 ones.
        EXPECT_LT(fp8.stages[i].mem.activations, bf16.stages[i].mem.activations) << i;
    }
    const Estimate titan = estimate_job(load_asset("llama3-70b-h100.toml", {"training.fp8=tensorwise"}));
    EXPECT_EQ(titan.stages[0].mem.params, bf16.stages[0].mem.params);
    EXPECT_EQ(titan.stages[0].mem.activations, bf16.stages[0].mem.activations);
    // Delayed scaling adds the amax history (fp32, per FP8 tensor): larger with a longer window.
    const Estimate d16 = estimate_job(load_asset("llama3-70b-h100.toml", {"training.fp8=delayed", "training.fp8_amax_history_len=16"}));
    const Estimate d1024 = estimate_job(load_asset("llama3-70b-h100.toml", {"training.fp8=delayed"}));
    EXPECT_GT(d1024.stages[0].mem.params, d16.stages[0].mem.params);
}

// fp8one: Blackwell's FP8 GEMMs take non-TN layouts, so TE keeps one per-tensor FP8 copy for
// both usages (Float8TensorStorage update_usage): 1 byte per linear weight for current (and
// delayed) scaling, while MXFP8's directional block scales keep both copies; the cast passes
// write one copy instead of two (current 6 → 5, delayed 4 → 3 bytes per element).
TEST(Fp8Estimate, BlackwellKeepsOnePerTensorCopy) {
    const auto on_b200 = [](std::vector<std::string> sets) {
        sets.push_back("cluster.gpu=b200");
        return estimate_job(load_asset("llama3-70b-h100.toml", sets));
    };
    const Estimate bf16 = on_b200({});
    const Estimate cur = on_b200({"training.fp8=current"});
    const Estimate mx = on_b200({"training.fp8=mxfp8"});
    const ModelSpec& m = load_asset("llama3-70b-h100.toml").model;
    const double t = 8, h = m.hidden, d = m.head_dim();
    const double linear = h * (m.heads / t) * d * 2 + h * (m.kv_heads / t) * d * 2 + 3.0 * h * m.ffn_hidden / t;
    for (size_t i = 0; i < bf16.stages.size(); ++i) {
        const double layers = bf16.stages[i].layers;
        EXPECT_NEAR(cur.stages[i].mem.params - bf16.stages[i].mem.params, 1.0 * linear * layers, 1.0) << i;
        EXPECT_NEAR(mx.stages[i].mem.params - bf16.stages[i].mem.params, 2.0 * (1.0 + 1.0 / 32.0) * linear * layers, 1.0) << i;
    }
    for (auto [recipe, hopper, blackwell] : {std::tuple{Fp8Recipe::delayed, 4.0, 3.0}, std::tuple{Fp8Recipe::current, 6.0, 5.0}}) {
        EXPECT_DOUBLE_EQ(est::fp8_cast_bytes(recipe, 1, GpuGeneration::hopper).in_fwd, hopper);
        EXPECT_DOUBLE_EQ(est::fp8_cast_bytes(recipe, 1, GpuGeneration::blackwell).in_fwd, blackwell);
        EXPECT_DOUBLE_EQ(est::fp8_cast_bytes(recipe, 1, GpuGeneration::blackwell).grad_bwd, blackwell);
        EXPECT_DOUBLE_EQ(est::fp8_cast_bytes(recipe, 1, GpuGeneration::blackwell).weight_fwd, blackwell);
    }
    EXPECT_DOUBLE_EQ(est::fp8_cast_bytes(Fp8Recipe::mxfp8, 1, GpuGeneration::blackwell).in_fwd, 4.0 + 2.0 / 32.0);
    bool noted = false;
    for (const std::string& n : cur.notes) noted = noted || n.find("one copy both GEMM layouts read") != std::string::npos;
    EXPECT_TRUE(noted);
}

TEST(Fp8Export, MegatronFlags) {
    auto out = export_job(load_asset("llama3-70b-h100.toml", {"training.fp8=delayed", "training.fp8_amax_history_len=512"}),
                          ExportFormat::megatron);
    ASSERT_TRUE(out) << out.error().str();
    ptd_test::expect_mentions(out->text, {"--fp8-format hybrid", "--fp8-recipe delayed", "--fp8-amax-history-len 512",
                                          "--fp8-amax-compute-algo max"});

    auto cs = export_job(load_asset("llama3-70b-h100.toml", {"training.fp8=current", "training.fp8_format=e4m3",
                                                             "training.fp8_bf16_first_layers=1", "training.fp8_bf16_last_layers=2"}),
                         ExportFormat::megatron);
    ASSERT_TRUE(cs) << cs.error().str();
    EXPECT_TRUE(contains(cs->text, "--fp8-format e4m3")) << cs->text;
    EXPECT_TRUE(contains(cs->text, "--fp8-recipe tensorwise")) << cs->text;  // Megatron's name for current scaling
    EXPECT_FALSE(contains(cs->text, "--fp8-amax-history-len")) << cs->text;
    ptd_test::expect_mentions(cs->text, {"--first-last-layers-bf16", "--num-layers-at-start-in-bf16 1",
                                         "--num-layers-at-end-in-bf16 2"});

    auto rw = export_job(load_asset("llama3-70b-h100.toml", {"training.fp8=rowwise"}), ExportFormat::megatron);
    ASSERT_FALSE(rw);
    EXPECT_EQ(rw.error().diagnostics.front().key, "training.fp8");

    auto none = export_job(load_asset("llama3-70b-h100.toml"), ExportFormat::megatron);
    ASSERT_TRUE(none);
    EXPECT_FALSE(contains(none->text, "--fp8")) << none->text;
}

TEST(Fp8Export, TorchtitanTomlConverter) {
    auto out = export_job(load_asset("llama3-70b-h100.toml", {"training.fp8=rowwise", "training.fp8_bf16_last_layers=1"}),
                          ExportFormat::torchtitan_toml);
    ASSERT_TRUE(out) << out.error().str();
    ptd_test::expect_mentions(out->text, {"converters = [\"quantize.linear.float8\"]",
                                          "[quantize.linear.float8]\nrecipe_name = \"rowwise\"",
                                          "filter_fqns = [\"output\", \"layers.79.\"]", "[compile]\nenable = true"});

    auto delayed = export_job(load_asset("llama3-70b-h100.toml", {"training.fp8=delayed"}), ExportFormat::torchtitan_toml);
    ASSERT_FALSE(delayed);
    EXPECT_EQ(delayed.error().diagnostics.front().key, "training.fp8");

    auto mx = export_job(load_asset("llama3-70b-h100.toml", {"training.fp8=mxfp8", "cluster.gpu=b200"}), ExportFormat::torchtitan_toml);
    ASSERT_TRUE(mx) << mx.error().str();
    ptd_test::expect_mentions(mx->text, {"converters = [\"quantize.linear.mx\"]",
                                         "[quantize.linear.mx]\nfilter_fqns = [\"output\"]"});
}

// torchtitan's current Python config: the converter in model_registry(..., converters=[...]).
TEST(Fp8Export, TorchtitanPythonConverter) {
    auto rw = export_job(load_asset("llama3-70b-h100.toml", {"training.fp8=rowwise", "training.fp8_bf16_first_layers=1"}),
                         ExportFormat::torchtitan);
    ASSERT_TRUE(rw) << rw.error().str();
    ptd_test::expect_mentions(rw->text, {"from torchtitan.components.quantization import Float8LinearConverter",
                                         "config.compile = CompileConfig(enable=True"});
    EXPECT_TRUE(contains(rw->text, "Float8LinearConverter.Config(recipe_name=\"rowwise\", filter_fqns=[\"lm_head\", \"layers.0.\"]"))
        << rw->text;
    auto tw = export_job(load_asset("llama3-70b-h100.toml", {"training.fp8=tensorwise"}), ExportFormat::torchtitan);
    ASSERT_FALSE(tw);
    EXPECT_EQ(tw.error().diagnostics.front().key, "training.fp8");
    auto mx = export_job(load_asset("llama3-70b-h100.toml", {"training.fp8=mxfp8", "cluster.gpu=b200"}), ExportFormat::torchtitan);
    ASSERT_TRUE(mx) << mx.error().str();
    EXPECT_TRUE(contains(mx->text, "MXFP8LinearConverter.Config(fqns=[\"layers.\"]")) << mx->text;
}

TEST(Fp8Export, DeepSpeedSaysItHasNoFp8) {
    auto out = export_job(load_asset("llama3-70b-h100.toml", {"training.fp8=current"}), ExportFormat::deepspeed);
    ASSERT_TRUE(out) << out.error().str();
    EXPECT_TRUE(any_note(*out, "DeepSpeed has no native FP8"));
}

}  // namespace
