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

void choose_unwritten_batching(JobSpec& job, const ClusterProfile* profile) {
    bool pick_mb = !job.origin.micro_batch_given && job.origin.global_batch_given && job.has_layout();
    // A split the job writes (layers_per_stage, pipeline_layout) fixes the depth, and so does
    // torchtitan's own default (two stages per rank, start_unwritten_depth).
    const bool pick_vpp = !job.origin.vpp_given && job.parallel.schedule == PipelineSchedule::interleaved &&
                          job.training.framework != Framework::torchtitan &&
                          job.has_layout() && job.parallel.vpp >= 2 && job.parallel.layers_per_stage.empty() &&
                          job.parallel.pipeline_layout.empty();
    if (!pick_mb && !pick_vpp) return;
    const long long per_replica = job.parallel.dp > 0 ? job.training.global_batch / job.parallel.dp : 0;
    // A performance recipe the job names sets its micro-batch as it sets the keys it shares
    // with the job (mbrecipe): what the recipe ran, where it divides the job's batch.
    if (const PerfRecipe* r = pick_mb && !job.training.recipe.empty() ? find_perf_recipe(job.training.recipe) : nullptr;
        r && r->mbs > 0 && per_replica > 0 && per_replica % r->mbs == 0) {
        job.training.micro_batch = r->mbs;
        job.origin.stack_defaults.push_back({"training.micro_batch", std::to_string(r->mbs),
                                             std::string("not written: the micro_batch_size of recipe ") + r->name});
        pick_mb = false;
        if (!pick_vpp) return;
    }
    // ttmb: torchtitan has a default pipeline micro-batch (its own count of micro-batches per
    // local batch, by date): the job runs that, as torchtitan would, where it divides.
    if (pick_mb && job.training.framework == Framework::torchtitan && job.parallel.pp > 1) {
        const TorchtitanMicroBatch titan = torchtitan_pipeline_micro_batch(per_replica, job.parallel.pp, job.parallel.vpp,
                                                                           job.training.framework_version);
        if (titan.micro_batch > 0) {
            job.training.micro_batch = titan.micro_batch;
            job.origin.stack_defaults.push_back(
                {"training.micro_batch", std::to_string(titan.micro_batch), "not written: " + titan.source});
            pick_mb = false;
            if (!pick_vpp) return;
        }
    }
    std::vector<int> micro_batches{job.training.micro_batch}, depths_tried;
    if (pick_mb) micro_batch_candidates(per_replica, PlanOptions{}.max_micro_batch, micro_batches);
    if (micro_batches.empty()) return;

    JobSpec planned = job;
    planned.estimate.headroom = plan_headroom(job, PlanOptions{});
    const EstimateContext ctx = make_estimate_context(planned, profile);

    // Every candidate that runs (interleaved_depths gives only depths that do), scored.
    std::vector<Candidate> fit;
    for (int mb : micro_batches) {
        JobSpec c = job;
        c.training.micro_batch = mb;
        const std::vector<int> depths = pick_vpp ? interleaved_depths(c)
                                      : job_runs(c) ? std::vector<int>{job.parallel.vpp}
                                                    : std::vector<int>{};
        for (int v : depths) {
            if (std::find(depths_tried.begin(), depths_tried.end(), v) == depths_tried.end()) depths_tried.push_back(v);
            c.parallel.vpp = v;
            const LayoutScore score = evaluate_layout(ctx, layout_choice_of(c), c.parallel.layers_per_stage, nullptr);
            if (score.fits) fit.push_back({v, mb, score.tokens_per_s});
        }
    }
    std::sort(depths_tried.begin(), depths_tried.end());
    const std::string headroom = std::to_string((int)std::lround(planned.estimate.headroom * 100)) + "% headroom";
    const std::string tolerance = std::to_string((int)std::lround(kBatchChoiceTolerance * 100)) + "%";
    if (fit.empty()) {
        // The loader's starting values stay; the estimate shows what overflows.
        if (pick_mb)
            job.origin.stack_defaults.push_back(
                {"training.micro_batch", std::to_string(job.training.micro_batch),
                 "not written, and no micro-batch of " + joined(micro_batches) + " fits with " + headroom});
        if (pick_vpp)
            job.origin.stack_defaults.push_back({"parallel.vpp", std::to_string(job.parallel.vpp),
                                                 "not written, and no depth of " + joined(depths_tried) + " fits with " + headroom});
        return;
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
        job.training.micro_batch = chosen.micro_batch;
        job.origin.stack_defaults.push_back(
            {"training.micro_batch", std::to_string(chosen.micro_batch),
             "not written: the fastest of " + joined(micro_batches) + " that fits with " + headroom +
                 " (a tuned run's; within " + tolerance + ", the smaller); write it to pin it"});
    }
    if (pick_vpp) {
        job.parallel.vpp = chosen.vpp;
        job.origin.stack_defaults.push_back(
            {"parallel.vpp", std::to_string(chosen.vpp),
             "schedule = \"interleaved\" without vpp: the fastest of " + joined(depths_tried) +
                 " chunks per stage that fits (within " + tolerance + ", the fewer); write it to pin it"});
    }
}

}  // namespace ptd
