// common.cuh — what every kernel family of engine/cuda/kernels/ shares: 8-element vector
// access held in f32 registers (one 128-bit access for bf16/f16, two for f32, so kernels
// that mix storage types move the same element count per thread), the host-side alignment
// test that picks the vector or the scalar instantiation of a kernel, launch-size helpers,
// and the contract check of the launch functions (a broken contract is a caller bug:
// message naming the op, then abort — as the CPU backend's PTD_REQUIRE).
//
// Included only through kernels_cuda.cu (nvcc) and kernels_sim.cpp (host, PTD_CUDA_SIM).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "dialect.cuh"
#include "kernels.h"

// nvcc's `#pragma unroll` for the fixed-count loops over a vector's elements; g++ (the
// simulator build) would warn about the unknown pragma and unrolls such loops itself.
#if defined(__CUDACC__) && !defined(PTD_CUDA_SIM)
#define PTD_UNROLL _Pragma("unroll")
#else
#define PTD_UNROLL
#endif

namespace ptd::cuda::PTD_CUDA_NS::kern {

using ptd::engine::DType;

// Elements per vector access in every kernel: 16 bytes of bf16/f16, 32 bytes of f32.
constexpr int k_vec = 8;

template <class T>
__device__ __forceinline__ void load_vec(const T* p, float (&f)[k_vec]) {
    if constexpr (sizeof(T) == 2) {
        const Pack128<T> a = load128(p);
PTD_UNROLL
        for (int k = 0; k < k_vec; k++) f[k] = to_f32(a[k]);
    } else {
        const Pack128<T> a = load128(p), b = load128(p + 4);
PTD_UNROLL
        for (int k = 0; k < 4; k++) f[k] = a[k], f[k + 4] = b[k];
    }
}

// Rounds each element once to T (nearest even) and stores them with 128-bit stores.
template <class T>
__device__ __forceinline__ void store_vec(T* p, const float (&f)[k_vec]) {
    if constexpr (sizeof(T) == 2) {
        Pack128<T> a;
PTD_UNROLL
        for (int k = 0; k < k_vec; k++) a[k] = from_f32<T>(f[k]);
        store128(p, a);
    } else {
        Pack128<T> a, b;
PTD_UNROLL
        for (int k = 0; k < 4; k++) a[k] = f[k], b[k] = f[k + 4];
        store128(p, a);
        store128(p + 4, b);
    }
}

// N elements at p into f32: a vector access when N == k_vec, else one scalar.
template <class T, int N>
__device__ __forceinline__ void load_n(const T* p, float (&f)[N]) {
    if constexpr (N == k_vec) load_vec(p, f);
    else
PTD_UNROLL
        for (int k = 0; k < N; k++) f[k] = to_f32(p[k]);
}
template <class T, int N>
__device__ __forceinline__ void store_n(T* p, const float (&f)[N]) {
    if constexpr (N == k_vec) store_vec(p, f);
    else
PTD_UNROLL
        for (int k = 0; k < N; k++) p[k] = from_f32<T>(f[k]);
}

// The value x takes once stored as T (rounded to nearest even for 16-bit types).
template <class T>
__device__ __forceinline__ float round_to(float x) {
    if constexpr (sizeof(T) == 2) return to_f32(from_f32<T>(x));
    else return x;
}

// ---- host side -----------------------------------------------------------------------

#if defined(PTD_CUDA_SIM)
// As on the GPU, where every allocation starts 256-byte aligned: memcheck's `end` placement
// (runtime.h) moves starts, so the simulator judges the offset within the allocation.
inline bool aligned16(const void* p) {
    return sim_memcheck() == SimMemcheck::off ? (reinterpret_cast<uintptr_t>(p) & 15u) == 0 : sim_gpu_alignment(p) >= 16;
}
#else
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
#endif

// A kernel may use its vector instantiation when every pointer is 16-byte aligned and
// every row (or leading dimension) spans whole vectors.
template <class... P>
inline bool all_aligned16(const P*... p) {
    return (aligned16(p) && ...);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks of a grid-stride launch over `work` items: enough to fill any GPU of this
// generation, never more than the work needs (the loop covers what a capped grid leaves).
// The simulator caps far lower, so that test-sized inputs already take a thread round the
// grid-stride loop more than once (the results do not depend on the grid size).
#if defined(PTD_CUDA_SIM)
constexpr int64_t k_max_grid_stride_blocks = 16;
#else
constexpr int64_t k_max_grid_stride_blocks = 65535;
#endif
inline unsigned grid_for(int64_t work, int threads) {
    const int64_t blocks = ceil_div(work, threads);
    return static_cast<unsigned>(blocks < 1 ? 1 : blocks > k_max_grid_stride_blocks ? k_max_grid_stride_blocks : blocks);
}

[[noreturn]] inline void contract_failure(const char* op, const char* what) {
    std::fprintf(stderr, "ptd-engine: error: cuda kernel %s: %s\n", op, what);
    std::abort();
}
#define PTD_KERNEL_REQUIRE(cond, op, what) \
    do { \
        if (!(cond)) ::ptd::cuda::PTD_CUDA_NS::kern::contract_failure(op, what); \
    } while (0)

inline bool is_float_type(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

// Calls f(T{}) with T the storage type of t (float, bf16, f16).
template <class F>
inline void dispatch_type(DType t, const char* op, F&& f) {
    switch (t) {
        case DType::f32: f(float{}); return;
        case DType::bf16: f(bf16{}); return;
        case DType::f16: f(f16{}); return;
        default: contract_failure(op, "dtype must be f32, bf16 or f16");
    }
}

}  // namespace ptd::cuda::PTD_CUDA_NS::kern
