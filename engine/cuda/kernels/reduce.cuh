// reduce.cuh — the step's device reductions and scalars: Σx² of f32 gradients into a
// device double (one tensor, or a list of tensors in one launch), the loss sum, and the
// step scalars (norm, clip and gradient scale, found-inf) derived on the device — nothing
// returns to the host inside a step (backend.h: StepScalar).
//
// Σx² is a two-stage deterministic reduction, as a GPU does it without float atomics:
//   stage 1  a grid of at most k_sumsq_max_blocks blocks; block b owns one contiguous slice
//            of the elements (the slicing depends only on n, never on the device), each
//            thread sums its strided share in double, the block adds its threads in a
//            fixed tree → partials[b] (the planned workspace, k_sumsq_max_blocks doubles);
//   stage 2  one block adds the partials in a fixed order and adds that to acc[0].
// Same inputs, same bits, on every run and every GPU. The sums are in double, so the
// result differs from the CPU backend's (which sums fixed 64k chunks) only in the last
// bits of a double.
#pragma once

#include "common.cuh"

namespace ptd::cuda::PTD_CUDA_NS::kern {

constexpr int k_sumsq_threads = 256;        // a power of two (the block tree halves it)
constexpr int k_sumsq_max_blocks = 1024;    // = sum_squares_workspace_doubles()
constexpr int64_t k_sumsq_min_per_block = 8 * k_sumsq_threads;

// Blocks of stage 1 for n elements: a function of n only.
inline int64_t sumsq_blocks(int64_t n) {
    const int64_t b = (n + k_sumsq_min_per_block - 1) / k_sumsq_min_per_block;
    return b < 1 ? 1 : b > k_sumsq_max_blocks ? k_sumsq_max_blocks : b;
}

// Σ x[i]² over i = lo + threadIdx.x, lo + threadIdx.x + blockDim.x, … < hi, in double.
__device__ __forceinline__ double sumsq_strided(const float* x, int64_t lo, int64_t hi) {
    double acc = 0.0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) acc += (double)x[i] * (double)x[i];
    return acc;
}

// The block's sum of v (one value per thread) in a fixed tree; the result in thread 0.
// sh: k_sumsq_threads doubles of shared memory. Every thread of the block must call it.
__device__ __forceinline__ double block_sum_double(double v, double* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = k_sumsq_threads / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    return sh[0];
}

// Stage 1, one tensor: partials[b] = Σ x² over block b's slice of [0, n).
__global__ void sumsq_partials_kernel(double* partials, const float* x, int64_t n, int64_t per_block) {
    PTD_SHARED(double, sh, k_sumsq_threads);
    const int64_t lo = (int64_t)blockIdx.x * per_block;
    const int64_t hi = lo + per_block < n ? lo + per_block : n;
    const double s = block_sum_double(sumsq_strided(x, lo, hi), sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// Index of the entry that holds global element i (entries with n = 0 are skipped over):
// the last entry with start ≤ i, by binary search.
template <class E>
__device__ __forceinline__ int tensor_list_find(const E* list, int count, int64_t i) {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (list[mid].start <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Stage 1, a tensor list: the concatenation of the tensors is sliced as one buffer.
__global__ void sumsq_list_partials_kernel(double* partials, const SumSquaresTensor* list, int count, int64_t total,
                                           int64_t per_block) {
    PTD_SHARED(double, sh, k_sumsq_threads);
    const int64_t lo = (int64_t)blockIdx.x * per_block;
    const int64_t hi = lo + per_block < total ? lo + per_block : total;
    double acc = 0.0;
    if (lo < hi) {
        for (int k = tensor_list_find(list, count, lo); k < count && list[k].start < hi; k++) {
            const SumSquaresTensor e = list[k];
            const int64_t a = (lo > e.start ? lo : e.start) - e.start;
            const int64_t b = (hi < e.start + e.n ? hi : e.start + e.n) - e.start;
            acc += sumsq_strided(e.x, a, b);
        }
    }
    const double s = block_sum_double(acc, sh);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// Stage 2: acc[0] += Σ partials[0 .. count) in a fixed order (one block).
__global__ void sumsq_finish_kernel(double* acc, const double* partials, int count) {
    PTD_SHARED(double, sh, k_sumsq_threads);
    double v = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) v += partials[i];
    const double s = block_sum_double(v, sh);
    if (threadIdx.x == 0) acc[0] += s;
}

// acc[0] += Σ x[i] summed in double from 0 in index order (the CPU backend's order, so the
// loss sum is the same bits): the block stages k_sumsq_threads values at a time in shared
// memory (coalesced reads) and thread 0 adds them one by one.
__global__ void sum_into_kernel(double* acc, const float* x, int64_t n) {
    PTD_SHARED(float, stage, k_sumsq_threads);
    double s = 0.0;
    for (int64_t base = 0; base < n; base += k_sumsq_threads) {
        const int64_t i = base + threadIdx.x;
        if (i < n) stage[threadIdx.x] = x[i];
        __syncthreads();
        if (threadIdx.x == 0) {
            const int64_t m = n - base < k_sumsq_threads ? n - base : k_sumsq_threads;
            for (int64_t j = 0; j < m; j++) s += (double)stage[j];
        }
        __syncthreads();  // thread 0 has read the stage before anyone refills it
    }
    if (threadIdx.x == 0) acc[0] += s;
}

// Finite without <cmath> classification functions (the same spelling on host and device):
// x − x is 0 for every finite x, NaN for ±inf and NaN.
__device__ __forceinline__ bool finite_double(double x) { return x - x == 0.0; }

// The step scalars from s[loss sum] and s[grad squares] (already reduced over the world) and
// the loss scale the gradients carry: the unscaled norm, found-inf, the clip scale and
// AdamW's factor on g, each rounded to float where AdamW applies it (kernels.h).
__global__ void finish_step_scalars_kernel(double* s, double max_norm, double loss_scale) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const double norm = sqrt(s[k_step_scalar_grad_squares]) / loss_scale;
    s[k_step_scalar_loss_scale] = loss_scale;
    s[k_step_scalar_grad_norm] = norm;
    s[k_step_scalar_found_inf] = finite_double(norm) && finite_double(s[k_step_scalar_loss_sum]) ? 0.0 : 1.0;
    const float clip = (max_norm > 0 && norm > max_norm) ? (float)(max_norm / (norm + 1e-6)) : 1.0f;
    s[k_step_scalar_clip_scale] = clip;
    s[k_step_scalar_grad_scale] = (float)((double)clip / loss_scale);
}

}  // namespace ptd::cuda::PTD_CUDA_NS::kern

namespace ptd::cuda::PTD_CUDA_NS {

int64_t sum_squares_workspace_doubles() { return kern::k_sumsq_max_blocks; }

void sum_squares(double* acc, const float* x, int64_t n, double* workspace, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(n >= 0, "sum_squares", "n < 0");
    if (n == 0) return;
    const int64_t blocks = sumsq_blocks(n), per_block = ceil_div(n, blocks);
    PTD_LAUNCH(sumsq_partials_kernel, (unsigned)blocks, k_sumsq_threads, 0, stream, workspace, x, n, per_block);
    PTD_LAUNCH(sumsq_finish_kernel, 1, k_sumsq_threads, 0, stream, acc, (const double*)workspace, (int)blocks);
}

void sum_squares_list(double* acc, const SumSquaresTensor* list, int count, int64_t total, double* workspace,
                      StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(count >= 0 && total >= 0, "sum_squares_list", "negative count or total");
    if (count == 0 || total == 0) return;
    const int64_t blocks = sumsq_blocks(total), per_block = ceil_div(total, blocks);
    PTD_LAUNCH(sumsq_list_partials_kernel, (unsigned)blocks, k_sumsq_threads, 0, stream, workspace, list, count, total,
               per_block);
    PTD_LAUNCH(sumsq_finish_kernel, 1, k_sumsq_threads, 0, stream, acc, (const double*)workspace, (int)blocks);
}

void sum_into(double* acc, const float* x, int64_t n, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(n >= 0, "sum_into", "n < 0");
    if (n == 0) return;
    PTD_LAUNCH(sum_into_kernel, 1, k_sumsq_threads, 0, stream, acc, x, n);
}

void finish_step_scalars(double* s, double max_norm, double loss_scale, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(loss_scale > 0, "finish_step_scalars", "loss_scale must be > 0");
    PTD_LAUNCH(finish_step_scalars_kernel, 1, 1, 0, stream, s, max_norm, loss_scale);
}

}  // namespace ptd::cuda::PTD_CUDA_NS
