// kv_wire.cpp — decoding the rendezvous store's frames (kv_wire.h). A reader that marks
// itself bad on any overrun stands between the bytes and every field, so a malformed
// payload is found by one check at the end, never by reading past it.
#include "kv_wire.h"

#include "ptd/common/sha256.h"

namespace ptd::engine::kv_wire {
namespace {

class FrameReader {
public:
    explicit FrameReader(std::string_view payload)
        : p_((const uint8_t*)payload.data()), end_(p_ + payload.size()) {}
    bool ok() const { return ok_; }
    bool at_end() const { return ok_ && p_ == end_; }
    uint8_t u8() { return (uint8_t)le(1); }
    uint32_t u32() { return (uint32_t)le(4); }
    uint64_t u64() { return le(8); }
    int64_t i64() { return (int64_t)le(8); }
    std::string str() {
        uint32_t n = u32();
        if (!ok_ || (size_t)(end_ - p_) < n) { ok_ = false; return {}; }
        std::string s((const char*)p_, n);
        p_ += n;
        return s;
    }

private:
    uint64_t le(int n) {
        if (!ok_ || end_ - p_ < n) { ok_ = false; return 0; }
        uint64_t v = 0;
        for (int i = 0; i < n; ++i) v |= (uint64_t)p_[i] << (8 * i);
        p_ += n;
        return v;
    }
    const uint8_t* p_;
    const uint8_t* end_;
    bool ok_ = true;
};

bool finish(const FrameReader& r, uint8_t type, std::string& why) {
    if (r.at_end()) return true;
    why = "bad fields in a frame of type " + std::to_string(type);
    return false;
}

}  // namespace

uint32_t frame_length(const char* header) {
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= (uint32_t)(uint8_t)header[i] << (8 * i);
    return n;
}

bool take_frame(std::string& in, uint32_t max_frame, std::string& payload, bool& have, std::string& why) {
    have = false;
    if (in.size() < 4) return true;
    const uint32_t n = frame_length(in.data());
    if (n == 0 || n > max_frame) {
        why = "frame length " + std::to_string(n) + " outside 1 .. " + std::to_string(max_frame);
        return false;
    }
    if (in.size() < 4 + (size_t)n) return true;
    payload.assign(in, 4, n);
    in.erase(0, 4 + (size_t)n);
    have = true;
    return true;
}

bool decode_request(std::string_view payload, Request& out, std::string& why) {
    FrameReader r(payload);
    out = Request{};
    out.type = r.u8();
    switch (out.type) {
    case MSG_SET:
        out.id = r.u64();
        out.key = r.str();
        out.value = r.str();
        break;
    case MSG_GET:
        out.id = r.u64();
        out.key = r.str();
        break;
    case MSG_CHECK: {
        out.id = r.u64();
        const uint32_t n = r.u32();
        // Each key costs at least its 4-byte length: a count the payload cannot hold is
        // refused before anything is reserved for it.
        if (!r.ok() || n > payload.size() / 4) { why = "CHECK of " + std::to_string(n) + " keys in a " + std::to_string(payload.size()) + "-byte frame"; return false; }
        for (uint32_t i = 0; i < n && r.ok(); ++i) out.keys.push_back(r.str());
        break;
    }
    case MSG_ADD:
        out.id = r.u64();
        out.key = r.str();
        out.number = r.i64();
        break;
    case MSG_HELLO:
        out.rank = (int32_t)r.u32();
        out.number = r.i64();
        out.text = r.str();
        break;
    case MSG_HEARTBEAT:
    case MSG_GOODBYE:
        break;
    case MSG_FAILURE:
        out.text = r.str();
        break;
    case MSG_AUTH:
        out.text = r.str();
        break;
    default:
        why = "unknown frame type " + std::to_string(out.type);
        return false;
    }
    return finish(r, out.type, why);
}

bool decode_reply(std::string_view payload, Reply& out, std::string& why) {
    FrameReader r(payload);
    out = Reply{};
    out.type = r.u8();
    switch (out.type) {
    case MSG_OK:
        out.id = r.u64();
        break;
    case MSG_VALUE:
    case MSG_ERROR:
        out.id = r.u64();
        out.text = r.str();
        break;
    case MSG_BOOL:
        out.id = r.u64();
        out.number = r.u8();
        break;
    case MSG_INT:
        out.id = r.u64();
        out.number = r.i64();
        break;
    case MSG_ABORT:
    case MSG_REFUSED:
    case MSG_CHALLENGE:
        out.text = r.str();
        break;
    case MSG_BEAT_ACK:
    case MSG_AUTH_OK:
        break;
    default:
        why = "unknown frame type " + std::to_string(out.type);
        return false;
    }
    if (!finish(r, out.type, why)) return false;
    if (out.type == MSG_CHALLENGE && out.text.size() != kNonceBytes) {
        why = "a challenge of " + std::to_string(out.text.size()) + " bytes (expected " + std::to_string(kNonceBytes) + ")";
        return false;
    }
    return true;
}

std::string auth_mac(std::string_view secret, std::string_view nonce) {
    std::string message(kAuthContext);
    message.append(nonce);
    const auto mac = hmac_sha256(secret, message);
    return std::string((const char*)mac.data(), mac.size());
}

}  // namespace ptd::engine::kv_wire
