// compute.cpp — how long the math takes: the GEMM efficiency model (fitted constants),
// FLOPs per token, and one layer's and one block's compute time on one rank.
// Sources: FLOPs per token — Chowdhery et al. 2022 (PaLM) App. B for model FLOPs,
// Narayanan et al. 2021 eq. 3 and Korthikanti et al. 2022 eq. 7/8 for the recompute terms;
// flash attention's causal block skipping — Dao 2023 (FlashAttention-2) §3.1; the
// d/(d + d0) shape factor and its constants — fitted on the calibration runs
// (docs/accuracy.md). docs/estimators.md writes every term out.
// recomp: the memory-bound passes (element-wise work inside / outside the TP region, the
// non-flash softmax and dropout) follow Megatron-LM's kernels (ParallelTransformerLayer,
// fused bias-dropout-add, FusedScaleMaskSoftmax) and are checked term by term against
// Korthikanti et al. 2022 Table 4 (the 22B layer's forward / backward / recompute times).
// FP8 (issue 15 point 3): which GEMMs run at the FP8 peak — Transformer Engine's fp8_autocast
// covers te.Linear / LayerNormLinear / LayerNormMLP / GroupedLinear (QKV, proj, FC1, FC2 and
// the experts: fprop, dgrad and wgrad); the attention core (fused/flash attention, TE's FP8
// DPA is off by default), Megatron's output layer (a ColumnParallelLinear outside the FP8
// region), the MoE router and the embedding stay bf16 (TE docs "Using FP8 with Transformer
// Engine"; Megatron-LM megatron/core/fp8_utils.py); torchao's Float8Linear swaps the
// nn.Linear layers and torchtitan filters the output layer ("output" in filter_fqns). The
// quantization passes are memory-bound traffic per recipe (fp8_cast_bytes), not a fitted factor;
// torchao's rowwise recipe adds one measured backward term (rowwise8, torchao_rowwise_backward_time).
// fp8eff — an FP8 GEMM's longer reduction dimension (fp8_reduction_factor): measured curves of
// H100 cuBLAS bf16 GEMMs (XLA xla/service/gpu/model/matmul_interpolator_data.h, sm_90) and H800
// FP8 GEMMs (DeepGEMM README 2025-03-25) by shape.
// dsthru — DeepSpeed's pipeline engine accumulates gradients outside the GEMMs
// (ds_grad_accum_bytes): deepspeed/runtime/pipe/engine.py _exec_backward_pass (clear_lp_grads
// before, update_hp_grads after each micro-batch's backward), runtime/bf16_optimizer.py
// (_update_hp_grad: hp_grad.add_(lp.grad.to(fp32))), runtime/engine.py
// _do_optimizer_sanity_check (bf16 with pipeline parallelism always takes BF16_Optimizer);
// Megatron-LM instead fuses the accumulation into the weight-gradient GEMM
// (--gradient-accumulation-fusion, main_grad), which costs nothing extra.
#include "model/estimate_internal.h"
#include "ptd/spec/stack_defaults.h"

#include <algorithm>
#include <cmath>

namespace ptd {

namespace {
TimeModelConstants g_cal;
}  // namespace

TimeModelConstants& time_model_constants() { return g_cal; }

static double expected_slowest_of_uncached(int n) {
    // Φ⁻¹(q) by Acklam's rational approximation (relative error below 1.2e-9): the planner
    // asks once per layout, so no iteration.
    const double q = (n - 0.375) / (n + 0.25);
    static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                                   1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
    static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                   6.680131188771972e+01,  -1.328068155288572e+01};
    static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                   -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
    static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                   3.754408661907416e+00};
    if (q <= 0.97575) {  // central region (q ≥ 0.5 here: n ≥ 2)
        const double u = q - 0.5, r = u * u;
        return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * u /
               (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
    }
    const double u = std::sqrt(-2.0 * std::log(1.0 - q));
    return -(((((c[0] * u + c[1]) * u + c[2]) * u + c[3]) * u + c[4]) * u + c[5]) /
           ((((d[0] * u + d[1]) * u + d[2]) * u + d[3]) * u + 1.0);
}

double expected_slowest_of(int n) {
    if (n <= 1) return 0.0;
    // pspeed4: the planner asks for one world size layout after layout: the last answer is kept.
    thread_local int last_n = 0;
    thread_local double last = 0.0;
    if (n == last_n) return last;
    last_n = n;
    return last = expected_slowest_of_uncached(n);
}

// Each GEMM dimension d contributes d / (d + d0): under-filled tiles, wave quantisation and
// memory-bound small shapes all bite on the smallest dimension.
double gemm_efficiency(double m, double n, double k, double eff_max) {
    const double d0 = g_cal.gemm_half_dim;
    return eff_max * (m / (m + d0)) * (n / (n + d0)) * (k / (k + d0));
}
double gemm_efficiency(double m, double n, double k) { return gemm_efficiency(m, n, k, g_cal.gemm_eff_max); }

FlopsEstimate flops_per_token(const ModelSpec& m, Recompute recompute, AttentionFlops convention,
                              double vocab_padded) {
    return flops_per_token(m, recompute, kRecomputeCoreAttn, convention, vocab_padded);
}

FlopsEstimate flops_per_token(const ModelSpec& m, Recompute recompute, uint32_t recompute_modules,
                              AttentionFlops convention, double vocab_padded) {
    FlopsEstimate f;
    f.convention = convention;
    const double h = m.hidden, d = m.head_dim(), a = m.heads, g = m.kv_heads, F = m.ffn_hidden;
    double attn_params = 2.0 * h * a * d + 2.0 * h * g * d;                  // Q, O + K, V
    // mla: MLA's projections (Megatron-LM training.py num_floating_point_operations, less its
    // latent-norm terms): q_down h·q_lora and q_up q_lora·a·(d + dr) (or one h·a·(d + dr)),
    // kv_down h·(kv_lora + dr), kv_up kv_lora·a·(d + dv), out a·dv·h.
    const double dr = m.mla() ? m.qk_rope_head_dim : 0.0, dv = m.mla() && m.v_head_dim > 0 ? m.v_head_dim : d;
    if (m.mla()) {
        const double ql = m.q_lora_rank, kl = m.kv_lora_rank;
        attn_params = (ql > 0 ? h * ql + ql * a * (d + dr) : h * a * (d + dr)) + h * (kl + dr) + kl * a * (d + dv) + a * dv * h;
    }
    const double mats = m.activation == Activation::swiglu ? 3.0 : 2.0;
    const double k = m.experts > 1 ? m.top_k : 1;
    // moe2: routed experts of moe_ffn_hidden (expert_ffn_hidden), the shared experts' MLP on
    // every token, and the first first_dense_layers layers with a dense MLP of ffn_hidden.
    const bool moe = m.experts > 1;
    const double F_routed = moe ? m.expert_ffn_hidden() : F;
    const double mlp_params = k * mats * h * F_routed + (moe ? h * m.experts + mats * h * m.shared_expert_ffn_hidden : 0.0);
    const double dense_layers = moe ? m.first_dense_layers : 0.0;
    const double layer_params_sum = (m.layers - dense_layers) * (attn_params + mlp_params) +
                                    dense_layers * (attn_params + mats * h * F);
    f.params_matmul = layer_params_sum + vocab_padded * h;
    // mla: each MTP module runs one more transformer layer (the model's last kind), its eh_proj
    // (2h × h) and one more pass through the output layer (Megatron-LM training.py counts all
    // three in model FLOPs).
    const double last_layer_params = attn_params + (moe && m.layers > dense_layers ? mlp_params : mats * h * F);
    if (m.mtp_layers > 0) f.params_matmul += m.mtp_layers * (last_layer_params + 2.0 * h * h + vocab_padded * h);
    // Attention scores: QKᵀ and softmax·V, 2 FLOPs per multiply-add, ×3 for fwd + bwd:
    // 12·L·a·d·s per token with every score counted (PaLM), half for causal masking.
    double attn = 12.0 * m.layers * a * d * m.seq_len;
    // mla: QKᵀ over d + dr, softmax·V over dv: 6·(L + MTP)·a·(d + dr + dv)·s.
    if (m.mla() || m.mtp_layers > 0) attn = 6.0 * (m.layers + m.mtp_layers) * a * (d + dr + dv) * m.seq_len;
    if (convention == AttentionFlops::causal) attn *= 0.5;
    f.attention_per_token = attn;
    f.model_per_token = 6.0 * f.params_matmul + attn;
    double extra = 0;
    if (recompute == Recompute::full) extra = 2.0 * (layer_params_sum + m.mtp_layers * last_layer_params) + attn / 3.0;
    // Selective recomputes the core attention forward. Flash kernels also recompute scores in
    // their backward, but that is the kernel's own cost, not a recompute pass.
    else if (recompute == Recompute::selective) {
        // recmod: core_attn repeats the attention core's forward; the other modules repeat
        // their forward GEMMs (2 FLOPs per multiply-add; norms and activations count none) in
        // each layer that has the module, MTP layers as the model's last layer.
        if (recompute_modules & kRecomputeCoreAttn) extra = attn / 3.0;
        const bool last_moe = moe && m.layers > dense_layers;
        const double moe_layers = moe ? m.layers - dense_layers + (last_moe ? m.mtp_layers : 0.0) : 0.0;
        const double dense_mlps = (moe ? dense_layers : (double)m.layers) + (last_moe ? 0.0 : m.mtp_layers);
        if ((recompute_modules & kRecomputeMlaUpProj) && m.mla()) {
            const double ql = m.q_lora_rank, kl = m.kv_lora_rank;
            extra += 2.0 * (m.layers + m.mtp_layers) * ((ql > 0 ? ql : h) * a * (d + dr) + kl * a * (d + dv));
        }
        if (recompute_modules & kRecomputeMlp) extra += 2.0 * dense_mlps * mats * h * F;
        if (recompute_modules & kRecomputeMoe) extra += 2.0 * moe_layers * mlp_params;
        else if ((recompute_modules & kRecomputeSharedExperts) && moe)
            extra += 2.0 * moe_layers * mats * h * m.shared_expert_ffn_hidden;
    }
    f.hardware_per_token = f.model_per_token + extra;
    return f;
}

namespace est {

// flashlen: a causal flash-attention kernel skips the masked blocks but runs the diagonal ones
// whole, and its query blocks carry unequal work (the last walks every key block, the first
// one), so its rate rises with the sequence past the lengths the calibration rows train at:
// flash_eff is then the long-sequence rate and (s + n₀) / s scales it down at s. Measured
// (NVIDIA/cudnn-frontend's SDPA benchmarks, BF16, head dim 128, causal, forward and backward
// weighted by their FLOPs, the backward 2.5 forwards):
//  - Blackwell, cuDNN's fused attention (cuDNN 9.22 on GB200 at Llama 3.1 405B's shape: 64
//    query and 8 KV heads, batch 2; benchmark/sdpa_benchmark_training/results/llama3.1/gb200/
//    llama3.1_20260424_100750.csv): 937, 1,212, 1,393, 1,418 TFLOP/s at s = 2K, 4K, 8K, 16K;
//    least squares on n / (n + n₀): n₀ = 1,350, asymptote 1,580, every point within 3% (at 32K,
//    1,318: the unmasked rows fall there too, so clocks, not the mask). Applied:
//    kCudnnFlashHalfRateTokens on Blackwell, where Megatron-core stacks run cuDNN.
//  - Hopper, not applied: the measurements disagree by a factor of four — cuDNN 9.19 on H200
//    at the same shape (results/h200_919_only_cudnn/llama3.1_20260227_034703.csv: 397, 502,
//    567, 603, 608 TFLOP/s at 2K … 32K, n₀ = 1,250 by least squares), cuDNN 9.1 and PyTorch's
//    FlashAttention-2 on H100 at 16 heads and batch·s = 16K (benchmark/benchmark_results.csv
//    at b740542, 2024-05: 468 … 520 and 264 … 329 TFLOP/s at 4K … 64K, n₀ ≈ 500 and 1,100),
//    cuDNN and the flash-attn package's FlashAttention-2 in FlashAttention-3's own H100 figures
//    (Shah et al. 2024, Figures 5 and 6, the step's mix at 2K, 4K, 8K: 470, 504, 521 and 293,
//    313, 322 TFLOP/s, n₀ ≈ 300 and 280) — and the Hopper calibration rows, whose
//    lengths flash_eff was fitted at, fit worse with the steep ones (rms log error 0.044 → 0.047
//    with n₀ = 1,250 on cuDNN and 1,100 on the torch stacks' FlashAttention-2, the constants
//    refitted), so Hopper keeps one rate at every length.
//    A100: no measurement at training shapes here, one rate.
// The constants (kCudnnFlashHalfRateTokens, kTritonFlashHalfRateTokens) are in estimate_internal.h;
// attention_length_slowdown has the Triton kernel's measurement.

double causal_flash_half_rate_tokens(const JobSpec& job) {
    // fa1seq: the Triton kernel splits the queries into blocks across the GPU (its forward grid
    // is cdiv(s, BLOCK_M) × batch·heads, flash_attn_triton.py _flash_attn_forward), so its rate
    // follows the sequence as measured (attention_length_slowdown). FlashAttention-1's CUDA kernel
    // runs one thread block per (sequence, head) over the whole sequence (the parallelism over
    // the sequence is FlashAttention-2's change, Dao 2023 §3.2): a different dependence, left out.
    if (stack_flash_kernel(job.training) == FlashKernel::triton) return kTritonFlashHalfRateTokens;
    // flashlen: cuDNN's fused attention on Blackwell follows its measured curve.
    if (job.cluster.gpu.generation == GpuGeneration::blackwell && stack_runs_cudnn_attention(job.training))
        return kCudnnFlashHalfRateTokens;
    return 0.0;
}

void assign_kernel_profile(const JobSpec& job, LayoutDerived& L) {
    const TimeModelConstants& k = g_cal;
    const GpuGeneration gen = job.cluster.gpu.generation;
    const KernelEfficiency kern = k.kernel(gen);
    L.gemm_eff_max = kern.gemm_eff_max;
    L.flash_eff = kern.flash_eff;
    // lean: SMs per GPU by generation (V100 80, A100 108, H100 / H200 132, B200 / GB200 148;
    // the vendors' whitepapers), for the userbuffers SM margin (overlap.cpp ub_chunking_cost).
    switch (gen) {
        case GpuGeneration::volta: L.sms = 80; break;
        case GpuGeneration::ampere: L.sms = 108; break;
        case GpuGeneration::hopper: L.sms = 132; break;
        case GpuGeneration::blackwell: L.sms = 148; break;
        default: L.sms = 0; break;  // unknown: no margin charged
    }
    L.elementwise_factor = 1.0;
    const Framework fw = job.training.framework;
    // Megatron-LM / NeMo use Transformer Engine: cuDNN fused attention (FlashAttention-3
    // class on Hopper and later) and fused norm / activation / RoPE kernels. The others run
    // PyTorch's SDPA (FlashAttention-2 kernels) and, unless compiled, eager elementwise ops.
    // teflash: a kernel named on a Megatron-core stack is Transformer Engine's FlashAttention
    // backend, the flash-attn package's kernels ("flash-attn-2": NVTE_FUSED_ATTN=0, Megatron-core's
    // attention_backend = flash): TE picks cuDNN's fused attention on Hopper and later only when
    // both are allowed (dot_product_attention/utils.py get_attention_backend, "Disabling
    // FlashAttention to give FusedAttention preference on Hopper+"), and only since TE 1.2
    // (stack_runs_cudnn_attention); a stack dated before it ran the flash-attn package.
    const bool flash_attn_kernels = !stack_runs_cudnn_attention(job.training);
    if (flash_attn_kernels && (gen == GpuGeneration::hopper || gen == GpuGeneration::blackwell))
        L.flash_eff *= k.fa2_hopper_fraction;
    // fa1: before flash-attn 2.0 (2023-07-17) a stack's flash attention is FlashAttention-1 (e.g.
    // Megatron-LM 285068c8's --use-flash-attn calls flash_attn_unpadded_func, the 1.x interface;
    // Megatron-LM moved to flash_attn_varlen_func on 2023-07-19).
    // tritonfa: a kernel named in training.flash_attention_kernel overrides the date. flash-attn
    // 1.x's Triton kernel (flash_attn_triton.py, which llm-foundry copies and runs with attn_impl
    // "triton") is FlashAttention-1's class: its docstring says "Triton forward is generally
    // faster than CUDA forward, while Triton backward is generally slower ... Overall Triton
    // forward + backward is slightly slower than CUDA forward + backward", the CUDA version being
    // FlashAttention-1 at the copied commit (eff9fe6b, flash-attn 1.x).
    const FlashKernel fk = stack_flash_kernel(job.training);
    if (fk == FlashKernel::flash_attn_1 || fk == FlashKernel::triton) L.flash_eff *= k.fa1_fraction;
    L.flash_half_rate_tokens = causal_flash_half_rate_tokens(job);  // fa1seq, flashlen
    if (runs_pytorch_modules(fw) && !job.training.torch_compile) {
        L.elementwise_factor = k.eager_elementwise_factor;
        // eagergpt: eager_elementwise_factor was counted on a Llama layer (RMSNorm with fp32
        // upcasts, complex-fp32 RoPE, SiLU then multiply); a LayerNorm / GELU layer with learned
        // positions (MPT, GPT-2) has none of those ops and is counted op by op instead.
        const ModelSpec& m = job.model;
        L.eager_gpt_layer = m.norm == Norm::layernorm && m.activation == Activation::gelu &&
                            m.position == Position::learned && m.experts <= 1 && !m.mla();
    }
    // slowest: the step runs at the pace of the job's slowest GPU. The spread is one of clocks
    // under the power limit, so it slows the tensor-core kernels (GEMMs, attention); memory-
    // bound kernels and the links keep their rates. A CPU's figures come from its own profile.
    if (gen != GpuGeneration::cpu) {
        const double slowest = 1.0 + k.gpu_speed_spread * expected_slowest_of(L.world());
        L.gemm_eff_max /= slowest;
        L.flash_eff /= slowest;
    }
}

// eagergpt: the element-wise passes of one LayerNorm / GELU / learned-position transformer layer
// run eagerly, as llm-foundry's MPT runs it (llmfoundry/models/layers/blocks.py MPTBlock,
// attention.py GroupedQueryAttention, ffn.py MPTMLP, norm.py LPLayerNorm; at 061f2c7, the commit
// of the benchmark tables), in elements read or written per token. Forward: each LayerNorm is
// one native kernel (F.layer_norm: read x, write y), each residual add reads two and writes one,
// GELU reads and writes the f-wide activation; the linear layers' biases are added in the GEMM
// (addmm's epilogue), Q, K and V are views of the fused QKV output that the flash kernel reads
// in place, and nn.Dropout at p = 0 (MPTConfig's resid_pdrop / attn_pdrop / emb_pdrop default)
// returns its input. Backward: autograd sums the residual stream's two gradients at each of the
// two branch points (read two, write one); each LayerNorm backward writes the input gradient
// (read dy and x, write dx) and in a second kernel the weight and bias gradients (read dy and x
// again); GELU's backward reads the gradient and the saved input and writes; each bias gradient
// is a sum over the tokens of its output gradient (read once); the split of the fused QKV output
// concatenates dQ, dK and dV (read and write). With dropout on, each of the two residual
// dropouts reads and writes the branch and writes a 1-byte mask, and its backward reads the
// gradient and the mask and writes. The attention kernel's own passes are in its rate.
EagerElementwise eager_gpt_elementwise(const LayoutDerived& L) {
    const double r = L.sp ? 1.0 / L.t : 1.0, h = L.h * r, f = L.f_l;
    const double qkv = L.heads_l * L.d + 2.0 * L.kv_l * L.d;
    EagerElementwise c;
    c.fwd = 2.0 * 2.0 * h      // two LayerNorms
            + 2.0 * 3.0 * h    // two residual adds
            + 2.0 * f;         // GELU
    c.bwd = 2.0 * 3.0 * h      // the residual gradient summed at two branch points
            + 2.0 * 5.0 * h    // two LayerNorm backwards: dx (3) and the weight / bias gradients (2)
            + 3.0 * f          // GELU backward
            + 2.0 * qkv;       // dQ, dK, dV concatenated into the QKV output's gradient
    if (L.m && L.m->bias) c.bwd += qkv + h + f + h;  // bias gradients: QKV, proj, fc1, fc2
    if (L.dropout) {
        const double drop = 2.0 * (2.0 * h + h / L.e);  // two residual dropouts, 1-byte masks
        c.fwd += drop;
        c.bwd += drop;
    }
    return c;
}

// fusedce: the loss's HBM traffic per logit. PyTorch's F.cross_entropy reads the logits in fp32
// softmax passes: three 4-byte passes each way. A fused kernel — flash-attn's CrossEntropyLoss
// (flash_attn/losses/cross_entropy.py; flash-attn 1.x runs Apex's xentropy CUDA kernel, 2.x a
// Triton one), llm-foundry's default loss_fn "fused_crossentropy" — reads the 16-bit logits once
// in the forward (writing only the per-token loss and log-sum-exp) and in the backward reads
// them again and writes their gradient: e forward, 2e backward.
// fusedce2: Megatron's vocab-parallel cross entropy, pass by pass (megatron/core/tensor_parallel/
// cross_entropy.py, the same passes in the legacy mpu/cross_entropy.py of 2021–23). Unfused
// (Megatron-LM's default): forward — the fp32 copy (read e, write 4; none in fp32), the row max
// (read 4), the max subtracted in place (4 + 4), exp in place (4 + 4), the row sum (read 4),
// the division by it in place, which leaves the softmax saved for the backward (4 + 4): 32 + the
// copy; backward — the softmax times the per-token output gradient in place (4 + 4), and the
// autograd engine's cast of that fp32 gradient to the logits' dtype (4 + e). The per-row
// target gathers and all-reduces are T values, not T × V/t. Fused (--cross-entropy-loss-fusion,
// impl "native": megatron/core/fusions/fused_cross_entropy.py, each step under jit_fuser, which
// is torch.compile from PyTorch 2.2): the copy and the max one kernel (e + 4), the subtraction,
// exp and sum one (4 + 4), the division (4 + 4); backward the gradient and its cast to bf16 in
// one kernel (4 + 2). Transformer Engine's parallel_cross_entropy (impl "te": transformer_engine/
// pytorch/triton/cross_entropy.py, from TE PR 1456, Feb 2025): an online-softmax pass reads the
// 16-bit logits for each row's max and sum, a second reads them again and writes the loss and,
// in place, the gradient (3e); the backward scales that gradient by the per-token output
// gradient in place (2e). TE PR 3193 (July 2026) keeps that gradient in fp32 instead, which this
// count does not follow.
void loss_bytes_per_logit(CrossEntropyImpl ce, double e, double& fwd, double& bwd) {
    const bool half = e < 4.0;
    switch (ce) {
        case CrossEntropyImpl::fused: fwd = e, bwd = 2.0 * e; return;
        case CrossEntropyImpl::te: fwd = 3.0 * e, bwd = 2.0 * e; return;
        case CrossEntropyImpl::megatron:
            fwd = 32.0 + (half ? e + 4.0 : 0.0), bwd = 8.0 + (half ? 4.0 + e : 0.0);
            return;
        case CrossEntropyImpl::megatron_fused:
            // fp32 logits: no copy (the first kernel reads them once); the gradient kernel still
            // writes bf16 (calculate_gradients' .to(torch.bfloat16)), which autograd casts back.
            fwd = 16.0 + (half ? e + 4.0 : 4.0), bwd = 4.0 + 2.0 + (half ? 0.0 : 2.0 + 4.0);
            return;
        case CrossEntropyImpl::pytorch:
        case CrossEntropyImpl::pytorch_compiled: fwd = bwd = 3.0 * 4.0; return;
    }
}

// Bytes of HBM traffic per element to bring one bf16 GEMM operand into the FP8 forms its
// GEMMs read. Reading bf16 is 2 bytes, each FP8 copy written is 1.
// Transformer Engine (TE 1.x/2.x, Hopper): one fused cast-transpose kernel writes the
// rowwise copy (fprop / dgrad) and the columnwise (transposed) copy wgrad needs, since
// Hopper's FP8 GEMM takes only the TN layout: 2 + 1 + 1 = 4. Delayed scaling takes the scale
// from the amax history and records the amax in the same pass; current scaling
// (Float8CurrentScaling) first reads the tensor once more for its amax: 6. On Blackwell the
// per-tensor recipes write one copy (fp8one, below): 3 and 5. MXFP8 (Blackwell) computes each
// 1×32 block's E8M0 scale inside the pass, rowwise and columnwise (a 1-D block scale has a
// direction, so both copies stay): 2 + 2 + 2/32.
// TE caches FP8 weights across a step's micro-batches (Megatron passes is_first_microbatch),
// so a weight is quantized once per step. Inputs are cast in the forward, output gradients
// in the backward (E5M2 with the hybrid format).
// torchao Float8Linear (torchtitan tensorwise / rowwise, dynamic scaling): each cast reads
// the tensor for its amax (per tensor or per row) and again to write one FP8 orientation:
// 2 + 2 + 1 = 5 per cast. It saves the bf16 input and weight for backward and casts them
// again there (Xᵀ for wgrad, Wᵀ for dgrad), and casts the output gradient twice (dgrad,
// wgrad); weights every micro-batch (no cache).
// fp8one: on a GPU whose FP8 GEMM takes non-TN layouts (Blackwell: compute capability 10.x,
// 11.x, 13.x+; TE utils.py is_non_tn_fp8_gemm_supported) a per-tensor FP8 tensor keeps one
// data buffer for both usages and no transpose is made (TE 2.x Float8TensorStorage
// update_usage, Float8CurrentScalingQuantizer: "a single _data buffer backs both row- and
// column-wise usage"): the delayed and current casts write one FP8 copy, not two. MXFP8's 1×32
// block scales run along one direction, so it keeps both.
bool fp8_single_copy(Fp8Recipe recipe, GpuGeneration gen) {
    return (recipe == Fp8Recipe::delayed || recipe == Fp8Recipe::current) && gen == GpuGeneration::blackwell;
}

Fp8CastBytes fp8_cast_bytes(Fp8Recipe recipe, int mbs, GpuGeneration gen) {
    Fp8CastBytes c;
    const double steps = 1.0 / std::max(mbs, 1);
    const double copies = fp8_single_copy(recipe, gen) ? 1.0 : 2.0;  // fp8one: per-tensor FP8 copies written
    switch (recipe) {
        case Fp8Recipe::none: break;
        case Fp8Recipe::delayed: c.in_fwd = c.grad_bwd = 2.0 + copies, c.weight_fwd = (2.0 + copies) * steps; break;
        case Fp8Recipe::current: c.in_fwd = c.grad_bwd = 4.0 + copies, c.weight_fwd = (4.0 + copies) * steps; break;
        case Fp8Recipe::mxfp8: c.in_fwd = c.grad_bwd = 4.0 + 2.0 / 32.0, c.weight_fwd = c.in_fwd * steps; break;
        case Fp8Recipe::tensorwise:
        case Fp8Recipe::rowwise:
            c.in_fwd = 5.0, c.grad_bwd = 10.0, c.in_bwd = 5.0, c.weight_fwd = 5.0, c.weight_bwd = 5.0;
            break;
    }
    return c;
}

// fp8sp: sequence parallelism all-gathers the inputs of QKV and FC1 in the forward and the
// output gradients of proj and FC2 in the backward, and Transformer Engine quantizes before
// the gather so the gather moves FP8. A transposed copy cannot be gathered along the sequence
// into the gathered tensor's transpose, so on a GPU whose FP8 GEMM takes only the TN layout
// (Hopper, Ada) TE casts the shard to the rowwise orientation alone and makes the columnwise
// copy the weight-gradient GEMM reads from the gathered tensor: TE 1.x linear.py /
// layernorm_linear.py (cast_to_fp8 instead of fp8_cast_transpose_fused under
// sequence_parallel; tex.fp8_transpose(inputmat_total) and of the gathered grad_output in the
// backward), TE 2.x the same (input_quantizer.set_usage(rowwise=True, columnwise=False) before
// gather_along_first_dim; "FP8 GEMM on Hopper only supports TN layout so the gathered input
// must have a valid transpose", update_usage(columnwise_usage=True) on the gathered input and
// grad output). So the shard's cast writes one byte fewer (delayed 2 + 1 = 3, current
// 2 + 2 + 1 = 5) and the backward reads and writes each gathered tensor once more, one byte
// each way: 2 per element, t times the shard. MXFP8 quantizes both orientations on the shard
// (block scales gather), and Blackwell's FP8 GEMMs take non-TN layouts
// (is_non_tn_fp8_gemm_supported): neither makes the gathered transpose.
void fp8_sp_gathered_transpose(Fp8CastBytes& c, Fp8Recipe recipe, GpuGeneration gen) {
    const bool tn_only = gen == GpuGeneration::hopper || gen == GpuGeneration::ada;
    if (!tn_only || (recipe != Fp8Recipe::delayed && recipe != Fp8Recipe::current)) return;
    c.sp_shard = c.in_fwd - 1.0;
    c.sp_transpose = 2.0;
}

// dsthru: per parameter and micro-batch. bf16 (BF16_Optimizer): the 16-bit gradients are
// zeroed before the backward (write 2), autograd adds each new gradient into them
// (AccumulateGrad in place: read 2 + 2, write 2), and update_hp_grads adds them into the fp32
// gradients (lp.to(fp32): read 2, write 4; add_: read 4 + 4, write 4): 26 bytes. fp16 / fp32
// (FP16_Optimizer, ZeRO-1): autograd accumulates into .grad from the second micro-batch on
// (read 2e, write e), the first one's gradient is taken as it is.
double ds_grad_accum_bytes(Precision precision, int mbs) {
    if (precision == Precision::bf16) return 2.0 + 6.0 + 18.0;
    const double e = precision == Precision::fp32 ? 4.0 : 2.0;
    const double m = std::max(mbs, 1);
    return 3.0 * e * (m - 1.0) / m;
}

// ttaccum: torch.distributed.pipelining (torchtitan's PP) runs each micro-batch's backward
// with FSDP2's gradient sync off (stage.py backward_maybe_with_nosync), so FSDP2's post_backward
// keeps the whole gradient (fsdp/_fully_shard/_fsdp_param.py): the first micro-batch's bf16
// gradient is cast to the reduce dtype (to_accumulated_grad_if_needed, .to(fp32): read 2,
// write 4) and every later one added into it (accumulate_unsharded_grad_if_needed: read 4 + 2,
// write 4), outside the GEMMs. Where the reduce dtype is the parameters' (fp32 training, or
// grad_reduce_in_fp32 = false) or nothing shards (no FSDP2), autograd accumulates into .grad
// in place from the second micro-batch on: the fp16 / fp32 case of ds_grad_accum_bytes.
double torch_pipelining_grad_accum_bytes(bool fsdp_upcast, Precision precision, int mbs) {
    const double m = std::max(mbs, 1);
    if (fsdp_upcast && precision != Precision::fp32) return (6.0 + 10.0 * (m - 1.0)) / m;
    const double e = precision == Precision::fp32 ? 4.0 : 2.0;
    return 3.0 * e * (m - 1.0) / m;
}

double gemm_time(double peak, double m, double n, double k, double eff_max) {
    if (m <= 0 || n <= 0 || k <= 0) return 0;
    return 2.0 * m * n * k / (peak * gemm_efficiency(m, n, k, eff_max));
}

// fp8eff: an FP8 GEMM needs a longer reduction (K) dimension than a bf16 one to reach the
// same fraction of its peak. Each output tile pays a fixed time outside the K loop — filling
// the pipeline, converting the fp32 accumulators and writing the bf16 output tile — while
// the K loop runs `rate` (peak_fp8 / peak, 2 on Hopper and Blackwell) times faster, so the
// K dimension's half-point d0 grows to rate·d0; tile and wave quantisation over M and N
// are the same. Measured: the d/(d + d0) curve through H100 cuBLAS bf16 GEMMs (XLA's
// matmul_interpolator_data.h, sm_90, M·N·K up to 16384·4096·4096) fits K's d0 = 190
// (E 0.90; with d0 = 128 on all three: E 0.86, rms 5%, the defaults here), through H800
// FP8 GEMMs (DeepGEMM README 2025-03-25, "Normal GEMMs for dense models", M = 4096) K's
// d0 = 380: twice bf16's. The same harness on B200 (XLA's sm_100 table, bf16 and e4m3 at
// M = 4096, N ≥ 1024) gives K's d0 ≈ 650 for bf16 and ≈ 1280 for FP8: 1.95 – 2.0×, with the
// same large-shape fraction (E 0.74 – 0.77 vs 0.75 – 0.83). The large-shape ceiling is left
// alone: per-tensor-scaled FP8 GEMMs approach 2× bf16 at large M, K, N (torchao float8 README,
// "Derivation"; FBGEMM PR 2546: row-wise FP8 1.88 – 2.09× bf16 on H100). Each linear layer
// runs three GEMMs whose reduction dimension differs (fprop K = in_features, dgrad K =
// out_features, wgrad K = tokens) and the model times the backward as twice the forward
// (symmetric in m, n, k), so every pass takes the mean of the three roles' factors.
double fp8_reduction_factor(double m, double n, double k, double rate) {
    const double d0 = g_cal.gemm_half_dim, d0_fp8 = std::max(rate, 1.0) * d0;
    auto role = [&](double K) { return (K + d0_fp8) / (K + d0); };
    return (role(m) + role(n) + role(k)) / 3.0;
}

// fp8acc: Hopper's FP8 tensor cores accumulate in reduced precision; cuBLAS's default
// (CUBLASLT_MATMUL_DESC_FAST_ACCUM = 0, the "split accumulator") promotes the partial sums to
// fp32 every few K steps, which costs throughput, and its fast-accumulation mode skips that.
// Both FP8 training stacks keep the fast mode to the forward only: Transformer Engine's
// fprop / dgrad / wgrad use_split_accumulator defaults are False / True / True (module/base.py
// _2X_ACC_FPROP, _2X_ACC_DGRAD, _2X_ACC_WGRAD; the recipes' fp8_gemm_dgrad / fp8_gemm_wgrad
// MMParams), torchao's Float8Linear sets use_fast_accum on the output GEMM only
// (float8/config.py; pytorch/ao issue 2377). Measured on H100: fast accumulation speeds an FP8
// training GEMM up 1.1 – 1.2× (pytorch/ao issue 2377, the maintainers' reply concurring); the
// midpoint 1.15 is taken. Blackwell (sm_100) has no fast-accumulation mode: its FP8 GEMMs
// accumulate in full precision at full rate (TransformerEngine PR 2748 review), so no penalty.
// Two of a linear layer's three GEMMs pay it; the model times the backward as twice the
// forward, so every pass takes the mean over the roles, as fp8_reduction_factor does.
double fp8_split_accum_factor(GpuGeneration gen) {
    constexpr double kSplitAccumSlowdown = 1.15;
    if (gen != GpuGeneration::hopper && gen != GpuGeneration::ada) return 1.0;
    return (1.0 + 2.0 * kSplitAccumSlowdown) / 3.0;
}

// rowwise8: torchao's rowwise recipe costs more outside its GEMMs than the casts above. At the
// torchao commit torchtitan's float8 benchmarks ran (6243040, June 2025) every operand is
// scaled per row along each GEMM's outer dimension, so the backward scales the saved input
// and the weight along their other axis too (the token axis / the output features: column
// reductions and transposed writes), and its two GEMMs run cuBLAS's tensorwise kernel with
// unit scales followed by `output *= post_inverse_scale` on the input-shaped dgrad and the
// weight-shaped wgrad outputs ("the rowwise CUTLASS-based kernel is so slow without
// fast-accum", torchao/float8/float8_ops.py addmm_float8_unwrapped). Measured: torchao's
// rowwise sweep of LayerNorm → Float8Linear → Sigmoid, forward + backward, on H100
// (pytorch/ao docs/static/fp8-rowwise-perf.png, fdddb2c; PyTorch 2.8.0a0; 216 shapes M, K, N =
// 1024 … 32768) against bf16 runs 0.38 – 1.73×; this time model without the term puts it 29%
// faster (median), most at small M and N, not varying with K: the extra time grows with the
// input's (M·K) and the weight's (N·K) elements, not the output gradient's (M·N). One constant
// over the sweep, on Meta's 2.4 TB/s H100 the torchao team benchmarks on (torchao
// roofline_utils.py): 7.8 ps per input and weight element in the backward — 15 bytes at
// hbm_eff there (median error −1%, rms 13%; 12 – 18 bytes for hbm_eff 0.7 – 0.9). It is kept
// as a time, not as bytes at the GPU's bandwidth: on B200 (torchao's MX README, Llama 3 8B,
// 8 GPUs) rowwise runs at 0.829× tensorwise's throughput; 15 bytes at B200's bandwidth would
// give 0.927, the same time per element 0.80. Derived from measurements, not from a kernel
// trace: which of the passes above costs what is not known.
constexpr double kTorchaoRowwiseBackwardSecondsPerElement = 15.0 / (2400e9 * 0.80);

double torchao_rowwise_backward_time(const LayoutDerived& L, double input_elements) {
    if (L.fp8 != Fp8Recipe::rowwise) return 0.0;
    return kTorchaoRowwiseBackwardSecondsPerElement * (input_elements + L.layer_linear_params);
}

double linear_gemm_time(const LayoutDerived& L, double m, double n, double k) {
    if (L.fp8 == Fp8Recipe::none) return gemm_time(L.peak, m, n, k, L.gemm_eff_max);
    return gemm_time(L.peak_fp8, m, n, k, L.gemm_eff_max) * fp8_reduction_factor(m, n, k, L.peak_fp8 / L.peak) *
           L.fp8_accum_factor;
}

// ttasync: the attention's input projections and a dense MLP's input projection(s) as the
// model runs them: torchtitan's Llama (models/llama3/model.py Attention, FeedForward) has
// separate wq, wk, wv and w1, w3 linears, so K and V are GEMMs of their own kv_heads·d/t wide
// output; Megatron-LM (and the default) fuses them into linear_qkv and linear_fc1.
double titan_qkv_gemm(const LayoutDerived& L) {
    const double T = L.tokens, h = L.h, hd = L.heads_l * L.d, kvd = L.kv_l * L.d;
    if (!L.titan_model) return linear_gemm_time(L, T, hd + 2 * kvd, h);
    return linear_gemm_time(L, T, hd, h) + 2.0 * linear_gemm_time(L, T, kvd, h);
}
double titan_up_gemm(const LayoutDerived& L) {
    const double mats_in = L.swiglu ? 2.0 : 1.0;
    if (!L.titan_model || !L.swiglu) return linear_gemm_time(L, L.tokens, mats_in * L.f_l, L.h);
    return 2.0 * linear_gemm_time(L, L.tokens, L.f_l, L.h);
}

void assign_attention_widths(const ModelSpec& m, LayoutDerived& L) {
    L.mla = m.mla();
    L.d_qk = L.d_v = L.d;
    if (L.mla) {
        L.d_rope = m.qk_rope_head_dim;
        L.d_qk = L.d + L.d_rope;
        L.d_v = m.v_head_dim > 0 ? m.v_head_dim : L.d;
        L.q_lora = m.q_lora_rank;
        L.kv_lora = m.kv_lora_rank;
        L.kv_l = L.heads_l;  // K and V per query head after the up projection
    }
    L.mtp = m.mtp_layers;
    L.qk_norm = m.qk_layernorm && !L.mla;
}

// mla: one rank's attention parameters. Classic: Q and O are h × a_l·d, K and V h × g_l·d.
// MLA (Megatron-core MLASelfAttention, gpt_layer_specs.py): linear_q_down_proj h × q_lora and
// linear_kv_down_proj h × (kv_lora + dr) are TELinear(parallel_mode = "duplicated"), whole on
// every TP rank; linear_q_up_proj q_lora × a·(d + dr) (or linear_q_proj h × a·(d + dr)) and
// linear_kv_up_proj kv_lora × a·(d + dv) are column-parallel, linear_proj a·dv × h
// row-parallel; the q / kv latent norms (fused into the up projections' LayerNormLinear)
// replicated. No biases (DeepSeek-V2/V3 have none).
double attention_params_per_rank(const LayoutDerived& L, bool with_norms) {
    const double h = L.h, a_l = L.heads_l;
    if (!L.mla) {
        double w = 2.0 * h * a_l * L.d + 2.0 * h * L.kv_l * L.d;
        if (with_norms && L.m->bias) w += a_l * L.d + 2.0 * L.kv_l * L.d + h;
        else if (with_norms && L.m->qkv_bias) w += a_l * L.d + 2.0 * L.kv_l * L.d;
        if (with_norms && L.qk_norm) w += 2.0 * (L.layernorm ? 2.0 : 1.0) * L.d;
        return w;
    }
    const double norm = L.layernorm ? 2.0 : 1.0;
    double w = L.q_lora > 0 ? h * L.q_lora + L.q_lora * a_l * L.d_qk : h * a_l * L.d_qk;
    w += h * (L.kv_lora + L.d_rope) + L.kv_lora * a_l * (L.d + L.d_v) + a_l * L.d_v * h;
    if (with_norms) w += norm * (L.q_lora + L.kv_lora);
    return w;
}

// mla: MLA's input projections, one micro-batch forward. The duplicated down projections run
// on the rank's sequence shard under sequence parallelism (their input is [s/t, b, h]) and on
// all T tokens on every rank without it; the column-parallel up projections on T tokens (their
// latent input all-gathered under SP). *column_parallel_part: the up projections' share (the
// GEMMs whose backward hides the TP collectives, LayerTime::gemm_qkv).
double mla_qkv_gemm(const LayoutDerived& L, double* column_parallel_part) {
    const double T = L.tokens, T_down = L.sp ? T / L.t : T, h = L.h, a_l = L.heads_l;
    double down = linear_gemm_time(L, T_down, L.kv_lora + L.d_rope, h), up = 0;
    if (L.q_lora > 0) {
        down += linear_gemm_time(L, T_down, L.q_lora, h);
        up += linear_gemm_time(L, T, a_l * L.d_qk, L.q_lora);
    } else {
        up += linear_gemm_time(L, T, a_l * L.d_qk, h);
    }
    up += linear_gemm_time(L, T, a_l * (L.d + L.d_v), L.kv_lora);
    if (column_parallel_part) *column_parallel_part = up;
    return down + up;
}

// ttasync: the backward's recompute under torchtitan's op-level selective checkpointing
// (parallelize_llama.py `_save_list` / `_custom_policy`, selective_ac_option = "op", at
// torchtitan 820504e and since). The policy saves the outputs of every second aten.mm (the
// 1st, 3rd, ...: Q, V, w1 and w2 for SwiGLU; Q, V, fc1 for GELU, in forward order), of SDPA
// and of the TP reduce-scatters; every other op is PREFER_RECOMPUTE. What the backward
// needs again is therefore recomputed: K (SDPA's backward reads it) and, for SwiGLU, the
// up projection w3 (SiLU(w1 x)·w3 x's backward reads it), the norms, RoPE and activation
// (the element-wise forward), and the quantization of the recomputed matmuls' operands.
// The attention core is saved, so it is not run again (Megatron's selective recomputes
// exactly that). Run eagerly, torch.utils.checkpoint replays the block's forward up to the
// last tensor the backward needs, so the output projection (the 4th mm) runs again too, and
// for GELU fc2 (the 6th); compiled (a per-block torch.compile), AOTAutograd's partitioner
// recomputes only what the backward graph reads, and those two outputs only feed the
// reduce-scatter (saved) and the residual add. MoE: the routed up projection of each expert.
double op_sac_recompute(const LayoutDerived& L, const LayerTime& lt) {
    const double T = L.tokens, h = L.h, hd = L.heads_l * L.d, kvd = L.kv_l * L.d;
    const bool fp8 = L.fp8 != Fp8Recipe::none;
    double gemm = linear_gemm_time(L, T, kvd, h);  // K
    double weights = kvd * h;
    if (L.swiglu) {
        if (L.moe) {
            const double experts_l = (double)L.m->experts / L.ep,
                         per_expert_tokens = T * moe_token_scale(L) * L.m->top_k * L.ep / L.m->experts;  // moe2
            gemm += experts_l * linear_gemm_time(L, per_expert_tokens, L.f_l, h);
            weights += experts_l * L.f_l * h;
        } else {
            gemm += linear_gemm_time(L, T, L.f_l, h);  // w3
            weights += L.f_l * h;
        }
    }
    if (L.titan_eager) {
        gemm += linear_gemm_time(L, T, h, hd);  // O
        weights += h * hd;
        if (!L.swiglu && !L.moe) gemm += linear_gemm_time(L, T, h, L.f_l), weights += h * L.f_l;  // fc2
    }
    double cast = 0;
    if (fp8) {
        // The recomputed matmuls' inputs (the attention and MLP inputs, on the shard where
        // float8 TP casts before the gather) and their weights, quantized for the forward again.
        const double r = L.sp && !L.fp8_cast_after_tp_gather ? 1.0 / L.t : 1.0;
        cast = (L.fp8_cast.in_fwd * 2.0 * T * h * r + L.fp8_cast.weight_fwd * weights) / L.hbm;
    }
    return gemm + lt.elem + cast;
}

// recmod: the forward work Megatron-core's recompute_modules other than core_attn (which is
// lt.attn, block_compute) run again in one layer's backward (transformer_layer.py, mlp.py,
// moe/moe_layer.py, moe/experts.py, moe/shared_experts.py, multi_latent_attention.py):
// layernorm: both norms (read + write the hidden row each; FP8: their outputs cast again);
// mla_up_proj: the up projections' GEMMs and the fused RoPE (read and write Q, K, V);
// mlp (a dense layer): FC1, the activation, FC2; moe: the router, the dispatcher's forward
// passes, every local expert's GEMMs and activation, and the shared experts; moe_act: the
// experts' activation; shared_experts: their MLP. The collectives these forwards repeat
// are in collectives.cpp block_comm.
static double module_recompute_time(const LayoutDerived& L, const LayerTime& lt) {
    const double T = L.tokens, h = L.h, r = L.sp ? 1.0 / L.t : 1.0;
    const double x = L.elementwise_factor * L.e / L.hbm;  // seconds per element read or written
    const bool fp8 = L.fp8 != Fp8Recipe::none;
    const double mats_in = L.swiglu ? 2.0 : 1.0, act = L.swiglu ? 3.0 : 2.0;  // activation: read 2f (1f), write f
    double t = 0;
    if (rc_module(L, kRecomputeLayernorm)) {
        t += x * 4.0 * T * h * r;
        if (fp8) t += L.fp8_cast.shard_in() * (T * h * r + (L.moe ? 0.0 : T * h * r)) / L.hbm;
    }
    if (L.mla && rc_module(L, kRecomputeMlaUpProj))
        t += lt.gemm_qkv + x * 2.0 * T * L.heads_l * (2.0 * L.d_qk + L.d_v);
    if (L.moe) {
        const double k = L.m->top_k, Tg = T * moe_token_scale(L) * k;
        const double experts_l = (double)L.m->experts / L.ep, per_expert_tokens = Tg * L.ep / L.m->experts;
        const double shared = L.fs_l > 0 ? lt.gemm_shared + x * act * T * L.fs_l : 0.0;
        if (rc_module(L, kRecomputeMoe)) {
            t += experts_l * (linear_gemm_time(L, per_expert_tokens, mats_in * L.f_l, h) +
                              linear_gemm_time(L, per_expert_tokens, h, L.f_l)) +
                 gemm_time(L.peak, T * r, L.m->experts, h, L.gemm_eff_max) + lt.moe_dispatch + x * act * Tg * L.f_l +
                 shared;
        } else {
            if (rc_module(L, kRecomputeMoeAct)) t += x * act * Tg * L.f_l;
            if (rc_module(L, kRecomputeSharedExperts)) t += shared;
        }
    } else if (rc_module(L, kRecomputeMlp)) {
        t += lt.gemm_fc1 +
             linear_gemm_time(L, T, h, L.f_l) + x * act * T * L.f_l;
        if (fp8) t += (L.fp8_cast.shard_in() * T * h * r + L.fp8_cast.in_fwd * T * L.f_l) / L.hbm;
    }
    return t;
}
// cpblock: a flash-attention kernel's rate against the sequence length n it is called on
// (queries and keys n long) follows n / (n + n₀). For the non-causal blocks of ring attention:
// FlashAttention-3 on H100, head dim 128, batch·n = 16K tokens (pytorch/benchmark commit
// ff65cb6, "run_benchmark.py triton --op flash_attention --d-head 128"): 430, 517, 566, 590,
// 614, 621 TFLOP/s at n = 512 … 16,384; n₀ = 237 fits every point within 1.2% (docs/estimators.md
// "Context parallelism's blocks").
// (kFlashHalfRateTokens = 237, estimate_internal.h)

double flash_rate(double n, double half_rate_tokens) {
    if (n <= 0) return 1.0;
    return n / (n + half_rate_tokens);
}

// How much slower than flash_eff the attention core of one s-token sequence runs, cut c ways
// by ring attention, for a kernel of causal half-rate length causal_n0.
//  - Without a length curve (causal_n0 = 0) flash_eff is the rate of one call over s (fitted
//    at the rows' own lengths), and ring attention's c calls over s/c run slower by the
//    unmasked curve (cpblock): rate(s) / rate(s/c), n₀ = kFlashHalfRateTokens.
//  - With one, flash_eff is the kernel's long-sequence rate and one causal call over s runs
//    at s / (s + n₀) of it; ring attention (c > 1, load-balanced: each rank holds two of 2c
//    chunks) runs c calls over its s/c-long shard, each 1/c of the work: the first causal
//    (n₀ = causal_n0), the other c − 1 unmasked half blocks (n₀ = kFlashHalfRateTokens).
// The kernels with a curve:
//  - fa1seq: the causal Triton flash-attention kernel of July 2023 on A100 (Triton PR 1917,
//    "Before", fused-attention batch 4, 48 heads, head dim 64) ran forward 84.3, 102.1, 112.9,
//    119.1, 122.2 and backward 48.7, 62.1, 71.7, 77.5, 80.6 TFLOP/s at s = 1,024 … 16,384; the
//    step's mix (the backward 2.5 forwards' worth of FLOPs) then runs 55.4, 69.9, 80.1, 86.1,
//    89.3 TFLOP/s, and n₀ = 698 fits every point within 0.4% (asymptote 93.4, 30% of the A100's
//    peak: FlashAttention-1's 25–40%, Dao 2023). flash_attn_triton.py (flash-attn 1.x, which
//    llm-foundry copies) took that tutorial as its "starting point" (its header) and keeps its
//    shape, but ran on the 2022 compiler (triton_pre_mlir), so the curve, not the tutorial's own
//    rate, is taken: flash_eff × fa1_fraction stays the asymptote;
//  - flashlen: cuDNN's fused attention on Blackwell, n₀ = 1,350 (kCudnnFlashHalfRateTokens;
//    causal_flash_half_rate_tokens has the measurement).
double attention_length_slowdown(double s, double c, double causal_n0) {
    if (s <= 0) return 1.0;
    const double n = s / std::max(c, 1.0);
    if (causal_n0 <= 0) return c <= 1 ? 1.0 : flash_rate(s, kFlashHalfRateTokens) / flash_rate(n, kFlashHalfRateTokens);
    if (c <= 1) return 1.0 / flash_rate(s, causal_n0);
    return (1.0 / flash_rate(n, causal_n0) + (c - 1.0) / flash_rate(n, kFlashHalfRateTokens)) / c;
}


// dtcopy: torchtitan's sequence-parallel TP redistributes [b, s, h] activations between
// Shard(1) and Replicate / Partial with DTensor (parallelize_llama.py apply_tp:
// SequenceParallel, PrepareModuleInput, RowwiseParallel(output_layouts=Shard(1))). DTensor's
// Shard(1) placement gathers with funcol.all_gather_tensor(gather_dim=1) and reduces with
// funcol.reduce_scatter_tensor(scatter_dim=1) (placement_types.py _to_replicate_tensor,
// _reduce_shard_tensor), and NCCL gathers and scatters along dim 0 only, so both functions
// copy the whole tensor once: the gather's output is chunked along dim 0 and concatenated
// along the sequence, the scatter's input chunked along the sequence and concatenated along
// dim 0 (torch/distributed/_functional_collectives.py: torch.cat(torch.chunk(...))). A cat
// reads and writes the full T·h tensor on the compute stream. Under torch.compile the copy
// stays: its neighbours are the collective's buffer and a matmul, both outside Inductor's
// fused kernels. Per layer: forward two gathers (the attention and MLP inputs, float8 under
// tensorwise TP) and two scatters (the outputs of wo and w2); backward each turns into the
// other on 16-bit gradients; op-level selective checkpointing gathers both inputs again
// (block_comm). PyTorch's micro-pipelined TP (parallel.async_tp) replaces the calls it fuses
// with all-gather-matmul / matmul-reduce-scatter ops that move shard by shard in place
// (symmetric_memory _fused_all_gather_matmul_impl: only the 1/t shard is laid out), so only
// the collectives it leaves to NCCL copy (overlap.cpp hide_tp_comm_async): the backward's two
// reduce-scatters; every gather under rowwise float8 (its consumers are casts, not matmuls);
// an MoE layer's MLP pair and the gather of its gradient; op-SAC's second gather without a
// SwiGLU w3 to fuse with.
static void dtensor_sp_copies(const LayoutDerived& L, LayerTime& lt) {
    if (!L.dtensor_sp || L.t <= 1) return;
    const double th = L.tokens * L.h;
    const double gather = 2.0 * dtensor_gathered_bytes(L) * th / L.hbm, copy16 = 2.0 * L.e * th / L.hbm;
    const bool op_sac = L.rc == Recompute::selective && L.rc_style == RecomputeStyle::torchtitan_op;
    if (!L.async_tp) {
        lt.sp_copy = 2.0 * gather + 2.0 * copy16;
        lt.sp_copy_bwd = 4.0 * copy16;
        if (op_sac) lt.op_sac_recompute += 2.0 * gather;
        return;
    }
    const bool unfused_gathers = L.fp8_cast_after_tp_gather;
    lt.sp_copy = (unfused_gathers ? 2.0 * gather : 0.0) + (L.moe ? (unfused_gathers ? 0.0 : gather) + copy16 : 0.0);
    lt.sp_copy_bwd = 2.0 * copy16 + (unfused_gathers ? 2.0 * copy16 : L.moe ? copy16 : 0.0);
    if (op_sac) lt.op_sac_recompute += unfused_gathers ? 2.0 * gather : (!L.moe && L.swiglu ? 0.0 : gather);
    // asynctp: the fused ops work on A.movedim(gather_dim, 0) (_fused_all_gather_matmul_impl,
    // _fused_matmul_reduce_scatter_impl; the pass forces that layout on their inputs,
    // restride_A_shard_for_fused_all_gather_matmul / restride_A_for_fused_matmul_reduce_scatter),
    // so with more than one sequence per micro-batch the gathered [b, s, h] tensor they return is
    // sequence-major and wo's input must be written so. In bf16:
    //  - a weight gradient is a plain mm of the gathered tensor and the output gradient, token by
    //    token, and the gradient is batch-major: the gathered tensor is copied once (T·h, 16-bit)
    //    for each fused gather that feeds a weight gradient — QKV's and w1 / w3's inputs, wo's and
    //    w2's output gradients (an MoE layer's MLP gathers are NCCL ones, contiguous already;
    //    op-level SAC's second re-gather is fused only with a SwiGLU w3);
    //  - wo's input is the attention output, which SDPA (a kernel outside Inductor) writes
    //    batch-major: one copy of T·(a_l·d) per forward.
    // Under a float8 recipe every operand of those matmuls passes through a cast, an Inductor
    // kernel that writes whatever order the next matmul needs, so nothing is added.
    if (!unfused_gathers && L.fp8 == Fp8Recipe::none && L.b > 1) {
        const double mlp_reorders = L.moe ? 0.0 : (op_sac && !L.swiglu ? 1.0 : 2.0);
        lt.sp_copy += 2.0 * L.e * L.tokens * L.heads_l * L.d / L.hbm;
        lt.sp_copy_bwd += (2.0 + mlp_reorders) * copy16;
    }
}

// ringcp: PyTorch's context parallelism (torch/distributed/tensor/experimental/_attention.py,
// which torchtitan's context_parallel runs) calls the flash kernel once per ring step and
// merges the partial results around it, in fp32 (_ContextParallelOptions convert_to_f32 =
// True). HBM bytes of one layer on the busiest rank (the last of the ring: every later step is
// a full-query step there), q = the rank's output elements T·a_l·d (dQ likewise), kv = K and V
// as SDPA sees them (torchtitan's repeat_kv: all local heads, 2·T·a_l·d). Run eagerly, op by op:
//  - forward (_templated_ring_attention, _SDPAMerger): each step's output cast to fp32 (e + 4);
//    each later step's merge out − sigmoid(lse_b − lse)·(out − out_b) in three fp32 ops
//    (12 + 8 + 12); the result cast back (4 + e); K and V made contiguous once (2e) and
//    concatenated into the send buffer every step but the last (2e each);
//  - backward (_templated_ring_attention_backward): fp32 zeros for dQ, dK, dV (4 each); K, V
//    contiguous and concatenated as forward; dQ += each step's dQ (8 + e); dK, dV += (8 + e)
//    at step 0 and half of that plus torch.cat's full copy (_partial_update: 8) at the later
//    steps; dK, dV concatenated into the fp32 buffer sent on every step (8); the results cast
//    back (4 + e each).
// Compiled (torch_compile: the ring's ops are traced into the block's graph), Inductor fuses
// each step's cast, merge and partial update into one pass (read out 4 and out_b e, write out
// 4) and each accumulation with its zero fill; the copies into the send buffers stay. The
// logsumexp tensors are 1/d of these and are not counted.
RingMergeBytes torch_ring_merge_bytes(const LayoutDerived& L) {
    RingMergeBytes b;
    if (!L.titan_model || L.c <= 1) return b;
    const double c = L.c, e = L.e;
    const double q = L.tokens * L.heads_l * (L.mla ? L.d_v : L.d);                // the output (mla: a_l·dv wide)
    const double dq = L.tokens * L.heads_l * (L.mla ? L.d_qk : L.d);              // dQ, Q's shape (mla: d + dr)
    const double kv = L.tokens * L.heads_l * (L.mla ? L.d_qk + L.d_v : 2.0 * L.d);  // mla: K d + dr, V dv
    const double sends_fwd = kv * 2.0 * e * c, sends_bwd = kv * (2.0 * e * c + 8.0 * c);  // K, V and fp32 dK, dV buffers
    if (L.titan_eager) {
        b.fwd = q * ((c + 1.0) * (e + 4.0) + 32.0 * (c - 1.0)) + sends_fwd;
        b.bwd = dq * (4.0 + c * (8.0 + e) + 4.0 + e) +
                kv * (4.0 + (8.0 + e) + (c - 1.0) * ((8.0 + e) / 2.0 + 8.0) + 4.0 + e) + sends_bwd;
    } else {
        const double passes = 2.0 * (4.0 + e) + (c - 1.0) * (8.0 + e);  // first write, c − 1 merges / accumulations, cast back
        b.fwd = q * passes + sends_fwd;
        b.bwd = (dq + kv) * passes + sends_bwd;
    }
    return b;
}

// temerge: Megatron-core's context parallelism runs Transformer Engine's ring attention
// (attention/dot_product_attention/context_parallel.py, AttnFuncWithCPAndKVP2P, cp_comm_type
// "p2p"), which merges the c flash calls' partial results outside them. Counted on the busiest
// rank (the ring's last, rank c − 1, where every step covers its whole shard), in the tensors'
// own dtype e (its fp32 paths are for FP8 attention only, fp8_dpa, which no stack here sets):
//  - forward: K and V concatenated into the first send buffer (torch.cat: read e and write e
//    per K/V element: 2e); each step's output rescaled by exp(lse_step − lse) into the result,
//    the first as a copy (flash_attn_fwd_out_correction_init: read e, write e), every later one
//    added in place (flash_attn_fwd_out_correction, one jit-fused pass: read 2e, write e):
//    q·(2e + 3e(c − 1)) = q·e·(3c − 1);
//  - backward: K and V copied into the first send buffer (2e per K/V element); dQ and dK, dV
//    taken from the first step (copy_: 2e) and accumulated from every later one (add_: 3e):
//    (dq + kv)·e·(3c − 1).
// q = the rank's output elements (MLA: a_l·dv wide), dq = Q's (MLA: d + dr), kv = K and V as the
// ring carries them (GQA: the local KV heads; MLA: all local heads, d + dr and dv). The softmax
// statistics are 1/d of these and are not counted.
RingMergeBytes te_ring_merge_bytes(const LayoutDerived& L) {
    RingMergeBytes b;
    if (L.titan_model || L.c <= 1) return b;
    const double e = L.e, steps = 3.0 * L.c - 1.0;
    const double q = L.tokens * L.heads_l * (L.mla ? L.d_v : L.d);
    const double dq = L.tokens * L.heads_l * (L.mla ? L.d_qk : L.d);
    const double kv = L.mla ? L.tokens * L.heads_l * (L.d_qk + L.d_v) : 2.0 * L.tokens * L.kv_l * L.d;
    b.fwd = e * (q * steps + 2.0 * kv);
    b.bwd = e * ((dq + kv) * steps + 2.0 * kv);
    return b;
}

// shape-dependent efficiency, attention core, and memory-bound element-wise work.
LayerTime layer_forward_time(const LayoutDerived& L) {
    LayerTime lt;
    const double T = L.tokens, h = L.h, d = L.d, hd = L.heads_l * d, kvd = L.kv_l * d;
    // fp8: the linear layers' GEMMs at the FP8 peak on the same efficiency curve, with the
    // longer reduction FP8 needs (fp8eff: linear_gemm_time); the router, attention core and
    // output layer stay at `peak` (bf16).
    const bool fp8 = L.fp8 != Fp8Recipe::none;
    // ttasync: torchtitan's Llama (models/llama3/model.py) keeps wq, wk, wv and the SwiGLU's
    // w1, w3 as separate nn.Linear layers: five GEMMs where Megatron's fused linear_qkv and
    // linear_fc1 run two, each on its own (narrower) output width (titan_gemms).
    if (L.mla) {
        // mla: down and up projections; the output projection reads a_l·dv.
        lt.gemm += mla_qkv_gemm(L, &lt.gemm_qkv);
        lt.gemm_proj = linear_gemm_time(L, T, h, L.heads_l * L.d_v);
    } else {
        lt.gemm_qkv = titan_qkv_gemm(L);
        lt.gemm += lt.gemm_qkv;
        lt.gemm_proj = linear_gemm_time(L, T, h, hd);  // output projection
    }
    lt.gemm += lt.gemm_proj;
    const double mats_in = L.swiglu ? 2.0 : 1.0;
    if (L.moe) {
        const double k = L.m->top_k, experts_l = (double)L.m->experts / L.ep;
        // moe2: the rows each local expert gets are the expert-TP group's gathered tokens
        // (moe_token_scale: T/t · etp under SP; T when etp = t), routed to E/ep local experts.
        const double per_expert_tokens = T * moe_token_scale(L) * k * L.ep / L.m->experts;  // balanced routing
        lt.gemm += experts_l * (linear_gemm_time(L, per_expert_tokens, mats_in * L.f_l, h) +
                                linear_gemm_time(L, per_expert_tokens, h, L.f_l));
        // moe2: the shared experts (Megatron-core SharedExpertMLP): a dense MLP of
        // shared_expert_ffn_hidden / t on every token of the layer, column- then row-parallel.
        if (L.fs_l > 0) {
            lt.gemm_shared = linear_gemm_time(L, T, mats_in * L.fs_l, h) + linear_gemm_time(L, T, h, L.fs_l);
            lt.gemm += lt.gemm_shared;
        }
        // moe: the router's gating GEMM runs on the rank's sequence-parallel shard (MoELayer's
        // input is [s/t, b, h] under SP; TopKRouter before the dispatcher's TP all-gather).
        const double T_shard = T * (L.sp ? 1.0 / L.t : 1.0);
        lt.gemm += gemm_time(L.peak, T_shard, L.m->experts, h, L.gemm_eff_max);  // router
        // moe: the dispatcher's memory-bound passes (Megatron-core moe_utils.py permute /
        // unpermute, token_dispatcher.py MoEAlltoAllTokenDispatcher, core_r0.9.0), in bytes of
        // hidden-sized rows, R = k·T_shard routed copies the rank sends, G = k·T after the TP
        // all-gather (R when t = 1). Forward: permute's gather reads and writes R (2R);
        // unpermute's scatter zero-fills, reads and writes R (3R), weighs by the probabilities
        // (read + write R: 2R) and sums the k copies (read R, write T_shard). With more than one
        // local expert sort_chunks_by_idxs reorders G after the all-gather and back before the
        // reduce-scatter (split + cat, read + write: 4G). Backward mirrors them: the sum's
        // expand (read T_shard, write R), the weighting's two gradients (read 2R, write R), the
        // scatter's gather (2R), the gather's scatter-add into a zero-filled T_shard (read R,
        // write 2·T_shard), and the sorts (4G).
        // moeperm: with --moe-permute-fusion Transformer Engine's kernels do each side in one pass
        // (transformer_engine/pytorch/permutation.py moe_permute / moe_unpermute, TE PR 936 and
        // TE 2.1's merging probabilities): the permute reads each token once and writes its
        // copies (T_shard + R), the unpermute reads the copies with their probabilities and
        // writes the merged token (R + T_shard); backward the unpermute's gradient reads the
        // output gradient and the saved copies and writes the copies' gradients (T_shard + 2R),
        // the permute's sums the copies back (R + T_shard). The flex dispatcher (DeepEP /
        // HybridEP, token_dispatcher.py MoEFlexTokenDispatcher) permutes after the dispatch, on
        // what the rank received — each token once per destination rank: T_in = T_shard × the
        // expected distinct EP ranks among its k experts — into its local experts' copies, and
        // needs no sort_chunks_by_idxs.
        const double R = k * T_shard, G = k * T * moe_token_scale(L);  // moe2: G gathered over etp
        const double T_in = L.node_dedup ? T_shard * L.ep_token_ranks * G / R : T_shard;
        const double copies = L.node_dedup ? G : R, sorts = !L.node_dedup && experts_l > 1 ? 4.0 * G : 0.0;
        if (L.moe_permute_fusion) {
            lt.moe_dispatch = L.e * h * (2.0 * copies + 2.0 * T_in + sorts) / L.hbm;
            lt.moe_dispatch_bwd = L.e * h * (3.0 * copies + 2.0 * T_in + sorts) / L.hbm;
        } else {
            lt.moe_dispatch = L.e * h * (8.0 * copies + T_in + sorts) / L.hbm;
            lt.moe_dispatch_bwd = L.e * h * (7.0 * copies + 3.0 * T_in + sorts) / L.hbm;
        }
        // moefp8pad: the FP8 grouped MLP's alignment copies (Megatron-core experts.py TEGroupedMLP,
        // Transformer Engine module/fp8_padding.py / fp8_unpadding.py: fused_multi_row_padding /
        // _unpadding into a new tensor). Forward: the G permuted rows into the aligned layout
        // (read + write G) and the output rows back out of it (read + write G); backward the two
        // autograd inverses do the same to the gradients: 4G rows of h each way.
        if (L.moe_fp8_pad) {
            lt.moe_dispatch += L.e * h * 4.0 * G / L.hbm;
            lt.moe_dispatch_bwd += L.e * h * 4.0 * G / L.hbm;
        }
    } else {
        lt.gemm_fc1 = titan_up_gemm(L);
        lt.gemm += lt.gemm_fc1;
        lt.gemm += linear_gemm_time(L, T, h, L.f_l);
    }
    if (fp8) {
        // Quantization traffic (fp8_cast_bytes) of the four linear layers. The inputs of QKV
        // and FC1 (norm outputs) and the output gradients of proj and FC2 are cast on the
        // rank's sequence shard under sequence parallelism (TE casts before the all-gather);
        // the others are local to the TP rank. MoE experts see k·T routed tokens.
        // ttasync: torchao rowwise under torchtitan's TP gathers in bf16 and casts after the
        // gather (L.fp8_cast_after_tp_gather): those casts see the whole sequence, t times the shard.
        const double r = L.sp && !L.fp8_cast_after_tp_gather ? 1.0 / L.t : 1.0, k = L.moe ? L.m->top_k : 1.0;
        double inputs = T * h * r + T * hd + k * T * h * (L.moe ? 1.0 : r) + k * T * L.f_l;
        double grads = T * (hd + 2 * kvd) + T * h * r + k * T * mats_in * L.f_l + k * T * h * (L.moe ? 1.0 : r);
        if (L.mla) {
            // mla: the up projections' latent inputs and proj's a_l·dv input; the down
            // projections' (replicated) and the up projections' output gradients.
            inputs += T * r * (L.q_lora + L.kv_lora) + T * L.heads_l * L.d_v - T * hd;
            grads += T * r * (L.q_lora + L.kv_lora + L.d_rope) + T * L.heads_l * (L.d_qk + L.d + L.d_v) - T * (hd + 2 * kvd);
        }
        if (L.moe && L.moe_g > 0 && L.moe_g != 1.0) {  // moe2: the experts' gathered rows
            inputs += (L.moe_g - 1.0) * k * T * (h + L.f_l);
            grads += (L.moe_g - 1.0) * k * T * (mats_in * L.f_l + h);
        }
        if (L.fs_l > 0) {  // moe2: the shared experts' FC1 / FC2 operands (a dense MLP's)
            inputs += T * h * r + T * L.fs_l;
            grads += T * mats_in * L.fs_l + T * h * r;
        }
        const Fp8CastBytes& c = L.fp8_cast;
        lt.fp8_cast = (c.in_fwd * inputs + c.weight_fwd * L.layer_linear_params) / L.hbm;
        lt.fp8_cast_bwd = (c.grad_bwd * grads + c.in_bwd * inputs + c.weight_bwd * L.layer_linear_params) / L.hbm;
        lt.fp8_cast_bwd += torchao_rowwise_backward_time(L, inputs);  // rowwise8
        if (L.sp && c.sp_transpose > 0 && !L.mla) {
            // fp8sp: the gathered operands (QKV's and, dense, FC1's input; proj's and FC2's
            // output gradient; the shared experts' too) are cast on the shard in one
            // orientation and transposed after the backward's gather (fp8_sp_gathered_transpose).
            const double gathered = T * h * r * (1.0 + (L.moe ? 0.0 : 1.0) + (L.fs_l > 0 ? 1.0 : 0.0));
            lt.fp8_cast += (c.sp_shard - c.in_fwd) * gathered / L.hbm;
            lt.fp8_cast_bwd += ((c.sp_shard - c.grad_bwd) * gathered + c.sp_transpose * L.t * 2.0 * gathered) / L.hbm;
        }
    }
    // Attention core: QKᵀ and PV per head; queries are local (s / cp), keys span s.
    const double s_keys = L.s_local * L.c;
    double core_flops = 4.0 * L.b * L.heads_l * L.s_local * s_keys * d;
    if (L.mla) core_flops = 2.0 * L.b * L.heads_l * L.s_local * s_keys * (L.d_qk + L.d_v);  // mla: QKᵀ over d + dr, PV over dv
    if (L.flash) {
        // Flash kernels skip fully masked blocks: half the scores are computed.
        lt.attn = 0.5 * core_flops / (L.peak * L.flash_eff);
        // fa1seq, flashlen: a causal kernel's rate follows the sequence it is called on; cpblock:
        // ring attention (cp > 1) runs the core as c block calls over the rank's s/c-long shard
        // against one K/V chunk each, not one call over s, and shorter calls run slower.
        lt.attn *= attention_length_slowdown(L.s_local * L.c, L.c, L.flash_half_rate_tokens);
        lt.attn_bwd = 2.5 * lt.attn;  // five GEMMs in the backward vs two forward
        if (L.titan_model && L.c > 1) {
            const RingMergeBytes m = torch_ring_merge_bytes(L);
            lt.attn += m.fwd / L.hbm;
            lt.attn_bwd += m.bwd / L.hbm;
        }
        const RingMergeBytes te = te_ring_merge_bytes(L);  // temerge: Megatron's ring (TE)
        lt.attn += te.fwd / L.hbm;
        lt.attn_bwd += te.bwd / L.hbm;
    } else {
        const double eff = gemm_efficiency(L.s_local, s_keys, L.mla ? L.d_qk : d, L.gemm_eff_max);
        const double scores = L.b * L.heads_l * L.s_local * s_keys;
        const double core_gemm = core_flops / (L.peak * eff);
        // recomp: the score tensor's memory-bound passes as Megatron-LM runs them (Korthikanti
        // et al. 2022 Table 4: the selective recompute, i.e. this forward, takes 1.3 ms of the
        // 22B layer). Forward: the fused scale-mask-softmax kernel reads the scores and writes
        // the probabilities (2e); dropout reads them, writes its output and a 1-byte mask
        // (2e + 1). Backward: dropout's backward reads the gradient and the mask and writes
        // (2e + 1); the fused softmax backward reads the gradient and the probabilities and
        // writes (3e). The two batched GEMMs become four in the backward.
        const double drop = L.dropout ? 2.0 * L.e + 1.0 : 0.0;
        // papers: unfused (training.masked_softmax_fusion = false; Megatron-LM's
        // FusedScaleMaskSoftmax.forward_torch_softmax, and the 2019 code's separate ops): the
        // scale and the causal mask are passes of their own before the softmax, each reading
        // and writing the scores (+2e each, the mask's 1-byte bool where it is a masked_fill),
        // and their backward passes repeat them on the gradient (+2e each).
        const double unfused = L.softmax_unfused ? 4.0 * L.e + 1.0 : 0.0;
        lt.attn = core_gemm + (2.0 * L.e + drop + unfused) * scores / L.hbm;
        lt.attn_bwd = 2.0 * core_gemm + (3.0 * L.e + drop + unfused) * scores / L.hbm;
    }
    // Element-wise: about 16 reads or writes of a hidden-sized tensor and 3 of the MLP-sized
    // one (4 for SwiGLU). recomp: of the 16, those outside the tensor-parallel region run on
    // the whole T·h on every TP rank without sequence parallelism (Megatron's
    // ParallelTransformerLayer: every rank holds the all-reduced output) and on T·h/t with
    // it: two norms (read + write: 4) and two bias-dropout-adds (read the branch and the
    // residual, write: 6; plus a 1-byte dropout mask each where dropout is on). The rest —
    // the QKV bias or RoPE and the attention layout copies — works on the rank's own heads
    // (T·a_l·d), split t ways with or without sequence parallelism.
    const double r = L.sp ? 1.0 / L.t : 1.0;
    // 16 − 11: a GPT layer in 16-bit (dropout on) keeps the total of 16 at tp = 1.
    const double outside = 10.0 + (L.dropout ? 2.0 / L.e : 0.0), inside = 5.0;
    lt.elem = L.elementwise_factor * L.e * T *
              (outside * h * r + inside * hd + (L.swiglu ? 4.0 : 3.0) * L.f_l * (L.moe ? L.m->top_k : 1)) / L.hbm;
    // mla: the per-head passes span Q, K (d + dr) and V (dv) instead of d, and the two latent
    // norms read and write the q / kv latents (on the rank's sequence shard under SP).
    // mla: --qk-layernorm (non-MLA): the q / k norms read and write the local Q and K heads.
    if (L.qk_norm) lt.elem += L.elementwise_factor * L.e * T * 2.0 * (hd + kvd) / L.hbm;
    if (L.mla)
        lt.elem += L.elementwise_factor * L.e * T *
                   (inside * L.heads_l * ((2.0 * L.d_qk + L.d_v) / 3.0 - d) + 2.0 * r * (L.q_lora + L.kv_lora)) / L.hbm;
    // moe2: the experts' activation passes over the gathered rows, and the shared experts'.
    if (L.moe && L.moe_g > 0 && L.moe_g != 1.0)
        lt.elem += L.elementwise_factor * L.e * T * (L.moe_g - 1.0) * (L.swiglu ? 4.0 : 3.0) * L.f_l * L.m->top_k / L.hbm;
    if (L.fs_l > 0) lt.elem += L.elementwise_factor * L.e * T * (L.swiglu ? 4.0 : 3.0) * L.fs_l / L.hbm;
    lt.elem_bwd = 2.0 * lt.elem;
    if (L.eager_gpt_layer) {  // eagergpt: counted op by op, not factor × the fused count
        const EagerElementwise c = eager_gpt_elementwise(L);
        lt.elem = L.e * T * c.fwd / L.hbm;
        lt.elem_bwd = L.e * T * c.bwd / L.hbm;
    }
    if (L.rc == Recompute::selective && L.rc_style == RecomputeStyle::torchtitan_op) lt.op_sac_recompute = op_sac_recompute(L, lt);
    if (L.rc == Recompute::selective && L.rc_style == RecomputeStyle::megatron) lt.module_recompute = module_recompute_time(L, lt);  // recmod
    dtensor_sp_copies(L, lt);
    return lt;
}

// One micro-batch's forward and backward blocks through `layers` layers on one rank

void block_compute(const LayoutDerived& L, const LayerTime& lt, double layers, bool first, bool last, ChunkTime& c) {
    BlockTime &F = c.fwd, &B = c.bwd;
    const double T = L.tokens;
    F.compute = layers * (lt.gemm + lt.attn + lt.elem + lt.fp8_cast + lt.moe_dispatch + lt.sp_copy);
    B.compute = layers * (2.0 * lt.gemm + lt.attn_bwd + lt.elem_bwd + lt.fp8_cast_bwd + lt.moe_dispatch_bwd + lt.sp_copy_bwd);
    B.wgrad = layers * lt.gemm;  // zb: of the two backward GEMMs per forward one, the weight gradient
    // fp8: the model's first / last layers kept in bf16 (Megatron --first-last-layers-bf16)
    // sit in the block that holds the embedding / the output layer.
    double bf16_layers = 0;
    if (L.fp8 != Fp8Recipe::none) {
        if (first) bf16_layers += std::min<double>(L.fp8_bf16_first, layers);
        if (last) bf16_layers += std::min<double>(L.fp8_bf16_last, layers - bf16_layers);
    }
    if (bf16_layers > 0) {
        LayoutDerived Lb = L;
        Lb.fp8 = Fp8Recipe::none;
        const LayerTime b = layer_forward_time(Lb);
        F.compute += bf16_layers * (b.gemm + b.elem - lt.gemm - lt.elem - lt.fp8_cast);
        B.compute += bf16_layers * (2.0 * (b.gemm - lt.gemm) + b.elem_bwd - lt.elem_bwd - lt.fp8_cast_bwd);
    }
    if (L.rc == Recompute::full) B.recompute = F.compute;
    else if (L.rc == Recompute::selective)  // core attention forward again (Megatron); ttasync: op-level SAC
        B.recompute = layers * (L.rc_style == RecomputeStyle::torchtitan_op
                                    ? lt.op_sac_recompute
                                    : (rc_module(L, kRecomputeCoreAttn) ? lt.attn : 0.0) + lt.module_recompute);  // recmod
    if (last) {
        const double logits = gemm_time(L.peak, T, L.vocab / L.t, L.h, L.gemm_eff_max);
        const double logit_count = T * L.vocab / L.t;  // fusedce: bytes per logit by the loss's kernels
        F.compute += logits + L.ce_fwd_bytes * logit_count / L.hbm;
        B.compute += 2.0 * logits + L.ce_bwd_bytes * logit_count / L.hbm;
        B.wgrad += logits;
    }
    if (last && L.mtp > 0) {
        // mla: each MTP module on the last stage: the embedding of the shifted tokens, enorm
        // and hnorm, eh_proj (T × h/t × 2h), its transformer layer (this model's layer, with
        // its recompute), its final norm and a second pass through the output layer and loss.
        const double logits = gemm_time(L.peak, T, L.vocab / L.t, L.h, L.gemm_eff_max);
        const double ce = 3.0 * 4.0 * T * L.vocab / L.t / L.hbm;
        const double eh = linear_gemm_time(L, T, L.h / L.t, 2.0 * L.h);
        const double norms = L.e * T * L.h * (1.0 + 3.0 * 2.0) / L.hbm;  // embedding gather, 3 norms
        const double layer_f = lt.gemm + lt.attn + lt.elem + lt.fp8_cast + lt.moe_dispatch;
        F.compute += L.mtp * (layer_f + eh + norms + logits + ce);
        B.compute += L.mtp * (2.0 * lt.gemm + lt.attn_bwd + lt.elem_bwd + lt.fp8_cast_bwd + lt.moe_dispatch_bwd +
                              2.0 * eh + 2.0 * norms + 2.0 * logits + ce);
        B.wgrad += L.mtp * (lt.gemm + eh + logits);
        if (L.rc == Recompute::full) B.recompute += L.mtp * layer_f;
        else if (L.rc == Recompute::selective)  // recmod: the MTP layer's modules as the model's layers
            B.recompute += L.mtp * ((rc_module(L, kRecomputeCoreAttn) ? lt.attn : 0.0) + lt.module_recompute);
    }
    if (first) F.compute += L.e * T * L.h / L.hbm;  // embedding gather
    if (first) B.compute += L.embed_grad_bytes * L.embed_params / L.hbm;  // embgrad: the table's dense gradient
    // dtcopy: the vocab-parallel embedding's output is reduce-scattered to Shard(1) and the
    // final norm's output gathered for the output layer (one copy each way, 16-bit). asynctp:
    // async TP fuses neither: torchtitan compiles each TransformerBlock, not the embedding or
    // the output layer (apply_compile at 820504e and since), so Inductor's micro-pipeline pass
    // never sees their collectives.
    if (L.dtensor_sp && L.t > 1) {
        const double copy16 = 2.0 * L.e * T * L.h / L.hbm;
        if (first) F.compute += copy16, B.compute += copy16;
        if (last) F.compute += copy16, B.compute += copy16;
    }
    // dsthru, ttaccum: DeepSpeed's pipeline engine and torch.distributed.pipelining accumulate
    // this block's gradients after its backward, on the compute stream (ds_grad_accum_bytes,
    // torch_pipelining_grad_accum_bytes).
    if (L.grad_accum_bytes > 0) {
        const double params = layers * (L.layer_dense_params + L.layer_expert_params) + (first ? L.embed_params : 0.0) +
                              (last ? L.output_params + L.final_norm_params : 0.0);
        B.compute += L.grad_accum_bytes * params / L.hbm;
    }
}

}  // namespace est
}  // namespace ptd
