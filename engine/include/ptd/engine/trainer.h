// trainer.h — the training run of one ptd-engine rank: rendezvous, groups, data, the
// 1F1B pipeline step, gradient reduction (all-reduce or ZeRO-1 reduce-scatter), global
// norm clipping, AdamW with warmup + cosine, metrics lines, checkpoints and resume.
//
// One plain struct (RunState) holds everything a run owns; the functions below are the
// steps of a run, in order. `ptd-engine --job JOB.toml` calls run_training().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ptd/engine/backend.h"
#include "ptd/engine/comm.h"
#include "ptd/engine/model.h"
#include "ptd/spec/job_spec.h"
#include "ptd/rank_env.h"

namespace ptd::engine {

class TokenSource;
struct BackendChoice;  // engine/src/device_select.h

struct TrainOptions {
    std::string job_path;          // for messages and the relative data path
    int stop_at_step = -1;         // run until this step (absolute); −1 = training.steps
    std::string run_dir;           // "" = runs/<run id>
    int checkpoint_every = 0;      // write a checkpoint every N steps (and at the last); 0 = never
    bool resume = false;           // continue from the latest complete checkpoint in run_dir
    int threads = 0;               // compute threads; 0 = OMP_NUM_THREADS or default_compute_threads()
    double comm_timeout_s = 300;   // every collective / receive
    double stall_timeout_s = 60;   // no heartbeat this long → the rank is declared stalled
    double heartbeat_s = 1.0;
    // A rank whose store (rank 0) has echoed none of its heartbeats this long stops itself,
    // writing nothing more into the run directory (--store-lease; docs/engine.md).
    double store_lease_s = 10;
    // Record the measured timeline (run_dir/timeline/rank-NNNNN.tsv) for the first N steps
    // of this process; 0 = off, −1 = every step (--timeline-steps, --timeline-all).
    int timeline_steps = 3;
    // Where the timeline files go; "" = run_dir/timeline. `ptd launch` over SSH stages them
    // in the host's own folder (run_dir/host-H/timeline) and collects them afterwards.
    std::string timeline_dir;
    // The backend and device ptd-engine chose (--backend); null = the CPU backend. Must
    // outlive run_training.
    const BackendChoice* backend = nullptr;
};

// Step index k is 0-based; lr(k) ramps linearly over `warmup` steps, then follows a
// cosine from lr to min_lr over the remaining training.steps − warmup steps.
double learning_rate(const TrainingSpec& t, int64_t k);

// AdamW hyper-parameters not in the job spec (GPT-3 / Megatron-LM values).
inline constexpr float kAdamBeta1 = 0.9f, kAdamBeta2 = 0.95f, kAdamEps = 1e-8f;

// Optimizer state of one rank: Adam moments over this rank's shard of the flat
// parameter buffer (the whole buffer without ZeRO; 1/dp of it with ZeRO-1).
struct OptimizerState {
    bool sharded = false;          // ZeRO-1 over dp > 1: dp equal shards of the padded flat buffer
    int64_t shard_offset = 0, shard_numel = 0;
    float* m = nullptr;            // [shard_numel] (MEM_OPTIMIZER)
    float* v = nullptr;
    // Mixed precision: the f32 master weights of the shard (MEM_OPTIMIZER, as Megatron's
    // distributed optimizer counts them); the 16-bit model weights are rounded from them
    // after each update. Null in fp32 training, where the parameters are their own master.
    float* master = nullptr;
    int64_t step = 0;              // optimizer steps taken (Adam's bias-correction t)
    double* scalars = nullptr;     // [STEP_SCALAR_COUNT] the step's scalars (device, MEM_WORKSPACE)
};
// Also plans the backend's AdamW over the shard's tensor ranges (Backend::plan_adamw), each
// with weight_decay or 0 (tensors without decay).
OptimizerState make_optimizer(Backend& be, Model& model, float weight_decay);
void free_optimizer(Backend& be, OptimizerState& st);

// Wall time of one step by what it waited for, seconds.
struct TimelineRecorder;  // timing.h

struct StepTimes {
    double total = 0, compute = 0, tp_comm = 0, pp_comm = 0, pipeline_idle = 0, dp_comm = 0, optimizer = 0;
    // Set on the steps whose measured timeline is recorded (TrainOptions::timeline_steps).
    TimelineRecorder* timeline = nullptr;
    // Test hook (PTD_ENGINE_INJECT_SLOW_RANK): seconds added to each forward and backward
    // block of this rank, as a slower core would take (a straggler for the timeline's rule).
    double inject_compute_delay_s = 0;
};

// Sums the step's gradients where they are partial: SP-replicated tensors over tp, the
// tied embedding over its first/last-stage group, then data parallel (all-reduce, or
// ZeRO-1 reduce-scatter into this rank's shard).
void reduce_gradients(Model& model, const OptimizerState& st, CommGroups& groups, StepTimes& times);
// Adds Σ g² over the gradient elements this rank is responsible for in the global norm
// (every element of the model is counted on exactly one rank) to
// st.scalars[SCALAR_GRAD_SQUARES], on the device (the f32 main grads, loss-scaled in fp16).
void accumulate_grad_squares(Model& model, OptimizerState& st);
// AdamW on this rank's shard with the grad scale of st.scalars (clip factor, times
// 1/loss-scale for fp16), skipped on the device when found-inf is set there (an fp16
// overflow, or a non-finite loss or norm); then (ZeRO-1) all-gather the (16-bit) model
// parameters over dp; zeroes the gradients. One Backend::adamw_step over the ranges
// make_optimizer planned (their weight decay included).
void optimizer_step(Model& model, OptimizerState& st, CommGroups& groups, float lr, StepTimes& times);

// The micro-batches of one step for this rank: token ids [m][b][s+1] of the sequences
// this data-parallel replica trains on (global sequences first + (dp_rank·m + j)·b …), in
// host staging memory the backend owns (Backend::alloc_host; null on middle stages).
struct StepBatch {
    const int32_t* tokens = nullptr;
    // Multiplies the loss gradient (fp16: the dynamic loss scale; 1 otherwise).
    float loss_scale = 1.0f;
};

// ---- the pipeline schedule as data (schedule.cpp) -----------------------------------------
// run_pipeline_step executes exactly this plan, so a test can check the communication of
// any p, v and m (FIFO order per direction, no deadlock under NCCL's group semantics)
// without running a model.

struct PipelineAction {
    bool forward = true;
    int chunk = 0, micro_batch = 0;
};

// One point-to-point operation with the stage `peer` (pp group rank). `check` is what
// both sides pass to the communicator for strict mode: 2·(c·m + j) + (0 activation |
// 1 gradient), c the sending chunk, j the micro-batch. A send carries the output of
// action `of` (its per-(chunk, micro-batch) send buffer); a receive fills the input of
// action `of`.
struct PipelineP2p {
    bool send = false;
    int peer = -1;
    uint32_t check = 0;
    PipelineAction of;
};

// Post `group` as one p2p group, wait for it, then run `actions` (none in the last
// entry). A group holds the receives of its actions and the sends of the entry before:
// per action for 1F1B (Megatron's send_forward_recv_backward and friends), per steady
// forward/backward pair for interleaved 1F1B (send_forward_backward_recv_forward_backward);
// the step ends with a group of the last sends.
struct PipelinePlanEntry {
    std::vector<PipelineP2p> group;
    std::vector<PipelineAction> actions;
};

// Stage pp_rank's actions of one step, in order: 1F1B (vpp = 1) or Megatron's
// interleaved order (vpp > 1, micro_batches % pp == 0).
std::vector<PipelineAction> pipeline_actions(int pp, int pp_rank, int vpp, int micro_batches);
std::vector<PipelinePlanEntry> pipeline_plan(int pp, int pp_rank, int vpp, int micro_batches);

// Runs forward and backward of every micro-batch through this stage with the 1F1B
// schedule (warm-up forwards, steady one-forward-one-backward, cool-down backwards),
// point-to-point over groups.pp as pipeline_plan says. Adds Σ loss over the rows this
// rank computes the loss for (last stage, tp rank 0; nothing elsewhere) to the device
// scalar *loss_acc. Each micro-batch's token ids are uploaded once. cuda_graphs
// (PTD_CUDA_GRAPHS=1; one stage, tp = 1): micro-batch 0's forward and backward are captured
// as one CUDA graph, which every micro-batch of the step then replays.
void run_pipeline_step(Model& model, Activations& acts, CommGroups& groups, const StepBatch& batch,
                       double* loss_acc, StepTimes& times, bool cuda_graphs = false);

// The compute threads a rank that neither --threads nor OMP_NUM_THREADS sizes starts with, one
// of `local_ranks` on its node, until the ranks have connected and agreed how they share their
// machine (host_cores_of_rank below; engine/src/usable_cores.cpp): compute_threads_for this machine's
// cores, this process's CPU affinity mask (taskset, a Slurm task's or a container's cpuset)
// and its cgroup's CPU bandwidth limit (cpu.max, v1 cpu.cfs_quota_us; 0 = none), rounded up
// to whole cores. Threads beyond the cores share them, and OpenBLAS's spinning threads then
// slow every GEMM many times over.
int default_compute_threads(int local_ranks);
// The rule, on given counts: a mask smaller than the machine and no larger than one rank's
// share (mask · local_ranks ≤ machine) is the rank's own — all of it (srun --cpus-per-task,
// a taskset per rank); a larger one is shared with the node's other ranks — mask / local_ranks;
// a quota is the cgroup's, shared likewise (at most quota / local_ranks). At least 1.
int compute_threads_for(int machine, int mask, int quota, int local_ranks);
// Whether `local_ranks` ranks of `threads` compute threads each want more cores than they
// have, by the same rule: an own mask holds one rank's threads, a shared mask (or the
// machine) and a quota all the node's. The probes' shared-cores verdict where a rank cannot
// read its mask (probe.cpp; otherwise share_oversubscribed, below).
bool cores_oversubscribed(int local_ranks, int threads);
bool cores_oversubscribed_for(int machine, int mask, int quota, int local_ranks, int threads);
// The cores a rank has once its machine's masks are known (after connecting): each
// CPU of its mask `mine` counts 1 / the number of the machine's ranks whose masks hold it
// (`holders`, indexed by CPU id; 0 where none: taken as 1). 4 ranks in one 2-core cpuset have
// half a core each; 4 ranks on their own 2 cores, 2 each; a CPU id beyond `holders` counts 1.
double node_cpu_share(const std::vector<int>& mine, const std::vector<float>& holders);
// Whether a rank's `threads` want more than its share of the node's cores, or the node's
// `local_ranks` ranks more than their cgroup's `quota` (0 = none): the probes' shared-cores
// verdict once every rank's mask is known, where the own-mask rule above can only guess.
bool share_oversubscribed(double share, int quota, int local_ranks, int threads);
// What this process may run on, as the probes' host line reports it: the CPUs of its affinity
// mask (ascending ids) and its cgroup's CPU bandwidth limit in whole cores (0 = none). One
// rank cannot tell whether its mask is its own or shared with the node's other ranks; `ptd
// calibrate` sees every rank's line and takes the union of a host's masks (ProfileHost
// usable_cores): 4 ranks in one 2-core cpuset of a 64-core machine share 2 cores.
std::vector<int> affinity_cpus();
int cpu_quota_cores();

// Host floats all-reduced over `group` through a buffer of `be` (the communicators read backend
// memory): what the ranks agree on outside a step. Collective: every rank of the group calls it.
void all_reduce_host_floats(Backend& be, Communicator& group, float* x, int64_t n, ReduceOp op);
// What a rank has of its machine once every rank is connected (engine/src/host_cores.cpp):
// the ranks that share the machine (same host name and boot id, whatever the layout's nodes or
// LOCAL_WORLD_SIZE say) and this rank's share of its cores (node_cpu_share over the masks of
// the machine's ranks; −1 where this rank cannot read its mask).
struct HostCores {
    double share = -1;
    int ranks_on_machine = 1;
};
// Collective over `world` (every rank calls it, in the same place): a few small all-reduces
// through buffers of `be`. One rank alone: its own mask, nobody to share it with.
HostCores host_cores_of_rank(Backend& be, Communicator& world, int rank, int world_size);
// Each rank's machine (0, 1, … in order of first appearance) from every rank's key words
// (kMachineKeyWords floats a rank, rank-major): equal keys, one machine.
inline constexpr int kMachineKeyWords = 3;
std::vector<int> machines_of_ranks(const std::vector<float>& keys);
// The default compute threads from a rank's share of its machine's cores: its whole cores (at
// least 1), and no more than its part of the cgroup's `quota` (0 = none) among the
// `ranks_on_machine` ranks under it.
int compute_threads_for_share(double share, int quota, int ranks_on_machine);

// The whole run. Returns the process exit code (0 = finished; errors are printed and
// reported as metrics events; a failed peer exits through fatal_run_error()).
int run_training(const JobSpec& job, const RankEnv& env, const TrainOptions& options);

// A rank set up and connected exactly as a training run is (backend from
// options.backend, store, liveness monitor, failure reporting, communicator groups), with
// nothing of a model: the calibration probes (probe.h) measure through it.
class KvServer;
class KvClient;
struct ConnectedRank {
    RankLayout layout;
    EngineConfig cfg;
    int threads = 1;
    HostCores host_cores;
    std::string run_id;
    std::unique_ptr<Backend> be;
    std::unique_ptr<KvServer> server;
    std::unique_ptr<KvClient> store;
    CommGroups groups;
    ~ConnectedRank();
};
// 0 and `out` filled, or the process exit code after an error was printed and reported
// as a metrics event (like run_training's set-up errors).
int connect_rank(const JobSpec& job, const RankEnv& env, const TrainOptions& options, ConnectedRank& out);
// The orderly goodbye of run_training's end: a world barrier, then rank 0's store waits
// for every rank's goodbye (30 s) before it closes.
void disconnect_rank(ConnectedRank& r);

}  // namespace ptd::engine
