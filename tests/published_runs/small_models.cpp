// small_models.cpp — the small-model check rows (issue 29 point 3): FlashAttention's GPT-3
// training table, TinyLlama 1.1B, OLMo-core's throughput table and how llm-foundry's MPT rows
// describe the model, read from bench/accuracy/published_runs.toml exactly as bench_accuracy reads them. The
// tests pin what the rows' notes claim the sources state — the per-GPU figure, the batch in
// tokens, the micro-batch the stack's own config picks, the stack's kernels — and that every
// published layout is predicted to fit the GPUs it ran on.
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"

#include "published_runs_test_util.h"

namespace {

using namespace ptd;

using ptd_test::published_run;
using ptd_test::published_runs;
using ptd_test::starts_with;

// tokens per second per GPU as the bench converts the row's step time back
double tokens_per_gpu_s(const ::Run& r) {
    const double tokens = (double)r.job.training.global_batch * r.job.model.seq_len;
    return tokens / (r.published_step * r.job.world_size());
}

// The family's expected figures for row `r` (a failure, and null, when the row is not listed),
// after checking that the row is modelled and is a check row.
template <class Row>
const Row* listed_check_row(const std::map<std::string, Row>& rows, const ::Run& r) {
    const auto it = rows.find(r.name);
    EXPECT_NE(it, rows.end()) << r.name;
    if (it == rows.end()) return nullptr;
    EXPECT_TRUE(r.skip.empty()) << r.name << ": " << r.skip;
    EXPECT_EQ(r.use, "check") << r.name;
    return &it->second;
}

// Every published row whose name starts with `prefix`, each checked against its listed figures;
// the family has exactly the listed rows.
template <class Row, class Check>
void check_family(const std::string& prefix, const std::map<std::string, Row>& rows, Check check) {
    int seen = 0;
    for (const ::Run& r : published_runs()) {
        if (!starts_with(r.name, prefix)) continue;
        ++seen;
        if (const Row* row = listed_check_row(rows, r)) check(r, *row);
    }
    EXPECT_EQ(seen, (int)rows.size()) << prefix;
}

// FlashAttention's training/README.md gives tokens/s for the whole 8-GPU node and the batch in
// tokens; the experiment yamls pick the per-GPU batch from the GPU's memory (gpu_mem = 82 on an
// A100 80GB) and ZeRO-1 (DDPStrategyZero1 + adamw-zero) from GPT-3 760M on.
TEST(SmallModelRows, FlashAttentionTableAsTheReadmeAndYamlsState) {
    struct Row {
        double node_tokens_s;
        int batch_tokens, micro_batch, zero;
    };
    const std::map<std::string, Row> rows = {
        {"flashattn22-gpt3-125m-8gpu", {1310e3, 524288, 32, 0}},
        {"flashattn22-gpt3-355m-8gpu", {503e3, 524288, 16, 0}},
        {"flashattn22-gpt3-760m-8gpu", {245e3, 524288, 16, 1}},
        {"flashattn22-gpt3-1.3b-8gpu", {169e3, 1048576, 8, 1}},
        {"flashattn22-gpt3-2.7b-8gpu", {85e3, 1048576, 4, 1}},
    };
    check_family("flashattn22-", rows, [](const ::Run& r, const Row& row) {
        EXPECT_NEAR(tokens_per_gpu_s(r), row.node_tokens_s / 8.0, 1e-6 * row.node_tokens_s) << r.name;
        EXPECT_EQ(r.job.training.global_batch * r.job.model.seq_len, row.batch_tokens) << r.name;
        EXPECT_EQ(r.job.training.micro_batch, row.micro_batch) << r.name;
        EXPECT_EQ(r.job.parallel.zero, row.zero) << r.name;
        EXPECT_EQ(r.job.world_size(), 8) << r.name;
        // Every element-wise pass fused (fused_dropout_add_ln, fused_mlp, apex cross entropy):
        // framework "other" takes the Megatron kernel profile, flash attention on, no recompute,
        // and PyTorch DDP's bucketed all-reduce beside the backward.
        EXPECT_EQ(r.job.training.framework, Framework::megatron) << r.name;
        EXPECT_TRUE(r.job.training.flash_attention) << r.name;
        EXPECT_EQ(r.job.parallel.recompute, Recompute::none) << r.name;
        EXPECT_TRUE(r.job.parallel.overlap_grad_reduce) << r.name;
    });
}

// TinyLlama's README: 24k tokens/s per A100-40G, 16 GPUs, a batch of 2M tokens (2048 × 1024), a
// per-GPU batch of 16k tokens, FSDP; the model of lit_gpt's tiny_LLaMA_1b (GQA: 4 query groups).
TEST(SmallModelRows, TinyLlamaAsItsReadmeStates) {
    const ::Run& r = published_run("tinyllama23-1.1b-16gpu");
    ASSERT_TRUE(r.skip.empty()) << r.skip;
    EXPECT_EQ(r.use, "check");
    EXPECT_NEAR(tokens_per_gpu_s(r), 24000.0, 1e-3);
    EXPECT_EQ(r.job.world_size(), 16);
    EXPECT_EQ(r.job.training.global_batch * r.job.model.seq_len, 2048 * 1024);
    EXPECT_EQ(r.job.training.micro_batch * r.job.model.seq_len, 16384);
    EXPECT_EQ(r.job.parallel.zero, 3);
    EXPECT_EQ(r.job.model.heads, 32);
    EXPECT_EQ(r.job.model.kv_heads, 4);
    EXPECT_EQ(r.job.model.layers, 22);
}

// OLMo-core's table (tokens per second per device) with the scripts' layouts: rank_microbatch_size
// in tokens at sequence 4096, global_batch_size in tokens, FSDP (HSDP on one node), torch.compile
// on, PyTorch's kernels (written as torchtitan's stack), FP8 rows with torchao's dynamic
// (tensorwise) scaling, the dolma2 vocabulary padded to a multiple of 128, per-head q / k norms
// on the OLMo 2 models and not on the Llama one.
TEST(SmallModelRows, OlmoCoreTableAsTheReadmeAndScriptsState) {
    struct Row {
        double tokens_s;
        int micro_tokens, global_tokens;
        bool qk_norm;
    };
    const std::map<std::string, Row> rows = {
        {"olmocore2503-1b-8gpu", {55000, 8 * 4096, 1024 * 4096, true}},
        {"olmocore2503-1b-8gpu-fp8", {65000, 8 * 4096, 1024 * 4096, true}},
        {"olmocore2503-7b-8gpu", {10000, 2 * 4096, 1024 * 4096, true}},
        {"olmocore2503-7b-8gpu-fp8", {13000, 2 * 4096, 1024 * 4096, true}},
        {"olmocore2503-8b-8gpu", {9500, 2 * 4096, 1024 * 4096, false}},
        {"olmocore2503-8b-8gpu-fp8", {12500, 2 * 4096, 1024 * 4096, false}},
        {"olmocore2503-13b-8gpu", {4600, 1 * 4096, 2048 * 4096, true}},
        {"olmocore2503-13b-8gpu-fp8", {5500, 1 * 4096, 2048 * 4096, true}},
    };
    check_family("olmocore2503-", rows, [](const ::Run& r, const Row& row) {
        EXPECT_NEAR(tokens_per_gpu_s(r), row.tokens_s, 1e-6 * row.tokens_s) << r.name;
        EXPECT_EQ(r.job.model.seq_len, 4096) << r.name;
        EXPECT_EQ(r.job.training.micro_batch * r.job.model.seq_len, row.micro_tokens) << r.name;
        EXPECT_EQ(r.job.training.global_batch * r.job.model.seq_len, row.global_tokens) << r.name;
        EXPECT_EQ(r.job.model.vocab, 100352) << r.name;
        EXPECT_EQ(r.job.model.qk_layernorm, row.qk_norm) << r.name;
        EXPECT_EQ(r.job.training.framework, Framework::torchtitan) << r.name;
        EXPECT_TRUE(r.job.training.torch_compile) << r.name;
        EXPECT_EQ(r.job.parallel.zero, 3) << r.name;
        EXPECT_EQ(r.job.parallel.recompute, Recompute::none) << r.name;
        const bool fp8_row = r.name.ends_with("-fp8");
        EXPECT_EQ(r.job.training.fp8, fp8_row ? Fp8Recipe::tensorwise : Fp8Recipe::none) << r.name;
    });
}

// llm-foundry's MPT rows run the model as MPTConfig builds it at the tables' commit (061f2c7):
// no dropout (attn_pdrop, resid_pdrop, emb_pdrop default 0.0 and no yaml sets them), LayerNorm,
// GELU, learned positions, biases, eager PyTorch (no compile_config) and the fused cross entropy
// (loss_fn "fused_crossentropy", llm-foundry's default), so the time model counts their layer
// op by op (eagergpt).
TEST(SmallModelRows, LlmFoundryRowsRunMptsLayerWithoutDropout) {
    int seen = 0;
    for (const ::Run& r : published_runs()) {
        if (!starts_with(r.name, "llmfoundry-")) continue;
        ++seen;
        EXPECT_FALSE(r.job.model.dropout_on()) << r.name;
        EXPECT_EQ(r.job.model.norm, Norm::layernorm) << r.name;
        EXPECT_EQ(r.job.model.activation, Activation::gelu) << r.name;
        EXPECT_EQ(r.job.model.position, Position::learned) << r.name;
        EXPECT_TRUE(r.job.model.bias) << r.name;
        EXPECT_EQ(r.job.training.framework, Framework::llm_foundry) << r.name;
        EXPECT_EQ(r.job.training.framework_version, 202310) << r.name << ": the source's commit";
        EXPECT_FALSE(r.job.training.torch_compile) << r.name;
        EXPECT_EQ(r.job.estimate.cross_entropy, CrossEntropyImpl::fused) << r.name;
    }
    EXPECT_EQ(seen, 29);
}

// Issue 15: a run that happened cannot be an OOM.
TEST(SmallModelRows, EveryPublishedLayoutFits) {
    ptd_test::expect_family_fits(
        [](const ::Run& r) {
            return starts_with(r.name, "flashattn22-") || starts_with(r.name, "tinyllama23-") ||
                   starts_with(r.name, "olmocore2503-");
        },
        14);
}

}  // namespace
