// attention.cuh — the fused causal softmax of attention, forward and backward.
//
// Attention on the GPU is three strided-batched GEMMs (cuBLASLt, issued by the backend
// through blaslt.h) around these two kernels, as llm.c does it before flash attention:
//   forward:  S = Q·Kᵀ per (b, h)            [B·H, T, T]  GEMM (S in f32 or in t)
//             P = causal_softmax(scale · S)  [B·H, T, T]  attn_softmax_forward (here)
//             ctx = P·V                      [B, T, H, D] GEMM
//   backward: dP = dctx·Vᵀ                   [B·H, T, T]  GEMM (dP in f32 or in t)
//             dS = scale · P ⊙ (dP − ρ),  ρ_t = Σ_u P[t,u]·dP[t,u]   attn_softmax_backward (here)
//             dq = dS·K, dk = Σ_h dSᵀ·Q, dv = Σ_h Pᵀ·dctx          GEMMs
// The probabilities are the ones the CPU backend saves: softmax in f32 over the keys
// u ≤ t of query row t, every entry above the diagonal 0, stored in t (rounded once).
//
// One warp per score row: T ≤ a few thousand columns fit a warp's loop, the reductions
// are warp shuffles in a fixed butterfly (no shared memory, no barrier, no atomics, so
// the result does not depend on scheduling), and the row is read from L1 on the second
// and third pass. A row is read 128 bits at a time when its length allows it (T a
// multiple of the 16-byte pack and the buffer 16-byte aligned), else element by element.
#pragma once

#include <cmath>
#include <cstdint>

#include "../dialect.cuh"
#include "pack_io.cuh"

namespace ptd::cuda::PTD_CUDA_NS {

constexpr int k_attn_softmax_threads = 256;  // 8 warps = 8 score rows per block

// scores [BH·T rows, T] (S) → probs [BH·T rows, T] (P); probs may be scores itself (same
// type). Row `row` is query t = row % T of its (b, h): keys 0..t take part, the rest is 0.
// V = elements per access (the 16-byte pack of the narrower type, or 1).
template <class S, class P, int V>
__global__ void attn_softmax_forward_kernel(P* probs, const S* scores, int64_t rows, int64_t T, float scale) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;  // the whole warp leaves together
    const int64_t t = row % T;
    const S* s = scores + row * T;
    P* p = probs + row * T;
    const int64_t packs_causal = t / V + 1;  // packs holding a key ≤ t
    const int64_t packs = T / V;

    float mx = -INFINITY;
    for (int64_t j = lane; j < packs_causal; j += 32) {
        float x[V];
        load_f32<S, V>(x, s + j * V);
        for (int k = 0; k < V; k++)
            if (j * V + k <= t) mx = fmaxf(mx, scale * x[k]);
    }
    mx = warp_reduce_max(mx);

    float sum = 0.0f;
    for (int64_t j = lane; j < packs_causal; j += 32) {
        float x[V];
        load_f32<S, V>(x, s + j * V);
        for (int k = 0; k < V; k++)
            if (j * V + k <= t) sum += expf(scale * x[k] - mx);
    }
    sum = warp_reduce_sum(sum);
    const float inv = 1.0f / sum;

    // Every lane has finished reading (the shuffles above are the warp's meeting point),
    // and from here each lane reads and writes only its own packs: in place is safe.
    for (int64_t j = lane; j < packs; j += 32) {
        float x[V];
        if (j < packs_causal) load_f32<S, V>(x, s + j * V);
        for (int k = 0; k < V; k++) x[k] = (j * V + k <= t) ? expf(scale * x[k] - mx) * inv : 0.0f;
        store_f32<P, V>(p + j * V, x);
    }
}

// probs [rows, T] (P), dprobs [rows, T] (G) → dscores [rows, T] (G); dscores may be
// dprobs itself. dS[t,u] = scale · P[t,u]·(dP[t,u] − ρ_t) for u ≤ t, 0 above the diagonal.
template <class P, class G, int V>
__global__ void attn_softmax_backward_kernel(G* dscores, const G* dprobs, const P* probs, int64_t rows, int64_t T,
                                             float scale) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int64_t t = row % T;
    const P* p = probs + row * T;
    const G* dp = dprobs + row * T;
    G* ds = dscores + row * T;
    const int64_t packs_causal = t / V + 1;
    const int64_t packs = T / V;

    float rho = 0.0f;
    for (int64_t j = lane; j < packs_causal; j += 32) {
        float pv[V], dv[V];
        load_f32<P, V>(pv, p + j * V);
        load_f32<G, V>(dv, dp + j * V);
        for (int k = 0; k < V; k++)
            if (j * V + k <= t) rho += pv[k] * dv[k];
    }
    rho = warp_reduce_sum(rho);

    for (int64_t j = lane; j < packs; j += 32) {
        float pv[V], dv[V];
        if (j < packs_causal) {
            load_f32<P, V>(pv, p + j * V);
            load_f32<G, V>(dv, dp + j * V);
        }
        for (int k = 0; k < V; k++) dv[k] = (j * V + k <= t) ? scale * (pv[k] * (dv[k] - rho)) : 0.0f;
        store_f32<G, V>(ds + j * V, dv);
    }
}

template <class S, class P>
void launch_attn_softmax_forward(P* probs, const S* scores, int64_t rows, int64_t T, float scale, StreamHandle stream) {
    if (rows == 0 || T == 0) return;
    constexpr int rows_per_block = k_attn_softmax_threads / 32;
    const unsigned grid = (unsigned)((rows + rows_per_block - 1) / rows_per_block);
    constexpr int V = pack_elems_of_both<S, P>();
    if (rows_packable(scores, T, sizeof(S), V) && rows_packable(probs, T, sizeof(P), V)) {
        PTD_LAUNCH((attn_softmax_forward_kernel<S, P, V>), dim3(grid), dim3(k_attn_softmax_threads), 0, stream, probs,
                   scores, rows, T, scale);
    } else {
        PTD_LAUNCH((attn_softmax_forward_kernel<S, P, 1>), dim3(grid), dim3(k_attn_softmax_threads), 0, stream, probs,
                   scores, rows, T, scale);
    }
}

template <class P, class G>
void launch_attn_softmax_backward(G* dscores, const G* dprobs, const P* probs, int64_t rows, int64_t T, float scale,
                                  StreamHandle stream) {
    if (rows == 0 || T == 0) return;
    constexpr int rows_per_block = k_attn_softmax_threads / 32;
    const unsigned grid = (unsigned)((rows + rows_per_block - 1) / rows_per_block);
    constexpr int V = pack_elems_of_both<P, G>();
    if (rows_packable(probs, T, sizeof(P), V) && rows_packable(dprobs, T, sizeof(G), V) &&
        rows_packable(dscores, T, sizeof(G), V)) {
        PTD_LAUNCH((attn_softmax_backward_kernel<P, G, V>), dim3(grid), dim3(k_attn_softmax_threads), 0, stream,
                   dscores, dprobs, probs, rows, T, scale);
    } else {
        PTD_LAUNCH((attn_softmax_backward_kernel<P, G, 1>), dim3(grid), dim3(k_attn_softmax_threads), 0, stream,
                   dscores, dprobs, probs, rows, T, scale);
    }
}

}  // namespace ptd::cuda::PTD_CUDA_NS
