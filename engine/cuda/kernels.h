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
