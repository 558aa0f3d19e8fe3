// test_cublaslt_standin.cpp — the engine's real cuBLASLt layer (blaslt_cuda.cpp, through the
// lazy seam cublaslt_lazy.cpp) against the validating stand-in library
// (cublaslt_standin.cpp), on host memory, without a GPU:
//   - every epilogue × transpose × dtype the engine uses gives the reference's bits (so the
//     descriptors say what LtMatmul says);
//   - the heuristic is told the real pointer alignment: a 16-byte-aligned view runs, and the
//     stand-in catches a caller that does not declare it (the PyTorch #98975 failure);
//   - what the documentation refuses is refused, loudly, naming the rule and the operand;
//   - no fused-epilogue algorithm → kLtNoAlgorithm (the backend then runs it unfused);
//   - every GEMM the model makes at every assets/jobs/*.toml shape and at GPT-2 124M, 350M
//     and 774M (T = 1024, bf16) passes, collected from the cuda-sim backend in shapes-only
//     mode (runtime.h) and replayed through the real layer into the stand-in.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "blaslt.h"
#include "blaslt_cuda.h"
#include "cuda_gpu_test_api.h"
#include "job_test_util.h"
#include "lt_standin_test_api.h"
#include "ptd/engine/model.h"
#include "ptd/layout/job_layout.h"

namespace dev = ptd::cuda::dev;
using cuda_gpu_test::GemmSpec;
using ptd_test::kJobs;
using ptd_test::presets;

namespace {

// The seam loads the stand-in instead of libcublasLt: set before the first cuBLASLt call.
const bool kStandinSelected = [] {
    setenv("PTD_CUBLASLT_LIBRARY", PTD_CUBLASLT_STANDIN, 1);
    return true;
}();

// The stand-in's own exports (a process-wide count of refusals; dry mode).
template <class Fn>
Fn standin_symbol(const char* name) {
    void* lib = dlopen(PTD_CUBLASLT_STANDIN, RTLD_NOW | RTLD_NOLOAD);
    if (!lib) lib = dlopen(PTD_CUBLASLT_STANDIN, RTLD_NOW | RTLD_LOCAL);
    return lib ? reinterpret_cast<Fn>(dlsym(lib, name)) : nullptr;
}
long refusals() { return standin_symbol<long (*)()>("ptdCublasLtStandinRefusals")(); }
// The stand-in's counts so far: matmul descriptors, matrix layouts, heuristic queries.
struct LtCalls {
    long descs = 0, layouts = 0, heuristics = 0;
};
LtCalls lt_calls() {
    long c[3] = {};
    standin_symbol<void (*)(long*)>("ptdCublasLtStandinCalls")(c);
    return {c[0], c[1], c[2]};
}
void set_dry(bool dry) { standin_symbol<void (*)(int)>("ptdCublasLtStandinSetDry")(dry ? 1 : 0); }

// A handle and a host workspace, as lt_matmul's per-stream pair.
struct Lt {
    cublasLtHandle_t handle = nullptr;
    std::vector<std::byte> workspace = std::vector<std::byte>(size_t{32} << 20);
    Lt() {
        EXPECT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS) << cublasLtGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED);
        dev::lt_forget_plans();
    }
    ~Lt() { cublasLtDestroy(handle); }
    dev::Status run(const dev::LtMatmul& p) { return dev::lt_matmul_on(p, handle, workspace.data(), workspace.size(), nullptr); }
};

// 256-aligned host storage with room for an offset.
struct Buffer {
    std::vector<std::byte> bytes;
    std::byte* base;
    explicit Buffer(size_t n) : bytes(n + 512) {
        base = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(bytes.data()) + 255) & ~uintptr_t{255});
    }
};

int64_t elem(dev::DTypeLt t) { return t == dev::DTypeLt::f32 ? 4 : 2; }

void fill_random(void* p, dev::DTypeLt t, int64_t n, std::mt19937& rng) {
    lt_standin_test::fill_random(p, (int)t, n, (uint32_t)rng());
}

// A GemmSpec (the simulator side's plain form) as the device layer's call, and back.
dev::LtMatmul to_dev(const GemmSpec& s) {
    dev::LtMatmul d;
    d.trans_a = s.trans_a, d.trans_b = s.trans_b, d.m = s.m, d.n = s.n, d.k = s.k, d.alpha = s.alpha, d.beta = s.beta;
    d.A = s.A, d.B = s.B, d.C = s.C, d.D = s.D;
    d.a_type = d.b_type = (dev::DTypeLt)s.ab_type;
    d.c_type = d.d_type = d.bias_type = (dev::DTypeLt)s.cd_type;
    d.lda = s.lda, d.ldb = s.ldb, d.ldc = s.ldc, d.ldd = s.ldd;
    d.stride_a = s.stride_a, d.stride_b = s.stride_b, d.stride_c = s.stride_c, d.stride_d = s.stride_d;
    d.batch = s.batch, d.epilogue = (dev::Epilogue)s.epilogue, d.bias = s.bias;
    d.aux = s.aux, d.ld_aux = s.ld_aux, d.stride_aux = s.stride_aux;
    return d;
}
GemmSpec to_spec(const dev::LtMatmul& d) {
    GemmSpec s;
    s.trans_a = d.trans_a, s.trans_b = d.trans_b, s.m = d.m, s.n = d.n, s.k = d.k, s.alpha = d.alpha, s.beta = d.beta;
    s.A = d.A, s.B = d.B, s.C = d.C, s.D = d.D;
    s.ab_type = (int)d.a_type, s.cd_type = (int)d.d_type, s.epilogue = (int)d.epilogue;
    s.lda = d.lda, s.ldb = d.ldb, s.ldc = d.ldc, s.ldd = d.ldd;
    s.stride_a = d.stride_a, s.stride_b = d.stride_b, s.stride_c = d.stride_c, s.stride_d = d.stride_d;
    s.batch = d.batch, s.bias = d.bias, s.aux = d.aux, s.ld_aux = d.ld_aux, s.stride_aux = d.stride_aux;
    return s;
}

std::string describe(const dev::LtMatmul& p) {
    return "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) + " batch=" +
           std::to_string(p.batch) + " ta=" + std::to_string(p.trans_a) + " tb=" + std::to_string(p.trans_b) + " " +
           dev::dtype_lt_name(p.a_type) + "→" + dev::dtype_lt_name(p.d_type) + " epilogue " +
           dev::epilogue_name(p.epilogue);
}

}  // namespace

// Each case runs twice from identical inputs: through the real layer into the stand-in, and
// through the reference directly; D (and aux, and the bias gradient) must be the same bytes.
TEST(LtStandin, EveryEpilogueTransposeAndDtypeMatchesTheReference) {
    set_dry(false);
    Lt lt;
    const long before = refusals();
    std::mt19937 rng(11);
    struct Types {
        dev::DTypeLt ab, cd;
    };
    const Types types[] = {{dev::DTypeLt::f32, dev::DTypeLt::f32},
                           {dev::DTypeLt::bf16, dev::DTypeLt::bf16},
                           {dev::DTypeLt::bf16, dev::DTypeLt::f32},
                           {dev::DTypeLt::f16, dev::DTypeLt::f16}};
    const dev::Epilogue epilogues[] = {dev::Epilogue::none,          dev::Epilogue::bias,   dev::Epilogue::gelu,
                                       dev::Epilogue::gelu_bias,     dev::Epilogue::gelu_aux,
                                       dev::Epilogue::gelu_aux_bias, dev::Epilogue::dgelu,  dev::Epilogue::bgradb};
    int cases = 0;
    for (const Types& ty : types)
        for (dev::Epilogue e : epilogues)
            for (int ta = 0; ta < 2; ++ta)
                for (int tb = 0; tb < 2; ++tb)
                    for (int64_t batch : {int64_t{1}, int64_t{3}}) {
                        if (batch > 1 && e == dev::Epilogue::bgradb) continue;
                        if (e != dev::Epilogue::none && ty.ab == dev::DTypeLt::f32 && ty.cd != dev::DTypeLt::f32) continue;
                        const int64_t m = 16, n = 24, k = 40;
                        dev::LtMatmul p;
                        p.trans_a = ta, p.trans_b = tb, p.m = m, p.n = n, p.k = k, p.alpha = 0.75f;
                        p.beta = (e == dev::Epilogue::none || e == dev::Epilogue::bias) ? 0.5f : 0.0f;
                        p.a_type = p.b_type = ty.ab, p.c_type = p.d_type = ty.cd;
                        p.lda = (ta ? k : m) + 8, p.ldb = (tb ? n : k) + 8, p.ldc = p.ldd = m + 8;
                        p.stride_a = p.lda * (ta ? m : k), p.stride_b = p.ldb * (tb ? k : n);
                        p.stride_c = p.stride_d = p.ldd * n;
                        p.batch = batch, p.epilogue = e;
                        const bool bias = e == dev::Epilogue::bias || e == dev::Epilogue::gelu_bias ||
                                          e == dev::Epilogue::gelu_aux_bias || e == dev::Epilogue::bgradb;
                        const bool aux = e == dev::Epilogue::gelu_aux || e == dev::Epilogue::gelu_aux_bias ||
                                         e == dev::Epilogue::dgelu;
                        p.ld_aux = m + 8, p.stride_aux = p.ld_aux * n;
                        const int64_t na = p.stride_a * batch, nb = p.stride_b * batch, nd = p.stride_d * batch;
                        const int64_t nbias = e == dev::Epilogue::bgradb ? n : m, naux = p.stride_aux * batch;
                        Buffer A(na * 4), B(nb * 4), C0(nd * 4), Bias0(nbias * 4), Aux0(naux * 4);
                        fill_random(A.base, ty.ab, na, rng), fill_random(B.base, ty.ab, nb, rng);
                        fill_random(C0.base, ty.cd, nd, rng), fill_random(Bias0.base, ty.cd, nbias, rng);
                        fill_random(Aux0.base, ty.cd, naux, rng);
                        auto run = [&](bool reference, std::vector<std::byte>* d, std::vector<std::byte>* x,
                                       std::vector<std::byte>* bg) {
                            Buffer D(nd * 4), Bias(nbias * 4), Aux(naux * 4);
                            std::memcpy(D.base, C0.base, nd * elem(ty.cd));  // in place: C == D
                            std::memcpy(Bias.base, Bias0.base, nbias * elem(ty.cd));
                            std::memcpy(Aux.base, Aux0.base, naux * elem(ty.cd));
                            dev::LtMatmul q = p;
                            q.A = A.base, q.B = B.base, q.C = D.base, q.D = D.base;
                            q.bias = bias ? Bias.base : nullptr, q.bias_type = ty.cd;
                            q.aux = aux ? Aux.base : nullptr;
                            if (reference) {
                                const std::string error = cuda_gpu_test::reference_matmul(to_spec(q));
                                EXPECT_EQ(error, "") << describe(q);
                            } else {
                                const dev::Status s = lt.run(q);
                                EXPECT_TRUE(s.ok()) << describe(q) << ": " << s.message;
                            }
                            d->assign(D.base, D.base + nd * elem(ty.cd));
                            x->assign(Aux.base, Aux.base + naux * elem(ty.cd));
                            bg->assign(Bias.base, Bias.base + nbias * elem(ty.cd));
                        };
                        std::vector<std::byte> d1, x1, g1, d2, x2, g2;
                        run(false, &d1, &x1, &g1);
                        run(true, &d2, &x2, &g2);
                        EXPECT_EQ(d1, d2) << "D differs: " << describe(p);
                        EXPECT_EQ(x1, x2) << "aux differs: " << describe(p);
                        EXPECT_EQ(g1, g2) << "bias (gradient) differs: " << describe(p);
                        ++cases;
                    }
    EXPECT_GT(cases, 200);
    EXPECT_EQ(refusals(), before) << "the stand-in refused a call the engine made (stderr names it)";
}

// Views 16 bytes past a 256-byte boundary: the real layer declares 16, the heuristic's
// tensor-op algorithm then assumes 16, and the call runs.
TEST(LtStandin, TheRealLayerDeclaresThePointersAlignment) {
    set_dry(false);
    Lt lt;
    const long before = refusals();
    Buffer A(64 * 64 * 2 + 64), B(64 * 64 * 2 + 64), D(64 * 64 * 4 + 64);
    std::mt19937 rng(5);
    fill_random(A.base + 16, dev::DTypeLt::bf16, 64 * 64, rng);
    fill_random(B.base + 16, dev::DTypeLt::bf16, 64 * 64, rng);
    dev::LtMatmul p;
    p.m = p.n = p.k = 64;
    p.A = A.base + 16, p.B = B.base + 16, p.D = D.base + 16;
    p.a_type = p.b_type = dev::DTypeLt::bf16, p.c_type = p.d_type = dev::DTypeLt::f32;
    p.lda = p.ldb = p.ldd = p.ldc = 64;
    const dev::Status s = lt.run(p);
    EXPECT_TRUE(s.ok()) << s.message;
    EXPECT_EQ(refusals(), before);
}

// The failure the engine had before it declared alignments, shown on the bare C API: no
// MIN_ALIGNMENT preference (default 256), a 16-byte-aligned D — the stand-in fails the call
// as the device would and says which operand and which preference.
TEST(LtStandin, AnUndeclaredAlignmentFailsNamingOperandAndPreference) {
    set_dry(false);
    Lt lt;
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, 32, 32, 32), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, 32, 32, 32), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, 32, 32, 32), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t r[4] = {};
    int found = 0;
    ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(lt.handle, op, la, lb, ld, ld, pref, 4, r, &found), CUBLAS_STATUS_SUCCESS);
    ASSERT_GE(found, 1);
    Buffer A(32 * 32 * 2), B(32 * 32 * 2), D(32 * 32 * 4 + 64);
    const float alpha = 1, beta = 0;
    const cublasStatus_t st = cublasLtMatmul(lt.handle, op, &alpha, A.base, la, B.base, lb, &beta, D.base + 16, ld,
                                             D.base + 16, ld, &r[0].algo, nullptr, 0, nullptr);
    EXPECT_EQ(st, CUBLAS_STATUS_EXECUTION_FAILED);
    const std::string msg = cublasLtGetStatusString(st);
    EXPECT_NE(msg.find("misaligned address: D at"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES"), std::string::npos) << msg;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(ld), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(op);
}

// The documented refusals, each with the rule in its message.
TEST(LtStandin, RefusesWhatTheDocumentationRefusesNamingTheRule) {
    set_dry(true);
    Lt lt;
    auto heuristic = [&](auto&& configure, uint64_t max_ws = 0) {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t l[4] = {};
        cublasLtMatmulPreference_t pref = nullptr;
        cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        for (auto& x : l) cublasLtMatrixLayoutCreate(&x, CUDA_R_16BF, 64, 64, 64);
        cublasLtMatmulPreferenceCreate(&pref);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws);
        const cublasStatus_t set = configure(op, l);
        cublasLtMatmulHeuristicResult_t r[4] = {};
        int found = 0;
        const cublasStatus_t st =
            set != CUBLAS_STATUS_SUCCESS ? set : cublasLtMatmulAlgoGetHeuristic(lt.handle, op, l[0], l[1], l[2], l[3], pref, 4, r, &found);
        const std::string msg = st == CUBLAS_STATUS_SUCCESS ? "" : cublasLtGetStatusString(st);
        cublasLtMatmulPreferenceDestroy(pref);
        for (auto& x : l) cublasLtMatrixLayoutDestroy(x);
        cublasLtMatmulDescDestroy(op);
        return std::make_pair(st, msg);
    };
    alignas(256) static char aux[64 * 64 * 2];
    // AUX_LD not divisible by 8.
    auto [s1, m1] = heuristic([](cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t*) {
        const uint32_t e = CUBLASLT_EPILOGUE_GELU_AUX;
        void* p = aux;
        const int64_t ld = 68;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p, sizeof p);
        return cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
    });
    EXPECT_EQ(s1, CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(m1.find("EPILOGUE_AUX_LD = 68; must be divisible by 8"), std::string::npos) << m1;
    // An attribute of the wrong size (int64 for TRANSA).
    auto [s2, m2] = heuristic([](cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t*) {
        const int64_t t = CUBLAS_OP_T;
        return cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
    });
    EXPECT_EQ(s2, CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_NE(m2.find("TRANSA: sizeInBytes 8, the attribute is int32_t"), std::string::npos) << m2;
    // Mixed operand types.
    auto [s3, m3] = heuristic([](cublasLtMatmulDesc_t, cublasLtMatrixLayout_t* l) {
        cublasLtMatrixLayoutDestroy(l[1]);
        return cublasLtMatrixLayoutCreate(&l[1], CUDA_R_32F, 64, 64, 64);
    });
    EXPECT_EQ(s3, CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_NE(m3.find("types A CUDA_R_16BF, B CUDA_R_32F"), std::string::npos) << m3;
    // A bias epilogue with a bias 2 bytes past a 16-byte boundary: no algorithm.
    alignas(256) static char bias[256];
    auto [s4, m4] = heuristic([](cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t*) {
        const uint32_t e = CUBLASLT_EPILOGUE_BIAS;
        const void* p = bias + 2;
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
        return cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p);
    });
    EXPECT_EQ(s4, CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_NE(m4.find("bias pointer not 16-byte aligned"), std::string::npos) << m4;
    // A leading dimension that is not a multiple of 16 bytes with an epilogue: no algorithm.
    auto [s5, m5] = heuristic([](cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t* l) {
        const uint32_t e = CUBLASLT_EPILOGUE_GELU;
        cublasLtMatrixLayoutDestroy(l[0]);
        cublasLtMatrixLayoutCreate(&l[0], CUDA_R_16BF, 64, 64, 68);
        return cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
    });
    EXPECT_EQ(s5, CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_NE(m5.find("A: ld 68 × 2 bytes is not a multiple of 16"), std::string::npos) << m5;
    // Compute type other than 32F.
    cublasLtMatmulDesc_t op16 = nullptr;
    cublasLtMatmulDescCreate(&op16, CUBLAS_COMPUTE_16F, CUDA_R_16F);
    cublasLtMatrixLayout_t l = nullptr;
    cublasLtMatrixLayoutCreate(&l, CUDA_R_16F, 64, 64, 64);
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulHeuristicResult_t r[2] = {};
    int found = 0;
    const cublasStatus_t s7 = cublasLtMatmulAlgoGetHeuristic(lt.handle, op16, l, l, l, l, pref, 2, r, &found);
    EXPECT_EQ(s7, CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_NE(std::string(cublasLtGetStatusString(s7)).find("only CUBLAS_COMPUTE_32F with CUDA_R_32F"), std::string::npos);
    cublasLtMatmulPreferenceDestroy(pref), cublasLtMatrixLayoutDestroy(l), cublasLtMatmulDescDestroy(op16);
    set_dry(false);
}

// The hot path (issue 30 point 5): a call shape's descriptors and algorithm are built once
// per thread and kept — a layer's second and later calls of a shape create no descriptor and
// query no heuristic; the pointers that differ between layers (operands, bias) are the
// call's own, so each result is the reference's for its own bias. A new shape builds its own.
TEST(LtStandin, ARepeatedCallShapeReusesItsDescriptorsAndAlgorithm) {
    set_dry(false);
    Lt lt;
    const long before = refusals();
    std::mt19937 rng(5);
    const int64_t m = 32, n = 16, k = 24;
    auto call = [&](int64_t mm, uint32_t seed) {
        dev::LtMatmul p;
        p.trans_b = true, p.m = mm, p.n = n, p.k = k;
        p.a_type = p.b_type = p.c_type = p.d_type = p.bias_type = dev::DTypeLt::bf16;
        p.lda = mm, p.ldb = n, p.ldc = p.ldd = mm;
        p.epilogue = dev::Epilogue::bias;
        Buffer A(mm * k * 2), B(n * k * 2), Bias(mm * 2), D1(mm * n * 2), D2(mm * n * 2);
        lt_standin_test::fill_random(A.base, 1, mm * k, seed), lt_standin_test::fill_random(B.base, 1, n * k, seed + 1);
        lt_standin_test::fill_random(Bias.base, 1, mm, seed + 2);
        p.A = A.base, p.B = B.base, p.bias = Bias.base;
        p.C = p.D = D1.base;
        const dev::Status s = lt.run(p);
        EXPECT_TRUE(s.ok()) << s.message;
        p.C = p.D = D2.base;
        EXPECT_EQ(cuda_gpu_test::reference_matmul(to_spec(p)), "");
        EXPECT_EQ(0, std::memcmp(D1.base, D2.base, mm * n * 2)) << "seed " << seed << ": D is not the reference's";
    };
    const LtCalls c0 = lt_calls();
    call(m, 1);
    const LtCalls c1 = lt_calls();
    EXPECT_EQ(c1.descs - c0.descs, 1);
    EXPECT_EQ(c1.layouts - c0.layouts, 4);  // A, B, C, D
    EXPECT_EQ(c1.heuristics - c0.heuristics, 1);
    for (uint32_t seed : {7u, 13u, 21u}) call(m, seed);  // new operands and bias, one shape
    const LtCalls c2 = lt_calls();
    EXPECT_EQ(c2.descs, c1.descs) << "a repeated shape rebuilt its matmul descriptor";
    EXPECT_EQ(c2.layouts, c1.layouts) << "a repeated shape rebuilt its layouts";
    EXPECT_EQ(c2.heuristics, c1.heuristics) << "a repeated shape queried the heuristic again";
    call(2 * m, 3);  // another shape: its own plan
    const LtCalls c3 = lt_calls();
    EXPECT_EQ(c3.descs - c2.descs, 1);
    EXPECT_EQ(c3.heuristics - c2.heuristics, 1);
    dev::lt_forget_plans();  // every thread's plans dropped: built again
    call(m, 4);
    EXPECT_EQ(lt_calls().descs - c3.descs, 1);
    EXPECT_EQ(refusals(), before);
}

// Workspace: a split-K algorithm (k ≥ 4096) is offered only when the preference allows its
// workspace, and the call fails naming the workspace when less is passed.
TEST(LtStandin, WorkspaceIsCheckedAgainstTheAlgorithm) {
    set_dry(true);
    Lt lt;
    dev::LtMatmul p;
    alignas(256) static char mem[1024];
    p.m = p.n = 64, p.k = 4096;
    p.A = p.B = p.D = mem;
    p.a_type = p.b_type = p.c_type = p.d_type = dev::DTypeLt::bf16;
    p.lda = 64, p.ldb = 4096, p.ldd = p.ldc = 64;
    p.epilogue = dev::Epilogue::gelu_aux, p.aux = mem, p.ld_aux = 64;
    // The real layer allows its 32 MiB: the fused algorithm runs.
    EXPECT_TRUE(lt.run(p).ok());
    // 1 KiB of workspace: the heuristic has no fused algorithm → kLtNoAlgorithm, named.
    dev::lt_forget_plans();
    const dev::Status s = dev::lt_matmul_on(p, lt.handle, lt.workspace.data(), 1024, nullptr);
    EXPECT_EQ(s.code, dev::kLtNoAlgorithm) << s.message;
    EXPECT_NE(s.message.find("split-K needs 1 MiB of workspace"), std::string::npos) << s.message;
    set_dry(false);
}

// The engine's own rule before the call: a fused epilogue at a misaligned bias or an aux
// leading dimension that is not 16 bytes → kLtNoAlgorithm naming it, in both layers (the
// backend then runs the GEMM and the epilogue as separate kernels).
TEST(LtStandin, MisalignedEpilogueOperandsHaveNoAlgorithm) {
    Lt lt;
    alignas(256) static float mem[4096];
    dev::LtMatmul p;
    p.m = 16, p.n = 8, p.k = 8;
    p.A = p.B = p.D = mem;
    p.lda = 16, p.ldb = 8, p.ldd = p.ldc = 16;
    p.epilogue = dev::Epilogue::bias, p.bias = mem + 1;  // 4 bytes past a 16-byte boundary
    const dev::Status s = lt.run(p);
    EXPECT_EQ(s.code, dev::kLtNoAlgorithm);
    EXPECT_NE(s.message.find("bias at"), std::string::npos) << s.message;
    EXPECT_NE(s.message.find("is not 16-byte aligned"), std::string::npos) << s.message;
    // A plain GEMM with a leading dimension of 7 bf16 (14 bytes) runs: the simt algorithm.
    set_dry(false);
    alignas(256) static uint16_t h[4096];
    dev::LtMatmul q;
    q.m = 7, q.n = 5, q.k = 3;
    q.A = q.B = h, q.D = mem;
    q.a_type = q.b_type = dev::DTypeLt::bf16;
    q.lda = 7, q.ldb = 3, q.ldd = q.ldc = 7;
    const dev::Status t = lt.run(q);
    EXPECT_TRUE(t.ok()) << t.message;
}

// ---- every GEMM of the model ------------------------------------------------------------

struct ModelCase {
    std::string name;
    std::string asset;
    std::vector<std::string> sets;
};

std::vector<ModelCase> model_cases() {
    std::vector<ModelCase> cases;
    for (const auto& entry : std::filesystem::directory_iterator(kJobs))
        if (entry.path().extension() == ".toml") {
            std::string stem = entry.path().stem().string();
            for (char& ch : stem)
                if (!std::isalnum((unsigned char)ch)) ch = '_';
            cases.push_back({stem, entry.path().filename().string(), {}});
        }
    // Two published-run jobs the engine refuses for reasons that do not touch a GEMM: GPT-3's
    // Adam without weight decay, and 405B's global batch (a count, not a shape).
    for (ModelCase& c : cases) {
        if (c.asset == "gpt3-175b-a100.toml") c.sets = {"training.optimizer=adamw"};
        if (c.asset == "llama3-405b-bare.toml") c.sets = {"training.global_batch=16384"};
    }
    std::sort(cases.begin(), cases.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    for (const char* m : {"gpt2-124m", "gpt2-350m", "gpt2-774m"}) {
        std::string name = std::string(m) + "_T1024_bf16";
        for (char& ch : name)
            if (ch == '-') ch = '_';
        cases.push_back({name, "gpt2-124m-local.toml",
                         {std::string("model.preset=") + m, "model.seq_len=1024", "parallel.tp=1", "parallel.pp=1",
                          "cluster.gpus_per_node=1", "training.precision=bf16", "training.micro_batch=4",
                          "training.global_batch=4"}});
    }
    // FlashAttention-2 (kernels/flash.cuh) replaces the score and context GEMMs and launches its
    // own kernels: GPT-2 124M with head size 64 and, with 6 heads, 128 (the kernels' largest
    // instantiation), so the register check holds each against the block it is launched with.
    for (const char* heads : {"12", "6"}) {
        const std::string d = std::string(heads) == "12" ? "64" : "128";
        cases.push_back({"gpt2_124m_T1024_bf16_flash_d" + d, "gpt2-124m-local.toml",
                         {"model.preset=gpt2-124m", std::string("model.heads=") + heads, std::string("model.kv_heads=") + heads, "model.seq_len=1024",
                          "parallel.tp=1", "parallel.pp=1", "cluster.gpus_per_node=1", "training.precision=bf16",
                          "training.flash_attention=true", "training.micro_batch=4", "training.global_batch=4"}});
    }
    return cases;
}

void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }

// The case's job with two layers per pipeline chunk: every layer of a stage makes the same
// calls at the same shapes, and each later layer's tensors sit whole layers further into the
// flat buffers, so two show the calls and the alignment step (the host-side set-up of 80
// layers of a 70B model would take minutes; the list of calls would not change).
ptd::Result<ptd::JobSpec> sweep_job(const ModelCase& mc) {
    auto job = ptd::load_job_file_with_overrides(kJobs + mc.asset, mc.sets, presets());
    if (!job) return job;
    const int chunks = job->parallel.pp * job->parallel.vpp;
    if (!job->parallel.layers_per_stage.empty() || job->model.layers <= 2 * chunks) return job;
    std::vector<std::string> sets = mc.sets;
    sets.push_back("model.layers=" + std::to_string(2 * chunks));
    return ptd::load_job_file_with_overrides(kJobs + mc.asset, sets, presets());
}

class LtStandinModel : public ::testing::TestWithParam<ModelCase> {};

// Every GEMM the engine makes for one micro-batch's forward, output head and backward, on the
// first and the last pipeline stage, at the job's real shapes: collected from the cuda-sim
// backend in shapes-only mode (nothing computed, addresses real), then replayed through the
// real layer into the stand-in (dry). A job the engine refuses is reported with its reason.
TEST_P(LtStandinModel, EveryGemmTheModelMakesPasses) {
    using namespace ptd::engine;
    const ModelCase& mc = GetParam();
    auto job = sweep_job(mc);
    ASSERT_TRUE(job.has_value()) << job.error().str();
    auto layout = ptd::job_layout(*job);
    ASSERT_TRUE(layout.has_value()) << layout.error().str();
    const int pp = layout->degree[ptd::DIM_PP];
    std::vector<int> ranks;
    for (int stage : {0, pp - 1})
        for (int r = 0; r < layout->world; ++r) {
            const auto& c = layout->ranks[(size_t)r].coord;
            if (c[ptd::DIM_TP] == 0 && c[ptd::DIM_CP] == 0 && c[ptd::DIM_DP] == 0 && c[ptd::DIM_PP] == stage) {
                if (std::find(ranks.begin(), ranks.end(), r) == ranks.end()) ranks.push_back(r);
                break;
            }
        }
    auto first = make_engine_config(*job, *layout, ranks[0]);
    ASSERT_TRUE(first.has_value()) << "the engine does not run " << mc.asset << ": " << first.error().str();

    set_dry(true);
    Lt lt;
    const long before = refusals();
    size_t calls = 0, fused = 0;
    for (int rank : ranks) {
        auto cfg = make_engine_config(*job, *layout, rank);
        ASSERT_TRUE(cfg.has_value()) << cfg.error().str();
        std::vector<GemmSpec> trace;
        const std::string error = lt_standin_test::model_gemms(*cfg, &trace);
        ASSERT_EQ(error, "") << mc.name << " rank " << rank;
        for (const GemmSpec& g : trace) {
            const dev::LtMatmul p = to_dev(g);
            const dev::Status s = lt.run(p);
            EXPECT_TRUE(s.ok()) << mc.name << " rank " << rank << ": " << describe(p) << ": " << s.message;
            ++calls;
            fused += p.epilogue != dev::Epilogue::none;
        }
    }
    set_dry(false);
    EXPECT_GT(calls, 0u);
    EXPECT_EQ(refusals(), before) << "the stand-in refused a GEMM the model makes (stderr names it)";
    RecordProperty("gemm_calls", (int)calls);
    std::printf("%s: %zu GEMM calls (%zu with a fused epilogue) on ranks", mc.name.c_str(), calls, fused);
    for (int r : ranks) std::printf(" %d", r);
    std::printf(", all accepted by the stand-in\n");
}

INSTANTIATE_TEST_SUITE_P(JobsAndGpt2, LtStandinModel, ::testing::ValuesIn(model_cases()),
                         [](const auto& info) { return info.param.name; });

// Every launch configuration the engine uses, at every shape of the sweep above (all asset
// jobs and GPT-2 124M–774M), written for the resource check (tests/cuda_resources.cmake:
// registers from ptxas × threads per block against the SM's register file). ctest runs this
// first (fixture) with PTD_LAUNCH_SHAPES_OUT set; alone it only checks the sweep finds some.
TEST(EngineLaunchShapes, EveryLaunchOfTheModelSweepIsRecorded) {
    for (const ModelCase& mc : model_cases()) {
        auto job = sweep_job(mc);
        ASSERT_TRUE(job.has_value()) << job.error().str();
        auto layout = ptd::job_layout(*job);
        ASSERT_TRUE(layout.has_value()) << layout.error().str();
        for (int rank : {0, layout->world - 1}) {
            auto cfg = ptd::engine::make_engine_config(*job, *layout, rank);
            ASSERT_TRUE(cfg.has_value()) << mc.name << ": " << cfg.error().str();
            std::vector<GemmSpec> trace;
            ASSERT_EQ(lt_standin_test::model_gemms(*cfg, &trace), "") << mc.name;
        }
    }
    const std::string text = lt_standin_test::launch_shapes_text();
    EXPECT_GE(std::count(text.begin(), text.end(), '\n'), 5) << text;  // launch sites (many name a variable)
    if (const char* out = std::getenv("PTD_LAUNCH_SHAPES_OUT"); out && *out) {
        std::ofstream f(out);
        f << text;
        ASSERT_TRUE(f.good()) << "cannot write " << out;
    }
    std::printf("%s", text.c_str());
}
