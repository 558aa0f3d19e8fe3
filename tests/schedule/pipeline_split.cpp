// pipeline_split.cpp — what Llama 3 405B's own layout needs to fit: Megatron-LM's
// --account-for-embedding/loss-in-pipeline-split (parallel.account_for_*_in_pipeline_split)
// and --microbatch-group-size-per-virtual-pipeline-stage (parallel.microbatch_group_size):
// the keys' TOML round trip and refusals, the first / last chunk holding one layer fewer in
// memory and in the schedule (1F1B and interleaved), N in the interleaved warm-up and block
// order, ZeRO-2 under a pipeline, the Megatron export, and the paper's 405B layout fitting.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/spec/presets.h"
#include "ptd/timeline/timeline.h"

#include "job_test_util.h"

namespace {

using namespace ptd;

#define EXPECT_REL(got, want) EXPECT_NEAR((got), (want), 1e-9 * std::abs((double)(want)) + 1e-6)

const PresetCatalog& presets() { return embedded_presets(); }
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// A 30-layer Llama-shaped model on 4 × 8 H100: pp 4 (dp 2 with tp 4), 8 micro-batches.
std::string small_job(const std::string& parallel_extra, int vpp = 1, int global_batch = 16) {
    return "[model]\narch = \"llama\"\nlayers = 30\nhidden = 2048\nheads = 16\nkv_heads = 8\nvocab = 32000\n"
           "seq_len = 2048\n[cluster]\nnodes = 4\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n"
           "[parallel]\ntp = 4\npp = 4\nvpp = " +
           std::to_string(vpp) + "\nsequence_parallel = true\n" + parallel_extra +
           "[training]\nmicro_batch = 1\nglobal_batch = " + std::to_string(global_batch) + "\n";
}

JobSpec load_ok(const std::string& text) {
    auto job = load_job_text(text, "job.toml", presets());
    EXPECT_TRUE(job.has_value()) << (job ? "" : job.error().str());
    return job ? *job : JobSpec{};
}

// The layout the Llama 3 paper describes (arXiv 2407.21783 §3.3.2, Table 4): TP8 · PP16 ·
// DP128 on 16,384 H100, V = 8 one-layer chunks with the embedding and the loss counted as a
// layer (126 = 16·8 − 2), FSDP sharding gradients and optimizer states (ZeRO-2), no
// activation checkpointing, N = pp (Megatron's default), micro-batch 1 (assumed).
const std::string kLlama405bPaper =
    ptd_test::job_text({.preset = "llama3-405b",
              .nodes = 2048,
              .cluster_extra = "inter_gbps = 50.0",
              .parallel = "tp = 8\npp = 16\nvpp = 8\nzero = 2\nsequence_parallel = true\nrecompute = \"none\"\n"
                          "account_for_embedding_in_pipeline_split = true\naccount_for_loss_in_pipeline_split = true",
              .training = "micro_batch = 1\nglobal_batch = 2048\n"});

TEST(PipelineSplit, KeysRoundTrip) {
    const JobSpec job = load_ok(small_job("account_for_embedding_in_pipeline_split = true\n"
                                          "account_for_loss_in_pipeline_split = true\nmicrobatch_group_size = 8\n",
                                          2));
    EXPECT_TRUE(job.parallel.account_for_embedding_in_pipeline_split);
    EXPECT_TRUE(job.parallel.account_for_loss_in_pipeline_split);
    EXPECT_EQ(job.parallel.microbatch_group_size, 8);
    const std::string saved = save_job_toml(job);
    EXPECT_NE(saved.find("account_for_embedding_in_pipeline_split = true"), std::string::npos) << saved;
    EXPECT_NE(saved.find("microbatch_group_size = 8"), std::string::npos) << saved;
    EXPECT_EQ(ptd_test::reloaded(saved).parallel, job.parallel);
    // Defaults: off, and N = pp, written by nobody.
    const JobSpec plain = load_ok(small_job("layers_per_stage = [7, 8, 8, 7]\n"));
    EXPECT_FALSE(plain.parallel.account_for_embedding_in_pipeline_split);
    EXPECT_EQ(plain.parallel.microbatch_group_size, 0);
    EXPECT_EQ(plain.parallel.mb_group_size(), 4);
    EXPECT_EQ(save_job_toml(plain).find("microbatch_group_size"), std::string::npos);
}

// Every bad value names the file, the line and the key, and what is allowed.
TEST(PipelineSplit, BadValuesRefusedWithFileLine) {
    struct Case {
        std::string extra;
        int vpp;
        std::string key, needle;
    };
    const std::vector<Case> cases = {
        {"microbatch_group_size = 2\n", 2, "parallel.microbatch_group_size", "allowed: 4 to 8"},     // N < pp
        {"microbatch_group_size = 16\n", 2, "parallel.microbatch_group_size", "allowed: 4 to 8"},    // N > m
        {"microbatch_group_size = 4\n", 1, "parallel.microbatch_group_size", "vpp ≥ 2"},             // not interleaved
        {"microbatch_group_size = 0\n", 2, "parallel.microbatch_group_size", ""},                    // below 1
        {"account_for_embedding_in_pipeline_split = true\n", 2, "parallel.pp", "31"},                // 31 % 8 ≠ 0
        {"account_for_loss_in_pipeline_split = \"yes\"\n", 1, "parallel.account_for_loss_in_pipeline_split", ""},
        {"account_for_embedding_in_pipeline_split = true\naccount_for_loss_in_pipeline_split = true\n"
         "layers_per_stage = [7, 8, 8, 7]\n",
         1, "parallel.account_for_embedding_in_pipeline_split", "layers_per_stage"},
    };
    for (const Case& c : cases) {
        auto job = load_job_text(small_job(c.extra, c.vpp), "bad.toml", presets());
        ASSERT_FALSE(job.has_value()) << c.extra;
        const std::string msg = job.error().str();
        EXPECT_NE(msg.find("bad.toml:"), std::string::npos) << msg;
        EXPECT_NE(msg.find(c.key), std::string::npos) << msg;
        if (!c.needle.empty()) {
            EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
        }
        // The line of the key (or of [parallel]) is named: "bad.toml:<line>".
        EXPECT_NE(msg.find("bad.toml:1"), std::string::npos) << msg;
    }
    // A last group smaller than pp (Megatron raises): 12 micro-batches in groups of 8 leave 4 ≥ pp
    // = 4 (allowed); 10 micro-batches leave 2 < 4.
    const std::string split = "account_for_embedding_in_pipeline_split = true\naccount_for_loss_in_pipeline_split = true\n";
    auto ok = load_job_text(small_job(split + "microbatch_group_size = 8\n", 2, 24), "ok.toml", presets());
    EXPECT_TRUE(ok.has_value()) << (ok ? "" : ok.error().str());
    auto bad = load_job_text(small_job(split + "microbatch_group_size = 8\n", 2, 20), "bad.toml", presets());
    ASSERT_FALSE(bad.has_value());
    EXPECT_NE(bad.error().str().find("last group holds 2"), std::string::npos) << bad.error().str();
}

// 1F1B: with the embedding and the loss counted, 30 layers on pp 4 split 7·8·8·7 — the same
// estimate as that split written out; stage 0 holds one layer fewer than the split that puts
// the remainder first (8·7·7·8), so less memory, and the lighter end stages shorten the step.
TEST(PipelineSplit, FirstLastSplitOneF1B) {
    const Estimate accounted = estimate_job(load_ok(small_job(
        "account_for_embedding_in_pipeline_split = true\naccount_for_loss_in_pipeline_split = true\n")));
    const Estimate written = estimate_job(load_ok(small_job("layers_per_stage = [7, 8, 8, 7]\n")));
    const Estimate heavy_ends = estimate_job(load_ok(small_job("layers_per_stage = [8, 7, 7, 8]\n")));
    ASSERT_EQ(accounted.stages.size(), 4u);
    const int want[4] = {7, 8, 8, 7};
    for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(accounted.stages[(size_t)i].layers, want[i]);
        EXPECT_REL(accounted.stages[(size_t)i].mem.total(), written.stages[(size_t)i].mem.total());
    }
    EXPECT_REL(accounted.step_s, written.step_s);
    EXPECT_LT(accounted.stages[0].mem.activations, heavy_ends.stages[0].mem.activations);
    EXPECT_LT(accounted.step_s, heavy_ends.step_s);
    EXPECT_LT(accounted.pipeline_s, heavy_ends.pipeline_s);
}

// Interleaved (pp 4, vpp 2, 8 micro-batches): 32 slots in chunks of 4, chunk 0 of stage 0 and
// chunk 1 of stage 3 hold 3 layers. Stage 0's peak holds its first 2·3 + (2 − 1)·4 + 1 = 11
// forwards in Megatron's order: chunk 0 (3 layers) × 4, chunk 1 (4) × 4, chunk 0 (3) × 3 =
// 37 layer-micro-batches, not 11 × 3.5; stage 1: 9 forwards of 4-layer chunks = 36.
TEST(PipelineSplit, FirstLastSplitInterleavedMemory) {
    const JobSpec job = load_ok(small_job(
        "account_for_embedding_in_pipeline_split = true\naccount_for_loss_in_pipeline_split = true\n", 2));
    const Estimate e = estimate_job(job);
    ASSERT_EQ(e.stages.size(), 4u);
    EXPECT_EQ(e.stages[0].layers, 7);
    EXPECT_EQ(e.stages[1].layers, 8);
    EXPECT_EQ(e.stages[3].layers, 7);
    const double per_layer = e.stages[1].act_per_microbatch / 8;  // a middle stage: layers only
    EXPECT_REL(e.stages[1].mem.activations, 36 * per_layer);
    const double token_ids = 4.0 * 2048;  // int32 ids of one micro-batch, on chunk 0 of stage 0
    EXPECT_REL(e.stages[0].mem.activations, 37 * per_layer + 11 * token_ids / 2);
    // Chunk durations follow the chunks' layers: stage 0's chunk 0 is shorter than its chunk 1
    // even with the embedding on it.
    EXPECT_LT(e.stages[0].chunks[0].fwd.compute, e.stages[0].chunks[1].fwd.compute);
}

// N = 8 (one group of all 8 micro-batches): stage 1 (two 4-layer chunks) warms up with
// 2·2 + (2 − 1)·8 = 12 forwards and holds 13 chunks = 52 layer-micro-batches instead of 36.
TEST(PipelineSplit, GroupSizeChangesInterleavedInFlight) {
    const std::string split = "account_for_embedding_in_pipeline_split = true\naccount_for_loss_in_pipeline_split = true\n";
    const Estimate n4 = estimate_job(load_ok(small_job(split, 2)));
    const Estimate n8 = estimate_job(load_ok(small_job(split + "microbatch_group_size = 8\n", 2)));
    const double per_layer = n4.stages[1].act_per_microbatch / 8;
    EXPECT_REL(n4.stages[1].mem.activations, 9 * 4 * per_layer);  // 2·2 + 4 + 1 = 9 chunks
    EXPECT_REL(n8.stages[1].mem.activations, 13 * 4 * per_layer);
    EXPECT_GT(n8.stages[0].mem.total(), n4.stages[0].mem.total());
    EXPECT_EQ(schedule_warmup(4, 2, 8, 1, 8), 12);
    EXPECT_EQ(schedule_warmup(4, 2, 8, 1), 8);
}

// The block order with N: micro-batches in groups of N through each chunk
// (schedules.py get_schedule_table), e.g. N = 8, m = 8: all eight through chunk 0 first.
TEST(PipelineSplit, GroupSizeBlockOrderAndShortcut) {
    const auto ops = stage_schedule(4, 2, 8, 0, 8);
    for (int k = 0; k < 8; ++k) {
        EXPECT_EQ(ops[(size_t)k].pass, Pass::forward);
        EXPECT_EQ(ops[(size_t)k].chunk, 0);
        EXPECT_EQ(ops[(size_t)k].micro_batch, k);
    }
    EXPECT_EQ(ops[8].chunk, 1);
    EXPECT_EQ(ops[8].micro_batch, 0);
    // Every block once, for several N (pp ≤ N ≤ m).
    for (int n : {4, 6, 8, 12, 24})
        for (int s = 0; s < 4; ++s) {
            std::vector<int> seen(2 * 2 * 24, 0);
            for (const ScheduleOp& op : stage_schedule(4, 2, 24, s, n))
                ++seen[(size_t)((op.pass == Pass::forward ? 0 : 48) + op.chunk * 24 + op.micro_batch)];
            for (int c : seen) EXPECT_EQ(c, 1) << n << " " << s;
        }
    // The makespan shortcut (period: one group) agrees with the full simulation.
    std::vector<double> fwd = {1.0, 1.1, 0.9, 1.2, 1.05, 0.95, 1.0, 1.3}, bwd;
    for (double f : fwd) bwd.push_back(2.1 * f);
    for (int n : {4, 6, 8}) {
        PipelineDurations d;
        d.p = 4, d.v = 2, d.m = 48, d.fwd = fwd, d.bwd = bwd, d.group = n;
        std::vector<double> a(4), b(4);
        EXPECT_REL(pipeline_makespan(d, a), simulate_pipeline(d, b)) << n;
    }
    // N changes the simulated schedule: groups of 8 vs of 4 place the chunks differently.
    PipelineDurations d4, d8;
    d4.p = d8.p = 4, d4.v = d8.v = 2, d4.m = d8.m = 8, d4.fwd = d8.fwd = fwd, d4.bwd = d8.bwd = bwd;
    d8.group = 8;
    std::vector<double> e4(4), e8(4);
    std::vector<PlacedOp> p4, p8;
    simulate_pipeline(d4, e4, &p4);
    simulate_pipeline(d8, e8, &p8);
    bool differs = false;
    for (size_t k = 0; k < p4.size(); ++k) differs = differs || !(p4[k].op == p8[k].op);
    EXPECT_TRUE(differs);
}

// Export: Megatron's own flags, checked against megatron/training/arguments.py.
TEST(PipelineSplit, MegatronExportFlags) {
    JobSpec job = load_ok(small_job("distributed_optimizer = true\naccount_for_embedding_in_pipeline_split = true\n"
                                    "account_for_loss_in_pipeline_split = true\nmicrobatch_group_size = 8\n",
                                    2));
    auto out = export_job(job, ExportFormat::megatron);
    ASSERT_TRUE(out.has_value()) << out.error().str();
    EXPECT_NE(out->text.find("--account-for-embedding-in-pipeline-split"), std::string::npos) << out->text;
    EXPECT_NE(out->text.find("--account-for-loss-in-pipeline-split"), std::string::npos) << out->text;
    EXPECT_NE(out->text.find("--num-layers-per-virtual-pipeline-stage 4"), std::string::npos) << out->text;
    EXPECT_NE(out->text.find("--microbatch-group-size-per-virtual-pipeline-stage 8"), std::string::npos) << out->text;
    EXPECT_EQ(out->text.find("--pipeline-model-parallel-layout"), std::string::npos) << out->text;
}

// ZeRO-2 under a pipeline (the paper's FSDP): gradients and optimizer states sharded over
// DP, 16-bit parameters whole, and at the activation peak only the reduce bucket.
TEST(PipelineSplit, ZeroTwoUnderPipeline) {
    const JobSpec job = load_ok(kLlama405bPaper);
    const Estimate e = estimate_job(job);
    const StageEstimate& s = e.stages[1];
    EXPECT_REL(s.mem.params, 2.0 * s.params_count);
    EXPECT_REL(s.mem.grads, 2.0 * s.params_count / 128);
    EXPECT_REL(s.mem.optimizer, 12.0 * s.params_count / 128);
    // temp: SP gather + p2p + PyTorch's and Transformer Engine's cuBLAS workspaces (the job's
    // Megatron-LM of today runs TE layers) + one 5e8-element bucket (not two).
    const double T = 8192, h = 16384;
    const double want_temp = 2.0 * T * h + 2.0 * 2.0 * T * h / 8 + 2 * 32.0 * 1024 * 1024 + 2.0 * 5e8;
    EXPECT_REL(s.mem.temp, want_temp);
}

// The paper's own layout fits on the 80 GB H100s it ran on, with room to spare; before the
// keys (vpp 1, selective recompute, Megatron's fp32 main grads) it was predicted at 84 GiB.
TEST(PipelineSplit, Llama405bPaperLayoutFits) {
    const JobSpec job = load_ok(kLlama405bPaper);
    const Estimate e = estimate_job(job);
    ASSERT_EQ(e.stages.size(), 16u);
    EXPECT_TRUE(e.fits);
    EXPECT_EQ(e.stages[0].layers, 7);
    EXPECT_EQ(e.stages[15].layers, 7);
    EXPECT_EQ(e.stages[0].chunks.size(), 8u);
    EXPECT_LT(e.stages[(size_t)e.worst_stage].mem.total(), 0.98 * job.cluster.gpu.memory_gib * kGiB);
    // The first stage, one layer fewer, is lighter than the middle ones.
    EXPECT_LT(e.stages[0].mem.total(), e.stages[1].mem.total());
}

}  // namespace
