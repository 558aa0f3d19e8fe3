// moe_dispatcher_backends.cpp — the MoE token dispatcher's backends and the EP all-to-all overlap:
// parallel.moe_dispatcher (Megatron-core's flex dispatcher with DeepEP / HybridEP: a token
// crosses the network once per destination node, NVLink once per destination rank),
// model.moe_router_num_groups / group_topk
// (group-limited routing bounds those nodes), parallel.moe_a2a_overlap (the combined 1F1B
// schedule hides the dispatch / combine behind another micro-batch's compute), checked against
// hand-computed volumes and fractions; the keys' validation, TOML round trip, Megatron-LM
// export and the published-runs loader.
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/estimate_internal.h"
#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/spec/presets.h"

#include "published_run.h"
#include "job_test_util.h"
#include "published_runs_test_util.h"

namespace {

using namespace ptd;

Result<JobSpec> load(const std::string& text) { return load_job_text(text, "deepep.toml", embedded_presets()); }

JobSpec load_ok(const std::string& text) { return ptd_test::job_from_text(text, "deepep.toml"); }

// DeepSeek-V3's MoE layer shape (256 experts of 2048, top-8, one shared expert), 8 layers, all
// MoE, on `nodes` DGX-H100 nodes with tp 1 and EP `ep`; `model_extra` / `parallel_extra` add keys.
std::string moe_job(int nodes, int ep, const std::string& parallel_extra = "", const std::string& model_extra = "",
                    int pp = 1, int global_batch = 0) {
    const int dp = nodes * 8 / pp;
    return "[model]\narch = \"llama\"\nlayers = 8\nhidden = 7168\nheads = 128\nkv_heads = 128\nffn_hidden = 18432\n"
           "vocab = 129280\nseq_len = 4096\nexperts = 256\ntop_k = 8\nmoe_ffn_hidden = 2048\n"
           "shared_expert_ffn_hidden = 2048\n" + model_extra +
           "[cluster]\nnodes = " + std::to_string(nodes) + "\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n"
           "[parallel]\ntp = 1\npp = " + std::to_string(pp) + "\nep = " + std::to_string(ep) + "\n" + parallel_extra +
           "[training]\nmicro_batch = 1\nglobal_batch = " + std::to_string(global_batch > 0 ? global_batch : 4 * dp) +
           "\nprecision = \"bf16\"\n";
}

const char* kGroups = "moe_router_num_groups = 8\nmoe_router_group_topk = 4\n";

// C(a − b, k) / C(a, k) by hand.
double none_in(double a, double b, int k) {
    double q = 1;
    for (int i = 0; i < k; ++i) q *= (a - b - i) / (a - i);
    return q;
}

TEST(MoeDispatcherNodes, ExpectedDistinctNodesAsHandComputed) {
    // Unlimited, balanced routing: 8 nodes of 32 experts, top-8.
    EXPECT_NEAR(est::expected_expert_nodes(256, 8, 8, 0, 0), 8.0 * (1.0 - none_in(256, 32, 8)), 1e-12);
    // DeepSeek-V3's node-limited routing with one group per node: exactly the 4 picked groups' nodes.
    EXPECT_NEAR(est::expected_expert_nodes(256, 8, 8, 8, 4), 4.0, 1e-12);
    // Two groups per node (EP over 4 nodes): 4 · (1 − C(6, 4) / C(8, 4)).
    EXPECT_NEAR(est::expected_expert_nodes(256, 8, 4, 8, 4), 4.0 * (1.0 - 15.0 / 70.0), 1e-12);
    // A group over two nodes (16 nodes): 4 groups · 2 nodes · P(a node gets one of 2 picks).
    EXPECT_NEAR(est::expected_expert_nodes(256, 8, 16, 8, 4), 8.0 * (1.0 - none_in(32, 16, 2)), 1e-12);
    // One node: 1; fewer groups than the bound never raise the unlimited figure.
    EXPECT_EQ(est::expected_expert_nodes(128, 8, 1, 0, 0), 1.0);
    EXPECT_LE(est::expected_expert_nodes(256, 8, 8, 8, 8), est::expected_expert_nodes(256, 8, 8, 0, 0) + 1e-12);
}

TEST(MoeDispatcherTraffic, NetworkCarriesOneCopyPerRemoteNode) {
    // EP 64 over 8 nodes (tp 1): the all-to-all dispatcher sends the 56/64 remote share of k = 8
    // copies per token over the node's 8 NIC shares; DeepEP sends each token once per distinct
    // remote node: 4 nodes with node-limited routing (8 groups, 4 picked), 7/8 of them remote.
    const JobSpec a2a_job = load_ok(moe_job(8, 64, "", kGroups));
    const JobSpec dee_job = load_ok(moe_job(8, 64, "moe_dispatcher = \"deepep\"\n", kGroups));
    const JobSpec hyb_job = load_ok(moe_job(8, 64, "moe_dispatcher = \"hybridep\"\n", kGroups));
    const Estimate a2a = estimate_job(a2a_job), dee = estimate_job(dee_job), hyb = estimate_job(hyb_job);
    const double comm_eff = time_model_constants().comm_eff;
    const double bytes = 2.0 * 8 * 4096 * 7168;  // k copies of the rank's 4096 tokens, bf16
    const double nic = a2a_job.cluster.inter_gbps * 1e9 * comm_eff * 8, nvl = a2a_job.cluster.gpu.link_gbps * 1e9 * comm_eff;
    const double one_a2a = std::max(7.0 / 64 * bytes / nvl, 8.0 * 56 / 64 * bytes / nic);
    const double one_dee = std::max(bytes * (7.0 / 64 + 56.0 / 64 * 7.0 / 8) / nvl, 8.0 * bytes / 8 * (4.0 * 7 / 8) / nic);
    // Dispatch + combine, forward and backward, in 8 layers; + NCCL's ~20 µs latency of ~ms.
    EXPECT_NEAR(a2a.stages[0].ep_s / (8 * 4.0 * one_a2a), 1.0, 0.01);
    EXPECT_NEAR(dee.stages[0].ep_s / (8 * 4.0 * one_dee), 1.0, 0.01);
    EXPECT_NEAR(dee.stages[0].ep_s / a2a.stages[0].ep_s, 0.5, 0.01);  // 3.5 remote nodes vs 7 remote copies
    EXPECT_DOUBLE_EQ(hyb.stages[0].ep_s, dee.stages[0].ep_s);  // the same hierarchical scheme
    EXPECT_LT(dee.step_s, a2a.step_s);
    // Without group-limited routing a token reaches 8·(1 − C(224, 8)/C(256, 8)) ≈ 5.3 nodes.
    const Estimate free = estimate_job(load_ok(moe_job(8, 64, "moe_dispatcher = \"deepep\"\n")));
    const double remote = 8.0 * (1.0 - none_in(256, 32, 8)) * 7 / 8;
    EXPECT_NEAR(free.stages[0].ep_s / (8 * 4.0 * std::max(bytes * (7.0 / 64 + 56.0 / 64 * 7.0 / 8) / nvl,
                                                            bytes * remote / nic)),
                1.0, 0.01);
}

// rankdedup: DeepEP sends a token once to each rank holding any of its experts (get_dispatch_layout's
// is_token_in_rank), so inside one node it moves the expected distinct ranks' copies, not k. Worked
// example, DeepSeek-V3's layer on EP 8 in one DGX-H100 node: a token's 8 experts of 256 (32 a rank)
// reach 8·(1 − C(224, 8)/C(256, 8)) = 5.29 ranks, so each dispatch moves 5.29/8 = 0.66 of the
// all-to-all's 7/8 · 8 · 4096 · 7168 · 2 B = 411 MB: 272 MB, 0.76 ms at 360 GB/s instead of 1.14 ms.
TEST(MoeDispatcherTraffic, NvlinkCarriesOneCopyPerDestinationRank) {
    const JobSpec a2a_job = load_ok(moe_job(1, 8));
    const Estimate a2a = estimate_job(a2a_job), dee = estimate_job(load_ok(moe_job(1, 8, "moe_dispatcher = \"deepep\"\n")));
    const double ranks = 8.0 * (1.0 - none_in(256, 32, 8));
    EXPECT_NEAR(ranks, 5.29, 0.005);
    const double nvl = a2a_job.cluster.gpu.link_gbps * 1e9 * time_model_constants().comm_eff;
    const double one_a2a = 7.0 / 8 * 2.0 * 8 * 4096 * 7168 / nvl, one_dee = one_a2a * ranks / 8;
    EXPECT_NEAR(one_dee / one_a2a, 0.66, 0.005);
    EXPECT_NEAR(one_a2a, 1.14e-3, 0.005e-3);
    EXPECT_NEAR(one_dee, 0.76e-3, 0.005e-3);
    // Dispatch + combine, forward and backward, in 8 layers, each with the same NCCL latency
    // (~15 µs of ~1 ms): the difference is the copies'.
    EXPECT_NEAR(a2a.stages[0].ep_s / (8 * 4.0 * one_a2a), 1.0, 0.02);
    EXPECT_NEAR((a2a.stages[0].ep_s - dee.stages[0].ep_s) / (8 * 4.0), one_a2a - one_dee, 0.005 * (one_a2a - one_dee));
    // The permute on arrival starts from the same distinct-rank copies (moeperm): the flex
    // dispatcher's GPU time and its traffic agree.
    EXPECT_LT(dee.step_s, a2a.step_s);
}

// The exposed all-to-all of a chunk whose blocks are paired with share `paired`.
double expected_exposed(const StageEstimate& plain, double paired) {
    const double comm = plain.ep_s, window = plain.fwd_s + plain.bwd_s + plain.recompute_s;
    return (1.0 - paired) * comm + paired * est::overlapped_cost(comm, window);
}

TEST(MoeA2aOverlap, CombinedScheduleHidesThePairedAllToAlls) {
    // PP 1 (combined_1f1b_schedule_for_no_pipelining): 32 micro-batches, all but the first
    // forward and the last backward paired: 31/32.
    const std::string overlap = "moe_a2a_overlap = true\n";
    const Estimate hidden = estimate_job(load_ok(moe_job(8, 64, overlap, "", 1, 2048)));
    const Estimate plain32 = estimate_job(load_ok(moe_job(8, 64, "", "", 1, 2048)));
    ASSERT_EQ(hidden.stages.size(), 1u);
    EXPECT_NEAR(hidden.stages[0].ep_s, expected_exposed(plain32.stages[0], 31.0 / 32), 1e-9 * plain32.stages[0].ep_s);
    EXPECT_LT(hidden.stages[0].ep_s, 0.5 * plain32.stages[0].ep_s);
    EXPECT_DOUBLE_EQ(hidden.stages[0].fwd_s, plain32.stages[0].fwd_s);  // the compute itself is unchanged
    // Interleaved (pp 2, vpp 2, N = pp): per rank m·v = 64 blocks of which the mean rank's
    // (p − 1) + (v − 1)·N + 1 = 4 warm-up forwards (and as many cool-down backwards) run alone.
    const std::string vpp = "vpp = 2\n";
    const Estimate plain_i = estimate_job(load_ok(moe_job(8, 32, vpp, "", 2, 1024)));
    const Estimate hidden_i = estimate_job(load_ok(moe_job(8, 32, vpp + overlap, "", 2, 1024)));
    ASSERT_EQ(hidden_i.stages.size(), 2u);
    for (int s = 0; s < 2; ++s)
        EXPECT_NEAR(hidden_i.stages[s].ep_s, expected_exposed(plain_i.stages[s], 60.0 / 64), 1e-9 * plain_i.stages[s].ep_s)
            << "stage " << s;
    // With deepep as well, the smaller all-to-all hides the same way.
    const Estimate both = estimate_job(load_ok(moe_job(8, 64, overlap + "moe_dispatcher = \"deepep\"\n", kGroups, 1, 2048)));
    const Estimate dee = estimate_job(load_ok(moe_job(8, 64, "moe_dispatcher = \"deepep\"\n", kGroups, 1, 2048)));
    EXPECT_NEAR(both.stages[0].ep_s, expected_exposed(dee.stages[0], 31.0 / 32), 1e-9 * dee.stages[0].ep_s);
}

TEST(MoeDispatcherKeys, BadValuesAreRefusedWithTheirReason) {
    struct Case {
        std::string text, message;
    };
    const std::string dense =
        "[model]\narch = \"llama\"\nlayers = 8\nhidden = 1024\nheads = 8\nvocab = 32000\nseq_len = 1024\n"
        "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[parallel]\ntp = 1\n";
    const Case cases[] = {
        {moe_job(1, 8, "moe_dispatcher = \"nvshmem\"\n"), "moe_dispatcher"},
        {dense + "moe_dispatcher = \"deepep\"\n[training]\nmicro_batch = 1\nglobal_batch = 8\n",
         "parallel.moe_dispatcher: set for a dense model"},
        {moe_job(1, 8, "moe_dispatcher = \"deepep\"\n") + "framework = \"deepspeed\"\n",
         "allowed: only with framework \"megatron\""},
        {moe_job(2, 8, "moe_a2a_overlap = true\n", "", 2), "parallel.moe_a2a_overlap: true with pp = 2 and no vpp"},
        {moe_job(1, 8, "moe_a2a_overlap = true\nrecompute = \"full\"\n"), "true with recompute = \"full\""},
        {moe_job(1, 8, "moe_a2a_overlap = true\nmoe_shared_expert_overlap = true\n"),
         "true with moe_shared_expert_overlap = true"},
        {moe_job(1, 1, "moe_a2a_overlap = true\n"), "parallel.moe_a2a_overlap: true with ep = 1"},
        {moe_job(1, 8, "moe_a2a_overlap = true\n", "mtp_layers = 2\n"), "true with mtp_layers = 2"},
        {moe_job(1, 8, "", "moe_router_num_groups = 8\n"), "model.moe_router_group_topk: missing"},
        {moe_job(1, 8, "", "moe_router_num_groups = 7\nmoe_router_group_topk = 4\n"),
         "model.moe_router_num_groups: got 7, which does not divide experts = 256"},
        {moe_job(1, 8, "", "moe_router_num_groups = 8\nmoe_router_group_topk = 9\n"),
         "model.moe_router_group_topk: got 9 with moe_router_num_groups = 8; allowed: 1 .. 8"},
        {moe_job(1, 8, "", "moe_router_num_groups = 256\nmoe_router_group_topk = 4\n"),
         "4 groups of 1 experts hold fewer than top_k = 8"},
    };
    for (const Case& c : cases) ptd_test::expect_refused(load(c.text), c.message, "deepep.toml:");
}

TEST(MoeDispatcherKeys, SavedAndReadBack) {
    const JobSpec job = load_ok(moe_job(8, 64, "moe_dispatcher = \"hybridep\"\nmoe_a2a_overlap = true\n", kGroups));
    const JobSpec back = load_ok(save_job_toml(job));
    EXPECT_EQ(back.parallel.moe_dispatcher, MoeDispatcher::hybridep);
    EXPECT_TRUE(back.parallel.moe_a2a_overlap);
    EXPECT_EQ(back.model.moe_router_num_groups, 8);
    EXPECT_EQ(back.model.moe_router_group_topk, 4);
    // The defaults write nothing.
    const std::string plain = save_job_toml(load_ok(moe_job(8, 64)));
    EXPECT_EQ(plain.find("moe_dispatcher"), std::string::npos) << plain;
    EXPECT_EQ(plain.find("moe_a2a_overlap"), std::string::npos) << plain;
    EXPECT_EQ(plain.find("moe_router_num_groups"), std::string::npos) << plain;
}

TEST(MoeDispatcherExport, MegatronFlags) {
    using ptd_test::export_text;
    ptd_test::expect_mentions(
        export_text(load_ok(moe_job(8, 64, "moe_dispatcher = \"deepep\"\nmoe_a2a_overlap = true\n", kGroups)),
                    ExportFormat::megatron),
        {"--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep", "--overlap-moe-expert-parallel-comm",
         "--moe-router-num-groups 8", "--moe-router-group-topk 4"});
    ptd_test::expect_mentions(export_text(load_ok(moe_job(8, 64, "moe_dispatcher = \"hybridep\"\n")), ExportFormat::megatron),
                              {"--moe-flex-dispatcher-backend hybridep"});
    const std::string plain = export_text(load_ok(moe_job(8, 64)), ExportFormat::megatron);
    ptd_test::expect_mentions(plain, {"--moe-token-dispatcher-type alltoall"});
    ptd_test::expect_no_mention(plain, {"--moe-flex-dispatcher-backend", "--overlap-moe-expert-parallel-comm", "--moe-router-num-groups"});
}

TEST(MoeDispatcherLoader, RunKeysReachTheJob) {
    const ::Run run = ptd_test::load_moe_run_row(
        "deepep_keys.toml",
        "moe_dispatcher = \"deepep\"\nmoe_a2a_overlap = true\nmoe_router_num_groups = 4\nmoe_router_group_topk = 2\n");
    EXPECT_EQ(run.job.parallel.moe_dispatcher, MoeDispatcher::deepep);
    EXPECT_TRUE(run.job.parallel.moe_a2a_overlap);
    EXPECT_EQ(run.job.model.moe_router_num_groups, 4);
    EXPECT_EQ(run.job.model.moe_router_group_topk, 2);
}

TEST(MoeDispatcherLoader, PublishedRowsCarryTheirRecipesSettings) {
    const auto runs = load_runs(PTD_SOURCE_DIR "/bench/accuracy/published_runs.toml", embedded_presets());
    auto find = [&](const std::string& name) -> const ::Run* {
        for (const ::Run& r : runs)
            if (r.name == name) return &r;
        return nullptr;
    };
    const ::Run* b200 = find("mbridge2604-deepseek-v3-b200-mxfp8");  // deepep + a2a overlap
    ASSERT_NE(b200, nullptr);
    EXPECT_TRUE(b200->skip.empty()) << b200->skip;
    EXPECT_EQ(b200->job.parallel.moe_dispatcher, MoeDispatcher::deepep);
    EXPECT_TRUE(b200->job.parallel.moe_a2a_overlap);
    EXPECT_EQ(b200->job.model.moe_router_num_groups, 8);
    EXPECT_EQ(b200->job.model.moe_router_group_topk, 4);
    const ::Run* h100 = find("mbridge2606-qwen3-30b-a3b-h100-fp8");  // hybridep, no overlap
    ASSERT_NE(h100, nullptr);
    EXPECT_EQ(h100->job.parallel.moe_dispatcher, MoeDispatcher::hybridep);
    EXPECT_FALSE(h100->job.parallel.moe_a2a_overlap);
    EXPECT_EQ(h100->job.model.moe_router_num_groups, 0);  // Qwen3-MoE routes without groups
    // The 25.11 release's workload configs (Megatron-Bridge v0.2.0) set moe_a2a_overlap on the
    // Qwen3 H100 and B200 FP8 runs and off on the DeepSeek-V3 B200 run; the dispatcher stays
    // the all-to-all (no flex backend named).
    for (const char* name : {"mbridge2511-qwen3-30b-a3b-h100-fp8", "mbridge2511-qwen3-235b-a22b-b200-mxfp8",
                             "mbridge2511-qwen3-235b-a22b-h100-fp8"}) {
        const ::Run* r = find(name);
        ASSERT_NE(r, nullptr) << name;
        EXPECT_EQ(r->job.parallel.moe_dispatcher, MoeDispatcher::alltoall) << name;
        EXPECT_TRUE(r->job.parallel.moe_a2a_overlap) << name;
    }
    const ::Run* dsv3_2511 = find("mbridge2511-deepseek-v3-b200-mxfp8");
    ASSERT_NE(dsv3_2511, nullptr);
    EXPECT_FALSE(dsv3_2511->job.parallel.moe_a2a_overlap);
    // Every row outside the DeepSeek / Qwen block and Megatron-LM's DeepSeek-V3 guide (whose
    // final run is HybridEP's) keeps the defaults (the all-to-all, no overlap).
    int modern = 0;
    for (const ::Run& r : runs) {
        if (r.job.parallel.moe_dispatcher != MoeDispatcher::alltoall || r.job.parallel.moe_a2a_overlap) {
            ++modern;
            EXPECT_TRUE(r.name.rfind("mbridge", 0) == 0 || r.name == "mcoreds25-deepseek-v3-gb200-mxfp8-final") << r.name;
        }
    }
    EXPECT_EQ(modern, 15);
}

}  // namespace
