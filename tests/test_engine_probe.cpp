// test_engine_probe.cpp — the calibration probes of ptd-engine (`--probe`): their
// statistics (median, interquartile spread, the nccl-tests bus-bandwidth factors), and the
// shipped 8-rank job probed by 8 real processes over loopback: every rank's lines parse as
// the launcher parses them, every GEMM of the job's layers and every group kind of its
// layout is measured, and the counts agree with the rank's own plan. Also the cores a rank
// counts as its own (its affinity mask and its cgroup's CPU quota), which size its threads
// and decide the probes' shared-cores verdict.
#include <sched.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "cpu_quota_cgroup.h"
#include "engine_run.h"
#include "ptd/engine/probe.h"
#include "ptd/metrics_event.h"
#include "ptd/spec/cluster_profile.h"

namespace {

using engine_run::json;
using ptd::collective_bus_factor;
using ptd::engine::sample_stats;

TEST(ProbeStats, MedianAndInterquartileSpread) {
    // Sorted 1..5: median 3, quartiles 2 and 4 (linear interpolation) → spread 2/3.
    const auto st = sample_stats({5, 1, 4, 2, 3});
    EXPECT_EQ(st.repeats, 5);
    EXPECT_DOUBLE_EQ(st.median_s, 3.0);
    EXPECT_NEAR(st.spread, 2.0 / 3.0, 1e-12);
    // An even count interpolates: 1, 2, 3, 10 → median 2.5, q1 1.75, q3 4.75.
    const auto even = sample_stats({10, 1, 3, 2});
    EXPECT_DOUBLE_EQ(even.median_s, 2.5);
    EXPECT_NEAR(even.spread, 3.0 / 2.5, 1e-12);
    EXPECT_EQ(sample_stats({}).repeats, 0);
}

TEST(ProbeStats, BusBandwidthFactorsOfNcclTests) {
    // nccl-tests PERFORMANCE.md: all-reduce 2(n−1)/n, reduce-scatter / all-gather (n−1)/n.
    EXPECT_DOUBLE_EQ(collective_bus_factor("all_reduce", 8), 2.0 * 7 / 8);
    EXPECT_DOUBLE_EQ(collective_bus_factor("all_reduce", 2), 1.0);
    EXPECT_DOUBLE_EQ(collective_bus_factor("reduce_scatter", 4), 0.75);
    EXPECT_DOUBLE_EQ(collective_bus_factor("all_gather", 8), 7.0 / 8);
    EXPECT_DOUBLE_EQ(collective_bus_factor("p2p", 2), 1.0);
    EXPECT_DOUBLE_EQ(collective_bus_factor("all_reduce", 1), 1.0);
}

// default_compute_threads(1) (one rank on its node) in a child process set up by `prepare`
// (which returns false when it could not); −1 when the child failed.
template <class Prepare>
int threads_in_child(Prepare prepare) {
    const pid_t pid = fork();
    if (pid == 0) _exit(prepare() ? std::min(ptd::engine::default_compute_threads(1), 100) : 101);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) <= 100 ? WEXITSTATUS(status) : -1;
}

// A rank bound to one core (taskset, a Slurm task's cpuset) counts one core, not the
// machine's: two OpenBLAS threads on one core shared with other work made a GEMM 36× slower.
TEST(EngineThreads, DefaultThreadsFollowTheAffinityMask) {
    if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs 2 cores";
    EXPECT_EQ(threads_in_child([] {
                  cpu_set_t one;
                  CPU_ZERO(&one);
                  CPU_SET(0, &one);
                  return sched_setaffinity(0, sizeof one, &one) == 0;
              }),
              1);
    EXPECT_GE(threads_in_child([] { return true; }), 2) << "unbound: every core of the mask";
}

// The default threads of a rank from the counts: a mask that is the rank's own share is
// used whole, a shared one (or the whole machine) divided among the node's ranks, a quota
// divided likewise; never 0.
TEST(EngineThreads, DefaultThreadsTakeAnOwnMaskWholeAndShareTheRest) {
    using ptd::engine::compute_threads_for;
    EXPECT_EQ(compute_threads_for(64, 64, 0, 8), 8) << "unbound: the machine among 8 ranks";
    EXPECT_EQ(compute_threads_for(64, 8, 0, 8), 8) << "srun --cpus-per-task=8: its own 8 cores";
    EXPECT_EQ(compute_threads_for(64, 16, 0, 8), 2) << "a 16-core cpuset shared by 8 ranks";
    EXPECT_EQ(compute_threads_for(64, 64, 16, 8), 2) << "a 16-core quota (a pod's limit) over 8 ranks";
    EXPECT_EQ(compute_threads_for(2, 1, 0, 1), 1) << "taskset to one core of two";
    EXPECT_EQ(compute_threads_for(2, 2, 1, 1), 1) << "a fifth of a core's quota, rounded up to 1";
    EXPECT_EQ(compute_threads_for(2, 2, 0, 4), 1) << "4 ranks on 2 cores: at least one thread";
    EXPECT_EQ(compute_threads_for(2, 2, 0, 1), 2);
}

// The probes' shared-cores verdict by the same rule: an own mask holds one rank's threads,
// a shared mask or a quota the node's.
TEST(EngineThreads, OversubscribedWhenTheThreadsOutnumberTheirCores) {
    using ptd::engine::cores_oversubscribed_for;
    EXPECT_TRUE(cores_oversubscribed_for(2, 2, 0, 4, 1)) << "4 ranks on 2 cores";
    EXPECT_FALSE(cores_oversubscribed_for(2, 2, 0, 2, 1)) << "a core per rank";
    EXPECT_FALSE(cores_oversubscribed_for(64, 8, 0, 8, 8)) << "srun --cpus-per-task=8, 8 threads each";
    EXPECT_TRUE(cores_oversubscribed_for(64, 8, 0, 8, 9)) << "one thread more than its own cores";
    EXPECT_TRUE(cores_oversubscribed_for(64, 16, 0, 8, 4)) << "32 threads on a shared 16-core cpuset";
    EXPECT_TRUE(cores_oversubscribed_for(64, 64, 16, 8, 4)) << "32 threads under a 16-core quota";
    EXPECT_FALSE(cores_oversubscribed_for(2, 1, 0, 1, 1)) << "taskset to its own core";
}

// Once the node's masks are known (the probes, after connecting), a rank's cores are its
// share of each CPU it may run on: 1 / the number of the node's ranks that hold that CPU.
TEST(EngineThreads, ANodesMasksGiveEachRankItsShareOfTheCores) {
    using ptd::engine::node_cpu_share;
    using ptd::engine::share_oversubscribed;
    // 4 ranks in one 2-core cpuset {0, 1}: half a core each, whatever one mask suggests.
    const std::vector<float> one_cpuset{4, 4};
    EXPECT_DOUBLE_EQ(node_cpu_share({0, 1}, one_cpuset), 0.5);
    EXPECT_TRUE(share_oversubscribed(0.5, 0, 4, 1)) << "4 one-thread ranks on 2 cores";
    // 4 ranks on their own 2 cores each (a taskset per rank): 2 each.
    const std::vector<float> own(8, 1.0f);
    EXPECT_DOUBLE_EQ(node_cpu_share({2, 3}, own), 2.0);
    EXPECT_FALSE(share_oversubscribed(2.0, 0, 4, 2));
    EXPECT_TRUE(share_oversubscribed(2.0, 0, 4, 3)) << "a thread more than its own cores";
    // One rank on {0..3}, two more on {0, 1} and {2, 3}: every CPU held twice, so 2, 1 and 1.
    const std::vector<float> mixed{2, 2, 2, 2};
    EXPECT_DOUBLE_EQ(node_cpu_share({0, 1, 2, 3}, mixed), 2.0);
    EXPECT_DOUBLE_EQ(node_cpu_share({0, 1}, mixed), 1.0);
    // A CPU the counts do not reach (or hold 0 for) counts whole; a quota binds the node's ranks.
    EXPECT_DOUBLE_EQ(node_cpu_share({0, 5}, {1, 0}), 2.0);
    EXPECT_TRUE(share_oversubscribed(8.0, 4, 2, 4)) << "8 threads under a 4-core quota";
}

// Ranks agree which of them share a machine by its host name and boot id, not by the layout's
// nodes: equal key words, one machine, numbered in order of first appearance.
TEST(EngineThreads, RanksWithOneMachineKeyShareOneMachine) {
    using ptd::engine::machines_of_ranks;
    // 4 ranks: 0 and 2 on one machine, 1 and 3 on another (3 words each).
    EXPECT_EQ(machines_of_ranks({1, 2, 3, 7, 8, 9, 1, 2, 3, 7, 8, 9}), (std::vector<int>{0, 1, 0, 1}));
    EXPECT_EQ(machines_of_ranks({5, 5, 5, 5, 5, 6}), (std::vector<int>{0, 1})) << "one word differs: two machines";
    EXPECT_EQ(machines_of_ranks({}), std::vector<int>{});
}

// The default threads from a rank's share of its machine: its whole cores, at least one, at
// most its part of a quota.
TEST(EngineThreads, DefaultThreadsFromTheMachinesShare) {
    using ptd::engine::compute_threads_for_share;
    EXPECT_EQ(compute_threads_for_share(32.0, 0, 2), 32) << "2 ranks on a 64-core machine";
    EXPECT_EQ(compute_threads_for_share(2.0 / 3.0 * 8, 0, 3), 5) << "3 ranks on 16 cores: 5⅓ each";
    EXPECT_EQ(compute_threads_for_share(0.5, 0, 4), 1) << "4 ranks in one 2-core cpuset";
    EXPECT_EQ(compute_threads_for_share(8.0, 4, 2), 2) << "a 4-core quota over 2 ranks";
    EXPECT_EQ(compute_threads_for_share(1.0 - 1e-12, 0, 2), 1) << "rounding does not lose a whole core";
}

// Two ranks that `ptd launch` starts as two one-rank hosts of one machine (a 2-node job on a
// workstation: LOCAL_WORLD_SIZE 1 each) each took every core of the machine, twice as many
// threads as cores. Once connected they see one machine and take half its cores each.
TEST(EngineThreads, TwoOneRankNodesOnOneMachineShareItsCores) {
    const std::vector<int> cpus = ptd::engine::affinity_cpus();
    if (cpus.size() < 2) GTEST_SKIP() << "needs 2 cores in this process's mask";
    const std::string job = engine_run::write_job({.dp = 2, .nodes = 2, .steps = 2}, "two-one-rank-nodes");
    engine_run::SpawnOptions so;
    so.default_threads = true;
    so.local_world_size = 1;
    const auto runs = engine_run::run_engine(job, 2, {}, so);
    ASSERT_FALSE(so.timed_out);
    const int expected =
        ptd::engine::compute_threads_for_share((double)cpus.size() / 2, ptd::engine::cpu_quota_cores(), 2);
    for (int rank = 0; rank < 2; ++rank) {
        const auto& run = runs[(size_t)rank];
        ASSERT_EQ(run.exit_code, 0) << "rank " << rank << " stderr:\n" << run.err;
        const auto start = run.of("start");
        ASSERT_EQ(start.size(), 1u) << run.out;
        EXPECT_EQ(start[0].value("threads", -1), expected)
            << "rank " << rank << ": half of the " << cpus.size() << " cores the two ranks share, not all of them";
    }
}

// A container's CPU limit (a cgroup CPU quota) caps the count: 20 ms per 100 ms is one core
// (rounded up), 150 ms per 100 ms two.
TEST(EngineThreads, DefaultThreadsFollowTheCgroupCpuQuota) {
    for (const auto& [quota_us, cores] : {std::pair{20000L, 1}, std::pair{150000L, 2}}) {
        const ptd_test::CpuQuotaCgroup quota("ptd-test-cores-" + std::to_string(getpid()), quota_us);
        if (!quota.skip.empty()) GTEST_SKIP() << quota.skip;
        const int affinity = threads_in_child([] { return true; });
        const std::string procs = quota.procs();
        EXPECT_EQ(threads_in_child([&procs] { return (bool)(std::ofstream(procs) << getpid() << std::flush); }),
                  std::min(affinity, cores))
            << quota_us << " us per 100 ms";
    }
}

TEST(EngineProbe, QuickWithoutProbeIsRefused) {
    const auto r = ptd_test::run_captured(std::string(PTD_BIN_DIR "/ptd-engine --job ") + PTD_SOURCE_DIR +
                                          "/assets/jobs/tiny-gpt-8rank.toml --quick");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("--quick"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--probe"), std::string::npos) << r.err;
}

// The shipped TP 2 × PP 2 × DP 2 job (fp32, tiny-gpt) probed by its 8 ranks at once on
// `backend` (the engine's own Backend: the CPU one, or the CUDA one under the simulator).
void probe_eight_rank_job(const std::string& backend) {
    const auto runs = engine_run::run_engine(PTD_SOURCE_DIR "/assets/jobs/tiny-gpt-8rank.toml", 8,
                                             {"--probe", "--quick", "--backend", backend});
    ASSERT_EQ(runs.size(), 8u);
    for (int rank = 0; rank < 8; ++rank) {
        const auto& run = runs[(size_t)rank];
        ASSERT_EQ(run.exit_code, 0) << "rank " << rank << " stderr:\n" << run.err;
        std::vector<ptd::ProbeRecord> probes;
        std::istringstream lines(run.out);
        for (std::string line; std::getline(lines, line);) {
            std::string problem;
            auto m = ptd::parse_metrics_line(line, &problem);
            ASSERT_TRUE(m) << "rank " << rank << ": " << problem << "\n" << line;
            ASSERT_EQ(m->kind, ptd::MetricKind::probe) << line;
            EXPECT_EQ(m->rank, rank);
            probes.push_back(m->probe);
        }
        ASSERT_GE(probes.size(), 3u);
        const ptd::ProbeRecord& host = probes.front();
        EXPECT_EQ(host.kind, "host");
        EXPECT_FALSE(host.hostname.empty());
        EXPECT_GE(host.cores, 1);
        // The mask the rank may run on (`ptd calibrate` unites a host's): this test's, unbound.
        EXPECT_FALSE(host.cpus.empty());
        EXPECT_LE((int)host.cpus.size(), host.cores);
        EXPECT_GE(host.cpu_quota, 0);
        EXPECT_FALSE(host.blas_core.empty()) << "the host line names the BLAS core type";
        EXPECT_EQ(host.backend, backend);
        EXPECT_EQ(host.precision, "fp32");
        const ptd::ProbeRecord& plan = probes[1];
        EXPECT_EQ(plan.kind, "plan");
        EXPECT_GT(plan.expected_s, 0);
        EXPECT_EQ(plan.repeats, 5);  // --quick
        const ptd::ProbeRecord& done = probes.back();
        EXPECT_EQ(done.kind, "done");
        const int measured = (int)probes.size() - 3;
        EXPECT_EQ(done.probes, measured);
        EXPECT_EQ(plan.probes, measured) << "the dry pass counts what the real pass runs";

        std::set<std::string> gemms;
        std::map<std::string, std::set<std::string>> comm;  // group → ops
        std::map<std::string, std::set<std::string>> in_step;  // group → ops probed between compute bursts
        std::set<std::string> elementwise, passes;
        double own_step = 0, slowest_step = 0;  // the step bursts' medians (dpwait)
        for (size_t i = 2; i + 1 < probes.size(); ++i) {
            const auto& p = probes[i];
            // Collectives between compute bursts (probe comm_in_step) repeat at least 10 times;
            // the engine's passes at least 5, more where 5 take less than 0.3 s.
            if (p.kind == "layer") EXPECT_GE(p.repeats, 5) << p.name;
            else EXPECT_EQ(p.repeats, p.between_s > 0 ? 10 : 5) << p.name;  // between compute bursts: at least 10
            EXPECT_GT(p.median_s, 0) << p.name;
            EXPECT_GT(p.mean_s, 0) << p.name << ": the mean of the repeats, what a step pays per call";
            EXPECT_GE(p.spread, 0) << p.name;
            if (p.kind == "gemm") {
                gemms.insert(p.name);
                ASSERT_EQ(p.shape.size(), 3u);
                EXPECT_DOUBLE_EQ(p.flops, 2.0 * p.shape[0] * p.shape[1] * p.shape[2]) << p.name;
                EXPECT_NEAR(p.tflops, p.flops / p.median_s / 1e12, 1e-9 * p.tflops) << p.name;
                EXPECT_EQ(p.dtype, "f32");
            } else if (p.kind == "attention") {
                gemms.insert(p.name);
                ASSERT_EQ(p.shape.size(), 4u);  // B, H, T, D: micro_batch 2, 4 heads / tp 2, seq 64, 64 / 4
                EXPECT_EQ(p.shape, (std::vector<long long>{2, 2, 64, 16}));
                const double fwd = 4.0 * 2 * 2 * 64 * 64 * 16;
                EXPECT_DOUBLE_EQ(p.flops, p.name == "attention.bwd" ? 2 * fwd : fwd) << p.name;
            } else if (p.kind == "comm") {
                comm[p.group].insert(p.name);
                if (p.between_s > 0) in_step[p.group].insert(p.name);
                EXPECT_NEAR(p.busbw_gbps, p.algbw_gbps * collective_bus_factor(p.name, p.group_size), 1e-9 * p.busbw_gbps);
                EXPECT_EQ(p.nodes, 1);
                EXPECT_EQ(p.members_per_node, p.group_size);
            } else if (p.kind == "layer") {
                passes.insert(p.name);
                // B, T, h, heads, kv heads, ffn (local at tp 2), tp, SP on, no recompute.
                EXPECT_EQ(p.shape, (std::vector<long long>{2, 64, 64, 2, 2, 128, 2, 2, 1})) << p.name;
                if (p.name.starts_with("step.compute")) {  // dpwait: a step's micro-batches (4), the DP pair
                    EXPECT_EQ(p.group, "dp") << p.name;
                    EXPECT_EQ(p.group_size, 2) << p.name;
                    EXPECT_EQ(p.micro_batches, 4) << p.name;
                    (p.name == "step.compute" ? own_step : slowest_step) = p.median_s;
                }
            } else {
                elementwise.insert(p.name);
            }
        }
        // The engine's own passes: every stage's layers with their TP collectives' time; the
        // embedding's on the first stage, the head's on the last.
        // Not on the simulator (it emulates every kernel on the host: seconds per layer).
        if (backend == "cpu") {
            const bool first_stage = run.out.find("lm_head.fwd") == std::string::npos;  // of the 2 stages
            for (const char* pass : {"layer.fwd", "layer.bwd", "layer.fwd.tp", "layer.bwd.tp"}) EXPECT_TRUE(passes.count(pass)) << pass;
            for (const char* pass : {"embedding.fwd", "embedding.bwd", "embedding.fwd.tp", "embedding.bwd.tp"})
                EXPECT_EQ(passes.count(pass) == 1, first_stage) << pass << ", rank " << rank;
            for (const char* pass : {"head.fwd_bwd", "head.fwd_bwd.tp"})
                EXPECT_EQ(passes.count(pass) == 1, !first_stage) << pass << ", rank " << rank;
            // Every rank's bursts, and the group's slowest burst no faster than its own.
            EXPECT_GT(own_step, 0) << "rank " << rank;
            EXPECT_GE(slowest_step, own_step) << "rank " << rank;
        } else {
            EXPECT_TRUE(passes.empty()) << "rank " << rank;
        }
        // tiny-gpt: rows = micro_batch 2 · seq 64; hidden 64 → local widths at tp 2.
        for (const char* layer : {"qkv", "attn_proj", "mlp_up", "mlp_down"})
            for (const char* pass : {"fwd", "dgrad", "wgrad"})
                EXPECT_TRUE(gemms.count(std::string(layer) + "." + pass)) << "rank " << rank << " " << layer << "." << pass;
        EXPECT_TRUE(gemms.count("attention.fwd") && gemms.count("attention.bwd")) << "rank " << rank;
        EXPECT_TRUE(gemms.count("mlp_up.fwd.sustained")) << "rank " << rank;
        // The LM head is measured where it runs: the last pipeline stage.
        const bool last_stage = run.out.find("lm_head.fwd") != std::string::npos;
        EXPECT_EQ(gemms.count("lm_head.wgrad") == 1, last_stage);
        for (const char* e : {"copy", "layernorm.fwd", "gelu.fwd", "adamw", "fill1"}) EXPECT_TRUE(elementwise.count(e)) << e;
        for (const char* g : {"tp", "dp", "world"})
            EXPECT_EQ(comm[g], (std::set<std::string>{"all_gather", "all_reduce", "reduce_scatter"})) << g;
        EXPECT_EQ(comm["pp"], (std::set<std::string>{"p2p"}));
        // Between compute bursts only where the host shares its cores (8 ranks, one thread
        // each, on fewer cores) and on the CPU backend.
        if (backend == "cpu" && host.cores < 8) {
            for (const char* g : {"tp", "dp", "world"})
                EXPECT_EQ(in_step[g], (std::set<std::string>{"all_gather", "all_reduce", "reduce_scatter"})) << g;
            EXPECT_EQ(in_step["pp"], (std::set<std::string>{"p2p"}));
        } else {
            EXPECT_TRUE(in_step.empty()) << "no core is shared: no probe between compute bursts";
        }
    }
    // Half the ranks are on the last of the 2 stages.
    int last = 0;
    for (const auto& run : runs) last += run.out.find("lm_head.fwd") != std::string::npos;
    EXPECT_EQ(last, 4);
}

TEST(EngineProbe, EightRankJobOverLoopback) { probe_eight_rank_job("cpu"); }

// Two ranks of one node bound to the same core (one taskset for the whole job): each rank's
// mask is 1 CPU of 2, which one rank alone takes for its own, but the node's masks together
// give each half a core. The probes then see shared cores and time the collectives between
// compute bursts (the in-step probes), as they must where ranks wait for a core.
TEST(EngineProbe, RanksInOneCoreProbeTheirCollectivesBetweenComputeBursts) {
    if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs 2 cores: one for both ranks, one left";
    const std::string job = engine_run::write_job({.tp = 2, .steps = 2}, "two-ranks-one-core");
    // The ranks inherit the test's mask: CPU 0 only, for as long as they are started.
    cpu_set_t saved, one;
    ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    const auto runs = engine_run::run_engine(job, 2, {"--probe", "--quick"});
    sched_setaffinity(0, sizeof saved, &saved);
    ASSERT_EQ(runs.size(), 2u);
    for (int rank = 0; rank < 2; ++rank) {
        const auto& run = runs[(size_t)rank];
        ASSERT_EQ(run.exit_code, 0) << "rank " << rank << " stderr:\n" << run.err;
        int in_step = 0;
        std::vector<int> cpus;
        std::istringstream lines(run.out);
        for (std::string line; std::getline(lines, line);) {
            auto m = ptd::parse_metrics_line(line, nullptr);
            ASSERT_TRUE(m) << line;
            if (m->probe.kind == "host") cpus = m->probe.cpus;
            if (m->probe.kind == "comm" && m->probe.between_s > 0) ++in_step;
        }
        EXPECT_EQ(cpus, std::vector<int>{0}) << "rank " << rank << " ran in the test's one-core mask";
        EXPECT_GT(in_step, 0) << "rank " << rank << ": two ranks in one core share it, so the collectives are also "
                                 "probed between compute bursts";
    }
}

// The GPU probe code path (CUDA backend, device buffers, synchronising downloads) under the
// CUDA simulator; on a GPU the same code runs on the device.
TEST(EngineProbe, EightRankJobOnTheCudaSimulator) { probe_eight_rank_job("cuda-sim"); }

}  // namespace
