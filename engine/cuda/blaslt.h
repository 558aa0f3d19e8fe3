// blaslt.h — the one call the CUDA backend makes into cuBLASLt, in cuBLASLt's own terms
// (column-major!), so the caller does the row-major → column-major mapping exactly as the
// real call needs it: a row-major C[M,N] = A[M,K]·B[K,N] is the column-major
// Cᵀ[N,M] = Bᵀ·Aᵀ, i.e. m = N, n = M, k = K, A-slot = B (ld N), B-slot = A (ld K).
// blaslt_cuda.cpp calls cublasLtMatmul (compute f32, one heuristic algorithm cached per
// shape, a 32 MiB workspace per stream); blaslt_ref.cpp (the simulator build) computes the
// same result on the host following cuBLASLt's documented semantics, and both reject what
// cuBLASLt rejects with the same message (lt_validate).
// C++20, no CUDA header: kernels' launch code and the backend include it.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime.h"

namespace ptd::cuda::PTD_CUDA_NS {

enum class DTypeLt : uint8_t { f32, bf16, f16 };

// cuBLASLt epilogues (CUBLASLT_EPILOGUE_*). With x = alpha·op(A)·op(B) + beta·C:
//   none           D = x
//   bias           D = x + bias[i]                 (bias along m: every column of D)
//   gelu           D = gelu(x)                     (the tanh form, as cuBLASLt)
//   gelu_bias      D = gelu(x + bias[i])
//   gelu_aux       aux = x,           D = gelu(x)  (aux keeps the pre-activation for backward)
//   gelu_aux_bias  aux = x + bias[i], D = gelu(x + bias[i])
//   dgelu          D = x · gelu'(aux)              (backward through the GELU; aux is an input)
//   bgradb         D = x and bias[j] = Σ_p op(B)[p, j] over k (bias gradient, length n; the
//                  layer writes through `bias`)
enum class Epilogue : uint8_t { none, bias, gelu, gelu_bias, gelu_aux, gelu_aux_bias, dgelu, bgradb };

struct LtMatmul {
    bool trans_a = false, trans_b = false;  // CUBLAS_OP_T when true
    int64_t m = 0, n = 0, k = 0;            // D[m,n] = alpha·op(A)[m,k]·op(B)[k,n] + beta·C[m,n]
    float alpha = 1.0f, beta = 0.0f;
    // Column-major; ld ≥ rows of the matrix as stored (A: m×k, or k×m when trans_a);
    // stride_* = elements between batches.
    const void* A = nullptr;
    DTypeLt a_type = DTypeLt::f32;
    int64_t lda = 0, stride_a = 0;
    const void* B = nullptr;
    DTypeLt b_type = DTypeLt::f32;
    int64_t ldb = 0, stride_b = 0;
    const void* C = nullptr;  // may equal D (in place: then ldc == ldd, stride_c == stride_d); unread when beta == 0
    DTypeLt c_type = DTypeLt::f32;
    int64_t ldc = 0, stride_c = 0;
    void* D = nullptr;
    DTypeLt d_type = DTypeLt::f32;
    int64_t ldd = 0, stride_d = 0;
    int64_t batch = 1;  // strided batch count
    Epilogue epilogue = Epilogue::none;
    const void* bias = nullptr;  // length m (bias epilogues, same for every batch) or n (bgradb, written)
    DTypeLt bias_type = DTypeLt::f32;
    void* aux = nullptr;  // pre-activation, type d_type, column-major m×n with ld_aux (gelu_aux*, dgelu)
    int64_t ld_aux = 0;
    int64_t stride_aux = 0;  // elements between batches of aux (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE)
};

const char* dtype_lt_name(DTypeLt t);
const char* epilogue_name(Epilogue e);

// The checks cuBLASLt makes on a call (plus two it leaves to the caller: overlapping output
// batches, and the zero sizes it would reject at layout creation), as a Status with a
// message that names the field, what was given and what is allowed. Both layers run it.
// The rules and their sources in the cuBLAS documentation: docs/engine.md, "cuBLASLt rules".
Status lt_validate(const LtMatmul& p);

// lt_matmul's status code when cuBLASLt has no algorithm for a call that is valid as such
// (1000 + CUBLAS_STATUS_NOT_SUPPORTED): the caller runs the GEMM another way (the backend:
// the plain GEMM and the epilogue as separate kernels).
constexpr int kLtNoAlgorithm = 1015;

// The largest power of two up to 256 that divides the address: the alignment the real layer
// declares to the heuristic (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, default 256).
int lt_pointer_alignment(const void* p);

// Whether a fused epilogue (bias, GELU, aux, bias gradient) can run at these addresses and
// leading dimensions: its kernels move 16-byte vectors, so A, B, C, D, bias and aux must be
// 16-byte aligned, every leading dimension and batch stride a multiple of 16 bytes. Ok for
// Epilogue::none; else a Status with kLtNoAlgorithm naming the operand and the rule.
Status lt_epilogue_runnable(const LtMatmul& p);

// D (and aux / the bias gradient) on `stream`. The real layer: no host sync, the algorithm
// chosen once per shape; the reference: computed now, on the host.
Status lt_matmul(const LtMatmul& p, StreamHandle stream);

// The real layer allocates its per-stream handle and 32 MiB workspace at the first call on a
// stream; lt_prepare does it up front (cudaMalloc synchronises and breaks graph capture).
// lt_release frees every handle, workspace and cached plan. Both are no-ops in the reference.
Status lt_prepare(StreamHandle stream);
void lt_release();

#if defined(PTD_CUDA_SIM)
// Shapes-only mode (runtime.h): the calls lt_matmul checked and recorded since the last take.
std::vector<LtMatmul> sim_take_lt_trace();
#endif

// The GELU of cuBLASLt's epilogues (tanh approximation) and its derivative, in double.
inline double gelu_tanh(double x) {
    const double s = 0.7978845608028654;  // sqrt(2/pi)
    return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}
inline double gelu_tanh_grad(double x) {
    const double s = 0.7978845608028654;
    const double u = s * (x + 0.044715 * x * x * x);
    const double t = std::tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

}  // namespace ptd::cuda::PTD_CUDA_NS
