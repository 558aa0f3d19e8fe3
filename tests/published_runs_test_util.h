// published_runs_test_util.h — the published runs of bench/accuracy/published_runs.toml, read
// once per test executable exactly as bench_accuracy reads them, for the tests that pin what a
// family of rows' notes claim (test_published_runs) and the loader's own tests (test_memory,
// test_compute, test_collectives).
#pragma once

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/spec/presets.h"

#include "published_run.h"

namespace ptd_test {

// Every run of the data file (loaded on first use; load_runs exits on a malformed file).
inline const std::vector<::Run>& published_runs() {
    static const std::vector<::Run> runs =
        load_runs(PTD_SOURCE_DIR "/bench/accuracy/published_runs.toml", ptd::embedded_presets());
    return runs;
}

// One small run file in the test's scratch directory, read as bench_accuracy reads it (for the
// loader's own tests: keys reaching the job, bad input refused).
inline std::vector<::Run> load_run_text(const std::string& name, const std::string& text) {
    const std::string path = ::testing::TempDir() + name;
    {
        std::ofstream f(path);
        f << text;
    }
    std::vector<::Run> runs = load_runs(path, ptd::embedded_presets());
    std::remove(path.c_str());
    return runs;
}

// A small MoE row (NeMo on 16 H100: 4 layers of 8 experts, top-2, dp 16 · ep 8) with the run
// keys `keys` added, read as bench_accuracy reads it; expects one row that is not skipped.
inline ::Run load_moe_run_row(const std::string& name, const std::string& keys) {
    const std::vector<::Run> runs = load_run_text(
        name, "[[run]]\nname = \"x-1\"\nframework = \"nemo\"\ngpu = \"h100-sxm\"\ngpus = 16\ngpus_per_node = 8\n"
              "arch = \"llama\"\nlayers = 4\nhidden = 256\nheads = 4\nexperts = 8\ntop_k = 2\nglobal_batch = 32\n"
              "iteration_s = 1.0\ndp = 16\nep = 8\n" + keys);
    EXPECT_EQ(runs.size(), 1u);
    if (runs.size() != 1) return ::Run{};
    EXPECT_TRUE(runs[0].skip.empty()) << runs[0].skip;
    return runs[0];
}

// A boolean run key reaching the job: a small dense row (Megatron on 8 H100, dp 8) read with
// `key = true` gives `in_job` true, without the key false, and `key = 1` is refused with the
// file, its line 20 and the key (load_runs exits 2). `stem` names the scratch files.
inline void expect_run_bool_key(const std::string& stem, const std::string& key,
                                const std::function<bool(const ::Run&)>& in_job) {
    const std::string run =
        "[[run]]\nname = \"" + stem + "-row\"\nuse = \"check\"\nframework = \"megatron\"\ngpu = \"h100-sxm\"\ngpus = 8\n"
        "arch = \"llama\"\nlayers = 4\nhidden = 1024\nheads = 8\nvocab = 32000\nseq_len = 2048\ntp = 1\npp = 1\ndp = 8\n"
        "micro_batch = 1\nglobal_batch = 8\nprecision = \"bf16\"\niteration_s = 1.0\n";
    const std::vector<::Run> runs = load_run_text(stem + "_ok.toml", run + key + " = true\n");
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_TRUE(in_job(runs[0]));
    EXPECT_FALSE(in_job(load_run_text(stem + "_off.toml", run)[0]));
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(load_run_text(stem + "_bad.toml", run + key + " = 1\n"), ::testing::ExitedWithCode(2),
                stem + "_bad.toml:20: run key \"" + key + "\" has the wrong type");
    std::remove((::testing::TempDir() + stem + "_bad.toml").c_str());  // the dying child could not
}

// A row's estimate as written (`key` on) and with the [estimate] key `key` turned off, for the
// tests that pin a row fitting its GPUs only with a memory measure it states.
struct WithAndWithout {
    ptd::Estimate with, without;
};
inline WithAndWithout estimate_with_and_without(const ::Run& r, bool ptd::EstimateSpec::*key) {
    EXPECT_TRUE(r.job.estimate.*key) << r.name;
    ptd::JobSpec off = r.job;
    off.estimate.*key = false;
    return {ptd::estimate_job(r.job), ptd::estimate_job(off)};
}

// The published row of that name (a test failure, and an empty row, when there is none).
inline const ::Run& published_run(const std::string& name) {
    for (const ::Run& r : published_runs())
        if (r.name == name) return r;
    ADD_FAILURE() << "no published run " << name;
    static const ::Run none{};
    return none;
}

inline bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Issue 15: a run that happened cannot be an OOM. Expects every row `in_family` selects to be
// predicted to fit the GPUs it ran on, and that there are `expected_rows` of them.
inline void expect_family_fits(const std::function<bool(const ::Run&)>& in_family, int expected_rows) {
    int seen = 0;
    for (const ::Run& r : published_runs()) {
        if (!in_family(r)) continue;
        ++seen;
        const ptd::Estimate e = ptd::estimate_job(r.job);
        EXPECT_TRUE(e.fits) << r.name << ": " << e.stages[e.worst_stage].mem.total() / (1024.0 * 1024 * 1024) << " GiB";
    }
    EXPECT_EQ(seen, expected_rows);
}

}  // namespace ptd_test
