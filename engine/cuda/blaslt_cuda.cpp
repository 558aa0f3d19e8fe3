// blaslt_cuda.cpp — blaslt.h over cuBLASLt (ptd_cuda_dev, ENABLE_CUDA only): compute type
// f32 with f32 scales, one cublasLtHandle_t and one 32 MiB workspace per stream. The
// heuristic is told the real pointer alignments (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*; its
// default of 256 bytes can choose a kernel that faults on a 16-byte-aligned view), its
// candidates are tried in order until one runs, and that one is cached per call shape
// (types, ops, sizes, lds, strides, epilogue, pointer alignments) so the same shape always
// runs the same algorithm — the determinism the engine promises. None at all: kLtNoAlgorithm,
// and the backend runs the epilogue unfused. Arguments are checked by lt_validate and
// lt_epilogue_runnable first (the backend checks it before either layer), so both builds
// refuse the same calls and take the same fallbacks.
//
// The hot path (issue 30 point 5): a call shape's descriptors — the matmul descriptor and
// the four layouts — are built once and kept with its algorithm in a plan cache of the
// calling thread, so a repeated shape creates no descriptor, runs no heuristic and takes no
// lock; only the bias and aux pointers, which differ between layers of one shape, are set on
// the kept descriptor before the call. The process-wide registry (handles, workspaces, the
// algorithm chosen per shape) is locked only on a thread's first call of a shape or stream.
// lt_forget_plans and lt_release invalidate every thread's cache (a generation count).
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "blaslt.h"
#include "blaslt_cuda.h"

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

// Bumped by lt_forget_plans and lt_release: a thread's cache from an older generation is
// dropped before its next call.
std::atomic<uint64_t> g_generation{1};

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

// One call shape's descriptors and the algorithm that runs it (RAII).
struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool has_algo = false;
    Plan() = default;
    Plan(const Plan&) = delete;
    Plan& operator=(const Plan&) = delete;
    ~Plan() {
        if (d) cublasLtMatrixLayoutDestroy(d);
        if (c) cublasLtMatrixLayoutDestroy(c);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};
struct Preference {
    cublasLtMatmulPreference_t pref = nullptr;
    ~Preference() {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
    }
};

// The calling thread's plans (by handle and shape) and its last stream's registry entry.
struct ThreadPlans {
    uint64_t generation = 0;
    std::map<std::pair<cublasLtHandle_t, PlanKey>, std::unique_ptr<Plan>> plans;
    StreamHandle stream = nullptr;
    PerStream per_stream;
    bool has_stream = false;
    // Drops what an older generation cached (descriptors are host objects: any thread may
    // destroy them).
    void refresh() {
        const uint64_t g = g_generation.load(std::memory_order_acquire);
        if (generation == g) return;
        plans.clear();
        has_stream = false;
        generation = g;
    }
};
ThreadPlans& thread_plans() {
    thread_local ThreadPlans t;
    t.refresh();
    return t;
}

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

// A status is a reason to try the heuristic's next algorithm when the call was refused
// before anything ran: the algorithm does not fit these pointers, sizes or this device.
bool try_next_algorithm(cublasStatus_t st) {
    return st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE || st == CUBLAS_STATUS_ARCH_MISMATCH;
}

Status no_algorithm(const LtMatmul& p, const std::string& why) {
    return Status{kLtNoAlgorithm, "lt_matmul: cuBLASLt has no algorithm for m=" + std::to_string(p.m) +
                                      " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) + " " +
                                      dtype_lt_name(p.a_type) + "→" + dtype_lt_name(p.d_type) + " epilogue " +
                                      epilogue_name(p.epilogue) + ": " + why};
}

// The key of a call shape: everything the heuristic's choice and the descriptors depend on
// (not the pointers themselves, only their alignments).
PlanKey plan_key(const LtMatmul& p) {
    const bool c_used = p.beta != 0.0f && p.C;
    const void* C = c_used ? p.C : p.D;
    return PlanKey{p.trans_a,   p.trans_b, p.m,       p.n,        p.k,         (int)p.a_type, (int)p.c_type,
                   (int)p.epilogue, (int)p.bias_type, p.lda, p.ldb,  c_used ? p.ldc : p.ldd, p.ldd, p.batch,
                   p.stride_a, p.stride_b, c_used ? p.stride_c : p.stride_d, p.stride_d,
                   lt_pointer_alignment(p.A) * 4096 + lt_pointer_alignment(p.B),
                   lt_pointer_alignment(C) * 4096 + lt_pointer_alignment(p.D), p.ld_aux, p.stride_aux,
                   p.beta != 0.0f,
                   (p.aux ? lt_pointer_alignment(p.aux) : 0) * 4096 + (p.bias ? lt_pointer_alignment(p.bias) : 0)};
}

// The descriptors of p's shape: everything but the bias and aux pointers (set per call).
Status build_plan(const LtMatmul& p, Plan* plan) {
    PTD_TRY(PTD_LT(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F)));
    const cublasOperation_t ta = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    PTD_TRY(PTD_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)));
    PTD_TRY(PTD_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)));
    const cublasLtEpilogue_t epi = cuda_epilogue(p.epilogue);
    PTD_TRY(PTD_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)));
    if (p.bias) {
        const int32_t bt = cuda_type(p.bias_type);
        PTD_TRY(PTD_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt)));
    }
    if (p.aux) {
        PTD_TRY(PTD_LT(
            cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &p.ld_aux, sizeof p.ld_aux)));
        if (p.batch > 1)
            PTD_TRY(PTD_LT(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE,
                                                          &p.stride_aux, sizeof p.stride_aux)));
    }
    PTD_TRY(make_layout(&plan->a, p.a_type, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k, p.lda, p.batch, p.stride_a));
    PTD_TRY(make_layout(&plan->b, p.b_type, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, p.ldb, p.batch, p.stride_b));
    // beta == 0 leaves C unread (it may be null): describe it as D.
    const bool c_used = p.beta != 0.0f && p.C;
    PTD_TRY(make_layout(&plan->c, c_used ? p.c_type : p.d_type, p.m, p.n, c_used ? p.ldc : p.ldd, p.batch,
                        c_used ? p.stride_c : p.stride_d));
    PTD_TRY(make_layout(&plan->d, p.d_type, p.m, p.n, p.ldd, p.batch, p.stride_d));
    return {};
}

// The pointers that change between calls of one shape, set on the kept descriptor.
Status set_call_pointers(const LtMatmul& p, const Plan& plan) {
    if (p.bias)
        PTD_TRY(PTD_LT(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias)));
    if (p.aux)
        PTD_TRY(PTD_LT(
            cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p.aux, sizeof p.aux)));
    return {};
}

// The algorithm of p's shape, with the registry's lock held: the one chosen before (any
// thread), or, the first time, the heuristic's candidates — told the pointers' real
// alignment (its default assumes 256 bytes and may pick a kernel that faults on a
// 16-byte-aligned view) — each tried in order until one runs; that one is kept for the shape.
// *ran_call: the call itself already ran (a candidate that worked).
Status choose_algorithm_locked(const LtMatmul& p, const PlanKey& key, Plan& plan, cublasLtHandle_t handle,
                               void* workspace, size_t workspace_bytes, cudaStream_t stream, bool* ran_call) {
    Registry& r = registry();
    *ran_call = false;
    if (auto it = r.algos.find(key); it != r.algos.end()) {
        plan.algo = it->second, plan.has_algo = true;
        return {};
    }
    const bool c_used = p.beta != 0.0f && p.C;
    const void* C = c_used ? p.C : p.D;
    const float alpha = p.alpha, beta = p.beta;
    Preference pref;
    PTD_TRY(PTD_LT(cublasLtMatmulPreferenceCreate(&pref.pref)));
    const uint64_t ws = workspace_bytes;
    PTD_TRY(PTD_LT(
        cublasLtMatmulPreferenceSetAttribute(pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)));
    const struct {
        cublasLtMatmulPreferenceAttributes_t attr;
        const void* ptr;
    } alignments[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, p.A},
                      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p.B},
                      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, C},
                      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p.D}};
    for (const auto& a : alignments) {
        const uint32_t bytes = (uint32_t)lt_pointer_alignment(a.ptr);
        PTD_TRY(PTD_LT(cublasLtMatmulPreferenceSetAttribute(pref.pref, a.attr, &bytes, sizeof bytes)));
    }
    constexpr int kCandidates = 8;
    cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
    int found = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(handle, plan.op, plan.a, plan.b, plan.c, plan.d, pref.pref,
                                                             kCandidates, results, &found);
    if (hs == CUBLAS_STATUS_NOT_SUPPORTED || (hs == CUBLAS_STATUS_SUCCESS && found == 0))
        return no_algorithm(p, std::string("the heuristic returned none (") + cublasLtGetStatusString(hs) + ")");
    PTD_TRY(PTD_LT(hs));
    std::string refusals;
    for (int i = 0; i < found; ++i) {
        if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize > workspace_bytes) continue;
        const cublasStatus_t st = cublasLtMatmul(handle, plan.op, &alpha, p.A, plan.a, p.B, plan.b, &beta, C, plan.c,
                                                 p.D, plan.d, &results[i].algo, workspace, workspace_bytes, stream);
        if (st == CUBLAS_STATUS_SUCCESS) {
            r.algos.emplace(key, results[i].algo);
            plan.algo = results[i].algo, plan.has_algo = true;
            *ran_call = true;
            return {};
        }
        if (!try_next_algorithm(st)) return PTD_LT(st);
        refusals += std::string(refusals.empty() ? "" : "; ") + "candidate " + std::to_string(i) + ": " +
                    cublasLtGetStatusName(st) + ": " + cublasLtGetStatusString(st);
    }
    return no_algorithm(p, "none of the heuristic's " + std::to_string(found) + " candidates ran (" + refusals + ")");
}

// The call: the calling thread's plan of this shape (built, and its algorithm chosen under
// the registry's lock, the first time), its bias and aux pointers set, one cublasLtMatmul.
Status lt_matmul_planned(const LtMatmul& p, cublasLtHandle_t handle, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream) {
    ThreadPlans& t = thread_plans();
    const PlanKey key = plan_key(p);
    auto ran = [&](Status s) {
        if (!s.ok()) return s;
        const std::string what = "lt_matmul (m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
                                 " k=" + std::to_string(p.k) + " batch=" + std::to_string(p.batch) + " epilogue " +
                                 epilogue_name(p.epilogue) + ")";
        return sync_check(what.c_str());
    };
    auto it = t.plans.find({handle, key});
    if (it == t.plans.end()) {
        auto plan = std::make_unique<Plan>();
        PTD_TRY(build_plan(p, plan.get()));
        PTD_TRY(set_call_pointers(p, *plan));
        bool ran_call = false;
        {
            std::lock_guard lock(registry().mutex);
            PTD_TRY(choose_algorithm_locked(p, key, *plan, handle, workspace, workspace_bytes, stream, &ran_call));
        }
        it = t.plans.emplace(std::pair{handle, key}, std::move(plan)).first;
        if (ran_call) return ran({});
    } else {
        PTD_TRY(set_call_pointers(p, *it->second));
    }
    const Plan& plan = *it->second;
    const bool c_used = p.beta != 0.0f && p.C;
    const float alpha = p.alpha, beta = p.beta;
    return ran(PTD_LT(cublasLtMatmul(handle, plan.op, &alpha, p.A, plan.a, p.B, plan.b, &beta, c_used ? p.C : p.D,
                                     plan.c, p.D, plan.d, &plan.algo, workspace, workspace_bytes, stream)));
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
    g_generation.fetch_add(1, std::memory_order_acq_rel);
}

Status lt_matmul(const LtMatmul& p, StreamHandle stream) {
    PTD_TRY(lt_validate(p));
    PTD_TRY(lt_epilogue_runnable(p));
    // The stream's handle and workspace: from this thread's last call on it, else the registry.
    ThreadPlans& t = thread_plans();
    if (!t.has_stream || t.stream != stream) {
        std::lock_guard lock(registry().mutex);
        PerStream* ps = nullptr;
        PTD_TRY(per_stream(stream, &ps));
        t.stream = stream, t.per_stream = *ps, t.has_stream = true;
    }
    return lt_matmul_planned(p, t.per_stream.handle, t.per_stream.workspace, kWorkspaceBytes, stream);
}

Status lt_matmul_on(const LtMatmul& p, cublasLtHandle_t handle, void* workspace, size_t workspace_bytes,
                    cudaStream_t stream) {
    PTD_TRY(lt_validate(p));
    PTD_TRY(lt_epilogue_runnable(p));
    return lt_matmul_planned(p, handle, workspace, workspace_bytes, stream);
}

void lt_forget_plans() {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    r.algos.clear();
    g_generation.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace ptd::cuda::dev
