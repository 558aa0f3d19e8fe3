// cuda_sim_kernels.cuh — kernels written in the dialect (engine/cuda/dialect.cuh) that test the
// simulator itself: test_cuda_sim.cpp runs them under the simulator, test_cuda_gpu_kernels.cu
// compiles the same source with nvcc for the `gpu` test. The "mutant" kernels are the correct
// ones with one barrier removed (kSync = false): the simulator must make them fail.
#pragma once

#include "dialect.cuh"

namespace ptd::cuda::PTD_CUDA_NS::test_kernels {

// Shared-memory tree reduction of one block's 256 elements. kSync = false is the mutant
// without its barriers.
template <bool kSync>
__global__ void tree_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
    PTD_SHARED(float, buf, 256);
    const int t = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + t;
    buf[t] = i < n ? x[i] : 0.0f;
    if constexpr (kSync) __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) buf[t] += buf[t + s];
        if constexpr (kSync) __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = buf[0];
}

// Row mean and variance with two block reductions through the same smem32: the second
// reduction overwrites smem32 while a slow thread may still read the first one's partials,
// so the trailing barrier of the reduction is needed. kSync = false drops exactly that one.
template <bool kSync>
__device__ float block_sum_local(float v, float* smem32) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_reduce_sum(v);
    if (lane == 0) smem32[warp] = v;
    __syncthreads();
    v = lane < warps ? smem32[lane] : 0.0f;
    v = warp_reduce_sum(v);
    if constexpr (kSync) __syncthreads();
    return v;
}
template <bool kSync>
__global__ void row_mean_var(const float* __restrict__ x, float* __restrict__ mean, float* __restrict__ var, int cols) {
    PTD_SHARED(float, smem32, 32);
    const float* row = x + (int64_t)blockIdx.x * cols;
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
    const float m = block_sum_local<kSync>(s, smem32) / cols;
    float q = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) q += (row[c] - m) * (row[c] - m);
    const float v = block_sum_local<kSync>(q, smem32) / cols;
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = m;
        var[blockIdx.x] = v;
    }
}

// The dialect's own block_reduce_sum / block_reduce_max, one row per block.
__global__ void row_sum_max(const float* __restrict__ x, float* __restrict__ sum, float* __restrict__ max, int cols) {
    PTD_SHARED(float, smem32, 32);
    const float* row = x + (int64_t)blockIdx.x * cols;
    float s = 0.0f, m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        s += row[c];
        m = fmaxf(m, row[c]);
    }
    s = block_reduce_sum(s, smem32);
    m = block_reduce_max(m, smem32);
    if (threadIdx.x == 0) {
        sum[blockIdx.x] = s;
        max[blockIdx.x] = m;
    }
}

// Only the first `written` elements of the shared array are written: the rest must read
// as poison (NaN) under the simulator.
__global__ void read_shared(float* __restrict__ out, int written) {
    PTD_SHARED(float, buf, 64);
    if ((int)threadIdx.x < written) buf[threadIdx.x] = 1.0f + threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = buf[threadIdx.x];
}

// Every warp op, one output slot per op per thread (8 ints per thread).
__global__ void warp_ops(const int* __restrict__ in, int* __restrict__ out) {
    const int t = threadIdx.x;
    const int v = in[t];
    int* o = out + 8 * t;
    o[0] = __shfl_xor_sync(0xffffffffu, v, 5);
    o[1] = __shfl_down_sync(0xffffffffu, v, 3);
    o[2] = __shfl_up_sync(0xffffffffu, v, 2);
    o[3] = __shfl_sync(0xffffffffu, v, 7);
    o[4] = __shfl_sync(0xffffffffu, v, 3, 16);  // lane 3 of each 16-lane segment
    o[5] = (int)__ballot_sync(0xffffffffu, v % 3 == 0);
    o[6] = __any_sync(0xffffffffu, v == 40);
    o[7] = __all_sync(0xffffffffu, v >= 0);
}

// Each warp reverses its 32 values through shared memory; only __syncwarp orders the write
// of one lane before the read of another (kSync = false is the mutant without it).
template <bool kSync>
__global__ void warp_reverse(const int* __restrict__ in, int* __restrict__ out) {
    PTD_SHARED(int, buf, 1024);
    const int t = threadIdx.x, lane = t % 32, base = t - lane;
    buf[t] = in[t];
    if constexpr (kSync) __syncwarp();
    out[t] = max(min(buf[base + 31 - lane], 1000000), -1000000);
}

// Float shuffles and the dialect's warp reductions.
__global__ void warp_reduce(const float* __restrict__ in, float* __restrict__ sum, float* __restrict__ max,
                            float* __restrict__ from_lane_31) {
    const float v = in[threadIdx.x];
    sum[threadIdx.x] = warp_reduce_sum(v);
    max[threadIdx.x] = warp_reduce_max(v);
    from_lane_31[threadIdx.x] = __shfl_sync(0xffffffffu, v, 31);
}

// Atomics: an int histogram, the float sum of the inputs, an int max, and a float sum
// built from atomicCAS.
__global__ void atomics(const int* __restrict__ in, int n, int* __restrict__ hist, float* __restrict__ fsum,
                        int* __restrict__ imax, unsigned* __restrict__ cas_sum_bits, unsigned* __restrict__ count) {
    for (int64_t i : grid_stride(n)) {
        const int v = in[i];
        atomicAdd(&hist[v % 16], 1);
        atomicAdd(fsum, (float)v);
        atomicMax(imax, v);
        atomicAdd(count, 1u);
        unsigned old = *cas_sum_bits, assumed;
        do {
            assumed = old;
            old = atomicCAS(cas_sum_bits, assumed, __float_as_uint(__uint_as_float(assumed) + 1.0f));
        } while (old != assumed);
    }
}

// Dynamic shared memory: each block reverses its slice of x through the launch's buffer.
__global__ void reverse_dynamic(const float* __restrict__ x, float* __restrict__ y) {
    PTD_DYNAMIC_SHARED(float, buf);
    const int t = threadIdx.x, n = blockDim.x;
    const int64_t base = (int64_t)blockIdx.x * n;
    buf[t] = x[base + t];
    __syncthreads();
    y[base + t] = buf[n - 1 - t];
}

// 128-bit vector copy with a scalar tail, in 16-bit storage, scaling by 2 through f32.
template <class T>
__global__ void scale2_vec(const T* __restrict__ x, T* __restrict__ y, int64_t n) {
    constexpr int kVec = Pack128<T>::size;
    const int64_t vec_n = n / kVec;
    for (int64_t v : grid_stride(vec_n)) {
        Pack128<T> p = load128(x + v * kVec);
        for (int j = 0; j < kVec; ++j) p[j] = from_f32<T>(2.0f * to_f32(p[j]));
        store128(y + v * kVec, p);
    }
    for (int64_t i : grid_stride(n - vec_n * kVec)) {
        const int64_t e = vec_n * kVec + i;
        y[e] = from_f32<T>(2.0f * to_f32(x[e]));
    }
}

// Each thread takes a ticket on arrival: the order the threads of a block ran in.
__global__ void arrival_order(unsigned* __restrict__ counter, unsigned* __restrict__ ticket) {
    ticket[threadIdx.x] = atomicAdd(counter, 1u);
}

}  // namespace ptd::cuda::PTD_CUDA_NS::test_kernels
