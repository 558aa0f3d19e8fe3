// cublaslt_standin.cpp — a validating stand-in for libcublasLt.so.13, for CI without a GPU.
// It exports the cuBLASLt C entry points ptd-engine calls (cublaslt_lazy.cpp loads it when
// PTD_CUBLASLT_LIBRARY names it), so the engine's real call sequence — descriptors,
// attributes, preferences, heuristic, candidate fallback, matmul — runs on host memory. It
// accepts what the cuBLAS documentation says cuBLASLt accepts and refuses everything else
// loudly: the status the real library documents for it, and a message (stderr, and
// cublasLtGetStatusString) naming the rule, the operand and the documentation section. The
// rules and their sources are listed in docs/engine.md, "cuBLASLt rules".
//
// Its algorithm model (the real heuristic's choices are not documented, its constraints are):
//   tensor-op  16-byte vector loads: A, B, C, D at least 16-byte aligned AND as aligned as
//              the caller declared (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, default 256,
//              so a caller that never declares gets an algorithm that needs 256), leading
//              dimensions and batch strides multiples of 16 bytes, bias and aux pointers
//              16-byte aligned (the heuristic reads them for alignment); every epilogue.
//              Needs 1 MiB of workspace when k ≥ 4096 (split-K), offered only if allowed.
//   simt       element alignment only; epilogue DEFAULT only.
// The heuristic returns the ones whose constraints the call meets (none: NOT_SUPPORTED);
// cublasLtMatmul re-checks the actual pointers against the chosen algorithm and fails as the
// device would (EXECUTION_FAILED, "misaligned address") when the declared alignment lied.
// The product is computed by the engine's own reference (blaslt_ref.cpp, double accumulate)
// unless dry (PTD_CUBLASLT_STANDIN_DRY=1, or ptdCublasLtStandinSetDry): shape sweeps whose
// addresses are never read.
#include <cublasLt.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "blaslt.h"

namespace lt = ptd::cuda::sim;

namespace {

constexpr uint32_t kMagic = 0x5054444c;  // "PTDL"
constexpr uint64_t kSplitKWorkspace = uint64_t{1} << 20;

struct Handle {
    uint32_t magic = kMagic;
};
struct Desc {
    uint32_t magic = kMagic;
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N, pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    int32_t bias_type = -1;
    int64_t bias_batch_stride = 0;
    void* aux = nullptr;
    int64_t aux_ld = 0, aux_batch_stride = 0;
    int32_t aux_type = -1;
};
struct Layout {
    uint32_t magic = kMagic;
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch = 1, order = CUBLASLT_ORDER_COL;
    int64_t stride = 0;
};
struct Pref {
    uint32_t magic = kMagic;
    uint64_t max_workspace = 0;
    uint32_t min_align[4] = {256, 256, 256, 256};  // A, B, C, D
};
// What the stand-in writes into cublasLtMatmulAlgo_t::data.
struct Algo {
    uint64_t magic;
    uint64_t tensor_op;       // 1: tensor-op, 0: simt
    uint64_t need_align[4];   // bytes the algorithm assumes for A, B, C, D
    uint64_t workspace;
    uint64_t unused;
};
static_assert(sizeof(Algo) <= sizeof(cublasLtMatmulAlgo_t));

thread_local std::string t_message;
std::atomic<long> g_refusals{0};
// Descriptor and heuristic calls since the process started: a caller that caches its plans
// makes them once per call shape (tests read them through ptdCublasLtStandinCalls).
std::atomic<long> g_desc_creates{0}, g_layout_creates{0}, g_heuristics{0};

cublasStatus_t refuse(cublasStatus_t status, const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    t_message = std::string("cuBLASLt stand-in: ") + buf;
    std::fprintf(stderr, "%s\n", t_message.c_str());
    ++g_refusals;
    return status;
}

int64_t type_bytes(int32_t t) {
    switch (t) {
        case CUDA_R_32F: return 4;
        case CUDA_R_16BF:
        case CUDA_R_16F: return 2;
        default: return 0;
    }
}
const char* type_name(int32_t t) {
    switch (t) {
        case CUDA_R_32F: return "CUDA_R_32F";
        case CUDA_R_16BF: return "CUDA_R_16BF";
        case CUDA_R_16F: return "CUDA_R_16F";
        default: return "an unsupported type";
    }
}
int alignment_of(const void* p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (int al : {256, 128, 64, 32, 16, 8, 4, 2})
        if (a % (uintptr_t)al == 0) return al;
    return 1;
}
bool epilogue_known(uint32_t e) {
    switch (e) {
        case CUBLASLT_EPILOGUE_DEFAULT:
        case CUBLASLT_EPILOGUE_BIAS:
        case CUBLASLT_EPILOGUE_GELU:
        case CUBLASLT_EPILOGUE_GELU_BIAS:
        case CUBLASLT_EPILOGUE_GELU_AUX:
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
        case CUBLASLT_EPILOGUE_DGELU:
        case CUBLASLT_EPILOGUE_BGRADB: return true;
        default: return false;
    }
}
bool uses_bias(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
           e == CUBLASLT_EPILOGUE_BGRADB;
}
bool uses_aux(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}

template <class T>
bool size_is(size_t given) {
    return given == sizeof(T);
}
#define PTD_ATTR_SIZE(T, what)                                                                                   \
    do {                                                                                                         \
        if (!buf || !size_is<T>(sizeInBytes))                                                                    \
            return refuse(CUBLAS_STATUS_INVALID_VALUE,                                                           \
                          "%s: sizeInBytes %zu, the attribute is %s (%zu bytes) [cuBLAS docs, %s: \"INVALID_VALUE " \
                          "if buf is NULL or sizeInBytes doesn't match size of internal storage\"]",                \
                          what, sizeInBytes, #T, sizeof(T), __func__);                                           \
    } while (0)

// The checks shared by the heuristic and the matmul: the call as described (no pointer to
// A/B/C/D yet). Fills `mnk`.
cublasStatus_t check_problem(const Desc* d, const Layout* a, const Layout* b, const Layout* c, const Layout* dd,
                             int64_t* m, int64_t* n, int64_t* k) {
    if (!d || d->magic != kMagic || !a || !b || !c || !dd || a->magic != kMagic || b->magic != kMagic ||
        c->magic != kMagic || dd->magic != kMagic)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "a descriptor is null or was not created by cuBLASLt");
    // Compute and scale types: the engine's one combination, CUBLAS_COMPUTE_32F with
    // CUDA_R_32F scales [cuBLAS docs, cublasLtMatmul(), table of datatypes supported].
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                      "compute type %d with scale type %s: only CUBLAS_COMPUTE_32F with CUDA_R_32F scales "
                      "[cuBLAS docs, cublasLtMatmul(), datatypes table]",
                      (int)d->compute, type_name(d->scale));
    if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "pointer mode %d: the engine's alpha/beta are host scalars",
                      d->pointer_mode);
    const Layout* ls[] = {a, b, c, dd};
    const char* names[] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; ++i) {
        if (ls[i]->order != CUBLASLT_ORDER_COL)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: order %d, only CUBLASLT_ORDER_COL", names[i], ls[i]->order);
        if (type_bytes(ls[i]->type) == 0)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "%s: type %d is not f32, bf16 or f16", names[i], (int)ls[i]->type);
        // ld ≥ rows [cuBLAS docs, cublasLtMatrixLayoutAttribute_t, CUBLASLT_MATRIX_LAYOUT_LD].
        if (ls[i]->ld < (int64_t)ls[i]->rows)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: ld %lld < rows %llu [cublasLtMatrixLayoutAttribute_t: LD]",
                          names[i], (long long)ls[i]->ld, (unsigned long long)ls[i]->rows);
        if (ls[i]->batch != dd->batch)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: batch count %d but D's is %d (every matrix has one count)",
                          names[i], ls[i]->batch, dd->batch);
        // Non-negative strides, large enough that batches do not overlap
        // [cublasLtMatrixLayoutAttribute_t: STRIDED_BATCH_OFFSET]; for D the engine's own
        // check (lt_validate) also admits batches side by side within one ld.
        if (ls[i]->batch > 1 && ls[i]->stride < 0)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "%s: negative batch stride %lld [STRIDED_BATCH_OFFSET]", names[i],
                          (long long)ls[i]->stride);
    }
    const bool ta = d->transa == CUBLAS_OP_T, tb = d->transb == CUBLAS_OP_T;
    *m = (int64_t)dd->rows, *n = (int64_t)dd->cols;
    *k = ta ? (int64_t)a->rows : (int64_t)a->cols;
    const int64_t a_m = ta ? (int64_t)a->cols : (int64_t)a->rows;
    const int64_t b_k = tb ? (int64_t)b->cols : (int64_t)b->rows, b_n = tb ? (int64_t)b->rows : (int64_t)b->cols;
    if (a_m != *m || b_k != *k || b_n != *n || c->rows != dd->rows || c->cols != dd->cols)
        return refuse(CUBLAS_STATUS_INVALID_VALUE,
                      "shapes disagree: op(A) %lld×%lld, op(B) %lld×%lld, C %llu×%llu, D %lld×%lld "
                      "[cublasLtMatmul(): D = alpha·op(A)·op(B) + beta·C]",
                      (long long)a_m, (long long)*k, (long long)b_k, (long long)b_n, (unsigned long long)c->rows,
                      (unsigned long long)c->cols, (long long)*m, (long long)*n);
    if (*m < 1 || *n < 1 || *k < 1)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "m, n, k = %lld, %lld, %lld; all must be ≥ 1", (long long)*m,
                      (long long)*n, (long long)*k);
    // Types: A = B; C = D; D is A's type or f32 [cublasLtMatmul(), datatypes table, COMPUTE_32F rows].
    if (a->type != b->type || c->type != dd->type || (dd->type != CUDA_R_32F && dd->type != a->type))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                      "types A %s, B %s, C %s, D %s: not a row of the CUBLAS_COMPUTE_32F table "
                      "(f32/f32, bf16 → bf16 or f32, f16 → f16 or f32) [cublasLtMatmul(), datatypes table]",
                      type_name(a->type), type_name(b->type), type_name(c->type), type_name(dd->type));
    if (!epilogue_known(d->epilogue))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue %u is not one the engine uses", d->epilogue);
    if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && a->type == CUDA_R_32F && dd->type != CUDA_R_32F)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue with f32 inputs and 16-bit output");
    if (uses_bias(d->epilogue)) {
        if (!d->bias)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "epilogue %u needs CUBLASLT_MATMUL_DESC_BIAS_POINTER", d->epilogue);
        // Bias (and bias gradient) elements are D's type [cublasLtMatmulDescAttributes_t: BIAS_DATA_TYPE].
        const int32_t bt = d->bias_type == -1 ? dd->type : d->bias_type;
        if (bt != dd->type)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "bias type %s but D is %s [cublasLtMatmulDescAttributes_t: "
                          "BIAS_DATA_TYPE, \"same type as the elements of output matrix (Dtype)\"]",
                          type_name(bt), type_name(dd->type));
        if (d->epilogue == CUBLASLT_EPILOGUE_BGRADB && dd->batch > 1)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "BGRADB with batch count %d (one bias gradient per call)",
                          dd->batch);
    }
    if (uses_aux(d->epilogue)) {
        if (!d->aux)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "epilogue %u needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER",
                          d->epilogue);
        // [cublasLtMatmulDescAttributes_t: EPILOGUE_AUX_LD] "Must be divisible by 8 and be no
        // less than the number of rows in the output matrix"; AUX_BATCH_STRIDE "divisible by 8".
        if (d->aux_ld % 8 != 0 || d->aux_ld < *m)
            return refuse(CUBLAS_STATUS_INVALID_VALUE,
                          "aux: CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = %lld; must be divisible by 8 and ≥ the %lld "
                          "rows of D [cublasLtMatmulDescAttributes_t: EPILOGUE_AUX_LD]",
                          (long long)d->aux_ld, (long long)*m);
        if (dd->batch > 1 && d->aux_batch_stride % 8 != 0)
            return refuse(CUBLAS_STATUS_INVALID_VALUE,
                          "aux: EPILOGUE_AUX_BATCH_STRIDE = %lld; must be divisible by 8 "
                          "[cublasLtMatmulDescAttributes_t: EPILOGUE_AUX_BATCH_STRIDE]",
                          (long long)d->aux_batch_stride);
        const int32_t at = d->aux_type == -1 ? dd->type : d->aux_type;
        if (at != dd->type)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "aux type %s but D is %s [EPILOGUE_AUX_DATA_TYPE: GELU input "
                          "elements are D's type]", type_name(at), type_name(dd->type));
    }
    return CUBLAS_STATUS_SUCCESS;
}

// Why the tensor-op algorithm cannot take this call, or "" when it can.
std::string tensor_op_refusal(const Desc* d, const Layout* const ls[4], const uint32_t declared[4], int64_t k,
                              uint64_t max_workspace) {
    const char* names[] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; ++i) {
        const int64_t bytes = type_bytes(ls[i]->type);
        if (declared[i] < 16)
            return std::string(names[i]) + " declared " + std::to_string(declared[i]) + "-byte aligned (< 16)";
        if (ls[i]->ld * bytes % 16 != 0)
            return std::string(names[i]) + ": ld " + std::to_string(ls[i]->ld) + " × " + std::to_string(bytes) +
                   " bytes is not a multiple of 16";
        if (ls[i]->batch > 1 && ls[i]->stride * bytes % 16 != 0)
            return std::string(names[i]) + ": batch stride " + std::to_string(ls[i]->stride) + " × " +
                   std::to_string(bytes) + " bytes is not a multiple of 16";
    }
    if (uses_bias(d->epilogue) && alignment_of(d->bias) < 16) return "bias pointer not 16-byte aligned";
    if (uses_aux(d->epilogue)) {
        if (alignment_of(d->aux) < 16) return "aux pointer not 16-byte aligned";
        if (d->aux_ld * type_bytes(ls[3]->type) % 16 != 0) return "aux ld × element size not a multiple of 16";
    }
    if (k >= 4096 && max_workspace < kSplitKWorkspace) return "split-K needs 1 MiB of workspace, the preference allows less";
    return "";
}

std::atomic<bool> g_dry_flag{[] {
    const char* v = std::getenv("PTD_CUBLASLT_STANDIN_DRY");
    return v && std::strcmp(v, "1") == 0;
}()};
bool g_dry() { return g_dry_flag; }

}  // namespace

extern "C" {

#define PTD_EXPORT __attribute__((visibility("default")))

// The stand-in's own: how many calls it refused since the process started (tests assert 0).
PTD_EXPORT long ptdCublasLtStandinRefusals() { return g_refusals.load(); }
// out[0] matmul descriptors created, out[1] matrix layouts created, out[2] heuristic queries.
PTD_EXPORT void ptdCublasLtStandinCalls(long out[3]) {
    out[0] = g_desc_creates.load(), out[1] = g_layout_creates.load(), out[2] = g_heuristics.load();
}
// Dry: check every call, compute nothing (PTD_CUBLASLT_STANDIN_DRY=1 sets it at load).
PTD_EXPORT void ptdCublasLtStandinSetDry(int dry) { g_dry_flag = dry != 0; }

PTD_EXPORT const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        default: return "CUBLAS_STATUS_<other>";
    }
}
// The last refusal's full message on this thread (the real library's string is generic).
PTD_EXPORT const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
    if (status != CUBLAS_STATUS_SUCCESS && !t_message.empty()) return t_message.c_str();
    return cublasLtGetStatusName(status);
}

PTD_EXPORT cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* h) {
    if (!h) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate: null handle pointer");
    *h = reinterpret_cast<cublasLtHandle_t>(new Handle);
    return CUBLAS_STATUS_SUCCESS;
}
PTD_EXPORT cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t h) {
    auto* p = reinterpret_cast<Handle*>(h);
    if (!p || p->magic != kMagic) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy: not a handle");
    p->magic = 0;
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}

PTD_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* out, cublasComputeType_t compute,
                                                                cudaDataType_t scale) {
    if (!out) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate: null pointer");
    ++g_desc_creates;
    auto* d = new Desc;
    d->compute = compute, d->scale = scale;
    *out = reinterpret_cast<cublasLtMatmulDesc_t>(d);
    return CUBLAS_STATUS_SUCCESS;
}
PTD_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    auto* d = reinterpret_cast<Desc*>(desc);
    if (!d || d->magic != kMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescDestroy: not a descriptor");
    d->magic = 0;
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
PTD_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                                      cublasLtMatmulDescAttributes_t attr,
                                                                      const void* buf, size_t sizeInBytes) {
    auto* d = reinterpret_cast<Desc*>(desc);
    if (!d || d->magic != kMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: not a descriptor");
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_TRANSA:
            PTD_ATTR_SIZE(int32_t, "TRANSA");
            std::memcpy(&d->transa, buf, 4);
            break;
        case CUBLASLT_MATMUL_DESC_TRANSB:
            PTD_ATTR_SIZE(int32_t, "TRANSB");
            std::memcpy(&d->transb, buf, 4);
            break;
        case CUBLASLT_MATMUL_DESC_POINTER_MODE:
            PTD_ATTR_SIZE(int32_t, "POINTER_MODE");
            std::memcpy(&d->pointer_mode, buf, 4);
            break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE:
            PTD_ATTR_SIZE(uint32_t, "EPILOGUE");
            std::memcpy(&d->epilogue, buf, 4);
            break;
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
            PTD_ATTR_SIZE(void*, "BIAS_POINTER");
            std::memcpy(&d->bias, buf, sizeof(void*));
            break;
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
            PTD_ATTR_SIZE(int32_t, "BIAS_DATA_TYPE");
            std::memcpy(&d->bias_type, buf, 4);
            break;
        case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
            PTD_ATTR_SIZE(int64_t, "BIAS_BATCH_STRIDE");
            std::memcpy(&d->bias_batch_stride, buf, 8);
            break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
            PTD_ATTR_SIZE(void*, "EPILOGUE_AUX_POINTER");
            std::memcpy(&d->aux, buf, sizeof(void*));
            break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
            PTD_ATTR_SIZE(int64_t, "EPILOGUE_AUX_LD");
            std::memcpy(&d->aux_ld, buf, 8);
            break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
            PTD_ATTR_SIZE(int64_t, "EPILOGUE_AUX_BATCH_STRIDE");
            std::memcpy(&d->aux_batch_stride, buf, 8);
            break;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
            PTD_ATTR_SIZE(int32_t, "EPILOGUE_AUX_DATA_TYPE");
            std::memcpy(&d->aux_type, buf, 4);
            break;
        default:
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "matmul descriptor attribute %d: the stand-in models only the "
                          "attributes ptd-engine sets", (int)attr);
    }
    return CUBLAS_STATUS_SUCCESS;
}

PTD_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* out, cudaDataType type,
                                                                  uint64_t rows, uint64_t cols, int64_t ld) {
    if (!out) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate: null pointer");
    ++g_layout_creates;
    auto* l = new Layout;
    l->type = type, l->rows = rows, l->cols = cols, l->ld = ld;
    *out = reinterpret_cast<cublasLtMatrixLayout_t>(l);
    return CUBLAS_STATUS_SUCCESS;
}
PTD_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    auto* l = reinterpret_cast<Layout*>(layout);
    if (!l || l->magic != kMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutDestroy: not a layout");
    l->magic = 0;
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
PTD_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                                        cublasLtMatrixLayoutAttribute_t attr,
                                                                        const void* buf, size_t sizeInBytes) {
    auto* l = reinterpret_cast<Layout*>(layout);
    if (!l || l->magic != kMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutSetAttribute: not a layout");
    switch (attr) {
        case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
            PTD_ATTR_SIZE(int32_t, "BATCH_COUNT");
            std::memcpy(&l->batch, buf, 4);
            break;
        case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
            PTD_ATTR_SIZE(int64_t, "STRIDED_BATCH_OFFSET");
            std::memcpy(&l->stride, buf, 8);
            break;
        case CUBLASLT_MATRIX_LAYOUT_ORDER:
            PTD_ATTR_SIZE(int32_t, "ORDER");
            std::memcpy(&l->order, buf, 4);
            break;
        default:
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "layout attribute %d: not one ptd-engine sets", (int)attr);
    }
    return CUBLAS_STATUS_SUCCESS;
}

PTD_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* out) {
    if (!out) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate: null pointer");
    *out = reinterpret_cast<cublasLtMatmulPreference_t>(new Pref);
    return CUBLAS_STATUS_SUCCESS;
}
PTD_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    auto* p = reinterpret_cast<Pref*>(pref);
    if (!p || p->magic != kMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceDestroy: not a preference");
    p->magic = 0;
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
PTD_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                            cublasLtMatmulPreferenceAttributes_t attr,
                                                                            const void* buf, size_t sizeInBytes) {
    auto* p = reinterpret_cast<Pref*>(pref);
    if (!p || p->magic != kMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute: not a preference");
    switch (attr) {
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
            PTD_ATTR_SIZE(uint64_t, "MAX_WORKSPACE_BYTES");
            std::memcpy(&p->max_workspace, buf, 8);
            break;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
            PTD_ATTR_SIZE(uint32_t, "MIN_ALIGNMENT_*_BYTES");
            uint32_t v;
            std::memcpy(&v, buf, 4);
            if (v == 0 || (v & (v - 1)) != 0)
                return refuse(CUBLAS_STATUS_INVALID_VALUE, "MIN_ALIGNMENT %u is not a power of two", v);
            p->min_align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
            break;
        }
        default:
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "preference attribute %d: not one ptd-engine sets", (int)attr);
    }
    return CUBLAS_STATUS_SUCCESS;
}

PTD_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount, cublasLtMatmulHeuristicResult_t results[],
    int* returnAlgoCount) {
    auto* h = reinterpret_cast<Handle*>(handle);
    if (!h || h->magic != kMagic) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtMatmulAlgoGetHeuristic: no handle");
    ++g_heuristics;
    auto* pref = reinterpret_cast<Pref*>(preference);
    if (!pref || pref->magic != kMagic || requestedAlgoCount < 1 || !results || !returnAlgoCount)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoGetHeuristic: bad preference or result array");
    *returnAlgoCount = 0;
    const auto* d = reinterpret_cast<const Desc*>(operationDesc);
    const Layout* ls[4] = {reinterpret_cast<const Layout*>(Adesc), reinterpret_cast<const Layout*>(Bdesc),
                           reinterpret_cast<const Layout*>(Cdesc), reinterpret_cast<const Layout*>(Ddesc)};
    int64_t m, n, k;
    if (cublasStatus_t st = check_problem(d, ls[0], ls[1], ls[2], ls[3], &m, &n, &k); st != CUBLAS_STATUS_SUCCESS)
        return st;
    int count = 0;
    auto add = [&](bool tensor_op, uint64_t workspace) {
        if (count >= requestedAlgoCount) return;
        cublasLtMatmulHeuristicResult_t& r = results[count++];
        std::memset(&r, 0, sizeof r);
        Algo a{};
        a.magic = kMagic, a.tensor_op = tensor_op, a.workspace = workspace;
        for (int i = 0; i < 4; ++i)
            a.need_align[i] = tensor_op ? pref->min_align[i] : (uint64_t)type_bytes(ls[i]->type);
        std::memcpy(r.algo.data, &a, sizeof a);
        r.workspaceSize = workspace, r.state = CUBLAS_STATUS_SUCCESS, r.wavesCount = 1.0f;
    };
    const std::string why_not = tensor_op_refusal(d, ls, pref->min_align, k, pref->max_workspace);
    if (why_not.empty()) add(true, k >= 4096 ? kSplitKWorkspace : 0);
    if (d->epilogue == CUBLASLT_EPILOGUE_DEFAULT) add(false, 0);
    *returnAlgoCount = count;
    if (count == 0)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                      "cublasLtMatmulAlgoGetHeuristic: no algorithm for m=%lld n=%lld k=%lld epilogue %u: the fused "
                      "epilogue needs the tensor-op kernels, which refuse: %s [cuBLAS docs, Tensor Core Usage; "
                      "cublasLtMatmulPreferenceAttributes_t: MIN_ALIGNMENT_*_BYTES; cublasLtMatmulDescAttributes_t: "
                      "BIAS_POINTER / EPILOGUE_AUX_POINTER alignment]",
                      (long long)m, (long long)n, (long long)k, d->epilogue, why_not.c_str());
    return CUBLAS_STATUS_SUCCESS;
}

PTD_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t computeDesc,
                                                      const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                                                      const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                                                      const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                                                      cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                                                      void* workspace, size_t workspaceSizeInBytes,
                                                      cudaStream_t /*stream*/) {
    auto* h = reinterpret_cast<Handle*>(handle);
    if (!h || h->magic != kMagic) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtMatmul: no handle");
    const auto* d = reinterpret_cast<const Desc*>(computeDesc);
    const Layout* ls[4] = {reinterpret_cast<const Layout*>(Adesc), reinterpret_cast<const Layout*>(Bdesc),
                           reinterpret_cast<const Layout*>(Cdesc), reinterpret_cast<const Layout*>(Ddesc)};
    int64_t m, n, k;
    if (cublasStatus_t st = check_problem(d, ls[0], ls[1], ls[2], ls[3], &m, &n, &k); st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (!alpha || !beta || !A || !B || !C || !D)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: alpha, beta, A, B, C and D must not be null");
    // The engine always passes an algorithm from the heuristic (a null algo would make
    // cuBLASLt run its own heuristic with default preferences: 256-byte alignment assumed).
    Algo a{};
    if (!algo) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: algo is null (ptd-engine always passes one)");
    std::memcpy(&a, algo->data, sizeof a);
    if (a.magic != kMagic) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: algo did not come from the heuristic");
    if (!a.tensor_op && d->epilogue != CUBLASLT_EPILOGUE_DEFAULT)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul: the simt algorithm has no epilogue %u", d->epilogue);
    // [cublasLtMatmul(): INVALID_VALUE "when workspaceSizeInBytes is less than workspace required by configured algo"]
    if (workspaceSizeInBytes < a.workspace || (a.workspace && !workspace))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: workspace %zu bytes at %p, the algorithm needs %llu",
                      workspaceSizeInBytes, workspace, (unsigned long long)a.workspace);
    const float beta_v = *static_cast<const float*>(beta);
    const void* ptrs[4] = {A, B, C, D};
    const char* names[] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; ++i) {
        if (i == 2 && beta_v == 0.0f) continue;  // C unread
        const int have = alignment_of(ptrs[i]);
        if ((uint64_t)have < a.need_align[i])
            return refuse(CUBLAS_STATUS_EXECUTION_FAILED,
                          "cublasLtMatmul: misaligned address: %s at %p is %d-byte aligned but the algorithm the "
                          "heuristic chose assumes %llu (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%s_BYTES, default 256: "
                          "declare the real alignment) [cublasLtMatmulPreferenceAttributes_t: MIN_ALIGNMENT_*_BYTES]",
                          names[i], ptrs[i], have, (unsigned long long)a.need_align[i], names[i]);
    }
    if (a.tensor_op) {
        if (uses_bias(d->epilogue) && alignment_of(d->bias) < 16)
            return refuse(CUBLAS_STATUS_EXECUTION_FAILED, "cublasLtMatmul: misaligned address: bias at %p", d->bias);
        if (uses_aux(d->epilogue) && alignment_of(d->aux) < 16)
            return refuse(CUBLAS_STATUS_EXECUTION_FAILED, "cublasLtMatmul: misaligned address: aux at %p", d->aux);
    }
    if (g_dry()) return CUBLAS_STATUS_SUCCESS;

    // The product, by the engine's reference with the call rebuilt from the descriptors.
    lt::LtMatmul p;
    auto to_lt = [](int32_t t) {
        return t == CUDA_R_32F ? lt::DTypeLt::f32 : t == CUDA_R_16BF ? lt::DTypeLt::bf16 : lt::DTypeLt::f16;
    };
    p.trans_a = d->transa == CUBLAS_OP_T, p.trans_b = d->transb == CUBLAS_OP_T;
    p.m = m, p.n = n, p.k = k;
    p.alpha = *static_cast<const float*>(alpha), p.beta = beta_v;
    p.A = A, p.a_type = to_lt(ls[0]->type), p.lda = ls[0]->ld, p.stride_a = ls[0]->stride;
    p.B = B, p.b_type = to_lt(ls[1]->type), p.ldb = ls[1]->ld, p.stride_b = ls[1]->stride;
    p.C = C, p.c_type = to_lt(ls[2]->type), p.ldc = ls[2]->ld, p.stride_c = ls[2]->stride;
    p.D = D, p.d_type = to_lt(ls[3]->type), p.ldd = ls[3]->ld, p.stride_d = ls[3]->stride;
    p.batch = ls[3]->batch;
    switch (d->epilogue) {
        case CUBLASLT_EPILOGUE_BIAS: p.epilogue = lt::Epilogue::bias; break;
        case CUBLASLT_EPILOGUE_GELU: p.epilogue = lt::Epilogue::gelu; break;
        case CUBLASLT_EPILOGUE_GELU_BIAS: p.epilogue = lt::Epilogue::gelu_bias; break;
        case CUBLASLT_EPILOGUE_GELU_AUX: p.epilogue = lt::Epilogue::gelu_aux; break;
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: p.epilogue = lt::Epilogue::gelu_aux_bias; break;
        case CUBLASLT_EPILOGUE_DGELU: p.epilogue = lt::Epilogue::dgelu; break;
        case CUBLASLT_EPILOGUE_BGRADB: p.epilogue = lt::Epilogue::bgradb; break;
        default: p.epilogue = lt::Epilogue::none; break;
    }
    p.bias = d->bias, p.bias_type = p.d_type;
    p.aux = d->aux, p.ld_aux = d->aux_ld, p.stride_aux = d->aux_batch_stride;
    const lt::Status s = lt::lt_matmul(p, nullptr);
    if (!s.ok()) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: %s", s.message.c_str());
    return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
