// comm.h — the communicator interface of ptd-engine: collectives and point-to-point over
// one process group. The Gloo implementation (engine/gloo/) is the CPU path; a NCCL one
// will sit behind the same interface (its unique id travels through the same KV store).
//
// Buffers are device pointers of the engine's Backend (host memory for the CPU backend).
// Ranks inside calls are group ranks (0..size−1), not global ranks.
//
// Failure contract: an operation that fails (peer closed the connection, timeout) does
// not return: it calls the group's failure handler, which reports and exits the process
// (see FailureHandler). So callers never see a half-finished collective.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ptd/common/diagnostic.h"
#include "ptd/engine/dtype.h"
#include "ptd/layout/layout.h"

namespace ptd::engine {

class KvClient;

// Called with a description of what failed (group name, operation, Gloo's message);
// must not return (the engine's handler prints the error naming the failed peer, emits
// an error metrics event and exits non-zero).
using FailureHandler = std::function<void(const std::string& what)>;

// Element types of communication buffers. bf16 and f16 are 2-byte storage types: the CPU
// reductions widen them to f32 for the arithmetic and round back (to nearest even), as
// NCCL's reductions do on the device. i32 carries token ids and counters.
size_t dtype_size(DType t);
const char* dtype_name(DType t);

enum class ReduceOp : uint8_t { sum, max };

// ZeRO shards and the flat parameter / gradient buffers they cut are padded to this many
// elements per rank, so that every rank's shard has the same size (NCCL's reduce-scatter
// and all-gather take one count for all ranks) and every shard starts 512-byte aligned.
constexpr int64_t kShardAlignElements = 128;

// Global ranks of a group for an error line, "0, 1, 2, 3"; a large group is shortened to
// its ends ("0, 1, 2, 3, …, 1023 (1024 ranks)") so the line stays readable. The Gloo and
// NCCL communicators both name their groups this way (defined in gloo_comm.cpp).
std::string join_ranks(const std::vector<int>& ranks);

// The interface a NCCL communicator can implement one call to one NCCL call:
//   - every buffer names its dtype and element count; reductions work in place on device
//     buffers and return nothing to the host (ncclAllReduce, ncclBroadcast, in place);
//   - reduce-scatter and all-gather take one count per rank: x holds size()·count
//     elements and rank r's slice starts at r·count (NCCL's in-place form, recvbuff =
//     sendbuff + rank·count). Callers pad to equal counts (kShardAlignElements);
//   - point-to-point has no tags: the k-th send from rank a to rank b is matched with the
//     k-th receive b posts from a (FIFO per peer and direction), and both sides must agree
//     on dtype and count. Sends and receives that depend on each other are posted inside
//     one group_start()/group_end() (ncclGroupStart/End), which makes them progress
//     together; a send or receive outside a group is a group of its own.
//
// Gloo implementation: group_end() (and an ungrouped send or recv) returns only when every
// operation of the group completed: a send completes only once its receiver posted the
// matching receive (Gloo moves the data then). That is NCCL's worst case, so an order of
// groups that completes on Gloo cannot deadlock on NCCL. Strict mode (PTD_COMM_STRICT_FIFO=1)
// also sends a descriptor with each message and checks it on every receive, see
// make_gloo_groups.
class Communicator {
public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual const std::string& name() const = 0;           // "tp", "pp", "dp", "world", "embedding"
    virtual const std::vector<int>& global_ranks() const = 0; // member i → global rank

    // x[0..count) ← op over the group, in place. Every member gets the same bits.
    virtual void all_reduce(void* x, int64_t count, DType dtype, ReduceOp op) = 0;
    // x holds size()·count elements; afterwards this rank's slice x[rank·count, +count)
    // holds the reduction over the group. Other slices are unspecified.
    virtual void reduce_scatter(void* x, int64_t count, DType dtype, ReduceOp op) = 0;
    // x holds size()·count elements; this rank's slice is sent, every slice is filled.
    virtual void all_gather(void* x, int64_t count, DType dtype) = 0;
    virtual void broadcast(void* x, int64_t count, DType dtype, int root) = 0;
    virtual void barrier() = 0;

    // Point-to-point (see above). `x` must stay untouched until the group completes.
    // `check` describes the message for strict mode only (the pipeline schedule passes
    // what its old tag was: kind, chunk and micro-batch); it is never used for matching,
    // and a NCCL communicator ignores it. Both sides pass the same value.
    virtual void group_start() = 0;
    virtual void group_end() = 0;
    virtual void send(const void* x, int64_t count, DType dtype, int peer, uint32_t check = 0) = 0;
    virtual void recv(void* x, int64_t count, DType dtype, int peer, uint32_t check = 0) = 0;

    // Debug hook (stream checking): every operation calls it with the memory it is about to
    // read (write = false: all_gather this rank's slice; reduce_scatter, all_reduce,
    // broadcast at the root, send the whole buffer) and then with the memory it wrote
    // (write = true: all_reduce, reduce_scatter and all_gather the whole buffer, broadcast
    // elsewhere than the root, recv its buffer). Empty: off.
    using AccessObserver = std::function<void(const void* x, size_t bytes, bool write, const char* op)>;
    void set_access_observer(AccessObserver f) { observer_ = std::move(f); }

    // Shorthands for the engine's fp32 tensors.
    void all_reduce_sum(float* x, int64_t n) { all_reduce(x, n, DType::f32, ReduceOp::sum); }
    void all_reduce_max(float* x, int64_t n) { all_reduce(x, n, DType::f32, ReduceOp::max); }

protected:
    void observe_read(const void* x, int64_t count, DType t, const char* op) const {
        if (observer_) observer_(x, (size_t)count * dtype_size(t), false, op);
    }
    void observe_write(const void* x, int64_t count, DType t, const char* op) const {
        if (observer_) observer_(x, (size_t)count * dtype_size(t), true, op);
    }

private:
    AccessObserver observer_;
};

// A group of size 1: every collective is the identity, p2p is a programmer error.
std::unique_ptr<Communicator> make_self_communicator(const std::string& name, int global_rank);

struct CommGroups;
// What every group factory checks first (make_gloo_groups, make_nccl_groups): the rank is
// inside the layout and cp = 1 (errors name RANK / parallel.cp). A one-rank world gets
// its self groups; a larger one nullopt (the factory builds real groups).
Result<std::optional<CommGroups>> single_process_groups(const RankLayout& layout, int rank);

// The groups one rank belongs to.
struct CommGroups {
    std::unique_ptr<Communicator> world;
    std::unique_ptr<Communicator> tp, pp, dp;
    // First and last pipeline stage of this rank's pp group (tied embeddings with pp > 1);
    // null on the stages in between and when pp == 1.
    std::unique_ptr<Communicator> embedding;
};

struct CommOptions {
    std::string run_id;          // prefix of every key in the store: one run never sees another's keys
    double timeout_s = 300;      // Gloo context timeout (each collective / recv); NCCL: the deadline of
                                 // each operation and of communicator init (the watchdog's, comm_watchdog.h)
    std::string hostname;        // address to listen on for Gloo pairs; "" = MASTER_ADDR's family default
    bool strict_fifo = false;    // strict p2p checking (also switched on by PTD_COMM_STRICT_FIFO=1)
    std::string pair_secret;     // the run's secret (PTD_RUN_SECRET): every Gloo pair proves it
                                 // before a group carries data; "" = no check (loopback, no secret)
};

// PTD_COMM_STRICT_FIFO: unset, "" or "0" → false, "1" → true; anything else is an error
// naming the variable, the value and what is allowed.
Result<bool> strict_fifo_from_env();

// Build every group of `rank` under `layout` with Gloo over TCP, rendezvousing through
// `store` (keys "<run_id>/<group>/<index>/..."). With world == 1 returns self groups.
// Errors (cannot bind, rendezvous timeout, a bad PTD_COMM_STRICT_FIFO) are reported, not
// thrown.
//
// Strict mode (options.strict_fifo or PTD_COMM_STRICT_FIFO=1) checks the p2p contract on
// every receive: each message travels with a header (the per-(sender, receiver) sequence
// number, dtype, count and check value) and the receiver compares it with what it posted.
// A mismatch is a schedule bug that NCCL would turn into silently wrong data or a hang;
// it goes to `on_contract_violation` (default: on_failure) with a message naming both
// ranks, the sequence number and both descriptors.
Result<CommGroups> make_gloo_groups(KvClient& store, const RankLayout& layout, int rank,
                                    const CommOptions& options, FailureHandler on_failure,
                                    FailureHandler on_contract_violation = {});

}  // namespace ptd::engine
