// plot.cpp — the line-plot widget: one InvisibleButton for input, everything else on the
// window's ImDrawList. Decimation (plot_model.cpp) first, into per-series buffers kept
// between frames (and reused as is while the data and the step range stay the same: a
// finished or paused run costs no decimation at all; a growing one with pyramids costs
// O(pixels) per series); the y range is then fitted to the decimated points and they are
// mapped to pixels into one reused buffer.
#include "plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>
#include <vector>

namespace ptd::studio::ui {
namespace {

constexpr ImU32 kFrame = IM_COL32(26, 28, 34, 255);
constexpr ImU32 kGrid = IM_COL32(52, 56, 66, 255);
constexpr ImU32 kAxisText = IM_COL32(150, 156, 168, 255);
constexpr ImU32 kTitle = IM_COL32(222, 226, 232, 255);
constexpr ImU32 kCrosshair = IM_COL32(235, 238, 245, 150);

// A series' decimated points and what they were decimated from. Kept per plot (by its
// ImGui id) and series index, on the UI thread only.
struct CachedSeries {
    const int* steps = nullptr;
    const float* values = nullptr;
    size_t size = 0;
    uint64_t revision = 0;
    AxisMap x;
    bool valid = false;
    std::vector<PlotPoint> points;
    ValueRange y{1, 0};
};
std::unordered_map<ImGuiID, std::vector<CachedSeries>> g_cache;
std::vector<ImVec2> g_pixels;  // one run of a series in pixels, reused

const CachedSeries& decimated(ImGuiID plot, size_t k, const PlotSeries& s, const AxisMap& x, uint64_t revision) {
    CachedSeries& c = g_cache[plot][k];  // line_plot sized it
    const bool same = c.valid && c.steps == s.steps.data() && c.values == s.values.data() &&
                      c.size == std::min(s.steps.size(), s.values.size()) && c.revision == revision && c.x.lo == x.lo &&
                      c.x.hi == x.hi && c.x.p0 == x.p0 && c.x.p1 == x.p1;
    if (!same) {
        decimate_minmax(s.steps, s.values, x, c.points, s.pyramid);
        c.y = points_y_range(c.points);
        c.steps = s.steps.data();
        c.values = s.values.data();
        c.size = std::min(s.steps.size(), s.values.size());
        c.revision = revision;
        c.x = x;
        c.valid = true;
    }
    return c;
}

}  // namespace

void dashed_polyline(ImDrawList* dl, const ImVec2* pts, int count, ImU32 col, float thickness, float dash, float gap) {
    if (count < 2 || dash <= 0) return;
    const float period = dash + std::max(0.0f, gap);
    float pos = 0;  // distance into the current dash + gap period, carried across vertices
    for (int i = 1; i < count; ++i) {
        const ImVec2 a = pts[i - 1], b = pts[i];
        const float dx = b.x - a.x, dy = b.y - a.y;
        const float len = std::sqrt(dx * dx + dy * dy);
        if (!(len > 0)) continue;
        const float ux = dx / len, uy = dy / len;
        for (float t = 0; t < len;) {
            const bool in_dash = pos < dash;
            const float end = std::min(len, t + (in_dash ? dash - pos : period - pos));
            if (in_dash) dl->AddLine(ImVec2(a.x + ux * t, a.y + uy * t), ImVec2(a.x + ux * end, a.y + uy * end), col, thickness);
            pos += end - t;
            if (pos >= period - 1e-4f) pos = 0;
            t = end;
        }
    }
}

// Bars per pixel column for a dense run of points (x ascending, no NaN), as above.
static void column_bars(ImDrawList* dl, const ImVec2* pts, int count, ImU32 col) {
    dl->PrimReserve(count * 6, count * 4);  // at most one bar per point
    int bars = 0;
    float prev_last = pts[0].y;
    for (int i = 0; i < count;) {
        const float cx = std::floor(pts[i].x);
        float lo = std::min(prev_last, pts[i].y), hi = std::max(prev_last, pts[i].y);
        int j = i + 1;
        for (; j < count && pts[j].x < cx + 1; ++j) {
            lo = std::min(lo, pts[j].y);
            hi = std::max(hi, pts[j].y);
        }
        prev_last = pts[j - 1].y;
        // Half a pixel above and below, as the 1 px line would have.
        dl->PrimRect(ImVec2(cx, std::floor(lo - 0.5f)), ImVec2(cx + 1, std::floor(hi + 0.5f) + 1), col);
        ++bars;
        i = j;
    }
    dl->PrimUnreserve((count - bars) * 6, (count - bars) * 4);
}

PlotInput line_plot(const char* id, const PlotOptions& opt, std::span<const PlotSeries> series, ImVec2 size) {
    PlotInput in;
    ImGuiIO& io = ImGui::GetIO();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 p0 = ImGui::GetCursorScreenPos();
    size.x = std::max(size.x, 120.0f);
    size.y = std::max(size.y, 90.0f);
    ImGui::InvisibleButton(id, size, ImGuiButtonFlags_MouseButtonLeft);
    const bool hovered = ImGui::IsItemHovered();
    const ImVec2 p1(p0.x + size.x, p0.y + size.y);
    const float fh = ImGui::GetFontSize();

    // Areas: title on top, y labels on the left, step labels below.
    const float left = fh * 4.6f, top = fh + 10, bottom = fh + 8, right = 12;
    const ImVec2 a(std::floor(p0.x + left), std::floor(p0.y + top));
    const ImVec2 b(std::floor(p1.x - right), std::floor(p1.y - bottom));
    dl->AddRectFilled(p0, p1, kFrame, 4.0f);

    AxisMap x{opt.x_lo, opt.x_hi > opt.x_lo ? opt.x_hi : opt.x_lo + 1, a.x, b.x};
    in.x = x;

    // Decimate every series (or take last frame's points).
    const ImGuiID plot_id = ImGui::GetID(id);
    static std::vector<const CachedSeries*> dec;
    dec.clear();
    if (std::vector<CachedSeries>& all = g_cache[plot_id]; all.size() < series.size()) all.resize(series.size());
    ValueRange yr{1, 0};
    bool has_data = false;
    for (size_t k = 0; k < series.size(); ++k) {
        const CachedSeries& c = decimated(plot_id, k, series[k], x, opt.data_revision);
        dec.push_back(&c);
        if (c.y.lo > c.y.hi) continue;
        yr.lo = has_data ? std::min(yr.lo, c.y.lo) : c.y.lo;
        yr.hi = has_data ? std::max(yr.hi, c.y.hi) : c.y.hi;
        has_data = true;
    }
    if (opt.level) {  // the prediction and its band stay in view beside what was measured
        const PlotLevel& l = *opt.level;
        const double lo = l.has_band ? std::min(l.lo, l.value) : l.value, hi = l.has_band ? std::max(l.hi, l.value) : l.value;
        if (has_data) yr.lo = std::min(yr.lo, lo), yr.hi = std::max(yr.hi, hi);
        else if (std::isfinite(lo) && std::isfinite(hi)) yr.lo = lo, yr.hi = hi;
    }
    const ValueRange y_range = padded_range(yr.lo, yr.hi, opt.zero_based);
    AxisMap y{y_range.lo, y_range.hi, b.y, a.y};
    in.y = y;

    // Grid and ticks.
    const int y_ticks = std::clamp((int)((b.y - a.y) / (fh * 2.2f)), 2, 8);
    for (const PlotTick& t : axis_ticks(y.lo, y.hi, y_ticks, opt.y_unit)) {
        const float py = std::floor(y.to_px(t.value)) + 0.5f;
        if (py < a.y - 0.5f || py > b.y + 0.5f) continue;
        dl->AddLine(ImVec2(a.x, py), ImVec2(b.x, py), kGrid);
        const ImVec2 ts = ImGui::CalcTextSize(t.label.c_str());
        dl->AddText(ImVec2(a.x - ts.x - 6, py - fh * 0.5f), kAxisText, t.label.c_str());
    }
    const float step_label_w = ImGui::CalcTextSize("000000").x + 16;
    const int x_ticks = std::clamp((int)((b.x - a.x) / step_label_w), 2, 12);
    for (const PlotTick& t : axis_ticks(x.lo, x.hi, x_ticks, PlotUnit::step)) {
        const float px = std::floor(x.to_px(t.value)) + 0.5f;
        if (px < a.x - 0.5f || px > b.x + 0.5f) continue;
        dl->AddLine(ImVec2(px, a.y), ImVec2(px, b.y), kGrid);
        const ImVec2 ts = ImGui::CalcTextSize(t.label.c_str());
        const float tx = std::clamp(px - ts.x * 0.5f, a.x - left * 0.5f, p1.x - ts.x - 2);
        dl->AddText(ImVec2(tx, b.y + 4), kAxisText, t.label.c_str());
    }
    dl->AddRect(ImVec2(a.x - 0.5f, a.y - 0.5f), ImVec2(b.x + 0.5f, b.y + 0.5f), IM_COL32(70, 76, 90, 255));

    // Title, and "step" under the axis. A long subtitle is cut at the plot's edge, not drawn
    // over its neighbour.
    dl->PushClipRect(p0, ImVec2(p1.x - 4, p0.y + fh + 8), true);
    dl->AddText(ImVec2(p0.x + 8, p0.y + 4), kTitle, opt.title);
    if (opt.subtitle) {
        const float tw = ImGui::CalcTextSize(opt.title).x;
        dl->AddText(ImVec2(p0.x + 8 + tw + 8, p0.y + 4), kAxisText, opt.subtitle);
    }
    dl->PopClipRect();
    dl->AddText(ImVec2(p0.x + 8, b.y + 4), kAxisText, "step");

    // Series, clipped to the data area (the neighbours outside the range reach the frame).
    dl->PushClipRect(ImVec2(a.x, a.y - 1), ImVec2(b.x + 1, b.y + 1), true);
    // The predicted level under them: its interval shaded, the value dashed.
    if (opt.level && std::isfinite(opt.level->value)) {
        const PlotLevel& l = *opt.level;
        if (l.has_band)
            dl->AddRectFilled(ImVec2(a.x, y.to_px(l.hi)), ImVec2(b.x, y.to_px(l.lo)), (opt.level_colour & 0x00FFFFFFu) | 0x38000000u);
        const float py = std::floor(y.to_px(l.value)) + 0.5f;
        const ImVec2 line[2] = {ImVec2(a.x, py), ImVec2(b.x, py)};
        dashed_polyline(dl, line, 2, opt.level_colour, 1.5f, 8, 5);
    }
    for (size_t k = 0; k < series.size(); ++k) {
        const PlotSeries& s = series[k];
        const std::vector<PlotPoint>& pts = dec[k]->points;
        if (s.band) {  // per pixel column its lowest and highest value, joined column to column
            float col_x = 0, col_lo = 0, col_hi = 0;
            bool have = false, have_prev = false;
            float px = 0, plo = 0, phi = 0;
            auto flush = [&] {
                if (!have) return;
                if (have_prev) dl->AddQuadFilled(ImVec2(px, plo), ImVec2(col_x + 1, col_lo), ImVec2(col_x + 1, col_hi), ImVec2(px, phi), s.colour);
                else dl->AddRectFilled(ImVec2(col_x, col_hi), ImVec2(col_x + 1, col_lo), s.colour);
                px = col_x + 1, plo = col_lo, phi = col_hi, have_prev = true, have = false;
            };
            for (const PlotPoint& p : pts) {
                if (std::isnan(p.y)) {
                    flush();
                    have_prev = false;
                    continue;
                }
                const float cx = std::floor(p.x), py = y.to_px(p.y);
                if (have && cx != col_x) flush();
                if (!have) col_x = cx, col_lo = col_hi = py, have = true;
                col_lo = std::max(col_lo, py), col_hi = std::min(col_hi, py);  // screen y grows down
            }
            flush();
            continue;
        }
        g_pixels.clear();
        // Dense runs (≥ 2 points per pixel column on average) are drawn as one vertical
        // bar per column, from its lowest to its highest point and joined to the previous
        // column's last point: the pixels an antialiased 1 px polyline would cover, for a
        // third of the work (4 vertices and no normals per column instead of 8 and 4).
        const bool dense = !s.dashed && opt.thickness <= 1.0f && pts.size() >= 2 * (size_t)std::max(1.0f, b.x - a.x);
        auto draw_run = [&] {
            if (dense && g_pixels.size() >= 2) {
                column_bars(dl, g_pixels.data(), (int)g_pixels.size(), s.colour);
            } else if (g_pixels.size() >= 2) {
                if (s.dashed) dashed_polyline(dl, g_pixels.data(), (int)g_pixels.size(), s.colour, opt.thickness + 0.5f, 6, 4);
                else dl->AddPolyline(g_pixels.data(), (int)g_pixels.size(), s.colour, 0, opt.thickness);
            } else if (g_pixels.size() == 1) {
                dl->AddCircleFilled(g_pixels[0], opt.thickness + 1.5f, s.colour, 8);
            }
            g_pixels.clear();
        };
        for (const PlotPoint& p : pts) {
            if (std::isnan(p.y)) {
                draw_run();
                continue;
            }
            g_pixels.emplace_back(p.x, y.to_px(p.y));
        }
        draw_run();
    }
    dl->PopClipRect();

    if (!has_data) {
        const ImVec2 ts = ImGui::CalcTextSize(opt.empty_text);
        dl->AddText(ImVec2((a.x + b.x - ts.x) * 0.5f, (a.y + b.y - fh) * 0.5f), kAxisText, opt.empty_text);
    }

    for (double m : opt.markers)
        if (m >= x.lo && m <= x.hi) {
            const float px = std::floor(x.to_px(m)) + 0.5f;
            dl->AddLine(ImVec2(px, a.y), ImVec2(px, b.y), opt.marker_colour, 1.0f);
        }
    // Crosshair and the series' points at its step.
    if (opt.crosshair && *opt.crosshair >= x.lo && *opt.crosshair <= x.hi) {
        const float px = std::floor(x.to_px(*opt.crosshair)) + 0.5f;
        dl->AddLine(ImVec2(px, a.y), ImVec2(px, b.y), kCrosshair);
        for (const PlotSeries& s : series) {
            const size_t n = std::min(s.steps.size(), s.values.size());
            if (n == 0 || s.band) continue;
            const auto it = std::lower_bound(s.steps.begin(), s.steps.begin() + (long)n, *opt.crosshair,
                                             [](int st, double v) { return (double)st < v; });
            size_t i = (size_t)(it - s.steps.begin());
            if (i == n || (i > 0 && *opt.crosshair - s.steps[i - 1] <= s.steps[i] - *opt.crosshair)) --i;
            if (!std::isfinite(s.values[i])) continue;
            const ImVec2 c(x.to_px(s.steps[i]), y.to_px(s.values[i]));
            if (c.y < a.y - 2 || c.y > b.y + 2) continue;
            dl->AddCircleFilled(c, 3.0f, s.colour, 10);
            dl->AddCircle(c, 3.5f, IM_COL32(20, 22, 27, 255), 10, 1.0f);
        }
    }

    // Input: the data area only.
    const ImVec2 m = io.MousePos;
    in.hovered = hovered && m.x >= a.x && m.x <= b.x && m.y >= a.y && m.y <= b.y;
    if (in.hovered) {
        in.mouse_step = x.to_data(m.x);
        in.wheel = io.MouseWheel;
        in.double_clicked = ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left);
    }
    if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2.0f) && io.MouseDelta.x != 0)
        in.drag_steps = -(double)io.MouseDelta.x * (x.hi - x.lo) / std::max(1.0f, b.x - a.x);
    return in;
}

}  // namespace ptd::studio::ui
