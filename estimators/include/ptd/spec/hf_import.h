// hf_import.h — a Hugging Face config.json → ModelSpec. Maps the common fields of
// Llama, Mistral, Mixtral, Qwen2, GPT-2 and GPT-NeoX configs; a field that changes the
// architecture in a way PTD cannot model (e.g. sliding windows, parallel residual
// mismatch, unknown model_type) is reported by name instead of being ignored.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ptd/common/diagnostic.h"
#include "ptd/spec/job_spec.h"

namespace ptd {

struct HfImport {
    ModelSpec model;
    // Notes on fields that were read but only approximately representable, e.g.
    // "rope_scaling (llama3) is ignored: positions do not change parameter or FLOP counts".
    std::vector<std::string> notes;
};

// `file` names the config in diagnostics (line/column of the offending field are given
// where the JSON parser knows them). seq_len comes from max_position_embeddings /
// n_positions / n_ctx unless `seq_len_override` > 0.
Result<HfImport> import_hf_config_text(std::string_view json_text, const std::string& file,
                                       int seq_len_override = 0);
Result<HfImport> import_hf_config_file(const std::string& path, int seq_len_override = 0);

}  // namespace ptd
