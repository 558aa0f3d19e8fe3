// launch.h — start ptd-engine for a job on every host (local child processes or SSH),
// stream every rank's output back as typed events, stop everything cleanly.
//
//   auto plan = make_launch_plan(job, opts);        // pure: ranks, env, exact commands
//   auto run  = Launcher::start(*plan);             // connects, uploads, starts ranks
//   while (run->next_event(ev, 0.1)) ...            // any thread; the CLI and studio poll
//   run->stop();                                    // TERM, KILL after launch.grace_s
//   int rc = run->wait();                           // failing rank's exit code, 0 if all ok
//
// Threads: every host has an I/O thread (its transport); one supervisor thread writes the
// run directory, turns lines into events and tears the run down on the first failure.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ptd/hostfile.h"
#include "ptd/spec/job_spec.h"
#include "ptd/metrics_event.h"

namespace ptd {

// ---------------------------------------------------------------------------------------
// Plan: what runs where. Pure — no processes, no network.

// What the caller adds to the job's [launch] section (CLI flags, studio toggles).
struct LaunchOptions {
    std::string hostfile;            // --hosts FILE; overrides launch.hostfile / cluster.hosts
    std::string hosts_text;          // or the hostfile's text itself (the studio's hosts box)
    std::string hosts_label = "hosts";  // names hosts_text in error messages
    std::optional<bool> upload;      // --upload; overrides launch.upload
    std::optional<bool> accept_new_host_keys;
    int steps = 0;                   // --steps N for ptd-engine (absolute stop step); 0 = job's
    std::string run_root;            // "" = launch.run_dir (relative to the current directory)
    std::string run_id;              // "" = YYYYMMDD-HHMMSS-<pid> (UTC)
    std::string local_engine;        // engine binary run locally and uploaded; "" = next to
                                     // this executable, else launch.engine on PATH
    std::string known_hosts;         // "" = ~/.ssh/known_hosts
    std::string ssh_config;          // "" = ~/.ssh/config
    std::string master_addr;         // --master-addr; overrides launch.master_addr
    std::vector<std::string> engine_args;  // extra ptd-engine arguments (after the job's)
    std::string backend;             // --backend for every ptd-engine: auto, cpu, cuda, cuda-sim;
                                     // "" = not passed (the engine's default, auto)
    bool slurm = false;              // plan for an sbatch script: Slurm owns the nodes, so no
                                     // hosts are resolved and the engine need not exist here
    std::optional<int> max_restarts;      // --max-restarts N; overrides launch.max_restarts
    std::optional<int> checkpoint_every;  // --checkpoint-every N; overrides launch.checkpoint_every
    bool exclude_failed = false;     // --exclude-failed: restart without the failed host (restart.h)
};

// A file the job refers to by path (model.hf_config, training.data). The ranks read the
// job from the run directory, so every such path is resolved against the job file's
// folder here, once, and the job the ranks read names the file absolutely (local, Slurm,
// SSH without copies) or by the name of the copy sent next to job.toml (SSH).
struct JobFileRef {
    std::string key;                 // "model.hf_config", "training.data"
    std::string written;             // the value as the job says it
    std::string path;                // absolute path on this machine
    bool always_sent = false;        // SSH: sent with job.toml on every launch (part of the
                                     // job's definition); else only with --upload
    std::string remote_name;         // SSH: the copy's file name next to job.toml ("" = not sent)
};

// Every file the job refers to, resolved against the job file's folder (the current
// folder for a job without a file). Adding a path key to the job spec means adding it here.
std::vector<JobFileRef> job_file_refs(const JobSpec& job);

// Why `run_id` cannot name a run directory ("" when it can): one plain path component
// of 1..128 letters, digits, '.', '_' or '-', starting with a letter or digit.
std::string run_id_problem(const std::string& run_id);

// The cluster profile the run's speed prediction used (`ptd launch --profile FILE`, else the
// job's cluster.profile), recorded in the run's manifest so `ptd watch RUN_DIR` and the
// studio compute the same prediction later. The launcher only carries it: the caller that
// loaded the profile (cluster_profile.h load_job_profile) fills it in.
struct RunProfileRecord {
    std::string path;                // absolute, so it loads from any folder
    std::string source;              // "--profile" or "cluster.profile"
    std::string measured_at;         // the profile's measured_at when the run started
    bool operator==(const RunProfileRecord&) const = default;
};

struct HostPlan {
    HostEntry entry;                 // host, user ("" = ssh config/current), port (0 = config/22)
    std::string display;             // "user@host:port" as the user would type it
    std::vector<int> ranks;          // global ranks on this host, by local rank
    std::string engine;              // engine path on this host (after --upload: the run copy)
    std::string remote_dir;          // per-run directory on the host (ssh); local: run_dir
    bool excluded = false;           // --exclude-failed left it out after it failed: no ranks,
                                     // never contacted again (its index stays, as in the manifest)
};

struct RankPlan {
    int rank = 0, host = 0, local_rank = 0;
    int tp = 0, pp = 0, dp = 0;
    std::vector<std::pair<std::string, std::string>> env;  // the engine's environment contract
    std::vector<std::string> argv;   // argv[0] = engine path on the host
    std::string shell_command;       // ssh: the exact remote command line (every value quoted)
    // The run's secret (PTD_RUN_SECRET, kv_store.h), made by the launcher when it starts the
    // ranks. Never part of env, argv or shell_command (those are printed and logged): the
    // local transport puts it in the child's environment, SSH sends it on the rank's stdin.
    std::string run_secret;
};

struct LaunchPlan {
    JobSpec job;
    std::string job_toml;            // the job as the ranks read it (run_dir/job.toml): every
                                     // referenced file by its absolute path on this machine
    std::string remote_job_toml;     // ssh: the copy sent to every host (files sent with it are
                                     // named by their copies next to it)
    std::vector<JobFileRef> files;   // the files the job refers to
    std::string run_id;
    std::string run_dir;             // local run directory, absolute: <root>/<run_id>
    bool local = true;               // launch.mode == local: child processes, no SSH
    bool upload = false;
    bool accept_new_host_keys = false;
    std::string local_engine;        // absolute path of the engine binary on this machine
    std::string known_hosts, ssh_config;
    int steps = 0;                   // --steps for ptd-engine; 0 = the job's training.steps
    std::vector<std::string> engine_args;
    std::string backend;             // --backend every rank is given ("" = none: auto)
    std::string master_addr;
    std::string master_addr_source;  // where it came from, for the dry run and messages
    bool master_addr_given = false;  // --master-addr or launch.master_addr (Slurm: else the
                                     // allocation's first node)
    int master_port = 0;             // 0 until chosen (free port on the first host)
    std::vector<HostPlan> hosts;
    std::vector<RankPlan> ranks;     // by global rank
    std::optional<RunProfileRecord> profile;  // the prediction's profile; none = the preset's figures
    // issue 31 (restart.h): how often a failed run starts again, the engine's checkpoint
    // interval, and whether the ranks continue from a checkpoint (set for every restart).
    int max_restarts = 0;
    int checkpoint_every = 0;        // --checkpoint-every for every rank; 0 = not passed
    bool exclude_failed = false;
    bool resume = false;             // --resume for every rank
    // After plan_without_host: the layout the hosts left run, as `--set key=value` arguments
    // every rank gets after the others (job.toml stays the job as it was given).
    std::vector<std::string> layout_overrides;
    // `ptd launch --slurm --preflight`: the sbatch script first probes every allocated node
    // (logs in RUN_DIR/preflight) and judges them with this `ptd` (absolute path, on a file
    // system the batch node sees) as `ptd calibrate --collect --check`; "" = no preflight.
    std::string slurm_preflight_ptd;
    bool slurm_preflight_force = false;  // --force: train even when the preflight flags a node
};

// A fresh run secret (PTD_RUN_SECRET): 32 bytes of /dev/urandom as 64 hex digits.
Result<std::string> make_run_secret();

// Quote for a POSIX shell: safe for any byte string (single quotes, ' as '\'').
std::string shell_quote(std::string_view s);

// Build the plan. Errors (hosts, engine binary not found locally when needed, run dir)
// carry the file/key they come from. master_port is chosen here when the job leaves it 0:
// a free port on this machine for local runs; for SSH it is chosen on the first host when
// the launch starts (plan.master_port stays 0 and the dry run says so).
Result<LaunchPlan> make_launch_plan(const JobSpec& job, const LaunchOptions& opts);

// Set plan.master_port and rebuild every rank's env/argv/shell_command to match.
void set_master_port(LaunchPlan& plan, int port);
// Rebuild every rank's env/argv/shell_command from the plan's fields (after plan.resume
// changed for a restart).
void refresh_rank_commands(LaunchPlan& plan);

// --exclude-failed (restart.h): re-plans `plan` for the next attempt without host `host`.
// The hosts left keep the job's tp · pp · cp and its global batch; dp becomes what their
// ranks hold (hosts left × cluster.gpus_per_node ÷ tp·pp·cp) and each replica runs more (or
// fewer) micro-batches. ptd-engine resumes the checkpoint at the new dp by re-splitting its
// optimizer shards (docs/engine.md, "Resuming at another dp"). On success the host is marked
// excluded, the ranks are laid out again over the others, MASTER_ADDR moves to the first host
// left when it was the excluded one's and the launcher chose it, and the return value says
// what runs now: "tp 2 · pp 2 · dp 1 on 1 host (4 ranks): the global batch of 8 sequences as
// 4 micro-batches of 2 per replica (was dp 2 with 2)". Otherwise the plan is unchanged and
// the error says why no layout fits: no host left, a rank count tp·pp·cp does not divide, a
// global batch the new dp does not divide (or, interleaved, not in a multiple of pp).
Result<std::string> plan_without_host(LaunchPlan& plan, int host);

// The dry run: per host, the exact command line and environment of every rank, and per
// rank the device it will use (host, LOCAL_RANK, CUDA_VISIBLE_DEVICES, the backend).
std::string format_dry_run(const LaunchPlan& plan);

// The --backend every rank runs with: --backend, else one among the engine arguments after
// --, else "auto" (ptd-engine's default).
std::string rank_backend(const LaunchPlan& plan);

// Why a local launch of a GPU job must not start (for key cluster.gpu: the GPU the job asks for and
// how many per host, what this machine's ptd-engine --devices lists, --backend cpu as the
// way to run the layout on CPUs on purpose), or "" when it may: a CPU job, --backend cpu or
// cuda-sim, an SSH plan (each host's engine refuses for itself), or enough CUDA devices.
// Runs the local engine once (--devices). Launcher::start refuses such a plan.
std::string local_gpu_refusal(const LaunchPlan& plan);

// A Slurm batch script that starts the same ranks with srun (one task per rank) and the
// same environment contract; MASTER_ADDR is the first node of the allocation.
std::string slurm_script(const LaunchPlan& plan);

// The variables forwarded from this environment to every rank (name, value): NCCL_*,
// GLOO_* (sorted), OMP_NUM_THREADS, then launch.env, each once, only those that are set.
// Local ranks inherit the launcher's whole environment; SSH ranks get only these.
std::vector<std::pair<std::string, std::string>> forwarded_environment(const JobSpec& job);

// ---------------------------------------------------------------------------------------
// Events: what a running launch reports. Produced by the launcher's threads, consumed by
// any one thread (CLI loop, studio UI) through Launcher::next_event.

enum class LaunchEventKind {
    host_connecting,  // text: "connecting to user@host:22"
    host_ready,       // connected, authenticated (and uploaded); text says what was done
    host_failed,      // could not connect/auth/upload, or connection lost; text: why
    rank_started,     // text: the command; pid when known
    output,           // one line of a rank's stdout (not metrics) or stderr
    metric,           // one metrics line of a rank's stdout, parsed
    rank_exited,      // exit_code: status, 128+signal, or -1 when the host was lost
    stopping,         // teardown began; text: why ("rank 2 on host-a exited 1", "stop requested")
    restart,          // the run starts again from a checkpoint (restart.h); rank: the failed
                      // rank (-1: a host); text: "restart 1 of 3: rank 2 … resumed from step 8, …"
    finished,         // last event; exit_code: the launcher's exit code
};
const char* launch_event_kind_name(LaunchEventKind k);

struct LaunchEvent {
    LaunchEventKind kind = LaunchEventKind::output;
    int host = -1;              // index into plan.hosts, -1 = none
    int rank = -1;              // global rank, -1 = none
    bool is_stderr = false;     // output: which stream
    std::string text;           // output: the line (without newline); others: a message
    std::optional<MetricRecord> metric;  // metric events
    int exit_code = 0;
    long pid = 0;               // rank_started: pid on its host (0 if unknown)
    int step = -1;              // restart: the step it resumes from (0 = the start)
    double time = 0;            // Unix seconds when the launcher saw it
};

// A thread-safe FIFO. push never blocks (unbounded), pop waits up to timeout_s.
class EventQueue {
public:
    void push(LaunchEvent ev);
    // false on timeout, or when closed and empty.
    bool pop(LaunchEvent& out, double timeout_s);
    void close();               // wakes waiters; later pushes are dropped
    bool closed() const;
private:
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<LaunchEvent> q_;
    bool closed_ = false;
};

// ---------------------------------------------------------------------------------------
// A running launch.

struct LaunchOutcome {
    int exit_code = 0;          // 0, the failing rank's code, 1 for a lost host, 130 on stop
    int failed_rank = -1;       // first rank that failed, -1 = none
    int failed_host = -1;
    std::string reason;         // "rank 2 on localhost exited 1", "stopped by user", ...
    std::vector<std::string> last_stderr;  // failing rank's last stderr lines (up to 20)
    bool stopped_by_user = false;
};

// The rank an engine's error event names as the one that failed first: "peer rank 2 (pid …
// on host) died: …" (ptd-engine's comm_failure_handler), or the older "aborting: rank 2 …";
// −1 when it names none or a rank outside 0..world−1. Peers exit within a millisecond of a
// rank that died, so the launcher blames the named rank, not the first exit it saw.
int failure_blamed_rank(const std::string& message, int world);

class Launcher {
public:
    // Creates the run directory, then connects (in parallel), uploads and starts every
    // rank from a supervisor thread; failures arrive as events and in outcome().
    // Errors returned here are ones found before any process starts (run dir not writable).
    static Result<std::unique_ptr<Launcher>> start(LaunchPlan plan);
    ~Launcher();                // stops and joins if still running

    // Next event; false after `finished` has been returned, or on timeout.
    bool next_event(LaunchEvent& out, double timeout_s);
    // Ask the run to stop (thread-safe, async-signal-unsafe: call from a normal thread).
    void stop();
    // Wait until every rank on every host is gone; returns outcome().exit_code.
    int wait();
    bool finished() const;
    LaunchOutcome outcome() const;  // final after finished()
    // The plan being run. Its hosts and job never change; master_port and the ranks' env
    // are final once the first rank_started event has been returned.
    const LaunchPlan& plan() const;

    struct Impl;
private:
    explicit Launcher(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace ptd
