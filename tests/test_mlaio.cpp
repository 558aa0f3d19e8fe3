// test_mlaio.cpp — the model keys of recent open models (head_dim ≠ hidden/heads, multi-head
// latent attention, routed-expert width, shared experts, dense first layers, multi-token
// prediction) at PTD's edges: the Hugging Face importer (real config.json files of DeepSeek-V3,
// Qwen3 8B / 32B, Qwen3-30B-A3B and Qwen3-235B-A22B under tests/data/hf/), the model presets,
// the Megatron-LM / torchtitan / DeepSpeed exports, and the CLI's model description.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ptd/spec/hf_import.h"
#include "ptd/spec/job_spec.h"
#include "ptd/model/model_stats.h"

#include "job_test_util.h"
#include "layout_view.h"

namespace {

using namespace ptd_test;

std::string hf_path(const std::string& name) { return std::string(PTD_SOURCE_DIR) + "/tests/data/hf/" + name; }

ptd::HfImport import_ok(const std::string& name) {
    auto r = ptd::import_hf_config_file(hf_path(name));
    EXPECT_TRUE(r) << name << ":\n" << (r ? "" : r.error().str());
    return r ? *r : ptd::HfImport{};
}

std::string notes_of(const ptd::HfImport& h) {
    std::string s;
    for (const std::string& n : h.notes) s += n + "\n";
    return s;
}

bool has_error_key(const ptd::Error& e, const std::string& key) {
    return std::any_of(e.diagnostics.begin(), e.diagnostics.end(), [&](const ptd::Diagnostic& d) { return d.key == key; });
}

// A config.json text from tests/data/hf/ with one field's value replaced (the field must exist).
std::string hf_text_with(const std::string& name, const std::string& key, const std::string& value) {
    std::ifstream in(hf_path(name));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string tag = "\"" + key + "\": ";
    const size_t at = text.find(tag);
    EXPECT_NE(at, std::string::npos) << key;
    if (at == std::string::npos) return text;
    size_t start = at + tag.size(), end = start;
    int depth = 0;
    for (; end < text.size(); ++end) {
        const char c = text[end];
        if (c == '[' || c == '{') ++depth;
        else if (c == ']' || c == '}') { if (depth-- == 0) break; }
        else if (c == ',' && depth == 0) break;
        if (depth == 0 && (c == ']' || c == '}')) { ++end; break; }
    }
    return text.replace(start, end - start, value);
}

ptd::Error import_err(const std::string& text) {
    auto r = ptd::import_hf_config_text(text, "config.json");
    EXPECT_FALSE(r) << "expected an error";
    return r ? ptd::Error{} : r.error();
}

// ---- Hugging Face import ----------------------------------------------------------------

// DeepSeek-V3's config.json (deepseek-ai/DeepSeek-V3): MLA, 256 routed experts of 2048 with
// one shared expert, 3 dense layers first, one MTP module, pre-trained at 4096 tokens.
TEST(MlaioImport, DeepSeekV3) {
    const ptd::HfImport h = import_ok("deepseek-v3.json");
    const ptd::ModelSpec& m = h.model;
    EXPECT_EQ(m.arch, ptd::Arch::llama);
    EXPECT_EQ(m.layers, 61);
    EXPECT_EQ(m.hidden, 7168);
    EXPECT_EQ(m.heads, 128);
    EXPECT_EQ(m.kv_heads, 128);
    EXPECT_EQ(m.ffn_hidden, 18432);
    EXPECT_EQ(m.vocab, 129280);
    EXPECT_EQ(m.seq_len, 4096);  // rope_scaling.original_max_position_embeddings
    EXPECT_TRUE(m.mla());
    EXPECT_EQ(m.q_lora_rank, 1536);
    EXPECT_EQ(m.kv_lora_rank, 512);
    EXPECT_EQ(m.head_dim_given, 128);  // qk_nope_head_dim
    EXPECT_EQ(m.head_dim(), 128);
    EXPECT_EQ(m.qk_rope_head_dim, 64);
    EXPECT_EQ(m.v_head_dim, 128);
    EXPECT_EQ(m.experts, 256);
    EXPECT_EQ(m.top_k, 8);
    EXPECT_EQ(m.moe_ffn_hidden, 2048);
    EXPECT_EQ(m.expert_ffn_hidden(), 2048);
    EXPECT_EQ(m.shared_expert_ffn_hidden, 2048);  // 1 × 2048
    EXPECT_EQ(m.first_dense_layers, 3);
    EXPECT_EQ(m.mtp_layers, 1);
    EXPECT_FALSE(m.tied_embeddings);
    EXPECT_FALSE(m.qkv_bias);
    const std::string notes = notes_of(h);
    EXPECT_EQ(m.moe_router_num_groups, 8);  // n_group / topk_group: group-limited routing (deepep)
    EXPECT_EQ(m.moe_router_group_topk, 4);
    EXPECT_TRUE(contains(notes, "routing and load-balancing details")) << notes;
    EXPECT_TRUE(contains(notes, "latents (q_lora_rank + kv_lora_rank parameters per layer) are left out")) << notes;
    EXPECT_FALSE(contains(notes, "not understood")) << notes;
    // The imported model is one a job accepts.
    const ptd::JobSpec job = job_from_text(R"(
[model]
hf_config = ")" + hf_path("deepseek-v3.json") + R"("
[cluster]
gpu = "h100-sxm"
nodes = 128
gpus_per_node = 8
[parallel]
tp = 8
dp = 128
ep = 64
sequence_parallel = true
[training]
micro_batch = 1
global_batch = 8192
)");
    EXPECT_EQ(job.model.kv_lora_rank, 512);
    EXPECT_EQ(job.model.first_dense_layers, 3);
}

// Qwen3 dense: head_dim 128 equals hidden/heads for 8B (nothing to record) but not for 32B
// (5120 / 64 = 80), which the importer used to refuse.
TEST(MlaioImport, Qwen3Dense) {
    const ptd::HfImport q8 = import_ok("qwen3-8b.json");
    EXPECT_EQ(q8.model.layers, 36);
    EXPECT_EQ(q8.model.hidden, 4096);
    EXPECT_EQ(q8.model.heads, 32);
    EXPECT_EQ(q8.model.kv_heads, 8);
    EXPECT_EQ(q8.model.ffn_hidden, 12288);
    EXPECT_EQ(q8.model.vocab, 151936);
    EXPECT_EQ(q8.model.head_dim_given, 0);
    EXPECT_EQ(q8.model.head_dim(), 128);
    EXPECT_FALSE(q8.model.qkv_bias);  // Qwen3 dropped Qwen2's q/k/v biases
    EXPECT_EQ(q8.model.rope_theta, 1e6);
    EXPECT_TRUE(q8.model.qk_layernorm);  // q_norm / k_norm: model.qk_layernorm

    const ptd::HfImport q32 = import_ok("qwen3-32b.json");
    EXPECT_EQ(q32.model.layers, 64);
    EXPECT_EQ(q32.model.hidden, 5120);
    EXPECT_EQ(q32.model.heads, 64);
    EXPECT_EQ(q32.model.kv_heads, 8);
    EXPECT_EQ(q32.model.ffn_hidden, 25600);
    EXPECT_EQ(q32.model.head_dim_given, 128);
    EXPECT_EQ(q32.model.head_dim(), 128);
    EXPECT_FALSE(contains(notes_of(q32), "not understood")) << notes_of(q32);

    // The same head_dim under model_type llama (Llama 3.2 3B has one, equal to hidden/heads) is
    // modelled too, no longer an error.
    auto llama = ptd::import_hf_config_text(hf_text_with("qwen3-32b.json", "model_type", "\"llama\""), "cfg.json");
    ASSERT_TRUE(llama) << llama.error().str();
    EXPECT_EQ(llama->model.head_dim_given, 128);
}

// Qwen3-MoE: every layer sparse (decoder_sparse_step 1, mlp_only_layers []), 128 experts of
// moe_intermediate_size, top-8, no shared expert.
TEST(MlaioImport, Qwen3Moe) {
    const ptd::HfImport a3 = import_ok("qwen3-30b-a3b.json");
    EXPECT_EQ(a3.model.layers, 48);
    EXPECT_EQ(a3.model.hidden, 2048);
    EXPECT_EQ(a3.model.heads, 32);
    EXPECT_EQ(a3.model.kv_heads, 4);
    EXPECT_EQ(a3.model.head_dim_given, 128);
    EXPECT_EQ(a3.model.experts, 128);
    EXPECT_EQ(a3.model.top_k, 8);
    EXPECT_EQ(a3.model.moe_ffn_hidden, 768);
    EXPECT_EQ(a3.model.shared_expert_ffn_hidden, 0);
    EXPECT_EQ(a3.model.first_dense_layers, 0);
    EXPECT_FALSE(a3.model.mla());
    EXPECT_TRUE(contains(notes_of(a3), "norm_topk_prob = true is ignored")) << notes_of(a3);
    EXPECT_FALSE(contains(notes_of(a3), "not understood")) << notes_of(a3);

    const ptd::HfImport a22 = import_ok("qwen3-235b-a22b.json");
    EXPECT_EQ(a22.model.layers, 94);
    EXPECT_EQ(a22.model.hidden, 4096);
    EXPECT_EQ(a22.model.heads, 64);
    EXPECT_EQ(a22.model.kv_heads, 4);
    EXPECT_EQ(a22.model.head_dim_given, 128);
    EXPECT_EQ(a22.model.moe_ffn_hidden, 1536);
    EXPECT_EQ(a22.model.experts, 128);
}

// What PTD still cannot place is refused with the field, its value and what is allowed.
TEST(MlaioImport, LayerPatternsPtdCannotPlaceAreErrors) {
    auto e = import_err(hf_text_with("qwen3-30b-a3b.json", "decoder_sparse_step", "2"));
    ASSERT_TRUE(has_error_key(e, "decoder_sparse_step")) << e.str();
    EXPECT_TRUE(contains(e.str(), "got 2")) << e.str();
    EXPECT_TRUE(contains(e.str(), "allowed: 1")) << e.str();
    EXPECT_GT(e.diagnostics.at(0).where.line, 0);

    e = import_err(hf_text_with("qwen3-30b-a3b.json", "mlp_only_layers", "[0, 47]"));
    ASSERT_TRUE(has_error_key(e, "mlp_only_layers")) << e.str();
    EXPECT_TRUE(contains(e.str(), "got [0,47]")) << e.str();

    e = import_err(hf_text_with("deepseek-v3.json", "moe_layer_freq", "2"));
    ASSERT_TRUE(has_error_key(e, "moe_layer_freq")) << e.str();

    e = import_err(hf_text_with("deepseek-v3.json", "first_k_dense_replace", "61"));
    ASSERT_TRUE(has_error_key(e, "first_k_dense_replace")) << e.str();
    EXPECT_TRUE(contains(e.str(), "allowed: 0 .. 60")) << e.str();

    e = import_err(hf_text_with("deepseek-v3.json", "attention_bias", "true"));
    ASSERT_TRUE(has_error_key(e, "attention_bias")) << e.str();

    e = import_err(hf_text_with("deepseek-v3.json", "kv_lora_rank", "null"));
    ASSERT_TRUE(has_error_key(e, "kv_lora_rank")) << e.str();

    e = import_err(hf_text_with("deepseek-v3.json", "num_experts_per_tok", "300"));
    ASSERT_TRUE(has_error_key(e, "num_experts_per_tok")) << e.str();

    // DeepSeek-V2 has no multi-token prediction: the field is another family's there.
    e = import_err(hf_text_with("deepseek-v3.json", "model_type", "\"deepseek_v2\""));
    ASSERT_TRUE(has_error_key(e, "num_nextn_predict_layers")) << e.str();
    ASSERT_EQ(e.diagnostics.size(), 1u) << e.str();

    // Sliding-window layers of another family stay errors (Gemma-style layer_types on qwen3).
    e = import_err(hf_text_with("qwen3-8b.json", "max_window_layers",
                                "36, \"layer_types\": [\"sliding_attention\", \"full_attention\"]"));
    ASSERT_TRUE(has_error_key(e, "layer_types")) << e.str();
}

// DeepSeek-V2-Lite projects queries directly (q_lora_rank null) and has two shared experts.
TEST(MlaioImport, DeepSeekV2LiteShapes) {
    std::string text = hf_text_with("deepseek-v3.json", "model_type", "\"deepseek_v2\"");
    const std::string lite = R"("q_lora_rank": null)";
    text.replace(text.find("\"q_lora_rank\": 1536"), std::string("\"q_lora_rank\": 1536").size(), lite);
    text.replace(text.find("\"n_shared_experts\": 1"), std::string("\"n_shared_experts\": 1").size(), "\"n_shared_experts\": 2");
    text.replace(text.find("\"num_nextn_predict_layers\": 1"), std::string("\"num_nextn_predict_layers\": 1").size(),
                 "\"num_nextn_predict_layers\": 0");
    auto r = ptd::import_hf_config_text(text, "v2.json");
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_EQ(r->model.q_lora_rank, 0);
    EXPECT_EQ(r->model.kv_lora_rank, 512);
    EXPECT_EQ(r->model.shared_expert_ffn_hidden, 4096);
    EXPECT_EQ(r->model.mtp_layers, 0);
}

}  // namespace

namespace {

// ---- presets ---------------------------------------------------------------------------

// Each new preset has the shape its Hugging Face config.json imports to (the preset keeps
// the pre-training context, 4096, where the config gives the extended one).
TEST(MlaioPresets, MatchTheirHuggingFaceConfigs) {
    const std::pair<const char*, const char*> pairs[] = {{"deepseek-v3", "deepseek-v3.json"},
                                                         {"qwen3-8b", "qwen3-8b.json"},
                                                         {"qwen3-32b", "qwen3-32b.json"},
                                                         {"qwen3-30b-a3b", "qwen3-30b-a3b.json"},
                                                         {"qwen3-235b-a22b", "qwen3-235b-a22b.json"}};
    for (const auto& [preset, file] : pairs) {
        SCOPED_TRACE(preset);
        const ptd::ModelSpec* p = presets().find_model(preset);
        ASSERT_NE(p, nullptr);
        const ptd::ModelSpec h = import_ok(file).model;
        EXPECT_EQ(p->seq_len, 4096);
        EXPECT_EQ(p->arch, h.arch);
        EXPECT_EQ(p->layers, h.layers);
        EXPECT_EQ(p->hidden, h.hidden);
        EXPECT_EQ(p->heads, h.heads);
        EXPECT_EQ(p->kv_heads, h.kv_heads);
        EXPECT_EQ(p->ffn_hidden, h.ffn_hidden);
        EXPECT_EQ(p->vocab, h.vocab);
        EXPECT_EQ(p->tied_embeddings, h.tied_embeddings);
        EXPECT_EQ(p->qkv_bias, h.qkv_bias);
        EXPECT_EQ(p->rope_theta, h.rope_theta);
        EXPECT_EQ(p->norm_eps, h.norm_eps);
        EXPECT_EQ(p->experts, h.experts);
        EXPECT_EQ(p->top_k, h.top_k);
        EXPECT_EQ(p->head_dim_given, h.head_dim_given);
        EXPECT_EQ(p->moe_ffn_hidden, h.moe_ffn_hidden);
        EXPECT_EQ(p->shared_expert_ffn_hidden, h.shared_expert_ffn_hidden);
        EXPECT_EQ(p->first_dense_layers, h.first_dense_layers);
        EXPECT_EQ(p->q_lora_rank, h.q_lora_rank);
        EXPECT_EQ(p->kv_lora_rank, h.kv_lora_rank);
        EXPECT_EQ(p->qk_rope_head_dim, h.qk_rope_head_dim);
        EXPECT_EQ(p->v_head_dim, h.v_head_dim);
        EXPECT_EQ(p->mtp_layers, h.mtp_layers);
    }
    // Qwen3 8B uses none of the new keys, so today's count already holds: 8.2B published.
    EXPECT_NEAR(ptd::count_parameters(*presets().find_model("qwen3-8b")).total / 1e9, 8.19, 0.01);
}

}  // namespace

namespace {

// ---- exports ---------------------------------------------------------------------------

// "--flag value" pairs of a Megatron-LM export.
std::vector<std::pair<std::string, std::string>> megatron_pairs(const std::string& text) {
    std::vector<std::pair<std::string, std::string>> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        if (line.ends_with(" \\")) line.resize(line.size() - 2);
        const size_t sp = line.find(' ');
        out.emplace_back(line.substr(0, sp), sp == std::string::npos ? "" : line.substr(sp + 1));
    }
    return out;
}

std::string flag(const std::vector<std::pair<std::string, std::string>>& args, const std::string& name) {
    for (const auto& [f, v] : args)
        if (f == name) return v;
    return "<absent>";
}

std::string export_text(const ptd::JobSpec& job, ptd::ExportFormat f, const std::vector<std::string>& sets = {}) {
    auto r = ptd::export_job(job, f);
    EXPECT_TRUE(r) << (r ? "" : r.error().str());
    return r ? r->text : std::string();
}

// A job of `preset` on 128 nodes of 8 H100 with the [parallel] lines given.
ptd::JobSpec preset_job(const std::string& preset, const std::string& parallel, int nodes = 128, int global_batch = 8192) {
    return job_from_text("[model]\npreset = \"" + preset + "\"\n[cluster]\ngpu = \"h100-sxm\"\nnodes = " +
                         std::to_string(nodes) + "\ngpus_per_node = 8\n[parallel]\n" + parallel +
                         "\n[training]\nmicro_batch = 1\nglobal_batch = " + std::to_string(global_batch) + "\n");
}

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
TEST(MlaioExport, MegatronDeepSeekV3) {
    const std::string parallel =
        "tp = 2\npp = 16\ndp = 32\nep = 32\nsequence_parallel = true\ndistributed_optimizer = true\n"
        "layers_per_stage = [3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 2]";
    const ptd::JobSpec job = preset_job("deepseek-v3", parallel);
    const auto args = megatron_pairs(export_text(job, ptd::ExportFormat::megatron));
    EXPECT_EQ(flag(args, "--kv-channels"), "128");
    EXPECT_EQ(flag(args, "--multi-latent-attention"), "");
    EXPECT_EQ(flag(args, "--q-lora-rank"), "1536");
    EXPECT_EQ(flag(args, "--kv-lora-rank"), "512");
    EXPECT_EQ(flag(args, "--qk-head-dim"), "128");
    EXPECT_EQ(flag(args, "--qk-pos-emb-head-dim"), "64");
    EXPECT_EQ(flag(args, "--v-head-dim"), "128");
    EXPECT_EQ(flag(args, "--qk-layernorm"), "");
    EXPECT_EQ(flag(args, "--mtp-num-layers"), "1");
    EXPECT_EQ(flag(args, "--num-experts"), "256");
    EXPECT_EQ(flag(args, "--moe-ffn-hidden-size"), "2048");
    EXPECT_EQ(flag(args, "--moe-shared-expert-intermediate-size"), "2048");
    EXPECT_EQ(flag(args, "--ffn-hidden-size"), "18432");
    // validate_args: MLA and grouped-query attention exclude each other.
    EXPECT_EQ(flag(args, "--group-query-attention"), "<absent>");
    const std::vector<int> pattern = moe_layer_pattern(flag(args, "--moe-layer-freq"));
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
    for (const auto& [f, v] : megatron_pairs(export_text(
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
TEST(MlaioExport, MegatronLayoutPlacesMtp) {
    const ptd::JobSpec job = preset_job("deepseek-v3",
                                        "tp = 1\npp = 8\nvpp = 2\ndp = 32\nep = 32\ndistributed_optimizer = true\n"
                                        "layers_per_stage = [3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 2]",
                                        32, 2048);
    const auto args = megatron_pairs(export_text(job, ptd::ExportFormat::megatron));
    std::string layout = flag(args, "--pipeline-model-parallel-layout");
    ASSERT_NE(layout, "<absent>");
    layout = layout.substr(1, layout.size() - 2);
    const std::string last = layout.substr(layout.rfind('|') + 1);
    EXPECT_EQ(last, "t*2mL");
    EXPECT_EQ(std::count(layout.begin(), layout.end(), 'm'), std::stoi(flag(args, "--mtp-num-layers")));
    EXPECT_EQ(flag(args, "--num-layers-per-virtual-pipeline-stage"), "<absent>");
}

// Qwen3: head_dim → --kv-channels; Qwen3-MoE's experts' own width.
TEST(MlaioExport, MegatronQwen3) {
    auto args = megatron_pairs(export_text(preset_job("qwen3-32b", "tp = 8\ndp = 128\nsequence_parallel = true"),
                                           ptd::ExportFormat::megatron));
    EXPECT_EQ(flag(args, "--kv-channels"), "128");
    EXPECT_EQ(flag(args, "--num-query-groups"), "8");
    auto q32 = ptd::export_job(preset_job("qwen3-32b", "tp = 8\ndp = 128\nsequence_parallel = true"),
                               ptd::ExportFormat::megatron);
    ASSERT_TRUE(q32);
    EXPECT_EQ(flag(args, "--qk-layernorm"), "");  // the preset's qk_layernorm (Qwen3's q_norm / k_norm)
    EXPECT_EQ(flag(args, "--multi-latent-attention"), "<absent>");
    args = megatron_pairs(export_text(preset_job("qwen3-30b-a3b", "tp = 1\ndp = 1024\nep = 8"), ptd::ExportFormat::megatron));
    EXPECT_EQ(flag(args, "--moe-ffn-hidden-size"), "768");
    EXPECT_EQ(flag(args, "--ffn-hidden-size"), "6144");
    EXPECT_EQ(flag(args, "--moe-layer-freq"), "<absent>");  // every layer sparse: Megatron's default 1
    EXPECT_EQ(flag(args, "--moe-shared-expert-intermediate-size"), "<absent>");
    // Qwen3 8B's head_dim equals hidden/heads: nothing to write.
    args = megatron_pairs(export_text(preset_job("qwen3-8b", "tp = 1\ndp = 1024"), ptd::ExportFormat::megatron));
    EXPECT_EQ(flag(args, "--kv-channels"), "<absent>");
}

// torchtitan has Qwen3 and DeepSeek-V3 models (torchtitan/models/qwen3, deepseek_v3, main
// b5bcd76; v0.2.2 for the TOML form): the exact presets map to their flavors.
TEST(MlaioExport, TorchtitanFlavors) {
    // etp: torchtitan main splits the routed experts over ep only (no expert TP, #3167), so the
    // jobs exported to it with tp > 1 and ep > 1 say expert_tp = 1.
    const ptd::JobSpec ds = preset_job("deepseek-v3", "tp = 8\ndp = 128\nep = 64\nexpert_tp = 1\nsequence_parallel = true");
    const std::string py = export_text(ds, ptd::ExportFormat::torchtitan);
    EXPECT_TRUE(contains(py, "from torchtitan.models.deepseek_v3 import MTPLoss, model_registry")) << py;
    EXPECT_TRUE(contains(py, "from torchtitan.models.deepseek_v3.config_registry import deepseek_v3_671b")) << py;
    EXPECT_TRUE(contains(py, "    config = deepseek_v3_671b()")) << py;
    EXPECT_TRUE(contains(py, "config.model_spec = model_registry(\"671B\", num_mtp_layers=1)")) << py;
    EXPECT_TRUE(contains(py, "config.loss = MTPLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec))")) << py;
    EXPECT_TRUE(contains(py, "expert_parallel_degree=64")) << py;

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
    EXPECT_TRUE(contains(q32, "from torchtitan.models.qwen3.config_registry import qwen3_32b")) << q32;
    EXPECT_TRUE(contains(q32, "config.model_spec = model_registry(\"32B\")")) << q32;
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
    EXPECT_TRUE(contains(c->text, "from torchtitan.models.qwen3.config_registry import qwen3_debugmodel")) << c->text;
    EXPECT_TRUE(contains(c->text, "config.model_spec = _model_spec()")) << c->text;
    EXPECT_TRUE(any_note(*c, "register a flavor in torchtitan/models/qwen3")) << c->notes.front();
}

// DeepSpeed: no model code it trains has MTP; MLA only in transformers' DeepseekV3ForCausalLM,
// without tensor or pipeline parallelism.
TEST(MlaioExport, DeepSpeedRefusesWhatNoModelCodeHas) {
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

namespace {

// ---- display ---------------------------------------------------------------------------

// `ptd validate` / `ptd layout` describe the model with one more line when it sets the new
// keys (and the studio's job panel shows the same text); classic models are unchanged.
TEST(MlaioDisplay, SummaryNamesTheNewKeys) {
    const ptd::ModelSpec& ds = *presets().find_model("deepseek-v3");
    EXPECT_EQ(ptd::model_shape_details(ds),
              "MLA: q_lora 1536, kv_lora 512, q/k heads 128 + 64 RoPE, v heads 128; experts 2048 wide, shared experts "
              "2048, first 3 layers dense (ffn 18432), routing within 4 of 8 groups; MTP 1");
    EXPECT_EQ(ptd::model_shape_details(*presets().find_model("qwen3-30b-a3b")), "head_dim 128; q/k norms; experts 768 wide");
    EXPECT_EQ(ptd::model_shape_details(*presets().find_model("qwen3-8b")), "q/k norms");
    EXPECT_EQ(ptd::model_shape_details(*presets().find_model("mixtral-8x7b")), "");

    const ptd::JobSpec job = preset_job("deepseek-v3", "tp = 8\ndp = 128\nep = 64\nsequence_parallel = true");
    const std::string text = ptd::job_summary_text(job, ptd::Term{});
    EXPECT_TRUE(contains(text, "\n        MLA: q_lora 1536, kv_lora 512")) << text;
    const nlohmann::json j = ptd::job_json(job);
    EXPECT_EQ(j["model"]["kv_lora_rank"], 512);
    EXPECT_EQ(j["model"]["first_dense_layers"], 3);
    EXPECT_EQ(j["model"]["mtp_layers"], 1);

    const ptd::JobSpec llama = preset_job("llama3-8b", "tp = 8\ndp = 128");
    const std::string plain = ptd::job_summary_text(llama, ptd::Term{});
    EXPECT_EQ(std::count(plain.begin(), plain.end(), '\n'), std::count(text.begin(), text.end(), '\n') - 1) << plain;
    EXPECT_FALSE(ptd::job_json(llama)["model"].contains("head_dim"));
}

}  // namespace
