// training_cost_view.h — a run's time, GPU-hours, cost, energy and checkpoints
// (ptd::TrainingCost, issue 28 point 5) for people and programs: one list of rows (figure,
// value, where it comes from) that `ptd estimate` prints and the studio's Memory & speed tab
// draws, the JSON object `ptd estimate --json` and `ptd plan --json` carry, and the short
// cells of the plan table.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ptd/model/training_cost.h"

namespace ptd {

struct CostRow {
    std::string label;   // "wall clock", "GPU-hours", ...
    std::string value;   // "43.4 days (80%: 38.0 – 49.6)"
    std::string source;  // "steps × step time; goodput 95.2%", "cluster.gpu_hour_usd", ...
    bool operator==(const CostRow&) const = default;
};
// The rows in print order; empty when the cost is not known (no step time).
std::vector<CostRow> training_cost_rows(const TrainingCost& c);

// "43.4 days", "5.2 h", "27.9 min", "7.9 s".
std::string duration_text(double s);
// `s` in the unit duration_text would give `unit_of` (an interval's ends in its point's unit).
std::string duration_text(double s, double unit_of);
// "1.23 GWh", "456 MWh", "12.3 kWh".
std::string energy_text(double kwh);
// "$2.13M", "$45.6K", "$12".
std::string usd_text(double usd);

// "training": {steps, tokens, ..., "checkpoint": {...}, "sources": {...}}; null when not known.
nlohmann::json training_cost_json(const TrainingCost& c);

}  // namespace ptd
