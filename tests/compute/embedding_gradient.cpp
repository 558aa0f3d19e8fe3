// embedding_gradient.cpp — the word embedding's backward on a Megatron-core stack (embgrad):
// F.embedding writes a dense gradient of the whole local table and DDP's backward hook adds
// it into main_grad every micro-batch (a 16-bit write and read, a read and write of the
// main-grad dtype per table element). Counted by hand against the main-grad dtype, on the
// first pipeline stage only; the torch stacks' own accumulation is not this pass.
#include <gtest/gtest.h>

#include "job_test_util.h"
#include "ptd/model/estimate.h"

namespace {

// Llama 3 8B on 8 H100 (tp 2), Megatron-LM with its distributed optimizer.
ptd::JobSpec llama8b(std::vector<std::string> sets) {
    for (const char* s : {"training.framework=megatron", "parallel.zero=0", "parallel.distributed_optimizer=true"})
        sets.push_back(s);
    return ptd_test::load_asset("llama3-8b-h100.toml", sets);
}

TEST(EmbeddingGradient, TheFirstStageMovesTheTablesDenseGradientEachMicroBatch) {
    for (const std::string pp : {"1", "2"}) {
        const std::string dp = pp == "1" ? "4" : "2";
        const ptd::JobSpec fp32 = llama8b({"parallel.pp=" + pp, "parallel.dp=" + dp, "parallel.grad_reduce_in_fp32=true"});
        const ptd::JobSpec bf16 = llama8b({"parallel.pp=" + pp, "parallel.dp=" + dp, "parallel.grad_reduce_in_fp32=false"});
        const ptd::Estimate a = ptd::estimate_job(fp32), b = ptd::estimate_job(bf16);
        ASSERT_EQ(a.stages.size(), b.stages.size()) << pp;
        // By hand: the table is vocab (padded) / tp rows of h; its main-grad add reads and
        // writes 4 bytes an element with fp32 main grads, 2 with bf16: 2 · (4 − 2) bytes more.
        const double vocab = ptd::padded_vocab(fp32.model.vocab, fp32.estimate.vocab_pad, fp32.parallel.tp);
        const double table = vocab / fp32.parallel.tp * fp32.model.hidden;
        const double hbm = fp32.cluster.gpu.hbm_gbps * 1e9 * ptd::time_model_constants().hbm_eff;
        EXPECT_NEAR(a.stages[0].bwd_s - b.stages[0].bwd_s, 2.0 * (4.0 - 2.0) * table / hbm, 1e-12) << pp;
        EXPECT_DOUBLE_EQ(a.stages[0].fwd_s, b.stages[0].fwd_s) << pp;
        // Only the stage that holds the embedding.
        for (size_t s = 1; s < a.stages.size(); ++s) EXPECT_DOUBLE_EQ(a.stages[s].bwd_s, b.stages[s].bwd_s) << pp;
    }
}

TEST(EmbeddingGradient, TheTorchStacksBackwardDoesNotCarryIt) {
    // torchtitan's FSDP reduces the gradients itself (its copies are the DP tail's, fsdpcopy):
    // the main-grad dtype moves no backward time there.
    auto titan = [](const char* fp32) {
        return ptd_test::load_asset("llama3-8b-h100.toml", {"training.framework=torchtitan", "parallel.zero=3",
                                                            "parallel.distributed_optimizer=false", fp32});
    };
    const ptd::Estimate a = ptd::estimate_job(titan("parallel.grad_reduce_in_fp32=true"));
    const ptd::Estimate b = ptd::estimate_job(titan("parallel.grad_reduce_in_fp32=false"));
    ASSERT_EQ(a.stages.size(), 1u);
    EXPECT_DOUBLE_EQ(a.stages[0].bwd_s, b.stages[0].bwd_s);
}

}  // namespace
