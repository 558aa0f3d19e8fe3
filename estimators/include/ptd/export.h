// export.h — a job's layout and training settings written in another framework's own
// terms: Megatron-LM pretrain_gpt.py arguments, a DeepSpeed ds_config JSON, or a
// torchtitan train-config TOML. Every option written is a real option of that framework
// (docs/cli.md cites the versions checked); what it cannot express is an error when the
// run would differ materially, or a note for the user otherwise — never dropped silently.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ptd/job_spec.h"

namespace ptd {

enum class ExportFormat { megatron, deepspeed, torchtitan };

const char* to_string(ExportFormat f);
// "megatron", "deepspeed", "torchtitan" → the format; error names the allowed words.
Result<ExportFormat> parse_export_format(std::string_view word);

struct ExportOutput {
    std::string text;                // the arguments / file, ending in a newline
    std::vector<std::string> notes;  // settings the format carries elsewhere or not at all (for stderr)
};

// The job (valid: validate_job empty) in `format`. Errors name the job key that cannot
// be expressed and what to change, e.g. zero = 2 for Megatron-LM.
Result<ExportOutput> export_job(const JobSpec& job, ExportFormat format);

}  // namespace ptd
