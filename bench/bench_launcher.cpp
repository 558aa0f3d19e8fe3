// bench_launcher.cpp — how fast ptd launch starts ranks and tears a run down, locally and
// over SSH to a throwaway sshd on 127.0.0.1 (tests/sshd_fixture.h). Prints its figures;
// asserts nothing (docs/performance.md records them).
//
//   bench_launcher [--repeat N]
//
// Start: from Launcher::start to the first line of every rank — a stand-in engine that
// prints one line and sleeps, so the figure is the launcher's own cost (fork/exec, or SSH
// channel + remote shell), not the engine's. Also the real ptd-engine's time to its
// `start` metrics line on 8 local ranks. Teardown: from the failing rank's exit to the last
// rank's exit and the `finished` event, with every other rank needing a TERM.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "../tests/launcher_test_util.h"
#include "../tests/sshd_fixture.h"
#include "ptd/launch.h"
#include "ptd/spec/presets.h"

using namespace ptd;
using clock_type = std::chrono::steady_clock;

namespace {

struct Times {
    double all_started = 0;    // s from start() to every rank's first line
    double teardown = 0;       // s from the failing rank's exit to `finished`
    bool ok = false;
    std::string why;
};

// `ranks` ranks of tiny-gpt (dp = ranks) on one host.
JobSpec job_with(int ranks) {
    auto presets = load_presets();
    auto job = load_job_file(std::string(PTD_SOURCE_DIR) + "/assets/jobs/tiny-local.toml", *presets);
    job->cluster.gpus_per_node = ranks;
    job->parallel.tp = 1;
    job->parallel.pp = 1;
    job->parallel.dp = ranks;
    job->training.global_batch = ranks * job->training.micro_batch;
    return *job;
}

// Runs the plan until every rank is ready — its first output line starts with
// `ready_prefix`, or (empty prefix) it wrote its `start` metrics event — then stops it, or
// (stop_when_ready false) waits for the failing rank to end the run.
Times measure(LaunchPlan plan, const std::string& ready_prefix, bool stop_when_ready) {
    Times t;
    const auto t0 = clock_type::now();
    auto run = Launcher::start(std::move(plan));
    if (!run) {
        t.why = run.error().str();
        return t;
    }
    const int world = (int)(*run)->plan().ranks.size();
    std::vector<bool> seen(world, false);
    int ready = 0;
    double fail_exit_at = -1;
    LaunchEvent ev;
    const auto until = t0 + std::chrono::seconds(120);
    while ((*run)->next_event(ev, 0.5) || !(*run)->finished()) {
        if (clock_type::now() > until) {
            (*run)->stop();
            t.why = "timed out";
        }
        const double now = std::chrono::duration<double>(clock_type::now() - t0).count();
        if (std::getenv("BENCH_VERBOSE"))
            std::fprintf(stderr, "%8.3f %s rank %d: %s\n", now, launch_event_kind_name(ev.kind), ev.rank, ev.text.substr(0, 80).c_str());
        const bool is_ready = ready_prefix.empty()
                                  ? ev.kind == LaunchEventKind::metric && ev.metric->kind == MetricKind::start
                                  : ev.kind == LaunchEventKind::output && ev.text.starts_with(ready_prefix);
        if (ev.rank >= 0 && ev.rank < world && !seen[ev.rank] && is_ready) {
            seen[ev.rank] = true;
            if (++ready == world) {
                t.all_started = now;
                if (stop_when_ready) (*run)->stop();
            }
        }
        if (ev.kind == LaunchEventKind::rank_exited && ev.exit_code != 0 && fail_exit_at < 0) fail_exit_at = now;
        if (ev.kind == LaunchEventKind::finished) {
            t.teardown = fail_exit_at >= 0 ? now - fail_exit_at : 0;
            break;
        }
        ev = {};
    }
    (*run)->wait();
    if (ready != world && t.why.empty() && !(*run)->outcome().reason.empty()) t.why = (*run)->outcome().reason;
    t.ok = ready == world && t.why.empty();
    if (ready != world && t.why.empty()) t.why = "only " + std::to_string(ready) + " of " + std::to_string(world) + " ranks started";
    return t;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    int repeat = 3;
    for (int i = 1; i < argc; ++i)
        if (std::string(argv[i]) == "--repeat" && i + 1 < argc) repeat = std::max(1, std::atoi(argv[++i]));
    unsetenv("SSH_AUTH_SOCK");
    const std::string dir = ptd_test::make_temp_dir("bench-launch");
    // Ready at once; rank 0 fails 1 s after start (teardown runs), the others wait for TERM.
    const std::string fake = dir + "/fake-engine";
    ptd_test::write_file(fake,
                         "#!/bin/sh\n[ \"$1\" = --free-port ] && exec " PTD_BIN_DIR "/ptd-engine --free-port\necho ready\nif [ \"$RANK\" = 0 ] && [ -n \"$BENCH_FAIL\" ]; then sleep 1; exit 1; fi\n"
                         "exec sleep 300\n",
                         0755);

    SshdFixture sshd;
    const std::string sshd_problem = sshd.start();
    if (sshd_problem.empty()) sshd.trust_host_key();

    std::printf("bench_launcher: median of %d run(s) each; stand-in engine prints one line and sleeps\n\n", repeat);
    std::printf("%-7s %5s  %12s  %16s\n", "mode", "ranks", "start (s)", "teardown (s)");
    int id = 0;
    for (const bool over_ssh : {false, true}) {
        if (over_ssh && !sshd_problem.empty()) {
            std::printf("ssh: skipped (%s)\n", sshd_problem.c_str());
            continue;
        }
        for (const int ranks : {8, 32}) {
            std::vector<double> start_s, teardown_s;
            std::string failed;
            for (int rep = 0; rep < repeat; ++rep)
                for (const bool fail : {false, true}) {
                    JobSpec job = job_with(ranks);
                    job.launch.engine = fake;
                    job.launch.env = {"BENCH_FAIL"};
                    job.launch.identity = sshd.identity;
                    LaunchOptions o;
                    o.run_root = dir;
                    o.run_id = "r" + std::to_string(++id);
                    o.local_engine = fake;
                    if (over_ssh) {
                        ptd_test::write_file(dir + "/hosts", sshd.user + "@127.0.0.1:" + std::to_string(sshd.port) +
                                                                 " slots=" + std::to_string(ranks) + "\n");
                        o.hostfile = dir + "/hosts";
                        o.known_hosts = sshd.known_hosts;
                        o.ssh_config = sshd.ssh_config;
                    }
                    if (fail) setenv("BENCH_FAIL", "1", 1);
                    else unsetenv("BENCH_FAIL");
                    auto plan = make_launch_plan(job, o);
                    if (!plan) {
                        std::fprintf(stderr, "%s", plan.error().str().c_str());
                        return 1;
                    }
                    const Times t = measure(*plan, "ready", !fail);
                    if (!t.ok) failed = t.why;
                    if (fail) teardown_s.push_back(t.teardown);
                    else start_s.push_back(t.all_started);
                }
            unsetenv("BENCH_FAIL");
            if (!failed.empty()) std::printf("%-7s %5d  failed: %s\n", over_ssh ? "ssh" : "local", ranks, failed.c_str());
            else std::printf("%-7s %5d  %12.3f  %16.3f\n", over_ssh ? "ssh" : "local", ranks, median(start_s), median(teardown_s));
        }
    }

    // The real engine: 8 local ranks of tiny-gpt-8rank to every rank's `start` line.
    {
        auto presets = load_presets();
        auto job = load_job_file(std::string(PTD_SOURCE_DIR) + "/assets/jobs/tiny-gpt-8rank.toml", *presets);
        // A run of the built ptd-engine under `dir`.
        auto engine_options = [&](const std::string& run_id) {
            LaunchOptions o;
            o.run_root = dir;
            o.run_id = run_id;
            o.local_engine = std::string(PTD_BIN_DIR) + "/ptd-engine";
            return o;
        };
        std::vector<double> start_s;
        for (int rep = 0; rep < repeat; ++rep) {
            auto plan = make_launch_plan(*job, engine_options("engine" + std::to_string(rep)));
            if (!plan) return 1;
            const Times t = measure(*plan, "", true);
            if (t.ok) start_s.push_back(t.all_started);
        }
        std::printf("\nreal ptd-engine, tiny-gpt-8rank, 8 local ranks: %.3f s from start() to every rank's start event\n",
                    median(start_s));

        // Teardown of the real engine: SIGKILL rank 3 after step 2; time from its exit to
        // `finished` (the other engines abort by themselves or get TERM from the launcher).
        std::vector<double> teardown_s;
        for (int rep = 0; rep < repeat; ++rep) {
            LaunchOptions o = engine_options("engine-kill" + std::to_string(rep));
            o.steps = 1000000;
            auto plan = make_launch_plan(*job, o);
            if (!plan) return 1;
            auto run = Launcher::start(*plan);
            if (!run) return 1;
            std::map<int, long> pids;
            bool killed = false;
            clock_type::time_point exit_at{};
            LaunchEvent ev;
            const auto until = clock_type::now() + std::chrono::seconds(120);
            while ((*run)->next_event(ev, 0.5) || !(*run)->finished()) {
                if (clock_type::now() > until) (*run)->stop();
                if (ev.kind == LaunchEventKind::rank_started) pids[ev.rank] = ev.pid;
                if (!killed && ev.kind == LaunchEventKind::metric && ev.metric->kind == MetricKind::step && ev.metric->step >= 2) {
                    kill((pid_t)pids[3], SIGKILL);
                    killed = true;
                }
                if (ev.kind == LaunchEventKind::rank_exited && ev.rank == 3) exit_at = clock_type::now();
                if (ev.kind == LaunchEventKind::finished) {
                    teardown_s.push_back(std::chrono::duration<double>(clock_type::now() - exit_at).count());
                    break;
                }
                ev = {};
            }
            (*run)->wait();
        }
        std::printf("real ptd-engine, 8 local ranks, rank 3 SIGKILLed at step 2: %.3f s from its exit to every rank gone\n",
                    median(teardown_s));
    }
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    return 0;
}
