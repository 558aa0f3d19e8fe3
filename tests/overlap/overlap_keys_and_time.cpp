// overlap_keys_and_time.cpp — communication overlap: the [parallel] overlap keys
// (read with located errors, written back, exported to Megatron-LM / DeepSpeed / torchtitan)
// and the time model of overlap.cpp: what hides behind which compute, what stays exposed,
// and the SM-contention slowdown of the compute beside a collective.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/estimate_internal.h"
#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/spec/presets.h"

#include "job_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;


// Llama 3 8B on 4 nodes of 8 H100: tp 2 with SP, dp 16 across nodes, distributed optimizer.
const char* kJob = R"(
[model]
preset = "llama3-8b"

[cluster]
nodes = 4
gpus_per_node = 8
gpu = "h100-sxm"

[parallel]
tp = 2
pp = 1
sequence_parallel = true
distributed_optimizer = true
recompute = "selective"

[training]
micro_batch = 1
global_batch = 64
)";

Result<JobSpec> load(const std::string& text) { return load_job_text(text, "job.toml", presets()); }

JobSpec job_with(const std::string& parallel_lines) {
    std::string text = kJob;
    const std::string anchor = "recompute = \"selective\"\n";
    text.replace(text.find(anchor), anchor.size(), anchor + parallel_lines);
    return loaded(load(text));
}

// The same model as FSDP: tp 1 without SP, ZeRO-3 (then `zero3_lines`) instead of the
// distributed optimizer.
std::string fsdp_text(const std::string& zero3_lines = "") {
    std::string text = kJob;
    text.replace(text.find("tp = 2"), 6, "tp = 1");
    text.replace(text.find("sequence_parallel = true\n"), 25, "");
    text.replace(text.find("distributed_optimizer = true"), 28, "zero = 3" + zero3_lines);
    return text;
}

// ---- keys --------------------------------------------------------------------------------

TEST(OverlapKeys, DefaultsAreMegatronsWithoutFlags) {
    const JobSpec j = job_with("");
    EXPECT_FALSE(j.parallel.overlap_grad_reduce);
    EXPECT_FALSE(j.parallel.overlap_param_gather);
    EXPECT_FALSE(j.parallel.tp_comm_overlap);
    EXPECT_EQ(j.parallel.fsdp_prefetch, 1);
    EXPECT_FALSE(contains(save_job_toml(j), "overlap")) << "defaults are not written";
}

TEST(OverlapKeys, ParseAndRoundTrip) {
    const JobSpec j = job_with("overlap_grad_reduce = true\noverlap_param_gather = true\ntp_comm_overlap = true\n"
                               "fsdp_prefetch = 3\n");
    EXPECT_TRUE(j.parallel.overlap_grad_reduce);
    EXPECT_TRUE(j.parallel.overlap_param_gather);
    EXPECT_TRUE(j.parallel.tp_comm_overlap);
    EXPECT_EQ(j.parallel.fsdp_prefetch, 3);
    auto again = load(save_job_toml(j));
    ASSERT_TRUE(again) << again.error().str();
    EXPECT_EQ(again->parallel, j.parallel);
}

TEST(OverlapKeys, BadValuesAreLocated) {
    std::string text = kJob;
    text.replace(text.find("recompute"), 0, "fsdp_prefetch = -1\ntp_comm_overlap = \"yes\"\n");
    auto r = load(text);
    ASSERT_FALSE(r);
    const auto& d = r.error().diagnostics;
    ASSERT_EQ(d.size(), 2u) << r.error().str();
    EXPECT_EQ(d[0].key, "parallel.tp_comm_overlap");
    EXPECT_EQ(d[0].where.file, "job.toml");
    EXPECT_EQ(d[0].where.line, 16);
    EXPECT_TRUE(contains(d[0].message, "expected true or false")) << d[0].message;
    EXPECT_EQ(d[1].key, "parallel.fsdp_prefetch");
    EXPECT_EQ(d[1].where.line, 15);
    EXPECT_TRUE(contains(d[1].message, "got -1")) << d[1].message;
    EXPECT_TRUE(contains(d[1].message, "0 .. 64")) << d[1].message;
}

TEST(OverlapKeys, OldEstimateSpellingPointsToParallel) {
    auto r = load(std::string(kJob) + "\n[estimate]\noverlap_grad_reduce = true\n");
    ASSERT_FALSE(r);
    const Diagnostic& d = r.error().diagnostics.front();
    EXPECT_EQ(d.key, "estimate.overlap_grad_reduce");
    EXPECT_EQ(d.where.line, 22);
    EXPECT_TRUE(contains(d.message, "parallel.overlap_grad_reduce = true")) << d.message;
}

TEST(OverlapKeys, CombinationsMegatronRefuses) {
    std::string text = kJob;
    text.replace(text.find("distributed_optimizer = true\n"), 29, "");
    text.replace(text.find("recompute"), 0, "overlap_param_gather = true\n");
    auto r = load(text);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().diagnostics.front().key, "parallel.overlap_param_gather");
    EXPECT_TRUE(contains(r.error().diagnostics.front().message, "sharded optimizer"));

    auto no_grad = load(std::string(kJob).replace(std::string(kJob).find("recompute"), 0, "overlap_param_gather = true\n"));
    ASSERT_FALSE(no_grad);
    EXPECT_TRUE(contains(no_grad.error().diagnostics.front().message, "--overlap-grad-reduce"));

    auto no_sp = load(std::string(kJob).replace(std::string(kJob).find("sequence_parallel = true"), 24,
                                                "tp_comm_overlap = true"));
    ASSERT_FALSE(no_sp);
    EXPECT_EQ(no_sp.error().diagnostics.front().key, "parallel.tp_comm_overlap");
}

// ---- export ------------------------------------------------------------------------------

TEST(OverlapExport, FrameworksGetTheirFlags) {
    JobSpec j = job_with("overlap_grad_reduce = true\noverlap_param_gather = true\ntp_comm_overlap = true\n");
    auto mg = export_job(j, ExportFormat::megatron);
    ASSERT_TRUE(mg);
    EXPECT_TRUE(contains(mg->text, "--overlap-grad-reduce \\\n"));
    EXPECT_TRUE(contains(mg->text, "--overlap-param-gather \\\n"));
    EXPECT_TRUE(contains(mg->text, "--tp-comm-overlap \\\n"));

    auto ds = export_job(j, ExportFormat::deepspeed);
    ASSERT_TRUE(ds);
    EXPECT_EQ(nlohmann::json::parse(ds->text)["zero_optimization"]["overlap_comm"], true);

    auto tt = export_job(j, ExportFormat::torchtitan_toml);
    ASSERT_TRUE(tt);
    EXPECT_TRUE(contains(tt->text, "enable_async_tensor_parallel = true")) << tt->text;
    EXPECT_TRUE(contains(tt->text, "[compile]\nenable = true")) << tt->text;
    auto py = export_job(j, ExportFormat::torchtitan);
    ASSERT_TRUE(py);
    EXPECT_TRUE(contains(py->text, "CompileConfig(enable=True, enable_async_tensor_parallel=True)")) << py->text;

    // Off: none of them.
    JobSpec off = job_with("");
    auto mg_off = export_job(off, ExportFormat::megatron);
    ASSERT_TRUE(mg_off);
    EXPECT_FALSE(contains(mg_off->text, "overlap"));
    EXPECT_EQ(nlohmann::json::parse(export_job(off, ExportFormat::deepspeed)->text)["zero_optimization"]["overlap_comm"],
              false);
    EXPECT_FALSE(contains(export_job(off, ExportFormat::torchtitan_toml)->text, "async"));
}

TEST(OverlapExport, DeepSpeedPrefetchBucketIsDepthTimesLayer) {
    auto j = load(fsdp_text("\nfsdp_prefetch = 2"));
    ASSERT_TRUE(j) << j.error().str();
    auto ds = export_job(*j, ExportFormat::deepspeed);
    ASSERT_TRUE(ds);
    const long long per_layer = count_parameters(j->model).per_layer;
    EXPECT_EQ(nlohmann::json::parse(ds->text)["zero_optimization"]["stage3_prefetch_bucket_size"], 2 * per_layer);
}

// ---- time model --------------------------------------------------------------------------

TEST(OverlapTime, GradReduceShortensTheStepButNeverBelowCompute) {
    JobSpec off = job_with("");
    JobSpec on = job_with("overlap_grad_reduce = true\n");
    const Estimate a = estimate_job(off), b = estimate_job(on);
    const StageTail& ta = a.stages[0].tail;
    const StageTail& tb = b.stages[0].tail;
    ASSERT_GT(ta.grad_s, 0);
    EXPECT_EQ(ta.grad_exposed_s, ta.grad_s);   // off: all of it after the backward
    EXPECT_LT(tb.grad_exposed_s, ta.grad_exposed_s);
    EXPECT_LT(b.step_s, a.step_s);
    EXPECT_GE(b.step_s, b.pipeline_s);         // never below the compute it hides behind
    // The last bucket, filled when the backward ends, is never hidden.
    const double bucket = std::max(40e6, 1e6 * on.parallel.dp);
    EXPECT_GE(tb.grad_exposed_s, std::min(1.0, bucket / b.stages[0].params_count) * tb.grad_s * 0.999);
}

// dpchunk: under Megatron-core's interleaved schedule each model chunk's gradients are
// reduced when its last backward ends and each chunk's parameters gathered when the chunk
// before it starts, so the DP traffic of a run with few micro-batches per replica (GPT-3 175B,
// 512 H100, 16 micro-batches) hides behind the other chunks' compute; without interleaving only
// the last micro-batch's backward and the first forward cover it. The traffic itself is the same.
TEST(OverlapTime, InterleavedChunksHideTheirOwnDpTraffic) {
    auto gpt3 = [](int vpp, bool overlap) {
        const std::string on = overlap ? "true" : "false";
        return estimate_job(job_from_text(job_text(
            {.preset = "gpt3-175b",
             .nodes = 64,
             .parallel = "tp = 4\npp = 8\nvpp = " + std::to_string(vpp) +
                         "\nsequence_parallel = true\ndistributed_optimizer = true\noverlap_grad_reduce = " + on +
                         "\noverlap_param_gather = " + on + "\n",
             .training = "micro_batch = 1\nglobal_batch = 256\n"})));
    };
    const Estimate plain = gpt3(1, true), chunked = gpt3(12, true), off = gpt3(12, false);
    const StageTail& tp = plain.stages[0].tail;
    const StageTail& tc = chunked.stages[0].tail;
    ASSERT_GT(tc.grad_s, 0);
    EXPECT_NEAR(tc.grad_s, tp.grad_s, 1e-9 * tp.grad_s);
    EXPECT_LT(tc.grad_exposed_s + tc.param_exposed_s, 0.5 * (tp.grad_exposed_s + tp.param_exposed_s));
    EXPECT_LT(chunked.time.dp_comm, 0.5 * plain.time.dp_comm);
    // Never below the SM contention of what ran beside the compute, and all of it when off.
    const double sigma = time_model_constants().overlap_slowdown;
    EXPECT_GE(tc.grad_exposed_s, tc.grad_s * sigma / (1 + sigma) * 0.999);
    EXPECT_EQ(off.stages[0].tail.grad_exposed_s, off.stages[0].tail.grad_s);
    EXPECT_EQ(off.stages[0].tail.param_exposed_s, off.stages[0].tail.param_s);
}

// gradbuf: a Megatron step passes over its whole local gradient buffer whatever the
// data-parallel size (train_step's zero_grad_buffer, one fp32 write; Megatron-LM's 1/dp scaling
// before the reduction, a read and a write), and Megatron-LM's distributed optimizer of
// 2022-10 to 2024-01 copied every gathered parameter out of its buffer (a bf16 read and write).
// Worked on the Llama 3 8B job (tp 2, dp 16, Adam with fp32 states: 30 bytes per shard
// parameter): the 2023-01 stack's step costs 4 bytes per local parameter more than today's,
// which gives the HBM rate; today's optimizer part is then (P/16 · 30 + P · 12) / rate, at
// dp 32 (P/32 · 30 + P · 12) / rate, and NeMo's recipes (bf16 buffer, averaging in the NCCL
// call) (P/16 · 30 + P · 2) / rate.
TEST(OverlapTime, GradientBufferPassesWeighTheSameAtEveryDataParallelSize) {
    auto tail_of = [](const std::string& training_lines, int nodes) {
        std::string text = kJob;
        text.replace(text.find("nodes = 4"), 9, "nodes = " + std::to_string(nodes));
        text.replace(text.find("micro_batch = 1\n"), 16, "micro_batch = 1\n" + training_lines);
        const Estimate e = estimate_job(loaded(load(text)));
        return std::pair<double, double>{e.stages[0].tail.optimizer_s, e.stages[0].params_count};
    };
    const auto [today, P] = tail_of("", 4);
    const auto [dated, P_dated] = tail_of("framework_version = \"2023-01\"\n", 4);
    ASSERT_DOUBLE_EQ(P, P_dated);
    ASSERT_GT(dated, today);
    const double rate = 4.0 * P / (dated - today);  // bytes/s
    const JobSpec job = job_with("");
    EXPECT_NEAR(rate, job.cluster.gpu.hbm_gbps * 1e9 * time_model_constants().hbm_eff, 1e-6 * rate) << "HBM at hbm_eff";
    EXPECT_NEAR(today, (P / 16 * 30 + P * 12) / rate, 1e-9 * today);
    const auto [dp32, P32] = tail_of("", 8);
    ASSERT_DOUBLE_EQ(P, P32);
    EXPECT_NEAR(dp32, (P / 32 * 30 + P * 12) / rate, 1e-9 * dp32);
    const auto [nemo, P_nemo] = tail_of("framework = \"nemo\"\n", 4);
    ASSERT_DOUBLE_EQ(P, P_nemo);
    EXPECT_NEAR(nemo, (P / 16 * 30 + P * 2) / rate, 1e-9 * nemo);
}

TEST(OverlapTime, SmContentionMakesAnOverlappedStepSlowerThanComputeAlone) {
    TimeModelConstants& k = time_model_constants();
    const TimeModelConstants saved = k;
    const double sigma = k.overlap_slowdown;
    ASSERT_GT(sigma, 0);
    // A collective fully inside its window still costs the slowdown of the compute beside it.
    EXPECT_DOUBLE_EQ(est::overlapped_cost(1.0, 10.0), sigma / (1 + sigma));
    EXPECT_DOUBLE_EQ(est::overlapped_cost(5.0, 2.0), 3.0);  // the excess when it does not fit
    EXPECT_EQ(est::overlapped_cost(0.0, 1.0), 0.0);

    JobSpec on = job_with("overlap_grad_reduce = true\noverlap_param_gather = true\n");
    on.cluster.inter_gbps = 400;  // a fast network: the reduction fits inside the backward
    const Estimate with = estimate_job(on);
    k.overlap_slowdown = 0;
    const Estimate ideal = estimate_job(on);
    k = saved;
    EXPECT_GT(with.step_s, ideal.step_s);
    EXPECT_GT(with.stages[0].tail.grad_exposed_s, ideal.stages[0].tail.grad_exposed_s);
    // Overlapped, contention included, is still faster than not overlapping.
    JobSpec off = job_with("");
    off.cluster.inter_gbps = 400;
    EXPECT_LT(with.step_s, estimate_job(off).step_s);
}

TEST(OverlapTime, TpCommOverlapHidesTpCommunicationPartly) {
    const Estimate a = estimate_job(job_with(""));
    const Estimate b = estimate_job(job_with("tp_comm_overlap = true\n"));
    ASSERT_GT(a.time.tp_comm, 0);
    EXPECT_LT(b.time.tp_comm, a.time.tp_comm);
    // Not all of it: the last reduce-scatter ring step and the contention remain.
    EXPECT_GE(b.time.tp_comm, 0.25 * a.time.tp_comm);  // t = 2: a quarter is reduce-scatter's last step
    EXPECT_LT(b.step_s, a.step_s);
    EXPECT_DOUBLE_EQ(b.time.compute, a.time.compute);  // the GEMMs themselves are the same
}

TEST(OverlapTime, PrefetchedPassExposesOnlyTheExcess) {
    TimeModelConstants& k = time_model_constants();
    const TimeModelConstants saved = k;
    k.overlap_slowdown = 0;  // the pipeline alone
    const std::vector<double> compute(10, 1.0);
    // Communication shorter than compute: only the first gather is exposed.
    std::vector<double> small(10, 0.4);
    EXPECT_NEAR(est::prefetched_pass_exposed(small.data(), compute.data(), 10, 1), 0.4, 1e-12);
    // Longer: the first gather plus the excess of each of the other nine.
    std::vector<double> big(10, 1.5);
    EXPECT_NEAR(est::prefetched_pass_exposed(big.data(), compute.data(), 10, 1), 1.5 + 9 * 0.5, 1e-12);
    // No prefetch: every gather waits for the compute before it.
    EXPECT_NEAR(est::prefetched_pass_exposed(small.data(), compute.data(), 10, 0), 4.0, 1e-12);
    // A large unit (the output layer) hides behind more compute with a deeper prefetch.
    std::vector<double> lumpy(10, 0.2);
    lumpy[9] = 2.5;
    const double d1 = est::prefetched_pass_exposed(lumpy.data(), compute.data(), 10, 1);
    const double d3 = est::prefetched_pass_exposed(lumpy.data(), compute.data(), 10, 3);
    EXPECT_NEAR(d1, 0.2 + 1.5, 1e-12);
    EXPECT_NEAR(d3, 0.2, 1e-12);
    k = saved;
    // With contention the hidden communication costs σ/(1 + σ) of itself.
    const double s = k.overlap_slowdown;
    EXPECT_NEAR(est::prefetched_pass_exposed(small.data(), compute.data(), 10, 1), 0.4 + 3.6 * s / (1 + s), 1e-12);
}

TEST(OverlapTime, Zero3PerLayerPrefetchBeatsNoPrefetch) {
    auto j = load(fsdp_text());
    ASSERT_TRUE(j) << j.error().str();
    const Estimate prefetch = estimate_job(*j);
    j->parallel.fsdp_prefetch = 0;
    const Estimate none = estimate_job(*j);
    const StageTail& tp = prefetch.stages[0].tail;
    const StageTail& tn = none.stages[0].tail;
    ASSERT_GT(tp.grad_s + tp.param_s, 0);
    // No prefetch: every gather and every reduce-scatter is on the critical path.
    EXPECT_NEAR(tn.grad_exposed_s, tn.grad_s + tn.param_s, 0.02 * (tn.grad_s + tn.param_s));
    EXPECT_LT(tp.grad_exposed_s, tn.grad_exposed_s);
    EXPECT_LT(prefetch.step_s, none.step_s);
    EXPECT_GE(prefetch.step_s, prefetch.pipeline_s);
}

}  // namespace

namespace {

TEST(OverlapMemory, DeeperFsdpPrefetchHoldsMoreGatheredLayers) {
    auto j = ptd::load_job_text(fsdp_text(), "job.toml", presets());
    ASSERT_TRUE(j) << j.error().str();
    const double one = ptd::estimate_job(*j).stages[0].mem.temp;
    j->parallel.fsdp_prefetch = 3;
    const double three = ptd::estimate_job(*j).stages[0].mem.temp;
    j->parallel.fsdp_prefetch = 0;
    const double none = ptd::estimate_job(*j).stages[0].mem.temp;
    // One gathered layer per prefetch step: 1 + d layers are held.
    EXPECT_NEAR(three - one, 2 * (one - none), 1e-6 * one);
    EXPECT_GT(one, none);
}

}  // namespace

namespace {

// fsdpreduce: the Llama 3 8B FSDP job of fsdp_text() on `framework`, prefetch `depth`.
ptd::JobSpec fsdp_on(const std::string& framework, int depth) {
    auto j = load(fsdp_text("\nfsdp_prefetch = " + std::to_string(depth)) + "framework = \"" + framework + "\"\n");
    EXPECT_TRUE(j) << j.error().str();
    return j ? *j : ptd::JobSpec{};
}

bool lists_default(const ptd::JobSpec& job, const std::string& key, const std::string& value) {
    for (const auto& d : job.origin.stack_defaults)
        if (d.key == key && d.value == value) return true;
    return false;
}

TEST(FsdpReduceDtype, TorchtitanReduceScattersFp32GradientsPytorchFsdpBf16) {
    // The stacks' defaults, listed where they bear on the job: torchtitan's FSDP2 casts the
    // gradients to mixed_precision_reduce = "float32"; PyTorch FSDP's MixedPrecision without
    // reduce_dtype (Composer's DEFAULT) reduces in bf16.
    const ptd::JobSpec titan = fsdp_on("torchtitan", 0), fsdp = fsdp_on("pytorch-fsdp", 0);
    EXPECT_TRUE(titan.parallel.grad_reduce_in_fp32);
    EXPECT_FALSE(fsdp.parallel.grad_reduce_in_fp32);
    EXPECT_TRUE(lists_default(titan, "parallel.grad_reduce_in_fp32", "true"));
    EXPECT_TRUE(lists_default(fsdp, "parallel.grad_reduce_in_fp32", "false"));
    // Without prefetch every collective is exposed: per micro-batch the forward's and the
    // backward's 16-bit gathers and the gradients' reduce-scatter, each over the same
    // parameters. In fp32 the reduce-scatter moves twice the bytes: 2 + 2 + 4 against
    // 2 + 2 + 2, 4/3 of the time less what does not grow with the bytes (NCCL's per-call
    // latency, 1.30 here).
    // The job's exposed gradient time with fp32 and with 16-bit reduction.
    auto exposed = [](ptd::JobSpec job, bool fp32) {
        job.parallel.grad_reduce_in_fp32 = fp32;
        return estimate_job(job).stages[0].tail.grad_exposed_s;
    };
    const double t32 = exposed(titan, true), t16 = exposed(titan, false);
    ASSERT_GT(t16, 0);
    EXPECT_GT(t32 / t16, 1.25);
    EXPECT_LT(t32 / t16, 4.0 / 3.0);
    // pytorch-fsdp written with fp32 reduction moves torchtitan's bytes (torchtitan adds
    // FSDP2's copies on top: FsdpCopies below).
    const double f32 = exposed(fsdp, true), f16 = exposed(fsdp, false);
    ASSERT_GT(f16, 0);
    EXPECT_GT(f32 / f16, 1.25);
    EXPECT_LT(f32 / f16, 4.0 / 3.0);
    EXPECT_LT(f32, t32);
}

TEST(FsdpReduceDtype, TheStagesTrafficAndZero2ReduceInTheSameDtypeAsZero3) {
    // One reduce dtype for every FSDP path (collectives.cpp dp_grad_bytes): the stage's DP
    // traffic before overlap (what `ptd estimate` lists and zero 2 hides or exposes) carries
    // the reduce-scatter in fp32 where FSDP casts to it, not only zero 3's per-unit chain.
    const ptd::JobSpec titan32 = fsdp_on("torchtitan", 0);
    ptd::JobSpec titan16 = titan32;
    titan16.parallel.grad_reduce_in_fp32 = false;
    const ptd::Estimate e32 = estimate_job(titan32), e16 = estimate_job(titan16);
    EXPECT_NEAR(e32.stages[0].tail.grad_s / e16.stages[0].tail.grad_s, 2.0, 0.1);
    EXPECT_NEAR(e32.stages[0].tail.param_s, e16.stages[0].tail.param_s, 1e-12);
    // Zero 2 (FSDP2 keeping the parameters gathered): its once-a-step reduce-scatter too.
    ptd::JobSpec z2_32 = titan32, z2_16 = titan16;
    z2_32.parallel.zero = z2_16.parallel.zero = 2;
    const ptd::Estimate a = estimate_job(z2_32), b = estimate_job(z2_16);
    EXPECT_NEAR(a.stages[0].tail.grad_s / b.stages[0].tail.grad_s, 2.0, 0.1);
    EXPECT_GT(a.time.total(), b.time.total());
}

TEST(FsdpCopies, Fsdp2CopiesEveryGatheredUnitOutAndItsGradientsInPerMicroBatch) {
    // fsdpcopy: per micro-batch FSDP2 copies each gathered unit out of the gather buffer
    // (forward and backward: 2 × read + write of 16-bit parameters) and concatenates the
    // unit's 16-bit gradients into the reduce buffer in the reduce dtype, on the compute
    // stream's path. FSDP1 (pytorch-fsdp) gathers into its flat parameter in place: no copy.
    // The difference between the stacks at the same reduce dtype is exactly those bytes at the
    // memory-bound rate: (8 + 2 + 4) per parameter in fp32, (8 + 2 + 2) in bf16.
    const ptd::JobSpec titan32 = fsdp_on("torchtitan", 0), fsdp16 = fsdp_on("pytorch-fsdp", 0);
    ptd::JobSpec titan16 = titan32, fsdp32 = fsdp16;
    titan16.parallel.grad_reduce_in_fp32 = false;
    fsdp32.parallel.grad_reduce_in_fp32 = true;
    auto exposed = [](const ptd::JobSpec& j) { return estimate_job(j).stages[0].tail.grad_exposed_s; };
    const double copy32 = exposed(titan32) - exposed(fsdp32), copy16 = exposed(titan16) - exposed(fsdp16);
    ASSERT_GT(copy16, 0);
    EXPECT_NEAR(copy32 / copy16, 14.0 / 12.0, 1e-6);
    // 64 sequences over 32 ranks at micro-batch 1: 2 micro-batches, each copying every
    // parameter the rank gathers (the whole model: tp = pp = 1).
    const ptd::Estimate e = estimate_job(titan32);
    const double params = e.stages[0].params_count;
    const double hbm = titan32.cluster.gpu.hbm_gbps * 1e9 * ptd::time_model_constants().hbm_eff;
    EXPECT_NEAR(copy32, 2 * params * 14.0 / hbm, 1e-3 * copy32);
}

TEST(FsdpCopies, TorchaoFloat8AllGatherHalvesTheLayersGathersAndCopies) {
    // fsdp8gather: torchtitan's tensorwise float8 with training.fp8_param_gather (torchao's
    // enable_fsdp_float8_all_gather) gathers and copies out each layer's weights in 1 byte.
    auto with = [](const std::string& framework, const std::string& training) {
        std::string text = fsdp_text("\nfsdp_prefetch = 0") + "framework = \"" + framework + "\"\n" + training;
        return load(text);
    };
    auto bf16 = with("torchtitan", "fp8 = \"tensorwise\"\n");
    auto f8 = with("torchtitan", "fp8 = \"tensorwise\"\nfp8_param_gather = true\n");
    ASSERT_TRUE(bf16) << bf16.error().str();
    ASSERT_TRUE(f8) << f8.error().str();
    EXPECT_FALSE(bf16->training.fp8_param_gather) << "torchtitan's float8.enable_fsdp_float8_all_gather defaults to false";
    const ptd::Estimate a = estimate_job(*bf16), b = estimate_job(*f8);
    const double saved = a.stages[0].tail.grad_exposed_s - b.stages[0].tail.grad_exposed_s;
    // Per micro-batch (2 here) each layer's copy-out, forward and backward, reads and writes
    // 1 byte less a weight; with prefetch 0 every gather is exposed, and each moves half the
    // bytes, so more than the copies is saved.
    const double layer_params = bf16->model.layers * (double)count_parameters(bf16->model).per_layer;
    const double hbm = bf16->cluster.gpu.hbm_gbps * 1e9 * ptd::time_model_constants().hbm_eff;
    const double copies = 2 * 2 * 2 * layer_params / hbm;
    EXPECT_GT(saved, 1.5 * copies);
    EXPECT_LT(saved, a.stages[0].tail.grad_exposed_s / 2);
    auto toml = export_job(*f8, ExportFormat::torchtitan_toml);
    ASSERT_TRUE(toml) << toml.error().str();
    EXPECT_TRUE(contains(toml->text, "enable_fsdp_float8_all_gather = true")) << toml->text;
    // The float8 gather is torchao's on torchtitan; PyTorch FSDP (Composer) has none.
    auto fsdp = with("pytorch-fsdp", "fp8 = \"tensorwise\"\nfp8_param_gather = true\n");
    ASSERT_FALSE(fsdp);
    EXPECT_TRUE(contains(fsdp.error().str(), "training.fp8_param_gather")) << fsdp.error().str();
    EXPECT_TRUE(contains(fsdp.error().str(), "torchtitan")) << fsdp.error().str();
}

}  // namespace
