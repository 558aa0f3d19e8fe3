// bench_accuracy — predicted vs published training throughput. Reads
// bench/accuracy/published_runs.toml (the sources' own tables), turns each published figure
// into an iteration time (with the source's own FLOPs formula where the source gives FLOP/s),
// and prints our predicted iteration time next to it, per run and summarised per source,
// framework and GPU generation, separately for the calibration and the checking runs.
//
//   bench_accuracy [RUNS.toml] [--generation A100|H100|H200|B200|V100] [--fit] [--verbose] [--json]
//
// --fit searches the time model's constants (gemm_eff_max, gemm_half_dim, flash_eff) that
// minimise the mean squared log error over the calibration runs only (of the selected
// generation, with --generation), and prints them; the fitted values are then written into
// the estimator by hand. --json prints the same results as one JSON object (for docs/accuracy.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "ptd/estimate.h"
#include "ptd/presets.h"
#include "run_file.h"

namespace {

bool g_verbose = false;  // --verbose: print each run's time breakdown

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

    // Issue 15 keys the estimator on main does not take yet. They are parsed and checked
    // here and handed to the job in apply_run_to_job(); see the INTEGRATOR marks there.
    std::string fp8 = "none";               // none | delayed | current | tensorwise | rowwise
    std::string cluster;                    // dgx-a100 | dgx-h100 | hgx-h200 | dgx-b200 | gb200-nvl72; "" = none named
    std::string schedule;                   // 1f1b | interleaved | zb-h1 | dualpipe; "" = not stated
    std::optional<bool> overlap_grad_reduce, overlap_param_gather, tp_comm_overlap;
    bool fsdp = false;                      // FSDP / ZeRO-3 (zero = 3)
    bool torch_compile = false;
    int nics_per_node = 0;                  // 0 = not stated
    double nic_gbps = 0;                    // GB/s per NIC; 0 = not stated
    double memory_gib_measured = 0;         // 0 = the source reports no memory
    std::string memory_kind;                // max_reserved | max_allocated | nvidia-smi
    double predicted_step = 0;              // filled by predict_all()
    double predicted_memory_gib = 0;
};

// FLOPs per iteration the way each source counts them.
double source_flops(const Run& r, const std::string& convention) {
    const ptd::ModelSpec& m = r.job.model;
    const double B = r.job.training.global_batch, s = m.seq_len, L = m.layers, h = m.hidden, V = m.vocab;
    if (convention == "narayanan-eq3-with-recompute")  // Narayanan et al. 2021 eq. 3
        return 96.0 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
    if (convention == "korthikanti-eq7-model")  // Korthikanti et al. 2022 eq. 7
        return 72.0 * B * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L));
    // PaLM-style model FLOPs (Llama 3 paper, NeMo model TFLOP/s): our full-s² count.
    ptd::FlopsEstimate f = ptd::flops_per_token(m, ptd::Recompute::none, ptd::AttentionFlops::full, (double)V);
    return f.model_per_token * B * s;
}

// Every key a [[run]] may hold. Anything else is a typo or a key this bench does not know,
// and is an error rather than silently ignored.
const std::set<std::string> kRunKeys = {
    "name", "source", "use", "framework", "gpu", "gpus", "gpus_per_node", "cluster", "inter_gbps",
    "nics_per_node", "nic_gbps", "arch", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab",
    "seq_len", "tp", "pp", "dp", "cp", "vpp", "schedule", "micro_batch", "global_batch", "recompute",
    "sequence_parallel", "flash_attention", "distributed_optimizer", "zero", "fsdp", "overlap_grad_reduce",
    "overlap_param_gather", "tp_comm_overlap", "torch_compile", "precision", "fp8", "iteration_s",
    "tokens_per_s", "tflops_per_gpu", "mfu", "hfu", "memory_gib_measured", "memory_kind",
    "flops_convention", "note"};

std::string g_path;

[[noreturn]] void fail_at(const toml::node* n, int fallback_line, const std::string& msg) {
    const int line = n ? (int)n->source().begin.line : fallback_line;
    std::fprintf(stderr, "%s:%d: %s\n", g_path.c_str(), line, msg.c_str());
    std::exit(2);
}

// A key's value, or `fallback` when absent. A value of the wrong type is an error naming
// the file, line and key (never a silent default).
template <class T>
T get(const toml::table& t, const char* key, T fallback) {
    const toml::node* n = t.get(key);
    if (!n) return fallback;
    std::optional<T> v = n->value<T>();
    if (!v) fail_at(n, 0, std::string("run key \"") + key + "\" has the wrong type");
    return *v;
}

std::optional<bool> get_optional_bool(const toml::table& t, const char* key) {
    if (!t.get(key)) return std::nullopt;
    return get<bool>(t, key, false);
}

// A string key that must be one of `allowed`.
std::string get_word(const toml::table& t, const char* key, const std::string& fallback,
                     std::initializer_list<const char*> allowed) {
    const std::string v = get<std::string>(t, key, fallback);
    for (const char* a : allowed)
        if (v == a) return v;
    std::string list;
    for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    fail_at(t.get(key), 0, std::string("run key \"") + key + "\" is \"" + v + "\"; allowed: " + list);
}

std::string generation_of(const std::string& gpu) {
    if (gpu.rfind("v100", 0) == 0) return "V100";
    if (gpu.rfind("a100", 0) == 0) return "A100";
    if (gpu.rfind("h100", 0) == 0) return "H100";
    if (gpu.rfind("h200", 0) == 0) return "H200";
    if (gpu.rfind("b200", 0) == 0 || gpu.rfind("gb200", 0) == 0) return "B200";
    return gpu;
}

// The group whose calibration runs are capped at ten (issue 15: A100, H100, H200/B200).
std::string calibration_group(const std::string& generation) {
    return generation == "H200" || generation == "B200" ? "H200/B200" : generation;
}

// Hands the run's issue-15 keys to the job. Keys with a JobSpec field on main are mapped;
// the others are marked for the integrator. Returns why the run cannot be modelled yet
// ("" = it can).
std::string apply_run_to_job(Run& r) {
    ptd::JobSpec& j = r.job;
    if (r.fsdp) j.parallel.zero = 3;  // FSDP FULL_SHARD / ZeRO-3 is ZeRO stage 3
    // Overlap: what the source states; unstated, what the stack does in its published
    // configurations (NeMo / Megatron-Bridge performance recipes turn both overlaps on, FSDP
    // and DeepSpeed's overlap_comm always overlap); the param gather only exists with a
    // sharded optimizer. TP overlap only where the source says so.
    const bool sharded = j.parallel.zero >= 1 || j.parallel.distributed_optimizer;
    j.parallel.overlap_grad_reduce = r.overlap_grad_reduce.value_or(true);
    j.parallel.overlap_param_gather = sharded && j.parallel.overlap_grad_reduce && r.overlap_param_gather.value_or(true);
    j.parallel.tp_comm_overlap = j.parallel.sequence_parallel && j.parallel.tp > 1 && r.tp_comm_overlap.value_or(false);
    // Whose kernels ran it: NeMo and MegaScale build on Megatron-LM; llm-foundry is PyTorch
    // FSDP (Composer); "other" (e.g. the Llama 3 paper's own stack) keeps the default.
    if (r.framework == "deepspeed") j.training.framework = ptd::Framework::deepspeed;
    else if (r.framework == "torchtitan") j.training.framework = ptd::Framework::torchtitan;
    else if (r.framework == "llm-foundry") j.training.framework = ptd::Framework::pytorch_fsdp;
    else j.training.framework = ptd::Framework::megatron;
    j.training.torch_compile = r.torch_compile &&
                               (r.framework == "torchtitan" || r.framework == "llm-foundry");

    // FP8: the recipe runs inside bf16 mixed precision (training.fp8).
    if (r.fp8 != "none") {
        j.training.precision = ptd::Precision::bf16;
        j.training.fp8 = r.fp8 == "delayed"    ? ptd::Fp8Recipe::delayed
                       : r.fp8 == "current"    ? ptd::Fp8Recipe::current
                       : r.fp8 == "tensorwise" ? ptd::Fp8Recipe::tensorwise
                                               : ptd::Fp8Recipe::rowwise;
    }
    // The pipeline schedule as the source names it (unstated: Megatron's choice by vpp).
    if (r.schedule == "zb-h1") j.parallel.schedule = ptd::PipelineSchedule::zb_h1;
    else if (r.schedule == "dualpipe") j.parallel.schedule = ptd::PipelineSchedule::dualpipe;
    // PyTorch stacks compute the loss with F.cross_entropy on fp32 logits; torchtitan's
    // "selective" is op-level selective checkpointing (memory.cpp).
    if (r.framework == "torchtitan" || r.framework == "llm-foundry") j.estimate.cross_entropy = ptd::CrossEntropyImpl::pytorch;
    if (r.framework == "torchtitan") j.parallel.recompute_style = ptd::RecomputeStyle::torchtitan_op;
    if (r.schedule == "interleaved" && j.parallel.vpp < 2) return "schedule = interleaved needs vpp >= 2";
    return "";
}

std::vector<Run> load_runs(const std::string& path, const ptd::PresetCatalog& presets) {
    std::vector<Run> runs;
    toml::table doc;
    const std::vector<const toml::table*> tables = load_run_tables(path, doc);
    g_path = path;
    std::set<std::string> names;
    for (const toml::table* table : tables) {
        const toml::table& t = *table;
        const toml::node& n = t;
        for (const auto& [key, value] : t)
            if (!kRunKeys.count(std::string(key.str())))
                fail_at(&value, (int)n.source().begin.line,
                        "unknown run key \"" + std::string(key.str()) +
                            "\" (see the key list at the top of published_runs.toml)");
        Run r;
        r.line = (int)n.source().begin.line;
        r.name = get<std::string>(t, "name", "");
        if (r.name.empty()) fail_at(&n, 0, "run has no name");
        if (!names.insert(r.name).second) fail_at(t.get("name"), 0, "run name \"" + r.name + "\" is used twice");
        r.source_tag = r.name.substr(0, r.name.find('-'));
        r.source = get<std::string>(t, "source", "");
        r.use = get_word(t, "use", "check", {"calibrate", "check"});
        r.framework = get_word(t, "framework", "other",
                               {"megatron", "nemo", "torchtitan", "llm-foundry", "deepspeed", "megascale", "other"});
        r.convention = get_word(t, "flops_convention", "",
                                {"", "narayanan-eq3-with-recompute", "korthikanti-eq7-model", "llama3-paper",
                                 "nemo-model-tflops"});
        r.fp8 = get_word(t, "fp8", "none", {"none", "delayed", "current", "tensorwise", "rowwise"});
        r.cluster = get_word(t, "cluster", "", {"", "dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200", "gb200-nvl72"});
        r.schedule = get_word(t, "schedule", "", {"", "1f1b", "interleaved", "zb-h1", "dualpipe"});
        r.overlap_grad_reduce = get_optional_bool(t, "overlap_grad_reduce");
        r.overlap_param_gather = get_optional_bool(t, "overlap_param_gather");
        r.tp_comm_overlap = get_optional_bool(t, "tp_comm_overlap");
        r.fsdp = get<bool>(t, "fsdp", false);
        r.torch_compile = get<bool>(t, "torch_compile", false);
        r.nics_per_node = get<int>(t, "nics_per_node", 0);
        r.nic_gbps = get<double>(t, "nic_gbps", 0.0);
        r.memory_gib_measured = get<double>(t, "memory_gib_measured", 0.0);
        r.memory_kind = get_word(t, "memory_kind", "", {"", "max_reserved", "max_allocated", "nvidia-smi"});
        if ((r.memory_gib_measured > 0) != !r.memory_kind.empty())
            fail_at(&n, 0, "run \"" + r.name + "\": memory_gib_measured and memory_kind go together");
        if (r.fsdp && t.get("zero") && get<int>(t, "zero", 3) != 3)
            fail_at(t.get("zero"), 0, "run \"" + r.name + "\": fsdp = true means zero = 3, not " +
                                           std::to_string(get<int>(t, "zero", 3)));

        ptd::JobSpec& j = r.job;
        ptd::ModelSpec& m = j.model;
        m.name = r.name;
        m.arch = get_word(t, "arch", "gpt", {"gpt", "llama"}) == "llama" ? ptd::Arch::llama : ptd::Arch::gpt;
        m.layers = get<int>(t, "layers", 0);
        m.hidden = get<int>(t, "hidden", 0);
        m.heads = get<int>(t, "heads", 0);
        m.kv_heads = get<int>(t, "kv_heads", m.heads);
        m.ffn_hidden = get<int>(t, "ffn_hidden", 4 * m.hidden);
        m.vocab = get<int>(t, "vocab", 51200);
        m.seq_len = get<int>(t, "seq_len", 2048);
        ptd::ModelKeysGiven given;
        given.kv_heads = given.ffn_hidden = true;
        ptd::fill_model_defaults(m, given);
        const std::string gpu = get<std::string>(t, "gpu", "a100-80gb");
        r.generation = generation_of(gpu);
        if (const ptd::GpuSpec* g = presets.find_gpu(gpu)) j.cluster.gpu = *g;
        else r.skip = "no GPU preset \"" + gpu + "\" in PTD";
        j.cluster.gpus_per_node = get<int>(t, "gpus_per_node", 8);
        j.cluster.nodes = get<int>(t, "gpus", 8) / j.cluster.gpus_per_node;
        j.cluster.intra_gbps = j.cluster.gpu.link_gbps;
        j.cluster.inter_gbps = get<double>(t, "inter_gbps", 25.0);
        // The network as a job file would get it (job_toml.cpp read_cluster_network): the named
        // cluster preset, else the default cluster of the GPU; the run's own NIC count and
        // per-NIC GB/s (this file's unit) or its per-GPU inter_gbps override.
        {
            const ptd::ClusterPreset* net = !r.cluster.empty() ? presets.find_cluster(r.cluster)
                                                               : presets.default_cluster_for_gpu(gpu);
            const int gpn = std::max(j.cluster.gpus_per_node, 1);
            double nic_gbit = 8.0 * get<double>(t, "inter_gbps", 25.0);  // Gb/s per NIC, one NIC per GPU
            j.cluster.nics_per_node = 0;
            if (net) {
                j.cluster.nics_per_node = std::max(1, (int)std::lround((double)net->nics_per_node * gpn / net->gpus_per_node));
                nic_gbit = net->nic_gbps;
                j.cluster.rail_optimized = net->rail_optimized;
                j.cluster.nvls = net->nvls;
                if (net->intra_gbps > 0 && net->gpu == gpu) j.cluster.intra_gbps = net->intra_gbps;
                // gb200: the preset's NVLink domain, as a job file gets it (job_toml.cpp).
                if (!r.cluster.empty() || net->gpus_per_node == gpn) j.cluster.nvlink_domain = net->nvlink_domain;
            }
            if (r.nics_per_node > 0) j.cluster.nics_per_node = r.nics_per_node;
            if (r.nic_gbps > 0) nic_gbit = 8.0 * r.nic_gbps;
            const int nics = j.cluster.nics_per_node > 0 ? j.cluster.nics_per_node : gpn;
            j.cluster.inter_gbps = t.contains("inter_gbps") && r.nic_gbps <= 0 ? get<double>(t, "inter_gbps", 25.0)
                                                                               : nics * nic_gbit / 8.0 / gpn;
        }
        ptd::ParallelSpec& p = j.parallel;
        p.tp = get<int>(t, "tp", 1);
        p.pp = get<int>(t, "pp", 1);
        p.dp = get<int>(t, "dp", 1);
        p.cp = get<int>(t, "cp", 1);
        p.vpp = get<int>(t, "vpp", 1);
        p.zero = get<int>(t, "zero", 0);
        // Keys a source leaves unstated take the value its stack runs with: NeMo and
        // Megatron-Bridge recipes use the distributed optimizer, sequence parallelism with TP
        // and Transformer Engine's fused attention; torchtitan and llm-foundry use flash
        // attention (SDPA). The 2021-22 Megatron and DeepSpeed papers predate flash attention.
        const bool nemo = r.framework == "nemo";
        const bool modern = nemo || r.framework == "torchtitan" || r.framework == "llm-foundry";
        p.distributed_optimizer = get<bool>(t, "distributed_optimizer", nemo && p.zero == 0 && !r.fsdp);
        p.sequence_parallel = get<bool>(t, "sequence_parallel", nemo && p.tp > 1);
        const std::string rc = get_word(t, "recompute", "none", {"none", "selective", "full"});
        p.recompute = rc == "full" ? ptd::Recompute::full : rc == "selective" ? ptd::Recompute::selective : ptd::Recompute::none;
        // Uneven splits: balanced over model chunks, the shortfall on the first and last chunk.
        if (p.pp * p.vpp > 0 && m.layers % (p.pp * p.vpp) != 0)
            p.layers_per_stage = ptd::balanced_layers_per_stage(m.layers, p.pp * p.vpp);
        ptd::TrainingSpec& tr = j.training;
        tr.micro_batch = get<int>(t, "micro_batch", 1);
        tr.global_batch = get<int>(t, "global_batch", 0);
        const std::string prec = get_word(t, "precision", "bf16", {"bf16", "fp16", "fp32"});
        tr.precision = prec == "fp16" ? ptd::Precision::fp16 : prec == "fp32" ? ptd::Precision::fp32 : ptd::Precision::bf16;
        tr.optimizer = ptd::Optimizer::adam;
        tr.flash_attention = get<bool>(t, "flash_attention", modern);

        if (r.skip.empty()) r.skip = apply_run_to_job(r);
        if (r.skip.empty()) {
            auto problems = ptd::validate_job(j);
            if (!problems.empty()) r.skip = "invalid layout: " + problems[0].key + ": " + problems[0].message;
        }
        const int gpus = j.world_size();
        r.source_flops = source_flops(r, r.convention);
        const double iter = get<double>(t, "iteration_s", 0.0);
        const double tokens = get<double>(t, "tokens_per_s", 0.0);
        const double tflops = get<double>(t, "tflops_per_gpu", 0.0);
        const double mfu = get<double>(t, "mfu", 0.0);
        char buf[96] = "";
        if (iter > 0) {
            r.published_step = iter;
            std::snprintf(buf, sizeof buf, "%.2f s/iter", iter);
        } else if (tokens > 0) {  // per GPU, as NeMo, torchtitan and llm-foundry report it
            r.published_step = (double)tr.global_batch * m.seq_len / (tokens * gpus);
            std::snprintf(buf, sizeof buf, "%.0f tok/s/GPU", tokens);
        } else if (tflops > 0) {
            r.published_step = r.source_flops / (tflops * 1e12 * gpus);
            std::snprintf(buf, sizeof buf, "%.0f TFLOP/s", tflops);
        } else if (mfu > 0 && j.cluster.gpu.peak_tflops(tr.precision) > 0) {
            r.published_step = r.source_flops / (mfu * j.cluster.gpu.peak_tflops(tr.precision) * 1e12 * gpus);
            std::snprintf(buf, sizeof buf, "MFU %.1f%%", mfu * 100);
        } else if (r.skip.empty()) {
            r.skip = "no published throughput figure";
        }
        r.published_what = buf;
        runs.push_back(std::move(r));
    }
    // Issue 15: at most ten calibration runs per GPU generation.
    std::map<std::string, int> calibrating;
    for (const Run& r : runs)
        if (r.use == "calibrate" && ++calibrating[calibration_group(r.generation)] > 10) {
            std::fprintf(stderr, "%s:%d: run \"%s\" is the 11th use = \"calibrate\" run of %s; at most 10 per generation\n",
                         path.c_str(), r.line, r.name.c_str(), calibration_group(r.generation).c_str());
            std::exit(2);
        }
    return runs;
}

double predict_step(const Run& r) { return ptd::estimate_job(r.job).step_s; }

void predict_all(std::vector<Run>& runs) {
    for (Run& r : runs) {
        if (!r.skip.empty()) continue;
        const ptd::Estimate e = ptd::estimate_job(r.job);
        r.predicted_step = e.step_s;
        if (!e.stages.empty()) r.predicted_memory_gib = e.stages[e.worst_stage].mem.total() / (1024.0 * 1024 * 1024);
    }
}

double log_error_sq(const std::vector<Run>& runs) {
    double sum = 0;
    int n = 0;
    for (const Run& r : runs) {
        if (!r.skip.empty() || r.use != "calibrate") continue;
        double e = std::log(predict_step(r) / r.published_step);
        sum += e * e;
        ++n;
    }
    return n ? sum / n : 0;
}

// Fits the kernel efficiencies of each GPU generation on that generation's calibration runs
// (at most ten per generation): gemm_eff_max and flash_eff by grid search, minimising the
// mean squared log error of the step time. gemm_half_dim (the GEMM shape factor) is shared by
// all generations and keeps its value. Generations without calibration runs keep the default.
void fit(std::vector<Run>& runs) {
    ptd::TimeModelConstants& c = ptd::time_model_constants();
    for (int g = 0; g < ptd::kGpuGenerationCount; ++g) {
        const ptd::GpuGeneration gen = (ptd::GpuGeneration)g;
        std::vector<Run> mine;
        for (const Run& r : runs)
            if (r.skip.empty() && r.use == "calibrate" && r.job.cluster.gpu.generation == gen) mine.push_back(r);
        if (mine.empty()) continue;
        // flash_eff is fitted only where at least five calibration runs use flash attention;
        // with fewer it would absorb whatever else those runs differ in (on A100 most are the
        // pre-flash Megatron papers), so it keeps the default.
        int flash_runs = 0;
        for (const Run& r : mine) flash_runs += r.job.training.flash_attention ? 1 : 0;
        const bool fit_flash = flash_runs >= 5;
        ptd::KernelEfficiency best = c.kernel(gen);
        double best_err = 1e30;
        for (double eff = 0.40; eff <= 0.951; eff += 0.01)
            for (double fl = 0.20; fl <= 0.801; fl += 0.05) {
                if (!fit_flash && std::abs(fl - c.flash_eff) > 0.01) continue;
                c.by_generation[g] = ptd::KernelEfficiency{eff, fit_flash ? fl : 0.0};
                const double err = log_error_sq(mine);
                if (err < best_err) best_err = err, best = c.by_generation[g];
            }
        c.by_generation[g] = best;
        std::printf("fit %-9s (%zu calibration runs, %d with flash): gemm_eff_max = %.2f, flash_eff = %.2f%s, rms log error %.3f\n",
                    ptd::to_string(gen), mine.size(), flash_runs, best.gemm_eff_max, c.kernel(gen).flash_eff,
                    fit_flash ? "" : " (default, not fitted)", std::sqrt(best_err));
    }
    std::printf("\n");
}

std::string layout_of(const Run& r) {
    const ptd::ParallelSpec& p = r.job.parallel;
    std::string s = std::to_string(p.tp) + "·" + std::to_string(p.pp) + "·" + std::to_string(p.dp);
    if (p.cp > 1) s += "c" + std::to_string(p.cp);
    if (p.vpp > 1) s += "v" + std::to_string(p.vpp);
    if (p.zero == 3) s += "z3";
    return s;
}

double error_of(const Run& r) { return r.predicted_step / r.published_step - 1; }

void report(const std::vector<Run>& runs, const char* use) {
    std::printf("%-52s %-4s %-11s %6s %-12s %-15s %8s %8s %7s %7s %7s\n", use, "gen", "framework", "GPUs", "layout",
                "published", "pub s", "pred s", "pub TF", "pred TF", "error");
    for (const Run& r : runs) {
        if (r.use != use) continue;
        if (!r.skip.empty()) {
            std::printf("%-52s %-4s %-11s %6d %-12s skipped: %s\n", r.name.c_str(), r.generation.c_str(),
                        r.framework.c_str(), r.job.world_size(), layout_of(r).c_str(), r.skip.c_str());
            continue;
        }
        const double gpus = r.job.world_size();
        std::printf("%-52s %-4s %-11s %6.0f %-12s %-15s %8.2f %8.2f %7.1f %7.1f %+6.1f%%\n", r.name.c_str(),
                    r.generation.c_str(), r.framework.c_str(), gpus, layout_of(r).c_str(), r.published_what.c_str(),
                    r.published_step, r.predicted_step, r.source_flops / r.published_step / gpus / 1e12,
                    r.source_flops / r.predicted_step / gpus / 1e12, error_of(r) * 100);
        if (g_verbose) {
            const ptd::TimeBreakdown t = ptd::estimate_job(r.job).time;
            std::printf("    compute %.2f  tp %.2f  cp %.2f  ep %.2f  pp %.2f  bubble %.2f  dp %.2f  optimizer %.2f\n",
                        t.compute, t.tp_comm, t.cp_comm, t.ep_comm, t.pp_comm, t.bubble, t.dp_comm, t.optimizer);
        }
    }
    std::printf("\n");
}

// One line of a summary: a group's modelled runs, median |error| and the worst run.
struct Summary {
    std::string by, group, use;
    int runs = 0, skipped = 0;
    double median_abs = 0, worst = 0;  // worst keeps its sign
    std::string worst_run;
};

std::vector<Summary> summarise(const std::vector<Run>& runs, const std::string& by) {
    std::map<std::pair<std::string, std::string>, std::vector<const Run*>> groups;
    for (const Run& r : runs) {
        const std::string& key = by == "generation" ? r.generation : by == "framework" ? r.framework : r.source_tag;
        groups[{key, r.use}].push_back(&r);
    }
    std::vector<Summary> out;
    for (const auto& [key, members] : groups) {
        Summary s;
        s.by = by;
        s.group = key.first;
        s.use = key.second;
        std::vector<double> abs_errors;
        for (const Run* r : members) {
            if (!r->skip.empty()) {
                ++s.skipped;
                continue;
            }
            const double e = error_of(*r);
            abs_errors.push_back(std::fabs(e));
            if (std::fabs(e) >= std::fabs(s.worst)) {
                s.worst = e;
                s.worst_run = r->name;
            }
        }
        s.runs = (int)abs_errors.size();
        if (!abs_errors.empty()) {
            std::sort(abs_errors.begin(), abs_errors.end());
            const size_t n = abs_errors.size();
            s.median_abs = n % 2 ? abs_errors[n / 2] : 0.5 * (abs_errors[n / 2 - 1] + abs_errors[n / 2]);
        }
        out.push_back(s);
    }
    return out;
}

void print_summary(const std::vector<Run>& runs, const std::string& by) {
    std::printf("summary by %s\n%-16s %-9s %5s %7s %8s %8s  %s\n", by.c_str(), by.c_str(), "use", "runs", "skipped",
                "median", "worst", "worst run");
    for (const Summary& s : summarise(runs, by)) {
        if (s.runs == 0) {
            std::printf("%-16s %-9s %5d %7d %8s %8s\n", s.group.c_str(), s.use.c_str(), s.runs, s.skipped, "-", "-");
            continue;
        }
        std::printf("%-16s %-9s %5d %7d %7.1f%% %+7.1f%%  %s\n", s.group.c_str(), s.use.c_str(), s.runs, s.skipped,
                    s.median_abs * 100, s.worst * 100, s.worst_run.c_str());
    }
    std::printf("\n");
}

void print_memory(const std::vector<Run>& runs) {
    std::printf("measured memory (per GPU, GiB; the source's allocator view)\n%-52s %-13s %9s %9s %7s\n", "run", "kind",
                "measured", "predicted", "error");
    for (const Run& r : runs) {
        if (r.memory_gib_measured <= 0) continue;
        if (!r.skip.empty()) {
            std::printf("%-52s %-13s %9.1f  skipped: %s\n", r.name.c_str(), r.memory_kind.c_str(), r.memory_gib_measured,
                        r.skip.c_str());
            continue;
        }
        std::printf("%-52s %-13s %9.1f %9.1f %+6.1f%%\n", r.name.c_str(), r.memory_kind.c_str(), r.memory_gib_measured,
                    r.predicted_memory_gib, (r.predicted_memory_gib / r.memory_gib_measured - 1) * 100);
    }
    std::printf("\n");
}

std::string json_string(const std::string& s) {
    std::string o = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\', o += c;
        else if ((unsigned char)c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            o += b;
        } else o += c;
    }
    return o + "\"";
}

std::string json_number(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.6g", v);
    return b;
}

void print_json(const std::vector<Run>& runs) {
    const ptd::TimeModelConstants& c = ptd::time_model_constants();
    std::printf("{\"time_model\": {\"gemm_eff_max\": %s, \"gemm_half_dim\": %s, \"flash_eff\": %s, \"comm_eff\": %s, "
                "\"hbm_eff\": %s},\n \"runs\": [",
                json_number(c.gemm_eff_max).c_str(), json_number(c.gemm_half_dim).c_str(),
                json_number(c.flash_eff).c_str(), json_number(c.comm_eff).c_str(), json_number(c.hbm_eff).c_str());
    bool first = true;
    for (const Run& r : runs) {
        std::printf("%s\n  {\"name\": %s, \"source\": %s, \"source_tag\": %s, \"framework\": %s, \"generation\": %s, "
                    "\"use\": %s, \"gpus\": %d, \"layout\": %s",
                    first ? "" : ",", json_string(r.name).c_str(), json_string(r.source).c_str(),
                    json_string(r.source_tag).c_str(), json_string(r.framework).c_str(),
                    json_string(r.generation).c_str(), json_string(r.use).c_str(), r.job.world_size(),
                    json_string(layout_of(r)).c_str());
        first = false;
        if (!r.skip.empty()) std::printf(", \"skipped\": %s", json_string(r.skip).c_str());
        else
            std::printf(", \"published_s\": %s, \"predicted_s\": %s, \"error\": %s", json_number(r.published_step).c_str(),
                        json_number(r.predicted_step).c_str(), json_number(error_of(r)).c_str());
        if (r.memory_gib_measured > 0) {
            std::printf(", \"memory_gib_measured\": %s, \"memory_kind\": %s", json_number(r.memory_gib_measured).c_str(),
                        json_string(r.memory_kind).c_str());
            if (r.skip.empty()) std::printf(", \"memory_gib_predicted\": %s", json_number(r.predicted_memory_gib).c_str());
        }
        std::printf("}");
    }
    std::printf("],\n \"summary\": [");
    first = true;
    for (const char* by : {"generation", "source", "framework"})
        for (const Summary& s : summarise(runs, by)) {
            std::printf("%s\n  {\"by\": %s, \"group\": %s, \"use\": %s, \"runs\": %d, \"skipped\": %d", first ? "" : ",",
                        json_string(s.by).c_str(), json_string(s.group).c_str(), json_string(s.use).c_str(), s.runs,
                        s.skipped);
            first = false;
            if (s.runs > 0)
                std::printf(", \"median_abs_error\": %s, \"worst_error\": %s, \"worst_run\": %s",
                            json_number(s.median_abs).c_str(), json_number(s.worst).c_str(),
                            json_string(s.worst_run).c_str());
            std::printf("}");
        }
    std::printf("]}\n");
}

}  // namespace

int main(int argc, char** argv) {
    std::string path = std::string(PTD_SOURCE_DIR) + "/bench/accuracy/published_runs.toml";
    bool do_fit = false, json = false;
    std::string generation;
    const char* usage = "usage: bench_accuracy [RUNS.toml] [--generation A100|H100|H200|B200|V100] [--fit] [--verbose] [--json]\n";
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--fit") == 0) do_fit = true;
        else if (std::strcmp(argv[i], "--verbose") == 0) g_verbose = true;
        else if (std::strcmp(argv[i], "--json") == 0) json = true;
        else if (std::strcmp(argv[i], "--generation") == 0) {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "bench_accuracy: --generation needs a value (A100, H100, H200, B200, V100)\n");
                return 2;
            }
            generation = argv[++i];
            std::transform(generation.begin(), generation.end(), generation.begin(), ::toupper);
            if (generation != "A100" && generation != "H100" && generation != "H200" && generation != "B200" &&
                generation != "V100") {
                std::fprintf(stderr, "bench_accuracy: --generation \"%s\" is not one of A100, H100, H200, B200, V100\n",
                             argv[i]);
                return 2;
            }
        } else if (std::strcmp(argv[i], "--help") == 0) {
            std::printf("%s", usage);
            return 0;
        } else if (argv[i][0] == '-') {
            std::fprintf(stderr, "bench_accuracy: unknown option \"%s\"\n%s", argv[i], usage);
            return 2;
        } else path = argv[i];
    }
    auto presets = ptd::load_presets();
    if (!presets) {
        std::fprintf(stderr, "%s", presets.error().str().c_str());
        return 2;
    }
    std::vector<Run> runs = load_runs(path, *presets);
    if (!generation.empty())
        std::erase_if(runs, [&](const Run& r) { return r.generation != generation; });
    const ptd::TimeModelConstants& c = ptd::time_model_constants();
    if (do_fit) fit(runs);
    predict_all(runs);
    if (json) {
        print_json(runs);
        return 0;
    }
    std::printf("time model: gemm_eff_max %.2f, gemm_half_dim %.0f, flash_eff %.2f, comm_eff %.2f, hbm_eff %.2f\n",
                c.gemm_eff_max, c.gemm_half_dim, c.flash_eff, c.comm_eff, c.hbm_eff);
    for (int g = 0; g < ptd::kGpuGenerationCount; ++g)
        if (c.by_generation[g].gemm_eff_max > 0 || c.by_generation[g].flash_eff > 0)
            std::printf("  %s: gemm_eff_max %.2f, flash_eff %.2f\n", ptd::to_string((ptd::GpuGeneration)g),
                        c.kernel((ptd::GpuGeneration)g).gemm_eff_max, c.kernel((ptd::GpuGeneration)g).flash_eff);
    std::printf("published figures are converted to seconds per iteration (FLOP/s figures with the source's own FLOPs\n"
                "formula); TF columns are TFLOP/s per GPU in that convention (PaLM-style where the source gives none).\n"
                "layout: tp·pp·dp, c = context parallel, v = virtual stages, z3 = FSDP / ZeRO-3.\n\n");
    report(runs, "calibrate");
    report(runs, "check");
    print_summary(runs, "generation");
    print_summary(runs, "source");
    print_summary(runs, "framework");
    print_memory(runs);
    return 0;
}
