// slurm.h — a run handed to Slurm: submitted with sbatch, followed through squeue (sacct
// once squeue has forgotten the job) and cancelled with scancel, always through Slurm's own
// commands, so the cluster's configuration (SLURM_CONF, its munge socket) is the one they
// find. `ptd launch --slurm --submit`, `ptd stop` and RunFollower use these.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ptd/common/diagnostic.h"

namespace ptd {

// A program run to its end (or killed at timeout_s): exit status, what it printed.
struct CommandOutput {
    bool ran = false;          // false: not found / could not start (error says why)
    int status = -1;           // exit status; 128 + signal when killed
    bool timed_out = false;
    std::string out, err;
    std::string error;         // why it did not run
};
CommandOutput run_command(const std::vector<std::string>& argv, double timeout_s);

// sbatch --parsable SCRIPT: the job id Slurm gave, or an error quoting sbatch's message.
Result<std::string> slurm_submit(const std::string& script_path);

// The job's state as Slurm tells it: "PENDING", "RUNNING", "COMPLETED", "FAILED",
// "CANCELLED", "TIMEOUT", "NODE_FAIL", ... with the reason squeue gives and the command
// that answered. nullopt (why_not says why) when neither squeue nor sacct knows the job.
struct SlurmJobState {
    std::string state;
    std::string reason;        // squeue %r: "Resources", "NonZeroExitCode", "None"
    std::string source;        // "squeue" or "sacct"
    std::vector<std::string> nodes;  // the job's nodes in allocation order (squeue %N / sacct
                                     // NodeList, expanded); empty while pending
};

// A Slurm host list ("gpu[01-03,07],login1") as node names, in order: expanded here for the
// forms squeue prints (names, bracketed ranges and lists with their zero padding).
std::vector<std::string> slurm_expand_nodes(const std::string& list);
std::optional<SlurmJobState> slurm_job_state(const std::string& job_id, std::string* why_not = nullptr);

// What a Slurm state means for the run: run_state "" while the job is pending or running,
// else "finished", "failed" or "stopped"; words say it the way a user reads it ("timed
// out: the job ran past its time limit").
struct SlurmOutcome {
    std::string run_state;
    std::string words;
};
SlurmOutcome slurm_outcome(const std::string& slurm_state);

// The first task srun reports as failed in the job's output ("srun: error: node3: task 5:
// Exited with exit code 1"): its rank (task id = global rank) and srun's words; tasks
// srun itself terminated afterwards ("tasks 0-4,6-7: Terminated") are not it.
struct SrunFailure {
    int rank = -1;
    std::string node, what;
};
std::optional<SrunFailure> srun_first_failure(const std::string& job_output);

// What the batch script's own preflight (ptd launch --slurm --preflight) said when it stopped
// the job before training: the last "ptd: --preflight…; not training…" line of the job's
// output, without "ptd: ". nullopt when the preflight did not stop it (none ran, it passed,
// or --force went on to train).
std::optional<std::string> slurm_preflight_stop(const std::string& job_output);

// scancel JOB_ID, then wait (up to wait_s) until Slurm reports the job over; returns its
// last state, or an error quoting scancel / saying it still runs.
Result<SlurmJobState> slurm_cancel(const std::string& job_id, double wait_s);

}  // namespace ptd
