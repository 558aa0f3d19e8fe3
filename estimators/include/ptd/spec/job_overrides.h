// job_overrides.h — `--set section.key=value` on the command line. Overrides are applied
// to the job's TOML document and the result goes through the same strict reader as a
// file, so an override is checked exactly like the line it stands for; its errors name
// the override ("--set parallel.tp=3: error: parallel.tp: ...") instead of a file line.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ptd/spec/job_spec.h"

namespace ptd {

struct PresetCatalog;

// One override as written, split into its dotted key path and value text.
struct JobOverride {
    std::string text;               // "parallel.tp=4" exactly as given (used in messages)
    std::vector<std::string> path;  // {"parallel", "tp"}
    std::string value;              // "4": TOML value syntax; a bare word is a string
};

// The sections an override may name, in job-spec order.
const std::vector<std::string>& override_sections();

// Split and check "section.key=value" (section known, key present). The value is not
// checked here: the job reader does that, against the same ranges as in a file.
//   value syntax: integers, floats, true/false, "quoted strings", [arrays]; anything
//   that is not valid TOML (selective, h100-sxm, a path) is taken as a string.
Result<JobOverride> parse_override(std::string_view text);

// Load a job file (or TOML text) with overrides applied, in order (a later override of
// the same key wins). With no overrides these are load_job_file / load_job_text.
Result<JobSpec> load_job_file_with_overrides(const std::string& path, const std::vector<std::string>& overrides,
                                             const PresetCatalog& presets);
Result<JobSpec> load_job_text_with_overrides(std::string_view toml_text, const std::string& file,
                                             const std::vector<std::string>& overrides,
                                             const PresetCatalog& presets);

// Overrides on a job already in memory (the built-in @default / @tiny jobs): the job is
// saved to canonical TOML, overridden and read back. Diagnostics that are not about an
// override point at the job (origin.file) without a line, since the text is not a file.
Result<JobSpec> apply_overrides(const JobSpec& job, const std::vector<std::string>& overrides,
                                const PresetCatalog& presets);

}  // namespace ptd
