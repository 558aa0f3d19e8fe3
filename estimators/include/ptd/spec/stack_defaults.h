// stack_defaults.h — what a training stack runs when the job does not say (issue 29 point 1).
// A user names the stack (training.framework) and perhaps the date of its code
// (training.framework_version), not every flag: the keys in StackKey that the job leaves
// unwritten take the stack's default at that date, for this job's layout, and the job
// remembers what was applied (JobSpec::Origin::stack_defaults) so that `ptd estimate` can say
// it. docs/job-spec.md "Stack defaults" has the table with each value's source.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ptd/spec/job_spec.h"

namespace ptd {

// The key's name as a job file writes it: "parallel.overlap_grad_reduce".
const char* stack_key_name(StackKey k);

// The stack in words, with its date when the job gives one: "NeMo 2 / Megatron-Bridge
// performance recipes", "Megatron-LM command line of 2021-06"; the job's form also names the
// performance recipe it matches without naming it (applied_perf_recipe).
std::string stack_label(const TrainingSpec& t);
std::string stack_label(const JobSpec& job);

// "2021-04" → 202104; "2021" → 202106 (a year alone is taken as its middle: no month is
// better than another); "2024-11-15" (a commit date) → 202411; "24.11" (an NGC container
// tag: NeMo 24.11) → 202411. nullopt when the text is none of these forms or the year is
// outside 2015–2100 or the month outside 1–12.
std::optional<int> parse_framework_version(std::string_view text);
std::string framework_version_text(int yyyymm);  // 202104 → "2021-04"; 0 → "today"

// Sets each StackKey the job did not write (origin.stack_keys_written) to its stack's
// default for the job's layout, and lists in origin.stack_defaults those that bear on this
// layout (e.g. overlap_grad_reduce only with more than one replica). Idempotent: it reads only
// keys it does not set, so derive_job_defaults may run it again after every edit.
void apply_stack_defaults(JobSpec& job);

// ttsplit: a torchtitan job with pp > 1 that writes no split (layers_per_stage, pipeline_layout,
// account_for_*) gets the one torchtitan builds (torchtitan_default_split, pipeline_layout.h)
// for its pp·vpp and date, listed in origin.stack_defaults where it is not the even split.
// Runs after the depth is settled (derive_job_defaults: start_unwritten_depth); the split is
// cleared again by apply_stack_defaults, so an edit of pp or vpp gets a new one.
void apply_torchtitan_split(JobSpec& job);

// ttmb: the pipeline micro-batch torchtitan runs when its job names none (pp > 1), from each
// data-parallel rank's `local_batch` (global_batch / dp) and the job's pp and vpp, by the date
// of its code: before 2025-02 local_batch / pp (pipelining_utils.py: n_microbatches defaults to
// the pipeline degree), then local_batch / (pp·vpp) (PR #781: one per stage), and from 2025-05
// 1 (PR #1073: pipeline_parallel_microbatch_size = 1). 0 where the count does not divide the
// local batch (torchtitan would not run it); `source` says which rule.
struct TorchtitanMicroBatch {
    int micro_batch = 0;
    std::string source;
};
TorchtitanMicroBatch torchtitan_pipeline_micro_batch(long long local_batch, int pp, int vpp, int framework_version);

// Whether the job's value of k is what its stack gives this layout (saving writes a key only
// where the job wrote it and it differs, so that load → save → load keeps the job).
bool stack_value_is_default(StackKey k, const JobSpec& job);

// recipe (issue 29 point 6): the stacks' named configurations PTD knows, as training.recipe
// names them, for the message that refuses `given`: the NeMo launcher's configurations and
// the Megatron-Bridge performance recipes of the model `given` starts with, or how many
// there are and where docs/job-spec.md lists them.
std::string known_recipes_text(std::string_view given);
// The stack a known recipe belongs to; nullopt for a name PTD does not know.
std::optional<Framework> recipe_framework(std::string_view recipe);

// mbrecipe (issue 29 point 1): a Megatron-Bridge performance recipe, by the name its function
// has in src/megatron/bridge/perf_recipes (NVIDIA-NeMo/Megatron-Bridge commit 067f987,
// 2026-08-22) without "_config": "qwen3_30b_a3b_pretrain_8gpu_b200_fp8mx". What it ran (the
// layout, for the note that names where a job differs) and the settings PTD models, each
// the effective value after the recipe's helpers (_benchmark_common and the like).
// How a performance recipe splits the layers over the pipeline chunks.
enum class RecipeSplit : uint8_t {
    megatron,            // Megatron-core's own even split
    embedding_and_loss,  // account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split
                         // (qwen3_235b_a22b_pretrain_config, which the Qwen3-235B recipes start from)
    deepseek_v3_map,     // set_deepseek_v3_pipeline_model_parallel_layout's map by (pp, vpp)
    layout_string,       // its own pipeline layout string (perf_recipe_layout), read into layers_per_stage
};

struct PerfRecipe {
    const char* name;
    const char* model;      // the model preset: "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3"
    const char* gpu;        // the GPU preset: "h100-sxm", "b200", "gb200"
    int gpus;
    Fp8Recipe fp8;          // bf16 → none; fp8_cs → current; fp8_mx → mxfp8
    int tp, pp, vpp, cp, ep, etp, mbs, gbs, seq;  // vpp, etp 0 = None
    MoeDispatcher dispatcher;
    bool a2a_overlap, shared_expert_overlap;
    CudaGraphImpl graphs;
    uint32_t graph_scope;   // CudaGraphScopeBit
    bool pad_to_capacity, tp_comm_overlap, router_fusion, permute_fusion, fp8_param_gather;
    RecipeSplit split;
    const char* file;       // "qwen/b200/qwen3_moe.py:285", under src/megatron/bridge/perf_recipes
    // recompute_granularity / recompute_modules after the recipe's chain (full: uniform, one
    // layer per checkpoint, what PTD's recompute = "full" runs).
    Recompute recompute;
    uint32_t recompute_modules;  // RecomputeModuleBit with recompute = selective; kRecomputeCoreAttn otherwise
};
std::span<const PerfRecipe> perf_recipes();
// The recipe's pipeline_model_parallel_layout string (pipeline_layout.h) where its split is
// RecipeSplit::layout_string; nullptr otherwise.
const char* perf_recipe_layout(const PerfRecipe& r);
const PerfRecipe* find_perf_recipe(std::string_view name);

// mbrecipe: what the keys in RecipeKeyBit take when the job leaves them unwritten — the
// job's performance recipe's values, else the plain defaults (no recipe: alltoall, no
// overlap, no CUDA graphs, no padding). The recipe's graph scope goes with its graph impl: a
// job that writes another impl (e.g. "none" to run without graphs) gets no scope from it.
struct RecipeKeyValues {
    MoeDispatcher dispatcher = MoeDispatcher::alltoall;
    bool a2a_overlap = false, shared_expert_overlap = false;
    CudaGraphImpl graphs = CudaGraphImpl::none;
    uint32_t graph_scope = 0;
    bool pad_to_capacity = false;
    bool account_for_embedding = false, account_for_loss = false;  // RecipeSplit::embedding_and_loss
    Recompute recompute = Recompute::none;
    uint32_t recompute_modules = kRecomputeCoreAttn;  // RecomputeModuleBit, with recompute = selective
};
// The recompute_modules a job running `recompute` takes unwritten: the recipe's where both the
// job and the recipe recompute selectively, else Megatron's default ["core_attn"].
uint32_t recipe_modules_for(Recompute recompute, const RecipeKeyValues& v);
RecipeKeyValues recipe_key_defaults(const JobSpec& job);

// mbrecipe: the performance recipe whose settings the job's unwritten keys take: the one it
// names, else — a NeMo / Megatron-Bridge MoE job of a model preset, naming no recipe, without
// a framework_version before 2026-08 — the one that ran exactly this job: its model preset,
// GPU preset, GPU count, FP8 recipe, tp, pp, vpp, cp, ep, expert_tp, micro and global batch and
// sequence length. A user who writes a published Megatron-Bridge run from its table gets the
// settings it ran with; nullptr when neither.
const PerfRecipe* applied_perf_recipe(const JobSpec& job);

// mbrecipe: for a NeMo / Megatron-Bridge MoE job that names no recipe, the performance recipe
// of its model preset on its GPU preset in its FP8 recipe (the one on as many GPUs, else the
// nearest count; release recipes before the _dev / _large_scale variants), for the note that
// says what naming it would set; nullptr when there is none, or the job names a recipe or
// matches one (applied_perf_recipe).
const PerfRecipe* suggested_perf_recipe(const JobSpec& job);

// mbrecipe: where the job's layout, model, GPUs or precision differ from what its performance
// recipe ran, one phrase each ("pp 4 (the recipe: 2)"); empty when they agree or the job
// names no performance recipe. The recipe's settings apply either way; the note says so.
std::vector<std::string> perf_recipe_differences(const JobSpec& job);

// The optimizer states' dtypes a job that leaves training.main_params_dtype, exp_avg_dtype
// and exp_avg_sq_dtype unwritten gets: its recipe's at framework_version, else fp32 each.
// `source` says where the recipe's values come from ("" when they are the plain default).
struct StateDtypeDefaults {
    StateDtype main_params = StateDtype::fp32, exp_avg = StateDtype::fp32, exp_avg_sq = StateDtype::fp32;
    const char* source = "";
};
StateDtypeDefaults recipe_state_dtypes(const TrainingSpec& t);

// fusedce2: Megatron-core's fused cross entropy (--cross-entropy-loss-fusion) exists from this
// YYYYMM on (commit 7b4a6d7); the Megatron-LM export and the NeMo defaults both follow it.
inline constexpr int kMegatronFusedLossSince = 202406;

// Whether the stack at that date defaults to fused (flash) attention where the GPU has it: no
// stack before FlashAttention (mid-2022); Megatron-LM before 2024 ran its own softmax unless
// --use-flash-attn was passed; DeepSpeed's Megatron fork took the flag in 2023.
bool stack_flash_attention(const TrainingSpec& t);
// The flash kernel the job runs (tritonfa): training.flash_attention_kernel where written, else
// ("by-date") the stack's at its date: FlashAttention-1 before flash-attn 2.0 (Jul 2023),
// FlashAttention-2 after; llm-foundry's MPT the Triton kernel (attn_impl "triton") until its
// v0.7.0 (Mar 2024). Never by_date.
FlashKernel stack_flash_kernel(const TrainingSpec& t);
// teflash: the month Transformer Engine began to prefer cuDNN's fused attention over the
// flash-attn package on Hopper (TE 1.2, 32db392, 2023-12-07: "Select FusedAttention on sm90 and
// FlashAttention on others for performance"); Megatron-LM's own layer before Transformer Engine
// became its default ran the flash-attn package too.
inline constexpr int kTeFusedAttentionSince = 202401;
// Whether the job's attention core is Transformer Engine's cuDNN fused attention (the rate
// flash_eff is fitted on): a Megatron-core stack (megatron, nemo) that names no kernel, dated
// kTeFusedAttentionSince or later or not at all. Otherwise a flash-attn kernel runs
// (FlashAttention-2, or -1 before Jul 2023; the torch stacks' SDPA), which on Hopper and later
// reaches fa2_hopper_fraction of cuDNN's rate.
bool stack_runs_cudnn_attention(const TrainingSpec& t);

}  // namespace ptd
