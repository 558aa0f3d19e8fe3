// sha256.h — SHA-256 (FIPS 180-4) and HMAC-SHA-256, written here so that checkpoints, job
// hashes, the launcher's upload check and the store's authentication need no crypto library. Incremental: feed bytes with update()
// in any split, then read the digest once.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ptd/common/diagnostic.h"

namespace ptd {

class Sha256 {
public:
    Sha256();

    // Appends `n` bytes at `data` to the message. Any split of a message into update()
    // calls gives the same digest. Must not be called after digest()/hex_digest().
    void update(const void* data, size_t n);
    void update(std::string_view s) { update(s.data(), s.size()); }

    // The 32-byte digest of everything passed to update(). Finalizes the hash: later
    // calls return the same digest; update() after it is a programmer error (asserts).
    std::array<uint8_t, 32> digest();
    // The digest as 64 lower-case hex digits.
    std::string hex_digest();

private:
    void compress(const uint8_t* block);

    uint32_t state_[8];
    uint8_t buffer_[64];
    size_t buffered_ = 0;        // bytes waiting in buffer_ (< 64)
    uint64_t total_bytes_ = 0;   // message length so far
    bool finished_ = false;
    std::array<uint8_t, 32> result_{};
};

// SHA-256 hex digest of `bytes` in one call.
std::string sha256_hex(const void* data, size_t n);
inline std::string sha256_hex(std::string_view s) { return sha256_hex(s.data(), s.size()); }

// HMAC-SHA-256 (RFC 2104; checked against RFC 4231's vectors): the rendezvous store's
// challenge–response proves the run's secret with it.
std::array<uint8_t, 32> hmac_sha256(std::string_view key, std::string_view message);

// Equality whose time does not depend on where the first difference is, so a peer timing
// an answer learns nothing about how much of its guess was right.
bool constant_time_equal(std::string_view a, std::string_view b);

// SHA-256 hex digest of a file's contents, read in chunks (any size). Errors (key "")
// name the file and the system's reason when it cannot be opened or read.
Result<std::string> sha256_file(const std::string& path);

}  // namespace ptd
