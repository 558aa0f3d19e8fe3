// deepseek_qwen.cpp — the published rows of recent open models:
// the published-runs loader hands the shape keys (head_dim, moe_ffn_hidden, ..., mtp_layers),
// an explicit per-chunk pipeline split (layers_per_stage) and the experts' own TP size
// (expert_tp) to the job as a job file would, and the Megatron-Bridge DeepSeek-V3 / Qwen3-MoE
// rows of bench/accuracy/published_runs.toml load, validate and state their layouts. Whether
// their throughput is right is the estimators' business (test_compute), not this test's.
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/spec/presets.h"

#include "published_run.h"
#include "published_runs_test_util.h"

namespace {

using namespace ptd;

const char* kMoeBase =
    "[[run]]\nname = \"x-1\"\nframework = \"nemo\"\ngpu = \"h100-sxm\"\ngpus = 8\narch = \"llama\"\nlayers = 6\n"
    "hidden = 256\nheads = 4\nexperts = 8\ntop_k = 2\nglobal_batch = 16\niteration_s = 1.0\n";

// kMoeBase named `name`, with `extra` keys after it.
std::string moe_run(const std::string& name, const std::string& extra) {
    std::string text = kMoeBase;
    text.replace(text.find("x-1"), 3, name);
    text += extra;
    return text;
}

TEST(RecentModelRowsLoader, LayersPerStageReachesTheJob) {
    // Six layers over pp 2 · vpp 2 chunks, the first and last chunk holding fewer.
    const auto runs = ptd_test::load_run_text("mlarows_split.toml", moe_run("x-1", "pp = 2\ndp = 4\nvpp = 2\nlayers_per_stage = [1, 2, 2, 1]\n"));
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_TRUE(runs[0].skip.empty()) << runs[0].skip;
    EXPECT_EQ(runs[0].job.parallel.layers_per_stage, (std::vector<int>{1, 2, 2, 1}));
    // An explicit split that does not sum to the layers is the job's validation message.
    const auto bad = ptd_test::load_run_text("mlarows_split_sum.toml", moe_run("x-1", "pp = 2\ndp = 4\nlayers_per_stage = [2, 2]\n"));
    ASSERT_EQ(bad.size(), 1u);
    EXPECT_NE(bad[0].skip.find("parallel.layers_per_stage"), std::string::npos) << bad[0].skip;
}

TEST(RecentModelRowsLoader, ShapeKeysReachTheModel) {
    const auto runs = ptd_test::load_run_text("mlarows_shape.toml",
                                moe_run("x-1",
                                        "dp = 8\nffn_hidden = 1024\nmoe_ffn_hidden = 256\nshared_expert_ffn_hidden = 256\n"
                                    "first_dense_layers = 1\nhead_dim = 128\nq_lora_rank = 96\nkv_lora_rank = 64\n"
                                    "qk_rope_head_dim = 32\nv_head_dim = 128\nmtp_layers = 1\n"));
    ASSERT_EQ(runs.size(), 1u);
    const ModelSpec& m = runs[0].job.model;
    EXPECT_EQ(m.head_dim(), 128);
    EXPECT_EQ(m.expert_ffn_hidden(), 256);
    EXPECT_EQ(m.ffn_hidden, 1024);
    EXPECT_EQ(m.shared_expert_ffn_hidden, 256);
    EXPECT_EQ(m.first_dense_layers, 1);
    EXPECT_TRUE(m.mla());
    EXPECT_EQ(m.q_lora_rank, 96);
    EXPECT_EQ(m.qk_rope_head_dim, 32);
    EXPECT_EQ(m.v_head_dim, 128);
    EXPECT_EQ(m.mtp_layers, 1);
    EXPECT_EQ(m.kv_heads, m.heads);  // MLA: every head has its own key and value
    EXPECT_TRUE(validate_job(runs[0].job).empty());
}

// A run whose experts are split differently from the attention carries its expert_tp into
// parallel.expert_tp (MoE parallel folding); expert_tp = tp is the default (0).
TEST(RecentModelRowsLoader, ExpertTpReachesTheJob) {
    const auto runs = ptd_test::load_run_text("mlarows_etp.toml",
                                moe_run("x-1", "tp = 2\ndp = 4\nexpert_tp = 1\n") +
                                    moe_run("x-2", "tp = 2\ndp = 4\nexpert_tp = 2\n"));
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_TRUE(runs[0].skip.empty()) << runs[0].skip;
    EXPECT_EQ(runs[0].job.parallel.expert_tp, 1);
    EXPECT_TRUE(runs[1].skip.empty()) << runs[1].skip;
    EXPECT_EQ(runs[1].job.parallel.expert_tp, 0);
}

// The rows of this block (Megatron-Bridge tables, dgxc-benchmarking v25.05): every one
// loads, is a checking row, and states the shape and layout its source and recipe give; the
// MoE-parallel-folding rows (expert_tp 1 under TP 2) carry parallel.expert_tp.
TEST(RecentModelPublishedRows, LoadWithTheirShapesAndLayouts) {
    const std::vector<::Run> runs = load_runs(PTD_SOURCE_DIR "/bench/accuracy/published_runs.toml", embedded_presets());
    int seen = 0, deepseek = 0, waiting = 0;
    for (const ::Run& r : runs) {
        const bool dsv3 = r.name.find("-deepseek-v3-") != std::string::npos;
        const bool qwen = r.name.find("-qwen3-") != std::string::npos;
        // Megatron-LM's own DeepSeek-V3 GB200 guide rows: deepseek_gb200_guide.cpp.
        if ((!dsv3 && !qwen) || r.source_tag == "mcoreds25") continue;
        ++seen;
        EXPECT_EQ(r.use, "check") << r.name;
        EXPECT_EQ(r.framework, "nemo") << r.name;  // NeMo 2.0 and Megatron-Bridge recipes
        const ModelSpec& m = r.job.model;
        const ParallelSpec& p = r.job.parallel;
        EXPECT_EQ(m.top_k, 8) << r.name;
        EXPECT_EQ(m.head_dim(), 128) << r.name;
        EXPECT_NE(m.head_dim(), m.hidden / m.heads) << r.name;  // the shape the old keys could not say
        if (p.tp != 1) {
            ++waiting;  // MoE parallel folding: expert_tp 1 under TP 2
            EXPECT_EQ(p.expert_tp, 1) << r.name;
        }
        EXPECT_TRUE(r.skip.empty()) << r.name << ": " << r.skip;
        for (const auto& d : validate_job(r.job)) ADD_FAILURE() << r.name << ": " << d.key << ": " << d.message;
        if (dsv3) {
            ++deepseek;
            EXPECT_TRUE(m.mla()) << r.name;
            EXPECT_EQ(m.kv_lora_rank, 512) << r.name;
            EXPECT_EQ(m.q_lora_rank, 1536) << r.name;
            EXPECT_EQ(m.expert_ffn_hidden(), 2048) << r.name;
            EXPECT_EQ(m.ffn_hidden, 18432) << r.name;
            EXPECT_EQ(m.shared_expert_ffn_hidden, 2048) << r.name;
            EXPECT_EQ(m.first_dense_layers, 3) << r.name;
            EXPECT_EQ(m.experts, 256) << r.name;
            EXPECT_EQ(std::accumulate(p.layers_per_stage.begin(), p.layers_per_stage.end(), 0), 61) << r.name;
            if (r.source_tag == "dgxc2505") {
                // NeMo 2.0's recipe: 64/pp − 1 layers on the first stage, 64/pp − 2 on the last.
                ASSERT_EQ(p.layers_per_stage.size(), (size_t)p.pp) << r.name;
                EXPECT_EQ(p.layers_per_stage.front(), 64 / p.pp - 1) << r.name;
                EXPECT_EQ(p.layers_per_stage.back(), 64 / p.pp - 2) << r.name;
            } else {
                // Megatron-Bridge's layout: 16 chunks of 4 layers, the last one 1 layer beside the
                // MTP block and the loss.
                ASSERT_EQ(p.layers_per_stage.size(), 16u) << r.name;
                EXPECT_EQ(p.layers_per_stage.back(), 1) << r.name;
            }
            EXPECT_EQ(m.mtp_layers, r.name == "mbridge2511-deepseek-v3-gb200-bf16" ? 0 : 1) << r.name;  // "w/o MTP"
            // Megatron-Bridge's precision-aware optimizer keeps bf16 moments; NeMo 2.0's fused Adam fp32.
            EXPECT_EQ(r.job.training.exp_avg_dtype, r.source_tag == "dgxc2505" ? StateDtype::fp32 : StateDtype::bf16) << r.name;
        } else {
            EXPECT_FALSE(m.mla()) << r.name;
            EXPECT_EQ(m.kv_heads, 4) << r.name;
            EXPECT_EQ(m.experts, 128) << r.name;
            EXPECT_EQ(m.first_dense_layers, 0) << r.name;
            if (m.layers == 94) {  // Qwen3-235B-A22B: the embedding and the loss count in the split
                EXPECT_EQ(p.account_for_embedding_in_pipeline_split, p.pp > 1) << r.name;
                EXPECT_EQ(p.account_for_loss_in_pipeline_split, p.pp > 1) << r.name;
            }
        }
    }
    EXPECT_EQ(seen, 24);
    EXPECT_EQ(deepseek, 10);
    EXPECT_EQ(waiting, 8);
}

}  // namespace
