// planner.h — search every valid layout of a job's model on a cluster for a global batch,
// drop those that do not fit, rank the rest by predicted tokens/s, and give the top-k and
// the Pareto front of throughput vs memory headroom. Pruning never drops a feasible layout
// (tests compare with exhaustive search).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

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
    double headroom = -1;          // < 0: the job's estimate.headroom
    bool tp_beyond_node = false;   // allow tp > gpus_per_node
    bool vary_zero = true;         // try zero 0..3 and the distributed optimizer
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
    // Called every so often from the searching thread with (evaluated, estimated total);
    // return false to cancel.
    std::function<bool(int64_t, int64_t)> progress;
};

struct PlanEntry {
    LayoutChoice choice;
    std::vector<int> layers_per_stage;  // empty = even split
    LayoutScore score;
    TrainingCost training;              // cost: the whole run at this row's step time (listed rows only)
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
    double seconds = 0;
    int job_rank = -1;                   // rank of the job's own layout among feasible (0 = best), −1 = not found / infeasible
    std::string why_best;                // one line: why top[0] beats the job's own layout (when ranked below it) or the runner-up, and what it trades (docs/planner.md)
    bool cancelled = false;
    std::vector<PlanEntry> unfit;        // with top_k_unfit: best non-fitting layouts first
    std::vector<double> fitting_tokens_per_s;  // with keep_fitting_scores: every fitting layout's, descending
    // When the best layout's bubble exceeds max_bubble_share: one line saying the global batch
    // cannot keep this many GPUs busy, with busy_gpus, the largest GPU count (whole nodes) whose
    // best layout stays under it (0 = none found down to one node). Empty otherwise.
    std::string too_big;
    int busy_gpus = 0;
};

Result<PlanResult> plan_layouts(const JobSpec& job, const PlanOptions& options);

// 1-based rank a layout with `tokens_per_s` would have among the fitting layouts of `plan`
// (1 + how many are strictly faster), as job_rank counts. Needs keep_fitting_scores.
int64_t plan_rank_of(const PlanResult& plan, double tokens_per_s);

// Apply a planned layout to a job (parallel + micro_batch; dp derived; global batch kept).
JobSpec apply_plan_entry(const JobSpec& job, const PlanEntry& entry);

}  // namespace ptd
