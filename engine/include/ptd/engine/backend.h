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
#include <memory>

#include "ptd/engine/dtype.h"
#include "ptd/engine/mem.h"

namespace ptd::engine {

class Backend {
public:
    virtual ~Backend() = default;
    virtual const char* name() const = 0;  // "cpu"

    // ---- memory --------------------------------------------------------------------
    // Zero-filled allocation tagged with `cat`; `what` names it for error messages.
    // Out of memory is fatal (message with category, size and what).
    virtual void* alloc(MemCategory cat, size_t bytes, const char* what) = 0;
    virtual void release(void* p) = 0;  // nullptr is a no-op
    virtual MemStats mem_stats() const = 0;
    virtual void reset_peaks() = 0;     // peak := current, per category and total
    virtual void upload(void* dst, const void* src_host, size_t bytes) = 0;
    virtual void download(void* dst_host, const void* src, size_t bytes) = 0;

    // ---- elementwise ------------------------------------------------------------------
    virtual void fill(void* x, DType t, float value, int64_t n) = 0;                // x (t) = value
    // dst (dst_t) = src (src_t), converted (rounded to nearest even when narrowing).
    virtual void convert(void* dst, DType dst_t, const void* src, DType src_t, int64_t n) = 0;
    void copy(void* dst, const void* src, DType t, int64_t n) { convert(dst, t, src, t, n); }  // dst (t) = src (t)
    virtual void add(void* y, const void* x, DType t, int64_t n) = 0;            // y (t) += x (t)
    virtual void scale(float* x, float a, int64_t n) = 0;                          // x (f32) *= a
    virtual double sum_squares(const float* x, int64_t n) = 0;                    // Σ x² of x (f32), in double

    // ---- GEMM --------------------------------------------------------------------------
    // One op for plain, strided-batched and bias-fused GEMMs (cuBLASLt's matmul, in
    // row-major terms). For each batch index i < batch:
    //   C_i[M,N] = alpha · op(A_i) · op(B_i) + beta · C_i (+ bias[N] on every row)
    // with X_i = X + i · stride_x (elements). op(A) = A ([M,K], lda ≥ K) or Aᵀ (A is [K,M],
    // lda ≥ M) when trans_a; op(B) = B ([K,N], ldb ≥ N) or Bᵀ (B is [N,K], ldb ≥ K) when
    // trans_b; C is [M,N] with ldc ≥ N. A and B are f32, bf16 or f16 each (a 16-bit
    // operand is widened); C is f32 (weight gradients accumulate into f32 main grads with
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
    };
    virtual void gemm(const Gemm& g) = 0;
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
    virtual void bias_grad(float* dbias, const void* dy, DType t, int64_t rows, int64_t cols) = 0;  // dbias (f32) += Σ_r dy[r,:] (t)

    // ---- norms -------------------------------------------------------------------------
    // LayerNorm: out = (x − mean)·rstd·w + b per row of C; saves mean[rows], rstd[rows].
    // out, x, w, b (t); mean, rstd (f32) — the statistics are f32 in every precision.
    virtual void layernorm_forward(DType t, void* out, float* mean, float* rstd, const void* x, const void* w,
                                   const void* b, int64_t rows, int64_t C, float eps) = 0;
    // dx (t, overwritten) input gradient; dw, db (f32 main grads) +=; dout, x, w (t).
    virtual void layernorm_backward(DType t, void* dx, float* dw, float* db, const void* dout, const void* x,
                                    const float* mean, const float* rstd, const void* w, int64_t rows,
                                    int64_t C) = 0;
    // RMSNorm: out = x·rstd·w, rstd = 1/sqrt(mean(x²) + eps). Types as LayerNorm.
    virtual void rmsnorm_forward(DType t, void* out, float* rstd, const void* x, const void* w, int64_t rows,
                                 int64_t C, float eps) = 0;
    virtual void rmsnorm_backward(DType t, void* dx, float* dw, const void* dout, const void* x,
                                  const float* rstd, const void* w, int64_t rows, int64_t C) = 0;

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
    // blocks of the fused qkv); position of row t is pos0 + t; freq_i = theta^(−2i/D).
    virtual void rope_forward(DType t, void* x, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D,
                              int64_t pos0, float theta) = 0;
    // The inverse rotation applied to a gradient, in place.
    virtual void rope_backward(DType t, void* dx, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D,
                               int64_t pos0, float theta) = 0;
    // Causal softmax attention on the fused projection qkv [B·T, (H + 2G)·D]: per token
    // row, q (H heads), then k and v (G heads each); query head h uses kv head h / (H/G).
    // probs [B,H,T,T] saved (entries above the diagonal are 0; softmax in f32, stored in
    // t); ctx [B,T,H,D]; scale 1/√D. The score and context products are calls of the
    // GEMM op below on the qkv rows' leading dimensions (the CPU backend: per block of query
    // rows; a GPU backend: strided-batched over heads).
    virtual void attention_forward(DType t, void* ctx, void* probs, const void* qkv, int64_t B, int64_t T,
                                   int64_t H, int64_t G, int64_t D) = 0;
    // dqkv [B·T, (H + 2G)·D] overwritten, laid out as qkv.
    virtual void attention_backward(DType t, void* dqkv, const void* dctx, const void* probs, const void* qkv,
                                    int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) = 0;

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
    // dlogits = scale · (probs − onehot(target)) (masked columns 0). dlogits may alias probs.
    virtual void xent_backward(float* dlogits, const float* probs, const int32_t* targets, float scale,
                               int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid) = 0;

    // ---- optimizer ---------------------------------------------------------------------
    // AdamW (Loshchilov & Hutter): m = β1 m + (1−β1) g; v = β2 v + (1−β2) g²;
    // p −= lr · (m̂ / (√v̂ + eps) + wd · p) with m̂ = m/(1−β1^step), v̂ = v/(1−β2^step).
    // `grad_scale` multiplies g first (clipping, and 1/loss-scale with fp16). step ≥ 1.
    // p (f32: the master weights, or the parameters themselves in fp32 training), g, m, v
    // (f32). When model_p is not null, the updated p is also stored there in model_t (the
    // 16-bit model weights the next forward reads), rounded to nearest even.
    virtual void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                       float beta2, float eps, float weight_decay, float grad_scale, int64_t step,
                       void* model_p = nullptr, DType model_t = DType::f32) = 0;
};

// The CPU backend: OpenBLAS sgemm (16-bit operands widened to f32 panels), OpenMP elsewhere. `threads` ≤ 0 = OMP default.
std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace ptd::engine
