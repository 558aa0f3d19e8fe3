// panel_schedule.cpp — the Schedule tab: the predicted pipeline timeline as a Gantt chart
// (rows = stages or the ranks of one data-parallel replica, micro-batches coloured and
// numbered, the bubble shaded, hover tooltips, wheel zoom and drag pan),
// the batch legend with the job's numbers, and a toggle that puts a run's measured
// timeline under it on the same time axis with the blocks that differ outlined. The data
// lives in schedule_model.h; this file only draws it (InvisibleButton + ImDrawList).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ui.h"

namespace ptd::studio::ui {
namespace {

ImU32 with_alpha(ImU32 c, int a) { return (c & 0x00FFFFFFu) | ((ImU32)a << 24); }
ImU32 darker(ImU32 c) {
    const int r = (int)(c & 0xFF) * 3 / 5, g = (int)((c >> 8) & 0xFF) * 3 / 5, b = (int)((c >> 16) & 0xFF) * 3 / 5;
    return IM_COL32(r, g, b, 255);
}

ImU32 block_colour(const TimelineBlock& b) {
    switch (b.kind) {
        case BlockKind::forward: return group_colour(std::max(0, b.micro_batch));
        case BlockKind::backward: return darker(group_colour(std::max(0, b.micro_batch)));
        case BlockKind::recompute: return IM_COL32(200, 170, 60, 255);
        case BlockKind::optimizer: return IM_COL32(90, 200, 210, 255);
        case BlockKind::weight_grad: return darker(darker(group_colour(std::max(0, b.micro_batch))));  // zb: ZB-H1's W
        default: return IM_COL32(215, 90, 215, 255);
    }
}

// Blocks narrower than this merge into spans (schedule_model.h's level of detail).
constexpr double kMinBlockPx = 4;

// A merged span: forwards in the forward hue, backwards darker, 1F1B's alternation between.
ImU32 span_colour(const GanttSpan& s) {
    if (s.forward && !s.backward) return IM_COL32(125, 175, 215, 255);
    if (s.backward && !s.forward) return IM_COL32(75, 105, 130, 255);
    return IM_COL32(100, 140, 172, 255);
}

std::string span_tooltip(const GanttSpan& s, const GanttRow& row);

std::string time_label(double s) {
    char buf[32];
    if (s >= 1) std::snprintf(buf, sizeof buf, "%.2f s", s);
    else if (s >= 1e-3) std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
    else std::snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
    return buf;
}

std::string span_tooltip(const GanttSpan& s, const GanttRow& row) {
    std::string t = std::to_string(s.blocks) + " blocks";
    if (s.mb_lo >= 0) t += " of micro-batches " + std::to_string(s.mb_lo) + "-" + std::to_string(s.mb_hi);
    t += std::string(s.forward && s.backward ? " (forwards and backwards)" : s.forward ? " (forwards)" : s.backward ? " (backwards)" : "");
    t += " on " + row.label + "\n" + time_label(s.start_s) + " to " + time_label(s.end_s) + " (" + time_label(s.end_s - s.start_s) +
         ")\neach narrower than " + std::to_string((int)kMinBlockPx) + " px: zoom in (wheel) to see single blocks";
    return t;
}

}  // namespace

void draw_schedule_panel(StudioState& s) {
    schedule_refresh(s);
    ScheduleViewState& v = s.schedule;
    if (!v.predicted) {
        if (std::string why = no_layout_message(s); !why.empty()) text_wrapped_coloured(colour::accent, display_text(why));
        else draw_job_problems(s, "schedule", "The timeline comes back");
        return;
    }
    const Timeline& t = *v.predicted;
    char head[256];
    std::snprintf(head, sizeof head, "%s, p = %d, %d micro-batches per replica; step %s (pipeline drains at %s)",
                  t.schedule.c_str(), t.stages, t.micro_batches, time_label(t.makespan_s).c_str(),
                  time_label(t.pipeline_s).c_str());
    ImGui::TextUnformatted(display_text(head).c_str());
    ImGui::PushStyleColor(ImGuiCol_Text, colour::accent);
    ImGui::TextUnformatted(display_text(batch_legend(t)).c_str());
    ImGui::PopStyleColor();
    ImGui::SameLine();
    help_marker("A micro-batch is what one pipeline pass carries. Each data-parallel replica accumulates "
                "gradients over its micro-batches; all replicas together make the global batch.");

    // The measured timeline toggle.
    bool show = v.show_measured;
    if (ImGui::Checkbox("Measured timeline under the prediction", &show)) {
        if (show && v.measured.empty()) {
            const std::string dir = v.run_dir.empty() ? live_run_dir(s) : v.run_dir;
            if (!dir.empty()) schedule_load_measured(s, dir);
            else v.measured_error = "no run directory: launch the job or open a run (Live tab) first";
        }
        v.show_measured = show && !v.measured.empty();
    }
    if (!v.measured_error.empty()) {
        ImGui::SameLine();
        text_wrapped_coloured(colour::warning, display_text(v.measured_error));
    } else if (v.show_measured) {
        ImGui::SameLine();
        ImGui::TextDisabled("%s, step %d; outlined red: off the prediction by > 20%%", v.run_dir.c_str(), v.measured_step);
        // One representative data-parallel replica by default (issue 33 point 3).
        if (v.replica < 0 && std::any_of(v.measured_dp.begin(), v.measured_dp.end(), [](int d) { return d > 0; })) {
            ImGui::Checkbox("all DP replicas", &v.measured_all_replicas);  // own line: the run path above is long
            if (!v.measured_all_replicas) {
                ImGui::SameLine();
                ImGui::TextDisabled("(measured rows: replica 0)");
            }
        }
    }
    // Which prediction the blocks (and the red outlines) are: estimate_job with the job's
    // profile, and whether it is the one the Live tab draws for the run shown.
    const SchedulePredictionNote note = schedule_prediction_note(s);
    text_wrapped_coloured(note.not_the_live_runs ? colour::warning : colour::text_dim, note.text);

    // Legend.
    legend_item(Swatch::fill, group_colour(0), "forward (colour = micro-batch)");
    ImGui::SameLine(0, 12);
    legend_item(Swatch::fill, darker(group_colour(0)), "backward");
    ImGui::SameLine(0, 12);
    legend_item(Swatch::fill, IM_COL32(200, 170, 60, 255), "recompute");
    ImGui::SameLine(0, 12);
    legend_item(Swatch::fill, IM_COL32(215, 90, 215, 255), v.show_measured ? "communication (DP; measured: TP, p2p)" : "DP communication");
    ImGui::SameLine(0, 12);
    legend_item(Swatch::fill, IM_COL32(90, 200, 210, 255), "optimizer");
    ImGui::SameLine(0, 12);
    legend_item(Swatch::fill, IM_COL32(70, 60, 60, 255), "bubble (idle)");

    // Rows (stages, or the ranks of one data-parallel replica) and the zoom.
    {
        const int dp = std::max(1, t.dp);
        std::string current = v.replica < 0 ? "stages" : "replica " + std::to_string(v.replica) + " ranks";
        ImGui::SetNextItemWidth(170);
        if (ImGui::BeginCombo("Rows", current.c_str())) {
            if (ImGui::Selectable("stages", v.replica < 0)) schedule_set_rows(s, -1);
            for (int k = 0; k < dp && k < 4096; ++k) {
                const std::string name = "replica " + std::to_string(k) + " ranks";
                if (ImGui::Selectable(name.c_str(), v.replica == k)) schedule_set_rows(s, k);
            }
            ImGui::EndCombo();
        }
        ImGui::SameLine();
        if (ImGui::Button("Fit")) schedule_fit(v);
        ImGui::SameLine();
        ImGui::TextDisabled("wheel over the chart: zoom; drag: pan");
    }

    // The chart.
    const std::vector<GanttRow> rows = gantt_rows(v);
    const double span = std::max(gantt_span(v), 1e-12);
    const auto [view0, view1] = schedule_view(v, span);
    const double view_w = std::max(view1 - view0, 1e-15);
    const float label_w = v.replica >= 0 ? 120.0f : 70.0f, row_h = std::clamp(ImGui::GetContentRegionAvail().y / (float)(rows.size() + 2), 18.0f, 44.0f);
    const float comm_h = 6, axis_h = 22, gap = 4;
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    const float width = std::max(100.0f, ImGui::GetContentRegionAvail().x);
    const float height = rows.size() * (row_h + comm_h + gap) + axis_h + (v.show_measured ? 14.0f : 0.0f);
    ImGui::InvisibleButton("##gantt", ImVec2(width, height));
    const bool hovered = ImGui::IsItemHovered();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const float x0 = origin.x + label_w, plot_w = width - label_w - 8;
    auto xt = [&](double sec) { return x0 + (float)((sec - view0) / view_w) * plot_w; };
    dl->AddRectFilled(origin, ImVec2(origin.x + width, origin.y + height), colour::canvas);
    const ImVec2 mouse = ImGui::GetIO().MousePos;
    v.hover_row = v.hover_block = -1;
    // Zoom around the cursor's time with the wheel; drag to pan.
    if (hovered && ImGui::GetIO().MouseWheel != 0 && mouse.x >= x0) {
        const double at = view0 + (mouse.x - x0) / plot_w * view_w;
        schedule_zoom(v, span, at, std::pow(0.8, (double)ImGui::GetIO().MouseWheel));
    }
    if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2.0f))
        schedule_pan(v, span, -(double)ImGui::GetIO().MouseDelta.x / plot_w * view_w);

    std::string span_tip;  // the hovered merged span's tooltip
    float y = origin.y + 2;
    for (size_t r = 0; r < rows.size(); ++r) {
        const GanttRow& row = rows[r];
        if (row.measured && (r == 0 || !rows[r - 1].measured)) {
            dl->AddText(ImVec2(origin.x + 4, y), colour::text_dim, "measured");
            y += 14;
        }
        dl->AddText(ImVec2(origin.x + 4, y + row_h / 2 - 7), row.measured ? colour::warning : colour::text_dim, row.label.c_str());
        if (!row.measured && row_h >= 30) {  // the row's idle share (bubble) under its name
            char idle[32];
            std::snprintf(idle, sizeof idle, "%.0f%% idle", 100 * row_idle_share(v, row));
            dl->AddText(ImVec2(origin.x + 4, y + row_h / 2 + 6), colour::text_dim, idle);
        }
        dl->PushClipRect(ImVec2(x0, y - 1), ImVec2(x0 + plot_w + 1, y + row_h + comm_h + 1), true);
        // The bubble: the row's background where nothing runs.
        const double row_end = row.measured ? span : t.makespan_s;
        dl->AddRectFilled(ImVec2(xt(0), y), ImVec2(xt(row_end), y + row_h), IM_COL32(70, 60, 60, 255));
        const std::vector<TimelineBlock>& list = row.measured ? v.measured : t.blocks;
        // Compute blocks by level of detail (schedule_model.h): a block wide enough is drawn
        // on its own, narrower neighbours merge into one labelled span ("F 0-63").
        const std::vector<GanttSpan> spans = gantt_spans(v, row, view0, view1, plot_w / view_w, kMinBlockPx);
        for (const GanttSpan& sp : spans) {
            if (sp.blocks == 1) continue;  // single blocks: below, with their number and tooltip
            const ImVec2 a(xt(sp.start_s), y), c(std::max(xt(sp.end_s), xt(sp.start_s) + 1.0f), y + row_h);
            dl->AddRectFilled(a, c, span_colour(sp));
            dl->AddRect(a, c, with_alpha(colour::background, 160));
            bool differs = false;
            for (int k = sp.first; row.measured && k <= sp.last && !differs; ++k)
                differs = list[(size_t)k].row == row.id && measured_differs(v, k);
            if (differs) dl->AddRect(a, c, colour::error, 0, 0, 2.0f);
            const std::string label = span_label(sp);
            const ImVec2 ts = ImGui::CalcTextSize(label.c_str());
            if (c.x - a.x > ts.x + 4) dl->AddText(ImVec2((a.x + c.x - ts.x) / 2, (a.y + c.y - ts.y) / 2), colour::cell_text, label.c_str());
            if (hovered && mouse.x >= std::max(a.x, x0) && mouse.x < c.x && mouse.y >= a.y && mouse.y < c.y) {
                span_tip = span_tooltip(sp, row);
                dl->AddRect(a, c, colour::tp_outline, 0, 0, 2.0f);
            }
        }
        std::vector<char> single(list.size(), 0);
        for (const GanttSpan& sp : spans)
            if (sp.blocks == 1) single[(size_t)sp.first] = 1;
        // Single blocks and communication first, then the parts nested in them (measured
        // recompute forwards) where their block is drawn on its own.
        for (int pass = 0; pass < 2; ++pass)
        for (size_t k = 0; k < list.size(); ++k) {
            const TimelineBlock& b = list[k];
            if (b.row != row.id || nested_block(b) != (pass == 1)) continue;
            if (b.end_s < view0 || b.start_s > view1) continue;
            const bool comm = b.stream != kStreamCompute;
            if (!comm && pass == 0 && !single[k]) continue;  // inside a merged span
            if (pass == 1 && (b.end_s - b.start_s) * plot_w / view_w < kMinBlockPx) continue;
            const float top = comm ? y + row_h + 1 : y, bottom = comm ? y + row_h + comm_h : y + row_h;
            const float inset = pass == 1 ? row_h * 0.2f : 0.0f;  // a nested part: a thinner bar inside its block
            const ImVec2 a(xt(b.start_s), top + inset), c(std::max(xt(b.end_s), xt(b.start_s) + 1.0f), bottom - inset);
            dl->AddRectFilled(a, c, block_colour(b));
            if (!comm) dl->AddRect(a, c, with_alpha(colour::background, 160));
            if (row.measured && measured_differs(v, (int)k)) dl->AddRect(a, c, colour::error, 0, 0, 2.0f);
            if (!comm && b.micro_batch >= 0) {
                char num[16];
                std::snprintf(num, sizeof num, "%d", b.micro_batch);
                const ImVec2 ts = ImGui::CalcTextSize(num);
                if (c.x - a.x > ts.x + 2) dl->AddText(ImVec2((a.x + c.x - ts.x) / 2, (a.y + c.y - ts.y) / 2), colour::cell_text, num);
            }
            if (hovered && mouse.x >= std::max(a.x, x0) && mouse.x < c.x && mouse.y >= a.y && mouse.y < c.y) {
                v.hover_row = (int)r;
                v.hover_block = (int)k;
                dl->AddRect(a, c, colour::tp_outline, 0, 0, 2.0f);
            }
        }
        dl->PopClipRect();
        y += row_h + comm_h + gap;
    }
    // Time axis.
    dl->AddLine(ImVec2(x0, y), ImVec2(x0 + plot_w, y), colour::text_dim);
    for (int k = 0; k <= 5; ++k) {
        const double sec = view0 + view_w * k / 5;
        const float x = xt(sec);
        dl->AddLine(ImVec2(x, y), ImVec2(x, y + 4), colour::text_dim);
        const std::string lab = time_label(sec);
        const float w = ImGui::CalcTextSize(lab.c_str()).x;
        dl->AddText(ImVec2(std::min(x - w / 2, x0 + plot_w - w), y + 5), colour::text_dim, lab.c_str());
    }
    if (!span_tip.empty()) {
        ImGui::BeginTooltip();
        ImGui::TextUnformatted(display_text(span_tip).c_str());
        ImGui::EndTooltip();
    } else if (v.hover_block >= 0) {
        ImGui::BeginTooltip();
        ImGui::TextUnformatted(display_text(block_tooltip(v, rows[(size_t)v.hover_row], v.hover_block)).c_str());
        ImGui::EndTooltip();
    }
}

}  // namespace ptd::studio::ui
