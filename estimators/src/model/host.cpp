// host.cpp (hostov) — the host's side of a step: a PyTorch / Megatron-core step is enqueued op
// by op by Python, the PyTorch dispatcher and cudaLaunchKernel, and the GPU idles whenever the
// host falls behind. The model: host time of one layer = its eager ops × the host CPU's seconds
// per op (Transformer Engine module calls and C++-launched kernels weighted); a stretch of work between two host syncs takes
// max(GPU time, host time), and (moeorder) at least the host's time to launch the routed experts
// plus the GPU work queued behind them. Megatron-core's dropless MoE token dispatcher copies the per-expert
// token counts to the host inside every MoE layer (token_dispatcher.py, cuda_sync_point
// "before_ep_alltoall" / "before_finish"; the flex DeepEP / HybridEP dispatcher likewise sizes
// its receive buffer from a host copy unless padded to a capacity), so each MoE layer's forward
// is its own stretch; without syncs the host runs ahead over the whole forward and backward.
// CUDA graphs (parallel.cuda_graph_impl / cuda_graph_scope) replay what they capture with one
// launch per captured region and direction; full_iteration captures the step.
// Sources (docs/estimators.md "Host time and CUDA graphs (hostov)"): the host seconds of one
// eager op on the node's CPU — cluster.host_op_us, TransformerEngine issue 2053's measured
// nn.Linear forward (DGX H100 Xeon 8480C 13.48 µs, GB200 Grace 37.08 µs) and te.Linear's 2.7×
// that; a C++-launched kernel — the PyTorch op-to-kernel dispatch chain (J. Lin, "From PyTorch
// op to kernel launch": backend 1–5 µs, cudaLaunchKernel 1–3 µs); op counts — Megatron-core's
// TE layer spec (transformer_layer.py, attention.py, mlp.py, moe/{router,token_dispatcher,
// experts,moe_layer}.py, NVIDIA/Megatron-LM d98e8a6) and the kernel counts of Megatron-LM's
// "Optimizing DeepSeek-V3 Training Performance on NVIDIA GB200 NVL72" (router 72 → 31 kernels
// with router fusion, router + preprocess 17 with DeepEP); capture scopes — Megatron-LM
// docs/user-guide/features/cuda_graph.md and Megatron-Bridge docs/training/cuda-graphs.md.
#include "model/estimate_internal.h"

#include <algorithm>

namespace ptd::est {

namespace {

// A Transformer Engine module call (te.Linear and its kin: LayerNormLinear, GroupedLinear,
// DotProductAttention, the norms) in eager ops: TransformerEngine issue 2053 measured a
// te.Linear forward's CPU time at 2.69× torch.nn.Linear's on GB200 (99.66 / 37.08 µs) and 2.73×
// on GH200 (90.53 / 33.17 µs).
constexpr double kTeModuleOps = 2.7;
// A kernel launched from a C++ loop (Transformer Engine's grouped GEMM, one cuBLAS call per
// local expert, and its per-expert FP8 quantization) in eager ops: backend setup + cudaLaunchKernel
// (the dispatch-chain midpoints 3 + 2 µs) over the DGX H100 eager op (13.48 µs).
constexpr double kLaunchOps = 5.0 / 13.48;
// moehost: what Transformer Engine's GroupedLinear (grouped_linear.py, TE 2.x) does per local
// expert on the host, beyond the one module call. Each expert's GEMM is its own cuBLASLt matmul
// issued from TE's C++ loop (general_grouped_gemm → nvte_multi_stream_cublas_gemm), which builds
// the matmul and layout descriptors and queries cuBLASLt's heuristic on every call: ~10 µs from
// entering such a wrapper to the kernel launch, 5 µs once the heuristic is memoized (RAFT's
// cuBLASLt wrapper measured both, rapidsai/raft PR 1736).
constexpr double kExpertGemmOps = 10.0 / 13.48;
// Each expert's FP8 quantization (fused_multi_quantize / split_quantize): the launch plus the
// output tensors it allocates per expert ("torch.empty() (2x num_gemms calls)", TE issue 1499),
// each allocation an ATen backend call (the dispatch chain's backend 1–5 µs: 3).
constexpr double kExpertQuantOps = (5.0 + 2.0 * 3.0) / 13.48;
// Per expert weight in the backward: GroupedLinear hands Megatron's DDP a placeholder gradient
// (handle_custom_ddp_from_mcore: a torch.empty from Python, an op without a kernel: the chain's
// low end, 5 µs), and the autograd engine runs DDP's Python hook once per parameter
// (distributed_data_parallel.py _make_backward_post_hook → register_grad_ready), an eager op's worth.
constexpr double kExpertWeightBwdOps = 5.0 / 13.48 + 1.0;

// moerouter: the router kernels --moe-router-fusion removes (Megatron-LM's "Optimizing DeepSeek-V3
// Training Performance on NVIDIA GB200 NVL72" §2.1.4: the router's forward, 72 kernels unfused,
// 31 fused), each an eager op enqueued from Python.
constexpr double kUnfusedRouterOps = 72.0 - 31.0;

// One layer's forward by capture region, in eager ops (framework ops launched from Python,
// TE module calls weighted by kTeModuleOps); `launches`: the C++-launched kernels.
// docs/estimators.md "Host time and CUDA graphs (hostov)" lists each count.
struct LayerOps {
    double attn = 0;        // input norm … residual add of the attention block
    double mlp = 0;         // a dense MLP block
    double router = 0;      // MoE: pre-MLP norm, router, shared experts
    double preprocess = 0;  // MoE: the dispatcher's token-count bookkeeping
    double moe_rest = 0;    // MoE: dispatch, the experts' Python side, combine, residual add
    double moe_to_experts = 0;  // moeorder: of moe_rest, the dispatch and the experts' Python side
    double launches_captured = 0;  // FP8 quantizations inside attention / dense MLP / shared experts
    double expert_gemms = 0;       // MoE: one GEMM per local expert and linear (FC1, FC2)
    double expert_quant = 0;       // MoE: one FP8 quantization per local expert and linear
    double expert_weights = 0;     // MoE: local expert weights (FC1, FC2), each with its backward hook
};

LayerOps forward_ops(const LayoutDerived& L) {
    LayerOps o;
    const double te = kTeModuleOps;
    const bool fp8 = L.fp8_te;
    const double tp_pair = L.t > 1 ? 2.0 : 0.0;  // all-gather + reduce-scatter (SP) or two all-reduces
    if (L.mla) {
        // MLA: input norm, q_down, q_up (+ its norm), kv_down, kv_up (+ its norm), attention, proj
        // = 7 TE calls; the latent split, RoPE on q_pe and k_pe, two concatenations, k_pe's
        // expand and the residual add = 7 ops; FP8 quantizes the inputs of q_down / kv_down and proj.
        o.attn = 7.0 * te + 7.0 + tp_pair;
        o.launches_captured += fp8 ? 2.0 : 0.0;
    } else {
        // QKV (LayerNormLinear), attention, proj = 3 TE calls; RoPE on q and k, residual add = 3;
        // per-head q / k norms (two TE norms); FP8 quantizes proj's input (QKV's in its norm).
        o.attn = 3.0 * te + 3.0 + (L.qk_norm ? 2.0 * te : 0.0) + tp_pair;
        o.launches_captured += fp8 ? 1.0 : 0.0;
    }
    if (!L.moe) {
        // FC1 (LayerNormLinear), FC2 = 2 TE calls; activation, residual add = 2; FP8: FC2's input.
        o.mlp = 2.0 * te + 2.0 + tp_pair;
        o.launches_captured += fp8 ? 1.0 : 0.0;
        return o;
    }
    const bool flex = L.node_dedup;  // DeepEP / HybridEP: fused preprocess and dispatch kernels
    const double local_experts = std::max(1.0, (double)L.m->experts / std::max(1, L.ep));
    const bool spread = L.ep > 1 || L.etp > 1;
    // Pre-MLP norm (1 TE); router: 31 kernels with --moe-router-fusion (Megatron-LM's DeepSeek-V3
    // GB200 guide, 2.1.4: 72 → 31), router + preprocess 17 with DeepEP's fused preprocess (2.2).
    // moerouter: without the fusion (Megatron's default; no fused router before Megatron-core
    // 0.14) the router's score function, top-k and auxiliary loss run as the guide's 72 kernels:
    // the 41 the fusion removes come back, with either dispatcher.
    // The all-to-all dispatcher's preprocess (token_dispatcher.py preprocess + the device→host
    // copies of _maybe_dtoh_and_synchronize): with EP or TP 13 ops, else the count and its copy = 2.
    o.router = te + (flex ? 14.0 : 31.0) + (L.moe_router_fusion ? 0.0 : kUnfusedRouterOps);
    o.preprocess = flex ? 3.0 : (spread ? 13.0 : 2.0);
    // Shared experts: FC1, FC2 (2 TE), activation, add; FP8: FC2's input.
    if (L.fs_l > 0) {
        o.router += 2.0 * te + 2.0;
        o.launches_captured += fp8 ? 1.0 : 0.0;
    }
    // Dispatch — all-to-all: permute (2), the tokens' and probabilities' all-to-alls (EP), sort by
    // local expert (2, several local experts); flex: dispatch and the local permute (2).
    // Experts: FC1, FC2 GroupedLinear (2 TE), activation and probability scaling (2).
    // Combine — all-to-all: unsort, all-to-all, unpermute; flex: unpermute, combine; residual add.
    const double dispatch = flex ? 3.0 : 2.0 + (L.ep > 1 ? 2.0 : 0.0) + (local_experts > 1 ? 2.0 : 0.0);
    const double combine = flex ? 2.0 : (local_experts > 1 ? 1.0 : 0.0) + (L.ep > 1 ? 1.0 : 0.0) + 1.0;
    o.moe_rest = dispatch + 2.0 * te + 2.0 + combine + 1.0 + (L.etp > 1 ? 2.0 : 0.0);
    o.moe_to_experts = dispatch + 2.0 * te + 2.0 + (L.etp > 1 ? 1.0 : 0.0);
    // moefp8pad: FP8 alignment of the grouped MLP's rows — Fp8Padding of the inputs and of the
    // probabilities, Fp8Unpadding of the output: three autograd functions from Python.
    if (L.moe_fp8_pad) o.moe_rest += 3.0, o.moe_to_experts += 2.0;
    o.expert_gemms = 2.0 * local_experts;
    o.expert_quant = fp8 ? 2.0 * local_experts : 0.0;
    o.expert_weights = 2.0 * local_experts;
    return o;
}

// Eager ops that selective recompute (recmod: Megatron-core's recompute_modules) launches again
// in the backward: the attention core (core_attn: one TE call), the two norms (layernorm), MLA's
// up projections with RoPE and the concatenations (mla_up_proj), a dense MLP (mlp), the whole
// MoE block (moe), the routed experts' activation and probability scaling (moe_act), the shared
// experts (shared_experts). Graphs do not replay them (the recompute runs eagerly).
double selective_recompute_ops(const LayoutDerived& L, const LayerOps& o) {
    if (L.rc != Recompute::selective) return 0.0;
    const double te = kTeModuleOps;
    double ops = 0;
    if (rc_module(L, kRecomputeCoreAttn)) ops += te;
    if (rc_module(L, kRecomputeLayernorm)) ops += 2.0 * te;
    if (L.mla && rc_module(L, kRecomputeMlaUpProj)) ops += 2.0 * te + 5.0;
    if (!L.moe && rc_module(L, kRecomputeMlp)) ops += o.mlp;
    if (L.moe && rc_module(L, kRecomputeMoe))
        ops += o.router + o.preprocess + o.moe_rest + o.expert_gemms * kExpertGemmOps + o.expert_quant * kExpertQuantOps;
    else {
        if (L.moe && rc_module(L, kRecomputeMoeAct)) ops += 2.0;
        if (L.moe && L.fs_l > 0 && rc_module(L, kRecomputeSharedExperts)) ops += 2.0 * te + 2.0;
    }
    return ops;
}

}  // namespace

HostLayerTime host_layer_time(const LayoutDerived& L) {
    HostLayerTime h;
    if (!L.host_model) return h;
    if (L.graph_scope & kGraphFullIteration) return h;  // one graph launch per step
    const LayerOps o = forward_ops(L);
    const uint32_t g = L.graph_scope;
    // Eager ops of the forward; a captured region is one graph launch (one op) each way. The
    // backward runs each op's backward (a linear's data- and weight-gradient GEMMs, TE's Python
    // autograd functions, gradient casts): twice the forward's ops and C++ GEMM launches, the
    // same count of quantizations (output gradients instead of inputs).
    double ops = 0, graphs = 0;
    auto region = [&](double n, bool captured) {
        if (n <= 0) return;
        if (captured) graphs += 1.0;
        else ops += n;
    };
    region(o.attn, (g & kGraphAttn) != 0);
    region(o.mlp, (g & kGraphMlp) != 0);
    double gemms = 0, quant = 0, expert_quant = 0, expert_weights = 0, to_experts = 0;
    // FP8 quantizations of the attention / dense MLP / shared experts go with their region.
    const bool dense_captured = L.moe ? (g & kGraphAttn) && (g & kGraphMoeRouter) : (g & kGraphAttn) && (g & kGraphMlp);
    if (!dense_captured) quant += o.launches_captured;
    if (L.moe) {
        if (g & kGraphMoe) {
            graphs += 1.0;  // router, dispatch, experts and combine in one graph
        } else {
            const bool router = (g & kGraphMoeRouter) != 0, pre = router && (g & kGraphMoePreprocess) != 0;
            region(o.router + (pre ? o.preprocess : 0.0), router);
            if (!pre) ops += o.preprocess;
            ops += o.moe_rest;
            to_experts = o.moe_to_experts;
            gemms = o.expert_gemms;
            expert_quant = o.expert_quant;
            expert_weights = o.expert_weights;
        }
    }
    // The routed experts' per-expert work (moehost): forward one GEMM and one quantization per
    // expert and linear; backward two GEMMs (data and weight gradient), the output gradient's
    // quantization, and each weight's placeholder gradient and DDP hook.
    const double experts_fwd = gemms * kExpertGemmOps + expert_quant * kExpertQuantOps;
    const double experts_bwd = 2.0 * gemms * kExpertGemmOps + expert_quant * kExpertQuantOps + expert_weights * kExpertWeightBwdOps;
    h.fwd = (ops + graphs + quant * kLaunchOps + experts_fwd) * L.host_op_s;
    h.fwd_to_experts = (to_experts + experts_fwd) * L.host_op_s;
    h.bwd = (2.0 * ops + graphs + quant * kLaunchOps + experts_bwd) * L.host_op_s;
    if (L.rc == Recompute::full) h.bwd += h.fwd;  // the backward replays the forward first
    h.bwd += selective_recompute_ops(L, o) * L.host_op_s;
    return h;
}

namespace {

// moeorder: the forward GPU work of an MoE layer that follows its routed experts — the combine's
// all-to-all (half the layer's exposed forward EP time: dispatch and combine move the same
// bytes), the unpermute (half the dispatcher's passes) — and of the next layer's attention
// until its router (the QKV and output-projection GEMMs and the attention core). A lower bound:
// the norms, casts and router kernels also follow.
double gpu_after_experts_fwd(const LayerTime& lt, double ep_fwd) {
    return 0.5 * ep_fwd + 0.5 * lt.moe_dispatch + lt.gemm_qkv + lt.gemm_proj + lt.attn;
}

}  // namespace

void add_host_time(const LayoutDerived& L, const LayerTime& lt, double layers, ChunkTime& c) {
    if (!L.host_model || layers <= 0) return;
    // GPU time per layer: everything the stream runs (collectives included), not the pipeline hop.
    auto gpu = [](const BlockTime& b) { return b.compute + b.recompute + b.tp + b.cp + b.ep; };
    const double gf = gpu(c.fwd) / layers, gb = gpu(c.bwd) / layers;
    // A dense layer enqueues at most kDenseLayerOpsBound eager ops forward and backward together
    // (forward_ops: under 40 forward, the backward twice that, a full-recompute replay and the
    // selective modules on top), so a GPU busier than that never waits: the planner scores
    // millions of such layouts, and this skips counting their ops.
    constexpr double kDenseLayerOpsBound = 256.0;
    if (!L.moe && gf + gb >= kDenseLayerOpsBound * L.host_op_s) return;
    const HostLayerTime h = host_layer_time(L);
    if (h.fwd + h.bwd <= 0) return;
    if (L.moe && L.moe_host_sync) {
        // Each MoE layer's forward waits for its token counts: the host cannot run ahead of it,
        // and the backward between two forwards is a stretch of its own.
        // moeorder: the sync (token_dispatcher.py _maybe_dtoh_and_synchronize at
        // "before_ep_alltoall") leaves the GPU with nothing queued, and a kernel cannot start
        // before the host has launched it. MoELayer.forward runs dispatch, experts, combine in
        // that order, so the GPU work behind the experts (the combine, the next layer's
        // attention) waits for the host to enqueue every expert first: the stretch takes at
        // least the host's time to the experts' last op plus that GPU work, not only
        // max(host, GPU), when the host's per-expert launches outlast the GPU's dispatch.
        const double after = std::min(gf, gpu_after_experts_fwd(lt, c.fwd.ep / layers));
        const double fwd = std::max({h.fwd, h.fwd_to_experts + after, gf});
        c.fwd.compute += layers * (fwd - gf);
        c.bwd.compute += layers * std::max(0.0, h.bwd - gb);
    } else {
        // No sync: the host runs ahead through forward and backward; only a host slower than the
        // whole shows, shared in proportion to where it spends its time.
        const double idle = layers * std::max(0.0, h.fwd + h.bwd - gf - gb);
        const double share = h.fwd / (h.fwd + h.bwd);
        c.fwd.compute += idle * share;
        c.bwd.compute += idle * (1.0 - share);
    }
}

}  // namespace ptd::est
