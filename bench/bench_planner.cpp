// bench_planner.cpp — how fast the planner is. Prints figures only (no assertions):
//   1. evaluate_layout calls per second on one core (no detail), over varied layouts of
//      Llama-3 70B on 64 nodes × 8 H100 (target ≥ 1,000,000/s);
//   2. the wall time of a full plan_layouts search for Llama-3 405B on 16,384 H100 with
//      global batch 2048 (target well under 1 s), and for GPT-3 175B on 1024 A100
//      (assets/jobs/gpt3-175b-a100.toml), with counts and the top 5.
//
//   ./build/bin/bench_planner
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "ptd/planner.h"
#include "ptd/presets.h"

namespace {

using Clock = std::chrono::steady_clock;

// Llama 3 405B as Meta trained it (arXiv 2407.21783, §3.3, Table 4): TP 8, PP 16, DP 128,
// 8K sequences, 2048 sequences per step; interleaved with one-layer chunks (V = 8), the
// embedding and the loss counted as a layer each (126 = 16·8 − 2), FSDP sharding gradients
// and optimizer states (ZeRO-2), no activation checkpointing; micro-batch 1 and N = pp assumed.
const char* kLlama405b = R"(
[model]
preset = "llama3-405b"

[cluster]
nodes = 2048
gpus_per_node = 8
gpu = "h100-sxm"
inter_gbps = 50.0

[parallel]
tp = 8
pp = 16
vpp = 8
zero = 2
account_for_embedding_in_pipeline_split = true
account_for_loss_in_pipeline_split = true
sequence_parallel = true
recompute = "none"

[training]
micro_batch = 1
global_batch = 2048
)";

const char* kLlama70b = R"(
[model]
preset = "llama3-70b"

[cluster]
nodes = 64
gpus_per_node = 8
gpu = "h100-sxm"
inter_gbps = 50.0

[parallel]
tp = 8
pp = 4

[training]
micro_batch = 1
global_batch = 1024
)";

std::string label(const ptd::JobSpec& job, const ptd::LayoutChoice& c) {
    char buf[200];
    const char* order = c.order >= 0 ? ptd::kPlannerOrders[c.order] : job.parallel.order.c_str();
    std::snprintf(buf, sizeof buf, "tp%d pp%d dp%d cp%d ep%d vpp%d mb%d %s sp=%d recompute=%s order=%s", c.tp, c.pp,
                  c.dp, c.cp, c.ep, c.vpp, c.micro_batch,
                  c.distributed_optimizer ? "dist-opt" : ("zero" + std::to_string(c.zero)).c_str(),
                  (int)c.sequence_parallel, ptd::to_string(c.recompute), order);
    return buf;
}

// evaluate_layout throughput over every valid (tp, pp, mb, zero, recompute, sp) of the job.
void bench_evaluate(const ptd::JobSpec& job) {
    const ptd::EstimateContext ctx = ptd::make_estimate_context(job);
    const ptd::ModelSpec& m = job.model;
    const int world = job.world_size();
    std::vector<ptd::LayoutChoice> choices;
    std::vector<std::vector<int>> lps(m.layers + 1);
    for (int tp : {1, 2, 4, 8})
        for (int pp = 1; pp <= m.layers; ++pp) {
            if (world % (tp * pp) || job.training.global_batch % (world / (tp * pp))) continue;
            const int dp = world / (tp * pp);
            if (m.layers % pp) lps[pp] = ptd::balanced_layers_per_stage(m.layers, pp);
            for (int mb : {1, 2, 4})
                for (int zero : {0, 1})
                    for (auto rc : {ptd::Recompute::none, ptd::Recompute::selective, ptd::Recompute::full})
                        for (bool sp : {false, true}) {
                            if ((sp && tp == 1) || (job.training.global_batch / dp) % mb) continue;
                            choices.push_back({.tp = tp,
                                               .pp = pp,
                                               .dp = dp,
                                               .micro_batch = mb,
                                               .zero = zero,
                                               .sequence_parallel = sp,
                                               .recompute = rc});
                        }
        }
    // Warm up, then repeat the whole list for about a second; keep the best rate of 5 runs.
    double checksum = 0, best = 0;
    int64_t total = 0;
    for (int run = 0; run < 6; ++run) {
        int64_t n = 0;
        auto t0 = Clock::now();
        double elapsed = 0;
        while (elapsed < 0.2) {
            for (const ptd::LayoutChoice& c : choices)
                checksum += ptd::evaluate_layout(ctx, c, lps[c.pp], nullptr).tokens_per_s;
            n += (int64_t)choices.size();
            elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
        }
        if (run > 0) best = std::max(best, n / elapsed);
        total += n;
    }
    std::printf("evaluate_layout, llama3-70b on 64×8 h100-sxm, %zu distinct layouts, %lld calls:\n", choices.size(),
                (long long)total);
    std::printf("  %.3g layouts/s on one core (%.2f µs each; target ≥ 1e6/s)%s\n\n", best, 1e6 / best,
                checksum < 0 ? " (unreachable)" : "");
}

void bench_plan(const char* title, const ptd::JobSpec& job) {
    ptd::PlanOptions opts;
    opts.top_k = 5;
    auto t0 = Clock::now();
    auto r = ptd::plan_layouts(job, opts);
    double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!r) {
        std::printf("%s: %s\n", title, r.error().str().c_str());
        return;
    }
    opts.exhaustive = true;
    auto full = ptd::plan_layouts(job, opts);
    std::printf("%s\n", title);
    std::printf("  plan_layouts: %.1f ms wall (target well under 1 s); exhaustive: %.1f ms\n", wall * 1e3,
                full ? full->seconds * 1e3 : -1.0);
    std::printf(
        "  enumerated %lld, evaluated %lld (exhaustive %lld), feasible %lld, pareto %zu, job's own layout rank %d\n",
        (long long)r->enumerated, (long long)r->evaluated, full ? (long long)full->evaluated : -1LL,
        (long long)r->feasible, r->pareto.size(), r->job_rank);
    for (size_t i = 0; i < r->top.size(); ++i) {
        const ptd::LayoutScore& s = r->top[i].score;
        std::printf("  %zu. %-78s %9.0f tok/s  MFU %4.1f%%  step %6.2f s  peak %5.1f / %5.1f GiB\n", i + 1,
                    label(job, r->top[i].choice).c_str(), s.tokens_per_s, s.mfu * 100, s.step_s,
                    s.peak_bytes / (1 << 30), s.usable_bytes / (1 << 30));
    }
    std::printf("  why best: %s\n", r->why_best.c_str());
    ptd::Estimate own = ptd::estimate_job(job);
    std::printf("  the job's own layout (%s): %.0f tok/s, peak %.1f GiB, %s\n\n",
                label(job, ptd::layout_choice_of(job)).c_str(), own.tokens_per_s,
                own.stages[own.worst_stage].mem.total() / (1 << 30), own.fits ? "fits" : "does not fit");
}

}  // namespace

int main() {
    auto presets = ptd::load_presets();
    if (!presets) {
        std::printf("%s\n", presets.error().str().c_str());
        return 1;
    }
    auto load = [&](const std::string& text, const std::string& name) {
        auto job = ptd::load_job_text(text, name, *presets);
        if (!job) std::printf("%s\n", job.error().str().c_str());
        return job;
    };
    auto l70 = load(kLlama70b, "<llama3-70b 64×8>");
    auto l405 = load(kLlama405b, "<llama3-405b 2048×8>");
    const std::string assets = ptd::find_assets_dir();  // the source tree's assets/ from a build folder
    auto gpt3 = ptd::load_job_file(assets + "/jobs/gpt3-175b-a100.toml", *presets);
    if (!l70 || !l405 || !gpt3) {
        if (!gpt3) std::printf("%s\n", gpt3.error().str().c_str());
        return 1;
    }
    bench_evaluate(*l70);
    bench_plan("Llama-3 405B on 16,384 h100-sxm (2048 × 8), global batch 2048, seq 8192:", *l405);
    bench_plan("GPT-3 175B on 1024 a100-80gb (128 × 8), global batch 1536 (assets/jobs/gpt3-175b-a100.toml):", *gpt3);
    return 0;
}
