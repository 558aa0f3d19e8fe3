// pipeline_input_deallocation.cpp — each pipeline chunk's received input freed after its forward
// (estimate.deallocate_pipeline_inputs; the Llama 3 paper, arXiv 2407.21783 §3.3.2: "we deallocate
// the input and output tensors of each pipeline stage that will not be used for any future
// computation"):
//   - the worked example of Megatron-core's interleaved warm-up for p = 16, v = 8, N = 16 with the
//     embedding and the loss as chunks of their own: stage 0 frees 112 inputs of its 143 in-flight
//     forwards (31 are chunk 0's, fed by the token ids), stage 1 all 141, stage 15 112 of 113 (the
//     loss chunk has no layer); 1F1B frees min(p − i, m) inputs on every stage but the first;
//   - nothing where the first norm keeps no input anyway or needs it again (memory-efficient
//     norms, full recompute, torchtitan's op-level checkpointing, TE FP8), nor with the key off;
//   - the key reads, saves, adds a note, keeps the step time, is noted by the Megatron-LM export
//     (which has no such option), and is refused with a bad value (file and line), with full
//     recompute and with torchtitan;
//   - the Llama 3 405B user row, which states the measure, fits the H100s it ran on only with it.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/estimate_internal.h"
#include "job_test_util.h"
#include "layer_test_util.h"
#include "ptd/export/export.h"
#include "ptd/model/estimate.h"
#include "published_runs_test_util.h"

namespace {

using namespace ptd;
using ptd_test::any_note;
using ptd_test::contains;
using ptd_test::job_from_text;

// Llama 3 405B's stage boundary at TP 8 with sequence parallelism: T = 8192, h = 16384, bf16.
constexpr double kT = 8192, kH = 16384, kE = 2, kTp = 8;
constexpr double kBoundary = kE * kT * kH / kTp;  // 32 MiB

// The 126 layers of Llama 3 405B split as its paper does (§3.3.2): 16 · 8 one-layer chunks, the
// first chunk of stage 0 the embedding only and the last chunk of stage 15 the loss only.
std::vector<int> llama3_chunks() {
    std::vector<int> chunks(16 * 8, 1);
    chunks[0 * 16 + 0] = 0;
    chunks[7 * 16 + 15] = 0;
    return chunks;
}

est::LayoutDerived llama3_405b_stage_layout(const std::vector<int>& chunks) {
    est::LayoutDerived L = ptd_test::llama_layer_tp8();
    L.tokens = kT, L.s_local = kT, L.h = kH, L.t = (int)kTp;
    L.p = 16, L.v = 8, L.mb_group = 16, L.mbs = 32;
    L.schedule = PipelineSchedule::interleaved;
    L.chunk_layers = chunks.data();
    L.stage_inputs_freed = true;
    return L;
}

TEST(PipelineInputDeallocation, InterleavedWarmUpP16V8FreesEveryReceivedInput) {
    const std::vector<int> chunks = llama3_chunks();
    const est::LayoutDerived L = llama3_405b_stage_layout(chunks);
    // Megatron-core's warm-up, 2(p − i − 1) + (v − 1)·N + 1 forwards in flight.
    EXPECT_DOUBLE_EQ(est::in_flight_chunks(L, 0), 143.0);
    EXPECT_DOUBLE_EQ(est::in_flight_chunks(L, 1), 141.0);
    EXPECT_DOUBLE_EQ(est::in_flight_chunks(L, 15), 113.0);
    // Stage 0: the first group's 16 forwards through chunk 0 and the second group's first 15
    // take the token ids; the other 112 received their input from stage 15.
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(L, 0, 7), 112.0 * kBoundary);
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(L, 1, 8), 141.0 * kBoundary);  // 4.4 GiB
    // Stage 15: 7 groups' chunks 0..6 (112 forwards), then one of the loss chunk, which has no layer.
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(L, 15, 7), 112.0 * kBoundary);
    // Even chunks (no embedding / loss in the split): stage 0 still skips chunk 0's 31 forwards.
    est::LayoutDerived even = L;
    even.chunk_layers = nullptr;
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(even, 0, 8), 112.0 * kBoundary);
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(even, 15, 8), 113.0 * kBoundary);
}

// The chunk of the k-th forward in Megatron-core's interleaved order (schedules.py
// get_schedule_table: micro-batches in groups of N, each group through chunk 0 … v − 1; the
// last group may be smaller), walked forward by forward as the schedule table lists them.
int megatron_forward_chunk(int k, int v, int m, int N) {
    int seen = 0;
    for (int start = 0; start < m; start += N) {
        const int size = std::min(N, m - start);
        if (k < seen + size * v) return (k - seen) / size;
        seen += size * v;
    }
    return -1;
}

TEST(PipelineInputDeallocation, InFlightLayersAndInputsCountEachForwardOfTheScheduleTable) {
    // Uneven chunks (one layer more on chunk c = 1, an empty loss chunk at the end) over group
    // sizes that divide m, leave a smaller last group, or exceed m; every stage.
    for (int p : {2, 4})
        for (int v : {2, 3, 5})
            for (int m : {p, 6, 10, 16})
                for (int N : {p, p + 1, 2 * p + 3}) {
                    std::vector<int> chunks((size_t)p * v, 2);
                    for (int i = 0; i < p; ++i) chunks[(size_t)(1 * p + i)] = 3;
                    chunks[(size_t)((v - 1) * p + p - 1)] = 0;
                    est::LayoutDerived L = ptd_test::llama_layer_tp8();
                    L.p = p, L.v = v, L.mbs = m, L.mb_group = std::min(N, m);
                    L.schedule = PipelineSchedule::interleaved;
                    L.chunk_layers = chunks.data();
                    L.stage_inputs_freed = true;
                    const double boundary = L.e * L.tokens * L.h / L.t;
                    for (int i = 0; i < p; ++i) {
                        const int count = (int)est::in_flight_chunks(L, i);
                        double layers = 0, received = 0;
                        for (int k = 0; k < count; ++k) {
                            const int c = megatron_forward_chunk(k, v, m, L.mb_group);
                            layers += chunks[(size_t)(c * p + i)];
                            if (!(i == 0 && c == 0) && chunks[(size_t)(c * p + i)] > 0) received += 1;
                        }
                        SCOPED_TRACE("p " + std::to_string(p) + " v " + std::to_string(v) + " m " + std::to_string(m) +
                                     " N " + std::to_string(L.mb_group) + " stage " + std::to_string(i));
                        EXPECT_DOUBLE_EQ(est::in_flight_layers(L, i, 0), layers);
                        EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(L, i, 1), received * boundary);
                    }
                }
}

TEST(PipelineInputDeallocation, OneFOneBFreesTheReceivedInputOfEachMicroBatchInFlight) {
    est::LayoutDerived L = ptd_test::llama_layer_tp8();  // T = 4096, h = 4096, tp 8 with SP
    L.p = 4, L.v = 1, L.mbs = 8, L.mb_group = 4, L.schedule = PipelineSchedule::one_f_one_b;
    L.stage_inputs_freed = true;
    const double boundary = 2.0 * 4096 * 4096 / 8;
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(L, 0, 8), 0.0);  // its input is the token ids
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(L, 1, 8), 3.0 * boundary);
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(L, 3, 8), 1.0 * boundary);
    L.mbs = 2;  // fewer micro-batches than stages: only those are in flight
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(L, 1, 8), 2.0 * boundary);
    L.sp = false;  // without SP the boundary is the whole sequence on every TP rank
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(L, 1, 8), 2.0 * 2.0 * 4096 * 4096);
}

TEST(PipelineInputDeallocation, NothingWhereTheFirstNormKeepsNoInputOrNeedsItAgain) {
    const std::vector<int> chunks = llama3_chunks();
    const est::LayoutDerived base = llama3_405b_stage_layout(chunks);
    ASSERT_GT(est::stage_input_bytes_freed(base, 1, 8), 0.0);
    est::LayoutDerived off = base;
    off.stage_inputs_freed = false;
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(off, 1, 8), 0.0);
    est::LayoutDerived menorm = base;  // LN1's input is not counted in the first place
    menorm.norm_saves_output = true;
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(menorm, 1, 8), 0.0);
    est::LayoutDerived full = base;  // the input is the first layer's checkpoint
    full.rc = Recompute::full;
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(full, 1, 8), 0.0);
    est::LayoutDerived titan = base;
    titan.rc = Recompute::selective, titan.rc_style = RecomputeStyle::torchtitan_op;
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(titan, 1, 8), 0.0);
    est::LayoutDerived norm_recomputed = base;
    norm_recomputed.rc = Recompute::selective, norm_recomputed.rc_modules = kRecomputeLayernorm;
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(norm_recomputed, 1, 8), 0.0);
    est::LayoutDerived fp8 = base;  // the kept norm output would be a tensor beside TE's FP8 copy
    fp8.fp8 = Fp8Recipe::delayed, fp8.fp8_te = true, fp8.fp8_saved_bytes = 1.0;
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(fp8, 1, 8), 0.0);
    est::LayoutDerived core_attn = base;  // Megatron's default selective recompute keeps LN1's input
    core_attn.rc = Recompute::selective;
    EXPECT_DOUBLE_EQ(est::stage_input_bytes_freed(core_attn, 1, 8), 141.0 * kBoundary);
}

// ---- a whole job ----

std::string job_text(const std::string& estimate_keys, const std::string& parallel = "",
                     const std::string& training = "") {
    return "[model]\npreset = \"llama3-8b\"\n"
           "[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[parallel]\ntp = 4\npp = 2\n"
           "sequence_parallel = true\n" +
           parallel + "[training]\nmicro_batch = 1\nglobal_batch = 16\nprecision = \"bf16\"\n" + training +
           estimate_keys;
}
const std::string kKey = "[estimate]\ndeallocate_pipeline_inputs = true\n";

TEST(PipelineInputDeallocation, JobFreesStageOnesInFlightInputAndKeepsTheStepTime) {
    const Estimate base = estimate_job(job_from_text(job_text("")));
    const JobSpec job = job_from_text(job_text(kKey));
    ASSERT_TRUE(job.estimate.deallocate_pipeline_inputs);
    const Estimate freed = estimate_job(job);
    ASSERT_EQ(base.stages.size(), 2u);
    // 1F1B, p = 2: stage 0 takes the token ids; stage 1 holds one micro-batch, whose input
    // (Llama 3 8B: seq 8192, h 4096, SP over tp 4) is freed.
    EXPECT_DOUBLE_EQ(freed.stages[0].mem.activations, base.stages[0].mem.activations);
    EXPECT_NEAR(base.stages[1].mem.activations - freed.stages[1].mem.activations, 2.0 * 8192 * 4096 / 4, 1.0);
    EXPECT_EQ(freed.step_s, base.step_s);
    EXPECT_TRUE(any_note(freed, "estimate.deallocate_pipeline_inputs"));
    EXPECT_FALSE(any_note(base, "estimate.deallocate_pipeline_inputs"));
    // Saved only when set, and read back.
    const std::string saved = save_job_toml(job);
    EXPECT_TRUE(contains(saved, "deallocate_pipeline_inputs = true")) << saved;
    EXPECT_TRUE(job_from_text(saved, "saved.toml").estimate.deallocate_pipeline_inputs);
    EXPECT_FALSE(contains(save_job_toml(job_from_text(job_text(""))), "deallocate_pipeline_inputs"));
}

TEST(PipelineInputDeallocation, MegatronExportSaysItHasNoSuchOption) {
    auto mg = export_job(job_from_text(job_text(kKey)), ExportFormat::megatron);
    ASSERT_TRUE(mg) << mg.error().str();
    EXPECT_TRUE(any_note(*mg, "estimate.deallocate_pipeline_inputs"));
    auto plain = export_job(job_from_text(job_text("")), ExportFormat::megatron);
    ASSERT_TRUE(plain) << plain.error().str();
    EXPECT_FALSE(any_note(*plain, "estimate.deallocate_pipeline_inputs"));
}

std::string load_error_of(const std::string& text) { return ptd_test::refusal_of_text(text, "dealloc.toml"); }

TEST(PipelineInputDeallocation, BadValueFullRecomputeAndTorchtitanAreRefused) {
    const std::string bad = load_error_of(job_text("[estimate]\ndeallocate_pipeline_inputs = \"yes\"\n"));
    EXPECT_TRUE(contains(bad, "dealloc.toml:16")) << bad;
    EXPECT_TRUE(contains(bad, "deallocate_pipeline_inputs")) << bad;
    const std::string full = load_error_of(job_text(kKey, "recompute = \"full\"\n"));
    EXPECT_TRUE(contains(full, "estimate.deallocate_pipeline_inputs")) << full;
    EXPECT_TRUE(contains(full, "full")) << full;
    const std::string norm = load_error_of(
        job_text(kKey, "recompute = \"selective\"\nrecompute_modules = [\"layernorm\"]\n"));
    EXPECT_TRUE(contains(norm, "layernorm")) << norm;
    const std::string titan = load_error_of(job_text(kKey, "", "framework = \"torchtitan\"\n"));
    EXPECT_TRUE(contains(titan, "torchtitan")) << titan;
    EXPECT_TRUE(load_job_text(job_text(kKey, "recompute = \"selective\"\n"), "dealloc.toml", ptd_test::presets()).has_value());
}

// ---- the published row ----

TEST(PipelineInputDeallocationRows, Llama3UserRowFitsOnlyWithThePapersMeasure) {
    const ::Run& r = ptd_test::published_run("user24-llama3-405b-8k-8192gpu");
    EXPECT_FALSE(r.job.estimate.memory_efficient_norm);  // the paper's measure alone, not the sibling's inference
    const auto [with, without] = ptd_test::estimate_with_and_without(r, &EstimateSpec::deallocate_pipeline_inputs);
    EXPECT_TRUE(with.fits);
    EXPECT_FALSE(without.fits);  // 83.8 GiB of 79.6 usable
    // Stage 1: 141 received inputs of 32 MiB each (4.4 GiB).
    EXPECT_NEAR(without.stages[1].mem.activations - with.stages[1].mem.activations, 141.0 * kBoundary, 1.0);
    EXPECT_EQ(with.step_s, without.step_s);
}

TEST(PipelineInputDeallocationRows, LoaderReadsTheRunKeyAndRefusesABadValue) {
    ptd_test::expect_run_bool_key("dealloc", "deallocate_pipeline_inputs",
                                  [](const ::Run& r) { return r.job.estimate.deallocate_pipeline_inputs; });
}

}  // namespace
