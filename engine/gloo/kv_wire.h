// kv_wire.h — the rendezvous store's wire format (kv_store.cpp), apart from its sockets so
// that the fuzz target tests/fuzz/fuzz_kv_wire.cpp can feed the very parsers the server
// and the client use with arbitrary bytes.
//
// Frame (both directions) = u32 payload length (little-endian) + payload; payload = u8 type
// + fields. Integers are little-endian; strings and byte blobs are a u32 length followed
// by the bytes. Types and fields:
//   handshake CHALLENGE(nonce)                                    → client (first frame)
//             AUTH(mac)                                           → server
//             AUTH_OK  REFUSED(text)                              → client
//   requests  SET(id, key, value)  GET(id, key)  CHECK(id, n, key…)  ADD(id, key, i64)
//   replies   OK(id)  VALUE(id, value)  BOOL(id, u8)  INT(id, i64)  ERROR(id, text)
//   monitor   HELLO(rank, pid, host)  HEARTBEAT  GOODBYE  FAILURE(text)   → server
//             ABORT(text)  BEAT_ACK                                       → client
// mac = HMAC-SHA-256(run secret, kAuthContext + nonce): the nonce is fresh per connection,
// so an AUTH seen on the wire proves nothing on any other connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ptd::engine::kv_wire {

// Before authentication a peer may send only this much: one AUTH frame is 41 bytes.
constexpr uint32_t kMaxFrameBeforeAuth = 256;
// After: no legitimate value (Gloo addresses, NCCL ids, counters) comes near it, and it
// bounds what a garbage length can make either side allocate.
constexpr uint32_t kMaxFrame = 16u << 20;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
// Domain separation: this MAC means "a rank of this run answering the store's challenge".
constexpr std::string_view kAuthContext = "ptd-store-auth-v1\n";

enum MsgType : uint8_t {
    MSG_SET = 1, MSG_GET = 2, MSG_CHECK = 3, MSG_ADD = 4,
    MSG_OK = 16, MSG_VALUE = 17, MSG_BOOL = 18, MSG_INT = 19, MSG_ERROR = 20,
    MSG_HELLO = 32, MSG_HEARTBEAT = 33, MSG_GOODBYE = 34, MSG_FAILURE = 35,
    MSG_ABORT = 48, MSG_BEAT_ACK = 49,
    MSG_CHALLENGE = 64, MSG_AUTH = 65, MSG_AUTH_OK = 66, MSG_REFUSED = 67,
};

class FrameWriter {
public:
    explicit FrameWriter(uint8_t type) : buf_(4, '\0') { buf_.push_back((char)type); }
    FrameWriter& u8(uint8_t v) { buf_.push_back((char)v); return *this; }
    FrameWriter& u32(uint32_t v) { return le(v, 4); }
    FrameWriter& u64(uint64_t v) { return le(v, 8); }
    FrameWriter& i64(int64_t v) { return le((uint64_t)v, 8); }
    FrameWriter& bytes(const void* p, size_t n) {
        u32((uint32_t)n);
        buf_.append((const char*)p, n);
        return *this;
    }
    FrameWriter& str(std::string_view s) { return bytes(s.data(), s.size()); }
    // The finished frame, length prefix filled in.
    std::string finish() {
        uint32_t n = (uint32_t)(buf_.size() - 4);
        for (int i = 0; i < 4; ++i) buf_[i] = (char)((n >> (8 * i)) & 0xff);
        return std::move(buf_);
    }

private:
    FrameWriter& le(uint64_t v, int n) {
        for (int i = 0; i < n; ++i) buf_.push_back((char)((v >> (8 * i)) & 0xff));
        return *this;
    }
    std::string buf_;
};

// Splits one complete frame off the front of `in`, at most `max_frame` bytes long.
// Returns false on a malformed length (the connection must then be dropped), with `why`.
bool take_frame(std::string& in, uint32_t max_frame, std::string& payload, bool& have, std::string& why);

// The length a frame header announces (the first 4 bytes of `header`).
uint32_t frame_length(const char* header);

// A payload the server receives, decoded. Which fields are set depends on `type`.
struct Request {
    uint8_t type = 0;
    uint64_t id = 0;
    std::string key, value, text;   // text: FAILURE's message, AUTH's mac, HELLO's host
    std::vector<std::string> keys;  // CHECK
    int64_t number = 0;             // ADD's delta, HELLO's pid
    int32_t rank = -1;              // HELLO
};

// A payload a client receives, decoded.
struct Reply {
    uint8_t type = 0;
    uint64_t id = 0;      // replies to requests only
    std::string text;     // VALUE's value, ERROR/ABORT/REFUSED's text, CHALLENGE's nonce
    int64_t number = 0;   // INT, BOOL
};

// Decoding fails (false, `why` names the problem) on an unknown type, a field running past
// the end, or bytes left over; nothing is trusted beyond the payload's own length.
bool decode_request(std::string_view payload, Request& out, std::string& why);
bool decode_reply(std::string_view payload, Reply& out, std::string& why);

// The AUTH a rank sends for `nonce` and the frame that carries it.
std::string auth_mac(std::string_view secret, std::string_view nonce);

}  // namespace ptd::engine::kv_wire
