// blaslt_common.cpp — what both cuBLASLt layers share: the names and lt_validate, the checks
// cuBLASLt makes on a call, so the reference rejects exactly what the real call would (with
// a message that says which field is wrong) instead of computing something else. Compiled
// once per build (ptd_cuda_sim with PTD_CUDA_SIM, ptd_cuda_dev without).
#include <cstdio>

#include "blaslt.h"

namespace ptd::cuda::PTD_CUDA_NS {

const char* dtype_lt_name(DTypeLt t) {
    switch (t) {
        case DTypeLt::f32: return "f32";
        case DTypeLt::bf16: return "bf16";
        case DTypeLt::f16: return "f16";
    }
    return "?";
}

const char* epilogue_name(Epilogue e) {
    switch (e) {
        case Epilogue::none: return "none";
        case Epilogue::bias: return "bias";
        case Epilogue::gelu: return "gelu";
        case Epilogue::gelu_bias: return "gelu_bias";
        case Epilogue::gelu_aux: return "gelu_aux";
        case Epilogue::gelu_aux_bias: return "gelu_aux_bias";
        case Epilogue::dgelu: return "dgelu";
        case Epilogue::bgradb: return "bgradb";
    }
    return "?";
}

namespace {
Status invalid(const LtMatmul& p, const std::string& what) {
    return Status{kErrInvalidValue, "lt_matmul(m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
                                        " k=" + std::to_string(p.k) + " batch=" + std::to_string(p.batch) +
                                        " epilogue=" + epilogue_name(p.epilogue) + "): " + what};
}
bool uses_bias(Epilogue e) {
    return e == Epilogue::bias || e == Epilogue::gelu_bias || e == Epilogue::gelu_aux_bias || e == Epilogue::bgradb;
}
bool uses_aux(Epilogue e) { return e == Epilogue::gelu_aux || e == Epilogue::gelu_aux_bias || e == Epilogue::dgelu; }
std::string num(int64_t v) { return std::to_string(v); }
int64_t elem_bytes(DTypeLt t) { return t == DTypeLt::f32 ? 4 : 2; }
std::string hex(const void* p) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", p);
    return buf;
}
}  // namespace

int lt_pointer_alignment(const void* p) {
#if defined(PTD_CUDA_SIM)
    // memcheck's `end` placement moves allocation starts; on the GPU they are 256-byte aligned
    if (sim_memcheck() != SimMemcheck::off) return (int)sim_gpu_alignment(p);
#endif
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    for (int al : {256, 128, 64, 32, 16, 8, 4, 2})
        if (a % (uintptr_t)al == 0) return al;
    return 1;
}

Status lt_epilogue_runnable(const LtMatmul& p) {
    if (p.epilogue == Epilogue::none) return {};
    auto refuse = [&](const std::string& what) {
        Status s = invalid(p, "no fused-epilogue algorithm: " + what);
        s.code = kLtNoAlgorithm;
        return s;
    };
    struct Operand {
        const char* name;
        const void* ptr;
        DTypeLt type;
        int64_t ld, stride;
        bool used;
    };
    const bool c_used = p.beta != 0.0f;
    const Operand ops[] = {
        {"A", p.A, p.a_type, p.lda, p.stride_a, true},
        {"B", p.B, p.b_type, p.ldb, p.stride_b, true},
        {"C", p.C, p.c_type, p.ldc, p.stride_c, c_used},
        {"D", p.D, p.d_type, p.ldd, p.stride_d, true},
        {"aux", p.aux, p.d_type, p.ld_aux, p.stride_aux, uses_aux(p.epilogue)},
    };
    for (const Operand& o : ops) {
        if (!o.used) continue;
        if (lt_pointer_alignment(o.ptr) < 16)
            return refuse(std::string(o.name) + " at " + hex(o.ptr) + " is not 16-byte aligned");
        if (o.ld * elem_bytes(o.type) % 16 != 0)
            return refuse(std::string("leading dimension of ") + o.name + " = " + num(o.ld) + " × " +
                          num(elem_bytes(o.type)) + " bytes is not a multiple of 16");
        if (p.batch > 1 && o.stride * elem_bytes(o.type) % 16 != 0)
            return refuse(std::string("batch stride of ") + o.name + " = " + num(o.stride) + " × " +
                          num(elem_bytes(o.type)) + " bytes is not a multiple of 16");
    }
    if (uses_bias(p.epilogue) && lt_pointer_alignment(p.bias) < 16)
        return refuse("bias at " + hex(p.bias) + " is not 16-byte aligned");
    return {};
}

Status lt_validate(const LtMatmul& p) {
    if (p.m < 1 || p.n < 1 || p.k < 1)
        return invalid(p, "m, n and k must be at least 1");
    if (p.batch < 1) return invalid(p, "batch = " + num(p.batch) + ", must be at least 1");
    // Type combinations of compute type CUBLAS_COMPUTE_32F with scale type f32.
    if (p.a_type != p.b_type)
        return invalid(p, std::string("A is ") + dtype_lt_name(p.a_type) + " but B is " + dtype_lt_name(p.b_type) +
                              "; A and B must have the same type");
    if (p.c_type != p.d_type)
        return invalid(p, std::string("C is ") + dtype_lt_name(p.c_type) + " but D is " + dtype_lt_name(p.d_type) +
                              "; C and D must have the same type");
    if (p.d_type != DTypeLt::f32 && p.d_type != p.a_type)
        return invalid(p, std::string("A/B ") + dtype_lt_name(p.a_type) + " with C/D " + dtype_lt_name(p.d_type) +
                              " is not a cuBLASLt combination (allowed: f32/f32, bf16 with bf16 or f32, f16 with f16 "
                              "or f32)");
    const int64_t rows_a = p.trans_a ? p.k : p.m, rows_b = p.trans_b ? p.n : p.k;
    if (p.lda < rows_a)
        return invalid(p, "lda = " + num(p.lda) + " is less than the " + num(rows_a) + " rows of A as stored (" +
                              (p.trans_a ? "k×m, trans_a" : "m×k") + ")");
    if (p.ldb < rows_b)
        return invalid(p, "ldb = " + num(p.ldb) + " is less than the " + num(rows_b) + " rows of B as stored (" +
                              (p.trans_b ? "n×k, trans_b" : "k×n") + ")");
    if (p.ldd < p.m) return invalid(p, "ldd = " + num(p.ldd) + " is less than m = " + num(p.m));
    if (p.beta != 0.0f && p.ldc < p.m) return invalid(p, "ldc = " + num(p.ldc) + " is less than m = " + num(p.m));
    if (!p.A || !p.B || !p.D) return invalid(p, "A, B and D must not be null");
    if (p.beta != 0.0f && !p.C) return invalid(p, "beta != 0 but C is null");
    // Every operand at least at its element's natural alignment (a misaligned element is an
    // address fault on the device, whatever the algorithm).
    {
        struct Elem {
            const char* name;
            const void* ptr;
            DTypeLt type;
        };
        const Elem elems[] = {{"A", p.A, p.a_type}, {"B", p.B, p.b_type}, {"C", p.beta != 0.0f ? p.C : nullptr, p.c_type},
                              {"D", p.D, p.d_type}, {"bias", p.bias, p.bias_type}, {"aux", p.aux, p.d_type}};
        for (const Elem& e : elems)
            if (e.ptr && lt_pointer_alignment(e.ptr) < elem_bytes(e.type))
                return invalid(p, std::string(e.name) + " at " + hex(e.ptr) + " is not aligned to its " +
                                      dtype_lt_name(e.type) + " elements (" + num(elem_bytes(e.type)) + " bytes)");
    }
    if (p.beta != 0.0f && p.C == p.D && (p.ldc != p.ldd || (p.batch > 1 && p.stride_c != p.stride_d)))
        return invalid(p, "in place (C == D) needs ldc == ldd and stride_c == stride_d (given ldc " + num(p.ldc) +
                              ", ldd " + num(p.ldd) + ", stride_c " + num(p.stride_c) + ", stride_d " +
                              num(p.stride_d) + ")");
    if (p.batch > 1) {
        if (p.stride_a < 0 || p.stride_b < 0 || p.stride_c < 0 || p.stride_d < 0)
            return invalid(p, "batch strides must not be negative");
        // The batches of D must not share an element. Two layouts guarantee it: one after
        // the other (stride_d ≥ ldd·n), or side by side inside each column's leading
        // dimension (stride_d ≥ m and the last batch's rows end by ldd) — e.g. per-head
        // outputs written into the columns of [B,T,H,D] rows. cuBLASLt does not check this;
        // an overlap would make the result depend on its algorithm.
        const bool blocked = p.stride_d >= p.ldd * p.n;
        const bool interleaved = p.stride_d >= p.m && (p.batch - 1) * p.stride_d + p.m <= p.ldd;
        if (!blocked && !interleaved)
            return invalid(p, "stride_d = " + num(p.stride_d) + " makes the batches of D overlap (allowed: stride_d ≥ ldd·n = " +
                                  num(p.ldd * p.n) + ", or stride_d ≥ m = " + num(p.m) +
                                  " with (batch − 1)·stride_d + m ≤ ldd = " + num(p.ldd) + ")");
    }
    if (uses_bias(p.epilogue)) {
        if (!p.bias) return invalid(p, "the epilogue needs a bias pointer");
        if (p.bias_type != p.d_type)
            return invalid(p, std::string("bias is ") + dtype_lt_name(p.bias_type) + "; cuBLASLt's bias type is D's (" +
                                  dtype_lt_name(p.d_type) + ")");
    }
    if (p.epilogue == Epilogue::bgradb && p.batch != 1)
        return invalid(p, "bgradb with batch > 1 is not supported (one bias gradient per call)");
    if (uses_aux(p.epilogue)) {
        if (!p.aux) return invalid(p, "the epilogue needs an aux pointer");
        if (p.ld_aux < p.m || p.ld_aux % 8 != 0)
            return invalid(p, "ld_aux = " + num(p.ld_aux) + "; cuBLASLt needs ld_aux ≥ m (" + num(p.m) +
                                  ") and divisible by 8");
        if (p.batch > 1 && (p.stride_aux % 8 != 0 || p.stride_aux < p.ld_aux * p.n))
            return invalid(p, "stride_aux = " + num(p.stride_aux) + "; needs divisible by 8 and ≥ ld_aux·n (" +
                                  num(p.ld_aux * p.n) + ")");
    }
    return {};
}

}  // namespace ptd::cuda::PTD_CUDA_NS
