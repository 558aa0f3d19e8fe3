// collectives.cpp — how long communication takes: which parallel groups leave the node
// (from the rank order), the bandwidth and latency each group sees, ring collective times,
// and the TP / CP / EP / p2p / DP traffic of a layout.
// Sources: ring all-reduce 2(n−1)/n·bytes/bw and all-gather / reduce-scatter (n−1)/n —
// the nccl-tests "bus bandwidth" definition (NVIDIA nccl-tests doc/PERFORMANCE.md);
// Megatron's TP all-reduces per layer — Shoeybi et al. 2019 §3, with sequence parallelism
// Korthikanti et al. 2022 §4.2; ring attention's K/V exchange — Liu et al. 2023;
// ZeRO traffic — Rajbhandari et al. 2020 §7; Megatron's distributed optimizer —
// Megatron-LM docs/source/api-guide/dist_optimizer.md. docs/estimators.md writes them out.
#include "estimate_internal.h"

#include <algorithm>
#include <cstring>

namespace ptd::est {

namespace {

// Does a group of `n` ranks with rank stride `stride` cross a node boundary?
inline bool spans_nodes(int stride, int n, int gpus_per_node) {
    if (n <= 1) return false;
    long long span = (long long)stride * n;
    return span > gpus_per_node || gpus_per_node % span != 0;
}

// are appended in Megatron's default order. Cheap: no allocation.
struct Strides {
    int tp = 1, cp = 1, ep = 1, dp = 1, pp = 1;
};
Strides order_strides(const char* order, int tp, int cp, int ep, int dp, int pp) {
    // The ep block lives inside dp: expert groups vary ep fastest within the dp·cp block
    // when ep is written before dp (the Megatron default).
    const char* names[5] = {"tp", "cp", "ep", "dp", "pp"};
    int sizes[5] = {tp, cp, 1, dp, pp};  // ep shares the dp dimension for dense ranks
    int seen[5] = {0, 0, 0, 0, 0};
    int seq[5];
    int count = 0;
    for (const char* p = order; *p && count < 5;) {
        const char* dash = std::strchr(p, '-');
        size_t len = dash ? (size_t)(dash - p) : std::strlen(p);
        for (int i = 0; i < 5; ++i)
            if (!seen[i] && len == 2 && std::strncmp(p, names[i], 2) == 0) {
                seen[i] = 1;
                seq[count++] = i;
            }
        if (!dash) break;
        p = dash + 1;
    }
    for (int i = 0; i < 5; ++i)
        if (!seen[i]) seq[count++] = i;
    Strides s;
    int stride = 1;
    int* out[5] = {&s.tp, &s.cp, &s.ep, &s.dp, &s.pp};
    for (int j = 0; j < 5; ++j) {
        int i = seq[j];
        *out[i] = stride;
        stride *= sizes[i];
    }
    // Expert-parallel ranks are consecutive data-parallel ranks (ep varies fastest inside dp).
    s.ep = s.dp;
    return s;
}

}  // namespace

void assign_group_links(const ClusterSpec& cl, const char* order, LayoutDerived& L) {
    const TimeModelConstants& k = time_model_constants();
    Strides st = order_strides(order, L.t, L.c, L.ep, L.dp, L.p);
    const int gpn = cl.gpus_per_node;
    const double intra = (cl.intra_gbps > 0 ? cl.intra_gbps : cl.gpu.link_gbps) * 1e9 * k.comm_eff;
    const double inter = cl.inter_gbps * 1e9 * k.comm_eff;
    auto pick = [&](int stride, int n, double& bw, double& lat) {
        bool out = spans_nodes(stride, n, gpn);
        bw = out ? inter : intra;
        lat = out ? k.latency_inter_s : k.latency_intra_s;
    };
    pick(st.tp, L.t, L.bw_tp, L.lat_tp);
    pick(st.cp, L.c, L.bw_cp, L.lat_cp);
    pick(st.ep, L.ep, L.bw_ep, L.lat_ep);
    pick(st.dp, L.dp, L.bw_dp, L.lat_dp);
    // Dense gradients reduce over dp·cp (Megatron's data-parallel-with-context group): it
    // leaves the node when either of its two parts does.
    if (L.c > 1 && spans_nodes(st.cp, L.c, gpn)) L.bw_dp = inter, L.lat_dp = k.latency_inter_s;
    pick(st.dp * L.ep, L.edp, L.bw_edp, L.lat_edp);
    pick(st.pp, L.p, L.bw_pp, L.lat_pp);
}

double all_reduce_time(double bytes, int n, double bw, double lat) {
    return n <= 1 ? 0 : 2.0 * bytes * (n - 1) / n / bw + lat;
}
double gather_time(double bytes, int n, double bw, double lat) {
    return n <= 1 ? 0 : bytes * (n - 1) / n / bw + lat;
}

void block_comm(const LayoutDerived& L, const LayerTime& lt, double layers, bool first, bool last, ChunkTime& c) {
    BlockTime &F = c.fwd, &B = c.bwd;
    const double T = L.tokens;
    // TP: two all-reduces per layer forward and two backward (all-gather + reduce-scatter with
    // SP: same volume); full recompute repeats the forward ones.
    if (L.t > 1) {
        const double msg = L.e * T * L.h;
        const double one = L.sp ? 2.0 * gather_time(msg, L.t, L.bw_tp, L.lat_tp) : all_reduce_time(msg, L.t, L.bw_tp, L.lat_tp);
        F.tp = layers * 2.0 * one;
        B.tp = layers * (2.0 + (L.rc == Recompute::full ? 2.0 : 0.0)) * one;
        if (first) F.tp += one;                       // vocab-parallel embedding
        if (last) F.tp += 3.0 * (L.lat_tp + 4.0 * T / L.bw_tp);  // cross-entropy max / sum / target
    }
    if (L.c > 1) {
        // Ring attention: K and V chunks travel c − 1 hops forward, dK and dV backward;
        // overlapped with the attention core, the excess is exposed.
        const double kv = 2.0 * L.e * T * L.kv_l * L.d;
        const double t_ring = (L.c - 1) * (kv / L.bw_cp + L.lat_cp);
        F.cp = layers * std::max(0.0, t_ring - lt.attn);
        B.cp = layers * std::max(0.0, 2.0 * t_ring - lt.attn_bwd);
    }
    if (L.moe && L.ep > 1) {
        const double tok = L.e * T * L.m->top_k * L.h;
        const double a2a = tok * (L.ep - 1) / L.ep / L.bw_ep + L.lat_ep;
        F.ep = layers * 2.0 * a2a;  // dispatch + combine, forward and backward
        B.ep = layers * 2.0 * a2a;
    }
    if (L.p > 1) {
        const double hop = L.e * T * L.h * (L.sp ? 1.0 / L.t : 1.0) / L.bw_pp + L.lat_pp;
        F.p2p = hop;  // the activation forward
        B.p2p = hop;  // the gradient backward
    }
}

DpTraffic dp_traffic(const EstimateContext& ctx, const LayoutDerived& L, int stage, double dense_params,
                     double expert_params) {
    const JobSpec& job = ctx.job;
    const int p = L.p, N = L.dp * L.c;
    DpTraffic out;
    // Gradient bytes on the wire: Megatron reduces bf16 runs' fp32 main grads; DeepSpeed
    // and fp16 reduce in the parameter dtype.
    const bool megatron_grads = L.zero == 0;
    const double grad_e = job.training.precision == Precision::fp32 ? 4.0
                        : (megatron_grads && job.training.precision == Precision::bf16 ? 4.0 : 2.0);
    auto dp_cost = [&](double params, int n, double bw, double lat) {
        if (n <= 1 || params <= 0) return;
        if (L.zero == 3) {
            // Per micro-batch: gather weights for forward and backward, reduce-scatter grads.
            out.grad_s += L.mbs * gather_time(grad_e * params, n, bw, lat);
            out.param_s += L.mbs * 2.0 * gather_time(L.e * params, n, bw, lat);
        } else if (L.zero == 2 && p > 1) {
            // FSDP-style ZeRO-2 under a pipeline: every micro-batch's gradients are
            // reduce-scattered into the shards; the updated parameters are gathered once.
            out.grad_s += L.mbs * gather_time(grad_e * params, n, bw, lat);
            out.param_s += gather_time(L.e * params, n, bw, lat);
        } else if (L.optimizer_sharded) {
            out.grad_s += gather_time(grad_e * params, n, bw, lat);
            out.param_s += gather_time(L.e * params, n, bw, lat);
        } else {
            out.grad_s += all_reduce_time(grad_e * params, n, bw, lat);
        }
    };
    dp_cost(dense_params, N, L.bw_dp, L.lat_dp);
    dp_cost(expert_params, L.edp, L.bw_edp, L.lat_edp);
    if (p > 1 && job.model.tied_embeddings && (stage == 0 || stage == p - 1))  // embedding-group all-reduce
        out.grad_s += all_reduce_time(grad_e * L.output_params, 2, L.bw_pp, L.lat_pp);
    return out;
}

}  // namespace ptd::est
