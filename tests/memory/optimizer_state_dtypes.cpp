// optimizer_state_dtypes.cpp — the mechanisms that let the last published runs predicted OOM fit the GPUs they
// ran on: optimizer states kept below fp32 (training.main_params_dtype,
// exp_avg_dtype, exp_avg_sq_dtype: Megatron-LM's precision-aware optimizer, NeMo 1.x's Apex
// DistributedFusedAdam `dtype`) and models trained without dropout (model.dropout).
// One test per mechanism: the key read, checked and written back, its effect on memory (and
// on the optimizer step), its export; then the Nemotron-4 340B layout of dgxc-benchmarking
// v24.11 with the settings its configuration states, which must fit 80 GB H100s.
#include <string>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/spec/job_overrides.h"
#include "ptd/spec/presets.h"
#include "ptd/spec/stack_defaults.h"

#include "job_test_util.h"
#include "published_run.h"
#include "published_runs_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

constexpr double kGiB = 1024.0 * 1024 * 1024;

// Llama 3 8B on 8 H100: TP1 PP1 DP8, distributed optimizer.
std::string llama8b_job(const std::string& training_extra, const std::string& parallel_extra = "distributed_optimizer = true") {
    return llama8b_h100x8_job(parallel_extra, training_extra, 64);
}

std::string load_text_error(const std::string& text) {
    auto j = load_job_text(text, "oom4.toml", presets());
    return j ? std::string() : j.error().str();
}

TEST(OptimizerStateDtypes, ReadCheckedAndWrittenBack) {
    const JobSpec j = job_from_text(llama8b_job(
        "main_params_dtype = \"none\"\nexp_avg_dtype = \"bf16\"\nexp_avg_sq_dtype = \"fp8\"\n"));
    EXPECT_EQ(j.training.main_params_dtype, StateDtype::none);
    EXPECT_EQ(j.training.exp_avg_dtype, StateDtype::bf16);
    EXPECT_EQ(j.training.exp_avg_sq_dtype, StateDtype::fp8);
    const std::string saved = save_job_toml(j);
    EXPECT_TRUE(contains(saved, "main_params_dtype = \"none\"")) << saved;
    EXPECT_TRUE(contains(saved, "exp_avg_dtype = \"bf16\"")) << saved;
    EXPECT_TRUE(contains(saved, "exp_avg_sq_dtype = \"fp8\"")) << saved;
    EXPECT_EQ(reloaded(saved).training, j.training);
    // The defaults (fp32 everywhere) write nothing: existing job files keep their text.
    const std::string plain = save_job_toml(job_from_text(llama8b_job("")));
    EXPECT_FALSE(contains(plain, "_dtype")) << plain;
    // --set reaches them like any other key.
    const JobSpec set = load_asset("llama3-70b-h100.toml", {"training.exp_avg_dtype=bf16"});
    EXPECT_EQ(set.training.exp_avg_dtype, StateDtype::bf16);
}

TEST(OptimizerStateDtypes, BadValuesNameTheKeyAndWhatIsAllowed) {
    expect_mentions(load_text_error(llama8b_job("exp_avg_dtype = \"int4\"\n")), {"training.exp_avg_dtype", "int4", "bf16"});
    const std::string err = load_text_error(llama8b_job("main_params_dtype = \"fp8\"\n"));
    expect_mentions(err, {"training.main_params_dtype", "none"});
    EXPECT_FALSE(contains(err, "fp8, ")) << err;  // the master copy takes no fp8
    expect_mentions(load_text_error(llama8b_job("exp_avg_sq_dtype = \"none\"\n")), {"training.exp_avg_sq_dtype"});
    // fp32 training has no master copy to shrink.
    expect_mentions(load_text_error(llama8b_job("precision = \"fp32\"\nmain_params_dtype = \"bf16\"\n")),
                    {"training.main_params_dtype", "fp32"});
    // The remainders complete bf16 weights only.
    expect_mentions(load_text_error(llama8b_job("precision = \"fp16\"\nmain_params_dtype = \"fp32-remainders\"\n")),
                    {"fp32-remainders", "bf16"});
    // SGD keeps no second moment.
    expect_mentions(load_text_error(llama8b_job("optimizer = \"sgd\"\nexp_avg_sq_dtype = \"bf16\"\n")),
                    {"training.exp_avg_sq_dtype", "sgd"});
    // The bundled engine keeps fp32 states: its exact-memory profile cannot take them.
    expect_mentions(load_text_error(llama8b_job("exp_avg_dtype = \"bf16\"\n[estimate]\nactivation_profile = \"ptd-engine\"\n")),
                    {"ptd-engine"});
}

TEST(OptimizerStateDtypes, BytesPerParameter) {
    // fp32 everywhere is the two-argument form, for every precision and ZeRO stage.
    for (Precision pr : {Precision::bf16, Precision::fp16, Precision::fp32})
        for (int zero : {0, 1, 2, 3})
            for (bool dist : {false, true}) {
                if (zero > 0 && dist) continue;
                const StateBytes a = state_bytes_per_param(pr, Optimizer::adam, zero, dist, 8);
                const StateBytes b = state_bytes_per_param(pr, Optimizer::adam, zero, dist, 8, OptimizerStateWidths{});
                EXPECT_DOUBLE_EQ(a.optimizer, b.optimizer);
                EXPECT_DOUBLE_EQ(a.total(), b.total());
            }
    const double N = 2;
    // NeMo 1.x's Apex DistributedFusedAdam with dtype bf16 and store_params = False: bf16 m and
    // v, no master copy, sharded over the data-parallel ranks — 4 / N bytes, not 12 / N.
    OptimizerStateWidths apex_bf16{0.0, 2.0, 2.0};
    StateBytes b = state_bytes_per_param(Precision::bf16, Optimizer::adam, 0, true, N, apex_bf16);
    EXPECT_DOUBLE_EQ(b.optimizer, 4.0 / N);
    EXPECT_DOUBLE_EQ(b.params, 2.0);  // the weights and the gradient buffer do not change
    EXPECT_DOUBLE_EQ(b.grads, 4.0);
    // With fp8_params NeMo stores a master shard in that dtype (store_params = True): 6 / N.
    b = state_bytes_per_param(Precision::bf16, Optimizer::adam, 0, true, N, {2.0, 2.0, 2.0});
    EXPECT_DOUBLE_EQ(b.optimizer, 6.0 / N);
    // Megatron-LM --main-params-dtype fp16 --exp-avg-dtype fp8 --exp-avg-sq-dtype bf16.
    b = state_bytes_per_param(Precision::bf16, Optimizer::adam, 0, true, N, {2.0, 1.0, 2.0});
    EXPECT_DOUBLE_EQ(b.optimizer, 5.0 / N);
    // fp16 keeps its fp32 gradient copy in the optimizer whatever the states' dtypes.
    b = state_bytes_per_param(Precision::fp16, Optimizer::adam, 0, false, N, apex_bf16);
    EXPECT_DOUBLE_EQ(b.optimizer, 4.0 + 4.0);
    // ZeRO (DeepSpeed) path and SGD (the momentum is exp_avg).
    b = state_bytes_per_param(Precision::bf16, Optimizer::adam, 1, false, N, apex_bf16);
    EXPECT_DOUBLE_EQ(b.optimizer, 4.0 / N);
    b = state_bytes_per_param(Precision::bf16, Optimizer::sgd, 0, false, N, {4.0, 2.0, 4.0});
    EXPECT_DOUBLE_EQ(b.optimizer, 4.0 + 2.0);
    // fp32 training: the moments only.
    b = state_bytes_per_param(Precision::fp32, Optimizer::adam, 0, true, N, {4.0, 2.0, 2.0});
    EXPECT_DOUBLE_EQ(b.optimizer, 4.0 / N);
}

TEST(OptimizerStateDtypes, EstimateHoldsLessAndStepsFaster) {
    const JobSpec fp32 = job_from_text(llama8b_job(""));
    const JobSpec low = job_from_text(llama8b_job("main_params_dtype = \"none\"\nexp_avg_dtype = \"bf16\"\n"
                                                  "exp_avg_sq_dtype = \"bf16\"\n"));
    const Estimate a = estimate_job(fp32), b = estimate_job(low);
    ASSERT_FALSE(a.stages.empty());
    ASSERT_FALSE(b.stages.empty());
    const double params = a.stages[0].params_count;
    EXPECT_NEAR(a.stages[0].mem.optimizer / params, 12.0 / 8, 1e-9);
    EXPECT_NEAR(b.stages[0].mem.optimizer / params, 4.0 / 8, 1e-9);
    EXPECT_DOUBLE_EQ(a.stages[0].mem.params, b.stages[0].mem.params);
    EXPECT_DOUBLE_EQ(a.stages[0].mem.grads, b.stages[0].mem.grads);
    EXPECT_DOUBLE_EQ(a.stages[0].mem.activations, b.stages[0].mem.activations);
    // The memory-bound optimizer step moves fewer bytes: grad 4, weight read + write 2 + 2,
    // m and v read + write 2 · (2 + 2) = 16 bytes per parameter of the shard (1/8 of them)
    // instead of 30. Both also pass over the whole fp32 gradient buffer (gradbuf: zeroed, then
    // divided by dp, 4 + 8 bytes per local parameter), whatever the states' dtypes.
    EXPECT_NEAR(b.stages[0].tail.optimizer_s / a.stages[0].tail.optimizer_s, (16.0 / 8 + 12) / (30.0 / 8 + 12), 1e-9);
    bool noted = false;
    for (const std::string& n : b.notes) noted |= contains(n, "exp_avg bf16");
    EXPECT_TRUE(noted);
}

TEST(OptimizerStateDtypes, Exports) {
    const JobSpec j = job_from_text(llama8b_job("main_params_dtype = \"fp16\"\nexp_avg_dtype = \"fp8\"\n"
                                                "exp_avg_sq_dtype = \"bf16\"\n"));
    auto out = export_job(j, ExportFormat::megatron);
    ASSERT_TRUE(out) << out.error().str();
    EXPECT_TRUE(contains(out->text, "--use-precision-aware-optimizer")) << out->text;
    EXPECT_TRUE(contains(out->text, "--main-params-dtype fp16")) << out->text;
    EXPECT_TRUE(contains(out->text, "--exp-avg-dtype fp8")) << out->text;
    EXPECT_TRUE(contains(out->text, "--exp-avg-sq-dtype bf16")) << out->text;
    auto plain = export_job(job_from_text(llama8b_job("")), ExportFormat::megatron);
    ASSERT_TRUE(plain) << plain.error().str();
    EXPECT_FALSE(contains(plain->text, "precision-aware")) << plain->text;
    // No master copy (Apex's store_params = False) has no Megatron-LM flag.
    auto none = export_job(job_from_text(llama8b_job("main_params_dtype = \"none\"\n")), ExportFormat::megatron);
    ASSERT_FALSE(none);
    EXPECT_TRUE(contains(none.error().str(), "training.main_params_dtype")) << none.error().str();
    // Megatron-LM's precision-aware optimizer needs the distributed optimizer.
    auto unsharded = export_job(job_from_text(llama8b_job("exp_avg_dtype = \"bf16\"\n", "")), ExportFormat::megatron);
    ASSERT_FALSE(unsharded);
    EXPECT_TRUE(contains(unsharded.error().str(), "distributed")) << unsharded.error().str();
    // fp32 master weights stored as 16-bit remainders beside the bf16 weights: Megatron-LM's
    // precision-aware optimizer does that by default (store_param_remainders = True).
    const JobSpec rem = job_from_text(llama8b_job("main_params_dtype = \"fp32-remainders\"\n"));
    EXPECT_EQ(rem.training.main_params_dtype, StateDtype::fp32_remainders);
    EXPECT_TRUE(contains(save_job_toml(rem), "main_params_dtype = \"fp32-remainders\""));
    auto rem_out = export_job(rem, ExportFormat::megatron);
    ASSERT_TRUE(rem_out) << rem_out.error().str();
    EXPECT_TRUE(contains(rem_out->text, "--use-precision-aware-optimizer")) << rem_out->text;
    EXPECT_FALSE(contains(rem_out->text, "--main-params-dtype")) << rem_out->text;
    const Estimate er = estimate_job(rem);
    ASSERT_FALSE(er.stages.empty());
    EXPECT_NEAR(er.stages[0].mem.optimizer / er.stages[0].params_count, (2.0 + 8.0) / 8, 1e-9);
    // DeepSpeed and torchtitan keep fp32 states.
    for (ExportFormat f : {ExportFormat::deepspeed, ExportFormat::torchtitan}) {
        auto o = export_job(j, f);
        ASSERT_FALSE(o) << to_string(f);
        EXPECT_TRUE(contains(o.error().str(), "training.main_params_dtype")) << o.error().str();
    }
}

TEST(Dropout, KeyByArchAndItsMasks) {
    const std::string gpt = R"(
[model]
arch = "gpt"
layers = 4
hidden = 1024
heads = 16
vocab = 32000
seq_len = 2048
)";
    const JobSpec with = job_from_text(gpt + "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n"
                                             "[parallel]\ntp = 8\nsequence_parallel = true\n");
    const JobSpec without = job_from_text(gpt + "dropout = false\n[cluster]\nnodes = 1\ngpus_per_node = 8\n"
                                                "gpu = \"h100-sxm\"\n[parallel]\ntp = 8\nsequence_parallel = true\n");
    EXPECT_FALSE(with.model.dropout.has_value());
    EXPECT_TRUE(with.model.dropout_on());  // gpt: Megatron-LM's GPT defaults
    ASSERT_TRUE(without.model.dropout.has_value());
    EXPECT_FALSE(without.model.dropout_on());
    // Per layer the two masks (attention output, MLP output) go: 1 byte each per element of
    // the sequence-sharded hidden state.
    ActivationInputs in;
    in.micro_batch = 1;
    in.seq = 2048;
    in.tp = 8;
    in.sequence_parallel = true;
    in.model = &with.model;
    const double a = layer_activation_bytes(in);
    in.model = &without.model;
    const double b = layer_activation_bytes(in);
    EXPECT_DOUBLE_EQ(a - b, 2.0 * 2048 * 1024 / 8);
    // Whole estimates: fewer activations, nothing else.
    const Estimate ea = estimate_job(with), eb = estimate_job(without);
    EXPECT_LT(eb.stages[0].mem.activations, ea.stages[0].mem.activations);
    EXPECT_DOUBLE_EQ(eb.stages[0].mem.params, ea.stages[0].mem.params);
    // Written back only when given; llama gets none by default and can be given some.
    EXPECT_TRUE(contains(save_job_toml(without), "dropout = false"));
    EXPECT_FALSE(contains(save_job_toml(with), "dropout"));
    const JobSpec llama = load_asset("llama3-70b-h100.toml");
    EXPECT_FALSE(llama.model.dropout_on());
    EXPECT_TRUE(load_asset("llama3-70b-h100.toml", {"model.dropout=true"}).model.dropout_on());
    // Megatron-LM's export turns its 0.1 defaults off where the model has none.
    auto out = export_job(without, ExportFormat::megatron);
    ASSERT_TRUE(out) << out.error().str();
    EXPECT_TRUE(contains(out->text, "--hidden-dropout 0.0")) << out->text;
    EXPECT_TRUE(contains(out->text, "--attention-dropout 0.0")) << out->text;
    auto keep = export_job(with, ExportFormat::megatron);
    ASSERT_TRUE(keep) << keep.error().str();
    EXPECT_FALSE(contains(keep->text, "--hidden-dropout")) << keep->text;
}

// Nemotron-4 340B on 128 H100 as NVIDIA/dgxc-benchmarking v24.11.1 ran it (nemotron/launch.sh,
// configure.sh, nemotron4-340b-synth.yaml; bench/accuracy/published_runs.toml
// dgxc2411-nemotron4-340b-128gpu-*): TP8 PP8 VP12 DP2, MBS 1, GBS 32, NeMo 1.x with Apex's
// DistributedFusedAdam (optim.dtype bf16), no dropout, selective recompute, bf16 gradients.
std::string nemotron340b_job(const std::string& training_extra, const std::string& model_extra = "dropout = false\n") {
    return R"(
[model]
arch = "gpt"
layers = 96
hidden = 18432
heads = 96
kv_heads = 8
ffn_hidden = 73728
vocab = 256000
seq_len = 4096
position = "rope"
bias = false
tied_embeddings = false
)" + model_extra + R"(
[cluster]
preset = "dgx-h100"
nodes = 16
[parallel]
tp = 8
pp = 8
dp = 2
vpp = 12
sequence_parallel = true
distributed_optimizer = true
recompute = "selective"
grad_reduce_in_fp32 = false
overlap_grad_reduce = true
overlap_param_gather = true
tp_comm_overlap = true
[training]
micro_batch = 1
global_batch = 32
precision = "bf16"
)" + training_extra;
}

TEST(Nemotron340bOptimizerStates, TheDgxcLayoutFitsWithItsOptimizerStates) {
    const std::string apex_bf16 = "exp_avg_dtype = \"bf16\"\nexp_avg_sq_dtype = \"bf16\"\n";
    const Estimate bf16 = estimate_job(job_from_text(nemotron340b_job(apex_bf16 + "main_params_dtype = \"none\"\n")));
    EXPECT_TRUE(bf16.fits) << bf16.stages[bf16.worst_stage].mem.total() / kGiB;
    EXPECT_LT(bf16.stages[bf16.worst_stage].mem.total(), 80e9);
    // FP8 (configure.sh: model.fp8, +model.fp8_params): FP8 primary weights and a bf16
    // master shard in the optimizer (store_params = True).
    const Estimate fp8 = estimate_job(job_from_text(nemotron340b_job(
        apex_bf16 + "main_params_dtype = \"bf16\"\nfp8 = \"delayed\"\nfp8_param_gather = true\n")));
    EXPECT_TRUE(fp8.fits) << fp8.stages[fp8.worst_stage].mem.total() / kGiB;
    // The cause: with fp32 states (Megatron-LM's default) the same layout does not fit, and
    // the states alone make the difference on the worst stage.
    const Estimate fp32 = estimate_job(job_from_text(nemotron340b_job("")));
    EXPECT_FALSE(fp32.fits) << fp32.stages[fp32.worst_stage].mem.total() / kGiB;
    const MemoryBreakdown& w32 = fp32.stages[0].mem;
    const MemoryBreakdown& w16 = bf16.stages[0].mem;
    EXPECT_NEAR(w16.optimizer / w32.optimizer, 4.0 / 12.0, 1e-9);
    EXPECT_DOUBLE_EQ(w16.activations, w32.activations);
    // No dropout: the masks would add to every in-flight layer of stage 0.
    const Estimate masks = estimate_job(job_from_text(nemotron340b_job(apex_bf16 + "main_params_dtype = \"none\"\n", "")));
    EXPECT_GT(masks.stages[0].mem.activations, w16.activations);
}

// The published rows themselves (bench/accuracy/published_runs.toml, read as bench_accuracy
// reads them): the three Nemotron-4 340B rows on 128 H100 carry the states their configs
// give and fit the GPUs they ran on; the 2,048-GPU row of the same release as well.
TEST(Nemotron340bOptimizerStates, ThePublishedRowsFit) {
    const std::vector<::Run> runs = load_runs(PTD_SOURCE_DIR "/bench/accuracy/published_runs.toml", presets());
    int seen = 0;
    for (const ::Run& r : runs) {
        const bool dgxc = r.name.rfind("dgxc2411-nemotron4-340b-", 0) == 0;
        if (!dgxc && r.name != "nemo2407-nemotron-340b-h100-fp8") continue;
        ++seen;
        ASSERT_TRUE(r.skip.empty()) << r.name << ": " << r.skip;
        EXPECT_EQ(r.job.training.exp_avg_dtype, StateDtype::bf16) << r.name;
        EXPECT_EQ(r.job.training.exp_avg_sq_dtype, StateDtype::bf16) << r.name;
        EXPECT_FALSE(r.job.model.dropout_on()) << r.name;
        EXPECT_EQ(r.job.parallel.recompute, Recompute::selective) << r.name;
        // NeMo stores a bf16 master shard only with fp8_params (the DGXC FP8 run).
        const bool fp8_params = r.name == "dgxc2411-nemotron4-340b-128gpu-fp8";
        EXPECT_EQ(r.job.training.main_params_dtype, fp8_params ? StateDtype::bf16 : StateDtype::none) << r.name;
        EXPECT_EQ(r.job.training.fp8_param_gather, fp8_params) << r.name;
        const Estimate e = estimate_job(r.job);
        EXPECT_TRUE(e.fits) << r.name << ": " << e.stages[e.worst_stage].mem.total() / kGiB << " GiB";
    }
    EXPECT_EQ(seen, 4);
}

// recipe (issue 29 point 6): the two rows written from dgxc-benchmarking's README alone name the
// configuration it links ("the default configuration for Nemotron 340b", NeMo-Framework-
// Launcher's training/nemotron/nemotron_340b.yaml) and the NeMo 24.09 container. The recipe's
// Apex bf16 states are what lets the BF16 row fit; with the stack's fp32 states it does not.
TEST(Nemotron340bOptimizerStates, TheUserRowsFitWithTheConfigurationTheirReadmeNames) {
    for (const char* name : {"user2411-nemotron4-340b-128gpu-bf16", "user2411-nemotron4-340b-128gpu-fp8"}) {
        const ::Run& r = ptd_test::published_run(name);
        ASSERT_TRUE(r.skip.empty()) << name << ": " << r.skip;
        EXPECT_EQ(r.job.training.recipe, "nemotron/nemotron_340b") << name;
        EXPECT_EQ(r.job.training.exp_avg_dtype, StateDtype::bf16) << name;
        EXPECT_EQ(r.job.training.exp_avg_sq_dtype, StateDtype::bf16) << name;
        const bool fp8 = r.job.training.fp8 != Fp8Recipe::none;
        EXPECT_EQ(r.job.training.main_params_dtype, fp8 ? StateDtype::bf16 : StateDtype::none) << name;
        const Estimate e = estimate_job(r.job);
        EXPECT_TRUE(e.fits) << name << ": " << e.stages[e.worst_stage].mem.total() / kGiB << " GiB";
        JobSpec stack_only = r.job;
        stack_only.training.recipe.clear();
        apply_stack_defaults(stack_only);
        EXPECT_EQ(stack_only.training.exp_avg_dtype, StateDtype::fp32) << name;
        const Estimate without = estimate_job(stack_only);
        if (!fp8) {
            EXPECT_FALSE(without.fits) << name << ": " << without.stages[without.worst_stage].mem.total() / kGiB;
        }
        EXPECT_EQ(without.stages[0].mem.activations, e.stages[0].mem.activations) << name;
    }
}

}  // namespace
