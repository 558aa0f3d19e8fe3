// timeline.h — one training step as a timeline: which block (forward, backward,
// recompute, communication, optimizer) runs on which pipeline stage when, placed by the
// pipeline schedule's simulation (ptd/model/schedule.h, included). Two parts:
//   1. predicted_timeline(): the whole step of a job as data (blocks per stage, the DP
//      tail, the optimizer), for `ptd schedule`, the studio's Schedule tab and traces;
//   2. the measured-timeline file format (one text file per rank in a run directory's
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

#include "ptd/common/diagnostic.h"
#include "ptd/model/schedule.h"
#include "ptd/spec/cluster_profile.h"
#include "ptd/spec/job_spec.h"

namespace ptd {

// ---- 1. the predicted timeline --------------------------------------------------------

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
// estimate_job (with the job's cluster profile when given); makespan_s equals
// estimate_job(job, profile).step_s.
Timeline predicted_timeline(const JobSpec& job, const ClusterProfile* profile = nullptr);

// "micro-batch 2 × accumulation 8 × DP 4 = global batch 64" with the job's numbers.
std::string batch_legend(const Timeline& t);

// ---- 2. the measured-timeline files ----------------------------------------------------
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
