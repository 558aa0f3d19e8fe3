// eager_gpt_layer.cpp — what an eager PyTorch stack runs outside the GEMMs of a LayerNorm / GELU
// layer (eagergpt) and how many bytes a fused cross entropy moves (fusedce), each checked
// against a count by hand: llm-foundry's MPT layer (blocks.py MPTBlock, norm.py LPLayerNorm,
// ffn.py MPTMLP at 061f2c7) has no RMSNorm upcasts, RoPE or SwiGLU, so the Llama-counted
// eager_elementwise_factor does not describe it; flash-attn's CrossEntropyLoss reads the
// 16-bit logits once forward and once backward instead of three fp32 softmax passes each way.
#include <gtest/gtest.h>

#include "job_test_util.h"
#include "layer_test_util.h"
#include "model/estimate_internal.h"
#include "ptd/model/estimate.h"

namespace {

using namespace ptd_test;

// MPT-350m's layer as llm-foundry's A100 table runs it (h 1024, 16 heads of 64, MLP 4h,
// biases, no dropout, micro-batch 32 of 2048 tokens), eager on one rank.
ptd::est::LayoutDerived mpt_350m_layer(const ptd::ModelSpec& m) {
    ptd::est::LayoutDerived L = llama_layer_tp8();
    L.m = &m;
    L.t = 1, L.sp = false, L.swiglu = false, L.dropout = false;
    L.tokens = 65536, L.s_local = 2048, L.b = 32;
    L.h = 1024, L.d = 64, L.d_qk = 64, L.d_v = 64, L.heads_l = 16, L.kv_l = 16, L.f_l = 4096;
    L.peak = 312e12, L.hbm = 0.8 * 2039e9, L.gemm_eff_max = 0.78, L.flash_eff = 0.65;
    L.elementwise_factor = 2.6;  // what an eager stack's layer got before eagergpt
    L.eager_gpt_layer = true;
    return L;
}

TEST(EagerGptLayer, MptLayersElementwisePassesAreCountedOpByOp) {
    ptd::ModelSpec m;
    m.bias = true;
    ptd::est::LayoutDerived L = mpt_350m_layer(m);
    const ptd::est::LayerTime lt = ptd::est::layer_forward_time(L);
    const double h = 1024, f = 4096, per_element = 2.0 * 65536 / L.hbm;
    // Forward: two LayerNorms (read x, write y: 2h each), two residual adds (3h each), GELU
    // (read and write f): 18h at f = 4h. Backward: the residual gradient summed at two branch
    // points (3h each), two LayerNorm backwards (dx 3h, weight / bias gradients 2h), GELU's
    // backward (3f), dQ, dK, dV concatenated (read and write 3h), the bias gradients (QKV 3h,
    // proj h, fc1 f, fc2 h): 43h.
    EXPECT_NEAR(lt.elem, (4 * h + 6 * h + 2 * f) * per_element, 1e-12);
    EXPECT_NEAR(lt.elem_bwd, (6 * h + 10 * h + 3 * f + 6 * h + (3 * h + h + f + h)) * per_element, 1e-12);
    // The Llama-counted factor charged 2.6 × the fused GPT count (10h outside the TP region,
    // 5h on the heads, 3f) forward and twice that backward: 2.6 × 27h against 18h forward.
    L.eager_gpt_layer = false;
    const ptd::est::LayerTime llama_factor = ptd::est::layer_forward_time(L);
    EXPECT_NEAR(llama_factor.elem, 2.6 * (10 * h + 5 * h + 3 * f) * per_element, 1e-12);
    EXPECT_NEAR(llama_factor.elem_bwd, 2.0 * llama_factor.elem, 1e-12);
    EXPECT_LT(lt.elem + lt.elem_bwd, 0.3 * (llama_factor.elem + llama_factor.elem_bwd));
}

TEST(EagerGptLayer, DropoutAndBiasesAddTheirOwnPasses) {
    ptd::ModelSpec m;
    m.bias = false;
    ptd::est::LayoutDerived L = mpt_350m_layer(m);
    const ptd::est::EagerElementwise plain = ptd::est::eager_gpt_elementwise(L);
    const double h = 1024, f = 4096;
    EXPECT_DOUBLE_EQ(plain.fwd, 18 * h);
    EXPECT_DOUBLE_EQ(plain.bwd, 6 * h + 10 * h + 3 * f + 6 * h);
    // Two residual dropouts (read and write h, a 1-byte mask of h: h / e elements of 2 bytes)
    // each way.
    L.dropout = true;
    const ptd::est::EagerElementwise dropped = ptd::est::eager_gpt_elementwise(L);
    EXPECT_DOUBLE_EQ(dropped.fwd - plain.fwd, 2 * (2 * h + h / 2));
    EXPECT_DOUBLE_EQ(dropped.bwd - plain.bwd, 2 * (2 * h + h / 2));
}

// A one-GPU job of `preset` on an A100 under `framework`, micro-batch 4.
ptd::JobSpec one_a100(const std::string& preset, const std::string& framework, const std::string& extra = "") {
    return job_from_text(job_text({.preset = preset,
                                   .gpus_per_node = 1,
                                   .gpu = "a100-80gb",
                                   .parallel = "tp = 1\npp = 1\n",
                                   .training = "framework = \"" + framework +
                                               "\"\nflash_attention = true\nmicro_batch = 4\nglobal_batch = 4\n" +
                                               extra}));
}

TEST(EagerGptLayer, OnlyAnEagerLayerNormGeluLayerIsCountedOpByOp) {
    auto counted = [](const ptd::JobSpec& j) {
        ptd::est::LayoutDerived L{};
        ptd::est::assign_kernel_profile(j, L);
        return L.eager_gpt_layer;
    };
    EXPECT_TRUE(counted(one_a100("gpt2-350m", "pytorch-fsdp")));
    EXPECT_TRUE(counted(one_a100("gpt2-350m", "torchtitan")));
    // Compiled, the fused count applies; a Llama layer keeps the factor it was counted on;
    // Megatron's fused kernels are the fused count.
    EXPECT_FALSE(counted(one_a100("gpt2-350m", "pytorch-fsdp", "torch_compile = true\n")));
    EXPECT_FALSE(counted(one_a100("llama3-8b", "pytorch-fsdp")));
    EXPECT_FALSE(counted(one_a100("gpt2-350m", "megatron")));
}

TEST(FusedCrossEntropy, ReadsTheSixteenBitLogitsOnceEachWay) {
    double fwd = 0, bwd = 0;
    ptd::est::loss_bytes_per_logit(ptd::CrossEntropyImpl::fused, 2.0, fwd, bwd);
    EXPECT_DOUBLE_EQ(fwd, 2.0);
    EXPECT_DOUBLE_EQ(bwd, 4.0);
    ptd::est::loss_bytes_per_logit(ptd::CrossEntropyImpl::pytorch, 2.0, fwd, bwd);
    EXPECT_DOUBLE_EQ(fwd, 12.0);
    EXPECT_DOUBLE_EQ(bwd, 12.0);
    // End to end: the same job with the fused loss saves 10 bytes per logit forward and 8
    // backward on the last stage (micro-batch 4 × 1024 tokens × GPT-2's 50,257 logits padded).
    const ptd::JobSpec plain = one_a100("gpt2-350m", "pytorch-fsdp", "[estimate]\ncross_entropy = \"pytorch\"\n");
    const ptd::JobSpec fused = one_a100("gpt2-350m", "pytorch-fsdp", "[estimate]\ncross_entropy = \"fused\"\n");
    const ptd::Estimate a = ptd::estimate_job(plain), b = ptd::estimate_job(fused);
    ASSERT_EQ(a.stages.size(), 1u);
    ASSERT_EQ(b.stages.size(), 1u);
    const double logits = 4.0 * 1024 * ptd::padded_vocab(50257, plain.estimate.vocab_pad, 1);
    const double hbm = plain.cluster.gpu.hbm_gbps * 1e9 * ptd::time_model_constants().hbm_eff;
    EXPECT_NEAR(a.stages[0].fwd_s - b.stages[0].fwd_s, 10.0 * logits / hbm, 1e-9);
    EXPECT_NEAR(a.stages[0].bwd_s - b.stages[0].bwd_s, 8.0 * logits / hbm, 1e-9);
}

}  // namespace
