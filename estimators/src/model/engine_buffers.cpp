// engine_buffers.cpp — the bundled ptd-engine's own activation and workspace buffers, as a
// typed list. The engine allocates exactly this list at start-up (engine/src), and the
// estimator's ptd-engine activation profile sums it, so predicted memory equals what the
// engine holds.
#include "model/estimate_internal.h"

#include <algorithm>

namespace ptd {

// ---- ptd-engine buffers -------------------------------------------------------------------
// The engine (no dropout; flash attention or the materialised probabilities) saves exactly these per layer and
// micro-batch on one TP rank; `hr` marks tensors outside the TP region (sharded by t with
// sequence parallelism). The engine allocates from this list: in the activation dtype
// (fp32, or bf16/fp16 in mixed precision), except the norm statistics and the logits of
// the cross entropy, which are fp32 in every precision (as Megatron keeps them).

const char* engine_buffer_name(EngineBufferId id) {
    switch (id) {
    case EngineBufferId::ln1_input: return "ln1.input";
    case EngineBufferId::ln1_rstd: return "ln1.rstd";
    case EngineBufferId::ln1_mean: return "ln1.mean";
    case EngineBufferId::ln1_output: return "ln1.output";
    case EngineBufferId::attn_qkv: return "attn.qkv";
    case EngineBufferId::attn_probs: return "attn.probs";
    case EngineBufferId::attn_lse: return "attn.lse";
    case EngineBufferId::attn_context: return "attn.context";
    case EngineBufferId::ln2_input: return "ln2.input";
    case EngineBufferId::ln2_rstd: return "ln2.rstd";
    case EngineBufferId::ln2_mean: return "ln2.mean";
    case EngineBufferId::ln2_output: return "ln2.output";
    case EngineBufferId::moe_router_probs: return "moe.router_probs";
    case EngineBufferId::mlp_gate: return "mlp.gate";
    case EngineBufferId::mlp_up: return "mlp.up";
    case EngineBufferId::mlp_fc1: return "mlp.fc1";
    case EngineBufferId::mlp_act: return "mlp.act";
    case EngineBufferId::tokens_input: return "tokens.input";
    case EngineBufferId::final_norm_input: return "final_norm.input";
    case EngineBufferId::final_norm_rstd: return "final_norm.rstd";
    case EngineBufferId::final_norm_mean: return "final_norm.mean";
    case EngineBufferId::final_norm_output: return "final_norm.output";
    case EngineBufferId::logits_probs: return "logits.probs";
    case EngineBufferId::tokens_targets: return "tokens.targets";
    case EngineBufferId::ws_full_rows: return "workspace.full_rows";
    case EngineBufferId::ws_d_residual: return "workspace.d_residual";
    case EngineBufferId::ws_d_norm_output: return "workspace.d_norm_output";
    case EngineBufferId::ws_dqkv: return "workspace.dqkv";
    case EngineBufferId::ws_dctx: return "workspace.dctx";
    case EngineBufferId::ws_dact: return "workspace.dact";
    case EngineBufferId::ws_dfc1: return "workspace.dfc1";
    case EngineBufferId::ws_dfc3: return "workspace.dfc3";
    case EngineBufferId::ws_attention_backward: return "workspace.attention_backward";
    case EngineBufferId::ws_rope_table: return "workspace.rope_table";
    case EngineBufferId::ws_loss: return "workspace.loss";
    case EngineBufferId::ws_xent: return "workspace.xent";
    case EngineBufferId::ws_embedding: return "workspace.embedding";
    case EngineBufferId::ws_tokens_staging: return "workspace.tokens_staging";
    case EngineBufferId::ws_operand_scratch: return "workspace.operand_scratch";
    }
    return "?";
}

int64_t engine_dtype_bytes(EngineDType t) {
    switch (t) {
    case EngineDType::f32: return 4;
    case EngineDType::bf16: return 2;
    case EngineDType::f16: return 2;
    case EngineDType::i32: return 4;
    }
    return 4;
}

const char* engine_dtype_name(EngineDType t) {
    switch (t) {
    case EngineDType::f32: return "f32";
    case EngineDType::bf16: return "bf16";
    case EngineDType::f16: return "f16";
    case EngineDType::i32: return "i32";
    }
    return "?";
}

EngineDType engine_activation_dtype(Precision p) {
    switch (p) {
    case Precision::fp32: return EngineDType::f32;
    case Precision::bf16: return EngineDType::bf16;
    case Precision::fp16: return EngineDType::f16;
    }
    return EngineDType::f32;
}

namespace {

// Every buffer one layer's forward writes and its backward reads, in allocation order.
std::vector<EngineBuffer> engine_layer_all(const ModelSpec& m, int micro_batch, int seq, int tp,
                                           bool sequence_parallel, EngineDType act, bool flash) {
    using Id = EngineBufferId;
    const int64_t b = micro_batch, s = seq, h = m.hidden, d = m.head_dim();
    const int64_t heads_l = m.heads / tp;
    const int64_t kv_l = m.kv_heads >= tp ? m.kv_heads / tp : 1;
    const int64_t f_l = (int64_t)m.ffn_hidden / tp;
    const int64_t k = m.experts > 1 ? m.top_k : 1;
    const int64_t hr = sequence_parallel ? h / tp : h;  // residual stream slice
    const bool ln = m.norm == Norm::layernorm;
    std::vector<EngineBuffer> v;
    auto add = [&](Id id, int64_t n, EngineDType t) { v.push_back({id, n, t}); };
    const EngineDType f32 = EngineDType::f32;  // norm statistics: f32 in every precision
    add(Id::ln1_input, b * s * hr, act);
    add(Id::ln1_rstd, b * s, f32);
    if (ln) add(Id::ln1_mean, b * s, f32);
    add(Id::ln1_output, b * s * h, act);
    add(Id::attn_qkv, b * s * (heads_l + 2 * kv_l) * d, act);  // one GEMM: q, k, v column blocks
    if (flash) add(Id::attn_lse, b * heads_l * s, f32);  // log-sum-exp per query row (FlashAttention-2)
    else add(Id::attn_probs, b * heads_l * s * s, act);
    add(Id::attn_context, b * s * heads_l * d, act);
    add(Id::ln2_input, b * s * hr, act);
    add(Id::ln2_rstd, b * s, f32);
    if (ln) add(Id::ln2_mean, b * s, f32);
    add(Id::ln2_output, b * s * h, act);
    if (m.experts > 1) add(Id::moe_router_probs, b * s * m.experts, act);
    if (m.activation == Activation::swiglu) {
        add(Id::mlp_gate, k * b * s * f_l, act);
        add(Id::mlp_up, k * b * s * f_l, act);
    } else {
        add(Id::mlp_fc1, k * b * s * f_l, act);
    }
    add(Id::mlp_act, k * b * s * f_l, act);
    return v;
}

// Whether buffer `id` is rebuilt by the recomputation `rc` (rather than kept).
bool engine_recomputed(EngineBufferId id, Recompute rc) {
    switch (rc) {
    case Recompute::none: return false;
    case Recompute::selective:  // the attention core
        return id == EngineBufferId::attn_probs || id == EngineBufferId::attn_lse;
    case Recompute::full: return id != EngineBufferId::ln1_input;        // all but the layer input
    }
    return false;
}

}  // namespace

std::vector<EngineBuffer> engine_layer_buffers(const ModelSpec& m, int micro_batch, int seq, int tp,
                                               bool sequence_parallel, Recompute rc, EngineDType act, bool flash) {
    std::vector<EngineBuffer> v;
    for (const EngineBuffer& x : engine_layer_all(m, micro_batch, seq, tp, sequence_parallel, act, flash))
        if (!engine_recomputed(x.id, rc)) v.push_back(x);
    return v;
}

std::vector<EngineBuffer> engine_recompute_buffers(const ModelSpec& m, int micro_batch, int seq, int tp,
                                                   bool sequence_parallel, Recompute rc, EngineDType act, bool flash) {
    std::vector<EngineBuffer> v;
    for (const EngineBuffer& x : engine_layer_all(m, micro_batch, seq, tp, sequence_parallel, act, flash))
        if (engine_recomputed(x.id, rc)) v.push_back(x);
    return v;
}

std::vector<EngineBuffer> engine_input_buffers(int micro_batch, int seq) {
    return {{EngineBufferId::tokens_input, (int64_t)micro_batch * seq, EngineDType::i32}};
}

std::vector<EngineBuffer> engine_workspace_buffers(const ModelSpec& m, int micro_batch, int seq, int tp,
                                                   bool sequence_parallel, bool first, bool last, bool has_layers,
                                                   int64_t attention_scratch, EngineDType act,
                                                   int64_t operand_scratch) {
    using Id = EngineBufferId;
    const int64_t R = (int64_t)micro_batch * seq, h = m.hidden, d = m.head_dim();
    const int64_t Rl = sequence_parallel ? R / tp : R;
    const int64_t HD = m.heads / tp * d, GD = (m.kv_heads >= tp ? m.kv_heads / tp : 1) * d;
    const int64_t F = (int64_t)m.ffn_hidden / tp;
    std::vector<EngineBuffer> v;
    auto add = [&](Id id, int64_t n, EngineDType t) { v.push_back({id, n, t}); };
    add(Id::ws_full_rows, R * h, act);
    add(Id::ws_d_residual, Rl * h, act);
    add(Id::ws_d_norm_output, R * h, act);
    if (has_layers) {
        add(Id::ws_dqkv, R * (HD + 2 * GD), act);
        add(Id::ws_dctx, R * HD, act);
        add(Id::ws_dact, R * F, act);
        add(Id::ws_dfc1, R * F, act);
        if (m.activation == Activation::swiglu) add(Id::ws_dfc3, R * F, act);
        add(Id::ws_attention_backward, attention_scratch, EngineDType::f32);
        if (m.position == Position::rope) add(Id::ws_rope_table, seq * d, EngineDType::f32);
    }
    if (last) {
        add(Id::ws_loss, R, EngineDType::f32);      // the loss in fp32
        // Row max, Σexp, target logit between the TP all-reduces; tp = 1 runs the fused
        // cross entropy, which keeps them in registers.
        if (tp > 1) add(Id::ws_xent, 3 * R, EngineDType::f32);
    }
    if (first && sequence_parallel && tp > 1) add(Id::ws_embedding, R * h, act);
    if (first || last) add(Id::ws_tokens_staging, (int64_t)micro_batch * (seq + 1), EngineDType::i32);
    if (operand_scratch > 0) add(Id::ws_operand_scratch, operand_scratch, EngineDType::f32);
    return v;
}

std::vector<EngineBuffer> engine_output_buffers(const ModelSpec& m, int micro_batch, int seq, int tp,
                                                int vocab_padded, bool sequence_parallel, EngineDType act) {
    using Id = EngineBufferId;
    const int64_t b = micro_batch, s = seq, h = m.hidden;
    const int64_t hr = sequence_parallel ? h / tp : h;
    std::vector<EngineBuffer> v;
    v.push_back({Id::final_norm_input, b * s * hr, act});
    v.push_back({Id::final_norm_rstd, b * s, EngineDType::f32});
    if (m.norm == Norm::layernorm) v.push_back({Id::final_norm_mean, b * s, EngineDType::f32});
    v.push_back({Id::final_norm_output, b * s * h, act});
    v.push_back({Id::logits_probs, b * s * (int64_t)vocab_padded / tp, EngineDType::f32});  // f32 softmax and loss
    v.push_back({Id::tokens_targets, b * s, EngineDType::i32});
    return v;
}

namespace est {
double engine_buffers_bytes(const std::vector<EngineBuffer>& list) {
    double total = 0;
    for (const EngineBuffer& x : list) total += (double)x.bytes();
    return total;
}
}  // namespace est

}  // namespace ptd
