// engine_run.h — ptd-engine as a user runs it, for the tests that train through real
// processes (test_engine_train on the CPU and the simulator, test_engine_gpu on a GPU): one
// process per rank with the torchrun environment over loopback TCP, their stdout JSON
// events and stderr, a tiny job file, and the one check both make of a finished rank —
// its losses against a reference within a stated tolerance, its memory against the
// estimators' prediction. Shared so the CPU, simulator and GPU runs are held to the same
// tolerances by the same code. The including target defines PTD_BIN_DIR and PTD_SOURCE_DIR.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "free_port.h"
#include "process_test_util.h"
#include "ptd/rank_env.h"

namespace engine_run {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- spawning ranks -----------------------------------------------------------------------

inline std::string slurp(const std::string& path) { return ptd_test::read_file(path); }

struct RankRun {
    int exit_code = -1;       // −1: killed by a signal
    int signal = 0;
    std::string out, err;
    std::vector<json> events;
    std::vector<json> of(const std::string& event) const {
        std::vector<json> v;
        for (const json& e : events)
            if (e.value("event", "") == event) v.push_back(e);
        return v;
    }
};

struct SpawnOptions {
    int kill_rank = -1;            // send kill_signal to this rank once it printed a step line
    int kill_signal = SIGKILL;     // SIGSTOP: a stalled rank (SIGKILLed once everyone else left)
    double deadline_s = 120;
    bool timed_out = false;
    double seconds_after_kill = 0; // how long the others took to exit after the kill
    std::string run_secret;        // PTD_RUN_SECRET of every rank ("" = unset: loopback only)
    // Runs once every rank but the last is started, before the last one is: the store (rank
    // 0's) is up and the run cannot get past its rendezvous without the last rank, so what
    // this does to the store's port happens while the run is waiting on it.
    std::function<void(int master_port)> before_last_rank;
    // The engine's own default threads (OMP_NUM_THREADS and OPENBLAS_NUM_THREADS left unset)
    // instead of one each, and the ranks `ptd launch` would say share a host (0 = all of them;
    // 1 = each rank a host of its own, as a several-node job on one machine).
    bool default_threads = false;
    int local_world_size = 0;
};

// A fresh folder per test process. Not named by pid alone: pids are reused, and a folder
// left by an earlier run would hold stale rank logs that the kill-on-step check could read
// before the new rank has truncated them.
inline fs::path temp_root() {
    static fs::path root = [] {
        std::string tmpl = (fs::temp_directory_path() / "ptd-engine-test-XXXXXX").string();
        const char* made = mkdtemp(tmpl.data());
        const fs::path root = made ? made : tmpl;
        ptd_test::remove_after_tests_if_passed(root);
        return root;
    }();
    return root;
}

inline std::vector<RankRun> run_engine(const std::string& job, int world, const std::vector<std::string>& args,
                                SpawnOptions& so) {
    static int counter = 0;
    const fs::path dir = temp_root() / ("spawn-" + std::to_string(++counter));
    fs::create_directories(dir);
    const int port = free_port();
    std::vector<pid_t> pids((size_t)world, -1);
    pid_t pgid = 0;
    for (int r = 0; r < world; ++r) {
        if (r == world - 1 && so.before_last_rank) so.before_last_rank(port);
        const std::string out = (dir / ("rank" + std::to_string(r) + ".out")).string();
        const std::string err = (dir / ("rank" + std::to_string(r) + ".err")).string();
        std::ofstream(out, std::ios::trunc);  // empty before the rank starts, not after
        std::ofstream(err, std::ios::trunc);
        pid_t pid = fork();
        if (pid == 0) {
            setpgid(0, pgid);
            int fo = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            int fe = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            dup2(fo, 1);
            dup2(fe, 2);
            ptd::set_single_host_rank_env(r, world, port);
            if (!so.run_secret.empty()) setenv("PTD_RUN_SECRET", so.run_secret.c_str(), 1);
            if (so.local_world_size > 0) {
                setenv("LOCAL_RANK", std::to_string(r % so.local_world_size).c_str(), 1);
                setenv("LOCAL_WORLD_SIZE", std::to_string(so.local_world_size).c_str(), 1);
            }
            if (so.default_threads) {
                unsetenv("OMP_NUM_THREADS");
                unsetenv("OPENBLAS_NUM_THREADS");
            } else {
                setenv("OMP_NUM_THREADS", "1", 1);
                setenv("OPENBLAS_NUM_THREADS", "1", 1);
            }
            std::vector<std::string> argv_s = {PTD_BIN_DIR "/ptd-engine", "--job", job};
            argv_s.insert(argv_s.end(), args.begin(), args.end());
            // The engine's default run directory is runs/<run id> under the working folder:
            // a test's run goes into its own scratch folder instead, removed with it.
            if (std::find(args.begin(), args.end(), "--run-dir") == args.end()) {
                argv_s.push_back("--run-dir");
                argv_s.push_back((dir / "run").string());
            }
            std::vector<char*> argv;
            for (auto& a : argv_s) argv.push_back(a.data());
            argv.push_back(nullptr);
            execv(argv[0], argv.data());
            _exit(127);
        }
        if (pgid == 0) pgid = pid;
        setpgid(pid, pgid);
        pids[(size_t)r] = pid;
    }
    std::vector<RankRun> runs((size_t)world);
    int alive = world;
    const auto t0 = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point killed_at{};
    bool killed = false;
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    while (alive > 0) {
        for (int r = 0; r < world; ++r) {
            if (pids[(size_t)r] < 0) continue;
            int status = 0;
            if (waitpid(pids[(size_t)r], &status, WNOHANG) == pids[(size_t)r]) {
                pids[(size_t)r] = -1;
                --alive;
                if (WIFEXITED(status)) runs[(size_t)r].exit_code = WEXITSTATUS(status);
                if (WIFSIGNALED(status)) runs[(size_t)r].signal = WTERMSIG(status);
                if (killed && alive == 0)
                    so.seconds_after_kill = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
            }
        }
        if (so.kill_rank >= 0 && !killed && pids[(size_t)so.kill_rank] > 0) {
            const std::string out = slurp((dir / ("rank" + std::to_string(so.kill_rank) + ".out")).string());
            if (out.find("\"event\":\"step\"") != std::string::npos) {
                kill(pids[(size_t)so.kill_rank], so.kill_signal);
                killed = true;
                killed_at = std::chrono::steady_clock::now();
            }
        }
        // A stopped victim never exits by itself: end it once every other rank has left.
        if (killed && alive == 1 && so.kill_signal == SIGSTOP && pids[(size_t)so.kill_rank] > 0)
            kill(pids[(size_t)so.kill_rank], SIGKILL);
        if (elapsed() > so.deadline_s) {
            so.timed_out = true;
            kill(-pgid, SIGKILL);
            for (pid_t p : pids)
                if (p > 0) waitpid(p, nullptr, 0);
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (int r = 0; r < world; ++r) {
        RankRun& rr = runs[(size_t)r];
        rr.out = slurp((dir / ("rank" + std::to_string(r) + ".out")).string());
        rr.err = slurp((dir / ("rank" + std::to_string(r) + ".err")).string());
        std::istringstream ls(rr.out);
        for (std::string line; std::getline(ls, line);) {
            json j = json::parse(line, nullptr, false);
            if (!j.is_discarded()) rr.events.push_back(j);
        }
    }
    // Nothing of the run may survive it.
    EXPECT_EQ(kill(-pgid, 0), -1) << "a process of the run is still alive";
    return runs;
}

inline std::vector<RankRun> run_engine(const std::string& job, int world, const std::vector<std::string>& args = {}) {
    SpawnOptions so;
    auto r = run_engine(job, world, args, so);
    EXPECT_FALSE(so.timed_out) << "the run did not finish within " << so.deadline_s << " s";
    return r;
}

inline std::string text_corpus() { return PTD_SOURCE_DIR "/docs/estimators.md"; }

struct TinyJob {
    std::string preset = "tiny-gpt";
    int tp = 1, pp = 1, dp = 1, zero = 0;
    int nodes = 1;                 // cluster.nodes: the world split evenly over them
    int vpp = 1;                   // interleaved 1F1B: model chunks per stage
    bool sp = false;
    int steps = 5;
    double lr = 1e-3;
    std::string data = text_corpus();
    std::string recompute = "none";
    std::string layers_per_stage;  // e.g. "[1, 3]"; empty = balanced
    std::string precision = "fp32";
    bool flash = false;            // training.flash_attention = true (written only when set)
    int world() const { return tp * pp * dp; }
};

inline std::string write_job(const TinyJob& j, const std::string& name) {
    if (j.nodes < 1 || j.world() % j.nodes != 0)  // a test's mistake: say so rather than write a bad job
        throw std::invalid_argument("TinyJob: world " + std::to_string(j.world()) + " does not split over " +
                                    std::to_string(j.nodes) + " nodes");
    const fs::path p = temp_root() / (name + ".toml");
    std::ofstream f(p);
    f << "[model]\npreset = \"" << j.preset << "\"\nseq_len = 32\n\n"
      << "[cluster]\nnodes = " << j.nodes << "\ngpus_per_node = " << j.world() / j.nodes << "\ngpu = \"cpu\"\n\n"
      << "[parallel]\ntp = " << j.tp << "\npp = " << j.pp << "\nvpp = " << j.vpp << "\nzero = " << j.zero
      << "\nsequence_parallel = " << (j.sp ? "true" : "false") << "\nrecompute = \"" << j.recompute << "\"\n"
      << (j.layers_per_stage.empty() ? "" : "layers_per_stage = " + j.layers_per_stage + "\n") << "\n"
      << "[training]\nmicro_batch = 2\nglobal_batch = 8\nprecision = \"" << j.precision << "\"\nlr = " << j.lr
      << "\nmin_lr = 1e-4\nwarmup = 2\nsteps = " << j.steps << "\ndata = \"" << j.data << "\"\n"
      << (j.flash ? "flash_attention = true\n" : "");
    return p.string();
}

inline std::vector<double> losses(const RankRun& r) {
    std::vector<double> v;
    for (const json& e : r.of("step")) v.push_back(e["loss"].get<double>());
    return v;
}

inline std::string describe(const std::vector<RankRun>& runs) {
    std::string s;
    for (size_t r = 0; r < runs.size(); ++r)
        s += "--- rank " + std::to_string(r) + " exit " + std::to_string(runs[r].exit_code) + " signal " +
             std::to_string(runs[r].signal) + "\n" + runs[r].err.substr(0, 3000) + "\n";
    return s;
}

// Relative loss tolerances against the single-process run over 5 steps. fp32: layouts sum
// in different orders (~1e-6). bf16 against the 1-rank bf16 run: every layout rounds
// different partial results to bf16 (8 significant bits, unit 2^-8 ≈ 4e-3: TP
// all-reduces of activations, SP gathers, another GEMM split); the loss averages over
// thousands of such roundings, and the 8-rank layouts differ by 1e-5 to 3e-5. 1e-3 is a
// quarter of a bf16 unit. bf16 against the fp32 run: the rounding of every weight and
// activation too; seen: 1.6e-4, allowed: 5e-3 (slightly above one bf16 unit).
constexpr double kLossTolFp32 = 1e-5;
constexpr double kLossTolBf16 = 1e-3;
constexpr double kLossTolBf16VsFp32 = 5e-3;

// Rank r of a finished run against the single-process reference: it exited 0, printed
// every step, its losses agree within `tol` relative (default: fp32), and its memory
// matches the estimators' prediction — params/grads/optimizer exactly (ZeRO-1 shards are
// equal: the flat buffer is padded to a multiple of 128·dp on both sides; bf16: 16-bit
// params, fp32 main grads, fp32 master + m + v) and activations within 2%.
inline void expect_rank_matches(const std::vector<RankRun>& runs, size_t r, const std::vector<double>& ref, bool zero,
                         double tol = kLossTolFp32) {
    ASSERT_EQ(runs[r].exit_code, 0) << describe(runs);
    const std::vector<double> l = losses(runs[r]);
    ASSERT_EQ(l.size(), ref.size()) << "rank " << r << " printed " << l.size() << " step lines";
    for (size_t k = 0; k < l.size(); ++k)
        EXPECT_NEAR(l[k], ref[k], tol * std::abs(ref[k])) << "rank " << r << " step " << k + 1;
    const json mem = runs[r].of("step").back()["memory"];
    for (const char* cat : {"params", "grads", "optimizer"}) {
        const double cur = mem[cat]["current"].get<double>(), pred = mem[cat]["predicted"].get<double>();
        EXPECT_EQ(cur, pred) << "rank " << r << " " << cat << (zero ? " (ZeRO-1)" : "");
    }
    const double act = mem["activations"]["peak"].get<double>(), act_pred = mem["activations"]["predicted"].get<double>();
    EXPECT_NEAR(act, act_pred, 0.02 * act_pred) << "rank " << r << " activations";
}

}  // namespace engine_run
