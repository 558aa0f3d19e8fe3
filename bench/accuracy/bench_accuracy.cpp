// bench_accuracy — predicted vs published training throughput. Reads
// bench/accuracy/published_runs.toml (the papers' own tables), turns each published figure
// into an iteration time with the source's own FLOPs formula, and prints our predicted
// iteration time and TFLOP/s next to it with the error per run and the median error,
// separately for the calibration runs and the checking runs.
//
//   bench_accuracy [RUNS.toml] [--fit] [--verbose]
//
// --fit searches the time model's constants (gemm_eff_max, gemm_half_dim, flash_eff) that
// minimise the mean squared log error over the calibration runs only, and prints them;
// the fitted values are then written into estimators/src/estimate.cpp by hand.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "ptd/estimate.h"
#include "ptd/presets.h"

namespace {

bool g_verbose = false;  // --verbose: print each run's time breakdown

struct Run {
    std::string name, source, use, convention, skip;  // skip: why the run cannot be modelled
    ptd::JobSpec job;
    double published_step = 0;  // seconds, from the source's own figure
    std::string published_what; // what the source stated
    double source_flops = 0;    // FLOPs per iteration as the source counts them
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

// A key's value, or `fallback` when absent. A value of the wrong type is an error naming
// the file, line and key (never a silent default).
std::string g_path;
template <class T>
T get(const toml::table& t, const char* key, T fallback) {
    const toml::node* n = t.get(key);
    if (!n) return fallback;
    std::optional<T> v = n->value<T>();
    if (!v) {
        std::fprintf(stderr, "%s:%d: run key \"%s\" has the wrong type\n", g_path.c_str(), (int)n->source().begin.line, key);
        std::exit(2);
    }
    return *v;
}

std::vector<Run> load_runs(const std::string& path, const ptd::PresetCatalog& presets) {
    std::vector<Run> runs;
    toml::table doc;
    try {
        doc = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
        std::fprintf(stderr, "%s:%d:%d: invalid TOML: %s\n", path.c_str(), (int)e.source().begin.line,
                     (int)e.source().begin.column, std::string(e.description()).c_str());
        std::exit(2);
    }
    const toml::array* arr = doc["run"].as_array();
    if (!arr) {
        std::fprintf(stderr, "%s: no [[run]] entries\n", path.c_str());
        std::exit(2);
    }
    g_path = path;
    for (const toml::node& n : *arr) {
        if (!n.is_table()) {
            std::fprintf(stderr, "%s:%d: each [[run]] must be a table\n", path.c_str(), (int)n.source().begin.line);
            std::exit(2);
        }
        const toml::table& t = *n.as_table();
        Run r;
        r.name = get<std::string>(t, "name", "?");
        r.source = get<std::string>(t, "source", "");
        r.use = get<std::string>(t, "use", "check");
        r.convention = get<std::string>(t, "flops_convention", "");
        ptd::JobSpec& j = r.job;
        ptd::ModelSpec& m = j.model;
        m.name = r.name;
        m.arch = get<std::string>(t, "arch", "gpt") == "llama" ? ptd::Arch::llama : ptd::Arch::gpt;
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
        if (const ptd::GpuSpec* g = presets.find_gpu(gpu)) j.cluster.gpu = *g;
        else r.skip = "unknown GPU preset " + gpu;
        j.cluster.gpus_per_node = get<int>(t, "gpus_per_node", 8);
        j.cluster.nodes = get<int>(t, "gpus", 8) / j.cluster.gpus_per_node;
        j.cluster.intra_gbps = j.cluster.gpu.link_gbps;
        j.cluster.inter_gbps = get<double>(t, "inter_gbps", 25.0);
        ptd::ParallelSpec& p = j.parallel;
        p.tp = get<int>(t, "tp", 1);
        p.pp = get<int>(t, "pp", 1);
        p.dp = get<int>(t, "dp", 1);
        p.cp = get<int>(t, "cp", 1);
        p.vpp = get<int>(t, "vpp", 1);
        p.zero = get<int>(t, "zero", 0);
        p.distributed_optimizer = get<bool>(t, "distributed_optimizer", false);
        p.sequence_parallel = get<bool>(t, "sequence_parallel", false);
        const std::string rc = get<std::string>(t, "recompute", "none");
        p.recompute = rc == "full" ? ptd::Recompute::full : rc == "selective" ? ptd::Recompute::selective : ptd::Recompute::none;
        // Uneven splits: balanced over model chunks, the shortfall on the first and last chunk.
        if (m.layers % (p.pp * p.vpp) != 0)
            p.layers_per_stage = ptd::balanced_layers_per_stage(m.layers, p.pp * p.vpp);
        ptd::TrainingSpec& tr = j.training;
        tr.micro_batch = get<int>(t, "micro_batch", 1);
        tr.global_batch = get<int>(t, "global_batch", 0);
        const std::string prec = get<std::string>(t, "precision", "bf16");
        if (prec == "fp8") r.skip = "fp8 training is not modelled (precision fp32/bf16/fp16 only)";
        tr.precision = prec == "fp16" ? ptd::Precision::fp16 : prec == "fp32" ? ptd::Precision::fp32 : ptd::Precision::bf16;
        tr.optimizer = ptd::Optimizer::adam;
        tr.flash_attention = get<bool>(t, "flash_attention", false);

        if (r.skip.empty()) {
            auto problems = ptd::validate_job(j);
            if (!problems.empty()) r.skip = "invalid layout: " + problems[0].key + ": " + problems[0].message;
        }
        const int gpus = j.world_size();
        r.source_flops = source_flops(r, r.convention);
        const double iter = get<double>(t, "iteration_s", 0.0);
        const double tflops = get<double>(t, "tflops_per_gpu", 0.0);
        const double mfu = get<double>(t, "mfu", 0.0);
        char buf[96];
        if (iter > 0) {
            r.published_step = iter;
            std::snprintf(buf, sizeof buf, "%.2f s/iter", iter);
        } else if (tflops > 0) {
            r.published_step = r.source_flops / (tflops * 1e12 * gpus);
            std::snprintf(buf, sizeof buf, "%.0f TFLOP/s", tflops);
        } else if (mfu > 0) {
            r.published_step = r.source_flops / (mfu * j.cluster.gpu.peak_tflops(tr.precision) * 1e12 * gpus);
            std::snprintf(buf, sizeof buf, "MFU %.1f%%", mfu * 100);
        } else {
            r.skip = "no published throughput figure";
        }
        r.published_what = buf;
        runs.push_back(std::move(r));
    }
    return runs;
}

double predict_step(const Run& r) { return ptd::estimate_job(r.job).step_s; }

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

void fit(std::vector<Run>& runs) {
    ptd::TimeModelConstants& c = ptd::time_model_constants();
    ptd::TimeModelConstants best = c;
    double best_err = 1e30;
    for (double eff = 0.50; eff <= 0.951; eff += 0.01)
        for (double d0 : {8.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 192.0, 256.0})
            for (double fl : {0.30, 0.35, 0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70}) {
                c.gemm_eff_max = eff;
                c.gemm_half_dim = d0;
                c.flash_eff = fl;
                double err = log_error_sq(runs);
                if (err < best_err) {
                    best_err = err;
                    best = c;
                }
            }
    c = best;
    std::printf("fit (calibration runs only): gemm_eff_max = %.2f, gemm_half_dim = %.0f, flash_eff = %.2f, "
                "rms log error %.3f\n\n",
                best.gemm_eff_max, best.gemm_half_dim, best.flash_eff, std::sqrt(best_err));
}

void report(const std::vector<Run>& runs, const char* use) {
    std::printf("%-36s %6s %-14s %-15s %9s %9s %8s %8s %7s\n", use, "GPUs", "layout", "published", "pub s",
                "pred s", "pub TF", "pred TF", "error");
    std::vector<double> errors;
    for (const Run& r : runs) {
        if (r.use != use) continue;
        const ptd::ParallelSpec& p = r.job.parallel;
        char layout[64];
        std::snprintf(layout, sizeof layout, "%d·%d·%d%s%s", p.tp, p.pp, p.dp, p.vpp > 1 ? "v" : "",
                      p.vpp > 1 ? std::to_string(p.vpp).c_str() : "");
        if (!r.skip.empty()) {
            std::printf("%-36s %6d %-14s skipped: %s\n", r.name.c_str(), r.job.world_size(), layout, r.skip.c_str());
            continue;
        }
        const double pred = predict_step(r);
        const double gpus = r.job.world_size();
        const double err = pred / r.published_step - 1;
        errors.push_back(std::fabs(err));
        std::printf("%-36s %6.0f %-14s %-15s %9.2f %9.2f %8.1f %8.1f %+6.1f%%\n", r.name.c_str(), gpus, layout,
                    r.published_what.c_str(), r.published_step, pred, r.source_flops / r.published_step / gpus / 1e12,
                    r.source_flops / pred / gpus / 1e12, err * 100);
        if (g_verbose) {
            const ptd::TimeBreakdown t = ptd::estimate_job(r.job).time;
            std::printf("    compute %.2f  tp %.2f  cp %.2f  ep %.2f  pp %.2f  bubble %.2f  dp %.2f  optimizer %.2f\n",
                        t.compute, t.tp_comm, t.cp_comm, t.ep_comm, t.pp_comm, t.bubble, t.dp_comm, t.optimizer);
        }
    }
    if (!errors.empty()) {
        std::sort(errors.begin(), errors.end());
        const size_t n = errors.size();
        const double median = n % 2 ? errors[n / 2] : 0.5 * (errors[n / 2 - 1] + errors[n / 2]);
        std::printf("%s: %zu runs, median |error| %.1f%%, max %.1f%%\n\n", use, n, median * 100, errors.back() * 100);
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::string path = std::string(PTD_SOURCE_DIR) + "/bench/accuracy/published_runs.toml";
    bool do_fit = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--fit") == 0) do_fit = true;
        else if (std::strcmp(argv[i], "--verbose") == 0) g_verbose = true;
        else if (std::strcmp(argv[i], "--help") == 0) {
            std::printf("usage: bench_accuracy [RUNS.toml] [--fit] [--verbose]\n");
            return 0;
        } else path = argv[i];
    }
    auto presets = ptd::load_presets();
    if (!presets) {
        std::fprintf(stderr, "%s", presets.error().str().c_str());
        return 2;
    }
    std::vector<Run> runs = load_runs(path, *presets);
    const ptd::TimeModelConstants& c = ptd::time_model_constants();
    if (do_fit) fit(runs);
    std::printf("time model: gemm_eff_max %.2f, gemm_half_dim %.0f, flash_eff %.2f, comm_eff %.2f, hbm_eff %.2f\n",
                c.gemm_eff_max, c.gemm_half_dim, c.flash_eff, c.comm_eff, c.hbm_eff);
    std::printf("published figures are converted to seconds per iteration with the source's own FLOPs formula;\n"
                "TF columns are TFLOP/s per GPU in that same convention.\n\n");
    report(runs, "calibrate");
    report(runs, "check");
    return 0;
}
