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
// device's token ids (no host-side plan). It groups the rows by token on the device, in row
// order, with integer counting only (issue 30 point 5: the O(rows²) scan it replaces
// compared every row with every earlier one):
//   1. count: the rows are cut into chunks of k_emb_chunk; each chunk's block counts its
//      rows per token (integer atomicAdd into counts[chunk, token]: the totals do not depend
//      on the order) and gives each row its rank among the chunk's earlier rows of its token
//      (a scan of the chunk's ids in shared memory);
//   2. chunk prefix: per token, counts[chunk, token] becomes the rows of that token in the
//      earlier chunks, and the token's total is kept;
//   3. offsets: one block scans the totals into each token's first position (CSR offsets);
//   4. scatter: row r goes to position offsets[token] + counts[chunk(r), token] + rank(r) —
//      so each token's rows lie together in increasing row order;
//   5. add: one block per (position, block of columns); the block at a token's first
//      position adds that token's rows into dwte in order: d = ((d + x_r0) + x_r1) + … —
//      the CPU backend's order, so the same bits. No float atomics: every launch writes the
//      same bits in any block order (the racecheck).
// O(rows · (chunk + chunks)) integer work plus the rows' bytes, in an int32 workspace of
// chunks · Vl + Vl + 1 + 2 · rows elements (embedding_backward_workspace_ints), planned at
// start-up. The position backward adds the rows of each position in order.
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

constexpr int k_emb_chunk = 512;  // rows per chunk of the counting pass (its block size)

// Pass 1. Block = one chunk of k_emb_chunk rows: counts[chunk · Vl + v] += 1 per row of token
// v0 + v, rank[r] = the chunk's earlier rows of r's token.
__global__ void embedding_count_kernel(int32_t* counts, int32_t* rank, const int32_t* tokens, int64_t v0, int64_t Vl,
                                       int64_t rows) {
    PTD_SHARED(int32_t, ids, k_emb_chunk);
    const int64_t r = (int64_t)blockIdx.x * k_emb_chunk + threadIdx.x;
    const int32_t tok = r < rows ? tokens[r] : -1;
    ids[threadIdx.x] = tok;
    __syncthreads();
    const int64_t v = (int64_t)tok - v0;
    if (r >= rows || v < 0 || v >= Vl) return;
    int32_t before = 0;
    for (int j = 0; j < (int)threadIdx.x; j++) before += ids[j] == tok;
    rank[r] = before;
    atomicAdd(&counts[(int64_t)blockIdx.x * Vl + v], 1);
}

// Pass 2. Per token v: counts[c · Vl + v] := the token's rows in chunks before c; total[v] =
// all of them.
__global__ void embedding_chunk_prefix_kernel(int32_t* counts, int32_t* total, int64_t chunks, int64_t Vl) {
    for (int64_t v : grid_stride(Vl)) {
        int32_t run = 0;
        for (int64_t c = 0; c < chunks; c++) {
            const int32_t n = counts[c * Vl + v];
            counts[c * Vl + v] = run;
            run += n;
        }
        total[v] = run;
    }
}

// Pass 3. One block: offsets[0 .. Vl) (the totals, in place) := their exclusive prefix sum,
// offsets[Vl] = the rows in the shard. Thread t owns a contiguous run of tokens.
__global__ void embedding_offsets_kernel(int32_t* offsets, int64_t Vl) {
    PTD_SHARED(int32_t, part, k_emb_chunk);
    const int64_t per = (Vl + k_emb_chunk - 1) / k_emb_chunk;
    const int64_t lo = threadIdx.x * per, hi = lo + per < Vl ? lo + per : Vl;
    int32_t sum = 0;
    for (int64_t v = lo; v < hi; v++) sum += offsets[v];
    part[threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t run = 0;
        for (int t = 0; t < k_emb_chunk; t++) {
            const int32_t n = part[t];
            part[t] = run;
            run += n;
        }
        offsets[Vl] = run;
    }
    __syncthreads();
    int32_t run = part[threadIdx.x];
    for (int64_t v = lo; v < hi; v++) {
        const int32_t n = offsets[v];
        offsets[v] = run;
        run += n;
    }
}

// Pass 4. sorted[offsets[v] + counts[chunk(r) · Vl + v] + rank[r]] = r for every row of the shard.
__global__ void embedding_scatter_kernel(int32_t* sorted, const int32_t* counts, const int32_t* rank,
                                         const int32_t* offsets, const int32_t* tokens, int64_t v0, int64_t Vl,
                                         int64_t rows) {
    for (int64_t r : grid_stride(rows)) {
        const int64_t v = (int64_t)tokens[r] - v0;
        if (v < 0 || v >= Vl) continue;
        sorted[offsets[v] + counts[(r / k_emb_chunk) * Vl + v] + rank[r]] = (int32_t)r;
    }
}

// Pass 5. Grid: x = position p in `sorted`, y = block of k_embed_threads·N columns. The block
// at a token's first position adds its rows in order; every other block returns.
template <class T, int N>
__global__ void embedding_backward_kernel(float* dwte, const T* dout, const int32_t* tokens, const int32_t* sorted,
                                          const int32_t* offsets, int64_t v0, int64_t Vl, int64_t C) {
    const int64_t p = blockIdx.x;
    if (p >= offsets[Vl]) return;
    const int64_t v = (int64_t)tokens[sorted[p]] - v0;
    if (offsets[v] != p) return;  // not the token's first row
    const int64_t end = offsets[v + 1];
    const int64_t c = ((int64_t)blockIdx.y * blockDim.x + threadIdx.x) * N;
    if (c >= C) return;
    float acc[N];
    load_n<float, N>(dwte + v * C + c, acc);
    for (int64_t q = p; q < end; q++) {
        float x[N];
        load_n<T, N>(dout + (int64_t)sorted[q] * C + c, x);
PTD_UNROLL
        for (int k = 0; k < N; k++) acc[k] += x[k];
    }
    store_n<float, N>(dwte + v * C + c, acc);
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

int64_t embedding_backward_workspace_ints(int64_t rows, int64_t Vl) {
    const int64_t chunks = (rows + kern::k_emb_chunk - 1) / kern::k_emb_chunk;
    return chunks * Vl + Vl + 1 + 2 * rows;
}

void embedding_backward(DType t, float* dwte, const void* dout, const int32_t* tokens, int64_t v0, int64_t Vl,
                             int64_t rows, int64_t C, int32_t* workspace, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(rows >= 0 && C >= 0 && Vl >= 0, "embedding_backward", "negative shape");
    PTD_KERNEL_REQUIRE(rows < (int64_t)1 << 31, "embedding_backward", "rows ≥ 2^31");
    if (rows == 0 || C == 0 || Vl == 0) return;
    PTD_KERNEL_REQUIRE(workspace != nullptr, "embedding_backward", "no workspace (embedding_backward_workspace_ints)");
    const int64_t chunks = ceil_div(rows, k_emb_chunk);
    int32_t* counts = workspace;              // [chunks, Vl]
    int32_t* offsets = counts + chunks * Vl;  // [Vl + 1]
    int32_t* rank = offsets + Vl + 1;         // [rows]
    int32_t* sorted = rank + rows;            // [rows]
    PTD_CUDA_CHECK(memset_async(counts, 0, (size_t)(chunks * Vl) * sizeof(int32_t), stream));
    PTD_LAUNCH(embedding_count_kernel, (unsigned)chunks, k_emb_chunk, 0, stream, counts, rank, tokens, v0, Vl, rows);
    PTD_LAUNCH(embedding_chunk_prefix_kernel, grid_for(Vl, k_embed_threads), k_embed_threads, 0, stream, counts,
               offsets, chunks, Vl);
    PTD_LAUNCH(embedding_offsets_kernel, 1, k_emb_chunk, 0, stream, offsets, Vl);
    PTD_LAUNCH(embedding_scatter_kernel, grid_for(rows, k_embed_threads), k_embed_threads, 0, stream, sorted,
               static_cast<const int32_t*>(counts), static_cast<const int32_t*>(rank),
               static_cast<const int32_t*>(offsets), tokens, v0, Vl, rows);
    dispatch_type(t, "embedding_backward", [&](auto tag) {
        using T = decltype(tag);
        const T* d = static_cast<const T*>(dout);
        const bool vec = C % k_vec == 0 && all_aligned16(dwte, d);
        const unsigned cblocks = (unsigned)ceil_div(vec ? C / k_vec : C, k_embed_threads);
        const dim3 grid((unsigned)rows, cblocks);
        const int32_t* so = sorted;
        const int32_t* of = offsets;
        if (vec)
            PTD_LAUNCH((embedding_backward_kernel<T, k_vec>), grid, k_embed_threads, 0, stream, dwte, d, tokens, so,
                       of, v0, Vl, C);
        else
            PTD_LAUNCH((embedding_backward_kernel<T, 1>), grid, k_embed_threads, 0, stream, dwte, d, tokens, so, of,
                       v0, Vl, C);
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
