// launch_model.cpp — the Launch panel's logic: job and hosts → plan → Launcher, and the
// launcher's events → Live panel data, host status and banners, on the UI thread.
#include "launch_model.h"

#include <chrono>

#include "commands.h"
#include "live_model.h"
#include "ptd/run_dir.h"
#include "studio_state.h"

namespace ptd::studio {

void launch_init(StudioState& s) {
    if (!s.launch.tiny_job) {
        auto tiny = load_job_arg("@tiny", s.presets);
        if (tiny) s.launch.tiny_job = std::move(*tiny);
    }
    // The default planning job is 7B on H100s: what a laptop can run is the tiny job.
    const bool runnable_here = s.job.cluster.gpu.name == "cpu" && s.job.launch.mode == LaunchMode::local;
    s.launch.which = runnable_here || !s.launch.tiny_job ? LaunchWhich::edited : LaunchWhich::tiny;
}

Result<JobSpec> launch_job(const StudioState& s) {
    JobSpec job;
    if (s.launch.which == LaunchWhich::tiny) {
        if (!s.launch.tiny_job) return fail(SourceLoc{"@tiny"}, "", "the built-in tiny job could not be loaded");
        job = *s.launch.tiny_job;
    } else {
        if (std::string why = no_layout_message(s); !why.empty())
            return fail(SourceLoc{s.job_label}, "parallel", why + " first: a launch needs tp, pp and dp");
        if (!job_valid(s))
            return fail(SourceLoc{s.job_label}, "",
                        "the job has " + std::to_string(s.diagnostics.size()) + " problem" +
                            (s.diagnostics.size() == 1 ? "" : "s") + "; fix them in the job panel first");
        job = s.job;
    }
    const LaunchState& l = s.launch;
    if (!l.user.empty()) job.launch.user = l.user;
    if (!l.identity.empty()) job.launch.identity = l.identity;
    return job;
}

static bool has_hosts(const std::string& text);

Result<LaunchPlan> launch_plan_for(const StudioState& s) {
    auto job = launch_job(s);
    if (!job) return std::unexpected(job.error());
    const LaunchState& l = s.launch;
    LaunchOptions o;
    o.hosts_text = l.hosts_text;
    o.hosts_label = "hosts (Launch panel)";
    if (!has_hosts(l.hosts_text)) o.hosts_text.clear();  // blank lines and comments only
    o.upload = l.upload;
    o.accept_new_host_keys = l.accept_new_host_keys;
    o.steps = l.steps;
    if (l.backend_cpu) o.backend = "cpu";
    o.run_root = l.run_root.empty() ? "runs" : l.run_root;
    return make_launch_plan(*job, o);
}

std::string launch_blocked_reason(StudioState& s) {
    if (launch_running(s)) return "a run is in progress; stop it first";
    LaunchState& l = s.launch;
    const std::string key = std::to_string(s.revision) + "|" + std::to_string((int)l.which) + "|" + l.hosts_text + "|" +
                            l.user + "|" + l.identity + "|" + std::to_string(l.upload) + std::to_string(l.backend_cpu) + std::to_string(l.steps) + "|" +
                            l.run_root;
    if (key != l.blocked_key) {
        auto plan = launch_plan_for(s);
        l.blocked_reason = plan ? "" : plan.error().str();
        l.blocked_key = key;
    }
    return l.blocked_reason;
}

static bool has_hosts(const std::string& text) {
    for (size_t i = 0, e; i < text.size(); i = e + 1) {
        e = text.find('\n', i);
        if (e == std::string::npos) e = text.size();
        const size_t first = text.find_first_not_of(" \t\r", i);
        if (first != std::string::npos && first < e && text[first] != '#') return true;
    }
    return false;
}

bool launch_is_local(const StudioState& s) {
    if (has_hosts(s.launch.hosts_text)) return false;
    const JobSpec* job = s.launch.which == LaunchWhich::tiny && s.launch.tiny_job ? &*s.launch.tiny_job : &s.job;
    return job->launch.mode == LaunchMode::local;
}

void launch_preview(StudioState& s) {
    auto plan = launch_plan_for(s);
    s.launch.preview_ok = (bool)plan;
    s.launch.preview = plan ? format_dry_run(*plan) : plan.error().str();
}

bool launch_running(const StudioState& s) { return s.launch.launcher && !s.launch.launcher->finished(); }

bool launch_start(StudioState& s) {
    LaunchState& l = s.launch;
    if (launch_running(s)) return false;
    l.banner.clear();
    l.banner_lines.clear();
    l.outcome.reset();
    l.messages.clear();
    auto plan = launch_plan_for(s);
    if (!plan) {
        l.banner = plan.error().str();
        return false;
    }
    // The cluster profile of the Live tab's speed prediction (the job's cluster.profile):
    // one that cannot be used stops the launch, as `ptd launch` refuses it.
    auto profile = load_job_profile(plan->job);
    if (!profile) {
        l.banner = profile.error().str();
        return false;
    }
    if (*profile) plan->profile = profile_record(**profile);
    RunPrediction prediction = predict_run(plan->job, *profile);
    const RunManifest manifest = initial_manifest(*plan);
    l.hosts.clear();
    for (const HostPlan& h : plan->hosts) l.hosts.push_back({h.display, plan->local ? "ready" : "waiting", ""});
    l.run_dir = plan->run_dir;
    auto started = Launcher::start(std::move(*plan));
    if (!started) {
        l.banner = started.error().str();
        return false;
    }
    l.launcher = std::shared_ptr<Launcher>(std::move(*started));
    live_begin(s.live.run, manifest);
    live_set_aggregate(s.live, live_default_aggregate((int)s.live.run.ranks.size()));
    s.live.run.prediction = std::move(prediction);
    s.live.run.live = true;
    // The edited job's own ranks: the rank grid turns into a live memory heatmap.
    if (l.which == LaunchWhich::edited) s.view.colour_by = ColourBy::live_memory;
    l.messages.push_back("run " + manifest.run_id + ": " + std::to_string(manifest.ranks.size()) + " rank(s) on " +
                         std::to_string(manifest.hosts.size()) + " host(s); logs in " + l.run_dir);
    l.console_rank = 0;
    return true;
}

void launch_stop(StudioState& s) {
    if (launch_running(s)) {
        s.launch.launcher->stop();
        s.launch.messages.push_back("stop requested: TERM to every rank, KILL after the grace period");
    }
}

bool launch_tick(StudioState& s) {
    LaunchState& l = s.launch;
    if (!l.launcher) return false;
    bool changed = false;
    LaunchEvent ev;
    // Bounded per frame so a flood of output cannot stall drawing; the rest waits a frame.
    for (int n = 0; n < 20000 && l.launcher->next_event(ev, 0); ++n) {
        changed = true;
        HostStatus* host = ev.host >= 0 && ev.host < (int)l.hosts.size() ? &l.hosts[ev.host] : nullptr;
        switch (ev.kind) {
            case LaunchEventKind::host_connecting:
                if (host) host->state = "connecting", host->message = ev.text;
                break;
            case LaunchEventKind::host_ready:
                if (host) host->state = "ready", host->message = ev.text;
                l.messages.push_back((host ? host->display + ": " : "") + ev.text);
                break;
            case LaunchEventKind::host_failed:
                if (host) host->state = "failed", host->message = ev.text;
                l.messages.push_back((host ? host->display + ": " : "") + ev.text);
                if (l.banner.empty()) l.banner = (host ? "host " + host->display + ": " : "") + ev.text;
                break;
            case LaunchEventKind::stopping: l.messages.push_back(ev.text); break;
            case LaunchEventKind::restart: l.messages.push_back(ev.text); break;
            case LaunchEventKind::finished: {
                const LaunchOutcome o = l.launcher->outcome();
                l.outcome = o;
                l.messages.push_back(o.exit_code == 0 ? "finished: every rank exited 0"
                                     : o.stopped_by_user ? "stopped: every rank is gone"
                                                         : "failed (exit " + std::to_string(o.exit_code) + "): " + o.reason);
                if (o.exit_code != 0 && !o.stopped_by_user) {
                    l.banner = o.reason.empty() ? "the run failed with exit code " + std::to_string(o.exit_code) : o.reason;
                    l.banner_lines = o.last_stderr;
                    if (o.failed_rank >= 0) l.console_rank = o.failed_rank;
                }
                break;
            }
            default: break;
        }
        live_apply(s.live.run, ev);
        if (ev.kind == LaunchEventKind::finished) s.live.run.live = false;
    }
    return changed;
}

std::vector<ConsoleLine> console_lines(const StudioState& s) {
    std::vector<ConsoleLine> out;
    const LaunchState& l = s.launch;
    const auto& ranks = s.live.run.ranks;
    if (l.console_rank < 0 || l.console_rank >= (int)ranks.size()) return out;
    for (const LiveLogLine& line : ranks[l.console_rank].log) {
        if (l.console_stderr_only && !line.is_stderr) continue;
        if (!l.console_filter.empty() && line.text.find(l.console_filter) == std::string::npos) continue;
        out.push_back({line.is_stderr, &line.text});
    }
    return out;
}

}  // namespace ptd::studio
