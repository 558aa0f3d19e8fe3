// offload_cpu_adam.cpp — the CPU-Adam rate of optimizer offload comes from the host CPU of the cluster preset (a job
// key overrides it, the estimate says where the rate came from), and every cluster preset
// states it.
#include <string>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/spec/presets.h"

#include "job_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

// Llama 2 13B, ZeRO-2 over the node's 8 GPUs with the optimizer offloaded to the CPU.
Result<JobSpec> offload_job(const std::string& cluster) {
    return load_job_text("[model]\npreset = \"llama2-13b\"\n[cluster]\nnodes = 1\n" + cluster +
                             "\n[parallel]\ndp = 8\nzero = 2\nrecompute = \"full\"\noffload_optimizer = \"cpu\"\n"
                             "[training]\nmicro_batch = 1\nglobal_batch = 64\nprecision = \"bf16\"\n",
                         "offload.toml", presets());
}

double cpu_step_rate(const Estimate& e) {  // parameters/s the node's CPU stepped at
    const StageEstimate& s = e.stages[0];
    return 8 * (s.params_count / 8) / s.tail.cpu_optimizer_s;
}

TEST(CpuAdamRate, CpuAdamRateFollowsTheClusterPresetsHostCpu) {
    const PresetCatalog& cat = presets();
    for (const char* name : {"dgx-a100", "dgx-h100", "hgx-h200", "dgx-b200"}) {
        const ClusterPreset* c = cat.find_cluster(name);
        ASSERT_TRUE(c) << name;
        const JobSpec job = loaded(offload_job(std::string("preset = \"") + name + "\""), name);
        EXPECT_DOUBLE_EQ(job.cluster.cpu_adam_params_per_s, c->cpu_adam_params_per_s) << name;
        const Estimate e = estimate_job(job);
        EXPECT_NEAR(cpu_step_rate(e), c->cpu_adam_params_per_s, 1e-6 * c->cpu_adam_params_per_s) << name;
    }
    // The hosts differ: EPYC 7742 (DDR4-3200) < Xeon 8480C (DDR5-4800) < Xeon 8570 (DDR5-5600).
    EXPECT_LT(cat.find_cluster("dgx-a100")->cpu_adam_params_per_s, cat.find_cluster("dgx-h100")->cpu_adam_params_per_s);
    EXPECT_LT(cat.find_cluster("dgx-h100")->cpu_adam_params_per_s, cat.find_cluster("dgx-b200")->cpu_adam_params_per_s);
    // A job naming only the GPU gets its default cluster's host (a100-80gb → dgx-a100).
    const JobSpec by_gpu = loaded(offload_job("gpus_per_node = 8\ngpu = \"a100-80gb\""));
    EXPECT_DOUBLE_EQ(by_gpu.cluster.cpu_adam_params_per_s, cat.find_cluster("dgx-a100")->cpu_adam_params_per_s);
    // The job key overrides the preset, and the estimate says where the rate came from.
    const JobSpec own = loaded(offload_job("preset = \"dgx-h100\"\ncpu_adam_params_per_s = 1e9"));
    const Estimate e_own = estimate_job(own);
    EXPECT_NEAR(cpu_step_rate(e_own), 1e9, 1e-3);
    EXPECT_TRUE(any_note(e_own, "CPU optimizer at 1.0 B params/s per node")) << e_own.notes.size();
    // It survives save and load.
    const JobSpec again = loaded(load_job_text(save_job_toml(own), "again.toml", presets()));
    EXPECT_DOUBLE_EQ(again.cluster.cpu_adam_params_per_s, 1e9);
    // A GPU without a cluster preset: the host is unknown; the estimate says what it assumed.
    const JobSpec l40s = loaded(offload_job("gpus_per_node = 8\ngpu = \"l40s\"\ninter_gbps = 25"));
    EXPECT_EQ(l40s.cluster.cpu_adam_params_per_s, 0);
    EXPECT_TRUE(any_note(estimate_job(l40s), "host CPU unknown"));
    // Out of range: named, not clamped.
    auto bad = offload_job("preset = \"dgx-h100\"\ncpu_adam_params_per_s = 0");
    ASSERT_FALSE(bad);
    EXPECT_TRUE(contains(bad.error().str(), "cluster.cpu_adam_params_per_s")) << bad.error().str();
}

TEST(CpuAdamRate, EveryClusterPresetStatesItsCpuAdamRate) {
    for (const ClusterPreset& c : presets().clusters) EXPECT_GT(c.cpu_adam_params_per_s, 0) << c.name;
    PresetCatalog cat = embedded_presets();
    const std::string missing =
        "[odd]\ndescription = \"x\"\ngpu = \"h100-sxm\"\ngpus_per_node = 8\nnics_per_node = 8\nnic_gbps = 400.0\n"
        "rail_optimized = true\nnvls = true\nintra_gbps = 450.0\nhost_memory_gib = 2048.0\npcie_gbps = 63.0\n";
    auto r = parse_cluster_presets(cat, missing, "clusters.toml");
    ASSERT_FALSE(r);
    EXPECT_TRUE(contains(r.error().str(), "cpu_adam_params_per_s")) << r.error().str();
}

}  // namespace
