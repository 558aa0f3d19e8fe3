// test_studio.cpp — ptd-studio's view-model, driven without a window: picking ranks on
// the grid, the groups a hovered rank outlines, field errors after edits, colours.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "studio_state.h"

using namespace ptd;
using namespace ptd::studio;

namespace {

StudioState default_state(float w = 1000, float h = 600) {
    const PresetCatalog& presets = embedded_presets();
    StudioState s = make_state(presets, default_job(presets));
    layout_resize(s, w, h);
    return s;
}

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
    // The first rank whose cell is fully visible.
    const int row = (int)std::ceil((g.header_h - g.origin_y) / g.pitch_y());
    const int r = row * g.cols + 1;
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

TEST(StudioState, SpanningTpGroupsAreFlagged) {
    StudioState s = default_state();
    EXPECT_TRUE(layout_warnings(s).empty());
    ASSERT_TRUE(edit_int(s, "parallel.tp", 16));  // heads 32 % 16 == 0, TP groups of 16 on 8-GPU nodes
    ASSERT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    EXPECT_TRUE(tp_group_spans_nodes(s, 0));
    ASSERT_EQ(layout_warnings(s).size(), 1u);
    EXPECT_NE(layout_warnings(s)[0].find("TP groups span nodes"), std::string::npos);
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
