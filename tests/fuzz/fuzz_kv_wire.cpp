// fuzz_kv_wire.cpp — libFuzzer target for the rendezvous store's wire format
// (engine/gloo/kv_wire.h), as the server and as a client read it.
//
// The input is a byte stream off a socket. Properties checked on every input:
//   * framing never reads past the buffer and never accepts a frame over its bound:
//     before authentication kMaxFrameBeforeAuth, after it kMaxFrame;
//   * decode_request (server side) and decode_reply (client side) never crash on any
//     payload; a failure says why;
//   * whatever either accepts re-encodes to exactly the payload it came from (no field is
//     dropped, invented or read from outside the payload);
//   * a CHALLENGE is accepted only with a nonce of kNonceBytes.
// The body is ptd_fuzz_kv_wire() so that tests/fuzz/replay_main.cpp can replay the corpus
// in the normal build; LLVMFuzzerTestOneInput exists only with PTD_FUZZ_ENTRY.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_properties.h"
#include "kv_wire.h"

namespace {

using namespace ptd::engine::kv_wire;
using ptd_fuzz::property_failed;

std::string encode(const Request& r) {
    FrameWriter w(r.type);
    switch (r.type) {
    case MSG_SET: w.u64(r.id).str(r.key).str(r.value); break;
    case MSG_GET: w.u64(r.id).str(r.key); break;
    case MSG_CHECK:
        w.u64(r.id).u32((uint32_t)r.keys.size());
        for (const std::string& k : r.keys) w.str(k);
        break;
    case MSG_ADD: w.u64(r.id).str(r.key).i64(r.number); break;
    case MSG_HELLO: w.u32((uint32_t)r.rank).i64(r.number).str(r.text); break;
    case MSG_FAILURE:
    case MSG_AUTH: w.str(r.text); break;
    default: break;
    }
    return w.finish().substr(4);
}

std::string encode(const Reply& r) {
    FrameWriter w(r.type);
    switch (r.type) {
    case MSG_OK: w.u64(r.id); break;
    case MSG_VALUE:
    case MSG_ERROR: w.u64(r.id).str(r.text); break;
    case MSG_BOOL: w.u64(r.id).u8((uint8_t)r.number); break;
    case MSG_INT: w.u64(r.id).i64(r.number); break;
    case MSG_ABORT:
    case MSG_REFUSED:
    case MSG_CHALLENGE: w.str(r.text); break;
    default: break;
    }
    return w.finish().substr(4);
}

}  // namespace

int ptd_fuzz_kv_wire(const uint8_t* data, size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    std::string stream(input);
    bool authenticated = false;
    for (int frames = 0; frames < 10000; ++frames) {
        const uint32_t bound = authenticated ? kMaxFrame : kMaxFrameBeforeAuth;
        std::string payload, why;
        bool have = false;
        const size_t before = stream.size();
        if (!take_frame(stream, bound, payload, have, why)) {
            if (why.empty()) property_failed("kv_wire", "framing failed without a reason", input, "");
            break;
        }
        if (!have) {
            if (stream.size() != before) property_failed("kv_wire", "an incomplete frame consumed bytes", input, "");
            break;
        }
        if (payload.empty() || payload.size() > bound) property_failed("kv_wire", "frame outside its bound", input, why);
        if (stream.size() != before - 4 - payload.size()) property_failed("kv_wire", "framing lost bytes", input, "");

        Request req;
        std::string req_why;
        if (decode_request(payload, req, req_why)) {
            if (encode(req) != payload) property_failed("kv_wire", "request does not re-encode to its payload", input, "");
            authenticated = authenticated || req.type == MSG_AUTH;
        } else if (req_why.empty()) {
            property_failed("kv_wire", "request refused without a reason", input, "");
        }
        Reply reply;
        std::string reply_why;
        if (decode_reply(payload, reply, reply_why)) {
            if (encode(reply) != payload) property_failed("kv_wire", "reply does not re-encode to its payload", input, "");
            if (reply.type == MSG_CHALLENGE && reply.text.size() != kNonceBytes)
                property_failed("kv_wire", "challenge accepted with a wrong nonce length", input, "");
        } else if (reply_why.empty()) {
            property_failed("kv_wire", "reply refused without a reason", input, "");
        }
    }
    return 0;
}

#ifdef PTD_FUZZ_ENTRY
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    return ptd_fuzz_kv_wire(data, size);
}
#endif
