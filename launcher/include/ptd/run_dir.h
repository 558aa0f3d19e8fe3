// run_dir.h — the run directory a launch leaves behind, and reading it back:
//
//   runs/<run-id>/manifest.json   schema ptd.run/1: job, hosts, ranks, state, outcome
//   runs/<run-id>/job.toml        the job exactly as the ranks read it
//   runs/<run-id>/rank-<r>.log    rank r's stdout and stderr lines, as they arrived
//
// `ptd watch RUN_DIR` and ptd-studio's Live panel open a run through RunFollower, which
// turns the files into the same LaunchEvents a live launch produces.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "ptd/common/diagnostic.h"
#include "ptd/launch.h"
#include "ptd/restart.h"
#include "ptd/slurm.h"

namespace ptd {

struct RunManifestRank {
    int rank = 0, host = 0, local_rank = 0;
    int tp = 0, pp = 0, dp = 0;
    long pid = 0;              // on its host, 0 until started
    std::optional<int> exit_code;  // set once exited (-1 = host lost)
};

// The `ptd launch` process that supervises a run, so a reader can tell whether it is
// still there: pid, and what makes the pid unambiguous (the machine's boot and the
// process's start time, in clock ticks since boot, from /proc/<pid>/stat).
struct RunLauncherInfo {
    long pid = 0;              // 0 = no launcher watches this run (--slurm, older manifests)
    std::string host;          // hostname, for messages
    std::string boot_id;       // /proc/sys/kernel/random/boot_id of its machine
    unsigned long long start_time = 0;
};
// This process, as a RunLauncherInfo.
RunLauncherInfo this_launcher();
// That launcher still runs on this machine (its pid with its start time; a reused pid is not it).
bool launcher_is_alive(const RunLauncherInfo& launcher);

// The scheduler a run was handed to (`ptd launch --slurm --submit`): which one, the job's id
// there and its last known state there ("PENDING", "RUNNING", "TIMEOUT", ...). RunFollower
// asks the scheduler for the state while the manifest does not record the end.
struct RunSchedulerRecord {
    std::string kind;          // "slurm", or "k8s" (`ptd launch --k8s --apply`: job_id is the JobSet's name)
    std::string job_id;
    std::string state;         // as the scheduler says it; "" = not asked yet
    bool operator==(const RunSchedulerRecord&) const = default;
};

struct RunManifest {
    std::string run_id;
    std::string job_name;      // job.model.name
    std::string job_file;      // where the job came from (origin.file)
    std::string state;         // "starting", "running", "restarting", "finished", "failed", "stopped"
    double started = 0;        // Unix seconds
    double ended = 0;          // 0 while running
    int world_size = 0;
    int steps = 0;             // stop step of the run (--steps or training.steps)
    bool local = true;
    std::string master_addr;
    int master_port = 0;
    std::vector<std::string> hosts;   // display names, index = host
    std::vector<RunManifestRank> ranks;
    int exit_code = 0;
    int failed_rank = -1;
    std::string reason;
    RunLauncherInfo launcher;
    // The cluster profile the run's speed prediction used ("profile" in the JSON; absent =
    // the job's GPU preset figures).
    std::optional<RunProfileRecord> profile;
    std::optional<RunSchedulerRecord> scheduler;  // none: ranks started by ptd launch itself
    // issue 31 (restart.h): every restart so far, in order ("restarts"), and the measured
    // goodput, written when the run ends ("goodput"; absent before, and in older manifests).
    int max_restarts = 0;      // the run's restart budget (absent in the JSON when 0)
    std::vector<RestartRecord> restarts;
    std::optional<RunGoodput> goodput;
};

// A run state that no later event changes: "finished", "failed" or "stopped".
bool is_final_run_state(const std::string& state);

// The manifest of a plan before anything started (state "starting").
RunManifest initial_manifest(const LaunchPlan& plan);

std::string manifest_to_json(const RunManifest& m);
// Errors name the file and the field, e.g. "runs/x/manifest.json: field \"ranks\": ...".
Result<RunManifest> manifest_from_json(const std::string& text, const std::string& file);
Result<RunManifest> read_manifest(const std::string& run_dir);
// The restarts a Slurm batch script recorded, one restart object (as in the manifest's
// "restarts") a line of RUN_DIR/restarts.jsonl; a last line without its newline is still
// being written and is not read yet. An error names the file and the line.
Result<std::vector<RestartRecord>> restarts_from_lines(const std::string& text, const std::string& file, int world_size,
                                                       size_t hosts);
// Replaces RUN_DIR/manifest.json atomically (tmp + rename), for a run no RunDirWriter
// writes any more (`ptd stop` recording a Slurm job's end).
Result<void> write_manifest_file(const std::string& run_dir, const RunManifest& m);

// Writes `text` to a file that must not exist yet (O_EXCL, then `mode` as the umask lets
// it): a run only ever writes its own files, never one a user already had.
Result<void> write_new_file(const std::string& path, const std::string& text, unsigned mode = 0644);

// Writes a run directory. Thread-safe. Every line is flushed as written so `ptd watch`
// and a crash both see it; the manifest is replaced atomically (tmp + rename).
class RunDirWriter {
public:
    // Creates `dir` (parents too), writes job.toml and the manifest. Error names the path.
    static Result<std::unique_ptr<RunDirWriter>> create(const std::string& dir, const std::string& job_toml,
                                                        const RunManifest& manifest);
    ~RunDirWriter();
    void append_line(int rank, const std::string& line);   // + '\n' to rank-<r>.log
    Result<void> write_manifest(const RunManifest& m);
    const std::string& dir() const { return dir_; }
private:
    RunDirWriter() = default;
    std::string dir_;
    std::mutex mu_;
    std::map<int, FILE*> logs_;
};

struct RunFollowOptions {
    // A run whose manifest is not final and whose launcher is not known to be alive on this
    // machine counts as over once none of its unfinished ranks wrote a line for this long.
    double stale_after_s = 120;
};

// Follows a run directory: each poll() reads what was appended since the last one and
// returns it as events (rank_started from the manifest, restart for each new entry of its
// "restarts", output/metric per line, rank_exited and finished once the run is over). Works on live and finished runs alike.
//
// The run is over when the manifest says so, or — when nobody will write that (a Slurm
// run, a launcher that was killed) — when the scheduler says so (a run with a scheduler
// record: squeue / sacct, asked every few seconds; while it answers it is believed over
// the ranks' silence), or when the ranks' own record says so: every rank sent
// its `end` event; or the launcher's pid on this machine is gone and so is every rank's
// (checked in /proc with the start time / PTD_RUN_ID, so a reused pid does not count);
// or no unfinished rank wrote anything for stale_after_s. manifest() then carries the
// state that was derived, and decided() says how.
class RunFollower {
public:
    static Result<std::unique_ptr<RunFollower>> open(const std::string& run_dir, RunFollowOptions options = {});
    ~RunFollower();
    std::vector<LaunchEvent> poll();
    const RunManifest& manifest() const { return manifest_; }
    bool done() const { return done_; }   // the run is over and every log is read
    // How the end was decided when the manifest did not record it ("all 8 ranks sent end",
    // "launcher pid 1234 gone and ranks 0-3 dead (pids not running)", "no output from rank 5
    // for 120 s"); "" while running or when the manifest says it.
    const std::string& decided() const { return decided_; }
    // The manifest's own state, as last read ("starting" for a Slurm run).
    const std::string& recorded_state() const { return recorded_state_; }
private:
    void ask_scheduler(double now);
    void ask_k8s();
    RunFollower() = default;
    void derive_end(double now);
    std::string dir_;
    RunFollowOptions options_;
    RunManifest manifest_;
    struct Tail {
        std::string path;
        long offset = 0;
        std::string partial;
        bool started = false, exited = false;
        bool sent_end = false;   // its log holds the rank's `end` event
        bool has_log = false;
        double mtime = 0;        // when its log last changed (Unix seconds)
    };
    std::vector<Tail> tails_;
    std::string derived_state_, decided_, recorded_state_;
    // The scheduler's answer (manifest().scheduler->state) and when it was last asked: at
    // most every kSchedulerPollS, however often poll() runs.
    std::string scheduler_state_, scheduler_reason_;
    bool scheduler_answered_ = false;
    double scheduler_asked_ = 0;
    int derived_failed_rank_ = -1;  // the rank the scheduler's record names as failing
    SlurmOutcome k8s_outcome_;      // a JobSet's (k8s.h k8s_outcome) at the last answer
    std::vector<std::string> scheduler_hosts_;  // the Slurm job's nodes once known (else the plan's names)
    std::set<std::string> k8s_logs_final_;      // ended pods whose whole log was copied
    bool done_ = false;
    bool finished_sent_ = false;
    size_t restarts_sent_ = 0;   // manifest restarts already returned as `restart` events
};

}  // namespace ptd
