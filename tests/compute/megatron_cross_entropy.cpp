// megatron_cross_entropy.cpp — the bytes Megatron's three losses move per logit (fusedce2),
// counted by hand from their kernels: the unfused vocab_parallel_cross_entropy (an fp32 copy,
// then max, subtract, exp, sum, divide; backward a scale in place and autograd's cast back),
// the same passes fused by --cross-entropy-loss-fusion, and Transformer Engine's Triton
// parallel_cross_entropy (two reads of the 16-bit logits, the gradient written into them).
// End to end the last stage differs by exactly those bytes over its logits.
#include <gtest/gtest.h>

#include "job_test_util.h"
#include "model/estimate_internal.h"
#include "ptd/model/estimate.h"

namespace {

using ptd::CrossEntropyImpl;

struct Bytes {
    double fwd = 0, bwd = 0;
};
Bytes bytes(CrossEntropyImpl ce, double e) {
    Bytes b;
    ptd::est::loss_bytes_per_logit(ce, e, b.fwd, b.bwd);
    return b;
}

TEST(MegatronCrossEntropy, EachLossMovesItsKernelsBytesPerLogit) {
    // bf16 logits. Unfused: copy 2 + 4, max 4, subtract 8, exp 8, sum 4, divide 8 = 38;
    // backward the in-place scale 8 and the cast back 4 + 2 = 14.
    EXPECT_DOUBLE_EQ(bytes(CrossEntropyImpl::megatron, 2).fwd, 38);
    EXPECT_DOUBLE_EQ(bytes(CrossEntropyImpl::megatron, 2).bwd, 14);
    // fp32 logits: .float() is the same tensor and autograd casts nothing.
    EXPECT_DOUBLE_EQ(bytes(CrossEntropyImpl::megatron, 4).fwd, 32);
    EXPECT_DOUBLE_EQ(bytes(CrossEntropyImpl::megatron, 4).bwd, 8);
    // Fused: copy + max 6, subtract + exp + sum 8, divide 8 = 22; backward one kernel 4 + 2.
    EXPECT_DOUBLE_EQ(bytes(CrossEntropyImpl::megatron_fused, 2).fwd, 22);
    EXPECT_DOUBLE_EQ(bytes(CrossEntropyImpl::megatron_fused, 2).bwd, 6);
    // Transformer Engine: read, read + write in place (3e); backward scale in place (2e).
    EXPECT_DOUBLE_EQ(bytes(CrossEntropyImpl::te, 2).fwd, 6);
    EXPECT_DOUBLE_EQ(bytes(CrossEntropyImpl::te, 2).bwd, 4);
}

TEST(MegatronCrossEntropy, TheLastStageDiffersByTheLossBytesOverItsLogits) {
    auto job = [](const char* ce) {
        return ptd_test::load_asset("llama3-8b-h100.toml", {std::string("estimate.cross_entropy=") + ce});
    };
    const ptd::JobSpec unfused = job("megatron"), te = job("te");
    const ptd::Estimate a = ptd::estimate_job(unfused), b = ptd::estimate_job(te);
    ASSERT_EQ(a.stages.size(), b.stages.size());
    const auto& last_a = a.stages.back();
    const auto& last_b = b.stages.back();
    const ptd::JobSpec& j = unfused;
    const double vocab = ptd::padded_vocab(j.model.vocab, j.estimate.vocab_pad, j.parallel.tp);
    const double logits = (double)j.training.micro_batch * j.model.seq_len / j.parallel.cp * vocab / j.parallel.tp;
    const double hbm = j.cluster.gpu.hbm_gbps * 1e9 * ptd::time_model_constants().hbm_eff;
    EXPECT_NEAR(last_a.fwd_s - last_b.fwd_s, (38.0 - 6.0) * logits / hbm, 1e-9);
    EXPECT_NEAR(last_a.bwd_s - last_b.bwd_s, (14.0 - 4.0) * logits / hbm, 1e-9);
    EXPECT_GT(a.step_s, b.step_s);
}

}  // namespace
