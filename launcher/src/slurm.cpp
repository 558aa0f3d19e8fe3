// slurm.cpp — sbatch, squeue / sacct and scancel for runs handed to Slurm (slurm.h). Each
// call runs Slurm's own command with a timeout: a controller that does not answer must not
// hang `ptd watch` or the studio.
#include "ptd/slurm.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <regex>
#include <sstream>
#include <thread>

namespace ptd {

namespace {
constexpr double kQueryTimeoutS = 20;  // squeue / sacct / sbatch against a busy controller

std::string trim(std::string s) {
    while (!s.empty() && std::isspace((unsigned char)s.back())) s.pop_back();
    size_t i = 0;
    while (i < s.size() && std::isspace((unsigned char)s[i])) ++i;
    return s.substr(i);
}

std::string first_line(const std::string& s) {
    const std::string t = trim(s);
    return t.substr(0, t.find('\n'));
}
}  // namespace

CommandOutput run_command(const std::vector<std::string>& argv, double timeout_s) {
    CommandOutput r;
    if (argv.empty()) {
        r.error = "no command";
        return r;
    }
    int out_fd[2], err_fd[2], exec_fd[2];
    if (pipe2(out_fd, O_CLOEXEC) != 0) return r.error = std::string("pipe: ") + std::strerror(errno), r;
    if (pipe2(err_fd, O_CLOEXEC) != 0) {
        close(out_fd[0]), close(out_fd[1]);
        return r.error = std::string("pipe: ") + std::strerror(errno), r;
    }
    // exec_fd reports a failed exec (its errno) to the parent; a successful exec closes it.
    if (pipe2(exec_fd, O_CLOEXEC) != 0) {
        for (int fd : {out_fd[0], out_fd[1], err_fd[0], err_fd[1]}) close(fd);
        return r.error = std::string("pipe: ") + std::strerror(errno), r;
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
        for (int fd : {out_fd[0], out_fd[1], err_fd[0], err_fd[1], exec_fd[0], exec_fd[1]}) close(fd);
        return r.error = std::string("fork: ") + std::strerror(errno), r;
    }
    if (pid == 0) {
        dup2(out_fd[1], 1);
        dup2(err_fd[1], 2);
        const int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        execvp(args[0], args.data());
        const int e = errno;
        (void)!write(exec_fd[1], &e, sizeof e);
        _exit(127);
    }
    close(out_fd[1]), close(err_fd[1]), close(exec_fd[1]);
    int exec_errno = 0;
    if (read(exec_fd[0], &exec_errno, sizeof exec_errno) == (ssize_t)sizeof exec_errno) {
        close(exec_fd[0]), close(out_fd[0]), close(err_fd[0]);
        waitpid(pid, nullptr, 0);
        r.error = argv[0] + ": " + std::strerror(exec_errno);
        return r;
    }
    close(exec_fd[0]);
    r.ran = true;
    const auto t0 = std::chrono::steady_clock::now();
    pollfd fds[2] = {{out_fd[0], POLLIN, 0}, {err_fd[0], POLLIN, 0}};
    std::string* into[2] = {&r.out, &r.err};
    int open_fds = 2;
    char buf[4096];
    while (open_fds > 0) {
        const double left = timeout_s - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (left <= 0) {
            kill(pid, SIGKILL);
            r.timed_out = true;
            break;
        }
        const int ready = poll(fds, 2, (int)(left * 1000) + 1);
        if (ready < 0 && errno != EINTR) break;
        if (ready <= 0) continue;
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            const ssize_t n = read(fds[i].fd, buf, sizeof buf);
            if (n > 0) {
                into[i]->append(buf, (size_t)n);
            } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
                close(fds[i].fd);
                fds[i].fd = -1;
                --open_fds;
            }
        }
    }
    for (const pollfd& p : fds)
        if (p.fd >= 0) close(p.fd);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
    return r;
}

Result<std::string> slurm_submit(const std::string& script_path) {
    const CommandOutput o = run_command({"sbatch", "--parsable", script_path}, kQueryTimeoutS);
    if (!o.ran)
        return fail(SourceLoc{script_path}, "--submit",
                    "cannot run sbatch (" + o.error + "); allowed: --submit where Slurm's commands are installed "
                    "(else submit the script yourself: sbatch " + script_path + ")");
    if (o.timed_out || o.status != 0)
        return fail(SourceLoc{script_path}, "--submit",
                    "sbatch refused the script" + (o.timed_out ? std::string(" (no answer within 20 s)") : "") + ": " +
                        (trim(o.err).empty() ? first_line(o.out) : trim(o.err)));
    // --parsable prints "JOBID" or "JOBID;CLUSTER".
    std::string id = first_line(o.out);
    id = id.substr(0, id.find(';'));
    bool digits = !id.empty();
    for (char c : id) digits = digits && std::isdigit((unsigned char)c);
    if (!digits)
        return fail(SourceLoc{script_path}, "--submit", "sbatch printed no job id (got " + quote_input(first_line(o.out)) + ")");
    return id;
}

std::vector<std::string> slurm_expand_nodes(const std::string& list) {
    std::vector<std::string> out;
    // Split at the commas outside brackets; each part is PREFIX or PREFIX[RANGES]SUFFIX.
    size_t start = 0;
    int depth = 0;
    for (size_t i = 0; i <= list.size(); ++i) {
        if (i < list.size() && list[i] == '[') ++depth;
        if (i < list.size() && list[i] == ']') --depth;
        if (i < list.size() && !(list[i] == ',' && depth == 0)) continue;
        const std::string part = trim(list.substr(start, i - start));
        start = i + 1;
        if (part.empty() || part == "(null)" || part == "None assigned") continue;
        const size_t open = part.find('['), close = part.find(']');
        if (open == std::string::npos || close == std::string::npos || close < open) {
            out.push_back(part);
            continue;
        }
        const std::string prefix = part.substr(0, open), suffix = part.substr(close + 1);
        std::istringstream ranges(part.substr(open + 1, close - open - 1));
        for (std::string r; std::getline(ranges, r, ',');) {
            const size_t dash = r.find('-');
            const std::string lo = r.substr(0, dash), hi = dash == std::string::npos ? lo : r.substr(dash + 1);
            if (lo.empty() || hi.empty() || lo.size() > 9 || hi.size() > 9 ||
                lo.find_first_not_of("0123456789") != std::string::npos || hi.find_first_not_of("0123456789") != std::string::npos) {
                out.push_back(prefix + r + suffix);
                continue;
            }
            for (long n = std::stol(lo), end = std::stol(hi); n <= end && out.size() < 100000; ++n) {
                std::string digits = std::to_string(n);
                if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');  // gpu[01-03]
                out.push_back(prefix + digits + suffix);
            }
        }
    }
    return out;
}

std::optional<SlurmJobState> slurm_job_state(const std::string& job_id, std::string* why_not) {
    // squeue knows a job until MinJobAge after its end (default 300 s); sacct afterwards,
    // where the cluster keeps accounting.
    const CommandOutput q = run_command({"squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T|%r|%N"}, kQueryTimeoutS);
    if (q.ran && !q.timed_out && q.status == 0 && !trim(q.out).empty()) {
        std::istringstream line(first_line(q.out));
        SlurmJobState s;
        std::string nodes;
        std::getline(line, s.state, '|');
        std::getline(line, s.reason, '|');
        std::getline(line, nodes);
        s.source = "squeue";
        s.nodes = slurm_expand_nodes(nodes);
        return s;
    }
    const CommandOutput a = run_command({"sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,NodeList"}, kQueryTimeoutS);
    if (a.ran && !a.timed_out && a.status == 0 && !trim(a.out).empty()) {
        // "CANCELLED by 1000|gpu[01-02]": the state is the first word.
        const std::string line = first_line(a.out);
        const size_t bar = line.find('|');
        std::string state = line.substr(0, bar);
        state = state.substr(0, state.find(' '));
        return SlurmJobState{state, "", "sacct", bar == std::string::npos ? std::vector<std::string>{} : slurm_expand_nodes(line.substr(bar + 1))};
    }
    if (why_not) {
        auto said = [](const CommandOutput& o, const char* name) {
            if (!o.ran) return std::string(name) + ": " + o.error;
            if (o.timed_out) return std::string(name) + ": no answer within 20 s";
            const std::string e = first_line(o.err);
            return std::string(name) + ": " + (e.empty() ? "does not list the job" : e);
        };
        *why_not = "Slurm job " + job_id + " unknown (" + said(q, "squeue") + "; " + said(a, "sacct") + ")";
    }
    return std::nullopt;
}

SlurmOutcome slurm_outcome(const std::string& s) {
    if (s == "PENDING" || s == "CONFIGURING" || s == "REQUEUED" || s == "REQUEUE_HOLD" || s == "RESV_DEL_HOLD" ||
        s == "RUNNING" || s == "COMPLETING" || s == "SUSPENDED" || s == "STOPPED" || s == "SIGNALING" ||
        s == "STAGE_OUT" || s == "RESIZING")
        return {"", s == "PENDING" ? "waiting in the queue" : "running"};
    if (s == "COMPLETED") return {"finished", "completed"};
    if (s == "CANCELLED") return {"stopped", "cancelled (scancel)"};
    if (s == "TIMEOUT") return {"failed", "timed out: the job ran past its time limit"};
    if (s == "NODE_FAIL") return {"failed", "node failure: Slurm lost a node of the job"};
    if (s == "OUT_OF_MEMORY") return {"failed", "out of memory: a task went past the job's memory limit"};
    if (s == "PREEMPTED") return {"failed", "preempted by a higher-priority job"};
    if (s == "BOOT_FAIL") return {"failed", "a node of the job failed to boot"};
    if (s == "DEADLINE") return {"failed", "past its deadline"};
    if (s == "FAILED") return {"failed", "failed"};
    return {"failed", "ended in Slurm state " + s};
}

std::optional<SrunFailure> srun_first_failure(const std::string& text) {
    static const std::regex task(R"(^srun: error: ([^:]+): task (\d+): (.*)$)");
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        std::smatch m;
        if (!std::regex_match(line, m, task)) continue;
        SrunFailure f;
        f.node = m[1];
        f.rank = std::stoi(m[2]);
        f.what = trim(m[3]);
        return f;
    }
    return std::nullopt;
}

std::optional<std::string> slurm_preflight_stop(const std::string& text) {
    std::optional<std::string> stop;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (line.starts_with("ptd: --preflight") && line.find("not training") != std::string::npos) stop = line.substr(5);
    return stop;
}

Result<SlurmJobState> slurm_cancel(const std::string& job_id, double wait_s) {
    const CommandOutput c = run_command({"scancel", job_id}, kQueryTimeoutS);
    if (!c.ran) return fail(SourceLoc{}, "scancel", "cannot run scancel (" + c.error + ")");
    if (c.timed_out || c.status != 0) {
        // A job that ended meanwhile cannot be cancelled: its end is the answer.
        if (auto s = slurm_job_state(job_id); s && !slurm_outcome(s->state).run_state.empty()) return *s;
        return fail(SourceLoc{}, "scancel", "scancel " + job_id + " failed: " + first_line(c.err + c.out));
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<SlurmJobState> last;
    for (;;) {
        std::string why;
        last = slurm_job_state(job_id, &why);
        if (last && !slurm_outcome(last->state).run_state.empty() && last->state != "COMPLETING") return *last;
        if (!last) return fail(SourceLoc{}, "scancel", why);
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > wait_s)
            return fail(SourceLoc{}, "scancel",
                        "Slurm job " + job_id + " still " + last->state + " " + std::to_string((int)wait_s) + " s after scancel");
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
}

}  // namespace ptd
