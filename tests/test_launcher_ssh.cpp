// test_launcher_ssh.cpp — the SSH transport against a real OpenSSH server on 127.0.0.1
// (tests/sshd_fixture.h): host keys (known, unknown, accepted, changed), auth failures,
// output and exit codes, argument quoting, killing process groups, a lost host, upload,
// download, a host without SFTP and the remote free-port query. Skipped when sshd is not
// installed.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "../launcher/src/transport.h"
#include "ptd/launch.h"
#include "ptd/common/sha256.h"
#include "sshd_fixture.h"

using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

// What a transport reported, in order, with waits bounded by a timeout.
struct RecordingSink : ptd::TransportSink {
    struct Event {
        enum Kind { line, exited, lost, pid } kind;
        int rank = -1;
        bool is_stderr = false;
        std::string text;
        int code = 0;
    };
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Event> events;

    void line(int rank, bool is_stderr, std::string text) override {
        push({Event::line, rank, is_stderr, std::move(text), 0});
    }
    void rank_exited(int rank, int exit_code) override { push({Event::exited, rank, false, "", exit_code}); }
    void host_lost(int host, std::string why) override { push({Event::lost, host, false, std::move(why), 0}); }
    void rank_pid(int rank, long pid) override { push({Event::pid, rank, false, std::to_string(pid), 0}); }

    void push(Event e) {
        std::lock_guard lock(mu);
        events.push_back(std::move(e));
        cv.notify_all();
    }
    bool wait_for(const std::function<bool(const std::vector<Event>&)>& done, double seconds) {
        std::unique_lock lock(mu);
        return cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done(events); });
    }
    bool wait_exits(int n, double seconds) {
        return wait_for([n](const auto& ev) {
            int k = 0;
            for (const auto& e : ev) k += e.kind == Event::exited;
            return k >= n;
        }, seconds);
    }
    std::vector<Event> snapshot() {
        std::lock_guard lock(mu);
        return events;
    }
    std::vector<std::string> lines_of(int rank, bool is_stderr) {
        std::vector<std::string> out;
        for (const auto& e : snapshot())
            if (e.kind == Event::line && e.rank == rank && e.is_stderr == is_stderr) out.push_back(e.text);
        return out;
    }
    std::map<int, std::vector<int>> exit_codes() {
        std::map<int, std::vector<int>> out;
        for (const auto& e : snapshot())
            if (e.kind == Event::exited) out[e.rank].push_back(e.code);
        return out;
    }
};

ptd::LaunchPlan make_plan(const SshdFixture& sshd) {
    ptd::LaunchPlan plan;
    plan.local = false;
    plan.job.launch.mode = ptd::LaunchMode::ssh;
    plan.job.launch.identity = sshd.identity;
    plan.job.launch.connect_timeout_s = 5;
    plan.known_hosts = sshd.known_hosts;
    plan.ssh_config = sshd.ssh_config;
    ptd::HostPlan host;
    host.entry.host = "127.0.0.1";
    host.entry.port = sshd.port;
    host.entry.user = sshd.user;
    host.display = sshd.user + "@127.0.0.1:" + std::to_string(sshd.port);
    host.engine = "ptd-engine";
    plan.hosts.push_back(host);
    return plan;
}

// The remote command line the launcher builds: report the pid (= process group), then
// exec the program with every argument quoted.
std::string rank_command(const std::vector<std::string>& argv) {
    std::string cmd = "printf 'ptd-launch-pid %d\\n' \"$$\" >&2; exec";
    for (const auto& a : argv) cmd += " " + ptd::shell_quote(a);
    return cmd;
}

ptd::RankPlan rank_plan(int rank, const std::vector<std::string>& argv) {
    ptd::RankPlan r;
    r.rank = rank;
    r.local_rank = rank;
    r.argv = argv;
    r.shell_command = rank_command(argv);
    return r;
}

// join() with a bound: on timeout the test fails and the server is killed so that the
// I/O thread (which must then notice the lost host) can end.
bool join_within(ptd::HostTransport& t, SshdFixture& sshd, double seconds) {
    auto done = std::async(std::launch::async, [&] { t.join(); });
    if (done.wait_for(std::chrono::duration<double>(seconds)) == std::future_status::ready) return true;
    ADD_FAILURE() << "join() did not return within " << seconds << " s";
    sshd.kill_all();
    done.wait();
    return false;
}

class SshTransportTest : public ::testing::Test {
protected:
    void SetUp() override {
        unsetenv("SSH_AUTH_SOCK");  // the developer's agent must not log us in
        if (std::string why = sshd.start(); !why.empty()) GTEST_SKIP() << why;
    }
    std::unique_ptr<ptd::HostTransport> connected(const ptd::LaunchPlan& plan) {
        auto t = ptd::make_ssh_transport(plan, 0);
        auto r = t->connect();
        EXPECT_TRUE(r.has_value()) << (r ? "" : r.error().str());
        return r ? std::move(t) : nullptr;
    }
    SshdFixture sshd;
};

TEST_F(SshTransportTest, ConnectsWhenHostKeyIsKnown) {
    sshd.trust_host_key();
    auto plan = make_plan(sshd);
    auto t = ptd::make_ssh_transport(plan, 0);
    auto start = Clock::now();
    auto r = t->connect();
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    ASSERT_TRUE(r.has_value()) << r.error().str();
    std::printf("connect + host key + auth to 127.0.0.1: %.1f ms\n", ms);
    RecordProperty("connect_ms", std::to_string(ms));
}

TEST_F(SshTransportTest, SshConfigSuppliesHostNamePortUserAndKey) {
    sshd.trust_host_key();
    SshdFixture::write_file(sshd.ssh_config, "Host fixture-alias\n"
                                             "  HostName 127.0.0.1\n"
                                             "  Port " + std::to_string(sshd.port) + "\n"
                                             "  User " + sshd.user + "\n"
                                             "  IdentityFile " + sshd.identity + "\n");
    auto plan = make_plan(sshd);
    plan.hosts[0].entry = ptd::HostEntry{};
    plan.hosts[0].entry.host = "fixture-alias";  // no user, no port: all from the config
    plan.job.launch.identity.clear();
    auto r = ptd::make_ssh_transport(plan, 0)->connect();
    EXPECT_TRUE(r.has_value()) << r.error().str();

    // An explicit port in the hostfile wins over the config's.
    plan.hosts[0].entry.port = free_port();
    auto wrong = ptd::make_ssh_transport(plan, 0)->connect();
    ASSERT_FALSE(wrong.has_value());
    EXPECT_NE(wrong.error().str().find("cannot connect"), std::string::npos) << wrong.error().str();
}

TEST_F(SshTransportTest, UnknownHostKeyIsRefusedWithoutFlag) {
    auto plan = make_plan(sshd);
    auto r = ptd::make_ssh_transport(plan, 0)->connect();
    ASSERT_FALSE(r.has_value());
    std::string msg = r.error().str();
    EXPECT_NE(msg.find("is not known"), std::string::npos) << msg;
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(sshd.port)), std::string::npos) << msg;
    EXPECT_NE(msg.find("--accept-new-host-keys"), std::string::npos) << msg;
    EXPECT_NE(msg.find(sshd.fingerprint()), std::string::npos) << msg;
    EXPECT_EQ(SshdFixture::read_file(sshd.known_hosts), "");
}

TEST_F(SshTransportTest, AcceptNewHostKeysRecordsTheKey) {
    auto plan = make_plan(sshd);
    plan.accept_new_host_keys = true;
    {
        auto r = ptd::make_ssh_transport(plan, 0)->connect();
        ASSERT_TRUE(r.has_value()) << r.error().str();
    }
    std::string recorded = SshdFixture::read_file(sshd.known_hosts);
    EXPECT_NE(recorded.find("ssh-ed25519"), std::string::npos) << recorded;
    // Now known: the flag is no longer needed.
    plan.accept_new_host_keys = false;
    auto r = ptd::make_ssh_transport(plan, 0)->connect();
    EXPECT_TRUE(r.has_value()) << r.error().str();
}

TEST_F(SshTransportTest, ChangedHostKeyIsRefusedWithBothFingerprints) {
    sshd.trust_host_key(/*wrong_key=*/true);
    auto plan = make_plan(sshd);
    plan.accept_new_host_keys = true;  // never enough for a changed key
    auto r = ptd::make_ssh_transport(plan, 0)->connect();
    ASSERT_FALSE(r.has_value());
    std::string msg = r.error().str();
    std::string known = sshd.fingerprint(true), offered = sshd.fingerprint(false);
    ASSERT_FALSE(known.empty());
    EXPECT_NE(msg.find("CHANGED"), std::string::npos) << msg;
    EXPECT_NE(msg.find("known " + known), std::string::npos) << msg;
    EXPECT_NE(msg.find("offered " + offered), std::string::npos) << msg;
    EXPECT_EQ(SshdFixture::read_file(sshd.known_hosts), sshd.known_hosts_line(true));  // untouched
}

TEST_F(SshTransportTest, WrongIdentityFailsAuthQuickly) {
    sshd.trust_host_key();
    auto plan = make_plan(sshd);
    plan.job.launch.identity = sshd.make_other_identity("not_authorized");
    auto start = Clock::now();
    auto r = ptd::make_ssh_transport(plan, 0)->connect();
    ASSERT_FALSE(r.has_value());
    EXPECT_LT(Clock::now() - start, 5s);
    std::string msg = r.error().str();
    EXPECT_NE(msg.find("auth failed for " + sshd.user + "@127.0.0.1:" + std::to_string(sshd.port)),
              std::string::npos) << msg;
    EXPECT_NE(msg.find("no key accepted"), std::string::npos) << msg;
    EXPECT_NE(msg.find(plan.job.launch.identity), std::string::npos) << msg;
    EXPECT_NE(msg.find("authorized_keys"), std::string::npos) << msg;
}

TEST_F(SshTransportTest, EncryptedIdentityFailsWithoutPrompting) {
    sshd.trust_host_key();
    auto plan = make_plan(sshd);
    // Authorized but encrypted: without an agent it cannot be used, and must not prompt.
    std::string key = sshd.make_other_identity("encrypted", "secret passphrase");
    std::filesystem::copy_file(key + ".pub", sshd.dir + "/authorized_keys",
                               std::filesystem::copy_options::overwrite_existing);
    plan.job.launch.identity = key;
    auto start = Clock::now();
    auto r = ptd::make_ssh_transport(plan, 0)->connect();
    ASSERT_FALSE(r.has_value());
    EXPECT_LT(Clock::now() - start, 5s);
    std::string msg = r.error().str();
    EXPECT_NE(msg.find("auth failed"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ssh-agent"), std::string::npos) << msg;
}

TEST_F(SshTransportTest, RanksStreamLinesAndExitCodes) {
    sshd.trust_host_key();
    auto plan = make_plan(sshd);
    auto t = connected(plan);
    ASSERT_TRUE(t);
    long pid = -1;
    ASSERT_TRUE(t->start_rank(rank_plan(0, {"sh", "-c", "echo out0; echo err0 >&2; echo; printf 'no newline'"}), &pid));
    EXPECT_EQ(pid, 0);
    ASSERT_TRUE(t->start_rank(rank_plan(1, {"sh", "-c", "echo out1; echo err1 >&2; exit 3"}), &pid));
    RecordingSink sink;
    t->run_io(sink);
    ASSERT_TRUE(sink.wait_exits(2, 10)) << "ranks did not exit";
    ASSERT_TRUE(join_within(*t, sshd, 5));

    EXPECT_EQ(sink.lines_of(0, false), (std::vector<std::string>{"out0", "", "no newline"}));
    EXPECT_EQ(sink.lines_of(0, true), (std::vector<std::string>{"err0"}));  // pid line swallowed
    EXPECT_EQ(sink.lines_of(1, false), (std::vector<std::string>{"out1"}));
    EXPECT_EQ(sink.lines_of(1, true), (std::vector<std::string>{"err1"}));
    auto codes = sink.exit_codes();
    EXPECT_EQ(codes[0], (std::vector<int>{0}));
    EXPECT_EQ(codes[1], (std::vector<int>{3}));
    // Every line of a rank comes before its exit.
    std::map<int, bool> exited;
    for (const auto& e : sink.snapshot()) {
        if (e.kind == RecordingSink::Event::exited) exited[e.rank] = true;
        if (e.kind == RecordingSink::Event::line) {
            EXPECT_FALSE(exited[e.rank]) << "line after exit: " << e.text;
        }
    }
}

TEST_F(SshTransportTest, ArgumentsReachTheProgramByteExact) {
    sshd.trust_host_key();
    auto plan = make_plan(sshd);
    auto t = connected(plan);
    ASSERT_TRUE(t);
    std::string pwned = "/tmp/pwned-" + std::to_string(getpid());
    std::filesystem::remove(pwned);
    std::vector<std::string> args = {
        "two words", "a;b", "$(touch " + pwned + ")", "`touch " + pwned + "`", "it's", "say \"hi\"",
        "line1\nline2", "*", "", "--flag=$HOME", "back\\slash", "tab\there", "'", "\"", "-n"};
    std::vector<std::string> argv = {"sh", "-c", "printf '%s\\0' \"$@\"", "sh"};
    argv.insert(argv.end(), args.begin(), args.end());
    ASSERT_TRUE(t->start_rank(rank_plan(0, argv), nullptr));
    RecordingSink sink;
    t->run_io(sink);
    ASSERT_TRUE(sink.wait_exits(1, 10));
    ASSERT_TRUE(join_within(*t, sshd, 5));

    std::string out;
    auto lines = sink.lines_of(0, false);
    for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" : "") + lines[i];
    std::vector<std::string> got;
    for (size_t start = 0, nul; (nul = out.find('\0', start)) != std::string::npos; start = nul + 1)
        got.push_back(out.substr(start, nul - start));
    EXPECT_EQ(got, args);
    EXPECT_FALSE(std::filesystem::exists(pwned)) << "command injection ran";
    EXPECT_EQ(sink.exit_codes()[0], (std::vector<int>{0}));
}

TEST_F(SshTransportTest, LongLinesAreSplitAndBusyRanksDoNotBlockOthers) {
    sshd.trust_host_key();
    auto plan = make_plan(sshd);
    auto t = connected(plan);
    ASSERT_TRUE(t);
    // Rank 0: one 2.5 MB line without newline, then 4 MB of short lines; rank 1: a line.
    ASSERT_TRUE(t->start_rank(rank_plan(0, {"sh", "-c",
        "head -c 2500000 /dev/zero | tr '\\0' a; echo; yes 0123456789abcdef | head -c 4000000"}), nullptr));
    const auto second = t->start_rank(rank_plan(1, {"sh", "-c", "echo hello"}), nullptr);
    ASSERT_TRUE(second) << second.error().str();
    RecordingSink sink;
    t->run_io(sink);
    ASSERT_TRUE(sink.wait_exits(2, 20));
    ASSERT_TRUE(join_within(*t, sshd, 5));
    auto lines = sink.lines_of(0, false);
    ASSERT_GE(lines.size(), 3u);
    EXPECT_EQ(lines[0].size(), size_t(1) << 20);
    EXPECT_EQ(lines[1].size(), size_t(1) << 20);
    EXPECT_EQ(lines[2].size(), 2500000 - 2 * (size_t(1) << 20));
    EXPECT_EQ(lines.size(), 3 + 4000000 / 17 + 1);  // the last short line is cut by head
    EXPECT_EQ(sink.lines_of(1, false), (std::vector<std::string>{"hello"}));
}

// The transport learns the rank's pid (also its process group) from the swallowed stderr
// line and reports it through rank_pid. A signal asked for before that moment is sent as
// soon as the pid arrives, which may be before the rank prints anything, so the group is
// taken from the report, and the rank's own "pgid $$" line is checked only when it ran.
void check_group_killed(SshdFixture& sshd, bool signal_before_pid) {
    auto plan = make_plan(sshd);
    auto t = ptd::make_ssh_transport(plan, 0);
    auto c = t->connect();
    ASSERT_TRUE(c.has_value()) << c.error().str();
    ASSERT_TRUE(t->start_rank(rank_plan(0, {"sh", "-c", "echo pgid $$; sleep 300 & sleep 300"}), nullptr));
    RecordingSink sink;
    t->run_io(sink);
    if (signal_before_pid) t->signal_all(SIGTERM);
    long pgid = 0;
    ASSERT_TRUE(sink.wait_for([&pgid](const auto& ev) {
        for (const auto& e : ev)
            if (e.kind == RecordingSink::Event::pid) return pgid = std::stol(e.text), true;
        return false;
    }, 10)) << "the transport never reported the rank's pid";
    if (!signal_before_pid) {
        ASSERT_TRUE(sink.wait_for([](const auto& ev) {
            for (const auto& e : ev)
                if (e.kind == RecordingSink::Event::line && !e.is_stderr) return true;
            return false;
        }, 10));
        EXPECT_EQ(sink.lines_of(0, false)[0], "pgid " + std::to_string(pgid));
        // Both sleeps are running before the signal.
        auto t0 = Clock::now();
        while (SshdFixture::processes_in_group(pgid).size() < 2 && Clock::now() - t0 < 5s)
            std::this_thread::sleep_for(10ms);
        EXPECT_GE(SshdFixture::processes_in_group(pgid).size(), 2u);
        t->signal_all(SIGTERM);
    }
    ASSERT_TRUE(sink.wait_exits(1, 10)) << "rank survived SIGTERM";
    ASSERT_TRUE(join_within(*t, sshd, 5));
    EXPECT_EQ(sink.exit_codes()[0], (std::vector<int>{128 + SIGTERM}));
    for (const auto& l : sink.lines_of(0, true)) EXPECT_EQ(l.find("ptd-launch-pid"), std::string::npos) << l;
    auto t0 = Clock::now();  // the background sleep may take a moment to die
    while (!SshdFixture::processes_in_group(pgid).empty() && Clock::now() - t0 < 3s)
        std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(SshdFixture::processes_in_group(pgid).empty()) << "a process of group " << pgid << " survived";
}

TEST_F(SshTransportTest, SignalAllKillsTheWholeProcessGroup) {
    sshd.trust_host_key();
    check_group_killed(sshd, false);
}

TEST_F(SshTransportTest, SignalBeforeThePidIsKnownIsDeliveredWhenItArrives) {
    sshd.trust_host_key();
    check_group_killed(sshd, true);
}

TEST_F(SshTransportTest, LostHostIsReportedAndJoinReturns) {
    sshd.trust_host_key();
    auto plan = make_plan(sshd);
    auto t = connected(plan);
    ASSERT_TRUE(t);
    ASSERT_TRUE(t->start_rank(rank_plan(0, {"sh", "-c", "echo up; sleep 300"}), nullptr));
    ASSERT_TRUE(t->start_rank(rank_plan(1, {"sleep", "300"}), nullptr));
    RecordingSink sink;
    t->run_io(sink);
    ASSERT_TRUE(sink.wait_for([](const auto& ev) { return !ev.empty(); }, 10));
    auto start = Clock::now();
    sshd.kill_all();
    ASSERT_TRUE(sink.wait_exits(2, 10)) << "no rank_exited after the host died";
    EXPECT_LT(Clock::now() - start, 5s);
    ASSERT_TRUE(join_within(*t, sshd, 5));
    auto ev = sink.snapshot();
    int lost = 0;
    for (const auto& e : ev) {
        if (e.kind == RecordingSink::Event::lost) {
            ++lost;
            EXPECT_EQ(e.rank, 0);  // host index
            EXPECT_NE(e.text.find("127.0.0.1:" + std::to_string(sshd.port)), std::string::npos) << e.text;
        }
    }
    EXPECT_EQ(lost, 1);
    auto codes = sink.exit_codes();
    EXPECT_EQ(codes[0], (std::vector<int>{-1}));
    EXPECT_EQ(codes[1], (std::vector<int>{-1}));
    // host_lost comes before the ranks' -1 exits.
    ASSERT_FALSE(ev.empty());
    size_t lost_at = 0;
    for (size_t i = 0; i < ev.size(); ++i)
        if (ev[i].kind == RecordingSink::Event::lost) lost_at = i;
    for (size_t i = 0; i < lost_at; ++i) EXPECT_NE(ev[i].kind, RecordingSink::Event::exited);
}

TEST_F(SshTransportTest, SilentHostIsLostByKeepalive) {
    sshd.trust_host_key();
    setenv("PTD_SSH_KEEPALIVE_S", "0.5", 1);  // lost after 1.5 s of silence
    auto plan = make_plan(sshd);
    auto t = connected(plan);
    unsetenv("PTD_SSH_KEEPALIVE_S");
    ASSERT_TRUE(t);
    ASSERT_TRUE(t->start_rank(rank_plan(0, {"sh", "-c", "echo up; sleep 300"}), nullptr));
    RecordingSink sink;
    t->run_io(sink);
    ASSERT_TRUE(sink.wait_for([](const auto& ev) { return !ev.empty(); }, 10));
    // Frozen, not dead: the kernel still ACKs, only keepalive answers stop.
    for (pid_t p : SshdFixture::descendants(sshd.pid)) kill(p, SIGSTOP);
    auto start = Clock::now();
    ASSERT_TRUE(sink.wait_exits(1, 10)) << "a silent host was not noticed";
    EXPECT_LT(Clock::now() - start, 5s);
    ASSERT_TRUE(join_within(*t, sshd, 5));
    std::string why;
    for (const auto& e : sink.snapshot())
        if (e.kind == RecordingSink::Event::lost) why = e.text;
    EXPECT_NE(why.find("keepalive"), std::string::npos) << why;
    EXPECT_EQ(sink.exit_codes()[0], (std::vector<int>{-1}));
}

TEST_F(SshTransportTest, DestroyingTheTransportKillsRanksLeftRunning) {
    sshd.trust_host_key();
    auto plan = make_plan(sshd);
    std::string marker = sshd.dir + "/pgid";
    {
        auto t = connected(plan);
        ASSERT_TRUE(t);
        ASSERT_TRUE(t->start_rank(rank_plan(0, {"sh", "-c", "echo $$ > " + marker + "; sleep 300 & sleep 300"}), nullptr));
        auto t0 = Clock::now();
        while (SshdFixture::read_file(marker).empty() && Clock::now() - t0 < 5s) std::this_thread::sleep_for(10ms);
        std::this_thread::sleep_for(100ms);  // the pid line is on its way
        // No run_io, no signal_all: the transport is dropped with the rank running.
    }
    std::string text = SshdFixture::read_file(marker);
    ASSERT_FALSE(text.empty());
    long pgid = std::stol(text);
    auto t0 = Clock::now();
    while (!SshdFixture::processes_in_group(pgid).empty() && Clock::now() - t0 < 3s)
        std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(SshdFixture::processes_in_group(pgid).empty()) << "rank outlived its transport";
}

TEST_F(SshTransportTest, UploadChecksTheHash) {
    sshd.trust_host_key();
    auto plan = make_plan(sshd);
    auto t = connected(plan);
    ASSERT_TRUE(t);
    std::string local = sshd.dir + "/engine-local";
    std::string data(700 * 1024 + 123, '\0');
    std::mt19937 rng(7);
    for (char& ch : data) ch = (char)(rng() & 0xff);
    SshdFixture::write_file(local, data);
    std::string sha = ptd::sha256_hex(data);

    std::string remote = sshd.dir + "/remote dir/a/b/ptd-engine";
    auto up_start = Clock::now();
    auto r = t->upload(local, remote, sha);
    std::printf("upload of %zu bytes: %.1f ms\n", data.size(),
                std::chrono::duration<double, std::milli>(Clock::now() - up_start).count());
    ASSERT_TRUE(r.has_value()) << r.error().str();
    EXPECT_EQ(SshdFixture::read_file(remote), data);
    struct stat st{};
    ASSERT_EQ(stat(remote.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0755u);

    // Uploading again over the existing file works too.
    ASSERT_TRUE(t->upload(local, remote, sha).has_value());

    std::string wrong(64, '0');
    auto bad = t->upload(local, remote, wrong);
    ASSERT_FALSE(bad.has_value());
    std::string msg = bad.error().str();
    EXPECT_NE(msg.find(wrong), std::string::npos) << msg;
    EXPECT_NE(msg.find(sha), std::string::npos) << msg;

    // Relative paths (and "~/") are relative to the remote home.
    std::string rel = "ptd-ssh-test-" + std::to_string(getpid()) + "/x/ptd-engine";
    const char* home = getenv("HOME");
    ASSERT_TRUE(home);
    auto rr = t->upload(local, "~/" + rel, sha);
    EXPECT_TRUE(rr.has_value()) << rr.error().str();
    EXPECT_EQ(SshdFixture::read_file(std::string(home) + "/" + rel), data);
    std::filesystem::remove_all(std::string(home) + "/ptd-ssh-test-" + std::to_string(getpid()));
}

// The launcher brings the ranks' measured-timeline files home with download(): byte-exact,
// a missing file is "none" (not an error), too large or not a file is an error naming it,
// and a path that is the local file itself (a shared run directory) stays whole.
TEST_F(SshTransportTest, DownloadCopiesFilesBack) {
    sshd.trust_host_key();
    auto plan = make_plan(sshd);
    auto t = connected(plan);
    ASSERT_TRUE(t);
    std::string data(300 * 1024 + 17, '\0');
    std::mt19937 rng(11);
    for (char& ch : data) ch = (char)(rng() & 0xff);
    const std::string remote_dir = sshd.dir + "/host-0 dir/timeline";
    std::filesystem::create_directories(remote_dir);
    std::filesystem::create_directories(sshd.dir + "/local/timeline");
    SshdFixture::write_file(remote_dir + "/rank-00001.tsv", data);
    const std::string local = sshd.dir + "/local/timeline/rank-00001.tsv";

    auto got = t->download(remote_dir + "/rank-00001.tsv", local, 1 << 20);
    ASSERT_TRUE(got.has_value()) << got.error().str();
    EXPECT_TRUE(*got);
    EXPECT_EQ(SshdFixture::read_file(local), data);
    EXPECT_FALSE(std::filesystem::exists(local + ".part"));

    auto missing = t->download(remote_dir + "/rank-00002.tsv", sshd.dir + "/local/timeline/rank-00002.tsv", 1 << 20);
    ASSERT_TRUE(missing.has_value()) << missing.error().str();
    EXPECT_FALSE(*missing);
    EXPECT_FALSE(std::filesystem::exists(sshd.dir + "/local/timeline/rank-00002.tsv"));

    auto big = t->download(remote_dir + "/rank-00001.tsv", sshd.dir + "/local/big.tsv", 1000);
    ASSERT_FALSE(big.has_value());
    EXPECT_NE(big.error().str().find("rank-00001.tsv"), std::string::npos) << big.error().str();
    EXPECT_NE(big.error().str().find("1000"), std::string::npos) << big.error().str();

    auto dir = t->download(remote_dir, sshd.dir + "/local/dir.tsv", 1 << 20);
    ASSERT_FALSE(dir.has_value());
    EXPECT_NE(dir.error().str().find("not a regular file"), std::string::npos) << dir.error().str();

    // The host shares the run directory: the file is copied onto itself and stays whole.
    auto same = t->download(local, local, 1 << 20);
    ASSERT_TRUE(same.has_value()) << same.error().str();
    EXPECT_EQ(SshdFixture::read_file(local), data);
}

// Uploads (the engine, job.toml) and downloads (timelines) share one SFTP setup: on a host
// whose sshd has no sftp subsystem both fail naming the host, the file and libssh's words,
// and neither blames `upload = false` (job.toml goes over SFTP whatever upload says).
TEST(SshTransportNoSftp, UploadAndDownloadNameHostPathAndCause) {
    unsetenv("SSH_AUTH_SOCK");
    SshdFixture sshd;
    sshd.sftp_subsystem = false;
    if (std::string why = sshd.start(); !why.empty()) GTEST_SKIP() << why;
    sshd.trust_host_key();
    auto plan = make_plan(sshd);
    auto t = ptd::make_ssh_transport(plan, 0);
    auto c = t->connect();
    ASSERT_TRUE(c.has_value()) << c.error().str();

    const std::string job_path = sshd.dir + "/run/host-0/job.toml";
    auto up = t->upload_text("[model]\n", job_path);
    ASSERT_FALSE(up.has_value());
    const std::string up_msg = up.error().str();
    const std::string tl_path = sshd.dir + "/run/host-0/timeline/rank-00000.tsv";
    auto down = t->download(tl_path, sshd.dir + "/rank-00000.tsv", 1 << 20);
    ASSERT_FALSE(down.has_value());
    const std::string down_msg = down.error().str();
    for (const auto& [msg, path] : {std::pair{up_msg, job_path}, std::pair{down_msg, tl_path}}) {
        EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(sshd.port)), std::string::npos) << msg;
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
        EXPECT_NE(msg.find("subsystem"), std::string::npos) << msg;  // libssh's own message
        EXPECT_NE(msg.find("sftp Subsystem"), std::string::npos) << msg;
        EXPECT_EQ(msg.find("upload = false"), std::string::npos) << msg;
    }
}

TEST_F(SshTransportTest, FreePortRunsTheEngine) {
    sshd.trust_host_key();
    auto plan = make_plan(sshd);
    // A stand-in engine (its path has a space, to check quoting) that prints a port.
    std::string engine = sshd.dir + "/fake engine";
    SshdFixture::write_file(engine, "#!/bin/sh\n[ \"$1\" = --free-port ] || exit 2\necho 40123\n");
    chmod(engine.c_str(), 0755);
    plan.hosts[0].engine = engine;
    auto t = connected(plan);
    ASSERT_TRUE(t);
    auto port = t->free_port();
    ASSERT_TRUE(port.has_value()) << port.error().str();
    EXPECT_EQ(*port, 40123);

    plan.hosts[0].engine = sshd.dir + "/missing-engine";
    auto t2 = connected(plan);
    ASSERT_TRUE(t2);
    auto none = t2->free_port();
    ASSERT_FALSE(none.has_value());
    std::string msg = none.error().str();
    EXPECT_NE(msg.find("missing-engine"), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;  // the remote shell's stderr
}

}  // namespace
