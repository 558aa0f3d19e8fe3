// scatter.cuh — the two ops the CUDA backend needs beyond the per-family kernels: the bias
// add of the row-parallel layers (the bias is added after the TP all-reduce, so it cannot
// ride in the GEMM's epilogue), and the embedding backward computed from the device's
// token ids alone — deterministic, without float atomics and without a host-side plan.
//
//   bias_add            y [rows, C] (t) += bias [C] (t), f32 sum rounded once
//   embedding backward  dwte [Vl, C] (f32) += dout [rows, C] (t) row r at tok[r] − v0, for
//                       every row whose token is in [v0, v0 + Vl), added in increasing row
//                       order per token: d = ((d + x_r0) + x_r1) + … — the CPU backend's
//                       order, so the same bits.
//
// The backward runs one block per (row r, block of columns). The block first decides
// whether r is the first row holding its token (a block-wide scan of tok[0 .. r)); only
// such "leader" blocks work: they walk the rows r .. rows−1 a tile at a time, staging the
// tile's token matches in shared memory, and each thread adds the matching rows of its
// columns in order. The work is O(rows² / threads) token compares per column block —
// about 1 ms for rows = 8192 on an H100 — and needs no workspace, so nothing has to be
// planned or uploaded per micro-batch.
#pragma once

#include <algorithm>

#include "common.cuh"

namespace ptd::cuda::PTD_CUDA_NS::kern {

constexpr int k_scatter_threads = 256;

// y [rows, C] (T) += bias [C] (T). N = k_vec (C % 8 == 0, aligned) or 1.
template <class T, int N>
__global__ void bias_add_kernel(T* y, const T* bias, int64_t rows, int64_t C) {
    const int64_t per_row = C / N;
    for (int64_t i : grid_stride(rows * per_row)) {
        const int64_t r = i / per_row, c = (i % per_row) * N;
        float x[N], b[N];
        load_n<T, N>(y + r * C + c, x);
        load_n<T, N>(bias + c, b);
PTD_UNROLL
        for (int k = 0; k < N; k++) x[k] += b[k];
        store_n<T, N>(y + r * C + c, x);
    }
}

// Grid: x = row r, y = block of k_scatter_threads·N columns. Block size k_scatter_threads.
template <class T, int N>
__global__ void embedding_backward_scan_kernel(float* dwte, const T* dout, const int32_t* tokens, int64_t v0,
                                               int64_t Vl, int64_t rows, int64_t C) {
    PTD_SHARED(int, seen_before, 1);
    PTD_SHARED(int, match, k_scatter_threads);
    const int64_t r = blockIdx.x;
    const int tid = threadIdx.x;
    const int32_t tok = tokens[r];
    const int64_t row_in_shard = (int64_t)tok - v0;
    if (row_in_shard < 0 || row_in_shard >= Vl) return;  // uniform across the block
    if (tid == 0) seen_before[0] = 0;
    __syncthreads();
    int found = 0;
    for (int64_t i = tid; i < r; i += blockDim.x) found |= tokens[i] == tok;
    if (found) seen_before[0] = 1;  // every writer stores the same value
    __syncthreads();
    if (seen_before[0]) return;  // uniform: r is not the first row of its token

    const int64_t c = ((int64_t)blockIdx.y * blockDim.x + tid) * N;
    const bool active = c < C;
    float acc[N] = {};
    if (active) load_n<float, N>(dwte + row_in_shard * C + c, acc);
    for (int64_t base = r; base < rows; base += blockDim.x) {
        const int64_t i = base + tid;
        match[tid] = i < rows && tokens[i] == tok;
        __syncthreads();
        const int64_t tile = rows - base < (int64_t)blockDim.x ? rows - base : (int64_t)blockDim.x;
        if (active)
            for (int64_t j = 0; j < tile; j++) {
                if (!match[j]) continue;
                float x[N];
                load_n<T, N>(dout + (base + j) * C + c, x);
PTD_UNROLL
                for (int k = 0; k < N; k++) acc[k] += x[k];
            }
        __syncthreads();  // the next tile overwrites match[]
    }
    if (active) store_n<float, N>(dwte + row_in_shard * C + c, acc);
}

}  // namespace ptd::cuda::PTD_CUDA_NS::kern

namespace ptd::cuda::PTD_CUDA_NS {

void bias_add(void* y, const void* bias, DType t, int64_t rows, int64_t C, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(rows >= 0 && C >= 0, "bias_add", "negative shape");
    if (rows == 0 || C == 0) return;
    dispatch_type(t, "bias_add", [&](auto tag) {
        using T = decltype(tag);
        T* yt = static_cast<T*>(y);
        const T* bt = static_cast<const T*>(bias);
        const bool vec = C % k_vec == 0 && all_aligned16(yt, bt);
        const int64_t items = rows * (vec ? C / k_vec : C);
        const unsigned blocks = (unsigned)std::min<int64_t>(ceil_div(items, k_scatter_threads), 65535);
        if (vec) PTD_LAUNCH((bias_add_kernel<T, k_vec>), blocks, k_scatter_threads, 0, stream, yt, bt, rows, C);
        else PTD_LAUNCH((bias_add_kernel<T, 1>), blocks, k_scatter_threads, 0, stream, yt, bt, rows, C);
    });
}

void embedding_backward_scan(DType t, float* dwte, const void* dout, const int32_t* tokens, int64_t v0, int64_t Vl,
                             int64_t rows, int64_t C, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(rows >= 0 && C >= 0 && Vl >= 0, "embedding_backward_scan", "negative shape");
    PTD_KERNEL_REQUIRE(rows < (int64_t)1 << 31, "embedding_backward_scan", "rows ≥ 2^31");
    if (rows == 0 || C == 0 || Vl == 0) return;
    dispatch_type(t, "embedding_backward_scan", [&](auto tag) {
        using T = decltype(tag);
        const T* d = static_cast<const T*>(dout);
        const bool vec = C % k_vec == 0 && all_aligned16(dwte, d);
        const unsigned cblocks = (unsigned)ceil_div(vec ? C / k_vec : C, k_scatter_threads);
        const dim3 grid((unsigned)rows, cblocks);
        if (vec)
            PTD_LAUNCH((embedding_backward_scan_kernel<T, k_vec>), grid, k_scatter_threads, 0, stream, dwte, d, tokens,
                       v0, Vl, rows, C);
        else
            PTD_LAUNCH((embedding_backward_scan_kernel<T, 1>), grid, k_scatter_threads, 0, stream, dwte, d, tokens, v0,
                       Vl, rows, C);
    });
}

}  // namespace ptd::cuda::PTD_CUDA_NS
