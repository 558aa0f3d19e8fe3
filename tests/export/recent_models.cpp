// recent_models.cpp — the exports of recent open models' keys (head_dim ≠ hidden/heads,
// multi-head latent attention, routed-expert width, shared experts, dense first layers,
// multi-token prediction): the flags Megatron-LM's own DeepSeek-V3 / Qwen3 scripts use, the
// torchtitan model flavors, and what DeepSpeed cannot run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ptd/export/export.h"
#include "ptd/spec/hf_import.h"
#include "ptd/spec/job_spec.h"

#include "job_test_util.h"
#include "text_test_util.h"

namespace {

using namespace ptd_test;

// Megatron-LM's own reading of --moe-layer-freq (arguments.py moe_freq_type / _eval_pattern):
// only digits, commas, [ ] ( ) + *; evaluated as a Python list expression. Restated for the
// form "([0]*a+[1]*b)" plus the checks gpt_layer_specs applies (length = num_layers).
std::vector<int> moe_layer_pattern(std::string v) {
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    EXPECT_EQ(v.find_first_not_of("0123456789,[]()+*"), std::string::npos) << v;
    std::vector<int> out;
    int a = 0, b = 0;
    EXPECT_EQ(std::sscanf(v.c_str(), "([0]*%d+[1]*%d)", &a, &b), 2) << v;
    out.insert(out.end(), (size_t)a, 0);
    out.insert(out.end(), (size_t)b, 1);
    return out;
}

// DeepSeek-V3 on Megatron-LM: every new key becomes the flag Megatron-LM's DeepSeek-V3 scripts
// use (examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh, main d98e8a6), and nothing else new.
TEST(RecentModelsExport, MegatronDeepSeekV3) {
    const std::string parallel =
        "tp = 2\npp = 16\ndp = 32\nep = 32\nsequence_parallel = true\ndistributed_optimizer = true\n"
        "layers_per_stage = [3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 2]";
    const ptd::JobSpec job = preset_job("deepseek-v3", parallel);
    const auto args = megatron_args(export_text(job, ptd::ExportFormat::megatron));
    expect_flags(args, {{"--kv-channels", "128"}, {"--multi-latent-attention", ""}, {"--q-lora-rank", "1536"},
                        {"--kv-lora-rank", "512"}, {"--qk-head-dim", "128"}, {"--qk-pos-emb-head-dim", "64"},
                        {"--v-head-dim", "128"}, {"--qk-layernorm", ""}, {"--mtp-num-layers", "1"},
                        {"--num-experts", "256"}, {"--moe-ffn-hidden-size", "2048"},
                        {"--moe-shared-expert-intermediate-size", "2048"}, {"--ffn-hidden-size", "18432"}});
    // validate_args: MLA and grouped-query attention exclude each other.
    EXPECT_EQ(value_of(args, "--group-query-attention"), "<absent>");
    const std::vector<int> pattern = moe_layer_pattern(value_of(args, "--moe-layer-freq"));
    ASSERT_EQ(pattern.size(), 61u);
    EXPECT_EQ(std::count(pattern.begin(), pattern.end(), 0), 3);
    EXPECT_EQ(pattern[2], 0);
    EXPECT_EQ(pattern[3], 1);

    // The flags beyond a Llama 3 70B export of the same layout are exactly the new ones (all
    // checked against arguments.py / TransformerConfig: see the comments in export.cpp).
    const std::set<std::string> kNew = {"--kv-channels", "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank",
                                        "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim", "--qk-layernorm",
                                        "--mtp-num-layers", "--moe-ffn-hidden-size",
                                        "--moe-shared-expert-intermediate-size", "--moe-layer-freq",
                                        // MoE flags a dense model does not get
                                        "--num-experts", "--moe-router-topk", "--moe-token-dispatcher-type",
                                        "--expert-model-parallel-size", "--expert-tensor-parallel-size",
                                        "--moe-router-num-groups", "--moe-router-group-topk"};
    std::set<std::string> dense;
    for (const auto& [f, v] : megatron_args(export_text(
             preset_job("llama3-70b", "tp = 2\npp = 16\ndp = 32\nsequence_parallel = true\ndistributed_optimizer = true\n"
                                      "layers_per_stage = [3, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 7]"),
             ptd::ExportFormat::megatron)))
        dense.insert(f);
    for (const auto& [f, v] : args) {
        if (!dense.count(f)) {
            EXPECT_TRUE(kNew.count(f)) << f;
        }
    }

    // A Llama job gets none of them: exports of the classic layout are unchanged.
    for (const char* f : {"--kv-channels", "--multi-latent-attention", "--mtp-num-layers", "--moe-layer-freq",
                          "--moe-ffn-hidden-size"})
        EXPECT_FALSE(dense.count(f)) << f;
}

// With --pipeline-model-parallel-layout, Megatron-LM counts the MTP modules as "m" in the last
// chunk, after every decoder layer (pipeline_parallel_layer_layout.py validate_layer_layout).
TEST(RecentModelsExport, MegatronLayoutPlacesMtp) {
    const ptd::JobSpec job = preset_job("deepseek-v3",
                                        "tp = 1\npp = 8\nvpp = 2\ndp = 32\nep = 32\ndistributed_optimizer = true\n"
                                        "layers_per_stage = [3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 2]",
                                        32, 2048);
    const auto args = megatron_args(export_text(job, ptd::ExportFormat::megatron));
    std::string layout = value_of(args, "--pipeline-model-parallel-layout");
    ASSERT_NE(layout, "<absent>");
    layout = layout.substr(1, layout.size() - 2);
    EXPECT_EQ(layout, "Et*3|(t*4|)*14t*2mL");  // the last chunk: its layers, then MTP and the loss
    EXPECT_EQ(std::count(layout.begin(), layout.end(), 'm'), std::stoi(value_of(args, "--mtp-num-layers")));
    EXPECT_EQ(value_of(args, "--num-layers-per-virtual-pipeline-stage"), "<absent>");
}

// Qwen3: head_dim → --kv-channels; Qwen3-MoE's experts' own width.
TEST(RecentModelsExport, MegatronQwen3) {
    auto args = megatron_args(export_text(preset_job("qwen3-32b", "tp = 8\ndp = 128\nsequence_parallel = true"),
                                           ptd::ExportFormat::megatron));
    EXPECT_EQ(value_of(args, "--kv-channels"), "128");
    EXPECT_EQ(value_of(args, "--num-query-groups"), "8");
    auto q32 = ptd::export_job(preset_job("qwen3-32b", "tp = 8\ndp = 128\nsequence_parallel = true"),
                               ptd::ExportFormat::megatron);
    ASSERT_TRUE(q32);
    EXPECT_EQ(value_of(args, "--qk-layernorm"), "");  // the preset's qk_layernorm (Qwen3's q_norm / k_norm)
    EXPECT_EQ(value_of(args, "--multi-latent-attention"), "<absent>");
    args = megatron_args(export_text(preset_job("qwen3-30b-a3b", "tp = 1\ndp = 1024\nep = 8"), ptd::ExportFormat::megatron));
    EXPECT_EQ(value_of(args, "--moe-ffn-hidden-size"), "768");
    EXPECT_EQ(value_of(args, "--ffn-hidden-size"), "6144");
    EXPECT_EQ(value_of(args, "--moe-layer-freq"), "<absent>");  // every layer sparse: Megatron's default 1
    EXPECT_EQ(value_of(args, "--moe-shared-expert-intermediate-size"), "<absent>");
    // Qwen3 8B's head_dim equals hidden/heads: nothing to write.
    args = megatron_args(export_text(preset_job("qwen3-8b", "tp = 1\ndp = 1024"), ptd::ExportFormat::megatron));
    EXPECT_EQ(value_of(args, "--kv-channels"), "<absent>");
}

// mbrecipe: a Megatron-Bridge MoE job exports to Megatron-Bridge — the fused permutation and router
// (the stack's defaults from 2025 on) and the router's FP8 padding are TransformerConfig fields —
// and its expert-parallel overlap survives CommOverlapConfig.setup, which copies the comm-overlap
// config's own overlap_moe_expert_parallel_comm (False unless given) onto the model.
TEST(RecentModelsExport, NemoWritesAnMoeJobsFusionsAndKeepsItsEpOverlap) {
    auto moe_job = [](const std::string& parallel, const std::string& training) {
        return job_from_text(job_text({.preset = "qwen3-235b-a22b",
                                       .nodes = 32,
                                       .parallel = parallel,
                                       .training = "framework = \"nemo\"\nmicro_batch = 1\nglobal_batch = 2048\n" + training}));
    };
    const std::string fused = export_text(
        moe_job("tp = 1\npp = 8\nvpp = 2\nep = 32\naccount_for_embedding_in_pipeline_split = true\n"
                "account_for_loss_in_pipeline_split = true\nmoe_router_padding_for_fp8 = true\n",
                "fp8 = \"current\"\n"),
        ptd::ExportFormat::nemo);
    expect_mentions(fused, {"cfg.model.moe_permute_fusion = True", "cfg.model.moe_router_fusion = True",
                            "cfg.model.moe_router_padding_for_fp8 = True"});
    const std::string both = export_text(
        moe_job("tp = 2\npp = 8\nvpp = 4\nep = 32\nexpert_tp = 1\nsequence_parallel = true\ntp_comm_overlap = true\n"
                "moe_a2a_overlap = true\naccount_for_embedding_in_pipeline_split = true\n"
                "account_for_loss_in_pipeline_split = true\n",
                ""),
        ptd::ExportFormat::nemo);
    expect_mentions(both, {"cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True, overlap_moe_expert_parallel_comm=True)",
                           "cfg.model.overlap_moe_expert_parallel_comm = True"});
    expect_no_mention(both, {"perf_recipes"});
    // A job that names a performance recipe says which, and where NVIDIA's own run of it lives.
    const std::string named = export_text(
        moe_job("tp = 2\npp = 8\nvpp = 4\nep = 32\nexpert_tp = 1\nsequence_parallel = true\n"
                "account_for_embedding_in_pipeline_split = true\naccount_for_loss_in_pipeline_split = true\n",
                "recipe = \"qwen3_235b_a22b_pretrain_256gpu_h100_bf16\"\n"),
        ptd::ExportFormat::nemo);
    expect_mentions(named, {"Megatron-Bridge's performance recipe qwen3_235b_a22b_pretrain_256gpu_h100_bf16,",
                            "from megatron.bridge.perf_recipes.qwen.h100.qwen3_moe import "
                            "qwen3_235b_a22b_pretrain_256gpu_h100_bf16_config",
                            "cfg.model.overlap_moe_expert_parallel_comm = True"});
}

// torchtitan has Qwen3 and DeepSeek-V3 models (torchtitan/models/qwen3, deepseek_v3, main
// b5bcd76; v0.2.2 for the TOML form): the exact presets map to their flavors.
TEST(RecentModelsExport, TorchtitanFlavors) {
    // etp: torchtitan main splits the routed experts over ep only (no expert TP, #3167), so the
    // jobs exported to it with tp > 1 and ep > 1 say expert_tp = 1.
    const ptd::JobSpec ds = preset_job("deepseek-v3", "tp = 8\ndp = 128\nep = 64\nexpert_tp = 1\nsequence_parallel = true");
    const std::string py = export_text(ds, ptd::ExportFormat::torchtitan);
    ptd_test::expect_mentions(py, {"from torchtitan.models.deepseek_v3 import MTPLoss, model_registry",
                                   "from torchtitan.models.deepseek_v3.config_registry import deepseek_v3_671b",
                                   "    config = deepseek_v3_671b()",
                                   "config.model_spec = model_registry(\"671B\", num_mtp_layers=1)",
                                   "config.loss = MTPLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec))",
                                   "expert_parallel_degree=64"});

    // MTP: torchtitan rejects pp / cp with it; v0.2.x has none.
    auto r = ptd::export_job(preset_job("deepseek-v3", "tp = 8\npp = 2\ndp = 64\nep = 64\nsequence_parallel = true\n"
                                                     "layers_per_stage = [30, 31]"),
                             ptd::ExportFormat::torchtitan);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().diagnostics.at(0).key, "parallel.pp");
    r = ptd::export_job(ds, ptd::ExportFormat::torchtitan_toml);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().diagnostics.at(0).key, "model.mtp_layers");
    EXPECT_TRUE(contains(r.error().str(), "allowed for --format torchtitan-toml: 0")) << r.error().str();

    // Without MTP the same preset is still DeepSeek-V3 671B, in both forms.
    const ptd::JobSpec no_mtp = loaded(ptd::load_job_text(
        "[model]\npreset = \"deepseek-v3\"\nmtp_layers = 0\n[cluster]\ngpu = \"h100-sxm\"\nnodes = 128\ngpus_per_node = 8\n"
        "[parallel]\ntp = 8\npp = 2\ndp = 64\nep = 64\nexpert_tp = 1\nsequence_parallel = true\nlayers_per_stage = [30, 31]\n"
        "[training]\nmicro_batch = 1\nglobal_batch = 64\n",
        "job.toml", presets()));
    const std::string toml = export_text(no_mtp, ptd::ExportFormat::torchtitan_toml);
    EXPECT_TRUE(contains(toml, "name = \"deepseek_v3\"\nflavor = \"671B\"")) << toml;
    EXPECT_TRUE(contains(export_text(no_mtp, ptd::ExportFormat::torchtitan), "model_registry(\"671B\")"));

    // Qwen3: its own baseline where torchtitan has one, else the debug model with the loss's
    // vocabulary set for the flavor.
    const std::string q32 = export_text(preset_job("qwen3-32b", "tp = 8\ndp = 128\nsequence_parallel = true"),
                                        ptd::ExportFormat::torchtitan);
    ptd_test::expect_mentions(q32, {"from torchtitan.models.qwen3.config_registry import qwen3_32b",
                                    "config.model_spec = model_registry(\"32B\")"});
    EXPECT_FALSE(contains(q32, "config.loss")) << q32;
    const std::string q235 = export_text(preset_job("qwen3-235b-a22b", "tp = 2\ndp = 512\nep = 16\nexpert_tp = 1\nsequence_parallel = true"),
                                         ptd::ExportFormat::torchtitan);
    EXPECT_TRUE(contains(q235, "    config = qwen3_debugmodel()")) << q235;
    {
        auto r235 = ptd::export_job(preset_job("qwen3-235b-a22b", "tp = 2\ndp = 512\nep = 16\nexpert_tp = 1\nsequence_parallel = true"),
                                    ptd::ExportFormat::torchtitan);
        ASSERT_TRUE(r235);
        EXPECT_TRUE(any_note(*r235, "set config.hf_assets_path to the model's tokenizer"));
    }
    EXPECT_TRUE(contains(q235, "config.model_spec = model_registry(\"235B-A22B\")")) << q235;
    EXPECT_TRUE(contains(q235, "config.loss = ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size="
                               "decoder_vocab_size(config.model_spec)))")) << q235;
    EXPECT_TRUE(contains(export_text(preset_job("qwen3-30b-a3b", "tp = 1\ndp = 1024\nep = 8"), ptd::ExportFormat::torchtitan_toml),
                         "name = \"qwen3\"\nflavor = \"30B-A3B\""));

    // A customised model has no flavor; the note names the family to register it in.
    const ptd::JobSpec custom = loaded(ptd::load_job_text(
        "[model]\npreset = \"qwen3-32b\"\nlayers = 32\n[cluster]\ngpu = \"h100-sxm\"\nnodes = 1\ngpus_per_node = 8\n"
        "[parallel]\ntp = 8\nsequence_parallel = true\n[training]\nmicro_batch = 1\nglobal_batch = 8\n",
        "job.toml", presets()));
    auto c = ptd::export_job(custom, ptd::ExportFormat::torchtitan);
    ASSERT_TRUE(c) << c.error().str();
    ptd_test::expect_mentions(c->text, {"from torchtitan.models.qwen3.config_registry import qwen3_debugmodel",
                                        "config.model_spec = _model_spec()"});
    EXPECT_TRUE(any_note(*c, "register a flavor in torchtitan/models/qwen3")) << c->notes.front();
}

// DeepSpeed: no model code it trains has MTP; MLA only in transformers' DeepseekV3ForCausalLM,
// without tensor or pipeline parallelism.
TEST(RecentModelsExport, DeepSpeedRefusesWhatNoModelCodeHas) {
    auto r = ptd::export_job(preset_job("deepseek-v3", "tp = 8\ndp = 128\nep = 64\nsequence_parallel = true"),
                             ptd::ExportFormat::deepspeed);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().diagnostics.at(0).key, "model.mtp_layers");
    EXPECT_TRUE(contains(r.error().str(), "allowed for --format deepspeed: 0")) << r.error().str();

    const std::string no_mtp = "[model]\npreset = \"deepseek-v3\"\nmtp_layers = 0\n[cluster]\ngpu = \"h100-sxm\"\n"
                               "nodes = 128\ngpus_per_node = 8\n[parallel]\n";
    r = ptd::export_job(loaded(ptd::load_job_text(no_mtp + "tp = 8\ndp = 128\nep = 64\nsequence_parallel = true\n"
                                                  "[training]\nmicro_batch = 1\nglobal_batch = 8192\n",
                                                  "job.toml", presets())),
                        ptd::ExportFormat::deepspeed);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().diagnostics.at(0).key, "model.kv_lora_rank");
    EXPECT_TRUE(contains(r.error().str(), "tp 8 × pp 1")) << r.error().str();

    auto ok = ptd::export_job(loaded(ptd::load_job_text(no_mtp + "dp = 1024\nep = 64\nzero = 3\n"
                                                        "[training]\nmicro_batch = 1\nglobal_batch = 8192\n",
                                                        "job.toml", presets())),
                              ptd::ExportFormat::deepspeed);
    ASSERT_TRUE(ok) << ok.error().str();
    EXPECT_TRUE(any_note(*ok, "DeepseekV3ForCausalLM")) << ok->notes.front();
}

}  // namespace
