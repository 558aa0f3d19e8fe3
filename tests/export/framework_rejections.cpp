// framework_rejections.cpp — what the frameworks check after parsing, restated (issue 28):
// Megatron-core's TransformerConfig.__post_init__, DeepSpeed's engine sanity checks, torchtitan's
// update_from_config / CompileConfig checks. One test per export the framework's own code used
// to reject or misread; each fails on the code before issue 28.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "ptd/export/export.h"

#include "export/framework_checks.h"
#include "job_test_util.h"
#include "text_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

TEST(Issue28Rejections, MegatronLeavesDistributedSavedActivationsOutWithSequenceParallel) {
    // tp 8 with SP and full recompute: the job may set the key (no effect with SP).
    JobSpec j = load_asset("llama3-70b-h100.toml", {"parallel.recompute=full", "parallel.distribute_saved_activations=true"});
    ASSERT_TRUE(j.parallel.sequence_parallel);
    auto out = export_job(j, ExportFormat::megatron);
    ASSERT_TRUE(out) << out.error().str();
    auto args = megatron_args(out->text);
    EXPECT_EQ(value_of(args, "--distribute-saved-activations"), "<absent>");
    for (const std::string& v : transformer_config_violations(args)) ADD_FAILURE() << v;
    EXPECT_TRUE(any_note(*out, "refuses it with --sequence-parallel"));
    // Without sequence parallelism it is still written (Megatron accepts it there).
    auto no_sp = export_job(load_asset("llama3-70b-h100.toml", {"parallel.recompute=full", "parallel.sequence_parallel=false",
                                                                "parallel.tp_comm_overlap=false",
                                                                "parallel.distribute_saved_activations=true"}),
                            ExportFormat::megatron);
    ASSERT_TRUE(no_sp) << no_sp.error().str();
    EXPECT_EQ(value_of(megatron_args(no_sp->text), "--distribute-saved-activations"), "");
}

TEST(Issue28Rejections, DeepSpeedAllowsSgdUnderZero) {
    auto out = export_job(load_asset("llama3-8b-h100.toml", {"training.optimizer=sgd"}), ExportFormat::deepspeed);
    ASSERT_TRUE(out) << out.error().str();
    auto ds = nlohmann::json::parse(out->text);
    ASSERT_EQ(ds["zero_optimization"]["stage"], 1);
    EXPECT_EQ(ds["zero_allow_untested_optimizer"], true);
    for (const std::string& v : deepspeed_engine_violations(ds)) ADD_FAILURE() << v;
}

TEST(Issue28Rejections, DeepSpeedAccumulatesInFp32WhereThePlanDoes) {
    auto out = export_job(load_asset("llama3-8b-h100.toml"), ExportFormat::deepspeed);
    ASSERT_TRUE(out) << out.error().str();
    auto ds = nlohmann::json::parse(out->text);
    EXPECT_EQ(ds["data_types"]["grad_accum_dtype"], "fp32");  // parallel.grad_reduce_in_fp32 = true (default)
    for (const std::string& v : deepspeed_engine_violations(ds)) ADD_FAILURE() << v;
    auto bf16 = export_job(load_asset("llama3-8b-h100.toml", {"parallel.grad_reduce_in_fp32=false"}), ExportFormat::deepspeed);
    ASSERT_TRUE(bf16);
    EXPECT_EQ(nlohmann::json::parse(bf16->text)["data_types"]["grad_accum_dtype"], "bf16");
    // Without ZeRO DeepSpeed cannot accumulate a bf16 model's gradients in fp32: refused, named.
    auto zero0 = export_job(load_asset("llama3-8b-h100.toml", {"parallel.zero=0", "parallel.distributed_optimizer=false"}),
                            ExportFormat::deepspeed);
    ASSERT_FALSE(zero0);
    EXPECT_EQ(zero0.error().diagnostics.front().key, "parallel.grad_reduce_in_fp32");
    auto zero0_bf16 = export_job(load_asset("llama3-8b-h100.toml", {"parallel.zero=0", "parallel.distributed_optimizer=false",
                                                                    "parallel.grad_reduce_in_fp32=false"}),
                                 ExportFormat::deepspeed);
    ASSERT_TRUE(zero0_bf16) << zero0_bf16.error().str();
    for (const std::string& v : deepspeed_engine_violations(nlohmann::json::parse(zero0_bf16->text))) ADD_FAILURE() << v;
}

// torchtitan main b5bcd76 torchtitan/models/common/decoder.py Decoder.Config.update_from_config:
// "tensor_parallel_degree (8) must divide n_kv_heads (4)".
TEST(Issue28Rejections, TorchtitanRefusesTpNotDividingKvHeads) {
    const JobSpec q = preset_job("qwen3-235b-a22b", "tp = 8\ndp = 128\nep = 8\nexpert_tp = 1\nsequence_parallel = true");
    ASSERT_EQ(q.model.kv_heads, 4);
    for (ExportFormat f : {ExportFormat::torchtitan, ExportFormat::torchtitan_toml}) {
        auto out = export_job(q, f);
        ASSERT_FALSE(out) << to_string(f);
        EXPECT_EQ(out.error().diagnostics.front().key, "parallel.tp");
        expect_mentions(out.error().diagnostics.front().message, {"4 KV heads", "tp dividing 4"});
    }
    // ... so exportability, which the planner reads, marks the layout unexportable for it.
    for (const FormatExportability& x : exportability(q))
        if (x.format == ExportFormat::torchtitan) {
            EXPECT_FALSE(x.ok);
        }
    EXPECT_TRUE(export_job(preset_job("qwen3-235b-a22b", "tp = 4\ndp = 256\nep = 8\nexpert_tp = 1\nsequence_parallel = true"),
                           ExportFormat::torchtitan));
}

// torchtitan main b5bcd76 models/common/decoder.py update_from_config: "Weight tying is not
// supported with Pipeline Parallel".
TEST(Issue28Rejections, TorchtitanRefusesTiedEmbeddingsWithPipelining) {
    const JobSpec gpt = load_asset("gpt3-175b-a100.toml", {"training.precision=bf16"});
    ASSERT_TRUE(gpt.model.tied_embeddings);
    ASSERT_GT(gpt.parallel.pp, 1);
    auto out = export_job(gpt, ExportFormat::torchtitan);
    ASSERT_FALSE(out);
    EXPECT_EQ(out.error().diagnostics.front().key, "parallel.pp");
    expect_mentions(out.error().diagnostics.front().message, {"weight tying"});
}

// torchtitan v0.2.2 torchtitan/models/deepseek_v3/model/args.py update_from_config: "Context
// Parallel only supports SDPA attention" — and its 671B flavor runs attn_type "flex".
TEST(Issue28Rejections, TorchtitanV022RefusesContextParallelForDeepSeekV3) {
    const JobSpec d = preset_job("deepseek-v3", "tp = 1\ncp = 2\ndp = 512\nep = 64", 128);
    JobSpec no_mtp = d;
    no_mtp.model.mtp_layers = 0;  // v0.2.x has no MTP (its own refusal)
    auto toml = export_job(no_mtp, ExportFormat::torchtitan_toml);
    ASSERT_FALSE(toml);
    EXPECT_EQ(toml.error().diagnostics.front().key, "parallel.cp");
    expect_mentions(toml.error().diagnostics.front().message, {"FlexAttention", "SDPA"});
}

// torchtitan main llama3/config_registry.py llama3_405b(): CompileConfig(enable=True,
// enable_async_tensor_parallel=True). The export starts from it, so it must say compile off.
TEST(Issue28Rejections, TorchtitanWritesCompileExplicitly) {
    JobSpec j = load_asset("llama3-70b-h100.toml", {"model.preset=llama3-405b", "cluster.nodes=16", "parallel.tp=8",
                                                    "parallel.pp=2", "parallel.vpp=1", "parallel.dp=8",
                                                    "parallel.tp_comm_overlap=false", "training.global_batch=512"});
    ASSERT_FALSE(j.training.torch_compile);
    const std::string py = export_text(j, ExportFormat::torchtitan);
    EXPECT_TRUE(contains(py, "config = llama3_405b()\n")) << py;
    EXPECT_TRUE(contains(py, "    config.compile = CompileConfig(enable=False)")) << py;
    EXPECT_FALSE(contains(py, "enable_async_tensor_parallel=True"));
    toml::table doc = toml::parse(export_text(j, ExportFormat::torchtitan_toml));
    EXPECT_EQ(doc["compile"]["enable"].value_or(true), false);
    EXPECT_FALSE(doc["parallelism"]["enable_async_tensor_parallel"]);
    // With async TP the compile that async TP needs (CompileConfig.__post_init__) is on.
    j.parallel.async_tp = true;
    j.training.framework = Framework::torchtitan;
    EXPECT_TRUE(contains(export_text(j, ExportFormat::torchtitan), "CompileConfig(enable=True, enable_async_tensor_parallel=True)"));
}

// torchtitan v0.2.2 config/job_config.py: [model] name defaults to "llama3", flavor to
// "debugmodel" (6 layers): a file without them trains that; Mixtral's pipeline split then
// named layers.8 … layers.31, which the debug model does not have.
TEST(Issue28Rejections, TorchtitanTomlRefusesAModelWithoutFlavor) {
    JobSpec mixtral = preset_job("mixtral-8x7b", "tp = 2\npp = 4\ndp = 16\nep = 4\nsequence_parallel = true", 16, 256);
    auto out = export_job(mixtral, ExportFormat::torchtitan_toml);
    ASSERT_FALSE(out);
    EXPECT_EQ(out.error().diagnostics.front().key, "model.preset");
    expect_mentions(out.error().diagnostics.front().message, {"mixtral-8x7b", "debug model"});
}

}  // namespace
