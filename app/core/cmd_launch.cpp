// cmd_launch.cpp — `ptd launch JOB`: plan the ranks, start them (locally or over SSH) and
// show one status line per rank until the run ends; Ctrl-C stops every rank on every host.
// On a TTY the status block is redrawn in place; otherwise each step prints plain lines.
#include "cmd_launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <csignal>
#include <cstring>
#include <set>

#include "cmd_calibrate.h"
#include "commands.h"
#include "ptd/common/file_read.h"
#include "ptd/hostfile.h"
#include "ptd/launch.h"
#include "ptd/run_dir.h"
#include "ptd/k8s.h"
#include "ptd/slurm.h"
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

int write_slurm(const LaunchPlan& plan, FILE* out, FILE* err, bool submit) {
    RunManifest manifest = initial_manifest(plan);
    auto writer = RunDirWriter::create(plan.run_dir, plan.job_toml, manifest);
    if (!writer) {
        std::fprintf(err, "%s", writer.error().str().c_str());
        return kExitRuntime;
    }
    if (!plan.slurm_preflight_ptd.empty()) {
        // The preflight's own run directory, as `ptd calibrate --collect --check` reads it: the
        // job and a manifest of the same ranks; the script's probes write their logs there.
        RunManifest probes = manifest;
        probes.run_id = plan.run_id + "-preflight";
        if (auto pf = RunDirWriter::create(plan.run_dir + "/preflight", plan.job_toml, probes); !pf) {
            std::fprintf(err, "%s", pf.error().str().c_str());
            return kExitRuntime;
        }
    }
    const std::string path = plan.run_dir + "/sbatch.sh";
    // A new file in the run's own new directory: O_EXCL, never another file.
    if (auto w = write_new_file(path, slurm_script(plan), 0755); !w) {
        std::fprintf(err, "ptd launch: %s\n", w.error().one_line().c_str());
        return kExitRuntime;
    }
    chmod(path.c_str(), 0755);  // the umask may have narrowed it
    std::fprintf(out, "wrote %s (%zu ranks on %zu nodes)\n", path.c_str(), plan.ranks.size(), plan.hosts.size());
    if (!submit) {
        std::fprintf(out, "submit: sbatch %s\nwatch:  ptd watch %s\n", shell_quote(path).c_str(), shell_quote(plan.run_dir).c_str());
        return kExitOk;
    }
    auto job_id = slurm_submit(path);
    if (!job_id) {
        // The run never started: its manifest says so, for ptd watch and the studio.
        manifest.state = "failed";
        manifest.exit_code = 1;
        manifest.reason = job_id.error().one_line();
        manifest.ended = manifest.started;
        (void)(*writer)->write_manifest(manifest);
        std::fprintf(err, "%s", job_id.error().str().c_str());
        return kExitRuntime;
    }
    manifest.scheduler = RunSchedulerRecord{"slurm", *job_id, "PENDING"};
    if (auto w = (*writer)->write_manifest(manifest); !w) {
        std::fprintf(err, "ptd launch: submitted Slurm job %s but could not record it: %s\n", job_id->c_str(),
                     w.error().one_line().c_str());
        return kExitRuntime;
    }
    std::fprintf(out, "submitted Slurm job %s\nwatch:  ptd watch %s\nstop:   ptd stop %s\n", job_id->c_str(),
                 shell_quote(plan.run_dir).c_str(), shell_quote(plan.run_dir).c_str());
    return kExitOk;
}

int write_k8s(const LaunchPlan& plan, const std::string& image, FILE* out, FILE* err, bool apply) {
    RunManifest manifest = initial_manifest(plan);
    auto writer = RunDirWriter::create(plan.run_dir, plan.job_toml, manifest);
    if (!writer) {
        std::fprintf(err, "%s", writer.error().str().c_str());
        return kExitRuntime;
    }
    const std::string jobset = plan.run_dir + "/jobset.yaml", trainjob = plan.run_dir + "/trainjob.yaml";
    for (const auto& [path, text] : {std::pair{jobset, k8s_jobset(plan, image)}, std::pair{trainjob, k8s_trainjob(plan, image)}})
        if (auto w = write_new_file(path, text); !w) {
            std::fprintf(err, "ptd launch: %s\n", w.error().one_line().c_str());
            return kExitRuntime;
        }
    std::fprintf(out,
                 "wrote %s (JobSet %s: %zu ranks in %zu pods)\n"
                 "wrote %s (the same as a Kubeflow Trainer TrainJob on the torch-distributed runtime)\n"
                 "apply one: kubectl apply -f %s\n",
                 jobset.c_str(), k8s_jobset_name(plan).c_str(), plan.ranks.size(), plan.hosts.size(), trainjob.c_str(),
                 shell_quote(jobset).c_str());
    if (!apply) return kExitOk;
    // kubectl's own rule: the first file of $KUBECONFIG, else ~/.kube/config.
    std::string config;
    if (const char* k = std::getenv("KUBECONFIG"); k && *k) config = std::string(k).substr(0, std::string(k).find(':'));
    else if (const char* home = std::getenv("HOME")) config = std::string(home) + "/.kube/config";
    struct stat st {};
    if (config.empty() || ::stat(config.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
        std::fprintf(err, "ptd launch: error: --apply: no kubeconfig (%s); allowed: --apply where kubectl has a cluster "
                          "(KUBECONFIG or ~/.kube/config), else apply %s yourself\n",
                     config.empty() ? "KUBECONFIG and HOME unset" : (config + " is not a file").c_str(), jobset.c_str());
        return kExitConfig;
    }
    // The ranks' rendezvous secret first: the pods take PTD_RUN_SECRET from it.
    if (auto secret = k8s_create_secret(k8s_secret_name(plan), plan.run_dir); !secret) {
        std::fprintf(err, "ptd launch: %s", secret.error().str().c_str());
        return kExitRuntime;
    }
    const CommandOutput k = run_command({"kubectl", "apply", "-f", jobset}, 120);
    std::fputs(k.out.c_str(), out);
    if (!k.ran || k.timed_out || k.status != 0) {
        std::fprintf(err, "ptd launch: kubectl apply failed%s: %s", k.timed_out ? " (no answer within 120 s)" : "",
                     k.ran ? k.err.c_str() : (k.error + "\n").c_str());
        return kExitRuntime;
    }
    // Applied: ptd watch follows the set's pods and ptd stop deletes it (k8s.h).
    manifest.scheduler = RunSchedulerRecord{"k8s", k8s_jobset_name(plan), ""};
    if (auto w = (*writer)->write_manifest(manifest); !w) {
        std::fprintf(err, "ptd launch: applied JobSet %s but could not record it: %s\n", k8s_jobset_name(plan).c_str(),
                     w.error().one_line().c_str());
        return kExitRuntime;
    }
    std::fprintf(out, "watch:  ptd watch %s\nstop:   ptd stop %s\n", shell_quote(plan.run_dir).c_str(), shell_quote(plan.run_dir).c_str());
    return kExitOk;
}

std::string k8s_image(const JobSpec& job, const std::string& flag) { return flag.empty() ? job.launch.k8s.image : flag; }

std::string k8s_image_refusal(const std::string& image) {
    std::string problem = image.empty() ? "missing (and no launch.k8s.image)" : "";
    for (char c : image)
        if ((unsigned char)c <= ' ' || c == '"' || c == '\'' || c == '\\' || c == 0x7f) problem = "got " + quote_input(image);
    if (problem.empty()) return "";
    return "error: --image: " + problem + "; allowed: a container image holding ptd-engine (launch.engine on its PATH), "
           "without spaces or quotes, e.g. registry.example.com/ptd:1.0";
}

int export_k8s(const JobSpec& job, const K8sExportArgs& a, FILE* out, FILE* err) {
    const std::string image = k8s_image(job, a.image);
    if (const std::string bad = k8s_image_refusal(image); !bad.empty()) {
        std::fprintf(err, "ptd export: %s\n", bad.c_str());
        return kExitConfig;
    }
    // The plan `ptd launch --k8s` makes (a scheduler's nodes), so the text is the file it writes.
    LaunchOptions opts;
    opts.slurm = true;
    opts.run_root = a.run_root;
    opts.run_id = a.run_id;
    auto plan = make_launch_plan(job, opts);
    if (!plan) {
        std::fprintf(err, "%s", plan.error().str().c_str());
        return kExitConfig;
    }
    const std::string text = a.trainjob ? k8s_trainjob(*plan, image) : k8s_jobset(*plan, image);
    std::fputs(text.c_str(), out);
    return kExitOk;
}

int cmd_stop(const StopArgs& a, FILE* out, FILE* err) {
    auto manifest = read_manifest(a.run_dir);
    if (!manifest) {
        std::fprintf(err, "%s", manifest.error().str().c_str());
        return kExitConfig;
    }
    RunManifest m = std::move(*manifest);
    if (is_final_run_state(m.state)) {
        std::fprintf(out, "ptd stop: run %s is already over (%s)\n", m.run_id.c_str(), m.state.c_str());
        return kExitOk;
    }
    if (m.scheduler && m.scheduler->kind == "k8s") {
        // A set that ended before the stop keeps its own end; else it is deleted (its pods get
        // SIGTERM, which the pod script passes to every rank's process group).
        const std::string& name = m.scheduler->job_id;
        std::string why;
        const auto now = k8s_job_state(name, std::max<int>(1, (int)m.hosts.size()), &why);
        const SlurmOutcome before = now ? k8s_outcome(*now) : SlurmOutcome{};
        if (before.run_state.empty()) {
            if (auto d = k8s_delete(name, a.wait_s); !d) {
                std::fprintf(err, "ptd stop: %s", d.error().str().c_str());
                return kExitRuntime;
            }
        }
        m.scheduler->state = before.run_state.empty() ? "DELETED" : now->state;
        m.state = before.run_state.empty() ? "stopped" : before.run_state;
        m.reason = "JobSet " + name + " " + (before.run_state.empty() ? "deleted by ptd stop" : now->state + ": " + before.words);
        m.ended = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
        m.exit_code = m.state == "finished" ? 0 : m.state == "stopped" ? 130 : 1;
        if (auto w = write_manifest_file(a.run_dir, m); !w) {
            std::fprintf(err, "ptd stop: JobSet %s is over but the manifest was not updated: %s\n", name.c_str(),
                         w.error().one_line().c_str());
            return kExitRuntime;
        }
        std::fprintf(out, "ptd stop: %s\n", m.reason.c_str());
        return kExitOk;
    }
    if (m.scheduler && m.scheduler->kind == "slurm") {
        auto last = slurm_cancel(m.scheduler->job_id, a.wait_s);
        if (!last) {
            std::fprintf(err, "ptd stop: %s", last.error().str().c_str());
            return kExitRuntime;
        }
        // Recorded only when Slurm says it is over, so `ptd watch` shows what Slurm did (a
        // job that completed before the scancel stays completed).
        const SlurmOutcome o = slurm_outcome(last->state);
        m.scheduler->state = last->state;
        m.state = o.run_state;
        m.reason = "Slurm job " + m.scheduler->job_id + " " + last->state + ": " + o.words +
                   (last->state == "CANCELLED" ? " by ptd stop" : "");
        m.ended = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
        m.exit_code = m.state == "finished" ? 0 : m.state == "stopped" ? 130 : 1;
        if (auto w = write_manifest_file(a.run_dir, m); !w) {
            std::fprintf(err, "ptd stop: Slurm job %s is over (%s) but the manifest was not updated: %s\n",
                         m.scheduler->job_id.c_str(), last->state.c_str(), w.error().one_line().c_str());
            return kExitRuntime;
        }
        std::fprintf(out, "ptd stop: %s\n", m.reason.c_str());
        return kExitOk;
    }
    const RunLauncherInfo& l = m.launcher;
    if (l.pid <= 0 || l.boot_id != this_launcher().boot_id) {
        std::fprintf(err, "ptd stop: error: %s: run %s has no scheduler job and no `ptd launch` on this machine to stop "
                          "(launcher %s); allowed: a run submitted with ptd launch --slurm --submit or --k8s --apply, or one whose ptd launch "
                          "runs here\n",
                     a.run_dir.c_str(), m.run_id.c_str(), l.pid > 0 ? ("pid " + std::to_string(l.pid) + " on " + l.host).c_str() : "not recorded");
        return kExitConfig;
    }
    if (!launcher_is_alive(l)) {
        std::fprintf(out, "ptd stop: the ptd launch of run %s (pid %ld) is gone already\n", m.run_id.c_str(), l.pid);
        return kExitOk;
    }
    // The launcher's own teardown (TERM to every rank, KILL after launch.grace_s).
    if (::kill((pid_t)l.pid, SIGTERM) != 0) {
        std::fprintf(err, "ptd stop: cannot signal ptd launch pid %ld: %s\n", l.pid, std::strerror(errno));
        return kExitRuntime;
    }
    const auto t0 = std::chrono::steady_clock::now();
    while (launcher_is_alive(l)) {
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > a.wait_s) {
            std::fprintf(err, "ptd stop: ptd launch pid %ld still running %.0f s after SIGTERM\n", l.pid, a.wait_s);
            return kExitRuntime;
        }
        usleep(100 * 1000);
    }
    std::fprintf(out, "ptd stop: run %s stopped (its ptd launch, pid %ld, tore every rank down)\n", m.run_id.c_str(), l.pid);
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

std::vector<std::string> sets_with_slurm_flags(const LaunchArgs& a) {
    std::vector<std::string> sets = a.sets;
    for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"partition", &a.partition},
                                     {"account", &a.account}, {"qos", &a.qos}, {"time", &a.time}}) {
        if (value->empty()) continue;
        std::string quoted = "\"";  // a TOML string: "04:00:00" unquoted would be a TOML time
        for (char c : *value) quoted += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
        sets.push_back(std::string("launch.slurm.") + key + "=" + quoted + "\"");
    }
    return sets;
}

int cmd_launch(const LaunchArgs& a, const PresetCatalog& presets, FILE* out, FILE* err) {
    auto job = load_job_arg(a.job, presets, sets_with_slurm_flags(a));
    if (!job) {
        std::fprintf(err, "%s", job.error().str().c_str());
        return kExitConfig;
    }
    auto opts = launch_options(a);
    if (!opts) {
        std::fprintf(err, "%s", opts.error().str().c_str());
        return kExitConfig;
    }
    if (a.k8s) {
        // A JobSet: Kubernetes places the ranks, as Slurm does (nodes, not hosts).
        if (const std::string bad = k8s_image_refusal(k8s_image(*job, a.image)); !bad.empty()) {
            std::fprintf(err, "ptd launch: %s\n", bad.c_str());
            return kExitConfig;
        }
        opts->slurm = true;
    }
    if (a.preflight && a.k8s) {
        std::fprintf(err, "ptd launch: --preflight with --k8s: Kubernetes places the pods, so no check before them can probe "
                          "their nodes; allowed: --preflight for local, SSH (--hosts) and Slurm (--slurm) launches\n");
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
    if (a.preflight && a.slurm) {
        // Under Slurm the nodes are known only inside the job: its script probes them first
        // and this very ptd judges them there (launch_plan.cpp slurm_script).
        std::error_code ec;
        const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
        if (ec) {
            std::fprintf(err, "ptd launch: --preflight: cannot find this ptd's own path for the script (/proc/self/exe: %s)\n",
                         ec.message().c_str());
            return kExitRuntime;
        }
        plan->slurm_preflight_ptd = self.string();
        plan->slurm_preflight_force = a.force;
    }
    if (a.dry_run) {
        std::fputs(format_dry_run(*plan).c_str(), out);
        // What a real launch would refuse before starting a rank (a GPU job here without GPUs).
        if (std::string refusal = a.slurm ? "" : local_gpu_refusal(*plan); !refusal.empty()) {
            std::fprintf(err, "%s\n", format_diagnostic({plan->job.where("cluster.gpu"), "cluster.gpu", refusal}).c_str());
            return kExitRuntime;  // as the real launch: the job is valid, this machine cannot run it
        }
        return kExitOk;
    }
    if (a.slurm) return write_slurm(*plan, out, err, a.submit);
    if (a.k8s) return write_k8s(*plan, k8s_image(plan->job, a.image), out, err, a.apply);

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
