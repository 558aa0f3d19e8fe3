// stack_defaults.cpp — each stack's defaults for the StackKey keys, by the date of its code,
// and applying them to the keys a job left unwritten (issue 29 point 1). Sources, per stack:
//  - Megatron-LM (framework "megatron"): its command-line defaults, megatron/training/
//    arguments.py. --use-distributed-optimizer, --overlap-grad-reduce (Sep 2023) and
//    --overlap-param-gather are off unless passed; bf16 keeps and reduces fp32 main grads
//    (--accumulate-allreduce-grads-in-fp32 forced for bf16; --grad-reduce-in-bf16 to change it);
//    the scatter/gather pipeline send on from Feb 2021 (p2p_communication.py) until
//    Megatron-Core dropped it (Mar 2023); asynchronous TP all-reduce in the column-parallel
//    backward from Sep 2021 (--no-async-tensor-model-parallel-allreduce); --overlap-p2p-
//    communication for the interleaved schedule opt-in from Jun 2023, on by default from Oct
//    2023 (commits f9283c5, 4eeff55); Transformer Engine's fused
//    attention the default layer implementation (--transformer-impl transformer_engine) from
//    2024, before which the local softmax ran unless --use-flash-attn.
//  - NeMo 2 / Megatron-Bridge (framework "nemo"): the performance recipes NVIDIA publishes its
//    figures with — NeMo nemo/collections/llm/recipes/*.py and scripts/performance/llm/*.py,
//    Megatron-Bridge scripts/performance/configs: distributed optimizer
//    (distributed_fused_adam / OptimizerConfig use_distributed_optimizer = True),
//    DistributedDataParallelConfig(overlap_grad_reduce = True, overlap_param_gather = True),
//    MegatronCommOverlapCallback(tp_comm_overlap = True) in every recipe with TP (userbuffers
//    need sequence parallelism), overlap_p2p_comm for the interleaved schedule, bf16 gradient
//    reduction ("recipe.trainer.plugins.grad_reduce_in_fp32 = False") and, with FP8,
//    bf16_with_fp8_mixed's fp8_param_gather = True.
//  - DeepSpeed (framework "deepspeed"): DeepSpeedZeroConfig overlap_comm defaults to True for
//    stage 3 only (deepspeed/runtime/zero/config.py); without ZeRO-3 the engine reduces after
//    the backward.
//  - torchtitan / PyTorch FSDP ("torchtitan", "pytorch-fsdp"): DDP and FSDP2 always overlap
//    the gradient reduction with the backward and prefetch the parameter gathers; the loss is
//    F.cross_entropy on fp32 logits, compiled with training.compile in torchtitan from 2025
//    (components/loss.py); torchtitan's "selective" is op-level selective checkpointing.
// recipe (issue 29 point 6): a stack's named configuration for one model (training.recipe)
// sets the keys it states that the stack's defaults do not give; kRecipes lists each with its
// source.
#include "ptd/spec/stack_defaults.h"
#include "ptd/spec/pipeline_layout.h"

#include "ptd/spec/presets.h"

#include <cassert>
#include <charconv>
#include <cmath>
#include <iterator>

namespace ptd {

const char* stack_key_name(StackKey k) {
    static const char* const names[] = {"parallel.sequence_parallel",
                                        "parallel.distributed_optimizer",
                                        "parallel.overlap_grad_reduce",
                                        "parallel.overlap_param_gather",
                                        "parallel.tp_comm_overlap",
                                        "parallel.grad_reduce_in_fp32",
                                        "parallel.overlap_p2p_comm",
                                        "parallel.scatter_gather_tensors_in_pipeline",
                                        "parallel.async_tensor_model_parallel_allreduce",
                                        "parallel.recompute_style",
                                        "training.fp8_param_gather",
                                        "estimate.cross_entropy",
                                        "parallel.moe_permute_fusion",
                                        "parallel.moe_router_fusion"};
    static_assert(std::size(names) == (size_t)StackKey::count);
    return names[(int)k];
}

std::optional<int> parse_framework_version(std::string_view text) {
    auto number = [](std::string_view s, int& out) {
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
        return ec == std::errc() && end == s.data() + s.size();
    };
    int year = 0, month = 6, day = 1;
    if (text.size() == 4) {
        if (!number(text, year)) return std::nullopt;
    } else if (text.size() == 7 && text[4] == '-') {
        if (!number(text.substr(0, 4), year) || !number(text.substr(5, 2), month)) return std::nullopt;
    } else if (text.size() == 10 && text[4] == '-' && text[7] == '-') {
        // A commit's date, as `git log` prints it: its month.
        if (!number(text.substr(0, 4), year) || !number(text.substr(5, 2), month) || !number(text.substr(8, 2), day) ||
            day < 1 || day > 31)
            return std::nullopt;
    } else if (text.size() == 5 && text[2] == '.') {
        // An NGC container tag (NeMo, the PyTorch containers Megatron-LM runs in): "24.11" is
        // the release of November 2024. Version numbers (DeepSpeed 0.14, PyTorch 2.4) have a
        // first field below 15 and are refused below.
        if (!number(text.substr(0, 2), year) || !number(text.substr(3, 2), month)) return std::nullopt;
        year += 2000;
    } else {
        return std::nullopt;
    }
    if (year < 2015 || year > 2100 || month < 1 || month > 12) return std::nullopt;
    return year * 100 + month;
}

std::string framework_version_text(int yyyymm) {
    if (yyyymm <= 0) return "today";
    const int month = yyyymm % 100;
    return std::to_string(yyyymm / 100) + (month < 10 ? "-0" : "-") + std::to_string(month);
}

// recipe: the stacks' named configurations PTD knows.
struct Recipe {
    const char* name;
    Framework framework;
    const char* source;  // where the configuration lives, as the stack line names it
};
constexpr Recipe kRecipes[] = {
    // NeMo-Framework-Launcher launcher_scripts/conf/training/nemotron/nemotron_340b.yaml, the
    // configuration NVIDIA's dgxc-benchmarking Nemotron-4 340B runs start from (README_340b.md
    // links it as "the default configuration for Nemotron 340b").
    {"nemotron/nemotron_340b", Framework::nemo, "NeMo-Framework-Launcher's training/nemotron/nemotron_340b.yaml"},
};

static const Recipe* find_recipe(std::string_view name) {
    for (const Recipe& r : kRecipes)
        if (name == r.name) return &r;
    return nullptr;
}

const PerfRecipe* find_perf_recipe(std::string_view name) {
    for (const PerfRecipe& r : perf_recipes())
        if (name == r.name) return &r;
    return nullptr;
}

// mbrecipe: "Megatron-Bridge's performance recipe qwen3_30b_a3b_pretrain_8gpu_b200_fp8mx
// (perf_recipes/qwen/b200/qwen3_moe.py:285 at 067f987)".
// `matched`: the job does not name it but is the very job it ran (applied_perf_recipe).
static std::string perf_recipe_source(const PerfRecipe& r, bool matched = false) {
    return std::string("Megatron-Bridge's performance recipe ") + r.name + " (perf_recipes/" + r.file + " at 067f987)" +
           (matched ? ", whose model, GPUs, precision, layout and batch this job has" : "");
}

// Whether the stack's code at the job's date is older than yyyymm (a job without a date runs
// today's code).
static bool before(const TrainingSpec& t, int yyyymm) { return t.framework_version > 0 && t.framework_version < yyyymm; }

static std::string stack_label(const TrainingSpec& t, const PerfRecipe* pr);
std::string stack_label(const TrainingSpec& t) { return stack_label(t, find_perf_recipe(t.recipe)); }
std::string stack_label(const JobSpec& job) { return stack_label(job.training, applied_perf_recipe(job)); }

static std::string stack_label(const TrainingSpec& t, const PerfRecipe* pr) {
    // A named configuration gives the keys it states; the stack's own defaults give the rest.
    const Recipe* r = find_recipe(t.recipe);
    const std::string when = (t.framework_version > 0 ? " of " + framework_version_text(t.framework_version) : ", today") +
                             (r ? std::string(", and ") + r->source + " for the keys it states" : "") +
                             (pr ? ", and " + perf_recipe_source(*pr, t.recipe.empty()) + " for the keys it states" : "");
    switch (t.framework) {
        case Framework::megatron: return "Megatron-LM command line" + when;
        case Framework::nemo:
            // fp8pg: NeMo 2's recipes date from Sep 2024; a job dated before runs NeMo 1.x's yamls.
            return (before(t, 202409) ? "NeMo 1.x (Megatron-core, the launcher's yamls)" : "NeMo 2 / Megatron-Bridge performance recipes") + when;
        case Framework::deepspeed: return "DeepSpeed config defaults" + when;
        case Framework::torchtitan: return "torchtitan" + when;
        case Framework::pytorch_fsdp: return "PyTorch FSDP / DDP" + when;
        case Framework::llm_foundry: return "llm-foundry (Composer, PyTorch FSDP)" + when;
    }
    return "";
}

// Megatron-Bridge's performance configs (its first release, v0.1.0rc4): the NeMo stack's
// defaults from this date on are theirs (moe_router_fusion, Transformer Engine's loss).
static constexpr int kBridgePerfConfigsSince = 202509;

// fusedce2: the fused loss a Megatron-core stack runs when it fuses: Transformer Engine's under
// Megatron-Bridge's performance configs, Megatron-core's native one otherwise.
static CrossEntropyImpl fused_megatron_loss(const TrainingSpec& t) {
    return t.framework == Framework::nemo && !before(t, kBridgePerfConfigsSince) ? CrossEntropyImpl::te
                                                                                  : CrossEntropyImpl::megatron_fused;
}

FlashKernel stack_flash_kernel(const TrainingSpec& t) {
    if (t.flash_kernel != FlashKernel::by_date) return t.flash_kernel;
    // llm-foundry: MPT's attn_config attn_impl defaults to "triton" (flash-attn 1.x's Triton
    // kernel, flash_attn_triton.py) until v0.7.0 (7f0fdae, Mar 2024), "flash" after
    // (llmfoundry/models/layers/blocks.py attn_config_defaults, then models/utils/config_defaults.py);
    // its benchmark sweep passes the same default (scripts/train/benchmarking/submit_benchmarks.py
    // --attn_impl "triton" at 061f2c7).
    if (t.framework == Framework::llm_foundry) return before(t, 202404) ? FlashKernel::triton : FlashKernel::flash_attn_2;
    return before(t, 202307) ? FlashKernel::flash_attn_1 : FlashKernel::flash_attn_2;  // FlashAttention-2: Jul 2023
}

bool stack_runs_cudnn_attention(const TrainingSpec& t) {
    return runs_megatron_core(t.framework) && t.flash_kernel == FlashKernel::by_date && !before(t, kTeFusedAttentionSince);
}

bool stack_flash_attention(const TrainingSpec& t) {
    if (before(t, 202207)) return false;  // FlashAttention was published in May 2022 (Dao et al., arXiv 2205.14135)
    if (t.framework == Framework::megatron) return !before(t, 202401);
    if (t.framework == Framework::deepspeed) return !before(t, 202307);  // Megatron-DeepSpeed's --use-flash-attn (2023)
    return true;
}

std::string known_recipes_text(std::string_view given) {
    std::string out;
    for (const Recipe& r : kRecipes)
        out += std::string(out.empty() ? "" : ", ") + "\"" + r.name + "\" (training.framework = \"" +
               to_string(r.framework) + "\")";
    // mbrecipe: the performance recipes are many; name those of the model `given` names (the
    // text before "_pretrain"), else say how many there are and where they are listed.
    const size_t cut = given.find("_pretrain");
    const std::string_view model = given.substr(0, cut);
    std::string same;
    int count = 0;
    for (const PerfRecipe& r : perf_recipes()) {
        ++count;
        const std::string_view name = r.name;
        if (cut != std::string_view::npos && name.substr(0, name.find("_pretrain")) == model)
            same += std::string(same.empty() ? "" : ", ") + "\"" + r.name + "\"";
    }
    if (!same.empty()) return out + ", or one of Megatron-Bridge's performance recipes of that model (training.framework = \"nemo\"): " + same;
    return out + ", or one of the " + std::to_string(count) +
           " Megatron-Bridge performance recipes docs/job-spec.md lists (training.framework = \"nemo\"), e.g. \"" +
           perf_recipes().front().name + "\"";
}

std::optional<Framework> recipe_framework(std::string_view recipe) {
    if (const Recipe* r = find_recipe(recipe)) return r->framework;
    if (find_perf_recipe(recipe)) return Framework::nemo;
    return std::nullopt;
}

// What the keys take unwritten, given the job's applied recipe r (nullptr: the plain defaults).
static RecipeKeyValues recipe_key_values(const JobSpec& job, const PerfRecipe* r) {
    RecipeKeyValues v;
    if (r) {
        v.dispatcher = r->dispatcher;
        v.a2a_overlap = r->a2a_overlap;
        v.shared_expert_overlap = r->shared_expert_overlap;
        v.graphs = r->graphs;
        v.graph_scope = r->graph_scope;
        v.pad_to_capacity = r->pad_to_capacity;
        if ((job.origin.recipe_keys_written & kRecipeCudaGraphImpl) && job.parallel.cuda_graph_impl != r->graphs)
            v.graph_scope = 0;
        v.account_for_embedding = v.account_for_loss = r->split == RecipeSplit::embedding_and_loss;
        v.recompute = r->recompute;
        v.recompute_modules = r->recompute_modules;
    }
    return v;
}

uint32_t recipe_modules_for(Recompute recompute, const RecipeKeyValues& v) {
    return recompute == Recompute::selective && v.recompute == Recompute::selective ? v.recompute_modules
                                                                                   : (uint32_t)kRecomputeCoreAttn;
}

RecipeKeyValues recipe_key_defaults(const JobSpec& job) { return recipe_key_values(job, applied_perf_recipe(job)); }

const PerfRecipe* suggested_perf_recipe(const JobSpec& job) {
    const TrainingSpec& t = job.training;
    if (t.framework != Framework::nemo || !t.recipe.empty() || job.model.experts < 2 || applied_perf_recipe(job))
        return nullptr;
    const PerfRecipe* best = nullptr;
    double best_score = 0;
    for (const PerfRecipe& r : perf_recipes()) {
        if (job.origin.model_preset != r.model || job.origin.gpu_preset != r.gpu || t.fp8 != r.fp8) continue;
        const std::string_view name = r.name;
        const bool variant = name.ends_with("_dev") || name.ends_with("_large_scale");
        const double score = std::abs(std::log((double)job.world_size() / r.gpus)) + (variant ? 100.0 : 0.0);
        if (!best || score < best_score) best = &r, best_score = score;
    }
    return best;
}

// Where the job differs from what recipe r ran, one phrase each.
static std::vector<std::string> differences_from(const JobSpec& job, const PerfRecipe& r) {
    std::vector<std::string> out;
    const ParallelSpec& p = job.parallel;
    auto differ = [&](const char* what, long long mine, long long theirs) {
        if (mine != theirs)
            out.push_back(std::string(what) + " " + std::to_string(mine) + " (the recipe: " + std::to_string(theirs) + ")");
    };
    auto differ_text = [&](const char* what, const std::string& mine, const std::string& theirs) {
        if (mine != theirs) out.push_back(std::string(what) + " \"" + mine + "\" (the recipe: \"" + theirs + "\")");
    };
    // A job that writes its model or GPU without a preset is taken as the recipe's.
    if (!job.origin.model_preset.empty()) differ_text("model", job.origin.model_preset, r.model);
    if (!job.origin.gpu_preset.empty()) differ_text("gpu", job.origin.gpu_preset, r.gpu);
    differ("GPUs", job.world_size(), r.gpus);
    differ_text("training.fp8", to_string(job.training.fp8), to_string(r.fp8));
    differ("tp", p.tp, r.tp);
    differ("pp", p.pp, r.pp);
    differ("vpp", p.vpp, std::max(1, r.vpp));
    differ("cp", p.cp, r.cp);
    differ("ep", p.ep, r.ep);
    // Megatron-core's expert_tensor_parallel_size, unset, is the TP size (PTD's expert_tp 0 too).
    differ("expert_tp", p.expert_tp > 0 ? p.expert_tp : p.tp, r.etp > 0 ? r.etp : r.tp);
    differ("micro_batch", job.training.micro_batch, r.mbs);
    differ("global_batch", job.training.global_batch, r.gbs);
    differ("seq_len", job.model.seq_len, r.seq);
    // The table is the recipes of 2026-08; an earlier release's recipe may have set others.
    if (before(job.training, 202608))
        out.push_back("framework_version " + framework_version_text(job.training.framework_version) +
                      " (the recipe: as Megatron-Bridge has it in 2026-08)");
    return out;
}

std::vector<std::string> perf_recipe_differences(const JobSpec& job) {
    const PerfRecipe* r = find_perf_recipe(job.training.recipe);
    return r ? differences_from(job, *r) : std::vector<std::string>{};
}

// mbrecipe: the decoder layers of each pipeline chunk that Megatron-Bridge's DeepSeek-V3 recipes
// lay out (recipes/deepseek/h100/deepseek_v3.py _get_deepseek_v3_pipeline_layout, 067f987:
// the embedding with the first chunk, the MTP layers and the loss with the last), for the
// (pp, vpp) pairs its map has: 4 chunks 16/16/16/13 (pp 4), 8 chunks 8 × 7 and 5 (pp 8, or
// pp 4 × vpp 2), 16 chunks 4 × 15 and 1 (pp 16, 8 × 2, 4 × 4). Empty for a recipe that does
// not use the map (RecipeSplit), another layer count or another pair (the map has none: the
// recipe's code falls back to Megatron-core's own split).
static std::vector<int> deepseek_v3_layers_per_chunk(const JobSpec& job, const PerfRecipe& r) {
    if (r.split != RecipeSplit::deepseek_v3_map || job.model.layers != 61) return {};
    const int pp = job.parallel.pp, v = std::max(1, job.parallel.vpp);
    auto chunks = [](int each, int n, int last) {
        std::vector<int> out((size_t)n - 1, each);
        out.push_back(last);
        return out;
    };
    if (pp == 4 && v == 1) return chunks(16, 4, 13);
    if ((pp == 8 && v == 1) || (pp == 4 && v == 2)) return chunks(8, 8, 5);
    if ((pp == 16 && v == 1) || (pp == 8 && v == 2) || (pp == 4 && v == 4)) return chunks(4, 16, 1);
    return {};
}

// mbrecipe: the transformer layers of each chunk in recipe r's own layout string
// (perf_recipe_layout), where the job's pp, vpp, layers and MTP layers are the string's; empty
// otherwise (the job keeps Megatron-core's split, or writes one). `how` names the string.
static std::vector<int> recipe_layout_split(const JobSpec& job, const PerfRecipe& r, std::string& how) {
    const char* text = perf_recipe_layout(r);
    if (!text) return {};
    const auto layout = parse_pipeline_layout(text);
    assert(layout && "a recipe's layout string parses");
    const ParallelSpec& p = job.parallel;
    if (!layout || !check_pipeline_layout(*layout, p.pp, p.vpp, job.model.layers, job.model.mtp_layers)) return {};
    how = std::string(": pipeline_model_parallel_layout \"") + text + "\"";
    return layout_layers_per_chunk(*layout);
}

// Whether the job trains recipe r's model: it names the preset, or (no preset) writes the
// preset's shape — what a user who copies a model card's numbers does.
static bool same_model(const JobSpec& job, const PerfRecipe& r) {
    if (!job.origin.model_preset.empty()) return job.origin.model_preset == r.model;
    const ModelSpec* preset = embedded_presets().find_model(r.model);
    const ModelSpec& m = job.model;
    return preset && m.layers == preset->layers && m.hidden == preset->hidden && m.heads == preset->heads &&
           m.kv_heads == preset->kv_heads && m.experts == preset->experts && m.top_k == preset->top_k &&
           m.expert_ffn_hidden() == preset->expert_ffn_hidden() && m.vocab == preset->vocab;
}

const PerfRecipe* applied_perf_recipe(const JobSpec& job) {
    const TrainingSpec& t = job.training;
    if (!t.recipe.empty()) return find_perf_recipe(t.recipe);
    if (t.framework != Framework::nemo || job.model.experts < 2) return nullptr;
    for (const PerfRecipe& r : perf_recipes())
        if (job.cluster.gpu.name == r.gpu && same_model(job, r) && differences_from(job, r).empty()) return &r;
    return nullptr;
}

StateDtypeDefaults recipe_state_dtypes(const TrainingSpec& t) {
    // nemotron_340b.yaml until launcher commit 3dd35614 (2024-12-05, "switch to mcore's
    // optimizer"): optim distributed_fused_adam with dtype bf16. NeMo 1.x
    // (MegatronBaseModel.setup_optimization, NeMo 24.07 - 24.12) hands that dtype to Apex's
    // DistributedFusedAdam as the moments' dtype and stores no master copy when it equals the
    // bf16 model's (store_params = False), a bf16 one with fp8_params (store_params = True).
    // From that commit the yaml names mcore_distributed_optim, whose OptimizerConfig NeMo builds
    // without the dtype (ModelPT.setup_megatron_optimization): fp32 states, the stack's default.
    if (t.recipe == "nemotron/nemotron_340b" && t.framework == Framework::nemo && t.precision == Precision::bf16 &&
        before(t, 202412))
        return {t.fp8_param_gather ? StateDtype::bf16 : StateDtype::none, StateDtype::bf16, StateDtype::bf16,
                "NeMo-Framework-Launcher training/nemotron/nemotron_340b.yaml before Dec 2024: Apex "
                "distributed_fused_adam with dtype bf16, a bf16 master only with fp8_params"};
    return {};
}

namespace {

struct Default {
    bool value = false;
    std::string source;
};

// One key's default for this job; `p` holds the job's own layout (and the keys set before
// this one, in StackKey order, so later keys may depend on earlier ones).
// `recipe`: the job's applied_perf_recipe, found once by the caller.
Default default_for(StackKey k, const JobSpec& job, const PerfRecipe* recipe) {
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    const Framework f = t.framework;
    const bool nemo = f == Framework::nemo, megatron = f == Framework::megatron;
    const bool torch_stack = runs_pytorch_modules(f);
    const bool sharded = p.zero >= 1 || p.distributed_optimizer;
    // mbrecipe: a performance recipe states these four itself.
    if (const PerfRecipe* r = recipe; r && nemo) {
        const std::string source = perf_recipe_source(*r, t.recipe.empty());
        if (k == StackKey::tp_comm_overlap) return {r->tp_comm_overlap && p.tp > 1 && p.sequence_parallel, source};
        if (k == StackKey::moe_router_fusion && job.model.experts > 1) return {r->router_fusion, source};
        if (k == StackKey::moe_permute_fusion && job.model.experts > 1) return {r->permute_fusion, source};
        if (k == StackKey::fp8_param_gather && t.fp8 != Fp8Recipe::none) return {r->fp8_param_gather, source};
    }
    switch (k) {
        case StackKey::sequence_parallel: {
            // spdef: the stacks whose tensor parallelism shards the sequence between its regions.
            if (p.tp <= 1) return {false, "no tensor parallelism to shard the sequence over"};
            const bool shards = job.model.seq_len % p.tp == 0;
            const std::string cannot = "seq_len " + std::to_string(job.model.seq_len) + " is not divisible by tp " +
                                       std::to_string(p.tp) + ": sequence parallelism cannot split it";
            if (nemo)
                return {shards, shards ? "Megatron-Bridge's performance scripts set sequence_parallel = (tensor_model_parallel_size > 1), "
                                         "as NeMo's GPT-3, Llama, Nemotron and Mixtral recipes do"
                                       : cannot};
            if (f == Framework::torchtitan)
                return {shards, shards ? "torchtitan's tensor parallelism shards the norms and the residual stream along the "
                                         "sequence (parallelize_llama.py apply_tp: SequenceParallel)"
                                       : cannot};
            if (megatron)
                return {false, before(t, 202205) ? "no --sequence-parallel before May 2022 (Korthikanti et al. 2022)"
                                                 : "--sequence-parallel is off unless passed"};
            return {false, "this stack has no sequence parallelism of Megatron's kind"};
        }
        case StackKey::distributed_optimizer:
            if (nemo) return {p.zero == 0, "the recipes' distributed optimizer (use_distributed_optimizer = True)"};
            return {false, megatron ? "--use-distributed-optimizer is off unless passed" : "Megatron's distributed optimizer is not this stack's"};
        case StackKey::overlap_grad_reduce:
            if (nemo) return {true, "DistributedDataParallelConfig(overlap_grad_reduce = True)"};
            if (torch_stack) return {true, "DDP / FSDP2 reduce each bucket as its gradients are ready"};
            if (f == Framework::deepspeed) return {p.zero == 3, "overlap_comm defaults to true for ZeRO stage 3 only"};
            return {false, before(t, 202309) ? "no --overlap-grad-reduce before Sep 2023: the reduction follows the backward"
                                             : "--overlap-grad-reduce is off unless passed"};
        case StackKey::overlap_param_gather:
            if (nemo) return {sharded && p.overlap_grad_reduce, "DistributedDataParallelConfig(overlap_param_gather = True)"};
            if (torch_stack) return {sharded && (p.overlap_grad_reduce || p.zero == 3), "FSDP2 prefetches the next module's all-gather"};
            if (f == Framework::deepspeed) return {p.zero == 3, "ZeRO-3 prefetches parameters (overlap_comm)"};
            return {false, "--overlap-param-gather is off unless passed"};
        case StackKey::tp_comm_overlap:
            if (nemo)
                return {p.tp > 1 && p.sequence_parallel && !p.async_tp,
                        "MegatronCommOverlapCallback(tp_comm_overlap = True) with TP and sequence parallelism"};
            return {false, megatron ? "--tp-comm-overlap is off unless passed" : "Transformer Engine's userbuffers are not this stack's"};
        case StackKey::grad_reduce_in_fp32:
            if (nemo) return {false, "grad_reduce_in_fp32 = False: bf16 gradient buffer and reduction"};
            // fsdpreduce: FSDP's reduce-scatter runs in the stack's reduce dtype. torchtitan's
            // training.mixed_precision_reduce is "float32" (its only choice, config_manager.py),
            // which FSDP2's MixedPrecisionPolicy(reduce_dtype) casts the gradients to first; PyTorch
            // FSDP's MixedPrecision with reduce_dtype unset reduces in param_dtype, what Composer's
            // mixed_precision DEFAULT and PURE give (llm-foundry; composer mosaic_fsdp_utils.py
            // get_mixed_precision, v0.16.3).
            if (f == Framework::torchtitan && p.zero == 3)
                return {true, "FSDP2 reduce-scatters in mixed_precision_reduce = \"float32\""};
            if (runs_pytorch_fsdp(f) && p.zero == 3)
                return {false, "FSDP's MixedPrecision without reduce_dtype reduces in param_dtype (bf16)"};
            return {true, megatron ? "bf16 keeps fp32 main grads unless --grad-reduce-in-bf16" : "fp32 gradient reduction"};
        case StackKey::overlap_p2p_comm:
            // Megatron-LM: the flag from 2023-05-31 (f9283c5, opt-in), the default from 2023-10-12
            // (4eeff55); before, every exchange is one batched send / receive and a device sync.
            if (megatron && before(t, 202310))
                return {false, "--overlap-p2p-communication is the default from Oct 2023 (opt-in from Jun 2023): every pipeline hop exposed"};
            return {true, nemo ? "overlap_p2p_comm with the interleaved schedule" : "--overlap-p2p-communication with the interleaved schedule"};
        case StackKey::scatter_gather_tensors_in_pipeline:
            if (megatron && t.framework_version >= 202102 && before(t, 202303))
                return {true, "scatter/gather pipeline sends (Feb 2021 until Megatron-Core, Mar 2023)"};
            return {false, megatron ? "Megatron-Core has no scatter/gather pipeline send" : "Megatron-LM's scatter/gather send is not this stack's"};
        case StackKey::async_tensor_model_parallel_allreduce:
            if (megatron && before(t, 202109)) return {false, "no asynchronous TP all-reduce before Sep 2021"};
            return {true, "the input gradient's TP all-reduce beside the weight-gradient GEMM"};
        case StackKey::recompute_style:
            return {f == Framework::torchtitan && p.recompute_modules == kRecomputeCoreAttn,
                    f == Framework::torchtitan ? "torchtitan's selective is op-level (selective_ac_option = \"op\")"
                                               : "Megatron's selective recompute (the attention core)"};
        case StackKey::fp8_param_gather:
            // fp8pg: NeMo 1.x's model config leaves fp8_params False (NeMo-Framework-Launcher's
            // training yamls set it only for MLPerf, e.g. gpt3/175b_mlperf.yaml); NeMo 2's FP8
            // precision recipes set it from 2024-09 (NeMo 3e251a0 "FP8 plugin recipes", 2024-09-19).
            // NeMo had no FP8 parameters at all before 2023-11 (1abc577, TE FP8 params with Apex
            // distributed Adam, 2023-11-09).
            if (nemo && before(t, 202409))
                return {false, "NeMo 1.x's fp8_params defaults to False; NeMo 2's FP8 recipes set it from Sep 2024"};
            if (nemo && (t.fp8 == Fp8Recipe::delayed || t.fp8 == Fp8Recipe::current || t.fp8 == Fp8Recipe::mxfp8))
                return {true, "the FP8 mixed-precision recipes set fp8_param_gather = True"};
            return {false, "16-bit parameter all-gather"};
        case StackKey::cross_entropy:
            // llm-foundry: ComposerMPTCausalLM's loss_fn defaults to "fused_crossentropy"
            // (flash-attn's fused kernel; llmfoundry/models/mpt/modeling_mpt.py, from 061f2c7 in
            // Oct 2023 to 8c8dd48 today); set_value gives the fused loss.
            if (f == Framework::llm_foundry) return {true, "loss_fn \"fused_crossentropy\" (flash-attn's fused cross entropy)"};
            if (f == Framework::torchtitan)
                return {t.torch_compile && !before(t, 202501),
                        t.torch_compile && before(t, 202501) ? "F.cross_entropy on fp32 logits, not compiled before 2025"
                                                             : "F.cross_entropy on fp32 logits (compiled with training.compile)"};
            if (torch_stack) return {false, "F.cross_entropy on fp32 logits"};
            // fusedce2: true is the stack's fused loss (set_value picks which by date). NeMo 2's
            // GPTConfig sets cross_entropy_loss_fusion = True
            // (nemo/collections/llm/gpt/model/base.py; its recipes turn it off for LoRA only), as
            // the NeMo 1 performance yamls did (dgxc-benchmarking v24.11 llama3.1 / nemotron:
            // "cross_entropy_loss_fusion: true", handed to Megatron-core's TransformerConfig by
            // name); Megatron-Bridge's performance configs add cross_entropy_fusion_impl "te"
            // from their first release (v0.1.0rc4, 25.09). Megatron-LM's --cross-entropy-loss-
            // fusion is off unless passed, and Megatron-DeepSpeed and GPT-NeoX run Megatron's
            // unfused loss.
            if (nemo && before(t, kMegatronFusedLossSince))
                return {false, "no fused cross entropy in Megatron-core before June 2024 (commit 7b4a6d7)"};
            if (nemo)
                return {true, fused_megatron_loss(t) == CrossEntropyImpl::te
                                  ? "Megatron-Bridge's performance configs: cross_entropy_fusion_impl = \"te\" (Transformer Engine's fused loss)"
                                  : "NeMo 2's GPTConfig: cross_entropy_loss_fusion = True (Megatron-core's fused native loss)"};
            return {false, megatron ? "--cross-entropy-loss-fusion is off unless passed (Megatron's unfused vocab-parallel loss)"
                                    : "Megatron's unfused vocab-parallel cross entropy"};
        case StackKey::moe_permute_fusion:
            // moeperm: Transformer Engine's fused permutation (TE PR 936, Aug 2024) behind
            // Megatron-core's --moe-permute-fusion; Megatron-Bridge's model providers
            // (Qwen3MoEModelProvider, the DeepSeek ones) and NeMo 2's MoE configs set it.
            if (job.model.experts < 2) return {false, "a dense model permutes no tokens"};
            if (nemo && !before(t, 202501)) return {true, "the MoE model providers set moe_permute_fusion = True"};
            if (nemo) return {false, "no fused MoE permutation in the recipes before 2025"};
            return {false, megatron ? "--moe-permute-fusion is off unless passed" : "Megatron-core's fused permutation is not this stack's"};
        case StackKey::moe_router_fusion:
            // moerouter: Megatron-core's --moe-router-fusion exists from core 0.14 (Aug 2025, TE 2.7's
            // fused router kernels); Megatron-Bridge's performance configs set it for every MoE
            // model from their first release (v0.1.0rc4 yaml, 25.09: moe_router_fusion: true).
            if (job.model.experts < 2) return {false, "a dense model has no router"};
            if (nemo && !before(t, kBridgePerfConfigsSince)) return {true, "the performance configs set moe_router_fusion = True"};
            if (nemo) return {false, "no fused router before Megatron-core 0.14 (Aug 2025)"};
            return {false, megatron ? "--moe-router-fusion is off unless passed" : "Megatron-core's fused router is not this stack's"};
        case StackKey::count: break;
    }
    return {};
}

// Whether the key bears on this layout (what `ptd estimate` lists).
bool bears_on(StackKey k, const JobSpec& job) {
    const ParallelSpec& p = job.parallel;
    const bool replicas = (long long)p.dp * p.cp > 1, mcore = runs_megatron_core(job.training.framework);
    switch (k) {
        case StackKey::sequence_parallel: return p.tp > 1;
        case StackKey::distributed_optimizer: return mcore && p.zero == 0;
        case StackKey::overlap_grad_reduce: return replicas;
        case StackKey::overlap_param_gather: return replicas && (p.zero >= 1 || p.distributed_optimizer);
        case StackKey::tp_comm_overlap: return mcore && p.tp > 1 && p.sequence_parallel;
        case StackKey::grad_reduce_in_fp32:  // fsdpreduce: and FSDP's reduce-scatter dtype on the torch stacks
            return job.training.precision == Precision::bf16 &&
                   ((mcore && p.zero == 0) || (p.zero == 3 && runs_pytorch_modules(job.training.framework)));
        case StackKey::overlap_p2p_comm: return mcore && p.pp > 1 && p.vpp > 1;
        case StackKey::scatter_gather_tensors_in_pipeline:
        case StackKey::async_tensor_model_parallel_allreduce:
            return job.training.framework == Framework::megatron && (k == StackKey::async_tensor_model_parallel_allreduce ? p.tp > 1 : p.pp > 1);
        case StackKey::recompute_style: return p.recompute == Recompute::selective;
        case StackKey::fp8_param_gather: return job.training.fp8 != Fp8Recipe::none;
        case StackKey::cross_entropy: return true;
        case StackKey::moe_permute_fusion: return mcore && job.model.experts > 1;
        case StackKey::moe_router_fusion: return mcore && job.model.experts > 1;
        case StackKey::count: break;
    }
    return false;
}

void set_value(StackKey k, JobSpec& job, bool v) {
    ParallelSpec& p = job.parallel;
    switch (k) {
        case StackKey::sequence_parallel: p.sequence_parallel = v; break;
        case StackKey::distributed_optimizer: p.distributed_optimizer = v; break;
        case StackKey::overlap_grad_reduce: p.overlap_grad_reduce = v; break;
        case StackKey::overlap_param_gather: p.overlap_param_gather = v; break;
        case StackKey::tp_comm_overlap: p.tp_comm_overlap = v; break;
        case StackKey::grad_reduce_in_fp32: p.grad_reduce_in_fp32 = v; break;
        case StackKey::overlap_p2p_comm: p.overlap_p2p_comm = v; break;
        case StackKey::scatter_gather_tensors_in_pipeline: p.scatter_gather_tensors_in_pipeline = v; break;
        case StackKey::async_tensor_model_parallel_allreduce: p.async_tensor_model_parallel_allreduce = v; break;
        case StackKey::recompute_style: p.recompute_style = v ? RecomputeStyle::torchtitan_op : RecomputeStyle::megatron; break;
        case StackKey::fp8_param_gather: job.training.fp8_param_gather = v; break;
        case StackKey::moe_permute_fusion: p.moe_permute_fusion = v; break;
        case StackKey::moe_router_fusion: p.moe_router_fusion = v; break;
        case StackKey::cross_entropy: {
            const bool torch_stack = runs_pytorch_modules(job.training.framework);
            // true: the stack's fused loss (fusedce2: Megatron's by the stack's date), false its unfused one.
            job.estimate.cross_entropy = job.training.framework == Framework::llm_foundry ? CrossEntropyImpl::fused
                                         : torch_stack ? (v ? CrossEntropyImpl::pytorch_compiled : CrossEntropyImpl::pytorch)
                                         : v           ? fused_megatron_loss(job.training)
                                                       : CrossEntropyImpl::megatron;
            break;
        }
        case StackKey::count: break;
    }
}

// The job's value of a true/false key.
bool bool_value(StackKey k, const JobSpec& job) {
    const ParallelSpec& p = job.parallel;
    switch (k) {
        case StackKey::sequence_parallel: return p.sequence_parallel;
        case StackKey::distributed_optimizer: return p.distributed_optimizer;
        case StackKey::overlap_grad_reduce: return p.overlap_grad_reduce;
        case StackKey::overlap_param_gather: return p.overlap_param_gather;
        case StackKey::tp_comm_overlap: return p.tp_comm_overlap;
        case StackKey::grad_reduce_in_fp32: return p.grad_reduce_in_fp32;
        case StackKey::overlap_p2p_comm: return p.overlap_p2p_comm;
        case StackKey::scatter_gather_tensors_in_pipeline: return p.scatter_gather_tensors_in_pipeline;
        case StackKey::async_tensor_model_parallel_allreduce: return p.async_tensor_model_parallel_allreduce;
        case StackKey::fp8_param_gather: return job.training.fp8_param_gather;
        case StackKey::moe_permute_fusion: return p.moe_permute_fusion;
        case StackKey::moe_router_fusion: return p.moe_router_fusion;
        default: assert(!"not a true/false key"); return false;
    }
}

std::string value_text(StackKey k, const JobSpec& job, bool v) {
    if (k == StackKey::recompute_style) return std::string("\"") + to_string(job.parallel.recompute_style) + "\"";
    if (k == StackKey::cross_entropy) return std::string("\"") + to_string(job.estimate.cross_entropy) + "\"";
    return v ? "true" : "false";
}

}  // namespace

bool stack_value_is_default(StackKey k, const JobSpec& job) {
    const bool d = default_for(k, job, applied_perf_recipe(job)).value;
    if (k == StackKey::recompute_style || k == StackKey::cross_entropy) {
        JobSpec as_default = job;
        set_value(k, as_default, d);
        return value_text(k, as_default, d) == value_text(k, job, d);
    }
    return bool_value(k, job) == d;
}

void apply_stack_defaults(JobSpec& job) {
    job.origin.stack_defaults.clear();
    // The recipe follows the layout, presets and training keys, none of which is set below.
    const PerfRecipe* perf = applied_perf_recipe(job);
    for (int i = 0; i < (int)StackKey::count; ++i) {
        const StackKey k = (StackKey)i;
        if (job.origin.stack_keys_written & stack_key_bit(k)) continue;
        const Default d = default_for(k, job, perf);
        set_value(k, job, d.value);
        if (bears_on(k, job)) job.origin.stack_defaults.push_back({stack_key_name(k), value_text(k, job, d.value), d.source});
    }
    // mbrecipe: the MoE and CUDA-graph keys of the job's performance recipe, listed for an MoE model
    // (the graphs' also for a dense one).
    {
        ParallelSpec& p = job.parallel;
        const PerfRecipe* r = perf;
        const RecipeKeyValues v = recipe_key_values(job, r);
        const std::string source = r ? perf_recipe_source(*r, job.training.recipe.empty()) : "";
        const bool moe = job.model.experts > 1;
        auto take = [&](uint16_t bit, const char* key, auto& field, auto value, const std::string& text, bool bears) {
            if (job.origin.recipe_keys_written & bit) return;
            field = value;
            if (r && bears) job.origin.stack_defaults.push_back({key, text, source});
        };
        std::string scope;
        for (const std::string& w : cuda_graph_scope_words(v.graph_scope)) scope += (scope.empty() ? "\"" : ", \"") + w + "\"";
        take(kRecipeMoeDispatcher, "parallel.moe_dispatcher", p.moe_dispatcher, v.dispatcher,
             std::string("\"") + to_string(v.dispatcher) + "\"", moe && p.ep > 1);
        take(kRecipeMoeA2aOverlap, "parallel.moe_a2a_overlap", p.moe_a2a_overlap, v.a2a_overlap,
             v.a2a_overlap ? "true" : "false", moe && p.ep > 1);
        take(kRecipeSharedExpertOverlap, "parallel.moe_shared_expert_overlap", p.moe_shared_expert_overlap,
             v.shared_expert_overlap, v.shared_expert_overlap ? "true" : "false", moe && job.model.shared_expert_ffn_hidden > 0);
        take(kRecipeCudaGraphImpl, "parallel.cuda_graph_impl", p.cuda_graph_impl, v.graphs,
             std::string("\"") + to_string(v.graphs) + "\"", true);
        take(kRecipeCudaGraphScope, "parallel.cuda_graph_scope", p.cuda_graph_scope, v.graph_scope, "[" + scope + "]",
             p.cuda_graph_impl != CudaGraphImpl::none);
        take(kRecipeMoePadToCapacity, "parallel.moe_pad_to_capacity", p.moe_pad_to_capacity, v.pad_to_capacity,
             v.pad_to_capacity ? "true" : "false", moe);
        take(kRecipeAccountForEmbedding, "parallel.account_for_embedding_in_pipeline_split",
             p.account_for_embedding_in_pipeline_split, v.account_for_embedding, v.account_for_embedding ? "true" : "false",
             p.pp > 1 && v.account_for_embedding);
        take(kRecipeAccountForLoss, "parallel.account_for_loss_in_pipeline_split", p.account_for_loss_in_pipeline_split,
             v.account_for_loss, v.account_for_loss ? "true" : "false", p.pp > 1 && v.account_for_loss);
        // The recipe's activation recompute; its module list only where the job recomputes
        // selectively too (else Megatron's default, which a list left over from an edit must not outlive).
        take(kRecipeRecompute, "parallel.recompute", p.recompute, v.recompute,
             std::string("\"") + to_string(v.recompute) + "\"", true);
        std::string modules;
        for (const std::string& w : recompute_module_words(recipe_modules_for(p.recompute, v)))
            modules += (modules.empty() ? "\"" : ", \"") + w + "\"";
        take(kRecipeRecomputeModules, "parallel.recompute_modules", p.recompute_modules, recipe_modules_for(p.recompute, v),
             "[" + modules + "]", p.recompute == Recompute::selective && v.recompute == Recompute::selective);
    }
    // mbrecipe: a DeepSeek-V3 recipe's pipeline layout, for a job that writes none.
    {
        ParallelSpec& p = job.parallel;
        if (job.origin.layers_per_stage_from_stack) p.layers_per_stage.clear();
        job.origin.layers_per_stage_from_stack = false;
        const PerfRecipe* r = perf;
        if (r && p.layers_per_stage.empty()) {
            std::string how = ": _get_deepseek_v3_pipeline_layout (recipes/deepseek/h100/deepseek_v3.py)";
            std::vector<int> split = deepseek_v3_layers_per_chunk(job, *r);
            if (split.empty()) split = recipe_layout_split(job, *r, how);
            if (!split.empty()) {
                p.layers_per_stage = split;
                job.origin.layers_per_stage_from_stack = true;
                std::string text;
                for (int l : split) text += (text.empty() ? "[" : ", ") + std::to_string(l);
                job.origin.stack_defaults.push_back(
                    {"parallel.layers_per_stage", text + "]", perf_recipe_source(*r, job.training.recipe.empty()) + how});
            }
        }
    }
    // recipe: after the stack keys (the recipe's master copy follows fp8_param_gather).
    TrainingSpec& t = job.training;
    const StateDtypeDefaults recipe = recipe_state_dtypes(t);
    const struct {
        const char* key;
        StateDtype& value;
        StateDtype recipe_value;
    } states[] = {{"training.main_params_dtype", t.main_params_dtype, recipe.main_params},
                  {"training.exp_avg_dtype", t.exp_avg_dtype, recipe.exp_avg},
                  {"training.exp_avg_sq_dtype", t.exp_avg_sq_dtype, recipe.exp_avg_sq}};
    for (int i = 0; i < 3; ++i) {
        if (job.origin.state_dtypes_written & (1u << i)) continue;
        states[i].value = states[i].recipe_value;
        if (*recipe.source)
            job.origin.stack_defaults.push_back(
                {states[i].key, std::string("\"") + to_string(states[i].recipe_value) + "\"", recipe.source});
    }
}

void apply_torchtitan_split(JobSpec& job) {
    ParallelSpec& p = job.parallel;
    if (job.training.framework != Framework::torchtitan || p.pp < 2 || !p.layers_per_stage.empty() ||
        !p.pipeline_layout.empty() || p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split)
        return;
    const int chunks = p.pp * std::max(1, p.vpp), layers = job.model.layers;
    std::vector<int> split = torchtitan_default_split(layers, chunks, job.training.framework_version);
    if (split.empty() || (layers % chunks == 0 && split == std::vector<int>((size_t)chunks, layers / chunks))) return;
    p.layers_per_stage = split;
    job.origin.layers_per_stage_from_stack = true;
    std::string text;
    for (int l : split) text += (text.empty() ? "[" : ", ") + std::to_string(l);
    const bool weighted = job.training.framework_version == 0 || job.training.framework_version >= kTorchtitanWeightedSplitFrom;
    job.origin.stack_defaults.push_back(
        {"parallel.layers_per_stage", text + "]",
         weighted ? "torchtitan's own split (generate_llm_fqn_per_model_part): the embedding and the output count as a "
                    "layer each, the remainder goes to the first chunks"
                  : "torchtitan's own split (generate_split_points, before 2025-08): the first chunk layers / chunks, "
                    "the middle ones one more while the remainder lasts, the last the rest"});
}

// ttmb: the first whole months of torchtitan's PR #781 (merged 2025-01-07: one micro-batch per
// stage) and PR #1073 (merged 2025-04-08: pipeline_parallel_microbatch_size, default 1).
constexpr int kTorchtitanMicroBatchPerStageFrom = 202502, kTorchtitanMicroBatchSizeFrom = 202505;

TorchtitanMicroBatch torchtitan_pipeline_micro_batch(long long local_batch, int pp, int vpp, int framework_version) {
    if (local_batch < 1 || pp < 2) return {};
    if (framework_version == 0 || framework_version >= kTorchtitanMicroBatchSizeFrom)
        return {1, "torchtitan's pipeline_parallel_microbatch_size = 1 (since 2025-04, PR #1073)"};
    const bool per_stage = framework_version >= kTorchtitanMicroBatchPerStageFrom;
    const long long count = per_stage ? (long long)pp * std::max(1, vpp) : pp;
    const std::string split = ", the local batch of " + std::to_string(local_batch) + " split that many ways";
    return {local_batch % count == 0 ? (int)(local_batch / count) : 0,
            per_stage ? "torchtitan of 2025-02 to 2025-04: one micro-batch per pipeline stage (pp·vpp = " +
                            std::to_string(count) + ", PR #781)" + split
                      : "torchtitan before 2025-02: n_microbatches = the pipeline degree (" + std::to_string(count) +
                            ", pipelining_utils.py)" + split};
}

}  // namespace ptd
