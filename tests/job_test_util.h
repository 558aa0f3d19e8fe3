// job_test_util.h — loading jobs in the estimator, planner and export tests: the shipped
// assets/jobs files (with `--set` overrides) and inline job text, one copy for every test
// file. A job that does not load fails the test with the file's name and the loader's
// diagnostics, and stands in as an empty JobSpec.
#pragma once

#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/spec/job_overrides.h"
#include "ptd/spec/presets.h"

#include "text_test_util.h"

namespace ptd_test {

inline const std::string kJobs = PTD_SOURCE_DIR "/assets/jobs/";

inline const ptd::PresetCatalog& presets() { return ptd::embedded_presets(); }


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

// `job` exported as `format`: its text ("" and a test failure when the export refuses).
inline std::string export_text(const ptd::JobSpec& job, ptd::ExportFormat format) {
    auto out = ptd::export_job(job, format);
    EXPECT_TRUE(out) << (out ? "" : out.error().str());
    return out ? out->text : std::string();
}

// A job file's text read back (as "saved.toml"), as a test reads what save_job_toml wrote.
inline ptd::JobSpec reloaded(const std::string& saved_text) { return job_from_text(saved_text, "saved.toml"); }

// Whether any of `notes` mentions `sub`.
inline bool any_note(const std::vector<std::string>& notes, const std::string& sub) {
    for (const std::string& n : notes)
        if (contains(n, sub)) return true;
    return false;
}

// Whether an export's notes mention `sub`.
inline bool any_note(const ptd::ExportOutput& o, const std::string& sub) { return any_note(o.notes, sub); }

// Whether an estimate's notes mention `sub`.
inline bool any_note(const ptd::Estimate& e, const std::string& sub) { return any_note(e.notes, sub); }

// The parts of a job file of a model preset on a cluster of `nodes` × `gpus_per_node` `gpu`.
struct JobText {
    std::string preset = "";
    int nodes = 1;
    int gpus_per_node = 8;
    std::string gpu = "h100-sxm";
    std::string cluster_extra = "";  // more [cluster] lines
    std::string parallel = "";       // the [parallel] lines
    std::string training = "";       // the [training] lines (may open further sections after them)
};

// The job file's text, one key a line, sections in the order [model], [cluster], [parallel],
// [training]; read it with job_from_text or load_job_text.
inline std::string job_text(const JobText& j) {
    return "\n[model]\npreset = \"" + j.preset + "\"\n[cluster]\nnodes = " + std::to_string(j.nodes) +
           "\ngpus_per_node = " + std::to_string(j.gpus_per_node) + "\ngpu = \"" + j.gpu + "\"\n" +
           (j.cluster_extra.empty() ? "" : j.cluster_extra + "\n") + "[parallel]\n" + j.parallel + "\n[training]\n" +
           j.training;
}

// The diagnostics of a job that must be refused ("" and a test failure when it loads).
inline std::string refusal(const ptd::Result<ptd::JobSpec>& job) {
    EXPECT_FALSE(job.has_value()) << "the job loaded; expected it refused";
    return job ? std::string() : job.error().str();
}

// The diagnostics of a job file's text that must be refused, loaded as file `name`.
inline std::string refusal_of_text(const std::string& text, const std::string& name) {
    return refusal(ptd::load_job_text(text, name, presets()));
}

// Expects `job` refused with a message that contains `message` and is located in `file`.
inline void expect_refused(const ptd::Result<ptd::JobSpec>& job, const std::string& message, const std::string& file) {
    ASSERT_FALSE(job.has_value()) << message;
    EXPECT_NE(job.error().str().find(message), std::string::npos) << job.error().str();
    EXPECT_NE(job.error().str().find(file), std::string::npos) << job.error().str();
}

// A job of `preset` on `nodes` nodes of 8 H100 with the [parallel] lines given, micro-batch 1
// and `global_batch` sequences per step.
inline ptd::JobSpec preset_job(const std::string& preset, const std::string& parallel, int nodes = 128,
                               int global_batch = 8192) {
    return job_from_text(job_text({.preset = preset,
                                   .nodes = nodes,
                                   .parallel = parallel,
                                   .training = "micro_batch = 1\nglobal_batch = " + std::to_string(global_batch) + "\n"}));
}

// Llama 3 8B on one node of 8 H100 (TP1 PP1 DP8, micro-batch 1, `global_batch` sequences per
// step), as a job file: `parallel_extra` and `training_extra` are appended to those sections
// (training_extra may open further sections after it).
inline std::string llama8b_h100x8_job(const std::string& parallel_extra, const std::string& training_extra,
                                      int global_batch) {
    return job_text({.preset = "llama3-8b",
                     .parallel = "tp = 1\npp = 1\ndp = 8\n" + parallel_extra,
                     .training = "global_batch = " + std::to_string(global_batch) + "\nmicro_batch = 1\n" + training_extra});
}

// A Megatron-LM export's "--flag value" pairs, one a line, every line but the last ending in " \\"
// (checked).
inline std::vector<std::pair<std::string, std::string>> megatron_args(const std::string& text) {
    std::vector<std::pair<std::string, std::string>> out;
    std::istringstream in(text);
    std::string line;
    std::vector<std::string> lines;
    while (std::getline(in, line)) lines.push_back(line);
    for (size_t i = 0; i < lines.size(); ++i) {
        std::string l = lines[i];
        const bool last = i + 1 == lines.size();
        EXPECT_EQ(l.ends_with(" \\"), !last) << "line " << i << ": " << l;
        if (!last) l.resize(l.size() - 2);
        size_t sp = l.find(' ');
        out.emplace_back(l.substr(0, sp), sp == std::string::npos ? "" : l.substr(sp + 1));
    }
    return out;
}

// The value of `flag` ("" for a bare flag, "<absent>" when not written).
inline std::string value_of(const std::vector<std::pair<std::string, std::string>>& args, const std::string& flag) {
    for (const auto& [f, v] : args)
        if (f == flag) return v;
    return "<absent>";
}

// Expects each flag of `want` written with its value ("" for a bare flag, "<absent>" for one
// not written), naming the flag.
inline void expect_flags(const std::vector<std::pair<std::string, std::string>>& args,
                         std::initializer_list<std::pair<const char*, const char*>> want) {
    for (const auto& [flag, value] : want) EXPECT_EQ(value_of(args, flag), value) << flag;
}

}  // namespace ptd_test
