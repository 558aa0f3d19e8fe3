// job_spec.cpp — enum names, arch defaults, cross-field validation and the built-in jobs.
#include "ptd/spec/job_spec.h"

#include <algorithm>
#include <cassert>
#include <numeric>

#include "ptd/layout/layout.h"
#include "ptd/spec/pipeline_layout.h"
#include "ptd/spec/presets.h"
#include "ptd/spec/stack_defaults.h"

namespace ptd {

const char* to_string(Arch v) { return v == Arch::gpt ? "gpt" : "llama"; }
const char* to_string(Norm v) { return v == Norm::layernorm ? "layernorm" : "rmsnorm"; }
const char* to_string(Activation v) { return v == Activation::gelu ? "gelu" : "swiglu"; }
const char* to_string(Position v) { return v == Position::learned ? "learned" : "rope"; }
const char* to_string(Recompute v) {
    switch (v) {
        case Recompute::none: return "none";
        case Recompute::selective: return "selective";
        case Recompute::full: return "full";
    }
    return "?";
}
const char* to_string(OffloadDevice v) {
    switch (v) {
        case OffloadDevice::none: return "none";
        case OffloadDevice::cpu: return "cpu";
    }
    return "?";
}
const char* to_string(Precision v) {
    switch (v) {
        case Precision::fp32: return "fp32";
        case Precision::bf16: return "bf16";
        case Precision::fp16: return "fp16";
    }
    return "?";
}
const char* to_string(Optimizer v) {
    switch (v) {
        case Optimizer::adamw: return "adamw";
        case Optimizer::adam: return "adam";
        case Optimizer::sgd: return "sgd";
    }
    return "?";
}
const char* to_string(PipelineSchedule v) {
    switch (v) {
        case PipelineSchedule::automatic: return "auto";
        case PipelineSchedule::one_f_one_b: return "1f1b";
        case PipelineSchedule::interleaved: return "interleaved";
        case PipelineSchedule::zb_h1: return "zb-h1";
        case PipelineSchedule::dualpipe: return "dualpipe";
    }
    return "?";
}
PipelineSchedule effective_schedule(PipelineSchedule s, int vpp) {
    if (s != PipelineSchedule::automatic) return s;
    return vpp > 1 ? PipelineSchedule::interleaved : PipelineSchedule::one_f_one_b;
}
const char* to_string(LaunchMode v) { return v == LaunchMode::local ? "local" : "ssh"; }
const char* to_string(RecomputeStyle v) { return v == RecomputeStyle::megatron ? "megatron" : "torchtitan-op"; }
// recmod: Megatron-core's recompute_modules words (transformer_config.py), bit i = word i.
const char* recompute_module_word(int i) {
    static constexpr const char* kWords[kRecomputeModuleCount] = {"core_attn", "moe_act", "layernorm", "mla_up_proj",
                                                                  "mlp",       "moe",     "shared_experts"};
    return i >= 0 && i < kRecomputeModuleCount ? kWords[i] : "?";
}
std::vector<std::string> recompute_module_words(uint32_t modules) {
    std::vector<std::string> out;
    for (int i = 0; i < kRecomputeModuleCount; ++i)
        if (modules & (1u << i)) out.emplace_back(recompute_module_word(i));
    return out;
}
// hostov: Megatron-core's cuda_graph_scope words (transformer_config.py), bit i = word i.
const char* cuda_graph_scope_word(int i) {
    static constexpr const char* kWords[kCudaGraphScopeCount] = {"full_iteration", "attn",       "mlp",
                                                                 "moe",            "moe_router", "moe_preprocess"};
    return i >= 0 && i < kCudaGraphScopeCount ? kWords[i] : "?";
}
std::vector<std::string> cuda_graph_scope_words(uint32_t scope) {
    std::vector<std::string> out;
    for (int i = 0; i < kCudaGraphScopeCount; ++i)
        if (scope & (1u << i)) out.emplace_back(cuda_graph_scope_word(i));
    return out;
}
const char* to_string(MoeDispatcher v) {
    return v == MoeDispatcher::deepep ? "deepep" : v == MoeDispatcher::hybridep ? "hybridep" : "alltoall";
}
const char* to_string(CudaGraphImpl v) {
    return v == CudaGraphImpl::none ? "none" : v == CudaGraphImpl::local ? "local" : "transformer_engine";
}
const char* to_string(CrossEntropyImpl v) {
    if (v == CrossEntropyImpl::fused) return "fused";  // oompt
    if (v == CrossEntropyImpl::megatron_fused) return "megatron-fused";  // fusedce2
    if (v == CrossEntropyImpl::te) return "te";
    return v == CrossEntropyImpl::megatron ? "megatron" : v == CrossEntropyImpl::pytorch ? "pytorch" : "pytorch-compiled";
}
const char* to_string(FlashKernel v) {  // tritonfa
    static const char* const words[] = {"by-date", "flash-attn-1", "triton", "flash-attn-2"};
    return words[(int)v];
}
const char* to_string(ActivationProfile v) { return v == ActivationProfile::megatron ? "megatron" : "ptd-engine"; }
const char* to_string(AttentionFlops v) { return v == AttentionFlops::full ? "full" : "causal"; }
const char* to_string(Framework v) {
    static const char* const words[] = {"megatron", "deepspeed", "torchtitan", "pytorch-fsdp", "nemo", "llm-foundry"};
    return words[(int)v];
}
const char* to_string(GpuGeneration v) {
    static const char* const words[kGpuGenerationCount] = {"other", "volta", "ampere", "ada",
                                                           "hopper", "blackwell", "cdna3", "cpu"};
    return words[(int)v];
}
const char* to_string(GpuLink v) {
    switch (v) {
        case GpuLink::nvlink: return "nvlink";
        case GpuLink::pcie: return "pcie";
        case GpuLink::infinity_fabric: return "infinity-fabric";
        case GpuLink::loopback: return "loopback";
    }
    return "?";
}
const char* link_name(GpuLink v) {
    switch (v) {
        case GpuLink::nvlink: return "NVLink";
        case GpuLink::pcie: return "PCIe";
        case GpuLink::infinity_fabric: return "Infinity Fabric";
        case GpuLink::loopback: return "loopback";
    }
    return "?";
}
const char* to_string(Fp8Recipe v) {
    switch (v) {
        case Fp8Recipe::none: return "none";
        case Fp8Recipe::delayed: return "delayed";
        case Fp8Recipe::current: return "current";
        case Fp8Recipe::tensorwise: return "tensorwise";
        case Fp8Recipe::rowwise: return "rowwise";
        case Fp8Recipe::mxfp8: return "mxfp8";
    }
    return "?";
}
const char* to_string(Fp8Format v) { return v == Fp8Format::hybrid ? "hybrid" : "e4m3"; }
// oom4: optimizer state dtypes.
const char* to_string(StateDtype v) {
    static const char* const words[] = {"fp32", "bf16", "fp16", "fp8", "none", "fp32-remainders"};
    return words[(int)v];
}
double state_dtype_bytes(StateDtype v) {
    static const double bytes[] = {4.0, 2.0, 2.0, 1.0, 0.0, 2.0};
    return bytes[(int)v];
}

double GpuSpec::peak_tflops(Precision p) const {
    switch (p) {
        case Precision::fp32: return fp32_tflops;
        case Precision::bf16: return bf16_tflops;
        case Precision::fp16: return fp16_tflops;
    }
    return 0;
}

int ClusterSpec::job_nvlink_domain_filled() const {
    const int gpn = std::max(gpus_per_node, 1);
    const long long world = std::max(world_size(), gpn);
    if (nvlink_domain <= gpn) return gpn;
    if (nvlink_domain >= world) return (int)world;
    for (int d = nvlink_domain / gpn * gpn; d > gpn; d -= gpn)
        if (world % d == 0) return d;
    return gpn;
}

std::string describe_nvlink_domain(const JobSpec& job) {
    const ClusterSpec& c = job.cluster;
    const int gpn = std::max(c.gpus_per_node, 1), d = c.job_nvlink_domain();
    if (d <= gpn) return "one node (" + std::to_string(gpn) + " GPUs)";
    std::string out = std::to_string(d) + " GPUs = " + std::to_string(d / gpn) + " nodes";
    if (d == c.world_size() && d < c.nvlink_domain)
        out += " (the whole job, inside one " + std::to_string(c.nvlink_domain) + "-GPU domain)";
    else if (d != c.nvlink_domain)
        out += " (domains of " + std::to_string(c.nvlink_domain) + " GPUs, filled " + std::to_string(d) +
               " each by this job's " + std::to_string(c.world_size()) + " GPUs)";
    return out;
}

std::string describe_network(const JobSpec& job) {
    const ClusterSpec& c = job.cluster;
    const double link = c.intra_gbps > 0 ? c.intra_gbps : c.gpu.link_gbps;
    char buf[256];
    if (c.gpu.link == GpuLink::loopback && c.nodes <= 1) {
        std::snprintf(buf, sizeof buf, "one machine, ranks exchange tensors over loopback at %g GB/s (no NICs)", link);
        return buf;
    }
    if (c.gpu.link == GpuLink::loopback) {
        // Hosts of the cpu device: no GPU NICs or rails to name, one link per host that its
        // ranks share (inter_gbps is each rank's share of it).
        std::snprintf(buf, sizeof buf, "%d hosts over TCP at %g GB/s per rank (%g GB/s per host), loopback %g GB/s inside a host",
                      c.nodes, c.inter_gbps, c.inter_gbps * std::max(c.gpus_per_node, 1), link);
        return buf;
    }
    const int nics = c.nics_per_node > 0 ? c.nics_per_node : c.gpus_per_node;
    std::snprintf(buf, sizeof buf, "%d × %.0f Gb/s NICs per node%s, %s %g GB/s%s", nics,
                  c.inter_gbps * 8.0 * c.gpus_per_node / std::max(nics, 1), c.rail_optimized ? " (rail-optimised)" : "",
                  link_name(c.gpu.link), link, c.nvls ? " with SHARP (NVLS)" : "");
    return buf + (c.gpu.link == GpuLink::nvlink ? " · NVLink domain " + describe_nvlink_domain(job) : std::string());
}

SourceLoc JobSpec::where(const std::string& key) const {
    auto it = origin.locations.find(key);
    if (it != origin.locations.end()) return it->second;
    // Fall back to the table ("parallel.tp" → "parallel").
    auto dot = key.find('.');
    if (dot != std::string::npos) {
        it = origin.locations.find(key.substr(0, dot));
        if (it != origin.locations.end()) return it->second;
    }
    return SourceLoc{origin.file, 0, 0};
}

void fill_model_defaults(ModelSpec& m, const ModelKeysGiven& given) {
    const bool gpt = m.arch == Arch::gpt;
    if (!given.norm) m.norm = gpt ? Norm::layernorm : Norm::rmsnorm;
    if (!given.activation) m.activation = gpt ? Activation::gelu : Activation::swiglu;
    if (!given.position) m.position = gpt ? Position::learned : Position::rope;
    if (!given.tied_embeddings) m.tied_embeddings = gpt;
    if (!given.bias) m.bias = gpt;
    if (!given.kv_heads) m.kv_heads = m.heads;
    if (!given.ffn_hidden) {
        if (m.activation == Activation::swiglu) {
            // Llama's rule: 2/3 of 4h, rounded up to a multiple of 256 (Touvron et al. 2023).
            long long inner = (8LL * m.hidden / 3 + 255) / 256 * 256;
            m.ffn_hidden = (int)inner;
        } else {
            m.ffn_hidden = 4 * m.hidden;
        }
    }
}

// Divisors of n in increasing order, for "allowed" lists (O(√n): n can be ~1e8).
static std::string divisors_of(int n) {
    std::vector<int> low, high;
    for (long long d = 1; d * d <= n; ++d)
        if (n % d == 0) {
            low.push_back((int)d);
            if (d * d != n) high.push_back((int)(n / d));
        }
    low.insert(low.end(), high.rbegin(), high.rend());
    std::string out;
    for (int d : low) {
        if (out.size() > 120) {
            out += ", ...";
            break;
        }
        out += (out.empty() ? "" : ", ") + std::to_string(d);
    }
    return out;
}

int default_vocab_pad(Framework f) {
    return runs_pytorch_modules(f) ? 1 : 128;
}

std::vector<Diagnostic> derive_job_defaults(JobSpec& job) {
    std::vector<Diagnostic> out;
    if (job.origin.vocab_pad_defaulted) job.estimate.vocab_pad = default_vocab_pad(job.training.framework);
    ParallelSpec& par = job.parallel;
    const int world = job.world_size();
    if (!job.origin.dp_given) {
        long long per_replica = (long long)par.tp * par.pp * par.cp;
        if (world > 0 && per_replica > 0 && world % per_replica == 0) {
            par.dp = (int)(world / per_replica);
        } else {
            out.push_back({job.where("parallel"), "parallel.dp",
                           "cannot derive dp: world size " + std::to_string(world) + " (nodes " +
                               std::to_string(job.cluster.nodes) + " × gpus_per_node " +
                               std::to_string(job.cluster.gpus_per_node) +
                               ") is not divisible by tp·pp·cp = " + std::to_string(per_replica) +
                               "; allowed: tp·pp·cp must divide the world size"});
            par.dp = 1;
        }
    }
    if (!job.origin.intra_given) job.cluster.intra_gbps = job.cluster.gpu.link_gbps;
    // batchchoice: an unwritten micro-batch starts at 1; with a layout and a global batch
    // written, choose_unwritten_batching (plan/batch_choice.h) then picks it.
    if (!job.origin.micro_batch_given) job.training.micro_batch = 1;
    // global_batch = micro_batch·dp only when the layout was stated: without one, dp = world
    // would silently make a global batch of one sequence per GPU (16,384 on 2048 nodes).
    if (!job.origin.global_batch_given)
        job.training.global_batch = job.has_layout() ? job.training.micro_batch * par.dp : 0;
    if (job.origin.precision_defaulted) job.training.precision = default_precision(job.cluster.gpu);
    // stackdef: the keys the job left to its stack (after dp, which some defaults depend on).
    apply_stack_defaults(job);
    if (job.origin.flash_attention_defaulted) {
        // Flash kernels (FlashAttention, Transformer Engine's fused attention, the engine's CUDA
        // kernels) take 16-bit inputs: an fp32 job runs the unfused attention.
        const bool sixteen_bit = job.training.precision != Precision::fp32;
        job.training.flash_attention =
            default_flash_attention(job.cluster.gpu) && stack_flash_attention(job.training) && sixteen_bit;
        if (default_flash_attention(job.cluster.gpu) && sixteen_bit && !job.training.flash_attention)
            job.origin.stack_defaults.push_back({"training.flash_attention", "false",
                                                 job.training.framework == Framework::megatron && job.training.framework_version >= 202207
                                                     ? "Megatron-LM's local softmax before Transformer Engine's attention "
                                                       "became the default layer (2024); --use-flash-attn turns it on"
                                                     : "no flash attention in this stack at that date"});
    }
    // tritonfa: a flash kernel older than FlashAttention-2 that the stack's date picks is listed
    // with the defaults (its rate is fa1_fraction of FlashAttention-2's).
    if (job.training.flash_attention && job.training.flash_kernel == FlashKernel::by_date) {
        const FlashKernel k = stack_flash_kernel(job.training);
        if (k == FlashKernel::triton)
            job.origin.stack_defaults.push_back({"training.flash_attention_kernel", "\"triton\"",
                                                 "MPT's attn_impl \"triton\" (flash-attn 1.x's Triton kernel) until "
                                                 "llm-foundry v0.7.0 (Mar 2024)"});
        else if (k == FlashKernel::flash_attn_1)
            job.origin.stack_defaults.push_back({"training.flash_attention_kernel", "\"flash-attn-1\"",
                                                 "FlashAttention-1: flash-attn 2.0 came in Jul 2023"});
        else if (runs_megatron_core(job.training.framework) && !stack_runs_cudnn_attention(job.training))
            job.origin.stack_defaults.push_back({"training.flash_attention_kernel", "\"flash-attn-2\"",
                                                 "the flash-attn package: Transformer Engine prefers cuDNN's fused "
                                                 "attention on Hopper from TE 1.2 (Dec 2023)"});
    }
    if (job.origin.activation_profile_defaulted)
        job.estimate.activation_profile = default_activation_profile(job.cluster.gpu);
    start_unwritten_depth(job);  // batchchoice
    apply_torchtitan_split(job);  // ttsplit: after the depth, which the split depends on
    return out;
}

void start_unwritten_depth(JobSpec& job) {
    if (job.origin.vpp_given || job.parallel.schedule != PipelineSchedule::interleaved) return;
    const size_t entries = job.parallel.layers_per_stage.size(), pp = (size_t)std::max(1, job.parallel.pp);
    if (entries >= 2 * pp && entries % pp == 0) {
        job.parallel.vpp = (int)(entries / pp);  // a split of pp·vpp chunks says the depth
        return;
    }
    // ttsplit: torchtitan builds two stages per rank for a multi-stage schedule when
    // pipeline_parallel_layers_per_stage is unset (generate_split_points at 2024-12;
    // pipeline_parallel.py pipeline_llm since): its depth, not one PTD picks.
    if (job.training.framework == Framework::torchtitan) {
        job.parallel.vpp = 2;
        job.origin.stack_defaults.push_back({"parallel.vpp", "2",
                                             "torchtitan builds two stages per rank for Interleaved1F1B when "
                                             "pipeline_parallel_layers_per_stage is unset"});
        return;
    }
    job.parallel.vpp = 1;
    const std::vector<int> depths = interleaved_depths(job);
    if (!depths.empty()) job.parallel.vpp = depths.front();
}

bool job_runs(const JobSpec& job) {
    if (!validate_job(job).empty()) return false;
    return !(runs_megatron_core(job.training.framework) && megatron_interleaved_refusal(job));
}

std::vector<int> interleaved_depths(const JobSpec& job) {
    std::vector<int> out;
    if (job.parallel.pp < 2 || !job.parallel.layers_per_stage.empty() || !job.parallel.pipeline_layout.empty()) return out;
    JobSpec c = job;
    c.parallel.schedule = PipelineSchedule::interleaved;
    // Each chunk holds at least one layer: more chunks than a stage has layers never validate;
    // nor more than a job file may write (parallel.vpp ≤ 1024).
    const int most = std::clamp((job.model.layers + 2) / job.parallel.pp, 2, 1024);
    for (int v = 2; v <= most; ++v) {
        c.parallel.vpp = v;
        if (job_runs(c)) out.push_back(v);
    }
    return out;
}

// 16-bit is the default where the device computes it faster than fp32 (matrix units). A
// device that only stores 16-bit and computes in fp32 — the cpu preset, whose bf16/fp16
// peaks equal its fp32 peak — allows bf16/fp16 but defaults to fp32.
Precision default_precision(const GpuSpec& gpu) {
    if (gpu.bf16_tflops > gpu.fp32_tflops) return Precision::bf16;
    if (gpu.fp16_tflops > gpu.fp32_tflops) return Precision::fp16;
    return Precision::fp32;
}

bool default_flash_attention(const GpuSpec& gpu) { return gpu.bf16_tflops > gpu.fp32_tflops; }

ActivationProfile default_activation_profile(const GpuSpec& gpu) {
    return gpu.name == "cpu" ? ActivationProfile::ptd_engine : ActivationProfile::megatron;
}

bool gpu_has_mxfp8(const GpuSpec& gpu) {
    // Block-scaled (MX) FP8 tensor cores arrived with Blackwell.
    return gpu.fp8_tflops > 0 && gpu.generation == GpuGeneration::blackwell;
}

std::vector<Diagnostic> require_layout(const JobSpec& job, const std::string& command) {
    if (job.has_layout()) return {};
    return {{SourceLoc{job.origin.file, 0, 0}, "parallel",
             "no layout chosen: the job has no [parallel] table, and " + command +
                 " needs one; run `ptd plan " + job.origin.file +
                 "` and copy a layout into [parallel] (or use `ptd export --plan` for the planner's best)"}};
}

const std::vector<ModelShapeKey>& model_shape_keys() {
    static const std::vector<ModelShapeKey> keys = {
        {"head_dim", &ModelSpec::head_dim_given, 65536},           // 0 = hidden / heads
        {"moe_ffn_hidden", &ModelSpec::moe_ffn_hidden, 1 << 27},   // 0 = ffn_hidden
        {"shared_expert_ffn_hidden", &ModelSpec::shared_expert_ffn_hidden, 1 << 27},
        {"first_dense_layers", &ModelSpec::first_dense_layers, 100000},
        {"q_lora_rank", &ModelSpec::q_lora_rank, 1 << 24},
        {"kv_lora_rank", &ModelSpec::kv_lora_rank, 1 << 24},
        {"qk_rope_head_dim", &ModelSpec::qk_rope_head_dim, 65536},
        {"v_head_dim", &ModelSpec::v_head_dim, 65536},
        {"mtp_layers", &ModelSpec::mtp_layers, 64},
        {"moe_router_num_groups", &ModelSpec::moe_router_num_groups, 1 << 20},  // deepep
        {"moe_router_group_topk", &ModelSpec::moe_router_group_topk, 1 << 20},  // deepep
    };
    return keys;
}

std::vector<Diagnostic> require_global_batch(const JobSpec& job, const std::string& command) {
    if (job.training.global_batch >= 1) return {};
    return {{job.where("training.global_batch"), "training.global_batch",
             "not given, and the job states no layout to derive it from; " + command +
                 " needs the global batch: add `global_batch = N` (sequences per step) under [training]"}};
}

// etp: the expert-group rules (job_spec.h). MoE parallel folding (Megatron-core parallel_state.py
// initialize_model_parallel with --expert-tensor-parallel-size) cuts each stage's tp·cp·dp ranks
// into expert_tp × ep × expert-dp; with expert_tp = tp that is ep dividing dp·cp.
unsigned expert_layout_problems(const ModelSpec& m, int tp, int cp, int dp, int ep, int expert_tp, bool default_order) {
    unsigned bad = 0;
    const int etp = expert_tp > 0 ? expert_tp : tp;
    if (m.moe_ffn_hidden > 0 && tp > 0 && m.moe_ffn_hidden % tp != 0 && etp == tp) bad |= kExpertTpWidth;
    if (ep > 1 && m.experts < 2) bad |= kEpDense;
    if (ep > 1 && m.experts > 1 && m.experts % ep != 0) bad |= kEpExperts;
    if (ep > 1 && etp == tp && ((long long)dp * cp) % ep != 0) bad |= kEpDataCp;
    if (expert_tp != 0 && expert_tp != tp) {
        const long long block = (long long)tp * cp * dp;
        const int expert_width = m.expert_ffn_hidden();
        if (m.experts < 2) bad |= kEtpDense;
        else if (ep < 1 || block % ((long long)ep * expert_tp) != 0) bad |= kEtpFold;
        if (m.experts >= 2 && expert_width > 0 && expert_width % expert_tp != 0) bad |= kEtpWidth;
        if (m.experts >= 2 && !default_order) bad |= kEtpOrder;
    }
    return bad;
}

std::string replicate_problem(const ModelSpec& m, Framework framework, int zero, bool distributed_optimizer, int tp,
                              int cp, int dp, int ep, int expert_tp, int replicas) {
    if (replicas <= 1) return {};
    const std::string r = std::to_string(replicas);
    const long long expert_split = (long long)(expert_tp > 0 ? expert_tp : tp) * std::max(1, ep);
    const long long expert_dp = m.experts > 1 && dp > 0 && expert_split > 0
                                    ? (long long)tp * std::max(1, cp) * dp / expert_split
                                    : 0;
    if (dp > 0 && dp % replicas != 0)
        return "got " + r + " with dp = " + std::to_string(dp) + ": the replicas split the data-parallel ranks into "
               "equal sharding groups; allowed: a divisor of dp";
    if (expert_dp > 0 && expert_dp % replicas != 0)
        return "got " + r + " with an expert-data-parallel group of " + std::to_string(expert_dp) +
               " ranks (dp·cp / ep): the expert states' replicas split it too; allowed: a divisor of it";
    if (zero == 0 && !distributed_optimizer)
        return "got " + r + " with zero = 0 and no distributed optimizer: every data-parallel rank already holds a "
               "whole replica; allowed: 1, or a sharded optimizer (distributed_optimizer = true, zero ≥ 1)";
    if (runs_megatron_core(framework) && !distributed_optimizer && zero != 1)
        return "got " + r + " with zero = " + std::to_string(zero) + " on Megatron-core, whose replicas are its "
               "distributed optimizer's instances (--num-distributed-optimizer-instances); allowed: "
               "distributed_optimizer = true (or zero = 1, written as it), or 1";
    if (runs_pytorch_modules(framework) && zero < 2)
        return "got " + r + " with zero = " + std::to_string(zero) + ": PyTorch FSDP's hybrid sharding shards the "
               "gradients too (HYBRID_SHARD is zero 3, _HYBRID_SHARD_ZERO2 zero 2; torchtitan's "
               "data_parallel_replicate_degree with FSDP2); allowed: zero = 2 or 3, or 1";
    if (framework == Framework::deepspeed && zero != 3)
        return "got " + r + " with zero = " + std::to_string(zero) + ": DeepSpeed shards within a subgroup only "
               "under ZeRO-3 (MiCS, mics_shard_size = dp / dp_replicate); allowed: zero = 3, or 1";
    return {};
}

// `units` spread over n entries of `unit` each as evenly as they go, the remainder on the middle
// entries (the first and last hold the embedding and the loss).
static std::vector<long long> middle_heavy_split(long long units, long long n, long long unit) {
    const long long base = units / n, extra = units % n, first = (n - extra) / 2;
    std::vector<long long> split((size_t)n, base * unit);
    for (long long i = 0; i < extra; ++i) split[(size_t)(first + i)] += unit;
    return split;
}

// Every way out the job spec offers when `layers` do not split into pp·vpp equal chunks,
// each with the split it gives (issue 29 point 8): an explicit layers_per_stage (the
// remainder spread over the middle chunks: the first and last hold the embedding and the
// loss), Megatron's account_for_{embedding,loss}_in_pipeline_split where layers + 1 (+ 1)
// splits evenly, a pipeline_layout string that counts the embedding, the loss and each MTP
// layer as a layer, and the vpp (with this pp) and pp (with this vpp) that divide layers.
static std::string pipeline_split_ways_out(long long layers, int pp, int vpp, int mtp_layers) {
    auto s = [](long long v) { return std::to_string(v); };
    std::vector<std::string> ways;
    const long long chunks = (long long)pp * vpp;
    if (chunks >= 1 && chunks <= layers) {
        // pp entries when every stage's count can split into vpp chunks, else pp·vpp entries.
        const bool per_stage = vpp == 1 || (layers % vpp == 0 && layers / vpp >= pp);
        const long long n = per_stage ? pp : chunks, unit = per_stage ? vpp : 1;
        const long long units = layers / unit, base = units / n, extra = units % n;
        if (layers % unit == 0 && base >= 1) {
            const std::vector<long long> split = middle_heavy_split(units, n, unit);
            std::string list;
            if (n <= 32) {
                for (size_t i = 0; i < split.size(); ++i) list += (i ? ", " : "") + s(split[i]);
                list = "[" + list + "]";
            } else {
                list = s(n) + " entries: " + s(extra) + " of " + s((base + 1) * unit) + " in the middle, " + s(n - extra) +
                       " of " + s(base * unit);
            }
            ways.push_back("layers_per_stage = " + list);
        }
    }
    struct Flag {
        const char* keys;
        int extra;
        const char* fewer;
    };
    for (const Flag f : {Flag{"account_for_embedding_in_pipeline_split = true", 1, "the first chunk"},
                         Flag{"account_for_loss_in_pipeline_split = true", 1, "the last chunk"},
                         Flag{"both account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split", 2,
                              "the first and the last chunk"}})
        if (chunks >= 1 && (layers + f.extra) % chunks == 0 && (layers + f.extra) / chunks >= 1)
            ways.push_back(std::string(f.keys) + " (" + s((layers + f.extra) / chunks) + " per chunk, " + f.fewer +
                           " one transformer layer fewer)");
    // Megatron-core's layout string, the embedding, the loss and each MTP layer a slot like a
    // layer, the slots as even as they go (the remainder on the middle chunks): what
    // Megatron-Bridge's DeepSeek-V3 H100 recipes write, "Et|(tt|)*30mL".
    if (chunks >= 2 && chunks <= 4096 && layers >= 1) {
        const std::vector<long long> slots = middle_heavy_split(layers + 2 + mtp_layers, chunks, 1);
        std::vector<int> split(slots.begin(), slots.end());
        split.front() -= 1, split.back() -= 1 + mtp_layers;
        if (split.front() >= 0 && split.back() >= 0)
            ways.push_back("pipeline_layout = \"" + format_pipeline_layout(layout_of_split(split, mtp_layers)) +
                           "\" (Megatron-core's layout string: the embedding, the loss" +
                           (mtp_layers > 0 ? std::string(" and each MTP layer") : std::string()) + " count as a layer)");
    }
    std::string vpps, pps;
    for (long long v = 1; (long long)pp * v <= layers; ++v)
        if (layers % ((long long)pp * v) == 0 && v != vpp) vpps += (vpps.empty() ? "" : ", ") + s(v);
    for (long long q = 1; q * vpp <= layers; ++q)
        if (layers % (q * vpp) == 0 && q != pp) pps += (pps.empty() ? "" : ", ") + s(q);
    if (!vpps.empty()) ways.push_back("with pp " + s(pp) + ": vpp " + vpps);
    if (!pps.empty()) ways.push_back("with vpp " + s(vpp) + ": pp " + pps + " (pp·tp·cp must also divide the world size)");
    std::string out;
    for (size_t i = 0; i < ways.size(); ++i) out += (i ? "; or " : "") + ways[i];
    return out;
}

std::vector<Diagnostic> validate_job(const JobSpec& job) {
    std::vector<Diagnostic> out;
    auto add = [&](const std::string& key, std::string msg) {
        out.push_back({job.where(key), key, std::move(msg)});
    };
    auto s = [](long long v) { return std::to_string(v); };
    const ModelSpec& m = job.model;
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    const ClusterSpec& c = job.cluster;
    // etp: the expert-group rules, shared with the planner's search (expert_layout_problems).
    const unsigned expert_bad = expert_layout_problems(m, p.tp, p.cp, p.dp, p.ep, p.expert_tp, p.order == "tp-cp-ep-dp-pp");

    // Model shape.
    if (m.heads > 0 && m.head_dim_given == 0 && m.hidden % m.heads != 0)
        add("model.hidden", "hidden " + s(m.hidden) + " is not divisible by heads " + s(m.heads) +
                                "; allowed: a multiple of heads (head_dim = hidden / heads), or set model.head_dim");
    if (m.kv_heads > 0 && m.heads % m.kv_heads != 0)
        add("model.kv_heads", "got " + s(m.kv_heads) + ", but heads " + s(m.heads) +
                                  " must be a multiple of kv_heads; allowed kv_heads: " + divisors_of(m.heads));
    if (m.kv_heads > m.heads)
        add("model.kv_heads", "got " + s(m.kv_heads) + ", more than heads " + s(m.heads) +
                                  "; allowed: 1 .. heads");
    if (m.experts == 1)
        add("model.experts", "got 1; allowed: 0 (dense MLP) or at least 2 experts");
    if (m.experts > 1 && (m.top_k < 1 || m.top_k > m.experts))
        add("model.top_k", "got " + s(m.top_k) + " with " + s(m.experts) +
                               " experts; allowed: 1 .. experts");
    if (m.experts == 0 && m.top_k != 0)
        add("model.top_k", "got " + s(m.top_k) + " but the model is dense (experts = 0); allowed: 0 or set experts");
    // mla: MoE shape keys need experts; MLA needs its three widths and has no GQA.
    auto moe_only = [&](const char* key, long long v) {
        if (m.experts < 2 && v != 0)
            add(std::string("model.") + key, "got " + s(v) + " for a dense model (experts = " + s(m.experts) +
                                                 "); allowed: 0, or set experts ≥ 2");
    };
    moe_only("moe_ffn_hidden", m.moe_ffn_hidden);
    moe_only("shared_expert_ffn_hidden", m.shared_expert_ffn_hidden);
    moe_only("first_dense_layers", m.first_dense_layers);
    if (m.experts >= 2 && m.first_dense_layers >= m.layers && m.layers > 0)
        add("model.first_dense_layers", "got " + s(m.first_dense_layers) + " with " + s(m.layers) +
                                            " layers: no MoE layer would remain; allowed: 0 .. " + s(m.layers - 1));
    if (!m.mla()) {
        for (auto [key, v] : {std::pair<const char*, int>{"q_lora_rank", m.q_lora_rank},
                              {"qk_rope_head_dim", m.qk_rope_head_dim}, {"v_head_dim", m.v_head_dim}})
            if (v != 0)
                add(std::string("model.") + key, "got " + s(v) + " without kv_lora_rank: it describes multi-head "
                                                 "latent attention; allowed: 0, or set kv_lora_rank > 0 (MLA)");
    } else {
        if (m.qk_rope_head_dim < 1)
            add("model.qk_rope_head_dim", "not given with kv_lora_rank " + s(m.kv_lora_rank) +
                                              "; allowed: the RoPE width per head (DeepSeek-V3: 64)");
        if (m.v_head_dim < 1)
            add("model.v_head_dim", "not given with kv_lora_rank " + s(m.kv_lora_rank) +
                                        "; allowed: the value width per head (DeepSeek-V3: 128)");
        if (m.kv_heads != 0 && m.kv_heads != m.heads)
            add("model.kv_heads", "got " + s(m.kv_heads) + " with MLA (kv_lora_rank " + s(m.kv_lora_rank) +
                                      "): every head has its own key and value; allowed: " + s(m.heads) +
                                      " (= heads)");
    }

    // World size.
    long long product = (long long)p.tp * p.pp * p.dp * p.cp;
    if (product != c.world_size())
        add("parallel.dp", "tp·pp·dp·cp = " + s(p.tp) + "·" + s(p.pp) + "·" + s(p.dp) + "·" + s(p.cp) +
                               " = " + s(product) + " ranks, but the cluster has " + s(c.nodes) + " nodes × " +
                               s(c.gpus_per_node) + " GPUs = " + s(c.world_size()) +
                               "; allowed: a product equal to the GPU count (leave dp out to derive it)");

    // Tensor parallel.
    if (m.heads > 0 && m.heads % p.tp != 0)
        add("parallel.tp", "got " + s(p.tp) + ", but heads (" + s(m.heads) +
                               ") must be divisible by tp; allowed tp: " + divisors_of(m.heads));
    if (m.kv_heads > 0 && m.kv_heads % p.tp != 0 && p.tp % m.kv_heads != 0)
        add("parallel.tp", "got " + s(p.tp) + " with kv_heads " + s(m.kv_heads) +
                               ": each TP rank needs whole KV heads; allowed: tp dividing kv_heads, or a multiple "
                               "of kv_heads (KV heads are then replicated)");
    if (m.ffn_hidden > 0 && m.ffn_hidden % p.tp != 0)
        add("parallel.tp", "got " + s(p.tp) + ", but ffn_hidden (" + s(m.ffn_hidden) +
                               ") must be divisible by tp; allowed tp: " + divisors_of(m.ffn_hidden));
    // moe2: with expert_tp ≠ tp the routed experts split expert_tp ways (checked below), not tp.
    if (expert_bad & kExpertTpWidth)
        add("parallel.tp", "got " + s(p.tp) + ", but moe_ffn_hidden (" + s(m.moe_ffn_hidden) +
                               ") must be divisible by tp; allowed tp: " + divisors_of(m.moe_ffn_hidden));
    if (m.shared_expert_ffn_hidden > 0 && m.shared_expert_ffn_hidden % p.tp != 0)
        add("parallel.tp", "got " + s(p.tp) + ", but shared_expert_ffn_hidden (" + s(m.shared_expert_ffn_hidden) +
                               ") must be divisible by tp; allowed tp: " + divisors_of(m.shared_expert_ffn_hidden));
    if (p.sequence_parallel && p.tp == 1)
        add("parallel.sequence_parallel",
            "true with tp = 1: sequence parallelism splits activations across the TP group; allowed: "
            "false, or tp > 1");
    if (p.sequence_parallel && p.tp > 1 && m.seq_len % p.tp != 0)
        add("parallel.sequence_parallel", "seq_len " + s(m.seq_len) + " is not divisible by tp " + s(p.tp) +
                                              "; allowed: a seq_len that is a multiple of tp");
    // Context parallel splits each sequence in 2·cp chunks (load-balanced causal attention).
    if (p.cp > 1 && m.seq_len % (2 * p.cp) != 0)
        add("parallel.cp", "got " + s(p.cp) + ", but seq_len " + s(m.seq_len) +
                               " must be divisible by 2·cp; allowed cp: divisors of seq_len/2");

    // Pipeline.
    if (p.vpp > 1 && p.pp < 2)
        add("parallel.vpp", "got " + s(p.vpp) + " with pp = " + s(p.pp) +
                                "; the interleaved schedule needs pp ≥ 2; allowed: vpp = 1, or pp ≥ 2");
    // zb: schedules that need a pipeline, or a given number of chunks per stage.
    if (p.schedule == PipelineSchedule::interleaved && p.vpp < 2)
        add("parallel.schedule", job.origin.vpp_given
                                     ? "got \"interleaved\" with vpp = " + s(p.vpp) +
                                           "; the interleaved schedule needs vpp ≥ 2; allowed: vpp ≥ 2, or schedule = \"1f1b\""
                                     : "got \"interleaved\" without parallel.vpp, and no vpp ≥ 2 runs this job with pp = " +
                                           s(p.pp) + " (the layers of a stage, the micro-batches per step, or another "
                                           "problem listed here); allowed: a vpp written that runs, or schedule = \"1f1b\"");
    if (p.schedule != PipelineSchedule::automatic && p.schedule != PipelineSchedule::interleaved && p.vpp > 1)
        add("parallel.schedule", std::string("got \"") + to_string(p.schedule) + "\" with vpp = " + s(p.vpp) +
                                     "; only the interleaved schedule runs several chunks per stage; allowed: "
                                     "vpp = 1, or schedule = \"interleaved\"");
    if ((p.schedule == PipelineSchedule::zb_h1 || p.schedule == PipelineSchedule::dualpipe) && p.pp < 2)
        add("parallel.schedule", std::string("got \"") + to_string(p.schedule) + "\" with pp = " + s(p.pp) +
                                     "; a pipeline schedule needs pp ≥ 2; allowed: pp ≥ 2, or schedule = \"auto\"");
    if (p.schedule == PipelineSchedule::dualpipe && p.pp >= 2) {
        // DualPipe feeds micro-batches from both ends: an even number of ranks, and at least
        // 2·pp micro-batches, an even number, half fed from each end (DeepSeek's DualPipe
        // asserts num_ranks % 2 == 0, num_chunks % 2 == 0 and num_chunks ≥ 2·num_ranks).
        const long long mbs = t.micro_batch > 0 && p.dp > 0 ? t.global_batch / ((long long)t.micro_batch * p.dp) : 0;
        if (p.pp % 2 != 0)
            add("parallel.schedule", "got \"dualpipe\" with pp = " + s(p.pp) + "; DualPipe pairs rank i with rank pp−1−i; allowed: an even pp");
        else if (mbs > 0 && (mbs < 2LL * p.pp || mbs % 2 != 0))
            add("parallel.schedule", "got \"dualpipe\" with " + s(mbs) + " micro-batches per step and pp = " + s(p.pp) +
                                         "; DualPipe needs an even number of at least 2·pp = " + s(2LL * p.pp) +
                                         " micro-batches; allowed: global_batch ≥ 2·pp·micro_batch·dp, or another schedule");
    }
    // l405: Megatron's --account-for-{embedding,loss}-in-pipeline-split count the embedding and
    // the loss as a layer each: (layers + 1 + 1) must split evenly into pp·vpp chunks
    // (megatron/training/arguments.py), and they cannot be combined with an explicit split
    // (Megatron refuses them with --decoder-first/last-pipeline-num-layers).
    const int split_extra = (p.account_for_embedding_in_pipeline_split ? 1 : 0) + (p.account_for_loss_in_pipeline_split ? 1 : 0);
    // Megatron-core's layout string (loading read it into layers_per_stage): the pp·vpp chunks
    // the layout has, the model's layers and MTP layers, the split it gave.
    if (!p.pipeline_layout.empty()) {
        const auto layout = parse_pipeline_layout(p.pipeline_layout);
        if (!layout)
            add("parallel.pipeline_layout", "got " + quote_input(p.pipeline_layout) + ": " + layout.error());
        else if (const auto ok = check_pipeline_layout(*layout, p.pp, p.vpp, m.layers, m.mtp_layers); !ok)
            add("parallel.pipeline_layout", quote_input(p.pipeline_layout) + " " + ok.error());
        else if (p.layers_per_stage != layout_layers_per_chunk(*layout))
            add("parallel.layers_per_stage", "differs from the split parallel.pipeline_layout gives; allowed: one of the two");
        if (split_extra > 0)
            add("parallel.pipeline_layout", "written with account_for_*_in_pipeline_split; allowed: one of the two (the "
                                            "layout string places the embedding and the loss itself)");
    }
    if (split_extra > 0 && !p.layers_per_stage.empty() && p.pipeline_layout.empty())
        add(p.account_for_embedding_in_pipeline_split ? "parallel.account_for_embedding_in_pipeline_split"
                                                      : "parallel.account_for_loss_in_pipeline_split",
            "true together with layers_per_stage; the split either counts the embedding / loss as layers or is "
            "given explicitly; allowed: one of the two");
    if (split_extra > 0 && p.layers_per_stage.empty()) {
        const long long chunks = (long long)p.pp * p.vpp, slots = (long long)m.layers + split_extra;
        if (chunks > 0 && slots % chunks != 0)
            add("parallel.pp", "layers + " + std::string(split_extra == 2 ? "embedding + loss" : p.account_for_embedding_in_pipeline_split ? "embedding" : "loss") +
                                   " = " + s(slots) + " is not divisible by pp·vpp = " + s(p.pp) + "·" + s(p.vpp) + " = " +
                                   s(chunks) + " (account_for_*_in_pipeline_split); allowed (the split as these flags leave it, or without them): " +
                                   pipeline_split_ways_out(m.layers, p.pp, p.vpp, m.mtp_layers));
        else if (chunks > 0 && slots / chunks < 1)
            add("parallel.pp", "pp·vpp = " + s(chunks) + " model chunks for only " + s(slots) +
                                   " layers (embedding / loss counted); allowed: at most one chunk per layer");
    } else if (p.layers_per_stage.empty()) {
        long long chunks = (long long)p.pp * p.vpp;
        if (chunks > 0 && m.layers % chunks != 0)
            add("parallel.pp", "layers (" + s(m.layers) + ") is not divisible by pp·vpp = " + s(p.pp) + "·" +
                                   s(p.vpp) + " = " + s(chunks) + "; allowed: " +
                                   pipeline_split_ways_out(m.layers, p.pp, p.vpp, m.mtp_layers));
        if (chunks > m.layers && m.layers > 0)
            add("parallel.pp", "pp·vpp = " + s(chunks) + " model chunks for only " + s(m.layers) +
                                   " layers; allowed: at most one chunk per layer");
    } else if (p.pipeline_layout.empty()) {  // a layout string was checked above
        size_t n = p.layers_per_stage.size();
        if (n != (size_t)p.pp && n != (size_t)p.pp * p.vpp) {
            add("parallel.layers_per_stage",
                "has " + s((long long)n) + " entries; allowed: pp (" + s(p.pp) + ") entries" +
                    (p.vpp > 1 ? ", or pp·vpp (" + s((long long)p.pp * p.vpp) + ") entries" : std::string()));
        } else {
            long long sum = 0;
            bool non_negative = true;
            for (int l : p.layers_per_stage) {
                sum += l;
                non_negative = non_negative && l >= 0;
            }
            // A chunk may hold no transformer layer: Megatron-core's pipeline layouts give the
            // embedding, the MTP layers or the loss a chunk of their own ("Et|(tt|)*30mL").
            if (!non_negative)
                add("parallel.layers_per_stage", "has an entry < 0; allowed: 0 or more layers per stage or chunk");
            if (sum != m.layers)
                add("parallel.layers_per_stage", "sums to " + s(sum) + ", but the model has " + s(m.layers) +
                                                     " layers; allowed: entries summing to layers");
            if (n == (size_t)p.pp && p.vpp > 1)
                for (int l : p.layers_per_stage)
                    if (l % p.vpp != 0) {
                        add("parallel.layers_per_stage",
                            "entry " + s(l) + " is not divisible by vpp " + s(p.vpp) +
                                "; allowed: per-stage counts that split evenly into vpp chunks, or pp·vpp entries");
                        break;
                    }
        }
    }

    // oomnemo: FP8 primary weights are Transformer Engine's (Float8Tensor parameters).
    // fsdp8gather: on torchtitan, torchao's tensorwise float8 gathers FSDP2's weights in float8
    // (Float8LinearConfig.enable_fsdp_float8_all_gather).
    const bool torchao_gather = job.training.framework == Framework::torchtitan && job.training.fp8 == Fp8Recipe::tensorwise;
    if (job.training.fp8_param_gather && job.training.fp8 != Fp8Recipe::delayed &&
        job.training.fp8 != Fp8Recipe::current && job.training.fp8 != Fp8Recipe::mxfp8 && !torchao_gather)
        add("training.fp8_param_gather", std::string("true with training.fp8 = \"") + to_string(job.training.fp8) +
                                             "\" on " + to_string(job.training.framework) +
                                             "; FP8 parameter gathers are Transformer Engine's or, on torchtitan, "
                                             "torchao's tensorwise float8 all-gather; allowed: fp8 = \"delayed\", "
                                             "\"current\" or \"mxfp8\", fp8 = \"tensorwise\" with framework = "
                                             "\"torchtitan\", or fp8_param_gather = false");

    // oom4: optimizer state precision. A master copy exists only under 16-bit mixed precision
    // (fp32 training updates its fp32 weights); the moments have no "none"; the bundled engine
    // keeps fp32 master weights and moments.
    {
        const TrainingSpec& tr = job.training;
        if (tr.main_params_dtype == StateDtype::fp8)
            add("training.main_params_dtype", "got \"fp8\"; allowed: \"fp32\", \"bf16\", \"fp16\", \"none\"");
        else if (tr.main_params_dtype != StateDtype::fp32 && tr.precision == Precision::fp32)
            add("training.main_params_dtype", std::string("got \"") + to_string(tr.main_params_dtype) +
                                                  "\" with precision = \"fp32\", which has no master copy; allowed: "
                                                  "\"fp32\", or precision = \"bf16\" / \"fp16\"");
        // The remainders complete a bf16 weight's 16 bits to fp32: bf16 weights only.
        if (tr.main_params_dtype == StateDtype::fp32_remainders && tr.precision != Precision::bf16)
            add("training.main_params_dtype", std::string("got \"fp32-remainders\" with precision = \"") +
                                                  to_string(tr.precision) + "\"; the 16-bit remainders complete bf16 "
                                                  "weights to fp32; allowed: precision = \"bf16\", or another dtype");
        for (const auto& [key, v] : {std::pair{"training.exp_avg_dtype", tr.exp_avg_dtype},
                                     std::pair{"training.exp_avg_sq_dtype", tr.exp_avg_sq_dtype}})
            if (v == StateDtype::none || v == StateDtype::fp32_remainders)
                add(key, "got \"none\"; allowed: \"fp32\", \"bf16\", \"fp16\", \"fp8\"");
        if (tr.optimizer == Optimizer::sgd && tr.exp_avg_sq_dtype != StateDtype::fp32)
            add("training.exp_avg_sq_dtype", std::string("got \"") + to_string(tr.exp_avg_sq_dtype) +
                                                  "\" with optimizer = \"sgd\", which keeps no second moment; allowed: "
                                                  "\"fp32\" (SGD's momentum is exp_avg_dtype)");
        const bool low = tr.main_params_dtype != StateDtype::fp32 || tr.exp_avg_dtype != StateDtype::fp32 ||
                         tr.exp_avg_sq_dtype != StateDtype::fp32;
        if (low && job.estimate.activation_profile == ActivationProfile::ptd_engine)
            add("training.main_params_dtype", "a state dtype other than \"fp32\" with estimate.activation_profile = "
                                              "\"ptd-engine\": the bundled engine keeps fp32 master weights and "
                                              "moments; allowed: \"fp32\" for main_params_dtype, exp_avg_dtype and "
                                              "exp_avg_sq_dtype, or activation_profile = \"megatron\"");
    }

    // recipe (issue 29 point 6): a stack's configuration, for that stack only (the TOML
    // loader says so with the line; a job edited in code is checked here).
    if (const TrainingSpec& tr = job.training; !tr.recipe.empty()) {
        const std::optional<Framework> f = recipe_framework(tr.recipe);
        if (!f || *f != tr.framework)
            add("training.recipe", "got \"" + tr.recipe + "\" with training.framework = \"" + to_string(tr.framework) +
                                       "\"; allowed: " + known_recipes_text(tr.recipe));
    }

    // oomnemo: Megatron-core raises for CPU offloading with pipeline parallelism
    // (TransformerConfig: "Currently there is no support for Pipeline parallelism with CPU
    // offloading") and for cpu_offloading_num_layers outside [0, num_layers).
    if (p.activation_offload_layers > 0) {
        if (p.pp > 1)
            add("parallel.activation_offload_layers", "got " + s(p.activation_offload_layers) + " with pp = " + s(p.pp) +
                                                          "; Megatron-core offloads activations only without pipeline "
                                                          "parallelism; allowed: pp = 1, or 0");
        else if (p.activation_offload_layers >= job.model.layers)
            add("parallel.activation_offload_layers", "got " + s(p.activation_offload_layers) + " with " +
                                                          s(job.model.layers) + " layers; allowed: 0 to " +
                                                          s(job.model.layers - 1) + " (fewer than model.layers)");
    }

    // l405: the interleaved schedule's group size N (Megatron's
    // --microbatch-group-size-per-virtual-pipeline-stage, the Llama 3 paper's N). Megatron-LM's
    // schedules.py raises for N outside [pp, micro-batches] and for a last group smaller than
    // pp; its order with N < pp deadlocks the schedule simulation (the Llama 3 paper's own
    // schedule runs N < pp with another warm-up, which is not modelled).
    if (p.microbatch_group_size > 0) {
        const long long mbs = t.micro_batch > 0 && p.dp > 0 ? t.global_batch / ((long long)t.micro_batch * p.dp) : 0;
        const long long n = p.microbatch_group_size;
        if (p.vpp < 2)
            add("parallel.microbatch_group_size", "got " + s(n) + " with vpp = " + s(p.vpp) +
                                                      "; only the interleaved schedule groups micro-batches per chunk; "
                                                      "allowed: vpp ≥ 2, or leave it out (= pp)");
        else if (n < p.pp || (mbs > 0 && n > mbs))
            add("parallel.microbatch_group_size",
                "got " + s(n) + "; Megatron-LM's interleaved schedule needs pp ≤ N ≤ micro-batches per step; allowed: " +
                    s(p.pp) + " to " + (mbs > 0 ? s(mbs) + " (global_batch / (micro_batch·dp))" : std::string("the micro-batches per step")));
        else if (mbs > 0 && mbs % n != 0 && mbs % n < p.pp)
            add("parallel.microbatch_group_size",
                "got " + s(n) + " with " + s(mbs) + " micro-batches per step: the last group holds " + s(mbs % n) +
                    " < pp = " + s(p.pp) + " micro-batches (Megatron-LM raises: dependency bubbles); allowed: N dividing " +
                    s(mbs) + ", or one that leaves a last group of at least pp");
    }
    // oompt: the same rule with N left at pp. A last group of 0 < m mod pp < pp micro-batches
    // (m > pp) is what Megatron-LM's schedules.py refuses ("dependency bubbles"), and its block
    // order then has a cycle: the schedule simulation would deadlock. m < pp stays allowed: one
    // group of all m micro-batches (the Llama 3 paper's "fewer micro-batches than stages").
    if (p.vpp >= 2 && p.microbatch_group_size == 0 && p.pp >= 2 && t.micro_batch > 0 && p.dp > 0) {
        const long long mbs = t.global_batch / ((long long)t.micro_batch * p.dp);
        // torchtitan runs torch's ScheduleInterleaved1F1B, which (torch 2.5 – 2.6) asks for a
        // multiple of pp itself and has no group-size key to write.
        const bool titan_pp = t.framework == Framework::torchtitan;
        if (mbs > p.pp && mbs % p.pp != 0)
            add("training.global_batch",
                "gives " + s(mbs) + " micro-batches per step (global_batch / (micro_batch·dp)) with pp = " + s(p.pp) +
                    " and vpp = " + s(p.vpp) + ": the interleaved schedule's last group holds " + s(mbs % p.pp) +
                    (titan_pp ? " < pp micro-batches (torch.distributed.pipelining's Interleaved1F1B, torch 2.5 – 2.6, "
                                "requires a multiple of pp); allowed: a multiple of pp (" + s(p.pp) + ")"
                              : " < pp micro-batches (Megatron-LM raises: dependency bubbles); allowed: a multiple of pp (" +
                                    s(p.pp) + "), fewer than pp, or parallel.microbatch_group_size = N with pp ≤ N ≤ " +
                                    s(mbs) + " leaving a last group of 0 or at least pp"));
    }

    // ZeRO / optimizer sharding.
    // ZeRO-2 with a pipeline is FSDP with parameters kept unsharded between micro-batches
    // and gradients sharded (the Llama 3 paper's FSDP, §3.3.2): each micro-batch's gradients
    // are reduce-scattered into the sharded accumulator. ZeRO-3
    // would re-gather every stage's parameters for every micro-batch's forward and backward.
    // ttfsdp: torchtitan's FSDP2 under torch.distributed.pipelining keeps the parameters
    // gathered through the step and reduces the gradients once (effective_sharding, estimate.h):
    // zero 3 is what a torchtitan job with pp > 1 runs, and zero 2 the same.
    const bool titan = t.framework == Framework::torchtitan;
    if (p.zero >= 3 && p.pp > 1 && !titan)
        add("parallel.zero", "got " + s(p.zero) + " with pp = " + s(p.pp) +
                                 ": ZeRO-3 re-gathers the parameters for every pipeline micro-batch "
                                 "(DeepSpeed refuses this too); allowed: zero 0, 1 or 2 with pp > 1 (or framework "
                                 "\"torchtitan\", whose FSDP2 under pipelining gathers once per step)");
    if (titan && p.pp > 1 && p.zero >= 2 && (p.offload_params || p.offload_optimizer != OffloadDevice::none))
        add(p.offload_params ? "parallel.offload_params" : "parallel.offload_optimizer",
            "set with framework \"torchtitan\", pp = " + s(p.pp) + " and zero = " + s(p.zero) +
                ": torchtitan's CPU offload under pipeline parallelism is not modelled; allowed: no offload with pp > 1, "
                "or pp = 1");
    // hsdp: replicas of the sharded states, in the stack's own form (replicate_problem).
    if (p.dp_replicate < 1)  // a job built in code or a run file; the TOML reader refuses it itself
        add("parallel.dp_replicate", "got " + s(p.dp_replicate) + "; allowed: 1 or more (1 = one sharding group)");
    if (p.dp_replicate > 1) {
        if (std::string why = replicate_problem(job.model, t.framework, p.zero, p.distributed_optimizer, p.tp, p.cp,
                                                p.dp, p.ep, p.expert_tp, p.dp_replicate);
            !why.empty())
            add("parallel.dp_replicate", why);
        else if (job.estimate.activation_profile == ActivationProfile::ptd_engine)
            add("parallel.dp_replicate", "got " + s(p.dp_replicate) + " with estimate.activation_profile = \"ptd-engine\": "
                                         "the bundled engine shards its optimizer over the whole data-parallel group; "
                                         "allowed: 1, or activation_profile = \"megatron\"");
    }
    if (p.distributed_optimizer && p.zero != 0)
        add("parallel.distributed_optimizer",
            "true together with zero = " + s(p.zero) +
                ": both shard the optimizer; allowed: distributed_optimizer = true with zero = 0, or "
                "distributed_optimizer = false");
    // Offload (ZeRO-Offload, ZeRO-Infinity): DeepSpeed offloads the optimizer of ZeRO 1-3 and
    // parameters only under ZeRO-3; Megatron offloads its distributed optimizer's states.
    if (p.offload_optimizer != OffloadDevice::none && p.zero == 0 && !p.distributed_optimizer)
        add("parallel.offload_optimizer",
            std::string("got \"") + to_string(p.offload_optimizer) +
                "\" with zero = 0 and no distributed optimizer: only a sharded optimizer is offloaded "
                "(DeepSpeed's offload_optimizer needs ZeRO 1-3, Megatron's --optimizer-cpu-offload its "
                "distributed optimizer); allowed: zero = 1, 2 or 3, or distributed_optimizer = true, or "
                "offload_optimizer = \"none\"");
    if (p.offload_params && p.zero != 3)
        add("parallel.offload_params", "true with zero = " + s(p.zero) +
                                           ": parameters are offloaded only when ZeRO-3 shards them "
                                           "(DeepSpeed's offload_param is valid for stage 3 only); allowed: "
                                           "offload_params = true with zero = 3, or false");
    if ((p.offload_optimizer != OffloadDevice::none || p.offload_params) && job.cluster.gpu.name == "cpu")
        add(p.offload_params ? "parallel.offload_params" : "parallel.offload_optimizer",
            "offload on the cpu preset: its ranks already train in host memory; allowed: offload_optimizer = "
            "\"none\" and offload_params = false on cpu");

    // Overlap: the combinations Megatron-LM refuses (megatron/training/arguments.py asserts).
    if (p.overlap_param_gather && p.zero == 0 && !p.distributed_optimizer)
        add("parallel.overlap_param_gather",
            "true without a sharded optimizer: there is no parameter all-gather to overlap; allowed: true with "
            "distributed_optimizer = true or zero ≥ 1, else false");
    if (p.overlap_param_gather && p.zero != 3 && !p.overlap_grad_reduce && (p.zero != 0 || p.distributed_optimizer))
        add("parallel.overlap_param_gather",
            "true with overlap_grad_reduce = false (Megatron-LM: \"Must use --overlap-param-gather with "
            "--overlap-grad-reduce\"); allowed: overlap_grad_reduce = true too, or false");
    if (p.tp_comm_overlap && p.tp > 1 && !p.sequence_parallel)
        add("parallel.tp_comm_overlap",
            "true with sequence_parallel = false: Transformer Engine overlaps the all-gather / reduce-scatter of "
            "sequence parallelism with the GEMMs; allowed: sequence_parallel = true, or false");
    // tt405: torchtitan's async TP (parallelize_llama.py: "Async TP requires --training.compile";
    // its TP plan is always sequence parallel); it and Transformer Engine's userbuffers are two
    // implementations of the same overlap, not stacked.
    if (p.async_tp && p.tp > 1) {
        if (!p.sequence_parallel)
            add("parallel.async_tp",
                "true with sequence_parallel = false: micro-pipelined TP decomposes the all-gather / reduce-scatter "
                "of sequence parallelism; allowed: sequence_parallel = true, or async_tp = false");
        if (!job.training.torch_compile)
            add("parallel.async_tp",
                "true with training.torch_compile = false: the micro_pipeline_tp pass runs inside Inductor (torchtitan: "
                "\"Async TP requires --training.compile\"); allowed: training.torch_compile = true, or async_tp = false");
        if (p.tp_comm_overlap)
            add("parallel.async_tp",
                "true with tp_comm_overlap = true: PyTorch's async TP and Transformer Engine's userbuffers are two "
                "implementations of the same overlap; allowed: one of them true");
    }

    // Experts.
    if (expert_bad & kEpDense)
        add("parallel.ep", "got " + s(p.ep) + " for a dense model; allowed: ep = 1 unless experts ≥ 2");
    if (expert_bad & kEpExperts)
        add("parallel.ep", "got " + s(p.ep) + ", but experts (" + s(m.experts) +
                               ") must be divisible by ep; allowed ep: " + divisors_of(m.experts));
    if (expert_bad & kEpDataCp)
        add("parallel.ep", "got " + s(p.ep) + ", but ep must divide dp·cp = " + s((long long)p.dp * p.cp) +
                               "; allowed ep: " + divisors_of(p.dp * p.cp) +
                               " (or an expert_tp other than tp, which folds the experts over tp·cp·dp)");
    // moe2: MoE parallel folding (Megatron-core parallel_state.py initialize_model_parallel with
    // --expert-tensor-parallel-size): the expert groups cut each stage's tp·cp·dp ranks into
    // expert_tp × ep × expert-dp, so ep·expert_tp must divide tp·cp·dp; the routed experts'
    // width splits expert_tp ways.
    if (p.expert_tp != 0 && p.expert_tp != p.tp) {
        const long long block = (long long)p.tp * p.cp * p.dp;
        const int expert_width = m.expert_ffn_hidden();
        if (expert_bad & kEtpDense)
            add("parallel.expert_tp", "got " + s(p.expert_tp) + " for a dense model (experts = " + s(m.experts) +
                                          "); allowed: 0 (= tp) unless experts ≥ 2");
        else if (expert_bad & kEtpFold)
            add("parallel.expert_tp", "got " + s(p.expert_tp) + " with ep " + s(p.ep) + ": ep·expert_tp = " +
                                          s((long long)p.ep * p.expert_tp) + " must divide tp·cp·dp = " + s(p.tp) + "·" +
                                          s(p.cp) + "·" + s(p.dp) + " = " + s(block) +
                                          " (Megatron's expert groups fold those ranks); allowed" +
                                          (block % p.ep == 0 ? " expert_tp: " + divisors_of((int)(block / p.ep))
                                                             : ": an ep dividing " + s(block) + ", then expert_tp dividing " +
                                                                   s(block) + " / ep"));
        if (expert_bad & kEtpWidth)
            add("parallel.expert_tp", "got " + s(p.expert_tp) + ", but the routed experts' width (" +
                                          (m.moe_ffn_hidden > 0 ? "moe_ffn_hidden " : "ffn_hidden ") + s(expert_width) +
                                          ") must be divisible by expert_tp; allowed: " + divisors_of(expert_width));
        if (expert_bad & kEtpOrder)
            add("parallel.expert_tp", "got " + s(p.expert_tp) + " with order \"" + p.order +
                                          "\": the folded expert groups are laid out over Megatron's default order "
                                          "only; allowed: order = \"tp-cp-ep-dp-pp\", or expert_tp = 0 (= tp)");
    }

    // Rank order.
    if (auto order = check_canonical_rank_order(p.order); !order) {
        for (Diagnostic d : order.error().diagnostics) {
            d.where = job.where("parallel.order");
            out.push_back(std::move(d));
        }
    }

    // Batch. Without a chosen layout dp is a placeholder, so only the planner checks it.
    long long per_step = (long long)t.micro_batch * p.dp;
    if (job.has_layout() && per_step > 0 && t.global_batch % per_step != 0)
        add("training.global_batch", "got " + s(t.global_batch) + ", not divisible by micro_batch·dp = " +
                                         s(t.micro_batch) + "·" + s(p.dp) + " = " + s(per_step) +
                                         "; allowed: a multiple of " + s(per_step));
    if (t.min_lr > t.lr)
        add("training.min_lr", "min_lr " + std::to_string(t.min_lr) + " is above lr " + std::to_string(t.lr) +
                                   "; allowed: 0 ≤ min_lr ≤ lr");
    if (t.warmup > t.steps)
        add("training.warmup", "got " + s(t.warmup) + " warmup steps for " + s(t.steps) +
                                   " training steps; allowed: 0 .. steps");

    if (t.torch_compile && !runs_pytorch_modules(t.framework))
        add("training.torch_compile", std::string("true with framework \"") + to_string(t.framework) +
                                          "\"; allowed: true only with framework \"torchtitan\", \"pytorch-fsdp\" or \"llm-foundry\"");
    // p2psg: the scatter/gather send is Megatron-LM's (DeepSpeed's pipeline engine partitions
    // its p2p tensors on its own: pipe_partitioned; torchtitan / FSDP have no such option).
    if (p.scatter_gather_tensors_in_pipeline && t.framework != Framework::megatron)
        add("parallel.scatter_gather_tensors_in_pipeline",
            std::string("true with framework \"") + to_string(t.framework) +
                "\"; allowed: true only with framework \"megatron\" (Megatron-LM's --scatter-gather-tensors-in-pipeline)");
    // deepep: the flex dispatcher's backends and the EP all-to-all overlap are Megatron-core's;
    // the overlap's preconditions are TransformerConfig.__post_init__'s
    // (overlap_moe_expert_parallel_comm): EP > 1, vpp with pp > 1, no full recompute, a 16-bit
    // model, no --moe-shared-expert-overlap, at most one MTP layer; its schedules are 1F1B and
    // interleaved only (pipeline_parallel/combined_1f1b.py).
    if (p.moe_dispatcher != MoeDispatcher::alltoall || p.moe_a2a_overlap) {
        const char* key = p.moe_dispatcher != MoeDispatcher::alltoall ? "parallel.moe_dispatcher" : "parallel.moe_a2a_overlap";
        if (m.experts < 2)
            add(key, "set for a dense model (experts = " + s(m.experts) + "); allowed: the default (alltoall, "
                     "no overlap) unless experts ≥ 2");
        if (!runs_megatron_core(t.framework))
            add(key, std::string("set with framework \"") + to_string(t.framework) +
                         "\"; allowed: only with framework \"megatron\" or \"nemo\" (Megatron-core's MoE token dispatcher)");
    }
    // moeperm, moerouter: the fused permutation and the fused router are Megatron-core's token
    // dispatcher's and TopKRouter's: true only on an MoE model under Megatron-core.
    auto megatron_core_moe_flag = [&](bool set, const std::string& key, const std::string& flag) {
        if (!set) return;
        if (m.experts < 2)
            add(key, "true for a dense model (experts = " + s(m.experts) + "); allowed: true only when experts ≥ 2");
        if (!runs_megatron_core(t.framework))
            add(key, std::string("true with framework \"") + to_string(t.framework) +
                         "\"; allowed: only with framework \"megatron\" or \"nemo\" (Megatron-core's " + flag + ")");
    };
    megatron_core_moe_flag(p.moe_permute_fusion, "parallel.moe_permute_fusion", "--moe-permute-fusion");
    megatron_core_moe_flag(p.moe_router_fusion, "parallel.moe_router_fusion", "--moe-router-fusion");
    if (p.moe_a2a_overlap && m.experts >= 2) {
        auto refuse = [&](const std::string& why, const std::string& allowed) {
            add("parallel.moe_a2a_overlap", "true " + why + "; allowed: " + allowed +
                                                " (Megatron's --overlap-moe-expert-parallel-comm requires it)");
        };
        if (job.has_layout() && p.ep < 2) refuse("with ep = " + s(p.ep), "ep ≥ 2, or false");
        if (job.has_layout() && p.pp > 1 && p.vpp < 2)
            refuse("with pp = " + s(p.pp) + " and no vpp", "vpp ≥ 2 when pp > 1, or false");
        if (p.recompute == Recompute::full) refuse("with recompute = \"full\"", "recompute \"none\" or \"selective\"");
        if (t.precision == Precision::fp32) refuse("with precision \"fp32\"", "precision \"bf16\" or \"fp16\"");
        if (p.moe_shared_expert_overlap)
            refuse("with moe_shared_expert_overlap = true", "one of the two overlaps");
        if (m.mtp_layers > 1) refuse("with mtp_layers = " + s(m.mtp_layers), "mtp_layers 0 or 1");
        if (p.schedule == PipelineSchedule::zb_h1 || p.schedule == PipelineSchedule::dualpipe)
            refuse(std::string("with schedule \"") + to_string(p.schedule) + "\"",
                   "schedule \"auto\", \"1f1b\" or \"interleaved\" (the combined 1F1B schedule)");
    }
    // hostov: CUDA graphs and static expert inputs — Megatron-core's preconditions
    // (transformer_config.py __post_init__, docs/user-guide/features/cuda_graph.md): a scope needs
    // an impl; full_iteration stands alone and is the local impl's (MCore FullCudaGraphWrapper);
    // moe_preprocess is captured with moe_router; a captured MoE MLP ("moe", the whole layer or
    // the whole step) needs static shapes — drop-and-pad, parallel.moe_pad_to_capacity — since the
    // dropless dispatcher copies the token counts to the host inside the layer.
    if (p.cuda_graph_impl != CudaGraphImpl::none || p.cuda_graph_scope != 0 || p.moe_pad_to_capacity) {
        std::string scope_words;
        for (const std::string& w : cuda_graph_scope_words(p.cuda_graph_scope))
            scope_words += (scope_words.empty() ? "[\"" : ", \"") + w + "\"";
        scope_words = scope_words.empty() ? "[]" : scope_words + "]";
        const bool graphs = p.cuda_graph_impl != CudaGraphImpl::none;
        const bool has_scope = p.cuda_graph_scope != 0;
        auto has = [&](uint32_t bit) { return (p.cuda_graph_scope & bit) != 0; };
        if ((graphs || has_scope) && !runs_megatron_core(t.framework))
            add(graphs ? "parallel.cuda_graph_impl" : "parallel.cuda_graph_scope",
                std::string("set with framework \"") + to_string(t.framework) +
                    "\"; allowed: only with framework \"megatron\" or \"nemo\" (Megatron-core's --cuda-graph-impl)");
        if (has_scope && !graphs)
            add("parallel.cuda_graph_scope", scope_words + " with cuda_graph_impl \"none\"; allowed: a scope only with "
                                             "cuda_graph_impl \"local\" or \"transformer_engine\"");
        if (has(kGraphFullIteration) && p.cuda_graph_scope != kGraphFullIteration)
            add("parallel.cuda_graph_scope", scope_words + "; allowed: \"full_iteration\" alone (it captures the whole step)");
        if (has(kGraphFullIteration) && p.cuda_graph_impl == CudaGraphImpl::transformer_engine)
            add("parallel.cuda_graph_scope", "[\"full_iteration\"] with cuda_graph_impl \"transformer_engine\"; allowed: "
                                             "full_iteration with cuda_graph_impl \"local\" (Megatron-core's FullCudaGraphWrapper)");
        if (has(kGraphMoePreprocess) && !has(kGraphMoeRouter))
            add("parallel.cuda_graph_scope", scope_words + "; allowed: \"moe_preprocess\" together with \"moe_router\"");
        if ((has(kGraphMoe) || has(kGraphMoeRouter) || has(kGraphMoePreprocess)) && m.experts < 2)
            add("parallel.cuda_graph_scope", scope_words + " for a dense model (experts = " + s(m.experts) +
                                             "); allowed: moe, moe_router, moe_preprocess only with experts ≥ 2");
        if (p.moe_pad_to_capacity && m.experts < 2)
            add("parallel.moe_pad_to_capacity", "true for a dense model (experts = " + s(m.experts) +
                                                    "); allowed: true only with experts ≥ 2");
        const bool captures_moe = graphs && (!has_scope || has(kGraphMoe) || has(kGraphFullIteration));
        if (captures_moe && m.experts >= 2 && !p.moe_pad_to_capacity)
            add("parallel.cuda_graph_scope",
                scope_words + (has_scope ? std::string() : std::string(" (the whole layer)")) +
                    " captures the MoE layer of a dropless MoE model, whose token counts reach the host inside "
                    "the layer; allowed: parallel.moe_pad_to_capacity = true (static expert inputs), or a scope "
                    "without moe / full_iteration, e.g. [\"attn\", \"moe_router\", \"moe_preprocess\"]");
    }
    // moefp8pad: the router's FP8 padding changes the routing map of an MoE model only.
    if (p.moe_router_padding_for_fp8 && m.experts < 2)
        add("parallel.moe_router_padding_for_fp8",
            "true for a dense model (experts = " + s(m.experts) + "); allowed: true only with experts ≥ 2");
    // deepep: group-limited routing (Megatron-core router.py group_limited_topk): num_groups
    // equal groups of experts, group_topk of them per token, top_k experts among those.
    if (m.moe_router_num_groups > 0 || m.moe_router_group_topk > 0) {
        const int g = m.moe_router_num_groups, gk = m.moe_router_group_topk;
        if (m.experts < 2)
            add(g > 0 ? "model.moe_router_num_groups" : "model.moe_router_group_topk",
                "set for a dense model (experts = " + s(m.experts) + "); allowed: 0 unless experts ≥ 2");
        else if (g < 1 || gk < 1)
            add(g < 1 ? "model.moe_router_num_groups" : "model.moe_router_group_topk",
                "missing: moe_router_num_groups = " + s(g) + ", moe_router_group_topk = " + s(gk) +
                    "; allowed: both ≥ 1 (group-limited routing) or both 0");
        else if (m.experts % g != 0)
            add("model.moe_router_num_groups", "got " + s(g) + ", which does not divide experts = " + s(m.experts) +
                                                   "; allowed: " + divisors_of(m.experts));
        else if (gk > g)
            add("model.moe_router_group_topk", "got " + s(gk) + " with moe_router_num_groups = " + s(g) +
                                                   "; allowed: 1 .. " + s(g));
        else if ((long long)gk * (m.experts / g) < m.top_k)
            add("model.moe_router_group_topk", "got " + s(gk) + ": " + s(gk) + " groups of " + s(m.experts / g) +
                                                   " experts hold fewer than top_k = " + s(m.top_k) +
                                                   "; allowed: at least " + s((m.top_k + m.experts / g - 1) / (m.experts / g)));
    }
    // recomp: turning off the asynchronous dgrad all-reduce is Megatron-LM's flag; the other
    // frameworks' TP backward is modelled without that overlap whatever the key says.
    if (!p.async_tensor_model_parallel_allreduce && t.framework != Framework::megatron)
        add("parallel.async_tensor_model_parallel_allreduce",
            std::string("false with framework \"") + to_string(t.framework) +
                "\"; allowed: false only with framework \"megatron\" (Megatron-LM's "
                "--no-async-tensor-model-parallel-allreduce)");
    // tritonfa: a flash kernel is named only where flash attention runs.
    if (t.flash_kernel != FlashKernel::by_date && !t.flash_attention)
        add("training.flash_attention_kernel",
            std::string("\"") + to_string(t.flash_kernel) +
                "\" with flash_attention = false; allowed: \"by-date\" (or leave it out) without flash attention, "
                "\"flash-attn-1\", \"triton\" or \"flash-attn-2\" only with flash_attention = true");
    // papers: the fused scale-mask-softmax exists only where the scores are materialised.
    if (!t.masked_softmax_fusion && t.flash_attention)
        add("training.masked_softmax_fusion",
            "false with flash_attention = true; allowed: false only with flash_attention = false (flash "
            "attention never materialises the scores the softmax fusion works on)");
    // recmod: recompute_modules is Megatron-core's list for recompute_granularity = selective
    // (transformer_config.py __post_init__ checks the words and the model features they need).
    if (p.recompute_modules != kRecomputeCoreAttn) {
        const std::string given = [&] {
            std::string w;
            for (const std::string& word : recompute_module_words(p.recompute_modules))
                w += (w.empty() ? "\"" : ", \"") + word + "\"";
            return "[" + w + "]";
        }();
        const auto has = [&](uint32_t bit) { return (p.recompute_modules & bit) != 0; };
        if (p.recompute_modules == 0)
            add("parallel.recompute_modules",
                "[] (nothing to recompute); allowed: a non-empty list (recompute = \"none\" recomputes nothing)");
        else if (p.recompute != Recompute::selective)
            add("parallel.recompute_modules",
                given + " with recompute = \"" + std::string(to_string(p.recompute)) +
                    "\"; allowed: only with recompute = \"selective\" (Megatron-LM --recompute-granularity selective)");
        else if (p.recompute_style != RecomputeStyle::megatron)
            add("parallel.recompute_modules",
                given + " with recompute_style = \"" + std::string(to_string(p.recompute_style)) +
                    "\"; allowed: only with recompute_style = \"megatron\" (the module list is Megatron-core's; "
                    "torchtitan's op-level checkpointing has no modules)");
        if (has(kRecomputeMlaUpProj) && !m.mla())
            add("parallel.recompute_modules",
                given + " names \"mla_up_proj\" but the model has no multi-latent attention (kv_lora_rank = 0); "
                        "allowed: mla_up_proj only with kv_lora_rank > 0");
        if ((has(kRecomputeMoe) || has(kRecomputeMoeAct)) && m.experts <= 1)
            add("parallel.recompute_modules",
                given + " names \"moe\" / \"moe_act\" but the model is dense (experts = " + s(m.experts) +
                    "); allowed: moe and moe_act only with experts > 1");
        if (has(kRecomputeSharedExperts) && (m.experts <= 1 || m.shared_expert_ffn_hidden <= 0))
            add("parallel.recompute_modules",
                given + " names \"shared_experts\" but the model has no shared experts; allowed: shared_experts "
                        "only with experts > 1 and shared_expert_ffn_hidden > 0");
        if (has(kRecomputeMlp) && m.experts > 1 && m.first_dense_layers <= 0)
            add("parallel.recompute_modules",
                given + " names \"mlp\" but every layer is an MoE layer (Megatron recomputes only dense MLPs "
                        "with it); allowed: mlp with a dense model or first_dense_layers > 0 (\"moe\" recomputes "
                        "the MoE layer)");
        if (job.estimate.activation_profile == ActivationProfile::ptd_engine)
            add("parallel.recompute_modules",
                given + " with estimate.activation_profile = \"ptd-engine\"; allowed: only with the \"megatron\" "
                        "profile (the bundled engine's buffer list has no Megatron-core modules)");
        if ((has(kRecomputeMoeAct) || has(kRecomputeLayernorm)) && t.fp8 == Fp8Recipe::delayed)
            add("parallel.recompute_modules",
                given + " names \"moe_act\" / \"layernorm\" with fp8 = \"delayed\"; allowed: those with "
                        "another FP8 recipe or none (Megatron-core: delayed scaling does not support them)");
    }
    // menorm: a recomputed norm (recompute_modules "layernorm") runs again from its input, which a
    // memory-efficient norm does not keep; Megatron-core's layernorm module recomputes the TE norm,
    // and --memory-efficient-layer-norm is the local (Apex) norm's option.
    if (job.estimate.memory_efficient_norm && p.recompute == Recompute::selective &&
        p.recompute_style == RecomputeStyle::megatron && (p.recompute_modules & kRecomputeLayernorm) != 0)
        add("estimate.memory_efficient_norm",
            "true with parallel.recompute_modules naming \"layernorm\"; allowed: one of the two (the recomputed "
            "norm needs the input a memory-efficient norm frees)");
    // Llama 3 §3.3.2: a chunk's received input can be freed only where nothing in its backward
    // reads it: under full recompute it is the first layer's checkpoint, a recomputed norm
    // ("layernorm") runs again from it, and torch.distributed.pipelining (torchtitan) keeps one
    // receive buffer per micro-batch for the whole run (stage.py _prepare_forward_infra).
    if (job.estimate.deallocate_pipeline_inputs) {
        if (p.recompute == Recompute::full)
            add("estimate.deallocate_pipeline_inputs",
                "true with parallel.recompute = \"full\"; allowed: recompute \"none\" or \"selective\" (a fully "
                "recomputed layer runs again from its input, the chunk's received input)");
        else if (p.recompute == Recompute::selective && p.recompute_style == RecomputeStyle::megatron &&
                 (p.recompute_modules & kRecomputeLayernorm) != 0)
            add("estimate.deallocate_pipeline_inputs",
                "true with parallel.recompute_modules naming \"layernorm\"; allowed: one of the two (the recomputed "
                "norm needs the chunk's input)");
        if (t.framework == Framework::torchtitan)
            add("estimate.deallocate_pipeline_inputs",
                "true with training.framework = \"torchtitan\"; allowed: false there (torch.distributed.pipelining "
                "keeps every micro-batch's receive buffer for the run)");
    }
    // papers: the saved layer inputs are split over the TP group, so it takes full recompute and
    // tp > 1 (Megatron-LM arguments.py asserts both); torchtitan and PyTorch FSDP have no such option.
    if (p.distribute_saved_activations) {
        if (p.recompute != Recompute::full || p.tp < 2)
            add("parallel.distribute_saved_activations",
                "true with recompute = \"" + std::string(to_string(p.recompute)) + "\" and tp = " + s(p.tp) +
                    "; allowed: true only with recompute = \"full\" and tp > 1 (it splits each checkpointed "
                    "layer input over the TP group)");
        if (runs_pytorch_modules(t.framework))
            add("parallel.distribute_saved_activations",
                std::string("true with framework \"") + to_string(t.framework) +
                    "\"; allowed: true only with framework \"megatron\" (--distribute-saved-activations) or "
                    "\"deepspeed\" (activation_checkpointing.partition_activations)");
    }

    // Precision support on the chosen GPU.
    if (t.precision != Precision::fp32 && c.gpu.peak_tflops(t.precision) <= 0)
        add("training.precision", std::string(job.origin.precision_defaulted ? "defaulted to \"" : "got \"") +
                                      to_string(t.precision) + "\", but gpu \"" + c.gpu.name +
                                      "\" has no " + to_string(t.precision) + " support; allowed on this GPU: fp32" +
                                      (c.gpu.fp16_tflops > 0 ? ", fp16" : "") + (c.gpu.bf16_tflops > 0 ? ", bf16" : ""));

    // FP8 (issue 15 point 3): an autocast on top of bf16 mixed precision, on FP8 tensor cores.
    if (t.fp8 != Fp8Recipe::none) {
        const std::string recipe = std::string("got \"") + to_string(t.fp8) + "\"";
        if (t.precision != Precision::bf16)
            add("training.fp8", recipe + " with precision \"" + to_string(t.precision) +
                                    "\": FP8 GEMMs run inside bf16 mixed precision (bf16 weights and activations "
                                    "around them); allowed: precision = \"bf16\", or fp8 = \"none\"");
        if (c.gpu.fp8_tflops <= 0)
            add("training.fp8", recipe + ", but gpu \"" + c.gpu.name + "\"" +
                                    (c.gpu.description.empty() ? std::string() : " (" + c.gpu.description + ")") +
                                    " has no FP8 tensor cores (fp8_tflops = 0; FP8 needs Hopper, Ada or newer); "
                                    "allowed on this GPU: fp8 = \"none\"");
        else if (t.fp8 == Fp8Recipe::mxfp8 && !gpu_has_mxfp8(c.gpu))
            add("training.fp8", recipe + ", but gpu \"" + c.gpu.name +
                                    "\" has no MXFP8 (block-scaled) tensor cores, which need NVIDIA Blackwell "
                                    "(B200, GB200); allowed on this GPU: \"delayed\", \"current\", \"tensorwise\", "
                                    "\"rowwise\", \"none\"");
        const long long bf16_layers = (long long)t.fp8_bf16_first_layers + t.fp8_bf16_last_layers;
        if (bf16_layers >= m.layers && m.layers > 0)
            add("training.fp8_bf16_first_layers",
                "fp8_bf16_first_layers + fp8_bf16_last_layers = " + s(bf16_layers) + " for a model of " +
                    s(m.layers) + " layers: no layer would run in FP8; allowed: a sum below layers");
        if (bf16_layers > 0 && t.fp8 == Fp8Recipe::delayed)
            add("training.fp8_bf16_first_layers",
                "bf16 first/last layers with fp8 = \"delayed\": Megatron-LM refuses this (delayed scaling's amax "
                "reduction assumes one FP8 region per step); allowed: fp8 = \"current\" or \"mxfp8\", or 0 "
                "bf16 layers");
    }

    // gb200: the NVLink domain is whole hosts; a written one also fits the cluster and is filled
    // evenly (the collective model places every group alike). A cluster preset's rack is the
    // hardware's: the job fills as much of it as it evenly can (ClusterSpec::job_nvlink_domain).
    if (c.nvlink_domain > 0 && c.gpus_per_node > 0) {
        const std::string from = job.origin.nvlink_domain_given
                                     ? ""
                                     : " (from " + job.origin.network_source + ")";
        if (c.nvlink_domain % c.gpus_per_node != 0)
            add("cluster.nvlink_domain", "got " + s(c.nvlink_domain) + from + " with gpus_per_node " +
                                             s(c.gpus_per_node) +
                                             ": an NVLink domain is made of whole nodes; allowed: a multiple of " +
                                             s(c.gpus_per_node));
        else if (job.origin.nvlink_domain_given && c.nvlink_domain > c.world_size())
            add("cluster.nvlink_domain", "got " + s(c.nvlink_domain) + ", more than the cluster's " +
                                             s(c.world_size()) + " GPUs (" + s(c.nodes) + " nodes × " +
                                             s(c.gpus_per_node) + "); allowed: a multiple of gpus_per_node up to " +
                                             s(c.world_size()));
        else if (job.origin.nvlink_domain_given && c.world_size() % c.nvlink_domain != 0) {
            std::string fits;
            for (long long d = c.gpus_per_node; d <= c.world_size(); d += c.gpus_per_node)
                if (c.world_size() % d == 0) {
                    if (fits.size() > 120) {
                        fits += ", ...";
                        break;
                    }
                    fits += (fits.empty() ? "" : ", ") + s(d);
                }
            add("cluster.nvlink_domain", "got " + s(c.nvlink_domain) + ": the cluster's " + s(c.world_size()) +
                                             " GPUs do not fill domains of " + s(c.nvlink_domain) +
                                             " evenly (ranks fill hosts, then domains; every domain must hold the "
                                             "same ranks); allowed: a multiple of gpus_per_node dividing " +
                                             s(c.world_size()) + ": " + fits);
        }
    }

    // Hosts.
    if (!c.hosts.empty() && (int)c.hosts.size() != c.nodes)
        add("cluster.hosts", "lists " + s((long long)c.hosts.size()) + " hosts for " + s(c.nodes) +
                                 " nodes; allowed: exactly one host per node, or none");
    return out;
}

JobSpec default_job(const PresetCatalog& presets) {
    JobSpec job;
    const ModelSpec* model = presets.find_model("llama2-7b");
    const GpuSpec* gpu = presets.find_gpu("h100-sxm");
    assert(model && gpu && "default job presets missing from the catalog");
    job.model = *model;
    job.origin.model_preset = model->name;
    job.origin.model_base = *model;  // so the file it saves names the presets (issue 33)
    job.origin.file = "<default>";
    job.cluster.nodes = 4;
    job.cluster.gpus_per_node = 8;
    job.cluster.gpu = *gpu;
    job.origin.gpu_preset = gpu->name;
    job.origin.gpu_base = *gpu;
    job.cluster.inter_gbps = 50.0;  // one 400 Gb/s NIC per GPU, as on DGX H100
    job.cluster.nics_per_node = 8;  // nccl: the DGX H100 network (assets/presets/clusters.toml)
    job.cluster.nvls = true;
    job.origin.network_source = "dgx-h100, the default for gpu h100-sxm";
    // The host CPU of that node, as the loader takes it from the default cluster preset: the
    // job then saves as presets and reads back the same (issue 33).
    if (const ClusterPreset* net = presets.default_cluster_for_gpu(gpu->name)) {
        job.cluster.cpu_adam_params_per_s = net->cpu_adam_params_per_s;
        job.cluster.host_op_us = net->host_op_us;
    }
    job.parallel.tp = 4;
    job.parallel.pp = 2;
    job.parallel.zero = 1;
    job.parallel.sequence_parallel = true;
    job.parallel.recompute = Recompute::selective;
    job.training.micro_batch = 1;
    job.training.global_batch = 256;
    job.origin.global_batch_given = true;
    derive_job_defaults(job);
    return job;
}

JobSpec tiny_local_job(const PresetCatalog& presets) {
    JobSpec job;
    const ModelSpec* model = presets.find_model("tiny-gpt");
    const GpuSpec* gpu = presets.find_gpu("cpu");
    assert(model && gpu && "tiny job presets missing from the catalog");
    job.model = *model;
    job.origin.model_preset = model->name;
    job.origin.model_base = *model;
    job.origin.file = "<tiny-local>";
    job.cluster.nodes = 1;
    job.cluster.gpus_per_node = 4;
    job.cluster.gpu = *gpu;
    job.origin.gpu_preset = gpu->name;
    job.origin.gpu_base = *gpu;
    job.parallel.tp = 2;
    job.parallel.pp = 2;
    job.training.precision = Precision::fp32;
    job.training.micro_batch = 2;
    job.training.global_batch = 8;
    job.origin.global_batch_given = true;
    job.training.steps = 20;
    job.training.lr = 1e-3;
    job.training.min_lr = 1e-4;
    job.launch.mode = LaunchMode::local;
    job.origin.activation_profile_defaulted = true;  // as tiny-local.toml, which does not write it
    derive_job_defaults(job);
    return job;
}

// bits: Megatron-LM's refusal of an interleaved layout (megatron_runs_interleaved). The
// messages quote Megatron-core's schedules.py (forward_backward_pipelining_with_interleaving,
// core_r0.10 and later; core_r0.8/0.9 asked for m divisible by pp instead).
std::optional<Diagnostic> megatron_interleaved_refusal(const JobSpec& job) {
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    if (p.pp < 2 || p.vpp < 2 || t.micro_batch < 1 || p.dp < 1 || t.global_batch < 1) return std::nullopt;
    if (effective_schedule(p.schedule, p.vpp) != PipelineSchedule::interleaved) return std::nullopt;
    const long long per_mb = (long long)t.micro_batch * p.dp;  // sequences per micro-batch step
    const long long m = t.global_batch / per_mb;
    if (megatron_runs_interleaved(p.pp, p.vpp, m, p.microbatch_group_size)) return std::nullopt;
    auto s = [](long long v) { return std::to_string(v); };
    const bool n_given = p.microbatch_group_size > 0;
    const long long n = p.mb_group_size();
    const std::string micro = s(m) + " micro-batch" + (m == 1 ? "" : "es") + " per step (global_batch " +
                              s(t.global_batch) + " / (micro_batch " + s(t.micro_batch) + " · dp " + s(p.dp) + "))";
    const std::string n_words = n_given ? "N = " + s(n) : "N = pp = " + s(n) + " (parallel.microbatch_group_size left out)";
    std::string key, msg;
    if (n < p.pp || n > m) {
        // Megatron: ValueError "The number of contiguous micro-batches in a virtual pipeline
        // stage should range in [PP=p , M=m]".
        const long long least = per_mb * std::max<long long>(p.pp, n);
        key = n_given && (n < p.pp || m >= p.pp) ? "parallel.microbatch_group_size" : "training.global_batch";
        msg = (key == "training.global_batch" ? "gives " + micro + " with pp = " + s(p.pp) + ", vpp = " + s(p.vpp) + " and " + n_words
                                              : "got " + s(n) + " with pp = " + s(p.pp) + ", vpp = " + s(p.vpp) + " and " + micro) +
              ": Megatron-LM's interleaved schedule refuses it (schedules.py: \"The number of contiguous micro-batches in a "
              "virtual pipeline stage should range in [PP=" + s(p.pp) + " , M=" + s(m) + "]\"; before Megatron-core 0.10: "
              "\"number of microbatches (" + s(m) + ") is not divisible by pipeline-model-parallel-size (" + s(p.pp) +
              ")\"); PTD simulates it, Megatron-LM does not run it; allowed for Megatron-LM: pp ≤ N ≤ micro-batches per step" +
              (key == "parallel.microbatch_group_size"
                   ? ": N from " + s(p.pp) + " to " + s(m) + " (--set parallel.microbatch_group_size=" + s(p.pp) + ")"
                   : "; fix: a global batch of at least " + s(least) + " = micro_batch · dp · " +
                         s(least / per_mb) + ", a multiple of it (--set training.global_batch=" + s(least) +
                         "), a smaller micro_batch or dp, or vpp = 1 (--set parallel.vpp=1)");
    } else {
        // Megatron: RuntimeError "The remainder of M (the total micro-batches) divided by N ...
        // should be 0, or larger than or equal to the pipeline-parallel size, but it is r".
        key = n_given ? "parallel.microbatch_group_size" : "training.global_batch";
        msg = (n_given ? "got " + s(n) + " with " + micro : "gives " + micro + " with " + n_words) +
              ": the last group holds " + s(m % n) + " < pp = " + s(p.pp) +
              " micro-batches; Megatron-LM's interleaved schedule refuses it (schedules.py: \"The remainder of M (the "
              "total micro-batches) divided by N (number of contiguous micro-batches in a virtual pipeline stage) should "
              "be 0, or larger than or equal to the pipeline-parallel size, but it is " + s(m % n) + "\"); allowed for "
              "Megatron-LM: " + (n_given ? "N dividing " + s(m) + ", or leaving a last group of at least pp"
                                         : "micro-batches per step a multiple of pp (--set training.global_batch=" +
                                               s(per_mb * (m / p.pp + 1) * p.pp) + ")");
    }
    return Diagnostic{job.where(key), key, std::move(msg)};
}

}  // namespace ptd
