// flash_attention_version.cpp — which FlashAttention a stack's date runs (fa1): a job dated
// before flash-attn 2.0 (July 2023) runs FlashAttention-1, at half FlashAttention-2's rate
// (Dao 2023, arXiv 2307.08691: FlashAttention-2 "around 2× faster", 50–73% of the A100's peak
// against 25–40%); from July 2023, and for a job without a date, the generation's flash_eff.
// tritonfa: training.flash_attention_kernel names the kernel where the date does not tell it —
// flash-attn 1.x's Triton kernel (llm-foundry's attn_impl "triton") runs at FlashAttention-1's
// rate whatever the date, "flash-attn-2" at FlashAttention-2's whatever the date.
// teflash: on a Megatron-core stack "flash-attn-2" is Transformer Engine's FlashAttention backend
// (NVTE_FUSED_ATTN=0): on Hopper its core runs at fa2_hopper_fraction of the cuDNN attention the
// stack runs by default from Transformer Engine 1.2 (Dec 2023), and ran before it; on Ampere the
// two are one rate.
// fa1seq: the Triton kernel reaches s / (s + 698) of that rate over s tokens (Triton PR 1917's
// causal kernel on A100), so its 2,048-token calls run slower per FLOP than its 8,192-token ones.
// flashlen: cuDNN's fused attention on Blackwell reaches s / (s + 1,350) of its long-sequence
// rate (cudnn-frontend's GB200 benchmark); the other kernels keep the curve they had.
#include <cmath>

#include <gtest/gtest.h>

#include "job_test_util.h"
#include "model/estimate_internal.h"
#include "ptd/model/estimate.h"

namespace {

using namespace ptd_test;

// Llama 3 8B (32 layers, 32 heads of 128, sequence 8192) on one A100, Megatron-LM with flash
// attention written, at `version` ("" = today).
// `kernel`: training.flash_attention_kernel ("" = not written).
// `seq_len`: the model's sequence (0 = the preset's 8192).
// `gpu`: the GPU preset.
std::string llama8b_on_one_a100_text(const std::string& version, const std::string& kernel = "",
                                     bool flash = true, int seq_len = 0, const std::string& gpu = "a100-80gb") {
    const std::string dated = version.empty() ? "" : "framework_version = \"" + version + "\"\n";
    const std::string named = kernel.empty() ? "" : "flash_attention_kernel = \"" + kernel + "\"\n";
    std::string text = job_text({.preset = "llama3-8b",
                     .gpus_per_node = 1,
                     .gpu = gpu,
                     .parallel = "tp = 1\npp = 1\n",
                     .training = std::string("framework = \"megatron\"\nflash_attention = ") + (flash ? "true" : "false") +
                                 "\nmicro_batch = 1\nglobal_batch = 1\n" + dated + named});
    const std::string preset_line = "preset = \"llama3-8b\"\n";
    if (seq_len > 0) text.insert(text.find(preset_line) + preset_line.size(), "seq_len = " + std::to_string(seq_len) + "\n");
    return text;
}
ptd::Estimate llama8b_on_one_a100(const std::string& version, const std::string& kernel = "") {
    return ptd::estimate_job(job_from_text(llama8b_on_one_a100_text(version, kernel)));
}

TEST(FlashAttentionVersion, BeforeJuly2023TheAttentionCoreRunsAtFlashAttention1sRate) {
    const ptd::Estimate fa1 = llama8b_on_one_a100("2023-06"), fa2 = llama8b_on_one_a100("2023-07");
    // By hand: the causal core executes half of 4·b·a·s²·d per layer, at flash_eff of the
    // A100's 312 TFLOP/s with FlashAttention-2 and half that rate with FlashAttention-1: the
    // forward grows by one FlashAttention-2 core per layer, the backward (2.5 forwards' worth of
    // GEMMs) by 2.5 of them.
    const double flash_eff = ptd::time_model_constants().kernel(ptd::GpuGeneration::ampere).flash_eff;
    const double core = 0.5 * 4.0 * 1 * 32 * 8192.0 * 8192.0 * 128 / (312e12 * flash_eff);
    ASSERT_EQ(fa1.stages.size(), 1u);
    EXPECT_NEAR(fa1.stages[0].fwd_s - fa2.stages[0].fwd_s, 32 * core, 1e-9);
    EXPECT_NEAR(fa1.stages[0].bwd_s - fa2.stages[0].bwd_s, 32 * 2.5 * core, 1e-9);
    // Nothing else of the layer moves, and a job without a date runs today's kernels.
    EXPECT_DOUBLE_EQ(fa1.stages[0].tp_s, fa2.stages[0].tp_s);
    EXPECT_DOUBLE_EQ(llama8b_on_one_a100("").stages[0].fwd_s, fa2.stages[0].fwd_s);
}

TEST(FlashAttentionVersion, ANamedKernelOverridesTheDate) {
    // Today's stack running FlashAttention-1 takes the same time as a stack dated before July
    // 2023 (the Triton kernel too, less its sequence curve: the next test); FlashAttention-2 named
    // on a 2023-06 stack takes FlashAttention-2's.
    const ptd::Estimate fa1 = llama8b_on_one_a100("2023-06"), fa2 = llama8b_on_one_a100("2023-07");
    EXPECT_DOUBLE_EQ(llama8b_on_one_a100("2024-01", "flash-attn-1").stages[0].fwd_s, fa1.stages[0].fwd_s);
    EXPECT_DOUBLE_EQ(llama8b_on_one_a100("2023-06", "flash-attn-2").stages[0].fwd_s, fa2.stages[0].fwd_s);
    EXPECT_DOUBLE_EQ(llama8b_on_one_a100("2023-06", "by-date").stages[0].fwd_s, fa1.stages[0].fwd_s);
}

TEST(FlashAttentionVersion, FlashAttention2NamedOnAMegatronStackRunsAtItsHopperRate) {
    auto on = [](const std::string& gpu, const std::string& kernel) {
        return ptd::estimate_job(job_from_text(llama8b_on_one_a100_text("", kernel, true, 0, gpu)));
    };
    // By hand, per layer: the causal core (half of 4·b·a·s²·d) at flash_eff of the H100's
    // 989.4 TFLOP/s with cuDNN's attention, at fa2_hopper_fraction of that rate with
    // FlashAttention-2: the forward grows by (1 / fraction − 1) cores, the backward by 2.5 times that.
    const ptd::TimeModelConstants& k = ptd::time_model_constants();
    const ptd::Estimate cudnn = on("h100-sxm", ""), fa2 = on("h100-sxm", "flash-attn-2");
    ASSERT_EQ(fa2.stages.size(), 1u);
    const double peak = job_from_text(llama8b_on_one_a100_text("", "", true, 0, "h100-sxm")).cluster.gpu.bf16_tflops * 1e12;
    const double core = 0.5 * 4.0 * 1 * 32 * 8192.0 * 8192.0 * 128 / (peak * k.kernel(ptd::GpuGeneration::hopper).flash_eff);
    const double extra = 32 * core * (1.0 / k.fa2_hopper_fraction - 1.0);
    EXPECT_NEAR(fa2.stages[0].fwd_s - cudnn.stages[0].fwd_s, extra, 1e-9);
    EXPECT_NEAR(fa2.stages[0].bwd_s - cudnn.stages[0].bwd_s, 2.5 * extra, 1e-9);
    // On Ampere FlashAttention-2 is the fused rate: naming it changes nothing.
    EXPECT_DOUBLE_EQ(on("a100-80gb", "flash-attn-2").stages[0].fwd_s, on("a100-80gb", "").stages[0].fwd_s);
}

TEST(FlashAttentionVersion, AMegatronStackBeforeTransformerEngine12RanTheFlashAttnPackageOnHopper) {
    auto on = [](const std::string& version, const std::string& kernel) {
        return ptd::estimate_job(job_from_text(llama8b_on_one_a100_text(version, kernel, true, 0, "h100-sxm")));
    };
    // TE 1.2 (Dec 2023) made cuDNN's fused attention its choice on Hopper; a stack dated before
    // it ran FlashAttention-2 from the flash-attn package, as a job naming that kernel today does.
    EXPECT_DOUBLE_EQ(on("2023-10", "").stages[0].fwd_s, on("", "flash-attn-2").stages[0].fwd_s);
    EXPECT_DOUBLE_EQ(on("2024-01", "").stages[0].fwd_s, on("", "").stages[0].fwd_s);
    EXPECT_GT(on("2023-10", "").stages[0].fwd_s, on("2024-01", "").stages[0].fwd_s);
    // FlashAttention-1 on Hopper: half FlashAttention-2's rate, which is fa2_hopper_fraction of
    // cuDNN's: the core takes 1 / (fa1_fraction · fa2_hopper_fraction) of cuDNN's time.
    const ptd::TimeModelConstants& k = ptd::time_model_constants();
    const double peak = job_from_text(llama8b_on_one_a100_text("", "", true, 0, "h100-sxm")).cluster.gpu.bf16_tflops * 1e12;
    const double core = 0.5 * 4.0 * 1 * 32 * 8192.0 * 8192.0 * 128 / (peak * k.kernel(ptd::GpuGeneration::hopper).flash_eff);
    EXPECT_NEAR(on("", "flash-attn-1").stages[0].fwd_s - on("", "").stages[0].fwd_s,
                32 * core * (1.0 / (k.fa1_fraction * k.fa2_hopper_fraction) - 1.0), 1e-9);
    // The estimate lists the kernel the date picked with the stack's defaults.
    const ptd::JobSpec dated = job_from_text(llama8b_on_one_a100_text("2023-10", "", true, 0, "h100-sxm"));
    bool listed = false;
    for (const auto& d : dated.origin.stack_defaults)
        listed = listed || (d.key == "training.flash_attention_kernel" && d.value == "\"flash-attn-2\"");
    EXPECT_TRUE(listed);
}

TEST(FlashAttentionVersion, TheTritonKernelsRateFollowsTheSequenceLength) {
    // By hand, per layer: FlashAttention-1's causal core (half of 4·b·a·s²·d at flash_eff ×
    // fa1_fraction of 312 TFLOP/s) and, for the Triton kernel, (s + 698) / s of it: the forward
    // grows by 698 / s of a FlashAttention-1 core, the backward by 2.5 times that.
    const ptd::KernelEfficiency k = ptd::time_model_constants().kernel(ptd::GpuGeneration::ampere);
    const double fa1_rate = 312e12 * k.flash_eff * ptd::time_model_constants().fa1_fraction;
    double slowdown[2] = {0, 0};
    int i = 0;
    for (const int s : {2048, 8192}) {
        auto at = [&](const char* kernel) {
            return ptd::estimate_job(job_from_text(llama8b_on_one_a100_text("", kernel, true, s)));
        };
        const ptd::Estimate fa1 = at("flash-attn-1"), triton = at("triton");
        ASSERT_EQ(fa1.stages.size(), 1u);
        const double core = 0.5 * 4.0 * 1 * 32 * double(s) * s * 128 / fa1_rate;
        EXPECT_NEAR(triton.stages[0].fwd_s - fa1.stages[0].fwd_s, 32 * core * 698.0 / s, 1e-9) << s;
        EXPECT_NEAR(triton.stages[0].bwd_s - fa1.stages[0].bwd_s, 32 * 2.5 * core * 698.0 / s, 1e-9) << s;
        slowdown[i++] = (triton.stages[0].fwd_s - fa1.stages[0].fwd_s) / (32 * core);
    }
    // The short sequence pays four times the long one's share: 34% against 8.5%.
    EXPECT_NEAR(slowdown[0], 0.341, 0.001);
    EXPECT_NEAR(slowdown[1], 0.0852, 0.001);
}

// flashlen: NVIDIA/cudnn-frontend's causal BF16 SDPA benchmark on GB200 (cuDNN 9.22, 64 query
// and 8 KV heads of 128, batch 2; the step's mix, the backward 2.5 forwards' worth of FLOPs):
// 937, 1,212, 1,393, 1,418 TFLOP/s at 2K … 16K. Each point over the curve's rate at its length
// gives the same long-sequence rate within 3%.
TEST(FlashAttentionVersion, CudnnOnBlackwellFollowsItsMeasuredLengthCurve) {
    const double measured[][2] = {{2048, 937}, {4096, 1212}, {8192, 1393}, {16384, 1418}};
    // Each point's implied long-sequence rate: its TFLOP/s times the curve's slowdown there.
    auto implied = [](double s, double tflops) {
        return tflops * ptd::est::attention_length_slowdown(s, 1, ptd::est::kCudnnFlashHalfRateTokens);
    };
    double log_sum = 0;
    for (const auto& [s, tflops] : measured) log_sum += std::log(implied(s, tflops));
    const double asymptote = std::exp(log_sum / 4);
    EXPECT_NEAR(asymptote, 1580, 10);
    for (const auto& [s, tflops] : measured) EXPECT_NEAR(implied(s, tflops) / asymptote, 1.0, 0.03) << s;
}

// Which kernels take which curve: cuDNN (a Megatron-core stack by date) on Blackwell the
// measured one; on Hopper, FlashAttention-2 named on Blackwell and FlashAttention-1's CUDA
// kernel none; the Triton kernel its own wherever it runs.
TEST(FlashAttentionVersion, OnlyTheKernelsWithAMeasuredCurveFollowTheSequence) {
    auto half_rate = [](const std::string& gpu, const std::string& kernel, const std::string& version = "") {
        ptd::est::LayoutDerived L{};
        ptd::est::assign_kernel_profile(job_from_text(llama8b_on_one_a100_text(version, kernel, true, 0, gpu)), L);
        return L.flash_half_rate_tokens;
    };
    EXPECT_EQ(half_rate("b200", ""), ptd::est::kCudnnFlashHalfRateTokens);
    EXPECT_EQ(half_rate("h100-sxm", ""), 0.0);
    EXPECT_EQ(half_rate("a100-80gb", ""), 0.0);
    EXPECT_EQ(half_rate("b200", "flash-attn-2"), 0.0);
    EXPECT_EQ(half_rate("b200", "triton"), ptd::est::kTritonFlashHalfRateTokens);
    EXPECT_EQ(half_rate("a100-80gb", "flash-attn-1"), 0.0);
}

// A long sequence on a kernel without a measured length curve is estimated at the rate of the
// short calibration sequences; the estimate says so, what the long-sequence rows showed, and
// whether its speed interval is theirs: on H100, where they ran, it is (and wider than at 8K);
// on A100, where none ran, it is every length's.
TEST(FlashAttentionVersion, ALongSequenceWithoutAMeasuredCurveIsToldSo) {
    auto estimate = [](const std::string& gpu, int seq_len) {
        return ptd::estimate_job(job_from_text(llama8b_on_one_a100_text("", "", true, seq_len, gpu)));
    };
    auto long_note = [&](const std::string& gpu, int seq_len) {
        return any_note(estimate(gpu, seq_len), "its rate by length being measured for cuDNN on Blackwell only");
    };
    EXPECT_TRUE(long_note("h100-sxm", 65536));
    EXPECT_FALSE(long_note("h100-sxm", 8192));
    EXPECT_FALSE(long_note("b200", 65536));  // cuDNN on Blackwell follows its curve
    const ptd::Estimate h100 = estimate("h100-sxm", 65536), h100_8k = estimate("h100-sxm", 8192);
    EXPECT_TRUE(any_note(h100, "so the speed interval is theirs"));
    EXPECT_TRUE(h100.speed.band.long_sequence);
    EXPECT_FALSE(h100_8k.speed.band.long_sequence);
    EXPECT_GT(h100.speed.band.error_hi - h100.speed.band.error_lo, h100_8k.speed.band.error_hi - h100_8k.speed.band.error_lo);
    const ptd::Estimate a100 = estimate("a100-80gb", 65536);
    EXPECT_TRUE(any_note(a100, "none ran on ampere GPUs: the speed interval is that of every length"));
    EXPECT_FALSE(a100.speed.band.long_sequence);
}

TEST(FlashAttentionVersion, TheKernelKeyIsSavedAndRefusedWithoutFlashAttention) {
    const ptd::JobSpec triton = job_from_text(llama8b_on_one_a100_text("", "triton"));
    EXPECT_EQ(triton.training.flash_kernel, ptd::FlashKernel::triton);
    const std::string saved = ptd::save_job_toml(triton);
    EXPECT_TRUE(contains(saved, "flash_attention_kernel = \"triton\"")) << saved;
    EXPECT_EQ(reloaded(saved).training.flash_kernel, ptd::FlashKernel::triton);
    const std::string by_date = ptd::save_job_toml(job_from_text(llama8b_on_one_a100_text("")));
    EXPECT_FALSE(contains(by_date, "flash_attention_kernel")) << by_date;
    // A kernel without flash attention, and a word outside the list, are refused naming the key.
    expect_refused(ptd::load_job_text(llama8b_on_one_a100_text("", "triton", false), "job.toml", presets()),
                   "training.flash_attention_kernel", "job.toml");
    expect_refused(ptd::load_job_text(llama8b_on_one_a100_text("", "flash-attn-3"), "job.toml", presets()),
                   "flash_attention_kernel", "job.toml");
}

}  // namespace
