// export.cpp — JobSpec → Megatron-LM arguments, DeepSpeed ds_config JSON, a torchtitan
// Python config module, or the TOML of torchtitan v0.2.x: the format names, export_job
// and what the targets share. Each target has its own file (megatron.cpp, deepspeed.cpp,
// torchtitan_plan.cpp with torchtitan_toml.cpp and torchtitan_python.cpp).
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
#include "ptd/export/export.h"

#include "export/export_internal.h"

namespace ptd {

const char* to_string(ExportFormat f) {
    switch (f) {
        case ExportFormat::megatron: return "megatron";
        case ExportFormat::deepspeed: return "deepspeed";
        case ExportFormat::torchtitan: return "torchtitan";
        case ExportFormat::torchtitan_toml: return "torchtitan-toml";
        case ExportFormat::nemo: return "nemo";
    }
    return "?";
}

Result<ExportFormat> parse_export_format(std::string_view word) {
    return export_internal::parse_word(word, kExportFormats, "--format");
}

namespace export_internal {

std::string num(double v) { return shortest_decimal(v); }

std::string py_str(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out + "\"";
}

// A Python float literal (always with '.' or an exponent).
std::string py_float(double v) {
    std::string s = shortest_decimal(v);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
}

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

std::optional<std::unexpected<Error>> unsupported_outside_megatron(const JobSpec& job, const char* framework) {
    if (auto bad = unsupported_schedule(job, framework)) return bad;
    if (auto bad = unsupported_state_dtypes(job, framework)) return bad;
    return unsupported_recompute_modules(job, framework);
}

}  // namespace export_internal

Result<ExportOutput> export_job(const JobSpec& job, ExportFormat format) {
    switch (format) {
        case ExportFormat::megatron: return export_internal::export_megatron(job);
        case ExportFormat::deepspeed: return export_internal::export_deepspeed(job);
        case ExportFormat::torchtitan: return export_internal::export_torchtitan_python(job);
        case ExportFormat::torchtitan_toml: return export_internal::export_torchtitan_toml(job);
        case ExportFormat::nemo: return export_internal::export_nemo(job);
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
