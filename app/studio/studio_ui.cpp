// studio_ui.cpp — one frame of the whole window: a top bar, the job panel on the left and
// the main area's tabs on the right. No docking in imgui 1.86: fixed child windows.
#include <algorithm>
#include <cstdio>

#include "ui.h"

namespace ptd::studio::ui {
namespace {

void top_bar(const StudioState& s) {
    ImGui::PushStyleColor(ImGuiCol_Text, colour::accent);
    ImGui::TextUnformatted("PTD Studio");
    ImGui::PopStyleColor();
    ImGui::SameLine();
    ImGui::TextDisabled("%s", PTD_VERSION);
    ImGui::SameLine(0, 24);
    ImGui::TextUnformatted(job_title(s).c_str());  // "*" = unsaved changes
    ImGui::SameLine(0, 16);
    char buf[200];
    std::snprintf(buf, sizeof buf, "%s, %s parameters on %d GPUs", s.job.model.name.c_str(),
                  human_count((double)s.params.total).c_str(), s.job.world_size());
    ImGui::TextDisabled("%s", buf);
    ImGui::SameLine(0, 16);
    if (job_valid(s)) {
        ImGui::PushStyleColor(ImGuiCol_Text, colour::ok);
        ImGui::TextUnformatted("valid");
    } else if (std::string why = no_layout_message(s); !why.empty()) {
        ImGui::PushStyleColor(ImGuiCol_Text, colour::accent);
        ImGui::TextUnformatted(display_text(why).c_str());
    } else {
        ImGui::PushStyleColor(ImGuiCol_Text, colour::error);
        ImGui::Text("%zu problem%s", s.diagnostics.size(), s.diagnostics.size() == 1 ? "" : "s");
    }
    ImGui::PopStyleColor();
}

}  // namespace

void draw_studio(StudioState& s, const Frame& f) {
    const ImGuiViewport* vp = ImGui::GetMainViewport();
    ImGui::SetNextWindowPos(vp->WorkPos);
    ImGui::SetNextWindowSize(vp->WorkSize);
    const ImGuiWindowFlags host = ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                                  ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoBringToFrontOnFocus;
    ImGui::Begin("##studio", nullptr, host);
    top_bar(s);
    ImGui::Spacing();

    const ImGuiWindowFlags child = ImGuiWindowFlags_AlwaysUseWindowPadding;
    const float job_w = std::clamp(vp->WorkSize.x * 0.4f, 240.0f, f.job_panel_w);
    ImGui::BeginChild("##job_panel", ImVec2(job_w, 0), false, child | ImGuiWindowFlags_NoScrollbar);
    draw_job_panel(s);
    ImGui::EndChild();

    ImGui::SameLine();
    ImGui::BeginChild("##main", ImVec2(0, 0), false, child | ImGuiWindowFlags_NoScrollbar);
    if (ImGui::BeginTabBar("##tabs")) {
        auto flags = [&](MainTab t) {
            return s.select_tab && *s.select_tab == t ? ImGuiTabItemFlags_SetSelected : ImGuiTabItemFlags_None;
        };
        struct Tab {
            const char* label;
            MainTab tab;
            void (*draw)(StudioState&);
        };
        static constexpr Tab tabs[] = {{"Rank layout", MainTab::layout, draw_layout_panel},
                                       {"Memory & speed", MainTab::memory, draw_memory_panel},
                                       {"Planner", MainTab::planner, draw_planner_panel},
                                       {"Schedule", MainTab::schedule, draw_schedule_panel},
                                       {"Compare", MainTab::compare, draw_compare_panel},
                                       {"Launch", MainTab::launch, draw_launch_panel},
                                       {"Live", MainTab::live, draw_live_panel},
                                       {"Job file", MainTab::job_file, draw_job_file_panel}};
        for (const Tab& t : tabs)
            if (ImGui::BeginTabItem(t.label, nullptr, flags(t.tab))) {
                s.tab = t.tab;
                ImGui::Spacing();
                t.draw(s);
                ImGui::EndTabItem();
            }
        ImGui::EndTabBar();
    }
    s.select_tab.reset();
    ImGui::EndChild();
    ImGui::End();
}

}  // namespace ptd::studio::ui
