// job_test_util.h — loading jobs in the estimator, planner and export tests: the shipped
// assets/jobs files (with `--set` overrides) and inline job text, one copy for every test
// file. A job that does not load fails the test with the file's name and the loader's
// diagnostics, and stands in as an empty JobSpec.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/export/export.h"
#include "ptd/spec/job_overrides.h"
#include "ptd/spec/presets.h"

namespace ptd_test {

inline const std::string kJobs = PTD_SOURCE_DIR "/assets/jobs/";

inline const ptd::PresetCatalog& presets() { return ptd::embedded_presets(); }

inline bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// The loaded job; a load failure is a test failure (naming `what`) and an empty JobSpec.
inline ptd::JobSpec loaded(const ptd::Result<ptd::JobSpec>& job, const std::string& what = "job") {
    EXPECT_TRUE(job) << what << ": " << (job ? "" : job.error().str());
    return job ? *job : ptd::JobSpec{};
}

// assets/jobs/<file> with `sets` applied as `--set` would apply them.
inline ptd::JobSpec load_asset(const std::string& file, const std::vector<std::string>& sets = {}) {
    return loaded(ptd::load_job_file_with_overrides(kJobs + file, sets, presets()), file);
}

// The diagnostics of loading assets/jobs/<file> with `sets`, joined (empty when it loads).
inline std::string load_error(const std::string& file, const std::vector<std::string>& sets) {
    auto job = ptd::load_job_file_with_overrides(kJobs + file, sets, presets());
    return job ? std::string() : job.error().str();
}

// A job written inline in the test, read as a file named `name` would be.
inline ptd::JobSpec job_from_text(const std::string& text, const std::string& name = "job.toml") {
    return loaded(ptd::load_job_text(text, name, presets()), name);
}

// Whether an export's notes mention `sub`.
inline bool any_note(const ptd::ExportOutput& o, const std::string& sub) {
    for (const std::string& n : o.notes)
        if (contains(n, sub)) return true;
    return false;
}

// Llama 3 8B on one node of 8 H100 (TP1 PP1 DP8, micro-batch 1, `global_batch` sequences per
// step), as a job file: `parallel_extra` and `training_extra` are appended to those sections
// (training_extra may open further sections after it).
inline std::string llama8b_h100x8_job(const std::string& parallel_extra, const std::string& training_extra,
                                      int global_batch) {
    return R"(
[model]
preset = "llama3-8b"
[cluster]
nodes = 1
gpus_per_node = 8
gpu = "h100-sxm"
[parallel]
tp = 1
pp = 1
dp = 8
)" + parallel_extra + "\n[training]\nglobal_batch = " + std::to_string(global_batch) + "\nmicro_batch = 1\n" +
           training_extra;
}

}  // namespace ptd_test
