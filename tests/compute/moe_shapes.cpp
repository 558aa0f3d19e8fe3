// moe_shapes.cpp — the MoE side of recent open models, end to end: routed experts of
// model.moe_ffn_hidden, shared experts (Megatron-core SharedExpertMLP), dense first layers
// (model.first_dense_layers) and parallel.expert_tp (Megatron-core "MoE parallel folding",
// --expert-tensor-parallel-size). Checked against the model cards' published parameter counts
// (DeepSeek-V3 671B total / 37B active, Qwen3-30B-A3B 30.5B / 3.3B, Qwen3-235B-A22B 235B / 22B),
// per-stage memory and time by hand, DeepSeek-V3's EP 64 under TP 2 with expert_tp 1 and its
// all-to-all as hand-computed, and the messages for a bad expert_tp. moeperm: the token
// dispatcher's permute / unpermute passes over HBM, unfused and fused (--moe-permute-fusion), after
// an all-to-all or a flex (DeepEP / HybridEP) dispatch. moefp8pad: the FP8 grouped MLP's alignment
// copies of its rows (Transformer Engine's Fp8Padding / Fp8Unpadding) unless the router or a
// capacity pads the counts.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "model/estimate_internal.h"
#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/layout/job_layout.h"
#include "ptd/model/model_stats.h"
#include "ptd/spec/presets.h"

#include "job_test_util.h"
#include "layer_test_util.h"

namespace {

using namespace ptd;

Result<JobSpec> load(const std::string& text) { return load_job_text(text, "moe2.toml", embedded_presets()); }

JobSpec load_ok(const std::string& text) { return ptd_test::job_from_text(text, "moe2.toml"); }

// A one-node cluster that any of the models below loads on (the counts do not depend on it).
const char* kNode = "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[parallel]\ntp = 1\n"
                    "[training]\nmicro_batch = 1\nglobal_batch = 8\n";

// DeepSeek-V3 (HF config.json of deepseek-ai/DeepSeek-V3): 61 layers, the first 3 dense
// (first_k_dense_replace), 256 routed experts of 2048 top-8 plus 1 shared expert of 2048, MLA.
const char* kDeepSeekV3 =
    "[model]\narch = \"llama\"\nlayers = 61\nhidden = 7168\nheads = 128\nkv_heads = 128\nffn_hidden = 18432\n"
    "vocab = 129280\nseq_len = 4096\nexperts = 256\ntop_k = 8\nmoe_ffn_hidden = 2048\nshared_expert_ffn_hidden = 2048\n"
    "first_dense_layers = 3\nhead_dim = 128\nq_lora_rank = 1536\nkv_lora_rank = 512\nqk_rope_head_dim = 64\nv_head_dim = 128\n";
// Qwen3-30B-A3B and Qwen3-235B-A22B (HF config.json): every layer MoE, 128 experts top-8, no
// shared expert, GQA with head_dim 128 ≠ hidden / heads, untied embeddings.
const char* kQwen3_30B =
    "[model]\narch = \"llama\"\nlayers = 48\nhidden = 2048\nheads = 32\nkv_heads = 4\nhead_dim = 128\nffn_hidden = 6144\n"
    "vocab = 151936\nseq_len = 4096\nexperts = 128\ntop_k = 8\nmoe_ffn_hidden = 768\n";
const char* kQwen3_235B =
    "[model]\narch = \"llama\"\nlayers = 94\nhidden = 4096\nheads = 64\nkv_heads = 4\nhead_dim = 128\nffn_hidden = 12288\n"
    "vocab = 151936\nseq_len = 4096\nexperts = 128\ntop_k = 8\nmoe_ffn_hidden = 1536\n";

// The attention weights per layer as the model cards count them, so that these tests check the
// MoE side (this helper's) whatever the attention count is: GQA Q, K, V, O with head_dim d; MLA
// (DeepSeek-V3 modeling code): q_a (h × q_lora) + its norm, q_b (q_lora × a·(d + d_rope)),
// kv_a (h × (kv_lora + d_rope)) + its norm, kv_b (kv_lora × a·(d + d_v)), o (a·d_v × h).
double gqa_attention(double h, double a, double g, double d) { return 2.0 * h * a * d + 2.0 * h * g * d; }
double mla_attention(double h, double a, double q_lora, double kv_lora, double d, double d_rope, double d_v) {
    return h * q_lora + q_lora + q_lora * a * (d + d_rope) + h * (kv_lora + d_rope) + kv_lora + kv_lora * a * (d + d_v) +
           a * d_v * h;
}

// count_parameters' totals with its attention replaced by the reference one.
struct Totals {
    double total, active;
};
Totals with_attention(const ModelSpec& m, const ParamCounts& c, double attention) {
    const double delta = m.layers * (attention - (double)c.attention);
    return {(double)c.total + delta, (double)c.active + delta};
}

TEST(MoeShapeParams, DeepSeekV3MatchesThePublishedCounts) {
    const JobSpec job = load_ok(std::string(kDeepSeekV3) + kNode);
    const ParamCounts c = count_parameters(job.model);
    const double h = 7168, expert = 3.0 * h * 2048;  // SwiGLU: gate, up, down
    EXPECT_EQ(c.moe_layers, 58);
    EXPECT_EQ(c.shared_expert, (int64_t)expert);
    EXPECT_EQ(c.dense_mlp, (int64_t)(3.0 * h * 18432));
    EXPECT_EQ(c.mlp, (int64_t)(256 * expert + expert + h * 256));   // routed + shared + router
    EXPECT_EQ(c.mlp_active, (int64_t)(8 * expert + expert + h * 256));
    const Totals t = with_attention(job.model, c, mla_attention(h, 128, 1536, 512, 128, 64, 128));
    // With the mla helper's attention count merged, the reference attention is count_parameters' own.
    EXPECT_EQ((double)c.attention, mla_attention(h, 128, 1536, 512, 128, 64, 128));
    // DeepSeek-V3 report (arXiv 2412.19437) §1 / the model card: 671B total, 37B activated per
    // token (the 14B MTP module apart); 37B leaves the input embedding out, we count it (0.9B).
    EXPECT_NEAR(t.total / 671e9, 1.0, 0.002) << t.total;
    EXPECT_NEAR(t.active / 37e9, 1.0, 0.02) << t.active;
}

TEST(MoeShapeParams, Qwen3MoeMatchPublishedCounts) {
    const JobSpec small = load_ok(std::string(kQwen3_30B) + kNode);
    const ParamCounts cs = count_parameters(small.model);
    EXPECT_EQ(cs.mlp, (int64_t)(128 * 3.0 * 2048 * 768 + 2048 * 128));  // moe_ffn_hidden, not ffn_hidden
    EXPECT_EQ(cs.moe_layers, 48);
    EXPECT_EQ(cs.shared_expert, 0);
    const Totals ts = with_attention(small.model, cs, gqa_attention(2048, 32, 4, 128));
    EXPECT_EQ((double)cs.attention, gqa_attention(2048, 32, 4, 128));  // count_parameters' own
    EXPECT_NEAR(ts.total / 30.5e9, 1.0, 0.01) << ts.total;   // Qwen3-30B-A3B: 30.5B total
    EXPECT_NEAR(ts.active / 3.3e9, 1.0, 0.02) << ts.active;  // 3.3B activated
    const JobSpec big = load_ok(std::string(kQwen3_235B) + kNode);
    const ParamCounts cb = count_parameters(big.model);
    const Totals tb = with_attention(big.model, cb, gqa_attention(4096, 64, 4, 128));
    EXPECT_EQ((double)cb.attention, gqa_attention(4096, 64, 4, 128));  // count_parameters' own
    EXPECT_NEAR(tb.total / 235e9, 1.0, 0.01) << tb.total;   // Qwen3-235B-A22B: 235B total
    EXPECT_NEAR(tb.active / 22e9, 1.0, 0.02) << tb.active;  // 22B activated
}

TEST(MoeShapeFlops, RoutedSharedAndDenseLayersInModelFlops) {
    // The matmul weights one token uses (6 FLOPs each): 3 dense layers with an MLP of
    // ffn_hidden, 58 MoE layers with 8 routed experts of moe_ffn_hidden, the shared expert and
    // the router. Each key's share is the change it makes (the attention's is the mla helper's).
    const JobSpec job = load_ok(std::string(kDeepSeekV3) + kNode);
    auto matmul = [&](auto change) {
        ModelSpec m = job.model;
        change(m);
        return flops_per_token(m, Recompute::none, AttentionFlops::full, 129280).params_matmul;
    };
    const double h = 7168, base = matmul([](ModelSpec&) {});
    EXPECT_DOUBLE_EQ(base - matmul([](ModelSpec& m) { m.moe_ffn_hidden = 1024; }), 58 * 8 * 3 * h * 1024);
    EXPECT_DOUBLE_EQ(base - matmul([](ModelSpec& m) { m.shared_expert_ffn_hidden = 0; }), 58 * 3 * h * 2048);
    EXPECT_DOUBLE_EQ(matmul([](ModelSpec& m) { m.first_dense_layers = 4; }) - base,
                     3 * h * 18432 - (8 * 3 * h * 2048 + 3 * h * 2048 + h * 256));
    // Full recompute runs every layer's forward again: twice those weights per token more.
    const FlopsEstimate full = flops_per_token(job.model, Recompute::full, AttentionFlops::full, 129280);
    const FlopsEstimate none = flops_per_token(job.model, Recompute::none, AttentionFlops::full, 129280);
    EXPECT_NEAR(full.hardware_per_token - none.hardware_per_token,
                2.0 * (base - 129280 * h) + none.attention_per_token / 3.0, 1e-9 * base);
}

// ---- a DeepSeek-V3-shaped job on a cluster: per stage, and EP 64 under TP 2 with expert_tp 1 ----

// The MoE side of DeepSeek-V3 with 8 layers; `model_extra` / `parallel_extra` add keys.
std::string small_job(int pp, int first_dense, const std::string& parallel_extra = "", int nodes = 1, int tp = 1,
                      int ep = 8) {
    return "[model]\narch = \"llama\"\nlayers = 8\nhidden = 7168\nheads = 128\nkv_heads = 128\nffn_hidden = 18432\n"
           "vocab = 129280\nseq_len = 4096\nexperts = 256\ntop_k = 8\nmoe_ffn_hidden = 2048\nshared_expert_ffn_hidden = 2048\n"
           "first_dense_layers = " + std::to_string(first_dense) +
           "\n[cluster]\nnodes = " + std::to_string(nodes) + "\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n"
           "[parallel]\ntp = " + std::to_string(tp) + "\npp = " + std::to_string(pp) + "\nep = " + std::to_string(ep) +
           "\nsequence_parallel = " + (tp > 1 ? "true" : "false") + "\nasync_tensor_model_parallel_allreduce = false\n" +
           parallel_extra + "[training]\nmicro_batch = 1\nglobal_batch = 64\nprecision = \"bf16\"\n";
}

TEST(MoeShapeStages, DenseFirstLayersChangeTheirStagesParamsAndTime) {
    // 8 layers over pp 4 (2 per stage), tp 1, dp 2, ep 2: per rank an MoE layer holds its
    // attention, norms, router, shared expert and 128 of the 256 experts; a dense layer its MLP
    // of ffn_hidden.
    const double h = 7168, attn = 4.0 * h * h, norms = 2 * h;
    const double moe_layer = attn + norms + h * 256 + 3 * h * 2048 + 128 * 3 * h * 2048;
    const double dense_layer = attn + norms + 3 * h * 18432;
    const double embed = 129280 * h;  // vocab 129280 is a multiple of 128: unpadded
    for (int first_dense : {0, 2, 3}) {
        SCOPED_TRACE("first_dense_layers " + std::to_string(first_dense));
        const Estimate e = estimate_job(load_ok(small_job(4, first_dense, "", 1, 1, 2)));
        ASSERT_EQ(e.stages.size(), 4u);
        // stage 0: layers 0, 1; stage 1: layers 2, 3 — dense where below first_dense.
        auto expected = [&](int first_layer) {
            double n = 0;
            for (int l = first_layer; l < first_layer + 2; ++l) n += l < first_dense ? dense_layer : moe_layer;
            return n;
        };
        EXPECT_NEAR(e.stages[0].params_count / (expected(0) + embed), 1.0, 1e-12);
        EXPECT_NEAR(e.stages[1].params_count / expected(2), 1.0, 1e-12);
        EXPECT_NEAR(e.stages[2].params_count / expected(4), 1.0, 1e-12);
    }
    // The dense layers' stage holds a tenth of the parameters and does other work: its
    // memory and forward time differ from the all-MoE layout's stage 0; stage 2 is unchanged.
    const Estimate moe = estimate_job(load_ok(small_job(4, 0, "", 1, 1, 2)));
    const Estimate dense2 = estimate_job(load_ok(small_job(4, 2, "", 1, 1, 2)));
    EXPECT_LT(dense2.stages[0].mem.total(), 0.5 * moe.stages[0].mem.total());
    EXPECT_NE(dense2.stages[0].fwd_s, moe.stages[0].fwd_s);
    EXPECT_NE(dense2.stages[0].act_per_microbatch, moe.stages[0].act_per_microbatch);
    EXPECT_DOUBLE_EQ(dense2.stages[2].fwd_s, moe.stages[2].fwd_s);
    EXPECT_DOUBLE_EQ(dense2.stages[2].mem.total(), moe.stages[2].mem.total());
    // The most loaded stage moves off stage 0 (it held the most in-flight micro-batches).
    EXPECT_EQ(moe.worst_stage, 0);
    EXPECT_NE(dense2.worst_stage, 0);
}

TEST(MoeShapeStages, PlannerScreeningAgreesWithTheDetailedEstimate) {
    // The planner's shortcut evaluates a balanced split's representative stages only; with the
    // dense layers reaching stage 1 (first_dense 3, 2 layers per stage) it must still see them.
    for (int first_dense : {2, 3}) {
        const JobSpec job = load_ok(small_job(4, first_dense, "", 1, 1, 2));
        const EstimateContext ctx = make_estimate_context(job);
        Estimate detail;
        const LayoutScore fast = evaluate_layout(ctx, layout_choice_of(job), {}, nullptr);
        const LayoutScore full = evaluate_layout(ctx, layout_choice_of(job), {}, &detail);
        EXPECT_DOUBLE_EQ(fast.peak_bytes, full.peak_bytes) << first_dense;
        EXPECT_NEAR(fast.step_s / full.step_s, 1.0, 1e-12) << first_dense;
    }
}

// DeepSeek-V3 as Megatron-Bridge runs it: 8 nodes here (64 GPUs), TP 2, EP 64, expert_tp 1.
std::string folded_job(const std::string& expert_tp_line) {
    return small_job(1, 3, "distributed_optimizer = true\n" + expert_tp_line, 8, 2, 64);
}

TEST(MoeExpertTp, Ep64UnderTp2NeedsExpertTp) {
    // dp = 32: EP 64 does not divide dp·cp, so without folding it is refused...
    auto plain = load(folded_job(""));
    ASSERT_FALSE(plain.has_value());
    EXPECT_NE(plain.error().str().find("parallel.ep: got 64, but ep must divide dp·cp = 32"), std::string::npos)
        << plain.error().str();
    // ...and with expert_tp = 1 the expert groups fold tp·cp·dp = 64 ranks into 1 × 64 × 1.
    const JobSpec job = load_ok(folded_job("expert_tp = 1\n"));
    EXPECT_EQ(job.parallel.etp(), 1);
    // Saved and read back, the key stays.
    EXPECT_EQ(load_ok(save_job_toml(job)).parallel.expert_tp, 1);
}

TEST(MoeExpertTp, AllToAllAndExpertStatesAsHandComputed) {
    const JobSpec job = load_ok(folded_job("expert_tp = 1\n"));
    const Estimate e = estimate_job(job);
    ASSERT_EQ(e.stages.size(), 1u);
    const StageEstimate& s = e.stages[0];
    // The all-to-all: each rank sends the k = 8 routed copies of its SP shard, T/t = 4096/2
    // tokens × 7168 × 2 bytes; the EP group is 64 consecutive ranks (etp = 1 apart): 8 per
    // node over 8 nodes, driving 8 NIC shares (dgx-h100: 8 × 400 Gb/s per node).
    const double bytes = 2.0 * 8 * (4096 / 2) * 7168;
    const double comm_eff = time_model_constants().comm_eff;
    est::GroupNet g;
    g.n = 64, g.per_node = 8, g.nodes = 8;
    g.bus_intra = job.cluster.gpu.link_gbps * 1e9 * comm_eff;
    g.bus_inter = job.cluster.inter_gbps * 1e9 * comm_eff * 8;
    const double a2a = est::all_to_all_time(bytes, g);
    // 7/64 of the bytes over NVLink, 8 ranks × 56/64 of theirs over the node's NICs.
    const double by_hand = std::max(7.0 / 64 * bytes / g.bus_intra, 8.0 * 56 / 64 * bytes / g.bus_inter);
    EXPECT_NEAR(a2a / by_hand, 1.0, 0.01);  // + NCCL's latency, ~20 µs of ~5 ms
    // Dispatch + combine, forward and backward, in each of the 5 MoE layers (3 of 8 are dense).
    EXPECT_NEAR(s.ep_s / (5 * 4.0 * a2a), 1.0, 1e-9) << s.ep_s;
    // Expert states: 256 / 64 = 4 experts of 3·7168·2048 per rank, whole (etp = 1), their
    // optimizer state over expert-DP = 2·32 / (1·64) = 1 rank: 12 bytes each (fp32 master, m, v).
    const double experts_per_layer = 4 * 3.0 * 7168 * 2048;
    const double dense_params = s.params_count - 5 * experts_per_layer;
    EXPECT_NEAR(s.mem.optimizer, 12.0 * 5 * experts_per_layer + 12.0 * dense_params / 32, 1e-6 * s.mem.optimizer);
    // expert_tp 1 has no expert-TP collective: the layer's TP time is the attention's pair and
    // the shared expert's pair, as a dense layer's two pairs (same message, same group).
    const JobSpec dense_job = load_ok(
        "[model]\narch = \"llama\"\nlayers = 8\nhidden = 7168\nheads = 128\nkv_heads = 128\nffn_hidden = 18432\n"
        "vocab = 129280\nseq_len = 4096\n[cluster]\nnodes = 8\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n"
        "[parallel]\ntp = 2\nsequence_parallel = true\nasync_tensor_model_parallel_allreduce = false\n"
        "[training]\nmicro_batch = 1\nglobal_batch = 64\nprecision = \"bf16\"\n");
    EXPECT_NEAR(s.tp_s / estimate_job(dense_job).stages[0].tp_s, 1.0, 1e-9);
    // With expert_tp = tp (EP 16 fits dp·cp = 32) the dispatcher gathers k·T·h over TP: more TP time.
    const Estimate unfolded = estimate_job(load_ok(small_job(1, 3, "", 8, 2, 16)));
    EXPECT_GT(unfolded.stages[0].tp_s, 1.5 * s.tp_s);
}

TEST(MoeExpertTp, ExportWritesTheFlagOnlyWhenItDiffersFromTp) {
    const JobSpec folded = load_ok(folded_job("expert_tp = 1\n"));
    auto out = export_job(folded, ExportFormat::megatron);
    ASSERT_TRUE(out.has_value()) << out.error().str();
    EXPECT_NE(out->text.find("--expert-tensor-parallel-size 1"), std::string::npos) << out->text;
    auto same = export_job(load_ok(small_job(1, 3, "expert_tp = 2\n", 8, 2, 16)), ExportFormat::megatron);
    ASSERT_TRUE(same.has_value()) << same.error().str();
    EXPECT_EQ(same->text.find("--expert-tensor-parallel-size"), std::string::npos) << same->text;
}

TEST(MoeExpertTp, BadValuesAreRefusedWithTheirReason) {
    struct Case {
        std::string text, message;
    };
    const Case cases[] = {
        // ep·etp = 64·4 = 256 does not divide tp·cp·dp = 64.
        {folded_job("expert_tp = 4\n"),
         "parallel.expert_tp: got 4 with ep 64: ep·expert_tp = 256 must divide tp·cp·dp = 2·1·32 = 64"},
        // the routed experts' width 2048 is not divisible by 3.
        {small_job(1, 3, "expert_tp = 3\n", 8, 2, 1),
         "the routed experts' width (moe_ffn_hidden 2048) must be divisible by expert_tp"},
        // the folded groups follow Megatron's default rank order only.
        {small_job(1, 3, "expert_tp = 1\norder = \"tp-cp-ep-pp-dp\"\n", 8, 2, 64),
         "the folded expert groups are laid out over Megatron's default order only"},
        // a dense model has no experts to fold.
        {"[model]\narch = \"llama\"\nlayers = 8\nhidden = 1024\nheads = 8\nvocab = 32000\nseq_len = 1024\n"
         "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[parallel]\ntp = 2\nexpert_tp = 1\n"
         "[training]\nmicro_batch = 1\nglobal_batch = 8\n",
         "parallel.expert_tp: got 1 for a dense model"},
    };
    for (const Case& c : cases) ptd_test::expect_refused(load(c.text), c.message, "moe2.toml:");
}

TEST(MoeSharedExpert, OverlapHidesTheAllToAllBehindTheSharedExperts) {
    const Estimate plain = estimate_job(load_ok(folded_job("expert_tp = 1\n")));
    const Estimate overlap = estimate_job(load_ok(folded_job("expert_tp = 1\nmoe_shared_expert_overlap = true\n")));
    EXPECT_LT(overlap.stages[0].ep_s, plain.stages[0].ep_s);
    EXPECT_DOUBLE_EQ(overlap.stages[0].fwd_s, plain.stages[0].fwd_s);  // the shared GEMMs still run
}

}  // namespace

namespace {

// moe2: `ptd layout`'s rank groups under MoE parallel folding (Megatron-core's expert
// RankGenerator over "tp-ep-dp-pp" with tp = expert_tp inside each stage's tp·cp·dp ranks).
TEST(MoeFoldedLayout, FoldedExpertGroups) {
    // DeepSeek-V3's TP 2, EP 64, expert_tp 1 on 64 GPUs: one EP group of ranks 0..63 (8 nodes),
    // expert-DP groups of one rank.
    auto folded = job_layout(load_ok(folded_job("expert_tp = 1\n")));
    ASSERT_TRUE(folded.has_value()) << folded.error().str();
    ASSERT_EQ(folded->ep_groups.size, 64);
    ASSERT_EQ(folded->ep_groups.count, 1);
    for (int k = 0; k < 64; ++k) EXPECT_EQ(folded->ep_groups.begin(0)[k], k);
    EXPECT_EQ(folded->ep_groups.spans_nodes[0], 1);
    EXPECT_EQ(folded->expert_dp_groups.size, 1);
    // TP 4, expert_tp 2, EP 8 on 64 GPUs: EP groups step by expert_tp (0, 2, …, 14), the
    // expert-DP groups by expert_tp·ep (0, 16, 32, 48); rank 1 is in the second of each.
    auto mixed = job_layout(load_ok(small_job(1, 3, "expert_tp = 2\n", 8, 4, 8)));
    ASSERT_TRUE(mixed.has_value()) << mixed.error().str();
    ASSERT_EQ(mixed->ep_groups.size, 8);
    ASSERT_EQ(mixed->expert_dp_groups.size, 4);
    const int g = mixed->ep_groups.group_of[1], x = mixed->expert_dp_groups.group_of[1];
    for (int k = 0; k < 8; ++k) EXPECT_EQ(mixed->ep_groups.begin(g)[k], 1 + 2 * k);
    for (int k = 0; k < 4; ++k) EXPECT_EQ(mixed->expert_dp_groups.begin(x)[k], 1 + 16 * k);
    EXPECT_EQ(mixed->ep_groups.begin(mixed->ep_groups.group_of[0])[1], 2);
}


// moeperm: Qwen3-30B-A3B's routing (128 experts, top-8) on a bare layer at tp 1, EP 8: T tokens
// of h, R = 8·T routed copies sent, G = R computed (no expert TP), 16 local experts.
est::LayoutDerived qwen3_dispatch_layer(const ModelSpec& m, bool flex, bool fused) {
    est::LayoutDerived L = ptd_test::llama_layer_tp8();
    L.t = 1, L.sp = false, L.heads_l = 32, L.kv_l = 4, L.f_l = 768;
    L.moe = true, L.m = &m, L.ep = 8, L.etp = 1;
    L.node_dedup = flex;
    L.ep_token_ranks = flex ? est::expected_expert_nodes(128, 8, 8, 0, 0) : 1.0;
    L.moe_permute_fusion = fused;
    return L;
}

TEST(MoeDispatcherPasses, UnfusedFusedAndFlexAsHandCounted) {
    ModelSpec m;
    m.experts = 128, m.top_k = 8, m.activation = Activation::swiglu;
    const double T = 4096, h = 4096, e = 2, R = 8 * T, G = R;
    const double hbm = ptd_test::llama_layer_tp8().hbm, row = e * h / hbm;
    // A token reaches a given EP rank unless all 8 picks miss its 16 experts: 1 − C(112, 8) / C(128, 8).
    double miss = 1.0;
    for (int i = 0; i < 8; ++i) miss *= (112.0 - i) / (128.0 - i);
    const double T_in = T * 8.0 * (1.0 - miss);
    struct Case {
        bool flex, fused;
        double fwd, bwd;
    };
    const Case cases[] = {
        // PyTorch's gather, zero-filled scatter, probability weighting and k-sum; the sorts by
        // local expert after and before the all-to-all (4G each way).
        {false, false, 8 * R + T + 4 * G, 7 * R + 3 * T + 4 * G},
        // TE's fused permute (T + R) and unpermute (R + T); backward T + 2R and R + T.
        {false, true, 2 * R + 2 * T + 4 * G, 3 * R + 2 * T + 4 * G},
        // Flex: the rank permutes what it received, once per token and rank, with no sorts.
        {true, true, 2 * G + 2 * T_in, 3 * G + 2 * T_in},
        {true, false, 8 * G + T_in, 7 * G + 3 * T_in},
    };
    for (const Case& c : cases) {
        const est::LayerTime lt = est::layer_forward_time(qwen3_dispatch_layer(m, c.flex, c.fused));
        EXPECT_NEAR(lt.moe_dispatch, c.fwd * row, 1e-9 * c.fwd * row) << c.flex << c.fused;
        EXPECT_NEAR(lt.moe_dispatch_bwd, c.bwd * row, 1e-9 * c.bwd * row) << c.flex << c.fused;
    }
    EXPECT_GT(T_in, 5.0 * T);  // ~5.25 distinct ranks of 8 per token
    EXPECT_LT(T_in, R);
}

TEST(MoeDispatcherPasses, TheStacksFusionReachesTheEstimate) {
    // The same NeMo job with the recipes' fused permutation and with it written off: the fused
    // one spends less in the dispatcher's passes. (A fast host: at MBS 1 the default DGX host's
    // per-expert work hides the GPU's time, moehost.)
    const std::string job = "[model]\npreset = \"qwen3-30b-a3b\"\n[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"b200\"\n"
                            "host_op_us = 0.01\n"
                            "[parallel]\ntp = 1\nep = 8\n";
    const std::string training = "[training]\nframework = \"nemo\"\nmicro_batch = 1\nglobal_batch = 64\n";
    const JobSpec fused = load_ok(job + training), unfused = load_ok(job + "moe_permute_fusion = false\n" + training);
    ASSERT_TRUE(fused.parallel.moe_permute_fusion);
    ASSERT_FALSE(unfused.parallel.moe_permute_fusion);
    EXPECT_LT(estimate_job(fused).step_s, estimate_job(unfused).step_s);
}

// moefp8pad: with a Transformer Engine FP8 recipe Megatron-core's TEGroupedMLP copies the G rows
// its local experts compute into the FP8-aligned layout (Fp8Padding) and its output back out of it
// (Fp8Unpadding); the backward does the same to the gradients. Worked example, the layer of
// MoeDispatcherPasses (Qwen3-30B-A3B routing, EP 8, TE's fused permute, T = 4096 tokens of h = 4096):
// G = 8·4096 = 32,768 rows, 4·G·h·2 B = 1.07 GB more over HBM each way.
TEST(MoeFp8Padding, AlignmentCopiesAsHandCounted) {
    ModelSpec m;
    m.experts = 128, m.top_k = 8, m.activation = Activation::swiglu;
    const double T = 4096, h = 4096, e = 2, G = 8 * T;
    est::LayoutDerived L = qwen3_dispatch_layer(m, false, true);
    const est::LayerTime plain = est::layer_forward_time(L);
    L.moe_fp8_pad = true;
    const est::LayerTime padded = est::layer_forward_time(L);
    const double bytes = 4.0 * G * h * e;
    EXPECT_DOUBLE_EQ(bytes, 1073741824.0);
    EXPECT_NEAR(padded.moe_dispatch - plain.moe_dispatch, bytes / L.hbm, 1e-9 * bytes / L.hbm);
    EXPECT_NEAR(padded.moe_dispatch_bwd - plain.moe_dispatch_bwd, bytes / L.hbm, 1e-9 * bytes / L.hbm);
    EXPECT_DOUBLE_EQ(padded.gemm, plain.gemm);  // the GEMMs see the same rows (padding < 16 per expert)
}

// Which jobs pay it: an FP8 (Transformer Engine recipe) dropless MoE job without the router's
// padding. The router's padding, capacity padding and bf16 each leave the step as without it.
TEST(MoeFp8Padding, OnlyDroplessFp8WithoutRouterPadding) {
    const std::string job = "[model]\npreset = \"qwen3-30b-a3b\"\n[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"b200\"\n"
                            "host_op_us = 0.01\n"
                            "[parallel]\ntp = 1\nep = 8\n";
    auto step = [&](const std::string& parallel, const std::string& fp8) {
        return estimate_job(load_ok(job + parallel + "[training]\nframework = \"nemo\"\nmicro_batch = 1\nglobal_batch = 64\n" + fp8))
            .step_s;
    };
    const std::string mx = "fp8 = \"mxfp8\"\n";
    const double padded = step("", mx), router = step("moe_router_padding_for_fp8 = true\n", mx);
    EXPECT_GT(padded, router);
    EXPECT_LT(padded, 1.1 * router);  // a few HBM passes per layer, not a GEMM's worth
    EXPECT_DOUBLE_EQ(step("moe_pad_to_capacity = true\n", mx), step("moe_pad_to_capacity = true\nmoe_router_padding_for_fp8 = true\n", mx));
    EXPECT_DOUBLE_EQ(step("", ""), step("moe_router_padding_for_fp8 = true\n", ""));
    // A whole-step graph needs static, aligned expert inputs: nothing to pad.
    const std::string full = "cuda_graph_impl = \"local\"\ncuda_graph_scope = [\"full_iteration\"]\nmoe_pad_to_capacity = true\n";
    EXPECT_DOUBLE_EQ(step(full, mx), step(full + "moe_router_padding_for_fp8 = true\n", mx));
}

TEST(MoeFp8Padding, KeySavedExportedAndRefusedOnADenseModel) {
    const std::string job = "[model]\npreset = \"qwen3-30b-a3b\"\n[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"b200\"\n"
                            "[parallel]\ntp = 1\nep = 8\nmoe_router_padding_for_fp8 = true\n"
                            "[training]\nframework = \"nemo\"\nmicro_batch = 1\nglobal_batch = 64\nfp8 = \"mxfp8\"\n";
    const JobSpec padded = load_ok(job);
    EXPECT_TRUE(padded.parallel.moe_router_padding_for_fp8);
    EXPECT_TRUE(load_ok(save_job_toml(padded)).parallel.moe_router_padding_for_fp8);
    auto out = export_job(padded, ExportFormat::megatron);
    ASSERT_TRUE(out.has_value()) << out.error().str();
    EXPECT_NE(out->text.find("--moe-router-padding-for-fp8"), std::string::npos) << out->text;
    const JobSpec plain = load_ok(folded_job("expert_tp = 1\n"));
    EXPECT_EQ(save_job_toml(plain).find("moe_router_padding_for_fp8"), std::string::npos);
    auto plain_out = export_job(plain, ExportFormat::megatron);
    ASSERT_TRUE(plain_out.has_value()) << plain_out.error().str();
    EXPECT_EQ(plain_out->text.find("--moe-router-padding-for-fp8"), std::string::npos) << plain_out->text;
    ptd_test::expect_refused(load("[model]\narch = \"llama\"\nlayers = 8\nhidden = 1024\nheads = 8\nvocab = 32000\nseq_len = 1024\n"
                                  "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[parallel]\ntp = 1\n"
                                  "moe_router_padding_for_fp8 = true\n[training]\nmicro_batch = 1\nglobal_batch = 8\n"),
                             "parallel.moe_router_padding_for_fp8: true for a dense model",
                             "moe2.toml:");
    ptd_test::expect_refused(load(job.substr(0, job.find("moe_router")) + "moe_router_padding_for_fp8 = 1\n" +
                                  job.substr(job.find("[training]"))),
                             "moe_router_padding_for_fp8", "moe2.toml:");
}

}  // namespace
