// metrics.h — ptd-engine's machine-readable output: one JSON object per line on stdout,
// schema "ptd.metrics/1" (docs/metrics.md). Human-readable logs go to stderr.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "ptd/engine/mem.h"

namespace ptd::engine {

inline constexpr const char* kMetricsSchema = "ptd.metrics/1";

// Fields every event carries: schema, event, run_id, rank, time (Unix seconds).
struct MetricsSource {
    std::string run_id;
    int rank = 0;
};
nlohmann::json metrics_event(const MetricsSource& src, const char* event);

// Writes `j` as one line to stdout and flushes; whole lines even when threads race.
void emit_metrics_line(const nlohmann::json& j);

// {"params": {"current": …, "peak": …, "predicted": …}, …, "total": {…}}; `predicted`
// has one entry per category (< 0 = no prediction, written as null).
nlohmann::json memory_json(const MemStats& s, const double predicted[MEM_CATEGORY_COUNT], double predicted_total);

}  // namespace ptd::engine
