// plot_model.h — the geometry of the studio's line plots without ImGui: mapping data to
// pixels, "nice" axis ticks with units, and min/max decimation per pixel column, so a plot
// of 64 series × 10,000 points draws a few thousand vertices per series and its spikes
// still show. plot.cpp draws with these; tests/test_studio_live.cpp checks them.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace ptd::studio {

// A linear map between data values [lo, hi] and pixels [p0, p1]. For a y axis p0 is the
// bottom pixel and p1 the top one (p1 < p0 on screen).
struct AxisMap {
    double lo = 0, hi = 1;
    float p0 = 0, p1 = 1;
    float to_px(double v) const { return (float)(p0 + (v - lo) * ((double)p1 - p0) / (hi - lo)); }
    double to_data(float p) const { return lo + ((double)p - p0) * (hi - lo) / ((double)p1 - p0); }
};

// How an axis labels its values.
enum class PlotUnit {
    number,      // 2.5, 0.25
    step,        // integer steps: 0, 500, 1000
    bytes,       // binary prefixes: 512 B, 1.5 MiB, 24 GiB (ticks at 1-2-5 of the prefix)
    per_second,  // SI prefixes: 950/s, 12K/s, 1.5M/s
    fraction,    // shown as percent: 0.42 → 42%
};

struct PlotTick {
    double value = 0;  // in data units
    std::string label;
};

// The 1-2-5 step (1, 2 or 5 × 10^k) that puts at most `max_ticks` ticks on a range this
// wide (at least 1 tick). range ≤ 0 or non-finite → 1.
double nice_step(double range, int max_ticks);

// Ticks at the multiples of a nice step that lie in [lo, hi], with labels in `unit`. Bytes
// and rates choose their prefix from the larger end of the range and take the nice step in
// that prefix (so GiB ticks are 0, 2, 4 GiB, not 2.15e9). Steps never tick between integers.
std::vector<PlotTick> axis_ticks(double lo, double hi, int max_ticks, PlotUnit unit);

// A value for the hover readout: more digits than a tick label ("2.3456", "1.52 GiB",
// "12.3K/s", "41.2%"; steps as integers). Non-finite → "-".
std::string format_value(double v, PlotUnit unit);

// A y range for values in [lo, hi]: `zero_based` ranges start at 0 (rates, sizes); every
// range gets a margin of 6 % so lines do not touch the frame, and a flat series one around
// its value. lo > hi (no data) → [0, 1].
struct ValueRange {
    double lo = 0, hi = 1;
};
ValueRange padded_range(double lo, double hi, bool zero_based);

// A decimated point: x in pixels, y still in data units (the y range is chosen from the
// decimated points, which is far cheaper than from the raw ones). y = NaN breaks the line.
struct PlotPoint {
    float x, y;
};

// Min/max decimation of one series (steps ascending, values of the same length) for the
// step range of `x` (x.p0 = left pixel, x.p1 = right): the points are bucketed by pixel
// column, and each column keeps its first, lowest, highest and last point in step order
// (each once, so 1..4 points; a flat column only its first and last), which keeps every
// spike and joins neighbouring columns at the right ends. The nearest point outside the
// range on either side is kept too, so the line runs to the frame. Non-finite values break
// the line (one NaN point). Points between two neighbours of the same value are dropped (a
// constant prediction becomes one segment). `out` is cleared and reused: no allocation
// once it has grown.
void decimate_minmax(std::span<const int> steps, std::span<const float> values, const AxisMap& x,
                     std::vector<PlotPoint>& out);

// Lowest and highest finite y of decimated points (lo > hi when there is none).
ValueRange points_y_range(std::span<const PlotPoint> pts);

}  // namespace ptd::studio
