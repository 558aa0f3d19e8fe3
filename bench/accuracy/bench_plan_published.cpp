// bench_plan_published — the planner on every published run's model and cluster. For each run
// of bench/accuracy/published_runs.toml that bench_accuracy models, plan_layouts searches the
// same model, GPUs, global batch, sequence, precision / FP8 and framework, and this prints the
// published layout's predicted tokens/s and its rank among the planner's fitting layouts (or
// why the search does not hold it), the planner's best, the ratio and the planner's one-line
// "why". The summary counts the runs whose published layout the planner keeps within 2% of
// its best and lists the largest claimed gains: where a gain over a well-tuned published
// layout is large, the time model (not the layout) is the first suspect (docs/accuracy.md).
//
//   bench_plan_published [RUNS.toml] [--run SUBSTRING] [--max-micro-batch N] [--verbose]
//
// --verbose adds both layouts' time breakdowns (seconds per step) and peak memory.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ptd/model/estimate.h"
#include "ptd/plan/planner.h"
#include "ptd/spec/pipeline_layout.h"
#include "ptd/spec/presets.h"
#include "published_run.h"
#include "run_file.h"

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// "8·2·16e8x1v4 mb1 dopt sp rc-sel" — the choice the planner made, in one token-ish string.
std::string choice_label(const ptd::LayoutChoice& c) {
    std::string s = std::to_string(c.tp) + "·" + std::to_string(c.pp) + "·" + std::to_string(c.dp);
    if (c.cp > 1) s += "c" + std::to_string(c.cp);
    if (c.ep > 1) s += "e" + std::to_string(c.ep);
    if (c.etp > 0 && c.etp != c.tp) s += "x" + std::to_string(c.etp);  // etp: expert_tp ≠ tp (MoE parallel folding)
    if (c.vpp > 1) s += "v" + std::to_string(c.vpp);
    s += " mb" + std::to_string(c.micro_batch);
    s += c.distributed_optimizer ? " dopt" : c.zero > 0 ? " z" + std::to_string(c.zero) : "";
    if (c.sequence_parallel) s += " sp";
    if (c.recompute != ptd::Recompute::none) s += c.recompute == ptd::Recompute::full ? " rc-full" : " rc-sel";
    if (c.order > 0) s += " o" + std::to_string(c.order);
    if (c.offload_optimizer != ptd::OffloadDevice::none) s += c.offload_params ? " off-op" : " off-o";
    return s;
}

// Why the planner's search does not hold the published layout, the first reason found, from
// the search-space rules of docs/planner.md ("" when it should be there).
std::string outside_space(const ptd::JobSpec& job, const ptd::PlanOptions& o) {
    const ptd::ParallelSpec& p = job.parallel;
    const ptd::LayoutChoice own = ptd::layout_choice_of(job);
    if (own.order < 0) return "rank order \"" + p.order + "\" is not one of the planner's orders";
    if (job.training.micro_batch > o.max_micro_batch)
        return "micro-batch " + std::to_string(job.training.micro_batch) + " > max_micro_batch " +
               std::to_string(o.max_micro_batch);
    if (p.tp > job.cluster.gpus_per_node && !o.tp_beyond_node) return "tp beyond a node";
    // ttfsdp: torchtitan runs ZeRO-2/3 with pipeline parallelism (its FSDP2 under pipelining).
    const ptd::FrameworkRules rules = ptd::search_rules(job, o);
    if (p.zero >= 2 && p.pp > 1 && !(p.zero == 2 ? rules.zero2_with_pp : rules.zero3_with_pp))
        return "ZeRO-2/3 with pipeline parallelism";
    if (!p.layers_per_stage.empty()) {
        // ttsplit: the split the search passes — torchtitan's own, else the balanced one.
        const int chunks = p.pp * std::max(p.vpp, 1);
        const std::vector<int> searched = job.training.framework == ptd::Framework::torchtitan
                                              ? ptd::torchtitan_default_split(job.model.layers, chunks, job.training.framework_version)
                                              : ptd::balanced_layers_per_stage(job.model.layers, chunks);
        if (p.layers_per_stage != searched) return "custom layers_per_stage";
    }
    if (p.vpp > 1 && job.model.layers % p.pp == 0 && (job.model.layers / p.pp) % p.vpp != 0)
        return "vpp " + std::to_string(p.vpp) + " does not divide layers/pp";
    if (p.cp > 1 && job.model.seq_len % (2 * p.cp) != 0) return "seq_len not divisible by 2·cp";
    if (p.sequence_parallel && p.tp == 1) return "sequence parallelism without TP";
    return "";
}

// A torchtitan run's model under its preset's name where the run file gives the preset's shape:
// the torchtitan exports name a flavor only for a preset (torchtitan_plan.cpp), so a run file's
// model — the right shape, no name — would have every layout refused, and the planner nothing
// to rank. Only the name is taken: the model stays the run's.
ptd::JobSpec named_as_preset(ptd::JobSpec job, const ptd::PresetCatalog& presets) {
    if (job.training.framework != ptd::Framework::torchtitan || !job.origin.model_preset.empty()) return job;
    const ptd::ModelSpec& m = job.model;
    for (const ptd::ModelSpec& p : presets.models)
        if (p.layers == m.layers && p.hidden == m.hidden && p.heads == m.heads && p.kv_heads == m.kv_heads &&
            p.ffn_hidden == m.ffn_hidden && p.vocab == m.vocab && p.experts == m.experts && p.top_k == m.top_k &&
            p.expert_ffn_hidden() == m.expert_ffn_hidden()) {
            job.origin.model_preset = p.name;
            job.origin.model_base = m;
            break;
        }
    return job;
}

std::string gib(double bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f", bytes / kGiB);
    return b;
}

void print_breakdown(const char* who, const ptd::LayoutScore& s) {
    const ptd::TimeBreakdown& t = s.time;
    std::printf("      %-9s step %.3f s: compute %.3f tp %.3f cp %.3f ep %.3f pp %.3f bubble %.3f dp %.3f opt %.3f"
                " offload %.3f; peak %s GiB\n",
                who, s.step_s, t.compute, t.tp_comm, t.cp_comm, t.ep_comm, t.pp_comm, t.bubble, t.dp_comm, t.optimizer,
                t.offload, gib(s.peak_bytes).c_str());
}

struct Row {
    std::string name, generation, framework;
    int gpus = 0;
    double own_tps = 0, best_tps = 0;  // tokens/s per GPU
    double gain = 0;                   // best / own − 1
    std::string why, best_label;
    bool ranked = false, kept = false;
};

}  // namespace

int main(int argc, char** argv) {
    std::string path = std::string(PTD_SOURCE_DIR) + "/bench/accuracy/published_runs.toml";
    std::string only;
    bool verbose = false;
    ptd::PlanOptions options;
    options.top_k = 1;
    // The "too big for the global batch" check re-plans on fewer nodes; the published runs chose
    // their GPU count, so it is off here (and would double the time of the largest runs).
    options.max_bubble_share = -1;
    // etp: a published expert_tp is a layout choice like tp: searched, the published one ranked.
    options.vary_expert_tp = true;
    const char* usage = "usage: bench_plan_published [RUNS.toml] [--run SUBSTRING] [--max-micro-batch N] [--verbose]\n";
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--verbose") == 0) verbose = true;
        else if (std::strcmp(argv[i], "--run") == 0 && i + 1 < argc) only = argv[++i];
        else if (std::strcmp(argv[i], "--max-micro-batch") == 0 && i + 1 < argc) {
            char* end = nullptr;
            const long v = std::strtol(argv[++i], &end, 10);
            if (!end || *end || v < 1 || v > 4096) {
                std::fprintf(stderr, "bench_plan_published: --max-micro-batch \"%s\" is not an integer 1..4096\n", argv[i]);
                return 2;
            }
            options.max_micro_batch = (int)v;
        } else take_bench_arg("bench_plan_published", usage, argv[i], path);
    }
    const ptd::PresetCatalog presets = presets_or_exit();
    const std::vector<Run> runs = load_runs(path, presets);

    std::printf("the planner on each published run's model, cluster, GPUs, global batch and precision (top 1,\n"
                "max_micro_batch %d, every tp/cp/pp/vpp/zero/recompute/order/expert_tp it searches).\n"
                "tok/s are per GPU; rank = 1 + fitting layouts strictly faster than the published one.\n"
                "layout: tp·pp·dp, c = cp, e = ep, x = expert_tp (where ≠ tp), v = vpp; dopt = distributed optimizer, z = ZeRO stage, sp = sequence\n"
                "parallel, rc = recompute, o1/o2 = the planner's 2nd/3rd rank order.\n\n",
                options.max_micro_batch);
    std::vector<Row> rows;
    int skipped = 0;
    double seconds = 0;
    for (const Run& r : runs) {
        if (!only.empty() && r.name.find(only) == std::string::npos) continue;
        if (!r.skip.empty()) {
            ++skipped;
            std::printf("%-50s skipped: %s\n", r.name.c_str(), r.skip.c_str());
            continue;
        }
        const ptd::JobSpec job = named_as_preset(r.job, ptd::embedded_presets());
        const int gpus = job.world_size();
        ptd::PlanOptions o = options;
        o.gpus = gpus;
        auto plan = ptd::plan_layouts(job, o);
        if (!plan) {
            std::printf("%-50s plan failed: %s\n", r.name.c_str(), plan.error().str().c_str());
            continue;
        }
        seconds += plan->seconds;
        const ptd::Estimate own = ptd::estimate_job(job);
        Row row;
        row.name = r.name, row.generation = r.generation, row.framework = r.framework, row.gpus = gpus;
        row.own_tps = own.tokens_per_s / gpus;
        row.why = plan->why_best;
        std::string rank;
        if (plan->job_rank >= 0) {
            row.ranked = true;
            rank = "#" + std::to_string(plan->job_rank + 1) + "/" + std::to_string(plan->feasible);
        } else if (!own.fits) {
            rank = "does not fit (" + gib(own.stages[own.worst_stage].mem.total()) + " > " + gib(own.usable_bytes) + " GiB)";
        } else {
            const std::string why_out = outside_space(job, o);
            rank = "not searched: " + (why_out.empty() ? std::string("outside the search space") : why_out);
        }
        if (!plan->top.empty()) {
            const ptd::PlanEntry& best = plan->top.front();
            row.best_tps = best.score.tokens_per_s / gpus;
            row.best_label = choice_label(best.choice);
            row.gain = row.own_tps > 0 ? row.best_tps / row.own_tps - 1 : 0;
            row.kept = row.gain <= 0.02;
        }
        std::printf("%-50s %-4s %6d  %-24s %8.0f  %-22s -> %-28s %8.0f  %+6.1f%%\n", r.name.c_str(), r.generation.c_str(),
                    gpus, choice_label(ptd::layout_choice_of(job)).c_str(), row.own_tps, rank.c_str(),
                    row.best_label.c_str(), row.best_tps, row.gain * 100);
        std::printf("    why: %s\n", row.why.c_str());
        if (verbose && !plan->top.empty()) {
            ptd::LayoutScore own_score;
            own_score.step_s = own.step_s, own_score.time = own.time;
            own_score.peak_bytes = own.stages.empty() ? 0 : own.stages[own.worst_stage].mem.total();
            print_breakdown("published", own_score);
            print_breakdown("best", plan->top.front().score);
            // How much of the gain is the best's recompute and sequence parallelism alone, on
            // the published tp/pp/dp/micro-batch (the rest is the layout's shape).
            const ptd::LayoutChoice& b = plan->top.front().choice;
            ptd::JobSpec same = job;
            same.parallel.recompute = b.recompute;
            same.parallel.sequence_parallel = same.parallel.tp > 1 && b.sequence_parallel;
            if (!same.parallel.sequence_parallel) same.parallel.tp_comm_overlap = false;
            if (!same.parallel.sequence_parallel) same.parallel.async_tp = false;  // tt405
            if (ptd::validate_job(same).empty()) {
                const ptd::Estimate e = ptd::estimate_job(same);
                ptd::LayoutScore s;
                s.step_s = e.step_s, s.time = e.time;
                s.peak_bytes = e.stages.empty() ? 0 : e.stages[e.worst_stage].mem.total();
                std::printf("      published with the best's recompute (%s) and sp (%s): %+.1f%%%s\n",
                            ptd::to_string(b.recompute), same.parallel.sequence_parallel ? "on" : "off",
                            (own.step_s / e.step_s - 1) * 100, e.fits ? "" : " (does not fit)");
                print_breakdown("same+rc", s);
            }
        }
        rows.push_back(row);
    }

    // Summary.
    int kept = 0, ranked = 0;
    for (const Row& w : rows) kept += w.kept, ranked += w.ranked;
    std::printf("\n%zu runs planned (%d not modelled), %.1f s of planning in all\n", rows.size(), skipped, seconds);
    std::printf("published layout within 2%% of the planner's best: %d of %zu (ranked by the search: %d)\n", kept,
                rows.size(), ranked);
    std::vector<const Row*> by_gain;
    for (const Row& w : rows) by_gain.push_back(&w);
    std::sort(by_gain.begin(), by_gain.end(), [](const Row* a, const Row* b) { return a->gain > b->gain; });
    int over5 = 0, over25 = 0;
    for (const Row* w : by_gain) over5 += w->gain > 0.05, over25 += w->gain > 0.25;
    std::printf("claimed gain > 5%%: %d runs; > 25%%: %d runs\nlargest claimed gains:\n", over5, over25);
    for (size_t i = 0; i < by_gain.size() && i < 12 && by_gain[i]->gain > 0.02; ++i)
        std::printf("  %+6.1f%%  %-50s %-4s %-11s -> %s\n", by_gain[i]->gain * 100, by_gain[i]->name.c_str(),
                    by_gain[i]->generation.c_str(), by_gain[i]->framework.c_str(), by_gain[i]->best_label.c_str());
    return 0;
}
