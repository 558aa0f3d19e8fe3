// estimate.cpp — memory per rank per pipeline stage, FLOPs per token, and the time of one
// iteration. One function (evaluate_stage) computes a stage's memory and per-micro-batch
// time from closed-form terms; evaluate_layout runs it over the stages that matter and
// combines them with the pipeline schedule. No allocation on the planner's path.
// Every term is written out in docs/estimators.md with its source.
#include "ptd/estimate.h"

#include "ptd/timeline.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <cstring>

namespace ptd {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

TimeModelConstants g_cal;

}  // namespace

// Each GEMM dimension d contributes d / (d + d0): under-filled tiles, wave quantisation and
// memory-bound small shapes all bite on the smallest dimension.
double gemm_efficiency(double m, double n, double k) {
    const double d0 = g_cal.gemm_half_dim;
    return g_cal.gemm_eff_max * (m / (m + d0)) * (n / (n + d0)) * (k / (k + d0));
}
TimeModelConstants& time_model_constants() { return g_cal; }

namespace {

inline double gemm_time(double peak, double m, double n, double k) {
    if (m <= 0 || n <= 0 || k <= 0) return 0;
    return 2.0 * m * n * k / (peak * gemm_efficiency(m, n, k));
}

// Does a group of `n` ranks with rank stride `stride` cross a node boundary?
inline bool spans_nodes(int stride, int n, int gpus_per_node) {
    if (n <= 1) return false;
    long long span = (long long)stride * n;
    return span > gpus_per_node || gpus_per_node % span != 0;
}

// Strides of tp, cp, ep, dp, pp from an order string (fastest first). Names not written
// are appended in Megatron's default order. Cheap: no allocation.
struct Strides {
    int tp = 1, cp = 1, ep = 1, dp = 1, pp = 1;
};
Strides order_strides(const char* order, int tp, int cp, int ep, int dp, int pp) {
    // The ep block lives inside dp: expert groups vary ep fastest within the dp·cp block
    // when ep is written before dp (the Megatron default).
    const char* names[5] = {"tp", "cp", "ep", "dp", "pp"};
    int sizes[5] = {tp, cp, 1, dp, pp};  // ep shares the dp dimension for dense ranks
    int seen[5] = {0, 0, 0, 0, 0};
    int seq[5];
    int count = 0;
    for (const char* p = order; *p && count < 5;) {
        const char* dash = std::strchr(p, '-');
        size_t len = dash ? (size_t)(dash - p) : std::strlen(p);
        for (int i = 0; i < 5; ++i)
            if (!seen[i] && len == 2 && std::strncmp(p, names[i], 2) == 0) {
                seen[i] = 1;
                seq[count++] = i;
            }
        if (!dash) break;
        p = dash + 1;
    }
    for (int i = 0; i < 5; ++i)
        if (!seen[i]) seq[count++] = i;
    Strides s;
    int stride = 1;
    int* out[5] = {&s.tp, &s.cp, &s.ep, &s.dp, &s.pp};
    for (int j = 0; j < 5; ++j) {
        int i = seq[j];
        *out[i] = stride;
        stride *= sizes[i];
    }
    // Expert-parallel ranks are consecutive data-parallel ranks (ep varies fastest inside dp).
    s.ep = s.dp;
    return s;
}

// Everything one evaluation needs, derived from the context + layout once.
struct LayoutDerived {
    const ModelSpec* m;
    int t, p, v, c, ep, dp, b, mbs;      // mbs = micro-batches per replica per step
    double s_local;                      // sequence per rank (s / cp)
    double tokens;                       // b · s_local
    double e;                            // activation bytes per element
    double vocab;                        // padded vocab
    double heads_l, kv_l, d, h, f_l;     // local heads, local KV heads, head dim, hidden, local MLP width
    bool sp, flash, dropout, swiglu, moe, layernorm, cpu;
    bool optimizer_sharded;              // ZeRO ≥ 1 or Megatron's distributed optimizer
    int zero;                            // ZeRO stage
    Recompute rc;
    StateBytes dense_state, expert_state;
    // Per-layer parameters on one rank.
    double layer_dense_params, layer_expert_params;
    double embed_params, output_params, final_norm_params;
    // Bandwidths (bytes/s, after efficiency) and latencies per group.
    double bw_tp, bw_cp, bw_ep, bw_dp, bw_edp, bw_pp, lat_tp, lat_cp, lat_ep, lat_dp, lat_edp, lat_pp;
    double peak, hbm;
    int nccl_groups;                     // communicators with > 1 rank (excluding the embedding group)
    int edp;                             // expert data-parallel size (dp·cp/ep)
};

double engine_buffers_bytes(const std::vector<EngineBuffer>& list) {
    double total = 0;
    for (const EngineBuffer& x : list) total += (double)x.bytes();
    return total;
}

}  // namespace

// ---- small formulas -----------------------------------------------------------------------

int64_t engine_flat_buffer_elements(int64_t params, int zero, int dp) {
    if (zero < 1 || dp <= 1) return params;
    const int64_t mult = kEngineShardAlign * dp;
    return (params + mult - 1) / mult * mult;
}

int64_t padded_vocab(int64_t vocab, int vocab_pad, int tp) {
    const int64_t mult = (int64_t)std::max(vocab_pad, 1) * std::max(tp, 1);
    return (vocab + mult - 1) / mult * mult;
}

StateBytes state_bytes_per_param(Precision precision, Optimizer optimizer, int zero, bool distributed_optimizer,
                                 double shard) {
    const double N = std::max(shard, 1.0);
    const double moments = optimizer == Optimizer::sgd ? 4.0 : 8.0;  // momentum, or Adam m + v
    StateBytes b;
    if (precision == Precision::fp32) {
        // fp32 weights and grads; no master copy.
        b.params = zero >= 3 ? 4.0 / N : 4.0;
        b.grads = zero >= 2 ? 4.0 / N : 4.0;
        b.optimizer = (zero >= 1 || distributed_optimizer) ? moments / N : moments;
        return b;
    }
    if (zero == 0) {
        // Megatron-LM: bf16 keeps an fp32 main-grad buffer (grads 4 bytes, never sharded);
        // fp16 keeps fp16 grads plus an fp32 copy in the optimizer (docs/distrib_optimizer).
        const bool bf16 = precision == Precision::bf16;
        b.params = 2.0;
        b.grads = bf16 ? 4.0 : 2.0;
        const double opt = 4.0 + moments + (bf16 ? 0.0 : 4.0);  // master (+ fp32 grads for fp16)
        b.optimizer = distributed_optimizer ? opt / N : opt;
        return b;
    }
    // DeepSpeed ZeRO (Rajbhandari et al. 2020): 2 + 2 + K with K = 12 for Adam.
    b.params = zero >= 3 ? 2.0 / N : 2.0;
    b.grads = zero >= 2 ? 2.0 / N : 2.0;
    b.optimizer = (4.0 + moments) / N;
    return b;
}

std::vector<int> balanced_layers_per_stage(int layers, int pp) {
    std::vector<int> out((size_t)std::max(pp, 1), layers / std::max(pp, 1));
    int extra = layers % std::max(pp, 1);
    // The first stage holds the most in-flight micro-batches; give the remainder to the next ones.
    for (int i = 1; i < pp && extra > 0; ++i, --extra) ++out[(size_t)i];
    if (extra > 0) ++out[0];  // only when pp == 1
    return out;
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

// ---- ptd-engine buffers -------------------------------------------------------------------
// The engine (no dropout, no flash attention) saves exactly these per layer and
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
    case EngineBufferId::ws_d_norm_input: return "workspace.d_norm_input";
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
                                           bool sequence_parallel, EngineDType act) {
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
    add(Id::attn_probs, b * heads_l * s * s, act);
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
    case Recompute::selective: return id == EngineBufferId::attn_probs;  // the attention core
    case Recompute::full: return id != EngineBufferId::ln1_input;        // all but the layer input
    }
    return false;
}

}  // namespace

std::vector<EngineBuffer> engine_layer_buffers(const ModelSpec& m, int micro_batch, int seq, int tp,
                                               bool sequence_parallel, Recompute rc, EngineDType act) {
    std::vector<EngineBuffer> v;
    for (const EngineBuffer& x : engine_layer_all(m, micro_batch, seq, tp, sequence_parallel, act))
        if (!engine_recomputed(x.id, rc)) v.push_back(x);
    return v;
}

std::vector<EngineBuffer> engine_recompute_buffers(const ModelSpec& m, int micro_batch, int seq, int tp,
                                                   bool sequence_parallel, Recompute rc, EngineDType act) {
    std::vector<EngineBuffer> v;
    for (const EngineBuffer& x : engine_layer_all(m, micro_batch, seq, tp, sequence_parallel, act))
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
    add(Id::ws_d_norm_input, Rl * h, act);
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

// ---- activations --------------------------------------------------------------------------

namespace {

// Bytes one layer saves for backward, one micro-batch, one rank, recompute = none unless
// the profile says otherwise. Megatron profile: Korthikanti et al. 2022 §4, generalised.
double layer_activation_megatron(const LayoutDerived& L, Recompute rc) {
    const double T = L.tokens, e = L.e, h = L.h;
    const double r = L.sp ? 1.0 / L.t : 1.0;  // outside the TP region: sharded only with SP
    const double hd = L.heads_l * L.d, kvd = L.kv_l * L.d;
    const double s = L.s_local * L.c;          // keys span the whole sequence (CP ring)
    if (rc == Recompute::full) return e * T * h * r;  // the layer input only
    double bytes = 0;
    // Attention block: LN1 input and output, Q, K, V, context (input of the output projection).
    bytes += 2 * e * T * h * r;
    bytes += e * T * (hd + 2 * kvd) + e * T * hd;
    if (L.dropout) bytes += T * h * r;  // attention-output dropout mask (1 byte)
    if (rc == Recompute::selective) {
        // Core attention is recomputed from Q, K, V: nothing of it is kept.
    } else if (L.flash) {
        bytes += 4.0 * T * L.heads_l;  // fp32 log-sum-exp per query row and head
    } else {
        const double scores = L.heads_l * L.tokens * s;  // b · a/t · s_local · s
        bytes += e * scores;                        // softmax output
        if (L.dropout) bytes += scores + e * scores;  // dropout mask + dropout output
    }
    // MLP block: LN2 input and output, FC1 output(s), activation output.
    bytes += 2 * e * T * h * r;
    if (L.dropout) bytes += T * h * r;
    if (L.moe) {
        const double k = L.m->top_k;
        bytes += 4.0 * T * r * L.m->experts;           // router probabilities (fp32)
        bytes += e * T * k * h;                        // permuted tokens (expert inputs)
        bytes += e * T * k * L.f_l * (L.swiglu ? 3.0 : 2.0);
    } else {
        bytes += e * T * L.f_l * (L.swiglu ? 3.0 : 2.0);  // FC1 out (gate + up for SwiGLU) + activation
    }
    return bytes;
}

}  // namespace

double layer_activation_bytes(const ActivationInputs& in) {
    const ModelSpec& m = *in.model;
    const double e = in.precision == Precision::fp32 ? 4.0 : 2.0;
    if (in.profile == ActivationProfile::ptd_engine)
        return engine_buffers_bytes(engine_layer_buffers(m, in.micro_batch, in.seq, in.tp, in.sequence_parallel,
                                                         in.recompute, engine_activation_dtype(in.precision)));
    LayoutDerived L{};
    L.m = &m;
    L.t = in.tp;
    L.c = 1;
    L.ep = in.ep;
    L.b = in.micro_batch;
    L.s_local = in.seq;
    L.tokens = (double)in.micro_batch * in.seq;
    L.e = e;
    L.h = m.hidden;
    L.d = m.head_dim();
    L.heads_l = (double)m.heads / in.tp;
    L.kv_l = m.kv_heads >= in.tp ? (double)m.kv_heads / in.tp : 1.0;
    L.f_l = (double)m.ffn_hidden / in.tp;
    L.sp = in.sequence_parallel && in.tp > 1;
    L.flash = in.flash_attention;
    L.dropout = m.arch == Arch::gpt;
    L.swiglu = m.activation == Activation::swiglu;
    L.moe = m.experts > 1;
    L.rc = in.recompute;
    return layer_activation_megatron(L, in.recompute);
}

// ---- context and one stage ------------------------------------------------------------------

EstimateContext make_estimate_context(const JobSpec& job) {
    EstimateContext ctx;
    ctx.job = job;
    ctx.params = count_parameters(job.model);
    ctx.peak_flops = job.cluster.gpu.peak_tflops(job.training.precision) * 1e12;
    ctx.cpu_device = job.cluster.gpu.name == "cpu";
    return ctx;
}

LayoutChoice layout_choice_of(const JobSpec& job) {
    const ParallelSpec& p = job.parallel;
    LayoutChoice c;
    c.tp = p.tp;
    c.pp = p.pp;
    c.dp = p.dp;
    c.cp = p.cp;
    c.ep = p.ep;
    c.vpp = p.vpp;
    c.micro_batch = job.training.micro_batch;
    c.zero = p.zero;
    c.distributed_optimizer = p.distributed_optimizer;
    c.sequence_parallel = p.sequence_parallel;
    c.recompute = p.recompute;
    c.order = -1;
    for (int i = 0; i < kPlannerOrderCount; ++i)
        if (p.order == kPlannerOrders[i]) c.order = i;
    return c;
}

const char* layout_choice_order(const EstimateContext& ctx, const LayoutChoice& c) {
    if (c.order >= 0 && c.order < kPlannerOrderCount) return kPlannerOrders[c.order];
    return ctx.job.parallel.order.c_str();
}

namespace {

LayoutDerived derive(const EstimateContext& ctx, const LayoutChoice& ch) {
    const JobSpec& job = ctx.job;
    const ModelSpec& m = job.model;
    const ClusterSpec& cl = job.cluster;
    const EstimateSpec& es = job.estimate;
    LayoutDerived L{};
    L.m = &m;
    L.t = ch.tp;
    L.p = ch.pp;
    L.v = std::max(ch.vpp, 1);
    L.c = std::max(ch.cp, 1);
    L.ep = std::max(ch.ep, 1);
    L.dp = std::max(ch.dp, 1);
    L.b = ch.micro_batch;
    L.mbs = std::max(1, job.training.global_batch / std::max(1, ch.micro_batch * L.dp));
    L.s_local = (double)m.seq_len / L.c;
    L.tokens = L.b * L.s_local;
    L.e = job.training.precision == Precision::fp32 ? 4.0 : 2.0;
    L.vocab = (double)padded_vocab(m.vocab, es.vocab_pad, ch.tp);
    L.h = m.hidden;
    L.d = m.head_dim();
    L.heads_l = (double)m.heads / L.t;
    L.kv_l = m.kv_heads >= L.t ? (double)m.kv_heads / L.t : 1.0;  // GQA: replicated when t > g
    L.f_l = (double)m.ffn_hidden / L.t;
    L.sp = ch.sequence_parallel && L.t > 1;
    L.flash = job.training.flash_attention;
    L.dropout = m.arch == Arch::gpt;
    L.swiglu = m.activation == Activation::swiglu;
    L.moe = m.experts > 1;
    L.layernorm = m.norm == Norm::layernorm;
    L.cpu = ctx.cpu_device;
    L.rc = ch.recompute;
    L.edp = std::max(1, L.dp * L.c / L.ep);
    // Model states: dense parameters shard over dp·cp (Megatron's distributed optimizer and
    // ZeRO both use the data-parallel group incl. context parallel); experts over dp·cp/ep.
    L.dense_state = state_bytes_per_param(job.training.precision, job.training.optimizer, ch.zero,
                                          ch.distributed_optimizer, (double)L.dp * L.c);
    L.optimizer_sharded = ch.zero >= 1 || ch.distributed_optimizer;
    L.zero = ch.zero;
    L.expert_state = state_bytes_per_param(job.training.precision, job.training.optimizer, ch.zero,
                                           ch.distributed_optimizer, (double)L.edp);

    // Parameters of one layer on one TP rank.
    const double h = L.h, hd = L.heads_l * L.d, kvd = L.kv_l * L.d;
    double attn = h * hd * 2 + h * kvd * 2;
    if (m.bias) attn += hd + 2 * kvd + h;
    else if (m.qkv_bias) attn += hd + 2 * kvd;
    const double mats_in = L.swiglu ? 2.0 : 1.0;
    double expert = (mats_in + 1.0) * h * L.f_l;
    if (m.bias) expert += mats_in * L.f_l + h;
    const double norm = L.layernorm ? 2 * h : h;
    if (L.moe) {
        L.layer_dense_params = attn + 2 * norm + h * m.experts;  // router replicated
        L.layer_expert_params = expert * m.experts / L.ep;
    } else {
        L.layer_dense_params = attn + 2 * norm + expert;
        L.layer_expert_params = 0;
    }
    L.embed_params = L.vocab * h / L.t + (m.position == Position::learned ? (double)m.seq_len * h : 0.0);
    L.output_params = L.vocab * h / L.t;  // untied, or the tied copy on the last stage when p > 1
    L.final_norm_params = norm;

    // Which groups leave the node, from the rank order.
    const char* order = layout_choice_order(ctx, ch);
    Strides st = order_strides(order, L.t, L.c, L.ep, L.dp, L.p);
    const int gpn = cl.gpus_per_node;
    const double intra = (cl.intra_gbps > 0 ? cl.intra_gbps : cl.gpu.link_gbps) * 1e9 * g_cal.comm_eff;
    const double inter = cl.inter_gbps * 1e9 * g_cal.comm_eff;
    auto pick = [&](int stride, int n, double& bw, double& lat) {
        bool out = spans_nodes(stride, n, gpn);
        bw = out ? inter : intra;
        lat = out ? g_cal.latency_inter_s : g_cal.latency_intra_s;
    };
    pick(st.tp, L.t, L.bw_tp, L.lat_tp);
    pick(st.cp, L.c, L.bw_cp, L.lat_cp);
    pick(st.ep, L.ep, L.bw_ep, L.lat_ep);
    pick(st.dp, L.dp, L.bw_dp, L.lat_dp);
    // Dense gradients reduce over dp·cp (Megatron's data-parallel-with-context group): it
    // leaves the node when either of its two parts does.
    if (L.c > 1 && spans_nodes(st.cp, L.c, gpn)) L.bw_dp = inter, L.lat_dp = g_cal.latency_inter_s;
    pick(st.dp * L.ep, L.edp, L.bw_edp, L.lat_edp);
    pick(st.pp, L.p, L.bw_pp, L.lat_pp);
    L.peak = std::max(ctx.peak_flops, 1.0);
    L.hbm = std::max(cl.gpu.hbm_gbps, 1e-3) * 1e9 * g_cal.hbm_eff;
    L.nccl_groups = (L.t > 1) + (L.p > 1) + (L.dp > 1) + (L.c > 1) + (L.ep > 1) + (L.ep > 1 && L.edp > 1);
    return L;
}

// Micro-batches (chunks / v) whose activations stage i holds at the 1F1B peak.
// Non-interleaved: min(p − i, m). Interleaved (Megatron): warm-up chunks
// 2·(p − i − 1) + (v − 1)·p, plus the one being computed, at most m·v.
double in_flight_chunks(const LayoutDerived& L, int i) {
    if (L.v <= 1) return std::min(L.p - i, L.mbs);
    double chunks = 2.0 * (L.p - i - 1) + (double)(L.v - 1) * L.p + 1;
    return std::min(chunks, (double)L.mbs * L.v);
}

// Time of one collective moving `bytes` per rank over a ring of n ranks.
inline double all_reduce_time(double bytes, int n, double bw, double lat) {
    return n <= 1 ? 0 : 2.0 * bytes * (n - 1) / n / bw + lat;
}
inline double gather_time(double bytes, int n, double bw, double lat) {  // all-gather or reduce-scatter
    return n <= 1 ? 0 : bytes * (n - 1) / n / bw + lat;
}

// Forward time of one transformer layer on one rank for one micro-batch: GEMMs at the
// shape-dependent efficiency, attention core, and memory-bound element-wise work.
struct LayerTime {
    double gemm = 0, attn = 0, elem = 0;  // forward
    double attn_bwd = 0;                   // attention core backward
};
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
// (`first`: with the embedding, `last`: with the final norm, output layer and loss).
// Linear in layers, so a stage's chunks add up to the stage. p2p is one hop each way.
ChunkTime block_time(const LayoutDerived& L, const LayerTime& lt, double layers, bool first, bool last) {
    ChunkTime c;
    BlockTime &F = c.fwd, &B = c.bwd;
    const double T = L.tokens;
    F.compute = layers * (lt.gemm + lt.attn + lt.elem);
    B.compute = layers * (2.0 * lt.gemm + lt.attn_bwd + 2.0 * lt.elem);
    if (L.rc == Recompute::full) B.recompute = F.compute;
    else if (L.rc == Recompute::selective) B.recompute = layers * lt.attn;  // core attention forward again
    if (last) {
        const double logits = gemm_time(L.peak, T, L.vocab / L.t, L.h);
        const double ce = 3.0 * 4.0 * T * L.vocab / L.t / L.hbm;  // softmax + loss, fp32
        F.compute += logits + ce;
        B.compute += 2.0 * logits + ce;
    }
    if (first) F.compute += L.e * T * L.h / L.hbm;  // embedding gather
    // TP: two all-reduces per layer forward and two backward (all-gather + reduce-scatter with
    // SP: same volume); full recompute repeats the forward ones.
    if (L.t > 1) {
        const double msg = L.e * T * L.h;
        const double one = L.sp ? 2.0 * gather_time(msg, L.t, L.bw_tp, L.lat_tp) : all_reduce_time(msg, L.t, L.bw_tp, L.lat_tp);
        F.tp = layers * 2.0 * one;
        B.tp = layers * (2.0 + (L.rc == Recompute::full ? 2.0 : 0.0)) * one;
        if (first) F.tp += one;                       // vocab-parallel embedding
        if (last) F.tp += 3.0 * (L.lat_tp + 4.0 * T / L.bw_tp);  // cross-entropy max / sum / target
    }
    if (L.c > 1) {
        // Ring attention: K and V chunks travel c − 1 hops forward, dK and dV backward;
        // overlapped with the attention core, the excess is exposed.
        const double kv = 2.0 * L.e * T * L.kv_l * L.d;
        const double t_ring = (L.c - 1) * (kv / L.bw_cp + L.lat_cp);
        F.cp = layers * std::max(0.0, t_ring - lt.attn);
        B.cp = layers * std::max(0.0, 2.0 * t_ring - lt.attn_bwd);
    }
    if (L.moe && L.ep > 1) {
        const double tok = L.e * T * L.m->top_k * L.h;
        const double a2a = tok * (L.ep - 1) / L.ep / L.bw_ep + L.lat_ep;
        F.ep = layers * 2.0 * a2a;  // dispatch + combine, forward and backward
        B.ep = layers * 2.0 * a2a;
    }
    if (L.p > 1) {
        const double hop = L.e * T * L.h * (L.sp ? 1.0 / L.t : 1.0) / L.bw_pp + L.lat_pp;
        F.p2p = hop;  // the activation forward
        B.p2p = hop;  // the gradient backward
    }
    return c;
}

struct StageEval {
    MemoryBreakdown mem;
    double act_per_mb = 0, in_flight = 0, params = 0;
    double fwd = 0, bwd = 0, recompute = 0, tp = 0, cp = 0, ep = 0, p2p = 0;  // per micro-batch
    double dp_grad = 0, dp_param = 0;  // per iteration, before overlap
};

StageEval evaluate_stage(const EstimateContext& ctx, const LayoutDerived& L, const LayerTime& lt, int i,
                         int layers) {
    const EstimateSpec& es = ctx.job.estimate;
    const ModelSpec& m = *L.m;
    const bool first = i == 0, last = i == L.p - 1;
    StageEval S;

    // Parameters on this rank.
    double dense = layers * L.layer_dense_params;
    const double expert = layers * L.layer_expert_params;
    if (first) dense += L.embed_params;
    if (last) {
        dense += L.final_norm_params;
        if (!m.tied_embeddings || L.p > 1) dense += L.output_params;  // tied + p = 1 shares the embedding
    }
    S.params = dense + expert;
    S.mem.params = dense * L.dense_state.params + expert * L.expert_state.params;
    S.mem.grads = dense * L.dense_state.grads + expert * L.expert_state.grads;
    S.mem.optimizer = dense * L.dense_state.optimizer + expert * L.expert_state.optimizer;
    if (es.activation_profile == ActivationProfile::ptd_engine && expert == 0 && L.zero <= 1) {
        // What the engine runs (dense, ZeRO 0 or 1; Megatron's distributed optimizer maps to
        // ZeRO-1): a flat buffer padded for equal ZeRO-1 shards. fp32: the model state is
        // exactly that buffer (params, grads) and Adam m, v of one shard. bf16/fp16 (Megatron's
        // mixed precision): 16-bit params, fp32 main grads, and per optimizer element an fp32
        // master weight next to m and v, sharded like them.
        const int N = L.dp * L.c;
        const bool sharded = L.optimizer_sharded && N > 1;
        const double flat = (double)engine_flat_buffer_elements((int64_t)dense, sharded ? 1 : 0, N);
        const bool half = ctx.job.training.precision != Precision::fp32;
        const double moments = ctx.job.training.optimizer == Optimizer::sgd ? 4.0 : 8.0;
        S.mem.params = (half ? 2.0 : 4.0) * flat;
        S.mem.grads = 4.0 * flat;
        S.mem.optimizer = (moments + (half ? 4.0 : 0.0)) * flat / (sharded ? N : 1);
    }

    // Activations.
    const bool engine = es.activation_profile == ActivationProfile::ptd_engine;
    const double r = L.sp ? 1.0 / L.t : 1.0;
    double per_layer, recompute_working;  // kept per layer; the one layer being recomputed
    const EngineDType act_dtype = engine_activation_dtype(ctx.job.training.precision);
    if (engine) {
        ActivationInputs in;
        in.model = &m;
        in.micro_batch = L.b;
        in.seq = (int)L.s_local;
        in.tp = L.t;
        in.ep = L.ep;
        in.sequence_parallel = L.sp;
        in.flash_attention = false;
        in.recompute = L.rc;
        in.precision = ctx.job.training.precision;
        in.profile = ActivationProfile::ptd_engine;
        per_layer = layer_activation_bytes(in);
        recompute_working =
            engine_buffers_bytes(engine_recompute_buffers(m, L.b, (int)L.s_local, L.t, L.sp, L.rc, act_dtype));
    } else {
        per_layer = layer_activation_megatron(L, L.rc);
        recompute_working = layer_activation_megatron(L, Recompute::none) - per_layer;
    }
    double stage_extra = 0;  // embedding / output terms for one micro-batch
    if (first && !engine) {
        stage_extra += 4.0 * L.tokens;                     // token ids (int32)
        if (L.dropout) stage_extra += L.tokens * L.h * r;  // embedding dropout mask
    }
    if (first && engine)
        stage_extra += engine_buffers_bytes(engine_input_buffers(L.b, (int)L.s_local));
    double output_extra = 0;  // held for one micro-batch (the last stage runs its backward at once)
    if (last) {
        if (engine) {
            output_extra = engine_buffers_bytes(
                engine_output_buffers(m, L.b, (int)L.s_local, L.t, (int)L.vocab, L.sp, act_dtype));
        } else {
            // Final norm input and output, and fp32 logits for the vocab-parallel cross entropy.
            output_extra = 2 * L.e * L.tokens * L.h * r + 4.0 * L.tokens * L.vocab / L.t;
        }
    }
    const double chunks = in_flight_chunks(L, i);
    const double chunk_layers = (double)layers / L.v;
    S.act_per_mb = per_layer * layers + stage_extra;
    S.in_flight = chunks / L.v;
    S.mem.activations = chunks * (per_layer * chunk_layers + stage_extra / L.v) + output_extra;
    // During backward one layer's recomputed tensors exist on top of what was saved (its saved
    // part is already counted above).
    if (L.rc != Recompute::none && layers > 0) S.mem.activations += recompute_working;

    // Temporary and communication buffers.
    double temp = 0;
    if (L.sp) temp += L.e * L.tokens * L.h;                 // gathered sequence for the TP region
    if (L.p > 1) temp += 2.0 * L.e * L.tokens * L.h * r;    // p2p send + receive
    if (L.c > 1) temp += 2.0 * 2.0 * L.e * L.tokens * L.kv_l * L.d;  // ring attention: K/V chunk in flight + next
    S.mem.temp = temp;
    S.mem.cuda_context = L.cpu ? 0.0 : es.cuda_context_gib * kGiB;
    const bool embedding_group = L.p > 1 && m.tied_embeddings && (first || last);
    S.mem.nccl = L.cpu ? 0.0 : es.nccl_gib * kGiB * (L.nccl_groups + (embedding_group ? 1 : 0));

    // Time per micro-batch: the stage's v chunks together (block_time is linear in layers;
    // the embedding and output terms fall on the first and last chunk).
    const ChunkTime ct = block_time(L, lt, layers, first, last);
    S.fwd = ct.fwd.compute;
    S.bwd = ct.bwd.compute;
    S.recompute = ct.bwd.recompute;
    S.tp = ct.fwd.tp + ct.bwd.tp;
    S.cp = ct.fwd.cp + ct.bwd.cp;
    S.ep = ct.fwd.ep + ct.bwd.ep;
    S.p2p = L.v * (ct.fwd.p2p + ct.bwd.p2p);  // one hop each way per chunk
    return S;  // ZeRO buffers and DP traffic are added by the caller, which knows the layout
}

}  // namespace

LayoutScore evaluate_layout(const EstimateContext& ctx, const LayoutChoice& ch, const std::vector<int>& layers_per_stage,
                            Estimate* detail, StepBounds* bounds) {
    assert(!(detail && bounds));
    const JobSpec& job = ctx.job;
    const ModelSpec& m = job.model;
    const EstimateSpec& es = job.estimate;
    LayoutDerived L = derive(ctx, ch);
    const LayerTime lt = layer_forward_time(L);
    const int p = L.p;

    // Layers of stage i: from the explicit list (pp or pp·vpp entries), else balanced.
    const int n_lps = (int)layers_per_stage.size();
    const int base = m.layers / p, extra = m.layers % p;
    auto stage_layers = [&](int i) -> int {
        if (n_lps == p) return layers_per_stage[(size_t)i];
        if (n_lps == p * L.v && n_lps > 0) {
            int sum = 0;
            for (int k = 0; k < L.v; ++k) sum += layers_per_stage[(size_t)(k * p + i)];
            return sum;
        }
        if (p == 1) return m.layers;
        return base + (i >= 1 && i <= extra ? 1 : 0);
    };

    // Stages that can be the worst: with a balanced split, the first, the first of each run
    // of equal middle stages (most in flight), and the last. Otherwise every stage.
    int cand[4];
    int n_cand = 0;
    // An explicit list that is the balanced split (as the planner passes when pp does not
    // divide the layers) keeps the shortcut; any other list evaluates every stage.
    bool balanced = n_lps == 0;
    if (n_lps == p) {
        balanced = true;
        for (int i = 0; i < p && balanced; ++i)
            balanced = layers_per_stage[(size_t)i] == (p == 1 ? m.layers : base + (i >= 1 && i <= extra ? 1 : 0));
    }
    const bool all_stages = detail != nullptr || !balanced;
    if (!all_stages) {
        auto add = [&](int i) {
            if (i < 0 || i >= p) return;
            for (int k = 0; k < n_cand; ++k)
                if (cand[k] == i) return;
            cand[n_cand++] = i;
        };
        add(0);
        add(1);
        add(extra + 1 < p - 1 ? extra + 1 : -1);
        add(p - 1);
    }
    const int count = all_stages ? p : n_cand;

    const double capacity = job.cluster.gpu.memory_gib * kGiB;
    const double usable = capacity * (1.0 - es.headroom);
    const double bucket = es.zero_bucket_elements;

    LayoutScore score;
    score.usable_bytes = usable;
    double worst_total = -1, t_mb_max = 0;
    StageEval worst_time_stage{};
    // Per stage: the tail after its last backward (filled for the evaluated stages, then
    // copied to the stages each one stands for), and the block durations of every chunk.
    thread_local std::vector<StageTail> tails;
    thread_local std::vector<double> fwd_d, bwd_d, stage_end;
    tails.assign((size_t)p, StageTail{});
    stage_end.assign((size_t)p, 0.0);
    if (detail) {
        detail->stages.clear();
        detail->stages.reserve((size_t)p);
    }
    for (int k = 0; k < count; ++k) {
        const int i = all_stages ? k : cand[k];
        const int layers = stage_layers(i);
        StageEval S = evaluate_stage(ctx, L, lt, i, layers);

        // ZeRO / distributed-optimizer buffers and DP traffic need the layout's stage.
        const double dense_params = S.params - layers * L.layer_expert_params;
        const double expert_params = layers * L.layer_expert_params;
        const int N = L.dp * L.c;
        if (ch.zero == 1 || ch.zero == 2) {
            // DeepSpeed reduce and all-gather buckets in the training dtype.
            S.mem.temp += 2.0 * L.e * std::min(bucket, S.params);
        } else if (ch.zero == 3) {
            // Gathered parameters of the current and the prefetched layer (or the embedding).
            const double biggest = std::max(L.layer_dense_params + L.layer_expert_params,
                                            (i == 0 || i == p - 1) ? L.embed_params : 0.0);
            S.mem.temp += 2.0 * L.e * std::min(biggest, bucket);
        }
        const double allocated = S.mem.model_states() + S.mem.activations + S.mem.temp;
        S.mem.fragmentation = es.fragmentation * allocated;

        // DP traffic. Gradient bytes on the wire: Megatron reduces bf16 runs' fp32 main grads;
        // DeepSpeed and fp16 reduce in the parameter dtype.
        const bool megatron_grads = ch.zero == 0;
        const double grad_e = job.training.precision == Precision::fp32 ? 4.0
                            : (megatron_grads && job.training.precision == Precision::bf16 ? 4.0 : 2.0);
        auto dp_cost = [&](double params, int n, double bw, double lat, double& grad, double& param) {
            if (n <= 1 || params <= 0) return;
            if (ch.zero == 3) {
                // Per micro-batch: gather weights for forward and backward, reduce-scatter grads.
                grad += L.mbs * gather_time(grad_e * params, n, bw, lat);
                param += L.mbs * 2.0 * gather_time(L.e * params, n, bw, lat);
            } else if (ch.zero >= 1 || ch.distributed_optimizer) {
                grad += gather_time(grad_e * params, n, bw, lat);
                param += gather_time(L.e * params, n, bw, lat);
            } else {
                grad += all_reduce_time(grad_e * params, n, bw, lat);
            }
        };
        dp_cost(dense_params, N, L.bw_dp, L.lat_dp, S.dp_grad, S.dp_param);
        dp_cost(expert_params, L.edp, L.bw_edp, L.lat_edp, S.dp_grad, S.dp_param);
        if (p > 1 && m.tied_embeddings && (i == 0 || i == p - 1))  // embedding-group all-reduce
            S.dp_grad += all_reduce_time(grad_e * L.output_params, 2, L.bw_pp, L.lat_pp);

        // Exposed DP time. Gradient reduction overlaps the backward of the last micro-batch
        // (from the end of the stage's last backward block, the schedule simulation below
        // places it); parameter gathering overlaps the first forward of the next iteration.
        // ZeRO-3's per-micro-batch traffic overlaps all compute (prefetch) but for the last
        // micro-batch's reduce-scatter.
        StageTail tail;
        tail.grad_s = S.dp_grad;
        tail.param_s = S.dp_param;
        if (ch.zero == 3) {
            tail.grad_exposed_s = std::max(0.0, S.dp_grad + S.dp_param - L.mbs * (S.fwd + S.bwd)) + S.dp_grad / L.mbs;
        } else {
            tail.grad_exposed_s = es.overlap_grad_reduce ? std::max(0.0, S.dp_grad - S.bwd) : S.dp_grad;
            tail.param_exposed_s = es.overlap_param_gather ? std::max(0.0, S.dp_param - S.fwd) : S.dp_param;
        }

        // Optimizer step: memory bound over this rank's optimizer shard. Adam touches
        // grad (4), master (4+4), m (4+4), v (4+4), writes the weight: ~30 bytes/param.
        const bool sharded = ch.zero >= 1 || ch.distributed_optimizer;
        const double opt_params = dense_params / (sharded ? N : 1) + expert_params / (sharded ? L.edp : 1);
        const double opt_bytes = job.training.optimizer == Optimizer::sgd ? 18.0 : 30.0;
        tail.optimizer_s = opt_params * opt_bytes / L.hbm;
        tails[(size_t)i] = tail;

        const double t_mb = S.fwd + S.bwd + S.recompute + S.tp + S.cp + S.ep + S.p2p;
        if (t_mb > t_mb_max) {
            t_mb_max = t_mb;
            worst_time_stage = S;
        }
        const double total = S.mem.total();
        if (total > worst_total) {
            worst_total = total;
            score.worst_stage = i;
            score.worst_mem = S.mem;
        }
        if (detail) {
            StageEstimate se;
            se.stage = i;
            se.layers = layers;
            se.has_embedding = i == 0 || (i == p - 1 && m.tied_embeddings && p > 1);
            se.has_output = i == p - 1;
            se.in_flight = S.in_flight;
            se.params_count = S.params;
            se.mem = S.mem;
            se.act_per_microbatch = S.act_per_mb;
            se.fwd_s = S.fwd;
            se.bwd_s = S.bwd;
            se.recompute_s = S.recompute;
            se.tp_s = S.tp;
            se.cp_s = S.cp;
            se.ep_s = S.ep;
            se.p2p_s = S.p2p;
            se.dp_s = S.dp_grad + S.dp_param;
            se.tail = tails[(size_t)i];
            detail->stages.push_back(se);
        }
    }

    // Stages not evaluated (the balanced-split shortcut) have the tail of the stage of their
    // kind: the first, those with one layer more (1..extra), the rest of the middle, the last.
    if (!all_stages)
        for (int i = 0; i < p; ++i) {
            const int rep = i == 0 ? 0 : i == p - 1 ? p - 1 : (i <= extra ? 1 : std::min(extra + 1, p - 2));
            tails[(size_t)i] = tails[(size_t)rep];
        }

    // The pipeline schedule: every chunk's forward and backward block, placed by the
    // schedule simulation (timeline.h). Its makespan replaces a closed form, which is exact
    // only when all stages take equally long.
    const int v = L.v;
    // A chunk's time depends only on its layer count and whether it holds the embedding or
    // the output layer: a few kinds however many chunks (a balanced split has ≤ 4).
    struct KnownChunk {
        double layers;
        bool first, last;
        ChunkTime time;
    };
    KnownChunk known[8];
    int n_known = 0;
    auto chunk_time = [&](double layers, bool first, bool last) -> ChunkTime {
        for (int k = 0; k < n_known; ++k)
            if (known[k].layers == layers && known[k].first == first && known[k].last == last) return known[k].time;
        const ChunkTime ct = block_time(L, lt, layers, first, last);
        if (n_known < 8) known[n_known++] = KnownChunk{layers, first, last, ct};
        return ct;
    };
    fwd_d.resize((size_t)p * v);
    bwd_d.resize((size_t)p * v);
    for (int i = 0; i < p; ++i) {
        const int layers = stage_layers(i);
        for (int c = 0; c < v; ++c) {
            const double chunk_layers = n_lps == p * v && v > 1 ? (double)layers_per_stage[(size_t)(c * p + i)]
                                                                : (double)layers / v;
            const ChunkTime ct = chunk_time(chunk_layers, i == 0 && c == 0, i == p - 1 && c == v - 1);
            fwd_d[(size_t)(c * p + i)] = ct.fwd.total();
            bwd_d[(size_t)(c * p + i)] = ct.bwd.total();
            if (detail) detail->stages[(size_t)i].chunks.push_back(ct);
        }
    }
    PipelineDurations pd;
    pd.p = p, pd.v = v, pd.m = L.mbs, pd.fwd = fwd_d, pd.bwd = bwd_d;
    // Screening: stage_end holds each stage's floor, so sync and step below are lower bounds.
    const double pipeline = bounds ? pipeline_makespan_lower(pd, stage_end) : pipeline_makespan(pd, stage_end);

    // The tail: each stage's exposed gradient reduction from the end of its last backward;
    // all stages meet (gradient-norm all-reduce for clipping); each runs its optimizer step
    // and the exposed parameter gather. The step ends with the slowest.
    double sync = pipeline, grad_exposed_max = 0;
    for (int i = 0; i < p; ++i) {
        sync = std::max(sync, stage_end[(size_t)i] + tails[(size_t)i].grad_exposed_s);
        grad_exposed_max = std::max(grad_exposed_max, tails[(size_t)i].grad_exposed_s);
    }
    double after = 0, after_opt = 0;
    for (int i = 0; i < p; ++i) {
        const StageTail& t = tails[(size_t)i];
        if (t.optimizer_s + t.param_exposed_s > after) {
            after = t.optimizer_s + t.param_exposed_s;
            after_opt = t.optimizer_s;
        }
    }
    const double step = sync + after;
    if (bounds) {
        // Every stage ends by the pipeline's upper bound, its gradient reduction after it.
        bounds->lo_s = step;
        bounds->hi_s = bounds->want_hi ? std::max(step, pipeline_makespan_upper(pd) + grad_exposed_max + after)
                                       : std::numeric_limits<double>::infinity();
    }

    // The breakdown: m micro-batches through the slowest stage, the rest of the schedule's
    // makespan is bubble; after it the exposed DP time and the last stage's optimizer.
    const StageEval& W = worst_time_stage;
    TimeBreakdown tb;
    tb.compute = L.mbs * (W.fwd + W.bwd + W.recompute);
    tb.tp_comm = L.mbs * W.tp;
    tb.cp_comm = L.mbs * W.cp;
    tb.ep_comm = L.mbs * W.ep;
    tb.pp_comm = L.mbs * W.p2p;
    tb.bubble = std::max(0.0, pipeline - L.mbs * t_mb_max);
    tb.optimizer = after_opt;
    tb.dp_comm = (sync - pipeline) + (after - after_opt);  // both ≥ 0

    const int world = L.t * L.p * L.dp * L.c;
    const double tokens = (double)job.training.global_batch * m.seq_len;
    const FlopsEstimate fl = flops_per_token(m, ch.recompute, es.attention_flops, L.vocab);
    score.peak_bytes = worst_total;
    score.fits = worst_total <= usable;
    score.step_s = step;
    score.tokens_per_s = step > 0 ? tokens / step : 0;
    score.mfu = score.tokens_per_s * fl.model_per_token / (world * L.peak);
    score.hfu = score.tokens_per_s * fl.hardware_per_token / (world * L.peak);
    score.time = tb;

    if (detail) {
        detail->worst_stage = score.worst_stage;
        detail->capacity_bytes = capacity;
        detail->usable_bytes = usable;
        detail->fits = score.fits;
        detail->micro_batches = L.mbs;
        detail->vocab_padded = L.vocab;
        detail->flops = fl;
        detail->time = tb;
        detail->pipeline_s = pipeline;
        detail->tail_sync_s = sync;
        for (int i = 0; i < p; ++i) detail->stages[(size_t)i].pipeline_end_s = stage_end[(size_t)i];
        detail->step_s = step;
        detail->tokens_per_s = score.tokens_per_s;
        detail->model_tflops_per_gpu = score.tokens_per_s * fl.model_per_token / world / 1e12;
        detail->hardware_tflops_per_gpu = score.tokens_per_s * fl.hardware_per_token / world / 1e12;
        detail->peak_tflops = L.peak / 1e12;
        detail->mfu = score.mfu;
        detail->hfu = score.hfu;
        detail->params = ctx.params;
    }
    return score;
}

Estimate estimate_job(const JobSpec& job) {
    EstimateContext ctx = make_estimate_context(job);
    Estimate est;
    LayoutChoice ch = layout_choice_of(job);
    evaluate_layout(ctx, ch, job.parallel.layers_per_stage, &est);
    const ModelSpec& m = job.model;
    const int t = job.parallel.tp;
    if (m.kv_heads > 0 && t > m.kv_heads)
        est.notes.push_back("tp " + std::to_string(t) + " > kv_heads " + std::to_string(m.kv_heads) +
                            ": each rank holds a replica of one KV head (K/V projections replicated " +
                            std::to_string(t / m.kv_heads) + "×)");
    if ((double)est.vocab_padded != (double)m.vocab)
        est.notes.push_back("vocab padded from " + std::to_string(m.vocab) + " to " +
                            std::to_string((long long)est.vocab_padded) + " (multiple of vocab_pad · tp = " +
                            std::to_string(job.estimate.vocab_pad) + " · " + std::to_string(t) + ")");
    if (job.estimate.activation_profile == ActivationProfile::megatron && m.arch == Arch::gpt)
        est.notes.push_back("gpt arch: dropout masks counted (1 byte per element), as in Megatron-LM's GPT configs");
    if (job.parallel.recompute == Recompute::full)
        est.notes.push_back("full recompute: activations include one layer recomputed during backward");
    if (job.parallel.recompute == Recompute::selective)
        est.notes.push_back("selective recompute: the attention core is recomputed during backward (its scores are not kept)");
    if (job.estimate.activation_profile == ActivationProfile::ptd_engine)
        est.notes.push_back("activation profile ptd-engine: the bundled engine's own buffers (no flash attention; 16-bit activations in bf16/fp16, fp32 norm statistics and logits)");
    if (ctx.cpu_device) est.notes.push_back("cpu device: no CUDA context or NCCL buffers counted");
    if ((est.mfu > 1.0 || est.hfu > 1.0) && job.estimate.attention_flops == AttentionFlops::full)
        est.notes.push_back(std::string(est.mfu > 1.0 ? "MFU" : "HFU") + " above 100% under the full-s² convention: causal attention kernels execute about half "
                            "of the counted score FLOPs; set estimate.attention_flops = \"causal\" to count what runs");
    return est;
}

}  // namespace ptd
