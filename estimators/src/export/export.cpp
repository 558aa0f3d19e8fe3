// export.cpp — JobSpec → Megatron-LM arguments, DeepSpeed ds_config JSON, a torchtitan
// Python config module, or the TOML of torchtitan v0.2.x.
// Option names were checked against the frameworks' sources (docs/cli.md, "ptd export"):
//   Megatron-LM  megatron/training/arguments.py, core/transformer/transformer_config.py and
//                pipeline_parallel_layer_layout.py (main, d98e8a6, 2026-08)
//   DeepSpeed    deepspeed/runtime/config.py, engine.py, zero/config.py, lr_schedules.py
//                (master, edaa722, 2026-08)
//   torchtitan   Python config: torchtitan/trainer.py, config/configs.py, components/optimizer,
//                distributed/activation_checkpoint.py (main, b5bcd76, 2026-08);
//                TOML: torchtitan/config/job_config.py of v0.2.2 (73a0e69, identical at
//                238fa99, the last commit before the Python config refactor)
// A setting the target cannot express is an error when the run would be a different
// training run (ZeRO-2/3 in Megatron, fp16 in torchtitan), otherwise a note.
#include "ptd/export.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <optional>

#include <nlohmann/json.hpp>

#include "job_toml_internal.h"
#include "ptd/model_stats.h"

namespace ptd {

const char* to_string(ExportFormat f) {
    switch (f) {
        case ExportFormat::megatron: return "megatron";
        case ExportFormat::deepspeed: return "deepspeed";
        case ExportFormat::torchtitan: return "torchtitan";
        case ExportFormat::torchtitan_toml: return "torchtitan-toml";
    }
    return "?";
}

Result<ExportFormat> parse_export_format(std::string_view word) {
    std::vector<std::string> words;
    for (ExportFormat f : kExportFormats) {
        if (word == to_string(f)) return f;
        words.push_back(to_string(f));
    }
    std::string hint = closest_match(word, words);
    return fail(SourceLoc{}, "--format",
                "got \"" + std::string(word) + "\"" + (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)") +
                    "; allowed: megatron, deepspeed, torchtitan, torchtitan-toml");
}

std::string shortest_decimal(double v) {
    // The shortest digits that read back to v, laid out as Python's repr does: fixed
    // notation for decimal exponents -4 .. 15 (0.0003, 1500000.0 without ".0"), else
    // scientific (1e-05, 1e+16).
    char buf[400];
    auto sci = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    std::string s(buf, sci.ptr);
    const size_t e = s.find('e');
    const int exponent = e == std::string::npos ? 0 : std::atoi(s.c_str() + e + 1);
    if (exponent < -4 || exponent >= 16 || !std::isfinite(v)) return s;
    auto fixed = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
    return std::string(buf, fixed.ptr);
}

double decimal_ratio(double numerator, double denominator) {
    if (denominator == 0) return 0.0;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.15g", numerator / denominator);
    return std::strtod(buf, nullptr);
}

namespace {

std::string num(double v) { return shortest_decimal(v); }

// A Python float literal (always with '.' or an exponent).
std::string py_float(double v) {
    std::string s = shortest_decimal(v);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
}

// SGD means SGD with momentum here: the estimate counts one fp32 momentum buffer per
// parameter (docs/estimators.md), Megatron-LM's --sgd-momentum defaults to 0.9, and
// DeepSpeed's "SGD" is torch.optim.SGD whose momentum defaults to 0 — so every export
// writes this value.
constexpr double kSgdMomentum = 0.9;

std::unexpected<Error> job_error(const JobSpec& job, const std::string& key, std::string message) {
    return fail(job.where(key), key, std::move(message));
}

// Layers of each model chunk in model order (chunk k = virtual stage k; Megatron puts it on
// pipeline rank k mod pp), from layers_per_stage or the even split.
std::vector<int> chunk_layers(const JobSpec& job) {
    const ParallelSpec& p = job.parallel;
    const int chunks = p.pp * p.vpp;
    if (p.layers_per_stage.size() == (size_t)chunks) return p.layers_per_stage;
    // l405: the embedding / loss counted as a layer each (validate_job: the count divides).
    if (p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split) {
        const int slots = job.model.layers + (p.account_for_embedding_in_pipeline_split ? 1 : 0) +
                          (p.account_for_loss_in_pipeline_split ? 1 : 0);
        std::vector<int> out((size_t)chunks, slots / chunks);
        if (p.account_for_embedding_in_pipeline_split) --out.front();
        if (p.account_for_loss_in_pipeline_split) --out.back();
        return out;
    }
    std::vector<int> out((size_t)chunks);
    for (int k = 0; k < chunks; ++k)
        out[(size_t)k] = p.layers_per_stage.empty() ? job.model.layers / chunks
                                                     : p.layers_per_stage[(size_t)(k % p.pp)] / p.vpp;
    return out;
}

// Layers on each pipeline stage (all its chunks).
std::vector<int> stage_layers(const JobSpec& job) {
    std::vector<int> chunks = chunk_layers(job), out((size_t)job.parallel.pp, 0);
    for (size_t k = 0; k < chunks.size(); ++k) out[k % out.size()] += chunks[k];
    return out;
}

// gb200: a multi-node NVLink domain (GB200 NVL72) has no framework setting: NCCL finds it by
// itself (MNNVL, NCCL src/mnnvl.cc: NCCL >= 2.25, cuMem and IMEX channels). "" for one node.
std::string nvlink_domain_note(const JobSpec& job, std::string_view framework) {
    const ClusterSpec& c = job.cluster;
    if (c.job_nvlink_domain() <= c.gpus_per_node) return "";
    return "cluster.nvlink_domain: NVLink domain " + describe_nvlink_domain(job) + "; " + std::string(framework) +
           " has no setting for it: NCCL uses it by itself (multi-node NVLink, MNNVL: NCCL >= 2.25 with "
           "NCCL_CUMEM_ENABLE=1 and an IMEX channel, NCCL_MNNVL_ENABLE=1 to insist). The estimate assumes the "
           "launcher fills nodes, then domains, in rank order (e.g. SLURM --segment = nodes per domain)";
}

// The job's rank order with size-1 dimensions dropped, e.g. "tp-dp-pp".
std::string effective_order(const JobSpec& job, std::string_view order) {
    const ParallelSpec& p = job.parallel;
    std::string out;
    size_t start = 0;
    while (start <= order.size()) {
        size_t dash = order.find('-', start);
        std::string_view tok = order.substr(start, dash == std::string_view::npos ? std::string_view::npos : dash - start);
        int degree = tok == "tp" ? p.tp : tok == "pp" ? p.pp : tok == "dp" ? p.dp : tok == "cp" ? p.cp : 1;  // ep lives inside dp·cp
        if (degree > 1) out += (out.empty() ? "" : "-") + std::string(tok);
        if (dash == std::string_view::npos) break;
        start = dash + 1;
    }
    return out;
}

// ---- Megatron-LM ------------------------------------------------------------------------

// zb: ZB-H1 and DualPipe run in neither stock Megatron-LM, DeepSpeed nor torchtitan. The
// refusal names what can run the plan: sail-sg/zero-bubble-pipeline-parallelism (a fork of
// Megatron-LM with ZB-H1) and deepseek-ai/DualPipe (a PyTorch schedule to build a trainer
// on). torchtitan's schedules (PyTorch's get_schedule_class: "1F1B", "Interleaved1F1B",
// "GPipe", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV") hold two or
// more stages per rank for the zero-bubble and DualPipe kinds: other schedules than ZB-H1
// (one stage per rank) and DualPipe (two mirrored stages, 2× parameters).
std::optional<std::unexpected<Error>> unsupported_schedule(const JobSpec& job, const char* framework) {
    const PipelineSchedule s = job.parallel.pp > 1 ? effective_schedule(job.parallel.schedule, job.parallel.vpp)
                                                   : PipelineSchedule::one_f_one_b;
    if (s != PipelineSchedule::zb_h1 && s != PipelineSchedule::dualpipe) return std::nullopt;
    const std::string runner = s == PipelineSchedule::zb_h1
        ? "ZB-H1 runs in sail-sg/zero-bubble-pipeline-parallelism (a Megatron-LM fork); torchtitan's "
          "\"ZBVZeroBubble\" / \"InterleavedZeroBubble\" are other (two-stage-per-rank) schedules"
        : "DualPipe runs with deepseek-ai/DualPipe (a PyTorch schedule, no trainer); torchtitan's "
          "\"DualPipeV\" is its V-shaped variant (one copy of the parameters)";
    return job_error(job, "parallel.schedule",
                     std::string("got \"") + to_string(s) + "\"; " + framework + " cannot run it. " + runner +
                         "; allowed for this format: \"1f1b\", \"interleaved\" (vpp ≥ 2) or \"auto\"");
}

// oom4: optimizer states other than fp32 (training.main_params_dtype, exp_avg_dtype,
// exp_avg_sq_dtype), for a framework without a key for them: DeepSpeed's and torchtitan's
// optimizers keep fp32 master weights and moments.
std::optional<std::unexpected<Error>> unsupported_state_dtypes(const JobSpec& job, const char* framework) {
    const TrainingSpec& t = job.training;
    const std::pair<const char*, StateDtype> states[] = {{"training.main_params_dtype", t.main_params_dtype},
                                                         {"training.exp_avg_dtype", t.exp_avg_dtype},
                                                         {"training.exp_avg_sq_dtype", t.exp_avg_sq_dtype}};
    const char* key = nullptr;
    StateDtype v = StateDtype::fp32;
    for (const auto& [k, dtype] : states)
        if (!key && dtype != StateDtype::fp32) key = k, v = dtype;
    if (!key) return std::nullopt;
    return job_error(job, key,
                     std::string("got \"") + to_string(v) + "\"; " + framework +
                         " keeps fp32 master weights and Adam moments (lower-precision optimizer states are Megatron-LM's "
                         "--use-precision-aware-optimizer or NeMo 1.x's Apex DistributedFusedAdam dtype); allowed for this "
                         "format: \"fp32\"");
}

// recmod: Megatron-core's per-module selective recompute (parallel.recompute_modules other than
// the default ["core_attn"]) for a framework without it: DeepSpeed's activation checkpointing
// wraps whole layers (deepspeed.checkpointing.checkpoint), torchtitan's ActivationCheckpoint
// is full, per-layer or op-level (selective_ac_option); neither names modules.
std::optional<std::unexpected<Error>> unsupported_recompute_modules(const JobSpec& job, const char* framework) {
    const ParallelSpec& p = job.parallel;
    if (p.recompute != Recompute::selective || p.recompute_modules == kRecomputeCoreAttn) return std::nullopt;
    std::string words;
    for (const std::string& w : recompute_module_words(p.recompute_modules)) words += (words.empty() ? "\"" : ", \"") + w + "\"";
    return job_error(job, "parallel.recompute_modules",
                     "got [" + words + "]; " + framework +
                         " has no per-module selective recompute (it is Megatron-core's --recompute-modules); allowed "
                         "for this format: [\"core_attn\"] (the default), or recompute = \"full\" / \"none\"");
}

Result<ExportOutput> export_megatron(const JobSpec& job) {
    if (auto bad = unsupported_schedule(job, "Megatron-LM")) return *bad;  // zb
    const ModelSpec& m = job.model;
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    const EstimateSpec& e = job.estimate;
    ExportOutput out;
    std::vector<std::string> args;
    auto arg = [&](std::string flag, std::string value = {}) {
        args.push_back(value.empty() ? flag : flag + " " + value);
    };
    auto I = [](long long v) { return std::to_string(v); };

    if (p.zero >= 2)
        return job_error(job, "parallel.zero",
                         "got " + I(p.zero) + "; Megatron-LM has no ZeRO-2/3 (it shards only optimizer state, with "
                         "--use-distributed-optimizer); allowed for --format megatron: zero = 0 or 1, or set "
                         "distributed_optimizer = true (--set parallel.zero=0 --set parallel.distributed_optimizer=true)");

    // Parallelism.
    arg("--tensor-model-parallel-size", I(p.tp));
    arg("--pipeline-model-parallel-size", I(p.pp));
    if (p.pp > 1) {
        // Megatron-LM's three ways to split layers over pipeline stages, simplest first
        // (validate_args and TransformerConfig's checks in comments):
        //  - even chunks: nothing (layers % pp == 0), or --num-layers-per-virtual-pipeline-stage
        //    with vpp > 1 (layers/pp divisible by it);
        //  - vpp = 1, every stage but the first and last equal, each written one > 0:
        //    --decoder-first/last-pipeline-num-layers (the rest split evenly);
        //  - anything else: --pipeline-model-parallel-layout, one "|"-separated entry per model
        //    chunk in model order ("E" embedding first, "L" loss last, "t" per layer), which
        //    Megatron maps to pipeline rank k mod pp, virtual stage k / pp — our chunk order.
        const std::vector<int> chunks = chunk_layers(job), stages = stage_layers(job);
        const bool even_chunks = std::adjacent_find(chunks.begin(), chunks.end(), std::not_equal_to<>()) == chunks.end();
        const int n = (int)stages.size();
        const std::vector<int> middle(stages.begin() + 1, stages.end() - 1);
        const bool middle_even = std::adjacent_find(middle.begin(), middle.end(), std::not_equal_to<>()) == middle.end();
        const int mid = middle.empty() ? -1 : middle.front();
        const bool first_last_fits = p.vpp == 1 && middle_even && stages.front() > 0 && stages.back() > 0 && mid != 0;
        const bool accounted = p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split;
        if (accounted) {
            // l405: Megatron's own flags (arguments.py): layers + embedding + loss split evenly
            // into chunks of --num-layers-per-virtual-pipeline-stage.
            if (p.account_for_embedding_in_pipeline_split) arg("--account-for-embedding-in-pipeline-split");
            if (p.account_for_loss_in_pipeline_split) arg("--account-for-loss-in-pipeline-split");
            if (p.vpp > 1)
                arg("--num-layers-per-virtual-pipeline-stage",
                    I((m.layers + (p.account_for_embedding_in_pipeline_split ? 1 : 0) +
                       (p.account_for_loss_in_pipeline_split ? 1 : 0)) / ((long long)p.pp * p.vpp)));
        } else if (even_chunks && chunks.front() > 0) {
            if (p.vpp > 1) arg("--num-layers-per-virtual-pipeline-stage", I(chunks.front()));
        } else if (first_last_fits) {
            if (n == 2 || stages.front() != mid) arg("--decoder-first-pipeline-num-layers", I(stages.front()));
            if (n == 2 || stages.back() != mid) arg("--decoder-last-pipeline-num-layers", I(stages.back()));
        } else {
            std::string layout;
            for (size_t k = 0; k < chunks.size(); ++k) {
                if (k) layout += '|';
                if (k == 0) layout += 'E';
                if (chunks[k] == 1) layout += 't';
                else if (chunks[k] > 1) layout += "t*" + I(chunks[k]);
                // mlaio: pipeline_parallel_layer_layout.py validate_layer_layout counts "m" (MTP)
                // against --mtp-num-layers, after every decoder layer, in the last chunk.
                if (k + 1 == chunks.size() && m.mtp_layers > 0) layout += m.mtp_layers == 1 ? "m" : "m*" + I(m.mtp_layers);
                if (k + 1 == chunks.size()) layout += 'L';
            }
            arg("--pipeline-model-parallel-layout", "\"" + layout + "\"");
        }
    }
    // bits: the interleaved layouts PTD simulates but Megatron-LM refuses (fewer micro-batches
    // per step than the group size N, default pp; job_spec.h megatron_runs_interleaved).
    if (auto refused = megatron_interleaved_refusal(job)) return std::unexpected(Error(std::move(*refused)));
    if (p.pp > 1 && p.vpp > 1 && p.microbatch_group_size > 0) {
        // l405: schedules.py (forward_backward_pipelining_with_interleaving) raises for a group
        // size outside [pp, micro-batches] and for a last group smaller than pp.
        const long long mbs = t.global_batch / std::max(1LL, (long long)t.micro_batch * p.dp);
        const long long n = p.microbatch_group_size;
        if (n < p.pp || n > mbs)
            return job_error(job, "parallel.microbatch_group_size",
                             "got " + I(n) + "; Megatron-LM's interleaved schedule needs pp ≤ N ≤ micro-batches per step; "
                             "allowed for --format megatron: " + I(p.pp) + " to " + I(mbs));
        if (mbs % n != 0 && mbs % n < p.pp)
            return job_error(job, "parallel.microbatch_group_size",
                             "got " + I(n) + " with " + I(mbs) + " micro-batches per step: the last group holds " + I(mbs % n) +
                                 " < pp = " + I(p.pp) + " (Megatron-LM raises: dependency bubbles); allowed for --format "
                                 "megatron: N dividing " + I(mbs) + ", or leaving a last group of at least pp");
        if (n != p.pp) arg("--microbatch-group-size-per-virtual-pipeline-stage", I(n));
    }
    if (p.cp > 1) arg("--context-parallel-size", I(p.cp));
    if (m.experts > 1) arg("--expert-model-parallel-size", I(p.ep));
    // moe2: MoE parallel folding; Megatron's default is tp, so written only where it differs.
    if (m.experts > 1 && p.etp() != p.tp) arg("--expert-tensor-parallel-size", I(p.etp()));
    if (m.experts > 1 && p.moe_shared_expert_overlap) arg("--moe-shared-expert-overlap");
    if (m.experts > 1 && p.moe_a2a_overlap) arg("--overlap-moe-expert-parallel-comm");  // deepep
    // hostov: CUDA graphs (transformer_config.py cuda_graph_impl / cuda_graph_scope; Megatron-LM
    // since 2026 also spells the scope --cuda-graph-modules and full_iteration
    // --cuda-graph-impl full_iteration, and migrates these flags), static expert inputs: drop-and-pad
    // at capacity 1 (the estimate's balanced loads).
    if (p.cuda_graph_impl != CudaGraphImpl::none) {
        arg("--cuda-graph-impl", to_string(p.cuda_graph_impl));
        if (p.cuda_graph_scope != 0) {
            std::string words;
            for (const std::string& w : cuda_graph_scope_words(p.cuda_graph_scope)) words += (words.empty() ? "" : " ") + w;
            arg("--cuda-graph-scope", words);
        }
        if (p.cuda_graph_scope & kGraphFullIteration) arg("--no-check-for-nan-in-loss-and-grad");
    }
    if (m.experts > 1 && p.moe_pad_to_capacity) {
        arg("--moe-expert-capacity-factor", "1.0");
        arg("--moe-pad-expert-input-to-capacity");
    }
    if (p.sequence_parallel) arg("--sequence-parallel");
    // p2psg: the scatter/gather pipeline send was Megatron-LM's default from Feb 2021 until
    // Megatron-Core dropped it (Mar 2023); today's Megatron-LM has neither the code nor, since
    // Apr 2026, the --no-scatter-gather-tensors-in-pipeline flag, so there is nothing to pass.
    if (p.scatter_gather_tensors_in_pipeline && p.pp > 1 && p.tp > 1 && !p.sequence_parallel)
        out.notes.push_back("parallel.scatter_gather_tensors_in_pipeline = true: Megatron-LM sent 1/tp of each "
                            "pipeline activation per rank only from Feb 2021 to Mar 2023 (on by default there); "
                            "current Megatron-LM sends the whole tensor without --sequence-parallel, so expect the "
                            "estimate's pipeline send / recv to be low; --sequence-parallel shards it instead");
    // recomp: --no-async-tensor-model-parallel-allreduce turned the overlap off from Sep 2021
    // until Apr 2024; Megatron-LM has ignored it since and removed it in Jan 2026.
    if (!p.async_tensor_model_parallel_allreduce && p.tp > 1)
        out.notes.push_back("parallel.async_tensor_model_parallel_allreduce = false: Megatron-LM before Sep 2021 (or "
                            "--no-async-tensor-model-parallel-allreduce until Apr 2024) left the backward TP "
                            "all-reduce exposed; current Megatron-LM always runs it beside the weight-gradient GEMM, "
                            "so expect the estimate's TP time to be high");
    if (p.distributed_optimizer || p.zero == 1) arg("--use-distributed-optimizer");
    if (p.offload_optimizer == OffloadDevice::cpu) {
        // offload: Megatron-Core's HybridDeviceOptimizer (arguments.py: it needs the
        // precision-aware optimizer); the whole shard on the host, its copies overlapped.
        arg("--optimizer-cpu-offload");
        arg("--optimizer-offload-fraction", "1.0");
        arg("--use-precision-aware-optimizer");
        arg("--overlap-cpu-optimizer-d2h-h2d");
    }
    if (p.zero == 1)
        out.notes.push_back("parallel.zero = 1 is written as --use-distributed-optimizer, Megatron-LM's sharding of "
                            "optimizer state over data-parallel ranks (the ZeRO-1 equivalent)");
    if (p.overlap_grad_reduce) arg("--overlap-grad-reduce");
    if (!p.grad_reduce_in_fp32 && job.training.precision == Precision::bf16) arg("--grad-reduce-in-bf16");  // oomnemo
    if (p.activation_offload_layers > 0) out.notes.push_back(
        "parallel.activation_offload_layers = " + std::to_string(p.activation_offload_layers) +
        " is Megatron-core's TransformerConfig cpu_offloading / cpu_offloading_num_layers (NeMo, Megatron-Bridge); "
        "Megatron-LM's pretrain_gpt.py has no command-line flag for it");
    if (p.overlap_param_gather && (p.distributed_optimizer || p.zero == 1)) arg("--overlap-param-gather");
    // Transformer Engine userbuffers (needs --sequence-parallel, which validate_job requires).
    if (p.tp_comm_overlap && p.tp > 1) arg("--tp-comm-overlap");
    // blackwell: Megatron-LM overlaps the interleaved schedule's p2p by default (arguments.py
    // --no-overlap-p2p-communication); a job that keeps every hop exposed says so.
    if (!p.overlap_p2p_comm && p.pp > 1 && p.vpp > 1) arg("--no-overlap-p2p-communication");
    // tt405: PyTorch's micro-pipelined TP has no Megatron-LM flag; TE's userbuffers is the nearest.
    if (p.async_tp && p.tp > 1)
        out.notes.push_back("parallel.async_tp: PyTorch's micro-pipelined TP (torchtitan's enable_async_tensor_parallel) "
                            "has no Megatron-LM flag; the nearest is Transformer Engine's userbuffers "
                            "(--tp-comm-overlap, parallel.tp_comm_overlap)");
    const std::string order = effective_order(job, p.order);
    if (order == effective_order(job, "tp-cp-ep-pp-dp") && order != effective_order(job, "tp-cp-ep-dp-pp"))
        arg("--use-tp-pp-dp-mapping");
    else if (order != effective_order(job, "tp-cp-ep-dp-pp"))
        out.notes.push_back("parallel.order = \"" + p.order + "\": Megatron-LM places ranks tp-cp-ep-dp-pp (or tp-cp-ep-pp-dp "
                            "with --use-tp-pp-dp-mapping); this order has no flag, so ranks will be placed differently");
    if (std::string note = nvlink_domain_note(job, "Megatron-LM / NeMo"); !note.empty()) out.notes.push_back(note);  // gb200

    // Model.
    arg("--num-layers", I(m.layers));
    arg("--hidden-size", I(m.hidden));
    arg("--ffn-hidden-size", I(m.ffn_hidden));
    arg("--num-attention-heads", I(m.heads));
    if (m.kv_heads != m.heads) {
        arg("--group-query-attention");
        arg("--num-query-groups", I(m.kv_heads));
    }
    {  // mlaio: head width and multi-head latent attention (arguments.py main d98e8a6: --kv-channels
       // and --multi-latent-attention from TransformerConfig via ArgumentGroupFactory, _add_mla_args'
       // --q-lora-rank (default None: queries projected directly) --kv-lora-rank --qk-head-dim
       // --qk-pos-emb-head-dim --v-head-dim; validate_args asserts hidden % heads == 0 unless
       // --kv-channels is given). --qk-layernorm builds MLA's RMSNorms on the query and key/value
       // latents (gpt_layer_specs: IdentityOp without it), which DeepSeek-V2/V3 have.
        if (m.head_dim_given > 0) arg("--kv-channels", I(m.head_dim_given));
        if (m.mla()) {
            arg("--multi-latent-attention");
            if (m.q_lora_rank > 0) arg("--q-lora-rank", I(m.q_lora_rank));
            arg("--kv-lora-rank", I(m.kv_lora_rank));
            arg("--qk-head-dim", I(m.head_dim()));
            arg("--qk-pos-emb-head-dim", I(m.qk_rope_head_dim));
            arg("--v-head-dim", I(m.v_head_dim));
        }
        // --qk-layernorm: MLA's latent norms (above), or the per-head query / key norms of
        // model.qk_layernorm (Qwen3; Megatron-Bridge's Qwen3 providers set qk_layernorm).
        if (m.mla() || m.qk_layernorm) arg("--qk-layernorm");
        if (m.mtp_layers > 0) arg("--mtp-num-layers", I(m.mtp_layers));
    }
    arg("--seq-length", I(m.seq_len));
    arg("--max-position-embeddings", I(m.seq_len));
    arg("--make-vocab-size-divisible-by", I(e.vocab_pad));
    if (m.position == Position::rope) {
        arg("--position-embedding-type", "rope");
        // --rotary-base is an integer argument.
        if (m.rope_theta == std::floor(m.rope_theta)) arg("--rotary-base", I((long long)m.rope_theta));
        else out.notes.push_back("model.rope_theta = " + num(m.rope_theta) + " is not an integer; Megatron-LM's "
                                 "--rotary-base takes an integer, so it is not written (default 10000)");
    } else {
        arg("--position-embedding-type", "learned_absolute");
    }
    arg("--normalization", m.norm == Norm::rmsnorm ? "RMSNorm" : "LayerNorm");
    arg("--norm-epsilon", num(m.norm_eps));
    // menorm: Megatron-core passes memory_efficient to Apex's FusedLayerNorm only (its local,
    // non-Transformer-Engine layer spec); an RMSNorm or a TE norm keeps its input.
    if (job.estimate.memory_efficient_norm) {
        if (m.norm == Norm::layernorm) {
            arg("--memory-efficient-layer-norm");
            out.notes.push_back("estimate.memory_efficient_norm: --memory-efficient-layer-norm takes effect with "
                                "--transformer-impl local (Apex FusedLayerNorm); with Transformer Engine layers the "
                                "norms keep their inputs and use more activation memory than estimated");
        } else {
            out.notes.push_back("estimate.memory_efficient_norm with RMSNorm: Megatron-LM's --memory-efficient-layer-norm "
                                "covers LayerNorm only, so the run's norms keep their inputs and use more activation "
                                "memory than estimated (Apex's FusedRMSNorm has memory_efficient=True in model code)");
        }
    }
    if (m.activation == Activation::swiglu) arg("--swiglu");
    if (!m.tied_embeddings) arg("--untie-embeddings-and-output-weights");
    if (!m.bias) {
        arg("--disable-bias-linear");
        if (m.qkv_bias) arg("--add-qkv-bias");
    }
    if (m.experts > 1) {
        arg("--num-experts", I(m.experts));
        arg("--moe-router-topk", I(m.top_k));
        // moe: the estimate models Megatron-core's all-to-all token dispatcher (collectives.cpp
        // ep_all_to_all_bytes, tp_mlp_comm); Megatron's default is "allgather".
        // deepep: parallel.moe_dispatcher deepep / hybridep is the flex dispatcher with that backend
        // (Megatron-core transformer_config.py moe_flex_dispatcher_backend; --moe-enable-deepep is
        // its deprecated spelling of deepep).
        if (p.moe_dispatcher == MoeDispatcher::alltoall) {
            arg("--moe-token-dispatcher-type", "alltoall");
        } else {
            arg("--moe-token-dispatcher-type", "flex");
            arg("--moe-flex-dispatcher-backend", p.moe_dispatcher == MoeDispatcher::deepep ? "deepep" : "hybridep");
        }
        if (m.moe_router_num_groups > 0) {  // deepep: group-limited routing
            arg("--moe-router-num-groups", I(m.moe_router_num_groups));
            arg("--moe-router-group-topk", I(m.moe_router_group_topk));
        }
        // mlaio: the experts' own width, the shared experts (one MLP of their total width, as
        // TransformerConfig.moe_shared_expert_intermediate_size documents) and the dense first
        // layers as --moe-layer-freq's list pattern (arguments.py moe_freq_type: digits, [ ] ( ) + *
        // only; gpt_layer_specs asserts its length is num_layers).
        if (m.moe_ffn_hidden > 0) arg("--moe-ffn-hidden-size", I(m.moe_ffn_hidden));
        if (m.shared_expert_ffn_hidden > 0) arg("--moe-shared-expert-intermediate-size", I(m.shared_expert_ffn_hidden));
        if (m.first_dense_layers > 0)
            arg("--moe-layer-freq", "\"([0]*" + I(m.first_dense_layers) + "+[1]*" + I(m.layers - m.first_dense_layers) + ")\"");
        if (p.tp > 1 && !p.sequence_parallel)
            out.notes.push_back("model.experts with parallel.tp > 1 and no sequence parallelism: Megatron-core's MoELayer "
                                "raises in training unless --sequence-parallel is set; set parallel.sequence_parallel = true");
    }
    // oom4: the estimate counts no dropout masks for a model without dropout (model.dropout, by
    // arch: llama has none); Megatron-LM's defaults are 0.1 each.
    if (!m.dropout_on()) {
        arg("--hidden-dropout", "0.0");
        arg("--attention-dropout", "0.0");
    }
    if (t.flash_attention) arg("--use-flash-attn");
    else arg("--attention-backend", "unfused");
    if (!t.masked_softmax_fusion) arg("--no-masked-softmax-fusion");  // papers

    // Batch, precision, recomputation.
    arg("--micro-batch-size", I(t.micro_batch));
    arg("--global-batch-size", I(t.global_batch));
    if (t.precision == Precision::bf16) arg("--bf16");
    else if (t.precision == Precision::fp16) arg("--fp16");
    if (t.fp8 != Fp8Recipe::none) {
        // fp8 (issue 15 point 3): Megatron-LM's Transformer-Engine arguments (arguments.py:
        // --fp8-format e4m3|hybrid, --fp8-recipe tensorwise|delayed|mxfp8|blockwise; its
        // "tensorwise" builds TE's Float8CurrentScaling).
        if (t.fp8 == Fp8Recipe::rowwise)
            return job_error(job, "training.fp8",
                             "got \"rowwise\"; Megatron-LM's --fp8-recipe has no row-wise scaling (torchao's recipe); "
                             "allowed for --format megatron: \"delayed\", \"current\", \"tensorwise\", \"mxfp8\"");
        arg("--fp8-format", to_string(t.fp8_format));
        arg("--fp8-recipe", t.fp8 == Fp8Recipe::delayed ? "delayed" : t.fp8 == Fp8Recipe::mxfp8 ? "mxfp8" : "tensorwise");
        if (t.fp8 == Fp8Recipe::delayed) {
            // Megatron's defaults (history 1, most_recent) differ from TE's DelayedScaling
            // defaults (1024, max), which the estimate and the job key follow.
            arg("--fp8-amax-history-len", I(t.fp8_amax_history_len));
            arg("--fp8-amax-compute-algo", "max");
        }
        if (t.fp8 == Fp8Recipe::tensorwise)
            out.notes.push_back("training.fp8 = \"tensorwise\": Megatron-LM's --fp8-recipe tensorwise runs Transformer "
                                "Engine's Float8CurrentScaling (ptd's \"current\"), which caches FP8 weights per step "
                                "and keeps FP8 activations, unlike torchao's tensorwise that the estimate modelled");
        if (t.fp8_bf16_first_layers > 0 || t.fp8_bf16_last_layers > 0) {
            arg("--first-last-layers-bf16");
            arg("--num-layers-at-start-in-bf16", I(t.fp8_bf16_first_layers));
            arg("--num-layers-at-end-in-bf16", I(t.fp8_bf16_last_layers));
        }
        if (t.fp8_param_gather) arg("--fp8-param-gather");  // oomnemo
    }
    if (p.recompute == Recompute::selective) {
        arg("--recompute-granularity", "selective");
        if (p.recompute_modules != kRecomputeCoreAttn) {  // recmod: Megatron-core's module list
            std::string words;
            for (const std::string& w : recompute_module_words(p.recompute_modules)) words += (words.empty() ? "" : " ") + w;
            arg("--recompute-modules", words);
        }
        if (p.recompute_style == RecomputeStyle::torchtitan_op)
            out.notes.push_back("parallel.recompute_style = \"torchtitan-op\": Megatron-LM has no op-level selective "
                                "checkpointing; --recompute-granularity selective recomputes the attention core, which "
                                "keeps a different set of activations (ptd estimate --set parallel.recompute_style=megatron)");
    } else if (p.recompute == Recompute::full) {
        arg("--recompute-granularity", "full");
        arg("--recompute-method", "uniform");
        arg("--recompute-num-layers", "1");
        if (p.distribute_saved_activations) arg("--distribute-saved-activations");  // papers
    }

    // Optimizer and schedule.
    arg("--optimizer", t.optimizer == Optimizer::sgd ? "sgd" : "adam");
    if (t.optimizer == Optimizer::adam)
        out.notes.push_back("training.optimizer = \"adam\": Megatron-LM's --optimizer adam applies decoupled weight "
                            "decay (AdamW); there is no L2-coupled Adam");
    if (t.optimizer != Optimizer::sgd) {
        // PTD assumes the usual LLM pre-training betas (GPT-3, Llama): Megatron's default β2 is 0.999.
        arg("--adam-beta1", "0.9");
        arg("--adam-beta2", "0.95");
    } else {
        // The estimate counts one fp32 momentum buffer for sgd (kSgdMomentum); written
        // explicitly although it is Megatron's default.
        arg("--sgd-momentum", num(kSgdMomentum));
    }
    {  // oom4: optimizer state dtypes — Megatron-LM's precision-aware optimizer (TE FusedAdam),
        // which only runs with the distributed optimizer (megatron/core/optimizer/__init__.py).
        const bool states = t.main_params_dtype != StateDtype::fp32 || t.exp_avg_dtype != StateDtype::fp32 ||
                            t.exp_avg_sq_dtype != StateDtype::fp32;
        if (states) {
            if (t.main_params_dtype != StateDtype::fp32 && t.main_params_dtype != StateDtype::fp16 &&
                t.main_params_dtype != StateDtype::fp32_remainders)
                return job_error(job, "training.main_params_dtype",
                                 std::string("got \"") + to_string(t.main_params_dtype) +
                                     "\"; Megatron-LM's --main-params-dtype takes fp32 or fp16 (a bf16 master shard, or "
                                     "none, is Apex DistributedFusedAdam's in NeMo 1.x); allowed for --format megatron: "
                                     "\"fp32\", \"fp32-remainders\", \"fp16\"");
            if (!p.distributed_optimizer && p.zero != 1)
                return job_error(job, "training.exp_avg_dtype",
                                 "optimizer states below fp32 without a sharded optimizer; Megatron-LM's "
                                 "--use-precision-aware-optimizer needs --use-distributed-optimizer; allowed for --format "
                                 "megatron: parallel.distributed_optimizer = true (or zero = 1), or fp32 states");
            if (p.offload_optimizer != OffloadDevice::cpu) arg("--use-precision-aware-optimizer");
            // fp32-remainders: --main-params-dtype fp32 with OptimizerConfig.store_param_remainders,
            // True by default (Transformer Engine ≥ 2.1).
            if (t.main_params_dtype == StateDtype::fp16) arg("--main-params-dtype", "fp16");
            if (t.exp_avg_dtype != StateDtype::fp32) arg("--exp-avg-dtype", to_string(t.exp_avg_dtype));
            if (t.exp_avg_sq_dtype != StateDtype::fp32) arg("--exp-avg-sq-dtype", to_string(t.exp_avg_sq_dtype));
        }
    }
    arg("--lr", num(t.lr));
    arg("--min-lr", num(t.min_lr));
    arg("--lr-decay-style", "cosine");
    arg("--lr-warmup-iters", I(t.warmup));
    arg("--train-iters", I(t.steps));
    arg("--weight-decay", num(t.weight_decay));
    arg("--clip-grad", num(t.grad_clip));
    arg("--seed", I(t.seed));

    // Data.
    if (t.data == "synthetic") {
        arg("--mock-data");
        arg("--tokenizer-type", "NullTokenizer");
        arg("--vocab-size", I(m.vocab));
    } else {
        arg("--data-path", t.data);
        out.notes.push_back("training.data = \"" + t.data + "\": Megatron-LM reads indexed datasets (.bin/.idx from "
                            "tools/preprocess_data.py) by prefix; add --tokenizer-type/--tokenizer-model for a "
                            "tokenizer with " + I(m.vocab) + " tokens");
    }

    for (size_t i = 0; i < args.size(); ++i) out.text += args[i] + (i + 1 < args.size() ? " \\\n" : "\n");
    return out;
}

// ---- DeepSpeed ---------------------------------------------------------------------------

Result<ExportOutput> export_deepspeed(const JobSpec& job) {
    if (auto bad = unsupported_schedule(job, "DeepSpeed")) return *bad;  // zb
    if (auto bad = unsupported_state_dtypes(job, "DeepSpeed")) return *bad;  // oom4
    if (auto bad = unsupported_recompute_modules(job, "DeepSpeed")) return *bad;  // recmod
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    const EstimateSpec& e = job.estimate;
    if (p.zero >= 2 && p.pp > 1)
        return job_error(job, "parallel.zero",
                         "got " + std::to_string(p.zero) + " with pp = " + std::to_string(p.pp) +
                             "; DeepSpeed's pipeline engine supports ZeRO stage 0 or 1 only; allowed for --format "
                             "deepspeed: zero 0 or 1 with pp > 1");
    // mlaio: ds_config carries no model, so what matters is whether some model code DeepSpeed
    // trains has the part. Multi-token prediction: none (Megatron-DeepSpeed has no MTP, and
    // transformers' DeepseekV3ForCausalLM drops the MTP module's weights). MLA: transformers'
    // DeepseekV3ForCausalLM has it, without tensor or pipeline parallelism; Megatron-DeepSpeed,
    // which supplies those, has no MLA.
    if (job.model.mtp_layers > 0)
        return job_error(job, "model.mtp_layers",
                         "got " + std::to_string(job.model.mtp_layers) + "; no model code DeepSpeed trains has "
                         "multi-token prediction (Megatron-DeepSpeed has none; transformers' DeepseekV3ForCausalLM "
                         "leaves the MTP module out); allowed for --format deepspeed: 0, or --format megatron / torchtitan");
    if (job.model.mla() && (p.tp > 1 || p.pp > 1))
        return job_error(job, "model.kv_lora_rank",
                         "got " + std::to_string(job.model.kv_lora_rank) + " (multi-head latent attention) with tp " +
                             std::to_string(p.tp) + " × pp " + std::to_string(p.pp) + "; Megatron-DeepSpeed, which "
                             "DeepSpeed's tensor / pipeline parallelism needs, has no MLA; allowed for --format "
                             "deepspeed: tp = pp = 1 (transformers' DeepseekV3ForCausalLM under ZeRO), or --format "
                             "megatron / torchtitan");
    ExportOutput out;
    if (job.model.moe_ffn_hidden > 0 || job.model.shared_expert_ffn_hidden > 0 || job.model.first_dense_layers > 0)
        out.notes.push_back("model.moe_ffn_hidden / shared_expert_ffn_hidden / first_dense_layers: the experts' width, the "
                            "shared experts and the dense first layers are built by the model code "
                            "(deepspeed.moe.layer.MoE wraps the expert module it is given)");
    if (job.model.mla())
        out.notes.push_back("model.kv_lora_rank: multi-head latent attention is transformers' DeepseekV3ForCausalLM "
                            "(model_type deepseek_v3) in the training script; its routed experts run without expert "
                            "parallelism there");
    nlohmann::ordered_json ds;
    ds["train_batch_size"] = t.global_batch;
    ds["train_micro_batch_size_per_gpu"] = t.micro_batch;
    ds["gradient_accumulation_steps"] = job.grad_accum();
    ds["gradient_clipping"] = t.grad_clip;
    ds["bf16"] = {{"enabled", t.precision == Precision::bf16}};
    if (t.fp8 != Fp8Recipe::none)
        out.notes.push_back(std::string("training.fp8 = \"") + to_string(t.fp8) +
                            "\": DeepSpeed has no native FP8 training; ds_config trains in bf16 (the estimate "
                            "assumed FP8 GEMMs). Wrap the model's linear layers in Transformer Engine "
                            "(te.fp8_autocast) in the training script, or export to Megatron-LM or torchtitan");
    if (t.precision == Precision::fp16) ds["fp16"] = {{"enabled", true}, {"loss_scale", 0}};  // 0 = dynamic
    else ds["fp16"] = {{"enabled", false}};

    const int stage = p.distributed_optimizer ? 1 : p.zero;
    const long long bucket = std::llround(e.zero_bucket_elements);
    nlohmann::ordered_json zero;
    zero["stage"] = stage;
    zero["overlap_comm"] = p.overlap_grad_reduce;
    zero["contiguous_gradients"] = true;
    zero["reduce_bucket_size"] = bucket;
    if (stage == 3) {
        // parallel.fsdp_prefetch layers ahead, in parameters (0 turns prefetching off).
        const ParamCounts pc = count_parameters(job.model);
        zero["stage3_prefetch_bucket_size"] = (long long)p.fsdp_prefetch * pc.per_layer;
    } else {
        zero["allgather_bucket_size"] = bucket;
    }
    // offload: ZeRO-Offload (offload_optimizer, stages 1-3) and ZeRO-3's offload_param, in
    // pinned host memory as the estimate assumes.
    if (p.offload_optimizer == OffloadDevice::cpu) zero["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
    if (p.offload_params) zero["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
    ds["zero_optimization"] = zero;
    if (p.overlap_param_gather && stage != 3)
        out.notes.push_back("parallel.overlap_param_gather: DeepSpeed ZeRO-1/2 all-gathers the updated parameters "
                            "inside step(), not behind the next forward; there is no ds_config key for it");
    if (p.async_tp && p.tp > 1)  // tt405
        out.notes.push_back("parallel.async_tp: PyTorch's micro-pipelined TP is torchtitan's (Inductor) feature; "
                            "DeepSpeed has no ds_config key for it");
    if (p.tp_comm_overlap)
        out.notes.push_back("parallel.tp_comm_overlap: tensor-parallel GEMM/communication overlap is part of the "
                            "model code (Megatron-DeepSpeed with Transformer Engine: --tp-comm-overlap), not ds_config");
    if (p.distributed_optimizer)
        out.notes.push_back("parallel.distributed_optimizer is written as ZeRO stage 1 (the same sharding of "
                            "optimizer state over data-parallel ranks)");

    nlohmann::ordered_json opt;
    if (t.optimizer == Optimizer::sgd) {
        // "SGD" is not one of DeepSpeed's own optimizers, so the engine builds torch.optim.SGD.
        opt = {{"type", "SGD"}, {"params", {{"lr", t.lr}, {"momentum", kSgdMomentum}, {"weight_decay", t.weight_decay}}}};
    } else if (t.optimizer == Optimizer::adamw) {
        opt = {{"type", "AdamW"}, {"params", {{"lr", t.lr}, {"weight_decay", t.weight_decay}, {"betas", {0.9, 0.95}}}}};
    } else {
        // DeepSpeed's Adam is decoupled (AdamW) unless adam_w_mode is false.
        opt = {{"type", "Adam"},
               {"params", {{"lr", t.lr}, {"weight_decay", t.weight_decay}, {"betas", {0.9, 0.95}}, {"adam_w_mode", false}}}};
    }
    ds["optimizer"] = opt;
    // WarmupCosineLR (lr_schedules.py) raises unless warmup_num_steps is an integer >= 1,
    // and warms up over max(2, warmup_num_steps) steps from warmup_min_ratio·lr. So a job
    // without warmup (0, or 1: our step 0 already gets the full lr) is written as one
    // warmup step from ratio 1.0 — the full lr from the start, then the cosine.
    // cos_min_ratio = min_lr / lr lies in [0, 1] (validate_job: min_lr <= lr); the cosine
    // runs over total_num_steps − warmup (it takes max(1, ·), and warmup <= steps).
    const bool no_warmup = t.warmup <= 1;
    ds["scheduler"] = {{"type", "WarmupCosineLR"},
                       {"params",
                        {{"total_num_steps", t.steps},
                         {"warmup_num_steps", no_warmup ? 1 : t.warmup},
                         {"warmup_min_ratio", no_warmup ? 1.0 : 0.0},
                         {"cos_min_ratio", t.lr > 0 ? decimal_ratio(t.min_lr, t.lr) : 0.0},
                         {"warmup_type", "linear"}}}};
    if (no_warmup)
        out.notes.push_back("training.warmup = " + std::to_string(t.warmup) + ": DeepSpeed's WarmupCosineLR needs "
                            "warmup_num_steps >= 1 (and warms up over at least 2 steps), so it is written as "
                            "warmup_num_steps = 1 with warmup_min_ratio = 1.0: the full lr until the cosine starts");
    if (p.recompute == Recompute::full) {
        // papers: partition_activations splits each checkpoint over the model-parallel group.
        ds["activation_checkpointing"] = {{"partition_activations", p.distribute_saved_activations},
                                          {"contiguous_memory_optimization", false},
                                          {"cpu_checkpointing", false}};
        out.notes.push_back("parallel.recompute = \"full\": activation_checkpointing configures "
                            "deepspeed.checkpointing; the model must call deepspeed.checkpointing.checkpoint per layer");
    } else if (p.recompute == Recompute::selective) {
        out.notes.push_back("parallel.recompute = \"selective\": ds_config has no selective recomputation; "
                            "recompute the attention core in the model code (Megatron-DeepSpeed: its recompute flags)");
    }

    if (!t.masked_softmax_fusion)  // papers
        out.notes.push_back("training.masked_softmax_fusion = false: the attention softmax is model code "
                            "(Megatron-DeepSpeed: --no-masked-softmax-fusion)");
    if (job.estimate.memory_efficient_norm)  // menorm
        out.notes.push_back("estimate.memory_efficient_norm: the norms are model code (Megatron-DeepSpeed: "
                            "--memory-efficient-layer-norm, LayerNorm only; Apex FusedRMSNorm memory_efficient=True)");
    // What lives outside ds_config.
    out.notes.push_back("the model ([model], flash_attention, vocab padding), the data and the seed are set in the "
                        "training script; ds_config carries batch, precision, ZeRO, optimizer and schedule");
    if (p.tp > 1 || p.pp > 1)
        out.notes.push_back("tp " + std::to_string(p.tp) + " × pp " + std::to_string(p.pp) +
                            " is set outside ds_config (Megatron-DeepSpeed: --tensor-model-parallel-size " +
                            std::to_string(p.tp) + " --pipeline-model-parallel-size " + std::to_string(p.pp) +
                            "; plain DeepSpeed: PipelineModule(num_stages=" + std::to_string(p.pp) +
                            ")); train_batch_size assumes data-parallel size " + std::to_string(p.dp));
    if (p.vpp > 1)
        out.notes.push_back("parallel.vpp = " + std::to_string(p.vpp) +
                            ": DeepSpeed's pipeline engine has no interleaved schedule; expect a larger bubble");
    if (p.pp > 1 && (p.account_for_embedding_in_pipeline_split || p.account_for_loss_in_pipeline_split))  // l405
        out.notes.push_back("parallel.account_for_*_in_pipeline_split: DeepSpeed's PipelineModule splits by "
                            "partition_method (\"parameters\" by default, or \"type:transformer\"); give the embedding "
                            "and the loss layer's share there");
    if (p.cp > 1)
        out.notes.push_back("parallel.cp = " + std::to_string(p.cp) +
                            ": DeepSpeed has no ring-attention context parallelism in ds_config; DeepSpeed-Ulysses "
                            "sequence parallelism is a different algorithm, set in code");
    if (p.ep > 1)
        out.notes.push_back("parallel.ep = " + std::to_string(p.ep) +
                            ": expert parallelism is set in the model code (deepspeed.moe.layer.MoE(ep_size=" +
                            std::to_string(p.ep) + "))");
    // deepep: DeepSpeed-MoE's layer exchanges tokens with its own all-to-all.
    if (p.moe_dispatcher != MoeDispatcher::alltoall || p.moe_a2a_overlap)
        out.notes.push_back("parallel.moe_dispatcher / moe_a2a_overlap: Megatron-core's flex dispatcher (DeepEP / "
                            "HybridEP) and --overlap-moe-expert-parallel-comm have no ds_config equivalent; "
                            "DeepSpeed-MoE runs a plain all-to-all, so expect more EP time than the estimate's");
    if (p.sequence_parallel)
        out.notes.push_back("parallel.sequence_parallel: Megatron-style sequence parallelism is part of the "
                            "tensor-parallel model code, not ds_config");
    if (effective_order(job, p.order) != effective_order(job, "tp-cp-ep-dp-pp"))
        out.notes.push_back("parallel.order = \"" + p.order + "\": rank placement is decided by the launcher and "
                            "the model's process groups, not ds_config");
    if (std::string note = nvlink_domain_note(job, "DeepSpeed"); !note.empty()) out.notes.push_back(note);  // gb200
    out.text = ds.dump(2) + "\n";
    return out;
}

// ---- torchtitan ---------------------------------------------------------------------------

// What both torchtitan forms share: the checks, the flavor and the layout in its terms.
struct TitanPlan {
    const char* flavor = nullptr;   // "8B"/"70B"/"405B", or none
    // mlaio: the torchtitan model family (torchtitan/models/<family>) and its Trainer.Config
    // baseline for the flavor (none: the family's debugmodel, with the loss's vocabulary set).
    const char* family = "llama3";
    const char* baseline = nullptr;
    bool replicate = false;         // DDP (pure data parallelism, no sharding)
    int micro_batches = 1;          // per dp rank and step when pipelining
    std::vector<std::vector<std::string>> chunk_modules;  // per model chunk, pp > 1 only
    std::vector<std::string> notes;
    // fp8 (issue 15 point 3): torchao converter wanted, and the modules it must skip.
    bool fp8 = false;
    std::vector<std::string> fp8_filter_fqns;
    std::vector<std::string> fp8_layers;  // mxfp8, Python form: the layers to convert (fqns)
    bool cpu_offload = false;       // offload: training.enable_cpu_offload (FSDP2 CPUOffloadPolicy)
};

Result<TitanPlan> plan_torchtitan(const JobSpec& job, ExportFormat format, const char* output_module) {
    if (auto bad = unsupported_schedule(job, "torchtitan")) return *bad;  // zb
    if (auto bad = unsupported_state_dtypes(job, "torchtitan")) return *bad;  // oom4
    if (auto bad = unsupported_recompute_modules(job, "torchtitan")) return *bad;  // recmod
    const ModelSpec& m = job.model;
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    const std::string fmt = to_string(format);
    TitanPlan tp;
    if (t.precision == Precision::fp16)
        return job_error(job, "training.precision",
                         "got \"fp16\"; torchtitan's mixed_precision_param allows bfloat16 or float32 only; "
                         "allowed for --format " + fmt + ": bf16, fp32");
    if (t.optimizer == Optimizer::sgd)
        return job_error(job, "training.optimizer",
                         "got \"sgd\"; torchtitan builds Adam and AdamW only; allowed for --format " + fmt + ": adamw, adam");

    // torchtitan knows a model by name + flavor; only exact presets map to a flavor.
    // mlaio: Qwen3 (torchtitan/models/qwen3: 8B, 32B, 30B-A3B, 235B-A22B) and DeepSeek-V3
    // (models/deepseek_v3: 671B, whose model_registry takes num_mtp_layers, so mtp_layers may
    // differ from the preset's) beside Llama 3; baselines from each family's config_registry.py.
    struct TitanFlavor {
        const char* preset;
        const char* family;
        const char* flavor;
        const char* baseline;
    };
    static const TitanFlavor kFlavors[] = {
        {"llama3-8b", "llama3", "8B", "llama3_8b"},       {"llama3-70b", "llama3", "70B", "llama3_70b"},
        {"llama3-405b", "llama3", "405B", "llama3_405b"}, {"qwen3-8b", "qwen3", "8B", nullptr},
        {"qwen3-32b", "qwen3", "32B", "qwen3_32b"},       {"qwen3-30b-a3b", "qwen3", "30B-A3B", "qwen3_30b_a3b"},
        {"qwen3-235b-a22b", "qwen3", "235B-A22B", nullptr}, {"deepseek-v3", "deepseek_v3", "671B", "deepseek_v3_671b"}};
    if (job.origin.model_base) {
        ModelSpec same = m;
        same.mtp_layers = job.origin.model_base->mtp_layers;
        for (const TitanFlavor& f : kFlavors)
            if (same == *job.origin.model_base && job.origin.model_preset == f.preset &&
                (m.mtp_layers == 0 || std::string_view(f.family) == "deepseek_v3")) {
                tp.flavor = f.flavor;
                tp.family = f.family;
                tp.baseline = f.baseline;
            }
    }
    if (!tp.flavor) {
        // The family whose model code has the model's parts, for the flavor to register.
        if (m.mla() || m.mtp_layers > 0 || m.shared_expert_ffn_hidden > 0 || m.first_dense_layers > 0)
            tp.family = "deepseek_v3";
        else if (m.head_dim_given > 0 || m.moe_ffn_hidden > 0)
            tp.family = "qwen3";
        tp.notes.push_back("model \"" + m.name + "\" has no torchtitan flavor (only the llama3-8b/70b/405b presets "
                           "map to llama3 8B/70B/405B" +
                           std::string(std::string_view(tp.family) == "llama3" ? "" : ", qwen3-* to qwen3, deepseek-v3 to deepseek_v3 671B") +
                           "); register a flavor" +
                           (std::string_view(tp.family) == "llama3" ? std::string() : " in torchtitan/models/" + std::string(tp.family)) +
                           " and set the model");
    }
    // mlaio: torchtitan's DeepSeek-V3 MTP (models/deepseek_v3/MTP.md) rejects pipeline and
    // context parallelism; v0.2.x (the TOML form) has no MTP at all.
    if (m.mtp_layers > 0 && format == ExportFormat::torchtitan_toml)
        return job_error(job, "model.mtp_layers",
                         "got " + std::to_string(m.mtp_layers) + "; torchtitan v0.2.x has no multi-token prediction "
                         "(torchtitan's DeepSeek-V3 gained model_registry(..., num_mtp_layers=N) after the Python-config "
                         "refactor); allowed for --format " + fmt + ": 0, or --format torchtitan");
    if (m.mtp_layers > 0 && (p.pp > 1 || p.cp > 1))
        return job_error(job, p.pp > 1 ? "parallel.pp" : "parallel.cp",
                         "got " + std::to_string(p.pp > 1 ? p.pp : p.cp) + " with model.mtp_layers = " +
                             std::to_string(m.mtp_layers) + "; torchtitan's multi-token prediction rejects pipeline and "
                             "context parallelism (models/deepseek_v3/MTP.md); allowed for --format " + fmt + ": 1, or "
                             "model.mtp_layers = 0, or --format megatron");
    if (m.mtp_layers > 0 && !tp.flavor)
        tp.notes.push_back("model.mtp_layers = " + std::to_string(m.mtp_layers) + ": pass num_mtp_layers=" +
                           std::to_string(m.mtp_layers) + " to the deepseek_v3 model_registry and use MTPLoss");
    if (job.estimate.memory_efficient_norm)  // menorm
        tp.notes.push_back("estimate.memory_efficient_norm: torchtitan's RMSNorm keeps its input; a norm that saves "
                           "its output instead (Apex FusedRMSNorm memory_efficient=True) is a model-code change");
    // deepep: the keys name Megatron-core's dispatcher and schedule; nothing is written for them here.
    if (m.experts > 1 && (p.moe_dispatcher != MoeDispatcher::alltoall || p.moe_a2a_overlap))
        tp.notes.push_back("parallel.moe_dispatcher / moe_a2a_overlap: Megatron-core's flex dispatcher (DeepEP / HybridEP) "
                           "and --overlap-moe-expert-parallel-comm; this export writes no torchtitan setting for them, so "
                           "its expert-parallel all-to-all is torchtitan's own");
    // etp: the routed experts' tensor parallelism. torchtitan v0.2.x (distributed/parallel_dims.py)
    // splits them parallelism.expert_tensor_parallel_degree ways when ep > 1 — 1 (its default) or
    // tp, written below — and tp ways when ep = 1; torchtitan main removed expert TP (#3167,
    // models/common/moe_sharding.py): with ep > 1 the experts split over ep only, with ep = 1 tp
    // ways. Any other split would run a different layout than the one estimated.
    if (m.experts > 1) {
        const int etp = p.etp();
        const bool toml = format == ExportFormat::torchtitan_toml;
        const bool ok = p.ep == 1 ? etp == p.tp : etp == 1 || (toml && etp == p.tp);
        if (!ok)
            return job_error(
                job, "parallel.expert_tp",
                "got " + std::to_string(etp) + (p.expert_tp == 0 ? " (= tp)" : "") + " with tp " + std::to_string(p.tp) +
                    " and ep " + std::to_string(p.ep) + "; " +
                    (p.ep == 1 ? "torchtitan splits the routed experts tp ways when ep = 1; allowed for --format " + fmt +
                                     ": 0 (= tp), or --format megatron"
                     : toml    ? "torchtitan v0.2.x splits them expert_tensor_parallel_degree ways, 1 or tp; allowed for "
                                 "--format " + fmt + ": 1 or " + std::to_string(p.tp) + ", or --format megatron"
                               : "torchtitan main has no expert tensor parallelism (#3167): with ep > 1 the routed experts "
                                 "split over ep only; allowed for --format " + fmt +
                                     ": 1 (--set parallel.expert_tp=1), or --format torchtitan-toml / megatron"));
    }

    // offload: torchtitan's training.enable_cpu_offload puts FSDP2's CPUOffloadPolicy on every
    // module: parameters, gradients and optimizer state go to host memory together.
    if (p.offload_optimizer != OffloadDevice::none || p.offload_params) {
        if (p.zero != 3 || !p.offload_params || p.offload_optimizer != OffloadDevice::cpu)
            return job_error(job, p.offload_params ? "parallel.offload_params" : "parallel.offload_optimizer",
                             std::string("offload_optimizer = \"") + to_string(p.offload_optimizer) +
                                 "\", offload_params = " + (p.offload_params ? "true" : "false") + " with zero = " +
                                 std::to_string(p.zero) +
                                 "; torchtitan's training.enable_cpu_offload (FSDP2 CPUOffloadPolicy) offloads "
                                 "parameters, gradients and optimizer state together; allowed for --format " + fmt +
                                 ": zero = 3 with offload_optimizer = \"cpu\" and offload_params = true, or no offload");
        tp.cpu_offload = true;
    }

    // torchtitan's DDP path is for pure data parallelism; with any other dimension the
    // data-parallel ranks shard with FSDP2.
    const bool pure_dp = p.tp == 1 && p.pp == 1 && p.cp == 1 && p.ep == 1;
    tp.replicate = pure_dp && p.zero == 0 && !p.distributed_optimizer;
    if (!tp.replicate && p.dp > 1 && p.zero != 3)
        tp.notes.push_back("parallel.zero = " + std::to_string(p.zero) + (p.distributed_optimizer ? " + distributed_optimizer" : "") +
                           ": torchtitan shards data-parallel ranks with FSDP2 (parameters, gradients and optimizer "
                           "state); written as data_parallel_shard_degree = " + std::to_string(p.dp) +
                           " with fsdp_reshard_after_forward = \"never\" (≈ ZeRO-2), so memory differs from the estimate");

    if (p.pp > 1) {
        // Every chunk's modules, in model order: the embedding on the first, the final
        // norm and output projection on the last (torchtitan's own default split uses
        // the same names).
        tp.micro_batches = t.global_batch / (t.micro_batch * p.dp);
        const std::vector<int> chunks = chunk_layers(job);
        int layer = 0;
        for (size_t k = 0; k < chunks.size(); ++k) {
            std::vector<std::string> mods;
            if (k == 0) mods.push_back("tok_embeddings");
            for (int i = 0; i < chunks[k]; ++i) mods.push_back("layers." + std::to_string(layer++));
            if (k + 1 == chunks.size()) {
                mods.push_back("norm");
                mods.push_back(output_module);
            }
            tp.chunk_modules.push_back(std::move(mods));
        }
    }
    const std::string order = effective_order(job, p.order);
    if (order != effective_order(job, "tp-cp-ep-dp-pp"))
        tp.notes.push_back("parallel.order = \"" + p.order + "\": torchtitan's device mesh is fixed (pp, dp, cp, tp "
                           "from outermost to innermost)");
    if (p.pp > 1 && p.vpp > 1 && p.microbatch_group_size > 0 && p.microbatch_group_size != p.pp)  // l405
        tp.notes.push_back("parallel.microbatch_group_size = " + std::to_string(p.microbatch_group_size) +
                           ": PyTorch's Interleaved1F1B runs micro-batches in groups of pp; the estimate assumed groups of " +
                           std::to_string(p.microbatch_group_size));
    if (std::string note = nvlink_domain_note(job, "torchtitan"); !note.empty()) tp.notes.push_back(note);  // gb200
    // overlap: FSDP2 always overlaps its collectives and prefetches one module ahead.
    if (!p.overlap_grad_reduce && p.dp > 1)
        tp.notes.push_back("parallel.overlap_grad_reduce = false: torchtitan's FSDP2 / DDP always overlap the "
                           "gradient reduction with the backward; the estimate assumed no overlap");
    if (p.zero == 3 && p.fsdp_prefetch != 1)
        tp.notes.push_back("parallel.fsdp_prefetch = " + std::to_string(p.fsdp_prefetch) +
                           ": FSDP2 prefetches one module ahead; other depths need set_modules_to_forward_prefetch / "
                           "set_modules_to_backward_prefetch in the model code");
    if (p.recompute == Recompute::selective && p.recompute_style == RecomputeStyle::megatron)
        tp.notes.push_back("parallel.recompute = \"selective\" with recompute_style = \"megatron\": torchtitan's "
                           "op-level selective checkpointing (selective_ac_option = \"op\") saves every other matmul, "
                           "not Megatron's attention-core recompute; memory differs (estimate it with "
                           "--set parallel.recompute_style=torchtitan-op)");
    if (t.data != "synthetic")
        tp.notes.push_back("training.data = \"" + t.data + "\": set a torchtitan dataset and tokenizer");
    else
        tp.notes.push_back("training.data = \"synthetic\": torchtitan has no synthetic dataset");
    if (!t.flash_attention)
        tp.notes.push_back("training.flash_attention = false: torchtitan always uses scaled_dot_product_attention "
                           "(flash kernels where available)");
    // papers: torchtitan's activation checkpointing keeps every saved layer input whole.
    if (job.parallel.distribute_saved_activations && job.parallel.recompute == Recompute::full && job.parallel.tp > 1 &&
        !job.parallel.sequence_parallel)
        tp.notes.push_back("parallel.distribute_saved_activations = true: torchtitan has no equivalent; each TP rank "
                           "keeps the whole checkpointed layer input, tp times what the estimate counted "
                           "(ptd estimate --set parallel.distribute_saved_activations=false)");
    if (t.fp8 != Fp8Recipe::none) {
        // fp8 (issue 15 point 3): torchao's float8 / mx converters. torchao has no delayed
        // scaling (removed); its tensorwise recipe is dynamic (current) scaling.
        if (t.fp8 == Fp8Recipe::delayed)
            return job_error(job, "training.fp8",
                             "got \"delayed\"; torchtitan's float8 (torchao) scales dynamically and has no delayed "
                             "scaling; allowed for --format " + fmt + ": \"tensorwise\", \"rowwise\", \"mxfp8\", "
                             "\"current\" (written as tensorwise)");
        if (t.fp8 == Fp8Recipe::current)
            tp.notes.push_back("training.fp8 = \"current\": written as torchao's tensorwise recipe (dynamic per-tensor "
                               "scaling, the same scaling); torchao re-casts weights every micro-batch and keeps bf16 "
                               "activations, unlike Transformer Engine's current scaling that the estimate modelled");
        if (t.fp8_format != Fp8Format::hybrid)
            tp.notes.push_back(std::string("training.fp8_format = \"") + to_string(t.fp8_format) +
                               "\": torchtitan has no format key; torchao's recipe fixes the FP8 formats");
        tp.fp8 = true;
        tp.fp8_filter_fqns.push_back(output_module);  // the output layer stays bf16, as the estimate assumes
        for (int i = 0; i < t.fp8_bf16_first_layers; ++i) tp.fp8_filter_fqns.push_back("layers." + std::to_string(i) + ".");
        for (int i = m.layers - t.fp8_bf16_last_layers; i < m.layers; ++i)
            tp.fp8_filter_fqns.push_back("layers." + std::to_string(i) + ".");
        // The Python config (main b5bcd76): Float8LinearConverter offers rowwise recipes only;
        // MXFP8LinearConverter converts the Linear modules whose name contains an entry of fqns.
        if (format == ExportFormat::torchtitan && (t.fp8 == Fp8Recipe::tensorwise || t.fp8 == Fp8Recipe::current))
            return job_error(job, "training.fp8",
                             std::string("got \"") + to_string(t.fp8) +
                                 "\"; torchtitan's Float8LinearConverter (current config system) has rowwise recipes only; "
                                 "allowed for --format torchtitan: \"rowwise\", \"mxfp8\" (tensorwise: --format "
                                 "torchtitan-toml, v0.2)");
        if (format == ExportFormat::torchtitan && !tp.flavor)
            tp.notes.push_back(std::string("training.fp8 = \"") + to_string(t.fp8) +
                               "\": pass the FP8 converter to model_registry(..., converters=[...]) once the model is "
                               "registered");
        if (t.fp8 == Fp8Recipe::mxfp8)
            for (int i = t.fp8_bf16_first_layers; i < m.layers - t.fp8_bf16_last_layers; ++i)
                tp.fp8_layers.push_back("layers." + std::to_string(i) + ".");
    }
    return tp;
}

// The train-config TOML of torchtitan v0.2.x (job_config.py of v0.2.2).
Result<ExportOutput> export_torchtitan_toml(const JobSpec& job) {
    const ModelSpec& m = job.model;
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    auto plan = plan_torchtitan(job, ExportFormat::torchtitan_toml, "output");
    if (!plan) return std::unexpected(plan.error());
    ExportOutput out;
    out.notes = plan->notes;

    TomlWriter w;
    w.comment("torchtitan train config written by `ptd export --format torchtitan-toml` from " + job.origin.file);
    w.comment("for torchtitan up to v0.2.2 (torchtitan/config/job_config.py); pass with --job.config_file");
    w.header("job");
    w.str("description", m.name + " on " + std::to_string(job.world_size()) + " GPUs (ptd export)");

    w.header("model");
    if (plan->flavor) {
        w.str("name", plan->family);  // mlaio: llama3, qwen3 or deepseek_v3 (v0.2.2 has all three)
        w.str("flavor", plan->flavor);
    } else {
        w.comment("no torchtitan flavor matches " + m.name + " (" + std::to_string(m.layers) + " layers, hidden " +
                  std::to_string(m.hidden) + ", " + std::to_string(m.heads) + " heads, " + std::to_string(m.kv_heads) +
                  " KV heads, ffn " + std::to_string(m.ffn_hidden) + ", vocab " + std::to_string(m.vocab) +
                  "): register one and set name / flavor");
    }
    if (plan->fp8) w.strings("converters", {t.fp8 == Fp8Recipe::mxfp8 ? "quantize.linear.mx" : "quantize.linear.float8"});

    w.header("optimizer");
    w.str("name", t.optimizer == Optimizer::adam ? "Adam" : "AdamW");
    w.dbl("lr", t.lr);
    w.dbl("beta1", 0.9);
    w.dbl("beta2", 0.95);
    w.dbl("weight_decay", t.weight_decay);

    w.header("lr_scheduler");
    w.int_("warmup_steps", t.warmup);
    w.str("decay_type", "cosine");
    w.dbl("min_lr_factor", t.lr > 0 ? decimal_ratio(t.min_lr, t.lr) : 0.0, "min_lr as a fraction of lr");

    // With pipelining torchtitan splits each rank's local batch into micro-batches of
    // pipeline_parallel_microbatch_size; without it, global > local·dp means accumulation.
    const int local = p.pp > 1 ? t.global_batch / p.dp : t.micro_batch;
    w.header("training");
    w.int_("local_batch_size", local);
    w.int_("global_batch_size", t.global_batch);
    w.int_("seq_len", m.seq_len);
    w.dbl("max_norm", t.grad_clip);
    w.int_("steps", t.steps);
    w.str("mixed_precision_param", t.precision == Precision::bf16 ? "bfloat16" : "float32");
    if (plan->cpu_offload) w.boolean("enable_cpu_offload", true, "parameters, gradients, optimizer state in host memory");
    if (plan->fp8) {
        // fp8 (issue 15 point 3): torchtitan v0.2.x job_config.py — model.converters
        // ["quantize.linear.float8"] with [quantize.linear.float8] recipe_name, or
        // ["quantize.linear.mx"] with [quantize.linear.mx] (Blackwell; its default recipe
        // mxfp8_cublas); filter_fqns skips modules whose name contains an entry
        // (components/quantization/utils.py module_filter_fn): the output layer, bf16 layers.
        const bool mx = t.fp8 == Fp8Recipe::mxfp8;
        w.header(mx ? "quantize.linear.mx" : "quantize.linear.float8");
        if (!mx) w.str("recipe_name", t.fp8 == Fp8Recipe::rowwise ? "rowwise" : "tensorwise");
        w.strings("filter_fqns", plan->fp8_filter_fqns);
        w.header("compile");
        w.boolean("enable", true, "torchao's FP8 casts are fused by torch.compile (the estimate assumes it)");
    }

    w.header("parallelism");
    w.int_("data_parallel_replicate_degree", plan->replicate ? p.dp : 1);
    w.int_("data_parallel_shard_degree", plan->replicate ? 1 : p.dp);
    if (!plan->replicate && p.dp > 1 && p.zero != 3)
        w.str("fsdp_reshard_after_forward", "never", "keep gathered parameters to backward (≈ ZeRO-2)");
    w.int_("tensor_parallel_degree", p.tp);
    if (p.tp > 1 && !p.sequence_parallel)
        out.notes.push_back("parallel.sequence_parallel = false: torchtitan v0.2's tensor parallelism always shards "
                            "norms and dropout over the sequence (Megatron-style sequence parallelism)");
    w.int_("pipeline_parallel_degree", p.pp);
    if (p.pp > 1) {
        w.str("pipeline_parallel_schedule", p.vpp > 1 ? "Interleaved1F1B" : "1F1B");
        w.int_("pipeline_parallel_microbatch_size", t.micro_batch);
        w.string_lists("module_fqns_per_model_part", plan->chunk_modules);
    }
    w.int_("context_parallel_degree", p.cp);
    if (m.experts > 1) w.int_("expert_parallel_degree", p.ep);
    // etp: torchtitan v0.2.x's default expert_tensor_parallel_degree is 1; tp is written (plan_torchtitan
    // refuses any other value).
    if (m.experts > 1 && p.ep > 1 && p.etp() != 1) w.int_("expert_tensor_parallel_degree", p.etp());
    // parallel.tp_comm_overlap: async TP, which torchtitan runs only under torch.compile.
    const bool async_tp = (p.tp_comm_overlap || p.async_tp) && p.tp > 1;  // tt405: parallel.async_tp is the same key
    if (async_tp)
        w.boolean("enable_async_tensor_parallel", true,
                  p.async_tp ? "parallel.async_tp (needs [compile])" : "parallel.tp_comm_overlap (needs [compile])");
    if (async_tp) {
        w.header("compile");
        w.boolean("enable", true);
        w.strings("components", {"model", "loss"});
    }

    w.header("activation_checkpoint");
    w.str("mode", to_string(p.recompute));
    if (p.recompute == Recompute::selective) w.str("selective_ac_option", "op");

    w.header("debug");
    w.int_("seed", t.seed);
    out.text = w.text();
    return out;
}

std::string py_str(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        if (c == '\n') { out += "\\n"; continue; }
        out += c;
    }
    return out + "\"";
}

// A Python module for torchtitan's config system (Feb 2026 on): a function returning a
// Trainer.Config, run with `-m torchtitan.train --module <file> --config <function>`.
Result<ExportOutput> export_torchtitan_python(const JobSpec& job) {
    const ModelSpec& m = job.model;
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    auto plan = plan_torchtitan(job, ExportFormat::torchtitan, "lm_head");
    if (!plan) return std::unexpected(plan.error());
    ExportOutput out;
    out.notes = plan->notes;

    // torchtitan checks that each pipeline micro-batch's tokens split evenly over the
    // sequence-parallel tp ranks and 2·cp context chunks (Trainer.__init__).
    const long long tokens_per_micro = (long long)t.micro_batch * m.seq_len;
    const long long divisor = (long long)(p.sequence_parallel || p.tp == 1 ? p.tp : 1) * (p.cp > 1 ? 2 * p.cp : 1);
    if (tokens_per_micro % divisor != 0)
        return job_error(job, "model.seq_len",
                         "micro-batch of " + std::to_string(tokens_per_micro) + " tokens (micro_batch " +
                             std::to_string(t.micro_batch) + " × seq_len " + std::to_string(m.seq_len) +
                             "): torchtitan needs it divisible by tp × 2·cp = " + std::to_string(divisor) +
                             "; allowed for --format torchtitan: seq_len a multiple of " + std::to_string(divisor));

    // mlaio: the family's own baseline for the flavor, else its debugmodel (whose loss is then
    // given the model's vocabulary, as each baseline derives it: decoder_vocab_size(model_spec)).
    const std::string family = plan->family;
    const std::string baseline = plan->baseline ? plan->baseline : family + "_debugmodel";
    const bool set_loss = plan->flavor && !plan->baseline;
    const bool mtp_loss = plan->flavor && m.mtp_layers > 0;
    if (set_loss)
        out.notes.push_back("torchtitan has no Trainer.Config baseline for " + family + " " + plan->flavor + ": data, "
                            "tokenizer and checkpoints come from " + baseline + "() (a test tokenizer); set "
                            "config.hf_assets_path to the model's tokenizer");
    std::string py;
    auto line = [&](const std::string& l = {}) { py += l + "\n"; };
    line("# torchtitan config written by `ptd export --format torchtitan` from " + job.origin.file);
    line("# for torchtitan's Python config system (Feb 2026 on; checked against main b5bcd76).");
    line("# Save it as ptd_job.py where Python finds it (e.g. the torchtitan checkout) and run");
    line("#   torchrun --nproc_per_node=<GPUs per node> ... -m torchtitan.train --module ptd_job --config ptd_job");
    line("# on " + std::to_string(job.world_size()) + " GPUs. Data, tokenizer, loss, checkpoints and metrics come from");
    line("# torchtitan's " + baseline + "(); everything ptd plans is set below.");
    line("from torchtitan.components.optimizer import LRSchedulersContainer, OptimizersContainer, ParamGroupConfig");
    const bool async_tp = (p.tp_comm_overlap || p.async_tp) && p.tp > 1;  // parallel.tp_comm_overlap / async_tp (tt405)
    line(async_tp ? "from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig"
                  : "from torchtitan.config import ParallelismConfig, TrainingConfig");
    if (p.recompute != Recompute::none)
        line(std::string("from torchtitan.distributed.activation_checkpoint import ") +
             (p.recompute == Recompute::full ? "FullAC" : "SelectiveAC"));
    if (plan->fp8)
        line(std::string("from torchtitan.components.quantization import ") +
             (t.fp8 == Fp8Recipe::mxfp8 ? "MXFP8LinearConverter" : "Float8LinearConverter"));
    if (set_loss && !mtp_loss) line("from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss");
    if (set_loss || mtp_loss) line("from torchtitan.models.common.config_utils import decoder_vocab_size");
    if (plan->flavor) line("from torchtitan.models." + family + " import " + (mtp_loss ? "MTPLoss, " : "") + "model_registry");
    line("from torchtitan.models." + family + ".config_registry import " + baseline);
    line("from torchtitan.trainer import Trainer");
    line();
    if (!plan->flavor) {
        line();
        line("def _model_spec():");
        line("    # No torchtitan flavor matches " + m.name + " (" + std::to_string(m.layers) + " layers, hidden " +
             std::to_string(m.hidden) + ", " + std::to_string(m.heads) + " heads, " + std::to_string(m.kv_heads) +
             " KV heads,");
        line("    # ffn " + std::to_string(m.ffn_hidden) + ", vocab " + std::to_string(m.vocab) +
             "). Register one and return its ModelSpec here (and set the loss's global_vocab_size).");
        line("    raise NotImplementedError(" + py_str("ptd export: no torchtitan model flavor matches " + m.name) + ")");
        line();
    }
    line();
    line("def ptd_job() -> Trainer.Config:");
    line("    config = " + baseline + "()");
    if (plan->flavor && plan->fp8) {
        // fp8 (issue 15 point 3): the converter goes into the model spec; torch.compile fuses the casts.
        auto py_list = [](const std::vector<std::string>& v) {
            std::string l = "[";
            for (size_t i = 0; i < v.size(); ++i) l += (i ? ", " : "") + py_str(v[i]);
            return l + "]";
        };
        line("    config.compile.enable = True  # torchao's FP8 casts are fused by torch.compile");
        line("    config.model_spec = model_registry(");
        line("        " + py_str(plan->flavor) + "," + (mtp_loss ? " num_mtp_layers=" + std::to_string(m.mtp_layers) + "," : ""));
        line("        converters=[");
        if (t.fp8 == Fp8Recipe::mxfp8)
            line("            MXFP8LinearConverter.Config(fqns=" +
                 (t.fp8_bf16_first_layers + t.fp8_bf16_last_layers > 0 ? py_list(plan->fp8_layers) : std::string("[\"layers.\"]")) +
                 ", model_compile_enabled=True),  # the transformer layers, not lm_head");
        else
            line("            Float8LinearConverter.Config(recipe_name=\"rowwise\", filter_fqns=" + py_list(plan->fp8_filter_fqns) +
                 ", model_compile_enabled=True),");
        line("        ],");
        line("    )");
    } else {
        const std::string mtp_arg = mtp_loss ? ", num_mtp_layers=" + std::to_string(m.mtp_layers) : "";  // mlaio
        line(plan->flavor ? "    config.model_spec = model_registry(" + py_str(plan->flavor) + mtp_arg + ")" : "    config.model_spec = _model_spec()");
    }
    // mlaio: DeepSeek-V3's multi-token prediction trains with MTPLoss (deepseek_v3_debugmodel_mtp);
    // a debugmodel baseline's loss is sized for the debug vocabulary.
    if (mtp_loss)
        line("    config.loss = MTPLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec))");
    else if (set_loss)
        line("    config.loss = ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size="
             "decoder_vocab_size(config.model_spec)))");
    line("    config.optimizer = OptimizersContainer.Config(");
    line("        param_groups=[");
    line("            ParamGroupConfig(");
    line("                pattern=r\".*\",");
    line(std::string("                optimizer_name=") + (t.optimizer == Optimizer::adam ? "\"Adam\"" : "\"AdamW\"") + ",");
    line("                optimizer_kwargs={\"lr\": " + py_float(t.lr) + ", \"betas\": (0.9, 0.95), \"weight_decay\": " +
         py_float(t.weight_decay) + "},");
    line("            )");
    line("        ]");
    line("    )");
    line("    config.lr_scheduler = LRSchedulersContainer.Config(");
    line("        warmup_steps=" + std::to_string(t.warmup) + ",");
    line("        decay_type=\"cosine\",");
    line("        min_lr_factor=" + py_float(t.lr > 0 ? decimal_ratio(t.min_lr, t.lr) : 0.0) + ",  # min_lr as a fraction of lr");
    line("    )");
    line("    config.training = TrainingConfig(");
    line("        num_tokens_per_microbatch_per_dp_rank=" + std::to_string(tokens_per_micro) + ",  # micro-batch " +
         std::to_string(t.micro_batch) + " × " + std::to_string(m.seq_len) + " tokens");
    line("        num_tokens_per_train_step=" + std::to_string((long long)t.global_batch * m.seq_len) + ",  # global batch " +
         std::to_string(t.global_batch) + " × " + std::to_string(m.seq_len) + " tokens");
    line("        max_context_length=" + std::to_string(m.seq_len) + ",");
    line("        max_norm=" + py_float(t.grad_clip) + ",");
    line("        steps=" + std::to_string(t.steps) + ",");
    line(std::string("        mixed_precision_param=") + (t.precision == Precision::bf16 ? "\"bfloat16\"" : "\"float32\"") + ",");
    // Trainer.Config refuses CUDA graphs with pipelining, and with expert parallelism
    // unless a host-sync-free token dispatcher is configured.
    if (p.pp > 1 || p.ep > 1) line("        disable_cuda_graphs=True,");
    if (plan->cpu_offload) line("        enable_cpu_offload=True,  # parameters, gradients, optimizer state in host memory");
    line("    )");
    line("    config.parallelism = ParallelismConfig(");
    line("        data_parallel_replicate_degree=" + std::to_string(plan->replicate ? p.dp : 1) + ",");
    line("        data_parallel_shard_degree=" + std::to_string(plan->replicate ? 1 : p.dp) + ",");
    if (!plan->replicate && p.dp > 1 && p.zero != 3)
        line("        fsdp_reshard_after_forward=\"never\",  # keep gathered parameters to backward (≈ ZeRO-2)");
    line("        tensor_parallel_degree=" + std::to_string(p.tp) + ",");
    if (p.tp > 1) line(std::string("        enable_sequence_parallel=") + (p.sequence_parallel ? "True" : "False") + ",");
    line("        pipeline_parallel_degree=" + std::to_string(p.pp) + ",");
    if (p.pp > 1) {
        line(std::string("        pipeline_parallel_schedule=") + (p.vpp > 1 ? "\"Interleaved1F1B\"" : "\"1F1B\"") + ",");
        line("        num_pp_microbatches=" + std::to_string(plan->micro_batches) + ",");
        line("        module_fqns_per_model_part=[");
        for (const auto& chunk : plan->chunk_modules) {
            std::string l = "            [";
            for (size_t i = 0; i < chunk.size(); ++i) l += (i ? ", " : "") + py_str(chunk[i]);
            line(l + "],");
        }
        line("        ],");
    }
    line("        context_parallel_degree=" + std::to_string(p.cp) + ",");
    if (m.experts > 1) line("        expert_parallel_degree=" + std::to_string(p.ep) + ",");
    line("    )");
    if (async_tp)  // async TP runs only under torch.compile (CompileConfig.__post_init__)
        line(std::string("    config.compile = CompileConfig(enable=True, enable_async_tensor_parallel=True)  # ") +
             (p.async_tp ? "parallel.async_tp" : "parallel.tp_comm_overlap"));
    line(p.recompute == Recompute::full        ? "    config.activation_checkpoint = FullAC.Config()"
         : p.recompute == Recompute::selective ? "    config.activation_checkpoint = SelectiveAC.Config()"
                                               : "    config.activation_checkpoint = None");
    line("    config.debug.seed = " + std::to_string(t.seed));
    line("    return config");
    out.text = py;
    return out;
}

}  // namespace

Result<ExportOutput> export_job(const JobSpec& job, ExportFormat format) {
    switch (format) {
        case ExportFormat::megatron: return export_megatron(job);
        case ExportFormat::deepspeed: return export_deepspeed(job);
        case ExportFormat::torchtitan: return export_torchtitan_python(job);
        case ExportFormat::torchtitan_toml: return export_torchtitan_toml(job);
    }
    return fail(SourceLoc{}, "--format", "unknown export format");
}

std::vector<FormatExportability> exportability(const JobSpec& job) {
    std::vector<FormatExportability> out;
    for (ExportFormat f : kExportFormats) {
        FormatExportability e;
        e.format = f;
        if (auto r = export_job(job, f); !r) {
            e.ok = false;
            const Diagnostic& d = r.error().diagnostics.front();
            e.key = d.key;
            e.reason = d.message;
        }
        out.push_back(std::move(e));
    }
    return out;
}

}  // namespace ptd
