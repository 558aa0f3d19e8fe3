// model.h — the decoder-only transformer of ptd-engine, as one pipeline stage on one
// tensor-parallel rank: its parameters (one flat buffer, with views per tensor), its
// saved activations (the ptd-engine activation profile of the estimators, buffer for
// buffer), and hand-written forward and backward passes that call only Backend kernels
// and Communicator collectives.
//
// Families: gpt (LayerNorm, GELU MLP, learned positions, tied embeddings, biases) and
// llama (RMSNorm, SwiGLU, RoPE, GQA, untied output). Megatron-style tensor parallelism:
// Q/K/V and fc1 (gate/up) column-parallel, attention output and fc2 (down) row-parallel,
// vocab-parallel embedding and cross entropy; with sequence parallelism the residual
// stream, norms and dropout-free element-wise work run on 1/tp of the token rows.
//
// Notation: b micro-batch, s sequence, h hidden, R = b·s token rows, Rl = R/tp with SP
// (else R), H/G local query/kv heads, D head dim, F local MLP width, Vl local vocab rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ptd/common/diagnostic.h"
#include "ptd/engine/backend.h"
#include "ptd/engine/comm.h"
#include "ptd/spec/job_spec.h"
#include "ptd/layout/layout.h"

namespace ptd::engine {

// Everything about this rank's share of the job that the math depends on. Built from
// the job and the shared rank layout; rejects what the CPU engine does not support.
struct EngineConfig {
    ModelSpec model;
    int world = 1, rank = 0;
    int tp = 1, pp = 1, dp = 1;
    int tp_rank = 0, pp_rank = 0, dp_rank = 0;
    bool sequence_parallel = false;
    int zero = 0;                  // 0, or 1 (ZeRO-1; Megatron's distributed optimizer maps here)
    bool recompute_full = false;   // full activation recomputation (keep layer inputs only)
    bool recompute_selective = false;  // selective: the attention core is recomputed in backward
    bool flash_attention = false;  // training.flash_attention: FlashAttention-2 (lse kept, no [b,H,s,s] probs)
    // training.precision: f32, or bf16 / f16 mixed precision (Megatron's recipe): the model
    // weights, activations and their gradients in `act`; main grads, master weights, Adam
    // state, norm statistics, softmax and loss in f32.
    DType act = DType::f32;
    bool mixed() const { return act != DType::f32; }
    int micro_batch = 1, grad_accum = 1, seq = 0;
    int64_t global_batch = 1;      // sequences per step = micro_batch · grad_accum · dp
    int64_t vocab_padded = 0;      // multiple of estimate.vocab_pad · tp
    int layer0 = 0, layers = 0;    // global index of this stage's first layer, and count (all chunks)
    bool first = true, last = true;// first / last pipeline stage
    // Interleaved 1F1B (vpp > 1): this stage holds vpp model chunks; chunk c is virtual stage
    // c·pp + pp_rank. Local layers are chunk-major: chunk c's layers are local indices
    // chunk_first(c) .. chunk_first(c) + chunk_layers[c] − 1, global chunk_layer0[c] + k.
    // The embedding is in chunk 0 of the first stage, the output head in chunk vpp − 1 of
    // the last. With vpp = 1 there is one chunk: the stage.
    int vpp = 1;
    std::vector<int> chunk_layer0, chunk_layers;
    // Activation slots: saved buffers of one chunk's layers for one micro-batch each.
    // vpp = 1: micro-batches in flight (1F1B), min(pp − pp_rank, m); vpp > 1: chunks in
    // flight, min(2(pp − pp_rank − 1) + (vpp − 1)·pp + 1, m·vpp) (the estimators' count).
    int slots = 1;
    int slot_layers = 0;           // layers per slot: the largest chunk

    int chunk_first(int c) const {
        int f = 0;
        for (int k = 0; k < c; ++k) f += chunk_layers[(size_t)k];
        return f;
    }
    int global_layer(int li) const {
        for (size_t c = 0; c < chunk_layers.size(); ++c) {
            if (li < chunk_layers[c]) return chunk_layer0[c] + li;
            li -= chunk_layers[c];
        }
        return -1;
    }

    // Derived widths (local to this TP rank).
    int64_t rows() const { return (int64_t)micro_batch * seq; }
    int64_t rows_local() const { return sequence_parallel ? rows() / tp : rows(); }
    int64_t heads_l() const { return model.heads / tp; }
    int64_t kv_l() const { return model.kv_heads / tp; }
    int64_t head_dim() const { return model.hidden / model.heads; }
    int64_t ffn_l() const { return model.ffn_hidden / tp; }
    int64_t vocab_l() const { return vocab_padded / tp; }
    bool layernorm() const { return model.norm == Norm::layernorm; }
    bool swiglu() const { return model.activation == Activation::swiglu; }
    bool output_is_embedding() const { return model.tied_embeddings && pp == 1; }
    Recompute recompute() const {
        return recompute_full ? Recompute::full : recompute_selective ? Recompute::selective : Recompute::none;
    }
};

// Validates that the engine can run the job on `rank` and derives the config. Errors name
// the job key, what was given and what the engine supports.
Result<EngineConfig> make_engine_config(const JobSpec& job, const RankLayout& layout, int rank);

// One parameter tensor: a view of the flat parameter and gradient buffers.
struct ParamTensor {
    std::string name;        // e.g. "layers.3.attn.wq" (global layer index)
    int64_t offset = 0;      // into the flat buffers, elements
    int64_t numel = 0;
    bool weight_decay = false;   // matrices decay; norms, biases and positions do not
    bool tp_partial_grad = false;// SP: each TP rank sees only its rows → grads summed over tp
    bool in_norm = true;         // counted in the global grad norm on this rank (each element once)
    void* p = nullptr;     // model weights (cfg.act: f32, or the 16-bit copy in mixed precision)
    float* g = nullptr;    // f32 (main) gradient
};

// Pointers into Model::tensors for one layer (null when the family has no such tensor).
struct LayerParams {
    ParamTensor *ln1_w = nullptr, *ln1_b = nullptr;
    // [H·D, h], [G·D, h], [G·D, h], adjacent in the flat buffer: together the one
    // [(H + 2G)·D, h] weight of the fused QKV GEMM (and bq, bk, bv its one bias).
    ParamTensor *wq = nullptr, *wk = nullptr, *wv = nullptr;
    ParamTensor *bq = nullptr, *bk = nullptr, *bv = nullptr;
    ParamTensor *wo = nullptr, *bo = nullptr;                 // [h, H·D], [h]
    ParamTensor *ln2_w = nullptr, *ln2_b = nullptr;
    ParamTensor *w1 = nullptr, *b1 = nullptr;                 // gpt fc1 [F, h] / llama gate [F, h]
    ParamTensor *w3 = nullptr, *b3 = nullptr;                 // llama up [F, h]
    ParamTensor *w2 = nullptr, *b2 = nullptr;                 // fc2 / down [h, F]
};

struct Model {
    Backend* be = nullptr;
    EngineConfig cfg;
    std::vector<ParamTensor> tensors;  // in flat-buffer order
    std::vector<LayerParams> layers;   // this stage's layers
    ParamTensor *wte = nullptr, *wpe = nullptr;      // first stage: [Vl, h], [s, h]
    ParamTensor *lnf_w = nullptr, *lnf_b = nullptr;  // last stage
    ParamTensor *wout = nullptr;                     // last stage output [Vl, h] (== wte when tied and pp == 1)
    bool wout_is_tied_copy = false;                  // tied embeddings, pp > 1: last stage's copy of wte
    void* params = nullptr;            // flat [flat_numel] in cfg.act (MEM_PARAMS)
    float* grads = nullptr;            // flat [flat_numel], f32 main grads (MEM_GRADS)
    int64_t numel = 0;                 // parameters: the tensors fill [0, numel)
    int64_t flat_numel = 0;            // buffer length: numel, padded for equal ZeRO-1 shards (zeros)
    // Every communicator call runs between these (CommOnStream): compute → comm → compute.
    Event comm_ready, comm_done;
};

// Builds the stage's tensors, allocates the flat buffers and initialises every element
// deterministically from (seed, tensor name, global element index) — the same value on
// any layout. Weights N(0, 0.02), residual projections N(0, 0.02/√(2L)), norms 1, biases 0.
Model build_model(Backend& be, const EngineConfig& cfg, uint64_t seed);
void free_model(Model& m);

// The saved activations of one layer for one micro-batch in flight (see
// estimators' engine_layer_buffers for the list and shapes).
// Pointers typed void* hold cfg.act elements; mean/rstd and the logits are always f32.
struct LayerActs {
    void* ln1_in;                                      // [Rl,h], the layer input
    float *ln1_mean, *ln1_rstd;                        // [R] (f32)
    void* ln1_out;                                     // [R,h]
    void *qkv, *probs, *ctx;                           // [R,(H+2G)·D], [b,H,s,s], [R,H·D]
    float* lse;                                        // flash attention: [b,H,s] (f32) instead of probs
    void* ln2_in;
    float *ln2_mean, *ln2_rstd;
    void* ln2_out;
    void *fc1, *fc3, *act;                             // gpt: fc1 = pre-GELU; llama: fc1 = gate, fc3 = up; act [R,F]
};
struct OutputActs {
    void* lnf_in;                                     // [Rl,h]
    float *lnf_mean, *lnf_rstd;                       // [R] (f32)
    void* lnf_out;                                    // [R,h]
    float* probs;                                     // logits → softmax [R, Vl] (f32)
    int32_t* targets;                                 // [R]
};

// Every activation buffer of the stage, allocated once (MEM_ACTIVATIONS) for `slots`
// micro-batches in flight, plus workspaces (MEM_WORKSPACE) and p2p buffers (MEM_COMMUNICATION).
struct Activations {
    std::vector<std::vector<LayerActs>> slot_layers;  // [slot][layer of the chunk]
    std::vector<int32_t*> slot_tokens;                // first stage: token ids [R] per slot
    // Recompute: the one working set (full: every buffer but ln1_in; selective: probs),
    // shared by every layer of every slot. Null members without recompute.
    LayerActs recompute_layer{};
    std::vector<void*> owned;                         // every activation buffer, for free_activations
    OutputActs out{};
    // Workspaces for one layer's backward and the output head.
    // (cfg.act unless marked f32)
    void *w_full = nullptr;       // [R, max(h, ...)] gathered / partial row-parallel output
    void *w_dres = nullptr;       // [Rl, h] full recompute: the rebuilt layer's output (not read)
    void *w_dln = nullptr;        // [R, h] gradient of a norm output (partial before the TP reduce)
    void *w_dqkv = nullptr, *w_dctx = nullptr;  // [R, (H+2G)·D], [R, H·D]
    void *w_dact = nullptr, *w_dfc1 = nullptr, *w_dfc3 = nullptr;
    float *w_loss = nullptr;      // [R] (f32)
    float *w_xent = nullptr;      // [3R]: rowmax, sumexp, target logit (f32); tp > 1 only
    void *w_embed = nullptr;      // [R, h] embedding output before the SP reduce-scatter
    int32_t* tokens_staging = nullptr;  // first / last stage: one micro-batch's ids [b, s+1] as uploaded
    void* w_attn_bwd = nullptr;   // attention_backward's scratch (Backend::attention_backward_workspace bytes)
    float* rope_table = nullptr;  // RoPE: cos and sin of every position's angles [2, s, D/2] (f32), built once
    // The backend's scratch for 16-bit operands (Backend::plan_operand_scratch): owned by
    // the backend, planned at start-up; here only its size, for the workspace list.
    int64_t operand_scratch_bytes = 0;
    // Pipeline buffers: one per (chunk, micro-batch) of a step, index c·m + j, so async
    // sends never alias (null where that chunk sends nothing in that direction).
    std::vector<void*> send_fwd, send_bwd;   // [Rl, h] each (cfg.act)
    // vpp > 1, last stage: the output head runs at the end of the last chunk's forward; the
    // gradient of its input [Rl, h] waits here (one per micro-batch) for that chunk's backward.
    std::vector<void*> d_head;
    void* d_stream = nullptr;                // [Rl, h] gradient flowing down the stage (p2p receive target)
};
Activations alloc_activations(Backend& be, const EngineConfig& cfg);
void free_activations(Backend& be, Activations& a);

// Communication and time accounting the passes use.
struct TimelineRecorder;  // timing.h
struct StageComm {
    Communicator* tp = nullptr;
    double* tp_seconds = nullptr;   // time spent in TP collectives is added here
    // On recorded steps: every TP collective becomes a `tp` block on the communication
    // stream, tagged with the block (micro-batch, chunk) it runs inside.
    TimelineRecorder* timeline = nullptr;
    int micro_batch = -1, chunk = -1;
};

// Forward of the embedding (first stage): tokens [R] on device → out [Rl, h].
void embedding_forward(Model& m, Activations& a, const int32_t* tokens, void* out, StageComm& c);
// Backward: dout [Rl, h] → wte (and wpe) grads.
void embedding_backward(Model& m, Activations& a, const int32_t* tokens, const void* dout, StageComm& c);

// Forward of local layer `li` for the micro-batch whose buffers are `acts`; writes the
// layer output [Rl, h] to `out`.
void layer_forward(Model& m, Activations& a, int li, LayerActs& acts, void* out, StageComm& c);
// Backward: dout [Rl, h] → din [Rl, h] (may alias dout); accumulates parameter grads.
void layer_backward(Model& m, Activations& a, int li, LayerActs& acts, const void* dout, void* din,
                    StageComm& c);

// Last stage: final norm, logits, vocab-parallel cross entropy and its backward at once.
// Reads out.lnf_in and out.targets; adds Σ loss over the R rows to the device scalar
// *loss_acc (f64; null: not counted; nothing is read back to the host); writes the
// gradient of lnf_in to `d_in` ([Rl, h], cfg.act); `loss_scale` = 1 / (tokens in the
// global batch), times the fp16 loss scale.
void output_forward_backward(Model& m, Activations& a, float loss_scale, void* d_in, double* loss_acc,
                             StageComm& c);
// Forward only (evaluation): adds Σ loss over the rows to *loss_acc.
void output_forward(Model& m, Activations& a, double* loss_acc, StageComm& c);

}  // namespace ptd::engine
