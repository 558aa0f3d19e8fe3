// recent_models.cpp — the model keys of recent open models (head_dim ≠ hidden/heads, multi-head
// latent attention, routed-expert width, shared experts, dense first layers, multi-token
// prediction) at PTD's edges: the Hugging Face importer (real config.json files of DeepSeek-V3,
// Qwen3 8B / 32B, Qwen3-30B-A3B and Qwen3-235B-A22B under tests/data/hf/), the model presets
// and the CLI's model description (their exports: tests/export/recent_models.cpp).
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
#include "model_test_util.h"

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
TEST(RecentModelsImport, DeepSeekV3) {
    const ptd::HfImport h = import_ok("deepseek-v3.json");
    const ptd::ModelSpec& m = h.model;
    EXPECT_EQ(m.arch, ptd::Arch::llama);
    ptd_test::expect_dims(m, {61, 7168, 128, 128, 18432, 129280});
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
    EXPECT_EQ(m.moe_router_num_groups, 8);  // n_group / topk_group: group-limited routing
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
TEST(RecentModelsImport, Qwen3Dense) {
    const ptd::HfImport q8 = import_ok("qwen3-8b.json");
    ptd_test::expect_dims(q8.model, {36, 4096, 32, 8, 12288, 151936});
    EXPECT_EQ(q8.model.head_dim_given, 0);
    EXPECT_EQ(q8.model.head_dim(), 128);
    EXPECT_FALSE(q8.model.qkv_bias);  // Qwen3 dropped Qwen2's q/k/v biases
    EXPECT_EQ(q8.model.rope_theta, 1e6);
    EXPECT_TRUE(q8.model.qk_layernorm);  // q_norm / k_norm: model.qk_layernorm

    const ptd::HfImport q32 = import_ok("qwen3-32b.json");
    ptd_test::expect_dims(q32.model, {64, 5120, 64, 8, 25600});
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
TEST(RecentModelsImport, Qwen3Moe) {
    const ptd::HfImport a3 = import_ok("qwen3-30b-a3b.json");
    ptd_test::expect_dims(a3.model, {48, 2048, 32, 4});
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
    ptd_test::expect_dims(a22.model, {94, 4096, 64, 4});
    EXPECT_EQ(a22.model.head_dim_given, 128);
    EXPECT_EQ(a22.model.moe_ffn_hidden, 1536);
    EXPECT_EQ(a22.model.experts, 128);
}

// What PTD still cannot place is refused with the field, its value and what is allowed.
TEST(RecentModelsImport, LayerPatternsPtdCannotPlaceAreErrors) {
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
TEST(RecentModelsImport, DeepSeekV2LiteShapes) {
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
TEST(RecentModelsPresets, MatchTheirHuggingFaceConfigs) {
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

// ---- display ---------------------------------------------------------------------------

// `ptd validate` / `ptd layout` describe the model with one more line when it sets the new
// keys (and the studio's job panel shows the same text); classic models are unchanged.
TEST(RecentModelsDisplay, SummaryNamesTheNewKeys) {
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
