// hf_config.cpp — hugging Face config.json import: the six sample configs under tests/data/hf/ (written
// from the published config.json of each model), notes on approximated fields, and the
// error messages for wrong types, missing fields, unknown model types and broken JSON.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ptd/spec/hf_import.h"
#include "ptd/model/model_stats.h"
#include "model_test_util.h"

namespace {

using ptd::Activation;
using ptd::Arch;
using ptd::HfImport;
using ptd::Norm;
using ptd::Position;

std::string data_path(const std::string& name) {
    // Appended, not `std::string(...) + ...`: GCC 12 warns falsely on that (-Warray-bounds, PR 105329).
    std::string path = PTD_SOURCE_DIR;
    path += "/tests/data/hf/";
    path += name;
    return path;
}

HfImport load_ok(const std::string& name) {
    auto r = ptd::import_hf_config_file(data_path(name));
    if (!r) ADD_FAILURE() << name << ":\n" << r.error().str();
    return r ? *r : HfImport{};
}

ptd::Error load_err(std::string_view json, const std::string& file = "config.json") {
    auto r = ptd::import_hf_config_text(json, file);
    if (r) {
        ADD_FAILURE() << "expected an error for:\n" << json;
        return ptd::Error{};
    }
    return r.error();
}

bool has_note(const HfImport& h, const std::string& part) {
    return std::any_of(h.notes.begin(), h.notes.end(),
                       [&](const std::string& n) { return n.find(part) != std::string::npos; });
}

// The notes other than the one that says where seq_len came from (which every import has).
std::vector<std::string> other_notes(const HfImport& h) {
    std::vector<std::string> out;
    for (const auto& n : h.notes)
        if (!n.starts_with("seq_len = ")) out.push_back(n);
    return out;
}

std::string all_notes(const HfImport& h) {
    std::string s;
    for (const auto& n : h.notes) s += n + "\n";
    return s;
}

// A minimal valid Llama config; tests add or break one field at a time.
const char* kTinyLlama = R"({
  "model_type": "llama",
  "num_hidden_layers": 2,
  "hidden_size": 256,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "intermediate_size": 688,
  "vocab_size": 1000,
  "max_position_embeddings": 512
})";

// kTinyLlama with `extra` inserted as the first field(s) ("key": value,).
std::string tiny_llama_with(const std::string& extra) {
    std::string s = kTinyLlama;
    return s.insert(2, "  " + extra + ",\n");
}

// kTinyLlama with the line holding `key` removed.
std::string tiny_llama_without(const std::string& key) {
    std::string s = kTinyLlama;
    size_t p = s.find("\"" + key + "\"");
    size_t start = s.rfind('\n', p) + 1;
    size_t end = s.find('\n', p) + 1;
    s.erase(start, end - start);
    if (size_t c = s.find(",\n}"); c != std::string::npos) s.erase(c, 1);  // was the last field
    return s;
}

// Every field of the config was understood (no note beyond the standard ones) and the model
// has `params` parameters.
void expect_plain_import(const HfImport& h, long long params) {
    EXPECT_TRUE(other_notes(h).empty()) << all_notes(h);
    EXPECT_EQ(ptd::count_parameters(h.model).total, params);
}

// An import that must fail with one error only: at `key`, its message mentioning `part` (when given).
void expect_only_error(const std::string& config_text, const std::string& key, const std::string& part = "") {
    const ptd::Error e = load_err(config_text);
    ASSERT_EQ(e.diagnostics.size(), 1u) << e.str();
    EXPECT_EQ(e.diagnostics[0].key, key);
    if (!part.empty()) {
        EXPECT_NE(e.diagnostics[0].message.find(part), std::string::npos) << e.str();
    }
}

// ---- the sample configs ------------------------------------------------------------------

TEST(HfImport, Llama3_8B) {
    HfImport h = load_ok("llama-3-8b.json");
    const auto& m = h.model;
    EXPECT_EQ(m.name, "llama");  // no _name_or_path in the hub file
    EXPECT_EQ(m.arch, Arch::llama);
    ptd_test::expect_dims(m, {32, 4096, 32, 8, 14336, 128256, 8192});
    ptd_test::expect_form(m, {false, Norm::rmsnorm, Activation::swiglu, Position::rope, false});
    EXPECT_FALSE(m.qkv_bias);
    EXPECT_EQ(m.experts, 0);
    EXPECT_DOUBLE_EQ(m.rope_theta, 500000.0);
    EXPECT_DOUBLE_EQ(m.norm_eps, 1e-5);
    // Every field of the hub file is understood; rope_scaling is null.
    expect_plain_import(h, 8'030'261'248LL);
}

TEST(HfImport, Mistral7B) {
    HfImport h = load_ok("mistral-7b-v0.1.json");
    const auto& m = h.model;
    EXPECT_EQ(m.arch, Arch::llama);
    ptd_test::expect_dims(m, {32, 4096, 32, 8, 14336, 32000, 32768});
    EXPECT_DOUBLE_EQ(m.rope_theta, 10000.0);
    EXPECT_EQ(m.name, "mistral");
    ASSERT_EQ(other_notes(h).size(), 1u) << all_notes(h);
    EXPECT_TRUE(has_note(h, "seq_len = 32,768 from max_position_embeddings")) << all_notes(h);
    EXPECT_TRUE(has_note(h, "sliding_window = 4096")) << all_notes(h);
    EXPECT_TRUE(has_note(h, "parameter counts")) << all_notes(h);
    EXPECT_EQ(ptd::count_parameters(m).total, 7'241'732'096LL);
}

TEST(HfImport, Mixtral8x7B) {
    HfImport h = load_ok("mixtral-8x7b-v0.1.json");
    const auto& m = h.model;
    EXPECT_EQ(m.arch, Arch::llama);
    EXPECT_EQ(m.experts, 8);
    EXPECT_EQ(m.top_k, 2);
    EXPECT_EQ(m.ffn_hidden, 14336);
    EXPECT_EQ(m.kv_heads, 8);
    EXPECT_DOUBLE_EQ(m.rope_theta, 1e6);
    // sliding_window is null: no window, no note; router fields are harmless.
    EXPECT_TRUE(other_notes(h).empty()) << all_notes(h);
    auto counts = ptd::count_parameters(m);
    EXPECT_EQ(counts.total, 46'702'792'704LL);
    EXPECT_NEAR(counts.active / 1e9, 12.9, 0.05);  // "12.9B active parameters"
}

TEST(HfImport, Qwen2_7B) {
    HfImport h = load_ok("qwen2-7b.json");
    const auto& m = h.model;
    EXPECT_EQ(m.arch, Arch::llama);
    ptd_test::expect_dims(m, {28, 3584, 28, 4, 18944, 152064, 131072});
    EXPECT_TRUE(m.qkv_bias);
    EXPECT_FALSE(m.bias);
    EXPECT_DOUBLE_EQ(m.norm_eps, 1e-6);
    // use_sliding_window is false, so sliding_window (and max_window_layers) do nothing.
    expect_plain_import(h, 7'615'616'512LL);
}

TEST(HfImport, Gpt2) {
    HfImport h = load_ok("gpt2.json");
    const auto& m = h.model;
    EXPECT_EQ(m.name, "gpt2");
    EXPECT_EQ(m.arch, Arch::gpt);
    ptd_test::expect_dims(m, {12, 768, 12, 12});
    EXPECT_EQ(m.ffn_hidden, 3072);  // n_inner absent → 4·n_embd
    EXPECT_EQ(m.vocab, 50257);
    EXPECT_EQ(m.seq_len, 1024);
    ptd_test::expect_form(m, {true, Norm::layernorm, Activation::gelu, Position::learned, true});
    EXPECT_DOUBLE_EQ(m.norm_eps, 1e-5);
    expect_plain_import(h, 124'439'808LL);
}

TEST(HfImport, GptNeoX20B) {
    HfImport h = load_ok("gpt-neox-20b.json");
    const auto& m = h.model;
    EXPECT_EQ(m.arch, Arch::gpt);
    ptd_test::expect_dims(m, {44, 6144, 64, 64, 24576, 50432, 2048});
    ptd_test::expect_form(m, {false, Norm::layernorm, Activation::gelu /* hidden_act gelu_fast */, Position::rope, true});
    EXPECT_DOUBLE_EQ(m.rope_theta, 10000.0);
    EXPECT_TRUE(has_note(h, "rotary_pct = 0.25")) << all_notes(h);
    EXPECT_TRUE(has_note(h, "use_parallel_residual")) << all_notes(h);
    EXPECT_EQ(other_notes(h).size(), 2u) << all_notes(h);
    EXPECT_EQ(ptd::count_parameters(m).total, 20'554'567'680LL);
}

// ---- mapping details ---------------------------------------------------------------------

TEST(HfImport, NameOrPathAndDefaults) {
    auto r = ptd::import_hf_config_text(
        tiny_llama_with(R"("_name_or_path": "my-org/tiny")") , "cfg.json");
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_EQ(r->model.name, "my-org/tiny");
    EXPECT_DOUBLE_EQ(r->model.rope_theta, 10000.0);  // default
    EXPECT_FALSE(r->model.tied_embeddings);          // default for llama

    r = ptd::import_hf_config_text(tiny_llama_without("num_key_value_heads"), "cfg.json");
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_EQ(r->model.kv_heads, 4);  // defaults to num_attention_heads
}

TEST(HfImport, SeqLenOverride) {
    auto r = ptd::import_hf_config_text(kTinyLlama, "cfg.json", 128);
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_EQ(r->model.seq_len, 128);
    EXPECT_EQ(r->notes, std::vector<std::string>{
                            "seq_len = 128 from the job's [model] seq_len (the config has max_position_embeddings = 512)"});
    r = ptd::import_hf_config_text(kTinyLlama, "cfg.json");
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_EQ(r->notes, std::vector<std::string>{"seq_len = 512 from max_position_embeddings (set [model] seq_len to train shorter)"});

    // With an override the context length may be missing ...
    r = ptd::import_hf_config_text(tiny_llama_without("max_position_embeddings"), "cfg.json", 64);
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_EQ(r->model.seq_len, 64);

    // ... and a longer one than the model was built for is noted.
    r = ptd::import_hf_config_text(kTinyLlama, "cfg.json", 4096);
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_TRUE(has_note(*r, "max_position_embeddings")) << all_notes(*r);
}

TEST(HfImport, AttentionBiasIsQkvBiasWithNote) {
    auto r = ptd::import_hf_config_text(tiny_llama_with(R"("attention_bias": true)"), "cfg.json");
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_TRUE(r->model.qkv_bias);
    EXPECT_FALSE(r->model.bias);
    EXPECT_TRUE(has_note(*r, "o_proj")) << all_notes(*r);
}

TEST(HfImport, MlpBias) {
    expect_only_error(tiny_llama_with(R"("mlp_bias": true)"), "mlp_bias");

    auto r = ptd::import_hf_config_text(tiny_llama_with(R"("mlp_bias": true, "attention_bias": true)"),
                                        "cfg.json");
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_TRUE(r->model.bias);
}

TEST(HfImport, QwenSlidingWindowWhenEnabled) {
    std::string s = kTinyLlama;
    s.replace(s.find("\"llama\""), 7, "\"qwen2\"");
    s.insert(2, "  \"use_sliding_window\": true, \"sliding_window\": 128,\n");
    auto r = ptd::import_hf_config_text(s, "cfg.json");
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_TRUE(r->model.qkv_bias);
    EXPECT_TRUE(has_note(*r, "sliding_window = 128")) << all_notes(*r);
}

TEST(HfImport, RopeScalingIsNoted) {
    auto r = ptd::import_hf_config_text(
        tiny_llama_with(R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0})"), "cfg.json");
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_TRUE(has_note(*r, "rope_scaling")) << all_notes(*r);
    EXPECT_TRUE(has_note(*r, "llama3")) << all_notes(*r);
}

TEST(HfImport, UnknownFieldsAreNotedNotIgnored) {
    auto r = ptd::import_hf_config_text(
        tiny_llama_with(R"("quantization_config": {"bits": 4}, "torch_dtype": "bfloat16")"), "cfg.json");
    ASSERT_TRUE(r) << r.error().str();
    ASSERT_EQ(other_notes(*r).size(), 1u) << all_notes(*r);
    EXPECT_EQ(other_notes(*r)[0], "field quantization_config = {\"bits\":4} is ignored: weight quantization is a "
                                  "storage format; PTD counts training in the job's precision");

    r = ptd::import_hf_config_text(tiny_llama_with(R"("some_new_field": 3)"), "cfg.json");
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_TRUE(has_note(*r, "field some_new_field is not understood by PTD and was ignored")) << all_notes(*r);

    // A field of another family that changes the architecture is an error (sliding_window on llama).
    expect_only_error(tiny_llama_with(R"("sliding_window": 4096)"), "sliding_window",
                      "got 4096: sliding-window attention");
}

TEST(HfImport, Gpt2NInnerAndNCtx) {
    const char* cfg = R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
                          "n_ctx": 256, "n_inner": 100, "vocab_size": 500})";
    auto r = ptd::import_hf_config_text(cfg, "cfg.json");
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_EQ(r->model.ffn_hidden, 100);
    EXPECT_EQ(r->model.seq_len, 256);  // n_positions absent → n_ctx

    const char* relu = R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
                           "n_positions": 256, "vocab_size": 500, "activation_function": "relu"})";
    auto e = load_err(relu);
    ASSERT_EQ(e.diagnostics.size(), 1u) << e.str();
    EXPECT_EQ(e.diagnostics[0].key, "activation_function");
    EXPECT_NE(e.diagnostics[0].message.find("\"relu\""), std::string::npos);
    EXPECT_NE(e.diagnostics[0].message.find("gelu_new"), std::string::npos);
}

// ---- errors ------------------------------------------------------------------------------

TEST(HfImportErrors, WrongType) {
    std::string s = kTinyLlama;
    s.replace(s.find("256"), 3, "\"256\"");
    auto e = load_err(s, "models/cfg.json");
    ASSERT_EQ(e.diagnostics.size(), 1u) << e.str();
    const auto& d = e.diagnostics[0];
    EXPECT_EQ(d.key, "hidden_size");
    EXPECT_EQ(d.where.file, "models/cfg.json");
    EXPECT_EQ(d.where.line, 4);  // points at the field
    EXPECT_EQ(d.where.column, 3);
    EXPECT_NE(d.message.find("\"256\""), std::string::npos) << d.message;
    EXPECT_NE(d.message.find("a string"), std::string::npos) << d.message;
    EXPECT_NE(d.message.find("integer"), std::string::npos) << d.message;
    EXPECT_NE(e.str().find("models/cfg.json:4:3: error: hidden_size: "), std::string::npos) << e.str();

    expect_only_error(tiny_llama_with(R"("tie_word_embeddings": "yes")"), "tie_word_embeddings", "true or false");

    auto e3 = load_err(tiny_llama_with(R"("rope_theta": [1])"));
    EXPECT_EQ(e3.diagnostics.at(0).key, "rope_theta");
    EXPECT_NE(e3.diagnostics[0].message.find("an array"), std::string::npos);
}

TEST(HfImportErrors, FloatForInteger) {
    std::string s = kTinyLlama;
    s.replace(s.find("1000"), 4, "1000.0");
    expect_only_error(s, "vocab_size", "fraction");
}

TEST(HfImportErrors, MissingField) {
    expect_only_error(tiny_llama_without("num_hidden_layers"), "num_hidden_layers", "missing");

    expect_only_error(tiny_llama_without("max_position_embeddings"), "max_position_embeddings");

    expect_only_error(R"({"hidden_size": 4096})", "model_type", "gpt_neox");
}

TEST(HfImportErrors, EveryProblemIsReported) {
    std::string s = tiny_llama_without("vocab_size");
    s.replace(s.find("\"num_hidden_layers\": 2"), 22, "\"num_hidden_layers\": 0");
    s.replace(s.find("\"hidden_size\": 256"), 18, "\"hidden_size\": true");
    auto e = load_err(s);
    ASSERT_EQ(e.diagnostics.size(), 3u) << e.str();
    EXPECT_EQ(e.diagnostics[0].key, "num_hidden_layers");  // in file order, missing last
    EXPECT_EQ(e.diagnostics[1].key, "hidden_size");
    EXPECT_EQ(e.diagnostics[2].key, "vocab_size");
}

TEST(HfImportErrors, NonPositiveAndTooLarge) {
    std::string s = kTinyLlama;
    s.replace(s.find("\"num_attention_heads\": 4"), 24, "\"num_attention_heads\": -4");
    expect_only_error(s, "num_attention_heads", "got -4, expected a positive integer");

    s = kTinyLlama;
    s.replace(s.find("1000"), 4, "3000000000");
    expect_only_error(s, "vocab_size", "too large");

    s = kTinyLlama;
    s.replace(s.find("1000"), 4, "123456789012345678901234567890");
    auto e = load_err(s);
    ASSERT_EQ(e.diagnostics.size(), 1u) << e.str();
    EXPECT_NE(e.diagnostics[0].message.find("too large"), std::string::npos) << e.str();

    e = load_err(tiny_llama_with(R"("rms_norm_eps": -1e-5)"));
    EXPECT_EQ(e.diagnostics.at(0).key, "rms_norm_eps");
}

TEST(HfImportErrors, UnknownModelType) {
    auto e = load_err(R"({"model_type": "bert", "hidden_size": 768})");
    ASSERT_EQ(e.diagnostics.size(), 1u) << e.str();
    EXPECT_EQ(e.diagnostics[0].key, "model_type");
    const std::string& msg = e.diagnostics[0].message;
    EXPECT_NE(msg.find("\"bert\""), std::string::npos) << msg;
    for (const char* t : {"llama", "mistral", "mixtral", "qwen2", "gpt2", "gpt_neox"})
        EXPECT_NE(msg.find(t), std::string::npos) << msg;

    auto e2 = load_err(R"({"model_type": "gpt-neox"})");
    EXPECT_NE(e2.str().find("did you mean \"gpt_neox\""), std::string::npos) << e2.str();
}

TEST(HfImportErrors, BadJsonGivesLineAndColumn) {
    // The stray comma on line 3 is the 23rd character.
    const char* bad = "{\n  \"model_type\": \"llama\",\n  \"hidden_size\": 4096,,\n}\n";
    auto e = load_err(bad, "bad.json");
    ASSERT_EQ(e.diagnostics.size(), 1u);
    const auto& d = e.diagnostics[0];
    EXPECT_EQ(d.where.file, "bad.json");
    EXPECT_EQ(d.where.line, 3);
    EXPECT_EQ(d.where.column, 23);
    EXPECT_NE(d.message.find("invalid JSON"), std::string::npos) << d.message;
    EXPECT_EQ(d.message.find("json.exception"), std::string::npos) << d.message;
    EXPECT_NE(e.str().find("bad.json:3:23: error:"), std::string::npos) << e.str();

    // Unterminated object: the error is at the end of the input.
    auto e2 = load_err("{\n  \"model_type\": \"llama\"\n", "cut.json");
    EXPECT_EQ(e2.diagnostics.at(0).where.line, 3);

    // Columns count characters, not bytes: the "2" is the 9th character (10th byte).
    auto e3 = load_err("{\"é\": 1 2}", "u.json");
    EXPECT_EQ(e3.diagnostics.at(0).where.column, 9);
}

TEST(HfImportErrors, TopLevelNotObject) {
    for (const char* s : {"[1, 2]", "\"llama\"", "42", "null", "\n  true"}) {
        auto e = load_err(s);
        ASSERT_EQ(e.diagnostics.size(), 1u) << s;
        EXPECT_NE(e.diagnostics[0].message.find("must be an object"), std::string::npos) << e.str();
    }
    EXPECT_EQ(load_err("\n  true").diagnostics.at(0).where.line, 2);
}

// mlaio: a head_dim other than hidden/heads (Qwen3) is modelled (model.head_dim), no longer
// refused; equal to hidden/heads it changes nothing.
TEST(HfImport, HeadDimOtherThanHiddenOverHeadsIsModelled) {
    auto r = ptd::import_hf_config_text(tiny_llama_with(R"("head_dim": 128)"), "cfg.json");
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_EQ(r->model.head_dim_given, 128);
    EXPECT_EQ(r->model.head_dim(), 128);

    r = ptd::import_hf_config_text(tiny_llama_with(R"("head_dim": 64)"), "cfg.json");
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_EQ(r->model.head_dim_given, 0);

    // A given head_dim frees hidden from being a multiple of heads; the grouping still counts.
    std::string s = kTinyLlama;
    s.replace(s.find("\"num_attention_heads\": 4"), 24, "\"num_attention_heads\": 6");
    r = ptd::import_hf_config_text(s, "cfg.json");
    EXPECT_FALSE(r);
    auto with = tiny_llama_with(R"("head_dim": 32)");
    with.replace(with.find("\"num_attention_heads\": 4"), 24, "\"num_attention_heads\": 6");
    r = ptd::import_hf_config_text(with, "cfg.json");
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_EQ(r->model.head_dim_given, 32);

    auto e = load_err(tiny_llama_with(R"("head_dim": 0)"));
    EXPECT_EQ(e.diagnostics.at(0).key, "head_dim");
}

TEST(HfImportErrors, HeadShapes) {
    std::string s = kTinyLlama;
    s.replace(s.find("\"num_key_value_heads\": 2"), 24, "\"num_key_value_heads\": 3");
    expect_only_error(s, "num_key_value_heads");

    s = kTinyLlama;
    s.replace(s.find("\"num_attention_heads\": 4"), 24, "\"num_attention_heads\": 3");
    s.replace(s.find("\"num_key_value_heads\": 2"), 24, "\"num_key_value_heads\": 3");
    expect_only_error(s, "num_attention_heads", "not divisible");
}

TEST(HfImportErrors, ActivationAndArchitectureFlags) {
    auto e = load_err(tiny_llama_with(R"("hidden_act": "gelu")"));
    ASSERT_EQ(e.diagnostics.size(), 1u) << e.str();
    EXPECT_EQ(e.diagnostics[0].key, "hidden_act");
    EXPECT_NE(e.diagnostics[0].message.find("\"gelu\""), std::string::npos);
    EXPECT_NE(e.diagnostics[0].message.find("silu"), std::string::npos);

    e = load_err(tiny_llama_with(R"("add_cross_attention": true)"));
    EXPECT_EQ(e.diagnostics.at(0).key, "add_cross_attention");

    e = load_err(R"({"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 64,
        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
        "max_position_embeddings": 64, "num_local_experts": 4, "num_experts_per_tok": 8})");
    EXPECT_EQ(e.diagnostics.at(0).key, "num_experts_per_tok");
}

TEST(HfImportErrors, FileErrors) {
    auto r = ptd::import_hf_config_file("/nonexistent/dir/config.json");
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().str(), "/nonexistent/dir/config.json: error: cannot open: No such file or directory\n");

    // Special files go through the shared reader (issue 12 item 4).
    r = ptd::import_hf_config_file(std::string(PTD_SOURCE_DIR) + "/tests/data/hf");
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().str().find("is a directory; expected a regular file (a Hugging Face config.json)"),
              std::string::npos)
        << r.error().str();
    r = ptd::import_hf_config_file("/dev/zero");
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().str(),
              "/dev/zero: error: is a character device; expected a regular file (a Hugging Face config.json)\n");

    // Diagnostics from a file name the file.
    auto tmp = std::filesystem::temp_directory_path() / "ptd_test_hf_bad.json";
    {
        std::FILE* f = std::fopen(tmp.c_str(), "wb");
        ASSERT_NE(f, nullptr);
        std::fputs("{\"model_type\": \"llama\", \"hidden_size\": {}}", f);
        std::fclose(f);
    }
    r = ptd::import_hf_config_file(tmp.string());
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().diagnostics.at(0).where.file, tmp.string());
    std::filesystem::remove(tmp);
}

TEST(HfImportErrors, NeverThrowsOnGarbage) {
    std::string deep(200000, '[');
    std::string deep_obj;
    for (int i = 0; i < 50000; ++i) deep_obj += "{\"a\":";
    const std::string inputs[] = {"",
                                  std::string("\0\0\0", 3),
                                  "{",
                                  "}",
                                  "{\"model_type\": null}",
                                  "{\"model_type\": \"llama\", \"\\u0000\\n\": 1}",
                                  "\xEF\xBB\xBF{}",
                                  "{\"model_type\": \"gpt2\", \"n_embd\": 1e400}",
                                  "{\"model_type\": \"llama\", \"num_hidden_layers\": -0.0}",
                                  "{\"a\": \"\xff\xfe\"}",
                                  deep,
                                  deep_obj};
    for (const auto& in : inputs) {
        auto r = ptd::import_hf_config_text(in, "g.json");
        if (!r) {
            EXPECT_FALSE(r.error().diagnostics.empty());
            EXPECT_FALSE(r.error().str().empty());
        }
    }
}

}  // namespace

namespace {

// Issue 12 item 13: Llama 3.1 says max_position_embeddings = 131072 (the context after
// RoPE scaling); the model was pre-trained at 8192, which rope_scaling keeps. Taking 131072
// silently made `ptd estimate` report a 782 GiB OOM.
TEST(HfImport, Llama31TakesThePretrainingContextAndSaysSo) {
    HfImport h = load_ok("llama-3.1-8b.json");
    EXPECT_EQ(h.model.seq_len, 8192);
    EXPECT_TRUE(has_note(h, "seq_len = 8,192 from rope_scaling.original_max_position_embeddings")) << all_notes(h);
    EXPECT_TRUE(has_note(h, "max_position_embeddings = 131,072")) << all_notes(h);
    EXPECT_TRUE(has_note(h, "llama3")) << all_notes(h);  // the scaling itself is still noted
    EXPECT_EQ(ptd::count_parameters(h.model).total, 8'030'261'248LL);

    // A job's seq_len wins, and the note says so and what the config had.
    auto r = ptd::import_hf_config_file(data_path("llama-3.1-8b.json"), 4096);
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_EQ(r->model.seq_len, 4096);
    EXPECT_TRUE(has_note(*r, "seq_len = 4,096 from the job's [model] seq_len (the config has "
                             "rope_scaling.original_max_position_embeddings = 8,192, max_position_embeddings = "
                             "131,072)"))
        << all_notes(*r);

    // transformers 5 keeps the same fields under rope_parameters.
    r = ptd::import_hf_config_text(
        tiny_llama_with(R"("rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                           "original_max_position_embeddings": 64})"),
        "cfg.json");
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_EQ(r->model.seq_len, 64);
    EXPECT_DOUBLE_EQ(r->model.rope_theta, 500000.0);
    EXPECT_TRUE(has_note(*r, "from rope_parameters.original_max_position_embeddings")) << all_notes(*r);

    auto e = load_err(tiny_llama_with(R"("rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": "4k"})"));
    ASSERT_EQ(e.diagnostics.size(), 1u) << e.str();
    EXPECT_EQ(e.diagnostics[0].key, "rope_scaling");
    EXPECT_NE(e.str().find("original_max_position_embeddings: got \"4k\""), std::string::npos) << e.str();
}

bool has_error(const ptd::Error& e, const std::string& key) {
    return std::any_of(e.diagnostics.begin(), e.diagnostics.end(), [&](const ptd::Diagnostic& d) { return d.key == key; });
}

// DeepSeek-V3's config relabelled "llama" imported as a 38.6B dense model instead of the
// 671B MoE it describes: every field that changes the architecture is now an error.
TEST(HfImport, ArchitectureFieldsOfOtherFamiliesAreErrors) {
    auto r = ptd::import_hf_config_file(data_path("deepseek-v3-as-llama.json"));
    ASSERT_FALSE(r) << "imported as " << ptd::count_parameters(r->model).total << " parameters";
    const ptd::Error& e = r.error();
    for (const char* key : {"kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
                            "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
                            "first_k_dense_replace", "moe_layer_freq", "num_nextn_predict_layers"})
        EXPECT_TRUE(has_error(e, key)) << key << "\n" << e.str();
    const std::string text = e.str();
    EXPECT_NE(text.find("error: kv_lora_rank: got 512: low-rank compressed keys and values"), std::string::npos) << text;
    EXPECT_NE(text.find("model_type \"llama\" has no such part"), std::string::npos) << text;
    // Located at the field's line.
    for (const ptd::Diagnostic& d : e.diagnostics) EXPECT_GT(d.where.line, 0) << d.key;

    auto q = ptd::import_hf_config_file(data_path("qwen1.5-moe-as-qwen2.json"));
    ASSERT_FALSE(q);
    for (const char* key : {"num_experts", "num_experts_per_tok", "moe_intermediate_size",
                            "shared_expert_intermediate_size", "decoder_sparse_step"})
        EXPECT_TRUE(has_error(q.error(), key)) << key << "\n" << q.error().str();

    auto g = ptd::import_hf_config_file(data_path("gemma2-style-as-llama.json"));
    ASSERT_FALSE(g);
    EXPECT_TRUE(has_error(g.error(), "layer_types")) << g.error().str();
    EXPECT_TRUE(has_error(g.error(), "sliding_window")) << g.error().str();
}

// The "off" values of those fields (DeepSeek-V2-Lite's q_lora_rank: null, Qwen3's
// all-full layer_types, n_shared_experts 0) change nothing and import quietly.
TEST(HfImport, ArchitectureFieldsThatAreOffAreAccepted) {
    auto r = ptd::import_hf_config_text(
        tiny_llama_with(R"("q_lora_rank": null, "n_shared_experts": 0, "use_sliding_window": false,
                           "layer_types": ["full_attention", "full_attention"])"),
        "cfg.json");
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_TRUE(other_notes(*r).empty()) << all_notes(*r);
}

// Mixtral's own expert fields are mapped, not errors; the same fields on llama are.
TEST(HfImport, ExpertFieldsBelongToMixtralOnly) {
    HfImport h = load_ok("mixtral-8x7b-v0.1.json");
    EXPECT_EQ(h.model.experts, 8);
    auto e = load_err(tiny_llama_with(R"("num_local_experts": 8, "num_experts_per_tok": 2)"));
    EXPECT_TRUE(has_error(e, "num_local_experts")) << e.str();
    EXPECT_TRUE(has_error(e, "num_experts_per_tok")) << e.str();
}

}  // namespace

namespace {

// Printing a deeply nested value (every type error shows what was given) recursed once per
// level; such files are refused before parsing, with the position.
TEST(HfImport, DeepNestingIsRefused) {
    std::string deep = "{\"model_type\": \"llama\",\n \"hidden_size\": " + std::string(200000, '[') +
                       std::string(200000, ']') + "}";
    auto e = load_err(deep);
    ASSERT_EQ(e.diagnostics.size(), 1u) << e.str().substr(0, 300);
    EXPECT_EQ(e.diagnostics[0].where.line, 2);
    EXPECT_NE(e.diagnostics[0].message.find("nested more than 64 deep"), std::string::npos) << e.str();
    // Brackets inside strings do not count.
    auto r = ptd::import_hf_config_text(tiny_llama_with("\"note\": \"" + std::string(100, '[') + "\""), "cfg.json");
    EXPECT_TRUE(r) << r.error().str();
}

// A byte-order mark before the object is accepted.
TEST(HfImport, ByteOrderMarkIsAccepted) {
    auto r = ptd::import_hf_config_text("\xEF\xBB\xBF" + std::string(kTinyLlama), "cfg.json");
    EXPECT_TRUE(r) << r.error().str();
}

}  // namespace
