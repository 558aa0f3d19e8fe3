// attention_shapes.cpp — the attention side of recent open models' shapes in the estimators:
//   - head_dim ≠ hidden / heads (Qwen3: Q and O are h × a·d): parameters, FLOPs, and the
//     per-rank parameters the memory model holds, against hand counts from the HF configs;
//   - multi-head latent attention (DeepSeek-V3; Megatron-core MLASelfAttention): parameters
//     (671B total, 37B activated: DeepSeek-V3 technical report, arXiv 2412.19437 §1, §4.2),
//     model FLOPs as Megatron-LM's num_floating_point_operations counts them, the TP
//     collectives on the latents, activation memory and time growing with the latent widths;
//   - multi-token prediction (mtp_layers; Megatron-core multi_token_prediction.py): the 14B
//     of MTP weights in the HF checkpoint, MTP's FLOPs, memory and time on the last stage;
//   - models that leave the keys at 0 estimate exactly as before.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "model/estimate_internal.h"
#include "job_test_util.h"
#include "ptd/model/estimate.h"
#include "ptd/engine/model.h"
#include "ptd/layout/layout.h"
#include "ptd/model/model_stats.h"

namespace {

using namespace ptd;
using ptd_test::job_from_text;

// Qwen3-32B (HF config.json: hidden_size 5120, num_attention_heads 64, num_key_value_heads 8,
// head_dim 128, intermediate_size 25600, num_hidden_layers 64, vocab_size 151936,
// tie_word_embeddings false) on one DGX H100 node.
std::string qwen3_32b(const std::string& model_extra = "head_dim = 128\n", const std::string& parallel = "tp = 8\n") {
    return "[model]\narch = \"llama\"\nlayers = 64\nhidden = 5120\nheads = 64\nkv_heads = 8\nffn_hidden = 25600\n"
           "vocab = 151936\nseq_len = 4096\n" + model_extra +
           "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[parallel]\n" + parallel +
           (parallel.find("tp = 1\n") == 0 ? "" : "sequence_parallel = true\n") + "[training]\nmicro_batch = 1\nglobal_batch = 64\nprecision = \"bf16\"\n";
}

// DeepSeek-V3 (HF config.json): MLA with q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim
// 128, qk_rope_head_dim 64, v_head_dim 128; 256 routed experts of 2048, top-8, one shared
// expert, 3 dense first layers of 18432, one MTP module.
const std::string kDeepSeekV3Model =
    "[model]\narch = \"llama\"\nlayers = 61\nhidden = 7168\nheads = 128\nkv_heads = 128\nffn_hidden = 18432\n"
    "vocab = 129280\nseq_len = 4096\nexperts = 256\ntop_k = 8\nmoe_ffn_hidden = 2048\nshared_expert_ffn_hidden = 2048\n"
    "first_dense_layers = 3\nhead_dim = 128\nq_lora_rank = 1536\nkv_lora_rank = 512\nqk_rope_head_dim = 64\n"
    "v_head_dim = 128\nmtp_layers = 1\n";

// A dense MLA model small enough to estimate quickly (DeepSeek-V3's attention on a SwiGLU MLP);
// `extra` adds or overrides model keys (later keys are not allowed to repeat: pass full values).
std::string mla_dense(int kv_lora, int mtp, const std::string& parallel = "tp = 8\n", int layers = 8) {
    return "[model]\narch = \"llama\"\nlayers = " + std::to_string(layers) +
           "\nhidden = 7168\nheads = 128\nkv_heads = 128\nffn_hidden = 18432\nvocab = 129280\nseq_len = 4096\n"
           "head_dim = 128\nq_lora_rank = 1536\nkv_lora_rank = " + std::to_string(kv_lora) +
           "\nqk_rope_head_dim = 64\nv_head_dim = 128\nmtp_layers = " + std::to_string(mtp) +
           "\n[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[parallel]\n" + parallel +
           (parallel.find("tp = 1\n") == 0 ? "" : "sequence_parallel = true\n") + "[training]\nmicro_batch = 1\nglobal_batch = 64\nprecision = \"bf16\"\n";
}

Estimate estimate_of(const std::string& text) { return estimate_job(job_from_text(text, "mla.toml")); }

TEST(AttentionShapes, Qwen3HeadDimParameters) {
    // Per layer: Q and O 5120 × 8192, K and V 5120 × 1024, SwiGLU 3 · 5120 · 25600, two
    // RMSNorms; untied embedding and output 151936 · 5120; final norm. Taking Q and O as h × h
    // (hidden / heads = 80) undercounts by 64 · 2 · 5120 · 3072 = 2.0B.
    const ModelSpec m = job_from_text(qwen3_32b()).model;
    const int64_t layer = 2LL * 5120 * 8192 + 2LL * 5120 * 1024 + 3LL * 5120 * 25600 + 2LL * 5120;
    const int64_t want = 2LL * 151936 * 5120 + 64 * layer + 5120;
    const ParamCounts c = count_parameters(m);
    EXPECT_EQ(c.total, want);
    // The model card's 32.8B (its q/k RMSNorms, 64 · 2 · 128 weights, are not modelled).
    EXPECT_NEAR(c.total / 1e9, 32.8, 0.05);
    // Qwen3-8B: a·d = h there (32 · 128 = 4096): 8.19B on the card.
    const ModelSpec m8 = job_from_text(
        "[model]\narch = \"llama\"\nlayers = 36\nhidden = 4096\nheads = 32\nkv_heads = 8\nhead_dim = 128\n"
        "ffn_hidden = 12288\nvocab = 151936\nseq_len = 4096\n[cluster]\nnodes = 1\ngpus_per_node = 8\n"
        "gpu = \"h100-sxm\"\n[parallel]\ntp = 8\n[training]\nmicro_batch = 1\nglobal_batch = 64\n").model;
    EXPECT_EQ(count_parameters(m8).total, 8190726144LL);
}

TEST(AttentionShapes, Qwen3QkLayerNorm) {
    // Qwen3's q_norm / k_norm (model.qk_layernorm): 2·128 RMSNorm weights per layer — Qwen3-8B
    // is then exactly its checkpoint's 8,190,735,360 — and, per layer and rank, a saved copy of
    // the norms' inputs (the local Q and K heads: e·T·(a_l + g_l)·d) and a memory-bound pass.
    auto job = [](bool qk_norm, int layers) {
        return "[model]\narch = \"llama\"\nlayers = " + std::to_string(layers) +
               "\nhidden = 4096\nheads = 32\nkv_heads = 8\nhead_dim = 128\nffn_hidden = 12288\nvocab = 151936\n"
               "seq_len = 4096\nqk_layernorm = " + (qk_norm ? "true" : "false") +
               "\n[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[parallel]\ntp = 8\n"
               "sequence_parallel = true\n[training]\nmicro_batch = 1\nglobal_batch = 64\n";
    };
    EXPECT_EQ(count_parameters(job_from_text(job(true, 36)).model).total, 8190735360LL);
    const Estimate on = estimate_of(job(true, 36)), off = estimate_of(job(false, 36));
    EXPECT_DOUBLE_EQ(on.stages[0].params_count - off.stages[0].params_count, 36 * 2.0 * 128);
    EXPECT_DOUBLE_EQ(on.stages[0].act_per_microbatch - off.stages[0].act_per_microbatch, 36 * 2.0 * 4096 * (4 + 1) * 128);
    EXPECT_GT(on.stages[0].fwd_s, off.stages[0].fwd_s);
    EXPECT_EQ(on.flops.model_per_token, off.flops.model_per_token);  // not a matmul
    // Written back by the canonical TOML, and read again the same.
    const JobSpec j = job_from_text(job(true, 36));
    EXPECT_TRUE(job_from_text(save_job_toml(j)).model.qk_layernorm);
    // The CPU engine has no such norms: it refuses the key by name instead of ignoring it.
    auto layout = make_layout({1, 1, 1, 1, 1, 1, "tp-cp-ep-dp-pp"});
    ASSERT_TRUE(layout.has_value());
    const auto refused = engine::make_engine_config(j, *layout, 0);
    ASSERT_FALSE(refused.has_value());
    EXPECT_NE(refused.error().str().find("model.qk_layernorm"), std::string::npos) << refused.error().str();
}

TEST(AttentionShapes, Qwen3HeadDimFlopsAndRankParameters) {
    const Estimate e = estimate_of(qwen3_32b());
    // Matmul parameters one token uses: the layers' (no norms) and the output layer over the
    // padded vocabulary.
    const double layer = 2.0 * 5120 * 8192 + 2.0 * 5120 * 1024 + 3.0 * 5120 * 25600;
    EXPECT_DOUBLE_EQ(e.flops.params_matmul, 64 * layer + e.vocab_padded * 5120);
    // Attention scores: 12 · L · a · d · s (every score counted).
    EXPECT_DOUBLE_EQ(e.flops.attention_per_token, 12.0 * 64 * 64 * 128 * 4096);
    // What the memory model holds on one rank (tp 1, pp 1) is the whole model (vocab padded).
    const Estimate one = estimate_of(qwen3_32b("head_dim = 128\n", "tp = 1\n"));
    const double padded_extra = 2.0 * (one.vocab_padded - 151936) * 5120;
    EXPECT_DOUBLE_EQ(one.stages[0].params_count, (double)count_parameters(job_from_text(qwen3_32b()).model).total + padded_extra);
}

TEST(AttentionShapes, HeadDimEqualToHiddenOverHeadsChangesNothing) {
    // head_dim = hidden / heads written out gives the estimate of the classic layout, bit for bit.
    const std::string classic =
        "[model]\narch = \"llama\"\nlayers = 8\nhidden = 4096\nheads = 32\nkv_heads = 8\nffn_hidden = 14336\n"
        "vocab = 128256\nseq_len = 8192\n";
    const std::string rest = "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[parallel]\ntp = 2\npp = 2\n"
                             "sequence_parallel = true\n[training]\nmicro_batch = 1\nglobal_batch = 32\n";
    const Estimate a = estimate_of(classic + rest), b = estimate_of(classic + "head_dim = 128\n" + rest);
    EXPECT_EQ(a.step_s, b.step_s);
    EXPECT_EQ(a.stages[1].mem.total(), b.stages[1].mem.total());
    EXPECT_EQ(a.flops.model_per_token, b.flops.model_per_token);
}

TEST(AttentionShapes, WiderHeadsCostMemoryAndTime) {
    // Qwen3-32B's a·d = 8192 against the same model read as a·d = hidden (head_dim 80).
    const Estimate wide = estimate_of(qwen3_32b()), narrow = estimate_of(qwen3_32b("head_dim = 80\n"));
    EXPECT_GT(wide.step_s, narrow.step_s);
    EXPECT_GT(wide.stages[0].act_per_microbatch, narrow.stages[0].act_per_microbatch);
    EXPECT_GT(wide.stages[0].params_count, narrow.stages[0].params_count);
}

TEST(AttentionShapes, DeepSeekV3Parameters) {
    const ModelSpec m = job_from_text(kDeepSeekV3Model +
                                      "[cluster]\nnodes = 32\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[parallel]\n"
                                      "tp = 1\ndp = 256\nep = 8\n[training]\nmicro_batch = 1\nglobal_batch = 512\n")
                            .model;
    const ParamCounts c = count_parameters(m);
    // MLA per layer: q_down 7168·1536, q norm 1536, q_up 1536·128·192, kv_down 7168·576,
    // kv norm 512, kv_up 512·128·256, out 128·128·7168.
    EXPECT_EQ(c.attention, 187107328LL);
    // "671B total parameters, of which 37B are activated for each token" (report §1).
    EXPECT_NEAR(c.total / 1e9, 671.0, 0.5);
    EXPECT_NEAR(c.active / 1e9, 37.0, 0.6);
    // HF model card: "685B, which includes 671B of the Main Model weights and 14B of the
    // Multi-Token Prediction (MTP) Module weights" — the checkpoint's MTP module carries its own
    // copies of the embedding and the output head, which PTD (as Megatron-core) shares.
    const double mtp_checkpoint = (double)c.mtp + 2.0 * 129280 * 7168;
    EXPECT_NEAR(mtp_checkpoint / 1e9, 14.0, 0.6);
    EXPECT_NEAR((c.total + mtp_checkpoint) / 1e9, 685.0, 0.6);
}

TEST(AttentionShapes, MlaFlopsAsMegatronCountsThem) {
    // Megatron-LM training.py num_floating_point_operations (MLA, no latent-norm terms):
    // per token and layer 6 · (q_lora·(h + a·(d + dr)) + kv_lora·(h + a·(d + dv)) + h·dr +
    // a·dv·h) for the projections, and 6 · a · (d + dr + dv) · s for the core (full scores).
    const Estimate e = estimate_of(mla_dense(512, 0));
    const double h = 7168, a = 128, d = 128, dr = 64, dv = 128, ql = 1536, kl = 512, s = 4096;
    const double attn = ql * (h + a * (d + dr)) + kl * (h + a * (d + dv)) + h * dr + a * dv * h;
    EXPECT_DOUBLE_EQ(e.flops.params_matmul, 8 * (attn + 3.0 * h * 18432) + e.vocab_padded * h);
    EXPECT_DOUBLE_EQ(e.flops.attention_per_token, 6.0 * 8 * a * (d + dr + dv) * s);
    // Rank parameters at tp 1 agree with the count.
    const Estimate one = estimate_of(mla_dense(512, 0, "tp = 1\n"));
    const ModelSpec m = job_from_text(mla_dense(512, 0)).model;
    EXPECT_DOUBLE_EQ(one.stages[0].params_count,
                     (double)count_parameters(m).total + 2.0 * (one.vocab_padded - 129280) * h);
}

TEST(AttentionShapes, MlaDownProjectionsAreReplicatedAcrossTp) {
    // At tp 8 the down projections (h·q_lora, h·(kv_lora + dr)) and latent norms stay whole on
    // every rank; the up and output projections split eight ways.
    const Estimate t1 = estimate_of(mla_dense(512, 0, "tp = 1\n")), t8 = estimate_of(mla_dense(512, 0, "tp = 8\n"));
    const double h = 7168, a = 128;
    const double replicated = h * 1536 + 1536 + h * 576 + 512;
    const double split = 1536 * a * 192 + 512 * a * 256 + a * 128 * h + 3.0 * h * 18432;
    const double layer_t1 = replicated + split + 2 * h, layer_t8 = replicated + split / 8 + 2 * h;
    const double emb_t1 = 2.0 * t1.vocab_padded * h + h, emb_t8 = 2.0 * t8.vocab_padded * h / 8 + h;
    EXPECT_DOUBLE_EQ(t1.stages[0].params_count, 8 * layer_t1 + emb_t1);
    EXPECT_DOUBLE_EQ(t8.stages[0].params_count, 8 * layer_t8 + emb_t8);
}

TEST(AttentionShapes, LatentWidthsCostMemoryAndTime) {
    const Estimate small = estimate_of(mla_dense(256, 0)), large = estimate_of(mla_dense(1024, 0));
    EXPECT_GT(large.stages[0].act_per_microbatch, small.stages[0].act_per_microbatch);
    EXPECT_GT(large.stages[0].fwd_s, small.stages[0].fwd_s);
    EXPECT_GT(large.flops.params_matmul, small.flops.params_matmul);
}

TEST(AttentionShapes, MlaActivationsAsMegatronSavesThem) {
    // One layer, no recompute, SP at tp 8, flash attention: the LN1 and LN2 inputs and outputs
    // (4·e·T·h/t), the two latents twice (2·e·T·(q_lora + kv_lora)/t), Q and K at d + dr and V
    // at dv per local head, the context (a_l·dv), the fp32 log-sum-exp, and the SwiGLU MLP's
    // FC1 (2f/t) and activation (f/t) outputs.
    const Estimate one = estimate_of(mla_dense(512, 0, "tp = 8\n", 1)), two = estimate_of(mla_dense(512, 0, "tp = 8\n", 2));
    const double T = 4096, e = 2, h = 7168, t = 8, a_l = 16, f_l = 18432 / 8.0;
    const double want = 4 * e * T * h / t + 2 * e * T * (1536 + 512) / t + e * T * a_l * (2 * 192 + 128) +
                        e * T * a_l * 128 + 4 * T * a_l + 3 * e * T * f_l;
    EXPECT_DOUBLE_EQ(two.stages[0].act_per_microbatch - one.stages[0].act_per_microbatch, want);
}

TEST(AttentionShapes, MlaTpCollectivesCarryTheLatents) {
    // Under SP the attention's entry all-gather moves the q / kv latents and the RoPE key
    // (1536 + 512 + 64 wide), not h = 7168: less TP time than an MHA layer of the same width.
    const std::string mha =
        "[model]\narch = \"llama\"\nlayers = 8\nhidden = 7168\nheads = 128\nkv_heads = 128\nffn_hidden = 18432\n"
        "vocab = 129280\nseq_len = 4096\nhead_dim = 128\n[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n"
        "[parallel]\ntp = 8\nsequence_parallel = true\n[training]\nmicro_batch = 1\nglobal_batch = 64\nprecision = \"bf16\"\n";
    const Estimate m = estimate_of(mla_dense(512, 0)), c = estimate_of(mha);
    EXPECT_LT(m.stages[0].tp_s, c.stages[0].tp_s);
    EXPECT_GT(m.stages[0].tp_s, 0.5 * c.stages[0].tp_s);  // the exit reduce-scatter and the MLP's stay h wide
}

TEST(AttentionShapes, MtpFlopsMemoryAndTimeOnTheLastStage) {
    const Estimate base = estimate_of(mla_dense(512, 0, "tp = 8\n")), mtp = estimate_of(mla_dense(512, 1, "tp = 8\n"));
    // Model FLOPs (Megatron-LM counts MTP): one more layer, eh_proj 2h·h, one more output pass.
    const double h = 7168;
    const double layer = (base.flops.params_matmul - base.vocab_padded * h) / 8;
    EXPECT_DOUBLE_EQ(mtp.flops.params_matmul, base.flops.params_matmul + layer + 2 * h * h + base.vocab_padded * h);
    EXPECT_DOUBLE_EQ(mtp.flops.attention_per_token, base.flops.attention_per_token * 9.0 / 8.0);
    // The last stage holds the MTP module: parameters, activations (incl. its fp32 loss
    // softmax), time.
    EXPECT_GT(mtp.stages[0].params_count, base.stages[0].params_count);
    EXPECT_GT(mtp.stages[0].mem.activations, base.stages[0].mem.activations + 4.0 * 4096 * base.vocab_padded / 8);
    EXPECT_GT(mtp.step_s, base.step_s);
    // Pipeline: only the last stage changes, and it holds an embedding copy (untied).
    const Estimate bp = estimate_of(mla_dense(512, 0, "tp = 2\npp = 4\n")), mp = estimate_of(mla_dense(512, 1, "tp = 2\npp = 4\n"));
    EXPECT_DOUBLE_EQ(mp.stages[0].params_count, bp.stages[0].params_count);
    EXPECT_DOUBLE_EQ(mp.stages[0].mem.activations, bp.stages[0].mem.activations);
    EXPECT_GT(mp.stages[3].params_count - bp.stages[3].params_count, mp.vocab_padded * h / 2);
    EXPECT_GT(mp.stages[3].bwd_s, bp.stages[3].bwd_s);
    EXPECT_GT(mp.stages[3].tp_s, bp.stages[3].tp_s);
    // The copy joins the embedding group with the first stage (Megatron-core LanguageModule:
    // shared_embedding on the MTP stage): its communicator and its gradient all-reduce.
    EXPECT_TRUE(mp.stages[3].has_embedding);
    EXPECT_FALSE(bp.stages[3].has_embedding);
    EXPECT_GT(mp.stages[3].mem.nccl, bp.stages[3].mem.nccl);
    EXPECT_GT(mp.stages[0].mem.nccl, bp.stages[0].mem.nccl);
}

TEST(AttentionShapes, MtpOnDualPipesMirrorStage) {
    // DualPipe's rank 0 also holds the last stage (its mirror), so it holds the MTP module too;
    // the last rank holds it once, with the embedding copy the MTP input reads.
    auto job = [](int mtp) {
        return "[model]\narch = \"llama\"\nlayers = 8\nhidden = 2048\nheads = 16\nkv_heads = 16\nffn_hidden = 1408\n"
               "vocab = 102400\nseq_len = 4096\nexperts = 8\ntop_k = 2\nhead_dim = 128\nkv_lora_rank = 512\n"
               "qk_rope_head_dim = 64\nv_head_dim = 128\nmtp_layers = " + std::to_string(mtp) +
               "\n[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[parallel]\npp = 4\ndp = 2\nep = 2\n"
               "schedule = \"dualpipe\"\n[training]\nmicro_batch = 1\nglobal_batch = 64\n";
    };
    const Estimate base = estimate_of(job(0)), mtp = estimate_of(job(1));
    const double h = 2048;
    const double first = mtp.stages[0].params_count - base.stages[0].params_count;
    const double last = mtp.stages[3].params_count - base.stages[3].params_count;
    const double middle = mtp.stages[1].params_count - base.stages[1].params_count;
    EXPECT_EQ(middle, 0.0);
    // Its params: a whole MoE layer (8 experts on ep 2: 4 here) with MLA, 3 norms and eh_proj.
    EXPECT_GT(first, 2.0 * h * h);
    EXPECT_DOUBLE_EQ(last - first, mtp.vocab_padded * h);  // the MTP stage's embedding copy
}

TEST(AttentionShapes, AsyncDgradHidesTheLatentCollective) {
    // Megatron's asynchronous dgrad (overlap.cpp hide_tp_dgrad) runs a column-parallel linear's
    // input-gradient collective beside its weight-gradient GEMM. MLA's column-parallel linears
    // are the up projections, whose input is the latent: the collective it hides is
    // latent-wide (what block_comm counted), not h-wide.
    const ModelSpec m = job_from_text(mla_dense(512, 0)).model;
    est::LayoutDerived L{};
    L.m = &m;
    L.t = 8;
    L.sp = true;
    L.e = 2;
    L.tokens = 4096;
    L.h = 7168;
    L.mla = true;
    L.q_lora = 1536, L.kv_lora = 512, L.d_rope = 64;
    L.tp_dgrad_async = true;
    L.net_tp.n = 8, L.net_tp.per_node = 8, L.net_tp.nodes = 1;
    L.net_tp.bus_intra = 360e9, L.net_tp.bus_inter = 50e9;
    est::LayerTime lt;
    lt.gemm_qkv = 1.0;  // a window that hides everything but the contention
    ChunkTime c;
    c.bwd.tp = 1.0;
    est::hide_tp_dgrad(L, lt, 1.0, c);
    const double latent = est::nccl_time(est::Collective::all_gather, 2.0 * 4096 * (1536 + 512 + 64), L.net_tp);
    EXPECT_DOUBLE_EQ(c.bwd.tp, 1.0 + 2.0 * est::overlapped_cost(latent, 1.0) - latent);
}

}  // namespace

namespace {

// cpblock: ring attention's blocks. The kernel-rate curve n / (n + 237) reproduces the
// FlashAttention-3 H100 points it was fitted on (pytorch/benchmark ff65cb6: 430 … 621 TFLOP/s
// at n = 512 … 16,384) within 1.2%, and Llama 3 8B on 8 H100 is no longer as fast with its
// 8K sequence cut 8 ways (cp 8) as with 8 data-parallel replicas (the planner tied them).
TEST(ContextParallelBlocks, ShorterFlashCallsRunSlower) {
    const double measured[][2] = {{512, 430.32}, {1024, 517.099}, {2048, 565.544}, {4096, 590.233}, {8192, 614.234}, {16384, 620.73}};
    for (const auto& [n, tflops] : measured)
        EXPECT_NEAR(est::flash_rate(16384, est::kFlashHalfRateTokens) / est::flash_rate(n, est::kFlashHalfRateTokens),
                    620.73 / tflops, 0.012 * 620.73 / tflops)
            << n;
    // Without a causal curve one call over s runs at flash_eff and c calls over s/c at the
    // unmasked curve's rate(s / c) / rate(s); with one, the causal first call follows it.
    EXPECT_DOUBLE_EQ(est::attention_length_slowdown(8192, 1, 0.0), 1.0);
    EXPECT_DOUBLE_EQ(est::attention_length_slowdown(8192, 4, 0.0),
                     est::flash_rate(8192, est::kFlashHalfRateTokens) / est::flash_rate(2048, est::kFlashHalfRateTokens));
    EXPECT_DOUBLE_EQ(est::attention_length_slowdown(8192, 4, 1000.0),
                     (1.0 / est::flash_rate(2048, 1000.0) + 3.0 / est::flash_rate(2048, est::kFlashHalfRateTokens)) / 4.0);
    const std::string base = "[model]\npreset = \"llama3-8b\"\nseq_len = 8192\n[cluster]\nnodes = 1\ngpus_per_node = 8\n"
                             "gpu = \"h100-sxm\"\n[training]\nmicro_batch = 1\nglobal_batch = 64\nprecision = \"bf16\"\n";
    const Estimate cp8 = estimate_job(job_from_text(base + "[parallel]\ncp = 8\n"));
    const Estimate dp8 = estimate_job(job_from_text(base + "[parallel]\ndp = 8\n"));
    EXPECT_GT(cp8.step_s, dp8.step_s * 1.01) << "cp 8 " << cp8.step_s << " s vs dp 8 " << dp8.step_s << " s";
}

// temerge: Transformer Engine's ring attention (Megatron-core's context parallelism) merges its
// flash calls' results in bf16 on the ring's last rank. Worked example, Llama 3 70B at TP 2 and
// CP 2 (the nemo2507 GB200 row's layout): the rank holds 4,096 of 8,192 tokens, 32 query heads
// and 4 KV heads of 128. Output q = 4096·32·128 = 16.8M elements, K and V kv = 2·4096·4·128 =
// 4.19M. Forward: the first step's output copied (4 bytes per element), the second added in
// place (6): 10·q, plus K and V concatenated for the first send (4·kv) = 184.5 MB. Backward: dQ
// and dK, dV copied then added (10·(q + kv)) and K, V copied into the send buffer (4·kv) =
// 226.5 MB. At CP 1 nothing is merged; at CP 4 each rank merges three more steps (6 bytes each).
TEST(ContextParallelBlocks, TransformerEngineRingMergesBetweenFlashCalls) {
    est::LayoutDerived L;
    L.e = 2, L.c = 2, L.b = 1, L.s_local = 4096, L.tokens = 4096;
    L.heads_l = 32, L.kv_l = 4, L.d = 128, L.d_qk = 128, L.d_v = 128;
    L.titan_model = false, L.mla = false;
    const double q = 4096.0 * 32 * 128, kv = 2.0 * 4096 * 4 * 128;
    const est::RingMergeBytes cp2 = est::te_ring_merge_bytes(L);
    EXPECT_DOUBLE_EQ(cp2.fwd, 10.0 * q + 4.0 * kv);
    EXPECT_DOUBLE_EQ(cp2.bwd, 10.0 * (q + kv) + 4.0 * kv);
    EXPECT_NEAR(cp2.fwd / 1e6, 184.5, 0.1);
    EXPECT_NEAR(cp2.bwd / 1e6, 226.5, 0.1);
    L.c = 4;
    EXPECT_DOUBLE_EQ(est::te_ring_merge_bytes(L).fwd, 22.0 * q + 4.0 * kv);
    L.c = 1;
    EXPECT_EQ(est::te_ring_merge_bytes(L).fwd, 0.0);
    L.c = 2, L.titan_model = true;  // torchtitan's ring is PyTorch's (torch_ring_merge_bytes)
    EXPECT_EQ(est::te_ring_merge_bytes(L).bwd, 0.0);

}

}  // namespace
