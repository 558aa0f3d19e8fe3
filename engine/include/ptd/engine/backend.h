// backend.h — the compute backend interface of ptd-engine: device memory (tagged) and
// every kernel the model needs. The model code only calls these; it never touches
// tensor elements itself, so a CUDA backend can replace the CPU one (engine/cpu/) without
// changes to model, schedule or optimizer code.
//
// Conventions for every op:
//   - fp32, row-major, contiguous; pointers are device pointers of this backend.
//   - "rows" = number of token rows (micro_batch · seq, or the SP slice of it).
//   - B batch, T sequence, H query heads (local), G key/value heads (local), D head dim.
//   - Outputs are overwritten unless the contract says "+=" (accumulate).
//   - Results are deterministic: the same inputs and thread count give the same bits
//     (static work partition, no atomics in reductions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ptd/engine/mem.h"

namespace ptd::engine {

// The step's scalars live in one device buffer of STEP_SCALAR_COUNT doubles, so that no
// reduction returns a value to the host inside a step: the loss sum and Σg² accumulate
// there, travel together in one f64 all-reduce over the world, the norm, clip scale and
// found-inf flag are derived there (finish_step_scalars), AdamW reads them there, and the
// host downloads the buffer once per step, after the update, for the metrics line.
enum StepScalar : int {
    SCALAR_LOSS_SUM = 0,   // Σ per-token loss over the rows this rank owns (last stage, tp rank 0)
    SCALAR_GRAD_SQUARES,   // Σ g² over the gradient elements this rank counts in the norm
    SCALAR_GRAD_NORM,      // √(world Σ g²)
    SCALAR_CLIP_SCALE,     // min(1, clip / (‖g‖ + 1e-6)), or 1 without clipping
    SCALAR_FOUND_INF,      // 1 when the loss or the norm is not finite (the update is skipped), else 0
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
    virtual TransferStats transfer_stats() const = 0;
    // Host staging memory the backend owns (pinned on a GPU, so uploads from it can be
    // asynchronous): token ids are read into it and uploaded from it. Zero-filled.
    virtual void* alloc_host(size_t bytes, const char* what) = 0;
    virtual void release_host(void* p) = 0;  // nullptr is a no-op
    virtual void zero(void* x, size_t bytes) = 0;  // device memset

    // ---- elementwise ------------------------------------------------------------------
    virtual void fill(float* x, float value, int64_t n) = 0;
    virtual void copy(float* dst, const float* src, int64_t n) = 0;
    virtual void add(float* y, const float* x, int64_t n) = 0;             // y += x
    virtual void scale(float* x, float a, int64_t n) = 0;                  // x *= a
    // acc[0] += Σ x², summed in double; acc is a device scalar (nothing returns to the host).
    virtual void sum_squares(double* acc, const float* x, int64_t n) = 0;
    // acc[0] += Σ x, the sum taken in double from 0 in index order, then added.
    virtual void sum_into(double* acc, const float* x, int64_t n) = 0;
    // From s[SCALAR_LOSS_SUM] and s[SCALAR_GRAD_SQUARES] (already reduced over the world):
    // s[SCALAR_GRAD_NORM], s[SCALAR_CLIP_SCALE] (max_norm ≤ 0: no clipping) and
    // s[SCALAR_FOUND_INF].
    virtual void finish_step_scalars(double* s, double max_norm) = 0;
    // Token ids of one micro-batch: seq [B, T+1] (B sequences of T+1 ids) → inputs [B·T]
    // (ids 0..T−1 of each) and targets [B·T] (ids 1..T); either may be null.
    virtual void split_tokens(int32_t* inputs, int32_t* targets, const int32_t* seq, int64_t B, int64_t T) = 0;

    // ---- GEMM --------------------------------------------------------------------------
    // C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C. op(A) = A ([M,K]) or Aᵀ (A is
    // [K,M]) when trans_a; op(B) = B ([K,N]) or Bᵀ (B is [N,K]) when trans_b.
    virtual void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                      const float* A, const float* B, float beta, float* C) = 0;
    virtual void bias_add(float* y, const float* bias, int64_t rows, int64_t cols) = 0;  // y[r,:] += bias
    virtual void bias_grad(float* dbias, const float* dy, int64_t rows, int64_t cols) = 0; // dbias += Σ_r dy[r,:]

    // ---- norms -------------------------------------------------------------------------
    // LayerNorm: out = (x − mean)·rstd·w + b per row of C; saves mean[rows], rstd[rows].
    virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w,
                                   const float* b, int64_t rows, int64_t C, float eps) = 0;
    // dx = (overwritten) input gradient; dw += , db += .
    virtual void layernorm_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                                    const float* mean, const float* rstd, const float* w, int64_t rows,
                                    int64_t C) = 0;
    // RMSNorm: out = x·rstd·w, rstd = 1/sqrt(mean(x²) + eps).
    virtual void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int64_t rows,
                                 int64_t C, float eps) = 0;
    virtual void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x,
                                  const float* rstd, const float* w, int64_t rows, int64_t C) = 0;

    // ---- activations -------------------------------------------------------------------
    // GELU, tanh approximation (GPT-2): out = 0.5x(1 + tanh(√(2/π)(x + 0.044715x³))).
    virtual void gelu_forward(float* out, const float* x, int64_t n) = 0;
    virtual void gelu_backward(float* dx, const float* x, const float* dout, int64_t n) = 0;  // dx = dout·gelu'(x)
    // SwiGLU: out = silu(gate) · up.
    virtual void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) = 0;
    virtual void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                                 const float* up, int64_t n) = 0;

    // ---- attention ---------------------------------------------------------------------
    // RoPE (rotate-half / NeoX & HF Llama convention: pairs (i, i + D/2)), in place on
    // x [B,T,nh,D]; position of row t is pos0 + t; freq_i = theta^(−2i/D). The angles come
    // from a table built once at start-up (no allocation inside the op): rope_table fills
    // table [2, positions, D/2] with cos, then sin, of p·freq_i for p < positions; the ops
    // need pos0 + T ≤ positions.
    virtual void rope_table(float* table, int64_t positions, int64_t D, float theta) = 0;
    virtual void rope_forward(float* x, int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                              const float* table, int64_t positions) = 0;
    // The inverse rotation applied to a gradient, in place.
    virtual void rope_backward(float* dx, int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                               const float* table, int64_t positions) = 0;
    // Causal softmax attention. q [B,T,H,D], k,v [B,T,G,D] with H % G == 0 (query head h
    // uses kv head h / (H/G)); probs [B,H,T,T] saved (entries above the diagonal are 0);
    // ctx [B,T,H,D]; scale 1/√D.
    virtual void attention_forward(float* ctx, float* probs, const float* q, const float* k, const float* v,
                                   int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) = 0;
    // dq, dk, dv overwritten. `workspace` holds attention_backward_workspace(B, T, H, G, D)
    // f32 elements of scratch, planned at start-up (the op allocates nothing).
    virtual void attention_backward(float* dq, float* dk, float* dv, const float* dctx, const float* probs,
                                    const float* q, const float* k, const float* v, int64_t B, int64_t T,
                                    int64_t H, int64_t G, int64_t D, float* workspace) = 0;
    virtual int64_t attention_backward_workspace(int64_t B, int64_t T, int64_t H, int64_t G, int64_t D) const = 0;

    // ---- embedding (vocab-parallel) ----------------------------------------------------
    // out[r,:] = wte[tok[r] − v0, :] when v0 ≤ tok[r] < v0 + Vl, else 0. wte [Vl, C].
    virtual void embedding_forward(float* out, const int32_t* tokens, const float* wte, int64_t v0,
                                   int64_t Vl, int64_t rows, int64_t C) = 0;
    // dwte[tok[r] − v0, :] += dout[r,:] for rows in range (deterministic order).
    virtual void embedding_backward(float* dwte, const float* dout, const int32_t* tokens, int64_t v0,
                                    int64_t Vl, int64_t rows, int64_t C) = 0;
    // Learned positions: out[r,:] += wpe[(row0 + r) % T, :]; backward: dwpe[(row0 + r) % T,:] += dout[r,:].
    virtual void position_forward(float* out, const float* wpe, int64_t row0, int64_t rows, int64_t T,
                                  int64_t C) = 0;
    virtual void position_backward(float* dwpe, const float* dout, int64_t row0, int64_t rows, int64_t T,
                                   int64_t C) = 0;

    // ---- vocab-parallel cross entropy (Megatron) ---------------------------------------
    // logits [rows, Vl] hold the columns v0..v0+Vl−1 of the padded vocabulary; only
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
    // g is first multiplied by (float) scalars[SCALAR_CLIP_SCALE] (clipping); nothing
    // changes when scalars[SCALAR_FOUND_INF] != 0 (the step is skipped). `scalars` is the
    // device buffer of finish_step_scalars. step ≥ 1.
    virtual void adamw(float* p, const float* g, float* m, float* v, int64_t n, float lr, float beta1,
                       float beta2, float eps, float weight_decay, const double* scalars, int64_t step) = 0;
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

// The CPU backend: OpenBLAS sgemm, OpenMP elsewhere. `threads` ≤ 0 = OMP default.
std::unique_ptr<Backend> make_cpu_backend(int threads);

// Debug mode (PTD_STREAM_CHECK=1 in ptd-engine): wraps a backend, forwards every call, and
// checks the stream contract: every compute op's output is stamped with the compute
// stream's position; an event records a stream's position; a wait makes it visible to the
// other stream. The process stops, naming the buffer and both operations, when the comm
// stream reads memory whose last compute write it has not waited for, or a compute op uses
// memory whose last comm write the compute stream has not waited for.
std::unique_ptr<Backend> make_stream_checking_backend(std::unique_ptr<Backend> inner);

}  // namespace ptd::engine
