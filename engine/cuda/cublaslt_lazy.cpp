// cublaslt_lazy.cpp — the cuBLASLt entry points blaslt_cuda.cpp calls, resolved from
// libcublasLt at their first call (dlopen + dlsym) instead of at process start.
//
// Why: libcublasLt.so is a 540 MB library whose load-time relocations and static
// constructors cost about 0.5 s of CPU in every process that links it, GPU or not. Every
// CUDA-enabled ptd-engine rank, and every test binary linking the engine, paid that at
// start even on the CPU backend, which never calls cuBLASLt (8 ranks on a 2-core machine:
// 4 s before the first step). Now only a process that really runs a cuBLASLt call loads
// it. ptd_cuda_dev therefore does not link libcublasLt; these definitions satisfy the
// linker with the header's exact signatures (a mismatch is a compile error: two C
// functions of one name). When the library cannot be loaded, every call returns
// CUBLAS_STATUS_NOT_INITIALIZED and the status strings name the library and dlerror(), so
// blaslt_cuda.cpp's first error message (from cublasLtCreate) says what is missing.
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include <cublasLt.h>

namespace {

struct Library {
    void* handle = nullptr;
    std::string error;  // why it could not be loaded ("" when loaded)
};

const Library& library() {
    static const Library lib = [] {
        Library l;
        // The soname of the cuBLAS major version these headers are for, through the
        // executable's run path (CMake's, pointing at the toolkit's lib folder) and the
        // loader's search path; then the toolkit folder found at configure time.
        // PTD_CUBLASLT_LIBRARY names another library with the same entry points instead:
        // CI sets it to the validating stand-in (tests/cublaslt_standin.cpp), so the real call
        // sequence runs, checked against the documented rules, on a machine without a GPU.
        if (const char* over = std::getenv("PTD_CUBLASLT_LIBRARY"); over && *over) {
            l.handle = dlopen(over, RTLD_NOW | RTLD_LOCAL);
            if (!l.handle) l.error = std::string("PTD_CUBLASLT_LIBRARY=") + over + ": " + dlerror();
            return l;
        }
        const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
        l.handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!l.handle) {
            l.error = dlerror();
#ifdef PTD_CUDA_LIBRARY_DIR
            const std::string path = std::string(PTD_CUDA_LIBRARY_DIR) + "/" + soname;
            l.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (!l.handle) l.error += "; " + std::string(dlerror());
#endif
        }
        if (l.handle) l.error.clear();
        return l;
    }();
    return lib;
}

// The library's `name`, or nullptr when the library or the symbol is missing.
template <class Fn>
Fn resolve(const char* name) {
    const Library& lib = library();
    return lib.handle ? reinterpret_cast<Fn>(dlsym(lib.handle, name)) : nullptr;
}

// The message for a call that could not be made, kept for the process's lifetime (the
// status-string functions return const char*).
const char* unavailable(const char* name) {
    static std::mutex mutex;
    static std::string text;
    std::lock_guard lock(mutex);
    const Library& lib = library();
    text = lib.handle ? std::string("libcublasLt has no ") + name
                      : "libcublasLt." + std::to_string(CUBLAS_VER_MAJOR) + " could not be loaded (" + lib.error + ")";
    return text.c_str();
}

}  // namespace

// Each forwarder looks its target up once (a function-local static per entry point).
#define PTD_LT_FORWARD(name, params, args)                                   \
    cublasStatus_t CUBLASWINAPI name params {                               \
        static const auto fn = resolve<decltype(&name)>(#name);             \
        return fn ? fn args : CUBLAS_STATUS_NOT_INITIALIZED;                \
    }

extern "C" {

const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
    static const auto fn = resolve<decltype(&cublasLtGetStatusName)>("cublasLtGetStatusName");
    return fn ? fn(status) : unavailable("cublasLtGetStatusName");
}

const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
    static const auto fn = resolve<decltype(&cublasLtGetStatusString)>("cublasLtGetStatusString");
    return fn ? fn(status) : unavailable("cublasLtGetStatusString");
}

PTD_LT_FORWARD(cublasLtCreate, (cublasLtHandle_t * lightHandle), (lightHandle))
PTD_LT_FORWARD(cublasLtDestroy, (cublasLtHandle_t lightHandle), (lightHandle))
PTD_LT_FORWARD(cublasLtMatmulDescCreate,
               (cublasLtMatmulDesc_t * matmulDesc, cublasComputeType_t computeType, cudaDataType_t scaleType),
               (matmulDesc, computeType, scaleType))
PTD_LT_FORWARD(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t matmulDesc), (matmulDesc))
PTD_LT_FORWARD(cublasLtMatmulDescSetAttribute,
               (cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr, const void* buf,
                size_t sizeInBytes),
               (matmulDesc, attr, buf, sizeInBytes))
PTD_LT_FORWARD(cublasLtMatrixLayoutCreate,
               (cublasLtMatrixLayout_t * matLayout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),
               (matLayout, type, rows, cols, ld))
PTD_LT_FORWARD(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t matLayout), (matLayout))
PTD_LT_FORWARD(cublasLtMatrixLayoutSetAttribute,
               (cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                size_t sizeInBytes),
               (matLayout, attr, buf, sizeInBytes))
PTD_LT_FORWARD(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))
PTD_LT_FORWARD(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
PTD_LT_FORWARD(cublasLtMatmulPreferenceSetAttribute,
               (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                size_t sizeInBytes),
               (pref, attr, buf, sizeInBytes))
PTD_LT_FORWARD(cublasLtMatmulAlgoGetHeuristic,
               (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
                cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount),
               (lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount,
                heuristicResultsArray, returnAlgoCount))
PTD_LT_FORWARD(cublasLtMatmul,
               (cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha, const void* A,
                cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream),
               (lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
                workspaceSizeInBytes, stream))

}  // extern "C"
