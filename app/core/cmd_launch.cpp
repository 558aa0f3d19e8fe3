// cmd_launch.cpp — `ptd launch JOB`: plan the ranks, start them (locally or over SSH) and
// show one status line per rank until the run ends; Ctrl-C stops every rank on every host.
// On a TTY the status block is redrawn in place; otherwise each step prints plain lines.
#include "cmd_launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <set>

#include "cmd_calibrate.h"
#include "commands.h"
#include "ptd/common/file_read.h"
#include "ptd/hostfile.h"
#include "ptd/launch.h"
#include "ptd/run_dir.h"
#include "run_prediction.h"
#include "run_view.h"
#include "straggler_view.h"
#include "term.h"

namespace ptd {
namespace {

volatile sig_atomic_t g_interrupts = 0;
void on_interrupt(int) { g_interrupts = g_interrupts + 1; }

// SIGINT/SIGTERM/SIGHUP set a flag the event loop reads; restored on scope exit.
struct InterruptGuard {
    struct sigaction old[3];
    static constexpr int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    InterruptGuard() {
        g_interrupts = 0;
        struct sigaction sa{};
        sa.sa_handler = on_interrupt;
        sigemptyset(&sa.sa_mask);
        for (int i = 0; i < 3; ++i) sigaction(sigs[i], &sa, &old[i]);
    }
    ~InterruptGuard() {
        for (int i = 0; i < 3; ++i) sigaction(sigs[i], &old[i], nullptr);
    }
};

// The status block on a TTY: erased and redrawn in place; messages go above it.
struct LiveBlock {
    FILE* out;
    int lines_shown = 0;
    void erase() {
        if (lines_shown > 0) std::fprintf(out, "\x1b[%dA\r\x1b[J", lines_shown);
        lines_shown = 0;
    }
    void draw(const std::string& block) {
        erase();
        std::fputs(block.c_str(), out);
        if (!block.empty() && block.back() != '\n') std::fputc('\n', out);
        for (char c : block) lines_shown += c == '\n';
        if (!block.empty() && block.back() != '\n') ++lines_shown;
        std::fflush(out);
    }
};

}  // namespace

int write_slurm(const LaunchPlan& plan, FILE* out, FILE* err) {
    auto writer = RunDirWriter::create(plan.run_dir, plan.job_toml, initial_manifest(plan));
    if (!writer) {
        std::fprintf(err, "%s", writer.error().str().c_str());
        return kExitRuntime;
    }
    const std::string path = plan.run_dir + "/sbatch.sh";
    // A new file in the run's own new directory: O_EXCL, never another file.
    if (auto w = write_new_file(path, slurm_script(plan), 0755); !w) {
        std::fprintf(err, "ptd launch: %s\n", w.error().one_line().c_str());
        return kExitRuntime;
    }
    chmod(path.c_str(), 0755);  // the umask may have narrowed it
    std::fprintf(out, "wrote %s (%zu ranks on %zu nodes)\nsubmit: sbatch %s\nwatch:  ptd watch %s\n", path.c_str(),
                 plan.ranks.size(), plan.hosts.size(), shell_quote(path).c_str(), shell_quote(plan.run_dir).c_str());
    return kExitOk;
}

Result<std::string> hosts_without(const std::string& path, const std::vector<std::string>& names) {
    if (path.empty())
        return fail(SourceLoc{}, "--exclude-hosts", "needs --hosts FILE: the hostfile to leave hosts out of");
    auto text = read_regular_file(path, file_kind::hostfile, "--hosts");
    if (!text) return std::unexpected(text.error());
    auto entries = parse_hostfile(*text, path);
    if (!entries) return std::unexpected(entries.error());
    std::set<std::string> left(names.begin(), names.end());
    std::string kept, all;
    int line = 0;
    std::string rest = *text;
    for (size_t at = 0; at <= rest.size();) {
        const size_t nl = rest.find('\n', at);
        const std::string l = rest.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
        ++line;
        bool drop = false;
        for (const HostEntry& e : *entries)
            if (e.line == line && left.count(e.host)) drop = true, left.erase(e.host);
        if (!drop) kept += l + "\n";
        if (nl == std::string::npos) break;
        at = nl + 1;
    }
    for (const HostEntry& e : *entries) all += (all.empty() ? "" : ", ") + e.host;
    if (!left.empty())
        return fail(SourceLoc{path}, "--exclude-hosts",
                    "got " + quote_input(*left.begin()) + ", which the hostfile does not list; allowed: " + all);
    return kept;
}

Result<LaunchOptions> launch_options(const LaunchArgs& a) {
    LaunchOptions opts;
    opts.hostfile = a.hosts;
    if (a.upload) opts.upload = true;
    if (a.accept_new_host_keys) opts.accept_new_host_keys = true;
    opts.steps = a.steps;
    opts.run_root = a.run_root;
    opts.run_id = a.run_id;
    opts.local_engine = a.engine;
    opts.known_hosts = a.known_hosts;
    opts.ssh_config = a.ssh_config;
    opts.master_addr = a.master_addr;
    opts.engine_args = a.engine_args;
    opts.backend = a.backend;
    opts.slurm = a.slurm;
    opts.max_restarts = a.max_restarts;
    opts.checkpoint_every = a.checkpoint_every;
    opts.exclude_failed = a.exclude_failed;
    if (!a.exclude_hosts.empty()) {
        auto kept = hosts_without(a.hosts, a.exclude_hosts);
        if (!kept) return std::unexpected(kept.error());
        opts.hostfile.clear();
        opts.hosts_text = *kept;
        opts.hosts_label = a.hosts + " without " + std::to_string(a.exclude_hosts.size()) + " excluded host(s)";
    }
    return opts;
}

int cmd_launch(const LaunchArgs& a, const PresetCatalog& presets, FILE* out, FILE* err) {
    auto job = load_job_arg(a.job, presets, a.sets);
    if (!job) {
        std::fprintf(err, "%s", job.error().str().c_str());
        return kExitConfig;
    }
    auto opts = launch_options(a);
    if (!opts) {
        std::fprintf(err, "%s", opts.error().str().c_str());
        return kExitConfig;
    }
    if (a.preflight && !a.dry_run && !a.slurm) {
        // The same hosts, ranks and engine, probing quickly (docs/launcher.md, "Preflight").
        CalibrateArgs check;
        check.launch = a;
        check.launch.engine_args.clear();
        check.launch.steps = 0;
        if (!a.run_id.empty()) check.launch.run_id = a.run_id + "-preflight";
        check.check = true;
        const int rc = cmd_calibrate(check, presets, out, err);
        if (rc == kExitConfig) return rc;
        if (rc != kExitOk && !a.force) {
            std::fprintf(err, "ptd launch: the preflight %s; not launching (--force launches anyway, --exclude-hosts leaves hosts out)\n",
                         rc == kExitRuntime ? "flagged a host or failed" : "failed");
            return rc;
        }
        if (rc != kExitOk) std::fprintf(err, "ptd launch: --force: launching despite the preflight\n");
    }
    // The profile of the dashboard's speed prediction: refused before anything starts, as
    // `ptd estimate` refuses it.
    auto profile = load_job_profile(*job, a.profile);
    if (!profile) {
        std::fprintf(err, "%s", profile.error().str().c_str());
        return kExitConfig;
    }
    auto plan = make_launch_plan(*job, *opts);
    if (!plan) {
        std::fprintf(err, "%s", plan.error().str().c_str());
        return kExitConfig;
    }
    if (*profile) plan->profile = profile_record(**profile);
    if (a.dry_run) {
        std::fputs(format_dry_run(*plan).c_str(), out);
        // What a real launch would refuse before starting a rank (a GPU job here without GPUs).
        if (std::string refusal = a.slurm ? "" : local_gpu_refusal(*plan); !refusal.empty()) {
            std::fprintf(err, "%s\n", format_diagnostic({plan->job.where("cluster.gpu"), "cluster.gpu", refusal}).c_str());
            return kExitRuntime;  // as the real launch: the job is valid, this machine cannot run it
        }
        return kExitOk;
    }
    if (a.slurm) return write_slurm(*plan, out, err);

    const Term term = detect_term(out);
    const bool live = isatty(fileno(out)) && term.width > 20;
    RunView view(initial_manifest(*plan));
    view.set_prediction(predict_run(plan->job, *profile));
    const std::string run_dir = plan->run_dir;
    const std::string started_line = "ptd launch: run " + plan->run_id + ": " + std::to_string(plan->ranks.size()) +
                                     " rank(s) on " + std::to_string(plan->hosts.size()) + " host(s); logs in " + run_dir;

    InterruptGuard guard;
    auto launcher = Launcher::start(std::move(*plan));
    if (!launcher) {
        std::fprintf(err, "%s", launcher.error().str().c_str());
        return kExitRuntime;
    }
    std::fprintf(err, "%s\n", started_line.c_str());
    // A pipe gets the prediction once, above the rank lines of every step.
    if (!live) std::fprintf(out, "%s\n", view.prediction_line(false).c_str());
    Launcher& run = **launcher;
    LiveBlock block{out};
    auto message = [&](const std::string& text) {
        if (live) block.erase();
        std::fprintf(err, "%s\n", text.c_str());
        std::fflush(err);
    };
    LiveStragglers stragglers;  // under the live table as soon as the ranks' timelines tell
    const RunManifest hosts_of_run = initial_manifest(run.plan());  // which host each rank is on
    int interrupts_seen = 0;
    auto last_draw = std::chrono::steady_clock::now() - std::chrono::seconds(1);
    bool dirty = true;
    LaunchEvent ev;
    for (;;) {
        if (g_interrupts != interrupts_seen) {
            if (interrupts_seen == 0)
                message(yellow(term, "ptd launch: interrupted: stopping every rank (TERM, then KILL after " +
                                         std::to_string((int)run.plan().job.launch.grace_s) + " s)"));
            interrupts_seen = g_interrupts;
            run.stop();
        }
        if (!run.next_event(ev, 0.1)) {
            if (run.finished()) break;
        } else {
            view.apply(ev);
            dirty = true;
            switch (ev.kind) {
                case LaunchEventKind::host_connecting:
                case LaunchEventKind::host_ready:
                    if (!run.plan().local) message("ptd launch: host " + run.plan().hosts[ev.host].display + ": " + ev.text);
                    break;
                case LaunchEventKind::host_failed:
                    message(red(term, "ptd launch: host " + run.plan().hosts[ev.host].display + ": " + ev.text));
                    break;
                case LaunchEventKind::stopping: message(yellow(term, "ptd launch: " + ev.text)); break;
                case LaunchEventKind::restart: message(yellow(term, "ptd launch: " + ev.text)); break;
                case LaunchEventKind::metric:
                    if (ev.metric->kind == MetricKind::warning || ev.metric->kind == MetricKind::error)
                        message((ev.metric->kind == MetricKind::error ? red(term, "rank " + std::to_string(ev.rank) + ": ")
                                                                      : yellow(term, "rank " + std::to_string(ev.rank) + ": ")) +
                                ev.metric->message);
                    else if (!live && ev.metric->kind == MetricKind::step)
                        std::fprintf(out, "%s\n", view.rank_line(ev.rank, false, false).c_str());
                    break;
                case LaunchEventKind::finished: break;
                default: break;
            }
            if (ev.kind == LaunchEventKind::finished) break;
        }
        const auto now = std::chrono::steady_clock::now();
        if (live && dirty && now - last_draw > std::chrono::milliseconds(200)) {
            block.draw(view.render(term.color, term.width, true) + stragglers.text(run_dir, hosts_of_run, term));
            last_draw = now;
            dirty = false;
        }
    }
    const int rc = run.wait();
    const LaunchOutcome o = run.outcome();
    if (live) block.erase();
    // A pipe or file gets the whole lines; a terminal gets lines that fit it.
    std::fputs(view.render(term.color, live ? term.width : 1000, live).c_str(), out);
    std::fflush(out);
    if (o.stopped_by_user) {
        std::fprintf(err, "ptd launch: stopped; every rank is gone. Logs: %s\n", run_dir.c_str());
    } else if (rc != 0) {
        std::fprintf(err, "%s\n", red(term, "ptd launch: failed: " + o.reason).c_str());
        if (!o.last_stderr.empty()) {
            std::fprintf(err, "last stderr lines of rank %d:\n", o.failed_rank);
            for (const std::string& l : o.last_stderr) std::fprintf(err, "  | %s\n", l.c_str());
        }
        std::fprintf(err, "every other rank was stopped. Logs: %s\n", run_dir.c_str());
    } else {
        std::fprintf(err, "%s\n", green(term, "ptd launch: done: every rank finished. Logs: " + run_dir).c_str());
    }
    // The slow rank, if any, from the ranks' measured timelines (a failed run's too: a
    // straggler may be why it was stopped).
    if (auto manifest = read_manifest(run_dir)) {
        std::fputs(run_straggler_text(run_dir, *manifest, term).c_str(), out);
        // The run's goodput, when it could restart or did (restart.h).
        if (manifest->goodput && (manifest->max_restarts > 0 || !manifest->restarts.empty()))
            std::fprintf(out, "%s\n", goodput_text(*manifest->goodput).c_str());
    }
    return rc;
}

}  // namespace ptd
