// compute.cpp — how long the math takes: the GEMM efficiency model (fitted constants),
// FLOPs per token, and one layer's and one block's compute time on one rank.
// Sources: FLOPs per token — Chowdhery et al. 2022 (PaLM) App. B for model FLOPs,
// Narayanan et al. 2021 eq. 3 and Korthikanti et al. 2022 eq. 7/8 for the recompute terms;
// flash attention's causal block skipping — Dao 2023 (FlashAttention-2) §3.1; the
// d/(d + d0) shape factor and its constants — fitted on the calibration runs
// (docs/accuracy.md). docs/estimators.md writes every term out.
#include "estimate_internal.h"

#include <algorithm>

namespace ptd {

namespace {
TimeModelConstants g_cal;
}  // namespace

TimeModelConstants& time_model_constants() { return g_cal; }

// Each GEMM dimension d contributes d / (d + d0): under-filled tiles, wave quantisation and
// memory-bound small shapes all bite on the smallest dimension.
double gemm_efficiency(double m, double n, double k) {
    const double d0 = g_cal.gemm_half_dim;
    return g_cal.gemm_eff_max * (m / (m + d0)) * (n / (n + d0)) * (k / (k + d0));
}

FlopsEstimate flops_per_token(const ModelSpec& m, Recompute recompute, AttentionFlops convention,
                              double vocab_padded) {
    FlopsEstimate f;
    f.convention = convention;
    const double h = m.hidden, d = m.head_dim(), a = m.heads, g = m.kv_heads, F = m.ffn_hidden;
    const double attn_params = 2.0 * h * a * d + 2.0 * h * g * d;            // Q, O + K, V
    const double mats = m.activation == Activation::swiglu ? 3.0 : 2.0;
    const double k = m.experts > 1 ? m.top_k : 1;
    const double mlp_params = k * mats * h * F + (m.experts > 1 ? h * m.experts : 0.0);
    const double layer_params = attn_params + mlp_params;
    f.params_matmul = m.layers * layer_params + vocab_padded * h;
    // Attention scores: QKᵀ and softmax·V, 2 FLOPs per multiply-add, ×3 for fwd + bwd:
    // 12·L·a·d·s per token with every score counted (PaLM), half for causal masking.
    double attn = 12.0 * m.layers * a * d * m.seq_len;
    if (convention == AttentionFlops::causal) attn *= 0.5;
    f.attention_per_token = attn;
    f.model_per_token = 6.0 * f.params_matmul + attn;
    double extra = 0;
    if (recompute == Recompute::full) extra = 2.0 * m.layers * layer_params + attn / 3.0;
    // Selective recomputes the core attention forward. Flash kernels also recompute scores in
    // their backward, but that is the kernel's own cost, not a recompute pass.
    else if (recompute == Recompute::selective) extra = attn / 3.0;
    f.hardware_per_token = f.model_per_token + extra;
    return f;
}

namespace est {

double gemm_time(double peak, double m, double n, double k) {
    if (m <= 0 || n <= 0 || k <= 0) return 0;
    return 2.0 * m * n * k / (peak * gemm_efficiency(m, n, k));
}

// shape-dependent efficiency, attention core, and memory-bound element-wise work.
LayerTime layer_forward_time(const LayoutDerived& L) {
    LayerTime lt;
    const double T = L.tokens, h = L.h, d = L.d, hd = L.heads_l * d, kvd = L.kv_l * d;
    lt.gemm += gemm_time(L.peak, T, hd + 2 * kvd, h);  // QKV
    lt.gemm += gemm_time(L.peak, T, h, hd);            // output projection
    const double mats_in = L.swiglu ? 2.0 : 1.0;
    if (L.moe) {
        const double k = L.m->top_k, experts_l = (double)L.m->experts / L.ep;
        const double per_expert_tokens = T * k * L.ep / L.m->experts;  // balanced routing
        lt.gemm += experts_l * (gemm_time(L.peak, per_expert_tokens, mats_in * L.f_l, h) +
                                gemm_time(L.peak, per_expert_tokens, h, L.f_l));
        lt.gemm += gemm_time(L.peak, T, L.m->experts, h);  // router
    } else {
        lt.gemm += gemm_time(L.peak, T, mats_in * L.f_l, h);
        lt.gemm += gemm_time(L.peak, T, h, L.f_l);
    }
    // Attention core: QKᵀ and PV per head; queries are local (s / cp), keys span s.
    const double s_keys = L.s_local * L.c;
    const double core_flops = 4.0 * L.b * L.heads_l * L.s_local * s_keys * d;
    if (L.flash) {
        // Flash kernels skip fully masked blocks: half the scores are computed.
        lt.attn = 0.5 * core_flops / (L.peak * g_cal.flash_eff);
        lt.attn_bwd = 2.5 * lt.attn;  // five GEMMs in the backward vs two forward
    } else {
        const double eff = gemm_efficiency(L.s_local, s_keys, d);
        const double scores = L.b * L.heads_l * L.s_local * s_keys;
        // Scale + mask + softmax (+ dropout) read and write the score tensor.
        lt.attn = core_flops / (L.peak * eff) + (L.dropout ? 6.0 : 4.0) * L.e * scores / L.hbm;
        lt.attn_bwd = 2.0 * lt.attn;
    }
    // Element-wise: two norms, two residual adds, bias/activation, dropout — about 16 reads or
    // writes of a hidden-sized tensor and 3 of the MLP-sized one (4 for SwiGLU).
    const double r = L.sp ? 1.0 / L.t : 1.0;
    lt.elem = L.e * T * (16.0 * h * r + (L.swiglu ? 4.0 : 3.0) * L.f_l * (L.moe ? L.m->top_k : 1)) / L.hbm;
    return lt;
}

// One micro-batch's forward and backward blocks through `layers` layers on one rank

void block_compute(const LayoutDerived& L, const LayerTime& lt, double layers, bool first, bool last, ChunkTime& c) {
    BlockTime &F = c.fwd, &B = c.bwd;
    const double T = L.tokens;
    F.compute = layers * (lt.gemm + lt.attn + lt.elem);
    B.compute = layers * (2.0 * lt.gemm + lt.attn_bwd + 2.0 * lt.elem);
    B.wgrad = layers * lt.gemm;  // zb: of the two backward GEMMs per forward one, the weight gradient
    if (L.rc == Recompute::full) B.recompute = F.compute;
    else if (L.rc == Recompute::selective) B.recompute = layers * lt.attn;  // core attention forward again
    if (last) {
        const double logits = gemm_time(L.peak, T, L.vocab / L.t, L.h);
        const double ce = 3.0 * 4.0 * T * L.vocab / L.t / L.hbm;  // softmax + loss, fp32
        F.compute += logits + ce;
        B.compute += 2.0 * logits + ce;
        B.wgrad += logits;
    }
    if (first) F.compute += L.e * T * L.h / L.hbm;  // embedding gather
}

}  // namespace est
}  // namespace ptd
