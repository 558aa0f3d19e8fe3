// comm_watchdog.h — the thread that keeps a rank from hanging in a NCCL collective whose
// peer is gone. NCCL kernels wait on the device for data that never comes; only
// ncclCommAbort (from another thread) ends them. So one watchdog per rank polls every
// communicator's asynchronous error and the KV store's liveness verdict, and on the first
// sign of trouble aborts EVERY communicator of the rank (a collective on any of them may
// be the one waiting), then reports once through the FailureHandler (which exits), with
// "<context>: <detail>" as comm_failure_handler expects:
//   "the NCCL watchdog's abort of every communicator: peer rank 3 (pid … on host-a) died: …"
//   "tp group 1 (global ranks 2, 3) asynchronous NCCL operation: remote process exited … (every NCCL communicator aborted)"
//   "rank 2, tp group 1 (global ranks 2, 3): all_reduce #12 not complete after 300 s …"
// (the last: a per-operation deadline, for the hang where every process is alive).
// PyTorch's ProcessGroupNCCL watchdog does the same job.
//
// Plain C++: a communicator is watched through two callbacks (its async error, its
// abort), so the policy is tested without NCCL; nccl_comm.cpp plugs in
// ncclCommGetAsyncError and ncclCommAbort.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ptd/engine/comm.h"

namespace ptd::engine {

// An operation enqueued on a communicator and not complete yet.
struct PendingOp {
    std::string what;    // "all_reduce #12"
    double age_s = 0;    // seconds since it was enqueued
};

struct WatchedComm {
    const void* owner = nullptr;               // the communicator (for unwatch)
    std::string name;                          // "tp group 1 (global ranks 2, 3)"
    std::function<std::string()> async_error;  // "" while healthy, else the error text
    std::function<void()> abort;               // tears the communicator down (once)
    // The oldest operation not complete yet (nullopt: none in flight); null: not tracked.
    // A NCCL kernel waits on the device for a peer forever while every process is alive
    // (a rank that skipped a collective, a mismatched count): only this deadline ends it.
    std::function<std::optional<PendingOp>()> oldest_pending;
};

// What the watchdog allows. collective_timeout_s: an operation still pending after this long
// is a hang (0 = never; the engine passes --timeout, default 300 s). abort_deadline_s: how
// long abort_all waits for the ncclCommAbort calls before it gives up on them and lets the
// caller report and _exit (ncclCommAbort itself can block on a wedged device).
struct WatchdogLimits {
    double collective_timeout_s = 0;
    double abort_deadline_s = 30;
    int rank = -1;  // this process's global rank, named in a deadline report
};

class CommWatchdog {
public:
    // `peer_failure` returns "" while every peer is alive, else the store's reason
    // ("rank 3 (pid … on host-a) died: …"); KvClient::abort_reason(0) is the engine's.
    // Starts polling every poll_s seconds right away.
    CommWatchdog(std::function<std::string()> peer_failure, FailureHandler on_failure, double poll_s = 0.1,
                 WatchdogLimits limits = {});
    ~CommWatchdog();  // stops the thread (does not abort anything)
    CommWatchdog(const CommWatchdog&) = delete;
    CommWatchdog& operator=(const CommWatchdog&) = delete;

    void watch(WatchedComm comm);
    // Stop watching `owner` (its destructor calls this before the handle goes away).
    // Returns how many communicators are still watched.
    size_t unwatch(const void* owner);
    // Abort every watched communicator now (idempotent), e.g. from the store monitor's
    // callback before the process exits; waits at most limits.abort_deadline_s for the
    // aborts (then says so on stderr and returns). Returns false when already aborted.
    bool abort_all(const std::string& why);
    // True once abort_all ran: communicators must not be used any more.
    bool aborted() const { return aborted_.load(); }
    // One poll, as the thread does it (for tests and for a caller that wants to check
    // before blocking). Returns true when it found a failure (and aborted and reported).
    bool poll_once();

private:
    void loop();

    std::function<std::string()> peer_failure_;
    FailureHandler on_failure_;
    double poll_s_;
    WatchdogLimits limits_;
    std::mutex mu_;                   // guards comms_ and stop_; held while a callback runs
    std::vector<WatchedComm> comms_;
    std::atomic<bool> aborted_{false};
    std::atomic<bool> reported_{false};
    bool stop_ = false;
    std::condition_variable cv_;
    std::thread thread_;
};

}  // namespace ptd::engine
