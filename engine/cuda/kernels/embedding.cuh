// embedding.cuh — token embedding (vocab-parallel) and learned positions, forward and
// backward, deterministic without float atomics; and the split of a micro-batch's ids.
//
//   embedding forward   out [rows, C] (t) = wte [Vl, C] (t) row tok[r] − v0, or 0 when the
//                       token is not in this shard (the bytes are copied: no arithmetic)
//   embedding backward  dwte [Vl, C] (f32) += the dout [rows, C] (t) rows of each token
//   position forward    out [rows, C] (t) += wpe [T, C] (t) row (row0 + r) mod T
//   position backward   dwpe [T, C] (f32) += dout rows r ≡ p − row0 (mod T), per position p
//   split_tokens        seq [B, T+1] (i32) → inputs [B·T] (ids 0..T−1 of each sequence),
//                       targets [B·T] (ids 1..T)
//
// The embedding backward: many rows hit one dwte row, and the backend has only the
// device's token ids (no host-side plan), so it runs one block per (row r, block of
// columns). The block first decides whether r is the first row holding its token (a
// block-wide scan of tok[0 .. r)); only such "leader" blocks work: they walk the rows
// r .. rows−1 a tile at a time, staging the tile's token matches in shared memory, and each
// thread adds the matching rows of its columns in increasing row order: d = ((d + x_r0) +
// x_r1) + … — the CPU backend's order, so the same bits, without atomics or workspace.
// O(rows²/threads) token compares per column block (about 1 ms for 8k rows on an H100,
// estimated). The position backward adds the rows of each position in order.
#pragma once


#include "common.cuh"

namespace ptd::cuda::PTD_CUDA_NS::kern {

constexpr int k_embed_threads = 256;

// out [rows, C] (T) = wte row or 0, the bytes as they are (even a NaN payload survives, as
// in the CPU backend's memcpy). N = 8 (one 128-bit copy of bf16/f16, two of f32) or 1.
template <class T, int N>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, int64_t v0, int64_t Vl,
                                         int64_t rows, int64_t C) {
    const int64_t per_row = C / N;
    for (int64_t i : grid_stride(rows * per_row)) {
        const int64_t r = i / per_row, c = (i % per_row) * N;
        const int64_t t = (int64_t)tokens[r] - v0;
        const bool here = t >= 0 && t < Vl;
        T* dst = out + r * C + c;
        const T* src = wte + t * C + c;
        if constexpr (N == k_vec) {
            constexpr int pe = Pack128<T>::size;
PTD_UNROLL
            for (int q = 0; q < N / pe; q++) {
                Pack128<T> pk;
                if (here) pk = load128(src + q * pe);
                else
                    for (int k = 0; k < pe; k++) pk[k] = from_f32<T>(0.0f);
                store128(dst + q * pe, pk);
            }
        } else {
            dst[0] = here ? src[0] : from_f32<T>(0.0f);
        }
    }
}

// Grid: x = row r, y = block of k_embed_threads·N columns. Block size k_embed_threads.
template <class T, int N>
__global__ void embedding_backward_kernel(float* dwte, const T* dout, const int32_t* tokens, int64_t v0,
                                               int64_t Vl, int64_t rows, int64_t C) {
    PTD_SHARED(int, seen_before, 1);
    PTD_SHARED(int, match, k_embed_threads);
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

// out [rows, C] (T) += wpe [Tp, C] (T) at position (row0 + r) mod Tp; f32 sum, rounded once.
template <class T, int N>
__global__ void position_forward_kernel(T* out, const T* wpe, int64_t row0, int64_t rows, int64_t Tp, int64_t C) {
    const int64_t per_row = C / N;
    for (int64_t i : grid_stride(rows * per_row)) {
        const int64_t r = i / per_row, c = (i % per_row) * N;
        float x[N], w[N];
        load_n<T, N>(out + r * C + c, x);
        load_n<T, N>(wpe + ((row0 + r) % Tp) * C + c, w);
PTD_UNROLL
        for (int k = 0; k < N; k++) x[k] += w[k];
        store_n<T, N>(out + r * C + c, x);
    }
}

// dwpe[p, c .. c+N) (f32) += dout rows r ≡ p − row0 (mod Tp), in row order. Grid: x =
// position, y = block of columns.
template <class T, int N>
__global__ void position_backward_kernel(float* dwpe, const T* dout, int64_t row0, int64_t rows, int64_t Tp,
                                         int64_t C) {
    const int64_t p = blockIdx.x;
    const int64_t c = ((int64_t)blockIdx.y * blockDim.x + threadIdx.x) * N;
    if (c >= C) return;
    float acc[N];
    load_n<float, N>(dwpe + p * C + c, acc);
    for (int64_t r = (p - row0 % Tp + Tp) % Tp; r < rows; r += Tp) {
        float x[N];
        load_n<T, N>(dout + r * C + c, x);
PTD_UNROLL
        for (int k = 0; k < N; k++) acc[k] += x[k];
    }
    store_n<float, N>(dwpe + p * C + c, acc);
}

// inputs[b·T + t] = seq[b·(T+1) + t], targets[b·T + t] = seq[b·(T+1) + t + 1]; either may
// be null.
__global__ void split_tokens_kernel(int32_t* inputs, int32_t* targets, const int32_t* seq, int64_t B, int64_t T) {
    for (int64_t i : grid_stride(B * T)) {
        const int64_t b = i / T, t = i % T;
        if (inputs) inputs[i] = seq[b * (T + 1) + t];
        if (targets) targets[i] = seq[b * (T + 1) + t + 1];
    }
}

// Launches kernel<T, k_vec> when `vec`, else kernel<T, 1>, on a 2-D grid (x = items, y =
// blocks of columns of C) — the shape of the two backward kernels.
template <class T, class KV, class K1, class... Args>
void launch_columns(KV kernel_vec, K1 kernel_1, bool vec, int64_t items, int64_t C, StreamHandle stream,
                    Args... args) {
    const unsigned cblocks = (unsigned)ceil_div(vec ? C / k_vec : C, k_embed_threads);
    if (vec) PTD_LAUNCH(kernel_vec, dim3((unsigned)items, cblocks), k_embed_threads, 0, stream, args...);
    else PTD_LAUNCH(kernel_1, dim3((unsigned)items, cblocks), k_embed_threads, 0, stream, args...);
}

inline void check_rows_c(const char* op, int64_t rows, int64_t C) {
    PTD_KERNEL_REQUIRE(rows >= 0 && C >= 0, op, "negative shape");
}

}  // namespace ptd::cuda::PTD_CUDA_NS::kern

namespace ptd::cuda::PTD_CUDA_NS {

void embedding_forward(DType t, void* out, const int32_t* tokens, const void* wte, int64_t v0, int64_t Vl,
                       int64_t rows, int64_t C, StreamHandle stream) {
    using namespace kern;
    check_rows_c("embedding_forward", rows, C);
    if (rows == 0 || C == 0) return;
    dispatch_type(t, "embedding_forward", [&](auto tag) {
        using T = decltype(tag);
        auto* o = static_cast<T*>(out);
        auto* w = static_cast<const T*>(wte);
        if (C % k_vec == 0 && all_aligned16(o, w)) {
            auto kernel = embedding_forward_kernel<T, k_vec>;
            PTD_LAUNCH(kernel, grid_for(rows * C / k_vec, k_embed_threads), k_embed_threads, 0, stream, o, tokens, w,
                       v0, Vl, rows, C);
        } else {
            auto kernel = embedding_forward_kernel<T, 1>;
            PTD_LAUNCH(kernel, grid_for(rows * C, k_embed_threads), k_embed_threads, 0, stream, o, tokens, w, v0, Vl,
                       rows, C);
        }
    });
}

void embedding_backward(DType t, float* dwte, const void* dout, const int32_t* tokens, int64_t v0, int64_t Vl,
                             int64_t rows, int64_t C, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(rows >= 0 && C >= 0 && Vl >= 0, "embedding_backward", "negative shape");
    PTD_KERNEL_REQUIRE(rows < (int64_t)1 << 31, "embedding_backward", "rows ≥ 2^31");
    if (rows == 0 || C == 0 || Vl == 0) return;
    dispatch_type(t, "embedding_backward", [&](auto tag) {
        using T = decltype(tag);
        const T* d = static_cast<const T*>(dout);
        const bool vec = C % k_vec == 0 && all_aligned16(dwte, d);
        const unsigned cblocks = (unsigned)ceil_div(vec ? C / k_vec : C, k_embed_threads);
        const dim3 grid((unsigned)rows, cblocks);
        if (vec)
            PTD_LAUNCH((embedding_backward_kernel<T, k_vec>), grid, k_embed_threads, 0, stream, dwte, d, tokens,
                       v0, Vl, rows, C);
        else
            PTD_LAUNCH((embedding_backward_kernel<T, 1>), grid, k_embed_threads, 0, stream, dwte, d, tokens, v0,
                       Vl, rows, C);
    });
}


void position_forward(DType t, void* out, const void* wpe, int64_t row0, int64_t rows, int64_t T, int64_t C,
                      StreamHandle stream) {
    using namespace kern;
    check_rows_c("position_forward", rows, C);
    PTD_KERNEL_REQUIRE(T > 0 && row0 >= 0, "position_forward", "T must be > 0 and row0 >= 0");
    if (rows == 0 || C == 0) return;
    dispatch_type(t, "position_forward", [&](auto tag) {
        using T_ = decltype(tag);
        auto* o = static_cast<T_*>(out);
        auto* w = static_cast<const T_*>(wpe);
        if (C % k_vec == 0 && all_aligned16(o, w)) {
            auto kernel = position_forward_kernel<T_, k_vec>;
            PTD_LAUNCH(kernel, grid_for(rows * C / k_vec, k_embed_threads), k_embed_threads, 0, stream, o, w, row0,
                       rows, T, C);
        } else {
            auto kernel = position_forward_kernel<T_, 1>;
            PTD_LAUNCH(kernel, grid_for(rows * C, k_embed_threads), k_embed_threads, 0, stream, o, w, row0, rows, T,
                       C);
        }
    });
}

void position_backward(DType t, float* dwpe, const void* dout, int64_t row0, int64_t rows, int64_t T, int64_t C,
                       StreamHandle stream) {
    using namespace kern;
    check_rows_c("position_backward", rows, C);
    PTD_KERNEL_REQUIRE(T > 0 && row0 >= 0, "position_backward", "T must be > 0 and row0 >= 0");
    if (rows == 0 || C == 0) return;
    dispatch_type(t, "position_backward", [&](auto tag) {
        using T_ = decltype(tag);
        auto* d = static_cast<const T_*>(dout);
        launch_columns<T_>(position_backward_kernel<T_, k_vec>, position_backward_kernel<T_, 1>,
                           C % k_vec == 0 && all_aligned16(dwpe, d), T, C, stream, dwpe, d, row0, rows, T, C);
    });
}

void split_tokens(int32_t* inputs, int32_t* targets, const int32_t* seq, int64_t B, int64_t T, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(B >= 0 && T >= 0, "split_tokens", "negative shape");
    if (B * T == 0 || (inputs == nullptr && targets == nullptr)) return;
    PTD_LAUNCH(split_tokens_kernel, grid_for(B * T, k_embed_threads), k_embed_threads, 0, stream, inputs, targets, seq,
               B, T);
}

}  // namespace ptd::cuda::PTD_CUDA_NS
