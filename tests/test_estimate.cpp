// test_estimate.cpp — the estimator (estimators/src/model/estimate.cpp).
//
// Unit tests pin each formula to values worked by hand from its published source; the
// source (paper and table/equation) is cited in a comment above each test, and the
// expected number is computed in the test from the paper's own expression, never copied
// from the implementation. Property tests then sweep many random valid layouts:
// memory never decreases when the micro-batch grows, ZeRO stage k+1 never holds more
// model-state bytes than stage k, MFU ≤ 1 ≤ HFU/MFU, the time identity, and the fast
// planner path agreeing with the detailed one. docs/estimators.md writes every formula out.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/model/model_stats.h"
#include "ptd/spec/presets.h"

#include "job_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Exact formulas: relative 1e-9 (the arithmetic is in doubles on integers < 2^53 mostly).
#define EXPECT_REL(got, want) EXPECT_NEAR((got), (want), 1e-9 * std::abs((double)(want)) + 1e-9)

ModelSpec preset_model(const char* name) {
    const ModelSpec* m = presets().find_model(name);
    EXPECT_NE(m, nullptr) << name;
    return m ? *m : ModelSpec{};
}

void expect_valid(const JobSpec& job) {
    auto d = validate_job(job);
    ASSERT_TRUE(d.empty()) << format_diagnostics(d);
}

double act(const ModelSpec& m, int b, int seq, int tp, bool sp, Recompute rc, bool flash,
           Precision p = Precision::bf16, ActivationProfile profile = ActivationProfile::megatron) {
    ActivationInputs in;
    in.model = &m;
    in.micro_batch = b;
    in.seq = seq;
    in.tp = tp;
    in.sequence_parallel = sp;
    in.flash_attention = flash;
    in.recompute = rc;
    in.precision = p;
    in.profile = profile;
    return layer_activation_bytes(in);
}

// ============================================================================================
// Activations per layer, megatron profile.
// ============================================================================================

// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
// (arXiv 2205.05198), §4.1 and Table 2: activation bytes per layer of a GPT-style layer
// (16-bit activations, MLP 4h, LayerNorm, GELU, dropout, no flash attention):
//   no parallelism        s·b·h·(34 + 5·a·s/h)
//   tensor parallel t     s·b·h·(10 + 24/t + 5·a·s/(h·t))
//   TP + sequence par.    s·b·h/t·(34 + 5·a·s/h)
//   TP + selective        s·b·h·(10 + 24/t)
//   TP + SP + selective   34·s·b·h/t
//   full recompute        2·s·b·h   (only the layer input; estimate.cpp adds the one layer
//                                    being recomputed at stage level)
// Shape: GPT-3 175B (Brown et al. 2020, Table 2.1): s = 2048, h = 12288, a = 96, t = 8.
TEST(Activations, KorthikantiTable2Gpt3) {
    const ModelSpec m = preset_model("gpt3-175b");
    ASSERT_EQ(m.arch, Arch::gpt);
    ASSERT_EQ(m.activation, Activation::gelu);
    ASSERT_EQ(m.ffn_hidden, 4 * m.hidden);
    ASSERT_EQ(m.kv_heads, m.heads);
    const double s = 2048, h = 12288, a = 96, t = 8;
    for (int b : {1, 4}) {
        const double sbh = s * b * h;
        EXPECT_REL(act(m, b, 2048, 1, false, Recompute::none, false), sbh * (34 + 5 * a * s / h)) << b;
        EXPECT_REL(act(m, b, 2048, 8, false, Recompute::none, false), sbh * (10 + 24 / t + 5 * a * s / (h * t))) << b;
        EXPECT_REL(act(m, b, 2048, 8, true, Recompute::none, false), sbh / t * (34 + 5 * a * s / h)) << b;
        EXPECT_REL(act(m, b, 2048, 8, false, Recompute::selective, false), sbh * (10 + 24 / t)) << b;
        EXPECT_REL(act(m, b, 2048, 8, true, Recompute::selective, false), 34 * sbh / t) << b;
        EXPECT_REL(act(m, b, 2048, 1, false, Recompute::full, false), 2 * sbh) << b;
        EXPECT_REL(act(m, b, 2048, 8, false, Recompute::full, false), 2 * sbh) << b;  // replicated input
        EXPECT_REL(act(m, b, 2048, 8, true, Recompute::full, false), 2 * sbh / t) << b;  // SP shards it
    }
    // The paper's no-parallelism figure for this shape, as a plain number: 114 · sbh bytes.
    EXPECT_EQ(act(m, 1, 2048, 1, false, Recompute::none, false), 2868903936.0);
}

// FlashAttention (Dao et al. 2022, arXiv 2205.14135, §3.1, Algorithm 2): the backward
// recomputes the scores from Q, K, V and keeps only the softmax statistics, so the
// Korthikanti 5·a·s²·b/t score/softmax/dropout term disappears and one fp32 log-sum-exp
// per query row and head (4·b·s·a/t bytes) is stored instead.
TEST(Activations, FlashAttentionReplacesScoresByLogSumExp) {
    const ModelSpec m = preset_model("gpt3-175b");
    const double s = 2048, a = 96;
    for (int t : {1, 2, 8})
        for (bool sp : {false, true}) {
            if (sp && t == 1) continue;
            for (int b : {1, 2}) {
                const double scores = 5.0 * a * s * s * b / t, lse = 4.0 * b * s * a / t;
                const double plain = act(m, b, 2048, t, sp, Recompute::none, false);
                const double flash = act(m, b, 2048, t, sp, Recompute::none, true);
                EXPECT_REL(plain - flash, scores - lse) << "t " << t << " sp " << sp << " b " << b;
                // Selective recompute re-runs the core attention from Q, K, V and keeps
                // nothing of it, flash or not (its statistics are recomputed too).
                const double sel = act(m, b, 2048, t, sp, Recompute::selective, false);
                const double sel_flash = act(m, b, 2048, t, sp, Recompute::selective, true);
                EXPECT_REL(sel_flash - sel, 0.0) << "t " << t << " sp " << sp;
            }
        }
}

// Korthikanti §4.1 splits the 34·sbh + 5·as²b as: attention 11sbh + 5as²b (of which the
// 1-byte dropout masks are sbh after the output projection and as²b after the softmax,
// and the dropout output 2as²b), MLP 19sbh (1-byte dropout mask sbh), LayerNorms 4sbh.
// Llama-style models train without dropout: removing those three masks and the dropout
// output leaves s·b·h·(8 + 24/t) + 2·a·s²·b/t (and 32·sbh/t + 2as²b/t with SP).
TEST(Activations, NoDropoutForLlamaArch) {
    ModelSpec m = preset_model("gpt3-175b");
    m.arch = Arch::llama;  // keep LayerNorm, GELU, 4h: only the dropout terms change
    const double s = 2048, h = 12288, a = 96, sbh = s * h;
    for (int t : {1, 8}) {
        EXPECT_REL(act(m, 1, 2048, t, false, Recompute::none, false), sbh * (8 + 24.0 / t) + 2 * a * s * s / t);
        if (t > 1) {
            EXPECT_REL(act(m, 1, 2048, t, true, Recompute::none, false), sbh * 32 / t + 2 * a * s * s / t);
        }
    }
}

// Grouped-query attention (Ainslie et al. 2023, arXiv 2305.13245): K and V have g heads of
// size d, so the saved K and V shrink from 2·(a/t)·d to 2·(g/t)·d elements per token.
// With t > g each TP rank holds one (replicated) KV head (Megatron-LM replicates the
// KV projections; validate_job requires t to be a multiple of g then).
TEST(Activations, GqaShrinksKeysAndValues) {
    ModelSpec mha = preset_model("llama2-70b");  // h 8192, a 64, g 8, d 128, f 28672, s 4096
    mha.kv_heads = mha.heads;
    ModelSpec gqa = mha;
    gqa.kv_heads = 8;
    const double T = 1 * 4096.0, e = 2, d = 128, a = 64, g = 8;
    for (bool flash : {false, true})
        for (bool sp : {false, true}) {
            // t = 8: one KV head per rank of the GQA model vs 8 query heads.
            double diff = act(mha, 1, 4096, 8, sp, Recompute::none, flash) - act(gqa, 1, 4096, 8, sp, Recompute::none, flash);
            EXPECT_REL(diff, e * T * 2 * (a - g) * d / 8);
            // t = 16 > g: the GQA rank still keeps one whole KV head, not half of one.
            diff = act(mha, 1, 4096, 16, sp, Recompute::none, flash) - act(gqa, 1, 4096, 16, sp, Recompute::none, flash);
            EXPECT_REL(diff, e * T * 2 * d * (a / 16 - 1));
            // t = 64: both keep exactly one KV head per rank.
            diff = act(mha, 1, 4096, 64, sp, Recompute::none, flash) - act(gqa, 1, 4096, 64, sp, Recompute::none, flash);
            EXPECT_REL(diff, 0.0);
        }
}

// SwiGLU (Shazeer 2020, arXiv 2002.05202): the MLP saves gate and up projections (f each)
// and their product, 3·2·s·b·f/t bytes, against GELU's FC1 output and GELU output,
// 2·2·s·b·f/t (Korthikanti's 16·sbh/t for f = 4h). Isolated by doubling f.
TEST(Activations, SwigluMlpTerm) {
    ModelSpec gelu = preset_model("gpt3-175b");
    gelu.arch = Arch::llama;
    ModelSpec swiglu = gelu;
    swiglu.activation = Activation::swiglu;
    const double s = 2048, b = 2;
    for (int t : {1, 4}) {
        for (int f : {8192, 12288}) {
            ModelSpec g1 = gelu, g2 = gelu, s1 = swiglu, s2 = swiglu;
            g1.ffn_hidden = s1.ffn_hidden = f;
            g2.ffn_hidden = s2.ffn_hidden = 2 * f;
            for (bool sp : {false, true}) {
                if (sp && t == 1) continue;
                EXPECT_REL(act(g2, 2, 2048, t, sp, Recompute::none, true) - act(g1, 2, 2048, t, sp, Recompute::none, true),
                           2.0 * 2 * s * b * f / t);
                EXPECT_REL(act(s2, 2, 2048, t, sp, Recompute::none, true) - act(s1, 2, 2048, t, sp, Recompute::none, true),
                           3.0 * 2 * s * b * f / t);
            }
            // Same f: SwiGLU keeps one more f-wide tensor than GELU.
            EXPECT_REL(act(s1, 2, 2048, t, false, Recompute::none, true) - act(g1, 2, 2048, t, false, Recompute::none, true),
                       2.0 * s * b * f / t);
        }
    }
}

// fp32 training stores 4-byte activations: every 2-byte term doubles, 1-byte dropout
// masks and 4-byte log-sum-exp stay (Korthikanti counts masks at 1 byte).
TEST(Activations, Fp32DoublesTwoByteTerms) {
    const ModelSpec m = preset_model("gpt3-175b");
    const double s = 2048, h = 12288, a = 96, t = 8, sbh = s * h;
    // t = 8, no SP, no flash, split by element width:
    // 2-byte: both norms' input and output 8sbh, Q/K/V/context 8sbh/t, softmax and dropout
    //         outputs 4as²b/t, MLP 16sbh/t;  1-byte: two dropout masks 2sbh + as²b/t.
    const double two_byte = sbh * (8 + 24 / t) + 4 * a * s * s / t;
    const double one_byte = 2 * sbh + a * s * s / t;
    EXPECT_REL(act(m, 1, 2048, 8, false, Recompute::none, false), two_byte + one_byte);
    EXPECT_REL(act(m, 1, 2048, 8, false, Recompute::none, false, Precision::fp32), 2 * two_byte + one_byte);
}

// MoE (Megatron-LM MoE layer, token-choice top-k routing, Fedus et al. 2021 / Mixtral
// Jiang et al. 2024 arXiv 2401.04088): each token is copied to k experts, so the expert
// inputs (k·h) and the expert MLP activations (k·3·f/t for SwiGLU) grow with k; the
// router keeps fp32 probabilities over all experts.
TEST(Activations, MoeGrowsWithTopK) {
    ModelSpec m = preset_model("mixtral-8x7b");
    const int seq = 4096;
    const double T = seq, e = 2, h = 4096, f = 14336;
    for (int t : {1, 2}) {
        double prev = 0;
        for (int k = 1; k <= 4; ++k) {
            m.top_k = k;
            const double bytes = act(m, 1, seq, t, false, Recompute::none, true);
            if (k > 1) {
                EXPECT_REL(bytes - prev, e * T * (h + 3 * f / t)) << "t " << t << " k " << k;
            }
            prev = bytes;
        }
    }
    // Router probabilities: 4 bytes × experts per token (sharded by t with SP).
    m.top_k = 2;
    ModelSpec m16 = m;
    m16.experts = 16;
    EXPECT_REL(act(m16, 1, seq, 2, true, Recompute::none, true) - act(m, 1, seq, 2, true, Recompute::none, true),
               4.0 * T * 8 / 2);
}

// ============================================================================================
// ptd-engine profile: the engine's named buffer list, fp32.
// ============================================================================================

TEST(Activations, EngineProfileIsItsBufferList) {
    for (const char* name : {"tiny-gpt", "tiny-llama", "gpt2-124m", "mixtral-8x7b"}) {
        const ModelSpec m = preset_model(name);
        for (int tp : {1, 2, 4})
            for (bool sp : {false, true}) {
                if (sp && tp == 1) continue;
                for (int b : {1, 3}) {
                    const int seq = std::min(m.seq_len, 512);
                    int64_t elements = 0;
                    for (const EngineBuffer& x : engine_layer_buffers(m, b, seq, tp, sp)) {
                        EXPECT_GE(x.elements, 0) << engine_buffer_name(x.id);
                        elements += x.elements;
                    }
                    EXPECT_REL(act(m, b, seq, tp, sp, Recompute::none, false, Precision::fp32,
                                   ActivationProfile::ptd_engine),
                               4.0 * (double)elements)
                        << name << " tp " << tp << " sp " << sp << " b " << b;
                    // Selective recompute keeps all but the attention probabilities [b, a/t, s, s].
                    const double probs = (double)b * (m.heads / tp) * seq * seq;
                    EXPECT_REL(act(m, b, seq, tp, sp, Recompute::selective, false, Precision::fp32,
                                   ActivationProfile::ptd_engine),
                               4.0 * ((double)elements - probs))
                        << name << " tp " << tp << " sp " << sp << " b " << b;
                    // Full recompute keeps only the layer input (sharded with SP).
                    EXPECT_REL(act(m, b, seq, tp, sp, Recompute::full, false, Precision::fp32,
                                   ActivationProfile::ptd_engine),
                               4.0 * b * seq * m.hidden / (sp ? tp : 1));
                }
            }
    }
    // The list itself for tiny-gpt (h 64, a 4, f 256, layernorm, gelu), b 2, s 64, t 2, no SP.
    const ModelSpec tiny = preset_model("tiny-gpt");
    std::vector<EngineBuffer> v = engine_layer_buffers(tiny, 2, 64, 2, false);
    const int64_t bs = 2 * 64;
    std::vector<std::pair<std::string, int64_t>> want = {
        {"ln1.input", bs * 64},  {"ln1.rstd", bs},        {"ln1.mean", bs},          {"ln1.output", bs * 64},
        {"attn.qkv", bs * 96},   {"attn.probs", 2 * 2 * 64 * 64},
        {"attn.context", bs * 32}, {"ln2.input", bs * 64}, {"ln2.rstd", bs},         {"ln2.mean", bs},
        {"ln2.output", bs * 64}, {"mlp.fc1", bs * 128},   {"mlp.act", bs * 128}};
    ASSERT_EQ(v.size(), want.size());
    for (size_t i = 0; i < v.size(); ++i) {
        EXPECT_EQ(std::string(engine_buffer_name(v[i].id)), want[i].first);
        EXPECT_EQ(v[i].elements, want[i].second) << want[i].first;
    }
    // tiny-llama (a 4, g 2, d 16, f 176, RMSNorm, SwiGLU): with t = 4 > g every rank keeps
    // one whole KV head; SP shards the norm inputs.
    const ModelSpec tl = preset_model("tiny-llama");
    auto find = [](const std::vector<EngineBuffer>& list, const char* name) -> int64_t {
        for (const EngineBuffer& x : list)
            if (std::string(engine_buffer_name(x.id)) == name) return x.elements;
        return -1;
    };
    v = engine_layer_buffers(tl, 1, 64, 4, true);
    EXPECT_EQ(find(v, "attn.qkv"), 64 * (1 + 2 * 1) * 16);  // q, k, v of one query and one kv head
    EXPECT_EQ(find(v, "ln1.input"), 64 * 64 / 4);
    EXPECT_EQ(find(v, "ln1.mean"), -1);
    EXPECT_EQ(find(v, "mlp.gate"), 64 * 44);
    EXPECT_EQ(find(v, "mlp.up"), 64 * 44);
    EXPECT_EQ(find(v, "mlp.fc1"), -1);
    v = engine_layer_buffers(tl, 1, 64, 2, false);
    EXPECT_EQ(find(v, "attn.qkv"), 64 * (2 + 2 * 1) * 16);  // two query heads, one kv head
}

// A job on the engine profile: stage activations are in-flight × (layers × buffer list +
// int32 token ids on the first stage) + the output buffers on the last, all fp32.
TEST(Activations, EngineProfileStages) {
    JobSpec job = load_asset("tiny-local.toml");  // tiny-gpt, cpu, tp2 pp2, b 2, m 4, fp32
    job.estimate.activation_profile = ActivationProfile::ptd_engine;
    expect_valid(job);
    const Estimate est = estimate_job(job);
    ASSERT_EQ(est.stages.size(), 2u);
    const ModelSpec& m = job.model;
    int64_t layer = 0, out = 0;
    for (auto& x : engine_layer_buffers(m, 2, 64, 2, false)) layer += x.elements;
    for (auto& x : engine_output_buffers(m, 2, 64, 2, (int)est.vocab_padded, false)) out += x.elements;
    const double T = 2 * 64;
    EXPECT_REL(est.stages[0].mem.activations, 2 * (2 * 4.0 * layer + 4.0 * T));
    EXPECT_REL(est.stages[1].mem.activations, 1 * (2 * 4.0 * layer) + 4.0 * out);
}

// Recompute on the engine profile: each layer keeps its kept list per micro-batch in
// flight, and the stage holds one working set (the recomputed buffers) on top. Selective
// (Korthikanti et al. 2022): the working set is the attention probabilities.
TEST(Activations, EngineProfileRecomputeKeepsListAndOneWorkingSet) {
    JobSpec job = load_asset("tiny-local.toml");  // tiny-gpt, cpu, tp2 pp2, b 2, m 4, fp32
    job.estimate.activation_profile = ActivationProfile::ptd_engine;
    const ModelSpec& m = job.model;
    auto bytes = [](const std::vector<EngineBuffer>& v) {
        double b = 0;
        for (const EngineBuffer& x : v) b += (double)x.bytes();
        return b;
    };
    for (Recompute rc : {Recompute::selective, Recompute::full}) {
        job.parallel.recompute = rc;
        expect_valid(job);
        const Estimate est = estimate_job(job);
        const double kept = bytes(engine_layer_buffers(m, 2, 64, 2, false, rc));
        const double working = bytes(engine_recompute_buffers(m, 2, 64, 2, false, rc));
        const double all = bytes(engine_layer_buffers(m, 2, 64, 2, false));
        EXPECT_REL(kept + working, all) << to_string(rc);
        const double out = bytes(engine_output_buffers(m, 2, 64, 2, (int)est.vocab_padded, false));
        EXPECT_REL(est.stages[0].mem.activations, 2 * (2 * kept + 4.0 * 2 * 64) + working) << to_string(rc);
        EXPECT_REL(est.stages[1].mem.activations, 1 * (2 * kept) + working + out) << to_string(rc);
    }
    const auto sel = engine_recompute_buffers(m, 2, 64, 2, false, Recompute::selective);
    ASSERT_EQ(sel.size(), 1u);
    EXPECT_EQ(sel[0].id, EngineBufferId::attn_probs);
    EXPECT_EQ(sel[0].dtype, EngineDType::f32);
    EXPECT_TRUE(engine_recompute_buffers(m, 2, 64, 2, false, Recompute::none).empty());
    // The dtype follows the precision: bf16 activations are 2 bytes, the norm statistics
    // stay f32 (4 bytes) in every precision.
    for (const EngineBuffer& x : engine_layer_buffers(m, 2, 64, 2, false, Recompute::none, EngineDType::bf16)) {
        const std::string n = engine_buffer_name(x.id);
        const bool stats = n.find("rstd") != std::string::npos || n.find("mean") != std::string::npos;
        EXPECT_EQ(x.bytes(), (stats ? 4 : 2) * x.elements) << n;
    }
    // Selective recompute in bf16: the recomputed probabilities are bf16 too.
    const auto sel16 = engine_recompute_buffers(m, 2, 64, 2, false, Recompute::selective, EngineDType::bf16);
    ASSERT_EQ(sel16.size(), 1u);
    EXPECT_EQ(sel16[0].dtype, EngineDType::bf16);
    EXPECT_EQ(engine_input_buffers(2, 64).at(0).dtype, EngineDType::i32);
}

// The engine's workspace list: what each stage holds once, by stage role; token staging
// is i32 and the loss buffers stay fp32 whatever the activation dtype.
TEST(Activations, EngineWorkspaceList) {
    const ModelSpec tl = preset_model("tiny-llama");  // h 64, a 4, g 2, d 16, f 176, RoPE, SwiGLU
    auto names = [](const std::vector<EngineBuffer>& v) {
        std::vector<std::string> n;
        for (const EngineBuffer& x : v) n.push_back(engine_buffer_name(x.id));
        return n;
    };
    const auto first = engine_workspace_buffers(tl, 2, 64, 2, true, true, false, true, 1000);
    EXPECT_EQ(names(first), (std::vector<std::string>{"workspace.full_rows", "workspace.d_residual",
                                                      "workspace.d_norm_output",
                                                      "workspace.dqkv", "workspace.dctx",
                                                      "workspace.dact", "workspace.dfc1", "workspace.dfc3",
                                                      "workspace.attention_backward", "workspace.rope_table",
                                                      "workspace.embedding", "workspace.tokens_staging"}));
    EXPECT_EQ(first[1].elements, 2 * 64 / 2 * 64);           // d_residual: R/t rows with SP
    EXPECT_EQ(first[3].elements, 2 * 64 * (2 + 2 * 1) * 16); // dqkv: R · (H_l + 2 G_l) · d
    EXPECT_EQ(first[8].elements, 1000);                      // as the backend states it
    EXPECT_EQ(first[9].elements, 64 * 16);                   // cos and sin [2, s, d/2]
    EXPECT_EQ(first.back().elements, 2 * 65);                // b · (s + 1) ids
    EXPECT_EQ(first.back().dtype, EngineDType::i32);
    // bf16/fp16: the backend's 16-bit operand scratch (as it states it) is listed last, f32.
    const auto half = engine_workspace_buffers(tl, 2, 64, 2, true, true, false, true, 1000, EngineDType::bf16, 777);
    EXPECT_EQ(half.back().id, EngineBufferId::ws_operand_scratch);
    EXPECT_EQ(half.back().elements, 777);
    EXPECT_EQ(half.back().dtype, EngineDType::f32);
    EXPECT_EQ(half.size(), first.size() + 1);
    const auto last = engine_workspace_buffers(preset_model("tiny-gpt"), 2, 64, 2, false, false, true, true, 10,
                                               EngineDType::bf16);
    const auto nl = names(last);
    EXPECT_EQ(std::count(nl.begin(), nl.end(), "workspace.rope_table"), 0);  // learned positions
    EXPECT_EQ(std::count(nl.begin(), nl.end(), "workspace.dfc3"), 0);        // GELU
    EXPECT_EQ(std::count(nl.begin(), nl.end(), "workspace.embedding"), 0);   // not the first stage
    for (const EngineBuffer& x : last) {
        if (x.id == EngineBufferId::ws_loss || x.id == EngineBufferId::ws_xent) {
            EXPECT_EQ(x.dtype, EngineDType::f32);
        } else if (x.id == EngineBufferId::ws_full_rows) {
            EXPECT_EQ(x.dtype, EngineDType::bf16);
        }
    }
    // tp = 1: the fused cross entropy needs no statistics buffer between all-reduces.
    const auto nl1 = names(engine_workspace_buffers(preset_model("tiny-gpt"), 2, 64, 1, false, false, true, true, 10));
    EXPECT_EQ(std::count(nl1.begin(), nl1.end(), "workspace.xent"), 0);
    EXPECT_EQ(std::count(nl1.begin(), nl1.end(), "workspace.loss"), 1);
    EXPECT_EQ(std::count(nl.begin(), nl.end(), "workspace.xent"), 1);  // tp = 2
    // A middle stage without layers holds only the stream temporaries.
    EXPECT_EQ(engine_workspace_buffers(tl, 1, 8, 1, false, false, false, false, 5).size(), 3u);
}

// ============================================================================================
// Model-state bytes per parameter.
// ============================================================================================

// Megatron Core developer guide, "Distributed Optimizer" (docs.nvidia.com/megatron-core/
// developer-guide/latest/distrib_optimizer.html), bytes per parameter, d = DP size:
//   16-bit params, 16-bit grads: 20 plain, 4 + 16/d distributed   (PTD: fp16)
//   16-bit params, fp32 grads:   18 plain, 6 + 12/d distributed   (PTD: bf16, whose grads
//                                                                  Megatron accumulates in fp32)
//   fp32 params, fp32 grads:     16 plain, 8 + 8/d distributed
// zero = 0 follows Megatron (PTD's default back end).
TEST(StateBytes, MegatronDistributedOptimizerTable) {
    for (double d : {1.0, 2.0, 8.0, 64.0}) {
        EXPECT_REL(state_bytes_per_param(Precision::fp16, Optimizer::adam, 0, false, d).total(), 20.0);
        EXPECT_REL(state_bytes_per_param(Precision::fp16, Optimizer::adam, 0, true, d).total(), 4 + 16 / d);
        EXPECT_REL(state_bytes_per_param(Precision::bf16, Optimizer::adamw, 0, false, d).total(), 18.0);
        EXPECT_REL(state_bytes_per_param(Precision::bf16, Optimizer::adamw, 0, true, d).total(), 6 + 12 / d);
        EXPECT_REL(state_bytes_per_param(Precision::fp32, Optimizer::adamw, 0, false, d).total(), 16.0);
        EXPECT_REL(state_bytes_per_param(Precision::fp32, Optimizer::adamw, 0, true, d).total(), 8 + 8 / d);
    }
    // Categories: bf16 keeps the fp32 main-grad buffer whole; only optimizer state shards.
    StateBytes b = state_bytes_per_param(Precision::bf16, Optimizer::adam, 0, true, 8);
    EXPECT_EQ(b.params, 2.0);
    EXPECT_EQ(b.grads, 4.0);
    EXPECT_REL(b.optimizer, 12.0 / 8);
    b = state_bytes_per_param(Precision::fp16, Optimizer::adam, 0, true, 8);
    EXPECT_EQ(b.params, 2.0);
    EXPECT_EQ(b.grads, 2.0);
    EXPECT_REL(b.optimizer, 16.0 / 8);
    // shard < 1 is treated as 1.
    EXPECT_REL(state_bytes_per_param(Precision::bf16, Optimizer::adam, 0, true, 0).total(), 18.0);
}

// Rajbhandari et al. 2020, "ZeRO" (arXiv 1910.02054), §3.1, §5 and Figure 1: mixed-precision Adam
// holds 2Ψ fp16 params + 2Ψ fp16 grads + KΨ optimizer states (K = 12: fp32 params,
// momentum, variance). Per parameter over N ranks: baseline DDP 16; P_os 4 + 12/N;
// P_os+g 2 + 14/N; P_os+g+p 16/N. (The DDP baseline is not zero = 0 here, which follows
// Megatron's 18/20 bytes; see the test above.)
TEST(StateBytes, ZeroPaperMixedPrecisionAdam) {
    for (Precision p : {Precision::bf16, Precision::fp16})
        for (double N : {1.0, 4.0, 64.0, 1024.0}) {
            EXPECT_REL(state_bytes_per_param(p, Optimizer::adam, 1, false, N).total(), 4 + 12 / N);
            EXPECT_REL(state_bytes_per_param(p, Optimizer::adam, 2, false, N).total(), 2 + 14 / N);
            EXPECT_REL(state_bytes_per_param(p, Optimizer::adam, 3, false, N).total(), 16 / N);
            const StateBytes s2 = state_bytes_per_param(p, Optimizer::adam, 2, false, N);
            EXPECT_EQ(s2.params, 2.0);
            EXPECT_REL(s2.grads, 2 / N);
            EXPECT_REL(s2.optimizer, 12 / N);
        }
    // The paper's worked example (Figure 1): Ψ = 7.5B, N = 64 → stage 1 31.4 GB, stage 2 16.6 GB,
    // stage 3 1.9 GB (GB = 1e9 bytes).
    const double psi = 7.5e9;
    EXPECT_NEAR(psi * state_bytes_per_param(Precision::fp16, Optimizer::adam, 1, false, 64).total() / 1e9, 31.4, 0.05);
    EXPECT_NEAR(psi * state_bytes_per_param(Precision::fp16, Optimizer::adam, 2, false, 64).total() / 1e9, 16.6, 0.05);
    EXPECT_NEAR(psi * state_bytes_per_param(Precision::fp16, Optimizer::adam, 3, false, 64).total() / 1e9, 1.9, 0.05);
    // ... and the 120 GB DDP baseline at 16 bytes: Megatron's bf16 zero = 0 is 2 bytes more.
    EXPECT_NEAR(psi * 16 / 1e9, 120.0, 1e-9);
}

// ============================================================================================
// Vocabulary padding.
// ============================================================================================

// Megatron-LM --make-vocab-size-divisible-by (default 128) × TP size. Narayanan et al. 2021
// count their GPT models with V = 51,200, i.e. 50257 rounded up to a multiple of 1024 (t = 8).
TEST(Vocab, Padding) {
    EXPECT_EQ(padded_vocab(50257, 128, 1), 50304);  // GPT-2 in Megatron / nanoGPT
    EXPECT_EQ(padded_vocab(50257, 128, 8), 51200);  // 50 × 1024
    EXPECT_EQ(padded_vocab(32000, 128, 1), 32000);
    EXPECT_EQ(padded_vocab(32000, 128, 4), 32256);  // 63 × 512
    EXPECT_EQ(padded_vocab(128256, 128, 8), 129024);  // 126 × 1024
    EXPECT_EQ(padded_vocab(128256, 1, 1), 128256);
    EXPECT_EQ(padded_vocab(7, 0, 0), 7);  // degenerate arguments act as 1
}

// ============================================================================================
// FLOPs per token.
// ============================================================================================

// Korthikanti et al. 2022 (arXiv 2205.05198), eq. (7): model FLOPs per iteration
//   72·B·L·s·h²·(1 + s/(6h) + V/(12·h·L))   (no recomputation counted)
// for a GPT layer (4h MLP, a·d = h), counting every s² attention score. Per token: ÷ B·s.
// The output layer uses the padded vocabulary V = 51200 (t = 8).
TEST(Flops, KorthikantiEq7Gpt3) {
    const ModelSpec m = preset_model("gpt3-175b");
    const double L = 96, s = 2048, h = 12288, V = 51200;
    const FlopsEstimate f = flops_per_token(m, Recompute::none, AttentionFlops::full, V);
    EXPECT_REL(f.model_per_token, 72 * L * h * h * (1 + s / (6 * h) + V / (12 * h * L)));
    EXPECT_REL(f.hardware_per_token, f.model_per_token);
    EXPECT_REL(f.attention_per_token, 12 * L * s * h);
    EXPECT_REL(f.params_matmul, L * 12 * h * h + V * h);
    EXPECT_EQ(f.convention, AttentionFlops::full);
}

// Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
// Using Megatron-LM" (arXiv 2104.04473), eq. (3): with full activation recomputation
// (one extra forward pass) F = 96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h)) per iteration — the
// hardware FLOPs. Per token: ÷ B·s. Model FLOPs stay at eq. 7.
TEST(Flops, NarayananEq3FullRecompute) {
    const ModelSpec m = preset_model("gpt3-175b");
    const double L = 96, s = 2048, h = 12288, V = 51200;
    const FlopsEstimate f = flops_per_token(m, Recompute::full, AttentionFlops::full, V);
    EXPECT_REL(f.hardware_per_token, 96 * L * h * h * (1 + s / (6 * h) + V / (16 * L * h)));
    EXPECT_REL(f.model_per_token, 72 * L * h * h * (1 + s / (6 * h) + V / (12 * h * L)));
}

// Selective recompute (Korthikanti §5) re-runs the attention core forward (QKᵀ and
// softmax·V: 4·a·d·s FLOPs per token and layer under the full convention, half under the
// causal one) once more; hardware FLOPs count that pass whether or not flash attention is
// used (flash's own recomputation inside its backward kernel is not counted as a pass).
TEST(Flops, SelectiveRecomputeAddsAttentionForward) {
    const ModelSpec m = preset_model("gpt3-175b");
    const double L = 96, s = 2048, h = 12288;
    FlopsEstimate f = flops_per_token(m, Recompute::selective, AttentionFlops::full, 51200);
    EXPECT_REL(f.hardware_per_token - f.model_per_token, 4 * L * h * s);
    f = flops_per_token(m, Recompute::selective, AttentionFlops::causal, 51200);
    EXPECT_REL(f.hardware_per_token - f.model_per_token, 2 * L * h * s);
    f = flops_per_token(m, Recompute::none, AttentionFlops::full, 51200);
    EXPECT_REL(f.hardware_per_token, f.model_per_token);
}

// PaLM (Chowdhery et al. 2022, arXiv 2204.02311), appendix B: model FLOPs per token
// 6N + 12·L·H·Q·T (N matmul parameters, H heads, Q head dim, T sequence). Generalised to
// GQA/SwiGLU by letting N be the matmul weights the token actually uses (derived here
// from count_parameters: everything but norms and the embedding lookup, plus the padded
// output layer). The causal convention (Megatron-LM today) halves exactly the attention
// term.
TEST(Flops, PalmFormLlama3AndCausal) {
    const ModelSpec m = preset_model("llama3-8b");
    const ParamCounts c = count_parameters(m);
    ASSERT_FALSE(m.bias);
    ASSERT_FALSE(m.tied_embeddings);
    const double L = m.layers, H = m.heads, Q = m.head_dim(), T = m.seq_len, h = m.hidden;
    for (int tp : {1, 8}) {
        const double V = (double)padded_vocab(m.vocab, 128, tp);
        const double N = (double)c.non_embedding - L * c.norms - c.final_norm + V * h;
        // Independently from the shape: Q, O (h×h), K, V (h×g·d), three h×f MLP matrices.
        EXPECT_REL(N, L * (2 * h * h + 2 * h * m.kv_heads * Q + 3 * h * m.ffn_hidden) + V * h);
        const FlopsEstimate full = flops_per_token(m, Recompute::none, AttentionFlops::full, V);
        const FlopsEstimate causal = flops_per_token(m, Recompute::none, AttentionFlops::causal, V);
        EXPECT_REL(full.params_matmul, N);
        EXPECT_REL(full.model_per_token, 6 * N + 12 * L * H * Q * T);
        EXPECT_REL(causal.model_per_token, 6 * N + 6 * L * H * Q * T);
        EXPECT_REL(causal.attention_per_token, 0.5 * full.attention_per_token);
        EXPECT_EQ(causal.convention, AttentionFlops::causal);
    }
}

// MoE: a token uses top_k experts' MLP and the router (h × experts), so N counts
// mlp_active (count_parameters), not every expert (Mixtral: ~12.9B active of 46.7B).
TEST(Flops, MoeCountsActiveExperts) {
    const ModelSpec m = preset_model("mixtral-8x7b");
    const ParamCounts c = count_parameters(m);
    const double V = 32000, L = m.layers, h = m.hidden;
    const FlopsEstimate f = flops_per_token(m, Recompute::none, AttentionFlops::causal, V);
    EXPECT_REL(f.params_matmul, L * (c.attention + c.mlp_active) + V * h);
    EXPECT_REL(f.params_matmul, L * (2 * h * h + 2 * h * 1024 + 2 * 3 * h * 14336 + 8 * h) + V * h);
    EXPECT_REL(f.model_per_token, 6 * f.params_matmul + 6 * L * m.heads * m.head_dim() * m.seq_len);
}

// ============================================================================================
// Parameters per stage and rank.
// ============================================================================================

double sum_params(const Estimate& e) {
    double s = 0;
    for (const StageEstimate& st : e.stages) s += st.params_count;
    return s;
}

// Llama 2 7B (h 4096, a = g = 32, f 11008, V 32000, untied, RMSNorm, no biases) on
// tp 4 × pp 2: per rank and layer (4h² + 3hf)/t sharded + 2h replicated norms; the padded
// vocab (32256 for t = 4, Megatron) on both the embedding (first stage) and the output
// layer (last stage, with the final norm).
TEST(Params, LlamaStagesReconstructCount) {
    const JobSpec job = default_job(presets());
    ASSERT_EQ(job.model.name, "llama2-7b");
    ASSERT_EQ(job.parallel.tp, 4);
    ASSERT_EQ(job.parallel.pp, 2);
    const Estimate est = estimate_job(job);
    ASSERT_EQ(est.stages.size(), 2u);
    const double h = 4096, f = 11008, t = 4, Vp = 32256, L = 32;
    EXPECT_EQ(est.vocab_padded, Vp);
    const double layer = (4 * h * h + 3 * h * f) / t + 2 * h;
    EXPECT_REL(est.stages[0].params_count, 16 * layer + Vp * h / t);
    EXPECT_REL(est.stages[1].params_count, 16 * layer + h + Vp * h / t);
    EXPECT_TRUE(est.stages[0].has_embedding);
    EXPECT_FALSE(est.stages[0].has_output);
    EXPECT_FALSE(est.stages[1].has_embedding);  // untied: no copy
    EXPECT_TRUE(est.stages[1].has_output);
    // Σ stages × t, minus the replicated norms counted t times, = the model + vocab padding.
    const ParamCounts c = count_parameters(job.model);
    EXPECT_EQ(est.params.total, c.total);
    EXPECT_REL(sum_params(est) * t - (t - 1) * (L * 2 * h + h), (double)c.total + 2 * (Vp - 32000) * h);
}

// GPT-3 175B on tp 8 × pp 8 (Narayanan Table 1): tied embeddings, learned positions,
// biases, LayerNorm. Per rank and layer: (12h² + 7h)/t sharded (QKV and FC1 weights and
// biases) + 6h replicated (two LayerNorms' weight and bias, the row-parallel output
// biases). First stage: V·h/t word + s·h position embeddings; last: final LayerNorm and
// the tied copy of the word embedding (Megatron keeps it on the last stage when p > 1).
TEST(Params, GptStagesReconstructCount) {
    const JobSpec job = load_asset("gpt3-175b-a100.toml");
    const Estimate est = estimate_job(job);
    ASSERT_EQ(est.stages.size(), 8u);
    const double h = 12288, s = 2048, t = 8, Vp = 51200, L = 96;
    EXPECT_EQ(est.vocab_padded, Vp);
    const double layer = (12 * h * h + 7 * h) / t + 6 * h;
    for (int i = 0; i < 8; ++i) {
        double want = 12 * layer;
        if (i == 0) want += Vp * h / t + s * h;
        if (i == 7) want += 2 * h + Vp * h / t;
        EXPECT_REL(est.stages[(size_t)i].params_count, want) << "stage " << i;
        EXPECT_EQ(est.stages[(size_t)i].layers, 12);
        EXPECT_EQ(est.stages[(size_t)i].has_embedding, i == 0 || i == 7) << i;
        EXPECT_EQ(est.stages[(size_t)i].has_output, i == 7) << i;
    }
    const ParamCounts c = count_parameters(job.model);
    const double replicated = L * 6 * h + s * h + 2 * h;
    EXPECT_REL(sum_params(est) * t - (t - 1) * replicated - Vp * h /* tied copy */,
               (double)c.total + (Vp - 50257) * h);
    // With p = 1 the tied output layer shares the embedding: no copy.
    JobSpec one = job;
    one.parallel.pp = 1;
    one.parallel.dp = 128;
    one.training.global_batch = 1536 - 1536 % 128;
    expect_valid(one);
    const Estimate e1 = estimate_job(one);
    ASSERT_EQ(e1.stages.size(), 1u);
    EXPECT_REL(e1.stages[0].params_count, 96 * layer + Vp * h / t + s * h + 2 * h);
}

// GQA with t > g (Llama 2 70B, g = 8, t = 16): each rank keeps one whole KV head, so the
// K and V projections are replicated t/g = 2 times (2·h·d per rank instead of 2·h·g·d/t).
// Llama 2 70B on 8 nodes of 8 at TP 16 (two nodes a TP group), PP 4, DP 1, global batch 16.
JobSpec llama2_70b_tp16_job() {
    JobSpec job = default_job(presets());
    job.model = preset_model("llama2-70b");
    job.cluster.nodes = 8;
    job.parallel = {};
    job.parallel.tp = 16;
    job.parallel.pp = 4;
    job.parallel.dp = 1;
    job.training.global_batch = 16;
    return job;
}

TEST(Params, GqaReplicatesKvWhenTpExceedsKvHeads) {
    JobSpec job = llama2_70b_tp16_job();
    job.parallel.recompute = Recompute::full;
    expect_valid(job);
    const Estimate est = estimate_job(job);
    const double h = 8192, f = 28672, t = 16, d = 128, Vp = (double)padded_vocab(32000, 128, 16);
    const double layer = 2 * h * h / t + 2 * h * d + 3 * h * f / t + 2 * h;
    EXPECT_REL(est.stages[1].params_count, 20 * layer);
    EXPECT_REL(est.stages[0].params_count, 20 * layer + Vp * h / t);
    bool noted = false;
    for (const std::string& n : est.notes) noted = noted || n.find("kv_heads 8") != std::string::npos;
    EXPECT_TRUE(noted);
}

// A TP group wider than a node sends every layer's collectives over the NICs: the estimate says
// so, with the TP time it costs; within a node, or inside a GB200 NVLink domain, it says nothing.
TEST(Notes, TpGroupAcrossNodesIsNamed) {
    JobSpec job = llama2_70b_tp16_job();
    expect_valid(job);
    auto tp_note = [](const Estimate& est) {
        for (const std::string& n : est.notes)
            if (n.find("each TP group of") != std::string::npos) return n;
        return std::string();
    };
    const Estimate wide = estimate_job(job);
    const std::string note = tp_note(wide);
    ptd_test::expect_mentions(note, {"each TP group of 16 spans 2 nodes (8 GPUs each)", "cross the NICs", "tp ≤ 8"});
    job.parallel.tp = 8;
    job.parallel.dp = 2;
    expect_valid(job);
    EXPECT_EQ(tp_note(estimate_job(job)), "");
}

// ============================================================================================
// Pipeline stages: in-flight micro-batches, first/middle/last extras.
// ============================================================================================

// Narayanan et al. 2021 §2.2.1 (1F1B): stage i holds at most p − i micro-batches' activations
// (m if fewer). Korthikanti §4.2.3: first stage = L layers' worth regardless of p; the
// first stage adds token ids and the embedding dropout mask, the last the final-norm
// input/output and the logits at the vocab-parallel cross entropy's peak: the 16-bit
// logits and their fp32 copy, (2 + 4)·s·b·V/t.
// GPT-3 job: fp16, t 8, p 8, m 96, full recompute, no flash attention (as in 2021).
TEST(Pipeline, FirstMiddleLastGpt3) {
    JobSpec job = load_asset("gpt3-175b-a100.toml");
    ASSERT_EQ(job.parallel.recompute, Recompute::full);
    job.training.flash_attention = false;
    const Estimate est = estimate_job(job);
    ASSERT_EQ(est.micro_batches, 96);
    const double s = 2048, b = 1, h = 12288, a = 96, t = 8, Vp = 51200, sbh = s * b * h;
    const double per_layer = 2 * sbh;  // full recompute: layer input
    // During the backward one layer is recomputed: its Table 2 set exists in full, of which
    // the input is already counted above.
    const double working = sbh * (10 + 24 / t + 5 * a * s / (h * t)) - per_layer;
    // ubwd: without flash attention the backward holds the probabilities' and the scores'
    // gradients (2 × 2·b·(a/t)·s² bytes), on the last stage only beyond the logits' peak.
    const double score_grads = 2 * 2 * b * (a / t) * s * s, logits = (2 + 4) * s * b * Vp / t;
    for (int i = 0; i < 8; ++i) {
        const StageEstimate& st = est.stages[(size_t)i];
        EXPECT_EQ(st.in_flight, 8 - i) << i;
        double want = (8 - i) * (12 * per_layer + (i == 0 ? 4 * s * b + sbh : 0.0)) + working + score_grads;
        if (i == 7) want += 2 * 2 * sbh + logits - std::min(score_grads, logits);
        EXPECT_REL(st.mem.activations, want) << "stage " << i;
        EXPECT_REL(st.act_per_microbatch, 12 * per_layer + (i == 0 ? 4 * s * b + sbh : 0.0)) << i;
    }
    // Middle stages differ only by in-flight micro-batches.
    EXPECT_REL(est.stages[3].mem.activations - est.stages[4].mem.activations, 12 * per_layer);
    // m < p: every stage holds at most m micro-batches.
    JobSpec few = job;
    few.training.global_batch = 64;  // m = 64 / 16 = 4
    expect_valid(few);
    const Estimate e4 = estimate_job(few);
    ASSERT_EQ(e4.micro_batches, 4);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(e4.stages[(size_t)i].in_flight, std::min(8 - i, 4)) << i;
    EXPECT_REL(e4.stages[0].mem.activations, 4 * (12 * per_layer + 4 * s * b + sbh) + working + score_grads);
}

// Interleaved 1F1B (Narayanan §2.2.2; Korthikanti §4.2.3): with v chunks per stage and
// m ≥ p the first stage holds L·(1 + (p − 1)/(p·v)) layers' activations. Llama 3 70B job:
// p 4, v 5, t 8, SP, selective, flash, bf16, m 256 → 80·(1 + 3/20) = 92 layers.
TEST(Pipeline, InterleavedFirstStage) {
    JobSpec job = load_asset("llama3-70b-h100.toml");
    job.training.flash_attention = true;
    const Estimate est = estimate_job(job);
    ASSERT_EQ(est.micro_batches, 256);
    const double p = 4, v = 5, L = 80, T = 8192;
    const double per_layer = act(job.model, 1, 8192, 8, true, Recompute::selective, true);
    // Selective: the layer whose core attention is being recomputed also holds its flash
    // log-sum-exp (4·b·s·a/t bytes) during the backward.
    const double working = 4 * T * 64 / 8;
    const double layers_held = L * (1 + (p - 1) / (p * v));
    EXPECT_REL(layers_held, 92.0);
    // Token ids (int32) belong to the first model chunk: one in v of the held chunks.
    const double chunks = layers_held / (L / (p * v));  // 23 chunks of 4 layers
    EXPECT_REL(est.stages[0].mem.activations, layers_held * per_layer + chunks * 4 * T / v + working);
    EXPECT_REL(est.stages[0].in_flight, layers_held / (L / p));
    // Last stage: (v − 1)·p + 1 chunks of L/(p·v) layers, plus the output terms.
    const double Vp = 129024, h = 8192;
    EXPECT_REL(est.stages[3].mem.activations, 17 * 4 * per_layer + 2 * 2 * T * h / 8 + (2 + 4) * T * Vp / 8 + working);
    // m < p: at most m micro-batches (m·v chunks).
    JobSpec few = job;
    few.training.global_batch = 4;  // m = 2
    expect_valid(few);
    const Estimate e2 = estimate_job(few);
    EXPECT_REL(e2.stages[0].in_flight, 2.0);
    EXPECT_REL(e2.stages[0].mem.activations, 2 * (20 * per_layer + 4 * T) + working);
}

// Explicit layers_per_stage [1, 2, 2, 3] on an 8-layer model: layer parameters scale with
// the stage's layers, and the worst stage is the true maximum.
TEST(Pipeline, UnevenSplit) {
    JobSpec job = default_job(presets());  // llama2-7b shape, 32 H100, tp 4
    job.model.layers = 8;
    job.parallel.pp = 4;
    job.parallel.dp = 2;
    job.parallel.layers_per_stage = {1, 2, 2, 3};
    expect_valid(job);
    const Estimate est = estimate_job(job);
    ASSERT_EQ(est.stages.size(), 4u);
    const double h = 4096, t = 4, Vp = 32256;
    const double one_layer = est.stages[0].params_count - Vp * h / t;
    EXPECT_REL(one_layer, (4 * h * h + 3 * h * 11008) / t + 2 * h);
    EXPECT_REL(est.stages[1].params_count, 2 * one_layer);
    EXPECT_REL(est.stages[2].params_count, 2 * one_layer);
    EXPECT_REL(est.stages[3].params_count - h - Vp * h / t, 3 * one_layer);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(est.stages[(size_t)i].layers, job.parallel.layers_per_stage[(size_t)i]);
    int argmax = 0;
    for (int i = 1; i < 4; ++i)
        if (est.stages[(size_t)i].mem.total() > est.stages[(size_t)argmax].mem.total()) argmax = i;
    EXPECT_EQ(est.worst_stage, argmax);
    // The planner's fast path sees the same worst stage.
    const EstimateContext ctx = make_estimate_context(job);
    const LayoutScore fast = evaluate_layout(ctx, layout_choice_of(job), job.parallel.layers_per_stage, nullptr);
    EXPECT_EQ(fast.worst_stage, est.worst_stage);
    EXPECT_REL(fast.peak_bytes, est.stages[(size_t)est.worst_stage].mem.total());
}

// Regression: an explicit, unbalanced layers_per_stage must make the fast path (detail ==
// nullptr) evaluate every stage. With pp = 4 the balanced-split candidates are {0, 1, 3}
// when layers % 4 ∈ {0, 2, 3}; a heavy stage 2 ([1, 1, 5, 1]) was once missed, giving a
// lower peak, the wrong worst stage and a shorter step than the detailed evaluation.
TEST(Pipeline, FastPathSeesHeavyThirdStageOfFour) {
    JobSpec job = default_job(presets());
    job.model.layers = 8;
    job.parallel.pp = 4;
    job.parallel.dp = 2;
    job.parallel.layers_per_stage = {1, 1, 5, 1};
    expect_valid(job);
    const EstimateContext ctx = make_estimate_context(job);
    Estimate est;
    const LayoutScore slow = evaluate_layout(ctx, layout_choice_of(job), job.parallel.layers_per_stage, &est);
    const LayoutScore fast = evaluate_layout(ctx, layout_choice_of(job), job.parallel.layers_per_stage, nullptr);
    EXPECT_EQ(slow.worst_stage, 2);
    EXPECT_EQ(fast.worst_stage, slow.worst_stage);
    EXPECT_REL(fast.peak_bytes, slow.peak_bytes);
    EXPECT_REL(fast.step_s, slow.step_s);
}

// ============================================================================================
// MoE parameters and state.
// ============================================================================================

JobSpec mixtral_job(int ep) {
    JobSpec job = default_job(presets());
    job.model = preset_model("mixtral-8x7b");
    job.cluster.nodes = 8;  // 64 H100
    job.parallel = {};
    job.parallel.tp = 2;
    job.parallel.dp = 32;
    job.parallel.ep = ep;
    job.parallel.distributed_optimizer = true;
    job.parallel.sequence_parallel = true;
    job.parallel.recompute = Recompute::full;
    job.training.micro_batch = 1;
    job.training.global_batch = 64;
    return job;
}

// Megatron-LM MoE (expert parallelism, Lepikhin et al. 2020 GShard arXiv 2006.16668): each
// EP rank holds experts/ep experts; attention, norms and router are dense and replicated
// over EP. Expert optimizer state shards over the expert-data-parallel group dp·cp/ep.
TEST(Moe, ExpertParamsDivideByEp) {
    const double h = 4096, f = 14336, t = 2, E = 8, L = 32, d = 128, Vp = 32000;
    const double dense_layer = (2 * h * h + 2 * h * 8 * d) / t + 2 * h + h * E;
    const double expert = 3 * h * f / t;
    for (int ep : {1, 2, 4, 8}) {
        const JobSpec job = mixtral_job(ep);
        expect_valid(job);
        const Estimate est = estimate_job(job);
        ASSERT_EQ(est.stages.size(), 1u);
        const StageEstimate& st = est.stages[0];
        const double dense = L * dense_layer + 2 * Vp * h / t + h;
        const double experts = L * E / ep * expert;
        EXPECT_REL(st.params_count, dense + experts) << "ep " << ep;
        // bf16, distributed optimizer: 2 + 4 bytes whole, 12 sharded over dp (dense) and dp/ep (experts).
        EXPECT_REL(st.mem.params, 2 * (dense + experts));
        EXPECT_REL(st.mem.grads, 4 * (dense + experts));
        EXPECT_REL(st.mem.optimizer, 12 * dense / 32 + 12 * experts / (32.0 / ep)) << "ep " << ep;
    }
}

// ============================================================================================
// Overheads.
// ============================================================================================

TEST(Overheads, CpuPresetHasNoCudaContextOrNccl) {
    const JobSpec job = load_asset("tiny-local.toml");
    ASSERT_EQ(job.cluster.gpu.name, "cpu");
    const Estimate est = estimate_job(job);
    for (const StageEstimate& st : est.stages) {
        EXPECT_EQ(st.mem.cuda_context, 0.0);
        EXPECT_EQ(st.mem.nccl, 0.0);
    }
}

TEST(Overheads, ContextNcclFragmentationHeadroomFromJob) {
    JobSpec job = default_job(presets());  // tp 4, pp 2, dp 4: three communicators
    Estimate est = estimate_job(job);
    for (const StageEstimate& st : est.stages) {
        EXPECT_REL(st.mem.cuda_context, 0.5 * kGiB);
        EXPECT_REL(st.mem.nccl, 3 * 0.5 * kGiB);
        EXPECT_REL(st.mem.fragmentation, 0.05 * (st.mem.model_states() + st.mem.activations + st.mem.temp));
    }
    EXPECT_REL(est.capacity_bytes, 79.6 * kGiB);
    EXPECT_REL(est.usable_bytes, est.capacity_bytes);
    job.estimate.cuda_context_gib = 1.25;
    job.estimate.nccl_gib = 0.25;
    job.estimate.fragmentation = 0.1;
    job.estimate.headroom = 0.1;
    est = estimate_job(job);
    for (const StageEstimate& st : est.stages) {
        EXPECT_REL(st.mem.cuda_context, 1.25 * kGiB);
        EXPECT_REL(st.mem.nccl, 3 * 0.25 * kGiB);
        EXPECT_REL(st.mem.fragmentation, 0.1 * (st.mem.model_states() + st.mem.activations + st.mem.temp));
        EXPECT_REL(st.mem.total(), st.mem.model_states() + st.mem.activations + st.mem.temp + st.mem.cuda_context +
                                       st.mem.nccl + st.mem.fragmentation);
    }
    EXPECT_REL(est.usable_bytes, 0.9 * 79.6 * kGiB);
    EXPECT_EQ(est.fits, est.stages[(size_t)est.worst_stage].mem.total() <= est.usable_bytes);

    // Tied embeddings with p > 1: first and last stage join the embedding group as well.
    const Estimate gpt = estimate_job(load_asset("gpt3-175b-a100.toml"));
    for (int i = 0; i < 8; ++i)
        EXPECT_REL(gpt.stages[(size_t)i].mem.nccl, (i == 0 || i == 7 ? 4 : 3) * 0.5 * kGiB) << i;
}

// Temporary buffers (estimate.cpp evaluate_stage): with SP the TP region gathers the whole
// sequence (e·b·s·h); with p > 1 one send and one receive buffer of the stage boundary
// activation (2·e·b·s·h/t with SP); ZeRO-1/2 add DeepSpeed's reduce and all-gather buckets
// (2 × min(bucket, params) elements in the training dtype); every GPU stage holds PyTorch's
// cuBLAS workspace (32 MiB on the default job's H100) and, under a stack that runs Transformer
// Engine (the default job's Megatron-LM of today), TE's own (32 MiB; test_memory checks it).
TEST(Overheads, TempBuffers) {
    JobSpec job = default_job(presets());  // bf16, tp 4, pp 2, SP, zero 1, b 1, s 4096
    ASSERT_EQ(job.cluster.gpu.name, "h100-sxm");
    job.estimate.cublas_workspace_mib = 0;  // the workspace has its own test
    const double T = 4096, h = 4096, t = 4, te = 32.0 * 1024 * 1024;
    Estimate est = estimate_job(job);
    for (const StageEstimate& st : est.stages)
        EXPECT_REL(st.mem.temp, 2 * T * h + 2 * 2 * T * h / t + 2 * 2 * std::min(5e8, st.params_count) + te);
    job.estimate.zero_bucket_elements = 1e6;
    est = estimate_job(job);
    for (const StageEstimate& st : est.stages) EXPECT_REL(st.mem.temp, 2 * T * h + 2 * 2 * T * h / t + 2 * 2 * 1e6 + te);
    job.parallel.zero = 0;
    job.parallel.sequence_parallel = false;
    est = estimate_job(job);
    for (const StageEstimate& st : est.stages) EXPECT_REL(st.mem.temp, 2 * 2 * T * h + te);
}

// ============================================================================================
// The time model: identities that hold whatever the fitted constants are.
// ============================================================================================

// GEMM efficiency: gemm_eff_max · Π d/(d + gemm_half_dim) over the three dimensions.
TEST(Time, GemmEfficiencyFormula) {
    const TimeModelConstants& c = time_model_constants();
    auto f = [&](double d) { return d / (d + c.gemm_half_dim); };
    EXPECT_REL(gemm_efficiency(4096, 8192, 1024), c.gemm_eff_max * f(4096) * f(8192) * f(1024));
    EXPECT_REL(gemm_efficiency(c.gemm_half_dim, 1e12, 1e12), c.gemm_eff_max * 0.5);
    EXPECT_LT(gemm_efficiency(64, 64, 64), gemm_efficiency(8192, 8192, 8192));
    EXPECT_LE(gemm_efficiency(1e9, 1e9, 1e9), c.gemm_eff_max);
}

double stage_time_per_mb(const StageEstimate& st) {
    return st.fwd_s + st.bwd_s + st.recompute_s + st.tp_s + st.cp_s + st.ep_s + st.p2p_s;
}

// Pipeline schedule (Narayanan §2.2): m micro-batches through the slowest stage plus a
// bubble: what the schedule simulation (timeline.h) leaves, (p − 1)/v of that stage's
// micro-batch time when all stages are equal; tokens/s and MFU/HFU follow from
// the step time (PaLM appendix B: MFU = tokens/s × FLOPs per token / (chips × peak)).
TEST(Time, ScheduleAndThroughputIdentities) {
    for (const char* name : {"gpt3-175b-a100.toml", "llama3-70b-h100.toml", "llama3-8b-h100.toml", "tiny-local.toml"}) {
        const JobSpec job = load_asset(name);
        const Estimate est = estimate_job(job);
        const int p = job.parallel.pp, v = job.parallel.vpp;
        size_t slow = 0;
        for (size_t i = 1; i < est.stages.size(); ++i)
            if (stage_time_per_mb(est.stages[i]) > stage_time_per_mb(est.stages[slow])) slow = i;
        const StageEstimate& w = est.stages[slow];
        const double m = est.micro_batches;
        EXPECT_EQ(est.micro_batches, job.training.global_batch / (job.training.micro_batch * job.parallel.dp));
        EXPECT_REL(est.time.compute, m * (w.fwd_s + w.bwd_s + w.recompute_s)) << name;
        EXPECT_REL(est.time.tp_comm, m * w.tp_s) << name;
        EXPECT_REL(est.time.pp_comm, m * w.p2p_s) << name;
        // The bubble is what the schedule simulation leaves beyond m micro-batches through the
        // slowest stage; (p − 1)/v of one such micro-batch when all stages are equal, more
        // when the first/last stages (embedding, output layer) differ.
        EXPECT_REL(est.time.bubble, est.pipeline_s - m * stage_time_per_mb(w)) << name;
        // Fill and drain pass through faster stages too, so 1F1B's bubble is at most the
        // closed form's (p − 1) slowest-stage micro-batches.
        if (v == 1) {
            EXPECT_LE(est.time.bubble, (p - 1.0) * stage_time_per_mb(w) * (1 + 1e-12)) << name;
        }
        EXPECT_REL(est.step_s, est.time.total()) << name;
        EXPECT_REL(est.tokens_per_s * est.step_s, (double)job.training.global_batch * job.model.seq_len) << name;
        const FlopsEstimate f = flops_per_token(job.model, job.parallel.recompute, job.estimate.attention_flops, est.vocab_padded);
        EXPECT_REL(est.flops.model_per_token, f.model_per_token) << name;
        EXPECT_REL(est.flops.hardware_per_token, f.hardware_per_token) << name;
        const double world = job.world_size();
        EXPECT_REL(est.peak_tflops, job.cluster.gpu.peak_tflops(job.training.precision)) << name;
        EXPECT_REL(est.mfu, est.tokens_per_s * f.model_per_token / (world * est.peak_tflops * 1e12)) << name;
        EXPECT_REL(est.hfu, est.tokens_per_s * f.hardware_per_token / (world * est.peak_tflops * 1e12)) << name;
        EXPECT_REL(est.model_tflops_per_gpu, est.mfu * est.peak_tflops) << name;
        EXPECT_GT(est.step_s, 0) << name;
    }
}

// ============================================================================================
// Properties over random valid layouts.
// ============================================================================================

std::string describe(const JobSpec& j) {
    std::ostringstream o;
    const ParallelSpec& p = j.parallel;
    o << j.model.name << " on " << j.world_size() << "×" << j.cluster.gpu.name << ": tp " << p.tp << " pp " << p.pp
      << " dp " << p.dp << " cp " << p.cp << " ep " << p.ep << " vpp " << p.vpp << " zero " << p.zero << " distopt "
      << p.distributed_optimizer << " sp " << p.sequence_parallel << " rc " << to_string(p.recompute) << " order "
      << p.order << " lps [";
    for (int l : p.layers_per_stage) o << l << ' ';
    o << "] b " << j.training.micro_batch << " gb " << j.training.global_batch << ' '
      << to_string(j.training.precision) << ' ' << to_string(j.training.optimizer) << " flash "
      << j.training.flash_attention << ' ' << to_string(j.estimate.activation_profile) << ' '
      << to_string(j.estimate.attention_flops);
    return o.str();
}

std::vector<JobSpec> base_jobs() {
    std::vector<JobSpec> v;
    v.push_back(default_job(presets()));
    v.push_back(tiny_local_job(presets()));
    for (const char* name : {"gpt2-124m-local.toml", "llama3-8b-h100.toml", "llama3-70b-h100.toml", "gpt3-175b-a100.toml"})
        v.push_back(load_asset(name));
    v.push_back(mixtral_job(1));
    JobSpec q = default_job(presets());  // QKV biases, 4 KV heads, 28 layers
    q.model = preset_model("qwen2-7b");
    q.model.seq_len = 4096;
    q.cluster.nodes = 2;
    v.push_back(q);
    JobSpec tl = tiny_local_job(presets());
    tl.model = preset_model("tiny-llama");
    v.push_back(tl);
    return v;
}

// A random layout of `job`'s cluster; false when validate_job rejects it.
bool randomize(JobSpec& job, std::mt19937& rng) {
    auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
    auto coin = [&] { return pick(2) == 1; };
    static const int kTp[] = {1, 2, 4, 8}, kPp[] = {1, 2, 3, 4, 6, 8}, kCp[] = {1, 1, 2}, kEp[] = {1, 2, 4, 8};
    static const char* kOrders[] = {"tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "dp-tp-cp-ep-pp", "tp-ep-dp-pp-cp", "pp-ep-dp-cp-tp"};
    ParallelSpec& p = job.parallel;
    const int world = job.world_size();
    p.tp = kTp[pick(4)];
    p.pp = kPp[pick(6)];
    p.cp = kCp[pick(3)];
    if (world % (p.tp * p.pp * p.cp) != 0) return false;
    p.dp = world / (p.tp * p.pp * p.cp);
    p.vpp = p.pp > 1 && pick(3) == 0 ? 2 + pick(3) : 1;
    p.ep = job.model.experts > 1 ? kEp[pick(4)] : 1;
    p.zero = p.pp > 1 ? pick(2) : pick(4);
    p.distributed_optimizer = p.zero == 0 && coin();
    p.sequence_parallel = p.tp > 1 && coin();
    p.recompute = (Recompute)pick(3);
    p.order = kOrders[pick(5)];
    p.layers_per_stage.clear();
    const int L = job.model.layers;
    if (p.pp > 1 && pick(3) == 0) {
        const int n = p.pp * p.vpp;
        if (n > L) return false;
        std::vector<int> cuts(L - 1);
        std::iota(cuts.begin(), cuts.end(), 1);
        std::shuffle(cuts.begin(), cuts.end(), rng);
        cuts.resize(n - 1);
        std::sort(cuts.begin(), cuts.end());
        int prev = 0;
        for (int c : cuts) {
            p.layers_per_stage.push_back(c - prev);
            prev = c;
        }
        p.layers_per_stage.push_back(L - prev);
    }
    TrainingSpec& t = job.training;
    t.flash_attention = coin();
    if (job.cluster.gpu.bf16_tflops > 0) t.precision = (Precision)pick(3);
    t.optimizer = pick(4) == 0 ? Optimizer::sgd : Optimizer::adamw;
    job.estimate.activation_profile = pick(5) == 0 ? ActivationProfile::ptd_engine : ActivationProfile::megatron;
    job.estimate.attention_flops = coin() ? AttentionFlops::causal : AttentionFlops::full;
    t.micro_batch = 1;
    t.global_batch = p.dp * 8 * (1 + pick(2));
    return validate_job(job).empty();
}

const std::vector<JobSpec>& random_layouts() {
    static const std::vector<JobSpec> layouts = [] {
        std::vector<JobSpec> out;
        const std::vector<JobSpec> bases = base_jobs();
        std::mt19937 rng(20240531);
        for (int tries = 0; tries < 200000 && out.size() < 600; ++tries) {
            JobSpec j = bases[(size_t)(tries % (int)bases.size())];
            if (randomize(j, rng)) out.push_back(std::move(j));
        }
        return out;
    }();
    return layouts;
}

TEST(Properties, EnoughVariedLayouts) {
    const auto& ls = random_layouts();
    EXPECT_GE(ls.size(), 500u);
    int uneven = 0, interleaved = 0, zero3 = 0, moe_ep = 0, cp = 0;
    for (const JobSpec& j : ls) {
        uneven += !j.parallel.layers_per_stage.empty();
        interleaved += j.parallel.vpp > 1;
        zero3 += j.parallel.zero == 3;
        moe_ep += j.parallel.ep > 1;
        cp += j.parallel.cp > 1;
    }
    EXPECT_GE(uneven, 40);
    EXPECT_GE(interleaved, 40);
    EXPECT_GE(zero3, 20);
    EXPECT_GE(moe_ep, 10);
    EXPECT_GE(cp, 40);
}

// Activations are linear in b while the micro-batches in flight, min(p − i, m) with
// m = G/(b·dp), shrink: b·min(p − i, G/(b·dp)) never decreases, nor does anything else.
TEST(Properties, MemoryNeverDecreasesWithMicroBatch) {
    int checked = 0;
    for (const JobSpec& base : random_layouts()) {
        const int per_replica = base.training.global_batch / base.parallel.dp;
        std::vector<Estimate> ests;
        for (int b = 1; b <= per_replica; b *= 2) {
            if (per_replica % b) continue;
            JobSpec j = base;
            j.training.micro_batch = b;
            if (!validate_job(j).empty()) continue;
            ests.push_back(estimate_job(j));
            if (ests.size() < 2) continue;
            const Estimate& lo = ests[ests.size() - 2];
            const Estimate& hi = ests.back();
            ASSERT_EQ(lo.stages.size(), hi.stages.size());
            for (size_t i = 0; i < hi.stages.size(); ++i) {
                const double tol = 1e-12 * lo.stages[i].mem.total();
                EXPECT_GE(hi.stages[i].mem.total() + tol, lo.stages[i].mem.total()) << "stage " << i << " b " << b << ": " << describe(j);
                EXPECT_GE(hi.stages[i].mem.activations + tol, lo.stages[i].mem.activations) << "stage " << i << " b " << b << ": " << describe(j);
            }
            EXPECT_GE(hi.stages[(size_t)hi.worst_stage].mem.total() * (1 + 1e-12),
                      lo.stages[(size_t)lo.worst_stage].mem.total()) << describe(j);
            ++checked;
        }
    }
    EXPECT_GE(checked, 1000);
}

// ZeRO (Rajbhandari et al. §5): each stage shards one more category, so model states never
// grow from stage k to k + 1 (Megatron's zero = 0 at 18/20 bytes is above ZeRO-1's 4 + 12/N
// too), and the distributed optimizer never holds more than plain zero = 0.
TEST(Properties, ZeroStageNeverIncreasesModelStates) {
    int checked = 0;
    for (const JobSpec& base : random_layouts()) {
        for (int k = 0; k < 3; ++k) {
            JobSpec a = base, b = base;
            a.parallel.zero = k;
            b.parallel.zero = k + 1;
            a.parallel.distributed_optimizer = b.parallel.distributed_optimizer = false;
            if (!validate_job(a).empty() || !validate_job(b).empty()) continue;  // zero 2/3 need pp = 1
            const Estimate ea = estimate_job(a), eb = estimate_job(b);
            for (size_t i = 0; i < ea.stages.size(); ++i) {
                EXPECT_LE(eb.stages[i].mem.model_states(), ea.stages[i].mem.model_states() * (1 + 1e-12))
                    << "zero " << k << " → " << k + 1 << ", stage " << i << ": " << describe(b);
            }
            ++checked;
        }
        JobSpec plain = base, dist = base;
        plain.parallel.zero = dist.parallel.zero = 0;
        plain.parallel.distributed_optimizer = false;
        dist.parallel.distributed_optimizer = true;
        const Estimate ep = estimate_job(plain), ed = estimate_job(dist);
        for (size_t i = 0; i < ep.stages.size(); ++i)
            EXPECT_LE(ed.stages[i].mem.model_states(), ep.stages[i].mem.model_states() * (1 + 1e-12)) << describe(dist);
    }
    EXPECT_GE(checked, 500);
}

// MFU ≤ 1 (no layout beats the peak), HFU ≥ MFU (recomputation only adds work), a positive
// step time whose parts are all ≥ 0, and tokens/s × step = global batch × sequence.
TEST(Properties, MfuStepTimeAndThroughput) {
    for (const JobSpec& j : random_layouts()) {
        const Estimate e = estimate_job(j);
        EXPECT_GT(e.step_s, 0) << describe(j);
        EXPECT_LE(e.mfu, 1.0) << describe(j);
        EXPECT_GT(e.mfu, 0.0) << describe(j);
        EXPECT_GE(e.hfu, e.mfu) << describe(j);
        EXPECT_REL(e.tokens_per_s * e.step_s, (double)j.training.global_batch * j.model.seq_len) << describe(j);
        const TimeBreakdown& t = e.time;
        for (double x : {t.compute, t.tp_comm, t.cp_comm, t.ep_comm, t.pp_comm, t.bubble, t.dp_comm, t.optimizer})
            EXPECT_GE(x, 0.0) << describe(j);
        EXPECT_REL(e.step_s, t.total()) << describe(j);
    }
}

// The planner's fast path (no detail) evaluates only the stages that can be the worst;
// it must agree with the full evaluation on peak bytes, worst stage and step time, for
// balanced splits and explicit (uneven, also pp·vpp-entry) lists alike.
TEST(Properties, FastPathMatchesDetail) {
    int uneven = 0;
    for (const JobSpec& j : random_layouts()) {
        const EstimateContext ctx = make_estimate_context(j);
        const LayoutChoice ch = layout_choice_of(j);
        Estimate est;
        const LayoutScore slow = evaluate_layout(ctx, ch, j.parallel.layers_per_stage, &est);
        const LayoutScore fast = evaluate_layout(ctx, ch, j.parallel.layers_per_stage, nullptr);
        EXPECT_EQ(fast.worst_stage, slow.worst_stage) << describe(j);
        EXPECT_REL(fast.peak_bytes, slow.peak_bytes) << describe(j);
        EXPECT_NEAR(fast.step_s, slow.step_s, 1e-12 * slow.step_s) << describe(j);
        EXPECT_EQ(fast.fits, slow.fits) << describe(j);
        // And the detailed one is consistent with its own stages.
        ASSERT_EQ(est.stages.size(), (size_t)j.parallel.pp);
        double worst = 0;
        for (const StageEstimate& st : est.stages) worst = std::max(worst, st.mem.total());
        EXPECT_REL(slow.peak_bytes, worst) << describe(j);
        EXPECT_REL(est.stages[(size_t)est.worst_stage].mem.total(), worst) << describe(j);
        // The same as estimate_job.
        const Estimate full = estimate_job(j);
        EXPECT_REL(full.step_s, slow.step_s);
        uneven += !j.parallel.layers_per_stage.empty();
    }
    EXPECT_GE(uneven, 40);
}

// Every stage's layers add up to the model, and the stage parameters times tp minus the
// replicated parts add up to the model count plus vocab padding (and the tied copy).
TEST(Properties, StagesCoverTheModel) {
    for (const JobSpec& j : random_layouts()) {
        const Estimate e = estimate_job(j);
        int layers = 0;
        for (const StageEstimate& st : e.stages) layers += st.layers;
        EXPECT_EQ(layers, j.model.layers) << describe(j);
        if (!j.parallel.layers_per_stage.empty() && (int)j.parallel.layers_per_stage.size() == j.parallel.pp) {
            for (size_t i = 0; i < e.stages.size(); ++i)
                EXPECT_EQ(e.stages[i].layers, j.parallel.layers_per_stage[i]) << describe(j);
        }
    }
}

// MFU at long context. Under the full-s² convention (the default, PaLM appendix B) model
// FLOPs count every score while causal flash kernels execute about half of them (the time
// model charges 0.5 × core FLOPs at flash_eff, backward 2.5×), so as attention dominates
// MFU tends to 3·flash_eff/(0.5·3.5) ≈ 1.11 for flash_eff 0.65: above 1. estimate_job then
// says so in a note. Under the causal convention the count matches what runs and MFU ≤ 1.
// Llama 3 8B at 128K context (Llama 3.1's long-context phase) and tiny-gpt at the same
// length, 8 H100, tp 1 × dp 8, no recompute.
TEST(Properties, MfuAtLongContext) {
    for (const char* name : {"llama3-8b", "tiny-gpt"}) {
        JobSpec job = default_job(presets());
        job.model = preset_model(name);
        job.model.seq_len = 131072;
        job.cluster.nodes = 1;
        job.parallel = {};
        job.parallel.dp = 8;
        job.training.micro_batch = 1;
        job.training.global_batch = 8;
        job.training.flash_attention = true;
        ASSERT_EQ(job.estimate.attention_flops, AttentionFlops::full);
        expect_valid(job);
        const Estimate full = estimate_job(job);
        EXPECT_GE(full.hfu, full.mfu) << name;
        bool noted = false;
        for (const std::string& n : full.notes) noted = noted || n.find("MFU above 100%") != std::string::npos;
        EXPECT_EQ(noted, full.mfu > 1.0) << name << ": MFU " << full.mfu;
        job.estimate.attention_flops = AttentionFlops::causal;
        const Estimate causal = estimate_job(job);
        EXPECT_LE(causal.mfu, 1.0) << name << " (causal convention)";
        EXPECT_LE(causal.hfu, 1.0) << name << " (causal convention)";
        // Same step time: the convention changes the count, not the model of time.
        EXPECT_REL(causal.step_s, full.step_s);
        EXPECT_LT(causal.mfu, full.mfu);
    }
}

// ============================================================================================
// Memory as the allocator sees it (issue 15 point 7).
// ============================================================================================

// A Llama 3 8B job on one H100 node: tp 1, dp 8, b 1, s 8192, flash, bf16.
JobSpec llama8b_node() {
    JobSpec job = default_job(presets());
    job.model = preset_model("llama3-8b");
    job.cluster.nodes = 1;
    job.cluster.gpus_per_node = 8;
    job.parallel = {};
    job.parallel.dp = 8;
    job.training.micro_batch = 1;
    job.training.global_batch = 8;
    job.training.precision = Precision::bf16;
    job.training.flash_attention = true;
    return job;
}

// torchtitan's op-level selective AC (parallelize_llama.py _save_list / _custom_policy)
// keeps the block input, every other matmul output in forward order (Q, V, w1, w2 of
// Q K V O w1 w3 w2) and the flash attention output + fp32 log-sum-exp; Megatron's
// selective recompute keeps everything but the attention core. Both drop what the other
// keeps, so the two differ, and no recompute / full recompute do not depend on the style.
TEST(MemoryTruth, RecomputeStyleSavedSets) {
    JobSpec job = llama8b_node();
    job.parallel.recompute = Recompute::selective;
    const double T = 8192, h = 4096, hd = 4096, kvd = 1024, f = 14336, a = 32, e = 2;
    job.parallel.recompute_style = RecomputeStyle::torchtitan_op;
    expect_valid(job);
    const Estimate titan = estimate_job(job);
    const double titan_layer = e * T * h + e * T * hd + e * T * kvd + e * T * f + e * T * h + e * T * hd + 4 * T * a;
    // First stage: 32 layers + int32 token ids.
    EXPECT_REL(titan.stages[0].act_per_microbatch, 32 * titan_layer + 4 * T);
    job.parallel.recompute_style = RecomputeStyle::megatron;
    const Estimate mega = estimate_job(job);
    const double mega_layer = act(job.model, 1, 8192, 1, false, Recompute::selective, true);
    EXPECT_REL(mega.stages[0].act_per_microbatch, 32 * mega_layer + 4 * T);
    EXPECT_LT(titan_layer, mega_layer);  // Llama: op-level SAC drops K, O, w3 and both norms
    // The layer being recomputed holds the whole no-recompute set either way (31 layers kept
    // plus the full set of the one in backward).
    EXPECT_REL(titan.stages[0].mem.activations - 31 * titan_layer, mega.stages[0].mem.activations - 31 * mega_layer);
    for (Recompute rc : {Recompute::none, Recompute::full}) {
        job.parallel.recompute = rc;
        job.parallel.recompute_style = RecomputeStyle::torchtitan_op;
        const double a1 = estimate_job(job).stages[0].mem.activations;
        job.parallel.recompute_style = RecomputeStyle::megatron;
        EXPECT_REL(estimate_job(job).stages[0].mem.activations, a1);
    }
    // The key round-trips through TOML and a bad word names the key and the allowed words.
    job.parallel.recompute = Recompute::selective;
    job.parallel.recompute_style = RecomputeStyle::torchtitan_op;
    auto back = load_job_text(save_job_toml(job), "<saved>", presets());
    ASSERT_TRUE(back) << back.error().str();
    EXPECT_EQ(back->parallel.recompute_style, RecomputeStyle::torchtitan_op);
    auto bad = load_job_text("[model]\npreset = \"llama3-8b\"\n[cluster]\nnodes = 1\ngpus_per_node = 8\n"
                             "gpu = \"h100-sxm\"\n[parallel]\nrecompute = \"selective\"\nrecompute_style = \"op\"\n",
                             "bad.toml", presets());
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().str().find("parallel.recompute_style"), std::string::npos) << bad.error().str();
    EXPECT_NE(bad.error().str().find("torchtitan-op"), std::string::npos) << bad.error().str();
}

// The last stage's logits at the loss's peak, per rank T × V_p/t elements: Megatron's
// vocab-parallel cross entropy holds the 16-bit logits and their fp32 copy together
// (e + 4 bytes; 4 in fp32, where .float() is the same tensor); PyTorch's
// F.cross_entropy(logits.float()) holds the fp32 log-softmax output, nll_loss's gradient and
// log_softmax_backward's output at the start of the backward (12 bytes). Only the last
// stage changes.
TEST(MemoryTruth, LastStageLogitsPeak) {
    JobSpec job = load_asset("llama3-70b-h100.toml");  // tp 8, pp 4, vpp 5, SP, bf16
    const double T = 8192, Vp = 129024, t = 8, h = 8192;
    const Estimate mega = estimate_job(job);
    ASSERT_EQ(job.estimate.cross_entropy, CrossEntropyImpl::megatron);
    job.estimate.cross_entropy = CrossEntropyImpl::pytorch;
    const Estimate torch = estimate_job(job);
    for (int i = 0; i < 3; ++i) EXPECT_REL(torch.stages[(size_t)i].mem.activations, mega.stages[(size_t)i].mem.activations);
    EXPECT_REL(torch.stages[3].mem.activations - mega.stages[3].mem.activations, (12.0 - (2 + 4)) * T * Vp / t);
    // fp32 training: the cast is a no-op, so Megatron's peak is the fp32 logits alone.
    JobSpec f32 = job;
    f32.training.precision = Precision::fp32;
    f32.estimate.cross_entropy = CrossEntropyImpl::megatron;
    const Estimate m32 = estimate_job(f32);
    f32.estimate.cross_entropy = CrossEntropyImpl::pytorch;
    const Estimate t32 = estimate_job(f32);
    EXPECT_REL(t32.stages[3].mem.activations - m32.stages[3].mem.activations, (12.0 - 4.0) * T * Vp / t);
    (void)h;
}

// PyTorch's cuBLAS workspace (CublasHandlePool.cpp): ":4096:8" = 32 MiB on sm90 and later,
// ":4096:2:16:8" = 8.125 MiB before; none on the cpu preset; the job key overrides.
TEST(MemoryTruth, CublasWorkspace) {
    JobSpec job = llama8b_node();
    job.estimate.cublas_workspace_mib = 0;
    const double base = estimate_job(job).stages[0].mem.temp;
    job.estimate.cublas_workspace_mib = -1;  // the GPU's default
    EXPECT_REL(estimate_job(job).stages[0].mem.temp - base, 32.0 * 1024 * 1024);
    JobSpec a100 = job;
    a100.cluster.gpu = *presets().find_gpu("a100-80gb");
    a100.training.flash_attention = true;
    a100.estimate.cublas_workspace_mib = 0;
    const double a_base = estimate_job(a100).stages[0].mem.temp;
    a100.estimate.cublas_workspace_mib = -1;
    EXPECT_REL(estimate_job(a100).stages[0].mem.temp - a_base, (4096.0 * 2 + 16 * 8) * 1024);
    job.estimate.cublas_workspace_mib = 64;
    EXPECT_REL(estimate_job(job).stages[0].mem.temp - base, 64.0 * 1024 * 1024);
}

// Llama 3 405B as the paper ran it (arXiv 2407.21783 §3.3, Table 4): TP 8, PP 16, DP 128 on
// 80 GB H100s, seq 8192, no activation checkpointing, the first and last stage one layer
// short, FSDP sharding optimizer state AND gradients over DP with parameters kept whole
// between micro-batches (zero = 2 under a pipeline). Modelled as Megatron's distributed
// optimizer (fp32 main grads kept whole, 4 bytes per parameter: 11.9 GiB per GPU here) it
// did not fit; a run that happened must.
TEST(MemoryTruth, Llama3_405bPublishedLayoutFits) {
    JobSpec job = load_asset("llama3-405b-bare.toml");
    job.origin.no_layout = false;
    job.parallel = {};
    job.parallel.tp = 8;
    job.parallel.pp = 16;
    job.parallel.dp = 128;  // the bare job's 16,384 GPUs (Table 4's second row)
    job.parallel.sequence_parallel = true;
    job.parallel.recompute = Recompute::none;
    job.parallel.zero = 2;
    job.parallel.layers_per_stage = {7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7};
    job.training.micro_batch = 1;
    job.training.flash_attention = true;
    job.training.precision = Precision::bf16;
    expect_valid(job);
    const Estimate est = estimate_job(job);
    EXPECT_TRUE(est.fits) << est.stages[(size_t)est.worst_stage].mem.total() / kGiB << " GiB";
    // Gradients are sharded over the 128 data-parallel ranks (2 bytes / 128 per parameter).
    const StageEstimate& s1 = est.stages[1];
    EXPECT_REL(s1.mem.grads, 2.0 / 128 * s1.params_count);
    // The distributed-optimizer reading keeps 4-byte fp32 main grads whole and does not fit.
    JobSpec dist = job;
    dist.parallel.zero = 0;
    dist.parallel.distributed_optimizer = true;
    const Estimate d = estimate_job(dist);
    EXPECT_REL(d.stages[1].mem.grads, 4.0 * s1.params_count);
    EXPECT_FALSE(d.fits);
}

// ZeRO-2 under a pipeline reduce-scatters every micro-batch's gradients (the data-parallel
// traffic grows by one reduce-scatter per micro-batch), the distributed optimizer once per
// step; the per-micro-batch traffic hides behind the backwards but the last.
TEST(MemoryTruth, ZeroTwoPipelineTraffic) {
    JobSpec job = load_asset("llama3-70b-h100.toml");  // tp 8, pp 4, vpp 5, dp 2
    job.parallel.distributed_optimizer = false;
    job.parallel.zero = 2;
    expect_valid(job);
    auto dp_at = [&](int global_batch) {
        JobSpec j = job;
        j.training.global_batch = global_batch;  // m = global_batch / 2
        return estimate_job(j).stages[1].dp_s;
    };
    const double d1 = dp_at(64), d2 = dp_at(128), d3 = dp_at(192);
    EXPECT_GT(d2 - d1, 0.0);
    EXPECT_NEAR(d3 - d2, d2 - d1, 1e-9 * d3);  // linear in m: one reduce-scatter per micro-batch
    const Estimate est = estimate_job(job);
    for (const StageEstimate& st : est.stages) EXPECT_LE(st.tail.grad_exposed_s, st.tail.grad_s);
    JobSpec dist = job;
    dist.parallel.zero = 0;
    dist.parallel.distributed_optimizer = true;
    JobSpec dist2 = dist;
    dist2.training.global_batch = 2 * dist.training.global_batch;
    EXPECT_NEAR(estimate_job(dist2).stages[1].dp_s, estimate_job(dist).stages[1].dp_s, 1e-12);
}

// A GPU generation no published run calibrates (Ada: L40S) takes the mean of the calibrated
// generations' GEMM ceilings, not the generic default that every calibrated generation lands
// well below, and the estimate says so; a calibrated one (H100) keeps its own and says nothing.
TEST(Calibration, UncalibratedGenerationTakesTheMeanAndSaysSo) {
    const TimeModelConstants& c = time_model_constants();
    ASSERT_FALSE(c.calibrated(GpuGeneration::ada));
    ASSERT_TRUE(c.calibrated(GpuGeneration::hopper));
    double sum = 0;
    int n = 0;
    for (const KernelEfficiency& k : c.by_generation)
        if (k.gemm_eff_max > 0) sum += k.gemm_eff_max, ++n;
    ASSERT_GT(n, 1);
    EXPECT_DOUBLE_EQ(c.kernel(GpuGeneration::ada).gemm_eff_max, sum / n);
    EXPECT_LT(c.kernel(GpuGeneration::ada).gemm_eff_max, c.gemm_eff_max);
    EXPECT_DOUBLE_EQ(c.kernel(GpuGeneration::hopper).gemm_eff_max, c.by_generation[(int)GpuGeneration::hopper].gemm_eff_max);
    EXPECT_DOUBLE_EQ(c.kernel(GpuGeneration::cpu).gemm_eff_max, c.gemm_eff_max);  // the engine's own

    auto has_note = [](const Estimate& e) {
        for (const std::string& note : e.notes)
            if (contains(note, "no published run calibrates")) return true;
        return false;
    };
    JobSpec l40s = load_asset("llama3-8b-h100.toml", {"cluster.gpu=l40s"});
    const Estimate e = estimate_job(l40s);
    EXPECT_TRUE(has_note(e));
    EXPECT_FALSE(has_note(estimate_job(load_asset("llama3-8b-h100.toml"))));
}

}  // namespace

namespace {

// training.framework = "nemo" (issue 28): NeMo 2.0 / Megatron-Bridge run Megatron-Core, so the
// job reads, round-trips and is estimated as Megatron-LM's given the same keys (stackdef: the
// recipes' defaults, written out for Megatron-LM, fusedce2: their Transformer Engine loss
// included); Megatron-core-only keys are allowed.
TEST(FrameworkNemo, RunsMegatronCoresTimeModel) {
    const ptd::JobSpec megatron = ptd_test::load_asset(
        "llama3-70b-h100.toml", {"parallel.overlap_grad_reduce=true", "parallel.overlap_param_gather=true",
                                 "parallel.tp_comm_overlap=true", "parallel.grad_reduce_in_fp32=false",
                                 "estimate.cross_entropy=te"});
    const ptd::JobSpec nemo = ptd_test::load_asset("llama3-70b-h100.toml", {"training.framework=nemo"});
    ASSERT_EQ(nemo.training.framework, ptd::Framework::nemo);
    EXPECT_STREQ(ptd::to_string(nemo.training.framework), "nemo");
    EXPECT_TRUE(ptd::runs_megatron_core(nemo.training.framework));
    const ptd::Estimate a = ptd::estimate_job(megatron), b = ptd::estimate_job(nemo);
    // gradbuf: the one difference in time is Megatron-LM's 1/dp scaling pass over the gradient
    // buffer, which the recipes leave to the NCCL call (average_in_collective = True): a read and
    // a write of the bf16 buffer in the optimizer step.
    EXPECT_GT(a.step_s, b.step_s);
    EXPECT_NEAR(a.step_s - b.step_s, a.time.optimizer - b.time.optimizer, 1e-12 * a.step_s);
    // The stage that finishes last (one of the pipeline's stages, their parameter counts differ by
    // the embedding and the output layer) moves 2 · 2 bytes per parameter more.
    const double hbm = megatron.cluster.gpu.hbm_gbps * 1e9 * ptd::time_model_constants().hbm_eff;
    double closest = 1.0;
    for (const auto& st : a.stages)
        closest = std::min(closest, std::abs(a.time.optimizer - b.time.optimizer - st.params_count * 2.0 * 2.0 / hbm));
    EXPECT_LT(closest, 1e-12);
    EXPECT_EQ(a.stages[(size_t)a.worst_stage].mem.total(), b.stages[(size_t)b.worst_stage].mem.total());
    // The word survives a save and reload.
    EXPECT_TRUE(ptd_test::contains(ptd::save_job_toml(nemo), "framework = \"nemo\""));
    EXPECT_EQ(ptd_test::reloaded(ptd::save_job_toml(nemo)).training.framework, ptd::Framework::nemo);
    // CUDA graphs are Megatron-core's: allowed with nemo, refused with torchtitan.
    EXPECT_TRUE(ptd_test::load_error("llama3-70b-h100.toml", {"training.framework=nemo", "parallel.cuda_graph_impl=local"}).empty());
    EXPECT_FALSE(ptd_test::load_error("llama3-70b-h100.toml", {"training.framework=torchtitan", "parallel.cuda_graph_impl=local"}).empty());
    // A word outside the list names the allowed ones, nemo among them.
    ptd_test::expect_mentions(ptd_test::load_error("llama3-70b-h100.toml", {"training.framework=nemo2"}), {"\"nemo\""});
}

}  // namespace
