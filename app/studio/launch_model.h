// launch_model.h — the Launch panel's view-model: which job to run and where (local, or
// hosts over SSH with user, key, host-key and upload choices), the dry-run preview, and a
// running launch. The launcher's own threads run the ranks; launch_tick drains their
// events on the UI thread without blocking and feeds them to the Live panel's LiveRun,
// the per-host status and the error banners. No ImGui here: tests drive it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ptd/launch.h"

namespace ptd::studio {

struct StudioState;

// Which job the Launch button runs.
enum class LaunchWhich {
    edited,  // the job in the job panel
    tiny,    // the built-in tiny GPT on 4 local CPU ranks (works on any laptop)
};

struct HostStatus {
    std::string display;    // "user@host:port" or "localhost (local)"
    std::string state;      // "waiting", "connecting", "ready", "failed"
    std::string message;    // the launcher's last word on it
};

struct LaunchState {
    LaunchWhich which = LaunchWhich::tiny;
    std::optional<JobSpec> tiny_job;  // @tiny, loaded by launch_init

    // Where: empty hosts text = the job's own hosts/mode; otherwise one DeepSpeed hostfile
    // line per host ("[user@]host[:port] slots=N"), which means SSH.
    std::string hosts_text;
    std::string user;                 // overrides launch.user when not empty
    std::string identity;             // overrides launch.identity when not empty
    bool accept_new_host_keys = false;
    bool upload = false;
    // --backend cpu: run a GPU job's layout on CPUs on purpose (without it, a GPU job where
    // the hosts have no GPU refuses to start: launch.h local_gpu_refusal).
    bool backend_cpu = false;
    int steps = 0;                    // 0 = the job's training.steps
    std::string run_root = "runs";

    std::string preview;              // dry run text of the last Preview, or its error
    bool preview_ok = false;

    // The running (or last) launch.
    std::shared_ptr<Launcher> launcher;
    std::string run_dir;
    std::vector<HostStatus> hosts;
    std::vector<std::string> messages;   // launcher-level log: hosts, stopping, finished
    std::optional<LaunchOutcome> outcome;  // set when the run finished
    std::string banner;               // error shown on top: auth, host key, rank died
    std::vector<std::string> banner_lines;  // the failing rank's last stderr lines

    std::string blocked_key, blocked_reason;  // launch_blocked_reason's cache

    // Log console.
    int console_rank = 0;
    std::string console_filter;
    bool console_stderr_only = false;
    bool console_follow = true;
};

// Loads the tiny job and picks the default: the edited job when it is a local CPU job,
// else the tiny one (the default planning job is 7B on H100s).
void launch_init(StudioState& s);

// The job the Launch button would run, with the panel's options applied (user, identity,
// accept/upload), or why there is none.
Result<JobSpec> launch_job(const StudioState& s);
// Why Launch is disabled ("" = enabled): an invalid job, a run in progress, bad hosts.
// Planning costs file lookups and a port probe, so the answer is cached until the job or
// a launch option changes (it is asked every frame).
std::string launch_blocked_reason(StudioState& s);
// The plan Launch would start (hosts text parsed as a hostfile).
Result<LaunchPlan> launch_plan_for(const StudioState& s);

// Whether Launch would run every rank on this machine (no hosts given, a local job).
bool launch_is_local(const StudioState& s);

// Fill s.launch.preview with the dry run of launch_plan_for (or its error).
void launch_preview(StudioState& s);
// Start the run: plan, Launcher::start, reset the Live panel's run. false + banner on error.
bool launch_start(StudioState& s);
// Ask the run to stop (TERM, KILL after grace); the launcher reports when all are gone.
void launch_stop(StudioState& s);
bool launch_running(const StudioState& s);

// Drain the launcher's events (never blocks). true if anything changed.
bool launch_tick(StudioState& s);

// Console lines of the chosen rank after the filter, oldest first.
struct ConsoleLine {
    bool is_stderr;
    const std::string* text;
};
std::vector<ConsoleLine> console_lines(const StudioState& s);

}  // namespace ptd::studio
