// embedding.cuh — token embedding (vocab-parallel) and learned positions, forward and
// backward, deterministic without float atomics.
//
//   embedding forward   out [rows, C] (t) = wte [Vl, C] (t) row tok[r] − v0, or 0 when the
//                       token is not in this shard (a byte copy: no arithmetic)
//   embedding backward  dwte [Vl, C] (f32) += dout [rows, C] (t) of the rows of each token
//   position forward    out [rows, C] (t) += wpe [T, C] (t) row (row0 + r) mod T
//   position backward   dwpe [T, C] (f32) += dout rows r ≡ p − row0 (mod T), per position p
//   split_tokens        seq [B, T+1] (i32) → inputs [B·T] (ids 0..T−1 of each sequence),
//                       targets [B·T] (ids 1..T): the micro-batch's ids arrive as one upload
//
// The embedding backward is llm.c's: many rows hit one dwte row, so instead of atomics
// the host — which holds the micro-batch's token ids before it uploads them — groups the
// rows by token into a staging buffer (embedding_backward_plan) uploaded with the ids; a
// thread then owns V columns of one token's dwte row and adds that token's rows in
// increasing row order: d = ((d + x_r0) + x_r1) + … — the very order of the CPU backend,
// so the result is the same bits. The position backward does the same per position.
//
// Staging layout (int32, embedding_backward_staging_ints(rows) = 3·rows + 1 elements),
// with nb buckets (distinct in-shard tokens, ascending) and n_in rows in the shard:
//   [0, nb]                     bucket_start: bucket i's rows are bucket_rows[start[i] .. start[i+1])
//   [rows + 1, rows + 1 + nb)   bucket_token: the dwte row (token − v0) of bucket i
//   [2·rows + 1, … + n_in)      bucket_rows: row indices, grouped by bucket, ascending within
#pragma once

#include <algorithm>
#include <cstdint>

#include "../dialect.cuh"
#include "pack_io.cuh"

namespace ptd::cuda::PTD_CUDA_NS {

constexpr int k_embed_threads = 256;

inline int64_t embedding_backward_staging_ints(int64_t rows) { return 3 * rows + 1; }

// Fills `staging` (host memory, embedding_backward_staging_ints(rows) int32) from the
// micro-batch's token ids; returns the number of buckets (the launch's grid). Rows whose
// token is outside [v0, v0 + Vl) take no part.
inline int64_t embedding_backward_plan(int32_t* staging, const int32_t* tokens, int64_t rows, int64_t v0, int64_t Vl) {
    int32_t* start = staging;
    int32_t* token = staging + rows + 1;
    int32_t* order = staging + 2 * rows + 1;
    int64_t n_in = 0;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t t = (int64_t)tokens[r] - v0;
        if (t >= 0 && t < Vl) order[n_in++] = (int32_t)r;
    }
    // (token, row) pairs are distinct, so this order is total: no stable sort needed.
    std::sort(order, order + n_in, [&](int32_t a, int32_t b) {
        return tokens[a] != tokens[b] ? tokens[a] < tokens[b] : a < b;
    });
    int64_t nb = 0;
    for (int64_t i = 0; i < n_in; i++) {
        if (i == 0 || tokens[order[i]] != tokens[order[i - 1]]) {
            start[nb] = (int32_t)i;
            token[nb] = (int32_t)(tokens[order[i]] - v0);
            nb++;
        }
    }
    start[nb] = (int32_t)n_in;
    return nb;
}

// out [rows, C] (T) = wte row or 0: the bytes move as they are (no conversion, so even a
// NaN payload survives, as in the CPU backend's memcpy). One thread per V elements of a row.
template <class T, int V>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte, int64_t v0, int64_t Vl,
                                         int64_t rows, int64_t C) {
    const int64_t per_row = C / V, n = rows * per_row;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / per_row, c = (i % per_row) * V;
        const int64_t t = (int64_t)tokens[r] - v0;
        const bool here = t >= 0 && t < Vl;
        if constexpr (V == pack_elems<T>) {
            Pack128<T> pk;
            if (here) pk = load128(wte + t * C + c);
            else
                for (int k = 0; k < V; k++) pk[k] = from_f32<T>(0.0f);
            store128(out + r * C + c, pk);
        } else {
            for (int k = 0; k < V; k++) out[r * C + c + k] = here ? wte[t * C + c + k] : from_f32<T>(0.0f);
        }
    }
}

// dwte[token, c .. c+V) (f32) += Σ over the bucket's rows, in row order. Grid: x = bucket,
// y = column block.
template <class T, int V>
__global__ void embedding_backward_kernel(float* dwte, const T* dout, const int32_t* staging, int64_t rows, int64_t C) {
    const int64_t b = blockIdx.x;
    const int64_t c = ((int64_t)blockIdx.y * blockDim.x + threadIdx.x) * V;
    if (c >= C) return;
    const int32_t* start = staging;
    const int32_t* token = staging + rows + 1;
    const int32_t* order = staging + 2 * rows + 1;
    float* dst = dwte + (int64_t)token[b] * C + c;
    float acc[V];
    load_f32<float, V>(acc, dst);
    for (int32_t i = start[b]; i < start[b + 1]; i++) {
        float x[V];
        load_f32<T, V>(x, dout + (int64_t)order[i] * C + c);
        for (int k = 0; k < V; k++) acc[k] += x[k];
    }
    store_f32<float, V>(dst, acc);
}

// out [rows, C] (T) += wpe [T, C] (T) at position (row0 + r) mod Tp; f32 sum, rounded once.
template <class T, int V>
__global__ void position_forward_kernel(T* out, const T* wpe, int64_t row0, int64_t rows, int64_t Tp, int64_t C) {
    const int64_t per_row = C / V, n = rows * per_row;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / per_row, c = (i % per_row) * V;
        float x[V], w[V];
        load_f32<T, V>(x, out + r * C + c);
        load_f32<T, V>(w, wpe + ((row0 + r) % Tp) * C + c);
        for (int k = 0; k < V; k++) x[k] += w[k];
        store_f32<T, V>(out + r * C + c, x);
    }
}

// dwpe[p, c .. c+V) (f32) += dout rows r ≡ p − row0 (mod Tp), in row order. Grid: x =
// position, y = column block.
template <class T, int V>
__global__ void position_backward_kernel(float* dwpe, const T* dout, int64_t row0, int64_t rows, int64_t Tp,
                                         int64_t C) {
    const int64_t p = blockIdx.x;
    const int64_t c = ((int64_t)blockIdx.y * blockDim.x + threadIdx.x) * V;
    if (c >= C) return;
    float acc[V];
    load_f32<float, V>(acc, dwpe + p * C + c);
    for (int64_t r = (p - row0 % Tp + Tp) % Tp; r < rows; r += Tp) {
        float x[V];
        load_f32<T, V>(x, dout + r * C + c);
        for (int k = 0; k < V; k++) acc[k] += x[k];
    }
    store_f32<float, V>(dwpe + p * C + c, acc);
}

// inputs[b·T + t] = seq[b·(T+1) + t], targets[b·T + t] = seq[b·(T+1) + t + 1]; either may
// be null.
__global__ void split_tokens_kernel(int32_t* inputs, int32_t* targets, const int32_t* seq, int64_t B, int64_t T) {
    const int64_t n = B * T;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / T, t = i % T;
        if (inputs) inputs[i] = seq[b * (T + 1) + t];
        if (targets) targets[i] = seq[b * (T + 1) + t + 1];
    }
}

// Grid of a grid-stride loop over n items: enough blocks to fill a large GPU, no more.
inline unsigned embed_grid(int64_t n) {
    const int64_t blocks = (n + k_embed_threads - 1) / k_embed_threads;
    return (unsigned)std::max<int64_t>(1, std::min<int64_t>(blocks, 1 << 16));
}

template <class T>
void launch_embedding_forward(T* out, const int32_t* tokens, const T* wte, int64_t v0, int64_t Vl, int64_t rows,
                              int64_t C, StreamHandle stream) {
    if (rows == 0 || C == 0) return;
    constexpr int V = pack_elems<T>;
    if (rows_packable(out, C, sizeof(T), V) && rows_packable(wte, C, sizeof(T), V))
        PTD_LAUNCH((embedding_forward_kernel<T, V>), dim3(embed_grid(rows * C / V)), dim3(k_embed_threads), 0, stream,
                   out, tokens, wte, v0, Vl, rows, C);
    else
        PTD_LAUNCH((embedding_forward_kernel<T, 1>), dim3(embed_grid(rows * C)), dim3(k_embed_threads), 0, stream, out,
                   tokens, wte, v0, Vl, rows, C);
}

// `staging` is the device copy of what embedding_backward_plan wrote; `buckets` its result.
template <class T>
void launch_embedding_backward(float* dwte, const T* dout, const int32_t* staging, int64_t buckets, int64_t rows,
                               int64_t C, StreamHandle stream) {
    if (buckets == 0 || C == 0) return;
    constexpr int V = pack_elems<T>;
    if (rows_packable(dout, C, sizeof(T), V) && rows_packable(dwte, C, sizeof(float), V)) {
        const unsigned cblocks = (unsigned)((C / V + k_embed_threads - 1) / k_embed_threads);
        PTD_LAUNCH((embedding_backward_kernel<T, V>), dim3((unsigned)buckets, cblocks), dim3(k_embed_threads), 0,
                   stream, dwte, dout, staging, rows, C);
    } else {
        const unsigned cblocks = (unsigned)((C + k_embed_threads - 1) / k_embed_threads);
        PTD_LAUNCH((embedding_backward_kernel<T, 1>), dim3((unsigned)buckets, cblocks), dim3(k_embed_threads), 0,
                   stream, dwte, dout, staging, rows, C);
    }
}

template <class T>
void launch_position_forward(T* out, const T* wpe, int64_t row0, int64_t rows, int64_t Tp, int64_t C,
                             StreamHandle stream) {
    if (rows == 0 || C == 0) return;
    constexpr int V = pack_elems<T>;
    if (rows_packable(out, C, sizeof(T), V) && rows_packable(wpe, C, sizeof(T), V))
        PTD_LAUNCH((position_forward_kernel<T, V>), dim3(embed_grid(rows * C / V)), dim3(k_embed_threads), 0, stream,
                   out, wpe, row0, rows, Tp, C);
    else
        PTD_LAUNCH((position_forward_kernel<T, 1>), dim3(embed_grid(rows * C)), dim3(k_embed_threads), 0, stream, out,
                   wpe, row0, rows, Tp, C);
}

template <class T>
void launch_position_backward(float* dwpe, const T* dout, int64_t row0, int64_t rows, int64_t Tp, int64_t C,
                              StreamHandle stream) {
    if (rows == 0 || C == 0 || Tp == 0) return;
    constexpr int V = pack_elems<T>;
    if (rows_packable(dout, C, sizeof(T), V) && rows_packable(dwpe, C, sizeof(float), V)) {
        const unsigned cblocks = (unsigned)((C / V + k_embed_threads - 1) / k_embed_threads);
        PTD_LAUNCH((position_backward_kernel<T, V>), dim3((unsigned)Tp, cblocks), dim3(k_embed_threads), 0, stream,
                   dwpe, dout, row0, rows, Tp, C);
    } else {
        const unsigned cblocks = (unsigned)((C + k_embed_threads - 1) / k_embed_threads);
        PTD_LAUNCH((position_backward_kernel<T, 1>), dim3((unsigned)Tp, cblocks), dim3(k_embed_threads), 0, stream,
                   dwpe, dout, row0, rows, Tp, C);
    }
}

inline void launch_split_tokens(int32_t* inputs, int32_t* targets, const int32_t* seq, int64_t B, int64_t T,
                                StreamHandle stream) {
    if (B * T == 0 || (inputs == nullptr && targets == nullptr)) return;
    PTD_LAUNCH(split_tokens_kernel, dim3(embed_grid(B * T)), dim3(k_embed_threads), 0, stream, inputs, targets, seq, B,
               T);
}

}  // namespace ptd::cuda::PTD_CUDA_NS
