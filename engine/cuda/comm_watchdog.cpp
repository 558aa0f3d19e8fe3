// comm_watchdog.cpp — poll, abort every communicator, report once (comm_watchdog.h).
// The callbacks run under the lock, so a communicator that unwatches itself in its
// destructor never has its handle used afterwards by the watchdog thread.
#include "comm_watchdog.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>

namespace ptd::engine {

CommWatchdog::CommWatchdog(std::function<std::string()> peer_failure, FailureHandler on_failure, double poll_s,
                           WatchdogLimits limits)
    : peer_failure_(std::move(peer_failure)),
      on_failure_(std::move(on_failure)),
      poll_s_(poll_s > 0 ? poll_s : 0.1),
      limits_(limits) {
    thread_ = std::thread([this] { loop(); });
}

CommWatchdog::~CommWatchdog() {
    {
        std::lock_guard lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
        // The failure handler normally exits the process from the watchdog's thread; if
        // it returned and this thread is the one destroying us, never join ourselves.
        if (thread_.get_id() == std::this_thread::get_id()) thread_.detach();
        else thread_.join();
    }
}

void CommWatchdog::watch(WatchedComm comm) {
    std::lock_guard lock(mu_);
    comms_.push_back(std::move(comm));
}

size_t CommWatchdog::unwatch(const void* owner) {
    std::lock_guard lock(mu_);
    std::erase_if(comms_, [&](const WatchedComm& c) { return c.owner == owner; });
    return comms_.size();
}

bool CommWatchdog::abort_all(const std::string& why) {
    if (aborted_.exchange(true)) return false;
    // Every communicator, not only a failing one: the rank may be blocked in a collective
    // on another group that waits for a rank of the failed one. On a thread of its own with
    // a deadline: a wedged device can keep ncclCommAbort from returning, and the report
    // (which _exits) must still happen. The thread is detached; the process is ending.
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> finished = done->get_future();
    std::thread([this, done] {
        {
            std::lock_guard lock(mu_);
            for (WatchedComm& c : comms_)
                if (c.abort) c.abort();
        }
        done->set_value();
    }).detach();
    if (finished.wait_for(std::chrono::duration<double>(limits_.abort_deadline_s)) != std::future_status::ready) {
        std::fprintf(stderr, "ptd-engine: aborting the NCCL communicators (%s) did not finish within %g s; "
                             "reporting the failure without waiting for them\n",
                     why.c_str(), limits_.abort_deadline_s);
        std::fflush(stderr);
    }
    return true;
}

bool CommWatchdog::poll_once() {
    if (reported_.load()) return true;
    std::string what;
    if (std::string reason = peer_failure_ ? peer_failure_() : ""; !reason.empty()) {
        // "<context>: <detail>" as comm_failure_handler (failure.h) splits it.
        what = "the NCCL watchdog's abort of every communicator: peer " + reason;
    } else if (!aborted_.load()) {
        std::lock_guard lock(mu_);
        for (const WatchedComm& c : comms_) {
            if (!c.async_error) continue;
            if (std::string err = c.async_error(); !err.empty()) {
                what = c.name + " asynchronous NCCL operation: " + err + " (every NCCL communicator aborted)";
                break;
            }
        }
    }
    if (what.empty() && !aborted_.load() && limits_.collective_timeout_s > 0) {
        std::lock_guard lock(mu_);
        for (const WatchedComm& c : comms_) {
            if (!c.oldest_pending) continue;
            const std::optional<PendingOp> op = c.oldest_pending();
            if (!op || op->age_s <= limits_.collective_timeout_s) continue;
            char age[64];
            std::snprintf(age, sizeof age, "%.0f s", op->age_s);
            what = "rank " + std::to_string(limits_.rank) + ", " + c.name + ": " + op->what + " not complete after " +
                   age + " (deadline " + std::to_string((long)limits_.collective_timeout_s) +
                   " s, --timeout) while every peer is alive: a collective some member never joined or sized "
                   "differently (every NCCL communicator aborted)";
            break;
        }
    }
    if (what.empty()) return false;
    abort_all(what);
    if (!reported_.exchange(true) && on_failure_) on_failure_(what);
    return true;
}

void CommWatchdog::loop() {
    std::unique_lock lock(mu_);
    while (!stop_) {
        cv_.wait_for(lock, std::chrono::duration<double>(poll_s_), [&] { return stop_; });
        if (stop_) return;
        lock.unlock();
        const bool found = poll_once();
        lock.lock();
        if (found) return;  // reported; the handler normally exits the process
    }
}

}  // namespace ptd::engine
