// free_port.h — a loopback TCP port nothing listens on right now, for tests that start real
// multi-process runs. It is taken BELOW the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range): the kernel never hands those ports to outgoing
// connections or to bind(0), so a parallel test's sockets (its ranks' connections, Gloo's
// listeners) cannot take it between this check and the run's bind, and a rank connecting
// before its store listens cannot be connected to itself. Two tests drawing the same port
// at once remain possible (about 1 in 20,000 per pair); the tests accept that race.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>

inline bool loopback_port_free(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    const bool ok = fd >= 0 && bind(fd, (sockaddr*)&a, sizeof a) == 0;
    if (fd >= 0) close(fd);
    return ok;
}

inline int free_port() {
    int ephemeral_low = 32768;
    std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
    static std::mt19937 rng((unsigned)getpid() * 2654435761u);
    const int low = 10000, high = ephemeral_low > low + 1000 ? ephemeral_low : low + 1000;
    std::uniform_int_distribution<int> pick(low, high - 1);
    for (int tries = 0; tries < 200; ++tries)
        if (const int p = pick(rng); loopback_port_free(p)) return p;
    // Everything below the range is taken: a port the kernel picks (the old way).
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (sockaddr*)&a, sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd, (sockaddr*)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}
