// nccl_model.cpp — the collective model as NCCL runs it (collectives.cpp) and the
// cluster presets that feed it: members per node decide how many NICs a group drives, NCCL's
// tuner picks tree over ring for small messages at scale, small messages reach a fraction of
// the bus bandwidth, NVLink SHARP speeds intra-node all-reduce, and [cluster] preset / network
// keys load with located errors.
#include <string>

#include <gtest/gtest.h>

#include "model/estimate_internal.h"
#include "ptd/spec/job_spec.h"
#include "ptd/spec/presets.h"

namespace {

using namespace ptd;
using ptd::est::Collective;
using ptd::est::GroupNet;
using ptd::est::LayoutDerived;
using ptd::est::nccl_time;

ClusterSpec dgx_h100() {
    ClusterSpec c;
    c.nodes = 16;
    c.gpus_per_node = 8;
    c.gpu = *embedded_presets().find_gpu("h100-sxm");
    c.intra_gbps = 450;
    c.inter_gbps = 50;
    c.nics_per_node = 8;
    c.nvls = true;
    return c;
}

LayoutDerived layout(int tp, int dp) {
    LayoutDerived L{};
    L.t = tp, L.p = 1, L.c = 1, L.ep = 1, L.dp = dp, L.edp = dp;
    return L;
}

double busbw(double bytes, const GroupNet& g) {  // nccl-tests all-reduce bus bandwidth
    return 2.0 * (g.n - 1) / g.n * bytes / nccl_time(Collective::all_reduce, bytes, g);
}

TEST(Collectives, DataParallelUnderTp8IsSlowerPerByteThanEightPerNode) {
    // 128 GPUs: DP 16 under TP 8 has one member per node (one NIC); FSDP-style DP 128 has 8.
    LayoutDerived under_tp = layout(8, 16), wide = layout(1, 128);
    est::assign_group_links(dgx_h100(), "tp-cp-ep-dp-pp", under_tp);
    est::assign_group_links(dgx_h100(), "tp-cp-ep-dp-pp", wide);
    EXPECT_EQ(under_tp.net_dp.per_node, 1);
    EXPECT_EQ(under_tp.net_dp.nodes, 16);
    EXPECT_EQ(wide.net_dp.per_node, 8);
    EXPECT_EQ(wide.net_dp.nodes, 16);
    EXPECT_EQ(under_tp.net_tp.nodes, 1);
    const double bytes = 1e9;
    // Per byte: k = 8 drives eight NIC shares, k = 1 one; NVLink (450 GB/s) caps the 8 × 50.
    const double ratio = busbw(bytes, wide.net_dp) / busbw(bytes, under_tp.net_dp);
    EXPECT_GT(ratio, 6.0);
    EXPECT_LT(ratio, 9.5);
}

TEST(Collectives, TreeBeatsRingForSmallMessagesAtScale) {
    GroupNet g;  // 256 nodes, one member each (DP under TP 8), 50 GB/s per node
    g.n = 256, g.per_node = 1, g.nodes = 256, g.bus_intra = 360e9, g.bus_inter = 40e9;
    // A ring pays 2(n−1) network steps of ≥ 2.7 µs (LL): over 1.3 ms; the tree's log2 depth far less.
    const double ring_floor = 2.0 * 255 * 2.7e-6;
    EXPECT_LT(nccl_time(Collective::all_reduce, 64e3, g), 0.25 * ring_floor);
    // Large messages run at the ring's bandwidth (tree's is 0.92 of it), plus the ring's 2·255 network steps of 14 µs: within 5%.
    const double big = 4e9, ring_bw_time = 2.0 * 255 / 256 * big / g.bus_inter;
    EXPECT_NEAR(nccl_time(Collective::all_reduce, big, g) / ring_bw_time, 1.0, 0.05);
    // The crossover: small messages grow like log(nodes), not like nodes.
    GroupNet small = g;
    small.n = small.nodes = 16;
    const double t16 = nccl_time(Collective::all_reduce, 64e3, small), t256 = nccl_time(Collective::all_reduce, 64e3, g);
    EXPECT_LT(t256 / t16, 3.0);  // 16× the nodes, ≈ 2× the tree depth
}

TEST(Collectives, SmallMessagesReachAFractionOfBusBandwidth) {
    LayoutDerived L = layout(1, 128);
    est::assign_group_links(dgx_h100(), "tp-cp-ep-dp-pp", L);
    const double peak = std::min(L.net_dp.bus_intra, L.net_dp.bus_inter);
    EXPECT_LT(busbw(1e6, L.net_dp), 0.3 * peak);   // 1 MB: latency-bound
    EXPECT_GT(busbw(4e9, L.net_dp), 0.9 * peak);   // 4 GB: bandwidth-bound
    EXPECT_LT(busbw(64e6, L.net_dp), busbw(512e6, L.net_dp));  // saturating
}

TEST(Collectives, NvlinkSharpSpeedsIntraNodeAllReduceAtEightGpus) {
    ClusterSpec with = dgx_h100(), without = dgx_h100();
    without.nvls = false;
    LayoutDerived a = layout(8, 16), b = layout(8, 16), four = layout(4, 32);
    est::assign_group_links(with, "tp-cp-ep-dp-pp", a);
    est::assign_group_links(without, "tp-cp-ep-dp-pp", b);
    est::assign_group_links(with, "tp-cp-ep-dp-pp", four);
    const double ratio = busbw(2e9, a.net_tp) / busbw(2e9, b.net_tp);
    EXPECT_NEAR(ratio, 480.0 / 370.0, 0.05);  // nccl-tests #212: 370 → 480 GB/s
    EXPECT_DOUBLE_EQ(four.net_tp.nvls_gain, 1.0);  // NCCL #1455: no gain at 4 GPUs
}

Result<JobSpec> load(const std::string& cluster) {
    return load_job_text("[model]\npreset = \"llama2-7b\"\n[cluster]\n" + cluster + "\n[parallel]\ntp = 8\n",
                         "job.toml", embedded_presets());
}

TEST(ClusterPresets, PresetSetsEveryKeyAndExplicitKeysOverride) {
    auto job = load("preset = \"dgx-h100\"\nnodes = 2");
    ASSERT_TRUE(job) << job.error().str();
    const ClusterSpec& c = job->cluster;
    EXPECT_EQ(c.gpu.name, "h100-sxm");
    EXPECT_EQ(c.gpus_per_node, 8);
    EXPECT_EQ(c.nics_per_node, 8);
    EXPECT_DOUBLE_EQ(c.inter_gbps, 50.0);  // 8 × 400 Gb/s / 8 bits / 8 GPUs
    EXPECT_TRUE(c.nvls);
    EXPECT_TRUE(c.rail_optimized);
    EXPECT_DOUBLE_EQ(c.intra_gbps, 450.0);
    EXPECT_DOUBLE_EQ(c.host_memory_gib, 2048.0);
    EXPECT_DOUBLE_EQ(c.pcie_gbps, 63.0);

    auto over = load("preset = \"dgx-h100\"\nnodes = 2\nnics_per_node = 4\nnic_gbps = 200.0\nnvls = false\n"
                     "rail_optimized = false\nhost_memory_gib = 1024.0\ngpu = \"h200\"");
    ASSERT_TRUE(over) << over.error().str();
    EXPECT_EQ(over->cluster.nics_per_node, 4);
    EXPECT_DOUBLE_EQ(over->cluster.inter_gbps, 12.5);
    EXPECT_FALSE(over->cluster.nvls);
    EXPECT_FALSE(over->cluster.rail_optimized);
    EXPECT_DOUBLE_EQ(over->cluster.host_memory_gib, 1024.0);
    EXPECT_EQ(over->cluster.gpu.name, "h200");

    auto inter = load("preset = \"dgx-a100\"\nnodes = 2\ninter_gbps = 10.0");
    ASSERT_TRUE(inter) << inter.error().str();
    EXPECT_DOUBLE_EQ(inter->cluster.inter_gbps, 10.0);  // the per-GPU figure, overridden

    // Saving and loading again gives the same cluster.
    auto again = load_job_text(save_job_toml(*over), "again.toml", embedded_presets());
    ASSERT_TRUE(again) << again.error().str();
    EXPECT_EQ(again->cluster, over->cluster);
}

TEST(ClusterPresets, GpuWithoutPresetGetsItsHardwaresNetwork) {
    auto h100 = load("nodes = 2\ngpus_per_node = 8\ngpu = \"h100-sxm\"");
    ASSERT_TRUE(h100) << h100.error().str();
    EXPECT_EQ(h100->cluster.nics_per_node, 8);
    EXPECT_DOUBLE_EQ(h100->cluster.inter_gbps, 50.0);
    EXPECT_TRUE(h100->cluster.nvls);
    auto a100 = load("nodes = 2\ngpus_per_node = 8\ngpu = \"a100-80gb\"");
    ASSERT_TRUE(a100) << a100.error().str();
    EXPECT_DOUBLE_EQ(a100->cluster.inter_gbps, 25.0);
    EXPECT_FALSE(a100->cluster.nvls);
    // No cluster preset on an L40S: one NIC per GPU at the inter_gbps default.
    auto l40s = load("nodes = 2\ngpus_per_node = 8\ngpu = \"l40s\"");
    ASSERT_TRUE(l40s) << l40s.error().str();
    EXPECT_EQ(l40s->cluster.nics_per_node, 0);
    EXPECT_FALSE(l40s->cluster.nvls);
}

TEST(ClusterPresets, BadPresetOrKeyIsLocated) {
    auto bad = load("preset = \"dgx-h10\"\nnodes = 2");
    ASSERT_FALSE(bad);
    std::string msg = bad.error().str();
    EXPECT_NE(msg.find("job.toml:4:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cluster.preset"), std::string::npos) << msg;
    EXPECT_NE(msg.find("did you mean \"dgx-h100\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("allowed"), std::string::npos) << msg;

    auto key = load("preset = \"dgx-h100\"\nnodes = 2\nnic_gbs = 400.0");
    ASSERT_FALSE(key);
    msg = key.error().str();
    EXPECT_NE(msg.find("job.toml:6:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nic_gbps"), std::string::npos) << msg;

    auto both = load("preset = \"dgx-h100\"\nnodes = 2\nnic_gbps = 400.0\ninter_gbps = 50.0");
    ASSERT_FALSE(both);
    EXPECT_NE(both.error().str().find("cluster.inter_gbps"), std::string::npos) << both.error().str();

    auto range = load("preset = \"dgx-h100\"\nnodes = 2\nnics_per_node = 0");
    ASSERT_FALSE(range);
    EXPECT_NE(range.error().str().find("nics_per_node"), std::string::npos) << range.error().str();
}

TEST(ClusterPresets, EmbeddedCopyMatchesAssetsAndGpusExist) {
    const PresetCatalog& cat = embedded_presets();
    for (const char* name : {"dgx-a100", "hgx-a100-4nic", "dgx-h100", "hgx-h100", "h100-roce", "hgx-h200", "dgx-b200"}) {
        const ClusterPreset* c = cat.find_cluster(name);
        ASSERT_NE(c, nullptr) << name;
        EXPECT_NE(cat.find_gpu(c->gpu), nullptr) << name;
        EXPECT_GT(c->nic_gbps, 0) << name;
    }
    EXPECT_EQ(cat.default_cluster_for_gpu("h100-sxm")->name, "dgx-h100");
    EXPECT_EQ(cat.default_cluster_for_gpu("a100-80gb")->name, "dgx-a100");
}

}  // namespace
