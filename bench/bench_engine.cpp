// bench_engine.cpp — how fast ptd-engine trains on this CPU, against what the CPU can do.
// Prints figures only (no assertions; not part of the test suite):
//   1. the sgemm peak of this machine: cblas_sgemm (OpenBLAS, the library the engine links)
//      on square sizes and on the GEMM shapes of GPT-2 124M at the engine's token count,
//      with 1 and 2 OpenBLAS threads, best of several repetitions. The best shape per
//      thread count is that count's "peak";
//      Also the bf16 GEMM peak: the engine backend's GEMM op with bf16 operands and result
//      on the same shapes (this OpenBLAS has no cblas_sbgemm, so it is what bf16 gets);
//   2. ptd-engine on one rank, GPT-2 124M (preset gpt2-124m, seq_len 256, micro-batch 1,
//      synthetic data) in fp32 and in bf16 with --threads 1 and 2: median step time after
//      a warm-up step, tokens/s, achieved model GFLOP/s (the engine's PaLM-style count) and
//      MFU against the *measured* sgemm peak above (the target: ≥ 50 %), for bf16
//      also against the measured bf16 GEMM peak, and bf16 against fp32 (target: not
//      slower by more than 10 %);
//   3. communication overhead: the same model as 1 rank, 2-rank DP and 2-rank TP, one
//      thread per rank, with the per-rank model FLOPs per step held constant (weak
//      scaling: 1 sequence per rank per step), the comm share of the step from the
//      engine's time split and the step-time overhead against the 1-rank run.
//   4. with --backend cuda, the GPU instead (issue 14): the device's measured bf16 GEMM peak
//      (the engine's cuBLASLt layer, lt_matmul, on square 4096/8192 and on the GPT-2 shapes,
//      best of several repetitions timed with CUDA events), then ptd-engine --backend cuda
//      on one GPU training GPT-2 124M/350M/774M at T = 1024 in bf16 with the largest
//      power-of-two micro-batch whose predicted memory fits the device: tokens/s and MFU
//      against the measured peak and the GPU preset's nominal peak (989.4 TFLOP/s for an
//      H100 SXM), beside the target (≥ 50 % MFU on one H100, llm.c's CUDA trainer being the
//      anchor). Without a device it prints "no CUDA device: <the CUDA error>" and exits 0.
//      --backend cuda-sim runs the same code on the CUDA simulator with tiny shapes and
//      tiny-gpt: a smoke row CI can run, whose figures measure the simulator, not a GPU.
// Ranks are real ptd-engine processes (torchrun environment, loopback TCP) whose job files
// are written to a temp folder; every child is reaped, and a failed run prints its stderr
// tail and makes the bench exit non-zero.
//
//   5. with --predict, what `ptd estimate` (activation_profile = "ptd-engine": the engine's
//      own kernels timed from the GPU preset) predicts for section 4's jobs, beside the llm.c
//      anchor — a prediction, printed as one.
//   ./build/bin/bench_engine [--quick] [--engine PATH] [--backend cpu|cuda|cuda-sim[,...]]
//                            [--gpu-preset NAME] [--predict]
#include <cblas.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_gpu.h"
#include "ptd/engine/backend.h"
#include "ptd/engine/blas_core.h"
#include "ptd/model/estimate.h"
#include "ptd/rank_env.h"
#include "ptd/spec/job_spec.h"
#include "ptd/spec/presets.h"

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// ---- options -----------------------------------------------------------------------------

struct Options {
    bool quick = false;
    std::string engine;  // default: ptd-engine next to this binary
    // Sections to run, in this order: the CPU (parts 1-3), the CUDA device, the simulator.
    bool cpu = true, cuda = false, cuda_sim = false;
    std::string gpu_preset;  // --backend cuda: the job's GPU preset (default: from the device name)
    bool predict = false;    // --predict: section 5, the estimators' prediction of the GPU section
};

// What every engine run of parts 2 and 3 trains (the GPU section sets preset and gpu).
struct ModelShape {
    std::string preset = "gpt2-124m";
    std::string gpu = "cpu";  // the job's cluster.gpu preset
    int layers = 0;   // 0: the preset's
    int seq = 256;    // cut from the preset's 1024, like assets/jobs/gpt2-124m-local.toml
    int steps = 5;    // per run; the first is a warm-up and is discarded
    double deadline_s = 300;
    std::string describe() const {
        char buf[200];
        std::snprintf(buf, sizeof buf, "%s%s, seq_len %d, synthetic data, %d steps (step 1 discarded)", preset.c_str(),
                      layers == 0 ? "" : (" cut to " + std::to_string(layers) + " layers").c_str(), seq, steps);
        return buf;
    }
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Percent of the machine's CPU time not idle over `seconds` (from /proc/stat); −1 if unknown.
double busy_percent(double seconds) {
    auto sample = [](unsigned long long& idle, unsigned long long& total) {
        FILE* f = std::fopen("/proc/stat", "r");
        if (!f) return false;
        unsigned long long v[8] = {};
        const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                                  &v[5], &v[6], &v[7]);
        std::fclose(f);
        if (n < 5) return false;
        idle = v[3] + v[4];
        total = 0;
        for (unsigned long long x : v) total += x;
        return true;
    };
    unsigned long long i0, t0, i1, t1;
    if (!sample(i0, t0)) return -1;
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    if (!sample(i1, t1) || t1 == t0) return -1;
    return 100.0 * (1.0 - double(i1 - i0) / double(t1 - t0));
}

double load_average() {
    double l = -1;
    if (FILE* f = std::fopen("/proc/loadavg", "r")) {
        if (std::fscanf(f, "%lf", &l) != 1) l = -1;
        std::fclose(f);
    }
    return l;
}

// ---- 1. sgemm peak -------------------------------------------------------------------------

struct GemmShape {
    const char* name;
    bool ta, tb;
    int m, n, k;
};

// Best GFLOP/s of C = op(A)·op(B) (row-major, like the engine's backend) over at least
// `min_reps` calls and at least `min_s` seconds, after one untimed call.
double sgemm_gflops(const GemmShape& s, int min_reps, double min_s) {
    const size_t a_n = (size_t)s.m * s.k, b_n = (size_t)s.k * s.n, c_n = (size_t)s.m * s.n;
    std::vector<float> A(a_n), B(b_n), C(c_n);
    for (size_t i = 0; i < a_n; ++i) A[i] = (float)((i * 7 + 3) % 13) * 0.01f - 0.06f;
    for (size_t i = 0; i < b_n; ++i) B[i] = (float)((i * 5 + 1) % 11) * 0.01f - 0.05f;
    const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n, ldc = s.n;
    auto call = [&] {
        cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k,
                    1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), ldc);
    };
    call();
    double best = 1e30;
    const auto t_all = Clock::now();
    for (int r = 0; r < min_reps || seconds_since(t_all) < min_s; ++r) {
        const auto t0 = Clock::now();
        call();
        best = std::min(best, seconds_since(t0));
    }
    return 2.0 * s.m * s.n * s.k / best / 1e9;
}

// Best GFLOP/s of the engine backend's GEMM op with bf16 A, B and C (f32 accumulation):
// what a bf16 run's GEMMs get on this machine.
double bf16_gemm_gflops(ptd::engine::Backend& be, const GemmShape& s, int min_reps, double min_s) {
    using ptd::engine::DType;
    const size_t a = (size_t)s.m * s.k, b = (size_t)s.k * s.n, c = (size_t)s.m * s.n;
    std::vector<uint16_t> A(a), B(b), C(c);
    for (size_t i = 0; i < a; i++) A[i] = ptd::engine::f32_to_bf16_bits((float)((i * 7) % 13) * 0.01f);
    for (size_t i = 0; i < b; i++) B[i] = ptd::engine::f32_to_bf16_bits((float)((i * 5) % 11) * 0.01f);
    auto call = [&] { be.gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, A.data(), B.data(), 0.0f, C.data(), DType::bf16, DType::bf16); };
    call();
    double best = 0, spent = 0;
    for (int rep = 0; rep < min_reps || spent < min_s; ++rep) {
        const auto t0 = Clock::now();
        call();
        const double dt = seconds_since(t0);
        spent += dt;
        best = std::max(best, 2.0 * s.m * s.n * s.k / dt / 1e9);
    }
    return best;
}

// Returns the peak (max over shapes) GFLOP/s for 1 and 2 threads: peak[1], peak[2].
std::map<int, double> bench_sgemm(const Options& o, int tokens) {
    const int R = tokens;  // rows of every activation GEMM in the engine runs below
    std::vector<GemmShape> shapes = {
        {"square 1024 (NN)", false, false, 1024, 1024, 1024},
        {"square 2048 (NN)", false, false, 2048, 2048, 2048},
        {"QKV fwd x.W^T (NT)", false, true, R, 2304, 768},
        {"MLP up fwd x.W^T (NT)", false, true, R, 3072, 768},
        {"MLP down dx = g.W (NN)", false, false, R, 768, 3072},
        {"MLP up dW = g^T.x (TN)", true, false, 3072, 768, R},
        {"LM head fwd x.W^T (NT)", false, true, R, 50304, 768},
    };
    if (o.quick) shapes.erase(shapes.begin() + 1);  // drop 2048³
    const int min_reps = o.quick ? 2 : 3;
    const double min_s = o.quick ? 0.05 : 0.3;
    std::string version = OPENBLAS_VERSION;  // " OpenBLAS 0.3.21 "
    version.erase(0, version.find_first_not_of(' '));
    version.erase(version.find_last_not_of(' ') + 1);
    std::printf("1. sgemm peak — cblas_sgemm (%s, %s), row-major fp32, best of ≥ %d calls / ≥ %.2f s;\n"
                "   engine shapes use R = %d token rows (micro-batch × seq_len of part 2)\n"
                "   BLAS core type (the engine's choice): %s\n\n",
                version.c_str(), openblas_get_corename(), min_reps, min_s, R,
                ptd::engine::blas_choice().line().c_str());
    std::printf("   %-26s %6s %6s %6s %12s %12s\n", "shape", "M", "N", "K", "1 thr GF/s", "2 thr GF/s");
    std::map<int, double> peak{{1, 0.0}, {2, 0.0}};
    for (const GemmShape& s : shapes) {
        double g[3] = {0, 0, 0};
        for (int t : {1, 2}) {
            openblas_set_num_threads(t);
            g[t] = sgemm_gflops(s, min_reps, min_s);
            peak[t] = std::max(peak[t], g[t]);
        }
        std::printf("   %-26s %6d %6d %6d %12.1f %12.1f\n", s.name, s.m, s.n, s.k, g[1], g[2]);
        std::fflush(stdout);
    }
    openblas_set_num_threads(1);
    std::printf("   %-26s %20s %12.1f %12.1f   (2 thr / 1 thr = %.2f×)\n\n", "peak (max over shapes)", "", peak[1],
                peak[2], peak[2] / peak[1]);
    return peak;
}

// The bf16 GEMM peak per thread count (engine shapes only), as bench_sgemm prints it.
std::map<int, double> bench_bf16_gemm(const Options& o, int tokens) {
    const int R = tokens;
    const std::vector<GemmShape> shapes = {
        {"QKV fwd x.W^T (NT)", false, true, R, 2304, 768},
        {"MLP up fwd x.W^T (NT)", false, true, R, 3072, 768},
        {"MLP down dx = g.W (NN)", false, false, R, 768, 3072},
        {"LM head fwd x.W^T (NT)", false, true, R, 50304, 768},
    };
    const int min_reps = o.quick ? 2 : 3;
    const double min_s = o.quick ? 0.05 : 0.3;
    std::printf("   bf16 GEMM peak — the engine backend's GEMM op with bf16 A, B, C (f32 accumulation).\n"
                "   This OpenBLAS exports no cblas_sbgemm (nm -D libopenblas.so), so the backend widens bf16\n"
                "   operands to f32 panels for cblas_sgemm and rounds the result: bf16 ≤ sgemm by construction.\n\n");
    std::printf("   %-26s %6s %6s %6s %12s %12s\n", "shape (bf16)", "M", "N", "K", "1 thr GF/s", "2 thr GF/s");
    std::map<int, double> peak{{1, 0.0}, {2, 0.0}};
    for (const GemmShape& s : shapes) {
        double g[3] = {0, 0, 0};
        for (int t : {1, 2}) {
            // A backend per thread count: it sets both OpenBLAS's and OpenMP's thread counts
            // (the widening loops are OpenMP), as the engine does with --threads t.
            auto be = ptd::engine::make_cpu_backend(t);
            g[t] = bf16_gemm_gflops(*be, s, min_reps, min_s);
            peak[t] = std::max(peak[t], g[t]);
        }
        std::printf("   %-26s %6d %6d %6d %12.1f %12.1f\n", s.name, s.m, s.n, s.k, g[1], g[2]);
        std::fflush(stdout);
    }
    openblas_set_num_threads(1);
    std::printf("   %-26s %20s %12.1f %12.1f\n\n", "bf16 peak (max over shapes)", "", peak[1], peak[2]);
    return peak;
}

// ---- spawning engine ranks ------------------------------------------------------------------

volatile sig_atomic_t g_child_pgid = 0;  // the running ranks' process group, for Ctrl-C

void on_signal(int sig) {
    if (g_child_pgid > 0) kill(-(pid_t)g_child_pgid, SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

int free_port() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 29500;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    int port = 29500;
    if (bind(fd, (sockaddr*)&a, sizeof a) == 0) {
        socklen_t len = sizeof a;
        if (getsockname(fd, (sockaddr*)&a, &len) == 0) port = ntohs(a.sin_port);
    }
    close(fd);
    return port;
}

std::string slurp(const fs::path& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string tail_lines(const std::string& s, int n) {
    size_t pos = s.size();
    for (int i = 0; i <= n && pos > 0; ++i) {
        const size_t p = s.rfind('\n', pos - 1);
        if (p == std::string::npos) return s;
        if (i < n) pos = p;
        else return s.substr(p + 1);
    }
    return s.substr(pos);
}

struct Layout {
    const char* name;
    int tp = 1, dp = 1, threads = 1;
    int micro_batch = 1, global_batch = 1;
    const char* extra_env = nullptr;  // "NAME=value" added to every rank's environment
    const char* precision = "fp32";
    const char* backend = nullptr;  // ptd-engine --backend (nullptr: the engine's default)
    int world() const { return tp * dp; }
};

// Averages of the measured steps (step 1 dropped); per-step figures averaged over ranks.
struct RunFigures {
    double step_s = 0, tokens_per_s = 0, gflops_per_rank = 0, gflop_per_rank_step = 0;
    double compute = 0, tp_comm = 0, dp_comm = 0, pp_comm = 0, idle = 0, optimizer = 0, comm_share = 0;
    double wall_s = 0;
    double load = 0;  // 1-min load average when the run ended
    int measured_steps = 0;
    std::string failure;  // a failed run: every rank's stderr (to tell out-of-memory from other errors)
};

std::string job_toml(const ModelShape& m, const Layout& l) {
    std::ostringstream t;
    t << "# written by bench_engine: " << l.name << "\n"
      << "[model]\npreset = \"" << m.preset << "\"\nseq_len = " << m.seq << "\n";
    if (m.layers != 0) t << "layers = " << m.layers << "\n";
    t << "\n[cluster]\nnodes = 1\ngpus_per_node = " << l.world() << "\ngpu = \"" << m.gpu << "\"\n"
      << "\n[parallel]\ntp = " << l.tp << "\npp = 1\ndp = " << l.dp << "\n"
      << "\n[training]\nmicro_batch = " << l.micro_batch << "\nglobal_batch = " << l.global_batch
      << "\nprecision = \"" << l.precision << "\"\noptimizer = \"adamw\"\nlr = 6e-4\nsteps = " << m.steps
      << "\ndata = \"synthetic\"\n\n[launch]\nmode = \"local\"\n";
    return t.str();
}

// Runs the job on l.world() ranks; on failure prints what went wrong and returns false.
bool run_engine(const Options& o, const fs::path& tmp, const ModelShape& m, const Layout& l, RunFigures& fig) {
    static int counter = 0;
    const fs::path dir = tmp / ("run" + std::to_string(++counter));
    fs::create_directories(dir);
    const fs::path job = dir / "job.toml";
    {
        std::ofstream f(job);
        f << job_toml(m, l);
    }
    const int world = l.world();
    const int port = free_port();
    std::vector<pid_t> pids((size_t)world, -1);
    std::vector<int> status((size_t)world, 0);
    pid_t pgid = 0;
    const auto t0 = Clock::now();
    for (int r = 0; r < world; ++r) {
        const std::string out = (dir / ("rank" + std::to_string(r) + ".out")).string();
        const std::string err = (dir / ("rank" + std::to_string(r) + ".err")).string();
        const pid_t pid = fork();
        if (pid < 0) {
            std::perror("bench_engine: fork");
            break;
        }
        if (pid == 0) {
            setpgid(0, pgid);
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            const int fo = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            const int fe = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fo < 0 || fe < 0) _exit(126);
            dup2(fo, 1);
            dup2(fe, 2);
            const std::string thr = std::to_string(l.threads);
            ptd::set_single_host_rank_env(r, world, port);
            setenv("OMP_NUM_THREADS", thr.c_str(), 1);
            setenv("OPENBLAS_NUM_THREADS", thr.c_str(), 1);
            if (l.extra_env) putenv(const_cast<char*>(l.extra_env));
            std::vector<std::string> args = {o.engine, "--job", job.string(), "--steps", std::to_string(m.steps),
                                             "--threads", thr, "--run-dir", (dir / "run-dir").string()};
            if (l.backend) args.insert(args.end(), {"--backend", l.backend});
            std::vector<char*> argv;
            for (auto& a : args) argv.push_back(a.data());
            argv.push_back(nullptr);
            execv(argv[0], argv.data());
            std::fprintf(stderr, "bench_engine: cannot run %s: %s\n", argv[0], std::strerror(errno));
            _exit(127);
        }
        if (pgid == 0) {
            pgid = pid;
            g_child_pgid = pgid;
        }
        setpgid(pid, pgid);
        pids[(size_t)r] = pid;
    }
    // Reap every rank. Once one fails the others would only wait for it until their comm
    // timeout: give them a few seconds to notice, then kill the group.
    int alive = (int)std::count_if(pids.begin(), pids.end(), [](pid_t p) { return p > 0; });
    bool failed = alive < world, timed_out = false;
    Clock::time_point failed_at = t0;
    while (alive > 0) {
        for (int r = 0; r < world; ++r) {
            if (pids[(size_t)r] <= 0) continue;
            int st = 0;
            if (waitpid(pids[(size_t)r], &st, WNOHANG) == pids[(size_t)r]) {
                pids[(size_t)r] = 0;
                status[(size_t)r] = st;
                --alive;
                if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && !failed) {
                    failed = true;
                    failed_at = Clock::now();
                }
            }
        }
        if (alive == 0) break;
        const bool give_up = (failed && seconds_since(failed_at) > 5) || seconds_since(t0) > m.deadline_s;
        if (give_up) {
            timed_out = !failed;
            failed = true;
            kill(-pgid, SIGKILL);
            for (int r = 0; r < world; ++r)
                if (pids[(size_t)r] > 0) {
                    int st = 0;
                    waitpid(pids[(size_t)r], &st, 0);
                    status[(size_t)r] = st;
                    pids[(size_t)r] = 0;
                }
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    g_child_pgid = 0;
    fig.wall_s = seconds_since(t0);
    fig.load = load_average();

    // step events per rank
    std::vector<std::map<int, json>> steps((size_t)world);
    for (int r = 0; r < world; ++r) {
        std::istringstream ls(slurp(dir / ("rank" + std::to_string(r) + ".out")));
        for (std::string line; std::getline(ls, line);) {
            json j = json::parse(line, nullptr, false);
            if (!j.is_discarded() && j.value("event", "") == "step") steps[(size_t)r][j.value("step", 0)] = j;
        }
    }
    if (!failed)
        for (int r = 0; r < world; ++r)
            if ((int)steps[(size_t)r].size() < m.steps) failed = true;
    if (failed) {
        std::printf("\n   FAILED: %s (%d rank(s), job %s)%s\n", l.name, world, job.string().c_str(),
                    timed_out ? " — did not finish within the deadline, killed" : "");
        for (int r = 0; r < world; ++r) {
            const int st = status[(size_t)r];
            std::printf("   rank %d: %s %d, %zu step line(s); stderr tail:\n", r,
                        WIFSIGNALED(st) ? "killed by signal" : "exit code", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
                        steps[(size_t)r].size());
            const std::string err = slurp(dir / ("rank" + std::to_string(r) + ".err"));
            fig.failure += err;
            std::istringstream es(tail_lines(err, 12));
            for (std::string line; std::getline(es, line);) std::printf("     | %s\n", line.c_str());
        }
        return false;
    }

    std::vector<double> step, tps, gfl, gfl_step, comp, tpc, dpc, ppc, idle, opt, share;
    for (int k = 2; k <= m.steps; ++k) {
        double f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int r = 0; r < world; ++r) {
            const json& e = steps[(size_t)r].at(k);
            const json& t = e.at("time");
            f[0] += t.value("step", 0.0);
            f[1] += t.value("compute", 0.0);
            f[2] += t.value("tp_comm", 0.0);
            f[3] += t.value("dp_comm", 0.0);
            f[4] += t.value("pp_comm", 0.0);
            f[5] += t.value("pipeline_idle", 0.0);
            f[6] += t.value("optimizer", 0.0);
            f[7] += e.value("tflops", 0.0) * 1000.0;
        }
        for (double& x : f) x /= world;
        const json& e0 = steps[0].at(k);
        step.push_back(f[0]);
        comp.push_back(f[1]);
        tpc.push_back(f[2]);
        dpc.push_back(f[3]);
        ppc.push_back(f[4]);
        idle.push_back(f[5]);
        opt.push_back(f[6]);
        gfl.push_back(f[7]);
        gfl_step.push_back(f[7] * f[0]);
        tps.push_back(e0.value("tokens_per_s", 0.0));
        share.push_back(f[0] > 0 ? (f[2] + f[3] + f[4]) / f[0] : 0.0);
    }
    fig.measured_steps = (int)step.size();
    fig.step_s = median(step);
    fig.tokens_per_s = median(tps);
    fig.gflops_per_rank = median(gfl);
    fig.gflop_per_rank_step = median(gfl_step);
    fig.compute = median(comp);
    fig.tp_comm = median(tpc);
    fig.dp_comm = median(dpc);
    fig.pp_comm = median(ppc);
    fig.idle = median(idle);
    fig.optimizer = median(opt);
    fig.comm_share = median(share);
    return true;
}

// ---- 2. single-process throughput --------------------------------------------------------

bool bench_single(const Options& o, const fs::path& tmp, const ModelShape& m, const std::map<int, double>& peak,
                  const std::map<int, double>& bf16_peak, RunFigures& one_thread) {
    std::printf("2. ptd-engine, 1 rank — %s, micro-batch 1 = %d tokens/step\n\n", m.describe().c_str(), m.seq);
    std::printf("   %-9s %8s %9s %10s %9s %9s %11s %9s %7s %6s\n", "threads", "step s", "tok/s", "GFLOP/s", "compute",
                "optim.", "sgemm peak", "MFU", "wall s", "load");
    // The third row is the second with libgomp's idle threads sleeping instead of spinning:
    // with the default policy the OpenMP worker spins while OpenBLAS's own worker runs the
    // GEMMs, and three busy threads share two cores.
    const std::vector<Layout> rows = {
        {"1", 1, 1, 1},
        {"2", 1, 1, 2},
        {"2 (p)", 1, 1, 2, 1, 1, "OMP_WAIT_POLICY=passive"},
        {"1 bf16", 1, 1, 1, 1, 1, nullptr, "bf16"},
        {"2 bf16", 1, 1, 2, 1, 1, nullptr, "bf16"},
    };
    bool ok = true;
    std::string verdict;
    std::map<std::string, RunFigures> by_name;
    for (const Layout& l : rows) {
        RunFigures f;
        if (!run_engine(o, tmp, m, l, f)) {
            ok = false;
            continue;
        }
        by_name[l.name] = f;
        if (l.threads == 1 && std::string(l.precision) == "fp32") one_thread = f;
        const double mfu = f.gflops_per_rank / peak.at(l.threads);
        std::printf("   %-9s %8.3f %9.1f %10.1f %8.1f%% %8.1f%% %11.1f %8.1f%% %7.1f %6.2f\n", l.name, f.step_s,
                    f.tokens_per_s, f.gflops_per_rank, 100 * f.compute / f.step_s, 100 * f.optimizer / f.step_s,
                    peak.at(l.threads), 100 * mfu, f.wall_s, f.load);
        std::fflush(stdout);
        char buf[80];
        std::snprintf(buf, sizeof buf, "%sthreads %s: %.0f%% %s", verdict.empty() ? "" : "; ", l.name, 100 * mfu,
                      mfu >= 0.5 ? "met" : "NOT met");
        verdict += buf;
    }
    std::printf("\n   MFU target ≥ 50%% of the measured sgemm peak — %s.\n", verdict.c_str());
    if (by_name.count("1")) {
        const double mfu1 = by_name["1"].gflops_per_rank / peak.at(1);
        std::printf("   1-thread fp32 MFU against the sgemm peak of the %s kernels the engine runs: %.1f%% — target "
                    "≥ 65%%: %s\n", ptd::engine::blas_choice().core.c_str(), 100 * mfu1, mfu1 >= 0.65 ? "met" : "NOT met");
    }
    // bf16 against fp32 at the same thread count, and against the bf16 GEMM peak.
    for (int t : {1, 2}) {
        const std::string a = std::to_string(t), b = a + " bf16";
        if (!by_name.count(a) || !by_name.count(b)) continue;
        const RunFigures &f32 = by_name[a], &f16 = by_name[b];
        const double ratio = f16.tokens_per_s / f32.tokens_per_s;
        std::printf("   bf16, %d thread%s: %.1f tok/s = %.1f%% of fp32 (%.1f tok/s) — target ≥ 90%%: %s; MFU %.1f%% of the\n"
                    "      sgemm peak, %.1f%% of the measured bf16 GEMM peak (%.1f GFLOP/s)\n",
                    t, t > 1 ? "s" : "", f16.tokens_per_s, 100 * ratio, f32.tokens_per_s, ratio >= 0.9 ? "met" : "NOT met",
                    100 * f16.gflops_per_rank / peak.at(t), 100 * f16.gflops_per_rank / bf16_peak.at(t), bf16_peak.at(t));
    }
    std::printf("   GFLOP/s: the engine's achieved model FLOP/s (6·params + attention with the full s² count, per\n"
                "   token); MFU: that over the measured sgemm peak for the same thread count. compute / optim.:\n"
                "   share of the step in forward+backward and in the AdamW update; wall s: the whole run with\n"
                "   start-up; load: 1-min load average as it ended (> 2 on 2 cores: contended).\n"
                "   (p): the same run with OMP_WAIT_POLICY=passive in the engine's environment.\n"
                "   bf16: training.precision = \"bf16\" (bf16 weights/activations, fp32 main grads, master weights\n"
                "   and Adam). Its MFU counts the same model FLOPs; what limits it on this CPU: no bf16 GEMM in\n"
                "   OpenBLAS, so every bf16 operand is widened to f32 before sgemm and every 16-bit result rounded\n"
                "   back, extra memory passes that fp32 does not make (see docs/performance.md).\n\n");
    return ok;
}

// ---- 3. communication overhead -----------------------------------------------------------

bool bench_comm(const Options& o, const fs::path& tmp, const ModelShape& m, const RunFigures* base_from_part2) {
    std::printf("3. Communication overhead — %s, fp32, 1 thread per rank, loopback TCP (Gloo).\n"
                "   Held constant: the model FLOPs per rank per step (one sequence of %d tokens each): 1 rank trains\n"
                "   1 sequence/step; DP 2 trains 2 (1 per replica); TP 2 trains 2 as one micro-batch of 2 split over\n"
                "   2 ranks by heads/columns. Overhead = step time / 1-rank step time − 1.\n\n",
                m.describe().c_str(), m.seq);
    std::vector<Layout> layouts = {
        {"1 rank", 1, 1, 1, 1, 1},
        {"DP 2", 1, 2, 1, 1, 2},
        {"TP 2", 2, 1, 1, 2, 2},
    };
    std::printf("   %-7s %7s %10s %8s %8s %8s %8s %8s %8s %8s %9s %9s %6s\n", "layout", "tokens", "GF/rank", "step s",
                "compute", "tp_comm", "dp_comm", "pp+idle", "optim.", "comm %", "overhead", "tok/s", "load");
    bool ok = true;
    double base = 0;
    for (const Layout& l : layouts) {
        RunFigures f;
        const bool reuse = l.world() == 1 && base_from_part2;
        if (reuse) f = *base_from_part2;
        else if (!run_engine(o, tmp, m, l, f)) {
            ok = false;
            continue;
        }
        if (l.world() == 1) base = f.step_s;
        char over[32] = "—";
        if (l.world() > 1 && base > 0) std::snprintf(over, sizeof over, "%+.1f%%", 100 * (f.step_s / base - 1));
        std::printf("   %-7s %7d %10.1f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %7.1f%% %9s %9.1f %6.2f%s\n", l.name,
                    l.global_batch * m.seq, f.gflop_per_rank_step, f.step_s, f.compute, f.tp_comm, f.dp_comm,
                    f.pp_comm + f.idle, f.optimizer, 100 * f.comm_share, over, f.tokens_per_s, f.load,
                    reuse ? "  (the part 2 run)" : "");
        std::fflush(stdout);
    }
    std::printf("\n   tokens: per step, all ranks; GF/rank: model GFLOP per rank per step; times in seconds (median\n"
                "   step, averaged over ranks); comm %%: (tp_comm + dp_comm + pp_comm) / step; tok/s: whole job.\n\n");
    return ok;
}

// ---- 4. the CUDA device (--backend cuda) and its simulator smoke row (--backend cuda-sim) ---

// One build's device side (bench_gpu.h), picked at run time.
struct DeviceApi {
    bench_gpu::DeviceInfo (*open)();
    bench_gpu::GemmTiming (*time_gemm)(const bench_gpu::GemmCase&, const bench_gpu::TimingPlan&);
    void (*close)();
};

// What the section measures: the GPU figures the issue asks for, or the same code path on
// the simulator at sizes it finishes in seconds.
struct DeviceSection {
    bool sim = false;
    const char* backend = "cuda";             // ptd-engine --backend
    DeviceApi api{};
    std::vector<std::string> models;          // presets, trained one after another
    int seq = 1024;
    std::vector<int64_t> squares;             // square GEMM sizes for the peak
    int max_micro_batch = 64;
    int64_t tokens_per_step = 1 << 19;        // micro-batches accumulate to about this (llm.c's 0.5M)
    int steps = 5;
    double deadline_s = 600;
    bench_gpu::TimingPlan plan;
    // FLOP/s unit of the tables: the simulator's figures are GFLOP/s at best.
    const char* unit = "TFLOP/s";
    double unit_scale = 1e12;
};

// The GPU preset of a device, from the name the CUDA runtime reports ("" when none fits).
std::string gpu_preset_for_device(std::string name) {
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return (char)std::tolower(c); });
    auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
    if (has("h100")) return has("pcie") ? "h100-pcie" : "h100-sxm";
    if (has("h200")) return "h200";
    if (has("b200")) return "b200";
    if (has("a100")) return has("40gb") ? "a100-40gb" : "a100-80gb";
    if (has("l40s")) return "l40s";
    if (has("4090")) return "rtx4090";
    return "";
}

// The job run_engine writes for this model and layout, as the engine loads it, with the
// engine's activation profile (what the trainer predicts its memory with).
ptd::Result<ptd::JobSpec> load_bench_job(const ptd::PresetCatalog& presets, const ModelShape& m, const Layout& l) {
    auto job = ptd::load_job_text(job_toml(m, l), "bench_engine job (" + m.preset + ")", presets);
    if (job) job->estimate.activation_profile = ptd::ActivationProfile::ptd_engine;
    return job;
}

// Device bytes the estimators predict for the job's rank: its worst stage's total (model
// states, activations, temporaries, CUDA context, NCCL buffers, fragmentation).
double predicted_device_bytes(const ptd::JobSpec& job) {
    const ptd::Estimate est = ptd::estimate_job(job);
    return est.stages[(size_t)est.worst_stage].mem.total();
}

struct ModelPlan {
    std::string preset;
    ptd::ModelSpec spec;
    int64_t vocab_padded = 0;
    int micro_batch = 0;  // 0: not even 1 fits
    double predicted_bytes = 0;
};

// Layout of one engine run of the section: 1 rank, bf16, micro-batches accumulated to about
// tokens_per_step tokens.
Layout device_layout(const DeviceSection& sec, const std::string& name_storage, int micro_batch) {
    const int64_t per_micro = (int64_t)micro_batch * sec.seq;
    const int accum = (int)std::max<int64_t>(1, (sec.tokens_per_step + per_micro - 1) / per_micro);
    Layout l{name_storage.c_str(), 1, 1, 1, micro_batch, micro_batch * accum};
    l.precision = "bf16";
    l.backend = sec.backend;
    return l;
}

// `text` padded with spaces to `width` columns: printf's %-*s counts bytes, and the shape
// names hold multi-byte characters (ᵀ, ·).
std::string pad(const std::string& text, size_t width) {
    size_t cols = 0;
    for (unsigned char c : text) cols += (c & 0xC0) != 0x80;
    return text + std::string(width > cols ? width - cols : 0, ' ');
}

std::string gib(double bytes) {
    char b[32];
    if (bytes < 1024.0 * 1024.0 * 1024.0) std::snprintf(b, sizeof b, "%.1f MiB", bytes / (1024.0 * 1024.0));
    else std::snprintf(b, sizeof b, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    return b;
}

bool bench_device(const Options& o, const fs::path& tmp, const DeviceSection& sec) {
    const char* what = sec.sim ? "the CUDA simulator (--backend cuda-sim)" : "the CUDA device (--backend cuda)";
    std::printf("4. ptd-engine on %s\n", what);
    if (sec.sim)
        std::printf("   SIMULATOR FIGURES — a smoke row that runs the GPU section's code on the CPU (kernels as fibers,\n"
                    "   GEMMs in the host cuBLASLt reference). They measure the simulator, never a GPU; no MFU target\n"
                    "   applies.\n");
    if (!sec.api.open) {
        std::printf("   no CUDA device: this bench_engine was built without CUDA (nvcc was not found at configure time,\n"
                    "   or -DENABLE_CUDA=OFF); the GPU figures were not measured.\n\n");
        return true;
    }
    const bench_gpu::DeviceInfo dev = sec.api.open();
    if (!dev.error.empty()) {
        std::printf("   no CUDA device: %s\n   (the GPU section is skipped; its figures were not measured)\n\n",
                    dev.error.c_str());
        return true;
    }
    auto presets = ptd::load_presets();
    if (!presets) {
        std::printf("   FAILED: cannot load the presets: %s\n", presets.error().str().c_str());
        sec.api.close();
        return false;
    }
    std::string gpu = "cpu";  // the simulator's jobs run on the cpu preset, as the EngineCudaSim tests
    std::string gpu_note;
    if (!sec.sim) {
        gpu = o.gpu_preset.empty() ? gpu_preset_for_device(dev.name) : o.gpu_preset;
        if (gpu.empty()) {
            gpu = "h100-sxm";
            gpu_note = " (the device is not among the GPU presets: the jobs name h100-sxm, and MFU against a nominal "
                       "peak is not shown; pass --gpu-preset NAME)";
        } else if (!presets->find_gpu(gpu)) {
            std::printf("   FAILED: --gpu-preset: got \"%s\"; allowed: the [sections] of assets/presets/gpus.toml\n",
                        gpu.c_str());
            sec.api.close();
            return false;
        }
    }
    const ptd::GpuSpec* gpu_spec = presets->find_gpu(gpu);
    const double nominal = (!sec.sim && gpu_note.empty() && gpu_spec) ? gpu_spec->bf16_tflops : 0.0;
    std::printf("   device: %s; %s free of %s at start (this process's context included)\n", dev.line.c_str(),
                gib((double)dev.free_bytes).c_str(), gib((double)dev.total_bytes).c_str());
    if (!sec.sim) {
        char peak_text[64] = "";
        if (nominal > 0) std::snprintf(peak_text, sizeof peak_text, ", nominal dense bf16 peak %.1f TFLOP/s", nominal);
        std::printf("   GPU preset of the jobs: %s%s%s\n", gpu.c_str(), peak_text, gpu_note.c_str());
    }

    // Per model: the largest power-of-two micro-batch (≤ max) whose predicted memory fits.
    std::vector<ModelPlan> plans;
    for (const std::string& preset : sec.models) {
        ModelPlan mp;
        mp.preset = preset;
        ModelShape m;
        m.preset = preset;
        m.gpu = gpu;
        m.seq = sec.seq;
        m.steps = sec.steps;
        for (int mb = 1; mb <= sec.max_micro_batch; mb *= 2) {
            const std::string name = preset;
            auto job = load_bench_job(*presets, m, device_layout(sec, name, mb));
            if (!job) {
                std::printf("   FAILED: the bench's job for %s does not load:\n%s\n", preset.c_str(), job.error().str().c_str());
                sec.api.close();
                return false;
            }
            mp.spec = job->model;
            mp.vocab_padded = ptd::padded_vocab(job->model.vocab, job->estimate.vocab_pad, 1);
            const double bytes = predicted_device_bytes(*job);
            if (bytes > (double)dev.free_bytes) break;
            mp.micro_batch = mb;
            mp.predicted_bytes = bytes;
        }
        plans.push_back(mp);
    }

    // The bf16 GEMM peak: squares, then each model's GEMMs at its micro-batch's token rows.
    char calls[64] = "one call";
    if (sec.plan.rep_ms > 0) std::snprintf(calls, sizeof calls, "as many calls as fill ~%.0f ms", sec.plan.rep_ms);
    std::printf("\n   bf16 GEMM peak — lt_matmul (ptd-engine's cuBLASLt layer: compute f32, its cached heuristic\n"
                "   algorithm), bf16 A and B of random values; C bf16, or f32 += for a weight gradient. Best of %d\n"
                "   repetitions of %s, timed with CUDA events%s.\n\n",
                sec.plan.reps, calls, sec.sim ? " (the simulator: host time)" : "");
    std::printf("   %s %6s %6s %6s %6s %10s %10s\n", pad("shape (row-major C = op(A)·op(B))", 34).c_str(), "M", "N", "K",
                "batch", "ms/call", sec.unit);
    double peak = 0;
    std::string peak_name;
    bool ok = true;
    auto row = [&](const std::string& name, const bench_gpu::GemmCase& g) {
        const bench_gpu::GemmTiming t = sec.api.time_gemm(g, sec.plan);
        if (!t.error.empty()) {
            std::printf("   %s FAILED: %s\n", pad(name, 34).c_str(), t.error.c_str());
            ok = false;
            return;
        }
        const double tf = g.flop() / (t.best_ms * 1e-3) / sec.unit_scale;
        std::printf("   %s %6lld %6lld %6lld %6lld %10.4f %10.1f\n", pad(name, 34).c_str(), (long long)g.m,
                    (long long)g.n, (long long)g.k, (long long)g.batch, t.best_ms, tf);
        std::fflush(stdout);
        if (tf > peak) peak = tf, peak_name = name;
    };
    for (int64_t n : sec.squares) row("square " + std::to_string(n) + " (NN)", {false, false, n, n, n});
    for (const ModelPlan& mp : plans) {
        if (mp.micro_batch == 0) continue;
        const int64_t R = (int64_t)mp.micro_batch * sec.seq, C = mp.spec.hidden, F = mp.spec.ffn_hidden,
                      H = mp.spec.heads, hd = mp.spec.head_dim(), Vp = mp.vocab_padded;
        std::printf("   %s, micro-batch %d (predicted device memory %s): R = %lld token rows\n", mp.preset.c_str(),
                    mp.micro_batch, gib(mp.predicted_bytes).c_str(), (long long)R);
        row("  QKV fwd x·Wᵀ (NT)", {false, true, R, 3 * C, C});
        row("  attn proj fwd (NT)", {false, true, R, C, C});
        row("  attn scores Q·Kᵀ per head (NT)", {false, true, sec.seq, sec.seq, hd, (int64_t)mp.micro_batch * H});
        row("  MLP up fwd (NT)", {false, true, R, F, C});
        row("  MLP down fwd (NT)", {false, true, R, C, F});
        row("  MLP up dW += gᵀ·x (TN, f32)", {true, false, F, C, R, 1, true});
        row("  LM head fwd (NT)", {false, true, R, Vp, C});
    }
    sec.api.close();
    if (peak <= 0) {
        std::printf("\n   FAILED: no GEMM ran; the engine runs are skipped.\n\n");
        return false;
    }
    std::printf("   %s %41s %10.1f", pad("measured peak (max over shapes)", 34).c_str(), "", peak);
    if (nominal > 0) std::printf("  = %.1f%% of the nominal %.1f (%s)", 100 * peak / nominal, nominal, gpu.c_str());
    std::printf("\n   (best: %s)\n\n", peak_name.substr(peak_name.find_first_not_of(' ')).c_str());

    // The engine on each model.
    std::printf("   ptd-engine --backend %s, 1 rank, bf16, seq_len %d, synthetic data, %d steps (step 1 discarded);\n"
                "   micro-batch: the largest power of two ≤ %d whose predicted device memory (the estimators' total:\n"
                "   model states, activations, temporaries, CUDA context, NCCL, fragmentation) fits the free memory\n"
                "   above (halved on an out-of-memory failure); micro-batches accumulate to ≥ %lld tokens per step.\n\n",
                sec.backend, sec.seq, sec.steps, sec.max_micro_batch, (long long)sec.tokens_per_step);
    std::printf("   %-11s %4s %5s %9s %8s %10s %9s %8s %8s %10s %10s\n", "model", "mb", "accum", "tok/step", "step s",
                "tok/s", sec.unit, "compute", "optim.", "MFU meas.", "MFU nom.");
    std::string verdict;
    for (ModelPlan& mp : plans) {
        if (mp.micro_batch == 0) {
            std::printf("   %-11s does not fit: even micro-batch 1 is predicted above the free memory\n", mp.preset.c_str());
            ok = false;
            continue;
        }
        ModelShape m;
        m.preset = mp.preset;
        m.gpu = gpu;
        m.seq = sec.seq;
        m.steps = sec.steps;
        m.deadline_s = sec.deadline_s;
        RunFigures f;
        Layout l;
        bool ran = false;
        for (int mb = mp.micro_batch; mb >= 1; mb /= 2) {
            l = device_layout(sec, mp.preset, mb);
            f = RunFigures{};
            if (run_engine(o, tmp, m, l, f)) {
                ran = true;
                break;
            }
            std::string err = f.failure;
            std::transform(err.begin(), err.end(), err.begin(), [](unsigned char c) { return (char)std::tolower(c); });
            // The CUDA backend says "out of device memory allocating ...: ... out of memory".
            const bool oom = err.find("out of memory") != std::string::npos ||
                             err.find("out of device memory") != std::string::npos;
            if (!oom || mb == 1) break;
            std::printf("   %s: out of device memory at micro-batch %d; trying %d\n", mp.preset.c_str(), mb, mb / 2);
        }
        if (!ran) {
            ok = false;
            continue;
        }
        const double tflops = f.gflops_per_rank / 1000.0;  // the tables' unit: tflops · 1e12 / unit_scale
        char nom[32] = "—";
        if (nominal > 0) std::snprintf(nom, sizeof nom, "%.1f%%", 100 * tflops / nominal);
        std::printf("   %-11s %4d %5d %9d %8.3f %10.0f %9.1f %7.1f%% %7.1f%% %9.1f%% %10s\n", mp.preset.c_str(),
                    l.micro_batch, l.global_batch / l.micro_batch, l.global_batch * sec.seq, f.step_s, f.tokens_per_s,
                    tflops * 1e12 / sec.unit_scale, 100 * f.compute / f.step_s, 100 * f.optimizer / f.step_s,
                    100 * tflops * 1e12 / sec.unit_scale / peak, nom);
        std::fflush(stdout);
        if (!sec.sim && nominal > 0) {
            char b[96];
            std::snprintf(b, sizeof b, "%s%s %.1f%% %s", verdict.empty() ? "" : "; ", mp.preset.c_str(),
                          100 * tflops / nominal, tflops / nominal >= 0.5 ? "met" : "NOT met");
            verdict += b;
        }
    }
    std::printf("\n   %s: the engine's model FLOPs (6·params + attention with the full s² count, per token) per\n"
                "   second; MFU meas.: over the measured GEMM peak above; MFU nom.: over the GPU preset's nominal\n"
                "   dense bf16 peak (Megatron's, torchtitan's and llm.c's convention).\n", sec.unit);
    if (sec.sim)
        std::printf("   Simulator figures: they show that the GPU section runs end to end, not how fast a GPU is.\n\n");
    else if (!verdict.empty())
        std::printf("   Target ≥ 50%% MFU (nominal) on one H100 — llm.c's CUDA trainer is the anchor: %s.\n\n",
                    verdict.c_str());
    else
        std::printf("   Target ≥ 50%% MFU (nominal) on one H100: not judged (no nominal peak for this device).\n\n");
    return ok;
}

// ---- 5. --predict: what `ptd estimate` predicts for the GPU section (issue 30 point 8) ----
// The GPU section's jobs (GPT-2 124M/350M/774M, T = 1024, bf16, one GPU, the largest
// power-of-two micro-batch ≤ 64 whose predicted memory fits the preset's memory, micro-batches
// accumulated to 2^19 tokens) on the GPU preset (h100-sxm unless --gpu-preset), estimated with
// activation_profile = "ptd-engine": the engine's own kernels op by op from the preset
// (estimators/src/model/engine_time.cpp), with flash attention and with the materialised
// probabilities. Beside it the llm.c anchor: its GPT-2 (124M) replication trained 10B tokens
// in 45 minutes on one 8×H100 node (karpathy/llm.c discussion #481, as the NanoGPT speedrun's
// README quotes it: github.com/KellerJordan/modded-nanogpt), i.e. 10e9 / (45·60) / 8 ≈ 463k
// tokens/s per H100, shown as MFU with the estimators' FLOPs per token.
bool bench_predict(const Options& o) {
    const std::string gpu = o.gpu_preset.empty() ? "h100-sxm" : o.gpu_preset;
    std::printf("5. predicted: ptd estimate (activation_profile = \"ptd-engine\") on one %s — NOT a measurement\n", gpu.c_str());
    auto presets = ptd::load_presets();
    if (!presets) {
        std::printf("   FAILED: cannot load the presets: %s\n", presets.error().str().c_str());
        return false;
    }
    const ptd::GpuSpec* spec = presets->find_gpu(gpu);
    if (!spec) {
        std::printf("   FAILED: no GPU preset \"%s\"\n", gpu.c_str());
        return false;
    }
    const double capacity = spec->memory_gib * 1024.0 * 1024.0 * 1024.0;
    std::printf("   the engine's kernels op by op from the preset (bf16 peak %.1f TFLOP/s, HBM %.0f GB/s): GEMMs at the\n"
                "   generation's calibrated GEMM efficiency, flash attention at its calibrated rate, element-wise\n"
                "   kernels at HBM bandwidth; T = 1024, bf16, micro-batches accumulated to 2^19 tokens\n\n",
                spec->bf16_tflops, spec->hbm_gbps);
    std::printf("   %-10s %-9s %5s %10s %9s %12s %6s\n", "model", "attention", "mb", "memory", "step s", "tok/s", "MFU");
    const double llmc_tokens_per_s = 10e9 / (45.0 * 60.0) / 8.0;
    double llmc_mfu = 0;
    for (const char* preset : {"gpt2-124m", "gpt2-350m", "gpt2-774m"})
        for (bool flash : {true, false}) {
            ModelShape m;
            m.preset = preset, m.gpu = gpu, m.seq = 1024;
            ptd::Estimate best;
            int best_mb = 0;
            double best_bytes = 0;
            for (int mb = 1; mb <= 64; mb *= 2) {
                const int accum = std::max(1, (1 << 19) / (mb * m.seq));
                Layout l{preset, 1, 1, 1, mb, mb * accum};
                l.precision = "bf16";
                auto job = load_bench_job(*presets, m, l);
                if (!job) {
                    std::printf("   FAILED: the job for %s does not load:\n%s\n", preset, job.error().str().c_str());
                    return false;
                }
                job->training.flash_attention = flash;
                const ptd::Estimate est = ptd::estimate_job(*job);
                const double bytes = est.stages[(size_t)est.worst_stage].mem.total();
                if (bytes > capacity) break;
                best = est, best_mb = mb, best_bytes = bytes;
            }
            if (best_mb == 0) {
                std::printf("   %-10s %-9s does not fit\n", preset, flash ? "flash" : "probs");
                continue;
            }
            std::printf("   %-10s %-9s %5d %10s %9.3f %12.0f %5.1f%%\n", preset, flash ? "flash" : "probs", best_mb,
                        gib(best_bytes).c_str(), best.step_s, best.tokens_per_s, 100 * best.mfu);
            if (std::string(preset) == "gpt2-124m" && flash && best.tokens_per_s > 0)
                llmc_mfu = best.mfu / best.tokens_per_s * llmc_tokens_per_s;
        }
    std::printf("\n   llm.c anchor (GPT-2 124M: 10B tokens in 45 min on 8×H100, llm.c discussion #481 as the NanoGPT\n"
                "   speedrun README quotes it): %.0f tok/s per GPU = %.1f%% MFU by the same FLOP count. Target for\n"
                "   GPT-2 350M at T = 1024 on one H100: ≥ 45%% MFU.\n\n",
                llmc_tokens_per_s, 100 * llmc_mfu);
    return true;
}

std::string default_engine_path() {
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    return ec ? std::string("ptd-engine") : (self.parent_path() / "ptd-engine").string();
}

}  // namespace

int main(int argc, char** argv) {
    // The same kernels as the engine: its choice of OpenBLAS core type, made here once, is
    // inherited by every engine rank this bench starts (PTD_BLAS_CORETYPE marks it ours).
    if (const ptd::engine::BlasStep blas = ptd::engine::choose_blas_core(); !blas.error.empty()) {
        std::fprintf(stderr, "bench_engine: error: %s\n", blas.error.c_str());
        return 1;
    } else if (blas.reexec) {
        execv("/proc/self/exe", argv);  // returns only on failure: then measure as we are
    }
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quick") o.quick = true;
        else if (a == "--engine" && i + 1 < argc) o.engine = argv[++i];
        else if (a.rfind("--engine=", 0) == 0) o.engine = a.substr(9);
        else if (a == "--backend" || a.rfind("--backend=", 0) == 0) {
            std::string list = a == "--backend" ? (i + 1 < argc ? argv[++i] : "") : a.substr(10);
            o.cpu = o.cuda = o.cuda_sim = false;
            std::stringstream ls(list);
            bool any = false;
            for (std::string item; std::getline(ls, item, ',');) {
                any = true;
                if (item == "cpu") o.cpu = true;
                else if (item == "cuda") o.cuda = true;
                else if (item == "cuda-sim") o.cuda_sim = true;
                else {
                    std::fprintf(stderr, "bench_engine: --backend: got \"%s\"; allowed: cpu, cuda, cuda-sim, or a "
                                         "comma-separated list of them\n", item.c_str());
                    return 2;
                }
            }
            if (!any) {
                std::fprintf(stderr, "bench_engine: --backend: no value; allowed: cpu, cuda, cuda-sim, or a "
                                     "comma-separated list of them\n");
                return 2;
            }
        } else if (a == "--gpu-preset" && i + 1 < argc) o.gpu_preset = argv[++i];
        else if (a.rfind("--gpu-preset=", 0) == 0) o.gpu_preset = a.substr(13);
        else if (a == "--predict") o.predict = true;
        else if (a == "--help" || a == "-h") {
            std::printf("usage: bench_engine [--quick] [--engine PATH] [--backend LIST] [--gpu-preset NAME] [--predict]\n"
                        "  --quick            fewer steps and smaller models (a smoke run)\n"
                        "  --engine PATH      the ptd-engine to measure (default: next to this program)\n"
                        "  --backend LIST     sections to run, comma-separated (default: cpu):\n"
                        "                       cpu       parts 1-3: this CPU's sgemm peak, ptd-engine on the CPU\n"
                        "                       cuda      the GPU: measured bf16 GEMM peak, GPT-2 124M/350M/774M\n"
                        "                                 at T = 1024, tokens/s and MFU (no device: says so, exit 0)\n"
                        "                       cuda-sim  the GPU section's code on the CUDA simulator, tiny sizes\n"
                        "                                 (simulator figures, never GPU figures)\n"
                        "  --gpu-preset NAME  with cuda: the GPU preset of the jobs and of the nominal peak\n"
                        "                     (default: from the device's name, e.g. h100-sxm)\n"
                        "  --predict          also print what `ptd estimate` predicts for the GPU section's jobs on\n"
                        "                     the GPU preset (h100-sxm unless --gpu-preset), beside the llm.c anchor\n");
            return 0;
        } else {
            std::fprintf(stderr, "bench_engine: unknown argument '%s'; run with --help\n", a.c_str());
            return 2;
        }
    }
    if (!o.gpu_preset.empty()) {
        // Checked up front, so a typo fails before any run (and also where no device is).
        auto presets = ptd::load_presets();
        if (presets && !presets->find_gpu(o.gpu_preset)) {
            std::string allowed;
            for (const std::string& n : presets->gpu_names()) allowed += (allowed.empty() ? "" : ", ") + n;
            std::fprintf(stderr, "bench_engine: --gpu-preset: got \"%s\"; allowed: %s\n", o.gpu_preset.c_str(),
                         allowed.c_str());
            return 2;
        }
    }
    if (o.engine.empty()) o.engine = default_engine_path();
    if (access(o.engine.c_str(), X_OK) != 0) {
        std::fprintf(stderr, "bench_engine: cannot execute the engine '%s'; build ptd-engine or pass --engine PATH\n",
                     o.engine.c_str());
        return 2;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    ModelShape m;
    if (o.quick) {
        m.layers = 2;
        m.seq = 128;
        m.steps = 3;
        m.deadline_s = 120;
    }
    std::string tmpl = (fs::temp_directory_path() / "ptd-bench-engine-XXXXXX").string();
    const char* tmp_c = mkdtemp(tmpl.data());
    if (!tmp_c) {
        std::perror("bench_engine: mkdtemp");
        return 2;
    }
    const fs::path tmp = tmp_c;

    const unsigned cores = std::thread::hardware_concurrency();
    const auto t0 = Clock::now();
    bool ok = true;
    if (o.cpu) {
        std::printf("bench_engine — ptd-engine (CPU) against this machine's sgemm peak%s\n", o.quick ? " [--quick]" : "");
        std::printf("engine: %s; %u hardware threads; 1-min load average at start %.2f; job files in %s\n\n",
                    o.engine.c_str(), cores, load_average(), tmp.c_str());
        const double busy = busy_percent(1.0);
        if (busy > 10)
            std::printf("WARNING: this machine is already %.0f%% busy; the figures below will be low and noisy. Re-run it "
                        "when it is idle.\n\n", busy);

        const auto peak = bench_sgemm(o, m.seq);
        const auto bf16_peak = bench_bf16_gemm(o, m.seq);
        RunFigures one_thread;
        ok = bench_single(o, tmp, m, peak, bf16_peak, one_thread);
        ok = bench_comm(o, tmp, m, one_thread.measured_steps > 0 ? &one_thread : nullptr) && ok;
    }
    if (o.cuda || o.cuda_sim)
        std::printf("bench_engine — ptd-engine's CUDA backend%s; engine: %s; job files in %s\n\n",
                    o.quick ? " [--quick]" : "", o.engine.c_str(), tmp.c_str());
    if (o.cuda) {
        DeviceSection sec;
#ifdef PTD_BENCH_HAVE_CUDA
        sec.api = {bench_gpu::dev::open_device, bench_gpu::dev::time_gemm, bench_gpu::dev::close_device};
#endif
        sec.models = {"gpt2-124m", "gpt2-350m", "gpt2-774m"};
        sec.squares = {4096, 8192};
        if (o.quick) {
            sec.models = {"gpt2-124m"};
            sec.squares = {4096};
            sec.tokens_per_step = 1 << 17;
            sec.steps = 3;
            sec.plan = {3, 10};
        }
        ok = bench_device(o, tmp, sec) && ok;
    }
    if (o.cuda_sim) {
        // Sizes the simulator finishes in seconds: tiny-gpt (4 layers, width 64) at 64 tokens.
        DeviceSection sec;
        sec.sim = true;
        sec.backend = "cuda-sim";
        sec.api = {bench_gpu::sim::open_device, bench_gpu::sim::time_gemm, bench_gpu::sim::close_device};
        sec.models = {"tiny-gpt"};
        sec.seq = 64;
        sec.squares = {64};
        sec.max_micro_batch = 2;
        sec.tokens_per_step = 128;
        sec.steps = 3;
        sec.deadline_s = 300;
        sec.plan = {2, 0};
        sec.unit = "GFLOP/s";
        sec.unit_scale = 1e9;
        ok = bench_device(o, tmp, sec) && ok;
    }

    if (o.predict) ok = bench_predict(o) && ok;

    std::printf("total %.0f s; 1-min load average at end %.2f\n", seconds_since(t0), load_average());
    if (ok) {
        std::error_code ec;
        fs::remove_all(tmp, ec);
    } else {
        std::printf("bench_engine: some runs failed; their job files and logs are kept in %s\n", tmp.c_str());
    }
    return ok ? 0 : 1;
}
