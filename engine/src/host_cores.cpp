// host_cores.cpp — which ranks run on one machine and what share of its cores each has, agreed
// by every rank once connected: a rank's own mask cannot tell its cores from a cpuset it shares,
// and LOCAL_WORLD_SIZE counts the ranks of a layout node, not of a machine (`ptd launch` puts
// a 2-node job on one workstation as two hosts of one rank each). The trainer sizes a rank's
// default compute threads from the share; the probes decide from it whether ranks wait for cores.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "ptd/engine/backend.h"
#include "ptd/engine/comm.h"
#include "ptd/engine/trainer.h"

namespace ptd::engine {

void all_reduce_host_floats(Backend& be, Communicator& group, float* x, int64_t n, ReduceOp op) {
    float* d = (float*)be.alloc(MEM_WORKSPACE, n * (int64_t)sizeof(float), "ranks' agreement");
    be.upload(d, x, n * sizeof(float));
    group.all_reduce(d, n, DType::f32, op);
    be.download(x, d, n * sizeof(float));
    be.release(d);
}

namespace {

// 48 bits of FNV-1a over the host name and the kernel's boot id: two machines that share a
// host name (containers, clones) differ in boot id; ranks of one machine agree on both.
uint64_t machine_key() {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::string id = host;
    std::ifstream boot("/proc/sys/kernel/random/boot_id");
    std::string boot_id;
    if (boot >> boot_id) id += "\n" + boot_id;
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : id) h = (h ^ c) * 1099511628211ull;
    return h & 0xffffffffffffull;
}

}  // namespace

std::vector<int> machines_of_ranks(const std::vector<float>& keys) {
    const size_t world = keys.size() / kMachineKeyWords;
    std::vector<int> machine(world);
    std::map<std::vector<float>, int> seen;  // a key → its machine (thousands of ranks: no pairwise scan)
    for (size_t r = 0; r < world; ++r) {
        std::vector<float> k(keys.begin() + (ptrdiff_t)(r * kMachineKeyWords),
                             keys.begin() + (ptrdiff_t)((r + 1) * kMachineKeyWords));
        machine[r] = seen.emplace(std::move(k), (int)seen.size()).first->second;
    }
    return machine;
}

int compute_threads_for_share(double share, int quota, int ranks_on_machine) {
    int threads = (int)std::floor(share + 1e-9);
    if (quota > 0) threads = std::min(threads, quota / std::max(1, ranks_on_machine));
    return std::max(1, threads);
}

HostCores host_cores_of_rank(Backend& be, Communicator& world, int rank, int world_size) {
    HostCores out;
    const std::vector<int> mine = affinity_cpus();
    if (world_size <= 1) {
        out.ranks_on_machine = 1;
        out.share = mine.empty() ? -1.0 : (double)mine.size();
        return out;
    }
    // Every rank's machine key, 16 bits a float (exact), + 1 so that no word is 0.
    std::vector<float> keys((size_t)world_size * kMachineKeyWords, 0.0f);
    const uint64_t key = machine_key();
    for (int w = 0; w < kMachineKeyWords; ++w)
        keys[(size_t)rank * kMachineKeyWords + (size_t)w] = (float)(((key >> (16 * w)) & 0xffff) + 1);
    all_reduce_host_floats(be, world, keys.data(), (int64_t)keys.size(), ReduceOp::sum);
    const std::vector<int> machine = machines_of_ranks(keys);
    const int machines = *std::max_element(machine.begin(), machine.end()) + 1, here = machine[(size_t)rank];
    out.ranks_on_machine = (int)std::count(machine.begin(), machine.end(), here);
    // The highest CPU id any rank may run on, then per machine how many of its ranks hold each CPU.
    float top = mine.empty() ? 0.0f : (float)(mine.back() + 1);
    all_reduce_host_floats(be, world, &top, 1, ReduceOp::max);
    const size_t cpus = (size_t)top;
    if (cpus == 0) return out;  // no rank read a mask (every rank sees the same maximum): no second call
    std::vector<float> holders((size_t)machines * cpus, 0.0f);
    for (int c : mine) holders[(size_t)here * cpus + (size_t)c] = 1.0f;
    all_reduce_host_floats(be, world, holders.data(), (int64_t)holders.size(), ReduceOp::sum);
    if (!mine.empty())
        out.share = node_cpu_share(mine, std::vector<float>(holders.begin() + (ptrdiff_t)((size_t)here * cpus),
                                                            holders.begin() + (ptrdiff_t)((size_t)(here + 1) * cpus)));
    return out;
}

}  // namespace ptd::engine
