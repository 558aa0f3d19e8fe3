// panel_layout.cpp — the rank layout: nodes as rows of GPU cells on one ImDrawList
// canvas (a single InvisibleButton; hit-testing is arithmetic in the view-model), only the
// visible cells drawn, so it stays fast at any world size. Hovering outlines the rank's
// TP (solid), PP (dashed) and DP (dotted) groups, and where the job has them its CP (long
// dashes), EP (dash-dot in green) and folded expert TP (thin solid) groups; clicking pins it. Cells are coloured by
// group (the terminal's palette) or by predicted memory (a heat ramp, memory_model.h). A
// straggler of the Live run (layout_model.cpp) gets a thick outline and its node's label
// the same colour.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "run_view.h"
#include "ui.h"

namespace ptd::studio::ui {
namespace {

ImU32 blend(ImU32 a, ImU32 b, float t) {
    auto ch = [&](int shift) {
        const float x = (float)((a >> shift) & 0xFF), y = (float)((b >> shift) & 0xFF);
        return (ImU32)std::lround(x + (y - x) * t) << shift;
    };
    return ch(IM_COL32_R_SHIFT) | ch(IM_COL32_G_SHIFT) | ch(IM_COL32_B_SHIFT) | (0xFFu << IM_COL32_A_SHIFT);
}


void toolbar(StudioState& s) {
    text_wrapped_coloured(ImGui::GetColorU32(ImGuiCol_Text), layout_headline(s));
    ImGui::AlignTextToFramePadding();
    ImGui::TextDisabled("Colour by");
    for (ColourBy c : {ColourBy::tp, ColourBy::cp, ColourBy::ep, ColourBy::expert_tp, ColourBy::pp, ColourBy::dp,
                       ColourBy::predicted_memory, ColourBy::live_memory}) {
        // CP, EP and expert TP only where the job has them (a degree of 1 colours every rank alike).
        if (c == ColourBy::cp && s.layout->degree[DIM_CP] == 1 && s.view.colour_by != c) continue;
        if (c == ColourBy::ep && s.layout->req.ep == 1 && s.view.colour_by != c) continue;
        if (c == ColourBy::expert_tp && folded_expert_tp(s) == 0 && s.view.colour_by != c) continue;
        flow_same_line(ImGui::CalcTextSize(colour_by_label(c)).x + ImGui::GetFrameHeight() + 8, 8);
        // Live memory needs a run of this job in the Live panel (launched or opened).
        const bool off = c == ColourBy::live_memory && !live_matches_layout(s);
        ImGui::BeginDisabled(off);
        if (ImGui::RadioButton(colour_by_label(c), s.view.colour_by == c)) set_colour_by(s, c);
        ImGui::EndDisabled();
        if (off && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
            ImGui::SetTooltip("Launch this job, or open a run of it in the Live tab, to see each rank's measured memory");
    }
    const float zoom_w = ImGui::CalcTextSize("Zoom  -   +  Fit  000 px cells").x + 8 * ImGui::GetStyle().FramePadding.x;
    flow_same_line(zoom_w, 28);
    ImGui::AlignTextToFramePadding();
    ImGui::TextDisabled("Zoom");
    const GridGeometry g = grid_geometry(s);
    const float cx = s.view.canvas_w * 0.5f, cy = g.header_h + 4;
    ImGui::SameLine();
    if (ImGui::Button(" - ")) layout_zoom(s, cx, cy, -1);
    ImGui::SameLine();
    if (ImGui::Button(" + ")) layout_zoom(s, cx, cy, +1);
    ImGui::SameLine();
    if (ImGui::Button("Fit")) layout_fit(s);
    ImGui::SameLine();
    ImGui::TextDisabled("%.0f px cells", g.cell_w);

    for (const std::string& w : layout_warnings(s)) {
        const float h = ImGui::GetTextLineHeight();
        const ImVec2 p = ImGui::GetCursorScreenPos();
        ImGui::Dummy(ImVec2(h, h));
        corner_marker(ImGui::GetWindowDrawList(), p, ImVec2(p.x + h, p.y + h), h, colour::spans_nodes);
        ImGui::SameLine();
        text_wrapped_coloured(colour::warning, "warning: " + w);
    }
}

// Cell label text for rank r: line 1 the rank, line 2 its coordinates.
void cell_text(ImDrawList* dl, const StudioState& s, const RankLayout& L, int r, ImVec2 a, ImVec2 b, int lines,
               ImU32 col) {
    char l1[16], l2[48];
    std::snprintf(l1, sizeof l1, "%d", r);
    const RankPlace& p = L.ranks[r];
    if (s.view.colour_by == ColourBy::predicted_memory)
        std::snprintf(l2, sizeof l2, "%s", predicted_rank_short(s, r).c_str());
    else if (s.view.colour_by == ColourBy::live_memory)
        std::snprintf(l2, sizeof l2, "%s", live_rank_memory_bytes(s, r) ? human_bytes(*live_rank_memory_bytes(s, r)).c_str() : "-");
    else if (L.degree[DIM_CP] > 1)
        std::snprintf(l2, sizeof l2, "t%d c%d d%d p%d", p.coord[DIM_TP], p.coord[DIM_CP], p.coord[DIM_DP], p.coord[DIM_PP]);
    else
        std::snprintf(l2, sizeof l2, "t%d d%d p%d", p.coord[DIM_TP], p.coord[DIM_DP], p.coord[DIM_PP]);
    const float fh = ImGui::GetFontSize();
    const float cx = (a.x + b.x) * 0.5f, cy = (a.y + b.y) * 0.5f;
    const ImVec2 s1 = ImGui::CalcTextSize(l1);
    if (lines >= 2) {
        const ImVec2 s2 = ImGui::CalcTextSize(l2);
        if (s2.x <= b.x - a.x - 4) {
            dl->AddText(ImVec2(std::floor(cx - s1.x * 0.5f), std::floor(cy - fh - 1)), col, l1);
            dl->AddText(ImVec2(std::floor(cx - s2.x * 0.5f), std::floor(cy + 1)), blend(col, IM_COL32(90, 90, 90, 255), 0.45f), l2);
            return;
        }
    }
    if (s1.x <= b.x - a.x - 2) dl->AddText(ImVec2(std::floor(cx - s1.x * 0.5f), std::floor(cy - fh * 0.5f)), col, l1);
}

void canvas(StudioState& s, ImVec2 size) {
    ImGuiIO& io = ImGui::GetIO();
    const ImVec2 p0 = ImGui::GetCursorScreenPos();
    ImGui::InvisibleButton("##grid", size, ImGuiButtonFlags_MouseButtonLeft | ImGuiButtonFlags_MouseButtonMiddle);
    layout_resize(s, size.x, size.y);
    const bool hovered = ImGui::IsItemHovered();
    const ImVec2 m(io.MousePos.x - p0.x, io.MousePos.y - p0.y);
    if (ImGui::IsItemActive() && (ImGui::IsMouseDragging(ImGuiMouseButton_Left, 3.0f) ||
                                  ImGui::IsMouseDragging(ImGuiMouseButton_Middle, 3.0f)))
        layout_pan(s, io.MouseDelta.x, io.MouseDelta.y);
    if (ImGui::IsItemDeactivated() && io.MouseReleased[ImGuiMouseButton_Left] &&
        io.MouseDragMaxDistanceSqr[ImGuiMouseButton_Left] < 9.0f)
        layout_click(s, m.x, m.y);
    if (hovered && io.MouseWheel != 0) layout_zoom(s, m.x, m.y, io.MouseWheel);
    if (hovered && io.MouseWheelH != 0) layout_pan(s, io.MouseWheelH * 40.0f, 0);
    layout_hover(s, hovered ? m.x : -1.0f, hovered ? m.y : -1.0f);

    const RankLayout& L = *s.layout;
    const GridGeometry g = grid_geometry(s);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 p1(p0.x + size.x, p0.y + size.y);
    dl->AddRectFilled(p0, p1, colour::canvas, 4.0f);

    // Visible cells only.
    const int row0 = std::max(0, (int)std::floor((g.header_h - g.origin_y) / g.pitch_y()));
    const int row1 = std::min(g.rows - 1, (int)std::floor((size.y - g.origin_y) / g.pitch_y()));
    const int col0 = std::max(0, (int)std::floor((g.label_w - g.origin_x) / g.pitch_x()));
    const int col1 = std::min(g.cols - 1, (int)std::floor((size.x - g.origin_x) / g.pitch_x()));

    const int active = active_rank(s);
    const GroupSet& tp = L.groups[DIM_TP];
    const GroupSet& pp = L.groups[DIM_PP];
    const GroupSet& dp = L.groups[DIM_DP];
    const GroupSet& cp = L.groups[DIM_CP];
    const GroupSet& ep = L.ep_groups;
    const int tp_g = active >= 0 ? tp.group_of[active] : -1;
    const int pp_g = active >= 0 ? pp.group_of[active] : -1;
    const int dp_g = active >= 0 ? dp.group_of[active] : -1;
    // CP, EP and folded expert TP groups are outlined only where the job has them.
    const int cp_g = active >= 0 && cp.size > 1 ? cp.group_of[active] : -1;
    const int ep_g = active >= 0 && ep.size > 1 ? ep.group_of[active] : -1;
    const int etp = folded_expert_tp(s);
    const int etp_g = active >= 0 && etp > 0 ? active / etp : -1;
    const float fh = ImGui::GetFontSize();
    const int text_lines = g.cell_h >= 2 * fh + 6 && g.cell_w >= 60 ? 2 : g.cell_h >= fh + 2 && g.cell_w >= 16 ? 1 : 0;
    const float rounding = g.cell_w >= 20 ? 3.0f : 0.0f;
    auto cell_min = [&](int r) { return ImVec2(p0.x + g.cell_x(r), p0.y + g.cell_y(r)); };

    dl->PushClipRect(ImVec2(p0.x + g.label_w, p0.y + g.header_h), p1, true);
    for (int row = row0; row <= row1; ++row) {
        for (int col = col0; col <= col1; ++col) {
            const int r = row * g.cols + col;
            if (r >= g.world) break;
            const ImVec2 a = cell_min(r), b(a.x + g.cell_w, a.y + g.cell_h);
            const bool member = active < 0 || tp.group_of[r] == tp_g || pp.group_of[r] == pp_g || dp.group_of[r] == dp_g ||
                                (cp_g >= 0 && cp.group_of[r] == cp_g) || (ep_g >= 0 && ep.group_of[r] == ep_g);
            const Rgb rgb = cell_rgb(s, r);
            ImU32 fill = IM_COL32(rgb.r, rgb.g, rgb.b, 255);
            if (!member) fill = blend(fill, colour::canvas, 0.72f);
            dl->AddRectFilled(a, b, fill, rounding);
            if (tp.spans_nodes[tp.group_of[r]]) corner_marker(dl, a, b, std::clamp(g.cell_w * 0.22f, 4.0f, 12.0f), colour::spans_nodes);
            if (text_lines) cell_text(dl, s, L, r, a, b, text_lines, member ? colour::cell_text : IM_COL32(120, 124, 132, 255));
            // A straggler of the Live run: a thick outline in the error colour, over the fill.
            // (on a dark band, so it shows on every group colour).
            if (rank_straggler(s, r)) {
                dl->AddRect(ImVec2(a.x + 1.5f, a.y + 1.5f), ImVec2(b.x - 1.5f, b.y - 1.5f), colour::canvas, rounding, 0, 5.0f);
                dl->AddRect(ImVec2(a.x + 1.5f, a.y + 1.5f), ImVec2(b.x - 1.5f, b.y - 1.5f), colour::straggler, rounding, 0, 2.5f);
            }
        }
    }
    // Outlines of the active rank's groups, drawn over every fill: EP dash-dot, CP long dashes,
    // DP dotted, PP dashed, expert TP thin, TP solid; nested from the inside out where cells are
    // tall enough, else on one line (the last drawn shows).
    if (active >= 0) {
        const bool roomy = g.cell_h >= 40;  // room for nested outlines
        for (int row = row0; row <= row1; ++row) {
            for (int col = col0; col <= col1; ++col) {
                const int r = row * g.cols + col;
                if (r >= g.world) break;
                const ImVec2 a = cell_min(r), b(a.x + g.cell_w, a.y + g.cell_h);
                auto inset = [&](float d) { return std::pair(ImVec2(a.x + d, a.y + d), ImVec2(b.x - d, b.y - d)); };
                if (ep_g >= 0 && ep.group_of[r] == ep_g) {
                    auto [ia, ib] = inset(roomy ? 12.5f : 1.5f);
                    dash_dot_rect(dl, ia, ib, colour::ep_outline, 2.0f, 5.0f, 2.0f);
                }
                if (cp_g >= 0 && cp.group_of[r] == cp_g) {
                    auto [ia, ib] = inset(roomy ? 9.5f : 1.5f);
                    dashed_rect(dl, ia, ib, colour::cp_outline, 2.0f, 7.0f, 3.0f);
                }
                if (dp.group_of[r] == dp_g) {
                    auto [ia, ib] = inset(roomy ? 6.5f : 1.5f);
                    dashed_rect(dl, ia, ib, colour::dp_outline, 2.5f, 2.5f, 3.0f);
                }
                if (pp.group_of[r] == pp_g) {
                    auto [ia, ib] = inset(roomy ? 3.0f : 1.5f);
                    dashed_rect(dl, ia, ib, colour::pp_outline, 2.0f, 6.0f, 4.0f);
                }
                if (etp_g >= 0 && r / etp == etp_g) {
                    auto [ia, ib] = inset(0.5f);
                    dl->AddRect(ia, ib, colour::etp_outline, rounding, 0, 1.0f);
                }
                if (tp.group_of[r] == tp_g) {
                    auto [ia, ib] = inset(r == active ? -2.5f : -1.0f);
                    dl->AddRect(ia, ib, colour::tp_outline, rounding + 1, 0, r == active ? 3.5f : 2.0f);
                }
            }
        }
    }
    dl->PopClipRect();

    // GPU-index header (scrolls sideways with the cells).
    const ImU32 dim = colour::text_dim, bright = IM_COL32(235, 238, 245, 255);
    const int active_gpu = active >= 0 ? L.ranks[active].local_gpu : -1;
    const int active_node = active >= 0 ? L.ranks[active].node : -1;
    dl->PushClipRect(ImVec2(p0.x + g.label_w, p0.y), ImVec2(p1.x, p0.y + g.header_h), true);
    {
        const float wide = ImGui::CalcTextSize("gpu 00").x + 6, num = ImGui::CalcTextSize("000").x + 4;
        const int step = g.pitch_x() >= num ? 1 : (int)std::ceil(num / g.pitch_x());
        for (int col = col0; col <= col1; ++col) {
            if (col % step != 0 && col != active_gpu) continue;
            char t[24];
            std::snprintf(t, sizeof t, g.cell_w >= wide ? "gpu %d" : "%d", col);
            const ImVec2 ts = ImGui::CalcTextSize(t);
            const float x = p0.x + g.origin_x + col * g.pitch_x() + (g.cell_w - ts.x) * 0.5f;
            dl->AddText(ImVec2(std::floor(x), p0.y + (g.header_h - fh) * 0.5f + 2), col == active_gpu ? bright : dim, t);
        }
    }
    dl->PopClipRect();

    // Node labels (scroll up and down with the rows).
    dl->PushClipRect(ImVec2(p0.x, p0.y + g.header_h), ImVec2(p0.x + g.label_w, p1.y), true);
    {
        const int step = g.pitch_y() >= fh ? 1 : (int)std::ceil(fh / g.pitch_y());
        const auto& hosts = s.job.cluster.hosts;
        for (int row = row0; row <= row1; ++row) {
            if (row % step != 0 && row != active_node) continue;
            char t[40];
            if (row < (int)hosts.size()) std::snprintf(t, sizeof t, "%.10s", hosts[row].c_str());
            else std::snprintf(t, sizeof t, "node %d", row);
            const ImVec2 ts = ImGui::CalcTextSize(t);
            const float y = p0.y + g.row_y(row) + (g.cell_h - fh) * 0.5f;
            const bool slow = node_has_straggler(s, row);  // the host holds a straggler: its label in the mark's colour
            dl->AddText(ImVec2(p0.x + g.label_w - ts.x - 8, std::floor(y)), slow ? colour::straggler : row == active_node ? bright : dim, t);
            if (slow && g.cell_h >= 2 * fh)
                dl->AddText(ImVec2(p0.x + g.label_w - ImGui::CalcTextSize("slow").x - 8, std::floor(y + fh)), colour::straggler, "slow");
        }
    }
    dl->PopClipRect();

    // Scroll position indicators when the grid is larger than the canvas.
    const float view_w = size.x - g.label_w, view_h = size.y - g.header_h;
    if (g.content_h() + 12 > view_h) {
        const float total = g.content_h() + 12, t0 = s.view.pan_y / total, t1 = std::min(1.0f, (s.view.pan_y + view_h) / total);
        const float y0 = p0.y + g.header_h + t0 * view_h, y1 = p0.y + g.header_h + t1 * view_h;
        dl->AddRectFilled(ImVec2(p1.x - 5, y0), ImVec2(p1.x - 2, std::max(y1, y0 + 8)), IM_COL32(110, 118, 134, 200), 2);
    }
    if (g.content_w() + 12 > view_w) {
        const float total = g.content_w() + 12, t0 = s.view.pan_x / total, t1 = std::min(1.0f, (s.view.pan_x + view_w) / total);
        const float x0 = p0.x + g.label_w + t0 * view_w, x1 = p0.x + g.label_w + t1 * view_w;
        dl->AddRectFilled(ImVec2(x0, p1.y - 5), ImVec2(std::max(x1, x0 + 8), p1.y - 2), IM_COL32(110, 118, 134, 200), 2);
    }

    // Tooltip for the rank under the mouse.
    if (hovered && s.view.hover >= 0 && !ImGui::IsMouseDragging(ImGuiMouseButton_Left, 3.0f)) {
        ImGui::BeginTooltip();
        ImGui::TextUnformatted(rank_tooltip(s, s.view.hover).c_str());
        if (s.view.pinned < 0) ImGui::TextDisabled("click to pin");
        else if (s.view.pinned == s.view.hover) ImGui::TextDisabled("pinned; click again to unpin");
        ImGui::EndTooltip();
    }
}

// The heat ramp of the memory modes: a gradient from 0 to 100% of the usable memory (or to
// the largest stage, predicted_heat_scale) and the OOM colour.
// The live heat ramp: 0 to the usable GPU memory, or (cpu preset) to the largest rank.
void live_heat_legend(const StudioState& s) {
    ImGui::SameLine(0, 10);
    ImGui::TextDisabled("0");
    ImGui::SameLine(0, 5);
    const float h = ImGui::GetTextLineHeight(), w = 180;
    const ImVec2 p = ImGui::GetCursorScreenPos();
    ImGui::Dummy(ImVec2(w, h));
    constexpr int kSteps = 36;
    for (int i = 0; i < kSteps; ++i) {
        const Rgb c = heat_rgb((i + 0.5) / kSteps);
        ImGui::GetWindowDrawList()->AddRectFilled(ImVec2(p.x + w * i / kSteps, p.y + 1),
                                                  ImVec2(p.x + w * (i + 1) / kSteps + 0.5f, p.y + h - 1),
                                                  IM_COL32(c.r, c.g, c.b, 255));
    }
    ImGui::SameLine(0, 5);
    const Estimate* e = job_estimate(s);
    if (e && e->usable_bytes > 0 && s.job.cluster.gpu.name != "cpu")
        ImGui::TextDisabled("100%% of %s usable (measured, step %d)", format_memory(e->usable_bytes, memory_unit(*e)).c_str(),
                            s.live.run.max_step);
    else
        ImGui::TextDisabled("%s, the largest rank (measured, step %d)", human_bytes(live_max_memory_bytes(s)).c_str(),
                            s.live.run.max_step);
}

void heat_legend(const StudioState& s) {
    if (s.view.colour_by == ColourBy::live_memory) return live_heat_legend(s);
    const Estimate* e = job_estimate(s);
    const HeatScale hs = predicted_heat_scale(s);
    ImGui::SameLine(0, 10);
    const float h = ImGui::GetTextLineHeight(), w = 180;
    if (hs.relative && e) ImGui::TextDisabled("%s", format_memory(hs.low_bytes, memory_unit(*e)).c_str());
    else ImGui::TextDisabled("0%%");
    ImGui::SameLine(0, 5);
    const ImVec2 p = ImGui::GetCursorScreenPos();
    ImGui::Dummy(ImVec2(w, h));
    ImDrawList* dl = ImGui::GetWindowDrawList();
    constexpr int kSteps = 36;
    for (int i = 0; i < kSteps; ++i) {
        const Rgb c = heat_rgb((i + 0.5) / kSteps);
        dl->AddRectFilled(ImVec2(p.x + w * i / kSteps, p.y + 1), ImVec2(p.x + w * (i + 1) / kSteps + 0.5f, p.y + h - 1),
                          IM_COL32(c.r, c.g, c.b, 255));
    }
    ImGui::SameLine(0, 5);
    char t[128];
    if (e && hs.relative)
        std::snprintf(t, sizeof t, "%s, the largest stage (%.0f%% of the usable %s)",
                      format_memory(hs.full_bytes, memory_unit(*e)).c_str(), 100 * hs.full_bytes / e->usable_bytes,
                      format_memory(e->usable_bytes, memory_unit(*e)).c_str());
    else if (e) std::snprintf(t, sizeof t, "100%% of %s usable", format_memory(e->usable_bytes, memory_unit(*e)).c_str());
    else std::snprintf(t, sizeof t, "100%% of usable");
    ImGui::TextDisabled("%s", t);
    if (!hs.relative) {  // a relative ramp means every stage is far from full
        flow_same_line(legend_item_width(Swatch::fill, "over: OOM"), 14);
        legend_item(Swatch::fill, IM_COL32(kHeatOom.r, kHeatOom.g, kHeatOom.b, 255), "over: OOM");
    }
    flow_same_line(ImGui::CalcTextSize("(each rank: its pipeline stage's most loaded rank)").x, 14);
    ImGui::TextDisabled("(each rank: its pipeline stage's most loaded rank)");
}

void legend(const StudioState& s) {
    ImGui::AlignTextToFramePadding();
    ImGui::TextDisabled("%s", colour_by_label(s.view.colour_by));
    if (colour_is_heat(s.view.colour_by)) heat_legend(s);
    const int n = colour_count(s);
    const int shown = std::min(n, kPaletteSize);
    for (int i = 0; i < shown; ++i) {
        char t[16];
        std::snprintf(t, sizeof t, "%d", i);
        flow_same_line(legend_item_width(Swatch::fill, t), i == 0 ? 10 : 12);
        legend_item(Swatch::fill, group_colour(i), t);
    }
    if (n > shown) {
        char t[64];
        std::snprintf(t, sizeof t, "... %d in all (colours repeat)", n);
        flow_same_line(ImGui::CalcTextSize(t).x, 12);
        ImGui::TextDisabled("%s", t);
    }
    ImGui::AlignTextToFramePadding();
    ImGui::TextDisabled(s.view.pinned >= 0 ? "Pinned rank's groups" : "Hovered rank's groups");
    struct Item {
        Swatch kind;
        ImU32 col;
        const char* label;
    };
    std::vector<Item> items = {{Swatch::solid, colour::tp_outline, "TP"},
                               {Swatch::dashed, colour::pp_outline, "PP"},
                               {Swatch::dotted, colour::dp_outline, "DP"}};
    if (s.layout->degree[DIM_CP] > 1) items.push_back({Swatch::long_dashed, colour::cp_outline, "CP"});
    if (s.layout->req.ep > 1) items.push_back({Swatch::dash_dot, colour::ep_outline, "EP"});
    if (folded_expert_tp(s) > 0) items.push_back({Swatch::thin, colour::etp_outline, "expert TP"});
    if (s.layout->tp_groups_spanning_nodes > 0) items.push_back({Swatch::corner, colour::spans_nodes, "TP group spans nodes"});
    const int count = (int)items.size();
    for (int i = 0; i < count; ++i) {
        flow_same_line(legend_item_width(items[i].kind, items[i].label), i == 0 ? 12 : 16);
        legend_item(items[i].kind, items[i].col, items[i].label);
    }
    bool any_slow = false;
    for (int r = 0; r < s.layout->world && !any_slow; ++r) any_slow = rank_straggler(s, r) != nullptr;
    if (any_slow) {
        const char* label = "straggler of the Live run (measured compute; hover it)";
        flow_same_line(legend_item_width(Swatch::solid, label), 16);
        legend_item(Swatch::solid, colour::straggler, label);
    }
}

void selection_line(const StudioState& s) {
    const int r = s.view.pinned;
    if (r >= 0 && s.layout && r < s.layout->world) {
        const RankPlace& p = s.layout->ranks[r];
        ImGui::PushStyleColor(ImGuiCol_Text, colour::accent);
        ImGui::Text("Pinned rank %d", r);
        ImGui::PopStyleColor();
        ImGui::SameLine();
        ImGui::Text("tp %d, cp %d, dp %d, pp %d on node %d, GPU %d", p.coord[DIM_TP], p.coord[DIM_CP],
                    p.coord[DIM_DP], p.coord[DIM_PP], p.node, p.local_gpu);
        flow_same_line(ImGui::CalcTextSize("(click it again to unpin)").x, 16);
        ImGui::TextDisabled("(click it again to unpin)");
    } else {
        ImGui::TextDisabled("Hover: outline groups   Click: pin   Drag: pan   Wheel: zoom");
    }
}

}  // namespace

void draw_layout_panel(StudioState& s) {
    if (!s.layout) {
        draw_job_problems(s, "rank layout", "the grid comes back");
        return;
    }
    refresh_stragglers(s);
    toolbar(s);
    ImGui::Spacing();
    // The legend under the canvas wraps in narrow windows: reserve what it took last frame.
    static float bottom = ImGui::GetFrameHeightWithSpacing() * 2 + ImGui::GetTextLineHeightWithSpacing();
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    canvas(s, ImVec2(std::max(50.0f, avail.x), std::max(50.0f, avail.y - bottom)));
    const float legend_top = ImGui::GetCursorPosY();
    legend(s);
    selection_line(s);
    bottom = ImGui::GetCursorPosY() - legend_top + ImGui::GetStyle().ItemSpacing.y;
}

}  // namespace ptd::studio::ui
