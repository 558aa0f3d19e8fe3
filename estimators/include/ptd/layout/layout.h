// layout.h — the rank layout: which (tp, cp, dp, pp) coordinates, node and local GPU each
// global rank has, and every parallel group. One pure function, shared by the
// estimators, the engine, the launcher and the studio so they can never disagree.
//
// Order string: dimension names joined by '-', fastest-varying first. Megatron-LM's
// default is "tp-cp-ep-dp-pp": rank = tp + TP·(cp + CP·(dp + DP·pp)). Any permutation of
// {tp, cp, dp, pp} may be asked for; "ep" may appear anywhere (it only decides where
// expert-parallel ranks sit inside the data-parallel dimension) and may be left out.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "ptd/common/diagnostic.h"

namespace ptd {

enum Dim : int { DIM_TP = 0, DIM_CP = 1, DIM_DP = 2, DIM_PP = 3, DIM_COUNT = 4 };
const char* dim_name(Dim d);  // "tp", "cp", "dp", "pp"

struct LayoutRequest {
    int tp = 1, cp = 1, dp = 1, pp = 1;
    int ep = 1;                 // expert parallel; divides dp·cp
    int gpus_per_node = 8;
    std::string order = "tp-cp-ep-dp-pp";
    // moe2: expert tensor parallel (parallel.expert_tp; 0 = tp). Otherwise: MoE parallel
    // folding — the expert groups regroup each stage's tp·cp·dp consecutive ranks (the default
    // order only) as etp × ep × expert-dp, and ep·etp must divide tp·cp·dp instead.
    int etp = 0;
    // hsdp: replicas of the sharded states (parallel.dp_replicate); > 1 builds dp_shard_groups.
    int dp_replicate = 1;
};

// One rank's place.
struct RankPlace {
    int32_t coord[DIM_COUNT];   // tp, cp, dp, pp coordinates
    int32_t node;               // rank / gpus_per_node
    int32_t local_gpu;          // rank % gpus_per_node
};

// Groups of one dimension, stored flat: group g has members
// members[g*size .. g*size+size-1] in increasing coordinate order.
struct GroupSet {
    int size = 1;               // ranks per group (the dimension's degree)
    int count = 0;              // number of groups (world / size)
    std::vector<int32_t> members;     // count·size global ranks
    std::vector<int32_t> group_of;    // world entries: which group each rank is in
    std::vector<uint8_t> spans_nodes; // count entries: 1 if the group covers > 1 node

    // Members of group g as [begin, end).
    const int32_t* begin(int g) const { return members.data() + (size_t)g * size; }
    const int32_t* end(int g) const { return begin(g) + size; }
};

struct RankLayout {
    LayoutRequest req;
    int world = 0;
    std::array<int, DIM_COUNT> degree{};  // tp, cp, dp, pp degrees
    std::array<int, DIM_COUNT> stride{};  // rank stride of each dimension
    std::vector<RankPlace> ranks;         // world entries, indexed by global rank
    std::array<GroupSet, DIM_COUNT> groups;
    GroupSet ep_groups;          // expert-parallel groups (size ep)
    GroupSet expert_dp_groups;   // expert data-parallel groups (size dp·cp/ep)
    // hsdp: with dp_replicate R > 1, the groups that shard the model states: (dp / R)·cp ranks,
    // the R-th part of a data-parallel-with-context group whose dp coordinates are consecutive
    // (torchtitan's dp_shard × cp mesh, Megatron-core's intra-instance group); count 0 otherwise.
    GroupSet dp_shard_groups;
    int nodes = 0;
    int tp_groups_spanning_nodes = 0;

    // The order actually used, after missing names were filled in: dense dims fastest
    // first, and whether ep varies faster than expert-dp inside each data block (ep written
    // before dp, or left out). order_used spells it out, e.g. "tp-cp-ep-dp-pp".
    std::array<Dim, DIM_COUNT> order{DIM_TP, DIM_CP, DIM_DP, DIM_PP};
    bool ep_before_dp = true;
    std::string order_used;

    // Global rank with these coordinates.
    int rank_of(int tp, int cp, int dp, int pp) const {
        return tp * stride[DIM_TP] + cp * stride[DIM_CP] + dp * stride[DIM_DP] + pp * stride[DIM_PP];
    }
};

// Parse and check an order string ("tp-cp-ep-dp-pp", "tp-pp-dp", ...). Missing
// dimensions are appended in Megatron's default order. Errors name the bad token and the
// allowed names. Key used in diagnostics: "parallel.order".
Result<std::array<Dim, DIM_COUNT>> parse_rank_order(const std::string& order);

// The one spelling a job's parallel.order takes: all five names tp, cp, ep, dp, pp, once
// each, lowercase, joined by '-'. Returns an error under "parallel.order" for anything
// else (empty, partial, upper case, spaces), saying what was given, what is allowed, and
// the full order it would mean where that is clear. make_layout itself stays lenient
// (Megatron's RankGenerator lower-cases and fills in missing names).
Result<std::string> check_canonical_rank_order(const std::string& order);

// Largest world make_layout accepts (the layout keeps about 72 bytes per rank).
inline constexpr int kMaxLayoutRanks = 1 << 24;  // 16,777,216

// Build the layout. world = tp·cp·dp·pp. Fails (with a message naming the numbers) when a
// degree is < 1, ep does not divide dp·cp, or the order string is invalid. gpus_per_node
// need not divide the world (the last node is then partly filled). All problems found are
// reported together. Keys: "parallel.tp" / ".cp" / ".dp" / ".pp" / ".ep", "parallel.order",
// "cluster.gpus_per_node", "parallel" (world too large). Groups of every GroupSet are
// numbered in increasing order of their smallest member rank (group 0 holds rank 0);
// members are sorted by rank, which is also their coordinate order. See docs/layout.md.
Result<RankLayout> make_layout(const LayoutRequest& req);

}  // namespace ptd
