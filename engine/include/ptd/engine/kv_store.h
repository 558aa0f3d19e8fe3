// kv_store.h — the rendezvous key-value store and liveness monitor of a run, served over
// TCP by rank 0 at MASTER_ADDR:MASTER_PORT (torchrun's TCPStore role). Every rank
// connects a client; Gloo contexts rendezvous through it (see comm.h) and it will carry
// NCCL's unique id later.
//
// Liveness: each rank also keeps a monitor connection that sends a heartbeat. The server
// declares a rank failed when its monitor connection closes without a goodbye (process
// died) or when no heartbeat arrived for `stall_timeout_s` (process stopped / hung), and
// a rank may report its own fatal error. The server then tells every other rank; their
// monitors call the abort callback with a message that names the failed rank, e.g.
//   "rank 3 (pid 41234 on host-a) died: connection closed without goodbye"
//   "rank 2 (pid 41230 on host-a) stalled: no heartbeat for 30.0 s"
//   "rank 1 (pid 41229 on host-a) failed: <its own error message>"
// If the server (rank 0) itself disappears, every monitor reports
//   "rank 0 (store at ADDR:PORT) died: connection lost".
//
// Authentication: the store serves only connections that prove the run's secret
// (challenge–response, HMAC-SHA-256 over a fresh server nonce; engine/gloo/kv_wire.h).
// The secret reaches every rank in PTD_RUN_SECRET (ptd launch makes one per run); without
// one the store serves only a loopback address. Refusals (no or wrong secret, a replayed
// answer, a flood, an oversized or malformed frame) close that connection and are logged
// once per peer address and kind, never crash the server or disturb the run.
//
// Wire format: length-prefixed binary frames; malformed frames close that connection
// with an error log, never crash the server.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ptd/common/diagnostic.h"

namespace ptd::engine {

struct KvServerOptions {
    // The address to listen on: MASTER_ADDR (what it resolves to), never every interface.
    std::string bind_addr = "127.0.0.1";
    // The run's secret; empty is allowed only on a loopback bind_addr (start() refuses otherwise).
    std::string secret;
    int port = 29500;
    int world_size = 1;
    double stall_timeout_s = 60;   // no heartbeat this long → the rank is declared stalled
};

class KvServer {
public:
    // Binds and starts serving on a background thread. Error names the address and errno.
    static Result<std::unique_ptr<KvServer>> start(const KvServerOptions& options);
    virtual ~KvServer() = default;  // stops the thread, closes every connection
    // The port actually bound (differs from options.port when that was 0 = any free port).
    virtual int port() const = 0;
    // Blocks until every rank said goodbye (normal end) or timeout_s passed; true if all did.
    virtual bool wait_all_goodbye(double timeout_s) = 0;
};

class KvClient {
public:
    // Connects to addr:port and answers its challenge with `secret`, retrying until
    // timeout_s (rank 0's server may start later). Errors: "cannot reach the store at
    // ADDR:PORT after N s: <errno text>"; "the store at ADDR:PORT refused host H: <why>".
    static Result<std::unique_ptr<KvClient>> connect(const std::string& addr, int port, double timeout_s,
                                                     const std::string& secret = "");
    virtual ~KvClient() = default;

    // set/check/add throw std::runtime_error naming the store when it cannot be reached
    // (its connection was lost, or no reply came within 120 s).
    virtual void set(const std::string& key, const std::vector<uint8_t>& value) = 0;
    // Blocks until the key exists; error after timeout_s naming the key.
    virtual Result<std::vector<uint8_t>> get(const std::string& key, double timeout_s) = 0;
    virtual bool check(const std::vector<std::string>& keys) = 0;     // all exist now
    virtual int64_t add(const std::string& key, int64_t delta) = 0;   // atomic counter, returns new value

    // Start the monitor for `rank` (a second connection + heartbeat thread).
    // `on_abort` runs on the monitor thread with the message naming the failed rank.
    // With store_lease_s > 0 the rank holds a lease on the run: it lasts while the store
    // echoes its heartbeats, and when nothing has come back for store_lease_s (rank 0
    // stopped or wedged, or this host cut off from it) the monitor aborts with
    //   "lost the run's store at ADDR:PORT (rank 0 stalled, or this host cut off from it):
    //    no reply to heartbeats for X s, past the store lease of L s; …"
    virtual Result<void> start_monitor(int rank, double heartbeat_s,
                                       std::function<void(const std::string&)> on_abort,
                                       double store_lease_s = 0) = 0;
    // "" while this rank's lease holds (or no lease was asked for); otherwise why not: the
    // store silent past the lease, or the run aborted. Writers into the run directory ask
    // right before they commit, so a rank cut off from its run writes nothing there.
    virtual std::string lease_lost() const = 0;
    // This rank failed: tell the server (which aborts the others) — best effort; a no-op
    // before start_monitor. Safe to call from any thread. The server sends the ABORT to
    // every other monitor first and then echoes it to this one, so abort_reason()
    // returning afterwards means the others have been told.
    virtual void report_failure(const std::string& message) = 0;
    // The reason the run was aborted, if the monitor has heard one within wait_s; "" if not.
    virtual std::string abort_reason(double wait_s) = 0;
    // Normal end: goodbye on the monitor connection, then stop heartbeating.
    virtual void goodbye() = 0;
};

// The run's secret for this rank: PTD_RUN_SECRET, or "" when it is unset and MASTER_ADDR
// (`master_addr`) is a loopback address (a run by hand on one machine). Errors name the
// variable: unset with a MASTER_ADDR other hosts could reach, or set but shorter than 32
// characters (ptd launch gives 64 hex digits of /dev/urandom).
Result<std::string> run_secret_from_env(const std::string& master_addr);

}  // namespace ptd::engine
