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

#include "ptd/spec/job_spec.h"

namespace ptd {

// torchtitan = its current Python config (Trainer.Config, --module/--config);
// torchtitan_toml = the TOML file of torchtitan v0.2.x (--job.config_file).
enum class ExportFormat { megatron, deepspeed, torchtitan, torchtitan_toml };
inline constexpr ExportFormat kExportFormats[] = {ExportFormat::megatron, ExportFormat::deepspeed,
                                                  ExportFormat::torchtitan, ExportFormat::torchtitan_toml};

const char* to_string(ExportFormat f);  // "megatron", "deepspeed", "torchtitan", "torchtitan-toml"
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

// Shortest decimal text that reads back to the same double (std::to_chars), e.g.
// 0.0003, 1e-05, 0.1. Every float an export prints goes through this.
std::string shortest_decimal(double v);
// A ratio of two user-given decimals (min_lr / lr): rounded to 15 significant digits
// first, so 3e-4 / 3e-3 prints 0.1, not the binary quotient 0.09999999999999999.
double decimal_ratio(double numerator, double denominator);

}  // namespace ptd
