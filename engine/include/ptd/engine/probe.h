// probe.h — the calibration probes of one ptd-engine rank (`ptd-engine --job JOB --probe`,
// started by `ptd calibrate` like a training rank): what this rank's compute, memory and
// communication achieve at the shapes and group shapes the job makes, measured through the
// engine's own Backend and Communicator, as "probe" metrics lines (docs/metrics.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ptd/common/sample_stats.h"
#include "ptd/engine/trainer.h"

namespace ptd::engine {

struct ProbeOptions {
    bool quick = false;   // fewer repeats and message sizes (the preflight, `--quick`)
    std::string version;  // ptd-engine's version, for the host line
};

// How many timed repeats and warm-up runs each probe makes, and the message sizes of the
// communication sweep (bytes per rank's buffer).
struct ProbePlan {
    int warmup = 2, repeats = 9;
    std::vector<int64_t> message_bytes;
};
ProbePlan probe_plan(const ProbeOptions& o);

// Median, spread and mean of each probe's timed repeats (ptd/common/sample_stats.h).
using ptd::SampleStats;
using ptd::sample_stats;

// The whole probe run of one rank: connect like training (connect_rank), then host facts,
// compute, element-wise, memory and communication probes, a "probe" line each, and an
// orderly goodbye. Returns the process exit code.
int run_probes(const JobSpec& job, const RankEnv& env, const TrainOptions& options, const ProbeOptions& probe);

}  // namespace ptd::engine
