// kv_store.cpp — the run's rendezvous key-value store and liveness monitor (kv_store.h)
// over plain POSIX sockets. One server thread multiplexes every connection with poll(),
// so a thousand ranks cost a thousand sockets, not a thousand threads; each client has a
// blocking request/reply connection plus, once started, a monitor connection with its own
// heartbeat thread.
//
// Wire format: kv_wire.h. Every connection starts with a challenge–response: the server
// sends a fresh random nonce, the client answers HMAC-SHA-256(run secret, nonce), and
// nothing else is read from a connection until that answer is right. Every request carries
// a u64 id that its reply echoes: a client whose GET timed out may later receive that
// GET's reply, and skips it by id instead of mistaking it for the answer to its next request.
#include "ptd/engine/kv_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "kv_wire.h"
#include "ptd/common/sha256.h"

namespace ptd::engine {
namespace {

using namespace kv_wire;

using Clock = std::chrono::steady_clock;

// set/check/add have no timeout in the interface; a store that answers nothing for this
// long is treated as gone.
constexpr double kRequestTimeoutS = 120;

// Bounds on what connections can cost the server (the store listens on a network port;
// before authentication anyone who reaches it is a stranger, after it a rank with a bug
// must still not take rank 0 down).
// At most this many connections may be waiting to authenticate; a new one pushes the
// oldest out, so a flood delays an honest rank by its own handshake, not by the flood's.
constexpr size_t kMaxPendingConnections = 64;
// A connection that has not answered the challenge this long is closed.
constexpr double kHandshakeTimeoutS = 5;
// Keys longer than this are refused (the engine's longest are a few dozen characters).
constexpr size_t kMaxKeyBytes = 4096;
// What one connection may store: new keys, and bytes of values.
constexpr size_t kMaxKeysPerClient = 1u << 16;
constexpr size_t kMaxBytesPerClient = 256u << 20;

std::string errno_text(int e) { return std::strerror(e); }

std::string format_seconds(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", s);
    return buf;
}

// ---- socket helpers ----------------------------------------------------------------

void set_nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void set_nonblocking(int fd, bool on) {
    int flags = fcntl(fd, F_GETFL, 0);
    fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

int remaining_ms(Clock::time_point deadline) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return ms < 0 ? 0 : (int)std::min<int64_t>(ms, 1 << 30);
}

// Writes all of `data` on a blocking socket; MSG_NOSIGNAL so a dead peer is an error
// return, not a SIGPIPE that kills the rank before it can say what happened.
bool send_all(int fd, const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
        ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        off += (size_t)n;
    }
    return true;
}

enum class ReadStatus { ok, timeout, closed };

// Reads exactly n bytes before `deadline`.
ReadStatus recv_exact(int fd, char* out, size_t n, Clock::time_point deadline) {
    size_t got = 0;
    while (got < n) {
        pollfd p{fd, POLLIN, 0};
        int r = ::poll(&p, 1, remaining_ms(deadline));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return ReadStatus::closed;
        if (r == 0) return ReadStatus::timeout;
        ssize_t k = ::recv(fd, out + got, n - got, 0);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) return ReadStatus::closed;
        got += (size_t)k;
    }
    return ReadStatus::ok;
}

// Whether a connected socket's local and peer addresses are the same (a self-connect).
bool connected_to_itself(int fd) {
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (getsockname(fd, (sockaddr*)&local, &ll) != 0 || getpeername(fd, (sockaddr*)&peer, &pl) != 0) return false;
    return ll == pl && std::memcmp(&local, &peer, ll) == 0;
}

// Connects to addr:port once, waiting at most until `deadline`. Returns the fd or -1
// with `err` set to the errno of the last attempt.
int try_connect(const std::string& addr, int port, Clock::time_point deadline, int& err) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int gai = getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (gai != 0) {
        err = gai == EAI_SYSTEM ? errno : EHOSTUNREACH;
        return -1;
    }
    int fd = -1;
    for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
        int s = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (s < 0) { err = errno; continue; }
        // Non-blocking connect so an unreachable host costs the caller's timeout, not
        // the kernel's SYN retry schedule (minutes).
        set_nonblocking(s, true);
        int r = ::connect(s, ai->ai_addr, ai->ai_addrlen);
        if (r < 0 && errno == EINPROGRESS) {
            pollfd p{s, POLLOUT, 0};
            int pr;
            do pr = ::poll(&p, 1, remaining_ms(deadline)); while (pr < 0 && errno == EINTR);
            if (pr == 1) {
                int so = 0;
                socklen_t len = sizeof so;
                getsockopt(s, SOL_SOCKET, SO_ERROR, &so, &len);
                r = so == 0 ? 0 : -1;
                errno = so;
            } else {
                r = -1;
                errno = ETIMEDOUT;
            }
        }
        if (r == 0 && connected_to_itself(s)) {
            // A loopback port in the ephemeral range that nothing listens on yet can be
            // handed to this very socket as its own source port: TCP's simultaneous open
            // then connects it to itself, and the "store" answers with our own request.
            // Count it as not listening yet, so the caller retries.
            r = -1;
            errno = ECONNREFUSED;
        }
        if (r == 0) {
            set_nonblocking(s, false);
            set_nodelay(s);
            fd = s;
        } else {
            err = errno;
            ::close(s);
        }
    }
    freeaddrinfo(res);
    return fd;
}

std::string local_hostname() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
    return buf;
}

std::string peer_name(const sockaddr_storage& ss) {
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss.ss_family == AF_INET) {
        auto* a = (const sockaddr_in*)&ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        auto* a = (const sockaddr_in6*)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
    }
    return std::string(host) + ":" + std::to_string(port);
}

// Whether a bound address is a loopback one (127.0.0.0/8, ::1, or IPv4-mapped 127/8).
bool is_loopback_address(const sockaddr_storage& ss) {
    if (ss.ss_family == AF_INET) return (ntohl(((const sockaddr_in*)&ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss.ss_family != AF_INET6) return false;
    const in6_addr& a = ((const sockaddr_in6*)&ss)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
}

// ---- server ------------------------------------------------------------------------

class KvServerImpl final : public KvServer {
public:
    KvServerImpl(int listen_fd, int port, const KvServerOptions& options)
        : listen_fd_(listen_fd), port_(port), options_(options) {
        if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
        thread_ = std::thread([this] { serve(); });
    }

    ~KvServerImpl() override {
        stop_ = true;
        if (wake_[1] >= 0) {
            char c = 1;
            [[maybe_unused]] ssize_t r = ::write(wake_[1], &c, 1);
        }
        thread_.join();
        for (auto& [id, c] : conns_) ::close(c.fd);
        ::close(listen_fd_);
        // Each kind of refusal was logged once per peer address; say how many followed.
        for (const auto& [what, count] : refusals_)
            if (count > 1)
                std::fprintf(stderr, "ptd-engine: store: refused %zu more connection(s) from %s (%s)\n", count - 1,
                             what.first.c_str(), what.second.c_str());
        if (wake_[0] >= 0) ::close(wake_[0]);
        if (wake_[1] >= 0) ::close(wake_[1]);
    }

    int port() const override { return port_; }

    bool wait_all_goodbye(double timeout_s) override {
        std::unique_lock lock(mu_);
        auto all = [&] { return (int)goodbye_ranks_.size() >= options_.world_size; };
        // An aborted run will never see every goodbye; return at once rather than make
        // rank 0 sit out the whole timeout.
        cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return all() || aborted_; });
        return all();
    }

private:
    struct Conn {
        int fd = -1;
        std::string peer;     // address:port, for logs
        std::string peer_ip;  // address only: refusals are counted per address
        std::string in, out;  // unparsed input, unsent output
        bool closing = false;
        // Until the challenge is answered nothing but AUTH is read from the connection.
        bool authenticated = false;
        std::string nonce;
        Clock::time_point accepted;
        // What this connection has stored (bounded per client).
        size_t keys_created = 0, bytes_stored = 0;
        // Set by HELLO: this is a rank's monitor connection.
        bool monitor = false;
        int rank = -1;
        int64_t pid = 0;
        std::string host;
        bool goodbye = false;
        Clock::time_point last_beat;
    };

    void serve() {
        std::vector<pollfd> fds;
        std::vector<uint64_t> ids;
        while (!stop_) {
            fds.clear();
            ids.clear();
            fds.push_back({wake_[0], POLLIN, 0});
            fds.push_back({listen_fd_, POLLIN, 0});
            for (auto& [id, c] : conns_) {
                fds.push_back({c.fd, (short)(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
                ids.push_back(id);
            }
            // Wake at least every 100 ms to notice missing heartbeats.
            int r = ::poll(fds.data(), fds.size(), 100);
            if (r < 0 && errno != EINTR) {
                std::fprintf(stderr, "ptd-engine: store: poll failed: %s\n", errno_text(errno).c_str());
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
            if (stop_) break;
            if (r > 0) {
                if (fds[0].revents) {
                    char buf[64];
                    while (::read(wake_[0], buf, sizeof buf) > 0) {}
                }
                if (fds[1].revents & POLLIN) accept_all();
                for (size_t i = 0; i < ids.size(); ++i) {
                    short ev = fds[i + 2].revents;
                    if (!ev) continue;
                    auto it = conns_.find(ids[i]);
                    if (it == conns_.end()) continue;
                    if (ev & POLLOUT) flush(it->second);
                    if (ev & (POLLIN | POLLHUP | POLLERR)) read_from(ids[i]);
                }
            }
            check_handshakes();
            reap_closed();
            check_heartbeats();
        }
    }

    void accept_all() {
        for (;;) {
            sockaddr_storage ss{};
            socklen_t len = sizeof ss;
            int fd = ::accept4(listen_fd_, (sockaddr*)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR) continue;
                if (errno != EAGAIN && errno != EWOULDBLOCK)
                    std::fprintf(stderr, "ptd-engine: store: accept failed: %s\n", errno_text(errno).c_str());
                return;
            }
            set_nodelay(fd);
            Conn c;
            c.fd = fd;
            c.peer = peer_name(ss);
            c.peer_ip = c.peer.substr(0, c.peer.rfind(':'));
            c.accepted = Clock::now();
            c.nonce.resize(kNonceBytes);
            if (getrandom(c.nonce.data(), c.nonce.size(), 0) != (ssize_t)c.nonce.size()) {
                std::fprintf(stderr, "ptd-engine: store: no random nonce for the connection from %s (%s); closing it\n",
                             c.peer.c_str(), errno_text(errno).c_str());
                ::close(fd);
                continue;
            }
            evict_oldest_pending_if_full();
            send_frame(c, FrameWriter(MSG_CHALLENGE).str(c.nonce).finish());
            conns_.emplace(next_conn_id_++, std::move(c));
        }
    }

    // A flood of connections that never answer must not keep an honest rank out: past the
    // bound, the connection waiting longest goes.
    void evict_oldest_pending_if_full() {
        size_t pending = 0;
        Conn* oldest = nullptr;
        for (auto& [id, c] : conns_) {
            if (c.authenticated || c.closing) continue;
            ++pending;
            if (!oldest || c.accepted < oldest->accepted) oldest = &c;
        }
        if (pending >= kMaxPendingConnections && oldest)
            refuse(*oldest, "busy", "busy: " + std::to_string(kMaxPendingConnections) +
                                        " connections were already waiting to authenticate");
    }

    // Closes a connection that did not prove the run's secret (or overran a bound before
    // doing so), telling the peer why. Logged once per peer address and kind of refusal;
    // the rest are counted and summed up when the server stops.
    void refuse(Conn& c, const std::string& kind, const std::string& why) {
        if (++refusals_[{c.peer_ip, kind}] == 1)
            std::fprintf(stderr, "ptd-engine: store: refused the connection from %s: %s\n", c.peer.c_str(), why.c_str());
        if (!c.closing) send_frame(c, FrameWriter(MSG_REFUSED).str(why).finish());
        c.in.clear();
        c.closing = true;
    }

    void check_handshakes() {
        const auto now = Clock::now();
        for (auto& [id, c] : conns_) {
            if (c.authenticated || c.closing) continue;
            if (std::chrono::duration<double>(now - c.accepted).count() > kHandshakeTimeoutS)
                refuse(c, "silent", "no answer to the challenge within " + format_seconds(kHandshakeTimeoutS) + " s");
        }
    }

    // The first frame of a connection: AUTH with the MAC of this connection's nonce.
    bool authenticate(Conn& c, const std::string& payload) {
        Request req;
        std::string why;
        if (!decode_request(payload, req, why) || req.type != MSG_AUTH) {
            refuse(c, "unauthenticated", "a request before answering the challenge (" +
                                             (why.empty() ? "frame type " + std::to_string(req.type) : why) + ")");
            return false;
        }
        const std::string expected = auth_mac(options_.secret, c.nonce);
        if (!constant_time_equal(req.text, expected)) {
            // An answer that was right on an earlier connection is a replay: say so.
            const bool replay = accepted_macs_.count(req.text) > 0;
            refuse(c, replay ? "replay" : "secret",
                   replay ? "a replayed answer to an earlier connection's challenge"
                          : "wrong answer to the challenge (not this run's secret: PTD_RUN_SECRET differs)");
            return false;
        }
        size_t authenticated = 0;
        for (auto& [id, other] : conns_) authenticated += other.authenticated && !other.closing;
        if (authenticated >= max_clients()) {
            refuse(c, "full", "busy: " + std::to_string(max_clients()) + " ranks' connections are already open");
            return false;
        }
        accepted_macs_.insert(req.text);
        c.authenticated = true;
        c.nonce.clear();
        send_frame(c, FrameWriter(MSG_AUTH_OK).finish());
        return true;
    }

    // Each rank opens two connections (requests, monitor); tools and tests a few more.
    size_t max_clients() const { return 4 * (size_t)std::max(1, options_.world_size) + 16; }

    void read_from(uint64_t id) {
        Conn& c = conns_.at(id);
        char buf[65536];
        for (;;) {
            ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
            if (n > 0) {
                c.in.append(buf, (size_t)n);
                if (n < (ssize_t)sizeof buf) break;
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            // EOF or error: handle what already arrived (a FAILURE is often the last
            // thing a dying rank sends), then close.
            c.closing = true;
            break;
        }
        std::string payload, why;
        bool have = false;
        while (!c.in.empty()) {
            const bool before_auth = !c.authenticated;
            if (!take_frame(c.in, before_auth ? kMaxFrameBeforeAuth : kMaxFrame, payload, have, why)) {
                if (before_auth)
                    refuse(c, "oversized", "before authentication: " + why);
                else
                    malformed(c, why);
                return;
            }
            if (!have) break;
            if (before_auth) {
                if (!authenticate(c, payload)) return;
                continue;
            }
            if (!handle(id, c, payload)) return;
        }
    }

    void malformed(Conn& c, const std::string& why) {
        if (++refusals_[{c.peer_ip, "malformed"}] == 1)
            std::fprintf(stderr, "ptd-engine: store: malformed frame from %s (%s); closing that connection\n",
                         c.peer.c_str(), why.c_str());
        c.in.clear();
        c.closing = true;
    }

    void send_frame(Conn& c, const std::string& frame) {
        c.out += frame;
        flush(c);
    }

    void flush(Conn& c) {
        while (!c.out.empty()) {
            ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
            if (n > 0) {
                c.out.erase(0, (size_t)n);
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
            c.out.clear();  // peer gone; the read side will see EOF
            c.closing = true;
            return;
        }
    }

    // A SET or ADD that would take this connection past its bounds: the reason, or "".
    std::string over_limit(const Conn& c, const std::string& key, size_t value_bytes) const {
        if (key.size() > kMaxKeyBytes)
            return "key of " + std::to_string(key.size()) + " bytes (at most " + std::to_string(kMaxKeyBytes) + ")";
        auto it = kv_.find(key);
        if (it == kv_.end() && c.keys_created >= kMaxKeysPerClient)
            return "more than " + std::to_string(kMaxKeysPerClient) + " keys from one connection";
        if (c.bytes_stored + growth(it, key, value_bytes) > kMaxBytesPerClient)
            return "more than " + std::to_string(kMaxBytesPerClient >> 20) + " MiB stored from one connection";
        return "";
    }

    // Refuses a request over a bound with an ERROR reply (the connection stays: the bound
    // is about this request, and the rank's error names it). Logged once per connection.
    void refuse_request(Conn& c, uint64_t req, const std::string& why) {
        if (++refusals_[{c.peer_ip, "limit"}] == 1)
            std::fprintf(stderr, "ptd-engine: store: refused a request from %s: %s\n", c.peer.c_str(), why.c_str());
        send_frame(c, FrameWriter(MSG_ERROR).u64(req).str("the store refused it: " + why).finish());
    }

    // How much storing `value_bytes` under `key` (found at `it`) adds: a new key and its
    // value, or what a longer value adds to the one it replaces (counters rewritten at every
    // barrier must not add up).
    size_t growth(std::unordered_map<std::string, std::string>::const_iterator it, const std::string& key,
                  size_t value_bytes) const {
        if (it == kv_.end()) return key.size() + value_bytes;
        return value_bytes > it->second.size() ? value_bytes - it->second.size() : 0;
    }

    void store_value(Conn& c, const std::string& key, std::string value) {
        auto it = kv_.find(key);
        c.bytes_stored += growth(it, key, value.size());
        if (it == kv_.end()) {
            ++c.keys_created;
            it = kv_.emplace(key, std::string()).first;
        }
        it->second = std::move(value);
    }

    // Handles one frame; false when the connection was marked malformed.
    bool handle(uint64_t id, Conn& c, const std::string& payload) {
        Request r;
        std::string why;
        if (!decode_request(payload, r, why)) {
            malformed(c, why);
            return false;
        }
        switch (r.type) {
        case MSG_SET: {
            if (auto over = over_limit(c, r.key, r.value.size()); !over.empty()) {
                refuse_request(c, r.id, over);
                return true;
            }
            store_value(c, r.key, std::move(r.value));
            send_frame(c, FrameWriter(MSG_OK).u64(r.id).finish());
            wake_waiters(r.key);
            return true;
        }
        case MSG_GET: {
            auto it = kv_.find(r.key);
            if (it != kv_.end())
                send_frame(c, FrameWriter(MSG_VALUE).u64(r.id).str(it->second).finish());
            else if (r.key.size() > kMaxKeyBytes)
                refuse_request(c, r.id, "key of " + std::to_string(r.key.size()) + " bytes (at most " +
                                            std::to_string(kMaxKeyBytes) + ")");
            else
                waiters_[r.key].push_back({id, r.id});  // answered by the SET/ADD that creates it
            return true;
        }
        case MSG_CHECK: {
            bool all = true;
            for (const std::string& key : r.keys)
                if (!kv_.count(key)) all = false;
            send_frame(c, FrameWriter(MSG_BOOL).u64(r.id).u8(all ? 1 : 0).finish());
            return true;
        }
        case MSG_ADD: {
            // Counters are stored as decimal text so a GET of a counter reads naturally.
            int64_t value = 0;
            auto it = kv_.find(r.key);
            if (it != kv_.end()) {
                char* end = nullptr;
                errno = 0;
                long long v = std::strtoll(it->second.c_str(), &end, 10);
                if (it->second.empty() || *end != '\0' || errno != 0) {
                    send_frame(c, FrameWriter(MSG_ERROR).u64(r.id)
                                      .str("key \"" + r.key + "\" does not hold an integer counter")
                                      .finish());
                    return true;
                }
                value = v;
            }
            if (auto over = over_limit(c, r.key, 20); !over.empty()) {
                refuse_request(c, r.id, over);
                return true;
            }
            // Wraps like the two's-complement counter it is, instead of overflowing (UB).
            value = (int64_t)((uint64_t)value + (uint64_t)r.number);
            store_value(c, r.key, std::to_string(value));
            send_frame(c, FrameWriter(MSG_INT).u64(r.id).i64(value).finish());
            wake_waiters(r.key);
            return true;
        }
        case MSG_HELLO:
            c.monitor = true;
            c.rank = r.rank;
            c.pid = r.number;
            c.host = r.text;
            c.last_beat = Clock::now();
            // A rank that joins after the abort must still hear it.
            if (!abort_message_.empty()) send_frame(c, FrameWriter(MSG_ABORT).str(abort_message_).finish());
            return true;
        case MSG_HEARTBEAT:
            if (!c.monitor) break;
            c.last_beat = Clock::now();
            // The echo lets the ranks notice a stalled rank 0 (its store goes quiet too).
            send_frame(c, FrameWriter(MSG_BEAT_ACK).finish());
            return true;
        case MSG_GOODBYE:
            if (!c.monitor) break;
            c.goodbye = true;
            {
                std::lock_guard lock(mu_);
                if (c.rank >= 0 && c.rank < options_.world_size) goodbye_ranks_.insert(c.rank);
            }
            cv_.notify_all();
            return true;
        case MSG_FAILURE:
            if (!c.monitor) break;
            declare_failed(id, c, "failed: " + r.text);
            return true;
        default:
            break;
        }
        malformed(c, "a frame of type " + std::to_string(r.type) + " the server does not take here");
        return false;
    }

    void wake_waiters(const std::string& key) {
        auto w = waiters_.find(key);
        if (w == waiters_.end()) return;
        const std::string& value = kv_[key];
        for (auto [conn_id, req] : w->second) {
            auto it = conns_.find(conn_id);
            if (it != conns_.end()) send_frame(it->second, FrameWriter(MSG_VALUE).u64(req).str(value).finish());
        }
        waiters_.erase(w);
    }

    // The first failure aborts the run; later ones (the other ranks exiting because of
    // the abort) are consequences and are not reported again.
    void declare_failed(uint64_t failed_id, const Conn& failed, const std::string& what) {
        if (!abort_message_.empty()) return;
        abort_message_ = "rank " + std::to_string(failed.rank) + " (pid " + std::to_string(failed.pid) + " on " +
                         failed.host + ") " + what;
        std::fprintf(stderr, "ptd-engine: store: %s; aborting the run\n", abort_message_.c_str());
        std::string frame = FrameWriter(MSG_ABORT).str(abort_message_).finish();
        // Monitors in this very process go last: once they hear the abort this process
        // (and with it the server) may exit, and the other ranks must have their ABORT
        // in the kernel's buffers before that, or they would see only "connection lost".
        const int64_t self = getpid();
        for (int pass = 0; pass < 2; ++pass)
            for (auto& [id, c] : conns_)
                if (id != failed_id && c.monitor && ((c.pid == self) == (pass == 1))) send_frame(c, frame);
        // A rank that reported its own failure waits for this echo before it exits (see
        // fatal_run_error): by now every other monitor has its ABORT, so even when the
        // failing rank hosts this server, the others hear the real cause, not "connection lost".
        if (what.rfind("failed: ", 0) == 0) {
            auto it = conns_.find(failed_id);
            if (it != conns_.end()) send_frame(it->second, frame);
        }
        {
            std::lock_guard lock(mu_);
            aborted_ = true;
        }
        cv_.notify_all();
    }

    void reap_closed() {
        for (auto it = conns_.begin(); it != conns_.end();) {
            Conn& c = it->second;
            if (!c.closing) { ++it; continue; }
            if (c.monitor && !c.goodbye) declare_failed(it->first, c, "died: connection closed without goodbye");
            ::close(c.fd);
            it = conns_.erase(it);
        }
    }

    void check_heartbeats() {
        if (!abort_message_.empty()) return;
        auto now = Clock::now();
        for (auto& [id, c] : conns_) {
            if (!c.monitor || c.goodbye) continue;
            double quiet = std::chrono::duration<double>(now - c.last_beat).count();
            if (quiet > options_.stall_timeout_s) {
                declare_failed(id, c, "stalled: no heartbeat for " + format_seconds(quiet) + " s");
                return;
            }
        }
    }

    int listen_fd_;
    int port_;
    KvServerOptions options_;
    int wake_[2] = {-1, -1};
    std::atomic<bool> stop_{false};
    std::thread thread_;

    // Owned by the server thread.
    std::map<uint64_t, Conn> conns_;
    uint64_t next_conn_id_ = 1;
    std::unordered_map<std::string, std::string> kv_;
    std::unordered_map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> waiters_;  // key → (conn, request)
    std::string abort_message_;
    // Refusals by (peer address, kind): the first of each is logged, the rest counted.
    std::map<std::pair<std::string, std::string>, size_t> refusals_;
    // Every answer accepted so far: the same answer again is a replay, named as such.
    std::set<std::string> accepted_macs_;

    // Shared with wait_all_goodbye.
    std::mutex mu_;
    std::condition_variable cv_;
    std::set<int> goodbye_ranks_;
    bool aborted_ = false;
};

// ---- client ------------------------------------------------------------------------

enum class Handshake { ok, refused, retry };

// Reads one whole frame of at most `max_frame` bytes before `deadline` and decodes it.
bool read_reply(int fd, uint32_t max_frame, Clock::time_point deadline, Reply& reply, std::string& why) {
    char header[4];
    if (recv_exact(fd, header, 4, deadline) != ReadStatus::ok) { why = "connection closed"; return false; }
    const uint32_t n = frame_length(header);
    if (n == 0 || n > max_frame) {
        why = "malformed frame (length " + std::to_string(n) + ")";
        return false;
    }
    std::string payload(n, '\0');
    if (recv_exact(fd, payload.data(), n, deadline) != ReadStatus::ok) { why = "connection closed"; return false; }
    return decode_reply(payload, reply, why);
}

// Answers the store's challenge on a fresh connection. `refused`: the store said no for
// good (wrong secret), `why` is its reason; `retry`: the store was busy or the connection
// broke, so a new one may do better.
Handshake handshake(int fd, const std::string& secret, Clock::time_point deadline, std::string& why) {
    Reply challenge;
    if (!read_reply(fd, kMaxFrameBeforeAuth, deadline, challenge, why)) return Handshake::retry;
    if (challenge.type != MSG_CHALLENGE) {
        why = challenge.type == MSG_REFUSED ? challenge.text : "no challenge from the store (frame type " + std::to_string(challenge.type) + ")";
        return challenge.type == MSG_REFUSED && challenge.text.rfind("busy:", 0) != 0 ? Handshake::refused : Handshake::retry;
    }
    if (!send_all(fd, FrameWriter(MSG_AUTH).str(auth_mac(secret, challenge.text)).finish())) {
        why = errno_text(errno);
        return Handshake::retry;
    }
    Reply answer;
    if (!read_reply(fd, kMaxFrameBeforeAuth, deadline, answer, why)) return Handshake::retry;
    if (answer.type == MSG_AUTH_OK) return Handshake::ok;
    if (answer.type != MSG_REFUSED) {
        why = "unexpected answer to the handshake (frame type " + std::to_string(answer.type) + ")";
        return Handshake::retry;
    }
    why = answer.text;
    return answer.text.rfind("busy:", 0) == 0 ? Handshake::retry : Handshake::refused;
}

class KvClientImpl final : public KvClient {
public:
    KvClientImpl(int fd, std::string addr, int port, std::string secret)
        : fd_(fd), addr_(std::move(addr)), port_(port), secret_(std::move(secret)) {}

    ~KvClientImpl() override {
        stop_monitor();
        ::close(fd_);
        if (mon_fd_ >= 0) ::close(mon_fd_);
    }

    void set(const std::string& key, const std::vector<uint8_t>& value) override {
        std::lock_guard lock(data_mu_);
        uint64_t id = next_id_++;
        decode_or_throw(request_or_throw(FrameWriter(MSG_SET).u64(id).str(key).bytes(value.data(), value.size()).finish(),
                                         id, "set \"" + key + "\""),
                        MSG_OK, "set \"" + key + "\"");
    }

    Result<std::vector<uint8_t>> get(const std::string& key, double timeout_s) override {
        std::lock_guard lock(data_mu_);
        uint64_t id = next_id_++;
        std::string reply, err;
        auto status = request(FrameWriter(MSG_GET).u64(id).str(key).finish(), id, timeout_s, reply, err);
        if (status == ReadStatus::timeout)
            return fail({}, "", "key \"" + key + "\" did not appear in the store at " + where() + " within " +
                                    format_seconds(timeout_s) + " s");
        if (status == ReadStatus::closed)
            return fail({}, "", "get \"" + key + "\": lost the store at " + where() + ": " + err);
        Reply r;
        std::string why;
        if (!decode_reply(reply, r, why) || (r.type != MSG_VALUE && r.type != MSG_ERROR))
            return fail({}, "", "get \"" + key + "\": malformed reply from the store at " + where());
        if (r.type == MSG_ERROR) return fail({}, "", "get \"" + key + "\": " + r.text);
        return std::vector<uint8_t>(r.text.begin(), r.text.end());
    }

    bool check(const std::vector<std::string>& keys) override {
        std::lock_guard lock(data_mu_);
        uint64_t id = next_id_++;
        FrameWriter w(MSG_CHECK);
        w.u64(id).u32((uint32_t)keys.size());
        for (auto& k : keys) w.str(k);
        Reply r = decode_or_throw(request_or_throw(w.finish(), id, "check"), MSG_BOOL, "check");
        return r.number != 0;
    }

    int64_t add(const std::string& key, int64_t delta) override {
        std::lock_guard lock(data_mu_);
        uint64_t id = next_id_++;
        std::string what = "add \"" + key + "\"";
        Reply r = decode_or_throw(request_or_throw(FrameWriter(MSG_ADD).u64(id).str(key).i64(delta).finish(), id, what),
                                  MSG_INT, what);
        return r.number;
    }

    Result<void> start_monitor(int rank, double heartbeat_s, std::function<void(const std::string&)> on_abort,
                               double store_lease_s) override {
        if (mon_fd_ >= 0) return fail({}, "", "the store monitor is already running");
        int err = 0;
        int fd = try_connect(addr_, port_, Clock::now() + std::chrono::seconds(30), err);
        if (fd < 0)
            return fail({}, "", "cannot open the monitor connection to the store at " + where() + ": " + errno_text(err));
        std::string why;
        if (handshake(fd, secret_, Clock::now() + std::chrono::seconds(30), why) != Handshake::ok) {
            ::close(fd);
            return fail({}, "", "the store at " + where() + " refused the monitor connection: " + why);
        }
        // A bounded send: report_failure runs on the way to _exit and must not hang on a
        // store that stopped reading (a stopped rank 0).
        timeval tv{2, 0};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (!send_all(fd, FrameWriter(MSG_HELLO).u32((uint32_t)rank).i64(getpid()).str(local_hostname()).finish())) {
            int e = errno;
            ::close(fd);
            return fail({}, "", "cannot greet the store at " + where() + ": " + errno_text(e));
        }
        if (pipe2(mon_wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
            int e = errno;
            ::close(fd);
            return fail({}, "", "cannot start the store monitor: " + errno_text(e));
        }
        mon_fd_ = fd;
        on_abort_ = std::move(on_abort);
        heartbeat_s_ = heartbeat_s > 0 ? heartbeat_s : 1.0;
        store_lease_s_ = store_lease_s;
        last_heard_ticks_ = Clock::now().time_since_epoch().count();
        mon_thread_ = std::thread([this] { monitor_loop(); });
        return {};
    }

    std::string lease_lost() const override {
        {
            std::lock_guard lock(reason_mu_);
            if (!reason_.empty()) return "the run was aborted: " + reason_;
        }
        if (mon_fd_ < 0 || store_lease_s_ <= 0 || goodbye_sent_) return "";
        const double quiet = quiet_s();
        if (quiet <= store_lease_s_) return "";
        return "no reply from the run's store at " + where() + " for " + format_seconds(quiet) +
               " s, past the store lease of " + format_seconds(store_lease_s_) + " s";
    }

    void report_failure(const std::string& message) override {
        if (mon_fd_ < 0) return;
        std::lock_guard lock(mon_write_mu_);
        send_all(mon_fd_, FrameWriter(MSG_FAILURE).str(message).finish());
    }

    std::string abort_reason(double wait_s) override {
        std::unique_lock lock(reason_mu_);
        reason_cv_.wait_for(lock, std::chrono::duration<double>(wait_s), [&] { return !reason_.empty(); });
        return reason_;
    }

    void goodbye() override {
        if (mon_fd_ < 0) return;
        {
            std::lock_guard lock(mon_write_mu_);
            // Set first: the server may close the connection right after, and that EOF
            // must not read as the store dying.
            goodbye_sent_ = true;
            send_all(mon_fd_, FrameWriter(MSG_GOODBYE).finish());
        }
        stop_monitor();
    }

private:
    std::string where() const { return addr_ + ":" + std::to_string(port_); }

    // Sends one request and reads frames until the reply with this id. Replies with other
    // ids are the late answers to GETs that timed out earlier; they are dropped.
    ReadStatus request(const std::string& frame, uint64_t id, double timeout_s, std::string& reply, std::string& err) {
        if (broken_) { err = "the connection was lost earlier"; return ReadStatus::closed; }
        if (!send_all(fd_, frame)) {
            err = errno_text(errno);
            broken_ = true;
            return ReadStatus::closed;
        }
        auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
        for (;;) {
            // Only the wait for the first byte is bounded by the caller's timeout: once a
            // frame started arriving it is read whole, so a timeout never leaves the stream
            // in the middle of a frame.
            pollfd p{fd_, POLLIN, 0};
            int r = ::poll(&p, 1, remaining_ms(deadline));
            if (r < 0 && errno == EINTR) continue;
            if (r == 0) return ReadStatus::timeout;
            char hdr[4];
            auto frame_deadline = Clock::now() + std::chrono::seconds(30);
            if (r < 0 || recv_exact(fd_, hdr, 4, frame_deadline) != ReadStatus::ok) {
                err = "connection closed";
                broken_ = true;
                return ReadStatus::closed;
            }
            const uint32_t n = frame_length(hdr);
            if (n < 9 || n > kMaxFrame) {
                err = "malformed reply (length " + std::to_string(n) + ")";
                broken_ = true;
                return ReadStatus::closed;
            }
            reply.resize(n);
            if (recv_exact(fd_, reply.data(), n, frame_deadline) != ReadStatus::ok) {
                err = "connection closed";
                broken_ = true;
                return ReadStatus::closed;
            }
            // Every reply to a request starts with its type and the request's id.
            uint64_t reply_id = 0;
            for (int i = 0; i < 8; ++i) reply_id |= (uint64_t)(uint8_t)reply[1 + i] << (8 * i);
            if (reply_id == id) return ReadStatus::ok;
        }
    }

    std::string request_or_throw(const std::string& frame, uint64_t id, const std::string& what) {
        std::string reply, err;
        auto status = request(frame, id, kRequestTimeoutS, reply, err);
        if (status == ReadStatus::timeout)
            throw std::runtime_error(what + ": no reply from the store at " + where() + " within " +
                                     format_seconds(kRequestTimeoutS) + " s");
        if (status == ReadStatus::closed) throw std::runtime_error(what + ": lost the store at " + where() + ": " + err);
        return reply;
    }

    // The reply decoded, when it is of `type`; the store's ERROR text or "malformed" thrown otherwise.
    Reply decode_or_throw(const std::string& payload, uint8_t type, const std::string& what) {
        Reply r;
        std::string why;
        if (!decode_reply(payload, r, why)) throw std::runtime_error(what + ": malformed reply from the store at " + where() + ": " + why);
        if (r.type == MSG_ERROR) throw std::runtime_error(what + ": " + r.text);
        if (r.type != type) throw std::runtime_error(what + ": unexpected reply from the store at " + where());
        return r;
    }

    void monitor_loop() {
        auto next_beat = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(heartbeat_s_));
        std::string in;
        char buf[4096];
        for (;;) {
            pollfd fds[2] = {{mon_fd_, POLLIN, 0}, {mon_wake_[0], POLLIN, 0}};
            int r = ::poll(fds, 2, remaining_ms(next_beat));
            if (mon_stop_) return;
            if (r < 0 && errno != EINTR) return;
            if (Clock::now() >= next_beat) {
                std::lock_guard lock(mon_write_mu_);
                if (!goodbye_sent_) send_all(mon_fd_, FrameWriter(MSG_HEARTBEAT).finish());
                next_beat = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(heartbeat_s_));
            }
            // The store echoes every heartbeat: any byte from it renews the lease.
            if (r > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)))
                last_heard_ticks_ = Clock::now().time_since_epoch().count();
            const double quiet = quiet_s();
            if (store_lease_s_ > 0 && quiet > store_lease_s_ && !goodbye_sent_) {
                // Rank 0 (and with it the store) is stopped or wedged, or this host's network
                // is cut: the TCP connection stays open either way, so only the missing echoes
                // tell. The launcher restarts the run without this rank; going on would only
                // hold its devices and risk writing into the run directory the restarted run
                // now owns.
                abort_with("lost the run's store at " + where() + " (rank 0 stalled, or this host cut off from it): "
                           "no reply to heartbeats for " + format_seconds(quiet) + " s, past the store lease of " +
                           format_seconds(store_lease_s_) + " s; stopping without writing to the run directory");
                return;
            }
            if (r <= 0 || !(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t n = ::recv(mon_fd_, buf, sizeof buf, 0);
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (n <= 0) {
                if (!goodbye_sent_ && !mon_stop_) abort_with("rank 0 (store at " + where() + ") died: connection lost");
                return;
            }
            in.append(buf, (size_t)n);
            std::string payload, why;
            bool have = false;
            while (take_frame(in, kMaxFrame, payload, have, why) && have) {
                Reply rd;
                std::string bad;
                if (!decode_reply(payload, rd, bad) || rd.type != MSG_ABORT) continue;  // echoes only count as signs of life
                if (!goodbye_sent_) abort_with(rd.text);
            }
            if (!why.empty()) {
                abort_with("rank 0 (store at " + where() + ") sent a malformed frame: " + why);
                return;
            }
        }
    }

    double quiet_s() const {
        const auto heard = Clock::time_point(Clock::duration(last_heard_ticks_.load()));
        return std::chrono::duration<double>(Clock::now() - heard).count();
    }

    // Records the first abort reason and runs the callback once (it normally exits).
    void abort_with(const std::string& message) {
        {
            std::lock_guard lock(reason_mu_);
            if (!reason_.empty()) return;
            reason_ = message;
        }
        reason_cv_.notify_all();
        if (on_abort_) on_abort_(message);
    }

    void stop_monitor() {
        if (!mon_thread_.joinable()) return;
        mon_stop_ = true;
        char c = 1;
        [[maybe_unused]] ssize_t r = ::write(mon_wake_[1], &c, 1);
        if (mon_thread_.get_id() == std::this_thread::get_id())
            mon_thread_.detach();  // called from on_abort; the thread ends on its own
        else
            mon_thread_.join();
        ::close(mon_wake_[0]);
        ::close(mon_wake_[1]);
        mon_wake_[0] = mon_wake_[1] = -1;
    }

    int fd_;
    std::string addr_;
    int port_;
    std::string secret_;  // the run's secret, for the monitor connection's handshake
    std::mutex data_mu_;  // one request/reply exchange at a time on fd_
    uint64_t next_id_ = 1;
    bool broken_ = false;

    int mon_fd_ = -1;
    int mon_wake_[2] = {-1, -1};
    std::mutex mon_write_mu_;  // heartbeats, FAILURE and GOODBYE come from different threads
    std::thread mon_thread_;
    std::atomic<bool> mon_stop_{false};
    std::atomic<bool> goodbye_sent_{false};
    std::function<void(const std::string&)> on_abort_;
    double heartbeat_s_ = 1.0;
    double store_lease_s_ = 0;  // > 0: abort when the store has said nothing this long
    std::atomic<Clock::rep> last_heard_ticks_{0};  // when the store last sent anything (steady clock)

    mutable std::mutex reason_mu_;
    std::condition_variable reason_cv_;
    std::string reason_;
};

}  // namespace

// MASTER_ADDR as this host's resolver sees it, before any connect attempt: a name that
// does not resolve here (an ssh config alias, a typo) never starts to, so waiting the
// whole timeout would only hide the cause. Temporary DNS failures are retried briefly.
static Result<void> check_resolves(const std::string& addr, Clock::time_point deadline) {
    const auto give_up = std::min(deadline, Clock::now() + std::chrono::seconds(10));
    for (;;) {
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        const int gai = getaddrinfo(addr.c_str(), nullptr, &hints, &res);
        if (gai == 0) {
            freeaddrinfo(res);
            return {};
        }
        if (gai == EAI_AGAIN && Clock::now() + std::chrono::milliseconds(200) < give_up) {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            continue;
        }
        return fail({}, "", "MASTER_ADDR '" + addr + "' does not resolve on host " + local_hostname() + " (" +
                                (gai == EAI_SYSTEM ? errno_text(errno) : std::string(gai_strerror(gai))) +
                                "); set launch.master_addr (ptd launch --master-addr) to an address of rank 0's "
                                "host that every host can resolve, e.g. its IP");
    }
}

Result<std::unique_ptr<KvServer>> KvServer::start(const KvServerOptions& options) {
    std::string where = options.bind_addr + ":" + std::to_string(options.port);
    // The store listens on MASTER_ADDR itself: a name that does not resolve here gets the
    // same explanation every other rank's client gives.
    if (!options.bind_addr.empty())
        if (auto ok = check_resolves(options.bind_addr, Clock::now() + std::chrono::seconds(10)); !ok)
            return std::unexpected(ok.error());
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    int gai = getaddrinfo(options.bind_addr.empty() ? nullptr : options.bind_addr.c_str(),
                          std::to_string(options.port).c_str(), &hints, &res);
    if (gai != 0) return fail({}, "", "cannot listen on " + where + ": " + gai_strerror(gai));
    int fd = -1, err = 0;
    for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
        int s = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (s < 0) { err = errno; continue; }
        // A run restarted right after the previous one must not fail on TIME_WAIT.
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(s, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(s, 1024) == 0) {
            fd = s;
        } else {
            err = errno;
            ::close(s);
        }
    }
    freeaddrinfo(res);
    if (fd < 0 && err == EADDRNOTAVAIL)
        return fail({}, "", "MASTER_ADDR '" + options.bind_addr + "' is not an address of rank 0's host " + local_hostname() +
                                ", where the store must listen (" + errno_text(err) +
                                "); set launch.master_addr (ptd launch --master-addr) to an address of rank 0's host "
                                "that every host can reach");
    if (fd < 0) return fail({}, "", "cannot listen on " + where + ": " + errno_text(err));
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    getsockname(fd, (sockaddr*)&ss, &len);
    if (options.secret.empty() && !is_loopback_address(ss)) {
        ::close(fd);
        return fail({}, "", "refusing to serve the store on " + where + " without a run secret: anyone who reaches "
                            "that address could write the keys the ranks trust. Set PTD_RUN_SECRET to the same "
                            "random value on every rank (ptd launch does), or use a loopback MASTER_ADDR");
    }
    int port = ss.ss_family == AF_INET6 ? ntohs(((sockaddr_in6*)&ss)->sin6_port) : ntohs(((sockaddr_in*)&ss)->sin_port);
    return std::unique_ptr<KvServer>(new KvServerImpl(fd, port, options));
}

Result<std::unique_ptr<KvClient>> KvClient::connect(const std::string& addr, int port, double timeout_s,
                                                    const std::string& secret) {
    auto start = Clock::now();
    auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    if (auto ok = check_resolves(addr, deadline); !ok) return std::unexpected(ok.error());
    // "No route" / "network unreachable" can be a moment's ARP or routing hiccup, but not
    // for long: the other ranks would wait out their whole timeout for a rank that gave up.
    constexpr auto kUnreachableFor = std::chrono::seconds(10);
    Clock::time_point unreachable_since{};
    int err = ETIMEDOUT;
    // A connect that nobody answers (no RST, no SYN-ACK) means dropped packets: say so
    // after a while instead of sitting silent for the whole timeout, and keep trying.
    constexpr auto kSilentAttempt = std::chrono::seconds(10);
    bool warned_silent = false;
    for (;;) {
        const auto attempt_deadline = std::min(deadline, Clock::now() + kSilentAttempt);
        int fd = try_connect(addr, port, attempt_deadline, err);
        if (fd >= 0) {
            std::string why;
            const Handshake h = handshake(fd, secret, std::min(deadline, Clock::now() + std::chrono::seconds(30)), why);
            if (h == Handshake::ok) return std::unique_ptr<KvClient>(new KvClientImpl(fd, addr, port, secret));
            ::close(fd);
            if (h == Handshake::refused)
                return fail({}, "", "the store at " + addr + ":" + std::to_string(port) + " refused host " + local_hostname() +
                                        ": " + why + "; every rank of a run must be given the same PTD_RUN_SECRET");
            // Busy, or the connection broke during the handshake: try again like a refused connect.
            err = ECONNRESET;
        }
        if (err == ETIMEDOUT && attempt_deadline < deadline && !warned_silent) {
            warned_silent = true;
            std::fprintf(stderr,
                         "ptd-engine: no answer from MASTER_ADDR '%s' port %d on host %s for %s s (packets dropped: a "
                         "firewall, or an address of rank 0's host this host cannot reach); still trying for up to %s s\n",
                         addr.c_str(), port, local_hostname().c_str(),
                         format_seconds(std::chrono::duration<double>(kSilentAttempt).count()).c_str(),
                         format_seconds(timeout_s).c_str());
        }
        const bool unreachable = err == EHOSTUNREACH || err == ENETUNREACH || err == EADDRNOTAVAIL;
        if (!unreachable) unreachable_since = {};
        else if (unreachable_since == Clock::time_point{}) unreachable_since = Clock::now();
        if (unreachable && Clock::now() - unreachable_since >= kUnreachableFor)
            return fail({}, "", "MASTER_ADDR '" + addr + "' port " + std::to_string(port) + " cannot be reached from host " +
                                    local_hostname() + ": " + errno_text(err) + " for " +
                                    format_seconds(std::chrono::duration<double>(kUnreachableFor).count()) +
                                    " s; set launch.master_addr (ptd launch --master-addr) to an address of rank 0's "
                                    "host that every host can reach");
        // Rank 0 may not be listening yet: retry until the deadline.
        if (Clock::now() + std::chrono::milliseconds(50) >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return fail({}, "", "cannot reach the store at " + addr + ":" + std::to_string(port) + " from host " + local_hostname() +
                            " after " + format_seconds(timeout_s) + " s: " + errno_text(err));
}

}  // namespace ptd::engine

namespace ptd::engine {

Result<std::string> run_secret_from_env(const std::string& master_addr) {
    const char* value = std::getenv("PTD_RUN_SECRET");
    const std::string secret = value ? value : "";
    constexpr size_t kMinSecretChars = 32;
    if (!secret.empty() && secret.size() < kMinSecretChars)
        return fail(SourceLoc{"environment"}, "PTD_RUN_SECRET",
                    "is " + std::to_string(secret.size()) + " characters; allowed: at least " +
                        std::to_string(kMinSecretChars) + " (e.g. `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'`)");
    if (!secret.empty()) return secret;
    // No secret: fine only when every address MASTER_ADDR names is this machine's loopback.
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(master_addr.c_str(), nullptr, &hints, &res) != 0) return std::string();  // connect says why
    bool loopback = true;
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
        sockaddr_storage ss{};
        std::memcpy(&ss, ai->ai_addr, std::min<size_t>(ai->ai_addrlen, sizeof ss));
        loopback = loopback && is_loopback_address(ss);
    }
    freeaddrinfo(res);
    if (loopback) return std::string();
    return fail(SourceLoc{"environment"}, "PTD_RUN_SECRET",
                "is not set, and MASTER_ADDR '" + master_addr +
                    "' is not a loopback address: the store would let anyone who reaches it write the keys the ranks "
                    "trust. Launch with `ptd launch` (it gives every rank a fresh secret), or set PTD_RUN_SECRET to the "
                    "same random value of at least 32 characters on every rank");
}

}  // namespace ptd::engine
