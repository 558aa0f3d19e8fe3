// moe_tp_dispatch.cpp — how Megatron-core runs a Mixture-of-Experts layer under tensor parallelism, as
// the estimator models it (collectives.cpp tp_mlp_comm / ep_all_to_all_bytes, overlap.cpp
// hide_tp_comm, compute.cpp's dispatcher passes; source: megatron/core/transformer/moe/
// token_dispatcher.py MoEAlltoAllTokenDispatcher and moe_utils.py permute / unpermute):
//   - the expert-parallel all-to-all carries the k routed copies of the rank's sequence-parallel
//     shard (T/t tokens), not of the whole micro-batch;
//   - the TP all-gather / reduce-scatter of an MoE layer moves the k routed copies (k·T·h);
//   - Transformer Engine's userbuffers (tp_comm_overlap) hide the attention's TP collectives
//     only: the dispatcher's stay exposed;
//   - permute / unpermute (and the sort by local expert) are memory-bound passes on top of the
//     GEMMs;
//   - the Megatron export asks for that dispatcher (Megatron's default is allgather).
#include <string>

#include <gtest/gtest.h>

#include "model/estimate_internal.h"
#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/spec/presets.h"

namespace {

using namespace ptd;
using ptd::est::LayoutDerived;

// One DGX H100 node; a Mixtral-shaped layer stack (8 experts, SwiGLU, GQA), small enough to
// estimate quickly. `model_extra` / `parallel_extra` add keys; dp fills the node.
std::string job_text(int tp, int ep, int experts, int top_k, const std::string& parallel_extra = "") {
    const int dp = 8 / tp;
    std::string moe = experts > 0 ? "experts = " + std::to_string(experts) + "\ntop_k = " + std::to_string(top_k) + "\n" : "";
    return "[model]\narch = \"llama\"\nlayers = 4\nhidden = 4096\nheads = 32\nkv_heads = 8\nffn_hidden = 14336\n"
           "vocab = 32000\nseq_len = 4096\n" + moe +
           "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n"
           "[parallel]\ntp = " + std::to_string(tp) + "\ndp = " + std::to_string(dp) + "\nep = " + std::to_string(ep) +
           "\nsequence_parallel = " + (tp > 1 ? "true" : "false") +
           "\nasync_tensor_model_parallel_allreduce = false\n" + parallel_extra +
           "[training]\nmicro_batch = 1\nglobal_batch = 64\nprecision = \"bf16\"\n";
}

Estimate estimate(const std::string& text) {
    auto job = load_job_text(text, "moe.toml", embedded_presets());
    EXPECT_TRUE(job.has_value()) << (job ? "" : job.error().str());
    return job ? estimate_job(*job) : Estimate{};
}

// Micro-batches per step of job_text's layout (global batch 64, micro-batch 1).
double micro_batches(int tp) { return 64.0 / (8 / tp); }

TEST(MoeTpDispatch, AllToAllCarriesTheSequenceParallelShard) {
    // Same EP group size (4, inside the node) and tokens per micro-batch; with tp 2 and SP each
    // rank holds and dispatches half the tokens, so one micro-batch's all-to-all time halves
    // (up to the fixed latency). Counting the whole micro-batch on every TP rank gave 1.
    const double tp1 = estimate(job_text(1, 4, 8, 2)).time.ep_comm / micro_batches(1);
    const double tp2 = estimate(job_text(2, 4, 8, 2)).time.ep_comm / micro_batches(2);
    ASSERT_GT(tp1, 0.0);
    EXPECT_NEAR(tp2 / tp1, 0.5, 0.05) << "tp1 " << tp1 << " s, tp2 " << tp2 << " s per micro-batch";
}

TEST(MoeTpDispatch, TensorParallelGatherMovesTheRoutedCopies) {
    // tp 4, no EP: an MoE layer with top-1 routing gathers and scatters T·h like a dense MLP;
    // top-2 gathers 2·T·h for the experts (the attention's pair is unchanged), so the TP time
    // grows by about half. One pair per layer per direction for both was the old count.
    const double dense = estimate(job_text(4, 1, 0, 0)).time.tp_comm;
    const double top1 = estimate(job_text(4, 1, 8, 1)).time.tp_comm;
    const double top2 = estimate(job_text(4, 1, 8, 2)).time.tp_comm;
    ASSERT_GT(dense, 0.0);
    EXPECT_NEAR(top1 / dense, 1.0, 1e-9);
    EXPECT_GT(top2 / top1, 1.35);
    EXPECT_LT(top2 / top1, 1.55);
}

TEST(MoeTpDispatch, UserbuffersHideOnlyTheAttentionsCollectives) {
    // With tp_comm_overlap the dense layer hides its MLP's collectives behind FC1 / FC2; an MoE
    // layer's all-gather and reduce-scatter are the dispatcher's NCCL calls and stay exposed:
    // at least half of its un-overlapped TP time (the MLP half at top-1) remains.
    const std::string overlap = "tp_comm_overlap = true\n";
    const double moe_plain = estimate(job_text(4, 1, 8, 1)).time.tp_comm;
    const double moe_overlap = estimate(job_text(4, 1, 8, 1, overlap)).time.tp_comm;
    const double dense_overlap = estimate(job_text(4, 1, 0, 0, overlap)).time.tp_comm;
    EXPECT_LT(moe_overlap, moe_plain);
    EXPECT_GE(moe_overlap, 0.5 * moe_plain * 0.98) << "plain " << moe_plain << " overlap " << moe_overlap;
    // lean: the TP time under userbuffers also holds the GEMM pieces they run (overlap.cpp
    // ub_chunking_cost: the dense layer's four GEMMs, the MoE layer's QKV and proj); the
    // communication left exposed is what the MoE layer keeps more of.
    auto pieces = [](bool moe) {
        LayoutDerived L{};
        L.t = 4, L.tokens = 4096, L.h = 4096, L.d = 128, L.heads_l = 8, L.kv_l = 2, L.f_l = 3584;
        L.swiglu = true, L.moe = moe, L.sms = 132, L.peak = 989.4e12, L.fp8 = Fp8Recipe::none;
        L.gemm_eff_max = time_model_constants().kernel(GpuGeneration::hopper).gemm_eff_max;
        const est::UbChunking u = est::ub_chunking_cost(L, est::LayerTime{});
        return micro_batches(4) * 4.0 * (u.fwd + u.bwd);  // 4 layers, no recompute
    };
    EXPECT_GT(dense_overlap - pieces(false), 0.0);
    EXPECT_GT(moe_overlap - pieces(true), 1.5 * (dense_overlap - pieces(false)));
}

TEST(MoeTpDispatch, DispatcherPassesAddMemoryBoundTime) {
    // One MoE layer's forward on one rank, built by hand: T tokens per micro-batch, k = 2 of 8
    // experts, bf16. The dispatcher's passes in hidden-sized rows (compute.cpp): forward
    // 8R + T_shard, backward 7R + 3·T_shard with R = k·T_shard, plus 4·k·T each way for the sort
    // by local expert when a rank holds more than one expert.
    ModelSpec m;
    m.arch = Arch::llama, m.layers = 1, m.hidden = 4096, m.heads = 32, m.kv_heads = 8, m.ffn_hidden = 14336;
    m.experts = 8, m.top_k = 2, m.seq_len = 4096;
    auto layer = [&](int tp, int ep) {
        LayoutDerived L{};
        L.m = &m;
        L.t = tp, L.p = 1, L.v = 1, L.c = 1, L.ep = ep, L.dp = 8 / tp, L.b = 1, L.mbs = 1;
        L.s_local = m.seq_len, L.tokens = m.seq_len, L.e = 2, L.h = m.hidden, L.d = m.head_dim();
        L.heads_l = (double)m.heads / tp, L.kv_l = (double)m.kv_heads / tp, L.f_l = (double)m.ffn_hidden / tp;
        L.sp = tp > 1, L.flash = true, L.swiglu = true, L.moe = true;
        L.peak = 989e12, L.hbm = 3000e9, L.gemm_eff_max = 0.7, L.flash_eff = 0.5, L.elementwise_factor = 1;
        L.fp8 = Fp8Recipe::none;
        return ptd::est::layer_forward_time(L);
    };
    const double T = 4096, k = 2, row = 2.0 * 4096 / 3000e9;  // seconds per hidden-sized row
    // tp 1, ep 8: one local expert, no sorts.
    const auto one = layer(1, 8);
    EXPECT_NEAR(one.moe_dispatch, (8 * k * T + T) * row, 1e-12);
    EXPECT_NEAR(one.moe_dispatch_bwd, (7 * k * T + 3 * T) * row, 1e-12);
    // tp 1, ep 4: two local experts, the sorts on k·T rows each way.
    const auto two = layer(1, 4);
    EXPECT_NEAR(two.moe_dispatch - one.moe_dispatch, 4 * k * T * row, 1e-12);
    EXPECT_NEAR(two.moe_dispatch_bwd - one.moe_dispatch_bwd, 4 * k * T * row, 1e-12);
    // tp 4 with SP, ep 8 (still one local expert): permute / unpermute work on the T/4 shard.
    const auto shard = layer(4, 8);
    EXPECT_NEAR(shard.moe_dispatch, one.moe_dispatch / 4, 1e-12);
    // The passes are part of the layer's forward and backward compute (block_compute).
    ChunkTime c;
    ptd::est::block_compute(LayoutDerived{}, one, 1.0, false, false, c);
    EXPECT_NEAR(c.fwd.compute, one.gemm + one.attn + one.elem + one.moe_dispatch, 1e-12);
    EXPECT_NEAR(c.bwd.compute, 2 * one.gemm + one.attn_bwd + 2 * one.elem + one.moe_dispatch_bwd, 1e-12);
}

TEST(MoeTpDispatch, MegatronExportAsksForTheAllToAllDispatcher) {
    auto job = load_job_text(job_text(2, 4, 8, 2), "moe.toml", embedded_presets());
    ASSERT_TRUE(job.has_value()) << job.error().str();
    auto out = export_job(*job, ExportFormat::megatron);
    ASSERT_TRUE(out.has_value()) << out.error().str();
    EXPECT_NE(out->text.find("--moe-token-dispatcher-type alltoall"), std::string::npos) << out->text;
    for (const std::string& n : out->notes) EXPECT_EQ(n.find("MoELayer"), std::string::npos) << n;
    // tp > 1 without SP: Megatron-core's MoELayer raises in training; the export says so.
    job->parallel.sequence_parallel = false;
    auto no_sp = export_job(*job, ExportFormat::megatron);
    ASSERT_TRUE(no_sp.has_value()) << no_sp.error().str();
    bool noted = false;
    for (const std::string& n : no_sp->notes) noted = noted || n.find("sequence_parallel = true") != std::string::npos;
    EXPECT_TRUE(noted);
    // A dense job gets no dispatcher flag.
    auto dense = load_job_text(job_text(2, 1, 0, 0), "dense.toml", embedded_presets());
    ASSERT_TRUE(dense.has_value());
    auto dense_out = export_job(*dense, ExportFormat::megatron);
    ASSERT_TRUE(dense_out.has_value());
    EXPECT_EQ(dense_out->text.find("--moe-token-dispatcher-type"), std::string::npos);
}

}  // namespace
