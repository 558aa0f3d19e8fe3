// cuda_backend.cpp — the CUDA compute backend of ptd-engine (the contract is backend.h): a
// thin adapter from Backend's ops to our kernels (kernels.h), cuBLASLt (blaslt.h) and the
// CUDA runtime (runtime.h). Compiled twice from this one source: with PTD_CUDA_SIM it is
// the `cuda-sim` backend (namespace ptd::cuda::sim: the kernels run in the CUDA simulator,
// GEMMs in the cuBLASLt reference, "device" memory is host memory), without it the `cuda`
// backend (namespace ptd::cuda::dev: nvcc kernels, cuBLASLt, cudart). Everything a GPU run
// does, the simulator run does, call for call.
//
// Streams: one compute stream (every kernel and GEMM) and one comm stream (the
// communicator's), ordered by the engine's events (CommOnStream). Host staging (alloc_host:
// the token ids, the step scalars) is pinned on the device, so its uploads and the step's
// one download are single asynchronous DMAs; a staged upload's source must then stay
// unchanged until the next synchronisation, which the simulator build enforces by
// write-protecting the block in between (a host write faults there, as it would race on a
// GPU). Memory: every device
// allocation is tagged and counted here (MemStats), at start-up only (seal_allocations);
// the kernels' own scratch — the row reductions of norm and bias gradients and the Σx²
// partials — is "operand scratch", stated by operand_scratch_bytes and planned at
// start-up like every other buffer.
//
// Row-major ↔ cuBLASLt: a row-major C[M,N] = op(A)·op(B) is the column-major
// Cᵀ[N,M] = op(B)ᵀ·op(A)ᵀ, so gemm() passes B in cuBLASLt's A slot (trans = trans_b, ld =
// ldb) and A in its B slot, with m = N, n = M; a row-major bias[N] added to every row is
// cuBLASLt's bias along m.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#if defined(PTD_CUDA_SIM)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "blaslt.h"
#include "cuda_backend.h"
#include "kernels.h"
#include "ptd/engine/backend.h"
#include "ptd/engine/contract_failure.h"
#include "runtime.h"

namespace ptd::cuda::PTD_CUDA_NS {
namespace {

using engine::DType;
using engine::Event;
using engine::MemCategory;
using engine::MemStats;
using engine::Stream;
using engine::TransferStats;

// A broken contract is a bug in the caller: say which op and why, then stop (as the CPU
// backend does).
[[noreturn]] [[gnu::format(printf, 3, 4)]] void fail(const char* backend, const char* op, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    engine::contract_failure(std::string(backend) + " backend: " + op + ": ", fmt, ap);
}

DTypeLt lt_type(DType t, const char* backend, const char* what) {
    switch (t) {
        case DType::f32: return DTypeLt::f32;
        case DType::bf16: return DTypeLt::bf16;
        case DType::f16: return DTypeLt::f16;
        default: fail(backend, "gemm", "%s: dtype %d is not f32, bf16 or f16", what, (int)t);
    }
}

constexpr const char* k_backend_name =
#if defined(PTD_CUDA_SIM)
    "cuda-sim";
#else
    "cuda";
#endif

// Floats of the row-reduction scratch for rows up to any count and `widest` columns: the
// kernels cap their row chunks, so this bound holds for every call.
int64_t row_reduce_floats_for(int64_t widest) { return row_reduce_workspace_floats(int64_t{1} << 40, widest); }

class CudaBackend final : public engine::Backend {
public:
    explicit CudaBackend(int device) : device_(device) {
        PTD_CUDA_CHECK(set_device(device));
        PTD_CUDA_CHECK(stream_create(&compute_));
        PTD_CUDA_CHECK(stream_create(&comm_));
        PTD_CUDA_CHECK(lt_prepare(compute_));
    }
    ~CudaBackend() override {
        device_synchronize();
        graph_destroy(graph_);
        for (auto& [p, b] : blocks_) free_device(p);
        for (EventHandle e : events_) event_destroy(e);
        release_host_all();
        lt_release();
        stream_destroy(comm_);
        stream_destroy(compute_);
    }

    const char* name() const override { return k_backend_name; }
#if defined(PTD_CUDA_SIM)
    bool shapes_only() const override { return sim_shapes_only(); }
#endif
#if defined(PTD_CUDA_SIM)
    void* native_stream(Stream) const override { return nullptr; }  // the sim's streams are not cudaStream_t
#else
    void* native_stream(Stream s) const override { return stream(s); }
#endif
    bool device_mem_info(int64_t* free_bytes, int64_t* total_bytes) const override {
        size_t f = 0, t = 0;
        if (!mem_get_info(&f, &t).ok()) return false;
        *free_bytes = (int64_t)f, *total_bytes = (int64_t)t;
        return true;
    }

    // ---- streams and events ----------------------------------------------------------
    Event create_event(const char* what) override {
        if (sealed_) fail(k_backend_name, "create_event", "event %s created after start-up", what ? what : "?");
        EventHandle e = nullptr;
        PTD_CUDA_CHECK(event_create(&e));
        events_.push_back(e);
        return Event{(int)events_.size() - 1};
    }
    void record_event(Event e, Stream s) override { PTD_CUDA_CHECK(event_record(event(e), stream(s))); }
    void wait_event(Stream s, Event e) override { PTD_CUDA_CHECK(stream_wait_event(stream(s), event(e))); }

    // ---- memory --------------------------------------------------------------------
    void* alloc(MemCategory cat, size_t bytes, const char* what) override {
        if (cat < 0 || cat >= engine::MEM_CATEGORY_COUNT)
            fail(k_backend_name, "alloc", "bad memory category %d for %s", (int)cat, what ? what : "?");
        if (sealed_)
            fail(k_backend_name, "alloc",
                 "allocation after start-up: %zu bytes for %s; all memory is planned at start-up", bytes,
                 what ? what : "?");
        void* p = nullptr;
        const Status st = malloc_device(&p, std::max<size_t>(bytes, 1), what ? what : "?");
        if (!st.ok())
            fail(k_backend_name, "alloc", "out of device memory allocating %zu bytes for %s: %s", bytes,
                 what ? what : "?", st.message.c_str());
        PTD_CUDA_CHECK(memset_async(p, 0, std::max<size_t>(bytes, 1), compute_));
        blocks_[p] = Block{cat, (int64_t)bytes};
        stats_.current[cat] += (int64_t)bytes;
        stats_.peak[cat] = std::max(stats_.peak[cat], stats_.current[cat]);
        stats_.total_current += (int64_t)bytes;
        stats_.total_peak = std::max(stats_.total_peak, stats_.total_current);
        return p;
    }
    void release(void* p) override {
        if (!p) return;
        auto it = blocks_.find(p);
        if (it == blocks_.end())
            fail(k_backend_name, "release", "%p was not allocated by this backend, or was released twice", p);
        stats_.current[it->second.cat] -= it->second.bytes;
        stats_.total_current -= it->second.bytes;
        blocks_.erase(it);
        PTD_CUDA_CHECK(device_synchronize());  // nothing queued may still use it
        host_copies_done();
        PTD_CUDA_CHECK(free_device(p));
    }
    MemStats mem_stats() const override { return stats_; }
    void seal_allocations(bool sealed) override { sealed_ = sealed; }
    void reset_peaks() override {
        for (int c = 0; c < engine::MEM_CATEGORY_COUNT; c++) stats_.peak[c] = stats_.current[c];
        stats_.total_peak = stats_.total_current;
    }
    // Uploads are ordered on the compute stream and do not wait. From pageable host memory
    // cudaMemcpyAsync returns once the source has been staged, so the caller may reuse it at
    // once; from a host block of this backend (pinned) the copy is still in flight, so the
    // block must stay unchanged until the next synchronisation (the token staging is
    // refilled only after the step's one download) — the simulator write-protects it.
    void upload(void* dst, const void* src_host, size_t bytes) override {
        ++transfers_.uploads;
        transfers_.upload_bytes += (int64_t)bytes;
        if (!bytes) return;
        PTD_CUDA_CHECK(memcpy_async(dst, src_host, bytes, CopyKind::host_to_device, compute_));
        if (HostBlock* b = host_block_of(src_host)) copy_in_flight(*b);
    }
    // The one place the host waits for the device: after the compute stream (which has
    // waited for every comm event) has produced what is read.
    void download(void* dst_host, const void* src, size_t bytes) override {
        ++transfers_.downloads;
        transfers_.download_bytes += (int64_t)bytes;
        if (bytes) PTD_CUDA_CHECK(memcpy_async(dst_host, src, bytes, CopyKind::device_to_host, compute_));
        PTD_CUDA_CHECK(stream_synchronize(compute_));
        host_copies_done();
    }
    TransferStats transfer_stats() const override { return transfers_; }

    // CUDA graphs (backend.h): the capture is of the compute stream, which every kernel,
    // GEMM and copy of a micro-batch is ordered on.
    bool graphs() const override { return true; }
    bool graph_recapture_checks() const override {
#if defined(PTD_CUDA_SIM)
        return true;
#else
        return false;
#endif
    }
    void graph_begin() override { PTD_CUDA_CHECK(stream_begin_capture(compute_)); }
    void graph_end() override {
        GraphHandle captured = nullptr;
        if (const Status st = stream_end_capture(compute_, &captured); !st.ok())
            fail(k_backend_name, "graph_end", "PTD_CUDA_GRAPHS=1: the micro-batch cannot be captured: %s",
                 st.message.c_str());
        if (!graph_) {
            graph_ = captured;
            return;
        }
#if defined(PTD_CUDA_SIM)
        const std::string difference = sim_graph_difference(graph_, captured);
#else
        const std::string difference;
#endif
        PTD_CUDA_CHECK(graph_destroy(captured));
        if (!difference.empty())
            fail(k_backend_name, "graph_end",
                 "PTD_CUDA_GRAPHS=1: this micro-batch's work differs from the captured graph that would be replayed "
                 "for it: %s",
                 difference.c_str());
    }
    void graph_replay() override { PTD_CUDA_CHECK(graph_launch(graph_, compute_)); }
    void graph_release() override {
        PTD_CUDA_CHECK(graph_destroy(graph_));
        graph_ = nullptr;
    }
    // Host staging (token ids, the step scalars): pinned memory on the device (cudaHostAlloc),
    // whole pages in the simulator (so that a block can be write-protected, see upload).
    void* alloc_host(size_t bytes, const char* what) override {
        if (sealed_)
            fail(k_backend_name, "alloc_host", "host allocation after start-up: %zu bytes for %s", bytes,
                 what ? what : "?");
#if defined(PTD_CUDA_SIM)
        const size_t page = (size_t)sysconf(_SC_PAGESIZE);
        const size_t body = std::max<size_t>(page, (bytes + page - 1) / page * page);
        void* p = std::aligned_alloc(page, body);
        if (!p) fail(k_backend_name, "alloc_host", "out of host memory allocating %zu bytes for %s", bytes, what ? what : "?");
#else
        const size_t body = std::max<size_t>(256, (bytes + 255) / 256 * 256);
        void* p = nullptr;
        const Status st = malloc_host(&p, body);
        if (!st.ok())
            fail(k_backend_name, "alloc_host", "allocating %zu bytes of pinned host memory for %s: %s", bytes,
                 what ? what : "?", st.message.c_str());
#endif
        std::memset(p, 0, body);
        host_blocks_.push_back(HostBlock{p, body, false});
        return p;
    }
    void release_host(void* p) override {
        if (!p) return;
        auto it = std::find_if(host_blocks_.begin(), host_blocks_.end(), [&](const HostBlock& b) { return b.p == p; });
        if (it == host_blocks_.end()) fail(k_backend_name, "release_host", "%p is not a host block of this backend", p);
        if (it->in_flight) {  // a copy from it may still run
            PTD_CUDA_CHECK(stream_synchronize(compute_));
            host_copies_done();
        }
        free_host_block(*it);
        host_blocks_.erase(it);
    }
    void zero(void* x, size_t bytes) override {
        if (bytes) PTD_CUDA_CHECK(memset_async(x, 0, bytes, compute_));
    }

    // ---- elementwise ------------------------------------------------------------------
    void fill(void* x, DType t, float value, int64_t n) override { cuda::PTD_CUDA_NS::fill(x, t, value, n, compute_); }
    void convert(void* dst, DType dst_t, const void* src, DType src_t, int64_t n) override {
        cuda::PTD_CUDA_NS::convert(dst, dst_t, src, src_t, n, compute_);
    }
    void add(void* y, const void* x, DType t, int64_t n) override { cuda::PTD_CUDA_NS::add(y, x, t, n, compute_); }
    void scale(float* x, float a, int64_t n) override { cuda::PTD_CUDA_NS::scale(x, a, n, compute_); }
    void sum_squares(double* acc, const float* x, int64_t n) override {
        cuda::PTD_CUDA_NS::sum_squares(acc, x, n, planned(sumsq_ws_, "sum_squares"), compute_);
    }
    void sum_into(double* acc, const float* x, int64_t n) override {
        cuda::PTD_CUDA_NS::sum_into(acc, x, n, compute_);
    }
    void finish_step_scalars(double* s, double max_norm, double loss_scale) override {
        if (!(loss_scale > 0)) fail(k_backend_name, "finish_step_scalars", "loss scale %g", loss_scale);
        cuda::PTD_CUDA_NS::finish_step_scalars(s, max_norm, loss_scale, compute_);
    }
    void split_tokens(int32_t* inputs, int32_t* targets, const int32_t* seq, int64_t B, int64_t T) override {
        cuda::PTD_CUDA_NS::split_tokens(inputs, targets, seq, B, T, compute_);
    }

    // ---- GEMM --------------------------------------------------------------------------
    void gemm(const Gemm& g) override {
        if (g.M < 0 || g.N < 0 || g.K < 0 || g.batch < 1)
            fail(k_backend_name, "gemm", "M %lld N %lld K %lld batch %lld", (long long)g.M, (long long)g.N,
                 (long long)g.K, (long long)g.batch);
        if (g.M == 0 || g.N == 0) return;
        require_epilogue_shape(g);
        if (g.epilogue != Gemm::Epilogue::none) {
            // GELU forward/backward fuse into cuBLASLt's GELU_AUX(_BIAS) / DGELU epilogues where
            // cuBLASLt takes them: one operand type, K > 0, and aux's leading dimension (N, m in
            // cuBLASLt's terms) a multiple of 8. The bias gradient stays the GEMM plus the
            // deterministic bias_grad kernel: BGRADB overwrites its output (the f32 main grads
            // accumulate over micro-batches) and its reduction order is not documented.
            const bool lt_gelu = g.epilogue != Gemm::Epilogue::bias_grad && g.a_type == g.b_type && g.K > 0 &&
                                 g.N % 8 == 0;
            if (!lt_gelu) return gemm_epilogue_unfused(g);
        }
        LtMatmul p;
        p.m = g.N, p.n = g.M, p.k = g.K;
        p.alpha = g.alpha, p.beta = g.beta;
        p.trans_a = g.trans_b, p.A = g.B, p.a_type = lt_type(g.b_type, k_backend_name, "B");
        p.lda = g.ldb, p.stride_a = g.stride_b;
        p.trans_b = g.trans_a, p.B = g.A, p.b_type = lt_type(g.a_type, k_backend_name, "A");
        p.ldb = g.lda, p.stride_b = g.stride_a;
        // c_in: cuBLASLt's C is the residual read, its D the output (C ≠ D, same layout).
        p.C = g.c_in ? g.c_in : g.C, p.c_type = lt_type(g.c_type, k_backend_name, "C"), p.ldc = g.ldc,
        p.stride_c = g.stride_c;
        p.D = g.C, p.d_type = p.c_type, p.ldd = g.ldc, p.stride_d = g.stride_c;
        p.batch = g.batch;
        if (g.bias) {
            p.epilogue = Epilogue::bias;
            p.bias = g.bias;
            p.bias_type = p.d_type;
        }
        if (g.epilogue == Gemm::Epilogue::gelu_aux || g.epilogue == Gemm::Epilogue::dgelu) {
            // aux is row-major [M, N] with ld ldc = N: cuBLASLt's column-major m×n, ld_aux = N.
            p.epilogue = g.epilogue == Gemm::Epilogue::dgelu ? Epilogue::dgelu
                         : g.bias                            ? Epilogue::gelu_aux_bias
                                                             : Epilogue::gelu_aux;
            p.aux = g.aux, p.ld_aux = g.ldc, p.stride_aux = 0;
        }
        if (g.a_type != g.b_type)
            // cuBLASLt multiplies operands of one type, and the engine gives it nothing else:
            // the output layer's dlogits are 16-bit like its other operands in mixed precision
            // (xent_fused / xent_backward write them so), so no f32 widening scratch is planned.
            fail(k_backend_name, "gemm", "A has dtype %d but B dtype %d: the CUDA backend multiplies operands of one type",
                 (int)g.a_type, (int)g.b_type);
        if (g.K == 0) {
            // cuBLASLt rejects k = 0; the result is beta·C (+ bias), which is what the CPU does.
            if (g.c_in && g.c_in != g.C && g.beta != 0.0f)
                PTD_CUDA_CHECK(memcpy_async(g.C, g.c_in, (size_t)(g.M * g.ldc * engine::dtype_bytes(g.c_type)),
                                            CopyKind::device_to_device, compute_));
            if (g.beta == 0.0f) fill_matrix_zero(g);
            else if (g.beta != 1.0f) fail(k_backend_name, "gemm", "K = 0 with beta %g", g.beta);
            if (g.bias) fail(k_backend_name, "gemm", "K = 0 with a bias");
            return;
        }
        // The fused-epilogue rule first, on both builds (the reference itself computes any
        // valid call), so cuda-sim takes the fallbacks a GPU would.
        Status st = lt_epilogue_runnable(p);
        if (st.ok()) st = lt_matmul(p, compute_);
        if (st.code == kLtNoAlgorithm && p.epilogue != Epilogue::none) return gemm_without_lt_epilogue(g, st);
        if (!st.ok()) fail(k_backend_name, "gemm", "%s", st.message.c_str());
    }
    // cuBLASLt has no fused-epilogue algorithm for this call (a 16-byte rule, or none of the
    // heuristic's candidates ran): the plain GEMM, then the epilogue as its own kernel — the
    // sequence the fused epilogue is defined to equal, bit for bit.
    void gemm_without_lt_epilogue(const Gemm& g, const Status& why) {
        if (g.epilogue != Gemm::Epilogue::none) return gemm_epilogue_unfused(g);
        if (g.batch != 1 || g.ldc != g.N)
            fail(k_backend_name, "gemm", "%s; the unfused bias needs batch 1 and ldc = N", why.message.c_str());
        Gemm plain = g;
        plain.bias = nullptr;
        gemm(plain);
        cuda::PTD_CUDA_NS::bias_add(g.C, g.bias, g.c_type, g.M, g.N, compute_);
    }
    void bias_add(void* y, const void* bias, DType t, int64_t rows, int64_t cols) override {
        cuda::PTD_CUDA_NS::bias_add(y, bias, t, rows, cols, compute_);
    }
    void bias_residual_add(void* out, const void* x, const void* bias, const void* residual, DType t, int64_t rows,
                           int64_t cols) override {
        cuda::PTD_CUDA_NS::bias_residual_add(out, x, bias, residual, t, rows, cols, compute_);
    }
    void bias_grad(float* dbias, const void* dy, DType t, int64_t rows, int64_t cols) override {
        cuda::PTD_CUDA_NS::bias_grad(dbias, dy, t, rows, cols, row_ws(rows, cols, "bias_grad"), compute_);
    }

    // ---- norms -------------------------------------------------------------------------
    void layernorm_forward(DType t, void* out, float* mean, float* rstd, const void* x, const void* w, const void* b,
                           int64_t rows, int64_t C, float eps) override {
        cuda::PTD_CUDA_NS::layernorm_forward(t, out, mean, rstd, x, w, b, rows, C, eps, compute_);
    }
    void layernorm_backward(DType t, void* dx, float* dw, float* db, const void* dout, const void* x,
                            const float* mean, const float* rstd, const void* w, int64_t rows, int64_t C,
                            bool accumulate_dx) override {
        cuda::PTD_CUDA_NS::layernorm_backward(t, dx, dw, db, dout, x, mean, rstd, w, rows, C, accumulate_dx,
                                              row_ws(rows, C, "layernorm_backward"), compute_);
    }
    void rmsnorm_forward(DType t, void* out, float* rstd, const void* x, const void* w, int64_t rows, int64_t C,
                         float eps) override {
        cuda::PTD_CUDA_NS::rmsnorm_forward(t, out, rstd, x, w, rows, C, eps, compute_);
    }
    // One kernel: the residual add in the norm's first pass (kernels/norms.cuh), the same bits
    // as add + norm.
    void add_norm_forward(DType t, void* res_out, void* out, float* mean, float* rstd, const void* x,
                          const void* residual, const void* w, const void* b, int64_t rows, int64_t C, float eps,
                          NormKind kind) override {
        if (kind == NormKind::layernorm)
            cuda::PTD_CUDA_NS::layernorm_residual_forward(t, res_out, out, mean, rstd, x, residual, w, b, rows, C, eps,
                                                          compute_);
        else
            cuda::PTD_CUDA_NS::rmsnorm_residual_forward(t, res_out, out, rstd, x, residual, w, rows, C, eps, compute_);
    }
    void rmsnorm_backward(DType t, void* dx, float* dw, const void* dout, const void* x, const float* rstd,
                          const void* w, int64_t rows, int64_t C, bool accumulate_dx) override {
        cuda::PTD_CUDA_NS::rmsnorm_backward(t, dx, dw, dout, x, rstd, w, rows, C, accumulate_dx,
                                            row_ws(rows, C, "rmsnorm_backward"), compute_);
    }

    // ---- activations -------------------------------------------------------------------
    void gelu_forward(DType t, void* out, const void* x, int64_t n) override {
        cuda::PTD_CUDA_NS::gelu_forward(t, out, x, n, compute_);
    }
    void gelu_backward(DType t, void* dx, const void* x, const void* dout, int64_t n) override {
        cuda::PTD_CUDA_NS::gelu_backward(t, dx, x, dout, n, compute_);
    }
    void swiglu_forward(DType t, void* out, const void* gate, const void* up, int64_t n) override {
        cuda::PTD_CUDA_NS::swiglu_forward(t, out, gate, up, n, compute_);
    }
    void swiglu_backward(DType t, void* dgate, void* dup, const void* dout, const void* gate, const void* up,
                         int64_t n) override {
        cuda::PTD_CUDA_NS::swiglu_backward(t, dgate, dup, dout, gate, up, n, compute_);
    }

    // ---- attention ---------------------------------------------------------------------
    void rope_table(float* table, int64_t positions, int64_t D, float theta) override {
        cuda::PTD_CUDA_NS::rope_table(table, positions, D, theta, compute_);
    }
    void rope_forward(DType t, void* x, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                      const float* table, int64_t positions) override {
        cuda::PTD_CUDA_NS::rope_forward(t, x, ld, B, T, nh, D, pos0, table, positions, compute_);
    }
    void rope_backward(DType t, void* dx, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                       const float* table, int64_t positions) override {
        cuda::PTD_CUDA_NS::rope_backward(t, dx, ld, B, T, nh, D, pos0, table, positions, compute_);
    }

    // Attention as strided-batched GEMMs around the fused causal softmax (kernels.h,
    // "attention softmax", has the layouts): q, k, v copied head-major into the workspace
    // first, so that each product is ONE strided batch over the B·G kv-head groups (the rep
    // query heads of a group stacked in M), not one call per sequence. The scores go into
    // the probabilities buffer (type t, scaled by 1/√D in the GEMM's alpha) and the softmax
    // rewrites them in place: in 16-bit the scores are rounded once before the softmax, as
    // llm.c does; the CPU backend keeps them in f32 — the tests hold the difference to the
    // format's tolerance.
    // The workspace's regions, each from a 256-byte boundary (the kernels' vector paths need
    // 16), in t: dP then dS [B·H, T, T] (backward); q [B,H,T,D] ‖ k [B,G,T,D] ‖ v [B,G,T,D];
    // dq ‖ dk ‖ dv laid out the same (backward); ctx (forward) or dctx (backward) [B,H,T,D].
    struct AttnScratch {
        char *W, *q, *k, *v, *dq, *dk, *dv, *ctx;
    };
    static AttnScratch attn_scratch(void* workspace, DType t, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) {
        const int64_t e = engine::dtype_bytes(t), n = B * T * (H + 2 * G) * D;
        const int64_t k_at = B * H * T * D * e, v_at = B * (H + G) * T * D * e;
        char* p = static_cast<char*>(workspace);
        AttnScratch s{};
        s.W = p, p += round256(B * H * T * T * e);
        s.q = p, s.k = p + k_at, s.v = p + v_at, p += round256(n * e);
        s.dq = p, s.dk = p + k_at, s.dv = p + v_at, p += round256(n * e);
        s.ctx = p;
        return s;
    }
    // One strided batch over the B·G groups: C[i] = alpha · op(A[i]) · op(B[i]) + beta · C[i].
    void attn_gemm(DType t, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
                   int64_t lda, int64_t stride_a, const void* Bm, int64_t ldb, int64_t stride_b, void* C, int64_t ldc,
                   int64_t stride_c, int64_t batch) {
        Gemm g;
        g.trans_a = trans_a, g.trans_b = trans_b, g.M = M, g.N = N, g.K = K, g.alpha = alpha;
        g.A = A, g.a_type = t, g.lda = lda, g.stride_a = stride_a;
        g.B = Bm, g.b_type = t, g.ldb = ldb, g.stride_b = stride_b;
        g.C = C, g.c_type = t, g.ldc = ldc, g.stride_c = stride_c;
        g.batch = batch;
        gemm(g);
    }
    void attention_forward(DType t, void* ctx, void* probs, const void* qkv, int64_t B, int64_t T, int64_t H,
                           int64_t G, int64_t D, void* workspace) override {
        check_attention("attention_forward", B, T, H, G, D);
        if (B == 0 || T == 0) return;
        const int64_t rep = H / G, TT = T * T, groups = B * G;
        const float scale = 1.0f / std::sqrt((float)D);
        const AttnScratch w = attn_scratch(workspace, t, B, T, H, G, D);
        cuda::PTD_CUDA_NS::attention_heads_split(t, w.q, qkv, B, T, H, G, D, compute_);
        // S [rep·T, T] per group = scale · Q_g · K_gᵀ, into probs [B·H, T, T]
        attn_gemm(t, false, true, rep * T, T, D, scale, w.q, D, rep * T * D, w.k, D, T * D, probs, T, rep * TT, groups);
        attention_softmax_forward(t, probs, t, probs, B * H, T, 1.0f, compute_);
        // ctx [rep·T, D] per group = P_g · V_g, head-major, then into ctx [B, T, H, D]
        attn_gemm(t, false, false, rep * T, D, T, 1.0f, probs, T, rep * TT, w.v, D, T * D, w.ctx, D, rep * T * D, groups);
        cuda::PTD_CUDA_NS::attention_heads_merge(t, ctx, w.ctx, B, T, H, 0, D, compute_);
    }
    void attention_backward(DType t, void* dqkv, const void* dctx, const void* probs, const void* qkv, int64_t B,
                            int64_t T, int64_t H, int64_t G, int64_t D, void* workspace) override {
        check_attention("attention_backward", B, T, H, G, D);
        if (B == 0 || T == 0) return;
        const int64_t rep = H / G, TT = T * T, groups = B * G;
        const float scale = 1.0f / std::sqrt((float)D);
        const AttnScratch w = attn_scratch(workspace, t, B, T, H, G, D);
        cuda::PTD_CUDA_NS::attention_heads_split(t, w.q, qkv, B, T, H, G, D, compute_);
        cuda::PTD_CUDA_NS::attention_heads_split(t, w.ctx, dctx, B, T, H, 0, D, compute_);
        // dP [rep·T, T] per group = dctx_g · V_gᵀ
        attn_gemm(t, false, true, rep * T, T, D, 1.0f, w.ctx, D, rep * T * D, w.v, D, T * D, w.W, T, rep * TT, groups);
        attention_softmax_backward(t, probs, t, w.W, w.W, B * H, T, scale, compute_);  // W = dS (scale folded in)
        // dq_g = dS_g · K_g;  dk_g = dS_gᵀ · Q_g and dv_g = P_gᵀ · dctx_g, each summed over the
        // group's rep query heads by the GEMM itself (K = rep·T)
        attn_gemm(t, false, false, rep * T, D, T, 1.0f, w.W, T, rep * TT, w.k, D, T * D, w.dq, D, rep * T * D, groups);
        attn_gemm(t, true, false, T, D, rep * T, 1.0f, w.W, T, rep * TT, w.q, D, rep * T * D, w.dk, D, T * D, groups);
        attn_gemm(t, true, false, T, D, rep * T, 1.0f, probs, T, rep * TT, w.ctx, D, rep * T * D, w.dv, D, T * D,
                  groups);
        cuda::PTD_CUDA_NS::attention_heads_merge(t, dqkv, w.dq, B, T, H, G, D, compute_);
    }
    // FlashAttention-2 (kernels/flash.cuh): no [B,H,T,T] buffer; the backward's scratch is
    // the rows' Σ dctx·ctx.
    void flash_attention_forward(DType t, void* ctx, float* lse, const void* qkv, int64_t B, int64_t T, int64_t H,
                                 int64_t G, int64_t D) override {
        check_attention("flash_attention_forward", B, T, H, G, D);
        cuda::PTD_CUDA_NS::flash_attention_forward(t, ctx, lse, qkv, B, T, H, G, D, compute_);
    }
    void flash_attention_backward(DType t, void* dqkv, const void* dctx, const void* ctx, const float* lse,
                                  const void* qkv, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D,
                                  void* workspace) override {
        check_attention("flash_attention_backward", B, T, H, G, D);
        cuda::PTD_CUDA_NS::flash_attention_backward(t, dqkv, dctx, ctx, lse, qkv, B, T, H, G, D,
                                                    static_cast<float*>(workspace), compute_);
    }
    int64_t flash_attention_backward_workspace(DType, int64_t B, int64_t T, int64_t H, int64_t, int64_t) const override {
        return flash_attention_backward_workspace_bytes(B, T, H);
    }
    // attn_scratch's regions, in t: dP / dS for every (b, h) [B·H, T, T], q‖k‖v and dq‖dk‖dv
    // head-major, the (d)ctx head-major [B·H, T, D]. The forward uses the same buffer.
    int64_t attention_backward_workspace(DType t, int64_t B, int64_t T, int64_t H, int64_t G,
                                         int64_t D) const override {
        const int64_t e = engine::dtype_bytes(t), n = B * T * (H + 2 * G) * D;
        return round256(B * H * T * T * e) + 2 * round256(n * e) + round256(B * H * T * D * e);
    }
    // The kernels read 16-bit operands directly and every GEMM has operands of one type (no
    // widening), but the row reductions of the norm and bias gradients and the Σx² partials
    // need scratch: planned here, the same in every precision.
    // The Σx² partials, the row reductions' partials and (first stage) the embedding
    // backward's int32 grouping of rows by token, each from a 256-byte boundary.
    int64_t operand_scratch_bytes(DType, int64_t, int64_t widest_row) const override {
        return round256((int64_t)sizeof(double) * sum_squares_workspace_doubles()) +
               round256((int64_t)sizeof(float) * row_reduce_floats_for(std::max<int64_t>(widest_row, 1))) +
               embedding_scratch_bytes();
    }
    void plan_embedding_backward(int64_t rows, int64_t Vl) override {
        if (scratch_) fail(k_backend_name, "plan_embedding_backward", "called after plan_operand_scratch");
        emb_rows_ = std::max(emb_rows_, rows), emb_vl_ = std::max(emb_vl_, Vl);
    }
    void plan_operand_scratch(DType t, int64_t largest_operand, int64_t widest_row) override {
        if (scratch_) return;
        widest_ = std::max<int64_t>(widest_row, 1);
        scratch_ = static_cast<char*>(
            alloc(engine::MEM_WORKSPACE, (size_t)operand_scratch_bytes(t, largest_operand, widest_row), "operand scratch"));
        sumsq_ws_ = reinterpret_cast<double*>(scratch_);
        const int64_t sumsq = round256((int64_t)sizeof(double) * sum_squares_workspace_doubles());
        row_ws_ = reinterpret_cast<float*>(scratch_ + sumsq);
        const int64_t rows = round256((int64_t)sizeof(float) * row_reduce_floats_for(widest_));
        if (embedding_scratch_bytes() > 0) emb_ws_ = reinterpret_cast<int32_t*>(scratch_ + sumsq + rows);
    }

    // ---- embedding ---------------------------------------------------------------------
    void embedding_forward(DType t, void* out, const int32_t* tokens, const void* wte, int64_t v0, int64_t Vl,
                           int64_t rows, int64_t C) override {
        cuda::PTD_CUDA_NS::embedding_forward(t, out, tokens, wte, v0, Vl, rows, C, compute_);
    }
    void embedding_backward(DType t, float* dwte, const void* dout, const int32_t* tokens, int64_t v0, int64_t Vl,
                            int64_t rows, int64_t C) override {
        if (rows > 0 && Vl > 0 && (!emb_ws_ || rows > emb_rows_ || Vl > emb_vl_))
            fail(k_backend_name, "embedding_backward",
                 "%lld rows of a %lld-token shard, but its scratch was planned for %lld rows of %lld tokens "
                 "(plan_embedding_backward before plan_operand_scratch)",
                 (long long)rows, (long long)Vl, (long long)emb_rows_, (long long)emb_vl_);
        cuda::PTD_CUDA_NS::embedding_backward(t, dwte, dout, tokens, v0, Vl, rows, C, emb_ws_, compute_);
    }
    void position_forward(DType t, void* out, const void* wpe, int64_t row0, int64_t rows, int64_t T,
                          int64_t C) override {
        cuda::PTD_CUDA_NS::position_forward(t, out, wpe, row0, rows, T, C, compute_);
    }
    void position_backward(DType t, float* dwpe, const void* dout, int64_t row0, int64_t rows, int64_t T,
                           int64_t C) override {
        cuda::PTD_CUDA_NS::position_backward(t, dwpe, dout, row0, rows, T, C, compute_);
    }

    // ---- cross entropy -------------------------------------------------------------------
    void xent_row_max(float* rowmax, const float* logits, int64_t rows, int64_t Vl, int64_t v0,
                      int64_t V_valid) override {
        cuda::PTD_CUDA_NS::xent_row_max(rowmax, logits, rows, Vl, v0, V_valid, compute_);
    }
    void xent_sums(float* sumexp, float* target_logit, const float* logits, const float* rowmax,
                   const int32_t* targets, int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) override {
        cuda::PTD_CUDA_NS::xent_sums(sumexp, target_logit, logits, rowmax, targets, rows, Vl, v0, V_valid, compute_);
    }
    void xent_finish(float* loss, float* logits, const float* rowmax, const float* sumexp, const float* target_logit,
                     int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) override {
        cuda::PTD_CUDA_NS::xent_finish(loss, logits, rowmax, sumexp, target_logit, rows, Vl, v0, V_valid, compute_);
    }
    void xent_backward(void* dlogits, DType dlogits_t, const float* probs, const int32_t* targets, float scale,
                       int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) override {
        cuda::PTD_CUDA_NS::xent_backward(dlogits, dlogits_t, probs, targets, scale, rows, Vl, v0, V_valid, compute_);
    }

    // tp = 1: one launch (kernels.h) — online max and Σexp, then loss and gradient.
    void xent_fused(float* loss, void* dlogits, DType dlogits_t, const float* logits, const int32_t* targets,
                    float scale, int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) override {
        cuda::PTD_CUDA_NS::xent_fused(loss, dlogits, dlogits_t, logits, targets, scale, rows, Vl, v0, V_valid,
                                      compute_);
    }

    // ---- optimizer -----------------------------------------------------------------------
    void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1, float beta2, float eps,
               float weight_decay, const double* scalars, int64_t step, void* model_p, DType model_t) override {
        if (step < 1) fail(k_backend_name, "adamw", "step = %lld (steps count from 1)", (long long)step);
        cuda::PTD_CUDA_NS::adamw_range(p, g, m, v, model_p, n, lr, beta1, beta2, eps, weight_decay, step, scalars,
                                        model_t, compute_);
    }
    // The multi-tensor AdamW: the planned ranges as a device list of AdamWTensor (uploaded
    // once here, at start-up), one launch per step over all of them.
    int64_t adamw_plan_bytes(int count) const override { return (int64_t)count * (int64_t)sizeof(AdamWTensor); }
    void plan_adamw(const AdamWRange* ranges, int count) override {
        if (count < 0 || (count > 0 && !ranges)) fail(k_backend_name, "plan_adamw", "%d ranges", count);
        release(adamw_list_);
        adamw_list_ = nullptr;
        adamw_host_.clear();
        adamw_total_ = 0;
        if (count == 0) return;
        int with_model = 0;
        for (int k = 0; k < count; k++) {
            const AdamWRange& r = ranges[k];
            if (r.n < 0) fail(k_backend_name, "plan_adamw", "range %d has n = %lld", k, (long long)r.n);
            adamw_host_.push_back(AdamWTensor{r.p, r.g, r.m, r.v, r.model_p, r.n, 0, r.weight_decay});
            with_model += r.model_p != nullptr;
        }
        if (with_model != 0 && with_model != count)
            fail(k_backend_name, "plan_adamw", "%d of %d ranges have model weights: all or none must", with_model, count);
        adamw_has_model_ = with_model != 0;
        adamw_total_ = tensor_list_starts(adamw_host_.data(), count);
        const size_t bytes = (size_t)adamw_plan_bytes(count);
        adamw_list_ = static_cast<AdamWTensor*>(alloc(engine::MEM_WORKSPACE, bytes, "adamw tensor list"));
        upload(adamw_list_, adamw_host_.data(), bytes);
    }
    void adamw_step(float lr, float beta1, float beta2, float eps, const double* scalars, int64_t step,
                    DType model_t) override {
        if (step < 1) fail(k_backend_name, "adamw_step", "step = %lld (steps count from 1)", (long long)step);
        cuda::PTD_CUDA_NS::adamw(adamw_list_, (int)adamw_host_.size(), adamw_total_, lr, beta1, beta2, eps, step,
                                 scalars, adamw_has_model_ ? model_t : DType::f32, compute_);
    }

private:
    struct Block {
        MemCategory cat;
        int64_t bytes;
    };

    StreamHandle stream(Stream s) const { return s == Stream::compute ? compute_ : comm_; }
    EventHandle event(Event e) const {
        if (e.id < 0 || e.id >= (int)events_.size()) fail(k_backend_name, "event", "unknown event %d", e.id);
        return events_[(size_t)e.id];
    }
    template <class T>
    T* planned(T* p, const char* op) const {
        if (!p) fail(k_backend_name, op, "its scratch was not planned (plan_operand_scratch at start-up)");
        return p;
    }
    float* row_ws(int64_t rows, int64_t cols, const char* op) const {
        planned(row_ws_, op);
        if (row_reduce_workspace_floats(rows, cols) > row_reduce_floats_for(widest_))
            fail(k_backend_name, op, "%lld columns, but the scratch was planned for %lld", (long long)cols,
                 (long long)widest_);
        return row_ws_;
    }
    void check_attention(const char* op, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) const {
        if (B < 0 || T < 0 || H <= 0 || G <= 0 || D <= 0 || H % G != 0)
            fail(k_backend_name, op, "B %lld T %lld H %lld G %lld D %lld", (long long)B, (long long)T, (long long)H,
                 (long long)G, (long long)D);
    }
    static int64_t round256(int64_t bytes) { return (bytes + 255) / 256 * 256; }
    int64_t embedding_scratch_bytes() const {
        if (emb_rows_ <= 0 || emb_vl_ <= 0) return 0;
        return round256((int64_t)sizeof(int32_t) * embedding_backward_workspace_ints(emb_rows_, emb_vl_));
    }
    void fill_matrix_zero(const Gemm& g) {
        const int e = engine::dtype_bytes(g.c_type);
        for (int64_t i = 0; i < g.batch; i++)
            for (int64_t r = 0; r < g.M; r++)
                PTD_CUDA_CHECK(memset_async(static_cast<char*>(g.C) + (i * g.stride_c + r * g.ldc) * e, 0,
                                            (size_t)(g.N * e), compute_));
    }
    // A host block of this backend and whether an upload from it may still be in flight.
    struct HostBlock {
        void* p;
        size_t bytes;
        bool in_flight;
    };
    HostBlock* host_block_of(const void* x) {
        for (HostBlock& b : host_blocks_)
            if (x >= b.p && static_cast<const char*>(x) < static_cast<const char*>(b.p) + b.bytes) return &b;
        return nullptr;
    }
    // An upload from b was queued: until the next synchronisation the host must not write b.
    void copy_in_flight(HostBlock& b) {
        if (b.in_flight) return;
        b.in_flight = true;
#if defined(PTD_CUDA_SIM)
        if (mprotect(b.p, b.bytes, PROT_READ) != 0)
            fail(k_backend_name, "upload", "mprotect of the host block at %p: %s", b.p, std::strerror(errno));
#endif
    }
    // The compute stream has been synchronised: every queued upload is done.
    void host_copies_done() {
        for (HostBlock& b : host_blocks_) {
            if (!b.in_flight) continue;
            b.in_flight = false;
#if defined(PTD_CUDA_SIM)
            if (mprotect(b.p, b.bytes, PROT_READ | PROT_WRITE) != 0)
                fail(k_backend_name, "download", "mprotect of the host block at %p: %s", b.p, std::strerror(errno));
#endif
        }
    }
    void free_host_block(HostBlock& b) {
#if defined(PTD_CUDA_SIM)
        if (b.in_flight) mprotect(b.p, b.bytes, PROT_READ | PROT_WRITE);
        std::free(b.p);
#else
        free_host(b.p);
#endif
    }
    void release_host_all() {
        for (HostBlock& b : host_blocks_) free_host_block(b);
        host_blocks_.clear();
    }

    int device_;
    StreamHandle compute_ = nullptr, comm_ = nullptr;
    GraphHandle graph_ = nullptr;  // PTD_CUDA_GRAPHS=1: the micro-batch captured this step
    std::vector<EventHandle> events_;
    std::map<void*, Block> blocks_;
    std::vector<HostBlock> host_blocks_;
    MemStats stats_;
    TransferStats transfers_;
    bool sealed_ = false;
    char* scratch_ = nullptr;
    float* row_ws_ = nullptr;
    double* sumsq_ws_ = nullptr;
    int64_t widest_ = 1;
    int64_t emb_rows_ = 0, emb_vl_ = 0;  // plan_embedding_backward's largest call
    int32_t* emb_ws_ = nullptr;          // its workspace in the operand scratch
    AdamWTensor* adamw_list_ = nullptr;     // plan_adamw's device list (MEM_WORKSPACE)
    std::vector<AdamWTensor> adamw_host_;   // its host copy (the upload's source, and the count)
    int64_t adamw_total_ = 0;               // Σ n of the list
    bool adamw_has_model_ = false;          // the ranges carry 16-bit model weights
};

}  // namespace

std::unique_ptr<engine::Backend> make_cuda_backend(int device, std::string* error) {
    int count = 0;
    Status st = device_count(&count);
    if (st.ok() && (device < 0 || device >= count))
        st = Status{kErrInvalidValue, "device " + std::to_string(device) + " of " + std::to_string(count) + " visible"};
    if (st.ok()) st = set_device(device);
    if (!st.ok()) {
        if (error) *error = st.message;
        return nullptr;
    }
    return std::make_unique<CudaBackend>(device);
}

}  // namespace ptd::cuda::PTD_CUDA_NS
