// cmd_watch.cpp — `ptd watch RUN_DIR`: follows a run directory (live or finished) with
// RunFollower and shows the RunView dashboard. On a terminal the dashboard is redrawn in
// place every interval; otherwise (or with --once) it is printed once, so pipes and logs
// get one clean table instead of a stream of escape codes.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <ctime>

#include <sys/ioctl.h>
#include <unistd.h>

#include "commands.h"
#include "ptd/run_dir.h"
#include "run_prediction.h"
#include "run_view.h"
#include "straggler_view.h"
#include "term.h"

namespace ptd {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_sigint(int) { g_interrupted = 1; }

// Ctrl-C ends the watch (not the run) and still prints the final dashboard; the previous
// handler comes back when the watch returns (ptd-studio may call this in-process).
class SigintGuard {
public:
    SigintGuard() {
        g_interrupted = 0;
        struct sigaction sa {};
        sa.sa_handler = on_sigint;
        sigemptyset(&sa.sa_mask);
        installed_ = sigaction(SIGINT, &sa, &old_) == 0;
    }
    ~SigintGuard() {
        if (installed_) sigaction(SIGINT, &old_, nullptr);
    }
    SigintGuard(const SigintGuard&) = delete;
    SigintGuard& operator=(const SigintGuard&) = delete;

private:
    struct sigaction old_ {};
    bool installed_ = false;
};

// Sleeps `seconds` in short slices so Ctrl-C is answered promptly.
void sleep_interruptible(double seconds) {
    const double slice = 0.05;
    for (double left = seconds; left > 0 && !g_interrupted; left -= slice) {
        const double s = std::min(slice, left);
        timespec ts{0, (long)(s * 1e9)};
        nanosleep(&ts, nullptr);
    }
}

int terminal_rows(FILE* stream) {
    winsize ws{};
    if (ioctl(fileno(stream), TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0) return ws.ws_row;
    return 0;
}

// Reads everything the run directory holds now into the view. A finished log can take
// several polls (each reads a bounded chunk); the cap keeps a very chatty live run from
// starving the redraw.
void drain(RunFollower& f, RunView& view) {
    for (int i = 0; i < 1000; ++i) {
        const std::vector<LaunchEvent> events = f.poll();
        view.set_manifest(f.manifest());
        for (const LaunchEvent& ev : events) view.apply(ev);
        if (events.empty() || f.done()) break;
    }
}

// Below the dashboard: the goodput of a run that could restart; of a failed or stopped run,
// why, and the failing rank's last lines.
// A run whose end the manifest does not record says how the watch decided it was over.
std::string outcome_text(const RunView& view, const RunFollower& f, const Term& t) {
    const RunManifest& m = f.manifest();
    std::string out;
    const std::string& state = view.state();
    if (!f.decided().empty())
        out += (state == "finished" ? green(t, state) : red(t, state)) + ": " + f.decided() +
               " (decided by ptd watch from " + (f.decided().starts_with("Slurm job ") ? "Slurm" : f.decided().starts_with("JobSet ") ? "Kubernetes" : "the ranks") + ": manifest.json still says \"" +
               f.recorded_state() + "\")\n";
    // The measured goodput of a run that could restart (restart.h), from its manifest.
    if (m.goodput && (m.max_restarts > 0 || !m.restarts.empty())) out += goodput_text(*m.goodput) + "\n";
    if (state != "failed" && state != "stopped") return out;
    const std::string reason = !m.reason.empty() ? m.reason : view.reason();
    if (f.decided().empty())
        out += (state == "failed" ? red(t, "failed") : yellow(t, "stopped")) + ": " + (reason.empty() ? "no reason recorded" : reason) + "\n";
    const int rank = view.failed_rank();
    if (rank < 0) return out;
    const std::vector<std::string> lines = view.last_lines(rank, 10);
    if (lines.empty()) return out;
    std::string host = "?";
    if (rank < (int)m.ranks.size() && m.ranks[(size_t)rank].host >= 0 && m.ranks[(size_t)rank].host < (int)m.hosts.size())
        host = m.hosts[(size_t)m.ranks[(size_t)rank].host];
    out += bold(t, "last lines of rank " + std::to_string(rank) + " on " + host) + ":\n";
    for (const std::string& l : lines) out += "  " + l + "\n";
    return out;
}

}  // namespace

int cmd_watch(const WatchArgs& a, FILE* out, FILE* err) {
    if (!std::isfinite(a.stale_after) || a.stale_after < 1 || a.stale_after > 1e7) {
        std::fprintf(err, "ptd watch: error: --stale-after: got %g; allowed: seconds, 1 .. 10000000\n", a.stale_after);
        return kExitConfig;
    }
    RunFollowOptions follow;
    follow.stale_after_s = a.stale_after;
    auto opened = RunFollower::open(a.run_dir, follow);
    if (!opened) {
        std::fputs(opened.error().str().c_str(), err);
        return kExitConfig;
    }
    RunFollower& follower = **opened;
    RunView view(follower.manifest());
    // The run's speed prediction, as the launch made it (the job.toml and the profile the
    // manifest records) unless --profile names another.
    RunPrediction prediction = predict_run_dir(a.run_dir, follower.manifest(), a.profile);
    if (!a.profile.empty() && !prediction.profile_problem.empty()) {
        std::fputs(prediction.profile_problem.c_str(), err);  // a bad --profile is refused, as by ptd estimate
        return kExitConfig;
    }
    view.set_prediction(std::move(prediction));
    const double interval = std::clamp(a.interval, 0.05, 3600.0);
    const bool tty = isatty(fileno(out));

    if (a.once || !tty) {
        // Plain output: one dashboard, after what is there (--once) or after the end.
        drain(follower, view);
        if (!a.once) {
            SigintGuard guard;
            while (!follower.done() && !g_interrupted) {
                sleep_interruptible(interval);
                drain(follower, view);
            }
        }
        Term t = detect_term(out);
        // Into a file or pipe, lines are cut only when $COLUMNS asks for it: a log keeps
        // whole lines.
        const char* columns = std::getenv("COLUMNS");
        if (!tty && !(columns && *columns)) t.width = 0;
        std::fputs(view.render(t.color, t.width, a.sparklines).c_str(), out);
        std::fputs(outcome_text(view, follower, t).c_str(), out);
        std::fputs(run_straggler_text(a.run_dir, follower.manifest(), t).c_str(), out);
        std::fflush(out);
        return kExitOk;
    }

    // A terminal: redraw in place until the run is done or Ctrl-C.
    SigintGuard guard;
    int drawn = 0;  // lines of the frame on screen
    std::string shown;
    Term t = detect_term(out);
    LiveStragglers stragglers;  // shown under the table as soon as the timeline tells
    for (;;) {
        drain(follower, view);
        t = detect_term(out);  // follow window resizes
        const std::string frame = view.render(t.color, t.width, a.sparklines) +
                                  (follower.done() ? "" : stragglers.text(a.run_dir, follower.manifest(), t));
        if (frame == shown && !follower.done() && !g_interrupted) {  // unchanged: no flicker
            sleep_interruptible(interval);
            continue;
        }
        shown = frame;
        const int lines = (int)std::count(frame.begin(), frame.end(), '\n');
        const int rows = terminal_rows(out);
        std::string buf;
        if (drawn > 0) {
            // Back to the frame's first line and clear below; a frame taller than the window
            // cannot be reached by moving up, so then the whole screen is cleared.
            if (rows > 0 && std::max(drawn, lines) >= rows) buf += "\x1b[H\x1b[2J";
            else buf += "\x1b[" + std::to_string(drawn) + "F\x1b[J";
        }
        buf += frame;
        std::fputs(buf.c_str(), out);
        std::fflush(out);
        drawn = lines;
        if (follower.done() || g_interrupted) break;
        sleep_interruptible(interval);
    }
    std::fputs(outcome_text(view, follower, t).c_str(), out);
    std::fputs(run_straggler_text(a.run_dir, follower.manifest(), t).c_str(), out);
    std::fflush(out);
    return kExitOk;
}

}  // namespace ptd
