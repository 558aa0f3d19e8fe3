// test_cuda_gpu_kernels.cu — the simulator's test kernels (cuda_sim_kernels.cuh) compiled by
// nvcc: proof that the dialect's CUDA mapping builds the same source, and the device half of
// the `gpu` test that compares them with the simulator's answers.
#include "cuda_gpu_test_api.h"
#include "cuda_sim_kernels.cuh"

namespace tk = ptd::cuda::dev::test_kernels;

namespace {
__global__ void convert_kernel(const float* in, uint16_t* b, uint16_t* h, int64_t n) {
    for (int64_t i : ptd::cuda::dev::grid_stride(n)) {
        b[i] = ptd::cuda::dev::bf16_bits(ptd::cuda::dev::from_f32<ptd::cuda::dev::bf16>(in[i]));
        h[i] = ptd::cuda::dev::f16_bits(ptd::cuda::dev::from_f32<ptd::cuda::dev::f16>(in[i]));
    }
}
__global__ void widen_kernel(const uint16_t* bits, float* from_bf16, float* from_f16, int64_t n) {
    using namespace ptd::cuda::dev;
    for (int64_t i : grid_stride(n)) {
        from_bf16[i] = to_f32(bf16_from_bits(bits[i]));
        from_f16[i] = to_f32(f16_from_bits(bits[i]));
    }
}
}  // namespace

namespace cuda_gpu_test {

void launch_tree_sum(const float* x, float* out, int n, int blocks) {
    PTD_LAUNCH((tk::tree_sum<true>), blocks, 256, 0, nullptr, x, out, n);
}
void launch_row_sum_max(const float* x, float* sum, float* max, int rows, int cols, int threads) {
    PTD_LAUNCH(tk::row_sum_max, rows, threads, 0, nullptr, x, sum, max, cols);
}
void launch_warp_ops(const int* in, int* out, int threads) { PTD_LAUNCH(tk::warp_ops, 1, threads, 0, nullptr, in, out); }
void launch_scale2_bf16(const uint16_t* x, uint16_t* y, int64_t n) {
    using ptd::cuda::dev::bf16;
    PTD_LAUNCH((tk::scale2_vec<bf16>), 3, 32, 0, nullptr, reinterpret_cast<const bf16*>(x), reinterpret_cast<bf16*>(y), n);
}
void launch_widen(const uint16_t* bits, float* from_bf16, float* from_f16, int64_t n) {
    PTD_LAUNCH(widen_kernel, 64, 256, 0, nullptr, bits, from_bf16, from_f16, n);
}
void launch_convert(const float* in, uint16_t* bf16_out, uint16_t* f16_out, int64_t n) {
    PTD_LAUNCH(convert_kernel, 256, 256, 0, nullptr, in, bf16_out, f16_out, n);
}

}  // namespace cuda_gpu_test
