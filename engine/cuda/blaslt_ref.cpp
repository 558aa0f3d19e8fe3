// blaslt_ref.cpp — the simulator build's cuBLASLt: the reference GEMM with cuBLASLt's
// documented column-major semantics (op, leading dimensions, strided batches, alpha/beta
// with C unread when beta == 0, in place C == D, every epilogue of blaslt.h; in shapes-only
// mode it checks and records the call instead). Products are
// accumulated in double and rounded once to D's type, so it is the yardstick the device
// layer is compared with, not an imitation of one cuBLASLt algorithm's summation order.
#include <mutex>
#include <utility>
#include <vector>

#include "blaslt.h"
#include "sim/sim.h"

namespace ptd::cuda::sim {

namespace {

double load(const void* base, DTypeLt t, int64_t i) {
    switch (t) {
        case DTypeLt::f32: return static_cast<const float*>(base)[i];
        case DTypeLt::bf16: return to_f32(static_cast<const bf16*>(base)[i]);
        case DTypeLt::f16: return to_f32(static_cast<const f16*>(base)[i]);
    }
    return 0;
}
void store(void* base, DTypeLt t, int64_t i, double v) {
    const float f = (float)v;  // the f32 accumulator, then one rounding to the storage type
    switch (t) {
        case DTypeLt::f32: static_cast<float*>(base)[i] = f; break;
        case DTypeLt::bf16: static_cast<bf16*>(base)[i] = from_f32<bf16>(f); break;
        case DTypeLt::f16: static_cast<f16*>(base)[i] = from_f32<f16>(f); break;
    }
}
int64_t bytes_of(DTypeLt t) { return t == DTypeLt::f32 ? 4 : 2; }
const void* offset(const void* p, DTypeLt t, int64_t elems) { return static_cast<const char*>(p) + elems * bytes_of(t); }
void* offset(void* p, DTypeLt t, int64_t elems) { return static_cast<char*>(p) + elems * bytes_of(t); }

std::mutex& trace_mutex() {
    static std::mutex m;
    return m;
}
std::vector<LtMatmul>& trace() {
    static std::vector<LtMatmul> t;
    return t;
}

}  // namespace

std::vector<LtMatmul> sim_take_lt_trace() {
    std::lock_guard lock(trace_mutex());
    return std::exchange(trace(), {});
}

Status lt_matmul(const LtMatmul& p, StreamHandle stream /*the sim runs work in order*/) {
    if (Status s = lt_validate(p); !s.ok()) return s;
    if (sim_capture_active()) {  // a graph capture (runtime.h) records the call, by value
        SimGraphNode node;
        node.what = "lt_matmul";
        const auto put = [&node](const char* field, const auto& v) { sim_graph_fix(node, field, v); };
        // field by field: the struct's padding bytes are not part of the call
        put("trans_a", p.trans_a), put("trans_b", p.trans_b), put("m", p.m), put("n", p.n), put("k", p.k);
        put("alpha", p.alpha), put("beta", p.beta), put("A", p.A), put("a_type", p.a_type), put("lda", p.lda);
        put("stride_a", p.stride_a), put("B", p.B), put("b_type", p.b_type), put("ldb", p.ldb);
        put("stride_b", p.stride_b), put("C", p.C), put("c_type", p.c_type), put("ldc", p.ldc);
        put("stride_c", p.stride_c), put("D", p.D), put("d_type", p.d_type), put("ldd", p.ldd);
        put("stride_d", p.stride_d), put("batch", p.batch), put("epilogue", p.epilogue), put("bias", p.bias);
        put("bias_type", p.bias_type), put("aux", p.aux), put("ld_aux", p.ld_aux), put("stride_aux", p.stride_aux);
        node.run = [p] { PTD_CUDA_CHECK(lt_matmul(p, nullptr)); };
        bool recorded = false;
        if (Status s = sim_capture_node(stream, std::move(node), &recorded); !s.ok() || recorded) return s;
    }
    if (sim_shapes_only()) {
        std::lock_guard lock(trace_mutex());
        trace().push_back(p);
        return {};
    }
    const Epilogue e = p.epilogue;
    const bool add_bias = e == Epilogue::bias || e == Epilogue::gelu_bias || e == Epilogue::gelu_aux_bias;
    const bool apply_gelu = e == Epilogue::gelu || e == Epilogue::gelu_bias || e == Epilogue::gelu_aux ||
                            e == Epilogue::gelu_aux_bias;
    const bool store_aux = e == Epilogue::gelu_aux || e == Epilogue::gelu_aux_bias;
    std::vector<double> column(p.m);
    for (int64_t b = 0; b < p.batch; ++b) {
        const void* A = offset(p.A, p.a_type, b * p.stride_a);
        const void* B = offset(p.B, p.b_type, b * p.stride_b);
        const void* C = p.C ? offset(p.C, p.c_type, b * p.stride_c) : nullptr;
        void* D = offset(p.D, p.d_type, b * p.stride_d);
        void* aux = p.aux ? offset(p.aux, p.d_type, b * p.stride_aux) : nullptr;
        for (int64_t j = 0; j < p.n; ++j) {
            // One column of D at a time: C's column is read before D's is written (in place).
            for (int64_t i = 0; i < p.m; ++i) {
                double acc = 0;
                for (int64_t q = 0; q < p.k; ++q) {
                    const double a = load(A, p.a_type, p.trans_a ? q + i * p.lda : i + q * p.lda);
                    const double bv = load(B, p.b_type, p.trans_b ? j + q * p.ldb : q + j * p.ldb);
                    acc += a * bv;
                }
                double x = (double)p.alpha * acc;
                if (p.beta != 0.0f) x += (double)p.beta * load(C, p.c_type, i + j * p.ldc);
                column[i] = x;
            }
            for (int64_t i = 0; i < p.m; ++i) {
                double x = column[i];
                if (add_bias) x += load(p.bias, p.bias_type, i);
                if (store_aux) store(aux, p.d_type, i + j * p.ld_aux, x);
                if (apply_gelu) x = gelu_tanh(x);
                if (e == Epilogue::dgelu) x *= gelu_tanh_grad(load(aux, p.d_type, i + j * p.ld_aux));
                store(D, p.d_type, i + j * p.ldd, x);
            }
        }
        if (e == Epilogue::bgradb) {
            // Σ over k of op(B)[:, j]: one entry per column of D.
            void* grad = const_cast<void*>(p.bias);
            for (int64_t j = 0; j < p.n; ++j) {
                double sum = 0;
                for (int64_t q = 0; q < p.k; ++q) sum += load(B, p.b_type, p.trans_b ? j + q * p.ldb : q + j * p.ldb);
                store(grad, p.bias_type, j, sum);
            }
        }
    }
    return {};
}

Status lt_prepare(StreamHandle) { return {}; }
void lt_release() {}

}  // namespace ptd::cuda::sim
