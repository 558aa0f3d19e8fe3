// job_load.cpp — loading a job, in one pass: the text (a file, text given by the caller, or
// a job in memory saved to canonical TOML) is parsed as TOML once, the `--set` overrides
// are parsed once and written into that table once (job_overrides.cpp), and the one strict
// reader (load_job_table, job_toml.cpp) reads the result once. Diagnostics about an
// overridden key then name the override instead of a file line.
#include "spec/job_toml_internal.h"
#include "ptd/spec/job_overrides.h"
#include "ptd/spec/job_spec.h"
#include "ptd/spec/presets.h"

namespace ptd {

namespace {

// `from_saved_text`: `text` is a job saved from memory, not a file the user can open.
Result<JobSpec> load_job_once(std::string_view text, const std::string& file, const std::vector<std::string>& override_texts,
                              const PresetCatalog& presets, bool from_saved_text) {
    auto doc = parse_toml(text, file);
    if (!doc) return std::unexpected(doc.error());
    if (override_texts.empty()) return load_job_table(*doc, file, presets);
    auto overrides = parse_overrides(override_texts);
    if (!overrides) return std::unexpected(overrides.error());
    if (auto written = write_overrides(*doc, *overrides); !written) return std::unexpected(written.error());
    auto job = load_job_table(*doc, file, presets);
    if (!job) {
        Error e = job.error();
        point_at_overrides(e.diagnostics, *overrides, from_saved_text);
        return std::unexpected(std::move(e));
    }
    point_locations_at_overrides(*job, *overrides, from_saved_text);
    return job;
}

}  // namespace

Result<JobSpec> load_job_text(std::string_view text, const std::string& file, const PresetCatalog& presets) {
    return load_job_once(text, file, {}, presets, false);
}

Result<JobSpec> load_job_file(const std::string& path, const PresetCatalog& presets) {
    return load_job_file_with_overrides(path, {}, presets);
}

Result<JobSpec> load_job_text_with_overrides(std::string_view text, const std::string& file,
                                             const std::vector<std::string>& overrides, const PresetCatalog& presets) {
    return load_job_once(text, file, overrides, presets, false);
}

Result<JobSpec> load_job_file_with_overrides(const std::string& path, const std::vector<std::string>& overrides,
                                             const PresetCatalog& presets) {
    auto text = read_text_file(path);
    if (!text) return std::unexpected(text.error());
    return load_job_once(*text, path, overrides, presets, false);
}

Result<JobSpec> apply_overrides(const JobSpec& job, const std::vector<std::string>& overrides,
                                const PresetCatalog& presets) {
    if (overrides.empty()) return job;
    // The built-in jobs name their presets but keep no base copy; give them one when the
    // model / GPU still equal the preset, so the saved text says `preset = ...` and
    // `gpu = ...` and an override of one key keeps the rest of the preset.
    JobSpec base = job;
    if (!base.origin.model_base && !base.origin.model_preset.empty())
        if (const ModelSpec* m = presets.find_model(base.origin.model_preset); m && *m == base.model)
            base.origin.model_base = *m;
    if (!base.origin.gpu_base && !base.origin.gpu_preset.empty())
        if (const GpuSpec* g = presets.find_gpu(base.origin.gpu_preset); g && *g == base.cluster.gpu)
            base.origin.gpu_base = *g;
    // save_job_toml always writes valid TOML, so the one pass only fails on the overrides.
    return load_job_once(save_job_toml(base), job.origin.file, overrides, presets, true);
}

}  // namespace ptd
