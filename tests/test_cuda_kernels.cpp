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

#include "gpu_test_device.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_backend.h"
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
// so a misaligned host tensor is misaligned on the device too. It ends with the tensor's
// last element (not with the Host's spare elements), so under the simulator's memcheck
// (test_cuda_kernels_memcheck) a kernel touching one element past the tensor faults.
struct Dev {
    void* base = nullptr;
    unsigned char* ptr = nullptr;
    size_t bytes = 0;
    explicit Dev(const Host& h) : bytes(std::max<size_t>(1, static_cast<size_t>(h.offset + h.n) * h.es())) {
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
            PTD_GPU_TEST_NO_DEVICE("no CUDA device: " + (st.ok() ? std::string("0 devices visible") : st.message));
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
                              reinterpret_cast<const float*>(c_rstd.data()), w.data(), rows, C, false);
    } else {
        be.rmsnorm_forward(t, c_out.data(), reinterpret_cast<float*>(c_rstd.data()), x.data(), w.data(), rows, C, eps);
        be.rmsnorm_backward(t, c_dx.data(), reinterpret_cast<float*>(c_dw.data()), dout.data(), x.data(),
                            reinterpret_cast<const float*>(c_rstd.data()), w.data(), rows, C, false);
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

// A TP layer's output after its reduction in one kernel: out = (x + bias, rounded) +
// residual, bit for bit the CPU backend's copy, bias_add, add (Backend::bias_residual_add's
// default), in every type, with and without a bias, vector and scalar paths, out = x too.
TEST_F(CudaKernels, BiasResidualAddIsCopyBiasAddAddBitForBit) {
    const NormShape shapes[] = {{1, 5, false}, {7, 8, false}, {40, 3, false}, {33, 64, false}, {20, 16, true}};
    for (DType t : k_types)
        for (const NormShape& s : shapes)
            for (bool with_bias : {true, false})
                for (bool in_place : {false, true}) {
                    const int64_t rows = s.rows, C = s.C, n = rows * C;
                    const std::string tag = std::string("bias_residual_add ") + type_name(t) + " rows=" +
                                            std::to_string(rows) + " C=" + std::to_string(C) +
                                            (s.misaligned ? " misaligned" : "") + (with_bias ? "" : " no bias") +
                                            (in_place ? " out=x" : "");
                    Host x = random_host(t, n, 151, -2, 2, s.misaligned), bias = random_host(t, C, 152, -1, 1, s.misaligned);
                    Host res = random_host(t, n, 153, -2, 2, s.misaligned), out = nan_host(t, n, s.misaligned);
                    Host c_x = x, c_out = out;
                    {
                        Dev dX(x), dB(bias), dR(res), dO(out);
                        void* o = in_place ? dX.get() : dO.get();
                        kc::bias_residual_add(o, dX.get(), with_bias ? dB.get() : nullptr, dR.get(), t, rows, C, nullptr);
                        dX.to(x), dO.to(out);
                    }
                    void* co = in_place ? c_x.data() : c_out.data();
                    cpu_backend().bias_residual_add(co, c_x.data(), with_bias ? bias.data() : nullptr, res.data(), t,
                                                    rows, C);
                    expect_bits_equal(tag, in_place ? x : out, in_place ? c_x : c_out);
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
// Attention softmax, cross entropy, embedding and positions, the step reductions and
// scalars, AdamW and split_tokens (engine/cuda/kernels/{attention,xent,embedding,reduce,
// optimizer}.cuh). Tolerances:
//   - embedding and position forward/backward, split_tokens, sum_into, finish_step_scalars
//     and AdamW (p, m, v and the 16-bit model copy) must equal the CPU backend bit for bit:
//     they do the same f32/f64 operations in the same order;
//   - softmax and cross entropy: a few f32 ulp (expf vs the CPU's polynomial exp, the
//     order of the row sums), plus one 16-bit ulp for 16-bit probabilities;
//   - Σx²: relative 1e-12 against a double reference (both sum doubles, in other orders);
//   - attention composed with the reference cuBLASLt layer (the GEMM layouts kernels.h
//     states) against the CPU backend's attention: relative to the magnitude of the
//     tensor, 2e-5 in f32, 3 ulp of the 16-bit format otherwise (the GPU path rounds the
//     probabilities and dS to t before the GEMMs that consume them; the CPU does not).
#include "blaslt.h"
#if defined(PTD_CUDA_SIM)
#include "sim/sim.h"  // set_seed: the thread order of the simulator's launches
#endif

namespace {

// Skips without a device, as CudaKernels (the GPU build of this file).
class CudaKernelsKernb : public CudaKernels {};

// ---- helpers ----------------------------------------------------------------------------------

// i32 device buffer from host values.
struct DevInts {
    void* base = nullptr;
    int64_t n = 0;
    explicit DevInts(const std::vector<int32_t>& v) : n(static_cast<int64_t>(v.size())) {
        PTD_CUDA_CHECK(kc::malloc_device(&base, std::max<size_t>(4, v.size() * 4), "test ints"));
        if (!v.empty())
            PTD_CUDA_CHECK(kc::memcpy_sync(base, v.data(), v.size() * 4, kc::CopyKind::host_to_device));
    }
    DevInts(const DevInts&) = delete;
    DevInts& operator=(const DevInts&) = delete;
    ~DevInts() { (void)kc::free_device(base); }
    int32_t* get() { return static_cast<int32_t*>(base); }
    std::vector<int32_t> host() const {
        std::vector<int32_t> v(static_cast<size_t>(n));
        PTD_CUDA_CHECK(kc::device_synchronize());
        if (n) PTD_CUDA_CHECK(kc::memcpy_sync(v.data(), base, v.size() * 4, kc::CopyKind::device_to_host));
        return v;
    }
};

// Device doubles (the step scalars, Σx² accumulators, workspaces).
struct DevDoubles {
    void* base = nullptr;
    size_t n = 0;
    explicit DevDoubles(const std::vector<double>& v) : n(v.size()) {
        PTD_CUDA_CHECK(kc::malloc_device(&base, std::max<size_t>(8, n * 8), "test doubles"));
        if (n) PTD_CUDA_CHECK(kc::memcpy_sync(base, v.data(), n * 8, kc::CopyKind::host_to_device));
    }
    DevDoubles(const DevDoubles&) = delete;
    DevDoubles& operator=(const DevDoubles&) = delete;
    ~DevDoubles() { (void)kc::free_device(base); }
    double* get() { return static_cast<double*>(base); }
    std::vector<double> host() const {
        std::vector<double> v(n);
        PTD_CUDA_CHECK(kc::device_synchronize());
        if (n) PTD_CUDA_CHECK(kc::memcpy_sync(v.data(), base, n * 8, kc::CopyKind::device_to_host));
        return v;
    }
};

// A raw device copy of a trivially copyable array (the multi-tensor lists).
template <class E>
struct DevArray {
    void* base = nullptr;
    explicit DevArray(const std::vector<E>& v) {
        PTD_CUDA_CHECK(kc::malloc_device(&base, std::max<size_t>(1, v.size()) * sizeof(E), "test list"));
        if (!v.empty())
            PTD_CUDA_CHECK(kc::memcpy_sync(base, v.data(), v.size() * sizeof(E), kc::CopyKind::host_to_device));
    }
    DevArray(const DevArray&) = delete;
    DevArray& operator=(const DevArray&) = delete;
    ~DevArray() { (void)kc::free_device(base); }
    const E* get() const { return static_cast<const E*>(base); }
};

// |got − want| ≤ rtol · max|want| for every element: for composed results whose error is
// relative to the tensor's magnitude, not to each element.
void expect_close_to_scale(const std::string& what, const Host& got, const Host& want, double rtol) {
    ASSERT_EQ(got.n, want.n) << what;
    double mag = 0.0;
    for (int64_t i = 0; i < want.n; i++) mag = std::max(mag, std::fabs(static_cast<double>(want.get(i))));
    int bad = 0;
    for (int64_t i = 0; i < got.n; i++) {
        const double g = got.get(i), w = want.get(i);
        if (!(std::fabs(g - w) <= rtol * mag)) {
            ADD_FAILURE() << what << " [" << i << "] = " << g << ", expected " << w << " (tol " << rtol * mag << ")";
            if (++bad == 5) return;
        }
    }
}

kc::DTypeLt lt_type(DType t) {
    return t == DType::f32 ? kc::DTypeLt::f32 : t == DType::bf16 ? kc::DTypeLt::bf16 : kc::DTypeLt::f16;
}

// Row-major, batched: C_i[M,N] = alpha·op(A_i)·op(B_i) + beta·C_i (lda/ldb/ldc as row-major
// leading dimensions, strides in elements) through the cuBLASLt layer, mapped to its
// column-major terms as the backend will: Cᵀ = op(B)ᵀ·op(A)ᵀ.
void rm_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A, DType at, int64_t lda,
             int64_t sa, const void* B, DType bt, int64_t ldb, int64_t sb, float beta, void* C, DType ct, int64_t ldc,
             int64_t sc, int64_t batch) {
    kc::LtMatmul p;
    p.trans_a = tb, p.trans_b = ta;
    p.m = N, p.n = M, p.k = K;
    p.alpha = alpha, p.beta = beta;
    p.A = B, p.a_type = lt_type(bt), p.lda = ldb, p.stride_a = sb;
    p.B = A, p.b_type = lt_type(at), p.ldb = lda, p.stride_b = sa;
    p.C = C, p.c_type = lt_type(ct), p.ldc = ldc, p.stride_c = sc;
    p.D = C, p.d_type = lt_type(ct), p.ldd = ldc, p.stride_d = sc;
    p.batch = batch;
    PTD_CUDA_CHECK(kc::lt_matmul(p, nullptr));
}

struct AttnShape {
    int64_t B, T, H, G, D;
};
const AttnShape k_attn_shapes[] = {{1, 1, 1, 1, 4}, {2, 7, 3, 3, 5}, {1, 16, 4, 2, 8}, {2, 9, 2, 1, 16}};

// ---- attention softmax: the kernels alone, against a double reference --------------------------

// P[t,u] of scale·scores over u ≤ t, 0 above; scores as stored (already rounded to their type).
// mag (optional): per element, |P|·(|scale·s| + |max|) — the error of the f32 exponent's
// argument, relative to P.
std::vector<double> causal_softmax_ref(const Host& scores, int64_t rows, int64_t T, double scale,
                                       std::vector<double>* mag = nullptr) {
    std::vector<double> p(static_cast<size_t>(rows * T), 0.0);
    if (mag) mag->assign(p.size(), 0.0);
    for (int64_t r = 0; r < rows; r++) {
        const int64_t t = r % T;
        double mx = -INFINITY, s = 0.0;
        for (int64_t u = 0; u <= t; u++) mx = std::max(mx, scale * scores.get(r * T + u));
        for (int64_t u = 0; u <= t; u++) s += std::exp(scale * scores.get(r * T + u) - mx);
        for (int64_t u = 0; u <= t; u++) {
            p[r * T + u] = std::exp(scale * scores.get(r * T + u) - mx) / s;
            if (mag) (*mag)[r * T + u] = p[r * T + u] * (std::fabs(scale * scores.get(r * T + u)) + std::fabs(mx));
        }
    }
    return p;
}

TEST_F(CudaKernelsKernb, AttentionSoftmaxForwardMatchesDouble) {
    // T = 1 (a single key), T < 8, T a multiple of 8 (the vector path), T = 8k + 1.
    for (DType pt : k_types)
        for (DType st : {DType::f32, pt})
            for (int64_t T : {1, 5, 16, 17})
                for (bool mis : {false, true}) {
                    const int64_t BH = 3, rows = BH * T;
                    const std::string tag = std::string("softmax fwd scores ") + type_name(st) + " T=" +
                                            std::to_string(T) + (mis ? " misaligned" : "");
                    Host s = random_host(st, rows * T, 61 + static_cast<uint32_t>(T), -6, 6, mis);
                    Host p = nan_host(pt, rows * T, mis);
                    {
                        Dev dS(s), dP(p);
                        kc::attention_softmax_forward(pt, dP.get(), st, dS.get(), BH, T, 0.7f, nullptr);
                        dP.to(p);
                    }
                    std::vector<double> mag;
                    const std::vector<double> want = causal_softmax_ref(s, rows, T, 0.7, &mag);
                    expect_near(tag, pt, p, want, 8, &mag);
                }
}

TEST_F(CudaKernelsKernb, AttentionSoftmaxForwardInPlace) {
    for (DType t : k_types) {
        const int64_t BH = 2, T = 24, rows = BH * T;
        Host s = random_host(t, rows * T, 71, -4, 4), p = nan_host(t, rows * T);
        {
            Dev dS(s);
            kc::attention_softmax_forward(t, dS.get(), t, dS.get(), BH, T, 1.3f, nullptr);
            dS.to(p);
        }
        std::vector<double> mag;
        const std::vector<double> want = causal_softmax_ref(s, rows, T, 1.3, &mag);
        expect_near("softmax fwd in place", t, p, want, 8, &mag);
    }
}

TEST_F(CudaKernelsKernb, AttentionSoftmaxBackwardMatchesDouble) {
    for (DType pt : k_types)
        for (DType gt : {DType::f32, pt})
            for (int64_t T : {1, 6, 8, 25})
                for (bool mis : {false, true})
                    for (bool in_place : {false, true}) {
                        const int64_t BH = 2, rows = BH * T;
                        const std::string tag = std::string("softmax bwd grad ") + type_name(gt) + " T=" +
                                                std::to_string(T) + (mis ? " misaligned" : "") +
                                                (in_place ? " in place" : "");
                        // Probabilities as the forward makes them (causal, rows summing to 1).
                        Host s = random_host(DType::f32, rows * T, 81, -3, 3, mis), p = nan_host(pt, rows * T, mis);
                        {
                            Dev dS(s), dP(p);
                            kc::attention_softmax_forward(pt, dP.get(), DType::f32, dS.get(), BH, T, 1.0f, nullptr);
                            dP.to(p);
                        }
                        Host dp = random_host(gt, rows * T, 82, -1, 1, mis), ds = nan_host(gt, rows * T, mis);
                        const double scale = 0.35;
                        std::vector<double> want(static_cast<size_t>(rows * T), 0.0), mag(want.size(), 0.0);
                        for (int64_t r = 0; r < rows; r++) {
                            const int64_t t = r % T;
                            double rho = 0.0, rho_mag = 0.0;
                            for (int64_t u = 0; u <= t; u++)
                                rho += p.get(r * T + u) * dp.get(r * T + u),
                                    rho_mag += std::fabs(p.get(r * T + u) * dp.get(r * T + u));
                            for (int64_t u = 0; u <= t; u++) {
                                want[r * T + u] = scale * p.get(r * T + u) * (dp.get(r * T + u) - rho);
                                mag[r * T + u] = 4 * scale * std::fabs(p.get(r * T + u)) * (std::fabs(dp.get(r * T + u)) + rho_mag);
                            }
                        }
                        {
                            Dev dP(p), dDP(dp), dDS(ds);
                            void* out = in_place ? dDP.get() : dDS.get();
                            kc::attention_softmax_backward(pt, dP.get(), gt, out, dDP.get(), BH, T,
                                                           static_cast<float>(scale), nullptr);
                            (in_place ? dDP : dDS).to(ds);
                        }
                        expect_near(tag, gt, ds, want, 8, &mag);
                    }
}

// ---- attention: the kernels between the reference cuBLASLt GEMMs, against the CPU backend ------

// The permute kernels against a CPU reference of the index map (kernels.h): rows
// [B·T, (H + 2G)·D] → q [B,H,T,D] ‖ k [B,G,T,D] ‖ v [B,G,T,D] and back, bit for bit; G = 0
// is the context's [B·T, H·D] ↔ [B,H,T,D]. A misaligned tensor too (no vector path to
// miss), and more elements than the simulator's capped grid covers in one pass.
TEST_F(CudaKernelsKernb, AttentionHeadsSplitAndMergeAreTheHeadMajorPermute) {
    struct Shape {
        int64_t B, T, H, G, D;
    };
    const Shape shapes[] = {{1, 1, 1, 1, 1}, {2, 7, 3, 3, 5}, {2, 9, 4, 2, 8}, {3, 5, 2, 0, 4}, {1, 40, 4, 1, 16}};
    for (DType t : k_types)
        for (const Shape& sh : shapes)
            for (bool mis : {false, true}) {
                const int64_t B = sh.B, T = sh.T, H = sh.H, G = sh.G, D = sh.D, ld = (H + 2 * G) * D, n = B * T * ld;
                const std::string tag = std::string(type_name(t)) + " B=" + std::to_string(B) + " T=" +
                                        std::to_string(T) + " H=" + std::to_string(H) + " G=" + std::to_string(G) +
                                        " D=" + std::to_string(D) + (mis ? " misaligned" : "");
                Host rows = random_host(t, n, 95, -4, 4, mis), heads = nan_host(t, n, mis), back = nan_host(t, n, mis);
                {
                    Dev dR(rows), dH(heads), dB(back);
                    kc::attention_heads_split(t, dH.get(), dR.get(), B, T, H, G, D, nullptr);
                    kc::attention_heads_merge(t, dB.get(), dH.get(), B, T, H, G, D, nullptr);
                    dH.to(heads), dB.to(back);
                }
                const int es = rows.es();
                for (int64_t b = 0; b < B; b++)
                    for (int64_t tt = 0; tt < T; tt++)
                        for (int64_t j = 0; j < H + 2 * G; j++)
                            for (int64_t d = 0; d < D; d++) {
                                // part 0 (q, H heads), 1 (k) or 2 (v, G heads each), one block after the other
                                const int64_t part = j < H ? 0 : j < H + G ? 1 : 2, nh = part == 0 ? H : G;
                                const int64_t head = part == 0 ? j : j - H - (part - 1) * G;
                                const int64_t start = part == 0 ? 0 : B * T * D * (H + (part - 1) * G);
                                const int64_t hi = start + ((b * nh + head) * T + tt) * D + d;
                                const int64_t ri = (b * T + tt) * ld + j * D + d;
                                ASSERT_EQ(std::memcmp(heads.data() + hi * es, rows.data() + ri * es, es), 0)
                                    << tag << " split: b " << b << " t " << tt << " head " << j << " d " << d;
                            }
                ASSERT_EQ(std::memcmp(back.data(), rows.data(), rows.size_bytes()), 0)
                    << tag << " merge(split(x)) != x";
            }
}

// The forward as the CUDA backend runs it (the layouts of kernels.h): q, k, v split
// head-major, the scores of every kv-head group by ONE strided-batched GEMM (the group's
// rep query heads stacked in M), the softmax kernel over all of them, the context GEMM
// batched the same way, and the context merged back into [B, T, H, D].
// scores_in_probs: the scores go in t straight into probs and the softmax runs in place —
// what the backend does (backend.h plans no f32 scores); else f32 scores in a scratch.
void gpu_attention_forward(DType t, Dev& ctx, Dev& probs, Dev& qkv, const AttnShape& s, bool scores_in_probs) {
    const int64_t B = s.B, T = s.T, H = s.H, G = s.G, D = s.D, rep = H / G, ld = (H + 2 * G) * D;
    const DType st = scores_in_probs ? t : DType::f32;
    Host scores_h = nan_host(DType::f32, scores_in_probs ? 1 : B * H * T * T);
    Dev scores_f32(scores_h);
    Dev& scores = scores_in_probs ? probs : scores_f32;
    Host heads_h = nan_host(t, B * T * ld), ctx_h = nan_host(t, B * T * H * D);
    Dev heads(heads_h), ctx_heads(ctx_h);
    const auto at = [&](Dev& d, int64_t elems) { return d.ptr + elems * ptd::engine::dtype_bytes(t); };
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    kc::attention_heads_split(t, heads.get(), qkv.get(), B, T, H, G, D, nullptr);
    void* k = at(heads, B * H * T * D);
    void* v = at(heads, B * (H + G) * T * D);
    rm_gemm(false, true, rep * T, T, D, scale, heads.get(), t, D, rep * T * D, k, t, D, T * D, 0.0f, scores.get(), st,
            T, rep * T * T, B * G);
    kc::attention_softmax_forward(t, probs.get(), st, scores.get(), B * H, T, 1.0f, nullptr);
    rm_gemm(false, false, rep * T, D, T, 1.0f, probs.get(), t, T, rep * T * T, v, t, D, T * D, 0.0f, ctx_heads.get(), t,
            D, rep * T * D, B * G);
    kc::attention_heads_merge(t, ctx.get(), ctx_heads.get(), B, T, H, 0, D, nullptr);
}

// The backward: q, k, v and dctx split head-major; dP into the workspace (t), the softmax
// backward in place (dS, scaled), then dq, and dk/dv with K = rep·T (the sum over a group's
// query heads inside the GEMM) — every GEMM one strided batch over the B·G groups — and the
// gradients merged into dqkv.
void gpu_attention_backward(DType t, Dev& dqkv, Dev& dctx, Dev& probs, Dev& qkv, const AttnShape& s) {
    const int64_t B = s.B, T = s.T, H = s.H, G = s.G, D = s.D, rep = H / G, ld = (H + 2 * G) * D;
    Host w_h = nan_host(t, B * H * T * T), heads_h = nan_host(t, B * T * ld), dctx_h = nan_host(t, B * T * H * D);
    Dev w(w_h), heads(heads_h), dheads(heads_h), dctx_heads(dctx_h);
    const auto at = [&](Dev& d, int64_t elems) { return d.ptr + elems * ptd::engine::dtype_bytes(t); };
    kc::attention_heads_split(t, heads.get(), qkv.get(), B, T, H, G, D, nullptr);
    kc::attention_heads_split(t, dctx_heads.get(), dctx.get(), B, T, H, 0, D, nullptr);
    void *q = heads.get(), *k = at(heads, B * H * T * D), *v = at(heads, B * (H + G) * T * D);
    void *dq = dheads.get(), *dk = at(dheads, B * H * T * D), *dv = at(dheads, B * (H + G) * T * D);
    rm_gemm(false, true, rep * T, T, D, 1.0f, dctx_heads.get(), t, D, rep * T * D, v, t, D, T * D, 0.0f, w.get(), t, T,
            rep * T * T, B * G);
    kc::attention_softmax_backward(t, probs.get(), t, w.get(), w.get(), B * H, T,
                                   1.0f / std::sqrt(static_cast<float>(D)), nullptr);
    rm_gemm(false, false, rep * T, D, T, 1.0f, w.get(), t, T, rep * T * T, k, t, D, T * D, 0.0f, dq, t, D, rep * T * D,
            B * G);
    rm_gemm(true, false, T, D, rep * T, 1.0f, w.get(), t, T, rep * T * T, q, t, D, rep * T * D, 0.0f, dk, t, D, T * D,
            B * G);
    rm_gemm(true, false, T, D, rep * T, 1.0f, probs.get(), t, T, rep * T * T, dctx_heads.get(), t, D, rep * T * D, 0.0f,
            dv, t, D, T * D, B * G);
    kc::attention_heads_merge(t, dqkv.get(), dheads.get(), B, T, H, G, D, nullptr);
}

// The CPU backend's attention backward, with the planned workspace helper mem's backend.h
// asks for when this tree has that form (main's allocates its own scratch).
template <class BE>
void cpu_attention_backward(BE& be, DType t, void* dqkv, const void* dctx, const void* probs, const void* qkv,
                            int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
    if constexpr (requires(void* ws) { be.attention_backward(t, dqkv, dctx, probs, qkv, B, T, H, G, D, ws); }) {
        const int64_t bytes = be.attention_backward_workspace(t, B, T, H, G, D);
        std::vector<double> ws(static_cast<size_t>((bytes + 7) / 8) + 1);
        be.attention_backward(t, dqkv, dctx, probs, qkv, B, T, H, G, D, static_cast<void*>(ws.data()));
    } else {
        be.attention_backward(t, dqkv, dctx, probs, qkv, B, T, H, G, D);
    }
}

double attn_rtol(DType t) { return t == DType::f32 ? 2e-5 : t == DType::bf16 ? 3.0 / 256 : 3.0 / 2048; }

TEST_F(CudaKernelsKernb, AttentionWithReferenceGemmsMatchesCpuBackend) {
    for (DType t : k_types)
        for (const AttnShape& s : k_attn_shapes) {
            const int64_t B = s.B, T = s.T, H = s.H, G = s.G, D = s.D, ld = (H + 2 * G) * D;
            const std::string tag = std::string("attention ") + type_name(t) + " B=" + std::to_string(B) +
                                    " T=" + std::to_string(T) + " H=" + std::to_string(H) + " G=" + std::to_string(G) +
                                    " D=" + std::to_string(D);
            Host qkv = random_host(t, B * T * ld, 91, -2, 2), dctx = random_host(t, B * T * H * D, 92, -1, 1);
            Host ctx = nan_host(t, B * T * H * D), probs = nan_host(t, B * H * T * T), dqkv = nan_host(t, B * T * ld);
            Host c_ctx = ctx, c_probs = probs, c_dqkv = dqkv;
            cpu_backend().attention_forward(t, c_ctx.data(), c_probs.data(), qkv.data(), B, T, H, G, D,
                                            nullptr);  // the CPU backend's forward uses no scratch
            cpu_attention_backward(cpu_backend(), t, c_dqkv.data(), dctx.data(), c_probs.data(), qkv.data(), B, T, H,
                                   G, D);
            Host ctx2 = ctx, probs2 = probs;
            {
                Dev dQKV(qkv), dCTX(ctx), dP(probs);
                gpu_attention_forward(t, dCTX, dP, dQKV, s, false);
                dCTX.to(ctx), dP.to(probs);
            }
            {
                Dev dQKV(qkv), dCTX(ctx2), dP(probs2);
                gpu_attention_forward(t, dCTX, dP, dQKV, s, true);
                dCTX.to(ctx2), dP.to(probs2);
            }
            {
                // The backward from the CPU's probabilities, so that it is compared alone.
                Dev dQKV(qkv), dDCTX(dctx), dP(c_probs), dDQKV(dqkv);
                gpu_attention_backward(t, dDQKV, dDCTX, dP, dQKV, s);
                dDQKV.to(dqkv);
            }
            expect_near(tag + " probs", t, probs, c_probs, 16);
            expect_close_to_scale(tag + " ctx", ctx, c_ctx, attn_rtol(t));
            // Scores rounded to t before the softmax: one more 16-bit rounding of its argument.
            expect_close_to_scale(tag + " probs, scores in place", probs2, c_probs, attn_rtol(t));
            expect_close_to_scale(tag + " ctx, scores in place", ctx2, c_ctx, attn_rtol(t));
            expect_close_to_scale(tag + " dqkv", dqkv, c_dqkv, attn_rtol(t));
        }
}

}  // namespace

namespace {

// ---- vocab-parallel cross entropy --------------------------------------------------------------

struct XentShape {
    int64_t rows, Vl, V_valid_pad;  // V_valid = tp · Vl − V_valid_pad (padding at the end)
};
// Single row; Vl < 8; Vl not a multiple of 8; a multiple of 8 (the vector path) with
// padding; rows beyond a block's count.
const XentShape k_xent_shapes[] = {{1, 5, 0}, {3, 7, 2}, {5, 64, 5}, {37, 100, 13}, {2, 1, 0}};

std::vector<int32_t> xent_targets(int64_t rows, int64_t V_valid, int64_t V_total, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; r++) t[r] = static_cast<int32_t>(rng() % static_cast<uint32_t>(V_valid));
    if (rows > 2 && V_total > V_valid) t[1] = static_cast<int32_t>(V_total - 1);  // a padding column: absent
    return t;
}

// The four phases on tp shards (Vl columns each), with the TP all-reduces done on the host,
// once on this backend and once on the CPU backend; compares loss, probabilities and dlogits.
TEST_F(CudaKernelsKernb, XentFourPhasesMatchCpuOnTensorParallelShards) {
    for (int tp : {1, 2, 3})
        for (const XentShape& s : k_xent_shapes) {
            const int64_t rows = s.rows, Vl = s.Vl, V_valid = std::max<int64_t>(1, tp * Vl - s.V_valid_pad);
            const std::string tag = "xent tp=" + std::to_string(tp) + " rows=" + std::to_string(rows) +
                                    " Vl=" + std::to_string(Vl) + " V_valid=" + std::to_string(V_valid);
            const std::vector<int32_t> targets = xent_targets(rows, V_valid, tp * Vl, 101 + tp);
            std::vector<Host> logits, c_logits;
            for (int k = 0; k < tp; k++) logits.push_back(random_host(DType::f32, rows * Vl, 102 + k, -8, 8));
            c_logits = logits;
            // Phase 1 + max all-reduce.
            std::vector<float> rowmax(rows, -INFINITY), c_rowmax(rows, -INFINITY);
            std::vector<Host> part(tp);
            DevInts dT(targets);
            for (int k = 0; k < tp; k++) {
                Host m = nan_host(DType::f32, rows);
                Dev dL(logits[k]), dM(m);
                kc::xent_row_max(dM.f(), dL.f(), rows, Vl, k * Vl, V_valid, nullptr);
                dM.to(m);
                std::vector<float> cm(rows);
                cpu_backend().xent_row_max(cm.data(), reinterpret_cast<const float*>(c_logits[k].data()), rows, Vl,
                                           k * Vl, V_valid);
                for (int64_t r = 0; r < rows; r++) {
                    EXPECT_EQ(m.get(r), cm[r]) << tag << " row max, shard " << k << " row " << r;  // exact: a max
                    rowmax[r] = std::max(rowmax[r], m.get(r)), c_rowmax[r] = std::max(c_rowmax[r], cm[r]);
                }
            }
            // Phase 2 + sum all-reduce.
            std::vector<float> sums(2 * rows, 0.0f), c_sums(2 * rows, 0.0f);
            Host rm(DType::f32, rows);
            for (int64_t r = 0; r < rows; r++) rm.set(r, rowmax[r]);
            for (int k = 0; k < tp; k++) {
                Host se = nan_host(DType::f32, rows), tl = nan_host(DType::f32, rows);
                Dev dL(logits[k]), dRM(rm), dSE(se), dTL(tl);
                kc::xent_sums(dSE.f(), dTL.f(), dL.f(), dRM.f(), dT.get(), rows, Vl, k * Vl, V_valid, nullptr);
                dSE.to(se), dTL.to(tl);
                std::vector<float> cse(rows), ctl(rows);
                cpu_backend().xent_sums(cse.data(), ctl.data(), reinterpret_cast<const float*>(c_logits[k].data()),
                                        c_rowmax.data(), targets.data(), rows, Vl, k * Vl, V_valid);
                for (int64_t r = 0; r < rows; r++) {
                    EXPECT_EQ(tl.get(r), ctl[r]) << tag << " target logit, shard " << k << " row " << r;
                    EXPECT_NEAR(se.get(r), cse[r], 8 * k_eps32 * cse[r]) << tag << " sumexp, shard " << k;
                    sums[r] += se.get(r), sums[rows + r] += tl.get(r);
                    c_sums[r] += cse[r], c_sums[rows + r] += ctl[r];
                }
            }
            // Phases 3 and 4 per shard.
            Host se(DType::f32, rows), tl(DType::f32, rows);
            for (int64_t r = 0; r < rows; r++) se.set(r, sums[r]), tl.set(r, sums[rows + r]);
            for (int k = 0; k < tp; k++) {
                Host loss = nan_host(DType::f32, rows);
                Host c_loss = loss;
                Host probs = nan_host(DType::f32, rows * Vl), dl = nan_host(DType::f32, rows * Vl);
                {
                    Dev dL(logits[k]), dRM(rm), dSE(se), dTL(tl), dLoss(loss), dDL(dl);
                    kc::xent_finish(dLoss.f(), dL.f(), dRM.f(), dSE.f(), dTL.f(), rows, Vl, k * Vl, V_valid, nullptr);
                    dL.to(probs), dLoss.to(loss);
                    kc::xent_backward(dDL.f(), DType::f32, dL.f(), dT.get(), 0.25f, rows, Vl, k * Vl, V_valid, nullptr);
                    dDL.to(dl);
                }
                auto* cl = reinterpret_cast<float*>(c_logits[k].data());
                cpu_backend().xent_finish(reinterpret_cast<float*>(c_loss.data()), cl, c_rowmax.data(), c_sums.data(),
                                          c_sums.data() + rows, rows, Vl, k * Vl, V_valid);
                Host c_probs = c_logits[k];
                cpu_backend().xent_backward(cl, DType::f32, cl, targets.data(), 0.25f, rows, Vl, k * Vl, V_valid);  // in place
                std::vector<double> loss_scale(rows);
                for (int64_t r = 0; r < rows; r++) loss_scale[r] = 8.0 + std::fabs(rowmax[r]);
                expect_near(tag + " loss", DType::f32, loss, c_loss, 16, &loss_scale);
                expect_near(tag + " probs", DType::f32, probs, c_probs, 16);
                std::vector<double> one(rows * Vl, 0.25);  // scale·1: the −1 of the target column
                expect_near(tag + " dlogits", DType::f32, dl, c_logits[k], 16, &one);
            }
        }
}

TEST_F(CudaKernelsKernb, XentFusedMatchesCpuFourPhases) {
    for (const XentShape& s : k_xent_shapes)
        for (bool with_grad : {true, false})
            for (bool in_place : {false, true}) {
                if (!with_grad && in_place) continue;
                const int64_t rows = s.rows, Vl = s.Vl, V_valid = std::max<int64_t>(1, Vl - s.V_valid_pad);
                const std::string tag = "xent_fused rows=" + std::to_string(rows) + " Vl=" + std::to_string(Vl) +
                                        (with_grad ? "" : " loss only") + (in_place ? " in place" : "");
                const std::vector<int32_t> targets = xent_targets(rows, V_valid, Vl, 111);
                Host logits = random_host(DType::f32, rows * Vl, 112, -8, 8);
                // The CPU backend: the four phases (tp = 1, no all-reduce).
                Host c = logits, c_loss = nan_host(DType::f32, rows);
                std::vector<float> mx(rows), se(rows), tl(rows);
                auto* cl = reinterpret_cast<float*>(c.data());
                cpu_backend().xent_row_max(mx.data(), cl, rows, Vl, 0, V_valid);
                cpu_backend().xent_sums(se.data(), tl.data(), cl, mx.data(), targets.data(), rows, Vl, 0, V_valid);
                cpu_backend().xent_finish(reinterpret_cast<float*>(c_loss.data()), cl, mx.data(), se.data(), tl.data(),
                                          rows, Vl, 0, V_valid);
                cpu_backend().xent_backward(cl, DType::f32, cl, targets.data(), 0.5f, rows, Vl, 0, V_valid);
                Host loss = nan_host(DType::f32, rows), dl = nan_host(DType::f32, rows * Vl);
                {
                    DevInts dT(targets);
                    Dev dL(logits), dLoss(loss), dDL(dl);
                    float* out = !with_grad ? nullptr : in_place ? dL.f() : dDL.f();
                    kc::xent_fused(dLoss.f(), out, DType::f32, dL.f(), dT.get(), 0.5f, rows, Vl, 0, V_valid, nullptr);
                    dLoss.to(loss);
                    if (in_place) dL.to(dl);
                    else if (with_grad) dDL.to(dl);
                }
                std::vector<double> loss_scale(rows);
                for (int64_t r = 0; r < rows; r++) loss_scale[r] = 8.0 + std::fabs(mx[r]);
                expect_near(tag + " loss", DType::f32, loss, c_loss, 16, &loss_scale);
                if (with_grad) {
                    std::vector<double> half(rows * Vl, 0.5);
                    expect_near(tag + " dlogits", DType::f32, dl, c, 16, &half);
                }
            }
}

// ---- embedding and positions ------------------------------------------------------------------------

struct EmbShape {
    int64_t rows, C;
    bool misaligned;
};
const EmbShape k_emb_shapes[] = {{1, 1, false}, {5, 7, false}, {9, 8, false}, {33, 24, false}, {20, 16, true},
                                 {300, 40, false}};

TEST_F(CudaKernelsKernb, EmbeddingForwardBackwardMatchCpuBitForBit) {
    for (DType t : k_types)
        for (const EmbShape& s : k_emb_shapes) {
            const int64_t rows = s.rows, C = s.C, Vl = 11, v0 = 6;  // shard [6, 17) of a vocabulary of 30
            const std::string tag = std::string("embedding ") + type_name(t) + " rows=" + std::to_string(rows) +
                                    " C=" + std::to_string(C) + (s.misaligned ? " misaligned" : "");
            std::mt19937 rng(121 + static_cast<uint32_t>(rows));
            std::vector<int32_t> tokens(rows);
            for (auto& tk : tokens) tk = static_cast<int32_t>(rng() % 30);  // about a third in the shard
            if (rows > 3) tokens[0] = tokens[3] = 9;                          // repeats in one bucket
            Host wte = random_host(t, Vl * C, 122, -2, 2, s.misaligned), out = nan_host(t, rows * C, s.misaligned);
            Host c_out = out;
            Host dout = random_host(t, rows * C, 123, -1, 1, s.misaligned);
            Host dwte = random_host(DType::f32, Vl * C, 124, -1, 1, s.misaligned);
            Host c_dwte = dwte;
            {
                DevInts dT(tokens), dWS(std::vector<int32_t>((size_t)kc::embedding_backward_workspace_ints(rows, Vl), -7));
                Dev dW(wte), dO(out), dD(dout), dDW(dwte);
                kc::embedding_forward(t, dO.get(), dT.get(), dW.get(), v0, Vl, rows, C, nullptr);
                kc::embedding_backward(t, dDW.f(), dD.get(), dT.get(), v0, Vl, rows, C, dWS.get(), nullptr);
                dO.to(out), dDW.to(dwte);
            }
            cpu_backend().embedding_forward(t, c_out.data(), tokens.data(), wte.data(), v0, Vl, rows, C);
            cpu_backend().embedding_backward(t, reinterpret_cast<float*>(c_dwte.data()), dout.data(), tokens.data(),
                                             v0, Vl, rows, C);
            expect_bits_equal(tag + " forward", out, c_out);
            expect_bits_equal(tag + " backward", dwte, c_dwte);
        }
}

// The embedding backward over several of its counting chunks (512 rows each) — frequent and
// rare tokens, a token that appears once, rows outside the shard — gives the CPU backend's
// bits: each token's rows are grouped in row order across the chunks (issue 30 point 5:
// integer counting instead of the O(rows²) scan). The racecheck ctest runs it in two
// block orders.
TEST_F(CudaKernelsKernb, EmbeddingBackwardAcrossChunksMatchesCpuBitForBit) {
    for (DType t : {DType::f32, DType::bf16}) {
        const int64_t rows = 1300, C = 16, Vl = 40, v0 = 10;  // shard [10, 50) of a vocabulary of 64
        std::mt19937 rng(77);
        std::vector<int32_t> tokens(rows);
        for (auto& tk : tokens) {  // a skewed draw: a few tokens in most rows
            const uint32_t u = rng() % 100;
            tk = static_cast<int32_t>(u < 40 ? 12 : u < 60 ? 30 + rng() % 3 : rng() % 64);
        }
        tokens[700] = 49;  // the shard's last token, once
        for (auto& tk : tokens)
            if (tk == 49 && &tk != &tokens[700]) tk = 48;
        Host dout = random_host(t, rows * C, 141, -1, 1, false);
        Host dwte = random_host(DType::f32, Vl * C, 142, -1, 1, false), c_dwte = dwte;
        {
            DevInts dT(tokens), dWS(std::vector<int32_t>((size_t)kc::embedding_backward_workspace_ints(rows, Vl), -7));
            Dev dD(dout), dDW(dwte);
            kc::embedding_backward(t, dDW.f(), dD.get(), dT.get(), v0, Vl, rows, C, dWS.get(), nullptr);
            dDW.to(dwte);
        }
        cpu_backend().embedding_backward(t, reinterpret_cast<float*>(c_dwte.data()), dout.data(), tokens.data(), v0,
                                         Vl, rows, C);
        expect_bits_equal(std::string("embedding backward over chunks ") + type_name(t), dwte, c_dwte);
    }
}

TEST_F(CudaKernelsKernb, PositionForwardBackwardMatchCpuBitForBit) {
    for (DType t : k_types)
        for (const EmbShape& s : k_emb_shapes)
            for (int64_t row0 : {0, 5}) {
                const int64_t rows = s.rows, C = s.C, T = 7;  // rows > T: positions wrap (micro-batch of B rows of T)
                const std::string tag = std::string("position ") + type_name(t) + " rows=" + std::to_string(rows) +
                                        " C=" + std::to_string(C) + " row0=" + std::to_string(row0) +
                                        (s.misaligned ? " misaligned" : "");
                Host wpe = random_host(t, T * C, 131, -1, 1, s.misaligned), out = random_host(t, rows * C, 132, -1, 1, s.misaligned);
                Host c_out = out;
                Host dout = random_host(t, rows * C, 133, -1, 1, s.misaligned);
                Host dwpe = random_host(DType::f32, T * C, 134, -1, 1, s.misaligned);
                Host c_dwpe = dwpe;
                {
                    Dev dW(wpe), dO(out), dD(dout), dDW(dwpe);
                    kc::position_forward(t, dO.get(), dW.get(), row0, rows, T, C, nullptr);
                    kc::position_backward(t, dDW.f(), dD.get(), row0, rows, T, C, nullptr);
                    dO.to(out), dDW.to(dwpe);
                }
                cpu_backend().position_forward(t, c_out.data(), wpe.data(), row0, rows, T, C);
                cpu_backend().position_backward(t, reinterpret_cast<float*>(c_dwpe.data()), dout.data(), row0, rows,
                                                T, C);
                expect_bits_equal(tag + " forward", out, c_out);
                expect_bits_equal(tag + " backward", dwpe, c_dwpe);
            }
}

TEST_F(CudaKernelsKernb, SplitTokens) {
    for (int64_t B : {1, 3})
        for (int64_t T : {1, 5, 300}) {
            std::vector<int32_t> seq(static_cast<size_t>(B * (T + 1)));
            for (size_t i = 0; i < seq.size(); i++) seq[i] = static_cast<int32_t>(1000 + i);
            std::vector<int32_t> want_in, want_tg;
            for (int64_t b = 0; b < B; b++)
                for (int64_t t = 0; t < T; t++)
                    want_in.push_back(seq[b * (T + 1) + t]), want_tg.push_back(seq[b * (T + 1) + t + 1]);
            DevInts dS(seq), dI(std::vector<int32_t>(B * T, -1)), dTg(std::vector<int32_t>(B * T, -1));
            kc::split_tokens(dI.get(), dTg.get(), dS.get(), B, T, nullptr);
            EXPECT_EQ(dI.host(), want_in) << "B=" << B << " T=" << T;
            EXPECT_EQ(dTg.host(), want_tg) << "B=" << B << " T=" << T;
            DevInts dTg2(std::vector<int32_t>(B * T, -1));
            kc::split_tokens(nullptr, dTg2.get(), dS.get(), B, T, nullptr);  // targets only
            EXPECT_EQ(dTg2.host(), want_tg);
        }
}

// ---- the CPU backend's step-scalar ops, in whichever form this tree's backend.h has --------
// main's (Σx² returned, AdamW's gradient factor an argument) or helper mem's step-scalar
// contract (Σx² accumulated into a device double, AdamW reading the scalars). Once mem's
// backend.h is merged the second branch of each is dead and can go.

template <class BE>
double cpu_sum_squares(BE& be, const float* x, int64_t n) {
    if constexpr (requires(double* acc) { be.sum_squares(acc, x, n); }) {
        double acc = 0.0;
        be.sum_squares(&acc, x, n);
        return acc;
    } else {
        return be.sum_squares(x, n);
    }
}

template <class BE>
void cpu_adamw(BE& be, float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2,
               float eps, float wd, const double* scalars, int64_t step, void* model_p, DType model_t) {
    if constexpr (requires { be.adamw(p, g, m, v, n, lr, b1, b2, eps, wd, scalars, step, model_p, model_t); }) {
        be.adamw(p, g, m, v, n, lr, b1, b2, eps, wd, scalars, step, model_p, model_t);
    } else {
        if (scalars[kc::k_step_scalar_found_inf] != 0.0) return;
        be.adamw(p, g, m, v, n, lr, b1, b2, eps, wd, static_cast<float>(scalars[kc::k_step_scalar_grad_scale]), step,
                 model_p, model_t);
    }
}

// The CPU backend's finish_step_scalars when this tree has it (false otherwise).
template <class BE>
bool cpu_finish_step_scalars(BE& be, double* s, double max_norm, double loss_scale) {
    if constexpr (requires { be.finish_step_scalars(s, max_norm, loss_scale); }) {
        be.finish_step_scalars(s, max_norm, loss_scale);
        return true;
    } else {
        return false;
    }
}

// ---- step reductions and scalars ----------------------------------------------------------------------

// In long double (64-bit mantissa), so that the reference's own rounding stays far below
// the 1e-12 the kernel is held to (a plain double sum of 2M terms drifts by ~1e-12 itself).
double sumsq_ref(const Host& x) {
    long double s = 0.0L;
    for (int64_t i = 0; i < x.n; i++) s += static_cast<long double>(x.get(i)) * x.get(i);
    return static_cast<double>(s);
}

// n: empty, single, odd, below one block's share, several blocks, more than the maximum
// block count times the minimum share (blocks then take larger slices).
const int64_t k_sumsq_lengths[] = {0, 1, 7, 1003, 70001, 2100000};

TEST_F(CudaKernelsKernb, SumSquaresMatchesDoubleAndCpu) {
    DevDoubles ws(std::vector<double>(static_cast<size_t>(kc::sum_squares_workspace_doubles()), NAN));
    for (int64_t n : k_sumsq_lengths)
        for (bool mis : {false, true}) {
            Host x = random_host(DType::f32, n, 141 + static_cast<uint32_t>(n), -3, 3, mis);
            DevDoubles acc(std::vector<double>{0.5});
            {
                Dev dX(x);
                kc::sum_squares(acc.get(), dX.f(), n, ws.get(), nullptr);
            }
            const double got = acc.host()[0], want = 0.5 + sumsq_ref(x);
            EXPECT_NEAR(got, want, 1e-12 * want) << "sum_squares n=" << n;
            const double cpu = 0.5 + cpu_sum_squares(cpu_backend(), reinterpret_cast<const float*>(x.data()), n);
            EXPECT_NEAR(got, cpu, 1e-11 * want) << "sum_squares vs cpu n=" << n;  // the CPU's own chunked double sums
        }
}

TEST_F(CudaKernelsKernb, SumSquaresListIsOneReductionOverEveryTensor) {
    // Tensors of every size above, empty ones between them, as the gradient list has them.
    std::vector<Host> xs;
    for (int64_t n : k_sumsq_lengths) xs.push_back(random_host(DType::f32, n, 151 + static_cast<uint32_t>(n), -2, 2));
    std::vector<std::unique_ptr<Dev>> ds;
    std::vector<kc::SumSquaresTensor> list;
    double want = 1.25;
    for (const Host& x : xs) {
        ds.push_back(std::make_unique<Dev>(x));
        list.push_back({ds.back()->f(), x.n, -1});
        want += sumsq_ref(x);
    }
    for (int count : {1, 2, static_cast<int>(list.size())}) {
        double w = 1.25;
        for (int k = 0; k < count; k++) w += sumsq_ref(xs[k]);
        std::vector<kc::SumSquaresTensor> l(list.begin(), list.begin() + count);
        const int64_t total = kc::tensor_list_starts(l.data(), count);
        DevArray<kc::SumSquaresTensor> dl(l);
        DevDoubles acc(std::vector<double>{1.25});
        DevDoubles ws(std::vector<double>(static_cast<size_t>(kc::sum_squares_workspace_doubles()), NAN));
        kc::sum_squares_list(acc.get(), dl.get(), count, total, ws.get(), nullptr);
        EXPECT_NEAR(acc.host()[0], w, 1e-12 * w) << "sum_squares_list count=" << count;
    }
}

TEST_F(CudaKernelsKernb, SumIntoIsTheCpuLossSumBitForBit) {
    for (int64_t n : {1, 7, 256, 1000, 5000}) {
        Host x = random_host(DType::f32, n, 161 + static_cast<uint32_t>(n), 0, 11);
        double want = 0.0;
        for (int64_t i = 0; i < n; i++) want += x.get(i);
        want = 3.0 + want;
        DevDoubles acc(std::vector<double>{3.0});
        {
            Dev dX(x);
            kc::sum_into(acc.get(), dX.f(), n, nullptr);
        }
        EXPECT_EQ(acc.host()[0], want) << "sum_into n=" << n;
    }
}

// The finish_step_scalars formula of backend.h (helper mem's contract), in double.
std::vector<double> finish_ref(std::vector<double> s, double max_norm, double loss_scale) {
    const double norm = std::sqrt(s[kc::k_step_scalar_grad_squares]) / loss_scale;
    s[kc::k_step_scalar_loss_scale] = loss_scale;
    s[kc::k_step_scalar_grad_norm] = norm;
    s[kc::k_step_scalar_found_inf] = std::isfinite(norm) && std::isfinite(s[kc::k_step_scalar_loss_sum]) ? 0.0 : 1.0;
    const float clip = (max_norm > 0 && norm > max_norm) ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.0f;
    s[kc::k_step_scalar_clip_scale] = clip;
    s[kc::k_step_scalar_grad_scale] = static_cast<float>(static_cast<double>(clip) / loss_scale);
    return s;
}

void expect_scalars_equal(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
    for (int k = 0; k < kc::k_step_scalar_count; k++) {
        if (std::isnan(want[k])) EXPECT_TRUE(std::isnan(got[k])) << what << " slot " << k;
        else EXPECT_EQ(got[k], want[k]) << what << " slot " << k;
    }
}

TEST_F(CudaKernelsKernb, FinishStepScalars) {
    struct Case {
        double loss, squares, max_norm, loss_scale;
    };
    const Case cases[] = {{12.5, 9.0, 1.0, 1.0},      {12.5, 0.25, 1.0, 1.0}, {3.0, 4.0, 0.0, 1.0},
                          {3.0, INFINITY, 1.0, 1.0},  {NAN, 4.0, 1.0, 1.0},   {3.0, NAN, 0.0, 1.0},
                          {0.0, 0.0, 1.0, 1.0},       {1e6, 1e30, 0.5, 1.0},  {7.0, 9.0e8, 1.0, 65536.0},
                          {7.0, 9.0e8, 0.0, 1024.0},  {7.0, 1e300 * 1e10, 1.0, 65536.0}};
    for (const Case& c : cases) {
        const std::string what = "loss " + std::to_string(c.loss) + " squares " + std::to_string(c.squares) +
                                 " max_norm " + std::to_string(c.max_norm) + " loss_scale " +
                                 std::to_string(c.loss_scale);
        std::vector<double> s(kc::k_step_scalar_count, -7.0);
        s[kc::k_step_scalar_loss_sum] = c.loss, s[kc::k_step_scalar_grad_squares] = c.squares;
        DevDoubles d(s);
        kc::finish_step_scalars(d.get(), c.max_norm, c.loss_scale, nullptr);
        const std::vector<double> got = d.host();
        expect_scalars_equal(got, finish_ref(s, c.max_norm, c.loss_scale), what + " vs formula");
        std::vector<double> cpu = s;
        if (cpu_finish_step_scalars(cpu_backend(), cpu.data(), c.max_norm, c.loss_scale))
            expect_scalars_equal(got, cpu, what + " vs cpu");
    }
}

// ---- AdamW --------------------------------------------------------------------------------------------

// Three tensors (odd sizes, one empty, one without decay) updated for three steps, with a
// clip scale from the step scalars; p, m, v and the 16-bit model copy must be the CPU
// backend's bits.
TEST_F(CudaKernelsKernb, AdamwMultiTensorMatchesCpuBitForBit) {
    const int64_t sizes[] = {1003, 0, 4099, 17};
    const float decay[] = {0.1f, 0.1f, 0.0f, 0.1f};
    for (DType model_t : k_types) {
        const bool has_model = model_t != DType::f32;
        std::vector<Host> p, g, m, v, model;
        for (size_t k = 0; k < std::size(sizes); k++) {
            const auto n = sizes[k];
            const uint32_t sd = 171 + 10 * static_cast<uint32_t>(k);
            p.push_back(random_host(DType::f32, n, sd, -1, 1));
            g.push_back(random_host(DType::f32, n, sd + 1, -0.1f, 0.1f));
            m.push_back(random_host(DType::f32, n, sd + 2, -0.01f, 0.01f));
            v.push_back(random_host(DType::f32, n, sd + 3, 0.0f, 0.001f));
            model.push_back(nan_host(model_t, n));
        }
        std::vector<Host> cp = p, cm = m, cv = v, cmodel = model;
        std::vector<std::unique_ptr<Dev>> keep;
        auto dev = [&](Host& h) {
            keep.push_back(std::make_unique<Dev>(h));
            return keep.back().get();
        };
        std::vector<Dev*> dp, dm, dv, dmodel;
        std::vector<kc::AdamWTensor> list;
        for (size_t k = 0; k < std::size(sizes); k++) {
            dp.push_back(dev(p[k])), dm.push_back(dev(m[k])), dv.push_back(dev(v[k])), dmodel.push_back(dev(model[k]));
            Dev* dg = dev(g[k]);
            list.push_back({dp[k]->f(), dg->f(), dm[k]->f(), dv[k]->f(), has_model ? dmodel[k]->get() : nullptr,
                            sizes[k], -1, decay[k]});
        }
        const int count = static_cast<int>(list.size());
        const int64_t total = kc::tensor_list_starts(list.data(), count);
        DevArray<kc::AdamWTensor> dl(list);
        std::vector<double> scalars(kc::k_step_scalar_count, 0.0);
        scalars[kc::k_step_scalar_grad_scale] = static_cast<float>(0.8 / (1.3 + 1e-6));
        DevDoubles ds(scalars);
        const float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
        for (int64_t step = 1; step <= 3; step++) {
            kc::adamw(dl.get(), count, total, lr, b1, b2, eps, step, ds.get(), has_model ? model_t : DType::f32,
                      nullptr);
            for (size_t k = 0; k < std::size(sizes); k++)
                cpu_adamw(cpu_backend(), reinterpret_cast<float*>(cp[k].data()),
                          reinterpret_cast<const float*>(g[k].data()), reinterpret_cast<float*>(cm[k].data()),
                          reinterpret_cast<float*>(cv[k].data()), sizes[k], lr, b1, b2, eps, decay[k], scalars.data(),
                          step, has_model ? cmodel[k].data() : nullptr, model_t);
        }
        for (size_t k = 0; k < std::size(sizes); k++) {
            const std::string tag = std::string("adamw model ") + type_name(model_t) + " tensor " + std::to_string(k);
            dp[k]->to(p[k]), dm[k]->to(m[k]), dv[k]->to(v[k]), dmodel[k]->to(model[k]);
            expect_bits_equal(tag + " p", p[k], cp[k]);
            expect_bits_equal(tag + " m", m[k], cm[k]);
            expect_bits_equal(tag + " v", v[k], cv[k]);
            if (has_model) expect_bits_equal(tag + " model copy", model[k], cmodel[k]);
        }
    }
}

TEST_F(CudaKernelsKernb, AdamwSkipsTheStepWhenFoundInf) {
    Host p = random_host(DType::f32, 300, 181), g = random_host(DType::f32, 300, 182), m = random_host(DType::f32, 300, 183);
    Host v = random_host(DType::f32, 300, 184, 0, 1), model = nan_host(DType::bf16, 300);
    const Host p0 = p, m0 = m, v0 = v, model0 = model;
    Dev dp(p), dg(g), dm(m), dv(v), dmodel(model);
    std::vector<kc::AdamWTensor> list = {{dp.f(), dg.f(), dm.f(), dv.f(), dmodel.get(), 300, -1, 0.1f}};
    const int64_t total = kc::tensor_list_starts(list.data(), 1);
    DevArray<kc::AdamWTensor> dl(list);
    std::vector<double> scalars(kc::k_step_scalar_count, 0.0);
    scalars[kc::k_step_scalar_grad_scale] = 1.0, scalars[kc::k_step_scalar_found_inf] = 1.0;
    DevDoubles ds(scalars);
    kc::adamw(dl.get(), 1, total, 1e-3f, 0.9f, 0.95f, 1e-8f, 1, ds.get(), DType::bf16, nullptr);
    dp.to(p), dm.to(m), dv.to(v), dmodel.to(model);
    expect_bits_equal("adamw found-inf p", p, p0);
    expect_bits_equal("adamw found-inf m", m, m0);
    expect_bits_equal("adamw found-inf v", v, v0);
    expect_bits_equal("adamw found-inf model", model, model0);
}

// ---- determinism ----------------------------------------------------------------------------------------

// Every reduction of this section twice, under two simulator seeds (a different thread order
// between barriers in every launch): the same bits. On a GPU (the gpu build) the two runs
// are two real schedules.
TEST_F(CudaKernelsKernb, ReductionsAreDeterministicAcrossSimulatorSeeds) {
    const int64_t BH = 3, T = 40, rows = 37, Vl = 200, C = 24, n = 90001;
    Host s = random_host(DType::bf16, BH * T * T, 191, -4, 4), dp = random_host(DType::bf16, BH * T * T, 192);
    Host logits = random_host(DType::f32, rows * Vl, 193, -6, 6), x = random_host(DType::f32, n, 194);
    Host dout = random_host(DType::bf16, rows * C, 195);
    std::vector<int32_t> targets = xent_targets(rows, Vl - 3, Vl, 196), tokens(rows);
    for (int64_t r = 0; r < rows; r++) tokens[r] = static_cast<int32_t>(r % 5);
    std::vector<Host> first;
    std::vector<double> first_sq;
#if defined(PTD_CUDA_SIM)
    const uint64_t saved_seed = ptd::cuda::sim::base_seed();
#else
    const uint64_t saved_seed = 1;
#endif
    for (uint64_t seed : {saved_seed, saved_seed ^ uint64_t{987654321}}) {
#if defined(PTD_CUDA_SIM)
        ptd::cuda::sim::set_seed(seed);
#else
        (void)seed;
#endif
        Host p = nan_host(DType::bf16, BH * T * T), ds = nan_host(DType::f32, BH * T * T);
        Host loss = nan_host(DType::f32, rows), dl = nan_host(DType::f32, rows * Vl);
        Host dwte(DType::f32, 5 * C);
        for (int64_t i = 0; i < 5 * C; i++) dwte.set(i, 0.0f);
        DevDoubles acc(std::vector<double>{0.0});
        {
            Dev dS(s), dP(p), dDP(dp), dDS(ds), dL(logits), dLoss(loss), dDL(dl), dX(x), dD(dout), dW(dwte);
            DevInts dT(targets), dTok(tokens);
            DevDoubles ws(std::vector<double>(static_cast<size_t>(kc::sum_squares_workspace_doubles())));
            kc::attention_softmax_forward(DType::bf16, dP.get(), DType::bf16, dS.get(), BH, T, 0.5f, nullptr);
            Host dpf(DType::f32, BH * T * T);
            for (int64_t i = 0; i < dpf.n; i++) dpf.set(i, dp.get(i));
            Dev dDPF(dpf);
            kc::attention_softmax_backward(DType::bf16, dP.get(), DType::f32, dDS.get(), dDPF.get(), BH, T, 0.5f,
                                           nullptr);
            kc::xent_fused(dLoss.f(), dDL.f(), DType::f32, dL.f(), dT.get(), 1.0f, rows, Vl, 0, Vl - 3, nullptr);
            kc::sum_squares(acc.get(), dX.f(), n, ws.get(), nullptr);
            DevInts dEWS(std::vector<int32_t>((size_t)kc::embedding_backward_workspace_ints(rows, 5)));
            kc::embedding_backward(DType::bf16, dW.f(), dD.get(), dTok.get(), 0, 5, rows, C, dEWS.get(), nullptr);
            dP.to(p), dDS.to(ds), dLoss.to(loss), dDL.to(dl), dW.to(dwte);
        }
        const std::vector<Host> now = {p, ds, loss, dl, dwte};
        if (first.empty()) {
            first = now;
            first_sq = acc.host();
        } else {
            const char* names[] = {"softmax forward", "softmax backward", "xent_fused loss", "xent_fused dlogits",
                                   "embedding backward"};
            for (size_t k = 0; k < now.size(); k++) expect_bits_equal(std::string(names[k]) + ", second seed", now[k], first[k]);
            EXPECT_EQ(acc.host()[0], first_sq[0]) << "sum_squares, second seed";
        }
    }
#if defined(PTD_CUDA_SIM)
    ptd::cuda::sim::set_seed(saved_seed);
#endif
}

}  // namespace

// ---- the CUDA backend's fused ops (cuda_backend.cpp over the kernels) -------------------------------

// Backend::plan_adamw / adamw_step on the CUDA backend: the ranges become one device list
// (MEM_WORKSPACE, adamw_plan_bytes of it, released by an empty plan), and each step is one
// multi-tensor launch with the same bits as the CPU backend's per-range loop — master
// weights, moments and the rounded 16-bit model weights, over three steps (the last skipped).
TEST_F(CudaKernels, BackendAdamwStepIsTheCpuLoopBitForBit) {
    std::string error;
    auto be = kc::make_cuda_backend(0, &error);
    ASSERT_TRUE(be) << error;
    auto cpu = ptd::engine::make_cpu_backend(1);
    using ptd::engine::Backend;
    const int64_t sizes[] = {1003, 0, 4099, 17};
    const float decay[] = {0.1f, 0.1f, 0.0f, 0.05f};
    for (DType model_t : {DType::f32, DType::bf16}) {
        const bool has_model = model_t != DType::f32;
        std::vector<Host> p, g, m, v, model;
        std::vector<void*> on_device;
        auto upload = [&](Host& h) {
            void* d = be->alloc(ptd::engine::MEM_OPTIMIZER, std::max<size_t>(h.size_bytes(), 1), "test range");
            be->upload(d, h.data(), h.size_bytes());
            on_device.push_back(d);
            return d;
        };
        std::vector<Backend::AdamWRange> dev_ranges, cpu_ranges;
        for (size_t k = 0; k < std::size(sizes); k++) {
            const uint32_t sd = 271 + 10 * static_cast<uint32_t>(k);
            p.push_back(random_host(DType::f32, sizes[k], sd, -1, 1));
            g.push_back(random_host(DType::f32, sizes[k], sd + 1, -0.1f, 0.1f));
            m.push_back(random_host(DType::f32, sizes[k], sd + 2, -0.01f, 0.01f));
            v.push_back(random_host(DType::f32, sizes[k], sd + 3, 0.0f, 0.001f));
            model.push_back(nan_host(model_t, sizes[k]));
        }
        for (size_t k = 0; k < std::size(sizes); k++) {
            Backend::AdamWRange d;
            d.p = static_cast<float*>(upload(p[k])), d.g = static_cast<float*>(upload(g[k]));
            d.m = static_cast<float*>(upload(m[k])), d.v = static_cast<float*>(upload(v[k]));
            d.model_p = has_model ? upload(model[k]) : nullptr;
            d.n = sizes[k], d.weight_decay = decay[k];
            dev_ranges.push_back(d);
            Backend::AdamWRange c = d;
            c.p = reinterpret_cast<float*>(p[k].data()), c.g = reinterpret_cast<const float*>(g[k].data());
            c.m = reinterpret_cast<float*>(m[k].data()), c.v = reinterpret_cast<float*>(v[k].data());
            c.model_p = has_model ? model[k].data() : nullptr;
            cpu_ranges.push_back(c);
        }
        const int count = static_cast<int>(std::size(sizes));
        const int64_t ws0 = be->mem_stats().current[ptd::engine::MEM_WORKSPACE];
        be->plan_adamw(dev_ranges.data(), count);
        EXPECT_EQ(be->mem_stats().current[ptd::engine::MEM_WORKSPACE] - ws0, be->adamw_plan_bytes(count));
        EXPECT_GT(be->adamw_plan_bytes(count), 0);
        cpu->plan_adamw(cpu_ranges.data(), count);
        std::vector<double> scalars(ptd::engine::STEP_SCALAR_COUNT, 0.0);
        scalars[ptd::engine::SCALAR_GRAD_SCALE] = static_cast<float>(0.8 / (1.3 + 1e-6));
        auto* ds = static_cast<double*>(be->alloc(ptd::engine::MEM_WORKSPACE, scalars.size() * 8, "scalars"));
        const float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
        for (int64_t step = 1; step <= 3; step++) {
            if (step == 3) scalars[ptd::engine::SCALAR_FOUND_INF] = 1.0;
            be->upload(ds, scalars.data(), scalars.size() * 8);
            be->adamw_step(lr, b1, b2, eps, ds, step, model_t);
            cpu->adamw_step(lr, b1, b2, eps, scalars.data(), step, model_t);
        }
        for (size_t k = 0; k < std::size(sizes); k++) {
            const std::string tag = std::string("adamw_step model ") + type_name(model_t) + " range " + std::to_string(k);
            Host hp(DType::f32, sizes[k]), hm(DType::f32, sizes[k]), hv(DType::f32, sizes[k]), hmodel(model_t, sizes[k]);
            be->download(hp.data(), dev_ranges[k].p, hp.size_bytes());
            be->download(hm.data(), dev_ranges[k].m, hm.size_bytes());
            be->download(hv.data(), dev_ranges[k].v, hv.size_bytes());
            expect_bits_equal(tag + " p", hp, p[k]);
            expect_bits_equal(tag + " m", hm, m[k]);
            expect_bits_equal(tag + " v", hv, v[k]);
            if (has_model) {
                be->download(hmodel.data(), dev_ranges[k].model_p, hmodel.size_bytes());
                expect_bits_equal(tag + " model copy", hmodel, model[k]);
            }
        }
        be->plan_adamw(nullptr, 0);
        EXPECT_EQ(be->mem_stats().current[ptd::engine::MEM_WORKSPACE] - ws0, 8 * scalars.size());
        be->release(ds);
        for (void* d : on_device) be->release(d);
    }
}

// Backend::xent_fused on the CUDA backend (one launch) against the CPU backend's fused op
// (the four phases' bits): odd and vector-width rows, padding, in place and loss only.
// The kernel sums Σexp online in its own order and uses expf: equal within f32 rounding.
TEST_F(CudaKernels, BackendXentFusedMatchesCpu) {
    std::string error;
    auto be = kc::make_cuda_backend(0, &error);
    ASSERT_TRUE(be) << error;
    auto cpu = ptd::engine::make_cpu_backend(1);
    struct Case {
        int64_t rows, Vl, V_valid;
    };
    for (const Case c : {Case{5, 1037, 1031}, Case{4, 64, 64}, Case{3, 24, 19}}) {
        const std::string tag = "xent_fused rows " + std::to_string(c.rows) + " Vl " + std::to_string(c.Vl);
        Host logits = random_host(DType::f32, c.rows * c.Vl, 91 + static_cast<uint32_t>(c.Vl), -8, 8);
        std::vector<int32_t> tgt(static_cast<size_t>(c.rows));
        for (int64_t r = 0; r < c.rows; r++) tgt[r] = static_cast<int32_t>((r * 37 + 5) % c.V_valid);
        auto* dl = static_cast<float*>(be->alloc(ptd::engine::MEM_ACTIVATIONS, logits.size_bytes(), "logits"));
        auto* dloss = static_cast<float*>(be->alloc(ptd::engine::MEM_WORKSPACE, c.rows * 4, "loss"));
        auto* dt = static_cast<int32_t*>(be->alloc(ptd::engine::MEM_ACTIVATIONS, c.rows * 4, "targets"));
        be->upload(dl, logits.data(), logits.size_bytes());
        be->upload(dt, tgt.data(), tgt.size() * 4);
        Host want_d = logits, want_loss(DType::f32, c.rows), want_loss_only(DType::f32, c.rows);
        auto* wd = reinterpret_cast<float*>(want_d.data());
        cpu->xent_fused(reinterpret_cast<float*>(want_loss_only.data()), nullptr, DType::f32, wd, tgt.data(), 0.5f, c.rows, c.Vl, 0,
                        c.V_valid);
        cpu->xent_fused(reinterpret_cast<float*>(want_loss.data()), wd, DType::f32, wd, tgt.data(), 0.5f, c.rows, c.Vl, 0, c.V_valid);
        Host loss(DType::f32, c.rows), d(DType::f32, c.rows * c.Vl);
        be->xent_fused(dloss, nullptr, DType::f32, dl, dt, 0.5f, c.rows, c.Vl, 0, c.V_valid);  // loss only: logits untouched
        be->download(d.data(), dl, d.size_bytes());
        expect_bits_equal(tag + " logits after the loss-only call", d, logits);
        be->download(loss.data(), dloss, loss.size_bytes());
        for (int64_t r = 0; r < c.rows; r++) EXPECT_NEAR(loss.get(r), want_loss_only.get(r), 2e-6 * std::abs(want_loss_only.get(r)) + 2e-6) << tag << " row " << r;
        be->xent_fused(dloss, dl, DType::f32, dl, dt, 0.5f, c.rows, c.Vl, 0, c.V_valid);  // in place
        be->download(loss.data(), dloss, loss.size_bytes());
        be->download(d.data(), dl, d.size_bytes());
        for (int64_t r = 0; r < c.rows; r++) EXPECT_NEAR(loss.get(r), want_loss.get(r), 2e-6 * std::abs(want_loss.get(r)) + 2e-6) << tag << " row " << r;
        int bad = 0;
        for (int64_t i = 0; i < d.n && bad < 5; i++)
            if (!(std::abs(d.get(i) - want_d.get(i)) <= 1e-6 * std::abs(want_d.get(i)) + 1e-9)) {
                ADD_FAILURE() << tag << " dlogits[" << i << "] = " << d.get(i) << ", CPU " << want_d.get(i);
                ++bad;
            }
        be->release(dl), be->release(dloss), be->release(dt);
    }
}

// Mixed precision's output layer (issue 30 point 3): xent_fused (tp = 1) and xent_backward
// (tp > 1, after the four phases' finish) write 16-bit dlogits over the f32 logits in place,
// row r in the first half of f32 row r (rows 2·Vl 16-bit elements apart), for the LM head's
// bf16 × bf16 backward GEMMs. The CPU backend's 16-bit dlogits are its f32 dlogits rounded
// once (bit for bit); the simulated kernel's are within one 16-bit ulp of them (expf and the
// Σexp order move the f32 value by a few ulp). Rows longer than one block pass (512 threads
// × 8 columns) take several chunks: a store racing ahead of another thread's read of the
// same chunk (the barrier in xent_store_row) fails this under the simulator's random order.
TEST_F(CudaKernels, BackendXentWrites16BitDlogitsOverTheLogits) {
    std::string error;
    auto be = kc::make_cuda_backend(0, &error);
    ASSERT_TRUE(be) << error;
    auto cpu = ptd::engine::make_cpu_backend(1);
    struct Case {
        int64_t rows, Vl, V_valid;
    };
    for (DType t : {DType::bf16, DType::f16})
        for (bool fused : {true, false})
            for (const Case c : {Case{3, 1037, 1031}, Case{3, 8200, 8195}, Case{4, 24, 19}}) {
                const std::string tag = std::string(t == DType::bf16 ? "bf16" : "f16") + (fused ? " xent_fused" : " xent_backward") +
                                        " rows " + std::to_string(c.rows) + " Vl " + std::to_string(c.Vl);
                const float scale = 0.5f;
                Host logits = random_host(DType::f32, c.rows * c.Vl, 191 + static_cast<uint32_t>(c.Vl), -8, 8);
                std::vector<int32_t> tgt(static_cast<size_t>(c.rows));
                for (int64_t r = 0; r < c.rows; r++) tgt[r] = static_cast<int32_t>((r * 37 + 5) % c.V_valid);
                // tp = 1's probabilities for xent_backward: the CPU's finish, fed to both backends.
                Host input = logits;
                if (!fused) {
                    std::vector<float> mx(c.rows), se(c.rows), tl(c.rows), loss(c.rows);
                    auto* pl = reinterpret_cast<float*>(input.data());
                    cpu->xent_row_max(mx.data(), pl, c.rows, c.Vl, 0, c.V_valid);
                    cpu->xent_sums(se.data(), tl.data(), pl, mx.data(), tgt.data(), c.rows, c.Vl, 0, c.V_valid);
                    cpu->xent_finish(loss.data(), pl, mx.data(), se.data(), tl.data(), c.rows, c.Vl, 0, c.V_valid);
                }
                auto run_cpu = [&](Host& buf, DType dt) {
                    std::vector<float> loss(c.rows);
                    auto* p = reinterpret_cast<float*>(buf.data());
                    if (fused) cpu->xent_fused(loss.data(), p, dt, p, tgt.data(), scale, c.rows, c.Vl, 0, c.V_valid);
                    else cpu->xent_backward(p, dt, p, tgt.data(), scale, c.rows, c.Vl, 0, c.V_valid);
                };
                Host want32 = input, want16 = input;
                run_cpu(want32, DType::f32);
                run_cpu(want16, t);
                auto* dl = static_cast<float*>(be->alloc(ptd::engine::MEM_ACTIVATIONS, input.size_bytes(), "logits"));
                auto* dloss = static_cast<float*>(be->alloc(ptd::engine::MEM_WORKSPACE, c.rows * 4, "loss"));
                auto* dt = static_cast<int32_t*>(be->alloc(ptd::engine::MEM_ACTIVATIONS, c.rows * 4, "targets"));
                be->upload(dl, input.data(), input.size_bytes());
                be->upload(dt, tgt.data(), tgt.size() * 4);
                if (fused) be->xent_fused(dloss, dl, t, dl, dt, scale, c.rows, c.Vl, 0, c.V_valid);
                else be->xent_backward(dl, t, dl, dt, scale, c.rows, c.Vl, 0, c.V_valid);
                Host got = input;
                be->download(got.data(), dl, got.size_bytes());
                be->release(dl), be->release(dloss), be->release(dt);
                int bad = 0;
                const double ulp = t == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;  // 2^-7, 2^-10: one ulp relative
                for (int64_t r = 0; r < c.rows; r++)
                    for (int64_t col = 0; col < c.Vl && bad < 5; col++) {
                        const int64_t i16 = r * 2 * c.Vl + col;  // rows 2·Vl 16-bit elements apart
                        uint16_t cpu16, sim16;
                        std::memcpy(&cpu16, want16.data() + 2 * i16, 2);
                        std::memcpy(&sim16, got.data() + 2 * i16, 2);
                        const float w32 = want32.get(r * c.Vl + col);
                        const uint16_t rounded = t == DType::bf16 ? ptd::engine::f32_to_bf16_bits(w32)
                                                                  : ptd::engine::f32_to_f16_bits(w32);
                        if (cpu16 != rounded) {
                            ADD_FAILURE() << tag << " CPU [" << r << "," << col << "] bits " << cpu16
                                          << " are not its f32 dlogit " << w32 << " rounded (" << rounded << ")";
                            ++bad;
                        }
                        const float fc = t == DType::bf16 ? ptd::engine::bf16_bits_to_f32(cpu16) : ptd::engine::f16_bits_to_f32(cpu16);
                        const float fs = t == DType::bf16 ? ptd::engine::bf16_bits_to_f32(sim16) : ptd::engine::f16_bits_to_f32(sim16);
                        if (!(std::abs(fs - fc) <= ulp * std::abs(fc) + 1e-7)) {
                            ADD_FAILURE() << tag << " cuda-sim [" << r << "," << col << "] = " << fs << ", CPU " << fc;
                            ++bad;
                        }
                    }
            }
}

// ---- flash attention (issue 30 point 4) ------------------------------------------------------
//
// Backend::flash_attention_forward / backward — the cuda-sim backend's FlashAttention-2
// kernels (kernels/flash.cuh, every product through the dialect's MMA) and the CPU backend's
// row-by-row flash ops — against the materialised path of the same backend (attention_forward
// / backward: [B,H,T,T] probabilities) and both against attention in double from the same
// 16-bit inputs: odd T (several query and key tiles, a ragged last one), one and several
// heads, GQA (H/G = 2, 3), head sizes 16, 64 and 128, bf16 and f16, causal masking. Each
// path's largest error, relative to the largest reference value, must stay within the storage
// type's rounding (the materialised path rounds scores and probabilities to 16 bits; the
// flash path the probabilities it multiplies by V and dctx), and lse within f32 rounding of
// log Σ exp.
struct FlashCase {
    int64_t B, T, H, G, D;
    DType t;
};

struct AttnRef {
    std::vector<double> ctx, lse, dqkv;
};
AttnRef attention_in_double(const Host& qkv, const Host& dctx, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
    const int64_t ld = (H + 2 * G) * D, rep = H / G, HD = H * D;
    const double scale = 1.0 / std::sqrt((double)D);
    AttnRef r;
    r.ctx.assign(B * T * HD, 0.0), r.lse.assign(B * H * T, 0.0), r.dqkv.assign(B * T * ld, 0.0);
    std::vector<double> p(T), dp(T);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t g = h / rep;
            for (int64_t i = 0; i < T; i++) {
                double mx = -INFINITY;
                for (int64_t u = 0; u <= i; u++) {
                    double s = 0;
                    for (int64_t d = 0; d < D; d++)
                        s += (double)qkv.get((b * T + i) * ld + h * D + d) * qkv.get((b * T + u) * ld + (H + g) * D + d);
                    p[u] = s * scale, mx = std::max(mx, p[u]);
                }
                double l = 0;
                for (int64_t u = 0; u <= i; u++) l += (p[u] = std::exp(p[u] - mx));
                r.lse[(b * H + h) * T + i] = mx + std::log(l);
                double delta = 0;
                for (int64_t u = 0; u <= i; u++) {
                    p[u] /= l;
                    double s = 0;
                    for (int64_t d = 0; d < D; d++)
                        s += (double)dctx.get((b * T + i) * HD + h * D + d) * qkv.get((b * T + u) * ld + (H + G + g) * D + d);
                    dp[u] = s, delta += p[u] * s;
                    for (int64_t d = 0; d < D; d++)
                        r.ctx[(b * T + i) * HD + h * D + d] += p[u] * qkv.get((b * T + u) * ld + (H + G + g) * D + d);
                }
                for (int64_t u = 0; u <= i; u++) {
                    const double ds = p[u] * (dp[u] - delta) * scale;
                    for (int64_t d = 0; d < D; d++) {
                        r.dqkv[(b * T + i) * ld + h * D + d] += ds * qkv.get((b * T + u) * ld + (H + g) * D + d);
                        r.dqkv[(b * T + u) * ld + (H + g) * D + d] += ds * qkv.get((b * T + i) * ld + h * D + d);
                        r.dqkv[(b * T + u) * ld + (H + G + g) * D + d] += p[u] * dctx.get((b * T + i) * HD + h * D + d);
                    }
                }
            }
        }
    return r;
}

// max |got − want| / max |want|
double rel_error(const Host& got, const std::vector<double>& want) {
    double mag = 0, err = 0;
    for (int64_t i = 0; i < got.n; i++) {
        mag = std::max(mag, std::fabs(want[i]));
        const double e = std::fabs((double)got.get(i) - want[i]);
        err = std::isnan(e) ? INFINITY : std::max(err, e);
    }
    return mag > 0 ? err / mag : err;
}

TEST_F(CudaKernels, BackendFlashAttentionMatchesTheMaterialisedPath) {
    std::string error;
    auto sim = kc::make_cuda_backend(0, &error);
    ASSERT_TRUE(sim) << error;
    auto cpu = ptd::engine::make_cpu_backend(1);
    const FlashCase cases[] = {{2, 37, 4, 4, 64, DType::bf16},  {1, 70, 4, 2, 128, DType::bf16},
                               {2, 33, 3, 1, 16, DType::bf16},  {1, 5, 2, 2, 64, DType::f16},
                               {1, 100, 6, 2, 16, DType::f16}};
    for (const FlashCase& c : cases)
        for (ptd::engine::Backend* be : {sim.get(), cpu.get()}) {
            const int64_t B = c.B, T = c.T, H = c.H, G = c.G, D = c.D, ld = (H + 2 * G) * D;
            const std::string tag = std::string(be->name()) + " " + type_name(c.t) + " B=" + std::to_string(B) +
                                    " T=" + std::to_string(T) + " H=" + std::to_string(H) + " G=" + std::to_string(G) +
                                    " D=" + std::to_string(D);
            const Host qkv = random_host(c.t, B * T * ld, 301 + (uint32_t)T, -1, 1);
            const Host dctx = random_host(c.t, B * T * H * D, 302 + (uint32_t)T, -1, 1);
            const AttnRef ref = attention_in_double(qkv, dctx, B, T, H, G, D);
            be->seal_allocations(false);
            be->plan_operand_scratch(c.t, std::max(B * H * T * T, B * T * ld), ld);  // the CPU widens 16-bit operands
            auto put = [&](const Host& h) {
                void* p = be->alloc(ptd::engine::MEM_ACTIVATIONS, h.size_bytes(), "flash test");
                be->upload(p, h.data(), h.size_bytes());
                return p;
            };
            auto get = [&](void* p, Host& h) { be->download(h.data(), p, h.size_bytes()); };
            void* d_qkv = put(qkv);
            void* d_dctx = put(dctx);
            Host ctx_m = nan_host(c.t, B * T * H * D), ctx_f = ctx_m, dqkv_m = nan_host(c.t, B * T * ld), dqkv_f = dqkv_m;
            Host lse = nan_host(DType::f32, B * H * T);
            void* d_ctx_m = put(ctx_m);
            void* d_ctx_f = put(ctx_f);
            void* d_dqkv_m = put(dqkv_m);
            void* d_dqkv_f = put(dqkv_f);
            void* d_lse = put(lse);
            void* d_probs = be->alloc(ptd::engine::MEM_ACTIVATIONS, B * H * T * T * 2, "probs");
            void* ws_m = be->alloc(ptd::engine::MEM_WORKSPACE, be->attention_backward_workspace(c.t, B, T, H, G, D), "ws");
            void* ws_f =
                be->alloc(ptd::engine::MEM_WORKSPACE, be->flash_attention_backward_workspace(c.t, B, T, H, G, D), "ws");
            be->attention_forward(c.t, d_ctx_m, d_probs, d_qkv, B, T, H, G, D, ws_m);
            be->attention_backward(c.t, d_dqkv_m, d_dctx, d_probs, d_qkv, B, T, H, G, D, ws_m);
            be->flash_attention_forward(c.t, d_ctx_f, static_cast<float*>(d_lse), d_qkv, B, T, H, G, D);
            be->flash_attention_backward(c.t, d_dqkv_f, d_dctx, d_ctx_f, static_cast<const float*>(d_lse), d_qkv, B, T, H,
                                         G, D, ws_f);
            get(d_ctx_m, ctx_m), get(d_ctx_f, ctx_f), get(d_dqkv_m, dqkv_m), get(d_dqkv_f, dqkv_f), get(d_lse, lse);
            for (void* p : {d_qkv, d_dctx, d_ctx_m, d_ctx_f, d_dqkv_m, d_dqkv_f, d_lse, d_probs, ws_m, ws_f}) be->release(p);
            // Two 16-bit roundings of a value in the product chain, and the output's own.
            const double tol = c.t == DType::bf16 ? 3.0 / 256 : 3.0 / 2048;
            const double e_ctx_m = rel_error(ctx_m, ref.ctx), e_ctx_f = rel_error(ctx_f, ref.ctx);
            const double e_d_m = rel_error(dqkv_m, ref.dqkv), e_d_f = rel_error(dqkv_f, ref.dqkv);
            EXPECT_LE(e_ctx_m, tol) << tag << " materialised ctx";
            EXPECT_LE(e_ctx_f, tol) << tag << " flash ctx (materialised: " << e_ctx_m << ")";
            EXPECT_LE(e_d_m, tol) << tag << " materialised dqkv";
            EXPECT_LE(e_d_f, tol) << tag << " flash dqkv (materialised: " << e_d_m << ")";
            for (int64_t i = 0; i < B * H * T; i++)
                ASSERT_NEAR(lse.get(i), ref.lse[i], 1e-5 * (1 + std::fabs(ref.lse[i]))) << tag << " lse[" << i << "]";
        }
}

// ---- the cuda-sim Backend's fused ops (issue 14): the adapter over the kernels and cuBLASLt ----
//
// add_norm_forward (one *_residual_forward kernel) against add + norm on the same backend, bit
// for bit; the GEMM's gelu_aux / dgelu epilogues (cuBLASLt's GELU_AUX_BIAS / DGELU through the
// reference layer) and the unfused fallback against the CPU backend's separate ops: the
// epilogue applies GELU to the unrounded pre-activation in double, the CPU to the stored
// (rounded) one in f32 — 1e-5 relative in f32, two 16-bit units in bf16.
#if defined(PTD_CUDA_SIM)
#include "cuda_backend.h"

namespace {

struct SimBuf {
    ptd::engine::Backend& be;
    void* p;
    size_t bytes;
    SimBuf(ptd::engine::Backend& b, size_t n_bytes) : be(b), p(b.alloc(ptd::engine::MEM_ACTIVATIONS, n_bytes, "test")), bytes(n_bytes) {}
    ~SimBuf() { be.release(p); }
};
// v rounded to t, as the bytes a buffer of type t holds (through the CPU backend's convert).
std::vector<float> typed_bytes(ptd::engine::Backend& cpu, DType t, const std::vector<float>& v) {
    std::vector<float> o(v.size());
    cpu.convert(o.data(), t, v.data(), DType::f32, (int64_t)v.size());
    return o;
}
std::vector<float> as_f32(ptd::engine::Backend& cpu, DType t, const std::vector<float>& bytes, int64_t n) {
    std::vector<float> o(n);
    cpu.convert(o.data(), DType::f32, bytes.data(), t, n);
    return o;
}
std::vector<float> randv(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(-2.0f, 2.0f);
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
}

TEST(CudaSimBackendFused, AddNormForwardEqualsAddThenNormBitForBit) {
    std::string err;
    auto be = ptd::cuda::sim::make_cuda_backend(0, &err);
    ASSERT_TRUE(be) << err;
    auto cpu = ptd::engine::make_cpu_backend(1);
    const int64_t rows = 5, C = 37;
    for (DType t : {DType::f32, DType::bf16})
        for (auto kind : {ptd::engine::Backend::NormKind::layernorm, ptd::engine::Backend::NormKind::rmsnorm}) {
            const size_t tb = t == DType::f32 ? 4 : 2, n = rows * C;
            const auto xv = typed_bytes(*cpu, t, randv(n, 1)), rv = typed_bytes(*cpu, t, randv(n, 2));
            const auto wv = typed_bytes(*cpu, t, randv(C, 3)), bv = typed_bytes(*cpu, t, randv(C, 4));
            SimBuf x(*be, n * tb), r(*be, n * tb), w(*be, C * tb), b(*be, C * tb), out0(*be, n * tb), out1(*be, n * tb);
            SimBuf st0(*be, 2 * rows * 4), st1(*be, 2 * rows * 4), res(*be, n * tb);
            be->upload(w.p, wv.data(), C * tb), be->upload(b.p, bv.data(), C * tb);
            // Unfused: residual += x, then the norm of it.
            be->upload(x.p, xv.data(), n * tb), be->upload(r.p, rv.data(), n * tb);
            be->add(r.p, x.p, t, n);
            float* m0 = static_cast<float*>(st0.p);
            if (kind == ptd::engine::Backend::NormKind::layernorm)
                be->layernorm_forward(t, out0.p, m0, m0 + rows, r.p, w.p, b.p, rows, C, 1e-5f);
            else be->rmsnorm_forward(t, out0.p, m0 + rows, r.p, w.p, rows, C, 1e-5f);
            std::vector<char> want_res(n * tb), want_out(n * tb), want_st(2 * rows * 4, 0);
            be->download(want_res.data(), r.p, n * tb), be->download(want_out.data(), out0.p, n * tb);
            be->download(want_st.data(), st0.p, 2 * rows * 4);
            // Fused, into a third buffer.
            be->upload(r.p, rv.data(), n * tb);
            float* m1 = static_cast<float*>(st1.p);
            be->add_norm_forward(t, res.p, out1.p, m1, m1 + rows, x.p, r.p, w.p,
                                 kind == ptd::engine::Backend::NormKind::layernorm ? b.p : nullptr, rows, C, 1e-5f, kind);
            std::vector<char> got_res(n * tb), got_out(n * tb), got_st(2 * rows * 4, 0);
            be->download(got_res.data(), res.p, n * tb), be->download(got_out.data(), out1.p, n * tb);
            be->download(got_st.data(), st1.p, 2 * rows * 4);
            const std::string tag = std::string(t == DType::f32 ? "f32" : "bf16") +
                                    (kind == ptd::engine::Backend::NormKind::layernorm ? " layernorm" : " rmsnorm");
            EXPECT_EQ(got_res, want_res) << tag << " res_out";
            EXPECT_EQ(got_out, want_out) << tag << " out";
            EXPECT_EQ(got_st, want_st) << tag << " mean, rstd";
        }
}

TEST(CudaSimBackendFused, GeluEpiloguesFollowTheCpuSeparateOps) {
    using Gemm = ptd::engine::Backend::Gemm;
    std::string err;
    auto be = ptd::cuda::sim::make_cuda_backend(0, &err);
    ASSERT_TRUE(be) << err;
    auto cpu = ptd::engine::make_cpu_backend(1);
    const int64_t R = 7, h = 9;
    for (int64_t F : {16, 12})  // 16: cuBLASLt's epilogues; 12 (aux ld not a multiple of 8): the fallback
        for (DType t : {DType::f32, DType::bf16}) {
            const size_t tb = t == DType::f32 ? 4 : 2;
            const std::string tag = std::string(t == DType::f32 ? "f32" : "bf16") + " F " + std::to_string(F);
            const auto xv = typed_bytes(*cpu, t, randv(R * h, 5)), wv = typed_bytes(*cpu, t, randv(F * h, 6));
            const auto bv = typed_bytes(*cpu, t, randv(F, 7)), gv = typed_bytes(*cpu, t, randv(R * h, 8));
            const auto w2v = typed_bytes(*cpu, t, randv(h * F, 9));
            // The CPU: the separate ops.
            Gemm g;
            g.trans_b = true, g.M = R, g.N = F, g.K = h;
            g.a_type = g.b_type = g.c_type = t, g.lda = h, g.ldb = h, g.ldc = F;
            std::vector<float> fc1(R * F), act(R * F), dact(R * F), dfc1(R * F);
            g.A = xv.data(), g.B = wv.data(), g.bias = bv.data(), g.C = fc1.data();
            cpu->gemm(g);
            cpu->gelu_forward(t, act.data(), fc1.data(), R * F);
            cpu->gemm(false, false, R, F, h, 1.0f, gv.data(), w2v.data(), 0.0f, dact.data(), t, t);
            cpu->gelu_backward(t, dfc1.data(), fc1.data(), dact.data(), R * F);
            // The sim backend: one GEMM each, with the epilogue.
            SimBuf x(*be, R * h * tb), w(*be, F * h * tb), b(*be, F * tb), gy(*be, R * h * tb), w2(*be, h * F * tb);
            SimBuf aux(*be, R * F * tb), out(*be, R * F * tb), dout(*be, R * F * tb);
            be->upload(x.p, xv.data(), x.bytes), be->upload(w.p, wv.data(), w.bytes), be->upload(b.p, bv.data(), b.bytes);
            be->upload(gy.p, gv.data(), gy.bytes), be->upload(w2.p, w2v.data(), w2.bytes);
            g.A = x.p, g.B = w.p, g.bias = b.p, g.C = out.p, g.epilogue = Gemm::Epilogue::gelu_aux, g.aux = aux.p;
            be->gemm(g);
            std::vector<float> fwd_aux(R * F), got_act(R * F), got_dfc1(R * F);
            be->download(fwd_aux.data(), aux.p, aux.bytes), be->download(got_act.data(), out.p, out.bytes);
            // The backward reads the CPU's pre-activation, so both sides start from one input.
            be->upload(aux.p, fc1.data(), aux.bytes);
            Gemm d;
            d.M = R, d.N = F, d.K = h, d.a_type = d.b_type = d.c_type = t, d.lda = h, d.ldb = F, d.ldc = F;
            d.A = gy.p, d.B = w2.p, d.C = dout.p, d.epilogue = Gemm::Epilogue::dgelu, d.aux = aux.p;
            be->gemm(d);
            be->download(got_dfc1.data(), dout.p, dout.bytes);
            auto close = [&](const std::vector<float>& got_bytes, const std::vector<float>& want_bytes, const char* what) {
                const auto a = as_f32(*cpu, t, got_bytes, R * F), e = as_f32(*cpu, t, want_bytes, R * F);
                double scale = 0;
                for (float v : e) scale = std::max(scale, (double)std::fabs(v));
                const double tol = t == DType::f32 ? 1e-5 : 2.0 / 128;
                for (int64_t i = 0; i < R * F; i++)
                    ASSERT_LE(std::fabs((double)a[i] - e[i]), tol * (std::fabs((double)e[i]) + 0.05 * scale))
                        << tag << " " << what << " element " << i << ": " << a[i] << " vs the CPU's " << e[i];
            };
            close(fwd_aux, fc1, "gelu_aux: aux (pre-activation)");
            close(got_act, act, "gelu_aux: C = gelu(pre-activation)");
            close(got_dfc1, dfc1, "dgelu");
        }
}

}  // namespace
#endif
