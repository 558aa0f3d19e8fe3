// elementwise.cuh — memory-bound element-wise kernels: fill, convert (any pair of f32 / bf16
// / f16), add (y += x), scale (f32), and the generic map kernel the activations reuse.
//
// One thread handles k_vec = 8 consecutive elements per grid-stride step with 128-bit loads
// and stores (one per 8 bf16/f16, two per 8 f32) when every pointer is 16-byte aligned;
// the last n % 8 elements (the tail) are done one per thread after the vector part. When a
// pointer is not aligned (a slice at an odd offset) the whole op runs the scalar
// instantiation. Arithmetic in f32, 16-bit results rounded once on store.
#pragma once

#include "common.cuh"

namespace ptd::cuda::PTD_CUDA_NS::kern {

constexpr int k_map_threads = 256;

// Up to three inputs of type TIn and two outputs of type TOut, all [n]; op(in, out) maps
// one element's f32 inputs to its f32 outputs. An output may be one of the inputs (in
// place): each element is read and written by the same thread, reads first.
template <class T, int N>
struct Ptrs {
    T* p[N > 0 ? N : 1];
};

template <class TOut, class TIn, int NIn, int NOut, class Op, bool kVec>
__global__ void map_kernel(Op op, Ptrs<TOut, NOut> out, Ptrs<const TIn, NIn> in, int64_t n) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    int64_t vec_end = 0;
    if constexpr (kVec) {
        // n, x ---- [0, vec_end) by 8-element vectors | [vec_end, n) the scalar tail
        vec_end = n / k_vec * k_vec;
        for (int64_t i = tid * k_vec; i < vec_end; i += stride * k_vec) {
            float a[NIn > 0 ? NIn : 1][k_vec], r[NOut][k_vec];
PTD_UNROLL
            for (int j = 0; j < NIn; j++) load_vec(in.p[j] + i, a[j]);
PTD_UNROLL
            for (int k = 0; k < k_vec; k++) {
                float ak[NIn > 0 ? NIn : 1], rk[NOut];
PTD_UNROLL
                for (int j = 0; j < NIn; j++) ak[j] = a[j][k];
                op(ak, rk);
PTD_UNROLL
                for (int j = 0; j < NOut; j++) r[j][k] = rk[j];
            }
PTD_UNROLL
            for (int j = 0; j < NOut; j++) store_vec(out.p[j] + i, r[j]);
        }
    }
    for (int64_t i = vec_end + tid; i < n; i += stride) {
        float ak[NIn > 0 ? NIn : 1], rk[NOut];
PTD_UNROLL
        for (int j = 0; j < NIn; j++) ak[j] = to_f32(in.p[j][i]);
        op(ak, rk);
PTD_UNROLL
        for (int j = 0; j < NOut; j++) out.p[j][i] = from_f32<TOut>(rk[j]);
    }
}

// Launches map_kernel: the vector instantiation when every pointer is 16-byte aligned.
template <class TOut, class TIn, int NIn, int NOut, class Op>
void launch_map(Op op, Ptrs<TOut, NOut> out, Ptrs<const TIn, NIn> in, int64_t n, StreamHandle stream) {
    if (n <= 0) return;
    bool vec = true;
    for (int j = 0; j < NOut; j++) vec = vec && aligned16(out.p[j]);
    for (int j = 0; j < NIn; j++) vec = vec && aligned16(in.p[j]);
    const int64_t work = vec ? ceil_div(n, k_vec) : n;
    const unsigned grid = grid_for(work, k_map_threads);
    if (vec) {
        auto kernel = map_kernel<TOut, TIn, NIn, NOut, Op, true>;
        PTD_LAUNCH(kernel, grid, k_map_threads, 0, stream, op, out, in, n);
    } else {
        auto kernel = map_kernel<TOut, TIn, NIn, NOut, Op, false>;
        PTD_LAUNCH(kernel, grid, k_map_threads, 0, stream, op, out, in, n);
    }
}

struct FillOp {
    float value;
    __device__ __forceinline__ void operator()(const float (&)[1], float (&r)[1]) const { r[0] = value; }
};
struct CopyOp {
    __device__ __forceinline__ void operator()(const float (&a)[1], float (&r)[1]) const { r[0] = a[0]; }
};
struct AddOp {  // in: y, x
    __device__ __forceinline__ void operator()(const float (&a)[2], float (&r)[1]) const { r[0] = a[0] + a[1]; }
};
struct ScaleOp {
    float a;
    __device__ __forceinline__ void operator()(const float (&x)[1], float (&r)[1]) const { r[0] = x[0] * a; }
};

}  // namespace ptd::cuda::PTD_CUDA_NS::kern

namespace ptd::cuda::PTD_CUDA_NS {

void fill(void* x, DType t, float value, int64_t n, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(n >= 0, "fill", "n < 0");
    dispatch_type(t, "fill", [&](auto tag) {
        using T = decltype(tag);
        launch_map<T, T, 0, 1>(FillOp{value}, Ptrs<T, 1>{{static_cast<T*>(x)}}, Ptrs<const T, 0>{}, n, stream);
    });
}

void convert(void* dst, DType dst_t, const void* src, DType src_t, int64_t n, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(n >= 0, "convert", "n < 0");
    if (dst == src && dst_t == src_t) return;
    PTD_KERNEL_REQUIRE(dst != src, "convert", "dst == src with different types (no in-place conversion)");
    dispatch_type(dst_t, "convert", [&](auto dtag) {
        using TD = decltype(dtag);
        dispatch_type(src_t, "convert", [&](auto stag) {
            using TS = decltype(stag);
            launch_map<TD, TS, 1, 1>(CopyOp{}, Ptrs<TD, 1>{{static_cast<TD*>(dst)}},
                                     Ptrs<const TS, 1>{{static_cast<const TS*>(src)}}, n, stream);
        });
    });
}

void add(void* y, const void* x, DType t, int64_t n, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(n >= 0, "add", "n < 0");
    dispatch_type(t, "add", [&](auto tag) {
        using T = decltype(tag);
        launch_map<T, T, 2, 1>(AddOp{}, Ptrs<T, 1>{{static_cast<T*>(y)}},
                               Ptrs<const T, 2>{{static_cast<const T*>(y), static_cast<const T*>(x)}}, n, stream);
    });
}

void scale(float* x, float a, int64_t n, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(n >= 0, "scale", "n < 0");
    launch_map<float, float, 1, 1>(ScaleOp{a}, Ptrs<float, 1>{{x}}, Ptrs<const float, 1>{{x}}, n, stream);
}

}  // namespace ptd::cuda::PTD_CUDA_NS
