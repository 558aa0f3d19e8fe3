// norms.cuh — LayerNorm and RMSNorm, forward (plain, and fused with the residual add that
// precedes every norm of a pre-norm transformer) and backward; and the deterministic
// reduction over rows that their weight gradients share with bias_grad.
//
// Forward: one block per row of C, threads striding the row by 8-element vectors (scalar
// when C % 8 != 0 or a pointer is unaligned). Pass 1 sums x (LayerNorm) or x² (RMSNorm),
// pass 2 (LayerNorm) sums (x − mean)² — two passes like the CPU backend, not E[x²] − mean²,
// which cancels when |mean| ≫ std — pass 3 writes out. The row is re-read from global
// memory (L1/L2-resident for the C of a transformer) rather than held in shared memory.
// The fused form adds the residual in pass 1, stores the sum rounded to t, and normalises
// that rounded value, so it equals add + norm bit for bit.
//
// Backward: dx per row in the same block-per-row shape (two block sums: Σg, Σg·n). dw, db
// need a sum over rows per column; without float atomics that is two kernels:
//   column_partial_kernel  grid (column tiles, row chunks), block (32 column lanes × 8 row
//                          lanes): each thread sums its rows of the chunk in order, the 8
//                          row lanes are added in order through shared memory, and the
//                          chunk's partial sum goes to workspace [outputs, chunks, C];
//   column_finish_kernel   per column, the chunks in index order, then += into the f32
//                          gradient.
// The chunking depends only on rows, so the bits do not depend on the GPU or the run.
#pragma once

#include "common.cuh"

namespace ptd::cuda::PTD_CUDA_NS::kern {

constexpr int k_norm_max_threads = 512;
constexpr int k_col_lanes = 32;      // columns (or column vectors) of a column_partial block
constexpr int k_row_lanes = 8;       // rows summed side by side in a column_partial block
constexpr int64_t k_chunk_rows_min = 32;
constexpr int64_t k_max_chunks = 128;

enum ColumnKind : int {
    k_bias_grad = 0,       // out0 = Σ dy
    k_layernorm_grad = 1,  // out0 = Σ dout·(x − mean)·rstd (dw), out1 = Σ dout (db)
    k_rmsnorm_grad = 2,    // out0 = Σ dout·x·rstd (dw)
};

// Threads of a block-per-row kernel: the row's vectors spread over whole warps.
inline int row_threads(int64_t C, int n) {
    const int64_t t = ceil_div(ceil_div(C, n), 32) * 32;
    return static_cast<int>(t < 32 ? 32 : t > k_norm_max_threads ? k_norm_max_threads : t);
}

inline int64_t row_chunks(int64_t rows) {
    const int64_t c = ceil_div(rows, k_chunk_rows_min);
    return c < 1 ? 1 : c > k_max_chunks ? k_max_chunks : c;
}

// out, res_out, x, residual [rows, C] (T); w, b [C] (T); mean, rstd [rows] (f32).
// One block per row; N = 8 (vector) or 1 (scalar) elements per access.
template <class T, int N, bool kLayer, bool kResidual>
__global__ void norm_forward_kernel(T* out, T* res_out, float* mean, float* rstd, const T* x, const T* residual,
                                    const T* w, const T* b, int64_t C, float eps) {
    PTD_SHARED(float, red_a, 32);
    PTD_SHARED(float, red_b, 32);
    const int64_t row = blockIdx.x;
    const T* xr = x + row * C;
    const T* src = xr;  // what is normalised: x, or the stored x + residual
    float s = 0.0f;
    if constexpr (kResidual) {
        const T* rr = residual + row * C;
        T* sr = res_out + row * C;
        src = sr;
        for (int64_t c = static_cast<int64_t>(threadIdx.x) * N; c < C; c += static_cast<int64_t>(blockDim.x) * N) {
            float v[N], u[N];
            load_n<T, N>(xr + c, v);
            load_n<T, N>(rr + c, u);
PTD_UNROLL
            for (int k = 0; k < N; k++) {
                v[k] = round_to<T>(v[k] + u[k]);
                s += kLayer ? v[k] : v[k] * v[k];
            }
            store_n<T, N>(sr + c, v);
        }
    } else {
        for (int64_t c = static_cast<int64_t>(threadIdx.x) * N; c < C; c += static_cast<int64_t>(blockDim.x) * N) {
            float v[N];
            load_n<T, N>(xr + c, v);
PTD_UNROLL
            for (int k = 0; k < N; k++) s += kLayer ? v[k] : v[k] * v[k];
        }
    }
    const float inv_c = 1.0f / static_cast<float>(C);
    s = block_reduce_sum(s, red_a);
    float m = 0.0f, rs;
    if constexpr (kLayer) {
        m = s * inv_c;
        float q = 0.0f;
        for (int64_t c = static_cast<int64_t>(threadIdx.x) * N; c < C; c += static_cast<int64_t>(blockDim.x) * N) {
            float v[N];
            load_n<T, N>(src + c, v);
PTD_UNROLL
            for (int k = 0; k < N; k++) q += (v[k] - m) * (v[k] - m);
        }
        q = block_reduce_sum(q, red_b);
        rs = 1.0f / sqrtf(q * inv_c + eps);
    } else {
        rs = 1.0f / sqrtf(s * inv_c + eps);
    }
    T* outr = out + row * C;
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * N; c < C; c += static_cast<int64_t>(blockDim.x) * N) {
        float v[N], wv[N], o[N];
        load_n<T, N>(src + c, v);
        load_n<T, N>(w + c, wv);
        if constexpr (kLayer) {
            float bv[N];
            load_n<T, N>(b + c, bv);
PTD_UNROLL
            for (int k = 0; k < N; k++) o[k] = (v[k] - m) * rs * wv[k] + bv[k];
        } else {
PTD_UNROLL
            for (int k = 0; k < N; k++) o[k] = v[k] * rs * wv[k];
        }
        store_n<T, N>(outr + c, o);
    }
    if (threadIdx.x == 0) {
        if constexpr (kLayer) mean[row] = m;
        rstd[row] = rs;
    }
}

// With n = (x − mean)·rstd (mean = 0 for RMSNorm) and g = dout·w:
//   dx = rstd·(g − mean(g) − n·mean(g·n))   (RMSNorm: no mean(g) term)
// dx, dout, x [rows, C] (T); w [C] (T); mean, rstd [rows]. One block per row.
template <class T, int N, bool kLayer, bool kAccumulate>
__global__ void norm_backward_dx_kernel(T* dx, const T* dout, const T* x, const float* mean, const float* rstd,
                                        const T* w, int64_t C) {
    PTD_SHARED(float, red_a, 32);
    PTD_SHARED(float, red_b, 32);
    const int64_t row = blockIdx.x;
    const T* xr = x + row * C;
    const T* dr = dout + row * C;
    T* dxr = dx + row * C;
    const float m = kLayer ? mean[row] : 0.0f, rs = rstd[row];
    float sg = 0.0f, sgn = 0.0f;
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * N; c < C; c += static_cast<int64_t>(blockDim.x) * N) {
        float xv[N], dv[N], wv[N];
        load_n<T, N>(xr + c, xv);
        load_n<T, N>(dr + c, dv);
        load_n<T, N>(w + c, wv);
PTD_UNROLL
        for (int k = 0; k < N; k++) {
            const float g = dv[k] * wv[k];
            sg += g;
            sgn += g * ((xv[k] - m) * rs);
        }
    }
    const float inv_c = 1.0f / static_cast<float>(C);
    const float mg = kLayer ? block_reduce_sum(sg, red_a) * inv_c : 0.0f;
    const float mgn = block_reduce_sum(sgn, red_b) * inv_c;
    for (int64_t c = static_cast<int64_t>(threadIdx.x) * N; c < C; c += static_cast<int64_t>(blockDim.x) * N) {
        float xv[N], dv[N], wv[N], o[N];
        load_n<T, N>(xr + c, xv);
        load_n<T, N>(dr + c, dv);
        load_n<T, N>(w + c, wv);
        if constexpr (kAccumulate) load_n<T, N>(dxr + c, o);
PTD_UNROLL
        for (int k = 0; k < N; k++) {
            const float n = (xv[k] - m) * rs;
            const float d = (dv[k] * wv[k] - mg - n * mgn) * rs;
            o[k] = kAccumulate ? o[k] + d : d;
        }
        store_n<T, N>(dxr + c, o);
    }
}

// Partial column sums of one chunk of rows (see the top of this file). dout, x [rows, C]
// (T); mean, rstd [rows]; ws [outputs, chunks, C] (f32). Block (k_col_lanes, k_row_lanes);
// grid (column tiles of k_col_lanes·N columns, chunks).
template <class T, int N, int kKind>
__global__ void column_partial_kernel(float* ws, const T* dout, const T* x, const float* mean, const float* rstd,
                                     int64_t rows, int64_t C, int64_t chunk_rows) {
    constexpr int kOut = kKind == k_layernorm_grad ? 2 : 1;
    constexpr int kTile = k_col_lanes * N;
    PTD_SHARED(float, part, kOut * k_row_lanes * kTile);
    const int64_t chunks = gridDim.y, chunk = blockIdx.y;
    const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * k_col_lanes + threadIdx.x) * N;
    const int64_t r0 = chunk * chunk_rows;
    const int64_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
    float acc[kOut][N];
PTD_UNROLL
    for (int o = 0; o < kOut; o++)
PTD_UNROLL
        for (int k = 0; k < N; k++) acc[o][k] = 0.0f;
    if (c0 < C) {
        for (int64_t r = r0 + threadIdx.y; r < r1; r += k_row_lanes) {
            float dv[N];
            load_n<T, N>(dout + r * C + c0, dv);
            if constexpr (kKind == k_bias_grad) {
PTD_UNROLL
                for (int k = 0; k < N; k++) acc[0][k] += dv[k];
            } else {
                float xv[N];
                load_n<T, N>(x + r * C + c0, xv);
                const float m = kKind == k_layernorm_grad ? mean[r] : 0.0f, rs = rstd[r];
PTD_UNROLL
                for (int k = 0; k < N; k++) {
                    acc[0][k] += dv[k] * ((xv[k] - m) * rs);
                    if constexpr (kOut == 2) acc[kOut - 1][k] += dv[k];
                }
            }
        }
    }
PTD_UNROLL
    for (int o = 0; o < kOut; o++)
PTD_UNROLL
        for (int k = 0; k < N; k++) part[(o * k_row_lanes + threadIdx.y) * kTile + threadIdx.x * N + k] = acc[o][k];
    __syncthreads();  // every row lane's sums are in `part` before lane 0 adds them
    if (threadIdx.y == 0 && c0 < C) {
PTD_UNROLL
        for (int o = 0; o < kOut; o++)
PTD_UNROLL
            for (int k = 0; k < N; k++) {
                float s = 0.0f;
                for (int y = 0; y < k_row_lanes; y++) s += part[(o * k_row_lanes + y) * kTile + threadIdx.x * N + k];
                ws[(o * chunks + chunk) * C + c0 + k] = s;
            }
    }
}

// dst0[c] (and dst1[c]) += Σ_k ws[o, k, c] over the chunks in index order. ws as above.
template <int kOut>
__global__ void column_finish_kernel(float* dst0, float* dst1, const float* ws, int64_t chunks, int64_t C) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < C; c += stride) {
PTD_UNROLL
        for (int o = 0; o < kOut; o++) {
            float s = 0.0f;
            for (int64_t k = 0; k < chunks; k++) s += ws[(o * chunks + k) * C + c];
            float* dst = o == 0 ? dst0 : dst1;
            dst[c] += s;
        }
    }
}

// Both kernels of a reduction over rows into dst0 (and dst1): += the column sums.
template <class T, int kKind>
void launch_column_reduce(float* dst0, float* dst1, const T* dout, const T* x, const float* mean, const float* rstd,
                          int64_t rows, int64_t C, float* ws, StreamHandle stream) {
    constexpr int kOut = kKind == k_layernorm_grad ? 2 : 1;
    const int64_t chunks = row_chunks(rows), chunk_rows = ceil_div(rows, chunks);
    const bool vec = C % k_vec == 0 && all_aligned16(dout, x);
    const dim3 block(k_col_lanes, k_row_lanes);
    if (vec) {
        const dim3 grid(static_cast<unsigned>(ceil_div(C, k_col_lanes * k_vec)), static_cast<unsigned>(chunks));
        auto kernel = column_partial_kernel<T, k_vec, kKind>;
        PTD_LAUNCH(kernel, grid, block, 0, stream, ws, dout, x, mean, rstd, rows, C, chunk_rows);
    } else {
        const dim3 grid(static_cast<unsigned>(ceil_div(C, k_col_lanes)), static_cast<unsigned>(chunks));
        auto kernel = column_partial_kernel<T, 1, kKind>;
        PTD_LAUNCH(kernel, grid, block, 0, stream, ws, dout, x, mean, rstd, rows, C, chunk_rows);
    }
    auto finish = column_finish_kernel<kOut>;
    PTD_LAUNCH(finish, grid_for(C, 256), 256, 0, stream, dst0, dst1, static_cast<const float*>(ws), chunks, C);
}

template <class T, bool kLayer, bool kResidual>
void launch_norm_forward(T* out, T* res_out, float* mean, float* rstd, const T* x, const T* residual, const T* w,
                         const T* b, int64_t rows, int64_t C, float eps, StreamHandle stream) {
    if (rows == 0) return;
    const bool vec = C % k_vec == 0 && all_aligned16(out, x, w) && (!kLayer || aligned16(b)) &&
                     (!kResidual || all_aligned16(res_out, residual));
    const unsigned grid = static_cast<unsigned>(rows);
    if (vec) {
        auto kernel = norm_forward_kernel<T, k_vec, kLayer, kResidual>;
        PTD_LAUNCH(kernel, grid, row_threads(C, k_vec), 0, stream, out, res_out, mean, rstd, x, residual, w, b, C,
                   eps);
    } else {
        auto kernel = norm_forward_kernel<T, 1, kLayer, kResidual>;
        PTD_LAUNCH(kernel, grid, row_threads(C, 1), 0, stream, out, res_out, mean, rstd, x, residual, w, b, C, eps);
    }
}

template <class T, bool kLayer>
void launch_norm_backward(T* dx, float* dw, float* db, const T* dout, const T* x, const float* mean, const float* rstd,
                          const T* w, int64_t rows, int64_t C, bool accumulate, float* ws, StreamHandle stream) {
    if (rows == 0) return;
    // The weight gradients first: they read dout and x only, so dx may even alias dout.
    launch_column_reduce<T, kLayer ? k_layernorm_grad : k_rmsnorm_grad>(dw, db, dout, x, mean, rstd, rows, C, ws,
                                                                        stream);
    const bool vec = C % k_vec == 0 && all_aligned16(dx, dout, x, w);
    const unsigned grid = static_cast<unsigned>(rows);
    const int threads = row_threads(C, vec ? k_vec : 1);
    auto run = [&](auto kernel) { PTD_LAUNCH(kernel, grid, threads, 0, stream, dx, dout, x, mean, rstd, w, C); };
    if (vec) {
        if (accumulate) run(norm_backward_dx_kernel<T, k_vec, kLayer, true>);
        else run(norm_backward_dx_kernel<T, k_vec, kLayer, false>);
    } else {
        if (accumulate) run(norm_backward_dx_kernel<T, 1, kLayer, true>);
        else run(norm_backward_dx_kernel<T, 1, kLayer, false>);
    }
}

inline void check_rows(const char* op, int64_t rows, int64_t C) {
    PTD_KERNEL_REQUIRE(rows >= 0 && C > 0, op, "needs rows >= 0 and C > 0");
    PTD_KERNEL_REQUIRE(rows <= 0x7fffffff, op, "more than 2^31 - 1 rows (one block per row)");
}

}  // namespace ptd::cuda::PTD_CUDA_NS::kern

namespace ptd::cuda::PTD_CUDA_NS {

int64_t row_reduce_workspace_floats(int64_t rows, int64_t C) {
    return rows <= 0 || C <= 0 ? 0 : 2 * kern::row_chunks(rows) * C;
}

void bias_grad(float* dbias, const void* dy, DType t, int64_t rows, int64_t cols, float* workspace,
               StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(rows >= 0 && cols >= 0, "bias_grad", "negative shape");
    if (rows == 0 || cols == 0) return;
    dispatch_type(t, "bias_grad", [&](auto tag) {
        using T = decltype(tag);
        launch_column_reduce<T, k_bias_grad>(dbias, nullptr, static_cast<const T*>(dy), nullptr, nullptr, nullptr,
                                             rows, cols, workspace, stream);
    });
}

void layernorm_forward(DType t, void* out, float* mean, float* rstd, const void* x, const void* w, const void* b,
                       int64_t rows, int64_t C, float eps, StreamHandle stream) {
    using namespace kern;
    check_rows("layernorm_forward", rows, C);
    dispatch_type(t, "layernorm_forward", [&](auto tag) {
        using T = decltype(tag);
        launch_norm_forward<T, true, false>(static_cast<T*>(out), nullptr, mean, rstd, static_cast<const T*>(x),
                                            nullptr, static_cast<const T*>(w), static_cast<const T*>(b), rows, C, eps,
                                            stream);
    });
}

void layernorm_residual_forward(DType t, void* res_out, void* out, float* mean, float* rstd, const void* x,
                                const void* residual, const void* w, const void* b, int64_t rows, int64_t C,
                                float eps, StreamHandle stream) {
    using namespace kern;
    check_rows("layernorm_residual_forward", rows, C);
    dispatch_type(t, "layernorm_residual_forward", [&](auto tag) {
        using T = decltype(tag);
        launch_norm_forward<T, true, true>(static_cast<T*>(out), static_cast<T*>(res_out), mean, rstd,
                                           static_cast<const T*>(x), static_cast<const T*>(residual),
                                           static_cast<const T*>(w), static_cast<const T*>(b), rows, C, eps, stream);
    });
}

void layernorm_backward(DType t, void* dx, float* dw, float* db, const void* dout, const void* x, const float* mean,
                        const float* rstd, const void* w, int64_t rows, int64_t C, bool accumulate_dx,
                        float* workspace, StreamHandle stream) {
    using namespace kern;
    check_rows("layernorm_backward", rows, C);
    dispatch_type(t, "layernorm_backward", [&](auto tag) {
        using T = decltype(tag);
        launch_norm_backward<T, true>(static_cast<T*>(dx), dw, db, static_cast<const T*>(dout),
                                      static_cast<const T*>(x), mean, rstd, static_cast<const T*>(w), rows, C,
                                      accumulate_dx, workspace, stream);
    });
}

void rmsnorm_forward(DType t, void* out, float* rstd, const void* x, const void* w, int64_t rows, int64_t C,
                     float eps, StreamHandle stream) {
    using namespace kern;
    check_rows("rmsnorm_forward", rows, C);
    dispatch_type(t, "rmsnorm_forward", [&](auto tag) {
        using T = decltype(tag);
        launch_norm_forward<T, false, false>(static_cast<T*>(out), nullptr, nullptr, rstd, static_cast<const T*>(x),
                                             nullptr, static_cast<const T*>(w), nullptr, rows, C, eps, stream);
    });
}

void rmsnorm_residual_forward(DType t, void* res_out, void* out, float* rstd, const void* x, const void* residual,
                              const void* w, int64_t rows, int64_t C, float eps, StreamHandle stream) {
    using namespace kern;
    check_rows("rmsnorm_residual_forward", rows, C);
    dispatch_type(t, "rmsnorm_residual_forward", [&](auto tag) {
        using T = decltype(tag);
        launch_norm_forward<T, false, true>(static_cast<T*>(out), static_cast<T*>(res_out), nullptr, rstd,
                                            static_cast<const T*>(x), static_cast<const T*>(residual),
                                            static_cast<const T*>(w), nullptr, rows, C, eps, stream);
    });
}

void rmsnorm_backward(DType t, void* dx, float* dw, const void* dout, const void* x, const float* rstd, const void* w,
                      int64_t rows, int64_t C, bool accumulate_dx, float* workspace, StreamHandle stream) {
    using namespace kern;
    check_rows("rmsnorm_backward", rows, C);
    dispatch_type(t, "rmsnorm_backward", [&](auto tag) {
        using T = decltype(tag);
        launch_norm_backward<T, false>(static_cast<T*>(dx), dw, nullptr, static_cast<const T*>(dout),
                                       static_cast<const T*>(x), nullptr, rstd, static_cast<const T*>(w), rows, C,
                                       accumulate_dx, workspace, stream);
    });
}

}  // namespace ptd::cuda::PTD_CUDA_NS
