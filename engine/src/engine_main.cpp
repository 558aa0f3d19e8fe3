// engine_main.cpp — ptd-engine: the bundled hybrid-parallel trainer, started by `ptd
// launch` on every rank (or by hand with the torchrun environment contract). It finds its
// place in the job from RANK/WORLD_SIZE/... and the shared rank layout, then trains: see
// engine/include/ptd/engine/trainer.h. Metrics go to stdout as JSON lines, logs to stderr.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "ptd/common/cli_number.h"
#include "ptd/spec/job_overrides.h"
#include "ptd/layout/job_layout.h"
#include "ptd/spec/job_spec.h"
#include "ptd/layout/layout.h"
#include "ptd/spec/presets.h"
#include "ptd/engine/blas_core.h"
#include "ptd/engine/probe.h"
#include "ptd/engine/trainer.h"
#include "ptd/rank_env.h"
#include "device_select.h"
#ifdef PTD_HAVE_CUDA
#include "cuda_devices.h"
#endif

namespace {

int list_devices() {
#ifdef PTD_HAVE_CUDA
    char buf[8192];
    int n = ptd_cuda_describe_devices(buf, sizeof buf);
    if (n < 0) {
        std::fprintf(stderr, "ptd-engine: no CUDA device usable: %s\n", buf);
        std::printf("cpu (CUDA backend built, but no device usable: GPU jobs run here only with --backend cpu)\n");
    } else {
        std::printf("%s", buf);
        if (n == 0) std::printf("cpu (no CUDA device visible)\n");
    }
#else
    std::printf("cpu (CPU-only build: configure with nvcc on PATH or -DENABLE_CUDA=ON for CUDA)\n");
#endif
    std::printf("cpu BLAS: %s\n", ptd::engine::blas_choice().line().c_str());
    return 0;
}

// What this binary and machine offer for --backend (asked only when the choice needs it:
// creating a CUDA context costs time and memory).
ptd::engine::CudaProbe probe_cuda() {
    ptd::engine::CudaProbe probe;
#ifdef PTD_HAVE_CUDA
    probe.built_with_cuda = true;
    char buf[8192];
    probe.device_count = ptd_cuda_describe_devices(buf, sizeof buf);
    if (probe.device_count < 0) {
        // "file.cu:14: cudaGetDeviceCount: <CUDA's text>": the user needs the call and the text.
        std::string text = buf;
        if (size_t at = text.find(": cuda"); at != std::string::npos) text.erase(0, at + 2);
        probe.error = text;
    }
#endif
    return probe;
}

// One JSON line: this rank's coordinates, node and groups under the job's layout.
int describe_rank(const ptd::JobSpec& job, const ptd::RankEnv& env) {
    if (env.world_size != job.world_size()) {
        std::fprintf(stderr,
                     "ptd-engine: error: WORLD_SIZE: got %d, but the job has %d ranks (cluster.nodes × "
                     "cluster.gpus_per_node); allowed: %d\n",
                     env.world_size, job.world_size(), job.world_size());
        return 2;
    }
    auto layout = ptd::job_layout(job);
    if (!layout) {
        std::fprintf(stderr, "ptd-engine: %s", layout.error().str().c_str());
        return 2;
    }
    const ptd::RankPlace& place = layout->ranks[env.rank];
    nlohmann::json j;
    j["event"] = "describe";
    j["rank"] = env.rank;
    j["world_size"] = env.world_size;
    j["local_rank"] = env.local_rank;
    j["node"] = place.node;
    j["local_gpu"] = place.local_gpu;
    j["blas"] = ptd::engine::blas_choice().to_json();
    for (int d = 0; d < ptd::DIM_COUNT; ++d) {
        const ptd::GroupSet& g = layout->groups[d];
        const int gi = g.group_of[env.rank];
        j["coords"][ptd::dim_name((ptd::Dim)d)] = place.coord[d];
        j["groups"][ptd::dim_name((ptd::Dim)d)] = std::vector<int>(g.begin(gi), g.end(gi));
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
}

// A port no one listens on now: bind port 0 on every interface (where the rank-0 store
// will listen), read it back, release it. Another process could take it before rank 0
// binds it; rank 0 then fails with "address in use" and the launch reports that.
int print_free_port() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (sockaddr*)&a, sizeof a) != 0 || getsockname(fd, (sockaddr*)&a, &len) != 0) {
        std::fprintf(stderr, "ptd-engine: error: --free-port: %s\n", std::strerror(errno));
        if (fd >= 0) close(fd);
        return 1;
    }
    close(fd);
    std::printf("%d\n", ntohs(a.sin_port));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    // OpenMP's default wait policy spins idle workers, and OpenBLAS (pthreads) keeps its
    // own workers: with 2+ threads the two pools spin against each other and a 2-thread
    // step ran slower than a 1-thread one (docs/performance.md). libgomp reads the policy
    // when it is loaded, before main, so set it and re-execute once; a user's own
    // OMP_WAIT_POLICY is left alone.
    bool reexec = false;
    if (!std::getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
        reexec = true;
    }
    // OpenBLAS, too, picks its kernels when it is loaded: a generic pick on a CPU it does
    // not know is replaced by the best core type that computes correctly (blas_core.h).
    const ptd::engine::BlasStep blas = ptd::engine::choose_blas_core();
    if (!blas.error.empty()) {
        std::fprintf(stderr, "ptd-engine: error: %s\n", blas.error.c_str());
        return 1;
    }
    if (reexec || blas.reexec) execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
    CLI::App app{"ptd-engine — PTD Studio's hybrid-parallel (TP × PP × DP) training engine"};
    app.set_version_flag("--version", std::string("ptd-engine ") + PTD_VERSION);
    std::string job_path;
    bool describe = false, devices = false, want_free_port = false;
    app.add_option("--job", job_path, "Job spec (TOML)")->check(CLI::ExistingFile);
    app.add_flag("--describe", describe, "Print this rank's coordinates and groups as one JSON line");
    app.add_flag("--devices,--list-devices", devices, "List the devices this build can use");
    std::string backend_flag = "auto";
    app.add_option("--backend", backend_flag,
                   "Compute backend: auto (CUDA for a GPU job when built with CUDA and a device is visible, else the "
                   "CPU with a warning), cpu, cuda, cuda-sim (the CUDA simulator)")
        ->capture_default_str();
    bool probe = false;
    ptd::engine::ProbeOptions probe_opt;
    auto* probe_flag = app.add_flag("--probe", probe,
                 "Measure instead of training: the job's GEMMs, element-wise ops and collectives on this rank, as "
                 "\"probe\" metrics lines (what `ptd calibrate` starts)");
    app.add_flag("--quick", probe_opt.quick, "With --probe: fewer repeats and message sizes (the preflight)")->needs(probe_flag);
    app.add_flag("--free-port", want_free_port, "Print a TCP port free on this host (the launcher's MASTER_PORT) and exit");
    ptd::engine::TrainOptions opt;
    std::vector<std::string> overrides;
    app.add_option("--set", overrides, "Override a job key, e.g. --set parallel.tp=2 (checked like the file)")
        ->take_all();
    app.add_option("--steps", opt.stop_at_step,
                   "Stop after this step (absolute; default training.steps). The LR schedule always spans training.steps")
        ->check(CLI::Range(0, 1 << 30));
    app.add_option("--run-dir", opt.run_dir, "Run directory for checkpoints (default runs/<run id>)");
    app.add_option("--checkpoint-every", opt.checkpoint_every, "Write a sharded checkpoint every N steps and at the end (0 = never)")
        ->check(CLI::Range(0, 1 << 30));
    app.add_flag("--resume", opt.resume, "Continue from the latest complete checkpoint in the run directory");
    app.add_option("--threads", opt.threads, "Compute threads per rank (default OMP_NUM_THREADS, else the rank's own cores or its share of the node's: docs/engine.md)")
        ->check(CLI::Range(1, 1024));
    app.add_option("--timeout", opt.comm_timeout_s, "Seconds a collective or receive may wait for a peer (default 300)")
        ->check(ptd::cli::FiniteRange(1.0, 86400.0));
    app.add_option("--stall-timeout", opt.stall_timeout_s, "Seconds without a heartbeat before a rank counts as stalled (default 60)")
        ->check(ptd::cli::FiniteRange(1.0, 86400.0));
    // At least three heartbeats (1 s apart) must go unanswered: one late echo is no lost store.
    app.add_option("--store-lease", opt.store_lease_s,
                   "Seconds without a reply from the store (rank 0) before a rank stops itself, writing nothing more "
                   "into the run directory (default 10)")
        ->check(ptd::cli::FiniteRange(3.0, 86400.0));
    int timeline_steps = 3;
    bool timeline_all = false;
    auto* timeline_steps_opt =
        app.add_option("--timeline-steps", timeline_steps,
                       "Record the measured timeline (run dir timeline/rank-NNNNN.tsv) for the first N steps; 0 = off")
            ->check(CLI::Range(0, 1 << 30))
            ->capture_default_str();
    app.add_flag("--timeline-all", timeline_all, "Record the measured timeline on every step")->excludes(timeline_steps_opt);
    app.add_option("--timeline-dir", opt.timeline_dir,
                   "Folder for the measured timeline files (default RUN_DIR/timeline; ptd launch over SSH sets it)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "ptd-engine: error: %s\nRun with --help for usage.\n", e.what());
        return 2;
    }
    if (devices) return list_devices();
    auto backend_request = ptd::engine::parse_backend_request(backend_flag);
    if (!backend_request) {
        std::fprintf(stderr, "ptd-engine: %s", backend_request.error().str().c_str());
        return 2;
    }
    if (want_free_port) return print_free_port();
    if (job_path.empty()) {
        std::fprintf(stderr, "ptd-engine: error: --job is required (or --devices); run with --help\n");
        return 2;
    }
    auto presets = ptd::load_presets();
    if (!presets) {
        std::fprintf(stderr, "%s", presets.error().str().c_str());
        return 2;
    }
    auto job = ptd::load_job_file_with_overrides(job_path, overrides, *presets);
    if (!job) {
        std::fprintf(stderr, "%s", job.error().str().c_str());
        return 2;
    }
    auto env = ptd::read_rank_env();
    if (!env) {
        std::fprintf(stderr, "%s", env.error().str().c_str());
        return 2;
    }
    if (describe) return describe_rank(*job, *env);
    const bool needs_probe = *backend_request == ptd::engine::BackendRequest::cuda ||
                             (*backend_request == ptd::engine::BackendRequest::auto_select && job->cluster.gpu.name != "cpu");
    auto backend = ptd::engine::choose_backend(*backend_request, job->cluster.gpu.name,
                                               needs_probe ? probe_cuda() : ptd::engine::CudaProbe{}, env->local_rank);
    if (!backend) {
        char host[256] = "?";
        gethostname(host, sizeof host - 1);
        std::fprintf(stderr, "ptd-engine: rank %d on host %s: %s", env->rank, host, backend.error().str().c_str());
        return 2;
    }
    opt.timeline_steps = timeline_all ? -1 : timeline_steps;
    opt.backend = &*backend;
    opt.job_path = job_path;
    if (probe) {
        probe_opt.version = PTD_VERSION;
        return ptd::engine::run_probes(*job, *env, opt, probe_opt);
    }
    return ptd::engine::run_training(*job, *env, opt);
}
