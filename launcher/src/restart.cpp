// restart.cpp — when a failed launch starts again, from which checkpoint, what each restart
// cost, and the run's measured goodput (restart.h). Pure bookkeeping over the ranks' metrics
// and the launcher's outcome; the supervisor (launcher.cpp) does the tearing down and the
// starting.
#include "ptd/restart.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

namespace ptd {

namespace fs = std::filesystem;

int newest_complete_checkpoint(const std::string& run_dir) {
    // The engine's rule (engine/io/checkpoint.cpp find_latest_checkpoint): a folder
    // step-<digits> with a manifest.json, which rank 0 writes only after every shard exists.
    std::error_code ec;
    int best = 0;
    for (fs::directory_iterator it(fs::path(run_dir) / "checkpoints", ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.size() <= 5 || name.compare(0, 5, "step-") != 0) continue;
        if (!std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; }) || name.size() > 15) continue;
        std::error_code mec;
        if (!fs::is_regular_file(it->path() / "manifest.json", mec)) continue;
        best = std::max(best, std::atoi(name.c_str() + 5));
    }
    return best;
}

std::string restart_policy_line(const LaunchPlan& plan) {
    std::string s = "restarts: up to " + std::to_string(plan.max_restarts) + " after a rank or host fails, ";
    if (plan.checkpoint_every > 0)
        s += "each from the newest complete checkpoint (--checkpoint-every " + std::to_string(plan.checkpoint_every) + ")";
    else
        s += "from the newest complete checkpoint the engine arguments make, else from step 0 (no --checkpoint-every)";
    if (plan.exclude_failed) s += "; --exclude-failed: without the failed host where the layout allows";
    return s;
}

void RestartTracker::on_metric(const MetricRecord& m, double seen) {
    if (m.kind == MetricKind::step) {
        newest_step_ = std::max(newest_step_, m.step);
        if (m.rank != 0) return;
        step_time_[m.step] = m.times.step;
        if (waiting_first_step_ && !records_.empty()) {
            // The first step trained after the restart began `time.step` before its line.
            const double began = std::max(seen - m.times.step, accounted_until_);
            RestartRecord& r = records_.back();
            r.seconds_lost = std::max(0.0, began - accounted_until_);
            accounted_until_ = began;
            waiting_first_step_ = false;
        }
    } else if (m.kind == MetricKind::checkpoint && m.rank == 0) {
        // Rank 0 prints its checkpoint line after the checkpoint's manifest: it is complete.
        reported_checkpoint_ = std::max(reported_checkpoint_, m.step);
        checkpoint_seen_[m.step] = seen;
    } else if (m.kind == MetricKind::start && m.rank == 0 && m.resumed_from && !records_.empty()) {
        // The engine says which checkpoint it took; it decides (find_latest_checkpoint).
        RestartRecord& r = records_.back();
        if (*m.resumed_from != r.resumed_from) {
            r.resumed_from = *m.resumed_from;
            r.steps_lost = std::max(0, r.failed_at_step - r.resumed_from);
        }
    }
}

RestartTracker::Decision RestartTracker::after_failure(const LaunchPlan& plan, const LaunchOutcome& o, double now) {
    Decision d;
    if (plan.max_restarts <= 0) return d;
    if (o.stopped_by_user || o.exit_code == 0) {
        d.why_not = o.stopped_by_user ? "stopped by user: no restart" : "";
        return d;
    }
    const int done = (int)records_.size();
    if (done >= plan.max_restarts) {
        d.why_not = "no restart left (" + std::to_string(done) + " of " + std::to_string(plan.max_restarts) + " used)";
        return d;
    }
    // ptd-engine exits 2 for a bad job or flag: it would fail the same way every time.
    if (o.exit_code == 2 && o.failed_rank >= 0) {
        d.why_not = "rank " + std::to_string(o.failed_rank) + " exited with code 2 (a bad job or flag): a restart would fail the same way";
        return d;
    }
    const int checkpoint = plan.local ? newest_complete_checkpoint(plan.run_dir) : reported_checkpoint_;
    RestartRecord r;
    if (plan.exclude_failed) {
        const std::string who = o.failed_host >= 0 && o.failed_host < (int)plan.hosts.size()
                                    ? "host " + plan.hosts[(size_t)o.failed_host].display
                                    : std::string("the failed host");
        LaunchPlan next = plan;
        auto layout = plan_without_host(next, o.failed_host);
        if (!layout) {
            d.why_not = "--exclude-failed: without " + who + ": " + layout.error().diagnostics.front().message + "; the run stops here";
            return d;
        }
        r.excluded_host = o.failed_host;
        r.excluded_host_name = plan.hosts[(size_t)o.failed_host].display;
        r.layout = *layout;
        d.next_plan = std::move(next);
    }
    r.attempt = done + 1;
    r.rank = o.failed_rank;
    r.host = o.failed_host;
    r.reason = o.reason;
    r.time = now;
    r.failed_at_step = std::max(newest_step_, checkpoint);
    r.resumed_from = checkpoint;
    r.steps_lost = std::max(0, r.failed_at_step - r.resumed_from);
    // A restart that failed again before training a step: its loss ends at this failure.
    if (waiting_first_step_) {
        records_.back().seconds_lost = std::max(0.0, now - accounted_until_);
        accounted_until_ = std::max(accounted_until_, now);
    } else {
        // Lost: everything after the checkpoint was saved (or the run began, without one).
        const auto seen = checkpoint_seen_.find(checkpoint);
        const double saved = checkpoint > 0 && seen != checkpoint_seen_.end() ? seen->second : started_;
        accounted_until_ = std::max(accounted_until_, saved);
    }
    for (auto it = step_time_.upper_bound(checkpoint); it != step_time_.end();) it = step_time_.erase(it);
    waiting_first_step_ = true;
    newest_step_ = checkpoint;
    records_.push_back(r);
    d.restart = true;
    d.record = r;
    return d;
}

RunGoodput RestartTracker::goodput(double ended) const {
    RunGoodput g;
    g.wall_s = std::max(0.0, ended - started_);
    for (const auto& [step, seconds] : step_time_) g.training_s += seconds;
    g.steps = (int)step_time_.size();
    g.goodput = g.wall_s > 0 ? std::min(1.0, g.training_s / g.wall_s) : 0;
    g.restarts = (int)records_.size();
    for (const RestartRecord& r : records_) {
        g.steps_lost += r.steps_lost;
        if (r.seconds_lost > 0) g.seconds_lost += r.seconds_lost;
    }
    if (waiting_first_step_ && !records_.empty() && records_.back().seconds_lost < 0)
        g.seconds_lost += std::max(0.0, ended - accounted_until_);  // it never trained again
    return g;
}

std::string restart_text(const RestartRecord& r, int max_restarts) {
    std::string s = "restart " + std::to_string(r.attempt) + " of " + std::to_string(max_restarts) + ": " + r.reason + "; ";
    s += r.resumed_from > 0 ? "resuming from the checkpoint of step " + std::to_string(r.resumed_from)
                            : std::string("no complete checkpoint yet: starting again from step 0");
    s += " (" + std::to_string(r.steps_lost) + " step" + (r.steps_lost == 1 ? "" : "s") + " lost";
    if (r.seconds_lost >= 0) {
        char buf[48];
        std::snprintf(buf, sizeof buf, ", %.1f s", r.seconds_lost);
        s += buf;
    }
    s += ")";
    if (r.excluded_host >= 0) s += "; without host " + r.excluded_host_name + ", now " + r.layout;
    return s;
}

std::string goodput_text(const RunGoodput& g) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "goodput %.1f%%: %.1f s of training steps (%d) in %.1f s of wall time", g.goodput * 100,
                  g.training_s, g.steps, g.wall_s);
    std::string s = buf;
    if (g.restarts == 0) return s + "; no restart";
    std::snprintf(buf, sizeof buf, "; %d restart%s, %d step%s and %.1f s lost", g.restarts, g.restarts == 1 ? "" : "s",
                  g.steps_lost, g.steps_lost == 1 ? "" : "s", g.seconds_lost);
    return s + buf;
}

}  // namespace ptd
