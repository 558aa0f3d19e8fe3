// memory_efficient_norm.cpp — memory-efficient norms (estimate.memory_efficient_norm; Apex FusedLayerNorm /
// FusedRMSNorm memory_efficient = True, Megatron-LM --memory-efficient-layer-norm):
//   - one layer frees exactly its pre-norms' inputs (LN1, LN2, MLA's latent norms), nothing
//     where those inputs are not saved (full recompute, torchtitan op-level SAC) and, under
//     Transformer Engine FP8, nothing for a norm whose output only an FP8 linear consumes;
//   - the last stage frees the final norm's input; the step time does not change;
//   - the key reads, saves, is refused beside recompute_modules "layernorm" and with a bad
//     value (file and line), and each export writes or notes it;
//   - the Llama 3 405B rows state it (their note's Sec. 3.3.2 argument) and fit the H100s.
#include <string>

#include <gtest/gtest.h>

#include "model/estimate_internal.h"
#include "job_test_util.h"
#include "layer_test_util.h"
#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "published_runs_test_util.h"

namespace {

using namespace ptd;
using ptd_test::any_note;
using ptd_test::contains;
using ptd_test::job_from_text;

// The bare Llama-style layer of layer_test_util.h (T = 4096, h = 4096, tp = 8 with SP, bf16).
est::LayoutDerived bare_layer(bool menorm) {
    est::LayoutDerived L = ptd_test::llama_layer_tp8();
    L.norm_saves_output = menorm;
    return L;
}

constexpr double T = 4096, e = 2, h = 4096;

double saved(const est::LayoutDerived& L) { return est::layer_activation_megatron(L, L.rc); }
double freed(est::LayoutDerived L) {
    L.norm_saves_output = false;
    const double keeps_input = saved(L);
    L.norm_saves_output = true;
    return keeps_input - saved(L);
}

TEST(MemoryEfficientNorm, OneLayerFreesBothNormInputs) {
    EXPECT_DOUBLE_EQ(freed(bare_layer(true)), 2.0 * e * T * h / 8);  // the SP shard of each
    est::LayoutDerived no_sp = bare_layer(true);
    no_sp.sp = false;  // without SP the norms run on the whole sequence on every TP rank
    EXPECT_DOUBLE_EQ(freed(no_sp), 2.0 * e * T * h);
}

TEST(MemoryEfficientNorm, MlaAlsoFreesTheLatentNormInputs) {
    est::LayoutDerived L = bare_layer(true);
    L.mla = true, L.q_lora = 1536, L.kv_lora = 512, L.d_rope = 64, L.d_qk = 192, L.heads_l = 16, L.kv_l = 16;
    EXPECT_DOUBLE_EQ(freed(L), 2.0 * e * T * h / 8 + e * T * (1536.0 + 512.0) / 8);
}

TEST(MemoryEfficientNorm, NothingWhereTheInputsAreNotSaved) {
    est::LayoutDerived full = bare_layer(true);
    full.rc = Recompute::full;  // only the layer input is kept, and the norm runs again from it
    EXPECT_DOUBLE_EQ(freed(full), 0.0);
    est::LayoutDerived titan = bare_layer(true);
    titan.rc = Recompute::selective, titan.rc_style = RecomputeStyle::torchtitan_op;
    EXPECT_DOUBLE_EQ(freed(titan), 0.0);
}

TEST(MemoryEfficientNorm, UnderTeFp8OnlyAnMoeLn2Frees) {
    // TE keeps an FP8 copy of the norm's output for its FP8 linear, so the norm's 16-bit output
    // becomes a tensor of its own: keeping it instead of the input frees nothing.
    est::LayoutDerived dense = bare_layer(true);
    dense.fp8 = Fp8Recipe::delayed, dense.fp8_te = true, dense.fp8_saved_bytes = 1.0;
    EXPECT_DOUBLE_EQ(freed(dense), 0.0);
    // An MoE LN2 feeds the router, a 16-bit GEMM that keeps the output anyway.
    ModelSpec m;
    m.experts = 8, m.top_k = 2, m.activation = Activation::swiglu;
    est::LayoutDerived moe = dense;
    moe.t = 1, moe.sp = false, moe.heads_l = 32, moe.kv_l = 8, moe.f_l = 2048;
    moe.moe = true, moe.m = &m, moe.etp = 1;
    EXPECT_DOUBLE_EQ(freed(moe), e * T * h);
}

// ---- a whole job ----

std::string job_text(const std::string& arch_keys, const std::string& estimate_keys, const std::string& parallel = "") {
    return "[model]\n" + arch_keys +
           "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[parallel]\ntp = 4\npp = 2\nsequence_parallel = true\n" +
           parallel + "[training]\nmicro_batch = 1\nglobal_batch = 16\nprecision = \"bf16\"\n" + estimate_keys;
}
const std::string kLlama = "preset = \"llama3-8b\"\n";
const std::string kGpt = "arch = \"gpt\"\nlayers = 8\nhidden = 2048\nheads = 16\nvocab = 50304\nseq_len = 2048\n";

TEST(MemoryEfficientNorm, JobFreesTheNormInputsOfEveryInFlightLayerAndKeepsTheStepTime) {
    const Estimate base = estimate_job(job_from_text(job_text(kLlama, "")));
    const Estimate me = estimate_job(job_from_text(job_text(kLlama, "[estimate]\nmemory_efficient_norm = true\n")));
    ASSERT_EQ(base.stages.size(), 2u);
    const double Tj = 8192, hj = 4096, r = 1.0 / 4;  // Llama 3 8B: seq 8192, h 4096, SP over tp 4
    for (size_t i = 0; i < 2; ++i) {
        const StageEstimate &a = base.stages[i], &b = me.stages[i];
        // Per micro-batch: two norm inputs per layer; at the peak, those of every in-flight
        // micro-batch, and on the last stage the final norm's input (held for one micro-batch).
        const double per_mb = a.layers * 2.0 * e * Tj * hj * r;
        EXPECT_NEAR(a.act_per_microbatch - b.act_per_microbatch, per_mb, 1e-6 * per_mb) << "stage " << i;
        const double peak = a.in_flight * per_mb + (i == 1 ? e * Tj * hj * r : 0.0);
        EXPECT_NEAR(a.mem.activations - b.mem.activations, peak, 1e-6 * peak) << "stage " << i;
    }
    EXPECT_EQ(me.step_s, base.step_s);
    // The estimate says what it assumed.
    const auto names_it = [](const Estimate& est) {
        for (const std::string& n : est.notes)
            if (contains(n, "estimate.memory_efficient_norm")) return true;
        return false;
    };
    EXPECT_TRUE(names_it(me));
    EXPECT_FALSE(names_it(base));
}

TEST(MemoryEfficientNorm, KeyReadsSavesAndRoundTrips) {
    const JobSpec job = job_from_text(job_text(kLlama, "[estimate]\nmemory_efficient_norm = true\n"));
    EXPECT_TRUE(job.estimate.memory_efficient_norm);
    const std::string saved_text = save_job_toml(job);
    EXPECT_TRUE(contains(saved_text, "memory_efficient_norm = true")) << saved_text;
    EXPECT_TRUE(job_from_text(saved_text, "saved.toml").estimate.memory_efficient_norm);
    // The default is not written.
    EXPECT_FALSE(contains(save_job_toml(job_from_text(job_text(kLlama, ""))), "memory_efficient_norm"));
}

std::string load_error_of(const std::string& text) {
    auto job = load_job_text(text, "menorm.toml", ptd_test::presets());
    return job ? std::string() : job.error().str();
}

TEST(MemoryEfficientNorm, BadValueAndLayernormRecomputeAreRefusedWithTheirLine) {
    const std::string text = job_text(kLlama, "[estimate]\nmemory_efficient_norm = \"yes\"\n");
    const std::string bad = load_error_of(text);
    EXPECT_TRUE(contains(bad, "menorm.toml:16")) << bad;
    EXPECT_TRUE(contains(bad, "memory_efficient_norm")) << bad;
    const std::string both = load_error_of(job_text(kLlama, "[estimate]\nmemory_efficient_norm = true\n",
                                                    "recompute = \"selective\"\nrecompute_modules = [\"layernorm\"]\n"));
    EXPECT_TRUE(contains(both, "estimate.memory_efficient_norm")) << both;
    EXPECT_TRUE(contains(both, "layernorm")) << both;
    // Other modules combine with it.
    EXPECT_TRUE(load_error_of(job_text(kLlama, "[estimate]\nmemory_efficient_norm = true\n",
                                       "recompute = \"selective\"\nrecompute_modules = [\"mlp\"]\n"))
                    .empty());
}

TEST(MemoryEfficientNorm, ExportsWriteOrNameIt) {
    const JobSpec gpt = job_from_text(job_text(kGpt, "[estimate]\nmemory_efficient_norm = true\n"));
    auto mg = export_job(gpt, ExportFormat::megatron);
    ASSERT_TRUE(mg) << mg.error().str();
    EXPECT_TRUE(contains(mg->text, "--memory-efficient-layer-norm")) << mg->text;
    EXPECT_TRUE(any_note(*mg, "--transformer-impl local"));
    auto plain = export_job(job_from_text(job_text(kGpt, "")), ExportFormat::megatron);
    ASSERT_TRUE(plain);
    EXPECT_FALSE(contains(plain->text, "--memory-efficient-layer-norm"));
    // RMSNorm: Megatron-core passes the option to LayerNorm only, so no flag, a note.
    const JobSpec llama = job_from_text(job_text(kLlama, "[estimate]\nmemory_efficient_norm = true\n"));
    auto mr = export_job(llama, ExportFormat::megatron);
    ASSERT_TRUE(mr) << mr.error().str();
    EXPECT_FALSE(contains(mr->text, "--memory-efficient-layer-norm")) << mr->text;
    EXPECT_TRUE(any_note(*mr, "LayerNorm only"));
    auto tt = export_job(llama, ExportFormat::torchtitan);
    ASSERT_TRUE(tt) << tt.error().str();
    EXPECT_TRUE(any_note(*tt, "estimate.memory_efficient_norm"));
    JobSpec ds_job = job_from_text(job_text(kGpt, "[estimate]\nmemory_efficient_norm = true\n"));
    ds_job.parallel.grad_reduce_in_fp32 = false;  // without ZeRO DeepSpeed accumulates bf16 gradients in bf16
    auto ds = export_job(ds_job, ExportFormat::deepspeed);
    ASSERT_TRUE(ds) << ds.error().str();
    EXPECT_TRUE(any_note(*ds, "estimate.memory_efficient_norm"));
}

// ---- the published rows ----

const ::Run& row(const std::string& name) { return ptd_test::published_run(name); }

TEST(MemoryEfficientNormRows, Llama3On8192GpusFitsOnlyWithTheNormThatFreesTheStageInput) {
    const auto [with, without] =
        ptd_test::estimate_with_and_without(row("llama3-t4-405b-8k-8192gpu"), &EstimateSpec::memory_efficient_norm);
    EXPECT_TRUE(with.fits);
    EXPECT_FALSE(without.fits);  // the Megatron-style count overflows the 80 GB H100
    EXPECT_EQ(with.step_s, without.step_s);
    EXPECT_TRUE(row("llama3-t4-405b-8k-16384gpu").job.estimate.memory_efficient_norm);
}

TEST(MemoryEfficientNormRows, LoaderReadsTheKeyAndRefusesABadValue) {
    ptd_test::expect_run_bool_key("menorm", "memory_efficient_norm",
                                  [](const ::Run& r) { return r.job.estimate.memory_efficient_norm; });
}

}  // namespace
