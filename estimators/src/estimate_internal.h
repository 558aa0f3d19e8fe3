// estimate_internal.h — what the estimator's model files share, not part of the public API.
// One layout's derived quantities (LayoutDerived) are computed once per evaluation in
// estimate.cpp and read by the four models, each in its own file with its sources:
//   memory.cpp       model states, activations, buffers, overheads per rank (+ engine_buffers.cpp)
//   compute.cpp      GEMM efficiency, FLOPs per token, forward/backward compute time
//   collectives.cpp  which groups leave the node, bandwidth and latency, collective times
//   overlap.cpp      what is hidden behind compute: the DP tail after the pipeline, optimizer step
// estimate.cpp assembles them with the pipeline schedule (timeline.h).
#pragma once

#include "ptd/estimate.h"

#include <vector>

namespace ptd::est {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Everything one evaluation needs, derived from the context + layout once (estimate.cpp).
struct LayoutDerived {
    const ModelSpec* m;
    int t, p, v, c, ep, dp, b, mbs;      // mbs = micro-batches per replica per step
    double s_local;                      // sequence per rank (s / cp)
    double tokens;                       // b · s_local
    double e;                            // activation bytes per element
    double vocab;                        // padded vocab
    double heads_l, kv_l, d, h, f_l;     // local heads, local KV heads, head dim, hidden, local MLP width
    bool sp, flash, dropout, swiglu, moe, layernorm, cpu;
    bool optimizer_sharded;              // ZeRO ≥ 1 or Megatron's distributed optimizer
    int zero;                            // ZeRO stage
    Recompute rc;
    StateBytes dense_state, expert_state;
    // Per-layer parameters on one rank.
    double layer_dense_params, layer_expert_params;
    double embed_params, output_params, final_norm_params;
    // Bandwidths (bytes/s, after efficiency) and latencies per group (collectives.cpp).
    double bw_tp, bw_cp, bw_ep, bw_dp, bw_edp, bw_pp, lat_tp, lat_cp, lat_ep, lat_dp, lat_edp, lat_pp;
    double peak, hbm;
    int nccl_groups;                     // communicators with > 1 rank (excluding the embedding group)
    int edp;                             // expert data-parallel size (dp·cp/ep)
    // zb: the pipeline schedule, resolved (never automatic).
    PipelineSchedule schedule;
};

// ---- compute.cpp ----------------------------------------------------------------------------
// Seconds for an m×n×k GEMM at the shape-dependent efficiency (0 for an empty shape).
double gemm_time(double peak, double m, double n, double k);
// Forward time of one transformer layer on one rank for one micro-batch.
struct LayerTime {
    double gemm = 0, attn = 0, elem = 0;  // forward
    double attn_bwd = 0;                   // attention core backward
};
LayerTime layer_forward_time(const LayoutDerived& L);
// The compute and recompute parts of one micro-batch's blocks through `layers` layers.
void block_compute(const LayoutDerived& L, const LayerTime& lt, double layers, bool first, bool last, ChunkTime& c);

// ---- collectives.cpp ------------------------------------------------------------------------
// Fills L's per-group bandwidths and latencies from the cluster and the rank order.
void assign_group_links(const ClusterSpec& cl, const char* order, LayoutDerived& L);
// One ring collective moving `bytes` per rank over n ranks.
double all_reduce_time(double bytes, int n, double bw, double lat);
double gather_time(double bytes, int n, double bw, double lat);  // all-gather or reduce-scatter
// The TP, CP, EP and p2p parts of one micro-batch's blocks through `layers` layers.
void block_comm(const LayoutDerived& L, const LayerTime& lt, double layers, bool first, bool last, ChunkTime& c);
// One stage's data-parallel traffic per iteration, before overlap.
struct DpTraffic {
    double grad_s = 0;   // gradient all-reduce / reduce-scatter
    double param_s = 0;  // parameter all-gather (sharded optimizer, ZeRO-3)
};
DpTraffic dp_traffic(const EstimateContext& ctx, const LayoutDerived& L, int stage, double dense_params,
                     double expert_params);

// ---- memory.cpp -----------------------------------------------------------------------------
double engine_buffers_bytes(const std::vector<EngineBuffer>& list);
// Bytes one layer saves for backward (Megatron profile), one micro-batch, one rank.
double layer_activation_megatron(const LayoutDerived& L, Recompute rc);
// Micro-batch chunks whose activations stage i holds at the schedule's peak.
double in_flight_chunks(const LayoutDerived& L, int i);
// zb: ZB-H1 micro-batches whose W stage i has deferred at the peak (their B done), and the
// bytes one of them keeps per layer (the weight-gradient GEMMs' inputs and output gradients).
double zb_deferred_w(const LayoutDerived& L, int i);
double zb_pending_w_bytes_per_layer(const LayoutDerived& L);
struct StageMemory {
    MemoryBreakdown mem;    // without fragmentation (stage_memory_finish adds it)
    double params = 0;      // parameters on the rank (dense + expert)
    double act_per_mb = 0;  // activation bytes one micro-batch leaves on the stage
    double in_flight = 0;   // micro-batches held at the peak
};
StageMemory stage_memory(const EstimateContext& ctx, const LayoutDerived& L, int stage, int layers);
// Adds the ZeRO buffers of the stage's layout and the fragmentation over everything allocated.
void stage_memory_finish(const EstimateContext& ctx, const LayoutDerived& L, int stage, StageMemory& sm);

// ---- overlap.cpp ----------------------------------------------------------------------------
// What stage `stage` does after its last backward: exposed DP traffic and its optimizer step.
// `fwd_s` / `bwd_s`: one micro-batch's forward / backward compute on the stage.
StageTail stage_tail(const EstimateContext& ctx, const LayoutDerived& L, const DpTraffic& dp, double dense_params,
                     double expert_params, double fwd_s, double bwd_s);

}  // namespace ptd::est
