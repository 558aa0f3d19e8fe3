// model_stats.cpp — parameter counting, part by part.
#include "ptd/model/model_stats.h"

#include <algorithm>

namespace ptd {

ParamCounts count_parameters(const ModelSpec& m) {
    ParamCounts c;
    const int64_t h = m.hidden, V = m.vocab, f = m.ffn_hidden;
    const int64_t kv = (int64_t)m.kv_heads * m.head_dim();  // K (or V) projection width

    c.embedding = V * h + (m.position == Position::learned ? (int64_t)m.seq_len * h : 0);
    c.output = m.tied_embeddings ? 0 : V * h;

    // Attention: Q and O are h × a·d, K and V are h×kv (mla: a·d ≠ h when head_dim is given,
    // e.g. Qwen3-32B: 5120 × 64·128). Biases: all four with `bias`, only Q/K/V with `qkv_bias`.
    const int64_t ad = (int64_t)m.heads * m.head_dim();
    c.attention = 2 * h * ad + 2 * h * kv;
    if (m.bias) c.attention += ad + 2 * kv + h;
    else if (m.qkv_bias) c.attention += ad + 2 * kv;
    const int64_t norm_w = m.norm == Norm::layernorm ? 2 : 1;  // weight (+ bias) per element
    // mla: Qwen3's q_norm / k_norm (Megatron --qk-layernorm: TENorm over one head's width, shared
    // by the heads): 2·d weights.
    if (m.qk_layernorm && !m.mla()) c.attention += 2 * norm_w * m.head_dim();
    if (m.mla()) {
        // mla: multi-head latent attention (DeepSeek-V2 §2.1; Megatron-core MLASelfAttention;
        // HF deepseek_v3 q_a_proj, q_a_layernorm, q_b_proj, kv_a_proj_with_mqa,
        // kv_a_layernorm, kv_b_proj, o_proj): q_down h × q_lora, its norm, q_up
        // q_lora × a·(d + dr) (or q_proj h × a·(d + dr)); kv_down h × (kv_lora + dr), its norm,
        // kv_up kv_lora × a·(d + dv); out a·dv × h. No biases.
        const int64_t a = m.heads, d = m.head_dim(), dr = m.qk_rope_head_dim;
        const int64_t dv = m.v_head_dim > 0 ? m.v_head_dim : d, ql = m.q_lora_rank, kl = m.kv_lora_rank;
        c.attention = (ql > 0 ? h * ql + norm_w * ql + ql * a * (d + dr) : h * a * (d + dr)) + h * (kl + dr) +
                      norm_w * kl + kl * a * (d + dv) + a * dv * h;
    }

    // One MLP of width w: GELU has up (h→w) and down (w→h); SwiGLU has gate and up (h→w) and down.
    auto mlp_of = [&](int64_t w) {
        int64_t n = (m.activation == Activation::swiglu ? 3 : 2) * h * w;
        if (m.bias) n += (m.activation == Activation::swiglu ? 2 * w : w) + h;
        return n;
    };
    // moe2: routed experts have model.moe_ffn_hidden (expert_ffn_hidden), the shared experts
    // shared_expert_ffn_hidden (one MLP of that width, Megatron-core SharedExpertMLP), the first
    // first_dense_layers layers a dense MLP of ffn_hidden.
    const bool moe = m.experts > 1;
    const int64_t expert = mlp_of(moe ? m.expert_ffn_hidden() : f);
    const int64_t experts = moe ? m.experts : 1;
    const int64_t router = moe ? h * m.experts : 0;
    c.shared_expert = moe && m.shared_expert_ffn_hidden > 0 ? mlp_of(m.shared_expert_ffn_hidden) : 0;
    c.mlp = experts * expert + router + c.shared_expert;
    c.mlp_active = (moe ? (int64_t)m.top_k : 1) * expert + router + c.shared_expert;
    c.dense_mlp = mlp_of(f);
    c.moe_layers = moe ? m.layers - m.first_dense_layers : 0;
    const int64_t dense_layers = m.layers - c.moe_layers;

    const int64_t norm = norm_w * h;  // weight (+ bias)
    c.norms = 2 * norm;
    c.final_norm = norm;

    c.per_layer = c.attention + c.mlp + c.norms;
    // moe2: a dense model's layers are all dense (dense_mlp = mlp); a MoE model's first
    // first_dense_layers are.
    const int64_t dense_layer = c.attention + (moe ? c.dense_mlp : c.mlp) + c.norms;
    c.total = c.embedding + c.output + c.moe_layers * c.per_layer + dense_layers * dense_layer + c.final_norm;
    c.non_embedding = c.total - c.embedding - c.output;
    c.active = c.embedding + c.output + c.moe_layers * (c.attention + c.mlp_active + c.norms) +
               dense_layers * dense_layer + c.final_norm;
    // mla: each MTP module (DeepSeek-V3 §2.2; Megatron-core MultiTokenPredictionLayer): enorm,
    // hnorm, eh_proj 2h × h (no bias), one transformer layer of the model's last kind and its
    // final norm; embedding and output head are the main model's (not counted again).
    if (m.mtp_layers > 0) {
        const bool last_moe = c.moe_layers > 0;
        const int64_t last_layer = last_moe ? c.per_layer : dense_layer;
        c.mtp = (int64_t)m.mtp_layers * (2 * norm + 2 * h * h + last_layer + norm);
        c.mtp_active = (int64_t)m.mtp_layers * (2 * norm + 2 * h * h + norm +
                                                (last_moe ? c.attention + c.mlp_active + c.norms : dense_layer));
    }
    return c;
}

}  // namespace ptd
