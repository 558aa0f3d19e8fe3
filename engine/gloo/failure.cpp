// failure.cpp — the one exit path of a failing rank (failure.h). Whoever notices first
// (the trainer, a communicator, the store monitor's thread) wins; the report happens
// once, then the process leaves with _exit so no destructor can block on a dead peer.
#include "ptd/engine/failure.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

#include "ptd/engine/kv_store.h"

namespace ptd::engine {
namespace {

std::mutex g_mu;
KvClient* g_store = nullptr;
int g_rank = -1;
std::function<void(const std::string&)> g_emit;
std::atomic<bool> g_failing{false};

// The longest a failing rank may take to leave. The report below writes to stderr and
// stdout, which are pipes to the launcher (over SSH: to sshd); on a host whose network is
// cut nobody drains them, and a write into a full pipe blocks for as long as sshd keeps
// the session (minutes). Telling the store is bounded already (a 2 s send timeout, a 2 s
// wait for its echo), so 5 s leaves room for the normal path and ends a blocked one.
constexpr double kExitDeadlineS = 5;

}  // namespace

void install_failure_reporting(KvClient* store, int rank, std::function<void(const std::string&)> emit_error_event) {
    std::lock_guard lock(g_mu);
    g_store = store;
    g_rank = rank;
    g_emit = std::move(emit_error_event);
}

// One line, without a leading "error: " (the report adds its own) or a trailing newline:
// callers pass texts composed from diagnostics, and the store echoes the message inside
// "...; aborting the run", where a line break or a second "error:" would garble it.
static std::string one_line_message(std::string text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    for (size_t nl; (nl = text.find('\n')) != std::string::npos;) text.replace(nl, 1, "; ");
    while (text.starts_with("error: ")) text.erase(0, 7);
    return text;
}

void fatal_run_error(const std::string& raw_message) {
    const std::string message = one_line_message(raw_message);
    if (g_failing.exchange(true)) {
        // Another thread is already reporting and will _exit the process; a second
        // report would only blur which failure came first.
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    // Started before any output: whatever below blocks, the process still leaves.
    std::thread([] {
        std::this_thread::sleep_for(std::chrono::duration<double>(kExitDeadlineS));
        _exit(1);
    }).detach();
    KvClient* store;
    int rank;
    std::function<void(const std::string&)> emit;
    {
        std::lock_guard lock(g_mu);
        store = g_store;
        rank = g_rank;
        emit = g_emit;
    }
    if (rank >= 0)
        std::fprintf(stderr, "ptd-engine: rank %d: error: %s\n", rank, message.c_str());
    else
        std::fprintf(stderr, "ptd-engine: error: %s\n", message.c_str());
    std::fflush(stderr);
    if (emit) {
        try {
            emit(message);
        } catch (...) {
            // The process is exiting anyway; a failing metrics writer must not hide the error.
        }
    }
    if (store) {
        store->report_failure(message);
        // Wait (bounded) for the store's echo: it comes after every other rank was told,
        // so exiting now cannot make them report "store died" instead of this message.
        store->abort_reason(2.0);
    }
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(1);
}

FailureHandler comm_failure_handler() {
    return [](const std::string& what) {
        // `what` is "<group> <op> (global ranks …): <Gloo's message>" (see gloo_comm.cpp).
        std::string context = what, detail;
        if (auto colon = what.find(": "); colon != std::string::npos) {
            context = what.substr(0, colon);
            detail = what.substr(colon + 2);
        }
        KvClient* store;
        {
            std::lock_guard lock(g_mu);
            store = g_store;
        }
        // A dead peer usually shows up in Gloo (connection reset) a moment before or
        // after the store hears of it; the store's reason names the rank and how it
        // failed, which Gloo's socket error cannot.
        std::string reason = store ? store->abort_reason(3.0) : "";
        if (!reason.empty()) fatal_run_error("peer " + reason + " (during " + context + ")");
        fatal_run_error(context + " failed and no rank was reported failed: " + detail);
    };
}

}  // namespace ptd::engine
