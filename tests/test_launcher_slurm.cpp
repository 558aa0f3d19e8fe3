// test_launcher_slurm.cpp — `ptd launch --slurm --submit`, `ptd watch` and `ptd stop`
// against a real single-host Slurm (tests/slurm_fixture.h: munged, slurmctld and slurmd on
// 127.0.0.1): the generated sbatch script trains tiny-gpt-8rank's 8 ranks through srun; a
// rank killed mid-run, a scancel and a time limit each end the run as Slurm says, and
// nothing of the run stays running; with --max-restarts a rank killed mid-run is followed by a
// fresh srun step that resumes from the newest checkpoint with the undisturbed losses, and with
// --exclude-failed on a two-node Slurm (a second slurmd in a network namespace) the next step
// runs without the failed rank's node at the layout planned for the node left. Skipped (saying
// why) only without Slurm's packages, root or network namespaces.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "cpu_quota_cgroup.h"
#include "launcher_test_util.h"
#include "loss_curve.h"
#include "process_test_util.h"
#include "ptd/launch.h"
#include "ptd/run_dir.h"
#include "ptd/spec/cluster_profile.h"
#include "slurm_fixture.h"

namespace {

using namespace ptd_test;
using ptd::shell_quote;

const std::string kBin = PTD_BIN_DIR;
const std::string kJob = std::string(PTD_SOURCE_DIR) + "/assets/jobs/tiny-gpt-8rank.toml";

#define START_SLURM_NODES(slurm, nodes)                                \
    do {                                                              \
        if (std::string why = (slurm).start(nodes); !why.empty()) {   \
            if ((slurm).failed) FAIL() << why;                        \
            GTEST_SKIP() << why;                                      \
        }                                                             \
    } while (0)
#define START_SLURM(slurm) START_SLURM_NODES(slurm, 1)

// The job id a `--slurm --submit` printed ("submitted Slurm job N"); "" (a test failure) when none.
std::string job_id_in(const Proc& p) {
    std::smatch m;
    if (!std::regex_search(p.out, m, std::regex("submitted Slurm job (\\d+)"))) {
        ADD_FAILURE() << "no job id in: " << p.out << p.err;
        return "";
    }
    return m[1];
}

// This machine's host name as a rank reports it (gethostname, as ptd-engine's probes do).
std::string this_hostname() {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    return host;
}

// `ptd launch tiny-gpt-8rank --slurm --submit` into dir/runs/<id>; the Slurm job id.
std::string submit(const SlurmFixture& slurm, const std::string& dir, const std::string& id, const std::string& extra,
                   const std::string& job_file = kJob) {
    const Proc p = run_captured(slurm.env() + " " + kBin + "/ptd launch " + shell_quote(job_file) + " --slurm --submit --run-root " +
                                shell_quote(dir + "/runs") + " --run-id " + id + " " + extra);
    EXPECT_EQ(p.rc, 0) << p.out << p.err;
    return job_id_in(p);
}

// The highest step rank `rank` logged so far (-1 = none yet).
int logged_step(const std::string& run, int rank) {
    static const std::regex step("\"step\":(\\d+)");
    const std::string log = read_file(run + "/rank-" + std::to_string(rank) + ".log");
    int last = -1;
    for (auto it = std::sregex_iterator(log.begin(), log.end(), step); it != std::sregex_iterator(); ++it)
        last = std::max(last, std::stoi((*it)[1]));
    return last;
}

bool wait_until(double seconds, const std::function<bool()>& ready) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
        if (ready()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return ready();
}

// The pid of the run's rank `rank` (its environment has PTD_RUN_ID and RANK), 0 if none.
int rank_pid(const std::string& run_id, int rank) {
    for (int pid : processes_of_run(run_id)) {
        std::ifstream f("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
        const std::string exe = read_file("/proc/" + std::to_string(pid) + "/cmdline");
        if (exe.find("ptd-engine") == std::string::npos) continue;
        for (std::string var; std::getline(f, var, '\0');)
            if (var == "RANK=" + std::to_string(rank)) return pid;
    }
    return 0;
}

// SIGKILL to the run's rank `rank`; says why not when it has no such rank or the kill fails.
std::string kill_rank(const std::string& run_id, int rank) {
    const int pid = rank_pid(run_id, rank);
    if (pid <= 0) return "no process of run " + run_id + " is rank " + std::to_string(rank);
    if (kill(pid, SIGKILL) != 0) return "kill(" + std::to_string(pid) + ", SIGKILL): " + std::strerror(errno);
    return "";
}

// A long run of tiny-gpt-8rank submitted as `id` (with `extra` flags), once rank `rank` logged
// a step: its job id.
std::string running_job(const SlurmFixture& slurm, const std::string& dir, const std::string& id, int rank,
                        const std::string& extra = "") {
    const std::string job = submit(slurm, dir, id, "--steps 100000 " + extra);
    const std::string log = dir + "/runs/" + id + "/rank-" + std::to_string(rank) + ".log";
    if (!job.empty() && !wait_until(180, [&] { return logged_step(dir + "/runs/" + id, rank) >= 1; })) {
        ADD_FAILURE() << "rank " << rank << " logged no step in 180 s:\n" << read_file(log);
        return "";
    }
    return job;
}

Proc watch(const SlurmFixture& slurm, const std::string& run) {
    return run_captured(slurm.env() + " timeout 300 " + kBin + "/ptd watch --no-sparklines " + shell_quote(run));
}

TEST(SlurmLaunch, SubmittedJobTrainsEightRanksThroughSrunAndWatchFollowsItToCompleted) {
    SlurmFixture slurm;
    START_SLURM(slurm);
    TempDir dir("slurm_ok");
    // The operators' keys on a real Slurm: a partition, a time limit, CPUs per task, the engine
    // staged to node-local disk with sbcast.
    const std::string job = submit(slurm, dir.path.string(), "ok",
                                   "--steps 6 --partition " + slurm.partition +
                                       " --time 0:10:00 --set launch.slurm.cpus_per_task=1 --set launch.slurm.sbcast=true");
    ASSERT_FALSE(job.empty());
    const std::string run = dir / "runs/ok";
    auto m = ptd::read_manifest(run);
    ASSERT_TRUE(m) << m.error().str();
    ASSERT_TRUE(m->scheduler);
    EXPECT_EQ(m->scheduler->kind, "slurm");
    EXPECT_EQ(m->scheduler->job_id, job);

    const Proc w = watch(slurm, run);
    EXPECT_EQ(w.rc, 0) << w.out << w.err;
    EXPECT_NE(w.out.find("finished: Slurm job " + job + " COMPLETED: completed"), std::string::npos)
        << w.out << w.err << read_file(run + "/slurm-" + job + ".out");
    EXPECT_NE(w.out.find("Slurm job " + job + " COMPLETED"), std::string::npos) << w.out;  // the header
    EXPECT_NE(w.out.find(" " + slurm.node + " "), std::string::npos) << w.out;  // the job's node (squeue %N), not "node-0"
    for (int r = 0; r < 8; ++r) EXPECT_EQ(logged_step(run, r), 6) << "rank " << r << "\n" << read_file(run + "/rank-" + std::to_string(r) + ".log");
    EXPECT_TRUE(processes_of_run("ok").empty());
    EXPECT_EQ(slurm.live_jobs(), "");
    const std::string script = read_file(run + "/sbatch.sh");
    EXPECT_NE(script.find("#SBATCH --partition=" + slurm.partition + "\n#SBATCH --time=0:10:00\n"), std::string::npos) << script;
    EXPECT_NE(script.find("sbcast --force "), std::string::npos) << script;
    EXPECT_FALSE(std::filesystem::exists("/tmp/ptd-engine." + job));  // the staged copy is removed
}

// An engine wrapper in `dir` that runs the real ptd-engine, except that rank 3 exits 3 where
// the bash test `when` holds (on its arguments "$*").
std::string engine_failing_rank_3(const TempDir& dir, const std::string& when) {
    const std::string path = dir / "engine.sh";
    std::ofstream(path) << "#!/bin/bash\nif [[ \"$RANK\" = 3 ]] && [[ " << when << " ]]; then exit 3; fi\nexec " << kBin
                        << "/ptd-engine \"$@\"\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path;
}

// `ptd calibrate --slurm --submit` into dir/runs/<id> with -o dir/<id>.toml (and `extra`
// flags): what it printed and its exit status.
Proc calibrate_through_slurm(const SlurmFixture& slurm, const std::string& dir, const std::string& id, const std::string& extra) {
    return run_captured(slurm.env() + " timeout 300 " + kBin + "/ptd calibrate " + shell_quote(kJob) +
                        " --slurm --submit --quick --partition " + slurm.partition + " --time 0:10:00 --run-root " +
                        shell_quote(dir + "/runs") + " --run-id " + id + " -o " + shell_quote(dir + "/" + id + ".toml") + " " + extra);
}

// The probes as a Slurm job: the command follows it with a line per probe and host and writes
// the profile once Slurm reports the job completed; the profile holds every rank's samples.
TEST(SlurmLaunch, CalibrateSubmitsTheProbesFollowsThemAndWritesTheProfile) {
    SlurmFixture slurm;
    START_SLURM(slurm);
    TempDir dir("slurm_cal");
    const Proc c = calibrate_through_slurm(slurm, dir.path.string(), "cal", "");
    ASSERT_EQ(c.rc, 0) << c.out << c.err;
    ASSERT_NE(job_id_in(c), "");
    EXPECT_NE(c.out.find("probing " + kJob + " through Slurm"), std::string::npos) << c.out;
    EXPECT_NE(c.out.find("  host 0 (" + this_hostname() + ") [1/"), std::string::npos) << c.out;  // a line per probe, named by the node
    EXPECT_NE(c.out.find("wrote " + (dir / "cal.toml")), std::string::npos) << c.out;
    auto prof = ptd::load_profile(dir / "cal.toml");
    ASSERT_TRUE(prof) << prof.error().str();
    EXPECT_TRUE(prof->quick);
    ASSERT_EQ(prof->hosts.size(), 1u);
    EXPECT_EQ(prof->hosts[0].ranks, 8);
    std::set<int> ranks;
    for (const ptd::ProfileSample& s : prof->samples) ranks.insert(s.rank);
    EXPECT_EQ(ranks.size(), 8u) << "every rank's samples";
    const std::string script = read_file(dir / "runs/cal/sbatch.sh");
    EXPECT_NE(script.find("#SBATCH --partition=" + slurm.partition + "\n#SBATCH --time=0:10:00\n"), std::string::npos) << script;
    EXPECT_NE(script.find(" --probe --quick "), std::string::npos) << script;
    EXPECT_TRUE(processes_of_run("cal").empty());
    EXPECT_EQ(slurm.live_jobs(), "");
}

// A probing rank that exits fails the Slurm job: no profile, the job's state and the logs named.
TEST(SlurmLaunch, CalibrateWhoseJobFailsWritesNoProfile) {
    SlurmFixture slurm;
    START_SLURM(slurm);
    TempDir dir("slurm_cal_fail");
    const std::string engine = engine_failing_rank_3(dir, "-n 1");
    const Proc c = calibrate_through_slurm(slurm, dir.path.string(), "calfail", "--engine " + shell_quote(engine));
    EXPECT_EQ(c.rc, 1) << c.out << c.err;
    const std::string job = job_id_in(c);
    ASSERT_NE(job, "");
    EXPECT_NE(c.err.find("ptd calibrate: failed: Slurm job " + job + " FAILED: failed; rank 3 on "), std::string::npos) << c.err;
    EXPECT_NE(c.err.find("no profile written. Logs: " + (dir / "runs/calfail")), std::string::npos) << c.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "calfail.toml"));
    EXPECT_TRUE(survivors_after("calfail", 30).empty());
    EXPECT_EQ(slurm.live_jobs(), "");
}

// --preflight under Slurm: the script probes the allocated node with every rank first, judges it
// with ptd calibrate --collect --check on the batch node, then trains.
TEST(SlurmLaunch, PreflightProbesTheAllocatedNodeBeforeTheRanksTrain) {
    SlurmFixture slurm;
    START_SLURM(slurm);
    TempDir dir("slurm_pf");
    const std::string job = submit(slurm, dir.path.string(), "pf", "--steps 3 --preflight");
    ASSERT_FALSE(job.empty());
    const std::string run = dir / "runs/pf";
    const Proc w = watch(slurm, run);
    const std::string batch_out = read_file(run + "/slurm-" + job + ".out");
    EXPECT_NE(w.out.find("finished: Slurm job " + job + " COMPLETED"), std::string::npos) << w.out << batch_out;
    // The verdict, in the job's output, names the node by its hostname (not the plan's node-0).
    EXPECT_NE(batch_out.find("host 0 (" + this_hostname() + "): ok (GEMMs"), std::string::npos) << batch_out;
    EXPECT_NE(batch_out.find("ptd calibrate --check: 0 of 1 host(s) flagged"), std::string::npos) << batch_out;
    for (int r = 0; r < 8; ++r) {
        EXPECT_NE(read_file(run + "/preflight/rank-" + std::to_string(r) + ".log").find("\"kind\":\"done\""), std::string::npos)
            << "rank " << r << " finished its probes";
        EXPECT_EQ(logged_step(run, r), 3) << "rank " << r << " trained after the preflight";
    }
    EXPECT_TRUE(processes_of_run("pf").empty());
    EXPECT_EQ(slurm.live_jobs(), "");
}

// A preflight whose probes fail ends the job before any rank trains, saying why.
TEST(SlurmLaunch, APreflightThatFailsEndsTheJobBeforeTraining) {
    SlurmFixture slurm;
    START_SLURM(slurm);
    TempDir dir("slurm_pf_fail");
    const std::string engine = engine_failing_rank_3(dir, "\" $* \" == *\" --probe \"*");  // its probes only
    const std::string job = submit(slurm, dir.path.string(), "pffail", "--steps 3 --preflight --engine " + shell_quote(engine));
    ASSERT_FALSE(job.empty());
    const std::string run = dir / "runs/pffail";
    const Proc w = watch(slurm, run);
    const std::string batch_out = read_file(run + "/slurm-" + job + ".out");
    // ptd watch says what stopped it: the preflight, not a training rank.
    EXPECT_NE(w.out.find("failed: Slurm job " + job + " FAILED: failed; --preflight: the probes failed (their logs: " + run +
                         "/preflight); not training"),
              std::string::npos) << w.out << batch_out;
    for (int r = 0; r < 8; ++r) EXPECT_EQ(logged_step(run, r), -1) << "rank " << r << " trained";
    EXPECT_TRUE(survivors_after("pffail", 30).empty());
    EXPECT_EQ(slurm.live_jobs(), "");
}

// Two nodes, the second one's ranks under a CPU quota while they probe: the script's
// preflight flags that node by its host name, maps it onto the layout and ends the job before
// training.
TEST(SlurmLaunch, PreflightFlagsASlowNodeAndTheJobEndsBeforeTraining) {
    const CpuQuotaCgroup quota("ptd-test-slurm-quota-" + std::to_string(getpid()), 50000);
    if (!quota.skip.empty()) GTEST_SKIP() << quota.skip;
    SlurmFixture slurm;
    START_SLURM_NODES(slurm, 2);
    TempDir dir("slurm_pf_slow");
    const std::string engine = dir / "engine.sh";
    // The second node's ranks (RANK / LOCAL_WORLD_SIZE = 1) probe under the quota, all four
    // together on half a core.
    std::ofstream(engine) << "#!/bin/bash\nif (( RANK / LOCAL_WORLD_SIZE == 1 )) && [[ \" $* \" == *\" --probe \"* ]]; then echo $$ > "
                          << quota.procs() << " || exit 9; fi\nexec " << kBin << "/ptd-engine \"$@\"\n";
    std::filesystem::permissions(engine, std::filesystem::perms::owner_all);
    const std::string job = submit(slurm, dir.path.string(), "pfslow",
                                   "--steps 3 --preflight --set cluster.nodes=2 --set cluster.gpus_per_node=4 --engine " + shell_quote(engine));
    ASSERT_FALSE(job.empty());
    const std::string run = dir / "runs/pfslow";
    const Proc w = watch(slurm, run);
    const std::string batch_out = read_file(run + "/slurm-" + job + ".out");
    EXPECT_NE(w.out.find("failed: Slurm job " + job + " FAILED: failed; --preflight flagged a node or could not judge them"),
              std::string::npos) << w.out << batch_out;
    EXPECT_NE(batch_out.find("host 1 (" + slurm.nodes[1] + ") is "), std::string::npos) << batch_out;
    EXPECT_NE(batch_out.find("% slower at GEMMs; it holds "), std::string::npos) << batch_out;
    EXPECT_NE(batch_out.find("host 0 (" + slurm.nodes[0] + "): ok"), std::string::npos) << batch_out;
    EXPECT_NE(batch_out.find("ptd: --preflight flagged a node or could not judge them (above); not training"), std::string::npos)
        << batch_out;
    for (int r = 0; r < 8; ++r) EXPECT_EQ(logged_step(run, r), -1) << "rank " << r << " trained";
    EXPECT_EQ(read_file(quota.procs()), "") << "no process left in the cgroup";
    EXPECT_TRUE(survivors_after("pfslow", 30).empty());
    EXPECT_EQ(slurm.live_jobs(), "");
}

TEST(SlurmLaunch, ARankKilledMidRunFailsTheJobWithTheRankNamed) {
    SlurmFixture slurm;
    START_SLURM(slurm);
    TempDir dir("slurm_kill");
    const std::string job = running_job(slurm, dir.path.string(), "kill", 3);
    ASSERT_FALSE(job.empty());
    const std::string run = dir / "runs/kill";
    ASSERT_EQ(kill_rank("kill", 3), "");

    const Proc w = watch(slurm, run);
    EXPECT_EQ(w.rc, 0) << w.out << w.err;
    EXPECT_NE(w.out.find("failed: Slurm job " + job + " FAILED: failed; rank 3 on " + slurm.node + ": Killed"), std::string::npos)
        << w.out << read_file(run + "/slurm-" + job + ".out");
    EXPECT_TRUE(survivors_after("kill", 30).empty());
    EXPECT_EQ(slurm.live_jobs(), "");
}

TEST(SlurmLaunch, PtdStopCancelsTheJobAndNothingStaysRunning) {
    SlurmFixture slurm;
    START_SLURM(slurm);
    TempDir dir("slurm_stop");
    const std::string job = running_job(slurm, dir.path.string(), "stop", 0);
    ASSERT_FALSE(job.empty());
    const std::string run = dir / "runs/stop";
    ASSERT_FALSE(processes_of_run("stop").empty());

    const Proc s = run_captured(slurm.env() + " " + kBin + "/ptd stop " + shell_quote(run));
    EXPECT_EQ(s.rc, 0) << s.out << s.err;
    EXPECT_NE(s.out.find("Slurm job " + job + " CANCELLED: cancelled (scancel) by ptd stop"), std::string::npos) << s.out << s.err;
    // ptd stop returns once Slurm reports the job over; its steps' processes go with it.
    EXPECT_TRUE(survivors_after("stop", 20).empty());
    EXPECT_EQ(slurm.live_jobs(), "");
    auto m = ptd::read_manifest(run);
    ASSERT_TRUE(m) << m.error().str();
    EXPECT_EQ(m->state, "stopped");

    const Proc w = watch(slurm, run);
    EXPECT_NE(w.out.find("stopped: Slurm job " + job + " CANCELLED"), std::string::npos) << w.out << w.err;
    // Stopping it again says it is over.
    const Proc again = run_captured(slurm.env() + " " + kBin + "/ptd stop " + shell_quote(run));
    EXPECT_EQ(again.rc, 0);
    EXPECT_NE(again.out.find("already over (stopped)"), std::string::npos) << again.out;
}

TEST(SlurmLaunch, AJobPastItsTimeLimitIsReportedAsTimedOut) {
    SlurmFixture slurm;
    START_SLURM(slurm);
    TempDir dir("slurm_time");
    // One rank of the tiny model, at the lowest CPU priority: the wait is Slurm's clock, not
    // the training, so this case runs beside other tests (tests/CMakeLists.txt) and yields
    // them the cores, instead of the eight ranks of the other cases.
    const std::string one_rank = dir / "one-rank.toml";
    std::ofstream(one_rank) << "[model]\npreset = \"tiny-gpt\"\n\n[cluster]\nnodes = 1\ngpus_per_node = 1\ngpu = \"cpu\"\n\n"
                               "[parallel]\ntp = 1\npp = 1\n\n[training]\nmicro_batch = 1\nglobal_batch = 1\n"
                               "precision = \"fp32\"\ndata = \"synthetic\"\n";
    const std::string engine = dir / "engine.sh";
    std::ofstream(engine) << "#!/bin/bash\nexec nice -n 19 " << kBin << "/ptd-engine \"$@\"\n";
    std::filesystem::permissions(engine, std::filesystem::perms::owner_all);
    // One minute, Slurm's smallest limit; its controller checks limits every 30 s or so.
    const std::string job =
        submit(slurm, dir.path.string(), "time", "--steps 100000 --time 1 --engine " + shell_quote(engine), one_rank);
    ASSERT_FALSE(job.empty());
    const std::string run = dir / "runs/time";
    const Proc w = watch(slurm, run);
    EXPECT_EQ(w.rc, 0) << w.out << w.err;
    EXPECT_NE(w.out.find("failed: Slurm job " + job + " TIMEOUT: timed out: the job ran past its time limit"), std::string::npos)
        << w.out << read_file(run + "/slurm-" + job + ".out");
    EXPECT_GE(logged_step(run, 0), 1) << "it trained until the limit";
    EXPECT_TRUE(survivors_after("time", 30).empty());
    EXPECT_EQ(slurm.live_jobs(), "");
}

// Issue 31: --max-restarts under Slurm. kill -9 of a rank mid-run ends that srun step; the
// batch script starts a fresh one in the same allocation from the newest complete checkpoint,
// records the restart (restarts.jsonl, shown by ptd watch) and the job completes with the
// undisturbed run's losses bit for bit.
TEST(SlurmLaunch, MaxRestartsResumesAKilledRankInAFreshSrunStepWithTheSameLosses) {
    SlurmFixture slurm;
    START_SLURM(slurm);
    TempDir dir("slurm_restart");
    constexpr int kSteps = 10;
    const std::string flags = "--steps " + std::to_string(kSteps) + " --checkpoint-every 2";
    const std::string calm_job = submit(slurm, dir.path.string(), "rcalm", flags);
    ASSERT_FALSE(calm_job.empty());
    const Proc calm = watch(slurm, dir / "runs/rcalm");
    ASSERT_NE(calm.out.find("finished: Slurm job " + calm_job + " COMPLETED"), std::string::npos) << calm.out << calm.err;

    const std::string job = submit(slurm, dir.path.string(), "rhit", flags + " --max-restarts 2");
    ASSERT_FALSE(job.empty());
    const std::string run = dir / "runs/rhit";
    const std::string script = read_file(run + "/sbatch.sh");
    EXPECT_NE(script.find("--open-mode=append"), std::string::npos) << script;
    // After the checkpoint of step 4 is complete and rank 3 trained past it.
    ASSERT_TRUE(wait_until(180, [&] {
        return logged_step(run, 3) >= 5 && std::filesystem::exists(run + "/checkpoints/step-00000004/manifest.json");
    })) << read_file(run + "/rank-3.log") << read_file(run + "/slurm-" + job + ".out");
    ASSERT_EQ(kill_rank("rhit", 3), "");

    const Proc w = watch(slurm, run);
    const std::string out = read_file(run + "/slurm-" + job + ".out");
    EXPECT_EQ(w.rc, 0) << w.out << w.err;
    EXPECT_NE(w.out.find("finished: Slurm job " + job + " COMPLETED"), std::string::npos) << w.out << out;
    EXPECT_NE(w.out.find("restart 1 of 2: rank 3 on " + slurm.node + ": Killed; resuming from the checkpoint of step "),
              std::string::npos)
        << w.out << out;
    EXPECT_NE(out.find("ptd: restart 1 of 2: rank 3 on " + slurm.node + ": Killed; resuming from step "), std::string::npos) << out;

    auto restarts = ptd::restarts_from_lines(read_file(run + "/restarts.jsonl"), run + "/restarts.jsonl", 8, 1);
    ASSERT_TRUE(restarts) << restarts.error().str();
    ASSERT_EQ(restarts->size(), 1u) << read_file(run + "/restarts.jsonl");
    const ptd::RestartRecord& r = restarts->front();
    EXPECT_EQ(r.attempt, 1);
    EXPECT_EQ(r.rank, 3);
    EXPECT_EQ(r.host, 0);
    EXPECT_GE(r.resumed_from, 4);
    EXPECT_EQ(r.resumed_from % 2, 0);
    EXPECT_GE(r.failed_at_step, 5);
    EXPECT_EQ(r.steps_lost, r.failed_at_step - r.resumed_from);
    EXPECT_GE(r.seconds_lost, 0);
    // The resumed step said which checkpoint it took.
    EXPECT_NE(read_file(run + "/rank-0.log").find("\"resumed_from\":" + std::to_string(r.resumed_from)), std::string::npos);

    // Bit for bit: every rank's loss and gradient norm at every step.
    expect_same_curve(loss_curve(dir / "runs/rcalm", 8), loss_curve(run, 8), (size_t)8 * kSteps);
    EXPECT_TRUE(survivors_after("rhit", 30).empty());
    EXPECT_EQ(slurm.live_jobs(), "");
}

// The budget: with --max-restarts 1, a second kill ends the job failed, naming the rank, and
// the script says no restart is left.
TEST(SlurmLaunch, ASecondFailureAfterTheLastRestartFailsTheJob) {
    SlurmFixture slurm;
    START_SLURM(slurm);
    TempDir dir("slurm_budget");
    const std::string job = submit(slurm, dir.path.string(), "budget", "--steps 100000 --max-restarts 1");
    ASSERT_FALSE(job.empty());
    const std::string run = dir / "runs/budget";
    for (int kill_no = 0; kill_no < 2; ++kill_no) {
        // Rank 5 of this step has logged a step (its log is appended to, so count steps).
        const int before = (int)read_file(run + "/rank-5.log").size();
        ASSERT_TRUE(wait_until(180, [&] {
            const std::string log = read_file(run + "/rank-5.log");
            return (int)log.size() > before && log.find("\"event\":\"step\"", before) != std::string::npos && rank_pid("budget", 5) > 0;
        })) << read_file(run + "/slurm-" + job + ".out");
        ASSERT_EQ(kill_rank("budget", 5), "");
        if (kill_no == 0) {
            ASSERT_TRUE(wait_until(60, [&] { return !read_file(run + "/restarts.jsonl").empty(); }));
        }
    }
    const Proc w = watch(slurm, run);
    const std::string out = read_file(run + "/slurm-" + job + ".out");
    EXPECT_NE(w.out.find("failed: Slurm job " + job + " FAILED"), std::string::npos) << w.out << out;
    EXPECT_NE(out.find("ptd: rank 5 on " + slurm.node + ": Killed; no restart left (1 of 1 used)"), std::string::npos) << out;
    EXPECT_TRUE(survivors_after("budget", 30).empty());
    EXPECT_EQ(slurm.live_jobs(), "");
}

// Issue 31 under Slurm with --exclude-failed, on two nodes of 4 ranks (TP 2 · PP 2 · DP 2,
// ZeRO-1): rank `victim` gets SIGKILL after the checkpoint of step 2; the next srun step
// leaves its node out and runs TP 2 · PP 2 · DP 1 on the other (the layout the script was
// written with), resuming the checkpoint at dp 1 (optimizer shards re-split). The losses after
// the resume are the undisturbed run's by the rule of LocalRestart.
// ExcludeFailedRestartsOnTheNodesLeft: the first step after the resume the same bits (the
// loaded weights alone), later ones within 1e-5 relative (gradient sums in another order).
void expect_restart_without_the_node_of(int victim) {
    SlurmFixture slurm;
    START_SLURM_NODES(slurm, 2);
    TempDir dir("slurm_exclude");
    constexpr int kSteps = 8;
    const int failed_node = victim / 4;
    const std::string flags = "--steps " + std::to_string(kSteps) +
                              " --checkpoint-every 2 --set cluster.nodes=2 --set cluster.gpus_per_node=4 --max-restarts 2 --exclude-failed";
    const std::string calm_job = submit(slurm, dir.path.string(), "xcalm", flags);
    ASSERT_FALSE(calm_job.empty());
    const Proc calm = watch(slurm, dir / "runs/xcalm");
    ASSERT_NE(calm.out.find("finished: Slurm job " + calm_job + " COMPLETED"), std::string::npos)
        << calm.out << calm.err << read_file(dir / ("runs/xcalm/slurm-" + calm_job + ".out"));

    const std::string job = submit(slurm, dir.path.string(), "xhit", flags);
    ASSERT_FALSE(job.empty());
    const std::string run = dir / "runs/xhit";
    EXPECT_NE(read_file(run + "/sbatch.sh").find("#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=4\n"), std::string::npos);
    ASSERT_TRUE(wait_until(180, [&] {
        return logged_step(run, victim) >= 3 && std::filesystem::exists(run + "/checkpoints/step-00000002/manifest.json");
    })) << read_file(run + "/rank-0.log") << read_file(run + "/rank-" + std::to_string(victim) + ".log")
        << read_file(run + "/slurm-" + job + ".out");
    ASSERT_EQ(kill_rank("xhit", victim), "");

    const Proc w = watch(slurm, run);
    const std::string out = read_file(run + "/slurm-" + job + ".out");
    const std::string node = slurm.nodes[(size_t)failed_node];
    EXPECT_EQ(w.rc, 0) << w.out << w.err;
    EXPECT_NE(w.out.find("finished: Slurm job " + job + " COMPLETED"), std::string::npos) << w.out << out;
    const std::string layout = "tp 2 · pp 2 · dp 1 on 1 host (4 ranks): the global batch of 16 sequences as 8 micro-batches of 2 "
                               "per replica (was dp 2 with 4)";
    EXPECT_NE(w.out.find("restart 1 of 2: rank " + std::to_string(victim) + " on " + node +
                         ": Killed; resuming from the checkpoint of step "),
              std::string::npos)
        << w.out << out;
    EXPECT_NE(w.out.find("; without host " + node + ", now " + layout), std::string::npos) << w.out << out;
    EXPECT_NE(out.find(" in a new srun step without node " + node + ": " + layout), std::string::npos) << out;

    auto restarts = ptd::restarts_from_lines(read_file(run + "/restarts.jsonl"), run + "/restarts.jsonl", 8, 2);
    ASSERT_TRUE(restarts) << restarts.error().str();
    ASSERT_EQ(restarts->size(), 1u) << read_file(run + "/restarts.jsonl");
    const ptd::RestartRecord& r = restarts->front();
    EXPECT_EQ(r.rank, victim);
    EXPECT_EQ(r.host, failed_node);
    EXPECT_EQ(r.excluded_host, failed_node);
    EXPECT_EQ(r.excluded_host_name, node);
    EXPECT_EQ(r.layout, layout);
    EXPECT_GE(r.resumed_from, 2);
    EXPECT_EQ(r.steps_lost, r.failed_at_step - r.resumed_from);

    // The step after the restart: 4 ranks on the other node, at dp 1 from the dp-2 checkpoint.
    const std::string rank0 = read_file(run + "/rank-0.log");
    EXPECT_NE(rank0.find("optimizer shards re-split for dp 1"), std::string::npos) << rank0;
    const std::string resumed = rank0.substr(rank0.rfind("\"event\":\"start\""));
    EXPECT_NE(resumed.find("\"world_size\":4"), std::string::npos) << resumed;
    for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(logged_step(run, rank), kSteps) << "rank " << rank;
    for (int rank = 4; rank < 8; ++rank) EXPECT_LT(logged_step(run, rank), kSteps) << "rank " << rank << " ran after the restart";
    expect_curve_after_reshard(loss_curve(dir / "runs/xcalm", 1), loss_curve(run, 1), r.resumed_from, kSteps);
    EXPECT_TRUE(survivors_after("xhit", 30).empty());
    EXPECT_EQ(slurm.live_jobs(), "");
}

// The second node's rank 5 fails: the job finishes on the first node, the store where it was.
TEST(SlurmLaunch, ExcludeFailedRunsTheNextStepWithoutTheFailedNodeAtTheLayoutLeft) { expect_restart_without_the_node_of(5); }

// The first node's rank 1 fails: the job finishes on the second node, and the store (rank 0)
// moves there with it (MASTER_ADDR = the first node left).
TEST(SlurmLaunch, ExcludeFailedOfTheFirstNodeMovesTheStoreToTheNodeLeft) { expect_restart_without_the_node_of(1); }

// A one-node job has no node to leave out: the failed step ends the job, saying why.
TEST(SlurmLaunch, ExcludeFailedOnOneNodeStopsSayingNoNodeIsLeft) {
    SlurmFixture slurm;
    START_SLURM(slurm);
    TempDir dir("slurm_exclude_one");
    const std::string job = running_job(slurm, dir.path.string(), "xone", 3, "--max-restarts 2 --exclude-failed");
    ASSERT_FALSE(job.empty());
    const std::string run = dir / "runs/xone";
    ASSERT_EQ(kill_rank("xone", 3), "");
    const Proc w = watch(slurm, run);
    const std::string out = read_file(run + "/slurm-" + job + ".out");
    EXPECT_NE(w.out.find("failed: Slurm job " + job + " FAILED"), std::string::npos) << w.out << out;
    EXPECT_NE(out.find("ptd: rank 3 on " + slurm.node + ": Killed; --exclude-failed: without node " + slurm.node +
                       ": no host is left to run on; the run stops here"),
              std::string::npos)
        << out;
    EXPECT_EQ(read_file(run + "/restarts.jsonl"), "");
    EXPECT_TRUE(survivors_after("xone", 30).empty());
    EXPECT_EQ(slurm.live_jobs(), "");
}

}  // namespace
