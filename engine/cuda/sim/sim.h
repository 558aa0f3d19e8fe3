// sim.h — the CUDA simulator behind dialect.cuh when PTD_CUDA_SIM is defined: kernels
// compiled as host C++ run on the CPU with CUDA's execution model made strict. A launch runs
// its blocks one after another (in a shuffled order); the threads of a block are fibers that
// run in a fresh random order between any two barriers or warp collectives, so a missing
// __syncthreads makes a thread read data another thread has not written yet; shared memory is
// poisoned (0xFF bytes: a NaN as float, -1 as int) at block start, so an uninitialised shared
// read shows up as NaN; divergent barriers, mismatched warp participation and launch limits
// are reported with the launch's seed and abort. Speed, memory coalescing, bank conflicts and
// real concurrency are out of its reach (docs/engine.md, "The CUDA simulator"). Debug modes
// (runtime.h): racecheck reruns each launch in the reverse and an interleaved block order;
// memcheck puts every allocation against guard pages and names the thread that faults.
// Each host thread has its own simulator state, so threads may launch at the same time. A
// fiber has a 256 KiB stack with a guard page below it: a kernel that overflows it dies with
// SIGSEGV.
// Never includes a CUDA header: the simulator builds on machines without the CUDA toolkit.
#pragma once

#ifndef PTD_CUDA_SIM
#define PTD_CUDA_SIM 1
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../runtime.h"  // PTD_CUDA_NS = sim, StreamHandle

// ---- qualifiers ----------------------------------------------------------------------
#define __global__ inline
#define __device__ inline      // functions, and __device__ variables (C++17 inline variables)
#define __constant__ inline
#define __host__
#define __forceinline__
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// __restrict__ is a GCC/Clang keyword already.

namespace ptd::cuda::sim {

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// ---- the state a running thread sees --------------------------------------------------
struct BlockState;
struct ThreadState;
namespace detail {
extern thread_local constinit ThreadState* tl_thread;  // the fiber running now (nullptr outside kernels)
extern thread_local constinit BlockState* tl_block;
const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();
}  // namespace detail

// ---- barriers and warp collectives (sim.cpp) ------------------------------------------
void syncthreads(const char* file, int line);
enum class WarpOp : uint8_t { sync, shfl_idx, shfl_xor, shfl_down, shfl_up, ballot, any, all };
// Suspends the calling thread until every existing lane of its warp has arrived at the same
// warp op (same file:line, same mask); returns this lane's result. `value` carries the
// lane's operand bits (shuffles) or predicate (votes).
uint64_t warp_collective(const char* file, int line, WarpOp op, unsigned mask, uint64_t value, int arg, int width,
                         int value_bytes);

inline void syncwarp(const char* file, int line, unsigned mask = 0xffffffffu) {
    (void)warp_collective(file, line, WarpOp::sync, mask, 0, 0, 32, 0);
}

template <class T>
inline uint64_t to_bits64(T v) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T>
inline T from_bits64(uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}
template <class T>
inline T shfl(const char* file, int line, WarpOp op, unsigned mask, T v, int arg, int width = 32) {
    return from_bits64<T>(warp_collective(file, line, op, mask, to_bits64(v), arg, width, (int)sizeof(T)));
}

// ---- shared memory --------------------------------------------------------------------
// The block's static shared array declared at `site` (one per PTD_SHARED in the source):
// allocated and poisoned by the first thread of the block that reaches it.
void* static_shared(const void* site, size_t bytes, size_t align, const char* name, const char* file, int line);
void* dynamic_shared();
template <class T>
inline T* static_shared_array(const void* site, size_t count, const char* name, const char* file, int line) {
    return static_cast<T*>(static_shared(site, count * sizeof(T), alignof(T) > 16 ? alignof(T) : 16, name, file, line));
}

// ---- 16-bit storage types, bit-identical to cuda_bf16.h / cuda_fp16.h ------------------
struct bf16 {
    uint16_t bits;
};
struct f16 {
    uint16_t bits;
};
inline uint16_t bf16_bits(bf16 x) { return x.bits; }
inline uint16_t f16_bits(f16 x) { return x.bits; }
inline bf16 bf16_from_bits(uint16_t b) { return bf16{b}; }
inline f16 f16_from_bits(uint16_t b) { return f16{b}; }

inline float to_f32(float x) { return x; }
inline float to_f32(bf16 x) {  // exact: the top half of a float
    const uint32_t u = (uint32_t)x.bits << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
// As __half2float on the host: exact; a NaN becomes the canonical 0x7fffffff.
inline float to_f32(f16 x) {
    const uint32_t sign = (uint32_t)(x.bits >> 15) & 1u;
    uint32_t exponent = (uint32_t)(x.bits >> 10) & 0x1fu;
    uint32_t mantissa = ((uint32_t)x.bits & 0x3ffu) << 13;
    uint32_t u;
    if (exponent == 0x1fu) {
        u = mantissa != 0 ? 0x7fffffffu : ((sign << 31) | 0x7f800000u);
    } else if (exponent == 0) {
        if (mantissa != 0) {  // subnormal: normalise
            exponent = 0x71u;
            uint32_t msb;
            do {
                msb = mantissa & 0x400000u;
                mantissa <<= 1;
                --exponent;
            } while (msb == 0);
            mantissa &= 0x7fffffu;
        }
        u = (sign << 31) | (exponent << 23) | mantissa;
    } else {
        u = (sign << 31) | ((exponent + 0x70u) << 23) | mantissa;
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
template <class T>
inline T from_f32(float x);
template <>
inline float from_f32<float>(float x) {
    return x;
}
// As __float2bfloat16_rn: round to nearest even; any NaN becomes the canonical 0x7fff;
// overflow rounds to ±inf.
template <>
inline bf16 from_f32<bf16>(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{0x7fff};
    const uint32_t remainder = u << 16;
    uint16_t r = (uint16_t)(u >> 16);
    if (remainder > 0x80000000u || (remainder == 0x80000000u && (r & 1u))) ++r;
    return bf16{r};
}
// As __float2half_rn: round to nearest even incl. subnormals; NaN becomes 0x7fff; beyond
// 65520 becomes ±inf.
template <>
inline f16 from_f32<f16>(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    const uint32_t u = bits & 0x7fffffffu;
    const uint32_t sign = (bits >> 16) & 0x8000u;
    uint32_t result, remainder;
    if (u >= 0x7f800000u) {
        remainder = 0;
        result = u == 0x7f800000u ? (sign | 0x7c00u) : 0x7fffu;
    } else if (u > 0x477fefffu) {  // overflow
        remainder = 0x80000000u;
        result = sign | 0x7bffu;
    } else if (u >= 0x38800000u) {  // normal
        remainder = u << 19;
        result = sign | ((u - 0x38000000u) >> 13);
    } else if (u < 0x33000001u) {  // ±0
        remainder = u;
        result = sign;
    } else {  // subnormal
        const uint32_t exponent = u >> 23;
        const uint32_t shift = 0x7eu - exponent;
        const uint32_t mantissa = (u & 0x7fffffu) | 0x800000u;
        remainder = mantissa << (32u - shift);
        result = (sign | (mantissa >> shift)) & 0xffffu;
    }
    if (remainder > 0x80000000u || (remainder == 0x80000000u && (result & 1u))) ++result;
    return f16{(uint16_t)result};
}

// ---- 128-bit vector loads (alignment checked: a misaligned LDG.128 faults on the GPU) --
void report_misaligned(const void* p, const char* what);
template <class T>
struct alignas(16) Pack128 {
    static constexpr int size = 16 / sizeof(T);
    T v[size];
    T& operator[](int i) { return v[i]; }
    const T& operator[](int i) const { return v[i]; }
};
template <class T>
inline Pack128<T> load128(const T* p) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) report_misaligned(p, "load128");
    Pack128<T> r;
    std::memcpy(&r, p, 16);
    return r;
}
template <class T>
inline Pack128<T> load128cs(const T* p) {
    return load128(p);
}
template <class T>
inline void store128(T* p, const Pack128<T>& x) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) report_misaligned(p, "store128");
    std::memcpy(p, &x, 16);
}
template <class T>
inline void store128cs(T* p, const Pack128<T>& x) {
    store128(p, x);
}

// ---- launches --------------------------------------------------------------------------
struct LaunchConfig {
    const char* kernel_name;
    const char* file;
    int line;
    const void* kernel;  // identity for the dynamic-smem opt-in
    dim3 grid, block;
    size_t dynamic_smem;
};
// The hardware limits the simulator enforces (an H100's). Tests may lower them.
struct DeviceLimits {
    unsigned max_threads_per_block = 1024;
    unsigned max_block_x = 1024, max_block_y = 1024, max_block_z = 64;
    unsigned max_grid_x = 2147483647u, max_grid_y = 65535, max_grid_z = 65535;
    size_t static_smem_per_block = 48 * 1024;
    size_t default_dynamic_smem = 48 * 1024;       // without the opt-in
    size_t max_dynamic_smem_optin = 227 * 1024;    // cudaDevAttrMaxSharedMemoryPerBlockOptin
};
DeviceLimits& device_limits();

// Empty when the launch is valid, else the reason (what was given, what is allowed).
std::string check_launch(const LaunchConfig& config);
// Runs every block of the launch; aborts with the launch seed on a launch error, a
// divergent barrier or a warp participation mismatch.
void run_launch(const LaunchConfig& config, void (*body)(void*), void* state);
// cudaFuncSetAttribute(kernel, MaxDynamicSharedMemorySize, bytes); aborts above the opt-in limit.
void set_max_dynamic_smem(const char* kernel_name, const char* file, int line, const void* kernel, size_t bytes);

// Seeds: launch i of this OS thread runs with seed mix(base, i); base comes from
// PTD_CUDA_SIM_SEED (default 1) or set_seed, which also restarts this thread's launch
// numbering (so set_seed(b) twice replays the same launches). Tests print
// last_launch_seed() on a failure.
void set_seed(uint64_t base);
uint64_t base_seed();
uint64_t last_launch_seed();
uint64_t launch_count();

// Shapes-only mode (runtime.h): every launch checked since the process started, by kernel
// as written at the launch site — the largest block (threads) and dynamic shared memory
// seen. The resource check (tests/cuda_resources.cmake) holds them against each kernel's
// registers from ptxas.
struct LaunchShape {
    unsigned max_threads = 0;
    size_t max_dynamic_smem = 0;
    uint64_t launches = 0;
};
std::map<std::string, LaunchShape> sim_launch_shapes();

// A launch a graph capture refused (runtime.h): prints the launch and the reason, aborts.
[[noreturn]] void capture_refused(const LaunchConfig& config, const std::string& why);

template <class... KArgs, class... Args>
inline void launch(const char* name, const char* file, int line, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                   size_t dynamic_smem, StreamHandle stream /*the sim runs every stream in order*/,
                   Args&&... args) {
    // Arguments are converted once, as cudaLaunchKernel copies them; every thread gets its
    // own copy of the parameters.
    struct State {
        void (*kernel)(KArgs...);
        std::tuple<std::decay_t<KArgs>...> params;
    };
    State state{kernel, std::tuple<std::decay_t<KArgs>...>(std::forward<Args>(args)...)};
    const LaunchConfig config{name, file, line, reinterpret_cast<const void*>(kernel), grid, block, dynamic_smem};
    void (*body)(void*) = [](void* p) {
        State* s = static_cast<State*>(p);
        std::apply(s->kernel, s->params);
    };
    if (sim_capture_active()) {  // a graph capture (runtime.h) records the launch, by value
        SimGraphNode node;
        node.what = std::string("launch of ") + name + " at " + file + ":" + std::to_string(line);
        sim_graph_fix(node, "grid", grid);
        sim_graph_fix(node, "block", block);
        sim_graph_fix(node, "dynamic smem", dynamic_smem);
        std::apply([&](const auto&... p) {
            int i = 0;
            (sim_graph_fix(node, "argument " + std::to_string(i++), p), ...);
        }, state.params);
        if (std::string error = check_launch(config); !error.empty()) capture_refused(config, error);
        auto kept = std::make_shared<State>(state);
        node.run = [kept, config, body] { run_launch(config, body, kept.get()); };
        bool recorded = false;
        if (const Status s = sim_capture_node(stream, std::move(node), &recorded); !s.ok()) capture_refused(config, s.message);
        if (recorded) return;  // else not the capturing stream: run it now
    }
    run_launch(config, body, &state);
}

// ---- atomics: a fiber never yields inside one, so a plain read-modify-write is atomic ----
// Each returns the old value, as CUDA's do.
template <class T>
inline T atomic_update(T* p, T v) {
    const T old = *p;
    *p = v;
    return old;
}
template <class T>
inline T atomic_add(T* p, T v) { return atomic_update<T>(p, *p + v); }
template <class T>
inline T atomic_max(T* p, T v) { return atomic_update<T>(p, *p > v ? *p : v); }
template <class T>
inline T atomic_min(T* p, T v) { return atomic_update<T>(p, *p < v ? *p : v); }
template <class T>
inline T atomic_cas(T* p, T compare, T v) { return atomic_update<T>(p, *p == compare ? v : *p); }

}  // namespace ptd::cuda::sim

// ---- CUDA names in the global namespace, as CUDA has them ------------------------------
using ptd::cuda::sim::dim3;
using ptd::cuda::sim::uint3;
inline constexpr int warpSize = 32;

#define threadIdx (::ptd::cuda::sim::detail::thread_idx())
#define blockIdx (::ptd::cuda::sim::detail::block_idx())
#define blockDim (::ptd::cuda::sim::detail::block_dim())
#define gridDim (::ptd::cuda::sim::detail::grid_dim())

#define __syncthreads() ::ptd::cuda::sim::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) ::ptd::cuda::sim::syncwarp(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_sync(mask, v, ...) \
    ::ptd::cuda::sim::shfl(__FILE__, __LINE__, ::ptd::cuda::sim::WarpOp::shfl_idx, mask, v, __VA_ARGS__)
#define __shfl_xor_sync(mask, v, ...) \
    ::ptd::cuda::sim::shfl(__FILE__, __LINE__, ::ptd::cuda::sim::WarpOp::shfl_xor, mask, v, __VA_ARGS__)
#define __shfl_down_sync(mask, v, ...) \
    ::ptd::cuda::sim::shfl(__FILE__, __LINE__, ::ptd::cuda::sim::WarpOp::shfl_down, mask, v, __VA_ARGS__)
#define __shfl_up_sync(mask, v, ...) \
    ::ptd::cuda::sim::shfl(__FILE__, __LINE__, ::ptd::cuda::sim::WarpOp::shfl_up, mask, v, __VA_ARGS__)
#define __ballot_sync(mask, pred)                                                                            \
    ((unsigned)::ptd::cuda::sim::warp_collective(__FILE__, __LINE__, ::ptd::cuda::sim::WarpOp::ballot, mask, \
                                                 (pred) ? 1u : 0u, 0, 32, 4))
#define __any_sync(mask, pred)                                                                                    \
    ((int)::ptd::cuda::sim::warp_collective(__FILE__, __LINE__, ::ptd::cuda::sim::WarpOp::any, mask, (pred) ? 1u : 0u, \
                                            0, 32, 4))
#define __all_sync(mask, pred)                                                                                    \
    ((int)::ptd::cuda::sim::warp_collective(__FILE__, __LINE__, ::ptd::cuda::sim::WarpOp::all, mask, (pred) ? 1u : 0u, \
                                            0, 32, 4))

#define PTD_SHARED(type, name, count)                                                                  \
    static constexpr char ptd_shared_site_##name = 0;                                                  \
    type* const name = ::ptd::cuda::sim::static_shared_array<type>(&ptd_shared_site_##name, (count), #name, \
                                                                   __FILE__, __LINE__)
#define PTD_DYNAMIC_SHARED(type, name) type* const name = static_cast<type*>(::ptd::cuda::sim::dynamic_shared())

#define PTD_LAUNCH(kernel, grid, block, smem_bytes, stream, ...) \
    ::ptd::cuda::sim::launch(#kernel, __FILE__, __LINE__, kernel, grid, block, smem_bytes, stream __VA_OPT__(, ) __VA_ARGS__)
#define PTD_SET_MAX_DYNAMIC_SMEM(kernel, bytes) \
    ::ptd::cuda::sim::set_max_dynamic_smem(#kernel, __FILE__, __LINE__, reinterpret_cast<const void*>(kernel), bytes)

// Atomics (CUDA's overload set).
inline int atomicAdd(int* p, int v) { return ptd::cuda::sim::atomic_add(p, v); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return ptd::cuda::sim::atomic_add(p, v); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    return ptd::cuda::sim::atomic_add(p, v);
}
inline float atomicAdd(float* p, float v) { return ptd::cuda::sim::atomic_add(p, v); }
inline double atomicAdd(double* p, double v) { return ptd::cuda::sim::atomic_add(p, v); }
inline int atomicMax(int* p, int v) { return ptd::cuda::sim::atomic_max(p, v); }
inline unsigned atomicMax(unsigned* p, unsigned v) { return ptd::cuda::sim::atomic_max(p, v); }
inline int atomicMin(int* p, int v) { return ptd::cuda::sim::atomic_min(p, v); }
inline unsigned atomicMin(unsigned* p, unsigned v) { return ptd::cuda::sim::atomic_min(p, v); }
inline int atomicCAS(int* p, int compare, int v) { return ptd::cuda::sim::atomic_cas(p, compare, v); }
inline unsigned atomicCAS(unsigned* p, unsigned compare, unsigned v) { return ptd::cuda::sim::atomic_cas(p, compare, v); }
inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long compare, unsigned long long v) {
    return ptd::cuda::sim::atomic_cas(p, compare, v);
}
inline int atomicExch(int* p, int v) { return ptd::cuda::sim::atomic_update(p, v); }
inline unsigned atomicExch(unsigned* p, unsigned v) { return ptd::cuda::sim::atomic_update(p, v); }
inline float atomicExch(float* p, float v) { return ptd::cuda::sim::atomic_update(p, v); }

// Device math that host C++ lacks.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
template <class T>
inline T __ldg(const T* p) {
    return *p;
}
inline unsigned __float_as_uint(float x) { return ptd::cuda::sim::from_bits64<unsigned>(ptd::cuda::sim::to_bits64(x)); }
inline float __uint_as_float(unsigned x) { return ptd::cuda::sim::from_bits64<float>(ptd::cuda::sim::to_bits64(x)); }
inline int __float_as_int(float x) { return ptd::cuda::sim::from_bits64<int>(ptd::cuda::sim::to_bits64(x)); }
inline float __int_as_float(int x) { return ptd::cuda::sim::from_bits64<float>(ptd::cuda::sim::to_bits64(x)); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
// CUDA's global min/max overloads (host and device there), for the types kernels use.
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
