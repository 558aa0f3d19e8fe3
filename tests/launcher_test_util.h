// launcher_test_util.h — shared by the launcher tests and bench: temp folders, fake
// engines (shell scripts standing in for ptd-engine), and the "no process of this run
// survives" check, which scans /proc for any process carrying the run's PTD_RUN_ID.
#pragma once

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "process_test_util.h"  // read_file

namespace ptd_test {

inline std::string make_temp_dir(const std::string& tag) {
    std::string tmpl = (std::filesystem::temp_directory_path() / ("ptd-" + tag + "-XXXXXX")).string();
    const char* d = mkdtemp(tmpl.data());
    return d ? std::string(d) : std::string();
}

// A test's scratch folder (/tmp/ptd-TAG-XXXXXX), removed after the last test when every
// test passed (remove_after_tests_if_passed); a failure keeps it to be read.
inline std::string scratch_dir(const std::string& tag) {
    std::string d = make_temp_dir(tag);
    if (!d.empty()) remove_after_tests_if_passed(d);
    return d;
}

inline void write_file(const std::string& path, const std::string& text, int mode = 0644) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
    chmod(path.c_str(), mode);
}

// Pids of live (non-zombie) processes whose environment holds `assignment` ("NAME=value").
inline std::vector<int> processes_with_env(const std::string& assignment) {
    std::vector<int> pids;
    const std::string& needle = assignment;
    DIR* proc = opendir("/proc");
    if (!proc) return pids;
    while (dirent* e = readdir(proc)) {
        const int pid = std::atoi(e->d_name);
        if (pid <= 0 || pid == getpid()) continue;
        const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
        const size_t close_paren = stat.rfind(')');
        if (close_paren == std::string::npos || close_paren + 2 >= stat.size() || stat[close_paren + 2] == 'Z') continue;
        std::ifstream f("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
        std::string var;
        while (std::getline(f, var, '\0'))
            if (var == needle) {
                pids.push_back(pid);
                break;
            }
    }
    closedir(proc);
    return pids;
}

// Pids of live (non-zombie) processes whose environment has PTD_RUN_ID=run_id.
inline std::vector<int> processes_of_run(const std::string& run_id) { return processes_with_env("PTD_RUN_ID=" + run_id); }

// Waits up to `seconds` for every process of the run to be gone; returns the survivors.
inline std::vector<int> survivors_after(const std::string& run_id, double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
        auto pids = processes_of_run(run_id);
        if (pids.empty() || std::chrono::steady_clock::now() > until) return pids;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

}  // namespace ptd_test
