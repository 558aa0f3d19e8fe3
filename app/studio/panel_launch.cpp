// panel_launch.cpp — the Launch tab: which job, where (local or SSH hosts with user, key,
// host-key and upload choices), the dry-run preview, Launch / Stop, per-host and per-rank
// status dots, error banners and a per-rank log console. All logic is in launch_model.
#include <algorithm>
#include <cstdio>

#include "launch_model.h"
#include "ui.h"

#include <imgui_stdlib.h>  // after imgui.h (ui.h), which it needs

namespace ptd::studio::ui {
namespace {

ImU32 state_colour(const std::string& state) {
    if (state == "running" || state == "connecting") return colour::accent;
    if (state == "done" || state == "ready") return colour::ok;
    if (state == "lost" || state == "failed" || state.rfind("exit", 0) == 0) return colour::error;
    return colour::text_dim;  // starting, waiting
}

// A filled dot on the current line, InvisibleButton-sized so it can carry a tooltip.
bool status_dot(const char* id, ImU32 col, float d = 12) {
    const ImVec2 p = ImGui::GetCursorScreenPos();
    ImGui::InvisibleButton(id, ImVec2(d, d));
    ImGui::GetWindowDrawList()->AddCircleFilled(ImVec2(p.x + d / 2, p.y + d / 2), d / 2 - 1, col);
    return ImGui::IsItemHovered();
}

void banner(LaunchState& l) {
    if (l.banner.empty()) return;
    ImGui::PushStyleColor(ImGuiCol_ChildBg, IM_COL32(70, 24, 28, 255));
    const float lines = 2.0f + (float)std::min<size_t>(l.banner_lines.size(), 12) +
                        (float)std::count(l.banner.begin(), l.banner.end(), '\n');
    ImGui::BeginChild("##banner", ImVec2(0, lines * ImGui::GetTextLineHeightWithSpacing() + 12), true);
    ImGui::PushStyleColor(ImGuiCol_Text, colour::error);
    ImGui::TextWrapped("%s", display_text(l.banner).c_str());
    ImGui::PopStyleColor();
    if (!l.banner_lines.empty()) {
        ImGui::TextDisabled("last stderr lines of the failing rank:");
        const size_t from = l.banner_lines.size() > 12 ? l.banner_lines.size() - 12 : 0;
        for (size_t i = from; i < l.banner_lines.size(); ++i)
            ImGui::TextUnformatted(display_text("  | " + l.banner_lines[i]).c_str());
    }
    ImGui::EndChild();
    ImGui::PopStyleColor();
    if (ImGui::SmallButton("Dismiss")) {
        l.banner.clear();
        l.banner_lines.clear();
    }
}

void job_choice(StudioState& s) {
    LaunchState& l = s.launch;
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(colour::accent), "JOB");
    char label[256];
    std::snprintf(label, sizeof label, "the job being edited: %s (%s, %d ranks, %s)", s.job_label.c_str(),
                  s.job.model.name.c_str(), s.job.world_size(), s.job.cluster.gpu.name.c_str());
    if (ImGui::RadioButton(display_text(label).c_str(), l.which == LaunchWhich::edited)) l.which = LaunchWhich::edited;
    if (l.tiny_job) {
        std::snprintf(label, sizeof label, "the tiny local job: %s on %d CPU ranks (tp %d, pp %d) - runs on any laptop",
                      l.tiny_job->model.name.c_str(), l.tiny_job->world_size(), l.tiny_job->parallel.tp,
                      l.tiny_job->parallel.pp);
        if (ImGui::RadioButton(label, l.which == LaunchWhich::tiny)) l.which = LaunchWhich::tiny;
    }
}

void where(StudioState& s) {
    LaunchState& l = s.launch;
    ImGui::Spacing();
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(colour::accent), "WHERE");
    ImGui::SameLine();
    help_marker("Leave the hosts empty to run where the job says (launch.mode; the tiny job runs every rank "
                "as a child process of this machine). One line per host runs the ranks over SSH: "
                "[user@]host[:port] slots=N, as in a DeepSpeed hostfile.");
    ImGui::InputTextMultiline("##hosts", &l.hosts_text, ImVec2(-FLT_MIN, ImGui::GetTextLineHeight() * 4.5f));
    if (l.hosts_text.empty()) {
        const ImVec2 r = ImGui::GetItemRectMin();
        ImGui::GetWindowDrawList()->AddText(ImVec2(r.x + 6, r.y + 4), colour::text_dim,
                                            "hosts: empty = local; e.g.  alice@node-a:22 slots=8");
    }
    // SSH settings mean nothing for a local run: shown, but greyed out.
    const bool local = launch_is_local(s);
    ImGui::BeginDisabled(local);
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted("SSH user");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(200);
    ImGui::InputTextWithHint("##user", "~/.ssh/config, else yours", &l.user);
    ImGui::SameLine(0, 20);
    ImGui::TextUnformatted("key");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(240);
    ImGui::InputTextWithHint("##key", "agent, else ~/.ssh/id_*", &l.identity);
    ImGui::Checkbox("accept new host keys", &l.accept_new_host_keys);
    ImGui::SameLine();
    help_marker("Record the key of a host known_hosts does not know yet. A changed key is always refused.");
    ImGui::SameLine(0, 24);
    ImGui::Checkbox("upload ptd-engine", &l.upload);
    ImGui::SameLine();
    help_marker("Copy this machine's ptd-engine to every host over SFTP and check its SHA-256 there.");
    ImGui::EndDisabled();
    ImGui::SameLine(0, 24);
    ImGui::SetNextItemWidth(110);
    ImGui::InputInt("stop step", &l.steps);
    l.steps = std::max(0, l.steps);
    ImGui::SameLine();
    help_marker("0 = the job's training.steps");
    ImGui::SameLine(0, 24);
    ImGui::Checkbox("on CPUs (--backend cpu)", &l.backend_cpu);
    ImGui::SameLine();
    help_marker("Run the job's layout on the hosts' CPUs on purpose. Without it a GPU job refuses to start where "
                "its hosts have no GPU (a CPU job runs on CPUs either way).");
}

void buttons(StudioState& s) {
    LaunchState& l = s.launch;
    const bool running = launch_running(s);
    const std::string blocked = launch_blocked_reason(s);
    ImGui::Spacing();
    ImGui::BeginDisabled(!blocked.empty());
    ImGui::PushStyleColor(ImGuiCol_Button, IM_COL32(40, 110, 70, 255));
    if (ImGui::Button("  Launch  ")) launch_start(s);
    ImGui::PopStyleColor();
    ImGui::EndDisabled();
    if (!blocked.empty() && ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
        ImGui::SetTooltip("%s", display_text(blocked).c_str());
    ImGui::SameLine();
    // Red only while there is something to stop: a red Stop beside no run read as enabled.
    ImGui::BeginDisabled(!running);
    if (running) ImGui::PushStyleColor(ImGuiCol_Button, IM_COL32(130, 50, 50, 255));
    if (ImGui::Button("  Stop  ")) launch_stop(s);
    if (running) ImGui::PopStyleColor();
    ImGui::EndDisabled();
    ImGui::SameLine();
    if (ImGui::Button("Preview commands")) launch_preview(s);
    ImGui::SameLine(0, 16);
    if (!blocked.empty() && !running) {
        ImGui::PushStyleColor(ImGuiCol_Text, colour::warning);
        const std::string first = blocked.substr(0, blocked.find('\n'));
        ImGui::TextUnformatted(display_text(first).c_str());
        ImGui::PopStyleColor();
    } else if (running) {
        ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(colour::accent), "running: %s", l.run_dir.c_str());
    } else if (l.outcome) {
        ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(l.outcome->exit_code == 0 ? colour::ok : colour::error),
                           "%s (exit %d): %s", l.outcome->exit_code == 0 ? "finished" : l.outcome->stopped_by_user ? "stopped" : "failed",
                           l.outcome->exit_code, l.run_dir.c_str());
    }
}

void status(StudioState& s) {
    LaunchState& l = s.launch;
    const LiveRun& run = s.live.run;
    if (l.hosts.empty()) return;
    ImGui::Spacing();
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(colour::accent), "HOSTS");
    for (size_t h = 0; h < l.hosts.size(); ++h) {
        const HostStatus& hs = l.hosts[h];
        ImGui::PushID((int)h);
        if (status_dot("##host", state_colour(hs.state))) ImGui::SetTooltip("%s", display_text(hs.message).c_str());
        ImGui::SameLine();
        ImGui::Text("%s", hs.display.c_str());
        ImGui::SameLine();
        ImGui::TextDisabled("%s%s%s", hs.state.c_str(), hs.message.empty() ? "" : ": ", display_text(hs.message).c_str());
        ImGui::PopID();
    }
    if (run.ranks.empty()) return;
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(colour::accent), "RANKS");
    ImGui::SameLine();
    ImGui::TextDisabled("(click a dot to show its log)");
    const float d = 14, gap = 4;
    const float avail = ImGui::GetContentRegionAvail().x;
    const int per_line = std::max(1, (int)(avail / (d + gap)));
    for (size_t r = 0; r < run.ranks.size(); ++r) {
        const LiveRank& rk = run.ranks[r];
        if (r % per_line != 0) ImGui::SameLine(0, gap);
        ImGui::PushID((int)r);
        const bool hovered = status_dot("##rank", state_colour(rk.state), d);
        if (ImGui::IsItemClicked()) l.console_rank = (int)r;
        if ((int)r == l.console_rank) {
            const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
            ImGui::GetWindowDrawList()->AddCircle(ImVec2((a.x + b.x) / 2, (a.y + b.y) / 2), d / 2 + 1, colour::tp_outline);
        }
        if (hovered) {
            const std::string host = rk.host < (int)l.hosts.size() ? l.hosts[rk.host].display : "?";
            ImGui::SetTooltip("rank %d (tp %d, pp %d, dp %d) on %s\n%s, step %d", rk.rank, rk.tp, rk.pp, rk.dp,
                              host.c_str(), rk.state.c_str(), rk.last_step);
        }
        ImGui::PopID();
    }
}

void console(StudioState& s) {
    LaunchState& l = s.launch;
    const int ranks = (int)s.live.run.ranks.size();
    if (ranks == 0) return;
    ImGui::Spacing();
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(colour::accent), "LOG");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(120);
    char current[32];
    std::snprintf(current, sizeof current, "rank %d", l.console_rank);
    if (ImGui::BeginCombo("##rank", current)) {
        for (int r = 0; r < ranks; ++r) {
            char item[32];
            std::snprintf(item, sizeof item, "rank %d", r);
            if (ImGui::Selectable(item, r == l.console_rank)) l.console_rank = r;
        }
        ImGui::EndCombo();
    }
    ImGui::SameLine();
    ImGui::SetNextItemWidth(220);
    ImGui::InputTextWithHint("##filter", "filter", &l.console_filter);
    ImGui::SameLine();
    ImGui::Checkbox("stderr only", &l.console_stderr_only);
    ImGui::SameLine();
    ImGui::Checkbox("follow", &l.console_follow);

    const auto lines = console_lines(s);
    ImGui::PushStyleColor(ImGuiCol_ChildBg, colour::canvas);
    ImGui::BeginChild("##console", ImVec2(0, std::max(120.0f, ImGui::GetContentRegionAvail().y - 90)), true,
                      ImGuiWindowFlags_HorizontalScrollbar);
    ImGuiListClipper clip;
    clip.Begin((int)lines.size());
    while (clip.Step())
        for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
            // The engine logs to stderr; only its errors and warnings stand out.
            const std::string& t = *lines[i].text;
            const ImU32 col = !lines[i].is_stderr                        ? colour::text_dim
                              : t.find("error") != std::string::npos     ? colour::error
                              : t.find("warning") != std::string::npos   ? colour::warning
                                                                         : ImGui::GetColorU32(ImGuiCol_Text);
            ImGui::PushStyleColor(ImGuiCol_Text, col);
            ImGui::TextUnformatted(t.c_str());
            ImGui::PopStyleColor();
        }
    if (l.console_follow && ImGui::GetScrollY() < ImGui::GetScrollMaxY()) ImGui::SetScrollHereY(1.0f);
    ImGui::EndChild();
    ImGui::PopStyleColor();
}

void messages_and_preview(StudioState& s) {
    LaunchState& l = s.launch;
    if (!l.messages.empty()) {
        const size_t from = l.messages.size() > 4 ? l.messages.size() - 4 : 0;
        for (size_t i = from; i < l.messages.size(); ++i) ImGui::TextDisabled("%s", display_text(l.messages[i]).c_str());
    }
    if (!l.preview.empty() && ImGui::CollapsingHeader("Dry run: each host's commands", ImGuiTreeNodeFlags_DefaultOpen)) {
        ImGui::PushStyleColor(ImGuiCol_Text, l.preview_ok ? ImGui::GetColorU32(ImGuiCol_Text) : colour::error);
        ImGui::InputTextMultiline("##preview", &l.preview, ImVec2(-FLT_MIN, ImGui::GetTextLineHeight() * 10),
                                  ImGuiInputTextFlags_ReadOnly);
        ImGui::PopStyleColor();
    }
}

}  // namespace

void draw_launch_panel(StudioState& s) {
    banner(s.launch);
    job_choice(s);
    where(s);
    buttons(s);
    messages_and_preview(s);
    status(s);
    console(s);
}

}  // namespace ptd::studio::ui
