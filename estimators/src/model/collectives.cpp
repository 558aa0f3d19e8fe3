// collectives.cpp — how long communication takes: where each parallel group sits on the
// nodes (members per node, nodes, from the rank order), the bus bandwidth NCCL gets over
// NVLink and over the group's NICs, NCCL's ring / tree / NVLS algorithms with its LL / LL128 /
// Simple protocols picked the way its tuner picks them, and the TP / CP / EP / p2p / DP traffic
// of a layout.
// Sources: ring all-reduce 2(n−1)/n·bytes/busbw and all-gather / reduce-scatter (n−1)/n —
// the nccl-tests "bus bandwidth" definition (NVIDIA nccl-tests doc/PERFORMANCE.md);
// algorithm / protocol latencies and bandwidth factors — NCCL src/graph/tuning.cc
// (ncclTopoTuneModel: baseLatencies, hwLatencies, tree 0.92, LL 0.5, LL128 120/128);
// NVLink SHARP gain — nccl-tests issue #212 and NCCL issues #1455 / #2140 (H100 8 GPUs:
// ring 370 → NVLS 480 GB/s busbw, no gain at ≤ 4 GPUs); a group with k GPUs per node driving
// k NICs — nccl-tests issue #100 (HGX A100, 4 × 200 Gb/s: 91 GB/s busbw) and NCCL issue #1168
// (4 vs 8 GPUs per node: 45 vs 90 GB/s); Megatron's DDP bucket max(40M, 1M·dp) elements —
// Megatron-LM core/distributed/distributed_data_parallel.py; DeepSpeed's reduce / allgather
// bucket 5e8 and ZeRO-3 prefetch bucket 5e7 elements — DeepSpeed config docs;
// DeepSpeed's pipeline p2p (dsthru) — deepspeed/runtime/pipe/schedule.py TrainSchedule (the
// exchange instructions and their order), pipe/p2p.py (blocking send / recv), pipe/engine.py
// (pipe_partitioned, grad_partitioned: PartitionedTensor over the slice-parallel group);
// p2psg: Megatron-LM's scatter/gather pipeline send — Narayanan et al. 2021 §4.1 and
// megatron/p2p_communication.py (Jan 2021 – Mar 2023; skipped under sequence parallelism);
// Megatron's TP all-reduces per layer — Shoeybi et al. 2019 §3, with sequence parallelism
// Korthikanti et al. 2022 §4.2; ring attention's K/V exchange — Liu et al. 2023;
// ZeRO traffic — Rajbhandari et al. 2020 §7; Megatron's distributed optimizer —
// Megatron-LM docs/source/api-guide/dist_optimizer.md. docs/estimators.md writes them out.
// gb200: an NVLink domain of several nodes (GB200 NVL72) is one NCCL node — with MNNVL, NCCL
// (src/init.cc, src/mnnvl.cc; NCCL >= 2.25) fuses the hosts of one NVLink clique into one
// topology, so rings and NVLS run over NVLink inside it and leave it over the NICs of the
// group's members; nccl-tests on one NVL72 rack: 835-847 GB/s all-reduce busbw (coreweave/
// nccl-tests README). Groups are therefore placed per domain, not per host.
#include "model/estimate_internal.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace ptd::est {

namespace {

// NVLink SHARP all-reduce bus bandwidth over ring's at 8 GPUs of a node: 480 / 370 GB/s on
// H100 (nccl-tests #212, NCCL #2140; B300: 845 / 695). Grows from 4 GPUs (no gain) to 8.
constexpr double kNvlsGain8 = 480.0 / 370.0 - 1.0;

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
        size_t len = 0;  // pspeed: one pass over the token, no libc calls (per layout)
        while (p[len] && p[len] != '-') ++len;
        for (int i = 0; i < 5 && len == 2; ++i)
            if (!seen[i] && p[0] == names[i][0] && p[1] == names[i][1]) {
                seen[i] = 1;
                seq[count++] = i;
            }
        if (!p[len]) break;
        p += len + 1;
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

// Members of the group holding rank 0 that sit on node 0: the group is the set of
// i·stride_a + j·stride_b (i < n_a, j < n_b); rank orders place every group alike, so this k
// holds for all of them. A one-dimensional group passes n_b = 1.
static int members_on_first_node(int stride_a, int n_a, int stride_b, int n_b, int gpn) {
    int k = 0;
    for (int j = 0; j < n_b && (long long)j * stride_b < gpn; ++j)
        for (int i = 0; i < n_a && (long long)i * stride_a + (long long)j * stride_b < gpn; ++i) ++k;
    return std::max(k, 1);
}

void assign_group_links(const ClusterSpec& cl, const char* order, LayoutDerived& L) {
    const TimeModelConstants& k = time_model_constants();
    // gb200: NCCL's "node" is the NVLink domain (one host unless NVLink switches join several):
    // ranks fill hosts, then domains, so a group's members per domain decide NVLink vs NICs.
    const int gpn = std::max(cl.job_nvlink_domain(), 1);
    const double intra = (cl.intra_gbps > 0 ? cl.intra_gbps : cl.gpu.link_gbps) * 1e9 * k.comm_eff;
    // Each GPU's share of the node's NIC line rate: a group with k members on a node has
    // k shares, because NCCL's channels spread its rings over the NICs nearest its GPUs and
    // the node's other groups of the same kind use the rest at the same time. The share is
    // per host (its NICs over its GPUs); in a multi-host NVLink domain the k members of the
    // domain sit on their own hosts, each with its own share: still k shares.
    const double share = cl.inter_gbps * 1e9 * k.comm_eff;
    // pspeed2: the planner asks for the same groups over and over (a layout's micro-batch,
    // ZeRO stage and recompute do not move them): the last answer per thread is kept, keyed
    // by every input below, the order string by its text.
    struct Kept {
        char order[40];
        int t, c, ep, dp, p, edp, gpn, dp_rep;
        double intra, share;
        bool nvls;
        GroupNet tp, cp, ep_, dp_, edp_, pp;
        int etp;           // moe2
        GroupNet etp_;     // moe2
        GroupNet dp_rep_, edp_rep_;  // hsdp
    };
    thread_local Kept kept{};
    thread_local bool kept_valid = false;
    const size_t order_len = std::strlen(order);
    if (kept_valid && kept.t == L.t && kept.c == L.c && kept.ep == L.ep && kept.dp == L.dp && kept.p == L.p &&
        kept.edp == L.edp && kept.gpn == gpn && kept.intra == intra && kept.share == share && kept.nvls == cl.nvls &&
        kept.etp == L.etp && kept.dp_rep == L.dp_rep && std::strcmp(kept.order, order) == 0) {
        L.net_tp = kept.tp, L.net_cp = kept.cp, L.net_ep = kept.ep_, L.net_dp = kept.dp_, L.net_edp = kept.edp_,
        L.net_pp = kept.pp;
        L.net_etp = kept.etp_;  // moe2
        L.net_dp_rep = kept.dp_rep_, L.net_edp_rep = kept.edp_rep_;  // hsdp
        return;
    }
    Strides st = order_strides(order, L.t, L.c, L.ep, L.dp, L.p);
    auto fill = [&](GroupNet& g, int n, int members) {
        g.n = std::max(n, 1);
        g.per_node = std::clamp(members, 1, g.n);
        g.nodes = (g.n + g.per_node - 1) / g.per_node;
        g.bus_intra = intra;
        g.bus_inter = share * g.per_node;
        // NVLink SHARP reduces in the NVSwitch; measured on 8 H100 it lifts ring's 370 GB/s
        // busbw to 480 GB/s and gives nothing up to 4 GPUs (NCCL issue #1455).
        g.nvls_gain = cl.nvls && g.nodes == 1 ? 1.0 + kNvlsGain8 * std::clamp((g.per_node - 4) / 4.0, 0.0, 1.0) : 1.0;
    };
    fill(L.net_tp, L.t, members_on_first_node(st.tp, L.t, 1, 1, gpn));
    fill(L.net_cp, L.c, members_on_first_node(st.cp, L.c, 1, 1, gpn));
    fill(L.net_ep, L.ep, members_on_first_node(st.ep, L.ep, 1, 1, gpn));
    // Dense gradients reduce over dp·cp (Megatron's data-parallel-with-context group).
    // hsdp: with R replicas, over the sharding group of dp/R consecutive data-parallel ranks
    // (and their cp ranks) — torchtitan's mesh ["dp_replicate", "dp_shard", "cp", "tp"] and
    // Megatron-core's intra-instance group (contiguous slices of the dp·cp group) — and the
    // gradient shards over the replica group: R ranks, a sharding group's span apart.
    const int R = std::max(1, L.dp_rep);
    fill(L.net_dp, L.dp * L.c / R, members_on_first_node(st.dp, L.dp / R, st.cp, L.c, gpn));
    fill(L.net_dp_rep, R, members_on_first_node(st.dp * (L.dp / R), R, 1, 1, gpn));
    fill(L.net_edp, L.edp / R, members_on_first_node(st.dp * L.ep, L.edp / R, 1, 1, gpn));
    fill(L.net_edp_rep, R, members_on_first_node(st.dp * L.ep * (L.edp / R), R, 1, 1, gpn));
    fill(L.net_pp, L.p, members_on_first_node(st.pp, L.p, 1, 1, gpn));
    L.net_etp = L.net_tp;
    // moe2: MoE parallel folding (Megatron-core parallel_state.py, expert RankGenerator over
    // "tp-ep-dp-pp" with tp = expert_tp, cp = 1): inside a stage's tp·cp·dp consecutive ranks
    // (the default order, which validate_job requires for expert_tp ≠ tp) the expert-TP group is
    // etp consecutive ranks, the EP group ep ranks etp apart, the expert-DP group the rest.
    if (L.etp > 0 && L.etp != L.t) {
        fill(L.net_etp, L.etp, members_on_first_node(1, L.etp, 1, 1, gpn));
        fill(L.net_ep, L.ep, members_on_first_node(L.etp, L.ep, 1, 1, gpn));
        fill(L.net_edp, L.edp / R, members_on_first_node(L.etp * L.ep, L.edp / R, 1, 1, gpn));
        fill(L.net_edp_rep, R, members_on_first_node(L.etp * L.ep * (L.edp / R), R, 1, 1, gpn));
    }
    kept_valid = order_len < sizeof kept.order;
    if (kept_valid) {
        std::memcpy(kept.order, order, order_len + 1);
        kept.t = L.t, kept.c = L.c, kept.ep = L.ep, kept.dp = L.dp, kept.p = L.p, kept.edp = L.edp, kept.gpn = gpn;
        kept.intra = intra, kept.share = share, kept.nvls = cl.nvls;
        kept.tp = L.net_tp, kept.cp = L.net_cp, kept.ep_ = L.net_ep, kept.dp_ = L.net_dp, kept.edp_ = L.net_edp;
        kept.pp = L.net_pp;
        kept.etp = L.etp, kept.etp_ = L.net_etp;  // moe2
        kept.dp_rep = L.dp_rep, kept.dp_rep_ = L.net_dp_rep, kept.edp_rep_ = L.net_edp_rep;  // hsdp
    }
}

// ---- NCCL's cost model ------------------------------------------------------------------------
// Constants from NCCL src/graph/tuning.cc (ncclTunerConstantsDefaults), microseconds.
// Index: protocol LL, LL128, Simple.
namespace {
constexpr int kProtocols = 3;
constexpr double kBaseLatRing[kProtocols] = {6.6, 14.0, 8.4};
constexpr double kBaseLatTree[kProtocols] = {6.8, 14.0, 8.4};
constexpr double kNvlinkLatRing[kProtocols] = {0.6, 1.9, 3.4};  // per ring step over NVLink
constexpr double kNvlinkLatTree[kProtocols] = {0.6, 1.25, 4.0};
constexpr double kNetLatRing[kProtocols] = {2.7, 4.0, 14.0};    // per ring step over the network
constexpr double kNetLatTree[kProtocols] = {5.0, 8.5, 14.0};
constexpr double kNetOverhead = 1.0;                             // per network step (x86 Intel); ×3 for Simple
constexpr double kNvlsLat = 25.0;                                // NVLS Simple over NVLink
// Bus-bandwidth factors per protocol: LL moves 8 bytes per 16 (flag words), LL128 120 of 128.
constexpr double kRingProtoBw[kProtocols] = {0.5, 0.92, 1.0};
constexpr double kTreeProtoBwNet[kProtocols] = {1.0 / 3.8, 120.0 / 128.0, 1.0};
constexpr double kTreeAllReduceBw = 0.92;                        // tree all-reduce vs ring, NCCL's tuner
}  // namespace

namespace {

double nccl_time_uncached(Collective c, double bytes, const GroupNet& g) {
    const int n = g.n;
    const bool ar = c == Collective::all_reduce;
    const bool multi = g.nodes > 1;
    const double bus = multi ? std::min(g.bus_intra, g.bus_inter) : g.bus_intra;
    if (bus <= 0) return std::numeric_limits<double>::infinity();
    const int steps = ar ? 2 * (n - 1) : n - 1;
    const int inter_steps = multi ? (ar ? 2 * (g.nodes - 1) : g.nodes - 1) : 0;
    const double wire = (ar ? 2.0 : 1.0) * (n - 1) / n * bytes;  // bytes each rank moves (busbw definition)
    const bool one_per_node = g.per_node == 1;
    double best = std::numeric_limits<double>::infinity();
    for (int p = 0; p < kProtocols; ++p) {
        // Ring: every step pays its hop; the node's ring leaves it over the group's NICs.
        double intra_lat = kNvlinkLatRing[p];
        if (multi) intra_lat = std::max(intra_lat, kNetOverhead * (p == 2 ? 3.0 : 1.0));
        const double inter_lat = one_per_node ? kNetLatTree[p] : kNetLatRing[p];
        const double ring_lat = kBaseLatRing[p] + (steps - inter_steps) * intra_lat + inter_steps * inter_lat;
        best = std::min(best, ring_lat * 1e-6 + wire / (bus * kRingProtoBw[p]));
        // Tree (all-reduce across nodes): a chain inside the node, a double binary tree across
        // nodes — log latency, the same bandwidth as the ring up to NCCL's 0.92.
        if (ar && multi) {
            int log2_nodes = 0;
            while ((1 << (log2_nodes + 1)) <= g.nodes) ++log2_nodes;
            const double tree_lat =
                kBaseLatTree[p] + 2.0 * ((g.per_node - 1) * kNvlinkLatTree[p] + log2_nodes * kNetLatTree[p]);
            const double tree_bus = bus * kTreeAllReduceBw * kTreeProtoBwNet[p];
            best = std::min(best, tree_lat * 1e-6 + 2.0 * bytes / tree_bus);
        }
    }
    // NVLink SHARP: the switch reduces; one pass up and down, Simple protocol only.
    if (ar && !multi && g.nvls_gain > 1.0) best = std::min(best, kNvlsLat * 1e-6 + wire / (bus * g.nvls_gain));
    return best;
}

}  // namespace

double nccl_time_kept(Collective c, double bytes, const GroupNet& g, NcclTimeSlot& slot) {
    const double seconds = nccl_time_uncached(c, bytes, g);
    slot = NcclTimeSlot{bytes, g.bus_intra, g.bus_inter, g.nvls_gain, g.n, g.per_node, g.nodes, c, seconds};
    return seconds;
}

double p2p_time(double bytes, const GroupNet& g) {
    if (g.n <= 1 || bytes <= 0) return 0;
    // Only one GPU of the node sends across, over its own NIC: one share, not k.
    const bool multi = g.nodes > 1;
    const double bw = multi ? std::min(g.bus_intra, g.bus_inter / g.per_node) : g.bus_intra;
    const double lat = kBaseLatRing[2] + (multi ? kNetLatRing[2] : kNvlinkLatRing[2]);
    return lat * 1e-6 + bytes / bw;
}

double all_to_all_time(double bytes, const GroupNet& g) {
    if (g.n <= 1 || bytes <= 0) return 0;
    // Each rank keeps 1/n, sends (k−1)/n over NVLink and (n−k)/n to other nodes; the node's
    // k ranks share the group's k NIC shares.
    const double n = g.n, k = g.per_node;
    double t = (k - 1) / n * bytes / g.bus_intra;
    if (g.nodes > 1) t = std::max(t, k * (n - k) / n * bytes / g.bus_inter);
    const double lat = kBaseLatRing[2] + (g.nodes > 1 ? kNetLatRing[2] : kNvlinkLatRing[2]);
    return lat * 1e-6 + t;
}

double tp_attention_comm(const LayoutDerived& L) {
    if (L.t <= 1) return 0;
    const double msg = L.e * L.tokens * L.h;
    if (L.mla) {
        // mla: Megatron-core MLASelfAttention's down projections are duplicated on every TP rank
        // and read the rank's own input, so the attention's entry collective carries the latents
        // (q_lora, or h without query compression; kv_lora; the RoPE key part) instead of h:
        // under SP the up projections' all-gathers (and k_pos_emb's) in the forward, their
        // reduce-scatters in the backward; without SP the backward's all-reduce of the latent
        // gradients (copy_to_tensor_model_parallel_region). The exit (linear_proj) stays h
        // wide. Without SP the per-direction figure is the mean of the forward (h) and backward
        // (latent) all-reduce, so that forward + backward is exact.
        const double latent = L.e * L.tokens * ((L.q_lora > 0 ? L.q_lora : L.h) + L.kv_lora + L.d_rope);
        return L.sp ? nccl_time(Collective::all_gather, latent, L.net_tp) + nccl_time(Collective::all_gather, msg, L.net_tp)
                    : 0.5 * (nccl_time(Collective::all_reduce, msg, L.net_tp) + nccl_time(Collective::all_reduce, latent, L.net_tp));
    }
    return L.sp ? 2.0 * nccl_time(Collective::all_gather, msg, L.net_tp) : nccl_time(Collective::all_reduce, msg, L.net_tp);
}

// moe: Megatron-core's MoEAlltoAllTokenDispatcher (megatron/core/transformer/moe/
// token_dispatcher.py, core_r0.9.0 on) with tp > 1: token_permutation all-to-alls the k routed
// copies of the rank's sequence-parallel shard over EP, then gather_from_sequence_parallel_region
// all-gathers them over TP (every TP rank computes all routed tokens on its 1/t of each expert);
// token_unpermutation reduce-scatters the expert output over TP before the all-to-all back. The
// backward runs the pair the other way round. MoELayer refuses TP without SP in training.
// moe2: with expert_tp ≠ tp (MoE parallel folding) the dispatcher's all-gather / reduce-scatter
// run over the expert-TP group (token_dispatcher.py: tp_group = the expert tensor parallel
// group) on the k copies of the etp members' shards — none when etp = 1; the shared experts
// (SharedExpertMLP) add a dense MLP's pair over TP.
double tp_mlp_comm(const LayoutDerived& L) {
    if (L.moe && L.etp > 0 && L.etp != L.t) {
        const double etp = L.etp > 1 ? 2.0 * nccl_time(Collective::all_gather, L.e * L.m->top_k * L.tokens * moe_token_scale(L) * L.h,
                                                       L.net_etp)
                                     : 0.0;
        return etp + (L.fs_l > 0 ? tp_attention_comm(L) : 0.0);
    }
    if (L.t <= 1) return 0;
    if (!L.moe) return tp_attention_comm(L);
    const double shared = L.fs_l > 0 ? tp_attention_comm(L) : 0.0;  // moe2
    return 2.0 * nccl_time(Collective::all_gather, L.e * L.m->top_k * L.tokens * L.h, L.net_tp) + shared;
}

double ep_all_to_all_bytes(const LayoutDerived& L) {
    const double shard = L.sp ? 1.0 / L.t : 1.0;  // without SP every TP rank holds (and sends) all T tokens
    return L.e * L.tokens * shard * L.m->top_k * L.h;
}

// deepep: P(none of k picks without replacement from `pool` items falls among `subset`):
// C(pool − subset, k) / C(pool, k).
static double none_among(double pool, double subset, int k) {
    double q = 1.0;
    for (int i = 0; i < k; ++i) {
        if (pool - subset - i <= 0) return 0.0;
        q *= (pool - subset - i) / (pool - i);
    }
    return q;
}

double expected_expert_nodes(int experts, int top_k, int nodes, int num_groups, int group_topk) {
    if (nodes <= 1 || experts < 1 || top_k < 1) return nodes >= 1 ? 1.0 : 0.0;
    const double E = experts, N = nodes;
    // Balanced routing, no group limit: each node holds E/N experts and is missed by all k
    // picks with probability C(E − E/N, k) / C(E, k).
    const double unlimited = N * (1.0 - none_among(E, E / N, top_k));
    if (num_groups < 1 || group_topk < 1) return unlimited;
    const double G = num_groups;
    if (num_groups % nodes == 0)  // groups inside nodes (DeepSeek-V3: one group per node): the nodes of the picked groups
        return std::min(unlimited, N * (1.0 - none_among(G, G / N, group_topk)));
    if (nodes % num_groups == 0) {  // a group spans N/G nodes; each picked group takes ~k/group_topk experts
        const int per_group = std::max(1, top_k / group_topk);
        return std::min(unlimited, group_topk * (N / G) * (1.0 - none_among(E / G, E / N, per_group)));
    }
    return std::min(unlimited, (double)group_topk * std::ceil(N / G));  // groups straddle nodes: a bound
}

// deepep: one dispatch (or combine) of the rank's routed tokens. The all-to-all dispatcher
// sends every routed copy: k per token (all_to_all_time). DeepEP's internode kernels (DeepEP
// README / docs/legacy.md: "forwarding data from NVLink domain to RDMA domain", aligned with
// DeepSeek-V3's node-limited routing, arXiv 2412.19437 §3.2.2) and NVIDIA's HybridEP (DeepEP
// hybrid-ep branch docs/README_Hybrid-EP.md: inter-node RDMA, intra-node NVLink with TMA) send
// a token over the network once per destination node, to the GPU of the same local index,
// which forwards it over NVLink to the node's GPUs holding its experts. The network carries
// (expected distinct remote nodes) × h per token instead of (remote copies) × h; NVLink carries
// the copies to the node's other GPUs, directly or forwarded, and runs beside the network.
// Megatron-core dispatches in bf16 for both backends (transformer_config.py:
// moe_dispatch_fwd_dtype other than bf16 needs the ncclep backend).
// rankdedup: DeepEP's dispatch sends a token once to each rank that holds any of its experts
// (deep_ep/buffers/legacy.py get_dispatch_layout: `is_token_in_rank` "whether a token be sent to
// a rank", `num_tokens_per_rank`; the receiver gets the token with its top-k indices and weights
// for its local experts), and the combine sends back one sum per token and rank. So over NVLink
// the copies per token are the expected distinct EP ranks among its k experts (L.ep_token_ranks,
// what the rank's permute already starts from), not k; HybridEP is modelled as DeepEP.
double ep_dispatch_time(const LayoutDerived& L) {
    const double routed = ep_all_to_all_bytes(L);  // k copies of each token
    const double bytes = L.node_dedup && L.m->top_k > 0 ? routed * L.ep_token_ranks / L.m->top_k : routed;
    const GroupNet& g = L.net_ep;
    if (!L.node_dedup || g.nodes <= 1 || g.n <= 1 || bytes <= 0) return all_to_all_time(bytes, g);
    const double n = g.n, k = g.per_node;
    const double nvlink = bytes * ((k - 1) / n + (n - k) / n * (k - 1) / k) / g.bus_intra;
    const double network = k * routed / L.m->top_k * L.ep_remote_nodes / g.bus_inter;  // the node's k ranks, k NIC shares
    const double lat = kBaseLatRing[2] + kNetLatRing[2];
    return lat * 1e-6 + std::max(nvlink, network);
}

namespace {

double pipeline_send_time(const LayoutDerived& L, const GroupNet& link) {
    const double act = L.e * L.tokens * L.h;
    if (L.p2p_scatter_gather) {
        // p2psg: Megatron-LM's scatter/gather send (Narayanan et al. 2021 §4.1): each TP rank
        // sends its 1/t of the flattened activation (split_tensor_into_1d_equal_chunks) and the
        // receiver rebuilds it with an all-gather over the TP group (gather_split_1d_tensor),
        // in the activation's forward and the gradient's backward alike.
        return p2p_time(act / L.t, link) + nccl_time(Collective::all_gather, act, L.net_tp);
    }
    return p2p_time(act * (L.sp ? 1.0 / L.t : 1.0), link);
}

}  // namespace

double pipeline_hop_time(const LayoutDerived& L) { return pipeline_send_time(L, L.net_pp); }

void pipeline_link_hops(const LayoutDerived& L, std::vector<double>& hop) {
    const GroupNet& g = L.net_pp;
    GroupNet nvlink = g;
    nvlink.nodes = 1;  // p2p_time: a send inside the node (NVLink domain)
    const double across = pipeline_send_time(L, g), inside = g.nodes > 1 ? pipeline_send_time(L, nvlink) : across;
    hop.resize((size_t)L.p);
    // A link leaves its node after every per_node stages, and the ring's last one (p − 1 → 0)
    // always does when the group spans nodes, whether or not per_node divides p.
    for (int s = 0; s < L.p; ++s)
        hop[(size_t)s] = g.nodes > 1 && ((s + 1) % g.per_node == 0 || s == L.p - 1) ? across : inside;
}

void block_comm(const LayoutDerived& L, const LayerTime& lt, double layers, bool first, bool last, ChunkTime& c) {
    BlockTime &F = c.fwd, &B = c.bwd;
    const double T = L.tokens;
    // TP: two all-reduces per layer forward and two backward (all-gather + reduce-scatter with
    // SP: same volume); full recompute repeats the forward ones. Each is one NCCL call on the
    // layer's activation, so the message size is that activation. moe: an MoE layer's pair is
    // its token dispatcher's, on the k routed copies (tp_mlp_comm).
    if (L.t > 1 || (L.moe && L.etp > 1 && L.etp != L.t)) {  // moe2: expert TP beyond tp
        const double msg = L.e * T * L.h;
        const double one = L.sp ? 2.0 * nccl_time(Collective::all_gather, msg, L.net_tp)
                                : nccl_time(Collective::all_reduce, msg, L.net_tp);
        // A dense layer's pair (attention and MLP, neither MLA's latents nor an MoE dispatcher)
        // is two of `one`: tp_attention_comm and tp_mlp_comm ask NCCL's model the same question.
        const double layer = !L.moe && !L.mla ? 2.0 * one : tp_attention_comm(L) + tp_mlp_comm(L);
        F.tp = layers * layer;
        B.tp = layers * (1.0 + (L.rc == Recompute::full ? 1.0 : 0.0)) * layer;
        // tt405: torchao's float8 TP under torchtitan (parallelize_llama.py apply_tp:
        // PrepareFloat8ModuleInput in front of the attention and the MLP) casts the norm output
        // to float8 before the sequence-parallel all-gather, so the forward's two gathers per
        // layer (and the recomputed forward's) carry 1 byte per element; the reduce-scatters and
        // the backward's gathers of gradients stay 16-bit.
        if (L.sp && L.dtensor_sp) {
            const double gather16 = nccl_time(Collective::all_gather, msg, L.net_tp);
            const double gather8 = nccl_time(Collective::all_gather, dtensor_gathered_bytes(L) * T * L.h, L.net_tp);
            const double saved = gather16 - gather8;
            F.tp -= layers * 2.0 * saved;
            if (L.rc == Recompute::full) B.tp -= layers * 2.0 * saved;
        }
        // ttasync: torchtitan's op-level selective checkpointing saves the TP reduce-scatters'
        // outputs but not the all-gathers' (parallelize_llama.py _save_list: reduce_scatter_tensor
        // only), so the backward gathers the attention and MLP inputs again — for the recomputed
        // K and w3 and for the weight gradients — in the forward's width.
        if (L.sp && L.dtensor_sp && L.rc == Recompute::selective && L.rc_style == RecomputeStyle::torchtitan_op)
            B.tp += layers * 2.0 * nccl_time(Collective::all_gather, dtensor_gathered_bytes(L) * T * L.h, L.net_tp);

        // papers: the distributed checkpoint is all-gathered over the TP group before each
        // layer's recompute (Megatron tensor_parallel/random.py gather_split_1d_tensor).
        if (L.distribute_saved) B.tp += layers * nccl_time(Collective::all_gather, msg, L.net_tp);
        // recmod: a recomputed module's forward collectives run again in the backward: a dense
        // MLP's (all-gather + reduce-scatter under SP, else the all-reduce), the MoE layer's TP /
        // expert-TP pair, and MLA's latent all-gather in front of the up projections (SP only).
        if (!L.moe && rc_module(L, kRecomputeMlp))
            B.tp += layers * (L.sp ? 2.0 * nccl_time(Collective::all_gather, msg, L.net_tp)
                                   : nccl_time(Collective::all_reduce, msg, L.net_tp));
        if (L.moe && rc_module(L, kRecomputeMoe)) B.tp += layers * tp_mlp_comm(L);
        if (L.mla && L.sp && rc_module(L, kRecomputeMlaUpProj))
            B.tp += layers * nccl_time(Collective::all_gather, L.e * T * ((L.q_lora > 0 ? L.q_lora : L.h) + L.kv_lora), L.net_tp);
        if (first && L.t > 1) F.tp += one;  // vocab-parallel embedding
        if (last && L.t > 1) F.tp += 3.0 * nccl_time(Collective::all_reduce, 4.0 * T, L.net_tp);  // cross-entropy max / sum / target
    }
    if (L.c > 1 && L.titan_model) {
        // ringcp: PyTorch's ring attention (torch/distributed/tensor/experimental/_attention.py,
        // default rotate_method ALL_GATHER) all-gathers K and V (after repeat_kv: all local
        // heads) once, issued before the first step's flash call and waited for at the second:
        // one step's compute (1/c of the core, load-balanced) covers it. The backward gathers
        // them again the same way and sends the fp32 dK, dV accumulators one hop per step
        // (_AllToAllRotater), each hop hidden by the next step's backward; the last hop is
        // waited for after the loop, exposed. Full recompute runs the forward's gather again.
        const double kv = L.e * T * L.heads_l * (L.mla ? L.d_qk + L.d_v : 2.0 * L.d);  // mla: K d + dr, V dv
        const double gather = nccl_time(Collective::all_gather, L.c * kv, L.net_cp);
        const double dkv_hop = p2p_time(kv * 4.0 / L.e, L.net_cp);  // dK, dV in fp32
        F.cp = layers * std::max(0.0, gather - lt.attn / L.c);
        B.cp = layers * (std::max(0.0, gather - lt.attn_bwd / L.c) +
                         (L.c - 1) * std::max(0.0, dkv_hop - lt.attn_bwd / L.c) + dkv_hop);
        if (L.rc == Recompute::full) B.cp += F.cp;
    } else if (L.c > 1) {
        // Ring attention: K and V chunks travel c − 1 hops forward, dK and dV backward;
        // overlapped with the attention core, the excess is exposed.
        const double kv = L.mla ? L.e * T * L.kv_l * (L.d_qk + L.d_v) : 2.0 * L.e * T * L.kv_l * L.d;  // mla: K d + dr, V dv
        const double t_ring = (L.c - 1) * p2p_time(kv, L.net_cp);
        F.cp = layers * std::max(0.0, t_ring - lt.attn);
        B.cp = layers * std::max(0.0, 2.0 * t_ring - lt.attn_bwd);
    }
    if (L.moe && L.ep > 1) {
        const double a2a = ep_dispatch_time(L);  // moe: the SP shard's copies; deepep: by dispatcher
        F.ep = layers * 2.0 * a2a;  // dispatch + combine, forward and backward
        B.ep = layers * 2.0 * a2a;
        // moe2: --moe-shared-expert-overlap runs the shared experts' MLP beside the dispatch and
        // combine; the all-to-all time it covers is hidden (their GEMMs stay in compute).
        if (L.shared_overlap) {
            F.ep = layers * std::max(0.0, 2.0 * a2a - lt.gemm_shared);
            B.ep = layers * std::max(0.0, 2.0 * a2a - 2.0 * lt.gemm_shared);
        }
        if (rc_module(L, kRecomputeMoe)) B.ep += layers * 2.0 * a2a;  // recmod: dispatch + combine again
    }
    if (L.p > 1 && L.ds_pipe) {
        // dsthru: DeepSpeed's TrainSchedule opens each step with a blocking, paired exchange
        // with one neighbour (forward step: RecvActivation then SendGrad; backward step:
        // SendActivation then RecvGrad), one transfer after the other: two hops per block.
        // With TP > 1 (pipe_partitioned / grad_partitioned, on by default) each TP rank sends
        // its 1/t slice and the receiver all-gathers the whole tensor over the TP group
        // before its forward / backward. Under sequence parallelism the tensor is a shard already.
        const double act = L.e * T * L.h;
        const bool partitioned = L.t > 1 && !L.sp;
        const double hop = p2p_time(partitioned ? act / L.t : act * (L.sp ? 1.0 / L.t : 1.0), L.net_pp);
        const double gather = partitioned ? nccl_time(Collective::all_gather, act, L.net_tp) : 0.0;
        F.p2p = 2.0 * hop + gather;
        B.p2p = 2.0 * hop + gather;
    } else if (L.p > 1) {
        F.p2p = pipeline_hop_time(L);  // the activation forward
        B.p2p = F.p2p;                 // the gradient backward
    }
    if (last && L.mtp > 0) {
        // mla: each MTP module on the last stage: the vocab-parallel embedding of the shifted
        // tokens, eh_proj's input all-gather (2h wide under SP) and its output's gather over
        // the h dimension (gather_output = False, then gathered), its transformer layer's TP
        // and EP collectives, and its loss's three all-reduces; the backward mirrors them.
        double f = 0, b = 0;
        if (L.t > 1) {
            const double msg = L.e * T * L.h;
            const double emb = L.sp ? nccl_time(Collective::all_gather, msg, L.net_tp) : nccl_time(Collective::all_reduce, msg, L.net_tp);
            const double eh = (L.sp ? nccl_time(Collective::all_gather, 2.0 * msg, L.net_tp) : 0.0) +
                              nccl_time(Collective::all_gather, msg, L.net_tp);
            const double layer = tp_attention_comm(L) + tp_mlp_comm(L);
            f += emb + eh + layer + 3.0 * nccl_time(Collective::all_reduce, 4.0 * T, L.net_tp);
            b += eh + (1.0 + (L.rc == Recompute::full ? 1.0 : 0.0)) * layer;
        }
        F.tp += L.mtp * f;
        B.tp += L.mtp * b;
        if (L.moe && L.ep > 1) {
            const double a2a = ep_dispatch_time(L);  // deepep
            F.ep += L.mtp * 2.0 * a2a;
            B.ep += L.mtp * 2.0 * a2a;
        }
    }
}

// Bytes of one NCCL call in the data-parallel reduction, by framework: Megatron's DDP buckets
// max(40M, 1M·dp) elements (its distributed optimizer uses the same buckets for the gradient
// reduce-scatter and the parameter all-gather); DeepSpeed ZeRO-1/2 reduce_bucket_size and
// allgather_bucket_size 5e8 elements; ZeRO-3 gathers parameters in prefetch buckets of 5e7.
static double dp_bucket_elements(const LayoutDerived& L, int n, bool param_gather) {
    if (L.ds_pipe) return 5e8;  // dsthru: the pipeline engine's MEMORY_OPT_ALLREDUCE_SIZE (overlap.cpp)
    if (L.zero == 0) return std::max(40e6, 1e6 * n);
    if (L.zero == 3 && param_gather) return 5e7;
    return 5e8;
}

// `elements` of `bytes_per` each over group g, in buckets: each bucket is one NCCL call.
static double bucketed(Collective c, double elements, double bytes_per, double bucket, const GroupNet& g) {
    if (elements <= 0) return 0;
    const double calls = std::ceil(elements / bucket);
    return calls * nccl_time(c, elements / calls * bytes_per, g);
}

double dp_grad_bytes(const JobSpec& job, const LayoutDerived& L) {
    // Megatron reduces bf16 runs' fp32 main grads; DeepSpeed and fp16 reduce in the parameter
    // dtype. dsthru: DeepSpeed's pipeline engine reduces the 16-bit .grad tensors
    // (engine.py _get_gradients_for_reduction), whatever its ZeRO stage.
    const bool megatron_grads = L.zero == 0 && !L.ds_pipe;
    // fsdpreduce: a torch stack's FSDP (zero 2 and 3) casts the gradients to its reduce dtype
    // before the reduce-scatter: fp32 where grad_reduce_in_fp32 (torchtitan's default
    // mixed_precision_reduce = "float32"), else the parameter dtype.
    const bool fsdp_grads = L.zero >= 2 && runs_pytorch_modules(job.training.framework);
    // oomnemo: unless the job reduces them in bf16 (grad_reduce_in_fp32 = false).
    return job.training.precision == Precision::fp32 ? 4.0
         : ((megatron_grads || fsdp_grads) && job.training.precision == Precision::bf16 && job.parallel.grad_reduce_in_fp32
                ? 4.0
                : 2.0);
}

// curamax: Transformer Engine's Float8CurrentScaling computes one scale per tensor from its
// amax; under sequence parallelism the ranks of a TP group gather their FP8 shards into one
// tensor, so they must share that scale: the quantizer of a column-parallel linear's input and
// of a row-parallel linear's output gradient all-reduces its amax (MAX) over the TP group
// before it casts (module/layernorm_linear.py, layernorm_mlp.py, linear.py:
// set_quantizer_amax_reduction_group(..., tp_group if sequence_parallel)). The cast waits for
// it, so each is exposed at NCCL's small-message latency. Per dense layer: the QKV and FC1
// inputs forward, the output projection's and FC2's output gradients backward; an MoE
// layer's experts are not sequence-parallel linears (the attention's pair only). A full
// recompute casts the forward's again.
void add_amax_reductions(const LayoutDerived& L, double layers, ChunkTime& c) {
    if (L.fp8 != Fp8Recipe::current || !L.sp || L.t <= 1 || layers <= 0) return;
    const double one = nccl_time(Collective::all_reduce, 4.0, L.net_tp);
    const double per_pass = L.moe ? 1.0 : 2.0;
    c.fwd.tp += layers * per_pass * one;
    c.bwd.tp += layers * per_pass * (L.rc == Recompute::full ? 2.0 : 1.0) * one;
}

DpTraffic dp_traffic(const EstimateContext& ctx, const LayoutDerived& L, int stage, double dense_params,
                     double expert_params) {
    const JobSpec& job = ctx.job;
    const int p = L.p;
    DpTraffic out;
    const double grad_e = dp_grad_bytes(job, L);  // gradient bytes on the wire
    auto dp_cost = [&](double params, const GroupNet& g, const GroupNet& rep, double layer_params) {
        const int n = g.n;
        if (n * rep.n <= 1 || params <= 0) return;
        const double grad_bucket = dp_bucket_elements(L, n, false), param_bucket = dp_bucket_elements(L, n, true);
        // hsdp: each bucket's reduce-scatter inside the sharding group is followed by the
        // all-reduce of its 1/n shard across the replicas (torch FSDP's HSDP post-backward,
        // Megatron-core's inter-instance all-reduce), as many calls as reduce-scatters.
        auto across = [&](double bucket) { return bucketed(Collective::all_reduce, params / n, grad_e, bucket / n, rep); };
        auto reduce = [&](double bucket) { return bucketed(Collective::all_gather, params, grad_e, bucket, g) + across(bucket); };
        if (L.zero == 3) {
            // Per micro-batch: gather weights for forward and backward, reduce-scatter grads,
            // one message per wrapped layer (FSDP units, DeepSpeed's per-module gathers), as
            // overlap.cpp's per-layer prefetch model sends them. hsdp: DeepSpeed's MiCS
            // all-reduces the shards across the replicas at the accumulation boundary only
            // (mics.py allreduce_mics_shard_grads); torch's FSDP after every reduce-scatter.
            const double unit = std::max(layer_params, 1.0);
            const double across_calls = job.training.framework == Framework::deepspeed ? 1.0 : L.mbs;
            out.grad_s += L.mbs * bucketed(Collective::all_gather, params, grad_e, unit, g) + across_calls * across(unit);
            out.param_s += L.mbs * 2.0 * bucketed(Collective::all_gather, params, L.e, unit, g);
        } else if (L.zero == 2 && p > 1) {
            // FSDP-style ZeRO-2 under a pipeline: every micro-batch's gradients are
            // reduce-scattered into the shards; the updated parameters are gathered once.
            out.grad_s += L.mbs * reduce(grad_bucket);
            out.param_s += bucketed(Collective::all_gather, params, L.e, param_bucket, g);
        } else if (L.optimizer_sharded) {
            out.grad_s += reduce(grad_bucket);
            out.param_s += bucketed(Collective::all_gather, params, L.e, param_bucket, g);
        } else {
            out.grad_s += bucketed(Collective::all_reduce, params, grad_e, grad_bucket, g);
        }
    };
    dp_cost(dense_params, L.net_dp, L.net_dp_rep, L.layer_dense_params);
    dp_cost(expert_params, L.net_edp, L.net_edp_rep, L.layer_expert_params);
    // mla: with MTP the last stage's embedding copy (Megatron-core LanguageModule: shared_embedding
    // on the mtp_process stage) is all-reduced with the first stage's the same way.
    if (p > 1 && (job.model.tied_embeddings || L.mtp > 0) && (stage == 0 || stage == p - 1)) {  // embedding-group all-reduce
        // Two ranks, first and last stage: one per node when the pipeline leaves the node.
        GroupNet pair = L.net_pp;
        pair.n = 2;
        pair.per_node = L.net_pp.nodes > 1 ? 1 : 2;
        pair.nodes = L.net_pp.nodes > 1 ? 2 : 1;
        pair.bus_inter = L.net_pp.bus_inter / L.net_pp.per_node;
        pair.nvls_gain = 1;
        out.grad_s += nccl_time(Collective::all_reduce, grad_e * L.output_params, pair);
    }
    return out;
}

}  // namespace ptd::est
