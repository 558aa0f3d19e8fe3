// deepspeed_pipeline.cpp — throughput causes of DeepSpeed-era pipeline runs and torchtitan runs:
// torch.distributed.pipelining's gradient accumulation outside the GEMMs (ttaccum);
// DeepSpeed's pipeline engine (its gradient accumulation outside the GEMMs, its data-parallel
// reduction after the last backward, in 5e8-element buckets of 16-bit gradients, its blocking
// paired p2p of TP-partitioned tensors) and the
// Grand Teton H100 (96 GB HBM2e, 500 W) GPU preset the torchtitan benchmarks ran on.
// Each test fails when its mechanism is taken out.
#include <string>

#include <gtest/gtest.h>

#include "model/estimate_internal.h"
#include "ptd/model/estimate.h"
#include "ptd/spec/presets.h"

namespace {

using namespace ptd;

const PresetCatalog& presets() { return embedded_presets(); }

// Llama 3 8B on 2 nodes of 8 A100 (ampere: every framework runs the same kernels there, so
// only the pipeline engine differs): tp 2, pp 2, dp 4, 8 micro-batches per step.
const char* kJob = R"(
[model]
preset = "llama3-8b"

[cluster]
nodes = 2
gpus_per_node = 8
gpu = "a100-80gb"

[parallel]
tp = 2
pp = 2
overlap_grad_reduce = true

[training]
micro_batch = 1
global_batch = 32
)";

JobSpec job(const std::string& framework, const std::string& training_lines = "", int pp = 2,
            const std::string& gpu = "a100-80gb") {
    std::string text = kJob;
    auto replace = [&](const std::string& from, const std::string& to) { text.replace(text.find(from), from.size(), to); };
    replace("global_batch = 32\n", "global_batch = 32\nframework = \"" + framework + "\"\n" + training_lines);
    replace("pp = 2\n", "pp = " + std::to_string(pp) + "\n");
    replace("gpu = \"a100-80gb\"", "gpu = \"" + gpu + "\"");
    auto j = load_job_text(text, "job.toml", presets());
    EXPECT_TRUE(j) << (j ? "" : j.error().str());
    return j ? *j : JobSpec{};
}

double hbm_bytes_per_s(const JobSpec& j) { return j.cluster.gpu.hbm_gbps * 1e9 * time_model_constants().hbm_eff; }

// embgrad: what the Megatron job's first stage adds to each micro-batch's backward that the
// DeepSpeed one does not: the word embedding's dense gradient (bf16, 2 + 2 bytes) added into
// Megatron's fp32 main grads (4 + 4), per element of the local table.
double megatron_embedding_grad_s(const JobSpec& mg) {
    const double table = padded_vocab(mg.model.vocab, mg.estimate.vocab_pad, mg.parallel.tp) / mg.parallel.tp * mg.model.hidden;
    return (2.0 + 2.0 + 4.0 + 4.0) * table / hbm_bytes_per_s(mg);
}

// ---- gradient accumulation ----------------------------------------------------------------

TEST(DsPipeGradAccum, BytesPerParameterFollowTheOptimizerPath) {
    // BF16_Optimizer: zero the bf16 grads (2), autograd accumulates into them (6), the fp32
    // copy takes them (lp.to(fp32) 6, add_ 12).
    EXPECT_DOUBLE_EQ(est::ds_grad_accum_bytes(Precision::bf16, 1), 26.0);
    EXPECT_DOUBLE_EQ(est::ds_grad_accum_bytes(Precision::bf16, 8), 26.0);
    // fp16: autograd accumulates into .grad from the second micro-batch on.
    EXPECT_DOUBLE_EQ(est::ds_grad_accum_bytes(Precision::fp16, 1), 0.0);
    EXPECT_DOUBLE_EQ(est::ds_grad_accum_bytes(Precision::fp16, 4), 6.0 * 3.0 / 4.0);
    EXPECT_DOUBLE_EQ(est::ds_grad_accum_bytes(Precision::fp32, 2), 12.0 / 2.0);
}

TEST(DsPipeGradAccum, EveryMicroBatchBackwardMovesTheStagesGradients) {
    const JobSpec ds = job("deepspeed"), mg = job("megatron");
    const Estimate a = estimate_job(ds), b = estimate_job(mg);
    ASSERT_EQ(a.stages.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        // Same kernels (ampere), same forward; the backward carries 26 bytes per parameter.
        EXPECT_DOUBLE_EQ(a.stages[i].fwd_s, b.stages[i].fwd_s) << i;
        const double expected = 26.0 * a.stages[i].params_count / hbm_bytes_per_s(ds) -
                                (i == 0 ? megatron_embedding_grad_s(mg) : 0.0);
        EXPECT_NEAR(a.stages[i].bwd_s - b.stages[i].bwd_s, expected, 0.01 * expected) << i;
    }
    EXPECT_GT(a.step_s, b.step_s);
}

TEST(DsPipeGradAccum, OnlyThePipelineEngine) {
    // pp = 1: DeepSpeed's ordinary engine, not the pipeline engine: no such term; the
    // Megatron job differs only by its embedding's gradient pass.
    const JobSpec mg = job("megatron", "", 1);
    const Estimate a = estimate_job(job("deepspeed", "", 1)), b = estimate_job(mg);
    EXPECT_NEAR(a.stages[0].bwd_s, b.stages[0].bwd_s - megatron_embedding_grad_s(mg), 1e-12);
}

TEST(DsPipeGradAccum, TheEstimateSaysWhatTheEngineAdds) {
    auto has_note = [](const Estimate& e) {
        for (const std::string& n : e.notes)
            if (n.find("deepspeed pipeline engine") != std::string::npos && n.find("26 bytes") != std::string::npos)
                return true;
        return false;
    };
    EXPECT_TRUE(has_note(estimate_job(job("deepspeed", "precision = \"bf16\"\n"))));
    EXPECT_FALSE(has_note(estimate_job(job("megatron"))));
    EXPECT_FALSE(has_note(estimate_job(job("deepspeed", "", 1))));
}

// ---- the data-parallel reduction ----------------------------------------------------------

TEST(DsPipeGradReduce, ExposedAfterTheLastBackwardWhateverOverlapSays) {
    const Estimate a = estimate_job(job("deepspeed")), b = estimate_job(job("megatron"));
    for (size_t i = 0; i < a.stages.size(); ++i) {
        ASSERT_GT(a.stages[i].dp_s, 0.0);
        // ReduceGrads is the schedule's last instruction: all of it shows.
        EXPECT_DOUBLE_EQ(a.stages[i].tail.grad_exposed_s, a.stages[i].tail.grad_s) << i;
        // Megatron's buckets overlap the backward with overlap_grad_reduce.
        EXPECT_LT(b.stages[i].tail.grad_exposed_s, 0.9 * b.stages[i].tail.grad_s) << i;
    }
}

TEST(DsPipeGradReduce, SixteenBitGradientsInHalfBillionElementBuckets) {
    // Megatron reduces bf16 runs' fp32 main grads; the pipeline engine the bf16 .grad tensors
    // (engine.py _get_gradients_for_reduction), in MEMORY_OPT_ALLREDUCE_SIZE buckets: one
    // NCCL call per 5e8 elements instead of Megatron's 40M, so a little less latency too.
    const Estimate a = estimate_job(job("deepspeed")), b = estimate_job(job("megatron"));
    for (size_t i = 0; i < a.stages.size(); ++i) {
        const double ratio = a.stages[i].tail.grad_s / b.stages[i].tail.grad_s;
        EXPECT_GT(ratio, 0.45) << i;
        EXPECT_LT(ratio, 0.5) << i;
    }
}

// ---- p2p ------------------------------------------------------------------------------------

JobSpec with_tp(JobSpec j, int tp, int dp) {
    j.parallel.tp = tp;
    j.parallel.dp = dp;
    return j;
}

TEST(DsPipeP2p, BlockingPairedExchangeIsTwoHopsPerBlock) {
    // tp = 1: nothing partitioned; each forward and backward step pays its neighbour's two
    // transfers one after the other (RecvActivation then SendGrad, SendActivation then RecvGrad).
    const Estimate a = estimate_job(with_tp(job("deepspeed"), 1, 8)), b = estimate_job(with_tp(job("megatron"), 1, 8));
    ASSERT_GT(b.stages[0].p2p_s, 0.0);
    for (size_t i = 0; i < a.stages.size(); ++i) EXPECT_DOUBLE_EQ(a.stages[i].p2p_s, 2.0 * b.stages[i].p2p_s) << i;
}

TEST(DsPipeP2p, TensorParallelRanksSendTheirSliceAndGatherOverNvlink) {
    // tp = 8 across the node, the pipeline across nodes: 1/8 of the activation on the NIC
    // (twice), the rest over NVLink, instead of the whole activation on the NIC.
    const Estimate a = estimate_job(with_tp(job("deepspeed"), 8, 1)), b = estimate_job(with_tp(job("megatron"), 8, 1));
    for (size_t i = 0; i < a.stages.size(); ++i) {
        EXPECT_GT(a.stages[i].p2p_s, 0.0) << i;
        EXPECT_LT(a.stages[i].p2p_s, 0.6 * b.stages[i].p2p_s) << i;
    }
}

// ---- the Grand Teton H100 -----------------------------------------------------------------

TEST(GpuPresetH100_96gb_500w, SourcedFiguresOfThePart) {
    const GpuSpec* g = presets().find_gpu("h100-96gb-500w");
    ASSERT_NE(g, nullptr);
    const GpuSpec* sxm = presets().find_gpu("h100-sxm");
    ASSERT_NE(sxm, nullptr);
    EXPECT_DOUBLE_EQ(g->hbm_gbps, 2400.0);  // "96GB HBM2e with 2.4 TB/sec"
    EXPECT_GT(g->memory_gib, 95.0);
    EXPECT_LT(g->memory_gib, 96.0);
    EXPECT_EQ(g->generation, GpuGeneration::hopper);
    // "between SXM and NVL": below the SXM's 989.4, above the NVL's 835.5 dense BF16.
    EXPECT_LT(g->bf16_tflops, sxm->bf16_tflops);
    EXPECT_GT(g->bf16_tflops, 835.5);
    EXPECT_NEAR(g->bf16_tflops, (989.4 + 835.5) / 2, 0.1);
    EXPECT_NEAR(g->fp8_tflops / g->bf16_tflops, 2.0, 0.01);
}

TEST(GpuPresetH100_96gb_500w, SlowerThanTheSxmPartOnTheSameJob) {
    const Estimate teton = estimate_job(job("torchtitan", "", 1, "h100-96gb-500w"));
    const Estimate sxm = estimate_job(job("torchtitan", "", 1, "h100-sxm"));
    EXPECT_GT(teton.step_s, sxm.step_s * 1.05);
    EXPECT_LT(teton.step_s, sxm.step_s * 1.40);
}

}  // namespace

// ---- torch.distributed.pipelining's gradient accumulation (ttaccum) ------------------------

TEST(TorchPipeliningGradAccum, BytesPerParameterFollowFsdp2sAccumulation) {
    // FSDP2 with an fp32 reduce dtype: the first micro-batch's bf16 gradient cast up (2 + 4),
    // every later one added in (4 + 2 + 4).
    EXPECT_DOUBLE_EQ(est::torch_pipelining_grad_accum_bytes(true, Precision::bf16, 1), 6.0);
    EXPECT_DOUBLE_EQ(est::torch_pipelining_grad_accum_bytes(true, Precision::bf16, 8), (6.0 + 70.0) / 8.0);
    // The reduce dtype the parameters' (or no FSDP2): autograd's in-place accumulation.
    EXPECT_DOUBLE_EQ(est::torch_pipelining_grad_accum_bytes(false, Precision::bf16, 8), 6.0 * 7.0 / 8.0);
    EXPECT_DOUBLE_EQ(est::torch_pipelining_grad_accum_bytes(true, Precision::fp32, 2), 12.0 / 2.0);
}

TEST(TorchPipeliningGradAccum, EveryMicroBatchBackwardMovesTheStagesGradients) {
    // torchtitan, tp 2 × pp 2 × dp 4, 8 micro-batches: the fp32 reduce dtype (FSDP2 upcasts) and
    // the bf16 one (in-place accumulation) differ in each block's backward by 9.5 − 5.25 bytes
    // per parameter of the stage; the estimate names the term.
    const std::string bf16_training = "precision = \"bf16\"\n";
    const JobSpec fp32_reduce = job("torchtitan", bf16_training);
    JobSpec bf16 = fp32_reduce;
    bf16.parallel.grad_reduce_in_fp32 = false;
    const Estimate a = estimate_job(fp32_reduce), b = estimate_job(bf16);
    ASSERT_EQ(a.stages.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_DOUBLE_EQ(a.stages[i].fwd_s, b.stages[i].fwd_s) << i;
        const double expected = (9.5 - 5.25) * a.stages[i].params_count / hbm_bytes_per_s(fp32_reduce);
        EXPECT_NEAR(a.stages[i].bwd_s - b.stages[i].bwd_s, expected, 1e-9 * expected) << i;
    }
    bool noted = false;
    for (const std::string& n : a.notes) noted |= n.find("torch.distributed.pipelining: gradients accumulate") != std::string::npos;
    EXPECT_TRUE(noted);
    // One stage: no pipeline, no such term.
    JobSpec one = job("torchtitan", bf16_training, 1), one_bf16 = one;
    one_bf16.parallel.grad_reduce_in_fp32 = false;
    EXPECT_DOUBLE_EQ(estimate_job(one).stages[0].bwd_s, estimate_job(one_bf16).stages[0].bwd_s);
}
