// netns_hosts.h — "hosts" for multi-host tests on one machine: network namespaces
// ptdh1 … ptdhN at 10.231.77.2 … .N+1, each joined to a bridge (ptdbr0, this machine at
// 10.231.77.1) by a veth pair (ptdvI here, eth0 inside), and optionally a link made slow
// with a real queueing discipline (tc netem, or tc tbf where the kernel has no netem).
// Needs root and `ip netns`; otherwise `skip` says why and the test skips with it.
//
//   NetnsHosts net(3);
//   if (!net.skip.empty()) GTEST_SKIP() << net.skip;
//   ... SshdFixture::start(net.name(3), net.address(3)) ...
//
// The names are fixed, so two test processes (ctest -j2) would tear down each other's
// hosts: a file lock held for the fixture's lifetime makes them take turns. The destructor
// (and the constructor, for leftovers of an interrupted run) deletes the namespaces, the
// veths with their qdiscs, and the bridge.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

struct NetnsHosts {
    static constexpr int kMaxHosts = 4;
    int count = 0;
    std::string skip;
    std::string slowed_with;  // the qdisc of slow_link(): "netem …" or "tbf …"
    int lock_fd = -1;

    static int sh(const std::string& cmd) { return std::system(("(" + cmd + ") >/dev/null 2>&1").c_str()); }
    static std::string name(int i) { return "ptdh" + std::to_string(i); }               // 1-based
    static std::string address(int i) { return "10.231.77." + std::to_string(1 + i); }  // 1-based
    static void teardown() {
        std::string cmd;
        for (int i = 1; i <= kMaxHosts; ++i) cmd += "ip netns del ptdh" + std::to_string(i) + "; ip link del ptdv" + std::to_string(i) + "; ";
        sh(cmd + "ip link del ptdbr0");
    }

    explicit NetnsHosts(int hosts) : count(hosts) {
        if (geteuid() != 0) {
            skip = "network namespaces need root (ip netns)";
            return;
        }
        lock_fd = open("/tmp/ptd-test-two-host-net.lock", O_CREAT | O_RDWR | O_CLOEXEC, 0600);
        if (lock_fd < 0 || flock(lock_fd, LOCK_EX) != 0) {
            skip = std::string("cannot lock /tmp/ptd-test-two-host-net.lock: ") + std::strerror(errno);
            return;
        }
        teardown();  // leftovers of an interrupted run
        std::vector<std::string> cmds = {"ip link add ptdbr0 type bridge", "ip addr add 10.231.77.1/24 dev ptdbr0", "ip link set ptdbr0 up"};
        for (int i = 1; i <= hosts; ++i) {
            const std::string ns = name(i), v = "ptdv" + std::to_string(i);
            for (const std::string& c :
                 {"ip netns add " + ns, "ip link add " + v + " type veth peer name eth0 netns " + ns, "ip link set " + v + " master ptdbr0",
                  "ip link set " + v + " up", "ip netns exec " + ns + " ip addr add " + address(i) + "/24 dev eth0",
                  "ip netns exec " + ns + " ip link set eth0 up", "ip netns exec " + ns + " ip link set lo up"})
                cmds.push_back(c);
        }
        for (const std::string& c : cmds)
            if (sh(c) != 0) {
                skip = "ip netns does not work here (`" + c + "` failed); the multi-host test needs it";
                teardown();
                return;
            }
    }
    ~NetnsHosts() {
        if (skip.empty()) teardown();
        if (lock_fd >= 0) close(lock_fd);  // releases the lock
    }
    NetnsHosts(const NetnsHosts&) = delete;
    NetnsHosts& operator=(const NetnsHosts&) = delete;

    // Slows host i's link both ways (its veth here, eth0 inside) to `mbit` Mbit/s with
    // `delay_ms` of added latency: tc netem where the kernel has it; else tc tbf, a token
    // bucket that limits the rate only (no delay). "" on success, else why not.
    std::string slow_link(int i, int mbit, int delay_ms) {
        const std::string v = "ptdv" + std::to_string(i), in_ns = "ip netns exec " + name(i) + " ";
        const std::string netem = "netem delay " + std::to_string(delay_ms) + "ms rate " + std::to_string(mbit) + "mbit";
        if (sh("tc qdisc add dev " + v + " root " + netem) == 0 && sh(in_ns + "tc qdisc add dev eth0 root " + netem) == 0) {
            slowed_with = netem;
            return "";
        }
        sh("tc qdisc del dev " + v + " root");
        // A bucket of 64 KiB, and packets wait at most 200 ms for tokens.
        const std::string tbf = "tbf rate " + std::to_string(mbit) + "mbit burst 64kb latency 200ms";
        if (sh("tc qdisc add dev " + v + " root " + tbf) == 0 && sh(in_ns + "tc qdisc add dev eth0 root " + tbf) == 0) {
            slowed_with = tbf + " (this kernel has no netem)";
            return "";
        }
        return "neither tc netem nor tc tbf can shape " + v + " here";
    }
};
