// live_model.h — the Live panel's model: a run's per-rank series (loss, tokens/s, step time,
// MFU, memory by category, measured and predicted), the estimator's speed prediction for
// the run (run_prediction.h: step time and tokens/s with their interval), states and logs,
// folded from the same
// LaunchEvents a live launch (the Launch panel) or a followed run directory (RunFollower)
// produces; plus what the panel shows of it (lines per rank or per group, hidden lines, the
// step range, follow/pause, hover). No ImGui here: tests/test_studio_live.cpp drives it.
//
// Threads: everything here runs on the UI thread. The Launch panel drains its Launcher's
// queue and calls live_apply; a followed directory is polled by live_tick (from
// studio_tick), never blocking for more than a few milliseconds per frame.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "plot_model.h"
#include "ptd/common/diagnostic.h"
#include "ptd/launch.h"
#include "ptd/metrics_event.h"
#include "ptd/run_dir.h"
#include "run_prediction.h"

namespace ptd::studio {

struct StudioState;

// ---- The run ---------------------------------------------------------------------------

struct LiveLogLine {
    bool is_stderr = false;  // a run directory's logs mix both streams: false there
    std::string text;
};

// One rank's history. The series are parallel arrays, one entry per `step` metrics line,
// with steps strictly increasing (a step at or before the last one — a resumed run that
// went back to an earlier checkpoint — drops the entries from that step on first).
// Values are float: 24 bits of mantissa are plenty for a plot and halve the memory of
// 64 ranks × 10,000 steps × 18 series.
struct LiveSeries {
    std::vector<int> steps;
    std::vector<float> loss, tokens_per_s, mfu;  // mfu as a fraction (0.42 = 42 %)
    std::vector<float> step_s;                   // the step's wall time on the rank (time.step)
    std::array<std::vector<float>, MEM_CAT_COUNT> mem_current;    // bytes
    std::array<std::vector<float>, MEM_CAT_COUNT> mem_predicted;  // bytes; NaN = no prediction
    // A min/max pyramid of each value array above, kept in step with it by live_apply (a new
    // step extends it, a resume truncates it), so the plots decimate a line of any length
    // in O(pixels) even while their range follows the tail and moves every frame. About
    // 2 bytes per value.
    struct Pyramids {
        MinMaxPyramid loss, tokens_per_s, mfu, step_s;
        std::array<MinMaxPyramid, MEM_CAT_COUNT> mem_current, mem_predicted;
    } pyramids;
    size_t size() const { return steps.size(); }
};

struct LiveRank {
    int rank = 0, host = 0, local_rank = 0, tp = 0, pp = 0, dp = 0;
    long pid = 0;
    std::string state = "starting";  // "starting", "running", "done", "exit N", "lost"
    std::optional<int> exit_code;    // set by rank_exited; -1 = its host was lost
    int last_step = 0;               // highest step reported (step or end line)
    double last_loss = 0;            // loss of the last step line (has_step)
    bool has_step = false;
    bool has_memory = false;         // mem_total: total current bytes of the last memory figure
    double mem_total = 0;
    std::optional<double> mem_total_predicted;
    std::string error;               // message of an `error` metrics line
    // Output lines (not metrics lines; warning/error metrics lines as their message), as
    // they arrived, the newest kLiveLogLines kept. `log_dropped` counts the older ones.
    std::deque<LiveLogLine> log;
    uint64_t log_dropped = 0;
    LiveSeries series;
};

inline constexpr size_t kLiveLogLines = 5000;

struct LiveRun {
    bool active = false;             // a run is loaded (live or from a directory)
    bool live = false;               // events still arriving (until the `finished` event)
    RunManifest manifest;            // hosts, ranks, run_id, state (updated from a followed dir)
    std::vector<LiveRank> ranks;     // by global rank
    std::string state;               // manifest state or "running"/"finished"/"failed"/"stopped"
    int exit_code = 0;
    std::string reason;
    int steps_total = 0;             // the stop step (manifest, else the engine's start line)
    int max_step = 0;                // highest step any rank reported
    std::deque<std::string> events;  // run-level messages (host failures, stopping, finished)
    std::vector<double> restart_steps;  // the step each restart resumed from (restart.h), in order
    uint64_t revision = 0;           // bumped by every change, for caches
    uint64_t generation = 0;         // bumped by live_begin only (ranks and coordinates)
    // The estimator's speed prediction for this run (estimate_job of its job with its cluster
    // profile): set by whoever began the run (the Launch panel, live_open_run_dir) after
    // live_begin, which clears it. None: not computed (a run begun without one).
    std::optional<RunPrediction> prediction;
};

// Reset for a new run (from initial_manifest(plan) or a directory's manifest): one LiveRank
// per manifest rank with its coordinates, active and live set, state from the manifest.
void live_begin(LiveRun& run, const RunManifest& m);
// Fold any event into the run: series, logs, rank and run states. Events for ranks outside
// the manifest are ignored (but still bump nothing).
void live_apply(LiveRun& run, const LaunchEvent& ev);
// Take a newer manifest of a followed directory: state, reason, pids, exit codes.
void live_set_manifest(LiveRun& run, const RunManifest& m);

// ---- What the panel shows ----------------------------------------------------------------

enum class LiveMetric { loss, tokens_per_s, step_time, mfu, memory };
inline constexpr int kLiveMetricCount = 5;
const char* live_metric_title(LiveMetric m);  // "Loss", "Tokens/s", "Step time", "MFU", "Memory"

// The run's prediction of a speed metric as a level across the plot (tokens/s and step
// time; nothing for the others, or when the run has no prediction): the value, and its
// interval when the estimator gave one.
std::optional<PlotLevel> live_predicted_level(const LiveRun& run, LiveMetric m);
// The median of every rank's last `steps` values of `m` together (NaN left out); nullopt
// when there is none. What the prediction card sets beside the prediction: a few steps, so
// one noisy step does not decide whether the prediction held.
std::optional<double> live_recent_median(const LiveRun& run, LiveMetric m, int steps = 5);

// Lines per rank, or per group of ranks: each TP group (same dp and pp coordinates), each PP
// stage (same pp coordinate), or all ranks. A group's line is the median of its ranks at each
// step, drawn over their min-max band (live_line_band), with its outliers named
// (live_outliers): identical lines of 4-64 ranks no longer hide each other (issue 33).
enum class LiveAggregate { rank, tp_group, pp_stage, all };
// "per rank", "by TP group", "by PP stage", "all ranks"
const char* live_aggregate_label(LiveAggregate a);
// The grouping a run of `ranks` ranks opens with: per rank up to kLiveRanksPerRankMax, by PP
// stage beyond (a median and a band per stage).
inline constexpr int kLiveRanksPerRankMax = 8;
LiveAggregate live_default_aggregate(int ranks);

// One line of a plot: a rank, or a group of ranks (listed in `members`, sorted).
struct LiveGroup {
    int id = 0;             // rank, TP group number (in order of their first rank), or pp stage
    std::string label;      // "rank 3", "TP group 1", "PP stage 0"
    std::vector<int> members;
};
std::vector<LiveGroup> live_groups(const LiveRun& run, LiveAggregate a);

// A series to plot: steps (strictly increasing) and values of the same length, and the
// values' min/max pyramid (for decimate_minmax). A view into the run or into LiveView's
// cache; valid until the next change of either.
struct SeriesView {
    std::span<const int> steps;
    std::span<const float> values;
    const MinMaxPyramid* pyramid = nullptr;  // nullptr: none (decimation scans)
};
// The measured (predicted = false) or predicted series of one rank; memory uses `mem_cat`.
// A predicted series exists only for memory (empty otherwise: the speed predictions are one
// level per run, live_predicted_level).
SeriesView live_rank_series(const LiveRank& r, LiveMetric m, int mem_cat, bool predicted);
// Mean over `members` at every step at least one of them reported (NaN values skipped);
// steps ascending. Written into `steps`/`values` (cleared first).
void live_mean_series(const LiveRun& run, std::span<const int> members, LiveMetric m, int mem_cat, bool predicted,
                      std::vector<int>& steps, std::vector<float>& values);

// Median over `members` at every step at least one of them reported (NaN values skipped; an
// even count takes the mean of the middle two), and the min and max there; steps ascending.
void live_median_series(const LiveRun& run, std::span<const int> members, LiveMetric m, int mem_cat, bool predicted,
                        std::vector<int>& steps, std::vector<float>& median, std::vector<float>& lo,
                        std::vector<float>& hi);

struct LiveState;

// A rank of a group far from its group's median at its last step: more than 3 scaled median
// absolute deviations (1.4826 MAD) and more than 5% of the median away. Groups of fewer than
// 3 ranks have none.
struct LiveOutlier {
    int rank = 0, line = 0;     // the rank and its group's line
    int step = 0;
    float value = 0, median = 0;
};
std::vector<LiveOutlier> live_outliers(LiveState& live, LiveMetric m);

// The panel's view state.
struct LiveView {
    LiveAggregate aggregate = LiveAggregate::rank;
    int mem_cat = MEM_TOTAL;              // memory category the memory plot shows
    std::vector<uint8_t> hidden;          // by line index of live_groups(): 1 = hidden
    bool follow = true;                   // the x range tracks the newest step
    double span = 0;                      // steps shown while following; 0 = all of them
    double x0 = 0, x1 = 0;                // the range shown while paused
    std::optional<double> hover_step;     // step under the mouse in any plot (the crosshair)
    int log_rank = 0;                     // rank whose log the panel shows
    std::string open_path;                // the "Open run" field
    std::string open_error;               // why the last open failed, "" = it did not

    // Lines of the grouping and the mean series of grouped lines (with their min/max
    // pyramids), recomputed when the run's revision or the grouping changes (at most 4
    // times a second while a run is live: a mean over 64 ranks × 10,000 steps is not free
    // every frame). Slots: the metrics, then memory predicted.
    struct Cache {
        uint64_t groups_generation = ~0ull;
        LiveAggregate groups_aggregate = LiveAggregate::rank;
        std::vector<LiveGroup> groups;
        struct Slot {
            uint64_t revision = ~0ull;
            LiveAggregate aggregate = LiveAggregate::rank;
            int mem_cat = -1;
            double computed_at = -1;  // steady seconds
            std::vector<std::vector<int>> steps;
            std::vector<std::vector<float>> values;  // the median
            std::vector<MinMaxPyramid> pyramids;
            // The min-max band as one series: each step twice, (step, min) then (step, max).
            std::vector<std::vector<int>> band_steps;
            std::vector<std::vector<float>> band_values;
        };
        std::array<Slot, kLiveMetricCount + 1> slots;
    } cache;
};

struct LiveState {
    LiveRun run;
    LiveView view;
    std::string dir;                        // the followed run directory, "" = none
    std::shared_ptr<RunFollower> follower;  // shared: StudioState stays copyable; dropped
                                            // when the run is done or a launch replaced it
    uint64_t follow_generation = 0;         // run.generation the follower feeds
    double last_poll = -1;                  // steady seconds of the last poll
    uint64_t bytes_read = 0;                // log text read from the directory so far
};

// Lines of the current grouping (refreshes view.cache when stale) and their series.
const std::vector<LiveGroup>& live_lines(LiveState& live);
SeriesView live_line_series(LiveState& live, int line, LiveMetric m, bool predicted);
// A grouped line's min-max band of measured values (each step twice: its min, then its
// max); empty per rank.
SeriesView live_line_band(LiveState& live, int line, LiveMetric m);
bool live_line_visible(const LiveState& live, int line);
void live_toggle_line(LiveState& live, int line);
void live_show_all(LiveState& live, bool visible);
void live_set_aggregate(LiveState& live, LiveAggregate a);

// The x range (steps) the plots show now: following → [newest − span, newest] (the whole
// run when span is 0), paused → [x0, x1]. Never empty (at least one step wide).
struct StepRange {
    double lo = 0, hi = 1;
};
StepRange live_x_range(const LiveState& live);
// First and last step of the run over every rank (0, 0 when none).
StepRange live_data_range(const LiveRun& run);
// Zoom the x range by wheel `steps` (+ = in) around step `at`. While following, the right
// edge stays on the newest step and only the span changes; paused, `at` stays put.
void live_zoom(LiveState& live, double at, float steps);
// Pan by `d_steps` (drag); pauses following.
void live_pan(LiveState& live, double d_steps);
void live_set_follow(LiveState& live, bool follow);
// Back to following the whole run (double-click).
void live_reset_view(LiveState& live);

// The hover readout of plot `m` at step `at`: for every visible line its value at its step
// nearest to `at` and the predicted value (memory: the engine's prediction at that step;
// tokens/s and step time: the run's prediction; NaN when none). Lines without data are
// left out.
struct LiveReadoutRow {
    int line = 0;
    int step = 0;
    float value = 0;
    float predicted = 0;  // NaN = no prediction (loss and MFU never have one)
};
std::vector<LiveReadoutRow> live_readout(LiveState& live, LiveMetric m, double at);

// Index of the step nearest to `x` in `steps` (ascending); -1 when empty. Ties go to the
// earlier step.
int nearest_step_index(std::span<const int> steps, double x);

// ---- Directories -----------------------------------------------------------------------

// Follow a run directory: reads its manifest (error names the file), resets the run from
// it and keeps a RunFollower that live_tick polls. Replaces whatever run was shown.
Result<void> live_open_run_dir(StudioState& s, const std::string& dir);
// Poll the followed directory (non-blocking; reads for at most a few ms per call so a
// large finished run loads over several frames). True if the run changed.
bool live_tick(StudioState& s);
// Run directories under `root` (those with a manifest.json), newest first, at most `max`.
std::vector<std::string> live_recent_run_dirs(const std::string& root, int max);

// The job file the Live run was launched with (its run directory's job.toml, which ptd
// launch and the studio write), "" when the run has none (or no run directory). Whether the
// job panel holds that file now.
std::string live_run_job_file(const StudioState& s);
bool live_run_job_in_editor(const StudioState& s);

// Latest total current memory of a rank (for the layout heatmap); none before its first
// memory figure or without a run. O(1).
std::optional<double> live_rank_memory_bytes(const StudioState& s, int rank);
// Largest of those over every rank (0 when none): the heatmap's scale.
double live_max_memory_bytes(const StudioState& s);

}  // namespace ptd::studio
