// two_ssh_hosts.h — two SSH "hosts" for launcher tests: the network namespaces ptdh1 and ptdh2
// (10.231.77.2 and .3, netns_hosts.h), each with a throwaway sshd (sshd_fixture.h) that takes
// the first one's key, both host keys known, and a hostfile giving each `slots` slots. Needs
// root, ip netns and openssh-server; otherwise `skip` says why.
//
//   TwoSshHosts hosts(dir, 2);
//   if (!hosts.skip.empty()) GTEST_SKIP() << hosts.skip;
//   job.launch.identity = hosts.a.identity; opts.hostfile = hosts.hostfile; ...
#pragma once

#include <cstdlib>
#include <string>

#include "launcher_test_util.h"
#include "netns_hosts.h"
#include "sshd_fixture.h"

struct TwoSshHosts {
    NetnsHosts net{2};  // first in, last out: the servers stop before their namespaces go
    SshdFixture a, b;
    std::string skip, hostfile, known_hosts;

    TwoSshHosts(const std::string& dir, int slots) {
        if (!net.skip.empty()) {
            skip = net.skip;
            return;
        }
        unsetenv("SSH_AUTH_SOCK");
        if (skip = a.start("ptdh1", "10.231.77.2"); !skip.empty()) return;
        if (skip = b.start("ptdh2", "10.231.77.3"); !skip.empty()) return;
        ptd_test::write_file(b.dir + "/authorized_keys", ptd_test::read_file(a.identity + ".pub"));
        known_hosts = dir + "/known_hosts";
        ptd_test::write_file(known_hosts, a.known_hosts_line() + b.known_hosts_line());
        hostfile = dir + "/hosts";
        const std::string n = std::to_string(slots);
        ptd_test::write_file(hostfile, a.user + "@10.231.77.2 slots=" + n + "\n" + b.user + "@10.231.77.3 slots=" + n + "\n");
    }
};
