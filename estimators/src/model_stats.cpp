// model_stats.cpp — parameter counting, part by part.
#include "ptd/model_stats.h"

namespace ptd {

ParamCounts count_parameters(const ModelSpec& m) {
    ParamCounts c;
    const int64_t h = m.hidden, V = m.vocab, f = m.ffn_hidden;
    const int64_t kv = (int64_t)m.kv_heads * m.head_dim();  // K (or V) projection width

    c.embedding = V * h + (m.position == Position::learned ? (int64_t)m.seq_len * h : 0);
    c.output = m.tied_embeddings ? 0 : V * h;

    // Attention: Q and O are h×h, K and V are h×kv. Biases: all four with `bias`, only Q/K/V
    // with `qkv_bias`.
    c.attention = 2 * h * h + 2 * h * kv;
    if (m.bias) c.attention += h + 2 * kv + h;
    else if (m.qkv_bias) c.attention += h + 2 * kv;

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

    const int64_t norm = m.norm == Norm::layernorm ? 2 * h : h;  // weight (+ bias)
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
    return c;
}

}  // namespace ptd
