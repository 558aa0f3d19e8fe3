// test_presets.cpp — the preset catalog: the required presets exist with sane figures,
// the compiled-in copy equals assets/, and broken preset files are reported, not ignored.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "ptd/model/model_stats.h"
#include "ptd/spec/presets.h"

#include "process_test_util.h"

namespace {


TEST(Presets, EmbeddedCopyMatchesAssets) {
    EXPECT_EQ(ptd::embedded_models_toml(), ptd_test::read_file(PTD_SOURCE_DIR "/assets/presets/models.toml"));
    EXPECT_EQ(ptd::embedded_gpus_toml(), ptd_test::read_file(PTD_SOURCE_DIR "/assets/presets/gpus.toml"));
}

TEST(Presets, RequiredModelsExistWithPublishedSizes) {
    const ptd::PresetCatalog& cat = ptd::embedded_presets();
    // name → published parameter count (billions) and tolerance.
    struct Want { const char* name; double billions; };
    const Want wants[] = {{"gpt2-124m", 0.124}, {"gpt2-350m", 0.355}, {"gpt2-774m", 0.774}, {"gpt2-1.5b", 1.558},
                          {"gpt3-175b", 175.0},  {"llama2-7b", 6.74},  {"llama2-13b", 13.0}, {"llama2-70b", 69.0},
                          {"llama3-8b", 8.03},   {"llama3-70b", 70.6}, {"llama3-405b", 405.0}, {"mistral-7b", 7.24},
                          {"mixtral-8x7b", 46.7}, {"qwen2-7b", 7.6},  {"qwen2-72b", 72.7}};
    for (const Want& w : wants) {
        const ptd::ModelSpec* m = cat.find_model(w.name);
        ASSERT_NE(m, nullptr) << w.name;
        double b = ptd::count_parameters(*m).total / 1e9;
        EXPECT_NEAR(b, w.billions, w.billions * 0.02) << w.name;
        EXPECT_EQ(m->hidden % m->heads, 0) << w.name;
        EXPECT_EQ(m->heads % m->kv_heads, 0) << w.name;
    }
    EXPECT_EQ(cat.find_model("mixtral-8x7b")->experts, 8);
    EXPECT_EQ(cat.find_model("mixtral-8x7b")->top_k, 2);
    // Mixtral activates ~12.9B of its 46.7B parameters per token.
    EXPECT_NEAR(ptd::count_parameters(*cat.find_model("mixtral-8x7b")).active / 1e9, 12.9, 0.2);
    EXPECT_EQ(cat.models.front().name, "gpt2-124m");  // file order is kept
}

TEST(Presets, RequiredGpusHaveFigures) {
    const ptd::PresetCatalog& cat = ptd::embedded_presets();
    for (const char* name : {"v100-32gb", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "l40s",
                             "mi300x", "rtx4090", "cpu"}) {
        const ptd::GpuSpec* g = cat.find_gpu(name);
        ASSERT_NE(g, nullptr) << name;
        EXPECT_GT(g->memory_gib, 0) << name;
        EXPECT_GT(g->fp32_tflops, 0) << name;
        EXPECT_GT(g->hbm_gbps, 0) << name;
        EXPECT_GT(g->link_gbps, 0) << name;
        EXPECT_FALSE(g->description.empty()) << name;
    }
    // cost: every GPU preset carries its datasheet power (the nominal cpu device has none).
    for (const ptd::GpuSpec& g : cat.gpus) {
        if (g.name == "cpu") EXPECT_EQ(g.power_w, 0);
        else EXPECT_GE(g.power_w, 250) << g.name;
    }
    EXPECT_DOUBLE_EQ(cat.find_gpu("h100-sxm")->power_w, 700.0);
    EXPECT_DOUBLE_EQ(cat.find_gpu("mi300x")->power_w, 750.0);
    EXPECT_DOUBLE_EQ(cat.find_gpu("a100-80gb")->bf16_tflops, 312.0);
    EXPECT_NEAR(cat.find_gpu("h100-sxm")->bf16_tflops, 989.4, 0.5);
    EXPECT_EQ(cat.find_gpu("v100-32gb")->bf16_tflops, 0.0);  // no bf16 tensor cores
}

TEST(Presets, LoadFromAssetsDirectoryWins) {
    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / "ptd_test_assets";
    fs::create_directories(dir / "presets");
    std::ofstream(dir / "presets" / "models.toml") << "[mini]\narch = \"gpt\"\nlayers = 2\nhidden = 64\nheads = 4\n"
                                                      "vocab = 256\nseq_len = 32\n";
    std::ofstream(dir / "presets" / "gpus.toml") << "[toy]\ndescription = \"toy\"\nmemory_gib = 1.0\n"
                                                    "fp32_tflops = 1.0\nhbm_gbps = 1.0\nlink_gbps = 1.0\n";
    setenv("PTD_ASSETS", dir.c_str(), 1);
    auto cat = ptd::load_presets();
    ASSERT_TRUE(cat) << cat.error().str();
    EXPECT_EQ(cat->models.size(), 1u);
    EXPECT_EQ(cat->models[0].name, "mini");
    EXPECT_EQ(cat->models[0].ffn_hidden, 256);  // gpt default 4·hidden

    // A broken file is an error naming the file and line, never a silent fallback.
    std::ofstream(dir / "presets" / "gpus.toml") << "[toy]\nmemory_gib = \"lots\"\n";
    auto broken = ptd::load_presets();
    ASSERT_FALSE(broken);
    std::string msg = broken.error().str();
    EXPECT_NE(msg.find("gpus.toml:2:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("toy.memory_gib"), std::string::npos) << msg;
    unsetenv("PTD_ASSETS");
    fs::remove_all(dir);
}

TEST(Presets, UnknownPresetKeyIsReported) {
    auto cat = ptd::parse_presets("[m]\narch = \"gpt\"\nlayers = 2\nhidden = 64\nheads = 4\nvocab = 9\n"
                                  "seq_len = 8\nhiden = 3\n",
                                  "models.toml", "", "gpus.toml");
    ASSERT_FALSE(cat);
    EXPECT_NE(cat.error().str().find("did you mean \"hidden\""), std::string::npos) << cat.error().str();
}

}  // namespace

// What joins a node's GPUs is named as the hardware has it (issue 29 point 7): PCIe cards are
// not NVLink parts, MI300X is Infinity Fabric, the cpu device is loopback between processes.
TEST(Presets, GpuLinkNamesWhatJoinsTheGpus) {
    const ptd::PresetCatalog& p = ptd::embedded_presets();
    for (const char* pcie : {"h100-pcie", "l40s", "rtx4090"}) EXPECT_EQ(p.find_gpu(pcie)->link, ptd::GpuLink::pcie) << pcie;
    EXPECT_EQ(p.find_gpu("mi300x")->link, ptd::GpuLink::infinity_fabric);
    EXPECT_EQ(p.find_gpu("cpu")->link, ptd::GpuLink::loopback);
    for (const char* sxm : {"v100-32gb", "a100-80gb", "h100-sxm", "h100-96gb-500w", "h200", "b200", "gb200"})
        EXPECT_EQ(p.find_gpu(sxm)->link, ptd::GpuLink::nvlink) << sxm;
}

// Grand Teton's H100 and MI300X have a default network; the cards no preset describes get the
// generic one and the job says so (origin.network_generic), unless it writes NIC keys.
TEST(Presets, GenericNetworkIsMarkedAndPresetNetworksAreNot) {
    const ptd::PresetCatalog& p = ptd::embedded_presets();
    auto job_on = [&](const std::string& gpu, const std::string& extra = "") {
        return ptd::load_job_text("[model]\npreset = \"llama3-8b\"\n[cluster]\nnodes = 2\ngpus_per_node = 8\ngpu = \"" + gpu +
                                      "\"\n" + extra + "[parallel]\ntp = 8\n[training]\nmicro_batch = 1\nglobal_batch = 16\n",
                                  "job.toml", p);
    };
    for (const char* gpu : {"h100-96gb-500w", "mi300x", "h100-sxm"}) {
        auto j = job_on(gpu);
        ASSERT_TRUE(j) << j.error().str();
        EXPECT_FALSE(j->origin.network_generic) << gpu;
        EXPECT_EQ(j->cluster.nics_per_node, 8) << gpu;
        EXPECT_DOUBLE_EQ(j->cluster.inter_gbps, 50.0) << gpu;  // 400 Gb/s per GPU
    }
    auto l40s = job_on("l40s");
    ASSERT_TRUE(l40s) << l40s.error().str();
    EXPECT_TRUE(l40s->origin.network_generic);
    EXPECT_NE(ptd::describe_network(*l40s).find("PCIe 31.5 GB/s"), std::string::npos) << ptd::describe_network(*l40s);
    auto described = job_on("l40s", "nics_per_node = 2\nnic_gbps = 100.0\n");
    ASSERT_TRUE(described) << described.error().str();
    EXPECT_FALSE(described->origin.network_generic);
}

// The cpu device has no NICs of a GPU node: one machine is loopback and nothing else; hosts are
// named as hosts sharing a link per host, never "NICs per node" with rails or "a NIC per GPU".
TEST(Presets, CpuDeviceNetworkIsDescribedAsHostsNotGpuNics) {
    const ptd::PresetCatalog& p = ptd::embedded_presets();
    auto cpu_job = [&](int nodes, int per_node) {
        return ptd::load_job_text("[model]\npreset = \"tiny-gpt\"\n[cluster]\nnodes = " + std::to_string(nodes) +
                                      "\ngpus_per_node = " + std::to_string(per_node) +
                                      "\ngpu = \"cpu\"\n[parallel]\ntp = 2\n[training]\nmicro_batch = 1\nglobal_batch = 8\n",
                                  "job.toml", p);
    };
    auto one = cpu_job(1, 8);
    ASSERT_TRUE(one) << one.error().str();
    EXPECT_EQ(ptd::describe_network(*one), "one machine, ranks exchange tensors over loopback at 10 GB/s (no NICs)");
    EXPECT_EQ(one->origin.network_source, "");
    auto two = cpu_job(2, 4);
    ASSERT_TRUE(two) << two.error().str();
    const std::string net = ptd::describe_network(*two);
    EXPECT_NE(net.find("2 hosts over TCP"), std::string::npos) << net;
    EXPECT_EQ(net.find("NIC"), std::string::npos) << net;
    EXPECT_EQ(net.find("rail"), std::string::npos) << net;
    EXPECT_EQ(two->origin.network_source.find("NIC per GPU"), std::string::npos) << two->origin.network_source;
}
