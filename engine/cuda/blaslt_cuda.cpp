// blaslt_cuda.cpp — blaslt.h over cuBLASLt (ptd_cuda_dev, ENABLE_CUDA only): compute type
// f32 with f32 scales, one cublasLtHandle_t and one 32 MiB workspace per stream, and the
// heuristic's first algorithm cached per call shape (types, ops, sizes, lds, strides,
// epilogue, pointer alignment) so the same shape always runs the same algorithm — the
// determinism the engine promises. Arguments are checked by lt_validate first, as in the
// reference, so both layers refuse the same calls with the same message.
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "blaslt.h"

namespace ptd::cuda::dev {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct PerStream {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
};

// Everything the heuristic's choice may depend on.
using PlanKey = std::tuple<int, int, int64_t, int64_t, int64_t, int, int, int, int, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int64_t, int64_t, int, int>;

struct Registry {
    std::mutex mutex;
    std::map<StreamHandle, PerStream> streams;
    std::map<PlanKey, cublasLtMatmulAlgo_t> algos;
};
Registry& registry() {
    static Registry r;
    return r;
}

Status lt_status(cublasStatus_t st, const char* call, const char* file, int line) {
    if (st == CUBLAS_STATUS_SUCCESS) return {};
    return Status{1000 + (int)st, std::string(file) + ":" + std::to_string(line) + ": " + call + ": " +
                                      cublasLtGetStatusName(st) + ": " + cublasLtGetStatusString(st)};
}
Status rt_status(cudaError_t err, const char* call, const char* file, int line) {
    if (err == cudaSuccess) return {};
    return Status{(int)err, std::string(file) + ":" + std::to_string(line) + ": " + call + ": " + cudaGetErrorString(err)};
}
#define PTD_LT(call) lt_status((call), #call, __FILE__, __LINE__)
#define PTD_RT(call) rt_status((call), #call, __FILE__, __LINE__)
#define PTD_TRY(expr)                 \
    do {                              \
        Status ptd_s_ = (expr);       \
        if (!ptd_s_.ok()) return ptd_s_; \
    } while (0)

cudaDataType_t cuda_type(DTypeLt t) {
    switch (t) {
        case DTypeLt::f32: return CUDA_R_32F;
        case DTypeLt::bf16: return CUDA_R_16BF;
        case DTypeLt::f16: return CUDA_R_16F;
    }
    return CUDA_R_32F;
}
cublasLtEpilogue_t cuda_epilogue(Epilogue e) {
    switch (e) {
        case Epilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
        case Epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
        case Epilogue::gelu: return CUBLASLT_EPILOGUE_GELU;
        case Epilogue::gelu_bias: return CUBLASLT_EPILOGUE_GELU_BIAS;
        case Epilogue::gelu_aux: return CUBLASLT_EPILOGUE_GELU_AUX;
        case Epilogue::gelu_aux_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        case Epilogue::dgelu: return CUBLASLT_EPILOGUE_DGELU;
        case Epilogue::bgradb: return CUBLASLT_EPILOGUE_BGRADB;
    }
    return CUBLASLT_EPILOGUE_DEFAULT;
}
int alignment(const void* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    for (int al : {256, 128, 64, 32, 16, 8, 4, 2})
        if (a % al == 0) return al;
    return 1;
}

Status per_stream(StreamHandle stream, PerStream** out) {
    Registry& r = registry();
    auto it = r.streams.find(stream);
    if (it == r.streams.end()) {
        PerStream ps;
        PTD_TRY(PTD_LT(cublasLtCreate(&ps.handle)));
        Status s = PTD_RT(cudaMalloc(&ps.workspace, kWorkspaceBytes));
        if (!s.ok()) {
            cublasLtDestroy(ps.handle);
            return s;
        }
        it = r.streams.emplace(stream, ps).first;
    }
    *out = &it->second;
    return {};
}

// RAII for the descriptors of one call.
struct Descriptors {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~Descriptors() {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (d) cublasLtMatrixLayoutDestroy(d);
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

Status make_layout(cublasLtMatrixLayout_t* layout, DTypeLt t, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                   int64_t stride) {
    PTD_TRY(PTD_LT(cublasLtMatrixLayoutCreate(layout, cuda_type(t), (uint64_t)rows, (uint64_t)cols, ld)));
    if (batch > 1) {
        const int32_t count = (int32_t)batch;
        PTD_TRY(PTD_LT(cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count)));
        PTD_TRY(PTD_LT(
            cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride)));
    }
    return {};
}

}  // namespace

Status lt_prepare(StreamHandle stream) {
    std::lock_guard lock(registry().mutex);
    PerStream* ps = nullptr;
    return per_stream(stream, &ps);
}

void lt_release() {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    for (auto& [stream, ps] : r.streams) {
        cudaFree(ps.workspace);
        cublasLtDestroy(ps.handle);
    }
    r.streams.clear();
    r.algos.clear();
}

Status lt_matmul(const LtMatmul& p, StreamHandle stream) {
    PTD_TRY(lt_validate(p));
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    PerStream* ps = nullptr;
    PTD_TRY(per_stream(stream, &ps));

    Descriptors desc;
    PTD_TRY(PTD_LT(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F)));
    const cublasOperation_t ta = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    PTD_TRY(PTD_LT(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)));
    PTD_TRY(PTD_LT(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)));
    const cublasLtEpilogue_t epi = cuda_epilogue(p.epilogue);
    PTD_TRY(PTD_LT(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)));
    if (p.bias) {
        PTD_TRY(PTD_LT(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias)));
        const int32_t bt = cuda_type(p.bias_type);
        PTD_TRY(PTD_LT(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt)));
    }
    if (p.aux) {
        PTD_TRY(PTD_LT(
            cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof p.aux)));
        PTD_TRY(PTD_LT(
            cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &p.ld_aux, sizeof p.ld_aux)));
        if (p.batch > 1)
            PTD_TRY(PTD_LT(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE,
                                                          &p.stride_aux, sizeof p.stride_aux)));
    }
    PTD_TRY(make_layout(&desc.a, p.a_type, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k, p.lda, p.batch, p.stride_a));
    PTD_TRY(make_layout(&desc.b, p.b_type, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, p.ldb, p.batch, p.stride_b));
    // beta == 0 leaves C unread (it may be null): describe it as D.
    const bool c_used = p.beta != 0.0f && p.C;
    PTD_TRY(make_layout(&desc.c, c_used ? p.c_type : p.d_type, p.m, p.n, c_used ? p.ldc : p.ldd, p.batch,
                        c_used ? p.stride_c : p.stride_d));
    PTD_TRY(make_layout(&desc.d, p.d_type, p.m, p.n, p.ldd, p.batch, p.stride_d));
    const void* C = c_used ? p.C : p.D;

    const PlanKey key{p.trans_a,   p.trans_b, p.m,       p.n,        p.k,         (int)p.a_type, (int)p.c_type,
                      (int)p.epilogue, (int)p.bias_type, p.lda, p.ldb,  c_used ? p.ldc : p.ldd, p.ldd, p.batch,
                      p.stride_a, p.stride_b, c_used ? p.stride_c : p.stride_d, p.stride_d, alignment(p.A) * 4096 + alignment(p.B),
                      alignment(C) * 4096 + alignment(p.D), p.ld_aux, p.stride_aux, p.beta != 0.0f,
                      p.aux ? alignment(p.aux) : 0};
    auto it = r.algos.find(key);
    if (it == r.algos.end()) {
        PTD_TRY(PTD_LT(cublasLtMatmulPreferenceCreate(&desc.pref)));
        const uint64_t ws = kWorkspaceBytes;
        PTD_TRY(PTD_LT(cublasLtMatmulPreferenceSetAttribute(desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                            sizeof ws)));
        cublasLtMatmulHeuristicResult_t result{};
        int found = 0;
        PTD_TRY(PTD_LT(cublasLtMatmulAlgoGetHeuristic(ps->handle, desc.op, desc.a, desc.b, desc.c, desc.d, desc.pref, 1,
                                                      &result, &found)));
        if (found == 0)
            return Status{1000 + (int)CUBLAS_STATUS_NOT_SUPPORTED,
                          "lt_matmul: cuBLASLt has no algorithm for m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
                              " k=" + std::to_string(p.k) + " " + dtype_lt_name(p.a_type) + "→" + dtype_lt_name(p.d_type) +
                              " epilogue " + epilogue_name(p.epilogue)};
        it = r.algos.emplace(key, result.algo).first;
    }
    const float alpha = p.alpha, beta = p.beta;
    return PTD_LT(cublasLtMatmul(ps->handle, desc.op, &alpha, p.A, desc.a, p.B, desc.b, &beta, C, desc.c, p.D, desc.d,
                                 &it->second, ps->workspace, kWorkspaceBytes, stream));
}

}  // namespace ptd::cuda::dev
