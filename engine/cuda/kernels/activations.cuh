// activations.cuh — GELU (tanh approximation, GPT-2) and SwiGLU, forward and backward, as
// element-wise maps (elementwise.cuh's map_kernel: 8 elements per thread with 128-bit
// accesses, scalar tail). Every operand [n] has the storage type t; f32 arithmetic, one
// rounding per stored result. The formulas are the CPU backend's (cpu_backend.cpp), written
// without tanh so that large |x| neither cancels nor overflows:
//   gelu(x)  = 0.5x(1 + tanh a) = x·σ(2a),  a = √(2/π)(x + 0.044715x³)
//   gelu'(x) = σ(2a) + x·2σ(2a)(1 − σ(2a))·a',  a' = √(2/π)(1 + 3·0.044715x²)
//   swiglu   = silu(g)·u = g·σ(g)·u,  silu'(g) = σ(g)(1 + g(1 − σ(g)))
#pragma once

#include "elementwise.cuh"

namespace ptd::cuda::PTD_CUDA_NS::kern {

constexpr float k_gelu_s = 0.7978845608028654f;  // √(2/π)
constexpr float k_gelu_c = 0.044715f;

// σ(x) = 1/(1 + e^−x): e^−x overflows to inf for x < −88.7 and σ becomes 0, as it should.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

struct GeluForwardOp {  // in: x
    __device__ __forceinline__ void operator()(const float (&in)[1], float (&r)[1]) const {
        const float x = in[0];
        const float a = k_gelu_s * (x + k_gelu_c * x * x * x);
        r[0] = x * sigmoid(2.0f * a);
    }
};
struct GeluBackwardOp {  // in: x, dout
    __device__ __forceinline__ void operator()(const float (&in)[2], float (&r)[1]) const {
        const float x = in[0];
        const float a = k_gelu_s * (x + k_gelu_c * x * x * x);
        const float da = k_gelu_s * (1.0f + 3.0f * k_gelu_c * x * x);
        const float s = sigmoid(2.0f * a);
        r[0] = in[1] * (s + x * 2.0f * s * (1.0f - s) * da);
    }
};
struct SwigluForwardOp {  // in: gate, up
    __device__ __forceinline__ void operator()(const float (&in)[2], float (&r)[1]) const {
        r[0] = in[0] * sigmoid(in[0]) * in[1];
    }
};
struct SwigluBackwardOp {  // in: dout, gate, up; out: dgate, dup
    __device__ __forceinline__ void operator()(const float (&in)[3], float (&r)[2]) const {
        const float d = in[0], g = in[1], s = sigmoid(g);
        r[0] = d * in[2] * (s * (1.0f + g * (1.0f - s)));
        r[1] = d * (g * s);
    }
};

}  // namespace ptd::cuda::PTD_CUDA_NS::kern

namespace ptd::cuda::PTD_CUDA_NS {

// out, x [n]
void gelu_forward(DType t, void* out, const void* x, int64_t n, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(n >= 0, "gelu_forward", "n < 0");
    dispatch_type(t, "gelu_forward", [&](auto tag) {
        using T = decltype(tag);
        launch_map<T, T, 1, 1>(GeluForwardOp{}, Ptrs<T, 1>{{static_cast<T*>(out)}},
                               Ptrs<const T, 1>{{static_cast<const T*>(x)}}, n, stream);
    });
}

// dx, x, dout [n]
void gelu_backward(DType t, void* dx, const void* x, const void* dout, int64_t n, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(n >= 0, "gelu_backward", "n < 0");
    dispatch_type(t, "gelu_backward", [&](auto tag) {
        using T = decltype(tag);
        launch_map<T, T, 2, 1>(GeluBackwardOp{}, Ptrs<T, 1>{{static_cast<T*>(dx)}},
                               Ptrs<const T, 2>{{static_cast<const T*>(x), static_cast<const T*>(dout)}}, n, stream);
    });
}

// out, gate, up [n]
void swiglu_forward(DType t, void* out, const void* gate, const void* up, int64_t n, StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(n >= 0, "swiglu_forward", "n < 0");
    dispatch_type(t, "swiglu_forward", [&](auto tag) {
        using T = decltype(tag);
        launch_map<T, T, 2, 1>(SwigluForwardOp{}, Ptrs<T, 1>{{static_cast<T*>(out)}},
                               Ptrs<const T, 2>{{static_cast<const T*>(gate), static_cast<const T*>(up)}}, n, stream);
    });
}

// dgate, dup, dout, gate, up [n]
void swiglu_backward(DType t, void* dgate, void* dup, const void* dout, const void* gate, const void* up, int64_t n,
                     StreamHandle stream) {
    using namespace kern;
    PTD_KERNEL_REQUIRE(n >= 0, "swiglu_backward", "n < 0");
    dispatch_type(t, "swiglu_backward", [&](auto tag) {
        using T = decltype(tag);
        launch_map<T, T, 3, 2>(
            SwigluBackwardOp{}, Ptrs<T, 2>{{static_cast<T*>(dgate), static_cast<T*>(dup)}},
            Ptrs<const T, 3>{{static_cast<const T*>(dout), static_cast<const T*>(gate), static_cast<const T*>(up)}}, n,
            stream);
    });
}

}  // namespace ptd::cuda::PTD_CUDA_NS
