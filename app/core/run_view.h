// run_view.h — the terminal dashboard of a run, shared by `ptd launch` (live events) and
// `ptd watch` (a run directory through RunFollower): one header line, the estimator's
// prediction of the step time and tokens/s with its interval (run_prediction.h), then one
// line per rank with its state, step, loss, speed and step time against the prediction,
// MFU and memory against the prediction.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "ptd/launch.h"
#include "ptd/run_dir.h"
#include "run_prediction.h"

namespace ptd {

class RunView {
public:
    explicit RunView(const RunManifest& m);  // ranks, hosts, world, steps

    // Update from any launcher event (live or replayed).
    void apply(const LaunchEvent& ev);
    // Take a newer manifest (state, reason, pids, exit codes) — `ptd watch` calls it after
    // every poll. Ranks keep what their events told.
    void set_manifest(const RunManifest& m);
    // The speed prediction the rank lines are compared with (none set: no prediction line,
    // and the speed columns show the measurement alone).
    void set_prediction(RunPrediction p) { prediction_ = std::move(p); }
    const std::optional<RunPrediction>& prediction() const { return prediction_; }

    // The header line (run id, job, hosts, state, step x/N), the prediction line (when one
    // is set), a line of column names, and one line per rank; every line ends in '\n' and
    // is cut to `width` columns (<= 0: uncut); then one line per restart of the run.
    std::string render(bool color, int width, bool sparklines) const;
    // One rank's line, uncut, without '\n'.
    std::string rank_line(int rank, bool color, bool sparkline) const;
    std::string header_line(bool color) const;
    // "predicted: step 66.0 ms [55.1 ms … 80.2 ms], 15.4K/s [12.8K/s … 18.5K/s]; from …;
    // 80% interval from …" — or why there is no interval, or no prediction; "" when none is set.
    std::string prediction_line(bool color) const;

    int ranks() const { return (int)ranks_.size(); }
    bool all_exited() const;
    bool finished() const { return finished_; }
    const std::string& state() const { return state_; }
    int exit_code() const { return exit_code_; }
    // The rank that failed first (manifest, else the first non-zero exit), -1 = none.
    int failed_rank() const;
    const std::string& reason() const { return reason_; }
    // A rank's last `n` output lines (log text and error messages), oldest first.
    std::vector<std::string> last_lines(int rank, int n) const;
    // The run's restarts so far, one line each ("restart 1 of 3: …"), oldest first.
    const std::vector<std::string>& restarts() const { return restarts_; }
    // Loss history of a rank, oldest first (bounded; see kHistory).
    std::vector<double> loss_history(int rank) const;

    static constexpr size_t kHistory = 512;     // steps kept per rank
    static constexpr size_t kLastLines = 50;    // output lines kept per rank
    static constexpr int kSparkSteps = 24;      // steps drawn in the sparkline

private:
    struct Rank {
        int host = 0, tp = -1, pp = -1, dp = -1;
        long pid = 0;
        bool started = false;
        std::optional<int> exit_code;
        int step = 0;
        bool has_step = false;
        double loss = 0, tokens_per_s = 0, mfu = 0;
        double step_s = 0;  // the step's wall time on this rank (time.step)
        bool has_memory = false;
        double mem_total = 0;
        std::optional<double> mem_total_predicted;
        std::deque<double> losses;
        std::deque<std::string> lines;
        std::string error;  // message of an `error` metrics line
    };
    std::string run_id_, job_name_, state_, reason_;
    std::string scheduler_;  // "Slurm job 12 PENDING" for a run handed to a scheduler
    std::vector<std::string> hosts_;
    int world_ = 0, steps_ = 0, exit_code_ = 0, manifest_failed_rank_ = -1;
    bool finished_ = false;
    std::vector<std::string> restarts_;  // one line per restart event (restart.h), in order
    std::vector<Rank> ranks_;
    std::optional<RunPrediction> prediction_;
    int host_width_ = 4;
    bool predicting() const { return prediction_ && prediction_->available; }
    int rate_w() const;       // the tokens/s column's width (wider with a prediction)
    int step_time_w() const;
    void note_line(Rank& r, std::string line);
};

// ---- Folding events, shared with the studio's Live panel (live_model.h) ----------------

// The state a run ends in from the `finished` event's exit status (130: stopped by a signal).
const char* final_run_state(int exit_code);
// What a metrics line says of its rank's place (tp, pp, dp, where it states them) and total
// memory, taken into a rank of either view: any type with the fields tp, pp, dp, has_memory,
// mem_total and mem_total_predicted.
template <class RankView>
void take_place_and_memory(RankView& r, const MetricRecord& m) {
    if (m.tp >= 0) r.tp = m.tp;
    if (m.pp >= 0) r.pp = m.pp;
    if (m.dp >= 0) r.dp = m.dp;
    if (m.has_memory) {
        r.has_memory = true;
        r.mem_total = m.memory[MEM_TOTAL].current;
        r.mem_total_predicted = m.memory[MEM_TOTAL].predicted;
    }
}

// "512 B", "4.82 MiB", "1.50 GiB": binary units, three significant figures.
std::string human_bytes(double bytes);
// Unicode block sparkline (▁▂▃▄▅▆▇█) of the last `n` values, scaled to their min..max.
std::string sparkline(const std::vector<double>& values, int n);

}  // namespace ptd
