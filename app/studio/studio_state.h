// studio_state.h — ptd-studio's view-model: everything the studio shows and every edit it
// can make, as plain data and functions. No ImGui, GLFW or OpenGL in here: the panels
// (panel_*.cpp) read this state and turn user input into the calls below, so the tests
// (tests/test_studio.cpp) can drive the studio without a window.
//
// One struct per panel (JobPanelState, LayoutViewState) inside StudioState. Edits go
// through the functions below, which re-derive and re-validate the job at once, so the
// state is always consistent: either `layout` holds the current job's rank layout, or
// `diagnostics` says why there is none.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compare_model.h"
#include "schedule_model.h"
#include "group_colours.h"
#include "job_file_model.h"
#include "planner_model.h"
#include "live_model.h"
#include "memory_model.h"
#include "launch_model.h"
#include "ptd/common/diagnostic.h"
#include "ptd/spec/job_spec.h"
#include "ptd/layout/layout.h"
#include "ptd/model/model_stats.h"
#include "ptd/spec/presets.h"
#include "ptd/timeline/stragglers.h"
#include "term.h"

namespace ptd::studio {

// ---- Job fields ------------------------------------------------------------------------

// One integer field of the job panel. `key` is the dotted TOML key that diagnostics use
// ("parallel.tp"), so an error is shown under the field it names.
struct IntField {
    const char* key;
    const char* label;
    const char* help;      // one line shown on hover
    int min, max;          // what the TOML loader accepts
    int& (*ref)(JobSpec&);
};

// Every integer field, in panel order (model, cluster, parallel, training).
std::span<const IntField> int_fields();
const IntField* find_int_field(std::string_view key);

// ---- Panels ----------------------------------------------------------------------------

// What the rank grid's cells are coloured by: a group palette (TP group, PP stage, DP
// replica, CP rank, EP group, expert TP group) or a heat ramp of memory use, predicted by
// the estimator (memory_model.h) or measured on a live run.
enum class ColourBy { tp, pp, dp, cp, ep, expert_tp, predicted_memory, live_memory };
// "TP group", "PP stage", "DP replica", "CP rank", "EP group", "Expert TP group",
// "Predicted memory", "Live memory"
const char* colour_by_label(ColourBy c);
// Whether `c` is a heat ramp (cell_rgb) rather than a palette index (colour_index).
inline bool colour_is_heat(ColourBy c) { return c == ColourBy::predicted_memory || c == ColourBy::live_memory; }

// Which tab the main area shows.
enum class MainTab { layout, memory, planner, launch, live, job_file, schedule, compare };
// "layout", "memory", "planner", "launch", "live", "job", "schedule", "compare" (the --panel names).
const char* main_tab_name(MainTab t);
std::optional<MainTab> parse_main_tab(std::string_view name);

struct JobPanelState {
    bool model_edited = false;  // the model differs from its preset (set by recompute)
};

// Geometry of the node grid in canvas coordinates (pixels, (0,0) = the canvas's top-left
// corner). Nodes are rows, local GPUs are columns; rank r sits at row r / cols, column
// r % cols. Everything is arithmetic so hit-testing costs O(1) at any world size.
struct GridGeometry {
    float origin_x = 0, origin_y = 0;  // top-left of rank 0's cell (after panning)
    float cell_w = 0, cell_h = 0;
    float gap_x = 0, gap_y = 0;        // space between cells / between node rows
    float label_w = 0;                 // node-label column on the left (not scrolled sideways)
    float header_h = 0;                // GPU-index header on top (not scrolled down)
    int cols = 0, rows = 0, world = 0;

    float pitch_x() const { return cell_w + gap_x; }
    float pitch_y() const { return cell_h + gap_y; }
    float content_w() const { return cols > 0 ? cols * pitch_x() - gap_x : 0; }
    float content_h() const { return rows > 0 ? rows * pitch_y() - gap_y : 0; }
    // Top-left corner of rank r's cell.
    float cell_x(int r) const { return origin_x + (float)(r % cols) * pitch_x(); }
    float cell_y(int r) const { return origin_y + (float)(r / cols) * pitch_y(); }
    float row_y(int node) const { return origin_y + (float)node * pitch_y(); }
};

struct LayoutViewState {
    ColourBy colour_by = ColourBy::tp;
    float cell_w = 0;            // zoom: cell width in pixels; 0 = fit the canvas width
    float pan_x = 0, pan_y = 0;  // how far the grid is scrolled, pixels (≥ 0)
    float canvas_w = 1000, canvas_h = 600;  // canvas size, set by the panel each frame
    int hover = -1;              // rank under the mouse, -1 = none
    int pinned = -1;             // rank the user clicked, -1 = none

    static constexpr float kMinCell = 6, kMaxCell = 240;
    static constexpr float kLabelW = 76, kHeaderH = 20;
};

// The Live run's stragglers, for the rank grid: read from its measured timeline
// (ptd/timeline/stragglers.h) when the run changes: at most every 2 s while it is live, and
// once more after its last event.
struct StragglerMarks {
    std::string run_dir;             // the run they were read from ("" = none)
    uint64_t revision = ~0ull;       // s.live.run.revision when read
    double read_at = -1;             // steady seconds
    std::optional<StragglerReport> report;
};

// ---- The whole studio ------------------------------------------------------------------

struct StudioState {
    PresetCatalog presets;
    JobSpec job;                 // the job as edited
    JobSpec original;            // as loaded, for "Revert"
    std::string job_label;       // file name or "<default>" / "<tiny-local>"

    // Derived from `job` by recompute(); never edited directly.
    std::vector<Diagnostic> diagnostics;  // empty = valid
    std::optional<RankLayout> layout;     // set exactly when the job is valid
    ParamCounts params;
    uint64_t revision = 0;                // bumped on every change of `job`

    JobPanelState job_panel;
    LayoutViewState view;
    MemoryViewState memory;      // memory_model.h: the Memory & speed tab and the cached estimate
    LaunchState launch;          // launch_model.h: the Launch tab and the running launch
    PlannerState planner;        // planner_model.h: the Planner tab and its background search
    JobFileState file;           // job_file_model.h: open/save, recent files, unsaved-changes prompt
    LiveState live;                          // the Live tab: a launched or opened run (live_model.h)
    ScheduleViewState schedule;              // the Schedule tab (schedule_model.h)
    StragglerMarks stragglers;               // slow ranks of the Live run, marked on the rank grid
    CompareState compare;                    // the Compare tab: a pinned layout (compare_model.h)
    MainTab tab = MainTab::layout;           // the tab shown last frame
    std::optional<MainTab> select_tab;        // a tab to switch to on the next frame
};

// Most ranks the studio lays out (the grid stays interactive well past this; the limit
// keeps a half-typed node count from allocating gigabytes).
inline constexpr int kMaxStudioRanks = 1 << 20;

// A ready state for `job` (recompute() already run).
StudioState make_state(PresetCatalog presets, JobSpec job);

// Once per frame, before drawing, on the UI thread: take in what worker threads produced
// since the last frame (planner results, launch events, a followed run directory). Never
// blocks. Returns true when something changed and the window must be redrawn.
bool studio_tick(StudioState& s);
// How long the window may sleep waiting for input before studio_tick has to run again:
// 0 = until the next input event (nothing in the background), else seconds.
double studio_wakeup_s(const StudioState& s);

// Re-derive dp / global_batch where they were not given, validate, rebuild the layout.
void recompute(StudioState& s);

// Edits. Each one changes `job`, then calls recompute(). They return false (and change
// nothing) for an unknown key or preset name.
bool edit_int(StudioState& s, std::string_view key, int value);
// cost: the run's budget and price as the Memory & speed tab edits them: "training.tokens" or
// "cluster.gpu_hour_usd", value ≥ 0 (0 = not given); false for another key or a negative or
// non-finite value.
bool edit_cost_input(StudioState& s, std::string_view key, double value);
bool set_model_preset(StudioState& s, std::string_view name);
bool set_gpu_preset(StudioState& s, std::string_view name);
void set_recompute(StudioState& s, Recompute r);
void set_precision(StudioState& s, Precision p);
void set_sequence_parallel(StudioState& s, bool on);
void set_order(StudioState& s, std::string order);
// dp and global_batch can be derived (true) or given (false); editing them makes them given.
bool is_derived(const StudioState& s, std::string_view key);
bool set_derived(StudioState& s, std::string_view key, bool derived);
void revert(StudioState& s);

bool job_valid(const StudioState& s);
// For a job without problems that states no layout (no [parallel] table, as a bare model
// + cluster + global batch): "no layout chosen — run the planner"; "" otherwise. The
// layout, memory and launch views show it instead of an error; the planner works on it.
std::string no_layout_message(const StudioState& s);
// Messages of the diagnostics whose key is exactly `key`; the first one, or "" if none.
std::vector<std::string> field_errors(const StudioState& s, std::string_view key);
std::string field_error(const StudioState& s, std::string_view key);
// Diagnostics that no panel field shows (e.g. "parallel.layers_per_stage").
std::vector<const Diagnostic*> unplaced_diagnostics(const StudioState& s);
// Keys the job panel shows a field for (the int fields plus presets, enums and order).
bool is_panel_key(std::string_view key);

// ---- Rank layout view ------------------------------------------------------------------

GridGeometry grid_geometry(const StudioState& s);
// Rank whose cell contains canvas point (x, y); -1 between cells, over the labels, past
// the last rank, or when there is no layout.
int pick_rank(const StudioState& s, float x, float y);
// Colour of a rank's cell: TP → its TP group's index; PP → its pp coordinate (stage);
// DP → its dp coordinate (replica). How many colours there are: colour_count(), which is 0
// for the heat modes (colour_index then gives the stage).
int colour_index(const StudioState& s, int rank);
int colour_count(const StudioState& s);
// RGB fill of a rank's cell in any mode: the palette colour of colour_index, or for
// predicted_memory heat_rgb of predicted_rank_heat (its predicted memory on the ramp of
// predicted_heat_scale; kHeatNoData without an estimate; live_memory: kHeatNoData until a
// live run reports).
Rgb cell_rgb(const StudioState& s, int rank);
// Whether the Live panel's run has as many ranks as this layout (then the grid can show it).
bool live_matches_layout(const StudioState& s);
// Re-read the Live run's stragglers when it changed (cheap when it did not); call once a frame.
void refresh_stragglers(StudioState& s);
// The measured compute of `rank` when the straggler rule names it (and the Live run is this
// layout's); null otherwise. Its host: the run's host index of that rank, -1 when unknown.
const RankComputeTime* rank_straggler(const StudioState& s, int rank);
std::string straggler_host(const StudioState& s, int rank);  // "host 0 (node-a)"
// Whether any rank on grid row (node) `node` is a straggler.
bool node_has_straggler(const StudioState& s, int node);
// live_memory's ramp position of a rank: its measured memory over the usable GPU memory, or
// (cpu preset, whose memory is nominal) over the largest rank's; none without live data.
std::optional<double> live_rank_heat(const StudioState& s, int rank);
// The rank whose groups are outlined: the pinned one, else the hovered one; -1 = none.
int active_rank(const StudioState& s);
// Members of `rank`'s group along `dim` (sorted by rank); empty without a layout.
std::span<const int32_t> group_members(const StudioState& s, int rank, Dim dim);
// Whether `rank`'s TP group covers more than one node.
bool tp_group_spans_nodes(const StudioState& s, int rank);
// The experts' TP degree when it differs from tp (MoE parallel folding, layout.h): its
// groups are then expert_tp consecutive ranks; 0 when the expert TP groups are the TP groups.
int folded_expert_tp(const StudioState& s);
// Members of `rank`'s expert-parallel group (sorted by rank); empty without a layout.
std::span<const int32_t> ep_group_members(const StudioState& s, int rank);
// Tooltip text: rank, (tp, cp, dp, pp), node and host (cluster.hosts, when given), local
// GPU, predicted memory (of the rank's stage), and its groups (TP, PP, DP, and CP, EP and
// expert TP where the job has them), each marked when it spans nodes.
std::string rank_tooltip(const StudioState& s, int rank);
// One line per layout warning (TP, CP, EP or expert TP groups across nodes, as `ptd layout`
// prints them; a layout Megatron-LM refuses), empty when none.
std::vector<std::string> layout_warnings(const StudioState& s);
// "32 ranks = tp 4 × cp 1 × dp 4 × pp 2, ep 4, order tp-cp-ep-dp-pp, 4 nodes × 8 GPUs":
// every degree the job has (layout_degrees_text).
std::string layout_headline(const StudioState& s);

// Input from the layout canvas (canvas coordinates).
void layout_resize(StudioState& s, float canvas_w, float canvas_h);
void layout_hover(StudioState& s, float x, float y);  // x < 0 = the mouse left the canvas
void layout_click(StudioState& s, float x, float y);  // pins the rank there; again = unpin
void layout_pan(StudioState& s, float dx, float dy);  // drag by (dx, dy) pixels
void layout_zoom(StudioState& s, float x, float y, float steps);  // wheel steps, + = in
void layout_fit(StudioState& s);                      // zoom to fit the canvas width
void set_colour_by(StudioState& s, ColourBy c);

// ---- Summary ---------------------------------------------------------------------------

// human_count (6.74B, 125.0M, 4.1K) is term.h's, the terminal views' own.
struct JobSummary {
    int64_t parameters = 0;
    int world = 0;
    int dp = 0;
    int grad_accum = 0;
    int64_t tokens_per_step = 0;
};
JobSummary job_summary(const StudioState& s);

// The stack the job runs on ("Megatron-LM command line, today", a Megatron-Bridge recipe)
// and what it supplied for each key the job does not write, with why — the list `ptd
// estimate` prints under "stack:" (JobSpec::Origin::stack_defaults, refreshed by recompute:
// a key the user edits, or a planner row applies, leaves it).
struct StackDefaultsView {
    std::string stack;
    std::span<const StackDefault> rows;  // key ("parallel.overlap_grad_reduce"), value ("false"), source: the job's own list, valid until the next edit
};
StackDefaultsView stack_defaults_view(const StudioState& s);

// Job file name for the title: the file's base name, or the built-in job's label.
std::string job_display_name(const JobSpec& job);

}  // namespace ptd::studio
