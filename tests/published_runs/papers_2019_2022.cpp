// papers_2019_2022.cpp — the mechanisms the 2019–2022 published runs (OPT-175B,
// GPT-NeoX-20B, Megatron-LM 2019 on V100) needed: checkpoints distributed over the
// TP group (parallel.distribute_saved_activations: Megatron-LM --distribute-saved-activations,
// metaseq --distribute-checkpointed-activations, DeepSpeed partition_activations) and the
// attention softmax without its fused kernel (training.masked_softmax_fusion = false:
// Megatron-LM --no-masked-softmax-fusion, the 2019 code). Per mechanism: the key read,
// checked and written back, its effect on memory or time, its export; then the published rows
// (bench/accuracy/published_runs.toml, read as bench_accuracy reads them).
#include <string>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/spec/job_overrides.h"
#include "ptd/spec/presets.h"

#include "job_test_util.h"
#include "published_run.h"

namespace {

using namespace ptd;
using namespace ptd_test;

constexpr double kGiB = 1024.0 * 1024 * 1024;

// GPT-3 175B on 1,024 A100 80GB: TP8 PP8 DP16, full recompute, fp16, no flash attention.
const char* kGpt3 = "gpt3-175b-a100.toml";

ExportOutput exported(const JobSpec& job, ExportFormat f) {
    auto out = export_job(job, f);
    EXPECT_TRUE(out) << (out ? "" : out.error().str());
    return out ? *out : ExportOutput{};
}

// GPT-3 with `set`, saved as TOML (which must hold `written`) and read back; the default job's
// TOML does not mention `key` (existing job files keep their text).
struct SavedJob {
    JobSpec job, back;
};
SavedJob saved_with(const std::string& set, const std::string& written, const std::string& key) {
    SavedJob s{load_asset(kGpt3, {set}), {}};
    const std::string saved = save_job_toml(s.job);
    EXPECT_TRUE(contains(saved, written)) << saved;
    s.back = reloaded(saved);
    const std::string plain = save_job_toml(load_asset(kGpt3));
    EXPECT_FALSE(contains(plain, key)) << plain;
    return s;
}

TEST(DistributeSavedActivations, ReadCheckedAndWrittenBack) {
    const SavedJob s = saved_with("parallel.distribute_saved_activations=true", "distribute_saved_activations = true",
                                  "distribute_saved_activations");
    EXPECT_TRUE(s.job.parallel.distribute_saved_activations);
    EXPECT_EQ(s.back.parallel, s.job.parallel);
}

TEST(DistributeSavedActivations, NeedsFullRecomputeAndTpAndASupportingFramework) {
    std::string err = load_error(kGpt3, {"parallel.distribute_saved_activations=true", "parallel.recompute=selective"});
    ptd_test::expect_mentions(err, {"parallel.distribute_saved_activations", "selective", "full"});
    err = load_error(kGpt3, {"parallel.distribute_saved_activations=true", "parallel.tp=1", "parallel.dp=128"});
    ptd_test::expect_mentions(err, {"parallel.distribute_saved_activations", "tp = 1"});
    err = load_error(kGpt3, {"parallel.distribute_saved_activations=true", "training.framework=torchtitan"});
    ptd_test::expect_mentions(err, {"parallel.distribute_saved_activations", "torchtitan"});
    EXPECT_TRUE(load_error(kGpt3, {"parallel.distribute_saved_activations=true"}).empty());
}

// Full recompute keeps one input per layer (e·b·s·h); distributed, each TP rank keeps 1/tp of
// it and all-gathers it before the layer's recompute.
TEST(DistributeSavedActivations, EachTpRankKeepsItsShareOfTheCheckpoints) {
    const JobSpec plain = load_asset(kGpt3);
    const JobSpec dist = load_asset(kGpt3, {"parallel.distribute_saved_activations=true"});
    const Estimate a = estimate_job(plain), b = estimate_job(dist);
    const StageEstimate &sa = a.stages[0], &sb = b.stages[0];
    const double t = plain.parallel.tp;
    const double checkpoint = 2.0 * plain.training.micro_batch * plain.model.seq_len * plain.model.hidden;
    // The checkpoints of the stage's layers, for every micro-batch held: (1 − 1/t) of them go,
    // but for the layer being recomputed, whose input is all-gathered whole again.
    const double saved = (sa.layers * sa.in_flight - 1.0) * checkpoint * (1.0 - 1.0 / t);
    EXPECT_NEAR(sa.mem.activations - sb.mem.activations, saved, 1e-6 * saved);
    // The backward's all-gathers over NVLink: some TP time, no more than the layers' forward all-reduces.
    EXPECT_GT(sb.tp_s, sa.tp_s);
    EXPECT_LT(sb.tp_s - sa.tp_s, 0.5 * sa.tp_s);
    // With sequence parallelism the input is already sharded: Megatron ignores the flag.
    const JobSpec sp = load_asset(kGpt3, {"parallel.sequence_parallel=true"});
    const JobSpec sp_dist = load_asset(kGpt3, {"parallel.sequence_parallel=true", "parallel.distribute_saved_activations=true"});
    EXPECT_EQ(estimate_job(sp).stages[0].mem.activations, estimate_job(sp_dist).stages[0].mem.activations);
    EXPECT_EQ(estimate_job(sp).step_s, estimate_job(sp_dist).step_s);
}

TEST(DistributeSavedActivations, Exported) {
    const JobSpec j = load_asset(kGpt3, {"parallel.distribute_saved_activations=true"});
    EXPECT_TRUE(contains(exported(j, ExportFormat::megatron).text, "--distribute-saved-activations"));
    EXPECT_FALSE(contains(exported(load_asset(kGpt3), ExportFormat::megatron).text, "--distribute-saved-activations"));
    const std::string ds = exported(load_asset(kGpt3, {"parallel.distribute_saved_activations=true", "training.framework=deepspeed"}),
                                    ExportFormat::deepspeed).text;
    EXPECT_TRUE(contains(ds, "\"partition_activations\": true")) << ds;
    // (untied: torchtitan refuses tied embeddings with pipelining, framework_rejections.cpp)
    const JobSpec bf16 = load_asset(kGpt3, {"parallel.distribute_saved_activations=true", "training.precision=bf16",
                                            "model.tied_embeddings=false"});
    EXPECT_TRUE(any_note(exported(bf16, ExportFormat::torchtitan), "distribute_saved_activations"));
}

TEST(SoftmaxFusion, ReadCheckedAndWrittenBack) {
    const SavedJob s = saved_with("training.masked_softmax_fusion=false", "masked_softmax_fusion = false",
                                  "masked_softmax_fusion");
    EXPECT_FALSE(s.job.training.masked_softmax_fusion);
    EXPECT_EQ(s.back.training, s.job.training);
    const std::string err = load_error(kGpt3, {"training.masked_softmax_fusion=false", "training.flash_attention=true"});
    ptd_test::expect_mentions(err, {"training.masked_softmax_fusion", "flash_attention"});
}

// Unfused, the scale and the causal mask each read and write the b·(a/t)·s² scores in the
// forward (2e each, plus the mask's byte) and again on their gradient in the backward.
TEST(SoftmaxFusion, ScaleAndMaskArePassesOverTheScores) {
    const JobSpec fused = load_asset(kGpt3);
    const JobSpec unfused = load_asset(kGpt3, {"training.masked_softmax_fusion=false"});
    const Estimate a = estimate_job(fused), b = estimate_job(unfused);
    const ModelSpec& m = fused.model;
    const double scores = (double)fused.training.micro_batch * m.heads / fused.parallel.tp * m.seq_len * m.seq_len;
    const double hbm = fused.cluster.gpu.hbm_gbps * 1e9 * time_model_constants().hbm_eff;
    const double per_layer = (4.0 * 2 + 1) * scores / hbm;
    const StageEstimate &sa = a.stages[1], &sb = b.stages[1];  // a middle stage: transformer layers only
    EXPECT_NEAR(sb.fwd_s - sa.fwd_s, sa.layers * per_layer, 1e-3 * sa.layers * per_layer);
    EXPECT_NEAR(sb.bwd_s - sa.bwd_s, sa.layers * per_layer, 1e-3 * sa.layers * per_layer);
    EXPECT_GT(b.step_s, a.step_s);
    EXPECT_EQ(a.stages[0].mem.total(), b.stages[0].mem.total());  // the same tensors are saved
    // Exported as Megatron-LM's flag.
    EXPECT_TRUE(contains(exported(unfused, ExportFormat::megatron).text, "--no-masked-softmax-fusion"));
    EXPECT_FALSE(contains(exported(fused, ExportFormat::megatron).text, "--no-masked-softmax-fusion"));
    // Either way without flash attention Megatron-LM runs its unfused attention backend.
    EXPECT_TRUE(contains(exported(unfused, ExportFormat::megatron).text, "--attention-backend unfused"));
    EXPECT_TRUE(contains(exported(fused, ExportFormat::megatron).text, "--attention-backend unfused"));
}

// The 2019–2022 paper rows: modelled, checking only, with the settings their sources and
// launchers state; OPT-175B's own layout fits the 80 GB A100s it ran on.
TEST(PaperRows2019To2022, StateTheirSettingsAndFit) {
    const std::vector<::Run> runs = load_runs(PTD_SOURCE_DIR "/bench/accuracy/published_runs.toml", presets());
    int seen = 0;
    for (const ::Run& r : runs) {
        const bool ours = r.name.rfind("opt22-", 0) == 0 || r.name.rfind("neox22-", 0) == 0 ||
                          r.name.rfind("megatron19-", 0) == 0;
        if (!ours) continue;
        ++seen;
        ASSERT_TRUE(r.skip.empty()) << r.name << ": " << r.skip;
        // The one V100 calibration run (the Megatron-LM 2019 single-GPU baseline: no
        // communication); every other row of the family checks the constants.
        EXPECT_EQ(r.use, r.name == "megatron19-1.2b-1gpu" ? "calibrate" : "check") << r.name;
        const Estimate e = estimate_job(r.job);
        EXPECT_TRUE(e.fits) << r.name << ": " << e.stages[e.worst_stage].mem.total() / kGiB << " GiB";
        if (r.name == "opt22-175b-992gpu") {
            EXPECT_TRUE(r.job.parallel.distribute_saved_activations);
            EXPECT_FALSE(r.job.parallel.overlap_param_gather);  // fairscale FSDP: no forward prefetch
            EXPECT_EQ(r.job.parallel.zero, 2);
            EXPECT_EQ(r.job.training.main_params_dtype, StateDtype::none);
            JobSpec whole = r.job;  // every TP rank keeping the whole checkpoints would not fit
            whole.parallel.distribute_saved_activations = false;
            EXPECT_FALSE(estimate_job(whole).fits);
        }
        if (r.name.rfind("megatron19-", 0) == 0) {
            EXPECT_FALSE(r.job.training.masked_softmax_fusion) << r.name;
            EXPECT_EQ(r.generation, "V100") << r.name;
        }
    }
    EXPECT_EQ(seen, 4);
}

}  // namespace
