// bias.cuh — the bias add of the row-parallel layers: the bias is added after the TP
// all-reduce, so it cannot ride in the GEMM's epilogue.
//
//   bias_add            y [rows, C] (t) += bias [C] (t), f32 sum rounded once
#pragma once

#include <algorithm>

#include "common.cuh"

namespace ptd::cuda::PTD_CUDA_NS::kern {

constexpr int k_bias_threads = 256;

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
        const unsigned blocks = (unsigned)std::min<int64_t>(ceil_div(items, k_bias_threads), 65535);
        if (vec) PTD_LAUNCH((bias_add_kernel<T, k_vec>), blocks, k_bias_threads, 0, stream, yt, bt, rows, C);
        else PTD_LAUNCH((bias_add_kernel<T, 1>), blocks, k_bias_threads, 0, stream, yt, bt, rows, C);
    });
}

}  // namespace ptd::cuda::PTD_CUDA_NS
