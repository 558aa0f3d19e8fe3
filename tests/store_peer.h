// store_peer.h — a raw TCP peer of the run's rendezvous store (engine/gloo/kv_wire.h), for
// the tests that act as a stranger on its port: connect, read what the store says, send any
// bytes, answer its challenge right or wrong. Written from the wire format's description
// rather than from the engine's code, so that the tests check the format too.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "ptd/common/sha256.h"

namespace store_peer {

constexpr uint8_t kChallenge = 64, kAuth = 65, kAuthOk = 66, kRefused = 67;

// u32 little-endian length + payload.
inline std::string frame(const std::string& payload) {
    std::string f(4, '\0');
    for (int i = 0; i < 4; ++i) f[i] = (char)((payload.size() >> (8 * i)) & 0xff);
    return f + payload;
}

// A string field: u32 little-endian length + bytes.
inline std::string field(const std::string& s) { return frame(s); }

// The answer to `nonce` with `secret`: HMAC-SHA-256(secret, "ptd-store-auth-v1\n" + nonce).
inline std::string auth_payload(const std::string& secret, const std::string& nonce) {
    const auto mac = ptd::hmac_sha256(secret, "ptd-store-auth-v1\n" + nonce);
    return std::string(1, (char)kAuth) + field(std::string((const char*)mac.data(), mac.size()));
}

class Peer {
public:
    // Connects to 127.0.0.1:port, retrying for up to `timeout_s` (the store may start later).
    explicit Peer(int port, double timeout_s = 10) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
        do {
            fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            a.sin_port = htons((uint16_t)port);
            if (::connect(fd_, (sockaddr*)&a, sizeof a) == 0) return;
            ::close(fd_);
            fd_ = -1;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        } while (std::chrono::steady_clock::now() < deadline);
    }
    ~Peer() { if (fd_ >= 0) ::close(fd_); }
    Peer(const Peer&) = delete;
    Peer& operator=(const Peer&) = delete;

    bool connected() const { return fd_ >= 0; }
    bool send(const std::string& bytes) { return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == (ssize_t)bytes.size(); }

    // The next frame's payload, or "" when the connection closed or nothing came in time.
    std::string read_frame(double timeout_s = 5) {
        std::string header = read_exact(4, timeout_s);
        if (header.size() < 4) return "";
        uint32_t n = 0;
        for (int i = 0; i < 4; ++i) n |= (uint32_t)(uint8_t)header[i] << (8 * i);
        if (n > (1u << 20)) return "";
        return read_exact(n, timeout_s);
    }
    // The nonce of the store's first frame (its challenge), or "".
    std::string challenge(double timeout_s = 5) {
        const std::string p = read_frame(timeout_s);
        if (p.size() != 1 + 4 + 32 || (uint8_t)p[0] != kChallenge) return "";
        return p.substr(5);
    }
    // Whether the store closed the connection within `timeout_s` (frames before EOF skipped).
    bool closed_by_store(double timeout_s = 5) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
        char buf[4096];
        while (std::chrono::steady_clock::now() < deadline) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;
            if (::recv(fd_, buf, sizeof buf, 0) <= 0) return true;
        }
        return false;
    }

private:
    std::string read_exact(size_t n, double timeout_s) {
        std::string out;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
        char buf[4096];
        while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;
            const ssize_t k = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
            if (k <= 0) break;
            out.append(buf, (size_t)k);
        }
        return out;
    }
    int fd_ = -1;
};

}  // namespace store_peer
