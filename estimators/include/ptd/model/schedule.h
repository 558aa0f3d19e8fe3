// schedule.h — the pipeline schedule as Megatron-LM runs it (1F1B = PipeDream-Flush, and the
// interleaved 1F1B of Narayanan et al. 2021), ZB-H1 (Qi et al. 2023, backward split into B
// and W) and DualPipe's closed form (DeepSeek-V3 report), and an event simulation that
// places its blocks; the estimator takes its step time from this simulation, so the
// predicted timeline's makespan (ptd/timeline/timeline.h) is the predicted step time by
// construction. docs/estimators.md ("The pipeline timeline").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ptd/spec/job_spec.h"

namespace ptd {

// backward: the whole backward (1F1B, interleaved), or only its input-gradient part B when the
// schedule splits it (ZB-H1), whose weight-gradient part W is then a block of its own.
enum class Pass : uint8_t { forward, backward, weight };

// One block of the schedule on one stage: a micro-batch through one model chunk.
struct ScheduleOp {
    Pass pass = Pass::forward;
    int chunk = 0;        // virtual pipeline chunk on this stage, 0..v−1
    int micro_batch = 0;  // 0..m−1
    bool operator==(const ScheduleOp&) const = default;
};

// Forward blocks a stage runs before its first backward (Megatron-LM schedules.py):
// 1F1B min(p − s − 1, m); interleaved min(2·(p − s − 1) + (v − 1)·N, m·v), N = `group`
// (l405: --microbatch-group-size-per-virtual-pipeline-stage; 0 = p, Megatron's default).
int schedule_warmup(int p, int v, int m, int stage, int group = 0);

// The j-th block (0 ≤ j < 2·m·v) of stage `stage`: warm-up forwards, then one forward and
// one backward alternating, then the cool-down backwards. Interleaved chunks follow
// Megatron's table: micro-batches in groups of N (`group`, 0 = p), each group through
// chunk 0, 1, …, v−1 (forward) or v−1, …, 0 (backward).
ScheduleOp schedule_op(int p, int v, int m, int stage, int j, int group = 0);

// Every block of one stage in order (2·m·v of them).
std::vector<ScheduleOp> stage_schedule(int p, int v, int m, int stage, int group = 0);

// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241, §3 and
// Fig. 3; the order of sail-sg/zero-bubble-pipeline-parallelism's ZB-H1 schedule): the
// backward split into B (input gradient, on the critical path) and W (weight gradient).
// Stage s runs 1F1B's min(p − s − 1, m) warm-up forwards, then d = min(s, m − warm-up)
// forward/B pairs whose W it defers, then forward/B/W triples, then the cool-down B/W
// pairs, then the d deferred W blocks: W fills the bubbles at the end. Micro-batches in
// flight (forward done, W not) never exceed 1F1B's p − s + … bound of stage 0 (p).
// The j-th block (0 ≤ j < 3·m) of stage `stage`.
ScheduleOp schedule_op_zb_h1(int p, int m, int stage, int j);
// Blocks per stage of a schedule (2·m·v; 3·m for ZB-H1) and the j-th of them; `sched` is
// resolved (effective_schedule) — DualPipe has no block order here (dualpipe_makespan).
int schedule_block_count(PipelineSchedule sched, int v, int m);
ScheduleOp schedule_op(PipelineSchedule sched, int p, int v, int m, int stage, int j, int group = 0);
std::vector<ScheduleOp> stage_schedule(PipelineSchedule sched, int p, int v, int m, int stage, int group = 0);

// A placed block.
struct PlacedOp {
    int stage = 0;
    ScheduleOp op;
    double start_s = 0, end_s = 0;
};

// Block durations, indexed [chunk·p + stage]: the time one micro-batch's forward
// (backward, with its recompute) takes through that chunk, communication inside included.
struct CoreSharing;
struct PipelineDurations {
    int p = 1, v = 1, m = 1;
    std::span<const double> fwd, bwd;
    // zb: the schedule (resolved; automatic = 1F1B / interleaved by v) and, for ZB-H1, the
    // W blocks' durations (bwd then holds B only).
    PipelineSchedule schedule = PipelineSchedule::automatic;
    std::span<const double> wgt;
    int group = 0;  // l405: interleaved micro-batch group size N; 0 = p (Megatron's default)
    // Shared cores: a host whose ranks share fewer cores (CoreSharing); null: every rank has its own.
    const CoreSharing* sharing = nullptr;
    // p2pdep: hop[s] (p entries, or empty) is the time between a block's end and the start of
    // the block on the neighbouring stage that waits for it, over the link between stage s and
    // stage (s + 1) mod p, when the send runs asynchronously (Megatron's interleaved schedule
    // with overlap_p2p_comm: the sender computes on, the receiver still waits for the bytes).
    // Empty: every send is inside the blocks' durations. Not with shared cores or DualPipe.
    std::span<const double> hop;
};

// Shared cores (issue 27 point 4): the bundled engine on a host with more ranks than cores. A
// block's compute part was timed with every rank computing at once (the profile's probes),
// so it ran at cores / ranks of one rank's speed; its communication part (a rank blocked
// in a collective or a receive) takes no core. When fewer ranks compute — a pipeline's
// warm-up and cool-down, a stage waiting for its neighbour — the cores are shared among
// those that do: processor sharing, each computing rank at min(1, cores / n) of a lone
// rank's speed, n the ranks computing at that moment. The step is then between the host's
// total work over its cores and the critical path at a lone rank's speed, as the schedule
// lets the two overlap; no factor chooses between them.
struct CoreSharing {
    double cores = 0;             // the host's cores
    double ranks_per_stage = 0;   // ranks on the host running each stage's blocks in step (tp · dp)
    double measured_share = 1;    // ranks (× threads) per core while the compute parts were timed (> 1)
    // The fraction of its probed time each rank computed (ProbedBusy, estimate.h); the rest it
    // was blocked in its stage's collectives, leaving the core to the others. While the probes
    // ran, a rank then shared its core with 1 + (measured_share − 1) · busy computing ranks on
    // average (its effective share e), not measured_share: a compute part is its probed time
    // over e in lone-rank seconds, and each rank in a compute part counts e / measured_share of
    // a rank against the cores (its waits, folded into the block's communication part, leave
    // its core to others that often) — so with every rank computing, each part takes its probed
    // time again, and a stage computing alone runs at a lone rank's speed. 1: the ranks never
    // waited (e = measured_share).
    double busy = 1;
    // The compute part of each block, [chunk·p + stage], as timed (≤ the block's duration;
    // the rest is communication). wgt: ZB-H1's W blocks (may be empty otherwise).
    std::span<const double> fwd_compute, bwd_compute, wgt_compute;
};

// Places every block of the schedule as early as its dependencies allow: a forward
// after the same micro-batch's forward on the previous stage (chunk c on the last stage
// feeds chunk c + 1 on the first), a backward after the next stage's backward (the last
// chunk's backward after its own forward), every block after the one before it on its
// stage. A dependency across stages (d.hop not empty) starts its link's hop after the later
// of the block it waits for and the stage's previous block of the same pass (for its first
// backward, the block before it), when Megatron posts the receive. Fills
// stage_end[s] (p entries) with the end of stage s's last block and returns
// the latest end (the pipeline's makespan). With `out`, records every block.
double simulate_pipeline(const PipelineDurations& d, std::span<double> stage_end, std::vector<PlacedOp>* out = nullptr);
// With d.sharing the blocks are placed in time order under processor sharing (CoreSharing):
// each block computes first, at the rate the ranks computing beside it leave it, then
// waits out its communication; a block's end is then no longer its start plus its
// duration. simulate_pipeline, pipeline_makespan and the bounds all take this path then.

// The same numbers without placing every block when m is large: the schedule's steady
// state adds exactly one slowest-stage micro-batch (Σ over chunks of forward + backward)
// per micro-batch, so blocks are placed for a short schedule and the rest is added
// (tests/schedule/timeline.cpp checks it against simulate_pipeline on a matrix of uneven
// stages). What the planner calls: no allocation after the first call on a thread.
// Results are remembered per thread, keyed by the schedule, p, v, m and every duration
// (exact compare), so a repeated question is answered without placing blocks. DualPipe:
// dualpipe_makespan with no hidden communication.
double pipeline_makespan(const PipelineDurations& d, std::span<double> stage_end);
// Forgets this thread's remembered makespans (not the compiled schedules, which depend on
// p, v and m only), so a benchmark can time evaluations of layouts it has not seen.
void clear_pipeline_makespan_memo();

// Bounds on simulate_pipeline's makespan without placing blocks, so the planner can screen
// every layout and simulate only those whose rank the bounds leave open (docs/planner.md).
// Lower: stage s cannot start before micro-batch 0 has gone forward through chunk 0 of the
// stages before it, then is busy m·T_s (T_s: its forward + backward over all chunks), and
// the last chunk-0 backward still has to go back through those stages. Fills
// stage_end_lo[s] (p entries) with that stage's own floor (start + busy time) and returns
// the largest floor (the hops between stages, d.hop, on the fill and drain chains). Exact
// for p = 1. ZB-H1: the floors only (W may end a stage while the
// stages before it drain). Not for DualPipe (a closed form, evaluated directly).
double pipeline_makespan_lower(const PipelineDurations& d, std::span<double> stage_end_lo);
// Upper: the simulation is monotone in every duration, so raising every forward block to
// the longest forward and every backward to the longest backward gives a schedule of equal
// blocks at least as long (a hop after a block delays its receiver no more than a block
// longer by the longest hop would); its makespan, per unit forward, is convex in the backward /
// forward ratio, so it is bounded by the chord between ratios sampled once per (p, v, m)
// and cached per thread.
double pipeline_makespan_upper(const PipelineDurations& d);

// DualPipe (DeepSeek-V3 technical report, arXiv 2412.19437, §3.2.1 and Table 2), v = 1:
// rank i holds stage i and stage p − 1 − i, half the micro-batches enter from each end, and a
// forward chunk of one direction runs beside a backward chunk of the other ("F&B", the
// communication of one hidden under the computation of the other). No block order is
// simulated: the paper's closed form. Per rank: m micro-batches through its two stages'
// worth of work at the mean of its two stages (F, B = input gradient, W from d), the F&B
// pairs (m − 3p/2 + h + 1 on the rank h from the nearer end, counted from DeepSeek's
// DualPipe.step()) shortened by their hidden communication
// (seconds per pair), plus the bubble (p/2 − 1)·(F&B + B − 3W) of Table 2 (≥ 0), with B
// there the whole backward (B + W here).
// `fb_hidden` (p entries, may be empty): seconds of communication per stage that a pair
// hides. Fills stage_end (p entries) with each rank's end and returns the latest.
double dualpipe_makespan(const PipelineDurations& d, std::span<const double> fb_hidden, std::span<double> stage_end);

}  // namespace ptd
