// test_layout.cpp — rank layout: Megatron-LM's documented examples, other orders, context
// and expert parallelism, node spanning, error messages, a property test against a
// straightforward re-derivation of Megatron's RankGenerator, and a 100k-rank build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ptd/layout/job_layout.h"
#include "ptd/layout/layout.h"
#include "ptd/spec/presets.h"

using namespace ptd;

namespace {

using Groups = std::vector<std::vector<int>>;

Groups groups_of(const GroupSet& g) {
    Groups out;
    for (int i = 0; i < g.count; ++i) out.emplace_back(g.begin(i), g.end(i));
    return out;
}

RankLayout build(LayoutRequest req) {
    auto l = make_layout(req);
    EXPECT_TRUE(l.has_value()) << (l ? "" : l.error().str());
    if (!l) return RankLayout{};
    return std::move(*l);
}

// Straightforward (slow) re-derivation of Megatron-LM's masked orthogonal rank groups:
// `sizes` are the dimension degrees in order (fastest first), `mask` picks the group's
// dimensions. Group g's fixed coordinates are g decomposed over the unmasked dims.
Groups reference_groups(const std::vector<int>& sizes, const std::vector<bool>& mask) {
    std::vector<int> stride(sizes.size());
    int world = 1;
    for (size_t i = 0; i < sizes.size(); ++i) {
        stride[i] = world;
        world *= sizes[i];
    }
    int group_size = 1;
    for (size_t i = 0; i < sizes.size(); ++i)
        if (mask[i]) group_size *= sizes[i];
    Groups out;
    for (int g = 0; g < world / group_size; ++g) {
        std::vector<int> members;
        for (int k = 0; k < group_size; ++k) {
            int rank = 0, gi = g, ki = k;
            for (size_t i = 0; i < sizes.size(); ++i) {
                if (mask[i]) {
                    rank += (ki % sizes[i]) * stride[i];
                    ki /= sizes[i];
                } else {
                    rank += (gi % sizes[i]) * stride[i];
                    gi /= sizes[i];
                }
            }
            members.push_back(rank);
        }
        out.push_back(members);
    }
    return out;
}

std::string all_messages(const Error& e) {
    std::string s;
    for (const auto& d : e.diagnostics) s += d.key + ": " + d.message + "\n";
    return s;
}

bool has_diag(const Error& e, const std::string& key, const std::string& part) {
    for (const auto& d : e.diagnostics)
        if (d.key == key && d.message.find(part) != std::string::npos) return true;
    return false;
}

}  // namespace

// ---- order strings ----------------------------------------------------------------------

TEST(LayoutOrder, DimNames) {
    EXPECT_STREQ(dim_name(DIM_TP), "tp");
    EXPECT_STREQ(dim_name(DIM_CP), "cp");
    EXPECT_STREQ(dim_name(DIM_DP), "dp");
    EXPECT_STREQ(dim_name(DIM_PP), "pp");
}

TEST(LayoutOrder, ParsesAndFillsMissingInDefaultOrder) {
    using A = std::array<Dim, DIM_COUNT>;
    auto p = [](const std::string& s) {
        auto r = parse_rank_order(s);
        EXPECT_TRUE(r.has_value()) << s << ": " << (r ? "" : r.error().str());
        return r ? *r : A{};
    };
    EXPECT_EQ(p("tp-cp-ep-dp-pp"), (A{DIM_TP, DIM_CP, DIM_DP, DIM_PP}));
    EXPECT_EQ(p(""), (A{DIM_TP, DIM_CP, DIM_DP, DIM_PP}));
    EXPECT_EQ(p("tp-pp-dp"), (A{DIM_TP, DIM_PP, DIM_DP, DIM_CP}));
    EXPECT_EQ(p("dp-tp-pp"), (A{DIM_DP, DIM_TP, DIM_PP, DIM_CP}));
    EXPECT_EQ(p("pp"), (A{DIM_PP, DIM_TP, DIM_CP, DIM_DP}));
    EXPECT_EQ(p("ep"), (A{DIM_TP, DIM_CP, DIM_DP, DIM_PP}));
    EXPECT_EQ(p("pp-dp-cp-tp"), (A{DIM_PP, DIM_DP, DIM_CP, DIM_TP}));
    EXPECT_EQ(p("TP-PP-DP"), (A{DIM_TP, DIM_PP, DIM_DP, DIM_CP}));  // Megatron lower-cases
}

TEST(LayoutOrder, OrderUsedSpellsOutEpPlacement) {
    EXPECT_EQ(build({}).order_used, "tp-cp-ep-dp-pp");
    EXPECT_EQ(build({.order = ""}).order_used, "tp-cp-ep-dp-pp");
    EXPECT_EQ(build({.order = "tp-pp-dp"}).order_used, "tp-pp-ep-dp-cp");
    EXPECT_EQ(build({.order = "tp-dp-ep-pp"}).order_used, "tp-dp-ep-pp-cp");
    EXPECT_FALSE(build({.order = "tp-dp-ep-pp"}).ep_before_dp);
    EXPECT_TRUE(build({.order = "ep-tp-dp-pp"}).ep_before_dp);
}

// ---- Megatron's documented examples -------------------------------------------------------

// Megatron-LM: 8 GPUs, TP=2, DP=2, PP=2, default order.
TEST(LayoutMegatron, EightGpusTp2Dp2Pp2) {
    RankLayout l = build({.tp = 2, .cp = 1, .dp = 2, .pp = 2});
    ASSERT_EQ(l.world, 8);
    EXPECT_EQ(groups_of(l.groups[DIM_TP]), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
    EXPECT_EQ(groups_of(l.groups[DIM_DP]), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
    EXPECT_EQ(groups_of(l.groups[DIM_PP]), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
    EXPECT_EQ(groups_of(l.groups[DIM_CP]),
              (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
    EXPECT_EQ(l.groups[DIM_TP].group_of, (std::vector<int32_t>{0, 0, 1, 1, 2, 2, 3, 3}));
    EXPECT_EQ(l.groups[DIM_DP].group_of, (std::vector<int32_t>{0, 1, 0, 1, 2, 3, 2, 3}));
    EXPECT_EQ(l.groups[DIM_PP].group_of, (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3}));
    // rank = tp + dp·TP + pp·TP·DP
    for (int r = 0; r < 8; ++r) {
        EXPECT_EQ(l.ranks[r].coord[DIM_TP], r % 2);
        EXPECT_EQ(l.ranks[r].coord[DIM_DP], (r / 2) % 2);
        EXPECT_EQ(l.ranks[r].coord[DIM_PP], r / 4);
        EXPECT_EQ(l.ranks[r].coord[DIM_CP], 0);
    }
    EXPECT_EQ(l.rank_of(1, 0, 1, 1), 7);
    EXPECT_EQ(l.nodes, 1);
    EXPECT_EQ(l.tp_groups_spanning_nodes, 0);
}

// Megatron-LM initialize_model_parallel docstring: 16 GPUs, TP=2, PP=4 (so DP=2).
TEST(LayoutMegatron, SixteenGpusTp2Pp4) {
    RankLayout l = build({.tp = 2, .dp = 2, .pp = 4});
    ASSERT_EQ(l.world, 16);
    EXPECT_EQ(groups_of(l.groups[DIM_TP]),
              (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
    EXPECT_EQ(groups_of(l.groups[DIM_DP]),
              (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
    EXPECT_EQ(groups_of(l.groups[DIM_PP]),
              (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
    EXPECT_EQ(l.groups[DIM_TP].count, 8);
    EXPECT_EQ(l.groups[DIM_DP].count, 8);
    EXPECT_EQ(l.groups[DIM_PP].count, 4);
    // Two 8-GPU boxes: TP and DP groups stay inside a box, every PP group spans both.
    EXPECT_EQ(l.nodes, 2);
    EXPECT_EQ(l.tp_groups_spanning_nodes, 0);
    EXPECT_EQ(l.groups[DIM_DP].spans_nodes, (std::vector<uint8_t>(8, 0)));
    EXPECT_EQ(l.groups[DIM_PP].spans_nodes, (std::vector<uint8_t>(4, 1)));
}

// Megatron-LM docstring for context_parallel_size: 8 GPUs, TP=4, CP=2 → CP groups
// [0,4] [1,5] [2,6] [3,7].
TEST(LayoutMegatron, ContextParallelDocstring) {
    RankLayout l = build({.tp = 4, .cp = 2});
    EXPECT_EQ(groups_of(l.groups[DIM_CP]), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
    EXPECT_EQ(groups_of(l.groups[DIM_TP]), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

// Megatron-LM generate_masked_orthogonal_rank_groups docstring: order tp-pp-dp, sizes
// 2-2-2 → dp groups [0,4] [1,5] [2,6] [3,7].
TEST(LayoutMegatron, TpPpDpDocstring) {
    RankLayout l = build({.tp = 2, .dp = 2, .pp = 2, .order = "tp-pp-dp"});
    EXPECT_EQ(groups_of(l.groups[DIM_DP]), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
    EXPECT_EQ(groups_of(l.groups[DIM_PP]), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
    EXPECT_EQ(groups_of(l.groups[DIM_TP]), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
}

// ---- other orders ---------------------------------------------------------------------------

// Calculon's order: rank = tp + pp·TP + dp·TP·PP.
TEST(LayoutOrders, TpPpDpFormula) {
    const int TP = 4, PP = 3, DP = 5;
    RankLayout l = build({.tp = TP, .dp = DP, .pp = PP, .order = "tp-pp-dp"});
    ASSERT_EQ(l.world, TP * PP * DP);
    EXPECT_EQ(l.stride[DIM_TP], 1);
    EXPECT_EQ(l.stride[DIM_PP], TP);
    EXPECT_EQ(l.stride[DIM_DP], TP * PP);
    for (int tp = 0; tp < TP; ++tp)
        for (int pp = 0; pp < PP; ++pp)
            for (int dp = 0; dp < DP; ++dp) {
                int r = tp + pp * TP + dp * TP * PP;
                ASSERT_EQ(l.rank_of(tp, 0, dp, pp), r);
                EXPECT_EQ(l.ranks[r].coord[DIM_TP], tp);
                EXPECT_EQ(l.ranks[r].coord[DIM_PP], pp);
                EXPECT_EQ(l.ranks[r].coord[DIM_DP], dp);
            }
    // DP group 0: tp=0, pp=0 → ranks 0, 12, 24, 36, 48.
    EXPECT_EQ(groups_of(l.groups[DIM_DP])[0], (std::vector<int>{0, 12, 24, 36, 48}));
    EXPECT_EQ(groups_of(l.groups[DIM_PP])[0], (std::vector<int>{0, 4, 8}));
}

// DP fastest: rank = dp + tp·DP + pp·DP·TP. TP groups are strided by DP.
TEST(LayoutOrders, DpTpPpFormula) {
    const int TP = 4, PP = 2, DP = 2;
    RankLayout l = build({.tp = TP, .dp = DP, .pp = PP, .order = "dp-tp-pp"});
    for (int r = 0; r < l.world; ++r) {
        EXPECT_EQ(l.ranks[r].coord[DIM_DP], r % DP);
        EXPECT_EQ(l.ranks[r].coord[DIM_TP], (r / DP) % TP);
        EXPECT_EQ(l.ranks[r].coord[DIM_PP], r / (DP * TP));
    }
    EXPECT_EQ(groups_of(l.groups[DIM_TP]), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
    EXPECT_EQ(groups_of(l.groups[DIM_DP]), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
    EXPECT_EQ(groups_of(l.groups[DIM_PP])[0], (std::vector<int>{0, 8}));
}

// Context parallel between TP and DP: rank = tp + cp·TP + dp·TP·CP + pp·TP·CP·DP.
TEST(LayoutOrders, ContextParallelDefaultOrder) {
    const int TP = 2, CP = 2, DP = 3, PP = 2;
    RankLayout l = build({.tp = TP, .cp = CP, .dp = DP, .pp = PP});
    ASSERT_EQ(l.world, 24);
    for (int r = 0; r < l.world; ++r) {
        EXPECT_EQ(l.ranks[r].coord[DIM_TP], r % TP);
        EXPECT_EQ(l.ranks[r].coord[DIM_CP], (r / TP) % CP);
        EXPECT_EQ(l.ranks[r].coord[DIM_DP], (r / (TP * CP)) % DP);
        EXPECT_EQ(l.ranks[r].coord[DIM_PP], r / (TP * CP * DP));
    }
    EXPECT_EQ(groups_of(l.groups[DIM_CP])[0], (std::vector<int>{0, 2}));
    EXPECT_EQ(groups_of(l.groups[DIM_CP])[1], (std::vector<int>{1, 3}));
    EXPECT_EQ(groups_of(l.groups[DIM_CP])[2], (std::vector<int>{4, 6}));
    EXPECT_EQ(groups_of(l.groups[DIM_DP])[0], (std::vector<int>{0, 4, 8}));
    EXPECT_EQ(groups_of(l.groups[DIM_PP])[0], (std::vector<int>{0, 12}));
    EXPECT_EQ(l.groups[DIM_CP].count, 12);
}

// ---- expert layout --------------------------------------------------------------------------

TEST(LayoutExpert, Dp8Ep4DefaultOrder) {
    RankLayout l = build({.tp = 1, .dp = 8, .ep = 4});
    EXPECT_EQ(l.ep_groups.size, 4);
    EXPECT_EQ(l.expert_dp_groups.size, 2);
    EXPECT_EQ(groups_of(l.ep_groups), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
    EXPECT_EQ(groups_of(l.expert_dp_groups), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
    EXPECT_EQ(l.ep_groups.group_of, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1}));
    EXPECT_EQ(l.expert_dp_groups.group_of, (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3}));
}

// ep written after dp: expert-dp varies fastest inside the data-parallel ranks.
TEST(LayoutExpert, EpAfterDp) {
    RankLayout l = build({.tp = 1, .dp = 8, .ep = 4, .order = "tp-cp-dp-ep-pp"});
    EXPECT_EQ(groups_of(l.ep_groups), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
    EXPECT_EQ(groups_of(l.expert_dp_groups), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
}

// Megatron expert generator with TP=2, PP=2, DP=4, EP=2 (default order):
// expert rank = tp + TP·(ep + EP·(edp + EDP·pp)).
TEST(LayoutExpert, WithTpAndPp) {
    RankLayout l = build({.tp = 2, .dp = 4, .pp = 2, .ep = 2});
    ASSERT_EQ(l.world, 16);
    EXPECT_EQ(groups_of(l.ep_groups),
              (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
    EXPECT_EQ(groups_of(l.expert_dp_groups),
              (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}}));
}

// ep spans context-parallel ranks too (edp = dp·cp/ep).
TEST(LayoutExpert, WithContextParallel) {
    RankLayout l = build({.tp = 1, .cp = 2, .dp = 2, .ep = 4});
    EXPECT_EQ(groups_of(l.ep_groups), (Groups{{0, 1, 2, 3}}));
    EXPECT_EQ(groups_of(l.expert_dp_groups), (Groups{{0}, {1}, {2}, {3}}));
    RankLayout m = build({.tp = 2, .cp = 2, .dp = 2, .ep = 2});
    // data block of rank 0: 0, 2 (cp), 4, 6 (dp) → ep pairs [0,2] [4,6], edp pairs [0,4] [2,6]
    EXPECT_EQ(groups_of(m.ep_groups), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
    EXPECT_EQ(groups_of(m.expert_dp_groups), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

TEST(LayoutExpert, EpOneStillFilled) {
    RankLayout l = build({.tp = 2, .cp = 2, .dp = 2, .pp = 2});
    EXPECT_EQ(l.ep_groups.size, 1);
    EXPECT_EQ(l.ep_groups.count, 16);
    for (int r = 0; r < 16; ++r) {
        EXPECT_EQ(l.ep_groups.members[r], r);
        EXPECT_EQ(l.ep_groups.group_of[r], r);
    }
    // expert-dp = Megatron's "dp-cp" group: every rank with the same tp and pp.
    EXPECT_EQ(l.expert_dp_groups.size, 4);
    EXPECT_EQ(groups_of(l.expert_dp_groups)[0], (std::vector<int>{0, 2, 4, 6}));
    EXPECT_EQ(groups_of(l.expert_dp_groups)[3], (std::vector<int>{9, 11, 13, 15}));
}

// ---- nodes ------------------------------------------------------------------------------------

TEST(LayoutNodes, NodeAndLocalGpu) {
    RankLayout l = build({.tp = 4, .dp = 5, .gpus_per_node = 8});
    ASSERT_EQ(l.world, 20);
    EXPECT_EQ(l.nodes, 3);  // last node partly filled
    for (int r = 0; r < 20; ++r) {
        EXPECT_EQ(l.ranks[r].node, r / 8);
        EXPECT_EQ(l.ranks[r].local_gpu, r % 8);
    }
}

TEST(LayoutNodes, Tp16On8GpuNodesSpansEveryGroup) {
    RankLayout l = build({.tp = 16, .dp = 2, .pp = 2, .gpus_per_node = 8});
    EXPECT_EQ(l.groups[DIM_TP].count, 4);
    EXPECT_EQ(l.tp_groups_spanning_nodes, 4);
    EXPECT_EQ(l.groups[DIM_TP].spans_nodes, (std::vector<uint8_t>(4, 1)));
}

TEST(LayoutNodes, Tp8DefaultOrderSpansNone) {
    RankLayout l = build({.tp = 8, .dp = 4, .pp = 2, .gpus_per_node = 8});
    EXPECT_EQ(l.tp_groups_spanning_nodes, 0);
    EXPECT_EQ(l.groups[DIM_TP].spans_nodes, (std::vector<uint8_t>(8, 0)));
    // DP groups (stride 8) always cross nodes here.
    EXPECT_EQ(l.groups[DIM_DP].spans_nodes, (std::vector<uint8_t>(16, 1)));
}

TEST(LayoutNodes, DpFirstSpreadsTpAcrossNodes) {
    RankLayout l = build({.tp = 8, .dp = 2, .pp = 1, .gpus_per_node = 8, .order = "dp-tp-pp"});
    EXPECT_EQ(l.groups[DIM_TP].count, 2);
    EXPECT_EQ(groups_of(l.groups[DIM_TP])[0], (std::vector<int>{0, 2, 4, 6, 8, 10, 12, 14}));
    EXPECT_EQ(l.tp_groups_spanning_nodes, 2);
    EXPECT_EQ(l.groups[DIM_DP].spans_nodes, (std::vector<uint8_t>(8, 0)));
}

TEST(LayoutNodes, OddNodeSizes) {
    // 6 GPUs per node, TP=4: group [4..7] crosses node 0/1, [8..11] does not, ...
    RankLayout l = build({.tp = 4, .dp = 3, .gpus_per_node = 6});
    EXPECT_EQ(l.groups[DIM_TP].spans_nodes, (std::vector<uint8_t>{0, 1, 0}));
    EXPECT_EQ(l.tp_groups_spanning_nodes, 1);
    RankLayout one = build({.tp = 2, .dp = 2, .gpus_per_node = 1});
    EXPECT_EQ(one.nodes, 4);
    EXPECT_EQ(one.tp_groups_spanning_nodes, 2);
}

// ---- errors -----------------------------------------------------------------------------------

TEST(LayoutErrors, UnknownName) {
    auto r = parse_rank_order("tp-xx-pp");
    ASSERT_FALSE(r.has_value());
    ASSERT_EQ(r.error().diagnostics.size(), 1u);
    const Diagnostic& d = r.error().diagnostics[0];
    EXPECT_EQ(d.key, "parallel.order");
    EXPECT_NE(d.message.find("got \"tp-xx-pp\""), std::string::npos) << d.message;
    EXPECT_NE(d.message.find("unknown dimension \"xx\""), std::string::npos) << d.message;
    EXPECT_NE(d.message.find("allowed names: tp, cp, ep, dp, pp"), std::string::npos) << d.message;

    auto typo = parse_rank_order("tp-dpp-pp");
    ASSERT_FALSE(typo.has_value());
    EXPECT_NE(typo.error().str().find("unknown dimension \"dpp\""), std::string::npos);

    auto m = make_layout({.tp = 2, .order = "tp-zz"});
    ASSERT_FALSE(m.has_value());
    EXPECT_TRUE(has_diag(m.error(), "parallel.order", "unknown dimension \"zz\"")) << all_messages(m.error());
}

TEST(LayoutErrors, DuplicateAndEmptyNames) {
    auto r = parse_rank_order("tp-dp-tp");
    ASSERT_FALSE(r.has_value());
    EXPECT_TRUE(has_diag(r.error(), "parallel.order", "got \"tp-dp-tp\"")) << all_messages(r.error());
    EXPECT_TRUE(has_diag(r.error(), "parallel.order", "\"tp\" appears more than once")) << all_messages(r.error());
    EXPECT_TRUE(has_diag(r.error(), "parallel.order", "at most once"));

    auto ep2 = parse_rank_order("ep-tp-ep");
    ASSERT_FALSE(ep2.has_value());
    EXPECT_TRUE(has_diag(ep2.error(), "parallel.order", "\"ep\" appears more than once"));

    auto e = parse_rank_order("tp--pp");
    ASSERT_FALSE(e.has_value());
    EXPECT_TRUE(has_diag(e.error(), "parallel.order", "is empty")) << all_messages(e.error());
    EXPECT_FALSE(parse_rank_order("tp-pp-").has_value());
}

TEST(LayoutErrors, ZeroDegrees) {
    auto r = make_layout({.tp = 0, .dp = 2});
    ASSERT_FALSE(r.has_value());
    EXPECT_TRUE(has_diag(r.error(), "parallel.tp", "got 0")) << all_messages(r.error());
    EXPECT_TRUE(has_diag(r.error(), "parallel.tp", ">= 1"));

    auto all = make_layout({.tp = 0, .cp = -1, .dp = 0, .pp = 0, .ep = 0, .gpus_per_node = 0});
    ASSERT_FALSE(all.has_value());
    EXPECT_TRUE(has_diag(all.error(), "parallel.tp", "got 0"));
    EXPECT_TRUE(has_diag(all.error(), "parallel.cp", "got -1"));
    EXPECT_TRUE(has_diag(all.error(), "parallel.dp", "got 0"));
    EXPECT_TRUE(has_diag(all.error(), "parallel.pp", "got 0"));
    EXPECT_TRUE(has_diag(all.error(), "parallel.ep", "got 0"));
    EXPECT_TRUE(has_diag(all.error(), "cluster.gpus_per_node", "got 0")) << all_messages(all.error());
}

TEST(LayoutErrors, EpMustDivideDpTimesCp) {
    auto r = make_layout({.tp = 2, .dp = 8, .ep = 3});
    ASSERT_FALSE(r.has_value());
    EXPECT_TRUE(has_diag(r.error(), "parallel.ep", "got 3")) << all_messages(r.error());
    EXPECT_TRUE(has_diag(r.error(), "parallel.ep", "must divide dp·cp = 8"));
    EXPECT_TRUE(has_diag(r.error(), "parallel.ep", "allowed ep: 1, 2, 4, 8"));
    // ep may use context-parallel ranks: dp 2 × cp 2 = 4 allows ep 4.
    EXPECT_TRUE(make_layout({.cp = 2, .dp = 2, .ep = 4}).has_value());
    auto cp = make_layout({.cp = 3, .dp = 2, .ep = 4});
    ASSERT_FALSE(cp.has_value());
    EXPECT_TRUE(has_diag(cp.error(), "parallel.ep", "dp·cp = 6 (dp 2 × cp 3)")) << all_messages(cp.error());
}

TEST(LayoutErrors, AllProblemsTogetherAndWorldLimit) {
    auto r = make_layout({.tp = 0, .order = "tp-qq"});
    ASSERT_FALSE(r.has_value());
    EXPECT_TRUE(has_diag(r.error(), "parallel.tp", "got 0"));
    EXPECT_TRUE(has_diag(r.error(), "parallel.order", "unknown dimension \"qq\""));

    auto big = make_layout({.tp = 65536, .dp = 65536, .pp = 4});
    ASSERT_FALSE(big.has_value());
    EXPECT_TRUE(has_diag(big.error(), "parallel", "allowed: at most 16,777,216 ranks")) << all_messages(big.error());
    auto huge = make_layout({.tp = 1 << 30, .cp = 1 << 30, .dp = 1 << 30, .pp = 1 << 30});
    ASSERT_FALSE(huge.has_value());
    EXPECT_TRUE(has_diag(huge.error(), "parallel", "ranks")) << all_messages(huge.error());
    // Too-large worlds are reported without trying to list ep's allowed values.
    auto huge_ep = make_layout({.cp = 1 << 30, .dp = 1 << 30, .ep = 3});
    ASSERT_FALSE(huge_ep.has_value());
    EXPECT_TRUE(has_diag(huge_ep.error(), "parallel", "at most 16,777,216 ranks"));
}

// ---- properties over random shapes ------------------------------------------------------------

namespace {

// Every group set: a partition of the world, sorted members, numbering by smallest member,
// group_of and spans_nodes consistent.
void check_group_set(const GroupSet& g, const RankLayout& l, const std::string& what) {
    SCOPED_TRACE(what);
    const int world = l.world;
    ASSERT_EQ(g.size * g.count, world);
    ASSERT_EQ(g.members.size(), static_cast<size_t>(world));
    ASSERT_EQ(g.group_of.size(), static_cast<size_t>(world));
    ASSERT_EQ(g.spans_nodes.size(), static_cast<size_t>(g.count));
    std::vector<int> seen(world, 0);
    int prev_first = -1;
    for (int i = 0; i < g.count; ++i) {
        const int32_t* b = g.begin(i);
        ASSERT_GT(b[0], prev_first) << "groups not numbered by smallest member";
        prev_first = b[0];
        bool spans = false;
        for (int k = 0; k < g.size; ++k) {
            const int m = b[k];
            ASSERT_GE(m, 0);
            ASSERT_LT(m, world);
            ++seen[m];
            ASSERT_EQ(g.group_of[m], i);
            if (k > 0) {
                ASSERT_LT(b[k - 1], m) << "members not sorted";
            }
            spans |= m / l.req.gpus_per_node != b[0] / l.req.gpus_per_node;
        }
        ASSERT_EQ(g.spans_nodes[i], spans ? 1 : 0);
    }
    for (int r = 0; r < world; ++r) ASSERT_EQ(seen[r], 1) << "rank " << r;
    ASSERT_EQ(g.group_of[0], 0);
}

}  // namespace

TEST(LayoutProperties, RandomShapes) {
    std::mt19937 rng(20240611);
    auto pick = [&](std::vector<int> v) { return v[rng() % v.size()]; };
    int compared_with_megatron_expert = 0;
    for (int iter = 0; iter < 200; ++iter) {
        LayoutRequest req;
        req.tp = pick({1, 2, 3, 4, 8});
        req.cp = pick({1, 1, 2, 3});
        req.dp = pick({1, 2, 3, 4, 6});
        req.pp = pick({1, 2, 3, 4});
        std::vector<int> divs;
        for (int e = 1; e <= req.dp * req.cp; ++e)
            if (req.dp * req.cp % e == 0) divs.push_back(e);
        req.ep = pick(divs);
        req.gpus_per_node = pick({1, 2, 3, 4, 8});
        std::vector<std::string> names = {"tp", "cp", "ep", "dp", "pp"};
        std::shuffle(names.begin(), names.end(), rng);
        names.resize(1 + rng() % 5);  // some names left out
        req.order.clear();
        for (const auto& n : names) req.order += (req.order.empty() ? "" : "-") + n;
        SCOPED_TRACE("tp=" + std::to_string(req.tp) + " cp=" + std::to_string(req.cp) +
                     " dp=" + std::to_string(req.dp) + " pp=" + std::to_string(req.pp) +
                     " ep=" + std::to_string(req.ep) + " gpn=" + std::to_string(req.gpus_per_node) +
                     " order=" + req.order);

        auto res = make_layout(req);
        ASSERT_TRUE(res.has_value()) << res.error().str();
        const RankLayout& l = *res;
        const int world = req.tp * req.cp * req.dp * req.pp;
        ASSERT_EQ(l.world, world);
        ASSERT_EQ(l.ranks.size(), static_cast<size_t>(world));
        ASSERT_EQ(l.nodes, (world + req.gpus_per_node - 1) / req.gpus_per_node);

        // Filled-in order: names as written, then the missing ones in tp, cp, dp, pp order.
        std::vector<Dim> expect_order;
        auto dim_of = [](const std::string& n) {
            return n == "tp" ? DIM_TP : n == "cp" ? DIM_CP : n == "dp" ? DIM_DP : DIM_PP;
        };
        for (const auto& n : names)
            if (n != "ep") expect_order.push_back(dim_of(n));
        for (Dim d : {DIM_TP, DIM_CP, DIM_DP, DIM_PP})
            if (std::find(expect_order.begin(), expect_order.end(), d) == expect_order.end())
                expect_order.push_back(d);
        for (int i = 0; i < DIM_COUNT; ++i) ASSERT_EQ(l.order[i], expect_order[i]);

        // Coordinates within range, rank_of round-trips, node/local GPU.
        for (int r = 0; r < world; ++r) {
            const RankPlace& p = l.ranks[r];
            for (int d = 0; d < DIM_COUNT; ++d) {
                ASSERT_GE(p.coord[d], 0);
                ASSERT_LT(p.coord[d], l.degree[d]);
            }
            ASSERT_EQ(l.rank_of(p.coord[DIM_TP], p.coord[DIM_CP], p.coord[DIM_DP], p.coord[DIM_PP]), r);
            ASSERT_EQ(p.node, r / req.gpus_per_node);
            ASSERT_EQ(p.local_gpu, r % req.gpus_per_node);
        }

        // Dense groups: partition; members differ only in their own coordinate, which runs
        // 0..n-1; identical to Megatron's masked orthogonal groups for the filled-in order.
        std::vector<int> sizes;
        for (Dim d : l.order) sizes.push_back(l.degree[d]);
        for (int d = 0; d < DIM_COUNT; ++d) {
            const GroupSet& g = l.groups[d];
            ASSERT_EQ(g.size, l.degree[d]);
            check_group_set(g, l, dim_name(static_cast<Dim>(d)));
            for (int i = 0; i < g.count; ++i) {
                const RankPlace& first = l.ranks[*g.begin(i)];
                for (int k = 0; k < g.size; ++k) {
                    const RankPlace& p = l.ranks[g.begin(i)[k]];
                    ASSERT_EQ(p.coord[d], k);
                    for (int o = 0; o < DIM_COUNT; ++o)
                        if (o != d) {
                            ASSERT_EQ(p.coord[o], first.coord[o]);
                        }
                }
            }
            std::vector<bool> mask;
            for (Dim od : l.order) mask.push_back(od == d);
            ASSERT_EQ(groups_of(g), reference_groups(sizes, mask)) << dim_name(static_cast<Dim>(d));
            if (d == DIM_TP) {
                int spanning = 0;
                for (auto s : g.spans_nodes) spanning += s;
                ASSERT_EQ(l.tp_groups_spanning_nodes, spanning);
            }
        }

        // Expert groups: partitions of the right sizes; each group stays inside the ranks
        // sharing tp and pp coordinates (expert TP and PP = dense TP and PP); an ep group and
        // an expert-dp group meet in at most one rank.
        const int edp = req.dp * req.cp / req.ep;
        ASSERT_EQ(l.ep_groups.size, req.ep);
        ASSERT_EQ(l.expert_dp_groups.size, edp);
        check_group_set(l.ep_groups, l, "ep");
        check_group_set(l.expert_dp_groups, l, "edp");
        for (const GroupSet* g : {&l.ep_groups, &l.expert_dp_groups}) {
            for (int i = 0; i < g->count; ++i) {
                const RankPlace& first = l.ranks[*g->begin(i)];
                for (const int32_t* m = g->begin(i); m != g->end(i); ++m) {
                    ASSERT_EQ(l.ranks[*m].coord[DIM_TP], first.coord[DIM_TP]);
                    ASSERT_EQ(l.ranks[*m].coord[DIM_PP], first.coord[DIM_PP]);
                }
            }
        }
        std::set<std::pair<int, int>> pairs;
        for (int r = 0; r < world; ++r)
            ASSERT_TRUE(pairs.insert({l.ep_groups.group_of[r], l.expert_dp_groups.group_of[r]}).second);

        // Where Megatron's expert generator is self-consistent (ep next to dp once cp is
        // dropped; cp next to dp or cp = 1), the expert groups are exactly Megatron's.
        std::vector<std::string> ex;  // Megatron's expert order: cp dropped, missing appended
        for (const auto& n : names)
            if (n != "cp") ex.push_back(n);
        for (std::string n : {"tp", "dp", "pp"})
            if (std::find(ex.begin(), ex.end(), n) == ex.end()) ex.push_back(n);
        if (std::find(ex.begin(), ex.end(), "ep") == ex.end())
            ex.insert(std::find(ex.begin(), ex.end(), "dp"), "ep");
        auto pos = [](const auto& v, const auto& x) {
            return static_cast<int>(std::find(v.begin(), v.end(), x) - v.begin());
        };
        const bool ep_next_to_dp = std::abs(pos(ex, std::string("ep")) - pos(ex, std::string("dp"))) == 1;
        const bool cp_next_to_dp = std::abs(pos(l.order, DIM_CP) - pos(l.order, DIM_DP)) == 1;
        if (ep_next_to_dp && (req.cp == 1 || cp_next_to_dp)) {
            ++compared_with_megatron_expert;
            std::vector<int> esizes;
            for (const auto& n : ex)
                esizes.push_back(n == "tp" ? req.tp : n == "ep" ? req.ep : n == "dp" ? edp : req.pp);
            std::vector<bool> emask, xmask;
            for (const auto& n : ex) {
                emask.push_back(n == "ep");
                xmask.push_back(n == "dp");
            }
            ASSERT_EQ(groups_of(l.ep_groups), reference_groups(esizes, emask));
            ASSERT_EQ(groups_of(l.expert_dp_groups), reference_groups(esizes, xmask));
        }
    }
    EXPECT_GT(compared_with_megatron_expert, 50);
    std::printf("compared %d of 200 expert layouts with Megatron's generator\n", compared_with_megatron_expert);
}

// ---- scale ------------------------------------------------------------------------------------

TEST(LayoutScale, HundredThousandRanks) {
    // 8 × 3125 × 4 = 100,000 ranks; no timing assertion (see bench/bench_layout.cpp).
    auto res = make_layout({.tp = 8, .dp = 3125, .pp = 4, .ep = 5, .gpus_per_node = 8});
    ASSERT_TRUE(res.has_value()) << res.error().str();
    const RankLayout& l = *res;
    ASSERT_EQ(l.world, 100000);
    EXPECT_EQ(l.nodes, 12500);
    EXPECT_EQ(l.groups[DIM_TP].size, 8);
    EXPECT_EQ(l.groups[DIM_TP].count, 12500);
    EXPECT_EQ(l.groups[DIM_DP].size, 3125);
    EXPECT_EQ(l.groups[DIM_DP].count, 32);
    EXPECT_EQ(l.groups[DIM_PP].size, 4);
    EXPECT_EQ(l.groups[DIM_PP].count, 25000);
    EXPECT_EQ(l.groups[DIM_CP].count, 100000);
    EXPECT_EQ(l.ep_groups.size, 5);
    EXPECT_EQ(l.ep_groups.count, 20000);
    EXPECT_EQ(l.expert_dp_groups.size, 625);
    EXPECT_EQ(l.expert_dp_groups.count, 160);
    EXPECT_EQ(l.tp_groups_spanning_nodes, 0);
    // Every group set is a partition (cheap O(world) check).
    for (const GroupSet* g : {&l.groups[0], &l.groups[1], &l.groups[2], &l.groups[3], &l.ep_groups,
                              &l.expert_dp_groups}) {
        std::vector<uint8_t> seen(l.world, 0);
        for (int32_t m : g->members) ++seen[m];
        EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), l.world);
    }
    // Last rank: tp 7, dp 3124, pp 3.
    EXPECT_EQ(l.rank_of(7, 0, 3124, 3), 99999);
    EXPECT_EQ(l.ranks[99999].coord[DIM_DP], 3124);
    EXPECT_EQ(l.groups[DIM_PP].begin(0)[3], 75000);
}

// ptd-engine, the launcher, `ptd` and the studio take a job's layout from job_layout(): every
// layout key of the job reaches make_layout (a key dropped there would place ranks
// differently in one of them).
TEST(JobLayout, TakesEveryLayoutKeyOfTheJob) {
    JobSpec job = default_job(embedded_presets());
    job.parallel.tp = 2;
    job.parallel.cp = 2;
    job.parallel.dp = 2;
    job.parallel.pp = 2;
    job.parallel.ep = 2;
    job.parallel.order = "pp-dp-ep-cp-tp";
    job.cluster.gpus_per_node = 4;
    auto l = job_layout(job);
    ASSERT_TRUE(l.has_value()) << l.error().str();
    EXPECT_EQ(l->req.tp, 2);
    EXPECT_EQ(l->req.cp, 2);
    EXPECT_EQ(l->req.dp, 2);
    EXPECT_EQ(l->req.pp, 2);
    EXPECT_EQ(l->req.ep, 2);
    EXPECT_EQ(l->req.gpus_per_node, 4);
    EXPECT_EQ(l->req.order, "pp-dp-ep-cp-tp");
    EXPECT_EQ(l->world, 16);
    EXPECT_EQ(l->nodes, 4);
    const RankLayout direct = build({.tp = 2, .cp = 2, .dp = 2, .pp = 2, .ep = 2, .gpus_per_node = 4,
                                     .order = "pp-dp-ep-cp-tp"});
    for (int r = 0; r < 16; ++r)
        for (int d = 0; d < DIM_COUNT; ++d) EXPECT_EQ(l->ranks[(size_t)r].coord[d], direct.ranks[(size_t)r].coord[d]);

    job.parallel.order = "tp-qq";  // make_layout's own check, reached through the job
    EXPECT_FALSE(job_layout(job).has_value());
}
