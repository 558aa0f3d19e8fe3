// attention.cuh — the fused causal softmax of attention, forward and backward, and the
// permute between the fused qkv rows and head-major blocks that lets each attention GEMM be
// one strided batch over every (b, h) (llm.c's permute_kernel / unpermute_kernel).
//
// Attention on the GPU is strided-batched GEMMs (cuBLASLt, issued by the backend through
// blaslt.h; the layouts are in kernels.h) around these two kernels, as llm.c does it before
// flash attention:
//   forward:  S = Q·Kᵀ per (b, h)               [B·H, T, T]   GEMM (S in f32 or in t)
//             P = causal_softmax(scale · S)     [B·H, T, T]   attention_softmax_forward
//             ctx = P·V                         [B, T, H, D]  GEMM
//   backward: dP = dctx·Vᵀ                      [B·H, T, T]   GEMM (dP in f32 or in t)
//             dS = scale · P ⊙ (dP − ρ),  ρ_t = Σ_u P[t,u]·dP[t,u]   attention_softmax_backward
//             dq = dS·K, dk = Σ_h dSᵀ·Q, dv = Σ_h Pᵀ·dctx             GEMMs
// The probabilities are the ones the CPU backend saves: softmax in f32 over the keys u ≤ t
// of query row t, every entry above the diagonal 0, stored in t (rounded once).
//
// One warp per score row: the reductions are warp shuffles in a fixed butterfly (no shared
// memory, no barrier, no atomics, so the bits do not depend on scheduling), and the row is
// re-read from L1 on the second and third pass. A thread reads 8 elements per access
// (128-bit loads) when T is a multiple of 8 and the buffers are 16-byte aligned, else one.
#pragma once

#include "common.cuh"

namespace ptd::cuda::PTD_CUDA_NS::kern {

constexpr int k_attn_threads = 256;  // 8 warps = 8 score rows per block

// scores [rows, T] (S) → probs [rows, T] (P), rows = B·H·T; probs may be scores itself
// (same type). Row `row` is query t = row % T of its (b, h): keys 0..t take part, the rest
// is 0. N = elements per access (k_vec or 1).
template <class S, class P, int N>
__global__ void attn_softmax_forward_kernel(P* probs, const S* scores, int64_t rows, int64_t T, float scale) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;  // the whole warp leaves together
    const int64_t t = row % T;
    const S* s = scores + row * T;
    P* p = probs + row * T;
    const int64_t packs_causal = t / N + 1;  // the accesses that hold a key ≤ t
    const int64_t packs = T / N;

    float mx = -INFINITY;
    for (int64_t j = lane; j < packs_causal; j += 32) {
        float x[N];
        load_n<S, N>(s + j * N, x);
PTD_UNROLL
        for (int k = 0; k < N; k++)
            if (j * N + k <= t) mx = fmaxf(mx, scale * x[k]);
    }
    mx = warp_reduce_max(mx);

    float sum = 0.0f;
    for (int64_t j = lane; j < packs_causal; j += 32) {
        float x[N];
        load_n<S, N>(s + j * N, x);
PTD_UNROLL
        for (int k = 0; k < N; k++)
            if (j * N + k <= t) sum += expf(scale * x[k] - mx);
    }
    sum = warp_reduce_sum(sum);
    const float inv = 1.0f / sum;

    // Every lane has finished reading what others write (the shuffles above are the warp's
    // meeting point), and from here each lane reads and writes only its own elements: in
    // place is safe.
    for (int64_t j = lane; j < packs; j += 32) {
        float x[N] = {};
        if (j < packs_causal) load_n<S, N>(s + j * N, x);
PTD_UNROLL
        for (int k = 0; k < N; k++) x[k] = (j * N + k <= t) ? expf(scale * x[k] - mx) * inv : 0.0f;
        store_n<P, N>(p + j * N, x);
    }
}

// probs [rows, T] (P), dprobs [rows, T] (G) → dscores [rows, T] (G); dscores may be dprobs
// itself. dS[t,u] = scale · P[t,u]·(dP[t,u] − ρ_t) for u ≤ t, 0 above the diagonal.
template <class P, class G, int N>
__global__ void attn_softmax_backward_kernel(G* dscores, const G* dprobs, const P* probs, int64_t rows, int64_t T,
                                             float scale) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const int64_t t = row % T;
    const P* p = probs + row * T;
    const G* dp = dprobs + row * T;
    G* ds = dscores + row * T;
    const int64_t packs_causal = t / N + 1;
    const int64_t packs = T / N;

    float rho = 0.0f;
    for (int64_t j = lane; j < packs_causal; j += 32) {
        float pv[N], dv[N];
        load_n<P, N>(p + j * N, pv);
        load_n<G, N>(dp + j * N, dv);
PTD_UNROLL
        for (int k = 0; k < N; k++)
            if (j * N + k <= t) rho += pv[k] * dv[k];
    }
    rho = warp_reduce_sum(rho);

    for (int64_t j = lane; j < packs; j += 32) {
        float pv[N] = {}, dv[N] = {};
        if (j < packs_causal) {
            load_n<P, N>(p + j * N, pv);
            load_n<G, N>(dp + j * N, dv);
        }
PTD_UNROLL
        for (int k = 0; k < N; k++) dv[k] = (j * N + k <= t) ? scale * (pv[k] * (dv[k] - rho)) : 0.0f;
        store_n<G, N>(ds + j * N, dv);
    }
}

inline unsigned attn_grid(int64_t rows) { return (unsigned)ceil_div(rows, k_attn_threads / 32); }

template <class S, class P>
void launch_attn_softmax_forward(P* probs, const S* scores, int64_t rows, int64_t T, float scale, StreamHandle stream) {
    if (T % k_vec == 0 && all_aligned16(probs, scores)) {
        auto kernel = attn_softmax_forward_kernel<S, P, k_vec>;
        PTD_LAUNCH(kernel, attn_grid(rows), k_attn_threads, 0, stream, probs, scores, rows, T, scale);
    } else {
        auto kernel = attn_softmax_forward_kernel<S, P, 1>;
        PTD_LAUNCH(kernel, attn_grid(rows), k_attn_threads, 0, stream, probs, scores, rows, T, scale);
    }
}

template <class P, class G>
void launch_attn_softmax_backward(G* dscores, const G* dprobs, const P* probs, int64_t rows, int64_t T, float scale,
                                  StreamHandle stream) {
    if (T % k_vec == 0 && all_aligned16(dscores, dprobs, probs)) {
        auto kernel = attn_softmax_backward_kernel<P, G, k_vec>;
        PTD_LAUNCH(kernel, attn_grid(rows), k_attn_threads, 0, stream, dscores, dprobs, probs, rows, T, scale);
    } else {
        auto kernel = attn_softmax_backward_kernel<P, G, 1>;
        PTD_LAUNCH(kernel, attn_grid(rows), k_attn_threads, 0, stream, dscores, dprobs, probs, rows, T, scale);
    }
}

// Rows [B·T, (H + 2G)·D] (per token: H query heads, then G key and G value heads) ↔ the
// head-major blocks q [B,H,T,D] ‖ k [B,G,T,D] ‖ v [B,G,T,D], one after the other. One thread
// per element, indexed by its place in the rows: consecutive threads read and write
// consecutive d of one head, so both sides are coalesced. A copy (E is the storage type), so
// it is exact in every type.
constexpr int k_heads_threads = 256;

template <class E, bool kToHeads>
__global__ void attn_heads_kernel(E* dst, const E* src, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
    const int64_t ld = (H + 2 * G) * D, n = B * T * ld;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t row = i / ld, col = i % ld, b = row / T, t = row % T, j = col / D, d = col % D;
        // The part (q, k or v), its heads per sequence and where its block starts.
        const int64_t part_heads = j < H ? H : G;
        const int64_t head = j < H ? j : j < H + G ? j - H : j - H - G;
        const int64_t part_start = j < H ? 0 : j < H + G ? B * H * T * D : B * (H + G) * T * D;
        const int64_t h = part_start + ((b * part_heads + head) * T + t) * D + d;
        if constexpr (kToHeads) dst[h] = src[i];
        else dst[i] = src[h];
    }
}

// dst ← src: rows → heads (kToHeads) or heads → rows. Not in place.
template <bool kToHeads>
void launch_attn_heads(DType t, void* dst, const void* src, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D,
                       StreamHandle stream) {
    const char* op = kToHeads ? "attention_heads_split" : "attention_heads_merge";
    const int64_t n = B * T * (H + 2 * G) * D;
    PTD_KERNEL_REQUIRE(B >= 0 && T >= 0 && H >= 0 && G >= 0 && D >= 0, op, "negative shape");
    PTD_KERNEL_REQUIRE(dst != src || n == 0, op, "in place");
    if (n == 0) return;
    dispatch_type(t, op, [&](auto tag) {
        using E = decltype(tag);
        auto kernel = attn_heads_kernel<E, kToHeads>;
        PTD_LAUNCH(kernel, grid_for(n, k_heads_threads), k_heads_threads, 0, stream, static_cast<E*>(dst),
                   static_cast<const E*>(src), B, T, H, G, D);
    });
}

}  // namespace ptd::cuda::PTD_CUDA_NS::kern

namespace ptd::cuda::PTD_CUDA_NS {

void attention_softmax_forward(DType probs_t, void* probs, DType scores_t, const void* scores, int64_t BH, int64_t T,
                               float scale, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(BH >= 0 && T >= 0, "attention_softmax_forward", "negative shape");
    PTD_KERNEL_REQUIRE(scores_t == DType::f32 || scores_t == probs_t, "attention_softmax_forward",
                       "scores must be f32 or the type of probs");
    if (BH == 0 || T == 0) return;
    dispatch_type(probs_t, "attention_softmax_forward", [&](auto ptag) {
        using P = decltype(ptag);
        if (scores_t == DType::f32)
            launch_attn_softmax_forward(static_cast<P*>(probs), static_cast<const float*>(scores), BH * T, T, scale,
                                        stream);
        else
            launch_attn_softmax_forward(static_cast<P*>(probs), static_cast<const P*>(scores), BH * T, T, scale,
                                        stream);
    });
}

void attention_softmax_backward(DType probs_t, const void* probs, DType grad_t, void* dscores, const void* dprobs,
                                int64_t BH, int64_t T, float scale, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(BH >= 0 && T >= 0, "attention_softmax_backward", "negative shape");
    PTD_KERNEL_REQUIRE(grad_t == DType::f32 || grad_t == probs_t, "attention_softmax_backward",
                       "dprobs/dscores must be f32 or the type of probs");
    if (BH == 0 || T == 0) return;
    dispatch_type(probs_t, "attention_softmax_backward", [&](auto ptag) {
        using P = decltype(ptag);
        if (grad_t == DType::f32)
            launch_attn_softmax_backward(static_cast<float*>(dscores), static_cast<const float*>(dprobs),
                                         static_cast<const P*>(probs), BH * T, T, scale, stream);
        else
            launch_attn_softmax_backward(static_cast<P*>(dscores), static_cast<const P*>(dprobs),
                                         static_cast<const P*>(probs), BH * T, T, scale, stream);
    });
}

void attention_heads_split(DType t, void* heads, const void* rows, int64_t B, int64_t T, int64_t H, int64_t G,
                           int64_t D, StreamHandle stream) {
    kern::launch_attn_heads<true>(t, heads, rows, B, T, H, G, D, stream);
}

void attention_heads_merge(DType t, void* rows, const void* heads, int64_t B, int64_t T, int64_t H, int64_t G,
                           int64_t D, StreamHandle stream) {
    kern::launch_attn_heads<false>(t, rows, heads, B, T, H, G, D, stream);
}

}  // namespace ptd::cuda::PTD_CUDA_NS
