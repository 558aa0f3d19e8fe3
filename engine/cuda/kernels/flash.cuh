// flash.cuh — causal flash attention (FlashAttention-2: Dao 2023, Algorithms 1 and 2) on the
// fused projection qkv, 16-bit storage with f32 accumulation, every product through the
// dialect's warp-level MMA (mma_16x8x16: tensor cores on sm_80+, the exact reference in the
// simulator and before sm_80). Nothing of size T×T is stored: the forward keeps ctx and the
// log-sum-exp of every query row, the backward recomputes the probabilities from them.
//
// Layouts as the materialised path (kernels.h, "attention softmax"): qkv [B·T, (H + 2G)·D]
// with q (H heads), then k and v (G heads each) per token row; query head h reads kv head
// h / (H/G); ctx and dctx [B, T, H, D]; lse [B, H, T] (f32, natural log of Σ exp of the
// scaled scores of the row); scale = 1/√D.
//
//   forward   one block per (64-query tile, h, b), 4 warps of 16 query rows: the block's Q
//             in shared memory; for each 32-key tile up to the diagonal (the causal skip) K
//             and V are staged, S = Q·Kᵀ (MMA), online softmax per row (running max m and
//             sum l, the quad of lanes that shares a row combining by shuffles), P rounded to
//             the storage type into the warp's shared tile, O += P·V (MMA); ctx = O / l,
//             lse = m + log l.
//   backward  Δ[b,h,t] = Σ_d dctx·ctx (flash_delta, one warp per row), then two kernels that
//             each recompute P = exp(scale·S − lse) — no float atomics, so the result does
//             not depend on scheduling (FlashAttention-2's backward adds dQ with atomics
//             instead): per 32-key tile of kv head g, dV = Σ_h Σ_q Pᵀ·dO and dK = Σ_h Σ_q
//             dSᵀ·Q over the rep query heads of the group and the query tiles from the
//             diagonal on (dS = P ⊙ (dP − Δ)·scale, dP = dO·Vᵀ); per 32-query tile of head h,
//             dQ = Σ_k dS·K over the key tiles up to the diagonal.
// Head sizes 16, 32, 64 and 128 (multiples of the MMA's k = 16); any T ≥ 1 (rows and keys
// past T are zero in shared memory and masked). Static shared memory stays under 48 KiB at
// D = 128 (36 KiB forward, 34 KiB backward).
#pragma once

#include "common.cuh"

namespace ptd::cuda::PTD_CUDA_NS::kern {

constexpr int k_flash_fwd_warps = 4;   // forward: 64 query rows per block
constexpr int k_flash_bwd_warps = 2;   // backward: 32 key (dK, dV) or query (dQ) rows per block
constexpr int k_flash_tile = 32;       // the keys (forward, dQ) or queries (dK, dV) of one inner tile

// rows [r0, r0 + rows) of the D columns at src (row stride ld) into the tile [rows, D];
// rows ≥ n are zero. Every thread of the block takes part.
template <class E, int D>
__device__ __forceinline__ void flash_load_tile(E* tile, const E* src, int64_t ld, int64_t r0, int rows, int64_t n) {
    for (int i = (int)threadIdx.x; i < rows * D; i += (int)blockDim.x) {
        const int r = i / D, c = i % D;
        tile[i] = r0 + r < n ? src[(r0 + r) * ld + c] : from_f32<E>(0.0f);
    }
}

// The max / sum over the four lanes (one quad) that hold the columns of the same rows.
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Row and column of accumulator element i (0..3) of lane (g, q) in an m16n8 tile.
__device__ __forceinline__ int frag_row(int g, int i) { return g + 8 * (i >> 1); }
__device__ __forceinline__ int frag_col(int q, int i) { return 2 * q + (i & 1); }

// C[16×N] = A[16×D] · B[N×D]ᵀ (both row-major, rows D apart): S = Q·Kᵀ and its relatives.
template <class E, int D, int N>
__device__ __forceinline__ void mma_abt(float (&c)[N / 8][4], const E* a, const E* b) {
PTD_UNROLL
    for (int n = 0; n < N / 8; n++) {
PTD_UNROLL
        for (int i = 0; i < 4; i++) c[n][i] = 0.0f;
PTD_UNROLL
        for (int kk = 0; kk < D / 16; kk++) mma_16x8x16(c[n], a + kk * 16, D, 1, b + n * 8 * D + kk * 16, 1, D);
    }
}
// C[16×D] += P[16×K] · V[K×D] (P rows K apart, V rows D apart): O += P·V and its relatives.
template <class E, int D, int K>
__device__ __forceinline__ void mma_ab_acc(float (&c)[D / 8][4], const E* p, const E* v) {
PTD_UNROLL
    for (int n = 0; n < D / 8; n++)
PTD_UNROLL
        for (int kk = 0; kk < K / 16; kk++) mma_16x8x16(c[n], p + kk * 16, K, 1, v + kk * 16 * D + n * 8, D, 1);
}

template <class E, int D>
__global__ void __launch_bounds__(k_flash_fwd_warps * 32)
    flash_fwd_kernel(E* ctx, float* lse, const E* qkv, int64_t T, int H, int G, float scale) {
    constexpr int BR = k_flash_fwd_warps * 16, BC = k_flash_tile;
    PTD_SHARED(E, sq, BR * D);
    PTD_SHARED(E, sk, BC * D);
    PTD_SHARED(E, sv, BC * D);
    PTD_SHARED(E, sp, k_flash_fwd_warps * 16 * BC);
    const int64_t b = blockIdx.z, q0 = (int64_t)blockIdx.x * BR;
    const int h = (int)blockIdx.y, kvh = h / (H / G);
    const int64_t ld = (int64_t)(H + 2 * G) * D;
    const E* base = qkv + b * T * ld;
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, g = lane / 4, q = lane % 4;
    flash_load_tile<E, D>(sq, base + h * D, ld, q0, BR, T);
    const E* qw = sq + warp * 16 * D;
    E* pw = sp + warp * 16 * BC;
    const int64_t row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};  // this lane's query rows
    float o[D / 8][4];
PTD_UNROLL
    for (int n = 0; n < D / 8; n++)
PTD_UNROLL
        for (int i = 0; i < 4; i++) o[n][i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int64_t kend = q0 + BR < T ? q0 + BR : T;  // causal: no key after the tile's last query
    for (int64_t k0 = 0; k0 < kend; k0 += BC) {
        __syncthreads();  // the previous tile's K and V are no longer read (and Q is stored)
        flash_load_tile<E, D>(sk, base + (int64_t)(H + kvh) * D, ld, k0, BC, T);
        flash_load_tile<E, D>(sv, base + (int64_t)(H + G + kvh) * D, ld, k0, BC, T);
        __syncthreads();
        float s[BC / 8][4];
        mma_abt<E, D, BC>(s, qw, sk);
        float mx[2] = {-INFINITY, -INFINITY};
PTD_UNROLL
        for (int n = 0; n < BC / 8; n++)
PTD_UNROLL
            for (int i = 0; i < 4; i++) {
                const int64_t key = k0 + n * 8 + frag_col(q, i), r = row[i >> 1];
                s[n][i] = key <= r && key < T ? scale * s[n][i] : -INFINITY;
                mx[i >> 1] = fmaxf(mx[i >> 1], s[n][i]);
            }
        float alpha[2], sum[2] = {0.0f, 0.0f};
PTD_UNROLL
        for (int r = 0; r < 2; r++) {
            // Key 0 is in the first tile and ≤ every row: m is finite from then on.
            const float m_new = fmaxf(m[r], quad_max(mx[r]));
            alpha[r] = expf(m[r] - m_new);
            m[r] = m_new;
        }
PTD_UNROLL
        for (int n = 0; n < BC / 8; n++)
PTD_UNROLL
            for (int i = 0; i < 4; i++) {
                const float p = expf(s[n][i] - m[i >> 1]);
                sum[i >> 1] += p;
                pw[frag_row(g, i) * BC + n * 8 + frag_col(q, i)] = from_f32<E>(p);
            }
PTD_UNROLL
        for (int r = 0; r < 2; r++) l[r] = l[r] * alpha[r] + quad_sum(sum[r]);
PTD_UNROLL
        for (int n = 0; n < D / 8; n++)
PTD_UNROLL
            for (int i = 0; i < 4; i++) o[n][i] *= alpha[i >> 1];
        __syncwarp();  // the warp's P tile is written
        mma_ab_acc<E, D, BC>(o, pw, sv);
        __syncwarp();  // and read, before the next tile overwrites it
    }
    const int64_t HD = (int64_t)H * D;
PTD_UNROLL
    for (int n = 0; n < D / 8; n++)
PTD_UNROLL
        for (int i = 0; i < 4; i++) {
            const int64_t r = row[i >> 1];
            if (r < T) ctx[(b * T + r) * HD + h * D + n * 8 + frag_col(q, i)] = from_f32<E>(o[n][i] / l[i >> 1]);
        }
    if (q == 0)
PTD_UNROLL
        for (int r = 0; r < 2; r++)
            if (row[r] < T) lse[(b * H + h) * T + row[r]] = m[r] + logf(l[r]);
}

// delta[b, h, t] = Σ_d dctx[b,t,h,d] · ctx[b,t,h,d] (f32): one warp per (b, t, h) row.
template <class E>
__global__ void flash_delta_kernel(float* delta, const E* dctx, const E* ctx, int64_t rows, int64_t T, int H, int D) {
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // (b·T + t)·H + h
    if (r >= rows) return;  // the whole warp leaves together
    float acc = 0.0f;
    for (int d = (int)threadIdx.x % 32; d < D; d += 32) acc += to_f32(dctx[r * D + d]) * to_f32(ctx[r * D + d]);
    acc = warp_reduce_sum(acc);
    const int64_t h = r % H, bt = r / H, b = bt / T, t = bt % T;
    if (threadIdx.x % 32 == 0) delta[(b * H + h) * T + t] = acc;
}

// dK and dV of 32 keys of kv head g (blockIdx.y) of sequence b (blockIdx.z), summed over the
// group's query heads and the queries from the tile's first key on.
template <class E, int D>
__global__ void __launch_bounds__(k_flash_bwd_warps * 32)
    flash_bwd_dkdv_kernel(E* dqkv, const E* dctx, const float* lse, const float* delta, const E* qkv, int64_t T, int H,
                          int G, float scale) {
    // From D = 64 on the dK and dV accumulators take D registers a thread: 16 queries per tile
    // keep Sᵀ and dPᵀ small enough not to spill (cuda_kernel_resources).
    constexpr int BK = k_flash_bwd_warps * 16, BQ = D >= 64 ? 16 : k_flash_tile;
    PTD_SHARED(E, sk, BK * D);
    PTD_SHARED(E, sv, BK * D);
    PTD_SHARED(E, sq, BQ * D);
    PTD_SHARED(E, sdo, BQ * D);
    PTD_SHARED(E, sp, k_flash_bwd_warps * 16 * BQ);
    PTD_SHARED(E, sds, k_flash_bwd_warps * 16 * BQ);
    const int64_t b = blockIdx.z, k0 = (int64_t)blockIdx.x * BK;
    const int kvh = (int)blockIdx.y, rep = H / G;
    const int64_t ld = (int64_t)(H + 2 * G) * D, HD = (int64_t)H * D;
    const E* base = qkv + b * T * ld;
    const E* dbase = dctx + b * T * HD;
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, g = lane / 4, q = lane % 4;
    flash_load_tile<E, D>(sk, base + (int64_t)(H + kvh) * D, ld, k0, BK, T);
    flash_load_tile<E, D>(sv, base + (int64_t)(H + G + kvh) * D, ld, k0, BK, T);
    const E* kw = sk + warp * 16 * D;
    const E* vw = sv + warp * 16 * D;
    E* pw = sp + warp * 16 * BQ;
    E* dsw = sds + warp * 16 * BQ;
    const int64_t key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};  // this lane's keys (rows of Sᵀ)
    float dk[D / 8][4], dv[D / 8][4];
PTD_UNROLL
    for (int n = 0; n < D / 8; n++)
PTD_UNROLL
        for (int i = 0; i < 4; i++) dk[n][i] = dv[n][i] = 0.0f;
    for (int hh = 0; hh < rep; hh++) {
        const int h = kvh * rep + hh;
        const float* lse_h = lse + (b * H + h) * T;
        const float* delta_h = delta + (b * H + h) * T;
        for (int64_t q0 = k0; q0 < T; q0 += BQ) {  // k0 is a multiple of BQ: the diagonal's tile first
            __syncthreads();  // the previous tile's Q and dO are no longer read (and K, V are stored)
            flash_load_tile<E, D>(sq, base + (int64_t)h * D, ld, q0, BQ, T);
            flash_load_tile<E, D>(sdo, dbase + (int64_t)h * D, HD, q0, BQ, T);
            __syncthreads();
            float st[BQ / 8][4], dpt[BQ / 8][4];  // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: rows = keys, columns = queries
            mma_abt<E, D, BQ>(st, kw, sq);
            mma_abt<E, D, BQ>(dpt, vw, sdo);
PTD_UNROLL
            for (int n = 0; n < BQ / 8; n++)
PTD_UNROLL
                for (int i = 0; i < 4; i++) {
                    const int64_t qi = q0 + n * 8 + frag_col(q, i), k = key[i >> 1];
                    const bool live = qi >= k && qi < T && k < T;
                    const float p = live ? expf(scale * st[n][i] - lse_h[qi]) : 0.0f;
                    const float ds = live ? p * (dpt[n][i] - delta_h[qi]) * scale : 0.0f;
                    const int at = frag_row(g, i) * BQ + n * 8 + frag_col(q, i);
                    pw[at] = from_f32<E>(p);
                    dsw[at] = from_f32<E>(ds);
                }
            __syncwarp();  // the warp's Pᵀ and dSᵀ tiles are written
            mma_ab_acc<E, D, BQ>(dv, pw, sdo);
            mma_ab_acc<E, D, BQ>(dk, dsw, sq);
            __syncwarp();  // and read, before the next tile overwrites them
        }
    }
    E* out = dqkv + b * T * ld;
PTD_UNROLL
    for (int n = 0; n < D / 8; n++)
PTD_UNROLL
        for (int i = 0; i < 4; i++) {
            const int64_t k = key[i >> 1];
            if (k >= T) continue;
            const int64_t c = n * 8 + frag_col(q, i);
            out[k * ld + (int64_t)(H + kvh) * D + c] = from_f32<E>(dk[n][i]);
            out[k * ld + (int64_t)(H + G + kvh) * D + c] = from_f32<E>(dv[n][i]);
        }
}

// dQ of 32 queries of head h (blockIdx.y) of sequence b (blockIdx.z): Σ over the key tiles up
// to the diagonal of dS·K.
template <class E, int D>
__global__ void __launch_bounds__(k_flash_bwd_warps * 32)
    flash_bwd_dq_kernel(E* dqkv, const E* dctx, const float* lse, const float* delta, const E* qkv, int64_t T, int H,
                        int G, float scale) {
    constexpr int BR = k_flash_bwd_warps * 16, BC = k_flash_tile;
    PTD_SHARED(E, sq, BR * D);
    PTD_SHARED(E, sdo, BR * D);
    PTD_SHARED(E, sk, BC * D);
    PTD_SHARED(E, sv, BC * D);
    PTD_SHARED(E, sds, k_flash_bwd_warps * 16 * BC);
    const int64_t b = blockIdx.z, q0 = (int64_t)blockIdx.x * BR;
    const int h = (int)blockIdx.y, kvh = h / (H / G);
    const int64_t ld = (int64_t)(H + 2 * G) * D, HD = (int64_t)H * D;
    const E* base = qkv + b * T * ld;
    const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, g = lane / 4, q = lane % 4;
    flash_load_tile<E, D>(sq, base + (int64_t)h * D, ld, q0, BR, T);
    flash_load_tile<E, D>(sdo, dctx + b * T * HD + (int64_t)h * D, HD, q0, BR, T);
    const E* qw = sq + warp * 16 * D;
    const E* dow = sdo + warp * 16 * D;
    E* dsw = sds + warp * 16 * BC;
    const int64_t row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    float row_lse[2], row_delta[2];
PTD_UNROLL
    for (int r = 0; r < 2; r++) {
        row_lse[r] = row[r] < T ? lse[(b * H + h) * T + row[r]] : 0.0f;
        row_delta[r] = row[r] < T ? delta[(b * H + h) * T + row[r]] : 0.0f;
    }
    float dq[D / 8][4];
PTD_UNROLL
    for (int n = 0; n < D / 8; n++)
PTD_UNROLL
        for (int i = 0; i < 4; i++) dq[n][i] = 0.0f;
    const int64_t kend = q0 + BR < T ? q0 + BR : T;
    for (int64_t k0 = 0; k0 < kend; k0 += BC) {
        __syncthreads();
        flash_load_tile<E, D>(sk, base + (int64_t)(H + kvh) * D, ld, k0, BC, T);
        flash_load_tile<E, D>(sv, base + (int64_t)(H + G + kvh) * D, ld, k0, BC, T);
        __syncthreads();
        float s[BC / 8][4], dp[BC / 8][4];  // S = Q·Kᵀ, dP = dO·Vᵀ
        mma_abt<E, D, BC>(s, qw, sk);
        mma_abt<E, D, BC>(dp, dow, sv);
PTD_UNROLL
        for (int n = 0; n < BC / 8; n++)
PTD_UNROLL
            for (int i = 0; i < 4; i++) {
                const int64_t k = k0 + n * 8 + frag_col(q, i), r = row[i >> 1];
                const bool live = k <= r && k < T && r < T;
                const float p = live ? expf(scale * s[n][i] - row_lse[i >> 1]) : 0.0f;
                dsw[frag_row(g, i) * BC + n * 8 + frag_col(q, i)] =
                    from_f32<E>(live ? p * (dp[n][i] - row_delta[i >> 1]) * scale : 0.0f);
            }
        __syncwarp();
        mma_ab_acc<E, D, BC>(dq, dsw, sk);
        __syncwarp();
    }
    E* out = dqkv + b * T * ld;
PTD_UNROLL
    for (int n = 0; n < D / 8; n++)
PTD_UNROLL
        for (int i = 0; i < 4; i++) {
            const int64_t r = row[i >> 1];
            if (r < T) out[r * ld + (int64_t)h * D + n * 8 + frag_col(q, i)] = from_f32<E>(dq[n][i]);
        }
}

inline void check_flash(const char* op, DType t, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
    PTD_KERNEL_REQUIRE(t == DType::bf16 || t == DType::f16, op, "flash attention stores bf16 or f16");
    PTD_KERNEL_REQUIRE(B >= 0 && T >= 0 && H > 0 && G > 0 && H % G == 0, op, "bad B, T, H or G");
    PTD_KERNEL_REQUIRE(D == 16 || D == 32 || D == 64 || D == 128, op, "head size must be 16, 32, 64 or 128");
    PTD_KERNEL_REQUIRE(B < 65536 && H < 65536 && T < (int64_t(1) << 31), op, "B, H or T beyond the grid");
}

// Calls f(E{}, std::integral_constant<int, D>{}) for the storage type and head size.
template <class F>
inline void dispatch_flash(DType t, int64_t D, F&& f) {
    dispatch_type(t, "flash attention", [&](auto e) {
        using E = decltype(e);
        if constexpr (sizeof(E) == 2) {
            switch (D) {
                case 16: return f(e, std::integral_constant<int, 16>{});
                case 32: return f(e, std::integral_constant<int, 32>{});
                case 64: return f(e, std::integral_constant<int, 64>{});
                default: return f(e, std::integral_constant<int, 128>{});
            }
        }
    });
}

}  // namespace ptd::cuda::PTD_CUDA_NS::kern

namespace ptd::cuda::PTD_CUDA_NS {

void flash_attention_forward(DType t, void* ctx, float* lse, const void* qkv, int64_t B, int64_t T, int64_t H,
                             int64_t G, int64_t D, StreamHandle stream) {
    using namespace kern;
    check_flash("flash_attention_forward", t, B, T, H, G, D);
    if (B == 0 || T == 0) return;
    const float scale = 1.0f / std::sqrt((float)D);
    dispatch_flash(t, D, [&](auto e, auto d) {
        using E = decltype(e);
        constexpr int DH = decltype(d)::value;
        const dim3 grid((unsigned)ceil_div(T, k_flash_fwd_warps * 16), (unsigned)H, (unsigned)B);
        // Launched by name, so the launch-shape record (cuda_resources.cmake) can match each kernel.
        PTD_LAUNCH((flash_fwd_kernel<E, DH>), grid, k_flash_fwd_warps * 32, 0, stream, static_cast<E*>(ctx), lse, static_cast<const E*>(qkv), T,
                   (int)H, (int)G, scale);
    });
}

int64_t flash_attention_backward_workspace_bytes(int64_t B, int64_t T, int64_t H) {
    return B * H * T * (int64_t)sizeof(float);
}

void flash_attention_backward(DType t, void* dqkv, const void* dctx, const void* ctx, const float* lse,
                              const void* qkv, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, float* workspace,
                              StreamHandle stream) {
    using namespace kern;
    check_flash("flash_attention_backward", t, B, T, H, G, D);
    if (B == 0 || T == 0) return;
    const float scale = 1.0f / std::sqrt((float)D);
    float* delta = workspace;  // [B, H, T]
    dispatch_flash(t, D, [&](auto e, auto d) {
        using E = decltype(e);
        constexpr int DH = decltype(d)::value;
        const int64_t rows = B * T * H;
        PTD_LAUNCH((flash_delta_kernel<E>), (unsigned)ceil_div(rows, 8), 256, 0, stream, delta, static_cast<const E*>(dctx),
                   static_cast<const E*>(ctx), rows, T, (int)H, (int)DH);
        PTD_LAUNCH((flash_bwd_dkdv_kernel<E, DH>), dim3((unsigned)ceil_div(T, k_flash_bwd_warps * 16), (unsigned)G, (unsigned)B),
                   k_flash_bwd_warps * 32, 0, stream, static_cast<E*>(dqkv), static_cast<const E*>(dctx), lse, delta,
                   static_cast<const E*>(qkv), T, (int)H, (int)G, scale);
        PTD_LAUNCH((flash_bwd_dq_kernel<E, DH>), dim3((unsigned)ceil_div(T, k_flash_bwd_warps * 16), (unsigned)H, (unsigned)B),
                   k_flash_bwd_warps * 32, 0, stream, static_cast<E*>(dqkv), static_cast<const E*>(dctx), lse, delta,
                   static_cast<const E*>(qkv), T, (int)H, (int)G, scale);
    });
}

}  // namespace ptd::cuda::PTD_CUDA_NS
