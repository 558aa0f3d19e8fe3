// nccl_id.h — how the members of one NCCL communicator agree on its unique id: the
// group's rank 0 creates it (ncclGetUniqueId) and publishes its 128 bytes in the run's KV
// store; every other member reads them from there, as torchrun's TCPStore does for
// PyTorch's ProcessGroupNCCL. Plain C++ without NCCL headers: the id is opaque bytes and
// the creator is a callback, so the exchange is tested across real processes on machines
// without NCCL or a GPU.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ptd/common/diagnostic.h"
#include "ptd/layout/layout.h"

namespace ptd::engine {

class KvClient;

// NCCL_UNIQUE_ID_BYTES (nccl.h; checked by a static_assert where NCCL is compiled).
constexpr size_t kNcclUniqueIdBytes = 128;
using NcclUniqueIdBytes = std::array<uint8_t, kNcclUniqueIdBytes>;

// One communicator's identity: the group name and index as make_gloo_groups numbers them
// ("tp" 3 = the fourth tp group), its members (global ranks, group rank order) and this
// rank's place in it.
struct NcclGroupKey {
    std::string run_id;
    std::string group;           // "world", "tp", "pp", "dp", "embedding"
    int index = 0;
    std::vector<int> members;    // global ranks; members[0] creates the id
    int group_rank = 0;          // this rank's index in members
};

// Every group `rank` belongs to under `layout`, in the order every rank must create them
// (world, tp, pp, dp, then embedding — the first and last stage of its pipeline when
// pp > 1) and numbered as make_gloo_groups numbers them. Groups of one member are
// included (make_nccl_groups gives them self communicators, no id).
std::vector<NcclGroupKey> nccl_group_keys(const RankLayout& layout, int rank, const std::string& run_id);

// "<run_id>/nccl/<group>/<index>/unique_id": under the run id like the Gloo rendezvous
// keys ("<run_id>/<group>/<index>/…"), in a namespace of its own so the two never meet.
std::string nccl_id_key(const NcclGroupKey& g);

// Group rank 0 calls `create` and publishes the bytes; the others wait up to timeout_s
// for them. Errors name the group, its members, the key and the creating rank: a
// timeout ("did global rank 4 start, and with the same run id?"), a value of the wrong
// size, the store lost, or `create` failing (its message).
Result<NcclUniqueIdBytes> exchange_nccl_id(KvClient& store, const NcclGroupKey& g,
                                           const std::function<Result<NcclUniqueIdBytes>()>& create,
                                           double timeout_s);

}  // namespace ptd::engine
