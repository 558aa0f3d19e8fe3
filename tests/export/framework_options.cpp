// framework_options.cpp — `ptd export` and `--set` below the CLI: every option an export writes
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

#include "ptd/export/export.h"
#include "ptd/spec/job_overrides.h"
#include "ptd/plan/planner.h"
#include "ptd/spec/presets.h"

#include "export/framework_checks.h"
#include "job_test_util.h"

namespace {

using namespace ptd;

using namespace ptd_test;

TEST(ExportMegatron, Gpt3PaperLayout) {
    auto out = export_job(load_asset("gpt3-175b-a100.toml"), ExportFormat::megatron);
    ASSERT_TRUE(out) << out.error().str();
    auto args = megatron_args(out->text);
    for (const auto& [flag, value] : args) EXPECT_TRUE(kMegatronOptions.contains(flag)) << flag;
    EXPECT_TRUE(contains(out->text, "--tensor-model-parallel-size 8 \\\n"));
    expect_flags(args, {{"--pipeline-model-parallel-size", "8"}, {"--num-layers", "96"}, {"--hidden-size", "12288"},
                        {"--global-batch-size", "1536"}, {"--micro-batch-size", "1"},
                        {"--recompute-granularity", "full"}, {"--recompute-method", "uniform"},
                        {"--recompute-num-layers", "1"}, {"--fp16", ""}, {"--bf16", "<absent>"},
                        {"--position-embedding-type", "learned_absolute"}, {"--swiglu", "<absent>"},
                        {"--use-distributed-optimizer", "<absent>"}});
}

TEST(ExportMegatron, LlamaInterleavedDistributedOptimizer) {
    // The overlap keys are off by default (Megatron-LM's), so the job turns them on.
    auto out = export_job(load_asset("llama3-70b-h100.toml", {"parallel.overlap_grad_reduce=true",
                                                              "parallel.overlap_param_gather=true"}),
                          ExportFormat::megatron);
    ASSERT_TRUE(out) << out.error().str();
    auto args = megatron_args(out->text);
    for (const auto& [flag, value] : args) EXPECT_TRUE(kMegatronOptions.contains(flag)) << flag;
    EXPECT_EQ(value_of(args, "--num-layers-per-virtual-pipeline-stage"), "4");  // 80 / (4 · 5)
    expect_flags(args, {{"--num-query-groups", "8"}, {"--group-query-attention", ""}, {"--normalization", "RMSNorm"},
                        {"--rotary-base", "500000"}, {"--sequence-parallel", ""}, {"--use-distributed-optimizer", ""},
                        {"--overlap-param-gather", ""}, {"--recompute-granularity", "selective"},
                        {"--untie-embeddings-and-output-weights", ""}, {"--disable-bias-linear", ""},
                        {"--use-flash-attn", ""}, {"--bf16", ""}});
}

// fusedce2: the loss as estimated, with the flags the job's Megatron-LM has: --cross-entropy-loss-fusion
// from June 2024, --cross-entropy-fusion-impl te from March 2025 until Megatron-LM refused it in
// June 2026; where the date lacks one, the nearest loss and a note. The NeMo export (today's
// Megatron-Bridge) writes the loss as estimated, without those notes.
TEST(ExportMegatron, LossFlagsFollowTheJobsDate) {
    auto megatron = [](std::vector<std::string> sets) {
        sets.push_back("training.framework=nemo");
        auto out = export_job(load_asset("llama3-70b-h100.toml", sets), ExportFormat::megatron);
        EXPECT_TRUE(out) << out.error().str();
        return out ? *out : ExportOutput{};
    };
    auto noted = [](const ExportOutput& o) {
        for (const std::string& n : o.notes)
            if (contains(n, "--cross-entropy-loss-fusion") || contains(n, "cross_entropy_fusion_impl")) return true;
        return false;
    };
    const ExportOutput today = megatron({});  // te (Megatron-Bridge's configs), refused by today's Megatron-LM
    expect_flags(megatron_args(today.text), {{"--cross-entropy-loss-fusion", ""}, {"--cross-entropy-fusion-impl", "<absent>"}});
    EXPECT_TRUE(noted(today));
    const ExportOutput te_2025 = megatron({"training.framework_version=2025-10"});
    expect_flags(megatron_args(te_2025.text), {{"--cross-entropy-loss-fusion", ""}, {"--cross-entropy-fusion-impl", "te"}});
    EXPECT_FALSE(noted(te_2025));
    const ExportOutput fused_2024 = megatron({"training.framework_version=2024-11"});  // megatron-fused
    expect_flags(megatron_args(fused_2024.text), {{"--cross-entropy-loss-fusion", ""}, {"--cross-entropy-fusion-impl", "<absent>"}});
    const ExportOutput early = megatron({"training.framework_version=2024-01", "estimate.cross_entropy=megatron-fused"});
    expect_flags(megatron_args(early.text), {{"--cross-entropy-loss-fusion", "<absent>"}});
    EXPECT_TRUE(noted(early));
    auto unfused = export_job(load_asset("llama3-70b-h100.toml"), ExportFormat::megatron);  // Megatron-LM's default
    ASSERT_TRUE(unfused);
    expect_flags(megatron_args(unfused->text), {{"--cross-entropy-loss-fusion", "<absent>"}});
    for (const auto& [flag, value] : megatron_args(today.text)) EXPECT_TRUE(kMegatronOptions.contains(flag)) << flag;
    // Megatron-Bridge takes Transformer Engine's loss as estimated.
    auto nemo = export_job(load_asset("llama3-70b-h100.toml", {"training.framework=nemo"}), ExportFormat::nemo);
    ASSERT_TRUE(nemo) << nemo.error().str();
    EXPECT_TRUE(contains(nemo->text, "cfg.model.cross_entropy_loss_fusion = True\n")) << nemo->text;
    EXPECT_TRUE(contains(nemo->text, "cfg.model.cross_entropy_fusion_impl = \"te\"\n")) << nemo->text;
    EXPECT_FALSE(noted(*nemo));
    auto nemo_unfused = export_job(load_asset("llama3-70b-h100.toml", {"training.framework=nemo", "estimate.cross_entropy=megatron"}),
                                   ExportFormat::nemo);
    ASSERT_TRUE(nemo_unfused);
    EXPECT_TRUE(contains(nemo_unfused->text, "cfg.model.cross_entropy_loss_fusion = False\n"));
}

// teflash: FlashAttention-2 named on a Megatron-core stack is Transformer Engine's FlashAttention
// backend: --attention-backend flash from December 2024, an environment note before it, and
// model.attention_backend = AttnBackend.flash in Megatron-Bridge; by date, no backend is written.
TEST(ExportMegatron, TheNamedFlashAttentionBackendIsWritten) {
    auto megatron = [](std::vector<std::string> sets) {
        auto out = export_job(load_asset("llama3-70b-h100.toml", sets), ExportFormat::megatron);
        EXPECT_TRUE(out) << out.error().str();
        return out ? *out : ExportOutput{};
    };
    auto noted = [](const ExportOutput& o) {
        for (const std::string& n : o.notes)
            if (contains(n, "NVTE_FUSED_ATTN=0")) return true;
        return false;
    };
    const ExportOutput today = megatron({"training.flash_attention_kernel=flash-attn-2"});
    expect_flags(megatron_args(today.text), {{"--use-flash-attn", ""}, {"--attention-backend", "flash"}});
    EXPECT_FALSE(noted(today));
    for (const auto& [flag, value] : megatron_args(today.text)) EXPECT_TRUE(kMegatronOptions.contains(flag)) << flag;
    const ExportOutput early = megatron({"training.flash_attention_kernel=flash-attn-2", "training.framework_version=2024-11"});
    expect_flags(megatron_args(early.text), {{"--use-flash-attn", ""}, {"--attention-backend", "<absent>"}});
    EXPECT_TRUE(noted(early));
    const ExportOutput by_date = megatron({});
    expect_flags(megatron_args(by_date.text), {{"--use-flash-attn", ""}, {"--attention-backend", "<absent>"}});
    auto nemo = export_job(load_asset("llama3-70b-h100.toml", {"training.framework=nemo", "training.framework_version=2024-09",
                                                               "training.flash_attention_kernel=flash-attn-2"}),
                           ExportFormat::nemo);
    ASSERT_TRUE(nemo) << nemo.error().str();
    EXPECT_TRUE(contains(nemo->text, "cfg.model.attention_backend = AttnBackend.flash\n")) << nemo->text;
    EXPECT_FALSE(noted(*nemo));  // Megatron-Bridge has the key whatever the date
    auto nemo_by_date = export_job(load_asset("llama3-70b-h100.toml", {"training.framework=nemo"}), ExportFormat::nemo);
    ASSERT_TRUE(nemo_by_date);
    EXPECT_FALSE(contains(nemo_by_date->text, "cfg.model.attention_backend")) << nemo_by_date->text;
}

TEST(ExportMegatron, ZeroTwoAndThreeAreErrors) {
    for (const char* z : {"parallel.zero=2", "parallel.zero=3"}) {
        auto out = export_job(load_asset("llama3-8b-h100.toml", {z}), ExportFormat::megatron);
        ASSERT_FALSE(out) << z;
        const Diagnostic& d = out.error().diagnostics.front();
        EXPECT_EQ(d.key, "parallel.zero");
        ptd_test::expect_mentions(d.message, {"no ZeRO-2/3", "distributed_optimizer"});
        EXPECT_EQ(d.where.file, std::string("--set ") + z);  // the override, not a file line
    }
    // ZeRO-1 is Megatron's distributed optimizer, said in a note.
    auto one = export_job(load_asset("llama3-8b-h100.toml"), ExportFormat::megatron);
    ASSERT_TRUE(one);
    EXPECT_TRUE(contains(one->text, "--use-distributed-optimizer"));
    EXPECT_TRUE(any_note(*one, "ZeRO-1 equivalent"));
}

TEST(ExportMegatron, UnevenStages) {
    const std::vector<std::string> base = {"parallel.pp=4", "parallel.dp=1"};
    auto first_last = base;
    first_last.push_back("parallel.layers_per_stage=[6, 9, 9, 8]");
    auto out = export_job(load_asset("llama3-8b-h100.toml", first_last), ExportFormat::megatron);
    ASSERT_TRUE(out) << out.error().str();
    auto args = megatron_args(out->text);
    EXPECT_EQ(value_of(args, "--decoder-first-pipeline-num-layers"), "6");
    EXPECT_EQ(value_of(args, "--decoder-last-pipeline-num-layers"), "8");

    auto first_only = base;
    first_only.push_back("parallel.layers_per_stage=[5, 9, 9, 9]");
    out = export_job(load_asset("llama3-8b-h100.toml", first_only), ExportFormat::megatron);
    ASSERT_TRUE(out);
    args = megatron_args(out->text);
    EXPECT_EQ(value_of(args, "--decoder-first-pipeline-num-layers"), "5");
    EXPECT_EQ(value_of(args, "--decoder-last-pipeline-num-layers"), "<absent>");

    // Any other split (issue 12, item 10: it was an error) is Megatron's explicit layout.
    auto middle = base;
    middle.push_back("parallel.layers_per_stage=[6, 9, 8, 9]");
    out = export_job(load_asset("llama3-8b-h100.toml", middle), ExportFormat::megatron);
    ASSERT_TRUE(out) << out.error().str();
    args = megatron_args(out->text);
    EXPECT_EQ(value_of(args, "--pipeline-model-parallel-layout"), "\"Et*6|t*9|t*8|t*9L\"");
    EXPECT_EQ(value_of(args, "--decoder-first-pipeline-num-layers"), "<absent>");
    EXPECT_TRUE(megatron_violations(args, 1).empty());

    // Uneven chunks with vpp: one layout entry per chunk, in model order.
    out = export_job(load_asset("llama3-8b-h100.toml", {"parallel.pp=4", "parallel.dp=1", "parallel.vpp=2",
                                                        "parallel.layers_per_stage=[3, 4, 4, 4, 5, 4, 4, 4]"}),
                     ExportFormat::megatron);
    ASSERT_TRUE(out) << out.error().str();
    args = megatron_args(out->text);
    EXPECT_EQ(value_of(args, "--pipeline-model-parallel-layout"), "\"Et*3|(t*4|)*3t*5|t*4|t*4|t*4L\"");
    EXPECT_EQ(value_of(args, "--num-layers-per-virtual-pipeline-stage"), "<absent>");
    for (const std::string& v : megatron_violations(args, 1)) ADD_FAILURE() << v;
}

TEST(ExportDeepSpeed, ConfigMatchesJob) {
    JobSpec j = load_asset("llama3-8b-h100.toml");
    auto out = export_job(j, ExportFormat::deepspeed);
    ASSERT_TRUE(out) << out.error().str();
    auto ds = nlohmann::json::parse(out->text);
    const std::set<std::string> top = {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                                       "gradient_clipping", "bf16", "fp16", "zero_optimization", "optimizer",
                                       "scheduler", "activation_checkpointing", "data_types"};
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

// What DeepSpeed's WarmupCosineLR (deepspeed/runtime/lr_schedules.py, edaa722) raises on,
// and the bounds its ratios need to mean a schedule from lr down to min_lr.
std::vector<std::string> deepspeed_scheduler_violations(const nlohmann::json& sched) {
    std::vector<std::string> bad;
    if (sched["type"] != "WarmupCosineLR") return {"unexpected scheduler " + sched["type"].dump()};
    const nlohmann::json& p = sched["params"];
    if (!p["warmup_num_steps"].is_number_integer() || p["warmup_num_steps"].get<long long>() <= 0)
        bad.push_back("warmup_num_steps must be a positive integer, got " + p["warmup_num_steps"].dump());
    if (!p["total_num_steps"].is_number_integer() || p["total_num_steps"].get<long long>() < 1) bad.push_back("total_num_steps");
    for (const char* r : {"warmup_min_ratio", "cos_min_ratio"})
        if (!(p[r].get<double>() >= 0 && p[r].get<double>() <= 1)) bad.push_back(std::string(r) + " outside [0, 1]");
    if (p["warmup_type"] != "linear" && p["warmup_type"] != "log") bad.push_back("warmup_type");
    return bad;
}

// warmup = 0 (the default) crashed DeepSpeed (issue 12, item 8); every warmup the job
// allows (0 .. steps) and min_lr from 0 to lr must give a scheduler it accepts.
TEST(ExportDeepSpeed, SchedulerAcceptedForEveryWarmup) {
    for (const char* warmup : {"0", "1", "2", "5", "100"})
        for (const char* min_lr : {"0", "3e-5", "3e-4"}) {
            auto out = export_job(load_asset("llama3-8b-h100.toml", {std::string("training.warmup=") + warmup,
                                                                     std::string("training.min_lr=") + min_lr}),
                                  ExportFormat::deepspeed);
            ASSERT_TRUE(out) << out.error().str();
            auto ds = nlohmann::json::parse(out->text);
            for (const std::string& v : deepspeed_scheduler_violations(ds["scheduler"]))
                ADD_FAILURE() << "warmup " << warmup << " min_lr " << min_lr << ": " << v;
            const auto& p = ds["scheduler"]["params"];
            if (std::string(warmup) == "0" || std::string(warmup) == "1") {
                EXPECT_EQ(p["warmup_num_steps"], 1);
                EXPECT_EQ(p["warmup_min_ratio"], 1.0);  // no ramp: the full lr from the start
                EXPECT_TRUE(any_note(*out, "warmup_num_steps >= 1"));
            } else {
                EXPECT_EQ(p["warmup_num_steps"], std::stoi(warmup));
                EXPECT_EQ(p["warmup_min_ratio"], 0.0);
            }
        }
}

// The estimate counts a momentum buffer for sgd; DeepSpeed's "SGD" (torch.optim.SGD) has
// none unless told, so every export writes the same momentum (issue 12, item 8).
TEST(ExportSgd, MomentumMatchesTheEstimate) {
    auto ds = export_job(load_asset("llama3-8b-h100.toml", {"training.optimizer=sgd"}), ExportFormat::deepspeed);
    ASSERT_TRUE(ds) << ds.error().str();
    auto cfg = nlohmann::json::parse(ds->text);
    EXPECT_EQ(cfg["optimizer"]["type"], "SGD");
    EXPECT_DOUBLE_EQ(cfg["optimizer"]["params"]["momentum"].get<double>(), 0.9);
    auto mg = export_job(load_asset("llama3-8b-h100.toml", {"training.optimizer=sgd"}), ExportFormat::megatron);
    ASSERT_TRUE(mg) << mg.error().str();
    EXPECT_EQ(value_of(megatron_args(mg->text), "--sgd-momentum"), "0.9");
    EXPECT_EQ(value_of(megatron_args(mg->text), "--adam-beta1"), "<absent>");
}

// 3e-4 / 3e-3 is 0.09999999999999999 in binary; every format prints 0.1, and plain values
// print their shortest round-trip text (issue 12, item 9).
TEST(ExportNumbers, ShortestDecimals) {
    EXPECT_EQ(shortest_decimal(0.0003), "0.0003");
    EXPECT_EQ(shortest_decimal(1e-5), "1e-05");
    EXPECT_EQ(shortest_decimal(0.1), "0.1");
    EXPECT_EQ(shortest_decimal(1.0 / 3), "0.3333333333333333");
    EXPECT_EQ(std::stod(shortest_decimal(1.0 / 3)), 1.0 / 3);
    EXPECT_EQ(shortest_decimal(500000), "500000");
    EXPECT_EQ(decimal_ratio(3e-4, 3e-3), 0.1);
    // tiny-llama-8rank's lr and min_lr on a model every format can write (torchtitan-toml
    // refuses a model without a flavor).
    JobSpec tiny = load_asset("llama3-8b-h100.toml", {"training.lr=3e-3", "training.min_lr=3e-4"});
    ASSERT_NE(tiny.training.min_lr / tiny.training.lr, 0.1);  // the case that printed badly
    for (ExportFormat f : kExportFormats) {
        auto out = export_job(tiny, f);
        ASSERT_TRUE(out) << to_string(f) << ": " << out.error().str();
        EXPECT_FALSE(contains(out->text, "99999")) << to_string(f) << ":\n" << out->text;
        EXPECT_FALSE(contains(out->text, "00000001")) << to_string(f);
    }
    auto ds = nlohmann::json::parse(export_job(tiny, ExportFormat::deepspeed)->text);
    EXPECT_EQ(ds["scheduler"]["params"]["cos_min_ratio"].dump(), "0.1");
    EXPECT_TRUE(contains(export_job(tiny, ExportFormat::torchtitan)->text, "min_lr_factor=0.1,"));
    EXPECT_TRUE(contains(export_job(tiny, ExportFormat::torchtitan_toml)->text, "min_lr_factor = 0.1 "));
    EXPECT_TRUE(contains(export_job(tiny, ExportFormat::megatron)->text, "--lr 0.003 \\\n--min-lr 0.0003 \\\n"));
}

// A job without min_lr gets lr / 10 (job_toml.cpp): 3e-4 / 10 is 2.9999999999999997e-05 in
// binary, which every export printed (issue 28); the default is now the decimal 3e-05.
TEST(ExportNumbers, DefaultMinLrIsTheDecimal) {
    JobSpec j = load_asset("llama3-8b-h100.toml");
    ASSERT_EQ(j.training.lr, 3e-4);
    EXPECT_EQ(shortest_decimal(j.training.min_lr), "3e-05");
    const std::string args = export_text(j, ExportFormat::megatron);
    EXPECT_TRUE(contains(args, "--min-lr 3e-05 \\\n")) << args;
    EXPECT_FALSE(contains(args, "2.9999999999999997e-05"));
    auto ds = nlohmann::json::parse(export_text(j, ExportFormat::deepspeed));
    EXPECT_EQ(ds["scheduler"]["params"]["cos_min_ratio"].dump(), "0.1");
}

TEST(ExportDeepSpeed, ZeroThreeFp16AndFullRecompute) {
    auto out = export_job(load_asset("llama3-8b-h100.toml", {"parallel.zero=3", "training.precision=fp16", "parallel.recompute=full",
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

// The legacy TOML form: keys of torchtitan/config/job_config.py at v0.2.2 (73a0e69),
// identical at 238fa99, the last commit before the Python config refactor.
TEST(ExportTorchtitanToml, ParsesWithDegrees) {
    auto out = export_job(load_asset("llama3-70b-h100.toml"), ExportFormat::torchtitan_toml);
    ASSERT_TRUE(out) << out.error().str();
    toml::table doc = toml::parse(out->text);
    const std::map<std::string, std::set<std::string>> allowed = {
        {"job", {"description"}},
        {"model", {"name", "flavor"}},
        {"optimizer", {"name", "lr", "beta1", "beta2", "weight_decay"}},
        {"lr_scheduler", {"warmup_steps", "decay_type", "min_lr_factor"}},
        {"training", {"local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps", "mixed_precision_param",
                      "enable_cpu_offload"}},
        {"parallelism",
         {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
          "tensor_parallel_degree", "pipeline_parallel_degree", "pipeline_parallel_schedule",
          "pipeline_parallel_microbatch_size", "module_fqns_per_model_part", "context_parallel_degree",
          "expert_parallel_degree"}},
        {"activation_checkpoint", {"mode", "selective_ac_option"}},
        {"compile", {"enable", "components"}},
        {"debug", {"seed"}}};
    for (const auto& [table, node] : doc) {
        ASSERT_TRUE(allowed.contains(std::string(table.str()))) << table.str();
        for (const auto& [key, v] : *node.as_table())
            EXPECT_TRUE(allowed.at(std::string(table.str())).contains(std::string(key.str()))) << table.str() << "." << key.str();
    }
    EXPECT_EQ(doc["parallelism"]["tensor_parallel_degree"].value_or(0), 8);
    EXPECT_EQ(doc["parallelism"]["pipeline_parallel_degree"].value_or(0), 4);
    EXPECT_EQ(doc["parallelism"]["data_parallel_shard_degree"].value_or(0), 2);
    EXPECT_EQ(doc["parallelism"]["pipeline_parallel_schedule"].value_or(std::string()), "Interleaved1F1B");
    const toml::array& parts = *doc["parallelism"]["module_fqns_per_model_part"].as_array();
    ASSERT_EQ(parts.size(), 20u);  // 4 · 5 chunks of 4 layers
    EXPECT_EQ(parts[0].as_array()->size(), 5u);  // tok_embeddings + 4 layers
    EXPECT_EQ((*parts[0].as_array())[0].value_or(std::string()), "tok_embeddings");
    EXPECT_EQ((*parts[19].as_array())[5].value_or(std::string()), "output");  // v0.2's name
    EXPECT_EQ(doc["training"]["global_batch_size"].value_or(0), 512);
    EXPECT_EQ(doc["training"]["local_batch_size"].value_or(0), 256);
    EXPECT_EQ(doc["model"]["flavor"].value_or(std::string()), "70B");
    EXPECT_EQ(doc["debug"]["seed"].value_or(0), 1234);
    EXPECT_DOUBLE_EQ(doc["lr_scheduler"]["min_lr_factor"].value_or(0.0), 0.1);
    EXPECT_TRUE(any_note(*out, "FSDP2"));
}

// Fields of the current config system (main b5bcd76): Trainer.Config's sections and the
// keyword arguments of the dataclasses the module builds.
const std::set<std::string> kTitanTraining = {"num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step",
                                              "max_context_length", "max_norm", "steps", "mixed_precision_param",
                                              "disable_cuda_graphs", "enable_cpu_offload"};
const std::set<std::string> kTitanParallelism = {
    "data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward", "tensor_parallel_degree",
    "enable_sequence_parallel", "pipeline_parallel_degree", "pipeline_parallel_schedule", "num_pp_microbatches",
    "module_fqns_per_model_part", "context_parallel_degree", "expert_parallel_degree"};
const std::set<std::string> kTitanScheduler = {"warmup_steps", "decay_type", "min_lr_factor"};
const std::set<std::string> kTitanConfigFields = {"model_spec", "optimizer", "lr_scheduler", "training",
                                                  "parallelism", "compile", "activation_checkpoint", "debug.seed"};

// `name=value` keyword arguments of the call that opens with `opener` (one per line).
std::map<std::string, std::string> kwargs_of(const std::string& text, const std::string& opener) {
    std::map<std::string, std::string> out;
    size_t at = text.find(opener);
    EXPECT_NE(at, std::string::npos) << opener;
    if (at == std::string::npos) return out;
    std::istringstream in(text.substr(at + opener.size()));
    std::string line;
    int depth = 0;
    while (std::getline(in, line)) {
        const size_t first = line.find_first_not_of(' ');
        if (first == std::string::npos) continue;
        if (depth == 0 && line[first] == ')') break;
        if (depth == 0) {
            const size_t eq = line.find('=');
            if (eq != std::string::npos) {
                std::string value = line.substr(eq + 1);
                if (size_t hash = value.find("  #"); hash != std::string::npos) value.resize(hash);
                if (!value.empty() && value.back() == ',') value.pop_back();
                out[line.substr(first, eq - first)] = value;
            }
        }
        for (char c : line) depth += (c == '[' || c == '(') - (c == ']' || c == ')');
    }
    return out;
}

TEST(ExportTorchtitan, PythonConfigUsesCurrentFields) {
    auto out = export_job(load_asset("llama3-70b-h100.toml"), ExportFormat::torchtitan);
    ASSERT_TRUE(out) << out.error().str();
    const std::string& py = out->text;
    EXPECT_TRUE(contains(py, "def ptd_job() -> Trainer.Config:\n    config = llama3_70b()\n"));
    EXPECT_TRUE(contains(py, "config.model_spec = model_registry(\"70B\")"));
    std::istringstream in(py);
    std::string line;
    while (std::getline(in, line))
        if (line.starts_with("    config.")) {
            std::string field = line.substr(11, line.find(" = ") - 11);
            EXPECT_TRUE(kTitanConfigFields.contains(field)) << field;
        }
    auto training = kwargs_of(py, "config.training = TrainingConfig(");
    for (const auto& [k, v] : training) EXPECT_TRUE(kTitanTraining.contains(k)) << k;
    EXPECT_EQ(training["num_tokens_per_microbatch_per_dp_rank"], "8192");
    EXPECT_EQ(training["num_tokens_per_train_step"], std::to_string(512LL * 8192));
    EXPECT_EQ(training["max_context_length"], "8192");
    EXPECT_EQ(training["disable_cuda_graphs"], "True");  // Trainer.Config refuses CUDA graphs with pp
    auto par = kwargs_of(py, "config.parallelism = ParallelismConfig(");
    for (const auto& [k, v] : par) EXPECT_TRUE(kTitanParallelism.contains(k)) << k;
    EXPECT_EQ(par["tensor_parallel_degree"], "8");
    EXPECT_EQ(par["pipeline_parallel_degree"], "4");
    EXPECT_EQ(par["data_parallel_shard_degree"], "2");
    EXPECT_EQ(par["pipeline_parallel_schedule"], "\"Interleaved1F1B\"");
    EXPECT_EQ(par["num_pp_microbatches"], "256");  // 512 / (1 · 2)
    EXPECT_EQ(std::count(py.begin(), py.end(), '\n') > 0, true);
    EXPECT_TRUE(contains(py, "[\"tok_embeddings\", \"layers.0\", \"layers.1\", \"layers.2\", \"layers.3\"],"));
    EXPECT_TRUE(contains(py, "\"layers.79\", \"norm\", \"lm_head\"],"));
    auto sched = kwargs_of(py, "config.lr_scheduler = LRSchedulersContainer.Config(");
    for (const auto& [k, v] : sched) EXPECT_TRUE(kTitanScheduler.contains(k)) << k;
    EXPECT_EQ(sched["min_lr_factor"], "0.1");
    EXPECT_TRUE(contains(py, "config.activation_checkpoint = SelectiveAC.Config()"));
    EXPECT_TRUE(contains(py, "from torchtitan.distributed.activation_checkpoint import SelectiveAC\n"));
    EXPECT_TRUE(contains(py, "config.debug.seed = 1234\n"));

    // No recomputation is None; full is FullAC; the job's own sequence-parallel choice is kept.
    auto none = export_job(load_asset("llama3-8b-h100.toml", {"parallel.recompute=none", "parallel.sequence_parallel=false"}),
                           ExportFormat::torchtitan);
    ASSERT_TRUE(none) << none.error().str();
    EXPECT_TRUE(contains(none->text, "config.activation_checkpoint = None\n"));
    EXPECT_FALSE(contains(none->text, "activation_checkpoint import"));
    EXPECT_EQ(kwargs_of(none->text, "ParallelismConfig(")["enable_sequence_parallel"], "False");
}

TEST(ExportTorchtitan, UnsupportedSettingsAreErrors) {
    for (ExportFormat f : {ExportFormat::torchtitan, ExportFormat::torchtitan_toml}) {
        auto fp16 = export_job(load_asset("llama3-8b-h100.toml", {"training.precision=fp16"}), f);
        ASSERT_FALSE(fp16);
        EXPECT_EQ(fp16.error().diagnostics.front().key, "training.precision");
        auto sgd = export_job(load_asset("llama3-8b-h100.toml", {"training.optimizer=sgd"}), f);
        ASSERT_FALSE(sgd);
        EXPECT_EQ(sgd.error().diagnostics.front().key, "training.optimizer");
    }
    // A model without a torchtitan flavor: v0.2.x would train its debug model, so the TOML
    // form refuses (issue 28); the Python form writes a _model_spec() that raises until filled in.
    auto gpt = export_job(load_asset("gpt2-124m-local.toml"), ExportFormat::torchtitan_toml);
    ASSERT_FALSE(gpt);
    EXPECT_EQ(gpt.error().diagnostics.front().key, "model.preset");
    expect_mentions(gpt.error().diagnostics.front().message, {"no torchtitan flavor", "debug model"});
    // The sequence length is the run's (training.seq_len), not the flavor's: a preset at 128K
    // tokens keeps its flavor; one with its layers changed has none, and the refusal says so.
    for (ExportFormat f : {ExportFormat::torchtitan, ExportFormat::torchtitan_toml}) {
        auto long_seq = export_job(load_asset("llama3-8b-h100.toml", {"model.seq_len=131072", "parallel.cp=4", "parallel.dp=1"}), f);
        ASSERT_TRUE(long_seq) << long_seq.error().str();
        EXPECT_FALSE(any_note(*long_seq, "no torchtitan flavor")) << long_seq->text;
    }
    auto long_toml = export_job(load_asset("llama3-8b-h100.toml", {"model.seq_len=131072", "parallel.cp=4", "parallel.dp=1"}),
                                ExportFormat::torchtitan_toml);
    ASSERT_TRUE(long_toml);
    EXPECT_TRUE(contains(long_toml->text, "flavor = \"8B\"")) << long_toml->text;
    EXPECT_TRUE(contains(long_toml->text, "seq_len = 131072")) << long_toml->text;
    auto shallow = export_job(load_asset("llama3-8b-h100.toml", {"model.layers=16"}), ExportFormat::torchtitan_toml);
    ASSERT_FALSE(shallow);
    expect_mentions(shallow.error().diagnostics.front().message,
                    {"the llama3-8b preset with its architecture changed", "no torchtitan flavor"});
    // (untied: the job's pp 2 with tied embeddings is torchtitan's own refusal, framework_rejections.cpp)
    auto py = export_job(load_asset("gpt2-124m-local.toml", {"model.tied_embeddings=false"}), ExportFormat::torchtitan);
    ASSERT_TRUE(py) << py.error().str();
    EXPECT_TRUE(contains(py->text, "config.model_spec = _model_spec()"));
    EXPECT_TRUE(contains(py->text, "raise NotImplementedError(\"ptd export: no torchtitan model flavor matches gpt2-124m\")"));
}

// Every layout the planner returns (top and Pareto front) for real jobs exports to each
// format that can express it; Megatron's arguments pass the checks validate_args applies;
// where a format cannot, exportability names the job key (issue 12, item 10).
TEST(ExportPlanner, EveryPlannedLayoutExports) {
    std::vector<JobSpec> jobs;
    for (const char* f : {"gpt3-175b-a100.toml", "llama3-70b-h100.toml", "llama3-8b-h100.toml", "gpt2-124m-local.toml",
                          "tiny-llama-8rank.toml"})
        jobs.push_back(load_asset(f));
    // Llama 3 405B on 16,384 H100s: the planner's best is tp8·pp32·vpp3 with uneven chunks.
    jobs.push_back(load_asset("llama3-70b-h100.toml", {"model.preset=llama3-405b", "cluster.nodes=2048", "parallel.tp=8",
                                                       "parallel.pp=2", "parallel.vpp=1", "parallel.dp=1024",
                                                       "training.global_batch=2048"}));
    int layouts = 0, uneven = 0;
    for (const JobSpec& j : jobs) {
        SCOPED_TRACE(j.origin.file + " " + j.model.name);
        auto plan = plan_layouts(j, PlanOptions{});
        ASSERT_TRUE(plan) << plan.error().str();
        ASSERT_FALSE(plan->top.empty());
        std::vector<PlanEntry> entries = plan->top;
        entries.insert(entries.end(), plan->pareto.begin(), plan->pareto.end());
        for (const PlanEntry& e : entries) {
            const JobSpec planned = apply_plan_entry(j, e);
            const ParallelSpec& p = planned.parallel;
            SCOPED_TRACE("tp" + std::to_string(p.tp) + " pp" + std::to_string(p.pp) + " vpp" + std::to_string(p.vpp) +
                         " dp" + std::to_string(p.dp) + " zero" + std::to_string(p.zero));
            ++layouts;
            uneven += !e.layers_per_stage.empty();
            for (const FormatExportability& x : exportability(planned)) {
                auto out = export_job(planned, x.format);
                ASSERT_EQ(x.ok, out.has_value()) << to_string(x.format);
                const bool megatron_cannot = (x.format == ExportFormat::megatron || x.format == ExportFormat::nemo) && p.zero >= 2;
                // issue 28: DeepSpeed accumulates bf16 gradients in fp32 only under ZeRO.
                const bool deepspeed_cannot = x.format == ExportFormat::deepspeed && planned.training.precision == Precision::bf16 &&
                                              p.grad_reduce_in_fp32 && p.zero == 0 && !p.distributed_optimizer;
                const bool titan = x.format == ExportFormat::torchtitan || x.format == ExportFormat::torchtitan_toml;
                // issue 28: torchtitan v0.2.x trains its debug model without a flavor; tp must divide the KV heads.
                const bool no_flavor = planned.model.name != "llama3-70b" && planned.model.name != "llama3-8b" &&
                                       planned.model.name != "llama3-405b";
                const bool titan_cannot = titan && ((x.format == ExportFormat::torchtitan_toml && no_flavor) ||
                                                    planned.model.kv_heads % p.tp != 0 ||
                                                    (x.format == ExportFormat::torchtitan && planned.model.tied_embeddings && p.pp > 1) ||
                                          planned.training.precision == Precision::fp16 ||
                                           planned.training.optimizer == Optimizer::sgd ||
                                           // recomp: FSDP2's CPUOffloadPolicy offloads all three or nothing
                                           (p.offload_optimizer != OffloadDevice::none && !(p.zero == 3 && p.offload_params)));
                EXPECT_EQ(x.ok, !megatron_cannot && !titan_cannot && !deepspeed_cannot) << to_string(x.format) << ": " << x.key << ": " << x.reason;
                if (!x.ok) {
                    EXPECT_FALSE(x.key.empty());
                }
                if (x.format == ExportFormat::megatron && out)
                    for (const std::string& v : megatron_violations(megatron_args(out->text), p.dp))
                        ADD_FAILURE() << "Megatron would refuse: " << v << "\n" << out->text;
                if (x.format == ExportFormat::deepspeed && out) {
                    for (const std::string& v : deepspeed_scheduler_violations(nlohmann::json::parse(out->text)["scheduler"]))
                        ADD_FAILURE() << v;
                    for (const std::string& v : deepspeed_engine_violations(nlohmann::json::parse(out->text)))
                        ADD_FAILURE() << "DeepSpeed's engine would refuse: " << v;
                }
                if (x.format == ExportFormat::torchtitan && out)  // issue 28: update_from_config, ParallelDims
                    for (const std::string& v : torchtitan_violations(kwargs_of(out->text, "config.parallelism = ParallelismConfig("),
                                                                      planned.world_size(), planned.model.heads,
                                                                      planned.model.kv_heads, planned.model.tied_embeddings))
                        ADD_FAILURE() << "torchtitan would refuse: " << v;
                if (x.format == ExportFormat::megatron && out)
                    for (const std::string& v : transformer_config_violations(megatron_args(out->text)))
                        ADD_FAILURE() << "TransformerConfig would refuse: " << v;
            }
        }
    }
    EXPECT_GT(layouts, 50);
    EXPECT_GT(uneven, 0);  // uneven splits are among them
}

TEST(ExportFormatWord, ParsesAndSuggests) {
    EXPECT_EQ(*parse_export_format("deepspeed"), ExportFormat::deepspeed);
    EXPECT_EQ(*parse_export_format("torchtitan-toml"), ExportFormat::torchtitan_toml);
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
    EXPECT_TRUE(contains(section.error().str(), "model, cluster, parallel, training, launch, paths, estimate"));
    EXPECT_FALSE(parse_override("parallel.tp"));
    EXPECT_FALSE(parse_override("parallel=4"));
    EXPECT_FALSE(parse_override("parallel..tp=4"));
}

TEST(JobOverrides, ValuesAreTypedLikeTheFile) {
    JobSpec j = load_asset("llama3-8b-h100.toml", {"parallel.recompute=full", "training.lr=1e-4", "training.flash_attention=false",
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
    JobSpec j = load_asset("llama3-8b-h100.toml", {"cluster.gpu.memory_gib=40"});
    EXPECT_DOUBLE_EQ(j.cluster.gpu.memory_gib, 40);
    EXPECT_EQ(j.cluster.gpu.bf16_tflops, presets().find_gpu("h100-sxm")->bf16_tflops);
    JobSpec a100 = load_asset("llama3-8b-h100.toml", {"cluster.gpu=a100-80gb"});
    EXPECT_EQ(a100.cluster.gpu.name, "a100-80gb");
    // A new model preset replaces the model (the file's keys belonged to the old one).
    JobSpec m = load_asset("gpt2-124m-local.toml", {"model.preset=tiny-gpt", "model.seq_len=32"});
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

// ZeRO-2 with pp > 1 is a valid job (FSDP keeping parameters whole, as the Llama 3 paper's),
// but DeepSpeed's pipeline engine supports ZeRO 0 or 1 only: the export says so.
TEST(ExportDeepSpeed, ZeroTwoWithPipelineRefused) {
    auto out = export_job(load_asset("llama3-70b-h100.toml", {"parallel.distributed_optimizer=false", "parallel.zero=2"}),
                          ExportFormat::deepspeed);
    ASSERT_FALSE(out);
    const Diagnostic& d = out.error().diagnostics.front();
    EXPECT_EQ(d.key, "parallel.zero");
    EXPECT_TRUE(contains(d.message, "zero 0 or 1 with pp > 1")) << d.message;
    // torchtitan runs FSDP under pipelining.
    EXPECT_TRUE(export_job(load_asset("llama3-70b-h100.toml", {"parallel.distributed_optimizer=false", "parallel.zero=2"}),
                           ExportFormat::torchtitan_toml));
}

}  // namespace
