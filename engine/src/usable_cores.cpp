// usable_cores.cpp — the cores a rank may run on (its CPU affinity: taskset, a Slurm task's
// or a container's cpuset; its cgroup's CPU bandwidth limit, a container's CPU limit): how
// many compute threads it starts with before the ranks connect (trainer.cpp) — its own mask
// whole, a shared one divided among the node's ranks — and, by the same rule, whether the
// node's threads oversubscribe them; the mask and limit the probes' host line reports (`ptd
// calibrate`'s shared-cores test); and, once the machine's masks are known (host_cores.cpp), a
// rank's share of its cores, which then sizes its threads and decides the probes' verdict. A
// rank bound to one core that ran a thread per core of the machine made its GEMMs 36× slower
// beside other work there.
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ptd/engine/trainer.h"

namespace ptd::engine {

namespace {

namespace fs = std::filesystem;

// `at` on the process's cgroup folder under `root` (`rel` as /proc/self/cgroup gives it) and
// on each ancestor up to `root`: a parent's limit binds its children too.
template <class At>
void each_level(const fs::path& root, const std::string& rel, At at) {
    fs::path dir = root;
    for (const fs::path& part : fs::path(rel).relative_path()) dir /= part;
    for (;; dir = dir.parent_path()) {
        at(dir);
        if (dir == root || dir.parent_path() == dir) break;
    }
}

bool read_integer(const fs::path& file, long long& out) {
    std::ifstream f(file);
    std::string word;
    if (!(f >> word)) return false;
    char* end = nullptr;
    out = std::strtoll(word.c_str(), &end, 10);
    return end && *end == 0 && end != word.c_str();
}

// The lowest CPU bandwidth limit of the process's cgroup and its ancestors, in cores (quota /
// period, rounded up; 0 = none found): Kubernetes `limits.cpu`, `docker --cpus`, a Slurm
// job's. cgroup v2 writes "max 100000" (none) or "<quota> <period>" in cpu.max; v1 writes
// cpu.cfs_quota_us (−1 = none) and cpu.cfs_period_us. The process's folders come from
// /proc/self/cgroup: "0::/path" for v2, "N:cpu,cpuacct:/path" for v1's cpu controller.
int cgroup_cpu_limit() {
    std::ifstream in("/proc/self/cgroup");
    std::string line, v2, v1;
    while (std::getline(in, line)) {
        const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
        if (controllers == ",,") v2 = line.substr(b + 1);
        else if (controllers.find(",cpu,") != std::string::npos) v1 = line.substr(b + 1);
    }
    double cores = 0;
    auto take = [&cores](long long quota, long long period) {
        if (quota > 0 && period > 0 && (cores == 0 || (double)quota / period < cores)) cores = (double)quota / period;
    };
    if (!v2.empty())
        for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"})
            if (fs::exists(fs::path(root) / "cgroup.controllers")) {
                each_level(root, v2, [&](const fs::path& dir) {
                    std::ifstream f(dir / "cpu.max");
                    std::string quota;
                    long long period = 0;
                    if (f >> quota >> period && quota != "max") take(std::atoll(quota.c_str()), period);
                });
                break;
            }
    if (!v1.empty())
        for (const char* root : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"})
            if (fs::exists(fs::path(root) / "cpu.cfs_quota_us")) {
                each_level(root, v1, [&](const fs::path& dir) {
                    long long quota = 0, period = 0;
                    if (read_integer(dir / "cpu.cfs_quota_us", quota) && read_integer(dir / "cpu.cfs_period_us", period))
                        take(quota, period);
                });
                break;
            }
    return cores > 0 ? (int)std::ceil(cores - 1e-9) : 0;
}

}  // namespace

namespace {

int machine_cores() { return (int)std::max(1u, std::thread::hardware_concurrency()); }

int affinity_cores() {
    const size_t n = affinity_cpus().size();
    return n > 0 ? (int)n : machine_cores();
}

}  // namespace

namespace {

// A mask smaller than the machine and no larger than one rank's share of it is this rank's
// own (srun --cpus-per-task binds each task to its cores; a taskset per rank); a larger one,
// the whole machine included, the node's ranks share.
bool own_mask(int machine, int mask, int local) { return mask < machine && (long long)mask * local <= machine; }

}  // namespace

int compute_threads_for(int machine, int mask, int quota, int local_ranks) {
    const int local = std::max(1, local_ranks);
    int threads = own_mask(machine, mask, local) ? mask : mask / local;
    // A CPU quota covers the cgroup's processes together: the container's, or the Slurm job's.
    if (quota > 0) threads = std::min(threads, quota / local);
    return std::max(1, threads);
}

bool cores_oversubscribed_for(int machine, int mask, int quota, int local_ranks, int threads) {
    const long long local = std::max(1, local_ranks), t = std::max(1, threads);
    const long long on_mask = own_mask(machine, mask, (int)local) ? t : t * local;
    return on_mask > mask || (quota > 0 && t * local > quota);
}

int default_compute_threads(int local_ranks) {
    return compute_threads_for(machine_cores(), affinity_cores(), cgroup_cpu_limit(), local_ranks);
}

bool cores_oversubscribed(int local_ranks, int threads) {
    return cores_oversubscribed_for(machine_cores(), affinity_cores(), cgroup_cpu_limit(), local_ranks, threads);
}

std::vector<int> affinity_cpus() {
    std::vector<int> cpus;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; ++c)
            if (CPU_ISSET(c, &set)) cpus.push_back(c);
    return cpus;
}

int cpu_quota_cores() { return cgroup_cpu_limit(); }

double node_cpu_share(const std::vector<int>& mine, const std::vector<float>& holders) {
    double share = 0;
    for (int c : mine) {
        const float n = c >= 0 && (size_t)c < holders.size() ? holders[(size_t)c] : 0.0f;
        share += 1.0 / std::max(1.0f, n);
    }
    return share;
}

bool share_oversubscribed(double share, int quota, int local_ranks, int threads) {
    const long long t = std::max(1, threads), local = std::max(1, local_ranks);
    return (double)t > share + 1e-9 || (quota > 0 && t * local > quota);
}

}  // namespace ptd::engine
