// pipeline_scatter_gather.cpp — Megatron-LM's scatter/gather pipeline send (Narayanan et al. 2021 §4.1;
// megatron/p2p_communication.py, Feb 2021 – Mar 2023): parallel.scatter_gather_tensors_in_pipeline.
// Without sequence parallelism each TP rank sends 1/tp of the activation across the stage
// boundary and the receiver all-gathers it over NVLink; with sequence parallelism, tp = 1 or
// the key off, the send is unchanged. Also the key's TOML round trip, its refusal outside
// framework megatron, and the Megatron export's note.
#include <string>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/spec/presets.h"

namespace {

using namespace ptd;

const PresetCatalog& presets() { return embedded_presets(); }

// A GPT-shaped model on 4 DGX A100 nodes: tp 8 inside a node, pp 4 across nodes, so every
// pipeline hop goes over the NICs (the megatron21 rows' shape, smaller).
std::string job_text(const std::string& parallel_extra, int tp = 8, const std::string& framework = "megatron") {
    return "[model]\narch = \"gpt\"\nlayers = 16\nhidden = 4096\nheads = 32\nvocab = 51200\nseq_len = 2048\n"
           "[cluster]\nnodes = 4\ngpus_per_node = 8\ngpu = \"a100-80gb\"\ninter_gbps = 25.0\n"
           "[parallel]\ntp = " + std::to_string(tp) + "\npp = 4\nrecompute = \"full\"\n" + parallel_extra +
           "[training]\nmicro_batch = 1\nglobal_batch = " + std::to_string(32 * 8 / tp) + "\nframework = \"" +
           framework + "\"\n";
}

JobSpec load_ok(const std::string& text) {
    auto job = load_job_text(text, "job.toml", presets());
    EXPECT_TRUE(job.has_value()) << (job ? "" : job.error().str());
    return job ? *job : JobSpec{};
}

constexpr const char* kOn = "scatter_gather_tensors_in_pipeline = true\n";

TEST(P2pScatterGather, KeyReadWrittenAndOffByDefault) {
    EXPECT_FALSE(load_ok(job_text("")).parallel.scatter_gather_tensors_in_pipeline);
    const JobSpec on = load_ok(job_text(kOn));
    EXPECT_TRUE(on.parallel.scatter_gather_tensors_in_pipeline);
    const std::string written = save_job_toml(on);
    EXPECT_NE(written.find("scatter_gather_tensors_in_pipeline = true"), std::string::npos) << written;
    EXPECT_EQ(load_ok(written).parallel, on.parallel);
}

TEST(P2pScatterGather, RefusedOutsideMegatronAndForNonBool) {
    for (const char* fw : {"deepspeed", "torchtitan", "pytorch-fsdp"}) {
        auto job = load_job_text(job_text(kOn, 8, fw), "bad.toml", presets());
        ASSERT_FALSE(job.has_value()) << fw;
        const std::string msg = job.error().str();
        EXPECT_NE(msg.find("parallel.scatter_gather_tensors_in_pipeline"), std::string::npos) << msg;
        EXPECT_NE(msg.find(fw), std::string::npos) << msg;
        EXPECT_NE(msg.find("allowed"), std::string::npos) << msg;
    }
    auto job = load_job_text(job_text("scatter_gather_tensors_in_pipeline = \"yes\"\n"), "bad.toml", presets());
    ASSERT_FALSE(job.has_value());
    EXPECT_NE(job.error().str().find("parallel.scatter_gather_tensors_in_pipeline"), std::string::npos)
        << job.error().str();
}

// The hop sends 1/t of the tensor over the NIC and adds an NVLink all-gather: cheaper than the
// whole tensor over the NIC, dearer than sequence parallelism's shard (no gather).
TEST(P2pScatterGather, SendsOneTpShareAndGathers) {
    const Estimate whole = estimate_job(load_ok(job_text("")));
    const Estimate split = estimate_job(load_ok(job_text(kOn)));
    const Estimate shard = estimate_job(load_ok(job_text("sequence_parallel = true\n")));
    for (int s = 0; s < 4; ++s) {
        const double w = whole.stages[s].chunks[0].fwd.p2p, g = split.stages[s].chunks[0].fwd.p2p,
                     h = shard.stages[s].chunks[0].fwd.p2p;
        EXPECT_GT(w, 0.0);
        EXPECT_LT(g, 0.5 * w) << "stage " << s;  // 8× fewer bytes on the 25 GB/s NIC
        EXPECT_GT(g, h) << "stage " << s;        // plus the receiver's all-gather
        EXPECT_DOUBLE_EQ(split.stages[s].chunks[0].bwd.p2p, g);  // the gradient goes the same way
        // Compute is untouched: only the hop changes.
        EXPECT_DOUBLE_EQ(split.stages[s].chunks[0].fwd.compute, whole.stages[s].chunks[0].fwd.compute);
        EXPECT_DOUBLE_EQ(split.stages[s].chunks[0].bwd.recompute, whole.stages[s].chunks[0].bwd.recompute);
    }
    EXPECT_LT(split.step_s, whole.step_s);
}

// Megatron skipped it under sequence parallelism (the tensor is a shard already) and it means
// nothing with tp = 1: those estimates do not move.
TEST(P2pScatterGather, NoEffectWithSequenceParallelOrTp1) {
    const Estimate sp = estimate_job(load_ok(job_text("sequence_parallel = true\n")));
    std::string sp_on_text = "sequence_parallel = true\n";  // appended: GCC 12's false -Warray-bounds (PR 105329)
    sp_on_text += kOn;
    const Estimate sp_on = estimate_job(load_ok(job_text(sp_on_text)));
    EXPECT_DOUBLE_EQ(sp_on.step_s, sp.step_s);
    EXPECT_DOUBLE_EQ(sp_on.stages[1].chunks[0].fwd.p2p, sp.stages[1].chunks[0].fwd.p2p);
    const Estimate t1 = estimate_job(load_ok(job_text("", 1)));
    const Estimate t1_on = estimate_job(load_ok(job_text(kOn, 1)));
    EXPECT_DOUBLE_EQ(t1_on.step_s, t1.step_s);
}

// Current Megatron-LM has neither the code nor the flag: the export passes nothing and says so.
TEST(P2pScatterGather, MegatronExportNotesItWithoutAFlag) {
    auto out = export_job(load_ok(job_text(kOn)), ExportFormat::megatron);
    ASSERT_TRUE(out.has_value()) << out.error().str();
    EXPECT_EQ(out->text.find("scatter-gather"), std::string::npos) << out->text;
    bool noted = false;
    for (const std::string& n : out->notes) noted = noted || n.find("scatter_gather_tensors_in_pipeline") != std::string::npos;
    EXPECT_TRUE(noted);
    auto plain = export_job(load_ok(job_text("")), ExportFormat::megatron);
    ASSERT_TRUE(plain.has_value());
    for (const std::string& n : plain->notes) EXPECT_EQ(n.find("scatter_gather"), std::string::npos) << n;
}

}  // namespace
