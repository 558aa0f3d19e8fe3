// speed_interval.cpp — error bars on the speed figures: the residual table of the published
// runs (computed by bench_accuracy, written, read back and compiled in), the closed loop's
// table of profile-based estimates against the engine's measured steps, and the one function
// that turns an error band into intervals (speed_interval.h; docs/estimators.md, "Error bars").
#include "ptd/model/speed_interval.h"

#include "ptd/common/sample_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "spec/job_toml_internal.h"

namespace ptd {

const char* to_string(IntervalSource s) {
    switch (s) {
        case IntervalSource::published_runs: return "published_runs";
        case IntervalSource::cluster_profile: return "cluster_profile";
        case IntervalSource::measured_memory: return "measured_memory";
    }
    return "?";
}

namespace {

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string out;
    for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
    return out;
}

std::string fmt4(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.4f", v);
    return std::string(b) == "-0.0000" ? "0.0000" : b;
}

double round4(double v) { return std::stod(fmt4(v)); }

}  // namespace

std::string band_basis(const ErrorBand& band) {
    if (band.source == IntervalSource::cluster_profile) return band.runs_of;
    const char* runs = band.source == IntervalSource::measured_memory ? "measured" : "published";
    if (!band.fallback.empty())
        return "pooled: " + std::to_string(band.runs) + " " + runs + " runs of " + band.runs_of + "; " + band.fallback;
    return std::to_string(band.runs) + " " + runs + " " + band.runs_of + " runs";
}

std::string SpeedInterval::basis() const { return known ? band_basis(band) : why_unknown; }

std::string SpeedInterval::one_sided() const {
    if (!known || (band.error_lo <= 0 && band.error_hi >= 0)) return "";
    char pct[16];
    if (band.error_hi < 0) {
        std::snprintf(pct, sizeof pct, "%.0fth", 50 + band.confidence * 50);
        return std::string(", on which the estimate ran fast (its step too short) even at the ") + pct +
               " percentile: the intervals lie wholly on the slow side of its figures";
    }
    std::snprintf(pct, sizeof pct, "%.0fth", 50 - band.confidence * 50);
    return std::string(", on which the estimate ran slow (its step too long) even at the ") + pct +
           " percentile: the intervals lie wholly on the fast side of its figures";
}

SpeedInterval speed_interval(const ErrorBand& band, const SpeedPoint& p) {
    SpeedInterval s;
    s.known = true;
    s.band = band;
    // actual = predicted / (1 + e): a prediction e too slow means the truth is faster.
    const double lo = 1 + band.error_lo, hi = 1 + band.error_hi;
    s.step_s = {p.step_s / hi, p.step_s / lo};
    auto inverse = [&](double x) { return Range{x * lo, x * hi}; };  // ∝ 1 / step
    s.tokens_per_s = inverse(p.tokens_per_s);
    s.model_tflops_per_gpu = inverse(p.model_tflops_per_gpu);
    s.hardware_tflops_per_gpu = inverse(p.hardware_tflops_per_gpu);
    s.mfu = inverse(p.mfu);
    s.hfu = inverse(p.hfu);
    return s;
}

bool within_error(const ErrorBand& band, double a, double b) {
    const double low = std::min(a, b), high = std::max(a, b);
    return low * (1 + band.error_hi) >= high * (1 + band.error_lo);
}

const char* to_string(ModelKind k) { return k == ModelKind::moe ? "moe" : "dense"; }

ModelKind model_kind(const JobSpec& job) { return job.model.experts >= 2 ? ModelKind::moe : ModelKind::dense; }

namespace {

// How a kind reads in a sentence: "dense", "MoE".
const char* kind_words(ModelKind k) { return k == ModelKind::moe ? "MoE" : "dense"; }

// The band of `t`'s narrowest row with an interval for the job: its generation's runs of its
// model kind (of sequences as long, for a job of kLongSequenceTokens or more, where there are
// min_runs of them), else the kind's runs over every generation, else every run. A generation
// with too few long-sequence runs keeps its row of every length: another generation's long
// runs ran other attention kernels (docs/estimators.md, "Error bars").
ErrorBand band_of(const ResidualTable& t, IntervalSource source, const JobSpec& job) {
    const GpuGeneration gen = job.cluster.gpu.generation;
    const ModelKind kind = model_kind(job);
    ErrorBand b;
    b.source = source;
    b.confidence = (t.upper_percentile - t.lower_percentile) / 100.0;
    if (job.model.seq_len >= kLongSequenceTokens)
        if (const ResidualRow* long_row = t.find_long(to_string(gen), kind); long_row && long_row->has_interval) {
            b.error_lo = long_row->error_lo;
            b.error_hi = long_row->error_hi;
            b.runs = long_row->runs;
            b.long_sequence = true;
            b.runs_of = std::string(to_string(gen)) + " (" + join(long_row->gpus, ", ") + ") " + kind_words(kind) +
                        " long-sequence (" + std::to_string(kLongSequenceTokens / 1024) + "K tokens or more)";
            return b;
        }
    const ResidualRow* own = t.find(to_string(gen), kind);
    const ResidualRow* of_kind = t.find(kind);
    const ResidualRow* row = own && own->has_interval           ? own
                             : of_kind && of_kind->has_interval ? of_kind
                                                                : &t.pooled;
    b.error_lo = row->error_lo;
    b.error_hi = row->error_hi;
    b.runs = row->runs;
    b.runs_of = row == own       ? std::string(to_string(gen)) + " (" + join(own->gpus, ", ") + ") " + kind_words(kind)
                : row == of_kind ? std::string(kind_words(kind)) + " models, all generations"
                                 : "all generations";
    if (row != own)
        b.fallback = own ? "only " + std::to_string(own->runs) + " on " + to_string(gen) + " (fewer than " +
                               std::to_string(t.min_runs) + ")"
                         : std::string("none on ") + to_string(gen);
    return b;
}

}  // namespace

std::optional<ErrorBand> job_error_band(const JobSpec& job, std::string* why) {
    if (job.cluster.gpu.generation == GpuGeneration::cpu) {
        if (why)
            *why = "no interval: no published runs on CPUs to measure the estimate against; measure this machine "
                   "with `ptd calibrate JOB -o PROFILE` and give the estimate --profile PROFILE";
        return std::nullopt;
    }
    return band_of(published_residuals(), IntervalSource::published_runs, job);
}

std::optional<ErrorBand> job_memory_error_band(const JobSpec& job, std::string* why) {
    if (job.cluster.gpu.generation == GpuGeneration::cpu) {
        if (why) *why = "no interval: no measured runs on CPUs to hold the memory estimate against";
        return std::nullopt;
    }
    return band_of(memory_residuals(), IntervalSource::measured_memory, job);
}

MemoryInterval memory_interval(const ErrorBand& band, double peak_bytes, double usable_bytes) {
    MemoryInterval m;
    m.known = true;
    m.band = band;
    m.peak = peak_bytes;
    // measured = predicted / (1 + e): a prediction e too low means the run needed more.
    m.peak_bytes = {peak_bytes / (1 + band.error_hi), peak_bytes / (1 + band.error_lo)};
    m.fits_at_top = m.peak_bytes.hi <= usable_bytes;
    return m;
}

MemoryInterval job_memory_interval(const JobSpec& job, double peak_bytes, double usable_bytes) {
    std::string why;
    if (const std::optional<ErrorBand> band = job_memory_error_band(job, &why))
        return memory_interval(*band, peak_bytes, usable_bytes);
    MemoryInterval m;
    m.why_unknown = why;
    return m;
}

SpeedInterval job_speed_interval(const JobSpec& job, const SpeedPoint& point) {
    std::string why;
    if (const std::optional<ErrorBand> band = job_error_band(job, &why)) return speed_interval(*band, point);
    SpeedInterval s;
    s.why_unknown = why;
    return s;
}

// ---- the table ---------------------------------------------------------------------------

// The row of `generation` and `kind` among [[generation]] or [[long_sequence]] rows.
static const ResidualRow* find_row(const std::vector<ResidualRow>& rows, std::string_view generation, ModelKind kind) {
    for (const ResidualRow& r : rows)
        if (r.name == generation && r.model == to_string(kind)) return &r;
    return nullptr;
}

const ResidualRow* ResidualTable::find(std::string_view generation, ModelKind kind) const {
    return find_row(generations, generation, kind);
}

const ResidualRow* ResidualTable::find_long(std::string_view generation, ModelKind kind) const {
    return find_row(long_sequences, generation, kind);
}

const ResidualRow* ResidualTable::find(ModelKind kind) const {
    for (const ResidualRow& r : models)
        if (r.name == to_string(kind)) return &r;
    return nullptr;
}

double sorted_percentile(const std::vector<double>& sorted, double p) { return quantile(sorted, p / 100.0); }

namespace {

ResidualRow make_row(std::string name, std::string model, std::vector<double> errors, const std::set<std::string>& gpus,
                     double lower, double upper, int min_runs) {
    ResidualRow r;
    r.name = std::move(name);
    r.model = std::move(model);
    r.runs = (int)errors.size();
    r.gpus.assign(gpus.begin(), gpus.end());
    std::sort(errors.begin(), errors.end());
    r.has_interval = r.runs >= min_runs;
    if (r.has_interval) {
        r.error_lo = round4(sorted_percentile(errors, lower));
        r.error_hi = round4(sorted_percentile(errors, upper));
        r.median = round4(sorted_percentile(errors, 50));
    }
    return r;
}

// The runs' errors and GPUs of one row.
struct RowRuns {
    std::vector<double> errors;
    std::set<std::string> gpus;
    void add(const RunResidual& r) {
        errors.push_back(r.error);
        gpus.insert(r.gpu);
    }
};

}  // namespace

ResidualTable residual_table(const std::vector<RunResidual>& runs, double lower, double upper, int min_runs) {
    ResidualTable t;
    t.lower_percentile = lower;
    t.upper_percentile = upper;
    t.min_runs = min_runs;
    std::map<std::pair<int, int>, RowRuns> by_gen, long_by_gen;  // (generation, kind)
    std::map<int, RowRuns> by_kind;
    RowRuns all;
    for (const RunResidual& r : runs) {
        by_gen[{(int)r.generation, (int)r.kind}].add(r);
        if (r.seq_len >= kLongSequenceTokens) long_by_gen[{(int)r.generation, (int)r.kind}].add(r);
        by_kind[(int)r.kind].add(r);
        all.add(r);
    }
    t.pooled = make_row("pooled", "", all.errors, all.gpus, lower, upper, 1);
    for (const auto& [k, rr] : by_kind)
        t.models.push_back(make_row(to_string((ModelKind)k), "", rr.errors, rr.gpus, lower, upper, min_runs));
    for (const auto& [gk, rr] : by_gen)
        t.generations.push_back(make_row(to_string((GpuGeneration)gk.first), to_string((ModelKind)gk.second), rr.errors,
                                         rr.gpus, lower, upper, min_runs));
    for (const auto& [gk, rr] : long_by_gen)
        t.long_sequences.push_back(make_row(to_string((GpuGeneration)gk.first), to_string((ModelKind)gk.second),
                                            rr.errors, rr.gpus, lower, upper, min_runs));
    return t;
}

std::string residual_table_toml(const ResidualTable& t, IntervalSource of) {
    std::string o;
    if (of == IntervalSource::measured_memory)
        o += "# memory_residuals.toml — how far the estimated per-GPU memory peak lands from what published runs\n"
             "# measured, per GPU generation and model kind (dense or MoE): the error bars on the memory peak PTD\n"
             "# prints (docs/estimators.md, \"Error bars\").\n"
             "# Generated by `bench_memory --residuals` from bench/accuracy/published_memory.toml, every modelled\n"
             "# run, each in the allocator view its source measured. Do not edit: the ctest\n"
             "# memory_residuals_table_current fails when this file differs from what bench_memory computes now.\n"
             "# error = predicted / measured - 1; error_lo / error_hi are its percentiles below.\n";
    else
        o += "# published_residuals.toml — how far the estimated step time lands from published runs, per GPU\n"
             "# generation and model kind (dense or MoE): the error bars on every speed figure PTD prints\n"
             "# (docs/estimators.md, \"Error bars\").\n"
             "# Generated by `bench_accuracy --residuals` from bench/accuracy/published_runs.toml, check runs only\n"
             "# (the calibration runs fitted the constants). Do not edit: the ctest residuals_table_current fails\n"
             "# when this file differs from what bench_accuracy computes now.\n"
             "# error = predicted step / published step - 1; error_lo / error_hi are its percentiles below.\n";
    o += "# A [[generation]] row (one generation, one kind) with fewer than min_runs runs has no interval of\n"
         "# its own: its kind's [[model]] row (every generation) stands in, and where that is thin too, [pooled].\n";
    if (!t.long_sequences.empty())
        o += "# A [[long_sequence]] row holds those of a [[generation]] row's runs whose sequences are " +
             std::to_string(kLongSequenceTokens) + "\n# tokens or longer; with an interval it stands in for its [[generation]] row for such jobs.\n";
    o += "version = " + std::to_string(t.version) + "\n";
    o += "lower_percentile = " + toml_double(t.lower_percentile) + "\n";
    o += "upper_percentile = " + toml_double(t.upper_percentile) + "\n";
    o += "min_runs = " + std::to_string(t.min_runs) + "\n";
    auto row = [&](const ResidualRow& r, const char* header) {
        o += std::string("\n") + header + "\n";
        if (!r.name.empty() && r.name != "pooled") o += "name = " + toml_quote(r.name) + "\n";
        if (!r.model.empty()) o += "model = " + toml_quote(r.model) + "\n";
        o += "runs = " + std::to_string(r.runs) + "\n";
        std::vector<std::string> q;
        for (const std::string& g : r.gpus) q.push_back(toml_quote(g));
        o += "gpus = [" + join(q, ", ") + "]\n";
        if (r.has_interval) {
            o += "error_lo = " + fmt4(r.error_lo) + "\n";
            o += "error_hi = " + fmt4(r.error_hi) + "\n";
            o += "median = " + fmt4(r.median) + "\n";
        }
    };
    row(t.pooled, "[pooled]");
    for (const ResidualRow& r : t.models) row(r, "[[model]]");
    for (const ResidualRow& r : t.generations) row(r, "[[generation]]");
    for (const ResidualRow& r : t.long_sequences) row(r, "[[long_sequence]]");
    return o;
}

namespace {

// The keys both residual tables open with: the format version (the one this build reads) and
// the two percentiles of the band, the lower below the upper.
void read_table_head(TomlContext& ctx, TableReader& top, int reads, int& version, double& lower, double& upper) {
    top.require("version", "the table's format version");
    if (top.read_int("version", version, 1, 1000) && version != reads)
        ctx.error(top.where("version"), "version",
                  "got " + std::to_string(version) + "; this build reads version " + std::to_string(reads));
    top.read_double("lower_percentile", lower, 0, 100);
    top.read_double("upper_percentile", upper, 0, 100);
    if (lower >= upper)
        ctx.error(top.where("upper_percentile"), "upper_percentile",
                  "got " + toml_double(upper) + ", not above lower_percentile " + toml_double(lower));
}

// A table compiled into the library, parsed once. Its ctest (residuals_table_current, or
// ErrorBars.TheClosedLoopTableParses) reads it first; a failure here is a build bug.
template <class Table>
Table embedded_table(std::string_view text, const char* name, Result<Table> (*parse)(std::string_view, const std::string&)) {
    auto parsed = parse(text, std::string("<embedded>/accuracy/") + name);
    if (!parsed) {
        std::fprintf(stderr, "ptd: internal error: the embedded table %s does not parse:\n%s", name, parsed.error().str().c_str());
        std::abort();
    }
    return *parsed;
}

// One row's counts and percentiles, its keys named `prefix`.key; has_interval follows from
// error_lo / error_hi being given. `pooled`: the row that must have an interval.
void read_row(TomlContext& ctx, TableReader& rd, ResidualRow& r, int min_runs, bool pooled, const std::string& prefix) {
    rd.require("runs", "the number of check runs");
    rd.read_int("runs", r.runs, 1, 1000000);
    rd.read_string_array("gpus", r.gpus);
    const bool lo = rd.read_double("error_lo", r.error_lo, -0.99, 100);
    const bool hi = rd.read_double("error_hi", r.error_hi, -0.99, 100);
    rd.read_double("median", r.median, -0.99, 100);
    r.has_interval = lo && hi;
    if (lo != hi)
        ctx.error(rd.where(lo ? "error_lo" : "error_hi"), prefix + (lo ? "error_hi" : "error_lo"),
                  "missing: a row gives both error_lo and error_hi or neither");
    else if (r.has_interval && r.error_lo > r.error_hi)
        ctx.error(rd.where("error_lo"), prefix + "error_lo",
                  "got " + fmt4(r.error_lo) + ", above error_hi " + fmt4(r.error_hi) + "; error_lo ≤ error_hi");
    else if (!pooled && r.has_interval && r.runs < min_runs)
        ctx.error(rd.where("runs"), prefix + "runs",
                  "got " + std::to_string(r.runs) + " runs with an interval; a row needs min_runs = " +
                      std::to_string(min_runs) + " for one (fewer: leave error_lo / error_hi out)");
    else if (pooled && !r.has_interval)
        ctx.error(rd.where("runs"), "pooled.error_lo", "missing: the pooled row must give error_lo and error_hi");
}

// Reads one word of `words` from `key`; "" where it is missing or not one of them.
std::string read_word_of(TableReader& rd, const char* key, const char* what, const std::vector<std::string>& words) {
    rd.require(key, what);
    int word = -1;
    return rd.read_word(key, word, words) ? words[(size_t)word] : std::string();
}

// The tables of one array ([[model]] / [[generation]]), each handed to `read` with its
// position; a non-table element is refused at its line.
template <class F>
void for_each_row(TomlContext& ctx, TableReader& top, const char* array, F read) {
    const toml::array* rows = top.subarray(array);
    for (size_t i = 0; rows && i < rows->size(); ++i) {
        if (const toml::table* row = (*rows)[i].as_table()) read(*row);
        else ctx.error(ctx.loc((*rows)[i]), array, std::string("expected [[") + array + "]] tables");
    }
}

}  // namespace

Result<ResidualTable> parse_residual_table(std::string_view text, const std::string& file) {
    auto doc = parse_toml(text, file);
    if (!doc) return std::unexpected(doc.error());
    TomlContext ctx;
    ctx.file = file;
    ResidualTable t;
    TableReader top(ctx, *doc, "");
    read_table_head(ctx, top, ResidualTable{}.version, t.version, t.lower_percentile, t.upper_percentile);
    top.read_int("min_runs", t.min_runs, 1, 1000000);
    top.require("pooled", "the table [pooled]");
    if (const toml::table* p = top.subtable("pooled")) {
        TableReader rd(ctx, *p, "pooled");
        t.pooled.name = "pooled";
        read_row(ctx, rd, t.pooled, t.min_runs, true, "pooled.");
        rd.finish();
    }
    const std::vector<std::string> kinds = {to_string(ModelKind::dense), to_string(ModelKind::moe)};
    auto kind_of = [&](const std::string& word) { return word == to_string(ModelKind::moe) ? ModelKind::moe : ModelKind::dense; };
    // Keys are named for their row ("model.moe.error_lo", "generation.hopper.dense.error_lo")
    // where the row names itself.
    auto named = [](const toml::table& row, const char* key) {
        const std::optional<std::string> v = row[key].value<std::string>();
        return v ? "." + *v : std::string();
    };
    for_each_row(ctx, top, "model", [&](const toml::table& row) {
        ResidualRow r;
        const std::string prefix = "model" + named(row, "name");
        TableReader rd(ctx, row, prefix);
        r.name = read_word_of(rd, "name", "a model kind", kinds);
        if (!r.name.empty() && t.find(kind_of(r.name)))
            ctx.error(rd.where("name"), prefix + ".name", "got " + quote_input(r.name) + " twice; one row per model kind");
        read_row(ctx, rd, r, t.min_runs, false, prefix + ".");
        rd.finish();
        if (!r.name.empty()) t.models.push_back(std::move(r));
    });
    std::vector<std::string> generations;
    for (int i = 0; i < kGpuGenerationCount; ++i) generations.push_back(to_string((GpuGeneration)i));
    // [[generation]] and [[long_sequence]] rows: one per generation and model kind in each array.
    auto read_generation_rows = [&](const std::string& array, std::vector<ResidualRow>& into) {
        for_each_row(ctx, top, array.c_str(), [&](const toml::table& row) {
            ResidualRow r;
            const std::string prefix = array + named(row, "name") + named(row, "model");
            TableReader rd(ctx, row, prefix);
            r.name = read_word_of(rd, "name", "a GPU generation", generations);
            r.model = read_word_of(rd, "model", "a model kind", kinds);
            const bool twice = std::any_of(into.begin(), into.end(),
                                           [&](const ResidualRow& o) { return o.name == r.name && o.model == r.model; });
            if (!r.name.empty() && !r.model.empty() && twice)
                ctx.error(rd.where("name"), prefix + ".name",
                          "got " + quote_input(r.name) + " with model " + quote_input(r.model) + " twice in [[" + array +
                              "]]; one row per generation and model kind");
            read_row(ctx, rd, r, t.min_runs, false, prefix + ".");
            rd.finish();
            if (!r.name.empty() && !r.model.empty()) into.push_back(std::move(r));
        });
    };
    read_generation_rows("generation", t.generations);
    read_generation_rows("long_sequence", t.long_sequences);
    top.finish();
    if (!ctx.diagnostics.empty()) return std::unexpected(Error(std::move(ctx.diagnostics)));
    return t;
}

const ResidualTable& published_residuals() {
    static const ResidualTable table =
        embedded_table(embedded_published_residuals_toml(), "published_residuals.toml", &parse_residual_table);
    return table;
}

const ResidualTable& memory_residuals() {
    static const ResidualTable table =
        embedded_table(embedded_memory_residuals_toml(), "memory_residuals.toml", &parse_residual_table);
    return table;
}

// ---- the closed loop's table ------------------------------------------------------------

ErrorBand ClosedLoopTable::band() const {
    std::vector<double> errors;
    for (const ClosedLoopRun& r : runs)
        for (const ClosedLoopJob& j : r.jobs) errors.push_back(j.error());
    std::sort(errors.begin(), errors.end());
    ErrorBand b;
    b.source = IntervalSource::cluster_profile;
    b.confidence = (upper_percentile - lower_percentile) / 100.0;
    b.runs = (int)errors.size();
    if (errors.empty()) return b;
    b.error_lo = std::min(0.0, sorted_percentile(errors, lower_percentile));
    b.error_hi = std::max(0.0, sorted_percentile(errors, upper_percentile));
    b.runs_of = std::to_string(errors.size()) + " closed-loop jobs (" + std::to_string(runs.size()) + " run(s) of bench/closed_loop.sh on " +
                machine + ")";
    return b;
}

ErrorBand combined_band(const ErrorBand& a, const ErrorBand& b) {
    ErrorBand c = a;
    c.error_lo = -std::hypot(std::min(0.0, a.error_lo), std::min(0.0, b.error_lo));
    c.error_hi = std::hypot(std::max(0.0, a.error_hi), std::max(0.0, b.error_hi));
    return c;
}

namespace {

// One job of a closed-loop run, its keys named "run[i].job[k].…".
ClosedLoopJob read_closed_loop_job(TomlContext& ctx, const toml::table& t, const std::string& prefix) {
    ClosedLoopJob j;
    TableReader jr(ctx, t, prefix);
    jr.require("name", "the job's name in the bench's matrix");
    jr.read_string("name", j.name);
    jr.require("ranks", "the job's ranks");
    jr.read_int("ranks", j.ranks, 1, 1000000);
    jr.require("predicted_s", "the estimate's step time (s)");
    jr.read_positive("predicted_s", j.predicted_s, 1e6, "s");
    jr.require("measured_s", "the launch's median step time (s)");
    jr.read_positive("measured_s", j.measured_s, 1e6, "s");
    jr.finish();
    return j;
}

}  // namespace

Result<ClosedLoopTable> parse_closed_loop_table(std::string_view text, const std::string& file) {
    auto doc = parse_toml(text, file);
    if (!doc) return std::unexpected(doc.error());
    TomlContext ctx;
    ctx.file = file;
    ClosedLoopTable t;
    TableReader top(ctx, *doc, "");
    read_table_head(ctx, top, ClosedLoopTable{}.version, t.version, t.lower_percentile, t.upper_percentile);
    top.require("machine", "where the runs were made");
    top.read_string("machine", t.machine);
    top.require("run", "[[run]] tables, one per bench/closed_loop.sh run");
    if (const toml::array* runs = top.subarray("run"))
        for (size_t i = 0; i < runs->size(); ++i) {
            const toml::table* rt = (*runs)[i].as_table();
            if (!rt) {
                ctx.error(ctx.loc((*runs)[i]), "run", "expected [[run]] tables");
                continue;
            }
            ClosedLoopRun r;
            TableReader rd(ctx, *rt, "run[" + std::to_string(i) + "]");
            rd.require("id", "the run's name");
            rd.read_string("id", r.id);
            rd.require("measured_at", "when the run was made (UTC)");
            rd.read_string("measured_at", r.measured_at);
            rd.read_string("conditions", r.conditions);
            rd.read_string("command", r.command);
            rd.require("job", "[[run.job]] tables, one per job of the matrix");
            if (const toml::array* jobs = rd.subarray("job"))
                for (size_t k = 0; k < jobs->size(); ++k) {
                    if (const toml::table* jt = (*jobs)[k].as_table())
                        r.jobs.push_back(read_closed_loop_job(ctx, *jt, rd.full_key("job") + "[" + std::to_string(k) + "]"));
                    else
                        ctx.error(ctx.loc((*jobs)[k]), rd.full_key("job"), "expected [[run.job]] tables");
                }
            rd.finish();
            t.runs.push_back(std::move(r));
        }
    top.finish();
    if (!ctx.diagnostics.empty()) return std::unexpected(Error(std::move(ctx.diagnostics)));
    return t;
}

const ClosedLoopTable& closed_loop_residuals() {
    static const ClosedLoopTable table =
        embedded_table(embedded_closed_loop_residuals_toml(), "closed_loop_residuals.toml", &parse_closed_loop_table);
    return table;
}

}  // namespace ptd
