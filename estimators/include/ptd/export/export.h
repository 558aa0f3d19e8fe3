// export.h — a job's layout and training settings written in another framework's own
// terms: Megatron-LM pretrain_gpt.py arguments, a DeepSpeed ds_config JSON, a torchtitan
// Python config module (its config system since Feb 2026), or the train-config TOML of
// torchtitan releases up to v0.2.2. Every option written is a real option of that framework
// (docs/cli.md cites the versions checked); what it cannot express is an error when the
// run would differ materially, or a note for the user otherwise — never dropped silently.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ptd/common/decimal.h"  // shortest_decimal, decimal_ratio: every float an export prints
#include "ptd/spec/job_spec.h"

namespace ptd {

// torchtitan = its current Python config (Trainer.Config, --module/--config);
// torchtitan_toml = the TOML file of torchtitan v0.2.x (--job.config_file);
// nemo = a Megatron-Bridge (NeMo 2's successor on Megatron-Core) training script (issue 28).
enum class ExportFormat { megatron, deepspeed, torchtitan, torchtitan_toml, nemo };
inline constexpr ExportFormat kExportFormats[] = {ExportFormat::megatron, ExportFormat::deepspeed, ExportFormat::torchtitan,
                                                  ExportFormat::torchtitan_toml, ExportFormat::nemo};

const char* to_string(ExportFormat f);  // "megatron", "deepspeed", "torchtitan", "torchtitan-toml", "nemo"
// A format's word → the format; error names the allowed words.
Result<ExportFormat> parse_export_format(std::string_view word);

struct ExportOutput {
    std::string text;                // the arguments / file, ending in a newline
    std::vector<std::string> notes;  // settings the format carries elsewhere or not at all (for stderr)
};

// The job (valid: validate_job empty) in `format`. Errors name the job key that cannot
// be expressed and what to change, e.g. zero = 2 for Megatron-LM.
Result<ExportOutput> export_job(const JobSpec& job, ExportFormat format);

// Whether a job (typically a planner result applied with apply_plan_entry) can be written
// in one format; when not, the job key that blocks it and why (the export's own error).
struct FormatExportability {
    ExportFormat format = ExportFormat::megatron;
    bool ok = true;
    std::string key;     // e.g. "parallel.zero"; empty when ok
    std::string reason;  // the export error's message; empty when ok
};
// One entry per format of kExportFormats, in that order.
std::vector<FormatExportability> exportability(const JobSpec& job);

// issue 28: how an exported launch script starts the ranks — a bash script to run on every
// node (torchrun), an sbatch script (slurm), or a Kubernetes JobSet manifest (k8s).
enum class ScriptLauncher { torchrun, slurm, k8s };
inline constexpr ScriptLauncher kScriptLaunchers[] = {ScriptLauncher::torchrun, ScriptLauncher::slurm, ScriptLauncher::k8s};
const char* to_string(ScriptLauncher l);  // "torchrun", "slurm", "k8s"
Result<ScriptLauncher> parse_launcher(std::string_view word);

// The job as a runnable, commented launch script for `format` (megatron, nemo, torchtitan,
// torchtitan-toml or deepspeed): the framework's files (its config written by export_job),
// entry point and every argument, the per-node torchrun line with c10d rendezvous, the
// environment the framework and the cluster's network need, the [paths] keys (placeholders
// that stop the script until set when absent) and the framework version it targets. Refuses
// what export_job refuses.
Result<ExportOutput> export_launch(const JobSpec& job, ExportFormat format, ScriptLauncher launcher);

}  // namespace ptd
