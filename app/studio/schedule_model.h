// schedule_model.h — the Schedule tab's data (Tracy style: the model owns the timelines,
// the panel draws a snapshot): the predicted timeline of the edited job (recomputed when
// the job changes), a measured one loaded from a run directory, the Gantt geometry and
// hit-testing, tooltips and the marks where measurement and prediction differ. No ImGui.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ptd/timeline.h"

namespace ptd::studio {

struct StudioState;

struct ScheduleViewState {
    uint64_t revision = UINT64_MAX;     // job revision the prediction belongs to
    std::optional<Timeline> predicted;  // set when the job is valid with a layout
    std::string run_dir;                // measured timeline source ("" = none)
    std::vector<TimelineBlock> measured;  // one step, times from 0, rows = ranks
    std::vector<int> measured_stage;    // per measured block: its rank's stage
    int measured_step = -1;
    std::string measured_error;         // why the run's timeline could not be read
    bool show_measured = false;         // the toggle
    int hover_row = -1, hover_block = -1;  // -1 none; row ≥ stages: measured rows
    bool hover_measured = false;
};

// Recompute the prediction when the job changed (cheap when it did not).
void schedule_refresh(StudioState& s);
// Load the measured timeline of a run directory (timeline/rank-*.tsv): the last step every
// rank recorded. Returns false and sets measured_error on failure; turns the toggle on.
bool schedule_load_measured(StudioState& s, const std::string& run_dir);

// Rows of the chart: predicted stages, then (toggle on) the measured ranks in order.
struct GanttRow {
    bool measured = false;
    int id = 0;  // stage or rank
    std::string label;
};
std::vector<GanttRow> gantt_rows(const ScheduleViewState& v);
// The common time span (seconds) of both timelines.
double gantt_span(const ScheduleViewState& v);

// Blocks of one row on the compute stream (stream 0), and the index into the timeline's
// block list of the one at time t (−1 = idle: the bubble).
int block_at(const ScheduleViewState& v, const GanttRow& row, double t);
const TimelineBlock* row_block(const ScheduleViewState& v, const GanttRow& row, int index);

// The predicted block a measured one corresponds to (same stage, kind, micro-batch,
// chunk), or nullptr.
const TimelineBlock* predicted_counterpart(const ScheduleViewState& v, int measured_index);
// A measured block differs when its duration or its start is off the prediction by more
// than 20% of the predicted duration (or it has no counterpart).
bool measured_differs(const ScheduleViewState& v, int measured_index);

// "fwd micro-batch 3 chunk 0 on stage 1: 1.20 ms → 2.45 ms (1.25 ms): compute 1.1 ms, TP
// 0.1 ms, p2p 0.05 ms"; measured blocks add the prediction they are compared with.
std::string block_tooltip(const ScheduleViewState& v, const GanttRow& row, int index);

}  // namespace ptd::studio
