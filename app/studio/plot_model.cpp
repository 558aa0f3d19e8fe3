// plot_model.cpp — axis ticks, value labels and min/max decimation for the studio's plots.
#include "plot_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace ptd::studio {
namespace {

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
Prefix prefix_for(double mag, PlotUnit unit) {
    if (unit == PlotUnit::bytes) {
        static const char* const names[] = {" B", " KiB", " MiB", " GiB", " TiB", " PiB"};
        int k = 0;
        double s = 1;
        while (mag >= s * 1024 && k < 5) {
            s *= 1024;
            ++k;
        }
        return {s, names[k]};
    }
    if (unit == PlotUnit::per_second) {
        static const char* const names[] = {"/s", "K/s", "M/s", "G/s", "T/s"};
        int k = 0;
        double s = 1;
        while (mag >= s * 1000 && k < 4) {
            s *= 1000;
            ++k;
        }
        return {s, names[k]};
    }
    if (unit == PlotUnit::fraction) return {0.01, "%"};
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

void decimate_minmax(std::span<const int> steps, std::span<const float> values, const AxisMap& x,
                     std::vector<PlotPoint>& out) {
    out.clear();
    const size_t n = std::min(steps.size(), values.size());
    if (n == 0 || !(x.hi > x.lo)) return;
    const int* st = steps.data();
    const float* v = values.data();
    // The points in range plus one on each side.
    size_t i0 = (size_t)(std::lower_bound(st, st + n, x.lo, [](int s, double d) { return (double)s < d; }) - st);
    size_t i1 = (size_t)(std::upper_bound(st, st + n, x.hi, [](double d, int s) { return d < (double)s; }) - st);
    if (i0 > 0) --i0;
    if (i1 < n) ++i1;

    const double scale = ((double)x.p1 - x.p0) / (x.hi - x.lo);
    const double offset = x.p0 - x.lo * scale;
    constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
    auto px = [&](size_t i) { return (float)(st[i] * scale + offset); };
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
    // Runs of equal values (a constant prediction) need only their ends: drop the points
    // between two neighbours of the same value.
    size_t w = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        if (w >= 1 && i + 1 < out.size() && out[i].y == out[w - 1].y && out[i + 1].y == out[i].y) continue;
        out[w++] = out[i];
    }
    out.resize(w);
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
