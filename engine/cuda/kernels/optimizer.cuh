// optimizer.cuh — AdamW as one multi-tensor launch over the fp32 master shard.
//
// The list of tensors (AdamWTensor, device memory, built once at start-up) is sliced as
// one concatenated buffer: block b updates elements [b·k_adamw_per_block, …) of the
// concatenation, whichever tensors they fall in, so one launch covers every parameter of
// the shard however many tensors it has. Per element, exactly the CPU backend's f32
// arithmetic in the same order, each operation rounded on its own (__fmul_rn & co. under
// nvcc, which never contracts them into FMAs; the simulator build, like the CPU backend,
// targets baseline x86-64, which has no FMA to contract into), so the updated master
// weights and moments are the same bits as the CPU backend's; the 16-bit model weights the
// next forward reads are rounded from them to nearest even.
//
// The factor on g (clip scale / loss scale) and the found-inf flag come from the device
// step scalars (finish_step_scalars): nothing is read back to the host; a step with
// found-inf ≠ 0 leaves everything as it is.
//
// Shapes: per entry, p, g, m, v [n] (f32) — p the master weights (or the parameters
// themselves in fp32 training) — and model_p [n] (MT) or null.
#pragma once

#include <cmath>

#include "common.cuh"
#include "reduce.cuh"  // tensor_list_find

namespace ptd::cuda::PTD_CUDA_NS::kern {

constexpr int k_adamw_threads = 256;
constexpr int64_t k_adamw_per_block = 4 * k_adamw_threads;

// One IEEE operation each, rounded to nearest even, never fused with its neighbour.
#if defined(__CUDACC__) && !defined(PTD_CUDA_SIM)
__device__ __forceinline__ float op_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float op_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float op_sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float op_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float op_sqrt(float a) { return __fsqrt_rn(a); }
#else
inline float op_mul(float a, float b) { return a * b; }
inline float op_add(float a, float b) { return a + b; }
inline float op_sub(float a, float b) { return a - b; }
inline float op_div(float a, float b) { return a / b; }
inline float op_sqrt(float a) { return std::sqrt(a); }
#endif

// Elements [a, b) of one tensor, strided over the block's threads.
template <class MT>
__device__ __forceinline__ void adamw_elements(const AdamWTensor& e, int64_t a, int64_t b, float lr, float beta1,
                                               float beta2, float eps, float inv_bc1, float inv_bc2,
                                               float grad_scale) {
    const float one_m_b1 = op_sub(1.0f, beta1), one_m_b2 = op_sub(1.0f, beta2);
    MT* model = static_cast<MT*>(e.model_p);
    for (int64_t i = a + threadIdx.x; i < b; i += blockDim.x) {
        // p −= lr·(m̂/(√v̂ + eps) + wd·p), in the CPU backend's order of operations.
        const float gi = op_mul(e.g[i], grad_scale);
        const float mi = op_add(op_mul(beta1, e.m[i]), op_mul(one_m_b1, gi));
        const float vi = op_add(op_mul(beta2, e.v[i]), op_mul(op_mul(one_m_b2, gi), gi));
        e.m[i] = mi;
        e.v[i] = vi;
        const float mhat = op_mul(mi, inv_bc1), vhat = op_mul(vi, inv_bc2);
        const float pi = e.p[i];
        const float step = op_add(op_div(mhat, op_add(op_sqrt(vhat), eps)), op_mul(e.weight_decay, pi));
        const float pn = op_sub(pi, op_mul(lr, step));
        e.p[i] = pn;
        if (model) model[i] = from_f32<MT>(pn);
    }
}

template <class MT>
__global__ void adamw_kernel(const AdamWTensor* list, int count, int64_t total, float lr, float beta1, float beta2,
                             float eps, float inv_bc1, float inv_bc2, const double* scalars) {
    if (scalars[k_step_scalar_found_inf] != 0.0) return;  // skipped step
    const float grad_scale = (float)scalars[k_step_scalar_grad_scale];  // unscale and clip
    const int64_t lo = (int64_t)blockIdx.x * k_adamw_per_block;
    const int64_t hi = lo + k_adamw_per_block < total ? lo + k_adamw_per_block : total;
    if (lo >= hi) return;
    for (int k = tensor_list_find(list, count, lo); k < count && list[k].start < hi; k++) {
        const AdamWTensor e = list[k];
        const int64_t a = (lo > e.start ? lo : e.start) - e.start;
        const int64_t b = (hi < e.start + e.n ? hi : e.start + e.n) - e.start;
        adamw_elements<MT>(e, a, b, lr, beta1, beta2, eps, inv_bc1, inv_bc2, grad_scale);
    }
}

// One tensor passed by value (no device list): block b updates [b·k_adamw_per_block, …).
template <class MT>
__global__ void adamw_one_kernel(AdamWTensor e, float lr, float beta1, float beta2, float eps, float inv_bc1,
                                 float inv_bc2, const double* scalars) {
    if (scalars[k_step_scalar_found_inf] != 0.0) return;  // skipped step
    const float grad_scale = (float)scalars[k_step_scalar_grad_scale];
    const int64_t lo = (int64_t)blockIdx.x * k_adamw_per_block;
    const int64_t hi = lo + k_adamw_per_block < e.n ? lo + k_adamw_per_block : e.n;
    if (lo < hi) adamw_elements<MT>(e, lo, hi, lr, beta1, beta2, eps, inv_bc1, inv_bc2, grad_scale);
}

}  // namespace ptd::cuda::PTD_CUDA_NS::kern

namespace ptd::cuda::PTD_CUDA_NS {

namespace {
// The bias corrections exactly as the CPU backend forms them (double power, f32 inverse).
void adamw_bias_corrections(float beta1, float beta2, int64_t step, float* inv_bc1, float* inv_bc2) {
    const auto bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step)));
    const auto bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step)));
    *inv_bc1 = 1.0f / bc1, *inv_bc2 = 1.0f / bc2;
}
}  // namespace

void adamw_range(float* p, const float* g, float* m, float* v, void* model_p, int64_t n, float lr, float beta1,
                 float beta2, float eps, float weight_decay, int64_t step, const double* scalars, DType model_t,
                 StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(step >= 1, "adamw_range", "step < 1 (steps count from 1)");
    PTD_KERNEL_REQUIRE(n >= 0, "adamw_range", "n < 0");
    if (n == 0) return;
    float inv_bc1, inv_bc2;
    adamw_bias_corrections(beta1, beta2, step, &inv_bc1, &inv_bc2);
    const AdamWTensor e{p, g, m, v, model_p, n, 0, weight_decay};
    const unsigned blocks = (unsigned)ceil_div(n, k_adamw_per_block);
    dispatch_type(model_p ? model_t : DType::f32, "adamw_range", [&](auto tag) {
        using MT = decltype(tag);
        auto kernel = adamw_one_kernel<MT>;
        PTD_LAUNCH(kernel, blocks, k_adamw_threads, 0, stream, e, lr, beta1, beta2, eps, inv_bc1, inv_bc2, scalars);
    });
}

void adamw(const AdamWTensor* list, int count, int64_t total, float lr, float beta1, float beta2, float eps,
           int64_t step, const double* scalars, DType model_t, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(step >= 1, "adamw", "step < 1 (steps count from 1)");
    PTD_KERNEL_REQUIRE(count >= 0 && total >= 0, "adamw", "negative count or total");
    if (count == 0 || total == 0) return;
    float inv_bc1, inv_bc2;
    adamw_bias_corrections(beta1, beta2, step, &inv_bc1, &inv_bc2);
    const unsigned blocks = (unsigned)ceil_div(total, k_adamw_per_block);
    dispatch_type(model_t, "adamw", [&](auto tag) {
        using MT = decltype(tag);
        auto kernel = adamw_kernel<MT>;
        PTD_LAUNCH(kernel, blocks, k_adamw_threads, 0, stream, list, count, total, lr, beta1, beta2, eps, inv_bc1,
                   inv_bc2, scalars);
    });
}

}  // namespace ptd::cuda::PTD_CUDA_NS
