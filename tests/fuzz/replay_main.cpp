// replay_main.cpp — replays the fuzz seed corpus, every saved crashing input and the
// bundled job/preset/config files through the fuzz entry points, in the normal build
// (no libFuzzer), so that a fixed crash stays fixed. A property violation aborts the
// test binary, like it crashes the fuzzer. gtest_main provides main().
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

int ptd_fuzz_job_toml(const uint8_t* data, size_t size);
int ptd_fuzz_hf_config(const uint8_t* data, size_t size);
int ptd_fuzz_hostfile(const uint8_t* data, size_t size);
int ptd_fuzz_kv_wire(const uint8_t* data, size_t size);
int ptd_fuzz_metrics_event(const uint8_t* data, size_t size);
int ptd_fuzz_timeline(const uint8_t* data, size_t size);
int ptd_fuzz_run_manifest(const uint8_t* data, size_t size);
int ptd_fuzz_checkpoint_manifest(const uint8_t* data, size_t size);
int ptd_fuzz_cluster_profile(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

// Regular files in `dir` (relative to the source tree) whose name ends with `ext`
// ("" = any), skipping dot-files and READMEs. A missing folder yields nothing.
std::vector<fs::path> files_in(const std::string& dir, const std::string& ext = "") {
    std::vector<fs::path> out;
    fs::path root = fs::path(PTD_SOURCE_DIR) / dir;
    std::error_code ec;
    if (!fs::is_directory(root, ec)) return out;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
        if (!entry.is_regular_file(ec)) continue;
        std::string name = entry.path().filename().string();
        if (name.starts_with(".") || name.starts_with("README")) continue;
        if (!ext.empty() && !name.ends_with(ext)) continue;
        out.push_back(entry.path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::string read_all(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

int replay(const std::vector<fs::path>& files, int (*target)(const uint8_t*, size_t)) {
    int n = 0;
    for (const fs::path& p : files) {
        SCOPED_TRACE(p.string());
        std::string bytes = read_all(p);
        // A failed property aborts; on return the input passed.
        target(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
        ++n;
    }
    return n;
}

std::vector<fs::path> concat(std::initializer_list<std::vector<fs::path>> lists) {
    std::vector<fs::path> out;
    for (const auto& l : lists) out.insert(out.end(), l.begin(), l.end());
    return out;
}

TEST(FuzzRegressions, JobToml) {
    auto files = concat({files_in("tests/fuzz/corpus/job_toml"), files_in("tests/fuzz/regressions/job_toml"),
                         files_in("assets/jobs", ".toml"), files_in("assets/presets", ".toml")});
    int n = replay(files, ptd_fuzz_job_toml);
    std::printf("[ replayed ] %d job_toml inputs\n", n);
    RecordProperty("replayed", n);
    EXPECT_GT(n, 0) << "no job_toml inputs found under " << PTD_SOURCE_DIR;
}

TEST(FuzzRegressions, HfConfig) {
    auto files = concat({files_in("tests/fuzz/corpus/hf_config"), files_in("tests/fuzz/regressions/hf_config"),
                         files_in("tests/data/hf", ".json")});
    int n = replay(files, ptd_fuzz_hf_config);
    std::printf("[ replayed ] %d hf_config inputs\n", n);
    RecordProperty("replayed", n);
    EXPECT_GT(n, 0) << "no hf_config inputs found under " << PTD_SOURCE_DIR;
}

TEST(FuzzRegressions, Hostfile) {
    auto files = concat({files_in("tests/fuzz/corpus/hostfile"), files_in("tests/fuzz/regressions/hostfile")});
    int n = replay(files, ptd_fuzz_hostfile);
    std::printf("[ replayed ] %d hostfile inputs\n", n);
    RecordProperty("replayed", n);
    EXPECT_GT(n, 0) << "no hostfile inputs found under " << PTD_SOURCE_DIR;
}

// The targets whose seeds are only their corpus and saved regressions.
struct CorpusTarget {
    const char* name;
    int (*entry)(const uint8_t*, size_t);
};

class FuzzCorpus : public ::testing::TestWithParam<CorpusTarget> {};

TEST_P(FuzzCorpus, ReplaysSeedsAndRegressions) {
    const std::string t = GetParam().name;
    auto files = concat({files_in("tests/fuzz/corpus/" + t), files_in("tests/fuzz/regressions/" + t)});
    int n = replay(files, GetParam().entry);
    std::printf("[ replayed ] %d %s inputs\n", n, t.c_str());
    RecordProperty("replayed", n);
    EXPECT_GT(n, 0) << "no " << t << " inputs found under " << PTD_SOURCE_DIR;
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpus,
                         ::testing::Values(CorpusTarget{"kv_wire", ptd_fuzz_kv_wire},
                                           CorpusTarget{"metrics_event", ptd_fuzz_metrics_event},
                                           CorpusTarget{"timeline", ptd_fuzz_timeline},
                                           CorpusTarget{"run_manifest", ptd_fuzz_run_manifest},
                                           CorpusTarget{"checkpoint_manifest", ptd_fuzz_checkpoint_manifest},
                                           CorpusTarget{"cluster_profile", ptd_fuzz_cluster_profile}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
