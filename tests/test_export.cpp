// test_export.cpp — `ptd export` and `--set` below the CLI: every option an export writes
// is a real option of its framework (allow-lists taken from the sources cited in
// docs/cli.md), the numbers match the job, and what a framework cannot express is an
// error naming the key or a note. Also the override reader (job_overrides.h), which
// turns `--set` into the same checks as a file line.
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "ptd/export.h"
#include "ptd/job_overrides.h"
#include "ptd/presets.h"

namespace {

using namespace ptd;

const std::string kJobs = PTD_SOURCE_DIR "/assets/jobs/";

const PresetCatalog& presets() { return embedded_presets(); }

JobSpec job(const std::string& file, const std::vector<std::string>& sets = {}) {
    auto j = load_job_file_with_overrides(kJobs + file, sets, presets());
    EXPECT_TRUE(j) << (j ? "" : j.error().str());
    return j ? *j : JobSpec{};
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

bool any_note(const ExportOutput& o, const std::string& sub) {
    for (const std::string& n : o.notes)
        if (contains(n, sub)) return true;
    return false;
}

// Megatron-LM options this exporter may write (megatron/training/arguments.py).
const std::set<std::string> kMegatronOptions = {
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage",
    "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers", "--context-parallel-size",
    "--expert-model-parallel-size", "--sequence-parallel", "--use-distributed-optimizer", "--overlap-grad-reduce",
    "--overlap-param-gather", "--use-tp-pp-dp-mapping", "--num-layers", "--hidden-size", "--ffn-hidden-size",
    "--num-attention-heads", "--group-query-attention", "--num-query-groups", "--seq-length",
    "--max-position-embeddings", "--make-vocab-size-divisible-by", "--position-embedding-type", "--rotary-base",
    "--normalization", "--norm-epsilon", "--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
    "--add-qkv-bias", "--num-experts", "--moe-router-topk", "--use-flash-attn", "--attention-backend",
    "--micro-batch-size", "--global-batch-size", "--bf16", "--fp16", "--recompute-granularity", "--recompute-method",
    "--recompute-num-layers", "--optimizer", "--adam-beta1", "--adam-beta2", "--lr", "--min-lr", "--lr-decay-style",
    "--lr-warmup-iters", "--train-iters", "--weight-decay", "--clip-grad", "--seed", "--mock-data", "--tokenizer-type",
    "--vocab-size", "--data-path"};

// "--flag value" per line, every line but the last ending in " \".
std::vector<std::pair<std::string, std::string>> megatron_args(const std::string& text) {
    std::vector<std::pair<std::string, std::string>> out;
    std::istringstream in(text);
    std::string line;
    std::vector<std::string> lines;
    while (std::getline(in, line)) lines.push_back(line);
    for (size_t i = 0; i < lines.size(); ++i) {
        std::string l = lines[i];
        const bool last = i + 1 == lines.size();
        EXPECT_EQ(l.ends_with(" \\"), !last) << "line " << i << ": " << l;
        if (!last) l.resize(l.size() - 2);
        size_t sp = l.find(' ');
        out.emplace_back(l.substr(0, sp), sp == std::string::npos ? "" : l.substr(sp + 1));
    }
    return out;
}

std::string value_of(const std::vector<std::pair<std::string, std::string>>& args, const std::string& flag) {
    for (const auto& [f, v] : args)
        if (f == flag) return v;
    return "<absent>";
}

TEST(ExportMegatron, Gpt3PaperLayout) {
    auto out = export_job(job("gpt3-175b-a100.toml"), ExportFormat::megatron);
    ASSERT_TRUE(out) << out.error().str();
    auto args = megatron_args(out->text);
    for (const auto& [flag, value] : args) EXPECT_TRUE(kMegatronOptions.contains(flag)) << flag;
    EXPECT_TRUE(contains(out->text, "--tensor-model-parallel-size 8 \\\n"));
    EXPECT_EQ(value_of(args, "--pipeline-model-parallel-size"), "8");
    EXPECT_EQ(value_of(args, "--num-layers"), "96");
    EXPECT_EQ(value_of(args, "--hidden-size"), "12288");
    EXPECT_EQ(value_of(args, "--global-batch-size"), "1536");
    EXPECT_EQ(value_of(args, "--micro-batch-size"), "1");
    EXPECT_EQ(value_of(args, "--recompute-granularity"), "full");
    EXPECT_EQ(value_of(args, "--recompute-method"), "uniform");
    EXPECT_EQ(value_of(args, "--recompute-num-layers"), "1");
    EXPECT_EQ(value_of(args, "--fp16"), "");
    EXPECT_EQ(value_of(args, "--bf16"), "<absent>");
    EXPECT_EQ(value_of(args, "--position-embedding-type"), "learned_absolute");
    EXPECT_EQ(value_of(args, "--swiglu"), "<absent>");
    EXPECT_EQ(value_of(args, "--use-distributed-optimizer"), "<absent>");
}

TEST(ExportMegatron, LlamaInterleavedDistributedOptimizer) {
    auto out = export_job(job("llama3-70b-h100.toml"), ExportFormat::megatron);
    ASSERT_TRUE(out) << out.error().str();
    auto args = megatron_args(out->text);
    for (const auto& [flag, value] : args) EXPECT_TRUE(kMegatronOptions.contains(flag)) << flag;
    EXPECT_EQ(value_of(args, "--num-layers-per-virtual-pipeline-stage"), "4");  // 80 / (4 · 5)
    EXPECT_EQ(value_of(args, "--num-query-groups"), "8");
    EXPECT_EQ(value_of(args, "--group-query-attention"), "");
    EXPECT_EQ(value_of(args, "--normalization"), "RMSNorm");
    EXPECT_EQ(value_of(args, "--rotary-base"), "500000");
    EXPECT_EQ(value_of(args, "--sequence-parallel"), "");
    EXPECT_EQ(value_of(args, "--use-distributed-optimizer"), "");
    EXPECT_EQ(value_of(args, "--overlap-param-gather"), "");
    EXPECT_EQ(value_of(args, "--recompute-granularity"), "selective");
    EXPECT_EQ(value_of(args, "--untie-embeddings-and-output-weights"), "");
    EXPECT_EQ(value_of(args, "--disable-bias-linear"), "");
    EXPECT_EQ(value_of(args, "--use-flash-attn"), "");
    EXPECT_EQ(value_of(args, "--bf16"), "");
}

TEST(ExportMegatron, ZeroTwoAndThreeAreErrors) {
    for (const char* z : {"parallel.zero=2", "parallel.zero=3"}) {
        auto out = export_job(job("llama3-8b-h100.toml", {z}), ExportFormat::megatron);
        ASSERT_FALSE(out) << z;
        const Diagnostic& d = out.error().diagnostics.front();
        EXPECT_EQ(d.key, "parallel.zero");
        EXPECT_TRUE(contains(d.message, "no ZeRO-2/3")) << d.message;
        EXPECT_TRUE(contains(d.message, "distributed_optimizer")) << d.message;
        EXPECT_EQ(d.where.file, std::string("--set ") + z);  // the override, not a file line
    }
    // ZeRO-1 is Megatron's distributed optimizer, said in a note.
    auto one = export_job(job("llama3-8b-h100.toml"), ExportFormat::megatron);
    ASSERT_TRUE(one);
    EXPECT_TRUE(contains(one->text, "--use-distributed-optimizer"));
    EXPECT_TRUE(any_note(*one, "ZeRO-1 equivalent"));
}

TEST(ExportMegatron, UnevenStages) {
    const std::vector<std::string> base = {"parallel.pp=4", "parallel.dp=1"};
    auto first_last = base;
    first_last.push_back("parallel.layers_per_stage=[6, 9, 9, 8]");
    auto out = export_job(job("llama3-8b-h100.toml", first_last), ExportFormat::megatron);
    ASSERT_TRUE(out) << out.error().str();
    auto args = megatron_args(out->text);
    EXPECT_EQ(value_of(args, "--decoder-first-pipeline-num-layers"), "6");
    EXPECT_EQ(value_of(args, "--decoder-last-pipeline-num-layers"), "8");

    auto first_only = base;
    first_only.push_back("parallel.layers_per_stage=[5, 9, 9, 9]");
    out = export_job(job("llama3-8b-h100.toml", first_only), ExportFormat::megatron);
    ASSERT_TRUE(out);
    args = megatron_args(out->text);
    EXPECT_EQ(value_of(args, "--decoder-first-pipeline-num-layers"), "5");
    EXPECT_EQ(value_of(args, "--decoder-last-pipeline-num-layers"), "<absent>");

    auto middle = base;
    middle.push_back("parallel.layers_per_stage=[6, 9, 8, 9]");
    out = export_job(job("llama3-8b-h100.toml", middle), ExportFormat::megatron);
    ASSERT_FALSE(out);
    EXPECT_EQ(out.error().diagnostics.front().key, "parallel.layers_per_stage");
    EXPECT_TRUE(contains(out.error().str(), "first and/or last")) << out.error().str();
}

TEST(ExportDeepSpeed, ConfigMatchesJob) {
    JobSpec j = job("llama3-8b-h100.toml");
    auto out = export_job(j, ExportFormat::deepspeed);
    ASSERT_TRUE(out) << out.error().str();
    auto ds = nlohmann::json::parse(out->text);
    const std::set<std::string> top = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                                       "gradient_clipping", "bf16", "fp16", "zero_optimization", "optimizer",
                                       "scheduler", "activation_checkpointing"};
    for (const auto& [k, v] : ds.items()) EXPECT_TRUE(top.contains(k)) << k;
    EXPECT_EQ(ds["train_batch_size"], 64);
    EXPECT_EQ(ds["train_micro_batch_size_per_gpu"], 1);
    EXPECT_EQ(ds["gradient_accumulation_steps"], 16);
    // DeepSpeed requires train_batch_size = micro · accumulation · data-parallel size.
    EXPECT_EQ(ds["train_batch_size"].get<int>(),
              ds["train_micro_batch_size_per_gpu"].get<int>() * ds["gradient_accumulation_steps"].get<int>() * j.parallel.dp);
    EXPECT_EQ(ds["zero_optimization"]["stage"], 1);
    EXPECT_EQ(ds["zero_optimization"]["reduce_bucket_size"], 500000000);
    EXPECT_EQ(ds["zero_optimization"]["allgather_bucket_size"], 500000000);
    EXPECT_TRUE(ds["bf16"]["enabled"].get<bool>());
    EXPECT_EQ(ds["optimizer"]["type"], "AdamW");
    EXPECT_EQ(ds["scheduler"]["type"], "WarmupCosineLR");
    EXPECT_DOUBLE_EQ(ds["scheduler"]["params"]["cos_min_ratio"].get<double>(), 0.1);
    EXPECT_TRUE(any_note(*out, "tp 2 × pp 1"));  // tp/pp live outside ds_config
}

TEST(ExportDeepSpeed, ZeroThreeFp16AndFullRecompute) {
    auto out = export_job(job("llama3-8b-h100.toml", {"parallel.zero=3", "training.precision=fp16", "parallel.recompute=full",
                                                      "training.optimizer=adam"}),
                          ExportFormat::deepspeed);
    ASSERT_TRUE(out) << out.error().str();
    auto ds = nlohmann::json::parse(out->text);
    EXPECT_EQ(ds["zero_optimization"]["stage"], 3);
    EXPECT_TRUE(ds["zero_optimization"].contains("stage3_prefetch_bucket_size"));
    EXPECT_FALSE(ds["zero_optimization"].contains("allgather_bucket_size"));
    EXPECT_TRUE(ds["fp16"]["enabled"].get<bool>());
    EXPECT_EQ(ds["fp16"]["loss_scale"], 0);
    EXPECT_FALSE(ds["bf16"]["enabled"].get<bool>());
    EXPECT_TRUE(ds.contains("activation_checkpointing"));
    EXPECT_EQ(ds["optimizer"]["type"], "Adam");
    EXPECT_FALSE(ds["optimizer"]["params"]["adam_w_mode"].get<bool>());  // L2-coupled Adam
}

TEST(ExportTorchtitan, ParsesWithDegrees) {
    auto out = export_job(job("llama3-70b-h100.toml"), ExportFormat::torchtitan);
    ASSERT_TRUE(out) << out.error().str();
    toml::table doc = toml::parse(out->text);
    // Keys of torchtitan/config/job_config.py, per table.
    const std::map<std::string, std::set<std::string>> allowed = {
        {"job", {"description"}},
        {"model", {"name", "flavor"}},
        {"optimizer", {"name", "lr", "beta1", "beta2", "weight_decay"}},
        {"lr_scheduler", {"warmup_steps", "decay_type", "lr_min"}},
        {"training", {"local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps", "mixed_precision_param", "seed"}},
        {"parallelism",
         {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
          "tensor_parallel_degree", "pipeline_parallel_degree", "pipeline_parallel_schedule",
          "pipeline_parallel_microbatch_size", "pipeline_parallel_split_points", "context_parallel_degree",
          "expert_parallel_degree"}},
        {"activation_checkpoint", {"mode", "selective_ac_option"}}};
    for (const auto& [table, node] : doc) {
        ASSERT_TRUE(allowed.contains(std::string(table.str()))) << table.str();
        for (const auto& [key, v] : *node.as_table())
            EXPECT_TRUE(allowed.at(std::string(table.str())).contains(std::string(key.str()))) << table.str() << "." << key.str();
    }
    EXPECT_EQ(doc["parallelism"]["tensor_parallel_degree"].value_or(0), 8);
    EXPECT_EQ(doc["parallelism"]["pipeline_parallel_degree"].value_or(0), 4);
    EXPECT_EQ(doc["parallelism"]["data_parallel_shard_degree"].value_or(0), 2);
    EXPECT_EQ(doc["parallelism"]["context_parallel_degree"].value_or(0), 1);
    EXPECT_EQ(doc["parallelism"]["pipeline_parallel_schedule"].value_or(std::string()), "Interleaved1F1B");
    EXPECT_EQ(doc["parallelism"]["pipeline_parallel_split_points"].as_array()->size(), 19u);  // 4 · 5 chunks
    EXPECT_EQ(doc["training"]["global_batch_size"].value_or(0), 512);
    EXPECT_EQ(doc["training"]["local_batch_size"].value_or(0), 256);  // global / dp, split into micro-batches of 1
    EXPECT_EQ(doc["training"]["seq_len"].value_or(0), 8192);
    EXPECT_EQ(doc["model"]["flavor"].value_or(std::string()), "70B");
    EXPECT_EQ(doc["activation_checkpoint"]["mode"].value_or(std::string()), "selective");
    EXPECT_TRUE(any_note(*out, "FSDP2"));
}

TEST(ExportTorchtitan, UnsupportedSettingsAreErrors) {
    auto fp16 = export_job(job("llama3-8b-h100.toml", {"training.precision=fp16"}), ExportFormat::torchtitan);
    ASSERT_FALSE(fp16);
    EXPECT_EQ(fp16.error().diagnostics.front().key, "training.precision");
    auto sgd = export_job(job("llama3-8b-h100.toml", {"training.optimizer=sgd"}), ExportFormat::torchtitan);
    ASSERT_FALSE(sgd);
    EXPECT_EQ(sgd.error().diagnostics.front().key, "training.optimizer");
    // A model without a torchtitan flavor still exports, with a note and no guessed flavor.
    auto gpt = export_job(job("gpt2-124m-local.toml"), ExportFormat::torchtitan);
    ASSERT_TRUE(gpt) << gpt.error().str();
    toml::table doc = toml::parse(gpt->text);
    EXPECT_FALSE(doc["model"]["flavor"]);
    EXPECT_TRUE(any_note(*gpt, "no torchtitan flavor"));
}

TEST(ExportFormatWord, ParsesAndSuggests) {
    EXPECT_EQ(*parse_export_format("deepspeed"), ExportFormat::deepspeed);
    auto bad = parse_export_format("megatrom");
    ASSERT_FALSE(bad);
    EXPECT_TRUE(contains(bad.error().str(), "did you mean \"megatron\"")) << bad.error().str();
}

// ---- --set overrides ---------------------------------------------------------------------

TEST(JobOverrides, ParseSplitsKeyAndValue) {
    auto o = parse_override("cluster.gpu.memory_gib = 40");
    ASSERT_TRUE(o);
    EXPECT_EQ(o->path, (std::vector<std::string>{"cluster", "gpu", "memory_gib"}));
    EXPECT_EQ(o->value, "40");
    auto section = parse_override("paralel.tp=2");
    ASSERT_FALSE(section);
    EXPECT_TRUE(contains(section.error().str(), "did you mean \"parallel\"")) << section.error().str();
    EXPECT_TRUE(contains(section.error().str(), "model, cluster, parallel, training, launch, estimate"));
    EXPECT_FALSE(parse_override("parallel.tp"));
    EXPECT_FALSE(parse_override("parallel=4"));
    EXPECT_FALSE(parse_override("parallel..tp=4"));
}

TEST(JobOverrides, ValuesAreTypedLikeTheFile) {
    JobSpec j = job("llama3-8b-h100.toml", {"parallel.recompute=full", "training.lr=1e-4", "training.flash_attention=false",
                                            "parallel.tp=4", "parallel.dp=2", "estimate.headroom=0.1",
                                            "estimate.attention_flops=\"causal\"", "launch.env=[\"NCCL_DEBUG\"]"});
    EXPECT_EQ(j.parallel.recompute, Recompute::full);
    EXPECT_DOUBLE_EQ(j.training.lr, 1e-4);
    EXPECT_FALSE(j.training.flash_attention);
    EXPECT_EQ(j.parallel.tp, 4);
    EXPECT_DOUBLE_EQ(j.estimate.headroom, 0.1);
    EXPECT_EQ(j.estimate.attention_flops, AttentionFlops::causal);
    EXPECT_EQ(j.launch.env, std::vector<std::string>{"NCCL_DEBUG"});
    EXPECT_EQ(j.where("parallel.tp").file, "--set parallel.tp=4");
}

TEST(JobOverrides, ErrorsNameTheOverride) {
    auto unknown = load_job_file_with_overrides(kJobs + "llama3-8b-h100.toml", {"parallel.tpp=4"}, presets());
    ASSERT_FALSE(unknown);
    const Diagnostic& d = unknown.error().diagnostics.front();
    EXPECT_EQ(d.where.file, "--set parallel.tpp=4");
    EXPECT_EQ(d.where.line, 0);
    EXPECT_TRUE(contains(d.message, "did you mean \"tp\"")) << d.message;

    auto range = load_job_file_with_overrides(kJobs + "llama3-8b-h100.toml", {"parallel.zero=7"}, presets());
    ASSERT_FALSE(range);
    EXPECT_EQ(format_diagnostic(range.error().diagnostics.front()),
              "--set parallel.zero=7: error: parallel.zero: got 7; allowed: 0 .. 3");

    auto word = load_job_file_with_overrides(kJobs + "llama3-8b-h100.toml", {"training.precision=bf61"}, presets());
    ASSERT_FALSE(word);
    EXPECT_TRUE(contains(word.error().str(), "allowed: fp32, bf16, fp16")) << word.error().str();

    auto not_table = load_job_file_with_overrides(kJobs + "llama3-8b-h100.toml", {"parallel.tp.x=1"}, presets());
    ASSERT_FALSE(not_table);
    EXPECT_TRUE(contains(not_table.error().str(), "not a table")) << not_table.error().str();
}

TEST(JobOverrides, GpuKeysAndPresets) {
    // `gpu = "h100-sxm"` becomes a [cluster.gpu] table on that preset.
    JobSpec j = job("llama3-8b-h100.toml", {"cluster.gpu.memory_gib=40"});
    EXPECT_DOUBLE_EQ(j.cluster.gpu.memory_gib, 40);
    EXPECT_EQ(j.cluster.gpu.bf16_tflops, presets().find_gpu("h100-sxm")->bf16_tflops);
    JobSpec a100 = job("llama3-8b-h100.toml", {"cluster.gpu=a100-80gb"});
    EXPECT_EQ(a100.cluster.gpu.name, "a100-80gb");
    // A new model preset replaces the model (the file's keys belonged to the old one).
    JobSpec m = job("gpt2-124m-local.toml", {"model.preset=tiny-gpt", "model.seq_len=32"});
    EXPECT_EQ(m.model.name, "tiny-gpt");
    EXPECT_EQ(m.model.seq_len, 32);
    EXPECT_EQ(m.model.layers, presets().find_model("tiny-gpt")->layers);
}

TEST(JobOverrides, BuiltInJobs) {
    auto j = apply_overrides(default_job(presets()), {"parallel.tp=8", "model.seq_len=2048"}, presets());
    ASSERT_TRUE(j) << j.error().str();
    EXPECT_EQ(j->parallel.tp, 8);
    EXPECT_EQ(j->parallel.dp, 2);  // re-derived: 32 / (8 · 2)
    EXPECT_EQ(j->model.seq_len, 2048);
    EXPECT_EQ(j->origin.model_preset, "llama2-7b");
    auto bad = apply_overrides(default_job(presets()), {"parallel.tp=3"}, presets());
    ASSERT_FALSE(bad);
    for (const Diagnostic& d : bad.error().diagnostics) EXPECT_EQ(d.where.line, 0) << format_diagnostic(d);
}

}  // namespace
