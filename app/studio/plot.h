// plot.h — a line plot over steps drawn with ImDrawList (imgui 1.86 has no plotting and
// the studio uses no ImPlot): a frame with a title, y ticks with units, step ticks, solid
// or dashed series, a crosshair, and the mouse input a caller needs for zoom, pan and a
// readout, and a predicted level with its interval band. Every series is min/max-decimated to the pixel columns (plot_model.h) into
// buffers reused across frames, so 64 series × 10,000 points cost a few thousand vertices
// each; a series that comes with a min/max pyramid is decimated in O(pixels). The caller
// owns the x range (it is shared between plots); the y range is fitted to what is visible.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include <imgui.h>

#include "plot_model.h"

namespace ptd::studio::ui {

struct PlotSeries {
    std::span<const int> steps;     // ascending
    std::span<const float> values;  // same length; NaN = no value (a gap)
    ImU32 colour = IM_COL32_WHITE;
    bool dashed = false;            // predicted figures
    const MinMaxPyramid* pyramid = nullptr;  // of `values`, when the caller keeps one
    // A band, not a line: each step comes twice (its low value, then its high one) and the
    // area between the lows and the highs is filled in `colour` (give it some transparency).
    bool band = false;
};

struct PlotOptions {
    const char* title = "";
    const char* subtitle = nullptr;  // dim text after the title (e.g. the memory category)
    PlotUnit y_unit = PlotUnit::number;
    bool zero_based = false;          // y starts at 0 (rates, sizes)
    double x_lo = 0, x_hi = 1;        // the step range shown
    std::optional<double> crosshair;  // step of the shared crosshair (any plot's hover)
    float thickness = 1.0f;           // integral widths draw fastest (textured lines)
    const char* empty_text = "no data yet";
    // Changes whenever any series' data may have changed other than by growing (e.g. the
    // run's revision): decimated points are reused while it, the series' sizes and
    // addresses and the step range stay the same.
    uint64_t data_revision = 0;
    // A predicted level across the plot (the estimator's step time or tokens/s): a dashed
    // line, its interval a shaded band behind the series; the y range takes both in.
    std::optional<PlotLevel> level;
    ImU32 level_colour = IM_COL32(235, 238, 245, 200);
    // Steps marked by a vertical line across the plot (the Live tab: where a restart resumed).
    std::span<const double> markers;
    ImU32 marker_colour = IM_COL32(240, 180, 60, 220);
};

// What the mouse did over the plot this frame.
struct PlotInput {
    bool hovered = false;
    double mouse_step = 0;     // step under the mouse (when hovered)
    float wheel = 0;           // wheel notches over the plot (+ = zoom in)
    double drag_steps = 0;     // steps the view should move (dragging left = later steps)
    bool double_clicked = false;
    AxisMap x, y;              // the maps used (screen pixels)
};

PlotInput line_plot(const char* id, const PlotOptions& opt, std::span<const PlotSeries> series, ImVec2 size);

// A polyline drawn as dashes of `dash` pixels with `gap` pixels between them; the pattern
// runs on across vertices, so a line of many short segments is still evenly dashed.
void dashed_polyline(ImDrawList* dl, const ImVec2* pts, int count, ImU32 col, float thickness, float dash, float gap);

}  // namespace ptd::studio::ui
