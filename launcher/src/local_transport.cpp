// local_transport.cpp — ranks as child processes of this machine (launch.mode = "local"):
// fork/exec with the rank's environment on top of ours, each rank in its own process
// group, stdout and stderr read through pipes by one poll() thread so no rank can block
// another.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport.h"

extern char** environ;

namespace ptd {
namespace {

constexpr size_t kMaxLine = 1 << 20;  // longer lines are split (the sink contract)

struct LocalRank {
    int rank = 0;
    pid_t pid = 0;
    int fd[2] = {-1, -1};          // stdout, stderr read ends; -1 once closed
    std::string partial[2];
    bool reaped = false;
    int exit_code = 0;
    uint64_t closed_order = 0;     // when both pipes reached EOF (0 = not yet)
};

// Splits `buf` into lines for the sink, keeping the unfinished tail in `partial`.
void feed_lines(TransportSink& sink, int rank, bool is_stderr, std::string& partial, const char* buf, size_t n) {
    partial.append(buf, n);
    size_t start = 0;
    for (;;) {
        const size_t nl = partial.find('\n', start);
        if (nl == std::string::npos) break;
        sink.line(rank, is_stderr, partial.substr(start, nl - start));
        start = nl + 1;
    }
    partial.erase(0, start);
    while (partial.size() >= kMaxLine) {
        sink.line(rank, is_stderr, partial.substr(0, kMaxLine));
        partial.erase(0, kMaxLine);
    }
}

class LocalTransport final : public HostTransport {
public:
    LocalTransport() = default;
    ~LocalTransport() override {
        signal_all(SIGKILL);  // only ranks still alive, i.e. after an aborted start
        join();
        for (LocalRank& r : ranks_)
            for (int& f : r.fd)
                if (f >= 0) close(f);
    }

    Result<void> connect() override { return {}; }

    Result<void> upload(const std::string&, const std::string&, const std::string&) override {
        return fail(SourceLoc{}, "launch.upload", "local ranks run the local engine; nothing to upload");
    }
    Result<void> upload_text(const std::string&, const std::string&) override {
        return fail(SourceLoc{}, "launch.upload", "local ranks read the run directory's job.toml; nothing to upload");
    }
    Result<bool> download(const std::string&, const std::string&, int64_t) override {
        return fail(SourceLoc{}, "launch", "local ranks write into the run directory itself; nothing to download");
    }
    // MASTER_ADDR of a local run is this machine's; the engine resolves it first anyway.
    Result<void> check_resolves(const std::string&) override { return {}; }

    Result<int> free_port() override {
        // Same as ptd-engine --free-port, without starting a process.
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        socklen_t len = sizeof a;
        int port = 0;
        if (fd >= 0 && bind(fd, (sockaddr*)&a, sizeof a) == 0 && getsockname(fd, (sockaddr*)&a, &len) == 0)
            port = ntohs(a.sin_port);
        if (fd >= 0) close(fd);
        if (!port) return fail(SourceLoc{}, "launch.master_port", std::string("no free TCP port: ") + std::strerror(errno));
        return port;
    }

    Result<void> start_rank(const RankPlan& rank, long* pid_out) override {
        // Everything the child needs is built before fork: after fork in a threaded
        // process only async-signal-safe calls are allowed.
        std::vector<std::string> env_strings;
        for (char** e = environ; e && *e; ++e) {
            std::string_view kv(*e);
            const std::string_view name = kv.substr(0, kv.find('='));
            bool overridden = false;
            for (const auto& [k, v] : rank.env) overridden |= name == k;
            overridden |= name == "PTD_RUN_SECRET" && !rank.run_secret.empty();
            if (!overridden) env_strings.emplace_back(kv);
        }
        for (const auto& [k, v] : rank.env) env_strings.push_back(k + "=" + v);
        // The secret goes only into the child's environment (readable by its own user alone).
        if (!rank.run_secret.empty()) env_strings.push_back("PTD_RUN_SECRET=" + rank.run_secret);
        std::vector<char*> envp, argv;
        for (std::string& s : env_strings) envp.push_back(s.data());
        envp.push_back(nullptr);
        std::vector<std::string> args = rank.argv;
        for (std::string& s : args) argv.push_back(s.data());
        argv.push_back(nullptr);
        const std::string exec_error = "ptd launch: cannot execute " + rank.argv[0] + ": ";

        int out[2], err[2];
        if (pipe2(out, O_CLOEXEC) != 0) return fail(SourceLoc{}, "launch", std::string("pipe: ") + std::strerror(errno));
        if (pipe2(err, O_CLOEXEC) != 0) {
            close(out[0]);
            close(out[1]);
            return fail(SourceLoc{}, "launch", std::string("pipe: ") + std::strerror(errno));
        }
        const pid_t parent = getpid();
        const pid_t pid = fork();
        if (pid < 0) {
            for (int f : {out[0], out[1], err[0], err[1]}) close(f);
            return fail(SourceLoc{}, "launch", std::string("fork: ") + std::strerror(errno));
        }
        if (pid == 0) {
            setpgid(0, 0);  // its own group: Ctrl-C reaches the launcher only, and a stop
                            // can signal the rank with everything it started
            // If the launcher dies without a teardown, the rank goes too.
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(137);
            signal(SIGPIPE, SIG_DFL);
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            dup2(out[1], 1);
            dup2(err[1], 2);
            const int devnull = open("/dev/null", O_RDONLY);
            if (devnull >= 0) dup2(devnull, 0);
            execve(argv[0], argv.data(), envp.data());
            const char* why = strerror(errno);
            (void)!write(2, exec_error.data(), exec_error.size());
            (void)!write(2, why, strlen(why));
            (void)!write(2, "\n", 1);
            _exit(127);
        }
        setpgid(pid, pid);  // also from the parent, so a signal sent right away finds the group
        close(out[1]);
        close(err[1]);
        fcntl(out[0], F_SETFL, O_NONBLOCK);
        fcntl(err[0], F_SETFL, O_NONBLOCK);
        std::lock_guard lock(mu_);
        LocalRank r;
        r.rank = rank.rank;
        r.pid = pid;
        r.fd[0] = out[0];
        r.fd[1] = err[0];
        ranks_.push_back(std::move(r));
        if (pid_out) *pid_out = pid;
        return {};
    }

    void run_io(TransportSink& sink) override {
        thread_ = std::thread([this, &sink] { io_loop(sink); });
    }

    void signal_all(int sig) override {
        std::lock_guard lock(mu_);
        for (const LocalRank& r : ranks_)
            if (!r.reaped) kill(-r.pid, sig);
    }

    void join() override {
        if (thread_.joinable()) thread_.join();
    }

private:
    // Read whatever is there on every open pipe; true if anything was read.
    bool drain(TransportSink& sink, LocalRank& r, int stream) {
        char buf[65536];
        bool any = false;
        for (;;) {
            const ssize_t n = read(r.fd[stream], buf, sizeof buf);
            if (n > 0) {
                feed_lines(sink, r.rank, stream == 1, r.partial[stream], buf, (size_t)n);
                any = true;
                if ((size_t)n < sizeof buf) return any;  // let other ranks have a turn
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && errno == EAGAIN) return any;
            close_stream(sink, r, stream);  // EOF or error
            return any;
        }
    }

    void close_stream(TransportSink& sink, LocalRank& r, int stream) {
        if (r.fd[stream] < 0) return;
        close(r.fd[stream]);
        r.fd[stream] = -1;
        if (!r.partial[stream].empty()) sink.line(r.rank, stream == 1, std::move(r.partial[stream]));
        r.partial[stream].clear();
        if (r.fd[0] < 0 && r.fd[1] < 0 && !r.closed_order) r.closed_order = ++close_counter_;
    }

    void io_loop(TransportSink& sink) {
        std::vector<pollfd> fds;
        std::vector<std::pair<size_t, int>> who;  // (rank index, stream) of each pollfd
        for (;;) {
            fds.clear();
            who.clear();
            size_t alive = 0;
            {
                std::lock_guard lock(mu_);
                for (size_t i = 0; i < ranks_.size(); ++i) {
                    if (ranks_[i].reaped) continue;
                    ++alive;
                    for (int s = 0; s < 2; ++s)
                        if (ranks_[i].fd[s] >= 0) {
                            fds.push_back({ranks_[i].fd[s], POLLIN, 0});
                            who.emplace_back(i, s);
                        }
                }
            }
            if (alive == 0) return;
            // A short timeout: an exit is noticed through waitpid, not only through EOF
            // (a grandchild can keep a pipe open after the rank itself is gone).
            const int ready = fds.empty() ? 0 : poll(fds.data(), fds.size(), 50);
            if (fds.empty()) usleep(20000);
            if (ready > 0)
                for (size_t k = 0; k < fds.size(); ++k)
                    if (fds[k].revents) drain(sink, ranks_[who[k].first], who[k].second);
            reap(sink);
        }
    }

    // Reports ranks that exited, in the order their output ended. A rank killed by a
    // signal closes its pipes at once, while its peers notice and exit a little later;
    // waitpid can see both in one sweep, and the first to go is the one to blame.
    void reap(TransportSink& sink) {
        std::vector<LocalRank*> gone;
        for (LocalRank& r : ranks_) {
            if (r.reaped) continue;
            int status = 0;
            if (waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
            r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            gone.push_back(&r);
        }
        // Everything a rank wrote before it exited is in its pipes: read it all first, so
        // rank_exited comes after the rank's last line.
        for (LocalRank* r : gone)
            for (int s = 0; s < 2; ++s) {
                while (r->fd[s] >= 0 && drain(sink, *r, s)) {
                }
                close_stream(sink, *r, s);
            }
        std::stable_sort(gone.begin(), gone.end(),
                         [](const LocalRank* a, const LocalRank* b) { return a->closed_order < b->closed_order; });
        for (LocalRank* r : gone) {
            {
                std::lock_guard lock(mu_);
                r->reaped = true;
            }
            sink.rank_exited(r->rank, r->exit_code);
        }
    }

    std::mutex mu_;              // ranks_ membership and reaped flags (signal_all reads them)
    std::vector<LocalRank> ranks_;
    std::thread thread_;
    uint64_t close_counter_ = 0;
};

}  // namespace

std::unique_ptr<HostTransport> make_local_transport(const LaunchPlan&, int) {
    return std::make_unique<LocalTransport>();
}

}  // namespace ptd
