// test_cuda_gpu_ref.cpp — the simulator build's cuBLASLt reference for test_cuda_gpu, behind
// the plain GemmSpec of cuda_gpu_test_api.h (this TU is compiled with PTD_CUDA_SIM).
#define PTD_CUDA_SIM 1
#include "blaslt.h"
#include "cuda_gpu_test_api.h"

namespace cuda_gpu_test {

std::string reference_matmul(const GemmSpec& s) {
    namespace sim = ptd::cuda::sim;
    sim::LtMatmul p;
    p.trans_a = s.trans_a;
    p.trans_b = s.trans_b;
    p.m = s.m;
    p.n = s.n;
    p.k = s.k;
    p.alpha = s.alpha;
    p.beta = s.beta;
    p.A = s.A;
    p.B = s.B;
    p.C = s.C;
    p.D = s.D;
    p.a_type = p.b_type = (sim::DTypeLt)s.ab_type;
    p.c_type = p.d_type = p.bias_type = (sim::DTypeLt)s.cd_type;
    p.lda = s.lda;
    p.ldb = s.ldb;
    p.ldc = s.ldc;
    p.ldd = s.ldd;
    p.stride_a = s.stride_a;
    p.stride_b = s.stride_b;
    p.stride_c = s.stride_c;
    p.stride_d = s.stride_d;
    p.batch = s.batch;
    p.epilogue = (sim::Epilogue)s.epilogue;
    p.bias = s.bias;
    p.aux = s.aux;
    p.ld_aux = s.ld_aux;
    p.stride_aux = s.stride_aux;
    return sim::lt_matmul(p, nullptr).message;
}

}  // namespace cuda_gpu_test
