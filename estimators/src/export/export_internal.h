// export_internal.h — what the export targets share (export/*.cpp): the layout in
// framework terms, the checks every framework makes, the plan both torchtitan forms
// write, and each target's entry point for export_job. Not part of the public API.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ptd/export/export.h"
#include "ptd/spec/job_spec.h"

namespace ptd::export_internal {

// teflash: the month Megatron-LM gained --attention-backend (fa0dcc4, 2024-12-07), and how the
// Megatron-LM export's note for an older job begins (the NeMo export, whose Megatron-Bridge
// always has model.attention_backend, writes the key instead and leaves the note out).
inline constexpr int kMegatronAttentionBackendSince = 202412;
inline constexpr std::string_view kMegatronAttentionBackendByDate = "Megatron-LM's attention backend at the job's date: ";

// fusedce2: how the Megatron-LM export's notes on the loss flags its job's date lacks begin; the NeMo
// export, which targets today's Megatron-Bridge and writes the loss as estimated, leaves them out.
inline constexpr std::string_view kMegatronLossFlagsByDate = "Megatron-LM's loss flags at the job's date: ";

// Every float an export prints (shortest_decimal); py_float always has '.' or an exponent.
std::string num(double v);
std::string py_float(double v);
// A Python string literal ("..." with quotes, backslashes and newlines escaped).
std::string py_str(std::string_view s);

// A command-line word → one of `values` (named by to_string); the error names `option`, what
// was given, the closest word and every allowed one.
template <class T, size_t N>
Result<T> parse_word(std::string_view word, const T (&values)[N], const char* option) {
    std::vector<std::string> words;
    std::string allowed;
    for (T v : values) {
        if (word == to_string(v)) return v;
        words.push_back(to_string(v));
        allowed += (allowed.empty() ? "" : ", ") + words.back();
    }
    std::string hint = closest_match(word, words);
    return fail(SourceLoc{}, option,
                "got \"" + std::string(word) + "\"" + (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)") +
                    "; allowed: " + allowed);
}

// SGD means SGD with momentum here: the estimate counts one fp32 momentum buffer per
// parameter (docs/estimators.md), Megatron-LM's --sgd-momentum defaults to 0.9, and
// DeepSpeed's "SGD" is torch.optim.SGD whose momentum defaults to 0 — so every export
// writes this value.
inline constexpr double kSgdMomentum = 0.9;

// An export error at the job's key (its file:line when the job came from a file).
std::unexpected<Error> job_error(const JobSpec& job, const std::string& key, std::string message);

// Layers of each model chunk in model order, and of each pipeline stage (all its chunks).
std::vector<int> chunk_layers(const JobSpec& job);
std::vector<int> stage_layers(const JobSpec& job);
// The note on a multi-node NVLink domain, which no framework has a setting for ("" for one node).
std::string nvlink_domain_note(const JobSpec& job, std::string_view framework);
// The job's rank order with size-1 dimensions dropped, e.g. "tp-dp-pp".
std::string effective_order(const JobSpec& job, std::string_view order);

// The refusals shared by the frameworks that lack ZB-H1 / DualPipe, sub-fp32 optimizer
// states or per-module selective recompute; nullopt when the job does not need them.
std::optional<std::unexpected<Error>> unsupported_schedule(const JobSpec& job, const char* framework);
std::optional<std::unexpected<Error>> unsupported_state_dtypes(const JobSpec& job, const char* framework);
std::optional<std::unexpected<Error>> unsupported_recompute_modules(const JobSpec& job, const char* framework);
// All three, for DeepSpeed and torchtitan: the first refusal that applies.
std::optional<std::unexpected<Error>> unsupported_outside_megatron(const JobSpec& job, const char* framework);

// What both torchtitan forms share: the checks, the flavor and the layout in its terms.
struct TitanPlan {
    const char* flavor = nullptr;   // "8B"/"70B"/"405B", or none
    // mlaio: the torchtitan model family (torchtitan/models/<family>) and its Trainer.Config
    // baseline for the flavor (none: the family's debugmodel, with the loss's vocabulary set).
    const char* family = "llama3";
    const char* baseline = nullptr;
    bool replicate = false;         // DDP (pure data parallelism, no sharding)
    // data_parallel_replicate_degree × data_parallel_shard_degree = dp: DDP (dp × 1), FSDP2
    // (1 × dp) or HSDP (parallel.dp_replicate × the rest).
    int replicate_degree = 1, shard_degree = 1;
    int micro_batches = 1;          // per dp rank and step when pipelining
    std::vector<std::vector<std::string>> chunk_modules;  // per model chunk, pp > 1 only
    std::vector<std::string> notes;
    // fp8 (issue 15 point 3): torchao converter wanted, and the modules it must skip.
    bool fp8 = false;
    std::vector<std::string> fp8_filter_fqns;
    std::vector<std::string> fp8_layers;  // mxfp8, Python form: the layers to convert (fqns)
    bool cpu_offload = false;       // offload: training.enable_cpu_offload (FSDP2 CPUOffloadPolicy)
};

// The checks and the plan both torchtitan forms share (torchtitan_plan.cpp); `output_module`
// is the output projection's module name in the chunk lists and fp8 filter ("output" in
// v0.2.x, "lm_head" in the Python config).
Result<TitanPlan> plan_torchtitan(const JobSpec& job, ExportFormat format, const char* output_module);

// Megatron-Core's CUDA_DEVICE_MAX_CONNECTIONS for the job (Megatron-LM d98e8a6 arguments.py
// validate_args: asserted 1 with tp or cp > 1 before Blackwell; with
// --overlap-moe-expert-parallel-comm it only warns, that overlap wanting more connections):
// the value ("" = leave unset) and why.
struct DeviceConnections {
    std::string value;
    std::string why;
};
DeviceConnections megatron_device_connections(const JobSpec& job);

// One file per target.
Result<ExportOutput> export_megatron(const JobSpec& job);          // megatron.cpp
Result<ExportOutput> export_deepspeed(const JobSpec& job);         // deepspeed.cpp
Result<ExportOutput> export_torchtitan_toml(const JobSpec& job);   // torchtitan_toml.cpp
Result<ExportOutput> export_torchtitan_python(const JobSpec& job); // torchtitan_python.cpp
Result<ExportOutput> export_nemo(const JobSpec& job);              // nemo.cpp

// nemo.cpp: the Megatron-LM export's `--flag value` pairs; and the Megatron-Bridge module with
// `extra_args` (Megatron-LM arguments a launch script adds; "${NAME}" values are read from
// the environment) translated too.
std::vector<std::pair<std::string, std::string>> split_megatron_args(const std::string& text);
Result<ExportOutput> nemo_module(const JobSpec& job, const std::vector<std::pair<std::string, std::string>>& extra_args);

}  // namespace ptd::export_internal
