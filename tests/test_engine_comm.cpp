// test_engine_comm.cpp — the run's KV store and liveness monitor in-process, then the
// Gloo communicators and failure reporting as real multi-process runs of
// engine_comm_worker over loopback TCP: exact results for every operation on every
// group of several layouts, and for a killed, stopped or self-reporting rank, that every
// other rank exits non-zero within seconds naming it, with nothing left running.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "free_port.h"
#include "process_test_util.h"
#include "store_peer.h"

#include "ptd/engine/checkpoint.h"
#include "ptd/engine/comm.h"
#include "ptd/engine/kv_store.h"

using namespace ptd::engine;
using Clock = std::chrono::steady_clock;

namespace {

std::string bytes_to_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> to_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }


std::unique_ptr<KvServer> start_server(int world = 1, double stall_s = 60, const std::string& secret = "") {
    KvServerOptions o;
    o.bind_addr = "127.0.0.1";
    o.secret = secret;
    o.port = 0;
    o.world_size = world;
    o.stall_timeout_s = stall_s;
    auto s = KvServer::start(o);
    EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().str());
    return s ? std::move(*s) : nullptr;
}

std::unique_ptr<KvClient> connect_to_with(const KvServer& s, const std::string& secret) {
    auto c = KvClient::connect("127.0.0.1", s.port(), 5, secret);
    EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().str());
    return c ? std::move(*c) : nullptr;
}

std::unique_ptr<KvClient> connect_to(const KvServer& s) {
    auto c = KvClient::connect("127.0.0.1", s.port(), 5);
    EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().str());
    return c ? std::move(*c) : nullptr;
}

// Collects the monitor's abort callback.
struct AbortSink {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::string> messages;
    std::function<void(const std::string&)> fn() {
        return [this](const std::string& m) {
            std::lock_guard lock(mu);
            messages.push_back(m);
            cv.notify_all();
        };
    }
    std::string wait(double s) {
        std::unique_lock lock(mu);
        cv.wait_for(lock, std::chrono::duration<double>(s), [&] { return !messages.empty(); });
        return messages.empty() ? "" : messages.front();
    }
};

}  // namespace

// ---- KV store, in process ----------------------------------------------------------

TEST(KvStore, SetGetAddCheck) {
    auto server = start_server();
    auto a = connect_to(*server);
    auto b = connect_to(*server);
    a->set("alpha", to_bytes("one"));
    auto v = b->get("alpha", 1);
    ASSERT_TRUE(v.has_value()) << v.error().str();
    EXPECT_EQ(bytes_to_string(*v), "one");
    a->set("alpha", to_bytes("two"));  // overwrite
    EXPECT_EQ(bytes_to_string(*b->get("alpha", 1)), "two");
    std::vector<uint8_t> binary{0, 1, 2, 255, 0};
    a->set("bin", binary);
    EXPECT_EQ(*b->get("bin", 1), binary);
    a->set("empty", {});
    EXPECT_TRUE(b->get("empty", 1)->empty());

    EXPECT_TRUE(a->check({"alpha", "bin"}));
    EXPECT_FALSE(a->check({"alpha", "nope"}));
    EXPECT_TRUE(a->check({}));

    EXPECT_EQ(a->add("counter", 5), 5);
    EXPECT_EQ(b->add("counter", -2), 3);
    EXPECT_EQ(bytes_to_string(*a->get("counter", 1)), "3");
    EXPECT_THROW(a->add("alpha", 1), std::runtime_error);  // not a counter
    EXPECT_EQ(a->add("counter", 0), 3);                   // and the connection still works
}

TEST(KvStore, GetWaitsForTheKey) {
    auto server = start_server();
    auto a = connect_to(*server);
    auto b = connect_to(*server);
    std::thread setter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        a->set("late", to_bytes("here"));
    });
    auto t0 = Clock::now();
    auto v = b->get("late", 5);
    setter.join();
    ASSERT_TRUE(v.has_value()) << v.error().str();
    EXPECT_EQ(bytes_to_string(*v), "here");
    EXPECT_GE(std::chrono::duration<double>(Clock::now() - t0).count(), 0.15);
    // A counter created by add wakes a waiting get too.
    std::thread adder([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        a->add("ctr", 7);
    });
    EXPECT_EQ(bytes_to_string(*b->get("ctr", 5)), "7");
    adder.join();
}

TEST(KvStore, GetTimeoutNamesTheKeyAndLateRepliesAreSkipped) {
    auto server = start_server();
    auto a = connect_to(*server);
    auto b = connect_to(*server);
    auto v = b->get("never/set/key", 0.2);
    ASSERT_FALSE(v.has_value());
    EXPECT_NE(v.error().str().find("never/set/key"), std::string::npos) << v.error().str();
    // The timed-out GET is still pending on the server; its late answer must not be
    // taken for the reply to b's next request.
    a->set("never/set/key", to_bytes("late"));
    a->set("other", to_bytes("right"));
    auto w = b->get("other", 1);
    ASSERT_TRUE(w.has_value()) << w.error().str();
    EXPECT_EQ(bytes_to_string(*w), "right");
    EXPECT_EQ(b->add("n", 1), 1);
}

TEST(KvStore, MalformedFramesDoNotCrashTheServer) {
    auto server = start_server();
    auto send_raw = [&](const std::string& bytes) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((uint16_t)server->port());
        ASSERT_EQ(connect(fd, (sockaddr*)&a, sizeof a), 0);
        ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), (ssize_t)bytes.size());
        // The server closes the connection (after its challenge and refusal): recv ends in
        // EOF (or a reset), never hangs.
        timeval tv{5, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char buf[256];
        ssize_t n;
        while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {}
        EXPECT_EQ(n, 0) << "no EOF within 5 s: " << std::strerror(errno);
        close(fd);
    };
    send_raw(std::string("\xff\xff\xff\xff", 4) + "garbage");              // absurd length
    send_raw(std::string("\x00\x00\x00\x00", 4));                          // empty frame
    send_raw(std::string("\x01\x00\x00\x00\x63", 5));                      // unknown type 99
    send_raw(std::string("\x05\x00\x00\x00\x01\x01\x02\x03\x04", 9));      // SET cut short
    send_raw(std::string("\x0e\x00\x00\x00\x02", 5) + std::string(8, '\0') + std::string("\xff\xff\xff\x7f\x00", 5));  // GET, key length past the end
    send_raw(std::string("\x01\x00\x00\x00\x23", 5));                      // FAILURE before HELLO
    auto c = connect_to(*server);
    c->set("still", to_bytes("alive"));
    EXPECT_EQ(bytes_to_string(*c->get("still", 1)), "alive");
}

// ---- the store's authentication, in process ----------------------------------------

const std::string kSecret = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

TEST(KvStoreAuth, TheRunsSecretOpensTheStore) {
    auto server = start_server(1, 60, kSecret);
    auto c = KvClient::connect("127.0.0.1", server->port(), 5, kSecret);
    ASSERT_TRUE(c.has_value()) << c.error().str();
    (*c)->set("k", to_bytes("v"));
    EXPECT_EQ(bytes_to_string(*(*c)->get("k", 1)), "v");
}

TEST(KvStoreAuth, NoSecretOrAWrongOneCannotReadOrWrite) {
    auto server = start_server(1, 60, kSecret);
    auto owner = KvClient::connect("127.0.0.1", server->port(), 5, kSecret);
    ASSERT_TRUE(owner.has_value());
    (*owner)->set("nccl_id", to_bytes("trusted"));
    for (const std::string& wrong : {std::string(), std::string(64, 'x'), kSecret.substr(1) + "0"}) {
        const auto t0 = Clock::now();
        auto c = KvClient::connect("127.0.0.1", server->port(), 10, wrong);
        ASSERT_FALSE(c.has_value()) << "secret '" << wrong << "' was let in";
        // Refused for good at once, not retried until the timeout.
        EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 3);
        const std::string e = c.error().str();
        EXPECT_NE(e.find("refused"), std::string::npos) << e;
        EXPECT_NE(e.find("PTD_RUN_SECRET"), std::string::npos) << e;
    }
    // A stranger who skips the handshake gets no answer to a GET and cannot SET.
    store_peer::Peer p(server->port());
    ASSERT_FALSE(p.challenge().empty());
    const std::string get = std::string(1, '\x02') + std::string(8, '\0') + store_peer::field("nccl_id");
    const std::string set = std::string(1, '\x01') + std::string(8, '\0') + store_peer::field("nccl_id") +
                            store_peer::field("forged");
    p.send(store_peer::frame(set) + store_peer::frame(get));
    const std::string reply = p.read_frame();
    EXPECT_EQ((uint8_t)reply[0], store_peer::kRefused);
    EXPECT_EQ(reply.find("trusted"), std::string::npos);
    EXPECT_TRUE(p.closed_by_store());
    EXPECT_EQ(bytes_to_string(*(*owner)->get("nccl_id", 1)), "trusted");
}

TEST(KvStoreAuth, AReplayedAnswerIsRefused) {
    auto server = start_server(1, 60, kSecret);
    store_peer::Peer first(server->port());
    const std::string nonce = first.challenge();
    ASSERT_EQ(nonce.size(), 32u);
    const std::string answer = store_peer::auth_payload(kSecret, nonce);
    first.send(store_peer::frame(answer));
    EXPECT_EQ(first.read_frame(), std::string(1, (char)store_peer::kAuthOk));
    // The same answer on a new connection: its challenge was another nonce.
    store_peer::Peer replay(server->port());
    const std::string other = replay.challenge();
    ASSERT_EQ(other.size(), 32u);
    EXPECT_NE(other, nonce);
    replay.send(store_peer::frame(answer));
    const std::string reply = replay.read_frame();
    ASSERT_FALSE(reply.empty());
    EXPECT_EQ((uint8_t)reply[0], store_peer::kRefused);
    EXPECT_NE(reply.find("replayed"), std::string::npos) << reply;
    EXPECT_TRUE(replay.closed_by_store());
}

TEST(KvStoreAuth, AFloodOfSilentConnectionsDoesNotKeepARankOut) {
    auto server = start_server(1, 60, kSecret);
    std::vector<std::unique_ptr<store_peer::Peer>> flood;
    for (int i = 0; i < 300; ++i) flood.push_back(std::make_unique<store_peer::Peer>(server->port()));
    const auto t0 = Clock::now();
    auto c = KvClient::connect("127.0.0.1", server->port(), 10, kSecret);
    ASSERT_TRUE(c.has_value()) << c.error().str();
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 3);
    (*c)->set("after", to_bytes("flood"));
    EXPECT_EQ(bytes_to_string(*(*c)->get("after", 1)), "flood");
    // The oldest of the flood were pushed out; the rest are closed once their time is up.
    EXPECT_TRUE(flood.front()->closed_by_store(1));
    EXPECT_TRUE(flood.back()->closed_by_store(10));
}

TEST(KvStoreAuth, OversizedFramesAreRefusedBeforeAndAfterAuthentication) {
    auto server = start_server(1, 60, kSecret);
    {
        store_peer::Peer p(server->port());
        ASSERT_FALSE(p.challenge().empty());
        p.send(std::string("\x00\x10\x00\x00", 4) + std::string(64, 'A'));  // 4 KiB announced before AUTH
        EXPECT_TRUE(p.closed_by_store());
    }
    {
        store_peer::Peer p(server->port());
        const std::string nonce = p.challenge();
        p.send(store_peer::frame(store_peer::auth_payload(kSecret, nonce)));
        ASSERT_EQ(p.read_frame(), std::string(1, (char)store_peer::kAuthOk));
        p.send(std::string("\xff\xff\xff\x7f", 4));  // 2 GiB announced
        EXPECT_TRUE(p.closed_by_store());
    }
    // A key over the bound is refused with a reason; the connection and store live on.
    auto c = connect_to_with(*server, kSecret);
    EXPECT_THROW(c->set(std::string(5000, 'k'), to_bytes("v")), std::runtime_error);
    try {
        c->set(std::string(5000, 'k'), to_bytes("v"));
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("key of 5000 bytes"), std::string::npos) << e.what();
    }
    c->set("fine", to_bytes("v"));
    EXPECT_EQ(bytes_to_string(*c->get("fine", 1)), "v");
}

TEST(KvStoreAuth, NoSecretIsServedOnlyOnLoopback) {
    KvServerOptions o;
    o.bind_addr = "0.0.0.0";
    o.port = 0;
    auto s = KvServer::start(o);
    ASSERT_FALSE(s.has_value()) << "served every interface without a secret";
    EXPECT_NE(s.error().str().find("PTD_RUN_SECRET"), std::string::npos) << s.error().str();
    o.secret = kSecret;
    EXPECT_TRUE(KvServer::start(o).has_value());
}

TEST(KvStoreAuth, RunSecretFromTheEnvironment) {
    unsetenv("PTD_RUN_SECRET");
    auto loop = run_secret_from_env("127.0.0.1");
    ASSERT_TRUE(loop.has_value()) << loop.error().str();
    EXPECT_EQ(*loop, "");
    auto remote = run_secret_from_env("192.0.2.7");  // TEST-NET-1: not this machine's loopback
    ASSERT_FALSE(remote.has_value());
    EXPECT_NE(remote.error().str().find("PTD_RUN_SECRET"), std::string::npos) << remote.error().str();
    EXPECT_NE(remote.error().str().find("192.0.2.7"), std::string::npos) << remote.error().str();
    setenv("PTD_RUN_SECRET", "short", 1);
    auto shortv = run_secret_from_env("127.0.0.1");
    ASSERT_FALSE(shortv.has_value());
    EXPECT_NE(shortv.error().str().find("5 characters"), std::string::npos) << shortv.error().str();
    setenv("PTD_RUN_SECRET", kSecret.c_str(), 1);
    EXPECT_EQ(*run_secret_from_env("192.0.2.7"), kSecret);
    unsetenv("PTD_RUN_SECRET");
}

TEST(KvStore, ConnectTimeoutNamesAddressAndPort) {
    int port = free_port();
    auto t0 = Clock::now();
    auto c = KvClient::connect("127.0.0.1", port, 0.3);
    double took = std::chrono::duration<double>(Clock::now() - t0).count();
    ASSERT_FALSE(c.has_value());
    std::string msg = c.error().str();
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << msg;
    EXPECT_NE(msg.find("cannot reach the store"), std::string::npos) << msg;
    EXPECT_GE(took, 0.25);
    EXPECT_LT(took, 3.0);
}

TEST(KvStore, ServerStartErrorNamesTheAddress) {
    auto first = start_server();
    KvServerOptions o;
    o.bind_addr = "127.0.0.1";
    o.port = first->port();  // taken
    auto second = KvServer::start(o);
    ASSERT_FALSE(second.has_value());
    EXPECT_NE(second.error().str().find("127.0.0.1:" + std::to_string(first->port())), std::string::npos)
        << second.error().str();
}

// ---- monitor, in process -----------------------------------------------------------

TEST(KvMonitor, ReportedFailureAbortsTheOthers) {
    auto server = start_server(3);
    auto c0 = connect_to(*server), c1 = connect_to(*server), c2 = connect_to(*server);
    AbortSink s0, s1, s2;
    ASSERT_TRUE(c0->start_monitor(0, 0.1, s0.fn()).has_value());
    ASSERT_TRUE(c1->start_monitor(1, 0.1, s1.fn()).has_value());
    ASSERT_TRUE(c2->start_monitor(2, 0.1, s2.fn()).has_value());
    EXPECT_EQ(c0->abort_reason(0), "");
    c1->report_failure("bad data");
    std::string m0 = s0.wait(5), m2 = s2.wait(5);
    EXPECT_NE(m0.find("rank 1 (pid " + std::to_string(getpid())), std::string::npos) << m0;
    EXPECT_NE(m0.find("failed: bad data"), std::string::npos) << m0;
    EXPECT_EQ(m0, m2);
    EXPECT_EQ(c2->abort_reason(1), m0);
    EXPECT_FALSE(server->wait_all_goodbye(0.1));
    // The reporter hears its own abort last (the echo fatal_run_error waits for before it
    // exits), and a second failure is not reported again.
    EXPECT_EQ(s1.wait(5), m0);
    c2->report_failure("consequence");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(s1.messages.size(), 1u);
    EXPECT_EQ(s0.messages.size(), 1u);
}

TEST(KvMonitor, ConnectionClosedWithoutGoodbyeIsADeath) {
    auto server = start_server(2);
    auto c0 = connect_to(*server), c1 = connect_to(*server);
    AbortSink s0, s1;
    ASSERT_TRUE(c0->start_monitor(0, 0.1, s0.fn()).has_value());
    ASSERT_TRUE(c1->start_monitor(1, 0.1, s1.fn()).has_value());
    c1.reset();  // the process "dies": its sockets close without a goodbye
    std::string m = s0.wait(5);
    EXPECT_NE(m.find("rank 1 (pid"), std::string::npos) << m;
    EXPECT_NE(m.find("died: connection closed without goodbye"), std::string::npos) << m;
}

TEST(KvMonitor, MissingHeartbeatIsAStall) {
    auto server = start_server(2, 0.5);
    auto c0 = connect_to(*server), c1 = connect_to(*server);
    AbortSink s0, s1;
    ASSERT_TRUE(c0->start_monitor(0, 0.1, s0.fn()).has_value());
    ASSERT_TRUE(c1->start_monitor(1, 100, s1.fn()).has_value());  // never beats in time
    auto t0 = Clock::now();
    std::string m = s0.wait(5);
    double took = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_NE(m.find("rank 1 (pid"), std::string::npos) << m;
    EXPECT_NE(m.find("stalled: no heartbeat for"), std::string::npos) << m;
    EXPECT_GE(took, 0.4);
    EXPECT_LT(took, 3.0);
}

TEST(KvMonitor, GoodbyeEndsTheRunQuietly) {
    auto server = start_server(2, 0.5);
    auto c0 = connect_to(*server), c1 = connect_to(*server);
    AbortSink s0, s1;
    ASSERT_TRUE(c0->start_monitor(0, 0.1, s0.fn()).has_value());
    ASSERT_TRUE(c1->start_monitor(1, 0.1, s1.fn()).has_value());
    EXPECT_FALSE(server->wait_all_goodbye(0.2));
    c1->goodbye();
    c1.reset();  // after a goodbye, closing is not a death, nor is silence a stall
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    c0->goodbye();
    EXPECT_TRUE(server->wait_all_goodbye(2));
    server.reset();  // nor is the store going away after our goodbye
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_TRUE(s0.messages.empty()) << s0.messages.front();
    EXPECT_TRUE(s1.messages.empty());
}

TEST(KvMonitor, LosingTheStoreIsReported) {
    auto server = start_server(2);
    int port = server->port();
    auto c1 = connect_to(*server);
    AbortSink s1;
    ASSERT_TRUE(c1->start_monitor(1, 0.1, s1.fn()).has_value());
    server.reset();
    std::string m = s1.wait(5);
    EXPECT_EQ(m, "rank 0 (store at 127.0.0.1:" + std::to_string(port) + ") died: connection lost");
    EXPECT_EQ(c1->abort_reason(0), m);
    EXPECT_FALSE(c1->get("x", 0.1).has_value());
    EXPECT_THROW(c1->set("x", {}), std::runtime_error);
}

namespace {

// A TCP relay in front of the store that can be cut: afterwards it neither reads nor
// writes, and keeps every connection open, as a host whose link went down looks to both
// ends (no FIN, no RST, nothing).
class CutProxy {
public:
    explicit CutProxy(int target_port) : target_port_(target_port) {
        listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = 0;
        socklen_t len = sizeof a;
        if (::bind(listen_fd_, (sockaddr*)&a, sizeof a) != 0 || ::listen(listen_fd_, 16) != 0 ||
            ::getsockname(listen_fd_, (sockaddr*)&a, &len) != 0)
            ADD_FAILURE() << "CutProxy: cannot listen on loopback: " << std::strerror(errno);
        port_ = ntohs(a.sin_port);
        threads_.emplace_back([this] { accept_loop(); });
    }
    ~CutProxy() {
        stop_ = true;
        for (std::thread& t : threads_) t.join();
        ::close(listen_fd_);
        for (int fd : fds_) ::close(fd);
    }
    int port() const { return port_; }
    void cut() { cut_ = true; }

private:
    void accept_loop() {
        while (!stop_) {
            pollfd p{listen_fd_, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;
            const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
            if (client < 0) continue;
            const int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            a.sin_port = htons((uint16_t)target_port_);
            if (::connect(upstream, (sockaddr*)&a, sizeof a) != 0) {
                ::close(client);
                ::close(upstream);
                continue;
            }
            std::lock_guard lock(mu_);
            fds_.push_back(client);
            fds_.push_back(upstream);
            relays_.emplace_back([this, client, upstream] { relay(client, upstream); });
        }
        std::lock_guard lock(mu_);
        for (std::thread& t : relays_) t.join();
    }
    void relay(int a, int b) {
        char buf[4096];
        while (!stop_) {
            if (cut_) {
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
                continue;
            }
            pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
            if (::poll(p, 2, 50) <= 0 || cut_) continue;
            for (int i = 0; i < 2; ++i) {
                if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
                const ssize_t n = ::recv(p[i].fd, buf, sizeof buf, 0);
                if (n <= 0) return;
                if (::send(p[1 - i].fd, buf, (size_t)n, MSG_NOSIGNAL) != n) return;
            }
        }
    }

    int target_port_, listen_fd_ = -1, port_ = 0;
    std::atomic<bool> stop_{false}, cut_{false};
    std::mutex mu_;
    std::vector<int> fds_;
    std::vector<std::thread> threads_, relays_;
};

}  // namespace

// A rank's link to the store cut (through CutProxy): its lease runs out after store_lease_s
// without an echo, the monitor aborts naming the store and the silence, and from then on
// the lease refuses every checkpoint write — the file is never renamed into place.
TEST(KvMonitor, ACutOffRankLosesItsLeaseAndCommitsNoCheckpoint) {
    auto server = start_server(2);
    CutProxy proxy(server->port());
    auto got = KvClient::connect("127.0.0.1", proxy.port(), 5);
    ASSERT_TRUE(got.has_value()) << got.error().str();
    std::unique_ptr<KvClient> c1 = std::move(*got);
    AbortSink s1;
    ASSERT_TRUE(c1->start_monitor(1, 0.1, s1.fn(), 1.0).has_value());
    std::string tmpl = (std::filesystem::temp_directory_path() / "ptd_lease_test_XXXXXX").string();
    const std::string dir = mkdtemp(tmpl.data());
    const CommitGuard lease_held = [&] { return c1->lease_lost(); };
    const std::string state = "{}";
    const std::vector<BlobView> blobs = {{"state", state.data(), state.size()}};

    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(c1->lease_lost(), "");
    EXPECT_TRUE(write_shard(dir + "/before.bin", 1, blobs, lease_held).has_value());

    const auto t0 = Clock::now();
    proxy.cut();
    const std::string m = s1.wait(6);
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_NE(m.find("lost the run's store at 127.0.0.1:" + std::to_string(proxy.port()) +
                     " (rank 0 stalled, or this host cut off from it): no reply to heartbeats for "),
              std::string::npos)
        << m;
    EXPECT_NE(m.find(" s, past the store lease of 1.0 s"), std::string::npos) << m;
    EXPECT_GE(took, 0.8);
    EXPECT_LT(took, 6.0);

    const std::string lost = c1->lease_lost();
    EXPECT_EQ(lost, "the run was aborted: " + m);
    auto shard = write_shard(dir + "/after.bin", 1, blobs, lease_held);
    ASSERT_FALSE(shard.has_value());
    EXPECT_NE(shard.error().str().find("did not write checkpoint shard \"" + dir + "/after.bin\": " + lost), std::string::npos)
        << shard.error().str();
    auto manifest = write_manifest(dir + "/step-00000001", Manifest{}, lease_held);
    ASSERT_FALSE(manifest.has_value());
    EXPECT_NE(manifest.error().str().find("did not write \"" + dir + "/step-00000001/manifest.json\": " + lost),
              std::string::npos)
        << manifest.error().str();
    for (const char* name : {"after.bin", "after.bin.tmp", "step-00000001/manifest.json", "step-00000001/manifest.json.tmp"})
        EXPECT_FALSE(std::filesystem::exists(dir + "/" + name)) << name;
    EXPECT_TRUE(std::filesystem::exists(dir + "/before.bin"));
    std::filesystem::remove_all(dir);
}

// ---- multi-process runs ------------------------------------------------------------

namespace {

using ptd_test::read_file;

// One run of engine_comm_worker: `world` processes in their own process group, each
// with its stderr and stdout in files. The destructor kills whatever is left.
class WorkerRun {
public:
    WorkerRun(int world, const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {})
        : world_(world) {
        std::string tmpl = (std::filesystem::temp_directory_path() / "ptd_comm_test_XXXXXX").string();
        dir_ = mkdtemp(tmpl.data());
        port_ = free_port();
        std::string exe = std::string(PTD_BIN_DIR) + "/engine_comm_worker";
        start_ = Clock::now();
        for (int r = 0; r < world; ++r) {
            // Build argv and envp before fork: the child only calls async-signal-safe
            // functions, as a multi-threaded parent (gtest, earlier tests) requires.
            std::vector<std::string> argv_s{exe};
            argv_s.insert(argv_s.end(), args.begin(), args.end());
            std::vector<std::string> env_s;
            for (char** e = environ; *e; ++e) {
                std::string kv = *e;
                for (const char* name : {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=",
                                         "MASTER_PORT=", "GLOO_SOCKET_IFNAME=", "PTD_COMM_STRICT_FIFO="})
                    if (kv.rfind(name, 0) == 0) kv.clear();
                if (!kv.empty()) env_s.push_back(kv);
            }
            env_s.push_back("RANK=" + std::to_string(r));
            env_s.push_back("WORLD_SIZE=" + std::to_string(world));
            env_s.push_back("LOCAL_RANK=" + std::to_string(r));
            env_s.push_back("LOCAL_WORLD_SIZE=" + std::to_string(world));
            env_s.push_back("MASTER_ADDR=127.0.0.1");
            env_s.push_back("MASTER_PORT=" + std::to_string(port_));
            env_s.insert(env_s.end(), extra_env.begin(), extra_env.end());
            std::vector<char*> argv, envp;
            for (auto& s : argv_s) argv.push_back(s.data());
            argv.push_back(nullptr);
            for (auto& s : env_s) envp.push_back(s.data());
            envp.push_back(nullptr);
            std::string err = err_path(r), out = dir_ + "/out." + std::to_string(r);
            pid_t pid = fork();
            if (pid == 0) {
                setpgid(0, pgid_);  // pgid_ is 0 for the first child: it leads the group
                int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
                int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
                dup2(e, 2);
                dup2(o, 1);
                execve(exe.c_str(), argv.data(), envp.data());
                _exit(127);
            }
            if (pgid_ == 0) pgid_ = pid;
            setpgid(pid, pgid_);  // also here, so the group exists before we rely on it
            pids_.push_back(pid);
        }
        status_.assign((size_t)world, -1);
        exited_at_.assign((size_t)world, -1.0);
        stopped_at_.assign((size_t)world, -1.0);
    }

    ~WorkerRun() {
        if (pgid_ > 0) kill(-pgid_, SIGKILL);
        for (size_t r = 0; r < pids_.size(); ++r)
            if (status_[r] < 0) waitpid(pids_[r], nullptr, 0);
        std::string cmd = "rm -rf '" + dir_ + "'";
        [[maybe_unused]] int rc = std::system(cmd.c_str());
    }

    // Reaps ranks until all but `except` exited or `deadline_s` (from the start) passed;
    // then kills the whole group so nothing outlives a failing test. True if all did.
    bool wait(double deadline_s, int except = -1) {
        auto deadline = start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(deadline_s));
        for (;;) {
            bool all = true;
            for (size_t r = 0; r < pids_.size(); ++r) {
                if (status_[r] >= 0) continue;
                int st = 0;
                pid_t got = waitpid(pids_[r], &st, WNOHANG | WUNTRACED);
                if (got == pids_[r] && WIFSTOPPED(st)) {
                    if (stopped_at_[r] < 0) stopped_at_[r] = since_start();
                } else if (got == pids_[r]) {
                    status_[r] = st;
                    exited_at_[r] = since_start();
                    continue;
                }
                if ((int)r != except) all = false;
            }
            if (all) return true;
            if (Clock::now() >= deadline) {
                kill(-pgid_, SIGKILL);
                return false;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    }

    // Kills and reaps one rank (the stopped victim).
    void kill_rank(int r) {
        kill(pids_[(size_t)r], SIGKILL);
        int st = 0;
        waitpid(pids_[(size_t)r], &st, 0);
        status_[(size_t)r] = st;
        exited_at_[(size_t)r] = since_start();
    }

    // After everything was reaped: no process of the run's group is left.
    bool nothing_left() const {
        for (size_t r = 0; r < pids_.size(); ++r)
            if (kill(pids_[r], 0) == 0 || errno != ESRCH) return false;
        return kill(-pgid_, 0) == -1 && errno == ESRCH;
    }

    std::string err(int r) const { return read_file(err_path(r)); }
    std::string out(int r) const { return read_file(dir_ + "/out." + std::to_string(r)); }
    int status(int r) const { return status_[(size_t)r]; }
    double exited_at(int r) const { return exited_at_[(size_t)r]; }
    double stopped_at(int r) const { return stopped_at_[(size_t)r]; }
    int world() const { return world_; }
    int port() const { return port_; }

    std::string describe(int r) const {
        int st = status_[(size_t)r];
        std::string s = "rank " + std::to_string(r) + ": ";
        if (st < 0) s += "still running";
        else if (WIFEXITED(st)) s += "exit " + std::to_string(WEXITSTATUS(st));
        else if (WIFSIGNALED(st)) s += "signal " + std::to_string(WTERMSIG(st));
        return s + " after " + std::to_string(exited_at_[(size_t)r]) + " s\n--- stderr ---\n" + err(r) + "---\n";
    }
    std::string describe_all() const {
        std::string s;
        for (int r = 0; r < world_; ++r) s += describe(r);
        return s;
    }

private:
    std::string err_path(int r) const { return dir_ + "/err." + std::to_string(r); }
    double since_start() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

    int world_;
    int port_ = 0;
    std::string dir_;
    Clock::time_point start_;
    pid_t pgid_ = 0;
    std::vector<pid_t> pids_;
    std::vector<int> status_;
    std::vector<double> exited_at_, stopped_at_;
};

void expect_all_ok(WorkerRun& run) {
    for (int r = 0; r < run.world(); ++r) {
        EXPECT_TRUE(WIFEXITED(run.status(r)) && WEXITSTATUS(run.status(r)) == 0) << run.describe(r);
        EXPECT_EQ(run.out(r), "ok\n") << run.describe(r);
    }
    EXPECT_TRUE(run.nothing_left());
}

void check_run(int tp, int pp, int dp, const std::vector<std::string>& env = {}) {
    WorkerRun run(tp * pp * dp, {"--tp", std::to_string(tp), "--pp", std::to_string(pp), "--dp", std::to_string(dp),
                           "--timeout", "20"}, env);
    ASSERT_TRUE(run.wait(40)) << run.describe_all();
    expect_all_ok(run);
}

// A failure run: the victim fails `after` s into the steady state; every other rank must
// exit non-zero within `within` s of the victim (its death, or its stop) and say `names`.
void expect_others_abort(WorkerRun& run, int victim, double within, const std::vector<std::string>& names) {
    double t_victim = run.exited_at(victim) >= 0 ? run.exited_at(victim) : run.stopped_at(victim);
    ASSERT_GE(t_victim, 0) << "the victim neither exited nor stopped\n" << run.describe_all();
    for (int r = 0; r < run.world(); ++r) {
        if (r == victim) continue;
        int st = run.status(r);
        EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << run.describe(r);
        EXPECT_LT(run.exited_at(r) - t_victim, within) << run.describe(r);
        std::string e = run.err(r);
        for (const auto& n : names) EXPECT_NE(e.find(n), std::string::npos) << "wanted \"" << n << "\"\n" << run.describe(r);
        EXPECT_NE(e.find("ptd-engine: rank " + std::to_string(r) + ": error: "), std::string::npos) << run.describe(r);
    }
}

}  // namespace

TEST(CommRun, World1SelfGroups) { check_run(1, 1, 1); }
TEST(CommRun, World2Dp) { check_run(1, 1, 2); }
TEST(CommRun, World4Tp2Pp2) { check_run(2, 2, 1); }
TEST(CommRun, World8Tp2Pp2Dp2) { check_run(2, 2, 2); }

// Gloo's pairs (docs/engine.md, "Gloo's pairs"): with the run's secret every pair proves it
// before a group carries data, and the 8-rank groups still work; a rank that speaks Gloo but
// proves another secret — what a stranger who took a pair's place at its listener could
// do at best — stops every group it is in before any data, each side naming the other.
TEST(CommRun, GloosPairsProveTheRunsSecretAndAStrangerIsRefused) {
    const std::string secret = "0123456789abcdef0123456789abcdef-pairs";
    WorkerRun ok(8, {"--tp", "2", "--pp", "2", "--dp", "2", "--timeout", "20", "--pair-secret", secret});
    ASSERT_TRUE(ok.wait(40)) << ok.describe_all();
    expect_all_ok(ok);

    WorkerRun hit(2, {"--dp", "2", "--timeout", "10", "--pair-secret", secret, "--impostor", "1"});
    ASSERT_TRUE(hit.wait(40)) << hit.describe_all();
    // Each rank stops: by its own check, or aborted by the store when the other's check
    // came first (the abort quotes that rank's finding).
    int found_by_itself = 0;
    for (int r = 0; r < 2; ++r) {
        EXPECT_FALSE(WIFEXITED(hit.status(r)) && WEXITSTATUS(hit.status(r)) == 0) << hit.describe(r);
        EXPECT_NE(hit.out(r), "ok\n") << hit.describe(r);
        EXPECT_NE(hit.err(r).find("did not prove the run's secret"), std::string::npos) << hit.describe(r);
        const std::string own = "rank " + std::to_string(r) + ": error: cannot set up the world group 0 (global ranks 0, 1): "
                                "the Gloo pair with global rank " + std::to_string(1 - r) + " did not prove the run's secret";
        found_by_itself += hit.err(r).find(own) != std::string::npos;
    }
    EXPECT_GE(found_by_itself, 1) << hit.describe_all();
    EXPECT_TRUE(hit.nothing_left());
}

// An address Gloo cannot listen on is an error naming it (Gloo itself dereferenced the failed
// lookup: a segfault): a name that resolves nowhere, an interface the host does not have.
TEST(CommRun, AnAddressThatDoesNotResolveIsNamed) {
    WorkerRun name(2, {"--dp", "2", "--timeout", "5", "--listen-host", "ptd-no-such-host.invalid"});
    ASSERT_TRUE(name.wait(30)) << name.describe_all();
    WorkerRun iface(2, {"--dp", "2", "--timeout", "5"}, {"GLOO_SOCKET_IFNAME=ptdnoif0"});
    ASSERT_TRUE(iface.wait(30)) << iface.describe_all();
    // Rank 0 names it; rank 1 too, or, when rank 0 (the store's owner) was gone before it
    // connected, says that the store cannot be reached (within its --timeout).
    for (int r = 0; r < 2; ++r) {
        EXPECT_TRUE(WIFEXITED(name.status(r)) && WEXITSTATUS(name.status(r)) != 0) << name.describe(r);
        EXPECT_TRUE(WIFEXITED(iface.status(r)) && WEXITSTATUS(iface.status(r)) != 0) << iface.describe(r);
    }
    EXPECT_NE(name.err(0).find("address \"ptd-no-such-host.invalid\" (the address asked for) does not resolve"),
              std::string::npos) << name.describe(0);
    EXPECT_NE(iface.err(0).find("GLOO_SOCKET_IFNAME: interface \"ptdnoif0\" does not exist"), std::string::npos)
        << iface.describe(0);
    EXPECT_TRUE(name.nothing_left());
    EXPECT_TRUE(iface.nothing_left());
}

TEST(CommRun, KilledRankIsNamedByEveryOther) {
    WorkerRun run(4, {"--tp", "2", "--pp", "2", "--mode", "die", "--victim", "3", "--after", "1", "--timeout", "30"});
    ASSERT_TRUE(run.wait(30)) << run.describe_all();
    EXPECT_TRUE(WIFSIGNALED(run.status(3)) && WTERMSIG(run.status(3)) == SIGKILL) << run.describe(3);
    expect_others_abort(run, 3, 5, {"rank 3 (pid", "died"});
    EXPECT_TRUE(run.nothing_left());
}

TEST(CommRun, KilledStoreOwnerIsNamedByEveryOther) {
    WorkerRun run(4, {"--dp", "4", "--mode", "die", "--victim", "0", "--how", "exit", "--after", "1", "--timeout", "30"});
    ASSERT_TRUE(run.wait(30)) << run.describe_all();
    EXPECT_TRUE(WIFEXITED(run.status(0)) && WEXITSTATUS(run.status(0)) == 9) << run.describe(0);
    expect_others_abort(run, 0, 5, {"rank 0 (store at 127.0.0.1:", "died: connection lost"});
    EXPECT_TRUE(run.nothing_left());
}

TEST(CommRun, StalledRankIsNamedByEveryOther) {
    WorkerRun run(4, {"--tp", "2", "--dp", "2", "--mode", "stall", "--victim", "2", "--after", "1", "--stall-timeout", "3",
                "--timeout", "30"});
    bool others_done = run.wait(30, /*except=*/2);
    EXPECT_GE(run.stopped_at(2), 0) << run.describe_all();
    run.kill_rank(2);
    ASSERT_TRUE(others_done) << run.describe_all();
    expect_others_abort(run, 2, 3 + 5, {"rank 2 (pid", "stalled: no heartbeat for"});
    // Not before the stall timeout: a heartbeat gap shorter than it is no stall.
    for (int r : {0, 1, 3}) EXPECT_GE(run.exited_at(r) - run.stopped_at(2), 2.5) << run.describe(r);
    EXPECT_TRUE(run.nothing_left());
}

// The store's host stopped (SIGSTOP), as a cut network looks from the other side: the
// connections stay open and nothing comes back. Every other rank, blocked in a collective
// with it, stops itself once its store lease has run out, naming the store and how long it
// was silent, and exits 1.
TEST(CommRun, RanksThatLoseTheStoreStopWithinTheirLease) {
    WorkerRun run(3, {"--dp", "3", "--mode", "stall", "--victim", "0", "--after", "1", "--stall-timeout", "60",
                      "--store-lease", "2", "--timeout", "60"});
    bool others_done = run.wait(30, /*except=*/0);
    EXPECT_GE(run.stopped_at(0), 0) << run.describe_all();
    run.kill_rank(0);
    ASSERT_TRUE(others_done) << run.describe_all();
    for (int r : {1, 2}) {
        EXPECT_TRUE(WIFEXITED(run.status(r)) && WEXITSTATUS(run.status(r)) == 1) << run.describe(r);
        const std::string line = "ptd-engine: rank " + std::to_string(r) + ": error: aborting: lost the run's store at 127.0.0.1:" +
                                 std::to_string(run.port()) + " (rank 0 stalled, or this host cut off from it): no reply to heartbeats for ";
        EXPECT_NE(run.err(r).find(line), std::string::npos) << run.describe(r);
        EXPECT_NE(run.err(r).find(" s, past the store lease of 2.0 s; stopping without writing to the run directory"),
                  std::string::npos)
            << run.describe(r);
        // Not before the lease, and well before the 60 s stall timeout or the 60 s collective timeout.
        const double lived = run.exited_at(r) - run.stopped_at(0);
        EXPECT_GE(lived, 1.5) << run.describe(r);
        EXPECT_LT(lived, 2 + 15) << run.describe(r);
    }
    EXPECT_TRUE(run.nothing_left());
}

TEST(CommRun, ReportedErrorIsNamedByEveryOther) {
    WorkerRun run(4, {"--pp", "2", "--dp", "2", "--mode", "error", "--victim", "1", "--after", "1", "--timeout", "30"});
    ASSERT_TRUE(run.wait(30)) << run.describe_all();
    EXPECT_TRUE(WIFEXITED(run.status(1)) && WEXITSTATUS(run.status(1)) == 1) << run.describe(1);
    EXPECT_NE(run.err(1).find("ptd-engine: rank 1: error: bad data"), std::string::npos) << run.describe(1);
    expect_others_abort(run, 1, 5, {"rank 1 (pid", "failed: bad data"});
    EXPECT_TRUE(run.nothing_left());
}

// When Gloo notices first, the communicator's failure handler takes the monitor's reason.
TEST(CommRun, FailedCollectiveNamesTheDeadPeer) {
    WorkerRun run(4, {"--tp", "2", "--pp", "2", "--mode", "die", "--victim", "3", "--after", "0.5", "--on-abort",
                      "record", "--timeout", "30"});
    ASSERT_TRUE(run.wait(30)) << run.describe_all();
    expect_others_abort(run, 3, 5, {"error: peer rank 3 (pid", "died: connection closed without goodbye (during world all_reduce_sum (global ranks 0, 1, 2, 3))"});
    EXPECT_TRUE(run.nothing_left());
}

// Without the monitor nobody names the dead rank; Gloo's error must still say which
// group, operation and ranks were involved.
TEST(CommRun, GlooErrorWithoutMonitorNamesGroupOperationAndRanks) {
    WorkerRun run(2, {"--dp", "2", "--mode", "die", "--victim", "1", "--after", "0.5", "--no-monitor", "1",
                      "--timeout", "30"});
    ASSERT_TRUE(run.wait(30)) << run.describe_all();
    // The handler waits 3 s for an abort reason that never comes.
    expect_others_abort(run, 1, 3 + 4, {"world all_reduce_sum (global ranks 0, 1) failed", "no rank was reported failed"});
    EXPECT_TRUE(run.nothing_left());
}

// ---- the NCCL-shaped point-to-point contract (comm.h) -----------------------------------

// Every operation, typed collectives and grouped FIFO point-to-point included, with the
// strict checks on: the worker's own traffic keeps the contract.
TEST(CommRun, World8StrictFifo) { check_run(2, 2, 2, {"PTD_COMM_STRICT_FIFO=1"}); }

// Without strict mode, FIFO matching takes two sends posted in the wrong order for each
// other: same dtype and size, so the data lands silently in the wrong buffers. This is
// what strict mode exists to catch.
TEST(CommRun, MisorderedSendsSwapSilentlyWithoutStrictMode) {
    WorkerRun run(2, {"--dp", "2", "--mode", "misorder", "--timeout", "20"});
    ASSERT_TRUE(run.wait(30)) << run.describe_all();
    for (int r = 0; r < 2; ++r) EXPECT_TRUE(WIFEXITED(run.status(r)) && WEXITSTATUS(run.status(r)) == 0) << run.describe(r);
    EXPECT_EQ(run.out(1), "A holds 2, B holds 1\n") << run.describe(1);
}

// Strict mode: the receiver sees that message #0 from rank 0 is not the one it expected,
// and the run stops with both ranks, the sequence number and both descriptors named.
TEST(CommRun, StrictFifoCatchesSendsPostedInTheWrongOrder) {
    WorkerRun run(2, {"--dp", "2", "--mode", "misorder", "--timeout", "20"}, {"PTD_COMM_STRICT_FIFO=1"});
    ASSERT_TRUE(run.wait(30)) << run.describe_all();
    EXPECT_TRUE(WIFEXITED(run.status(1)) && WEXITSTATUS(run.status(1)) == 1) << run.describe(1);
    const std::string e = run.err(1);
    for (const char* want : {"ptd-engine: rank 1: error: strict FIFO check failed in the world group (global ranks 0, 1)",
                             "rank 1 (group rank 1) expected message #0 from rank 0 (group rank 0) to be {f32 × 64, check 1}",
                             "but rank 0 posted message #0 as {f32 × 64, check 2}"})
        EXPECT_NE(e.find(want), std::string::npos) << "wanted \"" << want << "\"\n" << run.describe(1);
    EXPECT_EQ(run.out(1), "") << "the mismatched data must not be used";
    // The sender is stopped through the store, naming the rank that found the mismatch.
    expect_others_abort(run, 1, 5, {"rank 1 (pid", "strict FIFO check failed"});
    EXPECT_TRUE(run.nothing_left());
}

TEST(CommRun, StrictFifoCatchesAWrongCount) {
    WorkerRun run(2, {"--dp", "2", "--mode", "miscount", "--timeout", "20"}, {"PTD_COMM_STRICT_FIFO=1"});
    ASSERT_TRUE(run.wait(30)) << run.describe_all();
    EXPECT_TRUE(WIFEXITED(run.status(1)) && WEXITSTATUS(run.status(1)) == 1) << run.describe(1);
    const std::string e = run.err(1);
    EXPECT_NE(e.find("expected message #0 from rank 0 (group rank 0) to be {f32 × 64, check 1}, but rank 0 posted "
                     "message #0 as {f32 × 65, check 1}"),
              std::string::npos)
        << run.describe(1);
    EXPECT_TRUE(run.nothing_left());
}

// One rank, so that no peer's exit races the check (the value is read before any group).
TEST(CommRun, BadStrictFifoValueNamesTheVariable) {
    WorkerRun run(1, {"--timeout", "20"}, {"PTD_COMM_STRICT_FIFO=yes"});
    ASSERT_TRUE(run.wait(30)) << run.describe_all();
    for (int r = 0; r < 1; ++r) {
        EXPECT_TRUE(WIFEXITED(run.status(r)) && WEXITSTATUS(run.status(r)) != 0) << run.describe(r);
        EXPECT_NE(run.err(r).find("PTD_COMM_STRICT_FIFO: got \"yes\"; allowed: 1"), std::string::npos) << run.describe(r);
    }
}

// The Gloo and NCCL communicators name a failed group by its global ranks through one
// join_ranks (comm.h): small groups in full, a large one shortened to its ends.
TEST(CommGroupText, JoinRanksShortensLargeGroups) {
    EXPECT_EQ(join_ranks({}), "");
    EXPECT_EQ(join_ranks({5}), "5");
    EXPECT_EQ(join_ranks({0, 8, 16, 24, 32, 40, 48, 56}), "0, 8, 16, 24, 32, 40, 48, 56");
    std::vector<int> big(1024);
    for (int i = 0; i < 1024; ++i) big[(size_t)i] = i;
    EXPECT_EQ(join_ranks(big), "0, 1, 2, 3, …, 1023 (1024 ranks)");
    EXPECT_EQ(join_ranks({0, 1, 2, 3, 4, 5, 6, 7, 9}), "0, 1, 2, 3, …, 9 (9 ranks)");
}
