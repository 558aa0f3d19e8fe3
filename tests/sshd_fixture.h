// sshd_fixture.h — a throwaway OpenSSH server on 127.0.0.1 for launcher tests: its own
// temp folder, host key, user key, authorized_keys and (empty) known_hosts; public-key
// login only. Header-only and independent of GoogleTest:
//
//   SshdFixture sshd;
//   if (std::string why = sshd.start(); !why.empty()) GTEST_SKIP() << why;
//   ... connect to 127.0.0.1:sshd.port as sshd.user with sshd.identity ...
//
// The destructor SIGKILLs sshd and every process below it (connection handlers and the
// commands they ran), then removes the folder. Needs /usr/sbin/sshd and ssh-keygen.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "free_port.h"

class SshdFixture {
public:
    int port = 0;
    std::string dir;          // temp folder holding everything below
    std::string user;         // the current user (the one sshd lets in)
    std::string identity;     // private key whose public half is in authorized_keys
    std::string known_hosts;  // empty file; see trust_host_key()
    std::string ssh_config;   // empty file: keeps the user's ~/.ssh/config out of tests
    std::string host_key;     // sshd's private host key (".pub" next to it)
    std::string log;          // sshd's stderr (-e)
    pid_t pid = -1;

    SshdFixture() = default;
    SshdFixture(const SshdFixture&) = delete;
    SshdFixture& operator=(const SshdFixture&) = delete;
    ~SshdFixture() {
        kill_all();
        if (!dir.empty() && getenv("PTD_TEST_KEEP_SSHD") == nullptr) {  // set it to debug
            std::error_code ec;
            std::filesystem::remove_all(dir, ec);
        }
    }

    std::string address = "127.0.0.1";  // where sshd listens
    std::string netns;                   // network namespace it runs in ("" = ours)
    bool sftp_subsystem = true;          // false: a server without SFTP (set before start())

    // Start sshd; "" on success, else why not (the caller skips the test with it). With
    // `in_netns`, sshd runs inside that network namespace (ip netns exec) listening on
    // `listen_address`:22, for tests with more than one "host".
    std::string start(const std::string& in_netns = "", const std::string& listen_address = "127.0.0.1") {
        netns = in_netns;
        address = listen_address;
        const char* sshd_path = "/usr/sbin/sshd";
        if (access(sshd_path, X_OK) != 0) return "OpenSSH server not installed (/usr/sbin/sshd missing; apt-get install openssh-server)";
        if (run("command -v ssh-keygen >/dev/null") != 0) return "ssh-keygen not found (apt-get install openssh-client)";
        // Under TMPDIR: a ctest run's one temporary root (tests/CMakeLists.txt).
        std::string tmpl = (std::filesystem::temp_directory_path() / "ptd-sshd-XXXXXX").string();
        if (mkdtemp(tmpl.data()) == nullptr) return "cannot create a temp folder under " + tmpl;
        dir = tmpl;
        if (const passwd* pw = getpwuid(getuid())) user = pw->pw_name;
        host_key = dir + "/host_ed25519";
        identity = dir + "/id_ed25519";
        known_hosts = dir + "/known_hosts";
        ssh_config = dir + "/ssh_config";
        log = dir + "/sshd.log";
        if (run("ssh-keygen -q -t ed25519 -N '' -C ptd-test-host -f " + host_key) != 0 ||
            run("ssh-keygen -q -t ed25519 -N '' -C ptd-test-user -f " + identity) != 0)
            return "ssh-keygen failed to make throwaway keys in " + dir;
        std::filesystem::copy_file(identity + ".pub", dir + "/authorized_keys");
        write_file(known_hosts, "");
        write_file(ssh_config, "");
        mkdir((dir + "/home").c_str(), 0755);
        // sshd refuses to start without its privilege-separation folder.
        if (geteuid() == 0) mkdir("/run/sshd", 0755);

        for (int attempt = 0; attempt < 3; ++attempt) {  // a port taken meanwhile: try another
            port = netns.empty() ? free_port() : 22;
            write_file(dir + "/sshd_config",
                       "Port " + std::to_string(port) + "\n"
                       "ListenAddress " + address + "\n"
                       "HostKey " + host_key + "\n"
                       "AuthorizedKeysFile " + dir + "/authorized_keys\n"
                       "StrictModes no\n"
                       "PubkeyAuthentication yes\n"
                       "PasswordAuthentication no\n"
                       "KbdInteractiveAuthentication no\n"
                       "UsePAM no\n"
                       "PermitRootLogin prohibit-password\n"
                       "PidFile none\n"
                       // Up to 64 ranks on this one host (a channel each; sshd allows 10 by default).
                       "MaxSessions 64\n"
                       "LogLevel " + std::string(getenv("PTD_TEST_KEEP_SSHD") ? "DEBUG1" : "VERBOSE") + "\n"
                       + std::string(sftp_subsystem ? "Subsystem sftp internal-sftp\n" : "") +
                       // The user's shell runs each command; keep it away from the user's
                       // ~/.bashrc (slow, chatty, or holding locks such as pyenv's rehash
                       // lock when a test SIGKILLs a session mid-startup). The working
                       // folder stays the real home, as SFTP relative paths expect.
                       "SetEnv HOME=" + dir + "/home\n");
            pid = fork();
            if (pid == 0) {
                setpgid(0, 0);
                int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
                if (fd >= 0) {
                    dup2(fd, 1);
                    dup2(fd, 2);
                }
                std::string cfg = dir + "/sshd_config";
                if (!netns.empty())
                    execl("/usr/sbin/ip", "ip", "netns", "exec", netns.c_str(), sshd_path, "-D", "-e", "-f", cfg.c_str(),
                          (char*)nullptr);
                else
                    execl(sshd_path, sshd_path, "-D", "-e", "-f", cfg.c_str(), (char*)nullptr);
                _exit(127);
            }
            if (pid < 0) return "fork failed";
            auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
            while (std::chrono::steady_clock::now() < deadline) {
                int status = 0;
                if (waitpid(pid, &status, WNOHANG) == pid) {
                    pid = -1;
                    break;
                }
                if (accepts(address, port)) return "";
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
            kill_all();
        }
        return "sshd did not start; its log (" + log + "):\n" + read_file(log);
    }

    // The host key as a known_hosts line for this server, "[127.0.0.1]:PORT ssh-ed25519 AAAA..."
    // (just the address on port 22).
    std::string known_hosts_line(bool wrong_key = false) const {
        std::string pub = host_key + ".pub";
        if (wrong_key) {
            pub = dir + "/other_host_ed25519.pub";
            if (access(pub.c_str(), R_OK) != 0)
                run("ssh-keygen -q -t ed25519 -N '' -C other -f " + dir + "/other_host_ed25519");
        }
        std::istringstream in(read_file(pub));
        std::string type, b64;
        in >> type >> b64;
        const std::string host = port == 22 ? address : "[" + address + "]:" + std::to_string(port);
        return host + " " + type + " " + b64 + "\n";
    }
    // Record the real host key (or a different one, to test "changed") in known_hosts.
    void trust_host_key(bool wrong_key = false) const { write_file(known_hosts, known_hosts_line(wrong_key)); }
    // "SHA256:..." of the real host key or of the wrong one, as ssh-keygen -l prints it.
    std::string fingerprint(bool wrong_key = false) const {
        std::string pub = wrong_key ? dir + "/other_host_ed25519.pub" : host_key + ".pub";
        std::string out = capture("ssh-keygen -l -E sha256 -f " + pub);
        std::istringstream in(out);
        std::string bits, fp;
        in >> bits >> fp;
        return fp;
    }
    // A key pair sshd does not accept; encrypted with `passphrase` when given.
    std::string make_other_identity(const std::string& name, const std::string& passphrase = "") const {
        std::string path = dir + "/" + name;
        run("ssh-keygen -q -t ed25519 -N '" + passphrase + "' -C other -f " + path);
        return path;
    }

    // SIGKILL sshd and everything below it (the connection handlers setsid, so a process
    // group kill would miss them), and commands it started that were orphaned when their
    // connection closed (found by SSH_CONNECTION in their environment). Safe to call twice.
    void kill_all() {
        if (pid <= 0) return;
        for (int round = 0; round < 20; ++round) {
            std::vector<pid_t> tree = descendants(pid);
            for (pid_t p : started_by_us()) tree.push_back(p);
            for (pid_t p : tree) kill(p, SIGKILL);
            kill(pid, SIGKILL);
            if (tree.empty()) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        int status = 0;
        waitpid(pid, &status, 0);
        pid = -1;
    }

    static std::string read_file(const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }
    static void write_file(const std::string& path, const std::string& text) {
        std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    }

    // One process as /proc/*/stat tells it.
    struct ProcStat {
        pid_t pid = 0;
        char state = 0;
        long ppid = 0, pgrp = 0;
    };
    // Every process in /proc (zombies included; callers filter on state).
    static std::vector<ProcStat> all_processes() {
        std::vector<ProcStat> out;
        if (DIR* d = opendir("/proc")) {
            while (dirent* e = readdir(d)) {
                ProcStat ps;
                ps.pid = (pid_t)atoi(e->d_name);
                if (ps.pid <= 0) continue;
                std::string stat = read_file("/proc/" + std::string(e->d_name) + "/stat");
                size_t close_paren = stat.rfind(')');  // the command name may hold spaces
                if (close_paren == std::string::npos) continue;
                std::istringstream in(stat.substr(close_paren + 2));
                in >> ps.state >> ps.ppid >> ps.pgrp;
                out.push_back(ps);
            }
            closedir(d);
        }
        return out;
    }

    // Every live process below `root` (by parent pid, from /proc).
    static std::vector<pid_t> descendants(pid_t root) {
        std::map<pid_t, std::vector<pid_t>> children;
        for (const ProcStat& ps : all_processes()) children[(pid_t)ps.ppid].push_back(ps.pid);
        std::vector<pid_t> out, todo{root};
        while (!todo.empty()) {
            pid_t p = todo.back();
            todo.pop_back();
            for (pid_t c : children[p]) {
                out.push_back(c);
                todo.push_back(c);
            }
        }
        return out;
    }

    // Processes whose SSH_CONNECTION says they were started through this server.
    std::vector<pid_t> started_by_us() const {
        std::vector<pid_t> out;
        std::string suffix = " " + address + " " + std::to_string(port);
        if (DIR* d = opendir("/proc")) {
            while (dirent* e = readdir(d)) {
                pid_t p = (pid_t)atoi(e->d_name);
                if (p <= 0 || p == getpid()) continue;
                std::string env = read_file("/proc/" + std::string(e->d_name) + "/environ");
                size_t at = env.find("SSH_CONNECTION=");
                if (at == std::string::npos) continue;
                size_t end = env.find('\0', at);
                std::string value = env.substr(at, end == std::string::npos ? std::string::npos : end - at);
                if (value.size() >= suffix.size() && value.compare(value.size() - suffix.size(), suffix.size(), suffix) == 0)
                    out.push_back(p);
            }
            closedir(d);
        }
        return out;
    }

    // Live (not zombie) processes whose process group is `pgid`.
    static std::vector<pid_t> processes_in_group(long pgid) {
        std::vector<pid_t> out;
        for (const ProcStat& ps : all_processes())
            if (ps.pgrp == pgid && ps.state != 'Z' && ps.state != 'X') out.push_back(ps.pid);
        return out;
    }

private:
    static int run(const std::string& cmd) {
        int rc = std::system((cmd + " </dev/null >/dev/null 2>&1").c_str());
        return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    }
    static std::string capture(const std::string& cmd) {
        std::string out;
        if (FILE* f = popen((cmd + " 2>/dev/null").c_str(), "r")) {
            char buf[512];
            size_t n;
            while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
            pclose(f);
        }
        return out;
    }
    static bool accepts(const std::string& address, int port) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        inet_pton(AF_INET, address.c_str(), &a.sin_addr);
        a.sin_port = htons((uint16_t)port);
        bool ok = ::connect(fd, (sockaddr*)&a, sizeof a) == 0;
        close(fd);
        return ok;
    }
};
