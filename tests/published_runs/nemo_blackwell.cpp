// nemo_blackwell.cpp — the check rows added from NVIDIA's NeMo and Megatron-Bridge performance
// tables for DGX-B200, DGX-GB200 (and the DGX-H100 rows of the same tables), read from
// bench/accuracy/published_runs.toml exactly as bench_accuracy reads them, and the loader's
// "mxfp8" recipe word those tables' FP8-MX / MXFP8 columns need. The tests pin what the rows'
// notes claim: whole layouts that multiply out to the published GPU count and batch, the
// network from the system's cluster preset, the MXFP8 recipe (with the FP8 parameter gather the
// Megatron-Bridge recipe sets) only on Blackwell, and every published layout predicted to fit
// the GPUs it ran on.
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/spec/presets.h"

#include "job_test_util.h"
#include "published_runs_test_util.h"

namespace {

using namespace ptd;

using ptd_test::published_runs;
using ptd_test::starts_with;
bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The rows of the blackwell block: its source tags, dense models only (the MoE rows of the same
// tables, nemo2502/nemo2504 Mixtral, belong to the moe helper's block).
bool is_family_row(const ::Run& r) {
    for (const char* tag : {"mbridge2509-", "mbridge2604-", "mbridge2606-", "nemo2502-", "nemo2504-", "nemo2507-"})
        if (starts_with(r.name, tag)) return r.job.model.experts == 0;
    return starts_with(r.name, "mbridge2511-") && r.job.model.experts == 0 &&  // mlarows: its MoE rows are not this block's
           (ends_with(r.name, "-mxfp8") || r.name == "mbridge2511-llama3-8b-gb200-fp8");
}

TEST(BlackwellRows, WholeLayoutsOnTheTablesSystems) {
    int seen = 0, b200 = 0, gb200 = 0, h100 = 0;
    for (const ::Run& r : published_runs()) {
        if (!is_family_row(r)) continue;
        ++seen;
        ASSERT_TRUE(r.skip.empty()) << r.name << ": " << r.skip;
        // Six rows calibrate blackwell (picked to span B200 / GB200, FP8 / MXFP8, 8B–405B when
        // the family was added; docs/accuracy.md, Method); the rest check the constants.
        static const std::set<std::string> calibrating = {
            "nemo2502-gpt3-175b-b200-fp8",         "nemo2504-nemotron4-15b-gb200-fp8",
            "nemo2504-llama3-70b-gb200-fsdp-fp8",  "dgxc2505-llama31-405b-128gb200-bf16",
            "mbridge2511-llama3-8b-gb200-mxfp8",   "mbridge2606-llama31-405b-gb200-mxfp8"};
        EXPECT_EQ(r.use, calibrating.count(r.name) ? "calibrate" : "check") << r.name;
        EXPECT_EQ(r.framework, "nemo") << r.name;
        EXPECT_EQ(r.convention, "nemo-model-tflops") << r.name;
        const ParallelSpec& p = r.job.parallel;
        const TrainingSpec& t = r.job.training;
        // GA = GBS / (MBS · dp) is a whole number (the tables print it; the notes check it).
        EXPECT_EQ(t.global_batch % (t.micro_batch * p.dp), 0) << r.name;
        // Interleaved chunks hold whole layers; the 405B rows count the embedding and the loss
        // as layers (Megatron's account_for_*_in_pipeline_split, set by the 405B recipes).
        if (p.vpp > 1) {
            const int slots = r.job.model.layers + (p.account_for_embedding_in_pipeline_split ? 1 : 0) +
                              (p.account_for_loss_in_pipeline_split ? 1 : 0);
            EXPECT_EQ(slots % (p.pp * p.vpp), 0) << r.name;
        }
        if (r.job.cluster.gpu.name == "gb200") {
            ++gb200;
            EXPECT_EQ(r.cluster, "gb200-nvl72") << r.name;
            EXPECT_EQ(r.job.cluster.gpus_per_node, 4) << r.name;  // four GPUs per compute tray
            EXPECT_EQ(r.job.cluster.nvlink_domain, 72) << r.name;
        } else if (r.job.cluster.gpu.name == "b200") {
            ++b200;
            EXPECT_EQ(r.cluster, "dgx-b200") << r.name;
        } else {
            ++h100;
            EXPECT_EQ(r.generation, "H100") << r.name;
            EXPECT_EQ(r.cluster, "dgx-h100") << r.name;
        }
        // FSDP rows: Megatron-FSDP over the whole data-parallel group, as ZeRO-3.
        if (r.fsdp) {
            EXPECT_EQ(p.zero, 3) << r.name;
        }
    }
    EXPECT_EQ(seen, 31);
    EXPECT_EQ(b200, 8);
    EXPECT_EQ(gb200, 20);
    EXPECT_EQ(h100, 3);
}

// The tables' FP8-MX / MXFP8 columns run Transformer Engine's MXFP8 block scaling; Megatron-
// Bridge's bf16_with_mxfp8_mixed() sets fp8_param_gather = True (training/mixed_precision.py),
// which the loader gives every nemo FP8 recipe that has it.
TEST(BlackwellRows, Mxfp8RowsRunTheMxfp8Recipe) {
    int seen = 0;
    for (const ::Run& r : published_runs()) {
        if (!is_family_row(r)) continue;
        if (!ends_with(r.name, "-mxfp8")) {
            EXPECT_NE(r.job.training.fp8, Fp8Recipe::mxfp8) << r.name;
            continue;
        }
        ++seen;
        EXPECT_EQ(r.fp8, "mxfp8") << r.name;
        EXPECT_EQ(r.job.training.fp8, Fp8Recipe::mxfp8) << r.name;
        EXPECT_EQ(r.job.training.precision, Precision::bf16) << r.name;
        EXPECT_TRUE(r.job.training.fp8_param_gather) << r.name;
        EXPECT_EQ(r.generation, "B200") << r.name;
    }
    EXPECT_EQ(seen, 10);
}

// MXFP8 needs Blackwell's block-scaled tensor cores: the same run on an H100 is not modelled,
// and the bench says why instead of predicting it at the FP8 peak.
TEST(BlackwellRows, Mxfp8OnHopperIsRefusedWithTheReason) {
    const std::string path = ::testing::TempDir() + "blackwell_mxfp8_h100.toml";
    {
        std::ofstream f(path);
        f << "[[run]]\nname = \"x-h100\"\nframework = \"nemo\"\ngpu = \"h100-sxm\"\ngpus = 8\narch = \"llama\"\n"
             "layers = 2\nhidden = 256\nheads = 4\nglobal_batch = 8\ndp = 8\nfp8 = \"mxfp8\"\niteration_s = 1.0\n"
             "[[run]]\nname = \"x-b200\"\nframework = \"nemo\"\ngpu = \"b200\"\ngpus = 8\narch = \"llama\"\n"
             "layers = 2\nhidden = 256\nheads = 4\nglobal_batch = 8\ndp = 8\nfp8 = \"mxfp8\"\niteration_s = 1.0\n";
    }
    const std::vector<::Run> runs = load_runs(path, ptd::embedded_presets());
    std::remove(path.c_str());
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_NE(runs[0].skip.find("mxfp8"), std::string::npos) << runs[0].skip;
    EXPECT_NE(runs[0].skip.find("Blackwell"), std::string::npos) << runs[0].skip;
    EXPECT_TRUE(runs[1].skip.empty()) << runs[1].skip;
    EXPECT_EQ(runs[1].job.training.fp8, Fp8Recipe::mxfp8);
}

// Issue 15: a run that happened cannot be an OOM.
TEST(BlackwellRows, EveryPublishedLayoutFitsItsGpus) {
    ptd_test::expect_family_fits(is_family_row, 31);
}

}  // namespace
