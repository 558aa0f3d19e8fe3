// panel_planner.cpp — the Planner tab: search options, the background search's progress
// (Run / Cancel), where the current job ranks, and a sortable table of layouts whose rows
// apply their layout to the job when clicked. Everything it shows comes from
// planner_model.h; this file only draws and forwards clicks.
#include <algorithm>
#include <cfloat>
#include <cstdio>

#include "estimate_view.h"
#include "ui.h"

namespace ptd::studio::ui {
namespace {

// Text right-aligned in the current table cell.
void cell_right(const std::string& text, ImU32 col = 0) {
    const float w = ImGui::CalcTextSize(text.c_str()).x;
    const float avail = ImGui::GetContentRegionAvail().x;
    if (avail > w) ImGui::SetCursorPosX(ImGui::GetCursorPosX() + avail - w);
    if (col) ImGui::PushStyleColor(ImGuiCol_Text, col);
    ImGui::TextUnformatted(text.c_str());
    if (col) ImGui::PopStyleColor();
}

bool numeric(PlanColumn c) { return c != PlanColumn::recompute && c != PlanColumn::order && c != PlanColumn::sp; }

void setting_error(const StudioState& s, const char* key) {
    const std::string e = planner_setting_error(s, key);
    if (!e.empty()) text_wrapped_coloured(colour::error, e);
}

void options_row(StudioState& s) {
    PlannerSettings& st = s.planner.settings;
    const bool running = s.planner.worker != nullptr;
    const bool stale = planner_stale(s);
    const bool never = !s.planner.result;
    const std::string blocker = planner_blocker(s);

    // Run / Re-run, highlighted when the table no longer matches the job.
    ImGui::BeginDisabled(running || !blocker.empty());
    const bool urge = stale && !running;
    if (urge) {
        ImGui::PushStyleColor(ImGuiCol_Button, IM_COL32(64, 98, 150, 255));
        ImGui::PushStyleColor(ImGuiCol_ButtonHovered, IM_COL32(80, 118, 176, 255));
    }
    if (ImGui::Button(never ? "Run search" : "Re-run")) planner_start(s);
    if (urge) ImGui::PopStyleColor(2);
    ImGui::EndDisabled();
    if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
        ImGui::SetTooltip("Search every layout of this model on the cluster (as `ptd plan` does), in the background");
    ImGui::SameLine();
    ImGui::BeginDisabled(!running);
    if (ImGui::Button("Cancel")) planner_cancel(s);
    ImGui::EndDisabled();

    ImGui::SameLine(0, 18);
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted("top");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(96);
    ImGui::InputInt("##top_k", &st.top_k, 10, 100);
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("How many fitting layouts to list (and as many that do not fit)");

    ImGui::SameLine(0, 14);
    ImGui::TextUnformatted("GPUs");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(104);
    ImGui::InputInt("##gpus", &st.gpus, s.job.cluster.gpus_per_node > 0 ? s.job.cluster.gpus_per_node : 1, 0);
    if (ImGui::IsItemHovered())
        ImGui::SetTooltip("GPUs to plan for, whole nodes; 0 = the job's cluster (%d)", s.job.world_size());
    if (st.gpus == 0) {
        ImGui::SameLine(0, 4);
        ImGui::TextDisabled("(job's %d)", s.job.world_size());
    }

    ImGui::SameLine(0, 14);
    ImGui::TextUnformatted("headroom");
    ImGui::SameLine();
    char job_label[48];
    std::snprintf(job_label, sizeof job_label, "job's (%.0f%%)", plan_headroom(s.job, PlanOptions{}) * 100);
    ImGui::Checkbox(job_label, &st.job_headroom);
    if (ImGui::IsItemHovered())
        ImGui::SetTooltip("Leave the job's estimate.headroom free on every GPU (unset: its framework's default)");
    if (!st.job_headroom) {
        ImGui::SameLine();
        float pct = (float)(st.headroom * 100);
        ImGui::SetNextItemWidth(90);
        if (ImGui::InputFloat("##headroom", &pct, 1, 5, "%.0f%%")) st.headroom = pct / 100.0;
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("Fraction of each GPU's memory a layout must leave free to fit");
    }

    ImGui::SameLine(0, 14);
    ImGui::Checkbox("tp beyond a node", &st.tp_beyond_node);
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("Also try tensor-parallel groups larger than one node");
    ImGui::SameLine(0, 14);
    ImGui::Checkbox("any framework", &st.any_framework);  // planfw
    if (ImGui::IsItemHovered())
        ImGui::SetTooltip("Search every framework's layouts, not only those training.framework runs");

    ImGui::SameLine(0, 14);
    bool fits_only = s.planner.fits_only;
    if (ImGui::Checkbox("fits only", &fits_only)) planner_set_fits_only(s, fits_only);
    if (ImGui::IsItemHovered())
        ImGui::SetTooltip("Untick to also list the fastest layouts that do not fit (the near misses), in red");

    for (const char* key : {"top_k", "gpus", "headroom"}) setting_error(s, key);
    if (!blocker.empty() && planner_setting_error(s, "top_k").empty() && planner_setting_error(s, "gpus").empty() &&
        planner_setting_error(s, "headroom").empty())
        text_wrapped_coloured(colour::error, "Cannot search: " + blocker);
}

void status_lines(StudioState& s) {
    const PlannerState& p = s.planner;
    if (p.worker) {
        const float frac = p.total > 0 ? (float)std::min(1.0, (double)p.evaluated / (double)p.total) : 0.0f;
        const std::string text = planner_progress_text(s);
        ImGui::ProgressBar(frac, ImVec2(-FLT_MIN, 0), text.c_str());
    } else if (p.status == PlannerStatus::failed && !p.error.empty() && planner_blocker(s).empty()) {
        text_wrapped_coloured(colour::error, "The search failed: " + p.error);
    }
    if (!p.result) {
        if (!p.worker && p.status == PlannerStatus::never_run) ImGui::TextDisabled("No search yet.");
        return;
    }

    // Where the job stands.
    const JobRank& r = p.job_rank;
    const ImU32 rank_col = r.kind == JobRank::Kind::ranked                                        ? colour::ok
                           : r.kind == JobRank::Kind::no_fit || r.kind == JobRank::Kind::refused ? colour::error
                                                                                                  : colour::warning;
    std::string rank = job_rank_text(s);
    rank += job_row_note(s);
    text_wrapped_coloured(rank_col, rank);

    if (planner_stale(s))
        text_wrapped_coloured(colour::warning,
                              "The job's model, cluster, batch or the options changed since this search: the table "
                              "shows the old answer. Re-run to update it.");
    const PlannerSettings& ps = p.planned_settings;
    const JobSpec& pj = p.planned_job;
    char head[256];
    std::snprintf(head, sizeof head, "%s on %d x %s, global batch %d", pj.model.name.c_str(),
                  ps.gpus > 0 ? ps.gpus : pj.world_size(), pj.cluster.gpu.name.c_str(), pj.training.global_batch);
    ImGui::TextDisabled("%s  -  %s", head, planner_summary_text(s).c_str());
    ImGui::TextDisabled("%s", display_text(planner_bounds_text(s)).c_str());  // planfw
    if (!p.result->why_best.empty()) {
        ImGui::PushStyleColor(ImGuiCol_Text, colour::text_dim);
        ImGui::PushTextWrapPos(0.0f);
        const std::string why = display_text("Why #1: " + p.result->why_best);
        ImGui::TextUnformatted(why.c_str());
        ImGui::PopTextWrapPos();
        ImGui::PopStyleColor();
    }
    if (!p.result->too_big.empty()) {  // the cluster is too big for the global batch
        text_wrapped_coloured(colour::accent, display_text("Too many GPUs: " + p.result->too_big));
    }
}

void row_tooltip(const StudioState& s, const PlanRow& row, bool stale) {
    const LayoutScore& sc = row.entry.score;
    ImGui::BeginTooltip();
    if (stale) {
        text_wrapped_coloured(colour::warning, "Re-run the search first: this row was planned for another job.");
    } else {
        ImGui::TextUnformatted("Click to apply this layout to the job; right-click to pin it for the Compare tab");
    if (row.fits)
        ImGui::TextDisabled("#%s in this list; rank %s among all %s fitting layouts by tokens/s", group_thousands(row.number).c_str(),
                            group_thousands(row.rank).c_str(), s.planner.result ? group_thousands(s.planner.result->feasible).c_str() : "?");
    }
    ImGui::Separator();
    ImGui::Text("peak %s, headroom %s (pipeline stage %d is the most loaded)",
                plan_cell_text(s, row, PlanColumn::peak).c_str(), plan_cell_text(s, row, PlanColumn::headroom).c_str(),
                sc.worst_stage);
    const TimeBreakdown& t = sc.time;
    ImGui::Text("step %.3f s: compute %.3f, TP %.3f, PP %.3f, bubble %.3f, DP %.3f, optimizer %.3f", sc.step_s, t.compute,
                t.tp_comm, t.pp_comm, t.bubble, t.dp_comm, t.optimizer);
    // planfw: the overlap keys the planner turned on, and (any framework) who runs the row.
    ImGui::Text("overlap: %s", overlap_words(row.entry.choice).c_str());
    if (const std::string folded = folded_row_text("this layout", row.entry); !folded.empty()) {  // fold
        ImGui::PushTextWrapPos(ImGui::GetFontSize() * 40.0f);
        ImGui::TextUnformatted(display_text(folded).c_str());
        ImGui::PopTextWrapPos();
    }
    if (!row.entry.frameworks.empty()) {
        std::string f;
        for (Framework fw : row.entry.frameworks) f += (f.empty() ? "" : ", ") + std::string(to_string(fw));
        ImGui::Text("runs on: %s", f.c_str());
    }
    if (!row.entry.layers_per_stage.empty()) {
        std::string l;
        for (int n : row.entry.layers_per_stage) l += (l.empty() ? "" : ", ") + std::to_string(n);
        ImGui::Text("layers per stage: %s", l.c_str());
    }
    ImGui::EndTooltip();
}

void table(StudioState& s) {
    PlannerState& p = s.planner;
    if (!p.result) return;
    if (p.view.empty()) {
        ImGui::Spacing();
        text_wrapped_coloured(colour::error, p.fits_only && !p.rows.empty()
                                                 ? "No layout fits. Untick \"fits only\" to see the nearest misses."
                                                 : "No layout to show.");
        return;
    }
    const bool stale = planner_stale(s);
    const ImGuiTableFlags flags = ImGuiTableFlags_Sortable | ImGuiTableFlags_ScrollY | ImGuiTableFlags_RowBg |
                                  ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_BordersOuterH |
                                  ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_Hideable |
                                  ImGuiTableFlags_Reorderable;
    if (!ImGui::BeginTable("##plan", kPlanColumns, flags, ImVec2(0, 0))) return;
    ImGui::TableSetupScrollFreeze(1, 1);
    for (int c = 0; c < kPlanColumns; ++c) {
        const PlanColumn col = (PlanColumn)c;
        ImGuiTableColumnFlags cf = ImGuiTableColumnFlags_WidthFixed;
        if (col == PlanColumn::rank) cf |= ImGuiTableColumnFlags_DefaultSort | ImGuiTableColumnFlags_NoHide;
        if (col == PlanColumn::tokens_per_s || col == PlanColumn::mfu || col == PlanColumn::headroom)
            cf |= ImGuiTableColumnFlags_PreferSortDescending;
        if (col == PlanColumn::order) cf = ImGuiTableColumnFlags_WidthStretch;
        ImGui::TableSetupColumn(plan_column_label(col), cf);
    }
    // The header row, with each column's meaning on hover.
    ImGui::TableNextRow(ImGuiTableRowFlags_Headers);
    for (int c = 0; c < kPlanColumns; ++c) {
        if (!ImGui::TableSetColumnIndex(c)) continue;
        ImGui::TableHeader(plan_column_label((PlanColumn)c));
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", plan_column_help((PlanColumn)c));
    }
    if (ImGuiTableSortSpecs* specs = ImGui::TableGetSortSpecs(); specs && specs->SpecsDirty) {
        if (specs->SpecsCount > 0)
            planner_sort(s, (PlanColumn)specs->Specs[0].ColumnIndex,
                         specs->Specs[0].SortDirection != ImGuiSortDirection_Descending);
        specs->SpecsDirty = false;
    }

    int clicked = -1;
    ImGuiListClipper clipper;
    clipper.Begin((int)p.view.size());
    while (clipper.Step()) {
        for (int vi = clipper.DisplayStart; vi < clipper.DisplayEnd; ++vi) {
            const int ri = p.view[(size_t)vi];
            const PlanRow& row = p.rows[(size_t)ri];
            const bool is_job = p.job_rank.row == ri;
            ImGui::TableNextRow();
            ImGui::PushID(ri);
            const ImU32 text_col = !row.fits ? colour::error : stale ? colour::text_dim : 0;
            for (int c = 0; c < kPlanColumns; ++c) {
                if (!ImGui::TableSetColumnIndex(c)) continue;
                const PlanColumn col = (PlanColumn)c;
                const std::string text = plan_cell_text(s, row, col);
                if (c == 0) {
                    // The row's click target spans every column; the rank is drawn over it.
                    const ImGuiSelectableFlags sf = ImGuiSelectableFlags_SpanAllColumns |
                                                    ImGuiSelectableFlags_AllowItemOverlap |
                                                    (stale ? ImGuiSelectableFlags_Disabled : 0);
                    const ImVec2 pos = ImGui::GetCursorPos();
                    if (is_job) ImGui::PushStyleColor(ImGuiCol_Header, IM_COL32(110, 176, 240, 70));
                    if (ImGui::Selectable("##row", is_job, sf)) clicked = ri;
                    if (is_job) ImGui::PopStyleColor();
                    if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) row_tooltip(s, row, stale);
                    // Right-click: pin the row's layout for the Compare tab (the job stays as it is).
                    if (!stale && ImGui::BeginPopupContextItem("##pin")) {
                        if (ImGui::MenuItem("Pin for Compare") && compare_pin_plan_row(s, ri)) s.select_tab = MainTab::compare;
                        ImGui::EndPopup();
                    }
                    ImGui::SetCursorPos(pos);
                    cell_right(is_job ? "> " + text : text, is_job ? colour::accent : text_col);
                } else if (col == PlanColumn::headroom && !row.fits) {
                    cell_right(text, colour::error);
                } else if (numeric(col)) {
                    cell_right(text, text_col);
                } else {
                    if (text_col) ImGui::PushStyleColor(ImGuiCol_Text, text_col);
                    ImGui::TextUnformatted(text.c_str());
                    if (text_col) ImGui::PopStyleColor();
                }
            }
            ImGui::PopID();
        }
    }
    ImGui::EndTable();
    if (clicked >= 0) planner_apply_row(s, clicked);
}

}  // namespace

void draw_planner_panel(StudioState& s) {
    planner_autostart(s);  // the first time the tab is shown
    options_row(s);
    ImGui::Spacing();
    status_lines(s);
    ImGui::Spacing();
    table(s);
}

}  // namespace ptd::studio::ui
