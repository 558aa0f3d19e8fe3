// test_launcher.cpp — launch plans (ranks on hosts, the environment contract, quoting that
// survives a real shell, dry run, Slurm script) and local launches with real processes:
// the real ptd-engine on 4 and 8 ranks, a failing rank, a rank that ignores TERM, a killed
// engine rank, stop(), and `ptd launch` itself under SIGINT. After every launch no process
// carrying the run's PTD_RUN_ID may survive.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "free_port.h"
#include "launcher_test_util.h"
#include "ptd/k8s.h"
#include "ptd/launch.h"
#include "ptd/spec/presets.h"
#include "ptd/run_dir.h"
#include "ptd/slurm.h"
#include "ptd/timeline/timeline.h"
#include "text_test_util.h"

using namespace ptd;
using namespace ptd_test;
namespace fs = std::filesystem;

namespace {

const std::string kSrc = PTD_SOURCE_DIR;
const std::string kBin = PTD_BIN_DIR;

JobSpec load(const std::string& path) {
    static auto presets = load_presets();
    auto job = load_job_file(path, *presets);
    EXPECT_TRUE(job.has_value()) << (job ? "" : job.error().str());
    return *job;
}

std::string env_of(const RankPlan& r, const std::string& name) {
    for (const auto& [k, v] : r.env)
        if (k == name) return v;
    return "<unset>";
}

LaunchOptions options_in(const std::string& dir, const std::string& id) {
    LaunchOptions o;
    o.run_root = dir;
    o.run_id = id;
    o.local_engine = kBin + "/ptd-engine";
    return o;
}

// Runs the launch to its end (bounded), returning every event.
struct Collected {
    std::vector<LaunchEvent> events;
    LaunchOutcome outcome;
    int rc = -1;
    std::map<int, int> last_step;   // rank → last step metric seen
    std::map<int, int> exit_codes;
};

Collected run_to_end(LaunchPlan plan, double timeout_s, const std::function<void(Launcher&, const LaunchEvent&)>& on_event = {}) {
    Collected c;
    auto started = Launcher::start(std::move(plan));
    EXPECT_TRUE(started.has_value()) << (started ? "" : started.error().str());
    if (!started) return c;
    Launcher& run = **started;
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    LaunchEvent ev;
    bool stopped = false;
    // Until the `finished` event, which always comes last (testing next_event in the loop
    // condition as well would drop the event it took whenever the run ended first).
    for (;;) {
        if (!run.next_event(ev, 0.1)) {
            if (!stopped && std::chrono::steady_clock::now() > until) {
                ADD_FAILURE() << "launch did not finish within " << timeout_s << " s; stopping it";
                run.stop();
                stopped = true;
            }
            if (stopped && std::chrono::steady_clock::now() > until + std::chrono::seconds(60)) {
                ADD_FAILURE() << "launch did not finish 60 s after stop()";
                break;
            }
            continue;
        }
        if (ev.kind == LaunchEventKind::metric && ev.metric->kind == MetricKind::step) c.last_step[ev.rank] = ev.metric->step;
        if (ev.kind == LaunchEventKind::rank_exited) c.exit_codes[ev.rank] = ev.exit_code;
        if (on_event) on_event(run, ev);
        c.events.push_back(ev);
        if (ev.kind == LaunchEventKind::finished) break;
    }
    c.rc = run.wait();
    c.outcome = run.outcome();
    return c;
}

// A stand-in engine: prints a line, then runs `body` (sh) with the rank's environment.
std::string fake_engine(const std::string& dir, const std::string& body) {
    const std::string path = dir + "/fake-engine";
    // --free-port is what the launcher asks the first SSH host for MASTER_PORT.
    write_file(path, "#!/bin/sh\n[ \"$1\" = --free-port ] && exec " + kBin + "/ptd-engine --free-port\n" +
                         "echo \"fake engine rank $RANK of $WORLD_SIZE\"\n" + body + "\n", 0755);
    return path;
}

// A job folder with a job that names its files relatively, as users write them:
// hf_config = "cfg/tiny.json" (a GPT-2-style config small enough to train on 4 CPU ranks)
// and, with `data`, training.data = "data/corpus.txt".
std::string hf_job_folder(const std::string& dir, bool data = false) {
    write_file(dir + "/job/cfg/tiny.json",
               R"({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_head": 4, "n_layer": 4,)"
               R"( "n_positions": 64, "vocab_size": 256, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05})");
    std::string corpus;
    for (int i = 0; i < 400; ++i) corpus += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
    if (data) write_file(dir + "/job/data/corpus.txt", corpus);
    std::string job = read_file(kSrc + "/assets/jobs/tiny-local.toml");
    job.replace(job.find("preset = \"tiny-gpt\""), std::string("preset = \"tiny-gpt\"").size(), "hf_config = \"cfg/tiny.json\"");
    if (data) job.replace(job.find("data = \"synthetic\""), std::string("data = \"synthetic\"").size(), "data = \"data/corpus.txt\"");
    write_file(dir + "/job/job.toml", job);
    return dir + "/job/job.toml";
}

// Runs an sbatch script with stand-ins for srun and scontrol: srun starts one process per
// task with Slurm's variables, as Slurm would. Returns the script's exit status.
int run_sbatch_with_shims(const std::string& dir, const std::string& script_path, int tasks) {
    write_file(dir + "/shims/scontrol", "#!/bin/sh\necho 127.0.0.1\n", 0755);
    write_file(dir + "/shims/srun",
               "#!/bin/bash\n# srun stand-in: srun [options] cmd...; honours --output=PATTERN with %t\n"
               "out=; while [[ $1 == -* ]]; do case $1 in --output=*) out=${1#--output=};; esac; shift; done\n"
               "pids=(); for ((t=0; t<SLURM_NTASKS; t++)); do\n"
               "  if [[ -n $out ]]; then SLURM_PROCID=$t SLURM_LOCALID=$t \"$@\" > \"${out//%t/$t}\" 2>&1 & pids+=($!)\n"
               "  else SLURM_PROCID=$t SLURM_LOCALID=$t \"$@\" & pids+=($!); fi\n"
               "done\nrc=0; for p in \"${pids[@]}\"; do wait $p || rc=$?; done; exit $rc\n",
               0755);
    const std::string cmd = "cd / && PATH=" + shell_quote(dir + "/shims") +
                            ":$PATH SLURM_JOB_NODELIST=n1 SLURM_JOB_NUM_NODES=1 SLURM_JOB_ID=777 SLURM_NTASKS=" + std::to_string(tasks) +
                            " timeout 120 bash " + shell_quote(script_path) + " >/dev/null 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The last step each rank's log reports.
int last_logged_step(const std::string& run_dir, int rank) {
    const std::string log = read_file(run_dir + "/rank-" + std::to_string(rank) + ".log");
    int steps = 0;
    std::istringstream lines(log);
    for (std::string l; std::getline(lines, l);)
        if (auto m = parse_metrics_line(l); m && m->kind == MetricKind::step && m->rank == rank) steps = m->step;
    return steps;
}

// A stand-in engine body that reports, without printing it, what it got as the run's
// secret: its length, its SHA-256 (equal on every rank of a run, new for every run), and
// in how many process command lines and run-directory files ($4 is --run-dir) it appears.
const char* kSecretReport =
    "n=$(printf %s \"$PTD_RUN_SECRET\" | wc -c)\n"
    "count() { awk 'index($0, ENVIRON[\"PTD_RUN_SECRET\"]) {n++} END {print n+0}'; }\n"
    "cmd=$(cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | count)\n"
    "files=$(cat \"$4\"/* 2>/dev/null | count)\n"
    "hash=$(printf %s \"$PTD_RUN_SECRET\" | sha256sum | cut -c1-64)\n"
    "echo \"secret chars=$n cmdlines=$cmd run_dir_files=$files sha256=$hash\"\n";

// The secret reports of a run's ranks, by rank.
std::map<int, std::string> secret_reports(const Collected& c) {
    std::map<int, std::string> out;
    for (const LaunchEvent& ev : c.events)
        if (ev.kind == LaunchEventKind::output && ev.text.starts_with("secret ")) out[ev.rank] = ev.text;
    return out;
}

void expect_secret_handed_over(const std::map<int, std::string>& reports, int ranks) {
    ASSERT_EQ((int)reports.size(), ranks);
    const std::string hash = reports.begin()->second.substr(reports.begin()->second.find("sha256="));
    for (const auto& [rank, report] : reports) {
        EXPECT_NE(report.find("secret chars=64 cmdlines=0 run_dir_files=0 "), std::string::npos) << "rank " << rank << ": " << report;
        EXPECT_NE(report.find(hash), std::string::npos) << "rank " << rank << " got another secret: " << report;
    }
    // sha256 of the empty string: no secret at all.
    EXPECT_EQ(hash.find("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), std::string::npos);
}

std::string run_capture(const std::string& cmd, int* rc = nullptr) {
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    std::string out;
    char buf[4096];
    for (size_t n; p && (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    const int status = p ? pclose(p) : -1;
    if (rc) *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return out;
}

}  // namespace

// ---- quoting ---------------------------------------------------------------------------

TEST(ShellQuote, EveryStringSurvivesARealShell) {
    const std::vector<std::string> nasty = {
        "plain", "", "two words", "semi;colon", "$(touch /tmp/ptd-pwned)", "`id`", "it's", "\"double\"",
        "new\nline", "*", "~", "a\\b", "tab\there", "$HOME", "-n", "ünïcödé", "'", "''", "x=y"};
    std::string cmd = "printf '%s\\0'";
    for (const std::string& s : nasty) cmd += " " + shell_quote(s);
    FILE* p = popen(("/bin/sh -c " + shell_quote(cmd)).c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    pclose(p);
    std::vector<std::string> got;
    for (size_t start = 0, z; (z = out.find('\0', start)) != std::string::npos; start = z + 1) got.push_back(out.substr(start, z - start));
    EXPECT_EQ(got, nasty);
    EXPECT_FALSE(fs::exists("/tmp/ptd-pwned"));
    EXPECT_EQ(shell_quote("plain/path-1.2"), "plain/path-1.2");  // readable dry runs
}

// ---- plans -----------------------------------------------------------------------------

// The rank an engine's error names: the launcher blames it, not the first exit it saw (a
// killed rank's TP peer can exit with its "peer rank 2 … died" before the kill is reaped).
TEST(FailureBlame, TheRankTheEnginesErrorNames) {
    EXPECT_EQ(failure_blamed_rank("peer rank 2 (pid 19563 on vm) died: connection closed without goodbye "
                                  "(during tp all_reduce_sum (global ranks 2, 3))", 4), 2);
    EXPECT_EQ(failure_blamed_rank("peer rank 5 (pid 7 on host-b) stalled: no heartbeat for 60 s (during dp "
                                  "reduce_scatter (global ranks 1, 5))", 8), 5);
    EXPECT_EQ(failure_blamed_rank("aborting: rank 1 (pid 9 on a) died", 2), 1);
    EXPECT_EQ(failure_blamed_rank("peer rank 9 (pid 7 on host-b) died: …", 8), -1);  // no such rank
    EXPECT_EQ(failure_blamed_rank("peer rank x died", 8), -1);
    EXPECT_EQ(failure_blamed_rank("gloo: connection reset (during tp all_reduce (global ranks 0, 1))", 8), -1);
    EXPECT_EQ(failure_blamed_rank("lost the run's store at 10.0.0.1:29500 (rank 0 stalled, or this host cut off from it)", 8), -1);
}

TEST(LaunchPlan, LocalJobHasTheEngineContract) {
    const std::string dir = scratch_dir("plan");
    LaunchOptions o = options_in(dir, "run-a");
    o.steps = 3;
    auto plan = make_launch_plan(load(kSrc + "/assets/jobs/tiny-local.toml"), o);
    ASSERT_TRUE(plan) << plan.error().str();
    ASSERT_EQ(plan->ranks.size(), 4u);
    ASSERT_EQ(plan->hosts.size(), 1u);
    EXPECT_TRUE(plan->local);
    EXPECT_EQ(plan->run_dir, dir + "/run-a");
    EXPECT_GT(plan->master_port, 0);
    for (const RankPlan& r : plan->ranks) {
        EXPECT_EQ(env_of(r, "RANK"), std::to_string(r.rank));
        EXPECT_EQ(env_of(r, "LOCAL_RANK"), std::to_string(r.rank));
        EXPECT_EQ(env_of(r, "WORLD_SIZE"), "4");
        EXPECT_EQ(env_of(r, "LOCAL_WORLD_SIZE"), "4");
        EXPECT_EQ(env_of(r, "MASTER_ADDR"), "127.0.0.1");
        EXPECT_EQ(env_of(r, "MASTER_PORT"), std::to_string(plan->master_port));
        EXPECT_EQ(env_of(r, "PTD_RUN_ID"), "run-a");
        EXPECT_EQ(env_of(r, "CUDA_VISIBLE_DEVICES"), "<unset>");  // cpu preset
        const std::vector<std::string> want = {kBin + "/ptd-engine", "--job", dir + "/run-a/job.toml", "--run-dir",
                                               dir + "/run-a", "--steps", "3"};
        EXPECT_EQ(r.argv, want);
    }
    // Coordinates come from make_layout: tp fastest, then dp, then pp (tp 2, pp 2).
    EXPECT_EQ(plan->ranks[1].tp, 1);
    EXPECT_EQ(plan->ranks[2].pp, 1);
}

TEST(LaunchPlan, HostfileMapsRanksToHostsAndGpus) {
    const std::string dir = scratch_dir("plan");
    write_file(dir + "/hosts", "# two nodes\nalice@host-a:2222 slots=4\nhost-b slots=4\n");
    JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    job.cluster.nodes = 2;
    job.cluster.gpu.name = "h100-sxm";  // GPUs: every one visible, the engine takes LOCAL_RANK
    job.parallel.dp = 2;
    job.launch.port = 2200;
    auto plan = make_launch_plan(job, [&] {
        auto o = options_in(dir, "run-b");
        o.hostfile = dir + "/hosts";
        return o;
    }());
    ASSERT_TRUE(plan) << plan.error().str();
    EXPECT_FALSE(plan->local);  // --hosts means SSH
    ASSERT_EQ(plan->hosts.size(), 2u);
    EXPECT_EQ(plan->hosts[0].display, "alice@host-a:2222");
    EXPECT_EQ(plan->hosts[1].display, "host-b:2200");  // launch.port fills in
    EXPECT_EQ(plan->master_addr, "host-a");
    EXPECT_EQ(plan->master_port, 0);  // chosen on host-a at launch
    EXPECT_EQ(plan->hosts[0].ranks, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(plan->hosts[1].ranks, (std::vector<int>{4, 5, 6, 7}));
    for (const RankPlan& r : plan->ranks) {
        EXPECT_EQ(r.host, r.rank / 4);
        EXPECT_EQ(env_of(r, "LOCAL_RANK"), std::to_string(r.rank % 4));
        EXPECT_EQ(env_of(r, "CUDA_VISIBLE_DEVICES"), "<unset>");  // every GPU visible: NCCL P2P / NVLink
        EXPECT_EQ(env_of(r, "LOCAL_WORLD_SIZE"), "4");
        EXPECT_EQ(r.argv[0], "ptd-engine");  // remote PATH without --upload
        EXPECT_EQ(r.argv[2], plan->hosts[r.host].remote_dir + "/job.toml");
    }
    set_master_port(*plan, 29611);
    EXPECT_EQ(env_of(plan->ranks[5], "MASTER_PORT"), "29611");
    EXPECT_NE(plan->ranks[5].shell_command.find("export MASTER_PORT=29611;"), std::string::npos);
    const std::string dry = format_dry_run(*plan);
    EXPECT_NE(dry.find("host 1 host-b:2200: ranks 4-7"), std::string::npos) << dry;
    EXPECT_NE(dry.find("ssh alice@host-a:2222 printf"), std::string::npos) << dry;
}

// Issue 14: a GPU job over a 2-node hostfile runs one rank per GPU per host, and the dry
// run names, per rank, its host, LOCAL_RANK, CUDA_VISIBLE_DEVICES and the backend.
TEST(LaunchPlan, DryRunShowsEveryRanksHostGpuAndBackend) {
    const std::string dir = scratch_dir("plan");
    write_file(dir + "/hosts", "gpu-a slots=8\ngpu-b slots=8\n");
    JobSpec job = load(kSrc + "/assets/jobs/llama3-8b-h100.toml");  // 8 × h100-sxm per node, tp 2 · dp 4
    job.cluster.nodes = 2;
    job.parallel.dp = 8;
    auto plan = make_launch_plan(job, [&] {
        auto o = options_in(dir, "run-gpu");
        o.hostfile = dir + "/hosts";
        return o;
    }());
    ASSERT_TRUE(plan) << plan.error().str();
    ASSERT_EQ(plan->ranks.size(), 16u);
    EXPECT_EQ(plan->hosts[0].ranks.size(), 8u);
    EXPECT_EQ(plan->hosts[1].ranks.size(), 8u);
    const std::string dry = format_dry_run(*plan);
    EXPECT_NE(dry.find("backend: --backend auto (ptd-engine's default): cuda on each rank's GPU; a host whose "
                       "ptd-engine lacks CUDA or sees no GPU refuses the job (--backend cpu runs its layout on CPUs on "
                       "purpose)\n"),
              std::string::npos)
        << dry;
    for (const RankPlan& r : plan->ranks) {
        const std::string host = r.rank < 8 ? "gpu-a" : "gpu-b";
        const std::string local = std::to_string(r.rank % 8);
        EXPECT_NE(dry.find("  rank " + std::to_string(r.rank) + " (tp " + std::to_string(r.tp) + ", pp 0, dp " +
                           std::to_string(r.dp) + ", local " + local + "):\n    device: host " + host + ", LOCAL_RANK " +
                           local + ", every GPU of the host visible (cuda:" + local + " in the engine), --backend auto\n"),
                  std::string::npos)
            << "rank " << r.rank << "\n" << dry;
        EXPECT_EQ(std::count(r.argv.begin(), r.argv.end(), "--backend"), 0);  // auto: the engine's default
    }
}

TEST(LaunchPlan, BackendFlagReachesEveryRankTheDryRunAndTheSlurmScript) {
    const std::string dir = scratch_dir("plan");
    JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    job.cluster.gpu.name = "h100-sxm";
    auto o = options_in(dir, "run-be");
    o.backend = "cuda";
    auto plan = make_launch_plan(job, o);
    ASSERT_TRUE(plan) << plan.error().str();
    for (const RankPlan& r : plan->ranks) {
        auto at = std::find(r.argv.begin(), r.argv.end(), "--backend");
        ASSERT_NE(at, r.argv.end());
        ASSERT_NE(at + 1, r.argv.end());
        EXPECT_EQ(*(at + 1), "cuda");
    }
    const std::string dry = format_dry_run(*plan);
    EXPECT_NE(dry.find("backend: --backend cuda (ptd launch --backend): every rank must see its GPU, else it exits "
                       "saying why\n"),
              std::string::npos)
        << dry;
    EXPECT_NE(dry.find("device: host localhost, LOCAL_RANK 3, every GPU of the host visible (cuda:3 in the engine), "
                       "--backend cuda\n"),
              std::string::npos)
        << dry;
    o.slurm = true;
    auto slurm = make_launch_plan(job, o);
    ASSERT_TRUE(slurm) << slurm.error().str();
    EXPECT_NE(slurm_script(*slurm).find(" --backend cuda"), std::string::npos) << slurm_script(*slurm);

    // A CPU job says so; the backend given after -- is what the dry run reports.
    JobSpec cpu = load(kSrc + "/assets/jobs/tiny-local.toml");
    auto oc = options_in(dir, "run-cpu");
    oc.engine_args = {"--backend", "cpu"};
    auto cpu_plan = make_launch_plan(cpu, oc);
    ASSERT_TRUE(cpu_plan) << cpu_plan.error().str();
    const std::string cpu_dry = format_dry_run(*cpu_plan);
    EXPECT_NE(cpu_dry.find("backend: --backend cpu (the engine arguments after --): the CPU backend\n"), std::string::npos)
        << cpu_dry;
    EXPECT_NE(cpu_dry.find("device: host localhost, LOCAL_RANK 0, CUDA_VISIBLE_DEVICES not set (cluster.gpu = \"cpu\"), "
                           "--backend cpu\n"),
              std::string::npos)
        << cpu_dry;
}

TEST(LaunchPlan, BadOrTwiceGivenBackendIsRejectedBeforeAnyRankStarts) {
    const std::string dir = scratch_dir("plan");
    JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    auto o = options_in(dir, "run-bad");
    o.backend = "gpu";
    auto bad = make_launch_plan(job, o);
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().str().find("--backend: got \"gpu\"; allowed: auto, cpu, cuda, cuda-sim"), std::string::npos)
        << bad.error().str();
    o.backend = "";
    o.engine_args = {"--backend=CUDA"};
    auto bad_after = make_launch_plan(job, o);
    ASSERT_FALSE(bad_after);
    EXPECT_NE(bad_after.error().str().find("-- --backend: got \"CUDA\""), std::string::npos) << bad_after.error().str();
    o.backend = "cpu";
    o.engine_args = {"--backend", "cuda"};
    auto twice = make_launch_plan(job, o);
    ASSERT_FALSE(twice);
    EXPECT_NE(twice.error().str().find("--backend: given twice (--backend cpu and -- --backend cuda)"), std::string::npos)
        << twice.error().str();
}

TEST(LaunchPlan, ForwardsNamedEnvironmentOnly) {
    const std::string dir = scratch_dir("plan");
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("GLOO_SOCKET_IFNAME", "lo", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("PTD_TEST_USER_VAR", "a b;c", 1);
    unsetenv("PTD_TEST_UNSET_VAR");
    setenv("PTD_TEST_NOT_NAMED", "x", 1);
    JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    job.launch.env = {"PTD_TEST_USER_VAR", "PTD_TEST_UNSET_VAR"};
    auto plan = make_launch_plan(job, options_in(dir, "run-c"));
    ASSERT_TRUE(plan) << plan.error().str();
    const RankPlan& r = plan->ranks[3];
    EXPECT_EQ(env_of(r, "NCCL_DEBUG"), "INFO");
    EXPECT_EQ(env_of(r, "GLOO_SOCKET_IFNAME"), "lo");
    EXPECT_EQ(env_of(r, "OMP_NUM_THREADS"), "1");
    EXPECT_EQ(env_of(r, "PTD_TEST_USER_VAR"), "a b;c");
    EXPECT_EQ(env_of(r, "PTD_TEST_UNSET_VAR"), "<unset>");
    EXPECT_EQ(env_of(r, "PTD_TEST_NOT_NAMED"), "<unset>");
    unsetenv("OMP_NUM_THREADS");

    job.launch.env = {"BAD NAME"};
    auto bad = make_launch_plan(job, options_in(dir, "run-d"));
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().str().find("launch.env"), std::string::npos) << bad.error().str();
}

TEST(LaunchPlan, RanksReadTheJobWithAnAbsoluteDataPath) {
    const std::string dir = scratch_dir("plan");
    auto plan = make_launch_plan(load(kSrc + "/assets/jobs/tiny-gpt-8rank.toml"), options_in(dir, "run-e"));
    ASSERT_TRUE(plan) << plan.error().str();
    static auto presets = load_presets();
    auto reread = load_job_text(plan->job_toml, dir + "/run-e/job.toml", *presets);
    ASSERT_TRUE(reread) << reread.error().str();
    EXPECT_TRUE(fs::path(reread->training.data).is_absolute()) << reread->training.data;
    EXPECT_TRUE(fs::exists(reread->training.data)) << reread->training.data;
    EXPECT_EQ(reread->parallel.tp, 2);
    EXPECT_EQ(reread->world_size(), 8);
}

TEST(LaunchPlan, ErrorsNameTheKey) {
    const std::string dir = scratch_dir("plan");
    LaunchOptions o = options_in(dir, "run-f");
    o.local_engine = dir + "/no-such-engine";
    auto plan = make_launch_plan(load(kSrc + "/assets/jobs/tiny-local.toml"), o);
    ASSERT_FALSE(plan);
    EXPECT_NE(plan.error().str().find("launch.engine"), std::string::npos) << plan.error().str();
    EXPECT_NE(plan.error().str().find("no-such-engine"), std::string::npos) << plan.error().str();

    o = options_in(dir, "../escape");
    plan = make_launch_plan(load(kSrc + "/assets/jobs/tiny-local.toml"), o);
    ASSERT_FALSE(plan);
    EXPECT_NE(plan.error().str().find("--run-id"), std::string::npos) << plan.error().str();

    JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    job.launch.mode = LaunchMode::ssh;
    plan = make_launch_plan(job, options_in(dir, "run-g"));
    ASSERT_FALSE(plan);
    EXPECT_NE(plan.error().str().find("needs hosts"), std::string::npos) << plan.error().str();
}

// Run ids name one folder under the run root; anything else (a path, "..", ".", an option,
// control characters, a huge string) is refused naming the flag, the value and the rule.
TEST(LaunchPlan, RunIdIsOnePlainFolderName) {
    const std::string dir = scratch_dir("runid");
    const JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    for (const std::string& bad : {std::string(".."), std::string("."), std::string("../up"), std::string("a/b"),
                                   std::string("-rf"), std::string(".hidden"), std::string("tab\there"),
                                   std::string("new\nline"), std::string(300, 'x'), std::string("sp ace")}) {
        auto plan = make_launch_plan(job, options_in(dir, bad));
        ASSERT_FALSE(plan) << "accepted run id [" << bad << "]";
        const std::string e = plan.error().str();
        EXPECT_NE(e.find("--run-id"), std::string::npos) << e;
        EXPECT_NE(e.find("allowed: one folder name"), std::string::npos) << e;
        EXPECT_EQ(e.find('\n'), e.size() - 1) << "one line, control characters escaped: " << e;
        EXPECT_LT(e.size(), 400u) << "a huge value is cut: " << e;
    }
    EXPECT_NE(make_launch_plan(job, options_in(dir, "..")).error().str().find("got \"..\""), std::string::npos);
    for (const std::string& good : {std::string("run-1"), std::string("2026.01.01_a"), std::string(128, 'r')})
        EXPECT_TRUE(make_launch_plan(job, options_in(dir, good))) << good;
    // Generated ids never repeat within one process (the studio launches many times).
    LaunchOptions o = options_in(dir, "");
    auto a = make_launch_plan(job, o), b = make_launch_plan(job, o);
    ASSERT_TRUE(a && b);
    EXPECT_NE(a->run_id, b->run_id);
    EXPECT_EQ(run_id_problem(a->run_id), "");
}

// Files libssh reads by itself (--ssh-config, launch.identity, --known-hosts) must be
// regular files: a FIFO would hang the connect. And PTD_SSH_KEEPALIVE_S must be a number.
TEST(LaunchPlan, SshFilesMustBeRegularAndKeepaliveANumber) {
    const std::string dir = scratch_dir("sshfiles");
    const JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    const std::string fifo = dir + "/fifo";
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    for (const char* key : {"--ssh-config", "--known-hosts", "launch.identity"}) {
        LaunchOptions o = options_in(dir, "");
        JobSpec j = job;
        if (key == std::string("--ssh-config")) o.ssh_config = fifo;
        if (key == std::string("--known-hosts")) o.known_hosts = fifo;
        if (key == std::string("launch.identity")) j.launch.identity = fifo;
        auto plan = make_launch_plan(j, o);
        ASSERT_FALSE(plan) << key << ": a FIFO was accepted";
        const std::string e = plan.error().str();
        EXPECT_NE(e.find("FIFO"), std::string::npos) << e;
        EXPECT_NE(e.find(key), std::string::npos) << e;
    }
    LaunchOptions missing = options_in(dir, "");
    missing.ssh_config = dir + "/no-such-config";
    EXPECT_FALSE(make_launch_plan(job, missing)) << "a named ssh config that does not exist";
    LaunchOptions dev_null = options_in(dir, "");
    dev_null.ssh_config = "/dev/null";  // `ssh -F /dev/null`
    EXPECT_TRUE(make_launch_plan(job, dev_null));

    for (const char* bad : {"nan", "inf", "0.1", "5s", ""}) {
        setenv("PTD_SSH_KEEPALIVE_S", bad, 1);
        auto plan = make_launch_plan(job, options_in(dir, ""));
        ASSERT_FALSE(plan) << "PTD_SSH_KEEPALIVE_S=" << bad;
        EXPECT_NE(plan.error().str().find("PTD_SSH_KEEPALIVE_S"), std::string::npos) << plan.error().str();
    }
    setenv("PTD_SSH_KEEPALIVE_S", "2.5", 1);
    EXPECT_TRUE(make_launch_plan(job, options_in(dir, "")));
    unsetenv("PTD_SSH_KEEPALIVE_S");
}

// Every path the job names is resolved against the job file's folder, whatever the
// current folder: the run directory's job.toml names the files absolutely; over SSH the
// config goes next to each host's job.toml (data too with --upload).
TEST(LaunchPlan, JobFilesAreResolvedAgainstTheJobFile) {
    const std::string dir = scratch_dir("files");
    const std::string job_path = hf_job_folder(dir, /*data=*/true);
    const std::string cwd = fs::current_path();
    fs::current_path("/");  // the job's relative paths must not depend on this
    const JobSpec job = load(job_path);
    const auto refs = job_file_refs(job);
    ASSERT_EQ(refs.size(), 2u);
    EXPECT_EQ(refs[0].key, "model.hf_config");
    EXPECT_EQ(refs[0].written, "cfg/tiny.json");
    EXPECT_EQ(refs[0].path, dir + "/job/cfg/tiny.json");
    EXPECT_EQ(refs[1].key, "training.data");
    EXPECT_EQ(refs[1].path, dir + "/job/data/corpus.txt");

    auto plan = make_launch_plan(job, options_in(dir, "files-local"));
    fs::current_path(cwd);
    ASSERT_TRUE(plan) << plan.error().str();
    static auto presets = load_presets();
    auto reread = load_job_text(plan->job_toml, plan->run_dir + "/job.toml", *presets);
    ASSERT_TRUE(reread) << reread.error().str() << "\n" << plan->job_toml;
    EXPECT_EQ(reread->origin.model_hf_config, dir + "/job/cfg/tiny.json");
    EXPECT_EQ(reread->training.data, dir + "/job/data/corpus.txt");
    EXPECT_EQ(reread->model, job.model);

    // SSH without --upload: the config (part of the job) is sent, the data must be there.
    JobSpec ssh_job = job;
    ssh_job.launch.mode = LaunchMode::ssh;
    ssh_job.cluster.hosts = {"host-a"};
    ssh_job.launch.identity = "keys/id_ed25519";  // a local file too: next to the job
    auto ssh = make_launch_plan(ssh_job, options_in(dir, "files-ssh"));
    ASSERT_TRUE(ssh) << ssh.error().str();
    EXPECT_EQ(ssh->job.launch.identity, dir + "/job/keys/id_ed25519");
    ASSERT_EQ(ssh->files.size(), 2u);
    EXPECT_EQ(ssh->files[0].remote_name, "tiny.json");
    EXPECT_EQ(ssh->files[1].remote_name, "");
    auto remote = load_job_text(ssh->remote_job_toml, dir + "/job/cfg/job.toml", *presets);  // next to the copy
    ASSERT_TRUE(remote) << remote.error().str() << "\n" << ssh->remote_job_toml;
    EXPECT_EQ(remote->origin.model_hf_config, "tiny.json");
    EXPECT_EQ(remote->training.data, dir + "/job/data/corpus.txt");
    const std::string dry = format_dry_run(*ssh);
    EXPECT_NE(dry.find("tiny.json (model.hf_config: " + dir + "/job/cfg/tiny.json)"), std::string::npos) << dry;
    EXPECT_NE(dry.find("not sent (without --upload): training.data " + dir + "/job/data/corpus.txt"), std::string::npos) << dry;
    LaunchOptions up = options_in(dir, "files-upload");
    up.upload = true;
    ssh = make_launch_plan(ssh_job, up);
    ASSERT_TRUE(ssh) << ssh.error().str();
    EXPECT_EQ(ssh->files[1].remote_name, "corpus.txt");
    EXPECT_NE(ssh->remote_job_toml.find("data = \"corpus.txt\""), std::string::npos) << ssh->remote_job_toml;

    // A file that cannot be sent is named before anything starts.
    fs::remove(dir + "/job/data/corpus.txt");
    auto missing = make_launch_plan(ssh_job, up);
    ASSERT_FALSE(missing);
    EXPECT_NE(missing.error().str().find("training.data"), std::string::npos) << missing.error().str();
    EXPECT_NE(missing.error().str().find("does not exist"), std::string::npos) << missing.error().str();
}

// The exact remote command line, run by a real shell: every argument and variable arrives
// byte for byte even with spaces, ';', $(), backticks, quotes and newlines in them.
TEST(LaunchPlan, RemoteCommandIsQuotedForAnyValue) {
    const std::string dir = scratch_dir("quote");
    const std::string weird_dir = dir + "/we ird;$(touch " + dir + "/pwned)'q\"`id`";
    const std::string engine = weird_dir + "/eng ine";
    write_file(engine, "#!/bin/sh\nfor a in \"$@\"; do printf '[%s]\\n' \"$a\"; done\nprintf 'RANK=%s\\nVAR=%s\\n' \"$RANK\" \"$PTD_QUOTE_VAR\"\n", 0755);
    const std::string value = "x y; $(touch " + dir + "/pwned2) `id` 'single' \"double\"\nnext";
    setenv("PTD_QUOTE_VAR", value.c_str(), 1);
    JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    job.launch.mode = LaunchMode::ssh;
    job.cluster.hosts = {"host;$(reboot)"};
    job.launch.engine = engine;
    job.launch.env = {"PTD_QUOTE_VAR"};
    LaunchOptions o = options_in(dir, "run-q");
    o.engine_args = {"--flag=a b", "$(touch " + dir + "/pwned3)", "it's"};
    auto plan = make_launch_plan(job, o);
    ASSERT_TRUE(plan) << plan.error().str();
    set_master_port(*plan, 4242);
    FILE* p = popen(("/bin/sh -c " + shell_quote(plan->ranks[2].shell_command) + " 2>&1").c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << out;
    EXPECT_NE(out.find("ptd-launch-pid "), std::string::npos) << out;
    EXPECT_NE(out.find("[--flag=a b]\n[$(touch " + dir + "/pwned3)]\n[it's]\n"), std::string::npos) << out;
    EXPECT_NE(out.find("[" + plan->hosts[0].remote_dir + "/job.toml]"), std::string::npos) << out;
    EXPECT_NE(out.find("RANK=2\nVAR=" + value + "\n"), std::string::npos) << out;
    for (const char* f : {"/pwned", "/pwned2", "/pwned3"}) EXPECT_FALSE(fs::exists(dir + f)) << f;
    unsetenv("PTD_QUOTE_VAR");
}

TEST(LaunchPlan, SlurmScriptRunsTheSameRanks) {
    const std::string dir = scratch_dir("slurm");
    JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    LaunchOptions o = options_in(dir, "run-s");
    o.slurm = true;
    o.steps = 2;
    auto plan = make_launch_plan(job, o);
    ASSERT_TRUE(plan) << plan.error().str();
    const std::string script = slurm_script(*plan);
    EXPECT_NE(script.find("#SBATCH --nodes=1"), std::string::npos) << script;
    EXPECT_NE(script.find("#SBATCH --ntasks-per-node=4"), std::string::npos) << script;
    EXPECT_NE(script.find("scontrol show hostnames"), std::string::npos) << script;
    EXPECT_EQ(script.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << script;  // cpu preset

    // Run it for real with stand-ins for srun and scontrol: the real engines train.
    fs::create_directories(plan->run_dir);
    write_file(plan->run_dir + "/job.toml", plan->job_toml);
    write_file(plan->run_dir + "/sbatch.sh", script, 0755);
    ASSERT_EQ(run_sbatch_with_shims(dir, plan->run_dir + "/sbatch.sh", 4), 0) << read_file(plan->run_dir + "/rank-0.log");
    for (int r = 0; r < 4; ++r)
        EXPECT_EQ(last_logged_step(plan->run_dir, r), 2) << "rank " << r << ":\n"
                                                         << read_file(plan->run_dir + "/rank-" + std::to_string(r) + ".log");
}

// --preflight under Slurm: the probes' srun and the judge come before the training srun, with
// the node-local copies under sbcast and the dry run saying so; --force keeps training.
TEST(LaunchPlan, SlurmScriptRunsThePreflightBeforeTheRanks) {
    const std::string dir = scratch_dir("slurm-pf");
    JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    job.launch.slurm.sbcast = true;
    LaunchOptions o = options_in(dir, "run-pf");
    o.slurm = true;
    auto plan = make_launch_plan(job, o);
    ASSERT_TRUE(plan) << plan.error().str();
    EXPECT_EQ(slurm_script(*plan).find("preflight"), std::string::npos);  // none unless asked
    plan->slurm_preflight_ptd = "/opt/ptd/bin/ptd";
    const std::string script = slurm_script(*plan);
    const size_t probes = script.find("--output=" + plan->run_dir + "/preflight/rank-%t.log");
    const size_t judge = script.find("/opt/ptd/bin/ptd calibrate --collect " + plan->run_dir + "/preflight --check");
    const size_t train = script.find("--output=" + plan->run_dir + "/rank-%t.log");
    ASSERT_NE(probes, std::string::npos) << script;
    ASSERT_NE(judge, std::string::npos) << script;
    ASSERT_NE(train, std::string::npos) << script;
    EXPECT_LT(probes, judge);
    EXPECT_LT(judge, train);
    EXPECT_NE(script.find("\"/tmp/ptd-engine.$SLURM_JOB_ID\" --job \"/tmp/ptd-job.$SLURM_JOB_ID.toml\" --run-dir " + plan->run_dir +
                          "/preflight --probe --quick"),
              std::string::npos)
        << script;  // the node-local copies sbcast made
    EXPECT_NE(script.find("mkdir -p " + plan->run_dir + " " + plan->run_dir + "/preflight"), std::string::npos) << script;
    EXPECT_NE(script.find("[[ -x /opt/ptd/bin/ptd ]]"), std::string::npos) << script;
    EXPECT_NE(script.find("not training (launch.slurm.exclude leaves a node out, --force trains anyway)\" >&2; exit 1"),
              std::string::npos) << script;
    EXPECT_NE(format_dry_run(*plan).find("preflight: in the sbatch script"), std::string::npos);
    plan->slurm_preflight_force = true;
    EXPECT_NE(slurm_script(*plan).find("ptd: --preflight --force: training despite the preflight"), std::string::npos);
}

// [launch.slurm] in the script (issue 32): each key as its #SBATCH line or srun option, and
// GPU visibility: with gpu_bind Slurm's alone; without it, each task takes the LOCAL_RANK-th
// of the GPUs Slurm gave the node (a partial node's "4,5,6,7"), run through the script with
// the srun stand-in.
TEST(LaunchPlan, SlurmScriptWritesTheClusterKeysAndLeavesGpuBindingToSlurm) {
    const std::string dir = scratch_dir("slurm-keys");
    JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    job.cluster.gpu.name = "h100-sxm";  // a GPU job: the ranks' GPU visibility is at stake
    ptd::SlurmSpec& s = job.launch.slurm;
    s.partition = "gpu";
    s.account = "proj";
    s.qos = "high";
    s.time = "04:00:00";
    s.exclusive = true;
    s.cpus_per_task = 12;
    s.mem = "0";
    s.constraint = "h100&ib";
    s.exclude = "gpu07";
    s.extra_sbatch = {"--reservation=big"};
    s.setup = "export PTD_SETUP_RAN=yes";
    write_file(dir + "/fake-engine", "#!/bin/sh\necho \"rank=$RANK cvd=$CUDA_VISIBLE_DEVICES setup=$PTD_SETUP_RAN\"\n", 0755);
    LaunchOptions o = options_in(dir, "run-k");
    o.local_engine = dir + "/fake-engine";
    o.slurm = true;
    auto plan = make_launch_plan(job, o);
    ASSERT_TRUE(plan) << plan.error().str();
    const std::string script = slurm_script(*plan);
    expect_mentions(script, {"#SBATCH --partition=gpu\n", "#SBATCH --account=proj\n", "#SBATCH --qos=high\n",
                             "#SBATCH --time=04:00:00\n", "#SBATCH --exclusive\n", "#SBATCH --cpus-per-task=12\n",
                             "#SBATCH --mem=0\n", "#SBATCH --constraint=h100&ib\n", "#SBATCH --exclude=gpu07\n",
                             "#SBATCH --reservation=big\n", "srun --kill-on-bad-exit=1 --distribution=block --cpus-per-task=12 ",
                             "# launch.slurm.setup\nexport PTD_SETUP_RAN=yes\n"});
    EXPECT_EQ(system(("printf '%s' " + shell_quote(script) + " | bash -n").c_str()), 0) << script;

    fs::create_directories(plan->run_dir);
    write_file(plan->run_dir + "/job.toml", plan->job_toml);
    write_file(plan->run_dir + "/sbatch.sh", script, 0755);
    setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7", 1);  // what Slurm sets for a job given GPUs 4-7 of a node
    const int rc = run_sbatch_with_shims(dir, plan->run_dir + "/sbatch.sh", 4);
    unsetenv("CUDA_VISIBLE_DEVICES");
    ASSERT_EQ(rc, 0);
    for (int r = 0; r < 4; ++r)
        EXPECT_EQ(read_file(plan->run_dir + "/rank-" + std::to_string(r) + ".log"),
                  "rank=" + std::to_string(r) + " cvd=" + std::to_string(4 + r) + " setup=yes\n");

    // gpu_bind: Slurm binds each task to its GPU; the script does not touch the variable.
    job.launch.slurm = {};
    job.launch.slurm.gpu_bind = "closest";
    o.run_id = "run-b";
    auto bound = make_launch_plan(job, o);
    ASSERT_TRUE(bound) << bound.error().str();
    const std::string bound_script = slurm_script(*bound);
    EXPECT_NE(bound_script.find("srun --kill-on-bad-exit=1 --distribution=block --gpu-bind=closest "), std::string::npos) << bound_script;
    EXPECT_EQ(bound_script.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << bound_script;
}

// A run directory the nodes do not see stops the job before any rank starts, naming the
// path; launch.slurm.sbcast copies the engine to each node instead (sbatch script, pyxis).
TEST(LaunchPlan, SlurmScriptRefusesARunDirectoryTheNodesDoNotSee) {
    const std::string dir = scratch_dir("slurm-shared");
    JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    LaunchOptions o = options_in(dir, "run-n");
    o.slurm = true;
    auto plan = make_launch_plan(job, o);
    ASSERT_TRUE(plan) << plan.error().str();
    const std::string script = slurm_script(*plan);
    // The script is run without the run directory's job.toml there: what a node off the shared
    // file system sees.
    fs::create_directories(dir + "/elsewhere");
    write_file(dir + "/elsewhere/sbatch.sh", script, 0755);
    const std::string cmd = "cd / && PATH=" + shell_quote(dir + "/shims") + ":$PATH SLURM_JOB_NODELIST=n1 SLURM_JOB_NUM_NODES=1 SLURM_JOB_ID=5 SLURM_NTASKS=1 "
                            "bash " + shell_quote(dir + "/elsewhere/sbatch.sh") + " 2>&1";
    run_sbatch_with_shims(dir, "/dev/null", 1);  // writes the shims
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof buf, p)) out += buf;
    const int status = pclose(p);
    EXPECT_NE(WEXITSTATUS(status), 0) << out;
    expect_mentions(out, {plan->run_dir + "/job.toml is not there", "launch.slurm.sbcast"});
    EXPECT_FALSE(fs::exists(plan->run_dir + "/rank-0.log"));

    job.launch.slurm.sbcast = true;
    o.run_id = "run-c";
    auto staged = make_launch_plan(job, o);
    ASSERT_TRUE(staged);
    expect_mentions(slurm_script(*staged), {"sbcast --force " + kBin + "/ptd-engine \"/tmp/ptd-engine.$SLURM_JOB_ID\"",
                                            "\"/tmp/ptd-engine.$SLURM_JOB_ID\" --job \"/tmp/ptd-job.$SLURM_JOB_ID.toml\""});
    job.launch.slurm = {};
    job.launch.slurm.container_image = "nvcr.io#nvidia/pytorch:24.05-py3";
    job.launch.slurm.container_mounts = {"/data:/data:ro"};
    o.run_id = "run-p";
    auto pyxis = make_launch_plan(job, o);
    ASSERT_TRUE(pyxis);
    expect_mentions(slurm_script(*pyxis), {"--container-image='nvcr.io#nvidia/pytorch:24.05-py3' --container-mounts=" +
                                               shell_quote(pyxis->run_dir + ":" + pyxis->run_dir + ",/data:/data:ro"),
                                           "' ptd-engine --job"});
}

// Slurm host lists as squeue and sacct print them, expanded in order with their zero padding
// (the names `ptd watch` shows for a Slurm run's nodes).
TEST(SlurmNodes, HostListsExpandInOrder) {
    using V = std::vector<std::string>;
    EXPECT_EQ(slurm_expand_nodes("gpu[01-03,07],login1"), (V{"gpu01", "gpu02", "gpu03", "gpu07", "login1"}));
    EXPECT_EQ(slurm_expand_nodes("n1"), (V{"n1"}));
    EXPECT_EQ(slurm_expand_nodes("a[8-10]b,c[1]"), (V{"a8b", "a9b", "a10b", "c1"}));
    EXPECT_EQ(slurm_expand_nodes(""), V{});
    EXPECT_EQ(slurm_expand_nodes("(null)"), V{});
}

// The batch script's preflight lines in a job's output: only one that stopped the job counts;
// --force's "training despite the preflight" leaves a later failure to srun's words.
TEST(SlurmNodes, OnlyAPreflightThatStoppedTheJobIsItsReason) {
    const std::string flagged = "host 1 (n2) is 40% slower at GEMMs\nptd: --preflight flagged a node or could not judge them "
                                "(above); not training (launch.slurm.exclude leaves a node out, --force trains anyway)\n";
    EXPECT_EQ(slurm_preflight_stop(flagged), "--preflight flagged a node or could not judge them (above); not training "
                                             "(launch.slurm.exclude leaves a node out, --force trains anyway)");
    EXPECT_EQ(slurm_preflight_stop("srun: error: n1: task 3: Exited with exit code 3\nptd: --preflight: the probes failed "
                                   "(their logs: /r/preflight); not training\n"),
              "--preflight: the probes failed (their logs: /r/preflight); not training");
    EXPECT_EQ(slurm_preflight_stop("ptd: --preflight --force: training despite the preflight\n"
                                   "srun: error: n1: task 5: Killed\n"),
              std::nullopt);
    EXPECT_EQ(slurm_preflight_stop("  ptd: --preflight ... not training\n"), std::nullopt);  // only at a line's start
    EXPECT_EQ(slurm_preflight_stop(""), std::nullopt);
}

// A YAML manifest as JSON (Debian's python3-yaml reads it as the API server's YAML parser does).
static nlohmann::json yaml_as_json(const std::string& path) {
    Proc p = run_captured("/usr/bin/python3 -c 'import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))' " +
                          shell_quote(path));
    EXPECT_EQ(p.rc, 0) << p.err;
    return p.rc == 0 ? nlohmann::json::parse(p.out) : nlohmann::json::object();
}

// The plans of one job: the one `ptd launch` makes for it here, and the one `ptd launch --k8s`
// makes (Kubernetes places the ranks on its nodes, as Slurm does).
static std::pair<LaunchPlan, LaunchPlan> local_and_k8s_plans(const JobSpec& job, LaunchOptions o) {
    auto local = make_launch_plan(job, o);
    EXPECT_TRUE(local) << local.error().str();
    o.slurm = true;
    auto k8s = make_launch_plan(job, o);
    EXPECT_TRUE(k8s) << k8s.error().str();
    return {local ? std::move(*local) : LaunchPlan{}, k8s ? std::move(*k8s) : LaunchPlan{}};
}

// A container's env (the manifest's list) as " NAME='value'" words for `env`, as the kubelet
// gives it: PTD_RUN_SECRET from its Secret (here `secret`), the others as written.
static std::string container_env(const nlohmann::json& env, const std::string& secret, const std::set<std::string>& skip = {}) {
    std::string out;
    for (const auto& e : env) {
        const std::string name = e["name"].get<std::string>();
        if (skip.count(name)) continue;
        if (e.contains("valueFrom")) {
            EXPECT_EQ(e["valueFrom"]["secretKeyRef"]["key"], "PTD_RUN_SECRET") << name;
            out += " " + name + "=" + shell_quote(secret);
        } else {
            out += " " + name + "=" + shell_quote(e["value"].get<std::string>());
        }
    }
    return out;
}
const std::string kPodSecret(64, 'a');  // what the kubelet would read from the run's Secret

// "NAME=value" lines of a rank's log (what the stand-in engine printed from `env`).
static std::map<std::string, std::string> env_in_log(const std::string& path) {
    std::map<std::string, std::string> got;
    std::istringstream log(read_file(path));
    for (std::string line; std::getline(log, line);)
        if (const size_t eq = line.find('='); eq != std::string::npos && !line.starts_with("argv")) got[line.substr(0, eq)] = line.substr(eq + 1);
    return got;
}

// `ptd launch --k8s` (issue 32 points 3 and 4): the JobSet validates against JobSet's own CRD
// schema (tests/data/k8s, strict: no field the schema lacks), and run as its pods would run
// it (each pod's script with its JOB_COMPLETION_INDEX and the container's env, the engine a
// stand-in that prints what it got), every rank gets the environment and arguments `ptd
// launch` gives it locally; only MASTER_ADDR and MASTER_PORT are the transport's own.
TEST(LaunchK8s, JobSetValidatesAgainstItsCrdAndGivesEachRankTheEnvironmentOfPtdLaunch) {
    const std::string dir = scratch_dir("k8s");
    JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    job.cluster.nodes = 2;            // two pods of 2 ranks: RANK spans the pod index
    job.cluster.gpus_per_node = 2;
    job.cluster.gpu.name = "h100-sxm";  // a GPU job: each rank's CUDA_VISIBLE_DEVICES too
    LaunchOptions o = options_in(dir, "k8s-env");
    o.steps = 3;
    const auto [local, plan] = local_and_k8s_plans(job, o);
    ASSERT_FALSE(plan.ranks.empty());
    const std::string yaml = ptd::k8s_jobset(plan, "registry.example.com/ptd:1");
    write_file(dir + "/jobset.yaml", yaml);
    const std::string check = kSrc + "/tests/k8s_schema_check.py " + kSrc + "/tests/data/k8s/jobset.x-k8s.io_jobsets.yaml ";
    Proc valid = run_captured(check + shell_quote(dir + "/jobset.yaml"));
    ASSERT_EQ(valid.rc, 0) << valid.out << valid.err << yaml;
    // The check can fail: a field JobSet does not have, a wrong type.
    std::string bad = yaml;
    bad.replace(bad.find("parallelism:"), 12, "paralelism:");
    bad.replace(bad.find("maxRestarts: 0"), 14, "maxRestarts: \"0\"");
    write_file(dir + "/bad.yaml", bad);
    Proc invalid = run_captured(check + shell_quote(dir + "/bad.yaml"));
    EXPECT_EQ(invalid.rc, 1);
    expect_mentions(invalid.out, {"'paralelism' was unexpected", "spec.failurePolicy.maxRestarts: '0' is not of type 'integer'"});

    // The pod's container as the kubelet runs it.
    const nlohmann::json js = yaml_as_json(dir + "/jobset.yaml");
    const nlohmann::json& pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"];
    EXPECT_EQ(js["spec"]["replicatedJobs"][0]["template"]["spec"]["completions"], 2);
    const nlohmann::json& c = pod["containers"][0];
    EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], 2);
    std::string env = "env -i PATH=" + shell_quote(dir + "/bin") + ":/usr/bin:/bin";
    env += container_env(c["env"], kPodSecret);
    EXPECT_NE(yaml.find("secretKeyRef:\n                    name: ptd-k8s-env-secret\n"), std::string::npos) << yaml;
    write_file(dir + "/bin/ptd-engine", "#!/bin/sh\nenv | grep -v '^PWD=\\|^SHLVL=\\|^_=\\|^PATH=\\|^JOB_COMPLETION_INDEX=\\|^OLDPWD='\n"
                                        "printf 'argv'; printf ' %s' \"$@\"; echo\n", 0755);
    for (int pod_index = 0; pod_index < 2; ++pod_index) {
        Proc p = run_captured(env + " JOB_COMPLETION_INDEX=" + std::to_string(pod_index) + " bash -c " +
                              shell_quote(c["args"][0].get<std::string>()));
        ASSERT_EQ(p.rc, 0) << p.out << p.err;
    }
    for (const RankPlan& r : local.ranks) {
        const std::string log = plan.run_dir + "/rank-" + std::to_string(r.rank) + ".log";
        const std::map<std::string, std::string> got = env_in_log(log);
        std::string argv;
        std::istringstream lines(read_file(log));
        for (std::string line; std::getline(lines, line);)
            if (line.starts_with("argv")) argv = line;
        std::string want_argv = "argv";
        for (size_t i = 1; i < r.argv.size(); ++i) want_argv += " " + r.argv[i];
        EXPECT_EQ(argv, want_argv) << "rank " << r.rank;
        std::map<std::string, std::string> want(r.env.begin(), r.env.end());
        want["MASTER_ADDR"] = "ptd-k8s-env-ranks-0-0.ptd-k8s-env";  // pod 0 on JobSet's headless service
        want["MASTER_PORT"] = "29500";
        want["PTD_RUN_SECRET"] = kPodSecret;  // local ranks get the launcher's, not in r.env
        EXPECT_EQ(got, want) << "rank " << r.rank;
    }
    // The teardown rule: rank 1 exits 3, so its pod stops rank 0 and ends with 3 (which fails
    // the Job, and failurePolicy maxRestarts 0 ends the JobSet).
    write_file(dir + "/bin/ptd-engine", "#!/bin/sh\n[ \"$RANK\" = 1 ] && exit 3\nexec sleep 60\n", 0755);
    const auto t0 = std::chrono::steady_clock::now();
    Proc failed = run_captured(env + " JOB_COMPLETION_INDEX=0 bash -c " + shell_quote(c["args"][0].get<std::string>()));
    EXPECT_EQ(failed.rc, 3) << failed.err;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20);
    expect_mentions(failed.err, {"rank 1 of node 0 exited 3; stopping the others"});
    EXPECT_NE(pod["restartPolicy"], "Always");
    EXPECT_EQ(js["spec"]["failurePolicy"]["maxRestarts"], 0);
}

// The TrainJob form (Kubeflow Trainer v2): it validates against TrainJob's CRD schema, and
// with the PET_* variables the trainer's torch plugin gives each node's pod (torch.go:
// PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK = the Job completion index, PET_MASTER_ADDR =
// pod 0 of the "node" job, PET_MASTER_PORT 29500) every rank gets ptd launch's environment.
TEST(LaunchK8s, TrainJobValidatesAgainstItsCrdAndGivesEachRankTheEnvironmentOfPtdLaunch) {
    const std::string dir = scratch_dir("trainjob");
    JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    job.cluster.nodes = 2;
    job.cluster.gpus_per_node = 2;
    job.cluster.gpu.name = "h100-sxm";
    const auto [local, plan] = local_and_k8s_plans(job, options_in(dir, "tj"));
    ASSERT_FALSE(plan.ranks.empty());
    const std::string yaml = ptd::k8s_trainjob(plan, "registry.example.com/ptd:1");
    write_file(dir + "/trainjob.yaml", yaml);
    Proc valid = run_captured(kSrc + "/tests/k8s_schema_check.py " + kSrc + "/tests/data/k8s/trainer.kubeflow.org_trainjobs.yaml " +
                              shell_quote(dir + "/trainjob.yaml"));
    ASSERT_EQ(valid.rc, 0) << valid.out << valid.err << yaml;
    const nlohmann::json t = yaml_as_json(dir + "/trainjob.yaml")["spec"]["trainer"];
    EXPECT_EQ(t["numNodes"], 2);
    EXPECT_EQ(t["numProcPerNode"], 2);
    EXPECT_EQ(t["resourcesPerNode"]["limits"]["nvidia.com/gpu"], 2);
    std::string env = "env -i PATH=" + shell_quote(dir + "/bin") + ":/usr/bin:/bin PET_NNODES=2 PET_NPROC_PER_NODE=2 "
                      "PET_MASTER_ADDR=ptd-tj-node-0-0.ptd-tj PET_MASTER_PORT=29500";
    env += container_env(t["env"], kPodSecret);
    write_file(dir + "/bin/ptd-engine", "#!/bin/sh\nenv | grep -v '^PWD=\\|^SHLVL=\\|^_=\\|^PATH=\\|^PET_\\|^OLDPWD='\n", 0755);
    for (int node = 0; node < 2; ++node) {
        Proc p = run_captured(env + " PET_NODE_RANK=" + std::to_string(node) + " bash -c " + shell_quote(t["args"][0].get<std::string>()));
        ASSERT_EQ(p.rc, 0) << p.out << p.err;
    }
    for (const RankPlan& r : local.ranks) {
        const std::map<std::string, std::string> got = env_in_log(plan.run_dir + "/rank-" + std::to_string(r.rank) + ".log");
        std::map<std::string, std::string> want(r.env.begin(), r.env.end());
        want["MASTER_ADDR"] = "ptd-tj-node-0-0.ptd-tj";
        want["MASTER_PORT"] = "29500";
        want["PTD_RUN_SECRET"] = kPodSecret;
        EXPECT_EQ(got, want) << "rank " << r.rank;
    }
}

// --preflight cannot probe the nodes Kubernetes will pick: refused, not run on this machine
// instead (which it once was, silently), and nothing is written.
TEST(LaunchK8s, PreflightIsRefusedNamingWhereItWorks) {
    const std::string dir = scratch_dir("k8spf");
    int rc = -1;
    const std::string out = run_capture(kBin + "/ptd launch " + kSrc + "/assets/jobs/tiny-gpt-8rank.toml --k8s --image "
                                        "registry.example.com/ptd:1 --preflight --run-root " + shell_quote(dir) + " --run-id pf",
                                        &rc);
    EXPECT_EQ(rc, 2) << out;
    expect_mentions(out, {"--preflight with --k8s", "allowed: --preflight for local, SSH (--hosts) and Slurm (--slurm) launches"});
    EXPECT_FALSE(std::filesystem::exists(dir + "/pf"));
}

// Issue 32's "done means": `ptd launch --k8s` of a 64-GPU H100 job (8 nodes of 8) writes a
// JobSet and a TrainJob that validate against their CRDs' schemas.
TEST(LaunchK8s, SixtyFourH100JobWritesAJobSetAndATrainJobThatValidate) {
    const std::string dir = scratch_dir("k8s64");
    int rc = -1;
    const std::string out = run_capture(kBin + "/ptd launch " + kSrc + "/assets/jobs/llama3-8b-h100.toml --set cluster.nodes=8 "
                                        "--set parallel.dp=32 --k8s --image registry.example.com/ptd:1 --run-root " +
                                            shell_quote(dir) + " --run-id h100x64",
                                        &rc);
    ASSERT_EQ(rc, 0) << out;
    expect_mentions(out, {"(JobSet ptd-h100x64: 64 ranks in 8 pods)", "trainjob.yaml"});
    for (const auto& [crd, file] : {std::pair{"jobset.x-k8s.io_jobsets.yaml", "jobset.yaml"},
                                    std::pair{"trainer.kubeflow.org_trainjobs.yaml", "trainjob.yaml"}}) {
        Proc valid = run_captured(kSrc + "/tests/k8s_schema_check.py " + kSrc + "/tests/data/k8s/" + crd + " " +
                                  shell_quote(dir + "/h100x64/" + file));
        EXPECT_EQ(valid.rc, 0) << file << ": " << valid.out << valid.err;
    }
    const nlohmann::json js = yaml_as_json(dir + "/h100x64/jobset.yaml");
    EXPECT_EQ(js["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"], 8);
    EXPECT_EQ(yaml_as_json(dir + "/h100x64/trainjob.yaml")["spec"]["trainer"]["numNodes"], 8);
}

// Topology hints (issue 32 point 3) from [launch.k8s] and the cluster: on GB200 NVL72 racks
// (4 GPUs a node, 72 per NVLink domain: 18 nodes) a 36-node job becomes 2 Jobs of 18 pods,
// each alone in one domain of nvidia.com/gpu.clique (JobSet's exclusive-topology annotation),
// with the GPU product's node selector; both forms validate. Run as the pods would, a pod's
// node is its Job's index · nodes per domain + its completion index, so every rank gets the
// RANK `ptd launch` gives it (a small split: 4 nodes of 2 GPUs, domains of 2 nodes).
TEST(LaunchK8s, TopologyHintsSplitTheJobSetByDomainAndKeepEachRanksEnvironment) {
    const std::string dir = scratch_dir("k8s-topo");
    int rc = -1;
    const std::string out = run_capture(kBin + "/ptd export " + kSrc + "/assets/jobs/llama3-8b-h100.toml --set cluster.gpu='\"gb200\"' "
                                        "--set cluster.nvlink_domain=72 --set cluster.gpus_per_node=4 --set cluster.nodes=36 --set parallel.dp=72 "
                                        "--set training.global_batch=576 "
                                        "--set launch.k8s.topology_key='\"nvidia.com/gpu.clique\"' --set launch.k8s.gpu_product='\"NVIDIA-GB200\"' "
                                        "--format jobset --image r.example/ptd:1 --run-root " + shell_quote(dir) + " --run-id nvl > " +
                                            shell_quote(dir + "/jobset.yaml"),
                                        &rc);
    ASSERT_EQ(rc, 0) << out;
    Proc valid = run_captured(kSrc + "/tests/k8s_schema_check.py " + kSrc + "/tests/data/k8s/jobset.x-k8s.io_jobsets.yaml " +
                              shell_quote(dir + "/jobset.yaml"));
    EXPECT_EQ(valid.rc, 0) << valid.out << valid.err;
    const nlohmann::json js = yaml_as_json(dir + "/jobset.yaml");
    EXPECT_EQ(js["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"], "nvidia.com/gpu.clique");
    const nlohmann::json& rj = js["spec"]["replicatedJobs"][0];
    EXPECT_EQ(rj["replicas"], 2);
    EXPECT_EQ(rj["template"]["spec"]["parallelism"], 18);
    EXPECT_EQ(rj["template"]["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"], "NVIDIA-GB200");

    // The small split, run as its pods would run it.
    JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    job.cluster.nodes = 4;
    job.cluster.gpus_per_node = 2;
    job.parallel.dp = 2;
    job.launch.k8s.topology_key = "example.com/rack";
    job.launch.k8s.nodes_per_domain = 2;
    job.launch.k8s.gpu_product = "cpu-node";
    const auto [local, plan] = local_and_k8s_plans(job, options_in(dir, "topo"));
    ASSERT_FALSE(plan.ranks.empty());
    for (const auto& [form, crd, text] : {std::tuple{"jobset", "jobset.x-k8s.io_jobsets.yaml", ptd::k8s_jobset(plan, "r.example/ptd:1")},
                                          std::tuple{"trainjob", "trainer.kubeflow.org_trainjobs.yaml", ptd::k8s_trainjob(plan, "r.example/ptd:1")}}) {
        write_file(dir + "/" + form + ".yaml", text);
        Proc v = run_captured(kSrc + "/tests/k8s_schema_check.py " + kSrc + "/tests/data/k8s/" + crd + " " + shell_quote(dir + "/" + form + ".yaml"));
        EXPECT_EQ(v.rc, 0) << form << ": " << v.out << v.err << text;
    }
    // The TrainJob's runtime has one Job: it keeps the node selector and says the split needs the JobSet.
    const std::string tj = read_file(dir + "/trainjob.yaml");
    expect_mentions(tj, {"one Job per domain needs the JobSet form", "\"nvidia.com/gpu.product\": \"cpu-node\"", "nodeSelector"});
    expect_no_mention(tj, {"exclusive-topology"});
    const nlohmann::json c = yaml_as_json(dir + "/jobset.yaml")["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0];
    EXPECT_NE(c.dump().find("metadata.annotations['jobset.sigs.k8s.io/job-index']"), std::string::npos);
    write_file(dir + "/bin/ptd-engine", "#!/bin/sh\necho \"RANK=$RANK LOCAL_RANK=$LOCAL_RANK\"\n", 0755);
    const std::string env = "env -i PATH=" + shell_quote(dir + "/bin") + ":/usr/bin:/bin" + container_env(c["env"], kPodSecret, {"JOB_INDEX"});
    for (int job_index = 0; job_index < 2; ++job_index)
        for (int pod = 0; pod < 2; ++pod) {
            Proc p = run_captured(env + " JOB_INDEX=" + std::to_string(job_index) + " JOB_COMPLETION_INDEX=" + std::to_string(pod) +
                                  " bash -c " + shell_quote(c["args"][0].get<std::string>()));
            ASSERT_EQ(p.rc, 0) << p.out << p.err;
        }
    for (const RankPlan& r : local.ranks) {
        std::map<std::string, std::string> want(r.env.begin(), r.env.end());
        EXPECT_EQ(read_file(plan.run_dir + "/rank-" + std::to_string(r.rank) + ".log"),
                  "RANK=" + want["RANK"] + " LOCAL_RANK=" + want["LOCAL_RANK"] + "\n") << "rank " << r.rank;
    }
}

// `ptd export --format jobset | trainjob` (issue 32 point 3): the manifest `ptd launch --k8s`
// writes for the same job, run root and run id, byte for byte, on stdout (the same plan and
// writer); it validates against the CRD's schema; export creates no run directory. --image is
// required and checked as launch checks it; --launcher and these forms do not mix.
TEST(LaunchK8s, ExportWritesWhatLaunchWritesAndItValidates) {
    const std::string dir = scratch_dir("k8s-export");
    const std::string job = kSrc + "/assets/jobs/llama3-8b-h100.toml --set cluster.nodes=8 --set parallel.dp=32";
    const std::string where = " --image registry.example.com/ptd:1 --run-root " + shell_quote(dir) + " --run-id x64";
    int rc = -1;
    for (const auto& [form, crd] : {std::pair{"jobset", "jobset.x-k8s.io_jobsets.yaml"},
                                    std::pair{"trainjob", "trainer.kubeflow.org_trainjobs.yaml"}}) {
        const std::string file = dir + "/" + form + ".yaml";
        const std::string err = run_capture(kBin + "/ptd export " + job + " --format " + form + where + " > " + shell_quote(file), &rc);
        ASSERT_EQ(rc, 0) << form << ": " << err;
        EXPECT_EQ(err, "") << form;
        EXPECT_FALSE(fs::exists(dir + "/x64")) << "export made the run directory";
        Proc valid = run_captured(kSrc + "/tests/k8s_schema_check.py " + kSrc + "/tests/data/k8s/" + crd + " " + shell_quote(file));
        EXPECT_EQ(valid.rc, 0) << form << ": " << valid.out << valid.err;
    }
    const std::string launched = run_capture(kBin + "/ptd launch " + job + " --k8s" + where, &rc);
    ASSERT_EQ(rc, 0) << launched;
    for (const char* form : {"jobset", "trainjob"}) {
        const std::string exported = read_file(dir + "/" + form + ".yaml");
        EXPECT_NE(exported.find("WORLD_SIZE"), std::string::npos) << form;
        EXPECT_EQ(exported, read_file(dir + "/x64/" + form + ".yaml")) << form;
    }
    // Refusals: no image, an image with a space, --launcher with these forms, --image with a framework's.
    std::string out = run_capture(kBin + "/ptd export " + job + " --format jobset", &rc);
    EXPECT_EQ(rc, 2) << out;
    expect_mentions(out, {"ptd export: error: --image: missing (and no launch.k8s.image); allowed: a container image holding ptd-engine"});
    out = run_capture(kBin + "/ptd export " + job + " --format trainjob --image 'my image:1'", &rc);
    EXPECT_EQ(rc, 2) << out;
    expect_mentions(out, {"--image: got \"my image:1\"", "without spaces or quotes"});
    out = run_capture(kBin + "/ptd export " + job + " --format jobset --image r/p:1 --launcher k8s", &rc);
    EXPECT_EQ(rc, 2) << out;
    expect_mentions(out, {"--launcher k8s: with --format jobset", "allowed: --launcher with megatron"});
    out = run_capture(kBin + "/ptd export " + job + " --format megatron --image r/p:1", &rc);
    EXPECT_EQ(rc, 2) << out;
    expect_mentions(out, {"--image: given with --format megatron; allowed: --image only with --format jobset or trainjob"});
}

// `ptd watch` and `ptd stop` of a JobSet applied with --apply (issue 32 point 3), against a
// kubectl stand-in first on PATH (tests/kubectl_standin.sh) that answers `kubectl get pods -o
// json` with the samples in tests/data/k8s/pods/ and `kubectl logs POD` with what the pod's
// script printed when the test ran it with the real ptd-engine (two "pods" on loopback). The
// pods' phases become the run's state (pending, running, finished; failed naming the pod, the
// node and the rank that exited first), the pods' "[rank R]" lines become the run's rank logs,
// and `ptd stop` deletes the JobSet (then the pods' SIGTERM ends every rank's process group).
TEST(LaunchK8s, WatchFollowsTheJobSetsPodsAndStopDeletesItThroughKubectl) {
    const std::string dir = scratch_dir("k8s-watch");
    const std::string kube = dir + "/kube";
    fs::create_directories(kube + "/logs");
    fs::create_directories(dir + "/bin");
    fs::create_symlink(kSrc + "/tests/kubectl_standin.sh", dir + "/bin/kubectl");
    write_file(dir + "/kubeconfig", "apiVersion: v1\nkind: Config\n");
    const std::string env = "PATH=" + shell_quote(dir + "/bin") + ":$PATH KUBECONFIG=" + shell_quote(dir + "/kubeconfig") +
                            " PTD_KUBECTL_DIR=" + shell_quote(kube) + " ";
    const std::string pods = kSrc + "/tests/data/k8s/pods/";
    auto pods_are = [&](const char* sample) {
        fs::copy_file(pods + sample, kube + "/pods.json", fs::copy_options::overwrite_existing);
    };
    auto launch = [&](const std::string& root) {
        int rc = -1;
        const std::string out = run_capture(env + kBin + "/ptd launch " + kSrc + "/assets/jobs/tiny-local.toml --set cluster.nodes=2 "
                                            "--set cluster.gpus_per_node=2 --steps 3 --k8s --image r.example/ptd:1 --apply --run-root " +
                                                shell_quote(root) + " --run-id kw",
                                            &rc);
        EXPECT_EQ(rc, 0) << out;
        expect_mentions(out, {"jobset.jobset.x-k8s.io/ptd-kw created", "watch:  ptd watch " + root + "/kw",
                              "stop:   ptd stop " + root + "/kw"});
        return root + "/kw";
    };
    // The pod's script as the kubelet runs it: the container's env, its completion index,
    // rendezvous on loopback; its output is the pod's log.
    auto run_pods = [&](const std::string& run, const std::string& engine_dir, std::vector<int> nodes) {
        const nlohmann::json js = yaml_as_json(run + "/jobset.yaml");
        const nlohmann::json& c = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0];
        std::string e = "env -i PATH=" + shell_quote(engine_dir) + ":/usr/bin:/bin" +
                        container_env(c["env"], read_file(kube + "/secret-ptd-kw-secret"), {"MASTER_ADDR", "MASTER_PORT"});
        e += " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port());
        const char* names[] = {"ptd-kw-ranks-0-0-x7k2p", "ptd-kw-ranks-0-1-q9m4d"};
        std::string both = "(";
        for (int node : nodes)
            both += e + " JOB_COMPLETION_INDEX=" + std::to_string(node) + " bash -c " + shell_quote(c["args"][0].get<std::string>()) +
                    " > " + shell_quote(kube + "/logs/" + names[node]) + " 2>&1 & ";
        return run_captured(both + "wait)");
    };
    int rc = -1;

    // Applied: the manifest names the JobSet; pending while an image does not pull.
    const std::string run = launch(dir + "/ok");
    auto m = read_manifest(run);
    ASSERT_TRUE(m) << m.error().str();
    ASSERT_TRUE(m->scheduler);
    EXPECT_EQ(m->scheduler->kind, "k8s");
    EXPECT_EQ(m->scheduler->job_id, "ptd-kw");
    // The ranks' secret went to kubectl in a file that is gone now, never on its command line.
    expect_mentions(read_file(kube + "/calls"), {"create secret generic ptd-kw-secret --from-file=PTD_RUN_SECRET=" + run + "/.ptd-run-secret"});
    EXPECT_EQ(read_file(kube + "/secret-ptd-kw-secret").size(), 64u);
    EXPECT_FALSE(fs::exists(run + "/.ptd-run-secret"));
    pods_are("pending.json");
    std::string out = run_capture(env + kBin + "/ptd watch --once " + shell_quote(run), &rc);
    EXPECT_EQ(rc, 0) << out;
    expect_mentions(out, {"JobSet ptd-kw PENDING"});

    // The pods train (the real engine, 3 steps); their own copies of the rank logs are removed
    // here, so what `ptd watch` shows comes from `kubectl logs`.
    Proc trained = run_pods(run, kBin, {0, 1});
    ASSERT_EQ(trained.rc, 0) << trained.out << trained.err;
    std::map<int, std::string> pod_copy;
    for (int r = 0; r < 4; ++r) {
        pod_copy[r] = read_file(run + "/rank-" + std::to_string(r) + ".log");
        EXPECT_NE(pod_copy[r].find("\"step\":3"), std::string::npos) << pod_copy[r];
        fs::remove(run + "/rank-" + std::to_string(r) + ".log");
    }
    EXPECT_NE(read_file(kube + "/logs/ptd-kw-ranks-0-1-q9m4d").find("[rank 3] {"), std::string::npos);
    pods_are("running.json");
    out = run_capture(env + kBin + "/ptd watch --once " + shell_quote(run), &rc);
    expect_mentions(out, {"JobSet ptd-kw RUNNING", "gpu-node-a", "gpu-node-b"});  // the pods' nodes, not "node-0"
    expect_no_mention(out, {"node-0 "});
    pods_are("succeeded.json");
    out = run_capture(env + "timeout 60 " + kBin + "/ptd watch --no-sparklines " + shell_quote(run), &rc);
    EXPECT_EQ(rc, 0) << out;
    expect_mentions(out, {"finished: JobSet ptd-kw SUCCEEDED: completed: every pod succeeded (decided by ptd watch from Kubernetes"});
    for (int r = 0; r < 4; ++r) EXPECT_EQ(read_file(run + "/rank-" + std::to_string(r) + ".log"), pod_copy[r]) << "rank " << r;

    // A rank fails: its pod ends with its code, the Job stops the other pod; the first pod to
    // fail and the rank its log names are the run's failure.
    const std::string failed = launch(dir + "/failed");
    write_file(dir + "/standin/ptd-engine", "#!/bin/sh\necho \"rank $RANK here\"\n[ \"$RANK\" = 3 ] && exit 3\nexec sleep 60\n", 0755);
    fs::remove(kube + "/logs/ptd-kw-ranks-0-0-x7k2p");
    Proc pod1 = run_pods(failed, dir + "/standin", {1});
    EXPECT_EQ(pod1.rc, 0);  // the subshell's wait; the pod's own status is in its log
    expect_mentions(read_file(kube + "/logs/ptd-kw-ranks-0-1-q9m4d"), {"[rank 3] rank 3 here", "ptd: rank 3 of node 1 exited 3"});
    pods_are("failed.json");
    out = run_capture(env + "timeout 60 " + kBin + "/ptd watch --no-sparklines " + shell_quote(failed), &rc);
    expect_mentions(out, {"failed: JobSet ptd-kw FAILED: pod ptd-kw-ranks-0-1-q9m4d (node 1 on gpu-node-b) failed: Error, exit "
                          "code 3; rank 3 exited first (decided by ptd watch from Kubernetes"});

    // ptd stop: a running set is deleted and the run recorded as stopped; a second stop says it
    // is over. A set that already ended keeps its end and is not deleted.
    const std::string stopped = launch(dir + "/stopped");
    pods_are("running.json");
    out = run_capture(env + kBin + "/ptd stop --wait 10 " + shell_quote(stopped), &rc);
    EXPECT_EQ(rc, 0) << out;
    expect_mentions(out, {"ptd stop: JobSet ptd-kw deleted by ptd stop"});
    expect_mentions(read_file(kube + "/calls"), {"delete jobsets.jobset.x-k8s.io ptd-kw", "delete secret ptd-kw-secret"});
    m = read_manifest(stopped);
    ASSERT_TRUE(m) << m.error().str();
    EXPECT_EQ(m->state, "stopped");
    out = run_capture(env + kBin + "/ptd stop " + shell_quote(stopped), &rc);
    expect_mentions(out, {"already over (stopped)"});
    const std::string done = launch(dir + "/done");
    pods_are("succeeded.json");
    std::filesystem::remove(kube + "/calls");
    out = run_capture(env + kBin + "/ptd stop " + shell_quote(done), &rc);
    EXPECT_EQ(rc, 0) << out;
    expect_mentions(out, {"JobSet ptd-kw SUCCEEDED: completed: every pod succeeded"});
    expect_no_mention(read_file(kube + "/calls"), {"delete"});
    EXPECT_EQ(read_manifest(done)->state, "finished");

    // What a delete does to a pod: SIGTERM to its script, which ends every rank's process group.
    const nlohmann::json c = yaml_as_json(stopped + "/jobset.yaml")["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0];
    write_file(dir + "/sleeper/ptd-engine", "#!/bin/sh\nexec sleep 60\n", 0755);
    const std::string script = dir + "/pod.sh";
    write_file(script, c["args"][0].get<std::string>());
    std::string e = "env -i PATH=" + shell_quote(dir + "/sleeper") + ":/usr/bin:/bin JOB_COMPLETION_INDEX=0";
    e += container_env(c["env"], kPodSecret);
    const std::string pidfile = dir + "/pod.pid";
    ASSERT_EQ(std::system((e + " bash " + shell_quote(script) + " > /dev/null 2>&1 & echo $! > " + shell_quote(pidfile)).c_str()), 0);
    const auto t0 = std::chrono::steady_clock::now();
    while (processes_of_run("kw").size() < 3 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_GE(processes_of_run("kw").size(), 3u);  // the pod's script and its two ranks
    ::kill(std::stoi(read_file(pidfile)), SIGTERM);
    EXPECT_TRUE(survivors_after("kw", 10).empty());
}

// --apply runs kubectl apply only where kubectl has a cluster: without a kubeconfig it is
// refused naming what was looked for; with one whose server does not answer, kubectl's own
// error (at its first call, the run's Secret) comes back with exit 1 (the manifests are
// written either way, and the secret's file is gone).
TEST(LaunchK8s, ApplyNeedsAKubeconfigAndReportsKubectlsError) {
    const std::string dir = scratch_dir("k8s-apply");
    const std::string launch = kBin + "/ptd launch " + kSrc + "/assets/jobs/tiny-local.toml --k8s --image r.example/ptd:1 --apply --run-root " +
                               shell_quote(dir);
    int rc = -1;
    std::string out = run_capture("HOME=" + shell_quote(dir) + " KUBECONFIG= " + launch + " --run-id a", &rc);
    EXPECT_EQ(rc, 2) << out;
    expect_mentions(out, {"--apply: no kubeconfig (" + dir + "/.kube/config is not a file)", "wrote " + dir + "/a/jobset.yaml"});
    write_file(dir + "/kubeconfig",
               "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n"
               "contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {}\n");
    out = run_capture("KUBECONFIG=" + shell_quote(dir + "/kubeconfig") + " " + launch + " --run-id b", &rc);
    EXPECT_EQ(rc, 1) << out;
    expect_mentions(out, {"ptd launch: error: kubectl: kubectl create secret generic ptd-b-secret failed: ",
                          "wrote " + dir + "/b/jobset.yaml"});
    EXPECT_FALSE(fs::exists(dir + "/b/.ptd-run-secret"));
}

// `ptd stop RUN_DIR` of a local run: its ptd launch gets SIGTERM and tears every rank down
// as Ctrl-C does; nothing of the run is left, and a second stop says it is over.
TEST(LaunchCommand, PtdStopStopsALocalRunThroughItsLauncher) {
    const std::string dir = scratch_dir("stop");
    const std::string run = dir + "/local";
    const std::string launch = kBin + "/ptd launch " + kSrc + "/assets/jobs/tiny-local.toml --steps 100000 --run-root " +
                               shell_quote(dir) + " --run-id local > " + shell_quote(dir + "/launch.out") + " 2>&1 &";
    ASSERT_EQ(std::system(launch.c_str()), 0);
    const auto t0 = std::chrono::steady_clock::now();
    while (last_logged_step(run, 0) < 1 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_GE(last_logged_step(run, 0), 1) << read_file(dir + "/launch.out");
    int rc = -1;
    const std::string out = run_capture(kBin + "/ptd stop " + shell_quote(run), &rc);
    EXPECT_EQ(rc, 0) << out;
    expect_mentions(out, {"run local stopped (its ptd launch, pid", "tore every rank down"});
    EXPECT_TRUE(survivors_after("local", 10).empty());
    auto m = read_manifest(run);
    ASSERT_TRUE(m) << m.error().str();
    EXPECT_EQ(m->state, "stopped");
    const std::string again = run_capture(kBin + "/ptd stop " + shell_quote(run), &rc);
    EXPECT_EQ(rc, 0);
    expect_mentions(again, {"already over (stopped)"});
}

// An hf_config job, launched from another folder: locally, and as the Slurm script
// `ptd launch --slurm` writes (run by the srun stand-in); both train.
TEST(LaunchCommand, HfConfigJobLaunchesLocallyAndUnderSlurm) {
    const std::string dir = scratch_dir("hf");
    const std::string job = hf_job_folder(dir, /*data=*/true);
    int rc = -1;
    std::string out = run_capture("cd / && " + kBin + "/ptd launch " + shell_quote(job) + " --steps 2 --run-root " +
                                      shell_quote(dir + "/runs") + " --run-id hf-local",
                                  &rc);
    EXPECT_EQ(rc, 0) << out;
    for (int r = 0; r < 4; ++r) EXPECT_EQ(last_logged_step(dir + "/runs/hf-local", r), 2) << "rank " << r << "\n" << out;
    EXPECT_NE(read_file(dir + "/runs/hf-local/job.toml").find("hf_config = \"" + dir + "/job/cfg/tiny.json\""), std::string::npos);

    out = run_capture("cd / && " + kBin + "/ptd launch " + shell_quote(job) + " --slurm --steps 2 --run-root " +
                          shell_quote(dir + "/runs") + " --run-id hf-slurm",
                      &rc);
    ASSERT_EQ(rc, 0) << out;
    const std::string run = dir + "/runs/hf-slurm";
    EXPECT_NE(read_file(run + "/job.toml").find("data = \"" + dir + "/job/data/corpus.txt\""), std::string::npos);
    ASSERT_EQ(run_sbatch_with_shims(dir, run + "/sbatch.sh", 4), 0) << read_file(run + "/rank-0.log");
    for (int r = 0; r < 4; ++r) EXPECT_EQ(last_logged_step(run, r), 2) << "rank " << r << "\n" << read_file(run + "/rank-0.log");

    // Nobody moves a Slurm run's manifest past "starting": `ptd watch` ends on the ranks'
    // own end events (it used to wait forever).
    EXPECT_EQ(read_manifest(run)->state, "starting");
    out = run_capture("timeout 60 " + kBin + "/ptd watch " + shell_quote(run), &rc);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("finished: all 4 ranks sent end"), std::string::npos) << out;
}

// A run never writes into a folder it did not create: not with --run-id naming the job's
// own folder, not twice with one id, not with --slurm.
TEST(LaunchCommand, ExistingFoldersAreNeverOverwritten) {
    const std::string dir = scratch_dir("overwrite");
    const std::string job_text = "# my notes: keep this comment\n" + read_file(kSrc + "/assets/jobs/tiny-local.toml");
    write_file(dir + "/mine/job.toml", job_text);
    const std::string ptd = kBin + "/ptd launch " + shell_quote(dir + "/mine/job.toml") + " --engine " + kBin + "/ptd-engine ";
    int rc = -1;
    for (const std::string& flags : {"--run-root " + dir + " --run-id mine", "--run-root " + dir + "/mine --run-id ..",
                                     "--run-root " + dir + "/mine/x --run-id ..", "--run-root " + dir + " --run-id mine --slurm",
                                     "--run-root " + dir + "/mine --run-id job.toml --slurm"}) {
        const std::string out = run_capture(ptd + flags, &rc);
        EXPECT_NE(rc, 0) << flags << "\n" << out;
        EXPECT_TRUE(out.find("already exists") != std::string::npos || out.find("--run-id") != std::string::npos)
            << flags << "\n" << out;
        EXPECT_EQ(read_file(dir + "/mine/job.toml"), job_text) << flags;
        EXPECT_FALSE(fs::exists(dir + "/mine/sbatch.sh")) << flags;
        EXPECT_FALSE(fs::exists(dir + "/mine/manifest.json")) << flags;
        EXPECT_FALSE(fs::exists(dir + "/sbatch.sh")) << flags;
    }
    // The same id twice: the second is refused and the first run's files stay as they were.
    std::string out = run_capture(ptd + "--steps 1 --run-root " + dir + " --run-id once", &rc);
    ASSERT_EQ(rc, 0) << out;
    const std::string manifest = read_file(dir + "/once/manifest.json");
    out = run_capture(ptd + "--steps 1 --run-root " + dir + " --run-id once --slurm", &rc);
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find(dir + "/once: error: the run directory already exists"), std::string::npos) << out;
    EXPECT_EQ(read_file(dir + "/once/manifest.json"), manifest);
    EXPECT_FALSE(fs::exists(dir + "/once/sbatch.sh"));
}

// ---- local launches --------------------------------------------------------------------

TEST(LocalLaunch, TinyJobReportsMetricsFromEveryRank) {
    const std::string dir = scratch_dir("launch");
    LaunchOptions o = options_in(dir, "tiny-4");
    o.steps = 3;
    auto plan = make_launch_plan(load(kSrc + "/assets/jobs/tiny-local.toml"), o);
    ASSERT_TRUE(plan) << plan.error().str();
    const Collected c = run_to_end(*plan, 120);
    EXPECT_EQ(c.rc, 0) << c.outcome.reason;
    for (int r = 0; r < 4; ++r) {
        EXPECT_EQ(c.last_step.count(r) ? c.last_step.at(r) : 0, 3) << "rank " << r;
        EXPECT_EQ(c.exit_codes.count(r) ? c.exit_codes.at(r) : -99, 0) << "rank " << r;
    }
    EXPECT_EQ(c.events.back().kind, LaunchEventKind::finished);
    auto m = read_manifest(dir + "/tiny-4");
    ASSERT_TRUE(m) << m.error().str();
    EXPECT_EQ(m->state, "finished");
    for (int r = 0; r < 4; ++r) {
        const std::string log = read_file(dir + "/tiny-4/rank-" + std::to_string(r) + ".log");
        EXPECT_NE(log.find("\"event\":\"end\""), std::string::npos) << log;
        EXPECT_GT(m->ranks[r].pid, 0);
    }
    EXPECT_TRUE(fs::exists(dir + "/tiny-4/job.toml"));
    EXPECT_TRUE(survivors_after("tiny-4", 2).empty());
}

TEST(LocalLaunch, TheRunSecretReachesRanksOnlyThroughTheirEnvironment) {
    const std::string dir = scratch_dir("launch");
    std::string first_hash;
    for (const char* id : {"secret-1", "secret-2"}) {
        LaunchOptions o = options_in(dir, id);
        o.local_engine = fake_engine(dir, kSecretReport);
        auto plan = make_launch_plan(load(kSrc + "/assets/jobs/tiny-local.toml"), o);
        ASSERT_TRUE(plan) << plan.error().str();
        for (const RankPlan& r : plan->ranks)
            for (const auto& [k, v] : r.env) EXPECT_NE(k, "PTD_RUN_SECRET") << "the plan (printed by --dry-run) holds it";
        const Collected c = run_to_end(*plan, 60);
        EXPECT_EQ(c.rc, 0) << c.outcome.reason;
        const auto reports = secret_reports(c);
        expect_secret_handed_over(reports, 4);
        if (reports.empty()) continue;
        const std::string hash = reports.begin()->second.substr(reports.begin()->second.find("sha256="));
        EXPECT_NE(hash, first_hash) << "two runs got the same secret";
        first_hash = hash;
    }
}

TEST(LocalLaunch, EightRanksOfTheRealEngine) {
    const std::string dir = scratch_dir("launch");
    LaunchOptions o = options_in(dir, "gpt-8");
    o.steps = 2;
    auto plan = make_launch_plan(load(kSrc + "/assets/jobs/tiny-gpt-8rank.toml"), o);
    ASSERT_TRUE(plan) << plan.error().str();
    const Collected c = run_to_end(*plan, 180);
    EXPECT_EQ(c.rc, 0) << c.outcome.reason;
    for (int r = 0; r < 8; ++r) EXPECT_EQ(c.last_step.count(r) ? c.last_step.at(r) : 0, 2) << "rank " << r;
}

TEST(LocalLaunch, FailingRankStopsEveryOtherRank) {
    const std::string dir = scratch_dir("launch");
    LaunchOptions o = options_in(dir, "fail-1");
    // Rank 2 fails after the others are up; every other rank leaves a background child
    // in its process group, which the teardown must take down too.
    o.local_engine = fake_engine(dir, "if [ \"$RANK\" = 2 ]; then sleep 0.5; echo 'boom: rank 2 gave up' >&2; exit 3; fi\n"
                                      "sleep 300 & sleep 300");
    auto plan = make_launch_plan(load(kSrc + "/assets/jobs/tiny-local.toml"), o);
    ASSERT_TRUE(plan) << plan.error().str();
    const Collected c = run_to_end(*plan, 60);
    EXPECT_EQ(c.rc, 3);
    EXPECT_EQ(c.outcome.failed_rank, 2);
    EXPECT_NE(c.outcome.reason.find("rank 2 on localhost (local) exited with code 3"), std::string::npos) << c.outcome.reason;
    ASSERT_FALSE(c.outcome.last_stderr.empty());
    EXPECT_EQ(c.outcome.last_stderr.back(), "boom: rank 2 gave up");
    for (int r : {0, 1, 3}) EXPECT_EQ(c.exit_codes.at(r), 128 + SIGTERM) << "rank " << r;
    EXPECT_TRUE(survivors_after("fail-1", 3).empty());
    auto m = read_manifest(dir + "/fail-1");
    ASSERT_TRUE(m);
    EXPECT_EQ(m->state, "failed");
    EXPECT_EQ(m->failed_rank, 2);
}

TEST(LocalLaunch, RankIgnoringTermIsKilledAfterGrace) {
    const std::string dir = scratch_dir("launch");
    JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    job.launch.grace_s = 0.5;
    LaunchOptions o = options_in(dir, "fail-2");
    o.local_engine = fake_engine(dir, "trap '' TERM\nif [ \"$RANK\" = 0 ]; then sleep 0.3; exit 1; fi\n"
                                      "while true; do sleep 0.1; done");
    auto plan = make_launch_plan(job, o);
    ASSERT_TRUE(plan) << plan.error().str();
    const Collected c = run_to_end(*plan, 30);
    EXPECT_EQ(c.rc, 1);
    for (int r : {1, 2, 3}) EXPECT_EQ(c.exit_codes.at(r), 128 + SIGKILL) << "rank " << r;
    EXPECT_TRUE(survivors_after("fail-2", 3).empty());
}

TEST(LocalLaunch, StopTearsEverythingDown) {
    const std::string dir = scratch_dir("launch");
    LaunchOptions o = options_in(dir, "stop-1");
    o.local_engine = fake_engine(dir, "sleep 300 & sleep 300");
    auto plan = make_launch_plan(load(kSrc + "/assets/jobs/tiny-local.toml"), o);
    ASSERT_TRUE(plan) << plan.error().str();
    int started = 0;
    const Collected c = run_to_end(*plan, 30, [&](Launcher& run, const LaunchEvent& ev) {
        if (ev.kind == LaunchEventKind::output && ev.text.starts_with("fake engine") && ++started == 4) run.stop();
    });
    EXPECT_EQ(c.rc, 130);
    EXPECT_TRUE(c.outcome.stopped_by_user);
    EXPECT_TRUE(survivors_after("stop-1", 3).empty());
    auto m = read_manifest(dir + "/stop-1");
    ASSERT_TRUE(m);
    EXPECT_EQ(m->state, "stopped");
}

TEST(LocalLaunch, KilledEngineRankEndsTheRunWithItsReport) {
    const std::string dir = scratch_dir("launch");
    LaunchOptions o = options_in(dir, "kill-1");
    o.steps = 100000;
    auto plan = make_launch_plan(load(kSrc + "/assets/jobs/tiny-local.toml"), o);
    ASSERT_TRUE(plan) << plan.error().str();
    std::map<int, long> pids;
    bool killed = false;
    const Collected c = run_to_end(*plan, 120, [&](Launcher&, const LaunchEvent& ev) {
        if (ev.kind == LaunchEventKind::rank_started) pids[ev.rank] = ev.pid;
        if (!killed && ev.kind == LaunchEventKind::metric && ev.metric->kind == MetricKind::step && ev.metric->step >= 2) {
            kill((pid_t)pids.at(2), SIGKILL);
            killed = true;
        }
    });
    ASSERT_TRUE(killed);
    EXPECT_EQ(c.rc, 128 + SIGKILL);
    EXPECT_EQ(c.outcome.failed_rank, 2);
    EXPECT_TRUE(survivors_after("kill-1", 5).empty());
}

// A MASTER_ADDR the ranks cannot resolve fails at once, naming the address and the host
// (the engine resolves it before waiting for the store; its timeout is 300 s).
TEST(LocalLaunch, UnresolvableMasterAddrFailsAtOnce) {
    const std::string dir = scratch_dir("launch");
    LaunchOptions o = options_in(dir, "noresolve");
    o.master_addr = "no-such-host.invalid";
    auto plan = make_launch_plan(load(kSrc + "/assets/jobs/tiny-local.toml"), o);
    ASSERT_TRUE(plan) << plan.error().str();
    EXPECT_EQ(env_of(plan->ranks[1], "MASTER_ADDR"), "no-such-host.invalid");
    const Collected c = run_to_end(*plan, 60);
    EXPECT_EQ(c.rc, 1) << c.outcome.reason;
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::string stderr_text;
    for (const std::string& l : c.outcome.last_stderr) stderr_text += l + "\n";
    EXPECT_NE(stderr_text.find("MASTER_ADDR 'no-such-host.invalid' does not resolve on host " + std::string(host)),
              std::string::npos)
        << stderr_text;
    EXPECT_TRUE(survivors_after("noresolve", 3).empty());

    // A value that cannot be a host name is refused in the plan, naming the flag.
    o.master_addr = "-oProxyCommand=x";
    auto bad = make_launch_plan(load(kSrc + "/assets/jobs/tiny-local.toml"), o);
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().str().find("--master-addr"), std::string::npos) << bad.error().str();
}

TEST(LocalLaunch, FloodingRankBlocksNoOneAndBadMetricsStayLogText) {
    const std::string dir = scratch_dir("launch");
    LaunchOptions o = options_in(dir, "flood-1");
    // Rank 0 floods 40 MB of output in long lines; rank 1 writes a broken metrics line and
    // a valid one; the others say one line each.
    o.local_engine = fake_engine(
        dir, "case $RANK in\n"
             "0) head -c 40000000 /dev/zero | tr '\\0' 'x' | fold -w 100000 ;;\n"
             "1) echo '{\"schema\":\"ptd.metrics/1\",\"event\":\"step\",\"rank\":1,\"step\":\"two\"}'\n"
             "   echo '{\"schema\":\"ptd.metrics/1\",\"event\":\"step\",\"rank\":1,\"step\":2,\"loss\":1.5}' ;;\n"
             "*) echo quiet ;;\nesac");
    auto plan = make_launch_plan(load(kSrc + "/assets/jobs/tiny-local.toml"), o);
    ASSERT_TRUE(plan) << plan.error().str();
    size_t flood_bytes = 0;
    int bad_as_text = 0;
    const Collected c = run_to_end(*plan, 60, [&](Launcher&, const LaunchEvent& ev) {
        if (ev.kind == LaunchEventKind::output && ev.rank == 0) flood_bytes += ev.text.size();
        if (ev.kind == LaunchEventKind::output && ev.rank == 1 && ev.text.find("\"two\"") != std::string::npos) ++bad_as_text;
    });
    EXPECT_EQ(c.rc, 0) << c.outcome.reason;
    EXPECT_EQ(flood_bytes, std::string("fake engine rank 0 of 4").size() + 40000000u);
    EXPECT_EQ(bad_as_text, 1);
    EXPECT_EQ(c.last_step.count(1) ? c.last_step.at(1) : 0, 2);
    // Every byte is in the log: the first line, 400 lines of 100,000 x, a newline after each.
    EXPECT_EQ(fs::file_size(dir + "/flood-1/rank-0.log"), std::string("fake engine rank 0 of 4\n").size() + 40000000u + 400u);
}

// ---- the command ------------------------------------------------------------------------

struct Proc {
    int rc = -1;
    std::string out, err;
};

TEST(LaunchCommand, DryRunConnectsNowhere) {
    const std::string dir = scratch_dir("cmd");
    write_file(dir + "/hosts", "nobody@192.0.2.1 slots=4\n");
    const std::string cmd = kBin + "/ptd launch " + kSrc + "/assets/jobs/tiny-local.toml --hosts " + dir +
                            "/hosts --dry-run --run-root " + dir + " --run-id dry 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << out;
    EXPECT_NE(out.find("ssh nobody@192.0.2.1 printf"), std::string::npos) << out;
    EXPECT_NE(out.find("export RANK=3;"), std::string::npos) << out;
    EXPECT_FALSE(fs::exists(dir + "/dry"));  // nothing created
}

// The shipped single-node H100 job: 8 local ranks, one GPU each, as the dry run prints it.
TEST(LaunchCommand, DryRunOfTheShippedGpuJobShowsOneGpuPerRank) {
    const std::string dir = scratch_dir("cmd");
    const std::string cmd = kBin + "/ptd launch " + kSrc + "/assets/jobs/llama3-8b-h100.toml --dry-run --run-root " + dir +
                            " --run-id gpu --backend cuda 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    // The plan is printed either way; on a machine without 8 GPUs the dry run ends with the
    // refusal a real launch would give (exit 1).
    const bool gpus_here = out.find("has no usable GPU") == std::string::npos && out.find("this machine has ") == std::string::npos;
    EXPECT_EQ(pclose(p), gpus_here ? 0 : 1 << 8) << out;
    EXPECT_NE(out.find("8 rank(s) on 1 host(s)"), std::string::npos) << out;
    for (int r = 0; r < 8; ++r)
        EXPECT_NE(out.find("LOCAL_RANK " + std::to_string(r) + ", every GPU of the host visible (cuda:" +
                           std::to_string(r) + " in the engine), --backend cuda\n"),
                  std::string::npos)
            << out;
    EXPECT_NE(out.find("--run-dir " + dir + "/gpu --backend cuda\n"), std::string::npos) << out;
    EXPECT_FALSE(fs::exists(dir + "/gpu"));  // nothing created
}

// A GPU job launched locally where this machine has no GPU refuses before any rank starts,
// naming the GPU the job asks for and what the machine has; --backend cpu runs its layout
// on the CPUs on purpose (issue 28 point 6).
TEST(LaunchCommand, GpuJobOnAMachineWithoutGpusRefusesUnlessBackendCpu) {
    const std::string probe = run_capture(kBin + "/ptd-engine --devices 2>&1");
    if (probe.find("cuda:") != std::string::npos) GTEST_SKIP() << "a CUDA device is visible here: " << probe;
    const std::string dir = scratch_dir("cmd");
    const std::string job = kSrc + "/assets/jobs/tiny-gpt-8rank.toml --set cluster.gpu=h100-sxm --steps 1 --run-root " + dir;
    int rc = 0;
    const std::string refused = run_capture(kBin + "/ptd launch " + job + " --run-id gpu 2>&1", &rc);
    EXPECT_EQ(rc, 1) << refused;  // the job is valid; this machine cannot run it
    EXPECT_NE(refused.find("error: cluster.gpu: the job asks for 8 × GPU \"h100-sxm\" on this machine"), std::string::npos)
        << refused;
    EXPECT_NE(refused.find("but this machine has no usable GPU (ptd-engine --devices: "), std::string::npos) << refused;
    EXPECT_NE(refused.find("or --backend cpu to run the job's layout on this machine's CPUs on purpose"), std::string::npos)
        << refused;
    EXPECT_FALSE(fs::exists(dir + "/gpu")) << "a run directory was made: a rank may have started";

    const std::string ran = run_capture(kBin + "/ptd launch " + job + " --run-id cpu --backend cpu 2>&1", &rc);
    EXPECT_EQ(rc, 0) << ran;
    EXPECT_TRUE(fs::exists(dir + "/cpu/rank-7.log")) << ran;
}

TEST(LaunchCommand, SigintStopsEveryRankAndExits130) {
    const std::string dir = scratch_dir("cmd");
    const std::string engine = fake_engine(dir, "sleep 300 & sleep 300");
    int out_pipe[2];
    ASSERT_EQ(pipe(out_pipe), 0);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(out_pipe[1], 1);
        dup2(out_pipe[1], 2);
        close(out_pipe[0]);
        const std::string ptd = kBin + "/ptd";
        execl(ptd.c_str(), "ptd", "launch", (kSrc + "/assets/jobs/tiny-local.toml").c_str(), "--engine", engine.c_str(),
              "--run-root", dir.c_str(), "--run-id", "sigint-1", (char*)nullptr);
        _exit(127);
    }
    close(out_pipe[1]);
    // Wait until all four ranks run (their processes carry the run id), then Ctrl-C.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (processes_of_run("sigint-1").size() < 8 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_GE(processes_of_run("sigint-1").size(), 8u);  // 4 ranks + their background children
    kill(pid, SIGINT);
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = read(out_pipe[0], buf, sizeof buf)) > 0;) out.append(buf, (size_t)n);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 130) << out;
    EXPECT_NE(out.find("interrupted"), std::string::npos) << out;
    EXPECT_TRUE(survivors_after("sigint-1", 3).empty());
    auto m = read_manifest(dir + "/sigint-1");
    ASSERT_TRUE(m);
    EXPECT_EQ(m->state, "stopped");
}

// `ptd launch` SIGKILLed mid-run: its manifest stays "running", but its engines died with
// it (parent-death signal). `ptd watch` sees the launcher's pid gone and every rank's pid
// not running, ends, and says so (it used to wait forever).
TEST(LaunchCommand, WatchEndsARunWhoseLauncherWasKilled) {
    const std::string dir = scratch_dir("cmd");
    const pid_t pid = fork();
    if (pid == 0) {
        const int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        const std::string ptd = kBin + "/ptd";
        execl(ptd.c_str(), "ptd", "launch", (kSrc + "/assets/jobs/tiny-local.toml").c_str(), "--steps", "1000000",
              "--run-root", dir.c_str(), "--run-id", "killed-1", (char*)nullptr);
        _exit(127);
    }
    // Wait until the real engines train (a step line in every log), then SIGKILL ptd.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    auto training = [&] {
        for (int r = 0; r < 4; ++r)
            if (last_logged_step(dir + "/killed-1", r) < 1) return false;
        return true;
    };
    while (!training() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(training());
    ASSERT_EQ(read_manifest(dir + "/killed-1")->state, "running");
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(survivors_after("killed-1", 10).empty());
    EXPECT_EQ(read_manifest(dir + "/killed-1")->state, "running");  // nobody recorded the end
    int rc = -1;
    const std::string out = run_capture("timeout 60 " + kBin + "/ptd watch --no-sparklines " + dir + "/killed-1", &rc);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("failed: launcher pid " + std::to_string(pid) + " gone and ranks 0-3 dead (pids not running)"),
              std::string::npos)
        << out;
}

TEST(LaunchCommand, FailureReportNamesRankAndLastStderr) {
    const std::string dir = scratch_dir("cmd");
    const std::string engine = fake_engine(dir, "if [ \"$RANK\" = 1 ]; then echo 'out of cheese' >&2; exit 7; fi\nsleep 300");
    const std::string cmd = kBin + "/ptd launch " + kSrc + "/assets/jobs/tiny-local.toml --engine " + engine +
                            " --run-root " + dir + " --run-id fail-cmd 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    const int status = pclose(p);
    EXPECT_EQ(WEXITSTATUS(status), 7) << out;
    EXPECT_NE(out.find("rank 1 on localhost (local) exited with code 7"), std::string::npos) << out;
    EXPECT_NE(out.find("| out of cheese"), std::string::npos) << out;
    EXPECT_TRUE(survivors_after("fail-cmd", 3).empty());
}

// ---- over SSH: a real sshd on 127.0.0.1 ------------------------------------------------

#include "netns_hosts.h"
#include "sshd_fixture.h"
#include "two_ssh_hosts.h"

namespace {

// tiny-local through the fixture's sshd: one host, four slots.
struct SshSetup {
    SshdFixture sshd;
    std::string dir, skip;
    JobSpec job;
    LaunchOptions opts;
    SshSetup(const std::string& id) {
        unsetenv("SSH_AUTH_SOCK");
        skip = sshd.start();
        if (!skip.empty()) return;
        dir = scratch_dir("ssh");
        write_file(dir + "/hosts", sshd.user + "@127.0.0.1:" + std::to_string(sshd.port) + " slots=4\n");
        job = load(kSrc + "/assets/jobs/tiny-local.toml");
        job.launch.identity = sshd.identity;
        job.launch.connect_timeout_s = 5;
        opts = options_in(dir, id);
        opts.hostfile = dir + "/hosts";
        opts.known_hosts = sshd.known_hosts;
        opts.ssh_config = sshd.ssh_config;
    }
};

std::string texts_of(const Collected& c, LaunchEventKind kind) {
    std::string s;
    for (const LaunchEvent& ev : c.events)
        if (ev.kind == kind) s += ev.text + "\n";
    return s;
}

}  // namespace

TEST(SshLaunch, FourEngineRanksThroughSshdWithUpload) {
    SshSetup s("ssh-4");
    if (!s.skip.empty()) GTEST_SKIP() << s.skip;
    s.sshd.trust_host_key();
    s.opts.upload = true;
    s.opts.steps = 2;
    auto plan = make_launch_plan(s.job, s.opts);
    ASSERT_TRUE(plan) << plan.error().str();
    EXPECT_FALSE(plan->local);
    const Collected c = run_to_end(*plan, 120);
    EXPECT_EQ(c.rc, 0) << c.outcome.reason << "\n" << texts_of(c, LaunchEventKind::host_failed);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(c.last_step.count(r) ? c.last_step.at(r) : 0, 2) << "rank " << r;
    EXPECT_NE(texts_of(c, LaunchEventKind::host_ready).find("uploaded ptd-engine"), std::string::npos);
    // The uploaded copy is the local engine, byte for byte.
    EXPECT_EQ(read_file(plan->hosts[0].remote_dir + "/ptd-engine"), read_file(kBin + "/ptd-engine"));
    EXPECT_TRUE(survivors_after("ssh-4", 3).empty());
    auto m = read_manifest(plan->run_dir);
    ASSERT_TRUE(m) << m.error().str();
    for (const RunManifestRank& r : m->ranks) EXPECT_GT(r.pid, 1) << "rank " << r.rank;  // remote pids arrive too
    EXPECT_EQ(m->state, "finished");
    // The measured timeline: each rank wrote it into its host's folder, the launcher
    // collected it into RUN_DIR/timeline, where `ptd trace` and the studio read it.
    EXPECT_NE(texts_of(c, LaunchEventKind::host_ready).find("collected 4 measured-timeline files"), std::string::npos)
        << texts_of(c, LaunchEventKind::host_ready);
    for (int r = 0; r < 4; ++r) {
        const std::string name = "/timeline/" + timeline_file_name(r);
        EXPECT_EQ(read_file(plan->run_dir + name), read_file(plan->hosts[0].remote_dir + name)) << name;
    }
    auto measured = read_measured_timeline(plan->run_dir);
    ASSERT_TRUE(measured) << measured.error().str();
    ASSERT_EQ(measured->size(), 4u);
    for (const MeasuredRank& mr : *measured) {
        int fwd = 0;
        for (const TimelineBlock& b : mr.blocks) fwd += b.kind == BlockKind::forward;
        EXPECT_GT(fwd, 0) << "rank " << mr.header.rank;
    }
}

TEST(SshLaunch, TheRunSecretReachesRanksOnStdinNotOnACommandLine) {
    SshSetup s("ssh-secret");
    if (!s.skip.empty()) GTEST_SKIP() << s.skip;
    s.sshd.trust_host_key();
    s.job.launch.engine = fake_engine(s.dir, kSecretReport);
    auto plan = make_launch_plan(s.job, s.opts);
    ASSERT_TRUE(plan) << plan.error().str();
    const Collected c = run_to_end(*plan, 60);
    EXPECT_EQ(c.rc, 0) << c.outcome.reason << "\n" << texts_of(c, LaunchEventKind::host_failed);
    expect_secret_handed_over(secret_reports(c), 4);
}

TEST(SshLaunch, UnknownHostKeyIsRefusedUnlessAccepted) {
    SshSetup s("ssh-unknown");
    if (!s.skip.empty()) GTEST_SKIP() << s.skip;
    const std::string dir = s.dir;
    s.job.launch.engine = fake_engine(dir, "exit 0");
    auto plan = make_launch_plan(s.job, s.opts);
    ASSERT_TRUE(plan) << plan.error().str();
    Collected c = run_to_end(*plan, 30);
    EXPECT_EQ(c.rc, 1);
    const std::string failed = texts_of(c, LaunchEventKind::host_failed);
    EXPECT_NE(failed.find("--accept-new-host-keys"), std::string::npos) << failed;
    EXPECT_TRUE(texts_of(c, LaunchEventKind::rank_started).empty());

    s.opts.accept_new_host_keys = true;
    s.opts.run_id = "ssh-accepted";
    plan = make_launch_plan(s.job, s.opts);
    ASSERT_TRUE(plan);
    c = run_to_end(*plan, 30);
    EXPECT_EQ(c.rc, 0) << c.outcome.reason;
    EXPECT_NE(read_file(s.sshd.known_hosts).find("127.0.0.1"), std::string::npos);  // recorded
}

TEST(SshLaunch, ChangedHostKeyIsAlwaysRefused) {
    SshSetup s("ssh-changed");
    if (!s.skip.empty()) GTEST_SKIP() << s.skip;
    s.sshd.trust_host_key(/*wrong_key=*/true);
    s.opts.accept_new_host_keys = true;
    s.job.launch.engine = fake_engine(s.dir, "exit 0");
    auto plan = make_launch_plan(s.job, s.opts);
    ASSERT_TRUE(plan);
    const Collected c = run_to_end(*plan, 30);
    EXPECT_EQ(c.rc, 1);
    const std::string failed = texts_of(c, LaunchEventKind::host_failed);
    EXPECT_NE(failed.find(s.sshd.fingerprint(false)), std::string::npos) << failed;
    EXPECT_NE(failed.find(s.sshd.fingerprint(true)), std::string::npos) << failed;
}

TEST(SshLaunch, FailingRemoteRankTearsDownEveryRank) {
    SshSetup s("ssh-fail");
    if (!s.skip.empty()) GTEST_SKIP() << s.skip;
    s.sshd.trust_host_key();
    s.job.launch.grace_s = 2;
    s.job.launch.engine = fake_engine(s.dir, "if [ \"$RANK\" = 1 ]; then sleep 0.5; echo 'remote rank 1 failed' >&2; exit 5; fi\n"
                                             "sleep 300 & sleep 300");
    auto plan = make_launch_plan(s.job, s.opts);
    ASSERT_TRUE(plan);
    const Collected c = run_to_end(*plan, 60);
    EXPECT_EQ(c.rc, 5);
    EXPECT_EQ(c.outcome.failed_rank, 1);
    ASSERT_FALSE(c.outcome.last_stderr.empty());
    EXPECT_EQ(c.outcome.last_stderr.back(), "remote rank 1 failed");
    EXPECT_TRUE(survivors_after("ssh-fail", 5).empty());
}

// The issue's "done": the CLI, through --hosts, over SSH to localhost, real engine.
TEST(SshLaunch, PtdLaunchCommandOverSsh) {
    SshSetup s("ssh-cli");
    if (!s.skip.empty()) GTEST_SKIP() << s.skip;
    s.sshd.trust_host_key();
    const std::string cmd = kBin + "/ptd launch " + kSrc + "/assets/jobs/tiny-local.toml --hosts " + s.dir +
                            "/hosts --upload --steps 3 --known-hosts " + s.sshd.known_hosts + " --ssh-config " +
                            s.sshd.ssh_config + " --set launch.identity=" + s.sshd.identity + " --run-root " + s.dir +
                            " --run-id ssh-cli 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    EXPECT_EQ(WEXITSTATUS(pclose(p)), 0) << out;
    EXPECT_NE(out.find("done: every rank finished"), std::string::npos) << out;
    for (int r = 0; r < 4; ++r)
        EXPECT_NE(read_file(s.dir + "/ssh-cli/rank-" + std::to_string(r) + ".log").find("\"event\":\"end\""), std::string::npos)
            << "rank " << r;
    EXPECT_TRUE(survivors_after("ssh-cli", 3).empty());
}

TEST(SshLaunch, MissingRemoteEngineIsReportedAtOnce) {
    SshSetup s("ssh-noengine");
    if (!s.skip.empty()) GTEST_SKIP() << s.skip;
    s.sshd.trust_host_key();
    s.job.launch.engine = s.dir + "/not-installed/ptd-engine";
    auto plan = make_launch_plan(s.job, s.opts);
    ASSERT_TRUE(plan) << plan.error().str();
    const auto t0 = std::chrono::steady_clock::now();
    const Collected c = run_to_end(*plan, 20);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15));  // no teardown wait
    EXPECT_EQ(c.rc, 1);
    EXPECT_NE(c.outcome.reason.find("--upload"), std::string::npos) << c.outcome.reason;
}

// An hf_config job over SSH: the config (always) and the data file (--upload) are sent
// next to each host's job.toml, which names them there; the ranks train from the copies.
TEST(SshLaunch, HfConfigJobSendsItsFilesNextToJobToml) {
    SshSetup s("ssh-hf");
    if (!s.skip.empty()) GTEST_SKIP() << s.skip;
    s.sshd.trust_host_key();
    JobSpec job = load(hf_job_folder(s.dir, /*data=*/true));
    job.launch.identity = s.sshd.identity;
    job.launch.connect_timeout_s = 5;
    s.opts.upload = true;
    s.opts.steps = 2;
    auto plan = make_launch_plan(job, s.opts);
    ASSERT_TRUE(plan) << plan.error().str();
    const Collected c = run_to_end(*plan, 120);
    EXPECT_EQ(c.rc, 0) << c.outcome.reason << "\n" << texts_of(c, LaunchEventKind::host_failed);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(c.last_step.count(r) ? c.last_step.at(r) : 0, 2) << "rank " << r;
    const std::string remote = plan->hosts[0].remote_dir;
    EXPECT_EQ(read_file(remote + "/tiny.json"), read_file(s.dir + "/job/cfg/tiny.json"));
    EXPECT_EQ(read_file(remote + "/corpus.txt"), read_file(s.dir + "/job/data/corpus.txt"));
    const std::string remote_job = read_file(remote + "/job.toml");
    EXPECT_NE(remote_job.find("hf_config = \"tiny.json\""), std::string::npos) << remote_job;
    EXPECT_NE(remote_job.find("data = \"corpus.txt\""), std::string::npos) << remote_job;
    EXPECT_NE(texts_of(c, LaunchEventKind::host_ready).find("sent job.toml, tiny.json, corpus.txt"), std::string::npos)
        << texts_of(c, LaunchEventKind::host_ready);
    EXPECT_TRUE(survivors_after("ssh-hf", 3).empty());
}

// A hostfile naming an ssh config alias: the ranks rendezvous at the alias's HostName
// (what the SSH connection reached), not at the alias, which no resolver knows; naming
// the alias as MASTER_ADDR is refused on the host at once instead of hanging the ranks.
TEST(SshLaunch, SshConfigAliasGivesTheRanksTheAddressItReaches) {
    SshSetup s("ssh-alias");
    if (!s.skip.empty()) GTEST_SKIP() << s.skip;
    s.sshd.trust_host_key();  // [127.0.0.1]:port, as ssh records the HostName
    write_file(s.dir + "/ssh_config", "Host myalias\n  HostName 127.0.0.1\n  Port " + std::to_string(s.sshd.port) +
                                          "\n  User " + s.sshd.user + "\n");
    write_file(s.dir + "/hosts", "myalias slots=4\n");
    s.opts.ssh_config = s.dir + "/ssh_config";
    s.opts.upload = true;
    s.opts.steps = 2;
    auto plan = make_launch_plan(s.job, s.opts);
    ASSERT_TRUE(plan) << plan.error().str();
    EXPECT_EQ(plan->master_addr, "127.0.0.1");
    for (const RankPlan& r : plan->ranks) EXPECT_EQ(env_of(r, "MASTER_ADDR"), "127.0.0.1");
    const std::string dry = format_dry_run(*plan);
    EXPECT_NE(dry.find("master: 127.0.0.1:(a free port found on the first host at launch) (MASTER_ADDR from HostName of "
                       "the first host \"myalias\" in " + s.dir + "/ssh_config)"),
              std::string::npos)
        << dry;
    const Collected c = run_to_end(*plan, 120);
    EXPECT_EQ(c.rc, 0) << c.outcome.reason << "\n" << texts_of(c, LaunchEventKind::host_failed);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(c.last_step.count(r) ? c.last_step.at(r) : 0, 2) << "rank " << r;
    auto m = read_manifest(plan->run_dir);
    ASSERT_TRUE(m) << m.error().str();
    EXPECT_EQ(m->master_addr, "127.0.0.1");

    // The alias itself as MASTER_ADDR (what ranks used to get): refused before any rank
    // starts, naming the address and the host, long before the engines' 300 s timeout.
    s.opts.master_addr = "myalias";
    s.opts.run_id = "ssh-alias-2";
    plan = make_launch_plan(s.job, s.opts);
    ASSERT_TRUE(plan) << plan.error().str();
    const Collected bad = run_to_end(*plan, 60);
    EXPECT_EQ(bad.rc, 1);
    EXPECT_NE(bad.outcome.reason.find("MASTER_ADDR 'myalias' does not resolve on host myalias"), std::string::npos)
        << bad.outcome.reason;
    EXPECT_TRUE(texts_of(bad, LaunchEventKind::rank_started).empty());
    EXPECT_TRUE(survivors_after("ssh-alias-2", 3).empty());
}

// ---- two hosts: two sshd in their own network namespaces, joined by a bridge ------------
// (tests/netns_hosts.h)

TEST(TwoHostLaunch, RanksOnTwoSshHostsTrainAndFailTogether) {
    const std::string dir = scratch_dir("two-host");
    TwoSshHosts hosts(dir, 2);  // one key for both hosts, both host keys known
    if (!hosts.skip.empty()) GTEST_SKIP() << hosts.skip;
    const SshdFixture& a = hosts.a;
    JobSpec job = load(kSrc + "/assets/jobs/tiny-local.toml");
    job.cluster.nodes = 2;
    job.cluster.gpus_per_node = 2;
    job.launch.identity = a.identity;
    job.launch.connect_timeout_s = 5;
    // Each rank's Gloo pairs listen on its namespace's interface (forwarded GLOO_*).
    setenv("GLOO_SOCKET_IFNAME", "eth0", 1);
    LaunchOptions o = options_in(dir, "two-host");
    o.hostfile = hosts.hostfile;
    o.known_hosts = hosts.known_hosts;
    o.ssh_config = a.ssh_config;
    o.upload = true;
    o.steps = 3;
    auto plan = make_launch_plan(job, o);
    ASSERT_TRUE(plan) << plan.error().str();
    ASSERT_EQ(plan->hosts[1].ranks, (std::vector<int>{2, 3}));
    const Collected c = run_to_end(*plan, 120);
    EXPECT_EQ(c.rc, 0) << c.outcome.reason << "\n" << texts_of(c, LaunchEventKind::host_failed);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(c.last_step.count(r) ? c.last_step.at(r) : 0, 3) << "rank " << r;
    EXPECT_EQ(plan->master_addr, "10.231.77.2");

    // A rank on the second host fails: every rank on both hosts is stopped.
    job.launch.engine = fake_engine(dir, "if [ \"$RANK\" = 3 ]; then sleep 0.5; echo 'host b rank 3 failed' >&2; exit 4; fi\n"
                                         "sleep 300 & sleep 300");
    o.upload = false;
    o.run_id = "two-host-fail";
    plan = make_launch_plan(job, o);
    ASSERT_TRUE(plan);
    const Collected f = run_to_end(*plan, 60);
    unsetenv("GLOO_SOCKET_IFNAME");
    EXPECT_EQ(f.rc, 4);
    EXPECT_EQ(f.outcome.failed_rank, 3);
    EXPECT_EQ(f.outcome.failed_host, 1);
    EXPECT_TRUE(survivors_after("two-host-fail", 5).empty());
}

// A MASTER_ADDR that resolves but that no host answers for (an address on the bridge's
// subnet that nobody has: ARP fails, "No route to host"): the ranks fail within seconds,
// naming the address and their host, instead of waiting their whole 300 s timeout.
TEST(TwoHostLaunch, UnreachableMasterAddrFailsWithinSeconds) {
    NetnsHosts net(2);
    if (!net.skip.empty()) GTEST_SKIP() << net.skip;
    const std::string dir = scratch_dir("unreachable");
    LaunchOptions o = options_in(dir, "unreachable");
    o.master_addr = "10.231.77.9";
    auto plan = make_launch_plan(load(kSrc + "/assets/jobs/tiny-local.toml"), o);
    ASSERT_TRUE(plan) << plan.error().str();
    const Collected c = run_to_end(*plan, 120);
    EXPECT_EQ(c.rc, 1) << c.outcome.reason;
    std::string stderr_text;
    for (const std::string& l : c.outcome.last_stderr) stderr_text += l + "\n";
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    // Rank 0 serves the store on MASTER_ADDR itself (never every interface), so an address
    // that is not its host's fails there at once.
    EXPECT_NE(stderr_text.find("MASTER_ADDR '10.231.77.9' is not an address of rank 0's host " + std::string(host)),
              std::string::npos)
        << stderr_text;
    EXPECT_TRUE(survivors_after("unreachable", 5).empty());
}
