// published_run.h — one [[run]] of bench/accuracy/published_runs.toml turned into a JobSpec,
// shared by bench_accuracy (predicted vs published throughput) and bench_plan_published (the
// planner on each published run's model and cluster), so both read the file the same way.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ptd/model/estimate.h"
#include "ptd/spec/presets.h"

struct Run {
    std::string name, source, use, convention;
    std::string source_tag;     // the name up to its first '-': one tag per source (megatron21, dgxc2411, ...)
    std::string framework = "other";
    std::string generation;     // GPU generation: A100, H100, H200, B200, V100 or the preset name
    std::string skip;           // why the run cannot be modelled; empty = it can
    int line = 0;               // where the [[run]] starts, for messages
    ptd::JobSpec job;
    double published_step = 0;  // seconds, from the source's own figure
    std::string published_what; // what the source stated
    double source_flops = 0;    // FLOPs per iteration as the source counts them

    // Run keys kept as the file states them (unset stays distinguishable where the stack's
    // default depends on the framework); apply_run_to_job() turns them into the job's fields.
    std::string fp8 = "none";               // none | delayed | current | tensorwise | rowwise | mxfp8 (blackwell)
    std::string cluster;                    // dgx-a100 | dgx-h100 | hgx-h200 | dgx-b200 | gb200-nvl72; "" = none named
    std::string schedule;                   // 1f1b | interleaved | zb-h1 | dualpipe; "" = not stated
    std::optional<bool> overlap_grad_reduce, overlap_param_gather, tp_comm_overlap;
    bool async_tp = false;                  // tt405: PyTorch's micro-pipelined TP (torchtitan enable_async_tensor_parallel)
    std::optional<bool> grad_reduce_in_fp32;  // oomnemo: unstated = the stack's default (apply_run_to_job)
    int activation_offload_layers = 0;        // oomnemo: Megatron-core cpu_offloading_num_layers
    std::optional<bool> fp8_param_gather;     // oom4: unstated = the stack's default (apply_run_to_job)
    std::optional<bool> overlap_p2p_comm;     // blackwell: unstated = the stack's default (apply_run_to_job)
    // stackdef (issue 29 point 1): the StackKey keys the run states (one bit each); the others
    // take the stack's default at framework_version, as a job file that leaves them out does.
    uint32_t stated_stack_keys = 0;
    bool flash_attention_stated = false;
    int framework_version = 0;              // YYYYMM: the run's framework_version, else its source's date
    bool fsdp = false;                      // FSDP / ZeRO-3 (zero = 3)
    bool torch_compile = false;
    bool compiled_loss = false;             // ttmem: the loss ran under torch.compile (run_file.h)
    std::string cross_entropy;              // fusedce2: Megatron's loss as the source ran it ("" = the stack's default)
    bool memory_efficient_norm = false;     // menorm: estimate.memory_efficient_norm
    bool deallocate_pipeline_inputs = false;  // Llama 3 §3.3.2: estimate.deallocate_pipeline_inputs
    int nics_per_node = 0;                  // 0 = not stated
    double nic_gbps = 0;                    // GB/s per NIC; 0 = not stated
    double memory_gib_measured = 0;         // 0 = the source reports no memory
    std::string memory_kind;                // max_reserved | max_allocated | nvidia-smi
    double predicted_step = 0;              // filled by predict_all()
    int micro_batches = 0;                  // per step and replica, filled by predict_all() (--line)
    double predicted_memory_gib = 0;        // in the source's allocator view (memory rows only)
    double predicted_total_gib = 0;         // worst stage, everything counted
    double capacity_gib = 0;                // l405: usable memory of the GPU the run used
    bool predicted_fits = true;             // l405: the estimate's fit on that GPU
};

// FLOPs per iteration the way each source counts them.
double source_flops(const Run& r, const std::string& convention);
// GPU generation of a preset name: A100, H100, H200, B200, V100 or the name itself.
std::string generation_of(const std::string& gpu);
// The group whose calibration runs are capped at ten (issue 15: A100, H100, H200/B200).
std::string calibration_group(const std::string& generation);
// Every [[run]] of `path`, in file order; a bad file stops the program with "file:line: message"
// and exit status 2. Runs that cannot be modelled carry the reason in Run::skip.
// `leave_out` (bench_accuracy --leave-out): keys of stack_detail_run_keys() read as if no run
// stated them, so each run takes what its stack's defaults (and recipe) give instead.
std::vector<Run> load_runs(const std::string& path, const ptd::PresetCatalog& presets,
                           const std::vector<std::string>& leave_out = {});
// The run keys that say how the stack ran rather than what was trained (--leave-out's choices).
const std::vector<std::string>& stack_detail_run_keys();
// "tp·pp·dp" with c = context parallel, v = virtual stages, e = expert parallel, z3 = FSDP / ZeRO-3.
std::string layout_of(const Run& r);
// The groups bench_accuracy breaks the error down by besides generation, source and framework
// (issue 29's method). Size band by total parameters (MoE: every expert counted): <5B, 5-30B,
// 30-100B, >=100B. Scale band by GPUs: <=64, 65-512, 513-4096, >4096.
std::string size_band_of(const Run& r);
std::string scale_band_of(const Run& r);
// The features a run uses, each one group (a run may be in several): fp8 (any recipe, MXFP8
// included), moe, context-parallel, interleaved-pp, fsdp-zero3, sequence-parallel (tp > 1),
// gqa (kv_heads < heads, MLA not counted), recompute-full, recompute-selective.
std::vector<std::string> features_of(const Run& r);
