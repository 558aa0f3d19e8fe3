// planner.h — search every valid layout of a job's model on a cluster for a global batch,
// drop those that do not fit, rank the rest by predicted tokens/s, and give the top-k and
// the Pareto front of throughput vs memory headroom. Pruning never drops a feasible layout
// (tests compare with exhaustive search).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ptd/export/export.h"
#include "ptd/model/estimate.h"
#include "ptd/model/training_cost.h"

namespace ptd {

// cost: what the listed rows are ordered by. throughput: tokens/s (the search's own ranking);
// time / cost / energy: the expected wall clock, cost or energy of the whole run (training.tokens
// or steps; training_cost.h), ties by tokens/s. The search keeps the top_k by tokens/s either way.
enum class PlanObjective { throughput, time, cost, energy };
const char* to_string(PlanObjective o);  // "throughput", "time", "cost", "energy"

struct PlanOptions {
    int gpus = 0;                  // world size to plan for; 0 = the job's cluster
    int top_k = 10;
    double headroom = -1;          // < 0: the job's estimate.headroom if written, else its framework's default (plan_headroom)
    bool tp_beyond_node = false;   // allow tp > gpus_per_node
    bool vary_zero = true;         // try the sharding the framework has (zero 0..3, the distributed optimizer)
    // planfw: false = only layouts training.framework runs (FrameworkRules below, then its
    // export's own checks); true = every layout any framework runs, each row marked with them.
    bool any_framework = false;
    bool vary_recompute = true;
    bool vary_order = true;        // kPlannerOrders, not just the job's order
    bool vary_ep = true;           // MoE: ep over divisors of experts dividing dp
    bool vary_cp = true;           // context parallel over divisors of the world with seq_len % (2·cp) == 0
    // etp: MoE: expert_tp is searched over the divisors of tp when the job leaves it 0 (= tp);
    // a job that fixes it keeps it, unless this is set (bench_plan_published: the published
    // expert_tp is a layout choice like tp, ranked against the others).
    bool vary_expert_tp = false;
    // zb: schedules beyond Megatron-LM's 1F1B / interleaved, tried only where the framework
    // the job will run on has them (ZB-H1: sail-sg's zero-bubble fork of Megatron-LM;
    // DualPipe: deepseek-ai/DualPipe). Off by default: stock Megatron-LM, DeepSpeed and
    // torchtitan cannot run a ZB-H1 or DualPipe plan (docs/planner.md).
    bool try_zb_h1 = false;
    bool try_dualpipe = false;
    int max_micro_batch = 64;
    PlanObjective objective = PlanObjective::throughput;  // cost: how `top` is ordered
    // A cluster profile (ptd calibrate) the time model takes its figures from, owned by the
    // caller; null = the GPU preset's.
    const ClusterProfile* profile = nullptr;
    bool exhaustive = false;       // no pruning (tests compare)
    bool simulate_all = false;     // simulate every layout's schedule, no screening by bounds (tests compare)
    // Also keep the best `top_k_unfit` evaluated layouts that do NOT fit (PlanResult::unfit),
    // ranked and de-duplicated like `top`. With pruning these are the near misses: layouts
    // past the first micro-batch / recompute step that overflows are not evaluated.
    int top_k_unfit = 0;
    // Fill PlanResult::fitting_tokens_per_s, so a caller can rank any layout afterwards.
    bool keep_fitting_scores = false;
    // The cluster is "too big for the global batch" when the best layout idles more than this
    // share of the step in the pipeline bubble; the planner then searches smaller GPU counts
    // (whole nodes, halving) for the largest that stays under it and says so (PlanResult::
    // too_big). < 0 turns the check off.
    double max_bubble_share = 0.25;
    // fold: rows that differ only in interleaving depth, in tp_comm_overlap or (hsdp) in the
    // replicas of the sharded states (dp_replicate) are one row
    // (`top` and `unfit`): the fastest is listed, the others that rank among the listed rows'
    // speeds go into its PlanEntry::folded, and `top_k` counts distinct layouts. false = one
    // row for each.
    bool fold = true;
    // Threads of the screening pass (every layout's memory and step-time bounds, nearly all
    // of a plan's time): 0 = one per hardware thread. The plan is the same on any number.
    int threads = 0;
    // Called from the thread that called plan_layouts with (evaluated, estimated total): on
    // one thread every 4096 evaluations, with several every 20 ms while they search (the
    // calling thread then only watches); return false to cancel (every thread stops).
    std::function<bool(int64_t, int64_t)> progress;
};

// fold: a listed layout at another interleaving depth, TP-overlap setting or replica count,
// folded into its row.
struct FoldedVariant {
    int vpp = 1;
    bool tp_comm_overlap = false;
    double tokens_per_s = 0;
    double peak_bytes = 0;
    int dp_replicate = 1;  // hsdp: replicas of the sharded states (sharding groups of dp / this)
};

struct PlanEntry {
    LayoutChoice choice;
    std::vector<int> layers_per_stage;  // empty = even split
    LayoutScore score;
    TrainingCost training;              // cost: the whole run at this row's step time (listed rows only)
    // planfw: with any_framework, the frameworks that run this layout (framework_runs); empty otherwise.
    std::vector<Framework> frameworks;
    // fold: with PlanOptions::fold, the same layout at other interleaving depths, TP-overlap
    // settings or replica counts, no faster than this row and at least as fast as the last
    // listed row; those with this row's tp_comm_overlap first, each part by ascending vpp, then
    // dp_replicate. Empty otherwise.
    std::vector<FoldedVariant> folded;
};

// cost: the figure `objective` orders by (smaller is better; tokens/s negated for throughput).
double objective_value(const PlanEntry& e, PlanObjective objective);

struct PlanResult {
    std::vector<PlanEntry> top;          // best first, at most top_k, all fit
    std::vector<PlanEntry> pareto;       // fit; no other fitting layout is both faster and has more headroom
    int64_t enumerated = 0;              // layouts considered (incl. pruned)
    int64_t evaluated = 0;               // layouts scored (memory exact, step time bounded)
    int64_t simulated = 0;               // of those, how many needed the schedule simulation (docs/planner.md)
    int64_t feasible = 0;                // layouts that fit
    int64_t equivalent_hidden = 0;       // fitting layouts left out of `top` because one listed has the same predicted numbers
    int64_t folded = 0;                  // fold: variants folded into `top` rows (their PlanEntry::folded)
    double seconds = 0;
    int job_rank = -1;                   // rank of the job's own layout among feasible (0 = best), −1 = not found / infeasible
    bool job_in_space = false;           // planfw: the job's layout is one the search enumerates (else job_rank counts the faster listed ones)
    std::string why_best;                // one line: why top[0] beats the job's own layout (when ranked below it) or the runner-up, and what it trades (docs/planner.md)
    bool cancelled = false;
    std::vector<PlanEntry> unfit;        // with top_k_unfit: best non-fitting layouts first
    std::vector<double> fitting_tokens_per_s;  // with keep_fitting_scores: every fitting layout's, descending
    // When the best layout's bubble exceeds max_bubble_share: one line saying the global batch
    // cannot keep this many GPUs busy, with busy_gpus, the largest GPU count (whole nodes) whose
    // best layout stays under it (0 = none found down to one node). Empty otherwise.
    std::string too_big;
    int busy_gpus = 0;
    // planfw: what bounded the search and what it left free.
    bool any_framework = false;          // options.any_framework
    Framework framework = Framework::megatron;  // the job's training.framework
    int framework_version = 0;           // and its training.framework_version (framework_rules)
    double headroom = 0;                 // the fraction of GPU memory every listed layout leaves free
    std::string headroom_source;         // "--headroom", "estimate.headroom" or "megatron's default"
    int64_t refused = 0;                 // fitting layouts examined that the framework's export checks refused
    std::string refused_why;             // the export's reason for the first of them ("training.fp8: got ..."); "" when none
    bool job_refused = false;            // the job's own layout fits but its framework's export refuses it (job_rank −1; job_refusal_text)
    // Offload layouts that fit and are faster than the best layout without offload, but by no
    // more than the estimate's error: left out (offload costs host memory and PCIe for a gain
    // the estimate cannot tell from noise). 0 when none, or when nothing fits without offload.
    int64_t offload_within_error = 0;
};

// ---- Frameworks (planfw; docs/planner.md "Frameworks") ---------------------------------

// What a framework runs, as the search is bounded by it: the sharding, offload, parallel
// dimensions, recompute and overlap keys of the version its export targets (export.cpp).
struct FrameworkRules {
    Framework framework = Framework::megatron;
    const char* runs = "";          // "Megatron-LM (main d98e8a6)", for the plan header
    bool has_format = true;         // pytorch-fsdp: no export of its own
    ExportFormat format = ExportFormat::megatron;
    bool zero0 = true, zero0_pure_dp_only = false, zero1 = false, zero2 = false, zero2_with_pp = false, zero3 = false;
    // ttfsdp: zero 3 with pp > 1 is a layout the stack runs (torchtitan: the same FSDP2 as zero 2
    // there, so the search visits only zero 2; a job that writes 3 is allowed).
    bool zero3_with_pp = false;
    bool distributed_optimizer = false;
    bool offload_optimizer = false;   // offload_optimizer alone (with a sharded optimizer)
    bool offload_all = false;         // offload_optimizer with offload_params (zero 3)
    bool tp = true, pp = true, cp = true, ep = true, expert_tp = true, vpp = true, sequence_parallel = true;
    bool selective_recompute = true;
    bool overlap_grad_reduce = true, overlap_param_gather = true, tp_comm_overlap = true;
    const char* lacks = "";           // one phrase: what the search leaves out for it
};
// The rules of `f` as of `framework_version` (training.framework_version, yyyymm; 0 = today's),
// and the union every framework's rules allow (--any-framework). The version moves only
// torchtitan's: before its Python config system (2026-02-23, torchtitan 9810191) a job's layouts
// are held to the TOML export (torchtitan-toml, v0.2.x), which takes what that torchtitan ran
// (e.g. torchao's tensorwise float8), not to the Python config of main.
const FrameworkRules& framework_rules(Framework f, int framework_version = 0);
// With r.job_refused: "`ptd export --format torchtitan` refuses it: <the export's reason>", what
// `ptd plan` and the studio say of the job's own layout.
std::string job_refusal_text(const PlanResult& r);
const FrameworkRules& any_framework_rules();
// Whether two choices are the same layout: every degree, the micro-batch, the sharding, the
// recompute, the rank order, the offload, the schedule (1f1b = auto at vpp 1) and the experts'
// TP (etp 0 = tp). The overlap keys are not compared: the planner sets them per layout.
bool same_choice(const LayoutChoice& a, const LayoutChoice& b);
// fold: whether two choices are one layout up to what the plan folds into one row: same_choice
// but for the interleaving depth and dp_replicate, with the gradient and parameter overlaps
// compared and tp_comm_overlap not. ZB-H1 and DualPipe (one chunk per stage, other schedules) fold only
// with their own kind.
bool same_up_to_fold(const LayoutChoice& a, const LayoutChoice& b);
inline constexpr Framework kFrameworks[] = {Framework::megatron, Framework::nemo, Framework::deepspeed,
                                            Framework::torchtitan, Framework::pytorch_fsdp, Framework::llm_foundry};
// The rules a search of `job` applies: its framework's (any_framework: the union), where the
// bundled engine runs the job (estimate.activation_profile = "ptd-engine") with its own ZeRO-1.
FrameworkRules search_rules(const JobSpec& job, const PlanOptions& options);
// Whether the rules allow a layout (its dimensions, sharding, offload, recompute; not the
// overlap keys, which the planner sets from the rules).
bool rules_allow(const FrameworkRules& r, const LayoutChoice& c, const JobSpec& job);
// Whether `f` runs the planned layout: its rules allow it and, where it has an export, the
// export of the job with the layout applied succeeds (export_job: every refusal counts).
bool framework_runs(Framework f, const JobSpec& job, const PlanEntry& entry);

// "grad+param+tp": the overlap keys a layout runs with (overlap_grad_reduce,
// overlap_param_gather, tp_comm_overlap), "none" without.
std::string overlap_words(const LayoutChoice& c);

// The memory every planned layout leaves free by default (docs/planner.md "Headroom"), per
// framework: the caching allocator's fragmentation beyond estimate.fragmentation's average
// and a step heavier than the average one the estimate counts.
double default_headroom(Framework f);
// The headroom a plan leaves: options.headroom when ≥ 0, else the job's estimate.headroom when
// written, else default_headroom of its framework; `source` says which.
double plan_headroom(const JobSpec& job, const PlanOptions& options, std::string* source = nullptr);

Result<PlanResult> plan_layouts(const JobSpec& job, const PlanOptions& options);

// The micro-batches a replica's `per_replica` sequences a step split into evenly, ascending,
// up to `most` (PlanOptions::max_micro_batch): what the search and an unwritten micro-batch
// (batch_choice.h) choose among. `out` is cleared first.
void micro_batch_candidates(long long per_replica, int most, std::vector<int>& out);

// 1-based rank a layout with `tokens_per_s` would have among the fitting layouts of `plan`
// (1 + how many are strictly faster), as job_rank counts. Needs keep_fitting_scores.
int64_t plan_rank_of(const PlanResult& plan, double tokens_per_s);

// Apply a planned layout to a job (parallel + micro_batch; dp derived; global batch kept).
JobSpec apply_plan_entry(const JobSpec& job, const PlanEntry& entry);

}  // namespace ptd
