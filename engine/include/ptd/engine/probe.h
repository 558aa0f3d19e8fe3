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
    // The engine's own passes: at least `repeats` micro-batches and, for short passes, enough
    // to span this many seconds (at most `max_pass_repeats`). On shared cores a pass's TP
    // calls scatter (interquartile range 1–2 × the median), and a mean over more micro-batches
    // settles more: 1 s took 34–57 of tiny-gpt-8rank's. The cap only guards against a pass
    // timed at nothing; it used to be 200, which cut a 1-rank tiny job's 4 s to 1.3 s.
    double pass_span_s = 4.0;
    int max_pass_repeats = 4000;
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
