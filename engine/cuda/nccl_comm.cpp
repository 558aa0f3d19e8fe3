// nccl_comm.cpp — Communicators over NCCL (nccl_comm.h): one ncclComm_t per process
// group, ids exchanged through the run's KV store (nccl_id.h), every operation enqueued
// on the caller's comm stream, one watchdog per process (comm_watchdog.h) that aborts all
// communicators when a peer dies, NCCL reports an asynchronous error, or an operation is
// still pending after --timeout (each is followed by an event on the comm stream); a timer
// bounds communicator init by the same timeout. Host C++23
// against nccl.h and the CUDA runtime API; no device code here.
#include "nccl_comm.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <optional>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "comm_watchdog.h"
#include "ptd/engine/kv_store.h"

namespace ptd::engine {

static_assert(NCCL_UNIQUE_ID_BYTES == kNcclUniqueIdBytes, "nccl_id.h's id size must match nccl.h");
static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes);

namespace {

// One watchdog per process: every communicator of the rank is aborted together.
std::mutex g_watchdog_mu;
std::unique_ptr<CommWatchdog> g_watchdog;

ncclDataType_t nccl_type(DType t) {
    switch (t) {
        case DType::f32: return ncclFloat32;
        case DType::f64: return ncclFloat64;
        case DType::bf16: return ncclBfloat16;
        case DType::f16: return ncclFloat16;
        case DType::i32: return ncclInt32;
    }
    std::fprintf(stderr, "ptd-engine: internal error: unknown DType %d for NCCL\n", (int)t);
    std::abort();
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::max ? ncclMax : ncclSum; }

// NCCL's error string plus its last detailed message when it has one.
std::string nccl_error_text(ncclResult_t r, ncclComm_t comm) {
    std::string text = ncclGetErrorString(r);
    if (const char* last = ncclGetLastError(comm); last && *last) text += std::string(": ") + last;
    return text;
}

class NcclCommunicator final : public Communicator {
public:
    NcclCommunicator(std::string name, int index, std::vector<int> members, int group_rank, ncclComm_t comm,
                     cudaStream_t stream, float* barrier_scratch, FailureHandler on_failure, int device)
        : name_(std::move(name)), members_(std::move(members)), rank_(group_rank), comm_(comm), stream_(stream),
          barrier_scratch_(barrier_scratch), on_failure_(std::move(on_failure)), device_(device) {
        label_ = name_ + " group " + std::to_string(index) + " (global ranks " + join_ranks(members_) + ")";
    }
    ~NcclCommunicator() override {
        std::lock_guard lock(g_watchdog_mu);
        const bool was_aborted = g_watchdog && g_watchdog->aborted();
        // The last communicator takes the watchdog with it: its thread reads the store,
        // which the caller may destroy next.
        if (g_watchdog && g_watchdog->unwatch(this) == 0) g_watchdog.reset();
        // An aborted communicator is already gone (ncclCommAbort frees it).
        if (!was_aborted) ncclCommDestroy(comm_);
        std::lock_guard plock(pending_mu_);
        for (Pending& p : pending_) cudaEventDestroy(p.done);
        for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
    }

    // The watchdog's view (comm_watchdog.h): the oldest operation whose completion event has
    // not fired yet. Completed ones are retired here, so the queue stays short.
    std::optional<PendingOp> oldest_pending() {
        cudaSetDevice(device_);  // the watchdog's thread: the events' device
        std::lock_guard lock(pending_mu_);
        while (!pending_.empty() && cudaEventQuery(pending_.front().done) == cudaSuccess) {
            spare_events_.push_back(pending_.front().done);
            pending_.pop_front();
        }
        if (pending_.empty()) return std::nullopt;
        const Pending& p = pending_.front();
        return PendingOp{p.op + " #" + std::to_string(p.seq),
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - p.since).count()};
    }

    const std::string& label() const { return label_; }
    ncclComm_t handle() const { return comm_; }

    int rank() const override { return rank_; }
    int size() const override { return (int)members_.size(); }
    const std::string& name() const override { return name_; }
    const std::vector<int>& global_ranks() const override { return members_; }

    void all_reduce(void* x, int64_t count, DType dtype, ReduceOp op) override {
        usable("all_reduce");
        check(ncclAllReduce(x, x, elements(count), nccl_type(dtype), nccl_op(op), comm_, stream_), "all_reduce");
    }
    // In place: rank r's result lands at x + r·count, NCCL's recvbuff = sendbuff + rank·recvcount.
    void reduce_scatter(void* x, int64_t count, DType dtype, ReduceOp op) override {
        usable("reduce_scatter");
        check(ncclReduceScatter(x, dtype_offset(x, (int64_t)rank_ * count, dtype), elements(count), nccl_type(dtype),
                                nccl_op(op), comm_, stream_),
              "reduce_scatter");
    }
    // In place: sendbuff = recvbuff + rank·sendcount.
    void all_gather(void* x, int64_t count, DType dtype) override {
        usable("all_gather");
        check(ncclAllGather(dtype_offset(x, (int64_t)rank_ * count, dtype), x, elements(count), nccl_type(dtype), comm_,
                            stream_),
              "all_gather");
    }
    void broadcast(void* x, int64_t count, DType dtype, int root) override {
        usable("broadcast");
        assert(root >= 0 && root < size());
        check(ncclBroadcast(x, x, elements(count), nccl_type(dtype), root, comm_, stream_), "broadcast");
    }
    // A 1-element all-reduce, waited for: the host returns only when every member got here.
    void barrier() override {
        usable("barrier");
        check(ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclFloat32, ncclSum, comm_, stream_), "barrier");
        if (cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess) {
            if (aborted()) usable("barrier");
            on_failure_(label_ + " barrier: cudaStreamSynchronize: " + cudaGetErrorString(e));
        }
    }
    void group_start() override {
        usable("group_start");
        check(ncclGroupStart(), "group_start");
    }
    void group_end() override {
        usable("group_end");
        check(ncclGroupEnd(), "group_end");
    }
    // `check` is for the Gloo communicator's strict mode only (comm.h).
    void send(const void* x, int64_t count, DType dtype, int peer, uint32_t) override {
        usable("send");
        assert(peer >= 0 && peer < size() && peer != rank_);
        check(ncclSend(x, elements(count), nccl_type(dtype), peer, comm_, stream_), "send");
    }
    void recv(void* x, int64_t count, DType dtype, int peer, uint32_t) override {
        usable("recv");
        assert(peer >= 0 && peer < size() && peer != rank_);
        check(ncclRecv(x, elements(count), nccl_type(dtype), peer, comm_, stream_), "recv");
    }

private:
    static bool aborted() {
        std::lock_guard lock(g_watchdog_mu);
        return g_watchdog && g_watchdog->aborted();
    }
    static size_t elements(int64_t count) {
        assert(count >= 0);
        return (size_t)count;
    }
    // After the watchdog aborted the communicators their handles are gone: the failure is
    // being reported (and the process is exiting); never touch NCCL again.
    void usable(const char* op) {
        if (aborted()) on_failure_(label_ + " " + op + ": the communicators were aborted (a peer failed)");
    }
    void check(ncclResult_t r, const char* op) {
        if (r == ncclSuccess) return track(op);
        if (aborted()) usable(op);
        on_failure_(label_ + " " + op + ": " + nccl_error_text(r, comm_));
    }
    // An event after the operation on the comm stream, for the per-operation deadline.
    // Inside ncclGroupStart/End nothing is launched until the end: the group is one entry.
    void track(const char* op) {
        const std::string what = op;
        if (what == "group_start") {
            if (group_depth_++ == 0) group_ops_.clear();
            return;
        }
        if (what == "group_end") {
            if (group_depth_ > 0 && --group_depth_ > 0) return;
        } else if (group_depth_ > 0) {
            group_ops_ += (group_ops_.empty() ? "" : ", ") + what;
            return;
        }
        std::lock_guard lock(pending_mu_);
        cudaEvent_t e = nullptr;
        if (!spare_events_.empty()) {
            e = spare_events_.back();
            spare_events_.pop_back();
        } else if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
            return;  // untracked: the watchdog's other checks still stand
        }
        if (cudaEventRecord(e, stream_) != cudaSuccess) {
            spare_events_.push_back(e);
            return;
        }
        pending_.push_back({what == "group_end" ? "group (" + group_ops_ + ")" : what, ++seq_,
                            std::chrono::steady_clock::now(), e});
    }

    std::string name_, label_;
    std::vector<int> members_;
    int rank_;
    ncclComm_t comm_;
    cudaStream_t stream_;
    float* barrier_scratch_;
    FailureHandler on_failure_;
    int device_;
    struct Pending {
        std::string op;
        uint64_t seq;
        std::chrono::steady_clock::time_point since;
        cudaEvent_t done;
    };
    std::mutex pending_mu_;
    std::deque<Pending> pending_;
    std::vector<cudaEvent_t> spare_events_;
    uint64_t seq_ = 0;
    int group_depth_ = 0;
    std::string group_ops_;
};

}  // namespace

Result<NcclUniqueIdBytes> nccl_new_unique_id() {
    ncclUniqueId id;
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
        return fail({}, "", std::string("ncclGetUniqueId: ") + nccl_error_text(r, nullptr));
    NcclUniqueIdBytes bytes;
    std::memcpy(bytes.data(), &id, kNcclUniqueIdBytes);
    return bytes;
}

bool abort_nccl_communicators(const std::string& why) {
    std::lock_guard lock(g_watchdog_mu);
    return g_watchdog && g_watchdog->abort_all(why);
}

Result<std::unique_ptr<Communicator>> make_nccl_communicator(KvClient& store, const NcclGroupKey& key,
                                                             const CommOptions& options, FailureHandler on_failure,
                                                             cudaStream_t comm_stream, float* barrier_scratch) {
    int device = -1;
    if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess)
        return fail({}, "", std::string("cannot create a NCCL communicator: cudaGetDevice: ") + cudaGetErrorString(e));
    auto id = exchange_nccl_id(store, key, nccl_new_unique_id, options.timeout_s);
    if (!id) return std::unexpected(id.error());
    ncclUniqueId nid;
    std::memcpy(&nid, id->data(), kNcclUniqueIdBytes);
    ncclComm_t comm = nullptr;
    // ncclCommInitRank blocks until every member has joined; a member that got the id and
    // then stalled (alive, so the store's monitor is quiet) would hold this rank forever.
    // A timer reports it after the timeout (the handler _exits; nothing to abort yet).
    const std::string init_what = "cannot set up the NCCL " + key.group + " group " + std::to_string(key.index) +
                                  " (global ranks " + join_ranks(key.members) + ") on device " + std::to_string(device);
    std::mutex init_mu;
    std::condition_variable init_cv;
    bool init_done = false;
    std::thread init_timer([&] {
        std::unique_lock lock(init_mu);
        if (!init_cv.wait_for(lock, std::chrono::duration<double>(options.timeout_s), [&] { return init_done; }))
            on_failure(init_what + ": ncclCommInitRank did not complete within " +
                       std::to_string((long)options.timeout_s) + " s (--timeout): a member never joined");
    });
    const ncclResult_t init_result = ncclCommInitRank(&comm, (int)key.members.size(), nid, key.group_rank);
    {
        std::lock_guard lock(init_mu);
        init_done = true;
    }
    init_cv.notify_all();
    init_timer.join();
    if (ncclResult_t r = init_result; r != ncclSuccess)
        return fail({}, "", "cannot set up the NCCL " + key.group + " group " + std::to_string(key.index) +
                                " (global ranks " + join_ranks(key.members) + ") on device " + std::to_string(device) +
                                ": ncclCommInitRank: " + nccl_error_text(r, comm));
    auto c = std::make_unique<NcclCommunicator>(key.group, key.index, key.members, key.group_rank, comm, comm_stream,
                                                barrier_scratch, on_failure, device);
    WatchedComm w;
    w.owner = c.get();
    w.name = c->label();
    w.async_error = [comm]() -> std::string {
        ncclResult_t st = ncclSuccess;
        if (ncclResult_t r = ncclCommGetAsyncError(comm, &st); r != ncclSuccess)
            return std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(r);
        return st == ncclSuccess || st == ncclInProgress ? std::string() : nccl_error_text(st, comm);
    };
    w.abort = [comm] { ncclCommAbort(comm); };
    w.oldest_pending = [raw = c.get()] { return raw->oldest_pending(); };
    {
        std::lock_guard lock(g_watchdog_mu);
        WatchdogLimits limits;
        limits.collective_timeout_s = options.timeout_s;
        limits.rank = key.members[(size_t)key.group_rank];
        if (!g_watchdog)
            g_watchdog = std::make_unique<CommWatchdog>([&store] { return store.abort_reason(0); }, on_failure, 0.1,
                                                        limits);
        g_watchdog->watch(std::move(w));
    }
    return std::unique_ptr<Communicator>(std::move(c));
}

Result<CommGroups> make_nccl_groups(KvClient& store, const RankLayout& layout, int rank, const CommOptions& options,
                                    FailureHandler on_failure, cudaStream_t comm_stream) {
    CommGroups groups;
    auto single = single_process_groups(layout, rank);
    if (!single) return std::unexpected(single.error());
    if (*single) return std::move(**single);
    int device = -1;
    if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess)
        return fail({}, "", std::string("cannot create the NCCL communicators: cudaGetDevice: ") + cudaGetErrorString(e));
    // The barrier's one float, shared by the groups and freed with the process; allocated
    // while device_memory.nccl_buffers is measured (free memory before and after this
    // function), so it is accounted there.
    float* scratch = nullptr;
    if (cudaError_t e = cudaMalloc((void**)&scratch, sizeof(float)); e != cudaSuccess)
        return fail({}, "", std::string("cannot allocate the NCCL barrier buffer on device ") + std::to_string(device) +
                                ": " + cudaGetErrorString(e));

    // The same order and numbering as make_gloo_groups (nccl_group_keys):
    // ncclCommInitRank blocks until all members of the group joined, so any other order
    // could leave two ranks each waiting in a group the other has not reached yet.
    for (NcclGroupKey& key : nccl_group_keys(layout, rank, options.run_id)) {
        std::unique_ptr<Communicator>& out = key.group == "world" ? groups.world
                                             : key.group == "tp"  ? groups.tp
                                             : key.group == "pp"  ? groups.pp
                                             : key.group == "dp"  ? groups.dp
                                                                  : groups.embedding;
        if (key.members.size() == 1) {
            out = make_self_communicator(key.group, rank);
            continue;
        }
        auto c = make_nccl_communicator(store, key, options, on_failure, comm_stream, scratch);
        if (!c) return std::unexpected(c.error());
        out = std::move(*c);
    }
    return groups;
}

}  // namespace ptd::engine
