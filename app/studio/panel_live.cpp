// panel_live.cpp — the Live tab: a run launched from the Launch tab or opened from a run
// directory, as a status strip of its ranks and five plots over steps (loss, tokens/s and
// step time with the estimator's prediction dashed and its interval shaded, MFU, memory by
// category with the prediction dashed) beside a card of the speed prediction and where it
// comes from. The plots share one
// step range (follow the tail, or paused: wheel zoom, drag pan, double-click reset) and
// one crosshair; the legend toggles lines, which are ranks or, per TP group, PP stage or
// all ranks, the median drawn over the min-max band with the outlier ranks drawn and named. All state and data live in live_model.h; this file only draws and routes input.
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <imgui.h>
#include <imgui_stdlib.h>

#include "plot.h"
#include "ui.h"

namespace ptd::studio::ui {
namespace {

ImU32 state_colour(const std::string& state) {
    if (state == "running") return colour::accent;
    if (state == "done" || state == "finished") return colour::ok;
    if (state == "lost" || state == "stopped") return colour::warning;
    if (state == "starting") return colour::text_dim;
    return colour::error;  // "exit N", "failed"
}

// The recent run directories under the Launch tab's run root and ./runs, newest first.
std::vector<std::string> recent_runs(const StudioState& s) {
    std::vector<std::string> out = live_recent_run_dirs(s.launch.run_root.empty() ? "runs" : s.launch.run_root, 8);
    if (s.launch.run_root != "runs")
        for (std::string& d : live_recent_run_dirs("runs", 8))
            if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(std::move(d));
    return out;
}

void open_dir(StudioState& s, const std::string& dir) {
    auto r = live_open_run_dir(s, dir);
    s.live.view.open_error = r ? "" : r.error().str();
    if (r) {
        s.live.view.open_path = dir;
        ImGui::CloseCurrentPopup();
    }
}

// The path field, Open, and the recent runs (shown in the popup and in the empty state).
void open_run_form(StudioState& s, bool& first_frame) {
    static std::vector<std::string> recent;
    if (first_frame) {
        recent = recent_runs(s);
        first_frame = false;
    }
    LiveView& v = s.live.view;
    ImGui::TextUnformatted("Run directory");
    ImGui::SetNextItemWidth(std::min(520.0f, ImGui::GetContentRegionAvail().x - 80));
    const bool enter = ImGui::InputTextWithHint("##run_dir", "runs/<run-id>", &v.open_path,
                                                ImGuiInputTextFlags_EnterReturnsTrue);
    ImGui::SameLine();
    if ((ImGui::Button("Open") || enter) && !v.open_path.empty()) open_dir(s, v.open_path);
    if (!v.open_error.empty()) text_wrapped_coloured(colour::error, v.open_error);
    ImGui::Spacing();
    if (recent.empty()) {
        ImGui::TextDisabled("No run directories under ./%s yet.", s.launch.run_root.empty() ? "runs" : s.launch.run_root.c_str());
        return;
    }
    ImGui::TextDisabled("Recent runs");
    for (const std::string& d : recent) {
        std::string label = d;
        if (auto m = read_manifest(d)) {
            label += "   " + m->job_name + ", " + std::to_string(m->world_size) + " ranks, " + m->state;
        }
        if (ImGui::Selectable(label.c_str(), false)) {
            v.open_path = d;
            open_dir(s, d);
        }
    }
}

void open_run_button(StudioState& s) {
    static bool first = true;
    if (ImGui::Button("Open run...")) {
        first = true;
        s.live.view.open_error.clear();
        ImGui::OpenPopup("##open_run");
    }
    if (ImGui::BeginPopup("##open_run")) {
        open_run_form(s, first);
        ImGui::EndPopup();
    }
}

void empty_state(StudioState& s) {
    ImGui::Spacing();
    ImGui::TextUnformatted("No run loaded.");
    ImGui::TextDisabled("Launch the job from the Launch tab, or open a run directory (ptd launch writes one per run).");
    ImGui::Spacing();
    ImGui::Separator();
    ImGui::Spacing();
    static bool first = true;
    static uint64_t seen = ~0ull;
    if (seen != s.live.run.revision) first = true;  // re-list after a run ended elsewhere
    seen = s.live.run.revision;
    open_run_form(s, first);
}

// Which job the run belongs to, beside the job the editor holds, and a button that loads the
// run's job.toml into the editor (asking first about unsaved changes).
void job_line(StudioState& s) {
    const std::string file = live_run_job_file(s);
    if (file.empty()) return;
    const bool same = live_run_job_in_editor(s);
    ImGui::AlignTextToFramePadding();
    ImGui::TextDisabled("job %s (%s)%s%s", s.live.run.manifest.job_name.c_str(), file.c_str(),
                        same ? ": the one in the editor" : "; the editor holds ", same ? "" : job_title(s).c_str());
    if (same) return;
    ImGui::SameLine();
    if (ImGui::SmallButton("Load it into the editor")) {
        if (std::string e = request_open(s, file); !e.empty()) s.live.view.open_error = e;
    }
}

void header(StudioState& s) {
    const LiveRun& run = s.live.run;
    open_run_button(s);
    ImGui::SameLine(0, 14);
    ImGui::AlignTextToFramePadding();
    ImGui::PushStyleColor(ImGuiCol_Text, colour::accent);
    ImGui::TextUnformatted(run.manifest.run_id.empty() ? "run" : run.manifest.run_id.c_str());
    ImGui::PopStyleColor();
    ImGui::SameLine(0, 10);
    ImGui::TextUnformatted(run.manifest.job_name.c_str());
    ImGui::SameLine(0, 10);
    ImGui::PushStyleColor(ImGuiCol_Text, state_colour(run.state));
    ImGui::TextUnformatted(run.state.c_str());
    ImGui::PopStyleColor();
    ImGui::SameLine(0, 10);
    if (run.steps_total > 0) ImGui::Text("step %d / %d", run.max_step, run.steps_total);
    else ImGui::Text("step %d", run.max_step);
    char where[400];
    std::snprintf(where, sizeof where, "%zu rank%s on %zu host%s, %s", run.ranks.size(), run.ranks.size() == 1 ? "" : "s",
                  run.manifest.hosts.size(), run.manifest.hosts.size() == 1 ? "" : "s",
                  s.live.dir.empty() ? "launched here" : s.live.dir.c_str());
    flow_same_line(ImGui::CalcTextSize(where).x, 14);
    ImGui::TextDisabled("%s", where);
    if (s.live.follower && run.live && s.live.bytes_read > 0) {
        flow_same_line(ImGui::CalcTextSize("reading 0000.0 MB").x, 14);
        ImGui::TextDisabled("reading %.1f MB", (double)s.live.bytes_read / 1e6);
    }
    if (!run.reason.empty() && run.state != "finished")
        text_wrapped_coloured(run.state == "stopped" ? colour::warning : colour::error, run.reason);
}

// One dot per rank coloured by state; with few ranks also its step and last loss.
void status_strip(StudioState& s) {
    const LiveRun& run = s.live.run;
    const int n = (int)run.ranks.size();
    const float h = ImGui::GetTextLineHeight();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    // Counts by state, then the strip.
    int running = 0, done = 0, failed = 0, waiting = 0;
    for (const LiveRank& r : run.ranks) {
        if (r.state == "running") ++running;
        else if (r.state == "done") ++done;
        else if (r.state == "starting") ++waiting;
        else ++failed;
    }
    ImGui::TextDisabled("Ranks:");
    auto count = [&](int k, const char* what, ImU32 col) {
        if (k == 0) return;
        ImGui::SameLine(0, 10);
        ImGui::PushStyleColor(ImGuiCol_Text, col);
        ImGui::Text("%d %s", k, what);
        ImGui::PopStyleColor();
    };
    count(waiting, "starting", colour::text_dim);
    count(running, "running", colour::accent);
    count(done, "done", colour::ok);
    count(failed, "failed or lost", colour::error);

    const bool chips = n <= 16;
    for (int i = 0; i < n; ++i) {
        const LiveRank& r = run.ranks[(size_t)i];
        char text[96];
        if (chips) {
            if (r.has_step) std::snprintf(text, sizeof text, "%d  step %d  loss %.3f", i, r.last_step, r.last_loss);
            else std::snprintf(text, sizeof text, "%d  %s", i, r.state.c_str());
        } else {
            text[0] = 0;
        }
        const float w = chips ? h + 4 + ImGui::CalcTextSize(text).x : h * 0.9f;
        if (i > 0) flow_same_line(w, chips ? 16 : 3);
        const ImVec2 p = ImGui::GetCursorScreenPos();
        ImGui::PushID(i);
        ImGui::InvisibleButton("##rank", ImVec2(w, h));
        const bool hovered = ImGui::IsItemHovered();
        if (ImGui::IsItemClicked()) s.live.view.log_rank = i;
        ImGui::PopID();
        const float rad = h * 0.32f;
        const ImVec2 c(p.x + h * 0.45f, p.y + h * 0.5f);
        dl->AddCircleFilled(c, rad, state_colour(r.state), 12);
        if (hovered || s.live.view.log_rank == i) dl->AddCircle(c, rad + 2, IM_COL32(235, 238, 245, 200), 12, 1.0f);
        if (chips) dl->AddText(ImVec2(p.x + h + 4, p.y), ImGui::GetColorU32(ImGuiCol_Text), text);
        if (hovered) {
            ImGui::BeginTooltip();
            const std::string host = r.host >= 0 && r.host < (int)run.manifest.hosts.size() ? run.manifest.hosts[(size_t)r.host] : "?";
            ImGui::Text("rank %d  (tp %d, pp %d, dp %d)  on %s, local rank %d", i, r.tp, r.pp, r.dp, host.c_str(), r.local_rank);
            ImGui::PushStyleColor(ImGuiCol_Text, state_colour(r.state));
            ImGui::Text("%s%s", r.state.c_str(), r.pid > 0 ? ("  pid " + std::to_string(r.pid)).c_str() : "");
            ImGui::PopStyleColor();
            if (r.has_step) ImGui::Text("step %d, loss %.4f", r.last_step, r.last_loss);
            if (r.has_memory) ImGui::Text("memory %s", format_value(r.mem_total, PlotUnit::bytes).c_str());
            if (!r.error.empty()) text_wrapped_coloured(colour::error, r.error);
            ImGui::TextDisabled("click: show its log below");
            ImGui::EndTooltip();
        }
    }
}

void toolbar(StudioState& s) {
    LiveState& live = s.live;
    ImGui::AlignTextToFramePadding();
    ImGui::TextDisabled("Lines");
    for (LiveAggregate a : {LiveAggregate::rank, LiveAggregate::tp_group, LiveAggregate::pp_stage, LiveAggregate::all}) {
        ImGui::SameLine();
        if (ImGui::RadioButton(live_aggregate_label(a), live.view.aggregate == a)) live_set_aggregate(live, a);
    }
    ImGui::SameLine(0, 24);
    ImGui::TextDisabled("Memory");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(ImGui::CalcTextSize("communication").x + ImGui::GetFrameHeight() + 12);
    if (ImGui::BeginCombo("##mem_cat", mem_cat_name((MemCat)live.view.mem_cat))) {
        for (int c = 0; c < MEM_CAT_COUNT; ++c)
            if (ImGui::Selectable(mem_cat_name((MemCat)c), live.view.mem_cat == c)) live.view.mem_cat = c;
        ImGui::EndCombo();
    }
    ImGui::SameLine(0, 24);
    if (live.view.follow) {
        if (ImGui::Button("Pause")) live_set_follow(live, false);
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("Stop following the newest steps (dragging a plot pauses too)");
    } else {
        if (ImGui::Button("Follow")) live_set_follow(live, true);
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("Follow the newest steps again");
    }
    ImGui::SameLine();
    if (ImGui::Button("Reset")) live_reset_view(live);
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("Show every step and follow the tail (or double-click a plot)");
    const StepRange r = live_x_range(live);
    char range[96];
    std::snprintf(range, sizeof range, "%s steps %.0f-%.0f", live.view.follow ? "following," : "paused,", r.lo, r.hi);
    flow_same_line(ImGui::CalcTextSize(range).x, 12);
    ImGui::AlignTextToFramePadding();
    ImGui::TextDisabled("%s", range);
}

void legend(StudioState& s) {
    LiveState& live = s.live;
    const std::vector<LiveGroup>& lines = live_lines(live);
    ImGui::AlignTextToFramePadding();
    ImGui::TextDisabled("Show");
    ImGui::SameLine();
    if (ImGui::SmallButton("all")) live_show_all(live, true);
    ImGui::SameLine();
    if (ImGui::SmallButton("none")) live_show_all(live, false);
    const float h = ImGui::GetTextLineHeight();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const bool short_labels = live.view.aggregate == LiveAggregate::rank && lines.size() > 16;
    for (int i = 0; i < (int)lines.size(); ++i) {
        const LiveGroup& g = lines[(size_t)i];
        char label[48];
        if (short_labels) std::snprintf(label, sizeof label, "%d", g.id);
        else std::snprintf(label, sizeof label, "%s", g.label.c_str());
        const float w = h + 4 + ImGui::CalcTextSize(label).x;
        flow_same_line(w, i == 0 ? 12 : 10);
        const ImVec2 p = ImGui::GetCursorScreenPos();
        ImGui::PushID(i);
        if (ImGui::InvisibleButton("##line", ImVec2(w, h))) live_toggle_line(live, i);
        const bool hovered = ImGui::IsItemHovered();
        ImGui::PopID();
        const bool on = live_line_visible(live, i);
        const ImU32 col = group_colour(g.id);
        const ImVec2 a(p.x + 1, p.y + 2), b(p.x + h - 1, p.y + h - 2);
        if (on) dl->AddRectFilled(a, b, col, 2.0f);
        else dl->AddRect(a, b, col, 2.0f, 0, 1.5f);
        dl->AddText(ImVec2(p.x + h + 4, p.y), on ? ImGui::GetColorU32(ImGuiCol_Text) : colour::text_dim, label);
        if (hovered) {
            ImGui::BeginTooltip();
            ImGui::TextUnformatted(g.label.c_str());
            if (g.members.size() > 1) {
                std::string m = "median of ranks ";
                for (size_t k = 0; k < g.members.size() && k < 12; ++k) m += (k ? ", " : "") + std::to_string(g.members[k]);
                if (g.members.size() > 12) m += ", ...";
                ImGui::TextUnformatted(m.c_str());
            }
            ImGui::TextDisabled("click: %s", on ? "hide" : "show");
            ImGui::EndTooltip();
        }
    }
}

struct PlotDef {
    LiveMetric metric;
    PlotUnit unit;
    bool zero_based;
};
constexpr std::array<PlotDef, kLiveMetricCount> kPlots = {{{LiveMetric::loss, PlotUnit::number, false},
                                                           {LiveMetric::tokens_per_s, PlotUnit::per_second, true},
                                                           {LiveMetric::step_time, PlotUnit::seconds, true},
                                                           {LiveMetric::mfu, PlotUnit::fraction, true},
                                                           {LiveMetric::memory, PlotUnit::bytes, true}}};

// "55.1 ms - 80.2 ms" of an interval, in the plot's unit (the studio's font has no "…").
std::string interval_text(const PlotLevel& l, PlotUnit unit) {
    return format_value(l.lo, unit) + " - " + format_value(l.hi, unit);
}

void readout_tooltip(StudioState& s, const PlotDef& d, std::vector<LiveReadoutRow> rows) {
    LiveState& live = s.live;
    if (rows.empty()) return;
    const std::vector<LiveGroup>& lines = live_lines(live);
    ImGui::BeginTooltip();
    ImGui::Text("step %d", rows.front().step);
    ImGui::SameLine(0, 12);
    ImGui::TextDisabled("%s%s%s", live_metric_title(d.metric), d.metric == LiveMetric::memory ? ": " : "",
                        d.metric == LiveMetric::memory ? mem_cat_name((MemCat)live.view.mem_cat) : "");
    if (const std::optional<PlotLevel> level = live_predicted_level(live.run, d.metric)) {
        ImGui::TextDisabled("predicted %s%s", format_value(level->value, d.unit).c_str(),
                            level->has_band ? (", interval " + interval_text(*level, d.unit)).c_str() : ", no interval");
    }
    constexpr size_t kMaxRows = 12;
    if (rows.size() > kMaxRows) {
        // Many lines: the spread first, then the highest ones.
        double sum = 0;
        for (const LiveReadoutRow& r : rows) sum += r.value;
        std::sort(rows.begin(), rows.end(), [](const LiveReadoutRow& a, const LiveReadoutRow& b) { return a.value > b.value; });
        ImGui::Text("%zu lines: min %s, mean %s, max %s", rows.size(), format_value(rows.back().value, d.unit).c_str(),
                    format_value(sum / (double)rows.size(), d.unit).c_str(), format_value(rows.front().value, d.unit).c_str());
    }
    const float h = ImGui::GetTextLineHeight();
    for (size_t k = 0; k < rows.size() && k < kMaxRows; ++k) {
        const LiveReadoutRow& r = rows[k];
        const ImVec2 p = ImGui::GetCursorScreenPos();
        ImGui::GetWindowDrawList()->AddRectFilled(ImVec2(p.x, p.y + 3), ImVec2(p.x + h - 6, p.y + h - 3),
                                                  group_colour(lines[(size_t)r.line].id), 2.0f);
        ImGui::Dummy(ImVec2(h - 4, h));
        ImGui::SameLine();
        ImGui::Text("%-12s %s", lines[(size_t)r.line].label.c_str(), format_value(r.value, d.unit).c_str());
        if (std::isfinite(r.predicted)) {
            ImGui::SameLine();
            ImGui::TextDisabled("predicted %s (%+.1f%%)", format_value(r.predicted, d.unit).c_str(),
                                r.predicted > 0 ? (r.value - r.predicted) / r.predicted * 100 : 0.0);
        }
    }
    if (rows.size() > kMaxRows) ImGui::TextDisabled("... and %zu more (highest shown)", rows.size() - kMaxRows);
    ImGui::EndTooltip();
}

// The speed prediction the dashed lines show: each figure with its interval and the latest
// measurement beside it, where the figures come from, and where the interval comes from (or
// why there is none).
void prediction_card(StudioState& s, ImVec2 size) {
    const LiveRun& run = s.live.run;
    ImGui::BeginChild("##prediction", size, true);
    ImGui::TextUnformatted("Predicted speed");
    ImGui::SameLine(0, 8);
    help_marker("estimate_job of the run's job with its cluster profile (the one the launch recorded), the same figures "
                "`ptd estimate` prints and `ptd watch` shows. The shaded band is its interval (docs/estimators.md, "
                "\"Error bars\"); where it has none, none is drawn and the card says why.");
    ImGui::Separator();
    if (!run.prediction) {
        ImGui::TextDisabled("No prediction for this run.");
    } else if (!run.prediction->available) {
        text_wrapped_coloured(colour::warning, "No prediction: " + run.prediction->why_none);
    } else {
        const RunPrediction& p = *run.prediction;
        for (const LiveMetric m : {LiveMetric::step_time, LiveMetric::tokens_per_s}) {
            const PlotUnit unit = m == LiveMetric::step_time ? PlotUnit::seconds : PlotUnit::per_second;
            const PlotLevel level = *live_predicted_level(run, m);
            ImGui::Text("%-10s %s", live_metric_title(m), format_value(level.value, unit).c_str());
            if (level.has_band) {
                ImGui::SameLine();
                ImGui::TextDisabled("[%s]", interval_text(level, unit).c_str());
            }
            if (const std::optional<double> measured = live_recent_median(run, m); measured && level.value > 0) {
                const bool miss = level.has_band && (*measured < level.lo || *measured > level.hi);
                // Green inside the interval, orange outside; without an interval, no verdict.
                ImGui::PushStyleColor(ImGuiCol_Text, !level.has_band ? ImGui::GetColorU32(ImGuiCol_Text)
                                                     : miss          ? colour::warning
                                                                     : colour::ok);
                ImGui::Text("  measured %s, %.2f×%s", format_value(*measured, unit).c_str(), *measured / level.value,
                            miss ? ", outside" : level.has_band ? ", inside" : "");
                if (ImGui::IsItemHovered())
                    ImGui::SetTooltip("The median over every rank's last 5 steps, %.2f times the prediction%s",
                                      *measured / level.value,
                                      miss ? "; outside its interval" : level.has_band ? "; inside its interval" : "");
                ImGui::PopStyleColor();
            }
        }
        ImGui::Spacing();
        ImGui::PushTextWrapPos(0);
        ImGui::TextDisabled("%s", display_text("from the " + prediction_source_text(p)).c_str());
        ImGui::TextDisabled("%s", display_text(prediction_interval_text(p)).c_str());
        if (!p.note.empty()) text_wrapped_coloured(colour::warning, p.note);
        ImGui::PopTextWrapPos();
    }
    ImGui::EndChild();
}

void plots(StudioState& s, ImVec2 size) {
    LiveState& live = s.live;
    const std::vector<LiveGroup>& lines = live_lines(live);
    const StepRange xr = live_x_range(live);
    const float gap = ImGui::GetStyle().ItemSpacing.x;
    // Three columns, two rows: the five plots, then the prediction card.
    const ImVec2 cell((size.x - 2 * gap) / 3.0f, (size.y - gap) * 0.5f);
    int visible = 0;
    for (int i = 0; i < (int)lines.size(); ++i) visible += live_line_visible(live, i);

    static std::vector<PlotSeries> series;
    std::optional<double> hover;
    for (size_t k = 0; k < kPlots.size(); ++k) {
        const PlotDef& d = kPlots[k];
        series.clear();
        // Grouped lines: first each group's min-max band, under every median line.
        const bool grouped = live.view.aggregate != LiveAggregate::rank;
        for (int i = 0; grouped && i < (int)lines.size(); ++i) {
            if (!live_line_visible(live, i)) continue;
            const SeriesView band = live_line_band(live, i, d.metric);
            PlotSeries b{band.steps, band.values, (group_colour(lines[(size_t)i].id) & 0x00FFFFFFu) | 0x48000000u};
            b.band = true;
            series.push_back(b);
        }
        for (int i = 0; i < (int)lines.size(); ++i) {
            if (!live_line_visible(live, i)) continue;
            const ImU32 col = group_colour(lines[(size_t)i].id);
            const SeriesView v = live_line_series(live, i, d.metric, false);
            series.push_back({v.steps, v.values, col, false, v.pyramid});
        }
        // The outliers of each group: their own lines, in the error colour, named in the subtitle.
        const std::vector<LiveOutlier> outliers = live_outliers(live, d.metric);
        std::string outlier_names;
        for (const LiveOutlier& o : outliers) {
            if (!live_line_visible(live, o.line)) continue;
            const SeriesView v = live_rank_series(live.run.ranks[(size_t)o.rank], d.metric, live.view.mem_cat, false);
            series.push_back({v.steps, v.values, colour::error, false, v.pyramid});
            outlier_names += (outlier_names.empty() ? "outliers: rank " : ", ") + std::to_string(o.rank);
        }
        if (d.metric == LiveMetric::memory) {
            for (int i = 0; i < (int)lines.size(); ++i) {
                if (!live_line_visible(live, i)) continue;
                const SeriesView p = live_line_series(live, i, d.metric, true);
                series.push_back({p.steps, p.values, (group_colour(lines[(size_t)i].id) & 0x00FFFFFFu) | 0xD0000000u, true,
                                  p.pyramid});
            }
        }
        const std::optional<PlotLevel> level = live_predicted_level(live.run, d.metric);
        char subtitle[160] = "";
        if (d.metric == LiveMetric::memory)
            std::snprintf(subtitle, sizeof subtitle, "%s, predicted dashed", mem_cat_name((MemCat)live.view.mem_cat));
        else if (d.metric == LiveMetric::mfu) std::snprintf(subtitle, sizeof subtitle, "of the GPU preset's peak");
        const bool mean = grouped && d.metric != LiveMetric::memory;
        if (level)  // grouped lines are medians; the prediction is the job's either way
            std::snprintf(subtitle, sizeof subtitle, "%spredicted dashed%s", mean ? "median, min-max band; " : "",
                          level->has_band ? ", interval shaded" : mean ? "" : " (no interval)");
        else if (mean)
            std::snprintf(subtitle, sizeof subtitle, "median, min-max band");
        if (!outlier_names.empty()) {  // first, so a narrow plot cuts the rest, not the names
            const std::string with = outlier_names + "; " + subtitle;
            std::snprintf(subtitle, sizeof subtitle, "%s", with.c_str());
        }
        PlotOptions opt;
        opt.title = live_metric_title(d.metric);
        opt.subtitle = subtitle[0] ? subtitle : nullptr;
        opt.y_unit = d.unit;
        opt.zero_based = d.zero_based;
        opt.x_lo = xr.lo;
        opt.x_hi = xr.hi;
        opt.crosshair = live.view.hover_step;
        // The lines' data changes with the run, the grouping and the memory category.
        opt.data_revision = live.run.revision ^ ((uint64_t)live.view.mem_cat << 56) ^ ((uint64_t)live.view.aggregate << 60);
        opt.thickness = visible > 8 ? 1.0f : 2.0f;
        opt.empty_text = visible == 0 ? "every line is hidden" : "no steps yet";
        opt.level = level;
        opt.markers = live.run.restart_steps;
        if (k % 3 != 0) ImGui::SameLine(0, gap);
        ImGui::PushID((int)k);
        const PlotInput in = line_plot("##plot", opt, series, cell);
        ImGui::PopID();
        if (in.hovered) {
            // The crosshair snaps to the step the readout shows.
            std::vector<LiveReadoutRow> rows = live_readout(live, d.metric, in.mouse_step);
            hover = rows.empty() ? in.mouse_step : (double)rows.front().step;
            if (in.wheel != 0) live_zoom(live, in.mouse_step, in.wheel);
            if (in.double_clicked) live_reset_view(live);
            if (!ImGui::IsMouseDragging(ImGuiMouseButton_Left, 2.0f)) readout_tooltip(s, d, std::move(rows));
        }
        if (in.drag_steps != 0) live_pan(live, in.drag_steps);
    }
    live.view.hover_step = hover;
    ImGui::SameLine(0, gap);
    prediction_card(s, cell);
}

// The chosen rank's last lines (the Launch tab's console has filters; this is for runs
// opened from a directory).
void rank_log(StudioState& s, float height) {
    LiveRun& run = s.live.run;
    if (run.ranks.empty()) return;
    int& r = s.live.view.log_rank;
    r = std::clamp(r, 0, (int)run.ranks.size() - 1);
    ImGui::AlignTextToFramePadding();
    ImGui::TextDisabled("Log of rank");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 7);
    if (ImGui::InputInt("##log_rank", &r)) r = std::clamp(r, 0, (int)run.ranks.size() - 1);
    const LiveRank& rank = run.ranks[(size_t)r];
    ImGui::SameLine(0, 12);
    ImGui::TextDisabled("%zu lines%s", rank.log.size(), rank.log_dropped ? " (older ones dropped)" : "");
    ImGui::BeginChild("##log", ImVec2(0, height), false, ImGuiWindowFlags_HorizontalScrollbar);
    const bool at_end = ImGui::GetScrollY() >= ImGui::GetScrollMaxY() - 1;
    ImGuiListClipper clip;
    clip.Begin((int)rank.log.size());
    while (clip.Step())
        for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
            const LiveLogLine& l = rank.log[(size_t)i];
            ImGui::PushStyleColor(ImGuiCol_Text, l.is_stderr ? colour::warning : ImGui::GetColorU32(ImGuiCol_Text));
            ImGui::TextUnformatted(l.text.c_str(), l.text.c_str() + l.text.size());
            ImGui::PopStyleColor();
        }
    if (at_end) ImGui::SetScrollHereY(1.0f);  // stick to the newest line
    ImGui::EndChild();
}

}  // namespace

void draw_live_panel(StudioState& s) {
    if (!s.live.run.active) {
        empty_state(s);
        return;
    }
    header(s);
    job_line(s);
    status_strip(s);
    ImGui::Spacing();
    toolbar(s);
    legend(s);
    ImGui::Spacing();
    // The log takes a fixed strip at the bottom when open.
    const float log_h = ImGui::GetTextLineHeightWithSpacing() * 7;
    const float header_h = ImGui::GetFrameHeightWithSpacing();
    static bool log_open = false;
    const float reserve = header_h + (log_open ? log_h + ImGui::GetFrameHeightWithSpacing() + 4 : 0);
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    plots(s, ImVec2(avail.x, std::max(200.0f, avail.y - reserve)));
    log_open = ImGui::CollapsingHeader("Rank log");
    if (log_open) rank_log(s, log_h);
}

}  // namespace ptd::studio::ui
