// speed_interval.h — the error bars of every speed PTD prints. The estimator's signed
// step-time error, e = predicted / actual − 1, spreads over a set of runs; its lower and
// upper percentiles bound the truth behind a prediction P: actual = P / (1 + e), so the step
// time lies in [P/(1+e_hi), P/(1+e_lo)] and tokens/s, TFLOP/s, MFU and HFU (all ∝ 1 / step)
// in [X·(1+e_lo), X·(1+e_hi)] (docs/estimators.md, "Error bars").
//
// Where the errors come from is an IntervalSource: the published runs (bench_accuracy's
// check rows, per GPU generation and model kind — dense or MoE, whose errors spread apart),
// tabled in assets/accuracy/published_residuals.toml and
// compiled in; or a cluster profile (`ptd calibrate`): the step as its ranks' probes spread
// (estimate.cpp profile_error_band). speed_interval() does not care which. The memory peak's
// error bars (MemoryInterval) come from bench_memory's measured runs, tabled the same way in
// assets/accuracy/memory_residuals.toml.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ptd/common/diagnostic.h"
#include "ptd/spec/job_spec.h"

namespace ptd {

// published_runs: bench_accuracy's check rows (step time); cluster_profile: a profile's probes;
// measured_memory: bench_memory's runs (the per-GPU memory peak against what the sources measured).
enum class IntervalSource { published_runs, cluster_profile, measured_memory };
const char* to_string(IntervalSource s);  // "published_runs", "cluster_profile", "measured_memory"

// The spread of e over a set of runs, and what those runs are.
struct ErrorBand {
    IntervalSource source = IntervalSource::published_runs;
    double error_lo = 0, error_hi = 0;  // lower / upper percentile of e (each > −1)
    double confidence = 0;              // share of runs between them (0.8 for the 10th–90th)
    int runs = 0;                       // how many runs the percentiles come from
    std::string runs_of;                // "hopper (H100, H200) dense", "MoE models, all generations" when pooled
    std::string fallback;               // why pooled runs stand in ("only 1 on volta (fewer than 8)"); "" = own
    bool long_sequence = false;         // the runs are those of kLongSequenceTokens or more ([[long_sequence]])
};

struct Range {
    double lo = 0, hi = 0;
};

// The point figures of one prediction (Estimate or a plan row).
struct SpeedPoint {
    double step_s = 0, tokens_per_s = 0, model_tflops_per_gpu = 0, hardware_tflops_per_gpu = 0, mfu = 0, hfu = 0;
};

// Each speed figure's interval. known = false: no runs to derive one from (why_unknown).
struct SpeedInterval {
    bool known = false;
    std::string why_unknown;
    ErrorBand band;
    Range step_s, tokens_per_s, model_tflops_per_gpu, hardware_tflops_per_gpu, mfu, hfu;
    // "90 published hopper (H100, H200) dense runs" /
    // "pooled: 170 published runs of dense models, all generations; only 1 on volta (fewer than 8)"
    std::string basis() const;
    // Where the band lies wholly on one side of zero, the intervals do not hold the point figures
    // themselves: "" when they do, else a clause saying which way these runs went ("on which the
    // estimate ran fast even at the 90th percentile: the intervals lie wholly on the slow side of
    // its figures"), for the line that states the basis.
    std::string one_sided() const;
};

// The one place the interval is computed: P/(1+e) for the step, X·(1+e) for the rest.
SpeedInterval speed_interval(const ErrorBand& band, const SpeedPoint& point);
// The job's interval: the band its source gives (the published runs of its GPU generation and
// model kind — of those, the runs of kLongSequenceTokens or more when the job's sequences are
// that long and min_runs of them exist; with fewer than min_runs of the generation's, the kind's
// runs over all generations; with fewer still, every run), applied to `point`; known = false
// where no source covers the job.
SpeedInterval job_speed_interval(const JobSpec& job, const SpeedPoint& point);
// The band alone (nullopt with `why` filled where none applies: CPUs).
std::optional<ErrorBand> job_error_band(const JobSpec& job, std::string* why = nullptr);
// How a band's runs read in a sentence: "90 published hopper (H100, H200) dense runs",
// "pooled: 170 published runs of dense models, all generations; only 1 on volta (fewer than 8)"
// ("measured" for the memory band's runs; a cluster profile's own words).
std::string band_basis(const ErrorBand& band);

// True when two tokens/s figures' intervals under one band overlap (the lower one's top
// reaches the higher one's bottom): the two are within the estimate's error of each other.
bool within_error(const ErrorBand& band, double tokens_per_s_a, double tokens_per_s_b);

// ---- the memory peak's error bars --------------------------------------------------------

// The per-GPU memory peak's interval: the estimate's error e = predicted / measured − 1 over
// bench_memory's runs (each against the allocator view its source measured), per generation and
// model kind with the speed's fallbacks, tabled in assets/accuracy/memory_residuals.toml. The
// peak that a run reaches is then [peak / (1 + e_hi), peak / (1 + e_lo)] (docs/estimators.md,
// "Error bars").
struct MemoryInterval {
    bool known = false;
    std::string why_unknown;
    ErrorBand band;
    double peak = 0;          // the point estimate: the most loaded stage's total
    Range peak_bytes;         // its interval
    bool fits_at_top = false; // peak_bytes.hi ≤ usable: it fits even where the estimate has run low
    std::string basis() const { return known ? band_basis(band) : why_unknown; }
};
MemoryInterval memory_interval(const ErrorBand& band, double peak_bytes, double usable_bytes);
// The job's memory band (nullopt with `why` filled on CPUs: no measured runs there).
std::optional<ErrorBand> job_memory_error_band(const JobSpec& job, std::string* why = nullptr);
MemoryInterval job_memory_interval(const JobSpec& job, double peak_bytes, double usable_bytes);

// ---- the residual table -----------------------------------------------------------------

// The kinds of model the residuals are kept apart for: a mixture of experts' step (routing,
// all-to-all, many small expert GEMMs) is estimated less surely than a dense one's, and the
// published MoE runs' errors sit well apart from the dense runs' (docs/estimators.md, "Error bars").
enum class ModelKind { dense, moe };
const char* to_string(ModelKind k);  // "dense", "moe"
ModelKind model_kind(const JobSpec& job);  // moe when the model has experts ≥ 2

// Sequences this long or longer are kept apart in the step-time residuals: past the 2K–8K
// lengths the attention kernels' rates were fitted at, and with context parallelism's ring
// around them, the published long-sequence runs land much farther from the estimate, on both
// sides (docs/estimators.md, "Error bars"; docs/accuracy.md, "Long sequences").
inline constexpr long kLongSequenceTokens = 32768;

// One run's error, as bench_accuracy (a check run's step) or bench_memory (a measured peak) computes it.
struct RunResidual {
    GpuGeneration generation = GpuGeneration::other;
    std::string gpu;  // the run's GPU for people ("H100", "GB200")
    double error = 0; // predicted / published (or measured) − 1
    ModelKind kind = ModelKind::dense;
    long seq_len = 0;  // the run's sequence length (0: not kept apart by length)
};

// One row: the check runs of one generation and model kind ([[generation]]), the same of
// sequences of kLongSequenceTokens or more ([[long_sequence]]), of one kind over all
// generations ([[model]]), or of all ([pooled]). has_interval = false when a row has fewer
// than min_runs runs: the next wider row then stands in.
struct ResidualRow {
    std::string name;               // a GpuGeneration word ([[generation]], [[long_sequence]]), a ModelKind word ([[model]]), or "pooled"
    std::string model;              // [[generation]] and [[long_sequence]] rows: the ModelKind word; "" otherwise
    int runs = 0;
    bool has_interval = false;
    double error_lo = 0, error_hi = 0, median = 0;
    std::vector<std::string> gpus;  // the runs' GPUs, sorted
};

struct ResidualTable {
    int version = 3;  // 3: [[long_sequence]] rows
    double lower_percentile = 10, upper_percentile = 90;
    int min_runs = 8;
    ResidualRow pooled;
    std::vector<ResidualRow> models;       // one per ModelKind with runs, all generations
    std::vector<ResidualRow> generations;  // per generation (GpuGeneration order) and kind; only those with runs
    // The runs of generations that also count in `generations`, by the same keys, whose
    // sequences are kLongSequenceTokens or longer; only those with runs.
    std::vector<ResidualRow> long_sequences;
    const ResidualRow* find(std::string_view generation, ModelKind kind) const;
    const ResidualRow* find_long(std::string_view generation, ModelKind kind) const;
    const ResidualRow* find(ModelKind kind) const;
};

// The p-th percentile (0..100) of sorted values, linear between order statistics (Hyndman
// and Fan type 7, numpy's default): index p/100·(n−1).
double sorted_percentile(const std::vector<double>& sorted, double p);
// Every generation-and-kind row (and its long-sequence row), every kind's row and the pooled
// row from the runs' errors (rounded to 4 decimals, as the file holds them).
ResidualTable residual_table(const std::vector<RunResidual>& runs, double lower_percentile = 10,
                             double upper_percentile = 90, int min_runs = 8);
// The table as assets/accuracy/published_residuals.toml holds it (bench_accuracy --residuals),
// or, for measured_memory, assets/accuracy/memory_residuals.toml (bench_memory --residuals):
// the same rows under the header comment that says what was measured.
std::string residual_table_toml(const ResidualTable& t, IntervalSource of = IntervalSource::published_runs);
// Read a table; every problem is reported with the file, line and field.
Result<ResidualTable> parse_residual_table(std::string_view text, const std::string& file);
// The compiled-in table (assets/accuracy/published_residuals.toml).
const ResidualTable& published_residuals();
std::string_view embedded_published_residuals_toml();
// The compiled-in memory table (assets/accuracy/memory_residuals.toml).
const ResidualTable& memory_residuals();
std::string_view embedded_memory_residuals_toml();

// ---- the closed loop's table ------------------------------------------------------------

// The time model's own error where a cluster profile feeds it: bench/closed_loop.sh's runs
// (`ptd calibrate`, then `ptd estimate --profile` against `ptd launch` of the bundled
// engine), kept in assets/accuracy/closed_loop_residuals.toml and compiled in. A profile's
// probes say how sure their figures are; these runs say how far the model built on them
// lands from the step the engine then measures.
struct ClosedLoopJob {
    std::string name;  // "tiny TP2 DP2"
    int ranks = 0;
    double predicted_s = 0, measured_s = 0;
    double error() const { return predicted_s / measured_s - 1; }
};
struct ClosedLoopRun {
    std::string id, measured_at, conditions, command;
    std::vector<ClosedLoopJob> jobs;
};
struct ClosedLoopTable {
    int version = 1;
    double lower_percentile = 10, upper_percentile = 90;
    std::string machine;  // where the runs were made (cores, CPU)
    std::vector<ClosedLoopRun> runs;
    // Every job's error over every run: its percentiles as a band (source cluster_profile).
    ErrorBand band() const;
};
Result<ClosedLoopTable> parse_closed_loop_table(std::string_view text, const std::string& file);
// The compiled-in table (assets/accuracy/closed_loop_residuals.toml).
const ClosedLoopTable& closed_loop_residuals();
std::string_view embedded_closed_loop_residuals_toml();
// Two independent error sources of one prediction (a profile's probe spread and the model's
// own error), each side added in quadrature: e_lo = −√(a_lo² + b_lo²), e_hi = √(a_hi² + b_hi²).
ErrorBand combined_band(const ErrorBand& a, const ErrorBand& b);

}  // namespace ptd
