// memory_model.h — the view-model of the "Memory & speed" tab and of the rank grid's
// predicted-memory colouring: the job's estimate (estimate_job, cached per job revision),
// one stacked bar per pipeline stage with its geometry and hit-testing, the step-time bar,
// the throughput figures and the heat ramp. No ImGui here: panel_memory.cpp draws what
// these functions compute, and tests/test_studio_memory.cpp checks it without a window.
//
// Numbers come straight from ptd::Estimate (estimators/include/ptd/model/estimate.h); every
// formula behind them is in docs/estimators.md.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "group_colours.h"
#include "ptd/model/estimate.h"
#include "training_cost_view.h"

namespace ptd::studio {

struct StudioState;

// ---- The cached estimate ---------------------------------------------------------------

// estimate_job of the current job, kept until StudioState::revision changes. estimate_job
// takes tens of microseconds for a 7B job on 32 GPUs (see `seconds`), so computing it on
// the UI thread on the first frame after an edit is cheaper than handing it to a thread.
struct EstimateCache {
    uint64_t revision = 0;             // the StudioState::revision it was computed for; 0 = never
    std::optional<Estimate> estimate;  // empty when the job is invalid
    double seconds = 0;                // wall time of the last estimate_job call
    int computations = 0;              // estimate_job calls so far (the tests count them)
    // The job's cluster profile (cluster.profile) the estimate took its times from: "profile:
    // FILE (measured ...)"; "" without one; the error's first line when it does not load.
    std::string profile_note;
};

// What the memory chart's scale spans: the GPU's memory (the usable line in view), the
// largest stage (tiny jobs would be invisible slivers next to 80 GiB), or automatic: the
// largest stage when it is under kZoomBelow of the usable memory, else the GPU's memory.
enum class MemoryScale { automatic, gpu, stages };
inline constexpr double kZoomBelow = 0.1;

// State of the Memory & speed tab. The cache is `mutable` so const readers (the rank grid's
// tooltip and colours) share it; it is only touched on the UI thread.
struct MemoryViewState {
    mutable EstimateCache cache;
    MemoryScale scale = MemoryScale::automatic;
    int hover_stage = -1;  // index into Estimate::stages of the bar under the mouse, -1 = none
    int hover_part = -1;   // MemPart under the mouse on that bar, -1 = none
    int hover_time = -1;   // index into TimeBar::segments under the mouse, -1 = none

    static constexpr float kLabelW = 92;    // stage-label column left of the bars
    static constexpr float kValueW = 150;   // total / "OOM +x GiB" column right of the bars
    static constexpr float kMinRow = 16;    // row height limits: many stages shrink, then scroll
    static constexpr float kMaxRow = 34;
};

// The estimate of the current job, computed when the job changed since the last call and
// reused otherwise; nullptr while the job is invalid. The pointer stays valid until the
// next call after an edit.
const Estimate* job_estimate(const StudioState& s);

// ---- Units -----------------------------------------------------------------------------

// GiB, or MiB when the largest stage is under 0.5 GiB (tiny CPU jobs), as `ptd estimate`.
struct MemoryUnit {
    double bytes = 1024.0 * 1024.0 * 1024.0;
    const char* name = "GiB";
};
MemoryUnit memory_unit(const Estimate& e);
// "61.23 GiB" (two decimals, the unit's name).
std::string format_memory(double bytes, MemoryUnit u);
// "1,234,567"
std::string format_thousands(double v);

// ---- Memory per stage ------------------------------------------------------------------

// The five segments of a stage bar. `overheads` is everything MemoryBreakdown::overheads()
// holds: temporary/communication buffers, CUDA context, NCCL buffers and fragmentation.
enum class MemPart { params, grads, optimizer, activations, overheads };
inline constexpr int kMemParts = 5;
const char* mem_part_label(MemPart p);  // "parameters", "gradients", "optimizer", "activations", "overheads"
double mem_part_bytes(const MemoryBreakdown& m, MemPart p);

// One stage's bar in chart coordinates (pixels; (0,0) = top-left of the scrolling rows).
struct StageBar {
    int index = 0;                           // into Estimate::stages
    int stage = 0;                           // pipeline stage number
    std::array<double, kMemParts> bytes{};   // per MemPart; they sum to `total`
    double total = 0;                        // StageEstimate::mem.total()
    bool over = false;                       // total > usable: this stage runs out of memory
    bool worst = false;                      // Estimate::worst_stage
    float y0 = 0, y1 = 0;                    // the bar's top and bottom
    std::array<float, kMemParts + 1> edge{}; // segment p spans x edge[p] .. edge[p + 1]
    std::string label;                       // "stage 3"
    std::string value;                       // "61.23 GiB" or "OOM +3.41 GiB"
};

struct AxisTick {
    float x = 0;
    std::string text;  // "40", in the chart's unit
};

// Every bar of the chart for a canvas `width` pixels wide whose rows may use `height`
// pixels before they have to scroll.
struct MemoryChart {
    MemoryUnit unit;
    double capacity_bytes = 0;  // GPU memory (cluster.gpu.memory_gib)
    double usable_bytes = 0;    // capacity × (1 − estimate.headroom): the red line
    double scale_bytes = 0;     // bytes at bar_x1
    float bar_x0 = 0, bar_x1 = 0;  // x of 0 bytes and of scale_bytes
    float usable_x = 0, capacity_x = 0;  // past bar_x1 when `zoomed`
    bool zoomed = false;        // the scale spans the largest stage, not the GPU's memory
    float row_h = 0;            // row pitch; bars are centred in their row
    float content_h = 0;        // rows × row_h (more than `height` = scroll)
    int worst = 0;              // index of the worst stage
    bool fits = true;
    std::vector<StageBar> bars; // one per stage, in order
    std::vector<AxisTick> ticks;

    float x_of(double bytes) const {
        return scale_bytes > 0 ? bar_x0 + (float)(bytes / scale_bytes) * (bar_x1 - bar_x0) : bar_x0;
    }
};
// The scale follows s.memory.scale. Empty (no bars) while the job is invalid.
MemoryChart memory_chart(const StudioState& s, float width, float height);

struct MemoryHit {
    int stage = -1;  // index of the bar whose row contains the point, -1 = none
    int part = -1;   // MemPart of the segment under the point, -1 = on the row but off the bar
};
// What chart point (x, y) is over. Rows are hit over their whole height and width so the
// tooltip follows the mouse along a row; segments only inside the bar itself.
MemoryHit memory_hit(const MemoryChart& c, float x, float y);

// Tooltip for a stage: its layers, every category in the chart's unit (the five parts, the
// overheads broken down, the total), the usable memory and whether it fits.
std::string stage_tooltip(const StudioState& s, int index);
// One line above the chart: "fits: worst stage 0 uses 41.23 of 72.00 GiB usable (57%)" or
// "OOM: stage 3 needs 81.2 GiB, 9.2 GiB more than the 72.0 GiB usable".
std::string memory_headline(const StudioState& s);

// ---- Step time -------------------------------------------------------------------------

enum class TimePart { compute, tp_comm, cp_comm, ep_comm, pp_comm, bubble, dp_comm, optimizer };
const char* time_part_label(TimePart p);  // "compute", "TP comm", "CP comm", "EP comm", "PP p2p", "PP bubble", ...
double time_part_seconds(const TimeBreakdown& t, TimePart p);

struct TimeSegment {
    TimePart part = TimePart::compute;
    double seconds = 0;
    float x0 = 0, x1 = 0;  // along the bar
};
// The step-time bar: compute, TP comm, PP bubble, DP comm and optimizer always (a zero
// term gets zero width), CP comm, EP comm and PP p2p only when the job has them. The
// segments' seconds sum to `total` = Estimate::time.total() = Estimate::step_s.
struct TimeBar {
    double total = 0;
    float x0 = 0, x1 = 0;
    std::vector<TimeSegment> segments;
};
TimeBar time_bar(const Estimate& e, float x0, float width);
// Index into segments of the one at x, -1 = none (outside the bar).
int time_hit(const TimeBar& b, float x);
// "TP comm: 0.123 s, 4.5% of the step"
std::string time_segment_text(const TimeBar& b, int index);

// ---- Throughput ------------------------------------------------------------------------

// One figure of the speed row: a big value with a label above and a note below.
struct Figure {
    std::string label;  // "MFU"
    std::string value;  // "50.0%"
    std::string note;   // "attention FLOPs: full s² (PaLM)"
    std::string help;   // one paragraph shown on hover
    std::string range;  // the figure's interval, "80%: 38.3 – 49.1%"; "" without one (CPUs)
};
// MFU (with the FLOPs convention), HFU, tokens/s (total), tokens/s per GPU, TFLOP/s per
// GPU (model, with hardware and peak) and step time, in that order, each with its
// interval (Estimate::speed); empty when invalid.
std::vector<Figure> throughput_figures(const StudioState& s);
// One line under "Speed": where the intervals come from ("80% intervals from the estimate's
// error on 90 published hopper (H100, H200) runs; your own cluster may differ"), or why
// there are none; "" when the job is invalid.
std::string speed_interval_line(const StudioState& s);
// "full s² (PaLM)" or "causal s²/2 (Megatron)": how attention-score FLOPs are counted in MFU.
std::string flops_convention_text(AttentionFlops c);

// ---- Time and cost to train (cost) -----------------------------------------------------

// The whole run for training.tokens (else steps) at the estimate's step time, as `ptd
// estimate` prints it: one row per figure (budget, training steps, wall clock, GPU-hours,
// cost, energy, checkpoint, save / load, save every) with where it comes from; empty when
// the job is invalid.
std::vector<CostRow> training_rows(const StudioState& s);

// ---- Predicted memory on the rank grid -------------------------------------------------

// Predicted memory of `rank`: the most loaded rank of its pipeline stage. nullopt without
// an estimate or for a rank outside the layout.
std::optional<double> predicted_rank_bytes(const StudioState& s, int rank);
// That as a fraction of the usable memory (> 1 = runs out of memory).
std::optional<double> predicted_rank_fraction(const StudioState& s, int rank);
// "41.2 GiB" — short enough for a grid cell.
std::string predicted_rank_short(const StudioState& s, int rank);

// What the grid's heat ramp spans: `low_bytes` .. `full_bytes`. Normally 0 .. the usable
// memory, so colour reads as fullness and past it is OOM; but when even the largest stage
// uses under kHeatRelativeBelow of it, every cell would be the same cold blue, so the ramp
// spans the smallest .. the largest stage instead (`relative`) and shows which stages are
// heavier. (Stages that are all the same keep the absolute ramp.)
inline constexpr double kHeatRelativeBelow = 0.5;
struct HeatScale {
    double low_bytes = 0;   // the ramp's cold end
    double full_bytes = 0;  // its hot end; 0 = no estimate
    bool relative = false;  // low/full are the smallest/largest stage, not 0/the usable memory
};
HeatScale predicted_heat_scale(const StudioState& s);
// A rank's position on the ramp: (predicted bytes − low) / (full − low); > 1 = OOM.
std::optional<double> predicted_rank_heat(const StudioState& s, int rank);
// Heat ramp for a fraction of usable memory: blue (empty) → green → yellow → orange (full),
// each step lighter-to-warmer so the order reads at a glance; past 1 the OOM red.
Rgb heat_rgb(double fraction);
inline constexpr Rgb kHeatOom{235, 80, 80};
inline constexpr Rgb kHeatNoData{96, 100, 110};

}  // namespace ptd::studio
