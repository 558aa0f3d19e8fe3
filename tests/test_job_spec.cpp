// test_job_spec.cpp — the TOML job spec: loading, defaults, located errors, every
// cross-field check, and load → save → load round trips.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "ptd/common/decimal.h"
#include "ptd/spec/job_spec.h"
#include "ptd/spec/presets.h"

#include "text_test_util.h"

namespace {

const ptd::PresetCatalog& presets() { return ptd::embedded_presets(); }

// A valid base job; tests append or replace lines to break one thing at a time.
const char* kBase = R"(
[model]
preset = "llama3-8b"

[cluster]
nodes = 2
gpus_per_node = 8
gpu = "h100-sxm"

[parallel]
tp = 4
pp = 2

[training]
micro_batch = 2
global_batch = 64
)";

ptd::Result<ptd::JobSpec> load(const std::string& text) {
    return ptd::load_job_text(text, "job.toml", presets());
}

// Replace the first occurrence of `from` in the base job.
std::string base_with(const std::string& from, const std::string& to) {
    std::string s = kBase;
    auto pos = s.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    return s.replace(pos, from.size(), to);
}

// The single diagnostic of a failed load, with checks that it is located.
ptd::Diagnostic only_error(const ptd::Result<ptd::JobSpec>& r) {
    EXPECT_FALSE(r.has_value());
    if (r) return {};
    EXPECT_EQ(r.error().diagnostics.size(), 1u) << r.error().str();
    return r.error().diagnostics.front();
}

// The single diagnostic of a failed load: at `key`, mentioning each of `parts`.
ptd::Diagnostic key_error(const ptd::Result<ptd::JobSpec>& r, const std::string& key,
                          std::initializer_list<std::string> parts) {
    ptd::Diagnostic d = only_error(r);
    EXPECT_EQ(d.key, key);
    ptd_test::expect_mentions(d.message, parts);
    return d;
}

using ptd_test::contains;

TEST(JobSpec, BaseLoadsAndDerivesDp) {
    auto job = load(kBase);
    ASSERT_TRUE(job) << job.error().str();
    EXPECT_EQ(job->model.name, "llama3-8b");
    EXPECT_EQ(job->model.kv_heads, 8);
    EXPECT_EQ(job->parallel.dp, 2);  // 16 GPUs / (tp 4 · pp 2)
    EXPECT_FALSE(job->origin.dp_given);
    EXPECT_EQ(job->grad_accum(), 16);  // 64 / (2 · 2)
    EXPECT_EQ(job->cluster.intra_gbps, job->cluster.gpu.link_gbps);
    EXPECT_EQ(job->training.min_lr, ptd::decimal_ratio(job->training.lr, 10));  // lr / 10 as a decimal (issue 28)
}

TEST(JobSpec, GlobalBatchDefaultsToOneMicroBatchPerReplica) {
    auto job = load(base_with("global_batch = 64\n", ""));
    ASSERT_TRUE(job) << job.error().str();
    EXPECT_EQ(job->training.global_batch, 2 * 2);
}

TEST(JobSpec, ExplicitModelGetsArchDefaults) {
    auto job = load(base_with("preset = \"llama3-8b\"",
                              "arch = \"llama\"\nlayers = 8\nhidden = 1024\nheads = 16\nvocab = 32000\nseq_len = 2048"));
    ASSERT_TRUE(job) << job.error().str();
    const ptd::ModelSpec& m = job->model;
    EXPECT_EQ(m.norm, ptd::Norm::rmsnorm);
    EXPECT_EQ(m.activation, ptd::Activation::swiglu);
    EXPECT_EQ(m.position, ptd::Position::rope);
    EXPECT_FALSE(m.tied_embeddings);
    EXPECT_FALSE(m.bias);
    EXPECT_EQ(m.kv_heads, 16);
    EXPECT_EQ(m.ffn_hidden, 2816);  // 256 · ceil(8·1024/3/256)
    EXPECT_EQ(m.name, "custom");
}

TEST(JobSpec, PresetKeysCanBeOverridden) {
    auto job = load(base_with("preset = \"llama3-8b\"", "preset = \"llama3-8b\"\nseq_len = 4096"));
    ASSERT_TRUE(job) << job.error().str();
    EXPECT_EQ(job->model.seq_len, 4096);
    EXPECT_EQ(job->model.hidden, 4096);
}

// ---- located errors -------------------------------------------------------------------

TEST(JobSpecErrors, TomlSyntaxErrorHasLineAndColumn) {
    auto d = only_error(load("[model]\npreset = \"llama3-8b\nx = 1\n"));
    EXPECT_EQ(d.where.file, "job.toml");
    EXPECT_EQ(d.where.line, 2);
    EXPECT_GT(d.where.column, 0);
    EXPECT_TRUE(contains(d.message, "invalid TOML")) << d.message;
}

TEST(JobSpecErrors, WrongTypeNamesKeyGivenAndExpected) {
    auto d = only_error(load(base_with("tp = 4", "tp = \"4\"")));
    EXPECT_EQ(d.key, "parallel.tp");
    EXPECT_EQ(d.where.line, 11);
    EXPECT_EQ(d.where.column, 6);
    ptd_test::expect_mentions(d.message, {"expected an integer", "string \"4\""});
}

TEST(JobSpecErrors, OutOfRangeSaysAllowedRange) {
    key_error(load(base_with("tp = 4", "tp = 4\nzero = 5")), "parallel.zero", {"got 5", "0 .. 3"});
}

TEST(JobSpecErrors, UnknownKeySuggestsClosest) {
    auto d = key_error(load(base_with("tp = 4", "tp = 4\nsequence_paralel = true")),
                       "parallel.sequence_paralel", {"did you mean \"sequence_parallel\""});
    EXPECT_EQ(d.where.line, 12);
}

TEST(JobSpecErrors, UnknownTableSuggestsClosest) {
    key_error(load(std::string(kBase) + "\n[trainig]\nsteps = 3\n"), "trainig", {"did you mean \"training\""});
}

TEST(JobSpecErrors, UnknownWordListsAllowed) {
    key_error(load(base_with("tp = 4", "tp = 4\nrecompute = \"selectve\"")),
              "parallel.recompute", {"none, selective, full", "did you mean \"selective\""});
}

TEST(JobSpec, FrameworkTakesTheNamesUsersGiveTheStacks) {
    // Megatron-Bridge is NeMo 2.0's successor: its recipes' defaults are framework "nemo".
    for (auto [given, want] : {std::pair{"megatron-bridge", ptd::Framework::nemo},
                               std::pair{"megatron-lm", ptd::Framework::megatron},
                               std::pair{"megatron-deepspeed", ptd::Framework::deepspeed},
                               std::pair{"llmfoundry", ptd::Framework::llm_foundry}}) {
        auto r = load(base_with("global_batch = 64", std::string("global_batch = 64\nframework = \"") + given + "\""));
        ASSERT_TRUE(r.has_value()) << given << ": " << r.error().str();
        EXPECT_EQ(r->training.framework, want) << given;
    }
    // A near miss names the word and the aliases.
    key_error(load(base_with("global_batch = 64", "global_batch = 64\nframework = \"megatron-bridg\"")),
              "training.framework", {"megatron-bridge (= nemo)", "did you mean \"megatron-bridge\""});
}

TEST(JobSpecErrors, OtherStacksNamesPointAtTheSpecsKey) {
    // Same section: the key to write instead.
    key_error(load(base_with("tp = 4", "tensor_model_parallel_size = 4")), "parallel.tensor_model_parallel_size",
              {"as Megatron-LM / NeMo call it", "this spec's key is \"tp\""});
    // Another section: where it lives.
    key_error(load(base_with("tp = 4", "tp = 4\nmicro_batch_size = 2")), "parallel.micro_batch_size",
              {"this spec's key is [training] micro_batch"});
    // How the value carries over when it differs.
    key_error(load(base_with("preset = \"llama3-8b\"", "preset = \"llama3-8b\"\nhidden_dropout = 0.0")),
              "model.hidden_dropout", {"\"dropout\"", "0.0 is false"});
    key_error(load(base_with("tp = 4", "tp = 4\ntensor_parallel_degree = 4")), "parallel.tensor_parallel_degree",
              {"as torchtitan call it"});
}

TEST(JobSpecErrors, UnknownPresetSuggests) {
    key_error(load(base_with("preset = \"llama3-8b\"", "preset = \"llama3-8\"")), "model.preset", {"llama3-8b"});
    key_error(load(base_with("gpu = \"h100-sxm\"", "gpu = \"h100\"")), "cluster.gpu", {"unknown GPU preset \"h100\""});
    // A name cut short before its last part: the preset it begins (edit distance said "v100-32gb").
    key_error(load(base_with("gpu = \"h100-sxm\"", "gpu = \"h100-96gb\"")), "cluster.gpu",
              {"did you mean \"h100-96gb-500w\"?"});
}

TEST(JobSpecErrors, MissingRequiredKeysAreEachReported) {
    auto r = load("[model]\narch = \"gpt\"\nlayers = 2\n\n[cluster]\nnodes = 1\n");
    ASSERT_FALSE(r);
    std::string all = r.error().str();
    for (const char* key : {"model.hidden", "model.heads", "model.vocab", "model.seq_len", "cluster.gpus_per_node",
                            "cluster.gpu"})
        EXPECT_TRUE(contains(all, key)) << key << " not in:\n" << all;
}

TEST(JobSpecErrors, AllTypeErrorsReportedTogether) {
    auto r = load(base_with("tp = 4\npp = 2", "tp = 4.5\npp = true"));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().diagnostics.size(), 2u) << r.error().str();
}

// ---- cross-field checks: one message each ---------------------------------------------

TEST(JobSpecChecks, ParallelProductMustEqualGpuCount) {
    auto d = key_error(load(base_with("pp = 2", "pp = 2\ndp = 4")), "parallel.dp", {"= 32 ranks", "= 16"});
    EXPECT_EQ(d.where.line, 13);  // points at the dp line
}

TEST(JobSpecChecks, DpCannotBeDerived) {
    // pp = 3 leaves 16 GPUs indivisible, and 32 layers do not split in 3: both are reported,
    // but nothing that would only repeat the missing dp.
    auto r = load(base_with("pp = 2", "pp = 3"));
    ASSERT_FALSE(r);
    ASSERT_EQ(r.error().diagnostics.size(), 2u) << r.error().str();
    EXPECT_EQ(r.error().diagnostics[0].key, "parallel.dp");
    EXPECT_TRUE(contains(r.error().diagnostics[0].message, "cannot derive dp")) << r.error().str();
    EXPECT_EQ(r.error().diagnostics[1].key, "parallel.pp");
}

TEST(JobSpecChecks, HeadsDivisibleByTp) {
    // llama3-8b: 32 heads, 8 KV heads. tp = 3 breaks heads % tp (and KV), world = 3·2·dp.
    auto r = load(base_with("nodes = 2\ngpus_per_node = 8", "nodes = 1\ngpus_per_node = 6").replace(
        std::string(kBase).find("tp = 4"), 6, "tp = 3"));
    ASSERT_FALSE(r);
    std::string all = r.error().str();
    ptd_test::expect_mentions(all, {"heads (32) must be divisible by tp", "allowed tp: 1, 2, 4, 8, 16, 32"});
}

TEST(JobSpecChecks, KvHeadsVersusTp) {
    // 32 heads, 4 KV heads, tp = 8: fine (KV heads replicated). kv_heads = 8 with tp 16... use
    // an explicit model where tp neither divides nor is a multiple of kv_heads.
    std::string text = base_with("preset = \"llama3-8b\"",
                                 "arch = \"llama\"\nlayers = 8\nhidden = 1536\nheads = 24\nkv_heads = 6\n"
                                 "ffn_hidden = 4096\nvocab = 32000\nseq_len = 2048");
    auto d = only_error(load(text));  // tp 4 vs kv 6
    EXPECT_EQ(d.key, "parallel.tp");
    ptd_test::expect_mentions(d.message, {"kv_heads 6", "replicated"});
}

TEST(JobSpecChecks, LayersDivisibleByPpTimesVpp) {
    key_error(load(base_with("pp = 2", "pp = 2\nvpp = 3")), "parallel.pp", {"layers (32) is not divisible by pp·vpp"});
}

// The error names every way out the spec allows, each with its split, and each one named
// is then a valid job (issue 29 point 8).
TEST(JobSpecChecks, UnevenPipelineSplitNamesEveryWayOutAndEachWorks) {
    auto d = key_error(load(base_with("pp = 2", "pp = 2\nvpp = 3")), "parallel.pp", {"layers (32)"});
    ptd_test::expect_mentions(d.message, {"layers_per_stage = [5, 5, 6, 6, 5, 5]", "with pp 2: vpp 1, 2, 4, 8, 16"});
    EXPECT_EQ(d.message.find("account_for"), std::string::npos) << d.message;  // 33 and 34 do not split into 6
    EXPECT_EQ(d.message.find("with vpp 3: pp"), std::string::npos) << d.message;  // no pp·3 divides 32
    auto explicit_split = load(base_with("pp = 2", "pp = 2\nvpp = 3\nlayers_per_stage = [5, 5, 6, 6, 5, 5]"));
    EXPECT_TRUE(explicit_split) << explicit_split.error().str();
    for (const char* vpp : {"1", "2", "4", "8", "16"}) {
        auto other = load(base_with("pp = 2", std::string("pp = 2\nvpp = ") + vpp));
        EXPECT_TRUE(other) << "vpp " << vpp << ": " << other.error().str();
    }

    // 32 layers in 3 stages: 33 = 3 · 11, so counting the embedding (or the loss) as a layer
    // works. (The 16 ranks do not divide by pp 3 either: parallel.dp says so on its own.)
    auto three_stages = load(base_with("pp = 2", "pp = 3"));
    ASSERT_FALSE(three_stages);
    ptd::Diagnostic three;
    for (const ptd::Diagnostic& e : three_stages.error().diagnostics)
        if (e.key == "parallel.pp") three = e;
    ASSERT_EQ(three.key, "parallel.pp") << three_stages.error().str();
    ptd_test::expect_mentions(three.message,
                              {"layers_per_stage = [11, 11, 10]",
                               "account_for_embedding_in_pipeline_split = true (11 per chunk, the first chunk one "
                               "transformer layer fewer)",
                               "account_for_loss_in_pipeline_split = true (11 per chunk, the last chunk",
                               "with vpp 1: pp 1, 2, 4, 8, 16, 32"});
    for (const char* way : {"layers_per_stage = [11, 11, 10]", "account_for_embedding_in_pipeline_split = true",
                            "account_for_loss_in_pipeline_split = true"}) {
        auto fixed = load(base_with("pp = 2", std::string("pp = 3\n") + way));
        // The world may not divide by pp 3; only the layer split is asked about here.
        if (!fixed) {
            for (const ptd::Diagnostic& e : fixed.error().diagnostics) {
                EXPECT_NE(e.key, "parallel.pp") << way << ": " << e.message;
            }
        }
    }
}

TEST(JobSpecChecks, ExplicitLayersPerStage) {
    auto ok = load(base_with("pp = 2", "pp = 2\nlayers_per_stage = [15, 17]"));
    ASSERT_TRUE(ok) << ok.error().str();
    key_error(load(base_with("pp = 2", "pp = 2\nlayers_per_stage = [15, 16]")),
              "parallel.layers_per_stage", {"sums to 31"});
    auto len = only_error(load(base_with("pp = 2", "pp = 2\nlayers_per_stage = [32]")));
    EXPECT_TRUE(contains(len.message, "has 1 entries")) << len.message;
}

TEST(JobSpecChecks, GlobalBatchDivisibleByMicroBatchTimesDp) {
    key_error(load(base_with("global_batch = 64", "global_batch = 66")),
              "training.global_batch", {"micro_batch·dp = 2·2 = 4"});
}

TEST(JobSpecChecks, HiddenDivisibleByHeads) {
    std::string text = base_with("preset = \"llama3-8b\"",
                                 "arch = \"gpt\"\nlayers = 4\nhidden = 1000\nheads = 16\nvocab = 1000\nseq_len = 512");
    auto r = load(text);
    ASSERT_FALSE(r);
    EXPECT_TRUE(contains(r.error().str(), "hidden 1000 is not divisible by heads 16")) << r.error().str();
}

TEST(JobSpecChecks, SequenceParallelNeedsTp) {
    key_error(load(base_with("tp = 4\npp = 2", "tp = 1\npp = 2\nsequence_parallel = true")),
              "parallel.sequence_parallel", {"tp > 1"});
}

TEST(JobSpecChecks, VppNeedsPipeline) {
    auto d = only_error(load(base_with("tp = 4\npp = 2", "tp = 4\npp = 1\nvpp = 2")));
    EXPECT_EQ(d.key, "parallel.vpp");
}

TEST(JobSpecChecks, ZeroThreeWithPipelineRefused) {
    key_error(load(base_with("pp = 2", "pp = 2\nzero = 3")), "parallel.zero", {"pp > 1"});
    // ZeRO-2 with a pipeline is FSDP keeping parameters unsharded between micro-batches.
    auto two = load(base_with("pp = 2", "pp = 2\nzero = 2"));
    EXPECT_TRUE(two.has_value()) << (two ? "" : two.error().str());
}

TEST(JobSpecChecks, DistributedOptimizerExcludesZero) {
    auto d = only_error(load(base_with("pp = 2", "pp = 2\nzero = 1\ndistributed_optimizer = true")));
    EXPECT_EQ(d.key, "parallel.distributed_optimizer");
}

TEST(JobSpecChecks, PrecisionMustExistOnGpu) {
    // A written bf16 on V100 (a missing precision follows the GPU: fp16 there).
    key_error(load(base_with("gpu = \"h100-sxm\"", "gpu = \"v100-32gb\"").append("precision = \"bf16\"\n")),
              "training.precision", {"got \"bf16\"", "no bf16 support", "fp16"});
}

TEST(JobSpecChecks, HostsOnePerNode) {
    auto d = only_error(load(base_with("gpu = \"h100-sxm\"", "gpu = \"h100-sxm\"\nhosts = [\"a\"]")));
    EXPECT_EQ(d.key, "cluster.hosts");
}

TEST(JobSpecChecks, ExpertParallelNeedsExperts) {
    key_error(load(base_with("pp = 2", "pp = 2\nep = 2")), "parallel.ep", {"dense"});
}

TEST(JobSpecChecks, BadOrderString) {
    auto d = only_error(load(base_with("pp = 2", "pp = 2\norder = \"tp-xp-pp\"")));
    EXPECT_EQ(d.key, "parallel.order");
    EXPECT_EQ(d.where.line, 13);
}

// parallel.order has one spelling: all five names, lowercase, each once (issue 12, item 12).
// "", a partial order and upper case were accepted and then read differently by export.
TEST(JobSpecChecks, OrderMustBeAFullLowercasePermutation) {
    struct Case {
        const char* given;
        const char* meant;  // the full order it would mean, named in the message
    };
    for (Case c : {Case{"", "tp-cp-ep-dp-pp"}, Case{"tp-dp", "tp-ep-dp-cp-pp"}, Case{"TP-PP-DP", "tp-pp-ep-dp-cp"},
                   Case{"TP-CP-EP-DP-PP", "tp-cp-ep-dp-pp"}, Case{" tp-cp-ep-dp-pp", "tp-cp-ep-dp-pp"}}) {
        auto d = only_error(load(base_with("pp = 2", std::string("pp = 2\norder = \"") + c.given + "\"")));
        EXPECT_EQ(d.key, "parallel.order") << c.given;
        EXPECT_EQ(d.where.line, 13) << c.given;
        EXPECT_TRUE(contains(d.message, std::string("got \"") + c.given + "\"")) << d.message;
        EXPECT_TRUE(contains(d.message, "all five of tp, cp, ep, dp, pp")) << d.message;
        EXPECT_TRUE(contains(d.message, std::string("would mean \"") + c.meant + "\"")) << d.message;
    }
    for (const char* ok : {"tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "dp-tp-cp-ep-pp", "pp-dp-ep-cp-tp"}) {
        auto j = load(base_with("pp = 2", std::string("pp = 2\norder = \"") + ok + "\""));
        ASSERT_TRUE(j) << ok << ": " << j.error().str();
        EXPECT_EQ(j->parallel.order, ok);
    }
}

// ---- round trips ------------------------------------------------------------------------

void expect_same(const ptd::JobSpec& a, const ptd::JobSpec& b) {
    EXPECT_EQ(a.model, b.model);
    EXPECT_EQ(a.cluster, b.cluster);
    EXPECT_EQ(a.parallel, b.parallel);
    EXPECT_EQ(a.training, b.training);
    EXPECT_EQ(a.launch, b.launch);
    EXPECT_EQ(a.estimate, b.estimate);
}

void expect_round_trip(const ptd::JobSpec& job) {
    std::string text = ptd::save_job_toml(job);
    auto again = ptd::load_job_text(text, "saved.toml", presets());
    ASSERT_TRUE(again) << again.error().str() << "\n--- saved text ---\n" << text;
    expect_same(job, *again);
    EXPECT_EQ(ptd::save_job_toml(*again), text);  // saving is canonical
}

TEST(JobSpecRoundTrip, EveryExampleJob) {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(PTD_SOURCE_DIR "/assets/jobs")) {
        if (e.path().extension() != ".toml") continue;
        auto job = ptd::load_job_file(e.path().string(), presets());
        ASSERT_TRUE(job) << job.error().str();
        SCOPED_TRACE(e.path().string());
        expect_round_trip(*job);
        ++n;
    }
    EXPECT_GE(n, 5);
}

TEST(JobSpecRoundTrip, PresetWithOverridesSavesOnlyTheChanges) {
    auto job = load(base_with("preset = \"llama3-8b\"", "preset = \"llama3-8b\"\nseq_len = 4096"));
    ASSERT_TRUE(job);
    std::string text = ptd::save_job_toml(*job);
    EXPECT_TRUE(contains(text, "preset = \"llama3-8b\"\nseq_len = 4096\n")) << text;
    EXPECT_FALSE(contains(text, "hidden =")) << text;
    expect_round_trip(*job);
}

TEST(JobSpecRoundTrip, CustomGpuAndEverySection) {
    std::string text = R"(
[model]
name = "my model"
arch = "gpt"
layers = 6
hidden = 768
heads = 12
vocab = 50304
seq_len = 1024
experts = 4
top_k = 1
norm_eps = 1e-6

[cluster]
nodes = 2
gpus_per_node = 4
inter_gbps = 12.5
hosts = ["n1", "host with \"quotes\""]

[cluster.gpu]
preset = "a100-80gb"
memory_gib = 79.5

[parallel]
tp = 2
pp = 2
dp = 2
ep = 2
vpp = 3
zero = 1
recompute = "full"
order = "tp-pp-ep-dp-cp"
layers_per_stage = [1, 1, 1, 1, 1, 1]
overlap_grad_reduce = true
overlap_param_gather = true
fsdp_prefetch = 2

[training]
micro_batch = 1
precision = "fp16"
optimizer = "adam"
lr = 1.5e-4
warmup = 10
steps = 50
data = "/data/tokens.bin"
flash_attention = false

[launch]
mode = "ssh"
user = "me"
port = 2222
env = ["NCCL_DEBUG", "MY_VAR"]
accept_new_host_keys = true
grace_s = 2.5

[estimate]
activation_profile = "ptd-engine"
attention_flops = "causal"
cuda_context_gib = 0.75
nccl_gib = 0.25
fragmentation = 0.1
headroom = 0.05
vocab_pad = 64
zero_bucket_elements = 2e8
)";
    auto job = load(text);
    ASSERT_TRUE(job) << job.error().str();
    EXPECT_FALSE(job->training.flash_attention);
    EXPECT_EQ(job->estimate.activation_profile, ptd::ActivationProfile::ptd_engine);
    EXPECT_EQ(job->estimate.attention_flops, ptd::AttentionFlops::causal);
    EXPECT_EQ(job->estimate.cuda_context_gib, 0.75);
    EXPECT_EQ(job->estimate.nccl_gib, 0.25);
    EXPECT_EQ(job->estimate.fragmentation, 0.1);
    EXPECT_EQ(job->estimate.headroom, 0.05);
    EXPECT_EQ(job->estimate.vocab_pad, 64);
    EXPECT_TRUE(job->parallel.overlap_grad_reduce);
    EXPECT_TRUE(job->parallel.overlap_param_gather);
    EXPECT_FALSE(job->parallel.tp_comm_overlap);
    EXPECT_EQ(job->parallel.fsdp_prefetch, 2);
    EXPECT_EQ(job->estimate.zero_bucket_elements, 2e8);
    EXPECT_EQ(job->cluster.gpu.memory_gib, 79.5);
    EXPECT_EQ(job->cluster.gpu.bf16_tflops, 312.0);
    EXPECT_EQ(job->model.name, "my model");
    expect_round_trip(*job);
}

TEST(JobSpecRoundTrip, BuiltInJobsAreValidAndRoundTrip) {
    for (const ptd::JobSpec& job : {ptd::default_job(presets()), ptd::tiny_local_job(presets())}) {
        EXPECT_TRUE(ptd::validate_job(job).empty()) << ptd::format_diagnostics(ptd::validate_job(job));
        expect_round_trip(job);
    }
}

TEST(JobSpec, HfConfigRelativeToJobFile) {
    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / "ptd_test_hf_job";
    fs::create_directories(dir / "cfg");
    {
        std::ofstream(dir / "cfg" / "config.json") << R"({"model_type": "llama", "num_hidden_layers": 4,
            "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 4, "intermediate_size": 1376,
            "vocab_size": 1000, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6})";
        std::ofstream(dir / "job.toml") << "[model]\nhf_config = \"cfg/config.json\"\nseq_len = 1024\n"
                                           "[cluster]\nnodes = 1\ngpus_per_node = 4\ngpu = \"a100-80gb\"\n"
                                           "[parallel]\ntp = 4\n";
    }
    auto job = ptd::load_job_file((dir / "job.toml").string(), presets());
    ASSERT_TRUE(job) << job.error().str();
    EXPECT_EQ(job->model.layers, 4);
    EXPECT_EQ(job->model.kv_heads, 4);
    EXPECT_EQ(job->model.seq_len, 1024);  // the job's override wins
    std::string saved = ptd::save_job_toml(*job);
    EXPECT_TRUE(contains(saved, "hf_config = \"cfg/config.json\"\nseq_len = 1024\n")) << saved;

    std::ofstream(dir / "bad.toml") << "[model]\nhf_config = \"missing.json\"\n"
                                       "[cluster]\nnodes = 1\ngpus_per_node = 4\ngpu = \"a100-80gb\"\n";
    auto bad = ptd::load_job_file((dir / "bad.toml").string(), presets());
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error().diagnostics[0].key, "model.hf_config");
    EXPECT_EQ(bad.error().diagnostics[0].where.line, 2);
    fs::remove_all(dir);
}

TEST(JobSpec, HfConfigSeqLenFromJobAndNotesKept) {
    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / "ptd_test_hf_job2";
    fs::create_directories(dir);
    // No max_position_embeddings: the job's seq_len stands in. rope_scaling gives a note.
    std::ofstream(dir / "config.json") << R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256,
        "num_attention_heads": 4, "intermediate_size": 688, "vocab_size": 500,
        "rope_scaling": {"type": "linear", "factor": 2.0}})";
    std::ofstream(dir / "job.toml") << "[model]\nhf_config = \"config.json\"\nseq_len = 512\n"
                                       "[cluster]\nnodes = 1\ngpus_per_node = 2\ngpu = \"a100-80gb\"\n";
    auto job = ptd::load_job_file((dir / "job.toml").string(), presets());
    ASSERT_TRUE(job) << job.error().str();
    EXPECT_EQ(job->model.seq_len, 512);
    ASSERT_EQ(job->origin.notes.size(), 2u);
    EXPECT_EQ(job->origin.notes[0], "hf_config: seq_len = 512 from the job's [model] seq_len");
    EXPECT_TRUE(contains(job->origin.notes[1], "rope_scaling")) << job->origin.notes[1];
    fs::remove_all(dir);
}

TEST(JobSpec, EmptyFileNameWithHfConfigIsAnErrorNotACrash) {
    auto r = ptd::load_job_text("[model]\nhf_config = \"nope.json\"\n[cluster]\nnodes = 1\ngpus_per_node = 1\n"
                                "gpu = \"cpu\"\n",
                                "", presets());
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().diagnostics[0].key, "model.hf_config");
}

TEST(JobSpecChecks, AllowedListsForLargeDimensions) {
    // ffn_hidden 2^26 − 1: the allowed-tp list comes from divisor pairs, not a scan up to n.
    auto r = load(base_with("preset = \"llama3-8b\"", "preset = \"llama3-8b\"\nffn_hidden = 67108863"));
    ASSERT_FALSE(r);
    EXPECT_TRUE(contains(r.error().str(), "ffn_hidden (67108863) must be divisible by tp; allowed tp: 1, 3, 2731, 8191, 8193, 24573, 22369621, 67108863"))
        << r.error().str();
}

TEST(JobSpec, UnreadableFileIsAnErrorNotACrash) {
    auto r = ptd::load_job_file("/nonexistent/job.toml", presets());
    ASSERT_FALSE(r);
    EXPECT_TRUE(contains(r.error().str(), "/nonexistent/job.toml")) << r.error().str();
    auto dir = ptd::load_job_file("/tmp", presets());
    ASSERT_FALSE(dir);
}

}  // namespace

// ---- issue 12: a bare job (model + cluster + global batch), defaults that follow the GPU ----

namespace {
const char* kBare = R"(
[model]
preset = "llama3-405b"

[cluster]
nodes = 2048
gpus_per_node = 8
gpu = "h100-sxm"

[training]
global_batch = 2048
)";
}  // namespace

TEST(JobSpecBare, NoParallelTableMeansNoLayoutNotAnError) {
    // Before: "not divisible by micro_batch·dp = 1·16384", a layout the user never wrote.
    auto job = load(kBare);
    ASSERT_TRUE(job) << job.error().str();
    EXPECT_FALSE(job->has_layout());
    EXPECT_EQ(job->training.global_batch, 2048);
    EXPECT_TRUE(ptd::validate_job(*job).empty());
    auto need = ptd::require_layout(*job, "`ptd layout`");
    ASSERT_EQ(need.size(), 1u);
    ptd_test::expect_mentions(need[0].message, {"no layout chosen", "ptd plan"});
    EXPECT_TRUE(ptd::require_global_batch(*job, "`ptd plan`").empty());
}

TEST(JobSpecBare, MissingGlobalBatchIsNotInvented) {
    // Before: global_batch silently became micro_batch · dp = 16,384 sequences.
    std::string text = kBare;
    text.replace(text.find("global_batch = 2048\n"), 20, "micro_batch = 1\n");
    auto job = load(text);
    ASSERT_TRUE(job) << job.error().str();
    EXPECT_EQ(job->training.global_batch, 0);
    auto need = ptd::require_global_batch(*job, "`ptd plan`");
    ASSERT_EQ(need.size(), 1u);
    EXPECT_EQ(need[0].key, "training.global_batch");
    EXPECT_EQ(need[0].where.file, "job.toml");
    EXPECT_GT(need[0].where.line, 0);  // the [training] table
    EXPECT_TRUE(contains(need[0].message, "not given")) << need[0].message;
    // With a stated layout the global batch still derives from it (documented default).
    auto with_layout = load(base_with("global_batch = 64\n", ""));
    ASSERT_TRUE(with_layout);
    EXPECT_EQ(with_layout->training.global_batch, 2 * 2);
}

TEST(JobSpecBare, SaveKeepsTheLayoutUnchosen) {
    auto job = load(kBare);
    ASSERT_TRUE(job);
    const std::string saved = ptd::save_job_toml(*job);
    EXPECT_FALSE(contains(saved, "\n[parallel]\n")) << saved;
    auto again = load(saved);
    ASSERT_TRUE(again) << again.error().str() << "\n" << saved;
    EXPECT_FALSE(again->has_layout());
    EXPECT_EQ(again->training.global_batch, 2048);
}

TEST(JobSpecDefaults, PrecisionAndFlashAttentionFollowTheGpu) {
    // Before: precision defaulted to bf16 everywhere, and `gpu = "cpu"` failed with
    // `got "bf16"`, a value the user never wrote.
    struct Case {
        const char* gpu;
        ptd::Precision precision;
        bool flash;
    };
    for (Case c : {Case{"cpu", ptd::Precision::fp32, false}, Case{"v100-32gb", ptd::Precision::fp16, false},
                   Case{"h100-sxm", ptd::Precision::bf16, true}, Case{"a100-80gb", ptd::Precision::bf16, true}}) {
        auto job = load(R"(
[model]
preset = "tiny-gpt"
[cluster]
nodes = 1
gpus_per_node = 4
gpu = ")" + std::string(c.gpu) + R"("
[parallel]
tp = 2
)");
        ASSERT_TRUE(job) << c.gpu << ": " << job.error().str();
        EXPECT_EQ(job->training.precision, c.precision) << c.gpu;
        EXPECT_EQ(job->training.flash_attention, c.flash) << c.gpu;
        EXPECT_TRUE(job->origin.precision_defaulted);
        // Saving keeps them defaulted (a comment), so changing the GPU later re-defaults them.
        const std::string saved = ptd::save_job_toml(*job);
        EXPECT_TRUE(contains(saved, "(defaulted for the GPU)")) << saved;
        auto again = load(saved);
        ASSERT_TRUE(again) << again.error().str();
        EXPECT_TRUE(again->origin.precision_defaulted);
        EXPECT_EQ(again->training.precision, c.precision);
    }
    // Written values are kept, and a wrong one is still an error that says it was given.
    auto given = load(base_with("global_batch = 64\n", "global_batch = 64\nprecision = \"fp32\"\n"));
    ASSERT_TRUE(given);
    EXPECT_FALSE(given->origin.precision_defaulted);
    EXPECT_EQ(given->training.precision, ptd::Precision::fp32);
    // The cpu preset allows bf16 when written (the engine stores 16-bit, computes in fp32)
    // although it defaults to fp32; a GPU without bf16 refuses it.
    auto cpu_bf16 = load(base_with("gpu = \"h100-sxm\"", "gpu = \"cpu\"").append("precision = \"bf16\"\n"));
    ASSERT_TRUE(cpu_bf16) << cpu_bf16.error().str();
    EXPECT_EQ(cpu_bf16->training.precision, ptd::Precision::bf16);
    EXPECT_FALSE(cpu_bf16->training.flash_attention);
    auto bad = load(base_with("gpu = \"h100-sxm\"", "gpu = \"v100-32gb\"").append("precision = \"bf16\"\n"));
    ptd::Diagnostic d = only_error(bad);
    EXPECT_EQ(d.key, "training.precision");
    EXPECT_TRUE(contains(d.message, "got \"bf16\"")) << d.message;
    EXPECT_GT(d.where.line, 0);
}

TEST(JobSpecDefaults, ActivationProfileFollowsTheGpu) {
    // The `cpu` preset runs only the bundled engine: count its buffers, not Megatron-LM's.
    const std::string cpu_job = "[model]\npreset = \"tiny-gpt\"\n[cluster]\nnodes = 1\ngpus_per_node = 4\ngpu = \"cpu\"\n"
                                "[parallel]\ntp = 2\n";
    auto cpu = load(cpu_job);
    ASSERT_TRUE(cpu) << cpu.error().str();
    EXPECT_EQ(cpu->estimate.activation_profile, ptd::ActivationProfile::ptd_engine);
    auto h100 = load(kBase);
    ASSERT_TRUE(h100);
    EXPECT_EQ(h100->estimate.activation_profile, ptd::ActivationProfile::megatron);
    EXPECT_EQ(ptd::tiny_local_job(presets()).estimate.activation_profile, ptd::ActivationProfile::ptd_engine);
    // A written profile is kept, also through save and load.
    auto given = load(cpu_job + "[estimate]\nactivation_profile = \"megatron\"\n");
    ASSERT_TRUE(given) << given.error().str();
    EXPECT_EQ(given->estimate.activation_profile, ptd::ActivationProfile::megatron);
    auto again = load(ptd::save_job_toml(*given));
    ASSERT_TRUE(again) << again.error().str();
    EXPECT_EQ(again->estimate.activation_profile, ptd::ActivationProfile::megatron);
    auto defaulted_again = load(ptd::save_job_toml(*cpu));
    ASSERT_TRUE(defaulted_again);
    EXPECT_TRUE(defaulted_again->origin.activation_profile_defaulted);
    EXPECT_FALSE(contains(ptd::save_job_toml(*cpu), "activation_profile"));
}
// ---- issue 12: special and huge files, deep TOML, BOMs, echoed values ----------------

#include <sys/stat.h>
#include <unistd.h>

#include "ptd/common/file_read.h"
#include "ptd/spec/job_overrides.h"

namespace {

namespace fs = std::filesystem;

// A fresh folder with a FIFO, a directory and a sparse file of `big` bytes in it.
struct SpecialFiles {
    fs::path dir;
    explicit SpecialFiles(const std::string& name, uint64_t big) {
        dir = fs::temp_directory_path() / ("ptd_special_" + std::to_string(::getpid()) + "_" + name);
        fs::remove_all(dir);
        fs::create_directories(dir / "folder");
        EXPECT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
        std::ofstream(dir / "big");
        fs::resize_file(dir / "big", big);  // sparse: costs no disk
    }
    ~SpecialFiles() {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
    std::string fifo() const { return (dir / "fifo").string(); }
    std::string folder() const { return (dir / "folder").string(); }
    std::string big() const { return (dir / "big").string(); }
};

// /dev/zero as a job file grew memory without limit; a FIFO never ended. Each is refused
// before a byte is read, naming the path and what it is; an oversized file names its size
// and the cap. A FIFO with no writer must not hang the open (the test would time out).
TEST(SpecialFiles, JobFile) {
    SpecialFiles f("job", 5 * ptd::kMiB);
    auto zero = ptd::load_job_file("/dev/zero", presets());
    ASSERT_FALSE(zero);
    EXPECT_EQ(zero.error().str(), "/dev/zero: error: is a character device; expected a regular file (a job file)\n");
    auto fifo = ptd::load_job_file(f.fifo(), presets());
    ASSERT_FALSE(fifo);
    EXPECT_EQ(fifo.error().str(), f.fifo() + ": error: is a FIFO (named pipe); expected a regular file (a job file)\n");
    auto folder = ptd::load_job_file(f.folder(), presets());
    ASSERT_FALSE(folder);
    EXPECT_EQ(folder.error().str(), f.folder() + ": error: is a directory; expected a regular file (a job file)\n");
    auto big = ptd::load_job_file(f.big(), presets());
    ASSERT_FALSE(big);
    EXPECT_EQ(big.error().str(), f.big() + ": error: is 5,242,880 bytes, more than a job file may be (at most 4 MiB)\n");
    // The same reader is behind --set on a file.
    auto with_set = ptd::load_job_file_with_overrides(f.fifo(), {"parallel.tp=2"}, presets());
    ASSERT_FALSE(with_set);
    EXPECT_TRUE(contains(with_set.error().str(), "is a FIFO")) << with_set.error().str();
}

// An hf_config that is not a regular file, or is far larger than any config.json.
TEST(SpecialFiles, HfConfigFromAJob) {
    SpecialFiles f("hf", 9 * ptd::kMiB);
    for (const auto& [path, what] : std::vector<std::pair<std::string, std::string>>{
             {"/dev/zero", "is a character device; expected a regular file (a Hugging Face config.json)"},
             {f.fifo(), "is a FIFO (named pipe); expected a regular file (a Hugging Face config.json)"},
             {f.folder(), "is a directory; expected a regular file (a Hugging Face config.json)"},
             {f.big(), "is 9,437,184 bytes, more than a Hugging Face config.json may be (at most 8 MiB)"}}) {
        auto r = load("[model]\nhf_config = \"" + path + "\"\n[cluster]\nnodes = 1\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n");
        ASSERT_FALSE(r) << path;
        EXPECT_TRUE(contains(r.error().str(), "job.toml:2:13: error: model.hf_config:")) << r.error().str();
        EXPECT_TRUE(contains(r.error().str(), path + ": error: " + what)) << r.error().str();
    }
}

// Issue 12 item 5: an 80 KB line with a 40,000-part dotted key overflowed the stack inside
// toml++ (exit 139). Deep structures are refused first, with the line.
TEST(DeepToml, DottedKeysHeadersAndNestingAreBounded) {
    std::string key = "a";
    for (int i = 0; i < 40000; ++i) key += ".a";
    auto dotted = load("# a comment\n" + key + " = 1\n");
    ptd::Diagnostic d = only_error(dotted);
    EXPECT_EQ(d.where.line, 2);
    EXPECT_EQ(d.message, "a dotted key of 40,001 parts; allowed: at most 32 parts");

    auto header = load("[" + key + "]\n");
    EXPECT_EQ(only_error(header).message, "a dotted key of 40,001 parts; allowed: at most 32 parts");
    auto array_header = load("x = 1\n[[" + key + "]]\n");
    EXPECT_EQ(only_error(array_header).where.line, 2);

    auto arrays = load("v = " + std::string(100000, '[') + std::string(100000, ']') + "\n");
    EXPECT_TRUE(contains(only_error(arrays).message, "arrays and inline tables nested more than 32 deep"));
    std::string inline_tables = "v = ";
    for (int i = 0; i < 50000; ++i) inline_tables += "{a=";
    auto tables = load(inline_tables + "1" + std::string(50000, '}') + "\n");
    EXPECT_TRUE(contains(only_error(tables).message, "nested more than 32 deep"));

    // Dots inside strings, values and comments are not key parts; real files still load.
    auto fine = load(base_with("[training]", "[training]\ndata = \"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s.t.u.v.w.x.y.z.1.2.3.4.5.6.7\"\nlr = 3.0e-4 # x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x\n"));
    EXPECT_TRUE(fine) << fine.error().str();
}

// The same bound applies to --set (a key of thousands of parts built as many tables).
TEST(DeepToml, OverridesAreBounded) {
    std::string key = "training";
    for (int i = 0; i < 40000; ++i) key += ".a";
    auto r = ptd::load_job_text_with_overrides(kBase, "job.toml", {key + "=1"}, presets());
    ASSERT_FALSE(r);
    EXPECT_TRUE(contains(r.error().str(), "the key has 40,001 dotted parts; allowed: at most 8")) << r.error().str().substr(0, 300);
    auto deep_value = ptd::load_job_text_with_overrides(kBase, "job.toml",
                                                        {"training.lr=" + std::string(50000, '[') + std::string(50000, ']')},
                                                        presets());
    ASSERT_FALSE(deep_value);
    EXPECT_TRUE(contains(deep_value.error().str(), "nested more than 32 deep")) << deep_value.error().str().substr(0, 300);
}

// A UTF-8 byte-order mark at the start of a job file is accepted.
TEST(JobSpec, ByteOrderMarkIsAccepted) {
    auto r = load("\xEF\xBB\xBF" + std::string(kBase));
    EXPECT_TRUE(r) << r.error().str();
}

// cost (issue 28 point 5): the run's keys are read, saved only where given, and survive a round trip.
TEST(CostKeys, ReadAndRoundTrip) {
    std::string text = kBase;
    text.replace(text.find("gpu = \"h100-sxm\"\n"), 17,
                 "gpu = \"h100-sxm\"\ngpu_hour_usd = 2.5\nstorage_gbps = 40\npue = 1.3\nhost_power_w = 3000\n"
                 "failures_per_gpu_hour = 2e-5\n");
    text += "tokens = 15_000_000_000_000\n";
    auto r = load(text);
    ASSERT_TRUE(r) << r.error().str();
    EXPECT_EQ(r->cluster.gpu_hour_usd, 2.5);
    EXPECT_EQ(r->cluster.storage_gbps, 40);
    EXPECT_EQ(r->cluster.pue, 1.3);
    EXPECT_EQ(r->cluster.host_power_w, 3000);
    EXPECT_EQ(r->cluster.failures_per_gpu_hour, 2e-5);
    EXPECT_EQ(r->training.tokens, 15e12);
    EXPECT_EQ(r->cluster.gpu.power_w, 700);  // the h100-sxm preset's datasheet TDP
    const std::string saved = ptd::save_job_toml(*r);
    auto again = ptd::load_job_text(saved, "saved.toml", presets());
    ASSERT_TRUE(again) << again.error().str() << "\n" << saved;
    EXPECT_EQ(again->cluster, r->cluster);
    EXPECT_EQ(again->training, r->training);
    // Not given: nothing written (the documented defaults apply again on load).
    const std::string plain = ptd::save_job_toml(*load(kBase));
    for (const char* key : {"gpu_hour_usd", "storage_gbps", "pue", "host_power_w", "failures_per_gpu_hour", "tokens"})
        EXPECT_FALSE(contains(plain, key)) << key;
}

// Negative, zero, non-numeric and non-finite values are refused with file, line, key and what is allowed.
TEST(CostKeys, BadValuesAreLocated) {
    const std::pair<const char*, const char*> cases[] = {
        {"gpu_hour_usd = -2", "job.toml:9:16: error: cluster.gpu_hour_usd: got -2; allowed: a number > 0"},
        {"gpu_hour_usd = 0", "cluster.gpu_hour_usd: got 0; allowed: a number > 0 and ≤ 1e+06 (USD per GPU-hour)"},
        {"gpu_hour_usd = \"cheap\"", "job.toml:9:16: error: cluster.gpu_hour_usd: expected a number, got string"},
        {"storage_gbps = nan", "cluster.storage_gbps: got nan; allowed: a number > 0"},
        {"storage_gbps = 0.0", "cluster.storage_gbps: got 0; allowed: a number > 0"},
        {"host_power_w = -1", "cluster.host_power_w: got -1; allowed: a number > 0"},
        {"failures_per_gpu_hour = 0", "cluster.failures_per_gpu_hour: got 0; allowed: a number > 0"},
        {"pue = 0.8", "job.toml:9:7: error: cluster.pue: got 0.8; allowed: 1 to 10"},
        {"pue = true", "cluster.pue: expected a number, got boolean"},
    };
    for (const auto& [line, message] : cases) {
        std::string text = kBase;
        text.replace(text.find("gpu = \"h100-sxm\"\n"), 17, "gpu = \"h100-sxm\"\n" + std::string(line) + "\n");
        auto r = load(text);
        ASSERT_FALSE(r) << line;
        EXPECT_TRUE(contains(r.error().str(), message)) << line << "\n" << r.error().str();
    }
    auto tokens = load(std::string(kBase) + "tokens = -15e12\n");
    ASSERT_FALSE(tokens);
    EXPECT_TRUE(contains(tokens.error().str(), "job.toml:17:10: error: training.tokens: got -1.5e+13; allowed: a number > 0"))
        << tokens.error().str();
    std::string gpu = kBase;
    gpu.replace(gpu.find("gpu = \"h100-sxm\"\n"), 17, "[cluster.gpu]\npreset = \"h100-sxm\"\npower_w = 0\n");
    auto power = load(gpu);
    ASSERT_FALSE(power);
    EXPECT_TRUE(contains(power.error().str(), "cluster.gpu.power_w: got 0; allowed: a number > 0")) << power.error().str();
}

// Echoed input is quoted, escaped where it would not show, and shortened with its length.
TEST(QuoteInput, EscapesAndShortens) {
    EXPECT_EQ(ptd::quote_input("h100-sxm"), "\"h100-sxm\"");
    EXPECT_EQ(ptd::quote_input("\xEF\xBB\xBFnode1"), "\"\\u{FEFF}node1\"");
    EXPECT_EQ(ptd::quote_input("a\tb\nc\x01\x7f\"\\"), "\"a\\tb\\nc\\x01\\x7F\\\"\\\\\"");
    EXPECT_EQ(ptd::quote_input("bad\xff"), "\"bad\\xFF\"");
    EXPECT_EQ(ptd::quote_input("Übung"), "\"Übung\"");
    EXPECT_EQ(ptd::quote_input(std::string(4 << 20, 'a'), 4), "\"aaaa\u2026\" (4,194,304 bytes)");
    EXPECT_EQ(ptd::format_count(4194304), "4,194,304");
    EXPECT_EQ(ptd::format_count(999), "999");
}

TEST(QuoteInput, UsedByJobMessages) {
    auto r = load(base_with("preset = \"llama3-8b\"", "preset = \"\xEF\xBB\xBFllama3-8b\""));
    ptd::Diagnostic d = only_error(r);
    EXPECT_TRUE(contains(d.message, "unknown model preset \"\\u{FEFF}llama3-8b\"")) << d.message;
    auto long_word = load(base_with("[training]", "[training]\nprecision = \"" + std::string(100000, 'x') + "\""));
    d = only_error(long_word);
    EXPECT_TRUE(contains(d.message, "(100,000 bytes)")) << d.message.substr(0, 300);
    EXPECT_LT(d.message.size(), 300u);
}

}  // namespace

namespace {

// Error::one_line: for messages embedded in another ("ptd-engine: rank 0: error: ..."):
// no second "error:", no line break.
TEST(QuoteInput, ErrorOnOneLine) {
    ptd::Error e({ptd::Diagnostic{{"a.toml", 3, 2}, "parallel.tp", "got 3"}, ptd::Diagnostic{{"a.toml"}, "", "second"}});
    EXPECT_EQ(e.str(), "a.toml:3:2: error: parallel.tp: got 3\na.toml: error: second\n");
    EXPECT_EQ(e.one_line(), "a.toml:3:2: parallel.tp: got 3; a.toml: second");
}

}  // namespace

namespace {

// A value that looks like a number but that TOML refuses is an error that says why; text
// that only contains digits and dots or dashes (a version, a date-like run id) stays a string.
TEST(Overrides, NumberLikeValues) {
    auto load_set = [](const std::string& set) {
        return ptd::load_job_text_with_overrides(kBase, "job.toml", {set}, presets());
    };
    auto big = load_set("training.lr=1e999");
    ASSERT_FALSE(big);
    EXPECT_EQ(big.error().str(), "--set training.lr=1e999: error: training.lr: got \"1e999\", which is out of range for "
                                 "a double (at most about 1.8e308); give a number in the key's allowed range\n");
    auto leading_zero = load_set("parallel.tp=04");
    ASSERT_FALSE(leading_zero);
    EXPECT_TRUE(contains(leading_zero.error().str(), "got \"04\", which is not a TOML number")) << leading_zero.error().str();
    auto version = load_set("model.name=1.2.3");
    ASSERT_TRUE(version) << version.error().str();
    EXPECT_EQ(version->model.name, "1.2.3");
    auto dated = load_set("launch.run_dir=runs/2024-01");
    ASSERT_TRUE(dated) << dated.error().str();
    auto neg = load_set("training.lr=-1e999");
    ASSERT_FALSE(neg);
    EXPECT_TRUE(contains(neg.error().str(), "out of range for a double")) << neg.error().str();
}

}  // namespace

// Vocabulary padding follows the framework (issue 29 point 7): Megatron-LM pads to 128 · tp,
// torchtitan keeps the tokenizer's size; a written vocab_pad wins, and saving writes it only
// where it differs from the framework's.
TEST(JobSpec, VocabPadFollowsTheFramework) {
    auto megatron = load(kBase);
    ASSERT_TRUE(megatron) << megatron.error().str();
    EXPECT_EQ(megatron->estimate.vocab_pad, 128);
    auto titan = load(base_with("micro_batch = 2", "micro_batch = 2\nframework = \"torchtitan\""));
    ASSERT_TRUE(titan) << titan.error().str();
    EXPECT_EQ(titan->estimate.vocab_pad, 1);
    EXPECT_EQ(ptd::save_job_toml(*titan).find("vocab_pad"), std::string::npos);
    auto written = load(base_with("micro_batch = 2", "micro_batch = 2\nframework = \"torchtitan\"") + "\n[estimate]\nvocab_pad = 128\n");
    ASSERT_TRUE(written) << written.error().str();
    EXPECT_EQ(written->estimate.vocab_pad, 128);
    const std::string saved = ptd::save_job_toml(*written);
    EXPECT_NE(saved.find("vocab_pad = 128"), std::string::npos) << saved;
    auto again = ptd::load_job_text(saved, "saved.toml", presets());
    ASSERT_TRUE(again) << again.error().str();
    EXPECT_EQ(again->estimate.vocab_pad, 128);
}

namespace {

// [paths] and the NCCL names of [launch] (issue 28): read, saved and read back; a path that
// would break a shell script, or an HCA name with a space, is refused at its line.
TEST(PathsKeys, ReadSavedAndChecked) {
    auto job = load(std::string(kBase) + "[paths]\nsave = \"/ckpt/run 1\"\ntokenizer = \"meta-llama/Meta-Llama-3-8B\"\n"
                                         "save_interval = 500\n[launch]\nnccl_ib_hca = [\"mlx5_0\", \"mlx5_3:1\"]\n"
                                         "nccl_socket_ifname = \"^docker\"\n");
    ASSERT_TRUE(job) << job.error().str();
    EXPECT_EQ(job->paths.save, "/ckpt/run 1");
    EXPECT_EQ(job->paths.save_interval, 500);
    EXPECT_EQ(job->launch.nccl_ib_hca, (std::vector<std::string>{"mlx5_0", "mlx5_3:1"}));
    auto again = ptd::load_job_text(ptd::save_job_toml(*job), "saved.toml", presets());
    ASSERT_TRUE(again) << again.error().str();
    EXPECT_EQ(again->paths, job->paths);
    EXPECT_EQ(again->launch.nccl_ib_hca, job->launch.nccl_ib_hca);
    auto quote = load(std::string(kBase) + "[paths]\nlogs = \"/logs/$(rm -rf ~)\"\n");
    ASSERT_FALSE(quote);
    ptd_test::expect_mentions(quote.error().str(), {"job.toml:", "paths.logs", "$"});
    auto hca = load(std::string(kBase) + "[launch]\nnccl_ib_hca = [\"mlx5 0\"]\n");
    ASSERT_FALSE(hca);
    ptd_test::expect_mentions(hca.error().str(), {"launch.nccl_ib_hca", "is not an HCA name"});
    auto unknown = load(std::string(kBase) + "[paths]\ndata = \"/d\"\n");
    ASSERT_FALSE(unknown);
    ptd_test::expect_mentions(unknown.error().str(), {"paths.data"});
}

}  // namespace

namespace {

// The line of the `n`-th line appended after kBase (1 = the first).
std::string line_after_base(int n) {
    const std::string base = kBase;
    return "job.toml:" + std::to_string((int)std::count(base.begin(), base.end(), '\n') + n) + ":";
}

// [launch.slurm] (issue 32): every key read, saved and read back the same.
TEST(SlurmKeys, ReadSavedAndReadBack) {
    auto job = load(std::string(kBase) +
                    "[launch.slurm]\npartition = \"gpu\"\naccount = \"proj-1\"\nqos = \"high\"\ntime = \"2-04:00:00\"\n"
                    "exclusive = true\ncpus_per_task = 12\nmem = \"0\"\ngpu_bind = \"closest\"\nconstraint = \"h100&ib\"\n"
                    "nodelist = \"gpu[01-04]\"\nexclude = \"gpu07\"\nextra_sbatch = [\"--reservation=big\", \"--signal=USR1@120\"]\n"
                    "setup = \"module load cuda/12.4\\nexport NCCL_DEBUG=WARN\\n\"\n"
                    "container_image = \"nvcr.io#nvidia/pytorch:24.05-py3\"\ncontainer_mounts = [\"/data:/data:ro\"]\nsbcast = true\n");
    ASSERT_TRUE(job) << job.error().str();
    const ptd::SlurmSpec& s = job->launch.slurm;
    EXPECT_EQ(s.partition, "gpu");
    EXPECT_EQ(s.time, "2-04:00:00");
    EXPECT_TRUE(s.exclusive);
    EXPECT_EQ(s.cpus_per_task, 12);
    EXPECT_EQ(s.extra_sbatch.size(), 2u);
    EXPECT_EQ(s.setup, "module load cuda/12.4\nexport NCCL_DEBUG=WARN\n");
    EXPECT_TRUE(s.sbcast);
    const std::string saved = ptd::save_job_toml(*job);
    EXPECT_NE(saved.find("[launch.slurm]\npartition = \"gpu\""), std::string::npos) << saved;
    auto again = ptd::load_job_text(saved, "saved.toml", presets());
    ASSERT_TRUE(again) << again.error().str();
    EXPECT_EQ(again->launch.slurm, s);
    // Nothing set: no table written.
    auto plain = load(kBase);
    ASSERT_TRUE(plain);
    EXPECT_EQ(ptd::save_job_toml(*plain).find("launch.slurm"), std::string::npos);
}

// [launch.k8s] (issue 32 point 3): every key read, saved and read back the same; each bad value
// (point 5) refused with the file, its line, the key, what was given and what is allowed.
TEST(K8sKeys, ReadSavedAndBadValuesRefusedWithFileLineKeyGivenAndAllowed) {
    auto job = load(std::string(kBase) +
                    "[launch.k8s]\nimage = \"registry.example.com/ptd:1\"\ntopology_key = \"nvidia.com/gpu.clique\"\n"
                    "nodes_per_domain = 2\ngpu_product = \"NVIDIA-H100-80GB-HBM3\"\ngpu_product_label = \"example.com/gpu\"\n");
    ASSERT_TRUE(job) << job.error().str();
    const ptd::K8sSpec& k = job->launch.k8s;
    EXPECT_EQ(k.image, "registry.example.com/ptd:1");
    EXPECT_EQ(k.topology_key, "nvidia.com/gpu.clique");
    EXPECT_EQ(k.nodes_per_domain, 2);
    const std::string saved = ptd::save_job_toml(*job);
    EXPECT_NE(saved.find("[launch.k8s]\nimage = \"registry.example.com/ptd:1\""), std::string::npos) << saved;
    auto again = ptd::load_job_text(saved, "saved.toml", presets());
    ASSERT_TRUE(again) << again.error().str();
    EXPECT_EQ(again->launch.k8s, k);
    EXPECT_EQ(ptd::save_job_toml(*load(kBase)).find("launch.k8s"), std::string::npos);

    struct Case {
        std::string line, key, given, allowed;
    };
    const Case cases[] = {
        {"image = \"my image:1\"", "launch.k8s.image", "\"my image:1\"", "without spaces or quotes"},
        {"topology_key = \"gpu clique\"", "launch.k8s.topology_key", "\"gpu clique\"", "a Kubernetes label key"},
        {"topology_key = \"-rack/\"", "launch.k8s.topology_key", "\"-rack/\"", "up to 63 letters"},
        {"gpu_product = \"NVIDIA H100\"", "launch.k8s.gpu_product", "\"NVIDIA H100\"", "a Kubernetes label value"},
        {"topology_key = \"rack\"\nnodes_per_domain = 3", "launch.k8s.nodes_per_domain", "got 3",
         "a divisor of the node count"},
        {"nodes_per_domain = 1", "launch.k8s.nodes_per_domain", "given without launch.k8s.topology_key", "with the node label"},
        {"topolgy_key = \"rack\"", "launch.k8s.topolgy_key", "unknown key (did you mean \"topology_key\"?)", "allowed in [launch.k8s]"},
    };
    for (const Case& c : cases) {
        auto bad = load(std::string(kBase) + "[launch.k8s]\n" + c.line + "\n");
        ASSERT_FALSE(bad) << c.line;
        const int line = c.line.find('\n') == std::string::npos ? 2 : 3;
        ptd_test::expect_mentions(bad.error().str(), {line_after_base(line), c.key, c.given, "allowed", c.allowed});
    }
}

// Point 5 of issue 32: each bad value refused with the file, its line, the key, what was
// given and what is allowed.
TEST(SlurmKeys, BadValuesAreRefusedWithFileLineKeyGivenAndAllowed) {
    struct Case {
        std::string line, key, given, allowed;
    };
    const Case cases[] = {
        {"time = \"90 minutes\"", "launch.slurm.time", "\"90 minutes\"", "DAYS-HOURS:MINUTES:SECONDS"},
        {"time = \"4h\"", "launch.slurm.time", "\"4h\"", "HOURS:MINUTES:SECONDS"},
        {"container_image = \"my image:latest\"", "launch.slurm.container_image", "\"my image:latest\"", "without spaces"},
        {"partition = \"gpu a\"", "launch.slurm.partition", "\"gpu a\"", "letters, digits"},
        {"mem = \"64 GB\"", "launch.slurm.mem", "\"64 GB\"", "K, M, G or T"},
        {"gpu_bind = \"nearest\"", "launch.slurm.gpu_bind", "\"nearest\"", "closest, single:N"},
        {"extra_sbatch = [\"reservation=big\"]", "launch.slurm.extra_sbatch", "\"reservation=big\"", "starting with '-'"},
        {"container_mounts = [\"data:/data\"]", "launch.slurm.container_mounts", "\"data:/data\"", "absolute paths"},
        {"cpus_per_task = 0", "launch.slurm.cpus_per_task", "0", "1"},
        {"partiton = \"gpu\"", "launch.slurm.partiton", "unknown key (did you mean \"partition\"?)", "allowed in [launch.slurm]"},
    };
    for (const Case& c : cases) {
        auto job = load(std::string(kBase) + "[launch.slurm]\n" + c.line + "\n");
        ASSERT_FALSE(job) << c.line;
        ptd_test::expect_mentions(job.error().str(), {line_after_base(2), c.key, c.given, "allowed", c.allowed});
    }
    // A named cluster's nodes: no more GPUs per node than it has.
    auto too_many = load("[model]\npreset = \"llama3-8b\"\n[cluster]\npreset = \"dgx-h100\"\nnodes = 2\ngpus_per_node = 16\n"
                         "[parallel]\ntp = 8\n[training]\nmicro_batch = 1\nglobal_batch = 64\n");
    ASSERT_FALSE(too_many);
    ptd_test::expect_mentions(too_many.error().str(),
                              {"job.toml:6:", "cluster.gpus_per_node", "got 16", "8 GPUs per node of cluster preset", "allowed: 1 .. 8"});
}

}  // namespace
