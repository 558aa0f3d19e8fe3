// cmd_launch.h — `ptd launch`: start a job's ranks locally or over SSH with a live
// per-rank status, or print the plan (--dry-run) or a Slurm script (--slurm).
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "ptd/launch.h"
#include "ptd/spec/presets.h"

namespace ptd {

struct LaunchArgs {
    std::string job;
    std::vector<std::string> sets;
    std::string hosts;            // --hosts FILE: run over SSH on these hosts
    bool dry_run = false;         // print each host's commands and environment; connect nowhere
    bool upload = false;          // --upload: copy the local ptd-engine to every host (SFTP)
    bool accept_new_host_keys = false;
    bool slurm = false;           // write runs/<id>/sbatch.sh instead of launching
    bool submit = false;          // --submit (with --slurm): sbatch it, the job id in the manifest
    // --partition, --account, --qos, --time (with --slurm): launch.slurm.* as --set would
    // write them, so they are checked and located the same way ("" = not given).
    std::string partition, account, qos, time;
    bool k8s = false;             // --k8s: write runs/<id>/jobset.yaml (a JobSet) instead of launching
    std::string image;            // --image (with --k8s): the container image holding ptd-engine
    bool apply = false;           // --apply (with --k8s): kubectl apply the JobSet
    int steps = 0;                // --steps N for ptd-engine
    std::string run_root;         // --run-root DIR (default launch.run_dir)
    std::string run_id;           // --run-id ID (default YYYYMMDD-HHMMSS-PID)
    std::string engine;           // --engine PATH: the local ptd-engine to run / upload
    std::string known_hosts;      // --known-hosts FILE (default ~/.ssh/known_hosts)
    std::string ssh_config;       // --ssh-config FILE (default ~/.ssh/config)
    std::string master_addr;      // --master-addr ADDR (default launch.master_addr, else the first host)
    std::vector<std::string> engine_args;  // after `--`: passed to every ptd-engine
    std::string backend;          // --backend for every ptd-engine ("" = its default, auto)
    bool preflight = false;       // --preflight: `ptd calibrate --check` first; stop when a host is flagged
    bool force = false;           // --force: launch even when the preflight flagged a host
    std::vector<std::string> exclude_hosts;  // --exclude-hosts: hostfile entries left out
    std::string profile;          // --profile FILE: the cluster profile the dashboard's speed
                                  // prediction uses (else the job's cluster.profile); recorded
                                  // in the run's manifest
    std::optional<int> max_restarts;      // --max-restarts N (default launch.max_restarts)
    std::optional<int> checkpoint_every;  // --checkpoint-every N (default launch.checkpoint_every)
    bool exclude_failed = false;  // --exclude-failed: restart without the failed host
};

// Exit code: 0 when every rank finished, the failing rank's exit code (1 for a lost host or
// a failed connection), 130 when stopped with Ctrl-C, 2 for a bad job/flag.
int cmd_launch(const LaunchArgs& a, const PresetCatalog& presets, FILE* out, FILE* err);

// The launcher's options from the flags (shared with `ptd calibrate`, which starts its
// probe ranks the same way); --exclude-hosts applied (hosts_without).
Result<LaunchOptions> launch_options(const LaunchArgs& a);
// --exclude-hosts: the hostfile's text without the named hosts (its other lines as they
// are); a name the file does not list is an error naming the file and what it lists.
Result<std::string> hosts_without(const std::string& hostfile, const std::vector<std::string>& names);
// --slurm: the run directory with job.toml and sbatch.sh (srun, the same ranks and
// environment), and how to submit and watch it; with `submit`, sbatch submits it and the
// manifest records the job id (RunFollower then follows the job through squeue / sacct).
int write_slurm(const LaunchPlan& plan, FILE* out, FILE* err, bool submit = false);

// The job's --set overrides with --partition, --account, --qos and --time added as the
// launch.slurm.* keys they stand for (TOML strings, quoted here).
std::vector<std::string> sets_with_slurm_flags(const LaunchArgs& a);

// --k8s: the run directory with job.toml, jobset.yaml (a JobSet of one pod per node that
// starts the same ranks with the same environment) and trainjob.yaml (the same on Kubeflow
// Trainer), and how to apply them.
// With `apply`, `kubectl apply -f jobset.yaml` (refused without a kubeconfig).
int write_k8s(const LaunchPlan& plan, const std::string& image, FILE* out, FILE* err, bool apply = false);

// The image of the Kubernetes forms: --image, else the job's launch.k8s.image.
std::string k8s_image(const JobSpec& job, const std::string& flag);
// --image for the Kubernetes forms: "" when it can name the container image, else the
// error line ("error: --image: got ...; allowed: ...").
std::string k8s_image_refusal(const std::string& image);

// `ptd export --format jobset | trainjob`: the manifest `ptd launch --k8s` writes into the
// run directory (the same plan and writer, k8s.h), on `out`; nothing is created. With the
// same --run-root and --run-id the text equals the launch's jobset.yaml / trainjob.yaml.
struct K8sExportArgs {
    bool trainjob = false;        // else the JobSet
    std::string image;            // --image: the container image holding ptd-engine
    std::string run_root, run_id; // as ptd launch's (default launch.run_dir, a new id)
};
int export_k8s(const JobSpec& job, const K8sExportArgs& a, FILE* out, FILE* err);

// `ptd stop RUN_DIR`: a Slurm run is cancelled (scancel) and recorded as stopped once Slurm
// reports it over; a local or SSH run is stopped through its `ptd launch` (SIGTERM to the
// launcher recorded in the manifest, which tears every rank down as Ctrl-C does).
struct StopArgs {
    std::string run_dir;
    double wait_s = 120;          // how long to wait for the run to be over
};
int cmd_stop(const StopArgs& a, FILE* out, FILE* err);

}  // namespace ptd
