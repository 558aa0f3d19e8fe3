// test_cuda_kernels.cpp — the CUDA backend's kernels (engine/cuda/kernels/*.cuh) run under
// the CUDA simulator (PTD_CUDA_SIM: threads as fibers in a random order per launch, shared
// memory poisoned at block start) against the CPU backend (make_cpu_backend, the reference
// semantics of backend.h) and against double-precision references written here.
//
// Shapes are odd on purpose: rows not a multiple of a block's row lanes or of a reduction
// chunk, C not a multiple of the 8-element vector (the scalar instantiation), C < 8, a single
// row, and pointers one element off 16-byte alignment (the scalar path on an aligned shape).
// Every output buffer starts as NaN bits, so an element a kernel fails to write shows up.
//
// Tolerances, per storage format:
//   f32   a few ulp relative to the CPU backend (summation order, expf vs the CPU's
//         polynomial exp), scaled by the magnitude of what was summed where a sum cancels;
//   bf16, f16  both sides are one f32 value rounded once: within one 16-bit ulp of the
//         CPU's result and of the double reference (plus the f32 slack above).
// Ops whose result is exactly defined (fill, convert, add, scale; the RoPE table) must match
// the CPU backend bit for bit; so must the fused residual + norm match add + norm on this
// backend, and every op repeated must give identical bits (determinism).
//
// The same file builds twice: test_cuda_kernels (the simulator, always) and, with
// ENABLE_CUDA, test_cuda_kernels_gpu (PTD_CUDA_KERNELS_ON_DEVICE: the nvcc kernels on a real
// GPU, ctest label `gpu`, every test skipped with the runtime's message when no device is
// visible).
#if !defined(PTD_CUDA_KERNELS_ON_DEVICE) && !defined(PTD_CUDA_SIM)
#define PTD_CUDA_SIM 1
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels.h"
#include "ptd/engine/backend.h"

namespace kc = ptd::cuda::PTD_CUDA_NS;
using ptd::engine::DType;

namespace {

// ---- typed host tensors ------------------------------------------------------------------

const char* type_name(DType t) { return t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "f16"; }

float bits_to_f32(DType t, const unsigned char* p) {
    if (t == DType::f32) {
        float f;
        std::memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    std::memcpy(&h, p, 2);
    return t == DType::bf16 ? ptd::engine::bf16_bits_to_f32(h) : ptd::engine::f16_bits_to_f32(h);
}
void f32_to_bits(DType t, float f, unsigned char* p) {
    if (t == DType::f32) return (void)std::memcpy(p, &f, 4);
    const uint16_t h = t == DType::bf16 ? ptd::engine::f32_to_bf16_bits(f) : ptd::engine::f32_to_f16_bits(f);
    std::memcpy(p, &h, 2);
}

// n elements of storage type t, with `pad` spare elements in front so that data() can sit
// one element off 16-byte alignment (misaligned = true) to exercise the scalar path.
struct Host {
    DType t = DType::f32;
    int64_t n = 0;
    std::vector<unsigned char> bytes;
    int64_t offset = 0;  // elements before data()

    Host() = default;
    Host(DType type, int64_t count, bool misaligned = false)
        : t(type), n(count), bytes(static_cast<size_t>((count + 16) * 4)), offset(misaligned ? 1 : 0) {
        std::fill(bytes.begin(), bytes.end(), 0xFF);  // NaN bits in every format
    }
    int es() const { return ptd::engine::dtype_bytes(t); }
    unsigned char* data() { return bytes.data() + offset * es(); }
    const unsigned char* data() const { return bytes.data() + offset * es(); }
    size_t size_bytes() const { return static_cast<size_t>(n) * es(); }
    float get(int64_t i) const { return bits_to_f32(t, data() + i * es()); }
    void set(int64_t i, float f) { f32_to_bits(t, f, data() + i * es()); }
    std::vector<double> as_double() const {
        std::vector<double> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; i++) v[i] = get(i);
        return v;
    }
};

Host random_host(DType t, int64_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f, bool misaligned = false) {
    Host h(t, n, misaligned);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    for (int64_t i = 0; i < n; i++) h.set(i, dist(rng));
    return h;
}
Host nan_host(DType t, int64_t n, bool misaligned = false) { return Host(t, n, misaligned); }

// ---- simulated device buffers ------------------------------------------------------------

// A device allocation mirroring a Host: same element offset from a 256-byte aligned base,
// so a misaligned host tensor is misaligned on the device too.
struct Dev {
    void* base = nullptr;
    unsigned char* ptr = nullptr;
    size_t bytes = 0;
    explicit Dev(const Host& h) : bytes(h.bytes.size()) {
        PTD_CUDA_CHECK(kc::malloc_device(&base, bytes, "test tensor"));
        ptr = static_cast<unsigned char*>(base) + h.offset * h.es();
        PTD_CUDA_CHECK(kc::memcpy_sync(base, h.bytes.data(), bytes, kc::CopyKind::host_to_device));
    }
    Dev(const Dev&) = delete;
    Dev& operator=(const Dev&) = delete;
    ~Dev() { (void)kc::free_device(base); }
    void* get() { return ptr; }
    float* f() { return reinterpret_cast<float*>(ptr); }
    void to(Host& h) const {
        PTD_CUDA_CHECK(kc::device_synchronize());
        PTD_CUDA_CHECK(kc::memcpy_sync(h.bytes.data(), base, bytes, kc::CopyKind::device_to_host));
    }
};

// ---- comparisons ---------------------------------------------------------------------------

constexpr double k_eps32 = 1.0 / (1 << 23);  // one f32 ulp at 1.0

// One ulp of the 16-bit format t at |x| (the f32 ulp for f32).
double ulp_of(DType t, double x) {
    const int mant = t == DType::f32 ? 23 : t == DType::bf16 ? 7 : 10;
    const int min_exp = t == DType::f16 ? -14 : -126;
    const double ax = std::fabs(x);
    int e = ax > 0 ? std::ilogb(ax) : min_exp;
    if (e < min_exp) e = min_exp;
    return std::ldexp(1.0, e - mant);
}

// Per element: |got − want| ≤ ulps16 ulp of t at max(|got|, |want|) (16-bit formats) +
// f32_ulps · eps32 · (|want| + scale[i]), scale = the magnitude of what the element sums.
// Stops after 5 failures; names the op, type and index.
void expect_near(const std::string& what, DType t, const Host& got, const std::vector<double>& want,
                 double f32_ulps, const std::vector<double>* scale = nullptr, double ulps16 = 1.0) {
    ASSERT_EQ(got.n, static_cast<int64_t>(want.size())) << what;
    int bad = 0;
    for (int64_t i = 0; i < got.n; i++) {
        const double g = got.get(i), w = want[i];
        double tol = f32_ulps * k_eps32 * (std::fabs(w) + (scale ? (*scale)[i] : 0.0));
        if (t != DType::f32) tol += ulps16 * ulp_of(t, std::max(std::fabs(g), std::fabs(w)));
        if (!(std::fabs(g - w) <= tol)) {
            ADD_FAILURE() << what << " (" << type_name(t) << ") [" << i << "] = " << g << ", expected " << w
                          << " (tol " << tol << ")";
            if (++bad == 5) return;
        }
    }
}
void expect_near(const std::string& what, DType t, const Host& got, const Host& want, double f32_ulps,
                 const std::vector<double>* scale = nullptr, double ulps16 = 1.0) {
    expect_near(what, t, got, want.as_double(), f32_ulps, scale, ulps16);
}

void expect_bits_equal(const std::string& what, const Host& got, const Host& want) {
    ASSERT_EQ(got.n, want.n) << what;
    int bad = 0;
    for (int64_t i = 0; i < got.n; i++) {
        if (std::memcmp(got.data() + i * got.es(), want.data() + i * want.es(), got.es()) != 0) {
            ADD_FAILURE() << what << " (" << type_name(got.t) << ") [" << i << "] = " << got.get(i) << ", expected "
                          << want.get(i) << " bit for bit";
            if (++bad == 5) return;
        }
    }
}

ptd::engine::Backend& cpu_backend() {
    static std::unique_ptr<ptd::engine::Backend> be = ptd::engine::make_cpu_backend(1);
    return *be;
}

const DType k_types[] = {DType::f32, DType::bf16, DType::f16};

// Every test needs a device: the simulator always has one; the GPU build skips cleanly
// without one (no driver, no GPU visible).
class CudaKernels : public ::testing::Test {
protected:
    void SetUp() override {
        int count = 0;
        const kc::Status st = kc::device_count(&count);
        if (!st.ok() || count == 0)
            GTEST_SKIP() << "no CUDA device: " << (st.ok() ? std::string("0 devices visible") : st.message);
    }
};

// ---- elementwise ----------------------------------------------------------------------------

// n spans: empty, below one vector, one vector, vector + tail, many vectors + tail, and
// enough that a thread goes round the grid-stride loop several times (the simulator caps a
// grid-stride launch at 16 blocks of 256 threads: 70001 = 8751 vectors, or 70001 scalars).
const int64_t k_lengths[] = {0, 1, 7, 8, 9, 1003, 70001};

TEST_F(CudaKernels, FillMatchesCpuBitForBit) {
    for (DType t : k_types)
        for (int64_t n : k_lengths)
            for (bool mis : {false, true}) {
                Host g = nan_host(t, n, mis), c = nan_host(t, n, mis);
                Dev d(g);
                kc::fill(d.get(), t, 0.3f, n, nullptr);
                d.to(g);
                cpu_backend().fill(c.data(), t, 0.3f, n);
                expect_bits_equal("fill n=" + std::to_string(n), g, c);
            }
}

TEST_F(CudaKernels, ConvertEveryPairMatchesCpuBitForBit) {
    for (DType dt : k_types)
        for (DType st : k_types)
            for (int64_t n : k_lengths)
                for (bool mis : {false, true}) {
                    // Values beyond f16's range and below its normal range, to exercise rounding,
                    // overflow to inf and subnormals.
                    Host src = random_host(st, n, 11 + static_cast<uint32_t>(n), -7e4f, 7e4f, mis);
                    if (n > 3) src.set(1, 3.0e-6f), src.set(2, -1.0e-8f), src.set(3, 1.00390625f);
                    Host g = nan_host(dt, n, mis), c = nan_host(dt, n, mis);
                    Dev ds(src), dd(g);
                    kc::convert(dd.get(), dt, ds.get(), st, n, nullptr);
                    dd.to(g);
                    cpu_backend().convert(c.data(), dt, src.data(), st, n);
                    expect_bits_equal(std::string("convert ") + type_name(st) + "->" + type_name(dt) +
                                          " n=" + std::to_string(n) + (mis ? " misaligned" : ""),
                                      g, c);
                }
}

TEST_F(CudaKernels, AddAndScaleMatchCpuBitForBit) {
    for (DType t : k_types)
        for (int64_t n : k_lengths)
            for (bool mis : {false, true}) {
                Host y = random_host(t, n, 1, -2, 2, mis), x = random_host(t, n, 2, -2, 2, mis);
                Host c = y;
                Dev dy(y), dx(x);
                kc::add(dy.get(), dx.get(), t, n, nullptr);
                dy.to(y);
                cpu_backend().add(c.data(), x.data(), t, n);
                expect_bits_equal("add n=" + std::to_string(n), y, c);
            }
    for (int64_t n : k_lengths)
        for (bool mis : {false, true}) {
            Host x = random_host(DType::f32, n, 3, -2, 2, mis);
            Host c = x;
            Dev dx(x);
            kc::scale(dx.f(), -0.37f, n, nullptr);
            dx.to(x);
            cpu_backend().scale(reinterpret_cast<float*>(c.data()), -0.37f, n);
            expect_bits_equal("scale n=" + std::to_string(n), x, c);
        }
}

// ---- activations ------------------------------------------------------------------------------

double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_d(double x) {
    const double a = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + std::tanh(a));
}
double gelu_grad_d(double x) {
    const double a = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    const double da = std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * x * x);
    const double th = std::tanh(a);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * da;
}

TEST_F(CudaKernels, GeluForwardBackward) {
    for (DType t : k_types)
        for (int64_t n : k_lengths)
            for (bool mis : {false, true}) {
                const std::string tag = " n=" + std::to_string(n) + (mis ? " misaligned" : "");
                Host x = random_host(t, n, 5, -6, 6, mis), dout = random_host(t, n, 6, -1, 1, mis);
                Host out = nan_host(t, n, mis), dx = nan_host(t, n, mis);
                {
                    Dev dX(x), dO(out), dD(dout), dDX(dx);
                    kc::gelu_forward(t, dO.get(), dX.get(), n, nullptr);
                    kc::gelu_backward(t, dDX.get(), dX.get(), dD.get(), n, nullptr);
                    dO.to(out);
                    dDX.to(dx);
                }
                Host c_out = nan_host(t, n, mis), c_dx = nan_host(t, n, mis);
                cpu_backend().gelu_forward(t, c_out.data(), x.data(), n);
                cpu_backend().gelu_backward(t, c_dx.data(), x.data(), dout.data(), n);
                std::vector<double> ref(n), ref_d(n), scale(n);
                for (int64_t i = 0; i < n; i++) {
                    const double xi = x.get(i);
                    ref[i] = gelu_d(xi);
                    ref_d[i] = dout.get(i) * gelu_grad_d(xi);
                    scale[i] = std::fabs(dout.get(i)) * (1.0 + std::fabs(xi));  // the terms of gelu'
                }
                std::vector<double> fscale(n);
                for (int64_t i = 0; i < n; i++) fscale[i] = std::fabs(x.get(i));  // x·σ(2a) near 0
                expect_near("gelu_forward vs cpu" + tag, t, out, c_out, 8, &fscale);
                expect_near("gelu_forward vs double" + tag, t, out, ref, 8, &fscale);
                expect_near("gelu_backward vs cpu" + tag, t, dx, c_dx, 8, &scale);
                expect_near("gelu_backward vs double" + tag, t, dx, ref_d, 8, &scale);
            }
}

TEST_F(CudaKernels, SwigluForwardBackward) {
    for (DType t : k_types)
        for (int64_t n : k_lengths)
            for (bool mis : {false, true}) {
                const std::string tag = " n=" + std::to_string(n) + (mis ? " misaligned" : "");
                Host g = random_host(t, n, 7, -8, 8, mis), u = random_host(t, n, 8, -2, 2, mis);
                Host dout = random_host(t, n, 9, -1, 1, mis);
                Host out = nan_host(t, n, mis), dg = nan_host(t, n, mis), du = nan_host(t, n, mis);
                {
                    Dev dG(g), dU(u), dD(dout), dO(out), dDG(dg), dDU(du);
                    kc::swiglu_forward(t, dO.get(), dG.get(), dU.get(), n, nullptr);
                    kc::swiglu_backward(t, dDG.get(), dDU.get(), dD.get(), dG.get(), dU.get(), n, nullptr);
                    dO.to(out);
                    dDG.to(dg);
                    dDU.to(du);
                }
                Host c_out = nan_host(t, n, mis), c_dg = nan_host(t, n, mis), c_du = nan_host(t, n, mis);
                cpu_backend().swiglu_forward(t, c_out.data(), g.data(), u.data(), n);
                cpu_backend().swiglu_backward(t, c_dg.data(), c_du.data(), dout.data(), g.data(), u.data(), n);
                std::vector<double> r_out(n), r_dg(n), r_du(n), s_dg(n);
                for (int64_t i = 0; i < n; i++) {
                    const double gi = g.get(i), ui = u.get(i), di = dout.get(i), s = sigmoid_d(gi);
                    r_out[i] = gi * s * ui;
                    r_du[i] = di * gi * s;
                    r_dg[i] = di * ui * s * (1.0 + gi * (1.0 - s));
                    s_dg[i] = std::fabs(di * ui) * (1.0 + std::fabs(gi));  // 1 + g(1 − σ) cancels near g ≈ −1.28
                }
                expect_near("swiglu_forward vs cpu" + tag, t, out, c_out, 8);
                expect_near("swiglu_forward vs double" + tag, t, out, r_out, 8);
                expect_near("swiglu_backward dgate vs cpu" + tag, t, dg, c_dg, 8, &s_dg);
                expect_near("swiglu_backward dgate vs double" + tag, t, dg, r_dg, 8, &s_dg);
                expect_near("swiglu_backward dup vs cpu" + tag, t, du, c_du, 8);
                expect_near("swiglu_backward dup vs double" + tag, t, du, r_du, 8);
            }
}

// ---- norms ------------------------------------------------------------------------------------

struct NormShape {
    int64_t rows, C;
    bool misaligned;
};
// Rows: one, fewer than the 8 row lanes, not a multiple of 8 or of the 32-row chunk, and
// enough for several chunks of uneven length (300 → 10 chunks of 30; 1100 → 35 of 32, the
// last one short). C: below one vector, not a multiple of 8, vectors, many vectors, and
// rows longer than one pass of the block (scalar 1030 > 512 threads; 4104 = 513 vectors >
// 512 threads), so a thread strides the row more than once.
const NormShape k_norm_shapes[] = {{1, 8, false},   {1, 3, false},     {5, 7, false},   {37, 19, false},
                                   {33, 64, false},  {300, 40, false},  {67, 256, true}, {1100, 24, false},
                                   {9, 776, false},  {2, 1030, false},  {3, 4104, false}};

// Double references. x, dout [rows, C]; w, b [C].
struct LnRef {
    std::vector<double> out, mean, rstd, dx, dw, db, dw_scale, dx_scale;
};
LnRef layernorm_ref(bool layer, const Host& x, const Host& w, const Host& b, const Host& dout, int64_t rows,
                    int64_t C, double eps) {
    LnRef r;
    r.out.resize(rows * C), r.dx.resize(rows * C), r.dx_scale.resize(rows * C);
    r.mean.resize(rows), r.rstd.resize(rows), r.dw.assign(C, 0.0), r.db.assign(C, 0.0), r.dw_scale.assign(C, 0.0);
    for (int64_t i = 0; i < rows; i++) {
        double m = 0.0, v = 0.0;
        if (layer) {
            for (int64_t c = 0; c < C; c++) m += x.get(i * C + c);
            m /= C;
        }
        for (int64_t c = 0; c < C; c++) v += (x.get(i * C + c) - m) * (x.get(i * C + c) - m);
        const double rs = 1.0 / std::sqrt(v / C + eps);
        r.mean[i] = m, r.rstd[i] = rs;
        double sg = 0.0, sgn = 0.0, sabs = 0.0;
        for (int64_t c = 0; c < C; c++) {
            const double n = (x.get(i * C + c) - m) * rs, g = dout.get(i * C + c) * w.get(c);
            r.out[i * C + c] = n * w.get(c) + (layer ? b.get(c) : 0.0);
            sg += g, sgn += g * n, sabs += std::fabs(g) * (1.0 + std::fabs(n));
            r.dw[c] += dout.get(i * C + c) * n;
            r.db[c] += dout.get(i * C + c);
            r.dw_scale[c] += std::fabs(dout.get(i * C + c)) * (1.0 + std::fabs(n));
        }
        const double mg = layer ? sg / C : 0.0, mgn = sgn / C;
        for (int64_t c = 0; c < C; c++) {
            const double n = (x.get(i * C + c) - m) * rs, g = dout.get(i * C + c) * w.get(c);
            r.dx[i * C + c] = (g - mg - n * mgn) * rs;
            // |g| + |mean g| + |n·mean(g n)|, bounded by the row's Σ|terms| / C, times rstd.
            r.dx_scale[i * C + c] = (std::fabs(g) + 2.0 * sabs / C * (1.0 + std::fabs(n))) * rs;
        }
    }
    return r;
}

// LayerNorm (layer = true) or RMSNorm forward and backward against the CPU backend and the
// double reference, then the same call repeated must give the same bits.
void check_norm(bool layer, DType t, const NormShape& s) {
    const int64_t rows = s.rows, C = s.C, n = rows * C;
    const bool mis = s.misaligned;
    const float eps = 1e-5f;
    const std::string tag = std::string(layer ? "layernorm" : "rmsnorm") + " rows=" + std::to_string(rows) +
                            " C=" + std::to_string(C) + (mis ? " misaligned" : "");
    Host x = random_host(t, n, 21, -3, 3, mis), w = random_host(t, C, 22, 0.5f, 1.5f, mis);
    for (int64_t i = 0; i < n; i++) x.set(i, x.get(i) + 1.5f);  // a mean well away from 0
    Host b = random_host(t, C, 23, -0.5f, 0.5f, mis), dout = random_host(t, n, 24, -1, 1, mis);
    Host out = nan_host(t, n, mis), mean = nan_host(DType::f32, rows), rstd = nan_host(DType::f32, rows);
    Host dx = nan_host(t, n, mis);
    Host dw = random_host(DType::f32, C, 25, -1, 1), db = random_host(DType::f32, C, 26, -1, 1);
    const Host dw0 = dw, db0 = db;
    Host ws_host(DType::f32, kc::row_reduce_workspace_floats(rows, C));
    {
        Dev dX(x), dW(w), dB(b), dO(out), dM(mean), dR(rstd), dD(dout), dDX(dx), dDW(dw), dDB(db), dWS(ws_host);
        if (layer) {
            kc::layernorm_forward(t, dO.get(), dM.f(), dR.f(), dX.get(), dW.get(), dB.get(), rows, C, eps, nullptr);
            kc::layernorm_backward(t, dDX.get(), dDW.f(), dDB.f(), dD.get(), dX.get(), dM.f(), dR.f(), dW.get(), rows,
                                   C, false, dWS.f(), nullptr);
        } else {
            kc::rmsnorm_forward(t, dO.get(), dR.f(), dX.get(), dW.get(), rows, C, eps, nullptr);
            kc::rmsnorm_backward(t, dDX.get(), dDW.f(), dD.get(), dX.get(), dR.f(), dW.get(), rows, C, false, dWS.f(),
                                 nullptr);
        }
        dO.to(out), dM.to(mean), dR.to(rstd), dDX.to(dx), dDW.to(dw), dDB.to(db);
    }
    // The CPU backend on the same inputs (its f32 statistics are its own).
    Host c_out = nan_host(t, n, mis), c_mean = nan_host(DType::f32, rows), c_rstd = nan_host(DType::f32, rows);
    Host c_dx = nan_host(t, n, mis), c_dw = dw0, c_db = db0;
    auto& be = cpu_backend();
    if (layer) {
        be.layernorm_forward(t, c_out.data(), reinterpret_cast<float*>(c_mean.data()),
                             reinterpret_cast<float*>(c_rstd.data()), x.data(), w.data(), b.data(), rows, C, eps);
        be.layernorm_backward(t, c_dx.data(), reinterpret_cast<float*>(c_dw.data()),
                              reinterpret_cast<float*>(c_db.data()), dout.data(), x.data(),
                              reinterpret_cast<const float*>(c_mean.data()),
                              reinterpret_cast<const float*>(c_rstd.data()), w.data(), rows, C);
    } else {
        be.rmsnorm_forward(t, c_out.data(), reinterpret_cast<float*>(c_rstd.data()), x.data(), w.data(), rows, C, eps);
        be.rmsnorm_backward(t, c_dx.data(), reinterpret_cast<float*>(c_dw.data()), dout.data(), x.data(),
                            reinterpret_cast<const float*>(c_rstd.data()), w.data(), rows, C);
    }
    const LnRef r = layernorm_ref(layer, x, w, b, dout, rows, C, eps);
    // Forward: a sum over C elements of size ≈ |x| feeds mean and rstd: f32 error ~ C·eps
    // relative in the worst case, a few eps in practice; out ≈ n·w + b with |n| ≤ ~4.
    std::vector<double> out_scale(n, 4.0), dw_want(C), db_want(C), dw_scale(C), db_scale(C, 0.0);
    for (int64_t c = 0; c < C; c++) {
        dw_want[c] = dw0.get(c) + r.dw[c], db_want[c] = db0.get(c) + r.db[c];
        dw_scale[c] = std::fabs(dw0.get(c)) + r.dw_scale[c] * 4.0;
        for (int64_t i = 0; i < rows; i++) db_scale[c] += std::fabs(dout.get(i * C + c));
        db_scale[c] = (db_scale[c] + std::fabs(db0.get(c))) * 4.0;
    }
    expect_near(tag + " out vs cpu", t, out, c_out, 16, &out_scale);
    expect_near(tag + " out vs double", t, out, r.out, 16, &out_scale);
    if (layer) {
        expect_near(tag + " mean vs cpu", DType::f32, mean, c_mean, 16 * std::sqrt(double(C)), &r.rstd);
        expect_near(tag + " mean vs double", DType::f32, mean, r.mean, 16 * std::sqrt(double(C)), &r.rstd);
    }
    expect_near(tag + " rstd vs cpu", DType::f32, rstd, c_rstd, 16);
    expect_near(tag + " rstd vs double", DType::f32, rstd, r.rstd, 16);
    expect_near(tag + " dx vs cpu", t, dx, c_dx, 16, &r.dx_scale);
    expect_near(tag + " dx vs double", t, dx, r.dx, 16, &r.dx_scale);
    expect_near(tag + " dw vs cpu", DType::f32, dw, c_dw, 16, &dw_scale);
    expect_near(tag + " dw vs double", DType::f32, dw, dw_want, 16, &dw_scale);
    if (layer) {
        expect_near(tag + " db vs cpu", DType::f32, db, c_db, 16, &db_scale);
        expect_near(tag + " db vs double", DType::f32, db, db_want, 16, &db_scale);
    }
}

TEST_F(CudaKernels, LayerNormForwardBackward) {
    for (DType t : k_types)
        for (const NormShape& s : k_norm_shapes) check_norm(true, t, s);
}

TEST_F(CudaKernels, RmsNormForwardBackward) {
    for (DType t : k_types)
        for (const NormShape& s : k_norm_shapes) check_norm(false, t, s);
}

// The fused residual forms equal add + norm on this backend bit for bit (also in place:
// res_out = residual), and accumulate_dx adds the input gradient to dx with one rounding.
void check_fused(bool layer, DType t, const NormShape& s) {
    const int64_t rows = s.rows, C = s.C, n = rows * C;
    const bool mis = s.misaligned;
    const float eps = 1e-5f;
    const std::string tag = std::string(layer ? "layernorm" : "rmsnorm") + " fused rows=" + std::to_string(rows) +
                            " C=" + std::to_string(C) + (mis ? " misaligned" : "");
    Host x = random_host(t, n, 31, -2, 2, mis), res = random_host(t, n, 32, -2, 2, mis);
    Host w = random_host(t, C, 33, 0.5f, 1.5f, mis), b = random_host(t, C, 34, -0.5f, 0.5f, mis);
    // Fused, in place on the residual stream.
    Host f_res = res, f_out = nan_host(t, n, mis), f_mean = nan_host(DType::f32, rows),
         f_rstd = nan_host(DType::f32, rows);
    {
        Dev dX(x), dR(f_res), dW(w), dB(b), dO(f_out), dM(f_mean), dS(f_rstd);
        if (layer)
            kc::layernorm_residual_forward(t, dR.get(), dO.get(), dM.f(), dS.f(), dX.get(), dR.get(), dW.get(),
                                           dB.get(), rows, C, eps, nullptr);
        else
            kc::rmsnorm_residual_forward(t, dR.get(), dO.get(), dS.f(), dX.get(), dR.get(), dW.get(), rows, C, eps,
                                         nullptr);
        dR.to(f_res), dO.to(f_out), dM.to(f_mean), dS.to(f_rstd);
    }
    // Unfused: add, then the norm.
    Host u_res = res, u_out = nan_host(t, n, mis), u_mean = nan_host(DType::f32, rows),
         u_rstd = nan_host(DType::f32, rows);
    {
        Dev dX(x), dR(u_res), dW(w), dB(b), dO(u_out), dM(u_mean), dS(u_rstd);
        kc::add(dR.get(), dX.get(), t, n, nullptr);
        if (layer)
            kc::layernorm_forward(t, dO.get(), dM.f(), dS.f(), dR.get(), dW.get(), dB.get(), rows, C, eps, nullptr);
        else
            kc::rmsnorm_forward(t, dO.get(), dS.f(), dR.get(), dW.get(), rows, C, eps, nullptr);
        dR.to(u_res), dO.to(u_out), dM.to(u_mean), dS.to(u_rstd);
    }
    expect_bits_equal(tag + " res_out", f_res, u_res);
    expect_bits_equal(tag + " out", f_out, u_out);
    if (layer) expect_bits_equal(tag + " mean", f_mean, u_mean);
    expect_bits_equal(tag + " rstd", f_rstd, u_rstd);

    // accumulate_dx: dx_acc = round(dx0 + grad) vs the overwritten grad added in double.
    Host dout = random_host(t, n, 35, -1, 1, mis), dx0 = random_host(t, n, 36, -1, 1, mis);
    Host g_over = nan_host(t, n, mis), g_acc = dx0;
    Host dw = nan_host(DType::f32, C), db = nan_host(DType::f32, C);
    for (int64_t c = 0; c < C; c++) dw.set(c, 0.0f), db.set(c, 0.0f);
    Host ws(DType::f32, kc::row_reduce_workspace_floats(rows, C));
    {
        Dev dX(u_res), dW(w), dM(u_mean), dS(u_rstd), dD(dout), dO(g_over), dA(g_acc), dDW(dw), dDB(db), dWS(ws);
        for (bool acc : {false, true}) {
            void* dst = acc ? dA.get() : dO.get();
            if (layer)
                kc::layernorm_backward(t, dst, dDW.f(), dDB.f(), dD.get(), dX.get(), dM.f(), dS.f(), dW.get(), rows, C,
                                       acc, dWS.f(), nullptr);
            else
                kc::rmsnorm_backward(t, dst, dDW.f(), dD.get(), dX.get(), dS.f(), dW.get(), rows, C, acc, dWS.f(),
                                     nullptr);
        }
        dO.to(g_over), dA.to(g_acc);
    }
    // g_over is one rounding of the f32 gradient; the accumulated value is within one 16-bit
    // ulp of dx0 + that gradient (and the f32 slack of the gradient itself).
    const LnRef r = layernorm_ref(layer, u_res, w, b, dout, rows, C, eps);
    std::vector<double> want(n), scale(n);
    for (int64_t i = 0; i < n; i++) want[i] = dx0.get(i) + r.dx[i], scale[i] = r.dx_scale[i];
    expect_near(tag + " accumulate_dx", t, g_acc, want, 16, &scale, 1.0);
}

TEST_F(CudaKernels, FusedResidualNormEqualsAddThenNorm) {
    for (DType t : k_types)
        for (const NormShape& s : k_norm_shapes) {
            check_fused(true, t, s);
            check_fused(false, t, s);
        }
}

TEST_F(CudaKernels, BiasGradMatchesCpuAndDouble) {
    const NormShape shapes[] = {{1, 5, false}, {7, 8, false}, {40, 3, false}, {300, 33, false}, {1100, 16, true},
                                {70, 260, false}};
    for (DType t : k_types)
        for (const NormShape& s : shapes) {
            const int64_t rows = s.rows, cols = s.C;
            const std::string tag = "bias_grad rows=" + std::to_string(rows) + " cols=" + std::to_string(cols);
            Host dy = random_host(t, rows * cols, 41, -1, 1, s.misaligned), db = random_host(DType::f32, cols, 42);
            Host c_db = db;
            Host ws(DType::f32, kc::row_reduce_workspace_floats(rows, cols));
            std::vector<double> want(cols), scale(cols, 0.0);
            for (int64_t c = 0; c < cols; c++) {
                want[c] = db.get(c), scale[c] = std::fabs(db.get(c));
                for (int64_t r = 0; r < rows; r++)
                    want[c] += dy.get(r * cols + c), scale[c] += std::fabs(dy.get(r * cols + c));
                scale[c] *= 4.0;
            }
            {
                Dev dDY(dy), dDB(db), dWS(ws);
                kc::bias_grad(dDB.f(), dDY.get(), t, rows, cols, dWS.f(), nullptr);
                dDB.to(db);
            }
            cpu_backend().bias_grad(reinterpret_cast<float*>(c_db.data()), dy.data(), t, rows, cols);
            expect_near(tag + " vs cpu", DType::f32, db, c_db, 8, &scale);
            expect_near(tag + " vs double", DType::f32, db, want, 8, &scale);
        }
}

// Same inputs, same bits: the row reductions run twice, each launch with a different thread
// order in the simulator.
TEST_F(CudaKernels, RowReductionsAreDeterministic) {
    const int64_t rows = 1100, C = 40;
    for (DType t : {DType::f32, DType::bf16}) {
        Host x = random_host(t, rows * C, 51), dout = random_host(t, rows * C, 52), w = random_host(t, C, 53);
        Host b = random_host(t, C, 54), out = nan_host(t, rows * C);
        Host mean = nan_host(DType::f32, rows), rstd = nan_host(DType::f32, rows);
        Host ws(DType::f32, kc::row_reduce_workspace_floats(rows, C));
        Host first_dw, first_db, first_dx;
        for (int run = 0; run < 2; run++) {
            Host dw(DType::f32, C), db(DType::f32, C), dx = nan_host(t, rows * C);
            for (int64_t c = 0; c < C; c++) dw.set(c, 0.0f), db.set(c, 0.0f);
            Dev dX(x), dD(dout), dW(w), dB(b), dO(out), dM(mean), dR(rstd), dWS(ws), dDW(dw), dDB(db), dDX(dx);
            kc::layernorm_forward(t, dO.get(), dM.f(), dR.f(), dX.get(), dW.get(), dB.get(), rows, C, 1e-5f, nullptr);
            kc::layernorm_backward(t, dDX.get(), dDW.f(), dDB.f(), dD.get(), dX.get(), dM.f(), dR.f(), dW.get(), rows,
                                   C, false, dWS.f(), nullptr);
            dDW.to(dw), dDB.to(db), dDX.to(dx);
            if (run == 0) {
                first_dw = dw, first_db = db, first_dx = dx;
            } else {
                expect_bits_equal("layernorm_backward dw, second run", dw, first_dw);
                expect_bits_equal("layernorm_backward db, second run", db, first_db);
                expect_bits_equal("layernorm_backward dx, second run", dx, first_dx);
            }
        }
    }
}

// ---- RoPE ----------------------------------------------------------------------------------------

// The table as the CPU backend forms it (double angle, one rounding).
std::vector<float> rope_table_ref(int64_t positions, int64_t D, float theta) {
    const int64_t half = D / 2;
    std::vector<float> tab(static_cast<size_t>(2 * positions * half));
    for (int64_t i = 0; i < half; i++) {
        const double freq = std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / D);
        for (int64_t p = 0; p < positions; p++) {
            tab[p * half + i] = static_cast<float>(std::cos(static_cast<double>(p) * freq));
            tab[(positions + p) * half + i] = static_cast<float>(std::sin(static_cast<double>(p) * freq));
        }
    }
    return tab;
}

TEST_F(CudaKernels, RopeTableMatchesCpuFormulaBitForBit) {
    for (int64_t D : {2, 6, 64, 128})
        for (int64_t positions : {1, 37, 300}) {
            Host tab = nan_host(DType::f32, positions * D);
            {
                Dev d(tab);
                kc::rope_table(d.f(), positions, D, 10000.0f, nullptr);
                d.to(tab);
            }
            const std::vector<float> ref = rope_table_ref(positions, D, 10000.0f);
            Host want(DType::f32, positions * D);
            for (size_t i = 0; i < ref.size(); i++) want.set(static_cast<int64_t>(i), ref[i]);
            expect_bits_equal("rope_table D=" + std::to_string(D) + " positions=" + std::to_string(positions), tab,
                              want);
        }
}

// The CPU backend's RoPE in either form of backend.h: main's (angles from theta inside the
// op) or helper mem's (angles from a table built once by rope_table). Both form the same
// f32 angles, so the reference is the same.
template <class Be>
void cpu_rope(Be& be, bool forward, DType t, void* x, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D,
              int64_t pos0, float theta, int64_t positions) {
    if constexpr (requires(float* tab) { be.rope_table(tab, positions, D, theta); }) {
        std::vector<float> tab(static_cast<size_t>(positions * D));
        be.rope_table(tab.data(), positions, D, theta);
        if (forward) be.rope_forward(t, x, ld, B, T, nh, D, pos0, tab.data(), positions);
        else be.rope_backward(t, x, ld, B, T, nh, D, pos0, tab.data(), positions);
    } else {
        if (forward) be.rope_forward(t, x, ld, B, T, nh, D, pos0, theta);
        else be.rope_backward(t, x, ld, B, T, nh, D, pos0, theta);
    }
}

struct RopeShape {
    int64_t B, T, nh, D, extra_cols, pos0;  // ld = nh·D + extra_cols
    bool misaligned;
};

TEST_F(CudaKernels, RopeForwardBackwardOnFusedQkvColumns) {
    // D/2 = 8, 16 (vector path, with and without extra columns between rows), 3 and 7 (scalar);
    // ld with an odd number of extra columns (rows not 16-byte aligned); single row.
    const RopeShape shapes[] = {{2, 5, 3, 16, 0, 0, false},  {1, 7, 2, 32, 64, 3, false}, {2, 3, 2, 6, 5, 1, false},
                                {1, 1, 1, 14, 0, 9, false},  {3, 4, 2, 16, 3, 2, false},  {2, 9, 4, 16, 32, 0, true},
                                {2, 64, 8, 64, 0, 5, false}};  // 8192 groups of 8 > 16 blocks · 256 threads
    const float theta = 10000.0f;
    for (DType t : k_types)
        for (const RopeShape& s : shapes) {
            const int64_t ld = s.nh * s.D + s.extra_cols, rows = s.B * s.T, n = rows * ld;
            const int64_t positions = s.pos0 + s.T + 2;
            const std::string tag = "rope B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
                                    " nh=" + std::to_string(s.nh) + " D=" + std::to_string(s.D) +
                                    " ld=" + std::to_string(ld) + " pos0=" + std::to_string(s.pos0);
            Host x = random_host(t, n, 61, -2, 2, s.misaligned);
            Host fwd = x, back = x, tab = nan_host(DType::f32, positions * s.D);
            {
                Dev dF(fwd), dB(back), dT(tab);
                kc::rope_table(dT.f(), positions, s.D, theta, nullptr);
                kc::rope_forward(t, dF.get(), ld, s.B, s.T, s.nh, s.D, s.pos0, dT.f(), positions, nullptr);
                kc::rope_backward(t, dB.get(), ld, s.B, s.T, s.nh, s.D, s.pos0, dT.f(), positions, nullptr);
                dF.to(fwd), dB.to(back);
            }
            Host c_fwd = x, c_back = x;
            cpu_rope(cpu_backend(), true, t, c_fwd.data(), ld, s.B, s.T, s.nh, s.D, s.pos0, theta, positions);
            cpu_rope(cpu_backend(), false, t, c_back.data(), ld, s.B, s.T, s.nh, s.D, s.pos0, theta, positions);
            // Double reference; the columns beyond nh·D (k, v of the fused qkv) stay untouched.
            const std::vector<float> tabr = rope_table_ref(positions, s.D, theta);
            std::vector<double> want_f(n), want_b(n), scale(n);
            const int64_t half = s.D / 2;
            for (int64_t bt = 0; bt < rows; bt++)
                for (int64_t col = 0; col < ld; col++) {
                    const int64_t i = bt * ld + col;
                    want_f[i] = want_b[i] = x.get(i), scale[i] = 0.0;
                    if (col >= s.nh * s.D) continue;
                    const int64_t h = col / s.D, j = col % s.D, k = j % half, p = s.pos0 + bt % s.T;
                    const double a = x.get(bt * ld + h * s.D + k), b = x.get(bt * ld + h * s.D + k + half);
                    const double c = tabr[p * half + k], sn = tabr[(positions + p) * half + k];
                    want_f[i] = j < half ? a * c - b * sn : a * sn + b * c;
                    want_b[i] = j < half ? a * c + b * sn : -a * sn + b * c;
                    scale[i] = std::fabs(a) + std::fabs(b);
                }
            expect_near(tag + " forward vs cpu", t, fwd, c_fwd, 4, &scale);
            expect_near(tag + " forward vs double", t, fwd, want_f, 4, &scale);
            expect_near(tag + " backward vs cpu", t, back, c_back, 4, &scale);
            expect_near(tag + " backward vs double", t, back, want_b, 4, &scale);
        }
}

// A broken contract is a caller bug: the launch function stops the process naming the op.
TEST_F(CudaKernels, ContractViolationsStopNamingTheOp) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    Host h = random_host(DType::f32, 64, 71);
    Dev d(h);
    EXPECT_DEATH(kc::convert(d.get(), DType::bf16, d.get(), DType::f32, 8, nullptr), "convert: dst == src");
    EXPECT_DEATH(kc::layernorm_forward(DType::f32, d.get(), d.f(), d.f(), d.get(), d.get(), d.get(), 2, 0, 1e-5f,
                                       nullptr),
                 "layernorm_forward: needs rows >= 0 and C > 0");
    EXPECT_DEATH(kc::rope_forward(DType::f32, d.get(), 8, 1, 4, 1, 8, 2, d.f(), 5, nullptr),
                 "rope_forward: pos0 \\+ T exceeds the positions of the table");
    EXPECT_DEATH(kc::rope_forward(DType::f32, d.get(), 4, 1, 1, 1, 8, 0, d.f(), 5, nullptr), "rope_forward: ld < nh");
    EXPECT_DEATH(kc::fill(d.get(), DType::i32, 0.0f, 4, nullptr), "fill: dtype must be f32, bf16 or f16");
}

}  // namespace

// ---- kernb ----
