// rope.cuh — rotary position embedding (rotate-half / NeoX & HF Llama: the pairs (i, i+D/2)
// of each head), applied in place to q or k, which are column blocks of the fused qkv rows
// (leading dimension ld). The angles come from a table built once at start-up:
//   table [2, positions, D/2] (f32): cos then sin of p·theta^(−2i/D), formed in double (p·freq
//   reaches thousands of radians, where f32 would lose the low bits before cos/sin) and
//   rounded once — the very values the CPU backend uses.
// Forward rotates (a, b) → (a·cos − b·sin, a·sin + b·cos); backward applies the inverse
// (sin negated), the transpose of the forward's linear map. One thread per (token row, head,
// 8 consecutive pair indices) with 128-bit accesses when D/2 % 8 == 0 and rows and pointers
// are 16-byte aligned, else one pair per thread.
#pragma once

#include <cmath>

#include "common.cuh"

namespace ptd::cuda::PTD_CUDA_NS::kern {

// table [2, positions, half]; one thread per (p, i) — cold (start-up only), so double math
// is fine here.
__global__ void rope_table_kernel(float* table, int64_t positions, int64_t D, double theta) {
    const int64_t half = D / 2, n = positions * half;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += stride) {
        const int64_t p = j / half, i = j % half;
        const double freq = pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
        const double ang = static_cast<double>(p) * freq;
        table[j] = static_cast<float>(cos(ang));
        table[n + j] = static_cast<float>(sin(ang));
    }
}

// x [B·T rows, ld] (T): head h of row bt at x + bt·ld + h·D, halves x1 = [0, D/2), x2 =
// [D/2, D). The row's position is pos0 + bt % T_seq. sign = +1 forward, −1 backward.
template <class T, int N>
__global__ void rope_kernel(T* x, int64_t ld, int64_t rows, int64_t T_seq, int64_t nh, int64_t D, int64_t pos0,
                            const float* table, int64_t positions, float sign) {
    const int64_t half = D / 2, groups = half / N, n = rows * nh * groups;
    const float* cos_t = table;
    const float* sin_t = table + positions * half;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += stride) {
        const int64_t i = (j % groups) * N, h = (j / groups) % nh, bt = j / (groups * nh);
        const int64_t p = pos0 + bt % T_seq;
        T* x1 = x + bt * ld + h * D + i;
        T* x2 = x1 + half;
        float a[N], b[N], c[N], s[N];
        load_n<T, N>(x1, a);
        load_n<T, N>(x2, b);
        load_n<float, N>(cos_t + p * half + i, c);
        load_n<float, N>(sin_t + p * half + i, s);
PTD_UNROLL
        for (int k = 0; k < N; k++) {
            const float sk = sign * s[k], ak = a[k], bk = b[k];
            a[k] = ak * c[k] - bk * sk;
            b[k] = ak * sk + bk * c[k];
        }
        store_n<T, N>(x1, a);
        store_n<T, N>(x2, b);
    }
}

inline void launch_rope(const char* op, DType t, void* x, int64_t ld, int64_t B, int64_t T_seq, int64_t nh, int64_t D,
                        int64_t pos0, const float* table, int64_t positions, float sign, StreamHandle stream) {
    PTD_KERNEL_REQUIRE(B >= 0 && T_seq >= 0 && nh >= 0 && D > 0 && D % 2 == 0 && pos0 >= 0, op,
                       "bad shape: needs B, T, nh, pos0 >= 0 and D even, > 0");
    PTD_KERNEL_REQUIRE(ld >= nh * D, op, "ld < nh * D");
    PTD_KERNEL_REQUIRE(pos0 + T_seq <= positions, op, "pos0 + T exceeds the positions of the table");
    const int64_t rows = B * T_seq, half = D / 2;
    if (rows == 0 || nh == 0) return;
    dispatch_type(t, op, [&](auto tag) {
        using TT = decltype(tag);
        auto* xt = static_cast<TT*>(x);
        // Vector path: every x1, x2 and table row starts on a 16-byte boundary.
        const bool vec = half % k_vec == 0 && (ld * static_cast<int64_t>(sizeof(TT))) % 16 == 0 &&
                         all_aligned16(x, table) && (positions * half) % 4 == 0;
        if (vec) {
            auto kernel = rope_kernel<TT, k_vec>;
            PTD_LAUNCH(kernel, grid_for(rows * nh * (half / k_vec), 256), 256, 0, stream, xt, ld, rows, T_seq, nh, D,
                       pos0, table, positions, sign);
        } else {
            auto kernel = rope_kernel<TT, 1>;
            PTD_LAUNCH(kernel, grid_for(rows * nh * half, 256), 256, 0, stream, xt, ld, rows, T_seq, nh, D, pos0,
                       table, positions, sign);
        }
    });
}

}  // namespace ptd::cuda::PTD_CUDA_NS::kern

namespace ptd::cuda::PTD_CUDA_NS {

void rope_table(float* table, int64_t positions, int64_t D, float theta, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(positions >= 0 && D > 0 && D % 2 == 0, "rope_table", "bad shape: positions >= 0, D even");
    PTD_KERNEL_REQUIRE(theta > 0.0f, "rope_table", "theta <= 0");
    const int64_t n = positions * (D / 2);
    if (n == 0) return;
    PTD_LAUNCH(rope_table_kernel, grid_for(n, 256), 256, 0, stream, table, positions, D, static_cast<double>(theta));
}

void rope_forward(DType t, void* x, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                  const float* table, int64_t positions, StreamHandle stream) {
    kern::launch_rope("rope_forward", t, x, ld, B, T, nh, D, pos0, table, positions, 1.0f, stream);
}

void rope_backward(DType t, void* dx, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                   const float* table, int64_t positions, StreamHandle stream) {
    kern::launch_rope("rope_backward", t, dx, ld, B, T, nh, D, pos0, table, positions, -1.0f, stream);
}

}  // namespace ptd::cuda::PTD_CUDA_NS
