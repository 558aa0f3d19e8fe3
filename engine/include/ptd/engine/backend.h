// backend.h — the compute backend interface of ptd-engine: device memory (tagged) and
// every kernel the model needs. The model code only calls these; it never touches
// tensor elements itself, so a CUDA backend can replace the CPU one (engine/cpu/) without
// changes to model, schedule or optimizer code.
//
// Conventions for every op:
//   - Every operand has a stated dtype. Ops that take a `DType t` hold the operands the
//     contract marks "(t)" in t ∈ {f32, bf16, f16}: activations and 16-bit parameters.
//     Operands marked "(f32)" are always f32: norm statistics, the loss and softmax of
//     the cross entropy, fp32 main gradients (accumulated into), master weights and Adam
//     state. Token ids are i32. 16-bit operands are storage only: the arithmetic is f32
//     and results are rounded to nearest even once, when stored.
//   - With t = f32 every op computes exactly what the fp32-only engine did (same bits).
//   - Row-major, contiguous unless a leading dimension says otherwise; pointers are
//     device pointers of this backend.
//   - "rows" = number of token rows (micro_batch · seq, or the SP slice of it).
//   - B batch, T sequence, H query heads (local), G key/value heads (local), D head dim.
//   - Outputs are overwritten unless the contract says "+=" (accumulate).
//   - Results are deterministic: the same inputs and thread count give the same bits
//     (static work partition, no atomics in reductions).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "ptd/engine/dtype.h"
#include "ptd/engine/mem.h"

namespace ptd::engine {

// The step's scalars live in one device buffer of STEP_SCALAR_COUNT doubles, so that no
// reduction returns a value to the host inside a step: the loss sum and Σg² accumulate
// there, travel together in one f64 all-reduce over the world, the norm, clip scale and
// found-inf flag are derived there (finish_step_scalars), AdamW reads them there, and the
// host downloads the buffer once per step, after the update, for the metrics line and
// the fp16 loss scaler.
enum StepScalar : int {
    SCALAR_LOSS_SUM = 0,   // Σ per-token loss over the rows this rank owns (last stage, tp rank 0)
    SCALAR_GRAD_SQUARES,   // Σ g² over the gradient elements this rank counts in the norm
    SCALAR_LOSS_SCALE,     // the loss scale this step's gradients carry (fp16; 1 otherwise)
    SCALAR_GRAD_NORM,      // √(world Σ g²) / loss scale: the norm of the unscaled gradients
    SCALAR_CLIP_SCALE,     // min(1, clip / (‖g‖ + 1e-6)), or 1 without clipping
    SCALAR_GRAD_SCALE,     // clip scale / loss scale: what AdamW multiplies g by (unscale and clip in one)
    SCALAR_FOUND_INF,      // 1 when the loss or the norm is not finite — an fp16 overflow, or a
                           // diverged fp32/bf16 run — and the update is skipped, else 0
    STEP_SCALAR_COUNT
};

// How many host↔device copies the backend made (counted by upload / download); the
// trainer reports the per-step difference so that a test can see that a step reads the
// device exactly once.
struct TransferStats {
    int64_t uploads = 0, downloads = 0;
    int64_t upload_bytes = 0, download_bytes = 0;
};

// Streams and events (CUDA's model). Compute kernels run in order on the compute stream;
// the communicator runs on its own stream. An event records the work queued on a stream
// so far; a stream that waits for it runs its later work only after that. The CPU backend
// runs everything synchronously, so the calls order nothing there — but they are made
// where a GPU needs them, and the stream-checking backend (make_stream_checking_backend)
// verifies them.
enum class Stream : uint8_t { compute, comm };
struct Event {
    int id = -1;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual const char* name() const = 0;  // "cpu"
    // True only for the cuda-sim backend in shapes-only mode (engine/cuda/runtime.h): every
    // op is checked and nothing is computed, so start-up skips computing initial values.
    virtual bool shapes_only() const { return false; }
    // The host threads the kernels run on (the CPU backend's OpenBLAS and OpenMP threads),
    // changed from what the backend was made with: only before anything is planned or
    // allocated for the model (the trainer, once the ranks know how they share their machine).
    // False where the backend has no such threads (CUDA, cuda-sim): nothing changes.
    virtual bool set_compute_threads(int threads) {
        (void)threads;
        return false;
    }

    // ---- streams and events ----------------------------------------------------------
    virtual Event create_event(const char* what) = 0;  // at start-up
    virtual void record_event(Event e, Stream s) = 0;
    virtual void wait_event(Stream s, Event e) = 0;
    // Called by the communicator (Communicator::set_access_observer) before an operation on
    // the comm stream reads `bytes` at `x` (write = false) and after it wrote them (write =
    // true). The stream-checking backend stops the process when compute work that wrote
    // there is not yet visible to the comm stream (and later, when a compute op uses what
    // the comm stream wrote before waiting for it); other backends ignore it.
    virtual void note_comm_access(const void* x, size_t bytes, bool write, const char* op) {}
    // The runtime's handle of stream s (a cudaStream_t on the CUDA backend, for the NCCL
    // communicator); null where streams are not real (CPU, the simulator).
    virtual void* native_stream(Stream s) const { return nullptr; }
    // Free and total device memory now (cudaMemGetInfo), for the memory the tagged
    // allocator cannot see (CUDA context, NCCL buffers); false where there is no device.
    virtual bool device_mem_info(int64_t* free_bytes, int64_t* total_bytes) const { return false; }

    // ---- memory --------------------------------------------------------------------
    // Zero-filled allocation tagged with `cat`; `what` names it for error messages.
    // Out of memory is fatal (message with category, size and what).
    virtual void* alloc(MemCategory cat, size_t bytes, const char* what) = 0;
    virtual void release(void* p) = 0;  // nullptr is a no-op
    virtual MemStats mem_stats() const = 0;
    // Planned memory: once sealed, any alloc or alloc_host is a programmer error that stops
    // the process naming the buffer (the engine seals after start-up, so no op and no step
    // allocates). Unsealed again for teardown.
    virtual void seal_allocations(bool sealed) = 0;
    virtual void reset_peaks() = 0;     // peak := current, per category and total
    virtual void upload(void* dst, const void* src_host, size_t bytes) = 0;
    virtual void download(void* dst_host, const void* src, size_t bytes) = 0;
    // CUDA graphs (PTD_CUDA_GRAPHS=1, docs/engine.md "CUDA graphs"): between graph_begin and
    // graph_end the compute stream's work is recorded, not run, and graph_end keeps it as
    // the backend's graph; graph_replay runs that graph, graph_release drops it. When a graph
    // is kept already, graph_end instead compares the new capture with it and stops the
    // process naming the first launch argument that differs (graph_recapture_checks: the
    // simulator, where recording is cheap, so the driver captures every micro-batch again).
    // Only the CUDA backends have graphs; a capture refuses host syncs and allocations.
    virtual bool graphs() const { return false; }
    virtual bool graph_recapture_checks() const { return false; }
    virtual void graph_begin() {}
    virtual void graph_end() {}
    virtual void graph_replay() {}
    virtual void graph_release() {}
    virtual TransferStats transfer_stats() const = 0;
    // Host staging memory the backend owns (pinned on a GPU, so uploads from it can be
    // asynchronous): token ids are read into it and uploaded from it. Zero-filled.
    virtual void* alloc_host(size_t bytes, const char* what) = 0;
    virtual void release_host(void* p) = 0;  // nullptr is a no-op
    virtual void zero(void* x, size_t bytes) = 0;  // device memset

    // ---- elementwise ------------------------------------------------------------------
    virtual void fill(void* x, DType t, float value, int64_t n) = 0;                // x (t) = value
    // dst (dst_t) = src (src_t), converted (rounded to nearest even when narrowing).
    virtual void convert(void* dst, DType dst_t, const void* src, DType src_t, int64_t n) = 0;
    void copy(void* dst, const void* src, DType t, int64_t n) { convert(dst, t, src, t, n); }  // dst (t) = src (t)
    virtual void add(void* y, const void* x, DType t, int64_t n) = 0;            // y (t) += x (t)
    virtual void scale(float* x, float a, int64_t n) = 0;                          // x (f32) *= a
    // acc[0] (f64) += Σ x² of x (f32), summed in double; acc is a device scalar (nothing
    // returns to the host).
    virtual void sum_squares(double* acc, const float* x, int64_t n) = 0;
    // acc[0] (f64) += Σ x of x (f32), the sum taken in double from 0 in index order, then added.
    virtual void sum_into(double* acc, const float* x, int64_t n) = 0;
    // From s[SCALAR_LOSS_SUM], s[SCALAR_GRAD_SQUARES] (already reduced over the world) and
    // the loss scale the step's gradients carry (1 without fp16 loss scaling; a kernel
    // argument, not a transfer): s[SCALAR_LOSS_SCALE], s[SCALAR_GRAD_NORM] (unscaled),
    // s[SCALAR_CLIP_SCALE] (max_norm ≤ 0: no clipping), s[SCALAR_GRAD_SCALE] and
    // s[SCALAR_FOUND_INF] — the one overflow check of every precision.
    virtual void finish_step_scalars(double* s, double max_norm, double loss_scale) = 0;
    // Token ids of one micro-batch: seq [B, T+1] (i32; B sequences of T+1 ids) → inputs
    // [B·T] (ids 0..T−1 of each) and targets [B·T] (ids 1..T), i32; either may be null.
    virtual void split_tokens(int32_t* inputs, int32_t* targets, const int32_t* seq, int64_t B, int64_t T) = 0;

    // ---- GEMM --------------------------------------------------------------------------
    // One op for plain, strided-batched and bias-fused GEMMs (cuBLASLt's matmul, in
    // row-major terms). For each batch index i < batch:
    //   C_i[M,N] = alpha · op(A_i) · op(B_i) + beta · C_i (+ bias[N] on every row)
    // with X_i = X + i · stride_x (elements). op(A) = A ([M,K], lda ≥ K) or Aᵀ (A is [K,M],
    // lda ≥ M) when trans_a; op(B) = B ([K,N], ldb ≥ N) or Bᵀ (B is [N,K], ldb ≥ K) when
    // trans_b; C is [M,N] with ldc ≥ N. A and B are f32, bf16 or f16 each (the CPU backend
    // widens a 16-bit operand; the CUDA backend, like cuBLASLt, takes A and B of one type,
    // which is all the engine gives it); C is f32 (weight gradients accumulate into f32 main grads with
    // beta = 1, logits for the f32 loss) or 16-bit (rounded once from the f32 result);
    // bias has C's 16-bit type, or f32 when C is f32. Accumulation is f32.
    struct Gemm {
        bool trans_a = false, trans_b = false;
        int64_t M = 0, N = 0, K = 0;
        float alpha = 1.0f, beta = 0.0f;
        const void* A = nullptr;
        DType a_type = DType::f32;
        int64_t lda = 0, stride_a = 0;
        const void* B = nullptr;
        DType b_type = DType::f32;
        int64_t ldb = 0, stride_b = 0;
        void* C = nullptr;
        DType c_type = DType::f32;
        int64_t ldc = 0, stride_c = 0;
        int64_t batch = 1;
        const void* bias = nullptr;  // [N] or null
        // beta's operand when the result goes elsewhere (cuBLASLt's C ≠ D): with c_in set,
        // C = alpha · op(A) · op(B) + beta · c_in (+ bias), rounded once — the residual
        // stream added by the GEMM that makes the layer's output. c_in has C's type and
        // ldc; batch 1, no epilogue; it may not overlap C unless it is C.
        const void* c_in = nullptr;
        // What runs on the result before it is stored (cuBLASLt's epilogues; the CPU runs the
        // separate ops below in the same order, so the bits equal the unfused sequence):
        //   none      C as above.
        //   gelu_aux  aux (c_type, [M,N], ld ldc) = the pre-activation as C above (bias
        //             included, rounded once), then C = gelu_forward(aux): the MLP's fc1.
        //   dgelu     C = gelu_backward(x = aux, dout = the product as C above, rounded
        //             once): the GELU backward fused into the GEMM that makes its dout.
        //   bias_grad the product as C above, and bias_grad (f32) += Σ_k op(A)[i, k] for
        //             i < M — bias_grad(bias_grad, A, a_type, K, M) — the bias gradient of
        //             a weight-gradient GEMM dW += dyᵀ·x (needs trans_a, lda = max(M, 1)).
        // Epilogues need batch 1, beta 0 (gelu_aux, dgelu) and no bias (dgelu, bias_grad).
        enum class Epilogue : uint8_t { none, gelu_aux, dgelu, bias_grad };
        Epilogue epilogue = Epilogue::none;
        void* aux = nullptr;         // gelu_aux (written), dgelu (read)
        float* bias_grad = nullptr;  // bias_grad (+=)
    };
    virtual void gemm(const Gemm& g) = 0;
    // A GEMM with an epilogue as the separate ops it fuses (the plain GEMM, then
    // gelu_forward / gelu_backward / bias_grad): the CPU backend's implementation, and the
    // reference every other backend's fused epilogue is tested against.
    void gemm_epilogue_unfused(const Gemm& g) {
        require_epilogue_shape(g);
        Gemm plain = g;
        plain.epilogue = Gemm::Epilogue::none, plain.aux = nullptr, plain.bias_grad = nullptr;
        const int64_t n = g.M * g.N;
        switch (g.epilogue) {
            case Gemm::Epilogue::none: return gemm(plain);
            case Gemm::Epilogue::gelu_aux:
                plain.C = g.aux;
                gemm(plain);
                return gelu_forward(g.c_type, g.C, g.aux, n);
            case Gemm::Epilogue::dgelu:
                gemm(plain);
                return gelu_backward(g.c_type, g.C, g.aux, g.C, n);
            case Gemm::Epilogue::bias_grad:
                gemm(plain);
                return bias_grad(g.bias_grad, g.A, g.a_type, g.K, g.M);
        }
    }
    // The shapes an epilogue supports (Gemm::Epilogue); anything else is a programmer error
    // that stops the process.
    static void require_epilogue_shape(const Gemm& g) {
        if (g.c_in && g.c_in != g.C && (g.batch != 1 || g.epilogue != Gemm::Epilogue::none)) {
            std::fprintf(stderr, "ptd-engine: gemm (M %lld N %lld K %lld): c_in needs batch 1 and no epilogue\n",
                         (long long)g.M, (long long)g.N, (long long)g.K);
            std::exit(1);
        }
        if (g.epilogue == Gemm::Epilogue::none) return;
        const bool gelu = g.epilogue == Gemm::Epilogue::gelu_aux || g.epilogue == Gemm::Epilogue::dgelu;
        const char* why = nullptr;
        if (g.batch != 1) why = "batch must be 1";
        else if (gelu && (!g.aux || g.beta != 0.0f || g.ldc != std::max<int64_t>(g.N, 1))) why = "gelu epilogues need aux, beta 0, ldc = N";
        else if (g.epilogue != Gemm::Epilogue::gelu_aux && g.bias) why = "only gelu_aux takes a bias";
        else if (g.epilogue == Gemm::Epilogue::bias_grad && (!g.bias_grad || !g.trans_a || g.lda != std::max<int64_t>(g.M, 1)))
            why = "bias_grad needs the f32 output, trans_a and lda = max(M, 1)";
        if (!why) return;
        std::fprintf(stderr, "ptd-engine: gemm epilogue %d (M %lld N %lld K %lld): %s\n", (int)g.epilogue,
                     (long long)g.M, (long long)g.N, (long long)g.K, why);
        std::exit(1);
    }
    // The dense case: contiguous operands of one type t, no batch, no bias.
    void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void* A,
              const void* B, float beta, void* C, DType t = DType::f32, DType c_type = DType::f32) {
        Gemm g;
        g.trans_a = trans_a, g.trans_b = trans_b, g.M = M, g.N = N, g.K = K, g.alpha = alpha, g.beta = beta;
        g.A = A, g.a_type = t, g.lda = std::max<int64_t>(trans_a ? M : K, 1);
        g.B = B, g.b_type = t, g.ldb = std::max<int64_t>(trans_b ? K : N, 1);
        g.C = C, g.c_type = c_type, g.ldc = std::max<int64_t>(N, 1);
        gemm(g);
    }
    virtual void bias_add(void* y, const void* bias, DType t, int64_t rows, int64_t cols) = 0;  // y[r,:] (t) += bias (t)
    // out (t) = x + bias (rounded to t, when bias is given) + residual: a row-parallel layer's
    // output after its TP reduction. The default is that sequence (copy, bias_add, add: the
    // CPU backend's bits); a GPU backend runs one kernel with the same roundings. out may be
    // x; it overlaps neither bias nor residual.
    virtual void bias_residual_add(void* out, const void* x, const void* bias, const void* residual, DType t,
                                   int64_t rows, int64_t cols) {
        if (out != x) copy(out, x, t, rows * cols);
        if (bias) bias_add(out, bias, t, rows, cols);
        add(out, residual, t, rows * cols);
    }
    virtual void bias_grad(float* dbias, const void* dy, DType t, int64_t rows, int64_t cols) = 0;  // dbias (f32) += Σ_r dy[r,:] (t)

    // ---- norms -------------------------------------------------------------------------
    // LayerNorm: out = (x − mean)·rstd·w + b per row of C; saves mean[rows], rstd[rows].
    // out, x, w, b (t); mean, rstd (f32) — the statistics are f32 in every precision.
    virtual void layernorm_forward(DType t, void* out, float* mean, float* rstd, const void* x, const void* w,
                                   const void* b, int64_t rows, int64_t C, float eps) = 0;
    // dx (t) input gradient: overwritten, or with accumulate_dx dx += it (f32 sum rounded
    // once: the residual stream's gradient and the norm's in one pass, no copy + add);
    // dw, db (f32 main grads) +=; dout, x, w (t).
    virtual void layernorm_backward(DType t, void* dx, float* dw, float* db, const void* dout, const void* x,
                                    const float* mean, const float* rstd, const void* w, int64_t rows,
                                    int64_t C, bool accumulate_dx) = 0;
    // RMSNorm: out = x·rstd·w, rstd = 1/sqrt(mean(x²) + eps). Types as LayerNorm.
    virtual void rmsnorm_forward(DType t, void* out, float* rstd, const void* x, const void* w, int64_t rows,
                                 int64_t C, float eps) = 0;
    virtual void rmsnorm_backward(DType t, void* dx, float* dw, const void* dout, const void* x,
                                  const float* rstd, const void* w, int64_t rows, int64_t C,
                                  bool accumulate_dx) = 0;
    // The residual add fused into the norm that follows it: res_out (t) = x + residual
    // (rounded once, stored: the residual stream), then out, mean, rstd = the norm of kind
    // `kind` of the stored res_out (rmsnorm: b and mean unused, may be null). res_out may be
    // x or residual; out overlaps none of them. The default is that unfused sequence (copy,
    // add, norm: the CPU backend's bits); a GPU backend runs one kernel.
    enum class NormKind : uint8_t { layernorm, rmsnorm };
    virtual void add_norm_forward(DType t, void* res_out, void* out, float* mean, float* rstd, const void* x,
                                  const void* residual, const void* w, const void* b, int64_t rows, int64_t C,
                                  float eps, NormKind kind) {
        const int64_t n = rows * C;
        if (res_out == residual) {
            add(res_out, x, t, n);
        } else {
            if (res_out != x) copy(res_out, x, t, n);
            add(res_out, residual, t, n);
        }
        if (kind == NormKind::layernorm) layernorm_forward(t, out, mean, rstd, res_out, w, b, rows, C, eps);
        else rmsnorm_forward(t, out, rstd, res_out, w, rows, C, eps);
    }

    // ---- activations (every operand t) ---------------------------------------------------
    // GELU, tanh approximation (GPT-2): out = 0.5x(1 + tanh(√(2/π)(x + 0.044715x³))).
    virtual void gelu_forward(DType t, void* out, const void* x, int64_t n) = 0;
    virtual void gelu_backward(DType t, void* dx, const void* x, const void* dout, int64_t n) = 0;  // dx = dout·gelu'(x)
    // SwiGLU: out = silu(gate) · up.
    virtual void swiglu_forward(DType t, void* out, const void* gate, const void* up, int64_t n) = 0;
    virtual void swiglu_backward(DType t, void* dgate, void* dup, const void* dout, const void* gate,
                                 const void* up, int64_t n) = 0;

    // ---- attention (every tensor t; softmax statistics f32) ----------------------------
    // RoPE (rotate-half / NeoX & HF Llama convention: pairs (i, i + D/2)), in place on
    // x [B,T,nh,D] whose token rows are ld elements apart (ld ≥ nh·D: q and k are column
    // blocks of the fused qkv); position of row t is pos0 + t; freq_i = theta^(−2i/D). The
    // angles come from a table built once at start-up (no allocation inside the op):
    // rope_table fills table [2, positions, D/2] (f32) with cos, then sin, of p·freq_i for
    // p < positions; the ops need pos0 + T ≤ positions.
    virtual void rope_table(float* table, int64_t positions, int64_t D, float theta) = 0;
    virtual void rope_forward(DType t, void* x, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D,
                              int64_t pos0, const float* table, int64_t positions) = 0;
    // The inverse rotation applied to a gradient, in place.
    virtual void rope_backward(DType t, void* dx, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D,
                               int64_t pos0, const float* table, int64_t positions) = 0;
    // Causal softmax attention on the fused projection qkv [B·T, (H + 2G)·D]: per token
    // row, q (H heads), then k and v (G heads each); query head h uses kv head h / (H/G).
    // probs [B,H,T,T] saved (entries above the diagonal are 0; softmax in f32, stored in
    // t); ctx [B,T,H,D]; scale 1/√D. The score and context products are calls of the
    // GEMM op below (the CPU backend: per block of query rows on the qkv rows' leading
    // dimensions; a GPU backend: q, k, v permuted head-major into `workspace`, then one
    // strided batch over every (b, h)). `workspace` is the backward's (below), planned at
    // start-up; the forward's need is within it.
    virtual void attention_forward(DType t, void* ctx, void* probs, const void* qkv, int64_t B, int64_t T,
                                   int64_t H, int64_t G, int64_t D, void* workspace) = 0;
    // dqkv [B·T, (H + 2G)·D] overwritten, laid out as qkv. `workspace` holds
    // attention_backward_workspace(t, B, T, H, G, D) bytes of scratch planned at start-up
    // (the op allocates nothing); the backend states the size for the precision t, as its
    // kernels need it.
    virtual void attention_backward(DType t, void* dqkv, const void* dctx, const void* probs, const void* qkv,
                                    int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, void* workspace) = 0;
    virtual int64_t attention_backward_workspace(DType t, int64_t B, int64_t T, int64_t H, int64_t G,
                                                 int64_t D) const = 0;
    // Flash attention (training.flash_attention = true; FlashAttention-2, Dao 2023): the
    // same causal attention as attention_forward / attention_backward without the [B,H,T,T]
    // probabilities. Forward: ctx [B,T,H,D] (t) and lse [B,H,T] (f32) = log Σ_{u ≤ t}
    // exp(scale·q_t·k_u), the log-sum-exp of each query row's scaled scores, saved for the
    // backward. Backward: dqkv (t, overwritten, laid out as qkv) from dctx, the saved ctx and
    // lse and qkv; `workspace` holds flash_attention_backward_workspace bytes planned at
    // start-up. The probabilities are recomputed from lse in f32; what is rounded to t differs
    // from the materialised path (probabilities before the products with V and dctx), so the
    // two agree to the storage type's rounding, not bit for bit.
    virtual void flash_attention_forward(DType t, void* ctx, float* lse, const void* qkv, int64_t B, int64_t T,
                                         int64_t H, int64_t G, int64_t D) = 0;
    virtual void flash_attention_backward(DType t, void* dqkv, const void* dctx, const void* ctx, const float* lse,
                                          const void* qkv, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D,
                                          void* workspace) = 0;
    virtual int64_t flash_attention_backward_workspace(DType t, int64_t B, int64_t T, int64_t H, int64_t G,
                                                       int64_t D) const = 0;
    // Scratch the backend keeps for its ops, stated by the backend and planned at start-up
    // (plan_operand_scratch allocates it before the allocator is sealed): the CPU backend
    // widens 16-bit operands to f32 panels (none in f32); a GPU backend reads 16-bit
    // directly but needs the partial sums of its deterministic row reductions (norm and
    // bias gradients) and of Σx². Bytes for ops of dtype t whose largest operand has
    // `largest_operand` elements and whose row-reduced operands (norm input, bias gradient)
    // have at most `widest_row` columns. An op whose operand needs more than was planned is
    // a programmer error that stops the process.
    virtual int64_t operand_scratch_bytes(DType t, int64_t largest_operand, int64_t widest_row) const = 0;
    virtual void plan_operand_scratch(DType t, int64_t largest_operand, int64_t widest_row) = 0;
    // The largest embedding backward this stage makes (its rows and vocabulary shard), stated
    // at start-up before operand_scratch_bytes: a GPU backend groups the rows by token in
    // its operand scratch. The CPU backend needs nothing.
    virtual void plan_embedding_backward(int64_t rows, int64_t Vl) {}

    // ---- embedding (vocab-parallel) ----------------------------------------------------
    // out[r,:] (t) = wte[tok[r] − v0, :] (t) when v0 ≤ tok[r] < v0 + Vl, else 0. wte [Vl, C];
    // tokens i32.
    virtual void embedding_forward(DType t, void* out, const int32_t* tokens, const void* wte, int64_t v0,
                                   int64_t Vl, int64_t rows, int64_t C) = 0;
    // dwte[tok[r] − v0, :] (f32) += dout[r,:] (t) for rows in range (deterministic order).
    virtual void embedding_backward(DType t, float* dwte, const void* dout, const int32_t* tokens, int64_t v0,
                                    int64_t Vl, int64_t rows, int64_t C) = 0;
    // Learned positions: out[r,:] (t) += wpe[(row0 + r) % T, :] (t); backward:
    // dwpe[(row0 + r) % T,:] (f32) += dout[r,:] (t).
    virtual void position_forward(DType t, void* out, const void* wpe, int64_t row0, int64_t rows, int64_t T,
                                  int64_t C) = 0;
    virtual void position_backward(DType t, float* dwpe, const void* dout, int64_t row0, int64_t rows, int64_t T,
                                   int64_t C) = 0;

    // ---- vocab-parallel cross entropy (Megatron), all f32 ------------------------------
    // logits [rows, Vl] (f32: the output GEMM writes f32 in every precision, so softmax
    // and loss are f32) hold the columns v0..v0+Vl−1 of the padded vocabulary; only
    // global columns < V_valid take part (padding is masked out). Between the steps the
    // caller all-reduces over the TP group (max for xent_row_max, sum for the others).
    virtual void xent_row_max(float* rowmax, const float* logits, int64_t rows, int64_t Vl, int64_t v0,
                              int64_t V_valid) = 0;
    // sumexp[r] = Σ_valid exp(logits[r,c] − rowmax[r]); target_logit[r] = logits[r, t − v0]
    // when the target is in this shard, else 0.
    virtual void xent_sums(float* sumexp, float* target_logit, const float* logits, const float* rowmax,
                           const int32_t* targets, int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) = 0;
    // loss[r] = log(sumexp[r]) + rowmax[r] − target_logit[r]; logits become softmax
    // probabilities in place (masked columns 0).
    virtual void xent_finish(float* loss, float* logits, const float* rowmax, const float* sumexp,
                             const float* target_logit, int64_t rows, int64_t Vl, int64_t v0,
                             int64_t V_valid) = 0;
    // dlogits = scale · (probs − onehot(target)) (masked columns 0), stored in dlogits_t:
    // f32 [rows, Vl], or 16-bit (bf16 / f16, rounded once) with rows 2·Vl elements apart —
    // each row in the first half of the bytes of the same row of an f32 [rows, Vl] buffer,
    // so that dlogits may be probs itself (in place, as llm.c and Megatron write 16-bit
    // dlogits over the logits) and the output layer's backward GEMMs read it as a 16-bit
    // operand with ld 2·Vl: bf16 × bf16 on tensor cores, no f32 widening. dlogits may alias probs.
    virtual void xent_backward(void* dlogits, DType dlogits_t, const float* probs, const int32_t* targets,
                               float scale, int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) = 0;
    // The four phases in one op, for a shard that holds every valid column (tp = 1, where
    // no all-reduce separates them): loss[r] as xent_finish computes it and, when dlogits is
    // not null, dlogits = scale · (softmax − onehot(target)) as xent_backward computes it
    // (masked columns 0), stored in dlogits_t as xent_backward stores it (16-bit: rows 2·Vl
    // apart). logits are only read (no probabilities are stored); dlogits may alias logits. Needs no scratch. The CPU backend runs the four phases' arithmetic row
    // by row (the same bits as the four calls); a GPU backend one kernel that reads a row
    // twice (online max and Σexp, then loss and gradient), equal to the four phases up to
    // the summation order of Σexp.
    virtual void xent_fused(float* loss, void* dlogits, DType dlogits_t, const float* logits, const int32_t* targets,
                            float scale, int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) = 0;
    // Elements between the rows of dlogits stored in dlogits_t over an f32 [rows, Vl] buffer.
    static int64_t dlogits_ld(DType dlogits_t, int64_t Vl) { return dlogits_t == DType::f32 ? Vl : 2 * Vl; }

    // ---- optimizer ---------------------------------------------------------------------
    // AdamW (Loshchilov & Hutter): m = β1 m + (1−β1) g; v = β2 v + (1−β2) g²;
    // p −= lr · (m̂ / (√v̂ + eps) + wd · p) with m̂ = m/(1−β1^step), v̂ = v/(1−β2^step).
    // g (f32 main grads) is first multiplied by (float) scalars[SCALAR_GRAD_SCALE]
    // (clipping, and 1/loss-scale with fp16); nothing changes when
    // scalars[SCALAR_FOUND_INF] != 0 (the step is skipped). `scalars` is the device buffer
    // of finish_step_scalars (f64). step ≥ 1.
    // p (f32: the master weights, or the parameters themselves in fp32 training), g, m, v
    // (f32). When model_p is not null, the updated p is also stored there in model_t (the
    // 16-bit model weights the next forward reads), rounded to nearest even.
    virtual void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                       float beta2, float eps, float weight_decay, const double* scalars, int64_t step,
                       void* model_p = nullptr, DType model_t = DType::f32) = 0;

    // AdamW over many ranges in one op (one launch on a GPU: a multi-tensor update over the
    // whole optimizer shard). plan_adamw, at start-up, states the ranges — every range of
    // this rank's shard, each with its own weight decay (0 for tensors without decay) —
    // and the backend keeps them: the CPU backend in host memory, the CUDA backend as a
    // device list it allocates then (MEM_WORKSPACE, adamw_plan_bytes(count) bytes: part of
    // the backend's stated scratch, like the operand scratch). A later plan replaces the
    // list (before the allocator is sealed); plan_adamw(nullptr, 0) drops it (teardown).
    // adamw_step then does exactly adamw(r.p, r.g, r.m, r.v, r.n, lr, beta1, beta2, eps,
    // r.weight_decay, scalars, step, r.model_p, model_t) for every planned range r, in
    // order — the same bits as those calls. model_p is null in every range or in none.
    struct AdamWRange {
        float* p = nullptr;        // f32 master weights (or the parameters in fp32 training)
        const float* g = nullptr;  // f32 main grads
        float* m = nullptr;        // f32 Adam moments
        float* v = nullptr;
        void* model_p = nullptr;   // the 16-bit model weights rounded from p, or null
        int64_t n = 0;
        float weight_decay = 0.0f;
    };
    virtual int64_t adamw_plan_bytes(int count) const = 0;
    virtual void plan_adamw(const AdamWRange* ranges, int count) = 0;
    virtual void adamw_step(float lr, float beta1, float beta2, float eps, const double* scalars, int64_t step,
                            DType model_t) = 0;
};

// Orders one communicator call between compute work: the comm stream waits for the
// compute work queued so far (`ready`), and compute waits for the call (`done`). Put one
// around every collective and p2p group.
class CommOnStream {
public:
    CommOnStream(Backend& be, Event ready, Event done) : be_(be), done_(done) {
        be_.record_event(ready, Stream::compute);
        be_.wait_event(Stream::comm, ready);
    }
    ~CommOnStream() {
        be_.record_event(done_, Stream::comm);
        be_.wait_event(Stream::compute, done_);
    }
    CommOnStream(const CommOnStream&) = delete;
    CommOnStream& operator=(const CommOnStream&) = delete;

private:
    Backend& be_;
    Event done_;
};

// The CPU backend: OpenBLAS sgemm (16-bit operands widened to f32 panels), OpenMP elsewhere. `threads` ≤ 0 = OMP default.
std::unique_ptr<Backend> make_cpu_backend(int threads);

// Debug mode (PTD_STREAM_CHECK=1 in ptd-engine): wraps a backend, forwards every call, and
// checks the stream contract: every compute op's output is stamped with the compute
// stream's position; an event records a stream's position; a wait makes it visible to the
// other stream. The process stops, naming the buffer and both operations, when the comm
// stream reads memory whose last compute write it has not waited for, or a compute op uses
// memory whose last comm write the compute stream has not waited for.
std::unique_ptr<Backend> make_stream_checking_backend(std::unique_ptr<Backend> inner);

}  // namespace ptd::engine
