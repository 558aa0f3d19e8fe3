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
#include <string>
#include <vector>

#include "ptd/diagnostic.h"
#include "ptd/layout.h"

namespace ptd::engine {

class KvClient;

// Called with a description of what failed (group name, operation, Gloo's message);
// must not return (the engine's handler prints the error naming the failed peer, emits
// an error metrics event and exits non-zero).
using FailureHandler = std::function<void(const std::string& what)>;

class Communicator {
public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual const std::string& name() const = 0;           // "tp", "pp", "dp", "world", "embedding"
    virtual const std::vector<int>& global_ranks() const = 0; // member i → global rank

    virtual void all_reduce_sum(float* x, int64_t n) = 0;
    virtual void all_reduce_max(float* x, int64_t n) = 0;
    virtual void all_reduce_sum_f64(double* x, int64_t n) = 0;
    // x holds Σ counts elements; afterwards this rank's slice (offset Σ counts[<rank],
    // counts[rank] long) holds the sum over the group. Other slices are unspecified.
    virtual void reduce_scatter_sum(float* x, const std::vector<int64_t>& counts) = 0;
    // x holds Σ counts elements; each rank's own slice is sent, all slices are filled.
    virtual void all_gather(float* x, const std::vector<int64_t>& counts) = 0;
    virtual void broadcast(float* x, int64_t n, int root) = 0;
    virtual void barrier() = 0;

    // Point-to-point. send() is asynchronous: `x` must stay untouched until wait_sends()
    // returns. recv() blocks until the message arrived. Messages between one pair with
    // the same tag arrive in order.
    virtual void send(const float* x, int64_t n, int peer, uint32_t tag) = 0;
    virtual void recv(float* x, int64_t n, int peer, uint32_t tag) = 0;
    virtual void wait_sends() = 0;
};

// A group of size 1: every collective is the identity, p2p is a programmer error.
std::unique_ptr<Communicator> make_self_communicator(const std::string& name, int global_rank);

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
    double timeout_s = 300;      // Gloo context timeout (each collective / recv)
    std::string hostname;        // address to listen on for Gloo pairs; "" = MASTER_ADDR's family default
};

// Build every group of `rank` under `layout` with Gloo over TCP, rendezvousing through
// `store` (keys "<run_id>/<group>/<index>/..."). With world == 1 returns self groups.
// Errors (cannot bind, rendezvous timeout) are reported, not thrown.
Result<CommGroups> make_gloo_groups(KvClient& store, const RankLayout& layout, int rank,
                                    const CommOptions& options, FailureHandler on_failure);

}  // namespace ptd::engine
