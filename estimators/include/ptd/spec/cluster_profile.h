// cluster_profile.h — the cluster profile: what `ptd calibrate` measured on the user's own
// hosts (schema "ptd.profile/1", one TOML file). It keeps the raw probe samples, the hosts
// they ran on, and the figures fitted from them that the estimator's time model will take
// in place of the GPU preset's nominal ones: achieved TFLOP/s per GEMM shape and dtype,
// memory and element-wise bandwidth, the host's cost of one op, and per collective and
// group shape the latency and bus bandwidth of t = latency + bytes·factor / busbw. The
// format, and which estimate each figure is for, are in docs/estimators.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ptd/common/diagnostic.h"

namespace ptd {

struct JobSpec;

inline constexpr const char* kProfileSchema = "ptd.profile/1";

// Bus-bandwidth factor of a collective on n members, the nccl-tests convention
// (doc/PERFORMANCE.md there): all-reduce 2(n−1)/n; reduce-scatter, all-gather and
// all-to-all (n−1)/n; point-to-point 1. busbw = bytes · factor / time.
double collective_bus_factor(std::string_view op, int n);

// One host the probes ran on, as its ranks described it.
struct ProfileHost {
    std::string name;          // the name the launcher reached it by (the hostfile's)
    std::string hostname;      // what the host calls itself
    int ranks = 0;
    std::string cpu_model;
    int cores = 0;             // the machine's (hardware threads)
    int usable_cores = 0;      // those the host's ranks may run on together: their affinity masks
                               // and CPU quota (engine/src/usable_cores.cpp); 0 = not recorded
    double memory_gib = 0;
    std::string blas_core;     // OpenBLAS core type the engine ran with ("" on a GPU host without it)
    std::string backend;       // cpu, cuda, cuda-sim
    std::string gpu;           // the CUDA runtime's description; "" on the CPU

    // The cores the host's ranks share: usable_cores, else (a profile from before it was
    // recorded) the machine's. A host whose ranks outnumber them shares its cores.
    int cores_for_ranks() const { return usable_cores > 0 ? usable_cores : cores; }
    bool shares_cores() const { return cores_for_ranks() > 0 && ranks > cores_for_ranks(); }
};

// One probe of one rank: what ptd-engine's "probe" line said (docs/metrics.md).
struct ProfileSample {
    int host = 0, rank = 0;    // index into hosts; global rank
    std::string kind;          // gemm, attention, memory, elementwise, host_op, layer, comm
    std::string name;          // qkv.fwd, copy, adamw, fill1, all_reduce, p2p, ...
    std::string dtype;         // gemm, elementwise
    std::vector<int> shape;    // gemm: M, N, K; attention: B, H, T, D; layer: B, T, h, heads, kv heads, ffn, tp, sp + 1, recompute + 1
    double flops = 0, bytes = 0;
    std::string group;         // comm: tp, pp, dp, world; layer step.compute*: dp
    int group_size = 0, nodes = 0, members_per_node = 0;
    double median_s = 0, spread = 0;
    double mean_s = 0;         // 0 = not recorded (a profile from before it was); the time model then takes the median
    double between_s = 0;      // comm: compute each rank ran before each call (probe comm_in_step); 0 = back to back
    int micro_batches = 0;     // layer step.compute*: micro-batches in each timed burst (probe step_bursts)
    int repeats = 0;
};

// Fitted figures.
struct GemmFigure {             // a linear layer's GEMM, or the attention core (attention.fwd / .bwd)
    std::string name, dtype;
    std::vector<int> shape;
    double tflops = 0;         // median over the ranks of flops / median time
    int samples = 0;
};
struct BandwidthFigure {
    std::string name;          // copy (device memory), layernorm.fwd, gelu.fwd, softmax_xent, adamw, ...
    double gbps = 0;           // median over the ranks of bytes moved / median time
    int samples = 0;
};
struct CollectiveFigure {
    std::string op, group;     // all_reduce, reduce_scatter, all_gather, p2p; tp, pp, dp, world
    int group_size = 0, nodes = 0, members_per_node = 0;
    double latency_s = 0;      // intercept of t = latency + bytes·factor / busbw
    double busbw_gbps = 0;     // 1 / slope
    int sizes = 0;             // message sizes the fit saw
    double max_residual = 0;   // largest |fit − measured| / measured over those sizes
};

struct ClusterProfile {
    std::string measured_at;   // UTC, ISO 8601 ("2026-11-29T06:40:00Z")
    std::string job;           // the job file calibrated
    std::string gpu;           // its cluster.gpu preset: a profile is for jobs on this GPU
    std::string precision;     // its training.precision
    std::string ptd_version;
    bool quick = false;
    double seconds = 0;        // wall time of the calibration
    int ranks_per_host = 0;
    std::vector<std::string> refined_from;  // run ids `ptd calibrate --from-run` took samples from
    std::vector<ProfileHost> hosts;
    // fitted (fit_profile)
    double gemm_tflops = 0;    // Σ flops / Σ median time over every GEMM sample: the job's GEMM mix
    double memory_gbps = 0;    // the copy probe
    double host_op_s = 0;      // one tiny op, launch to completion
    std::vector<GemmFigure> gemms;
    std::vector<BandwidthFigure> bandwidths;
    std::vector<CollectiveFigure> collectives;
    std::vector<ProfileSample> samples;
};

// The fitted figures from `p.samples` (replaces any there were). Collectives: ordinary
// least squares of the median time over the ranks against x = bytes·factor, per (op,
// group, shape); a negative intercept is refitted through the origin.
void fit_profile(ClusterProfile& p);

// dpwait: what the step-long bursts (samples step.compute / step.compute.dp_max, probe.cpp
// step_bursts) measured: the DP group's size, one burst's own seconds and the wait beyond it
// for the group's slowest member — each the median over the ranks of the rank's means (own;
// slowest − own, at least 0). group 0 where the profile has none (dp 1, or an older profile).
struct DpWaitFigure {
    int group = 0;
    double burst_s = 0, wait_s = 0;
};
DpWaitFigure dp_wait_figure(const ClusterProfile& p);
// "a step's wait for the slowest of dp×2: 1.35 ms after a 25.8 ms burst of its micro-batches"
std::string describe_dp_wait(const DpWaitFigure& w);

// The profile as its TOML file.
std::string profile_toml(const ClusterProfile& p);

// Reads a profile file. Every problem is located (file, line, key, what was given, what
// is allowed): not TOML, truncated (required keys missing), another schema, a file that
// is not a profile at all, values out of range, unknown keys.
Result<ClusterProfile> load_profile(const std::string& path);
Result<ClusterProfile> load_profile_text(std::string_view text, const std::string& file);

// The profile a job uses: `override_path` (--profile) if given, else cluster.profile
// resolved against the job file's folder; loaded and checked against the job's GPU.
// nullopt when neither names one. Errors say which of the two named the file.
struct JobProfile {
    std::string path;     // as resolved
    std::string source;   // "--profile" or "cluster.profile"
    ClusterProfile profile;
};
Result<std::optional<JobProfile>> load_job_profile(const JobSpec& job, const std::string& override_path = "");

// One line for an estimate: "profile: FILE (measured DATE on HOSTS)".
std::string profile_note(const JobProfile& p);
// What the profile holds for the time model, one line each (the estimate does not use
// them yet: they say which figures will come from it).
std::vector<std::string> profile_figures(const ClusterProfile& p);

// A profile is refused for a job on other hardware: its `gpu` must be the job's
// cluster.gpu preset name; the error names both.
Result<void> check_profile_for_job(const ClusterProfile& p, const std::string& profile_path, const JobSpec& job);

}  // namespace ptd
