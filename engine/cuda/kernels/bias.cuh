// bias.cuh — the bias add of the row-parallel layers: the bias is added after the TP
// all-reduce, so it cannot ride in the GEMM's epilogue.
//
//   bias_add            y [rows, C] (t) += bias [C] (t), f32 sum rounded once
//   bias_residual_add   out (t) = (x + bias, rounded to t) + residual, rounded: a TP layer's
//                       output after its reduction in one pass — the bits of copy, bias_add
//                       and add (bias may be null)
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

// out [rows, C] = round(round(x + bias) + residual) (T). N = k_vec or 1; kBias: bias given.
template <class T, int N, bool kBias>
__global__ void bias_residual_add_kernel(T* out, const T* x, const T* bias, const T* residual, int64_t rows, int64_t C) {
    const int64_t per_row = C / N;
    for (int64_t i : grid_stride(rows * per_row)) {
        const int64_t r = i / per_row, c = (i % per_row) * N;
        float a[N], res[N];
        load_n<T, N>(x + r * C + c, a);
        if constexpr (kBias) {
            float b[N];
            load_n<T, N>(bias + c, b);
PTD_UNROLL
            for (int k = 0; k < N; k++) a[k] = round_to<T>(a[k] + b[k]);
        }
        load_n<T, N>(residual + r * C + c, res);
PTD_UNROLL
        for (int k = 0; k < N; k++) a[k] += res[k];
        store_n<T, N>(out + r * C + c, a);
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

void bias_residual_add(void* out, const void* x, const void* bias, const void* residual, DType t, int64_t rows,
                       int64_t C, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(rows >= 0 && C >= 0, "bias_residual_add", "negative shape");
    if (rows == 0 || C == 0) return;
    dispatch_type(t, "bias_residual_add", [&](auto tag) {
        using T = decltype(tag);
        T* o = static_cast<T*>(out);
        const T* xt = static_cast<const T*>(x);
        const T* bt = static_cast<const T*>(bias);
        const T* rt = static_cast<const T*>(residual);
        const bool vec = C % k_vec == 0 && all_aligned16(o, xt, rt) && (!bt || aligned16(bt));
        const int64_t items = rows * (vec ? C / k_vec : C);
        const unsigned blocks = (unsigned)std::min<int64_t>(ceil_div(items, k_bias_threads), 65535);
        auto run = [&](auto kernel) { PTD_LAUNCH(kernel, blocks, k_bias_threads, 0, stream, o, xt, bt, rt, rows, C); };
        if (vec) {
            if (bt) run(bias_residual_add_kernel<T, k_vec, true>);
            else run(bias_residual_add_kernel<T, k_vec, false>);
        } else {
            if (bt) run(bias_residual_add_kernel<T, 1, true>);
            else run(bias_residual_add_kernel<T, 1, false>);
        }
    });
}

}  // namespace ptd::cuda::PTD_CUDA_NS
