// test_nccl_comm.cpp — the parts of the NCCL communicator that need no GPU: the unique-id
// exchange through a real KV store across real processes (with the real ncclGetUniqueId
// when this build has NCCL: it works without a GPU), its failures, the group order, and
// the watchdog's policy (abort every communicator, report once) driven by a fake NCCL
// and by the store's real liveness monitor declaring a forked peer dead. The collectives
// themselves are in test_nccl_comm_gpu (label gpu).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm_watchdog.h"
#include "free_port.h"
#include "nccl_id.h"
#include "ptd/engine/kv_store.h"
#include "ptd/layout/layout.h"
#ifdef PTD_HAVE_NCCL
#include "nccl_comm.h"
#endif

using namespace ptd;
using namespace ptd::engine;

namespace {

// The id creator of this build: NCCL's own where we have it, else random bytes (the
// exchange does not look inside the id).
Result<NcclUniqueIdBytes> new_id() {
#ifdef PTD_HAVE_NCCL
    return nccl_new_unique_id();
#else
    static std::mt19937_64 rng(std::random_device{}());
    NcclUniqueIdBytes id;
    for (auto& b : id) b = (uint8_t)rng();
    return id;
#endif
}

std::string hex(const NcclUniqueIdBytes& id) {
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (uint8_t b : id) {
        s += digits[b >> 4];
        s += digits[b & 15];
    }
    return s;
}

RankLayout layout_of(int tp, int pp, int dp) {
    auto l = make_layout({tp, 1, dp, pp, 1, tp * pp * dp, "tp-cp-ep-dp-pp"});
    EXPECT_TRUE(l) << l.error().str();
    return *l;
}

struct Server {
    std::unique_ptr<KvServer> server;
    std::unique_ptr<KvClient> client;
};
Server start_store(int world, int port = 0) {
    Server s;
    KvServerOptions o;
    o.bind_addr = "127.0.0.1";
    o.port = port;
    o.world_size = world;
    o.stall_timeout_s = 60;
    auto server = KvServer::start(o);
    EXPECT_TRUE(server) << server.error().str();
    s.server = std::move(*server);
    auto c = KvClient::connect("127.0.0.1", s.server->port(), 30);
    EXPECT_TRUE(c) << c.error().str();
    s.client = std::move(*c);
    return s;
}

}  // namespace

TEST(NcclGroupKeys, OrderAndNumberingFollowTheGlooGroups) {
    // tp 2 · pp 2 · dp 2 (order tp-cp-ep-dp-pp): rank 5 = tp 1, dp 0, pp 1.
    const RankLayout l = layout_of(2, 2, 2);
    const auto keys = nccl_group_keys(l, 5, "run-x");
    ASSERT_EQ(keys.size(), 5u);
    const char* names[] = {"world", "tp", "pp", "dp", "embedding"};
    for (size_t i = 0; i < keys.size(); ++i) {
        EXPECT_EQ(keys[i].group, names[i]);
        EXPECT_EQ(keys[i].run_id, "run-x");
        EXPECT_EQ(keys[i].members[keys[i].group_rank], 5) << keys[i].group;
    }
    EXPECT_EQ(keys[0].members.size(), 8u);
    for (int d = 1; d <= 3; ++d) {
        const Dim dim = d == 1 ? DIM_TP : d == 2 ? DIM_PP : DIM_DP;
        const int g = l.groups[dim].group_of[5];
        EXPECT_EQ(keys[(size_t)d].index, g);
        EXPECT_EQ(keys[(size_t)d].members, std::vector<int>(l.groups[dim].begin(g), l.groups[dim].end(g)));
    }
    EXPECT_EQ(keys[4].members, (std::vector<int>{keys[2].members.front(), keys[2].members.back()}));
    EXPECT_EQ(nccl_id_key(keys[1]), "run-x/nccl/tp/" + std::to_string(keys[1].index) + "/unique_id");
    // pp == 1: no embedding group.
    EXPECT_EQ(nccl_group_keys(layout_of(2, 1, 2), 0, "r").size(), 4u);
}

TEST(NcclUniqueId, CreatedWithoutAGpu) {
    auto a = new_id(), b = new_id();
    ASSERT_TRUE(a) << a.error().str();
    ASSERT_TRUE(b) << b.error().str();
    EXPECT_NE(*a, *b);
#ifndef PTD_HAVE_NCCL
    std::printf("note: this build has no NCCL; the exchange is tested with random 128-byte ids\n");
#endif
}

// 8 real processes (tp 2 · pp 2 · dp 2), each with its own store client, exchange the ids
// of all their groups. Every member of a group must get the same 128 bytes and distinct
// groups distinct ids.
TEST(NcclUniqueId, EveryMemberOfAGroupGetsTheSameIdAcrossProcesses) {
    constexpr int kWorld = 8;
    const RankLayout layout = layout_of(2, 2, 2);
    const int port = free_port();
    const std::string run_id = "idtest-" + std::to_string(getpid());
    std::vector<pid_t> pids;
    std::vector<int> read_fds;
    // Fork before this process starts any thread (the store's): the children only run
    // their own client.
    for (int r = 0; r < kWorld; ++r) {
        int fds[2];
        ASSERT_EQ(pipe(fds), 0);
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            close(fds[0]);
            auto store = KvClient::connect("127.0.0.1", port, 30);
            if (!store) _exit(10);
            std::string out;
            for (const NcclGroupKey& key : nccl_group_keys(layout, r, run_id)) {
                if (key.members.size() == 1) continue;
                auto id = exchange_nccl_id(**store, key, new_id, 60);
                if (!id) {
                    out += "error " + id.error().one_line() + "\n";
                    continue;
                }
                out += key.group + "/" + std::to_string(key.index) + " " + hex(*id) + "\n";
            }
            [[maybe_unused]] ssize_t w = write(fds[1], out.data(), out.size());
            close(fds[1]);
            _exit(0);
        }
        close(fds[1]);
        pids.push_back(pid);
        read_fds.push_back(fds[0]);
    }
    Server store = start_store(kWorld, port);

    std::map<std::string, std::set<std::string>> ids_of_group;  // "tp/1" → the ids its members got
    std::map<std::string, int> members_reporting;
    for (int r = 0; r < kWorld; ++r) {
        std::string text;
        char buf[4096];
        ssize_t n;
        while ((n = read(read_fds[(size_t)r], buf, sizeof buf)) > 0) text.append(buf, (size_t)n);
        close(read_fds[(size_t)r]);
        int status = 0;
        waitpid(pids[(size_t)r], &status, 0);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r << " status " << status;
        for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
            const std::string line = text.substr(at, nl - at);
            ASSERT_NE(line.rfind("error", 0), 0u) << "rank " << r << ": " << line;
            const size_t sp = line.find(' ');
            ids_of_group[line.substr(0, sp)].insert(line.substr(sp + 1));
            ++members_reporting[line.substr(0, sp)];
        }
    }
    // world 1 + tp 4 + pp 4 + dp 4 + embedding 4 groups (pp 2: both stages are the ends).
    EXPECT_EQ(ids_of_group.size(), 17u);
    std::set<std::string> distinct;
    for (const auto& [group, ids] : ids_of_group) {
        EXPECT_EQ(ids.size(), 1u) << group << ": members got different ids";
        EXPECT_EQ(ids.begin()->size(), 2 * kNcclUniqueIdBytes) << group;
        distinct.insert(*ids.begin());
    }
    EXPECT_EQ(members_reporting["world/0"], kWorld);
    EXPECT_EQ(distinct.size(), ids_of_group.size()) << "two groups share an id";
}

TEST(NcclUniqueId, MissingIdTimesOutNamingGroupKeyAndCreator) {
    Server s = start_store(2);
    NcclGroupKey key{"run-m", "tp", 2, {4, 5}, 1};
    auto id = exchange_nccl_id(*s.client, key, new_id, 0.3);
    ASSERT_FALSE(id);
    const std::string m = id.error().one_line();
    EXPECT_NE(m.find("no NCCL unique id for the tp group 2 (global ranks 4, 5) from its group rank 0 (global rank 4)"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("\"run-m/nccl/tp/2/unique_id\""), std::string::npos) << m;
    EXPECT_NE(m.find("did global rank 4 start"), std::string::npos) << m;
}

TEST(NcclUniqueId, WrongSizedValueIsRejected) {
    Server s = start_store(2);
    NcclGroupKey key{"run-w", "dp", 0, {0, 1}, 1};
    s.client->set(nccl_id_key(key), std::vector<uint8_t>(5, 7));
    auto id = exchange_nccl_id(*s.client, key, new_id, 5);
    ASSERT_FALSE(id);
    EXPECT_NE(id.error().one_line().find("holds 5 bytes; allowed: exactly 128"), std::string::npos) << id.error().one_line();
}

TEST(NcclUniqueId, CreatorFailureIsReportedAndNothingIsPublished) {
    Server s = start_store(2);
    NcclGroupKey key{"run-c", "world", 0, {0, 1}, 0};
    auto id = exchange_nccl_id(*s.client, key,
                               []() -> Result<NcclUniqueIdBytes> { return fail({}, "", "ncclGetUniqueId: unhandled system error"); },
                               5);
    ASSERT_FALSE(id);
    EXPECT_NE(id.error().one_line().find("cannot create the NCCL unique id of the world group 0 (global ranks 0, 1): "
                                         "ncclGetUniqueId: unhandled system error"),
              std::string::npos)
        << id.error().one_line();
    EXPECT_FALSE(s.client->check({nccl_id_key(key)}));
}

// ---- the watchdog ------------------------------------------------------------------------

namespace {

// Fake communicators: an async error to return and a count of aborts.
struct FakeComms {
    std::mutex mu;
    std::map<std::string, std::string> error;  // name → async error ("" = healthy)
    std::map<std::string, int> aborts;
    std::vector<std::string> events;           // "abort tp", "report …", in order
    WatchedComm comm(const std::string& name) {
        WatchedComm w;
        w.owner = this;
        w.name = name;
        w.async_error = [this, name] {
            std::lock_guard lock(mu);
            return error[name];
        };
        w.abort = [this, name] {
            std::lock_guard lock(mu);
            ++aborts[name];
            events.push_back("abort " + name);
        };
        return w;
    }
};

// A failure handler that records instead of exiting, and lets a test wait for it.
struct Reports {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::string> messages;
    FailureHandler handler(FakeComms* comms) {
        return [this, comms](const std::string& what) {
            if (comms) {
                std::lock_guard lock(comms->mu);
                comms->events.push_back("report");
            }
            std::lock_guard lock(mu);
            messages.push_back(what);
            cv.notify_all();
        };
    }
    bool wait_for_one(double seconds) {
        std::unique_lock lock(mu);
        return cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return !messages.empty(); });
    }
};

}  // namespace

TEST(CommWatchdog, AsyncErrorAbortsEveryCommunicatorThenReportsOnce) {
    FakeComms comms;
    Reports reports;
    // A long poll interval: the test drives poll_once itself.
    CommWatchdog wd([] { return std::string(); }, reports.handler(&comms), 3600);
    wd.watch(comms.comm("tp group 0 (global ranks 0, 1)"));
    wd.watch(comms.comm("dp group 1 (global ranks 1, 3)"));
    EXPECT_FALSE(wd.poll_once());
    EXPECT_TRUE(comms.aborts.empty());
    {
        std::lock_guard lock(comms.mu);
        comms.error["dp group 1 (global ranks 1, 3)"] = "remote process exited or there was a network error";
    }
    EXPECT_TRUE(wd.poll_once());
    EXPECT_TRUE(wd.poll_once());  // already reported: no second report, no second abort
    EXPECT_TRUE(wd.aborted());
    EXPECT_EQ(comms.aborts["tp group 0 (global ranks 0, 1)"], 1);  // the healthy one too
    EXPECT_EQ(comms.aborts["dp group 1 (global ranks 1, 3)"], 1);
    ASSERT_EQ(reports.messages.size(), 1u);
    EXPECT_EQ(reports.messages[0], "dp group 1 (global ranks 1, 3) asynchronous NCCL operation: remote process exited or "
                                   "there was a network error (every NCCL communicator aborted)");
    EXPECT_EQ(comms.events.back(), "report");  // aborted before reporting (the report exits)
}

TEST(CommWatchdog, AbortAllIsIdempotentAndUnwatchedCommsAreLeftAlone) {
    FakeComms a, b;
    Reports reports;
    CommWatchdog wd([] { return std::string(); }, reports.handler(nullptr), 3600);
    wd.watch(a.comm("tp"));
    wd.watch(b.comm("pp"));
    EXPECT_EQ(wd.unwatch(&b), 1u);
    EXPECT_TRUE(wd.abort_all("monitor said so"));
    EXPECT_FALSE(wd.abort_all("again"));
    EXPECT_EQ(a.aborts["tp"], 1);
    EXPECT_TRUE(b.aborts.empty());
    EXPECT_TRUE(reports.messages.empty());  // abort_all alone reports nothing: its caller does
}

// The hang with every process alive: an operation whose completion event never fires (a
// member that skipped the collective). Past the deadline the watchdog aborts every
// communicator and reports the rank, the group and the operation; before it, nothing.
TEST(CommWatchdog, AnOperationPendingPastTheDeadlineIsReportedWithRankGroupAndOp) {
    FakeComms comms;
    Reports reports;
    WatchdogLimits limits;
    limits.collective_timeout_s = 300;
    limits.rank = 5;
    CommWatchdog wd([] { return std::string(); }, reports.handler(&comms), 3600, limits);
    double age = 12;
    WatchedComm tp = comms.comm("tp group 2 (global ranks 4, 5)");
    tp.oldest_pending = [&age] { return std::optional<PendingOp>(PendingOp{"all_reduce #17", age}); };
    WatchedComm dp = comms.comm("dp group 1 (global ranks 1, 5)");
    dp.oldest_pending = [] { return std::optional<PendingOp>(); };  // nothing in flight
    wd.watch(tp);
    wd.watch(dp);
    EXPECT_FALSE(wd.poll_once());
    age = 301;
    EXPECT_TRUE(wd.poll_once());
    EXPECT_EQ(comms.aborts["tp group 2 (global ranks 4, 5)"], 1);
    EXPECT_EQ(comms.aborts["dp group 1 (global ranks 1, 5)"], 1);
    ASSERT_EQ(reports.messages.size(), 1u);
    EXPECT_EQ(reports.messages[0],
              "rank 5, tp group 2 (global ranks 4, 5): all_reduce #17 not complete after 301 s (deadline 300 s, "
              "--timeout) while every peer is alive: a collective some member never joined or sized differently "
              "(every NCCL communicator aborted)");
}

// ncclCommAbort can itself block on a wedged device: abort_all gives up waiting after its
// deadline, so the report (which _exits) still happens.
TEST(CommWatchdog, AbortThatHangsIsAbandonedAfterItsDeadline) {
    Reports reports;
    WatchdogLimits limits;
    limits.abort_deadline_s = 0.1;
    CommWatchdog wd([] { return std::string(); }, reports.handler(nullptr), 3600, limits);
    WatchedComm w;
    w.owner = &reports;
    w.name = "pp group 0 (global ranks 0, 1)";
    w.abort = [] { std::this_thread::sleep_for(std::chrono::milliseconds(1500)); };
    wd.watch(w);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(wd.abort_all("a peer died"));
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(waited, 1.0) << "abort_all waited for the hanging abort";
    EXPECT_GE(waited, 0.09);
}

// The store's liveness monitor declares a forked peer dead (it exits without goodbye);
// the watchdog thread — not a test-driven poll — aborts every communicator and reports
// the peer, so no rank would stay in a collective.
TEST(CommWatchdog, PeerDeclaredDeadByTheStoreAbortsEveryCommunicator) {
    const int port = free_port();
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        auto store = KvClient::connect("127.0.0.1", port, 30);
        if (!store) _exit(10);
        if (!(*store)->start_monitor(1, 0.1, [](const std::string&) {})) _exit(11);
        (*store)->set("child-ready", {1});
        // Wait until told, then die without goodbye (as a crashed rank does).
        auto go = (*store)->get("child-die", 60);
        _exit(go ? 0 : 12);
    }
    Server s = start_store(2, port);
    ASSERT_TRUE(s.client->start_monitor(0, 0.1, [](const std::string&) {}));  // records the reason only
    FakeComms comms;
    Reports reports;
    CommWatchdog wd([&] { return s.client->abort_reason(0); }, reports.handler(&comms), 0.05);
    wd.watch(comms.comm("world group 0 (global ranks 0, 1)"));
    wd.watch(comms.comm("tp group 0 (global ranks 0, 1)"));
    ASSERT_TRUE(s.client->get("child-ready", 60));
    s.client->set("child-die", {1});
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    ASSERT_TRUE(reports.wait_for_one(60)) << "the watchdog never reported the dead peer";
    EXPECT_NE(reports.messages[0].find("the NCCL watchdog's abort of every communicator: peer rank 1 (pid " +
                                       std::to_string(child)),
              std::string::npos)
        << reports.messages[0];
    EXPECT_NE(reports.messages[0].find("died"), std::string::npos) << reports.messages[0];
    std::lock_guard lock(comms.mu);
    EXPECT_EQ(comms.aborts["world group 0 (global ranks 0, 1)"], 1);
    EXPECT_EQ(comms.aborts["tp group 0 (global ranks 0, 1)"], 1);
    EXPECT_EQ(comms.events.back(), "report");
}
