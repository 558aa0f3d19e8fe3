// recompute_modules.cpp — Megatron-core's per-module selective recompute (parallel.recompute_modules,
// --recompute-modules; megatron/core/transformer/transformer_config.py):
//   - each module drops exactly the tensors it saved (memory.cpp) and repeats exactly its
//     forward work in the backward (compute.cpp), by hand from the layer's widths;
//   - hardware FLOPs add the module's GEMMs, model FLOPs do not;
//   - ["core_attn"] is today's selective, byte for byte (estimate and saved TOML);
//   - bad words, recompute != "selective", torchtitan-op style and modules the model lacks are
//     refused with the file and line; exports: Megatron-LM writes --recompute-modules,
//     torchtitan and DeepSpeed refuse.
#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "model/estimate_internal.h"
#include "job_test_util.h"
#include "layer_test_util.h"
#include "ptd/model/estimate.h"
#include "ptd/export/export.h"
#include "ptd/plan/planner.h"
#include "estimate_view.h"
#include "published_runs_test_util.h"

namespace {

using namespace ptd;
using ptd_test::contains;
using ptd_test::job_from_text;

// The bare Llama-style layer of layer_test_util.h under selective recompute of `modules`.
est::LayoutDerived bare_layer(uint32_t modules) {
    est::LayoutDerived L = ptd_test::llama_layer_tp8();
    L.rc = Recompute::selective, L.rc_modules = modules;
    return L;
}

// The same layer with DeepSeek-V3's MLA widths (q_lora 1536, kv_lora 512, d 128 + rope 64, dv 128).
est::LayoutDerived mla_layer(uint32_t modules) {
    est::LayoutDerived L = bare_layer(modules);
    L.mla = true, L.q_lora = 1536, L.kv_lora = 512, L.d_rope = 64, L.d_qk = 192, L.d_v = 128;
    L.heads_l = 16, L.kv_l = 16;
    return L;
}

// An MoE layer at tp = 1 (so the router and the experts see all T tokens): 8 experts of 2048,
// top-2, a shared expert of 2048.
est::LayoutDerived moe_layer(const ModelSpec& m, uint32_t modules) {
    est::LayoutDerived L = bare_layer(modules);
    L.t = 1, L.sp = false, L.heads_l = 32, L.kv_l = 8, L.f_l = 2048, L.fs_l = 2048;
    L.moe = true, L.m = &m, L.ep = 1, L.etp = 1;
    return L;
}

ModelSpec moe_model() {
    ModelSpec m;
    m.experts = 8, m.top_k = 2, m.activation = Activation::swiglu;
    return m;
}

constexpr double T = 4096, e = 2, h = 4096;

double saved(const est::LayoutDerived& L) { return est::layer_activation_megatron(L, L.rc); }
double redone(const est::LayoutDerived& L) { return est::layer_forward_time(L).module_recompute; }

// ---- one layer: what each module no longer keeps, and what it runs again ----

TEST(RecomputeModules, LayernormDropsBothNormOutputsAndRerunsThem) {
    const est::LayoutDerived base = bare_layer(kRecomputeCoreAttn), ln = bare_layer(kRecomputeCoreAttn | kRecomputeLayernorm);
    EXPECT_DOUBLE_EQ(saved(base) - saved(ln), 2.0 * e * T * h / 8);  // LN1, LN2 outputs on the SP shard
    EXPECT_DOUBLE_EQ(redone(base), 0.0);
    EXPECT_DOUBLE_EQ(redone(ln), 4.0 * e * T * h / 8 / base.hbm);  // two norms, read + write each
}

TEST(RecomputeModules, MlpDropsFc1AndActivationOutputsAndRerunsTheMlp) {
    const est::LayoutDerived base = bare_layer(kRecomputeCoreAttn), mlp = bare_layer(kRecomputeCoreAttn | kRecomputeMlp);
    const double f_l = 14336.0 / 8;
    EXPECT_DOUBLE_EQ(saved(base) - saved(mlp), 3.0 * e * T * f_l);  // gate + up, SiLU·up
    const double want = est::linear_gemm_time(mlp, T, 2.0 * f_l, h) + est::linear_gemm_time(mlp, T, h, f_l) +
                        3.0 * e * T * f_l / mlp.hbm;
    EXPECT_DOUBLE_EQ(redone(mlp), want);
}

TEST(RecomputeModules, MlaUpProjDropsQkvAndRerunsTheUpProjections) {
    const est::LayoutDerived base = mla_layer(kRecomputeCoreAttn), up = mla_layer(kRecomputeCoreAttn | kRecomputeMlaUpProj);
    EXPECT_DOUBLE_EQ(saved(base) - saved(up), e * T * 16 * (2.0 * 192 + 128));  // Q, K at d + dr, V at dv
    const double ups = est::linear_gemm_time(up, T, 16 * 192.0, 1536) + est::linear_gemm_time(up, T, 16 * 256.0, 512);
    EXPECT_DOUBLE_EQ(redone(up), ups + 2.0 * e * T * 16 * (2.0 * 192 + 128) / up.hbm);
}

TEST(RecomputeModules, MoeModulesDropWhatTheExpertsSaved) {
    const ModelSpec m = moe_model();
    const double k = 2, f = 2048, fs = 2048;
    const est::LayoutDerived base = moe_layer(m, kRecomputeCoreAttn);
    const est::LayoutDerived act = moe_layer(m, kRecomputeCoreAttn | kRecomputeMoeAct);
    const est::LayoutDerived shared = moe_layer(m, kRecomputeCoreAttn | kRecomputeSharedExperts);
    const est::LayoutDerived moe = moe_layer(m, kRecomputeCoreAttn | kRecomputeMoe);
    EXPECT_DOUBLE_EQ(saved(base) - saved(act), e * T * k * f);  // the experts' activation output
    EXPECT_DOUBLE_EQ(saved(base) - saved(shared), 3.0 * e * T * fs);
    // The whole layer: router probabilities (fp32), permuted tokens, experts' FC1 + activation, shared.
    EXPECT_DOUBLE_EQ(saved(base) - saved(moe), 4.0 * T * 8 + e * T * k * h + 3.0 * e * T * k * f + 3.0 * e * T * fs);
    // "moe" covers moe_act and shared_experts: naming them too changes nothing.
    EXPECT_DOUBLE_EQ(saved(moe), saved(moe_layer(m, kRecomputeCoreAttn | kRecomputeMoe | kRecomputeMoeAct | kRecomputeSharedExperts)));

    EXPECT_DOUBLE_EQ(redone(act), 3.0 * e * T * k * f / act.hbm);
    const est::LayerTime lt = est::layer_forward_time(shared);
    EXPECT_DOUBLE_EQ(redone(shared), lt.gemm_shared + 3.0 * e * T * fs / shared.hbm);
    const double experts = 8 * (est::linear_gemm_time(moe, T * k / 8, 2.0 * f, h) + est::linear_gemm_time(moe, T * k / 8, h, f));
    const double router = est::gemm_time(moe.peak, T, 8, h, moe.gemm_eff_max);
    EXPECT_DOUBLE_EQ(redone(moe), experts + router + lt.moe_dispatch + 3.0 * e * T * k * f / moe.hbm + redone(shared));
}

TEST(RecomputeModules, WithoutCoreAttnTheAttentionCoreIsKeptAndNotRerun) {
    // ["layernorm"] alone: the flash kernel's log-sum-exp stays saved, and the attention core's
    // forward is not part of the backward's recompute.
    const est::LayoutDerived none = bare_layer(0), ln_only = bare_layer(kRecomputeLayernorm);
    est::LayoutDerived no_rc = none;
    no_rc.rc = Recompute::none;
    EXPECT_DOUBLE_EQ(saved(no_rc) - saved(ln_only), 2.0 * e * T * h / 8);
    ChunkTime with{}, without{};
    const est::LayoutDerived both = bare_layer(kRecomputeCoreAttn | kRecomputeLayernorm);
    est::block_compute(both, est::layer_forward_time(both), 1, false, false, with);
    est::block_compute(ln_only, est::layer_forward_time(ln_only), 1, false, false, without);
    EXPECT_DOUBLE_EQ(with.bwd.recompute - without.bwd.recompute, est::layer_forward_time(ln_only).attn);
    EXPECT_DOUBLE_EQ(without.bwd.recompute, redone(ln_only));
}

// ---- whole estimates ----

// A small DeepSeek-V3-shaped model: MLA, 8 experts top-2 with a shared expert, one dense
// first layer; tp 2 ep 4 on one DGX H100 node.
std::string mini_v3(const std::string& recompute) {
    return "[model]\narch = \"llama\"\nlayers = 4\nhidden = 2048\nheads = 16\nkv_heads = 16\nffn_hidden = 8192\n"
           "vocab = 32000\nseq_len = 4096\nexperts = 8\ntop_k = 2\nmoe_ffn_hidden = 1024\nshared_expert_ffn_hidden = 1024\n"
           "first_dense_layers = 1\nhead_dim = 128\nq_lora_rank = 768\nkv_lora_rank = 256\nqk_rope_head_dim = 64\n"
           "v_head_dim = 128\n[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[parallel]\ntp = 2\nep = 4\n"
           "sequence_parallel = true\n" + recompute +
           "[training]\nmicro_batch = 1\nglobal_batch = 64\nprecision = \"bf16\"\n";
}

Estimate estimate_of(const std::string& text) { return estimate_job(job_from_text(text, "recmod.toml")); }

TEST(RecomputeModules, CoreAttnIsTodaysSelectiveByteForByte) {
    const std::string plain = mini_v3("recompute = \"selective\"\n");
    const std::string listed = mini_v3("recompute = \"selective\"\nrecompute_modules = [\"core_attn\"]\n");
    const Estimate a = estimate_of(plain), b = estimate_of(listed);
    EXPECT_EQ(a.step_s, b.step_s);
    EXPECT_EQ(a.flops.hardware_per_token, b.flops.hardware_per_token);
    ASSERT_EQ(a.stages.size(), b.stages.size());
    for (size_t i = 0; i < a.stages.size(); ++i) {
        EXPECT_EQ(a.stages[i].act_per_microbatch, b.stages[i].act_per_microbatch);
        EXPECT_EQ(a.stages[i].recompute_s, b.stages[i].recompute_s);
        EXPECT_EQ(a.stages[i].bwd_s, b.stages[i].bwd_s);
    }
    // The default is not written back; a list other than it is, and reads back the same.
    EXPECT_EQ(save_job_toml(job_from_text(plain, "recmod.toml")), save_job_toml(job_from_text(listed, "recmod.toml")));
    const JobSpec two = job_from_text(mini_v3("recompute = \"selective\"\nrecompute_modules = [\"mlp\", \"mla_up_proj\"]\n"), "recmod.toml");
    const std::string saved_text = save_job_toml(two);
    EXPECT_TRUE(contains(saved_text, "recompute_modules = [\"mla_up_proj\", \"mlp\"]")) << saved_text;
    EXPECT_EQ(job_from_text(saved_text, "saved.toml").parallel.recompute_modules, kRecomputeMlaUpProj | kRecomputeMlp);
}

TEST(RecomputeModules, EachModuleLowersMemoryAndRaisesTheBackward) {
    const Estimate base = estimate_of(mini_v3("recompute = \"selective\"\n"));
    for (const char* word : {"layernorm", "mla_up_proj", "mlp", "moe", "moe_act", "shared_experts"}) {
        const Estimate more =
            estimate_of(mini_v3("recompute = \"selective\"\nrecompute_modules = [\"core_attn\", \"" + std::string(word) + "\"]\n"));
        EXPECT_LT(more.stages[0].act_per_microbatch, base.stages[0].act_per_microbatch) << word;
        EXPECT_GT(more.stages[0].recompute_s, base.stages[0].recompute_s) << word;
        EXPECT_GT(more.step_s, base.step_s) << word;
        EXPECT_EQ(more.flops.model_per_token, base.flops.model_per_token) << word;  // model FLOPs never count it
        EXPECT_GE(more.flops.hardware_per_token, base.flops.hardware_per_token) << word;
    }
}

TEST(RecomputeModules, HardwareFlopsAddTheModulesGemms) {
    // Per token, forward only, 2 FLOPs per multiply-add. mla_up_proj: q_up 768 × 16·(128 + 64)
    // and kv_up 256 × 16·(128 + 128) in all 4 layers; mlp: the one dense layer's SwiGLU MLP
    // 3 · 2048 · 8192; moe: the 3 MoE layers' router 2048 · 8, 2 experts' 3 · 2048 · 1024 and
    // the shared expert's 3 · 2048 · 1024; shared_experts: only the latter.
    const auto flops = [&](const std::string& list) {
        return estimate_of(mini_v3("recompute = \"selective\"\nrecompute_modules = " + list + "\n")).flops.hardware_per_token;
    };
    const double core = flops("[\"core_attn\"]");
    EXPECT_DOUBLE_EQ(flops("[\"core_attn\", \"mla_up_proj\"]") - core, 2.0 * 4 * (768.0 * 16 * 192 + 256.0 * 16 * 256));
    EXPECT_DOUBLE_EQ(flops("[\"core_attn\", \"mlp\"]") - core, 2.0 * 1 * 3 * 2048.0 * 8192);
    EXPECT_DOUBLE_EQ(flops("[\"core_attn\", \"moe\"]") - core, 2.0 * 3 * (2048.0 * 8 + 2 * 3 * 2048.0 * 1024 + 3 * 2048.0 * 1024));
    EXPECT_DOUBLE_EQ(flops("[\"core_attn\", \"shared_experts\"]") - core, 2.0 * 3 * 3 * 2048.0 * 1024);
    EXPECT_DOUBLE_EQ(flops("[\"core_attn\", \"layernorm\", \"moe_act\"]"), core);  // no GEMMs
    // Without core_attn the attention core's recompute leaves the count.
    const FlopsEstimate none = estimate_of(mini_v3("recompute = \"none\"\n")).flops;
    EXPECT_DOUBLE_EQ(flops("[\"layernorm\"]"), none.hardware_per_token);
}

// ---- refusals ----

std::string load_error_of(const std::string& text) { return ptd_test::refusal_of_text(text, "recmod.toml"); }

TEST(RecomputeModules, BadWordsAndCombinationsAreRefusedWithTheirLine) {
    // The [parallel] table's recompute_modules line is line 29 of mini_v3's text.
    const std::string bad_word = load_error_of(mini_v3("recompute = \"selective\"\nrecompute_modules = [\"core_attn\", \"attn\"]\n"));
    EXPECT_TRUE(contains(bad_word, "recmod.toml:29")) << bad_word;
    EXPECT_TRUE(contains(bad_word, "parallel.recompute_modules[1]")) << bad_word;
    EXPECT_TRUE(contains(bad_word, "\"attn\"")) << bad_word;
    EXPECT_TRUE(contains(bad_word, "allowed: core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts")) << bad_word;

    const std::string not_selective = load_error_of(mini_v3("recompute = \"full\"\nrecompute_modules = [\"mlp\"]\n"));
    EXPECT_TRUE(contains(not_selective, "recmod.toml:29")) << not_selective;
    EXPECT_TRUE(contains(not_selective, "only with recompute = \"selective\"")) << not_selective;
    EXPECT_FALSE(load_error_of(mini_v3("recompute_modules = [\"mlp\"]\n")).empty());  // recompute defaults to none

    const std::string titan =
        load_error_of(mini_v3("recompute = \"selective\"\nrecompute_style = \"torchtitan-op\"\nrecompute_modules = [\"mlp\"]\n"));
    EXPECT_TRUE(contains(titan, "recompute_style = \"torchtitan-op\"")) << titan;

    EXPECT_TRUE(contains(load_error_of(mini_v3("recompute = \"selective\"\nrecompute_modules = []\n")), "non-empty"));
    EXPECT_TRUE(contains(load_error_of(mini_v3("recompute = \"selective\"\nrecompute_modules = [\"mlp\"]\n") +
                                       "[estimate]\nactivation_profile = \"ptd-engine\"\n"),
                         "[\"mlp\"] with estimate.activation_profile = \"ptd-engine\""));

    // Modules the model does not have (Megatron-core refuses mla_up_proj without MLA).
    const std::string dense =
        "[model]\npreset = \"llama3-8b\"\n[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[parallel]\n"
        "recompute = \"selective\"\nrecompute_modules = [\"mla_up_proj\"]\n[training]\nmicro_batch = 1\nglobal_batch = 64\n";
    const std::string no_mla = load_error_of(dense);
    EXPECT_TRUE(contains(no_mla, "recmod.toml:9")) << no_mla;
    EXPECT_TRUE(contains(no_mla, "kv_lora_rank")) << no_mla;
    std::string moe_on_dense = dense;
    moe_on_dense.replace(moe_on_dense.find("[\"mla_up_proj\"]"), 15, "[\"moe_act\"]");
    EXPECT_TRUE(contains(load_error_of(moe_on_dense), "experts > 1"));
}

// A planned layout with another recompute than the job's selective drops the module list, so
// the planned job still validates (and exports).
TEST(RecomputeModules, PlanEntryWithOtherRecomputeDropsTheList) {
    const JobSpec job = job_from_text(mini_v3("recompute = \"selective\"\nrecompute_modules = [\"mla_up_proj\"]\n"), "recmod.toml");
    PlanEntry entry;
    entry.choice.tp = 2, entry.choice.pp = 1, entry.choice.dp = 4, entry.choice.cp = 1, entry.choice.ep = 4, entry.choice.vpp = 1;
    entry.choice.micro_batch = 1, entry.choice.sequence_parallel = true;
    for (Recompute rc : {Recompute::none, Recompute::full, Recompute::selective}) {
        entry.choice.recompute = rc;
        const JobSpec planned = apply_plan_entry(job, entry);
        EXPECT_TRUE(validate_job(planned).empty()) << to_string(rc) << ": " << format_diagnostics(validate_job(planned));
        EXPECT_EQ(planned.parallel.recompute_modules, rc == Recompute::selective ? (uint32_t)kRecomputeMlaUpProj : (uint32_t)kRecomputeCoreAttn);
    }
}

// The estimate's header names the modules where they differ from the default.
TEST(RecomputeModules, EstimateHeaderNamesTheModules) {
    const JobSpec listed = job_from_text(mini_v3("recompute = \"selective\"\nrecompute_modules = [\"mlp\", \"layernorm\"]\n"), "recmod.toml");
    const std::string text = render_estimate_text(listed, estimate_job(listed), Term{});
    EXPECT_TRUE(contains(text, "recompute selective (layernorm, mlp) ·")) << text;
    const JobSpec plain = job_from_text(mini_v3("recompute = \"selective\"\n"), "recmod.toml");
    EXPECT_TRUE(contains(render_estimate_text(plain, estimate_job(plain), Term{}), "recompute selective ·"));
}

// ---- exports ----

TEST(RecomputeModules, MegatronWritesTheModulesOthersRefuse) {
    const JobSpec listed = job_from_text(mini_v3("recompute = \"selective\"\nrecompute_modules = [\"mla_up_proj\", \"mlp\"]\n"), "recmod.toml");
    auto mg = export_job(listed, ExportFormat::megatron);
    ASSERT_TRUE(mg) << mg.error().str();
    EXPECT_TRUE(contains(mg->text, "--recompute-granularity selective")) << mg->text;
    EXPECT_TRUE(contains(mg->text, "--recompute-modules mla_up_proj mlp")) << mg->text;
    // The default list is Megatron's default: not written.
    auto plain = export_job(job_from_text(mini_v3("recompute = \"selective\"\n"), "recmod.toml"), ExportFormat::megatron);
    ASSERT_TRUE(plain);
    EXPECT_FALSE(contains(plain->text, "--recompute-modules"));
    for (ExportFormat f : {ExportFormat::deepspeed, ExportFormat::torchtitan, ExportFormat::torchtitan_toml}) {
        auto out = export_job(listed, f);
        ASSERT_FALSE(out);
        EXPECT_TRUE(contains(out.error().str(), "parallel.recompute_modules")) << out.error().str();
        EXPECT_TRUE(contains(out.error().str(), "no per-module selective recompute")) << out.error().str();
    }
}

// ---- the published-runs loader and the DeepSeek-V3 rows ----

const char* kDenseRun =
    "[[run]]\nname = \"x-1\"\nframework = \"nemo\"\ngpu = \"h100-sxm\"\ngpus = 8\narch = \"llama\"\nlayers = 4\n"
    "hidden = 256\nheads = 4\ndp = 8\nglobal_batch = 16\niteration_s = 1.0\n";

TEST(RecomputeModulesLoader, RecomputeModulesReachTheJob) {
    const auto runs = ptd_test::load_run_text("recmod_ok.toml", std::string(kDenseRun) + "recompute = \"selective\"\nrecompute_modules = [\"mlp\", \"layernorm\"]\n");
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_TRUE(runs[0].skip.empty()) << runs[0].skip;
    EXPECT_EQ(runs[0].job.parallel.recompute_modules, kRecomputeMlp | kRecomputeLayernorm);
    // Without recompute = "selective" the job's validation message skips the row.
    const auto none = ptd_test::load_run_text("recmod_none.toml", std::string(kDenseRun) + "recompute_modules = [\"mlp\"]\n");
    ASSERT_EQ(none.size(), 1u);
    EXPECT_NE(none[0].skip.find("parallel.recompute_modules"), std::string::npos) << none[0].skip;
}

TEST(RecomputeModulesLoader, UnknownWordNamesTheFileAndLine) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(ptd_test::load_run_text("recmod_bad.toml", std::string(kDenseRun) + "recompute = \"selective\"\nrecompute_modules = [\"attention\"]\n"),
                ::testing::ExitedWithCode(2), "recmod_bad.toml:14: run key \"recompute_modules\" has \"attention\"; allowed: core_attn, ");
    std::remove((::testing::TempDir() + "recmod_bad.toml").c_str());  // the dying child could not
}

TEST(RecomputeModulesLoader, DeepSeekV3RowsRecomputeWhatTheirRecipesDo) {
    int mla_up = 0, core = 0;
    for (const ::Run& r : ptd_test::published_runs()) {
        // The NeMo / Megatron-Bridge recipes' rows; Megatron-LM's own guide rows (mcoreds25)
        // are pinned in published_runs/deepseek_gb200_guide.cpp.
        if (r.name.find("deepseek-v3") == std::string::npos || r.source_tag == "mcoreds25") continue;
        const ParallelSpec& p = r.job.parallel;
        EXPECT_TRUE(r.skip.empty()) << r.name << ": " << r.skip;
        EXPECT_EQ(p.recompute, Recompute::selective) << r.name;
        if (p.recompute_modules & kRecomputeMlaUpProj) {
            ++mla_up;
            // Only the B200 MXFP8 PP8 VP2 recipe adds the dense layers' MLPs.
            EXPECT_EQ(p.recompute_modules, r.name == "mbridge2604-deepseek-v3-b200-mxfp8" ? kRecomputeMlaUpProj | kRecomputeMlp
                                                                                          : (uint32_t)kRecomputeMlaUpProj)
                << r.name;
        } else {
            ++core;
            EXPECT_EQ(p.recompute_modules, (uint32_t)kRecomputeCoreAttn) << r.name;
        }
    }
    EXPECT_EQ(mla_up, 7);
    EXPECT_EQ(core, 3);
}

}  // namespace
