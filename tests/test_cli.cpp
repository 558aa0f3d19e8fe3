// test_cli.cpp — `ptd` and `ptd-engine` run as real processes: exit codes (0 ok, 2 usage
// or config error), messages on stderr, colour only on a TTY, the --json schemas, the
// estimate / plan / export commands and `--set` overrides.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "launcher_test_util.h"  // scratch_dir
#include "process_test_util.h"
#include "profile_test_util.h"
#include "text_test_util.h"
#include "estimate_view.h"
#include "job_test_util.h"

namespace {

using ptd_test::Proc;
using ptd_test::read_file;

// Runs `cmd` through the shell with stdout/stderr captured to files (never a TTY).
Proc run(const std::string& cmd) { return ptd_test::run_captured(cmd, "ptd_cli"); }

// The same for a command that must be refused as a usage or configuration error (exit 2).
Proc run_refused(const std::string& cmd) {
    Proc r = run(cmd);
    EXPECT_EQ(r.rc, 2) << cmd;
    return r;
}

// The same for a command that must succeed (exit 0; its stderr otherwise).
Proc run_ok(const std::string& cmd) {
    Proc r = run(cmd);
    EXPECT_EQ(r.rc, 0) << cmd << "\n" << r.err;
    return r;
}

const std::string kPtd = PTD_BIN_DIR "/ptd";
const std::string kEngine = PTD_BIN_DIR "/ptd-engine";
const std::string kJobs = PTD_SOURCE_DIR "/assets/jobs/";

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// The job files these tests write go to this process's own scratch folder, removed after
// the last test when all passed: their names repeat, and fixed names in /tmp would be
// shared by two runs at once and left behind.
const std::string& scratch() {
    static const std::string dir = ptd_test::scratch_dir("cli");
    return dir;
}

std::string write_temp(const std::string& name, const std::string& text) {
    std::string path = scratch() + "/" + name;
    std::ofstream(path) << text;
    return path;
}

TEST(Cli, HelpAndVersion) {
    Proc help = run(kPtd + " --help");
    EXPECT_EQ(help.rc, 0);
    for (const char* cmd : {"validate", "layout", "presets", "estimate", "plan", "export"})
        EXPECT_TRUE(contains(help.out, cmd)) << help.out;
    Proc version = run(kPtd + " --version");
    EXPECT_EQ(version.rc, 0);
    EXPECT_TRUE(contains(version.out, "ptd 0.")) << version.out;
}

TEST(Cli, UsageErrorsExitTwo) {
    EXPECT_EQ(run(kPtd).rc, 2);
    Proc unknown = run_refused(kPtd + " frobnicate");
    EXPECT_TRUE(contains(unknown.err, "ptd: error:")) << unknown.err;
    Proc bad_flag = run_refused(kPtd + " layout " + kJobs + "tiny-local.toml --color-by xy");
    EXPECT_TRUE(contains(bad_flag.err, "xy")) << bad_flag.err;
}

TEST(Cli, ValidateGoodAndBadJobs) {
    Proc ok = run(kPtd + " validate " + kJobs + "llama3-70b-h100.toml " + kJobs + "tiny-local.toml");
    EXPECT_EQ(ok.rc, 0) << ok.err;
    ptd_test::expect_mentions(ok.out, {"valid:", "70.55B parameters"});

    std::string bad = write_temp("bad_job.toml",
                                 "[model]\npreset = \"llama3-8b\"\n[cluster]\nnodes = 1\ngpus_per_node = 8\n"
                                 "gpu = \"h100-sxm\"\n[parallel]\ntp = 3\n");
    Proc r = run_refused(kPtd + " validate " + bad);
    EXPECT_TRUE(contains(r.err, bad + ":8:6: error: parallel.tp:")) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_FALSE(contains(r.err, "\x1b[")) << "colour codes when stderr is not a TTY";

    Proc missing = run_refused(kPtd + " validate /no/such/job.toml");
    EXPECT_TRUE(contains(missing.err, "/no/such/job.toml")) << missing.err;
}

TEST(Cli, ValidateJson) {
    std::string bad = write_temp("bad_job2.toml", "[model]\npreset = \"llama3-8b\"\n[cluster]\nnodes = 1\n");
    Proc r = run_refused(kPtd + " validate --json " + kJobs + "tiny-local.toml " + bad);
    auto doc = nlohmann::json::parse(r.out);
    EXPECT_EQ(doc["schema"], "ptd.validate/1");
    ASSERT_EQ(doc["results"].size(), 2u);
    EXPECT_TRUE(doc["results"][0]["valid"].get<bool>());
    EXPECT_EQ(doc["results"][0]["job"]["parallel"]["tp"], 2);
    EXPECT_FALSE(doc["results"][1]["valid"].get<bool>());
    const auto& e = doc["results"][1]["errors"][0];
    EXPECT_EQ(e["file"], bad);
    EXPECT_GT(e["line"].get<int>(), 0);
    EXPECT_FALSE(e["key"].get<std::string>().empty());
}

TEST(Cli, ValidatePrintRoundTrips) {
    Proc r = run_ok(kPtd + " validate --print " + kJobs + "llama3-70b-h100.toml");
    std::string saved = write_temp("saved.toml", r.out);
    Proc again = run_ok(kPtd + " validate --print " + saved);
    EXPECT_EQ(again.out, r.out);
}

// A Megatron-core layout string: the summary shows it, --print keeps it, and a bad one names
// its key, line and character.
TEST(Cli, ValidateShowsAndKeepsThePipelineLayout) {
    const std::string job = write_temp("layout_job.toml",
                                       "[model]\npreset = \"llama3-8b\"\n[cluster]\nnodes = 1\ngpus_per_node = 8\n"
                                       "gpu = \"h100-sxm\"\n[parallel]\ntp = 2\npp = 2\npipeline_layout = \"E|t*16|t*16|L\"\n"
                                       "[training]\nmicro_batch = 1\nglobal_batch = 64\n");
    Proc ok = run_ok(kPtd + " validate " + job);
    EXPECT_TRUE(contains(ok.out, "vpp 2, layout \"E|t*16|t*16|L\"")) << ok.out;
    EXPECT_TRUE(contains(run_ok(kPtd + " validate --print " + job).out, "pipeline_layout = \"E|t*16|t*16|L\"\n"));
    const std::string bad = write_temp("bad_layout.toml",
                                       "[model]\npreset = \"llama3-8b\"\n[cluster]\nnodes = 1\ngpus_per_node = 8\n"
                                       "gpu = \"h100-sxm\"\n[parallel]\ntp = 2\npp = 2\npipeline_layout = \"E|t*16|t*1q|L\"\n");
    Proc r = run_refused(kPtd + " validate " + bad);
    EXPECT_TRUE(contains(r.err, bad + ":10:19: error: parallel.pipeline_layout: got \"E|t*16|t*1q|L\": character 11 is \"q\""))
        << r.err;
}

// The built-in jobs save as their presets, not as every key of the model and the GPU (issue 33).
TEST(Cli, BuiltInJobsPrintTheirPresets) {
    for (const std::string job : {"@default", "@tiny"}) {
        Proc r = run_ok(kPtd + " validate --print " + job);
        EXPECT_TRUE(contains(r.out, job == "@default" ? "preset = \"llama2-7b\"" : "preset = \"tiny-gpt\"")) << r.out;
        EXPECT_TRUE(contains(r.out, job == "@default" ? "gpu = \"h100-sxm\"" : "gpu = \"cpu\"")) << r.out;
        EXPECT_FALSE(contains(r.out, "[cluster.gpu]")) << r.out;
        EXPECT_FALSE(contains(r.out, "hidden =")) << r.out;
        // What it saves loads again, and names the same presets.
        Proc again = run_ok(kPtd + " validate --print " + write_temp("builtin.toml", r.out));
        EXPECT_TRUE(contains(again.out, job == "@default" ? "preset = \"llama2-7b\"" : "preset = \"tiny-gpt\"")) << again.out;
        EXPECT_FALSE(contains(again.out, "[cluster.gpu]")) << again.out;
    }
}

TEST(Cli, LayoutTextGrid) {
    Proc r = run_ok(kPtd + " layout " + kJobs + "llama3-70b-h100.toml --color-by pp");
    ptd_test::expect_mentions(r.out, {"64 ranks = tp 8 × cp 1 × dp 2 × pp 4", "node 7",
                                      "every TP group stays inside one node"});
    EXPECT_FALSE(contains(r.out, "\x1b[")) << "no colour when stdout is a file";

    Proc forced_plain = run("NO_COLOR=1 " + kPtd + " layout @tiny");
    EXPECT_EQ(forced_plain.rc, 0);
    EXPECT_FALSE(contains(forced_plain.out, "\x1b["));
}

TEST(Cli, LayoutColourOnATty) {
    // `script` gives the child a pseudo-terminal; skip where util-linux's script is absent.
    if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "script(1) not installed";
    Proc r = run_ok("TERM=xterm-256color script -qec '" + kPtd + " layout @tiny' /dev/null");
    EXPECT_TRUE(contains(r.out, "\x1b[30;48;5;")) << r.out;
    Proc no_color = run("NO_COLOR=1 TERM=xterm-256color script -qec '" + kPtd + " layout @tiny' /dev/null");
    EXPECT_FALSE(contains(no_color.out, "\x1b[30;48;5;")) << no_color.out;
}

// A job file for `ptd layout`: `preset` on `nodes` × `gpus_per_node` `gpu`, [parallel] tp and pp.
std::string layout_job(const std::string& name, const std::string& preset, int nodes, int gpus_per_node,
                       const std::string& gpu, int tp, int pp) {
    return write_temp(name, "[model]\npreset = \"" + preset + "\"\n[cluster]\nnodes = " + std::to_string(nodes) +
                                "\ngpus_per_node = " + std::to_string(gpus_per_node) + "\ngpu = \"" + gpu +
                                "\"\n[parallel]\ntp = " + std::to_string(tp) + "\npp = " + std::to_string(pp) + "\n");
}

TEST(Cli, LayoutFlagsTpGroupsSpanningNodes) {
    std::string job = layout_job("span.toml", "llama3-405b", 4, 8, "h100-sxm", 16, 2);
    Proc r = run_ok(kPtd + " layout " + job);
    EXPECT_TRUE(contains(r.out, "warning: 2 of 2 TP groups span nodes")) << r.out;
}

TEST(Cli, LayoutFlagsEpAndCpGroupsSpanningNodes) {
    // Mixtral 8x7B, tp 2 × pp 4 on 4 nodes (dp 4), ep 4: each EP group is ranks 2k apart, 8 ranks
    // wide, so the ones starting on a node's second half cross into the next node.
    std::string job = layout_job("ep-span.toml", "mixtral-8x7b", 4, 8, "h100-sxm", 2, 4);
    Proc r = run_ok(kPtd + " layout " + job + " --set parallel.ep=4");
    ptd_test::expect_mentions(r.out, {"32 ranks = tp 2 × cp 1 × dp 4 × pp 4, ep 4, order",
                                      "every TP group stays inside one node"});
    EXPECT_FALSE(contains(r.out, "EP groups span nodes")) << r.out;  // 4 × stride 2 = 8 ranks: one node
    // tp 8 × cp 2 (dp 2): a CP pair is ranks 8 apart, an EP group (over cp·dp) 8 apart too.
    const std::string wide_sets = " --set parallel.ep=4 --set parallel.tp=8 --set parallel.pp=1 --set parallel.cp=2";
    Proc wide = run_ok(kPtd + " layout " + job + wide_sets);
    ptd_test::expect_mentions(wide.out, {"ep 4", "warning: 8 of 8 EP groups span nodes: their token all-to-alls cross",
                                         "warning: 16 of 16 CP groups span nodes"});
    auto doc = nlohmann::json::parse(run_ok(kPtd + " layout --json " + job + wide_sets).out);
    EXPECT_EQ(doc["ep_groups_spanning_nodes"].size(), 8u);
    EXPECT_EQ(doc["cp_groups_spanning_nodes"].size(), 16u);
    EXPECT_EQ(doc["degrees"]["expert_tp"], 8);
}

// `ptd estimate A B`: the two layouts side by side, the rows that differ marked, in text
// and JSON; a job compared with itself differs nowhere; a bare job cannot be compared.
TEST(Cli, EstimateComparesTwoLayoutsSideBySide) {
    const std::string a = kJobs + "llama3-70b-h100.toml", b = kJobs + "llama3-70b-h100-64nodes.toml";
    Proc r = run_ok(kPtd + " estimate " + a + " " + b);
    ptd_test::expect_mentions(r.out, {"A " + a, "B " + b, "* degrees", "tp 8 × cp 1 × dp 2 × pp 4, vpp 5",
                                      "tp 8 × cp 1 × dp 16 × pp 4", "stage 3", "* step", "bubble", "tokens/s", "MFU",
                                      "megatron", "rows differ"});
    Proc flag = run_ok(kPtd + " estimate " + a + " --compare " + b);
    EXPECT_EQ(flag.out, r.out);
    auto doc = nlohmann::json::parse(run_ok(kPtd + " estimate --json " + a + " " + b).out);
    EXPECT_EQ(doc["schema"], "ptd.estimate-compare/1");
    EXPECT_EQ(doc["a"]["name"], a);
    EXPECT_GT(doc["differences"].get<int>(), 2);
    bool step_differs = false;
    for (const auto& row : doc["rows"])
        if (row["label"] == "step") step_differs = row["differs"].get<bool>();
    EXPECT_TRUE(step_differs);
    auto same = nlohmann::json::parse(run_ok(kPtd + " estimate --json " + a + " " + a).out);
    EXPECT_EQ(same["differences"], 0);
    Proc bare = run(kPtd + " estimate " + a + " " + kJobs + "llama3-405b-bare.toml");
    EXPECT_EQ(bare.rc, 2);
    EXPECT_TRUE(contains(bare.err, "has no [parallel] table, so no layout to compare")) << bare.err;
}

TEST(Cli, LayoutJsonMatchesMegatronExample) {
    // Megatron-LM's parallel_state example: 8 GPUs, TP2 · DP2 · PP2.
    std::string job = layout_job("megatron8.toml", "gpt2-124m", 2, 4, "a100-80gb", 2, 2);
    Proc r = run_ok(kPtd + " layout --json " + job);
    auto doc = nlohmann::json::parse(r.out);
    EXPECT_EQ(doc["schema"], "ptd.layout/1");
    EXPECT_EQ(doc["world"], 8);
    EXPECT_EQ(doc["groups"]["tp"], nlohmann::json::parse("[[0,1],[2,3],[4,5],[6,7]]"));
    EXPECT_EQ(doc["groups"]["dp"], nlohmann::json::parse("[[0,2],[1,3],[4,6],[5,7]]"));
    EXPECT_EQ(doc["groups"]["pp"], nlohmann::json::parse("[[0,4],[1,5],[2,6],[3,7]]"));
    EXPECT_EQ(doc["ranks"][5]["node"], 1);
    EXPECT_EQ(doc["ranks"][5]["local_gpu"], 1);
    EXPECT_EQ(doc["ranks"][5]["pp"], 1);
    EXPECT_EQ(doc["ranks"][5]["tp"], 1);
}

TEST(Cli, LayoutWithHostfile) {
    std::string hosts = write_temp("hosts", "gpu-a slots=4\ngpu-b slots=4\n");
    Proc r = run(kPtd + " layout --json --hosts " + hosts + " " + kJobs + "tiny-local.toml");
    // tiny-local is one node: two hosts is a clear error.
    EXPECT_EQ(r.rc, 2);
    EXPECT_TRUE(contains(r.err, "lists 2 hosts but the job has cluster.nodes = 1")) << r.err;
}

TEST(Cli, PresetsTextAndJson) {
    Proc text = run(kPtd + " presets");
    ASSERT_EQ(text.rc, 0);
    ptd_test::expect_mentions(text.out, {"llama3-405b", "mi300x", "clusters", "gb200-nvl72", "4 × 400 Gb/s"});
    // Each GPU row names the network a job naming only that GPU gets.
    std::string pcie_row = text.out.substr(text.out.find("h100-pcie "));
    pcie_row = pcie_row.substr(0, pcie_row.find('\n'));
    EXPECT_TRUE(contains(pcie_row, " pcie ") && contains(pcie_row, "generic")) << pcie_row;
    std::string teton_row = text.out.substr(text.out.find("h100-96gb-500w "));
    teton_row = teton_row.substr(0, teton_row.find('\n'));
    EXPECT_TRUE(contains(teton_row, "grand-teton-h100-96gb")) << teton_row;
    Proc json = run(kPtd + " presets --json");
    ASSERT_EQ(json.rc, 0);
    auto doc = nlohmann::json::parse(json.out);
    EXPECT_EQ(doc["schema"], "ptd.presets/1");
    EXPECT_GE(doc["models"].size(), 15u);
    EXPECT_GE(doc["gpus"].size(), 11u);
    EXPECT_GE(doc["clusters"].size(), 10u);
    for (const auto& g : doc["gpus"]) {
        if (g["name"] == "h100-sxm") { EXPECT_EQ(g["default_cluster"], "dgx-h100"); }
        if (g["name"] == "l40s") { EXPECT_TRUE(g["default_cluster"].is_null()) << g.dump(); }
    }
    for (const auto& c : doc["clusters"])
        if (c["name"] == "gb200-nvl72") { EXPECT_EQ(c["nvlink_domain"], 72); }
}

TEST(Cli, WorksFromAnyDirectoryWithEmbeddedPresets) {
    // A copy of the binary far from any assets folder, forced onto the compiled-in presets.
    std::string dir = ::testing::TempDir() + "/ptd_lonely";
    ptd_test::remove_after_tests_if_passed(dir);
    ASSERT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + dir + "/bin && cp " + kPtd + " " + dir + "/bin/").c_str()), 0);
    Proc r = run_ok("cd / && PTD_ASSETS=embedded " + dir + "/bin/ptd presets --json");
    auto doc = nlohmann::json::parse(r.out);
    EXPECT_EQ(doc["origin"], "<embedded>");
    EXPECT_GE(doc["models"].size(), 15u);
    Proc job = run("cd / && PTD_ASSETS=embedded " + dir + "/bin/ptd validate " + kJobs + "llama3-8b-h100.toml");
    EXPECT_EQ(job.rc, 0) << job.err;
}

TEST(Cli, BadAssetsFolderIsAnError) {
    Proc r = run_refused("PTD_ASSETS=/nonexistent " + kPtd + " presets");
    EXPECT_TRUE(contains(r.err, "PTD_ASSETS: got \"/nonexistent\"")) << r.err;
}

TEST(CliEstimate, TextHasStagesTimeAndConvention) {
    Proc r = run_ok(kPtd + " estimate " + kJobs + "gpt3-175b-a100.toml");
    ptd_test::expect_mentions(r.out, {"tp8·pp8·dp16", "96 micro-batches"});
    for (const char* s : {"stage 0 ", "stage 7 ", "◀ worst", "ok ", "compute", "bubble", "DP comm exposed", "total step",
                          "tokens/s", "MFU", "HFU", "attention FLOPs: full s² (PaLM)"})
        EXPECT_TRUE(contains(r.out, s)) << s << "\n" << r.out;
    EXPECT_FALSE(contains(r.out, "OOM")) << r.out;
    EXPECT_FALSE(contains(r.out, "\x1b[")) << "no colour when stdout is a file";

    // One micro-batch per replica: the middle stages hold the same bytes and share a row.
    Proc grouped = run_ok(kPtd + " estimate " + kJobs + "gpt3-175b-a100.toml --set training.global_batch=16");
    EXPECT_TRUE(contains(grouped.out, "stages 1–6")) << grouped.out;

    Proc causal = run_ok(kPtd + " estimate @default --set estimate.attention_flops=causal");
    EXPECT_TRUE(contains(causal.out, "attention FLOPs: causal s²/2 (Megatron)")) << causal.out;
}

TEST(CliEstimate, OversizedJobShowsOomAndExitsZero) {
    const std::string sets = " --set parallel.tp=1 --set parallel.pp=1 --set parallel.vpp=1"
                             " --set parallel.sequence_parallel=false";
    Proc r = run(kPtd + " estimate " + kJobs + "llama3-70b-h100.toml" + sets);
    EXPECT_EQ(r.rc, 0) << r.err;  // an OOM is information, not a failure
    ptd_test::expect_mentions(r.out, {"OOM +", "tp1·pp1·dp64"});

    if (std::system("command -v script >/dev/null 2>&1") == 0) {
        Proc tty = run("TERM=xterm-256color script -qec '" + kPtd + " estimate " + kJobs + "llama3-70b-h100.toml" + sets +
                       "' /dev/null");
        EXPECT_TRUE(contains(tty.out, "\x1b[1;31mOOM +")) << tty.out;
    }
}

// offload: the host memory line, per GPU and per node against the node's RAM; a node short of
// host RAM is said there, not as a GPU OOM; the JSON carries the host figures.
TEST(CliEstimate, OffloadShowsHostMemoryPerNode) {
    const std::string sets = " --set parallel.zero=2 --set parallel.distributed_optimizer=false"
                             " --set parallel.offload_optimizer=cpu";
    Proc r = run(kPtd + " estimate " + kJobs + "llama3-8b-h100.toml" + sets);
    EXPECT_EQ(r.rc, 0) << r.err;
    ptd_test::expect_mentions(r.out, {"offload: optimizer cpu", "host memory (offloaded): ",
                                      "GiB per node of 2048 GiB host RAM (the GPU generation's DGX)",
                                      "offload PCIe+CPU"});
    Proc small = run(kPtd + " estimate " + kJobs + "llama3-8b-h100.toml" + sets + " --set cluster.host_memory_gib=1");
    EXPECT_EQ(small.rc, 0) << small.err;
    EXPECT_TRUE(contains(small.out, "of 1 GiB host RAM (cluster.host_memory_gib): does NOT fit")) << small.out;
    EXPECT_FALSE(contains(small.out, "OOM:")) << small.out;  // the GPUs have room
    Proc j = run_ok(kPtd + " estimate --json " + kJobs + "llama3-8b-h100.toml" + sets + " --set cluster.host_memory_gib=1");
    const auto doc = nlohmann::json::parse(j.out);
    EXPECT_FALSE(doc["fits"].get<bool>());
    EXPECT_FALSE(doc["host"]["fits"].get<bool>());
    EXPECT_GT(doc["host"]["bytes_per_node"].get<double>(), doc["host"]["capacity_bytes_per_node"].get<double>());
    EXPECT_GT(doc["stages"][0]["memory"]["host"].get<double>(), 0);
    EXPECT_GT(doc["time"]["offload"].get<double>(), 0);
}

TEST(CliEstimate, JsonSchema) {
    Proc r = run_ok(kPtd + " estimate --json " + kJobs + "llama3-70b-h100.toml");
    auto doc = nlohmann::json::parse(r.out);
    EXPECT_EQ(doc["schema"], "ptd.estimate/1");
    EXPECT_EQ(doc["world"], 64);
    EXPECT_EQ(doc["layout"]["vpp"], 5);
    ASSERT_EQ(doc["stages"].size(), 4u);
    EXPECT_GT(doc["stages"][0]["memory"]["total"].get<double>(), 1e9);
    EXPECT_EQ(doc["stages"][0]["layers"], 20);
    EXPECT_GT(doc["time"]["total"].get<double>(), 0);
    EXPECT_NEAR(doc["time"]["total"].get<double>(), doc["step_s"].get<double>(), 1e-9);
    EXPECT_GT(doc["mfu"].get<double>(), 0);
    EXPECT_LT(doc["mfu"].get<double>(), 1);
    EXPECT_EQ(doc["flops"]["convention"], "full");
    EXPECT_TRUE(doc["fits"].get<bool>());
    EXPECT_EQ(doc["peak_bytes"], doc["stages"][doc["worst_stage"].get<int>()]["memory"]["total"]);
}

TEST(CliEstimate, OverridesChangeTheEstimate) {
    Proc base = run(kPtd + " estimate --json " + kJobs + "llama3-8b-h100.toml");
    Proc bigger = run(kPtd + " estimate --json " + kJobs + "llama3-8b-h100.toml --set training.micro_batch=2");
    ASSERT_EQ(base.rc, 0) << base.err;
    ASSERT_EQ(bigger.rc, 0) << bigger.err;
    auto a = nlohmann::json::parse(base.out), b = nlohmann::json::parse(bigger.out);
    EXPECT_EQ(b["layout"]["micro_batch"], 2);
    EXPECT_EQ(b["layout"]["micro_batches"], 8);  // 64 / (2 · 4)
    EXPECT_GT(b["stages"][0]["memory"]["activations"].get<double>(), a["stages"][0]["memory"]["activations"].get<double>());
}

TEST(CliOverrides, ErrorsNameTheOverride) {
    Proc key = run_refused(kPtd + " estimate " + kJobs + "llama3-8b-h100.toml --set parallel.tpp=4");
    EXPECT_TRUE(contains(key.err, "--set parallel.tpp=4: error: parallel.tpp: unknown key (did you mean \"tp\"?)")) << key.err;
    EXPECT_EQ(key.out, "");

    Proc value = run_refused(kPtd + " estimate " + kJobs + "llama3-8b-h100.toml --set parallel.zero=7");
    EXPECT_TRUE(contains(value.err, "--set parallel.zero=7: error: parallel.zero: got 7; allowed: 0 .. 3")) << value.err;

    Proc cross = run_refused(kPtd + " layout " + kJobs + "llama3-8b-h100.toml --set parallel.tp=3");
    EXPECT_TRUE(contains(cross.err, "--set parallel.tp=3: error: parallel.tp: got 3, but heads (32)")) << cross.err;

    Proc section = run_refused(kPtd + " validate " + kJobs + "llama3-8b-h100.toml --set paralel.tp=2");
    EXPECT_TRUE(contains(section.err, "unknown section \"paralel\" (did you mean \"parallel\"?); allowed: model, cluster, "
                                      "parallel, training, launch, paths, estimate")) << section.err;

    Proc form = run_refused(kPtd + " estimate @tiny --set parallel.tp");
    EXPECT_TRUE(contains(form.err, "expected section.key=value")) << form.err;
}

TEST(CliOverrides, ValidateAndLayoutTakeSet) {
    Proc v = run(kPtd + " validate --json " + kJobs + "llama3-8b-h100.toml --set parallel.tp=4 --set parallel.dp=2"
                 " --set cluster.gpu.memory_gib=40");
    ASSERT_EQ(v.rc, 0) << v.err;
    auto doc = nlohmann::json::parse(v.out);
    EXPECT_EQ(doc["results"][0]["job"]["parallel"]["tp"], 4);
    EXPECT_EQ(doc["results"][0]["job"]["cluster"]["memory_gib"], 40.0);
    // --set before the job files takes one KEY=VALUE each and leaves the files alone.
    Proc before = run(kPtd + " validate --set parallel.tp=4 --set parallel.dp=2 " + kJobs + "llama3-8b-h100.toml " + kJobs +
                      "llama3-8b-h100.toml");
    EXPECT_EQ(before.rc, 0) << before.err;
    Proc l = run_ok(kPtd + " layout --json @tiny --set parallel.tp=1 --set parallel.pp=4");
    EXPECT_EQ(nlohmann::json::parse(l.out)["degrees"]["pp"], 4);
}

TEST(CliPlan, TopKJson) {
    Proc r = run_ok(kPtd + " plan --top 3 --json " + kJobs + "llama3-8b-h100.toml");
    auto doc = nlohmann::json::parse(r.out);
    EXPECT_EQ(doc["schema"], "ptd.plan/1");
    ASSERT_EQ(doc["top"].size(), 3u);
    for (const auto& e : doc["top"]) {
        EXPECT_TRUE(e["fits"].get<bool>());
        EXPECT_EQ(e["tp"].get<int>() * e["pp"].get<int>() * e["dp"].get<int>() * e["cp"].get<int>(), 8);
    }
    EXPECT_GE(doc["top"][0]["tokens_per_s"].get<double>(), doc["top"][2]["tokens_per_s"].get<double>());
    EXPECT_FALSE(doc["pareto"].empty());
    EXPECT_FALSE(doc["why_best"].get<std::string>().empty());
    EXPECT_GT(doc["feasible"].get<long long>(), 0);
}

TEST(CliPlan, TextTables) {
    Proc r = run_ok(kPtd + " plan --top 5 " + kJobs + "llama3-8b-h100.toml");
    for (const char* s : {"top 5 layouts", "Pareto front", "headroom GiB", "tokens/s", "why:", "your layout:", "searched"})
        EXPECT_TRUE(contains(r.out, s)) << s << "\n" << r.out;
    Proc bad = run_refused(kPtd + " plan --top 0 " + kJobs + "llama3-8b-h100.toml");
    Proc one = run_ok(kPtd + " plan --top 1 " + kJobs + "llama3-8b-h100.toml");
    EXPECT_TRUE(contains(one.out, "top 1 layout by tokens/s")) << one.out;
}

// hsdp: the default job (Llama 2 7B on 4 × 8 H100, Megatron-LM) runs its distributed optimizer
// with and without node-sized replicas: a `rep` column after `zero`, dp_replicate in JSON; one
// row per layout, its other replica count folded into it and named under the table (fold),
// each its own row with --unfold.
TEST(CliPlan, ReplicasOfTheShardedStatesHaveAColumn) {
    Proc r = run_ok(kPtd + " plan --top 3 @default");
    EXPECT_TRUE(contains(r.out, "  zero  rep  recompute")) << r.out;
    EXPECT_TRUE(contains(r.out, "row 1 (dp_replicate 1) also at dp_replicate 4, within ")) << r.out;
    Proc j = run_ok(kPtd + " plan --top 3 --json @default");
    const auto doc = nlohmann::json::parse(j.out);
    bool replicated = false;
    for (const auto& e : doc["top"]) {
        ASSERT_TRUE(e.contains("dp_replicate")) << e.dump();
        for (const auto& v : e["folded"]) {
            ASSERT_TRUE(v.contains("dp_replicate")) << v.dump();
            replicated |= v["dp_replicate"] != e["dp_replicate"];
            EXPECT_EQ(e["dp"].get<int>() % v["dp_replicate"].get<int>(), 0);
        }
        EXPECT_EQ(e["dp"].get<int>() % e["dp_replicate"].get<int>(), 0);
    }
    EXPECT_TRUE(replicated) << j.out;
    Proc unfolded = run_ok(kPtd + " plan --top 3 --json --unfold @default");
    replicated = false;
    const auto flat = nlohmann::json::parse(unfolded.out);
    for (const auto& e : flat["top"]) replicated |= e["dp_replicate"].get<int>() > 1;
    EXPECT_TRUE(replicated) << unfolded.out;
    // A job without replicas among its rows keeps the table as it was.
    Proc plain = run_ok(kPtd + " plan --top 1 " + kJobs + "llama3-8b-h100.toml");
    EXPECT_FALSE(contains(plain.out, " rep ")) << plain.out;
}

// cost (issue 28 point 5): the done case, Llama 3 70B for 15T tokens on 1,024 H100:
// days, GPU-hours, cost, energy and checkpoint lines with their sources, and the same in --json.
TEST(CliEstimate, TimeCostEnergyAndCheckpointsToTrain) {
    const std::string job = kJobs + "llama3-70b-h100.toml --set cluster.nodes=128 --set training.tokens=15e12";
    Proc r = run_ok(kPtd + " estimate " + job + " --set cluster.gpu_hour_usd=2.5");
    for (const char* s : {"time and cost to train", "15.00T tokens = 3,576,279 steps", "training.tokens", "days (80%: ",
                          "goodput", "GPU-hours", "× $2.50 [cluster.gpu_hour_usd]", "GWh", "× 700 W [h100-sxm preset",
                          "DGX H100 datasheet", "PUE 1.10", "987.8 GB in total", "GiB per rank", "save / load",
                          "arXiv 2407.21783 §3.3.1", "Young/Daly", "419 unexpected interruptions"})
        EXPECT_TRUE(contains(r.out, s)) << s << "\n" << r.out;
    Proc unpriced = run_ok(kPtd + " estimate " + job);
    EXPECT_TRUE(contains(unpriced.out, "cost            not given  · set cluster.gpu_hour_usd")) << unpriced.out;

    Proc j = run_ok(kPtd + " estimate --json " + job + " --set cluster.gpu_hour_usd=2.5 --set cluster.storage_gbps=500");
    const auto t = nlohmann::json::parse(j.out)["training"];
    EXPECT_EQ(t["steps"].get<double>(), 3576279);
    EXPECT_NEAR(t["cost_usd"].get<double>(), t["gpu_hours"].get<double>() * 2.5, 1e-6);
    EXPECT_NEAR(t["gpu_hours"].get<double>(), t["wall_s"].get<double>() * 1024 / 3600, 1e-6);
    EXPECT_LT(t["gpu_hours_interval"]["lo"].get<double>(), t["gpu_hours"].get<double>());
    EXPECT_GT(t["energy_kwh"].get<double>(), 0);
    EXPECT_EQ(t["checkpoint"]["storage_gbps"], 500.0);
    EXPECT_NEAR(t["checkpoint"]["save_s"].get<double>(), t["checkpoint"]["total_bytes"].get<double>() / 500e9, 1e-9);
    EXPECT_EQ(t["sources"]["storage"], "cluster.storage_gbps");
    EXPECT_EQ(t["sources"]["price"], "cluster.gpu_hour_usd");
    Proc bad = run_refused(kPtd + " estimate " + job + " --set cluster.storage_gbps=-3");
    EXPECT_TRUE(contains(bad.err, "--set cluster.storage_gbps=-3: error: cluster.storage_gbps: got -3; allowed: a number > 0"))
        << bad.err;
}

// `ptd plan` shows each row's days (and cost / energy where the job gives a price / GPU power),
// orders by --objective, and refuses an objective it cannot compute.
TEST(CliPlan, ObjectiveColumnsAndOrder) {
    const std::string job = kJobs + "llama3-8b-h100.toml --set training.tokens=1e12";
    Proc text = run_ok(kPtd + " plan --top 4 --objective cost " + job + " --set cluster.gpu_hour_usd=3");
    for (const char* s : {"top 4 layouts by cost to train", "train", "cost", "energy", "days", "MWh"})
        EXPECT_TRUE(contains(text.out, s)) << s << "\n" << text.out;
    Proc j = run_ok(kPtd + " plan --top 4 --json --objective energy " + job);
    const auto doc = nlohmann::json::parse(j.out);
    EXPECT_EQ(doc["objective"], "energy");
    ASSERT_EQ(doc["top"].size(), 4u);
    for (size_t i = 1; i < doc["top"].size(); ++i)
        EXPECT_LE(doc["top"][i - 1]["training"]["energy_kwh"].get<double>(), doc["top"][i]["training"]["energy_kwh"].get<double>());
    Proc unpriced = run_refused(kPtd + " plan --objective cost " + job);
    EXPECT_TRUE(contains(unpriced.err, "cluster.gpu_hour_usd: not given; --objective cost needs")) << unpriced.err;
    Proc word = run_refused(kPtd + " plan --objective money " + job);
    EXPECT_TRUE(contains(word.err, "money")) << word.err;
}

// Every speed figure of `ptd estimate` carries its interval: in the text beside each figure
// with the runs it comes from, in --json as "interval" (docs/cli.md); a CPU job has none and
// says why.
TEST(CliEstimate, SpeedIntervalsInTextAndJson) {
    Proc text = run_ok(kPtd + " estimate " + kJobs + "llama3-70b-h100.toml");
   ptd_test::expect_mentions(text.out, {"80% interval", "tokens/s (80%: ", "MFU ", "published hopper (H100, H200) dense runs",
                               "your own cluster may differ"});
    auto doc = nlohmann::json::parse(run_ok(kPtd + " estimate --json " + kJobs + "llama3-70b-h100.toml").out);
    const auto& iv = doc["interval"];
    EXPECT_TRUE(iv["known"].get<bool>());
    EXPECT_EQ(iv["source"], "published_runs");
    EXPECT_DOUBLE_EQ(iv["confidence"].get<double>(), 0.8);
    EXPECT_GE(iv["runs"].get<int>(), 8);
    const double lo = iv["error_lo"].get<double>(), hi = iv["error_hi"].get<double>();
    const double step = doc["step_s"].get<double>(), tokens = doc["tokens_per_s"].get<double>();
    EXPECT_NEAR(iv["step_s"]["lo"].get<double>(), step / (1 + hi), 1e-9 * step);
    EXPECT_NEAR(iv["step_s"]["hi"].get<double>(), step / (1 + lo), 1e-9 * step);
    EXPECT_NEAR(iv["tokens_per_s"]["lo"].get<double>(), tokens * (1 + lo), 1e-9 * tokens);
    for (const char* k : {"model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu", "hfu"})
        EXPECT_LE(iv[k]["lo"].get<double>(), iv[k]["hi"].get<double>()) << k;

    auto cpu = nlohmann::json::parse(run_ok(kPtd + " estimate --json " + kJobs + "tiny-gpt-8rank.toml").out);
    EXPECT_FALSE(cpu["interval"]["known"].get<bool>());
    EXPECT_TRUE(contains(cpu["interval"]["reason"].get<std::string>(), "no published runs on CPUs"));
   ptd_test::expect_mentions(run_ok(kPtd + " estimate " + kJobs + "tiny-gpt-8rank.toml").out, {"error bars: none: "});
}

// The memory peak carries its interval too: under the memory table with the measured runs it
// comes from and whether its top fits, in --json as "memory_interval"; a CPU job has none.
TEST(CliEstimate, MemoryPeakIntervalInTextAndJson) {
    ptd_test::expect_mentions(run_ok(kPtd + " estimate " + kJobs + "llama3-70b-h100.toml").out,
                              {"peak 80%: ", "measured hopper (H100, H200) dense runs", "fits across the range"});
    ptd_test::expect_mentions(run_ok(kPtd + " estimate --set training.micro_batch=2 " + kJobs + "llama3-70b-h100.toml").out,
                              {"peak 80%: ", "over the 79.60 GiB usable, so the job may not fit"});
    auto doc = nlohmann::json::parse(run_ok(kPtd + " estimate --json " + kJobs + "llama3-70b-h100.toml").out);
    const auto& m = doc["memory_interval"];
    ASSERT_TRUE(m["known"].get<bool>()) << m.dump();
    EXPECT_EQ(m["source"], "measured_memory");
    const double lo = m["error_lo"].get<double>(), hi = m["error_hi"].get<double>();
    const double peak = doc["peak_bytes"].get<double>();
    EXPECT_NEAR(m["peak_bytes"]["lo"].get<double>(), peak / (1 + hi), 1e-6 * peak);
    EXPECT_NEAR(m["peak_bytes"]["hi"].get<double>(), peak / (1 + lo), 1e-6 * peak);
    EXPECT_TRUE(m["fits_at_top"].get<bool>());
    auto cpu = nlohmann::json::parse(run_ok(kPtd + " estimate --json " + kJobs + "tiny-gpt-8rank.toml").out);
    EXPECT_FALSE(cpu["memory_interval"]["known"].get<bool>());
    ptd_test::expect_mentions(run_ok(kPtd + " estimate " + kJobs + "tiny-gpt-8rank.toml").out, {"peak error bars: none: "});
}

// `ptd plan` states the interval's width, and when the first rows' tokens/s intervals overlap
// the best's it says they are within the estimate's error instead of ranking them; --json
// carries each row's interval and the count, consistent with the rows' own intervals.
TEST(CliPlan, SaysWhenTopLayoutsAreWithinTheError) {
    auto doc = nlohmann::json::parse(run_ok(kPtd + " plan --top 10 --json " + kJobs + "llama3-8b-h100.toml").out);
    EXPECT_TRUE(doc["interval"]["known"].get<bool>());
    // The run count follows the published-run table (it grows as runs are added), so the
    // text is checked against the count the JSON reports rather than a number written here.
    const int runs = doc["interval"]["runs"].get<int>();
    ASSERT_GT(runs, 0);
    Proc text = run_ok(kPtd + " plan --top 3 " + kJobs + "llama3-8b-h100.toml");
    ptd_test::expect_mentions(text.out, {"error bars (80%, from " + std::to_string(runs) +
                                             " published hopper (H100, H200) dense runs): each row's tokens/s and MFU",
                                         "within error: all listed layouts 1–3 are within the estimate's error of each other",
                                         "their order is not a prediction"});
    const auto& top = doc["top"];
    const size_t n = doc["within_error_of_best"].get<size_t>();
    ASSERT_GE(n, 1u);
    const double best_lo = top[0]["interval"]["tokens_per_s"]["lo"].get<double>();
    for (size_t i = 0; i < top.size(); ++i) {
        const double hi = top[i]["interval"]["tokens_per_s"]["hi"].get<double>();
        if (i < n) EXPECT_GE(hi, best_lo) << "row " << i + 1 << " counted within the error";
        else EXPECT_LT(hi, best_lo) << "row " << i + 1 << " not counted";
        EXPECT_LE(top[i]["interval"]["step_s"]["lo"].get<double>(), top[i]["step_s"].get<double>());
    }
    for (const auto& e : doc["pareto"]) EXPECT_TRUE(e["interval"].is_object());
    // A planned job whose best clearly beats the runner-up says so instead: one 8-GPU node
    // whose only layouts differ widely is hard to construct, so the CPU case stands for "no
    // interval, no claim either way".
    Proc cpu = run_ok(kPtd + " plan --top 3 " + kJobs + "tiny-gpt-8rank.toml");
   ptd_test::expect_mentions(cpu.out, {"error bars: none: "});
    EXPECT_FALSE(contains(cpu.out, "within error:")) << cpu.out;
}

// The plan view on a made-up plan of an H100 job (band e in [lo, hi]): rows whose tokens/s
// are within the band's ratio (1+hi)/(1+lo) of the best are "within error"; a best more
// than that ahead of the runner-up is called faster beyond the error.
// memband: every listed row carries whether its peak fits at the top of the memory error bars,
// and the line under the top table names exactly the rows that would not.
TEST(CliPlan, NamesTheRowsWhoseMemoryTopDoesNotFit) {
    const std::string job = kJobs + "llama3-8b-h100.toml";
    auto doc = nlohmann::json::parse(run_ok(kPtd + " plan --top 12 --json " + job).out);
    std::string over;
    const auto& top = doc["top"];
    for (size_t i = 0; i < top.size(); ++i) {
        const auto& m = top[i]["memory_interval"];
        ASSERT_TRUE(m.is_object()) << top[i].dump();
        const double hi = m["peak_bytes"]["hi"].get<double>(), usable = top[i]["usable_bytes"].get<double>();
        EXPECT_GT(hi, top[i]["peak_bytes"].get<double>());
        EXPECT_EQ(m["fits_at_top"].get<bool>(), hi <= usable) << i;
        if (hi > usable) over += (over.empty() ? "" : ", ") + std::to_string(i + 1);
    }
    ASSERT_FALSE(over.empty()) << "the example plan has a row within a few GiB of its limit";
    const std::string text = run_ok(kPtd + " plan --top 12 " + job).out;
    ptd_test::expect_mentions(text, {"memory error bars (80%, from ", "measured hopper (H100, H200) dense runs",
                                     (over.find(',') == std::string::npos ? "at its top layout " : "at its top layouts ") + over +
                                         " would not fit"});
}

TEST(CliPlan, WithinErrorWordingFollowsTheIntervals) {
    const ptd::JobSpec job = ptd_test::load_asset("llama3-8b-h100.toml");
    const ptd::ErrorBand band = *ptd::job_error_band(job);
    const double ratio = (1 + band.error_hi) / (1 + band.error_lo);
    auto plan_of = [](std::vector<double> tokens) {
        ptd::PlanResult p;
        for (double t : tokens) {
            ptd::PlanEntry e;
            e.score.tokens_per_s = t;
            e.score.step_s = 1e6 / t;
            e.score.fits = true;
            p.top.push_back(e);
        }
        return p;
    };
    const ptd::Term plain{};
    // 1000, just inside the ratio, just outside: the first two are within error.
    const ptd::PlanResult close = plan_of({1000, 1000 / ratio * 1.001, 1000 / ratio * 0.99});
    EXPECT_EQ(ptd::rows_within_error(job, close), 2u);
    ptd_test::expect_mentions(ptd::render_plan_text(job, close, {}, plain),
                              {"within error: the top layouts 1–2 are within the estimate's error of each other"});
    // The runner-up beyond the ratio: layout 1 is faster by more than the error.
    const ptd::PlanResult apart = plan_of({1000, 1000 / ratio * 0.99});
    EXPECT_EQ(ptd::rows_within_error(job, apart), 1u);
    ptd_test::expect_mentions(ptd::render_plan_text(job, apart, {}, plain),
                              {"within error: layout 1 is faster than layout 2 by more than the estimate's error"});
}

// A top list that is one layout at several interleaving depths (DeepSeek-V3's 61 layers split
// many ways) is named as such; a list of distinct layouts is not.
TEST(CliPlan, OneLayoutAtManyDepthsIsNamed) {
    const ptd::JobSpec job = ptd_test::load_asset("llama3-8b-h100.toml");
    auto plan_of = [](std::vector<int> depths, int last_tp) {
        ptd::PlanResult p;
        double t = 1000;
        for (int v : depths) {
            ptd::PlanEntry e;
            e.choice.tp = 2, e.choice.pp = 2, e.choice.vpp = v;
            e.score.tokens_per_s = t, e.score.step_s = 1e6 / t, e.score.fits = true;
            t *= 0.998;
            p.top.push_back(e);
        }
        p.top.back().choice.tp = last_tp;
        return p;
    };
    const ptd::Term plain{};
    ptd_test::expect_mentions(ptd::render_plan_text(job, plan_of({16, 4, 8}, 2), {}, plain),
                              {"rows 1–3 are one layout at 3 interleaving depths (vpp 4, 8, 16), 0.4% apart in tokens/s"});
    EXPECT_FALSE(ptd_test::contains(ptd::render_plan_text(job, plan_of({16, 4, 8}, 4), {}, plain), "interleaving depths"));
}

// fold: a row standing for its layout at other depths and without TP overlap names them under
// the table, depths as ranges, with how far the slowest depth and the best other-overlap one
// lag; the JSON rows carry them.
TEST(CliPlan, FoldedVariantsAreNamedUnderTheTable) {
    const ptd::JobSpec job = ptd_test::load_asset("llama3-8b-h100.toml");
    ptd::PlanResult plan;
    ptd::PlanEntry row;
    row.choice.tp = 2, row.choice.pp = 2, row.choice.vpp = 16, row.choice.tp_comm_overlap = true;
    row.score.tokens_per_s = 1000, row.score.step_s = 1, row.score.fits = true;
    row.folded = {{2, true, 990, 0}, {3, true, 980, 0}, {4, true, 970, 0}, {8, true, 995, 0}, {16, false, 992, 0}};
    plan.top.push_back(row);
    plan.folded = 5;
    const ptd::Term plain{};
    ptd_test::expect_mentions(ptd::render_plan_text(job, plan, {}, plain),
                              {"row 1 (vpp 16) also at vpp 2–4, 8, within 3.1%, without TP overlap, 0.8% slower",
                               "--unfold lists each as a row"});
    const nlohmann::json j = ptd::plan_json(job, plan, {});
    ASSERT_EQ(j["top"][0]["folded"].size(), 5u);
    EXPECT_EQ(j["top"][0]["folded"][4]["vpp"], 16);
    EXPECT_EQ(j["top"][0]["folded"][4]["tp_comm_overlap"], false);
    EXPECT_EQ(j["folded"], 5);
    // A row that folds nothing says nothing.
    plan.top[0].folded.clear();
    EXPECT_FALSE(ptd_test::contains(ptd::render_plan_text(job, plan, {}, plain), "one row per layout"));
}

// Each planner result says per export format whether it can be written, and if not, the
// key that blocks it; `export --plan` then names the best layout that can (issue 12, item 10).
TEST(CliPlan, ExportabilityPerFormat) {
    const std::string fp16 = kJobs + "llama3-8b-h100.toml --set training.precision=fp16";
    Proc r = run_ok(kPtd + " plan --top 3 --json " + fp16);
    auto doc = nlohmann::json::parse(r.out);
    for (const auto& e : doc["top"]) {
        for (const char* f : {"megatron", "deepspeed", "torchtitan", "torchtitan-toml"}) ASSERT_TRUE(e["exports"].contains(f)) << f;
        EXPECT_TRUE(e["exports"]["deepspeed"]["ok"].get<bool>());
        EXPECT_FALSE(e["exports"]["torchtitan"]["ok"].get<bool>());  // torchtitan has no fp16
        EXPECT_EQ(e["exports"]["torchtitan"]["key"], "training.precision");
        EXPECT_EQ(e["exports"]["megatron"]["ok"].get<bool>(), e["zero"].get<int>() < 2);
        if (e["zero"].get<int>() >= 2) {
            EXPECT_EQ(e["exports"]["megatron"]["key"], "parallel.zero");
        }
    }
    Proc text = run(kPtd + " plan --top 3 " + fp16);
    EXPECT_TRUE(contains(text.out, "not exportable to torchtitan (training.precision)")) << text.out;

    // torchtitan can write none of them: the export says so and names the key.
    Proc tt = run_refused(kPtd + " export --plan --format torchtitan " + fp16);
    ptd_test::expect_mentions(tt.err, {"no layout the planner lists can be written as --format torchtitan",
                                       "error: training.precision"});
    if (doc["top"][0]["zero"].get<int>() >= 2) {  // today's best: Megatron cannot write it, rank 2+ can
        Proc mg = run_refused(kPtd + " export --plan --format megatron " + fp16);
        ptd_test::expect_mentions(mg.err, {"the best one that can is rank", "error: parallel.zero"});
    }
}

TEST(CliExport, Megatron) {
    Proc r = run_ok(kPtd + " export " + kJobs + "gpt3-175b-a100.toml --format megatron");
    ptd_test::expect_mentions(r.out, {"--tensor-model-parallel-size 8 \\\n", "--pipeline-model-parallel-size 8 \\\n",
                                      "--global-batch-size 1536"});
    Proc zero = run_refused(kPtd + " export @default --format megatron --set parallel.zero=3 --set parallel.pp=1");
    EXPECT_TRUE(contains(zero.err, "no ZeRO-2/3")) << zero.err;
    EXPECT_EQ(zero.out, "");
}

TEST(CliExport, DeepSpeedJson) {
    Proc r = run_ok(kPtd + " export " + kJobs + "gpt3-175b-a100.toml --format deepspeed");
    auto ds = nlohmann::json::parse(r.out);  // stdout is pure JSON; notes go to stderr
    EXPECT_EQ(ds["train_batch_size"], 1536);
    EXPECT_EQ(ds["gradient_accumulation_steps"], 96);
    EXPECT_TRUE(ds["fp16"]["enabled"].get<bool>());
    EXPECT_TRUE(contains(r.err, "note: tp 8 × pp 8")) << r.err;
}

TEST(CliExport, TorchtitanToml) {
    Proc r = run_ok(kPtd + " export " + kJobs + "llama3-8b-h100.toml --format torchtitan-toml");
    toml::table doc = toml::parse(r.out);
    EXPECT_EQ(doc["parallelism"]["tensor_parallel_degree"].value_or(0), 2);
    EXPECT_EQ(doc["parallelism"]["pipeline_parallel_degree"].value_or(0), 1);
    EXPECT_EQ(doc["parallelism"]["data_parallel_shard_degree"].value_or(0), 4);
    EXPECT_EQ(doc["parallelism"]["context_parallel_degree"].value_or(0), 1);
    EXPECT_EQ(doc["model"]["flavor"].value_or(std::string()), "8B");
    Proc fp16 = run_refused(kPtd + " export " + kJobs + "llama3-8b-h100.toml --format torchtitan --set training.precision=fp16");
    EXPECT_TRUE(contains(fp16.err, "training.precision")) << fp16.err;
}

// --format torchtitan is torchtitan's current Python config (issue 12, item 9).
TEST(CliExport, TorchtitanPython) {
    Proc r = run_ok(kPtd + " export " + kJobs + "llama3-8b-h100.toml --format torchtitan");
    ptd_test::expect_mentions(r.out, {"def ptd_job() -> Trainer.Config:", "        tensor_parallel_degree=2,\n",
                                      "config.model_spec = model_registry(\"8B\")"});
}

// --launcher (issue 28): a launch script on stdout, its notes on stderr; a wrong word is refused.
TEST(CliExport, LaunchScript) {
    Proc r = run_ok(kPtd + " export " + kJobs + "llama3-8b-h100.toml --format nemo --launcher slurm");
    ptd_test::expect_mentions(r.out, {"#!/usr/bin/env bash\n#SBATCH --job-name=", "cat > ptd_job.py <<'PTD_EOF'",
                                      "Targets Megatron-Bridge main 067f987", "export CUDA_DEVICE_MAX_CONNECTIONS=\"1\""});
    EXPECT_TRUE(contains(r.err, "note: paths.save is not set")) << r.err;
    Proc bad = run(kPtd + " export " + kJobs + "llama3-8b-h100.toml --format megatron --launcher slrum");
    EXPECT_NE(bad.rc, 0);
    EXPECT_TRUE(contains(bad.err, "--launcher")) << bad.err;
    EXPECT_EQ(bad.out, "");
}

TEST(CliExport, PlanAndBadFormat) {
    Proc r = run_ok(kPtd + " export " + kJobs + "llama3-8b-h100.toml --format deepspeed --plan");
    EXPECT_TRUE(contains(r.err, "--plan: exporting the planner's best layout")) << r.err;
    EXPECT_TRUE(nlohmann::json::accept(r.out)) << r.out;
    Proc bad = run_refused(kPtd + " export " + kJobs + "llama3-8b-h100.toml --format neox");
    EXPECT_TRUE(contains(bad.err, "neox")) << bad.err;
}

TEST(EngineCli, DescribeUsesTheSharedLayout) {
    Proc r = run("RANK=5 WORLD_SIZE=8 LOCAL_RANK=1 LOCAL_WORLD_SIZE=4 " + kEngine + " --job " + kJobs +
                "../jobs/tiny-local.toml --describe");
    // tiny-local has 4 ranks, so WORLD_SIZE 8 is refused with a clear message.
    EXPECT_EQ(r.rc, 2);
    EXPECT_TRUE(contains(r.err, "WORLD_SIZE: got 8, but the job has 4 ranks")) << r.err;

    Proc ok = run("RANK=3 WORLD_SIZE=4 LOCAL_RANK=3 LOCAL_WORLD_SIZE=4 " + kEngine + " --job " + kJobs +
                 "tiny-local.toml --describe");
    ASSERT_EQ(ok.rc, 0) << ok.err;
    auto doc = nlohmann::json::parse(ok.out);
    EXPECT_EQ(doc["coords"]["tp"], 1);
    EXPECT_EQ(doc["coords"]["pp"], 1);
    EXPECT_EQ(doc["groups"]["pp"], nlohmann::json::parse("[1,3]"));
}

TEST(EngineCli, BadEnvironmentIsAClearError) {
    Proc r = run_refused("RANK=x WORLD_SIZE=4 " + kEngine + " --job " + kJobs + "tiny-local.toml --describe");
    EXPECT_TRUE(contains(r.err, "RANK: got \"x\"")) << r.err;
    // A bad LOCAL_WORLD_SIZE without LOCAL_RANK is reported, not a division by zero.
    Proc local = run("RANK=1 WORLD_SIZE=4 LOCAL_WORLD_SIZE=zero " + kEngine + " --job " + kJobs +
                     "tiny-local.toml --describe");
    EXPECT_EQ(local.rc, 2);
    EXPECT_TRUE(contains(local.err, "LOCAL_WORLD_SIZE: got \"zero\"")) << local.err;
    Proc devices = run(kEngine + " --devices");
    EXPECT_EQ(devices.rc, 0);
    EXPECT_TRUE(contains(devices.out, "cpu") || contains(devices.out, "cuda:")) << devices.out;
}

}  // namespace

// ---- issue 12: a bare job (no [parallel]), defaults that follow the GPU ----

TEST(CliBareJob, BareJobPlansEstimatesAndRefusesLayoutCommands) {
    const std::string bare = kJobs + "llama3-405b-bare.toml";
    Proc plan = run(kPtd + " plan --top 3 " + bare);
    ASSERT_EQ(plan.rc, 0) << plan.err;  // before: exit 2, "not divisible by micro_batch·dp = 1·16384"
    ptd_test::expect_mentions(plan.out, {"top 3 layouts", "your layout: none chosen"});
    EXPECT_FALSE(contains(plan.err, "not divisible")) << plan.err;

    Proc est = run_ok(kPtd + " estimate " + bare);
    ptd_test::expect_mentions(est.err, {"no layout chosen", "the planner's best", "ptd plan"});
    EXPECT_TRUE(contains(est.out, "memory per GPU")) << est.out;
    // The keys the planner chose are named as its choice and leave the stack-defaults list,
    // which listed "distributed_optimizer = false" beside an estimate made with it on.
    ptd_test::expect_mentions(est.err, {"with distributed_optimizer = true", "overlap_grad_reduce = true"});
    EXPECT_TRUE(contains(est.out, "distributed optimizer")) << est.out;
    for (const char* key : {"parallel.distributed_optimizer", "parallel.overlap_grad_reduce", "parallel.overlap_param_gather"})
        EXPECT_FALSE(contains(est.out, key)) << key << " is the planner's, not a stack default\n" << est.out;
    EXPECT_TRUE(contains(est.out, "parallel.grad_reduce_in_fp32 = true")) << "a default the planner left\n" << est.out;
    Proc est_json = run_ok(kPtd + " estimate --json " + bare);
    EXPECT_EQ(nlohmann::json::parse(est_json.out)["layout_source"], "planner");
    Proc own = run(kPtd + " estimate --json " + kJobs + "llama3-8b-h100.toml");
    EXPECT_EQ(nlohmann::json::parse(own.out)["layout_source"], "job");

    Proc valid = run(kPtd + " validate " + bare);
    EXPECT_EQ(valid.rc, 0) << valid.err;
    EXPECT_TRUE(contains(valid.err, "no layout chosen")) << valid.err;
    EXPECT_TRUE(contains(valid.out, "none chosen")) << valid.out;
    Proc valid_json = run_ok(kPtd + " validate --json " + bare);
    EXPECT_TRUE(nlohmann::json::parse(valid_json.out)["results"][0]["job"]["parallel"].is_null()) << valid_json.out;

    for (const std::string cmd : {"layout", "export --format megatron"}) {
        Proc r = run(kPtd + " " + cmd + " " + bare);
        EXPECT_EQ(r.rc, 2) << cmd;
        EXPECT_TRUE(contains(r.err, "no layout chosen")) << cmd << ": " << r.err;
        EXPECT_TRUE(contains(r.err, "ptd plan")) << cmd << ": " << r.err;
    }

    // Launching needs a layout too (the placeholder tp1·pp1·dp4 is not one the user chose).
    const std::string tiny_bare = write_temp("tiny-bare.toml", "[model]\npreset = \"tiny-gpt\"\n[cluster]\nnodes = 1\n"
                                                               "gpus_per_node = 4\ngpu = \"cpu\"\n[training]\nglobal_batch = 8\n");
    Proc launch = run(kPtd + " launch " + tiny_bare + " --dry-run");
    EXPECT_EQ(launch.rc, 2) << launch.out << launch.err;
    EXPECT_TRUE(contains(launch.err, "no layout chosen")) << launch.err;

    // No global batch either: plan and estimate ask for it by name instead of inventing 16,384.
    std::string text = read_file(bare);
    text.replace(text.find("global_batch = 2048"), 19, "micro_batch = 1");
    const std::string no_batch = write_temp("bare-no-batch.toml", text);
    for (const char* cmd : {"plan", "estimate"}) {
        Proc r = run(kPtd + " " + cmd + " " + no_batch);
        EXPECT_EQ(r.rc, 2) << cmd;
        EXPECT_TRUE(contains(r.err, "training.global_batch")) << cmd << ": " << r.err;
        EXPECT_TRUE(contains(r.err, "not given")) << cmd << ": " << r.err;
        EXPECT_TRUE(contains(r.err, no_batch + ":")) << cmd << ": " << r.err;  // located in the file
    }
}

TEST(CliBareJob, CpuJobWithoutPrecisionValidatesAndLaunches) {
    // Before: `got "bf16"` on a job that never wrote a precision.
    std::string text = read_file(kJobs + "tiny-local.toml");
    const size_t at = text.find("precision = ");
    ASSERT_NE(at, std::string::npos);
    text.erase(at, text.find('\n', at) + 1 - at);
    const std::string dir = ::testing::TempDir() + "/ptd_cpu_no_precision_" + std::to_string(getpid());
    text += "run_dir = \"" + dir + "\"\n";  // [launch] is the last table
    const std::string job = write_temp("tiny-no-precision.toml", text);
    Proc v = run_ok(kPtd + " validate " + job);
    EXPECT_TRUE(contains(v.out, "fp32")) << v.out;
    Proc launch = run(kPtd + " launch " + job + " --steps 2");
    EXPECT_EQ(launch.rc, 0) << launch.out << launch.err;
    EXPECT_FALSE(contains(launch.err + launch.out, "bf16")) << launch.err;
    std::system(("rm -rf '" + dir + "'").c_str());
}
namespace {

// Issue 12 item 15: an unknown command names the word, the commands and the nearest one
// (it used to say only "A subcommand is required").
TEST(Cli, UnknownCommandIsNamed) {
    Proc r = run_refused(kPtd + " frobnicate");
    EXPECT_TRUE(contains(r.err, "ptd: error: unknown command \"frobnicate\"; allowed: validate, layout, estimate, "
                                "schedule, trace, plan, export, presets, watch, launch"))
        << r.err;
    Proc near = run_refused(kPtd + " estimat " + kJobs + "tiny-local.toml");
    EXPECT_TRUE(contains(near.err, "(did you mean \"estimate\"?)")) << near.err;
}

// Issue 12 item 14: NaN and the infinities used to pass CLI11's Range (`--headroom nan`
// became 0, `ptd-engine --timeout nan` was accepted); every floating-point flag refuses them.
TEST(Cli, FloatingPointFlagsRefuseNanAndInfinity) {
    for (const char* bad : {"nan", "NaN", "inf", "-inf", "1e999"}) {
        Proc plan = run(kPtd + " plan @tiny --headroom " + bad);
        EXPECT_EQ(plan.rc, 2) << bad;
        EXPECT_TRUE(contains(plan.err, "--headroom: got \"" + std::string(bad) + "\"")) << plan.err;
        EXPECT_TRUE(contains(plan.err, "allowed: a number 0 .. 0.9")) << plan.err;
        Proc watch = run(kPtd + " watch . --once --interval " + bad);
        EXPECT_EQ(watch.rc, 2) << bad;
        EXPECT_TRUE(contains(watch.err, "--interval: got")) << watch.err;
        for (const char* flag : {"--timeout", "--stall-timeout", "--store-lease"}) {
            Proc engine = run(kEngine + " --job " + kJobs + "tiny-local.toml " + flag + " " + bad);
            EXPECT_EQ(engine.rc, 2) << flag << " " << bad;
            EXPECT_TRUE(contains(engine.err, std::string(flag) + ": got \"" + bad + "\"")) << engine.err;
        }
    }
    // Fewer than three heartbeats (1 s apart) is no lease: one late echo would end the rank.
    Proc short_lease = run(kEngine + " --job " + kJobs + "tiny-local.toml --store-lease 2");
    EXPECT_EQ(short_lease.rc, 2);
    EXPECT_TRUE(contains(short_lease.err, "--store-lease: got \"2\"")) << short_lease.err;
    EXPECT_TRUE(contains(short_lease.err, "allowed: a number 3 .. 86400")) << short_lease.err;
    Proc nan_msg = run(kPtd + " plan @tiny --headroom nan");
    EXPECT_TRUE(contains(nan_msg.err, "got \"nan\" (not a number)")) << nan_msg.err;
    EXPECT_EQ(run(kPtd + " plan @tiny --headroom 0.2").rc, 0);
}

// Issue 12 item 15: `--set training.lr=1e999` said "got string"; a number TOML cannot hold
// is out of range, said as such. NaN and infinities in the file or in --set stay refused.
TEST(CliOverrides, HugeAndNonFiniteNumbers) {
    Proc big = run_refused(kPtd + " validate @tiny --set training.lr=1e999");
    EXPECT_TRUE(contains(big.err, "--set training.lr=1e999: error: training.lr: got \"1e999\", which is out of "
                                  "range for a double"))
        << big.err;
    EXPECT_FALSE(contains(big.err, "string")) << big.err;
    Proc huge_int = run_refused(kPtd + " validate @tiny --set training.steps=99999999999999999999");
    EXPECT_TRUE(contains(huge_int.err, "out of range for a 64-bit integer")) << huge_int.err;
    for (const char* v : {"nan", "inf", "-inf", "+nan"}) {
        Proc r = run(kPtd + " validate @tiny --set estimate.headroom=" + v);
        EXPECT_EQ(r.rc, 2) << v;
        EXPECT_TRUE(contains(r.err, "estimate.headroom: got")) << r.err;
    }
}

// Issue 12 item 15: a 4 MB bad value was echoed in full; every echo is shortened, with
// the full length.
TEST(CliOverrides, LongValuesAreShortenedInMessages) {
    std::string job = write_temp("long_value.toml", "[model]\npreset = \"" + std::string(3 << 20, 'a') +
                                                         "\"\n[cluster]\nnodes = 1\ngpus_per_node = 1\ngpu = \"cpu\"\n");
    Proc r = run_refused(kPtd + " validate " + job);
    EXPECT_LT(r.err.size(), 2000u) << r.err.substr(0, 300);
    EXPECT_TRUE(contains(r.err, "(3,145,728 bytes)")) << r.err.substr(0, 500);
}

// Issue 12 item 15: the estimate table's columns ran together at ≥ 100 GiB.
TEST(CliEstimate, ColumnsStaySeparatedAtHundredsOfGib) {
    std::string job = write_temp("big_estimate.toml", "[model]\npreset = \"llama3-405b\"\n[cluster]\nnodes = 1\n"
                                                      "gpus_per_node = 1\ngpu = \"h100-sxm\"\n[parallel]\ntp = 1\n"
                                                      "[training]\nmicro_batch = 1\nglobal_batch = 1\n");
    Proc r = run_ok(kPtd + " estimate " + job);
    std::istringstream lines(r.out);
    std::string line, header, row;
    while (std::getline(lines, line)) {
        if (contains(line, "stage ") && contains(line, "params") && header.empty()) header = line;
        else if (!header.empty() && row.empty() && contains(line, "stage")) row = line;
    }
    ASSERT_FALSE(row.empty()) << r.out;
    // Every number is separated from the next: as many fields as the header has columns.
    std::istringstream hs(header), rs(row);
    std::vector<std::string> hcols, rcols;
    for (std::string w; hs >> w;) hcols.push_back(w);
    for (std::string w; rs >> w;) rcols.push_back(w);
    // header: stage layers params grads optimizer activations temp CUDA ctx NCCL frag total capacity status
    // row:    stage 0 layers params ... capacity status...
    ASSERT_GE(rcols.size(), 13u) << row;
    for (size_t i = 2; i < 13; ++i)
        EXPECT_NE(rcols[i].find_first_of("0123456789"), std::string::npos) << row;
    bool has_big = false;
    for (size_t i = 3; i < 13; ++i)
        if (rcols[i].find('.') != std::string::npos && rcols[i].find('.') >= 3) has_big = true;
    EXPECT_TRUE(has_big) << "expected a value of at least 100 GiB in: " << row;
    for (size_t i = 3; i < 13; ++i) EXPECT_LE(std::count(rcols[i].begin(), rcols[i].end(), '.'), 1) << row;
}

}  // namespace

namespace {

// Issue 12 items 4 and 15: /dev/zero as training.data is refused by the shared reader, and
// the engine's message reads once "error:" on one line (it read
// "ptd-engine: rank 0: error: /dev/zero: error: training.data: ..." with a line break
// before anything appended to it, such as the store's "; aborting the run").
TEST(EngineCli, SetupErrorsReadAsOneLine) {
    const std::string env = "RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 ";
    const std::string one_rank =
        " --set cluster.gpus_per_node=1 --set parallel.tp=1 --set parallel.pp=1 --steps 1 --set training.data=";
    Proc zero = run(env + kEngine + " --job " + kJobs + "tiny-local.toml" + one_rank + "/dev/zero");
    EXPECT_EQ(zero.rc, 1);
    EXPECT_EQ(zero.err, "ptd-engine: rank 0: error: /dev/zero: training.data: is a character device; expected a "
                        "regular file (a data file)\n");
    auto event = nlohmann::json::parse(zero.out);
    EXPECT_EQ(event["message"], "/dev/zero: training.data: is a character device; expected a regular file (a data file)");
}

// A FIFO or /dev/zero as the engine's --job, and a FIFO as a run's manifest, end at once
// with what they are (they used to hang or grow memory without end).
TEST(Cli, SpecialFilesAsJobAndManifest) {
    const std::string dir = ::testing::TempDir() + "/ptd_cli_special_" + std::to_string(getpid());
    std::system(("rm -rf " + dir + " && mkdir -p " + dir + "/run && mkfifo " + dir + "/job.toml " + dir +
                 "/run/manifest.json")
                    .c_str());
    Proc engine = run_refused(kEngine + " --job " + dir + "/job.toml");
    EXPECT_TRUE(contains(engine.err, "job.toml: error: is a FIFO (named pipe); expected a regular file (a job file)"))
        << engine.err;
    Proc validate = run_refused(kPtd + " validate /dev/zero");
    EXPECT_TRUE(contains(validate.err, "/dev/zero: error: is a character device; expected a regular file (a job file)"))
        << validate.err;
    Proc watch = run(kPtd + " watch " + dir + "/run --once");
    EXPECT_NE(watch.rc, 0);
    EXPECT_TRUE(contains(watch.err, "manifest.json: error: is a FIFO (named pipe); expected a regular file (a run manifest)"))
        << watch.err;
    Proc hosts = run_refused(kPtd + " layout " + kJobs + "tiny-local.toml --hosts " + dir);
    EXPECT_TRUE(contains(hosts.err, "hostfile: is a directory; expected a regular file (a hostfile)")) << hosts.err;
    std::system(("rm -rf " + dir).c_str());
}

// ---- ptd schedule / ptd trace (issue 16) -------------------------------------------------

TEST(CliSchedule, ChartLegendJsonAndTrace) {
    const std::string trace = ::testing::TempDir() + "ptd-schedule-trace.json";
    ptd_test::remove_after_tests_if_passed(trace);
    Proc r = run_ok(kPtd + " schedule " + kJobs + "tiny-gpt-8rank.toml --trace " + trace);
    for (const char* s : {"Schedule: 1F1B, p = 2, m = 4", "micro-batch 2 × accumulation 4 × DP 2 = global batch 16",
                          "stage 0 ", "stage 1 ", "0▒", "3█", "·", "┬", "bubble"})
        EXPECT_TRUE(contains(r.out, s)) << s << "\n" << r.out;
    EXPECT_FALSE(contains(r.out, "\x1b[")) << "no colour when stdout is a file";
    const nlohmann::json doc = nlohmann::json::parse(read_file(trace));
    ASSERT_TRUE(doc["traceEvents"].is_array());
    int x = 0;
    for (const auto& e : doc["traceEvents"]) x += e["ph"] == "X";
    EXPECT_GT(x, 16);

    Proc j = run_ok(kPtd + " schedule " + kJobs + "tiny-gpt-8rank.toml --json");
    const nlohmann::json sj = nlohmann::json::parse(j.out);
    EXPECT_EQ(sj["schema"], "ptd.schedule/1");
    Proc est = run_ok(kPtd + " estimate " + kJobs + "tiny-gpt-8rank.toml --json");
    const double step = nlohmann::json::parse(est.out)["step_s"].get<double>();
    EXPECT_NEAR(sj["step_s"].get<double>(), step, 1e-9 * step);
}

// The schedule's step carries the same interval as `ptd estimate`'s on a GPU (header and
// --json step_interval), and none on a CPU.
TEST(CliSchedule, StepCarriesItsInterval) {
    const std::string job = kJobs + "llama3-70b-h100.toml";
    ptd_test::expect_mentions(run_ok(kPtd + " schedule " + job).out, {"; step ", " (80%: "});
    auto sched = nlohmann::json::parse(run_ok(kPtd + " schedule --json " + job).out);
    auto est = nlohmann::json::parse(run_ok(kPtd + " estimate --json " + job).out);
    EXPECT_DOUBLE_EQ(sched["step_interval"]["confidence"].get<double>(), 0.8);
    EXPECT_NEAR(sched["step_interval"]["lo"].get<double>(), est["interval"]["step_s"]["lo"].get<double>(), 1e-9);
    EXPECT_NEAR(sched["step_interval"]["hi"].get<double>(), est["interval"]["step_s"]["hi"].get<double>(), 1e-9);
    auto cpu = nlohmann::json::parse(run_ok(kPtd + " schedule --json " + kJobs + "tiny-gpt-8rank.toml").out);
    EXPECT_TRUE(cpu["step_interval"].is_null());
}

// The timeline is the prediction with the job's cluster profile (or --profile), the one
// `ptd estimate` and `ptd launch` make; the text and --json name it, a bad one is refused.
TEST(CliSchedule, PredictsWithTheClusterProfile) {
    ptd_test::TempDir dir("ptd_schedule_profile");
    const std::string prof = (dir.path / "prof.toml").string();
    ptd_test::write_profile(prof, ptd_test::fitted_profile("cpu", "2026-11-29T06:40:00Z", 20e9, 10e9));
    const std::string job = kJobs + "tiny-gpt-8rank.toml";
    ptd_test::expect_mentions(run_ok(kPtd + " schedule " + job + " --profile " + prof).out,
                              {"  prediction with the cluster profile: " + prof + " (measured 2026-11-29T06:40:00Z on localhost)"});
    auto sched = nlohmann::json::parse(run_ok(kPtd + " schedule --json " + job + " --profile " + prof).out);
    EXPECT_EQ(sched["profile"]["path"], prof);
    EXPECT_EQ(sched["profile"]["measured_at"], "2026-11-29T06:40:00Z");
    auto est = nlohmann::json::parse(run_ok(kPtd + " estimate --json " + job + " --profile " + prof).out);
    EXPECT_NEAR(sched["step_s"].get<double>(), est["step_s"].get<double>(), 1e-9 * est["step_s"].get<double>());
    EXPECT_TRUE(nlohmann::json::parse(run_ok(kPtd + " schedule --json " + job).out)["profile"].is_null());
    // A profile measured on other hardware is refused naming both.
    ptd_test::write_profile((dir.path / "h100.toml").string(), ptd_test::fitted_profile("h100-sxm", "2026-11-29T06:40:00Z", 600e12, 3e12));
    Proc bad = run_refused(kPtd + " schedule " + job + " --profile " + (dir.path / "h100.toml").string());
    ptd_test::expect_mentions(bad.err, {"cluster.profile: the profile ", "measured on \"h100-sxm\" hardware", "runs on \"cpu\""});
}

TEST(CliSchedule, MissingTimelineIsAnError) {
    const std::string dir = ::testing::TempDir();
    Proc r = run_refused(kPtd + " schedule " + kJobs + "tiny-gpt-8rank.toml --steps-of " + dir);
    EXPECT_TRUE(contains(r.err, "no timeline folder")) << r.err;
    Proc t = run_refused(kPtd + " trace " + dir + " -o " + dir + "/t.json");
    EXPECT_TRUE(contains(t.err, "no timeline folder")) << t.err;
    Proc u = run(kPtd + " trace " + dir);
    EXPECT_EQ(u.rc, 2) << "-o is required";
}

// ---- issue 28 points 1-3: plans the job's framework runs, safe by default ----

// The plan header names the framework that bounded the search and the headroom every row
// leaves free (the first row filled 79.54 of 79.60 GiB); the rows say which overlap
// keys the planner turned on, in the text and in --json.
TEST(CliPlanFramework, HeaderNamesTheFrameworkAndTheHeadroom) {
    Proc r = run_ok(kPtd + " plan --top 3 " + kJobs + "llama3-70b-h100.toml");
    ptd_test::expect_mentions(r.out, {"headroom 5% (megatron's default)", "framework: megatron (Megatron-LM main d98e8a6) bounds the search",
                                      "no ZeRO-2/3", "--any-framework widens it", "overlap", "grad+param"});
    Proc j = run_ok(kPtd + " plan --top 3 --json " + kJobs + "llama3-70b-h100.toml");
    auto doc = nlohmann::json::parse(j.out);
    EXPECT_EQ(doc["framework"], "megatron");
    EXPECT_DOUBLE_EQ(doc["headroom"].get<double>(), 0.05);
    EXPECT_EQ(doc["headroom_source"], "megatron's default");
    for (const auto& e : doc["top"]) {
        EXPECT_GE(e["headroom_bytes"].get<double>(), 0.0);
        EXPECT_LE(e["peak_bytes"].get<double>(), e["usable_bytes"].get<double>());
        EXPECT_TRUE(e["exports"]["megatron"]["ok"].get<bool>());
        EXPECT_TRUE(e.contains("overlap_grad_reduce") && e.contains("overlap_param_gather") && e.contains("tp_comm_overlap"));
        EXPECT_FALSE(e.contains("frameworks"));
    }
    EXPECT_TRUE(doc["top"][0]["overlap_grad_reduce"].get<bool>());
    Proc set = run_ok(kPtd + " plan --top 1 " + kJobs + "llama3-70b-h100.toml --headroom 0.12");
    EXPECT_TRUE(contains(set.out, "headroom 12% (--headroom)")) << set.out;
    Proc ds = run_ok(kPtd + " plan --top 1 " + kJobs + "llama3-70b-h100.toml --set training.framework=deepspeed");
    EXPECT_TRUE(contains(ds.out, "headroom 10% (deepspeed's default)")) << ds.out;
    EXPECT_TRUE(contains(ds.out, "framework: deepspeed")) << ds.out;
}

TEST(CliPlanFramework, AnyFrameworkMarksEachRow) {
    Proc r = run_ok(kPtd + " plan --top 5 --any-framework --json " + kJobs + "llama3-70b-h100.toml");
    auto doc = nlohmann::json::parse(r.out);
    EXPECT_EQ(doc["framework"], "any");
    for (const auto& list : {doc["top"], doc["pareto"]})
        for (const auto& e : list) {
            ASSERT_TRUE(e.contains("frameworks")) << e.dump();
            const bool megatron = std::find(e["frameworks"].begin(), e["frameworks"].end(), "megatron") != e["frameworks"].end();
            EXPECT_EQ(megatron, e["exports"]["megatron"]["ok"].get<bool>() && e["zero"].get<int>() == 0) << e.dump();
        }
    Proc text = run_ok(kPtd + " plan --top 5 --any-framework " + kJobs + "llama3-70b-h100.toml");
    ptd_test::expect_mentions(text.out, {"frameworks: the layouts any framework runs (--any-framework)", "frameworks\n"});
}

// `ptd export --plan --format <the job's framework>` succeeds for every asset job and for bare
// Llama-3 70B, DeepSeek-V3 and Qwen3-235B jobs; `ptd estimate` of a bare job estimates the
// planned layout with the headroom the planner left.
TEST(CliPlanFramework, ExportPlanSucceedsForTheJobsOwnFramework) {
    ptd_test::TempDir dir("ptd_plan_fw");
    std::vector<std::string> jobs;
    for (const auto& entry : std::filesystem::directory_iterator(kJobs))
        if (entry.path().extension() == ".toml") jobs.push_back(entry.path().string());
    for (const auto& [preset, nodes, batch] : {std::tuple{"llama3-70b", 8, 512}, std::tuple{"deepseek-v3", 32, 1024},
                                               std::tuple{"qwen3-235b-a22b", 32, 1024}}) {
        const std::string path = dir / (std::string(preset) + ".toml");
        std::ofstream(path) << "[model]\npreset = \"" << preset << "\"\n[cluster]\nnodes = " << nodes
                            << "\ngpus_per_node = 8\ngpu = \"h100-sxm\"\n[training]\nglobal_batch = " << batch << "\n";
        jobs.push_back(path);
    }
    for (const std::string& job : jobs) {
        Proc r = run(kPtd + " export --plan --format megatron " + job);
        EXPECT_EQ(r.rc, 0) << job << "\n" << r.err;
        EXPECT_TRUE(contains(r.out, "--tensor-model-parallel-size")) << job << "\n" << r.out;
    }
    Proc est = run_ok(kPtd + " estimate " + dir / "llama3-70b.toml");
    ptd_test::expect_mentions(est.err, {"the planner's best for megatron", "leaving 5% of GPU memory free (megatron's default)"});
    EXPECT_TRUE(contains(est.out, "(estimate.headroom 5%)")) << est.out;
}

}  // namespace
