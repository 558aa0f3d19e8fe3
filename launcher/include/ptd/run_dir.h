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
#include <string>
#include <vector>

#include "ptd/diagnostic.h"
#include "ptd/launch.h"

namespace ptd {

struct RunManifestRank {
    int rank = 0, host = 0, local_rank = 0;
    int tp = 0, pp = 0, dp = 0;
    long pid = 0;              // on its host, 0 until started
    std::optional<int> exit_code;  // set once exited (-1 = host lost)
};

struct RunManifest {
    std::string run_id;
    std::string job_name;      // job.model.name
    std::string job_file;      // where the job came from (origin.file)
    std::string state;         // "starting", "running", "finished", "failed", "stopped"
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
};

// The manifest of a plan before anything started (state "starting").
RunManifest initial_manifest(const LaunchPlan& plan);

std::string manifest_to_json(const RunManifest& m);
// Errors name the file and the field, e.g. "runs/x/manifest.json: field \"ranks\": ...".
Result<RunManifest> manifest_from_json(const std::string& text, const std::string& file);
Result<RunManifest> read_manifest(const std::string& run_dir);

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

// Follows a run directory: each poll() reads what was appended since the last one and
// returns it as events (rank_started from the manifest, output/metric per line, rank_exited
// and finished once the manifest says so). Works on live and finished runs alike.
class RunFollower {
public:
    static Result<std::unique_ptr<RunFollower>> open(const std::string& run_dir);
    ~RunFollower();
    std::vector<LaunchEvent> poll();
    const RunManifest& manifest() const { return manifest_; }
    bool done() const { return done_; }   // manifest state is final and every log is read
private:
    RunFollower() = default;
    std::string dir_;
    RunManifest manifest_;
    struct Tail { std::string path; long offset = 0; std::string partial; bool started = false; bool exited = false; };
    std::vector<Tail> tails_;
    bool done_ = false;
    bool finished_sent_ = false;
};

}  // namespace ptd
