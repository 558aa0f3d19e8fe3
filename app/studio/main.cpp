// main.cpp — `ptd-studio`: the desktop planner. Loads a job (the embedded default when none
// is given), then opens the window; without a display it says so and prints the job's
// summary and rank layout in the terminal instead. Exit codes: 0 ok, 2 bad arguments or
// job, 1 a screenshot that could not be taken.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "app_window.h"
#include "cli_parse.h"
#include "launch_model.h"
#include "live_model.h"
#include "commands.h"
#include "studio_state.h"

namespace {

// One line per run for scripts and tests: what the Live panel received from each rank.
void print_live_summary(const ptd::studio::StudioState& s, FILE* out) {
    const auto& run = s.live.run;
    std::fprintf(out, "live: run %s, %s, %zu ranks, last step per rank:", run.manifest.run_id.c_str(), run.state.c_str(),
                 run.ranks.size());
    for (const auto& r : run.ranks) std::fprintf(out, " %d=%d", r.rank, r.last_step);
    std::fprintf(out, "\n");
    // The Schedule tab picks up the ended run's measured timeline (schedule_model.h).
    const auto& v = s.schedule;
    if (v.show_measured) {
        std::vector<int> ranks;
        for (const auto& b : v.measured)
            if (std::find(ranks.begin(), ranks.end(), b.row) == ranks.end()) ranks.push_back(b.row);
        std::fprintf(out, "schedule: measured timeline of %s, step %d, %zu ranks, %zu blocks\n", v.run_dir.c_str(),
                     v.measured_step, ranks.size(), v.measured.size());
    } else if (!v.measured_error.empty()) {
        std::fprintf(out, "schedule: no measured timeline: %s\n", v.measured_error.c_str());
    }
    // The rank grid's straggler marks (read when the layout tab was drawn).
    if (s.stragglers.report && s.layout) {
        std::fprintf(out, "grid: stragglers marked:");
        int marked = 0;
        for (int r = 0; r < s.layout->world; ++r)
            if (const auto* slow = ptd::studio::rank_straggler(s, r))
                ++marked, std::fprintf(out, " rank %d on %s (+%.0f%%)", r, ptd::studio::straggler_host(s, r).c_str(), slow->verdict.slower * 100);
        std::fprintf(out, marked ? "\n" : " none\n");
    }
}

bool env_set(const char* name) {
    const char* v = std::getenv(name);
    return v && *v;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"ptd-studio — plan hybrid-parallel (TP × PP × DP) training jobs: edit a job and see its rank layout.\n"
                 "Without a display it prints the job's layout in the terminal instead."};
    app.set_version_flag("--version", std::string("ptd-studio ") + PTD_VERSION);
    std::string job_arg = "@default", screenshot, panel = "layout", size = "1400x900", color_by = "tp";
    std::vector<std::string> sets;
    std::string mouse;
    int frames = 3, select = -1;
    app.add_option("--job", job_arg, "Job spec (TOML), or @default (7B on 4×8 H100) / @tiny")->capture_default_str();
    app.add_option("--screenshot", screenshot, "Render a few frames, save the window as this PNG and exit (needs a display; Xvfb works)");
    app.add_option("--frames", frames, "Frames to render before the screenshot")->check(CLI::Range(1, 1000))->capture_default_str();
    app.add_option("--panel", panel, "Tab to show first: layout, memory, planner, schedule, launch, live or job (the job file)")
        ->check(CLI::IsMember({"layout", "memory", "planner", "schedule", "launch", "live", "job", "compare"}))->capture_default_str();
    std::string compare_arg;
    app.add_option("--compare", compare_arg, "Pin this job's layout in the Compare tab, beside the job being edited");
    app.add_option("--size", size, "Window size WIDTHxHEIGHT")->capture_default_str();
    app.add_option("--color-by", color_by,
                   "Colour layout cells by TP group, PP stage, DP replica, CP rank, EP group, expert TP group or "
                   "predicted memory")
        ->check(CLI::IsMember({"tp", "pp", "dp", "cp", "ep", "expert_tp", "memory"}))->capture_default_str();
    app.add_option("--select", select, "Pin this rank: its groups (TP, PP, DP, and CP, EP, expert TP) are outlined");
    int replica = -1;
    app.add_option("--replica", replica, "Schedule tab: rows = the ranks of this data-parallel replica (default: the stages)")
        ->check(CLI::Range(0, 1 << 30));
    app.add_option("--set", sets, "Edit a number after loading, as in the job panel, e.g. --set parallel.tp=8 or --set training.tokens=15e12 (repeatable)");
    bool auto_launch = false;
    int launch_steps = 0;
    app.add_flag("--auto-launch", auto_launch,
                 "Press Launch at start (the Launch tab's job: the tiny local job unless the job runs on CPUs) and show "
                 "the Live tab; with --screenshot, the picture is taken once the run has ended");
    app.add_option("--steps", launch_steps, "With --auto-launch: stop the run after this step")->check(CLI::Range(1, 1 << 30));
    std::string run_dir;
    std::string timeline_dir;
    app.add_option("--timeline", timeline_dir, "Show this run directory's measured timeline (timeline/rank-*.tsv) under the prediction in the Schedule tab");
    app.add_option("--run", run_dir, "Open this run directory (ptd launch's runs/<run-id>) in the Live tab, followed while it runs");
    app.add_option("--mouse", mouse,
                   "With --screenshot: put the mouse at window pixel X,Y (shows hover and tooltips; renders at least "
                   "8 frames unless --frames says otherwise, as a tooltip needs a few to appear and size itself)");
    if (const std::optional<int> stop = ptd::parse_command_line(app, "ptd-studio", argc, argv)) return *stop;

    ptd::studio::WindowOptions wo;
    wo.screenshot = screenshot;
    // A tooltip appears a frame after its hover and sizes itself on the next: with the mouse
    // placed, the default 3 frames shot it before it showed (issue 33).
    wo.frames = !mouse.empty() && app.count("--frames") == 0 ? std::max(frames, 8) : frames;
    char x = 0;
    if (std::sscanf(size.c_str(), "%d%c%d", &wo.width, &x, &wo.height) != 3 || (x != 'x' && x != 'X') ||
        wo.width < 320 || wo.height < 240 || wo.width > 16384 || wo.height > 16384) {
        std::fprintf(stderr, "ptd-studio: error: --size: got \"%s\"; allowed: WIDTHxHEIGHT, at least 320x240, e.g. 1400x900\n",
                     size.c_str());
        return ptd::kExitConfig;
    }

    if (!mouse.empty() && std::sscanf(mouse.c_str(), "%f,%f", &wo.mouse_x, &wo.mouse_y) != 2) {
        std::fprintf(stderr, "ptd-studio: error: --mouse: got \"%s\"; allowed: X,Y in window pixels, e.g. 700,300\n",
                     mouse.c_str());
        return ptd::kExitConfig;
    }

    auto presets = ptd::load_presets();
    if (!presets) {
        std::fprintf(stderr, "%s", presets.error().str().c_str());
        return ptd::kExitConfig;
    }
    auto job = ptd::load_job_arg(job_arg, *presets);
    if (!job) {
        std::fprintf(stderr, "%s", job.error().str().c_str());
        std::fprintf(stderr, "ptd-studio: %s: %zu problem%s\n", job_arg.c_str(), job.error().diagnostics.size(),
                     job.error().diagnostics.size() == 1 ? "" : "s");
        return ptd::kExitConfig;
    }

    using namespace ptd::studio;
    StudioState state = make_state(*presets, *job);
    recent_load(state, recent_store_path());  // Open's recent files ($XDG_CONFIG_HOME/ptd-studio/recent)
    for (const std::string& kv : sets) {
        const auto eq = kv.find('=');
        int value = 0;
        const std::string key = kv.substr(0, eq);
        // The whole value must be an integer: sscanf("%d") took "8abc" as 8 and overflowed.
        const char* first = eq == std::string::npos ? nullptr : kv.c_str() + eq + 1;
        const char* last = kv.c_str() + kv.size();
        if (key == "training.tokens" || key == "cluster.gpu_hour_usd") {  // cost: the tab's two number fields
            double number = -1;
            const auto [end, ec] = first ? std::from_chars(first, last, number) : std::from_chars_result{last, std::errc::invalid_argument};
            if (ec != std::errc() || end != last || !edit_cost_input(state, key, number)) {
                std::fprintf(stderr, "ptd-studio: error: --set: got %s; allowed: %s=NUMBER, a number ≥ 0 (0 = not given)\n",
                             ptd::quote_input(kv).c_str(), key.c_str());
                return ptd::kExitConfig;
            }
            continue;
        }
        bool whole_int = false;
        if (first && first != last) {
            const auto [end, ec] = std::from_chars(first, last, value);
            whole_int = ec == std::errc() && end == last;
        }
        if (!whole_int || !find_int_field(key)) {
            std::string keys;
            for (const IntField& f : int_fields()) keys += std::string(keys.empty() ? "" : ", ") + f.key;
            std::fprintf(stderr, "ptd-studio: error: --set: got %s; allowed: KEY=INTEGER with KEY one of %s; "
                                 "training.tokens=NUMBER, cluster.gpu_hour_usd=NUMBER\n",
                         ptd::quote_input(kv).c_str(), keys.c_str());
            return ptd::kExitConfig;
        }
        edit_int(state, key, value);
    }
    if (!compare_arg.empty()) {
        auto other = ptd::load_job_arg(compare_arg, state.presets);
        if (!other) {
            std::fprintf(stderr, "%s", other.error().str().c_str());
            return ptd::kExitConfig;
        }
        std::string name = job_display_name(*other);  // the file's name, as the title shows the edited job's
        if (!compare_pin(state, std::move(*other), std::move(name))) {
            std::fprintf(stderr, "ptd-studio: error: --compare: %s has no valid layout to compare; allowed: a job with a "
                                 "[parallel] table that `ptd validate` accepts\n",
                         ptd::quote_input(compare_arg).c_str());
            return ptd::kExitConfig;
        }
    }
    state.select_tab = parse_main_tab(panel).value_or(MainTab::layout);
    state.view.colour_by = color_by == "pp"       ? ColourBy::pp
                           : color_by == "dp"     ? ColourBy::dp
                           : color_by == "cp"     ? ColourBy::cp
                           : color_by == "ep"     ? ColourBy::ep
                           : color_by == "expert_tp" ? ColourBy::expert_tp
                           : color_by == "memory" ? ColourBy::predicted_memory
                                                  : ColourBy::tp;
    if (select >= 0) {
        if (state.layout && select < state.layout->world) state.view.pinned = select;
        else std::fprintf(stderr, "ptd-studio: --select %d: the job has no such rank; nothing pinned\n", select);
    }

    if (!run_dir.empty()) {
        if (auto r = live_open_run_dir(state, run_dir); !r) {
            std::fprintf(stderr, "%s", r.error().str().c_str());
            return ptd::kExitConfig;
        }
        // Read what is there now (all of a finished run), so a screenshot shows it.
        for (int i = 0; i < 10000 && state.live.follower && live_tick(state); ++i) {
        }
        if (app.get_option("--panel")->count() == 0) state.select_tab = MainTab::live;
    }

    if (replica >= 0) {
        schedule_refresh(state);
        const int dp = state.layout ? state.layout->degree[ptd::DIM_DP] : 0;
        if (!state.schedule.predicted || replica >= dp) {
            std::fprintf(stderr, "ptd-studio: error: --replica %d: %s\n", replica,
                         state.schedule.predicted ? ("the job has " + std::to_string(dp) + " data-parallel replica" +
                                                     (dp == 1 ? "" : "s") + "; allowed: 0.." + std::to_string(dp - 1))
                                                        .c_str()
                                                  : "the job has no valid layout to draw");
            return ptd::kExitConfig;
        }
        schedule_set_rows(state, replica);
    }
    if (!timeline_dir.empty() && !schedule_load_measured(state, timeline_dir)) {
        std::fprintf(stderr, "%s", state.schedule.measured_error.c_str());
        return ptd::kExitConfig;
    }

    if (launch_steps > 0 && !auto_launch) {
        std::fprintf(stderr, "ptd-studio: error: --steps %d: only with --auto-launch (the Launch tab has its own stop step)\n",
                     launch_steps);
        return ptd::kExitConfig;
    }
    if (auto_launch && !env_set("DISPLAY") && !env_set("WAYLAND_DISPLAY")) {
        // Nothing would show the run, and the terminal fallback exits at once.
        std::fprintf(stderr, "ptd-studio: error: --auto-launch needs a display (DISPLAY is not set); "
                             "use `ptd launch JOB` in a terminal\n");
        return ptd::kExitConfig;
    }
    if (auto_launch) {
        state.launch.steps = launch_steps;
        if (!launch_start(state)) {
            std::fprintf(stderr, "ptd-studio: --auto-launch: %s\n", state.launch.banner.c_str());
            return ptd::kExitConfig;
        }
        if (app.count("--panel") == 0) state.select_tab = MainTab::live;
    }

    std::string reason;
    if (!env_set("DISPLAY") && !env_set("WAYLAND_DISPLAY")) {
        reason = "DISPLAY is not set";
    } else {
        const WindowResult r = run_window(state, wo);
        if (auto_launch) print_live_summary(state, stdout);
        if (!r.no_display) return r.exit_code;
        reason = r.error;
    }

    if (!screenshot.empty()) {
        std::fprintf(stderr,
                     "ptd-studio: cannot take a screenshot: no display available (%s); run it under a display "
                     "server, e.g. xvfb-run -s '-screen 0 1600x1000x24' ptd-studio --screenshot %s\n",
                     reason.c_str(), screenshot.c_str());
        return ptd::kExitRuntime;
    }
    std::fprintf(stderr, "ptd-studio: no display available (%s); showing the job in the terminal instead\n",
                 reason.c_str());
    std::fflush(stderr);
    if (!job_valid(state) && no_layout_message(state).empty()) {  // only --set can make it so
        std::fprintf(stderr, "%s", ptd::format_diagnostics(state.diagnostics).c_str());
        return ptd::kExitConfig;
    }
    return ptd::print_job_overview(state.job, stdout, stderr);
}
