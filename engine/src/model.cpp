// model.cpp — one pipeline stage of the transformer on one TP rank: config checks,
// deterministic layout-independent initialisation, the activation buffers (allocated
// from the estimators' ptd-engine profile list, so prediction and measurement cannot
// drift apart), and the hand-written forward/backward passes.
#include "ptd/engine/model.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include "ptd/model/estimate.h"
#include "timing.h"

namespace ptd::engine {

namespace {

// ---- config ------------------------------------------------------------------------------

std::unexpected<Error> unsupported(const JobSpec& job, const std::string& key, const std::string& msg) {
    SourceLoc where{job.origin.file, 0, 0};
    auto it = job.origin.locations.find(key);
    if (it != job.origin.locations.end()) where = it->second;
    return fail(where, key, msg);
}

}  // namespace

Result<EngineConfig> make_engine_config(const JobSpec& job, const RankLayout& layout, int rank) {
    const ModelSpec& m = job.model;
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    if (p.cp != 1) return unsupported(job, "parallel.cp", "got " + std::to_string(p.cp) + ", but the CPU engine has no context parallelism; allowed: 1");
    if (p.ep != 1 || m.experts > 1)
        return unsupported(job, "model.experts", "the CPU engine has no mixture-of-experts layers; allowed: experts = 0, ep = 1");
    if (p.vpp < 1 || (p.vpp > 1 && p.pp < 2))
        return unsupported(job, "parallel.vpp", "got " + std::to_string(p.vpp) + " with pp = " + std::to_string(p.pp) + "; the interleaved schedule needs pp ≥ 2; allowed: vpp = 1, or pp ≥ 2");
    if (p.zero > 1) return unsupported(job, "parallel.zero", "got " + std::to_string(p.zero) + "; the engine implements ZeRO stage 0 and 1 (allowed: 0, 1)");
    if (p.dp_replicate > 1)  // hsdp
        return unsupported(job, "parallel.dp_replicate", "got " + std::to_string(p.dp_replicate) +
                                                             "; the engine shards its optimizer over the whole data-parallel group (allowed: 1)");
    if (t.optimizer != Optimizer::adamw)
        return unsupported(job, "training.optimizer", "the engine implements AdamW only (allowed: \"adamw\")");
    if (m.kv_heads % p.tp != 0)
        return unsupported(job, "parallel.tp", "got " + std::to_string(p.tp) + ", but the engine shards KV heads (" + std::to_string(m.kv_heads) + ") without replication; tp must divide model.kv_heads");
    if (m.heads % m.kv_heads != 0) return unsupported(job, "model.kv_heads", "heads must be a multiple of kv_heads");
    if (m.hidden % m.heads != 0) return unsupported(job, "model.hidden", "hidden must be a multiple of heads");
    if (m.head_dim_given != 0 && m.head_dim_given * m.heads != m.hidden)
        return unsupported(job, "model.head_dim", "got " + std::to_string(m.head_dim_given) + "; the engine's heads are hidden / heads wide (allowed: 0 or " + std::to_string(m.hidden / m.heads) + ")");
    if (m.mla()) return unsupported(job, "model.kv_lora_rank", "the engine has no multi-head latent attention; allowed: 0");
    if (m.mtp_layers != 0) return unsupported(job, "model.mtp_layers", "the engine has no multi-token prediction; allowed: 0");
    if (m.qk_layernorm) return unsupported(job, "model.qk_layernorm", "the engine has no query / key norms; allowed: false");
    if (m.position == Position::rope && (m.hidden / m.heads) % 2 != 0)
        return unsupported(job, "model.heads", "RoPE needs an even head dimension");

    EngineConfig c;
    c.model = m;
    c.world = layout.world;
    c.rank = rank;
    c.tp = p.tp;
    c.pp = p.pp;
    c.dp = layout.degree[DIM_DP];
    const RankPlace& place = layout.ranks[(size_t)rank];
    c.tp_rank = place.coord[DIM_TP];
    c.pp_rank = place.coord[DIM_PP];
    c.dp_rank = place.coord[DIM_DP];
    c.sequence_parallel = p.sequence_parallel && p.tp > 1;
    c.zero = (p.zero >= 1 || p.distributed_optimizer) ? 1 : 0;
    c.recompute_full = p.recompute == Recompute::full;
    c.recompute_selective = p.recompute == Recompute::selective;
    c.flash_attention = t.flash_attention;
    c.act = t.precision == Precision::bf16 ? DType::bf16 : t.precision == Precision::fp16 ? DType::f16 : DType::f32;
    c.micro_batch = t.micro_batch;
    c.seq = m.seq_len;
    c.global_batch = t.global_batch;
    c.grad_accum = t.grad_accum(c.dp);
    if (c.grad_accum < 1 || (int64_t)c.grad_accum * c.micro_batch * c.dp != c.global_batch)
        return unsupported(job, "training.global_batch", "got " + std::to_string(t.global_batch) + ", which is not a multiple of micro_batch · dp = " + std::to_string(c.micro_batch * c.dp));
    if (c.sequence_parallel && c.rows() % c.tp != 0)
        return unsupported(job, "parallel.sequence_parallel", "micro_batch · seq_len = " + std::to_string(c.rows()) + " must be divisible by tp = " + std::to_string(c.tp));
    c.vocab_padded = padded_vocab(m.vocab, job.estimate.vocab_pad, c.tp);
    const int P = p.pp, V = p.vpp;
    c.vpp = V;
    if (V > 1 && c.grad_accum % P != 0)
        return unsupported(job, "training.global_batch",
                           "got " + std::to_string(t.global_batch) + ": " + std::to_string(c.grad_accum) +
                               " micro-batches per step (global_batch / (micro_batch · dp)) is not a multiple of pp = " +
                               std::to_string(P) + ", which the interleaved schedule (vpp = " + std::to_string(V) +
                               ") needs; allowed: global_batch a multiple of micro_batch · dp · pp = " +
                               std::to_string((int64_t)c.micro_batch * c.dp * P));
    // Layers of each virtual stage q = chunk · pp + stage (with vpp = 1: of each stage).
    std::vector<int> split;
    const std::vector<int>& lps = p.layers_per_stage;
    if (lps.empty()) {
        split = balanced_layers_per_stage(m.layers, P * V);
    } else if ((int)lps.size() == P * V) {
        split = lps;
    } else if ((int)lps.size() == P) {
        split.assign((size_t)(P * V), 0);
        for (int i = 0; i < P; ++i) {
            if (lps[(size_t)i] % V != 0)
                return unsupported(job, "parallel.layers_per_stage", "entry " + std::to_string(lps[(size_t)i]) + " is not divisible by vpp " + std::to_string(V) + "; allowed: per-stage counts that split evenly into vpp chunks, or pp·vpp entries");
            for (int ch = 0; ch < V; ++ch) split[(size_t)(ch * P + i)] = lps[(size_t)i] / V;
        }
    } else {
        return unsupported(job, "parallel.layers_per_stage", "has " + std::to_string(lps.size()) + " entries; the engine needs one per pipeline stage (" + std::to_string(P) + ")" + (V > 1 ? " or one per virtual stage (pp·vpp = " + std::to_string(P * V) + ")" : std::string()));
    }
    // The estimators take a chunk without transformer layers (Megatron-core's pipeline
    // layouts); the engine builds every stage and chunk from its layers. Every rank checks
    // every chunk, so all refuse together (one refusing alone would leave the others waiting
    // for it at the rendezvous).
    for (int q = 0; q < P * V; ++q)
        if (split[(size_t)q] < 1)
            return unsupported(job, "parallel.layers_per_stage", (V > 1 ? "virtual stage " : "stage ") + std::to_string(q) + " would hold no layer; allowed in the engine: at least one layer per stage and model chunk (pp·vpp ≤ layers)");
    c.layers = 0;
    for (int ch = 0; ch < V; ++ch) {
        const int q = ch * P + c.pp_rank;
        int l0 = 0;
        for (int k = 0; k < q; ++k) l0 += split[(size_t)k];
        const int n = split[(size_t)q];
        c.chunk_layer0.push_back(l0);
        c.chunk_layers.push_back(n);
        c.layers += n;
        c.slot_layers = std::max(c.slot_layers, n);
    }
    c.layer0 = c.chunk_layer0[0];
    c.first = c.pp_rank == 0;
    c.last = c.pp_rank == c.pp - 1;
    c.slots = V == 1 ? std::min(c.pp - c.pp_rank, c.grad_accum)
                     : std::min(2 * (P - c.pp_rank - 1) + (V - 1) * P + 1, c.grad_accum * V);
    return c;
}

// ---- deterministic initialisation ---------------------------------------------------------

namespace {

uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
uint64_t fnv1a(const std::string& s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
    return h;
}
// N(0,1) for one global element index: Box–Muller on two hashed uniforms. Depends only on
// (seed, tensor name, index), never on which rank holds the element.
float normal_at(uint64_t key, int64_t index) {
    const uint64_t a = splitmix64(key ^ splitmix64((uint64_t)index * 2 + 0));
    const uint64_t b = splitmix64(key ^ splitmix64((uint64_t)index * 2 + 1));
    const double u1 = ((double)(a >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    const double u2 = (double)(b >> 11) * (1.0 / 9007199254740992.0);
    return (float)(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

enum class Init { normal, ones, zeros };
// Where a local [rows, cols] block sits in the global tensor: element (i, j) is global
// (row0 + i, col0 + j) of a tensor with `gcols` columns.
struct Placement {
    int64_t rows = 0, cols = 1;
    int64_t row0 = 0, col0 = 0, gcols = 1;
};

struct TensorPlan {
    std::string name;
    Placement at;
    Init init = Init::zeros;
    float std = 0.02f;
    bool weight_decay = false, tp_partial = false, in_norm = true;
    ParamTensor** slot = nullptr;  // where to store the pointer once the vector is final
};

}  // namespace

Model build_model(Backend& be, const EngineConfig& c, uint64_t seed) {
    const ModelSpec& ms = c.model;
    const int64_t h = ms.hidden, HD = c.heads_l() * c.head_dim(), GD = c.kv_l() * c.head_dim(), F = c.ffn_l();
    const int64_t Vl = c.vocab_l();
    const bool sp = c.sequence_parallel;
    const bool replicated_in_norm = c.tp_rank == 0;  // tensors copied on every TP rank count once
    const float resid_std = 0.02f / std::sqrt(2.0f * (float)ms.layers);
    const bool has_bias = ms.bias, qkv_bias = ms.bias || ms.qkv_bias;

    Model m;
    m.be = &be;
    m.cfg = c;
    m.comm_ready = be.create_event("compute work before a communicator call");
    m.comm_done = be.create_event("a communicator call");
    m.layers.resize((size_t)c.layers);
    std::vector<TensorPlan> plan;
    auto col_parallel = [&](int64_t rows_l, int64_t cols) {  // rows split over TP
        return Placement{rows_l, cols, c.tp_rank * rows_l, 0, cols};
    };
    auto row_parallel = [&](int64_t rows, int64_t cols_l) {  // columns split over TP
        return Placement{rows, cols_l, 0, c.tp_rank * cols_l, cols_l * c.tp};
    };
    auto replicated = [&](int64_t rows, int64_t cols) { return Placement{rows, cols, 0, 0, cols}; };
    auto add = [&](std::string name, Placement at, Init init, float std, bool wd, bool tp_partial, bool in_norm,
                   ParamTensor** slot) {
        plan.push_back({std::move(name), at, init, std, wd, tp_partial, in_norm, slot});
    };

    if (c.first) {
        add("embed.wte", col_parallel(Vl, h), Init::normal, 0.02f, true, false, true, &m.wte);
        if (ms.position == Position::learned)
            add("embed.wpe", replicated(ms.seq_len, h), Init::normal, 0.02f, true, sp, replicated_in_norm, &m.wpe);
    }
    for (int li = 0; li < c.layers; ++li) {
        LayerParams& L = m.layers[(size_t)li];
        const std::string pre = "layers." + std::to_string(c.global_layer(li)) + ".";
        const bool ln = c.layernorm();
        add(pre + "ln1.w", replicated(1, h), Init::ones, 0, false, sp, replicated_in_norm, &L.ln1_w);
        if (ln) add(pre + "ln1.b", replicated(1, h), Init::zeros, 0, false, sp, replicated_in_norm, &L.ln1_b);
        add(pre + "attn.wq", col_parallel(HD, h), Init::normal, 0.02f, true, false, true, &L.wq);
        add(pre + "attn.wk", col_parallel(GD, h), Init::normal, 0.02f, true, false, true, &L.wk);
        add(pre + "attn.wv", col_parallel(GD, h), Init::normal, 0.02f, true, false, true, &L.wv);
        if (qkv_bias) {
            add(pre + "attn.bq", col_parallel(HD, 1), Init::zeros, 0, false, false, true, &L.bq);
            add(pre + "attn.bk", col_parallel(GD, 1), Init::zeros, 0, false, false, true, &L.bk);
            add(pre + "attn.bv", col_parallel(GD, 1), Init::zeros, 0, false, false, true, &L.bv);
        }
        add(pre + "attn.wo", row_parallel(h, HD), Init::normal, resid_std, true, false, true, &L.wo);
        if (has_bias) add(pre + "attn.bo", replicated(1, h), Init::zeros, 0, false, sp, replicated_in_norm, &L.bo);
        add(pre + "ln2.w", replicated(1, h), Init::ones, 0, false, sp, replicated_in_norm, &L.ln2_w);
        if (ln) add(pre + "ln2.b", replicated(1, h), Init::zeros, 0, false, sp, replicated_in_norm, &L.ln2_b);
        if (c.swiglu()) {
            add(pre + "mlp.gate", col_parallel(F, h), Init::normal, 0.02f, true, false, true, &L.w1);
            if (has_bias) add(pre + "mlp.gate_b", col_parallel(F, 1), Init::zeros, 0, false, false, true, &L.b1);
            add(pre + "mlp.up", col_parallel(F, h), Init::normal, 0.02f, true, false, true, &L.w3);
            if (has_bias) add(pre + "mlp.up_b", col_parallel(F, 1), Init::zeros, 0, false, false, true, &L.b3);
            add(pre + "mlp.down", row_parallel(h, F), Init::normal, resid_std, true, false, true, &L.w2);
        } else {
            add(pre + "mlp.fc1", col_parallel(F, h), Init::normal, 0.02f, true, false, true, &L.w1);
            if (has_bias) add(pre + "mlp.fc1_b", col_parallel(F, 1), Init::zeros, 0, false, false, true, &L.b1);
            add(pre + "mlp.fc2", row_parallel(h, F), Init::normal, resid_std, true, false, true, &L.w2);
        }
        if (has_bias) add(pre + "mlp.out_b", replicated(1, h), Init::zeros, 0, false, sp, replicated_in_norm, &L.b2);
    }
    if (c.last) {
        add("final_norm.w", replicated(1, h), Init::ones, 0, false, sp, replicated_in_norm, &m.lnf_w);
        if (c.layernorm()) add("final_norm.b", replicated(1, h), Init::zeros, 0, false, sp, replicated_in_norm, &m.lnf_b);
        if (!c.output_is_embedding()) {
            // Tied with pp > 1: the last stage holds a copy of wte (same name → same init);
            // its gradient is summed with the first stage's, and it counts in the norm once.
            const bool tied_copy = ms.tied_embeddings;
            m.wout_is_tied_copy = tied_copy;
            add(tied_copy ? "embed.wte" : "output.w", col_parallel(Vl, h), Init::normal, 0.02f, true, false,
                !tied_copy, &m.wout);
        }
    }

    // Lay the tensors out in one flat buffer (ZeRO-1 shards and all-gathers it as a whole).
    int64_t numel = 0;
    m.tensors.reserve(plan.size());
    for (const TensorPlan& tp : plan) {
        ParamTensor t;
        t.name = tp.name;
        t.offset = numel;
        t.numel = tp.at.rows * tp.at.cols;
        t.weight_decay = tp.weight_decay;
        t.tp_partial_grad = tp.tp_partial;
        t.in_norm = tp.in_norm;
        numel += t.numel;
        m.tensors.push_back(t);
    }
    m.numel = numel;
    // ZeRO-1 cuts the buffers into dp equal shards (NCCL's reduce-scatter and all-gather
    // take one count for all ranks): pad with zeros, exactly as the estimators predict.
    static_assert(kEngineShardAlign == kShardAlignElements, "the estimators and comm.h disagree on shard padding");
    m.flat_numel = engine_flat_buffer_elements(numel, c.zero, c.dp);
    // Mixed precision: the model weights are 16-bit (the f32 master copy belongs to the
    // optimizer), the gradients are f32 main grads in every precision.
    m.params = be.alloc(MEM_PARAMS, (size_t)m.flat_numel * dtype_bytes(c.act), "parameters");
    m.grads = (float*)be.alloc(MEM_GRADS, (size_t)m.flat_numel * sizeof(float), "gradients");
    be.fill(m.params, c.act, 0.0f, m.flat_numel);
    be.fill(m.grads, DType::f32, 0.0f, m.flat_numel);
    std::vector<float> host;
    std::vector<uint16_t> host16;
    for (size_t i = 0; i < plan.size(); ++i) {
        ParamTensor& t = m.tensors[i];
        const TensorPlan& tp = plan[i];
        t.p = dtype_offset(m.params, t.offset, c.act);
        t.g = m.grads + t.offset;
        *tp.slot = &t;
        if (be.shapes_only()) continue;  // nothing is computed: the values are never read
        host.assign((size_t)t.numel, 0.0f);
        if (tp.init == Init::ones) {
            std::fill(host.begin(), host.end(), 1.0f);
        } else if (tp.init == Init::normal) {
            const uint64_t key = splitmix64(seed ^ fnv1a(tp.name));
            // Each element depends only on its global index, so threads cannot change the values.
#pragma omp parallel for schedule(static)
            for (int64_t r = 0; r < tp.at.rows; ++r)
                for (int64_t col = 0; col < tp.at.cols; ++col)
                    host[(size_t)(r * tp.at.cols + col)] =
                        tp.std * normal_at(key, (tp.at.row0 + r) * tp.at.gcols + tp.at.col0 + col);
        }
        if (c.act == DType::f32) {
            be.upload(t.p, host.data(), host.size() * sizeof(float));
        } else {  // the same f32 draw, rounded to nearest even: identical on every layout
            host16.resize(host.size());
            for (size_t k = 0; k < host.size(); ++k)
                host16[k] = c.act == DType::bf16 ? f32_to_bf16_bits(host[k]) : f32_to_f16_bits(host[k]);
            be.upload(t.p, host16.data(), host16.size() * sizeof(uint16_t));
        }
    }
    if (c.output_is_embedding()) m.wout = m.wte;
    return m;
}

void free_model(Model& m) {
    if (!m.be) return;
    m.be->release(m.params);
    m.be->release(m.grads);
    m.params = m.grads = nullptr;
}

// ---- activations ----------------------------------------------------------------------------

namespace {

// The structs a buffer may live in; place_buffer fills the one given (the others null).
struct BufferHomes {
    LayerActs* layer = nullptr;   // per layer and micro-batch in flight
    OutputActs* out = nullptr;    // the last stage's head
    Activations* ws = nullptr;    // the workspace
};

// `p` into `field` of `home`, when the buffer's home is the one given.
template <class Home, class T>
bool put_field(Home* home, T* Home::*field, void* p) {
    if (!home) return false;
    home->*field = static_cast<T*>(p);
    return true;
}

// Where each buffer of the estimators' list lives: true when `id`'s home is the one `h` gives
// (and then `p` is stored there). One switch, no default: a buffer added to the list without a
// place here is a -Wswitch warning. The dtype is the list's (cfg.act, f32 for norm statistics
// and logits, i32 for token ids); the fields say which. No field here: the token ids
// (alloc_activations keeps them per slot), the operand scratch (the backend's own,
// plan_operand_scratch) and MoE's router probabilities (rejected by make_engine_config).
bool place_buffer(const BufferHomes& h, EngineBufferId id, void* p) {
    using Id = EngineBufferId;
    switch (id) {
    case Id::ln1_input: return put_field(h.layer, &LayerActs::ln1_in, p);
    case Id::ln1_rstd: return put_field(h.layer, &LayerActs::ln1_rstd, p);
    case Id::ln1_mean: return put_field(h.layer, &LayerActs::ln1_mean, p);
    case Id::ln1_output: return put_field(h.layer, &LayerActs::ln1_out, p);
    case Id::attn_qkv: return put_field(h.layer, &LayerActs::qkv, p);
    case Id::attn_probs: return put_field(h.layer, &LayerActs::probs, p);
    case Id::attn_lse: return put_field(h.layer, &LayerActs::lse, p);
    case Id::attn_context: return put_field(h.layer, &LayerActs::ctx, p);
    case Id::ln2_input: return put_field(h.layer, &LayerActs::ln2_in, p);
    case Id::ln2_rstd: return put_field(h.layer, &LayerActs::ln2_rstd, p);
    case Id::ln2_mean: return put_field(h.layer, &LayerActs::ln2_mean, p);
    case Id::ln2_output: return put_field(h.layer, &LayerActs::ln2_out, p);
    case Id::mlp_fc1:
    case Id::mlp_gate: return put_field(h.layer, &LayerActs::fc1, p);
    case Id::mlp_up: return put_field(h.layer, &LayerActs::fc3, p);
    case Id::mlp_act: return put_field(h.layer, &LayerActs::act, p);
    case Id::final_norm_input: return put_field(h.out, &OutputActs::lnf_in, p);
    case Id::final_norm_rstd: return put_field(h.out, &OutputActs::lnf_rstd, p);
    case Id::final_norm_mean: return put_field(h.out, &OutputActs::lnf_mean, p);
    case Id::final_norm_output: return put_field(h.out, &OutputActs::lnf_out, p);
    case Id::logits_probs: return put_field(h.out, &OutputActs::probs, p);
    case Id::tokens_targets: return put_field(h.out, &OutputActs::targets, p);
    case Id::ws_full_rows: return put_field(h.ws, &Activations::w_full, p);
    case Id::ws_d_residual: return put_field(h.ws, &Activations::w_dres, p);
    case Id::ws_d_norm_output: return put_field(h.ws, &Activations::w_dln, p);
    case Id::ws_dqkv: return put_field(h.ws, &Activations::w_dqkv, p);
    case Id::ws_dctx: return put_field(h.ws, &Activations::w_dctx, p);
    case Id::ws_dact: return put_field(h.ws, &Activations::w_dact, p);
    case Id::ws_dfc1: return put_field(h.ws, &Activations::w_dfc1, p);
    case Id::ws_dfc3: return put_field(h.ws, &Activations::w_dfc3, p);
    case Id::ws_attention_backward: return put_field(h.ws, &Activations::w_attn_bwd, p);
    case Id::ws_rope_table: return put_field(h.ws, &Activations::rope_table, p);
    case Id::ws_loss: return put_field(h.ws, &Activations::w_loss, p);
    case Id::ws_xent: return put_field(h.ws, &Activations::w_xent, p);
    case Id::ws_embedding: return put_field(h.ws, &Activations::w_embed, p);
    case Id::ws_tokens_staging: return put_field(h.ws, &Activations::tokens_staging, p);
    case Id::moe_router_probs:
    case Id::tokens_input:
    case Id::ws_operand_scratch: return false;
    }
    return false;
}

}  // namespace

Activations alloc_activations(Backend& be, const EngineConfig& c) {
    const ModelSpec& ms = c.model;
    const int64_t Rl = c.rows_local(), h = ms.hidden;
    const EngineDType act = c.act == DType::bf16 ? EngineDType::bf16 : c.act == DType::f16 ? EngineDType::f16 : EngineDType::f32;
    const size_t e = (size_t)dtype_bytes(c.act);
    Activations a;
    auto take = [&](MemCategory cat, const EngineBuffer& b) {
        void* p = be.alloc(cat, (size_t)b.bytes(), engine_buffer_name(b.id));
        a.owned.push_back(p);
        return p;
    };
    // The largest 16-bit operand an op is given (elements): every listed buffer in the
    // activation dtype (f32 operands — statistics, logits — are never widened), and the
    // weights (the fused QKV weight, the MLP and output matrices, the learned positions).
    // The backend plans its 16-bit operand scratch for it.
    int64_t largest_operand = 0;
    auto seen = [&](const std::vector<EngineBuffer>& list) {
        for (const EngineBuffer& b : list)
            if (b.dtype == act) largest_operand = std::max(largest_operand, b.elements);
    };
    // The buffer lists are the estimators' ptd-engine profile: what is predicted is what is
    // allocated. Kept per layer and slot, and (recompute) one working set shared by all.
    const Recompute rc = c.recompute();
    const auto kept = engine_layer_buffers(ms, c.micro_batch, c.seq, c.tp, c.sequence_parallel, rc, act, c.flash_attention);
    const auto working =
        engine_recompute_buffers(ms, c.micro_batch, c.seq, c.tp, c.sequence_parallel, rc, act, c.flash_attention);
    seen(kept), seen(working);
    auto alloc_list = [&](LayerActs& la, const std::vector<EngineBuffer>& list) {
        for (const EngineBuffer& b : list) {
            LayerActs probe{};  // only buffers with a place here are allocated
            if (place_buffer({.layer = &probe}, b.id, nullptr)) place_buffer({.layer = &la}, b.id, take(MEM_ACTIVATIONS, b));
        }
    };
    if (c.layers > 0) alloc_list(a.recompute_layer, working);
    a.slot_layers.assign((size_t)c.slots, std::vector<LayerActs>((size_t)c.slot_layers));
    for (int s = 0; s < c.slots; ++s) {
        for (int li = 0; li < c.slot_layers; ++li) {
            LayerActs& la = a.slot_layers[(size_t)s][(size_t)li];
            la = a.recompute_layer;  // the working buffers are shared; the kept ones are per layer
            alloc_list(la, kept);
        }
        if (c.first) a.slot_tokens.push_back((int32_t*)take(MEM_ACTIVATIONS, engine_input_buffers(c.micro_batch, c.seq).at(0)));
    }
    if (c.last) {
        const auto out = engine_output_buffers(ms, c.micro_batch, c.seq, c.tp, (int)c.vocab_padded, c.sequence_parallel, act);
        seen(out);
        for (const EngineBuffer& b : out) {
            OutputActs probe{};
            if (place_buffer({.out = &probe}, b.id, nullptr)) place_buffer({.out = &a.out}, b.id, take(MEM_ACTIVATIONS, b));
        }
    }
    // Workspace: the estimators' list too; attention backward's scratch and the 16-bit
    // operand scratch are as the backend states them (bytes, listed as f32 elements).
    const int64_t attention_scratch_bytes =
        c.layers == 0        ? 0
        : c.flash_attention ? be.flash_attention_backward_workspace(c.act, c.micro_batch, c.seq, c.heads_l(), c.kv_l(),
                                                                     c.head_dim())
                             : be.attention_backward_workspace(c.act, c.micro_batch, c.seq, c.heads_l(), c.kv_l(),
                                                               c.head_dim());
    auto f32_elements = [](int64_t bytes) { return (bytes + 3) / 4; };
    const int64_t HD = c.heads_l() * c.head_dim(), GD = c.kv_l() * c.head_dim();
    if (c.layers > 0)
        largest_operand = std::max({largest_operand, (HD + 2 * GD) * h, HD * h, c.ffn_l() * h});
    if (c.first || c.last) largest_operand = std::max(largest_operand, c.vocab_l() * h);
    // Mixed precision: the output layer's 16-bit dlogits [R, Vl] (written over the f32 logits).
    if (c.last && c.mixed()) largest_operand = std::max(largest_operand, c.rows() * c.vocab_l());
    if (c.first && ms.position == Position::learned) largest_operand = std::max(largest_operand, (int64_t)c.seq * h);
    const auto probe_ws = engine_workspace_buffers(ms, c.micro_batch, c.seq, c.tp, c.sequence_parallel, c.first, c.last,
                                                   c.layers > 0, f32_elements(attention_scratch_bytes), act);
    seen(probe_ws);
    // The widest row a row reduction sees: the norms' C, the biases of the fused QKV and
    // of the MLP's column-parallel layer.
    const int64_t widest_row = std::max({h, HD + 2 * GD, 2 * c.ffn_l()});
    if (c.first) be.plan_embedding_backward(c.rows(), c.vocab_l());
    a.operand_scratch_bytes = be.operand_scratch_bytes(c.act, largest_operand, widest_row);
    for (const EngineBuffer& b : engine_workspace_buffers(ms, c.micro_batch, c.seq, c.tp, c.sequence_parallel, c.first,
                                                          c.last, c.layers > 0, f32_elements(attention_scratch_bytes),
                                                          act, f32_elements(a.operand_scratch_bytes))) {
        Activations probe{};
        if (place_buffer({.ws = &probe}, b.id, nullptr)) place_buffer({.ws = &a}, b.id, take(MEM_WORKSPACE, b));
    }
    be.plan_operand_scratch(c.act, largest_operand, widest_row);
    if (a.rope_table) be.rope_table(a.rope_table, c.seq, c.head_dim(), (float)ms.rope_theta);
    if (c.pp > 1) {
        // Chunk ch sends forward unless it holds the output head, backward unless it holds
        // the embedding.
        for (int ch = 0; ch < c.vpp; ++ch)
            for (int j = 0; j < c.grad_accum; ++j) {
                const bool fwd = !(c.last && ch == c.vpp - 1), bwd = !(c.first && ch == 0);
                a.send_fwd.push_back(fwd ? be.alloc(MEM_COMMUNICATION, (size_t)(Rl * h) * e, "p2p.send_forward") : nullptr);
                a.send_bwd.push_back(bwd ? be.alloc(MEM_COMMUNICATION, (size_t)(Rl * h) * e, "p2p.send_backward") : nullptr);
            }
        if (c.vpp > 1 && c.last)
            for (int j = 0; j < c.grad_accum; ++j)
                a.d_head.push_back(be.alloc(MEM_COMMUNICATION, (size_t)(Rl * h) * e, "p2p.head_gradient"));
    }
    a.d_stream = be.alloc(c.pp > 1 && !c.last ? MEM_COMMUNICATION : MEM_WORKSPACE, (size_t)(Rl * h) * e, "d_stream");
    return a;
}

void free_activations(Backend& be, Activations& a) {
    auto rel = [&](void* p) { be.release(p); };
    for (void* p : a.owned) rel(p);
    rel(a.d_stream);
    for (void* p : a.send_fwd) rel(p);
    for (void* p : a.send_bwd) rel(p);
    for (void* p : a.d_head) rel(p);
    a = Activations{};
}

// ---- passes -----------------------------------------------------------------------------------
//
// Every activation, weight and activation gradient is in cfg.act (written `t` below);
// weight gradients accumulate into the f32 main grads (GEMMs with an f32 C and beta = 1,
// as cuBLASLt does for Megatron's gradient-accumulation fusion); norm statistics, logits,
// softmax and loss are f32.

namespace {

// y [R, out] = x [R, in] · Wᵀ (+ b), the bias fused into the GEMM. With `gelu_pre` (the MLP's
// fc1): gelu_pre = that result (kept for the backward) and y = gelu(gelu_pre), the GELU
// fused into the GEMM's epilogue. With `residual` ([R, out], t): y = residual + x·Wᵀ (+ b),
// the residual read by the GEMM (beta = 1, cuBLASLt's C ≠ D) and the sum rounded once.
void linear_forward(Model& m, void* y, const void* x, const ParamTensor* W, const ParamTensor* b, int64_t R,
                    int64_t out, int64_t in, void* gelu_pre = nullptr, const void* residual = nullptr) {
    const DType t = m.cfg.act;
    Backend::Gemm g;
    g.trans_b = true, g.M = R, g.N = out, g.K = in;
    g.A = x, g.a_type = t, g.lda = in;
    g.B = W->p, g.b_type = t, g.ldb = in;
    g.C = y, g.c_type = t, g.ldc = out;
    g.bias = b ? b->p : nullptr;
    if (residual) g.c_in = residual, g.beta = 1.0f;
    if (gelu_pre) g.epilogue = Backend::Gemm::Epilogue::gelu_aux, g.aux = gelu_pre;
    m.be->gemm(g);
}
// dW (f32) += dyᵀ · x ; db (f32) += Σ dy ; dx (= or +=) dy · W.
void linear_backward(Model& m, void* dx, bool accumulate_dx, const void* dy, const void* x, const ParamTensor* W,
                     const ParamTensor* b, int64_t R, int64_t out, int64_t in) {
    Backend& be = *m.be;
    const DType t = m.cfg.act;
    Backend::Gemm dw;  // dW += dyᵀ · x, with db += Σ_r dy as its epilogue
    dw.trans_a = true, dw.M = out, dw.N = in, dw.K = R, dw.beta = 1.0f;
    dw.A = dy, dw.a_type = t, dw.lda = std::max<int64_t>(out, 1);
    dw.B = x, dw.b_type = t, dw.ldb = std::max<int64_t>(in, 1);
    dw.C = W->g, dw.c_type = DType::f32, dw.ldc = std::max<int64_t>(in, 1);
    if (b) dw.epilogue = Backend::Gemm::Epilogue::bias_grad, dw.bias_grad = b->g;
    be.gemm(dw);
    if (dx) be.gemm(false, false, R, in, out, 1.0f, dy, W->p, accumulate_dx ? 1.0f : 0.0f, dx, t, t);
}

void norm_forward(Model& m, void* out, float* mean, float* rstd, const void* x, const ParamTensor* w,
                  const ParamTensor* b, int64_t rows) {
    const int64_t h = m.cfg.model.hidden;
    const float eps = (float)m.cfg.model.norm_eps;
    const DType t = m.cfg.act;
    if (m.cfg.layernorm()) m.be->layernorm_forward(t, out, mean, rstd, x, w->p, b ? b->p : nullptr, rows, h, eps);
    else m.be->rmsnorm_forward(t, out, rstd, x, w->p, rows, h, eps);
}
// dx = (or, with accumulate_dx, +=) the norm's input gradient.
void norm_backward(Model& m, void* dx, const ParamTensor* w, const ParamTensor* b, const void* dout, const void* x,
                   const float* mean, const float* rstd, int64_t rows, bool accumulate_dx = false) {
    const int64_t h = m.cfg.model.hidden;
    const DType t = m.cfg.act;
    if (m.cfg.layernorm())
        m.be->layernorm_backward(t, dx, w->g, b ? b->g : nullptr, dout, x, mean, rstd, w->p, rows, h, accumulate_dx);
    else m.be->rmsnorm_backward(t, dx, w->g, dout, x, rstd, w->p, rows, h, accumulate_dx);
}

// Exit of a TP region: the partial sums `full` [R, h] become the complete values — all of
// them (all-reduce) or, with SP, this rank's rows (reduce-scatter). Returns the [Rl, h] rows.
// The reduction runs in the activation dtype, as Megatron's.
const void* tp_reduce(Model& m, void* full, StageComm& c) {
    const EngineConfig& cfg = m.cfg;
    const int64_t h = cfg.model.hidden;
    if (cfg.tp == 1) return full;
    ScopedTpComm t(c);
    CommOnStream on_comm(*m.be, m.comm_ready, m.comm_done);
    if (!cfg.sequence_parallel) {
        c.tp->all_reduce(full, cfg.rows() * h, cfg.act, ReduceOp::sum);
        return full;
    }
    c.tp->reduce_scatter(full, cfg.rows_local() * h, cfg.act, ReduceOp::sum);
    return dtype_offset(full, cfg.tp_rank * cfg.rows_local() * h, cfg.act);
}

// Entry of a TP region with SP: this rank's rows [Rl, h] gathered into `full` [R, h].
// Without SP the rows are already complete and are returned as they are.
const void* tp_gather(Model& m, const void* local, void* full, StageComm& c) {
    const EngineConfig& cfg = m.cfg;
    if (!cfg.sequence_parallel) return local;
    const int64_t h = cfg.model.hidden, Rl = cfg.rows_local();
    void* mine = dtype_offset(full, cfg.tp_rank * Rl * h, cfg.act);
    if (mine != local) m.be->copy(mine, local, cfg.act, Rl * h);
    ScopedTpComm t(c);
    CommOnStream on_comm(*m.be, m.comm_ready, m.comm_done);
    c.tp->all_gather(full, Rl * h, cfg.act);
    return full;
}

// Norm of this rank's rows, output gathered to all rows with SP.
void norm_forward_gathered(Model& m, void* out_full, float* mean, float* rstd, const void* x, const ParamTensor* w,
                           const ParamTensor* b, StageComm& c) {
    const EngineConfig& cfg = m.cfg;
    const int64_t Rl = cfg.rows_local(), h = cfg.model.hidden;
    void* dst = cfg.sequence_parallel ? dtype_offset(out_full, cfg.tp_rank * Rl * h, cfg.act) : out_full;
    norm_forward(m, dst, mean, rstd, x, w, b, Rl);
    tp_gather(m, dst, out_full, c);
}
// res_out = x + residual (this rank's [Rl, h] rows, the residual stream), then
// norm_forward_gathered of it: the add fused into the norm (Backend::add_norm_forward).
void add_norm_forward_gathered(Model& m, void* res_out, void* out_full, float* mean, float* rstd, const void* x,
                               const void* residual, const ParamTensor* w, const ParamTensor* b, StageComm& c) {
    const EngineConfig& cfg = m.cfg;
    const int64_t Rl = cfg.rows_local(), h = cfg.model.hidden;
    void* dst = cfg.sequence_parallel ? dtype_offset(out_full, cfg.tp_rank * Rl * h, cfg.act) : out_full;
    const auto kind = cfg.layernorm() ? Backend::NormKind::layernorm : Backend::NormKind::rmsnorm;
    m.be->add_norm_forward(cfg.act, res_out, dst, mean, rstd, x, residual, w->p, b ? b->p : nullptr, Rl, h,
                           (float)cfg.model.norm_eps, kind);
    tp_gather(m, dst, out_full, c);
}

// A transformer layer's sizes on this rank, as layer_forward and layer_backward name them:
// rows (all, and this rank's under sequence parallelism), hidden, micro-batch, sequence, this
// rank's query and KV heads, head size, this rank's FFN width, and the fused QKV width.
struct LayerDims {
    int64_t R, Rl, h, B, T, H, G, D, F, QKV;
};
LayerDims layer_dims(const EngineConfig& cfg) {
    const int64_t H = cfg.heads_l(), G = cfg.kv_l(), D = cfg.head_dim();
    return {cfg.rows(), cfg.rows_local(), cfg.model.hidden, cfg.micro_batch, cfg.seq, H, G, D, cfg.ffn_l(), (H + 2 * G) * D};
}

}  // namespace

void embedding_forward(Model& m, Activations& a, const int32_t* tokens, void* out, StageComm& c) {
    const EngineConfig& cfg = m.cfg;
    Backend& be = *m.be;
    const DType t = cfg.act;
    const int64_t R = cfg.rows(), Rl = cfg.rows_local(), h = cfg.model.hidden;
    const int64_t Vl = cfg.vocab_l(), v0 = cfg.tp_rank * Vl;
    void* full = cfg.sequence_parallel ? a.w_embed : out;
    be.embedding_forward(t, full, tokens, m.wte->p, v0, Vl, R, h);
    const void* mine = tp_reduce(m, full, c);
    if (mine != out) be.copy(out, mine, t, Rl * h);
    if (m.wpe) be.position_forward(t, out, m.wpe->p, cfg.sequence_parallel ? cfg.tp_rank * Rl : 0, Rl, cfg.seq, h);
}

void embedding_backward(Model& m, Activations& a, const int32_t* tokens, const void* dout, StageComm& c) {
    const EngineConfig& cfg = m.cfg;
    Backend& be = *m.be;
    const DType t = cfg.act;
    const int64_t R = cfg.rows(), Rl = cfg.rows_local(), h = cfg.model.hidden;
    const int64_t Vl = cfg.vocab_l(), v0 = cfg.tp_rank * Vl;
    if (m.wpe) be.position_backward(t, m.wpe->g, dout, cfg.sequence_parallel ? cfg.tp_rank * Rl : 0, Rl, cfg.seq, h);
    const void* full = tp_gather(m, dout, a.w_full, c);
    be.embedding_backward(t, m.wte->g, full, tokens, v0, Vl, R, h);
}

// The attention core on the fused qkv: FlashAttention-2 (ctx and the rows' log-sum-exp,
// training.flash_attention) or the materialised probabilities (ctx and probs [b,H,s,s]).
static void attention_core_forward(Model& m, Activations& a, LayerActs& x) {
    const EngineConfig& cfg = m.cfg;
    const int64_t B = cfg.micro_batch, T = cfg.seq, H = cfg.heads_l(), G = cfg.kv_l(), D = cfg.head_dim();
    if (cfg.flash_attention) m.be->flash_attention_forward(cfg.act, x.ctx, x.lse, x.qkv, B, T, H, G, D);
    else m.be->attention_forward(cfg.act, x.ctx, x.probs, x.qkv, B, T, H, G, D, a.w_attn_bwd);
}

void layer_forward(Model& m, Activations& a, int li, LayerActs& x, void* out, StageComm& c) {
    const EngineConfig& cfg = m.cfg;
    Backend& be = *m.be;
    const DType t = cfg.act;
    const LayerParams& P = m.layers[(size_t)li];
    const auto [R, Rl, h, B, T, H, G, D, F, QKV] = layer_dims(cfg);

    // Attention block: x + Wo·attn(norm1(x)). Q, K and V in one GEMM: wq, wk, wv (and bq,
    // bk, bv) are adjacent in the flat buffer, one [(H + 2G)·D, h] weight of this rank's heads.
    norm_forward_gathered(m, x.ln1_out, x.ln1_mean, x.ln1_rstd, x.ln1_in, P.ln1_w, P.ln1_b, c);
    linear_forward(m, x.qkv, x.ln1_out, P.wq, P.bq, R, QKV, h);
    if (cfg.model.position == Position::rope) {
        be.rope_forward(t, x.qkv, QKV, B, T, H, D, 0, a.rope_table, T);
        be.rope_forward(t, dtype_offset(x.qkv, H * D, t), QKV, B, T, G, D, 0, a.rope_table, T);
    }
    attention_core_forward(m, a, x);
    // The row-parallel output projection: a partial sum over TP, so its bias is added after
    // the reduction (in place on the reduced rows); on one TP rank it rides in the GEMM's
    // bias epilogue. Either way the biased output is rounded before the residual add.
    const bool one_tp = cfg.tp == 1;
    linear_forward(m, a.w_full, x.ctx, P.wo, one_tp ? P.bo : nullptr, R, h, H * D);
    const void* attn = tp_reduce(m, a.w_full, c);
    if (P.bo && !one_tp) be.bias_add(const_cast<void*>(attn), P.bo->p, t, Rl, h);  // attn lies in a.w_full

    // MLP block: ln2_in + W2·act(W1·norm2(ln2_in)), ln2_in = attention output + ln1_in formed
    // by the norm's kernel.
    add_norm_forward_gathered(m, x.ln2_in, x.ln2_out, x.ln2_mean, x.ln2_rstd, attn, x.ln1_in, P.ln2_w, P.ln2_b, c);
    if (cfg.swiglu()) {
        linear_forward(m, x.fc1, x.ln2_out, P.w1, P.b1, R, F, h);
        linear_forward(m, x.fc3, x.ln2_out, P.w3, P.b3, R, F, h);
        be.swiglu_forward(t, x.act, x.fc1, x.fc3, R * F);
    } else {
        linear_forward(m, x.act, x.ln2_out, P.w1, P.b1, R, F, h, x.fc1);  // fc1 kept, act = gelu(fc1)
    }
    if (one_tp) {  // out = ln2_in + act · W2ᵀ + b2: bias epilogue and beta = 1, one GEMM
        linear_forward(m, out, x.act, P.w2, P.b2, R, h, F, nullptr, x.ln2_in);
        return;
    }
    linear_forward(m, a.w_full, x.act, P.w2, nullptr, R, h, F);
    const void* mlp = tp_reduce(m, a.w_full, c);
    be.bias_residual_add(out, mlp, P.b2 ? P.b2->p : nullptr, x.ln2_in, t, Rl, h);  // one kernel on a GPU
}

void layer_backward(Model& m, Activations& a, int li, LayerActs& x, const void* dout_in, void* din, StageComm& c) {
    const EngineConfig& cfg = m.cfg;
    Backend& be = *m.be;
    const DType t = cfg.act;
    const LayerParams& P = m.layers[(size_t)li];
    const auto [R, Rl, h, B, T, H, G, D, F, QKV] = layer_dims(cfg);
    // The residual stream's gradient is carried in din, in place: each norm's backward adds
    // its input gradient to it (accumulate_dx), no copy + add.
    if (din != dout_in) be.copy(din, dout_in, t, Rl * h);
    const void* dout = din;

    // MLP block. dout is the gradient of out = ln2_in + mlp(ln2_in).
    if (P.b2) be.bias_grad(P.b2->g, dout, t, Rl, h);
    const void* g = tp_gather(m, dout, a.w_full, c);                               // [R, h]
    be.gemm(true, false, h, F, R, 1.0f, g, x.act, 1.0f, P.w2->g, t, DType::f32);      // dW2 += gᵀ · act
    if (cfg.swiglu()) {
        be.gemm(false, false, R, F, h, 1.0f, g, P.w2->p, 0.0f, a.w_dact, t, t);       // dact = g · W2
        be.swiglu_backward(t, a.w_dfc1, a.w_dfc3, a.w_dact, x.fc1, x.fc3, R * F);
        linear_backward(m, a.w_dln, false, a.w_dfc1, x.ln2_out, P.w1, P.b1, R, F, h);
        linear_backward(m, a.w_dln, true, a.w_dfc3, x.ln2_out, P.w3, P.b3, R, F, h);
    } else {
        Backend::Gemm d;  // dfc1 = (g · W2) · gelu'(fc1): the GELU backward as the GEMM's epilogue
        d.M = R, d.N = F, d.K = h;
        d.A = g, d.a_type = t, d.lda = h;
        d.B = P.w2->p, d.b_type = t, d.ldb = F;
        d.C = a.w_dfc1, d.c_type = t, d.ldc = F;
        d.epilogue = Backend::Gemm::Epilogue::dgelu, d.aux = x.fc1;
        be.gemm(d);
        linear_backward(m, a.w_dln, false, a.w_dfc1, x.ln2_out, P.w1, P.b1, R, F, h);
    }
    const void* dln2 = tp_reduce(m, a.w_dln, c);
    norm_backward(m, din, P.ln2_w, P.ln2_b, dln2, x.ln2_in, x.ln2_mean, x.ln2_rstd, Rl, true);  // din = d ln2_in

    // Attention block.
    if (P.bo) be.bias_grad(P.bo->g, din, t, Rl, h);
    g = tp_gather(m, din, a.w_full, c);
    be.gemm(false, false, R, H * D, h, 1.0f, g, P.wo->p, 0.0f, a.w_dctx, t, t);        // dctx = g · Wo
    be.gemm(true, false, h, H * D, R, 1.0f, g, x.ctx, 1.0f, P.wo->g, t, DType::f32);   // dWo += gᵀ · ctx
    // Selective recompute (Korthikanti et al. 2022, §5): the probabilities were not kept;
    // the attention core runs again from the saved fused qkv (post-RoPE). The context it
    // writes again is bit-identical and no longer read (dWo above was its last use).
    // With flash attention the log-sum-exp is recomputed, and the context again with it (the
    // flash backward reads it: the same bits).
    if (cfg.recompute_selective) attention_core_forward(m, a, x);
    if (cfg.flash_attention)
        be.flash_attention_backward(t, a.w_dqkv, a.w_dctx, x.ctx, x.lse, x.qkv, B, T, H, G, D, a.w_attn_bwd);
    else
        be.attention_backward(t, a.w_dqkv, a.w_dctx, x.probs, x.qkv, B, T, H, G, D, a.w_attn_bwd);
    if (cfg.model.position == Position::rope) {
        be.rope_backward(t, a.w_dqkv, QKV, B, T, H, D, 0, a.rope_table, T);
        be.rope_backward(t, dtype_offset(a.w_dqkv, H * D, t), QKV, B, T, G, D, 0, a.rope_table, T);
    }
    // The fused QKV backward: one GEMM for dWqkv (wq, wk, wv grads are adjacent too), one for dx.
    linear_backward(m, a.w_dln, false, a.w_dqkv, x.ln1_out, P.wq, P.bq, R, QKV, h);
    const void* dln1 = tp_reduce(m, a.w_dln, c);
    norm_backward(m, din, P.ln1_w, P.ln1_b, dln1, x.ln1_in, x.ln1_mean, x.ln1_rstd, Rl, true);  // din = d ln1_in
}

namespace {

// Final norm, logits (f32) and the vocab-parallel cross entropy: per-row losses in
// a.w_loss, their sum added to the device scalar *loss_acc (when not null) and, with
// `loss_scale` given (backward), dlogits = loss_scale · (softmax − onehot) in place of the
// logits in a.out.probs — in cfg.act (16-bit in mixed precision, rows 2·Vl apart: each in
// the first half of its f32 logits row, as llm.c and Megatron narrow dlogits), so that both
// backward GEMMs of the output layer multiply 16-bit operands. With tp = 1 no all-reduce separates the phases: one fused op
// (one kernel on a GPU). With tp > 1 Megatron's four phases around the TP all-reduces
// (max, then Σexp and the target logit).
void output_loss(Model& m, Activations& a, double* loss_acc, const float* loss_scale, StageComm& c) {
    const EngineConfig& cfg = m.cfg;
    Backend& be = *m.be;
    const int64_t R = cfg.rows(), h = cfg.model.hidden, Vl = cfg.vocab_l(), v0 = cfg.tp_rank * Vl;
    const int64_t V = cfg.model.vocab;
    OutputActs& o = a.out;
    norm_forward_gathered(m, o.lnf_out, o.lnf_mean, o.lnf_rstd, o.lnf_in, m.lnf_w, m.lnf_b, c);
    be.gemm(false, true, R, Vl, h, 1.0f, o.lnf_out, m.wout->p, 0.0f, o.probs, cfg.act, DType::f32);  // logits [R, Vl]
    if (cfg.tp == 1) {
        be.xent_fused(a.w_loss, loss_scale ? o.probs : nullptr, cfg.act, o.probs, o.targets,
                      loss_scale ? *loss_scale : 0.0f, R, Vl, v0, V);
        if (loss_acc) be.sum_into(loss_acc, a.w_loss, R);
        return;
    }
    float* rowmax = a.w_xent;
    float* sums = a.w_xent + R;  // sumexp [R] then target logit [R]: one all-reduce for both
    be.xent_row_max(rowmax, o.probs, R, Vl, v0, V);
    if (cfg.tp > 1) {
        ScopedTpComm t(c);
        CommOnStream on_comm(be, m.comm_ready, m.comm_done);
        c.tp->all_reduce_max(rowmax, R);
    }
    be.xent_sums(sums, sums + R, o.probs, rowmax, o.targets, R, Vl, v0, V);
    if (cfg.tp > 1) {
        ScopedTpComm t(c);
        CommOnStream on_comm(be, m.comm_ready, m.comm_done);
        c.tp->all_reduce_sum(sums, 2 * R);
    }
    be.xent_finish(a.w_loss, o.probs, rowmax, sums, sums + R, R, Vl, v0, V);
    if (loss_acc) be.sum_into(loss_acc, a.w_loss, R);  // stays on the device
    if (loss_scale) be.xent_backward(o.probs, cfg.act, o.probs, o.targets, *loss_scale, R, Vl, v0, V);  // in place
}

}  // namespace

void output_forward(Model& m, Activations& a, double* loss_acc, StageComm& c) {
    output_loss(m, a, loss_acc, nullptr, c);
}

void output_forward_backward(Model& m, Activations& a, float loss_scale, void* d_in, double* loss_acc,
                             StageComm& c) {
    const EngineConfig& cfg = m.cfg;
    Backend& be = *m.be;
    const DType t = cfg.act;
    const int64_t R = cfg.rows(), h = cfg.model.hidden, Vl = cfg.vocab_l();
    output_loss(m, a, loss_acc, &loss_scale, c);  // dlogits (t) in o.probs, rows dlogits_ld apart
    OutputActs& o = a.out;
    const int64_t ld_dl = Backend::dlogits_ld(t, Vl);
    // dWout (f32) += dlᵀ · x and dx (t) = dl · Wout: operands of one type t.
    Backend::Gemm dw;
    dw.trans_a = true, dw.M = Vl, dw.N = h, dw.K = R, dw.beta = 1.0f;
    dw.A = o.probs, dw.a_type = t, dw.lda = ld_dl;
    dw.B = o.lnf_out, dw.b_type = t, dw.ldb = h;
    dw.C = m.wout->g, dw.c_type = DType::f32, dw.ldc = h;
    be.gemm(dw);
    Backend::Gemm dx;
    dx.M = R, dx.N = h, dx.K = Vl;
    dx.A = o.probs, dx.a_type = t, dx.lda = ld_dl;
    dx.B = m.wout->p, dx.b_type = t, dx.ldb = h;
    dx.C = a.w_dln, dx.c_type = t, dx.ldc = h;
    be.gemm(dx);
    const void* dln = tp_reduce(m, a.w_dln, c);
    norm_backward(m, d_in, m.lnf_w, m.lnf_b, dln, o.lnf_in, o.lnf_mean, o.lnf_rstd, cfg.rows_local());
}

}  // namespace ptd::engine
