// launcher.cpp — the supervisor of a launch. One thread per run: connect every host (in
// parallel), upload, start the ranks, then turn their output into events, write the run
// directory, and on the first failure (or a stop request) tear every host down: TERM to
// every rank's process group, KILL after launch.grace_s.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <thread>

#include "ptd/restart.h"
#include "ptd/run_dir.h"
#include "ptd/common/sha256.h"
#include "ptd/timeline/timeline.h"
#include "transport.h"

namespace ptd {

const char* launch_event_kind_name(LaunchEventKind k) {
    switch (k) {
        case LaunchEventKind::host_connecting: return "host_connecting";
        case LaunchEventKind::host_ready: return "host_ready";
        case LaunchEventKind::host_failed: return "host_failed";
        case LaunchEventKind::rank_started: return "rank_started";
        case LaunchEventKind::output: return "output";
        case LaunchEventKind::metric: return "metric";
        case LaunchEventKind::rank_exited: return "rank_exited";
        case LaunchEventKind::stopping: return "stopping";
        case LaunchEventKind::restart: return "restart";
        case LaunchEventKind::finished: return "finished";
    }
    return "?";
}

static double unix_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void EventQueue::push(LaunchEvent ev) {
    {
        std::lock_guard lock(mu_);
        if (closed_) return;
        q_.push_back(std::move(ev));
    }
    cv_.notify_one();
}

bool EventQueue::pop(LaunchEvent& out, double timeout_s) {
    std::unique_lock lock(mu_);
    const auto ready = [&] { return !q_.empty() || closed_; };
    if (timeout_s <= 0) {
        if (!ready()) return false;
    } else if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), ready)) {
        return false;
    }
    if (q_.empty()) return false;
    out = std::move(q_.front());
    q_.pop_front();
    return true;
}

void EventQueue::close() {
    {
        std::lock_guard lock(mu_);
        closed_ = true;
    }
    cv_.notify_all();
}

bool EventQueue::closed() const {
    std::lock_guard lock(mu_);
    return closed_;
}

// What transports report, in arrival order, for the supervisor thread.
struct RawEvent {
    enum Kind { line, exited, lost, pid } kind;
    int rank = -1, host = -1;
    bool is_stderr = false;
    int code = 0;
    std::string text;
};

struct Launcher::Impl final : TransportSink {
    LaunchPlan plan;
    std::unique_ptr<RunDirWriter> writer;
    RunManifest manifest;
    EventQueue events;              // to the caller
    std::vector<std::unique_ptr<HostTransport>> transports;
    std::thread supervisor;
    std::atomic<bool> stop_requested{false};
    std::atomic<bool> done{false};
    bool finished_returned = false;

    mutable std::mutex mu;          // raw, outcome
    std::condition_variable raw_cv;
    std::deque<RawEvent> raw;
    LaunchOutcome result;

    std::optional<RestartTracker> restarts;            // issue 31: restarts and goodput (restart.h)
    bool ranks_ever_started = false;                   // a first attempt that started nothing is not restarted
    std::vector<std::vector<long>> stale_groups;       // per host: process groups of ranks lost with it
    std::vector<bool> rank_started;                    // start_rank succeeded
    std::vector<std::deque<std::string>> last_stderr;  // per rank, up to kKeepStderr
    static constexpr size_t kKeepStderr = 20;

    // TransportSink (transport I/O threads).
    void line(int rank, bool is_stderr, std::string text) override { push_raw({RawEvent::line, rank, -1, is_stderr, 0, std::move(text)}); }
    void rank_exited(int rank, int code) override { push_raw({RawEvent::exited, rank, -1, false, code, {}}); }
    void rank_pid(int rank, long pid) override { push_raw({RawEvent::pid, rank, -1, false, (int)pid, {}}); }
    void host_lost(int host, std::string why) override { push_raw({RawEvent::lost, -1, host, false, -1, std::move(why)}); }
    void push_raw(RawEvent ev) {
        {
            std::lock_guard lock(mu);
            raw.push_back(std::move(ev));
        }
        raw_cv.notify_one();
    }

    void emit(LaunchEvent ev) {
        ev.time = unix_now();
        events.push(std::move(ev));
    }
    void emit_host(LaunchEventKind kind, int host, std::string text) {
        LaunchEvent ev;
        ev.kind = kind;
        ev.host = host;
        ev.text = std::move(text);
        emit(std::move(ev));
    }

    void save_manifest() {
        if (auto ok = writer->write_manifest(manifest); !ok)
            emit_host(LaunchEventKind::output, -1, "ptd launch: warning: " + ok.error().str());
    }

    void blame_cause(const std::vector<int>& blamed, const std::vector<int>& exit_code);
    void run();
    void run_attempt();
    bool restart_after_failure();
    void collect_timelines();
    bool connect_all();
    bool start_all();
    void supervise();
    void finish(int exit_code, std::string state);
};

int failure_blamed_rank(const std::string& message, int world) {
    for (const std::string key : {"peer rank ", "aborting: rank "}) {
        const size_t at = message.find(key);
        if (at == std::string::npos || !std::isdigit((unsigned char)message[at + key.size()])) continue;
        const int r = std::atoi(message.c_str() + at + key.size());
        if (r >= 0 && r < world) return r;
    }
    return -1;
}

// If the first failing rank only aborted because its engine saw another rank die or
// stall, the failure is that other rank's: its exit code, its stderr, named first.
void Launcher::Impl::blame_cause(const std::vector<int>& blamed, const std::vector<int>& exit_code) {
    std::lock_guard lock(mu);
    if (result.failed_rank < 0 || result.stopped_by_user) return;
    const int reporter = result.failed_rank;
    const int cause = blamed[reporter];
    if (cause < 0 || cause == reporter) return;
    const int h = plan.ranks[cause].host;
    result.failed_rank = cause;
    result.failed_host = h;
    if (exit_code[cause] > 0) result.exit_code = exit_code[cause];
    std::string what = exit_code[cause] > 0 ? "exited with code " + std::to_string(exit_code[cause]) +
                                                  (exit_code[cause] > 128 ? " (signal " + std::to_string(exit_code[cause] - 128) + ")" : "")
                                            : std::string("failed");
    result.reason = "rank " + std::to_string(cause) + " on " + plan.hosts[h].display + " " + what +
                    "; rank " + std::to_string(reporter) + " reported it first";
    if (!last_stderr[cause].empty()) result.last_stderr.assign(last_stderr[cause].begin(), last_stderr[cause].end());
}

bool Launcher::Impl::connect_all() {
    const int n = (int)plan.hosts.size();
    std::vector<std::string> errors(n);
    std::string engine_sha;
    // A restart finds the engine where the first attempt put it (every host had it then).
    const bool upload_engine = plan.upload && !ranks_ever_started;
    if (!plan.local && upload_engine) {
        auto sha = sha256_file(plan.local_engine);
        if (!sha) {
            result.reason = sha.error().str();
            return false;
        }
        engine_sha = *sha;
    }
    // The files the job refers to that go next to job.toml on every host, hashed once.
    std::vector<std::pair<const JobFileRef*, std::string>> sent_files;
    if (!plan.local)
        for (const JobFileRef& ref : plan.files) {
            if (ref.remote_name.empty()) continue;
            auto sha = sha256_file(ref.path);
            if (!sha) {
                result.reason = ref.key + ": " + sha.error().str();
                return false;
            }
            sent_files.emplace_back(&ref, *sha);
        }
    auto bring_up = [&](int h) {
        const HostPlan& hp = plan.hosts[h];
        if (hp.excluded) return;
        if (!plan.local) emit_host(LaunchEventKind::host_connecting, h, "connecting to " + hp.display);
        auto t0 = std::chrono::steady_clock::now();
        if (auto ok = transports[h]->connect(); !ok) {
            errors[h] = ok.error().str();
            return;
        }
        // A restart after this host was lost: what its ranks left running there goes first.
        if (h < (int)stale_groups.size() && !stale_groups[h].empty()) {
            transports[h]->kill_stale_groups(stale_groups[h]);
            stale_groups[h].clear();
        }
        std::string what = plan.local ? "ranks run as child processes of this machine" : "connected";
        if (!plan.local) {
            if (upload_engine) {
                if (auto ok = transports[h]->upload(plan.local_engine, hp.engine, engine_sha); !ok) {
                    errors[h] = ok.error().str();
                    return;
                }
                what += ", uploaded ptd-engine (SHA-256 " + engine_sha.substr(0, 12) + "… checked)";
            }
            for (const auto& [ref, sha] : sent_files) {
                if (auto ok = transports[h]->upload(ref->path, hp.remote_dir + "/" + ref->remote_name, sha); !ok) {
                    errors[h] = ref->key + ": " + ok.error().str();
                    return;
                }
            }
            if (auto ok = transports[h]->upload_text(plan.remote_job_toml, hp.remote_dir + "/job.toml"); !ok) {
                errors[h] = ok.error().str();
                return;
            }
            what += ", sent job.toml";
            for (const auto& [ref, sha] : sent_files) what += ", " + ref->remote_name;
            // Every rank connects to MASTER_ADDR: a name only this machine (or its ssh
            // config) knows would leave the ranks waiting for the store until it times out.
            if (auto ok = transports[h]->check_resolves(plan.master_addr); !ok) {
                errors[h] = ok.error().str();
                return;
            }
        }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        char took[32];
        std::snprintf(took, sizeof took, " in %.2f s", s);
        emit_host(LaunchEventKind::host_ready, h, plan.local ? what : what + took);
    };
    if (plan.local || n == 1) {
        for (int h = 0; h < n; ++h) bring_up(h);
    } else {
        std::vector<std::thread> threads;
        for (int h = 0; h < n; ++h) threads.emplace_back(bring_up, h);
        for (auto& t : threads) t.join();
    }
    bool ok = true;
    for (int h = 0; h < n; ++h) {
        if (errors[h].empty()) continue;
        emit_host(LaunchEventKind::host_failed, h, errors[h]);
        if (ok) {
            result.failed_host = h;
            result.reason = "host " + plan.hosts[h].display + ": " + errors[h];
        }
        ok = false;
    }
    return ok;
}

// 32 bytes of /dev/urandom as 64 hex digits: the run's store secret (kv_store.h).
Result<std::string> make_run_secret() {
    uint8_t bytes[32];
    FILE* f = std::fopen("/dev/urandom", "rb");
    const bool ok = f && std::fread(bytes, 1, sizeof bytes, f) == sizeof bytes;
    const int err = errno;
    if (f) std::fclose(f);
    if (!ok) return fail(SourceLoc{}, "launch", std::string("cannot read /dev/urandom for the run's secret: ") + std::strerror(err));
    static const char digits[] = "0123456789abcdef";
    std::string hex;
    for (uint8_t b : bytes) hex += {digits[b >> 4], digits[b & 15]};
    return hex;
}

bool Launcher::Impl::start_all() {
    if (plan.master_port == 0) {
        // The store runs with rank 0: on its host (the first one, or the first left).
        const int h0 = plan.ranks.front().host;
        auto port = transports[(size_t)h0]->free_port();
        if (!port) {
            result.failed_host = h0;
            result.reason = "host " + plan.hosts[(size_t)h0].display + ": cannot pick MASTER_PORT: " + port.error().str();
            emit_host(LaunchEventKind::host_failed, h0, result.reason);
            return false;
        }
        set_master_port(plan, *port);
        manifest.master_port = *port;
    }
    // A fresh secret for every start of the ranks: only they can use the run's store.
    auto secret = make_run_secret();
    if (!secret) {
        result.reason = secret.error().str();
        return false;
    }
    for (RankPlan& r : plan.ranks) r.run_secret = *secret;
    for (const RankPlan& r : plan.ranks) {
        long pid = 0;
        if (auto ok = transports[r.host]->start_rank(r, &pid); !ok) {
            result.failed_rank = r.rank;
            result.failed_host = r.host;
            result.reason = "rank " + std::to_string(r.rank) + " on " + plan.hosts[r.host].display +
                            " did not start: " + ok.error().str();
            return false;
        }
        manifest.ranks[r.rank].pid = pid;
        rank_started[r.rank] = true;
        LaunchEvent ev;
        ev.kind = LaunchEventKind::rank_started;
        ev.rank = r.rank;
        ev.host = r.host;
        ev.pid = pid;
        ev.text = plan.local ? "" : r.shell_command;
        emit(std::move(ev));
    }
    return true;
}

void Launcher::Impl::run() {
    // One attempt, and one more after each failure the restart policy restarts (restart.h).
    do run_attempt();
    while (restart_after_failure());
    finish(result.exit_code, result.stopped_by_user ? "stopped" : result.exit_code ? "failed" : "finished");
}

// A host --exclude-failed left out: nothing to connect to, start or wait for.
class ExcludedHostTransport final : public HostTransport {
public:
    Result<void> connect() override { return {}; }
    Result<void> upload(const std::string&, const std::string&, const std::string&) override { return {}; }
    Result<void> upload_text(const std::string&, const std::string&) override { return {}; }
    Result<bool> download(const std::string&, const std::string&, int64_t) override { return false; }
    Result<void> check_resolves(const std::string&) override { return {}; }
    Result<int> free_port() override { return fail(SourceLoc{}, "", "this host was left out (--exclude-failed)"); }
    Result<void> start_rank(const RankPlan&, long*) override {
        return fail(SourceLoc{}, "", "this host was left out (--exclude-failed)");
    }
    void run_io(TransportSink&) override {}
    void signal_all(int) override {}
    void join() override {}
};

void Launcher::Impl::run_attempt() {
    transports.clear();
    for (int h = 0; h < (int)plan.hosts.size(); ++h)
        transports.push_back(plan.hosts[(size_t)h].excluded ? std::make_unique<ExcludedHostTransport>()
                             : plan.local                    ? make_local_transport(plan, h)
                                                             : make_ssh_transport(plan, h));
    last_stderr.assign(plan.ranks.size(), {});
    rank_started.assign(plan.ranks.size(), false);

    if (!connect_all()) {
        std::lock_guard lock(mu);
        result.exit_code = 1;
        return;
    }
    if (stop_requested) {
        std::lock_guard lock(mu);
        result.stopped_by_user = true;
        result.reason = "stopped by user before any rank started";
        result.exit_code = 130;
        return;
    }
    const bool started = start_all();
    ranks_ever_started = ranks_ever_started || std::count(rank_started.begin(), rank_started.end(), true) > 0;
    // Ranks that did start are supervised either way: a failed start tears them down.
    for (auto& t : transports) t->run_io(*this);
    manifest.state = "running";
    save_manifest();
    if (!started) {
        std::lock_guard lock(mu);
        result.exit_code = 1;
    }
    supervise();
}

void Launcher::Impl::supervise() {
    using clock = std::chrono::steady_clock;
    const int world = (int)plan.ranks.size();
    std::vector<bool> exited(world, false);
    std::vector<bool> started = rank_started;
    int remaining = (int)std::count(started.begin(), started.end(), true);

    // The rank each failing rank's engine blamed ("peer rank 2 (pid …) died: …"),
    // -1 for none. Peers can exit within a millisecond of the rank that died, so the
    // first exit seen is not always the cause; the engines' own reports say which is.
    std::vector<int> blamed(world, -1);
    std::vector<int> exit_code(world, 0);

    bool stopping = false;
    clock::time_point kill_at{}, give_up_at{};
    bool killed = false;
    auto begin_teardown = [&](std::string why) {
        if (stopping) return;
        stopping = true;
        emit_host(LaunchEventKind::stopping, -1, why);
        for (auto& t : transports) t->signal_all(SIGTERM);
        const auto grace = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(plan.job.launch.grace_s));
        kill_at = clock::now() + grace;
        give_up_at = kill_at + std::chrono::seconds(15);
    };
    if (result.failed_rank >= 0 || result.exit_code != 0) begin_teardown(result.reason);

    while (remaining > 0) {
        RawEvent ev;
        bool have = false;
        {
            std::unique_lock lock(mu);
            raw_cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return !raw.empty(); });
            if (!raw.empty()) {
                ev = std::move(raw.front());
                raw.pop_front();
                have = true;
            }
        }
        if (!stopping && stop_requested.load()) {
            result.stopped_by_user = true;
            result.exit_code = 130;
            result.reason = "stopped by user";
            begin_teardown("stop requested: stopping every rank");
        }
        if (stopping && !killed && clock::now() >= kill_at) {
            killed = true;
            for (auto& t : transports) t->signal_all(SIGKILL);
        }
        if (stopping && killed && clock::now() >= give_up_at) {
            // A transport that cannot report its ranks (e.g. a hung connection) must not
            // hang the launcher: count its ranks as lost.
            for (int r = 0; r < world; ++r)
                if (started[r] && !exited[r]) push_raw({RawEvent::exited, r, -1, false, -1, {}});
            give_up_at = clock::time_point::max();
        }
        if (!have) continue;

        switch (ev.kind) {
            case RawEvent::line: {
                if (ev.rank < 0 || ev.rank >= world) break;
                writer->append_line(ev.rank, ev.text);
                LaunchEvent out;
                out.rank = ev.rank;
                out.host = plan.ranks[ev.rank].host;
                out.is_stderr = ev.is_stderr;
                std::optional<MetricRecord> m;
                if (!ev.is_stderr) m = parse_metrics_line(ev.text);
                if (m) {
                    if (m->kind == MetricKind::error) blamed[ev.rank] = failure_blamed_rank(m->message, world);
                    restarts->on_metric(*m, unix_now());
                    out.kind = LaunchEventKind::metric;
                    out.metric = std::move(m);
                } else {
                    out.kind = LaunchEventKind::output;
                    if (ev.is_stderr) {
                        auto& keep = last_stderr[ev.rank];
                        keep.push_back(ev.text);
                        if (keep.size() > kKeepStderr) keep.pop_front();
                    }
                }
                out.text = std::move(ev.text);
                emit(std::move(out));
                break;
            }
            case RawEvent::exited: {
                if (ev.rank < 0 || ev.rank >= world || exited[ev.rank]) break;
                exited[ev.rank] = true;
                exit_code[ev.rank] = ev.code;
                --remaining;
                manifest.ranks[ev.rank].exit_code = ev.code;
                LaunchEvent out;
                out.kind = LaunchEventKind::rank_exited;
                out.rank = ev.rank;
                out.host = plan.ranks[ev.rank].host;
                out.exit_code = ev.code;
                emit(std::move(out));
                if (ev.code != 0 && !stopping) {
                    std::lock_guard lock(mu);
                    const int h = plan.ranks[ev.rank].host;
                    result.failed_rank = ev.rank;
                    result.failed_host = h;
                    result.exit_code = ev.code > 0 ? ev.code : 1;
                    result.reason = "rank " + std::to_string(ev.rank) + " on " + plan.hosts[h].display +
                                    (ev.code > 0 ? " exited with code " + std::to_string(ev.code) +
                                                       (ev.code > 128 ? " (signal " + std::to_string(ev.code - 128) + ")" : "")
                                                 : std::string(" was lost with its host"));
                    result.last_stderr.assign(last_stderr[ev.rank].begin(), last_stderr[ev.rank].end());
                }
                if (ev.code != 0 && !stopping) begin_teardown(result.reason + ": stopping every rank");
                save_manifest();
                break;
            }
            case RawEvent::pid:
                // Over SSH the pid (the rank's process group) arrives after the start: record it
                // at once, so a reader of the manifest can signal the rank (soak_restart.sh).
                if (ev.rank >= 0 && ev.rank < world) {
                    manifest.ranks[ev.rank].pid = ev.code;
                    save_manifest();
                }
                break;
            case RawEvent::lost: {
                emit_host(LaunchEventKind::host_failed, ev.host, "connection lost: " + ev.text);
                if (!stopping) {
                    std::lock_guard lock(mu);
                    result.failed_host = ev.host;
                    result.exit_code = 1;
                    result.reason = "host " + plan.hosts[ev.host].display + " lost: " + ev.text;
                }
                begin_teardown(result.reason + ": stopping every rank");
                break;
            }
        }
    }
    for (auto& t : transports) t->join();
    collect_timelines();
    blame_cause(blamed, exit_code);
    // Lines that arrived between the last exit and the join.
    {
        std::lock_guard lock(mu);
        for (const RawEvent& ev : raw)
            if (ev.kind == RawEvent::line && ev.rank >= 0 && ev.rank < world) writer->append_line(ev.rank, ev.text);
        raw.clear();
    }
}

// After an attempt: when it failed and the restart policy allows, record the restart, tell
// the caller (a `restart` event) and prepare the plan for the next attempt: every rank
// resumes from the newest complete checkpoint (none: from step 0) on a fresh MASTER_PORT.
bool Launcher::Impl::restart_after_failure() {
    LaunchOutcome o;
    {
        std::lock_guard lock(mu);
        o = result;
    }
    // A launch that never started a rank (no host reached, a refused key) is a setup problem
    // a restart would repeat; a later attempt that cannot reach a host uses up a restart.
    if (o.exit_code == 0 || stop_requested || !ranks_ever_started) return false;
    const RestartTracker::Decision d = restarts->after_failure(plan, o, unix_now());
    manifest.restarts = restarts->records();
    if (!d.restart) {
        if (!d.why_not.empty() && plan.max_restarts > 0) emit_host(LaunchEventKind::stopping, -1, d.why_not);
        return false;
    }
    LaunchEvent ev;
    ev.kind = LaunchEventKind::restart;
    ev.rank = d.record.rank;
    ev.host = d.record.host;
    ev.exit_code = o.exit_code;
    ev.text = restart_text(d.record, plan.max_restarts);
    ev.step = d.record.resumed_from;
    emit(std::move(ev));
    stale_groups.resize(plan.hosts.size());
    for (RunManifestRank& r : manifest.ranks) {
        if (r.exit_code == -1 && r.pid > 1) stale_groups[(size_t)r.host].push_back(r.pid);
        r.exit_code.reset();
        r.pid = 0;
    }
    if (d.next_plan) {
        // --exclude-failed: the next attempt runs the re-planned layout on the hosts left; the
        // manifest's ranks follow it (its hosts keep their indices, the excluded one included).
        plan = *d.next_plan;
        const RunManifest next = initial_manifest(plan);
        manifest.world_size = next.world_size;
        manifest.ranks = next.ranks;
        manifest.master_addr = plan.master_addr;
    }
    plan.resume = d.record.resumed_from > 0;
    if (plan.job.launch.master_port == 0) plan.master_port = 0;  // start_all picks a free one again
    refresh_rank_commands(plan);
    manifest.state = "restarting";
    save_manifest();
    {
        std::lock_guard lock(mu);
        result = LaunchOutcome{};
    }
    return true;
}

// Over SSH every host's ranks wrote their measured timeline (the engine's --timeline-dir,
// launch_plan.cpp) into the host's own folder; bring each rank's file to RUN_DIR/timeline,
// where `ptd trace`, `ptd schedule --steps-of` and the studio read it. After every rank has
// exited, whatever the outcome: a failed run's first steps are worth seeing too. A file a
// rank did not write (timeline off, died before its first step) is skipped; a copy that
// fails is a warning, not a failed run.
void Launcher::Impl::collect_timelines() {
    if (plan.local) return;
    constexpr int64_t kMaxTimelineFile = 256ll << 20;  // the reader's limit (timeline.cpp)
    const std::string local_dir = plan.run_dir + "/timeline";
    for (size_t h = 0; h < plan.hosts.size() && h < transports.size(); ++h) {
        const HostPlan& hp = plan.hosts[h];
        int copied = 0;
        std::string problem;
        for (int rank : hp.ranks) {
            if (rank < 0 || rank >= (int)rank_started.size() || !rank_started[(size_t)rank]) continue;
            std::error_code ec;
            std::filesystem::create_directories(local_dir, ec);
            if (ec) {
                problem = "cannot create " + local_dir + ": " + ec.message();
                break;
            }
            const std::string name = timeline_file_name(rank);
            auto got = transports[h]->download(hp.remote_dir + "/timeline/" + name, local_dir + "/" + name, kMaxTimelineFile);
            if (!got) {
                problem = got.error().one_line();
                break;
            }
            copied += *got ? 1 : 0;
        }
        if (!problem.empty())
            emit_host(LaunchEventKind::host_ready, (int)h, "warning: measured timeline not collected: " + problem);
        else if (copied > 0)
            emit_host(LaunchEventKind::host_ready, (int)h,
                      "collected " + std::to_string(copied) + " measured-timeline file" + (copied == 1 ? "" : "s") +
                          " into " + local_dir);
    }
}

void Launcher::Impl::finish(int exit_code, std::string state) {
    {
        std::lock_guard lock(mu);
        result.exit_code = exit_code;
    }
    manifest.state = std::move(state);
    manifest.ended = unix_now();
    manifest.restarts = restarts->records();
    manifest.goodput = restarts->goodput(manifest.ended);
    manifest.exit_code = exit_code;
    manifest.failed_rank = result.failed_rank;
    manifest.reason = result.reason;
    save_manifest();
    LaunchEvent ev;
    ev.kind = LaunchEventKind::finished;
    ev.exit_code = exit_code;
    ev.rank = result.failed_rank;
    ev.host = result.failed_host;
    ev.text = result.reason;
    emit(std::move(ev));
    done = true;
    events.close();
}

Launcher::Launcher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<Launcher>> Launcher::start(LaunchPlan plan) {
    if (std::string refusal = local_gpu_refusal(plan); !refusal.empty())
        return fail(plan.job.where("cluster.gpu"), "cluster.gpu", refusal);
    auto impl = std::make_unique<Impl>();
    impl->plan = std::move(plan);
    impl->manifest = initial_manifest(impl->plan);
    // Who supervises the run: `ptd watch` tells a killed launcher from a live one by it.
    impl->manifest.launcher = this_launcher();
    impl->restarts.emplace(impl->manifest.started);
    auto writer = RunDirWriter::create(impl->plan.run_dir, impl->plan.job_toml, impl->manifest);
    if (!writer) return std::unexpected(writer.error());
    impl->writer = std::move(*writer);
    Impl* p = impl.get();
    p->supervisor = std::thread([p] { p->run(); });
    return std::unique_ptr<Launcher>(new Launcher(std::move(impl)));
}

Launcher::~Launcher() {
    if (!impl_) return;
    stop();
    wait();
}

bool Launcher::next_event(LaunchEvent& out, double timeout_s) {
    if (impl_->finished_returned) return false;
    if (!impl_->events.pop(out, timeout_s)) return false;
    if (out.kind == LaunchEventKind::finished) impl_->finished_returned = true;
    return true;
}

void Launcher::stop() {
    if (!impl_->done) impl_->stop_requested = true;
}

int Launcher::wait() {
    if (impl_->supervisor.joinable()) impl_->supervisor.join();
    return outcome().exit_code;
}

bool Launcher::finished() const { return impl_->done; }

LaunchOutcome Launcher::outcome() const {
    std::lock_guard lock(impl_->mu);
    return impl_->result;
}

const LaunchPlan& Launcher::plan() const { return impl_->plan; }

}  // namespace ptd
