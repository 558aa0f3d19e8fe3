// bench_gpu.cpp — bench_engine's device side (bench_gpu.h), compiled twice like the CUDA
// backend itself: with PTD_CUDA_SIM into bench_gpu::sim (the simulator's runtime and the
// cuBLASLt reference; always built) and without into bench_gpu::dev (cudart and cuBLASLt;
// only with ENABLE_CUDA). The GEMM goes through lt_matmul, the call ptd-engine makes, so the
// peak it measures is the one the engine's GEMMs can reach (same handle set-up, workspace
// and cached heuristic algorithm), not a hand-tuned cuBLAS figure.
#include "bench_gpu.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "blaslt.h"
#include "runtime.h"
#ifndef PTD_CUDA_SIM
#include "cuda_devices.h"
#endif

namespace bench_gpu::PTD_CUDA_NS {

namespace rt = ptd::cuda::PTD_CUDA_NS;

namespace {

rt::StreamHandle g_stream = nullptr;

// Round to nearest even, as __float2bfloat16_rn (the values here are finite).
uint16_t bf16_bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// Operands of roughly unit size with varied bits: tensor-core throughput depends on the data
// (all-zero inputs draw less power and run faster), so the peak is measured on data like a
// model's, not on memset patterns.
std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
    std::vector<uint16_t> v(n);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = bf16_bits((float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0));
    }
    return v;
}

// Device buffers of one timing, freed on every path out.
struct Buffers {
    std::vector<void*> ptrs;
    ~Buffers() {
        for (void* p : ptrs) (void)rt::free_device(p);
    }
    rt::Status alloc(void** p, size_t bytes, const char* tag) {
        rt::Status s = rt::malloc_device(p, bytes, tag);
        if (s.ok()) ptrs.push_back(*p);
        return s;
    }
};

struct Events {
    rt::EventHandle start = nullptr, end = nullptr;
    ~Events() {
        if (start) (void)rt::event_destroy(start);
        if (end) (void)rt::event_destroy(end);
    }
};

}  // namespace

DeviceInfo open_device() {
    DeviceInfo d;
    int count = 0;
    if (rt::Status s = rt::device_count(&count); !s.ok()) {
        d.error = s.message;
        return d;
    }
    if (count == 0) {
        const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
        d.error = std::string("the CUDA runtime sees no device (CUDA_VISIBLE_DEVICES ") +
                  (cvd ? std::string("= \"") + cvd + "\"" : std::string("unset")) + ")";
        return d;
    }
    if (rt::Status s = rt::set_device(0); !s.ok()) {
        d.error = s.message;
        return d;
    }
#ifdef PTD_CUDA_SIM
    d.name = "the CUDA simulator";
    d.line = "cuda-sim: the CUDA simulator (kernels as fibers on the host CPU, GEMMs in the cuBLASLt reference)";
#else
    char buf[8192] = {};
    if (ptd_cuda_describe_devices(buf, sizeof buf) < 0) {
        d.error = buf;
        return d;
    }
    d.line = std::string(buf).substr(0, std::string(buf).find('\n'));  // "cuda:0 NVIDIA H100 80GB HBM3, 79.1 GiB, ..."
    const size_t sp = d.line.find(' '), comma = d.line.find(',');
    d.name = sp == std::string::npos ? d.line : d.line.substr(sp + 1, comma == std::string::npos ? comma : comma - sp - 1);
#endif
    if (rt::Status s = rt::stream_create(&g_stream); !s.ok()) {
        d.error = s.message;
        return d;
    }
    if (rt::Status s = ptd::cuda::PTD_CUDA_NS::lt_prepare(g_stream); !s.ok()) {
        d.error = s.message;
        return d;
    }
    size_t free_b = 0, total_b = 0;
    if (rt::Status s = rt::mem_get_info(&free_b, &total_b); !s.ok()) {
        d.error = s.message;
        return d;
    }
    d.free_bytes = (int64_t)free_b;
    d.total_bytes = (int64_t)total_b;
    return d;
}

GemmTiming time_gemm(const GemmCase& g, const TimingPlan& plan) {
    using ptd::cuda::PTD_CUDA_NS::DTypeLt;
    GemmTiming t;
    auto failed = [&](const rt::Status& s) {
        t.error = s.message;
        return t;
    };
    const size_t a_n = (size_t)(g.m * g.k * g.batch), b_n = (size_t)(g.k * g.n * g.batch),
                 c_n = (size_t)(g.m * g.n * g.batch);
    const size_t c_bytes = c_n * (g.f32_accumulate ? 4 : 2);
    Buffers buf;
    void *A = nullptr, *B = nullptr, *C = nullptr;
    if (rt::Status s = buf.alloc(&A, a_n * 2, "bench A"); !s.ok()) return failed(s);
    if (rt::Status s = buf.alloc(&B, b_n * 2, "bench B"); !s.ok()) return failed(s);
    if (rt::Status s = buf.alloc(&C, c_bytes, "bench C"); !s.ok()) return failed(s);
    {
        const std::vector<uint16_t> ha = random_bf16(a_n, 1), hb = random_bf16(b_n, 2);
        if (rt::Status s = rt::memcpy_sync(A, ha.data(), a_n * 2, rt::CopyKind::host_to_device); !s.ok()) return failed(s);
        if (rt::Status s = rt::memcpy_sync(B, hb.data(), b_n * 2, rt::CopyKind::host_to_device); !s.ok()) return failed(s);
    }
    if (rt::Status s = rt::memset_async(C, 0, c_bytes, g_stream); !s.ok()) return failed(s);

    // Row-major C[M,N] = op(A)·op(B) is the column-major Cᵀ[N,M] = op(B)ᵀ·op(A)ᵀ: cuBLASLt's
    // A slot takes the row-major B and its B slot the row-major A (blaslt.h).
    ptd::cuda::PTD_CUDA_NS::LtMatmul p;
    p.m = g.n;
    p.n = g.m;
    p.k = g.k;
    p.trans_a = g.tb;
    p.A = B;
    p.a_type = DTypeLt::bf16;
    p.lda = g.tb ? g.k : g.n;
    p.stride_a = g.k * g.n;
    p.trans_b = g.ta;
    p.B = A;
    p.b_type = DTypeLt::bf16;
    p.ldb = g.ta ? g.m : g.k;
    p.stride_b = g.m * g.k;
    p.c_type = p.d_type = g.f32_accumulate ? DTypeLt::f32 : DTypeLt::bf16;
    p.C = p.D = C;
    p.ldc = p.ldd = g.n;
    p.stride_c = p.stride_d = g.m * g.n;
    p.beta = g.f32_accumulate ? 1.0f : 0.0f;
    p.batch = g.batch;

    // Warm-up: cuBLASLt's heuristic runs and the algorithm is cached at the first call.
    if (rt::Status s = ptd::cuda::PTD_CUDA_NS::lt_matmul(p, g_stream); !s.ok()) return failed(s);
    Events ev;
    if (rt::Status s = rt::event_create(&ev.start); !s.ok()) return failed(s);
    if (rt::Status s = rt::event_create(&ev.end); !s.ok()) return failed(s);
    auto timed = [&](int calls, double* ms) -> rt::Status {
        if (rt::Status s = rt::event_record(ev.start, g_stream); !s.ok()) return s;
        for (int c = 0; c < calls; ++c)
            if (rt::Status s = ptd::cuda::PTD_CUDA_NS::lt_matmul(p, g_stream); !s.ok()) return s;
        if (rt::Status s = rt::event_record(ev.end, g_stream); !s.ok()) return s;
        if (rt::Status s = rt::event_synchronize(ev.end); !s.ok()) return s;
        float elapsed = 0;
        rt::Status s = rt::event_elapsed_ms(&elapsed, ev.start, ev.end);
        *ms = elapsed;
        return s;
    };
    double one_ms = 0;
    if (rt::Status s = timed(1, &one_ms); !s.ok()) return failed(s);
    t.calls_per_rep = (int)std::clamp(std::ceil(plan.rep_ms / std::max(one_ms, 1e-3)), 1.0, 10000.0);
    t.best_ms = one_ms;
    for (int r = 0; r < plan.reps; ++r) {
        double ms = 0;
        if (rt::Status s = timed(t.calls_per_rep, &ms); !s.ok()) return failed(s);
        t.best_ms = std::min(t.best_ms, ms / t.calls_per_rep);
    }
    return t;
}

void close_device() {
    ptd::cuda::PTD_CUDA_NS::lt_release();
    if (g_stream) (void)rt::stream_destroy(g_stream);
    g_stream = nullptr;
}

}  // namespace bench_gpu::PTD_CUDA_NS
