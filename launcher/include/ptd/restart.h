// restart.h — a launch that survives failures (issue 31): after a rank or host fails and the
// launcher has torn the run down, decide whether to start the ranks again from the newest
// complete checkpoint (`ptd launch --max-restarts N`, `launch.max_restarts`), record each
// restart (which rank, why, the step resumed from, the steps and seconds lost), and measure
// the run's goodput (training time ÷ wall time). The supervisor (launcher.cpp) feeds every
// attempt's metrics to a RestartTracker and asks it after each failed attempt; the records
// and the goodput go into the run's manifest, where `ptd watch` and the studio read them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ptd/launch.h"
#include "ptd/metrics_event.h"

namespace ptd {

// One restart of a run (the manifest's "restarts" entries, in order).
struct RestartRecord {
    int attempt = 0;             // 1 = the first restart
    int rank = -1;               // the rank that failed, -1 = a host (connection lost / unreachable)
    int host = -1;               // its host, -1 = not known
    std::string reason;          // the failed attempt's reason, as the launcher reports it
    double time = 0;             // Unix seconds the failure was seen
    int failed_at_step = 0;      // the newest step a rank had reported when it failed
    int resumed_from = 0;        // the checkpoint's step the restart continues from (0 = the start)
    int steps_lost = 0;          // failed_at_step − resumed_from: steps trained again
    double seconds_lost = -1;    // wall time from the checkpoint's save (or the last restart) to
                                 // the start of the first step trained after it; -1 until known
    int excluded_host = -1;      // --exclude-failed: the host left out from this restart on
    std::string excluded_host_name;  // its name as the plan shows it ("user@host:22")
    std::string layout;          // then: what runs now (plan_without_host's text)
    bool operator==(const RestartRecord&) const = default;
};

// The run's measured goodput (the manifest's "goodput"), written when the run ends.
struct RunGoodput {
    double wall_s = 0;           // the launcher's start to its end
    double training_s = 0;       // Σ step time of the steps the run kept (rank 0's `time.step`)
    double goodput = 0;          // training_s ÷ wall_s
    int steps = 0;               // steps the run kept (its final loss curve)
    int steps_lost = 0;          // Σ steps_lost of the restarts
    double seconds_lost = 0;     // Σ seconds_lost of the restarts
    int restarts = 0;
    bool operator==(const RunGoodput&) const = default;
};

// The step of the newest complete checkpoint under RUN_DIR/checkpoints (a step-NNNNNNNN folder
// with its manifest.json: the one ptd-engine --resume picks); 0 when there is none.
int newest_complete_checkpoint(const std::string& run_dir);

// "restarts: up to N from the newest complete checkpoint (…)": the dry run's line.
std::string restart_policy_line(const LaunchPlan& plan);


class RestartTracker {
public:
    explicit RestartTracker(double started) : started_(started), accounted_until_(started) {}

    // Every metrics record of the current attempt, with the time the launcher saw it.
    void on_metric(const MetricRecord& m, double seen);

    struct Decision {
        bool restart = false;
        std::string why_not;     // when not: why the run ends here ("" = not asked to restart)
        RestartRecord record;    // when it restarts: the record (already kept)
        // --exclude-failed: the plan of the next attempt without the failed host (none: the
        // same plan runs again).
        std::optional<LaunchPlan> next_plan;
    };
    // After an attempt failed (outcome not ok): restart or not. The checkpoint it resumes from
    // is the newest complete one: newest_complete_checkpoint() for a local run, over SSH the
    // newest rank 0 reported (the hosts' folders are not readable here). Keeps the record
    // when it restarts. With plan.exclude_failed the restart runs without the failed host
    // (plan_without_host), or the run stops saying why no layout fits the hosts left.
    Decision after_failure(const LaunchPlan& plan, const LaunchOutcome& o, double now);

    // The newest complete checkpoint rank 0 reported (its `checkpoint` line comes after the
    // checkpoint's manifest is written), 0 = none.
    int reported_checkpoint() const { return reported_checkpoint_; }
    const std::vector<RestartRecord>& records() const { return records_; }
    RunGoodput goodput(double ended) const;

private:
    double started_;
    double accounted_until_;     // wall time before this is already in a record's seconds_lost
    int newest_step_ = 0;        // in the current attempt
    int reported_checkpoint_ = 0;
    std::map<int, double> checkpoint_seen_;  // step → when rank 0 reported it
    std::map<int, double> step_time_;        // step → rank 0's step time (the latest attempt's)
    bool waiting_first_step_ = false;        // a restart whose seconds_lost is not known yet
    std::vector<RestartRecord> records_;
};

// The restart event's text: "restart 1 of 3: rank 2 on host-a exited with code 137 (signal 9);
// resuming from the checkpoint of step 8 (4 steps lost)"; after an exclusion also
// "; without host-b: tp 2 · pp 2 · dp 1 on 1 host (4 ranks): …" (the host's name as given).

std::string restart_text(const RestartRecord& r, int max_restarts);
// "goodput 91.2%: 52.1 s of training steps in 57.1 s of wall time; 1 restart, 4 steps and
// 3.9 s lost".
std::string goodput_text(const RunGoodput& g);

}  // namespace ptd
