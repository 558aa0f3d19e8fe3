// bench_accuracy — predicted vs published training throughput. Reads
// bench/accuracy/published_runs.toml (the sources' own tables), turns each published figure
// into an iteration time (with the source's own FLOPs formula where the source gives FLOP/s),
// and prints our predicted iteration time next to it, per run and summarised per source,
// framework, GPU generation, size band, scale band, feature and, for MoE runs, MoE shape
// (median |error| and median signed error), separately for the calibration and the checking runs.
//
//   bench_accuracy [RUNS.toml] [--generation A100|H100|H200|B200|V100] [--fit | --fit-gemm-only] [--verbose] [--json]
//                  [--memory RUN] [--csv] [--leave-out KEY,...] [--line PREFIX]
//
// --csv (lean) prints one comma-separated line per modelled run: its layout, shape, stack
// settings, published and predicted step and every term of the predicted step, for reading
// the signed error against run features in a spreadsheet or script (docs/accuracy.md, "The
// optimistic lean").
//
// --memory RUN prints that run's per-stage memory breakdown (estimate_job's MemoryBreakdown,
// GiB) and nothing else: the way to see why a published run is predicted to overflow.
//
// --fit searches the time model's constants (gemm_eff_max, gemm_half_dim, flash_eff) that
// minimise the mean squared log error over the calibration runs only (of the selected
// generation, with --generation), and prints them; the fitted values are then written into
// the estimator by hand. --fit-gemm-only fits gemm_eff_max alone, each generation's flash_eff
// held where the estimator has it. --json prints the same results as one JSON object (for docs/accuracy.md).
//
// --leave-out KEY,KEY... (mbrecipe) reads every run as if it did not state those keys — how its
// stack ran (kernels, overlaps, fusions, graphs, the network; stack_detail_run_keys) — so each
// takes what a job naming only its stack and date (and recipe) gets: what a user who leaves
// them out is told (docs/accuracy.md, "What a user who names only the stack gets").
//
// --line PREFIX (mlperf31) fits step = a × micro-batches + b by least squares to the runs whose
// name starts with PREFIX, published and predicted: a family that keeps its layout and changes
// the micro-batches per step (the global batch against the DP size) splits its error into a part
// per micro-batch and a fixed part per step (docs/accuracy.md, mlperf31 and MegaScale sections).
//
// --residuals prints the error-bar table the estimators compile in
// (assets/accuracy/published_residuals.toml: per GPU generation and model kind, dense or MoE, the 10th / 90th percentiles of
// the check runs' signed error; ptd/model/speed_interval.h). --residuals-check FILE compares
// FILE with it and names the first line that differs (ctest residuals_table_current).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "ptd/model/estimate.h"
#include "run_file.h"
#include "ptd/spec/presets.h"
#include "published_run.h"
#include "residual_file.h"

namespace {

bool g_verbose = false;  // --verbose: print each run's time breakdown

double predict_step(const Run& r) { return ptd::estimate_job(r.job).step_s; }

void predict_all(std::vector<Run>& runs) {
    for (Run& r : runs) {
        if (!r.skip.empty()) continue;
        const ptd::Estimate e = ptd::estimate_job(r.job);
        r.predicted_step = e.step_s;
        r.micro_batches = e.micro_batches;
        // The source's allocator view, worst stage in that view (run_file.h, as bench_memory).
        if (!e.stages.empty() && !r.memory_kind.empty()) r.predicted_memory_gib = predicted_view_gib(e, r.memory_kind);
        if (!e.stages.empty()) r.predicted_total_gib = e.stages[e.worst_stage].mem.total() / (1024.0 * 1024 * 1024);
        r.capacity_gib = e.usable_bytes / (1024.0 * 1024 * 1024);
        r.predicted_fits = e.fits;
    }
}

// mlperf31: step time against micro-batches per step over the runs named PREFIX…, least
// squares, published and predicted (--line PREFIX). Exit 2, naming what is missing, when the
// runs do not span two micro-batch counts.
int print_line(const std::vector<Run>& runs, const std::string& prefix) {
    std::vector<const Run*> picked;
    std::set<int> counts;
    for (const Run& r : runs)
        if (r.skip.empty() && r.name.starts_with(prefix)) picked.push_back(&r), counts.insert(r.micro_batches);
    if (picked.size() < 2 || counts.size() < 2) {
        std::fprintf(stderr,
                     "bench_accuracy: --line \"%s\": %zu modelled run(s) start with it, over %zu micro-batch count(s); a line "
                     "needs two runs or more with two counts or more\n",
                     prefix.c_str(), picked.size(), counts.size());
        return 2;
    }
    struct Fit {
        double slope = 0, intercept = 0, worst = 0;
    };
    auto fit = [&](auto y) {
        const double n = (double)picked.size();
        double mx = 0, my = 0;
        for (const Run* r : picked) mx += r->micro_batches / n, my += y(*r) / n;
        double sxy = 0, sxx = 0;
        for (const Run* r : picked) sxy += (r->micro_batches - mx) * (y(*r) - my), sxx += (r->micro_batches - mx) * (r->micro_batches - mx);
        Fit f;
        f.slope = sxy / sxx;
        f.intercept = my - f.slope * mx;
        for (const Run* r : picked) f.worst = std::max(f.worst, std::abs(f.slope * r->micro_batches + f.intercept - y(*r)));
        return f;
    };
    const Fit pub = fit([](const Run& r) { return r.published_step; });
    const Fit pred = fit([](const Run& r) { return r.predicted_step; });
    std::printf("step against micro-batches per step over the %zu runs named %s*, least squares: step = a x micro-batches + b\n",
                picked.size(), prefix.c_str());
    std::printf("%-10s %22s %12s %18s\n", "", "a, per micro-batch", "b, per step", "largest residual");
    std::printf("%-10s %19.2f ms %10.3f s %15.1f ms\n", "published", pub.slope * 1e3, pub.intercept, pub.worst * 1e3);
    std::printf("%-10s %19.2f ms %10.3f s %15.1f ms\n\n", "predicted", pred.slope * 1e3, pred.intercept, pred.worst * 1e3);
    std::printf("%-50s %6s %13s %13s %8s\n", "run", "micro", "published s", "predicted s", "error");
    for (const Run* r : picked)
        std::printf("%-50s %6d %13.3f %13.3f %+7.1f%%\n", r->name.c_str(), r->micro_batches, r->published_step,
                    r->predicted_step, 100.0 * (r->predicted_step / r->published_step - 1.0));
    return 0;
}

// l405: a run that happened cannot be an OOM. The published runs the memory model predicts
// to overflow the GPUs they ran on, one line each (as bench_memory's last line counts them).
// oomnemo: one run's per-stage memory breakdown, GiB (--memory RUN).
int print_memory_breakdown(const std::vector<Run>& runs, const std::string& name) {
    auto it = std::find_if(runs.begin(), runs.end(), [&](const Run& r) { return r.name == name; });
    if (it == runs.end()) {
        std::fprintf(stderr, "bench_accuracy: --memory: no run named \"%s\" in the runs file\n", name.c_str());
        return 2;
    }
    if (!it->skip.empty()) {
        std::fprintf(stderr, "bench_accuracy: --memory: run \"%s\" is not modelled: %s\n", name.c_str(), it->skip.c_str());
        return 2;
    }
    const ptd::Estimate e = ptd::estimate_job(it->job);
    const double G = 1024.0 * 1024 * 1024;
    std::printf("%s: usable %.1f GiB, worst stage %d, %s\n", name.c_str(), e.usable_bytes / G, e.worst_stage,
                e.fits ? "fits" : "predicted OOM");
    std::printf("stage layers inflight   params    grads optimizer activations   temp  context   nccl   frag    total   host\n");
    for (const ptd::StageEstimate& s : e.stages) {
        const ptd::MemoryBreakdown& m = s.mem;
        std::printf("%5d %6d %8.2f %8.2f %8.2f %9.2f %11.2f %6.2f %8.2f %6.2f %6.2f %8.2f %6.2f\n", s.stage, s.layers,
                    s.in_flight, m.params / G, m.grads / G, m.optimizer / G, m.activations / G, m.temp / G,
                    m.cuda_context / G, m.nccl / G, m.fragmentation / G, m.total() / G, m.host / G);
    }
    for (const std::string& n : e.notes) std::printf("note: %s\n", n.c_str());
    return 0;
}

void print_oom(const std::vector<Run>& runs) {
    int modelled = 0, oom = 0;
    for (const Run& r : runs)
        if (r.skip.empty()) {
            ++modelled;
            if (!r.predicted_fits) ++oom;
        }
    std::printf("modelled %d runs; predicted OOM on the GPUs they ran on: %d\n", modelled, oom);
    for (const Run& r : runs)
        if (r.skip.empty() && !r.predicted_fits)
            std::printf("  %-52s predicted %.1f GiB > %.1f GiB usable\n", r.name.c_str(), r.predicted_total_gib, r.capacity_gib);
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
// hold_flash (--fit-gemm-only) fits gemm_eff_max alone and keeps every generation's flash_eff as
// the estimator has it: to price a change to the model without also moving the attention rate.
void fit(std::vector<Run>& runs, bool hold_flash) {
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
        const bool fit_flash = flash_runs >= 5 && !hold_flash;
        const double held_flash = c.by_generation[g].flash_eff;  // 0: the default
        ptd::KernelEfficiency best = c.kernel(gen);
        double best_err = 1e30;
        for (double eff = 0.40; eff <= 0.951; eff += 0.01)
            for (double fl = 0.20; fl <= 0.801; fl += 0.05) {
                if (!fit_flash && std::abs(fl - c.flash_eff) > 0.01) continue;
                c.by_generation[g] = ptd::KernelEfficiency{eff, fit_flash ? fl : hold_flash ? held_flash : 0.0};
                const double err = log_error_sq(mine);
                if (err < best_err) best_err = err, best = c.by_generation[g];
            }
        c.by_generation[g] = best;
        std::printf("fit %-9s (%zu calibration runs, %d with flash): gemm_eff_max = %.2f, flash_eff = %.2f%s, rms log error %.3f\n",
                    ptd::to_string(gen), mine.size(), flash_runs, best.gemm_eff_max, c.kernel(gen).flash_eff,
                    fit_flash ? "" : hold_flash ? " (held)" : " (default, not fitted)", std::sqrt(best_err));
    }
    std::printf("\n");
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

// lean: one CSV line per modelled run, the features the signed error can be read against
// (layout, shape, stack settings) and the terms of the predicted step (TimeBreakdown, seconds).
// Text fields hold no commas (run names, tags and enum words), so nothing is quoted.
void print_csv(const std::vector<Run>& runs) {
    std::printf("name,source_tag,framework,generation,use,gpus,nodes,gpus_per_node,tp,pp,dp,cp,ep,vpp,zero,"
                "distributed_optimizer,sequence_parallel,recompute,micro_batch,global_batch,micro_batches,seq_len,"
                "layers,hidden,params,active_params,experts,fp8,flash_attention,tp_comm_overlap,overlap_grad_reduce,"
                "overlap_param_gather,overlap_p2p_comm,torch_compile,inter_gbps,nics_per_node,published_s,"
                "predicted_s,error,compute_s,tp_s,cp_s,ep_s,pp_s,bubble_s,dp_s,optimizer_s,offload_s,"
                "dp_traffic_s,model_tflops_per_gpu,mfu,size_band,scale_band,features\n");
    for (const Run& r : runs) {
        if (!r.skip.empty()) continue;
        const ptd::JobSpec& j = r.job;
        const ptd::Estimate e = ptd::estimate_job(j);
        const ptd::TimeBreakdown& t = e.time;
        const double dp_traffic = e.stages.empty() ? 0.0 : e.stages[e.worst_stage].dp_s;
        std::string features;  // the run's summary-by-feature groups, joined by '+' (CSV text holds no commas)
        for (const std::string& f : features_of(r)) features += (features.empty() ? "" : "+") + f;
        const double active = (double)e.params.non_embedding -
                              (double)j.model.layers * (double)(e.params.mlp - e.params.mlp_active);
        std::printf("%s,%s,%s,%s,%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%s,%d,%d,%d,%d,%d,%d,%.6g,%.6g,%d,%s,%d,%d,%d,"
                    "%d,%d,%d,%.6g,%d,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%s,%s,%s\n",
                    r.name.c_str(), r.source_tag.c_str(), r.framework.c_str(), r.generation.c_str(), r.use.c_str(),
                    j.world_size(), j.cluster.nodes, j.cluster.gpus_per_node, j.parallel.tp, j.parallel.pp,
                    j.parallel.dp, j.parallel.cp, j.parallel.ep, j.parallel.vpp, j.parallel.zero,
                    (int)j.parallel.distributed_optimizer, (int)j.parallel.sequence_parallel,
                    ptd::to_string(j.parallel.recompute), j.training.micro_batch, j.training.global_batch,
                    e.micro_batches, j.model.seq_len, j.model.layers, j.model.hidden, (double)e.params.non_embedding,
                    active, j.model.experts, ptd::to_string(j.training.fp8), (int)j.training.flash_attention,
                    (int)j.parallel.tp_comm_overlap, (int)j.parallel.overlap_grad_reduce,
                    (int)j.parallel.overlap_param_gather, (int)j.parallel.overlap_p2p_comm,
                    (int)j.training.torch_compile, j.cluster.inter_gbps, j.cluster.nics_per_node, r.published_step,
                    r.predicted_step, error_of(r), t.compute, t.tp_comm, t.cp_comm, t.ep_comm, t.pp_comm, t.bubble,
                    t.dp_comm, t.optimizer, t.offload, dp_traffic, e.model_tflops_per_gpu, e.mfu, size_band_of(r).c_str(),
                    scale_band_of(r).c_str(), features.empty() ? "none" : features.c_str());
    }
}

// One line of a summary: a group's modelled runs, median |error|, median signed error (a group
// centred off zero points at a cause its runs share) and the worst run.
struct Summary {
    std::string by, group, use;
    int runs = 0, skipped = 0;
    double median_abs = 0, median_signed = 0, worst = 0;  // worst keeps its sign
    std::string worst_run;
};

// The summaries, in the order they are printed. "feature" puts a run in one group per feature
// it uses; "feature and stack" splits each feature by framework.
const std::vector<std::string>& summary_kinds() {
    static const std::vector<std::string> kinds = {"all",        "generation", "source",  "framework",
                                                   "size band",  "scale band", "feature", "feature and stack",
                                                   "moe shape"};
    return kinds;
}

// "moe shape": an MoE run in one group per property that sets its MoE cost — the local experts
// per rank (experts / ep: how many GEMMs, and how many host calls, one layer makes), the EP size,
// top-k, the token dispatcher, the CUDA graphs (what of the host's work they remove), the
// experts' dtype and the GPU generation — so the MoE rows' signed error reads against each
// (docs/accuracy.md "MoE rows by shape"). A dense run is in no group.
std::vector<std::string> moe_shape_groups(const Run& r) {
    const ptd::JobSpec& j = r.job;
    if (j.model.experts < 2) return {};
    const int ep = std::max(1, j.parallel.ep), local = j.model.experts / ep;
    std::vector<std::string> g;
    g.push_back(local <= 4 ? "local experts 1-4" : local <= 8 ? "local experts 5-8" : "local experts 9+");
    g.push_back(ep <= 8 ? "ep 2-8" : ep <= 32 ? "ep 16-32" : "ep 64+");
    g.push_back("top-k " + std::to_string(j.model.top_k));
    const ptd::MoeDispatcher d = j.parallel.moe_dispatcher;
    g.push_back(d == ptd::MoeDispatcher::deepep     ? "dispatcher deepep"
                : d == ptd::MoeDispatcher::hybridep ? "dispatcher hybridep"
                                                    : "dispatcher alltoall");
    const bool graphs = j.parallel.cuda_graph_impl != ptd::CudaGraphImpl::none;
    g.push_back(!graphs ? "graphs none"
                : (j.parallel.cuda_graph_scope & ptd::kGraphFullIteration) ? "graphs full-iteration"
                                                                           : "graphs per layer");
    g.push_back(j.training.fp8 != ptd::Fp8Recipe::none ? "experts fp8" : "experts 16-bit");
    g.push_back("gpu " + r.generation);
    return g;
}

std::vector<std::string> groups_of(const Run& r, const std::string& by) {
    if (by == "all") return {"all"};  // one group per use, every run
    if (by == "generation") return {r.generation};
    if (by == "framework") return {r.framework};
    if (by == "size band") return {size_band_of(r)};
    if (by == "scale band") return {scale_band_of(r)};
    if (by == "feature") return features_of(r);
    if (by == "moe shape") return moe_shape_groups(r);
    if (by == "feature and stack") {
        std::vector<std::string> g = features_of(r);
        for (std::string& f : g) f += ":" + r.framework;
        return g;
    }
    return {r.source_tag};
}

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Bands print smallest first; other groups in name order.
int band_rank(const std::string& group) {
    static const std::vector<std::string> order = {"<5B", "5-30B", "30-100B", ">=100B",
                                                   "<=64", "65-512", "513-4096", ">4096"};
    const auto it = std::find(order.begin(), order.end(), group);
    return it == order.end() ? 0 : (int)(it - order.begin());
}

std::vector<Summary> summarise(const std::vector<Run>& runs, const std::string& by) {
    std::map<std::tuple<int, std::string, std::string>, std::vector<const Run*>> groups;
    for (const Run& r : runs)
        for (const std::string& key : groups_of(r, by)) groups[{band_rank(key), key, r.use}].push_back(&r);
    std::vector<Summary> out;
    for (const auto& [key, members] : groups) {
        Summary s;
        s.by = by;
        s.group = std::get<1>(key);
        s.use = std::get<2>(key);
        std::vector<double> abs_errors, errors;
        for (const Run* r : members) {
            if (!r->skip.empty()) {
                ++s.skipped;
                continue;
            }
            const double e = error_of(*r);
            errors.push_back(e);
            abs_errors.push_back(std::fabs(e));
            if (std::fabs(e) >= std::fabs(s.worst)) {
                s.worst = e;
                s.worst_run = r->name;
            }
        }
        s.runs = (int)abs_errors.size();
        if (!abs_errors.empty()) {
            s.median_abs = median_of(abs_errors);
            s.median_signed = median_of(errors);
        }
        out.push_back(s);
    }
    return out;
}

void print_summary(const std::vector<Run>& runs, const std::string& by) {
    const std::vector<Summary> summaries = summarise(runs, by);
    int width = 16;  // a generation or source tag; feature groups are longer
    for (const Summary& s : summaries) width = std::max(width, (int)s.group.size());
    std::printf("summary by %s\n%-*s %-9s %5s %7s %8s %8s %8s  %s\n", by.c_str(), width, by.c_str(), "use", "runs",
                "skipped", "median", "signed", "worst", "worst run");
    for (const Summary& s : summaries) {
        if (s.runs == 0) {
            std::printf("%-*s %-9s %5d %7d %8s %8s %8s\n", width, s.group.c_str(), s.use.c_str(), s.runs, s.skipped, "-",
                        "-", "-");
            continue;
        }
        std::printf("%-*s %-9s %5d %7d %7.1f%% %+7.1f%% %+7.1f%%  %s\n", width, s.group.c_str(), s.use.c_str(), s.runs,
                    s.skipped, s.median_abs * 100, s.median_signed * 100, s.worst * 100, s.worst_run.c_str());
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
    for (const std::string& by : summary_kinds())
        for (const Summary& s : summarise(runs, by)) {
            std::printf("%s\n  {\"by\": %s, \"group\": %s, \"use\": %s, \"runs\": %d, \"skipped\": %d", first ? "" : ",",
                        json_string(s.by).c_str(), json_string(s.group).c_str(), json_string(s.use).c_str(), s.runs,
                        s.skipped);
            first = false;
            if (s.runs > 0)
                std::printf(", \"median_abs_error\": %s, \"median_signed_error\": %s, \"worst_error\": %s, \"worst_run\": %s",
                            json_number(s.median_abs).c_str(), json_number(s.median_signed).c_str(),
                            json_number(s.worst).c_str(),
                            json_string(s.worst_run).c_str());
            std::printf("}");
        }
    std::printf("]}\n");
}

// The check runs only: the calibration runs fitted the constants, so their errors would make
// the interval look tighter than a user's job meets it.
ptd::ResidualTable residuals_of(const std::vector<Run>& runs) {
    std::vector<ptd::RunResidual> errors;
    for (const Run& r : runs) {
        if (!r.skip.empty() || r.use != "check") continue;
        std::string gpu = r.job.cluster.gpu.name.substr(0, r.job.cluster.gpu.name.find('-'));
        std::transform(gpu.begin(), gpu.end(), gpu.begin(), ::toupper);
        errors.push_back({r.job.cluster.gpu.generation, gpu, error_of(r), ptd::model_kind(r.job), r.job.model.seq_len});
    }
    return ptd::residual_table(errors);
}

}  // namespace

int main(int argc, char** argv) {
    std::string path = std::string(PTD_SOURCE_DIR) + "/bench/accuracy/published_runs.toml";
    bool do_fit = false, fit_gemm_only = false, json = false, csv = false, residuals = false;
    std::string generation, memory_run, residuals_check, line_prefix;
    std::vector<std::string> leave_out;  // mbrecipe: --leave-out KEY,KEY...

    const char* usage = "usage: bench_accuracy [RUNS.toml] [--generation A100|H100|H200|B200|V100] [--fit | --fit-gemm-only] [--verbose] [--json] [--memory RUN] [--csv] [--residuals | --residuals-check FILE] [--leave-out KEY,...] [--line PREFIX]\n";
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--fit") == 0) do_fit = true;
        else if (std::strcmp(argv[i], "--fit-gemm-only") == 0) do_fit = fit_gemm_only = true;
        else if (std::strcmp(argv[i], "--verbose") == 0) g_verbose = true;
        else if (std::strcmp(argv[i], "--json") == 0) json = true;
        else if (std::strcmp(argv[i], "--csv") == 0) csv = true;  // lean
        else if (std::strcmp(argv[i], "--residuals") == 0) residuals = true;
        else if (std::strcmp(argv[i], "--residuals-check") == 0) {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "bench_accuracy: --residuals-check needs the committed table's path\n");
                return 2;
            }
            residuals = true;
            residuals_check = argv[++i];
        }
        else if (std::strcmp(argv[i], "--leave-out") == 0) {
            auto allowed_text = [] {
                std::string all;
                for (const std::string& k : stack_detail_run_keys()) all += (all.empty() ? "" : ", ") + k;
                return all;
            };
            if (i + 1 >= argc) {
                std::fprintf(stderr, "bench_accuracy: --leave-out needs a comma-separated list of run keys; allowed: %s\n",
                             allowed_text().c_str());
                return 2;
            }
            const std::string list = argv[++i];
            for (size_t at = 0; at <= list.size();) {
                const size_t comma = std::min(list.find(',', at), list.size());
                const std::string key = list.substr(at, comma - at);
                const auto& keys = stack_detail_run_keys();
                if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
                    std::fprintf(stderr, "bench_accuracy: --leave-out \"%s\": \"%s\" is not a stack-detail run key; allowed: %s\n",
                                 list.c_str(), key.c_str(), allowed_text().c_str());
                    return 2;
                }
                leave_out.push_back(key);
                at = comma + 1;
            }
        }
        else if (std::strcmp(argv[i], "--line") == 0) {  // mlperf31
            if (i + 1 >= argc) {
                std::fprintf(stderr, "bench_accuracy: --line needs a run-name prefix (e.g. mlperf31-gpt3-175b)\n");
                return 2;
            }
            line_prefix = argv[++i];
            if (line_prefix.empty()) {
                std::fprintf(stderr, "bench_accuracy: --line \"\": the prefix is empty; give the start of run names (e.g. mlperf31-gpt3-175b)\n");
                return 2;
            }
        }
        else if (std::strcmp(argv[i], "--memory") == 0) {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "bench_accuracy: --memory needs a run name\n");
                return 2;
            }
            memory_run = argv[++i];
        }
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
        } else take_bench_arg("bench_accuracy", usage, argv[i], path);
    }
    if (!line_prefix.empty() && (json || csv || residuals || !memory_run.empty())) {
        std::fprintf(stderr, "bench_accuracy: --line prints its own table; it does not combine with --json, --csv, --residuals or --memory\n");
        return 2;
    }
    const ptd::PresetCatalog presets = presets_or_exit();
    std::vector<Run> runs = load_runs(path, presets, leave_out);
    if (!generation.empty())
        std::erase_if(runs, [&](const Run& r) { return r.generation != generation; });
    if (!memory_run.empty()) return print_memory_breakdown(runs, memory_run);
    const ptd::TimeModelConstants& c = ptd::time_model_constants();
    if (do_fit) fit(runs, fit_gemm_only);
    predict_all(runs);
    if (json) {
        print_json(runs);
        return 0;
    }
    if (csv) {  // lean
        print_csv(runs);
        return 0;
    }
    if (!line_prefix.empty()) return print_line(runs, line_prefix);  // mlperf31
    if (residuals) {
        if (!generation.empty() || do_fit) {
            std::fprintf(stderr, "bench_accuracy: --residuals takes every generation and the committed constants "
                                 "(no --generation, no --fit)\n");
            return 2;
        }
        const std::string table = ptd::residual_table_toml(residuals_of(runs));
        if (!residuals_check.empty()) return check_residual_file("bench_accuracy", table, residuals_check);
        std::printf("%s", table.c_str());
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
                "layout: tp·pp·dp, c = context parallel, v = virtual stages, e = expert parallel, z3 = FSDP / ZeRO-3.\n\n");
    report(runs, "calibrate");
    report(runs, "check");
    for (const std::string& by : summary_kinds()) print_summary(runs, by);
    print_memory(runs);
    print_oom(runs);  // l405
    return 0;
}
