// gloo_comm.cpp — Communicators over Gloo's TCP transport (comm.h), the engine's CPU
// communication path. Each process group is one gloo::rendezvous::Context, rendezvoused
// through the run's KV store; all of a rank's contexts share one TCP device (one event
// loop thread). Collectives use Gloo's ring algorithms, so every member of a group gets
// bit-identical results; uneven reduce-scatter and all-gather are our own rings over
// unbound buffers. A Gloo exception never escapes: it goes to the failure handler.
#include "ptd/engine/comm.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
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

#include "ptd/engine/kv_store.h"

namespace ptd::engine {
namespace {

// Slot prefixes for the messages we send ourselves, in the top byte of Gloo's 64-bit
// slot. Gloo's own collectives use prefixes 0x01..0x08 there, so these never match them.
constexpr uint64_t kP2pPrefix = 0x40;
constexpr uint64_t kRingPrefix = 0x41;

uint64_t p2p_slot(uint32_t tag) { return (kP2pPrefix << 56) | tag; }
// One slot per ring step so that a step's message can never be taken for another's.
uint64_t ring_slot(uint32_t tag, int step) { return (kRingPrefix << 56) | ((uint64_t)tag << 24) | (uint64_t)step; }

// "0, 1, 2, 3"; a large group is shortened to its ends ("0, 1, 2, 3, …, 1023 (1024 ranks)")
// so an error line stays readable.
std::string join_ranks(const std::vector<int>& ranks) {
    const size_t shown = ranks.size() <= 8 ? ranks.size() : 4;
    std::string s;
    for (size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
    if (shown < ranks.size())
        s += ", …, " + std::to_string(ranks.back()) + " (" + std::to_string(ranks.size()) + " ranks)";
    return s;
}

// ---- size-1 groups -----------------------------------------------------------------

class SelfCommunicator final : public Communicator {
public:
    SelfCommunicator(std::string name, int global_rank) : name_(std::move(name)), ranks_{global_rank} {}
    int rank() const override { return 0; }
    int size() const override { return 1; }
    const std::string& name() const override { return name_; }
    const std::vector<int>& global_ranks() const override { return ranks_; }
    void all_reduce_sum(float*, int64_t) override {}
    void all_reduce_max(float*, int64_t) override {}
    void all_reduce_sum_f64(double*, int64_t) override {}
    void reduce_scatter_sum(float*, const std::vector<int64_t>&) override {}
    void all_gather(float*, const std::vector<int64_t>&) override {}
    void broadcast(float*, int64_t, int) override {}
    void barrier() override {}
    void send(const float*, int64_t, int peer, uint32_t) override { misuse("send to", peer); }
    void recv(float*, int64_t, int peer, uint32_t) override { misuse("recv from", peer); }
    void wait_sends() override {}

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

template <class T>
void reduce_sum(void* c, const void* a, const void* b, size_t n) {
    T* out = (T*)c;
    const T* x = (const T*)a;
    const T* y = (const T*)b;
    for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

template <class T>
void reduce_max(void* c, const void* a, const void* b, size_t n) {
    T* out = (T*)c;
    const T* x = (const T*)a;
    const T* y = (const T*)b;
    for (size_t i = 0; i < n; ++i) out[i] = x[i] > y[i] ? x[i] : y[i];
}

class GlooCommunicator final : public Communicator {
public:
    GlooCommunicator(std::string name, std::vector<int> global_ranks, std::shared_ptr<gloo::Context> context,
                     std::chrono::milliseconds timeout, FailureHandler on_failure)
        : name_(std::move(name)),
          ranks_(std::move(global_ranks)),
          ctx_(std::move(context)),
          timeout_(timeout),
          on_failure_(std::move(on_failure)) {}

    ~GlooCommunicator() override {
        // Normally empty (callers wait_sends()); a buffer destroyed while Gloo may still
        // read it would be a use-after-free inside Gloo, so give pending sends a chance.
        for (auto& b : pending_sends_) {
            try {
                b->waitSend(std::chrono::milliseconds(1000));
            } catch (...) {
            }
        }
    }

    int rank() const override { return ctx_->rank; }
    int size() const override { return ctx_->size; }
    const std::string& name() const override { return name_; }
    const std::vector<int>& global_ranks() const override { return ranks_; }

    void all_reduce_sum(float* x, int64_t n) override { all_reduce(x, n, "all_reduce_sum", &reduce_sum<float>); }
    void all_reduce_max(float* x, int64_t n) override { all_reduce(x, n, "all_reduce_max", &reduce_max<float>); }
    void all_reduce_sum_f64(double* x, int64_t n) override {
        all_reduce(x, n, "all_reduce_sum_f64", &reduce_sum<double>);
    }

    // Ring reduce-scatter: in step s a rank sends its partial sum of chunk (r−s−1) to the
    // right and adds the left neighbour's partial sum of chunk (r−s−2) into its own; after
    // size−1 steps chunk r has passed through every rank and ends, complete, at rank r.
    // Each slice's bytes are a plain sum, so any rank can see its own slice exactly.
    void reduce_scatter_sum(float* x, const std::vector<int64_t>& counts) override {
        const int p = size(), r = rank();
        check_counts(counts, "reduce_scatter_sum");
        std::vector<int64_t> offset(p + 1, 0);
        for (int i = 0; i < p; ++i) offset[i + 1] = offset[i] + counts[i];
        int64_t max_count = *std::max_element(counts.begin(), counts.end());
        if (max_count == 0) return;
        std::vector<float> tmp((size_t)max_count);
        const uint32_t tag = next_tag();
        guarded("reduce_scatter_sum", [&] {
            auto send_buf = ctx_->createUnboundBuffer(x, (size_t)offset[p] * sizeof(float));
            auto recv_buf = ctx_->createUnboundBuffer(tmp.data(), tmp.size() * sizeof(float));
            const int right = (r + 1) % p, left = (r + p - 1) % p;
            for (int s = 0; s < p - 1; ++s) {
                int send_chunk = ((r - s - 1) % p + p) % p;
                int recv_chunk = ((r - s - 2) % p + p) % p;
                bool sending = counts[send_chunk] > 0, receiving = counts[recv_chunk] > 0;
                if (sending)
                    send_buf->send(right, ring_slot(tag, s), (size_t)offset[send_chunk] * sizeof(float),
                                   (size_t)counts[send_chunk] * sizeof(float));
                if (receiving) {
                    recv_buf->recv(left, ring_slot(tag, s), 0, (size_t)counts[recv_chunk] * sizeof(float));
                    wait_recv(*recv_buf);
                    float* dst = x + offset[recv_chunk];
                    for (int64_t i = 0; i < counts[recv_chunk]; ++i) dst[i] += tmp[(size_t)i];
                }
                // The next step receives into tmp again and one unbound buffer carries
                // one operation at a time.
                if (sending) wait_send(*send_buf);
            }
        });
    }

    // Ring all-gather: in step s a rank forwards chunk (r−s) to the right and receives
    // chunk (r−s−1) from the left, straight into place.
    void all_gather(float* x, const std::vector<int64_t>& counts) override {
        const int p = size(), r = rank();
        check_counts(counts, "all_gather");
        std::vector<int64_t> offset(p + 1, 0);
        for (int i = 0; i < p; ++i) offset[i + 1] = offset[i] + counts[i];
        if (offset[p] == 0) return;
        const uint32_t tag = next_tag();
        guarded("all_gather", [&] {
            auto send_buf = ctx_->createUnboundBuffer(x, (size_t)offset[p] * sizeof(float));
            auto recv_buf = ctx_->createUnboundBuffer(x, (size_t)offset[p] * sizeof(float));
            const int right = (r + 1) % p, left = (r + p - 1) % p;
            for (int s = 0; s < p - 1; ++s) {
                int send_chunk = ((r - s) % p + p) % p;
                int recv_chunk = ((r - s - 1) % p + p) % p;
                bool sending = counts[send_chunk] > 0, receiving = counts[recv_chunk] > 0;
                if (sending)
                    send_buf->send(right, ring_slot(tag, s), (size_t)offset[send_chunk] * sizeof(float),
                                   (size_t)counts[send_chunk] * sizeof(float));
                if (receiving) {
                    recv_buf->recv(left, ring_slot(tag, s), (size_t)offset[recv_chunk] * sizeof(float),
                                   (size_t)counts[recv_chunk] * sizeof(float));
                    wait_recv(*recv_buf);
                }
                if (sending) wait_send(*send_buf);
            }
        });
    }

    void broadcast(float* x, int64_t n, int root) override {
        if (root < 0 || root >= size()) misuse("broadcast from root", root);
        if (n <= 0) return;
        const uint32_t tag = next_tag();
        guarded("broadcast", [&] {
            gloo::BroadcastOptions opts(ctx_);
            opts.setOutput(x, (size_t)n);  // the root's output doubles as its input
            opts.setRoot(root);
            opts.setTag(tag);
            opts.setTimeout(timeout_);
            gloo::broadcast(opts);
        });
    }

    void barrier() override {
        const uint32_t tag = next_tag();
        guarded("barrier", [&] {
            gloo::BarrierOptions opts(ctx_);
            opts.setTag(tag);
            opts.setTimeout(timeout_);
            gloo::barrier(opts);
        });
    }

    void send(const float* x, int64_t n, int peer, uint32_t tag) override {
        check_peer(peer, "send to");
        if (n <= 0) return;  // both sides know n; an empty message is no message
        guarded("send", [&] {
            // Gloo only reads through the pointer, but its buffer type is not const.
            auto buf = ctx_->createUnboundBuffer(const_cast<float*>(x), (size_t)n * sizeof(float));
            buf->send(peer, p2p_slot(tag));
            pending_sends_.push_back(std::move(buf));
        });
    }

    void recv(float* x, int64_t n, int peer, uint32_t tag) override {
        check_peer(peer, "recv from");
        if (n <= 0) return;
        guarded("recv", [&] {
            auto buf = ctx_->createUnboundBuffer(x, (size_t)n * sizeof(float));
            buf->recv(peer, p2p_slot(tag));
            wait_recv(*buf);
        });
    }

    void wait_sends() override {
        guarded("wait_sends", [&] {
            for (auto& b : pending_sends_) wait_send(*b);
        });
        pending_sends_.clear();
    }

private:
    template <class T>
    void all_reduce(T* x, int64_t n, const char* op, void (*fn)(void*, const void*, const void*, size_t)) {
        if (n <= 0) return;
        const uint32_t tag = next_tag();
        guarded(op, [&] {
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

    void check_counts(const std::vector<int64_t>& counts, const char* op) {
        if ((int)counts.size() != size())
            misuse(op, (int)counts.size());
        for (auto c : counts)
            if (c < 0) misuse(op, (int)c);
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
    FailureHandler on_failure_;
    uint32_t next_tag_ = 0;
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> pending_sends_;
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

std::unique_ptr<Communicator> make_self_communicator(const std::string& name, int global_rank) {
    return std::make_unique<SelfCommunicator>(name, global_rank);
}

Result<CommGroups> make_gloo_groups(KvClient& store, const RankLayout& layout, int rank, const CommOptions& options,
                                    FailureHandler on_failure) {
    CommGroups groups;
    if (rank < 0 || rank >= std::max(layout.world, 1))
        return fail({}, "RANK", "rank " + std::to_string(rank) + " is outside the layout's world of " +
                                    std::to_string(layout.world));
    if (layout.degree[DIM_CP] > 1)
        return fail({}, "parallel.cp", "context parallelism (cp = " + std::to_string(layout.degree[DIM_CP]) +
                                           ") is not supported by ptd-engine; allowed: 1");
    if (layout.world <= 1) {
        groups.world = make_self_communicator("world", rank);
        groups.tp = make_self_communicator("tp", rank);
        groups.pp = make_self_communicator("pp", rank);
        groups.dp = make_self_communicator("dp", rank);
        return groups;
    }

    // A rank whose peer died must get an error from Gloo, not be killed by SIGPIPE
    // writing to that peer's socket before anything could be reported.
    signal(SIGPIPE, SIG_IGN);

    const auto timeout = std::chrono::milliseconds((int64_t)(options.timeout_s * 1000));
    std::shared_ptr<gloo::transport::Device> device;
    auto attr = device_attr(options);
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
            out = std::make_unique<GlooCommunicator>(name, std::move(members), std::move(ctx), timeout, on_failure);
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
