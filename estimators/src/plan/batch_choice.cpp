// batch_choice.cpp (batchchoice) — an unwritten micro-batch and interleaving depth, chosen as a
// tuned run has them: every candidate the framework runs is scored by the time model with
// the planner's headroom, and the fastest that fits wins (batch_choice.h says how ties go).
#include "ptd/plan/batch_choice.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "ptd/model/estimate.h"
#include "ptd/plan/planner.h"
#include "ptd/spec/stack_defaults.h"

namespace ptd {

namespace {

// The micro-batches a step of `per_replica` sequences splits into evenly, up to the
// planner's largest.
std::vector<int> micro_batch_candidates(long long per_replica, int most) {
    std::vector<int> out;
    for (long long d = 1; d <= per_replica && d <= most; ++d)
        if (per_replica % d == 0) out.push_back((int)d);
    return out;
}

std::string joined(const std::vector<int>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? (i + 1 == v.size() ? " or " : ", ") : "") + std::to_string(v[i]);
    return s;
}

struct Candidate {
    int vpp = 1, micro_batch = 1;
    double tokens_per_s = 0;
};

}  // namespace

BatchChoice choose_unwritten_batching(JobSpec& job, const ClusterProfile* profile) {
    BatchChoice out;
    bool pick_mb = !job.origin.micro_batch_given && job.origin.global_batch_given && job.has_layout();
    // A split the job writes (layers_per_stage, pipeline_layout) fixes the depth.
    const bool pick_vpp = !job.origin.vpp_given && job.parallel.schedule == PipelineSchedule::interleaved &&
                          job.has_layout() && job.parallel.vpp >= 2 && job.parallel.layers_per_stage.empty() &&
                          job.parallel.pipeline_layout.empty();
    if (!pick_mb && !pick_vpp) return out;
    const long long per_replica = job.parallel.dp > 0 ? job.training.global_batch / job.parallel.dp : 0;
    // A performance recipe the job names sets its micro-batch as it sets the keys it shares
    // with the job (mbrecipe): what the recipe ran, where it divides the job's batch.
    if (const PerfRecipe* r = pick_mb && !job.training.recipe.empty() ? find_perf_recipe(job.training.recipe) : nullptr;
        r && r->mbs > 0 && per_replica > 0 && per_replica % r->mbs == 0) {
        job.training.micro_batch = r->mbs;
        job.origin.stack_defaults.push_back({"training.micro_batch", std::to_string(r->mbs),
                                             std::string("not written: the micro_batch_size of recipe ") + r->name});
        pick_mb = false;
        if (!pick_vpp) return out;
    }
    out.micro_batches = pick_mb ? micro_batch_candidates(per_replica, PlanOptions{}.max_micro_batch)
                                : std::vector<int>{job.training.micro_batch};
    if (out.micro_batches.empty()) return out;

    JobSpec planned = job;
    planned.estimate.headroom = plan_headroom(job, PlanOptions{});
    const EstimateContext ctx = make_estimate_context(planned, profile);
    const bool megatron = runs_megatron_core(job.training.framework);

    std::vector<Candidate> fit;
    for (int mb : out.micro_batches) {
        JobSpec c = job;
        c.training.micro_batch = mb;
        const std::vector<int> depths = pick_vpp ? interleaved_depths(c) : std::vector<int>{job.parallel.vpp};
        for (int v : depths) {
            if (std::find(out.depths.begin(), out.depths.end(), v) == out.depths.end()) out.depths.push_back(v);
            c.parallel.vpp = v;
            if (!validate_job(c).empty()) continue;
            if (megatron && megatron_interleaved_refusal(c)) continue;
            ++out.evaluated;
            const LayoutScore score = evaluate_layout(ctx, layout_choice_of(c), c.parallel.layers_per_stage, nullptr);
            if (!score.fits) continue;
            fit.push_back({v, mb, score.tokens_per_s});
        }
    }
    std::sort(out.depths.begin(), out.depths.end());
    out.fitting = (int)fit.size();
    const std::string headroom = std::to_string((int)std::lround(planned.estimate.headroom * 100)) + "% headroom";
    const std::string tolerance = std::to_string((int)std::lround(kBatchChoiceTolerance * 100)) + "%";
    if (fit.empty()) {
        // The loader's starting values stay; the estimate shows what overflows.
        if (pick_mb)
            job.origin.stack_defaults.push_back(
                {"training.micro_batch", std::to_string(job.training.micro_batch),
                 "not written, and no micro-batch of " + joined(out.micro_batches) + " fits with " + headroom});
        if (pick_vpp)
            job.origin.stack_defaults.push_back({"parallel.vpp", std::to_string(job.parallel.vpp),
                                                 "not written, and no depth of " + joined(out.depths) + " fits with " + headroom});
        return out;
    }
    double best = 0;
    for (const Candidate& c : fit) best = std::max(best, c.tokens_per_s);
    std::sort(fit.begin(), fit.end(), [](const Candidate& a, const Candidate& b) {
        return a.vpp != b.vpp ? a.vpp < b.vpp : a.micro_batch < b.micro_batch;
    });
    const Candidate chosen = *std::find_if(fit.begin(), fit.end(), [&](const Candidate& c) {
        return c.tokens_per_s >= best * (1.0 - kBatchChoiceTolerance);
    });
    if (pick_mb) {
        out.chose_micro_batch = true;
        job.training.micro_batch = chosen.micro_batch;
        job.origin.stack_defaults.push_back(
            {"training.micro_batch", std::to_string(chosen.micro_batch),
             "not written: the fastest of " + joined(out.micro_batches) + " that fits with " + headroom +
                 " (a tuned run's; within " + tolerance + ", the smaller); write it to pin it"});
    }
    if (pick_vpp) {
        out.chose_vpp = true;
        job.parallel.vpp = chosen.vpp;
        job.origin.stack_defaults.push_back(
            {"parallel.vpp", std::to_string(chosen.vpp),
             "schedule = \"interleaved\" without vpp: the fastest of " + joined(out.depths) +
                 " chunks per stage that fits (within " + tolerance + ", the fewer); write it to pin it"});
    }
    return out;
}

}  // namespace ptd
