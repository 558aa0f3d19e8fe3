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

    // One expert's MLP: GELU has up (h→f) and down (f→h); SwiGLU has gate and up (h→f) and down.
    int64_t expert = (m.activation == Activation::swiglu ? 3 : 2) * h * f;
    if (m.bias) expert += (m.activation == Activation::swiglu ? 2 * f : f) + h;
    const int64_t experts = m.experts > 1 ? m.experts : 1;
    const int64_t router = m.experts > 1 ? h * m.experts : 0;
    c.mlp = experts * expert + router;
    c.mlp_active = (m.experts > 1 ? (int64_t)m.top_k : 1) * expert + router;

    const int64_t norm = m.norm == Norm::layernorm ? 2 * h : h;  // weight (+ bias)
    c.norms = 2 * norm;
    c.final_norm = norm;

    c.per_layer = c.attention + c.mlp + c.norms;
    c.total = c.embedding + c.output + m.layers * c.per_layer + c.final_norm;
    c.non_embedding = c.total - c.embedding - c.output;
    c.active = c.embedding + c.output + m.layers * (c.attention + c.mlp_active + c.norms) + c.final_norm;
    return c;
}

}  // namespace ptd
