// cpu_backend.cpp — the CPU compute backend of ptd-engine (the contract is backend.h).
//
// Every kernel the model needs, in fp32. GEMMs go to OpenBLAS (cblas_sgemm, row-major);
// everything else is a plain loop over rows or elements, parallelised with OpenMP static
// schedules. Nothing is ever summed by two threads into one place: reductions across
// rows (bias / norm weight gradients, embedding and position gradients, the sum of
// squares) partition their *output* (columns, positions, fixed chunks), so each output
// element is summed by one thread in row order. The same inputs give the same bits, and
// for those reductions even whatever the thread count.
//
// Attention is causal softmax attention with the probabilities saved, done as small
// per-(batch, head, block) GEMMs inside one OpenMP loop; OpenBLAS is switched to one
// thread for that loop, as a multithreaded BLAS inside an OpenMP region oversubscribes.
//
// Memory is host memory, tagged (mem.h): each block carries a 64-byte header (size,
// category) in front of the 64-byte aligned pointer handed out, so release() knows what
// to subtract without a map.
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "ptd/engine/backend.h"
#include "ptd/engine/contract_failure.h"

namespace ptd::engine {
namespace {

// ---- errors ----------------------------------------------------------------------------

// A broken contract is a bug in the caller: say which op, where, and why, then stop.
[[noreturn]] [[gnu::format(printf, 4, 5)]] void fail_at(const char* file, int line, const char* op,
                                                        const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    contract_failure(std::string(file) + ":" + std::to_string(line) + ": " + op + ": ", fmt, ap);
}
#define PTD_REQUIRE(cond, ...) \
    do { \
        if (!(cond)) fail_at(__FILE__, __LINE__, __func__, __VA_ARGS__); \
    } while (0)

// mem_category_name() lives in ptd_engine (mem.cpp), which links *this* library; a copy
// here keeps ptd_engine_cpu free of a circular link dependency.
const char* category_name(MemCategory c) {
    static const char* const names[MEM_CATEGORY_COUNT] = {"params", "grads", "optimizer", "activations",
                                                          "communication", "workspace"};
    return (c >= 0 && c < MEM_CATEGORY_COUNT) ? names[c] : "?";
}

// ---- memory ----------------------------------------------------------------------------

constexpr size_t k_align = 64;                    // one cache line / one AVX-512 vector
constexpr uint64_t k_live = 0x707464616c697665;    // header marks: catch foreign pointers
constexpr uint64_t k_dead = 0x7074646465616421;    // (and, best effort, double releases)

struct alignas(k_align) block_header {
    uint64_t mark;
    uint64_t bytes;  // as requested (what the estimators predict), not rounded
    int32_t cat;
};
static_assert(sizeof(block_header) == k_align);

// ---- math helpers ----------------------------------------------------------------------

// Below this many elements an OpenMP fork costs more than the loop.
constexpr int64_t k_par_min = 1 << 15;

// exp(x) in fp32, Cephes-style (range reduction by ln 2, degree-6 polynomial, 2^n from the
// exponent bits; < 1.5 ulp). Unlike std::exp it vectorises, and softmax/xent/GELU/SiLU spend
// most of their time here. exp(x < −87.3) = 0, exp(x > 88.37) is clamped (finite).
inline float fast_exp(float x) {
    const float xc = std::min(std::max(x, -87.33654f), 88.37626f);
    const float n = std::floor(xc * 1.44269504088896341f + 0.5f);  // round to nearest
    float r = xc - n * 0.693359375f;       // ln 2, high part (exact in fp32 times n)
    r = r - n * -2.12194440e-4f;           // ln 2, low part
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
    return x < -87.33654f ? 0.0f : p * two_n;
}

// σ(x) = 1/(1 + e^−x); saturates cleanly to 0 and 1 (e^−x is clamped finite above).
inline float sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }

constexpr float k_gelu_s = 0.7978845608028654f;  // √(2/π)
constexpr float k_gelu_c = 0.044715f;

// ---- OpenBLAS --------------------------------------------------------------------------

// cblas takes int; shapes beyond that are a caller bug we report instead of truncating.
inline blasint blas_int(int64_t v, const char* what) {
    PTD_REQUIRE(v >= 0 && v <= std::numeric_limits<blasint>::max(), "%s = %lld does not fit a BLAS int", what,
                static_cast<long long>(v));
    return static_cast<blasint>(v);
}

// C[m,n] = alpha·op(A)·op(B) + beta·C with explicit leading dimensions (row-major).
inline void sgemm_raw(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* A, int64_t lda,
                      const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, A,
                static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

// OpenBLAS on one thread while alive: for GEMMs issued from inside an OpenMP loop.
struct blas_single_thread {
    int saved = openblas_get_num_threads();
    blas_single_thread() {
        if (saved != 1) openblas_set_num_threads(1);
    }
    ~blas_single_thread() {
        if (saved != 1) openblas_set_num_threads(saved);
    }
    blas_single_thread(const blas_single_thread&) = delete;
    blas_single_thread& operator=(const blas_single_thread&) = delete;
};

// Runs f(c0, c1) on disjoint column ranges [c0, c1) of [0, C), one per thread (ranges are
// multiples of 16 floats so two threads never share a cache line of the output). Used by
// the reductions across rows: each column is then summed by one thread in row order.
template <class F>
void parallel_columns(int64_t C, int64_t work, F&& f) {
#pragma omp parallel if (work >= k_par_min)
    {
        const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
        const int64_t chunk = ((C + nt - 1) / nt + 15) / 16 * 16;
        const int64_t c0 = std::min(C, id * chunk), c1 = std::min(C, c0 + chunk);
        if (c0 < c1) f(c0, c1);
    }
}

// Columns of the local vocabulary shard that take part: global column v0 + c < V_valid.
inline int64_t valid_columns(int64_t Vl, int64_t v0, int64_t V_valid) {
    return std::clamp<int64_t>(V_valid - v0, 0, Vl);
}

// Per-row pieces of the cross entropy, shared by the four phases and xent_fused so that
// the fused op computes the same bits.
inline float xent_max_of_row(const float* lr, int64_t nv) {
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t c = 0; c < nv; c++) mx = std::max(mx, lr[c]);
    return mx;
}
inline float xent_sumexp_of_row(const float* lr, float mx, int64_t nv) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < nv; c++) s += fast_exp(lr[c] - mx);
    return s;
}

// One row of 16-bit dlogits (dlogits_t bf16 / f16) written over the row of f32 values it is
// computed from (Backend::xent_backward: the 16-bit row sits in the first half of the f32
// row's bytes). value(c) reads f32 column c; chunks go in increasing column order, each read
// whole before its 16-bit results are stored, and a chunk's stores reach only f32 columns
// below its end, all read by then. The stores are memcpy (char access), so the compiler
// cannot move them above the f32 loads they may overlap.
template <class ValueOf>
void store_row16(void* dst_row, DType t, int64_t Vl, int64_t nv, ValueOf value) {
    constexpr int64_t k_chunk = 256;
    float f[k_chunk];
    uint16_t bits[k_chunk];
    for (int64_t c0 = 0; c0 < Vl; c0 += k_chunk) {
        const int64_t n = std::min(k_chunk, Vl - c0);
        for (int64_t k = 0; k < n; k++) f[k] = c0 + k < nv ? value(c0 + k) : 0.0f;
        for (int64_t k = 0; k < n; k++) bits[k] = t == DType::bf16 ? f32_to_bf16_bits(f[k]) : f32_to_f16_bits(f[k]);
        std::memcpy(static_cast<char*>(dst_row) + 2 * c0, bits, (size_t)(2 * n));
    }
}

// Query/key block of the attention GEMMs: big enough for OpenBLAS to run near peak, small
// enough that the causal mask wastes little (≈ block/2 columns per row).
constexpr int64_t k_attn_block = 64;

// ---- fp16 conversions -------------------------------------------------------------------

// The portable build (x86-64-v2) has no F16C, so _Float16 conversions are library calls;
// where the CPU has F16C (every x86-64 since 2013), 8 elements convert per instruction.
// Both round to nearest even, so the results are the same bits.
[[gnu::target("avx,f16c")]] void f16_to_f32_f16c(float* dst, const uint16_t* src, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    for (; i < n; i++) dst[i] = f16_bits_to_f32(src[i]);
}
[[gnu::target("avx,f16c")]] void f32_to_f16_f16c(uint16_t* dst, const float* src, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = f32_to_f16_bits(src[i]);
}
const bool k_has_f16c = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");

// ---- the backend -----------------------------------------------------------------------

class cpu_backend final : public Backend {
public:
    ~cpu_backend() override {
        for (float* p : scratch_) release(p);
    }

    explicit cpu_backend(int threads) {
        if (threads > 0) {
            openblas_set_num_threads(threads);
            omp_set_num_threads(threads);
        }
        planned_threads_ = omp_get_max_threads();
    }

    bool set_compute_threads(int threads) override {
        PTD_REQUIRE(threads > 0 && std::none_of(std::begin(scratch_), std::end(scratch_), [](float* p) { return p; }),
                    "set_compute_threads(%d): not a count, or the operand scratch was already planned", threads);
        openblas_set_num_threads(threads);
        omp_set_num_threads(threads);
        planned_threads_ = omp_get_max_threads();
        return true;
    }

    const char* name() const override { return "cpu"; }

    // One stream in effect: everything runs synchronously, so events order nothing.
    Event create_event(const char*) override { return Event{next_event_++}; }
    void record_event(Event, Stream) override {}
    void wait_event(Stream, Event) override {}

    // ---- memory ------------------------------------------------------------------------

    void* alloc(MemCategory cat, size_t bytes, const char* what) override {
        PTD_REQUIRE(cat >= 0 && cat < MEM_CATEGORY_COUNT, "bad memory category %d for %s", static_cast<int>(cat),
                    what ? what : "?");
        PTD_REQUIRE(!sealed_, "allocation after start-up: %zu bytes for %s (%s); all memory is planned at start-up",
                    bytes, what ? what : "?", category_name(cat));
        const size_t body = (bytes + k_align - 1) / k_align * k_align;
        void* base = nullptr;
        if (bytes <= SIZE_MAX - 2 * k_align) base = std::aligned_alloc(k_align, sizeof(block_header) + body);
        if (!base) {
            std::fprintf(stderr, "ptd-engine: error: out of memory allocating %zu bytes for %s (%s)\n", bytes,
                         what ? what : "?", category_name(cat));
            std::exit(1);
        }
        auto* h = static_cast<block_header*>(base);
        h->mark = k_live;
        h->bytes = bytes;
        h->cat = cat;
        void* p = h + 1;
        std::memset(p, 0, body);
        const auto n = static_cast<int64_t>(bytes);
        stats_.current[cat] += n;
        stats_.peak[cat] = std::max(stats_.peak[cat], stats_.current[cat]);
        stats_.total_current += n;
        stats_.total_peak = std::max(stats_.total_peak, stats_.total_current);
        return p;
    }

    void release(void* p) override {
        if (!p) return;
        auto* h = static_cast<block_header*>(p) - 1;
        PTD_REQUIRE(h->mark == k_live, "%p was not allocated by this backend, or was released twice", p);
        h->mark = k_dead;
        const auto n = static_cast<int64_t>(h->bytes);
        stats_.current[h->cat] -= n;
        stats_.total_current -= n;
        std::free(h);
    }

    MemStats mem_stats() const override { return stats_; }
    void seal_allocations(bool sealed) override { sealed_ = sealed; }

    void reset_peaks() override {
        for (int c = 0; c < MEM_CATEGORY_COUNT; c++) stats_.peak[c] = stats_.current[c];
        stats_.total_peak = stats_.total_current;
    }

    void upload(void* dst, const void* src_host, size_t bytes) override {
        ++transfers_.uploads;
        transfers_.upload_bytes += static_cast<int64_t>(bytes);
        if (bytes) std::memcpy(dst, src_host, bytes);
    }
    void download(void* dst_host, const void* src, size_t bytes) override {
        ++transfers_.downloads;
        transfers_.download_bytes += static_cast<int64_t>(bytes);
        if (bytes) std::memcpy(dst_host, src, bytes);
    }
    TransferStats transfer_stats() const override { return transfers_; }

    // Host and device memory are the same here; staging blocks carry no category (they are
    // not device memory) and are not counted in mem_stats.
    void* alloc_host(size_t bytes, const char* what) override {
        PTD_REQUIRE(!sealed_, "host allocation after start-up: %zu bytes for %s; all memory is planned at start-up",
                    bytes, what ? what : "?");
        const size_t body = std::max<size_t>(k_align, (bytes + k_align - 1) / k_align * k_align);
        void* p = bytes <= SIZE_MAX - k_align ? std::aligned_alloc(k_align, body) : nullptr;
        if (!p) {
            std::fprintf(stderr, "ptd-engine: error: out of memory allocating %zu host bytes for %s\n", bytes,
                         what ? what : "?");
            std::exit(1);
        }
        std::memset(p, 0, body);
        return p;
    }
    void release_host(void* p) override { std::free(p); }
    void zero(void* x, size_t bytes) override {
        if (bytes) std::memset(x, 0, bytes);
    }

    // ---- elementwise -------------------------------------------------------------------

    void fill_f32(float* x, float value, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= k_par_min)
        for (int64_t i = 0; i < n; i++) x[i] = value;
    }

    void copy_f32(float* dst, const float* src, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= k_par_min)
        for (int64_t i = 0; i < n; i++) dst[i] = src[i];
    }

    void add_f32(float* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= k_par_min)
        for (int64_t i = 0; i < n; i++) y[i] += x[i];
    }

    void scale(float* x, float a, int64_t n) override {
#pragma omp parallel for schedule(static) if (n >= k_par_min)
        for (int64_t i = 0; i < n; i++) x[i] *= a;
    }

    // Fixed chunks summed in double (8 running sums, for speed), combined in chunk order:
    // the result does not depend on the thread count.
    void sum_squares(double* acc, const float* x, int64_t n) override { acc[0] += sum_squares_value(x, n); }

    void sum_into(double* acc, const float* x, int64_t n) override {
        double s = 0;
        for (int64_t i = 0; i < n; i++) s += x[i];
        acc[0] += s;
    }

    void finish_step_scalars(double* s, double max_norm, double loss_scale) override {
        PTD_REQUIRE(loss_scale > 0, "loss scale %g", loss_scale);
        // The main grads carry the loss scale; the norm is reported (and clipped) unscaled.
        const double norm = std::sqrt(s[SCALAR_GRAD_SQUARES]) / loss_scale;
        s[SCALAR_LOSS_SCALE] = loss_scale;
        s[SCALAR_GRAD_NORM] = norm;
        s[SCALAR_FOUND_INF] = std::isfinite(norm) && std::isfinite(s[SCALAR_LOSS_SUM]) ? 0.0 : 1.0;
        // Rounded to float as AdamW applies it; unscale and clip in one factor.
        const float clip = (max_norm > 0 && norm > max_norm) ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.0f;
        s[SCALAR_CLIP_SCALE] = clip;
        s[SCALAR_GRAD_SCALE] = static_cast<float>(static_cast<double>(clip) / loss_scale);
    }

    void split_tokens(int32_t* inputs, int32_t* targets, const int32_t* seq, int64_t B, int64_t T) override {
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++) {
                if (inputs) inputs[b * T + t] = seq[b * (T + 1) + t];
                if (targets) targets[b * T + t] = seq[b * (T + 1) + t + 1];
            }
    }

    double sum_squares_value(const float* x, int64_t n) {
        PTD_REQUIRE(n >= 0, "n = %lld", static_cast<long long>(n));
        constexpr int64_t chunk = 1 << 16;
        // Chunk partials go through a fixed array, a batch of chunks at a time (no
        // allocation inside the op); they are still added in chunk order.
        constexpr int64_t batch = 64;
        const int64_t nchunks = (n + chunk - 1) / chunk;
        double partial[batch];
        double s = 0.0;
        for (int64_t c0 = 0; c0 < nchunks; c0 += batch) {
            const int64_t cn = std::min(batch, nchunks - c0);
#pragma omp parallel for schedule(static) if (cn > 1)
            for (int64_t ci = 0; ci < cn; ci++) {
                const int64_t i0 = (c0 + ci) * chunk, i1 = std::min(n, i0 + chunk);
                double acc[8] = {};
                int64_t i = i0;
                for (; i + 8 <= i1; i += 8)
                    for (int j = 0; j < 8; j++) acc[j] += static_cast<double>(x[i + j]) * x[i + j];
                for (; i < i1; i++) acc[0] += static_cast<double>(x[i]) * x[i];
                partial[ci] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            }
            for (int64_t ci = 0; ci < cn; ci++) s += partial[ci];
        }
        return s;
    }

    // ---- GEMM --------------------------------------------------------------------------

    // ---- 16-bit storage ------------------------------------------------------------------
    // Every kernel below computes in f32. A bf16/f16 operand is widened into a scratch
    // buffer first and a 16-bit result rounded back once (to nearest even) at the end,
    // so the 16-bit paths run the very same f32 kernels: what differs from an fp32 run is
    // only the rounding of what is stored. The scratch buffers (workspace) are planned at
    // start-up for the largest operand (plan_operand_scratch); after the allocator is
    // sealed, an operand larger than planned stops the process naming it.

    void convert(void* dst, DType dst_t, const void* src, DType src_t, int64_t n) override {
        PTD_REQUIRE(n >= 0 && is_float_type(dst_t) && is_float_type(src_t), "n = %lld, dst %d, src %d",
                    static_cast<long long>(n), static_cast<int>(dst_t), static_cast<int>(src_t));
        if (n == 0 || dst == src) return;
        if (dst_t == src_t) {
            if (dst_t == DType::f32) copy_f32(static_cast<float*>(dst), static_cast<const float*>(src), n);
            else std::memcpy(dst, src, static_cast<size_t>(n) * 2);
            return;
        }
        const auto* s16 = static_cast<const uint16_t*>(src);
        const auto* s32 = static_cast<const float*>(src);
        auto* d16 = static_cast<uint16_t*>(dst);
        auto* d32 = static_cast<float*>(dst);
        if (dst_t == DType::f32 && src_t == DType::bf16) {
#pragma omp parallel for simd schedule(static) if (n >= k_par_min)
            for (int64_t i = 0; i < n; i++) d32[i] = bf16_bits_to_f32(s16[i]);
        } else if (dst_t == DType::f32) {
            constexpr int64_t chunk = 1 << 14;  // whole chunks per thread, multiples of 8
#pragma omp parallel for schedule(static) if (n >= k_par_min)
            for (int64_t c = 0; c < n; c += chunk) {
                const int64_t m = std::min(chunk, n - c);
                if (k_has_f16c) f16_to_f32_f16c(d32 + c, s16 + c, m);
                else
                    for (int64_t i = c; i < c + m; i++) d32[i] = f16_bits_to_f32(s16[i]);
            }
        } else if (dst_t == DType::bf16 && src_t == DType::f32) {
#pragma omp parallel for simd schedule(static) if (n >= k_par_min)
            for (int64_t i = 0; i < n; i++) d16[i] = f32_to_bf16_bits(s32[i]);
        } else if (src_t == DType::f32) {
            constexpr int64_t chunk = 1 << 14;
#pragma omp parallel for schedule(static) if (n >= k_par_min)
            for (int64_t c = 0; c < n; c += chunk) {
                const int64_t m = std::min(chunk, n - c);
                if (k_has_f16c) f32_to_f16_f16c(d16 + c, s32 + c, m);
                else
                    for (int64_t i = c; i < c + m; i++) d16[i] = f32_to_f16_bits(s32[i]);
            }
        } else {  // bf16 ↔ f16, through f32
#pragma omp parallel for schedule(static) if (n >= k_par_min)
            for (int64_t i = 0; i < n; i++) {
                const float f = src_t == DType::bf16 ? bf16_bits_to_f32(s16[i]) : f16_bits_to_f32(s16[i]);
                d16[i] = dst_t == DType::bf16 ? f32_to_bf16_bits(f) : f32_to_f16_bits(f);
            }
        }
    }

    void fill(void* x, DType t, float value, int64_t n) override {
        check_type(t, "x");
        if (t == DType::f32) return fill_f32(static_cast<float*>(x), value, n);
        const uint16_t bits = t == DType::bf16 ? f32_to_bf16_bits(value) : f32_to_f16_bits(value);
        auto* x16 = static_cast<uint16_t*>(x);
#pragma omp parallel for schedule(static) if (n >= k_par_min)
        for (int64_t i = 0; i < n; i++) x16[i] = bits;
    }

    void add(void* y, const void* x, DType t, int64_t n) override {
        check_type(t, "y");
        if (t == DType::f32) return add_f32(static_cast<float*>(y), static_cast<const float*>(x), n);
        float* yw = widen_out(0, y, t, n, true);
        add_f32(yw, widen(1, x, t, n), n);
        narrow(y, t, yw, n);
    }

    // ---- GEMM --------------------------------------------------------------------------

    void gemm(const Gemm& g) override {
        require_epilogue_shape(g);
        if (g.epilogue != Gemm::Epilogue::none) return gemm_epilogue_unfused(g);  // the separate ops, same bits
        if (g.c_in && g.c_in != g.C && g.beta != 0.0f && g.M > 0 && g.N > 0) {
            // C ≠ D: beta's operand copied into the output first (exact), then C = ... + beta·C.
            for (int64_t r = 0; r < g.M; r++)
                copy(dtype_offset(g.C, r * g.ldc, g.c_type), dtype_offset(g.c_in, r * g.ldc, g.c_type), g.c_type, g.N);
            Gemm in_place = g;
            in_place.c_in = nullptr;
            return gemm(in_place);
        }
        PTD_REQUIRE(g.M >= 0 && g.N >= 0 && g.K >= 0 && g.batch >= 0, "negative shape M=%lld N=%lld K=%lld batch=%lld",
                    static_cast<long long>(g.M), static_cast<long long>(g.N), static_cast<long long>(g.K),
                    static_cast<long long>(g.batch));
        check_type(g.a_type, "A");
        check_type(g.b_type, "B");
        check_type(g.c_type, "C");
        const int64_t a_rows = g.trans_a ? g.K : g.M, a_cols = g.trans_a ? g.M : g.K;
        const int64_t b_rows = g.trans_b ? g.N : g.K, b_cols = g.trans_b ? g.K : g.N;
        PTD_REQUIRE(g.lda >= std::max<int64_t>(a_cols, 1) && g.ldb >= std::max<int64_t>(b_cols, 1) &&
                        g.ldc >= std::max<int64_t>(g.N, 1),
                    "leading dimensions lda=%lld ldb=%lld ldc=%lld too small for M=%lld N=%lld K=%lld (trans %d %d)",
                    static_cast<long long>(g.lda), static_cast<long long>(g.ldb), static_cast<long long>(g.ldc),
                    static_cast<long long>(g.M), static_cast<long long>(g.N), static_cast<long long>(g.K),
                    g.trans_a, g.trans_b);
        (void)blas_int(g.M, "M");
        (void)blas_int(g.N, "N");
        (void)blas_int(g.K, "K");
        (void)blas_int(g.lda, "lda");
        (void)blas_int(g.ldb, "ldb");
        (void)blas_int(g.ldc, "ldc");
        if (g.M == 0 || g.N == 0 || g.batch == 0) return;
        auto extent = [&](int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
            return (g.batch - 1) * stride + (rows - 1) * ld + cols;
        };
        const int64_t c_n = extent(g.M, g.N, g.ldc, g.stride_c);
        // A 16-bit operand whose rows are farther apart than its columns (the output layer's
        // dlogits, rows 2·Vl apart over the f32 logits) is widened compactly, rows × cols with
        // ld = cols: its scratch is the operand's size, not the span it lies in.
        int64_t lda = g.lda, ldb = g.ldb;
        auto operand = [&](int slot, const void* x, DType t, int64_t rows, int64_t cols, int64_t& ld,
                           int64_t stride) -> const float* {
            if (t == DType::f32 || g.batch != 1 || ld == cols) return widen(slot, x, t, extent(rows, cols, ld, stride));
            float* w = scratch(slot, rows * cols);
#pragma omp parallel for schedule(static) if (rows * cols >= k_par_min)
            for (int64_t r = 0; r < rows; r++) convert(w + r * cols, DType::f32, dtype_offset(x, r * ld, t), t, cols);
            ld = cols;
            return w;
        };
        const float* A = g.K ? operand(0, g.A, g.a_type, a_rows, a_cols, lda, g.stride_a) : nullptr;
        const float* B = g.K ? operand(1, g.B, g.b_type, b_rows, b_cols, ldb, g.stride_b) : nullptr;
        float* C = widen_out(2, g.C, g.c_type, c_n, g.beta != 0.0f);
        const float* bias = g.bias ? widen(3, g.bias, g.c_type, g.N) : nullptr;
        for (int64_t i = 0; i < g.batch; i++) {
            float* Ci = C + i * g.stride_c;
            if (g.K == 0) {  // empty sum: C = beta·C (BLAS would reject lda = 0)
                for (int64_t r = 0; r < g.M; r++)
                    for (int64_t c = 0; c < g.N; c++) Ci[r * g.ldc + c] = g.beta == 0.0f ? 0.0f : Ci[r * g.ldc + c] * g.beta;
            } else {
                sgemm_raw(g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, A + i * g.stride_a, lda, B + i * g.stride_b,
                          ldb, g.beta, Ci, g.ldc);
            }
            if (bias) {
#pragma omp parallel for schedule(static) if (g.M * g.N >= k_par_min)
                for (int64_t r = 0; r < g.M; r++) {
                    float* cr = Ci + r * g.ldc;
                    for (int64_t c = 0; c < g.N; c++) cr[c] += bias[c];
                }
            }
        }
        if (g.c_type != DType::f32) {  // round only the M×N results, not what lies between rows
            for (int64_t i = 0; i < g.batch; i++)
#pragma omp parallel for schedule(static) if (g.M * g.N >= k_par_min)
                for (int64_t r = 0; r < g.M; r++) {
                    const int64_t off = i * g.stride_c + r * g.ldc;
                    convert(dtype_offset(g.C, off, g.c_type), g.c_type, C + off, DType::f32, g.N);
                }
        }
    }

    void bias_add(void* y, const void* bias, DType t, int64_t rows, int64_t cols) override {
        check_type(t, "y");
        float* yw = widen_out(0, y, t, rows * cols, true);
        bias_add_f32(yw, widen(1, bias, t, cols), rows, cols);
        narrow(y, t, yw, rows * cols);
    }

    void bias_grad(float* dbias, const void* dy, DType t, int64_t rows, int64_t cols) override {
        check_type(t, "dy");
        bias_grad_f32(dbias, widen(0, dy, t, rows * cols), rows, cols);
    }

    // ---- norms, activations, attention, embedding: typed entry points -----------------

    void layernorm_forward(DType t, void* out, float* mean, float* rstd, const void* x, const void* w, const void* b,
                           int64_t rows, int64_t C, float eps) override {
        check_type(t, "x");
        float* o = widen_out(3, out, t, rows * C, false);
        layernorm_forward_f32(o, mean, rstd, widen(0, x, t, rows * C), widen(1, w, t, C), widen(2, b, t, C), rows, C,
                              eps);
        narrow(out, t, o, rows * C);
    }
    void layernorm_backward(DType t, void* dx, float* dw, float* db, const void* dout, const void* x, const float* mean,
                            const float* rstd, const void* w, int64_t rows, int64_t C, bool accumulate_dx) override {
        check_type(t, "x");
        float* d = widen_out(3, dx, t, rows * C, accumulate_dx);
        layernorm_backward_f32(d, dw, db, widen(0, dout, t, rows * C), widen(1, x, t, rows * C), mean, rstd,
                               widen(2, w, t, C), rows, C, accumulate_dx);
        narrow(dx, t, d, rows * C);
    }
    void rmsnorm_forward(DType t, void* out, float* rstd, const void* x, const void* w, int64_t rows, int64_t C,
                         float eps) override {
        check_type(t, "x");
        float* o = widen_out(3, out, t, rows * C, false);
        rmsnorm_forward_f32(o, rstd, widen(0, x, t, rows * C), widen(1, w, t, C), rows, C, eps);
        narrow(out, t, o, rows * C);
    }
    void rmsnorm_backward(DType t, void* dx, float* dw, const void* dout, const void* x, const float* rstd,
                          const void* w, int64_t rows, int64_t C, bool accumulate_dx) override {
        check_type(t, "x");
        float* d = widen_out(3, dx, t, rows * C, accumulate_dx);
        rmsnorm_backward_f32(d, dw, widen(0, dout, t, rows * C), widen(1, x, t, rows * C), rstd, widen(2, w, t, C),
                             rows, C, accumulate_dx);
        narrow(dx, t, d, rows * C);
    }
    void gelu_forward(DType t, void* out, const void* x, int64_t n) override {
        check_type(t, "x");
        float* o = widen_out(1, out, t, n, false);
        gelu_forward_f32(o, widen(0, x, t, n), n);
        narrow(out, t, o, n);
    }
    void gelu_backward(DType t, void* dx, const void* x, const void* dout, int64_t n) override {
        check_type(t, "x");
        float* d = widen_out(2, dx, t, n, false);
        gelu_backward_f32(d, widen(0, x, t, n), widen(1, dout, t, n), n);
        narrow(dx, t, d, n);
    }
    void swiglu_forward(DType t, void* out, const void* gate, const void* up, int64_t n) override {
        check_type(t, "gate");
        float* o = widen_out(2, out, t, n, false);
        swiglu_forward_f32(o, widen(0, gate, t, n), widen(1, up, t, n), n);
        narrow(out, t, o, n);
    }
    void swiglu_backward(DType t, void* dgate, void* dup, const void* dout, const void* gate, const void* up,
                         int64_t n) override {
        check_type(t, "gate");
        float* dg = widen_out(3, dgate, t, n, false);
        float* du = widen_out(4, dup, t, n, false);
        swiglu_backward_f32(dg, du, widen(0, dout, t, n), widen(1, gate, t, n), widen(2, up, t, n), n);
        narrow(dgate, t, dg, n);
        narrow(dup, t, du, n);
    }

    void attention_forward(DType t, void* ctx, void* probs, const void* qkv, int64_t B, int64_t T, int64_t H, int64_t G,
                           int64_t D, void*) override {  // no scratch: the products run on the rows in place
        check_type(t, "qkv");
        check_attention(B, T, H, G, D);
        const int64_t ld = (H + 2 * G) * D;
        const float* x = widen(0, qkv, t, B * T * ld);
        float* p = widen_out(1, probs, t, B * H * T * T, false);
        float* c = widen_out(2, ctx, t, B * T * H * D, false);
        attention_forward_f32(c, p, x, x + H * D, x + (H + G) * D, ld, ld, B, T, H, G, D);
        narrow(probs, t, p, B * H * T * T);
        narrow(ctx, t, c, B * T * H * D);
    }
    // 16-bit operands are widened in the operand scratch (planned); ρ and the dP/dS tiles
    // are f32 in `workspace` in every precision.
    void attention_backward(DType t, void* dqkv, const void* dctx, const void* probs, const void* qkv, int64_t B,
                            int64_t T, int64_t H, int64_t G, int64_t D, void* workspace) override {
        check_type(t, "qkv");
        check_attention(B, T, H, G, D);
        const int64_t ld = (H + 2 * G) * D;
        const float* x = widen(0, qkv, t, B * T * ld);
        float* d = widen_out(3, dqkv, t, B * T * ld, false);
        attention_backward_f32(d, d + H * D, d + (H + G) * D, widen(2, dctx, t, B * T * H * D),
                               widen(1, probs, t, B * H * T * T), x, x + H * D, x + (H + G) * D, ld, ld, B, T, H, G, D,
                               static_cast<float*>(workspace));
        narrow(dqkv, t, d, B * T * ld);
    }

    // Flash attention's contract on the CPU: the same results in f32 without the [B,H,T,T]
    // probabilities, row by row (the CPU has no tensor cores to tile for; the reference the
    // CUDA kernels of kernels/flash.cuh are held to with the materialised path). Forward, a
    // task per (b, h, query row t): the row max of the scaled scores, then Σ p and Σ p·v into
    // ctx's row, lse = max + log Σ p.
    void flash_attention_forward(DType t, void* ctx, float* lse, const void* qkv, int64_t B, int64_t T, int64_t H,
                                 int64_t G, int64_t D) override {
        check_type(t, "qkv");
        check_attention(B, T, H, G, D);
        const int64_t ld = (H + 2 * G) * D, rep = H / G;
        const float scale = 1.0f / std::sqrt(static_cast<float>(D));
        const float* x = widen(0, qkv, t, B * T * ld);
        float* c = widen_out(2, ctx, t, B * T * H * D, false);
#pragma omp parallel for schedule(static) if (B * H * T * T * D >= k_par_min)
        for (int64_t row = 0; row < B * H * T; row++) {
            const int64_t i = row % T, h = (row / T) % H, b = row / (T * H), g = h / rep;
            const float* q = x + (b * T + i) * ld + h * D;
            const float* k = x + b * T * ld + (H + g) * D;
            const float* v = x + b * T * ld + (H + G + g) * D;
            float* o = c + (b * T + i) * H * D + h * D;
            float mx = -std::numeric_limits<float>::infinity();
            for (int64_t u = 0; u <= i; u++) mx = std::max(mx, scale * dot(q, k + u * ld, D));
            float l = 0.0f;
            for (int64_t d = 0; d < D; d++) o[d] = 0.0f;
            for (int64_t u = 0; u <= i; u++) {
                const float p = fast_exp(scale * dot(q, k + u * ld, D) - mx);
                l += p;
                for (int64_t d = 0; d < D; d++) o[d] += p * v[u * ld + d];
            }
            for (int64_t d = 0; d < D; d++) o[d] /= l;
            lse[(b * H + h) * T + i] = mx + std::log(l);
        }
        narrow(ctx, t, c, B * T * H * D);
    }
    // Backward: Δ_t = Σ dctx·ctx per row into `workspace`; then with p = exp(scale·q_t·k_u −
    // lse_t) and dS = p·(dctx_t·v_u − Δ_t)·scale, a task per (b, h, t) sums dq_t = Σ_u dS·k_u and
    // a task per (b, g, u) sums dk_u = Σ_h Σ_t dS·q_t, dv_u = Σ_h Σ_t p·dctx_t in order (each
    // element written by one task: deterministic).
    void flash_attention_backward(DType t, void* dqkv, const void* dctx, const void* ctx, const float* lse,
                                  const void* qkv, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D,
                                  void* workspace) override {
        check_type(t, "qkv");
        check_attention(B, T, H, G, D);
        PTD_REQUIRE(workspace != nullptr, "flash_attention_backward needs its planned workspace");
        const int64_t ld = (H + 2 * G) * D, rep = H / G, HD = H * D;
        const float scale = 1.0f / std::sqrt(static_cast<float>(D));
        const float* x = widen(0, qkv, t, B * T * ld);
        const float* o = widen(1, ctx, t, B * T * HD);
        const float* dO = widen(2, dctx, t, B * T * HD);
        float* dx = widen_out(3, dqkv, t, B * T * ld, false);
        float* delta = static_cast<float*>(workspace);  // [B, H, T]
        const bool par = B * H * T * T * D >= k_par_min;
#pragma omp parallel for schedule(static) if (par)
        for (int64_t row = 0; row < B * H * T; row++) {
            const int64_t i = row % T, h = (row / T) % H, b = row / (T * H);
            delta[row] = dot(dO + (b * T + i) * HD + h * D, o + (b * T + i) * HD + h * D, D);
        }
        auto p_ds = [&](int64_t b, int64_t h, int64_t g, int64_t i, int64_t u, float* ds) {
            const float* q = x + (b * T + i) * ld + h * D;
            const float p = fast_exp(scale * dot(q, x + (b * T + u) * ld + (H + g) * D, D) - lse[(b * H + h) * T + i]);
            const float dp = dot(dO + (b * T + i) * HD + h * D, x + (b * T + u) * ld + (H + G + g) * D, D);
            *ds = p * (dp - delta[(b * H + h) * T + i]) * scale;
            return p;
        };
#pragma omp parallel for schedule(static) if (par)
        for (int64_t row = 0; row < B * H * T; row++) {
            const int64_t i = row % T, h = (row / T) % H, b = row / (T * H), g = h / rep;
            float* dq = dx + (b * T + i) * ld + h * D;
            for (int64_t d = 0; d < D; d++) dq[d] = 0.0f;
            for (int64_t u = 0; u <= i; u++) {
                float ds;
                p_ds(b, h, g, i, u, &ds);
                const float* k = x + (b * T + u) * ld + (H + g) * D;
                for (int64_t d = 0; d < D; d++) dq[d] += ds * k[d];
            }
        }
#pragma omp parallel for schedule(static) if (par)
        for (int64_t key = 0; key < B * G * T; key++) {
            const int64_t u = key % T, g = (key / T) % G, b = key / (T * G);
            float* dk = dx + (b * T + u) * ld + (H + g) * D;
            float* dv = dx + (b * T + u) * ld + (H + G + g) * D;
            for (int64_t d = 0; d < D; d++) dk[d] = dv[d] = 0.0f;
            for (int64_t h = g * rep; h < (g + 1) * rep; h++)
                for (int64_t i = u; i < T; i++) {
                    float ds;
                    const float p = p_ds(b, h, g, i, u, &ds);
                    const float* q = x + (b * T + i) * ld + h * D;
                    const float* dOi = dO + (b * T + i) * HD + h * D;
                    for (int64_t d = 0; d < D; d++) dk[d] += ds * q[d], dv[d] += p * dOi[d];
                }
        }
        narrow(dqkv, t, dx, B * T * ld);
    }
    int64_t flash_attention_backward_workspace(DType, int64_t B, int64_t T, int64_t H, int64_t,
                                               int64_t) const override {
        return static_cast<int64_t>(sizeof(float)) * B * H * T;  // Δ
    }
    static float dot(const float* a, const float* b, int64_t n) {
        float s = 0.0f;
        for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
        return s;
    }

    void embedding_forward(DType t, void* out, const int32_t* tokens, const void* wte, int64_t v0, int64_t Vl,
                           int64_t rows, int64_t C) override {
        check_type(t, "wte");
        if (t == DType::f32)
            return embedding_forward_f32(static_cast<float*>(out), tokens, static_cast<const float*>(wte), v0, Vl, rows,
                                         C);
        // A lookup copies rows: no arithmetic, so the 16-bit bytes move as they are.
        const size_t row_bytes = static_cast<size_t>(C) * 2;
#pragma omp parallel for schedule(static) if (rows * C >= k_par_min)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t tk = static_cast<int64_t>(tokens[r]) - v0;
            char* outr = static_cast<char*>(out) + r * row_bytes;
            if (tk >= 0 && tk < Vl) std::memcpy(outr, static_cast<const char*>(wte) + tk * row_bytes, row_bytes);
            else std::memset(outr, 0, row_bytes);
        }
    }
    void embedding_backward(DType t, float* dwte, const void* dout, const int32_t* tokens, int64_t v0, int64_t Vl,
                            int64_t rows, int64_t C) override {
        check_type(t, "dout");
        embedding_backward_f32(dwte, widen(0, dout, t, rows * C), tokens, v0, Vl, rows, C);
    }
    void position_forward(DType t, void* out, const void* wpe, int64_t row0, int64_t rows, int64_t T,
                          int64_t C) override {
        check_type(t, "out");
        float* o = widen_out(1, out, t, rows * C, true);
        position_forward_f32(o, widen(0, wpe, t, T * C), row0, rows, T, C);
        narrow(out, t, o, rows * C);
    }
    void position_backward(DType t, float* dwpe, const void* dout, int64_t row0, int64_t rows, int64_t T,
                           int64_t C) override {
        check_type(t, "dout");
        position_backward_f32(dwpe, widen(0, dout, t, rows * C), row0, rows, T, C);
    }

    // y [rows, cols] += bias [cols] on every row.
    void bias_add_f32(float* y, const float* bias, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= k_par_min)
        for (int64_t r = 0; r < rows; r++) {
            float* yr = y + r * cols;
            for (int64_t c = 0; c < cols; c++) yr[c] += bias[c];
        }
    }

    // dbias [cols] += Σ_r dy [rows, cols]: columns split over threads, rows in order.
    void bias_grad_f32(float* dbias, const float* dy, int64_t rows, int64_t cols) {
        parallel_columns(cols, rows * cols, [&](int64_t c0, int64_t c1) {
            for (int64_t r = 0; r < rows; r++) {
                const float* dyr = dy + r * cols;
                for (int64_t c = c0; c < c1; c++) dbias[c] += dyr[c];
            }
        });
    }

    // ---- norms -------------------------------------------------------------------------

    // out, x [rows, C]; w, b [C]; mean, rstd [rows]. Two passes (mean, then variance)
    // rather than E[x²] − mean², which cancels badly when |mean| ≫ std.
    void layernorm_forward_f32(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                           int64_t rows, int64_t C, float eps) {
        PTD_REQUIRE(C > 0 && rows >= 0, "rows = %lld, C = %lld", static_cast<long long>(rows),
                    static_cast<long long>(C));
        const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (rows * C >= k_par_min)
        for (int64_t r = 0; r < rows; r++) {
            const float* xr = x + r * C;
            float* outr = out + r * C;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t i = 0; i < C; i++) s += xr[i];
            const float m = s * inv_c;
            float v = 0.0f;
#pragma omp simd reduction(+ : v)
            for (int64_t i = 0; i < C; i++) v += (xr[i] - m) * (xr[i] - m);
            const float rs = 1.0f / std::sqrt(v * inv_c + eps);
            for (int64_t i = 0; i < C; i++) outr[i] = (xr[i] - m) * rs * w[i] + b[i];
            mean[r] = m;
            rstd[r] = rs;
        }
    }

    // With n = (x − mean)·rstd and g = dout·w (llm.c):
    //   dx = rstd · (g − mean(g) − n · mean(g·n))   (overwritten, or += with accumulate)
    //   dw += Σ_r dout·n, db += Σ_r dout           (a second pass, split by columns).
    void layernorm_backward_f32(float* dx, float* dw, float* db, const float* dout, const float* x, const float* mean,
                            const float* rstd, const float* w, int64_t rows, int64_t C, bool accumulate) {
        PTD_REQUIRE(C > 0 && rows >= 0, "rows = %lld, C = %lld", static_cast<long long>(rows),
                    static_cast<long long>(C));
        const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (rows * C >= k_par_min)
        for (int64_t r = 0; r < rows; r++) {
            const float* xr = x + r * C;
            const float* dr = dout + r * C;
            float* dxr = dx + r * C;
            const float m = mean[r], rs = rstd[r];
            float sg = 0.0f, sgn = 0.0f;
#pragma omp simd reduction(+ : sg, sgn)
            for (int64_t i = 0; i < C; i++) {
                const float g = dr[i] * w[i];
                sg += g;
                sgn += g * (xr[i] - m) * rs;
            }
            const float mg = sg * inv_c, mgn = sgn * inv_c;
            for (int64_t i = 0; i < C; i++) {
                const float n = (xr[i] - m) * rs;
                const float v = (dr[i] * w[i] - mg - n * mgn) * rs;
                dxr[i] = accumulate ? dxr[i] + v : v;
            }
        }
        parallel_columns(C, rows * C, [&](int64_t c0, int64_t c1) {
            for (int64_t r = 0; r < rows; r++) {
                const float* xr = x + r * C;
                const float* dr = dout + r * C;
                const float m = mean[r], rs = rstd[r];
                for (int64_t i = c0; i < c1; i++) {
                    dw[i] += dr[i] * ((xr[i] - m) * rs);
                    db[i] += dr[i];
                }
            }
        });
    }

    // out, x [rows, C]; w [C]; rstd [rows] = 1/√(mean(x²) + eps).
    void rmsnorm_forward_f32(float* out, float* rstd, const float* x, const float* w, int64_t rows, int64_t C,
                         float eps) {
        PTD_REQUIRE(C > 0 && rows >= 0, "rows = %lld, C = %lld", static_cast<long long>(rows),
                    static_cast<long long>(C));
        const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (rows * C >= k_par_min)
        for (int64_t r = 0; r < rows; r++) {
            const float* xr = x + r * C;
            float* outr = out + r * C;
            float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
            for (int64_t i = 0; i < C; i++) ss += xr[i] * xr[i];
            const float rs = 1.0f / std::sqrt(ss * inv_c + eps);
            for (int64_t i = 0; i < C; i++) outr[i] = xr[i] * rs * w[i];
            rstd[r] = rs;
        }
    }

    // With n = x·rstd and g = dout·w: dx = rstd · (g − n · mean(g·n)) (overwritten, or +=);
    // dw += Σ_r dout·n (split by columns).
    void rmsnorm_backward_f32(float* dx, float* dw, const float* dout, const float* x, const float* rstd, const float* w,
                          int64_t rows, int64_t C, bool accumulate) {
        PTD_REQUIRE(C > 0 && rows >= 0, "rows = %lld, C = %lld", static_cast<long long>(rows),
                    static_cast<long long>(C));
        const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static) if (rows * C >= k_par_min)
        for (int64_t r = 0; r < rows; r++) {
            const float* xr = x + r * C;
            const float* dr = dout + r * C;
            float* dxr = dx + r * C;
            const float rs = rstd[r];
            float sgn = 0.0f;
#pragma omp simd reduction(+ : sgn)
            for (int64_t i = 0; i < C; i++) sgn += dr[i] * w[i] * (xr[i] * rs);
            const float mgn = sgn * inv_c;
            for (int64_t i = 0; i < C; i++) {
                const float v = (dr[i] * w[i] - (xr[i] * rs) * mgn) * rs;
                dxr[i] = accumulate ? dxr[i] + v : v;
            }
        }
        parallel_columns(C, rows * C, [&](int64_t c0, int64_t c1) {
            for (int64_t r = 0; r < rows; r++) {
                const float* xr = x + r * C;
                const float* dr = dout + r * C;
                const float rs = rstd[r];
                for (int64_t i = c0; i < c1; i++) dw[i] += dr[i] * (xr[i] * rs);
            }
        });
    }

    // ---- activations -------------------------------------------------------------------

    // 0.5·x·(1 + tanh(a)) = x·σ(2a), a = √(2/π)(x + 0.044715x³): one exp, no tanh, and no
    // cancellation for large negative x.
    void gelu_forward_f32(float* out, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= k_par_min)
        for (int64_t i = 0; i < n; i++) {
            const float xi = x[i];
            const float a = k_gelu_s * (xi + k_gelu_c * xi * xi * xi);
            out[i] = xi * sigmoid(2.0f * a);
        }
    }

    // gelu'(x) = σ(2a) + x · 2σ(2a)(1 − σ(2a)) · a'(x), a' = √(2/π)(1 + 3·0.044715x²)
    // (the same as 0.5(1 + tanh a) + 0.5x·sech²(a)·a', as 4σ(1−σ) = sech²).
    void gelu_backward_f32(float* dx, const float* x, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= k_par_min)
        for (int64_t i = 0; i < n; i++) {
            const float xi = x[i];
            const float a = k_gelu_s * (xi + k_gelu_c * xi * xi * xi);
            const float da = k_gelu_s * (1.0f + 3.0f * k_gelu_c * xi * xi);
            const float s = sigmoid(2.0f * a);
            dx[i] = dout[i] * (s + xi * 2.0f * s * (1.0f - s) * da);
        }
    }

    // out = silu(gate)·up, silu(g) = g·σ(g).
    void swiglu_forward_f32(float* out, const float* gate, const float* up, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= k_par_min)
        for (int64_t i = 0; i < n; i++) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
    }

    // dup = dout·silu(g); dgate = dout·up·silu'(g), silu'(g) = σ(g)(1 + g(1 − σ(g))).
    void swiglu_backward_f32(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                         int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= k_par_min)
        for (int64_t i = 0; i < n; i++) {
            const float g = gate[i], s = sigmoid(g), d = dout[i];
            const float dg = d * up[i] * (s * (1.0f + g * (1.0f - s)));
            dup[i] = d * (g * s);
            dgate[i] = dg;
        }
    }

    // ---- attention ---------------------------------------------------------------------

    // x [B,T,nh,D]: rotate the pairs (i, i + D/2) by the angle (pos0 + t)·theta^(−2i/D).
    // The table's angles are formed in double: p·freq reaches thousands of radians, where
    // fp32 would lose the low bits before cos/sin. Built once at start-up, shared by every
    // call, batch row and head.
    void rope_table(float* table, int64_t positions, int64_t D, float theta) override {
        PTD_REQUIRE(positions >= 0 && D > 0 && D % 2 == 0, "bad shape positions=%lld D=%lld (even)",
                    static_cast<long long>(positions), static_cast<long long>(D));
        PTD_REQUIRE(theta > 0.0f, "theta = %g", static_cast<double>(theta));
        const int64_t half = D / 2;
        float* cs = table;
        float* sn = table + positions * half;
        for (int64_t i = 0; i < half; i++) {
            const double freq = std::pow(static_cast<double>(theta), -2.0 * static_cast<double>(i) / D);
            for (int64_t t = 0; t < positions; t++) {
                const double ang = static_cast<double>(t) * freq;
                cs[t * half + i] = static_cast<float>(std::cos(ang));
                sn[t * half + i] = static_cast<float>(std::sin(ang));
            }
        }
    }
    void rope_forward(DType t, void* x, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                      const float* table, int64_t positions) override {
        rope_typed(t, x, ld, B, T, nh, D, pos0, table, positions, 1.0f);
    }
    // The inverse rotation (angle negated): the transpose of the forward's linear map.
    void rope_backward(DType t, void* dx, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                       const float* table, int64_t positions) override {
        rope_typed(t, dx, ld, B, T, nh, D, pos0, table, positions, -1.0f);
    }

    // One task per (b, h, block of query rows [t0, t1)); the block only sees keys < t1:
    //   scores P[t0:t1, 0:t1] = scale · Q[t0:t1] · K[0:t1]ᵀ   (GEMM, straight into probs)
    //   causal softmax per row (entries above the diagonal set to 0)
    //   ctx[t0:t1] = P[t0:t1, 0:t1] · V[0:t1]                 (GEMM)
    // Q rows of head h are strided by H·D and K/V rows of kv head g by G·D, which the
    // GEMMs take as leading dimensions: no copies.
    // The attention products go through the backend's own GEMM op (f32 operands: no
    // scratch is touched, so the op is safe inside the OpenMP loops below), with the
    // leading dimensions of the fused qkv rows.
    void attn_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* A, int64_t lda,
                   const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
        Gemm g;
        g.trans_a = ta, g.trans_b = tb, g.M = m, g.N = n, g.K = k, g.alpha = alpha, g.beta = beta;
        g.A = A, g.lda = lda, g.B = B, g.ldb = ldb, g.C = C, g.ldc = ldc;
        gemm(g);
    }

    // q rows ldq apart, k and v rows ldkv apart (column blocks of the fused qkv).
    void attention_forward_f32(float* ctx, float* probs, const float* q, const float* k, const float* v,
                               int64_t ldq, int64_t ldkv, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
        check_attention(B, T, H, G, D);
        if (B == 0 || T == 0) return;
        const float scale = 1.0f / std::sqrt(static_cast<float>(D));
        const int64_t rep = H / G, nqb = (T + k_attn_block - 1) / k_attn_block, tasks = B * H * nqb;
        blas_single_thread single;
        // schedule(static, 1): later blocks cost more, so deal the tasks round-robin.
#pragma omp parallel for schedule(static, 1)
        for (int64_t task = 0; task < tasks; task++) {
            const int64_t qb = task % nqb, bh = task / nqb, h = bh % H, b = bh / H, g = h / rep;
            const int64_t t0 = qb * k_attn_block, t1 = std::min(T, t0 + k_attn_block), m = t1 - t0;
            float* p_blk = probs + (bh * T + t0) * T;                // [m, T], ld T
            const float* q_blk = q + (b * T + t0) * ldq + h * D;     // [m, D], ld ldq
            const float* k_bg = k + b * T * ldkv + g * D;            // [T, D], ld ldkv
            const float* v_bg = v + b * T * ldkv + g * D;            // [T, D], ld ldkv
            float* ctx_blk = ctx + ((b * T + t0) * H + h) * D;       // [m, D], ld H·D
            attn_gemm(false, true, m, t1, D, scale, q_blk, ldq, k_bg, ldkv, 0.0f, p_blk, T);
            for (int64_t i = 0; i < m; i++) causal_softmax_row(p_blk + i * T, t0 + i, T);
            attn_gemm(false, false, m, D, t1, 1.0f, p_blk, T, v_bg, ldkv, 0.0f, ctx_blk, H * D);
        }
    }

    // With P the saved probabilities, dP = dctx·Vᵀ, and per row ρ_t = Σ_u P[t,u]·dP[t,u]:
    //   dS = P ⊙ (dP − ρ)   dq = scale · dS·K   dk = scale · Σ_h dSᵀ·Q_h   dv = Σ_h Pᵀ·dctx_h
    // Phase 1, a task per (b, h, query block): dP and dS for the block's rows, dq, ρ.
    // Phase 2, a task per (b, g, key block [k0, k1)): recomputes dP[k0:T, k0:k1] (one more
    // GEMM of the four, instead of a [B,H,T,T] dS buffer) and sums the query heads of the
    // group in order into dk, dv — each element of dk/dv is written by one task, so the
    // result is deterministic without atomics.
    // q, dq rows ldq apart; k, v, dk, dv rows ldkv apart. `workspace`: ρ and the tiles (f32).
    void attention_backward_f32(float* dq, float* dk, float* dv, const float* dctx, const float* probs,
                                const float* q, const float* k, const float* v, int64_t ldq, int64_t ldkv, int64_t B,
                                int64_t T, int64_t H, int64_t G, int64_t D, float* workspace) {
        check_attention(B, T, H, G, D);
        if (B == 0 || T == 0) return;
        const float scale = 1.0f / std::sqrt(static_cast<float>(D));
        const int64_t rep = H / G, nb = (T + k_attn_block - 1) / k_attn_block;
        // Scratch (planned by the caller, attention_backward_workspace): ρ [B,H,T] and one
        // [T, block] dP/dS tile per thread.
        const int64_t tile = T * k_attn_block;
        PTD_REQUIRE(workspace != nullptr, "attention_backward needs its planned workspace");
        // At most the threads the workspace was planned for (one tile each).
        const int nt = std::min(omp_get_max_threads(), threads_planned());
        float* rho = workspace;
        float* tiles = workspace + B * H * T;
        {
            blas_single_thread single;
            const int64_t tasks1 = B * H * nb;
#pragma omp parallel for schedule(static, 1) num_threads(nt)
            for (int64_t task = 0; task < tasks1; task++) {
                float* ds = tiles + tile * omp_get_thread_num();  // [m, t1], ld t1
                const int64_t qb = task % nb, bh = task / nb, h = bh % H, b = bh / H, g = h / rep;
                const int64_t t0 = qb * k_attn_block, t1 = std::min(T, t0 + k_attn_block), m = t1 - t0;
                const float* p_blk = probs + (bh * T + t0) * T;              // [m, T], ld T
                const float* dctx_blk = dctx + ((b * T + t0) * H + h) * D;   // [m, D], ld H·D
                const float* k_bg = k + b * T * ldkv + g * D;                // [T, D], ld ldkv
                const float* v_bg = v + b * T * ldkv + g * D;
                attn_gemm(false, true, m, t1, D, 1.0f, dctx_blk, H * D, v_bg, ldkv, 0.0f, ds, t1);  // dP
                for (int64_t i = 0; i < m; i++) {
                    const int64_t t = t0 + i;
                    const float* pr = p_blk + i * T;
                    float* dr = ds + i * t1;
                    float r = 0.0f;
#pragma omp simd reduction(+ : r)
                    for (int64_t u = 0; u <= t; u++) r += pr[u] * dr[u];
                    for (int64_t u = 0; u <= t; u++) dr[u] = pr[u] * (dr[u] - r);
                    for (int64_t u = t + 1; u < t1; u++) dr[u] = 0.0f;
                    rho[bh * T + t] = r;
                }
                attn_gemm(false, false, m, D, t1, scale, ds, t1, k_bg, ldkv, 0.0f, dq + (b * T + t0) * ldq + h * D,
                          ldq);
            }
            const int64_t tasks2 = B * G * nb;
#pragma omp parallel for schedule(static, 1) num_threads(nt)
            for (int64_t task = 0; task < tasks2; task++) {
                float* ds = tiles + tile * omp_get_thread_num();  // [T − k0, n], ld n
                const int64_t kb = task % nb, bg = task / nb, g = bg % G, b = bg / G;
                const int64_t k0 = kb * k_attn_block, k1 = std::min(T, k0 + k_attn_block), n = k1 - k0;
                const int64_t rows = T - k0;  // query rows t ≥ k0 see these keys
                const float* v_blk = v + (b * T + k0) * ldkv + g * D;  // [n, D], ld ldkv
                float* dk_blk = dk + (b * T + k0) * ldkv + g * D;      // [n, D], ld ldkv
                float* dv_blk = dv + (b * T + k0) * ldkv + g * D;
                for (int64_t j = 0; j < rep; j++) {
                    const int64_t h = g * rep + j, bh = b * H + h;
                    const float* p_blk = probs + (bh * T + k0) * T + k0;        // [rows, n], ld T
                    const float* dctx_blk = dctx + ((b * T + k0) * H + h) * D;  // [rows, D], ld H·D
                    const float* q_blk = q + (b * T + k0) * ldq + h * D;        // [rows, D], ld ldq
                    attn_gemm(false, true, rows, n, D, 1.0f, dctx_blk, H * D, v_blk, ldkv, 0.0f, ds, n);  // dP
                    for (int64_t i = 0; i < rows; i++) {
                        const float* pr = p_blk + i * T;
                        float* dr = ds + i * n;
                        const float r = rho[bh * T + k0 + i];
                        const int64_t last = std::min(n, i + 1);  // keys k0 + u ≤ t = k0 + i
                        for (int64_t u = 0; u < last; u++) dr[u] = pr[u] * (dr[u] - r);
                        for (int64_t u = last; u < n; u++) dr[u] = 0.0f;
                    }
                    const float beta = j == 0 ? 0.0f : 1.0f;  // the first head overwrites
                    attn_gemm(true, false, n, D, rows, scale, ds, n, q_blk, ldq, beta, dk_blk, ldkv);
                    attn_gemm(true, false, n, D, rows, 1.0f, p_blk, T, dctx_blk, H * D, beta, dv_blk, ldkv);
                }
            }
        }
    }

    // Bytes: ρ [B,H,T] and one [T, block] tile per planned thread, f32 whatever t is (the
    // kernel computes in f32; its 16-bit operands are widened in the operand scratch).
    int64_t attention_backward_workspace(DType, int64_t B, int64_t T, int64_t H, int64_t,
                                         int64_t) const override {
        return static_cast<int64_t>(sizeof(float)) * (B * H * T + T * k_attn_block * threads_planned());
    }

    // Every slot of the widening scratch holds the largest operand (f32); nothing in fp32,
    // where no operand is widened.
    int64_t operand_scratch_bytes(DType t, int64_t largest_operand, int64_t) const override {
        check_type(t, "t");
        return t == DType::f32 ? 0 : k_scratch_slots * static_cast<int64_t>(sizeof(float)) * largest_operand;
    }
    void plan_operand_scratch(DType t, int64_t largest_operand, int64_t widest_row) override {
        if (operand_scratch_bytes(t, largest_operand, widest_row) == 0) return;
        for (int slot = 0; slot < k_scratch_slots; slot++) scratch(slot, largest_operand);
    }

    // ---- embedding ---------------------------------------------------------------------

    // out [rows, C]; wte [Vl, C] holds the vocabulary rows v0..v0+Vl−1 (vocab-parallel).
    void embedding_forward_f32(float* out, const int32_t* tokens, const float* wte, int64_t v0, int64_t Vl, int64_t rows,
                           int64_t C) {
#pragma omp parallel for schedule(static) if (rows * C >= k_par_min)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t t = static_cast<int64_t>(tokens[r]) - v0;
            float* outr = out + r * C;
            if (t >= 0 && t < Vl) std::memcpy(outr, wte + t * C, sizeof(float) * C);
            else std::memset(outr, 0, sizeof(float) * C);
        }
    }

    // Rows with the same token hit the same dwte row: split by columns, rows in order.
    void embedding_backward_f32(float* dwte, const float* dout, const int32_t* tokens, int64_t v0, int64_t Vl,
                            int64_t rows, int64_t C) {
        parallel_columns(C, rows * C, [&](int64_t c0, int64_t c1) {
            for (int64_t r = 0; r < rows; r++) {
                const int64_t t = static_cast<int64_t>(tokens[r]) - v0;
                if (t < 0 || t >= Vl) continue;
                float* dst = dwte + t * C;
                const float* src = dout + r * C;
                for (int64_t c = c0; c < c1; c++) dst[c] += src[c];
            }
        });
    }

    // out [rows, C] += wpe [T, C] at position (row0 + r) mod T.
    void position_forward_f32(float* out, const float* wpe, int64_t row0, int64_t rows, int64_t T, int64_t C) {
        PTD_REQUIRE(T > 0 && row0 >= 0, "T = %lld, row0 = %lld", static_cast<long long>(T),
                    static_cast<long long>(row0));
#pragma omp parallel for schedule(static) if (rows * C >= k_par_min)
        for (int64_t r = 0; r < rows; r++) {
            const float* pr = wpe + ((row0 + r) % T) * C;
            float* outr = out + r * C;
            for (int64_t c = 0; c < C; c++) outr[c] += pr[c];
        }
    }

    // A task per position p: its rows are r ≡ p − row0 (mod T), summed in row order.
    void position_backward_f32(float* dwpe, const float* dout, int64_t row0, int64_t rows, int64_t T,
                           int64_t C) {
        PTD_REQUIRE(T > 0 && row0 >= 0, "T = %lld, row0 = %lld", static_cast<long long>(T),
                    static_cast<long long>(row0));
        const int64_t shift = row0 % T;
#pragma omp parallel for schedule(static) if (rows * C >= k_par_min)
        for (int64_t p = 0; p < T; p++) {
            float* dst = dwpe + p * C;
            for (int64_t r = (p - shift + T) % T; r < rows; r += T) {
                const float* src = dout + r * C;
                for (int64_t c = 0; c < C; c++) dst[c] += src[c];
            }
        }
    }

    // ---- vocab-parallel cross entropy --------------------------------------------------

    // rowmax[r] = max of the valid columns of this shard; −inf when it has none (the
    // max all-reduce then ignores this shard).
    void xent_row_max(float* rowmax, const float* logits, int64_t rows, int64_t Vl, int64_t v0,
                      int64_t V_valid) override {
        const int64_t nv = valid_columns(Vl, v0, V_valid);
#pragma omp parallel for schedule(static) if (rows * Vl >= k_par_min)
        for (int64_t r = 0; r < rows; r++) {
            rowmax[r] = xent_max_of_row(logits + r * Vl, nv);
        }
    }

    void xent_sums(float* sumexp, float* target_logit, const float* logits, const float* rowmax,
                   const int32_t* targets, int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) override {
        const int64_t nv = valid_columns(Vl, v0, V_valid);
#pragma omp parallel for schedule(static) if (rows * Vl >= k_par_min)
        for (int64_t r = 0; r < rows; r++) {
            const float* lr = logits + r * Vl;
            sumexp[r] = xent_sumexp_of_row(lr, rowmax[r], nv);
            // A target in a padding column would be a data bug; like xent_backward, treat it
            // as absent rather than read a masked logit.
            const int64_t t = static_cast<int64_t>(targets[r]) - v0;
            target_logit[r] = (t >= 0 && t < nv) ? lr[t] : 0.0f;
        }
    }

    void xent_finish(float* loss, float* logits, const float* rowmax, const float* sumexp, const float* target_logit,
                     int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) override {
        const int64_t nv = valid_columns(Vl, v0, V_valid);
#pragma omp parallel for schedule(static) if (rows * Vl >= k_par_min)
        for (int64_t r = 0; r < rows; r++) {
            float* lr = logits + r * Vl;
            const float mx = rowmax[r], inv = 1.0f / sumexp[r];
#pragma omp simd
            for (int64_t c = 0; c < nv; c++) lr[c] = fast_exp(lr[c] - mx) * inv;
            for (int64_t c = nv; c < Vl; c++) lr[c] = 0.0f;
            loss[r] = std::log(sumexp[r]) + mx - target_logit[r];
        }
    }

    // dlogits may alias probs (the model does it in place): the target's probability is
    // read before its row is overwritten. 16-bit dlogits: store_row16, rows 2·Vl apart.
    void xent_backward(void* dlogits, DType dlogits_t, const float* probs, const int32_t* targets, float scale,
                       int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) override {
        const int64_t nv = valid_columns(Vl, v0, V_valid);
        PTD_REQUIRE(dlogits_t == DType::f32 || dlogits_t == DType::bf16 || dlogits_t == DType::f16,
                    "dlogits dtype %d is not f32, bf16 or f16", (int)dlogits_t);
#pragma omp parallel for schedule(static) if (rows * Vl >= k_par_min)
        for (int64_t r = 0; r < rows; r++) {
            const float* pr = probs + r * Vl;
            const int64_t t = static_cast<int64_t>(targets[r]) - v0;
            const bool here = t >= 0 && t < nv;
            const float p_target = here ? pr[t] : 0.0f;  // read before the row is overwritten
            if (dlogits_t != DType::f32) {
                store_row16(static_cast<char*>(dlogits) + r * Vl * 4, dlogits_t, Vl, nv, [&](int64_t c) {
                    return c == t ? scale * (p_target - 1.0f) : scale * pr[c];
                });
                continue;
            }
            float* dr = static_cast<float*>(dlogits) + r * Vl;
            for (int64_t c = 0; c < nv; c++) dr[c] = scale * pr[c];
            for (int64_t c = nv; c < Vl; c++) dr[c] = 0.0f;
            if (here) dr[t] = scale * (p_target - 1.0f);
        }
    }

    // The four phases row by row: max, Σexp and the target logit stay in registers, and
    // the probabilities are not stored (dlogits gets scale · p directly).
    void xent_fused(float* loss, void* dlogits, DType dlogits_t, const float* logits, const int32_t* targets,
                    float scale, int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) override {
        const int64_t nv = valid_columns(Vl, v0, V_valid);
        PTD_REQUIRE(dlogits_t == DType::f32 || dlogits_t == DType::bf16 || dlogits_t == DType::f16,
                    "dlogits dtype %d is not f32, bf16 or f16", (int)dlogits_t);
#pragma omp parallel for schedule(static) if (rows * Vl >= k_par_min)
        for (int64_t r = 0; r < rows; r++) {
            const float* lr = logits + r * Vl;
            const float mx = xent_max_of_row(lr, nv);
            const float sum = xent_sumexp_of_row(lr, mx, nv);
            const int64_t t = static_cast<int64_t>(targets[r]) - v0;
            const bool here = t >= 0 && t < nv;
            const float target_logit = here ? lr[t] : 0.0f;
            loss[r] = std::log(sum) + mx - target_logit;
            if (!dlogits) continue;
            const float inv = 1.0f / sum;
            const float p_target = here ? fast_exp(target_logit - mx) * inv : 0.0f;  // before dlogits overwrites it
            if (dlogits_t != DType::f32) {
                store_row16(static_cast<char*>(dlogits) + r * Vl * 4, dlogits_t, Vl, nv, [&](int64_t c) {
                    return c == t ? scale * (p_target - 1.0f) : scale * (fast_exp(lr[c] - mx) * inv);
                });
                continue;
            }
            float* dr = static_cast<float*>(dlogits) + r * Vl;
#pragma omp simd
            for (int64_t c = 0; c < nv; c++) {
                const float p = fast_exp(lr[c] - mx) * inv;  // xent_finish's probability, rounded as stored there
                dr[c] = scale * p;
            }
            for (int64_t c = nv; c < Vl; c++) dr[c] = 0.0f;
            if (here) dr[t] = scale * (p_target - 1.0f);
        }
    }

    // ---- optimizer ---------------------------------------------------------------------

    // Decoupled weight decay in the same update: p −= lr·(m̂/(√v̂ + eps) + wd·p), p old.
    void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
               float weight_decay, const double* scalars, int64_t step, void* model_p, DType model_t) override {
        PTD_REQUIRE(step >= 1, "step = %lld (steps count from 1)", static_cast<long long>(step));
        if (scalars[SCALAR_FOUND_INF] != 0.0) return;  // skipped step: the weights stay as they are
        const auto grad_scale = static_cast<float>(scalars[SCALAR_GRAD_SCALE]);
        const auto bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step)));
        const auto bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step)));
        const float inv_bc1 = 1.0f / bc1, inv_bc2 = 1.0f / bc2;
#pragma omp parallel for schedule(static) if (n >= k_par_min)
        for (int64_t i = 0; i < n; i++) {
            const float gi = g[i] * grad_scale;
            const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
            const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
            m[i] = mi;
            v[i] = vi;
            const float mhat = mi * inv_bc1, vhat = vi * inv_bc2;
            p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * p[i]);
        }
        if (model_p) convert(model_p, model_t, p, DType::f32, n);
    }

    // The planned ranges live in host memory; a step is the per-range loop.
    int64_t adamw_plan_bytes(int) const override { return 0; }
    void plan_adamw(const AdamWRange* ranges, int count) override {
        PTD_REQUIRE(count >= 0 && (count == 0 || ranges), "plan_adamw: %d ranges", count);
        adamw_ranges_.assign(ranges, ranges + count);
    }
    void adamw_step(float lr, float beta1, float beta2, float eps, const double* scalars, int64_t step,
                    DType model_t) override {
        for (const AdamWRange& r : adamw_ranges_)
            adamw(r.p, r.g, r.m, r.v, r.n, lr, beta1, beta2, eps, r.weight_decay, scalars, step, r.model_p, model_t);
    }

private:
    MemStats stats_;
    TransferStats transfers_;
    bool sealed_ = false;
    int next_event_ = 0;
    int planned_threads_ = 1;
    std::vector<AdamWRange> adamw_ranges_;  // plan_adamw's list

    // Grow-only f32 scratch buffers for widened 16-bit operands, one per operand slot
    // of an op (ops never nest, so slots are reused across ops).
    static constexpr int k_scratch_slots = 5;
    float* scratch_[k_scratch_slots] = {};
    int64_t scratch_cap_[k_scratch_slots] = {};

    static bool is_float_type(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }
    static void check_type(DType t, const char* operand) {
        PTD_REQUIRE(is_float_type(t), "operand %s has dtype %d; allowed: f32, bf16, f16", operand, static_cast<int>(t));
    }
    float* scratch(int slot, int64_t n) {
        if (n > scratch_cap_[slot]) {
            release(scratch_[slot]);
            scratch_[slot] = static_cast<float*>(alloc(MEM_WORKSPACE, sizeof(float) * static_cast<size_t>(n),
                                                       "16-bit operand widened to f32"));
            scratch_cap_[slot] = n;
        }
        return scratch_[slot];
    }
    // x (t) as f32: x itself when t is f32, else a widened copy in scratch slot `slot`.
    const float* widen(int slot, const void* x, DType t, int64_t n) {
        if (t == DType::f32 || x == nullptr) return static_cast<const float*>(x);
        float* w = scratch(slot, n);
        convert(w, DType::f32, x, t, n);
        return w;
    }
    // Where an f32 kernel writes an output x (t): x itself, or scratch (widened from x
    // first when the kernel accumulates into it).
    float* widen_out(int slot, void* x, DType t, int64_t n, bool load) {
        if (t == DType::f32) return static_cast<float*>(x);
        float* w = scratch(slot, n);
        if (load) convert(w, DType::f32, x, t, n);
        return w;
    }
    // Rounds a scratch result back into x (t); nothing to do for f32.
    void narrow(void* x, DType t, const float* w, int64_t n) {
        if (t != DType::f32) convert(x, t, w, DType::f32, n);
    }

    static void check_attention(int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
        PTD_REQUIRE(B >= 0 && T >= 0 && H > 0 && G > 0 && D > 0, "bad shape B=%lld T=%lld H=%lld G=%lld D=%lld",
                    static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(H),
                    static_cast<long long>(G), static_cast<long long>(D));
        PTD_REQUIRE(H % G == 0, "H = %lld query heads is not a multiple of G = %lld kv heads",
                    static_cast<long long>(H), static_cast<long long>(G));
        (void)blas_int(T * std::max(H, G) * D, "T·H·D");
    }

    // row [T]: the scores of query t in [0, t]; becomes softmax over [0, t], zeros after.
    static void causal_softmax_row(float* row, int64_t t, int64_t T) {
        float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
        for (int64_t u = 0; u <= t; u++) mx = std::max(mx, row[u]);
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t u = 0; u <= t; u++) {
            const float e = fast_exp(row[u] - mx);
            row[u] = e;
            s += e;
        }
        const float inv = 1.0f / s;
        for (int64_t u = 0; u <= t; u++) row[u] *= inv;
        for (int64_t u = t + 1; u < T; u++) row[u] = 0.0f;
    }

    // Threads the per-thread scratch is planned for: the OpenMP maximum when the backend
    // was made (set_num_threads there), fixed for the run.
    int threads_planned() const { return planned_threads_; }

    void rope_typed(DType t, void* x, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                    const float* table, int64_t positions, float sign) {
        check_type(t, "x");
        const int64_t n = B * T == 0 ? 0 : (B * T - 1) * ld + nh * D;
        float* w = widen_out(0, x, t, n, true);
        rope(w, ld, B, T, nh, D, pos0, table, positions, sign);
        narrow(x, t, w, n);  // the columns between rows (k, v of the fused qkv) round-trip exactly
    }

    static void rope(float* x, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                     const float* table, int64_t positions, float sign) {
        PTD_REQUIRE(B >= 0 && T >= 0 && nh >= 0 && D > 0 && D % 2 == 0 && pos0 >= 0 && pos0 + T <= positions &&
                        ld >= nh * D,
                    "bad shape B=%lld T=%lld nh=%lld D=%lld (even) pos0=%lld ld=%lld (table of %lld positions)",
                    static_cast<long long>(B), static_cast<long long>(T), static_cast<long long>(nh),
                    static_cast<long long>(D), static_cast<long long>(pos0), static_cast<long long>(ld),
                    static_cast<long long>(positions));
        const int64_t half = D / 2;
        const float* cs = table + pos0 * half;
        const float* sn = table + (positions + pos0) * half;
        const int64_t bt_rows = B * T;
#pragma omp parallel for schedule(static) if (bt_rows * nh * D >= k_par_min)
        for (int64_t bt = 0; bt < bt_rows; bt++) {
            const float* c = cs + (bt % T) * half;
            const float* s = sn + (bt % T) * half;
            for (int64_t h = 0; h < nh; h++) {
                float* x1 = x + bt * ld + h * D;
                float* x2 = x1 + half;
                for (int64_t i = 0; i < half; i++) {
                    const float a = x1[i], b = x2[i], si = sign * s[i];
                    x1[i] = a * c[i] - b * si;
                    x2[i] = a * si + b * c[i];
                }
            }
        }
    }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<cpu_backend>(threads); }

}  // namespace ptd::engine
