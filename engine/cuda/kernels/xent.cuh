// xent.cuh — vocab-parallel cross entropy (Megatron's protocol): f32 logits, softmax and
// loss; dlogits f32 or, in mixed precision, 16-bit written over the logits in place (llm.c).
//
// logits [rows, Vl] (f32: the output GEMM writes f32 in every precision) hold the columns
// v0 .. v0 + Vl − 1 of the padded vocabulary; only global columns < V_valid take part
// (nv = clamp(V_valid − v0, 0, Vl) local columns). With tensor parallelism the row max and
// the sums need the whole row, so the CPU backend's four phases stay four kernels, with the
// caller's all-reduces between them:
//   xent_row_max   rowmax[r]                          (then all-reduce max over TP)
//   xent_sums      sumexp[r], target_logit[r]         (then all-reduce sum over TP)
//   xent_finish    loss[r]; logits → probabilities in place
//   xent_backward  dlogits = scale · (probs − onehot(target)), may alias probs (f32, or
//                  16-bit in the first half of each f32 row: kernels.h)
// With tp = 1 one launch does it all (xent_fused): pass 1 keeps a running (max, Σexp) per
// thread over the row (online softmax, one read), the block combines them; pass 2 reads
// the row again (from L2) and writes loss and dlogits — no probabilities round trip.
//
// One block per row (a vocabulary row is 50k+ columns); the block reductions are the
// dialect's fixed-order trees, so results are deterministic; no atomics. A thread reads 8
// columns per access (two 128-bit loads) when Vl is a multiple of 8 and the buffers are
// 16-byte aligned (the padded vocabulary is), else one.
#pragma once

#include "common.cuh"

namespace ptd::cuda::PTD_CUDA_NS::kern {

constexpr int k_xent_threads = 512;

// rowmax[r] = max of the nv valid columns of row r; −inf when there are none (the max
// all-reduce then ignores this shard).
template <int N>
__global__ void xent_row_max_kernel(float* rowmax, const float* logits, int64_t Vl, int64_t nv) {
    PTD_SHARED(float, red, 32);
    const int64_t r = blockIdx.x;
    const float* lr = logits + r * Vl;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j * N < nv; j += blockDim.x) {
        float x[N];
        load_n<float, N>(lr + j * N, x);
PTD_UNROLL
        for (int k = 0; k < N; k++)
            if (j * N + k < nv) mx = fmaxf(mx, x[k]);
    }
    mx = block_reduce_max(mx, red);
    if (threadIdx.x == 0) rowmax[r] = mx;
}

// sumexp[r] = Σ_valid exp(logits[r,c] − rowmax[r]); target_logit[r] = logits[r, t − v0]
// when the target is a valid column of this shard, else 0.
template <int N>
__global__ void xent_sums_kernel(float* sumexp, float* target_logit, const float* logits, const float* rowmax,
                                 const int32_t* targets, int64_t Vl, int64_t v0, int64_t nv) {
    PTD_SHARED(float, red, 32);
    const int64_t r = blockIdx.x;
    const float* lr = logits + r * Vl;
    const float mx = rowmax[r];
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j * N < nv; j += blockDim.x) {
        float x[N];
        load_n<float, N>(lr + j * N, x);
PTD_UNROLL
        for (int k = 0; k < N; k++)
            if (j * N + k < nv) s += expf(x[k] - mx);
    }
    s = block_reduce_sum(s, red);
    if (threadIdx.x == 0) {
        sumexp[r] = s;
        const int64_t t = (int64_t)targets[r] - v0;
        target_logit[r] = (t >= 0 && t < nv) ? lr[t] : 0.0f;
    }
}

// loss[r] = log(sumexp[r]) + rowmax[r] − target_logit[r]; the row becomes softmax
// probabilities in place (columns ≥ nv are 0). Each element is read and written by one thread.
template <int N>
__global__ void xent_finish_kernel(float* loss, float* logits, const float* rowmax, const float* sumexp,
                                   const float* target_logit, int64_t Vl, int64_t nv) {
    const int64_t r = blockIdx.x;
    float* lr = logits + r * Vl;
    const float mx = rowmax[r], inv = 1.0f / sumexp[r];
    for (int64_t j = threadIdx.x; j * N < Vl; j += blockDim.x) {
        float x[N];
        load_n<float, N>(lr + j * N, x);
PTD_UNROLL
        for (int k = 0; k < N; k++) x[k] = (j * N + k < nv) ? expf(x[k] - mx) * inv : 0.0f;
        store_n<float, N>(lr + j * N, x);
    }
    if (threadIdx.x == 0) loss[r] = logf(sumexp[r]) + mx - target_logit[r];
}

// Row r of dlogits stored as OutT: f32 [rows, Vl], or 16-bit with rows 2·Vl elements apart
// (in the first half of the bytes of f32 row r, so that it can overwrite the logits in place).
template <class OutT>
__device__ __forceinline__ OutT* dlogits_row(void* dlogits, int64_t r, int64_t Vl) {
    return reinterpret_cast<OutT*>(static_cast<char*>(dlogits) + r * Vl * (int64_t)sizeof(float));
}

// Pass over row r in chunks of blockDim.x · N columns, in increasing order: value(c, x)
// turns the f32 values x read at columns c.. into dlogits, stored as OutT at the same
// columns. 16-bit results written over the f32 row they are computed from land on f32
// columns below the chunk's end: the barrier between a chunk's reads and its stores keeps
// every thread's reads of the chunk ahead of any thread's store (the trip count is the same
// for every thread of the block, so the barrier is uniform).
template <int N, class OutT, class Value>
__device__ __forceinline__ void xent_store_row(OutT* dr, const float* src, int64_t Vl, Value value) {
    for (int64_t base = 0; base < Vl; base += (int64_t)blockDim.x * N) {
        const int64_t j = base / N + threadIdx.x;
        const bool mine = j * N < Vl;
        float x[N];
        if (mine) {
            load_n<float, N>(src + j * N, x);
PTD_UNROLL
            for (int k = 0; k < N; k++) x[k] = value(j * N + k, x[k]);
        }
        if constexpr (sizeof(OutT) == 2) __syncthreads();
        if (mine) store_n<OutT, N>(dr + j * N, x);
    }
}

// dlogits[r,c] = scale · (probs[r,c] − [c = target]) for valid c, else 0. Element-wise, so
// dlogits may alias probs (16-bit OutT: in place as xent_store_row says).
template <int N, class OutT>
__global__ void xent_backward_kernel(void* dlogits, const float* probs, const int32_t* targets, float scale,
                                     int64_t Vl, int64_t v0, int64_t nv) {
    const int64_t r = blockIdx.x;
    const int64_t t = (int64_t)targets[r] - v0;  // may be outside [0, nv): then no column is the target
    xent_store_row<N>(dlogits_row<OutT>(dlogits, r, Vl), probs + r * Vl, Vl, [&](int64_t c, float p) {
        return c >= nv ? 0.0f : (c == t ? scale * (p - 1.0f) : scale * p);
    });
}

// tp = 1 (or any shard that holds every valid column): loss[r] and, when dlogits is not
// null, dlogits = scale · (softmax − onehot) in one launch. dlogits may alias logits.
template <int N, class OutT>
__global__ void xent_fused_kernel(float* loss, void* dlogits, const float* logits, const int32_t* targets,
                                  float scale, int64_t Vl, int64_t v0, int64_t nv) {
    PTD_SHARED(float, red_max, 32);
    PTD_SHARED(float, red_sum, 32);
    const int64_t r = blockIdx.x;
    const float* lr = logits + r * Vl;
    const int64_t t = (int64_t)targets[r] - v0;
    // Read before any thread can overwrite the row (the reductions below are barriers).
    const float x_target = (threadIdx.x == 0 && t >= 0 && t < nv) ? lr[t] : 0.0f;

    // Pass 1: this thread's running max m and Σ exp(x − m), rescaled when m grows.
    float m = -INFINITY, s = 0.0f;
    for (int64_t j = threadIdx.x; j * N < nv; j += blockDim.x) {
        float x[N];
        load_n<float, N>(lr + j * N, x);
PTD_UNROLL
        for (int k = 0; k < N; k++) {
            if (j * N + k >= nv) continue;
            if (x[k] > m) {
                s = s * expf(m - x[k]) + 1.0f;
                m = x[k];
            } else {
                s += expf(x[k] - m);
            }
        }
    }
    const float mx = block_reduce_max(m, red_max);
    const float sum = block_reduce_sum(m == -INFINITY ? 0.0f : s * expf(m - mx), red_sum);
    if (threadIdx.x == 0) loss[r] = logf(sum) + mx - x_target;
    if (dlogits == nullptr) return;

    // Pass 2: probabilities as xent_finish rounds them, then the gradient as xent_backward.
    const float inv = 1.0f / sum;
    xent_store_row<N>(dlogits_row<OutT>(dlogits, r, Vl), lr, Vl, [&](int64_t c, float x) {
        const float p = c < nv ? expf(x - mx) * inv : 0.0f;
        return c >= nv ? 0.0f : (c == t ? scale * (p - 1.0f) : scale * p);
    });
}

inline int64_t xent_valid_columns(int64_t Vl, int64_t v0, int64_t V_valid) {
    const int64_t nv = V_valid - v0;
    return nv < 0 ? 0 : nv > Vl ? Vl : nv;
}

// Launches kernel<k_vec> when every row can be read by 8-column vectors, else kernel<1>;
// one block per row (blockIdx.x, up to 2³¹ − 1 rows). PTD_XENT_LAUNCH_OUT does the same for
// the kernels that store dlogits, instantiated for its storage type OutT.
#define PTD_XENT_LAUNCH(kernel, vec, rows, stream, ...)                                     \
    do {                                                                                  \
        if (vec) {                                                                        \
            auto k_ = kernel<k_vec>;                                                      \
            PTD_LAUNCH(k_, (unsigned)(rows), k_xent_threads, 0, stream, __VA_ARGS__);     \
        } else {                                                                          \
            auto k_ = kernel<1>;                                                          \
            PTD_LAUNCH(k_, (unsigned)(rows), k_xent_threads, 0, stream, __VA_ARGS__);     \
        }                                                                                 \
    } while (0)
#define PTD_XENT_LAUNCH_OUT(kernel, out_t, vec, rows, stream, ...)                               \
    dispatch_type(out_t, #kernel, [&](auto out_type) {                                         \
        using OutT = decltype(out_type);                                                       \
        if (vec) {                                                                             \
            auto k_ = kernel<k_vec, OutT>;                                                     \
            PTD_LAUNCH(k_, (unsigned)(rows), k_xent_threads, 0, stream, __VA_ARGS__);          \
        } else {                                                                               \
            auto k_ = kernel<1, OutT>;                                                         \
            PTD_LAUNCH(k_, (unsigned)(rows), k_xent_threads, 0, stream, __VA_ARGS__);          \
        }                                                                                      \
    })

inline void check_xent(const char* op, int64_t rows, int64_t Vl) {
    PTD_KERNEL_REQUIRE(rows >= 0 && Vl >= 0, op, "negative shape");
    PTD_KERNEL_REQUIRE(rows < (int64_t(1) << 31), op, "more than 2^31 - 1 rows");
}

}  // namespace ptd::cuda::PTD_CUDA_NS::kern

namespace ptd::cuda::PTD_CUDA_NS {

void xent_row_max(float* rowmax, const float* logits, int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid,
                  StreamHandle stream) {
    using namespace kern;
    check_xent("xent_row_max", rows, Vl);
    if (rows == 0) return;
    const bool vec = Vl % k_vec == 0 && all_aligned16(logits);
    PTD_XENT_LAUNCH(xent_row_max_kernel, vec, rows, stream, rowmax, logits, Vl, xent_valid_columns(Vl, v0, V_valid));
}

void xent_sums(float* sumexp, float* target_logit, const float* logits, const float* rowmax, const int32_t* targets,
               int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid, StreamHandle stream) {
    using namespace kern;
    check_xent("xent_sums", rows, Vl);
    if (rows == 0) return;
    const bool vec = Vl % k_vec == 0 && all_aligned16(logits);
    PTD_XENT_LAUNCH(xent_sums_kernel, vec, rows, stream, sumexp, target_logit, logits, rowmax, targets, Vl, v0,
                    xent_valid_columns(Vl, v0, V_valid));
}

void xent_finish(float* loss, float* logits, const float* rowmax, const float* sumexp, const float* target_logit,
                 int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid, StreamHandle stream) {
    using namespace kern;
    check_xent("xent_finish", rows, Vl);
    if (rows == 0) return;
    const bool vec = Vl % k_vec == 0 && all_aligned16(logits);
    PTD_XENT_LAUNCH(xent_finish_kernel, vec, rows, stream, loss, logits, rowmax, sumexp, target_logit, Vl,
                    xent_valid_columns(Vl, v0, V_valid));
}

void xent_backward(void* dlogits, DType dlogits_t, const float* probs, const int32_t* targets, float scale,
                   int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid, StreamHandle stream) {
    using namespace kern;
    check_xent("xent_backward", rows, Vl);
    if (rows == 0) return;
    const bool vec = Vl % k_vec == 0 && all_aligned16(probs, dlogits);
    PTD_XENT_LAUNCH_OUT(xent_backward_kernel, dlogits_t, vec, rows, stream, dlogits, probs, targets, scale, Vl, v0,
                        xent_valid_columns(Vl, v0, V_valid));
}

void xent_fused(float* loss, void* dlogits, DType dlogits_t, const float* logits, const int32_t* targets, float scale,
                int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid, StreamHandle stream) {
    using namespace kern;
    check_xent("xent_fused", rows, Vl);
    if (rows == 0) return;
    const bool vec = Vl % k_vec == 0 && all_aligned16(logits) && (dlogits == nullptr || aligned16(dlogits));
    PTD_XENT_LAUNCH_OUT(xent_fused_kernel, dlogits_t, vec, rows, stream, loss, dlogits, logits, targets, scale, Vl,
                        v0, xent_valid_columns(Vl, v0, V_valid));
}

#undef PTD_XENT_LAUNCH
#undef PTD_XENT_LAUNCH_OUT

}  // namespace ptd::cuda::PTD_CUDA_NS
