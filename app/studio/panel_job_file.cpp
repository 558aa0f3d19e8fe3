// panel_job_file.cpp — the "Job file" tab: the edited job as the TOML that saving writes
// (save_job_toml), and every problem with its location.
#include <algorithm>
#include <cfloat>

#include "ui.h"

namespace ptd::studio::ui {

void draw_job_file_panel(StudioState& s) {
    // The TOML text is rebuilt only when the job changed.
    static uint64_t cached_revision = ~0ull;
    static std::string toml;
    if (cached_revision != s.revision) {
        toml = display_text(save_job_toml(s.job));
        cached_revision = s.revision;
    }

    ImGui::TextUnformatted(s.job.origin.file.c_str());
    ImGui::SameLine();
    ImGui::TextDisabled("as TOML: what saving the job writes");
    ImGui::SameLine(ImGui::GetContentRegionMax().x - ImGui::CalcTextSize("Copy").x - ImGui::GetStyle().FramePadding.x * 2);
    if (ImGui::Button("Copy")) ImGui::SetClipboardText(toml.c_str());

    float problems_h = 0;
    if (!s.diagnostics.empty())
        problems_h = ImGui::GetTextLineHeightWithSpacing() * (float)(s.diagnostics.size() * 2 + 2);
    problems_h = std::min(problems_h, ImGui::GetContentRegionAvail().y * 0.4f);

    ImGui::PushStyleColor(ImGuiCol_FrameBg, colour::canvas);
    const float text_h = std::max(ImGui::GetTextLineHeight() * 4, ImGui::GetContentRegionAvail().y - problems_h);
    ImGui::InputTextMultiline("##toml", toml.data(), toml.size() + 1, ImVec2(-FLT_MIN, text_h),
                              ImGuiInputTextFlags_ReadOnly);
    ImGui::PopStyleColor();

    if (!s.diagnostics.empty()) {
        ImGui::BeginChild("##problems", ImVec2(0, 0), false);
        ImGui::Spacing();
        ImGui::TextDisabled("Problems");
        for (const Diagnostic& d : s.diagnostics) text_wrapped_coloured(colour::error, format_diagnostic(d));
        ImGui::EndChild();
    }
}

}  // namespace ptd::studio::ui
