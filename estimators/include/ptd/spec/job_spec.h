// job_spec.h — the job spec: one plain struct per TOML table ([model], [cluster],
// [parallel], [training], [launch]), loaded from TOML with every error located, checked
// across fields, and saved back so that load → save → load gives the same spec.
// docs/job-spec.md lists every key with its default and Megatron-LM/DeepSpeed equivalent.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ptd/common/diagnostic.h"

namespace ptd {

enum class Arch { gpt, llama };
enum class Norm { layernorm, rmsnorm };
enum class Activation { gelu, swiglu };
enum class Position { learned, rope };
enum class Recompute { none, selective, full };
enum class Precision { fp32, bf16, fp16 };
enum class Optimizer { adamw, adam, sgd };
enum class LaunchMode { local, ssh };
enum class ActivationProfile { megatron, ptd_engine };  // TOML: "megatron", "ptd-engine"
enum class AttentionFlops { full, causal };             // attention-score FLOPs convention
// What "selective" recomputation saves: Megatron's attention-core recompute (Korthikanti
// 2022 §5) or torchtitan's op-level selective checkpointing (every other matmul output and
// the attention outputs saved). TOML: "megatron", "torchtitan-op".
enum class RecomputeStyle { megatron, torchtitan_op };
// recmod: Megatron-core's selective recompute is a list of modules (TransformerConfig
// recompute_modules, --recompute-modules): one bit each in ParallelSpec::recompute_modules.
// core_attn: the attention core (today's "selective"); moe_act: the routed experts'
// activation; layernorm: input_layernorm and pre_mlp_layernorm; mla_up_proj: MLA's up
// projections and RoPE; mlp: a dense layer's MLP; moe: the whole MoE layer; shared_experts:
// the MoE layer's shared experts. TOML words are the Megatron names.
enum RecomputeModuleBit : uint32_t {
    kRecomputeCoreAttn = 1u << 0,
    kRecomputeMoeAct = 1u << 1,
    kRecomputeLayernorm = 1u << 2,
    kRecomputeMlaUpProj = 1u << 3,
    kRecomputeMlp = 1u << 4,
    kRecomputeMoe = 1u << 5,
    kRecomputeSharedExperts = 1u << 6,
};
inline constexpr int kRecomputeModuleCount = 7;
// The Megatron word of bit i (0 .. kRecomputeModuleCount - 1), in Megatron's documented order.
const char* recompute_module_word(int i);
// The words of a bit set, in that order (the TOML array and --recompute-modules).
std::vector<std::string> recompute_module_words(uint32_t modules);
// hostov: CUDA graphs as Megatron-core captures them in training (TransformerConfig
// cuda_graph_impl / cuda_graph_scope; Megatron-LM --cuda-graph-impl, --cuda-graph-scope — renamed
// --cuda-graph-modules in 2026, the old flag still accepted; Megatron-Bridge
// cfg.model.cuda_graph_impl / cuda_graph_scope). TOML: parallel.cuda_graph_impl = "none" |
// "local" | "transformer_engine"; parallel.cuda_graph_scope = a list of the words below, empty
// with an impl = the whole transformer layer. One bit each in ParallelSpec::cuda_graph_scope.
enum class CudaGraphImpl : uint8_t { none, local, transformer_engine };
enum CudaGraphScopeBit : uint32_t {
    kGraphFullIteration = 1u << 0,  // the whole forward-backward step (impl local only)
    kGraphAttn = 1u << 1,           // TransformerLayer._forward_attention
    kGraphMlp = 1u << 2,            // a dense layer's MLP
    kGraphMoe = 1u << 3,            // an MoE layer's whole MLP (static shapes: drop-and-pad)
    kGraphMoeRouter = 1u << 4,      // router (+ pre-MLP norm, shared experts)
    kGraphMoePreprocess = 1u << 5,  // the token dispatcher's preprocess (with moe_router)
};
inline constexpr int kCudaGraphScopeCount = 6;
const char* cuda_graph_scope_word(int i);
std::vector<std::string> cuda_graph_scope_words(uint32_t scope);
const char* to_string(CudaGraphImpl v);
// How the loss is computed from the logits on the last stage: Megatron's vocab-parallel
// cross entropy (fp32 copy of the logits, softmax and gradient in place) or PyTorch's
// F.cross_entropy(logits.float()) (log-softmax output and its gradients as new tensors).
// megatron is the unfused one (Megatron-LM's default: --cross-entropy-loss-fusion off);
// megatron_fused (fusedce2) the same passes fused by Megatron-core's jit_fuser
// (--cross-entropy-loss-fusion, cross_entropy_fusion_impl "native": NeMo 2's GPTConfig default);
// te the Triton kernels of Transformer Engine's parallel_cross_entropy
// (cross_entropy_fusion_impl "te": Megatron-Bridge's performance configs). TOML:
// "megatron-fused", "te".
// pytorch_compiled (ttmem): the same loss under torch.compile, as torchtitan builds it since
// 2025 (components/loss.py build_cross_entropy_loss compiles it with training.compile): the
// fused kernels keep only the 16-bit logits and write their 16-bit gradient.
// TOML: "megatron", "pytorch", "pytorch-compiled".
// fused (oompt): flash-attn's fused cross entropy (flash_attn.losses.cross_entropy, the CUDA
// xentropy kernel from Apex in flash-attn 1.x, Triton in 2.x), llm-foundry's default loss_fn
// "fused_crossentropy": it saves the 16-bit logits and an fp32 log-sum-exp per row and writes
// a 16-bit gradient. TOML: "fused".
enum class CrossEntropyImpl { megatron, pytorch, pytorch_compiled, fused, megatron_fused, te };
// The accelerator's architecture generation: kernel efficiencies (GEMM and attention
// fraction of peak) are calibrated per generation (docs/accuracy.md). TOML words:
// "other", "volta", "ampere", "ada", "hopper", "blackwell", "cdna3", "cpu".
// The training framework whose kernels run the job (its fused kernels, attention kernel and
// elementwise fusion set the compute efficiency). TOML words: "megatron" (Megatron-LM, NeMo,
// Megatron-Bridge: Transformer Engine / cuDNN kernels), "deepspeed" (Megatron-DeepSpeed),
// "torchtitan", "pytorch-fsdp" (PyTorch FSDP stacks such as HF accelerate),
// "nemo" (NeMo 2.0 / Megatron-Bridge: Megatron-Core underneath, so its kernels, schedule and
// checks are Megatron's; only the export differs: a Megatron-Bridge recipe run),
// "llm-foundry" (MosaicML llm-foundry on Composer: PyTorch FSDP, so estimated and checked as
// "pytorch-fsdp", with llm-foundry's own defaults: its attention kernel by date, its fused loss).
enum class Framework { megatron, deepspeed, torchtitan, pytorch_fsdp, nemo, llm_foundry };
// Whether Megatron-Core runs the model (Megatron-LM itself, or NeMo / Megatron-Bridge on top
// of it): every kernel, schedule and refusal of the time model that names Megatron applies.
constexpr bool runs_megatron_core(Framework f) { return f == Framework::megatron || f == Framework::nemo; }
// Whether PyTorch FSDP / DDP runs the model (a generic FSDP stack, or llm-foundry on Composer):
// every kernel, schedule and refusal that names "pytorch-fsdp" applies.
constexpr bool runs_pytorch_fsdp(Framework f) { return f == Framework::pytorch_fsdp || f == Framework::llm_foundry; }
// Whether the model runs as PyTorch modules without Megatron's or DeepSpeed's kernels
// (torchtitan, PyTorch FSDP): eager element-wise ops unless compiled, F.cross_entropy, no
// vocabulary padding.
constexpr bool runs_pytorch_modules(Framework f) { return f == Framework::torchtitan || runs_pytorch_fsdp(f); }
enum class GpuGeneration { other, volta, ampere, ada, hopper, blackwell, cdna3, cpu };
// What joins the GPUs of one node (link_gbps is its per-GPU bandwidth): NVLink through
// NVSwitch (SXM boards), PCIe (cards: L40S, RTX 4090, H100 PCIe, whose NVLink bridges join
// pairs only), AMD Infinity Fabric (MI300X's point-to-point mesh), or loopback sockets /
// shared memory between the processes of one machine (the bundled engine's `cpu` device).
// TOML words: "nvlink", "pcie", "infinity-fabric", "loopback".
enum class GpuLink { nvlink, pcie, infinity_fabric, loopback };
inline constexpr int kGpuGenerationCount = 8;
// FP8 training (issue 15 point 3): which recipe runs the linear layers' GEMMs in FP8 on top
// of bf16 mixed precision. delayed / current / mxfp8: Transformer Engine's DelayedScaling,
// Float8CurrentScaling, MXFP8BlockScaling (Megatron-LM); tensorwise / rowwise: torchao's
// float8 recipes (torchtitan). TOML words: "none", "delayed", "current", "tensorwise",
// "rowwise", "mxfp8".
enum class Fp8Recipe { none, delayed, current, tensorwise, rowwise, mxfp8 };
// hybrid: E4M3 forward, E5M2 gradients (TE Format.HYBRID); e4m3: E4M3 everywhere.
enum class Fp8Format { hybrid, e4m3 };
// deepep: Megatron-core's MoE token dispatcher for expert parallelism: the all-to-all one
// (--moe-token-dispatcher-type alltoall), or the flex dispatcher with DeepEP's or NVIDIA's
// HybridEP fused kernels (--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend ...).
enum class MoeDispatcher : uint8_t { alltoall, deepep, hybridep };
// The dispatcher as parallel.moe_dispatcher writes it: "alltoall", "deepep", "hybridep".
const char* to_string(MoeDispatcher v);
enum class OffloadDevice { none, cpu };                 // where offloaded states live (offload)
// The pipeline schedule (zb: issue 15 point 5). automatic = Megatron-LM's choice: 1F1B, or
// the interleaved 1F1B when vpp > 1. TOML: "auto", "1f1b", "interleaved", "zb-h1", "dualpipe".
enum class PipelineSchedule : uint8_t { automatic, one_f_one_b, interleaved, zb_h1, dualpipe };
// oom4: the dtype an optimizer state is stored in (Megatron-LM's precision-aware optimizer:
// --main-params-dtype, --exp-avg-dtype, --exp-avg-sq-dtype; NeMo 1.x's Apex
// DistributedFusedAdam `dtype`). none (main params only): no separate master copy, the
// optimizer updates the 16-bit weights themselves (Apex with dtype = the parameters' dtype,
// store_params = False). fp32_remainders (main params only): an fp32 master rebuilt from the
// bf16 weight and a 16-bit remainder, 2 bytes (Transformer Engine FusedAdam / Apex
// store_param_remainders). TOML: "fp32", "bf16", "fp16", "fp8", "none", "fp32-remainders".
enum class StateDtype : uint8_t { fp32, bf16, fp16, fp8, none, fp32_remainders };

// tritonfa: which flash-attention kernel the stack runs (training.flash_attention_kernel).
// by_date: the framework's kernel at training.framework_version (FlashAttention-1 before July
// 2023, else FlashAttention-2, or Transformer Engine's fused attention on Megatron-core);
// flash_attn_1: FlashAttention-1's CUDA kernel; triton: flash-attn 1.x's Triton kernel
// (flash_attn_triton.py, llm-foundry's attn_impl "triton"); flash_attn_2: FlashAttention-2 or
// later whatever the date. TOML: "by-date", "flash-attn-1", "triton", "flash-attn-2".
enum class FlashKernel : uint8_t { by_date, flash_attn_1, triton, flash_attn_2 };

// Enum <-> the lower-case word used in TOML and on the CLI.
const char* to_string(FlashKernel v);
const char* to_string(Arch v);
const char* to_string(Norm v);
const char* to_string(Activation v);
const char* to_string(Position v);
const char* to_string(Recompute v);
const char* to_string(Precision v);
const char* to_string(Optimizer v);
const char* to_string(LaunchMode v);
const char* to_string(ActivationProfile v);
const char* to_string(AttentionFlops v);
const char* to_string(RecomputeStyle v);
const char* to_string(CrossEntropyImpl v);
const char* to_string(GpuGeneration v);
const char* to_string(GpuLink v);  // the TOML word
// The vocabulary padding a framework applies (estimate.vocab_pad's default): Megatron-LM,
// NeMo and Megatron-DeepSpeed pad to --make-vocab-size-divisible-by 128 (× tp); torchtitan
// and PyTorch FSDP stacks keep the tokenizer's size (1: only the per-rank shard of an
// uneven TP split rounds up).
int default_vocab_pad(Framework f);
const char* link_name(GpuLink v);  // for people: "NVLink", "PCIe", "Infinity Fabric", "loopback"
const char* to_string(Framework v);
const char* to_string(Fp8Recipe v);
const char* to_string(Fp8Format v);
const char* to_string(OffloadDevice v);
const char* to_string(PipelineSchedule v);
const char* to_string(StateDtype v);
double state_dtype_bytes(StateDtype v);  // oom4: 4, 2, 2, 1, 0, 2
// The schedule a job runs: `automatic` resolved by vpp.
PipelineSchedule effective_schedule(PipelineSchedule s, int vpp);

// Decoder-only transformer shape. Defaults that depend on `arch` are filled by the loader:
//   gpt:   layernorm, gelu, learned positions, tied embeddings, biases, ffn = 4·hidden
//   llama: rmsnorm, swiglu, rope, untied output, no biases, ffn = 256·ceil(8·hidden/3/256)
struct ModelSpec {
    std::string name;           // preset name, HF model_type, or what the user called it
    Arch arch = Arch::gpt;
    int layers = 0;             // transformer blocks
    int hidden = 0;             // model width h
    int heads = 0;              // attention (query) heads a
    int kv_heads = 0;           // key/value heads (GQA/MQA when < heads)
    int ffn_hidden = 0;         // MLP inner width (per expert for MoE)
    int vocab = 0;              // vocabulary size V (unpadded)
    int seq_len = 0;            // training sequence length s
    bool tied_embeddings = true;
    Norm norm = Norm::layernorm;
    Activation activation = Activation::gelu;
    Position position = Position::learned;
    bool bias = true;           // biases on every linear layer (GPT-2 style)
    bool qkv_bias = false;      // bias on the QKV projection only (Qwen2); implied by bias
    int experts = 0;            // MoE experts per layer; 0 = dense MLP
    int top_k = 0;              // experts each token is routed to (MoE only)
    double rope_theta = 10000.0;
    double norm_eps = 1e-5;
    // oom4: hidden / attention dropout (Megatron-LM --hidden-dropout, --attention-dropout;
    // NeMo hidden_dropout, attention_dropout, ffn_dropout). Unset = by arch: Megatron-LM's GPT
    // defaults (0.1) for gpt, none for llama. Off = no dropout masks are saved (PyTorch's
    // dropout returns its input at p = 0).
    std::optional<bool> dropout;
    // mla: shapes of recent open models (Qwen3, DeepSeek-V2/V3). 0 = the classic layout.
    int head_dim_given = 0;           // attention head width d when ≠ hidden / heads (HF head_dim,
                                      // Megatron --kv-channels); with MLA the query/key width
                                      // without the RoPE part (HF qk_nope_head_dim, --qk-head-dim)
    int moe_ffn_hidden = 0;           // each routed expert's MLP width (HF moe_intermediate_size,
                                      // --moe-ffn-hidden-size); 0 = ffn_hidden
    int shared_expert_ffn_hidden = 0; // total MLP width of the shared experts every token passes
                                      // (--moe-shared-expert-intermediate-size; HF n_shared_experts ×
                                      // moe_intermediate_size); 0 = none
    int first_dense_layers = 0;       // leading layers of a MoE model with a dense MLP of ffn_hidden
                                      // (HF first_k_dense_replace; --moe-layer-freq [0]*k+[1]*(L−k))
    int q_lora_rank = 0;              // MLA query compression rank; 0 = queries projected directly
    int kv_lora_rank = 0;             // MLA key/value compression rank; > 0 turns MLA on
    int qk_rope_head_dim = 0;         // MLA: decoupled RoPE query/key width per head (--qk-pos-emb-head-dim)
    int v_head_dim = 0;               // MLA: value width per head (--v-head-dim)
    int mtp_layers = 0;               // multi-token prediction depth (DeepSeek-V3; --mtp-num-layers)
    bool qk_layernorm = false;        // mla: a norm over each head's query and key (Qwen3, --qk-layernorm;
                                      // HF q_norm / k_norm); MLA's latent norms are counted regardless
    // deepep: group-limited routing (HF n_group / topk_group; Megatron --moe-router-num-groups /
    // --moe-router-group-topk; DeepSeek-V3: 8 / 4): the experts form num_groups equal groups and
    // each token picks its top_k experts inside its group_topk best groups. 0 / 0 = unlimited.
    int moe_router_num_groups = 0;
    int moe_router_group_topk = 0;

    // Query/key head width without any RoPE part: head_dim_given, else hidden / heads.
    int head_dim() const { return head_dim_given > 0 ? head_dim_given : (heads > 0 ? hidden / heads : 0); }
    // Routed experts' MLP width.
    int expert_ffn_hidden() const { return moe_ffn_hidden > 0 ? moe_ffn_hidden : ffn_hidden; }
    bool mla() const { return kv_lora_rank > 0; }
    bool dropout_on() const { return dropout.value_or(arch == Arch::gpt); }  // oom4
    bool operator==(const ModelSpec&) const = default;
};

// mla: the integer model keys of recent open models' shapes (0 = the classic layout), under
// their TOML names — one list for the job file's reader and writer, the JSON view and the
// published-runs loader.
struct ModelShapeKey {
    const char* name;        // the [model] key
    int ModelSpec::*member;  // the field it sets
    int max;                 // the largest value allowed (0 is always allowed)
};
const std::vector<ModelShapeKey>& model_shape_keys();

// One accelerator's figures. Peaks are dense (no sparsity), in TFLOP/s; 0 = the
// precision has no hardware support. Bandwidths are GB/s (1e9 bytes/s) per direction.
struct GpuSpec {
    std::string name;           // preset key, e.g. "h100-sxm"
    std::string description;    // e.g. "NVIDIA H100 SXM5 80GB"
    double memory_gib = 0;      // usable device memory, GiB (as nvidia-smi reports / 1024)
    double fp32_tflops = 0;
    double tf32_tflops = 0;
    double bf16_tflops = 0;
    double fp16_tflops = 0;
    double fp8_tflops = 0;
    double hbm_gbps = 0;        // device memory bandwidth
    double link_gbps = 0;       // intra-node GPU↔GPU link (NVLink/xGMI/PCIe) per GPU
    GpuGeneration generation = GpuGeneration::other;  // selects the calibrated kernel efficiencies
    GpuLink link = GpuLink::nvlink;  // what link_gbps measures (the network line names it)
    // cost: the board's power under training load, W: its TDP / board power limit (datasheet,
    // assets/presets/gpus.toml); 0 = not known (no energy figure). training_cost.h.
    double power_w = 0;

    // Dense peak for the math precision used by `p` (fp32 → fp32, bf16 → bf16, ...).
    double peak_tflops(Precision p) const;
    bool operator==(const GpuSpec&) const = default;
};

struct ClusterSpec {
    int nodes = 0;
    int gpus_per_node = 0;
    GpuSpec gpu;
    double intra_gbps = 0;      // per-GPU bandwidth inside a node; default gpu.link_gbps
    double inter_gbps = 25.0;   // per-GPU bandwidth across nodes (one 200 Gb/s NIC per GPU)
    double host_memory_gib = 0; // host RAM per node, GiB (offload); 0 = not given (the cluster preset's, else unchecked)
    double pcie_gbps = 0;       // host↔GPU bandwidth per GPU, GB/s one direction; 0 = not given (from the GPU generation)
    // bits: parameters per second DeepSpeed's CPU-Adam updates on one node with all its CPUs
    // (offload); the cluster preset's (named, else the GPU's default cluster), else 0 = not known.
    double cpu_adam_params_per_s = 0;
    // hostov: host µs one eager PyTorch op costs on the node's CPU (host.cpp); the cluster
    // preset's (named, else the GPU's default cluster), else 0 = the DGX H100 figure.
    double host_op_us = 0;
    // nccl (issue 15): the network as NCCL uses it. inter_gbps above is each GPU's share of
    // the node's NIC line rate (nics_per_node · nic Gb/s / 8 / gpus_per_node); a group with k
    // members on a node drives k shares at once (collectives.cpp). 0 NICs = one per GPU.
    int nics_per_node = 0;      // compute NICs per node (cluster preset, else the GPU's default cluster)
    bool rail_optimized = true; // NIC i of every node on the same leaf switch (rail)
    bool nvls = false;          // NVLink SHARP (NVSwitch gen3+): in-switch all-reduce inside a node
    std::vector<std::string> hosts;  // optional; when given, one per node
    // A cluster profile measured by `ptd calibrate` (cluster_profile.h), as written: relative
    // to the job file's folder. "" = none: the GPU preset's figures.
    std::string profile;
    // gb200: GPUs per NVLink domain — several hosts joined by NVLink switches (GB200 NVL72: 18
    // trays of 4 GPUs, 72 GPUs in one domain). 0 (or ≤ gpus_per_node) = the domain is one node.
    // As written (cluster.nvlink_domain) or the cluster preset's; see job_nvlink_domain().
    int nvlink_domain = 0;
    // cost (issue 28 point 5): time, money, energy and checkpoints of a whole training run
    // (training_cost.h, docs/estimators.md "Time and cost to train"). 0 = not given: the
    // documented default (or, for the price, no cost figure).
    double gpu_hour_usd = 0;           // price of one GPU-hour, USD; 0 = not given: no cost
    double storage_gbps = 0;           // checkpoint storage bandwidth for the whole job, GB/s; 0 = default per GPU
    double pue = 0;                    // facility power ÷ IT power; 0 = the default
    double host_power_w = 0;           // a node's power besides its GPUs (CPUs, memory, NICs, switches, fans), W; 0 = default
    double failures_per_gpu_hour = 0;  // job-stopping failures per GPU-hour; 0 = the Llama 3 rate

    int world_size() const { return nodes * gpus_per_node; }
    // gb200: the job's GPUs per NVLink domain, as its ranks fill hosts and then domains: at
    // least one node; a domain larger than the job is the job; otherwise the largest multiple
    // of gpus_per_node ≤ nvlink_domain that divides the GPU count, so every domain holds the
    // same ranks (128 GPUs on 72-GPU NVL72 racks: 64 per rack, as a block scheduler places them).
    int job_nvlink_domain() const {
        return nvlink_domain <= gpus_per_node ? (gpus_per_node > 1 ? gpus_per_node : 1) : job_nvlink_domain_filled();
    }
    int job_nvlink_domain_filled() const;  // the case nvlink_domain > gpus_per_node
    bool operator==(const ClusterSpec&) const = default;
};

// stackdef (issue 29 point 1): keys whose default is the stack's (training.framework at
// training.framework_version), not one value for every job: stack_defaults.h gives each
// stack's value and its source. TOML names in stack_key_name().
enum class StackKey : uint8_t {
    sequence_parallel,  // first: tp_comm_overlap and async TP follow it
    distributed_optimizer,
    overlap_grad_reduce,
    overlap_param_gather,
    tp_comm_overlap,
    grad_reduce_in_fp32,
    overlap_p2p_comm,
    scatter_gather_tensors_in_pipeline,
    async_tensor_model_parallel_allreduce,
    recompute_style,
    fp8_param_gather,
    cross_entropy,
    moe_permute_fusion,
    moe_router_fusion,
    count
};
constexpr uint32_t stack_key_bit(StackKey k) { return 1u << (unsigned)k; }
// A default the job's stack supplied: "parallel.overlap_grad_reduce", "true", and why.
// mbrecipe: the keys outside StackKey that a Megatron-Bridge performance recipe sets, one bit
// each in JobSpec::Origin::recipe_keys_written.
enum RecipeKeyBit : uint16_t {
    kRecipeMoeDispatcher = 1u << 0,         // parallel.moe_dispatcher
    kRecipeMoeA2aOverlap = 1u << 1,         // parallel.moe_a2a_overlap
    kRecipeSharedExpertOverlap = 1u << 2,   // parallel.moe_shared_expert_overlap
    kRecipeCudaGraphImpl = 1u << 3,         // parallel.cuda_graph_impl
    kRecipeCudaGraphScope = 1u << 4,        // parallel.cuda_graph_scope
    kRecipeMoePadToCapacity = 1u << 5,      // parallel.moe_pad_to_capacity
    kRecipeAccountForEmbedding = 1u << 6,   // parallel.account_for_embedding_in_pipeline_split
    kRecipeAccountForLoss = 1u << 7,        // parallel.account_for_loss_in_pipeline_split
    kRecipeRecompute = 1u << 8,             // parallel.recompute
    kRecipeRecomputeModules = 1u << 9,      // parallel.recompute_modules
};

struct StackDefault {
    std::string key, value, source;
    bool operator==(const StackDefault&) const = default;
};

struct ParallelSpec {
    int tp = 1;                 // tensor parallel
    int pp = 1;                 // pipeline parallel
    int dp = 0;                 // data parallel; 0 in the file = derived from world size
    int cp = 1;                 // context parallel
    int ep = 1;                 // expert parallel (divides dp·cp; MoE only)
    int vpp = 1;                // virtual pipeline chunks per stage (interleaved 1F1B)
    int zero = 0;               // ZeRO stage 0..3
    bool distributed_optimizer = false;  // Megatron's sharded fp32 optimizer (zero must be 0)
    // hsdp: replicas of the sharded model states (hybrid sharding). The dp·cp data-parallel ranks
    // form dp_replicate groups of (dp / dp_replicate)·cp consecutive ranks; each group shards the
    // ZeRO / FSDP states among its ranks, and each gradient shard is all-reduced across the groups.
    // torchtitan data_parallel_replicate_degree, PyTorch FSDP HYBRID_SHARD, Megatron-core
    // --num-distributed-optimizer-instances, DeepSpeed MiCS (mics_shard_size = dp / dp_replicate).
    // 1 = one group: every data-parallel rank holds its own shard.
    int dp_replicate = 1;
    bool sequence_parallel = false;
    Recompute recompute = Recompute::none;
    RecomputeStyle recompute_style = RecomputeStyle::megatron;  // what recompute = selective saves
    // recmod: which modules recompute = "selective" recomputes (RecomputeModuleBit; TOML
    // recompute_modules = ["core_attn", ...]); the default is Megatron's ["core_attn"].
    uint32_t recompute_modules = kRecomputeCoreAttn;
    std::string order = "tp-cp-ep-dp-pp";  // rank order, fastest-varying first
    std::vector<int> layers_per_stage;      // optional; pp entries (or pp·vpp), sum = layers; 0 = a chunk
                                            // without transformer layers (the embedding, MTP or loss alone)
    // Megatron-core's layout string (--pipeline-model-parallel-layout, pipeline_layout.h), as the
    // job wrote it: loading reads it into layers_per_stage (one entry per chunk) and, unless
    // the job writes vpp, vpp; empty = not written.
    std::string pipeline_layout;
    // overlap: which communication runs concurrently with compute (docs/job-spec.md gives the
    // Megatron-LM / DeepSpeed / torchtitan equivalents; defaults are Megatron-LM's without flags).
    bool overlap_grad_reduce = false;   // DP gradient reduction during the last micro-batch's backward
    bool overlap_param_gather = false;  // sharded optimizer's parameter all-gather during the next forward
    bool tp_comm_overlap = false;       // TP all-gather / reduce-scatter pipelined with the GEMMs (needs SP)
    int fsdp_prefetch = 1;              // ZeRO-3 / FSDP: layers gathered ahead of the one computing (0 = none)
    // offload: ZeRO-Offload / Megatron's --optimizer-cpu-offload (fp32 master weights, optimizer
    // states and the optimizer step in host memory; needs a sharded optimizer), and ZeRO-3's
    // offload_param (the 16-bit parameter shard in host memory; needs zero = 3).
    OffloadDevice offload_optimizer = OffloadDevice::none;
    bool offload_params = false;
    // zb: the pipeline schedule (docs/job-spec.md, docs/estimators.md "Schedules").
    PipelineSchedule schedule = PipelineSchedule::automatic;
    // l405: Megatron-LM's --account-for-embedding-in-pipeline-split / --account-for-loss-in-
    // pipeline-split: the input embedding / the output layer and loss count as one layer each
    // when the layers are split into pp·vpp chunks, so the first / last chunk holds one
    // transformer layer fewer (the Llama 3 paper's 126 = 16·8 − 2 layout).
    bool account_for_embedding_in_pipeline_split = false;
    bool account_for_loss_in_pipeline_split = false;
    // l405: Megatron's --microbatch-group-size-per-virtual-pipeline-stage (the Llama 3 paper's
    // N): micro-batches run through one model chunk before the next; interleaved schedule
    // only; 0 = pp (Megatron's default). Allowed: pp ≤ N ≤ micro-batches per step.
    int microbatch_group_size = 0;
    // oomnemo: Megatron-core's DistributedDataParallelConfig.grad_reduce_in_fp32 (Megatron-LM:
    // fp32 main grads unless --grad-reduce-in-bf16): bf16 runs without ZeRO keep and reduce an
    // fp32 gradient buffer. NeMo 2.0 / Megatron-Bridge performance recipes set it false: the
    // gradient buffer and its reduction are bf16.
    bool grad_reduce_in_fp32 = true;
    // oomnemo: Megatron-core's activation offloading (TransformerConfig cpu_offloading = true,
    // cpu_offloading_activations, cpu_offloading_num_layers = N; Transformer Engine's
    // get_cpu_offload_context): the saved activations of N of the layers go to host memory
    // during forward and come back before their backward. 0 = off; needs pp = 1 and N < layers.
    int activation_offload_layers = 0;
    // tt405: PyTorch's micro-pipelined ("async") TP — torchtitan's enable_async_tensor_parallel:
    // Inductor's micro_pipeline_tp pass fuses each all-gather with the matmuls that consume it
    // and each matmul with the reduce-scatter of its output, decomposed into tp steps over
    // SymmetricMemory (copy-engine p2p copies). Needs sequence_parallel and torch_compile (tp > 1).
    bool async_tp = false;
    int mb_group_size() const { return microbatch_group_size > 0 ? microbatch_group_size : pp; }
    // p2psg: Megatron-LM's scatter/gather optimisation of the pipeline send / recv (Narayanan
    // et al. 2021 §4.1; megatron/p2p_communication.py, default on from Feb 2021 with
    // --no-scatter-gather-tensors-in-pipeline to disable): without sequence parallelism each
    // TP rank sends 1/tp of the activation and the receiver all-gathers it over NVLink.
    // Megatron-Core dropped it in March 2023 (the flag was ignored, then removed), so it is off
    // by default here: true describes Megatron-LM of 2021 – early 2023. framework megatron only.
    bool scatter_gather_tensors_in_pipeline = false;
    // recomp: Megatron-LM's asynchronous TP collectives in a column-parallel linear's backward
    // (the input gradient's all-reduce — with SP reduce-scatter — beside the weight-gradient
    // GEMM). On from Sep 2021 (--no-async-tensor-model-parallel-allreduce turned it off until
    // Apr 2024, then was ignored; Megatron-Core and Transformer Engine always do it); false describes Megatron-LM
    // before Sep 2021 (Narayanan et al. 2021). framework megatron only.
    bool async_tensor_model_parallel_allreduce = true;
    // papers: full recompute keeps only each layer's input; with this set, each TP rank keeps
    // 1/tp of it and the checkpoint function all-gathers it over the TP group before the
    // layer's recompute (Megatron-LM --distribute-saved-activations, earlier
    // --distribute-checkpointed-activations: tensor_parallel/random.py CheckpointFunction;
    // metaseq / fairscale --distribute-checkpointed-activations; DeepSpeed
    // activation_checkpointing.partition_activations). Needs recompute = full and tp > 1;
    // with sequence parallelism the input is already sharded and Megatron ignores it.
    bool distribute_saved_activations = false;

    // blackwell: Megatron's --overlap-p2p-communication (ModelParallelConfig.overlap_p2p_comm):
    // the interleaved schedule posts each chunk's pipeline send / receive asynchronously and
    // waits for it only before the chunk that needs it, so the hop runs beside the next chunk's
    // compute. Megatron-LM's training scripts turn it on by default and force it off without
    // interleaving (arguments.py); NeMo 2.0's MegatronCommOverlapCallback and Megatron-Bridge's
    // CommOverlapConfig set it for vpp > 1. framework megatron, vpp > 1 only; false = every hop
    // exposed (Megatron-LM before 2023, --no-overlap-p2p-communication).
    bool overlap_p2p_comm = true;

    // moe2: Megatron-core's --expert-tensor-parallel-size ("MoE parallel folding",
    // parallel_state.py initialize_model_parallel): the routed experts' weights split expert_tp
    // ways while attention and dense MLPs keep tp; the expert groups fold the tp·cp·dp ranks of
    // a stage into expert_tp × ep × expert-dp. 0 = tp (the experts split like the dense layers).
    int expert_tp = 0;
    int etp() const { return expert_tp > 0 ? expert_tp : tp; }
    // moe2: Megatron's --moe-shared-expert-overlap: the shared experts' MLP runs beside the
    // token dispatcher's all-to-all (Megatron-core SharedExpertMLP on its own stream).
    bool moe_shared_expert_overlap = false;
    // deepep: the token dispatcher (MoeDispatcher above); alltoall = today's model.
    MoeDispatcher moe_dispatcher = MoeDispatcher::alltoall;
    // deepep: Megatron's --overlap-moe-expert-parallel-comm (Megatron-Bridge moe_a2a_overlap):
    // the combined 1F1B schedule (pipeline_parallel/combined_1f1b.py) runs one micro-batch's
    // forward beside another's backward, each one's dispatch / combine under the other's compute.
    bool moe_a2a_overlap = false;
    // hostov: CUDA graphs (CudaGraphImpl, CudaGraphScopeBit above): what of the step the host
    // replays as graphs instead of launching op by op. framework megatron only.
    CudaGraphImpl cuda_graph_impl = CudaGraphImpl::none;
    uint32_t cuda_graph_scope = 0;
    // hostov: every expert's input padded to a static capacity, so the token dispatcher needs no
    // device→host copy of the token counts (no host sync per MoE layer): Megatron-core
    // --moe-pad-expert-input-to-capacity with --moe-expert-capacity-factor (alltoall) or
    // HybridEP's --moe-expert-rank-capacity-factor. Loads stay modelled as balanced (capacity 1).
    bool moe_pad_to_capacity = false;
    // moefp8pad: Megatron's --moe-router-padding-for-fp8 (later --moe-router-padding-for-quantization):
    // the router rounds each expert's token count up to the FP8 GEMM alignment in the routing map,
    // so the grouped MLP needs no Fp8Padding / Fp8Unpadding copies of its rows. Off by default
    // (Megatron-core's default): an FP8 grouped MLP then copies its input and output rows
    // into and out of the aligned layout every micro-batch.
    bool moe_router_padding_for_fp8 = false;
    // moeperm: Megatron's --moe-permute-fusion: the token dispatcher's permute / unpermute run as
    // Transformer Engine's fused kernels (moe_permute / moe_unpermute: one pass each way) instead
    // of PyTorch's gather, scatter-add, probability weighting and sum. A stack key (StackKey).
    bool moe_permute_fusion = false;
    // moerouter: Megatron's --moe-router-fusion (Megatron-core 0.14, Aug 2025; Transformer Engine
    // 2.7's fused top-k, score function and auxiliary-loss kernels): the router's forward runs 31
    // kernels instead of 72, which the host enqueues one by one. A stack key (StackKey).
    bool moe_router_fusion = false;

    bool operator==(const ParallelSpec&) const = default;
};

struct TrainingSpec {
    int micro_batch = 1;        // sequences per micro-batch per replica
    int global_batch = 0;       // sequences per step; 0 in the file = micro_batch · dp
    Precision precision = Precision::bf16;
    Optimizer optimizer = Optimizer::adamw;
    Framework framework = Framework::megatron;  // whose kernels run the model (time model)
    // stackdef (issue 29 point 1): the date of the stack's code as YYYYMM (TOML
    // framework_version = "2021-04" or "2021"; 202104): the defaults of the keys a job does not
    // write follow the stack as it was then (stack_defaults.h). 0 = the stack as it is today.
    int framework_version = 0;
    bool torch_compile = false; // torch.compile fuses the elementwise ops (torchtitan, pytorch-fsdp only)
    double lr = 3e-4;           // peak learning rate
    double min_lr = 3e-5;       // cosine floor
    int warmup = 0;             // warmup steps
    int steps = 100;            // training steps (iterations)
    // cost: tokens to train (the token budget); 0 = not given: the time and cost figures count
    // `steps` steps. A double: budgets reach 1e13 and beyond.
    double tokens = 0;
    double weight_decay = 0.1;
    double grad_clip = 1.0;     // global-norm clip; 0 = off
    int seed = 1234;
    std::string data = "synthetic";  // "synthetic", a text file, or an llm.c .bin token file
    bool flash_attention = true;     // fused attention: no s×s score/softmax tensors kept
    FlashKernel flash_kernel = FlashKernel::by_date;  // tritonfa: training.flash_attention_kernel
    // ---- fp8 (issue 15 point 3): FP8 linear-layer GEMMs on top of bf16 ----
    Fp8Recipe fp8 = Fp8Recipe::none;
    Fp8Format fp8_format = Fp8Format::hybrid;
    int fp8_amax_history_len = 1024;  // delayed scaling's amax window (TE's default; Megatron's is 1)
    int fp8_bf16_first_layers = 0;    // transformer layers kept in bf16 at the start (Megatron
    int fp8_bf16_last_layers = 0;     // --first-last-layers-bf16) and at the end
    // oomnemo: Megatron-LM's --fp8-param-gather (FP8 primary weights; NeMo 2.0 and
    // Megatron-Bridge FP8 recipes set fp8_param_gather = True): the FP8 layers' linear weights
    // exist only as FP8 (+ TE's transposed copy), no bf16 copy; Transformer Engine recipes only.
    bool fp8_param_gather = false;
    // oom4: optimizer state precision (docs/job-spec.md). main_params_dtype: the master copy of
    // the weights (fp32; fp16 / bf16 a 16-bit copy; none = the 16-bit weights are the master);
    // exp_avg_dtype / exp_avg_sq_dtype: Adam's first and second moment (SGD: the momentum is
    // exp_avg). Megatron-LM: --use-precision-aware-optimizer with --main-params-dtype,
    // --exp-avg-dtype, --exp-avg-sq-dtype; NeMo 1.x: optim.dtype of distributed_fused_adam.
    StateDtype main_params_dtype = StateDtype::fp32;
    StateDtype exp_avg_dtype = StateDtype::fp32;
    StateDtype exp_avg_sq_dtype = StateDtype::fp32;
    // recipe (issue 29 point 6): the stack's own configuration for the model, by the name the
    // stack gives it (training.recipe = "nemotron/nemotron_340b", NeMo-Framework-Launcher's
    // training config); "" = none. Where it sets a key the job leaves unwritten (the optimizer
    // states' dtypes above), that key takes the recipe's value at framework_version
    // (stack_defaults.h recipe_state_dtypes).
    std::string recipe;
    // papers: without flash attention, the attention scores' scale, causal mask and softmax
    // run as one fused kernel (Megatron-LM's FusedScaleMaskSoftmax, default since 2020; GPT-NeoX
    // scaled_upper_triang_masked_softmax_fusion). false = Megatron-LM --no-masked-softmax-fusion,
    // or code before the fused kernel (Megatron-LM 2019): scale, mask and softmax are separate
    // PyTorch ops, each a pass over the b·a·s² scores (compute.cpp, docs/estimators.md).
    bool masked_softmax_fusion = true;

    int grad_accum(int dp) const { return global_batch / (micro_batch * dp); }
    bool operator==(const TrainingSpec&) const = default;
};

// [launch.slurm] (issue 32) — what `ptd launch --slurm` writes into sbatch.sh for the
// cluster's rules. Empty, 0 and false are not written: the cluster's defaults apply.
struct SlurmSpec {
    std::string partition, account, qos;
    std::string time;                 // Slurm's forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
    bool exclusive = false;           // whole nodes (--exclusive)
    int cpus_per_task = 0;            // --cpus-per-task; 0 = Slurm's default (often 1)
    std::string mem;                  // per node: "0" (all of it), "500G", "64000M"
    std::string gpu_bind;             // --gpu-bind: "closest", "single:1", "map_gpu:0,1,...", "none"
    std::string constraint, nodelist, exclude;
    std::vector<std::string> extra_sbatch;      // more #SBATCH options, each "--name[=value]"
    std::string setup;                // shell lines run once before srun (module load, exports)
    std::string container_image;      // pyxis / enroot: srun --container-image
    std::vector<std::string> container_mounts;  // "SRC:DST[:FLAGS]", srun --container-mounts
    bool sbcast = false;              // copy the engine and job.toml to node-local disk first

    bool operator==(const SlurmSpec&) const = default;
};

// [launch.k8s] (issue 32): what `ptd launch --k8s` / `ptd export --format jobset | trainjob`
// write besides the ranks: the image, topology hints and a node selector (docs/launcher.md).
struct K8sSpec {
    std::string image;                // container image holding ptd-engine; --image wins
    // The node label whose value names a topology domain (an NVLink domain such as a GB200
    // NVL72 rack, a rack, a rail block): the JobSet runs one Job per domain of nodes_per_domain
    // pods with JobSet's exclusive-topology annotation on it. "" = no topology hint.
    std::string topology_key;
    int nodes_per_domain = 0;         // 0 = the job's NVLink domain in nodes (cluster.nvlink_domain), else every node
    std::string gpu_product;          // nodeSelector value for the GPU product ("" = no selector)
    std::string gpu_product_label = "nvidia.com/gpu.product";  // NVIDIA GPU Feature Discovery's label

    bool operator==(const K8sSpec&) const = default;
};

struct LaunchSpec {
    LaunchMode mode = LaunchMode::local;
    std::string hostfile;       // DeepSpeed-style "host slots=N"; "" = cluster.hosts
    std::string user;           // ssh user; "" = ~/.ssh/config or current user
    int port = 22;
    std::string identity;       // ssh private key path; "" = agent / defaults
    std::string engine = "ptd-engine";  // engine binary on each host
    bool upload = false;        // copy the local engine to each host over SFTP
    std::string run_dir = "runs";
    std::string master_addr;    // "" = first host (127.0.0.1 for local)
    int master_port = 0;        // 0 = pick a free port
    std::vector<std::string> env;  // extra environment variable names to forward
    bool accept_new_host_keys = false;
    double connect_timeout_s = 10;
    double grace_s = 5;         // TERM → KILL grace period on stop
    // issue 31: a failed rank or host restarts the job from its newest complete checkpoint,
    // up to max_restarts times (0 = a failure ends the run); checkpoint_every is passed to
    // every rank as ptd-engine --checkpoint-every (0 = the engine writes none).
    int max_restarts = 0;
    int checkpoint_every = 0;
    // issue 28: the NCCL network names an exported launch script sets (ptd export --launcher):
    // the compute InfiniBand HCAs (NCCL_IB_HCA; storage NICs left out) and the interface of
    // NCCL's bootstrap socket (NCCL_SOCKET_IFNAME). Empty = not set: NCCL picks them itself.
    std::vector<std::string> nccl_ib_hca;
    std::string nccl_socket_ifname;
    SlurmSpec slurm;                  // [launch.slurm]
    K8sSpec k8s;                      // [launch.k8s]

    bool operator==(const LaunchSpec&) const = default;
};

// [paths] (issue 28) — where an exported launch script (ptd export --launcher) finds the
// tokenizer and writes checkpoints and logs, on the cluster's file system, as written. Empty =
// not given: the script holds a <PATH_TO_...> placeholder and refuses to start until it is set.
// The data is training.data.
struct PathsSpec {
    std::string tokenizer;  // a Hugging Face tokenizer folder / name, or a tokenizer model file
    std::string save;       // checkpoints written here
    std::string load;       // checkpoints resumed from ("" = the save folder when it is given)
    std::string logs;       // TensorBoard / the framework's output folder
    int save_interval = 0;  // steps between checkpoints; 0 = training.steps (one at the end)

    bool operator==(const PathsSpec&) const = default;
};

// [estimate] — how the estimators count. Every figure is documented in docs/estimators.md
// with its source; the defaults are what a Megatron-LM run on NVIDIA GPUs shows.
struct EstimateSpec {
    ActivationProfile activation_profile = ActivationProfile::megatron;
    AttentionFlops attention_flops = AttentionFlops::full;  // full s² (PaLM) or causal s²/2
    double cuda_context_gib = 0.5;   // CUDA context + kernels per process (0 on the cpu preset)
    double nccl_gib = 0.5;           // NCCL buffers per communicator with > 1 rank
    double fragmentation = 0.05;     // caching-allocator reserve, fraction of allocated bytes
    double headroom = 0.0;           // fraction of device memory a layout must leave free to fit
    // vocab padded to a multiple of vocab_pad · tp; unwritten: the framework's
    // (default_vocab_pad), set by derive_job_defaults.
    int vocab_pad = 128;
    double zero_bucket_elements = 5e8;  // DeepSpeed reduce/allgather bucket size (elements)
    CrossEntropyImpl cross_entropy = CrossEntropyImpl::megatron;  // the loss's logits copies on the last stage
    double cublas_workspace_mib = -1;   // cuBLAS workspace per process; < 0 = the GPU's default (0 on cpu)
    // menorm: the pre-norms (LN1, LN2, the final norm, MLA's latent norms) save their output for
    // backward instead of their input, as Apex's FusedLayerNorm / FusedRMSNorm with
    // memory_efficient = True do (Megatron-LM --memory-efficient-layer-norm). The output is the
    // next linear's input, kept anyway, so the norm's input (the residual stream) is freed.
    bool memory_efficient_norm = false;
    // Llama 3 §3.3.2: each pipeline chunk's received input (the stage-boundary activation) is
    // freed after its forward, so an in-flight chunk no longer holds it for its first layer's
    // pre-norm (docs/estimators.md "Pipeline: micro-batches in flight"). No Megatron-LM or
    // torchtitan option does this; Megatron-core's deallocate_pipeline_outputs (always on in
    // Megatron-LM, NeMo and Megatron-Bridge) is the output half, which PTD counts as freed.
    bool deallocate_pipeline_inputs = false;

    bool operator==(const EstimateSpec&) const = default;
};

// The whole job. `origin` remembers how [model] and the GPU were given so that saving
// writes `preset = ...` plus only the keys the user changed.
struct JobSpec {
    ModelSpec model;
    ClusterSpec cluster;
    ParallelSpec parallel;
    TrainingSpec training;
    LaunchSpec launch;
    PathsSpec paths;
    EstimateSpec estimate;

    struct Origin {
        std::string file;           // the TOML file ("<string>" when loaded from text)
        std::string model_preset;   // [model] preset = "..."
        std::string model_hf_config;// [model] hf_config = "..." as written
        std::string gpu_preset;     // [cluster] gpu = "..." or [cluster.gpu] preset
        // The model / GPU before the user's overrides (preset or HF import); saving writes
        // only the keys that differ from these. Unset = everything was written explicitly.
        std::optional<ModelSpec> model_base;
        std::optional<GpuSpec> gpu_base;
        bool dp_given = false;      // dp was written in the file
        bool global_batch_given = false;
        // batchchoice: training.micro_batch was written. Unwritten in a job that writes its
        // layout and global batch, it is chosen (plan/batch_choice.h): the loader starts it
        // at 1, then takes the fastest that fits, as a tuned run of the framework has it;
        // saving leaves it unwritten. A job built in code writes it.
        bool micro_batch_given = true;
        // batchchoice: parallel.vpp was written (or came from parallel.pipeline_layout). An
        // interleaved schedule without it gets its depth chosen the same way. A job built in
        // code writes it.
        bool vpp_given = true;
        // The file has no [parallel] table: the user gave a model, a cluster and (maybe) a
        // global batch and left the layout to the planner. `parallel` then holds the
        // defaults (tp = pp = 1, dp = world), which nothing may use as if chosen.
        bool no_layout = false;
        // training.precision / flash_attention were not written: they follow the GPU
        // (default_precision, default_flash_attention) and saving keeps them unwritten.
        bool precision_defaulted = false;
        bool flash_attention_defaulted = false;
        // estimate.activation_profile was not written: it follows the GPU
        // (default_activation_profile); saving writes it only where it differs.
        bool activation_profile_defaulted = false;
        bool vocab_pad_defaulted = false;  // estimate.vocab_pad not written: the framework's default
        // stackdef: which StackKey the job wrote (bit per key); an unwritten one takes its
        // stack's default in derive_job_defaults, which lists what it applied in
        // stack_defaults. A job built in code writes every key (all bits set).
        uint32_t stack_keys_written = ~0u;
        // recipe: which of training.main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype the job
        // wrote (bits 1, 2, 4 in that order); an unwritten one takes its recipe's dtype,
        // else fp32. A job built in code writes all three.
        uint8_t state_dtypes_written = 0b111;
        // mbrecipe: which of the MoE and CUDA-graph keys a Megatron-Bridge performance recipe
        // sets (RecipeKeyBit) the job wrote; an unwritten one takes its recipe's value
        // (training.recipe), else the plain default. A job built in code writes all of them.
        uint16_t recipe_keys_written = 0xffff;
        // mbrecipe, ttsplit: parallel.layers_per_stage was not written but came from the job's
        // stack — its performance recipe's pipeline layout (DeepSeek-V3's) or torchtitan's own
        // split; derive_job_defaults computes it again for the current pp·vpp and saving leaves
        // it unwritten.
        bool layers_per_stage_from_stack = false;
        std::vector<StackDefault> stack_defaults;
        // planfw: estimate.headroom was written; else the planner leaves its framework's default
        // headroom free (plan_headroom, planner.h).
        bool headroom_given = false;
        bool intra_given = false;
        // nccl: [cluster] preset = "..." (a cluster preset), whether inter_gbps was written, and
        // where the network came from ("cluster preset dgx-h100", "dgx-h100, the default for
        // gpu h100-sxm", ...), for `ptd validate` / `ptd estimate`.
        std::string cluster_preset;
        bool inter_given = false;
        std::string network_source;
        // No cluster preset (named or the GPU's default) and no NIC keys: the network is the
        // generic one NIC per GPU at inter_gbps, which `ptd estimate` says loudly.
        bool network_generic = false;
        bool nvlink_domain_given = false;  // gb200: cluster.nvlink_domain was written (else the preset's, or one node)
        // Things the user should know that are not errors, e.g. HF config fields that were
        // approximated or ignored. `ptd validate` prints them as notes.
        std::vector<std::string> notes;
        // "parallel.tp" → where it was written; used to point cross-field errors at a line.
        std::map<std::string, SourceLoc> locations;
    } origin;

    int world_size() const { return cluster.world_size(); }
    // Whether the job states its layout ([parallel]); false = the planner must choose one.
    bool has_layout() const { return !origin.no_layout; }
    int grad_accum() const { return training.grad_accum(parallel.dp); }
    // Location of `key` if it was written, else of its table, else the file itself.
    SourceLoc where(const std::string& key) const;
};

struct PresetCatalog;

// Parse + fill defaults + validate. `file` is used in diagnostics and to resolve
// hf_config paths (relative to the job file's folder). Returns every problem found.
Result<JobSpec> load_job_file(const std::string& path, const PresetCatalog& presets);
Result<JobSpec> load_job_text(std::string_view toml_text, const std::string& file,
                              const PresetCatalog& presets);

// Cross-field checks on an already-typed spec (the studio calls this after each edit).
// Empty = valid. Each check has its own message naming the keys involved.
std::vector<Diagnostic> validate_job(const JobSpec& job);

// batchchoice: the depths (vpp ≥ 2, ascending) the interleaved schedule runs the job at —
// each one validate_job accepts with the job's other keys as they are; empty when none, or
// when the job fixes its split (layers_per_stage, pipeline_layout) or has pp < 2.
std::vector<int> interleaved_depths(const JobSpec& job);
// batchchoice: an interleaved job that leaves vpp out starts at the depth its written split
// says (layers_per_stage of pp·k entries: k), else the fewest chunks that run, else 1 (which
// validation then refuses, saying why); other jobs are left as they are. derive_job_defaults
// calls it; so does a job built in code that marks vpp unwritten.
void start_unwritten_depth(JobSpec& job);
// Whether the job validates and, on a Megatron-core stack, Megatron-LM's interleaved schedule
// accepts it (megatron_interleaved_refusal): what an unwritten value may be chosen among.
bool job_runs(const JobSpec& job);

// etp: the expert-group rules of a MoE layout, one place for validate_job (which words a
// message for each) and the planner (which searches ep and expert_tp by them). Bits of what
// is wrong with (tp, cp, dp, ep, expert_tp) for model `m`; 0 = valid. expert_tp 0 = tp.
enum ExpertLayoutProblem : unsigned {
    kExpertTpWidth = 1u << 0,     // expert_tp = tp, and tp does not divide moe_ffn_hidden
    kEpDense = 1u << 1,           // ep > 1 for a dense model
    kEpExperts = 1u << 2,         // ep does not divide experts
    kEpDataCp = 1u << 3,          // expert_tp = tp, and ep does not divide dp·cp
    kEtpDense = 1u << 4,          // expert_tp ≠ tp for a dense model
    kEtpFold = 1u << 5,           // expert_tp ≠ tp, and ep·expert_tp does not divide tp·cp·dp
    kEtpWidth = 1u << 6,          // expert_tp ≠ tp, and it does not divide the routed experts' width
    kEtpOrder = 1u << 7,          // expert_tp ≠ tp outside Megatron's default order tp-cp-ep-dp-pp
};
unsigned expert_layout_problems(const ModelSpec& m, int tp, int cp, int dp, int ep, int expert_tp, bool default_order);

// hsdp: what is wrong with `replicas` copies of the sharded model states (parallel.dp_replicate)
// for this stack and layout, worded as "got …; allowed: …" without the key; "" = valid. One
// place for validate_job and the planner's search. Each stack's own form: Megatron-core's
// --num-distributed-optimizer-instances (its distributed optimizer), PyTorch FSDP's
// HYBRID_SHARD / _HYBRID_SHARD_ZERO2 and torchtitan's data_parallel_replicate_degree (zero 2 or
// 3), DeepSpeed's MiCS (zero 3). The replicas split dp, and an MoE model's expert-DP group
// (tp·cp·dp / (expert_tp·ep); expert_tp 0 = tp) alike.
std::string replicate_problem(const ModelSpec& m, Framework framework, int zero, bool distributed_optimizer, int tp,
                              int cp, int dp, int ep, int expert_tp, int replicas);

// bits: where Megatron-LM's interleaved schedule refuses a layout that PTD can simulate.
// forward_backward_pipelining_with_interleaving (schedules.py) raises unless, with N the
// micro-batch group size (--microbatch-group-size-per-virtual-pipeline-stage, default pp) and
// m the micro-batches per step, pp ≤ N ≤ m and m mod N is 0 or ≥ pp (core ≥ 0.10; up to core
// 0.9: m a multiple of pp). validate_job refuses every such case but one: m < pp with N left
// at pp, which PTD runs as one group of m. True when Megatron-LM runs (pp, vpp, m, N);
// N = 0 means pp. Layouts without interleaving always run.
inline bool megatron_runs_interleaved(int pp, int vpp, long long microbatches, long long group) {
    if (pp < 2 || vpp < 2) return true;
    const long long n = group > 0 ? group : pp;
    if (n < pp || n > microbatches) return false;
    const long long last = microbatches % n;
    return last == 0 || last >= pp;
}
// The job's interleaved group size N (parallel.microbatch_group_size) kept in Megatron-LM's
// range [pp, max(pp, m)] for a layout with `pp` stages and `microbatches` per step — what a
// layout the planner tries with another pp or fewer micro-batches is scored (estimate.cpp
// derive) and written (apply_plan_entry) with; 0 (= pp) when the job leaves N out.
inline long long microbatch_group_in_range(long long job_group, int pp, long long microbatches) {
    if (job_group <= 0) return 0;
    return std::clamp<long long>(job_group, pp, std::max<long long>(pp, microbatches));
}
// The refusal for a job (framework-independent: what `ptd export --format megatron` refuses
// and, for training.framework = "megatron", what `ptd validate` / `ptd estimate` warn about):
// the key, what was given, what Megatron-LM allows and the fix; nullopt when it runs.
std::optional<Diagnostic> megatron_interleaved_refusal(const JobSpec& job);

// Derive dp from the world size and global_batch from micro_batch·dp where the file left
// them out (a job without a layout keeps global_batch 0: nothing stated gives it), and
// the precision / flash attention that follow the GPU where they were defaulted.
// Returns diagnostics when dp cannot be derived.
std::vector<Diagnostic> derive_job_defaults(JobSpec& job);
// gb200: the NVLink domain the estimate assumes, for `ptd validate` / `ptd estimate`:
// "one node (8 GPUs)" or "64 GPUs = 16 nodes (...how it follows from the preset...)".
std::string describe_nvlink_domain(const JobSpec& job);
// The network the collective model assumes, named by what the hardware has, for `ptd
// layout` / `ptd estimate`: "8 × 400 Gb/s NICs per node (rail-optimised), NVLink 450 GB/s
// with SHARP (NVLS) · NVLink domain one node (8 GPUs)", "... PCIe 31.5 GB/s", or for the
// cpu device on one machine "one machine, ranks exchange tensors over loopback at 10 GB/s
// (no NICs)". Without where it came from (origin.network_source).
std::string describe_network(const JobSpec& job);

// The precision a job on `gpu` trains in when the file does not say: bf16 where the GPU
// computes bf16 faster than fp32, else fp16 where it computes fp16 faster (V100), else
// fp32 (the `cpu` preset: the bundled engine stores bf16/fp16 but computes in fp32, so
// its 16-bit peaks equal its fp32 peak and 16-bit is allowed, not the default).
Precision default_precision(const GpuSpec& gpu);
// Whether fused (flash) attention is assumed when the file does not say: on GPUs with
// bf16 tensor cores (Ampere and newer, which FlashAttention-2 needs: bf16 faster than
// fp32); not on V100 or `cpu`.
bool default_flash_attention(const GpuSpec& gpu);
// Which activations the estimator counts when the file does not say: the bundled engine's
// own buffers on the `cpu` preset (nothing else trains there), Megatron-LM's elsewhere.
ActivationProfile default_activation_profile(const GpuSpec& gpu);
// Whether the GPU's tensor cores compute MX (microscaling, 1×32 block-scaled) FP8: NVIDIA
// Blackwell (B100/B200/B300, GB200/GB300). GpuSpec has no architecture field, so the preset
// name and description are read; MXFP8 needs this, the other FP8 recipes only fp8_tflops > 0.
bool gpu_has_mxfp8(const GpuSpec& gpu);

// For commands that need a chosen layout (layout, export, launch): an error naming the
// file and what to do when the job has none (no [parallel] table); empty otherwise.
// `command` is the command's name for the message ("ptd layout").
std::vector<Diagnostic> require_layout(const JobSpec& job, const std::string& command);
// For commands that need the global batch: an error naming training.global_batch when the
// job neither gives it nor states a layout to derive it from; empty otherwise.
std::vector<Diagnostic> require_global_batch(const JobSpec& job, const std::string& command);

// TOML text that load_job_text reads back into an equal spec.
std::string save_job_toml(const JobSpec& job);

// The job the studio and `ptd-studio` without a display start with: a Llama-class 7B
// model on 4 nodes × 8 H100 SXM. Always valid.
JobSpec default_job(const PresetCatalog& presets);
// A tiny GPT on `local` CPU ranks (TP2 × PP2 × DP1) that the bundled engine can train.
JobSpec tiny_local_job(const PresetCatalog& presets);

// Fill arch-dependent defaults (norm, activation, position, bias, tied, ffn_hidden,
// kv_heads) for fields the caller marks unset. Used by the TOML loader and HF importer.
struct ModelKeysGiven {
    bool kv_heads = false, ffn_hidden = false, tied_embeddings = false, norm = false,
         activation = false, position = false, bias = false;
};
void fill_model_defaults(ModelSpec& m, const ModelKeysGiven& given);

}  // namespace ptd
