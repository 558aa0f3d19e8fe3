// profile_times.h — a cluster profile (cluster_profile.h) turned into the times the time
// model asks for: one op's seconds from what `ptd calibrate` measured on the user's hosts.
// Built once per estimate context (make_profile_times), read by engine_time.cpp.
//
// Each answer is the median over the ranks of each probe's call time: its mean where a host
// shares its cores, else its median (every rank probes at once, as it trains;
// profile_times.cpp call_seconds says why). Where the profile holds the exact op (a GEMM of the same name and
// shape, a collective of the same group at a measured size) that is the time; otherwise the
// nearest measured neighbours are interpolated (GEMMs: achieved FLOP/s against log FLOPs;
// collectives: time against bytes, linear between measured sizes, the smallest size's time
// below it — latency-bound — and the last segment's slope above the largest).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ptd/spec/cluster_profile.h"

namespace ptd::est {

struct ProfileTimes {
    struct Gemm {
        std::string name, dtype;
        double M = 0, N = 0, K = 0;
        double flops = 0, seconds = 0;
    };
    struct Curve {
        int group_size = 0;
        std::vector<std::pair<double, double>> points;  // (bytes, seconds), by bytes: calls back to back
        std::vector<std::pair<double, double>> in_step; // the same between compute bursts, as a step makes them
    };
    std::vector<Gemm> gemms;                        // gemm and attention probes
    std::map<std::string, double> bandwidth;        // name → bytes/s (copy, layernorm.fwd, adamw, ...)
    std::map<std::pair<std::string, std::string>, Curve> comm;  // (op, group) → curve
    double host_op_s = 0;                           // one tiny op, launch to completion
    // Shared cores: the profile's one CPU host when it ran more ranks than it has cores — its
    // cores and ranks per core while the probes ran (> 1; each rank one compute thread, the
    // engine's default there) — else 0: the compute times are then one rank's on its own
    // core(s). The schedule shares the cores among the ranks computing (schedule.h CoreSharing).
    double shared_cores = 0, shared_ranks_per_core = 0;
    // The engine's own passes timed in the step's order (the `layer` probe: layer.fwd,
    // layer.bwd and their .tp, embedding.fwd / .bwd, head.fwd_bwd), by (name, dtype, shape).
    std::map<std::tuple<std::string, std::string, std::vector<int>>, double> passes;
    // dpwait: the step-long bursts' figures (cluster_profile.h dp_wait_figure): the DP group's
    // size, one burst's own seconds, the wait beyond it for the group's slowest member; 0
    // where the profile has none.
    int dp_wait_group = 0;
    double dp_wait_burst_s = 0, dp_wait_s = 0;

    // Seconds of a GEMM (or "attention.fwd"/"attention.bwd") named as the probe names it
    // ("qkv.fwd", "mlp_down.wgrad", ...), M×N×K, in `dtype`.
    double gemm_s(const std::string& name, const std::string& dtype, double M, double N, double K) const;
    // Seconds of the attention core (name attention.fwd / .bwd) of `flops` FLOPs; an
    // attention not probed takes the GEMMs' rate.
    double attention_s(const std::string& name, const std::string& dtype, double flops) const;
    // Seconds to move `bytes` through the kernel `name` (its probe), else at the copy bandwidth.
    double bytes_s(const std::string& name, double bytes) const;
    double rate_s(const std::function<bool(const Gemm&)>& pick, const std::string& dtype, double flops) const;
    // Seconds of one collective `op` ("all_reduce", "reduce_scatter", "all_gather", "p2p") of
    // `bytes` (the probe's convention: the whole gathered / reduced buffer) in a group of
    // `n` members named `group` ("tp", "dp", "pp", "world"); a group the probes did not
    // cover (or not with n members) takes the curve of a probed group of n members, else
    // the probed group nearest in size scaled by the bus-bandwidth factors. Where the
    // op was also timed inside a step or between compute bursts at a size within 4× of
    // `bytes`, the call costs what it cost there (at the nearest such size) plus the
    // back-to-back curve's change from that size to `bytes`: the wait for peers to get a
    // core, then the bytes. Negative when the profile has nothing for the op at all.
    double collective_s(const std::string& op, const std::string& group, int n, double bytes) const;
    // Whether collective_s(op, group, n, bytes) comes from a call timed inside a step or
    // between compute bursts (so it holds the wait for the group's peers already).
    bool timed_in_step(const std::string& op, const std::string& group, int n, double bytes) const;
    // Seconds of the engine's pass `name` in `dtype` at `shape` (the probe's [B, T, h, heads,
    // kv heads, ffn, tp, sp + 1, recompute + 1]); negative when it was not timed at that shape.
    double pass_s(const std::string& name, const std::string& dtype, const std::vector<int>& shape) const;
    // dpwait: seconds a step's data-parallel collective waits for the slowest of `n` members
    // when each computes `step_compute_s` between two of them. The measured wait, scaled to
    // the group by how far the slowest of n normal draws lies beyond the typical one
    // (expected_slowest_of(n) over that of the probed group) and to the step's length by
    // √(step / burst): the spread of a sum of independent stretches grows with the root of
    // its length. 0 without the probe, for n ≤ 1, or a step of no compute.
    double dp_wait(int n, double step_compute_s) const;
};

// `rank_quantile` q: 0.5 for the estimate — each probe's mean call, the median over the
// ranks; 0.1 / 0.9 for the fast and slow ends the interval is built from — each probe's
// mean at that quantile of its own uncertainty (its standard error), then that quantile
// over the ranks.
ProfileTimes make_profile_times(const ClusterProfile& p, double rank_quantile = 0.5);

}  // namespace ptd::est
