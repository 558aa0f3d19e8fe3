// ssh_transport.cpp — one host's ranks over one libssh session: connect with host-key
// checking and public-key auth only, upload the engine over SFTP, start each rank as an
// exec channel, and stream every channel's output from a single I/O thread.
//
// libssh sessions are not thread-safe. Before run_io() the supervisor thread makes every
// call (blocking mode); from run_io() on, only the I/O thread touches the session
// (non-blocking mode, driven by an ssh_event). signal_all() just queues the signal and
// wakes the I/O thread through an eventfd.
#include "ptd/common/file_read.h"
#include "transport.h"

#include <libssh/callbacks.h>
#include <libssh/libssh.h>
#include <libssh/sftp.h>
#include <libssh/server.h>  // ssh_send_keepalive (works for clients too; declared here)

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pwd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>
#include <vector>

#include "ptd/common/sha256.h"

namespace ptd {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t max_line_bytes = 1 << 20;     // longer lines are delivered in pieces
constexpr size_t read_chunk = 64 * 1024;       // per stream per round: no rank starves others
constexpr size_t upload_chunk = 64 * 1024;     // below OpenSSH's 256 KiB SFTP message limit
constexpr double default_keepalive_s = 5;      // a keepalive request at least this often;
                                               // 3 intervals of silence = host lost
constexpr double pgid_wait_s = 2;              // signal without a known pgid: fall back after
constexpr const char* pid_line_prefix = "ptd-launch-pid ";

// Passphrase prompts are refused: a launcher must never read the terminal, and an
// encrypted key should fail with a message (use ssh-agent) instead of hanging.
int refuse_passphrase(const char*, char*, size_t, int, int, void*) { return -1; }

std::string current_user() {
    if (const passwd* pw = getpwuid(getuid())) return pw->pw_name;
    return "?";
}

// "SHA256:base64" without padding, as OpenSSH prints it; "" when the key is unusable.
std::string fingerprint(ssh_key key) {
    if (key == nullptr) return "";
    unsigned char* hash = nullptr;
    size_t len = 0;
    if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &len) != SSH_OK) return "";
    char* fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, len);
    ssh_clean_pubkey_hash(&hash);
    if (fp == nullptr) return "";
    std::string out = fp;
    ssh_string_free_char(fp);
    return out;
}

// Signal number for an SSH signal name ("TERM", no SIG prefix); 0 if unknown.
int signal_number(const char* name) {
    if (name == nullptr) return 0;
    for (int s = 1; s < NSIG; ++s) {
        const char* abbrev = sigabbrev_np(s);
        if (abbrev != nullptr && std::strcmp(abbrev, name) == 0) return s;
    }
    return 0;
}

// Remote paths: SFTP and the remote shell both start in the home folder, so "~/x" is
// sent as "x" (neither expands "~" inside quotes).
std::string remote_relative(const std::string& p) {
    if (p.rfind("~/", 0) == 0) return p.substr(2);
    return p;
}

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    size_t i = 0;
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n')) ++i;
    return s.substr(i);
}

// A known_hosts entry's key for `host_port` ("host" or "[host]:port"), read directly:
// libssh does not hand back the recorded entry when the key changed. Plain (unhashed)
// host patterns only; "" when not found.
std::string recorded_fingerprint(const std::string& file, const std::string& host_port,
                                 const std::string& key_type) {
    std::ifstream in(file);
    std::string line;
    std::string any;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::string hosts, type, b64;
        if (!(ls >> hosts >> type >> b64) || hosts.empty() || hosts[0] == '#') continue;
        if (hosts[0] == '@') {  // @cert-authority / @revoked marker: not a plain key
            continue;
        }
        bool match = false;
        std::istringstream hs(hosts);
        for (std::string h; std::getline(hs, h, ',');)
            if (h == host_port) match = true;
        if (!match) continue;
        ssh_key key = nullptr;
        if (ssh_pki_import_pubkey_base64(b64.c_str(), ssh_key_type_from_name(type.c_str()), &key) != SSH_OK)
            continue;
        std::string fp = fingerprint(key);
        ssh_key_free(key);
        if (type == key_type) return fp;
        if (any.empty()) any = fp;
    }
    return any;
}

// Keep a dead peer from hanging blocking calls forever: the kernel probes an idle
// connection and fails writes nobody acknowledges.
void set_tcp_keepalive(int fd) {
    if (fd < 0) return;
    int on = 1, idle = 5, interval = 5, count = 3;
    unsigned user_timeout_ms = 30000;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

// Milliseconds since the socket last received data, or -1 when unknown.
long ms_since_last_receive(int fd) {
    tcp_info info{};
    socklen_t len = sizeof info;
    if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return -1;
    return (long)info.tcpi_last_data_recv;
}

// One rank's exec channel and what has been seen of it.
struct RankChannel {
    int rank = 0;
    ssh_channel channel = nullptr;
    ssh_channel_callbacks_struct callbacks{};  // libssh keeps a pointer: address must be stable
    std::string partial[2];                     // [0] stdout, [1] stderr: bytes after the last '\n'
    bool eof[2] = {false, false};
    long pgid = 0;                              // from the swallowed "ptd-launch-pid N" line
    int exit_status = -1;                       // from exit-status
    int exit_signal = 0;                        // from exit-signal (signal number; -1 unknown name)
    bool reported = false;
    int waiting_signal = 0;                     // requested before the pgid was known
    Clock::time_point waiting_since{};
};

// A short-lived exec channel the I/O thread opens to run `kill` (non-blocking steps).
struct ControlChannel {
    ssh_channel channel = nullptr;
    std::string command;
    std::vector<int> ranks;                     // whose processes it signals (fallback on failure)
    int signal = 0;
    enum class Step { open, exec, run } step = Step::open;
    Clock::time_point deadline;
};

class SshTransport final : public HostTransport {
public:
    SshTransport(const LaunchPlan& plan, int host_index) : plan_(plan), host_index_(host_index) {
        const HostPlan& hp = plan.hosts.at(host_index);
        host_ = hp.entry.host;
        engine_ = hp.engine;
        wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        // PTD_SSH_KEEPALIVE_S: for tests and unusual networks (docs/launcher.md).
        if (const char* k = getenv("PTD_SSH_KEEPALIVE_S")) {
            double v = std::atof(k);
            if (v >= 0.2) keepalive_s_ = v;
        }
    }

    ~SshTransport() override {
        if (io_thread_.joinable()) {
            quit_.store(true);
            wake();
            io_thread_.join();
        }
        kill_leftovers();
        for (auto& r : ranks_)
            if (r->channel != nullptr) ssh_channel_free(r->channel);
        for (auto& c : controls_)
            if (c.channel != nullptr) ssh_channel_free(c.channel);
        if (session_ != nullptr) {
            if (ssh_is_connected(session_)) ssh_disconnect(session_);
            ssh_free(session_);
        }
        if (wake_fd_ >= 0) close(wake_fd_);
    }

    Result<void> connect() override;
    Result<void> upload(const std::string& local_path, const std::string& remote_path,
                        const std::string& sha256_hex) override;
    Result<void> upload_text(const std::string& text, const std::string& remote_path) override;
    Result<bool> download(const std::string& remote_path, const std::string& local_path, int64_t max_bytes) override;
    Result<void> check_resolves(const std::string& name) override;
    Result<int> free_port() override;
    Result<void> start_rank(const RankPlan& rank, long* pid) override;
    void run_io(TransportSink& sink) override;
    void signal_all(int sig) override;
    void kill_stale_groups(const std::vector<long>& pgids) override {
        std::string groups;
        for (long g : pgids)
            if (g > 1) groups += " -" + std::to_string(g);
        if (!groups.empty()) (void)run_command("kill -KILL --" + groups + " 2>/dev/null", 5);
    }
    void join() override {
        if (io_thread_.joinable()) io_thread_.join();
    }

private:
    // "user@host:port" with the values actually used.
    std::string where() const { return user_ + "@" + host_ + ":" + std::to_string(port_); }
    std::string host_port() const { return host_ + ":" + std::to_string(port_); }
    std::unexpected<Error> error(std::string msg) const {
        return fail(SourceLoc{}, "ssh", std::move(msg));
    }
    std::string ssh_error() const { return session_ ? ssh_get_error(session_) : "no session"; }

    Result<void> check_host_key();
    Result<void> authenticate();
    Result<void> upload_stream(std::istream& in, const std::string& local_path, const std::string& remote_path,
                               const std::string& sha256_hex);
    // An SFTP session on the connection, freed when it goes out of scope.
    struct SftpFree {
        void operator()(sftp_session s) const { sftp_free(s); }
    };
    using SftpSession = std::unique_ptr<std::remove_pointer_t<sftp_session>, SftpFree>;
    // Uploads and downloads both start SFTP here; `purpose` ("write PATH") goes in the error.
    Result<SftpSession> open_sftp(const std::string& purpose);

    // Blocking exec of `command`, before run_io only: stdout, stderr, exit status.
    struct CommandResult {
        std::string out, err;
        int status = -1;
    };
    Result<CommandResult> run_command(const std::string& command, double timeout_s);

    // I/O thread.
    void io_loop();
    void wake() {
        uint64_t one = 1;
        if (wake_fd_ >= 0 && write(wake_fd_, &one, sizeof one) < 0) {
            // Full counter: the I/O thread is already due to wake.
        }
    }
    bool pump_rank(RankChannel& r, bool& progress);           // false: session error
    void deliver(RankChannel& r, int stream, std::string_view data);
    void flush_partial(RankChannel& r);
    void finish_rank(RankChannel& r, int code);
    void handle_signal_requests();
    void send_kill(int sig, const std::vector<RankChannel*>& targets);
    void send_channel_signal(RankChannel& r, int sig);
    void pump_controls();
    bool connection_broken(std::string& why, Clock::time_point keepalive_since);
    void kill_leftovers();
    void lose_host(const std::string& why);

    static void on_exit_status(ssh_session, ssh_channel, int status, void* user) {
        static_cast<RankChannel*>(user)->exit_status = status;
    }
    static void on_exit_signal(ssh_session, ssh_channel, const char* sig, int, const char*,
                               const char*, void* user) {
        int n = signal_number(sig);
        static_cast<RankChannel*>(user)->exit_signal = n > 0 ? n : -1;
    }
    static int on_wake(socket_t fd, int, void*) {
        uint64_t v;
        while (read(fd, &v, sizeof v) > 0) {
        }
        return 0;
    }

    const LaunchPlan plan_;  // a copy: the transport may outlive the caller's plan
    int host_index_;
    double keepalive_s_ = default_keepalive_s;
    std::string host_, user_, engine_;
    unsigned port_ = 22;
    ssh_session session_ = nullptr;
    bool lost_ = false;  // the I/O thread gave the connection up (lose_host)
    ssh_callbacks_struct session_callbacks_{};
    std::vector<std::unique_ptr<RankChannel>> ranks_;
    std::deque<ControlChannel> controls_;

    std::thread io_thread_;
    TransportSink* sink_ = nullptr;
    int wake_fd_ = -1;
    std::atomic<bool> quit_{false};
    std::mutex signal_mu_;
    std::vector<int> signal_queue_;  // guarded by signal_mu_
};

// ---------------------------------------------------------------------------------------
// Connect, host key, auth (supervisor thread, blocking).

Result<void> SshTransport::connect() {
    const HostPlan& hp = plan_.hosts.at(host_index_);
    const LaunchSpec& launch = plan_.job.launch;
    session_ = ssh_new();
    if (session_ == nullptr) return error("cannot create an SSH session for " + hp.entry.host);

    int verbosity = SSH_LOG_NOLOG;
    ssh_options_set(session_, SSH_OPTIONS_LOG_VERBOSITY, &verbosity);
    ssh_options_set(session_, SSH_OPTIONS_HOST, host_.c_str());
    unsigned default_port = 0;
    ssh_options_get_port(session_, &default_port);

    // ~/.ssh/config (or the given file) first, so that what the hostfile and the job say
    // explicitly wins over it, as with `ssh -p`.
    const char* config = plan_.ssh_config.empty() ? nullptr : plan_.ssh_config.c_str();
    if (ssh_options_parse_config(session_, config) != SSH_OK)
        return error("cannot read ssh config " + (config ? plan_.ssh_config : std::string("~/.ssh/config")) +
                     ": " + ssh_error());

    std::string user = !hp.entry.user.empty() ? hp.entry.user : launch.user;
    if (!user.empty()) ssh_options_set(session_, SSH_OPTIONS_USER, user.c_str());
    unsigned config_port = 0;
    ssh_options_get_port(session_, &config_port);
    bool job_port_given = plan_.job.origin.locations.count("launch.port") > 0 || launch.port != 22;
    unsigned port = hp.entry.port > 0       ? (unsigned)hp.entry.port
                    : job_port_given        ? (unsigned)launch.port
                    : config_port != default_port && config_port > 0 ? config_port
                                                                     : (unsigned)launch.port;
    ssh_options_set(session_, SSH_OPTIONS_PORT, &port);
    port_ = port;

    char* resolved_user = nullptr;
    if (ssh_options_get(session_, SSH_OPTIONS_USER, &resolved_user) == SSH_OK && resolved_user) {
        user_ = resolved_user;
        ssh_string_free_char(resolved_user);
    } else {
        user_ = current_user();
    }

    if (!plan_.known_hosts.empty()) ssh_options_set(session_, SSH_OPTIONS_KNOWNHOSTS, plan_.known_hosts.c_str());
    long timeout_s = launch.connect_timeout_s > 0 ? (long)std::max(1.0, launch.connect_timeout_s) : 10;
    ssh_options_set(session_, SSH_OPTIONS_TIMEOUT, &timeout_s);
    // Small request/reply exchanges (SFTP writes, channel requests) otherwise wait on
    // Nagle + delayed ACK, ~40 ms each.
    int nodelay = 1;
    ssh_options_set(session_, SSH_OPTIONS_NODELAY, &nodelay);

    session_callbacks_ = {};
    session_callbacks_.auth_function = refuse_passphrase;
    ssh_callbacks_init(&session_callbacks_);
    ssh_set_callbacks(session_, &session_callbacks_);

    if (ssh_connect(session_) != SSH_OK)
        return error("cannot connect to " + where() + ": " + ssh_error() +
                     "; check that the host is up and sshd listens on port " + std::to_string(port_) +
                     " (waited up to " + std::to_string(timeout_s) + " s, launch.connect_timeout_s)");
    set_tcp_keepalive(ssh_get_fd(session_));

    if (auto r = check_host_key(); !r) return r;
    return authenticate();
}

Result<void> SshTransport::check_host_key() {
    ssh_key server_key = nullptr;
    if (ssh_get_server_publickey(session_, &server_key) != SSH_OK)
        return error("cannot read the host key of " + host_port() + ": " + ssh_error());
    std::string offered = fingerprint(server_key);
    std::string key_type = ssh_key_type_to_char(ssh_key_type(server_key));
    ssh_key_free(server_key);

    std::string file = plan_.known_hosts.empty() ? std::string("~/.ssh/known_hosts") : plan_.known_hosts;
    switch (ssh_session_is_known_server(session_)) {
    case SSH_KNOWN_HOSTS_OK:
        return {};
    case SSH_KNOWN_HOSTS_CHANGED:
    case SSH_KNOWN_HOSTS_OTHER: {
        std::string known;
        ssh_knownhosts_entry* entry = nullptr;
        if (ssh_session_get_known_hosts_entry(session_, &entry) == SSH_KNOWN_HOSTS_OK && entry) {
            known = fingerprint(entry->publickey);
        }
        ssh_knownhosts_entry_free(entry);
        if (known.empty()) {
            std::string path = plan_.known_hosts;
            char* opt = nullptr;
            if (path.empty() && ssh_options_get(session_, SSH_OPTIONS_KNOWNHOSTS, &opt) == SSH_OK && opt) {
                path = opt;
                ssh_string_free_char(opt);
            }
            std::string pattern = port_ == 22 ? host_ : "[" + host_ + "]:" + std::to_string(port_);
            if (!path.empty()) known = recorded_fingerprint(path, pattern, key_type);
        }
        if (known.empty()) known = "(recorded in " + file + ")";
        return error("host key of " + host_port() + " CHANGED: known " + known + ", offered " + offered +
                     " (" + key_type + "); this can be an attack. If the host was reinstalled, remove "
                     "its old line from " + file + " (ssh-keygen -R '" +
                     (port_ == 22 ? host_ : "[" + host_ + "]:" + std::to_string(port_)) + "'" +
                     (plan_.known_hosts.empty() ? "" : " -f " + shell_quote(plan_.known_hosts)) +
                     ") and re-run with --accept-new-host-keys");
    }
    case SSH_KNOWN_HOSTS_UNKNOWN:
    case SSH_KNOWN_HOSTS_NOT_FOUND:
        if (!plan_.accept_new_host_keys)
            return error("host key of " + host_port() + " is not known (" + offered + ", " + key_type +
                         "); re-run with --accept-new-host-keys to record it in " + file +
                         " (or connect once with ssh and check the fingerprint)");
        if (ssh_session_update_known_hosts(session_) != SSH_OK)
            return error("cannot record the host key of " + host_port() + " in " + file + ": " + ssh_error());
        return {};
    case SSH_KNOWN_HOSTS_ERROR:
    default:
        return error("cannot check the host key of " + host_port() + " against " + file + ": " + ssh_error());
    }
}

Result<void> SshTransport::authenticate() {
    const std::string& identity = plan_.job.launch.identity;
    std::vector<std::string> notes;

    // "none" first: it tells which methods the server offers (and rarely succeeds).
    int rc = ssh_userauth_none(session_, nullptr);
    if (rc == SSH_AUTH_SUCCESS) return {};
    if (rc == SSH_AUTH_ERROR) return error("auth failed for " + where() + ": " + ssh_error());
    int methods = ssh_userauth_list(session_, nullptr);
    if (methods != 0 && !(methods & SSH_AUTH_METHOD_PUBLICKEY))
        return error("auth failed for " + where() +
                     ": the server does not accept public keys; enable PubkeyAuthentication in its "
                     "sshd_config (password login is not supported)");

    if (!identity.empty()) {
        ssh_key key = nullptr;
        if (access(identity.c_str(), R_OK) != 0) {
            notes.push_back("identity " + identity + " cannot be read: " + std::strerror(errno));
        } else if (ssh_pki_import_privkey_file(identity.c_str(), nullptr, refuse_passphrase, nullptr, &key) !=
                   SSH_OK) {
            notes.push_back("identity " + identity +
                            " could not be loaded (encrypted? add it to ssh-agent with ssh-add)");
        } else {
            rc = ssh_userauth_publickey(session_, nullptr, key);
            ssh_key_free(key);
            if (rc == SSH_AUTH_SUCCESS) return {};
            if (rc == SSH_AUTH_ERROR) return error("auth failed for " + where() + ": " + ssh_error());
        }
    }
    // ssh-agent, then ~/.ssh/id_* and IdentityFile entries of the ssh config.
    rc = ssh_userauth_publickey_auto(session_, nullptr, nullptr);
    if (rc == SSH_AUTH_SUCCESS) return {};
    if (rc == SSH_AUTH_ERROR) return error("auth failed for " + where() + ": " + ssh_error());

    std::string tried = getenv("SSH_AUTH_SOCK") ? "agent, ~/.ssh/id_*" : "~/.ssh/id_* (no agent)";
    if (!identity.empty()) tried += ", " + identity;
    std::string msg = "auth failed for " + where() + ": no key accepted (tried " + tried +
                      "); add your public key to the host's authorized_keys or set launch.identity";
    for (const auto& n : notes) msg += "; " + n;
    return error(msg);
}

// ---------------------------------------------------------------------------------------
// Commands, upload, free port (supervisor thread, blocking).

Result<SshTransport::CommandResult> SshTransport::run_command(const std::string& command, double timeout_s) {
    if (session_ == nullptr) return error("not connected to " + host_);
    ssh_channel ch = ssh_channel_new(session_);
    if (ch == nullptr) return error("cannot open a channel on " + where() + ": " + ssh_error());
    auto done = [&](Result<CommandResult> r) {
        ssh_channel_close(ch);
        ssh_channel_free(ch);
        return r;
    };
    if (ssh_channel_open_session(ch) != SSH_OK)
        return done(error("cannot open a channel on " + where() + ": " + ssh_error()));
    if (ssh_channel_request_exec(ch, command.c_str()) != SSH_OK)
        return done(error("cannot run `" + command + "` on " + where() + ": " + ssh_error()));
    CommandResult res;
    char buf[16384];
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (!ssh_channel_is_eof(ch)) {
        if (Clock::now() > deadline)
            return done(error("`" + command + "` on " + where() + " did not finish within " +
                              std::to_string((int)timeout_s) + " s"));
        int n = ssh_channel_read_timeout(ch, buf, sizeof buf, 0, 100);
        if (n == SSH_ERROR) return done(error("reading `" + command + "` on " + where() + ": " + ssh_error()));
        if (n > 0) res.out.append(buf, n);
        int e = ssh_channel_read_nonblocking(ch, buf, sizeof buf, 1);
        if (e == SSH_ERROR) return done(error("reading `" + command + "` on " + where() + ": " + ssh_error()));
        if (e > 0) res.err.append(buf, e);
    }
    // Whatever is still buffered on stderr.
    for (int e; (e = ssh_channel_read_nonblocking(ch, buf, sizeof buf, 1)) > 0;) res.err.append(buf, e);
    ssh_channel_send_eof(ch);
    res.status = ssh_channel_get_exit_status(ch);
    return done(std::move(res));
}

// Every SSH launch needs the host's SFTP subsystem, not only `launch.upload`: job.toml (and
// the job's extra files) go out over it and the measured timelines come back over it.
Result<SshTransport::SftpSession> SshTransport::open_sftp(const std::string& purpose) {
    SftpSession sftp(sftp_new(session_));
    if (sftp != nullptr && sftp_init(sftp.get()) == SSH_OK) return sftp;
    return error("cannot start SFTP on " + where() + " to " + purpose + ": " + ssh_error() +
                 "; the host's sshd needs an sftp Subsystem (job.toml goes out and the measured "
                 "timelines come back over it)");
}

Result<void> SshTransport::upload(const std::string& local_path, const std::string& remote_path,
                                  const std::string& sha256_hex) {
    if (session_ == nullptr) return error("not connected to " + host_);
    // A regular file only: a FIFO or /dev/zero would never finish uploading.
    if (auto f = open_regular_file(local_path, file_kind::data, "upload"); !f)
        return error("cannot upload " + local_path + ": " + f.error().one_line());
    std::ifstream in(local_path, std::ios::binary);
    if (!in) return error("cannot read " + local_path + " to upload it: " + std::strerror(errno));
    return upload_stream(in, local_path, remote_path, sha256_hex);
}

Result<void> SshTransport::upload_text(const std::string& text, const std::string& remote_path) {
    if (session_ == nullptr) return error("not connected to " + host_);
    std::istringstream in(text);
    return upload_stream(in, "the job text", remote_path, sha256_hex(text));
}

Result<void> SshTransport::upload_stream(std::istream& in, const std::string& local_path, const std::string& remote_path_in,
                                         const std::string& sha256_hex) {
    std::string remote_path = remote_relative(remote_path_in);
    auto session = open_sftp("write " + remote_path);
    if (!session) return std::unexpected(session.error());
    sftp_session sftp = session->get();

    // mkdir -p of the parent folders; "exists" is fine, anything else shows at open.
    for (size_t slash = remote_path.find('/', 1); slash != std::string::npos;
         slash = remote_path.find('/', slash + 1)) {
        std::string dir = remote_path.substr(0, slash);
        sftp_attributes a = sftp_stat(sftp, dir.c_str());
        if (a != nullptr) {
            bool is_dir = a->type == SSH_FILEXFER_TYPE_DIRECTORY;
            sftp_attributes_free(a);
            if (!is_dir) return error("cannot upload to " + host_ + ":" + remote_path + ": " + dir + " is not a folder");
            continue;
        }
        if (sftp_mkdir(sftp, dir.c_str(), 0755) != SSH_OK && sftp_get_error(sftp) != SSH_FX_FILE_ALREADY_EXISTS) {
            sftp_attributes again = sftp_stat(sftp, dir.c_str());  // raced with another upload?
            if (again == nullptr)
                return error("cannot create folder " + host_ + ":" + dir + ": " + ssh_error());
            sftp_attributes_free(again);
        }
    }

    sftp_file f = sftp_open(sftp, remote_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0755);
    if (f == nullptr) return error("cannot write " + host_ + ":" + remote_path + ": " + ssh_error());
    std::vector<char> buf(upload_chunk);
    while (in) {
        in.read(buf.data(), (std::streamsize)buf.size());
        std::streamsize n = in.gcount();
        for (std::streamsize off = 0; off < n;) {
            ssize_t w = sftp_write(f, buf.data() + off, (size_t)(n - off));
            if (w <= 0) {
                sftp_close(f);
                return error("writing " + host_ + ":" + remote_path + " failed: " + ssh_error());
            }
            off += w;
        }
    }
    if (in.bad()) {
        sftp_close(f);
        return error("reading " + local_path + " failed: " + std::strerror(errno));
    }
    if (sftp_close(f) != SSH_OK) return error("writing " + host_ + ":" + remote_path + " failed: " + ssh_error());
    // The umask may have narrowed the mode given at creation.
    if (sftp_chmod(sftp, remote_path.c_str(), 0755) != SSH_OK)
        return error("cannot chmod 0755 " + host_ + ":" + remote_path + ": " + ssh_error());

    auto r = run_command("sha256sum -- " + shell_quote(remote_path), 600);
    if (!r) return std::unexpected(r.error());
    if (r->status != 0)
        return error("cannot check the upload: `sha256sum` on " + where() + " exited " +
                     std::to_string(r->status) + ": " + trim(r->err));
    std::string got = r->out.substr(0, std::min<size_t>(64, r->out.size()));
    if (got != sha256_hex)
        return error("upload of " + local_path + " to " + host_ + ":" + remote_path +
                     " is corrupt: expected SHA-256 " + sha256_hex + ", the host computed " + got);
    return {};
}

Result<bool> SshTransport::download(const std::string& remote_path_in, const std::string& local_path,
                                    int64_t max_bytes) {
    if (session_ == nullptr) return error("not connected to " + host_);
    if (lost_) return error("cannot copy " + host_ + ":" + remote_path_in + ": the connection to " + where() + " was lost");
    if (io_thread_.joinable()) return error("internal error: download while the I/O thread runs");
    ssh_set_blocking(session_, 1);  // io_loop left the session non-blocking
    const std::string remote_path = remote_relative(remote_path_in);
    const std::string from = host_ + ":" + remote_path;
    auto session = open_sftp("read " + remote_path);
    if (!session) return std::unexpected(session.error());
    sftp_session sftp = session->get();
    sftp_attributes a = sftp_stat(sftp, remote_path.c_str());
    if (a == nullptr) {
        if (sftp_get_error(sftp) == SSH_FX_NO_SUCH_FILE) return false;
        return error("cannot read " + from + ": " + ssh_error());
    }
    const bool regular = a->type == SSH_FILEXFER_TYPE_REGULAR;
    const uint64_t size = a->size;
    sftp_attributes_free(a);
    if (!regular) return error("cannot copy " + from + ": not a regular file");
    if (max_bytes >= 0 && size > (uint64_t)max_bytes)
        return error("cannot copy " + from + ": " + std::to_string(size) + " bytes, more than the " +
                     std::to_string(max_bytes) + " allowed for it");
    sftp_file f = sftp_open(sftp, remote_path.c_str(), O_RDONLY, 0);
    if (f == nullptr) return error("cannot read " + from + ": " + ssh_error());
    struct FileCloser {
        sftp_file f;
        ~FileCloser() { sftp_close(f); }
    } file_closer{f};
    const std::string part = local_path + ".part";
    std::ofstream out(part, std::ios::binary | std::ios::trunc);
    if (!out) return error("cannot create " + part + ": " + std::strerror(errno));
    std::vector<char> buf(upload_chunk);
    uint64_t got = 0;
    for (;;) {
        ssize_t n = sftp_read(f, buf.data(), buf.size());
        if (n < 0) {
            out.close();
            std::remove(part.c_str());
            return error("reading " + from + " failed: " + ssh_error());
        }
        if (n == 0) break;
        got += (uint64_t)n;
        if (max_bytes >= 0 && got > (uint64_t)max_bytes) {  // grew after the stat
            out.close();
            std::remove(part.c_str());
            return error("cannot copy " + from + ": more than the " + std::to_string(max_bytes) + " bytes allowed for it");
        }
        out.write(buf.data(), n);
    }
    out.close();
    if (!out) {
        std::remove(part.c_str());
        return error("writing " + part + " failed: " + std::strerror(errno));
    }
    if (std::rename(part.c_str(), local_path.c_str()) != 0) {
        const int e = errno;
        std::remove(part.c_str());
        return error("cannot rename " + part + " to " + local_path + ": " + std::strerror(e));
    }
    return true;
}

// Asked on the host, with the host's own resolver (getent: glibc's NSS, as the engine's
// getaddrinfo), so an ssh alias or a name only this machine knows is caught before any
// rank starts instead of as a store timeout minutes later.
Result<void> SshTransport::check_resolves(const std::string& name) {
    const std::string command = "getent ahosts " + shell_quote(name);
    auto r = run_command(command, std::max(10.0, plan_.job.launch.connect_timeout_s));
    if (!r) return std::unexpected(r.error());
    if (r->status == 0) return {};
    if (r->status == 127) return {};  // no getent there: the engine checks it itself
    return error("MASTER_ADDR '" + name + "' does not resolve on host " + host_ + " (`" + command + "` exited " +
                 std::to_string(r->status) + (r->status == 2 ? ": not found" : "") +
                 "); set launch.master_addr (or --master-addr) to an address of the first host that every host "
                 "can reach, e.g. its IP");
}

Result<int> SshTransport::free_port() {
    std::string command = shell_quote(engine_) + " --free-port";
    auto r = run_command(command, std::max(10.0, plan_.job.launch.connect_timeout_s));
    if (!r) return std::unexpected(r.error());
    std::string out = trim(r->out);
    int port = 0;
    auto [p, ec] = std::from_chars(out.data(), out.data() + out.size(), port);
    if (r->status != 0 || ec != std::errc() || p != out.data() + out.size() || port < 1 || port > 65535)
        return error("cannot get a free port on " + where() + ": `" + command + "` exited " +
                     std::to_string(r->status) + (out.empty() ? "" : ", printed '" + out + "'") +
                     (trim(r->err).empty() ? "" : ", stderr: " + trim(r->err)) +
                     "; check that launch.engine is installed there (or use --upload), or set "
                     "launch.master_port");
    return port;
}

// ---------------------------------------------------------------------------------------
// Ranks.

Result<void> SshTransport::start_rank(const RankPlan& rank, long* pid) {
    if (pid != nullptr) *pid = 0;  // known once the rank's first stderr line arrives
    if (session_ == nullptr) return error("not connected to " + host_);
    auto r = std::make_unique<RankChannel>();
    r->rank = rank.rank;
    r->channel = ssh_channel_new(session_);
    if (r->channel == nullptr) return error("cannot open a channel on " + where() + ": " + ssh_error());
    if (ssh_channel_open_session(r->channel) != SSH_OK) {
        std::string why = ssh_error();
        ssh_channel_free(r->channel);
        return error("cannot start rank " + std::to_string(rank.rank) + " on " + where() + ": " + why +
                     " (sshd allows MaxSessions channels per connection, 10 by default; one per rank)");
    }
    r->callbacks = {};
    r->callbacks.userdata = r.get();
    r->callbacks.channel_exit_status_function = on_exit_status;
    r->callbacks.channel_exit_signal_function = on_exit_signal;
    ssh_callbacks_init(&r->callbacks);
    ssh_set_channel_callbacks(r->channel, &r->callbacks);
    if (ssh_channel_request_exec(r->channel, rank.shell_command.c_str()) != SSH_OK) {
        std::string why = ssh_error();
        ssh_channel_close(r->channel);
        ssh_channel_free(r->channel);
        return error("cannot start rank " + std::to_string(rank.rank) + " on " + where() + ": " + why);
    }
    // The command's first read (launch_plan.cpp) takes the run's secret from stdin: through
    // the encrypted channel, never on a command line. An empty line means none.
    const std::string secret_line = rank.run_secret + "\n";
    // A command that ends before reading its stdin (a rank that fails at once, or a test's
    // `echo`) may close the channel before this write: the rank ran, and its output and exit
    // status are already on their way to io_loop, so that is not a failure to start it.
    if (ssh_channel_write(r->channel, secret_line.data(), (uint32_t)secret_line.size()) != (int)secret_line.size()) {
        std::string why = ssh_error();
        // libssh refuses the write with "Remote channel is closed" (channel.c,
        // channel_write_common) once the peer's close has arrived, while the channel still
        // reads as open so its buffered output can be read.
        const bool peer_closed = !ssh_channel_is_open(r->channel) || why.find("Remote channel is closed") != std::string::npos;
        if (!peer_closed) {
            ssh_channel_close(r->channel);
            ssh_channel_free(r->channel);
            return error("cannot hand rank " + std::to_string(rank.rank) + " its run secret on " + where() + ": " + why);
        }
    }
    ranks_.push_back(std::move(r));
    return {};
}

void SshTransport::run_io(TransportSink& sink) {
    sink_ = &sink;
    io_thread_ = std::thread([this] { io_loop(); });
}

void SshTransport::signal_all(int sig) {
    {
        std::lock_guard lock(signal_mu_);
        signal_queue_.push_back(sig);
    }
    wake();
}

// ---------------------------------------------------------------------------------------
// I/O thread.

void SshTransport::deliver(RankChannel& r, int stream, std::string_view data) {
    std::string& part = r.partial[stream];
    part.append(data);
    size_t start = 0;
    while (true) {
        size_t nl = part.find('\n', start);
        if (nl == std::string::npos) {
            // An endless line is delivered in 1 MiB pieces (strictly longer: a line of
            // exactly 1 MiB whose newline is still in flight stays whole).
            while (part.size() - start > max_line_bytes) {
                sink_->line(r.rank, stream == 1, part.substr(start, max_line_bytes));
                start += max_line_bytes;
            }
            break;
        }
        std::string line = part.substr(start, nl - start);
        start = nl + 1;
        // Login scripts may print before our printf, so the pid line is looked for on
        // every stderr line until it has been seen (then never again).
        if (stream == 1 && r.pgid == 0) {
            if (line.rfind(pid_line_prefix, 0) == 0) {
                long pgid = 0;
                const char* b = line.data() + std::strlen(pid_line_prefix);
                auto [p, ec] = std::from_chars(b, line.data() + line.size(), pgid);
                if (ec == std::errc() && p == line.data() + line.size() && pgid > 1) {
                    r.pgid = pgid;
                    sink_->rank_pid(r.rank, pgid);
                    if (r.waiting_signal != 0) {  // a stop came before the pid
                        int sig = r.waiting_signal;
                        r.waiting_signal = 0;
                        send_kill(sig, {&r});
                    }
                    continue;
                }
            }
        }
        size_t off = 0;
        do {  // an empty line is still a line
            sink_->line(r.rank, stream == 1, line.substr(off, max_line_bytes));
            off += max_line_bytes;
        } while (off < line.size());
    }
    part.erase(0, start);
}

void SshTransport::flush_partial(RankChannel& r) {
    for (int s = 0; s < 2; ++s) {
        if (r.partial[s].empty()) continue;
        std::string rest = std::move(r.partial[s]);
        r.partial[s].clear();
        sink_->line(r.rank, s == 1, std::move(rest));
    }
}

void SshTransport::finish_rank(RankChannel& r, int code) {
    if (r.reported) return;
    flush_partial(r);
    r.reported = true;
    sink_->rank_exited(r.rank, code);
}

// Read what one rank's channel has (bounded per round). Returns false on a session error.
bool SshTransport::pump_rank(RankChannel& r, bool& progress) {
    char buf[read_chunk];
    for (int s = 0; s < 2; ++s) {
        if (r.eof[s]) continue;
        int n = ssh_channel_read_nonblocking(r.channel, buf, sizeof buf, s);
        if (n > 0) {
            deliver(r, s, std::string_view(buf, (size_t)n));
            progress = true;
        } else if (n == SSH_ERROR) {
            if (ssh_get_status(session_) & (SSH_CLOSED | SSH_CLOSED_ERROR)) return false;
            r.eof[s] = true;  // the channel alone failed: treat as closed
        } else if (n == SSH_EOF || ssh_channel_is_eof(r.channel)) {
            // Both buffers are drained once is_eof holds, so neither stream has more.
            if (ssh_channel_is_eof(r.channel)) r.eof[0] = r.eof[1] = true;
            else r.eof[s] = true;
            progress = true;
        }
    }
    if (r.eof[0] && r.eof[1]) {
        if (r.exit_signal != 0) {
            finish_rank(r, r.exit_signal > 0 ? 128 + r.exit_signal : 255);
        } else if (r.exit_status >= 0) {
            finish_rank(r, r.exit_status);
        } else if (ssh_channel_is_closed(r.channel)) {
            finish_rank(r, 255);  // closed without an exit status (not OpenSSH's way)
        }
        if (r.reported) progress = true;
    }
    return true;
}

void SshTransport::send_channel_signal(RankChannel& r, int sig) {
    const char* name = sigabbrev_np(sig);
    if (name != nullptr && r.channel != nullptr && !r.reported)
        ssh_channel_request_send_signal(r.channel, name);
}

// Signal the process groups of `targets` with one `kill` over a fresh exec channel: the
// rank's own channel cannot carry it, and sshd's "signal" request (OpenSSH >= 7.9 only)
// is kept as the fallback.
void SshTransport::send_kill(int sig, const std::vector<RankChannel*>& targets) {
    const char* name = sigabbrev_np(sig);
    std::string cmd = "kill -" + (name ? std::string(name) : std::to_string(sig)) + " --";
    ControlChannel c;
    c.signal = sig;
    for (RankChannel* r : targets) {
        cmd += " -" + std::to_string(r->pgid);
        c.ranks.push_back(r->rank);
    }
    cmd += " 2>/dev/null";
    c.command = cmd;
    c.channel = ssh_channel_new(session_);
    c.deadline = Clock::now() + std::chrono::seconds(10);
    if (c.channel == nullptr) {
        for (RankChannel* r : targets) send_channel_signal(*r, sig);
        return;
    }
    controls_.push_back(std::move(c));
}

void SshTransport::handle_signal_requests() {
    std::vector<int> sigs;
    {
        std::lock_guard lock(signal_mu_);
        sigs.swap(signal_queue_);
    }
    for (int sig : sigs) {
        std::vector<RankChannel*> known;
        for (auto& r : ranks_) {
            if (r->reported) continue;
            if (r->pgid > 0) {
                known.push_back(r.get());
            } else if (r->waiting_signal == 0 || sig == SIGKILL) {
                r->waiting_signal = sig;
                r->waiting_since = Clock::now();
            }
        }
        if (!known.empty()) send_kill(sig, known);
    }
    // A rank that never printed its pid (not our command line?) still gets the signal,
    // through sshd, which signals the session's process group.
    for (auto& r : ranks_) {
        if (r->reported || r->waiting_signal == 0) continue;
        if (Clock::now() - r->waiting_since > std::chrono::duration<double>(pgid_wait_s)) {
            send_channel_signal(*r, r->waiting_signal);
            r->waiting_signal = 0;
        }
    }
}

// Advance the kill channels one non-blocking step each; failures fall back to sshd's
// signal request on each rank's channel.
void SshTransport::pump_controls() {
    char buf[4096];
    for (auto it = controls_.begin(); it != controls_.end();) {
        ControlChannel& c = *it;
        bool failed = false, done = false;
        if (c.step == ControlChannel::Step::open) {
            int rc = ssh_channel_open_session(c.channel);
            if (rc == SSH_OK) c.step = ControlChannel::Step::exec;
            else if (rc == SSH_ERROR) failed = true;
        }
        if (c.step == ControlChannel::Step::exec && !failed) {
            int rc = ssh_channel_request_exec(c.channel, c.command.c_str());
            if (rc == SSH_OK) c.step = ControlChannel::Step::run;
            else if (rc == SSH_ERROR) failed = true;
        }
        if (c.step == ControlChannel::Step::run && !failed) {
            for (int s = 0; s < 2; ++s)
                while (ssh_channel_read_nonblocking(c.channel, buf, sizeof buf, s) > 0) {
                }
            done = ssh_channel_is_eof(c.channel) || ssh_channel_is_closed(c.channel);
        }
        if (!done && Clock::now() > c.deadline) {
            failed = c.step != ControlChannel::Step::run;  // a kill that ran but hangs is left
            done = true;
        }
        if (failed) {
            for (int rank : c.ranks)
                for (auto& r : ranks_)
                    if (r->rank == rank) send_channel_signal(*r, c.signal);
            done = true;
        }
        if (done) {
            ssh_channel_close(c.channel);
            ssh_channel_free(c.channel);
            it = controls_.erase(it);
        } else {
            ++it;
        }
    }
}

bool SshTransport::connection_broken(std::string& why, Clock::time_point keepalive_since) {
    if (ssh_get_status(session_) & (SSH_CLOSED | SSH_CLOSED_ERROR) || !ssh_is_connected(session_)) {
        why = "connection to " + where() + " lost: " + ssh_error();
        return true;
    }
    // Silence only counts once keepalives have been asking for answers for a while (the
    // supervisor may have been busy between connect() and run_io()).
    const double dead_s = 3 * keepalive_s_;
    if (Clock::now() - keepalive_since < std::chrono::duration<double>(dead_s)) return false;
    long silent_ms = ms_since_last_receive(ssh_get_fd(session_));
    if (silent_ms > (long)(dead_s * 1000)) {
        why = "connection to " + where() + " lost: no answer to keepalives for " +
              std::to_string(silent_ms / 1000) + " s";
        return true;
    }
    return false;
}

// The transport is going away while ranks still run (the supervisor never stopped them,
// or run_io never started): closing a channel does not end a command started without a
// pty, so kill their process groups rather than leave orphans holding GPUs.
void SshTransport::kill_leftovers() {
    if (session_ == nullptr || !ssh_is_connected(session_) ||
        (ssh_get_status(session_) & (SSH_CLOSED | SSH_CLOSED_ERROR)))
        return;
    std::string groups;
    for (auto& r : ranks_) {
        if (r->reported) continue;
        if (r->pgid == 0) {  // run_io never read it: look for the pid line now
            char buf[4096];
            std::string& err = r->partial[1];
            for (int n; err.size() < 65536 && (n = ssh_channel_read_nonblocking(r->channel, buf, sizeof buf, 1)) > 0;)
                err.append(buf, (size_t)n);
            for (size_t at = err.find(pid_line_prefix); at != std::string::npos && r->pgid == 0;
                 at = err.find(pid_line_prefix, at + 1)) {
                if (at > 0 && err[at - 1] != '\n') continue;
                r->pgid = std::atol(err.c_str() + at + std::strlen(pid_line_prefix));
            }
        }
        if (r->pgid > 1) groups += " -" + std::to_string(r->pgid);
    }
    if (groups.empty()) return;
    ssh_set_blocking(session_, 1);
    (void)run_command("kill -KILL --" + groups + " 2>/dev/null", 5);
}

void SshTransport::lose_host(const std::string& why) {
    lost_ = true;
    sink_->host_lost(host_index_, why);
    for (auto& r : ranks_) finish_rank(*r, -1);
}

void SshTransport::io_loop() {
    ssh_set_blocking(session_, 0);
    ssh_event event = ssh_event_new();
    ssh_event_add_session(event, session_);
    if (wake_fd_ >= 0) ssh_event_add_fd(event, wake_fd_, POLLIN, on_wake, nullptr);

    auto next_keepalive = Clock::now();
    const auto keepalive_since = Clock::now();
    const auto keepalive_step = std::chrono::duration<double>(keepalive_s_ / 2);
    while (!quit_.load()) {
        handle_signal_requests();
        bool progress = false, broken = false;
        for (auto& r : ranks_) {
            if (r->reported) continue;
            if (!pump_rank(*r, progress)) {
                broken = true;
                break;
            }
        }
        pump_controls();
        std::string why;
        if (broken || connection_broken(why, keepalive_since)) {
            if (why.empty()) why = "connection to " + where() + " lost: " + ssh_error();
            lose_host(why);
            break;
        }
        bool all_done = true;
        for (auto& r : ranks_) all_done = all_done && r->reported;
        if (all_done) break;

        // A keepalive@openssh.com request wants a reply, so a silent peer shows up in
        // ms_since_last_receive. libssh sends it only when no earlier one is pending,
        // hence calls at half the interval.
        if (Clock::now() >= next_keepalive) {
            ssh_send_keepalive(session_);
            next_keepalive = Clock::now() + std::chrono::duration_cast<Clock::duration>(keepalive_step);
        }
        if (!progress) ssh_event_dopoll(event, std::min(100, (int)(keepalive_s_ * 250)));
    }

    if (wake_fd_ >= 0) ssh_event_remove_fd(event, wake_fd_);
    ssh_event_remove_session(event, session_);
    ssh_event_free(event);
    // Kill channels still open are freed with the transport.
}

}  // namespace

std::string ssh_reached_host(const std::string& host, const std::string& ssh_config) {
    ssh_session s = ssh_new();
    if (s == nullptr) return host;
    int verbosity = SSH_LOG_NOLOG;
    ssh_options_set(s, SSH_OPTIONS_LOG_VERBOSITY, &verbosity);
    std::string reached = host;
    // libssh replaces the host with the config's HostName (after %h expansion) while
    // parsing, exactly as connect() does before it connects.
    if (ssh_options_set(s, SSH_OPTIONS_HOST, host.c_str()) == SSH_OK &&
        ssh_options_parse_config(s, ssh_config.empty() ? nullptr : ssh_config.c_str()) == SSH_OK) {
        char* h = nullptr;
        if (ssh_options_get(s, SSH_OPTIONS_HOST, &h) == SSH_OK && h != nullptr) {
            if (*h) reached = h;
            ssh_string_free_char(h);
        }
    }
    ssh_free(s);
    return reached;
}

std::unique_ptr<HostTransport> make_ssh_transport(const LaunchPlan& plan, int host_index) {
    return std::make_unique<SshTransport>(plan, host_index);
}

}  // namespace ptd
