// test_run_dir.cpp — run directories end to end: the ptd.run/1 manifest (round trip,
// every kind of bad manifest naming its file and field), RunDirWriter + RunFollower
// tailing a live run (partial lines, garbled manifests, exits, exactly one `finished`),
// the RunView dashboard (widths, states, units, sparklines, colour) and `ptd watch` run
// as a real process on directories the test writes.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ptd/model/estimate.h"
#include "ptd/run_dir.h"
#include "ptd/spec/cluster_profile.h"
#include "ptd/spec/job_overrides.h"
#include "ptd/spec/job_spec.h"
#include "run_prediction.h"
#include "run_view.h"
#include "term.h"

#include "process_test_util.h"
#include "profile_test_util.h"
#include "run_manifest_test_util.h"
#include "text_test_util.h"

extern char** environ;

using namespace ptd;
namespace fs = std::filesystem;

namespace {

const std::string kPtd = PTD_BIN_DIR "/ptd";

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

using ptd_test::Proc;
using ptd_test::read_file;

void spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

void append_raw(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary | std::ios::app) << text;
}

// A fresh directory per test.
std::string fresh_dir(const std::string& name) {
    const std::string dir = ::testing::TempDir() + "/ptd_run_dir_" + std::to_string(getpid()) + "_" + name;
    fs::remove_all(dir);
    ptd_test::remove_after_tests_if_passed(dir);
    return dir;
}

// 4 ranks on 2 hosts (tp 2 × dp 2), as the launcher would write it.
RunManifest sample_manifest() {
    RunManifest m;
    m.run_id = "20260101-120000-4242";
    m.job_name = "tiny-gpt";
    m.job_file = "assets/jobs/tiny-gpt-8rank.toml";
    m.state = "running";
    m.started = 1767268800.5;
    m.world_size = 4;
    m.steps = 20;
    m.local = false;
    m.master_addr = "10.0.0.1";
    m.master_port = 29500;
    m.hosts = {"alice@node-a:22", "node-b"};
    m.ranks = ptd_test::manifest_ranks(2, 2, 1, 2);
    return m;
}

// The run failed: `rank` exited `code` first, for `reason` (as the launcher records it).
void mark_failed(RunManifest& m, int rank, int code, const std::string& reason) {
    m.state = "failed";
    m.exit_code = code;
    m.failed_rank = rank;
    m.reason = reason;
}

// A ptd.metrics/1 step line with the fields the dashboard shows.
std::string step_line(int rank, int step, double loss, double mem_current = 6916096, double predicted = 6356992) {
    char buf[1024];
    std::snprintf(buf, sizeof buf,
                  R"({"schema":"ptd.metrics/1","event":"step","run_id":"r","rank":%d,"step":%d,"coords":{"tp":%d,"pp":0,"dp":%d},)"
                  R"("loss":%.6f,"lr":0.001,"grad_norm":1.0,"clipped":false,"tokens":512.0,"tokens_per_s":25811.7,"tflops":0.038,)"
                  R"("mfu":0.38,"time":{"step":0.02,"compute":0.019,"tp_comm":0,"pp_comm":0,"pipeline_idle":0,"dp_comm":0,)"
                  R"("optimizer":0.0005},"memory":{"total":{"current":%.0f,"peak":%.0f,"predicted":%.1f}}})",
                  rank, step, rank % 2, rank / 2, loss, mem_current, mem_current, predicted);
    return buf;
}

std::string end_line(int rank, int step) {
    return R"({"schema":"ptd.metrics/1","event":"end","run_id":"r","rank":)" + std::to_string(rank) + R"(,"step":)" +
           std::to_string(step) + R"(,"steps_run":)" + std::to_string(step) + R"(,"time":2.0,"seconds":1.0})";
}

// Sets a file's modification time `seconds_ago` into the past (no sleeping in tests).
void age_file(const std::string& path, double seconds_ago) {
    const auto t = fs::file_time_type::clock::now() - std::chrono::duration_cast<fs::file_time_type::duration>(
                                                            std::chrono::duration<double>(seconds_ago));
    fs::last_write_time(path, t);
}

std::string error_line(int rank, const std::string& msg) {
    return R"({"schema":"ptd.metrics/1","event":"error","run_id":"r","rank":)" + std::to_string(rank) +
           R"(,"time":1.0,"message":")" + msg + "\"}";
}

int count_kind(const std::vector<LaunchEvent>& evs, LaunchEventKind k) {
    return (int)std::count_if(evs.begin(), evs.end(), [k](const LaunchEvent& e) { return e.kind == k; });
}

std::vector<LaunchEvent> poll_all(RunFollower& f, int polls = 5) {
    std::vector<LaunchEvent> all;
    for (int i = 0; i < polls; ++i) {
        auto evs = f.poll();
        all.insert(all.end(), evs.begin(), evs.end());
    }
    return all;
}

// Visible width: code points outside ANSI escape sequences.
int visible_width(const std::string& s) {
    int w = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '[') {
            while (i < s.size() && !(s[i] >= 0x40 && s[i] <= 0x7E && s[i] != '[')) ++i;
            continue;
        }
        w += ((unsigned char)s[i] & 0xC0) != 0x80;
    }
    return w;
}

std::vector<std::string> split_lines(const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
}

// Writes a whole finished (or failed) run the way the launcher does.
void write_finished_run(const std::string& dir, bool failed) {
    RunManifest m = sample_manifest();
    auto w = RunDirWriter::create(dir, "[model]\npreset = \"tiny-gpt\"\n", m);
    ASSERT_TRUE(w.has_value()) << w.error().str();
    for (int r = 0; r < 4; ++r) {
        (*w)->append_line(r, "ptd-engine: rank " + std::to_string(r) + ": training tiny-gpt on 4 rank(s)");
        for (int s = 1; s <= (failed && r == 2 ? 3 : 5); ++s) (*w)->append_line(r, step_line(r, s, 5.5 - 0.3 * s));
        m.ranks[(size_t)r].pid = 1000 + r;
        m.ranks[(size_t)r].exit_code = 0;
    }
    if (failed) {
        (*w)->append_line(2, "ptd-engine: rank 2: error: step 4: loss nan, gradient norm nan is not finite");
        (*w)->append_line(2, error_line(2, "step 4: loss nan is not finite"));
        m.ranks[2].exit_code = 1;
        m.ranks[3].exit_code = -1;
        mark_failed(m, 2, 1, "rank 2 on node-b exited 1");
    } else {
        m.state = "finished";
    }
    m.ended = m.started + 12;
    ASSERT_TRUE((*w)->write_manifest(m).has_value());
}

// Runs `cmd` through the shell, output to files (never a TTY).
Proc run(const std::string& cmd) { return ptd_test::run_captured(cmd, "ptd_watch"); }

}  // namespace

// ---------------------------------------------------------------------------------------
// Manifest

TEST(RunManifest, RoundTrip) {
    RunManifest m = sample_manifest();
    m.ranks[1].pid = 4711;
    m.ranks[1].exit_code = 137;
    m.ranks[3].exit_code = -1;
    mark_failed(m, 1, 137, "rank 1 on alice@node-a:22 exited 137 (killed)");
    m.ended = m.started + 3.25;
    m.profile = RunProfileRecord{"/work/prof.toml", "--profile", "2026-11-29T06:40:00Z"};
    const std::string text = manifest_to_json(m);
    EXPECT_TRUE(contains(text, "\"schema\": \"ptd.run/1\"")) << text;
    auto back = manifest_from_json(text, "m.json");
    ASSERT_TRUE(back.has_value()) << back.error().str();
    EXPECT_EQ(back->run_id, m.run_id);
    EXPECT_EQ(back->job_name, m.job_name);
    EXPECT_EQ(back->job_file, m.job_file);
    EXPECT_EQ(back->state, "failed");
    EXPECT_DOUBLE_EQ(back->started, m.started);
    EXPECT_DOUBLE_EQ(back->ended, m.ended);
    EXPECT_EQ(back->world_size, 4);
    EXPECT_EQ(back->steps, 20);
    EXPECT_FALSE(back->local);
    EXPECT_EQ(back->master_addr, "10.0.0.1");
    EXPECT_EQ(back->master_port, 29500);
    EXPECT_EQ(back->hosts, m.hosts);
    ASSERT_EQ(back->ranks.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(back->ranks[i].rank, m.ranks[i].rank);
        EXPECT_EQ(back->ranks[i].host, m.ranks[i].host);
        EXPECT_EQ(back->ranks[i].local_rank, m.ranks[i].local_rank);
        EXPECT_EQ(back->ranks[i].tp, m.ranks[i].tp);
        EXPECT_EQ(back->ranks[i].dp, m.ranks[i].dp);
        EXPECT_EQ(back->ranks[i].pid, m.ranks[i].pid);
        EXPECT_EQ(back->ranks[i].exit_code, m.ranks[i].exit_code);
    }
    EXPECT_EQ(back->exit_code, 137);
    EXPECT_EQ(back->failed_rank, 1);
    EXPECT_EQ(back->reason, m.reason);
    EXPECT_EQ(back->profile, m.profile);
    EXPECT_EQ(manifest_to_json(*back), text);  // stable
    // Without a profile the field is left out, and a manifest without one reads as none.
    m.profile.reset();
    EXPECT_FALSE(contains(manifest_to_json(m), "\"profile\"")) << manifest_to_json(m);
    EXPECT_FALSE(manifest_from_json(manifest_to_json(m), "m.json")->profile.has_value());
    auto empty_path = manifest_from_json(
        manifest_to_json(m).insert(1, R"("profile": {"path": "", "measured_at": "x"},)"), "m.json");
    ASSERT_FALSE(empty_path.has_value());
    EXPECT_TRUE(contains(empty_path.error().str(), "m.json: error: profile.path: is empty")) << empty_path.error().str();
}

TEST(RunManifest, InitialFromPlan) {
    LaunchPlan plan;
    plan.job.model.name = "tiny-gpt";
    plan.job.origin.file = "jobs/tiny.toml";
    plan.job.training.steps = 100;
    plan.run_id = "run-1";
    plan.run_dir = "/tmp/runs/run-1";
    plan.local = true;
    plan.master_addr = "127.0.0.1";
    plan.master_port = 29511;
    plan.hosts.resize(1);
    plan.hosts[0].display = "localhost";
    for (int r = 0; r < 2; ++r) {
        RankPlan rp;
        rp.rank = r;
        rp.local_rank = r;
        rp.tp = r;
        rp.argv = {"/bin/ptd-engine", "--job", "job.toml", "--steps", "7"};
        plan.ranks.push_back(rp);
    }
    RunManifest m = initial_manifest(plan);
    EXPECT_EQ(m.run_id, "run-1");
    EXPECT_EQ(m.job_name, "tiny-gpt");
    EXPECT_EQ(m.job_file, "jobs/tiny.toml");
    EXPECT_EQ(m.state, "starting");
    EXPECT_GT(m.started, 1.6e9);
    EXPECT_EQ(m.ended, 0);
    EXPECT_EQ(m.world_size, 2);
    EXPECT_EQ(m.steps, 7);  // --steps wins over training.steps
    EXPECT_TRUE(m.local);
    EXPECT_EQ(m.master_port, 29511);
    EXPECT_EQ(m.hosts, std::vector<std::string>{"localhost"});
    ASSERT_EQ(m.ranks.size(), 2u);
    EXPECT_EQ(m.ranks[1].tp, 1);
    EXPECT_EQ(m.ranks[1].pid, 0);
    EXPECT_FALSE(m.ranks[1].exit_code.has_value());
    plan.ranks[0].argv = {"/bin/ptd-engine"};
    EXPECT_EQ(initial_manifest(plan).steps, 100);
    EXPECT_TRUE(manifest_from_json(manifest_to_json(m), "x").has_value());
}

TEST(RunManifest, BadManifestsNameFileAndField) {
    const std::string good = manifest_to_json(sample_manifest());
    auto edit = [&](const std::string& from, const std::string& to) {
        std::string s = good;
        const size_t at = s.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        if (at != std::string::npos) s.replace(at, from.size(), to);
        return s;
    };
    struct Case {
        std::string text, field, says;
    } cases[] = {
        {"", "", "empty"},
        {good.substr(0, good.size() / 2), "", "not valid JSON"},
        {"[1,2]", "", "an array"},
        {edit("\"ptd.run/1\"", "\"ptd.run/9\""), "schema", "ptd.run/9"},
        {edit("\"schema\": \"ptd.run/1\",", ""), "schema", "missing"},
        {edit("\"run_id\": \"20260101-120000-4242\"", "\"run_id\": 5"), "run_id", "got 5, expected a string"},
        {edit("\"state\": \"running\"", "\"state\": \"exploded\""), "state", "exploded"},
        {edit("\"world_size\": 4", "\"world_size\": 0"), "world_size", "got 0"},
        {edit("\"world_size\": 4", "\"world_size\": 3"), "ranks", "expected world_size (3)"},
        {edit("\"master_port\": 29500", "\"master_port\": 70000"), "master_port", "0..65535"},
        {edit("\"hosts\": [", "\"hosts\": \"nope\", \"hosts_before\": ["), "hosts", "got a string (\"nope\"), expected an array"},
        {edit("\"node-b\"", "7"), "hosts[1]", "got 7, expected a string"},
        {edit("\"host\": 1,\n      \"local_rank\": 1", "\"host\": 5,\n      \"local_rank\": 1"), "ranks[3].host", "got 5"},
        {edit("\"rank\": 2,", "\"rank\": 7,"), "ranks[2].rank", "got 7, expected an integer in 2..2"},
        {edit("\"exit_code\": null", "\"exit_code\": \"x\""), "ranks[0].exit_code", "a string (\"x\")"},
        {edit("\"pid\": 0", "\"pid\": -3"), "ranks[0].pid", "got -3"},
        {edit("\"steps\": 20", "\"steps\": 2.5"), "steps", "got 2.5"},
        {edit("\"local\": false", "\"local\": \"no\""), "local", "expected true or false"},
        {edit("\"reason\": \"\"", "\"reason\": null"), "reason", "got null"},
    };
    for (const Case& c : cases) {
        auto r = manifest_from_json(c.text, "runs/x/manifest.json");
        ASSERT_FALSE(r.has_value()) << c.text;
        const std::string msg = r.error().str();
        EXPECT_TRUE(contains(msg, "runs/x/manifest.json: error: ")) << msg;
        if (!c.field.empty()) {
            EXPECT_TRUE(contains(msg, "error: " + c.field + ": ")) << msg;
        }
        EXPECT_TRUE(contains(msg, c.says)) << msg << "\nexpected: " << c.says;
    }
    // Every problem at once, like the job loaders.
    std::string two = edit("\"run_id\": \"20260101-120000-4242\"", "\"run_id\": 5");
    const std::string state = "\"state\": \"running\"";
    two.replace(two.find(state), state.size(), "\"state\": 1");
    auto many = manifest_from_json(two, "m.json");
    ASSERT_FALSE(many.has_value());
    EXPECT_GE(many.error().diagnostics.size(), 2u) << many.error().str();
    // Fields added later are ignored.
    EXPECT_TRUE(manifest_from_json(edit("\"steps\": 20", "\"steps\": 20, \"gpu_hours\": {\"a\": 1}"), "m.json").has_value());
}

TEST(RunManifest, ReadManifestErrorsNameThePath) {
    const std::string dir = fresh_dir("read");
    fs::create_directories(dir);
    auto missing = read_manifest(dir);
    ASSERT_FALSE(missing.has_value());
    EXPECT_TRUE(contains(missing.error().str(), dir + "/manifest.json")) << missing.error().str();
    spit(dir + "/manifest.json", "{\"schema\": \"ptd.run/1\"}");
    auto bad = read_manifest(dir);
    ASSERT_FALSE(bad.has_value());
    EXPECT_TRUE(contains(bad.error().str(), dir + "/manifest.json: error: run_id: missing")) << bad.error().str();
}

// ---------------------------------------------------------------------------------------
// Writer and follower

// A Slurm run's restarts come from its batch script (launch_plan.cpp, slurm_restart_loop):
// one restart object a line of restarts.jsonl; a last line still being written is not read,
// and a bad line is named with its file and line.
TEST(RunManifest, SlurmRestartLinesReadBackAndBadOnesAreNamed) {
    const std::string line1 = R"({"attempt":1,"rank":3,"host":0,"reason":"rank 3 on n1: Killed","time":1700000000,)"
                              R"("failed_at_step":7,"resumed_from":4,"steps_lost":3,"seconds_lost":12})";
    const std::string line2 = R"({"attempt":2,"rank":-1,"host":-1,"reason":"the srun step exited with code 1","time":1700000100,)"
                              R"("failed_at_step":9,"resumed_from":8,"steps_lost":1,"seconds_lost":null})";
    auto rs = restarts_from_lines(line1 + "\n" + line2 + "\n" + R"({"attempt":3,"ra)", "run/restarts.jsonl", 8, 1);
    ASSERT_TRUE(rs) << rs.error().str();
    ASSERT_EQ(rs->size(), 2u);
    EXPECT_EQ((*rs)[0].rank, 3);
    EXPECT_EQ((*rs)[0].reason, "rank 3 on n1: Killed");
    EXPECT_EQ((*rs)[0].resumed_from, 4);
    EXPECT_EQ((*rs)[0].steps_lost, 3);
    EXPECT_EQ((*rs)[0].seconds_lost, 12);
    EXPECT_EQ((*rs)[1].rank, -1);
    EXPECT_LT((*rs)[1].seconds_lost, 0);  // null: not known
    EXPECT_EQ(restarts_from_lines("", "x", 8, 1)->size(), 0u);

    auto garbled = restarts_from_lines(line1 + "\nnot json\n", "run/restarts.jsonl", 8, 1);
    ASSERT_FALSE(garbled);
    ptd_test::expect_mentions(garbled.error().str(), {"run/restarts.jsonl", "line 2", "not a JSON restart object"});
    // A rank outside the world, and attempts out of order.
    auto wrong = restarts_from_lines(std::string(R"({"attempt":2,"rank":9})") + "\n", "run/restarts.jsonl", 8, 1);
    ASSERT_FALSE(wrong);
    ptd_test::expect_mentions(wrong.error().str(), {"line 1: attempt", "line 1: rank", "got 9"});
}

TEST(RunDir, WriterCreatesTheLayout) {
    const std::string dir = fresh_dir("layout") + "/runs/deep/run-1";  // parents too
    auto w = RunDirWriter::create(dir, "[model]\npreset = \"tiny-gpt\"\n", sample_manifest());
    ASSERT_TRUE(w.has_value()) << w.error().str();
    EXPECT_EQ((*w)->dir(), dir);
    EXPECT_EQ(read_file(dir + "/job.toml"), "[model]\npreset = \"tiny-gpt\"\n");
    EXPECT_TRUE(read_manifest(dir).has_value());
    EXPECT_FALSE(fs::exists(dir + "/manifest.json.tmp"));
    (*w)->append_line(3, "hello");
    (*w)->append_line(3, "world");
    // Flushed per line: readable before the writer goes away.
    EXPECT_EQ(read_file(dir + "/rank-3.log"), "hello\nworld\n");

    // A path that cannot be a directory: the error names it.
    const std::string file = fresh_dir("layout-file");
    spit(file, "x");
    auto bad = RunDirWriter::create(file + "/sub", "", sample_manifest());
    ASSERT_FALSE(bad.has_value());
    EXPECT_TRUE(contains(bad.error().str(), file + "/sub")) << bad.error().str();
}

// A run directory is always new: an existing folder (an earlier run with the same id, or
// the user's own folder) is refused and nothing in it is touched.
TEST(RunDir, WriterNeverReusesADirectory) {
    const std::string dir = fresh_dir("reuse");
    fs::create_directories(dir);
    spit(dir + "/job.toml", "# mine, with comments\n");
    auto w = RunDirWriter::create(dir, "[model]\n", sample_manifest());
    ASSERT_FALSE(w.has_value());
    EXPECT_TRUE(contains(w.error().str(), dir + ": error: the run directory already exists")) << w.error().str();
    EXPECT_EQ(read_file(dir + "/job.toml"), "# mine, with comments\n");
    EXPECT_FALSE(fs::exists(dir + "/manifest.json"));
    auto first = RunDirWriter::create(dir + "/run", "a", sample_manifest());
    ASSERT_TRUE(first.has_value());
    EXPECT_FALSE(RunDirWriter::create(dir + "/run", "b", sample_manifest()).has_value());
    EXPECT_EQ(read_file(dir + "/run/job.toml"), "a");
}

TEST(RunDir, WriterIsThreadSafe) {
    const std::string dir = fresh_dir("threads");
    auto w = RunDirWriter::create(dir, "", sample_manifest());
    ASSERT_TRUE(w.has_value());
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 500; ++i) {
                (*w)->append_line(t % 4, "thread " + std::to_string(t) + " line " + std::to_string(i) + std::string(100, 'x'));
                if (i % 100 == 0) {
                    RunManifest m = sample_manifest();
                    m.ranks[(size_t)(t % 4)].pid = 100 + i;
                    EXPECT_TRUE((*w)->write_manifest(m).has_value());
                }
            }
        });
    for (auto& th : threads) th.join();
    for (int r = 0; r < 4; ++r) {
        const auto lines = split_lines(read_file(dir + "/rank-" + std::to_string(r) + ".log"));
        EXPECT_EQ(lines.size(), 1000u);
        for (const auto& l : lines) EXPECT_TRUE(l.starts_with("thread ") && l.ends_with(std::string(100, 'x'))) << l;
    }
    EXPECT_TRUE(read_manifest(dir).has_value());

    // More ranks than the writer keeps open at once: every line still lands, in order.
    for (int round = 0; round < 3; ++round)
        for (int r = 0; r < 700; ++r) (*w)->append_line(100 + r, "round " + std::to_string(round));
    for (int r = 0; r < 700; r += 77)
        EXPECT_EQ(read_file(dir + "/rank-" + std::to_string(100 + r) + ".log"), "round 0\nround 1\nround 2\n") << r;
}

TEST(RunDir, FollowerTailsALiveRun) {
    const std::string dir = fresh_dir("live");
    RunManifest m = sample_manifest();
    m.state = "starting";
    auto w = RunDirWriter::create(dir, "job", m);
    ASSERT_TRUE(w.has_value());
    auto f = RunFollower::open(dir);
    ASSERT_TRUE(f.has_value()) << f.error().str();
    RunFollower& fl = **f;

    // Nothing started yet: no events.
    EXPECT_TRUE(fl.poll().empty());
    EXPECT_FALSE(fl.done());

    // Rank 0 gets a pid; rank 1 writes a log line; ranks 2 and 3 are silent.
    m.state = "running";
    m.ranks[0].pid = 4242;
    ASSERT_TRUE((*w)->write_manifest(m).has_value());
    (*w)->append_line(1, "ptd-engine: rank 1: hello");
    auto evs = fl.poll();
    ASSERT_EQ(count_kind(evs, LaunchEventKind::rank_started), 2);
    EXPECT_EQ(evs[0].kind, LaunchEventKind::rank_started);
    EXPECT_EQ(evs[0].rank, 0);
    EXPECT_EQ(evs[0].pid, 4242);
    EXPECT_EQ(evs[0].host, 0);
    EXPECT_EQ(evs[1].rank, 1);
    EXPECT_EQ(evs[1].kind, LaunchEventKind::rank_started);
    ASSERT_EQ(evs.size(), 3u);
    EXPECT_EQ(evs[2].kind, LaunchEventKind::output);
    EXPECT_EQ(evs[2].text, "ptd-engine: rank 1: hello");
    EXPECT_FALSE(evs[2].is_stderr);
    EXPECT_EQ(fl.manifest().state, "running");

    // A metrics line arriving in three pieces is one metric event, once complete.
    const std::string line = step_line(0, 1, 5.25);
    const std::string log0 = dir + "/rank-0.log";
    append_raw(log0, line.substr(0, 40));
    EXPECT_TRUE(fl.poll().empty());
    append_raw(log0, line.substr(40, 100));
    EXPECT_TRUE(fl.poll().empty());
    append_raw(log0, line.substr(140) + "\nplain text\r\nhalf");
    evs = fl.poll();
    ASSERT_EQ(evs.size(), 2u);
    EXPECT_EQ(evs[0].kind, LaunchEventKind::metric);
    ASSERT_TRUE(evs[0].metric.has_value());
    EXPECT_EQ(evs[0].metric->step, 1);
    EXPECT_DOUBLE_EQ(evs[0].metric->loss, 5.25);
    EXPECT_EQ(evs[0].text, line);
    EXPECT_EQ(evs[1].kind, LaunchEventKind::output);
    EXPECT_EQ(evs[1].text, "plain text");  // CR of a CRLF dropped
    EXPECT_EQ(evs[1].rank, 0);

    // A garbled manifest (a writer without the rename) is skipped, not fatal.
    spit(dir + "/manifest.json", manifest_to_json(m).substr(0, 100));
    EXPECT_TRUE(fl.poll().empty());
    EXPECT_EQ(fl.manifest().run_id, m.run_id);
    EXPECT_EQ(fl.manifest().ranks[0].pid, 4242);
    spit(dir + "/manifest.json", "\x01\x02garbage");
    EXPECT_TRUE(fl.poll().empty());
    EXPECT_EQ(fl.manifest().state, "running");

    // Rank 0 exits; its unfinished last line is delivered before the exit.
    m.ranks[0].exit_code = 0;
    ASSERT_TRUE((*w)->write_manifest(m).has_value());
    evs = fl.poll();
    ASSERT_EQ(evs.size(), 2u);
    EXPECT_EQ(evs[0].kind, LaunchEventKind::output);
    EXPECT_EQ(evs[0].text, "half");
    EXPECT_EQ(evs[1].kind, LaunchEventKind::rank_exited);
    EXPECT_EQ(evs[1].rank, 0);
    EXPECT_EQ(evs[1].exit_code, 0);

    // The rest fail; the run's final state ends the stream with one `finished`.
    (*w)->append_line(2, "ptd-engine: rank 2: error: boom");
    m.ranks[1].exit_code = 143;
    m.ranks[2].exit_code = 1;
    m.ranks[3].exit_code = -1;
    mark_failed(m, 2, 1, "rank 2 on node-b exited 1");
    ASSERT_TRUE((*w)->write_manifest(m).has_value());
    evs = fl.poll();
    // Rank 2 starts with its first line; rank 3 (no pid, no log) only exits.
    EXPECT_EQ(count_kind(evs, LaunchEventKind::rank_started), 1);
    EXPECT_EQ(count_kind(evs, LaunchEventKind::rank_exited), 3);
    ASSERT_FALSE(evs.empty());
    EXPECT_EQ(evs.back().kind, LaunchEventKind::finished);
    EXPECT_EQ(evs.back().exit_code, 1);
    EXPECT_EQ(evs.back().text, "rank 2 on node-b exited 1");
    EXPECT_TRUE(fl.done());
    // The error line came before rank 2's exit.
    auto out_at = std::find_if(evs.begin(), evs.end(), [](const LaunchEvent& e) { return e.kind == LaunchEventKind::output; });
    auto exit2 = std::find_if(evs.begin(), evs.end(), [](const LaunchEvent& e) {
        return e.kind == LaunchEventKind::rank_exited && e.rank == 2;
    });
    ASSERT_NE(out_at, evs.end());
    EXPECT_LT(out_at - evs.begin(), exit2 - evs.begin());
    EXPECT_TRUE(fl.poll().empty());
    EXPECT_TRUE(fl.poll().empty());
}

TEST(RunDir, FinishedRunYieldsFinishedExactlyOnce) {
    const std::string dir = fresh_dir("finished");
    write_finished_run(dir, false);
    auto f = RunFollower::open(dir);
    ASSERT_TRUE(f.has_value());
    const auto evs = poll_all(**f, 6);
    EXPECT_EQ(count_kind(evs, LaunchEventKind::finished), 1);
    EXPECT_EQ(evs.back().kind, LaunchEventKind::finished);
    EXPECT_EQ(evs.back().exit_code, 0);
    EXPECT_EQ(count_kind(evs, LaunchEventKind::rank_started), 4);
    EXPECT_EQ(count_kind(evs, LaunchEventKind::rank_exited), 4);
    EXPECT_EQ(count_kind(evs, LaunchEventKind::metric), 20);
    EXPECT_EQ(count_kind(evs, LaunchEventKind::output), 4);
    EXPECT_TRUE((*f)->done());
    // Per rank, steps arrive in order and before its exit.
    for (int r = 0; r < 4; ++r) {
        int last = 0;
        bool exited = false;
        for (const LaunchEvent& e : evs) {
            if (e.rank != r) continue;
            if (e.kind == LaunchEventKind::metric) {
                EXPECT_FALSE(exited);
                EXPECT_EQ(e.metric->step, last + 1);
                last = e.metric->step;
            }
            if (e.kind == LaunchEventKind::rank_exited) exited = true;
        }
        EXPECT_EQ(last, 5);
        EXPECT_TRUE(exited);
    }
}

// A Slurm run: nobody ever moves the manifest past "starting" (ptd launch --slurm wrote
// it and left). The ranks' own `end` events end the run, and say so.
TEST(RunDir, RanksThatSentEndEndARunTheManifestNeverEnds) {
    const std::string dir = fresh_dir("slurm-ended");
    RunManifest m = sample_manifest();
    m.state = "starting";
    auto w = RunDirWriter::create(dir, "job", m);
    ASSERT_TRUE(w.has_value());
    auto f = RunFollower::open(dir);
    ASSERT_TRUE(f.has_value());
    RunFollower& fl = **f;
    EXPECT_TRUE(fl.poll().empty());  // queued: no logs yet, nothing to decide
    EXPECT_FALSE(fl.done());
    for (int r = 0; r < 4; ++r) (*w)->append_line(r, step_line(r, 1, 5.0));
    for (int r = 0; r < 3; ++r) (*w)->append_line(r, end_line(r, 1));
    poll_all(fl, 3);
    EXPECT_FALSE(fl.done()) << fl.decided();  // rank 3 has not ended, and it wrote just now
    (*w)->append_line(3, end_line(3, 1));
    const auto evs = poll_all(fl, 3);
    ASSERT_TRUE(fl.done());
    EXPECT_EQ(fl.decided(), "all 4 ranks sent end");
    EXPECT_EQ(fl.recorded_state(), "starting");
    EXPECT_EQ(fl.manifest().state, "finished");
    EXPECT_EQ(count_kind(evs, LaunchEventKind::rank_exited), 4);  // exit 0 each: they ended
    ASSERT_EQ(evs.back().kind, LaunchEventKind::finished);
    EXPECT_EQ(evs.back().text, "all 4 ranks sent end");
}

// Ranks on other machines that stopped writing: the run is over after --stale-after
// seconds of silence from every rank that has not ended, and the watch says which.
TEST(RunDir, SilentRanksEndTheRunAfterStaleAfter) {
    const std::string dir = fresh_dir("silent");
    RunManifest m = sample_manifest();
    m.state = "running";
    auto w = RunDirWriter::create(dir, "job", m);
    ASSERT_TRUE(w.has_value());
    for (int r = 0; r < 4; ++r) (*w)->append_line(r, step_line(r, 3, 4.0));
    (*w)->append_line(0, end_line(0, 3));
    RunFollowOptions opts;
    opts.stale_after_s = 120;
    auto f = RunFollower::open(dir, opts);
    ASSERT_TRUE(f.has_value());
    poll_all(**f, 2);
    EXPECT_FALSE((*f)->done());  // fresh output: still running
    for (int r = 0; r < 4; ++r) age_file(dir + "/rank-" + std::to_string(r) + ".log", r == 2 ? 130 : 1000);
    poll_all(**f, 2);
    ASSERT_TRUE((*f)->done());
    EXPECT_EQ((*f)->decided(), "no output from ranks 1-3 for 130 s or more (ptd watch --stale-after 120); rank 0 sent end");
    EXPECT_EQ((*f)->manifest().state, "failed");
}

// The launcher's pid counts only while it is the same process (start time) on this
// machine (boot id); a rank's pid only while the process carries the run's PTD_RUN_ID.
// A pid that was reused by another process does not keep a dead run alive.
TEST(RunDir, LauncherAndRankPidsAreCheckedNotJustLooked) {
    const std::string dir = fresh_dir("pids");
    RunManifest m = sample_manifest();
    m.local = true;
    m.state = "running";
    m.launcher = this_launcher();  // this test process: alive
    ASSERT_GT(m.launcher.start_time, 0u);
    ASSERT_FALSE(m.launcher.boot_id.empty());
    for (auto& r : m.ranks) r.pid = getpid();  // alive, but without PTD_RUN_ID=<run id>
    auto w = RunDirWriter::create(dir, "job", m);
    ASSERT_TRUE(w.has_value());
    for (int r = 0; r < 4; ++r) (*w)->append_line(r, step_line(r, 1, 5.0));
    auto f = RunFollower::open(dir);
    ASSERT_TRUE(f.has_value());
    poll_all(**f, 2);
    EXPECT_FALSE((*f)->done()) << "a live launcher records the end itself";
    auto back = read_manifest(dir);
    ASSERT_TRUE(back) << back.error().str();
    EXPECT_EQ(back->launcher.pid, m.launcher.pid);
    EXPECT_EQ(back->launcher.start_time, m.launcher.start_time);

    // The same pid with another start time is another process: the launcher is gone, and
    // the ranks' pids run something else.
    m.launcher.start_time += 1;
    ASSERT_TRUE((*w)->write_manifest(m).has_value());
    poll_all(**f, 2);
    ASSERT_TRUE((*f)->done());
    EXPECT_EQ((*f)->decided(), "launcher pid " + std::to_string(getpid()) + " gone and ranks 0-3 dead (pids not running)");

    // A launcher on another machine (or before a reboot) says nothing about pids here.
    const std::string dir2 = fresh_dir("pids-elsewhere");
    m.launcher.boot_id = "00000000-0000-0000-0000-000000000000";
    auto w2 = RunDirWriter::create(dir2, "job", m);
    ASSERT_TRUE(w2.has_value());
    for (int r = 0; r < 4; ++r) (*w2)->append_line(r, step_line(r, 1, 5.0));
    auto f2 = RunFollower::open(dir2);
    ASSERT_TRUE(f2.has_value());
    poll_all(**f2, 2);
    EXPECT_FALSE((*f2)->done()) << (*f2)->decided();
}

TEST(RunDir, LargeLogIsReadInChunks) {
    const std::string dir = fresh_dir("large");
    RunManifest m = sample_manifest();
    m.world_size = 1;
    m.ranks.resize(1);
    m.state = "finished";
    m.ranks[0].exit_code = 0;
    auto w = RunDirWriter::create(dir, "", m);
    ASSERT_TRUE(w.has_value());
    const std::string big(1000, 'y');
    for (int i = 0; i < 10000; ++i) (*w)->append_line(0, big);  // ~10 MB: more than one poll's read
    append_raw(dir + "/rank-0.log", std::string(3 << 20, 'z'));  // a 3 MiB line without newline
    auto f = RunFollower::open(dir);
    ASSERT_TRUE(f.has_value());
    int lines = 0, polls = 0, finished = 0;
    size_t z = 0;
    while (!(*f)->done() && polls < 100) {
        for (const LaunchEvent& e : (*f)->poll()) {
            if (e.kind == LaunchEventKind::output && e.text == big) ++lines;
            if (e.kind == LaunchEventKind::output && e.text[0] == 'z') z += e.text.size();
            finished += e.kind == LaunchEventKind::finished;
        }
        ++polls;
    }
    EXPECT_EQ(lines, 10000);
    EXPECT_EQ(z, (size_t)3 << 20);  // delivered in 1 MiB pieces
    EXPECT_EQ(finished, 1);
    EXPECT_GT(polls, 1);
}

TEST(RunDir, OpenErrors) {
    const std::string dir = fresh_dir("open");
    auto none = RunFollower::open(dir);
    ASSERT_FALSE(none.has_value());
    EXPECT_TRUE(contains(none.error().str(), dir)) << none.error().str();
    spit(dir, "a file");
    auto file = RunFollower::open(dir);
    ASSERT_FALSE(file.has_value());
    EXPECT_TRUE(contains(file.error().str(), "not a directory")) << file.error().str();
    fs::remove(dir);
    fs::create_directories(dir);
    auto empty = RunFollower::open(dir);
    ASSERT_FALSE(empty.has_value());
    EXPECT_TRUE(contains(empty.error().str(), dir + "/manifest.json")) << empty.error().str();
}

// ---------------------------------------------------------------------------------------
// The dashboard

TEST(RunView, Units) {
    EXPECT_EQ(human_bytes(0), "0 B");
    EXPECT_EQ(human_bytes(512), "512 B");
    EXPECT_EQ(human_bytes(1536), "1.50 KiB");
    EXPECT_EQ(human_bytes(6916096), "6.60 MiB");
    EXPECT_EQ(human_bytes(80.0 * (1 << 30)), "80.0 GiB");
    EXPECT_EQ(human_bytes(3.0 * (1 << 30)), "3.00 GiB");
    EXPECT_EQ(human_bytes(500.0 * (1ull << 40)), "500 TiB");
}

TEST(RunView, Sparkline) {
    EXPECT_EQ(sparkline({}, 24), "");
    EXPECT_EQ(sparkline({1, 2, 3, 4, 5, 6, 7, 8}, 24), "▁▂▃▄▅▆▇█");
    EXPECT_EQ(sparkline({8, 1}, 24), "█▁");
    EXPECT_EQ(sparkline({2, 2, 2}, 24), "▄▄▄");
    std::vector<double> many;
    for (int i = 0; i < 100; ++i) many.push_back(100 - i);
    const std::string s = sparkline(many, 24);
    EXPECT_EQ(visible_width(s), 24);
    EXPECT_TRUE(s.starts_with("█")) << s;
    EXPECT_TRUE(s.ends_with("▁")) << s;
}

TEST(RunView, StatesStepsAndMemory) {
    RunManifest m = sample_manifest();
    RunView v(m);
    EXPECT_EQ(v.ranks(), 4);
    EXPECT_FALSE(v.all_exited());
    EXPECT_TRUE(contains(v.rank_line(0, false, false), "starting"));

    auto ev = [](LaunchEventKind k, int rank) {
        LaunchEvent e;
        e.kind = k;
        e.rank = rank;
        return e;
    };
    for (int r = 0; r < 4; ++r) v.apply(ev(LaunchEventKind::rank_started, r));
    for (int s = 1; s <= 30; ++s) {
        LaunchEvent e = ev(LaunchEventKind::metric, 0);
        e.metric = parse_metrics_line(step_line(0, s, 6.0 - 0.1 * s));
        ASSERT_TRUE(e.metric.has_value());
        v.apply(e);
    }
    LaunchEvent e1 = ev(LaunchEventKind::metric, 1);
    e1.metric = parse_metrics_line(step_line(1, 3, 4.0, 3.0 * (1 << 30), 2.5 * (1 << 30)));
    v.apply(e1);
    const std::string r0 = v.rank_line(0, false, true);
    ptd_test::expect_mentions(r0, {"running", "30/20"});
    EXPECT_TRUE(contains(r0, "3.0000")) << r0;        // last loss
    EXPECT_TRUE(contains(r0, "25.8K/s")) << r0;       // tokens/s
    EXPECT_TRUE(contains(r0, "38.0%")) << r0;         // MFU
    ptd_test::expect_mentions(r0, {"6.60 MiB / 6.06 MiB", "alice@node-a:22", "0,0,0"});
    EXPECT_TRUE(contains(r0, "█") && r0.ends_with("▁")) << r0;  // falling loss
    EXPECT_FALSE(contains(v.rank_line(0, false, false), "▁"));
    const std::string r1 = v.rank_line(1, false, false);
    ptd_test::expect_mentions(r1, {"3.00 GiB / 2.50 GiB", "1,0,0", "3/20"});

    v.apply([&] { auto e = ev(LaunchEventKind::rank_exited, 0); e.exit_code = 0; return e; }());
    v.apply([&] { auto e = ev(LaunchEventKind::rank_exited, 1); e.exit_code = 137; return e; }());
    v.apply([&] { auto e = ev(LaunchEventKind::rank_exited, 2); e.exit_code = -1; return e; }());
    EXPECT_TRUE(contains(v.rank_line(0, false, false), "done"));
    EXPECT_TRUE(contains(v.rank_line(1, false, false), "exit 137"));
    EXPECT_TRUE(contains(v.rank_line(2, false, false), "lost"));
    EXPECT_TRUE(contains(v.rank_line(3, false, false), "running"));
    EXPECT_FALSE(v.all_exited());
    v.apply([&] { auto e = ev(LaunchEventKind::rank_exited, 3); e.exit_code = 0; return e; }());
    EXPECT_TRUE(v.all_exited());
    EXPECT_EQ(v.failed_rank(), 1);
    LaunchEvent fin = ev(LaunchEventKind::finished, -1);
    fin.exit_code = 137;
    fin.text = "rank 1 on alice@node-a:22 exited 137";
    v.apply(fin);
    EXPECT_EQ(v.state(), "failed");
    EXPECT_EQ(v.reason(), fin.text);
    const std::string header = v.header_line(false);
    ptd_test::expect_mentions(header, {"run 20260101-120000-4242", "tiny-gpt", "2 hosts (alice@node-a:22, node-b)",
                                       "failed (exit 137)", "step 30/20"});
}

TEST(RunView, HistoryAndLastLinesAreBounded) {
    RunView v(sample_manifest());
    for (int s = 1; s <= 2000; ++s) {
        LaunchEvent e;
        e.kind = LaunchEventKind::metric;
        e.rank = 2;
        e.metric = parse_metrics_line(step_line(2, s, 1.0 / s));
        v.apply(e);
        LaunchEvent o;
        o.kind = LaunchEventKind::output;
        o.rank = 2;
        o.text = "line " + std::to_string(s);
        v.apply(o);
    }
    const auto h = v.loss_history(2);
    ASSERT_EQ(h.size(), RunView::kHistory);
    EXPECT_DOUBLE_EQ(h.back(), 1.0 / 2000);
    const auto last = v.last_lines(2, 10);
    ASSERT_EQ(last.size(), 10u);
    EXPECT_EQ(last.front(), "line 1991");
    EXPECT_EQ(last.back(), "line 2000");
    EXPECT_TRUE(v.last_lines(0, 10).empty());
    EXPECT_TRUE(v.last_lines(99, 10).empty());
    // Events for ranks that do not exist are ignored.
    LaunchEvent bad;
    bad.kind = LaunchEventKind::metric;
    bad.rank = 77;
    v.apply(bad);
    bad.kind = LaunchEventKind::rank_exited;
    bad.rank = -5;
    v.apply(bad);
    EXPECT_EQ(v.rank_line(77, false, false), "");
}

TEST(RunView, RenderFitsTheWidth) {
    const std::string dir = fresh_dir("render");
    write_finished_run(dir, true);
    auto f = RunFollower::open(dir);
    ASSERT_TRUE(f.has_value());
    RunView v((*f)->manifest());
    for (const LaunchEvent& e : poll_all(**f)) v.apply(e);
    v.set_manifest((*f)->manifest());
    for (bool color : {false, true}) {
        for (int width : {40, 80, 120, 200}) {
            const std::string out = v.render(color, width, true);
            const auto lines = split_lines(out);
            ASSERT_EQ(lines.size(), 6u) << out;  // header, column names, 4 ranks
            for (const auto& l : lines) EXPECT_LE(visible_width(l), width) << "[" << l << "]";
            EXPECT_EQ(contains(out, "\x1b["), color) << out;
            if (width >= 200) {
                ptd_test::expect_mentions(out, {"▁", "loss (last 24)"});
            }
        }
    }
    const std::string plain = v.render(false, 200, false);
    EXPECT_FALSE(contains(plain, "▁"));
    const auto lines = split_lines(plain);
    EXPECT_TRUE(contains(lines[0], "failed (exit 1)")) << lines[0];
    EXPECT_TRUE(contains(lines[2], "done")) << lines[2];
    ptd_test::expect_mentions(lines[4], {"exit 1", "3/20"});
    EXPECT_TRUE(contains(lines[5], "lost")) << lines[5];
    // Columns line up: every rank line has "MiB" at the same column as rank 0.
    const size_t col = lines[2].find("MiB");
    for (int i = 3; i < 6; ++i) EXPECT_EQ(lines[(size_t)i].find("MiB"), col) << lines[(size_t)i];
    EXPECT_EQ(v.failed_rank(), 2);
    const auto last = v.last_lines(2, 10);
    ASSERT_FALSE(last.empty());
    EXPECT_TRUE(contains(last.back(), "error")) << last.back();
}

// ---------------------------------------------------------------------------------------
// `ptd watch` as a process

TEST(Watch, FinishedRunPrintsEveryRank) {
    const std::string dir = fresh_dir("watch-ok");
    write_finished_run(dir, false);
    Proc p = run("COLUMNS=200 " + kPtd + " watch " + dir);
    EXPECT_EQ(p.rc, 0) << p.err;
    EXPECT_EQ(p.err, "");
    const auto lines = split_lines(p.out);
    ASSERT_EQ(lines.size(), 7u) << p.out;
    ptd_test::expect_mentions(lines[0], {"run 20260101-120000-4242", "finished", "step 5/20"});
    // The test's job.toml names a model only: no prediction, and which file says what.
    ptd_test::expect_mentions(lines[1], {"predicted: none: the run's job cannot be read: ", dir + "/job.toml:1:1: cluster: missing"});
    for (int r = 0; r < 4; ++r) {
        const std::string& l = lines[(size_t)r + 3];
        EXPECT_TRUE(l.starts_with("   " + std::to_string(r) + "  ")) << l;
        ptd_test::expect_mentions(l, {"done", "5/20", "▁"});
    }
    EXPECT_FALSE(contains(p.out, "\x1b["));  // not a terminal: no colour, no cursor moves

    // Into a file without $COLUMNS, lines stay whole; with it, they are cut to fit.
    Proc whole = run("env -u COLUMNS " + kPtd + " watch " + dir);
    EXPECT_EQ(whole.rc, 0);
    EXPECT_TRUE(contains(whole.out, "loss (last 24)")) << whole.out;
    Proc narrow = run("COLUMNS=60 " + kPtd + " watch " + dir);
    EXPECT_EQ(narrow.rc, 0);
    for (const auto& l : split_lines(narrow.out)) EXPECT_LE(visible_width(l), 60) << l;

    Proc once = run(kPtd + " watch --once --no-sparklines " + dir);
    EXPECT_EQ(once.rc, 0);
    EXPECT_FALSE(contains(once.out, "▁"));
    EXPECT_EQ(split_lines(once.out).size(), 7u) << once.out;
}

TEST(Watch, FailedRunShowsReasonAndLastLines) {
    const std::string dir = fresh_dir("watch-failed");
    write_finished_run(dir, true);
    Proc p = run("COLUMNS=160 " + kPtd + " watch " + dir);
    EXPECT_EQ(p.rc, 0) << p.err;
    ptd_test::expect_mentions(p.out, {"failed: rank 2 on node-b exited 1", "last lines of rank 2 on node-b:",
                                      "  ptd-engine: rank 2: error: step 4: loss nan", "exit 1", "lost"});
}

TEST(Watch, OnceOnALiveRunReturnsAtOnce) {
    const std::string dir = fresh_dir("watch-live");
    RunManifest m = sample_manifest();
    auto w = RunDirWriter::create(dir, "", m);
    ASSERT_TRUE(w.has_value());
    (*w)->append_line(1, step_line(1, 2, 4.5));
    Proc p = run("timeout 20 " + kPtd + " watch --once " + dir);
    EXPECT_EQ(p.rc, 0) << p.err;
    ptd_test::expect_mentions(p.out, {"running", "4.5000"});
}

TEST(Watch, FollowsUntilTheRunEnds) {
    const std::string dir = fresh_dir("watch-follow");
    RunManifest m = sample_manifest();
    auto w = RunDirWriter::create(dir, "", m);
    ASSERT_TRUE(w.has_value());
    const std::string out = fresh_dir("watch-follow-output") + ".out";  // beside the run, removed with it
    ptd_test::remove_after_tests_if_passed(out);
    pid_t pid = 0;
    const std::string cmd = kPtd + " watch --interval 0.1 " + dir + " >" + out + " 2>&1";
    const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
    ASSERT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, WNOHANG), 0) << "watch ended before the run did";
    for (int r = 0; r < 4; ++r) {
        (*w)->append_line(r, step_line(r, 7, 3.25));
        m.ranks[(size_t)r].exit_code = 0;
    }
    m.state = "finished";
    ASSERT_TRUE((*w)->write_manifest(m).has_value());
    int waited = 0;
    while (waitpid(pid, &status, WNOHANG) == 0 && waited < 200) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        ++waited;
    }
    if (waited >= 200) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        FAIL() << "ptd watch did not end after the run finished";
    }
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    const std::string text = read_file(out);
    EXPECT_EQ(split_lines(text).size(), 7u) << text;  // one dashboard, at the end
    ptd_test::expect_mentions(text, {"finished", "3.2500"});
}

// `ptd watch` on a Slurm-style run directory whose manifest never leaves "starting": it
// ends once every rank sent `end`, and says how it decided; silent ranks end it too.
TEST(Watch, EndsARunWhoseManifestNeverEnds) {
    const std::string dir = fresh_dir("watch-slurm");
    RunManifest m = sample_manifest();
    m.state = "starting";
    auto w = RunDirWriter::create(dir, "", m);
    ASSERT_TRUE(w.has_value());
    for (int r = 0; r < 4; ++r) {
        (*w)->append_line(r, step_line(r, 20, 3.0));
        (*w)->append_line(r, end_line(r, 20));
    }
    Proc p = run("timeout 20 " + kPtd + " watch --interval 0.1 " + dir);
    EXPECT_EQ(p.rc, 0) << p.err;
    EXPECT_TRUE(contains(p.out, "finished: all 4 ranks sent end (decided by ptd watch from the ranks: manifest.json still "
                                "says \"starting\")"))
        << p.out;
    EXPECT_TRUE(contains(p.out, "done")) << p.out;

    const std::string quiet = fresh_dir("watch-quiet");
    auto wq = RunDirWriter::create(quiet, "", m);
    ASSERT_TRUE(wq.has_value());
    for (int r = 0; r < 4; ++r) {
        (*wq)->append_line(r, step_line(r, 7, 3.0));
        age_file(quiet + "/rank-" + std::to_string(r) + ".log", 600);
    }
    p = run("timeout 20 " + kPtd + " watch --interval 0.1 --stale-after 300 " + quiet);
    EXPECT_EQ(p.rc, 0) << p.err;
    EXPECT_TRUE(contains(p.out, "failed: no output from ranks 0-3 for 600 s or more (ptd watch --stale-after 300)")) << p.out;

    Proc bad = run(kPtd + " watch --stale-after nan " + quiet);
    EXPECT_EQ(bad.rc, 2);
    EXPECT_TRUE(contains(bad.err, "--stale-after")) << bad.err;
}

TEST(Watch, TerminalRedrawsInPlace) {
    // `script` gives the child a pseudo-terminal; skip where util-linux's script is absent.
    if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "script(1) not installed";
    const std::string dir = fresh_dir("watch-tty");
    write_finished_run(dir, false);
    Proc p = run("TERM=xterm-256color script -qec '" + kPtd + " watch " + dir + "' /dev/null");
    EXPECT_EQ(p.rc, 0) << p.err;
    EXPECT_TRUE(contains(p.out, "\x1b[")) << p.out;  // colour on a terminal
    EXPECT_TRUE(contains(p.out, "finished")) << p.out;
    Proc plain = run("NO_COLOR=1 TERM=xterm-256color script -qec '" + kPtd + " watch " + dir + "' /dev/null");
    EXPECT_EQ(plain.rc, 0);
    EXPECT_FALSE(contains(plain.out, "\x1b[3")) << plain.out;  // no colours (SGR 3x)
}

TEST(Watch, ErrorsExitTwoAndNameThePath) {
    const std::string dir = fresh_dir("watch-missing");
    Proc missing = run(kPtd + " watch " + dir);
    EXPECT_EQ(missing.rc, 2);
    EXPECT_TRUE(contains(missing.err, dir)) << missing.err;
    EXPECT_EQ(missing.out, "");

    fs::create_directories(dir);
    Proc no_manifest = run(kPtd + " watch " + dir);
    EXPECT_EQ(no_manifest.rc, 2);
    EXPECT_TRUE(contains(no_manifest.err, dir + "/manifest.json")) << no_manifest.err;

    spit(dir + "/manifest.json", R"({"schema": "ptd.run/1", "run_id": "x", "state": "running", "world_size": "four",
                                     "hosts": ["h"], "ranks": []})");
    Proc bad = run(kPtd + " watch " + dir);
    EXPECT_EQ(bad.rc, 2);
    EXPECT_TRUE(contains(bad.err, dir + "/manifest.json: error: world_size: got a string (\"four\")")) << bad.err;

    Proc usage = run(kPtd + " watch");
    EXPECT_EQ(usage.rc, 2);
    EXPECT_TRUE(contains(usage.err, "RUN_DIR")) << usage.err;
}

// ---------------------------------------------------------------------------------------
// The speed prediction beside the measurement (run_prediction.h): the dashboard of
// `ptd launch` and `ptd watch`, and the profile a run records for it

namespace {

const std::string kTinyJob = PTD_SOURCE_DIR "/assets/jobs/tiny-gpt-8rank.toml";

JobSpec tiny_job(const std::vector<std::string>& sets = {}) {
    auto presets = load_presets();
    EXPECT_TRUE(presets.has_value());
    auto job = load_job_file_with_overrides(kTinyJob, sets, *presets);
    EXPECT_TRUE(job.has_value()) << job.error().str();
    return *job;
}

// A small valid ptd.profile/1 for the "cpu" preset: GEMMs at 20 GFLOP/s, memory at 10 GB/s.
void write_cpu_profile(const std::string& path, const std::string& measured_at) {
    ptd_test::write_profile(path, ptd_test::fitted_profile("cpu", measured_at, 20e9, 10e9));
}

// The tiny 8-rank job as a file in `folder` with `[cluster] profile = "<profile>"` (as the
// user wrote it: relative to the job's folder), on synthetic data.
std::string write_job_with_profile(const std::string& folder, const std::string& profile) {
    std::string text = read_file(kTinyJob);
    text.replace(text.find("[cluster]\n"), 10, "[cluster]\nprofile = \"" + profile + "\"\n");
    text.replace(text.find("data = \"../../docs/engine.md\""), 29, "data = \"synthetic\"");
    fs::create_directories(folder);
    spit(folder + "/job.toml", text);
    return folder + "/job.toml";
}

std::string line_starting(const std::string& text, const std::string& start) {
    for (const std::string& l : split_lines(text))
        if (l.starts_with(start)) return l;
    return "";
}

}  // namespace

TEST(RunPrediction, IsTheEstimateWithItsInterval) {
    // A GPU preset job: the published runs of its generation give the interval.
    const JobSpec gpu = tiny_job({"cluster.gpu=h100-sxm"});
    const RunPrediction p = predict_run(gpu, std::nullopt);
    ASSERT_TRUE(p.available) << p.why_none;
    const Estimate est = estimate_job(gpu);
    EXPECT_DOUBLE_EQ(p.step_s, est.step_s);
    EXPECT_DOUBLE_EQ(p.tokens_per_s, est.tokens_per_s);
    ASSERT_TRUE(p.speed.known);
    EXPECT_LE(p.speed.step_s.lo, p.step_s);
    EXPECT_GE(p.speed.step_s.hi, p.step_s);
    EXPECT_LE(p.speed.tokens_per_s.lo, p.tokens_per_s);
    EXPECT_GE(p.speed.tokens_per_s.hi, p.tokens_per_s);
    EXPECT_FALSE(p.profile.has_value());
    EXPECT_EQ(prediction_source_text(p), "\"h100-sxm\" preset's figures");
    ptd_test::expect_mentions(prediction_interval_text(p), {"80% interval from", "published hopper"});

    // The CPU: a prediction, but no published runs to give it an interval; the reason is said.
    const RunPrediction cpu = predict_run(tiny_job(), std::nullopt);
    ASSERT_TRUE(cpu.available) << cpu.why_none;
    EXPECT_FALSE(cpu.speed.known);
    EXPECT_EQ(prediction_interval_text(cpu), "no interval: " + cpu.speed.why_unknown.substr(
                                                                  cpu.speed.why_unknown.rfind("no interval: ", 0) == 0 ? 13 : 0));
    EXPECT_TRUE(contains(prediction_interval_text(cpu), "no published runs on CPUs")) << prediction_interval_text(cpu);

    // With a profile the time model takes (the bundled engine's job): its figures, its interval.
    const std::string dir = fresh_dir("prediction-profile");
    write_cpu_profile(dir + "/cpu.toml", "2026-11-29T06:40:00Z");
    auto cpu_profile = load_job_profile(tiny_job(), dir + "/cpu.toml");
    ASSERT_TRUE(cpu_profile && *cpu_profile) << (cpu_profile ? "" : cpu_profile.error().str());
    const RunPrediction with = predict_run(tiny_job(), *cpu_profile);
    ASSERT_TRUE(with.available) << with.why_none;
    EXPECT_TRUE(with.profile_unused.empty()) << with.profile_unused;
    EXPECT_DOUBLE_EQ(with.step_s, estimate_job(tiny_job(), &(*cpu_profile)->profile).step_s);
    EXPECT_TRUE(contains(prediction_source_text(with), "profile " + with.profile->path + " (measured 2026-11-29T06:40:00Z)"))
        << prediction_source_text(with);
    // A profile for a job another framework runs: the preset's figures, and why not the profile's.
    auto presets = load_presets();
    auto llama = load_job_file(PTD_SOURCE_DIR "/assets/jobs/llama3-8b-h100.toml", *presets);
    ASSERT_TRUE(llama) << llama.error().str();
    ptd_test::write_profile(dir + "/h100.toml", ptd_test::fitted_profile(llama->cluster.gpu.name, "2026-11-29T06:40:00Z", 600e12, 3e12));
    auto h100_profile = load_job_profile(*llama, dir + "/h100.toml");
    ASSERT_TRUE(h100_profile && *h100_profile) << (h100_profile ? "" : h100_profile.error().str());
    const RunPrediction unused = predict_run(*llama, *h100_profile);
    EXPECT_FALSE(unused.profile_unused.empty());
    EXPECT_DOUBLE_EQ(unused.step_s, estimate_job(*llama).step_s);
    ptd_test::expect_mentions(prediction_source_text(unused), {"preset's figures (the profile ", " is not used: "});

    // No layout: nothing to predict, and why.
    JobSpec bare = tiny_job();
    bare.origin.no_layout = true;
    const RunPrediction none = predict_run(bare, std::nullopt);
    EXPECT_FALSE(none.available);
    EXPECT_TRUE(contains(none.why_none, "no layout")) << none.why_none;
}

TEST(RunView, SpeedBesideThePredictionAndItsInterval) {
    RunView v(sample_manifest());
    // Before a prediction is set: the measured speed alone, no prediction line.
    LaunchEvent e;
    e.kind = LaunchEventKind::metric;
    e.rank = 0;
    e.metric = parse_metrics_line(step_line(0, 3, 4.0));  // 25.8K tokens/s, step 20 ms
    ASSERT_TRUE(e.metric.has_value());
    v.apply(e);
    EXPECT_FALSE(contains(v.render(false, 0, false), "predicted:"));
    ptd_test::expect_mentions(v.rank_line(0, false, false), {"25.8K/s", "20.0 ms"});

    const RunPrediction gpu = predict_run(tiny_job({"cluster.gpu=h100-sxm"}), std::nullopt);
    ASSERT_TRUE(gpu.available && gpu.speed.known);
    v.set_prediction(gpu);
    const std::string out = v.render(false, 0, false);
    const auto lines = split_lines(out);
    ASSERT_EQ(lines.size(), 7u) << out;  // header, prediction, column names, 4 ranks
    const std::string& pred = lines[1];
    ptd_test::expect_mentions(pred, {"predicted: step " + human_seconds(gpu.step_s) + " [" + human_seconds(gpu.speed.step_s.lo) +
                                         " … " + human_seconds(gpu.speed.step_s.hi) + "]",
                                     "tokens/s [", "from the \"h100-sxm\" preset's figures", "80% interval from"});
    ptd_test::expect_mentions(lines[2], {"tokens/s / predicted", "step / predicted"});
    ptd_test::expect_mentions(lines[3], {"25.8K/s / " + human_rate(gpu.tokens_per_s), "20.0 ms / " + human_seconds(gpu.step_s)});
    // The measured 25.8K tokens/s is far below the H100 prediction's interval: on a colour
    // terminal it is painted as a miss; a rank without steps is not.
    ASSERT_LT(25811.7, gpu.speed.tokens_per_s.lo);
    const std::string miss = "\x1b[33m" + pad_left("25.8K/s / " + human_rate(gpu.tokens_per_s), 20);
    EXPECT_TRUE(contains(v.rank_line(0, true, false), miss)) << v.rank_line(0, true, false);
    EXPECT_FALSE(contains(v.rank_line(1, true, false), "\x1b[33m" + pad_left("- / " + human_rate(gpu.tokens_per_s), 20)))
        << v.rank_line(1, true, false);
    ptd_test::expect_mentions(lines[4], {"- / " + human_rate(gpu.tokens_per_s)});

    // A CPU job: the figures without an interval, and why there is none.
    const RunPrediction cpu = predict_run(tiny_job(), std::nullopt);
    v.set_prediction(cpu);
    const std::string cpu_line = v.prediction_line(false);
    ptd_test::expect_mentions(cpu_line, {"predicted: step " + human_seconds(cpu.step_s) + ", ", "from the \"cpu\" preset's figures",
                                         "no interval: no published runs on CPUs"});
    EXPECT_FALSE(contains(cpu_line, "[")) << cpu_line;
    // No prediction at all: the line says why.
    RunPrediction none;
    none.why_none = "the run's job cannot be read: x";
    v.set_prediction(none);
    EXPECT_EQ(v.prediction_line(false), "predicted: none: the run's job cannot be read: x");
    ptd_test::expect_mentions(split_lines(v.render(false, 0, false))[2], {"tokens/s", "step time"});
}

// `ptd launch` of a job whose [cluster] profile is a relative path: the dashboard predicts
// with it, the manifest records it absolutely, and `ptd watch` of the run directory, from
// another folder, shows the same prediction.
TEST(Watch, ReproducesTheLaunchsPredictionWithItsProfile) {
    const std::string root = fresh_dir("profile");
    const std::string prof = root + "/profiles/prof.toml";
    write_cpu_profile(prof, "2026-11-29T06:40:00Z");
    const std::string job = write_job_with_profile(root + "/jobs", "../profiles/prof.toml");
    Proc launch = run("cd " + root + "/jobs && " + kPtd + " launch job.toml --steps 1 --run-root " + root + "/runs --run-id a");
    ASSERT_EQ(launch.rc, 0) << launch.out << launch.err;
    const std::string abs_prof = fs::weakly_canonical(prof).string();
    const std::string launch_pred = line_starting(launch.out, "predicted: ");
    ptd_test::expect_mentions(launch_pred, {"predicted: step ", "from the profile " + abs_prof + " (measured 2026-11-29T06:40:00Z)"});
    // Every rank line of the final table has its measurement beside the prediction.
    const std::string rank0 = line_starting(launch.out, "   0  ");
    EXPECT_TRUE(contains(rank0, " / ")) << launch.out;

    auto m = read_manifest(root + "/runs/a");
    ASSERT_TRUE(m.has_value()) << m.error().str();
    ASSERT_TRUE(m->profile.has_value());
    EXPECT_EQ(m->profile->path, abs_prof);
    EXPECT_EQ(m->profile->source, "cluster.profile");
    EXPECT_EQ(m->profile->measured_at, "2026-11-29T06:40:00Z");

    // The run directory's job.toml, even hand-edited to a relative profile path that does
    // not resolve from there, predicts with the profile the manifest recorded.
    std::string run_job = read_file(root + "/runs/a/job.toml");
    const size_t at = run_job.find("profile = \"");
    ASSERT_NE(at, std::string::npos) << run_job;
    run_job.replace(at, run_job.find('\n', at) - at, "profile = \"../profiles/prof.toml\"");
    spit(root + "/runs/a/job.toml", run_job);
    Proc watch = run("cd / && " + kPtd + " watch " + root + "/runs/a");
    ASSERT_EQ(watch.rc, 0) << watch.err;
    EXPECT_EQ(line_starting(watch.out, "predicted: "), launch_pred) << watch.out;

    // Measured again since: the prediction says so.
    write_cpu_profile(prof, "2026-11-30T08:00:00Z");
    watch = run(kPtd + " watch " + root + "/runs/a");
    ptd_test::expect_mentions(line_starting(watch.out, "predicted: "),
                              {"(measured 2026-11-30T08:00:00Z)", "measured again since the run started (then 2026-11-29T06:40:00Z"});
    // A profile that no longer loads: no prediction, and which file and why.
    fs::remove(prof);
    watch = run(kPtd + " watch " + root + "/runs/a");
    EXPECT_EQ(watch.rc, 0);
    ptd_test::expect_mentions(line_starting(watch.out, "predicted: "), {"predicted: none: the cluster profile cannot be used: ", abs_prof});
}

TEST(Watch, ProfileOptionReplacesTheRunsAndABadOneIsRefused) {
    const std::string root = fresh_dir("profile-option");
    write_cpu_profile(root + "/prof.toml", "2026-11-29T06:40:00Z");
    // `ptd launch --profile FILE` (relative to the current folder) is recorded too.
    Proc launch = run("cd " + root + " && " + kPtd + " launch " + kTinyJob +
                      " --set training.data=synthetic --profile prof.toml --steps 1 --run-root runs --run-id b");
    ASSERT_EQ(launch.rc, 0) << launch.err;
    auto m = read_manifest(root + "/runs/b");
    ASSERT_TRUE(m.has_value() && m->profile.has_value());
    EXPECT_EQ(m->profile->path, fs::weakly_canonical(root + "/prof.toml").string());
    EXPECT_EQ(m->profile->source, "--profile");

    write_cpu_profile(root + "/other.toml", "2026-12-01T00:00:00Z");
    Proc watch = run("cd " + root + " && " + kPtd + " watch --profile other.toml runs/b");
    ASSERT_EQ(watch.rc, 0) << watch.err;
    ptd_test::expect_mentions(line_starting(watch.out, "predicted: "),
                              {"profile " + fs::weakly_canonical(root + "/other.toml").string() + " (measured 2026-12-01T00:00:00Z)",
                               "--profile replaces the run's own profile"});

    // A --profile that cannot be used is refused naming the file, before anything starts.
    spit(root + "/broken.toml", "schema = \"ptd.profile/1\"\n");
    Proc bad_watch = run("cd " + root + " && " + kPtd + " watch --profile broken.toml runs/b");
    EXPECT_EQ(bad_watch.rc, 2);
    EXPECT_TRUE(contains(bad_watch.err, "broken.toml")) << bad_watch.err;
    Proc bad_launch = run("cd " + root + " && " + kPtd + " launch " + kTinyJob + " --profile missing.toml --run-root runs --run-id c");
    EXPECT_EQ(bad_launch.rc, 2);
    EXPECT_TRUE(contains(bad_launch.err, "missing.toml")) << bad_launch.err;
    EXPECT_FALSE(fs::exists(root + "/runs/c"));
}

// A GPU preset job on the CUDA simulator: the prediction has the published runs' interval;
// the plain CPU job has none and says why.
TEST(Launch, DashboardShowsThePredictionBesideTheMeasurement) {
    const std::string root = fresh_dir("launch-predicted");
    Proc gpu = run(kPtd + " launch " + kTinyJob + " --set cluster.gpu=h100-sxm --backend cuda-sim --steps 1 --run-root " + root +
                   " --run-id gpu");
    ASSERT_EQ(gpu.rc, 0) << gpu.out << gpu.err;
    const RunPrediction expected = predict_run(tiny_job({"cluster.gpu=h100-sxm"}), std::nullopt);
    ASSERT_TRUE(expected.speed.known);
    ptd_test::expect_mentions(line_starting(gpu.out, "predicted: "),
                              {"[" + human_seconds(expected.speed.step_s.lo) + " … " + human_seconds(expected.speed.step_s.hi) + "]",
                               "80% interval from", "published hopper"});
    ptd_test::expect_mentions(line_starting(gpu.out, "   7  "), {" / " + human_rate(expected.tokens_per_s), " / " + human_seconds(expected.step_s)});

    Proc cpu = run(kPtd + " launch " + kTinyJob + " --steps 1 --run-root " + root + " --run-id cpu");
    ASSERT_EQ(cpu.rc, 0) << cpu.out << cpu.err;
    ptd_test::expect_mentions(line_starting(cpu.out, "predicted: "), {"from the \"cpu\" preset's figures", "no interval: no published runs on CPUs"});
    // The watch of either run shows what the launch showed.
    EXPECT_EQ(line_starting(run(kPtd + " watch " + root + "/gpu").out, "predicted: "), line_starting(gpu.out, "predicted: "));
    EXPECT_EQ(line_starting(run(kPtd + " watch " + root + "/cpu").out, "predicted: "), line_starting(cpu.out, "predicted: "));
}
