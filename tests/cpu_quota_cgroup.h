// cpu_quota_cgroup.h — a CPU quota for the tests that need a slow host made real: a cgroup
// with CFS bandwidth control (cgroup v2 cpu.max, or cgroup v1's cpu.cfs_quota_us where the
// cpu controller is mounted there) that a process joins by writing its pid to `procs()`.
// `skip` says why there is none (not root, no cpu controller); the destructor removes the
// cgroup (it must be empty by then: its processes exited).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "process_test_util.h"

namespace ptd_test {

struct CpuQuotaCgroup {
    std::string path;   // the cgroup's folder
    std::string skip;   // why there is none ("" = made)
    // `quota_us` of CPU time per 100 ms period, over every process in the cgroup together.
    explicit CpuQuotaCgroup(const std::string& name, long quota_us) {
        namespace fs = std::filesystem;
        std::string limit_file, limit;
        if (geteuid() == 0 && fs::exists("/sys/fs/cgroup/cgroup.controllers") &&
            read_file("/sys/fs/cgroup/cgroup.controllers").find("cpu") != std::string::npos)
            path = "/sys/fs/cgroup/" + name, limit_file = "cpu.max", limit = std::to_string(quota_us) + " 100000";
        else if (geteuid() == 0 && fs::exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"))
            path = "/sys/fs/cgroup/cpu/" + name, limit_file = "cpu.cfs_quota_us", limit = std::to_string(quota_us);
        else {
            skip = "needs root and a cgroup cpu controller (cgroup v2 cpu.max or v1 cpu.cfs_quota_us)";
            return;
        }
        std::error_code ec;
        if (!fs::create_directory(path, ec)) {
            skip = "cannot create " + path + ": " + ec.message();
            path.clear();
            return;
        }
        std::ofstream(path + "/" + limit_file) << limit;
        if (read_file(path + "/" + limit_file).find(std::to_string(quota_us)) == std::string::npos)
            skip = "the quota was not taken: " + path + "/" + limit_file;
    }
    ~CpuQuotaCgroup() {
        if (!path.empty()) rmdir(path.c_str());
    }
    CpuQuotaCgroup(const CpuQuotaCgroup&) = delete;
    CpuQuotaCgroup& operator=(const CpuQuotaCgroup&) = delete;
    std::string procs() const { return path + "/cgroup.procs"; }
};

}  // namespace ptd_test
