// xent.cuh — vocab-parallel cross entropy (Megatron's protocol), all f32.
//
// logits [rows, Vl] (f32: the output GEMM writes f32 in every precision) hold the columns
// v0 .. v0 + Vl − 1 of the padded vocabulary; only global columns < V_valid take part
// (nv = clamp(V_valid − v0, 0, Vl) local columns). With tensor parallelism the row max and
// the sums need the whole row, so the CPU backend's four phases stay four kernels, with the
// caller's all-reduces between them:
//   xent_row_max   rowmax[r]                          (then all-reduce max over TP)
//   xent_sums      sumexp[r], target_logit[r]         (then all-reduce sum over TP)
//   xent_finish    loss[r]; logits → probabilities in place
//   xent_backward  dlogits = scale · (probs − onehot(target)), may alias probs
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

// dlogits[r,c] = scale · (probs[r,c] − [c = target]) for valid c, else 0. Element-wise, so
// dlogits may alias probs.
template <int N>
__global__ void xent_backward_kernel(float* dlogits, const float* probs, const int32_t* targets, float scale,
                                     int64_t Vl, int64_t v0, int64_t nv) {
    const int64_t r = blockIdx.x;
    const float* pr = probs + r * Vl;
    float* dr = dlogits + r * Vl;
    const int64_t t = (int64_t)targets[r] - v0;  // may be outside [0, nv): then no column is the target
    for (int64_t j = threadIdx.x; j * N < Vl; j += blockDim.x) {
        float x[N];
        load_n<float, N>(pr + j * N, x);
PTD_UNROLL
        for (int k = 0; k < N; k++) {
            const int64_t c = j * N + k;
            x[k] = c >= nv ? 0.0f : (c == t ? scale * (x[k] - 1.0f) : scale * x[k]);
        }
        store_n<float, N>(dr + j * N, x);
    }
}

// tp = 1 (or any shard that holds every valid column): loss[r] and, when dlogits is not
// null, dlogits = scale · (softmax − onehot) in one launch. dlogits may alias logits.
template <int N>
__global__ void xent_fused_kernel(float* loss, float* dlogits, const float* logits, const int32_t* targets,
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
    float* dr = dlogits + r * Vl;
    for (int64_t j = threadIdx.x; j * N < Vl; j += blockDim.x) {
        float x[N];
        load_n<float, N>(lr + j * N, x);
PTD_UNROLL
        for (int k = 0; k < N; k++) {
            const int64_t c = j * N + k;
            const float p = c < nv ? expf(x[k] - mx) * inv : 0.0f;
            x[k] = c >= nv ? 0.0f : (c == t ? scale * (p - 1.0f) : scale * p);
        }
        store_n<float, N>(dr + j * N, x);
    }
}

inline int64_t xent_valid_columns(int64_t Vl, int64_t v0, int64_t V_valid) {
    const int64_t nv = V_valid - v0;
    return nv < 0 ? 0 : nv > Vl ? Vl : nv;
}

// Launches kernel<k_vec> when every row can be read by 8-column vectors, else kernel<1>;
// one block per row (blockIdx.x, up to 2³¹ − 1 rows).
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

void xent_backward(float* dlogits, const float* probs, const int32_t* targets, float scale, int64_t rows, int64_t Vl,
                   int64_t v0, int64_t V_valid, StreamHandle stream) {
    using namespace kern;
    check_xent("xent_backward", rows, Vl);
    if (rows == 0) return;
    const bool vec = Vl % k_vec == 0 && all_aligned16(probs, dlogits);
    PTD_XENT_LAUNCH(xent_backward_kernel, vec, rows, stream, dlogits, probs, targets, scale, Vl, v0,
                    xent_valid_columns(Vl, v0, V_valid));
}

void xent_fused(float* loss, float* dlogits, const float* logits, const int32_t* targets, float scale, int64_t rows,
                int64_t Vl, int64_t v0, int64_t V_valid, StreamHandle stream) {
    using namespace kern;
    check_xent("xent_fused", rows, Vl);
    if (rows == 0) return;
    const bool vec = Vl % k_vec == 0 && all_aligned16(logits) && (dlogits == nullptr || aligned16(dlogits));
    PTD_XENT_LAUNCH(xent_fused_kernel, vec, rows, stream, loss, dlogits, logits, targets, scale, Vl, v0,
                    xent_valid_columns(Vl, v0, V_valid));
}

#undef PTD_XENT_LAUNCH

}  // namespace ptd::cuda::PTD_CUDA_NS
