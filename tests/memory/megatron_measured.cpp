// megatron_measured.cpp — the memory model against Megatron-core's own measurement (issue 29
// point 9): Megatron-LM's CI memory tests gpt3_7b_tp1_pp4_memory_speed and
// gpt3_7b_tp4_pp1_memory_speed record torch.cuda's allocated_bytes.all.peak on the last rank of
// one DGX H100 node (golden_values_dev_dgx_h100.json; bench/accuracy/published_memory.toml
// rows mcoreci-*), and the functional test gpt3_mcore_te_tp2_pp2_cp2 the same on DGX H100 and
// A100 with context parallelism. The jobs are written from the tests' model_config.yaml.
#include <string>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"

#include "job_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

constexpr double kGiB = 1024.0 * 1024 * 1024;

// The CI's 7B GPT (GELU, LayerNorm, learned positions, dropout 0.1: Megatron's defaults) on 8
// H100 with the distributed optimizer, bf16, no recompute or sequence parallelism.
JobSpec mcore_ci_7b(const std::string& layout, int micro_batch) {
    return job_from_text("[model]\narch = \"gpt\"\nlayers = 32\nhidden = 4096\nheads = 32\nkv_heads = 8\n"
                         "vocab = 131073\nseq_len = 8192\ntied_embeddings = false\n"
                         "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n"
                         "[parallel]\n" + layout + "distributed_optimizer = true\n"
                         "[training]\nmicro_batch = " + std::to_string(micro_batch) +
                         "\nglobal_batch = 8\nprecision = \"bf16\"\n");
}

// torch.cuda.max_memory_allocated's view of a stage: live tensors, no reserve, context or NCCL.
double allocated_gib(const MemoryBreakdown& m) { return (m.model_states() + m.activations + m.temp) / kGiB; }

TEST(MegatronMeasured, PipelineInterleavedLastStageWithinThreePercent) {
    // TP1 PP4 with one layer per virtual stage (vpp 8), micro-batch 1: measured 60,720,852,992
    // bytes (56.55 GiB) on the last rank, which Megatron-LM logs (its TensorBoard writer).
    const Estimate e = estimate_job(mcore_ci_7b("tp = 1\npp = 4\nvpp = 8\n", 1));
    ASSERT_EQ(e.stages.size(), 4u);
    EXPECT_NEAR(allocated_gib(e.stages.back().mem) / (60720852992.0 / kGiB), 1.0, 0.03)
        << allocated_gib(e.stages.back().mem) << " GiB";
}

TEST(MegatronMeasured, TensorParallelWithinThreePercent) {
    // TP4 PP1 (DP 2), micro-batch 2, no sequence parallelism: measured 57,143,791,616 bytes (53.22 GiB).
    const Estimate e = estimate_job(mcore_ci_7b("tp = 4\npp = 1\n", 2));
    ASSERT_EQ(e.stages.size(), 1u);
    EXPECT_NEAR(allocated_gib(e.stages[0].mem) / (57143791616.0 / kGiB), 1.0, 0.03) << allocated_gib(e.stages[0].mem) << " GiB";
}

// The functional test gpt3_mcore_te_tp2_pp2_cp2: a 12-layer, 512-wide GPT (Megatron's defaults,
// tied embeddings, no dropout), NullTokenizer vocabulary 50257, seq 1024, micro-batch 4,
// global batch 32, TP 2 PP 2 CP 2 with sequence parallelism on one node (DP 1), Megatron's DDP
// without the distributed optimizer.
JobSpec mcore_ci_small_cp(const std::string& gpu, const std::string& training_extra = "") {
    return job_from_text("[model]\narch = \"gpt\"\nlayers = 12\nhidden = 512\nheads = 8\nvocab = 50257\n"
                         "seq_len = 1024\ndropout = false\n"
                         "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"" + gpu + "\"\n"
                         "[parallel]\ntp = 2\npp = 2\ncp = 2\ndp = 1\nsequence_parallel = true\n"
                         "[training]\nmicro_batch = 4\nglobal_batch = 32\nprecision = \"bf16\"\n" + training_extra);
}

TEST(MegatronMeasured, ContextParallelSmallModelLastStageWithinTenPercent) {
    // Measured on the last rank from step 2 on: 935,253,504 bytes on H100, 857,134,592 on A100.
    // A model this small (22 M parameters on the last stage) is a test of the fixed buffers as
    // much as of the states: PTD is 5% low on H100 (docs/accuracy.md, "Context parallelism
    // measured"); the gap is in what stays allocated between steps.
    const struct {
        const char* gpu;
        double measured_bytes;
    } runs[] = {{"h100-sxm", 935253504.0}, {"a100-80gb", 857134592.0}};
    for (const auto& run : runs) {
        const Estimate e = estimate_job(mcore_ci_small_cp(run.gpu));
        ASSERT_EQ(e.stages.size(), 2u) << run.gpu;
        const double predicted = allocated_gib(e.stages.back().mem);
        EXPECT_NEAR(predicted / (run.measured_bytes / kGiB), 1.0, 0.10) << run.gpu << ": " << predicted << " GiB";
        EXPECT_LT(predicted, run.measured_bytes / kGiB) << run.gpu;  // the known shortfall, not an overshoot
    }
}

// Transformer Engine's cuBLASLt workspace (transformer_engine/pytorch/module/base.py
// get_workspace: 32 MiB on sm90+, 4 MiB before), a buffer of its own beside PyTorch's, under the
// stacks that run TE: NeMo, Megatron-LM from 2024, and TE FP8 on any stack; the two CI systems'
// resident memory differs by more than PyTorch's workspaces alone.
TEST(MegatronMeasured, TransformerEngineWorkspaceUnderTheStacksThatRunIt) {
    auto temp_under = [](const std::string& framework_lines, const std::string& gpu) {
        return estimate_job(mcore_ci_small_cp(gpu, framework_lines)).stages.back().mem.temp;
    };
    constexpr double kMiB = 1024.0 * 1024;
    const double h100_2023 = temp_under("framework = \"megatron\"\nframework_version = \"2023-06\"\n", "h100-sxm");
    EXPECT_NEAR(temp_under("framework = \"megatron\"\n", "h100-sxm") - h100_2023, 32 * kMiB, 1.0);
    // NeMo's recipes also turn on the userbuffers TP overlap with TP and sequence parallelism
    // (stack_defaults.cpp), whose GEMM workspace of 3 sizes comes beside (megatron_moe_measured.cpp).
    EXPECT_NEAR(temp_under("framework = \"nemo\"\n", "h100-sxm") - h100_2023, (32 + 3 * 32) * kMiB, 1.0);
    EXPECT_NEAR(temp_under("framework = \"torchtitan\"\n", "h100-sxm") - h100_2023, 0.0, 1.0);
    const double a100_2023 = temp_under("framework = \"megatron\"\nframework_version = \"2023-06\"\n", "a100-80gb");
    EXPECT_NEAR(temp_under("framework = \"megatron\"\n", "a100-80gb") - a100_2023, 4 * kMiB, 1.0);
}

}  // namespace
