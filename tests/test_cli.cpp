// test_cli.cpp — `ptd` and `ptd-engine` run as real processes: exit codes (0 ok, 2 usage
// or config error), messages on stderr, colour only on a TTY, and the --json schemas.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

struct Proc {
    int rc = -1;
    std::string out, err;
};

std::string slurp(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Runs `cmd` through the shell with stdout/stderr captured to files (never a TTY).
Proc run(const std::string& cmd) {
    static int counter = 0;
    std::string base = ::testing::TempDir() + "/ptd_cli_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
    std::string full = cmd + " >" + base + ".out 2>" + base + ".err";
    int status = std::system(full.c_str());
    Proc r;
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(base + ".out");
    r.err = slurp(base + ".err");
    std::remove((base + ".out").c_str());
    std::remove((base + ".err").c_str());
    return r;
}

const std::string kPtd = PTD_BIN_DIR "/ptd";
const std::string kEngine = PTD_BIN_DIR "/ptd-engine";
const std::string kJobs = PTD_SOURCE_DIR "/assets/jobs/";

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

std::string write_temp(const std::string& name, const std::string& text) {
    std::string path = ::testing::TempDir() + "/" + name;
    std::ofstream(path) << text;
    return path;
}

TEST(Cli, HelpAndVersion) {
    Proc help = run(kPtd + " --help");
    EXPECT_EQ(help.rc, 0);
    for (const char* cmd : {"validate", "layout", "presets"}) EXPECT_TRUE(contains(help.out, cmd)) << help.out;
    Proc version = run(kPtd + " --version");
    EXPECT_EQ(version.rc, 0);
    EXPECT_TRUE(contains(version.out, "ptd 0.")) << version.out;
}

TEST(Cli, UsageErrorsExitTwo) {
    EXPECT_EQ(run(kPtd).rc, 2);
    Proc unknown = run(kPtd + " frobnicate");
    EXPECT_EQ(unknown.rc, 2);
    EXPECT_TRUE(contains(unknown.err, "ptd: error:")) << unknown.err;
    Proc bad_flag = run(kPtd + " layout " + kJobs + "tiny-local.toml --color-by xy");
    EXPECT_EQ(bad_flag.rc, 2);
    EXPECT_TRUE(contains(bad_flag.err, "xy")) << bad_flag.err;
}

TEST(Cli, ValidateGoodAndBadJobs) {
    Proc ok = run(kPtd + " validate " + kJobs + "llama3-70b-h100.toml " + kJobs + "tiny-local.toml");
    EXPECT_EQ(ok.rc, 0) << ok.err;
    EXPECT_TRUE(contains(ok.out, "valid:")) << ok.out;
    EXPECT_TRUE(contains(ok.out, "70.55B parameters")) << ok.out;

    std::string bad = write_temp("bad_job.toml",
                                 "[model]\npreset = \"llama3-8b\"\n[cluster]\nnodes = 1\ngpus_per_node = 8\n"
                                 "gpu = \"h100-sxm\"\n[parallel]\ntp = 3\n");
    Proc r = run(kPtd + " validate " + bad);
    EXPECT_EQ(r.rc, 2);
    EXPECT_TRUE(contains(r.err, bad + ":8:6: error: parallel.tp:")) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_FALSE(contains(r.err, "\x1b[")) << "colour codes when stderr is not a TTY";

    Proc missing = run(kPtd + " validate /no/such/job.toml");
    EXPECT_EQ(missing.rc, 2);
    EXPECT_TRUE(contains(missing.err, "/no/such/job.toml")) << missing.err;
}

TEST(Cli, ValidateJson) {
    std::string bad = write_temp("bad_job2.toml", "[model]\npreset = \"llama3-8b\"\n[cluster]\nnodes = 1\n");
    Proc r = run(kPtd + " validate --json " + kJobs + "tiny-local.toml " + bad);
    EXPECT_EQ(r.rc, 2);
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
    Proc r = run(kPtd + " validate --print " + kJobs + "llama3-70b-h100.toml");
    ASSERT_EQ(r.rc, 0) << r.err;
    std::string saved = write_temp("saved.toml", r.out);
    Proc again = run(kPtd + " validate --print " + saved);
    ASSERT_EQ(again.rc, 0) << again.err;
    EXPECT_EQ(again.out, r.out);
}

TEST(Cli, LayoutTextGrid) {
    Proc r = run(kPtd + " layout " + kJobs + "llama3-70b-h100.toml --color-by pp");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(contains(r.out, "64 ranks = tp 8 × cp 1 × dp 2 × pp 4")) << r.out;
    EXPECT_TRUE(contains(r.out, "node 7")) << r.out;
    EXPECT_TRUE(contains(r.out, "every TP group stays inside one node")) << r.out;
    EXPECT_FALSE(contains(r.out, "\x1b[")) << "no colour when stdout is a file";

    Proc forced_plain = run("NO_COLOR=1 " + kPtd + " layout @tiny");
    EXPECT_EQ(forced_plain.rc, 0);
    EXPECT_FALSE(contains(forced_plain.out, "\x1b["));
}

TEST(Cli, LayoutColourOnATty) {
    // `script` gives the child a pseudo-terminal; skip where util-linux's script is absent.
    if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "script(1) not installed";
    Proc r = run("TERM=xterm-256color script -qec '" + kPtd + " layout @tiny' /dev/null");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(contains(r.out, "\x1b[30;48;5;")) << r.out;
    Proc no_color = run("NO_COLOR=1 TERM=xterm-256color script -qec '" + kPtd + " layout @tiny' /dev/null");
    EXPECT_FALSE(contains(no_color.out, "\x1b[30;48;5;")) << no_color.out;
}

TEST(Cli, LayoutFlagsTpGroupsSpanningNodes) {
    std::string job = write_temp("span.toml",
                                 "[model]\npreset = \"llama3-70b\"\n[cluster]\nnodes = 4\ngpus_per_node = 8\n"
                                 "gpu = \"h100-sxm\"\n[parallel]\ntp = 16\npp = 2\n");
    Proc r = run(kPtd + " layout " + job);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(contains(r.out, "warning: 2 of 2 TP groups span nodes")) << r.out;
}

TEST(Cli, LayoutJsonMatchesMegatronExample) {
    // Megatron-LM's parallel_state example: 8 GPUs, TP2 · DP2 · PP2.
    std::string job = write_temp("megatron8.toml",
                                 "[model]\npreset = \"gpt2-124m\"\n[cluster]\nnodes = 2\ngpus_per_node = 4\n"
                                 "gpu = \"a100-80gb\"\n[parallel]\ntp = 2\npp = 2\n");
    Proc r = run(kPtd + " layout --json " + job);
    ASSERT_EQ(r.rc, 0) << r.err;
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
    EXPECT_TRUE(contains(text.out, "llama3-405b")) << text.out;
    EXPECT_TRUE(contains(text.out, "mi300x")) << text.out;
    Proc json = run(kPtd + " presets --json");
    ASSERT_EQ(json.rc, 0);
    auto doc = nlohmann::json::parse(json.out);
    EXPECT_EQ(doc["schema"], "ptd.presets/1");
    EXPECT_GE(doc["models"].size(), 15u);
    EXPECT_GE(doc["gpus"].size(), 11u);
}

TEST(Cli, WorksFromAnyDirectoryWithEmbeddedPresets) {
    // A copy of the binary far from any assets folder, forced onto the compiled-in presets.
    std::string dir = ::testing::TempDir() + "/ptd_lonely";
    ASSERT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + dir + "/bin && cp " + kPtd + " " + dir + "/bin/").c_str()), 0);
    Proc r = run("cd / && PTD_ASSETS=embedded " + dir + "/bin/ptd presets --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    auto doc = nlohmann::json::parse(r.out);
    EXPECT_EQ(doc["origin"], "<embedded>");
    EXPECT_GE(doc["models"].size(), 15u);
    Proc job = run("cd / && PTD_ASSETS=embedded " + dir + "/bin/ptd validate " + kJobs + "llama3-8b-h100.toml");
    EXPECT_EQ(job.rc, 0) << job.err;
}

TEST(Cli, BadAssetsFolderIsAnError) {
    Proc r = run("PTD_ASSETS=/nonexistent " + kPtd + " presets");
    EXPECT_EQ(r.rc, 2);
    EXPECT_TRUE(contains(r.err, "PTD_ASSETS: got \"/nonexistent\"")) << r.err;
}

TEST(Engine, DescribeUsesTheSharedLayout) {
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

TEST(Engine, BadEnvironmentIsAClearError) {
    Proc r = run("RANK=x WORLD_SIZE=4 " + kEngine + " --job " + kJobs + "tiny-local.toml --describe");
    EXPECT_EQ(r.rc, 2);
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
