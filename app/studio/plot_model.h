// plot_model.h — the geometry of the studio's line plots without ImGui: mapping data to
// pixels, "nice" axis ticks with units, and min/max decimation per pixel column, so a plot
// of 64 series × 10,000 points draws a few thousand vertices per series and its spikes
// still show; with a min/max pyramid kept beside a series, that decimation costs
// O(pixels) instead of O(points). plot.cpp draws with these; tests/test_studio_live.cpp
// checks them.
#pragma once

#include <cstddef>
#include <limits>
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
    seconds,     // durations: 850 µs, 66 ms, 1.5 s (the prefix from the larger end of the range)
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

// Lowest and highest finite value of some samples; lo > hi when none is finite.
struct MinMax {
    float lo = std::numeric_limits<float>::infinity();
    float hi = -std::numeric_limits<float>::infinity();
    bool operator==(const MinMax&) const = default;
};

// A min/max pyramid of one series' values: level k holds the MinMax of every complete
// bucket of 2^k consecutive samples (bucket b = samples [b·2^k, (b+1)·2^k)), so a range of
// a million samples is summarised by a few buckets of the right level; and the runs of
// non-finite samples (the line's gaps), which the buckets skip. A bucket is written once,
// when its last sample arrives, so appending costs amortised O(1) per sample and a partial
// bucket at the end never goes stale; truncating (a resumed run replacing its tail) drops
// the buckets past the new end. Levels below kBaseLevel are not kept — they would take
// more memory than the values — and columns that narrow are scanned instead. The owner
// keeps it in step with its values (extend after appending, truncate after cutting);
// decimate_minmax ignores a pyramid whose size() differs from the series'.
class MinMaxPyramid {
public:
    static constexpr int kBaseLevel = 3;  // buckets of 8 samples: 2 bytes per sample in all

    // A run of non-finite samples [begin, end).
    struct Gap {
        size_t begin = 0, end = 0;
        bool operator==(const Gap&) const = default;
    };

    size_t size() const { return size_; }
    // Take values[size(), values.size()): values[0, size()) must be what it has seen (a
    // shorter span is taken as the series cut to its length).
    void extend(std::span<const float> values);
    // Forget samples n and later (n ≥ size(): nothing happens).
    void truncate(size_t n);
    void clear();
    void assign(std::span<const float> values) {
        clear();
        extend(values);
    }
    // Highest level with at least one bucket + 1 (kBaseLevel when there is none).
    int level_end() const { return kBaseLevel + (int)levels_.size(); }
    // The complete buckets of `level` (kBaseLevel ≤ level < level_end()) in order.
    std::span<const MinMax> buckets(int level) const;
    // The first gap that ends after sample i ({size(), size()} when none): i lies in it
    // when its begin ≤ i.
    Gap next_gap(size_t i) const;

    bool operator==(const MinMaxPyramid&) const = default;

private:
    size_t size_ = 0;
    std::vector<std::vector<MinMax>> levels_;  // levels_[k - kBaseLevel]
    std::vector<Gap> gaps_;                    // ascending, not touching
};

// One pixel column of a decimation from a pyramid: the samples [begin, end), all finite and
// consecutive, whose pixel column is that of their first sample. The column's range is
// made of whole buckets of one level (except next to gaps and at the ends of the visible
// range, or where a bucket would be wider than a pixel: those samples go one by one), so
// its edges are those of the pixel columns rounded to a bucket, which is under a pixel.
struct ColumnSpan {
    size_t begin = 0, end = 0;
    MinMax range;                 // exactly the lowest and highest of values[begin, end)
    size_t lo_at = 0, hi_at = 0;  // where they are, to a bucket: the middle of the bucket
                                  // holding them (the sample itself outside buckets)
};

// The spans of the visible range of a series (the samples whose steps lie in [x.lo, x.hi]
// plus one on each side, as decimate_minmax) from `pyramid`, in O(pixels + gaps): the
// level is the finest whose buckets number at most 2 per pixel column. Returns false (and
// no spans) when there are at most 2^kBaseLevel samples per column — scanning them is as
// cheap — or the pyramid's size() is not the series'. `out` is cleared and reused.
bool pyramid_columns(std::span<const int> steps, std::span<const float> values, const MinMaxPyramid& pyramid,
                     const AxisMap& x, std::vector<ColumnSpan>& out);

// Min/max decimation of one series (steps ascending, values of the same length) for the
// step range of `x` (x.p0 = left pixel, x.p1 = right): the points are bucketed by pixel
// column, and each column keeps its first, lowest, highest and last point in step order
// (each once, so 1..4 points; a flat column only its first and last), which keeps every
// spike and joins neighbouring columns at the right ends. The nearest point outside the
// range on either side is kept too, so the line runs to the frame. Non-finite values break
// the line (one NaN point). Points between two neighbours of the same value are dropped (a
// constant prediction becomes one segment). `out` is cleared and reused: no allocation
// once it has grown.
// With a `pyramid` of the values and more than 2^kBaseLevel samples per column the columns
// are pyramid_columns' spans and the work is O(pixels), not O(points): each keeps its
// exact first and last point and its exact extremes (an extreme equal to the first or last
// value is not repeated), placed to within a bucket (under a pixel).
void decimate_minmax(std::span<const int> steps, std::span<const float> values, const AxisMap& x,
                     std::vector<PlotPoint>& out, const MinMaxPyramid* pyramid = nullptr);

// A predicted constant drawn across a plot (the estimator's step time or tokens/s): a
// dashed level, with its interval shaded behind it when the prediction has one.
struct PlotLevel {
    double value = 0;
    bool has_band = false;  // false: no interval (none is drawn or made up)
    double lo = 0, hi = 0;
};

// Lowest and highest finite y of decimated points (lo > hi when there is none).
ValueRange points_y_range(std::span<const PlotPoint> pts);

}  // namespace ptd::studio
