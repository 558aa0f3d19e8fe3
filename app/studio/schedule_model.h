// schedule_model.h — the Schedule tab's data (Tracy style: the model owns the timelines,
// the panel draws a snapshot): the predicted timeline of the edited job (recomputed when
// the job changes), a measured one loaded from a run directory, the Gantt geometry and
// hit-testing, tooltips and the marks where measurement and prediction differ. The
// prediction is estimate_job's with the job's cluster profile, the one a launch of the job
// records and the Live tab draws dashed; the legend says which and whether the run shown is
// the Live run predicted the same (schedule_prediction_note). No ImGui.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ptd/launch.h"
#include "ptd/timeline/timeline.h"

namespace ptd::studio {

struct StudioState;

struct ScheduleViewState {
    uint64_t revision = UINT64_MAX;     // job revision the prediction belongs to
    std::optional<Timeline> predicted;  // set when the job is valid with a layout
    // The cluster profile the prediction used (the job's cluster.profile; none = the preset's
    // figures), or why the job's cannot be used (the prediction then takes the preset's).
    std::optional<RunProfileRecord> profile;
    std::string profile_error;
    std::string prediction_source;      // "\"cpu\" preset's figures" / "profile FILE (measured ...)"
    std::string run_dir;                // measured timeline source ("" = none)
    std::vector<TimelineBlock> measured;  // one step, times from 0, rows = ranks
    std::vector<int> measured_stage;    // per measured block: its rank's stage
    int measured_step = -1;
    std::string measured_error;         // why the run's timeline could not be read
    bool show_measured = false;         // the toggle
    int hover_row = -1, hover_block = -1;  // -1 none; row ≥ stages: measured rows
    bool hover_measured = false;
    // Rows: the stages (replica −1) or the ranks of data-parallel replica `replica`: its
    // pp·cp·tp ranks in rank order, each drawn with its stage's predicted blocks, and of
    // the measured ranks only that replica's.
    int replica = -1;
    struct ReplicaRank {
        int rank = 0, stage = 0, tp = 0, cp = 0;
    };
    std::vector<ReplicaRank> replica_ranks;  // filled by schedule_set_rows
    std::vector<int> measured_dp;       // per measured block: its rank's data-parallel index
    // With the stages as rows, the measured ranks of one representative data-parallel replica
    // (replica 0: the others run the same schedule) unless this is set (issue 33 point 3); a
    // 1,024-rank run would otherwise draw 1,024 rows.
    bool measured_all_replicas = false;
    // The visible time window (seconds); view_t1 ≤ view_t0 = the whole span ("fit").
    double view_t0 = 0, view_t1 = 0;
    std::string followed_run;  // the ended run whose timeline was loaded on its own
};

// Recompute the prediction when the job changed (cheap when it did not), and follow the
// run of the Live tab: once it has ended (a launch from the studio or a followed run
// directory), its measured timeline, if it recorded one, goes under the prediction once.
void schedule_refresh(StudioState& s);
// The run directory of the run the Live tab shows ("" = none): the studio's own launch or
// the directory opened.
std::string live_run_dir(const StudioState& s);
// What the red outlines compare with, for the legend: this chart's prediction (estimate_job
// of the edited job with its profile or the preset's figures, and its step) and, when the
// measured timeline is the Live tab's run, whether that run's prediction (the Live tab's
// dashed lines) is the same one or another job's or profile's. Empty without a prediction.
struct SchedulePredictionNote {
    std::string text;
    bool not_the_live_runs = false;  // the measured run was predicted from another job or profile
};
SchedulePredictionNote schedule_prediction_note(const StudioState& s);
// Load the measured timeline of a run directory (timeline/rank-*.tsv): the last step every
// rank recorded. Returns false and sets measured_error on failure; turns the toggle on.
bool schedule_load_measured(StudioState& s, const std::string& run_dir);

// Choose the rows: −1 = stages, k = the ranks of data-parallel replica k (clamped to
// nothing else: an index outside 0..dp−1 falls back to stages).
void schedule_set_rows(StudioState& s, int replica);

// Rows of the chart: predicted stages (or the chosen replica's ranks), then (toggle on) the
// measured ranks in order (of the chosen replica only).
struct GanttRow {
    bool measured = false;
    int id = 0;  // the blocks' row: stage (predicted) or rank (measured)
    std::string label;
    int rank = -1;  // predicted rows in replica mode: the rank the row stands for
};
std::vector<GanttRow> gantt_rows(const ScheduleViewState& v);
// The common time span (seconds) of both timelines.
double gantt_span(const ScheduleViewState& v);

// The visible window [t0, t1] for a chart of `span` seconds: the whole span until zoomed.
std::pair<double, double> schedule_view(const ScheduleViewState& v, double span);
// Zoom by `factor` (< 1 in, > 1 out) keeping time `at_s` under the cursor; never wider
// than the span nor narrower than a millionth of it; stays inside [0, span].
void schedule_zoom(ScheduleViewState& v, double span, double at_s, double factor);
// Shift the window by `delta_s` seconds, kept inside [0, span].
void schedule_pan(ScheduleViewState& v, double span, double delta_s);
// Back to the whole span.
inline void schedule_fit(ScheduleViewState& v) { v.view_t0 = v.view_t1 = 0; }

// Blocks drawn inside another block (a measured recompute forward inside its backward):
// drawn after the others so they stay visible.
bool nested_block(const TimelineBlock& b);

// Blocks of one row on the compute stream (stream 0), and the index into the timeline's
// block list of the one at time t (−1 = idle: the bubble).
int block_at(const ScheduleViewState& v, const GanttRow& row, double t);
const TimelineBlock* row_block(const ScheduleViewState& v, const GanttRow& row, int index);

// The predicted block a measured one corresponds to (same stage, kind, micro-batch,
// chunk), or nullptr.
const TimelineBlock* predicted_counterpart(const ScheduleViewState& v, int measured_index);
// A measured block differs when its duration or its start is off the prediction by more
// than 20% of the predicted duration (or it has no counterpart). Parts of blocks (measured
// recompute forwards, TP collectives, p2p transfers) are never marked.
bool measured_differs(const ScheduleViewState& v, int measured_index);

// Level of detail. At real sizes (Llama-3 70B: 256 micro-batches × vpp 5 on 4 stages) a
// block is a fraction of a pixel and the row turns into a grey smear. So a row is drawn as
// spans: a compute block at least `min_px` wide is a span of its own; consecutive narrower
// ones that touch (gaps under a pixel) merge into one span, labelled by what it holds
// ("F 0-63", "B 4-255", "F/B 4-255"). Idle time wider than a pixel stays a gap (the bubble
// shows through); zooming in widens the blocks until each is its own span again.
struct GanttSpan {
    int first = -1, last = -1;        // indices into the row's block list: the first and last block
    int blocks = 0;                   // compute blocks merged (1 = a single block)
    double start_s = 0, end_s = 0;
    int mb_lo = -1, mb_hi = -1;       // micro-batch range (−1: none)
    bool forward = false, backward = false, other = false;  // kinds inside (other: recompute, W, ...)
};
// The compute-stream spans of `row` that overlap [view0, view1], drawn `px_per_s` pixels per
// second. Nested blocks (a measured recompute inside its backward) are left out.
std::vector<GanttSpan> gantt_spans(const ScheduleViewState& v, const GanttRow& row, double view0, double view1,
                                   double px_per_s, double min_px = 4);
// "F 0-63" (forwards only), "B 4-255" (backwards only), "F/B 4-255" (both, as in 1F1B's
// steady state), with "+" when other kinds are inside; "" for a span without micro-batches.
std::string span_label(const GanttSpan& span);
// The row's idle share of the predicted step [0, makespan]: its pipeline bubble, exposed DP
// communication and optimizer wait (1 − busy / makespan). 0 for a measured row.
double row_idle_share(const ScheduleViewState& v, const GanttRow& row);

// "fwd micro-batch 3 chunk 0 on stage 1: 1.20 ms → 2.45 ms (1.25 ms): compute 1.1 ms, TP
// 0.1 ms, p2p 0.05 ms"; measured blocks add the prediction they are compared with.
std::string block_tooltip(const ScheduleViewState& v, const GanttRow& row, int index);

}  // namespace ptd::studio
