// panel_compare.cpp — the Compare tab: a pinned layout (A) beside the job as edited (B),
// row by row as `ptd estimate A B` prints them (compare_view.h): memory per stage, every
// step-time term, tokens/s, MFU and each export. Rows that differ have a tinted background
// and the better side is green. The data is compare_model.h's; this file only draws it.
#include <cstdio>

#include "ui.h"

namespace ptd::studio::ui {

namespace {
constexpr ImU32 kDiffersRow = IM_COL32(70, 62, 30, 255);  // a warm tint under rows that differ
}

void draw_compare_panel(StudioState& s) {
    const std::optional<CompareSide> current = compare_current(s);
    if (!current) {
        if (std::string why = no_layout_message(s); !why.empty()) text_wrapped_coloured(colour::accent, display_text(why));
        else draw_job_problems(s, "comparison", "The comparison comes back");
        return;
    }
    if (ImGui::Button(s.compare.pinned ? "Pin the current job instead" : "Pin the current job")) compare_pin_job(s);
    if (s.compare.pinned) {
        ImGui::SameLine();
        if (ImGui::Button("Unpin")) compare_unpin(s);
    }
    ImGui::SameLine();
    ImGui::TextDisabled("(or right-click a row of the Planner's table: Pin for Compare)");
    if (!s.compare.pinned) {
        ImGui::Spacing();
        text_wrapped_coloured(colour::text_dim,
                              "Pin a layout to compare: the current job (the button above) or a planner row. Then edit "
                              "the job, or apply another row, and see both side by side: memory per stage, step-time "
                              "terms, tokens/s, MFU and which frameworks export each.");
        return;
    }
    const std::vector<CompareRow> rows = compare_view_rows(s);
    int differ = 0;
    for (const CompareRow& r : rows) differ += r.differs;
    ImGui::PushStyleColor(ImGuiCol_Text, colour::accent);
    ImGui::Text("A  %s", display_text(s.compare.pinned->name).c_str());
    ImGui::Text("B  %s", display_text(current->name).c_str());
    ImGui::PopStyleColor();
    ImGui::TextDisabled("%d of %zu rows differ (tinted); the better side in green where there is one", differ, rows.size());

    const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_ScrollY |
                                  ImGuiTableFlags_SizingStretchProp;
    if (!ImGui::BeginTable("##compare", 3, flags, ImVec2(0, 0))) return;
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("", ImGuiTableColumnFlags_WidthStretch, 1.0f);
    ImGui::TableSetupColumn("A (pinned)", ImGuiTableColumnFlags_WidthStretch, 1.6f);
    ImGui::TableSetupColumn("B (as edited)", ImGuiTableColumnFlags_WidthStretch, 1.6f);
    ImGui::TableHeadersRow();
    std::string section;
    for (const CompareRow& r : rows) {
        if (r.section != section) {
            section = r.section;
            ImGui::TableNextRow();
            ImGui::TableSetColumnIndex(0);
            ImGui::PushStyleColor(ImGuiCol_Text, colour::text_dim);
            ImGui::TextUnformatted(section.c_str());
            ImGui::PopStyleColor();
        }
        ImGui::TableNextRow();
        if (r.differs) ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg0, kDiffersRow);
        ImGui::TableSetColumnIndex(0);
        ImGui::Text("  %s", display_text(r.label).c_str());
        auto value = [&](const std::string& v, bool better) {
            if (better) ImGui::PushStyleColor(ImGuiCol_Text, colour::ok);
            ImGui::TextUnformatted(display_text(v).c_str());
            if (better) ImGui::PopStyleColor();
        };
        ImGui::TableSetColumnIndex(1);
        value(r.a, r.better < 0);
        ImGui::TableSetColumnIndex(2);
        value(r.b, r.better > 0);
    }
    ImGui::EndTable();
}

}  // namespace ptd::studio::ui
