// test_studio.cpp — ptd-studio's view-model, driven without a window: picking ranks on
// the grid, the groups a hovered rank outlines, field errors after edits, colours.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <unistd.h>
#include <vector>

#include "commands.h"
#include "live_model.h"
#include "ptd/model/estimate.h"
#include "ptd/spec/cluster_profile.h"
#include "ptd/spec/stack_defaults.h"
#include "run_prediction.h"
#include "schedule_model.h"
#include "studio_state.h"
#include "profile_test_util.h"
#include "studio_test_util.h"

using namespace ptd;
using namespace ptd::studio;

namespace {

StudioState default_state(float w = 1000, float h = 600) { return ptd_test::default_studio_state(w, h); }

// A job of `nodes` × 8 GPUs with the given degrees (dp derived).
StudioState state_for(int nodes, int tp, int pp) {
    StudioState s = default_state();
    EXPECT_TRUE(edit_int(s, "cluster.nodes", nodes));
    EXPECT_TRUE(edit_int(s, "parallel.tp", tp));
    EXPECT_TRUE(edit_int(s, "parallel.pp", pp));
    return s;
}

std::vector<int32_t> to_vec(std::span<const int32_t> s) { return {s.begin(), s.end()}; }

}  // namespace

TEST(StudioState, DefaultJobIsValidWithALayout) {
    StudioState s = default_state();
    ASSERT_TRUE(job_valid(s)) << (s.diagnostics.empty() ? "" : s.diagnostics[0].message);
    ASSERT_TRUE(s.layout);
    EXPECT_EQ(s.layout->world, 32);
    EXPECT_EQ(s.job.parallel.tp, 4);
    EXPECT_EQ(s.job.parallel.pp, 2);
    EXPECT_EQ(s.job.parallel.dp, 4);
    const JobSummary j = job_summary(s);
    EXPECT_EQ(j.world, 32);
    EXPECT_EQ(j.grad_accum, 256 / 4);
    EXPECT_EQ(j.parameters, count_parameters(s.job.model).total);
    EXPECT_GT(j.parameters, 6'000'000'000);
}

// The Job panel's "Stack defaults" section: the stack's name and each key it supplied, as
// `ptd estimate` lists them.
// A job built in code (the default job) writes every key: none listed.
TEST(StudioState, StackDefaultsAreTheJobsStackAndWhatItSupplied) {
    StudioState s = default_state();
    EXPECT_TRUE(stack_defaults_view(s).rows.empty());
    auto job = load_job_arg(PTD_SOURCE_DIR "/assets/jobs/llama3-70b-h100.toml", s.presets);
    ASSERT_TRUE(job) << job.error().str();
    s = make_state(s.presets, *job);
    const StackDefaultsView v = stack_defaults_view(s);
    EXPECT_EQ(v.stack, "Megatron-LM command line, today");
    std::string keys;
    for (const StackDefault& d : v.rows) {
        keys += d.key + " = " + d.value + "\n";
        EXPECT_FALSE(d.source.empty()) << d.key;
    }
    EXPECT_NE(keys.find("parallel.overlap_grad_reduce = false\n"), std::string::npos) << keys;
    // An edit derives the job again; a layout edit touches no key of the list.
    const size_t before = v.rows.size();  // v.rows points into the job, which the edit derives anew
    ASSERT_TRUE(edit_int(s, "parallel.tp", 4));
    EXPECT_EQ(stack_defaults_view(s).rows.size(), before) << "an unrelated edit keeps the list";
}

// spdef: on NeMo sequence parallelism follows TP until the user ticks it; then it is the job's
// own, kept through later edits and saved.
TEST(StudioState, SequenceParallelFollowsTheStackUntilChosen) {
    auto job = load_job_arg(PTD_SOURCE_DIR "/assets/jobs/llama3-70b-h100.toml", default_state().presets);
    ASSERT_TRUE(job) << job.error().str();
    JobSpec nemo = *job;
    nemo.training.framework = Framework::nemo;
    nemo.origin.stack_keys_written &= ~stack_key_bit(StackKey::sequence_parallel);
    StudioState s = make_state(default_state().presets, nemo);
    ASSERT_TRUE(edit_int(s, "parallel.tp", 4));
    EXPECT_TRUE(s.job.parallel.sequence_parallel) << "the stack's: TP 4 on NeMo";
    set_sequence_parallel(s, false);
    ASSERT_TRUE(edit_int(s, "parallel.tp", 8));
    EXPECT_FALSE(s.job.parallel.sequence_parallel) << "chosen: kept through the edit";
    EXPECT_NE(save_job_toml(s.job).find("sequence_parallel = false"), std::string::npos);
}

TEST(StudioState, PickRankInsideCellsAndNotBetween) {
    StudioState s = default_state();
    const GridGeometry g = grid_geometry(s);
    ASSERT_EQ(g.cols, 8);
    ASSERT_EQ(g.rows, 4);
    ASSERT_GT(g.cell_w, 10);
    ASSERT_GT(g.gap_x, 0);
    ASSERT_GT(g.gap_y, 0);
    for (int r = 0; r < g.world; ++r) {
        const float x = g.cell_x(r), y = g.cell_y(r);
        EXPECT_EQ(pick_rank(s, x + g.cell_w * 0.5f, y + g.cell_h * 0.5f), r) << "centre of rank " << r;
        EXPECT_EQ(pick_rank(s, x + 0.5f, y + 0.5f), r) << "top-left corner of rank " << r;
        EXPECT_EQ(pick_rank(s, x + g.cell_w - 0.5f, y + g.cell_h - 0.5f), r) << "bottom-right of rank " << r;
    }
    // In the gap right of a cell, and below a node row.
    EXPECT_EQ(pick_rank(s, g.cell_x(0) + g.cell_w + g.gap_x * 0.5f, g.cell_y(0) + 2), -1);
    EXPECT_EQ(pick_rank(s, g.cell_x(0) + 2, g.cell_y(0) + g.cell_h + g.gap_y * 0.5f), -1);
    // Over the node labels, the header, right of the last GPU, below the last node.
    EXPECT_EQ(pick_rank(s, g.label_w * 0.5f, g.cell_y(0) + 2), -1);
    EXPECT_EQ(pick_rank(s, g.cell_x(0) + 2, g.header_h * 0.5f), -1);
    EXPECT_EQ(pick_rank(s, g.cell_x(7) + g.pitch_x() + g.cell_w * 0.5f, g.cell_y(0) + 2), -1);
    EXPECT_EQ(pick_rank(s, g.cell_x(0) + 2, g.cell_y(31) + g.pitch_y() + 2), -1);
    EXPECT_EQ(pick_rank(s, -5, -5), -1);
    EXPECT_EQ(pick_rank(s, 1e6f, 1e6f), -1);
}

TEST(StudioState, PickRankFollowsPanAndZoom) {
    StudioState s = state_for(64, 8, 4);  // 512 ranks: taller than the canvas
    ASSERT_TRUE(job_valid(s));
    layout_zoom(s, 500, 300, 3);
    layout_pan(s, -40, -900);
    const GridGeometry g = grid_geometry(s);
    EXPECT_GT(s.view.pan_y, 0);
    // The first rank whose cell is fully visible (Fit's cells fill the width, so the zoom
    // scrolled the grid sideways too).
    const int row = (int)std::ceil((g.header_h - g.origin_y) / g.pitch_y());
    const int col = std::max(0, (int)std::ceil((g.label_w - g.origin_x) / g.pitch_x()));
    ASSERT_LT(col, g.cols);
    const int r = row * g.cols + col;
    ASSERT_LT(r, g.world);
    EXPECT_EQ(pick_rank(s, g.cell_x(r) + g.cell_w * 0.5f, g.cell_y(r) + g.cell_h * 0.5f), r);
    // Zoom keeps the point under the mouse on the same rank.
    const float mx = g.cell_x(r) + g.cell_w * 0.5f, my = g.cell_y(r) + g.cell_h * 0.5f;
    layout_zoom(s, mx, my, 1);
    EXPECT_EQ(pick_rank(s, mx, my), r);
}

TEST(StudioState, HoverYieldsTheSameGroupsAsMakeLayout) {
    StudioState s = default_state();
    LayoutRequest req;
    req.tp = 4;
    req.pp = 2;
    req.dp = 4;
    req.gpus_per_node = 8;
    auto L = make_layout(req);
    ASSERT_TRUE(L);
    const GridGeometry g = grid_geometry(s);
    for (int r : {0, 5, 13, 22, 31}) {
        layout_hover(s, g.cell_x(r) + 3, g.cell_y(r) + 3);
        ASSERT_EQ(s.view.hover, r);
        ASSERT_EQ(active_rank(s), r);
        for (Dim d : {DIM_TP, DIM_PP, DIM_DP}) {
            const GroupSet& gs = L->groups[d];
            const int gi = gs.group_of[r];
            const std::vector<int32_t> expect(gs.begin(gi), gs.end(gi));
            EXPECT_EQ(to_vec(group_members(s, r, d)), expect) << "rank " << r << " dim " << dim_name(d);
            EXPECT_TRUE(std::ranges::find(expect, r) != expect.end());
        }
    }
    // Rank 13 of tp4·pp2·dp4 (Megatron order): TP group 12..15, PP group {13, 29}, DP {1, 5, 9, 13}.
    EXPECT_EQ(to_vec(group_members(s, 13, DIM_TP)), (std::vector<int32_t>{12, 13, 14, 15}));
    EXPECT_EQ(to_vec(group_members(s, 13, DIM_PP)), (std::vector<int32_t>{13, 29}));
    EXPECT_EQ(to_vec(group_members(s, 13, DIM_DP)), (std::vector<int32_t>{1, 5, 9, 13}));
    const std::string tip = rank_tooltip(s, 13);
    EXPECT_NE(tip.find("rank 13"), std::string::npos);
    EXPECT_NE(tip.find("tp 1, cp 0, dp 3, pp 0"), std::string::npos);
    EXPECT_NE(tip.find("node 1"), std::string::npos);
    EXPECT_NE(tip.find("local GPU 5"), std::string::npos);

    // Leaving the canvas clears the hover; a click pins, a second click unpins.
    layout_hover(s, -1, -1);
    EXPECT_EQ(active_rank(s), -1);
    layout_click(s, g.cell_x(13) + 3, g.cell_y(13) + 3);
    EXPECT_EQ(s.view.pinned, 13);
    layout_hover(s, g.cell_x(2) + 3, g.cell_y(2) + 3);
    EXPECT_EQ(active_rank(s), 13) << "a pinned rank wins over the hovered one";
    layout_click(s, g.cell_x(13) + 3, g.cell_y(13) + 3);
    EXPECT_EQ(s.view.pinned, -1);
}

TEST(StudioState, InvalidTpShowsAFieldError) {
    StudioState s = default_state();
    EXPECT_TRUE(field_error(s, "parallel.tp").empty());
    ASSERT_TRUE(edit_int(s, "parallel.tp", 3));
    EXPECT_FALSE(job_valid(s));
    EXPECT_FALSE(s.layout) << "no stale grid for an invalid job";
    const std::string msg = field_error(s, "parallel.tp");
    ASSERT_FALSE(msg.empty());
    EXPECT_NE(msg.find("got 3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("allowed"), std::string::npos) << msg;
    EXPECT_EQ(pick_rank(s, 200, 100), -1);
    // Back to a valid value: the error and the layout follow at once.
    ASSERT_TRUE(edit_int(s, "parallel.tp", 8));
    EXPECT_TRUE(field_error(s, "parallel.tp").empty());
    ASSERT_TRUE(job_valid(s));
    EXPECT_EQ(s.job.parallel.dp, 2) << "dp is re-derived: 32 / (8 · 2)";
    EXPECT_EQ(s.layout->degree[DIM_TP], 8);
}

TEST(StudioState, OutOfRangeValuesAreFieldErrorsNotCrashes) {
    StudioState s = default_state();
    ASSERT_TRUE(edit_int(s, "parallel.tp", 0));
    EXPECT_NE(field_error(s, "parallel.tp").find("got 0; allowed: 1"), std::string::npos);
    ASSERT_TRUE(edit_int(s, "parallel.tp", 4));
    ASSERT_TRUE(edit_int(s, "model.heads", 0));
    EXPECT_FALSE(field_error(s, "model.heads").empty());
    EXPECT_FALSE(job_valid(s));
    EXPECT_FALSE(edit_int(s, "parallel.nonsense", 1));
}

TEST(StudioState, EditingDpMakesItGivenAndAutoDerivesAgain) {
    StudioState s = default_state();
    EXPECT_TRUE(is_derived(s, "parallel.dp"));
    ASSERT_TRUE(edit_int(s, "parallel.dp", 2));
    EXPECT_TRUE(s.job.origin.dp_given);
    EXPECT_FALSE(is_derived(s, "parallel.dp"));
    // 4·2·2 = 16 ≠ 32 GPUs.
    EXPECT_FALSE(field_error(s, "parallel.dp").empty());
    ASSERT_TRUE(set_derived(s, "parallel.dp", true));
    EXPECT_EQ(s.job.parallel.dp, 4);
    EXPECT_TRUE(job_valid(s));

    EXPECT_TRUE(s.job.origin.global_batch_given);  // the default job gives 256
    ASSERT_TRUE(edit_int(s, "training.global_batch", 130));
    EXPECT_NE(field_error(s, "training.global_batch").find("not divisible"), std::string::npos);
    ASSERT_TRUE(set_derived(s, "training.global_batch", true));
    EXPECT_EQ(s.job.training.global_batch, s.job.training.micro_batch * s.job.parallel.dp);
    EXPECT_TRUE(job_valid(s));
}

// batchchoice: the micro_batch row's auto box chooses the micro-batch (the default job writes
// its global batch, 256 on dp 4), and an edit of the value pins it again.
TEST(StudioState, MicroBatchAutoChoosesAndAnEditPinsIt) {
    StudioState s = default_state();
    EXPECT_FALSE(is_derived(s, "training.micro_batch"));  // the default job writes it
    ASSERT_TRUE(set_derived(s, "training.micro_batch", true));
    EXPECT_TRUE(is_derived(s, "training.micro_batch"));
    EXPECT_TRUE(job_valid(s));
    const bool listed = std::any_of(s.job.origin.stack_defaults.begin(), s.job.origin.stack_defaults.end(),
                                    [](const StackDefault& d) { return d.key == "training.micro_batch"; });
    EXPECT_TRUE(listed);
    EXPECT_EQ(s.job.training.global_batch % (s.job.training.micro_batch * s.job.parallel.dp), 0);
    ASSERT_TRUE(edit_int(s, "training.micro_batch", 2));
    EXPECT_FALSE(is_derived(s, "training.micro_batch"));
    EXPECT_EQ(s.job.training.micro_batch, 2);
}

TEST(StudioState, UnderivableDpIsReportedOnce) {
    StudioState s = default_state();
    ASSERT_TRUE(edit_int(s, "cluster.nodes", 3));
    ASSERT_TRUE(edit_int(s, "cluster.gpus_per_node", 3));  // 9 GPUs, tp·pp = 8
    EXPECT_EQ(field_errors(s, "parallel.dp").size(), 1u);
    EXPECT_NE(field_error(s, "parallel.dp").find("cannot derive dp"), std::string::npos);
}

TEST(StudioState, ColourIndexFollowsColourBy) {
    StudioState s = default_state();
    const RankLayout& L = *s.layout;
    set_colour_by(s, ColourBy::pp);
    EXPECT_EQ(colour_count(s), 2);
    for (int r = 0; r < L.world; ++r) EXPECT_EQ(colour_index(s, r), L.ranks[r].coord[DIM_PP]) << r;
    set_colour_by(s, ColourBy::dp);
    EXPECT_EQ(colour_count(s), 4);
    for (int r = 0; r < L.world; ++r) EXPECT_EQ(colour_index(s, r), L.ranks[r].coord[DIM_DP]) << r;
    set_colour_by(s, ColourBy::tp);
    EXPECT_EQ(colour_count(s), 8);
    for (int r = 0; r < L.world; ++r) EXPECT_EQ(colour_index(s, r), L.groups[DIM_TP].group_of[r]) << r;
}

TEST(StudioState, PresetsAndEnums) {
    StudioState s = default_state();
    const std::vector<std::string> names = s.presets.model_names();
    ASSERT_FALSE(names.empty());
    EXPECT_FALSE(s.job_panel.model_edited);
    ASSERT_TRUE(edit_int(s, "model.seq_len", 2048));
    EXPECT_TRUE(s.job_panel.model_edited) << "the default job's model differs from its preset now";
    ASSERT_TRUE(set_model_preset(s, "tiny-gpt"));
    EXPECT_EQ(s.job.model.name, "tiny-gpt");
    EXPECT_FALSE(s.job_panel.model_edited);
    EXPECT_FALSE(set_model_preset(s, "no-such-model"));
    ASSERT_TRUE(set_model_preset(s, "llama2-7b"));
    ASSERT_TRUE(edit_int(s, "model.layers", 30));
    EXPECT_TRUE(s.job_panel.model_edited);
    EXPECT_TRUE(job_valid(s));
    ASSERT_TRUE(edit_int(s, "model.layers", 31));  // 31 layers do not split into 2 stages
    EXPECT_NE(field_error(s, "parallel.pp").find("not divisible"), std::string::npos);
    set_precision(s, Precision::fp16);
    set_recompute(s, Recompute::full);
    EXPECT_EQ(s.job.training.precision, Precision::fp16);
    EXPECT_EQ(s.job.parallel.recompute, Recompute::full);
    set_order(s, "tp-xx-pp");
    EXPECT_NE(field_error(s, "parallel.order").find("xx"), std::string::npos);
    revert(s);
    EXPECT_TRUE(job_valid(s));
    EXPECT_EQ(s.job.model.layers, 32);
}

// "Fit" fills the canvas for any nodes × GPUs shape: the grid reaches (nearly) the canvas's
// bottom unless cells would be over twice as tall as wide, and its right edge unless cells
// reach their widest or the grid scrolls sideways (72 GPUs a node).
TEST(StudioState, FitFillsTheCanvasForEveryShape) {
    for (auto [nodes, gpus] : {std::pair{8, 8}, {4, 8}, {2, 72}, {16, 8}, {32, 4}, {3, 16}}) {
        StudioState s = default_state(1000, 600);
        ASSERT_TRUE(edit_int(s, "cluster.gpus_per_node", gpus));
        ASSERT_TRUE(edit_int(s, "cluster.nodes", nodes));
        ASSERT_TRUE(edit_int(s, "training.global_batch", nodes * gpus));  // a multiple of dp = world / 8
        ASSERT_TRUE(s.layout) << s.diagnostics[0].message;
        const GridGeometry g = grid_geometry(s);
        const float avail_w = 1000 - g.label_w - 12, avail_h = 600 - g.header_h - 12;
        EXPECT_TRUE(g.content_h() >= 0.95f * avail_h || g.cell_h >= 2 * g.cell_w)
            << nodes << " x " << gpus << ": " << g.content_h() << " of " << avail_h << " px high";
        EXPECT_TRUE(g.content_w() >= 0.95f * avail_w || g.cell_w >= 150 || g.content_w() > avail_w)
            << nodes << " x " << gpus << ": " << g.content_w() << " of " << avail_w << " px wide";
        // Hit-testing follows the stretched cells.
        const int last = s.layout->world - 1;
        EXPECT_EQ(pick_rank(s, g.cell_x(0) + g.cell_w - 1, g.cell_y(0) + g.cell_h - 1), 0);
        if (g.content_w() <= avail_w && g.content_h() <= avail_h) {
            EXPECT_EQ(pick_rank(s, g.cell_x(last) + 1, g.cell_y(last) + g.cell_h - 1), last);
        }
    }
}

TEST(StudioState, SpanningTpGroupsAreFlagged) {
    StudioState s = default_state();
    EXPECT_TRUE(layout_warnings(s).empty());
    ASSERT_TRUE(edit_int(s, "parallel.tp", 16));  // heads 32 % 16 == 0, TP groups of 16 on 8-GPU nodes
    ASSERT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    EXPECT_TRUE(tp_group_spans_nodes(s, 0));
    ASSERT_EQ(layout_warnings(s).size(), 1u);
    EXPECT_NE(layout_warnings(s)[0].find("TP groups span nodes"), std::string::npos);
}

// Issue 33's Mixtral job: 8x7B on 32 nodes × 8 GPUs, tp 2 × pp 4 (dp 32), ep 8.
StudioState mixtral_ep_state() {
    StudioState s = default_state();
    EXPECT_TRUE(set_model_preset(s, "mixtral-8x7b"));
    EXPECT_TRUE(edit_int(s, "cluster.nodes", 32));
    EXPECT_TRUE(edit_int(s, "parallel.tp", 2));
    EXPECT_TRUE(edit_int(s, "parallel.pp", 4));
    EXPECT_TRUE(edit_int(s, "parallel.ep", 8));
    return s;
}

TEST(StudioEveryDimension, HeadlineNamesEveryDegree) {
    StudioState s = mixtral_ep_state();
    ASSERT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    EXPECT_NE(layout_headline(s).find("256 ranks = tp 2 \xC3\x97 cp 1 \xC3\x97 dp 32 \xC3\x97 pp 4, ep 8, order"),
              std::string::npos)
        << layout_headline(s);
    ASSERT_TRUE(edit_int(s, "parallel.expert_tp", 1));  // MoE parallel folding: expert tp 1 ≠ tp 2
    ASSERT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    EXPECT_NE(layout_headline(s).find("ep 8, expert tp 1"), std::string::npos) << layout_headline(s);
    ASSERT_TRUE(edit_int(s, "parallel.vpp", 2));
    EXPECT_NE(layout_headline(s).find("expert tp 1, vpp 2"), std::string::npos) << layout_headline(s);
}

TEST(StudioEveryDimension, EpAndExpertTpAreFieldsWithTheJobChecks) {
    ASSERT_TRUE(find_int_field("parallel.ep"));
    ASSERT_TRUE(find_int_field("parallel.expert_tp"));
    StudioState s = mixtral_ep_state();
    // ep must divide dp·cp = 32: validate_job's message, under the field (as `ptd validate` prints it).
    ASSERT_TRUE(edit_int(s, "parallel.ep", 3));
    EXPECT_FALSE(job_valid(s));
    EXPECT_FALSE(field_error(s, "parallel.ep").empty());
    EXPECT_FALSE(s.layout);
    ASSERT_TRUE(edit_int(s, "parallel.ep", 0));  // below the TOML loader's range
    EXPECT_NE(field_error(s, "parallel.ep").find("allowed: 1"), std::string::npos) << field_error(s, "parallel.ep");
    ASSERT_TRUE(edit_int(s, "parallel.ep", 8));
    EXPECT_TRUE(job_valid(s));
    // expert_tp 3 divides neither tp·cp·dp with ep nor the experts' width.
    ASSERT_TRUE(edit_int(s, "parallel.expert_tp", 3));
    EXPECT_FALSE(field_error(s, "parallel.expert_tp").empty());
}

TEST(StudioEveryDimension, ColourByEpGroupAndCpRank) {
    StudioState s = mixtral_ep_state();
    ASSERT_TRUE(s.layout);
    set_colour_by(s, ColourBy::ep);
    EXPECT_EQ(colour_count(s), 32);  // 256 ranks / ep 8
    // Default order tp-cp-ep-dp-pp: rank 0's EP group is 0, 2, ..., 14 (stride tp = 2).
    EXPECT_EQ(to_vec(ep_group_members(s, 0)), (std::vector<int32_t>{0, 2, 4, 6, 8, 10, 12, 14}));
    EXPECT_EQ(colour_index(s, 0), colour_index(s, 14));
    EXPECT_NE(colour_index(s, 0), colour_index(s, 1));
    EXPECT_STREQ(colour_by_label(ColourBy::ep), "EP group");
    ASSERT_TRUE(edit_int(s, "parallel.ep", 1));
    ASSERT_TRUE(edit_int(s, "parallel.cp", 2));  // dp 16
    ASSERT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    set_colour_by(s, ColourBy::cp);
    EXPECT_EQ(colour_count(s), 2);
    EXPECT_EQ(colour_index(s, 0), 0);
    EXPECT_EQ(colour_index(s, 2), 1);  // cp varies next after tp 2
}

TEST(StudioEveryDimension, TooltipAndWarningsNameEpAndCpGroupsAcrossNodes) {
    StudioState s = mixtral_ep_state();
    const std::string tip = rank_tooltip(s, 0);
    EXPECT_NE(tip.find("EP group: 0, 2, 4, 6, 8, 10, 12, 14  (spans nodes!)"), std::string::npos) << tip;
    std::vector<std::string> w = layout_warnings(s);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_NE(w[0].find("32 of 32 EP groups span nodes: their token all-to-alls cross"), std::string::npos) << w[0];
    // tp 8 fills a node, so CP 2's pairs (stride 8) sit on two nodes.
    ASSERT_TRUE(edit_int(s, "parallel.ep", 1));
    ASSERT_TRUE(edit_int(s, "parallel.tp", 8));
    ASSERT_TRUE(edit_int(s, "parallel.cp", 2));
    ASSERT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    EXPECT_NE(rank_tooltip(s, 0).find("CP group: 0, 8  (spans nodes!)"), std::string::npos) << rank_tooltip(s, 0);
    w = layout_warnings(s);
    ASSERT_EQ(w.size(), 1u);
    EXPECT_NE(w[0].find("128 of 128 CP groups span nodes"), std::string::npos) << w[0];
}

TEST(StudioEveryDimension, FoldedExpertTpGroupsAreConsecutiveRanks) {
    StudioState s = mixtral_ep_state();
    ASSERT_TRUE(edit_int(s, "parallel.tp", 4));
    ASSERT_TRUE(edit_int(s, "parallel.expert_tp", 2));
    ASSERT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    EXPECT_EQ(folded_expert_tp(s), 2);
    set_colour_by(s, ColourBy::expert_tp);
    EXPECT_EQ(colour_count(s), 128);
    EXPECT_EQ(colour_index(s, 4), colour_index(s, 5));
    EXPECT_NE(colour_index(s, 5), colour_index(s, 6));
    EXPECT_NE(rank_tooltip(s, 5).find("expert TP group: 4, 5"), std::string::npos) << rank_tooltip(s, 5);
}

TEST(StudioState, LargeLayoutsPickInConstantTime) {
    // 2048 nodes × 8 = 16,384 ranks.
    StudioState s = state_for(2048, 8, 8);
    ASSERT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    ASSERT_EQ(s.layout->world, 16384);
    layout_pan(s, 0, -1e9f);  // scroll to the bottom
    const GridGeometry g = grid_geometry(s);
    const int last = 16383;
    EXPECT_EQ(pick_rank(s, g.cell_x(last) + 2, g.cell_y(last) + 2), last);
}

// ---- the Schedule tab's model (schedule_model.h) -------------------------------------------

// Rows = the ranks of one data-parallel replica: exactly the ranks make_layout puts in that
// replica, each drawn with its own stage's predicted blocks; an index past dp − 1 falls back
// to the stages.
TEST(StudioSchedule, ReplicaRowsAreThatReplicasRanksOnTheirStages) {
    StudioState s = default_state();  // tp 4 · pp 2 · dp 4
    schedule_refresh(s);
    ASSERT_TRUE(s.schedule.predicted);
    EXPECT_EQ(gantt_rows(s.schedule).size(), 2u);  // stages
    schedule_set_rows(s, 1);
    const std::vector<GanttRow> rows = gantt_rows(s.schedule);
    ASSERT_EQ(rows.size(), 8u);
    std::vector<int> want;
    for (int r = 0; r < s.layout->world; ++r)
        if (s.layout->ranks[(size_t)r].coord[DIM_DP] == 1) want.push_back(r);
    for (size_t k = 0; k < rows.size(); ++k) {
        EXPECT_EQ(rows[k].rank, want[k]);
        EXPECT_EQ(rows[k].id, s.layout->ranks[(size_t)want[k]].coord[DIM_PP]) << rows[k].label;
        EXPECT_FALSE(rows[k].measured);
        EXPECT_NE(rows[k].label.find("rank " + std::to_string(want[k])), std::string::npos) << rows[k].label;
    }
    const int hit = block_at(s.schedule, rows[0], s.schedule.predicted->blocks[0].start_s);
    EXPECT_GE(hit, 0);
    EXPECT_NE(block_tooltip(s.schedule, rows[0], hit).find("on rank " + std::to_string(want[0])), std::string::npos);

    // Measured rows follow the choice: only the chosen replica's ranks.
    ScheduleViewState& v = s.schedule;
    v.measured.clear();
    v.measured_stage.clear();
    v.measured_dp.clear();
    for (int r = 0; r < s.layout->world; ++r) {
        TimelineBlock b;
        b.row = r;
        b.micro_batch = 0;
        b.end_s = 1e-3;
        v.measured.push_back(b);
        v.measured_stage.push_back(s.layout->ranks[(size_t)r].coord[DIM_PP]);
        v.measured_dp.push_back(s.layout->ranks[(size_t)r].coord[DIM_DP]);
    }
    v.show_measured = true;
    std::vector<int> measured_rows;
    for (const GanttRow& row : gantt_rows(v))
        if (row.measured) measured_rows.push_back(row.id);
    EXPECT_EQ(measured_rows, want);

    schedule_set_rows(s, 4);  // dp = 4: replicas 0..3
    EXPECT_EQ(v.replica, -1);
    // With the stages as rows, the measured ranks of one representative replica (replica 0)
    // by default, every replica's when asked (issue 33 point 3).
    std::vector<int> representative, everyone;
    for (const GanttRow& row : gantt_rows(v))
        if (row.measured) representative.push_back(row.id);
    v.measured_all_replicas = true;
    for (const GanttRow& row : gantt_rows(v))
        if (row.measured) everyone.push_back(row.id);
    v.measured_all_replicas = false;
    ASSERT_FALSE(representative.empty());
    for (int r : representative) EXPECT_EQ(s.layout->ranks[(size_t)r].coord[DIM_DP], 0) << "rank " << r;
    EXPECT_EQ(everyone.size(), (size_t)s.layout->world);
    EXPECT_EQ(representative.size() * (size_t)s.layout->degree[DIM_DP], everyone.size());
    v.show_measured = false;
    EXPECT_EQ(gantt_rows(v).size(), 2u);
}

// Llama-3 70B as assets/jobs/llama3-70b-h100.toml lays it out (256 micro-batches × vpp 5 on
// 4 stages): at 1,000 px a block is a fraction of a pixel, so each stage is a few labelled
// spans (warm-up forwards, the 1F1B steady state, the cool-down backwards), the bubble
// stays a gap, and zooming in to a few blocks gives them back one by one.
TEST(StudioSchedule, LevelOfDetailMergesNarrowBlocksIntoLabelledSpans) {
    StudioState s = default_state();
    auto job = load_job_arg(PTD_SOURCE_DIR "/assets/jobs/llama3-70b-h100.toml", s.presets);
    ASSERT_TRUE(job) << job.error().str();
    s = make_state(s.presets, *job);
    schedule_refresh(s);
    ASSERT_TRUE(s.schedule.predicted);
    const Timeline& t = *s.schedule.predicted;
    ASSERT_EQ(t.micro_batches, 256);
    ASSERT_EQ(t.vpp, 5);
    const std::vector<GanttRow> rows = gantt_rows(s.schedule);
    ASSERT_EQ(rows.size(), 4u);
    const double px_per_s = 1000 / t.makespan_s;
    for (const GanttRow& row : rows) {
        const std::vector<GanttSpan> spans = gantt_spans(s.schedule, row, 0, t.makespan_s, px_per_s);
        size_t blocks = 0;
        for (const TimelineBlock& b : t.blocks) blocks += b.row == row.id && b.stream == kStreamCompute && !nested_block(b);
        int merged = 0;
        for (const GanttSpan& sp : spans) merged += sp.blocks;
        EXPECT_EQ((size_t)merged, blocks) << row.label << ": every compute block in exactly one span";
        EXPECT_LT(spans.size(), 40u) << row.label << ": " << blocks << " blocks";
        // Spans do not overlap and keep the order of time; the bubble is what lies between.
        for (size_t k = 1; k < spans.size(); ++k) EXPECT_GE(spans[k].start_s, spans[k - 1].end_s - 1e-12);
        bool steady = false;
        for (const GanttSpan& sp : spans) steady |= span_label(sp).starts_with("F/B") && sp.mb_hi - sp.mb_lo > 200;
        EXPECT_TRUE(steady) << row.label << ": 1F1B's steady state as one F/B span";
        EXPECT_GT(row_idle_share(s.schedule, row), 0.0);
        EXPECT_LT(row_idle_share(s.schedule, row), 0.5);
    }
    // Stage 0 starts with its warm-up forwards: a forward-only span from micro-batch 0.
    const std::vector<GanttSpan> first = gantt_spans(s.schedule, rows[0], 0, t.makespan_s, px_per_s);
    EXPECT_EQ(span_label(first[0]).substr(0, 4), "F 0-") << span_label(first[0]);
    // Zoomed to the first few blocks, each block is wide enough to be its own span again.
    const TimelineBlock* b0 = nullptr;
    for (const TimelineBlock& b : t.blocks)
        if (b.row == 0 && b.stream == kStreamCompute) { b0 = &b; break; }
    ASSERT_TRUE(b0);
    const double window = 10 * (b0->end_s - b0->start_s);
    const std::vector<GanttSpan> zoomed = gantt_spans(s.schedule, rows[0], 0, window, 1000 / window);
    ASSERT_FALSE(zoomed.empty());
    for (const GanttSpan& sp : zoomed) EXPECT_EQ(sp.blocks, 1);
    EXPECT_EQ(span_label(zoomed[0]), "F 0");
}

// The Compare tab: the pinned job beside the edited one, equal until an edit; stages past the
// shorter pipeline read "-" on that side; unpinning empties it.
TEST(StudioCompare, PinnedJobBesideTheEditedOne) {
    StudioState s = default_state();  // tp 4 · pp 2 · dp 4
    EXPECT_TRUE(compare_view_rows(s).empty());
    ASSERT_TRUE(compare_pin_job(s));
    std::vector<CompareRow> rows = compare_view_rows(s);
    ASSERT_FALSE(rows.empty());
    for (const CompareRow& r : rows) EXPECT_FALSE(r.differs) << r.label << ": " << r.a << " vs " << r.b;
    ASSERT_TRUE(edit_int(s, "parallel.pp", 4));  // dp 2
    ASSERT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    rows = compare_view_rows(s);
    auto row = [&](const std::string& label) {
        for (const CompareRow& r : rows)
            if (r.label == label) return r;
        ADD_FAILURE() << "no row " << label;
        return CompareRow{};
    };
    EXPECT_TRUE(row("degrees").differs);
    EXPECT_EQ(row("degrees").b, "tp 4 \xC3\x97 cp 1 \xC3\x97 dp 2 \xC3\x97 pp 4");
    EXPECT_EQ(row("stage 3").a, "-");
    EXPECT_NE(row("stage 3").b, "-");
    EXPECT_TRUE(row("step").differs);
    EXPECT_NE(row("step").better, 0);
    EXPECT_TRUE(row("bubble").differs);
    compare_unpin(s);
    EXPECT_TRUE(compare_view_rows(s).empty());
}

// Wheel zoom keeps the time under the cursor in place, never zooms out past the whole
// span, and panning stays inside it.
TEST(StudioSchedule, ZoomKeepsTheCursorTimeAndPanStaysInside) {
    ScheduleViewState v;
    const double span = 10;
    EXPECT_EQ(schedule_view(v, span), std::make_pair(0.0, span));
    schedule_zoom(v, span, 4.0, 0.5);
    auto [a, b] = schedule_view(v, span);
    EXPECT_DOUBLE_EQ(b - a, 5.0);
    EXPECT_DOUBLE_EQ((4.0 - a) / (b - a), 0.4);  // 4 s was 40% across, and still is
    schedule_pan(v, span, 100);
    std::tie(a, b) = schedule_view(v, span);
    EXPECT_DOUBLE_EQ(a, 5.0);
    EXPECT_DOUBLE_EQ(b, 10.0);
    schedule_pan(v, span, -100);
    EXPECT_DOUBLE_EQ(schedule_view(v, span).first, 0.0);
    for (int k = 0; k < 200; ++k) schedule_zoom(v, span, 3.0, 0.5);
    std::tie(a, b) = schedule_view(v, span);
    EXPECT_NEAR(b - a, span * 1e-6, 1e-12);
    EXPECT_LE(a, 3.0);
    EXPECT_GE(b, 3.0);
    schedule_zoom(v, span, 3.0, 1e9);  // all the way out: the whole span
    EXPECT_EQ(schedule_view(v, span), std::make_pair(0.0, span));
    schedule_zoom(v, span, 1.0, 0.1);
    schedule_fit(v);
    EXPECT_EQ(schedule_view(v, span), std::make_pair(0.0, span));
}

// A measured backward holds its recompute forwards: it is compared with the predicted
// recompute + backward, and the recompute parts themselves are never marked.
TEST(StudioSchedule, MeasuredBackwardIsComparedWithRecomputePlusBackward) {
    StudioState s = default_state();
    set_recompute(s, Recompute::full);
    schedule_refresh(s);
    ASSERT_TRUE(s.schedule.predicted);
    ScheduleViewState& v = s.schedule;
    const TimelineBlock* rec = nullptr;
    const TimelineBlock* bwd = nullptr;
    for (size_t k = 0; k + 1 < v.predicted->blocks.size(); ++k)
        if (v.predicted->blocks[k].kind == BlockKind::recompute && v.predicted->blocks[k + 1].kind == BlockKind::backward) {
            rec = &v.predicted->blocks[k];
            bwd = &v.predicted->blocks[k + 1];
            break;
        }
    ASSERT_TRUE(rec && bwd);
    TimelineBlock m = *bwd;  // measured: the whole backward, recompute inside
    m.row = 0;
    m.start_s = rec->start_s;
    TimelineBlock part = *rec;
    part.row = 0;
    part.end_s = part.start_s + (rec->end_s - rec->start_s) * 0.1;  // one layer's recompute
    v.measured = {part, m};
    v.measured_stage = {bwd->row, bwd->row};
    v.measured_dp = {0, 0};
    EXPECT_FALSE(measured_differs(v, 1));
    EXPECT_FALSE(measured_differs(v, 0));
    EXPECT_TRUE(nested_block(v.measured[0]));
    EXPECT_FALSE(nested_block(v.measured[1]));
    v.measured[1].end_s += 2 * (bwd->end_s - rec->start_s);  // really off: marked
    EXPECT_TRUE(measured_differs(v, 1));
}

// Measured blocks the prediction carries inside its blocks (TP collectives, p2p transfers)
// are not marked as differing; a forward without any counterpart is.
TEST(StudioSchedule, CommunicationPartsAreNotMarked) {
    StudioState s = default_state();
    schedule_refresh(s);
    ASSERT_TRUE(s.schedule.predicted);
    ScheduleViewState& v = s.schedule;
    for (BlockKind k : {BlockKind::tp_comm, BlockKind::send, BlockKind::recv, BlockKind::forward}) {
        TimelineBlock b;
        b.kind = k;
        b.stream = k == BlockKind::forward ? kStreamCompute : kStreamComm;
        b.micro_batch = 999;  // no predicted block has it
        b.end_s = 1e-3;
        v.measured = {b};
        v.measured_stage = {0};
        v.measured_dp = {0};
        EXPECT_EQ(measured_differs(v, 0), k == BlockKind::forward) << block_kind_name(k);
    }
}

// The red outlines compare with estimate_job's prediction of the edited job with its cluster
// profile; the legend says which, and whether the Live tab's run was predicted the same.
TEST(StudioSchedule, OutlinesCompareWithTheLiveRunsPrediction) {
    StudioState s = default_state();
    schedule_refresh(s);
    ASSERT_TRUE(s.schedule.predicted);
    const Estimate est = estimate_job(s.job);
    EXPECT_NEAR(s.schedule.predicted->makespan_s, est.step_s, 1e-12 * est.step_s);
    SchedulePredictionNote note = schedule_prediction_note(s);
    EXPECT_NE(note.text.find("estimate_job of the edited job with the \"" + s.job.cluster.gpu.name + "\" preset's figures"),
              std::string::npos)
        << note.text;
    EXPECT_FALSE(note.not_the_live_runs);

    // The Live tab shows a run of this job and its measured timeline is under the chart.
    RunManifest m;
    m.run_id = "run-x";
    live_begin(s.live.run, m);
    s.live.dir = "/tmp/runs/run-x";
    s.live.run.prediction = predict_run(s.job, std::nullopt);
    s.schedule.run_dir = s.live.dir;
    s.schedule.show_measured = true;
    note = schedule_prediction_note(s);
    EXPECT_NE(note.text.find("the same prediction the Live tab draws dashed"), std::string::npos) << note.text;
    EXPECT_FALSE(note.not_the_live_runs);
    // A run of another job (the tiny one): said, with the run's own prediction.
    auto tiny = load_job_arg("@tiny", s.presets);
    ASSERT_TRUE(tiny);
    s.live.run.prediction = predict_run(*tiny, std::nullopt);
    note = schedule_prediction_note(s);
    EXPECT_TRUE(note.not_the_live_runs);
    EXPECT_NE(note.text.find("not this run's own prediction"), std::string::npos) << note.text;

    // The default job runs on another framework: a profile for it is named as not used.
    const std::string dir = ::testing::TempDir() + "/ptd_studio_schedule_" + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    ptd_test::write_profile(dir + "/h100.toml", ptd_test::fitted_profile(s.job.cluster.gpu.name, "2026-11-29T06:40:00Z", 600e12, 3e12));
    s.job.cluster.profile = dir + "/h100.toml";
    ++s.revision;
    schedule_refresh(s);
    ASSERT_TRUE(s.schedule.profile) << s.schedule.profile_error;
    EXPECT_NE(schedule_prediction_note(s).text.find("preset's figures (the profile " + s.schedule.profile->path + " is not used: "),
              std::string::npos)
        << schedule_prediction_note(s).text;
    s.live.run.prediction = predict_run(s.job, std::nullopt);  // the same figures: the same prediction
    EXPECT_FALSE(schedule_prediction_note(s).not_the_live_runs) << schedule_prediction_note(s).text;

    // A job the bundled engine runs, with a CPU profile: the chart predicts with it and names it.
    auto engine_job = load_job_arg(PTD_SOURCE_DIR "/assets/jobs/tiny-gpt-8rank.toml", s.presets);
    ASSERT_TRUE(engine_job) << engine_job.error().str();
    StudioState e = ptd::studio::make_state(s.presets, *engine_job);
    ptd_test::write_profile(dir + "/cpu.toml", ptd_test::fitted_profile("cpu", "2026-11-29T06:40:00Z", 20e9, 10e9));
    e.job.cluster.profile = dir + "/cpu.toml";
    ++e.revision;
    schedule_refresh(e);
    ASSERT_TRUE(e.schedule.predicted);
    ASSERT_TRUE(e.schedule.profile) << e.schedule.profile_error;
    EXPECT_EQ(e.schedule.profile->measured_at, "2026-11-29T06:40:00Z");
    auto loaded = load_profile(dir + "/cpu.toml");
    ASSERT_TRUE(loaded) << loaded.error().str();
    const Estimate with = estimate_job(e.job, &*loaded);
    EXPECT_TRUE(with.time_from_profile);
    EXPECT_NEAR(e.schedule.predicted->makespan_s, with.step_s, 1e-12 * with.step_s);
    EXPECT_NE(schedule_prediction_note(e).text.find("the profile " + e.schedule.profile->path + " (measured 2026-11-29T06:40:00Z)"),
              std::string::npos)
        << schedule_prediction_note(e).text;
    // The Live run of it predicted without the profile: not the same prediction; with it: the same.
    live_begin(e.live.run, m);
    e.live.dir = "/tmp/runs/run-x";
    e.schedule.run_dir = e.live.dir;
    e.schedule.show_measured = true;
    e.live.run.prediction = predict_run(e.job, std::nullopt);
    EXPECT_TRUE(schedule_prediction_note(e).not_the_live_runs) << schedule_prediction_note(e).text;
    e.live.run.prediction = predict_run(e.job, JobProfile{dir + "/cpu.toml", "cluster.profile", *loaded});
    EXPECT_FALSE(schedule_prediction_note(e).not_the_live_runs) << schedule_prediction_note(e).text;
    std::filesystem::remove_all(dir);
}
