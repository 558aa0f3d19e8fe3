// timeline.h — one training step as a timeline: which block (forward, backward,
// recompute, communication, optimizer) runs on which pipeline stage when. Three parts:
//   1. the pipeline schedule as Megatron-LM runs it (1F1B = PipeDream-Flush, and the
//      interleaved 1F1B of Narayanan et al. 2021), ZB-H1 (Qi et al. 2023, backward split
//      into B and W) and DualPipe's closed form (DeepSeek-V3 report), and an event simulation that places its
//      blocks; the estimator takes its step time from this simulation, so the predicted
//      timeline's makespan is the predicted step time by construction;
//   2. predicted_timeline(): the whole step of a job as data (blocks per stage, the DP
//      tail, the optimizer), for `ptd schedule`, the studio's Schedule tab and traces;
//   3. the measured-timeline file format (one text file per rank in a run directory's
//      timeline/ folder): a small writer the trainer calls and a reader with exact errors.
// docs/estimators.md ("The pipeline timeline") and docs/metrics.md (the file format).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ptd/diagnostic.h"
#include "ptd/job_spec.h"

namespace ptd {

// ---- 1. the schedule --------------------------------------------------------------------

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
struct PipelineDurations {
    int p = 1, v = 1, m = 1;
    std::span<const double> fwd, bwd;
    // zb: the schedule (resolved; automatic = 1F1B / interleaved by v) and, for ZB-H1, the
    // W blocks' durations (bwd then holds B only).
    PipelineSchedule schedule = PipelineSchedule::automatic;
    std::span<const double> wgt;
    int group = 0;  // l405: interleaved micro-batch group size N; 0 = p (Megatron's default)
};

// Places every block of the schedule as early as its dependencies allow: a forward
// after the same micro-batch's forward on the previous stage (chunk c on the last stage
// feeds chunk c + 1 on the first), a backward after the next stage's backward (the last
// chunk's backward after its own forward), every block after the one before it on its
// stage. Fills stage_end[s] (p entries) with the end of stage s's last block and returns
// the latest end (the pipeline's makespan). With `out`, records every block.
double simulate_pipeline(const PipelineDurations& d, std::span<double> stage_end, std::vector<PlacedOp>* out = nullptr);

// The same numbers without placing every block when m is large: the schedule's steady
// state adds exactly one slowest-stage micro-batch (Σ over chunks of forward + backward)
// per micro-batch, so blocks are placed for a short schedule and the rest is added
// (tests/test_timeline.cpp checks it against simulate_pipeline on a matrix of uneven
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
// the largest floor. Exact for p = 1. ZB-H1: the floors only (W may end a stage while the
// stages before it drain). Not for DualPipe (a closed form, evaluated directly).
double pipeline_makespan_lower(const PipelineDurations& d, std::span<double> stage_end_lo);
// Upper: the simulation is monotone in every duration, so raising every forward block to
// the longest forward and every backward to the longest backward gives a schedule of equal
// blocks at least as long; its makespan, per unit forward, is convex in the backward /
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

// ---- 2. the predicted timeline --------------------------------------------------------

// What a block is. The same kinds serve predicted and measured timelines.
enum class BlockKind : uint8_t {
    forward,
    backward,
    recompute,
    send,        // pipeline point-to-point send (measured; predicted blocks carry it inside)
    recv,        // pipeline point-to-point receive
    tp_comm,     // tensor/context/expert-parallel collective (measured)
    dp_comm,     // gradient reduction / parameter gather over the data-parallel group
    optimizer,
    weight_grad,  // zb: ZB-H1's W block, the weight-gradient half of a backward run later
};
inline constexpr int kBlockKindCount = 9;
const char* block_kind_name(BlockKind k);  // "fwd", "bwd", "recompute", "send", "recv", "tp", "dp", "optimizer", "wgrad"
std::optional<BlockKind> block_kind_from_name(std::string_view name);

// Streams: 0 = compute, 1 = communication (the DP tail, and measured collectives).
inline constexpr int kStreamCompute = 0;
inline constexpr int kStreamComm = 1;

struct TimelineBlock {
    BlockKind kind = BlockKind::forward;
    int row = 0;            // pipeline stage (predicted) or global rank (measured)
    int stream = kStreamCompute;
    int step = 0;
    int micro_batch = -1;   // −1: not tied to a micro-batch (DP, optimizer)
    int chunk = -1;
    double start_s = 0, end_s = 0;
    // Predicted compute blocks: what the duration is made of (seconds).
    double compute_s = 0, tp_s = 0, cp_s = 0, ep_s = 0, p2p_s = 0;
    double overlapped_s = 0;  // DP blocks: the part hidden behind the last backward
};

struct Timeline {
    int stages = 1, vpp = 1, micro_batches = 1;  // p, v, m
    int micro_batch = 1, dp = 1, global_batch = 1;
    int tp = 1, cp = 1;
    std::string schedule;          // "1F1B", "interleaved 1F1B (v = 2)", "no pipeline"
    std::vector<TimelineBlock> blocks;  // by row, then start
    double pipeline_s = 0;         // the last backward ends (every stage drained)
    double makespan_s = 0;         // the step: pipeline, exposed DP communication, optimizer
    std::vector<double> busy_s;    // per row: time its compute stream is busy
};

// The predicted step of a valid job (validate_job empty), from the same time model as
// estimate_job; makespan_s equals estimate_job(job).step_s.
Timeline predicted_timeline(const JobSpec& job);

// "micro-batch 2 × accumulation 8 × DP 4 = global batch 64" with the job's numbers.
std::string batch_legend(const Timeline& t);

// ---- 3. the measured-timeline files ----------------------------------------------------
// timeline/rank-NNNNN.tsv in a run directory: a header line
//   ptd-timeline 1 rank=R stage=S dp=D tp=T cp=C
// then one line per block, tab-separated:
//   kind  step  micro_batch  chunk  stream  start_ns  end_ns
// (micro_batch and chunk −1 where they do not apply; times from one monotonic clock per
// rank, nanoseconds since the rank's first record). Lines starting with '#' are comments.

struct MeasuredRankHeader {
    int rank = 0, stage = 0, dp = 0, tp = 0, cp = 0;
};

struct MeasuredRank {
    MeasuredRankHeader header;
    std::vector<TimelineBlock> blocks;  // row = rank; start/end in seconds
};

// The file name of rank r: "rank-00003.tsv".
std::string timeline_file_name(int rank);

// Writes one rank's file. Small enough to call from the trainer: open once, record()
// per block, flush at the end of a step. Errors carry the path and errno's text.
class TimelineWriter {
public:
    static Result<TimelineWriter> open(const std::string& path, const MeasuredRankHeader& header);
    TimelineWriter(TimelineWriter&& o) noexcept : file_(o.file_), path_(std::move(o.path_)) { o.file_ = nullptr; }
    TimelineWriter& operator=(TimelineWriter&&) = delete;
    TimelineWriter(const TimelineWriter&) = delete;
    ~TimelineWriter();

    // One block; end_ns ≥ start_ns (asserted).
    void record(BlockKind kind, int step, int micro_batch, int chunk, int stream, int64_t start_ns, int64_t end_ns);
    Result<void> flush();
    Result<void> close();

private:
    explicit TimelineWriter(std::FILE* f, std::string path) : file_(f), path_(std::move(path)) {}
    std::FILE* file_ = nullptr;
    std::string path_;
};

// Parses one rank's file; `path` names it in errors ("path:line: field: what, allowed").
Result<MeasuredRank> parse_measured_rank(std::string_view text, const std::string& path);
Result<MeasuredRank> read_measured_rank(const std::string& path);

// Every rank-*.tsv under run_dir/timeline, by rank. Error when the folder is missing or
// holds no rank files, or any file is bad.
Result<std::vector<MeasuredRank>> read_measured_timeline(const std::string& run_dir);

// ---- traces ---------------------------------------------------------------------------

// Chrome trace event JSON (the format Perfetto and chrome://tracing open): complete
// events ("ph": "X", ts/dur in µs), pid = row (stage or rank), tid = stream, with
// process_name / thread_name metadata. `what` names the processes ("stage" or "rank").
std::string chrome_trace_json(const std::vector<TimelineBlock>& blocks, const char* what);

}  // namespace ptd
