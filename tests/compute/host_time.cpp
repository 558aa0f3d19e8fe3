// host_time.cpp — host time and CUDA graphs: the host's enqueue time of one layer
// (eager ops × the host CPU's per-op cost, estimators/src/model/host.cpp) by hand, its effect on the
// step (none where the GPU dominates, max(GPU, host) per stretch between the MoE dispatcher's
// host syncs, the whole forward + backward without them), what the CUDA-graph scopes remove, and
// the keys' validation, TOML round trip, Megatron-LM export and the published-runs loader;
// moerouter: the router's kernels with and without --moe-router-fusion; moeorder: the host's
// launches up to the experts delay the GPU work after them.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/estimate_internal.h"
#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/spec/presets.h"

#include "job_test_util.h"
#include "published_run.h"
#include "published_runs_test_util.h"

namespace {

using namespace ptd;

Result<JobSpec> load(const std::string& text) { return load_job_text(text, "hostov.toml", embedded_presets()); }

JobSpec load_ok(const std::string& text) { return ptd_test::job_from_text(text, "hostov.toml"); }

// The documented weights (host.cpp): a TE module call = 2.7 eager ops; the DGX H100 host's eager
// op = 13.48 µs. moehost: a local expert's cuBLASLt GEMM 10 µs, its FP8 quantization 5 µs + two
// 3 µs allocations, and per expert weight in the backward a 5 µs placeholder gradient plus one
// eager op for DDP's hook.
constexpr double kTe = 2.7, kOp = 13.48e-6;
constexpr double kExpertGemm = 10.0 / 13.48, kExpertQuant = 11.0 / 13.48, kExpertWeightBwd = 5.0 / 13.48 + 1.0;

// A layer as derive() would leave it for the host model: megatron, tp 1, bf16, no graphs.
est::LayoutDerived bare(const ModelSpec& m) {
    est::LayoutDerived L{};
    L.m = &m;
    L.t = 1, L.ep = 1, L.etp = 1;
    L.moe = m.experts > 1;
    L.rc = Recompute::none;
    L.host_model = true;
    L.host_op_s = kOp;
    return L;
}

// add_host_time skips counting a dense layer whose GPU time exceeds 256 eager ops (host.cpp
// kDenseLayerOpsBound): the heaviest dense layer the model counts must stay under it — MLA with
// q / k norms, TP, FP8, and each recompute (full replays the forward; selective every module).
TEST(HostTimeLayer, EveryDenseLayerStaysUnderTheSkipBound) {
    const ModelSpec m;  // dense
    est::LayoutDerived L = bare(m);
    L.t = 8, L.mla = true, L.qk_norm = true, L.fp8_te = true;
    L.rc_style = RecomputeStyle::megatron;
    for (const Recompute rc : {Recompute::none, Recompute::full, Recompute::selective}) {
        L.rc = rc;
        L.rc_modules = kRecomputeCoreAttn | kRecomputeLayernorm | kRecomputeMlaUpProj | kRecomputeMlp;
        const est::HostLayerTime h = est::host_layer_time(L);
        EXPECT_GT(h.fwd + h.bwd, 0.0);
        EXPECT_LT(h.fwd + h.bwd, 256.0 * kOp) << to_string(rc);
    }
}

ModelSpec qwen3_30b_like() {
    ModelSpec m;
    m.experts = 128;
    m.top_k = 8;
    return m;
}

// A Qwen3-30B-A3B-like MoE layer on EP 8 (16 local experts) with the dropless dispatcher's host
// sync and the recipes' fused router (31 router kernels).
est::LayoutDerived moe_ep8(const ModelSpec& m) {
    est::LayoutDerived L = bare(m);
    L.ep = 8;
    L.moe_host_sync = true;
    L.moe_router_fusion = true;
    return L;
}

TEST(HostTimeLayer, DenseLayerAsHandCounted) {
    const ModelSpec m;  // dense
    est::LayoutDerived L = bare(m);
    // Attention: 3 TE calls + RoPE ×2 + residual add; MLP: 2 TE calls + activation + add.
    const double fwd_ops = (3 * kTe + 3) + (2 * kTe + 2);
    est::HostLayerTime h = est::host_layer_time(L);
    EXPECT_NEAR(h.fwd, fwd_ops * kOp, 1e-12);
    EXPECT_NEAR(h.bwd, 2 * fwd_ops * kOp, 1e-12);
    // TP adds two collectives per block; full recompute replays the forward in the backward.
    L.t = 2;
    L.rc = Recompute::full;
    h = est::host_layer_time(L);
    EXPECT_NEAR(h.fwd, (fwd_ops + 4) * kOp, 1e-12);
    EXPECT_NEAR(h.bwd, 3 * (fwd_ops + 4) * kOp, 1e-12);
    // Selective recompute launches its modules again in the backward: the attention core (one TE
    // call) by default, the dense MLP with "mlp".
    L.t = 1;
    L.rc = Recompute::selective;
    L.rc_style = RecomputeStyle::megatron;
    L.rc_modules = kRecomputeCoreAttn | kRecomputeMlp;
    h = est::host_layer_time(L);
    EXPECT_NEAR(h.bwd, (2 * fwd_ops + kTe + (2 * kTe + 2)) * kOp, 1e-12);
    // Not Megatron-core: no host model.
    L.host_model = false;
    EXPECT_EQ(est::host_layer_time(L).fwd, 0.0);
}

TEST(HostTimeLayer, MoeLayerAsHandCounted) {
    const ModelSpec m = qwen3_30b_like();
    est::LayoutDerived L = moe_ep8(m);
    L.qk_norm = true;
    // Attention with per-head norms 3 TE + 3 + 2 TE; pre-MLP norm (TE) + router 31; preprocess 13
    // (EP); dispatch permute 2 + two all-to-alls + sort 2; experts 2 TE + 2; combine unsort,
    // all-to-all, unpermute; residual add. 16 local experts: 32 GEMMs forward, 64 backward, and
    // 32 weights, each with a placeholder gradient and a DDP hook in the backward.
    const double attn = 3 * kTe + 3 + 2 * kTe, router = kTe + 31, pre = 13, rest = 6 + 2 * kTe + 2 + 3 + 1;
    const double ops = attn + router + pre + rest;
    const double experts_fwd = 32 * kExpertGemm, experts_bwd = 64 * kExpertGemm + 32 * kExpertWeightBwd;
    est::HostLayerTime h = est::host_layer_time(L);
    EXPECT_NEAR(h.fwd, (ops + experts_fwd) * kOp, 1e-12);
    EXPECT_NEAR(h.bwd, (2 * ops + experts_bwd) * kOp, 1e-12);
    // Graphs of attn / moe_router / moe_preprocess: those regions become one launch each way
    // (attention, router + preprocess).
    L.graph_scope = kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess;
    h = est::host_layer_time(L);
    EXPECT_NEAR(h.fwd, (rest + 2 + experts_fwd) * kOp, 1e-12);
    EXPECT_NEAR(h.bwd, (2 * rest + 2 + experts_bwd) * kOp, 1e-12);
    // FP8 (Transformer Engine): each expert's GEMM input is quantized forward and its output
    // gradient backward, eagerly (the attention's quantizations are inside its graph).
    L.fp8_te = true;
    h = est::host_layer_time(L);
    EXPECT_NEAR(h.fwd, (rest + 2 + experts_fwd + 32 * kExpertQuant) * kOp, 1e-12);
    EXPECT_NEAR(h.bwd, (2 * rest + 2 + experts_bwd + 32 * kExpertQuant) * kOp, 1e-12);
    L.fp8_te = false;
    // The whole step in one graph: nothing per layer.
    L.graph_scope = kGraphFullIteration;
    h = est::host_layer_time(L);
    EXPECT_EQ(h.fwd + h.bwd, 0.0);
}

// moerouter: without --moe-router-fusion the router's forward runs 72 kernels, not 31 (Megatron-LM's
// DeepSeek-V3 GB200 guide §2.1.4), each an eager op; its backward twice that. Worked example, a
// Qwen3-30B-A3B-like layer (EP 8) on the DGX H100 host (13.48 µs an op): 41 more ops forward =
// 0.553 ms, 82 backward = 1.105 ms; the flex (DeepEP) dispatcher's fused preprocess keeps the same
// 41; a captured moe_router graph is one launch either way.
TEST(HostTimeLayer, UnfusedRouterEnqueuesTheGuidesSeventyTwoKernels) {
    const ModelSpec m = qwen3_30b_like();
    est::LayoutDerived L = moe_ep8(m);
    const est::HostLayerTime fused = est::host_layer_time(L);
    L.moe_router_fusion = false;
    const est::HostLayerTime unfused = est::host_layer_time(L);
    EXPECT_NEAR(unfused.fwd - fused.fwd, 41 * kOp, 1e-12);
    EXPECT_NEAR(unfused.fwd - fused.fwd, 0.553e-3, 0.001e-3);
    EXPECT_NEAR(unfused.bwd - fused.bwd, 82 * kOp, 1e-12);
    EXPECT_NEAR(unfused.bwd - fused.bwd, 1.105e-3, 0.001e-3);
    L.node_dedup = true;  // flex dispatcher: router + fused preprocess 17 kernels fused, 58 unfused
    const est::HostLayerTime flex_unfused = est::host_layer_time(L);
    L.moe_router_fusion = true;
    EXPECT_NEAR(flex_unfused.fwd - est::host_layer_time(L).fwd, 41 * kOp, 1e-12);
    L.node_dedup = false;
    // The router captured in a graph: one launch each way, fused or not.
    L.graph_scope = kGraphMoeRouter;
    const double captured_fused = est::host_layer_time(L).fwd;
    L.moe_router_fusion = false;
    EXPECT_NEAR(est::host_layer_time(L).fwd, captured_fused, 1e-12);
    // A dense layer has no router: the key changes nothing.
    const ModelSpec dense;
    est::LayoutDerived D = bare(dense);
    const double dense_fwd = est::host_layer_time(D).fwd;
    D.moe_router_fusion = true;
    EXPECT_EQ(est::host_layer_time(D).fwd, dense_fwd);
}

TEST(HostTimeStep, HostBoundStretchesShowSyncOrNot) {
    const ModelSpec m = qwen3_30b_like();
    est::LayoutDerived L = bare(m);
    L.ep = 8;
    L.moe_host_sync = true;
    const est::HostLayerTime h = est::host_layer_time(L);
    ASSERT_GT(h.fwd, 1e-4);
    // Four layers whose GPU time is shorter than the host's: with a sync per MoE layer each
    // direction takes the host's time.
    const double layers = 4, g_fwd = 0.25 * h.fwd, g_bwd = 0.5 * h.bwd;
    ChunkTime c;
    c.fwd.compute = layers * g_fwd;
    c.bwd.compute = layers * g_bwd;
    est::add_host_time(L, est::LayerTime{}, layers, c);
    EXPECT_NEAR(c.fwd.compute, layers * h.fwd, 1e-12);
    EXPECT_NEAR(c.bwd.compute, layers * h.bwd, 1e-12);
    // Without the sync (static expert inputs) the host runs ahead over forward and backward:
    // only what it exceeds of the whole shows, shared by where the host spends its time.
    L.moe_host_sync = false;
    ChunkTime d;
    d.fwd.compute = layers * g_fwd;
    d.bwd.compute = layers * 2.0 * h.bwd;  // a long backward hides the forward's host time
    const ChunkTime before = d;
    est::add_host_time(L, est::LayerTime{}, layers, d);
    const double idle = std::max(0.0, h.fwd + h.bwd - g_fwd - 2.0 * h.bwd);
    EXPECT_NEAR(d.fwd.compute + d.bwd.compute - before.fwd.compute - before.bwd.compute, layers * idle, 1e-12);
    // A big layer whose GPU time dominates: untouched, sync or not.
    for (bool sync : {true, false}) {
        L.moe_host_sync = sync;
        ChunkTime big;
        big.fwd.compute = layers * 10 * h.fwd;
        big.bwd.compute = layers * 10 * h.bwd;
        const ChunkTime kept = big;
        est::add_host_time(L, est::LayerTime{}, layers, big);
        EXPECT_EQ(big.fwd.compute, kept.fwd.compute);
        EXPECT_EQ(big.bwd.compute, kept.bwd.compute);
    }
}

// moeorder: after the dispatcher's host sync the GPU queue is empty, and the GPU work behind
// the routed experts (the combine's all-to-all, the unpermute, the next layer's attention) cannot
// start before the host has launched every expert. Worked example: Qwen3-30B-A3B-like, EP 8
// (16 local experts), sync on, no graphs. From the sync to the experts' last op the host
// enqueues the dispatch (permute 2, two all-to-alls, sort 2), the experts' module calls
// (2 TE + 2) and 32 expert GEMMs.
TEST(HostTimeStep, HostBeforeTheExpertsDelaysTheGpuWorkAfterThem) {
    const ModelSpec m = qwen3_30b_like();
    est::LayoutDerived L = moe_ep8(m);
    L.moe_host_sync = true;
    const est::HostLayerTime h = est::host_layer_time(L);
    const double to_experts = (6 + 2 * kTe + 2 + 32 * kExpertGemm) * kOp;
    EXPECT_NEAR(h.fwd_to_experts, to_experts, 1e-12);
    // A forward whose GPU time is 0.95 of the host's, 0.85 of the host's of it after the
    // experts: the exposed forward EP time 0.3 (half of it the combine's), the unpermute's half
    // of the dispatcher's passes 0.05, the QKV and output-projection GEMMs and the attention
    // core 0.65.
    const double layers = 3, hf = h.fwd;
    est::LayerTime lt;
    lt.moe_dispatch = 0.1 * hf;
    lt.gemm_qkv = 0.3 * hf, lt.gemm_proj = 0.15 * hf, lt.attn = 0.2 * hf;
    ChunkTime c;
    c.fwd.compute = layers * 0.65 * hf;
    c.fwd.ep = layers * 0.3 * hf;
    c.bwd.compute = layers * 10 * h.bwd;  // a GPU-bound backward: untouched
    est::add_host_time(L, lt, layers, c);
    const double after = (0.15 + 0.05 + 0.3 + 0.15 + 0.2) * hf;
    // The stretch: max(host, host to the experts + GPU after them, GPU) — here the middle term,
    // about 0.37 + 0.85 of the host's forward (max(host, GPU) alone would give the host's).
    ASSERT_GT(to_experts + after, hf);
    EXPECT_NEAR(c.fwd.compute + c.fwd.ep, layers * (to_experts + after), 1e-12);
    EXPECT_NEAR(c.bwd.compute, layers * 10 * h.bwd, 1e-12);
    // Without the sync the host runs ahead of the GPU: no ordering term.
    L.moe_host_sync = false;
    ChunkTime d;
    d.fwd.compute = layers * 0.65 * hf;
    d.fwd.ep = layers * 0.3 * hf;
    d.bwd.compute = layers * 10 * h.bwd;
    est::add_host_time(L, lt, layers, d);
    EXPECT_NEAR(d.fwd.compute, layers * 0.65 * hf, 1e-12);
}

// A small dense job (GPU-bound) and a tiny-expert MoE job on one DGX H100 node.
std::string dense_job(const std::string& cluster_extra = "") {
    return "[model]\narch = \"llama\"\nlayers = 8\nhidden = 8192\nheads = 64\nkv_heads = 8\nffn_hidden = 28672\n"
           "vocab = 128256\nseq_len = 8192\n"
           "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n" + cluster_extra +
           "[parallel]\ntp = 8\npp = 1\nsequence_parallel = true\n"
           "[training]\nmicro_batch = 1\nglobal_batch = 4\nprecision = \"bf16\"\n";
}
std::string tiny_moe_job(const std::string& parallel_extra = "", const std::string& cluster_extra = "") {
    return "[model]\narch = \"llama\"\nlayers = 8\nhidden = 512\nheads = 8\nkv_heads = 8\nffn_hidden = 128\n"
           "vocab = 32000\nseq_len = 512\nexperts = 128\ntop_k = 8\n"
           "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n" + cluster_extra +
           "[parallel]\ntp = 1\npp = 1\nep = 8\n" + parallel_extra +
           "[training]\nmicro_batch = 1\nglobal_batch = 64\nprecision = \"bf16\"\n";
}
const char* kFastHost = "host_op_us = 0.01\n";  // a host ~1000× faster than the DGX H100's

TEST(HostTimeStep, BigDenseLayerUnchanged) {
    const Estimate slow = estimate_job(load_ok(dense_job())), fast = estimate_job(load_ok(dense_job(kFastHost)));
    EXPECT_EQ(slow.step_s, fast.step_s);
}

TEST(HostTimeStep, TinyExpertsHostBoundAndGraphsRemoveIt) {
    const Estimate eager = estimate_job(load_ok(tiny_moe_job()));
    const Estimate fast = estimate_job(load_ok(tiny_moe_job("", kFastHost)));
    EXPECT_GT(eager.step_s, 1.5 * fast.step_s) << eager.step_s << " vs " << fast.step_s;
    // The GB200 tray's Grace host (37.08 µs per op) is slower still.
    const Estimate grace = estimate_job(load_ok(tiny_moe_job("", "host_op_us = 37.08\n")));
    EXPECT_GT(grace.step_s, eager.step_s);
    // Partial graphs take part of it away; the whole step in one graph (padded experts) all of it.
    const Estimate partial = estimate_job(load_ok(
        tiny_moe_job("cuda_graph_impl = \"transformer_engine\"\ncuda_graph_scope = [\"attn\", \"moe_router\", \"moe_preprocess\"]\n")));
    EXPECT_LT(partial.step_s, eager.step_s);
    EXPECT_GT(partial.step_s, fast.step_s);
    const Estimate full = estimate_job(load_ok(tiny_moe_job(
        "cuda_graph_impl = \"local\"\ncuda_graph_scope = [\"full_iteration\"]\nmoe_pad_to_capacity = true\n")));
    EXPECT_NEAR(full.step_s, fast.step_s, 1e-9 * fast.step_s);
}

TEST(HostTimeKeys, BadValuesAreRefusedWithTheirReason) {
    struct Case {
        std::string text, message;
    };
    const std::string dense_mlp = "[model]\narch = \"llama\"\nlayers = 8\nhidden = 1024\nheads = 8\nvocab = 32000\nseq_len = 1024\n"
                                  "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[parallel]\ntp = 1\n";
    const std::string train = "[training]\nmicro_batch = 1\nglobal_batch = 8\n";
    const Case cases[] = {
        {tiny_moe_job("cuda_graph_impl = \"cudagraph\"\n"), "cuda_graph_impl"},
        {tiny_moe_job("cuda_graph_impl = \"local\"\ncuda_graph_scope = [\"layer\"]\n"),
         "parallel.cuda_graph_scope[0]: got \"layer\"; allowed: full_iteration, attn, mlp, moe, moe_router, moe_preprocess"},
        {tiny_moe_job("cuda_graph_scope = [\"attn\"]\n"), "[\"attn\"] with cuda_graph_impl \"none\""},
        {tiny_moe_job("cuda_graph_impl = \"local\"\ncuda_graph_scope = [\"full_iteration\", \"attn\"]\nmoe_pad_to_capacity = true\n"),
         "allowed: \"full_iteration\" alone"},
        {tiny_moe_job("cuda_graph_impl = \"transformer_engine\"\ncuda_graph_scope = [\"full_iteration\"]\nmoe_pad_to_capacity = true\n"),
         "full_iteration with cuda_graph_impl \"local\""},
        {tiny_moe_job("cuda_graph_impl = \"transformer_engine\"\ncuda_graph_scope = [\"moe_preprocess\"]\n"),
         "\"moe_preprocess\" together with \"moe_router\""},
        {dense_mlp + "cuda_graph_impl = \"transformer_engine\"\ncuda_graph_scope = [\"moe_router\"]\n" + train,
         "[\"moe_router\"] for a dense model (experts = "},
        {dense_mlp + "moe_pad_to_capacity = true\n" + train, "parallel.moe_pad_to_capacity: true for a dense model"},
        {tiny_moe_job("cuda_graph_impl = \"local\"\n"), "(the whole layer) captures the MoE layer of a dropless MoE model"},
        {tiny_moe_job("cuda_graph_impl = \"local\"\ncuda_graph_scope = [\"full_iteration\"]\n"),
         "allowed: parallel.moe_pad_to_capacity = true"},
        {tiny_moe_job("cuda_graph_impl = \"transformer_engine\"\ncuda_graph_scope = [\"moe\"]\n"), "dropless MoE model"},
        {tiny_moe_job("cuda_graph_impl = \"transformer_engine\"\ncuda_graph_scope = [\"attn\"]\n") + "framework = \"torchtitan\"\n",
         "allowed: only with framework \"megatron\""},
        {tiny_moe_job("", "host_op_us = 0\n"), "host_op_us"},
    };
    for (const Case& c : cases) ptd_test::expect_refused(load(c.text), c.message, "hostov.toml");
    // What Megatron accepts loads: a dense whole-layer graph, the dropless MoE scope, padded
    // whole layers.
    load_ok(dense_mlp + "cuda_graph_impl = \"local\"\n" + train);
    load_ok(tiny_moe_job("cuda_graph_impl = \"transformer_engine\"\ncuda_graph_scope = [\"attn\", \"moe_router\", \"moe_preprocess\"]\n"));
    load_ok(tiny_moe_job("cuda_graph_impl = \"local\"\nmoe_pad_to_capacity = true\n"));
}

TEST(HostTimeKeys, SavedAndReadBack) {
    const JobSpec job = load_ok(tiny_moe_job(
        "cuda_graph_impl = \"transformer_engine\"\ncuda_graph_scope = [\"attn\", \"moe_router\", \"moe_preprocess\"]\n"
        "moe_pad_to_capacity = true\n", "host_op_us = 20.5\n"));
    const JobSpec back = load_ok(save_job_toml(job));
    EXPECT_EQ(back.parallel.cuda_graph_impl, CudaGraphImpl::transformer_engine);
    EXPECT_EQ(back.parallel.cuda_graph_scope, (uint32_t)(kGraphAttn | kGraphMoeRouter | kGraphMoePreprocess));
    EXPECT_TRUE(back.parallel.moe_pad_to_capacity);
    EXPECT_EQ(back.cluster.host_op_us, 20.5);
    const std::string plain = save_job_toml(load_ok(tiny_moe_job()));
    EXPECT_EQ(plain.find("cuda_graph"), std::string::npos) << plain;
    EXPECT_EQ(plain.find("moe_pad_to_capacity"), std::string::npos) << plain;
    // A cluster preset brings its host CPU's figure.
    const JobSpec gb200 = load_ok("[model]\narch = \"llama\"\nlayers = 8\nhidden = 1024\nheads = 8\nvocab = 32000\nseq_len = 1024\n"
                                  "[cluster]\npreset = \"gb200-nvl72\"\nnodes = 2\n[parallel]\ntp = 1\n"
                                  "[training]\nmicro_batch = 1\nglobal_batch = 8\n");
    EXPECT_EQ(gb200.cluster.host_op_us, 37.08);
}

TEST(HostTimeExport, MegatronFlags) {
    using ptd_test::export_text;
    ptd_test::expect_mentions(export_text(load_ok(tiny_moe_job("cuda_graph_impl = \"transformer_engine\"\n"
                                                               "cuda_graph_scope = [\"attn\", \"moe_router\", \"moe_preprocess\"]\n")),
                                          ExportFormat::megatron),
                              {"--cuda-graph-impl transformer_engine", "--cuda-graph-scope attn moe_router moe_preprocess"});
    ptd_test::expect_mentions(export_text(load_ok(tiny_moe_job("cuda_graph_impl = \"local\"\ncuda_graph_scope = [\"full_iteration\"]\n"
                                                               "moe_pad_to_capacity = true\n")),
                                          ExportFormat::megatron),
                              {"--cuda-graph-impl local", "--cuda-graph-scope full_iteration", "--no-check-for-nan-in-loss-and-grad",
                               "--moe-expert-capacity-factor 1.0", "--moe-pad-expert-input-to-capacity"});
    const std::string plain = export_text(load_ok(tiny_moe_job()), ExportFormat::megatron);
    ASSERT_FALSE(plain.empty());
    ptd_test::expect_no_mention(plain, {"--cuda-graph", "--moe-pad-expert-input-to-capacity"});
}

TEST(HostTimeLoader, RunKeysReachTheJob) {
    const ::Run run = ptd_test::load_moe_run_row(
        "host_time_keys.toml",
        "cuda_graph_impl = \"local\"\ncuda_graph_scope = [\"full_iteration\"]\nmoe_pad_to_capacity = true\n");
    EXPECT_EQ(run.job.parallel.cuda_graph_impl, CudaGraphImpl::local);
    EXPECT_EQ(run.job.parallel.cuda_graph_scope, (uint32_t)kGraphFullIteration);
    EXPECT_TRUE(run.job.parallel.moe_pad_to_capacity);
}

TEST(HostTimeLoader, PublishedRowsCarryTheirRecipesGraphs) {
    auto find = [&](const std::string& name) -> const ::Run* {
        for (const ::Run& r : ptd_test::published_runs())
            if (r.name == name) return &r;
        return nullptr;
    };
    const ::Run* full = find("mbridge2608-qwen3-30b-a3b-gb200-mxfp8");
    ASSERT_NE(full, nullptr);
    EXPECT_TRUE(full->skip.empty()) << full->skip;
    EXPECT_EQ(full->job.parallel.cuda_graph_impl, CudaGraphImpl::local);
    EXPECT_EQ(full->job.parallel.cuda_graph_scope, (uint32_t)kGraphFullIteration);
    EXPECT_TRUE(full->job.parallel.moe_pad_to_capacity);
    const ::Run* te = find("mbridge2602-qwen3-30b-a3b-b200-mxfp8-mbs1");
    ASSERT_NE(te, nullptr);
    EXPECT_EQ(te->job.parallel.cuda_graph_impl, CudaGraphImpl::transformer_engine);
    EXPECT_EQ(te->job.parallel.cuda_graph_scope, (uint32_t)(kGraphMoeRouter | kGraphMoePreprocess));
    EXPECT_FALSE(te->job.parallel.moe_pad_to_capacity);
    const ::Run* dgxc = find("dgxc2505-deepseek-v3-256gb200-bf16");
    ASSERT_NE(dgxc, nullptr);
    EXPECT_TRUE(dgxc->job.parallel.moe_pad_to_capacity);  // the token-drop callback pads
    EXPECT_EQ(dgxc->job.parallel.cuda_graph_impl, CudaGraphImpl::none);
    EXPECT_EQ(dgxc->job.cluster.host_op_us, 37.08);  // the gb200-nvl72 preset's Grace host
}

// moerouter: a row's router fusion is its stack's at the row's date unless the row states it —
// NeMo 25.04's DeepSeek-V3 recipe ran before Megatron-core had a fused router, Megatron-Bridge
// 26.08's Qwen3 configs set it; a row without a date runs today's recipes.
TEST(HostTimeLoader, PublishedRowsTakeTheirReleasesRouterFusion) {
    EXPECT_FALSE(ptd_test::published_run("dgxc2505-deepseek-v3-256gb200-bf16").job.parallel.moe_router_fusion);
    EXPECT_TRUE(ptd_test::published_run("mbridge2608-qwen3-30b-a3b-gb200-mxfp8").job.parallel.moe_router_fusion);
    EXPECT_TRUE(ptd_test::load_moe_run_row("router.toml", "").job.parallel.moe_router_fusion);
    EXPECT_FALSE(ptd_test::load_moe_run_row("router.toml", "moe_router_fusion = false\n").job.parallel.moe_router_fusion);
}

}  // namespace
