// test_engine_ops.cpp — the CPU backend's kernels (engine/cpu/cpu_backend.cpp) against
// straightforward double-precision references written here, on small odd shapes.
//
// Every backward is checked against central finite differences of the double reference
// forward (loss = Σ out ⊙ R for a random R, so dout = R): a wrong backward fails even if
// it agrees with a wrong reference backward. Also: determinism (same call twice, and for
// the cross-row reductions 1 vs 2 threads → identical bits), the tagged allocator,
// vocab-padding masks, cross entropy over two vocab shards combined by hand (the TP
// all-reduce), the four GEMM transpose cases and AdamW against a hand-computed update.
//
// The CPU backend's "device" pointers are host pointers, so the tests pass std::vector
// storage straight to the ops (alloc/upload/download have their own test).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>

#include "ptd/engine/comm.h"
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ptd/engine/backend.h"

using namespace ptd::engine;

namespace {

using vecf = std::vector<float>;
using vecd = std::vector<double>;

vecf random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    vecf v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

vecd to_d(const vecf& v) { return vecd(v.begin(), v.end()); }

// |a − e| ≤ atol + rtol·|e| for every element; reports the first few failures by index.
void expect_close(const vecf& actual, const vecd& expected, double atol, double rtol, const std::string& what) {
    ASSERT_EQ(actual.size(), expected.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < actual.size(); i++) {
        const double tol = atol + rtol * std::fabs(expected[i]);
        if (!(std::fabs(actual[i] - expected[i]) <= tol)) {
            ADD_FAILURE() << what << "[" << i << "] = " << actual[i] << ", expected " << expected[i]
                          << " (tol " << tol << ")";
            if (++bad == 5) return;
        }
    }
}

bool same_bits(const vecf& a, const vecf& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double dot(const vecd& a, const vecd& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
    return s;
}

// Central differences of a scalar function of x, in double (h = 1e-5: truncation ~1e-10,
// rounding ~1e-11 for O(1) values — far below the fp32 tolerances used against it).
vecd numeric_grad(const std::function<double(const vecd&)>& f, vecd x, double h = 1e-5) {
    vecd g(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        const double xi = x[i];
        x[i] = xi + h;
        const double fp = f(x);
        x[i] = xi - h;
        const double fm = f(x);
        x[i] = xi;
        g[i] = (fp - fm) / (2 * h);
    }
    return g;
}

// ---- double references -------------------------------------------------------------------

void ln_ref(vecd& out, vecd& mean, vecd& rstd, const vecd& x, const vecd& w, const vecd& b, int64_t rows, int64_t C,
            double eps) {
    out.assign(rows * C, 0);
    mean.assign(rows, 0);
    rstd.assign(rows, 0);
    for (int64_t r = 0; r < rows; r++) {
        double m = 0, v = 0;
        for (int64_t i = 0; i < C; i++) m += x[r * C + i];
        m /= C;
        for (int64_t i = 0; i < C; i++) v += (x[r * C + i] - m) * (x[r * C + i] - m);
        const double rs = 1 / std::sqrt(v / C + eps);
        for (int64_t i = 0; i < C; i++) out[r * C + i] = (x[r * C + i] - m) * rs * w[i] + b[i];
        mean[r] = m;
        rstd[r] = rs;
    }
}

void rms_ref(vecd& out, vecd& rstd, const vecd& x, const vecd& w, int64_t rows, int64_t C, double eps) {
    out.assign(rows * C, 0);
    rstd.assign(rows, 0);
    for (int64_t r = 0; r < rows; r++) {
        double ss = 0;
        for (int64_t i = 0; i < C; i++) ss += x[r * C + i] * x[r * C + i];
        const double rs = 1 / std::sqrt(ss / C + eps);
        for (int64_t i = 0; i < C; i++) out[r * C + i] = x[r * C + i] * rs * w[i];
        rstd[r] = rs;
    }
}

double gelu_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double silu_ref(double x) { return x / (1 + std::exp(-x)); }

// x [B,T,nh,D], rotate-half pairs (i, i + D/2), angle (pos0 + t)·theta^(−2i/D).
vecd rope_ref(const vecd& x, int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0, double theta) {
    vecd y = x;
    const int64_t half = D / 2;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < nh; h++)
                for (int64_t i = 0; i < half; i++) {
                    const double ang = (pos0 + t) * std::pow(theta, -2.0 * i / D);
                    const int64_t o = ((b * T + t) * nh + h) * D;
                    const double x1 = x[o + i], x2 = x[o + i + half];
                    y[o + i] = x1 * std::cos(ang) - x2 * std::sin(ang);
                    y[o + i + half] = x1 * std::sin(ang) + x2 * std::cos(ang);
                }
    return y;
}

struct attn_shape {
    int64_t B, T, H, G, D;
};

// q [B,T,H,D], k/v [B,T,G,D] → ctx [B,T,H,D], probs [B,H,T,T].
void attn_ref(vecd& ctx, vecd& probs, const vecd& q, const vecd& k, const vecd& v, attn_shape s) {
    const auto [B, T, H, G, D] = s;
    ctx.assign(B * T * H * D, 0);
    probs.assign(B * H * T * T, 0);
    const double scale = 1 / std::sqrt(double(D));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h / (H / G);
            for (int64_t t = 0; t < T; t++) {
                vecd sc(t + 1);
                double mx = -1e300;
                for (int64_t u = 0; u <= t; u++) {
                    double d = 0;
                    for (int64_t i = 0; i < D; i++) d += q[((b * T + t) * H + h) * D + i] * k[((b * T + u) * G + g) * D + i];
                    sc[u] = d * scale;
                    mx = std::max(mx, sc[u]);
                }
                double sum = 0;
                for (auto& e : sc) sum += (e = std::exp(e - mx));
                for (int64_t u = 0; u <= t; u++) {
                    const double p = sc[u] / sum;
                    probs[((b * H + h) * T + t) * T + u] = p;
                    for (int64_t i = 0; i < D; i++) ctx[((b * T + t) * H + h) * D + i] += p * v[((b * T + u) * G + g) * D + i];
                }
            }
        }
}

// The textbook backward (checked against finite differences in AttentionBackward).
void attn_bwd_ref(vecd& dq, vecd& dk, vecd& dv, const vecd& dctx, const vecd& q, const vecd& k, const vecd& v,
                  attn_shape s) {
    const auto [B, T, H, G, D] = s;
    vecd ctx, P;
    attn_ref(ctx, P, q, k, v, s);
    dq.assign(q.size(), 0);
    dk.assign(k.size(), 0);
    dv.assign(v.size(), 0);
    const double scale = 1 / std::sqrt(double(D));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h / (H / G);
            for (int64_t t = 0; t < T; t++) {
                const double* dc = &dctx[((b * T + t) * H + h) * D];
                vecd dp(t + 1);
                double rho = 0;
                for (int64_t u = 0; u <= t; u++) {
                    double d = 0;
                    for (int64_t i = 0; i < D; i++) d += dc[i] * v[((b * T + u) * G + g) * D + i];
                    dp[u] = d;
                    rho += P[((b * H + h) * T + t) * T + u] * d;
                }
                for (int64_t u = 0; u <= t; u++) {
                    const double p = P[((b * H + h) * T + t) * T + u];
                    const double ds = p * (dp[u] - rho) * scale;
                    for (int64_t i = 0; i < D; i++) {
                        dq[((b * T + t) * H + h) * D + i] += ds * k[((b * T + u) * G + g) * D + i];
                        dk[((b * T + u) * G + g) * D + i] += ds * q[((b * T + t) * H + h) * D + i];
                        dv[((b * T + u) * G + g) * D + i] += p * dc[i];
                    }
                }
            }
        }
}

// loss[r] = log Σ_{c < V_valid} e^{l[r,c]} − l[r, target]; probs over the valid columns.
void xent_ref(vecd& loss, vecd& probs, const vecd& logits, const std::vector<int32_t>& tgt, int64_t rows, int64_t V,
              int64_t V_valid) {
    loss.assign(rows, 0);
    probs.assign(rows * V, 0);
    for (int64_t r = 0; r < rows; r++) {
        double mx = -1e300, s = 0;
        for (int64_t c = 0; c < V_valid; c++) mx = std::max(mx, logits[r * V + c]);
        for (int64_t c = 0; c < V_valid; c++) s += std::exp(logits[r * V + c] - mx);
        for (int64_t c = 0; c < V_valid; c++) probs[r * V + c] = std::exp(logits[r * V + c] - mx) / s;
        loss[r] = std::log(s) + mx - logits[r * V + tgt[r]];
    }
}

std::unique_ptr<Backend> backend(int threads = 2) { return make_cpu_backend(threads); }

// ---- memory --------------------------------------------------------------------------------

// attention_backward's scratch, sized as the engine plans it at start-up (the backend
// states bytes for the precision).
vecf attention_workspace(const ptd::engine::Backend& be, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D,
                         DType t = DType::f32) {
    return vecf((size_t)(be.attention_backward_workspace(t, B, T, H, G, D) + 3) / 4);
}

// Planned memory: once the engine sealed the allocator after start-up, any allocation (an
// op's scratch, a step's temporary) stops the process naming the buffer.
TEST(EngineOpsMemory, SealedAllocatorRefusesEveryAllocation) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    auto be = backend();
    void* before = be->alloc(MEM_WORKSPACE, 64, "planned");
    be->seal_allocations(true);
    EXPECT_DEATH(be->alloc(MEM_WORKSPACE, 64, "late scratch"), "allocation after start-up: 64 bytes for late scratch");
    EXPECT_DEATH(be->alloc_host(16, "late staging"), "host allocation after start-up: 16 bytes for late staging");
    be->release(before);  // releasing is fine (teardown)
    be->seal_allocations(false);
    be->release(be->alloc(MEM_WORKSPACE, 8, "after teardown"));
}

// The ops that used to allocate scratch take it from the caller: attention backward (its
// planned workspace), RoPE (a table built once), the gradient norm (no allocation); in
// bf16/fp16 the CPU backend's widening scratch is planned at start-up too
// (plan_operand_scratch), so a sealed 16-bit run allocates nothing either.
TEST(EngineOpsMemory, OpsAllocateNothing) {
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
        SCOPED_TRACE(int(t));
        auto be = backend(2);
        const attn_shape sh{2, 70, 4, 2, 8};
        const auto [B, T, H, G, D] = sh;
        const int64_t ld = (H + 2 * G) * D, n_qkv = B * T * ld;
        const size_t e = (size_t)ptd::engine::dtype_bytes(t);
        std::vector<uint8_t> qkv(n_qkv * e), dqkv(n_qkv * e), ctx(B * T * H * D * e), probs(B * H * T * T * e),
            dctx(B * T * H * D * e);
        const vecf q32 = random_vec(n_qkv, 1), d32 = random_vec(B * T * H * D, 4);
        be->convert(qkv.data(), t, q32.data(), DType::f32, n_qkv);
        be->convert(dctx.data(), t, d32.data(), DType::f32, B * T * H * D);
        vecf ws = attention_workspace(*be, B, T, H, G, D, t), table(T * D);
        be->rope_table(table.data(), T, D, 10000.0f);
        be->plan_operand_scratch(t, B * H * T * T, 0);  // the largest operand here: probs
        EXPECT_EQ(be->operand_scratch_bytes(t, B * H * T * T, 0), t == DType::f32 ? 0 : 5 * 4 * B * H * T * T);
        const MemStats m0 = be->mem_stats();
        be->seal_allocations(true);
        be->rope_forward(t, qkv.data(), ld, B, T, H, D, 0, table.data(), T);
        be->attention_forward(t, ctx.data(), probs.data(), qkv.data(), B, T, H, G, D, ws.data());
        be->attention_backward(t, dqkv.data(), dctx.data(), probs.data(), qkv.data(), B, T, H, G, D, ws.data());
        be->rope_backward(t, dqkv.data(), ld, B, T, H, D, 0, table.data(), T);
        vecf dq32(n_qkv);
        be->convert(dq32.data(), DType::f32, dqkv.data(), t, n_qkv);
        double acc = 0;
        be->sum_squares(&acc, dq32.data(), n_qkv);
        be->seal_allocations(false);
        const MemStats m1 = be->mem_stats();
        EXPECT_EQ(m1.total_peak, m0.total_peak);
        EXPECT_GT(acc, 0.0);
    }
}

// An operand larger than the planned scratch is a programmer error the sealed backend
// names, not a silent allocation inside a step.
TEST(EngineOpsMemory, OperandBeyondThePlannedScratchStops) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    auto be = backend();
    be->plan_operand_scratch(DType::bf16, 16, 0);
    be->seal_allocations(true);
    std::vector<uint16_t> y(32), x(32);
    be->add(y.data(), x.data(), DType::bf16, 16);  // fits
    EXPECT_DEATH(be->add(y.data(), x.data(), DType::bf16, 32),
                 "allocation after start-up: 128 bytes for 16-bit operand widened to f32");
    be->seal_allocations(false);
}

// A stream-checking backend and a one-rank communicator of `group` whose memory accesses it
// checks (death tests run threadsafe: the backend has threads).
struct CheckedStreams {
    std::unique_ptr<Backend> be;
    std::unique_ptr<Communicator> comm;
};
CheckedStreams checked_streams(const std::string& group) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    CheckedStreams s{make_stream_checking_backend(backend()), make_self_communicator(group, 0)};
    Backend* be = s.be.get();
    s.comm->set_access_observer(
        [be](const void* x, size_t n, bool write, const char* op) { be->note_comm_access(x, n, write, op); });
    return s;
}

// Streams and events: the stream-checking backend stops a communicator read of memory
// whose last compute write the comm stream has not waited for (a GPU would send stale
// data), and accepts it once an event recorded after the write was waited for.
TEST(EngineStreams, CommReadBeforeTheComputeEventIsCaught) {
    auto [be, comm] = checked_streams("tp");
    const Event ready = be->create_event("compute done"), done = be->create_event("comm done");
    auto* a = static_cast<float*>(be->alloc(MEM_WORKSPACE, 64 * sizeof(float), "partial sums"));
    auto* w = static_cast<float*>(be->alloc(MEM_PARAMS, 64 * sizeof(float), "w"));
    be->gemm(false, false, 8, 8, 8, 1.0f, w, w, 0.0f, a);  // compute writes a
    // Without the event the comm stream could read a before the GEMM finished.
    EXPECT_DEATH(comm->all_reduce_sum(a, 64),
                 "the comm stream's all_reduce reads 256 bytes of \"partial sums\", written by compute op #1 \\(gemm\\)");
    {
        CommOnStream on_comm(*be, ready, done);  // record on compute, wait on comm
        comm->all_reduce_sum(a, 64);
        comm->all_gather(a + 16, 16, DType::f32);  // an interior pointer of the same buffer
    }
    be->scale(a, 2.0f, 64);  // a new write after the event: not visible to comm again
    EXPECT_DEATH(comm->reduce_scatter(a, 64, DType::f32, ReduceOp::sum), "written by compute op #2 \\(scale\\)");
    // The other direction: compute must wait for the comm stream before it uses what a
    // collective wrote (a GPU kernel would read the buffer while the collective runs).
    {
        CommOnStream on_comm(*be, ready, done);
        comm->all_reduce_sum(a, 64);
    }
    be->record_event(ready, Stream::compute);
    be->wait_event(Stream::comm, ready);
    comm->all_reduce_sum(a, 64);  // no event recorded on comm, none waited for by compute
    EXPECT_DEATH(be->add(w, a, DType::f32, 64), "compute op add uses \"partial sums\", written by the comm stream's all_reduce");
    be->record_event(done, Stream::comm);
    be->wait_event(Stream::compute, done);
    be->add(w, a, DType::f32, 64);  // now ordered
    // Waiting for an event nobody recorded is a bug too.
    const Event never = be->create_event("never recorded");
    EXPECT_DEATH(be->wait_event(Stream::comm, never), "never recorded");
    be->release(a);
    be->release(w);
}

TEST(EngineOpsMemory, AllocTagsAlignsZeroFillsAndTracksPeaks) {
    auto be = backend();
    EXPECT_STREQ(be->name(), "cpu");
    auto* a = static_cast<float*>(be->alloc(MEM_PARAMS, 1000 * sizeof(float), "a"));
    auto* b = static_cast<float*>(be->alloc(MEM_ACTIVATIONS, 333, "b"));
    auto* c = static_cast<float*>(be->alloc(MEM_ACTIVATIONS, 4096, "c"));
    for (void* p : {(void*)a, (void*)b, (void*)c}) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    for (int i = 0; i < 1000; i++) ASSERT_EQ(a[i], 0.0f);
    for (int i = 0; i < 1024; i++) ASSERT_EQ(c[i], 0.0f);

    MemStats s = be->mem_stats();
    EXPECT_EQ(s.current[MEM_PARAMS], 4000);
    EXPECT_EQ(s.current[MEM_ACTIVATIONS], 333 + 4096);
    EXPECT_EQ(s.current[MEM_GRADS], 0);
    EXPECT_EQ(s.total_current, 4000 + 333 + 4096);
    EXPECT_EQ(s.total_peak, 4000 + 333 + 4096);

    // upload/download round trip through backend memory
    vecf src = random_vec(1000, 1), back(1000);
    be->upload(a, src.data(), 4000);
    be->download(back.data(), a, 4000);
    EXPECT_TRUE(same_bits(src, back));

    be->release(c);  // activations: current drops, peak stays
    be->release(nullptr);
    s = be->mem_stats();
    EXPECT_EQ(s.current[MEM_ACTIVATIONS], 333);
    EXPECT_EQ(s.peak[MEM_ACTIVATIONS], 333 + 4096);
    EXPECT_EQ(s.total_current, 4000 + 333);
    EXPECT_EQ(s.total_peak, 4000 + 333 + 4096);

    // The total peak is the high-water mark of the sum, not the sum of the category peaks.
    void* w = be->alloc(MEM_WORKSPACE, 100, "w");
    s = be->mem_stats();
    EXPECT_EQ(s.peak[MEM_WORKSPACE], 100);
    EXPECT_EQ(s.total_peak, 4000 + 333 + 4096);  // 4433 now < 8429 before
    be->release(w);

    be->reset_peaks();
    s = be->mem_stats();
    for (int cat = 0; cat < MEM_CATEGORY_COUNT; cat++) EXPECT_EQ(s.peak[cat], s.current[cat]) << cat;
    EXPECT_EQ(s.peak[MEM_ACTIVATIONS], 333);
    EXPECT_EQ(s.total_peak, 4000 + 333);

    void* z = be->alloc(MEM_OPTIMIZER, 0, "empty");  // zero bytes: a valid, releasable pointer
    EXPECT_NE(z, nullptr);
    be->release(z);
    be->release(a);
    be->release(b);
    s = be->mem_stats();
    EXPECT_EQ(s.total_current, 0);
    for (int cat = 0; cat < MEM_CATEGORY_COUNT; cat++) EXPECT_EQ(s.current[cat], 0) << cat;
}

TEST(EngineOpsMemory, OutOfMemoryIsFatalWithSizeWhatAndCategory) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    auto be = backend(1);
    EXPECT_EXIT(be->alloc(MEM_GRADS, SIZE_MAX / 4, "grad buffer"), testing::ExitedWithCode(1),
                "ptd-engine: error: out of memory allocating [0-9]+ bytes for grad buffer \\(grads\\)");
}

// ---- elementwise ---------------------------------------------------------------------------

TEST(EngineOps, Elementwise) {
    auto be = backend();
    const int64_t n = 100003;  // above the parallel threshold, odd
    vecf x = random_vec(n, 2), y = random_vec(n, 3), y0 = y;
    be->add(y.data(), x.data(), DType::f32, n);
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(y[i], y0[i] + x[i]);
    be->scale(y.data(), -0.25f, n);
    for (int64_t i = 0; i < n; i++) ASSERT_EQ(y[i], (y0[i] + x[i]) * -0.25f);
    be->copy(y.data(), x.data(), DType::f32, n);
    EXPECT_TRUE(same_bits(x, y));
    be->fill(y.data(), DType::f32, 1.5f, 7);
    for (int i = 0; i < 7; i++) EXPECT_EQ(y[i], 1.5f);
    EXPECT_EQ(y[7], x[7]);
}

TEST(EngineOps, SumSquaresInDoubleAndThreadCountIndependent) {
    const int64_t n = 300007;  // several fixed chunks
    vecf x = random_vec(n, 4, -3.0f, 3.0f);
    double ref = 0;
    for (float v : x) ref += double(v) * v;
    // The result is added to a device scalar (nothing returns to the host).
    auto sum_squares = [&](ptd::engine::Backend& be, int64_t count, double start = 0) {
        double acc = start;
        be.sum_squares(&acc, x.data(), count);
        return acc;
    };
    auto be1 = backend(1);
    const double s1 = sum_squares(*be1, n);
    auto be2 = backend(2);
    const double s2 = sum_squares(*be2, n);
    EXPECT_NEAR(s2, ref, 1e-12 * ref);
    EXPECT_EQ(std::bit_cast<uint64_t>(s1), std::bit_cast<uint64_t>(s2));
    EXPECT_EQ(sum_squares(*be2, 0), 0.0);
    EXPECT_EQ(sum_squares(*be2, 0, 2.5), 2.5);
    EXPECT_EQ(sum_squares(*be2, 3), double(x[0]) * x[0] + double(x[1]) * x[1] + double(x[2]) * x[2]);
    EXPECT_EQ(sum_squares(*be2, 3, 1.0), 1.0 + (double(x[0]) * x[0] + double(x[1]) * x[1] + double(x[2]) * x[2]));
}

// sum_into adds Σ x (in double, index order) to a device scalar.
TEST(EngineOps, SumIntoAccumulatesInDouble) {
    auto be = backend();
    const vecf x = {1.0f, 1e-8f, -0.5f, 3.25f};
    double acc = 10.0;
    be->sum_into(&acc, x.data(), 4);
    EXPECT_EQ(acc, 10.0 + (((1.0 + double(1e-8f)) - 0.5) + 3.25));
    be->sum_into(&acc, x.data(), 0);
    EXPECT_EQ(acc, 10.0 + (((1.0 + double(1e-8f)) - 0.5) + 3.25));
}

// The step's scalars: norm (unscaled by the loss scale), clip scale (rounded to float, as
// AdamW applies it), the grad scale AdamW multiplies by and the found-inf flag — the one
// overflow check of every precision — are derived on the device.
TEST(EngineOps, FinishStepScalarsDerivesNormClipAndFoundInf) {
    using namespace ptd::engine;
    auto be = backend();
    double s[STEP_SCALAR_COUNT] = {};
    s[SCALAR_LOSS_SUM] = 7.0;
    s[SCALAR_GRAD_SQUARES] = 16.0;
    be->finish_step_scalars(s, 1.0, 1.0);
    EXPECT_EQ(s[SCALAR_GRAD_NORM], 4.0);
    EXPECT_EQ(s[SCALAR_CLIP_SCALE], (double)(float)(1.0 / (4.0 + 1e-6)));
    EXPECT_EQ(s[SCALAR_GRAD_SCALE], s[SCALAR_CLIP_SCALE]);
    EXPECT_EQ(s[SCALAR_LOSS_SCALE], 1.0);
    EXPECT_EQ(s[SCALAR_FOUND_INF], 0.0);
    be->finish_step_scalars(s, 0.0, 1.0);  // no clipping
    EXPECT_EQ(s[SCALAR_CLIP_SCALE], 1.0);
    be->finish_step_scalars(s, 5.0, 1.0);  // below the threshold
    EXPECT_EQ(s[SCALAR_CLIP_SCALE], 1.0);
    // fp16: the main grads carry the loss scale 1024; the norm and the clip are unscaled and
    // AdamW's factor unscales: 64² · 4² = 16 · 1024², so ‖g‖ = 4 again.
    s[SCALAR_GRAD_SQUARES] = 16.0 * 1024.0 * 1024.0;
    be->finish_step_scalars(s, 1.0, 1024.0);
    EXPECT_EQ(s[SCALAR_GRAD_NORM], 4.0);
    EXPECT_EQ(s[SCALAR_LOSS_SCALE], 1024.0);
    EXPECT_EQ(s[SCALAR_CLIP_SCALE], (double)(float)(1.0 / (4.0 + 1e-6)));
    EXPECT_EQ(s[SCALAR_GRAD_SCALE], (double)(float)((double)(float)(1.0 / (4.0 + 1e-6)) / 1024.0));
    EXPECT_EQ(s[SCALAR_FOUND_INF], 0.0);
    s[SCALAR_GRAD_SQUARES] = std::numeric_limits<double>::infinity();  // an fp16 overflow
    be->finish_step_scalars(s, 1.0, 1024.0);
    EXPECT_EQ(s[SCALAR_FOUND_INF], 1.0);
    s[SCALAR_GRAD_SQUARES] = 1.0;
    s[SCALAR_LOSS_SUM] = std::nan("");
    be->finish_step_scalars(s, 1.0, 1.0);
    EXPECT_EQ(s[SCALAR_FOUND_INF], 1.0);
}

// One micro-batch's [B, T+1] ids become inputs (0..T−1) and targets (1..T) on the device.
TEST(EngineOps, SplitTokensCutsInputsAndTargets) {
    auto be = backend();
    const std::vector<int32_t> seq = {1, 2, 3, 4, 10, 20, 30, 40};  // B 2, T 3
    std::vector<int32_t> in(6, -1), tg(6, -1);
    be->split_tokens(in.data(), tg.data(), seq.data(), 2, 3);
    EXPECT_EQ(in, (std::vector<int32_t>{1, 2, 3, 10, 20, 30}));
    EXPECT_EQ(tg, (std::vector<int32_t>{2, 3, 4, 20, 30, 40}));
    std::vector<int32_t> only(6, -1);
    be->split_tokens(nullptr, only.data(), seq.data(), 2, 3);
    EXPECT_EQ(only, tg);
}

// ---- GEMM --------------------------------------------------------------------------------------

TEST(EngineOps, GemmAllFourTransposeCases) {
    auto be = backend();
    const int64_t M = 7, N = 5, K = 13;
    const float alpha = 0.7f, beta = 0.3f;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            vecf A = random_vec(M * K, 10 + ta), B = random_vec(K * N, 20 + tb), C = random_vec(M * N, 30);
            vecd ref(M * N);
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double s = 0;
                    for (int64_t p = 0; p < K; p++) {
                        const double a = ta ? A[p * M + i] : A[i * K + p];  // A stored [K,M] when trans_a
                        const double b = tb ? B[j * K + p] : B[p * N + j];  // B stored [N,K] when trans_b
                        s += a * b;
                    }
                    ref[i * N + j] = alpha * s + beta * C[i * N + j];
                }
            be->gemm(ta, tb, M, N, K, alpha, A.data(), B.data(), beta, C.data());
            expect_close(C, ref, 1e-5, 1e-5, "gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
        }
    // K = 0: C = beta·C; beta = 0 overwrites.
    vecf C = random_vec(M * N, 31), C0 = C;
    be->gemm(false, false, M, N, 0, 1.0f, nullptr, nullptr, 0.5f, C.data());
    for (int64_t i = 0; i < M * N; i++) EXPECT_EQ(C[i], C0[i] * 0.5f);
    be->gemm(false, false, M, N, 0, 1.0f, nullptr, nullptr, 0.0f, C.data());
    for (float c : C) EXPECT_EQ(c, 0.0f);
}

TEST(EngineOps, BiasAddAndGrad) {
    auto be = backend();
    const int64_t rows = 7, cols = 13;
    vecf y = random_vec(rows * cols, 40), bias = random_vec(cols, 41), y0 = y;
    be->bias_add(y.data(), bias.data(), DType::f32, rows, cols);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) ASSERT_EQ(y[r * cols + c], y0[r * cols + c] + bias[c]);

    // dbias += Σ_r dy; finite differences of Σ (y + bias) ⊙ R with respect to bias.
    vecf dy = random_vec(rows * cols, 42), db = random_vec(cols, 43), db0 = db;
    be->bias_grad(db.data(), dy.data(), DType::f32, rows, cols);
    const vecd R = to_d(dy);
    const vecd num = numeric_grad(
        [&](const vecd& b) {
            double s = 0;
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++) s += (y0[r * cols + c] + b[c]) * R[r * cols + c];
            return s;
        },
        to_d(bias));
    vecd expect(cols);
    for (int64_t c = 0; c < cols; c++) expect[c] = db0[c] + num[c];
    expect_close(db, expect, 1e-5, 1e-5, "bias_grad");
}

// ---- norms ---------------------------------------------------------------------------------

TEST(EngineOps, LayerNormForwardAndBackward) {
    auto be = backend();
    const int64_t rows = 7, C = 13;
    const float eps = 1e-5f;
    vecf x = random_vec(rows * C, 50, -2.0f, 2.0f), w = random_vec(C, 51), b = random_vec(C, 52);
    for (int64_t i = 0; i < C; i++) x[3 * C + i] += 50.0f;  // a row with |mean| ≫ std
    vecf out(rows * C), mean(rows), rstd(rows);
    be->layernorm_forward(DType::f32, out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, C, eps);
    vecd ro, rm, rr;
    ln_ref(ro, rm, rr, to_d(x), to_d(w), to_d(b), rows, C, eps);
    expect_close(out, ro, 1e-5, 1e-5, "layernorm out");
    expect_close(mean, rm, 1e-6, 1e-6, "layernorm mean");
    expect_close(rstd, rr, 1e-6, 1e-5, "layernorm rstd");

    vecf dout = random_vec(rows * C, 53), dx(rows * C, 99.0f), dw = random_vec(C, 54), db = random_vec(C, 55);
    const vecf dw0 = dw, db0 = db;
    be->layernorm_backward(DType::f32, dx.data(), dw.data(), db.data(), dout.data(), x.data(), mean.data(), rstd.data(), w.data(),
                           rows, C, false);
    const vecd R = to_d(dout), xd = to_d(x), wd = to_d(w), bd = to_d(b);
    auto loss = [&](const vecd& xx, const vecd& ww, const vecd& bb) {
        vecd o, m, r;
        ln_ref(o, m, r, xx, ww, bb, rows, C, eps);
        return dot(o, R);
    };
    const vecd ndx = numeric_grad([&](const vecd& v) { return loss(v, wd, bd); }, xd);
    vecd ndw = numeric_grad([&](const vecd& v) { return loss(xd, v, bd); }, wd);
    vecd ndb = numeric_grad([&](const vecd& v) { return loss(xd, wd, v); }, bd);
    for (int64_t i = 0; i < C; i++) ndw[i] += dw0[i], ndb[i] += db0[i];  // dw, db accumulate
    expect_close(dx, ndx, 2e-5, 1e-4, "layernorm dx");
    expect_close(dw, ndw, 2e-5, 1e-4, "layernorm dw");
    expect_close(db, ndb, 2e-5, 1e-4, "layernorm db");
}

TEST(EngineOps, RmsNormForwardAndBackward) {
    auto be = backend();
    const int64_t rows = 7, C = 13;
    const float eps = 1e-6f;
    vecf x = random_vec(rows * C, 60, -2.0f, 2.0f), w = random_vec(C, 61);
    vecf out(rows * C), rstd(rows);
    be->rmsnorm_forward(DType::f32, out.data(), rstd.data(), x.data(), w.data(), rows, C, eps);
    vecd ro, rr;
    rms_ref(ro, rr, to_d(x), to_d(w), rows, C, eps);
    expect_close(out, ro, 1e-5, 1e-5, "rmsnorm out");
    expect_close(rstd, rr, 1e-6, 1e-5, "rmsnorm rstd");

    vecf dout = random_vec(rows * C, 62), dx(rows * C, 99.0f), dw = random_vec(C, 63);
    const vecf dw0 = dw;
    be->rmsnorm_backward(DType::f32, dx.data(), dw.data(), dout.data(), x.data(), rstd.data(), w.data(), rows, C, false);
    const vecd R = to_d(dout), xd = to_d(x), wd = to_d(w);
    auto loss = [&](const vecd& xx, const vecd& ww) {
        vecd o, r;
        rms_ref(o, r, xx, ww, rows, C, eps);
        return dot(o, R);
    };
    const vecd ndx = numeric_grad([&](const vecd& v) { return loss(v, wd); }, xd);
    vecd ndw = numeric_grad([&](const vecd& v) { return loss(xd, v); }, wd);
    for (int64_t i = 0; i < C; i++) ndw[i] += dw0[i];
    expect_close(dx, ndx, 2e-5, 1e-4, "rmsnorm dx");
    expect_close(dw, ndw, 2e-5, 1e-4, "rmsnorm dw");
}

// ---- activations ---------------------------------------------------------------------------

TEST(EngineOps, GeluForwardAndBackward) {
    auto be = backend();
    vecf x = random_vec(101, 70, -4.0f, 4.0f);
    for (float v : {-30.0f, -10.0f, -5.0f, -1e-3f, 0.0f, 1e-3f, 5.0f, 10.0f, 30.0f}) x.push_back(v);
    const int64_t n = (int64_t)x.size();
    vecf out(n), dout = random_vec(n, 71), dx(n);
    be->gelu_forward(DType::f32, out.data(), x.data(), n);
    vecd ref(n);
    for (int64_t i = 0; i < n; i++) ref[i] = gelu_ref(x[i]);
    expect_close(out, ref, 1e-6, 1e-5, "gelu");
    be->gelu_backward(DType::f32, dx.data(), x.data(), dout.data(), n);
    const vecd R = to_d(dout);
    const vecd num = numeric_grad(
        [&](const vecd& v) {
            double s = 0;
            for (int64_t i = 0; i < n; i++) s += gelu_ref(v[i]) * R[i];
            return s;
        },
        to_d(x));
    expect_close(dx, num, 1e-5, 1e-4, "gelu dx");
}

TEST(EngineOps, SwigluForwardAndBackward) {
    auto be = backend();
    const int64_t n = 103;
    vecf gate = random_vec(n, 80, -6.0f, 6.0f), up = random_vec(n, 81, -2.0f, 2.0f);
    gate[0] = -100.0f, gate[1] = 100.0f;
    vecf out(n), dout = random_vec(n, 82), dg(n), du(n);
    be->swiglu_forward(DType::f32, out.data(), gate.data(), up.data(), n);
    vecd ref(n);
    for (int64_t i = 0; i < n; i++) ref[i] = silu_ref(gate[i]) * up[i];
    expect_close(out, ref, 1e-6, 1e-5, "swiglu");
    be->swiglu_backward(DType::f32, dg.data(), du.data(), dout.data(), gate.data(), up.data(), n);
    const vecd R = to_d(dout), gd = to_d(gate), ud = to_d(up);
    auto loss = [&](const vecd& g, const vecd& u) {
        double s = 0;
        for (int64_t i = 0; i < n; i++) s += silu_ref(g[i]) * u[i] * R[i];
        return s;
    };
    expect_close(dg, numeric_grad([&](const vecd& v) { return loss(v, ud); }, gd), 1e-5, 1e-4, "swiglu dgate");
    expect_close(du, numeric_grad([&](const vecd& v) { return loss(gd, v); }, ud), 1e-5, 1e-4, "swiglu dup");
}

// ---- attention -----------------------------------------------------------------------------


TEST(EngineOps, RopeForwardBackward) {
    auto be = backend();
    const int64_t B = 2, T = 5, nh = 3, D = 8;
    const float theta = 10000.0f;
    // The angle table is built once (at start-up in the engine) for every position used.
    const int64_t positions = 5000 + T;
    vecf table(2 * positions * D / 2);
    be->rope_table(table.data(), positions, D, theta);
    for (int64_t pos0 : {int64_t{0}, int64_t{3}, int64_t{5000}}) {
        vecf x = random_vec(B * T * nh * D, 90), y = x;
        be->rope_forward(DType::f32, y.data(), nh * D, B, T, nh, D, pos0, table.data(), positions);
        expect_close(y, rope_ref(to_d(x), B, T, nh, D, pos0, theta), 1e-6, 1e-5, "rope pos0=" + std::to_string(pos0));

        // backward: the gradient of Σ rope(x) ⊙ R with respect to x
        vecf dy = random_vec(x.size(), 91), dx = dy;
        be->rope_backward(DType::f32, dx.data(), nh * D, B, T, nh, D, pos0, table.data(), positions);
        const vecd R = to_d(dy);
        const vecd num =
            numeric_grad([&](const vecd& v) { return dot(rope_ref(v, B, T, nh, D, pos0, theta), R); }, to_d(x));
        expect_close(dx, num, 1e-5, 1e-4, "rope dx pos0=" + std::to_string(pos0));

        // the inverse rotation undoes the forward
        be->rope_backward(DType::f32, y.data(), nh * D, B, T, nh, D, pos0, table.data(), positions);
        expect_close(y, to_d(x), 1e-6, 1e-5, "rope roundtrip");
    }
}

// The backend's attention works on the fused projection [B·T, (H + 2G)·D] (q, k, v
// column blocks of each token row); the tests keep q, k, v apart and pack them here.
vecf pack_qkv(const float* q, const float* k, const float* v, int64_t BT, int64_t H, int64_t G, int64_t D) {
    const int64_t ld = (H + 2 * G) * D;
    vecf x(BT * ld);
    for (int64_t r = 0; r < BT; r++) {
        std::copy(q + r * H * D, q + (r + 1) * H * D, x.begin() + r * ld);
        std::copy(k + r * G * D, k + (r + 1) * G * D, x.begin() + r * ld + H * D);
        std::copy(v + r * G * D, v + (r + 1) * G * D, x.begin() + r * ld + (H + G) * D);
    }
    return x;
}
void attn_fwd(Backend& be, float* ctx, float* probs, const float* q, const float* k, const float* v, int64_t B,
              int64_t T, int64_t H, int64_t G, int64_t D) {
    const vecf qkv = pack_qkv(q, k, v, B * T, H, G, D);
    be.attention_forward(DType::f32, ctx, probs, qkv.data(), B, T, H, G, D,
                         attention_workspace(be, B, T, H, G, D).data());
}
void attn_bwd(Backend& be, float* dq, float* dk, float* dv, const float* dctx, const float* probs, const float* q,
              const float* k, const float* v, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
    const vecf qkv = pack_qkv(q, k, v, B * T, H, G, D);
    const int64_t ld = (H + 2 * G) * D;
    vecf d(qkv.size(), 9.0f);  // garbage: must be overwritten
    be.attention_backward(DType::f32, d.data(), dctx, probs, qkv.data(), B, T, H, G, D,
                          attention_workspace(be, B, T, H, G, D).data());
    for (int64_t r = 0; r < B * T; r++) {
        std::copy(d.begin() + r * ld, d.begin() + r * ld + H * D, dq + r * H * D);
        std::copy(d.begin() + r * ld + H * D, d.begin() + r * ld + (H + G) * D, dk + r * G * D);
        std::copy(d.begin() + r * ld + (H + G) * D, d.begin() + (r + 1) * ld, dv + r * G * D);
    }
}

struct attn_data {
    attn_shape s;
    vecf q, k, v;
};

attn_data make_attn(attn_shape s, uint32_t seed) {
    return {s, random_vec(s.B * s.T * s.H * s.D, seed, -2.0f, 2.0f), random_vec(s.B * s.T * s.G * s.D, seed + 1, -2.0f, 2.0f),
            random_vec(s.B * s.T * s.G * s.D, seed + 2)};
}

void check_attention_forward(Backend& be, const attn_data& a) {
    const auto [B, T, H, G, D] = a.s;
    vecf ctx(B * T * H * D, 7.0f), probs(B * H * T * T, 7.0f);  // garbage: must be overwritten
    attn_fwd(be, ctx.data(), probs.data(), a.q.data(), a.k.data(), a.v.data(), B, T, H, G, D);
    vecd rc, rp;
    attn_ref(rc, rp, to_d(a.q), to_d(a.k), to_d(a.v), a.s);
    expect_close(ctx, rc, 1e-5, 1e-5, "attention ctx");
    expect_close(probs, rp, 1e-6, 1e-5, "attention probs");
    for (int64_t bh = 0; bh < B * H; bh++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t u = t + 1; u < T; u++) ASSERT_EQ(probs[(bh * T + t) * T + u], 0.0f) << "above the diagonal";
}

TEST(EngineOps, AttentionForwardGqa) {
    auto be = backend();
    check_attention_forward(*be, make_attn({2, 5, 4, 2, 8}, 100));   // GQA, H/G = 2
    check_attention_forward(*be, make_attn({1, 6, 3, 3, 4}, 110));   // MHA
    check_attention_forward(*be, make_attn({1, 130, 4, 1, 16}, 120));  // several 64-row blocks, MQA
}

TEST(EngineOps, AttentionBackwardFiniteDifferences) {
    auto be = backend();
    const attn_data a = make_attn({2, 5, 4, 2, 8}, 200);
    const auto [B, T, H, G, D] = a.s;
    vecf ctx(B * T * H * D), probs(B * H * T * T);
    attn_fwd(*be, ctx.data(), probs.data(), a.q.data(), a.k.data(), a.v.data(), B, T, H, G, D);
    vecf dctx = random_vec(ctx.size(), 210);
    vecf dq(a.q.size(), 9.0f), dk(a.k.size(), 9.0f), dv(a.v.size(), 9.0f);  // overwritten, not +=
    attn_bwd(*be, dq.data(), dk.data(), dv.data(), dctx.data(), probs.data(), a.q.data(), a.k.data(),
                           a.v.data(), B, T, H, G, D);
    const vecd R = to_d(dctx), qd = to_d(a.q), kd = to_d(a.k), vd = to_d(a.v);
    auto loss = [&](const vecd& q, const vecd& k, const vecd& v) {
        vecd c, p;
        attn_ref(c, p, q, k, v, a.s);
        return dot(c, R);
    };
    const vecd nq = numeric_grad([&](const vecd& x) { return loss(x, kd, vd); }, qd);
    const vecd nk = numeric_grad([&](const vecd& x) { return loss(qd, x, vd); }, kd);
    const vecd nv = numeric_grad([&](const vecd& x) { return loss(qd, kd, x); }, vd);
    expect_close(dq, nq, 2e-5, 1e-4, "attention dq");
    expect_close(dk, nk, 2e-5, 1e-4, "attention dk");
    expect_close(dv, nv, 2e-5, 1e-4, "attention dv");

    // The reference backward used for the bigger shapes agrees with the differences too.
    vecd rq, rk, rv;
    attn_bwd_ref(rq, rk, rv, R, qd, kd, vd, a.s);
    for (size_t i = 0; i < rq.size(); i++) EXPECT_NEAR(rq[i], nq[i], 1e-7);
    for (size_t i = 0; i < rk.size(); i++) EXPECT_NEAR(rk[i], nk[i], 1e-7);
    for (size_t i = 0; i < rv.size(); i++) EXPECT_NEAR(rv[i], nv[i], 1e-7);
}

TEST(EngineOps, AttentionBackwardManyBlocks) {
    auto be = backend();
    for (attn_shape s : {attn_shape{1, 130, 4, 2, 16}, attn_shape{2, 64, 2, 2, 8}, attn_shape{1, 1, 2, 1, 4}}) {
        const attn_data a = make_attn(s, 300);
        const auto [B, T, H, G, D] = s;
        vecf ctx(B * T * H * D), probs(B * H * T * T);
        attn_fwd(*be, ctx.data(), probs.data(), a.q.data(), a.k.data(), a.v.data(), B, T, H, G, D);
        vecf dctx = random_vec(ctx.size(), 310);
        vecf dq(a.q.size(), 9.0f), dk(a.k.size(), 9.0f), dv(a.v.size(), 9.0f);
        attn_bwd(*be, dq.data(), dk.data(), dv.data(), dctx.data(), probs.data(), a.q.data(), a.k.data(),
                               a.v.data(), B, T, H, G, D);
        vecd rq, rk, rv;
        attn_bwd_ref(rq, rk, rv, to_d(dctx), to_d(a.q), to_d(a.k), to_d(a.v), s);
        const std::string tag = " T=" + std::to_string(T);
        expect_close(dq, rq, 2e-5, 1e-4, "attention dq" + tag);
        expect_close(dk, rk, 2e-5, 1e-4, "attention dk" + tag);
        expect_close(dv, rv, 2e-5, 1e-4, "attention dv" + tag);
    }
}

// ---- embedding -----------------------------------------------------------------------------

TEST(EngineOps, EmbeddingVocabParallel) {
    auto be = backend();
    const int64_t rows = 9, C = 13, v0 = 10, Vl = 6;  // this shard holds tokens 10..15
    const std::vector<int32_t> tok = {10, 15, 3, 12, 12, 16, 10, 11, 0};
    vecf wte = random_vec(Vl * C, 400), out(rows * C, 5.0f);
    be->embedding_forward(DType::f32, out.data(), tok.data(), wte.data(), v0, Vl, rows, C);
    auto embed_ref = [&](const vecd& w) {
        vecd o(rows * C, 0.0);
        for (int64_t r = 0; r < rows; r++)
            if (tok[r] >= v0 && tok[r] < v0 + Vl)
                for (int64_t c = 0; c < C; c++) o[r * C + c] = w[(tok[r] - v0) * C + c];
        return o;
    };
    expect_close(out, embed_ref(to_d(wte)), 0, 0, "embedding out");

    vecf dout = random_vec(rows * C, 401), dwte = random_vec(Vl * C, 402);
    const vecf dwte0 = dwte;
    be->embedding_backward(DType::f32, dwte.data(), dout.data(), tok.data(), v0, Vl, rows, C);
    const vecd R = to_d(dout);
    vecd num = numeric_grad([&](const vecd& w) { return dot(embed_ref(w), R); }, to_d(wte));
    for (size_t i = 0; i < num.size(); i++) num[i] += dwte0[i];
    expect_close(dwte, num, 1e-5, 1e-5, "embedding dwte");
}

TEST(EngineOps, LearnedPositions) {
    auto be = backend();
    const int64_t rows = 11, T = 4, C = 13, row0 = 6;  // rows wrap around T, offset row0 (an SP slice)
    vecf wpe = random_vec(T * C, 500), out = random_vec(rows * C, 501);
    const vecf out0 = out;
    be->position_forward(DType::f32, out.data(), wpe.data(), row0, rows, T, C);
    auto pos_ref = [&](const vecd& w) {
        vecd o(rows * C);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < C; c++) o[r * C + c] = out0[r * C + c] + w[((row0 + r) % T) * C + c];
        return o;
    };
    expect_close(out, pos_ref(to_d(wpe)), 1e-6, 1e-6, "position out");

    vecf dout = random_vec(rows * C, 502), dwpe = random_vec(T * C, 503);
    const vecf dwpe0 = dwpe;
    be->position_backward(DType::f32, dwpe.data(), dout.data(), row0, rows, T, C);
    vecd num = numeric_grad([&](const vecd& w) { return dot(pos_ref(w), to_d(dout)); }, to_d(wpe));
    for (size_t i = 0; i < num.size(); i++) num[i] += dwpe0[i];
    expect_close(dwpe, num, 1e-5, 1e-5, "position dwpe");
}

// ---- cross entropy -------------------------------------------------------------------------

// One shard's forward: row max → (all-reduce max) → sums → (all-reduce sum) → finish.
struct shard {
    int64_t v0, Vl;
    vecf logits;
};

TEST(EngineOps, CrossEntropySingleShardWithPadding) {
    auto be = backend();
    const int64_t rows = 7, V = 16, V_valid = 13;  // 3 padding columns
    vecf logits = random_vec(rows * V, 600, -5.0f, 5.0f);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = V_valid; c < V; c++) logits[r * V + c] = 1e30f;  // padding must not win the max
    logits[2 * V + 4] = 80.0f;                                             // a large valid logit
    const std::vector<int32_t> tgt = {0, 12, 4, 7, 3, 12, 1};
    const vecd ld = to_d(logits);

    vecf rowmax(rows), sumexp(rows), tlogit(rows), loss(rows), probs = logits;
    be->xent_row_max(rowmax.data(), probs.data(), rows, V, 0, V_valid);
    for (int64_t r = 0; r < rows; r++) {
        float mx = -INFINITY;
        for (int64_t c = 0; c < V_valid; c++) mx = std::max(mx, logits[r * V + c]);
        EXPECT_EQ(rowmax[r], mx) << "row " << r;
    }
    be->xent_sums(sumexp.data(), tlogit.data(), probs.data(), rowmax.data(), tgt.data(), rows, V, 0, V_valid);
    be->xent_finish(loss.data(), probs.data(), rowmax.data(), sumexp.data(), tlogit.data(), rows, V, 0, V_valid);
    vecd rl, rp;
    xent_ref(rl, rp, ld, tgt, rows, V, V_valid);
    expect_close(loss, rl, 1e-5, 1e-5, "xent loss");
    expect_close(probs, rp, 1e-7, 1e-5, "xent probs");
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = V_valid; c < V; c++) ASSERT_EQ(probs[r * V + c], 0.0f);

    // backward in place (dlogits aliases probs) = scale · (p − onehot), masked columns 0;
    // finite differences of scale · Σ loss over the valid columns.
    const float scale = 0.25f;
    be->xent_backward(probs.data(), DType::f32, probs.data(), tgt.data(), scale, rows, V, 0, V_valid);
    vecd num = numeric_grad(
        [&](const vecd& l) {
            vecd lo, p;
            xent_ref(lo, p, l, tgt, rows, V, V_valid);
            double s = 0;
            for (double x : lo) s += scale * x;
            return s;
        },
        ld, 1e-6);
    expect_close(probs, num, 2e-6, 1e-4, "xent dlogits");
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = V_valid; c < V; c++) ASSERT_EQ(probs[r * V + c], 0.0f);
}

TEST(EngineOps, CrossEntropyTwoShardsEqualsOneShard) {
    auto be = backend();
    const int64_t rows = 7, V = 16, V_valid = 13;
    vecf logits = random_vec(rows * V, 610, -5.0f, 5.0f);
    const std::vector<int32_t> tgt = {0, 12, 4, 7, 9, 8, 1};  // targets in both shards

    // single shard
    vecf m1(rows), s1(rows), t1(rows), loss1(rows), p1 = logits;
    be->xent_row_max(m1.data(), p1.data(), rows, V, 0, V_valid);
    be->xent_sums(s1.data(), t1.data(), p1.data(), m1.data(), tgt.data(), rows, V, 0, V_valid);
    be->xent_finish(loss1.data(), p1.data(), m1.data(), s1.data(), t1.data(), rows, V, 0, V_valid);
    const float scale = 0.5f;
    vecf d1(rows * V);
    be->xent_backward(d1.data(), DType::f32, p1.data(), tgt.data(), scale, rows, V, 0, V_valid);

    // two shards of 8 columns (the second holds 5 valid + 3 padding), plus a shard that is
    // all padding (columns 16..19) — TP rank count 3 with an uneven vocabulary.
    std::vector<shard> shards = {{0, 8, {}}, {8, 8, {}}, {16, 4, vecf(rows * 4, 3.0f)}};
    for (auto& sh : shards)
        if (sh.logits.empty()) {
            sh.logits.resize(rows * sh.Vl);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < sh.Vl; c++) sh.logits[r * sh.Vl + c] = logits[r * V + sh.v0 + c];
        }
    vecf mx(rows, -INFINITY), sums(rows, 0.0f), tl(rows, 0.0f);
    for (auto& sh : shards) {  // all-reduce max
        vecf m(rows);
        be->xent_row_max(m.data(), sh.logits.data(), rows, sh.Vl, sh.v0, V_valid);
        if (sh.v0 >= V_valid) {
            for (float v : m) EXPECT_EQ(v, -INFINITY);
        }
        for (int64_t r = 0; r < rows; r++) mx[r] = std::max(mx[r], m[r]);
    }
    for (auto& sh : shards) {  // all-reduce sum of sumexp and of the target logit
        vecf s(rows), t(rows);
        be->xent_sums(s.data(), t.data(), sh.logits.data(), mx.data(), tgt.data(), rows, sh.Vl, sh.v0, V_valid);
        for (int64_t r = 0; r < rows; r++) sums[r] += s[r], tl[r] += t[r];
    }
    EXPECT_TRUE(same_bits(mx, m1));
    for (auto& sh : shards) {
        vecf loss(rows), d(rows * sh.Vl);
        be->xent_finish(loss.data(), sh.logits.data(), mx.data(), sums.data(), tl.data(), rows, sh.Vl, sh.v0, V_valid);
        expect_close(loss, to_d(loss1), 1e-6, 1e-6, "sharded loss v0=" + std::to_string(sh.v0));
        be->xent_backward(d.data(), DType::f32, sh.logits.data(), tgt.data(), scale, rows, sh.Vl, sh.v0, V_valid);
        vecd p_ref(rows * sh.Vl, 0.0), d_ref(rows * sh.Vl, 0.0);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < sh.Vl; c++)
                if (sh.v0 + c < V) p_ref[r * sh.Vl + c] = p1[r * V + sh.v0 + c], d_ref[r * sh.Vl + c] = d1[r * V + sh.v0 + c];
        expect_close(sh.logits, p_ref, 1e-7, 1e-6, "sharded probs v0=" + std::to_string(sh.v0));
        expect_close(d, d_ref, 1e-7, 1e-6, "sharded dlogits v0=" + std::to_string(sh.v0));
    }
}

// tp = 1: xent_fused is the four phases in one op, the same bits — loss, and dlogits in
// place of the logits or in a separate buffer; logits only read when dlogits is null. Shapes
// below and above the parallel threshold, padding columns, a target in the padding, and a
// shard that does not start at 0 (v0 = 8: the targets outside it count as logit 0, as
// xent_sums has it).
TEST(EngineOps, CrossEntropyFusedEqualsTheFourPhases) {
    auto be = backend(2);
    struct Case {
        int64_t rows, Vl, v0, V_valid;
    };
    for (const Case c : {Case{7, 16, 0, 13}, Case{5, 16, 8, 13}, Case{33, 1037, 0, 1031}, Case{3, 8, 0, 8}}) {
        const int64_t rows = c.rows, Vl = c.Vl, v0 = c.v0, V_valid = c.V_valid;
        const std::string what = "rows " + std::to_string(rows) + " Vl " + std::to_string(Vl) + " v0 " + std::to_string(v0);
        vecf logits = random_vec(rows * Vl, 620 + (uint32_t)rows, -6.0f, 6.0f);
        std::vector<int32_t> tgt(rows);
        for (int64_t r = 0; r < rows; r++) tgt[r] = (int32_t)((r * 7 + 3) % (v0 + Vl));
        tgt[0] = (int32_t)(v0 + Vl - 1);  // a padding column when V_valid < v0 + Vl
        const float scale = 0.375f;
        // The four phases (the tp > 1 path with no other shard).
        vecf rowmax(rows), sumexp(rows), tlogit(rows), loss4(rows), d4 = logits;
        be->xent_row_max(rowmax.data(), d4.data(), rows, Vl, v0, V_valid);
        be->xent_sums(sumexp.data(), tlogit.data(), d4.data(), rowmax.data(), tgt.data(), rows, Vl, v0, V_valid);
        be->xent_finish(loss4.data(), d4.data(), rowmax.data(), sumexp.data(), tlogit.data(), rows, Vl, v0, V_valid);
        be->xent_backward(d4.data(), DType::f32, d4.data(), tgt.data(), scale, rows, Vl, v0, V_valid);
        // Fused, in place.
        vecf loss(rows, -1.0f), d = logits;
        be->xent_fused(loss.data(), d.data(), DType::f32, d.data(), tgt.data(), scale, rows, Vl, v0, V_valid);
        EXPECT_TRUE(same_bits(loss, loss4)) << what << ": loss";
        EXPECT_TRUE(same_bits(d, d4)) << what << ": dlogits in place";
        // Fused into a separate buffer: the logits stay as they were.
        vecf loss2(rows), d2(rows * Vl, 7.0f), l2 = logits;
        be->xent_fused(loss2.data(), d2.data(), DType::f32, l2.data(), tgt.data(), scale, rows, Vl, v0, V_valid);
        EXPECT_TRUE(same_bits(loss2, loss4)) << what;
        EXPECT_TRUE(same_bits(d2, d4)) << what << ": dlogits";
        EXPECT_TRUE(same_bits(l2, logits)) << what << ": logits written";
        // Loss only (evaluation).
        vecf loss3(rows), l3 = logits;
        be->xent_fused(loss3.data(), nullptr, DType::f32, l3.data(), tgt.data(), scale, rows, Vl, v0, V_valid);
        EXPECT_TRUE(same_bits(loss3, loss4)) << what << ": loss without dlogits";
        EXPECT_TRUE(same_bits(l3, logits)) << what << ": logits written without dlogits";
    }
    // Against the double reference too (the four phases' own test, repeated for the fused op).
    const int64_t rows = 7, V = 16, V_valid = 13;
    vecf logits = random_vec(rows * V, 630, -5.0f, 5.0f);
    const std::vector<int32_t> tgt = {0, 12, 4, 7, 3, 12, 1};
    vecf loss(rows);
    be->xent_fused(loss.data(), nullptr, DType::f32, logits.data(), tgt.data(), 1.0f, rows, V, 0, V_valid);
    vecd rl, rp;
    xent_ref(rl, rp, to_d(logits), tgt, rows, V, V_valid);
    expect_close(loss, rl, 1e-5, 1e-5, "fused xent loss");
}

// ---- optimizer -----------------------------------------------------------------------------

// The multi-tensor AdamW (plan_adamw once, adamw_step per step) is the per-range adamw
// calls, bit for bit: ranges of different lengths and weight decays, with and without
// 16-bit model weights, over two steps, then a skipped step (found-inf); a new plan
// replaces the list and an empty plan updates nothing.
TEST(EngineOps, AdamWStepEqualsThePerRangeCalls) {
    auto be = backend(2);
    const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    const int64_t sizes[] = {5, 40000, 1, 129};  // one above the parallel threshold
    const float decays[] = {0.1f, 0.0f, 0.1f, 0.05f};
    for (DType mt : {DType::f32, DType::bf16}) {
        const bool with_model = mt != DType::f32;
        int64_t total = 0;
        for (int64_t n : sizes) total += n;
        const vecf p0 = random_vec(total, 700, -1.0f, 1.0f), g = random_vec(total, 701, -2.0f, 2.0f);
        vecf pa = p0, ma(total), va(total), pb = p0, mb(total), vb(total);
        std::vector<uint16_t> wa(with_model ? total : 0), wb(with_model ? total : 0);
        std::vector<Backend::AdamWRange> ranges;
        for (int64_t k = 0, off = 0; k < 4; off += sizes[k], k++) {
            Backend::AdamWRange r;
            r.p = pb.data() + off, r.g = g.data() + off, r.m = mb.data() + off, r.v = vb.data() + off;
            r.model_p = with_model ? (void*)(wb.data() + off) : nullptr;
            r.n = sizes[k], r.weight_decay = decays[k];
            ranges.push_back(r);
        }
        EXPECT_EQ(be->adamw_plan_bytes(4), 0);  // host memory on the CPU backend
        be->plan_adamw(ranges.data(), (int)ranges.size());
        double scalars[STEP_SCALAR_COUNT] = {};
        scalars[SCALAR_GRAD_SCALE] = 0.75;
        for (int64_t step = 1; step <= 3; step++) {
            if (step == 3) scalars[SCALAR_FOUND_INF] = 1.0;  // skipped: nothing changes
            for (int64_t k = 0, off = 0; k < 4; off += sizes[k], k++)
                be->adamw(pa.data() + off, g.data() + off, ma.data() + off, va.data() + off, sizes[k], lr, b1, b2, eps,
                          decays[k], scalars, step, with_model ? (void*)(wa.data() + off) : nullptr, mt);
            be->adamw_step(lr, b1, b2, eps, scalars, step, mt);
            const std::string what = std::string(with_model ? "bf16" : "f32") + " step " + std::to_string(step);
            EXPECT_TRUE(same_bits(pa, pb)) << what << ": p";
            EXPECT_TRUE(same_bits(ma, mb)) << what << ": m";
            EXPECT_TRUE(same_bits(va, vb)) << what << ": v";
            EXPECT_EQ(wa, wb) << what << ": model weights";
        }
        EXPECT_FALSE(same_bits(pb, p0));
        // A new plan of one range replaces the list; an empty plan updates nothing.
        scalars[SCALAR_FOUND_INF] = 0.0;
        be->plan_adamw(ranges.data() + 2, 1);
        const vecf before = pb;
        be->adamw_step(lr, b1, b2, eps, scalars, 4, mt);
        for (int64_t i = 0; i < total; i++)
            if ((pb[i] != before[i]) != (i == sizes[0] + sizes[1])) ADD_FAILURE() << "element " << i << " of " << total;
        be->plan_adamw(nullptr, 0);
        const vecf after = pb;
        be->adamw_step(lr, b1, b2, eps, scalars, 5, mt);
        EXPECT_TRUE(same_bits(pb, after));
    }
}

// The stream checker sees adamw_step's reads: a planned gradient that a collective wrote
// without the compute stream waiting for it stops the process.
TEST(EngineStreams, AdamWStepReadsEveryPlannedRange) {
    auto [be, comm] = checked_streams("dp");
    const Event ready = be->create_event("compute done"), done = be->create_event("comm done");
    auto* g = static_cast<float*>(be->alloc(MEM_GRADS, 64 * sizeof(float), "grads"));
    auto* state = static_cast<float*>(be->alloc(MEM_OPTIMIZER, 3 * 64 * sizeof(float), "p m v"));
    auto* scalars = static_cast<double*>(be->alloc(MEM_WORKSPACE, STEP_SCALAR_COUNT * sizeof(double), "scalars"));
    Backend::AdamWRange r[2];
    for (int k = 0; k < 2; k++) {
        r[k].p = state + 32 * k, r[k].m = state + 64 + 32 * k, r[k].v = state + 128 + 32 * k;
        r[k].g = g + 32 * k, r[k].n = 32;
    }
    be->plan_adamw(r, 2);
    be->record_event(ready, Stream::compute);
    be->wait_event(Stream::comm, ready);
    comm->all_reduce_sum(g + 32, 32);  // the second range's gradients, compute not waiting
    EXPECT_DEATH(be->adamw_step(1e-3f, 0.9f, 0.95f, 1e-8f, scalars, 1, DType::f32),
                 "compute op adamw_step uses \"grads\", written by the comm stream's all_reduce");
    be->record_event(done, Stream::comm);
    be->wait_event(Stream::compute, done);
    be->adamw_step(1e-3f, 0.9f, 0.95f, 1e-8f, scalars, 1, DType::f32);
    be->plan_adamw(nullptr, 0);
    be->release(g), be->release(state), be->release(scalars);
}

// ---- 16-bit storage (bf16, fp16) ----------------------------------------------------------
//
// Every op with its 16-bit operands in bf16 and in fp16 against the double reference
// evaluated on the same (already rounded) inputs. The kernels compute in f32 and round
// each 16-bit result once, so a 16-bit output may be off by half a unit in the last place
// of its format: 2^-9 relative for bf16 (8 significant bits), 2^-12 for fp16 (11). The
// tolerance is twice the unit, 2^-7 / 2^-10, plus a small absolute term for results near
// zero (whose error is set by the magnitude of what was summed). Results in f32 (main
// grads, logits) get the f32 tolerance of the fp32 tests.

struct Half {
    DType t;
    double unit;  // relative spacing of the format near 1: 2^-7 (bf16), 2^-10 (fp16)
    const char* name;
};
const Half kHalves[] = {{DType::bf16, 1.0 / 128, "bf16"}, {DType::f16, 1.0 / 1024, "fp16"}};

using vec16 = std::vector<uint16_t>;
vec16 to16(const vecf& v, DType t) {
    vec16 o(v.size());
    for (size_t i = 0; i < v.size(); i++) o[i] = t == DType::bf16 ? f32_to_bf16_bits(v[i]) : f32_to_f16_bits(v[i]);
    return o;
}
vecf from16(const vec16& v, DType t) {
    vecf o(v.size());
    for (size_t i = 0; i < v.size(); i++) o[i] = t == DType::bf16 ? bf16_bits_to_f32(v[i]) : f16_bits_to_f32(v[i]);
    return o;
}
// What a buffer of type t holds for v.
vecf rounded(const vecf& v, DType t) { return from16(to16(v, t), t); }
double max_abs(const vecd& v) {
    double m = 0;
    for (double x : v) m = std::max(m, std::fabs(x));
    return m;
}
// 16-bit result against the double reference: 2 units relative, and 2 units of the largest
// reference value absolute (the output's rounding, and that of any 16-bit intermediate).
void expect_close16(const vec16& actual, DType t, const vecd& expected, double unit, const std::string& what,
                    double units = 1.0) {
    expect_close(from16(actual, t), expected, units * unit * (max_abs(expected) * 0.05 + 1e-6), units * unit, what);
}

TEST(EngineOps16, GemmPlainBatchedBiasAndMixed) {
    auto be = backend();
    for (const Half& f : kHalves) {
        const std::string tag = std::string(" ") + f.name;
        // Fused bias, 16-bit C, Bᵀ (a linear layer): C = A·Bᵀ + bias.
        const int64_t M = 9, N = 6, K = 70;
        vecf A = rounded(random_vec(M * K, 1), f.t), B = rounded(random_vec(N * K, 2), f.t), bias = rounded(random_vec(N, 3), f.t);
        vec16 A16 = to16(A, f.t), B16 = to16(B, f.t), b16 = to16(bias, f.t), C16(M * N, 0x7777);
        Backend::Gemm g;
        g.trans_b = true, g.M = M, g.N = N, g.K = K;
        g.A = A16.data(), g.a_type = f.t, g.lda = K;
        g.B = B16.data(), g.b_type = f.t, g.ldb = K;
        g.C = C16.data(), g.c_type = f.t, g.ldc = N;
        g.bias = b16.data();
        be->gemm(g);
        vecd ref(M * N);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = bias[j];
                for (int64_t p = 0; p < K; p++) s += (double)A[i * K + p] * B[j * K + p];
                ref[i * N + j] = s;
            }
        expect_close16(C16, f.t, ref, f.unit, "gemm + bias" + tag);
        // Weight gradient: f32 C += Aᵀ·B (beta = 1), the main-grad accumulation.
        vecf C32 = random_vec(K * N, 4), C32_0 = C32;
        vecf X = rounded(random_vec(M * N, 5), f.t);
        vec16 X16 = to16(X, f.t);
        be->gemm(true, false, K, N, M, 1.0f, A16.data(), X16.data(), 1.0f, C32.data(), f.t, DType::f32);
        vecd ref2(K * N);
        for (int64_t i = 0; i < K; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = C32_0[i * N + j];
                for (int64_t p = 0; p < M; p++) s += (double)A[p * K + i] * X[p * N + j];
                ref2[i * N + j] = s;
            }
        expect_close(C32, ref2, 1e-5, 1e-5, "gemm f32 accumulate" + tag);
        // Strided batch with leading dimensions: 3 heads of width 8 inside rows of 40
        // (the attention scores S_h = Q_h·K_hᵀ of a fused qkv), 16-bit C [3, T, T].
        const int64_t T = 5, Dh = 8, ld = 40, nb = 3;
        vecf Q = rounded(random_vec(T * ld, 6), f.t);
        vec16 Q16 = to16(Q, f.t), S16(nb * T * T, 0x7777);
        Backend::Gemm sg;
        sg.trans_b = true, sg.M = T, sg.N = T, sg.K = Dh, sg.alpha = 0.5f, sg.batch = nb;
        sg.A = Q16.data(), sg.a_type = f.t, sg.lda = ld, sg.stride_a = Dh;
        sg.B = Q16.data() + 16, sg.b_type = f.t, sg.ldb = ld, sg.stride_b = Dh;  // "k" starts at column 16
        sg.C = S16.data(), sg.c_type = f.t, sg.ldc = T, sg.stride_c = T * T;
        be->gemm(sg);
        vecd ref3(nb * T * T);
        for (int64_t h = 0; h < nb; h++)
            for (int64_t i = 0; i < T; i++)
                for (int64_t j = 0; j < T; j++) {
                    double s = 0;
                    for (int64_t p = 0; p < Dh; p++) s += (double)Q[i * ld + h * Dh + p] * Q[j * ld + 16 + h * Dh + p];
                    ref3[(h * T + i) * T + j] = 0.5 * s;
                }
        expect_close16(S16, f.t, ref3, f.unit, "strided batched gemm" + tag);
        // Mixed: f32 A (dlogits) against a 16-bit B, 16-bit C.
        vecf Af = random_vec(M * K, 7);
        vec16 D16(M * N, 0x7777);
        Backend::Gemm mg;
        mg.M = M, mg.N = N, mg.K = K;
        mg.A = Af.data(), mg.a_type = DType::f32, mg.lda = K;
        mg.B = B16.data(), mg.b_type = f.t, mg.ldb = K, mg.trans_b = true;
        mg.C = D16.data(), mg.c_type = f.t, mg.ldc = N;
        be->gemm(mg);
        vecd ref4(M * N);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t p = 0; p < K; p++) s += (double)Af[i * K + p] * B[j * K + p];
                ref4[i * N + j] = s;
            }
        expect_close16(D16, f.t, ref4, f.unit, "mixed f32 × 16-bit gemm" + tag);
    }
}

TEST(EngineOps16, NormsActivationsAndElementwise) {
    auto be = backend();
    for (const Half& f : kHalves) {
        const std::string tag = std::string(" ") + f.name;
        const int64_t rows = 7, C = 48;
        vecf x = rounded(random_vec(rows * C, 50, -2.0f, 2.0f), f.t), w = rounded(random_vec(C, 51), f.t),
             b = rounded(random_vec(C, 52), f.t), dout = rounded(random_vec(rows * C, 53), f.t);
        vec16 x16 = to16(x, f.t), w16 = to16(w, f.t), b16 = to16(b, f.t), d16 = to16(dout, f.t), out16(rows * C);
        vecf mean(rows), rstd(rows);
        be->layernorm_forward(f.t, out16.data(), mean.data(), rstd.data(), x16.data(), w16.data(), b16.data(), rows, C, 1e-5f);
        vecd ro, rm, rr;
        ln_ref(ro, rm, rr, to_d(x), to_d(w), to_d(b), rows, C, 1e-5);
        expect_close16(out16, f.t, ro, f.unit, "layernorm out" + tag);
        expect_close(rstd, rr, 1e-5, 1e-5, "layernorm rstd (f32)" + tag);
        expect_close(mean, rm, 1e-6, 1e-5, "layernorm mean (f32)" + tag);
        // Backward: dx (16-bit) and dw, db (f32 main grads, +=) against differences of Σ out·dout.
        vec16 dx16(rows * C);
        vecf dw(C, 0.0f), db(C, 0.0f);
        be->layernorm_backward(f.t, dx16.data(), dw.data(), db.data(), d16.data(), x16.data(), mean.data(), rstd.data(),
                               w16.data(), rows, C, false);
        const vecd R = to_d(dout);
        auto ln_loss = [&](const vecd& xx, const vecd& ww, const vecd& bb) {
            vecd o, m_, r_;
            ln_ref(o, m_, r_, xx, ww, bb, rows, C, 1e-5);
            return dot(o, R);
        };
        const vecd ndx = numeric_grad([&](const vecd& v) { return ln_loss(v, to_d(w), to_d(b)); }, to_d(x));
        const vecd ndw = numeric_grad([&](const vecd& v) { return ln_loss(to_d(x), v, to_d(b)); }, to_d(w));
        expect_close16(dx16, f.t, ndx, f.unit, "layernorm dx" + tag);
        expect_close(dw, ndw, 1e-4, 1e-4, "layernorm dw (f32)" + tag);
        // RMSNorm forward.
        vecf rs(rows);
        be->rmsnorm_forward(f.t, out16.data(), rs.data(), x16.data(), w16.data(), rows, C, 1e-5f);
        vecd rro, rrr;
        rms_ref(rro, rrr, to_d(x), to_d(w), rows, C, 1e-5);
        expect_close16(out16, f.t, rro, f.unit, "rmsnorm out" + tag);
        // GELU, SwiGLU, residual add, bias add.
        const int64_t n = rows * C;
        vec16 g16(n), g2(n);
        be->gelu_forward(f.t, g16.data(), x16.data(), n);
        be->swiglu_forward(f.t, g2.data(), x16.data(), d16.data(), n);
        vecd rg(n), rsw(n), radd(n), rbias(n);
        for (int64_t i = 0; i < n; i++) {
            rg[i] = gelu_ref(x[i]);
            rsw[i] = silu_ref(x[i]) * dout[i];
            radd[i] = (double)x[i] + dout[i];
            rbias[i] = (double)x[i] + b[i % C];
        }
        expect_close16(g16, f.t, rg, f.unit, "gelu" + tag);
        expect_close16(g2, f.t, rsw, f.unit, "swiglu" + tag);
        vec16 y16 = x16;
        be->add(y16.data(), d16.data(), f.t, n);
        expect_close16(y16, f.t, radd, f.unit, "add" + tag);
        y16 = x16;
        be->bias_add(y16.data(), b16.data(), f.t, rows, C);
        expect_close16(y16, f.t, rbias, f.unit, "bias_add" + tag);
        // GELU backward against the derivative of the reference.
        vec16 gd16(n);
        be->gelu_backward(f.t, gd16.data(), x16.data(), d16.data(), n);
        vecd rgd(n);
        for (int64_t i = 0; i < n; i++) rgd[i] = dout[i] * (gelu_ref(x[i] + 1e-6) - gelu_ref(x[i] - 1e-6)) / 2e-6;
        expect_close16(gd16, f.t, rgd, f.unit, "gelu backward" + tag);
        // bias_grad: f32 += Σ over 16-bit rows.
        vecf dbias(C, 0.0f);
        be->bias_grad(dbias.data(), d16.data(), f.t, rows, C);
        vecd rdb(C, 0.0);
        for (int64_t i = 0; i < n; i++) rdb[i % C] += dout[i];
        expect_close(dbias, rdb, 1e-5, 1e-5, "bias_grad (f32)" + tag);
        // convert: round to nearest even both ways.
        vecf back(n);
        be->convert(back.data(), DType::f32, x16.data(), f.t, n);
        EXPECT_EQ(back, x) << tag;
        // The vector paths (F16C for fp16) round exactly like the scalar conversion, edge
        // values included: overflow to inf, subnormals, ties, signed zero, inf.
        vecf edge = {65504.0f, 65520.0f, 70000.0f, -65536.0f, 1e-8f, 6e-5f, 3e-39f, -0.0f,
                     1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256,
                     std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), 3.3e38f, 0.1f};
        for (int rep = 0; rep < 2; rep++) edge.insert(edge.end(), edge.begin(), edge.end());  // 64: the vector loop runs
        vec16 e16(edge.size());
        be->convert(e16.data(), f.t, edge.data(), DType::f32, (int64_t)edge.size());
        EXPECT_EQ(e16, to16(edge, f.t)) << tag;
        vecf e32(edge.size());
        be->convert(e32.data(), DType::f32, e16.data(), f.t, (int64_t)edge.size());
        EXPECT_EQ(e32, from16(e16, f.t)) << tag;
    }
}

TEST(EngineOps16, RopeAttentionEmbeddingAndAdamW) {
    auto be = backend();
    for (const Half& f : kHalves) {
        const std::string tag = std::string(" ") + f.name;
        // Attention on a fused qkv, GQA H/G = 2, two 64-row blocks.
        const attn_shape sh{1, 70, 4, 2, 8};
        const auto [B, T, H, G, D] = sh;
        const int64_t ld = (H + 2 * G) * D;
        vecf q = rounded(random_vec(B * T * H * D, 60, -2.0f, 2.0f), f.t), k = rounded(random_vec(B * T * G * D, 61, -2.0f, 2.0f), f.t),
             v = rounded(random_vec(B * T * G * D, 62), f.t);
        const vecf qkv = pack_qkv(q.data(), k.data(), v.data(), B * T, H, G, D);
        vec16 qkv16 = to16(qkv, f.t), ctx16(B * T * H * D), p16(B * H * T * T);
        be->attention_forward(f.t, ctx16.data(), p16.data(), qkv16.data(), B, T, H, G, D,
                              attention_workspace(*be, B, T, H, G, D, f.t).data());
        vecd rc, rp;
        attn_ref(rc, rp, to_d(q), to_d(k), to_d(v), sh);
        expect_close16(p16, f.t, rp, f.unit, "attention probs" + tag);
        expect_close16(ctx16, f.t, rc, f.unit, "attention ctx" + tag);
        const vecf dctx = rounded(random_vec(B * T * H * D, 63), f.t);
        vec16 dctx16 = to16(dctx, f.t), dqkv16(B * T * ld, 0x7777);
        be->attention_backward(f.t, dqkv16.data(), dctx16.data(), p16.data(), qkv16.data(), B, T, H, G, D,
                               attention_workspace(*be, B, T, H, G, D, f.t).data());
        vecd rq, rk, rv;
        attn_bwd_ref(rq, rk, rv, to_d(dctx), to_d(q), to_d(k), to_d(v), sh);
        vecd rqkv(B * T * ld);
        for (int64_t r = 0; r < B * T; r++) {
            for (int64_t i = 0; i < H * D; i++) rqkv[r * ld + i] = rq[r * H * D + i];
            for (int64_t i = 0; i < G * D; i++) rqkv[r * ld + H * D + i] = rk[r * G * D + i];
            for (int64_t i = 0; i < G * D; i++) rqkv[r * ld + (H + G) * D + i] = rv[r * G * D + i];
        }
        // The saved probabilities are themselves rounded: a few units more.
        expect_close16(dqkv16, f.t, rqkv, f.unit, "attention dqkv" + tag, 4.0);
        // RoPE on the q block of the fused rows (k, v columns untouched).
        vec16 r16 = qkv16;
        vecf table(2 * (T + 3) * D / 2);
        be->rope_table(table.data(), T + 3, D, 10000.0f);
        be->rope_forward(f.t, r16.data(), ld, B, T, H, D, 3, table.data(), T + 3);
        const vecd rr = rope_ref(to_d(q), B, T, H, D, 3, 10000.0);
        vec16 q_out(B * T * H * D);
        for (int64_t r = 0; r < B * T; r++)
            for (int64_t i = 0; i < H * D; i++) q_out[r * H * D + i] = r16[r * ld + i];
        expect_close16(q_out, f.t, rr, f.unit, "rope" + tag);
        for (int64_t r = 0; r < B * T; r++)
            for (int64_t i = H * D; i < ld; i++) ASSERT_EQ(r16[r * ld + i], qkv16[r * ld + i]) << "rope touched k/v" << tag;
        // Embedding: rows copied as they are; backward into f32.
        const int64_t Vl = 5, C = 16, rows = 6;
        vecf wte = rounded(random_vec(Vl * C, 64), f.t);
        vec16 wte16 = to16(wte, f.t), e16(rows * C);
        std::vector<int32_t> tok = {0, 4, 7, 2, 2, 9};  // v0 = 2: tokens 2..6 are here
        be->embedding_forward(f.t, e16.data(), tok.data(), wte16.data(), 2, Vl, rows, C);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < C; c++) {
                const int64_t t = tok[r] - 2;
                EXPECT_EQ(e16[r * C + c], t >= 0 && t < Vl ? wte16[t * C + c] : 0) << tag;
            }
        vecf dwte(Vl * C, 0.0f);
        be->embedding_backward(f.t, dwte.data(), e16.data(), tok.data(), 2, Vl, rows, C);
        vecd rdw(Vl * C, 0.0);
        for (int64_t r = 0; r < rows; r++)
            if (tok[r] - 2 >= 0 && tok[r] - 2 < Vl)
                for (int64_t c = 0; c < C; c++) rdw[(tok[r] - 2) * C + c] += wte[(tok[r] - 2) * C + c];
        expect_close(dwte, rdw, 1e-6, 1e-6, "embedding backward (f32)" + tag);
        // AdamW on f32 master weights writes the rounded model copy.
        vecf p = random_vec(64, 65), g = random_vec(64, 66), m(64, 0.0f), vv(64, 0.0f);
        vec16 model16(64);
        double unit[ptd::engine::STEP_SCALAR_COUNT] = {};
        unit[ptd::engine::SCALAR_GRAD_SCALE] = 1.0;
        be->adamw(p.data(), g.data(), m.data(), vv.data(), 64, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, unit, 1, model16.data(), f.t);
        EXPECT_EQ(model16, to16(p, f.t)) << "the model copy is the master rounded to nearest even" << tag;
    }
}

TEST(EngineOps, AdamWMatchesHandComputedUpdate) {
    auto be = backend();
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    // Element 0 by hand, step 3: g = 0.5·0.8 = 0.4; m = 0.9·0.2 + 0.1·0.4 = 0.22;
    // v = 0.95·0.01 + 0.05·0.16 = 0.0175; m̂ = 0.22/(1 − 0.729) = 0.811808…;
    // v̂ = 0.0175/(1 − 0.857375) = 0.122699…; p = 1 − 0.01·(m̂/(√v̂ + 1e-8) + 0.1·1)
    //   = 1 − 0.01·(2.317566… + 0.1) = 0.975824…
    vecf p = {1.0f, -2.0f, 0.5f}, g = {0.8f, -0.3f, 0.0f}, m = {0.2f, 0.1f, -0.05f}, v = {0.01f, 0.02f, 0.001f};
    const vecf p0 = p, g0 = g, m0 = m, v0 = v;
    double scalars[ptd::engine::STEP_SCALAR_COUNT] = {};
    scalars[ptd::engine::SCALAR_GRAD_SCALE] = gs;  // the clip (and unscale) factor comes from the device scalars
    be->adamw(p.data(), g.data(), m.data(), v.data(), 3, lr, b1, b2, eps, wd, scalars, 3);
    EXPECT_NEAR(m[0], 0.22, 1e-7);
    EXPECT_NEAR(v[0], 0.0175, 1e-8);
    EXPECT_NEAR(p[0], 0.9758244, 1e-6);
    for (int i = 0; i < 3; i++) {  // the formula in double for every element
        const double gi = double(g0[i]) * gs, mi = b1 * double(m0[i]) + (1 - double(b1)) * gi;
        const double vi = b2 * double(v0[i]) + (1 - double(b2)) * gi * gi;
        const double mh = mi / (1 - std::pow(double(b1), 3)), vh = vi / (1 - std::pow(double(b2), 3));
        const double pi = p0[i] - lr * (mh / (std::sqrt(vh) + eps) + wd * p0[i]);
        EXPECT_NEAR(m[i], mi, 1e-7) << i;
        EXPECT_NEAR(v[i], vi, 1e-8) << i;
        EXPECT_NEAR(p[i], pi, 1e-6) << i;
    }
    // Step 1 from zero state: m̂ = g, v̂ = g², so p −= lr·(sign(g) + wd·p) up to eps.
    vecf p1 = {2.0f}, g1 = {-3.0f}, m1 = {0.0f}, v1 = {0.0f};
    scalars[ptd::engine::SCALAR_GRAD_SCALE] = 1.0;
    be->adamw(p1.data(), g1.data(), m1.data(), v1.data(), 1, lr, b1, b2, eps, wd, scalars, 1);
    EXPECT_NEAR(p1[0], 2.0 - 0.01 * (-1.0 + 0.2), 1e-6);
    // A step that found a non-finite loss or norm changes nothing.
    scalars[ptd::engine::SCALAR_FOUND_INF] = 1.0;
    const vecf p2 = p1, m2 = m1, v2 = v1;
    be->adamw(p1.data(), g1.data(), m1.data(), v1.data(), 1, lr, b1, b2, eps, wd, scalars, 2);
    EXPECT_EQ(p1, p2);
    EXPECT_EQ(m1, m2);
    EXPECT_EQ(v1, v2);
}

// ---- determinism ---------------------------------------------------------------------------

// Sizes above the backend's parallel threshold, so 2 threads really split the work.
TEST(EngineOpsDeterminism, SameCallTwiceGivesSameBits) {
    auto be = backend(2);
    ASSERT_EQ(omp_get_max_threads(), 2);
    const int64_t rows = 257, C = 192;
    const vecf x = random_vec(rows * C, 700), dout = random_vec(rows * C, 701), w = random_vec(C, 702),
               b = random_vec(C, 703);
    std::vector<int32_t> tok(rows);
    for (int64_t r = 0; r < rows; r++) tok[r] = int32_t((r * 7) % 5);  // many repeats

    auto run_once = [&]() {
        std::vector<vecf> outs;
        vecf out(rows * C), mean(rows), rstd(rows), dx(rows * C), dw(C), db(C);
        be->layernorm_forward(DType::f32, out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, C, 1e-5f);
        be->layernorm_backward(DType::f32, dx.data(), dw.data(), db.data(), dout.data(), x.data(), mean.data(), rstd.data(),
                               w.data(), rows, C, false);
        outs.insert(outs.end(), {out, dx, dw, db});
        vecf rdx(rows * C), rdw(C);
        be->rmsnorm_backward(DType::f32, rdx.data(), rdw.data(), dout.data(), x.data(), rstd.data(), w.data(), rows, C, false);
        outs.insert(outs.end(), {rdx, rdw});
        vecf dbias(C), dwte(5 * C), dwpe(64 * C);
        be->bias_grad(dbias.data(), dout.data(), DType::f32, rows, C);
        be->embedding_backward(DType::f32, dwte.data(), dout.data(), tok.data(), 0, 5, rows, C);
        be->position_backward(DType::f32, dwpe.data(), dout.data(), 3, rows, 64, C);
        outs.insert(outs.end(), {dbias, dwte, dwpe});
        double ss_acc = 0;
        be->sum_squares(&ss_acc, x.data(), rows * C);
        vecf ss = {float(ss_acc)};
        outs.push_back(ss);
        vecf cg(rows * rows);
        be->gemm(false, true, rows, rows, C, 1.0f, x.data(), dout.data(), 0.0f, cg.data());
        outs.push_back(cg);

        const attn_data a = make_attn({2, 100, 4, 2, 16}, 704);
        const auto [B, T, H, G, D] = a.s;
        vecf ctx(B * T * H * D), probs(B * H * T * T), dq(a.q.size()), dk(a.k.size()), dv(a.v.size());
        attn_fwd(*be, ctx.data(), probs.data(), a.q.data(), a.k.data(), a.v.data(), B, T, H, G, D);
        const vecf dctx = random_vec(ctx.size(), 705);
        attn_bwd(*be, dq.data(), dk.data(), dv.data(), dctx.data(), probs.data(), a.q.data(), a.k.data(),
                 a.v.data(), B, T, H, G, D);
        outs.insert(outs.end(), {ctx, probs, dq, dk, dv});
        return outs;
    };
    const auto first = run_once(), second = run_once();
    ASSERT_EQ(first.size(), second.size());
    for (size_t i = 0; i < first.size(); i++) EXPECT_TRUE(same_bits(first[i], second[i])) << "output " << i;
}

// The cross-row reductions partition their output, so even 1 vs 2 threads agree bit for bit.
TEST(EngineOpsDeterminism, CrossRowReductionsIndependentOfThreadCount) {
    const int64_t rows = 301, C = 160;
    const vecf x = random_vec(rows * C, 800), dout = random_vec(rows * C, 801), w = random_vec(C, 802);
    std::vector<int32_t> tok(rows);
    for (int64_t r = 0; r < rows; r++) tok[r] = int32_t((r * 3) % 7);
    auto run = [&](int threads) {
        auto be = backend(threads);
        vecf mean(rows), rstd(rows), out(rows * C), dx(rows * C), dw(C), db(C), dbias(C), dwte(7 * C), dwpe(50 * C);
        be->layernorm_forward(DType::f32, out.data(), mean.data(), rstd.data(), x.data(), w.data(), w.data(), rows, C, 1e-5f);
        be->layernorm_backward(DType::f32, dx.data(), dw.data(), db.data(), dout.data(), x.data(), mean.data(), rstd.data(),
                               w.data(), rows, C, false);
        be->bias_grad(dbias.data(), dout.data(), DType::f32, rows, C);
        be->embedding_backward(DType::f32, dwte.data(), dout.data(), tok.data(), 0, 7, rows, C);
        be->position_backward(DType::f32, dwpe.data(), dout.data(), 17, rows, 50, C);
        return std::vector<vecf>{dw, db, dbias, dwte, dwpe};
    };
    const auto one = run(1), two = run(2);
    for (size_t i = 0; i < one.size(); i++) EXPECT_TRUE(same_bits(one[i], two[i])) << "output " << i;
}

// ---- fused ops (issue 14): the CPU runs them as the unfused sequence, bit for bit ----------

// A device buffer of n elements of type t holding v rounded to t (4 bytes per element of
// storage, enough for every type).
struct TypedBuf {
    DType t;
    vecf store;
    TypedBuf(Backend& be, DType type, const vecf& v) : t(type), store(v.size()) { be.convert(store.data(), t, v.data(), DType::f32, (int64_t)v.size()); }
    void* p() { return store.data(); }
    size_t bytes() const { return store.size() * (t == DType::f32 ? 4 : 2); }
};
bool same_bytes(const TypedBuf& a, const TypedBuf& b) { return std::memcmp(a.store.data(), b.store.data(), a.bytes()) == 0; }
bool same_floats(const vecf& a, const vecf& b) { return std::memcmp(a.data(), b.data(), a.size() * 4) == 0; }

// add_norm_forward = (copy,) add, then the norm — every type, both kinds, res_out = x,
// = residual or its own buffer, on the CPU backend and through the stream checker.
TEST(EngineOpsFused, AddNormForwardEqualsAddThenNorm) {
    const int64_t rows = 5, C = 37;  // C not a multiple of any vector width
    const float eps = 1e-5f;
    for (bool checked : {false, true})
        for (DType t : {DType::f32, DType::bf16, DType::f16})
            for (auto kind : {Backend::NormKind::layernorm, Backend::NormKind::rmsnorm})
                for (int alias = 0; alias < 3; alias++) {  // 0: res_out = x, 1: = residual, 2: its own
                    auto be = checked ? make_stream_checking_backend(backend()) : backend();
                    const std::string tag = std::string(t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "fp16") + (kind == Backend::NormKind::layernorm ? " ln" : " rms") +
                                            " alias " + std::to_string(alias) + (checked ? " checked" : "");
                    const vecf xv = random_vec(rows * C, 11), rv = random_vec(rows * C, 12);
                    const vecf wv = random_vec(C, 13), bv = random_vec(C, 14);
                    TypedBuf w(*be, t, wv), b(*be, t, bv);
                    // Unfused: y = x; y += residual; norm(y).
                    TypedBuf y(*be, t, xv), r(*be, t, rv), out0(*be, t, vecf(rows * C));
                    vecf mean0(rows, -1), rstd0(rows, -1);
                    be->add(y.p(), r.p(), t, rows * C);
                    if (kind == Backend::NormKind::layernorm)
                        be->layernorm_forward(t, out0.p(), mean0.data(), rstd0.data(), y.p(), w.p(), b.p(), rows, C, eps);
                    else be->rmsnorm_forward(t, out0.p(), rstd0.data(), y.p(), w.p(), rows, C, eps);
                    // Fused.
                    TypedBuf x1(*be, t, xv), r1(*be, t, rv), own(*be, t, vecf(rows * C, 7.0f)), out1(*be, t, vecf(rows * C));
                    vecf mean1(rows, -2), rstd1(rows, -2);
                    TypedBuf& res = alias == 0 ? x1 : alias == 1 ? r1 : own;
                    be->add_norm_forward(t, res.p(), out1.p(), mean1.data(), rstd1.data(), x1.p(), r1.p(), w.p(),
                                         kind == Backend::NormKind::layernorm ? b.p() : nullptr, rows, C, eps, kind);
                    EXPECT_TRUE(same_bytes(res, y)) << "res_out " << tag;
                    EXPECT_TRUE(same_bytes(out1, out0)) << "out " << tag;
                    EXPECT_TRUE(same_floats(rstd1, rstd0)) << "rstd " << tag;
                    if (kind == Backend::NormKind::layernorm) {
                        EXPECT_TRUE(same_floats(mean1, mean0)) << "mean " << tag;
                    }
                    if (alias != 0) {
                        EXPECT_TRUE(same_bytes(x1, TypedBuf(*be, t, xv))) << "x untouched " << tag;
                    }
                }
}

// Gemm epilogues = the plain GEMM then gelu_forward / gelu_backward / bias_grad, in every
// type (the MLP's fc1 forward, the dgelu of its backward, a weight-gradient GEMM's bias).
TEST(EngineOpsFused, GemmEpiloguesEqualTheSeparateOps) {
    const int64_t R = 7, F = 12, h = 9;
    for (bool checked : {false, true})
        for (DType t : {DType::f32, DType::bf16, DType::f16}) {
            auto be = checked ? make_stream_checking_backend(backend()) : backend();
            const std::string tag = std::string(t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "fp16") + (checked ? " checked" : "");
            const vecf xv = random_vec(R * h, 21), wv = random_vec(F * h, 22), bv = random_vec(F, 23);
            TypedBuf x(*be, t, xv), w(*be, t, wv), b(*be, t, bv);
            // Forward: fc1 = x·Wᵀ + b, act = gelu(fc1).
            Backend::Gemm g;
            g.trans_b = true, g.M = R, g.N = F, g.K = h;
            g.A = x.p(), g.a_type = t, g.lda = h, g.B = w.p(), g.b_type = t, g.ldb = h, g.c_type = t, g.ldc = F;
            g.bias = b.p();
            TypedBuf fc1_0(*be, t, vecf(R * F)), act0(*be, t, vecf(R * F));
            g.C = fc1_0.p();
            be->gemm(g);
            be->gelu_forward(t, act0.p(), fc1_0.p(), R * F);
            TypedBuf fc1_1(*be, t, vecf(R * F, 3.0f)), act1(*be, t, vecf(R * F, 3.0f));
            g.C = act1.p(), g.epilogue = Backend::Gemm::Epilogue::gelu_aux, g.aux = fc1_1.p();
            be->gemm(g);
            EXPECT_TRUE(same_bytes(fc1_1, fc1_0)) << "gelu_aux: aux " << tag;
            EXPECT_TRUE(same_bytes(act1, act0)) << "gelu_aux: C " << tag;

            // Backward: dfc1 = (g·W2) · gelu'(fc1), W2 [h, F].
            const vecf gv = random_vec(R * h, 24), w2v = random_vec(h * F, 25);
            TypedBuf gy(*be, t, gv), w2(*be, t, w2v), dact(*be, t, vecf(R * F)), dfc0(*be, t, vecf(R * F));
            TypedBuf dfc1(*be, t, vecf(R * F, 5.0f));
            be->gemm(false, false, R, F, h, 1.0f, gy.p(), w2.p(), 0.0f, dact.p(), t, t);
            be->gelu_backward(t, dfc0.p(), fc1_0.p(), dact.p(), R * F);
            Backend::Gemm d;
            d.M = R, d.N = F, d.K = h;
            d.A = gy.p(), d.a_type = t, d.lda = h, d.B = w2.p(), d.b_type = t, d.ldb = F;
            d.C = dfc1.p(), d.c_type = t, d.ldc = F;
            d.epilogue = Backend::Gemm::Epilogue::dgelu, d.aux = fc1_0.p();
            be->gemm(d);
            EXPECT_TRUE(same_bytes(dfc1, dfc0)) << "dgelu " << tag;

            // Weight gradient with the bias gradient: dW (f32) += dyᵀ·x, db (f32) += Σ_r dy.
            vecf dw0 = random_vec(F * h, 26), db0 = random_vec(F, 27);
            vecf dw1 = dw0, db1 = db0;
            be->gemm(true, false, F, h, R, 1.0f, dfc0.p(), x.p(), 1.0f, dw0.data(), t, DType::f32);
            be->bias_grad(db0.data(), dfc0.p(), t, R, F);
            Backend::Gemm wg;
            wg.trans_a = true, wg.M = F, wg.N = h, wg.K = R, wg.beta = 1.0f;
            wg.A = dfc0.p(), wg.a_type = t, wg.lda = F, wg.B = x.p(), wg.b_type = t, wg.ldb = h;
            wg.C = dw1.data(), wg.c_type = DType::f32, wg.ldc = h;
            wg.epilogue = Backend::Gemm::Epilogue::bias_grad, wg.bias_grad = db1.data();
            be->gemm(wg);
            EXPECT_TRUE(same_floats(dw1, dw0)) << "bias_grad: dW " << tag;
            EXPECT_TRUE(same_floats(db1, db0)) << "bias_grad: db " << tag;
        }
}

// The layer output with the residual read by its GEMM (c_in, beta = 1: cuBLASLt's C ≠ D) is
// the copy of the residual into the output followed by the beta = 1 GEMM, bit for bit, in
// every type; the residual itself is left as it was. The stream checker sees c_in read.
TEST(EngineOpsFused, GemmWithResidualInputEqualsCopyThenBetaOne) {
    const int64_t R = 6, h = 10, F = 13;
    for (bool checked : {false, true})
        for (DType t : {DType::f32, DType::bf16, DType::f16}) {
            auto be = checked ? make_stream_checking_backend(backend()) : backend();
            const std::string tag = std::string(t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "fp16") + (checked ? " checked" : "");
            const vecf av = random_vec(R * F, 31), wv = random_vec(h * F, 32), bv = random_vec(h, 33), rv = random_vec(R * h, 34);
            TypedBuf a(*be, t, av), w(*be, t, wv), b(*be, t, bv), res(*be, t, rv);
            Backend::Gemm g;
            g.trans_b = true, g.M = R, g.N = h, g.K = F, g.beta = 1.0f;
            g.A = a.p(), g.a_type = t, g.lda = F, g.B = w.p(), g.b_type = t, g.ldb = F, g.c_type = t, g.ldc = h;
            g.bias = b.p();
            TypedBuf out0(*be, t, rv);  // the residual copied, then C = C + x·Wᵀ + b
            g.C = out0.p();
            be->gemm(g);
            TypedBuf out1(*be, t, vecf(R * h, 9.0f));
            g.C = out1.p(), g.c_in = res.p();
            be->gemm(g);
            EXPECT_TRUE(same_bytes(out1, out0)) << "c_in " << tag;
            EXPECT_TRUE(same_bytes(res, TypedBuf(*be, t, rv))) << "the residual changed " << tag;
        }
}

// accumulate_dx: the norm backward adds its input gradient to dx (the residual stream's
// gradient) — in f32 exactly the overwritten gradient added to the old dx, in 16-bit that
// sum rounded once (within one ulp of the two-rounding copy + add it replaces); the weight
// gradients are the same either way.
TEST(EngineOpsFused, NormBackwardAccumulatesIntoDx) {
    const int64_t rows = 5, C = 37;
    for (DType t : {DType::f32, DType::bf16})
        for (bool layer : {true, false}) {
            auto be = backend();
            const std::string tag = std::string(t == DType::f32 ? "f32" : "bf16") + (layer ? " ln" : " rms");
            const vecf xv = random_vec(rows * C, 41), wv = random_vec(C, 42), dv = random_vec(rows * C, 43);
            const vecf d0v = random_vec(rows * C, 44);
            TypedBuf x(*be, t, xv), w(*be, t, wv), dout(*be, t, dv), out(*be, t, vecf(rows * C));
            vecf mean(rows), rstd(rows);
            if (layer) be->layernorm_forward(t, out.p(), mean.data(), rstd.data(), x.p(), w.p(), w.p(), rows, C, 1e-5f);
            else be->rmsnorm_forward(t, out.p(), rstd.data(), x.p(), w.p(), rows, C, 1e-5f);
            auto run = [&](void* dx, bool acc, vecf& dw, vecf& db) {
                if (layer) be->layernorm_backward(t, dx, dw.data(), db.data(), dout.p(), x.p(), mean.data(), rstd.data(), w.p(), rows, C, acc);
                else be->rmsnorm_backward(t, dx, dw.data(), dout.p(), x.p(), rstd.data(), w.p(), rows, C, acc);
            };
            TypedBuf over(*be, t, vecf(rows * C)), acc(*be, t, d0v);
            vecf dw0(C, 0.0f), db0(C, 0.0f), dw1(C, 0.0f), db1(C, 0.0f);
            run(over.p(), false, dw0, db0);
            run(acc.p(), true, dw1, db1);
            EXPECT_TRUE(same_floats(dw1, dw0)) << "dw " << tag;
            if (layer) {
                EXPECT_TRUE(same_floats(db1, db0)) << "db " << tag;
            }
            TypedBuf sum(*be, t, d0v);  // the copy + add it replaces
            be->add(sum.p(), over.p(), t, rows * C);
            auto values = [&](TypedBuf v) {
                vecf f(rows * C);
                be->convert(f.data(), DType::f32, v.p(), t, rows * C);
                return f;
            };
            const vecf got = values(acc), want = values(sum), g = values(over), d0 = values(TypedBuf(*be, t, d0v));
            for (int64_t i = 0; i < rows * C; i++) {
                // bf16: the rounding of the gradient (copy + add) and of the sum, each ≤ half
                // an ulp (2^-8 relative) of the larger of the terms.
                const double ulp = (std::fabs(d0[(size_t)i]) + std::fabs(g[(size_t)i])) / 128;
                if (t == DType::f32) {
                    ASSERT_EQ(got[(size_t)i], want[(size_t)i]) << tag << " element " << i;
                } else {
                    ASSERT_NEAR(got[(size_t)i], want[(size_t)i], ulp) << tag << " element " << i;
                }
            }
        }
}

// An epilogue on a shape it does not support is a programmer error that stops the process.
TEST(EngineOpsFused, EpilogueOnUnsupportedShapeStops) {
    auto be = backend();
    vecf a(4, 1.0f), b(4, 1.0f), c(4), aux(4);
    Backend::Gemm g;
    g.M = 2, g.N = 2, g.K = 2, g.A = a.data(), g.lda = 2, g.B = b.data(), g.ldb = 2, g.C = c.data(), g.ldc = 2;
    g.epilogue = Backend::Gemm::Epilogue::dgelu, g.aux = aux.data(), g.beta = 1.0f;
    EXPECT_EXIT(be->gemm(g), ::testing::ExitedWithCode(1), "gelu epilogues need aux, beta 0");
}

}  // namespace
