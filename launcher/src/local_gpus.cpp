// local_gpus.cpp — may a GPU job start its ranks as child processes of this machine?
// (launch.h local_gpu_refusal). A GPU job whose ranks would each refuse at start (the
// engine never drops a GPU job to the CPU by itself) is refused here once, before any rank
// starts: 64 ranks that all fail the same way say less than one line that names the GPU
// the job asks for and what this machine has.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>

#include "ptd/launch.h"

namespace ptd {

namespace {

constexpr double kDevicesTimeoutS = 60;  // creating a CUDA context can take seconds on a big node

// stdout + stderr of `engine --devices`, or why it could not run.
struct DevicesOutput {
    std::string text;
    std::string error;
};

DevicesOutput run_engine_devices(const std::string& engine) {
    DevicesOutput d;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return {"", std::string("pipe: ") + std::strerror(errno)};
    const pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return {"", std::string("fork: ") + std::strerror(errno)};
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        const int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        execl(engine.c_str(), engine.c_str(), "--devices", (char*)nullptr);
        _exit(127);
    }
    close(fds[1]);
    const auto t0 = std::chrono::steady_clock::now();
    char buf[4096];
    for (;;) {
        const double left = kDevicesTimeoutS - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (left <= 0) {
            kill(pid, SIGKILL);
            d.error = engine + " --devices gave no answer within " + std::to_string((int)kDevicesTimeoutS) + " s";
            break;
        }
        pollfd p{fds[0], POLLIN, 0};
        const int ready = poll(&p, 1, (int)(left * 1000) + 1);
        if (ready < 0 && errno != EINTR) break;
        if (ready <= 0) continue;  // nothing to read yet: a read now would block past the timeout
        const ssize_t n = read(fds[0], buf, sizeof buf);
        if (n > 0) d.text.append(buf, (size_t)n);
        else if (n == 0 || (errno != EINTR && errno != EAGAIN)) break;
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (d.error.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        d.error = engine + " --devices failed: " + d.text;
    return d;
}

}  // namespace

std::string local_gpu_refusal(const LaunchPlan& plan) {
    const std::string& gpu = plan.job.cluster.gpu.name;
    const std::string backend = rank_backend(plan);
    if (!plan.local || gpu == "cpu" || (backend != "auto" && backend != "cuda")) return "";
    size_t per_host = 0;
    for (const HostPlan& h : plan.hosts) per_host = std::max(per_host, h.ranks.size());
    const DevicesOutput d = run_engine_devices(plan.local_engine);
    if (!d.error.empty()) return "the job asks for GPU \"" + gpu + "\", and this machine's GPUs could not be listed: " + d.error;
    // The engine lists each usable device as "cuda:N name, ...", else one "cpu (...)" line.
    size_t devices = 0;
    std::string has, cpu_line, cuda_error;
    std::istringstream lines(d.text);
    for (std::string line; std::getline(lines, line);) {
        if (line.rfind("cuda:", 0) == 0) ++devices, has += (has.empty() ? "" : "; ") + line;
        else if (line.rfind("cpu (", 0) == 0) cpu_line = line.substr(5, line.size() - 6);
        else if (line.rfind("ptd-engine: ", 0) == 0) cuda_error = line.substr(12);
    }
    // The CUDA runtime's own words ("no CUDA device usable: ...: CUDA driver version is
    // insufficient ...") say more than the summary line.
    if (!cuda_error.empty()) cpu_line = cuda_error;
    if (devices >= per_host) return "";
    const std::string what = devices == 0 ? "this machine has no usable GPU (ptd-engine --devices: " + cpu_line + ")"
                                          : "this machine has " + std::to_string(devices) + " (" + has + ")";
    return "the job asks for " + std::to_string(per_host) + " × GPU \"" + gpu +
           "\" on this machine (local launch: " + std::to_string(plan.ranks.size()) + " rank(s) on " +
           std::to_string(plan.hosts.size()) + " host(s) of this machine), but " + what +
           "; allowed: launch on hosts with that GPU (--hosts FILE, --slurm), or --backend cpu to run the job's "
           "layout on this machine's CPUs on purpose";
}

}  // namespace ptd
