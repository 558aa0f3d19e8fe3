// error_bars.cpp — the error bars on the speed figures (estimators/src/model/speed_interval.cpp):
// the interval maths on hand-worked numbers, the percentiles, the residual table (computed,
// written, read back, refused when broken with file, line and field), the fallback of a thin
// generation to the pooled runs, the estimate carrying its interval, and the closed loop's
// table (the model's own error under a profile) with the quadrature that adds it.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/model/speed_interval.h"

#include "job_test_util.h"
#include "text_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

// A prediction e = +10% too slow at the top and −20% (too fast) at the bottom: the truth
// behind a predicted 11 s step is 11/1.1 = 10 s .. 11/0.8 = 13.75 s; tokens/s 1000 →
// 1000·0.8 = 800 .. 1000·1.1 = 1100; MFU 50% → 40% .. 55%.
TEST(ErrorBars, IntervalMathsByHand) {
    ErrorBand band;
    band.error_lo = -0.2;
    band.error_hi = 0.1;
    band.confidence = 0.8;
    band.runs = 10;
    band.runs_of = "hopper (H100)";
    const SpeedInterval s = speed_interval(band, SpeedPoint{11, 1000, 400, 420, 0.5, 0.55});
    ASSERT_TRUE(s.known);
    EXPECT_DOUBLE_EQ(s.step_s.lo, 10.0);
    EXPECT_DOUBLE_EQ(s.step_s.hi, 13.75);
    EXPECT_DOUBLE_EQ(s.tokens_per_s.lo, 800.0);
    EXPECT_DOUBLE_EQ(s.tokens_per_s.hi, 1100.0);
    EXPECT_DOUBLE_EQ(s.model_tflops_per_gpu.lo, 320.0);
    EXPECT_DOUBLE_EQ(s.hardware_tflops_per_gpu.hi, 462.0);
    EXPECT_DOUBLE_EQ(s.mfu.lo, 0.4);
    EXPECT_DOUBLE_EQ(s.mfu.hi, 0.55);
    EXPECT_DOUBLE_EQ(s.hfu.lo, 0.44);
    EXPECT_EQ(s.basis(), "10 published hopper (H100) runs");
    // Overlap under that band: 1000 and 1300 overlap (1000·1.1 = 1100 ≥ 1300·0.8 = 1040);
    // 1000 and 1400 do not (1100 < 1120).
    EXPECT_TRUE(within_error(band, 1000, 1300));
    EXPECT_TRUE(within_error(band, 1300, 1000));
    EXPECT_FALSE(within_error(band, 1000, 1400));
}

// Type 7 (linear between order statistics): of 1..5, the 10th percentile sits at index
// 0.1·4 = 0.4 → 1.4, the 90th at 3.6 → 4.6, the median at 2 → 3.
TEST(ErrorBars, PercentilesLinearBetweenOrderStatistics) {
    const std::vector<double> v = {1, 2, 3, 4, 5};
    EXPECT_DOUBLE_EQ(sorted_percentile(v, 10), 1.4);
    EXPECT_DOUBLE_EQ(sorted_percentile(v, 90), 4.6);
    EXPECT_DOUBLE_EQ(sorted_percentile(v, 50), 3.0);
    EXPECT_DOUBLE_EQ(sorted_percentile({7}, 90), 7.0);
}

// Ten dense ampere runs get their own interval; three dense volta runs (< min_runs 8) get none
// and the dense row (all 13 dense runs) stands in; nine MoE hopper runs get their own row, the
// MoE row (the same nine) and the pooled one (all 22).
TEST(ErrorBars, ThinGenerationHasNoIntervalOfItsOwn) {
    std::vector<RunResidual> runs;
    for (int i = 0; i < 10; ++i) runs.push_back({GpuGeneration::ampere, "A100", -0.10 + 0.02 * i});  // −0.10 .. +0.08
    for (int i = 0; i < 3; ++i) runs.push_back({GpuGeneration::volta, "V100", 0.5});
    for (int i = 0; i < 9; ++i) runs.push_back({GpuGeneration::hopper, "H100", -0.40 + 0.04 * i, ModelKind::moe});  // −0.40 .. −0.08
    const ResidualTable t = residual_table(runs);
    const ResidualRow* ampere = t.find("ampere", ModelKind::dense);
    const ResidualRow* volta = t.find("volta", ModelKind::dense);
    const ResidualRow* hopper_moe = t.find("hopper", ModelKind::moe);
    ASSERT_TRUE(ampere && volta && hopper_moe);
    EXPECT_FALSE(t.find("ampere", ModelKind::moe));
    EXPECT_FALSE(t.find("hopper", ModelKind::dense));
    EXPECT_TRUE(ampere->has_interval);
    EXPECT_EQ(ampere->runs, 10);
    EXPECT_EQ(ampere->model, "dense");
    EXPECT_DOUBLE_EQ(ampere->error_lo, -0.082);  // index 0.9: −0.10 + 0.9·0.02
    EXPECT_DOUBLE_EQ(ampere->error_hi, 0.062);   // index 8.1: 0.06 + 0.1·0.02
    EXPECT_FALSE(volta->has_interval);
    EXPECT_EQ(volta->runs, 3);
    EXPECT_DOUBLE_EQ(hopper_moe->error_lo, -0.368);  // index 0.8: −0.40 + 0.8·0.04
    EXPECT_DOUBLE_EQ(hopper_moe->error_hi, -0.112);  // index 7.2: −0.12 + 0.2·0.04
    ASSERT_TRUE(t.find(ModelKind::dense) && t.find(ModelKind::moe));
    EXPECT_EQ(t.find(ModelKind::dense)->runs, 13);
    EXPECT_EQ(t.find(ModelKind::dense)->gpus, (std::vector<std::string>{"A100", "V100"}));
    EXPECT_EQ(t.find(ModelKind::moe)->runs, 9);
    EXPECT_EQ(t.pooled.runs, 22);
    EXPECT_TRUE(t.pooled.has_interval);
    EXPECT_EQ(t.pooled.gpus, (std::vector<std::string>{"A100", "H100", "V100"}));
    // What the file holds reads back to the same table.
    auto back = parse_residual_table(residual_table_toml(t), "t.toml");
    ASSERT_TRUE(back) << back.error().str();
    EXPECT_EQ(residual_table_toml(*back), residual_table_toml(t));
    ASSERT_TRUE(back->find("hopper", ModelKind::moe));
    EXPECT_DOUBLE_EQ(back->find("hopper", ModelKind::moe)->error_hi, -0.112);
}

// The compiled-in table: an H100 dense job takes the dense hopper runs; a V100 job (one
// published volta check run) and an L40S job (no ada runs) take the dense runs of every
// generation and say why; an MoE job on H100 the MoE hopper runs, on A100 (no MoE ampere runs)
// the MoE runs of every generation; a CPU job none.
TEST(ErrorBars, JobBandFallsBackToPooledAndSaysSo) {
    const ResidualTable& t = published_residuals();
    auto band_of = [](const char* job_file, const std::vector<std::string>& sets) {
        JobSpec j = load_asset(job_file, sets);
        std::string why;
        std::optional<ErrorBand> b = job_error_band(j, &why);
        return std::make_pair(b, why);
    };
    const ResidualRow* hopper = t.find("hopper", ModelKind::dense);
    ASSERT_TRUE(hopper && hopper->has_interval);
    const auto [h100, why_h100] = band_of("llama3-8b-h100.toml", {});
    ASSERT_TRUE(h100);
    EXPECT_TRUE(h100->fallback.empty());
    EXPECT_EQ(h100->runs, hopper->runs);
    EXPECT_DOUBLE_EQ(h100->error_lo, hopper->error_lo);
    EXPECT_DOUBLE_EQ(h100->confidence, 0.8);
    EXPECT_EQ(speed_interval(*h100, SpeedPoint{1, 1, 1, 1, 1, 1}).basis(),
              std::to_string(hopper->runs) + " published hopper (H100, H200) dense runs");

    const ResidualRow* dense = t.find(ModelKind::dense);
    ASSERT_TRUE(dense && dense->has_interval);
    const auto [v100, why_v100] = band_of("llama3-8b-h100.toml", {"cluster.gpu=v100-32gb", "training.precision=fp16"});
    ASSERT_TRUE(v100);
    ASSERT_TRUE(t.find("volta", ModelKind::dense) && !t.find("volta", ModelKind::dense)->has_interval);
    EXPECT_EQ(v100->runs, dense->runs);
    EXPECT_DOUBLE_EQ(v100->error_hi, dense->error_hi);
    expect_mentions(v100->fallback, {"only 1 on volta", "fewer than 8"});
    const SpeedInterval s = speed_interval(*v100, SpeedPoint{1, 1, 1, 1, 1, 1});
    expect_mentions(s.basis(), {"pooled", "dense models, all generations"});

    const auto [l40s, why_l40s] = band_of("llama3-8b-h100.toml", {"cluster.gpu=l40s"});
    ASSERT_TRUE(l40s);
    EXPECT_EQ(l40s->fallback, "none on ada");
    EXPECT_EQ(l40s->runs, dense->runs);

    // Mixtral 8x7B (8 experts) on H100, then on A100.
    const ResidualRow* hopper_moe = t.find("hopper", ModelKind::moe);
    const ResidualRow* moe = t.find(ModelKind::moe);
    ASSERT_TRUE(hopper_moe && hopper_moe->has_interval && moe && moe->has_interval);
    const auto [mixtral, why_mixtral] = band_of("../../tests/data/studio/mixtral-8x7b-ep8.toml", {});
    ASSERT_TRUE(mixtral);
    EXPECT_TRUE(mixtral->fallback.empty());
    EXPECT_EQ(mixtral->runs, hopper_moe->runs);
    EXPECT_DOUBLE_EQ(mixtral->error_lo, hopper_moe->error_lo);
    EXPECT_NE(mixtral->error_lo, hopper->error_lo);
    const auto [mixtral_a100, why_a100] =
        band_of("../../tests/data/studio/mixtral-8x7b-ep8.toml", {"cluster.gpu=a100-80gb", "cluster.inter_gbps=25"});
    ASSERT_TRUE(mixtral_a100);
    EXPECT_EQ(mixtral_a100->runs, moe->runs);
    EXPECT_EQ(mixtral_a100->fallback, "none on ampere");
    expect_mentions(speed_interval(*mixtral_a100, SpeedPoint{1, 1, 1, 1, 1, 1}).basis(), {"MoE models, all generations"});

    const auto [cpu, why_cpu] = band_of("tiny-gpt-8rank.toml", {});
    EXPECT_FALSE(cpu);
    expect_mentions(why_cpu, {"no published runs on CPUs"});
}

// Long sequences: of twelve dense hopper runs, the eight of 32K tokens or more get their own row
// (it reads back from the file); a job of 128K tokens takes it, one of 8K the generation's row.
// Five long ampere runs (< min_runs) leave an ampere job of 64K on its generation's row.
TEST(ErrorBars, LongSequenceJobsTakeTheLongRuns) {
    std::vector<RunResidual> runs;
    for (int i = 0; i < 4; ++i) runs.push_back({GpuGeneration::hopper, "H100", -0.02 + 0.01 * i, ModelKind::dense, 8192});
    for (int i = 0; i < 8; ++i) runs.push_back({GpuGeneration::hopper, "H100", -0.24 + 0.06 * i, ModelKind::dense, 131072});
    for (int i = 0; i < 10; ++i) runs.push_back({GpuGeneration::ampere, "A100", -0.05 + 0.01 * i, ModelKind::dense, 4096});
    for (int i = 0; i < 5; ++i) runs.push_back({GpuGeneration::ampere, "A100", 0.3, ModelKind::dense, 65536});
    const ResidualTable t = residual_table(runs);
    const ResidualRow* hopper = t.find("hopper", ModelKind::dense);
    const ResidualRow* hopper_long = t.find_long("hopper", ModelKind::dense);
    ASSERT_TRUE(hopper && hopper_long);
    EXPECT_EQ(hopper->runs, 12);
    EXPECT_EQ(hopper_long->runs, 8);
    ASSERT_TRUE(hopper_long->has_interval);
    EXPECT_DOUBLE_EQ(hopper_long->error_lo, -0.198);  // index 0.7: −0.24 + 0.7·0.06
    EXPECT_DOUBLE_EQ(hopper_long->error_hi, 0.138);   // index 6.3: 0.12 + 0.3·0.06
    ASSERT_TRUE(t.find_long("ampere", ModelKind::dense));
    EXPECT_FALSE(t.find_long("ampere", ModelKind::dense)->has_interval);
    EXPECT_FALSE(t.find_long("hopper", ModelKind::moe));
    auto back = parse_residual_table(residual_table_toml(t), "t.toml");
    ASSERT_TRUE(back) << back.error().str();
    EXPECT_EQ(residual_table_toml(*back), residual_table_toml(t));
    ASSERT_TRUE(back->find_long("hopper", ModelKind::dense));
    EXPECT_DOUBLE_EQ(back->find_long("hopper", ModelKind::dense)->error_hi, 0.138);
    // The compiled-in table holds a long hopper row (NeMo's and torchtitan's long-sequence runs).
    const ResidualTable& published = published_residuals();
    const ResidualRow* long_h = published.find_long("hopper", ModelKind::dense);
    ASSERT_TRUE(long_h && long_h->has_interval);
    auto band_at = [](std::vector<std::string> sets) { return *job_error_band(load_asset("llama3-8b-h100.toml", sets)); };
    const ErrorBand at_128k = band_at({"model.seq_len=131072", "parallel.cp=4", "parallel.dp=1"});
    EXPECT_EQ(at_128k.runs, long_h->runs);
    EXPECT_DOUBLE_EQ(at_128k.error_lo, long_h->error_lo);
    EXPECT_DOUBLE_EQ(at_128k.error_hi, long_h->error_hi);
    expect_mentions(speed_interval(at_128k, SpeedPoint{1, 1, 1, 1, 1, 1}).basis(), {"published hopper (", ") dense long-sequence (32K tokens or more) runs"});
    const ErrorBand at_8k = band_at({});
    EXPECT_EQ(at_8k.runs, published.find("hopper", ModelKind::dense)->runs);
    EXPECT_NE(at_8k.error_lo, at_128k.error_lo);
}

// A band wholly below zero (the estimate fast on nearly every run) gives intervals that do not
// hold the point figures, and the basis line says so; a band across zero says nothing.
TEST(ErrorBars, OneSidedBandSaysTheIntervalMissesThePoint) {
    ErrorBand band;
    band.error_lo = -0.3, band.error_hi = -0.05, band.confidence = 0.8, band.runs = 9, band.runs_of = "hopper (H100) MoE";
    const SpeedInterval fast = speed_interval(band, SpeedPoint{10, 1000, 1, 1, 1, 1});
    EXPECT_GT(fast.step_s.lo, 10.0);  // 10 / 0.95
    EXPECT_LT(fast.tokens_per_s.hi, 1000.0);
    expect_mentions(fast.one_sided(), {"ran fast", "90th percentile", "slow side"});
    band.error_lo = 0.02, band.error_hi = 0.2;
    expect_mentions(speed_interval(band, SpeedPoint{10, 1000, 1, 1, 1, 1}).one_sided(), {"ran slow", "10th percentile", "fast side"});
    band.error_lo = -0.1, band.error_hi = 0.05;
    EXPECT_EQ(speed_interval(band, SpeedPoint{10, 1000, 1, 1, 1, 1}).one_sided(), "");
}

// The memory peak by hand: e from −8% to +1% (predicted / measured − 1), a predicted 100 GiB
// peak: the run reached 100/1.01 = 99.01 … 100/0.92 = 108.70 GiB; with 105 GiB usable the top
// does not fit, with 110 it does.
TEST(ErrorBars, MemoryIntervalMathsByHand) {
    ErrorBand band;
    band.source = IntervalSource::measured_memory;
    band.error_lo = -0.08, band.error_hi = 0.01, band.confidence = 0.8, band.runs = 25, band.runs_of = "hopper (H100) dense";
    const MemoryInterval m = memory_interval(band, 100.0, 105.0);
    ASSERT_TRUE(m.known);
    EXPECT_DOUBLE_EQ(m.peak, 100.0);
    EXPECT_NEAR(m.peak_bytes.lo, 100.0 / 1.01, 1e-12);
    EXPECT_NEAR(m.peak_bytes.hi, 100.0 / 0.92, 1e-12);
    EXPECT_FALSE(m.fits_at_top);
    EXPECT_TRUE(memory_interval(band, 100.0, 110.0).fits_at_top);
    EXPECT_EQ(m.basis(), "25 measured hopper (H100) dense runs");
}

// The compiled-in memory table: an H100 dense job takes the measured dense hopper runs; an MoE
// job, with fewer than 8 measured MoE runs on hopper and overall, every run, and says why; a CPU
// job none.
TEST(ErrorBars, MemoryBandFollowsTheSameRowsAsTheSpeeds) {
    const ResidualTable& t = memory_residuals();
    const ResidualRow* hopper = t.find("hopper", ModelKind::dense);
    ASSERT_TRUE(hopper && hopper->has_interval);
    const std::optional<ErrorBand> h100 = job_memory_error_band(load_asset("llama3-8b-h100.toml"));
    ASSERT_TRUE(h100);
    EXPECT_EQ(h100->source, IntervalSource::measured_memory);
    EXPECT_EQ(h100->runs, hopper->runs);
    EXPECT_DOUBLE_EQ(h100->error_hi, hopper->error_hi);
    EXPECT_TRUE(h100->fallback.empty());
    const ResidualRow* moe = t.find(ModelKind::moe);
    ASSERT_TRUE(moe && !moe->has_interval);
    const std::optional<ErrorBand> mixtral = job_memory_error_band(load_asset("../../tests/data/studio/mixtral-8x7b-ep8.toml"));
    ASSERT_TRUE(mixtral);
    EXPECT_EQ(mixtral->runs, t.pooled.runs);
    expect_mentions(band_basis(*mixtral), {"pooled", "measured runs of all generations", "fewer than 8"});
    std::string why;
    EXPECT_FALSE(job_memory_error_band(load_asset("tiny-gpt-8rank.toml"), &why));
    expect_mentions(why, {"no measured runs on CPUs"});
    // The estimate carries it, on the worst stage's total.
    const JobSpec j = load_asset("llama3-70b-h100.toml");
    const Estimate e = estimate_job(j);
    ASSERT_TRUE(e.memory_interval.known);
    EXPECT_DOUBLE_EQ(e.memory_interval.peak, e.stages[(size_t)e.worst_stage].mem.total());
    EXPECT_LT(e.memory_interval.peak_bytes.lo, e.memory_interval.peak_bytes.hi);
}

// A table refused: its first problem at broken.toml's `line`, naming `key`, the message holding `words`.
template <class Table>
void expect_refused(const Result<Table>& t, const std::string& text, int line, const std::string& key, const std::string& words) {
    ASSERT_FALSE(t) << text;
    const Diagnostic& d = t.error().diagnostics.front();
    EXPECT_EQ(d.where.file, "broken.toml");
    EXPECT_EQ(d.where.line, line) << t.error().str();
    EXPECT_EQ(d.key, key) << t.error().str();
    EXPECT_TRUE(contains(t.error().str(), words)) << t.error().str();
}

// A broken table is refused with the file, line and field of each problem.
TEST(ErrorBars, BrokenTableRefusedWithFileLineField) {
    const std::string head = "version = 3\nmin_runs = 8\n[pooled]\nruns = 20\nerror_lo = -0.2\nerror_hi = 0.1\n";
    struct Case {
        std::string text;
        int line;
        std::string key, words;
    } cases[] = {
        {head + "[[generation]]\nname = \"hopper\"\nmodel = \"dense\"\nruns = 9\nerror_lo = 0.3\nerror_hi = 0.1\n", 11,
         "generation.hopper.dense.error_lo", "above error_hi"},
        {head + "[[generation]]\nname = \"turing\"\nmodel = \"dense\"\nruns = 9\n", 8, "generation.turing.dense.name", "turing"},
        {head + "[[generation]]\nname = \"ampere\"\nmodel = \"dense\"\nruns = 9\nerror_lo = -0.1\n", 11,
         "generation.ampere.dense.error_hi", "both error_lo and error_hi"},
        {head + "[[generation]]\nname = \"ampere\"\nmodel = \"dense\"\nruns = 3\nerror_lo = -0.1\nerror_hi = 0.1\n", 10,
         "generation.ampere.dense.runs", "min_runs = 8"},
        {head + "[[generation]]\nname = \"ampere\"\nmodel = \"dense\"\nruns = 9\nrnus = 9\n", 11,
         "generation.ampere.dense.rnus", "did you mean \"runs\""},
        {head + "[[generation]]\nname = \"ampere\"\nruns = 9\n", 7, "generation.ampere.model", "a model kind"},
        {head + "[[generation]]\nname = \"ampere\"\nmodel = \"sparse\"\nruns = 9\n", 9, "generation.ampere.sparse.model",
         "allowed: dense, moe"},
        {head + "[[generation]]\nname = \"ampere\"\nmodel = \"moe\"\nruns = 1\n[[generation]]\nname = \"ampere\"\nmodel = "
                "\"moe\"\nruns = 1\n",
         12, "generation.ampere.moe.name", "twice"},
        {head + "[[long_sequence]]\nname = \"hopper\"\nmodel = \"dense\"\nruns = 1\n[[long_sequence]]\nname = \"hopper\"\nmodel = "
                "\"dense\"\nruns = 1\n",
         12, "long_sequence.hopper.dense.name", "twice in [[long_sequence]]"},
        {head + "[[long_sequence]]\nname = \"hopper\"\nmodel = \"dense\"\nruns = 6\nerror_lo = -0.2\nerror_hi = 0.2\n", 10,
         "long_sequence.hopper.dense.runs", "min_runs = 8"},
        {head + "[[model]]\nname = \"moe\"\nruns = 3\nerror_lo = -0.1\nerror_hi = 0.1\n", 9, "model.moe.runs", "min_runs = 8"},
        {head + "[[model]]\nname = \"dense\"\nruns = 9\n[[model]]\nname = \"dense\"\nruns = 9\n", 11, "model.dense.name",
         "twice"},
        {"version = 2\n[pooled]\nruns = 1\nerror_lo = 0.0\nerror_hi = 0.0\n", 1, "version", "version 3"},
        {"version = 3\n[pooled]\nruns = 4\nerror_lo = -1.5\nerror_hi = 0.1\n", 4, "pooled.error_lo", "-1.5"},
    };
    for (const Case& c : cases) expect_refused(parse_residual_table(c.text, "broken.toml"), c.text, c.line, c.key, c.words);
}

// The estimate carries its interval, computed from its own figures under the job's band.
TEST(ErrorBars, EstimateCarriesItsInterval) {
    const JobSpec j = load_asset("llama3-70b-h100.toml");
    const Estimate e = estimate_job(j);
    ASSERT_TRUE(e.speed.known);
    const ErrorBand band = *job_error_band(j);
    EXPECT_DOUBLE_EQ(e.speed.step_s.lo, e.step_s / (1 + band.error_hi));
    EXPECT_DOUBLE_EQ(e.speed.step_s.hi, e.step_s / (1 + band.error_lo));
    EXPECT_DOUBLE_EQ(e.speed.mfu.lo, e.mfu * (1 + band.error_lo));
    EXPECT_LE(e.speed.tokens_per_s.lo, e.tokens_per_s);
    EXPECT_GE(e.speed.tokens_per_s.hi, e.tokens_per_s);
    EXPECT_FALSE(estimate_job(load_asset("tiny-gpt-8rank.toml")).speed.known);
}

// The compiled-in closed-loop table parses (a build whose table is broken would abort at the
// first profile estimate), every run holds the bench's matrix, and its band straddles 0.
TEST(ErrorBars, TheClosedLoopTableParses) {
    const ClosedLoopTable& t = closed_loop_residuals();
    ASSERT_FALSE(t.runs.empty());
    for (const ClosedLoopRun& r : t.runs) {
        EXPECT_FALSE(r.id.empty());
        EXPECT_EQ(r.jobs.size(), 11u) << "run " << r.id << ": bench/closed_loop.sh's matrix";
    }
    const ErrorBand b = t.band();
    EXPECT_EQ(b.runs, (int)(11 * t.runs.size()));
    EXPECT_LT(b.error_lo, 0.0);
    EXPECT_GT(b.error_hi, 0.0);
    EXPECT_DOUBLE_EQ(b.confidence, 0.8);
}

// The band by hand: errors −30%, −10%, 0, +10%, +50% (predicted / measured − 1); the 10th
// percentile at index 0.4 between −30% and −10%: −22%; the 90th at index 3.6: +34%.
TEST(ErrorBars, ClosedLoopBandIsThePercentilesOfEveryJob) {
    const std::string text = "version = 1\nmachine = \"m\"\n[[run]]\nid = \"A\"\nmeasured_at = \"t\"\njob = [\n"
                             "  { name = \"a\", ranks = 1, predicted_s = 0.7, measured_s = 1.0 },\n"
                             "  { name = \"b\", ranks = 1, predicted_s = 0.9, measured_s = 1.0 },\n"
                             "  { name = \"c\", ranks = 1, predicted_s = 2.0, measured_s = 2.0 },\n"
                             "]\n[[run]]\nid = \"B\"\nmeasured_at = \"t\"\njob = [\n"
                             "  { name = \"a\", ranks = 2, predicted_s = 1.1, measured_s = 1.0 },\n"
                             "  { name = \"b\", ranks = 2, predicted_s = 1.5, measured_s = 1.0 },\n]\n";
    auto t = parse_closed_loop_table(text, "t.toml");
    ASSERT_TRUE(t) << t.error().str();
    const ErrorBand b = t->band();
    EXPECT_EQ(b.runs, 5);
    EXPECT_NEAR(b.error_lo, -0.22, 1e-12);
    EXPECT_NEAR(b.error_hi, 0.34, 1e-12);
    // Added to a probe band of −3% … +4% in quadrature: −√(0.03² + 0.22²), +√(0.04² + 0.34²).
    ErrorBand probes;
    probes.error_lo = -0.03, probes.error_hi = 0.04;
    const ErrorBand c = combined_band(probes, b);
    EXPECT_NEAR(c.error_lo, -std::sqrt(0.03 * 0.03 + 0.22 * 0.22), 1e-12);
    EXPECT_NEAR(c.error_hi, std::sqrt(0.04 * 0.04 + 0.34 * 0.34), 1e-12);
}

// A broken closed-loop table is refused with the file, line and field.
TEST(ErrorBars, BrokenClosedLoopTableRefusedWithFileLineField) {
    const std::string head = "version = 1\nmachine = \"m\"\n[[run]]\nid = \"A\"\nmeasured_at = \"t\"\n";
    struct Case {
        std::string text;
        int line;
        std::string key, words;
    } cases[] = {
        {head + "job = [ { name = \"a\", ranks = 1, predicted_s = 0.5, measured_s = 0 } ]\n", 6, "run[0].job[0].measured_s",
         "got 0"},
        {head + "job = [ { name = \"a\", ranks = 0, predicted_s = 0.5, measured_s = 1 } ]\n", 6, "run[0].job[0].ranks", "0"},
        {head + "job = [ { name = \"a\", ranks = 1, predicted = 0.5, measured_s = 1 } ]\n", 6, "run[0].job[0].predicted_s",
         "did you mean \"predicted_s\""},  // missing, and the misspelt key named with the nearest known one
        {"version = 1\n[[run]]\nid = \"A\"\nmeasured_at = \"t\"\njob = []\n", 1, "machine", "missing"},
        {"version = 1\nmachine = \"m\"\n", 1, "run", "missing"},
    };
    for (const Case& c : cases) expect_refused(parse_closed_loop_table(c.text, "broken.toml"), c.text, c.line, c.key, c.words);
}

}  // namespace
