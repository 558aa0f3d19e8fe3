// gloo_comm.cpp — Communicators over Gloo's TCP transport (comm.h), the engine's CPU
// communication path. Each process group is one gloo::rendezvous::Context, rendezvoused
// through the run's KV store; all of a rank's contexts share one TCP device (one event
// loop thread). Collectives use Gloo's ring algorithms, so every member of a group gets
// bit-identical results; reduce-scatter and all-gather (equal counts, as NCCL's) are our
// own rings over unbound buffers. Point-to-point follows NCCL's contract (comm.h): no
// tags, FIFO per peer and direction, groups that complete as a whole; strict mode checks
// a descriptor on every receive. A Gloo exception never escapes: it goes to the failure
// handler.
#include "ptd/engine/comm.h"

#include <net/if.h>
#include <netdb.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "ptd/common/sha256.h"
#include "ptd/engine/dtype.h"
#include "ptd/engine/kv_store.h"

namespace ptd::engine {

std::string join_ranks(const std::vector<int>& ranks) {
    const size_t shown = ranks.size() <= 8 ? ranks.size() : 4;
    std::string s;
    for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
    if (shown < ranks.size())
        s += ", …, " + std::to_string(ranks.back()) + " (" + std::to_string(ranks.size()) + " ranks)";
    return s;
}

namespace {

// Slot prefixes for the messages we send ourselves, in the top byte of Gloo's 64-bit
// slot. Gloo's own collectives use prefixes 0x01..0x08 there, so these never match them.
constexpr uint64_t kP2pPrefix = 0x40;
constexpr uint64_t kRingPrefix = 0x41;
constexpr uint64_t kP2pHeaderPrefix = 0x42;

// Point-to-point has no tags: the k-th message from a to b travels in slot k of that
// direction, so the k-th receive b posts from a takes exactly the k-th send (FIFO).
uint64_t p2p_slot(uint64_t seq) { return (kP2pPrefix << 56) | seq; }
uint64_t p2p_header_slot(uint64_t seq) { return (kP2pHeaderPrefix << 56) | seq; }
// One slot per ring step so that a step's message can never be taken for another's.
uint64_t ring_slot(uint32_t tag, int step) { return (kRingPrefix << 56) | ((uint64_t)tag << 24) | (uint64_t)step; }

// ---- element types -----------------------------------------------------------------

// bf16 and f16 are reduced in f32 and rounded back to nearest even, as NCCL does
// (the conversions of ptd/engine/dtype.h).

// How an element is loaded for the arithmetic and stored back.
template <class T>
struct Native {
    using Storage = T;
    static T load(T x) { return x; }
    static T store(T x) { return x; }
};
struct Bf16 {
    using Storage = uint16_t;
    static float load(uint16_t x) { return bf16_bits_to_f32(x); }
    static uint16_t store(float x) { return f32_to_bf16_bits(x); }
};
struct F16 {
    using Storage = uint16_t;
    static float load(uint16_t x) { return f16_bits_to_f32(x); }
    static uint16_t store(float x) { return f32_to_f16_bits(x); }
};

template <class E, ReduceOp Op>
void reduce_elements(void* c, const void* a, const void* b, size_t n) {
    using S = typename E::Storage;
    S* out = (S*)c;
    const S* x = (const S*)a;
    const S* y = (const S*)b;
    for (size_t i = 0; i < n; ++i) {
        const auto u = E::load(x[i]), v = E::load(y[i]);
        if constexpr (Op == ReduceOp::sum) out[i] = E::store(u + v);
        else out[i] = E::store(u > v ? u : v);
    }
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <class E>
ReduceFn reduce_fn_of(ReduceOp op) {
    return op == ReduceOp::sum ? &reduce_elements<E, ReduceOp::sum> : &reduce_elements<E, ReduceOp::max>;
}

ReduceFn reduce_fn(DType t, ReduceOp op) {
    switch (t) {
        case DType::f32: return reduce_fn_of<Native<float>>(op);
        case DType::f64: return reduce_fn_of<Native<double>>(op);
        case DType::i32: return reduce_fn_of<Native<int32_t>>(op);
        case DType::bf16: return reduce_fn_of<Bf16>(op);
        case DType::f16: return reduce_fn_of<F16>(op);
    }
    return nullptr;
}

const char* op_name(ReduceOp op) { return op == ReduceOp::sum ? "sum" : "max"; }

// ---- size-1 groups -----------------------------------------------------------------

class SelfCommunicator final : public Communicator {
public:
    SelfCommunicator(std::string name, int global_rank) : name_(std::move(name)), ranks_{global_rank} {}
    int rank() const override { return 0; }
    int size() const override { return 1; }
    const std::string& name() const override { return name_; }
    const std::vector<int>& global_ranks() const override { return ranks_; }
    // The identity, but the buffer is read all the same (as NCCL would): checked.
    void all_reduce(void* x, int64_t n, DType t, ReduceOp) override {
        observe_read(x, n, t, "all_reduce");
        observe_write(x, n, t, "all_reduce");
    }
    void reduce_scatter(void* x, int64_t n, DType t, ReduceOp) override {
        observe_read(x, n, t, "reduce_scatter");
        observe_write(x, n, t, "reduce_scatter");
    }
    void all_gather(void* x, int64_t n, DType t) override {
        observe_read(x, n, t, "all_gather");
        observe_write(x, n, t, "all_gather");
    }
    void broadcast(void* x, int64_t n, DType t, int) override { observe_read(x, n, t, "broadcast"); }
    void barrier() override {}
    void group_start() override {}
    void group_end() override {}
    void send(const void*, int64_t, DType, int peer, uint32_t) override { misuse("send to", peer); }
    void recv(void*, int64_t, DType, int peer, uint32_t) override { misuse("recv from", peer); }

private:
    [[noreturn]] void misuse(const char* what, int peer) {
        std::fprintf(stderr, "ptd-engine: internal error: %s group rank %d in the size-1 %s group\n", what, peer,
                     name_.c_str());
        std::abort();
    }
    std::string name_;
    std::vector<int> ranks_;
};

// ---- the store adapter -------------------------------------------------------------

// Gloo's rendezvous needs set/get/wait; our KV store's GET already blocks until the key
// exists, so wait is a GET per key with the time left.
class KvGlooStore final : public gloo::rendezvous::Store {
public:
    KvGlooStore(KvClient& kv, std::chrono::milliseconds timeout) : kv_(kv), timeout_(timeout) {}

    void set(const std::string& key, const std::vector<char>& data) override {
        kv_.set(key, std::vector<uint8_t>(data.begin(), data.end()));
    }

    std::vector<char> get(const std::string& key) override {
        auto v = kv_.get(key, seconds(timeout_));
        if (!v) throw gloo::IoException(v.error().diagnostics.front().message);
        return std::vector<char>(v->begin(), v->end());
    }

    void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

    void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
        auto deadline = std::chrono::steady_clock::now() + timeout;
        for (const auto& key : keys) {
            double left = std::max(0.0, std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count());
            auto v = kv_.get(key, left);
            if (!v) throw gloo::IoException(v.error().diagnostics.front().message);
        }
    }

private:
    static double seconds(std::chrono::milliseconds ms) { return ms.count() / 1000.0; }
    KvClient& kv_;
    std::chrono::milliseconds timeout_;
};

// ---- Gloo groups -------------------------------------------------------------------

// What strict mode sends ahead of each p2p message: who sent it, its place in the
// sender's FIFO towards this receiver, and what the sender said it is.
struct P2pHeader {
    uint64_t magic = 0x50544446494630ull;  // "PTDFIF0": a header, not stray bytes
    uint64_t seq = 0;
    int64_t count = 0;
    uint32_t check = 0;
    int32_t src = -1;   // sender's group rank
    uint8_t dtype = 0;
    uint8_t pad[7] = {};
};

std::string describe_message(DType dtype, int64_t count, uint32_t check) {
    return std::string("{") + dtype_name(dtype) + " × " + std::to_string(count) + ", check " + std::to_string(check) +
           "}";
}

class GlooCommunicator final : public Communicator {
public:
    GlooCommunicator(std::string name, std::vector<int> global_ranks, std::shared_ptr<gloo::Context> context,
                     std::chrono::milliseconds timeout, bool strict, FailureHandler on_failure,
                     FailureHandler on_violation)
        : name_(std::move(name)),
          ranks_(std::move(global_ranks)),
          ctx_(std::move(context)),
          timeout_(timeout),
          strict_(strict),
          on_failure_(std::move(on_failure)),
          on_violation_(std::move(on_violation)),
          sent_((size_t)ctx_->size, 0),
          received_((size_t)ctx_->size, 0) {}

    ~GlooCommunicator() override {
        // Normally empty (every group completes); a buffer destroyed while Gloo may still
        // read it would be a use-after-free inside Gloo, so give pending sends a chance.
        for (auto& op : ops_) {
            try {
                if (op.is_send && op.data) op.data->waitSend(std::chrono::milliseconds(1000));
                if (op.is_send && op.header_buf) op.header_buf->waitSend(std::chrono::milliseconds(1000));
            } catch (...) {
            }
        }
    }

    int rank() const override { return ctx_->rank; }
    int size() const override { return ctx_->size; }
    const std::string& name() const override { return name_; }
    const std::vector<int>& global_ranks() const override { return ranks_; }

    void all_reduce(void* x, int64_t n, DType t, ReduceOp op) override {
        const std::string what = std::string("all_reduce_") + op_name(op);
        check_collective(what.c_str());
        if (n <= 0) return;
        observe_read(x, n, t, what.c_str());
        switch (t) {
            case DType::f32: all_reduce_typed((float*)x, n, what, reduce_fn(t, op)); break;
            case DType::f64: all_reduce_typed((double*)x, n, what, reduce_fn(t, op)); break;
            case DType::i32: all_reduce_typed((int32_t*)x, n, what, reduce_fn(t, op)); break;
            case DType::bf16:
            case DType::f16: all_reduce_typed((uint16_t*)x, n, what, reduce_fn(t, op)); break;
        }
        observe_write(x, n, t, what.c_str());
    }

    // Ring reduce-scatter: in step s a rank sends its partial sum of chunk (r−s−1) to the
    // right and adds the left neighbour's partial sum of chunk (r−s−2) into its own; after
    // size−1 steps chunk r has passed through every rank and ends, complete, at rank r.
    // Each slice's bytes are a plain sum, so any rank can see its own slice exactly.
    void reduce_scatter(void* x, int64_t count, DType t, ReduceOp op) override {
        const std::string what = std::string("reduce_scatter_") + op_name(op);
        check_collective(what.c_str());
        if (count < 0) misuse(what.c_str(), (int)count);
        const int p = size(), r = rank();
        if (count == 0) return;
        observe_read(x, count * p, t, what.c_str());
        const size_t es = dtype_size(t), chunk = (size_t)count * es;
        const ReduceFn fn = reduce_fn(t, op);
        std::vector<uint8_t> tmp(chunk);
        uint8_t* bytes = (uint8_t*)x;
        const uint32_t tag = next_tag();
        guarded(what.c_str(), [&] {
            auto send_buf = ctx_->createUnboundBuffer(x, chunk * (size_t)p);
            auto recv_buf = ctx_->createUnboundBuffer(tmp.data(), tmp.size());
            const int right = (r + 1) % p, left = (r + p - 1) % p;
            for (int s = 0; s < p - 1; ++s) {
                const int send_chunk = ((r - s - 1) % p + p) % p;
                const int recv_chunk = ((r - s - 2) % p + p) % p;
                send_buf->send(right, ring_slot(tag, s), (size_t)send_chunk * chunk, chunk);
                recv_buf->recv(left, ring_slot(tag, s), 0, chunk);
                wait_recv(*recv_buf);
                uint8_t* dst = bytes + (size_t)recv_chunk * chunk;
                fn(dst, dst, tmp.data(), (size_t)count);
                // The next step receives into tmp again and one unbound buffer carries
                // one operation at a time.
                wait_send(*send_buf);
            }
        });
        observe_write(x, count * p, t, what.c_str());
    }

    // Ring all-gather: in step s a rank forwards chunk (r−s) to the right and receives
    // chunk (r−s−1) from the left, straight into place.
    void all_gather(void* x, int64_t count, DType t) override {
        check_collective("all_gather");
        if (count < 0) misuse("all_gather", (int)count);
        const int p = size(), r = rank();
        if (count == 0) return;
        observe_read((const uint8_t*)x + (size_t)r * count * dtype_size(t), count, t, "all_gather");
        const size_t chunk = (size_t)count * dtype_size(t);
        const uint32_t tag = next_tag();
        guarded("all_gather", [&] {
            auto send_buf = ctx_->createUnboundBuffer(x, chunk * (size_t)p);
            auto recv_buf = ctx_->createUnboundBuffer(x, chunk * (size_t)p);
            const int right = (r + 1) % p, left = (r + p - 1) % p;
            for (int s = 0; s < p - 1; ++s) {
                const int send_chunk = ((r - s) % p + p) % p;
                const int recv_chunk = ((r - s - 1) % p + p) % p;
                send_buf->send(right, ring_slot(tag, s), (size_t)send_chunk * chunk, chunk);
                recv_buf->recv(left, ring_slot(tag, s), (size_t)recv_chunk * chunk, chunk);
                wait_recv(*recv_buf);
                wait_send(*send_buf);
            }
        });
        observe_write(x, count * p, t, "all_gather");
    }

    void broadcast(void* x, int64_t n, DType t, int root) override {
        check_collective("broadcast");
        if (root < 0 || root >= size()) misuse("broadcast from root", root);
        if (n <= 0) return;
        if (rank() == root) observe_read(x, n, t, "broadcast");
        const uint32_t tag = next_tag();
        guarded("broadcast", [&] {
            gloo::BroadcastOptions opts(ctx_);
            opts.setOutput((uint8_t*)x, (size_t)n * dtype_size(t));  // the root's output doubles as its input
            opts.setRoot(root);
            opts.setTag(tag);
            opts.setTimeout(timeout_);
            gloo::broadcast(opts);
        });
        if (rank() != root) observe_write(x, n, t, "broadcast");
    }

    void barrier() override {
        check_collective("barrier");
        const uint32_t tag = next_tag();
        guarded("barrier", [&] {
            gloo::BarrierOptions opts(ctx_);
            opts.setTag(tag);
            opts.setTimeout(timeout_);
            gloo::barrier(opts);
        });
    }

    // Groups nest as NCCL's do: only the outermost group_end completes the operations.
    void group_start() override { ++group_depth_; }

    void group_end() override {
        if (group_depth_ == 0) misuse("group_end without group_start, depth", 0);
        if (--group_depth_ == 0) complete_group();
    }

    void send(const void* x, int64_t n, DType t, int peer, uint32_t check) override {
        check_peer(peer, "send to");
        if (n > 0) observe_read(x, n, t, "send");
        if (n > 0) {  // both sides know n; an empty message is no message
            P2pOp op{.is_send = true, .peer = peer, .seq = sent_[(size_t)peer]++, .count = n, .dtype = t, .check = check};
            guarded("send", [&] {
                if (strict_) {
                    op.header = std::make_unique<P2pHeader>();
                    op.header->seq = op.seq;
                    op.header->count = n;
                    op.header->check = check;
                    op.header->src = rank();
                    op.header->dtype = (uint8_t)t;
                    op.header_buf = ctx_->createUnboundBuffer(op.header.get(), sizeof(P2pHeader));
                    op.header_buf->send(peer, p2p_header_slot(op.seq));
                }
                // Gloo only reads through the pointer, but its buffer type is not const.
                op.data = ctx_->createUnboundBuffer(const_cast<void*>(x), (size_t)n * dtype_size(t));
                op.data->send(peer, p2p_slot(op.seq));
            });
            ops_.push_back(std::move(op));
        }
        if (group_depth_ == 0) complete_group();
    }

    void recv(void* x, int64_t n, DType t, int peer, uint32_t check) override {
        check_peer(peer, "recv from");
        if (n > 0) {
            P2pOp op{.is_send = false, .peer = peer, .seq = received_[(size_t)peer]++, .x = x, .count = n, .dtype = t,
                     .check = check};
            guarded("recv", [&] {
                if (strict_) {
                    // The payload is posted only once the header proved it is the expected
                    // message (complete_group): a wrong-sized message never lands in x.
                    op.header = std::make_unique<P2pHeader>();
                    op.header_buf = ctx_->createUnboundBuffer(op.header.get(), sizeof(P2pHeader));
                    op.header_buf->recv(peer, p2p_header_slot(op.seq));
                } else {
                    op.data = ctx_->createUnboundBuffer(x, (size_t)n * dtype_size(t));
                    op.data->recv(peer, p2p_slot(op.seq));
                }
            });
            ops_.push_back(std::move(op));
        }
        if (group_depth_ == 0) complete_group();
    }

private:
    struct P2pOp {
        bool is_send = false;
        int peer = -1;
        uint64_t seq = 0;
        void* x = nullptr;
        int64_t count = 0;
        DType dtype = DType::f32;
        uint32_t check = 0;
        std::unique_ptr<gloo::transport::UnboundBuffer> data;
        std::unique_ptr<P2pHeader> header;
        std::unique_ptr<gloo::transport::UnboundBuffer> header_buf;
    };

    // Every operation of the group was posted; return once each has completed (NCCL's
    // worst case: a send completes only when its receive was posted).
    void complete_group() {
        guarded(ops_.size() == 1 ? (ops_[0].is_send ? "send" : "recv") : "p2p group", [&] {
            if (strict_) {
                for (P2pOp& op : ops_) {
                    if (op.is_send) continue;
                    wait_recv(*op.header_buf);
                    verify(op);
                    op.data = ctx_->createUnboundBuffer(op.x, (size_t)op.count * dtype_size(op.dtype));
                    op.data->recv(op.peer, p2p_slot(op.seq));
                }
            }
            for (P2pOp& op : ops_) {
                if (op.is_send) {
                    if (op.header_buf) wait_send(*op.header_buf);
                    wait_send(*op.data);
                } else {
                    wait_recv(*op.data);
                }
            }
        });
        for (const P2pOp& op : ops_)
            if (!op.is_send) observe_write(op.x, op.count, op.dtype, "recv");
        ops_.clear();
    }

    // Strict mode: the message that arrived in this receive's FIFO position must be the
    // one the receiver expects there.
    void verify(const P2pOp& op) {
        const P2pHeader& h = *op.header;
        const DType got_dtype = (DType)h.dtype;
        const bool dtype_ok = h.dtype <= (uint8_t)DType::i32 && got_dtype == op.dtype;
        if (h.magic == P2pHeader{}.magic && h.seq == op.seq && h.src == op.peer && dtype_ok && h.count == op.count &&
            h.check == op.check)
            return;
        const int me = rank(), peer = op.peer;
        std::string sent = h.magic != P2pHeader{}.magic || h.dtype > (uint8_t)DType::i32
                               ? std::string("an unreadable header")
                               : "message #" + std::to_string(h.seq) + " as " + describe_message(got_dtype, h.count, h.check);
        std::string msg = "strict FIFO check failed in the " + name_ + " group (global ranks " + join_ranks(ranks_) +
                          "): rank " + std::to_string(ranks_[(size_t)me]) + " (group rank " + std::to_string(me) +
                          ") expected message #" + std::to_string(op.seq) + " from rank " +
                          std::to_string(ranks_[(size_t)peer]) + " (group rank " + std::to_string(peer) + ") to be " +
                          describe_message(op.dtype, op.count, op.check) + ", but rank " +
                          std::to_string(ranks_[(size_t)peer]) + " posted " + sent +
                          "; the two ranks post their point-to-point operations in different orders, which NCCL "
                          "(no tags, FIFO per peer) would turn into wrong data or a hang";
        if (on_violation_) on_violation_(msg);
        failed("recv", msg);
    }

    template <class T>
    void all_reduce_typed(T* x, int64_t n, const std::string& what, ReduceFn fn) {
        const uint32_t tag = next_tag();
        guarded(what.c_str(), [&] {
            gloo::AllreduceOptions opts(ctx_);
            opts.setOutput(x, (size_t)n);  // in place
            opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
            opts.setReduceFunction(fn);
            opts.setTag(tag);
            opts.setTimeout(timeout_);
            gloo::allreduce(opts);
        });
    }

    // Every member calls the group's collectives in the same order, so a per-group
    // counter gives matching tags without any exchange, and a late message of one
    // collective can never be matched by the next.
    uint32_t next_tag() { return next_tag_++; }

    void wait_recv(gloo::transport::UnboundBuffer& b) {
        if (!b.waitRecv(timeout_)) throw gloo::IoException("receive aborted");
    }
    void wait_send(gloo::transport::UnboundBuffer& b) {
        if (!b.waitSend(timeout_)) throw gloo::IoException("send aborted");
    }

    template <class F>
    void guarded(const char* op, F&& body) {
        try {
            body();
            return;
        } catch (const gloo::EnforceNotMet& e) {
            failed(op, e.what());
        } catch (const gloo::Exception& e) {  // IoException, InvalidOperationException, timeouts
            failed(op, e.what());
        } catch (const std::exception& e) {
            failed(op, e.what());
        }
    }

    [[noreturn]] void failed(const char* op, const std::string& what) {
        std::string message = name_ + " " + op + " (global ranks " + join_ranks(ranks_) + "): " + what;
        if (on_failure_) on_failure_(message);
        // The handler must not return (comm.h); if it does, a half-finished collective
        // must still never be seen by the caller.
        std::fprintf(stderr, "ptd-engine: error: %s\n", message.c_str());
        std::abort();
    }

    void check_peer(int peer, const char* what) {
        if (peer < 0 || peer >= size() || peer == rank()) misuse(what, peer);
    }

    // A collective inside an open p2p group would be ordered differently on NCCL (the
    // group's operations start only at group_end): not part of the contract.
    void check_collective(const char* op) {
        if (group_depth_ > 0) misuse((std::string(op) + " inside a p2p group, depth").c_str(), group_depth_);
    }

    [[noreturn]] void misuse(const char* what, int value) {
        std::fprintf(stderr, "ptd-engine: internal error: %s group: %s %d (group size %d, this rank %d)\n",
                     name_.c_str(), what, value, size(), rank());
        std::abort();
    }

    std::string name_;
    std::vector<int> ranks_;
    std::shared_ptr<gloo::Context> ctx_;
    std::chrono::milliseconds timeout_;
    bool strict_ = false;
    FailureHandler on_failure_, on_violation_;
    uint32_t next_tag_ = 0;
    int group_depth_ = 0;
    std::vector<uint64_t> sent_, received_;   // per peer: messages posted so far in each direction
    std::vector<P2pOp> ops_;                  // the open group's operations
};

bool is_loopback(const std::string& addr) {
    return addr.empty() || addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// Which local address Gloo listens on for its pairs (comm.h: CommOptions::hostname).
gloo::transport::tcp::attr device_attr(const CommOptions& options) {
    gloo::transport::tcp::attr attr;
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    const char* master = std::getenv("MASTER_ADDR");
    if (ifname && *ifname) {
        attr.iface = ifname;
    } else if (!options.hostname.empty()) {
        attr.hostname = options.hostname;
    } else if (is_loopback(master ? master : "")) {
        // A single-node run on loopback: the machine's hostname may resolve to an
        // address other hosts' firewalls or containers do not route, and is not needed.
        attr.hostname = "127.0.0.1";
    } else {
        char buf[256] = {};
        gethostname(buf, sizeof buf - 1);
        attr.hostname = buf;
    }
    return attr;
}

}  // namespace

// Gloo's TCP pairs carry no authentication: a pair connects to its peer's listener and sends
// an 8-byte sequence number, and the listener hands the connection to whichever pair awaits
// that number (gloo/transport/tcp/listener.cc). Whoever reaches the listener's port first with
// the awaited number — they are small and counted up per device — takes the peer's place.
// The addresses themselves travel through the authenticated store, but the port can be found
// by scanning. So before a group carries anything, each member proves the run's secret to
// each peer over the pair itself: 32 bytes of HMAC-SHA-256(secret, kPairContext + group prefix
// + "\n" + sender + ">" + receiver), checked in constant time. An impostor cannot make it,
// and the group fails naming the peer instead of training on what a stranger sends
// (docs/engine.md, "Gloo's pairs").
static constexpr std::string_view kPairContext = "ptd-gloo-pair-v1\n";
static constexpr uint64_t kPairCheckSlot = 0x7074645f70616972ull;  // "ptd_pair": no collective's slot

static std::array<uint8_t, 32> pair_token(const std::string& secret, const std::string& prefix, int from, int to) {
    std::string message(kPairContext);
    message += prefix + "\n" + std::to_string(from) + ">" + std::to_string(to);
    return hmac_sha256(secret, message);
}

static Result<void> check_pairs(gloo::rendezvous::Context& ctx, const std::string& secret, const std::string& prefix,
                         const std::vector<int>& members, std::chrono::milliseconds timeout) {
    const int me = ctx.rank, n = ctx.size;
    std::vector<std::array<uint8_t, 32>> mine(n), theirs(n);
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> out(n), in(n);
    int peer = -1;
    try {
        for (peer = 0; peer < n; ++peer) {
            if (peer == me) continue;
            mine[peer] = pair_token(secret, prefix, members[me], members[peer]);
            out[peer] = ctx.createUnboundBuffer(mine[peer].data(), mine[peer].size());
            in[peer] = ctx.createUnboundBuffer(theirs[peer].data(), theirs[peer].size());
            out[peer]->send(peer, kPairCheckSlot);
            in[peer]->recv(peer, kPairCheckSlot);
        }
        for (peer = 0; peer < n; ++peer) {
            if (peer == me) continue;
            if (!in[peer]->waitRecv(timeout)) throw gloo::IoException("receive aborted");
            const auto want = pair_token(secret, prefix, members[peer], members[me]);
            uint8_t diff = 0;
            for (size_t i = 0; i < want.size(); ++i) diff |= (uint8_t)(want[i] ^ theirs[peer][i]);
            if (diff != 0)
                return fail({}, "", "the Gloo pair with global rank " + std::to_string(members[peer]) +
                                        " did not prove the run's secret (a connection from outside the run took its place, "
                                        "or the ranks were given different PTD_RUN_SECRET values); stopping before it carries data");
        }
        for (peer = 0; peer < n; ++peer)
            if (peer != me && !out[peer]->waitSend(timeout)) throw gloo::IoException("send aborted");
    } catch (const std::exception& e) {
        return fail({}, "", "the Gloo pair with global rank " + std::to_string(peer >= 0 && peer < n ? members[peer] : -1) +
                                " did not prove the run's secret: " + e.what());
    }
    return {};
}

Result<std::optional<CommGroups>> single_process_groups(const RankLayout& layout, int rank) {
    if (rank < 0 || rank >= std::max(layout.world, 1))
        return fail({}, "RANK", "rank " + std::to_string(rank) + " is outside the layout's world of " +
                                    std::to_string(layout.world));
    if (layout.degree[DIM_CP] > 1)
        return fail({}, "parallel.cp", "context parallelism (cp = " + std::to_string(layout.degree[DIM_CP]) +
                                           ") is not supported by ptd-engine; allowed: 1");
    if (layout.world > 1) return std::optional<CommGroups>{};
    CommGroups groups;
    groups.world = make_self_communicator("world", rank);
    groups.tp = make_self_communicator("tp", rank);
    groups.pp = make_self_communicator("pp", rank);
    groups.dp = make_self_communicator("dp", rank);
    return std::optional<CommGroups>{std::move(groups)};
}

std::unique_ptr<Communicator> make_self_communicator(const std::string& name, int global_rank) {
    return std::make_unique<SelfCommunicator>(name, global_rank);
}

size_t dtype_size(DType t) {
    switch (t) {
        case DType::f32: return 4;
        case DType::f64: return 8;
        case DType::bf16: return 2;
        case DType::f16: return 2;
        case DType::i32: return 4;
    }
    return 0;
}

const char* dtype_name(DType t) {
    switch (t) {
        case DType::f32: return "f32";
        case DType::f64: return "f64";
        case DType::bf16: return "bf16";
        case DType::f16: return "f16";
        case DType::i32: return "i32";
    }
    return "?";
}

Result<bool> strict_fifo_from_env() {
    const char* v = std::getenv("PTD_COMM_STRICT_FIFO");
    if (!v || !*v || std::strcmp(v, "0") == 0) return false;
    if (std::strcmp(v, "1") == 0) return true;
    return fail({}, "PTD_COMM_STRICT_FIFO",
                std::string("got \"") + v + "\"; allowed: 1 (check every point-to-point receive) or 0 / unset (off)");
}

Result<CommGroups> make_gloo_groups(KvClient& store, const RankLayout& layout, int rank, const CommOptions& options,
                                    FailureHandler on_failure, FailureHandler on_contract_violation) {
    CommGroups groups;
    auto strict_env = strict_fifo_from_env();
    if (!strict_env) return std::unexpected(strict_env.error());
    const bool strict = options.strict_fifo || *strict_env;
    auto single = single_process_groups(layout, rank);
    if (!single) return std::unexpected(single.error());
    if (*single) return std::move(**single);

    // A rank whose peer died must get an error from Gloo, not be killed by SIGPIPE
    // writing to that peer's socket before anything could be reported.
    signal(SIGPIPE, SIG_IGN);

    const auto timeout = std::chrono::milliseconds((int64_t)(options.timeout_s * 1000));
    std::shared_ptr<gloo::transport::Device> device;
    auto attr = device_attr(options);
    // Gloo's device setup dereferences a failed lookup (a segfault in CreateDeviceAttr, seen
    // with a node name that resolved nowhere): check the name or interface first.
    if (!attr.iface.empty()) {
        if (if_nametoindex(attr.iface.c_str()) == 0)
            return fail({}, "GLOO_SOCKET_IFNAME", "interface \"" + attr.iface + "\" does not exist on this host; allowed: one of its network interfaces (ip link)");
    } else {
        addrinfo hints{}, *found = nullptr;
        hints.ai_socktype = SOCK_STREAM;
        const int rc = getaddrinfo(attr.hostname.c_str(), nullptr, &hints, &found);
        if (found) freeaddrinfo(found);
        if (rc != 0 || !found)
            return fail({}, "", "this rank's address \"" + attr.hostname + "\" (" +
                                    (options.hostname.empty() ? std::string("this host's name") : std::string("the address asked for")) +
                                    ") does not resolve: " + gai_strerror(rc) +
                                    "; allowed: a name that resolves to this host's address (/etc/hosts or DNS), or "
                                    "GLOO_SOCKET_IFNAME=<interface>");
    }
    try {
        device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
        std::string where = attr.iface.empty() ? "address " + attr.hostname : "interface " + attr.iface;
        return fail({}, "", "cannot open a Gloo TCP device on " + where + ": " + e.what());
    }
    KvGlooStore kv_store(store, timeout);

    // Every rank builds its groups in the same order (world, tp, pp, dp, embedding): a
    // context's rendezvous blocks until all its members join, so any other order could
    // leave two ranks each waiting in a group the other has not reached yet.
    auto build = [&](const std::string& name, int index, std::vector<int> members,
                     std::unique_ptr<Communicator>& out) -> Result<void> {
        auto me = std::find(members.begin(), members.end(), rank);
        if (members.size() == 1) {
            out = make_self_communicator(name, rank);
            return {};
        }
        std::string prefix = options.run_id + "/" + name + "/" + std::to_string(index);
        try {
            auto ctx = std::make_shared<gloo::rendezvous::Context>((int)(me - members.begin()), (int)members.size());
            ctx->setTimeout(timeout);
            gloo::rendezvous::PrefixStore prefixed(prefix, kv_store);
            ctx->connectFullMesh(prefixed, device);
            if (!options.pair_secret.empty())
                if (auto ok = check_pairs(*ctx, options.pair_secret, prefix, members, timeout); !ok)
                    return fail({}, "", "cannot set up the " + name + " group " + std::to_string(index) + " (global ranks " +
                                            join_ranks(members) + "): " + ok.error().one_line());
            out = std::make_unique<GlooCommunicator>(name, std::move(members), std::move(ctx), timeout, strict,
                                                     on_failure, on_contract_violation);
        } catch (const gloo::EnforceNotMet& e) {
            return fail({}, "", "cannot set up the " + name + " group " + std::to_string(index) + " (global ranks " +
                                    join_ranks(members) + "): " + e.what());
        } catch (const std::exception& e) {
            return fail({}, "", "cannot set up the " + name + " group " + std::to_string(index) + " (global ranks " +
                                    join_ranks(members) + "): " + e.what());
        }
        return {};
    };
    auto members_of = [&](Dim d) {
        const GroupSet& gs = layout.groups[d];
        int g = gs.group_of[rank];
        return std::pair{g, std::vector<int>(gs.begin(g), gs.end(g))};
    };

    std::vector<int> all(layout.world);
    for (int i = 0; i < layout.world; ++i) all[i] = i;
    if (auto r = build("world", 0, all, groups.world); !r) return std::unexpected(r.error());
    const std::pair<const char*, Dim> dims[] = {{"tp", DIM_TP}, {"pp", DIM_PP}, {"dp", DIM_DP}};
    std::unique_ptr<Communicator>* slots[] = {&groups.tp, &groups.pp, &groups.dp};
    for (int i = 0; i < 3; ++i) {
        auto [g, members] = members_of(dims[i].second);
        if (auto r = build(dims[i].first, g, std::move(members), *slots[i]); !r) return std::unexpected(r.error());
    }
    // Tied embeddings: the first and last stage of each pipeline share the embedding
    // gradient; stages in between are not in the group.
    if (layout.degree[DIM_PP] > 1) {
        auto [g, members] = members_of(DIM_PP);
        if (rank == members.front() || rank == members.back()) {
            std::vector<int> ends{members.front(), members.back()};
            if (auto r = build("embedding", g, std::move(ends), groups.embedding); !r)
                return std::unexpected(r.error());
        }
    }
    return groups;
}

}  // namespace ptd::engine
