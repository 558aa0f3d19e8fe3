// estimate.h — what one training job costs: memory per rank for every pipeline stage,
// FLOPs per token (model and hardware), and the time of one iteration with every term
// shown. One evaluation path serves `ptd estimate` (full detail) and the planner (a
// score per layout, no allocation, ~1 µs). docs/estimators.md gives every formula with
// its source; docs/accuracy.md the calibration and the error against published runs.
//
// Notation in comments: b micro-batch, s sequence, h hidden, a heads, g KV heads,
// d head dim, f MLP width, V padded vocab, L layers, t tp, p pp, v vpp, c cp, m
// micro-batches per replica per step, N data-parallel degree that shards optimizer state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ptd/spec/cluster_profile.h"
#include "ptd/spec/job_spec.h"
#include "ptd/model/model_stats.h"
#include "ptd/model/speed_interval.h"
#include "ptd/model/training_cost.h"

namespace ptd {

namespace est {
struct ProfileTimes;  // the profile's probes as op times (estimators/src/model/profile_times.h)
}

// Bytes on one rank, by category. Overheads are kept apart so users see them.
struct MemoryBreakdown {
    double params = 0;        // weights in the training dtype (+ fp32 weights for fp32 runs)
    double grads = 0;         // gradient buffers, incl. Megatron's fp32 main-grad buffer
    double optimizer = 0;     // fp32 master weights, Adam m and v (+ fp32 grad copy for fp16)
    double activations = 0;   // saved for backward at the schedule's peak (all in-flight micro-batches)
    double temp = 0;          // communication / temporary buffers (SP gather, p2p, ZeRO buckets, gathered params)
    double cuda_context = 0;  // estimate.cuda_context_gib
    double nccl = 0;          // estimate.nccl_gib × communicators with > 1 rank
    double fragmentation = 0; // estimate.fragmentation × (everything allocated above)
    // offload: bytes this rank keeps in HOST memory (offloaded optimizer states, fp32 gradient
    // copy, parameter shard). Not device memory: not in total().
    double host = 0;

    double model_states() const { return params + grads + optimizer; }
    double overheads() const { return temp + cuda_context + nccl + fragmentation; }
    double total() const { return model_states() + activations + overheads(); }
};

// Time of one iteration, seconds, on the critical path (the slowest stage).
struct TimeBreakdown {
    double compute = 0;       // m · (forward + backward + recompute) GEMM and memory-bound work
    double tp_comm = 0;       // m · tensor-parallel all-reduces (or all-gather + reduce-scatter)
    double cp_comm = 0;       // exposed context-parallel K/V exchange
    double ep_comm = 0;       // MoE token all-to-all (dispatch + combine)
    double pp_comm = 0;       // point-to-point activation / gradient sends
    double bubble = 0;        // schedule makespan − m × one micro-batch through the slowest stage
                              // ((p − 1)/v × that micro-batch when the stages are equal)
    double dp_comm = 0;       // exposed gradient reduction / parameter gathering (after overlap)
    double optimizer = 0;     // the optimizer step of the stage that finishes last (memory bound)
    double offload = 0;       // offload: exposed PCIe copies and the CPU optimizer step (host side)
    // planfw: parts of `compute` (not added again by total()), so the planner's why line can
    // name them: the backward's recomputed forward (m · recompute of the slowest stage), and
    // the pipeline-stage imbalance — how much the slowest stage's compute exceeds the mean
    // stage's (m · (slowest − mean)), which a layout without pipeline does not have.
    double recompute = 0;
    double imbalance = 0;
    double total() const { return compute + tp_comm + cp_comm + ep_comm + pp_comm + bubble + dp_comm + optimizer + offload; }
};

// One forward or backward block: one micro-batch through one model chunk of one stage.
// Its parts run one after the other on the stage (TP/CP/EP collectives are exposed time
// inside the block; p2p is the hop across the stage boundary that goes with it).
struct BlockTime {
    double compute = 0;    // GEMMs, attention, element-wise work (backward: without recompute)
    double recompute = 0;  // backward only: the forward again (full) or the attention core (selective)
    double tp = 0, cp = 0, ep = 0, p2p = 0;
    double total() const { return compute + recompute + tp + cp + ep + p2p; }
    // zb: backward only, the part of `compute` that is weight-gradient GEMMs (ZB-H1's W block;
    // the rest of the backward — input-gradient GEMMs, attention, element-wise — is B).
    double wgrad = 0;
};
struct ChunkTime {
    BlockTime fwd, bwd;
};

// Shared cores (docs/estimators.md, "Shared cores in the schedule"): whether a stage's own group
// collectives (TP, CP, EP) shrink when other stages wait, as its compute does. A member waits
// there for peers that are off their cores; that wait ends sooner only when the ranks left
// computing fit the cores (ranks_per_stage ≤ cores): with more runnable ranks than cores a woken
// member still queues behind them for a scheduler slice, however many other ranks wait.
bool stage_collectives_share_cores(double cores, double ranks_per_stage);
// The part of a block that runs at the processor-sharing rate: its compute and recompute, and
// its stage's collectives where stage_collectives_share_cores — never the hop to the
// neighbouring stage, which is waited out in wall time.
double core_shared_part(const BlockTime& b, bool collectives_share);
// How busy the probes kept a rank: its compute (and recompute) over its compute and its own
// stage's collectives, summed over one micro-batch's blocks — the rest of a probed pass it was
// blocked in a collective, off its core (CoreSharing::busy).
struct ProbedBusy {
    double computing = 0, probed = 0;
    void add(const BlockTime& b) {
        computing += b.compute + b.recompute;
        probed += b.compute + b.recompute + b.tp + b.cp + b.ep;
    }
    double fraction() const { return probed > 0 ? computing / probed : 1.0; }
};

// What a stage does after its last backward block, seconds. The gradient reduction
// starts during the last backward (overlap_grad_reduce) and its excess is exposed; every
// stage then waits for the slowest (the gradient-norm all-reduce over the model-parallel
// group that clipping needs), runs its optimizer step and the exposed part of the
// parameter all-gather (distributed optimizer / ZeRO without overlap_param_gather).
struct StageTail {
    double grad_s = 0, grad_exposed_s = 0;
    double param_s = 0, param_exposed_s = 0;
    double optimizer_s = 0;
    // offload: gradients device→host, the CPU optimizer step (the node's CPU shared by its
    // GPUs' processes), updated 16-bit parameters host→device, ZeRO-3's parameter shard
    // fetched from host for every gather; offload_s is what of them the step waits for.
    double offload_d2h_s = 0, cpu_optimizer_s = 0, offload_h2d_s = 0, offload_param_fetch_s = 0;
    double offload_s = 0;
};

// One pipeline stage, seen from its most loaded rank.
struct StageEstimate {
    int stage = 0;                 // pipeline rank 0..p−1
    int layers = 0;                // transformer layers on this stage (all vpp chunks)
    bool has_embedding = false;    // first stage (and the tied copy on the last)
    bool has_output = false;       // last stage: final norm, output layer, logits, loss
    double in_flight = 0;          // micro-batches whose activations are held at the peak (chunks / v for vpp)
    double params_count = 0;       // parameters held on this rank (dense + expert)
    MemoryBreakdown mem;
    double act_per_microbatch = 0; // activation bytes one micro-batch leaves on this stage
    // Per micro-batch on this stage, seconds.
    double fwd_s = 0, bwd_s = 0, recompute_s = 0, tp_s = 0, cp_s = 0, ep_s = 0, p2p_s = 0;
    double dp_s = 0;               // this stage's whole DP traffic per iteration (before overlap)
    std::vector<ChunkTime> chunks; // per virtual chunk (v entries): one micro-batch's blocks
    StageTail tail;
    double pipeline_end_s = 0;     // when this stage's last backward block ends
};

struct FlopsEstimate {
    AttentionFlops convention = AttentionFlops::full;
    double model_per_token = 0;    // PaLM: 6·(matmul params incl. output layer) + attention term
    double hardware_per_token = 0; // model + recomputation
    double attention_per_token = 0;// the attention-score part of model_per_token
    double params_matmul = 0;      // active matmul parameters one token uses (incl. output layer)
};

struct Estimate {
    std::vector<StageEstimate> stages;  // every pipeline stage, in order
    int worst_stage = 0;                // index of the stage with the largest total
    double capacity_bytes = 0;          // device memory
    double usable_bytes = 0;            // capacity × (1 − headroom)
    bool fits = false;                  // worst stage total ≤ usable
    int micro_batches = 0;              // m per replica per step
    double vocab_padded = 0;
    FlopsEstimate flops;
    TimeBreakdown time;
    double pipeline_s = 0;              // the last backward block ends (the schedule's makespan)
    // p2pdep: the wait between a block and its receiver on the next stage when the send is
    // asynchronous, per link of the pipeline ring (schedule.h PipelineDurations::hop: [s] is
    // between stage s and (s + 1) mod p); empty when sends are inside the blocks.
    std::vector<double> pipeline_hops_s;
    double tail_sync_s = 0;             // every stage's exposed gradient reduction is done
    // Shared cores: the host's cores the ranks share, its ranks per core while the profile's probes
    // ran, the ranks running each stage's blocks (schedule.h CoreSharing); 0: no sharing. The
    // predicted timeline places its blocks with them, as the step was computed.
    double share_cores = 0, share_measured = 0, share_ranks_per_stage = 0;
    double step_s = 0;
    double tokens_per_s = 0;            // whole job
    double model_tflops_per_gpu = 0;    // model FLOPs / step time / GPUs
    double hardware_tflops_per_gpu = 0;
    double peak_tflops = 0;             // dense peak of the GPU for the precision
    double mfu = 0, hfu = 0;
    // The error bars of step_s, tokens_per_s, the TFLOP/s and MFU / HFU (speed_interval.h):
    // from the published runs of the GPU's generation; known = false on CPUs.
    SpeedInterval speed;
    // The error bars of the most loaded stage's memory total (speed_interval.h MemoryInterval):
    // from bench_memory's measured runs of the GPU's generation and model kind; known = false on CPUs.
    MemoryInterval memory_interval;
    // Where the time figures come from: a cluster profile's measurements (the bundled
    // engine's op-by-op model, engine_time.cpp) or the GPU preset's nominal figures.
    bool time_from_profile = false;
    std::string time_source_why;        // with a profile the time model does not take: why not
    ParamCounts params;                 // whole-model counts
    std::vector<std::string> notes;     // assumptions worth telling the user
    // offload: host memory per node (the most loaded node: the sum of its GPUs' mem.host) and
    // the host RAM it is checked against (cluster.host_memory_gib, else the GPU generation's
    // DGX figure; 0 = unknown, unchecked). fits includes host_fits.
    double host_bytes_per_node = 0;
    double host_capacity_bytes = 0;
    bool host_fits = true;
    double pcie_gbps = 0;               // host↔GPU GB/s per GPU used for the offload traffic
    // cost (issue 28 point 5): the whole run for training.tokens (or steps) at this step time:
    // wall time, GPU-hours, cost, energy, checkpoints and goodput (training_cost.h).
    TrainingCost training;
};

// A layout choice the planner varies. Everything else comes from the job.
struct LayoutChoice {
    int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1, vpp = 1;
    int micro_batch = 1;
    int zero = 0;
    bool distributed_optimizer = false;
    bool sequence_parallel = false;
    Recompute recompute = Recompute::none;
    int order = 0;                 // index into kPlannerOrders (layout_choice_order)
    OffloadDevice offload_optimizer = OffloadDevice::none;  // offload
    bool offload_params = false;                           // offload (zero 3 only)
    PipelineSchedule schedule = PipelineSchedule::automatic;  // zb: resolved by vpp when automatic
    int etp = 0;  // moe2: expert tensor parallel (parallel.expert_tp); 0 = tp
    int dp_replicate = 1;  // hsdp: replicas of the sharded states (parallel.dp_replicate)
    // planfw: the overlap keys (parallel.overlap_grad_reduce, overlap_param_gather,
    // tp_comm_overlap) the layout runs with: the job's (layout_choice_of), or what the planner
    // turned on where the framework has them.
    bool overlap_grad_reduce = false, overlap_param_gather = false, tp_comm_overlap = false;
};

// The rank orders the planner tries: TP innermost (Megatron default), then others.
inline constexpr const char* kPlannerOrders[] = {"tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "dp-tp-cp-ep-pp"};
inline constexpr int kPlannerOrderCount = 3;

// Cheap summary of one layout for ranking; what the planner keeps.
struct LayoutScore {
    double peak_bytes = 0;      // total of the most loaded stage
    double usable_bytes = 0;
    bool fits = false;
    double step_s = 0;
    double tokens_per_s = 0;
    double mfu = 0, hfu = 0;
    int worst_stage = 0;
    TimeBreakdown time;
    MemoryBreakdown worst_mem;
    double host_bytes_per_node = 0;  // offload: see Estimate
    double host_capacity_bytes = 0;
};

// Model- and cluster-derived constants computed once per job, reused for every layout.
struct EstimateContext {
    JobSpec job;                // model, cluster, training, estimate as given (parallel ignored)
    ParamCounts params;
    double peak_flops = 0;      // FLOP/s for the job's precision
    bool cpu_device = false;    // the `cpu` preset: no CUDA context or NCCL buffers
    // A cluster profile measured by `ptd calibrate` (cluster_profile.h), owned by the caller;
    // null = the GPU preset's figures. With one, the time model takes what was measured.
    const ClusterProfile* profile = nullptr;
    std::shared_ptr<const est::ProfileTimes> profile_times;  // what the time model reads of it
    // offload: host RAM per node and host↔GPU bandwidth per GPU (the cluster's, else the GPU
    // generation's DGX / HGX figures; 0 host RAM = unknown), read by every layout.
    double host_memory_gib = 0, host_pcie_gbps = 0;
};

EstimateContext make_estimate_context(const JobSpec& job, const ClusterProfile* profile = nullptr);

// Score one layout. `layers_per_stage` may be empty (balanced split: the remainder goes
// to stages 1.., sparing the first, which holds the most activations). With `detail`,
// fills every stage; without, evaluates only the stages that can be the worst (≤ 4).
// The layout must be valid (divisibility checked by the caller).
// With `bounds` (the planner's screening pass, no `detail`): the schedule is not simulated;
// bounds gets the step time's lower and upper bound (timeline.h pipeline_makespan_lower /
// _upper plus the tail) and the score's step_s / tokens_per_s are the optimistic ends
// (step_s = lo_s). Memory (peak_bytes, fits) is exact either way.
struct StepBounds {
    bool want_hi = true;  // false: hi_s is left +∞ (the upper bound costs a little more)
    double lo_s = 0, hi_s = 0;
};
LayoutScore evaluate_layout(const EstimateContext& ctx, const LayoutChoice& choice,
                            const std::vector<int>& layers_per_stage, Estimate* detail, StepBounds* bounds = nullptr);

// Full estimate of a valid job (validate_job empty), its speed interval included; with a
// cluster profile (load_job_profile) the time model takes the figures measured on the
// user's hosts, and the interval comes from the profile's held-back probes.
Estimate estimate_job(const JobSpec& job, const ClusterProfile* profile = nullptr);

// Why a cluster profile does not feed the job's time model ("" when it does: the bundled
// engine runs the job, estimate.activation_profile = "ptd-engine").
std::string profile_unused_reason(const JobSpec& job);

// A cluster profile's error band for one layout of `job` predicted at `step_s`: the step
// again with every op at the fast and the slow end of what the profile measured
// (docs/estimators.md, "Error bars"). For a job whose time model takes the profile.
ErrorBand profile_error_band(const JobSpec& job, const ClusterProfile& profile, const LayoutChoice& choice,
                             const std::vector<int>& layers_per_stage, double step_s);

// A planner row's (or any score's) speed interval under the job's band; the planner never
// computes it per evaluated layout, only callers that show a row do.
SpeedInterval score_speed_interval(const JobSpec& job, const LayoutScore& score);

// The job's parallel settings as a LayoutChoice (order index −1 when the job's order is
// not one of kPlannerOrders; evaluate_layout then uses the job's order string).
LayoutChoice layout_choice_of(const JobSpec& job);
// The order string of a choice (the job's own when order < 0).
const char* layout_choice_order(const EstimateContext& ctx, const LayoutChoice& c);

// Layers per pipeline stage for a balanced split (see evaluate_layout).
std::vector<int> balanced_layers_per_stage(int layers, int pp);

// ---- the time model's constants ---------------------------------------------------------
// Fitted by bench/accuracy on the calibration runs (docs/accuracy.md); process-wide, and
// only bench/accuracy changes them (to fit). Everything else reads.
// Kernel efficiencies of one GPU generation; 0 = use the generation-independent default.
struct KernelEfficiency {
    double gemm_eff_max = 0;        // best fraction of dense peak a large GEMM reaches
    double flash_eff = 0;           // flash attention: fraction of peak on the executed (causal) FLOPs
                                    // (where a length curve applies, at long sequences: flashlen)
};
struct TimeModelConstants {
    double gemm_eff_max = 0.86;     // best fraction of dense peak a large GEMM reaches (default)
    double gemm_half_dim = 128.0;   // a GEMM dimension this size halves that dimension's factor
    double flash_eff = 0.65;        // flash attention: fraction of peak on the executed (causal) FLOPs (default)
    // Per GPU generation (index: GpuGeneration), fitted on that generation's calibration runs:
    // the fraction of the datasheet peak the kernels reach differs by architecture (sustained
    // clocks under the power limit, tensor-core pipeline, attention kernels available).
    // Refitted 2026-12-02 by `bench_accuracy --fit` (docs/accuracy.md) with Transformer
    // Engine's single per-tensor FP8 copy on Blackwell (fp8one: blackwell gemm_eff_max 0.57 →
    // 0.56; the others unchanged); before that on 2026-12-01 with cuDNN attention's
    // rate by sequence length on Blackwell (flashlen: blackwell gemm_eff_max 0.56 → 0.57 and
    // flash_eff, now the long-sequence rate, 0.40 → 0.45; the others unchanged); before that on
    // 2026-12-01 with each stack's loss as its kernels run it (fusedce2); before that on
    // 2026-11-30 with the slowest-GPU pace
    // (gpu_speed_spread below) and the causes of 2026-11-29/30; before that on 2026-11-29 after
    // the runs took their stacks' defaults for what they do not state (stackdef), before that after
    // the unseen-run families (MegaScale, Nemotron-4 reports, MoE, torchtitan async TP, Blackwell
    // tables, 2019–22 papers) and their causes: volta on 1 V100 run (the Megatron-LM 2019 single-GPU baseline),
    // ampere on 10 A100 runs, hopper on 11 H100/H200 runs, blackwell on 8 B200/GB200 runs;
    // flash_eff only where ≥ 5 of them use flash attention (else the default). Generations
    // without calibration runs take uncalibrated_gemm_eff_max. Order: other, volta, ampere, ada,
    // hopper, blackwell, cdna3, cpu.
    KernelEfficiency by_generation[kGpuGenerationCount] = {
        {}, {0.58, 0.0}, {0.81, 0.0}, {}, {0.71, 0.45}, {0.56, 0.45}, {}, {}};
    // Frameworks without Transformer Engine / cuDNN attention (torchtitan, PyTorch FSDP
    // stacks, DeepSpeed), and Megatron-core stacks told to use TE's FlashAttention backend
    // (training.flash_attention_kernel = "flash-attn-2"), run FlashAttention-2 kernels, which on
    // Hopper and later reach a fraction of the cuDNN fused attention flash_eff is fitted on:
    // teflash: 0.62, FlashAttention-2 over cuDNN in FlashAttention-3's own H100 SXM5 benchmark
    // at head dim 128, BF16 (Shah et al. 2024, arXiv 2407.08608, Figures 5 and 6): forward
    // causal 298 / 484, 319 / 518, 333 / 529 TFLOP/s at 2k, 4k, 8k tokens (0.62, 0.62, 0.63),
    // non-causal 370 / 600 at 8k (0.62); backward 291 / 465, 310 / 499, 318 / 518 (0.63, 0.62,
    // 0.61). (The paper's headline 35% against FlashAttention-3's 75% of the peak compares
    // FlashAttention-2 with FlashAttention-3's best case, not with cuDNN.)
    double fa2_hopper_fraction = 0.62;
    // fa1: a stack dated before FlashAttention-2 (flash-attn 2.0, July 2023) ran FlashAttention-1,
    // about half as fast: FlashAttention-2 is "around 2× faster" and reaches 50–73% of the A100's
    // peak where FlashAttention-1 reaches 25–40% (Dao 2023, arXiv 2307.08691, abstract and §4.1).
    double fa1_fraction = 0.5;
    // Eager PyTorch elementwise work moves this many times the bytes of fused kernels
    // (docs/estimators.md counts a Llama layer: fp32 upcasts in RMSNorm and RoPE, separate
    // SiLU and multiply, residual adds, SDPA layout copies ≈ 78 vs 30 hidden-sized passes).
    // torch.compile fuses them back to the fused count.
    double eager_elementwise_factor = 2.6;
    // True where published runs calibrate generation g (by_generation has its GEMM ceiling).
    bool calibrated(GpuGeneration g) const { return by_generation[(int)g].gemm_eff_max > 0; }
    // The GEMM ceiling a generation without calibration runs gets: the mean of the calibrated
    // generations' ceilings. Every calibrated generation lands well below the generic
    // gemm_eff_max (sustained clocks under the power limit and what the fit absorbs besides
    // GEMMs), so that default would call an unmeasured GPU (Ada, CDNA3) the fastest of all.
    // `cpu` keeps the generic default (the bundled engine's own calibration, bench_engine).
    double uncalibrated_gemm_eff_max(GpuGeneration g) const {
        if (g == GpuGeneration::cpu) return gemm_eff_max;
        double sum = 0;
        int n = 0;
        for (const KernelEfficiency& k : by_generation)
            if (k.gemm_eff_max > 0) sum += k.gemm_eff_max, ++n;
        return n > 0 ? sum / n : gemm_eff_max;
    }
    // The generation's efficiencies with the defaults filled in.
    KernelEfficiency kernel(GpuGeneration g) const {
        KernelEfficiency k = by_generation[(int)g];
        if (k.gemm_eff_max <= 0) k.gemm_eff_max = uncalibrated_gemm_eff_max(g);
        if (k.flash_eff <= 0) k.flash_eff = flash_eff;
        return k;
    }
    double comm_eff = 0.80;         // NCCL bus bandwidth / link bandwidth, large messages
    double hbm_eff = 0.80;          // memory-bound kernels: fraction of HBM bandwidth
    // overlap: compute running beside a NCCL collective is this much slower (SM and memory-
    // bandwidth contention). Lee et al. 2025 (arXiv 2507.03114) measured 18.9% on average
    // (A100/H100/MI250/MI210, max 40%); NCCL's default 16–32 channels are one SM each, 12–24%
    // of an H100's 132. A documented figure, not fitted (docs/estimators.md).
    double overlap_slowdown = 0.19;
    // slowest: GPUs of one model differ in the speed they sustain (manufacturing spread under
    // the power limit), and a synchronous step runs at the pace of its slowest GPU: every GPU's
    // work is on the critical path (TP collectives each layer, the pipeline's steady state, the
    // DP reduction). The relative standard deviation of per-GPU speed; the expected slowest of
    // n GPUs is then 1 + spread · expected_slowest_of(n) times slower than a typical one.
    // Sinha et al., SC'22 (arXiv 2208.11035), "Not All GPUs Are Created Equal": 8% average
    // performance variation (max 22%) between GPUs of one SKU on five clusters; PTD reads the 8%
    // as the span of the non-outlier GPUs (±2.7σ between a box plot's whiskers for a normal
    // spread), σ = 8% / 5.4 ≈ 1.5%. A documented figure, not fitted (docs/estimators.md).
    double gpu_speed_spread = 0.015;
};
TimeModelConstants& time_model_constants();

// slowest: the expected largest of n independent standard normal draws (Blom's approximation,
// Φ⁻¹((n − 0.375) / (n + 0.25)): 0.5895 for n = 2, exact 0.5642; 1.4342 for n = 8, exact
// 1.4236): how many standard deviations the slowest of n GPUs lies beyond the typical one.
// 0 for n ≤ 1.
double expected_slowest_of(int n);

// Fraction of peak a GEMM (m × k)·(k × n) reaches: eff_max · Π d/(d + gemm_half_dim), with
// eff_max the generation's gemm_eff_max (the default one when none is given).
double gemm_efficiency(double m, double n, double k);
double gemm_efficiency(double m, double n, double k, double eff_max);

// ---- pieces, exposed for tests and docs (each is one formula) --------------------------

// Model FLOPs per token (PaLM appendix B generalised to GQA/SwiGLU/MoE), conventions:
// full = 12·L·a·d·s attention term, causal = half of it.
FlopsEstimate flops_per_token(const ModelSpec& m, Recompute recompute, AttentionFlops convention,
                              double vocab_padded);
// recmod: with Megatron-core's recompute_modules (RecomputeModuleBit) for recompute =
// selective: hardware FLOPs add the GEMMs each module repeats (the form above = ["core_attn"]).
FlopsEstimate flops_per_token(const ModelSpec& m, Recompute recompute, uint32_t recompute_modules,
                              AttentionFlops convention, double vocab_padded);

// Activation bytes one transformer layer saves for backward, for one micro-batch on one
// TP rank (Korthikanti et al. 2022 terms for `megatron`; the engine's buffer list for
// `ptd-engine`). `s` is the local sequence (s / cp).
struct ActivationInputs {
    const ModelSpec* model = nullptr;
    int micro_batch = 1, seq = 0, tp = 1, ep = 1;
    bool sequence_parallel = false, flash_attention = true;
    Recompute recompute = Recompute::none;
    Precision precision = Precision::bf16;
    ActivationProfile profile = ActivationProfile::megatron;
};
double layer_activation_bytes(const ActivationInputs& in);

// ---- the ptd-engine's buffer list ------------------------------------------------------------
// The engine allocates its activations from these lists and the ptd-engine activation
// profile sums the same lists, so prediction and measurement share one definition. Each
// buffer is an id (what it holds) and a dtype, not a string: the engine maps every id to
// its pointer in a switch without a default, so a buffer added here that the engine does
// not place is a compiler warning (-Wswitch), not a silent mismatch.
enum class EngineBufferId : uint8_t {
    // per layer and micro-batch in flight (attn_* after RoPE for q and k)
    ln1_input, ln1_rstd, ln1_mean, ln1_output,
    attn_qkv, attn_probs, attn_lse, attn_context,
    ln2_input, ln2_rstd, ln2_mean, ln2_output,
    moe_router_probs, mlp_gate, mlp_up, mlp_fc1, mlp_act,
    // first stage, per micro-batch in flight
    tokens_input,
    // last stage, held once (the head's forward and backward run back to back)
    final_norm_input, final_norm_rstd, final_norm_mean, final_norm_output, logits_probs, tokens_targets,
    // workspace, held once per stage (engine_workspace_buffers)
    ws_full_rows, ws_d_residual, ws_d_norm_output, ws_dqkv, ws_dctx, ws_dact,
    ws_dfc1, ws_dfc3, ws_attention_backward, ws_rope_table, ws_loss, ws_xent, ws_embedding, ws_tokens_staging,
    ws_operand_scratch,
};
// "ln1.input", "attn.probs", … (the names the docs and error messages use).
const char* engine_buffer_name(EngineBufferId id);

// Storage types of engine buffers. Activations are in the precision's activation dtype
// (engine_activation_dtype); norm statistics, logits and the loss are f32 in every
// precision (as Megatron keeps them); token ids are i32.
enum class EngineDType : uint8_t { f32, bf16, f16, i32 };
int64_t engine_dtype_bytes(EngineDType t);
const char* engine_dtype_name(EngineDType t);
// f32 for fp32, bf16 for bf16, f16 for fp16.
EngineDType engine_activation_dtype(Precision p);

struct EngineBuffer {
    EngineBufferId id;
    int64_t elements;
    EngineDType dtype;
    int64_t bytes() const { return elements * engine_dtype_bytes(dtype); }
};
// What one layer keeps between its forward and its backward, per micro-batch in flight:
// everything with rc = none; without attn.probs with selective (Korthikanti et al. 2022:
// the attention core is recomputed in the backward); only ln1.input with full. With flash
// attention (training.flash_attention: FlashAttention-2, Dao 2023) the [b, H, s, s]
// attn.probs is replaced by attn.lse, the f32 log-sum-exp of each query row [b, H, s].
std::vector<EngineBuffer> engine_layer_buffers(const ModelSpec& m, int micro_batch, int seq, int tp,
                                               bool sequence_parallel, Recompute rc = Recompute::none,
                                               EngineDType act = EngineDType::f32, bool flash = false);
// The working set of the layer being recomputed, held once per stage: nothing with none;
// attn.probs (attn.lse with flash) with selective; every buffer but ln1.input with full.
std::vector<EngineBuffer> engine_recompute_buffers(const ModelSpec& m, int micro_batch, int seq, int tp,
                                                   bool sequence_parallel, Recompute rc,
                                                   EngineDType act = EngineDType::f32, bool flash = false);
// Output-stage buffers of the engine (final norm, logits, targets), held once.
std::vector<EngineBuffer> engine_output_buffers(const ModelSpec& m, int micro_batch, int seq, int tp,
                                                int vocab_padded, bool sequence_parallel,
                                                EngineDType act = EngineDType::f32);

// Input-stage buffers of the engine, per micro-batch in flight (the token ids).
std::vector<EngineBuffer> engine_input_buffers(int micro_batch, int seq);

// The engine's workspace of one stage (its MEM_WORKSPACE category but the step scalars, the
// backend's AdamW range list (Backend::adamw_plan_bytes: 0 on the CPU, one 64-byte entry per
// tensor range on a GPU) and, on a single or last stage, the gradient stream), allocated
// once at start-up: one
// layer's backward temporaries (when the stage has layers), attention backward's scratch
// (`attention_scratch` f32 elements: the backend states it, it depends on its threads),
// the RoPE angle table [2, s, d/2] (RoPE models), the head's loss and (tp > 1) cross-entropy
// buffers (last stage), the SP embedding rows (first stage with SP) and one micro-batch's
// token ids as uploaded (first or last stage), and the backend's scratch for 16-bit
// operands (`operand_scratch` f32 elements, as the backend states it: the CPU backend
// widens 16-bit operands to f32 panels; 0 in fp32 and on a GPU).
std::vector<EngineBuffer> engine_workspace_buffers(const ModelSpec& m, int micro_batch, int seq, int tp,
                                                   bool sequence_parallel, bool first, bool last, bool has_layers,
                                                   int64_t attention_scratch, EngineDType act = EngineDType::f32,
                                                   int64_t operand_scratch = 0);

// Elements of the engine's flat parameter / gradient buffer for a stage of `params`
// parameters. With ZeRO-1 over dp > 1 it is padded to a multiple of
// kEngineShardAlign · dp, so that every dp rank's shard is the same multiple of
// kEngineShardAlign elements (NCCL's reduce-scatter and all-gather take one count for
// all ranks); otherwise it is `params`. The engine allocates exactly this.
constexpr int64_t kEngineShardAlign = 128;
int64_t engine_flat_buffer_elements(int64_t params, int zero, int dp);

// Padded vocabulary: V rounded up to a multiple of vocab_pad · tp (Megatron
// --make-vocab-size-divisible-by).
int64_t padded_vocab(int64_t vocab, int vocab_pad, int tp);

// ttfsdp: the sharding a layout's ZeRO stage and distributed-optimizer flag run as. torchtitan
// with pp > 1 shards the data-parallel ranks with FSDP2 but under torch.distributed.pipelining:
// parallelize_llama.py sets reshard_after_forward = False when pp is enabled (fsdp_reshard_after_
// forward "default"; "never" is the same), and the stage's backward_maybe_with_nosync turns
// gradient sync off until the last micro-batch, so FSDP2 accumulates whole gradients in its
// reduce dtype and reduce-scatters them once. Whole 16-bit parameters and whole fp32 gradients
// through the step, fp32 master and Adam states sharded: Megatron's distributed optimizer
// (zero 0), for zero 2 and 3 alike. Every other stack and pp = 1: as given.
struct Sharding {
    int zero = 0;
    bool distributed_optimizer = false;
};
Sharding effective_sharding(Framework framework, int pp, int zero, bool distributed_optimizer);

// Model-state bytes per parameter for a precision / optimizer / ZeRO stage / distributed
// optimizer, split by category, with `shard` = ranks the sharded parts are divided over.
struct StateBytes {
    double params = 0, grads = 0, optimizer = 0;
    double total() const { return params + grads + optimizer; }
};
StateBytes state_bytes_per_param(Precision precision, Optimizer optimizer, int zero,
                                 bool distributed_optimizer, double shard);
// oom4: bytes per element of the optimizer's states (training.main_params_dtype,
// exp_avg_dtype, exp_avg_sq_dtype); the defaults are fp32 throughout, which the overload
// above uses.
struct OptimizerStateWidths {
    double main = 4.0, exp_avg = 4.0, exp_avg_sq = 4.0;
};
OptimizerStateWidths optimizer_state_widths(const TrainingSpec& training);
StateBytes state_bytes_per_param(Precision precision, Optimizer optimizer, int zero,
                                 bool distributed_optimizer, double shard, const OptimizerStateWidths& widths);

}  // namespace ptd
