// memory.cpp — bytes on one rank of each pipeline stage: model states (weights, gradients,
// optimizer state per precision, optimizer and ZeRO stage), activations saved for backward
// at the schedule's peak, temporary and communication buffers, and the fixed overheads.
// Sources: mixed-precision state bytes — Micikevicius et al. 2018 and Megatron-LM's
// distributed optimizer doc (docs/source/api-guide/dist_optimizer.md); ZeRO 2 + 2 + K —
// Rajbhandari et al. 2020 §3; activations per layer — Korthikanti et al. 2022 §4 (Table 2)
// generalised to GQA, SwiGLU, MoE and flash attention; in-flight micro-batches of 1F1B and
// the interleaved schedule — Narayanan et al. 2021 §2.2; the ptd-engine profile is the
// engine's own buffer list (engine_buffers.cpp). docs/estimators.md writes every term out.
// FP8 (issue 15 point 3): Transformer Engine's cached FP8 weights (rowwise + columnwise copy,
// the latter because Hopper's FP8 GEMM is TN-only; TE 2.x Float8Tensor / MXFP8Tensor usages),
// delayed scaling's amax history (recipe.DelayedScaling amax_history_len), and the FP8 copy
// of each linear input TE saves for wgrad instead of the bf16 input (te.Linear's
// save_for_backward of the quantized input, columnwise usage only). torchao's Float8Linear
// saves the bf16 tensors, so its activations stay those of bf16.
// torchtitan / PyTorch runtime (ttmem, training.framework = "torchtitan"): DTensor sequence
// parallelism saves the all-gathered linear inputs (torchtitan parallelize_llama.py apply_tp;
// torchao float8_tensor_parallel.py gathers them in float8), loss_parallel's backward
// (torch/distributed/tensor/parallel/loss.py), the compiled loss (torchtitan
// components/loss.py), torch.distributed.pipelining's per-micro-batch receive buffers and
// kept outputs (torch/distributed/pipelining/stage.py).
// Offload: what leaves the GPU for host memory — ZeRO-Offload (Ren et al. 2021 §4), ZeRO-3
// offload_param (ZeRO-Infinity, Rajbhandari et al. 2021); host RAM per node from NVIDIA's DGX
// datasheets, PCIe per GPU from the link generation (host_link_defaults).
// NeMo / Megatron-Bridge (oomnemo): bf16 gradient buffers (Megatron-core DDP config
// grad_reduce_in_fp32 = False in the NeMo 2.0 and Megatron-Bridge performance recipes),
// TE's FP8 weights held as a shard under ZeRO-3 / Megatron-FSDP (fp8_param_gather), and
// Megatron-core's activation offloading (TransformerConfig cpu_offloading_num_layers;
// Transformer Engine's get_cpu_offload_context).
// Megatron-core MoE and TE workspaces (issue 29 point 9, checked against Megatron-LM's CI
// memory): TE's grouped-GEMM and userbuffers cuBLAS workspaces (tews; TE
// cpp_extensions/gemm.py), and the routing probabilities' multiply inside the experts'
// activation (moeprobs; Megatron-core transformer/moe/experts.py since 2025-04).
#include "model/estimate_internal.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace ptd {

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
    return state_bytes_per_param(precision, optimizer, zero, distributed_optimizer, shard, OptimizerStateWidths{});
}

// oom4: the states' widths from the job. Megatron-LM's precision-aware optimizer
// (--use-precision-aware-optimizer; Transformer Engine's FusedAdam keeps master_param,
// exp_avg, exp_avg_sq in the dtypes given) and Apex's DistributedFusedAdam (NeMo 1.x optim
// `dtype` for exp_avg / exp_avg_sq and, with store_params, the master shard; with
// store_params = False no master shard: "none").
OptimizerStateWidths optimizer_state_widths(const TrainingSpec& t) {
    OptimizerStateWidths w;
    w.main = state_dtype_bytes(t.main_params_dtype);
    w.exp_avg = state_dtype_bytes(t.exp_avg_dtype);
    w.exp_avg_sq = state_dtype_bytes(t.exp_avg_sq_dtype);
    return w;
}

Sharding effective_sharding(Framework framework, int pp, int zero, bool distributed_optimizer) {
    if (framework == Framework::torchtitan && pp > 1 && zero >= 2) return {0, true};  // ttfsdp (estimate.h)
    return {zero, distributed_optimizer};
}

StateBytes state_bytes_per_param(Precision precision, Optimizer optimizer, int zero, bool distributed_optimizer,
                                 double shard, const OptimizerStateWidths& widths) {
    const double N = std::max(shard, 1.0);
    // momentum (SGD: exp_avg), or Adam's m + v; fp32 each by default (4 + 4)
    const double moments = optimizer == Optimizer::sgd ? widths.exp_avg : widths.exp_avg + widths.exp_avg_sq;
    const double master = widths.main;  // fp32 master weights by default (mixed precision only)
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
        const double opt = master + moments + (bf16 ? 0.0 : 4.0);  // master (+ fp32 grads for fp16)
        b.optimizer = distributed_optimizer ? opt / N : opt;
        return b;
    }
    // DeepSpeed ZeRO (Rajbhandari et al. 2020): 2 + 2 + K with K = 12 for Adam.
    b.params = zero >= 3 ? 2.0 / N : 2.0;
    b.grads = zero >= 2 ? 2.0 / N : 2.0;
    b.optimizer = (master + moments) / N;
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

// ---- activations --------------------------------------------------------------------------

namespace est {

// Bytes one layer keeps under torchtitan's op-level selective activation checkpointing
// (torchtitan parallelize_llama.py, `_save_list` and `_custom_policy`; selective_ac_option
// = "op"). The block is a checkpoint whose policy saves the output of every aten.mm except
// each second one (counted per block in forward order), the outputs of the SDPA flash /
// efficient kernels (attention output + fp32 log-sum-exp) and of the TP reduce-scatters;
// everything else (norms, RoPE, SwiGLU, the dropped matmuls) runs again in backward from
// the saved block input. Matmuls in order: Q, K, V, O, then w1 (gate), w3 (up), w2 (down)
// for SwiGLU or fc1, fc2 for GELU, so Q, V, w1, w2 (SwiGLU) or Q, V, fc1 (GELU) are saved.
// Under TP a matmul's local output is its shard (column-parallel) or the full-width
// partial sum before the reduction (row-parallel O and down projection).
double layer_activation_torchtitan_op(const LayoutDerived& L) {
    const double T = L.tokens, e = L.e, h = L.h;
    const double r = L.sp ? 1.0 / L.t : 1.0;
    const double hd = L.heads_l * L.d, kvd = L.kv_l * L.d;
    const double k = L.moe ? L.m->top_k : 1.0;  // MoE: the routed copies, as a dense MLP each
    // Local output width of each matmul in forward order (a fixed array: the planner calls
    // this for every layout and allocates nothing).
    const double swiglu_mm[7] = {hd, kvd, kvd, h, k * L.f_l, k * L.f_l, k * h};
    const double gelu_mm[6] = {hd, kvd, kvd, h, k * L.f_l, k * h};
    const double* mm = L.swiglu ? swiglu_mm : gelu_mm;
    const int n_mm = L.swiglu ? 7 : 6;
    double bytes = e * T * h * r;  // the checkpoint's input (the block input)
    for (int i = 0; i < n_mm; i += 2) bytes += e * T * mm[i];  // the 1st, 3rd, ... matmul
    if (L.flash) bytes += e * T * hd + 4.0 * T * L.heads_l;  // SDPA output + fp32 log-sum-exp
    if (L.sp) bytes += 2.0 * e * T * h * r;                 // the two reduce-scatter outputs
    return bytes;
}

// ttmem: bytes per element of the all-gathered input a DTensor column-parallel linear saves.
// torchtitan's TP (parallelize_llama.py apply_tp) gathers the sequence-sharded norm output
// with PrepareModuleInput(Shard(1) -> Replicate()) in front of the attention and the MLP, an
// autograd op of its own (its backward is a reduce-scatter that needs nothing saved); the
// matmuls of Q, K, V (and of w1, w3) then save that gathered, full-sequence tensor, where
// Megatron's sequence parallelism saves the sharded norm output and gathers it again in
// backward (Korthikanti et al. 2022 §4.2.2). With torchao float8 TP (Float8ColwiseParallel /
// PrepareFloat8ModuleInput, tensorwise recipe) the input is cast to float8 before the
// all-gather, so the gathered tensor holds 1 byte per element.
double dtensor_gathered_bytes(const LayoutDerived& L) { return L.fp8 == Fp8Recipe::tensorwise ? 1.0 : L.e; }

// f_l-wide tensors a routed expert's MLP keeps per token copy: FC1's output(s) (gate and up for
// SwiGLU) and the activation's output (FC2's input); moeprobs: where the probabilities are
// multiplied into a non-gated activation without a fused kernel (L.moe_probs_save_act), the
// multiply saves the activation's output too (torch's mul saves both operands; the fp32
// product is cast back to 16 bits as FC2's input). SwiGLU's fused weighted kernel
// (weighted_bias_swiglu_impl, Megatron's default bias_swiglu_fusion) saves only its input.
static double expert_mlp_kept(const LayoutDerived& L) {
    return (L.swiglu ? 3.0 : 2.0) + (L.moe_probs_save_act ? 1.0 : 0.0);
}

// moeprobs: Megatron-core's "memory efficient token permutation" (NVIDIA/Megatron-LM 2659630721,
// 2025-04-09, in core 0.13) moved the multiply by the routing probabilities from the unpermute
// into the experts (transformer/moe/experts.py TEGroupedMLP bias_act_func); a job that names an
// earlier stack version keeps the old place (not modelled: the unpermute then saves the experts'
// h-wide output instead).
bool moe_probs_in_activation(const TrainingSpec& t) {
    return runs_megatron_core(t.framework) && (t.framework_version == 0 || t.framework_version >= 202504);
}

// Bytes one layer saves for backward, one micro-batch, one rank, recompute = none unless
// the profile says otherwise. Megatron profile: Korthikanti et al. 2022 §4, generalised.
double layer_activation_megatron(const LayoutDerived& L, Recompute rc) {
    const double T = L.tokens, e = L.e, h = L.h;
    const double r = L.sp ? 1.0 / L.t : 1.0;  // outside the TP region: sharded only with SP
    const double hd = L.heads_l * L.d, kvd = L.kv_l * L.d;
    const double s = L.s_local * L.c;          // keys span the whole sequence (CP ring)
    if (rc == Recompute::full) return e * T * h * r / (L.distribute_saved ? L.t : 1.0);  // the layer input only (papers: 1/t of it when distributed)
    if (rc == Recompute::selective && L.rc_style == RecomputeStyle::torchtitan_op) return layer_activation_torchtitan_op(L);
    double bytes = 0;
    // Attention block: LN1 input and output, Q, K, V, context (input of the output projection).
    bytes += 2 * e * T * h * r;
    if (L.mla) {
        // mla: Megatron-core MLASelfAttention saves the q / kv latents twice (the latent norm's
        // input, and its output as the column-parallel up projection's input; sequence-sharded
        // under SP), Q and K of width d + dr and V of width dv per local head (the core
        // attention's inputs; the fused MLA RoPE writes new query / key tensors and the up
        // projections' outputs are freed), and the a_l·dv context. The k_pos_emb RoPE part is
        // not saved (fused_apply_mla_rope_for_kv needs only the cos / sin tables).
        bytes += 2.0 * e * T * r * (L.q_lora + L.kv_lora);
        bytes += e * T * L.heads_l * (2.0 * L.d_qk + L.d_v) + e * T * L.heads_l * L.d_v;
    } else {
        bytes += e * T * (hd + 2 * kvd) + e * T * hd;
        // mla: --qk-layernorm: the q / k norms save their inputs (the RoPE after them is fused
        // and saves nothing); their per-row fp32 statistics are left out (1/d of it).
        if (L.qk_norm) bytes += e * T * (hd + kvd);
    }
    if (L.dropout) bytes += T * h * r;  // attention-output dropout mask (1 byte)
    if (rc_module(L, rc, kRecomputeCoreAttn)) {  // recmod: "core_attn", the default module
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
        // moe2: the experts' rows are the expert-TP group's gathered tokens (moe_token_scale).
        const double Tg = T * moe_token_scale(L);
        bytes += e * Tg * k * h;                        // permuted tokens (expert inputs)
        bytes += e * Tg * k * L.f_l * expert_mlp_kept(L);
        // moe2: the shared experts' MLP saves its FC1 output(s) and activation like a dense MLP
        // (its input is LN2's output, counted above).
        if (L.fs_l > 0) bytes += e * T * L.fs_l * (L.swiglu ? 3.0 : 2.0);
    } else {
        bytes += e * T * L.f_l * (L.swiglu ? 3.0 : 2.0);  // FC1 out (gate + up for SwiGLU) + activation
    }
    // recmod: Megatron-core's other recompute_modules drop what their module saved above; each
    // runs again in the backward from the input it keeps (compute.cpp module_recompute_time).
    // layernorm / moe_act / mla_up_proj discard their output (CheckpointWithoutOutput) and
    // recompute it before the consumer's backward: under FP8 the consumer then saves the
    // original input (set_save_original_input), so no FP8 copy stays either. mlp / moe /
    // shared_experts are checkpointed modules that keep only their input (LN2's output, kept).
    double fp8_dropped_inputs = 0;  // of the FP8 linear inputs counted below, those dropped here
    if (rc_module(L, rc, kRecomputeLayernorm)) {
        bytes -= 2.0 * e * T * h * r;  // LN1 and LN2 outputs (their inputs are the residual stream)
        fp8_dropped_inputs += T * h * r + (L.moe ? 0.0 : T * h * r);  // QKV's input; a dense FC1's
    }
    if (L.mla && rc_module(L, rc, kRecomputeMlaUpProj))
        bytes -= e * T * L.heads_l * (2.0 * L.d_qk + L.d_v);  // Q, K, V: the up projections + RoPE again
    const double mlp_kept = L.swiglu ? 3.0 : 2.0;  // FC1 output(s) and the activation output
    if (L.moe) {
        const double k = L.m->top_k, Tg = T * moe_token_scale(L);
        if (rc_module(L, rc, kRecomputeMoe)) {
            bytes -= 4.0 * T * r * L.m->experts + e * Tg * k * h + e * Tg * k * L.f_l * expert_mlp_kept(L) +
                     (L.fs_l > 0 ? e * T * L.fs_l * mlp_kept : 0.0);
            fp8_dropped_inputs += Tg * k * (h + L.f_l) + (L.fs_l > 0 ? T * L.fs_l : 0.0);
        } else {
            if (rc_module(L, rc, kRecomputeMoeAct)) {
                // the experts' activation output (FC2's input) and, moeprobs, the copy the
                // probabilities' multiply saved: both inside the checkpointed activation
                bytes -= e * Tg * k * L.f_l * (L.moe_probs_save_act ? 2.0 : 1.0);
                fp8_dropped_inputs += Tg * k * L.f_l;
            }
            if (L.fs_l > 0 && rc_module(L, rc, kRecomputeSharedExperts)) {
                bytes -= e * T * L.fs_l * mlp_kept;
                fp8_dropped_inputs += T * L.fs_l;
            }
        }
    } else if (rc_module(L, rc, kRecomputeMlp)) {
        bytes -= e * T * L.f_l * mlp_kept;
        fp8_dropped_inputs += T * L.f_l;  // FC2's input
    }
    // menorm: memory-efficient norms (estimate.memory_efficient_norm; Apex memory_efficient = True)
    // save their output, not their input. The output is the next linear's input and is counted
    // above already, so LN1's and LN2's inputs (the residual stream) and MLA's latent-norm inputs
    // are freed. Under Transformer Engine FP8 the linear keeps an FP8 copy of that output (the
    // block below), so a norm feeding an FP8 linear keeps a 16-bit tensor of its own and frees
    // nothing: LN1 (QKV or MLA's down projections), the latent norms, a dense LN2 (FC1). An MoE
    // LN2 feeds the router, a 16-bit GEMM that keeps the output, so its input is still freed.
    // A recomputed norm (recompute_modules "layernorm") needs its input: refused by validation.
    if (L.norm_saves_output && !rc_module(L, rc, kRecomputeLayernorm)) {
        const bool fp8_linears = L.fp8 != Fp8Recipe::none && L.fp8_te;
        if (!fp8_linears) bytes -= e * T * h * r + (L.mla ? e * T * r * (L.q_lora + L.kv_lora) : 0.0);  // LN1, latents
        if (!fp8_linears || L.moe) bytes -= e * T * h * r;  // LN2
    }
    if (L.dtensor_sp) bytes += 2.0 * dtensor_gathered_bytes(L) * T * h * (1.0 - r);
    // ttmem: torchtitan's Attention (models/llama/model.py) expands K and V to all heads with
    // repeat_kv (expand + reshape: a copy) before SDPA, which saves the expanded tensors.
    if (L.titan_model) bytes += 2.0 * e * T * (hd - kvd);
    // ttmem: run eagerly, its RMSNorm (models/norms.py) computes in fp32 (pow and the multiply
    // save x.float(), the weight multiply the 16-bit normalised tensor: 4 + e where the profile
    // counts 2e), and apply_rotary_emb multiplies complex fp32 views of Q and K (the multiply
    // saves them: 4 bytes per element); torch.compile fuses both away.
    if (L.titan_eager) bytes += 2.0 * (4.0 - e) * T * h * r + 4.0 * T * (hd + kvd);
    if (L.fp8 != Fp8Recipe::none && L.fp8_te) {
        // TE keeps the FP8 inputs of QKV (LN1 output), proj (context), FC1 (LN2 output, or the
        // permuted tokens of MoE) and FC2 (activation output) instead of bf16 ones.
        const double k = L.moe ? L.m->top_k : 1.0;
        double linear_inputs = T * h * r + T * hd + (L.moe ? k * T * h : T * h * r) + k * T * L.f_l;
        // mla: the up projections' latent inputs (their norm inputs stay 16-bit) and a_l·dv.
        if (L.mla) linear_inputs += T * r * (L.q_lora + L.kv_lora) + T * L.heads_l * L.d_v - T * hd;
        if (L.moe && (L.moe_g > 0 && L.moe_g != 1.0))  // moe2: the gathered expert rows
            linear_inputs += (moe_token_scale(L) - 1.0) * k * T * (h + L.f_l);
        if (L.fs_l > 0) linear_inputs += T * L.fs_l;  // moe2: the shared experts' FC2 input
        linear_inputs -= fp8_dropped_inputs;  // recmod: not kept at all under recompute_modules
        bytes -= (e - L.fp8_saved_bytes) * linear_inputs;
    }
    return bytes;
}

}  // namespace est

double layer_activation_bytes(const ActivationInputs& in) {
    const ModelSpec& m = *in.model;
    const double e = in.precision == Precision::fp32 ? 4.0 : 2.0;
    if (in.profile == ActivationProfile::ptd_engine)
        return est::engine_buffers_bytes(engine_layer_buffers(m, in.micro_batch, in.seq, in.tp, in.sequence_parallel,
                                                         in.recompute, engine_activation_dtype(in.precision),
                                                         in.flash_attention));
    est::LayoutDerived L{};
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
    L.dropout = m.dropout_on();  // oom4
    L.swiglu = m.activation == Activation::swiglu;
    L.moe = m.experts > 1;
    L.rc = in.recompute;
    est::assign_attention_widths(m, L);  // mla
    return est::layer_activation_megatron(L, in.recompute);
}

namespace est {

// Micro-batches (chunks / v) whose activations stage i holds at the 1F1B peak.
// Non-interleaved: min(p − i, m). Interleaved (Megatron, schedules.py
// get_pp_rank_microbatches): warm-up chunks 2·(p − i − 1) + (v − 1)·N with N the
// micro-batch group size (--microbatch-group-size-per-virtual-pipeline-stage, p by
// default), plus the one being computed, at most m·v.
double in_flight_chunks(const LayoutDerived& L, int i) {
    // zb: DualPipe holds PP + 1 micro-batch chunks at its peak (DeepSeek-V3 report, Table 2),
    // counted on every rank. ZB-H1 keeps 1F1B's (its deferred W are zb_deferred_w).
    if (L.schedule == PipelineSchedule::dualpipe) return std::min(L.p + 1, L.mbs);
    if (L.v <= 1) return std::min(L.p - i, L.mbs);
    double chunks = 2.0 * (L.p - i - 1) + (double)(L.v - 1) * L.mb_group + 1;
    return std::min(chunks, (double)L.mbs * L.v);
}

// l405: the forwards stage i has run when it holds the most are its first in_flight_chunks
// ones in Megatron's order (schedules.py get_schedule_table: micro-batches in groups of N,
// each group through chunk 0, 1, …, v − 1; the last group may be smaller). How many of the
// first `count` forwards in that order run chunk c, into per_chunk[0 … v−1]: whole groups
// give each chunk N, a part of a group fills chunks in order, N (or the last group's size)
// forwards each. pspeed3: counted per chunk, not forward by forward (count reaches m·v).
// The counts live in a per-thread buffer until the next call.
static std::span<const int> forwards_per_chunk(const LayoutDerived& L, int count) {
    const int v = L.v, m = L.mbs, n = std::max(1, std::min(L.mb_group, m)), full = m / n;
    thread_local std::vector<int> per_chunk;
    per_chunk.resize((size_t)v);
    // Spread `k` forwards over the chunks in order, `size` forwards to a chunk.
    auto spread = [&](int k, int size) {
        for (int c = 0; c < v && k > 0; ++c) {
            const int take = std::min(k, size);
            per_chunk[(size_t)c] += take;
            k -= take;
        }
    };
    const int grouped = std::min(count, full * n * v);  // forwards within the whole groups
    const int groups = grouped / (n * v);
    for (int c = 0; c < v; ++c) per_chunk[(size_t)c] = groups * n;
    spread(grouped - groups * n * v, n);
    if (count > grouped && m > full * n) spread(count - grouped, m - full * n);  // the last, smaller group
    return per_chunk;
}

// With uneven chunks the layers they hold are summed chunk by chunk; even chunks give
// chunks · layers / v. (Integer layer counts: the sum is exact in any order.)
double in_flight_layers(const LayoutDerived& L, int i, int layers) {
    const double chunks = in_flight_chunks(L, i);
    if (!L.chunk_layers || L.v <= 1) return chunks * layers / L.v;
    const std::span<const int> per_chunk = forwards_per_chunk(L, (int)chunks);
    double held = 0;
    for (int c = 0; c < L.v; ++c) held += per_chunk[(size_t)c] * L.chunk_layers[(size_t)(c * L.p + i)];
    return held;
}

// Llama 3 §3.3.2 (estimate.deallocate_pipeline_inputs): the bytes stage i no longer holds at its
// peak when each chunk's received input is freed after its forward. Megatron-core's schedules keep
// one input tensor per in-flight forward (schedules.py: input_tensors[model_chunk_id].append in the
// forward, .pop(0) by that micro-batch's backward), None for chunk 0 of stage 0, whose input is the
// token ids; the chunk's first layer's pre-norm saves it (Transformer Engine's LayerNormLinear and
// PyTorch's norms keep their input), which the per-layer count holds as LN1's input. So each
// in-flight forward with a received input, of a chunk with a layer, frees e·T·h·r (a chunk without
// one, the loss chunk, feeds the final norm, whose input the last stage holds once). Nothing where
// LN1 keeps no input anyway (memory_efficient_norm, full recompute, torchtitan's op-level
// checkpointing), where a recomputed norm needs it ("layernorm"), where, as for menorm, the kept
// 16-bit norm output would be a tensor of its own beside TE's FP8 copy, under torch's pipelining
// (one receive buffer per micro-batch for the run) or DualPipe (not counted chunk by chunk).
// For p = 16, v = 8, N = 16, m ≥ 16: stage 0 holds 143 forwards, 31 of chunk 0, so 112 inputs;
// stage i > 0 holds 2(p − i − 1) + (v − 1)·N + 1, all received (141 on stage 1).
double stage_input_bytes_freed(const LayoutDerived& L, int i, int layers) {
    if (!L.stage_inputs_freed || L.p <= 1 || layers <= 0 || L.torch_pipelining) return 0;
    if (L.schedule == PipelineSchedule::dualpipe || L.norm_saves_output || L.rc == Recompute::full) return 0;
    if (L.rc == Recompute::selective &&
        (L.rc_style == RecomputeStyle::torchtitan_op || rc_module(L, L.rc, kRecomputeLayernorm)))
        return 0;
    if (L.fp8 != Fp8Recipe::none && L.fp8_te) return 0;
    const double boundary = L.e * L.tokens * L.h * (L.sp ? 1.0 / L.t : 1.0);
    if (L.v <= 1) return i == 0 ? 0.0 : in_flight_chunks(L, i) * boundary;
    const std::span<const int> per_chunk = forwards_per_chunk(L, (int)in_flight_chunks(L, i));
    double received = 0;
    for (int chunk = 0; chunk < L.v; ++chunk) {
        if (i == 0 && chunk == 0) continue;  // the token ids: nothing received
        if (L.chunk_layers && L.chunk_layers[(size_t)(chunk * L.p + i)] <= 0) continue;  // the loss chunk: its input is the final norm's, counted once
        received += per_chunk[(size_t)chunk];
    }
    return received * boundary;
}

// Bytes per logit element (one rank's T × V_p/t logits) alive at the loss's peak, with
// every saved activation still held (the last stage runs the backward right after).
// megatron: GPTModel casts the 16-bit logits to fp32 (`output.float()`) and
// _VocabParallelCrossEntropy works in place on that copy (exp in place, softmax saved,
// gradient written into it), so the 16-bit logits and the fp32 copy exist together while
// the copy is made, and again when the fp32 gradient is cast back for the output layer:
// e + 4 bytes (4 in fp32, where .float() is the same tensor). megatron-fused makes the same
// fp32 copy in its first fused kernel and works on it in place: e + 4 too.
// te (fusedce2): Transformer Engine's parallel_cross_entropy writes the gradient into the 16-bit
// logits in the forward and scales it there in the backward: e (TE PR 3193, July 2026, adds an
// fp32 gradient beside them, which this count does not follow).
// pytorch: F.cross_entropy(logits.float()) (torchtitan's loss) keeps the fp32
// log-softmax output for backward; at the start of the backward nll_loss's gradient
// (a dense fp32 tensor) and log_softmax_backward's output exist beside it: 3 × 4 bytes
// (the 16-bit logits and the fp32 copy are freed by then; in the forward at most
// e + 4 + 4 are alive, less than 12).
// ttmem — loss_parallel (torchtitan with TP: the vocab-sharded DTensor logits under
// torch.distributed.tensor.parallel.loss_parallel, torch/distributed/tensor/parallel/loss.py):
// its nll_loss backward handler (_nll_loss_and_log_softmax_backward) builds
// grad_input = zeros_like(x), then (grad_input + exp(x)) * grad_output, so the saved fp32
// log-softmax x, grad_input, exp(x) and their sum are alive together: 16 bytes.
// pytorch-compiled (torchtitan's components/loss.py compiles the loss with training.compile):
// AOTAutograd's partitioner keeps the 16-bit logits (the graph input) and recomputes the
// softmax inside the fused backward kernel, which writes the 16-bit gradient: 2e bytes.
// oompt — fused (flash-attn's CrossEntropyLoss, llm-foundry's "fused_crossentropy"): the
// forward saves the 16-bit logits and an fp32 log-sum-exp per row (negligible beside V);
// the backward writes the gradient into a new 16-bit tensor (inplace_backward defaults to
// False): 2e bytes. Composer's trainer keeps the model outputs (state.outputs) through the
// backward, so the logits are alive at that point whatever the loss frees.
double loss_logit_bytes(const LayoutDerived& L, CrossEntropyImpl ce) {
    if (ce == CrossEntropyImpl::te) return L.e;
    if (ce == CrossEntropyImpl::fused) return 2.0 * L.e;
    if (ce == CrossEntropyImpl::pytorch_compiled) return 2.0 * L.e;
    if (ce == CrossEntropyImpl::pytorch) return L.loss_parallel ? 16.0 : 12.0;
    return L.e >= 4.0 ? 4.0 : L.e + 4.0;
}

// ttmem: bytes torch.distributed.pipelining (torchtitan's PP) holds on rank i besides the
// saved activations, over one step (torch/distributed/pipelining/stage.py):
//   - _prepare_forward_infra allocates one receive buffer per micro-batch for each stage that
//     receives activations (every stage but the global first), once, for the whole run; the
//     buffer of an in-flight micro-batch is its first layer's saved input (already counted);
//   - _prepare_backward_infra likewise one gradient receive buffer per micro-batch for each
//     stage that sends (every stage but the global last);
//   - forward_one_chunk appends every output to output_chunks, cleared only when the next
//     step starts: the m stage outputs of each sending stage, and all m micro-batches' 16-bit
//     logits on the last stage (the schedule merges them after the last backward).
// A stage's input and output are sequence-sharded under TP (torchtitan's pipeline_llama.py
// gives the stages seq_len / tp as their input shape).
double torch_pipelining_bytes(const LayoutDerived& L, int i, double in_flight) {
    if (!L.torch_pipelining) return 0;
    const bool first = i == 0, last = i == L.p - 1;
    const double boundary = L.e * L.tokens * L.h * (L.sp ? 1.0 / L.t : 1.0);
    const double m = L.mbs;
    const double receiving = L.v - (first ? 1.0 : 0.0), sending = L.v - (last ? 1.0 : 0.0);
    const double in_flight_received = in_flight * receiving / L.v;
    double bytes = std::max(0.0, receiving * m - in_flight_received) * boundary;  // activation receive buffers
    bytes += sending * m * boundary;                                              // gradient receive buffers
    bytes += sending * m * boundary;                                              // output_chunks
    if (last) bytes += m * L.e * L.tokens * L.vocab / L.t;                        // the logits in output_chunks
    return bytes;
}

// PyTorch's cuBLAS workspace, allocated through the caching allocator once per (handle,
// stream) that runs GEMMs: one for the compute stream. Default size (aten/src/ATen/cuda/
// CublasHandlePool.cpp, parseChosenWorkspaceSize): ":4096:8" = 32 MiB on sm90 and later,
// ":4096:2:16:8" = 8.125 MiB before, chosen here by the GPU's generation (Hopper and
// Blackwell are sm90+); estimate.cublas_workspace_mib overrides.
double cublas_workspace_bytes(const JobSpec& job) {
    const EstimateSpec& es = job.estimate;
    if (es.cublas_workspace_mib >= 0) return es.cublas_workspace_mib * 1024.0 * 1024.0;
    const GpuGeneration g = job.cluster.gpu.generation;
    if (g == GpuGeneration::cpu || job.cluster.gpu.name == "cpu") return 0;
    const bool sm90_or_later = g == GpuGeneration::hopper || g == GpuGeneration::blackwell;
    return sm90_or_later ? 32.0 * 1024 * 1024 : (4096.0 * 2 + 16.0 * 8) * 1024;
}

// Transformer Engine's own cuBLASLt workspace (transformer_engine/pytorch/module/base.py
// get_workspace: one torch.empty of get_cublas_workspace_size_bytes(), 32 MiB on sm90 and
// later, 4 MiB before), made through the caching allocator at the first TE GEMM and kept for
// the run, beside PyTorch's own. The stacks that run TE layers: NeMo / Megatron-Bridge,
// Megatron-LM from 2024 (--transformer-impl transformer_engine its default, stack_defaults.cpp),
// and any job with Transformer Engine FP8 (delayed, current or MXFP8 scaling).
// tews: two more of TE's workspaces of that size, each made once through the caching allocator
// and kept for the run (TE cpp_extensions/gemm.py get_cublas_workspace, an lru_cache per device
// and kind):
//  - grouped GEMM (GroupedLinear, Megatron-core's TEGroupedMLP for the experts): one workspace
//    per compute stream of its multi-stream cuBLAS loop, nvte_get_num_compute_streams() = 4
//    (common/util/multi_stream.cpp), kTeGroupedGemmStreams;
//  - userbuffers TP overlap (tp_comm_overlap): one workspace of _NUM_MAX_UB_STREAMS = 3 sizes for
//    the chunked overlapped GEMMs, kTeUserbufferStreams (TE up to mid-2025 grew the one
//    workspace to 3 sizes instead of adding it: module/base.py initialize_ub, .repeat(3)).
// The userbuffers themselves are registered by TE outside PyTorch's allocator (not counted).
constexpr double kTeGroupedGemmStreams = 4, kTeUserbufferStreams = 3;
static double te_workspace_bytes(const JobSpec& job, bool te_fp8, bool moe) {
    const TrainingSpec& t = job.training;
    const bool megatron_te = t.framework == Framework::megatron && !(t.framework_version > 0 && t.framework_version < 202401);
    if (!(t.framework == Framework::nemo || megatron_te || te_fp8)) return 0;
    const GpuGeneration g = job.cluster.gpu.generation;
    if (g == GpuGeneration::cpu || job.cluster.gpu.name == "cpu") return 0;
    const bool sm90_or_later = g == GpuGeneration::hopper || g == GpuGeneration::blackwell;
    double workspaces = 1;
    if (moe) workspaces += kTeGroupedGemmStreams;  // the experts run as TE grouped GEMMs
    if (job.parallel.tp_comm_overlap && job.parallel.tp > 1) workspaces += kTeUserbufferStreams;
    return workspaces * (sm90_or_later ? 32.0 : 4.0) * 1024 * 1024;
}

double gemm_workspace_bytes(const JobSpec& job, bool te_fp8, bool moe) {
    return cublas_workspace_bytes(job) + te_workspace_bytes(job, te_fp8, moe);
}

// ubwd: what the backward of unfused attention (no flash: BMM1, softmax, BMM2, as Megatron's
// and Transformer Engine's UnfusedDotProductAttention run it; TE attention/dot_product_attention/
// backends.py) makes beside the saved activations: BMM2's backward writes the probabilities'
// gradient and the softmax backward the scores' gradient, each b·a_l·s_c·s elements in the
// activation dtype, alive together until the softmax backward returns (the dropout backward,
// where there is one, replaces the first before that). Every stage holds all its in-flight
// activations when its first backward runs. On the last stage the loss's logits peak (counted
// in output_extra) is over by then (the output layer's backward frees the logits and their
// gradient before the last layer's), so only the excess over it is added.
double unfused_attention_backward_bytes(const LayoutDerived& L, bool last, CrossEntropyImpl ce) {
    if (L.flash) return 0;
    const double scores = L.heads_l * L.tokens * (L.s_local * L.c);  // b · a/t · s_local · s
    const double grads = 2.0 * L.e * scores;
    if (!last) return grads;
    return std::max(0.0, grads - loss_logit_bytes(L, ce) * L.tokens * L.vocab / L.t);
}

double zb_deferred_w(const LayoutDerived& L, int i) {
    if (L.schedule != PipelineSchedule::zb_h1) return 0;
    const int warmup = std::min(L.p - i - 1, L.mbs);
    return std::min(i, L.mbs - warmup);  // timeline.h schedule_op_zb_h1: d
}

double zb_pending_w_bytes_per_layer(const LayoutDerived& L) {
    // A deferred W keeps, per linear layer, its input and the gradient of its output (the
    // two operands of the weight-gradient GEMM); the rest of the micro-batch's activations
    // were freed by its B. Column-parallel inputs and row-parallel outputs are sequence-
    // sharded under sequence parallelism (Megatron saves them sharded).
    const double r = L.sp ? 1.0 / L.t : 1.0, hd = L.heads_l * L.d, kvd = L.kv_l * L.d;
    const double mats_in = L.swiglu ? 2.0 : 1.0, k = L.moe ? L.m->top_k : 1.0;
    double inputs = L.h * r + hd + k * (L.h * r + L.f_l);
    double out_grads = (hd + 2 * kvd) + L.h * r + k * (mats_in * L.f_l + L.h * r);
    if (L.mla) {  // mla: the up projections' latent inputs, proj's a_l·dv; down and up outputs
        inputs += r * (L.q_lora + L.kv_lora) + L.heads_l * L.d_v - hd;
        out_grads += r * (L.q_lora + L.kv_lora + L.d_rope) + L.heads_l * (L.d_qk + L.d + L.d_v) - (hd + 2 * kvd);
    }
    if (L.moe && L.moe_g > 0 && L.moe_g != 1.0) {  // moe2: the experts' gathered rows
        inputs += (L.moe_g - 1.0) * k * (L.h * r + L.f_l);
        out_grads += (L.moe_g - 1.0) * k * (mats_in * L.f_l + L.h * r);
    }
    if (L.fs_l > 0) inputs += L.fs_l, out_grads += mats_in * L.fs_l;  // moe2: shared experts' FC2 input, FC1 output
    return L.e * L.tokens * (inputs + out_grads);
}

double mtp_expert_params_on(const LayoutDerived& L, int i) {
    const bool holds = i == L.p - 1 || (L.schedule == PipelineSchedule::dualpipe && i == 0);
    return holds ? L.mtp_expert_params : 0.0;
}

LayerActivation layer_activation(const EstimateContext& ctx, const LayoutDerived& L) {
    LayerActivation a;
    if (ctx.job.estimate.activation_profile == ActivationProfile::ptd_engine) {
        ActivationInputs in;
        in.model = L.m;
        in.micro_batch = L.b;
        in.seq = (int)L.s_local;
        in.tp = L.t;
        in.ep = L.ep;
        in.sequence_parallel = L.sp;
        in.flash_attention = ctx.job.training.flash_attention;
        in.recompute = L.rc;
        in.precision = ctx.job.training.precision;
        in.profile = ActivationProfile::ptd_engine;
        a.saved = layer_activation_bytes(in);
        a.working = engine_buffers_bytes(engine_recompute_buffers(*L.m, L.b, (int)L.s_local, L.t, L.sp, L.rc,
                                                                  engine_activation_dtype(ctx.job.training.precision),
                                                                  ctx.job.training.flash_attention));
        return a;
    }
    a.saved = layer_activation_megatron(L, L.rc);
    a.working = layer_activation_megatron(L, Recompute::none) - a.saved;
    if (L.dense_layer) {  // moe2: a dense-MLP layer's
        a.dense_saved = layer_activation_megatron(*L.dense_layer, L.rc);
        a.dense_working = layer_activation_megatron(*L.dense_layer, Recompute::none) - a.dense_saved;
    }
    return a;
}

StageMemory stage_memory(const EstimateContext& ctx, const LayoutDerived& L, int i, int layers,
                         const LayerActivation& act) {
    const EstimateSpec& es = ctx.job.estimate;
    const ModelSpec& m = *L.m;
    const bool first = i == 0, last = i == L.p - 1;
    StageMemory S;

    // Parameters on this rank.
    double dense = layers * L.layer_dense_params;
    double expert = layers * L.layer_expert_params;
    // moe2: the stage's dense-MLP layers (model.first_dense_layers) hold no experts.
    const double dense_mlp_layers = L.stage_dense ? L.stage_dense[(size_t)i] : 0.0;
    if (dense_mlp_layers > 0) {
        dense = (layers - dense_mlp_layers) * L.layer_dense_params + dense_mlp_layers * L.dense_layer->layer_dense_params;
        expert = (layers - dense_mlp_layers) * L.layer_expert_params;
    }
    if (first) dense += L.embed_params;
    if (last) {
        dense += L.final_norm_params;
        if (!m.tied_embeddings || L.p > 1) dense += L.output_params;  // tied + p = 1 shares the embedding
        // mla: the MTP modules, and (p > 1, untied) the word embedding they read, which
        // Megatron-core's GPTModel builds on the MTP stage too (kept equal to the first stage's
        // through the embedding group, as a tied output layer is).
        dense += L.mtp_params - L.mtp_expert_params;
        if (L.mtp > 0 && L.p > 1 && !m.tied_embeddings) dense += L.embed_params;
    }
    if (L.schedule == PipelineSchedule::dualpipe) {
        // zb: DualPipe's rank i also holds stage p − 1 − i (the other direction): two stages'
        // parameters, their gradients and optimizer state (DeepSeek-V3 report, Table 2:
        // "Parameter 2×"). The mirror stage has as many layers (DualPipe splits evenly).
        const int mirror = L.p - 1 - i;
        if (L.stage_dense)  // moe2: the mirror stage's own dense-MLP layers
            dense += (layers - L.stage_dense[(size_t)mirror]) * L.layer_dense_params +
                     L.stage_dense[(size_t)mirror] * L.dense_layer->layer_dense_params;
        else
        dense += layers * L.layer_dense_params;
        if (mirror == 0) dense += L.embed_params;
        if (mirror == L.p - 1) dense += L.final_norm_params + L.output_params;
        if (mirror == L.p - 1 && !last) dense += L.mtp_params - L.mtp_expert_params;  // mla: the MTP modules
    }
    double expert_all = (L.schedule == PipelineSchedule::dualpipe ? 2.0 : 1.0) * expert;
    if (L.stage_dense && L.schedule == PipelineSchedule::dualpipe)  // moe2
        expert_all = expert + (layers - L.stage_dense[(size_t)(L.p - 1 - i)]) * L.layer_expert_params;
    expert_all += mtp_expert_params_on(L, i);  // mla: the MTP modules' experts, on the last stage (and DualPipe's rank 0)
    S.params = dense + expert_all;
    S.mem.params = dense * L.dense_state.params + expert_all * L.expert_state.params;
    // fp8: layers of this stage that run in FP8 (the model's first / last layers may stay bf16).
    double fp8_layers = 0;
    if (L.fp8 != Fp8Recipe::none) {
        double bf16 = first ? std::min<double>(L.fp8_bf16_first, layers) : 0.0;
        if (last) bf16 += std::min<double>(L.fp8_bf16_last, layers - bf16);
        fp8_layers = layers - bf16;
        // TE's FP8 weight cache and amax history are weights of the step: counted with params.
        // oomnemo: under ZeRO-3 / Megatron-FSDP no rank holds the whole layers' weights between
        // their uses: a layer's FP8 weights exist while it is gathered (Megatron-FSDP with
        // fp8_param_gather gathers them in FP8; Megatron-Bridge's FP8 recipes set
        // fp8_param_gather = True), so only this rank's shard of them persists.
        const double fp8_shard = L.zero >= 3 ? (double)L.dense_shards : 1.0;
        // moe2: a stage with dense-MLP layers has the mean of its layers' linear weights.
        const double linear = dense_mlp_layers > 0 ? ((layers - dense_mlp_layers) * L.layer_linear_params +
                                                      dense_mlp_layers * L.dense_layer->layer_linear_params) / layers
                                                   : L.layer_linear_params;
        S.mem.params += fp8_layers * (linear * L.fp8_weight_bytes / fp8_shard + L.fp8_state_bytes_per_layer);
        // oomnemo: FP8 primary weights (--fp8-param-gather): the FP8 copy above is the weight;
        // the bf16 one does not exist (the fp32 main weights stay in the optimizer).
        if (ctx.job.training.fp8_param_gather && L.fp8_te)
            S.mem.params -= fp8_layers * linear * L.dense_state.params;
    }
    S.mem.grads = dense * L.dense_state.grads + expert_all * L.expert_state.grads;
    S.mem.optimizer = dense * L.dense_state.optimizer + expert_all * L.expert_state.optimizer;
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
    // offload (ZeRO-Offload, Ren et al. 2021 §4; Megatron's HybridDeviceOptimizer): the fp32
    // master weights and moments of this rank's optimizer shard live in host memory, next to an
    // fp32 copy of its gradient shard that the CPU steps on (DeepSpeed's pinned fp32 gradient
    // partition; Megatron copies its main grads). The GPU keeps its 16-bit parameters and its
    // gradient buffers as without offload. ZeRO-3's offload_param (ZeRO-Infinity, Rajbhandari
    // et al. 2021) moves the 16-bit parameter shard to host memory as well.
    if (L.offload_optimizer) {
        const double shard = dense / (double)L.dense_shards + expert / (double)L.expert_shards;
        S.mem.host += S.mem.optimizer + 4.0 * shard;
        S.mem.optimizer = 0;
        // ZeRO-2/3 (DeepSpeed's partitioned gradients) copy each reduced bucket to the host
        // partition at once: no gradient shard stays on the GPU beyond the buckets (temp).
        if (L.zero >= 2) S.mem.grads = 0;
    }
    if (L.offload_params) {
        S.mem.host += S.mem.params;
        S.mem.params = 0;
    }

    // Activations.
    const bool engine = es.activation_profile == ActivationProfile::ptd_engine;
    const double r = L.sp ? 1.0 / L.t : 1.0;
    const EngineDType act_dtype = engine_activation_dtype(ctx.job.training.precision);
    // Kept per layer; the one layer being recomputed.
    double per_layer = act.saved, recompute_working = act.working;
    if (!engine && dense_mlp_layers > 0) {
        // moe2: the stage's mean layer (exact without interleaving, where every in-flight
        // micro-batch holds all the stage's layers); the larger recompute working set.
        per_layer = ((layers - dense_mlp_layers) * per_layer + dense_mlp_layers * act.dense_saved) / layers;
        recompute_working = std::max(recompute_working, act.dense_working);
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
            // Final norm input and output, and the logits' copies alive at the loss's peak.
            output_extra = 2 * L.e * L.tokens * L.h * r + loss_logit_bytes(L, es.cross_entropy) * L.tokens * L.vocab / L.t;
            if (L.norm_saves_output) output_extra -= L.e * L.tokens * L.h * r;  // menorm: the output only (bf16 output layer)
            // ttmem: torchtitan's output projection is ColwiseParallel(input_layouts=Shard(1)):
            // its matmul saves the all-gathered 16-bit input (the output layer stays bf16 under
            // float8: filter_fqns = ["output"]).
            if (L.dtensor_sp) output_extra += L.e * L.tokens * L.h * (1.0 - r);
            // mla: each MTP module's saved tensors, alive at the main loss's peak (GPTModel
            // runs the MTP modules and their losses first): its transformer layer's, enorm and
            // hnorm inputs and outputs (the latter two eh_proj's 2h-wide input), its final norm's
            // input and output, and its loss's fp32 softmax over the rank's vocabulary shard
            // (_VocabParallelCrossEntropy saves exp_logits).
            if (L.mtp > 0)
                output_extra += L.mtp * (per_layer + 6.0 * L.e * L.tokens * L.h * r + 4.0 * L.tokens * L.vocab / L.t);
        }
    }
    const double chunks = in_flight_chunks(L, i);
    if (!engine) output_extra += torch_pipelining_bytes(L, i, chunks);
    S.act_per_mb = per_layer * layers + stage_extra;
    S.in_flight = chunks / L.v;
    // l405: the layers those chunks hold (uneven chunks summed in the schedule's order).
    S.mem.activations = per_layer * in_flight_layers(L, i, layers) + chunks * stage_extra / L.v + output_extra;
    if (!engine) S.mem.activations -= stage_input_bytes_freed(L, i, layers);  // Llama 3 §3.3.2
    if (!engine && L.fp8 != Fp8Recipe::none && fp8_layers < layers) {
        // bf16 layers of the first / last chunk keep bf16 inputs: chunks / v micro-batches hold them.
        LayoutDerived Lb = L;
        Lb.fp8 = Fp8Recipe::none;
        S.mem.activations += chunks / L.v * (layers - fp8_layers) * (layer_activation_megatron(Lb, L.rc) - per_layer);
    }
    // oomnemo: Megatron-core activation offloading (cpu_offloading_num_layers = N, pp = 1 only;
    // Transformer Engine's get_cpu_offload_context): the tensors N layers save for backward are
    // copied to pinned host memory during forward and reloaded one layer ahead of backward, so
    // the GPU keeps those of the other layers plus the one layer in transfer.
    if (const int off = std::min(ctx.job.parallel.activation_offload_layers, layers - 1); off > 0 && L.p == 1) {
        const double moved = (off - 1.0) * per_layer;  // the layer being copied stays on the GPU
        S.mem.activations -= moved;
        S.mem.host += off * per_layer;
    }
    // During backward one layer's recomputed tensors exist on top of what was saved (its saved
    // part is already counted above).
    if (L.rc != Recompute::none && layers > 0) S.mem.activations += recompute_working;
    if (!engine && layers > 0) S.mem.activations += unfused_attention_backward_bytes(L, last, es.cross_entropy);
    // zb: ZB-H1's deferred W blocks keep their weight-gradient operands.
    if (const double deferred = zb_deferred_w(L, i); deferred > 0)  // none outside ZB-H1: the operands are not asked for
        S.mem.activations += deferred * (dense_mlp_layers > 0  // moe2: each layer kind's operands
                                             ? (layers - dense_mlp_layers) * zb_pending_w_bytes_per_layer(L) +
                                                   dense_mlp_layers * zb_pending_w_bytes_per_layer(*L.dense_layer)
                                             : zb_pending_w_bytes_per_layer(L) * layers);

    // Temporary and communication buffers.
    double temp = 0;
    if (L.sp) temp += L.e * L.tokens * L.h;                 // gathered sequence for the TP region
    if (L.p > 1) temp += 2.0 * L.e * L.tokens * L.h * r;    // p2p send + receive
    if (L.c > 1) temp += 2.0 * 2.0 * L.e * L.tokens * L.kv_l * L.d * (L.mla ? (L.d_qk + L.d_v) / (2.0 * L.d) : 1.0);  // ring attention: K/V chunk in flight + next (mla: K d + dr, V dv wide)
    if (!engine) temp += L.gemm_workspace_bytes;  // the engine lists its own workspace
    S.mem.temp = temp;
    S.mem.cuda_context = L.cpu ? 0.0 : es.cuda_context_gib * kGiB;
    const bool embedding_group = L.p > 1 && (m.tied_embeddings || L.mtp > 0) && (first || last);  // mla: MTP's embedding copy
    S.mem.nccl = L.cpu ? 0.0 : es.nccl_gib * kGiB * (L.nccl_groups + (embedding_group ? 1 : 0));
    return S;
}

// Of a Megatron-core rank's optimizer bytes, those made before the first forward and kept,
// which, like the parameter and gradient buffers, add nothing to the allocator's reserve.
// - fp32 states: the main weights. Megatron-core's mixed-precision optimizers make them when
//   they are constructed (megatron/core/optimizer/distrib_optimizer.py
//   _build_model_and_main_param_groups: shard_main_param = shard_model_param.clone().float();
//   Float16OptimizerWithFloat16Params likewise for whole parameters). Adam's moments are made at
//   the first step (the CI memory test's step 1 peaks lower), among freed activation blocks, and
//   stay charged.
// - main_params_dtype = none: the whole optimizer shard. No master copy is NeMo 1.x's Apex
//   DistributedFusedAdam with store_params = False (Megatron-core's precision-aware optimizer
//   always keeps one), and NeMo's MegatronBaseModel.configure_optimizers calls init_params on
//   every parameter before training ("make sure all params are initialized so main grads are
//   available"), which makes each bucket's StateBucket: exp_avg_shard and exp_avg_sq_shard as
//   one contiguous tensor per bucket (apex/contrib/optimizers/distributed_fused_adam.py).
// - any other state dtype (the precision-aware optimizer): the master copy lives in Transformer
//   Engine's FusedAdam state, made at the first step as well: nothing is excluded.
static double optimizer_bytes_made_before_training(const TrainingSpec& t, double optimizer_bytes) {
    if (t.precision == Precision::fp32) return 0;  // no master copy
    if (t.main_params_dtype == StateDtype::none) return optimizer_bytes;  // Apex's state buckets
    if (t.main_params_dtype != StateDtype::fp32 || t.exp_avg_dtype != StateDtype::fp32 ||
        t.exp_avg_sq_dtype != StateDtype::fp32)
        return 0;
    const OptimizerStateWidths w = optimizer_state_widths(t);
    const double moments = t.optimizer == Optimizer::sgd ? w.exp_avg : w.exp_avg + w.exp_avg_sq;
    const double fp16_grads = t.precision == Precision::fp16 ? 4.0 : 0.0;  // state_bytes_per_param's fp16 copy
    return optimizer_bytes * w.main / (w.main + moments + fp16_grads);
}

void stage_memory_finish(const EstimateContext& ctx, const LayoutDerived& L, int i, StageMemory& S) {
    const EstimateSpec& es = ctx.job.estimate;
    const double bucket = es.zero_bucket_elements;
    const int p = L.p;
    if (L.zero == 2 && p > 1) {
        // l405: at the pipeline's activation peak only the reduce bucket is alive: ZeRO-2 (and
        // FSDP with gradients sharded) reduce-scatters each micro-batch's gradients during its
        // backward; the all-gather bucket serves the parameter update after the last backward,
        // when the activations are freed (DeepSpeed stage_1_and_2.py: reduce_bucket_size in the
        // backward hooks, allgather_bucket_size in step()).
        S.mem.temp += L.e * std::min(bucket, S.params);
    } else if (L.zero == 1 || L.zero == 2) {
        // DeepSpeed reduce and all-gather buckets in the training dtype.
        S.mem.temp += 2.0 * L.e * std::min(bucket, S.params);
    } else if (L.zero == 3) {
        // Gathered parameters of the current and the prefetched layers (or the embedding):
        // 1 + parallel.fsdp_prefetch of them (overlap.cpp).
        const double biggest = std::max(L.layer_dense_params + L.layer_expert_params,
                                        (i == 0 || i == p - 1) ? L.embed_params : 0.0);
        const double held = 1.0 + std::max(0, ctx.job.parallel.fsdp_prefetch);
        S.mem.temp += held * L.e * std::min(biggest, bucket);
    }
    // The caching allocator's reserve grows where tensors are allocated and freed over
    // the step (activations, buffers, optimizer states made at the first step among freed
    // activation blocks). Megatron-core's DistributedDataParallel allocates the gradients (and,
    // with the distributed optimizer, the parameters) as one contiguous buffer each when the
    // model is built (megatron/core/distributed/param_and_grad_buffer.py: self.grad_data =
    // torch.zeros(self.numel, ...), self.param_data likewise), before any activation exists;
    // without the distributed optimizer the parameters are the module's own tensors, made
    // at the same time. Such a buffer takes a segment of its own size rounded to 2 MiB
    // (CUDACachingAllocator: kRoundLarge) and is never freed, so it adds nothing to the reserve.
    const bool megatron_buffers = runs_megatron_core(ctx.job.training.framework) && L.zero == 0 &&
                                  es.activation_profile != ActivationProfile::ptd_engine;
    const double churned = S.mem.model_states() + S.mem.activations + S.mem.temp -
                           (megatron_buffers ? S.mem.params + S.mem.grads + optimizer_bytes_made_before_training(ctx.job.training, S.mem.optimizer)
                                             : 0.0);
    S.mem.fragmentation = es.fragmentation * churned;
}

// ---- offload: the host side ---------------------------------------------------------------

// Host RAM per node and host↔GPU bandwidth per GPU by GPU generation, where the cluster does not
// give them. Host RAM is the NVIDIA DGX system memory of that generation (DGX-1 V100 512 GB;
// DGX A100 320 GB 1 TB, 640 GB 2 TB; DGX H100 / H200 / B200 2 TB: NVIDIA's DGX datasheets);
// other GPUs have no reference system, so their host RAM stays unknown and unchecked. PCIe:
// what a x16 link achieves per direction, about 80% of its raw rate (Gen3 16, Gen4 32, Gen5
// 64 GB/s): 12, 25 and 50 GB/s. GPUs that share a PCIe switch's uplink to the CPU get less
// when they copy at once; set cluster.pcie_gbps for such a system.
HostLinkDefaults host_link_defaults(const ClusterSpec& cl) {
    HostLinkDefaults d;
    const std::string& g = cl.gpu.name;
    auto is = [&](const char* prefix) { return g.rfind(prefix, 0) == 0; };
    d.pcie_gbps = 25.0;  // PCIe Gen4 x16: the common case for other GPUs
    if (is("v100")) d.pcie_gbps = 12.0, d.host_memory_gib = 512;
    else if (g == "a100-40gb") d.host_memory_gib = 1024;
    else if (is("a100")) d.host_memory_gib = 2048;
    else if (g == "h100-sxm" || is("h200") || is("b200")) d.pcie_gbps = 50.0, d.host_memory_gib = 2048;
    else if (is("h100") || is("mi300")) d.pcie_gbps = 50.0;
    if (cl.host_memory_gib > 0) d.host_memory_gib = cl.host_memory_gib;
    if (cl.pcie_gbps > 0) d.pcie_gbps = cl.pcie_gbps;
    return d;
}

double host_bytes_per_node(const LayoutDerived& L, const char* order, const std::vector<double>& stage_host) {
    // The pipeline dimension's rank stride: the product of the degrees written before "pp" in
    // the order (dimensions left out follow in Megatron's order tp, cp, dp, pp; ep lives inside dp).
    const char* names[4] = {"tp", "cp", "dp", "pp"};
    const long long sizes[4] = {L.t, L.c, L.dp, L.p};
    bool seen[4] = {false, false, false, false};
    long long stride = 1;
    bool pp_found = false;
    for (const char* q = order; *q && !pp_found;) {
        const char* dash = std::strchr(q, '-');
        const size_t len = dash ? (size_t)(dash - q) : std::strlen(q);
        for (int i = 0; i < 4; ++i)
            if (!seen[i] && len == 2 && std::strncmp(q, names[i], 2) == 0) {
                seen[i] = true;
                if (i == 3) pp_found = true;
                else stride *= sizes[i];
            }
        if (!dash) break;
        q = dash + 1;
    }
    for (int i = 0; i < 3 && !pp_found; ++i)
        if (!seen[i]) stride *= sizes[i];
    const long long gpn = L.gpus_per_node, p = L.p;
    const long long world = (long long)L.t * L.c * L.dp * L.p;
    double worst_stage = 0;
    for (double b : stage_host) worst_stage = std::max(worst_stage, b);
    // A node holds one stage's ranks only (the usual: pp outermost over whole nodes).
    if (p == 1 || stride % gpn == 0) return (double)gpn * worst_stage;
    // Else the stages of a node's ranks repeat with period lcm(gpn, stride·p) ranks: sum each
    // node of one period.
    const long long period = std::min(world, std::lcm(gpn, stride * p));
    double worst = 0;
    for (long long first = 0; first < period; first += gpn) {
        double node = 0;
        for (long long r = first; r < first + gpn && r < world; ++r) node += stage_host[(size_t)((r / stride) % p)];
        worst = std::max(worst, node);
    }
    return worst;
}

}  // namespace est
}  // namespace ptd
