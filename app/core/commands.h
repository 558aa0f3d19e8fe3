// commands.h — the `ptd` subcommands as functions (the CLI and ptd-studio's headless
// fallback both call them). Each returns the process exit code:
//   0 ok, 2 usage or configuration error, 1 runtime failure.
// `ptd estimate` and `ptd plan` exit 0 when a job does not fit: that is their answer.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "layout_view.h"
#include "ptd/export/export.h"
#include "ptd/spec/presets.h"

namespace ptd {

constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitConfig = 2;

// A job from a path, or one of the built-ins: "@default" (7B on 4×8 H100), "@tiny" (tiny
// GPT on 4 local CPU ranks), with `--set section.key=value` overrides applied in order.
Result<JobSpec> load_job_arg(const std::string& arg, const PresetCatalog& presets,
                             const std::vector<std::string>& overrides = {});

struct ValidateArgs {
    std::vector<std::string> jobs;
    std::vector<std::string> sets;  // --set, applied to every job
    bool json = false;
    bool print = false;  // print the canonical TOML of each valid job
};
int cmd_validate(const ValidateArgs& a, const PresetCatalog& presets, FILE* out, FILE* err);

struct LayoutArgs {
    std::string job;
    std::vector<std::string> sets;
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

struct EstimateArgs {
    std::string job;
    std::vector<std::string> sets;
    std::string profile;      // --profile FILE: a cluster profile (ptd calibrate); else cluster.profile
    bool json = false;        // schema ptd.estimate/1
    // A second job (`ptd estimate A B` or --compare B): the two side by side instead
    // (compare_view.h; --json: schema ptd.estimate-compare/1).
    std::string compare;
};
int cmd_estimate(const EstimateArgs& a, const PresetCatalog& presets, FILE* out, FILE* err);

struct PlanArgs {
    std::string job;
    std::vector<std::string> sets;
    std::string profile;      // --profile FILE, as for estimate
    int top = 10;
    int gpus = 0;             // 0 = the job's world size
    double headroom = -1;     // < 0 = the job's estimate.headroom if written, else its framework's default
    bool tp_beyond_node = false;
    bool any_framework = false;  // planfw: every framework's layouts, each row marked with those that run it
    bool try_zb_h1 = false, try_dualpipe = false;  // zb: --zb-h1, --dualpipe
    bool exhaustive = false;
    bool unfold = false;      // --unfold: one row per interleaving depth and TP overlap (PlanOptions::fold off)
    int threads = 0;          // --threads: the screening pass's threads, 0 = one per hardware thread
    std::string objective = "throughput";  // cost: --objective throughput|time|cost|energy
    bool json = false;        // schema ptd.plan/1
};
int cmd_plan(const PlanArgs& a, const PresetCatalog& presets, FILE* out, FILE* err);

struct ExportArgs {
    std::string job;
    std::vector<std::string> sets;
    ExportFormat format = ExportFormat::megatron;
    bool plan = false;        // export the planner's best layout instead of the job's
    std::optional<ScriptLauncher> launcher;  // --launcher: a runnable launch script (issue 28)
    // --format jobset | trainjob (issue 32): the ranks of ptd-engine as `ptd launch --k8s`
    // writes them (cmd_launch.h export_k8s); `format` is then unused. "" = a framework format.
    std::string k8s_form;
    std::string image, run_root, run_id;  // --image, --run-root, --run-id (those forms only)
};
// The export on `out`; notes (what the format carries elsewhere) on `err`.
int cmd_export(const ExportArgs& a, const PresetCatalog& presets, FILE* out, FILE* err);

// Summary + layout of a job in the terminal (ptd-studio without a display).
int print_job_overview(const JobSpec& job, FILE* out, FILE* err);

// `ptd watch RUN_DIR`: the dashboard of a live or finished run directory (docs/cli.md).
struct WatchArgs {
    std::string run_dir;
    bool once = false;        // print the dashboard of what is there now and exit
    double interval = 1.0;    // seconds between redraws on a terminal
    bool sparklines = true;
    double stale_after = 120; // a run nobody records the end of is over after this long silent
    std::string profile;      // --profile FILE: the speed prediction's cluster profile (else
                              // the one the run's manifest records, else the job's)
};
int cmd_watch(const WatchArgs& a, FILE* out, FILE* err);

}  // namespace ptd
