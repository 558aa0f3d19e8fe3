// slurm_fixture.h — a throwaway single-host Slurm for launcher tests, from Debian's
// slurm-wlm and munge: munged, slurmctld and slurmd on 127.0.0.1 with their own key,
// slurm.conf, state and spool folders in a temp folder. One node, this machine under its
// own name, declares 8 CPUs whatever it has (SlurmdParameters=config_overrides), so 8
// tasks fit on a 2-core runner. Header-only:
//
//   SlurmFixture slurm;
//   if (std::string why = slurm.start(); !why.empty()) { if (slurm.failed) FAIL() << why; GTEST_SKIP() << why; }
//   run_captured(slurm.env() + " sbatch ...");   // SLURM_CONF=... for Slurm's commands
//
// start() says why not: binaries missing or not root (skip), or a daemon that did not come
// up (`failed`: an error, with the end of its log). The destructor kills every process that carries this fixture's SLURM_CONF in
// its environment (the daemons, slurmstepd, the jobs' tasks) and removes the folder.
// Needs root: slurmd starts job steps as the submitting user.
//
// start(2) makes a two-node Slurm instead (--exclude-failed's test): node ptdnode1 is this
// machine's network at 10.231.77.1, node ptdnode2 a network namespace at 10.231.77.2
// (netns_hosts.h: a bridge and a veth), each with its own slurmd. Debian's slurmd is not
// built with --enable-multiple-slurmd, so the second one runs in its own network namespace
// (the same SlurmdPort is free there), entered with nsenter rather than `ip netns exec`, which
// remounts /sys without the cgroup folder slurmd reads. Each slurmd also has its own UTS
// namespace (hostname = node name) and mount namespace, where a hosts file naming both nodes
// is bound over /etc/hosts: its job steps see a cluster's node, whose host name resolves to
// the address the other node reaches (ptd-engine binds Gloo there, MASTER_ADDR is a node
// name). The nodes share every other file (the run directory, munge's socket); each has its
// spool folder (SlurmdSpoolDir=…/spool/%n). The destructor also removes the namespace, the
// links and the bridge.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "free_port.h"
#include "launcher_test_util.h"  // processes_with_env
#include "netns_hosts.h"

class SlurmFixture {
public:
    std::string dir;       // temp folder holding everything below
    std::string conf;      // slurm.conf (SLURM_CONF for Slurm's commands)
    std::string node;      // this machine's short host name (start()); with two nodes, the first node's
    std::vector<std::string> nodes;  // every node's name, in the allocation's order
    std::string partition = "ptdq";
    int cpus = 8;          // the node's declared CPUs (tasks that fit at once)
    pid_t munged = -1, slurmctld = -1, slurmd = -1;
    pid_t netns_slurmd = -1;  // two nodes: the second node's slurmd (in its namespace)
    std::unique_ptr<NetnsHosts> net;  // two nodes: the second node's namespace and link
    bool failed = false;   // start() returned an error (a daemon did not come up), not a reason to skip

    SlurmFixture() = default;
    SlurmFixture(const SlurmFixture&) = delete;
    SlurmFixture& operator=(const SlurmFixture&) = delete;
    ~SlurmFixture() { stop(); }

    // "SLURM_CONF=<conf>" as a shell prefix for Slurm's client commands (and ptd, which runs them).
    std::string env() const { return "SLURM_CONF='" + conf + "'"; }

    // node_count 1 (this machine) or 2 (and a network namespace).
    std::string start(int node_count = 1) {
        for (const char* bin : {"/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "/usr/bin/sbatch",
                                "/usr/bin/srun", "/usr/bin/squeue", "/usr/bin/scancel", "/usr/bin/sinfo"})
            if (access(bin, X_OK) != 0)
                return std::string("Slurm not installed (") + bin + " missing; apt-get install slurm-wlm munge, as scripts/setup.sh does)";
        if (geteuid() != 0) return "a single-host Slurm needs root (slurmd starts job steps as the submitting user)";
        if (node_count == 2) {
            for (const char* bin : {"/usr/bin/nsenter", "/usr/bin/unshare"})
                if (access(bin, X_OK) != 0) return std::string("a two-node Slurm needs ") + bin + " (util-linux)";
            net = std::make_unique<NetnsHosts>(1);
            if (!net->skip.empty()) return "a two-node Slurm needs a network namespace: " + net->skip;
        }
        char tmpl[] = "/tmp/ptd-slurm-XXXXXX";
        if (mkdtemp(tmpl) == nullptr) return "cannot create a temp folder";
        dir = tmpl;
        chmod(dir.c_str(), 0755);  // munged wants its socket's folder searchable
        conf = dir + "/slurm.conf";
        for (const char* sub : {"/munge", "/state", "/spool"}) mkdir((dir + sub).c_str(), 0700);
        chmod((dir + "/spool").c_str(), 0755);
        chmod((dir + "/munge").c_str(), 0755);
        // munge's key: 1 KiB of randomness, readable by its owner only (munged checks).
        {
            std::ifstream rnd("/dev/urandom", std::ios::binary);
            std::string key(1024, '\0');
            rnd.read(key.data(), (long)key.size());
            std::ofstream(dir + "/munge/munge.key", std::ios::binary) << key;
            chmod((dir + "/munge/munge.key").c_str(), 0400);
        }
        // The node is this machine under its own name, which resolves here as a cluster's node
        // names do there (the script's MASTER_ADDR is the allocation's first node name).
        char host[256] = {};
        gethostname(host, sizeof host - 1);
        std::string short_host = host;
        short_host = short_host.substr(0, short_host.find('.'));
        node = short_host;
        // Two nodes: named so that Slurm's order (by name) is this machine first; the controller
        // listens where the namespace reaches this machine (the bridge).
        std::string ctld_addr = "127.0.0.1";
        std::vector<std::string> addrs = {"127.0.0.1"};
        nodes = {node};
        if (node_count == 2) {
            nodes = {"ptdnode1", "ptdnode2"};
            addrs = {"10.231.77.1", NetnsHosts::address(1)};
            ctld_addr = addrs[0];
            node = nodes[0];
        }
        for (const std::string& n : nodes) mkdir((dir + "/spool/" + n).c_str(), 0755);
        if (nodes.size() == 2) {
            std::ofstream hosts(dir + "/hosts");
            hosts << "127.0.0.1 localhost\n";
            for (size_t i = 0; i < nodes.size(); ++i) hosts << addrs[i] << " " << nodes[i] << "\n";
        }
        const int ctld_port = free_port();
        int slurmd_port = free_port();
        while (slurmd_port == ctld_port) slurmd_port = free_port();
        std::ofstream(conf) << "# slurm.conf of a test's single-host Slurm (tests/slurm_fixture.h)\n"
                            << "ClusterName=ptdtest\n"
                            << "SlurmctldHost=" << short_host << "(" << ctld_addr << ")\n"
                            << "SlurmctldPort=" << ctld_port << "\nSlurmdPort=" << slurmd_port << "\n"
                            << "SlurmUser=root\nSlurmdUser=root\n"
                            << "AuthType=auth/munge\nCredType=cred/munge\n"
                            << "AuthInfo=socket=" << dir << "/munge/munge.socket\n"
                            << "StateSaveLocation=" << dir << "/state\nSlurmdSpoolDir=" << dir << "/spool/%n\n"
                            << "SlurmctldPidFile=" << dir << "/slurmctld.pid\nSlurmdPidFile=" << dir << "/slurmd-%n.pid\n"
                            << "SlurmctldLogFile=" << dir << "/slurmctld.log\nSlurmdLogFile=" << dir << "/slurmd-%n.log\n"
                            // No cgroups in a container: processes tracked by parentage, no task binding.
                            << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
                            << "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
                            << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nSchedulerType=sched/builtin\n"
                            << "MpiDefault=none\nMailProg=/bin/true\nReturnToService=2\n"
                            << "SlurmdParameters=config_overrides\n"
                            // scancel / time limit: TERM, then KILL 5 s later; jobs stay in squeue 300 s.
                            << "KillWait=5\nMinJobAge=300\nInactiveLimit=0\n";
        std::string node_list;
        for (size_t i = 0; i < nodes.size(); ++i) {
            std::ofstream(conf, std::ios::app) << "NodeName=" << nodes[i] << " NodeAddr=" << addrs[i] << " CPUs=" << cpus
                                               << " Sockets=1 CoresPerSocket=" << cpus
                                               << " ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN\n";
            node_list += (i ? "," : "") + nodes[i];
        }
        std::ofstream(conf, std::ios::app) << "PartitionName=" << partition << " Nodes=" << node_list
                                           << " Default=YES MaxTime=INFINITE State=UP\n";
        const std::string m = dir + "/munge/";
        munged = spawn({"/usr/sbin/munged", "-F", "-f", "--key-file=" + m + "munge.key", "--socket=" + m + "munge.socket",
                        "--pid-file=" + m + "munged.pid", "--log-file=" + m + "munged.log", "--seed-file=" + m + "munged.seed"},
                       dir + "/munged.out");
        if (!wait_for([&] { return access((m + "munge.socket").c_str(), F_OK) == 0; }, 10))
            return fail("munged did not create its socket", m + "munged.log");
        slurmctld = spawn({"/usr/sbin/slurmctld", "-D", "-i", "-f", conf}, dir + "/slurmctld.out");
        if (!wait_for([&] { return run(env() + " scontrol ping 2>/dev/null | grep -q UP") == 0; }, 20))
            return fail("slurmctld did not answer scontrol ping", dir + "/slurmctld.log");
        if (nodes.size() == 1) {
            slurmd = spawn({"/usr/sbin/slurmd", "-D", "-f", conf, "-N", node}, dir + "/slurmd-" + node + ".out");
        } else {
            // unshare's mount namespace is private: the bind mount stays inside it.
            auto as_node = [&](const std::string& n) {
                return std::vector<std::string>{"/usr/bin/unshare", "--uts", "--mount", "/bin/sh", "-c",
                                                "mount --bind \"$1\" /etc/hosts && hostname " + n +
                                                    " && exec /usr/sbin/slurmd -D -f \"$0\" -N " + n,
                                                conf, dir + "/hosts"};
            };
            slurmd = spawn(as_node(nodes[0]), dir + "/slurmd-" + nodes[0] + ".out");
            std::vector<std::string> in_netns = {"/usr/bin/nsenter", "--net=/run/netns/" + NetnsHosts::name(1)};
            for (const std::string& a : as_node(nodes[1])) in_netns.push_back(a);
            netns_slurmd = spawn(in_netns, dir + "/slurmd-" + nodes[1] + ".out");
        }
        for (const std::string& n : nodes)
            if (!wait_for([&] { return run(env() + " sinfo -h -n " + n + " -o %T 2>/dev/null | grep -qx idle") == 0; }, 30))
                return fail("node " + n + " did not become idle", dir + "/slurmd-" + n + ".log");
        return "";
    }

    // Every process of this Slurm: the daemons and whatever they started (their environment
    // holds SLURM_CONF=conf; the jobs inherit it from the submitting test).
    std::vector<int> processes() const { return conf.empty() ? std::vector<int>{} : ptd_test::processes_with_env("SLURM_CONF=" + conf); }

    // The node's jobs that are not over (squeue's default states): "" when none.
    std::string live_jobs() const {
        std::string out;
        FILE* p = popen((env() + " squeue -h -o '%i %T' 2>&1").c_str(), "r");
        if (!p) return "squeue did not run";
        char buf[512];
        while (std::fgets(buf, sizeof buf, p)) out += buf;
        pclose(p);
        return out;
    }

    void stop() {
        if (dir.empty()) return;
        // Jobs first, so their steps end through Slurm; then everything of this Slurm.
        if (slurmctld > 0) run(env() + " scancel --full --partition=" + partition + " >/dev/null 2>&1");
        for (int round = 0; round < 50; ++round) {
            const std::vector<int> left = processes();
            for (pid_t p : {munged, slurmctld, slurmd, netns_slurmd}) reap(p);
            if (left.empty()) break;
            for (int p : left) kill(p, round < 10 ? SIGTERM : SIGKILL);
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        for (pid_t* p : {&munged, &slurmctld, &slurmd, &netns_slurmd}) {
            if (*p > 0) {
                kill(*p, SIGKILL);
                waitpid(*p, nullptr, 0);
            }
            *p = -1;
        }
        if (getenv("PTD_TEST_KEEP_SLURM") == nullptr) {  // set it to read the daemons' logs
            std::error_code ec;
            std::filesystem::remove_all(dir, ec);
        }
        dir.clear();
        net.reset();  // the namespace, once nothing runs in it
    }

private:
    static int run(const std::string& cmd) {
        const int rc = std::system(cmd.c_str());
        return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    }

    static void reap(pid_t p) {
        if (p > 0) waitpid(p, nullptr, WNOHANG);
    }

    template <class F>
    static bool wait_for(F ready, double seconds) {
        const auto t0 = std::chrono::steady_clock::now();
        while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
            if (ready()) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        return ready();
    }

    // A daemon in the foreground as our child, its output in `log`, SLURM_CONF in its environment.
    pid_t spawn(const std::vector<std::string>& argv, const std::string& log) {
        const pid_t pid = fork();
        if (pid != 0) return pid;
        setenv("SLURM_CONF", conf.c_str(), 1);
        const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
        const int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        setsid();  // not in the test's process group: a Ctrl-C to the test does not reach it first
        std::vector<char*> args;
        for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        execv(args[0], args.data());
        _exit(127);
    }

    std::string fail(const std::string& what, const std::string& log) {
        std::ifstream f(log);
        std::string text((std::istreambuf_iterator<char>(f)), {});
        if (text.size() > 2000) text = "..." + text.substr(text.size() - 2000);
        failed = true;
        stop();
        return what + "; the end of " + log + ":\n" + text;
    }
};
