// estimate_internal.h — what the estimator's model files share, not part of the public API.
// One layout's derived quantities (LayoutDerived) are computed once per evaluation in
// estimate.cpp and read by the four models, each in its own file with its sources:
//   memory.cpp       model states, activations, buffers, overheads per rank (+ engine_buffers.cpp)
//   compute.cpp      GEMM efficiency, FLOPs per token, forward/backward compute time
//   collectives.cpp  which groups leave the node, bandwidth and latency, collective times
//   overlap.cpp      what is hidden behind compute: the DP tail after the pipeline, optimizer step
// estimate.cpp assembles them with the pipeline schedule (timeline.h).
#pragma once

#include "ptd/model/estimate.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace ptd::est {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// ---- nccl: one communicator's placement and fabric (collectives.cpp) ------------------------
// How a parallel group sits on the nodes (members per node from the rank order) and the bus
// bandwidths NCCL sees for it. Filled by assign_group_links, read by nccl_time.
struct GroupNet {
    int n = 1;               // ranks in the group
    int per_node = 1;        // members on one node (k); gb200: node = NVLink domain (cluster.nvlink_domain)
    int nodes = 1;           // nodes (NVLink domains) the group spans
    double bus_intra = 0;    // NVLink bus bandwidth per rank, bytes/s (after comm_eff)
    double bus_inter = 0;    // the group's per-node NIC bandwidth, bytes/s (k NICs' worth, after comm_eff)
    double nvls_gain = 1;    // NVLink SHARP all-reduce bus-bandwidth gain inside a node (1 = none)
};

// fp8 (issue 15 point 3): HBM bytes per element that quantizing one linear layer's operands
// to FP8 moves (compute.cpp, fp8_cast_bytes, documents each figure).
struct Fp8CastBytes {
    double in_fwd = 0, grad_bwd = 0, in_bwd = 0;  // per input / output-gradient element
    double weight_fwd = 0, weight_bwd = 0;        // per weight element and micro-batch
    // fp8sp: an operand all-gathered by sequence parallelism under a TN-only FP8 GEMM (Hopper,
    // Ada) with a per-tensor TE recipe: its shard is cast to one FP8 orientation only
    // (sp_shard per shard element, 0 = in_fwd / grad_bwd as for any operand) and the transposed
    // copy is made from the gathered tensor in the backward (sp_transpose per gathered element).
    double sp_shard = 0, sp_transpose = 0;
    double shard_in() const { return sp_shard > 0 ? sp_shard : in_fwd; }
};

// Everything one evaluation needs, derived from the context + layout once (estimate.cpp).
struct ProfileTimes;

struct LayoutDerived {
    const ModelSpec* m;
    // A cluster profile's op times when the bundled engine runs the job (engine_time.cpp);
    // null: the preset's model. act_dtype: the engine's activation dtype ("f32", "bf16", "f16").
    const ProfileTimes* profile_times;
    // ptd-engine on a GPU without a cluster profile: the engine's op list timed from the GPU
    // preset (engine_time.cpp, the device model) instead of the framework model.
    bool engine_device;
    // Shared cores: the profile's host shares its cores (ProfileTimes::shared_cores): the schedule
    // places blocks under processor sharing (schedule.h CoreSharing) for this layout's ranks.
    double share_cores = 0, share_measured = 0, share_ranks_per_stage = 0;
    const char* act_dtype;
    int t, p, v, c, ep, dp, b, mbs;      // mbs = micro-batches per replica per step
    int world() const { return t * p * dp * c; }  // GPUs of the layout (ep lies inside dp)
    double s_local;                      // sequence per rank (s / cp)
    double tokens;                       // b · s_local
    double e;                            // activation bytes per element
    double vocab;                        // padded vocab
    double heads_l, kv_l, d, h, f_l;     // local heads, local KV heads, head dim, hidden, local MLP width
    bool sp, flash, dropout, swiglu, moe, layernorm, cpu;
    bool optimizer_sharded;              // ZeRO ≥ 1 or Megatron's distributed optimizer
    int zero;                            // ZeRO stage
    Recompute rc;
    RecomputeStyle rc_style;             // what recompute = selective saves (parallel.recompute_style)
    StateBytes dense_state, expert_state;
    OptimizerStateWidths state_widths;   // oom4: the optimizer states' bytes per element (the job's)
    double gemm_workspace_bytes;         // cuBLAS's and Transformer Engine's workspaces (memory.cpp)
    // Per-layer parameters on one rank.
    double layer_dense_params, layer_expert_params;
    double embed_params, output_params, final_norm_params;
    double peak, hbm;
    int nccl_groups;                     // communicators with > 1 rank (excluding the embedding group)
    int edp;                             // expert data-parallel size (dp·cp/ep)
    // hsdp: replicas of the sharded states (parallel.dp_replicate): the states shard over
    // dense_shards = dp·cp / dp_rep and expert_shards = edp / dp_rep ranks; 1 = one group.
    int dp_rep = 1, dense_shards = 1, expert_shards = 1;
    // Kernel efficiencies of the job's GPU generation (TimeModelConstants::kernel).
    double gemm_eff_max, flash_eff;
    double elementwise_factor;           // memory traffic of elementwise work relative to fused kernels
    // fa1seq, flashlen: a causal flash kernel's rate over a sequence of n tokens is n / (n + n₀)
    // of flash_eff (compute.cpp attention_length_slowdown); 0 = one rate at every length (the
    // kernels without a measured curve).
    double flash_half_rate_tokens = 0;
    // eagergpt: a LayerNorm / GELU / learned-position layer run eagerly (pytorch-fsdp, torchtitan
    // without torch.compile): its element-wise passes are counted op by op (compute.cpp
    // eager_gpt_elementwise), not as elementwise_factor times the fused count.
    bool eager_gpt_layer = false;
    // fusedce: HBM bytes per logit of the loss, forward and backward (compute.cpp
    // loss_bytes_per_logit): fp32 softmax passes, or one fused kernel over 16-bit logits.
    double ce_fwd_bytes = 12.0, ce_bwd_bytes = 12.0;
    // ---- nccl: each group's placement and fabric (collectives.cpp) ----
    GroupNet net_tp, net_cp, net_ep, net_dp, net_edp, net_pp;
    // hsdp: with dp_rep > 1, net_dp / net_edp are the sharding groups (what ZeRO / FSDP gathers and
    // reduce-scatters over) and these the replica groups each gradient shard is all-reduced over.
    GroupNet net_dp_rep, net_edp_rep;
    // ---- fp8 (issue 15 point 3; derived in estimate.cpp, used by compute.cpp and memory.cpp) ----
    Fp8Recipe fp8;                       // none: every GEMM at `peak`
    bool fp8_te;                         // a Transformer Engine recipe (delayed, current, mxfp8)
    double peak_fp8;                     // FLOP/s of the FP8 tensor cores (the linear layers' GEMMs)
    double fp8_accum_factor = 1.0;       // fp8acc: the linear GEMMs' time for split accumulation (fp8_split_accum_factor)
    Fp8CastBytes fp8_cast;               // memory-bound quantization traffic per operand element
    double fp8_saved_bytes;              // bytes per element of a linear input TE saves for wgrad
    double fp8_weight_bytes;             // bytes per weight element of TE's cached FP8 weights
    double fp8_state_bytes_per_layer;    // amax history + scales of one layer's FP8 linears
    double layer_linear_params;          // one layer's linear-layer weights on one rank (FP8 GEMM operands)
    int fp8_bf16_first, fp8_bf16_last;   // transformer layers kept in bf16 at the model's ends
    // overlap (overlap.cpp): the job's parallel.* overlap settings as they apply to this layout.
    bool overlap_grad_reduce, overlap_param_gather;
    bool tp_comm_overlap;                // only with sequence parallelism (tp > 1)
    // offload (memory.cpp / overlap.cpp)
    bool offload_optimizer, offload_params;
    double pcie;                         // host↔GPU bytes/s per GPU, one direction
    double cpu_adam_params_per_s;        // the node's CPU optimizer throughput (all its cores)
    int gpus_per_node;
    double host_capacity_bytes;          // host RAM per node; 0 = unknown (not checked)
    // zb: the pipeline schedule, resolved (never automatic).
    PipelineSchedule schedule;
    // dsthru: DeepSpeed's PipelineEngine runs the step (training.framework = deepspeed, pp > 1):
    // gradients accumulate through autograd (and, in bf16, into the BF16_Optimizer's fp32
    // copy) after every micro-batch's backward, and the data-parallel reduction is the
    // schedule's last instruction (compute.cpp, overlap.cpp, collectives.cpp).
    bool ds_pipe;
    double grad_accum_bytes;             // HBM bytes per parameter per micro-batch backward
    // embgrad: HBM bytes per embedding-table element each micro-batch's backward moves on the
    // first stage (compute.cpp block_compute; set in estimate.cpp): F.embedding's dense gradient
    // and Megatron DDP's main_grad.add_ of it. 0 where the stack accumulates otherwise.
    double embed_grad_bytes = 0;
    // ---- ttmem: how PyTorch's runtime holds tensors under torchtitan (memory.cpp) ----
    bool dtensor_sp;                     // torchtitan TP: DTensor SequenceParallel (all-gathered linear inputs saved)
    bool loss_parallel;                  // torchtitan TP: loss_parallel's vocab-sharded cross entropy
    bool torch_pipelining;               // torchtitan PP: torch.distributed.pipelining's stage buffers
    bool titan_model;                    // torchtitan's Llama code: repeat_kv copies K and V to all heads
    bool titan_eager;                    // ... run eagerly (no torch.compile): fp32 norm and RoPE copies
    // ---- l405: uneven model chunks and the interleaved group size ----
    int mb_group;                        // interleaved: micro-batches per chunk group (Megatron's N; p by default)
    // Transformer layers of every model chunk, chunk c of stage i at [c·p + i] (p·v entries),
    // where the chunks of a stage differ (an explicit pp·vpp split, or the embedding / loss
    // counted in the split); null = each chunk holds its stage's layers / v.
    const int* chunk_layers;
    // ---- p2psg: Megatron-LM's scatter/gather pipeline send (collectives.cpp block_comm) ----
    bool p2p_scatter_gather;             // each TP rank sends 1/t of the activation, the receiver all-gathers
    // ---- tt405: PyTorch's micro-pipelined (async) TP (overlap.cpp hide_tp_comm) ----
    bool async_tp;                       // parallel.async_tp with sequence parallelism, tp > 1
    // ---- recomp: Megatron's asynchronous TP collectives in a column-parallel linear's backward
    // (overlap.cpp hide_tp_dgrad): parallel.async_tensor_model_parallel_allreduce, framework
    // megatron, tp > 1, weight gradients computed in the backward (not ZB-H1 / DualPipe's W) ----
    bool tp_dgrad_async;
    // ---- ttasync: torchao float8 rowwise under torchtitan's TP (compute.cpp, overlap.cpp) ----
    // apply_tp (torchtitan parallelize_llama.py, 2025) takes Float8ColwiseParallel /
    // PrepareFloat8ModuleInput only for tensorwise recipes; rowwise runs plain DTensor TP, so the
    // sequence-parallel all-gathers carry bf16 and the linears quantize the gathered tensors.
    bool fp8_cast_after_tp_gather;

    // ---- papers: parallel.distribute_saved_activations as it applies to this layout (full
    // recompute, tp > 1, no sequence parallelism): each TP rank keeps 1/t of every checkpointed
    // layer input (memory.cpp) and all-gathers it before the layer's recompute (collectives.cpp) ----
    bool distribute_saved;
    bool softmax_unfused;                // training.masked_softmax_fusion = false, no flash (compute.cpp)

    // ---- blackwell: Megatron's overlapped pipeline send / receive (overlap.cpp hide_p2p) ----
    // parallel.overlap_p2p_comm under the interleaved schedule, framework megatron.
    bool overlap_p2p;

    // ---- mla: attention widths when head_dim ≠ hidden / heads and under multi-head latent
    // attention (derive; compute.cpp, memory.cpp, collectives.cpp), and the multi-token
    // prediction modules on the last stage (Megatron-core multi_token_prediction.py) ----
    bool mla;                            // model.kv_lora_rank > 0 (MLASelfAttention)
    double d_qk, d_v;                    // per-head query/key and value width: d, d; MLA: d + rope, v_head_dim
    double q_lora, kv_lora, d_rope;      // MLA latent widths (q_lora 0: queries projected from h) and RoPE width
    int mtp;                             // model.mtp_layers (MTP depth)
    bool qk_norm;                        // model.qk_layernorm on a non-MLA model (per-head q / k norms)
    double mtp_params, mtp_expert_params;  // one rank's parameters of the MTP modules, and their routed-expert part
    // ---- moe2: expert width, shared experts, dense first layers, expert TP (estimate.cpp derive).
    // For an MoE layer f_l above is the routed experts' width per expert-TP rank
    // (expert_ffn_hidden / etp); dense layers of an MoE model are scored through dense_layer. ----
    int etp;                             // expert tensor parallel (parallel.expert_tp; = t when 0)
    double fs_l;                         // shared experts' MLP width per TP rank (0 = none)
    // Tokens the experts of one rank see per micro-batch relative to `tokens`: the expert-TP
    // group all-gathers its members' dispatched shards (T/t · etp under SP); 1 when etp = t
    // (today's model); 0 in a LayoutDerived built elsewhere = 1 (moe_token_scale).
    double moe_g;
    bool shared_overlap;                 // parallel.moe_shared_expert_overlap
    GroupNet net_etp;                    // the expert-TP group (collectives.cpp; = net_tp when etp = t)
    int first_dense;                     // model.first_dense_layers of an MoE model (0 otherwise)
    // The same layout seen by one of the first_dense dense-MLP layers (moe off, f_l = ffn / t,
    // its parameters); null when first_dense = 0. Set by evaluate_layout.
    const LayoutDerived* dense_layer;
    // Dense-MLP layers per stage (p entries, all its chunks) and per model chunk [c·p + i]
    // (p·v entries); null when first_dense = 0 (every layer is an MoE layer).
    const double* stage_dense;
    const double* chunk_dense;

    // ---- deepep: the MoE token dispatcher's backend and the EP all-to-all overlap (estimate.cpp
    // derive, collectives.cpp ep_dispatch_time, overlap.cpp hide_ep_a2a) ----
    bool node_dedup = false;        // parallel.moe_dispatcher deepep / hybridep: hierarchical kernels
    double ep_remote_nodes = 0;     // expected distinct other nodes (NVLink domains) holding a token's experts
    double ep_token_ranks = 1;      // moeperm: expected distinct EP ranks holding a token's experts (flex dispatcher)
    bool moe_permute_fusion = false;  // moeperm: --moe-permute-fusion (TE's fused permute / unpermute)
    bool moe_router_fusion = false;   // moerouter: --moe-router-fusion (31 router kernels, not 72)
    double a2a_paired = 0;          // moe_a2a_overlap: share of the blocks run beside another micro-batch's; 0 = off
    // ---- recmod: Megatron-core's recompute_modules (parallel.recompute_modules) under
    // recompute = selective, recompute_style = megatron; 0 (a LayoutDerived built by hand) =
    // the default ["core_attn"] (rc_module) ----
    uint32_t rc_modules;
    // ---- menorm: estimate.memory_efficient_norm — the pre-norms keep their output, not their
    // input (memory.cpp layer_activation_megatron, the final norm in stage_activation) ----
    bool norm_saves_output;
    // ---- Llama 3 §3.3.2: estimate.deallocate_pipeline_inputs — each chunk's received input is
    // freed after its forward (memory.cpp stage_input_bytes_freed) ----
    bool stage_inputs_freed = false;
    // ---- moeprobs: Megatron-core (from 2025-04) multiplies the routing probabilities into the
    // experts' activation output; a non-gated activation has no fused kernel there, so the
    // product saves that output beside FC2's input (memory.cpp layer_activation_megatron) ----
    bool moe_probs_save_act = false;

    // ---- lean: streaming multiprocessors of the job's GPU (compute.cpp assign_kernel_profile),
    // for the SMs Transformer Engine's pipelined userbuffers reduce-scatter takes from the GEMM
    // beside it (overlap.cpp ub_chunking_cost); 0 (a LayoutDerived built by hand) = no margin ----
    int sms;
    // ---- hostov: host time (host.cpp): the Python / dispatcher / launch cost of enqueueing a
    // layer's kernels, what CUDA graphs capture of it, and whether the MoE token dispatcher
    // stops the host once per layer (estimate.cpp derive) ----
    bool host_model = false;        // framework megatron: Megatron-core's op counts apply
    uint32_t graph_scope = 0;       // CudaGraphScopeBit captured (whole layer: attn | mlp | moe | router | preprocess)
    bool moe_host_sync = false;     // dropless dispatcher: token counts copied to the host inside each MoE layer
    bool moe_fp8_pad = false;       // moefp8pad: the FP8 grouped MLP copies its rows into / out of the aligned layout
    double host_op_s = 0;           // host seconds per eager PyTorch op on the node's CPU (cluster.host_op_us)
};

// recmod: whether the layout's selective recompute runs Megatron module `bit` (RecomputeModuleBit).
// `rc`: the recompute asked about (memory.cpp asks for none to size the working set).
inline bool rc_module(const LayoutDerived& L, Recompute rc, uint32_t bit) {
    if (rc != Recompute::selective || L.rc_style != RecomputeStyle::megatron) return false;
    return ((L.rc_modules ? L.rc_modules : (uint32_t)kRecomputeCoreAttn) & bit) != 0;
}
inline bool rc_module(const LayoutDerived& L, uint32_t bit) { return rc_module(L, L.rc, bit); }

// moe2: see LayoutDerived::moe_g.
inline double moe_token_scale(const LayoutDerived& L) { return L.moe_g > 0 ? L.moe_g : 1.0; }

// offload: what DeepSpeed's CPU-Adam updates per second on one node, all cores. The step is
// memory bound (~30 bytes per parameter). DeepSpeed's measured 10 B step on a DGX-2 host
// (ZeRO-Offload tutorial log: ~6.3 s, 1.6e9/s) scaled by host memory bandwidth gives ~3.9e9/s
// for a DGX H100; the ZeRO-Offload paper's DGX-2 microbenchmark as cited (10 B in ~2.6 s) and
// SuperOffload's GH200 figure (8 B in 0.77 s) bracket it. docs/estimators.md, "CPU-Adam rate".
constexpr double kCpuAdamParamsPerNodeS = 4e9;
// bits: the node's rate: cluster.cpu_adam_params_per_s (the job's, else its cluster preset's,
// per host CPU in assets/presets/clusters.toml), else kCpuAdamParamsPerNodeS for a host that
// no preset describes.
inline double cpu_adam_params_per_s(const ClusterSpec& cl) {
    return cl.cpu_adam_params_per_s > 0 ? cl.cpu_adam_params_per_s : kCpuAdamParamsPerNodeS;
}

// ---- compute.cpp ----------------------------------------------------------------------------
// The framework's and GPU generation's kernel efficiencies into L (gemm_eff_max, flash_eff,
// elementwise_factor).
void assign_kernel_profile(const JobSpec& job, LayoutDerived& L);
// eagergpt: one eager LayerNorm / GELU layer's element-wise HBM traffic, forward and backward,
// in elements of one token (× tokens × bytes per element / bandwidth gives seconds).
struct EagerElementwise { double fwd = 0, bwd = 0; };
EagerElementwise eager_gpt_elementwise(const LayoutDerived& L);
// fusedce: the loss's HBM bytes per logit (forward, backward) for the job's implementation.
void loss_bytes_per_logit(CrossEntropyImpl ce, double e, double& fwd, double& bwd);
// Seconds for an m×n×k GEMM at the shape-dependent efficiency (0 for an empty shape).
double gemm_time(double peak, double m, double n, double k, double eff_max);
// Forward time of one transformer layer on one rank for one micro-batch.
struct LayerTime {
    double gemm = 0, attn = 0, elem = 0;  // forward
    double elem_bwd = 0;                   // element-wise backward (2 × elem unless counted op by op: eagergpt)
    double attn_bwd = 0;                   // attention core backward
    double fp8_cast = 0, fp8_cast_bwd = 0; // fp8: quantizing the linear layers' operands (forward, backward)
    // recomp: the forward GEMMs of the column-parallel linears (QKV; the dense MLP's FC1, 0
    // with MoE), part of `gemm`: their backward's data- and weight-gradient GEMMs take as long
    // and hide the asynchronous TP collectives (overlap.cpp hide_tp_dgrad).
    double gemm_qkv = 0, gemm_fc1 = 0;
    // ttasync: what torchtitan's op-level selective checkpointing runs again in the backward
    // (recompute = selective, recompute_style = torchtitan-op; compute.cpp op_sac_recompute).
    double op_sac_recompute = 0;

    // ---- moe: the attention output projection's forward GEMM, part of `gemm` (with gemm_qkv the
    // GEMMs Transformer Engine's userbuffers overlap in an MoE layer: overlap.cpp hide_tp_comm) ----
    double gemm_proj = 0;
    // moe: the token dispatcher's memory-bound passes of one MoE layer (permute, sort by local
    // expert, unpermute with the router probabilities), forward and backward (compute.cpp).
    double moe_dispatch = 0, moe_dispatch_bwd = 0;

    // ---- moe2: the shared experts' forward GEMMs (part of `gemm`), which
    // parallel.moe_shared_expert_overlap runs beside the dispatcher's all-to-all ----
    double gemm_shared = 0;

    // ---- recmod: the forward work Megatron-core's recompute_modules other than core_attn run
    // again in the backward, one layer (compute.cpp module_recompute_time) ----
    double module_recompute = 0;

    // ---- dtcopy: the layout copies around torchtitan's sequence-parallel DTensor collectives
    // (gather / scatter along the sequence dim, not dim 0: functional collectives chunk + cat),
    // one layer, forward and backward (compute.cpp dtensor_sp_copies); part of op_sac_recompute ----
    double sp_copy = 0, sp_copy_bwd = 0;
};
// fp8: the quantization traffic of `recipe` (mbs: micro-batches per step, over which
// Transformer Engine amortizes its cached FP8 weights).
Fp8CastBytes fp8_cast_bytes(Fp8Recipe recipe, int mbs, GpuGeneration gen);
// fp8one: whether Transformer Engine keeps one FP8 copy of a tensor for both GEMM layouts: its
// per-tensor recipes (delayed, current) on a GPU with non-TN FP8 GEMMs (Blackwell); otherwise a
// rowwise and a transposed (columnwise) one.
bool fp8_single_copy(Fp8Recipe recipe, GpuGeneration gen);
// rowwise8: torchao rowwise float8's measured backward overhead, seconds, for a layer whose
// linears read `input_elements` input elements (0 for any other recipe; compute.cpp).
double torchao_rowwise_backward_time(const LayoutDerived& L, double input_elements);
void fp8_sp_gathered_transpose(Fp8CastBytes& c, Fp8Recipe recipe, GpuGeneration gen);
double fp8_split_accum_factor(GpuGeneration gen);
LayerTime layer_forward_time(const LayoutDerived& L);
// ringcp: the HBM bytes PyTorch's ring attention (torchtitan's context parallelism) moves
// around its flash calls in one layer, forward and backward, on the busiest rank; part of
// LayerTime::attn / attn_bwd (compute.cpp gives the ops). Zero unless torchtitan with cp > 1.
struct RingMergeBytes {
    double fwd = 0, bwd = 0;
};
RingMergeBytes torch_ring_merge_bytes(const LayoutDerived& L);
// temerge: the same for Megatron-core's context parallelism, Transformer Engine's ring attention
// (AttnFuncWithCPAndKVP2P): its output corrections and dQ / dK / dV accumulation between the
// flash calls. Zero for torchtitan or cp = 1.
RingMergeBytes te_ring_merge_bytes(const LayoutDerived& L);
// ttasync: one micro-batch's forward GEMM time of the attention input projections (Q, K, V)
// and of a dense MLP's input projection(s) (linear_gemm_time): separate GEMMs for torchtitan's
// Llama (L.titan_model), fused ones otherwise.
double titan_qkv_gemm(const LayoutDerived& L);
double titan_up_gemm(const LayoutDerived& L);
// fp8eff: a linear layer's m×n×k GEMM, one pass: at `peak` in bf16; with an FP8 recipe at
// `peak_fp8`, times fp8_reduction_factor (the longer reduction dimension FP8 needs to reach
// the same fraction of its peak; rate = peak_fp8 / peak; compute.cpp gives the sources).
double fp8_reduction_factor(double m, double n, double k, double rate);
double linear_gemm_time(const LayoutDerived& L, double m, double n, double k);
// dsthru: HBM bytes per parameter that DeepSpeed's pipeline engine moves after each
// micro-batch's backward to accumulate gradients (precision: the model's 16-bit type).
double ds_grad_accum_bytes(Precision precision, int mbs);
// ttaccum: torchtitan's PP (compute.cpp): FSDP2 accumulating whole gradients in the reduce
// dtype (fsdp_upcast), else autograd's in-place accumulation; per parameter and micro-batch.
double torch_pipelining_grad_accum_bytes(bool fsdp_upcast, Precision precision, int mbs);
// mla: L's per-head widths, MLA latent widths and MTP depth from the model (L.d, L.heads_l set).
void assign_attention_widths(const ModelSpec& m, LayoutDerived& L);
// mla: one rank's parameters of one layer's attention (weights, biases, latent norms): Q, K, V, O
// with head width d (Q and O h × a·d), or MLA's down / up projections (the down projections
// replicated across TP, Megatron-core TELinear parallel_mode "duplicated").
double attention_params_per_rank(const LayoutDerived& L, bool with_norms);
// mla: the attention's input projections' forward GEMM time, MLA's down and up projections.
double mla_qkv_gemm(const LayoutDerived& L, double* column_parallel_part);
// deepep: expected distinct nodes among a token's top_k experts when `experts` experts sit
// evenly on `nodes` nodes, with group-limited routing (num_groups / group_topk; 0 = none).
double expected_expert_nodes(int experts, int top_k, int nodes, int num_groups, int group_topk);
// The compute and recompute parts of one micro-batch's blocks through `layers` layers.
void block_compute(const LayoutDerived& L, const LayerTime& lt, double layers, bool first, bool last, ChunkTime& c);

// ---- collectives.cpp ------------------------------------------------------------------------
// Fills L's per-group bandwidths and latencies from the cluster and the rank order.
void assign_group_links(const ClusterSpec& cl, const char* order, LayoutDerived& L);
// One ring collective moving `bytes` per rank over n ranks.
// ---- nccl: collectives as NCCL runs them (ring / tree / NVLS, LL / LL128 / Simple) ----
enum class Collective { all_reduce, all_gather };  // all_gather also stands for reduce-scatter
// One point-to-point send of `bytes` between neighbouring members of g (pipeline, ring attention).
double p2p_time(double bytes, const GroupNet& g);
// One micro-batch's activation (or its gradient) from one pipeline stage to the next, as
// Megatron sends it: the [s/cp, b, h] tensor (split over TP under SP; scattered over TP and
// all-gathered by the receiver with scatter_gather_tensors_in_pipeline), over the pipeline
// group's slowest link. Not DeepSpeed's pipe.
double pipeline_hop_time(const LayoutDerived& L);
// p2pdep: the same send over each link of the pipeline ring, hop[s] between stage s and stage
// (s + 1) mod p (p entries): over NVLink where both stages' ranks share a node (NVLink domain),
// over the NICs where the link leaves it — the group's per_node consecutive stages share one,
// and the ring's last link (p − 1 → 0) leaves it whenever the group spans nodes.
void pipeline_link_hops(const LayoutDerived& L, std::vector<double>& hop);

// Seconds for one NCCL collective on `bytes` (all-reduce: the buffer; all-gather: the
// gathered output) over group g: the fastest algorithm and protocol, as NCCL's tuner picks.
// pspeed2: the planner asks nccl_time the same questions across layouts (a stage's gradient
// buckets do not change with the micro-batch or recompute, a layer's TP message not with the
// ZeRO stage), so answers are kept per thread in a small direct-mapped table keyed by every
// input. pspeed3: the lookup is inline at the call, so a hit costs a hash and a compare and no
// call; a miss asks NCCL's tuner (nccl_time_kept, collectives.cpp) and fills the slot.
struct NcclTimeSlot {
    double bytes = 0, bus_intra = 0, bus_inter = 0, nvls_gain = 0;
    int n = 0, per_node = 0, nodes = 0;  // n = 0: empty (never asked: n > 1)
    Collective c = Collective::all_reduce;
    double seconds = 0;
};
inline constexpr size_t kNcclTimeSlots = 256;
inline thread_local NcclTimeSlot nccl_time_slots[kNcclTimeSlots];
double nccl_time_kept(Collective c, double bytes, const GroupNet& g, NcclTimeSlot& slot);
inline double nccl_time(Collective c, double bytes, const GroupNet& g) {
    if (g.n <= 1 || bytes <= 0) return 0;
    uint64_t h;
    std::memcpy(&h, &bytes, sizeof h);
    // The collective is left out of the slot: a layout with and without sequence parallelism
    // asks all-gather and all-reduce of the same message and group, and the key tells them apart.
    h ^= (uint64_t)g.n * 0x9e3779b97f4a7c15ull ^ (uint64_t)g.nodes << 48;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    NcclTimeSlot& e = nccl_time_slots[(h >> 40) % kNcclTimeSlots];
    if (e.n == g.n && e.bytes == bytes && e.c == c && e.per_node == g.per_node && e.nodes == g.nodes &&
        e.bus_intra == g.bus_intra && e.bus_inter == g.bus_inter && e.nvls_gain == g.nvls_gain)
        return e.seconds;
    return nccl_time_kept(c, bytes, g, e);
}
// All-to-all (expert dispatch / combine) of `bytes` per rank over g.
double all_to_all_time(double bytes, const GroupNet& g);
// moe: one layer's TP collectives in one direction (forward, or backward without recompute):
// the attention's (two all-reduces, or all-gather + reduce-scatter with SP, on T·h), and an MoE
// layer's token dispatcher's (all-gather + reduce-scatter on the k·T·h routed tokens over TP,
// Megatron-core MoEAlltoAllTokenDispatcher); a dense layer's MLP is another attention-sized pair.
double tp_attention_comm(const LayoutDerived& L);
double tp_mlp_comm(const LayoutDerived& L);
// moe: bytes each rank sends in one expert-parallel all-to-all (dispatch or combine): its k
// routed copies of the tokens it holds — under sequence parallelism its T/t shard.
double ep_all_to_all_bytes(const LayoutDerived& L);
// deepep: one dispatch or combine of the rank's routed tokens by L's dispatcher backend.
double ep_dispatch_time(const LayoutDerived& L);
// The TP, CP, EP and p2p parts of one micro-batch's blocks through `layers` layers.
void block_comm(const LayoutDerived& L, const LayerTime& lt, double layers, bool first, bool last, ChunkTime& c);
// One stage's data-parallel traffic per iteration, before overlap.
struct DpTraffic {
    double grad_s = 0;   // gradient all-reduce / reduce-scatter
    double param_s = 0;  // parameter all-gather (sharded optimizer, ZeRO-3)
};
// Bytes of one gradient element in the data-parallel reduction and in the gradient buffer it
// reduces (Megatron's fp32 main grads for bf16 unless grad_reduce_in_fp32 = false).
double dp_grad_bytes(const JobSpec& job, const LayoutDerived& L);
// curamax: Transformer Engine's current-scaling FP8 under sequence parallelism reduces each
// gathered operand's amax over the TP group before it casts it: one tiny all-reduce in the
// compute stream's path per such operand (collectives.cpp), added to `layers` layers' TP time.
void add_amax_reductions(const LayoutDerived& L, double layers, ChunkTime& c);
DpTraffic dp_traffic(const EstimateContext& ctx, const LayoutDerived& L, int stage, double dense_params,
                     double expert_params);

// ---- engine_time.cpp: the bundled engine op by op with a cluster profile --------------------
ChunkTime engine_block_time(const LayoutDerived& L, double layers, bool first, bool last);
// step_compute_s: the stage's compute of one step on one rank (the micro-batches' blocks),
// what the data-parallel wait scales with (dpwait).
StageTail engine_stage_tail(const LayoutDerived& L, int stage, double params, double step_compute_s);

// ---- memory.cpp -----------------------------------------------------------------------------
double engine_buffers_bytes(const std::vector<EngineBuffer>& list);
// Bytes one layer saves for backward (Megatron profile), one micro-batch, one rank.
double layer_activation_megatron(const LayoutDerived& L, Recompute rc);
// moeprobs: the stack applies the MoE routing probabilities inside the experts' activation
// (Megatron-core from 2025-04; NeMo and Megatron-Bridge run it), not in the unpermute.
bool moe_probs_in_activation(const TrainingSpec& t);
// Micro-batch chunks whose activations stage i holds at the schedule's peak.
double in_flight_chunks(const LayoutDerived& L, int i);
// l405: transformer layers × micro-batches whose activations stage i holds at that peak: the
// chunks of its first in_flight_chunks forwards in the schedule's order (uneven chunks).
double in_flight_layers(const LayoutDerived& L, int i, int layers);
// Llama 3 §3.3.2 (estimate.deallocate_pipeline_inputs): bytes stage i does not hold at that peak
// because each in-flight chunk's received input was freed after its forward.
double stage_input_bytes_freed(const LayoutDerived& L, int i, int layers);
// zb: ZB-H1 micro-batches whose W stage i has deferred at the peak (their B done), and the
// bytes one of them keeps per layer (the weight-gradient GEMMs' inputs and output gradients).
// ubwd: bytes the backward of unfused attention adds on a stage (the probabilities' and the
// scores' gradients), beyond the loss's logits peak on the last stage; 0 with flash attention.
double unfused_attention_backward_bytes(const LayoutDerived& L, bool last, CrossEntropyImpl ce);
double zb_deferred_w(const LayoutDerived& L, int i);
double zb_pending_w_bytes_per_layer(const LayoutDerived& L);
struct StageMemory {
    MemoryBreakdown mem;    // without fragmentation (stage_memory_finish adds it)
    double params = 0;      // parameters on the rank (dense + expert)
    double act_per_mb = 0;  // activation bytes one micro-batch leaves on the stage
    double in_flight = 0;   // micro-batches held at the peak
};
// One layer's activation bytes under L, the same on every stage of a layout (pspeed3: asked
// once per layout): what a micro-batch leaves saved, and the working set of the one layer
// being recomputed beyond it; moe2: the same for a dense-MLP layer (L.dense_layer).
struct LayerActivation {
    double saved = 0, working = 0;
    double dense_saved = 0, dense_working = 0;
};
LayerActivation layer_activation(const EstimateContext& ctx, const LayoutDerived& L);
StageMemory stage_memory(const EstimateContext& ctx, const LayoutDerived& L, int stage, int layers,
                         const LayerActivation& act);
// mla: routed-expert parameters of the MTP modules on stage i's rank (the last stage; with
// DualPipe also rank 0, which holds the last stage as its mirror).
double mtp_expert_params_on(const LayoutDerived& L, int i);
// Adds the ZeRO buffers of the stage's layout and the fragmentation over everything allocated.
void stage_memory_finish(const EstimateContext& ctx, const LayoutDerived& L, int stage, StageMemory& sm);
// offload: host RAM per node and host↔GPU bandwidth per GPU that the cluster gives, else the
// GPU generation's DGX/HGX figures (0 host RAM = unknown: not checked).
struct HostLinkDefaults {
    double host_memory_gib = 0, pcie_gbps = 0;
};
HostLinkDefaults host_link_defaults(const ClusterSpec& cl);
// The GEMM libraries' workspaces one rank keeps for the run: cuBLAS's and, on a Transformer
// Engine stack, TE's (memory.cpp; a job-level figure, computed once per layout in derive).
double gemm_workspace_bytes(const JobSpec& job, bool te_fp8, bool moe);
// offload: the most loaded node's host bytes, from each stage's per-GPU host bytes and where
// the rank order puts the stages' ranks.
double host_bytes_per_node(const LayoutDerived& L, const char* order, const std::vector<double>& stage_host);

// ---- host.cpp (hostov) ------------------------------------------------------------------------
// Seconds the host spends enqueueing one layer's forward and backward for one micro-batch on
// one rank (after what L.graph_scope captures), and the GPU idle time that leaves in a block
// of `layers` such layers whose GPU time `c` already holds: added to c's compute (host.cpp).
// The DGX H100 host's figure (TransformerEngine issue 2053: nn.Linear forward, Xeon Platinum
// 8480C, 13.48 µs) for a cluster that names no host CPU (cluster.host_op_us unset).
constexpr double kHostOpUsDefault = 13.48;
struct HostLayerTime {
    double fwd = 0, bwd = 0;
    // moeorder: of `fwd`, what the host enqueues of an MoE layer from its dispatcher's host sync
    // through the routed experts' last op (the all-to-all, the permutes, every expert's launches).
    double fwd_to_experts = 0;
};
HostLayerTime host_layer_time(const LayoutDerived& L);
// Half-rate lengths n₀ of flash kernels (compute.cpp has the measurements): cpblock, an
// unmasked block (FlashAttention-3, H100); fa1seq, flash-attn 1.x's causal Triton kernel (A100);
// flashlen, a causal cuDNN fused-attention call on Blackwell.
inline constexpr double kFlashHalfRateTokens = 237.0;
inline constexpr double kTritonFlashHalfRateTokens = 698.0;
inline constexpr double kCudnnFlashHalfRateTokens = 1350.0;
// The causal half-rate length of the job's flash kernel (fa1seq: the Triton kernel's; flashlen:
// cuDNN's on Blackwell), 0 where none is measured and flash_eff holds at every length.
double causal_flash_half_rate_tokens(const JobSpec& job);
// flash_rate: n / (n + n₀), a flash kernel's rate over n tokens against its long-sequence rate.
double flash_rate(double n, double half_rate_tokens);
// fa1seq, flashlen, cpblock: how much slower than flash_eff the attention core of one s-token
// sequence runs, cut c ways by ring attention, for a kernel of causal half-rate length
// causal_n0 (0: one rate at every length; compute.cpp).
double attention_length_slowdown(double s, double c, double causal_n0);
// `lt`: the layer's forward terms (moeorder: what the GPU runs after the routed experts).
void add_host_time(const LayoutDerived& L, const LayerTime& lt, double layers, ChunkTime& c);

// ---- overlap.cpp ----------------------------------------------------------------------------
// gradbuf: bytes per local parameter that a step of Megatron's DDP moves over its whole gradient
// buffer (zeroing, the 1/dp scaling) and, 2022-10 to 2024-01, the gathered parameter buffer
// copied into the parameters; 0 for other stacks and ZeRO. Added to the optimizer step.
double grad_buffer_pass_bytes(const JobSpec& job, const LayoutDerived& L);
// What stage `stage` does after its last backward: exposed DP traffic and its optimizer step.
// `fwd_s` / `bwd_s`: one micro-batch's forward / backward compute on the stage.
StageTail stage_tail(const EstimateContext& ctx, const LayoutDerived& L, const DpTraffic& dp, double dense_params,
                     double expert_params, double fwd_s, double bwd_s);
// Extra time of `comm_s` of communication run beside a `window_s` compute window: the excess
// over the window, at least the slowdown the concurrent collective causes the compute
// (TimeModelConstants::overlap_slowdown).
double overlapped_cost(double comm_s, double window_s);
// A pass over `units` units, each gathered (comm_s[i]) before it computes (compute_s[i]), the
// gathers running up to `depth` units ahead: the time beyond the compute, with contention.
double prefetched_pass_exposed(const double* comm_s, const double* compute_s, int units, int depth);
// ttmem / tt405 (memory.cpp): bytes per element of the input torchtitan's DTensor TP
// all-gathers in front of a column-parallel linear (1 under torchao float8 tensorwise).
double dtensor_gathered_bytes(const LayoutDerived& L);
// parallel.tp_comm_overlap: shrinks the TP time of `layers` layers' blocks in `c` to what the
// GEMMs do not hide (Transformer Engine userbuffers); parallel.async_tp: to what PyTorch's
// micro-pipelined TP leaves exposed (tt405).
void hide_tp_comm(const LayoutDerived& L, const LayerTime& lt, double layers, ChunkTime& c);
// lean: one layer's extra GEMM time, seconds, from Transformer Engine's userbuffers running the
// GEMMs beside their TP collectives in pieces (ring exchange: t row blocks; pipelined
// reduce-scatter: 4 row blocks on the SMs the collective leaves), forward and backward
// (without recompute); 0 with t = 1. hide_tp_comm adds it under parallel.tp_comm_overlap.
struct UbChunking {
    double fwd = 0, bwd = 0;
};
UbChunking ub_chunking_cost(const LayoutDerived& L, const LayerTime& lt);
// recomp: L.tp_dgrad_async (without tp_comm_overlap): in the backward of QKV and FC1 Megatron
// runs the input gradient's all-reduce (SP: reduce-scatter) beside the weight-gradient GEMM
// and, with SP, the input's re-all-gather beside the data-gradient GEMM; shrinks c.bwd.tp.
void hide_tp_dgrad(const LayoutDerived& L, const LayerTime& lt, double layers, ChunkTime& c);
// The same in two parts (pspeed4: a layout's chunk kinds share the first): the change of one
// layer's backward TP time (0 where nothing overlaps), and its application to `layers` layers.
double tp_dgrad_delta(const LayoutDerived& L, const LayerTime& lt);
void hide_tp_dgrad(double delta, double layers, ChunkTime& c);
// blackwell: L.overlap_p2p: a chunk's pipeline hop runs beside the next chunk's compute (the
// same work in a balanced split); shrinks c.fwd.p2p / c.bwd.p2p to what that compute leaves.
void hide_p2p(const LayoutDerived& L, ChunkTime& c);
// deepep: parallel.moe_a2a_overlap — the chunk's dispatch / combine beside the paired
// micro-batch's compute (Megatron-core combined 1F1B schedule).
void hide_ep_a2a(const LayoutDerived& L, ChunkTime& c);

}  // namespace ptd::est
