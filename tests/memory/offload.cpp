// offload.cpp — optimizer / parameter offload: the offloaded states
// leave GPU memory for host memory, host memory per node is counted and checked against the
// node's RAM, the PCIe copies and the CPU optimizer step appear in the step time, the planner
// offloads only where a layout does not fit without, exports write each framework's offload
// settings, and keys that no framework can run are rejected with the key named.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/plan/planner.h"
#include "ptd/spec/presets.h"
#include "ptd/timeline/timeline.h"

#include "job_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Llama 2 13B on one node of 8 A100 40GB (the ZeRO-Offload question: TP, ZeRO-DP or offload?).
// `parallel` is the [parallel] table's body, `cluster_extra` more [cluster] keys.
Result<JobSpec> load_13b(const std::string& parallel, const std::string& cluster_extra = "") {
    return load_job_text("[model]\npreset = \"llama2-13b\"\n"
                         "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"a100-40gb\"\n" + cluster_extra +
                             "\n[parallel]\n" + parallel +
                             "\n[training]\nmicro_batch = 1\nglobal_batch = 64\nprecision = \"bf16\"\n",
                         "offload.toml", presets());
}
JobSpec job_13b(const std::string& parallel, const std::string& cluster_extra = "") {
    return loaded(load_13b(parallel, cluster_extra));
}

TEST(Offload, OptimizerOffloadMovesTheOptimizerStatesToHostMemory) {
    const Estimate on_gpu = estimate_job(job_13b("dp = 8\nzero = 2\nrecompute = \"full\""));
    const Estimate off = estimate_job(job_13b("dp = 8\nzero = 2\nrecompute = \"full\"\noffload_optimizer = \"cpu\""));
    ASSERT_EQ(on_gpu.stages.size(), 1u);
    ASSERT_EQ(off.stages.size(), 1u);
    const MemoryBreakdown &a = on_gpu.stages[0].mem, &b = off.stages[0].mem;
    const double off_job_fragmentation = EstimateSpec{}.fragmentation;
    EXPECT_GT(a.optimizer, 0);
    EXPECT_EQ(b.optimizer, 0);  // fp32 master + Adam m, v: on the host
    EXPECT_EQ(b.grads, 0);      // ZeRO-2: each reduced bucket goes straight to the host partition
    EXPECT_EQ(b.params, a.params);
    EXPECT_EQ(b.activations, a.activations);
    EXPECT_EQ(a.host, 0);
    // Host: the optimizer shard plus an fp32 copy of the gradient shard (4 bytes per parameter).
    const double shard = off.stages[0].params_count / 8;
    EXPECT_NEAR(b.host, a.optimizer + 4.0 * shard, 1e-6 * b.host);
    // The GPU is lighter by the states and the fragmentation they no longer cause.
    EXPECT_NEAR(a.total() - b.total(), (a.optimizer + a.grads) * (1 + off_job_fragmentation), 1e-6 * a.total());
    EXPECT_FALSE(on_gpu.fits);  // 13B with ZeRO-2 over 8 A100 40GB: optimizer states do not fit ...
    EXPECT_TRUE(off.fits);      // ... offloaded they do
    // Per node: the 8 GPUs' host bytes, checked against DGX A100 (320 GB)'s 1 TB.
    EXPECT_NEAR(off.host_bytes_per_node, 8 * b.host, 1e-6 * b.host);
    EXPECT_EQ(off.host_capacity_bytes, 1024 * kGiB);
    EXPECT_TRUE(off.host_fits);
}

TEST(Offload, ParameterOffloadUnderZero3MovesTheParameterShardToo) {
    const Estimate opt = estimate_job(job_13b("dp = 8\nzero = 3\noffload_optimizer = \"cpu\""));
    const Estimate both = estimate_job(job_13b("dp = 8\nzero = 3\noffload_optimizer = \"cpu\"\noffload_params = true"));
    const MemoryBreakdown &a = opt.stages[0].mem, &b = both.stages[0].mem;
    EXPECT_GT(a.params, 0);
    EXPECT_EQ(b.params, 0);
    EXPECT_NEAR(b.host, a.host + a.params, 1e-6 * b.host);
    EXPECT_EQ(b.temp, a.temp);  // the gathered layers still live on the GPU while they run
}

TEST(Offload, HostMemoryTooSmallForTheNodeMeansTheLayoutDoesNotFit) {
    const std::string layout = "dp = 8\nzero = 2\nrecompute = \"full\"\noffload_optimizer = \"cpu\"";
    const Estimate fits = estimate_job(job_13b(layout));
    ASSERT_TRUE(fits.fits);
    // 8 GPUs × (12 + 4) bytes × 13B / 8 ≈ 194 GiB on the node: 128 GiB of RAM is too little.
    const Estimate small = estimate_job(job_13b(layout, "host_memory_gib = 128"));
    EXPECT_EQ(small.host_capacity_bytes, 128 * kGiB);
    EXPECT_GT(small.host_bytes_per_node, small.host_capacity_bytes);
    EXPECT_FALSE(small.host_fits);
    EXPECT_FALSE(small.fits);
    EXPECT_EQ(small.stages[0].mem.total(), fits.stages[0].mem.total());  // the GPU side is unchanged
    bool noted = false;
    for (const std::string& n : small.notes) noted = noted || contains(n, "MORE than the node's RAM");
    EXPECT_TRUE(noted);
    // A GPU without a reference system: host RAM unknown, not checked.
    JobSpec l40s = job_13b(layout);
    l40s.cluster.gpu = *presets().find_gpu("l40s");
    const Estimate unknown = estimate_job(l40s);
    EXPECT_EQ(unknown.host_capacity_bytes, 0);
    EXPECT_TRUE(unknown.host_fits);
}

TEST(Offload, HostMemoryPerNodeSumsTheStagesOfTheNodesRanks) {
    // pp = 2 with the pipeline dimension inside the node (tp-cp-ep-pp-dp, tp 2): a node holds
    // ranks of both stages, so its host memory is the sum of different stages' shards.
    const JobSpec j = job_13b("tp = 2\npp = 2\ndp = 2\nzero = 1\noffload_optimizer = \"cpu\"\norder = \"tp-cp-ep-pp-dp\"");
    const Estimate e = estimate_job(j);
    ASSERT_EQ(e.stages.size(), 2u);
    EXPECT_NE(e.stages[0].mem.host, e.stages[1].mem.host);  // the embedding on stage 0, the output on 1
    EXPECT_NEAR(e.host_bytes_per_node, 4 * (e.stages[0].mem.host + e.stages[1].mem.host), 1e-6 * e.host_bytes_per_node);
}

TEST(Offload, PcieCopiesAndTheCpuOptimizerStepAppearInTheStepTime) {
    const std::string layout = "dp = 8\nzero = 2\nrecompute = \"full\"";
    const Estimate on_gpu = estimate_job(job_13b(layout));
    const Estimate off = estimate_job(job_13b(layout + "\noffload_optimizer = \"cpu\""));
    EXPECT_EQ(on_gpu.time.offload, 0);
    EXPECT_GT(off.time.offload, 0);
    EXPECT_EQ(off.time.optimizer, 0);  // the GPU no longer steps
    EXPECT_GT(off.step_s, on_gpu.step_s);
    const StageTail& t = off.stages[0].tail;
    const double shard = off.stages[0].params_count / 8;
    // The node's CPU steps all 8 GPUs' shards; 16-bit gradients down, 16-bit parameters up.
    // bits: at the host CPU's rate, the DGX A100's 2 × EPYC 7742 (a100-40gb's default cluster).
    EXPECT_NEAR(t.cpu_optimizer_s, 8 * shard / 2.6e9, 1e-9);
    EXPECT_NEAR(t.offload_h2d_s, 2 * shard / (25e9), 1e-9);
    EXPECT_NEAR(t.offload_d2h_s, 2 * shard / (25e9), 1e-9);
    EXPECT_NEAR(off.time.offload, t.offload_s, 1e-12);
    EXPECT_GE(t.offload_s, std::max(t.cpu_optimizer_s, t.offload_h2d_s));
    // A faster link shortens the copies (given pcie_gbps overrides the generation's 25 GB/s).
    const Estimate fast = estimate_job(job_13b(layout + "\noffload_optimizer = \"cpu\"", "pcie_gbps = 100"));
    EXPECT_NEAR(fast.stages[0].tail.offload_h2d_s, t.offload_h2d_s / 4, 1e-9);
    EXPECT_NEAR(fast.pcie_gbps, 100, 1e-9);
    // The breakdown still adds up to the step.
    EXPECT_NEAR(off.time.total(), off.step_s, 1e-9 * off.step_s);
}

TEST(Offload, PredictedTimelineEndsWithTheOffloadStep) {
    for (const char* layout : {"dp = 8\nzero = 2\nrecompute = \"full\"\noffload_optimizer = \"cpu\"",
                               "dp = 8\nzero = 3\noffload_optimizer = \"cpu\"\noffload_params = true",
                               "tp = 2\npp = 2\ndp = 2\ndistributed_optimizer = true\noffload_optimizer = \"cpu\""}) {
        const JobSpec j = job_13b(layout);
        const Estimate e = estimate_job(j);
        ASSERT_GT(e.time.offload, 0) << layout;
        EXPECT_NEAR(predicted_timeline(j).makespan_s, e.step_s, 1e-9 * e.step_s) << layout;
    }
}

TEST(Offload, ParameterOffloadFetchesTheShardForEveryGather) {
    const Estimate both = estimate_job(job_13b("dp = 8\nzero = 3\noffload_optimizer = \"cpu\"\noffload_params = true"));
    const StageTail& t = both.stages[0].tail;
    const double shard = both.stages[0].params_count / 8;
    EXPECT_NEAR(t.offload_param_fetch_s, 2.0 * both.micro_batches * 2 * shard / 25e9, 1e-9);
    EXPECT_EQ(t.offload_h2d_s, 0);  // updated parameters stay on the host
}

// A 1.5B model on one 24 GB GPU: nothing fits without offload (16 bytes per parameter).
JobSpec one_gpu_job() {
    return job_from_text("[model]\npreset = \"gpt2-1.5b\"\n[cluster]\nnodes = 1\ngpus_per_node = 1\ngpu = \"rtx4090\"\n"
                         "[training]\nglobal_batch = 8\nprecision = \"bf16\"\n",
                         "one-gpu.toml");
}

TEST(Offload, PlannerOffloadsWhenNothingFitsWithout) {
    const JobSpec job = one_gpu_job();
    PlanOptions o;
    o.top_k = 5;
    auto r = plan_layouts(job, o);
    ASSERT_TRUE(r) << r.error().str();
    ASSERT_FALSE(r->top.empty()) << r->why_best;
    for (const PlanEntry& e : r->top) {
        EXPECT_EQ(e.choice.offload_optimizer, OffloadDevice::cpu);
        EXPECT_GT(e.score.host_bytes_per_node, 0);
    }
    // Winner and runner-up both offload: the line says so once, with what each costs.
    EXPECT_TRUE(contains(r->why_best, "both offload to host memory (")) << r->why_best;
    EXPECT_TRUE(contains(r->why_best, "of PCIe + CPU optimizer per step")) << r->why_best;
    // Without offload in the search (zero not varied, the job's zero 0), nothing fits.
    o.vary_zero = false;
    auto none = plan_layouts(job, o);
    ASSERT_TRUE(none);
    EXPECT_TRUE(none->top.empty());
    // Pruning keeps the offloaded answer exact.
    PlanOptions ex;
    ex.top_k = 5, ex.exhaustive = true;
    auto all = plan_layouts(job, ex);
    ASSERT_TRUE(all);
    ASSERT_EQ(all->top.size(), r->top.size());
    for (size_t i = 0; i < r->top.size(); ++i) EXPECT_EQ(all->top[i].score.tokens_per_s, r->top[i].score.tokens_per_s);
    EXPECT_EQ(all->feasible, r->feasible);
}

TEST(Offload, PlannerDoesNotOffloadWhereLayoutsFitWithout) {
    auto j = load_job_text("[model]\npreset = \"llama3-8b\"\n[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n"
                           "[training]\nglobal_batch = 64\n",
                           "fits.toml", presets());
    ASSERT_TRUE(j) << j.error().str();
    PlanOptions o;
    o.top_k = 20;
    auto r = plan_layouts(*j, o);
    ASSERT_TRUE(r) << r.error().str();
    ASSERT_FALSE(r->top.empty());
    for (const PlanEntry& e : r->top) {
        EXPECT_EQ(e.choice.offload_optimizer, OffloadDevice::none);
        EXPECT_FALSE(e.choice.offload_params);
    }
    // Not even where offload would buy headroom: the Pareto front (speed vs headroom) would
    // list offloaded layouts if the search tried them on layouts that fit.
    ASSERT_FALSE(r->pareto.empty());
    for (const PlanEntry& e : r->pareto) EXPECT_EQ(e.score.host_bytes_per_node, 0) << e.choice.tp << " " << e.choice.zero;
}

TEST(Offload, PlannerFindsNothingWhenTheHostIsTooSmallAndSaysWhy) {
    JobSpec job = one_gpu_job();
    job.cluster.host_memory_gib = 4;  // the 1.5B's offloaded states need ~24 GiB
    auto r = plan_layouts(job, PlanOptions{});
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_TRUE(r->top.empty());
    EXPECT_TRUE(contains(r->why_best, "offloading fits the GPUs")) << r->why_best;
    EXPECT_TRUE(contains(r->why_best, "GiB of host memory per node, more than the 4 GiB there")) << r->why_best;
}

TEST(Offload, ExportsWriteEachFrameworksOffloadSettings) {
    // DeepSpeed: zero_optimization.offload_optimizer / offload_param, device cpu.
    const JobSpec z3 = job_13b("dp = 8\nzero = 3\noffload_optimizer = \"cpu\"\noffload_params = true");
    auto ds = export_job(z3, ExportFormat::deepspeed);
    ASSERT_TRUE(ds) << ds.error().str();
    const auto cfg = nlohmann::json::parse(ds->text);
    EXPECT_EQ(cfg["zero_optimization"]["offload_optimizer"]["device"], "cpu");
    EXPECT_EQ(cfg["zero_optimization"]["offload_param"]["device"], "cpu");
    EXPECT_EQ(cfg["zero_optimization"]["stage"], 3);
    const JobSpec z2 = job_13b("dp = 8\nzero = 2\noffload_optimizer = \"cpu\"");
    auto ds2 = export_job(z2, ExportFormat::deepspeed);
    ASSERT_TRUE(ds2);
    const auto cfg2 = nlohmann::json::parse(ds2->text);
    EXPECT_EQ(cfg2["zero_optimization"]["offload_optimizer"]["device"], "cpu");
    EXPECT_FALSE(cfg2["zero_optimization"].contains("offload_param"));
    // Megatron-LM: the distributed optimizer's CPU offload (needs the precision-aware optimizer).
    const JobSpec dopt = job_13b("tp = 2\ndp = 4\ndistributed_optimizer = true\noffload_optimizer = \"cpu\"");
    auto mg = export_job(dopt, ExportFormat::megatron);
    ASSERT_TRUE(mg) << mg.error().str();
    for (const char* flag : {"--use-distributed-optimizer", "--optimizer-cpu-offload", "--optimizer-offload-fraction 1.0",
                             "--use-precision-aware-optimizer", "--overlap-cpu-optimizer-d2h-h2d"})
        EXPECT_TRUE(contains(mg->text, flag)) << flag << "\n" << mg->text;
    auto mg_plain = export_job(job_13b("tp = 2\ndp = 4\ndistributed_optimizer = true"), ExportFormat::megatron);
    ASSERT_TRUE(mg_plain);
    EXPECT_FALSE(contains(mg_plain->text, "offload"));
    // torchtitan: FSDP2's CPUOffloadPolicy offloads everything together.
    // (the TOML form on a model with a torchtitan flavor: v0.2.x has none for Llama 2)
    const std::string tt = export_text(load_asset("llama3-8b-h100.toml", {"parallel.tp=1", "parallel.dp=8", "parallel.zero=3",
                                                                          "parallel.sequence_parallel=false",
                                                                          "parallel.offload_optimizer=cpu", "parallel.offload_params=true"}),
                                       ExportFormat::torchtitan_toml);
    EXPECT_TRUE(contains(tt, "enable_cpu_offload = true")) << tt;
    const std::string tp = export_text(z3, ExportFormat::torchtitan);
    EXPECT_TRUE(contains(tp, "enable_cpu_offload=True")) << tp;
    auto partial = export_job(job_13b("dp = 8\nzero = 3\noffload_optimizer = \"cpu\""), ExportFormat::torchtitan_toml);
    ASSERT_FALSE(partial);
    EXPECT_TRUE(contains(partial.error().str(), "parallel.offload_optimizer")) << partial.error().str();
    EXPECT_TRUE(contains(partial.error().str(), "enable_cpu_offload")) << partial.error().str();
}

TEST(Offload, BadKeysAreRejectedNamingTheKey) {
    expect_mentions(refusal(load_13b("dp = 8\nzero = 2\noffload_params = true")), {"parallel.offload_params", "zero = 3"});
    expect_mentions(refusal(load_13b("tp = 8\noffload_optimizer = \"cpu\"")), {"parallel.offload_optimizer"});
    expect_mentions(refusal(load_13b("dp = 8\nzero = 3\noffload_optimizer = \"nvme\"")),
                    {"NVMe offload (ZeRO-Infinity) is not modelled", "offload.toml:"});  // file:line
    expect_mentions(refusal(load_13b("dp = 8\nzero = 3\noffload_optimizer = \"gpu\"")), {"allowed: none, cpu"});
    expect_mentions(refusal(load_13b("dp = 8\nzero = 3\noffload_params = \"yes\"")), {"parallel.offload_params"});
}

TEST(Offload, KeysSurviveSaveAndLoad) {
    const JobSpec j = job_13b("dp = 8\nzero = 3\noffload_optimizer = \"cpu\"\noffload_params = true");
    EXPECT_EQ(j.parallel.offload_optimizer, OffloadDevice::cpu);
    EXPECT_TRUE(j.parallel.offload_params);
    const std::string text = save_job_toml(j);
    EXPECT_TRUE(contains(text, "offload_optimizer = \"cpu\"")) << text;
    EXPECT_EQ(ptd_test::reloaded(text).parallel, j.parallel);
    // Without offload nothing new is written.
    EXPECT_FALSE(contains(save_job_toml(job_13b("dp = 8\nzero = 3")), "offload"));
}

}  // namespace
