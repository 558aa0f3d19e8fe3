// dialect.cuh — the one header our CUDA kernels include. Kernels are written in plain CUDA
// spelling; under nvcc (__CUDACC__) every name here maps to CUDA itself, and compiled as host
// C++ with PTD_CUDA_SIM defined it maps to the CPU simulator of engine/cuda/sim, so the same
// kernel sources run in CI without a GPU (docs/engine.md, "The CUDA simulator").
//
// What a kernel may use (the contract of /work/wt/cuda-design.md):
//   __global__ __device__ __host__ __constant__ __forceinline__ __restrict__ __launch_bounds__(..)
//   __align__(n) (never a bare __shared__: use the macros below)
//   threadIdx blockIdx blockDim gridDim (.x/.y/.z) warpSize dim3
//   __syncthreads __syncwarp __shfl_sync __shfl_xor_sync __shfl_down_sync __shfl_up_sync
//   __ballot_sync __any_sync __all_sync (full mask)
//   atomicAdd (int, unsigned, unsigned long long, float, double) atomicMax (int, unsigned)
//   atomicMin (int, unsigned) atomicCAS (int, unsigned, unsigned long long) atomicExch
//   PTD_SHARED(type, name, count)   a static shared array of the block (name is a pointer:
//                                   never take sizeof(name))
//   PTD_DYNAMIC_SHARED(type, name)  the launch's dynamic shared memory
//   PTD_LAUNCH(kernel, grid, block, smem_bytes, stream, args...)   (a template kernel goes in
//                                   parentheses: PTD_LAUNCH((k<float, 4>), ...))
//   PTD_SET_MAX_DYNAMIC_SMEM(kernel, bytes)   the opt-in above 48 KiB, as cudaFuncSetAttribute
//   bf16 f16 to_f32(x) from_f32<T>(float) bf16_bits/f16_bits, bf16_from_bits/f16_from_bits
//   warp_reduce_sum/max, block_reduce_sum/max(v, smem32), grid_stride(n), Pack128<T>,
//   mma_16x8x16 (a warp's tensor-core multiply-accumulate, exact reference in the simulator),
//   load128/load128cs/store128/store128cs
//   math: expf logf tanhf sqrtf rsqrtf fmaxf fminf fabsf __expf __logf __fdividef __ldg, min/max
//   (int, unsigned, long long, float), __popc __ffs __clz, __float_as_uint and friends
// Everything of ours lives in namespace ptd::cuda::PTD_CUDA_NS (dev under nvcc, sim under
// the simulator), so both builds of a kernel can be linked into one binary.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__) && !defined(PTD_CUDA_SIM)
// ======================================= CUDA ========================================
#include <cstdio>
#include <cstdlib>
#include <utility>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "runtime.h"  // PTD_CUDA_NS = dev, StreamHandle = cudaStream_t

#define PTD_SHARED(type, name, count) __shared__ type name[(count)]
#define PTD_DYNAMIC_SHARED(type, name)                       \
    extern __shared__ __align__(16) unsigned char ptd_dynamic_smem_[]; \
    type* const name = reinterpret_cast<type*>(ptd_dynamic_smem_)

namespace ptd::cuda::dev {

using bf16 = __nv_bfloat16;
using f16 = __half;

__host__ __device__ __forceinline__ float to_f32(float x) { return x; }
__host__ __device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }
__host__ __device__ __forceinline__ float to_f32(f16 x) { return __half2float(x); }
template <class T>
__host__ __device__ __forceinline__ T from_f32(float x);
template <>
__host__ __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__host__ __device__ __forceinline__ bf16 from_f32<bf16>(float x) { return __float2bfloat16_rn(x); }
template <>
__host__ __device__ __forceinline__ f16 from_f32<f16>(float x) { return __float2half_rn(x); }
__host__ __device__ __forceinline__ uint16_t bf16_bits(bf16 x) { return __bfloat16_as_ushort(x); }
__host__ __device__ __forceinline__ uint16_t f16_bits(f16 x) { return __half_as_ushort(x); }
__host__ __device__ __forceinline__ bf16 bf16_from_bits(uint16_t b) { return __ushort_as_bfloat16(b); }
__host__ __device__ __forceinline__ f16 f16_from_bits(uint16_t b) { return __ushort_as_half(b); }

// 16 bytes moved as one 128-bit access (LDG.128 / STG.128).
template <class T>
struct alignas(16) Pack128 {
    static constexpr int size = 16 / sizeof(T);
    T v[size];
    __device__ __forceinline__ T& operator[](int i) { return v[i]; }
    __device__ __forceinline__ const T& operator[](int i) const { return v[i]; }
};
template <class T>
__device__ __forceinline__ Pack128<T> load128(const T* p) {
    const int4 bits = *reinterpret_cast<const int4*>(p);
    Pack128<T> r;
    memcpy(&r, &bits, 16);
    return r;
}
template <class T>
__device__ __forceinline__ Pack128<T> load128cs(const T* p) {  // streaming: read once
    const int4 bits = __ldcs(reinterpret_cast<const int4*>(p));
    Pack128<T> r;
    memcpy(&r, &bits, 16);
    return r;
}
template <class T>
__device__ __forceinline__ void store128(T* p, const Pack128<T>& x) {
    int4 bits;
    memcpy(&bits, &x, 16);
    *reinterpret_cast<int4*>(p) = bits;
}
template <class T>
__device__ __forceinline__ void store128cs(T* p, const Pack128<T>& x) {  // streaming store
    int4 bits;
    memcpy(&bits, &x, 16);
    __stcs(reinterpret_cast<int4*>(p), bits);
}

// Launches and turns a launch error into a message with the caller's file:line (llm.c style).
template <class... KArgs, class... Args>
inline void launch_checked(const char* name, const char* file, int line, void (*kernel)(KArgs...), dim3 grid,
                           dim3 block, size_t dynamic_smem, StreamHandle stream, Args&&... args) {
    kernel<<<grid, block, dynamic_smem, stream>>>(std::forward<Args>(args)...);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        std::fprintf(stderr, "%s:%d: launch of %s (grid %u,%u,%u block %u,%u,%u smem %zu): %s\n", file, line, name,
                     grid.x, grid.y, grid.z, block.x, block.y, block.z, dynamic_smem, cudaGetErrorString(err));
        std::abort();
    }
    if (const Status s = sync_check(name); !s.ok()) {  // PTD_CUDA_SYNC_CHECK=1 (runtime.h)
        std::fprintf(stderr, "%s:%d: launch of %s (grid %u,%u,%u block %u,%u,%u smem %zu): %s\n", file, line, name,
                     grid.x, grid.y, grid.z, block.x, block.y, block.z, dynamic_smem, s.message.c_str());
        std::abort();
    }
}
template <class... KArgs>
inline void set_max_dynamic_smem_checked(const char* name, const char* file, int line, void (*kernel)(KArgs...),
                                         size_t bytes) {
    const cudaError_t err =
        cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(bytes));
    if (err != cudaSuccess) {
        std::fprintf(stderr, "%s:%d: cudaFuncSetAttribute(%s, max dynamic smem %zu): %s\n", file, line, name, bytes,
                     cudaGetErrorString(err));
        std::abort();
    }
}

}  // namespace ptd::cuda::dev

#define PTD_LAUNCH(kernel, grid, block, smem_bytes, stream, ...)                                                \
    ::ptd::cuda::dev::launch_checked(#kernel, __FILE__, __LINE__, kernel, grid, block, smem_bytes, stream \
                                     __VA_OPT__(, ) __VA_ARGS__)
#define PTD_SET_MAX_DYNAMIC_SMEM(kernel, bytes) \
    ::ptd::cuda::dev::set_max_dynamic_smem_checked(#kernel, __FILE__, __LINE__, kernel, bytes)

#elif defined(PTD_CUDA_SIM)
// ===================================== simulator =====================================
#include "sim/sim.h"  // everything: qualifiers, indices, barriers, warp ops, atomics, types, launch

#else
#error "dialect.cuh: compile with nvcc, or define PTD_CUDA_SIM to build for the CUDA simulator"
#endif

// ============================ shared by both builds ==================================
#include <type_traits>
#if defined(__CUDACC__) && !defined(PTD_CUDA_SIM)
#define PTD_MMA_UNROLL _Pragma("unroll")
#else
#define PTD_MMA_UNROLL
#endif
// The few primitives of our kernels, written once in CUDA spelling.
namespace ptd::cuda::PTD_CUDA_NS {

// Sum / max over the 32 lanes of a warp; every lane gets the result (butterfly order, so
// the result is bit-identical on every lane and every run).
__device__ __forceinline__ float warp_reduce_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ __forceinline__ float warp_reduce_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Linear thread index within the block and the thread count of the block.
__device__ __forceinline__ int block_thread_rank() {
    return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}
__device__ __forceinline__ int block_thread_count() { return (int)(blockDim.x * blockDim.y * blockDim.z); }

// Sum / max over every thread of the block, broadcast to every thread. smem32 is a
// PTD_SHARED(float, ..., 32) owned by the caller; the block's thread count must be a multiple
// of 32 (the simulator poisons lanes that do not exist). Both barriers are needed: the first
// publishes the warp partials, the second lets the caller reuse smem32 right away.
__device__ __forceinline__ float block_reduce_sum(float v, float* smem32) {
    const int rank = block_thread_rank();
    const int lane = rank % 32, warp = rank / 32, warps = (block_thread_count() + 31) / 32;
    v = warp_reduce_sum(v);
    if (lane == 0) smem32[warp] = v;
    __syncthreads();
    v = lane < warps ? smem32[lane] : 0.0f;
    v = warp_reduce_sum(v);
    __syncthreads();
    return v;
}
__device__ __forceinline__ float block_reduce_max(float v, float* smem32) {
    const int rank = block_thread_rank();
    const int lane = rank % 32, warp = rank / 32, warps = (block_thread_count() + 31) / 32;
    v = warp_reduce_max(v);
    if (lane == 0) smem32[warp] = v;
    __syncthreads();
    v = lane < warps ? smem32[lane] : -INFINITY;
    v = warp_reduce_max(v);
    __syncthreads();
    return v;
}

// ---- warp-level matrix multiply-accumulate (tensor cores) ------------------------------
// D[16×8] (f32) += A[16×16] · B[16×8] with A, B in T = bf16 or f16: one MMA of the whole
// warp (every lane must call it, converged), PTX's mma.sync.m16n8k16.row.col with f32
// accumulators. The operands are read from memory the warp can see (shared memory, in our
// kernels) through strides, so one primitive serves Q·Kᵀ, P·V and their transposes:
// A(i, k) = A[i·a_rs + k·a_cs], B(k, n) = B[k·b_rs + n·b_cs]. The accumulator is PTX's
// per-lane fragment: lane 4g + q holds d = {D(g, 2q), D(g, 2q+1), D(g+8, 2q), D(g+8, 2q+1)}.
// On sm_80+ it is the tensor-core instruction (operand fragments packed two 16-bit values per
// register, the lower column in the low half); before sm_80 (no bf16 m16n8k16) and in the
// simulator it is the exact reference: each lane sums its four outputs' 16 products (exact in
// f32: a product of two 16-bit values fits a float) in k order. Tensor cores add the products
// in an undocumented order and precision, so the two agree to f32 rounding, not bit for bit.
template <class T>
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const T* A, int a_rs, int a_cs, const T* B, int b_rs,
                                            int b_cs) {
    const int lane = (int)(threadIdx.x % 32), g = lane / 4, q = lane % 4;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    auto bits = [](T x) -> uint32_t {
        if constexpr (sizeof(T) == 2 && std::is_same_v<T, bf16>) return (uint32_t)bf16_bits(x);
        else return (uint32_t)f16_bits(x);
    };
    auto pack = [&](const T* p, int stride) { return bits(p[0]) | (bits(p[stride]) << 16); };
    const uint32_t a0 = pack(A + g * a_rs + 2 * q * a_cs, a_cs), a1 = pack(A + (g + 8) * a_rs + 2 * q * a_cs, a_cs);
    const uint32_t a2 = pack(A + g * a_rs + (2 * q + 8) * a_cs, a_cs);
    const uint32_t a3 = pack(A + (g + 8) * a_rs + (2 * q + 8) * a_cs, a_cs);
    const uint32_t b0 = pack(B + 2 * q * b_rs + g * b_cs, b_rs), b1 = pack(B + (2 * q + 8) * b_rs + g * b_cs, b_rs);
    if constexpr (std::is_same_v<T, bf16>)
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __syncwarp();  // a warp-wide instruction: the simulator checks that every lane is here
PTD_MMA_UNROLL
    for (int i = 0; i < 4; i++) {
        const int row = g + 8 * (i >> 1), col = 2 * q + (i & 1);
        float acc = d[i];
        for (int k = 0; k < 16; k++) acc += to_f32(A[row * a_rs + k * a_cs]) * to_f32(B[k * b_rs + col * b_cs]);
        d[i] = acc;
    }
#endif
}

// for (int64_t i : grid_stride(n)) — i = global x index, stepping by the grid's x extent.
struct GridStride {
    struct Iter {
        int64_t i, step;
        __device__ __forceinline__ int64_t operator*() const { return i; }
        __device__ __forceinline__ Iter& operator++() {
            i += step;
            return *this;
        }
        __device__ __forceinline__ bool operator!=(int64_t end) const { return i < end; }
    };
    int64_t first, step, end_;
    __device__ __forceinline__ Iter begin() const { return Iter{first, step}; }
    __device__ __forceinline__ int64_t end() const { return end_; }
};
__device__ __forceinline__ GridStride grid_stride(int64_t n) {
    return GridStride{(int64_t)blockIdx.x * blockDim.x + threadIdx.x, (int64_t)gridDim.x * blockDim.x, n};
}

}  // namespace ptd::cuda::PTD_CUDA_NS
