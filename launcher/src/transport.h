// transport.h — one host's way of running ranks: local child processes or an SSH session
// (libssh). Internal to the launcher; the supervisor (launcher.cpp) drives one
// HostTransport per host and sees only this interface.
//
// Life cycle, all calls from the supervisor thread except signal_all():
//   connect() → [upload()] → [free_port()] → start_rank() for each rank → run_io()
//   run_io() starts the transport's own I/O thread; from then on lines and exits arrive
//   through the TransportSink from that thread. join() waits for the thread to end, which
//   it does once every started rank has exited or the host is lost.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ptd/launch.h"

namespace ptd {

// Receives what a host's ranks do. Called from the transport's I/O thread; must not block
// for long (the supervisor queues and returns).
struct TransportSink {
    virtual ~TransportSink() = default;
    // One complete line (no newline) of a rank's stdout or stderr. Lines longer than
    // 1 MiB are split. A last line without newline is delivered when the stream closes.
    virtual void line(int rank, bool is_stderr, std::string text) = 0;
    // The rank's process is gone: exit status, 128 + signal, or -1 when the host was lost.
    // Called exactly once per started rank, after its last line.
    virtual void rank_exited(int rank, int exit_code) = 0;
    // The rank's pid on its host, when it becomes known after start_rank (SSH: from the
    // remote shell's first line). Also its process group id.
    virtual void rank_pid(int rank, long pid) { (void)rank, (void)pid; }
    // The connection broke (keepalive failed, socket error). Every rank of the host that
    // has not exited gets rank_exited(rank, -1) after this.
    virtual void host_lost(int host, std::string why) = 0;
};

class HostTransport {
public:
    virtual ~HostTransport() = default;
    // SSH: connect, check the host key, authenticate. Errors are user-facing and say what
    // to do ("host key for localhost:2222 changed: known SHA256:..., offered SHA256:...").
    virtual Result<void> connect() = 0;
    // Copy a local file to `remote_path` (parent folders created, mode 0755) and check the
    // SHA-256 computed on the host against `sha256_hex`. Local transport: not used.
    virtual Result<void> upload(const std::string& local_path, const std::string& remote_path,
                                const std::string& sha256_hex) = 0;
    // The same for text made here (the job as the hosts read it).
    virtual Result<void> upload_text(const std::string& text, const std::string& remote_path) = 0;
    // Copy `remote_path` on the host to `local_path` (written as local_path + ".part", then
    // renamed over it, so a run directory this machine shares with the host stays whole
    // even when both paths are one file). For after join(): the ranks' output files.
    // false: the host has no such file. A file over `max_bytes` or not a regular file is an
    // error naming it. Local transport: not used.
    virtual Result<bool> download(const std::string& remote_path, const std::string& local_path,
                                  int64_t max_bytes) = 0;
    // Whether `name` (MASTER_ADDR) resolves on this host, asked on the host itself; the
    // error names the address and the host. Local transport: nothing to check.
    virtual Result<void> check_resolves(const std::string& name) = 0;
    // A free TCP port on this host (for MASTER_PORT on the first host).
    virtual Result<int> free_port() = 0;
    // Start one rank (rank.argv and rank.env for local, rank.shell_command over SSH) in its
    // own process group. Its pid arrives in *pid (0 if not yet known).
    virtual Result<void> start_rank(const RankPlan& rank, long* pid) = 0;
    // Start the I/O thread.
    virtual void run_io(TransportSink& sink) = 0;
    // Send `sig` (SIGTERM, SIGKILL) to the process group of every rank that has not exited.
    // Thread-safe and non-blocking (SSH queues it for the I/O thread).
    virtual void signal_all(int sig) = 0;
    // Wait for the I/O thread; after it returns every started rank has been reported.
    virtual void join() = 0;
    // SIGKILL to process groups an earlier connection to this host started and could not
    // stop (a restart after the host was lost: its ranks may still run there). Before any
    // rank starts; best effort. Local transport: nothing (local ranks always die with
    // the teardown).
    virtual void kill_stale_groups(const std::vector<long>& pgids) { (void)pgids; }
};

// The address an SSH connection to `host` reaches: the HostName of its entry in the ssh
// config (`ssh_config`, "" = ~/.ssh/config), as libssh reads it, else `host` itself.
// Reads the config file only; no network.
std::string ssh_reached_host(const std::string& host, const std::string& ssh_config);

// `host_index` is the host's index in plan.hosts.
std::unique_ptr<HostTransport> make_local_transport(const LaunchPlan& plan, int host_index);
std::unique_ptr<HostTransport> make_ssh_transport(const LaunchPlan& plan, int host_index);

}  // namespace ptd
