// metrics_event.h — ptd-engine's `ptd.metrics/1` stdout lines (docs/metrics.md) as typed
// records. The launcher, `ptd watch` and ptd-studio read every rank's stdout through
// parse_metrics_line; anything that is not a well-formed metrics line stays log text.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ptd {

enum class MetricKind { start, step, checkpoint, warning, error, end, probe };
const char* metric_kind_name(MetricKind k);  // "start", "step", ...

// Memory categories of the engine's tagged allocator, in the order of docs/metrics.md.
enum MemCat : int { MEM_PARAMS, MEM_GRADS, MEM_OPTIMIZER, MEM_ACTIVATIONS, MEM_COMMUNICATION,
                    MEM_WORKSPACE, MEM_TOTAL, MEM_CAT_COUNT };
const char* mem_cat_name(MemCat c);  // "params", "grads", ..., "total" (the JSON keys)

struct MemFigure {
    double current = 0;               // bytes
    double peak = 0;                  // bytes, high-water mark since start
    std::optional<double> predicted;  // the estimators' bytes; none for some categories
};

// Seconds of one step by activity (`time` of a step event).
struct StepTimes {
    double step = 0, compute = 0, tp_comm = 0, pp_comm = 0, pipeline_idle = 0, dp_comm = 0, optimizer = 0;
};

// One line of `ptd-engine --probe` (event "probe", docs/metrics.md): the rank's host
// facts (kind "host"), what it will run (kind "plan"), one timed probe (gemm, memory, elementwise, host_op, comm), or the
// rank's last line (kind "done").
struct ProbeRecord {
    std::string kind;            // host, plan, gemm, attention, memory, elementwise, host_op, layer, comm, link, done
    std::string name;            // "qkv.fwd", "copy", "adamw", "all_reduce", "p2p", ...
    std::string dtype;           // gemm, elementwise
    std::vector<long long> shape;  // gemm: M, N, K; attention: B, H, T, D; layer: see docs/metrics.md
    double flops = 0, bytes = 0, elements = 0;
    double median_s = 0, spread = 0;  // seconds; interquartile range / median
    double mean_s = 0;                // seconds; 0 when the engine did not say (older engines)
    double between_s = 0;             // comm: compute each rank ran before each call; 0 = back to back
    int repeats = 0;
    double tflops = 0, gbps = 0, algbw_gbps = 0, busbw_gbps = 0, bus_factor = 0;
    // comm: the group kind and shape; layer step.compute*: the group the burst waits for (dp)
    std::string group;
    int group_size = 0, nodes = 0, members_per_node = 0;
    int micro_batches = 0;       // layer step.compute*: micro-batches in each timed burst
    // host
    std::string hostname, cpu_model, blas_core, backend, device, precision, engine_version;  // device: the host line's "gpu"
    int node = -1, local_rank = -1, cores = 0, threads = 0;
    std::vector<int> cpus;  // the rank's CPU affinity mask (ascending ids); empty: not reported (older engine)
    int cpu_quota = 0;      // its cgroup's CPU limit in whole cores; 0: none (or not reported)
    // link: the other end of the exchange (node and its first rank); node is this rank's
    int peer_node = -1, peer_rank = -1;
    double memory_bytes = 0;
    bool quick = false;
    // plan (probes this rank will run, their warm-up / repeats, the preset's expected
    // seconds) and done (probes run, seconds taken)
    int probes = 0, warmup = 0;
    double expected_s = 0, seconds = 0;
};

// One metrics line. Fields not carried by an event kind keep their defaults.
struct MetricRecord {
    MetricKind kind = MetricKind::step;
    std::string run_id;
    int rank = -1;
    double time = 0;            // Unix seconds when written

    int step = 0;               // step, checkpoint (step held), end (steps completed)
    // start
    int world_size = 0;
    int tp = -1, pp = -1, dp = -1;  // coords of the rank (start and step)
    int steps_total = 0;        // training.steps
    double peak_tflops = 0;
    std::string data;
    std::string run_dir;
    std::optional<int> resumed_from;  // step of the checkpoint this run continued from
    // step
    double loss = 0, lr = 0, grad_norm = 0;
    bool clipped = false;
    double tokens = 0, tokens_per_s = 0, tflops = 0, mfu = 0;
    StepTimes times;
    bool has_memory = false;    // start, step, end
    std::array<MemFigure, MEM_CAT_COUNT> memory{};
    // checkpoint
    std::string dir;
    double bytes = 0, seconds = 0;  // checkpoint size and write time; end: loop wall time
    std::string sha256;         // checkpoint: of this rank's shard file
    // end
    int steps_run = 0;          // steps run by this process (fewer than `step` after a resume)
    // warning, error
    std::string message;
    // probe
    ProbeRecord probe;
};

// The line as a record, or nullopt when it is not a metrics line: not JSON, not an
// object, another schema, an unknown event, or a field of the wrong type (`problem`,
// when given, then says why, e.g. "field \"loss\" is a string, expected a number"; empty
// for plain text that never looked like JSON). Never throws.
std::optional<MetricRecord> parse_metrics_line(std::string_view line, std::string* problem = nullptr);

}  // namespace ptd
