// test_pipeline_layout.cpp — Megatron-core's pipeline layout strings (pipeline_layout.h): the
// syntax as Megatron-core reads it, the checks against a model and a layout, the job key
// parallel.pipeline_layout (loading, saving, validation, the estimate, the exports, the
// planner), the compact text PTD writes (exports, the split error's way out), and chunks
// without transformer layers in layers_per_stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "job_test_util.h"
#include "ptd/model/estimate.h"
#include "ptd/plan/planner.h"
#include "ptd/spec/pipeline_layout.h"

namespace {

using ptd::JobSpec;
using namespace ptd_test;

std::vector<int> chunks_of(const std::string& text) {
    const auto layout = ptd::parse_pipeline_layout(text);
    EXPECT_TRUE(layout.has_value()) << text << ": " << (layout ? "" : layout.error());
    return layout ? ptd::layout_layers_per_chunk(*layout) : std::vector<int>{};
}

std::string parse_error(const std::string& text) {
    const auto layout = ptd::parse_pipeline_layout(text);
    EXPECT_FALSE(layout.has_value()) << text << " parsed";
    return layout ? "" : layout.error();
}

// DeepSeek-V3's 61 layers on 8 stages × 4 virtual stages as Megatron-Bridge's H100 recipes lay
// them out: the embedding and one layer, 30 chunks of two, the MTP layer and the loss alone.
std::vector<int> deepseek_h100_split() {
    std::vector<int> want{1};
    want.insert(want.end(), 30, 2);
    want.push_back(0);
    return want;
}

TEST(PipelineLayout, ReadsMegatronCoresSyntax) {
    EXPECT_EQ(chunks_of("Et|(tt|)*30mL"), deepseek_h100_split());
    const auto ds = *ptd::parse_pipeline_layout("Et|(tt|)*30mL");
    EXPECT_TRUE(ds.chunks.front().embedding);
    EXPECT_TRUE(ds.chunks.back().loss);
    EXPECT_EQ(ds.chunks.back().mtp, 1);
    // Megatron-core's docstring example: commas are cosmetic, a chunk may hold the MTP layer alone.
    std::vector<int> doc{3};
    doc.insert(doc.end(), 29, 2);
    doc.insert(doc.end(), {0, 0});
    EXPECT_EQ(chunks_of("Ettt|(tt|)*29,m|L"), doc);
    // Repeats inside a group, and a group that repeats zero times.
    EXPECT_EQ(chunks_of("Et*4|(t*4|)*2t*3L"), (std::vector<int>{4, 4, 4, 3}));
    EXPECT_EQ(chunks_of("Et|(tt|)*0tL"), (std::vector<int>{1, 1}));
    EXPECT_EQ(chunks_of("E|t*16|t*16|L"), (std::vector<int>{0, 16, 16, 0}));
}

TEST(PipelineLayout, RefusesWhatMegatronCoreRefusesSayingWhere) {
    const struct {
        const char* text;
        const char* says;
    } cases[] = {
        {"Et|tx|L", "character 5 is \"x\""},
        {"", "is empty"},
        {"Et | L", "character 3 is \" \""},  // Megatron-core drops commas only
        {"Et|(tt|L", "\"(\" at character 4 is never closed"},
        {"E(t)|L", "has no \"*n\" after it"},
        {"E|((t)*2)*2|L", "groups nest"},
        {"E|*3|L", "follows no letter"},
        {"Et*|L", "is not followed by a count"},
        {"EE|tL", "embedding (E) twice"},
        {"Et|tLt", "after the loss"},
        {"tE|L", "before the embedding"},
        {"Et|mtL", "a transformer layer (t) after an MTP layer (m)"},
        {"Et*99999999|L", "over 1000000"},
        {"E(t*1000|)*2000L", "more than 1000000 letters"},
    };
    for (const auto& c : cases) {
        const std::string error = parse_error(c.text);
        EXPECT_NE(error.find(c.says), std::string::npos) << c.text << ": " << error;
        // Every message shows what is allowed.
        EXPECT_NE(error.find("allowed: chunks of E (embedding)"), std::string::npos) << c.text << ": " << error;
    }
}

TEST(PipelineLayout, ChecksTheLayoutAgainstTheModelAndTheStages) {
    const auto ds = *ptd::parse_pipeline_layout("Et|(tt|)*30mL");
    EXPECT_TRUE(ptd::check_pipeline_layout(ds, 8, 4, 61, 1));
    auto message = [&](const std::string& text, int pp, int vpp, int layers, int mtp) {
        const auto checked = ptd::check_pipeline_layout(*ptd::parse_pipeline_layout(text), pp, vpp, layers, mtp);
        EXPECT_FALSE(checked) << text;
        return checked ? std::string() : checked.error();
    };
    EXPECT_NE(message("Et|(tt|)*30mL", 8, 2, 61, 1).find("has 32 chunks; allowed: pp·vpp = 8·2 = 16"), std::string::npos);
    EXPECT_NE(message("Et|(tt|)*30mL", 8, 4, 62, 1).find("holds 61 transformer layers (t), but the model has 62"),
              std::string::npos);
    EXPECT_NE(message("Et|(tt|)*30mL", 8, 4, 61, 0).find("holds 1 MTP layers (m), but the model has mtp_layers = 0"),
              std::string::npos);
    EXPECT_NE(message("Ettt|(tt|)*29,m|L", 8, 4, 61, 1).find("places MTP layers (m) outside the last chunk"), std::string::npos);
    EXPECT_NE(message("t|Et|tt|L", 2, 2, 4, 0).find("the embedding (E) outside the first chunk"), std::string::npos);
    EXPECT_NE(message("Et|tt|t|t", 2, 2, 5, 0).find("the loss (L) nowhere"), std::string::npos);
}

TEST(PipelineLayout, WritesASplitCompactlyAndReadsItBack) {
    const ptd::PipelineLayout ds = ptd::layout_of_split(deepseek_h100_split(), 1);
    EXPECT_EQ(ptd::format_pipeline_layout(ds), "Et|(t*2|)*30mL");
    EXPECT_EQ(chunks_of(ptd::format_pipeline_layout(ds)), deepseek_h100_split());
    // Two equal chunks stay written out; empty chunks repeat too.
    EXPECT_EQ(ptd::format_pipeline_layout(ptd::layout_of_split({3, 4, 4, 5}, 0)), "Et*3|t*4|t*4|t*5L");
    EXPECT_EQ(ptd::format_pipeline_layout(ptd::layout_of_split({1, 0, 0, 0, 1}, 0)), "Et|(|)*3tL");
    EXPECT_EQ(chunks_of("Et|(|)*3tL"), (std::vector<int>{1, 0, 0, 0, 1}));
}

// Point 8 of issue 29: layers that do not divide by pp·vpp name every way out, now with a layout
// string that counts the embedding, the loss and the MTP layer as a layer — and it loads.
TEST(PipelineLayout, TheSplitErrorOffersALayoutStringThatLoads) {
    const std::string bare = job_text({.preset = "deepseek-v3",
                                       .nodes = 128,
                                       .parallel = "tp = 2\npp = 8\nvpp = 4\nep = 64\nexpert_tp = 1\nsequence_parallel = true\n",
                                       .training = "framework = \"megatron\"\nmicro_batch = 1\nglobal_batch = 16384\n"});
    const std::string message = refusal_of_text(bare, "ds.toml");
    EXPECT_NE(message.find("pipeline_layout = \"Et|(t*2|)*30mL\" (Megatron-core's layout string: the embedding, the "
                           "loss and each MTP layer count as a layer)"),
              std::string::npos)
        << message;
    std::string fixed = bare;
    fixed.insert(fixed.find("[training]"), "pipeline_layout = \"Et|(t*2|)*30mL\"\n");
    EXPECT_EQ(job_from_text(fixed).parallel.layers_per_stage, deepseek_h100_split());
}

// DeepSeek-V3 on 128 DGX H100 nodes with the H100 recipes' layout, written as Megatron-LM's
// --pipeline-model-parallel-layout; `parallel_extra`: more [parallel] lines.
std::string deepseek_job(const std::string& layout_line, const std::string& parallel_extra = "") {
    return job_text({.preset = "deepseek-v3",
                     .nodes = 128,
                     .parallel = "tp = 2\npp = 8\nep = 64\nexpert_tp = 1\nsequence_parallel = true\nrecompute = \"selective\"\n"
                                 "recompute_modules = [\"mla_up_proj\", \"mlp\"]\n" + layout_line + parallel_extra,
                     .training = "framework = \"megatron\"\nmicro_batch = 1\nglobal_batch = 16384\n"});
}

TEST(PipelineLayout, TheJobKeyGivesTheSplitAndTheVirtualStages) {
    const JobSpec job = job_from_text(deepseek_job("pipeline_layout = \"Et|(tt|)*30mL\"\n"));
    EXPECT_EQ(job.parallel.vpp, 4);  // detected from the string, as Megatron-core does
    EXPECT_EQ(job.parallel.layers_per_stage, deepseek_h100_split());
    // Saving keeps the string as written, and not the list it gave.
    const std::string saved = ptd::save_job_toml(job);
    EXPECT_NE(saved.find("pipeline_layout = \"Et|(tt|)*30mL\""), std::string::npos) << saved;
    EXPECT_EQ(saved.find("layers_per_stage"), std::string::npos) << saved;
    EXPECT_EQ(reloaded(saved).parallel, job.parallel);
    // The same split as a list gives the same estimate: a chunk may hold no transformer layer.
    std::string list;
    for (int l : deepseek_h100_split()) list += (list.empty() ? "" : ", ") + std::to_string(l);
    const JobSpec listed = job_from_text(deepseek_job("vpp = 4\nlayers_per_stage = [" + list + "]\n"));
    const ptd::Estimate a = ptd::estimate_job(job), b = ptd::estimate_job(listed);
    EXPECT_EQ(a.step_s, b.step_s);
    EXPECT_TRUE(std::isfinite(a.step_s) && a.step_s > 0);
    ASSERT_EQ(a.stages.size(), 8u);
    EXPECT_EQ(a.stages.back().layers, 6);  // stage 7: three chunks of two and the MTP / loss chunk
    EXPECT_GT(a.stages.back().chunks.back().fwd.compute, 0.0);  // the output layer, MTP and loss
}

TEST(PipelineLayout, ABadStringOrAConflictIsRefusedAtItsKey) {
    expect_refused(ptd::load_job_text(deepseek_job("pipeline_layout = \"Et|(tt|)*30mX\"\n"), "ds.toml", presets()),
                   "parallel.pipeline_layout: got \"Et|(tt|)*30mX\": character 13 is \"X\"", "ds.toml:");
    expect_refused(ptd::load_job_text(deepseek_job("pipeline_layout = \"Et|(tt|)*30mL\"\n", "vpp = 2\n"), "ds.toml", presets()),
                   "has 32 chunks; allowed: pp·vpp = 8·2 = 16", "ds.toml");
    expect_refused(ptd::load_job_text(deepseek_job("pipeline_layout = \"Et|(tt|)*30mL\"\nlayers_per_stage = [61]\n"),
                                      "ds.toml", presets()),
                   "parallel.pipeline_layout: written together with parallel.layers_per_stage", "ds.toml:");
    expect_refused(ptd::load_job_text(deepseek_job("pipeline_layout = \"Et|(tt|)*30mL\"\n",
                                                   "account_for_loss_in_pipeline_split = true\n"),
                                      "ds.toml", presets()),
                   "written with account_for_*_in_pipeline_split", "ds.toml");
    // A negative entry in the list is refused as such.
    const std::string negative = refusal_of_text(deepseek_job("vpp = 4\nlayers_per_stage = [-1, 62]\n"), "ds.toml");
    EXPECT_NE(negative.find("parallel.layers_per_stage"), std::string::npos) << negative;
}

TEST(PipelineLayout, MegatronExportsWriteTheStringAndTorchtitanItsModuleLists) {
    const JobSpec job = job_from_text(deepseek_job("pipeline_layout = \"Et|(tt|)*30mL\"\n"));
    const auto args = megatron_args(export_text(job, ptd::ExportFormat::megatron));
    EXPECT_EQ(value_of(args, "--pipeline-model-parallel-layout"), "\"Et|(tt|)*30mL\"");
    EXPECT_NE(export_text(job, ptd::ExportFormat::nemo).find("pipeline_model_parallel_layout = \"Et|(tt|)*30mL\""),
              std::string::npos);
    // Llama 3 8B with the embedding and the loss in chunks of their own: torchtitan's module
    // lists give them theirs.
    const JobSpec llama = job_from_text(job_text({.preset = "llama3-8b",
                                                  .nodes = 1,
                                                  .parallel = "tp = 2\npp = 2\npipeline_layout = \"E|t*16|t*16|L\"\n",
                                                  .training = "framework = \"torchtitan\"\nmicro_batch = 1\nglobal_batch = 64\n"}));
    EXPECT_EQ(llama.parallel.layers_per_stage, (std::vector<int>{0, 16, 16, 0}));
    const std::string titan = export_text(llama, ptd::ExportFormat::torchtitan_toml);
    EXPECT_NE(titan.find("module_fqns_per_model_part = [[\"tok_embeddings\"], [\"layers.0\""), std::string::npos) << titan;
    EXPECT_NE(titan.find("[\"norm\", \"output\"]]"), std::string::npos) << titan;
}

TEST(PipelineLayout, APlanWithAnotherSplitDropsTheString) {
    const JobSpec job = job_from_text(deepseek_job("pipeline_layout = \"Et|(tt|)*30mL\"\n"));
    ptd::PlanEntry same;
    same.choice = ptd::layout_choice_of(job);
    same.layers_per_stage = job.parallel.layers_per_stage;
    EXPECT_EQ(ptd::apply_plan_entry(job, same).parallel.pipeline_layout, "Et|(tt|)*30mL");
    ptd::PlanEntry other = same;
    other.choice.vpp = 1;
    other.layers_per_stage = {8, 8, 8, 8, 8, 8, 8, 5};
    const JobSpec planned = ptd::apply_plan_entry(job, other);
    EXPECT_TRUE(planned.parallel.pipeline_layout.empty());
    EXPECT_TRUE(ptd::validate_job(planned).empty());
}

}  // namespace

// ttsplit: torchtitan's own split of the layers over pp·vpp chunks, by the date of its code.
namespace {
constexpr int kBefore = 202412, kToday = 0;
}

TEST(PipelineLayout, TorchtitanOfDecember2024SplitsAsGenerateSplitPoints) {
    // The first chunk layers / chunks, the middle ones one more while the remainder lasts, the
    // last the rest (pipelining_utils.py generate_split_points).
    EXPECT_EQ(ptd::torchtitan_default_split(126, 8, kBefore), (std::vector<int>{15, 16, 16, 16, 16, 16, 16, 15}));
    EXPECT_EQ(ptd::torchtitan_default_split(80, 3, kBefore), (std::vector<int>{26, 27, 27}));
    EXPECT_EQ(ptd::torchtitan_default_split(32, 4, kBefore), (std::vector<int>{8, 8, 8, 8}));
    // A remainder of chunks − 1 fills every middle chunk and leaves the last one more.
    EXPECT_EQ(ptd::torchtitan_default_split(11, 4, kBefore), (std::vector<int>{2, 3, 3, 3}));
    // "Total stages cannot be greater than the number of layers".
    EXPECT_TRUE(ptd::torchtitan_default_split(4, 5, kBefore).empty());
}

TEST(PipelineLayout, TodaysTorchtitanWeighsTheEmbeddingAndTheOutputAsALayerEach) {
    // generate_llm_fqn_per_model_part(chunks, layers, 1, 1): layers + 2 spread evenly, the
    // remainder on the first chunks, one fewer transformer layer on the first and the last.
    EXPECT_EQ(ptd::torchtitan_default_split(32, 4, kToday), (std::vector<int>{8, 9, 8, 7}));
    EXPECT_EQ(ptd::torchtitan_default_split(126, 16, kToday)[0], 7);
    EXPECT_EQ(ptd::torchtitan_default_split(80, 3, kToday), (std::vector<int>{27, 27, 26}));
    EXPECT_EQ(ptd::torchtitan_default_split(32, 4, ptd::kTorchtitanWeightedSplitFrom), (std::vector<int>{8, 9, 8, 7}));
    // One stage holds everything; a first chunk of the embedding alone is torchtitan's too.
    EXPECT_EQ(ptd::torchtitan_default_split(32, 1, kToday), (std::vector<int>{32}));
    EXPECT_EQ(ptd::torchtitan_default_split(4, 6, kToday), (std::vector<int>{0, 1, 1, 1, 1, 0}));
    // More stages than layers + 2 raise there.
    EXPECT_TRUE(ptd::torchtitan_default_split(4, 7, kToday).empty());
    for (int layers : {1, 7, 32, 61, 126})
        for (int chunks = 1; chunks <= layers + 2; ++chunks)
            for (int version : {kBefore, kToday}) {
                const std::vector<int> split = ptd::torchtitan_default_split(layers, chunks, version);
                if (split.empty()) continue;
                EXPECT_EQ((int)split.size(), chunks);
                EXPECT_EQ(std::accumulate(split.begin(), split.end(), 0), layers) << layers << " over " << chunks;
                EXPECT_GE(*std::min_element(split.begin(), split.end()), 0);
            }
}
