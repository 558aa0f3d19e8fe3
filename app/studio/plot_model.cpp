// plot_model.cpp — axis ticks, value labels, min/max pyramids and min/max decimation for
// the studio's plots.
#include "plot_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

namespace ptd::studio {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::string fmt(const char* f, double v, const char* suffix) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v, suffix);
    return buf;
}

// The prefix of a unit for values up to `mag`: the divisor and its name.
struct Prefix {
    double scale;
    const char* suffix;
};
// The largest of `names` (each `base` times the one before) that `mag` reaches.
template <size_t N>
Prefix power_prefix(double mag, double base, const char* const (&names)[N]) {
    size_t k = 0;
    double s = 1;
    while (mag >= s * base && k + 1 < N) {
        s *= base;
        ++k;
    }
    return {s, names[k]};
}
Prefix prefix_for(double mag, PlotUnit unit) {
    static const char* const bytes[] = {" B", " KiB", " MiB", " GiB", " TiB", " PiB"};
    static const char* const rates[] = {"/s", "K/s", "M/s", "G/s", "T/s"};
    if (unit == PlotUnit::bytes) return power_prefix(mag, 1024, bytes);
    if (unit == PlotUnit::per_second) return power_prefix(mag, 1000, rates);
    if (unit == PlotUnit::fraction) return {0.01, "%"};
    if (unit == PlotUnit::seconds) return mag >= 1 ? Prefix{1, " s"} : mag >= 1e-3 ? Prefix{1e-3, " ms"} : Prefix{1e-6, " µs"};
    return {1, ""};
}

// Digits after the point that tell ticks `step` apart (0 for integral steps).
int decimals_for(double step) {
    if (!(step > 0)) return 0;
    const double e = -std::floor(std::log10(step) + 1e-9);
    return (int)std::clamp(e, 0.0, 9.0);
}

}  // namespace

double nice_step(double range, int max_ticks) {
    if (!(range > 0) || !std::isfinite(range)) return 1;
    const int n = std::max(1, max_ticks);
    const double raw = range / n;
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (m * mag >= raw * (1 - 1e-9)) return m * mag;
    return 10 * mag;
}

std::vector<PlotTick> axis_ticks(double lo, double hi, int max_ticks, PlotUnit unit) {
    std::vector<PlotTick> out;
    if (!std::isfinite(lo) || !std::isfinite(hi) || hi < lo) return out;
    const Prefix p = prefix_for(std::max(std::fabs(lo), std::fabs(hi)), unit);
    double step = nice_step((hi - lo) / p.scale, max_ticks) * p.scale;
    if (unit == PlotUnit::step) step = std::max(1.0, step);
    if (!(step > 0)) return out;
    const int decimals = decimals_for(step / p.scale);
    const double first = std::ceil(lo / step - 1e-9) * step;
    for (int i = 0; i < 1000; ++i) {
        double v = first + i * step;
        if (v > hi + step * 1e-9) break;
        if (std::fabs(v) < step * 1e-9) {
            out.push_back({0, "0"});  // a bare zero: "0 MiB" or "-0" say nothing more
            continue;
        }
        char f[16];
        std::snprintf(f, sizeof f, "%%.%df%%s", decimals);
        out.push_back({v, fmt(f, v / p.scale, p.suffix)});
    }
    return out;
}

std::string format_value(double v, PlotUnit unit) {
    if (!std::isfinite(v)) return "-";
    switch (unit) {
        case PlotUnit::step: return fmt("%.0f%s", v, "");
        case PlotUnit::fraction: return fmt("%.1f%s", v * 100, "%");
        case PlotUnit::number: {
            const double a = std::fabs(v);
            return fmt(a >= 1000 ? "%.0f%s" : a >= 100 ? "%.1f%s" : a >= 1 ? "%.3f%s" : "%.4f%s", v, "");
        }
        case PlotUnit::bytes:
        case PlotUnit::seconds:
        case PlotUnit::per_second: {
            const Prefix p = prefix_for(std::fabs(v), unit);
            const double x = v / p.scale;
            if (p.scale == 1 && unit == PlotUnit::bytes) return fmt("%.0f%s", x, p.suffix);
            return fmt(std::fabs(x) >= 100 ? "%.0f%s" : std::fabs(x) >= 10 ? "%.1f%s" : "%.2f%s", x, p.suffix);
        }
    }
    return "-";
}

ValueRange padded_range(double lo, double hi, bool zero_based) {
    if (!(lo <= hi) || !std::isfinite(lo) || !std::isfinite(hi)) return {0, 1};
    if (zero_based) {
        lo = std::min(lo, 0.0);
        hi = std::max(hi, 0.0);
    }
    if (hi - lo <= std::max(std::fabs(hi), std::fabs(lo)) * 1e-9) {
        // Flat: centre it (a flat zero-based series sits at 2/3 of the height).
        const double a = std::max(std::fabs(hi), 1e-12);
        if (zero_based && lo >= 0) return {0, hi > 0 ? hi * 1.5 : 1};
        return {lo - a * 0.1, hi + a * 0.1};
    }
    const double m = (hi - lo) * 0.06;
    return {zero_based && lo >= 0 ? lo : lo - m, hi + m};
}

// ---- Min/max pyramid -----------------------------------------------------------------

void MinMaxPyramid::extend(std::span<const float> values) {
    if (values.size() < size_) truncate(values.size());  // cannot be a continuation: follow it
    constexpr size_t kBase = size_t{1} << kBaseLevel;
    for (size_t i = size_; i < values.size(); ++i) {
        if (!std::isfinite(values[i])) {
            if (!gaps_.empty() && gaps_.back().end == i) ++gaps_.back().end;
            else gaps_.push_back({i, i + 1});
        }
        if ((i + 1) % kBase != 0) continue;
        // Sample i completes a base bucket; that may complete one of every level above.
        MinMax m;
        for (size_t k = i + 1 - kBase; k <= i; ++k) {
            const float f = values[k];
            if (!std::isfinite(f)) continue;
            m.lo = std::min(m.lo, f);
            m.hi = std::max(m.hi, f);
        }
        for (size_t l = 0;; ++l) {
            if (l == levels_.size()) levels_.emplace_back();
            std::vector<MinMax>& level = levels_[l];
            level.push_back(m);
            if (level.size() % 2 != 0) break;
            const MinMax& left = level[level.size() - 2];
            m = {std::min(left.lo, m.lo), std::max(left.hi, m.hi)};
        }
    }
    size_ = values.size();
}

void MinMaxPyramid::truncate(size_t n) {
    if (n >= size_) return;
    size_ = n;
    // The buckets that lie wholly before n are unchanged; a bucket n cuts is incomplete now.
    for (size_t l = 0; l < levels_.size(); ++l) levels_[l].resize(n >> (l + kBaseLevel));
    while (!levels_.empty() && levels_.back().empty()) levels_.pop_back();
    while (!gaps_.empty() && gaps_.back().begin >= n) gaps_.pop_back();
    if (!gaps_.empty()) gaps_.back().end = std::min(gaps_.back().end, n);
}

void MinMaxPyramid::clear() {
    size_ = 0;
    levels_.clear();
    gaps_.clear();
}

std::span<const MinMax> MinMaxPyramid::buckets(int level) const {
    if (level < kBaseLevel || level >= level_end()) return {};
    return levels_[(size_t)(level - kBaseLevel)];
}

MinMaxPyramid::Gap MinMaxPyramid::next_gap(size_t i) const {
    const auto it = std::upper_bound(gaps_.begin(), gaps_.end(), i, [](size_t v, const Gap& g) { return v < g.end; });
    return it == gaps_.end() ? Gap{size_, size_} : *it;
}

// ---- Decimation --------------------------------------------------------------------------

namespace {

// The samples [first, last) whose steps lie in [x.lo, x.hi], plus one on each side.
std::pair<size_t, size_t> visible_range(const int* st, size_t n, const AxisMap& x) {
    size_t i0 = (size_t)(std::lower_bound(st, st + n, x.lo, [](int s, double d) { return (double)s < d; }) - st);
    size_t i1 = (size_t)(std::upper_bound(st, st + n, x.hi, [](double d, int s) { return d < (double)s; }) - st);
    if (i0 > 0) --i0;
    if (i1 < n) ++i1;
    return {i0, i1};
}

// Walks the finite runs of the visible range, adding whole buckets of the chosen level (or
// single samples) to the pixel column of their first sample, and calls emit(ColumnSpan)
// for each column in order. See pyramid_columns.
template <class Emit>
bool walk_pyramid_columns(std::span<const int> steps, std::span<const float> values, const MinMaxPyramid& p,
                          const AxisMap& x, Emit&& emit) {
    const size_t n = std::min(steps.size(), values.size());
    if (n == 0 || !(x.hi > x.lo) || p.size() != values.size()) return false;
    const int* st = steps.data();
    const float* v = values.data();
    const auto [i0, i1] = visible_range(st, n, x);
    const double cols = std::max(1.0, std::fabs((double)x.p1 - x.p0));
    const double count = (double)(i1 - i0);
    constexpr int kb = MinMaxPyramid::kBaseLevel;
    if (count <= cols * (double)(1 << kb)) return false;
    // The finest level with at most 2 buckets per column: columns then cost O(1) each, and
    // a bucket is under a pixel wide, so a column's edges move by less than a pixel.
    int k = kb;
    while (k + 1 < p.level_end() && count > 2 * cols * std::ldexp(1.0, k)) ++k;
    const std::span<const MinMax> level = p.buckets(k);
    const size_t width = size_t{1} << k;
    const double scale = ((double)x.p1 - x.p0) / (x.hi - x.lo);
    const double offset = x.p0 - x.lo * scale;
    const double steps_per_px = 1.0 / std::fabs(scale);

    ColumnSpan cur;
    double cur_col = 0;
    bool open = false;
    auto add = [&](size_t s, size_t e, MinMax m, size_t at) {
        const double col = std::floor(st[s] * scale + offset);
        if (open && cur.end == s && col == cur_col) {
            cur.end = e;
            if (m.lo < cur.range.lo) {  // strict: the first of equal extremes stays
                cur.range.lo = m.lo;
                cur.lo_at = at;
            }
            if (m.hi > cur.range.hi) {
                cur.range.hi = m.hi;
                cur.hi_at = at;
            }
            return;
        }
        if (open) emit(cur);
        cur = {s, e, m, at, at};
        cur_col = col;
        open = true;
    };
    auto add_samples = [&](size_t s, size_t e) {
        for (; s < e; ++s) add(s, s + 1, MinMax{v[s], v[s]}, s);
    };
    for (size_t i = i0; i < i1;) {
        const MinMaxPyramid::Gap gap = p.next_gap(i);
        if (gap.begin <= i) {  // skip the gap: the next span starts after it
            i = std::min(i1, gap.end);
            continue;
        }
        // The finite run [i, e): the part before the first bucket boundary and after the
        // last one sample by sample, whole buckets between them.
        const size_t e = std::min(gap.begin, i1);
        size_t s = std::min(e, (i + width - 1) / width * width);
        add_samples(i, s);
        for (; s + width <= e; s += width) {
            // A bucket wider than a pixel (steps far apart there) would put its extremes in
            // the wrong column: take its samples one by one.
            if ((double)st[s + width - 1] - st[s] > steps_per_px) add_samples(s, s + width);
            else add(s, s + width, level[s >> k], s + width / 2);
        }
        add_samples(s, e);
        i = e;
    }
    if (open) emit(cur);
    return true;
}

// Runs of equal values (a constant prediction) need only their ends: drop the points
// between two neighbours of the same value.
void drop_flat_interiors(std::vector<PlotPoint>& out) {
    size_t w = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        if (w >= 1 && i + 1 < out.size() && out[i].y == out[w - 1].y && out[i + 1].y == out[i].y) continue;
        out[w++] = out[i];
    }
    out.resize(w);
}

}  // namespace

bool pyramid_columns(std::span<const int> steps, std::span<const float> values, const MinMaxPyramid& pyramid,
                     const AxisMap& x, std::vector<ColumnSpan>& out) {
    out.clear();
    return walk_pyramid_columns(steps, values, pyramid, x, [&](const ColumnSpan& c) { out.push_back(c); });
}

void decimate_minmax(std::span<const int> steps, std::span<const float> values, const AxisMap& x,
                     std::vector<PlotPoint>& out, const MinMaxPyramid* pyramid) {
    out.clear();
    const size_t n = std::min(steps.size(), values.size());
    if (n == 0 || !(x.hi > x.lo)) return;
    const int* st = steps.data();
    const float* v = values.data();
    const double scale = ((double)x.p1 - x.p0) / (x.hi - x.lo);
    const double offset = x.p0 - x.lo * scale;
    auto px = [&](size_t i) { return (float)(st[i] * scale + offset); };

    if (pyramid) {
        size_t prev_end = 0;
        const bool used = walk_pyramid_columns(steps, values, *pyramid, x, [&](const ColumnSpan& c) {
            if (!out.empty() && c.begin != prev_end) out.push_back({px(prev_end), kNaN});  // a gap
            prev_end = c.end;
            const size_t last = c.end - 1;
            const float first_y = v[c.begin], last_y = v[last];
            out.push_back({px(c.begin), first_y});
            if (c.range.lo != c.range.hi) {
                // The extremes in step order (from one bucket: the one nearer the first
                // value first). One equal to the first or last value is drawn there already.
                std::pair<size_t, float> a{c.lo_at, c.range.lo}, b{c.hi_at, c.range.hi};
                if (b.first < a.first || (b.first == a.first && std::fabs(b.second - first_y) < std::fabs(a.second - first_y)))
                    std::swap(a, b);
                for (const auto& [at, y] : {a, b})
                    if (y != first_y && y != last_y) out.push_back({px(at), y});
            }
            if (last != c.begin) out.push_back({px(last), last_y});
        });
        if (used) {
            drop_flat_interiors(out);
            return;
        }
    }

    // The points in range plus one on each side.
    const auto [i0, i1] = visible_range(st, n, x);
    bool broken = false;  // the last thing emitted is a break
    for (size_t i = i0; i < i1;) {
        if (!std::isfinite(v[i])) {
            if (!broken && !out.empty()) out.push_back({px(i), kNaN});
            broken = true;
            ++i;
            continue;
        }
        // The column of point i ends before the first step at or past its right edge.
        // Steps are usually consecutive integers: guess the end, check it, else scan.
        const double col = std::floor(st[i] * scale + offset);
        const double edge = (col + 1 - offset) / scale;  // first step value in the next column
        size_t j = std::min(i1, i + (size_t)std::max(1.0, std::ceil(edge - st[i])));
        if (!((double)st[j - 1] < edge && (j == i1 || (double)st[j] >= edge))) {
            j = i + 1;
            while (j < i1 && (double)st[j] < edge) ++j;
        }
        // Lowest and highest of [i, j) without branches (noisy data defeats the branch
        // predictor), then where they are; a NaN or infinity in the column takes the slow
        // path, which ends the column there.
        float mn = v[i], mx = v[i];
        bool bad = false;
        for (size_t k = i + 1; k < j; ++k) {
            const float f = v[k];
            mn = f < mn ? f : mn;
            mx = f > mx ? f : mx;
            bad |= !(f - f == 0.0f);
        }
        size_t lo = i, hi = i, last = j - 1;
        if (!bad) {
            while (v[lo] != mn) ++lo;
            while (v[hi] != mx) ++hi;
        } else {
            mn = mx = v[i];
            last = i;
            for (size_t k = i + 1; k < j; ++k) {
                const float f = v[k];
                if (!std::isfinite(f)) {
                    j = k;  // the outer loop handles the NaN
                    break;
                }
                if (f < mn) {
                    mn = f;
                    lo = k;
                }
                if (f > mx) {
                    mx = f;
                    hi = k;
                }
                last = k;
            }
        }
        broken = false;
        out.push_back({px(i), v[i]});
        if (mn == mx) {  // flat column: its first and last point say it all
            if (last != i) out.push_back({px(last), v[last]});
        } else {
            const size_t a = std::min(lo, hi), b = std::max(lo, hi);
            if (a != i) out.push_back({px(a), v[a]});
            if (b != a && b != i) out.push_back({px(b), v[b]});
            if (last != b && last != i) out.push_back({px(last), v[last]});
        }
        i = j;
    }
    if (!out.empty() && std::isnan(out.back().y)) out.pop_back();
    drop_flat_interiors(out);
}


ValueRange points_y_range(std::span<const PlotPoint> pts) {
    float lo = std::numeric_limits<float>::infinity(), hi = -std::numeric_limits<float>::infinity();
    for (const PlotPoint& p : pts) {
        if (!std::isfinite(p.y)) continue;
        lo = std::min(lo, p.y);
        hi = std::max(hi, p.y);
    }
    if (lo > hi) return {1, 0};
    return {lo, hi};
}

}  // namespace ptd::studio
