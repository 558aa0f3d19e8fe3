// test_stack_defaults.cpp — the keys a job leaves to its stack (training.framework at
// training.framework_version) take that stack's defaults for the job's layout, a written key
// wins, `ptd estimate` can list what was applied, and saving keeps them unwritten
// (issue 29 point 1; stack_defaults.h).
#include <gtest/gtest.h>

#include "job_test_util.h"
#include "process_test_util.h"
#include "text_test_util.h"
#include "ptd/model/estimate.h"
#include "ptd/plan/planner.h"
#include "ptd/spec/stack_defaults.h"

namespace {

using ptd::JobSpec;
using namespace ptd_test;

// Llama 3 70B on 64 H100, TP 4 with sequence parallelism, PP 4 × vpp 5, CP 2 (the layout of
// NVIDIA's DGX Cloud 70B benchmark), on `framework` with `training_extra` lines.
JobSpec llama70b(const std::string& framework, const std::string& training_extra = "",
                 const std::string& parallel_extra = "") {
    return job_from_text(job_text({.preset = "llama3-70b",
                                   .nodes = 8,
                                   .parallel = "tp = 4\npp = 4\nvpp = 5\ncp = 2\nsequence_parallel = true\n" + parallel_extra,
                                   .training = "framework = \"" + framework + "\"\nmicro_batch = 1\nglobal_batch = 128\n" +
                                               training_extra}));
}

bool applied(const JobSpec& job, const std::string& key, const std::string& value) {
    for (const ptd::StackDefault& d : job.origin.stack_defaults)
        if (d.key == key) return d.value == value && !d.source.empty();
    return false;
}

TEST(StackDefaults, NemoTakesItsRecipesDefaultsAndSaysSo) {
    const JobSpec job = llama70b("nemo");
    EXPECT_TRUE(job.parallel.distributed_optimizer);
    EXPECT_TRUE(job.parallel.overlap_grad_reduce);
    EXPECT_TRUE(job.parallel.overlap_param_gather);
    EXPECT_TRUE(job.parallel.tp_comm_overlap);
    EXPECT_FALSE(job.parallel.grad_reduce_in_fp32);
    EXPECT_TRUE(applied(job, "parallel.tp_comm_overlap", "true"));
    EXPECT_TRUE(applied(job, "parallel.grad_reduce_in_fp32", "false"));
    EXPECT_EQ(ptd::stack_label(job.training), "NeMo 2 / Megatron-Bridge performance recipes, today");
    // FP8 recipes gather FP8 parameters.
    EXPECT_TRUE(llama70b("nemo", "fp8 = \"delayed\"\n").training.fp8_param_gather);
}

// fp8pg: a NeMo job dated before NeMo 2's recipes (Sep 2024) ran NeMo 1.x's yamls, whose
// fp8_params is False unless the yaml sets it (MLPerf's do); the header says which NeMo.
TEST(StackDefaults, NemoBeforeItsRecipesGathersSixteenBitParameters) {
    const JobSpec old = llama70b("nemo", "fp8 = \"delayed\"\nframework_version = \"2023-09\"\n");
    EXPECT_FALSE(old.training.fp8_param_gather);
    EXPECT_TRUE(applied(old, "training.fp8_param_gather", "false"));
    EXPECT_EQ(ptd::stack_label(old.training), "NeMo 1.x (Megatron-core, the launcher's yamls) of 2023-09");
    const JobSpec recipes = llama70b("nemo", "fp8 = \"delayed\"\nframework_version = \"2024-09\"\n");
    EXPECT_TRUE(recipes.training.fp8_param_gather);
    EXPECT_EQ(ptd::stack_label(recipes.training), "NeMo 2 / Megatron-Bridge performance recipes of 2024-09");
}

TEST(StackDefaults, MegatronTakesItsCommandLineDefaults) {
    const JobSpec job = llama70b("megatron");
    EXPECT_FALSE(job.parallel.distributed_optimizer);
    EXPECT_FALSE(job.parallel.overlap_grad_reduce);
    EXPECT_FALSE(job.parallel.tp_comm_overlap);
    EXPECT_TRUE(job.parallel.grad_reduce_in_fp32);
    EXPECT_TRUE(job.parallel.async_tensor_model_parallel_allreduce);
    EXPECT_TRUE(applied(job, "parallel.overlap_grad_reduce", "false"));
}

TEST(StackDefaults, AWrittenKeyWinsAndTheKeysAfterItFollowIt) {
    // overlap_param_gather needs overlap_grad_reduce (Megatron-LM asserts it): written off, the
    // param gather's default follows, so the job is valid as written.
    const JobSpec job = llama70b("nemo", "", "overlap_grad_reduce = false\ntp_comm_overlap = false\n");
    EXPECT_FALSE(job.parallel.overlap_grad_reduce);
    EXPECT_FALSE(job.parallel.overlap_param_gather);
    EXPECT_FALSE(job.parallel.tp_comm_overlap);
    EXPECT_TRUE(job.parallel.distributed_optimizer);
    EXPECT_FALSE(applied(job, "parallel.overlap_grad_reduce", "true"));  // not listed: the job wrote it
    // Without sequence parallelism there is no TP overlap to default to.
    const JobSpec no_sp = job_from_text(job_text({.preset = "llama3-70b",
                                                  .nodes = 8,
                                                  .parallel = "tp = 4\npp = 4\nsequence_parallel = false\n",
                                                  .training = "framework = \"nemo\"\nglobal_batch = 128\n"}));
    EXPECT_FALSE(no_sp.parallel.tp_comm_overlap);
}

// spdef: Megatron-Bridge's performance scripts turn sequence parallelism on with TP
// (sequence_parallel = tensor_model_parallel_size > 1) and torchtitan's TP always shards the
// sequence (SequenceParallel on the norms); Megatron-LM's command line leaves it off. A job that
// names the stack and a TP size gets its stack's, with TP overlap and async TP after it; a
// written value wins; a sequence TP cannot split keeps it off; saving leaves it unwritten.
TEST(StackDefaults, SequenceParallelFollowsTheStacksTensorParallelism) {
    auto job = [](const std::string& framework, const std::string& parallel, const std::string& model_extra = "",
                  const std::string& training_extra = "") {
        std::string text = job_text({.preset = "llama3-8b",
                                     .parallel = parallel,
                                     .training = "framework = \"" + framework + "\"\nmicro_batch = 1\nglobal_batch = 8\n" +
                                                 training_extra});
        const std::string preset_line = "preset = \"llama3-8b\"\n";
        text.insert(text.find(preset_line) + preset_line.size(), model_extra);
        return job_from_text(text);
    };
    const JobSpec nemo = job("nemo", "tp = 4\n");
    EXPECT_TRUE(nemo.parallel.sequence_parallel);
    EXPECT_TRUE(applied(nemo, "parallel.sequence_parallel", "true"));
    EXPECT_TRUE(nemo.parallel.tp_comm_overlap);  // follows it
    EXPECT_FALSE(job("nemo", "tp = 1\n").parallel.sequence_parallel);
    EXPECT_FALSE(applied(job("nemo", "tp = 1\n"), "parallel.sequence_parallel", "false"));  // not listed: no TP
    const JobSpec megatron = job("megatron", "tp = 4\n");
    EXPECT_FALSE(megatron.parallel.sequence_parallel);
    EXPECT_TRUE(applied(megatron, "parallel.sequence_parallel", "false"));
    // Async TP needs it (and torch.compile): valid as written.
    const JobSpec titan = job("torchtitan", "tp = 8\nasync_tp = true\n", "", "torch_compile = true\n");
    EXPECT_TRUE(titan.parallel.sequence_parallel);
    EXPECT_TRUE(titan.parallel.async_tp);
    const JobSpec written = job("nemo", "tp = 4\nsequence_parallel = false\n");
    EXPECT_FALSE(written.parallel.sequence_parallel);
    EXPECT_FALSE(written.parallel.tp_comm_overlap);
    // 8,196 tokens do not split 8 ways: the default stays off and says why.
    const JobSpec uneven = job("nemo", "tp = 8\n", "seq_len = 8196\n");
    EXPECT_FALSE(uneven.parallel.sequence_parallel);
    bool said = false;
    for (const ptd::StackDefault& d : uneven.origin.stack_defaults)
        said = said || (d.key == "parallel.sequence_parallel" && d.source.find("not divisible by tp 8") != std::string::npos);
    EXPECT_TRUE(said);
    // Saved: the stack's value stays unwritten and comes back; the written one is kept.
    const std::string saved = ptd::save_job_toml(nemo);
    EXPECT_EQ(saved.find("sequence_parallel"), std::string::npos) << saved;
    EXPECT_TRUE(reloaded(saved).parallel.sequence_parallel);
    EXPECT_NE(ptd::save_job_toml(written).find("sequence_parallel = false"), std::string::npos);
}

TEST(StackDefaults, TheVersionSetsTheMegatronOfThatDate) {
    // Narayanan et al. 2021 ran Megatron-LM of spring 2021: scatter/gather pipeline sends, no
    // asynchronous TP all-reduce, no flash attention, no pipeline-hop overlap.
    const JobSpec job = llama70b("megatron", "framework_version = \"2021-04\"\n");
    EXPECT_EQ(job.training.framework_version, 202104);
    EXPECT_TRUE(job.parallel.scatter_gather_tensors_in_pipeline);
    EXPECT_FALSE(job.parallel.async_tensor_model_parallel_allreduce);
    EXPECT_FALSE(job.training.flash_attention);
    EXPECT_FALSE(job.parallel.overlap_p2p_comm);
    EXPECT_TRUE(applied(job, "training.flash_attention", "false"));
    EXPECT_EQ(ptd::stack_label(job.training), "Megatron-LM command line of 2021-04");
    // A year alone is its middle: 2021-06, still before the Sep 2021 asynchronous all-reduce.
    EXPECT_EQ(llama70b("megatron", "framework_version = \"2021\"\n").training.framework_version, 202106);
    // Today's Megatron-Core: none of the 2021 behaviour.
    const JobSpec today = llama70b("megatron");
    EXPECT_FALSE(today.parallel.scatter_gather_tensors_in_pipeline);
    EXPECT_TRUE(today.training.flash_attention);
}

// The forms a version is written in: a month, a year, a commit date, an NGC container tag
// (NeMo 24.11 is the container of November 2024). Release numbers are not dates.
TEST(StackDefaults, FrameworkVersionTakesTheFormsUsersWrite) {
    EXPECT_EQ(ptd::parse_framework_version("2024-11"), 202411);
    EXPECT_EQ(ptd::parse_framework_version("2024"), 202406);
    EXPECT_EQ(ptd::parse_framework_version("2024-11-15"), 202411);
    EXPECT_EQ(ptd::parse_framework_version("24.11"), 202411);
    EXPECT_EQ(ptd::parse_framework_version("25.09"), 202509);
    for (const char* refused : {"0.14", "2.4", "v0.8.0", "24.13", "2024-11-32", "2024.11", "nemo-24.11"})
        EXPECT_FALSE(ptd::parse_framework_version(refused).has_value()) << refused;
    // In a job, the container tag reads as its date (refusals: ABadVersionIsRefusedWithWhatIsAllowed).
    EXPECT_EQ(llama70b("nemo", "framework_version = \"24.11\"\n").training.framework_version, 202411);
}

TEST(StackDefaults, PipelineHopOverlapFollowsMegatronsDates) {
    // Megatron-LM added --overlap-p2p-communication on 2023-05-31 as an opt-in flag and made it
    // the default on 2023-10-12; MegaScale's baseline, commit 285068c8 (2023-01-11), exposed
    // every pipeline hop (Table 3 adds "PP overlap" as MegaScale's own).
    for (const char* version : {"2023-01", "2023-06", "2023-09"}) {
        const JobSpec job = llama70b("megatron", std::string("framework_version = \"") + version + "\"\n");
        EXPECT_FALSE(job.parallel.overlap_p2p_comm) << version;
        EXPECT_TRUE(applied(job, "parallel.overlap_p2p_comm", "false")) << version;
    }
    EXPECT_TRUE(llama70b("megatron", "framework_version = \"2023-10\"\n").parallel.overlap_p2p_comm);
    EXPECT_TRUE(llama70b("megatron").parallel.overlap_p2p_comm);
    // The exposed hops are in the step: the same job at 2023-01 and 2023-10 differs by them.
    const ptd::Estimate before = ptd::estimate_job(llama70b("megatron", "framework_version = \"2023-01\"\n"));
    const ptd::Estimate after = ptd::estimate_job(llama70b("megatron", "framework_version = \"2023-10\"\n"));
    EXPECT_GT(before.time.pp_comm, after.time.pp_comm);
    EXPECT_GT(before.step_s, after.step_s);
}

TEST(StackDefaults, ABadVersionIsRefusedWithWhatIsAllowed) {
    for (const char* bad : {"21-04", "2021-13", "2021/04", "1999", "latest", "0.8.0", "24.13"}) {
        const auto job = ptd::load_job_text(job_text({.preset = "llama3-8b",
                                                      .parallel = "tp = 1\n",
                                                      .training = std::string("framework_version = \"") + bad + "\"\n"}),
                                            "job.toml", presets());
        expect_refused(job, "training.framework_version", "job.toml");
        EXPECT_NE(refusal(job).find("YYYY-MM"), std::string::npos) << bad;
        EXPECT_NE(refusal(job).find("NGC container tag \"YY.MM\""), std::string::npos) << bad;  // the other forms too
        EXPECT_NE(refusal(job).find("a release number"), std::string::npos) << bad;
    }
}

// fusedce2: Megatron-LM fuses its loss only with --cross-entropy-loss-fusion; NeMo 2 and NeMo 1's
// performance yamls fuse it from June 2024 (when Megatron-core got the fused loss), Megatron-Bridge's
// performance configs run Transformer Engine's from 2025-09. The default is listed with its source.
TEST(StackDefaults, EachStackTakesItsLossByDate) {
    EXPECT_EQ(llama70b("megatron").estimate.cross_entropy, ptd::CrossEntropyImpl::megatron);
    EXPECT_TRUE(applied(llama70b("megatron"), "estimate.cross_entropy", "\"megatron\""));
    EXPECT_EQ(llama70b("nemo", "framework_version = \"2024-03\"\n").estimate.cross_entropy, ptd::CrossEntropyImpl::megatron);
    EXPECT_EQ(llama70b("nemo", "framework_version = \"2024-11\"\n").estimate.cross_entropy,
              ptd::CrossEntropyImpl::megatron_fused);
    EXPECT_EQ(llama70b("nemo", "framework_version = \"2025-09\"\n").estimate.cross_entropy, ptd::CrossEntropyImpl::te);
    const JobSpec bridge = llama70b("nemo");
    EXPECT_EQ(bridge.estimate.cross_entropy, ptd::CrossEntropyImpl::te);
    EXPECT_TRUE(applied(bridge, "estimate.cross_entropy", "\"te\""));
    // A written loss stays, and round-trips.
    const JobSpec written = llama70b("nemo", "[estimate]\ncross_entropy = \"megatron-fused\"\n");
    EXPECT_EQ(written.estimate.cross_entropy, ptd::CrossEntropyImpl::megatron_fused);
    EXPECT_EQ(reloaded(ptd::save_job_toml(written)).estimate.cross_entropy, ptd::CrossEntropyImpl::megatron_fused);
    // The stack's own loss is not written back.
    EXPECT_EQ(ptd::save_job_toml(bridge).find("cross_entropy"), std::string::npos);
}

TEST(StackDefaults, TorchtitanTakesPyTorchsLossAndOpLevelCheckpointing) {
    const std::string parallel = "tp = 1\npp = 1\ndp = 8\nzero = 3\nrecompute = \"selective\"\n";
    auto titan = [&](const std::string& training) {
        return job_from_text(job_text({.preset = "llama3-8b",
                                       .parallel = parallel,
                                       .training = "framework = \"torchtitan\"\nglobal_batch = 8\n" + training}));
    };
    EXPECT_EQ(titan("").estimate.cross_entropy, ptd::CrossEntropyImpl::pytorch);
    EXPECT_EQ(titan("torch_compile = true\n").estimate.cross_entropy, ptd::CrossEntropyImpl::pytorch_compiled);
    // torchtitan compiled its loss only from 2025 on.
    EXPECT_EQ(titan("torch_compile = true\nframework_version = \"2024-12\"\n").estimate.cross_entropy,
              ptd::CrossEntropyImpl::pytorch);
    EXPECT_EQ(titan("").parallel.recompute_style, ptd::RecomputeStyle::torchtitan_op);
    EXPECT_TRUE(titan("").parallel.overlap_grad_reduce);
}

// llm-foundry (Composer's PyTorch FSDP) takes its own defaults: MPT's attention kernel by
// date (attn_impl "triton" until v0.7.0, Mar 2024; "flash" after) and its fused loss; the
// generic "pytorch-fsdp" stack runs FlashAttention-1 before Jul 2023, FlashAttention-2 after,
// and F.cross_entropy. The kernel decides the time: an llm-foundry job of Oct 2023 is the
// "pytorch-fsdp" job that names the Triton kernel and the fused loss.
TEST(StackDefaults, LlmFoundryTakesItsKernelByDateAndItsFusedLoss) {
    auto job = [](const std::string& framework, const std::string& training) {
        return job_from_text(job_text({.preset = "llama3-8b",
                                       .parallel = "tp = 1\npp = 1\ndp = 8\nzero = 3\nrecompute = \"full\"\n",
                                       .training = "framework = \"" + framework + "\"\nglobal_batch = 8\n" + training}));
    };
    const JobSpec foundry = job("llm-foundry", "framework_version = \"2023-10\"\n");
    EXPECT_EQ(foundry.training.framework, ptd::Framework::llm_foundry);
    EXPECT_EQ(ptd::stack_flash_kernel(foundry.training), ptd::FlashKernel::triton);
    EXPECT_EQ(ptd::stack_flash_kernel(job("llm-foundry", "framework_version = \"2024-06\"\n").training),
              ptd::FlashKernel::flash_attn_2);
    EXPECT_EQ(ptd::stack_flash_kernel(job("llm-foundry", "").training), ptd::FlashKernel::flash_attn_2) << "today";
    EXPECT_EQ(ptd::stack_flash_kernel(job("pytorch-fsdp", "framework_version = \"2023-10\"\n").training),
              ptd::FlashKernel::flash_attn_2);
    EXPECT_EQ(ptd::stack_flash_kernel(job("pytorch-fsdp", "framework_version = \"2023-03\"\n").training),
              ptd::FlashKernel::flash_attn_1);
    EXPECT_EQ(ptd::stack_flash_kernel(job("llm-foundry", "framework_version = \"2023-10\"\nflash_attention_kernel = \"flash-attn-2\"\n")
                                          .training),
              ptd::FlashKernel::flash_attn_2)
        << "a written kernel wins";
    EXPECT_TRUE(applied(foundry, "training.flash_attention_kernel", "\"triton\"")) << "listed with the defaults";
    for (const ptd::StackDefault& d : job("llm-foundry", "").origin.stack_defaults)
        EXPECT_NE(d.key, "training.flash_attention_kernel") << "FlashAttention-2 today: nothing older to say";
    EXPECT_EQ(foundry.estimate.cross_entropy, ptd::CrossEntropyImpl::fused);
    EXPECT_TRUE(applied(foundry, "estimate.cross_entropy", "\"fused\""));
    EXPECT_EQ(job("pytorch-fsdp", "").estimate.cross_entropy, ptd::CrossEntropyImpl::pytorch);
    EXPECT_EQ(ptd::stack_label(foundry.training), "llm-foundry (Composer, PyTorch FSDP) of 2023-10");
    const JobSpec generic = job("pytorch-fsdp",
                                "framework_version = \"2023-10\"\nflash_attention_kernel = \"triton\"\n[estimate]\ncross_entropy = \"fused\"\n");
    EXPECT_DOUBLE_EQ(ptd::estimate_job(foundry).step_s, ptd::estimate_job(generic).step_s);
    EXPECT_GT(ptd::estimate_job(foundry).step_s, ptd::estimate_job(job("llm-foundry", "")).step_s)
        << "the Triton kernel is slower than FlashAttention-2";
    // Saved, the stack and its date come back; the kernel stays the stack's.
    const std::string saved = ptd::save_job_toml(foundry);
    EXPECT_NE(saved.find("framework = \"llm-foundry\""), std::string::npos) << saved;
    EXPECT_EQ(saved.find("flash_attention_kernel"), std::string::npos) << saved;
    EXPECT_EQ(saved.find("cross_entropy"), std::string::npos) << saved;
    EXPECT_EQ(reloaded(saved).training.framework, ptd::Framework::llm_foundry);
}

// Qwen3-30B-A3B on one node with EP 8 on `framework`, with `training_extra` / `parallel_extra`.
ptd::Result<JobSpec> qwen3_moe(const std::string& framework, const std::string& training_extra = "",
                               const std::string& parallel_extra = "", const std::string& preset = "qwen3-30b-a3b") {
    return ptd::load_job_text(job_text({.preset = preset,
                                        .parallel = "tp = 1\nep = " + std::string(preset == "qwen3-30b-a3b" ? "8" : "1") + "\n" +
                                                    parallel_extra,
                                        .training = "framework = \"" + framework + "\"\nglobal_batch = 64\n" + training_extra}),
                              "moe.toml", presets());
}

// A Megatron-core MoE flag that is a stack key (`key` in [parallel], `field` of ParallelSpec,
// Megatron-LM's `flag`): NeMo / Megatron-Bridge's recipes set it today but not at
// `version_without` (no such code yet), Megatron-LM's flag is off unless passed, a dense model
// does not list it; written true on a megatron job it is the job's own — kept on saving where it
// differs from the stack's, read back the same, exported as `flag` — and it is refused on a dense
// model and outside Megatron-core.
void expect_megatron_core_moe_stack_flag(bool ptd::ParallelSpec::*field, const std::string& key, const std::string& flag,
                                         const std::string& version_without) {
    const JobSpec nemo = loaded(qwen3_moe("nemo"), "moe.toml");
    EXPECT_TRUE(nemo.parallel.*field);
    EXPECT_TRUE(applied(nemo, "parallel." + key, "true"));
    const JobSpec old = loaded(qwen3_moe("nemo", "framework_version = \"" + version_without + "\"\n"), "moe.toml");
    EXPECT_FALSE(old.parallel.*field);
    EXPECT_TRUE(applied(old, "parallel." + key, "false"));
    EXPECT_FALSE(loaded(qwen3_moe("megatron"), "moe.toml").parallel.*field);
    const JobSpec dense = llama70b("nemo");
    EXPECT_FALSE(dense.parallel.*field);
    EXPECT_FALSE(applied(dense, "parallel." + key, "false"));  // not listed: nothing it acts on
    const JobSpec own = loaded(qwen3_moe("megatron", "", key + " = true\n"), "moe.toml");
    EXPECT_TRUE(own.parallel.*field);
    const std::string saved = ptd::save_job_toml(own);
    EXPECT_NE(saved.find(key + " = true"), std::string::npos) << saved;
    EXPECT_EQ(ptd::save_job_toml(nemo).find(key), std::string::npos);
    EXPECT_EQ(reloaded(saved).parallel, own.parallel);
    expect_mentions(export_text(own, ptd::ExportFormat::megatron), {flag});
    expect_no_mention(export_text(loaded(qwen3_moe("megatron"), "moe.toml"), ptd::ExportFormat::megatron), {flag});
    expect_refused(qwen3_moe("megatron", "", key + " = true\n", "llama3-8b"),
                   "parallel." + key + ": true for a dense model (experts = ", "moe.toml");
    expect_refused(qwen3_moe("torchtitan", "", key + " = true\n"),
                   "parallel." + key + ": true with framework \"torchtitan\"; allowed: only with framework \"megatron\" or \"nemo\"",
                   "moe.toml");
}

TEST(StackDefaults, MoePermuteFusionFollowsTheStackAndItsDate) {
    // Megatron-Bridge's MoE model providers set moe_permute_fusion = True; NeMo before 2025 had
    // no fused permutation.
    expect_megatron_core_moe_stack_flag(&ptd::ParallelSpec::moe_permute_fusion, "moe_permute_fusion",
                                        "--moe-permute-fusion", "2024-11");
}

TEST(StackDefaults, MoeRouterFusionFollowsTheStackAndItsDate) {
    // moerouter: Megatron-Bridge's performance configs set moe_router_fusion = True from their
    // first release (25.09); Megatron-core had no fused router before 0.14 (Aug 2025), so NeMo's
    // 25.04 recipes ran it unfused.
    expect_megatron_core_moe_stack_flag(&ptd::ParallelSpec::moe_router_fusion, "moe_router_fusion",
                                        "--moe-router-fusion", "2025-04");
    EXPECT_TRUE(loaded(qwen3_moe("nemo", "framework_version = \"2025-09\"\n"), "moe.toml").parallel.moe_router_fusion);
}

TEST(StackDefaults, SavingKeepsStackDefaultsUnwrittenAndWrittenKeysWritten) {
    const JobSpec job = llama70b("nemo", "framework_version = \"2024-11\"\n", "overlap_grad_reduce = false\n");
    const std::string saved = ptd::save_job_toml(job);
    EXPECT_EQ(saved.find("tp_comm_overlap"), std::string::npos) << saved;
    EXPECT_EQ(saved.find("distributed_optimizer"), std::string::npos) << saved;
    EXPECT_NE(saved.find("overlap_grad_reduce = false"), std::string::npos) << saved;
    EXPECT_NE(saved.find("framework_version = \"2024-11\""), std::string::npos) << saved;
    const JobSpec again = reloaded(saved);
    EXPECT_EQ(again.parallel, job.parallel);
    EXPECT_EQ(again.training.framework_version, 202411);
    EXPECT_EQ(again.origin.stack_defaults, job.origin.stack_defaults);
}

// recipe (issue 29 point 6): NeMo-Framework-Launcher's nemotron/nemotron_340b.yaml ran Apex's
// DistributedFusedAdam with dtype bf16 until Dec 2024, then Megatron-core's optimizer in fp32.
TEST(StackDefaults, ARecipeSetsTheOptimizerStatesItsConfigurationStatesAtItsDate) {
    const std::string recipe = "recipe = \"nemotron/nemotron_340b\"\n";
    const JobSpec job = llama70b("nemo", "framework_version = \"2024-09\"\n" + recipe);
    EXPECT_EQ(job.training.main_params_dtype, ptd::StateDtype::none);  // store_params = False
    EXPECT_EQ(job.training.exp_avg_dtype, ptd::StateDtype::bf16);
    EXPECT_EQ(job.training.exp_avg_sq_dtype, ptd::StateDtype::bf16);
    EXPECT_TRUE(applied(job, "training.exp_avg_dtype", "\"bf16\""));
    EXPECT_TRUE(applied(job, "training.main_params_dtype", "\"none\""));
    // FP8 with the stack's FP8 parameter gather: NeMo's fp8_params stores a bf16 master.
    const JobSpec fp8 = llama70b("nemo", "framework_version = \"2024-09\"\nfp8 = \"delayed\"\n" + recipe);
    ASSERT_TRUE(fp8.training.fp8_param_gather);
    EXPECT_EQ(fp8.training.main_params_dtype, ptd::StateDtype::bf16);
    // From the launcher's switch to Megatron-core's optimizer, and today: fp32, nothing listed.
    for (const std::string& version : {std::string("framework_version = \"2024-12\"\n"), std::string()}) {
        const JobSpec later = llama70b("nemo", version + recipe);
        EXPECT_EQ(later.training.main_params_dtype, ptd::StateDtype::fp32) << version;
        EXPECT_EQ(later.training.exp_avg_dtype, ptd::StateDtype::fp32) << version;
        EXPECT_FALSE(applied(later, "training.exp_avg_dtype", "\"fp32\"")) << version;
    }
    // A dtype the job writes is its own; the others still follow the recipe.
    const JobSpec own = llama70b("nemo", "framework_version = \"2024-09\"\nexp_avg_sq_dtype = \"fp32\"\n" + recipe);
    EXPECT_EQ(own.training.exp_avg_sq_dtype, ptd::StateDtype::fp32);
    EXPECT_EQ(own.training.exp_avg_dtype, ptd::StateDtype::bf16);
    // Without the recipe the stack's fp32 states.
    EXPECT_EQ(llama70b("nemo", "framework_version = \"2024-09\"\n").training.exp_avg_dtype, ptd::StateDtype::fp32);
}

TEST(StackDefaults, ARecipeIsSavedAndTheStatesItSetsStayUnwritten) {
    const JobSpec job = llama70b("nemo", "framework_version = \"2024-09\"\nrecipe = \"nemotron/nemotron_340b\"\n");
    const std::string saved = ptd::save_job_toml(job);
    EXPECT_NE(saved.find("recipe = \"nemotron/nemotron_340b\""), std::string::npos) << saved;
    EXPECT_EQ(saved.find("exp_avg_dtype"), std::string::npos) << saved;
    EXPECT_EQ(saved.find("main_params_dtype"), std::string::npos) << saved;
    const JobSpec again = reloaded(saved);
    EXPECT_EQ(again.training, job.training);
    EXPECT_EQ(again.origin.stack_defaults, job.origin.stack_defaults);
    // A written dtype that differs from the recipe's is kept.
    const JobSpec own = llama70b("nemo", "framework_version = \"2024-09\"\nrecipe = \"nemotron/nemotron_340b\"\n"
                                         "exp_avg_dtype = \"fp32\"\n");
    EXPECT_NE(ptd::save_job_toml(own).find("exp_avg_dtype = \"fp32\""), std::string::npos);
}

TEST(StackDefaults, AnUnknownRecipeOrAnotherStacksIsRefusedWithItsLine) {
    for (const auto& [framework, recipe] : {std::pair{"nemo", "nemotron4_340b"}, std::pair{"megatron", "nemotron/nemotron_340b"}}) {
        const auto job = ptd::load_job_text(
            job_text({.preset = "llama3-8b",
                      .parallel = "tp = 1\n",
                      .training = std::string("framework = \"") + framework + "\"\nrecipe = \"" + recipe + "\"\n"}),
            "job.toml", presets());
        expect_refused(job, "training.recipe", "job.toml");
        EXPECT_NE(refusal(job).find("allowed: \"nemotron/nemotron_340b\""), std::string::npos) << refusal(job);
        EXPECT_NE(refusal(job).find(std::string("\"") + recipe + "\""), std::string::npos) << refusal(job);
    }
    JobSpec edited = llama70b("megatron");
    edited.training.recipe = "nemotron/nemotron_340b";
    const auto problems = ptd::validate_job(edited);
    ASSERT_FALSE(problems.empty());
    EXPECT_EQ(problems[0].key, "training.recipe");
}

// mbrecipe: a job that names a Megatron-Bridge performance recipe, on the recipe's own layout
// (the table's row for `name`), with `training_extra` / `parallel_extra` lines.
ptd::Result<JobSpec> perf_recipe_job(const std::string& name, const std::string& training_extra = "",
                                     const std::string& parallel_extra = "", bool name_it = true) {
    const ptd::PerfRecipe* r = ptd::find_perf_recipe(name);
    EXPECT_NE(r, nullptr) << name;
    if (!r) return ptd::load_job_text("", "recipe.toml", presets());
    const std::string fp8 = r->fp8 == ptd::Fp8Recipe::none ? "" : "fp8 = \"" + std::string(ptd::to_string(r->fp8)) + "\"\n";
    auto n = [](int v) { return std::to_string(v); };
    std::string text =
        job_text({.preset = r->model,
                  .nodes = r->gpus / 8,
                  .gpu = r->gpu,
                  .parallel = "tp = " + n(r->tp) + "\npp = " + n(r->pp) + "\nvpp = " + n(std::max(1, r->vpp)) + "\ncp = " +
                              n(r->cp) + "\nep = " + n(r->ep) + "\n" + (r->etp > 0 ? "expert_tp = " + n(r->etp) + "\n" : "") +
                              (r->tp > 1 ? "sequence_parallel = true\n" : "") + parallel_extra,
                  .training = "framework = \"nemo\"\n" + (name_it ? "recipe = \"" + name + "\"\n" : std::string()) +
                              "micro_batch = " + n(r->mbs) +
                              "\nglobal_batch = " + n(r->gbs) + "\n" + fp8 + training_extra});
    text.insert(text.find("[cluster]"), "seq_len = " + n(r->seq) + "\n");  // the recipe's, in [model]
    auto job = ptd::load_job_text(text, "recipe.toml", presets());
    // DeepSeek-V3's 61 layers over a pp·vpp that neither the recipes' layout map nor the recipe's
    // own layout string fits (the GB200 partial-graph dev recipe's string has 16 chunks for its
    // pp 4 × vpp 2): split as evenly as they go, as a user would write it.
    if (!job && job.error().str().find("parallel.pp: layers (61) is not divisible") != std::string::npos) {
        std::string split;
        const int chunks = r->pp * std::max(1, r->vpp);
        for (int l : ptd::balanced_layers_per_stage(61, chunks)) split += (split.empty() ? "" : ", ") + n(l);
        text.insert(text.find("[training]"), "layers_per_stage = [" + split + "]\n");
        job = ptd::load_job_text(text, "recipe.toml", presets());
    }
    return job;
}

// Qwen3-30B-A3B in FP8 (current scaling) on 16 H100: perf_recipes/qwen/h100/qwen3_moe.py
// qwen3_30b_a3b_pretrain_16gpu_h100_fp8cs_config sets the flex dispatcher with the HybridEP
// backend, no all-to-all overlap, and Transformer Engine CUDA graphs of attn, moe_router and
// moe_preprocess.
const char* const kQwen30bH100Fp8 = "qwen3_30b_a3b_pretrain_16gpu_h100_fp8cs";

TEST(StackDefaults, APerformanceRecipeSetsItsMoeKeysAndSaysWhence) {
    const JobSpec job = loaded(perf_recipe_job(kQwen30bH100Fp8), "recipe.toml");
    EXPECT_EQ(job.parallel.moe_dispatcher, ptd::MoeDispatcher::hybridep);
    EXPECT_FALSE(job.parallel.moe_a2a_overlap);
    EXPECT_EQ(job.parallel.cuda_graph_impl, ptd::CudaGraphImpl::transformer_engine);
    EXPECT_EQ(job.parallel.cuda_graph_scope, ptd::kGraphAttn | ptd::kGraphMoeRouter | ptd::kGraphMoePreprocess);
    EXPECT_TRUE(applied(job, "parallel.moe_dispatcher", "\"hybridep\""));
    EXPECT_TRUE(applied(job, "parallel.cuda_graph_scope", "[\"attn\", \"moe_router\", \"moe_preprocess\"]"));
    for (const ptd::StackDefault& d : job.origin.stack_defaults)
        if (d.key == "parallel.moe_dispatcher") {
            EXPECT_NE(d.source.find(std::string(kQwen30bH100Fp8) + " (perf_recipes/qwen/h100/qwen3_moe.py:"), std::string::npos)
                << d.source;
        }
    EXPECT_NE(ptd::stack_label(job.training).find(kQwen30bH100Fp8), std::string::npos) << ptd::stack_label(job.training);
    // On the recipe's own layout nothing differs, so the estimate has no note about it.
    EXPECT_TRUE(ptd::perf_recipe_differences(job).empty());
    // Without the recipe: the plain defaults, none listed.
    const JobSpec plain = loaded(qwen3_moe("nemo"), "moe.toml");
    EXPECT_EQ(plain.parallel.moe_dispatcher, ptd::MoeDispatcher::alltoall);
    EXPECT_EQ(plain.parallel.cuda_graph_impl, ptd::CudaGraphImpl::none);
    EXPECT_FALSE(applied(plain, "parallel.moe_dispatcher", "\"alltoall\""));
}

TEST(StackDefaults, APerformanceRecipeGivesTheStepOfTheKeysItStates) {
    // Naming the recipe and writing its keys by hand are the same job to the time model.
    const JobSpec named = loaded(perf_recipe_job(kQwen30bH100Fp8), "recipe.toml");
    const JobSpec written = loaded(perf_recipe_job(kQwen30bH100Fp8, "",
                                                   "moe_dispatcher = \"hybridep\"\ncuda_graph_impl = \"transformer_engine\"\n"
                                                   "cuda_graph_scope = [\"attn\", \"moe_router\", \"moe_preprocess\"]\n"),
                                   "recipe.toml");
    const JobSpec plain = loaded(perf_recipe_job(kQwen30bH100Fp8, "", "moe_dispatcher = \"alltoall\"\ncuda_graph_impl = \"none\"\n"),
                                 "recipe.toml");
    EXPECT_EQ(ptd::estimate_job(named).step_s, ptd::estimate_job(written).step_s);
    EXPECT_NE(ptd::estimate_job(named).step_s, ptd::estimate_job(plain).step_s);
}

TEST(StackDefaults, AKeyWrittenBesideAPerformanceRecipeIsTheJobsOwnAndSavedSo) {
    const JobSpec own = loaded(perf_recipe_job(kQwen30bH100Fp8, "", "moe_dispatcher = \"alltoall\"\n"), "recipe.toml");
    EXPECT_EQ(own.parallel.moe_dispatcher, ptd::MoeDispatcher::alltoall);
    EXPECT_EQ(own.parallel.cuda_graph_impl, ptd::CudaGraphImpl::transformer_engine);  // still the recipe's
    EXPECT_FALSE(applied(own, "parallel.moe_dispatcher", "\"hybridep\""));
    const std::string saved = ptd::save_job_toml(own);
    EXPECT_NE(saved.find("moe_dispatcher = \"alltoall\""), std::string::npos) << saved;
    EXPECT_EQ(saved.find("cuda_graph_impl"), std::string::npos) << saved;  // the recipe's: left to it
    const JobSpec again = reloaded(saved);
    EXPECT_EQ(again.parallel, own.parallel);
    EXPECT_EQ(again.origin.stack_defaults, own.origin.stack_defaults);
    // The recipe's own values written out by hand are saved as the recipe's (unwritten).
    const JobSpec same = loaded(perf_recipe_job(kQwen30bH100Fp8, "", "moe_dispatcher = \"hybridep\"\n"), "recipe.toml");
    EXPECT_EQ(ptd::save_job_toml(same).find("moe_dispatcher"), std::string::npos);
}

TEST(StackDefaults, AJobUnlikeItsPerformanceRecipeIsToldWhereItDiffers) {
    const ptd::PerfRecipe* r = ptd::find_perf_recipe(kQwen30bH100Fp8);
    ASSERT_NE(r, nullptr);
    const JobSpec job = loaded(perf_recipe_job(kQwen30bH100Fp8, "", ""), "recipe.toml");
    JobSpec other = job;
    other.training.global_batch = 2 * r->gbs;
    const std::vector<std::string> diff = ptd::perf_recipe_differences(other);
    ASSERT_EQ(diff.size(), 1u);
    EXPECT_EQ(diff[0], "global_batch " + std::to_string(2 * r->gbs) + " (the recipe: " + std::to_string(r->gbs) + ")");
    // An earlier release of the stack may have run another recipe under that name.
    JobSpec older = job;
    older.training.framework_version = 202511;
    ASSERT_EQ(ptd::perf_recipe_differences(older).size(), 1u);
    EXPECT_EQ(ptd::perf_recipe_differences(older)[0], "framework_version 2025-11 (the recipe: as Megatron-Bridge has it in 2026-08)");
    const ptd::Estimate est = ptd::estimate_job(other);
    bool noted = false;
    for (const std::string& n : est.notes)
        noted |= n.find("training.recipe \"" + std::string(kQwen30bH100Fp8) + "\" ran another job; this one differs in global_batch") == 0;
    EXPECT_TRUE(noted);
}

TEST(StackDefaults, AnMoeJobWithoutARecipeIsToldWhichOneRunsItsModel) {
    // Qwen3-30B-A3B in FP8 on 16 H100 (the preset job of qwen3_moe, ep 8 on 8 GPUs here, so the
    // recipe on the nearest GPU count) on NeMo: the note names the H100 FP8 recipe.
    const JobSpec job = loaded(qwen3_moe("nemo", "fp8 = \"current\"\n"), "moe.toml");
    const ptd::PerfRecipe* r = ptd::suggested_perf_recipe(job);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(std::string(r->name), kQwen30bH100Fp8);
    bool noted = false;
    for (const std::string& n : ptd::estimate_job(job).notes)
        noted |= n.find(std::string("write training.recipe = \"") + kQwen30bH100Fp8 + "\"") != std::string::npos;
    EXPECT_TRUE(noted);
    // Not for another precision, another stack, a dense model or a job that names a recipe.
    EXPECT_EQ(ptd::suggested_perf_recipe(loaded(qwen3_moe("megatron", "fp8 = \"current\"\n"), "moe.toml")), nullptr);
    const ptd::PerfRecipe* delayed = ptd::suggested_perf_recipe(loaded(qwen3_moe("nemo", "fp8 = \"delayed\"\n"), "moe.toml"));
    ASSERT_NE(delayed, nullptr);
    EXPECT_EQ(delayed->fp8, ptd::Fp8Recipe::delayed);
    EXPECT_EQ(ptd::suggested_perf_recipe(llama70b("nemo")), nullptr);
    EXPECT_EQ(ptd::suggested_perf_recipe(loaded(perf_recipe_job(kQwen30bH100Fp8), "recipe.toml")), nullptr);
}

TEST(StackDefaults, AJobThatIsAPerformanceRecipesRunTakesItsSettingsUnnamed) {
    // A user who writes a published Megatron-Bridge run from its table (model, GPUs, precision,
    // layout, batch) without the recipe's name runs as the recipe did.
    const JobSpec job = loaded(perf_recipe_job(kQwen30bH100Fp8, "", "", false), "recipe.toml");
    ASSERT_NE(ptd::applied_perf_recipe(job), nullptr);
    EXPECT_EQ(std::string(ptd::applied_perf_recipe(job)->name), kQwen30bH100Fp8);
    EXPECT_EQ(job.parallel.moe_dispatcher, ptd::MoeDispatcher::hybridep);
    EXPECT_EQ(job.parallel.cuda_graph_impl, ptd::CudaGraphImpl::transformer_engine);
    EXPECT_TRUE(applied(job, "parallel.moe_dispatcher", "\"hybridep\""));
    EXPECT_NE(ptd::stack_label(job).find("whose model, GPUs, precision, layout and batch this job has"), std::string::npos)
        << ptd::stack_label(job);
    EXPECT_EQ(ptd::suggested_perf_recipe(job), nullptr);
    // The model written as numbers (no preset) is the same model when its shape is the preset's.
    JobSpec by_shape = job;
    by_shape.origin.model_preset.clear();
    EXPECT_EQ(ptd::applied_perf_recipe(by_shape), ptd::applied_perf_recipe(job));
    by_shape.model.layers -= 1;
    EXPECT_EQ(ptd::applied_perf_recipe(by_shape), nullptr);
    const JobSpec named = loaded(perf_recipe_job(kQwen30bH100Fp8), "recipe.toml");
    EXPECT_EQ(ptd::estimate_job(job).step_s, ptd::estimate_job(named).step_s);
    // Saved, it stays unnamed and unwritten, and reloads the same.
    const std::string saved = ptd::save_job_toml(job);
    EXPECT_EQ(saved.find("moe_dispatcher"), std::string::npos) << saved;
    EXPECT_EQ(reloaded(saved).parallel, job.parallel);
    // Another global batch, or an earlier release, is another job: the plain defaults, and the
    // note naming the recipe.
    const JobSpec other = loaded(perf_recipe_job(kQwen30bH100Fp8, "", "", false), "recipe.toml");
    JobSpec edited = other;
    edited.training.global_batch *= 2;
    ptd::derive_job_defaults(edited);
    EXPECT_EQ(ptd::applied_perf_recipe(edited), nullptr);
    EXPECT_EQ(edited.parallel.moe_dispatcher, ptd::MoeDispatcher::alltoall);
    EXPECT_NE(ptd::suggested_perf_recipe(edited), nullptr);
    const JobSpec older = loaded(perf_recipe_job(kQwen30bH100Fp8, "framework_version = \"2025-11\"\n", "", false), "recipe.toml");
    EXPECT_EQ(ptd::applied_perf_recipe(older), nullptr);
    EXPECT_EQ(older.parallel.moe_dispatcher, ptd::MoeDispatcher::alltoall);
}

TEST(StackDefaults, AnUnknownPerformanceRecipeIsRefusedNamingThoseOfItsModel) {
    const auto job = ptd::load_job_text(
        job_text({.preset = "qwen3-30b-a3b",
                  .parallel = "tp = 1\nep = 8\n",
                  .training = "framework = \"nemo\"\nrecipe = \"qwen3_30b_a3b_pretrain_12gpu_h100_fp8cs\"\n"}),
        "job.toml", presets());
    expect_refused(job, "training.recipe", "job.toml");
    EXPECT_NE(refusal(job).find("performance recipes of that model"), std::string::npos) << refusal(job);
    EXPECT_NE(refusal(job).find(std::string("\"") + kQwen30bH100Fp8 + "\""), std::string::npos) << refusal(job);
    EXPECT_EQ(refusal(job).find("deepseek_v3"), std::string::npos) << refusal(job);
    // Another stack's job cannot name it.
    const auto megatron = ptd::load_job_text(
        job_text({.preset = "qwen3-30b-a3b",
                  .parallel = "tp = 1\nep = 8\n",
                  .training = std::string("framework = \"megatron\"\nrecipe = \"") + kQwen30bH100Fp8 + "\"\n"}),
        "job.toml", presets());
    expect_refused(megatron, "training.recipe", "job.toml");
    EXPECT_NE(refusal(megatron).find("it is a configuration of framework \"nemo\""), std::string::npos) << refusal(megatron);
}

// mbrecipe, ttsplit: a split the job's stack gave it (`want`) is listed under stack:, saved
// unwritten and derived again on loading; edited to one chunk per stage the job splits anew
// (`at_vpp1`) and still validates.
void expect_stack_split(const JobSpec& job, const std::vector<int>& want, const std::vector<int>& at_vpp1) {
    EXPECT_EQ(job.parallel.layers_per_stage, want);
    std::string listed;
    for (int l : want) listed += (listed.empty() ? "[" : ", ") + std::to_string(l);
    EXPECT_TRUE(applied(job, "parallel.layers_per_stage", listed + "]"));
    const std::string saved = ptd::save_job_toml(job);
    EXPECT_EQ(saved.find("layers_per_stage"), std::string::npos) << saved;
    EXPECT_EQ(reloaded(saved).parallel, job.parallel);
    JobSpec edited = job;
    edited.parallel.vpp = 1;
    ptd::derive_job_defaults(edited);
    EXPECT_EQ(edited.parallel.layers_per_stage, at_vpp1);
    EXPECT_TRUE(ptd::validate_job(edited).empty()) << ptd::format_diagnostics(ptd::validate_job(edited));
}

TEST(StackDefaults, ADeepSeekRecipeSplitsTheLayersAsItsLayoutDoes) {
    // deepseek_v3_pretrain_256gpu_gb200_bf16: PP 4 × VP 4, the embedding with the first chunk and
    // 4 decoder layers in each chunk, 1 with MTP and the loss in the last (61 = 15 · 4 + 1).
    const JobSpec job = loaded(perf_recipe_job("deepseek_v3_pretrain_256gpu_gb200_bf16"), "recipe.toml");
    std::vector<int> want(15, 4);
    want.push_back(1);
    // Edited to PP 4 without interleaving (another pair of the layout map): 16 / 16 / 16 / 13.
    expect_stack_split(job, want, {16, 16, 16, 13});
    // A split the job writes is its own.
    const JobSpec own = loaded(perf_recipe_job("deepseek_v3_pretrain_256gpu_gb200_bf16", "",
                                               "layers_per_stage = [3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 2]\n"),
                               "recipe.toml");
    EXPECT_EQ(own.parallel.layers_per_stage.front(), 3);
    EXPECT_NE(ptd::save_job_toml(own).find("layers_per_stage = [3,"), std::string::npos);
}

TEST(StackDefaults, AnH100DeepSeekRecipeSplitsTheLayersAsItsLayoutStringDoes) {
    // deepseek_v3_pretrain_1024gpu_h100_bf16: pp 8 × vpp 4 with "Et|(tt|)*30mL", the embedding
    // and one layer, 30 chunks of two, the MTP layer and the loss in a chunk of their own.
    const JobSpec job = loaded(perf_recipe_job("deepseek_v3_pretrain_1024gpu_h100_bf16"), "recipe.toml");
    std::vector<int> want{1};
    want.insert(want.end(), 30, 2);
    want.push_back(0);
    EXPECT_EQ(job.parallel.layers_per_stage, want);
    bool named = false;
    for (const ptd::StackDefault& d : job.origin.stack_defaults)
        if (d.key == "parallel.layers_per_stage") named = d.source.find("pipeline_model_parallel_layout \"Et|(tt|)*30mL\"") != std::string::npos;
    EXPECT_TRUE(named);
    EXPECT_EQ(ptd::save_job_toml(job).find("layers_per_stage"), std::string::npos);
    // Another pp has no split from the string: Megatron-core's own, where the layers divide.
    JobSpec replanned = job;
    replanned.parallel.vpp = 1;
    replanned.parallel.pp = 1;
    replanned.parallel.dp = 512;
    ptd::derive_job_defaults(replanned);
    EXPECT_TRUE(replanned.parallel.layers_per_stage.empty());
}

// ttsplit, ttmb: Llama 3.1 405B on torchtitan, 64 nodes, tp 8 and the [parallel] lines given,
// 256 sequences a step; `training_extra` adds to [training] (a version, a micro-batch).
JobSpec titan405b(const std::string& parallel, const std::string& training_extra = "") {
    return job_from_text(job_text({.preset = "llama3-405b",
                                   .nodes = 64,
                                   .parallel = "tp = 8\n" + parallel,
                                   .training = "framework = \"torchtitan\"\nglobal_batch = 256\n" + training_extra}));
}

TEST(StackDefaults, TorchtitanSplitsLayersThatDoNotDivideAsTorchtitanDoes) {
    // Llama 3.1 405B's 126 layers over PP 8 × 2 stages per rank, torchtitan's own 3D benchmark:
    // Megatron refuses the split, torchtitan runs [7, 8 × 14, 7] — generate_split_points of
    // 2024-12 and today's generate_llm_fqn_per_model_part give the same one here.
    std::vector<int> want{7};
    want.insert(want.end(), 14, 8);
    want.push_back(7);
    for (const char* version : {"", "framework_version = \"2024-12\"\n"}) {
        SCOPED_TRACE(version);
        expect_stack_split(titan405b("pp = 8\nvpp = 2\n", version), want, {15, 16, 16, 16, 16, 16, 16, 15});
    }
    // Megatron-LM has no such split: the job is refused with the ways out.
    const std::string megatron = refusal(ptd::load_job_text(
        job_text({.preset = "llama3-405b", .nodes = 64, .parallel = "tp = 8\npp = 8\nvpp = 2\n",
                  .training = "framework = \"megatron\"\nmicro_batch = 1\nglobal_batch = 256\n"}),
        "job.toml", presets()));
    EXPECT_NE(megatron.find("layers_per_stage"), std::string::npos) << megatron;
    // A split the job writes is its own.
    const JobSpec own = titan405b("pp = 8\nlayers_per_stage = [16, 16, 16, 16, 16, 16, 16, 14]\n");
    EXPECT_EQ(own.parallel.layers_per_stage.back(), 14);
    EXPECT_NE(ptd::save_job_toml(own).find("layers_per_stage = [16,"), std::string::npos);
}

TEST(StackDefaults, TodaysTorchtitanCountsTheEmbeddingAndTheOutputAsLayers) {
    // Llama 3 8B's 32 layers over PP 4: torchtitan since 2025-08 spreads 32 + 2 over 4 stages
    // (9, 9, 8, 8) and takes one from the first and the last; before, an even 8 each.
    const auto llama8b = [](const std::string& version) {
        return job_from_text(job_text({.preset = "llama3-8b",
                                       .nodes = 1,
                                       .parallel = "pp = 4\n",
                                       .training = "framework = \"torchtitan\"\nmicro_batch = 1\nglobal_batch = 16\n" + version}));
    };
    const JobSpec today = llama8b("");
    EXPECT_EQ(today.parallel.layers_per_stage, (std::vector<int>{8, 9, 8, 7}));
    EXPECT_TRUE(applied(today, "parallel.layers_per_stage", "[8, 9, 8, 7]"));
    const JobSpec older = llama8b("framework_version = \"2025-07\"\n");
    EXPECT_TRUE(older.parallel.layers_per_stage.empty());
    EXPECT_FALSE(applied(older, "parallel.layers_per_stage", "[8, 8, 8, 8]"));
    // The split moves the estimate: the last stage no longer holds 8 layers beside the output.
    EXPECT_NE(ptd::estimate_job(today).step_s, ptd::estimate_job(older).step_s);
}

TEST(StackDefaults, TorchtitansInterleavedScheduleRunsTwoStagesPerRank) {
    // schedule = "interleaved" without vpp: torchtitan builds two stages per rank
    // (pipeline_parallel_layers_per_stage unset), not a depth PTD picks.
    const JobSpec job = titan405b("pp = 8\nschedule = \"interleaved\"\n");
    EXPECT_EQ(job.parallel.vpp, 2);
    EXPECT_TRUE(applied(job, "parallel.vpp", "2"));
    EXPECT_EQ(job.parallel.layers_per_stage.size(), 16u);
    const std::string saved = ptd::save_job_toml(job);
    EXPECT_EQ(saved.find("\nvpp ="), std::string::npos) << saved;
    EXPECT_NE(saved.find("# vpp = 2 (not written: torchtitan's two stages per rank)"), std::string::npos) << saved;
    EXPECT_EQ(reloaded(saved).parallel, job.parallel);
    // Megatron has no default depth: PTD picks one (batch_choice.cpp), and says so.
    const JobSpec megatron = job_from_text(job_text({.preset = "llama3-70b",
                                                     .nodes = 8,
                                                     .parallel = "tp = 8\npp = 4\nschedule = \"interleaved\"\n",
                                                     .training = "framework = \"megatron\"\nmicro_batch = 1\nglobal_batch = 128\n"}));
    EXPECT_GE(megatron.parallel.vpp, 2);
    for (const JobSpec* j : {&job, &megatron})
        for (const ptd::StackDefault& d : j->origin.stack_defaults)
            if (d.key == "parallel.vpp") EXPECT_EQ(d.source.find("torchtitan") != std::string::npos, j == &job) << d.source;
    // A micro-batch count torch's Interleaved1F1B refuses is refused in its words: no
    // Megatron-only group size to suggest (6 micro-batches on pp 4).
    const std::string refused = refusal(ptd::load_job_text(
        job_text({.preset = "llama3-70b", .nodes = 8, .parallel = "tp = 8\npp = 4\nschedule = \"interleaved\"\n",
                  .training = "framework = \"torchtitan\"\nmicro_batch = 1\nglobal_batch = 12\n"}),
        "job.toml", presets()));
    EXPECT_NE(refused.find("torch.distributed.pipelining's Interleaved1F1B"), std::string::npos) << refused;
    EXPECT_EQ(refused.find("microbatch_group_size"), std::string::npos) << refused;
}

TEST(StackDefaults, TorchtitanSplitsTheLocalBatchIntoItsOwnPipelineMicroBatches) {
    // ttmb: no micro_batch written, global 256 over dp 8 = a local batch of 32 per rank on
    // tp 8 × pp 8 × vpp 2: torchtitan's own count of pipeline micro-batches, by date.
    const auto titan = [](const std::string& version) { return titan405b("pp = 8\nvpp = 2\n", version); };
    EXPECT_EQ(titan("framework_version = \"2024-12\"\n").training.micro_batch, 4);  // n = pp = 8
    EXPECT_EQ(titan("framework_version = \"2025-03\"\n").training.micro_batch, 2);  // n = pp·vpp = 16
    const JobSpec today = titan("");
    EXPECT_EQ(today.training.micro_batch, 1);  // pipeline_parallel_microbatch_size = 1
    EXPECT_TRUE(applied(today, "training.micro_batch", "1"));
    // Saved unwritten; a written micro-batch is the job's.
    const std::string saved = ptd::save_job_toml(today);
    EXPECT_EQ(saved.find("\nmicro_batch ="), std::string::npos) << saved;
    EXPECT_NE(saved.find("# micro_batch = 1 (not written: torchtitan's pipeline micro-batches)"), std::string::npos) << saved;
    EXPECT_EQ(titan("micro_batch = 8\n").training.micro_batch, 8);
    // A count that does not divide the local batch is not torchtitan's to run: PTD picks one.
    EXPECT_EQ(ptd::torchtitan_pipeline_micro_batch(12, 8, 1, 202412).micro_batch, 0);
    EXPECT_EQ(ptd::torchtitan_pipeline_micro_batch(12, 8, 1, 0).micro_batch, 1);
}

TEST(StackDefaults, ARecipesRecomputeIsTheJobsUnlessItWritesItsOwn) {
    // deepseek_v3_pretrain_256gpu_gb200_bf16: _deepseek_v3_common's selective recompute with the
    // recipe's ["mla_up_proj"].
    const char* kDeepSeek = "deepseek_v3_pretrain_256gpu_gb200_bf16";
    const JobSpec job = loaded(perf_recipe_job(kDeepSeek), "recipe.toml");
    EXPECT_EQ(job.parallel.recompute, ptd::Recompute::selective);
    EXPECT_EQ(job.parallel.recompute_modules, (uint32_t)ptd::kRecomputeMlaUpProj);
    EXPECT_TRUE(applied(job, "parallel.recompute", "\"selective\""));
    EXPECT_TRUE(applied(job, "parallel.recompute_modules", "[\"mla_up_proj\"]"));
    const std::string saved = ptd::save_job_toml(job);
    EXPECT_EQ(saved.find("recompute ="), std::string::npos) << saved;
    EXPECT_EQ(saved.find("recompute_modules"), std::string::npos) << saved;
    EXPECT_EQ(reloaded(saved).parallel, job.parallel);
    // A written recompute is the job's; the recipe's modules go with a selective one only.
    const JobSpec full = loaded(perf_recipe_job(kDeepSeek, "", "recompute = \"full\"\n"), "recipe.toml");
    EXPECT_EQ(full.parallel.recompute, ptd::Recompute::full);
    EXPECT_EQ(full.parallel.recompute_modules, (uint32_t)ptd::kRecomputeCoreAttn);
    EXPECT_NE(ptd::save_job_toml(full).find("recompute = \"full\""), std::string::npos);
    const JobSpec selective = loaded(perf_recipe_job(kDeepSeek, "", "recompute = \"selective\"\n"), "recipe.toml");
    EXPECT_EQ(selective.parallel.recompute_modules, (uint32_t)ptd::kRecomputeMlaUpProj);
    const JobSpec none = loaded(perf_recipe_job(kDeepSeek, "", "recompute = \"none\"\n"), "recipe.toml");
    EXPECT_EQ(none.parallel.recompute, ptd::Recompute::none);
    EXPECT_NE(ptd::save_job_toml(none).find("recompute = \"none\""), std::string::npos);
    // Every Qwen3-30B-A3B recipe resets its base's full recompute: none.
    const JobSpec qwen = loaded(perf_recipe_job(kQwen30bH100Fp8), "recipe.toml");
    EXPECT_EQ(qwen.parallel.recompute, ptd::Recompute::none);
    EXPECT_TRUE(applied(qwen, "parallel.recompute", "\"none\""));
    // A layout the planner chose keeps its recompute when the defaults are derived again.
    ptd::PlanEntry entry;
    entry.choice = ptd::layout_choice_of(job);
    entry.choice.recompute = ptd::Recompute::full;
    entry.layers_per_stage = job.parallel.layers_per_stage;
    JobSpec planned = ptd::apply_plan_entry(job, entry);
    ptd::derive_job_defaults(planned);
    EXPECT_EQ(planned.parallel.recompute, ptd::Recompute::full);
    EXPECT_EQ(planned.parallel.recompute_modules, (uint32_t)ptd::kRecomputeCoreAttn);
    EXPECT_TRUE(ptd::validate_job(planned).empty());
    // With the recipe's recompute and layout string, DeepSeek-V3 on 1,024 H100 fits as NVIDIA ran it.
    EXPECT_TRUE(ptd::estimate_job(loaded(perf_recipe_job("deepseek_v3_pretrain_1024gpu_h100_bf16"), "recipe.toml")).fits);
}

TEST(StackDefaults, EveryPerformanceRecipeIsAJobPtdCanEstimateAndIsDocumented) {
    // Each row of the table is a job on its own layout, model and GPU presets, with a step. A few
    // recipes state an expert parallelism their GPUs cannot hold — the 64-GPU DeepSeek-V3 H100
    // ones keep the 1,024-GPU layout (EP 64), qwen3_235b_a22b_pretrain_64gpu_gb200_fp8cs says EP 32
    // on 64 GPUs with PP 8 (its docstring says EP 8) — and Megatron-core would refuse them too:
    // ep · expert_tp must divide tp·cp·dp. PTD refuses them on that key.
    const std::string doc = read_file(PTD_SOURCE_DIR "/docs/job-spec.md");
    int loaded_jobs = 0, refused_jobs = 0;
    for (const ptd::PerfRecipe& r : ptd::perf_recipes()) {
        EXPECT_NE(doc.find(std::string("| `") + r.name + "` |"), std::string::npos) << r.name << " is not in docs/job-spec.md";
        const auto job = perf_recipe_job(r.name);
        if ((r.gpus / r.pp) % (r.ep * std::max(1, r.etp)) != 0) {
            EXPECT_NE(refusal(job).find("parallel.e"), std::string::npos) << r.name << ": " << refusal(job);
            ++refused_jobs;
            continue;
        }
        ASSERT_TRUE(job.has_value()) << r.name << ": " << job.error().str();
        EXPECT_TRUE(ptd::perf_recipe_differences(*job).empty()) << r.name;
        EXPECT_GT(ptd::estimate_job(*job).step_s, 0.0) << r.name;
        ++loaded_jobs;
    }
    EXPECT_GE(loaded_jobs, 45);
    EXPECT_LE(refused_jobs, 5);
}

TEST(StackDefaults, AChosenPlanRowOwnsItsOverlapKeys) {
    // The planner's row is scored with its own overlap keys; applied, they are the job's, so
    // re-deriving the job's defaults afterwards must not turn them back to the stack's.
    JobSpec job = llama70b("nemo");
    ptd::PlanEntry entry;
    entry.choice.tp = 4, entry.choice.pp = 4, entry.choice.dp = 2, entry.choice.cp = 2, entry.choice.vpp = 5;
    entry.choice.sequence_parallel = true, entry.choice.distributed_optimizer = true, entry.choice.micro_batch = 1;
    entry.choice.tp_comm_overlap = false, entry.choice.overlap_grad_reduce = true, entry.choice.overlap_param_gather = true;
    JobSpec applied_job = ptd::apply_plan_entry(job, entry);
    ptd::derive_job_defaults(applied_job);
    EXPECT_FALSE(applied_job.parallel.tp_comm_overlap);
}

}  // namespace
