// nccl_id.cpp — the NCCL unique-id exchange through the run's KV store (nccl_id.h).
#include "nccl_id.h"

#include <algorithm>
#include <exception>

#include "ptd/engine/kv_store.h"

namespace ptd::engine {
namespace {

// "the tp group 1 (global ranks 2, 3)"
std::string describe_group(const NcclGroupKey& g) {
    std::string ranks;
    const size_t shown = std::min<size_t>(g.members.size(), 8);
    for (size_t i = 0; i < shown; ++i) ranks += (i ? ", " : "") + std::to_string(g.members[i]);
    if (shown < g.members.size()) ranks += ", … (" + std::to_string(g.members.size()) + " ranks)";
    return "the " + g.group + " group " + std::to_string(g.index) + " (global ranks " + ranks + ")";
}

}  // namespace

std::vector<NcclGroupKey> nccl_group_keys(const RankLayout& layout, int rank, const std::string& run_id) {
    std::vector<NcclGroupKey> keys;
    auto add = [&](const char* name, int index, std::vector<int> members) {
        const int group_rank = (int)(std::find(members.begin(), members.end(), rank) - members.begin());
        keys.push_back(NcclGroupKey{run_id, name, index, std::move(members), group_rank});
    };
    auto members_of = [&](Dim d) {
        const GroupSet& gs = layout.groups[d];
        const int g = gs.group_of[rank];
        return std::pair{g, std::vector<int>(gs.begin(g), gs.end(g))};
    };
    std::vector<int> all(layout.world);
    for (int i = 0; i < layout.world; ++i) all[i] = i;
    add("world", 0, std::move(all));
    for (auto [name, dim] : {std::pair{"tp", DIM_TP}, std::pair{"pp", DIM_PP}, std::pair{"dp", DIM_DP}}) {
        auto [g, members] = members_of(dim);
        add(name, g, std::move(members));
    }
    if (layout.degree[DIM_PP] > 1) {
        auto [g, members] = members_of(DIM_PP);
        if (rank == members.front() || rank == members.back()) add("embedding", g, {members.front(), members.back()});
    }
    return keys;
}

std::string nccl_id_key(const NcclGroupKey& g) {
    return g.run_id + "/nccl/" + g.group + "/" + std::to_string(g.index) + "/unique_id";
}

Result<NcclUniqueIdBytes> exchange_nccl_id(KvClient& store, const NcclGroupKey& g,
                                           const std::function<Result<NcclUniqueIdBytes>()>& create,
                                           double timeout_s) {
    // Programmer errors: the caller builds the key from the layout.
    if (g.members.empty() || g.group_rank < 0 || g.group_rank >= (int)g.members.size())
        return fail({}, "", "internal error: NCCL id exchange for " + g.group + " group " + std::to_string(g.index) +
                                " with group rank " + std::to_string(g.group_rank) + " of " +
                                std::to_string(g.members.size()) + " members");
    const std::string key = nccl_id_key(g);
    const std::string creator = "global rank " + std::to_string(g.members[0]);
    if (g.group_rank == 0) {
        auto id = create();
        if (!id)
            return fail({}, "", "cannot create the NCCL unique id of " + describe_group(g) + ": " + id.error().one_line());
        try {
            store.set(key, std::vector<uint8_t>(id->begin(), id->end()));
        } catch (const std::exception& e) {
            return fail({}, "", "cannot publish the NCCL unique id of " + describe_group(g) + " under \"" + key +
                                    "\": " + e.what());
        }
        return *id;
    }
    Result<std::vector<uint8_t>> got = std::unexpected(Error{});
    try {
        got = store.get(key, timeout_s);
    } catch (const std::exception& e) {
        return fail({}, "", "cannot read the NCCL unique id of " + describe_group(g) + " under \"" + key + "\": " + e.what());
    }
    if (!got)
        return fail({}, "", "no NCCL unique id for " + describe_group(g) + " from its group rank 0 (" + creator +
                                ") under \"" + key + "\": " + got.error().one_line() + " (did " + creator +
                                " start, with the same run id, and reach this group?)");
    if (got->size() != kNcclUniqueIdBytes)
        return fail({}, "", "the NCCL unique id of " + describe_group(g) + " under \"" + key + "\" holds " +
                                std::to_string(got->size()) + " bytes; allowed: exactly " +
                                std::to_string(kNcclUniqueIdBytes) + " (another program wrote this run's keys?)");
    NcclUniqueIdBytes id;
    std::copy(got->begin(), got->end(), id.begin());
    return id;
}

}  // namespace ptd::engine
