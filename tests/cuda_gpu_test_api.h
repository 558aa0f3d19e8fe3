// cuda_gpu_test_api.h — the seams between the three translation units of test_cuda_gpu: the
// nvcc-compiled test kernels (test_cuda_gpu_kernels.cu), the cuBLASLt reference compiled for
// the simulator (test_cuda_gpu_ref.cpp) and the test itself (test_cuda_gpu.cpp, device
// build). Plain types only, so no TU needs the other build's namespace.
#pragma once

#include <cstdint>
#include <string>

namespace cuda_gpu_test {

// An LtMatmul with its enums as ints (DTypeLt, Epilogue), for the reference on host memory.
struct GemmSpec {
    bool trans_a = false, trans_b = false;
    int64_t m = 0, n = 0, k = 0;
    float alpha = 1.0f, beta = 0.0f;
    int ab_type = 0, cd_type = 0, epilogue = 0;
    int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0, stride_a = 0, stride_b = 0, stride_c = 0, stride_d = 0, batch = 1;
    int64_t ld_aux = 0, stride_aux = 0;
    const void *A = nullptr, *B = nullptr, *C = nullptr;
    void* D = nullptr;
    const void* bias = nullptr;
    void* aux = nullptr;
};
// Runs the simulator build's lt_matmul; returns its error message ("" on success).
std::string reference_matmul(const GemmSpec& spec);

// The dialect's test kernels (cuda_sim_kernels.cuh) on the device; pointers are device memory.
void launch_tree_sum(const float* x, float* out, int n, int blocks);
void launch_row_sum_max(const float* x, float* sum, float* max, int rows, int cols, int threads);
void launch_warp_ops(const int* in, int* out, int threads);
void launch_scale2_bf16(const uint16_t* x, uint16_t* y, int64_t n);
// Conversions through cuda_bf16.h / cuda_fp16.h on the device, one per element.
void launch_convert(const float* in, uint16_t* bf16_out, uint16_t* f16_out, int64_t n);
// Widening of the same 16-bit patterns read as bf16 and as f16.
void launch_widen(const uint16_t* bits, float* from_bf16, float* from_f16, int64_t n);

}  // namespace cuda_gpu_test
