// kernels.h — the launch functions of the CUDA backend's kernels (engine/cuda/kernels/*.cuh),
// as plain C++20 declarations: raw device pointers, the storage type as ptd::engine::DType,
// the stream as StreamHandle (runtime.h). No CUDA type appears here, so host code (the
// later cuda_backend.cpp) includes it in both builds: namespace ptd::cuda::dev is the nvcc
// build (kernels_cuda.cu), ptd::cuda::sim the simulator build (kernels_sim.cpp).
//
// Semantics are the CPU backend's ops (engine/include/ptd/engine/backend.h), so the GPU
// backend is a thin adapter: "(t)" operands have the storage type t ∈ {f32, bf16, f16},
// "(f32)" operands are always f32; arithmetic is f32 and a 16-bit result is rounded to
// nearest even once, when stored; row-major, contiguous unless a leading dimension says
// otherwise; outputs overwritten unless marked "+=". Every launch is asynchronous on
// `stream` and allocates nothing. Results are deterministic: the same inputs and shapes
// give the same bits on every run (fixed work partition, no float atomics; reductions
// across rows go through a per-chunk partial sum in `workspace` and a second pass that adds
// the chunks in index order).
//
// Numerics relative to the CPU backend (what tests/test_cuda_kernels.cpp holds them to):
// fill, convert, add and scale give the same bits; the other ops differ only in summation
// order, expf vs the CPU's polynomial exp and (on the device) fused multiply-adds — a few
// f32 ulp; a 16-bit output is the same f32 value rounded once, so it is within one 16-bit
// ulp of the CPU's. A contract violation (bad shape, bad dtype)
// prints the op and aborts: it is a bug in the caller.
#pragma once

#include <cstdint>

#include "ptd/engine/dtype.h"
#include "runtime.h"

namespace ptd::cuda::PTD_CUDA_NS {

using ptd::engine::DType;

// ---- elementwise (kernels/elementwise.cuh) -------------------------------------------------
void fill(void* x, DType t, float value, int64_t n, StreamHandle stream);  // x (t) = value
// dst (dst_t) = src (src_t), any pair of f32 / bf16 / f16 (rounded to nearest even when
// narrowing); dst == src is a no-op; otherwise they must not overlap.
void convert(void* dst, DType dst_t, const void* src, DType src_t, int64_t n, StreamHandle stream);
void add(void* y, const void* x, DType t, int64_t n, StreamHandle stream);  // y (t) += x (t)
void scale(float* x, float a, int64_t n, StreamHandle stream);             // x (f32) *= a

// ---- row reductions: workspace --------------------------------------------------------------
// The norm backward ops and bias_grad reduce over rows in two passes: chunks of rows give
// partial sums in `workspace`, then each column adds its chunks in index order and adds that
// to the f32 gradient. The chunking depends only on `rows`, so results do not depend on the
// GPU. Floats of workspace an op on [rows, C] needs; it grows with rows and C, so the size
// for the largest rows and C of a run serves every smaller call (plan it at start-up).
int64_t row_reduce_workspace_floats(int64_t rows, int64_t C);

// dbias (f32) += Σ_r dy[r,:] (t); dy [rows, cols]. For the GEMMs whose bias gradient the
// cuBLASLt epilogue (BGRADB) does not produce.
void bias_grad(float* dbias, const void* dy, DType t, int64_t rows, int64_t cols, float* workspace,
               StreamHandle stream);

// ---- norms (kernels/norms.cuh) ------------------------------------------------------------
// LayerNorm: out = (x − mean)·rstd·w + b per row of C; mean[rows], rstd[rows] (f32) saved;
// out, x, w, b (t). Two passes over the row (mean, then Σ(x − mean)²) as the CPU backend.
void layernorm_forward(DType t, void* out, float* mean, float* rstd, const void* x, const void* w, const void* b,
                       int64_t rows, int64_t C, float eps, StreamHandle stream);
// The residual add fused into the norm that follows it (one read of x and residual, one
// write of each result): res_out (t) = x + residual, rounded once to t and stored; then
// out, mean, rstd = layernorm_forward of that stored (rounded) res_out. The result is
// therefore bit for bit what add(residual, x) followed by layernorm_forward(out, residual)
// of this file compute (the same reduction code runs in both). res_out may be x or residual (the residual stream updated in place); out must
// not overlap the inputs.
void layernorm_residual_forward(DType t, void* res_out, void* out, float* mean, float* rstd, const void* x,
                                const void* residual, const void* w, const void* b, int64_t rows, int64_t C,
                                float eps, StreamHandle stream);
// dx (t) input gradient, overwritten — or, with accumulate_dx, dx (t) += the input
// gradient (the residual stream's gradient of a fused residual + norm, one rounding of
// dx + gradient instead of two); dw, db (f32 main grads) +=; dout, x, w (t); mean, rstd as
// saved by the forward. workspace: row_reduce_workspace_floats(rows, C) floats.
void layernorm_backward(DType t, void* dx, float* dw, float* db, const void* dout, const void* x, const float* mean,
                        const float* rstd, const void* w, int64_t rows, int64_t C, bool accumulate_dx,
                        float* workspace, StreamHandle stream);
// RMSNorm: out = x·rstd·w, rstd = 1/sqrt(mean(x²) + eps) saved (f32). Types as LayerNorm.
void rmsnorm_forward(DType t, void* out, float* rstd, const void* x, const void* w, int64_t rows, int64_t C,
                     float eps, StreamHandle stream);
// res_out (t) = x + residual rounded once and stored, then rmsnorm_forward of it (as above).
void rmsnorm_residual_forward(DType t, void* res_out, void* out, float* rstd, const void* x, const void* residual,
                              const void* w, int64_t rows, int64_t C, float eps, StreamHandle stream);
// dx (t) overwritten (or += with accumulate_dx); dw (f32) +=. workspace as LayerNorm.
void rmsnorm_backward(DType t, void* dx, float* dw, const void* dout, const void* x, const float* rstd, const void* w,
                      int64_t rows, int64_t C, bool accumulate_dx, float* workspace, StreamHandle stream);

// ---- activations (kernels/activations.cuh; every operand t) --------------------------------
// GELU, tanh approximation (GPT-2), computed as x·σ(2a), a = √(2/π)(x + 0.044715x³).
void gelu_forward(DType t, void* out, const void* x, int64_t n, StreamHandle stream);
void gelu_backward(DType t, void* dx, const void* x, const void* dout, int64_t n, StreamHandle stream);
// SwiGLU: out = silu(gate)·up; backward dgate = dout·up·silu'(gate), dup = dout·silu(gate).
void swiglu_forward(DType t, void* out, const void* gate, const void* up, int64_t n, StreamHandle stream);
void swiglu_backward(DType t, void* dgate, void* dup, const void* dout, const void* gate, const void* up, int64_t n,
                     StreamHandle stream);

// ---- RoPE (kernels/rope.cuh) ----------------------------------------------------------------
// table [2, positions, D/2] (f32): cos, then sin, of p·theta^(−2i/D) for p < positions,
// formed in double and rounded once (built once at start-up; not a hot kernel).
void rope_table(float* table, int64_t positions, int64_t D, float theta, StreamHandle stream);
// Rotate-half (NeoX / HF Llama: pairs (i, i + D/2)) in place on x [B,T,nh,D] (t) whose
// token rows are ld elements apart (ld ≥ nh·D: q and k are column blocks of the fused qkv);
// row t has position pos0 + t and reads the table there: pos0 + T ≤ positions.
void rope_forward(DType t, void* x, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                  const float* table, int64_t positions, StreamHandle stream);
// The inverse rotation (angle negated) applied to a gradient, in place.
void rope_backward(DType t, void* dx, int64_t ld, int64_t B, int64_t T, int64_t nh, int64_t D, int64_t pos0,
                   const float* table, int64_t positions, StreamHandle stream);

}  // namespace ptd::cuda::PTD_CUDA_NS

// ---- kernb ----
namespace ptd::cuda::PTD_CUDA_NS {

// ---- attention softmax (kernels/attention.cuh) -----------------------------------------
// Attention is strided-batched GEMMs (blaslt.h, issued by the backend) around the softmax
// and a permute, as llm.c does it. The fused qkv [B·T, (H + 2G)·D] (t) — per token row q
// (H heads), then k and v (G heads each) — is first copied head-major into the planned
// workspace (attention_heads_split): q [B,H,T,D] ‖ k [B,G,T,D] ‖ v [B,G,T,D]. Query head
// h uses kv head g = h / rep (rep = H/G), so the rep query heads of kv head g are one
// contiguous [rep·T, D] block, and every GEMM is ONE strided batch over the B·G groups
// (B·H heads without GQA; batch strides rep·T·D, T·D, rep·T·T), the rep heads stacked in M:
//   forward   S = Q·Kᵀ ([rep·T, T] per group, alpha = 1/√D) in t straight into the probs
//             buffer [B·H, T, T] — backend.h plans no f32 scores — and the softmax in place
//             (one more 16-bit rounding, of the scores, as llm.c); attention_softmax_forward
//             over all B·H·T rows → P (t, saved); ctx = P·V head-major, then
//             attention_heads_merge (G = 0) into ctx [B, T, H, D].
//   backward  dctx split head-major (G = 0); dP = dctx·Vᵀ into the workspace W [B·H, T, T];
//             attention_softmax_backward W ← dS = scale·P ⊙ (dP − ρ) in place; then
//             dq = dS·K, dk = dSᵀ·Q and dv = Pᵀ·dctx (K = rep·T: the sum over the group's
//             query heads is the GEMM's own), head-major, merged into dqkv [B·T, (H+2G)·D].
// tests/test_cuda_kernels.cpp (AttentionWithReferenceGemmsMatchesCpuBackend) runs exactly
// these calls through the reference layer against the CPU backend's attention.
// rows [B·T, (H + 2G)·D] (t) → heads = q [B,H,T,D] ‖ k [B,G,T,D] ‖ v [B,G,T,D] (t), and the
// inverse; G = 0 is the context's [B·T, H·D] ↔ [B,H,T,D]. A copy: exact in every type. Not
// in place.
void attention_heads_split(DType t, void* heads, const void* rows, int64_t B, int64_t T, int64_t H, int64_t G,
                           int64_t D, StreamHandle stream);
void attention_heads_merge(DType t, void* rows, const void* heads, int64_t B, int64_t T, int64_t H, int64_t G,
                           int64_t D, StreamHandle stream);
// scores [BH, T, T] (scores_t = f32 or probs_t) → probs [BH, T, T] (probs_t): per row t of
// each (b, h), softmax of scale·scores over the keys u ≤ t in f32, 0 above the diagonal,
// rounded once to probs_t. probs may be scores itself (in place) when the types agree.
void attention_softmax_forward(DType probs_t, void* probs, DType scores_t, const void* scores, int64_t BH, int64_t T,
                               float scale, StreamHandle stream);
// dscores [BH, T, T] (grad_t) = scale · P ⊙ (dP − ρ), ρ_t = Σ_{u ≤ t} P[t,u]·dP[t,u], 0 above
// the diagonal; probs (probs_t), dprobs (grad_t = f32 or probs_t). dscores may be dprobs.
void attention_softmax_backward(DType probs_t, const void* probs, DType grad_t, void* dscores, const void* dprobs,
                                int64_t BH, int64_t T, float scale, StreamHandle stream);

// ---- flash attention (kernels/flash.cuh) -------------------------------------------------
// FlashAttention-2, causal, on the layouts above: t = bf16 or f16, head size D ∈ {16, 32,
// 64, 128}, any T. Forward: ctx [B, T, H, D] (t) and lse [B, H, T] (f32: log Σ_u≤t exp(scale
// ·q_t·k_u), scale = 1/√D) — no [T, T] buffer. Backward: dqkv [B·T, (H + 2G)·D] (t)
// overwritten, from dctx, the saved ctx and lse and qkv; `workspace` holds
// flash_attention_backward_workspace_bytes(B, T, H) bytes (the rows' Σ dctx·ctx, f32).
// Deterministic: dK and dV are summed over a kv head's query heads inside one block, dQ in
// another kernel; no atomics.
void flash_attention_forward(DType t, void* ctx, float* lse, const void* qkv, int64_t B, int64_t T, int64_t H,
                             int64_t G, int64_t D, StreamHandle stream);
int64_t flash_attention_backward_workspace_bytes(int64_t B, int64_t T, int64_t H);
void flash_attention_backward(DType t, void* dqkv, const void* dctx, const void* ctx, const float* lse,
                              const void* qkv, int64_t B, int64_t T, int64_t H, int64_t G, int64_t D, float* workspace,
                              StreamHandle stream);

// ---- vocab-parallel cross entropy (kernels/xent.cuh) -------------------------------------
// f32 logits, softmax and loss. The CPU backend's four phases (backend.h), the caller
// all-reducing over TP in between (max after xent_row_max, sum of sumexp and target_logit
// after xent_sums).
void xent_row_max(float* rowmax, const float* logits, int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid,
                  StreamHandle stream);
void xent_sums(float* sumexp, float* target_logit, const float* logits, const float* rowmax, const int32_t* targets,
               int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid, StreamHandle stream);
// loss[r]; logits become the softmax probabilities in place (masked columns 0).
void xent_finish(float* loss, float* logits, const float* rowmax, const float* sumexp, const float* target_logit,
                 int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid, StreamHandle stream);
// dlogits = scale · (probs − onehot(target)) (masked columns 0) stored in dlogits_t: f32
// [rows, Vl], or 16-bit rounded once with rows 2·Vl elements apart (each row in the first
// half of that row's f32 bytes: Backend::xent_backward). dlogits may alias probs.
void xent_backward(void* dlogits, DType dlogits_t, const float* probs, const int32_t* targets, float scale,
                   int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid, StreamHandle stream);
// tp = 1 (the shard holds every valid column): loss[r] and, when dlogits is not null,
// dlogits = scale · (softmax − onehot), stored as xent_backward stores it — the four phases
// in one launch (online max/sum, then one more read of the row). dlogits may alias logits.
// Same values as the four phases up to the summation order of Σexp.
void xent_fused(float* loss, void* dlogits, DType dlogits_t, const float* logits, const int32_t* targets, float scale,
                int64_t rows, int64_t Vl, int64_t v0, int64_t V_valid, StreamHandle stream);

// ---- embedding, positions, token split (kernels/embedding.cuh) ----------------------------
// out [rows, C] (t) = wte [Vl, C] (t) row tokens[r] − v0, or 0 outside [v0, v0 + Vl).
void embedding_forward(DType t, void* out, const int32_t* tokens, const void* wte, int64_t v0, int64_t Vl,
                       int64_t rows, int64_t C, StreamHandle stream);
// dwte[tok[r] − v0, :] (f32) += dout[r, :] (t) for every row whose token is in [v0, v0 + Vl),
// the rows of one token added in increasing row order (the CPU backend's bits), from the
// device's token ids alone: no host plan, no float atomics; the rows are grouped by token
// with integer counting in `workspace` (embedding.cuh says how), whose int32 elements
// embedding_backward_workspace_ints(rows, Vl) gives (plan it at start-up).
int64_t embedding_backward_workspace_ints(int64_t rows, int64_t Vl);
void embedding_backward(DType t, float* dwte, const void* dout, const int32_t* tokens, int64_t v0, int64_t Vl,
                        int64_t rows, int64_t C, int32_t* workspace, StreamHandle stream);
// out[r, :] (t) += wpe[(row0 + r) % T, :] (t); backward dwpe[p, :] (f32) += dout rows
// r ≡ p − row0 (mod T) in row order (the same bits as the CPU backend).
void position_forward(DType t, void* out, const void* wpe, int64_t row0, int64_t rows, int64_t T, int64_t C,
                      StreamHandle stream);
void position_backward(DType t, float* dwpe, const void* dout, int64_t row0, int64_t rows, int64_t T, int64_t C,
                       StreamHandle stream);
// seq [B, T+1] → inputs [B·T] (ids 0..T−1 of each sequence), targets [B·T] (ids 1..T);
// either may be null.
void split_tokens(int32_t* inputs, int32_t* targets, const int32_t* seq, int64_t B, int64_t T, StreamHandle stream);

// ---- step reductions and scalars (kernels/reduce.cuh) -------------------------------------
// The step scalars: one device buffer of k_step_scalar_count doubles, slots as
// ptd::engine::StepScalar in backend.h (helper mem's step-scalar contract; the integration
// must keep the two in step).
constexpr int k_step_scalar_loss_sum = 0;      // Σ per-token loss
constexpr int k_step_scalar_grad_squares = 1;  // Σ g² (of the loss-scaled gradients)
constexpr int k_step_scalar_loss_scale = 2;    // the loss scale the gradients carry (1 without fp16)
constexpr int k_step_scalar_grad_norm = 3;     // √(world Σ g²) / loss scale
constexpr int k_step_scalar_clip_scale = 4;    // min(1, clip / (‖g‖ + 1e-6)) rounded to float, or 1
constexpr int k_step_scalar_grad_scale = 5;    // clip scale / loss scale rounded to float: AdamW's factor on g
constexpr int k_step_scalar_found_inf = 6;     // 1 when the loss or the norm is not finite
constexpr int k_step_scalar_count = 7;

// A tensor list for the multi-tensor launches lives in device memory (built once at
// start-up); `start` = Σ n of the entries before it (tensor_list_starts fills it).
struct SumSquaresTensor {
    const float* x;
    int64_t n;
    int64_t start;
};
struct AdamWTensor {
    float* p;            // [n] f32: master weights (or the parameters in fp32 training), updated
    const float* g;      // [n] f32 gradients
    float* m;            // [n] f32 Adam moments
    float* v;
    void* model_p;       // [n] model_t: the copy the next forward reads, rounded from p; or null
    int64_t n;
    int64_t start;
    float weight_decay;  // 0 for the tensors without decay
};
// Fills `start` of every entry (host memory, before the upload); returns Σ n.
template <class E>
int64_t tensor_list_starts(E* list, int count) {
    int64_t total = 0;
    for (int k = 0; k < count; k++) {
        list[k].start = total;
        total += list[k].n;
    }
    return total;
}

// Σx² in two deterministic stages (block partials into workspace, then one block adds them
// in a fixed order); the slicing depends only on n (or the list), never on the GPU.
// workspace: sum_squares_workspace_doubles() doubles, planned at start-up. acc[0] (a device
// double, e.g. the grad-squares step scalar) += Σ x² of x [n] (f32).
int64_t sum_squares_workspace_doubles();
void sum_squares(double* acc, const float* x, int64_t n, double* workspace, StreamHandle stream);
// The same over every tensor of a list (device memory, `start` filled; total = Σ n): one
// launch pair for all the gradients of the norm.
void sum_squares_list(double* acc, const SumSquaresTensor* list, int count, int64_t total, double* workspace,
                      StreamHandle stream);
// acc[0] += Σ x (f32 [n]) summed in double from 0 in index order (the CPU backend's loss sum,
// bit for bit).
void sum_into(double* acc, const float* x, int64_t n, StreamHandle stream);
// From s[loss_sum] and s[grad_squares] (already reduced over the world) and the loss scale
// the gradients carry (> 0; 1 without fp16 loss scaling): s[loss_scale], s[grad_norm] =
// √s[grad_squares] / loss_scale, s[found_inf] = 0 or 1 (norm or loss sum not finite),
// s[clip_scale] = (float)(max_norm / (norm + 1e-6)) when max_norm > 0 and norm > max_norm,
// else 1, s[grad_scale] = (float)(clip_scale / loss_scale) — the CPU backend's
// finish_step_scalars on the device, the same bits.
void finish_step_scalars(double* s, double max_norm, double loss_scale, StreamHandle stream);

// ---- optimizer (kernels/optimizer.cuh) -----------------------------------------------------
// AdamW over every tensor of the list in one launch (list in device memory, `start` filled,
// total = Σ n), reading g·(float)scalars[grad_scale], and changing nothing when
// scalars[found_inf] ≠ 0. The f32 arithmetic is the CPU backend's adamw, operation for
// operation (no FMA contraction): p, m, v are the same bits; model_p (model_t, every entry
// the same type) gets p rounded to nearest even. step ≥ 1.
void adamw(const AdamWTensor* list, int count, int64_t total, float lr, float beta1, float beta2, float eps,
           int64_t step, const double* scalars, DType model_t, StreamHandle stream);
// The same update for one tensor whose pointers are passed by value (no device list): what
// Backend::adamw does per call. model_p (model_t) may be null.
void adamw_range(float* p, const float* g, float* m, float* v, void* model_p, int64_t n, float lr, float beta1,
                 float beta2, float eps, float weight_decay, int64_t step, const double* scalars, DType model_t,
                 StreamHandle stream);

}  // namespace ptd::cuda::PTD_CUDA_NS

// ---- bias (kernels/bias.cuh) -----------------------------------------------------------
namespace ptd::cuda::PTD_CUDA_NS {
// y [rows, C] (t) += bias [C] (t) on every row (f32 sum, rounded once): the bias of the
// row-parallel layers, added after the TP all-reduce.
void bias_add(void* y, const void* bias, DType t, int64_t rows, int64_t C, StreamHandle stream);
// out (t) = (x + bias[c], rounded to t) + residual, rounded to t — a TP layer's output after
// its reduction, the bits of copy, bias_add and add in one pass; bias may be null. out may
// be x or residual.
void bias_residual_add(void* out, const void* x, const void* bias, const void* residual, DType t, int64_t rows,
                       int64_t C, StreamHandle stream);
}  // namespace ptd::cuda::PTD_CUDA_NS
