// hybrid_sharding.cpp — parallel.dp_replicate (hsdp): the model states sharded inside groups of
// dp / dp_replicate data-parallel ranks and replicated across the groups, as torchtitan's HSDP,
// PyTorch FSDP's HYBRID_SHARD, Megatron-core's distributed optimizer instances and DeepSpeed's
// MiCS run it. The key read, written back and named from the stacks' own spellings; refused
// where a stack has no such form; the states' bytes of one group; the gathers inside the group
// and each gradient shard all-reduced across the replicas; each stack's export; the planner
// trying node-sized groups and groups of several nodes.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "ptd/export/export.h"
#include "ptd/layout/job_layout.h"
#include "ptd/model/estimate.h"
#include "ptd/plan/planner.h"
#include "ptd/spec/job_spec.h"

#include "job_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

// Llama 3 8B on 4 nodes of 8 H100, data parallel 32 with `parallel` (one key a line) and
// `training` lines added.
std::string llama8b_dp32(const std::string& parallel, const std::string& training = "") {
    return job_text({.preset = "llama3-8b",
                     .nodes = 4,
                     .parallel = "tp = 1\npp = 1\ndp = 32\n" + parallel,
                     .training = "micro_batch = 1\nglobal_batch = 64\n" + training});
}

std::string titan(const std::string& parallel) { return llama8b_dp32(parallel, "framework = \"torchtitan\"\n"); }

// The same on nodes joined by one 100 Gb/s NIC each (an eighth of a DGX H100's per GPU).
std::string titan_slow_network(const std::string& parallel) {
    return job_text({.preset = "llama3-8b",
                     .nodes = 4,
                     .cluster_extra = "nics_per_node = 1\nnic_gbps = 100",
                     .parallel = "tp = 1\npp = 1\ndp = 32\n" + parallel,
                     .training = "micro_batch = 1\nglobal_batch = 64\nframework = \"torchtitan\"\n"});
}

TEST(HybridShardingKey, IsReadWrittenBackAndNamedFromTheStacksSpellings) {
    const JobSpec job = job_from_text(titan("zero = 3\ndp_replicate = 4\n"));
    EXPECT_EQ(job.parallel.dp_replicate, 4);
    const JobSpec again = reloaded(save_job_toml(job));
    EXPECT_EQ(again.parallel.dp_replicate, 4);
    // Unwritten: one sharding group (and not written back).
    const JobSpec plain = job_from_text(titan("zero = 3\n"));
    EXPECT_EQ(plain.parallel.dp_replicate, 1);
    EXPECT_EQ(save_job_toml(plain).find("dp_replicate"), std::string::npos);
    // torchtitan's, Megatron's and DeepSpeed's names for it point here.
    for (const char* foreign : {"data_parallel_replicate_degree", "num_distributed_optimizer_instances", "mics_shard_size"}) {
        const std::string why = refusal_of_text(titan("zero = 3\n" + std::string(foreign) + " = 4\n"), "job.toml");
        EXPECT_NE(why.find("this spec's key is \"dp_replicate\""), std::string::npos) << foreign << ": " << why;
    }
    // Out of range: located, with what is allowed.
    const std::string zero_replicas = refusal_of_text(titan("zero = 3\ndp_replicate = 0\n"), "job.toml");
    EXPECT_NE(zero_replicas.find("job.toml"), std::string::npos) << zero_replicas;
    EXPECT_NE(zero_replicas.find("dp_replicate"), std::string::npos) << zero_replicas;
}

TEST(HybridShardingKey, IsRefusedWhereTheStackHasNoReplicasOfShards) {
    struct Case {
        std::string text, says;
    };
    const Case cases[] = {
        // Nothing sharded: every rank already holds a replica.
        {titan("zero = 0\ndp_replicate = 4\n"), "every data-parallel rank already holds a whole replica"},
        // The groups must split dp evenly.
        {titan("zero = 3\ndp_replicate = 5\n"), "a divisor of dp"},
        // Megatron-core's replicas are its distributed optimizer's instances.
        {llama8b_dp32("zero = 3\ndp_replicate = 4\n"), "--num-distributed-optimizer-instances"},
        // DeepSpeed shards within a subgroup only under ZeRO-3 (MiCS).
        {llama8b_dp32("zero = 2\ndp_replicate = 4\n", "framework = \"deepspeed\"\n"), "MiCS"},
        // FSDP's hybrid strategies shard the gradients too.
        {llama8b_dp32("zero = 1\ndp_replicate = 4\n", "framework = \"pytorch-fsdp\"\n"), "HYBRID_SHARD"},
    };
    for (const Case& c : cases) {
        const std::string why = refusal_of_text(c.text, "job.toml");
        EXPECT_NE(why.find("parallel.dp_replicate"), std::string::npos) << why;
        EXPECT_NE(why.find(c.says), std::string::npos) << why;
    }
    // A job built in code is checked too (the TOML reader refuses 0 itself, above).
    JobSpec none = job_from_text(titan("zero = 3\n"));
    none.parallel.dp_replicate = 0;
    bool named = false;
    for (const Diagnostic& d : validate_job(none)) named |= d.key == "parallel.dp_replicate";
    EXPECT_TRUE(named) << "dp_replicate = 0 not refused";
    // Each stack's own form loads.
    job_from_text(titan("zero = 3\ndp_replicate = 4\n"));
    job_from_text(llama8b_dp32("distributed_optimizer = true\ndp_replicate = 4\n"));
    job_from_text(llama8b_dp32("zero = 3\ndp_replicate = 4\n", "framework = \"deepspeed\"\n"));
    job_from_text(llama8b_dp32("zero = 2\ndp_replicate = 4\n", "framework = \"pytorch-fsdp\"\n"));
}

// The most loaded stage's memory of `text`.
MemoryBreakdown memory_of(const std::string& text) { return estimate_job(job_from_text(text)).stages.at(0).mem; }

TEST(HybridSharding, StatesShardOverOneGroupOnly) {
    // dp 32 in 4 replicas: each rank holds 1/8 of the states, 4 times its share with one group.
    const MemoryBreakdown whole = memory_of(titan("zero = 3\n"));
    const MemoryBreakdown hybrid = memory_of(titan("zero = 3\ndp_replicate = 4\n"));
    EXPECT_NEAR(hybrid.optimizer, 4.0 * whole.optimizer, 1e-6 * hybrid.optimizer);
    EXPECT_NEAR(hybrid.grads, 4.0 * whole.grads, 1e-6 * hybrid.grads);
    // As many replicas as data-parallel ranks: each group is one rank, which holds everything —
    // the states of the same job on one GPU.
    const MemoryBreakdown single = memory_of(job_text({.preset = "llama3-8b",
                                                        .nodes = 1,
                                                        .gpus_per_node = 1,
                                                        .parallel = "tp = 1\npp = 1\ndp = 1\nzero = 3\n",
                                                        .training = "micro_batch = 1\nglobal_batch = 2\n"
                                                                    "framework = \"torchtitan\"\n"}));
    const MemoryBreakdown replicated = memory_of(titan("zero = 3\ndp_replicate = 32\n"));
    EXPECT_NEAR(replicated.optimizer, single.optimizer, 1e-6 * single.optimizer);
    // Megatron's distributed optimizer instances alike.
    const MemoryBreakdown dist = memory_of(llama8b_dp32("distributed_optimizer = true\n"));
    const MemoryBreakdown instances = memory_of(llama8b_dp32("distributed_optimizer = true\ndp_replicate = 4\n"));
    EXPECT_NEAR(instances.optimizer, 4.0 * dist.optimizer, 1e-6 * instances.optimizer);
}

TEST(HybridSharding, GathersStayInTheGroupAndShardsCrossTheReplicas) {
    // One group per node (8 ranks): the parameter gathers and gradient reduce-scatters run over
    // NVLink; only the all-reduce of each rank's 1/8 shard crosses the nodes. With one group of
    // 32 across the 4 nodes every gather crosses them: on a slow network, more DP time.
    const Estimate whole = estimate_job(job_from_text(titan_slow_network("zero = 3\n")));
    const Estimate hybrid = estimate_job(job_from_text(titan_slow_network("zero = 3\ndp_replicate = 4\n")));
    EXPECT_LT(hybrid.stages.at(0).dp_s, 0.8 * whole.stages.at(0).dp_s);
    EXPECT_LT(hybrid.time.dp_comm, whole.time.dp_comm);
    EXPECT_TRUE(any_note(hybrid, "dp_replicate 4")) << "no note names the replicas";
    EXPECT_TRUE(any_note(hybrid, "shard over 8 ranks")) << "no note names the sharding group";
    // The all-reduce across replicas is paid, in full. dp 4 on 4 nodes of one GPU: as 4
    // replicas of one-rank groups the step all-reduces the whole gradient (2·(n−1)/n of it on
    // the wire, g bytes a parameter); as one ZeRO-3 group of 4 it gathers the 16-bit parameters
    // twice and reduce-scatters the gradient ((n−1)/n each): 2g against 2·2 + g, two thirds of
    // the time with bf16 reduction, but for latencies, and the same with fp32 (8 against 8).
    auto four_nodes = [](const std::string& parallel) {
        return estimate_job(job_from_text(job_text({.preset = "llama3-8b",
                                                     .nodes = 4,
                                                     .gpus_per_node = 1,
                                                     .parallel = "tp = 1\npp = 1\ndp = 4\n" + parallel,
                                                     .training = "micro_batch = 1\nglobal_batch = 4\n"
                                                                 "framework = \"torchtitan\"\n"})));
    };
    const std::string bf16 = "zero = 3\ngrad_reduce_in_fp32 = false\n", fp32 = "zero = 3\n";
    EXPECT_NEAR(four_nodes(bf16 + "dp_replicate = 4\n").stages.at(0).dp_s / four_nodes(bf16).stages.at(0).dp_s, 2.0 / 3.0,
                0.02);
    EXPECT_NEAR(four_nodes(fp32 + "dp_replicate = 4\n").stages.at(0).dp_s / four_nodes(fp32).stages.at(0).dp_s, 1.0, 0.02);
}

TEST(HybridSharding, EachStackExportsItsOwnForm) {
    const std::string py = export_text(job_from_text(titan("zero = 3\ndp_replicate = 4\n")), ExportFormat::torchtitan);
    EXPECT_NE(py.find("data_parallel_replicate_degree=4,"), std::string::npos) << py;
    EXPECT_NE(py.find("data_parallel_shard_degree=8,"), std::string::npos) << py;
    const std::string toml_text =
        export_text(job_from_text(titan("zero = 3\ndp_replicate = 4\n")), ExportFormat::torchtitan_toml);
    EXPECT_NE(toml_text.find("data_parallel_replicate_degree = 4"), std::string::npos) << toml_text;
    EXPECT_NE(toml_text.find("data_parallel_shard_degree = 8"), std::string::npos) << toml_text;
    const JobSpec megatron = job_from_text(llama8b_dp32("distributed_optimizer = true\ndp_replicate = 4\n"));
    EXPECT_EQ(value_of(megatron_args(export_text(megatron, ExportFormat::megatron)), "--num-distributed-optimizer-instances"),
              "4");
    const std::string bridge = export_text(megatron, ExportFormat::nemo);
    EXPECT_NE(bridge.find("ddp.num_distributed_optimizer_instances = 4"), std::string::npos) << bridge;
    const JobSpec mics = job_from_text(llama8b_dp32("zero = 3\ndp_replicate = 4\n", "framework = \"deepspeed\"\n"));
    const nlohmann::json ds = nlohmann::json::parse(export_text(mics, ExportFormat::deepspeed));
    EXPECT_EQ(ds["zero_optimization"]["mics_shard_size"], 8);
    // torchtitan runs one-rank sharding groups as DDP, on a 1-D mesh only: with TP the export
    // refuses, naming the key.
    const JobSpec tp2 = job_from_text(job_text({.preset = "llama3-8b",
                                                .nodes = 4,
                                                .parallel = "tp = 2\npp = 1\ndp = 16\nzero = 3\ndp_replicate = 16\n",
                                                .training = "micro_batch = 1\nglobal_batch = 64\n"
                                                            "framework = \"torchtitan\"\n"}));
    const auto refused = export_job(tp2, ExportFormat::torchtitan);
    ASSERT_FALSE(refused.has_value());
    EXPECT_NE(refused.error().str().find("parallel.dp_replicate"), std::string::npos) << refused.error().str();
    EXPECT_NE(refused.error().str().find("DDP has not supported > 1D parallelism"), std::string::npos);
    // Without replicas none of them is written.
    const std::string plain = export_text(job_from_text(llama8b_dp32("distributed_optimizer = true\n")), ExportFormat::megatron);
    EXPECT_EQ(plain.find("--num-distributed-optimizer-instances"), std::string::npos);
}

TEST(HybridShardingLayout, ShardGroupsAreConsecutiveDataParallelBlocksWithTheirContextRanks) {
    // tp 2, cp 2, dp 8 on 4 nodes of 8, 2 replicas: each sharding group holds 4 consecutive dp
    // coordinates and both cp ranks of one TP position: 8 ranks, half of the dp·cp group.
    auto L = job_layout(job_from_text(job_text({.preset = "llama3-8b",
                                                .nodes = 4,
                                                .parallel = "tp = 2\npp = 1\ncp = 2\nzero = 3\ndp_replicate = 2\n",
                                                .training = "micro_batch = 1\nglobal_batch = 64\n"
                                                            "framework = \"torchtitan\"\n"})));
    ASSERT_TRUE(L) << L.error().str();
    const GroupSet& g = L->dp_shard_groups;
    ASSERT_EQ(g.size, 8);
    ASSERT_EQ(g.count, 4);
    EXPECT_EQ(std::vector<int>(g.begin(0), g.end(0)), (std::vector<int>{0, 2, 4, 6, 8, 10, 12, 14}));
    EXPECT_EQ(std::vector<int>(g.begin(2), g.end(2)), (std::vector<int>{16, 18, 20, 22, 24, 26, 28, 30}));
    for (int r = 0; r < L->world; ++r) {
        const RankPlace& p = L->ranks[(size_t)r];
        const int32_t* first = g.begin(g.group_of[(size_t)r]);
        const RankPlace& q = L->ranks[(size_t)*first];
        EXPECT_EQ(p.coord[DIM_TP], q.coord[DIM_TP]);
        EXPECT_EQ(p.coord[DIM_DP] / 4, q.coord[DIM_DP] / 4) << "rank " << r;
    }
    EXPECT_TRUE(g.spans_nodes[0]);  // 8 ranks 2 apart: two nodes
    // Without replicas there are none.
    auto plain = job_layout(job_from_text(titan("zero = 3\n")));
    ASSERT_TRUE(plain);
    EXPECT_EQ(plain->dp_shard_groups.count, 0);
}

// `preset` under torchtitan's FSDP (zero 3) at tp 1, pp 1 on 16 nodes of 8 H100, micro-batch 1,
// global batch 256, with `parallel` and `cluster` lines added.
JobSpec titan_fsdp_on_16_nodes(const std::string& preset, const std::string& parallel = "",
                               const std::string& cluster = "") {
    return job_from_text(job_text({.preset = preset,
                                   .nodes = 16,
                                   .cluster_extra = cluster,
                                   .parallel = "tp = 1\npp = 1\nzero = 3\n" + parallel,
                                   .training = "micro_batch = 1\nglobal_batch = 256\nframework = \"torchtitan\"\n"}));
}

// Every layout of the job's own zero stage and rank order, listed (fold as PlanOptions' default).
PlanOptions every_fsdp_layout() {
    PlanOptions o;
    o.top_k = 100000;
    o.vary_zero = false;
    o.vary_order = false;
    return o;
}

TEST(HybridShardingPlanner, TriesTheStatesShardedInsideANode) {
    // Llama 3 8B with torchtitan's FSDP (zero 3, kept) reducing in bf16 on 16 nodes of 8 H100
    // joined by one 100 Gb/s NIC each: the search visits the node-sized sharding groups (16
    // replicas) beside one group of 128, and with a network this slow the replicas win. Per
    // parameter and micro-batch a node's NICs carry 2 + 2 + 2 bytes with one group (two 16-bit
    // gathers and the 16-bit reduce-scatter) and 2·2 with the replicas (the all-reduce of the
    // shards); with fp32 reduction (torchtitan's default) it would be 2 + 2 + 4 against 2·4,
    // no gain to find.
    const JobSpec job = titan_fsdp_on_16_nodes("llama3-8b", "grad_reduce_in_fp32 = false\n", "nics_per_node = 1\nnic_gbps = 100");
    PlanOptions o;
    o.top_k = 5;
    o.vary_zero = false;
    auto r = plan_layouts(job, o);
    ASSERT_TRUE(r) << r.error().str();
    ASSERT_FALSE(r->top.empty());
    // The best row's states shard over the data-parallel ranks of one node: in its rank order,
    // every sharding group of its layout stays inside a node.
    const LayoutChoice& best = r->top.front().choice;
    ASSERT_GT(best.dp_replicate, 1) << "tp " << best.tp << " pp " << best.pp << " cp " << best.cp;
    auto layout = job_layout(apply_plan_entry(job, r->top.front()));
    ASSERT_TRUE(layout) << layout.error().str();
    ASSERT_GT(layout->dp_shard_groups.count, 0);
    for (int g = 0; g < layout->dp_shard_groups.count; ++g) EXPECT_FALSE(layout->dp_shard_groups.spans_nodes[(size_t)g]) << g;
    EXPECT_GT(layout->dp_shard_groups.size, 1);
    // The same layout with one group is slower.
    PlanEntry one_group = r->top.front();
    one_group.choice.dp_replicate = 1;
    const Estimate with = estimate_job(apply_plan_entry(job, r->top.front()));
    const Estimate without = estimate_job(apply_plan_entry(job, one_group));
    EXPECT_LT(with.time.total(), without.time.total());
    // In an order that lists pp before dp a node holds fewer consecutive data-parallel ranks
    // (8 / (tp·cp·pp)): the groups the search tries follow the order — inside a node, or (zero
    // 3's groups of several nodes) touching no more nodes than their ranks need.
    JobSpec pp_first = job;
    pp_first.parallel.order = "tp-cp-ep-pp-dp";
    PlanOptions fixed = o;
    fixed.vary_order = false;
    fixed.top_k = 50;
    fixed.fold = false;  // each replica count a row of its own
    auto r2 = plan_layouts(pp_first, fixed);
    ASSERT_TRUE(r2) << r2.error().str();
    int checked = 0;
    for (const PlanEntry& e : r2->top) {
        if (e.choice.dp_replicate <= 1 || e.choice.pp <= 1) continue;
        auto l = job_layout(apply_plan_entry(pp_first, e));
        ASSERT_TRUE(l) << l.error().str();
        const GroupSet& groups = l->dp_shard_groups;
        // Members of one group a node holds: its cp ranks and, under the pp-first order, the
        // 8 / (tp·cp·pp) data-parallel coordinates of each (tp, pp) position.
        const int tp = e.choice.tp, cp = e.choice.cp, pp = e.choice.pp;
        const int per_node = tp * cp * pp <= 8 ? 8 / (tp * pp) : tp * cp <= 8 ? cp : std::max(1, 8 / tp);
        for (int g = 0; g < groups.count; ++g) {
            std::set<int> nodes;
            for (const int32_t* rank = groups.begin(g); rank != groups.end(g); ++rank) nodes.insert(l->ranks[(size_t)*rank].node);
            EXPECT_EQ((int)nodes.size(), std::max(1, groups.size / per_node)) << "group " << g << " of " << groups.size << ", tp " << tp << " cp " << cp << " pp " << pp;
        }
        ++checked;
    }
    EXPECT_GT(checked, 0) << "no listed layout with pp > 1 and replicas";
    // Applied, the job carries it, and it loads as a job of its own.
    const JobSpec planned = apply_plan_entry(job, r->top.front());
    EXPECT_EQ(planned.parallel.dp_replicate, best.dp_replicate);
    job_from_text(save_job_toml(planned));
}

TEST(HybridShardingPlanner, TriesGroupsOfSeveralNodesWhereOneNodesShareDoesNotFit) {
    // Llama 3 70B with torchtitan's FSDP (zero 3, kept) on 16 nodes of 8 H100: its 16 bytes per
    // parameter over one node's 8 ranks are 140 GB a GPU, so node-sized groups never fit; groups
    // of 2, 4, 8 nodes (8, 4, 2 replicas) are searched, and those of 4 and more nodes fit at
    // tp 1, pp 1.
    const JobSpec job = titan_fsdp_on_16_nodes("llama3-70b");
    PlanOptions o = every_fsdp_layout();
    o.fold = false;  // each replica count a row of its own
    auto r = plan_layouts(job, o);
    ASSERT_TRUE(r) << r.error().str();
    std::set<int> replicas;  // of the fitting tp 1, pp 1, cp 1 rows
    for (const PlanEntry& e : r->top) {
        const LayoutChoice& c = e.choice;
        if (c.tp != 1 || c.pp != 1 || c.cp != 1) continue;
        replicas.insert(c.dp_replicate);
        if (c.dp_replicate <= 1) continue;
        // Each sharding group is whole nodes: 128 / R ranks, a multiple of the node's 8.
        auto layout = job_layout(apply_plan_entry(job, e));
        ASSERT_TRUE(layout) << layout.error().str();
        EXPECT_EQ(layout->dp_shard_groups.size, 128 / c.dp_replicate);
        EXPECT_EQ(layout->dp_shard_groups.size % 8, 0);
    }
    EXPECT_TRUE(replicas.count(4)) << "no fitting row sharded over 4 nodes";
    EXPECT_TRUE(replicas.count(2)) << "no fitting row sharded over 8 nodes";
    EXPECT_FALSE(replicas.count(16)) << "a node's share of 70B fitted";
    // The same layout with node-sized groups does not fit; with groups of 4 nodes it does.
    for (const PlanEntry& e : r->top) {
        if (e.choice.tp != 1 || e.choice.pp != 1 || e.choice.cp != 1 || e.choice.dp_replicate != 4) continue;
        PlanEntry node_sized = e;
        node_sized.choice.dp_replicate = 16;
        EXPECT_TRUE(estimate_job(apply_plan_entry(job, e)).fits);
        EXPECT_FALSE(estimate_job(apply_plan_entry(job, node_sized)).fits);
        break;
    }
}

// fold: a plan lists a sharded layout once, at its fastest replica count, the others folded
// into its row (PlanEntry::folded); unfolded, the same layout is a row at each count. Llama 3
// 70B's torchtitan FSDP on 16 nodes again, where groups of 4 and 8 nodes both fit.
TEST(HybridShardingPlanner, ALayoutIsOneRowWithItsReplicaCountsFolded) {
    const JobSpec job = titan_fsdp_on_16_nodes("llama3-70b");
    PlanOptions o = every_fsdp_layout();
    auto folded = plan_layouts(job, o);
    o.fold = false;
    auto flat = plan_layouts(job, o);
    ASSERT_TRUE(folded) << folded.error().str();
    ASSERT_TRUE(flat) << flat.error().str();
    // Two rows that are one layout at two replica counts (the same depth and TP overlap).
    auto same_but_replicas = [](LayoutChoice a, const LayoutChoice& b) {
        if (a.dp_replicate == b.dp_replicate || a.vpp != b.vpp || a.tp_comm_overlap != b.tp_comm_overlap) return false;
        a.dp_replicate = b.dp_replicate;
        return same_choice(a, b);
    };
    // Unfolded, some layout is listed at several replica counts.
    int repeated = 0;
    for (size_t i = 0; i < flat->top.size(); ++i)
        for (size_t k = 0; k < i; ++k) repeated += same_but_replicas(flat->top[k].choice, flat->top[i].choice);
    ASSERT_GT(repeated, 0) << "no layout at two replica counts: the case shows nothing";
    // Folded, no two rows are one layout, and a row names its other counts (at its own depth
    // and TP overlap), each no faster.
    int rows_with_replicas = 0;
    for (size_t i = 0; i < folded->top.size(); ++i) {
        const PlanEntry& row = folded->top[i];
        for (size_t k = 0; k < i; ++k) {
            EXPECT_FALSE(same_up_to_fold(folded->top[k].choice, row.choice)) << k << ", " << i;
            EXPECT_FALSE(same_but_replicas(folded->top[k].choice, row.choice)) << k << ", " << i;
        }
        bool other_count = false;
        for (const FoldedVariant& v : row.folded) {
            EXPECT_LE(v.tokens_per_s, row.score.tokens_per_s) << i;
            other_count |= v.dp_replicate != row.choice.dp_replicate && v.vpp == row.choice.vpp &&
                           v.tp_comm_overlap == row.choice.tp_comm_overlap;
        }
        rows_with_replicas += other_count;
    }
    EXPECT_GT(rows_with_replicas, 0);
    EXPECT_LT(folded->top.size(), flat->top.size());
}

}  // namespace
