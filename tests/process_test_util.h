// process_test_util.h — files and processes for the tests that run `ptd` / `ptd-engine` or
// write scratch files: reading a whole file, a per-test scratch folder removed at the end, and
// running a shell command with its stdout and stderr captured (to files: never a TTY).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

namespace ptd_test {

// The whole file as bytes ("" when it cannot be read).
inline std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// A fresh folder under the system temp dir named for `tag`, the process and the running test,
// removed at the end of the test.
struct TempDir {
    std::filesystem::path path;
    explicit TempDir(const std::string& tag) {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        path = std::filesystem::temp_directory_path() / (tag + "_" + std::to_string(::getpid()) + "_" +
                                                         info->test_suite_name() + "_" + info->name());
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// A finished command: its exit status (-1 when it did not exit) and what it printed.
struct Proc {
    int rc = -1;
    std::string out, err;
};

// Runs `cmd` through the shell with stdout and stderr captured to scratch files named for
// `tag` (removed afterwards).
inline Proc run_captured(const std::string& cmd, const std::string& tag = "ptd_test") {
    static int counter = 0;
    const std::string base =
        ::testing::TempDir() + "/" + tag + "_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
    const int status = std::system((cmd + " >" + base + ".out 2>" + base + ".err").c_str());
    Proc p;
    p.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    p.out = read_file(base + ".out");
    p.err = read_file(base + ".err");
    std::remove((base + ".out").c_str());
    std::remove((base + ".err").c_str());
    return p;
}

// Removes `path` (a scratch folder shared by several tests of this process) after the last
// test, when every test passed; a failure keeps it and prints where it is, to be read.
inline void remove_after_tests_if_passed(const std::filesystem::path& path) {
    struct Cleanup : ::testing::Environment {
        std::vector<std::filesystem::path> paths;
        void TearDown() override {
            const bool passed = ::testing::UnitTest::GetInstance()->Passed();
            for (const auto& p : paths) {
                std::error_code ec;
                if (passed) std::filesystem::remove_all(p, ec);
                else if (std::filesystem::exists(p, ec)) std::fprintf(stderr, "kept for a failed test: %s\n", p.c_str());
            }
        }
    };
    static Cleanup* cleanup = static_cast<Cleanup*>(::testing::AddGlobalTestEnvironment(new Cleanup));
    cleanup->paths.push_back(path);
}

}  // namespace ptd_test
