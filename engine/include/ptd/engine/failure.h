// failure.h — process-wide fatal-error reporting of one ptd-engine rank. A rank that
// cannot go on says why on stderr, emits one error event for the metrics stream, tells
// the store (so every other rank aborts with a message naming this one) and exits 1.
// Communicator failures and the store monitor's abort both end up here, from whatever
// thread noticed them first.
#pragma once

#include <functional>
#include <string>

#include "ptd/engine/comm.h"

namespace ptd::engine {

class KvClient;

// Remembers the store and rank used by fatal_run_error, and the callback that writes one
// JSON error event line to stdout (may be empty). `store` may be null (no store yet / a
// single-process run); it must outlive every later fatal_run_error.
void install_failure_reporting(KvClient* store, int rank, std::function<void(const std::string&)> emit_error_event);

// Prints "ptd-engine: rank R: error: <message>" to stderr, emits the error event, reports
// the failure to the store, flushes stdout/stderr and _exit(1)s — within 5 s even when a
// write to a pipe nobody reads (a cut-off host's SSH channel) blocks. Safe from any thread;
// when several threads call it at once, one reports and the others wait for the exit.
[[noreturn]] void fatal_run_error(const std::string& message);

// The handler to pass to make_gloo_groups. On a failed collective it waits up to 3 s for
// the monitor's abort reason: with one, the error names the failed peer
//   "peer rank 3 (pid 41234 on host-a) died: connection closed without goodbye (during tp all_reduce_sum …)"
// and without one it reports Gloo's error with the group, operation and member ranks.
// Then fatal_run_error.
FailureHandler comm_failure_handler();

}  // namespace ptd::engine
