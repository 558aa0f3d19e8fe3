// commands.h — the `ptd` subcommands as functions (the CLI and ptd-studio's headless
// fallback both call them). Each returns the process exit code:
//   0 ok, 2 usage or configuration error, 1 runtime failure.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "layout_view.h"
#include "ptd/presets.h"

namespace ptd {

constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitConfig = 2;

// A job from a path, or one of the built-ins: "@default" (7B on 4×8 H100), "@tiny" (tiny
// GPT on 4 local CPU ranks).
Result<JobSpec> load_job_arg(const std::string& arg, const PresetCatalog& presets);

struct ValidateArgs {
    std::vector<std::string> jobs;
    bool json = false;
    bool print = false;  // print the canonical TOML of each valid job
};
int cmd_validate(const ValidateArgs& a, const PresetCatalog& presets, FILE* out, FILE* err);

struct LayoutArgs {
    std::string job;
    std::string hosts;        // hostfile overriding the job's
    ColorBy color_by = ColorBy::tp;
    bool json = false;
    bool all = false;         // draw every node
};
int cmd_layout(const LayoutArgs& a, const PresetCatalog& presets, FILE* out, FILE* err);

struct PresetsArgs {
    bool json = false;
};
int cmd_presets(const PresetsArgs& a, const PresetCatalog& presets, FILE* out, FILE* err);

// Summary + layout of a job in the terminal (ptd-studio without a display).
int print_job_overview(const JobSpec& job, FILE* out, FILE* err);

}  // namespace ptd
