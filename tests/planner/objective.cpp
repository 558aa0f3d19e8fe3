// objective.cpp — `ptd plan --objective time|cost|energy` (issue 28 point 5): every listed row
// carries its whole run (training_cost.h) as `ptd estimate` of that layout gives it, the rows
// are ordered by the objective's figure, the default stays tokens/s, and an objective without
// the figure it needs (no price, no GPU power) is refused naming the key to set.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/plan/planner.h"

#include "job_test_util.h"
#include "text_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

JobSpec priced_job(const std::string& extra_cluster = "cluster.gpu_hour_usd=3") {
    return load_asset("llama3-8b-h100.toml", {"training.tokens=1e12", extra_cluster});
}

PlanResult planned(const JobSpec& job, PlanObjective objective) {
    PlanOptions o;
    o.objective = objective;
    o.top_k = 8;
    auto r = plan_layouts(job, o);
    EXPECT_TRUE(r) << (r ? "" : r.error().str());
    return r ? *r : PlanResult{};
}

TEST(PlanObjective, RowsCarryTheirRunAsTheEstimateGivesIt) {
    const JobSpec job = priced_job();
    const PlanResult plan = planned(job, PlanObjective::throughput);
    ASSERT_GE(plan.top.size(), 3u);
    for (const PlanEntry& e : plan.top) {
        const TrainingCost& t = e.training;
        ASSERT_TRUE(t.known);
        EXPECT_DOUBLE_EQ(t.tokens, t.steps * job.training.global_batch * job.model.seq_len);
        EXPECT_NEAR(t.compute_s, t.steps * e.score.step_s, 1e-9 * t.compute_s);
        EXPECT_NEAR(t.cost_usd, t.gpu_hours * 3, 1e-9 * t.cost_usd);
        EXPECT_TRUE(t.has_energy);
    }
    // The best row's run is the one `ptd estimate` gives for that layout.
    const Estimate est = estimate_job(apply_plan_entry(job, plan.top.front()));
    EXPECT_NEAR(plan.top.front().training.wall_s, est.training.wall_s, 1e-6 * est.training.wall_s);
    EXPECT_DOUBLE_EQ(plan.top.front().training.checkpoint_bytes, est.training.checkpoint_bytes);
}

TEST(PlanObjective, RowsAreOrderedByTheObjective) {
    const JobSpec job = priced_job();
    const PlanResult by_speed = planned(job, PlanObjective::throughput);
    for (size_t i = 1; i < by_speed.top.size(); ++i)  // the default stays tokens/s
        EXPECT_GE(by_speed.top[i - 1].score.tokens_per_s, by_speed.top[i].score.tokens_per_s) << i;
    for (PlanObjective o : {PlanObjective::time, PlanObjective::cost, PlanObjective::energy}) {
        const PlanResult p = planned(job, o);
        ASSERT_EQ(p.top.size(), by_speed.top.size()) << to_string(o);
        for (size_t i = 1; i < p.top.size(); ++i)
            EXPECT_LE(objective_value(p.top[i - 1], o), objective_value(p.top[i], o)) << to_string(o) << " row " << i;
        EXPECT_GT(objective_value(p.top.back(), o), objective_value(p.top.front(), o)) << to_string(o);
    }
    // The figures the objectives read.
    const PlanEntry& e = by_speed.top.front();
    EXPECT_EQ(objective_value(e, PlanObjective::throughput), -e.score.tokens_per_s);
    EXPECT_EQ(objective_value(e, PlanObjective::time), e.training.wall_s);
    EXPECT_EQ(objective_value(e, PlanObjective::cost), e.training.cost_usd);
    EXPECT_EQ(objective_value(e, PlanObjective::energy), e.training.energy_kwh);
}

TEST(PlanObjective, RefusedWithoutTheFigureItNeeds) {
    const JobSpec unpriced = load_asset("llama3-8b-h100.toml", {"training.tokens=1e12"});
    PlanOptions o;
    o.objective = PlanObjective::cost;
    auto r = plan_layouts(unpriced, o);
    ASSERT_FALSE(r);
    expect_mentions(r.error().str(), {"cluster.gpu_hour_usd", "--objective cost"});
    // A GPU without a power figure (the nominal cpu device) cannot be ranked by energy.
    const JobSpec cpu = load_asset("tiny-local.toml");
    ASSERT_EQ(cpu.cluster.gpu.power_w, 0);
    o.objective = PlanObjective::energy;
    auto e = plan_layouts(cpu, o);
    ASSERT_FALSE(e);
    expect_mentions(e.error().str(), {"cluster.gpu.power_w", "--objective energy"});
    o.objective = PlanObjective::time;  // time needs nothing more
    EXPECT_TRUE(plan_layouts(cpu, o));
}

}  // namespace
