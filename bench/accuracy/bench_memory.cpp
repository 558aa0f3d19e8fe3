// bench_memory — predicted vs MEASURED per-GPU memory of published training runs. Reads
// bench/accuracy/published_memory.toml (each run's own configuration and measured figure)
// and compares the estimator's worst stage with it, in the allocator's view the source
// measured:
//   max_reserved   model states + activations + temporary buffers + fragmentation
//                  (the caching allocator's segments; no CUDA context, no NCCL buffers)
//   max_allocated  model states + activations + temporary buffers (live tensors only)
//   nvidia-smi     everything, CUDA context and NCCL buffers included
// It prints the error per run, the median and worst |error| per source and overall, and
// whether each layout is predicted to fit on the GPUs it ran on (a run that happened must
// fit). A figure is the maximum over all GPUs unless the run says measured_on = "last-rank"
// (Megatron-LM logs memory to TensorBoard on the last global rank only, the last
// pipeline stage): then it is compared with the last stage. A run names a model preset
// (`model`) or the model's own shape (arch, layers, hidden, heads, kv_heads, ffn_hidden,
// vocab, tied_embeddings, dropout; Megatron-LM's defaults where left out), with the MoE, MLA and
// MTP keys published_runs.toml has (run_file.h read_run_moe_mla_shape, read_run_expert_layout),
// Transformer Engine's FP8 (fp8, fp8_param_gather) and its userbuffers TP overlap
// (tp_comm_overlap), and PyTorch's cuBLAS workspace where the run pins it (cublas_workspace_mib).
//
// --residuals prints the memory peak's error-bar table the estimators compile in
// (assets/accuracy/memory_residuals.toml: per GPU generation and model kind, the 10th / 90th
// percentiles of every modelled run's signed error; ptd/model/speed_interval.h MemoryInterval);
// --residuals-check FILE compares FILE with it (ctest memory_residuals_table_current).
//
//   bench_memory [RUNS.toml] [--verbose] [--residuals | --residuals-check FILE]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "ptd/model/estimate.h"
#include "ptd/spec/presets.h"
#include "residual_file.h"
#include "run_file.h"

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Run {
    std::string name, source, table, framework, kind, skip;  // skip: why the run cannot be modelled
    bool compile = false, float8 = false;
    bool last_rank = false;  // measured on the last global rank (the last pipeline stage)
    double measured_gib = 0, device_gib = 0;
    ptd::JobSpec job;
};

std::string g_path;

// A key's value, or `fallback` when absent (run_file.h run_key: a wrong type is an error
// naming the file, line and key).
template <class T>
T get(const toml::table& t, const char* key, T fallback) {
    return run_key<T>(g_path, t, key, fallback);
}

[[noreturn]] void bad_value(const toml::table& t, const char* key, const std::string& got, const char* allowed) {
    const toml::node* n = t.get(key);
    std::fprintf(stderr, "%s:%d: run key \"%s\" = \"%s\"; allowed: %s\n", g_path.c_str(),
                 n ? (int)n->source().begin.line : 0, key, got.c_str(), allowed);
    std::exit(2);
}

// What the framework that produced the measurement runs, as job keys.
void apply_framework(const toml::table& t, Run& r) {
    if (r.framework != "torchtitan" && r.framework != "megatron" && r.framework != "deepspeed")
        bad_value(t, "framework", r.framework, "\"torchtitan\", \"megatron\" or \"deepspeed\"");
    const std::string style = get<std::string>(t, "recompute_style", "megatron");
    if (style != "megatron" && style != "torchtitan-op")
        bad_value(t, "recompute_style", style, "\"megatron\" or \"torchtitan-op\"");
    r.job.parallel.recompute_style =
        style == "torchtitan-op" ? ptd::RecomputeStyle::torchtitan_op : ptd::RecomputeStyle::megatron;
    // torchtitan computes the loss as F.cross_entropy(pred.float(), labels) (train.py,
    // components/loss.py); Megatron-LM and Megatron-DeepSpeed use the vocab-parallel one.
    r.job.estimate.cross_entropy = r.framework == "torchtitan" ? pytorch_cross_entropy(get<bool>(t, "compiled_loss", false))
                                                              : ptd::CrossEntropyImpl::megatron;
    // The stack's runtime (memory.cpp selects torchtitan's DTensor TP, loss_parallel and
    // torch.distributed.pipelining by it), torch.compile and torchao's float8 (tensorwise,
    // the recipe of both sources' runs), as bench_accuracy hands them to the job.
    r.job.training.framework = r.framework == "torchtitan" ? ptd::Framework::torchtitan
                             : r.framework == "deepspeed"  ? ptd::Framework::deepspeed
                                                           : ptd::Framework::megatron;
    r.job.training.torch_compile = r.compile && r.framework == "torchtitan";
    if (r.float8) r.job.training.fp8 = ptd::Fp8Recipe::tensorwise;
    // Transformer Engine's FP8 (Megatron --fp8-recipe delayed / tensorwise, i.e. TE's
    // Float8CurrentScaling / mxfp8) and Megatron's --fp8-param-gather (FP8 weights are the
    // parameters: no bf16 copy, the all-gather carries FP8).
    const std::string te_fp8 = run_word(g_path, t, "fp8", "none", {"none", "delayed", "current", "mxfp8"});
    if (te_fp8 != "none") {
        if (r.framework != "megatron") bad_value(t, "fp8", te_fp8, "\"none\" unless framework = \"megatron\" (torchtitan: float8)");
        if (r.float8) bad_value(t, "fp8", te_fp8, "\"none\" with float8 = true (one FP8 recipe per run)");
        r.job.training.fp8 = te_fp8 == "delayed" ? ptd::Fp8Recipe::delayed
                           : te_fp8 == "current" ? ptd::Fp8Recipe::current
                                                 : ptd::Fp8Recipe::mxfp8;
    }
    r.job.training.fp8_param_gather = get<bool>(t, "fp8_param_gather", false);
    if (r.job.training.fp8_param_gather && te_fp8 == "none")
        bad_value(t, "fp8_param_gather", "true", "true only with fp8 = \"delayed\", \"current\" or \"mxfp8\"");
}

// A model given by its shape (run_file.h read_run_model_shape), which must be whole.
void read_model_shape(const toml::table& t, ptd::ModelSpec& m) {
    m.name = get<std::string>(t, "name", "?");
    read_run_model_shape(g_path, t, m);
    read_run_moe_mla_shape(g_path, t, m);  // experts, top_k, MLA, MTP (run_file.h)
    if (m.layers < 1 || m.hidden < 1 || m.heads < 1)
        bad_value(t, "layers", std::to_string(m.layers) + " layers, hidden " + std::to_string(m.hidden) + ", " +
                                   std::to_string(m.heads) + " heads", "layers, hidden and heads >= 1");
}

std::vector<Run> load_runs(const std::string& path, const ptd::PresetCatalog& presets) {
    std::vector<Run> runs;
    toml::table doc;
    const std::vector<const toml::table*> tables = load_run_tables(path, doc);
    g_path = path;
    for (const toml::table* table : tables) {
        const toml::table& t = *table;
        Run r;
        r.name = get<std::string>(t, "name", "?");
        r.source = get<std::string>(t, "source", "");
        r.table = get<std::string>(t, "table", "");
        r.framework = get<std::string>(t, "framework", "");
        r.kind = get<std::string>(t, "memory_kind", "");
        r.compile = get<bool>(t, "compile", false);
        r.float8 = get<bool>(t, "float8", false);
        if (r.kind != "max_reserved" && r.kind != "max_allocated" && r.kind != "nvidia-smi")
            bad_value(t, "memory_kind", r.kind, "\"max_reserved\", \"max_allocated\" or \"nvidia-smi\"");
        r.measured_gib = get<double>(t, "measured_gib", 0.0);
        if (!(r.measured_gib > 0)) bad_value(t, "measured_gib", std::to_string(r.measured_gib), "a figure > 0 GiB");

        ptd::JobSpec& j = r.job;
        const std::string model = get<std::string>(t, "model", "");
        if (model.empty() && t.get("layers")) read_model_shape(t, j.model);
        else if (const ptd::ModelSpec* m = presets.find_model(model)) j.model = *m;
        else bad_value(t, "model", model, "a model preset from assets/presets/models.toml, or the shape keys (layers, hidden, heads, ...)");
        j.model.seq_len = get<int>(t, "seq_len", j.model.seq_len);
        const std::string on = get<std::string>(t, "measured_on", "max-over-gpus");
        if (on != "max-over-gpus" && on != "last-rank") bad_value(t, "measured_on", on, "\"max-over-gpus\" or \"last-rank\"");
        r.last_rank = on == "last-rank";
        const std::string gpu = get<std::string>(t, "gpu", "");
        if (const ptd::GpuSpec* g = presets.find_gpu(gpu)) j.cluster.gpu = *g;
        else bad_value(t, "gpu", gpu, "a GPU preset from assets/presets/gpus.toml");
        // The device the run had (e.g. H100 96 GB, not the 80 GB preset).
        j.cluster.gpu.memory_gib = get<double>(t, "memory_gib", j.cluster.gpu.memory_gib);
        r.device_gib = j.cluster.gpu.memory_gib;
        j.cluster.gpus_per_node = get<int>(t, "gpus_per_node", 8);
        const int gpus = get<int>(t, "gpus", 8);
        j.cluster.gpus_per_node = std::min(j.cluster.gpus_per_node, gpus);
        j.cluster.nodes = gpus / j.cluster.gpus_per_node;
        j.cluster.intra_gbps = j.cluster.gpu.link_gbps;
        j.cluster.inter_gbps = get<double>(t, "inter_gbps", 50.0);
        // The layout keys, read as published_runs.toml's are (run_file.h read_run_layout; the
        // measuring stacks' unstated keys are off).
        read_run_layout(g_path, t, j.model.layers, RunLayoutDefaults{}, j.parallel);
        read_run_expert_layout(g_path, t, j.model, j.parallel);  // ep, expert_tp, the dispatcher
        // Transformer Engine's userbuffers TP overlap (Megatron --tp-comm-overlap): its GEMM workspace.
        j.parallel.tp_comm_overlap = get<bool>(t, "tp_comm_overlap", false);
        // PyTorch's cuBLAS workspace where the run pins it (CUBLAS_WORKSPACE_CONFIG, in MiB:
        // ":4096:8" = 8 × 4096 KiB = 32); unset = the GPU's default (memory.cpp).
        if (t.get("cublas_workspace_mib")) {
            const double mib = get<double>(t, "cublas_workspace_mib", -1.0);
            if (!(mib >= 0 && mib <= 65536))
                bad_value(t, "cublas_workspace_mib", std::to_string(mib), "0 .. 65536 (MiB)");
            j.estimate.cublas_workspace_mib = mib;
        }
        const ptd::ParallelSpec& p = j.parallel;
        ptd::TrainingSpec& tr = j.training;
        tr.micro_batch = get<int>(t, "micro_batch", 1);
        tr.global_batch = get<int>(t, "global_batch", tr.micro_batch * p.dp);
        const std::string prec = get<std::string>(t, "precision", "bf16");
        if (prec != "bf16" && prec != "fp16" && prec != "fp32")
            bad_value(t, "precision", prec, "\"bf16\", \"fp16\" or \"fp32\"");
        tr.precision = prec == "fp16" ? ptd::Precision::fp16 : prec == "fp32" ? ptd::Precision::fp32 : ptd::Precision::bf16;
        tr.optimizer = ptd::Optimizer::adamw;
        tr.flash_attention = get<bool>(t, "flash_attention", true);
        apply_framework(t, r);

        if (j.world_size() != gpus) r.skip = "layout does not multiply to the GPU count";
        if (r.skip.empty()) {
            auto problems = ptd::validate_job(j);
            if (!problems.empty()) r.skip = "not a PTD layout: " + problems[0].key + ": " + problems[0].message;
        }
        runs.push_back(std::move(r));
    }
    return runs;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The predicted peak in the view the run measured (its last stage for a last-rank figure).
double predicted_gib(const Run& r, const ptd::Estimate& est) {
    return r.last_rank ? predicted_view_bytes(est.stages.back().mem, r.kind) / kGiB : predicted_view_gib(est, r.kind);
}

// Every modelled run's signed error, by GPU generation and model kind: the memory table.
ptd::ResidualTable memory_residuals_of(const std::vector<Run>& runs) {
    std::vector<ptd::RunResidual> errors;
    for (const Run& r : runs) {
        if (!r.skip.empty()) continue;
        std::string gpu = r.job.cluster.gpu.name.substr(0, r.job.cluster.gpu.name.find('-'));
        std::transform(gpu.begin(), gpu.end(), gpu.begin(), ::toupper);
        const double err = predicted_gib(r, ptd::estimate_job(r.job)) / r.measured_gib - 1.0;
        errors.push_back({r.job.cluster.gpu.generation, gpu, err, ptd::model_kind(r.job)});
    }
    return ptd::residual_table(errors);
}

const char* view_of(const std::string& kind) {
    if (kind == "max_allocated") return "allocated: states + activations + temp";
    if (kind == "max_reserved") return "reserved: allocated + fragmentation; no CUDA context, no NCCL";
    return "nvidia-smi: reserved + CUDA context + NCCL buffers";
}

}  // namespace

int main(int argc, char** argv) {
    std::string path = std::string(PTD_SOURCE_DIR) + "/bench/accuracy/published_memory.toml";
    bool verbose = false, residuals = false;
    std::string residuals_check;
    const char* usage = "usage: bench_memory [RUNS.toml] [--verbose] [--residuals | --residuals-check FILE]\n";
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--verbose")) verbose = true;
        else if (!std::strcmp(argv[i], "--residuals")) residuals = true;
        else if (!std::strcmp(argv[i], "--residuals-check")) {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "bench_memory: --residuals-check needs the committed table's path\n%s", usage);
                return 2;
            }
            residuals = true;
            residuals_check = argv[++i];
        } else take_bench_arg("bench_memory", usage, argv[i], path);
    }
    const ptd::PresetCatalog presets = presets_or_exit();
    std::vector<Run> runs = load_runs(path, presets);
    if (residuals) {
        const std::string table = ptd::residual_table_toml(memory_residuals_of(runs), ptd::IntervalSource::measured_memory);
        if (!residuals_check.empty()) return check_residual_file("bench_memory", table, residuals_check);
        std::fputs(table.c_str(), stdout);
        return 0;
    }

    std::map<std::string, std::vector<double>> by_source;
    std::vector<double> all, no_compile;
    int modelled = 0, fit_fail = 0;
    std::printf("%-38s %5s %-13s %-12s %9s %9s %8s  %s\n", "run", "GPUs", "layout", "kind", "meas GiB",
                "pred GiB", "error", "fits device");
    for (const Run& r : runs) {
        char layout[48];
        const ptd::ParallelSpec& p = r.job.parallel;
        std::snprintf(layout, sizeof layout, "%d·%d·%d·%d%s%s", p.tp, p.pp, p.dp, p.cp,
                      p.vpp > 1 ? ("v" + std::to_string(p.vpp)).c_str() : "",
                      p.ep > 1 ? ("e" + std::to_string(p.ep)).c_str() : "");
        if (!r.skip.empty()) {
            std::printf("%-38s %5d %-13s skipped: %s\n", r.name.c_str(), r.job.world_size(), layout, r.skip.c_str());
            continue;
        }
        const ptd::Estimate est = ptd::estimate_job(r.job);
        const ptd::StageEstimate& w = est.stages[(size_t)est.worst_stage];
        // The measured figure is the maximum over all GPUs: compare with the stage whose
        // prediction in the measured view is largest (or the last stage, measured_on = "last-rank").
        const double pred = predicted_gib(r, est);
        const double err = pred / r.measured_gib - 1.0;
        ++modelled;
        if (!est.fits) ++fit_fail;
        by_source[r.source].push_back(std::fabs(err));
        all.push_back(std::fabs(err));
        if (!r.compile) no_compile.push_back(std::fabs(err));
        std::printf("%-38s %5d %-13s %-12s %9.1f %9.1f %+7.1f%%  %s %.1f of %.1f GiB%s%s\n", r.name.c_str(),
                    r.job.world_size(), layout, r.kind.c_str(), r.measured_gib, pred, 100 * err,
                    est.fits ? "fits" : "OOM", w.mem.total() / kGiB, r.device_gib, r.compile ? " · compile" : "",
                    r.float8                                  ? " · float8"
                    : r.job.training.fp8 != ptd::Fp8Recipe::none ? (std::string(" · TE fp8 ") + ptd::to_string(r.job.training.fp8)).c_str()
                                                                  : "");
        if (verbose) {  // the stage compared: the last one for a last-rank figure, else the worst
            const ptd::StageEstimate& c = r.last_rank ? est.stages.back() : w;
            const ptd::MemoryBreakdown& m = c.mem;
            std::printf("    %s stage %d: params %.2f grads %.2f optimizer %.2f activations %.2f temp %.2f "
                        "frag %.2f ctx %.2f nccl %.2f GiB\n    view: %s\n",
                        r.last_rank ? "last" : "worst", c.stage, m.params / kGiB, m.grads / kGiB, m.optimizer / kGiB, m.activations / kGiB,
                        m.temp / kGiB, m.fragmentation / kGiB, m.cuda_context / kGiB, m.nccl / kGiB,
                        view_of(r.kind));
        }
    }
    std::printf("\nper source                                                    runs  median |err|  worst |err|\n");
    for (const auto& [src, errs] : by_source)
        std::printf("%-60.60s %5zu %12.1f%% %11.1f%%\n", src.c_str(), errs.size(), 100 * median(errs),
                    100 * *std::max_element(errs.begin(), errs.end()));
    if (!all.empty()) {
        std::printf("%-60s %5zu %12.1f%% %11.1f%%\n", "all modelled runs", all.size(), 100 * median(all),
                    100 * *std::max_element(all.begin(), all.end()));
        if (!no_compile.empty())
            std::printf("%-60s %5zu %12.1f%% %11.1f%%\n", "without torch.compile", no_compile.size(),
                        100 * median(no_compile), 100 * *std::max_element(no_compile.begin(), no_compile.end()));
    }
    std::printf("modelled %d of %zu runs; predicted OOM on the GPUs they ran on: %d\n", modelled, runs.size(),
                fit_fail);
    return 0;
}
