// export.cpp — JobSpec → Megatron-LM arguments, DeepSpeed ds_config JSON, torchtitan TOML.
// Option names were checked against the frameworks' sources (docs/cli.md, "ptd export"):
//   Megatron-LM  megatron/training/arguments.py (core 0.14-era main, 2025)
//   DeepSpeed    deepspeed/runtime/config.py, zero/config.py, lr_schedules.py
//   torchtitan   torchtitan/config/job_config.py (2025)
// A setting the target cannot express is an error when the run would be a different
// training run (ZeRO-2/3 in Megatron, fp16 in torchtitan), otherwise a note.
#include "ptd/export.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "job_toml_internal.h"

namespace ptd {

const char* to_string(ExportFormat f) {
    switch (f) {
        case ExportFormat::megatron: return "megatron";
        case ExportFormat::deepspeed: return "deepspeed";
        case ExportFormat::torchtitan: return "torchtitan";
    }
    return "?";
}

Result<ExportFormat> parse_export_format(std::string_view word) {
    for (ExportFormat f : {ExportFormat::megatron, ExportFormat::deepspeed, ExportFormat::torchtitan})
        if (word == to_string(f)) return f;
    std::string hint = closest_match(word, {"megatron", "deepspeed", "torchtitan"});
    return fail(SourceLoc{}, "--format",
                "got \"" + std::string(word) + "\"" + (hint.empty() ? "" : " (did you mean \"" + hint + "\"?)") +
                    "; allowed: megatron, deepspeed, torchtitan");
}

namespace {

std::string num(double v) {
    std::ostringstream os;
    os.precision(10);
    os << v;
    return os.str();
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

std::string ints(const std::vector<int>& v) {
    std::string s;
    for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
    return s;
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

Result<ExportOutput> export_megatron(const JobSpec& job) {
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
        std::vector<int> chunks = chunk_layers(job), stages = stage_layers(job);
        const bool even_chunks = std::adjacent_find(chunks.begin(), chunks.end(), std::not_equal_to<>()) == chunks.end();
        if (!even_chunks) {
            if (p.vpp > 1)
                return job_error(job, "parallel.layers_per_stage",
                                 "model chunks of " + ints(chunks) + " layers with vpp " + I(p.vpp) +
                                     ": Megatron-LM's interleaved schedule needs every chunk to hold the same number "
                                     "of layers (--num-layers-per-virtual-pipeline-stage); allowed: an even split, or vpp = 1");
            // Megatron splits the layers left by the first/last stage evenly over the others.
            const int n = (int)stages.size();
            std::vector<int> middle(stages.begin() + 1, stages.end() - 1);
            const bool middle_even = std::adjacent_find(middle.begin(), middle.end(), std::not_equal_to<>()) == middle.end();
            if (!middle_even)
                return job_error(job, "parallel.layers_per_stage",
                                 "stages of " + ints(stages) + " layers: Megatron-LM can only make the first and/or last "
                                 "stage differ (--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers) "
                                 "and splits the rest evenly; this export does not write --pipeline-model-parallel-layout; "
                                 "allowed: layers_per_stage where all stages but the first and last are equal");
            const int mid = middle.empty() ? -1 : middle.front();
            if (n == 2 || stages.front() != mid) arg("--decoder-first-pipeline-num-layers", I(stages.front()));
            if (n == 2 || stages.back() != mid) arg("--decoder-last-pipeline-num-layers", I(stages.back()));
        } else if (p.vpp > 1) {
            arg("--num-layers-per-virtual-pipeline-stage", I(chunks.front()));
        }
    }
    if (p.cp > 1) arg("--context-parallel-size", I(p.cp));
    if (m.experts > 1) arg("--expert-model-parallel-size", I(p.ep));
    if (p.sequence_parallel) arg("--sequence-parallel");
    if (p.distributed_optimizer || p.zero == 1) arg("--use-distributed-optimizer");
    if (p.zero == 1)
        out.notes.push_back("parallel.zero = 1 is written as --use-distributed-optimizer, Megatron-LM's sharding of "
                            "optimizer state over data-parallel ranks (the ZeRO-1 equivalent)");
    if (e.overlap_grad_reduce) arg("--overlap-grad-reduce");
    if (e.overlap_param_gather && (p.distributed_optimizer || p.zero == 1)) arg("--overlap-param-gather");
    const std::string order = effective_order(job, p.order);
    if (order == effective_order(job, "tp-cp-ep-pp-dp") && order != effective_order(job, "tp-cp-ep-dp-pp"))
        arg("--use-tp-pp-dp-mapping");
    else if (order != effective_order(job, "tp-cp-ep-dp-pp"))
        out.notes.push_back("parallel.order = \"" + p.order + "\": Megatron-LM places ranks tp-cp-ep-dp-pp (or tp-cp-ep-pp-dp "
                            "with --use-tp-pp-dp-mapping); this order has no flag, so ranks will be placed differently");

    // Model.
    arg("--num-layers", I(m.layers));
    arg("--hidden-size", I(m.hidden));
    arg("--ffn-hidden-size", I(m.ffn_hidden));
    arg("--num-attention-heads", I(m.heads));
    if (m.kv_heads != m.heads) {
        arg("--group-query-attention");
        arg("--num-query-groups", I(m.kv_heads));
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
    if (m.activation == Activation::swiglu) arg("--swiglu");
    if (!m.tied_embeddings) arg("--untie-embeddings-and-output-weights");
    if (!m.bias) {
        arg("--disable-bias-linear");
        if (m.qkv_bias) arg("--add-qkv-bias");
    }
    if (m.experts > 1) {
        arg("--num-experts", I(m.experts));
        arg("--moe-router-topk", I(m.top_k));
    }
    if (t.flash_attention) arg("--use-flash-attn");
    else arg("--attention-backend", "unfused");

    // Batch, precision, recomputation.
    arg("--micro-batch-size", I(t.micro_batch));
    arg("--global-batch-size", I(t.global_batch));
    if (t.precision == Precision::bf16) arg("--bf16");
    else if (t.precision == Precision::fp16) arg("--fp16");
    if (p.recompute == Recompute::selective) {
        arg("--recompute-granularity", "selective");
    } else if (p.recompute == Recompute::full) {
        arg("--recompute-granularity", "full");
        arg("--recompute-method", "uniform");
        arg("--recompute-num-layers", "1");
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
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    const EstimateSpec& e = job.estimate;
    ExportOutput out;
    nlohmann::ordered_json ds;
    ds["train_batch_size"] = t.global_batch;
    ds["train_micro_batch_size_per_gpu"] = t.micro_batch;
    ds["gradient_accumulation_steps"] = job.grad_accum();
    ds["gradient_clipping"] = t.grad_clip;
    ds["bf16"] = {{"enabled", t.precision == Precision::bf16}};
    if (t.precision == Precision::fp16) ds["fp16"] = {{"enabled", true}, {"loss_scale", 0}};  // 0 = dynamic
    else ds["fp16"] = {{"enabled", false}};

    const int stage = p.distributed_optimizer ? 1 : p.zero;
    const long long bucket = std::llround(e.zero_bucket_elements);
    nlohmann::ordered_json zero;
    zero["stage"] = stage;
    zero["overlap_comm"] = e.overlap_grad_reduce;
    zero["contiguous_gradients"] = true;
    zero["reduce_bucket_size"] = bucket;
    if (stage == 3) zero["stage3_prefetch_bucket_size"] = bucket;
    else zero["allgather_bucket_size"] = bucket;
    ds["zero_optimization"] = zero;
    if (p.distributed_optimizer)
        out.notes.push_back("parallel.distributed_optimizer is written as ZeRO stage 1 (the same sharding of "
                            "optimizer state over data-parallel ranks)");

    nlohmann::ordered_json opt;
    if (t.optimizer == Optimizer::sgd) {
        opt = {{"type", "SGD"}, {"params", {{"lr", t.lr}, {"weight_decay", t.weight_decay}}}};
    } else if (t.optimizer == Optimizer::adamw) {
        opt = {{"type", "AdamW"}, {"params", {{"lr", t.lr}, {"weight_decay", t.weight_decay}, {"betas", {0.9, 0.95}}}}};
    } else {
        // DeepSpeed's Adam is decoupled (AdamW) unless adam_w_mode is false.
        opt = {{"type", "Adam"},
               {"params", {{"lr", t.lr}, {"weight_decay", t.weight_decay}, {"betas", {0.9, 0.95}}, {"adam_w_mode", false}}}};
    }
    ds["optimizer"] = opt;
    ds["scheduler"] = {{"type", "WarmupCosineLR"},
                       {"params",
                        {{"total_num_steps", t.steps},
                         {"warmup_num_steps", t.warmup},
                         {"warmup_min_ratio", 0.0},
                         {"cos_min_ratio", t.lr > 0 ? t.min_lr / t.lr : 0.0},
                         {"warmup_type", "linear"}}}};
    if (p.recompute == Recompute::full) {
        ds["activation_checkpointing"] = {{"partition_activations", false},
                                          {"contiguous_memory_optimization", false},
                                          {"cpu_checkpointing", false}};
        out.notes.push_back("parallel.recompute = \"full\": activation_checkpointing configures "
                            "deepspeed.checkpointing; the model must call deepspeed.checkpointing.checkpoint per layer");
    } else if (p.recompute == Recompute::selective) {
        out.notes.push_back("parallel.recompute = \"selective\": ds_config has no selective recomputation; "
                            "recompute the attention core in the model code (Megatron-DeepSpeed: its recompute flags)");
    }

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
    if (p.cp > 1)
        out.notes.push_back("parallel.cp = " + std::to_string(p.cp) +
                            ": DeepSpeed has no ring-attention context parallelism in ds_config; DeepSpeed-Ulysses "
                            "sequence parallelism is a different algorithm, set in code");
    if (p.ep > 1)
        out.notes.push_back("parallel.ep = " + std::to_string(p.ep) +
                            ": expert parallelism is set in the model code (deepspeed.moe.layer.MoE(ep_size=" +
                            std::to_string(p.ep) + "))");
    if (p.sequence_parallel)
        out.notes.push_back("parallel.sequence_parallel: Megatron-style sequence parallelism is part of the "
                            "tensor-parallel model code, not ds_config");
    if (p.order != "tp-cp-ep-dp-pp")
        out.notes.push_back("parallel.order = \"" + p.order + "\": rank placement is decided by the launcher and "
                            "the model's process groups, not ds_config");
    out.text = ds.dump(2) + "\n";
    return out;
}

// ---- torchtitan --------------------------------------------------------------------------

Result<ExportOutput> export_torchtitan(const JobSpec& job) {
    const ModelSpec& m = job.model;
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    ExportOutput out;

    if (t.precision == Precision::fp16)
        return job_error(job, "training.precision",
                         "got \"fp16\"; torchtitan's mixed_precision_param allows bfloat16 or float32 only; "
                         "allowed for --format torchtitan: bf16, fp32");
    if (t.optimizer == Optimizer::sgd)
        return job_error(job, "training.optimizer",
                         "got \"sgd\"; torchtitan builds Adam and AdamW only; allowed for --format torchtitan: adamw, adam");

    TomlWriter w;
    w.comment("torchtitan train config written by `ptd export --format torchtitan` from " + job.origin.file);
    w.comment("keys: torchtitan/config/job_config.py; pass with --job.config_file");
    w.header("job");
    w.str("description", m.name + " on " + std::to_string(job.world_size()) + " GPUs (ptd export)");

    w.header("model");
    // torchtitan knows a model by name + flavor; only exact Llama 3 presets map to a flavor.
    const char* flavor = nullptr;
    if (job.origin.model_base && m == *job.origin.model_base) {
        if (job.origin.model_preset == "llama3-8b") flavor = "8B";
        else if (job.origin.model_preset == "llama3-70b") flavor = "70B";
        else if (job.origin.model_preset == "llama3-405b") flavor = "405B";
    }
    if (flavor) {
        w.str("name", "llama3");
        w.str("flavor", flavor);
    } else {
        w.comment("no torchtitan flavor matches " + m.name + " (" + std::to_string(m.layers) + " layers, hidden " +
                  std::to_string(m.hidden) + ", " + std::to_string(m.heads) + " heads, " + std::to_string(m.kv_heads) +
                  " KV heads, ffn " + std::to_string(m.ffn_hidden) + ", vocab " + std::to_string(m.vocab) +
                  "): register one and set name / flavor");
        out.notes.push_back("model \"" + m.name + "\" has no torchtitan flavor (only the llama3-8b/70b/405b presets "
                            "map to llama3 8B/70B/405B); register a flavor and set [model] name and flavor");
    }

    w.header("optimizer");
    w.str("name", t.optimizer == Optimizer::adam ? "Adam" : "AdamW");
    w.dbl("lr", t.lr);
    w.dbl("beta1", 0.9);
    w.dbl("beta2", 0.95);
    w.dbl("weight_decay", t.weight_decay);

    w.header("lr_scheduler");
    w.int_("warmup_steps", t.warmup);
    w.str("decay_type", "cosine");
    w.dbl("lr_min", t.lr > 0 ? t.min_lr / t.lr : 0.0, "a fraction of lr");

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
    w.int_("seed", t.seed);

    // torchtitan's DDP path is for pure data parallelism; with any other dimension the
    // data-parallel ranks shard with FSDP2.
    const bool pure_dp = p.tp == 1 && p.pp == 1 && p.cp == 1 && p.ep == 1;
    const bool replicate = pure_dp && p.zero == 0 && !p.distributed_optimizer;
    w.header("parallelism");
    w.int_("data_parallel_replicate_degree", replicate ? p.dp : 1);
    w.int_("data_parallel_shard_degree", replicate ? 1 : p.dp);
    if (!replicate && p.dp > 1 && p.zero != 3) {
        w.str("fsdp_reshard_after_forward", "never", "keep gathered parameters to backward (≈ ZeRO-2)");
        out.notes.push_back("parallel.zero = " + std::to_string(p.zero) + (p.distributed_optimizer ? " + distributed_optimizer" : "") +
                            ": torchtitan shards data-parallel ranks with FSDP2 (parameters, gradients and optimizer "
                            "state); written as data_parallel_shard_degree = " + std::to_string(p.dp) +
                            " with fsdp_reshard_after_forward = \"never\" (≈ ZeRO-2), so memory differs from the estimate");
    }
    w.int_("tensor_parallel_degree", p.tp);
    if (p.tp > 1 && !p.sequence_parallel)
        out.notes.push_back("parallel.sequence_parallel = false: torchtitan's tensor parallelism always shards norms "
                            "and dropout over the sequence (Megatron-style sequence parallelism)");
    w.int_("pipeline_parallel_degree", p.pp);
    if (p.pp > 1) {
        w.str("pipeline_parallel_schedule", p.vpp > 1 ? "Interleaved1F1B" : "1F1B");
        w.int_("pipeline_parallel_microbatch_size", t.micro_batch);
        std::vector<std::string> splits;
        std::vector<int> chunks = chunk_layers(job);
        int at = 0;
        for (size_t k = 0; k + 1 < chunks.size(); ++k) splits.push_back("layers." + std::to_string(at += chunks[k]));
        w.strings("pipeline_parallel_split_points", splits);
    }
    w.int_("context_parallel_degree", p.cp);
    if (m.experts > 1) w.int_("expert_parallel_degree", p.ep);
    if (p.order != "tp-cp-ep-dp-pp")
        out.notes.push_back("parallel.order = \"" + p.order + "\": torchtitan's device mesh is fixed (pp, dp, cp, tp "
                            "from outermost to innermost)");

    w.header("activation_checkpoint");
    w.str("mode", to_string(p.recompute));
    if (p.recompute == Recompute::selective) {
        w.str("selective_ac_option", "op");
        out.notes.push_back("parallel.recompute = \"selective\": torchtitan's op-level selective checkpointing "
                            "saves every other matmul, not Megatron's attention-core recompute; memory differs");
    }

    if (t.data != "synthetic")
        out.notes.push_back("training.data = \"" + t.data + "\": set [training] dataset / dataset_path to a torchtitan "
                            "dataset");
    else
        out.notes.push_back("training.data = \"synthetic\": torchtitan has no synthetic dataset; its default is c4_test");
    if (!t.flash_attention)
        out.notes.push_back("training.flash_attention = false: torchtitan always uses scaled_dot_product_attention "
                            "(flash kernels where available)");
    out.text = w.text();
    return out;
}

}  // namespace

Result<ExportOutput> export_job(const JobSpec& job, ExportFormat format) {
    switch (format) {
        case ExportFormat::megatron: return export_megatron(job);
        case ExportFormat::deepspeed: return export_deepspeed(job);
        case ExportFormat::torchtitan: return export_torchtitan(job);
    }
    return fail(SourceLoc{}, "--format", "unknown export format");
}

}  // namespace ptd
