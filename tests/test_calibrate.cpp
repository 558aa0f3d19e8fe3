// test_calibrate.cpp — calibration: the cluster profile (fit, TOML round trip, every kind
// of bad profile refused with file, line and field, the hardware check), the preflight's
// outlier rule, and `ptd calibrate` as a user runs it on the shipped 8-rank job: a profile
// written from real probe processes, a rank that dies and a probe that hangs ending the
// calibration with the host named.
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>

#include "cmd_calibrate.h"
#include "cpu_quota_cgroup.h"
#include "job_test_util.h"
#include "launcher_test_util.h"
#include "process_test_util.h"
#include "netns_hosts.h"
#include "sshd_fixture.h"
#include "ptd/model/estimate.h"
#include "ptd/spec/cluster_profile.h"
#include "ptd/timeline/timeline.h"
#include "text_test_util.h"

namespace {

using ptd::ClusterProfile;
using ptd::ProfileSample;
using ptd_test::run_captured;
using ptd_test::TempDir;

const std::string kJob = PTD_SOURCE_DIR "/assets/jobs/tiny-gpt-8rank.toml";
const std::string kPtd = PTD_BIN_DIR "/ptd";

ProfileSample comm_sample(int rank, double bytes, double seconds) {
    ProfileSample s;
    s.rank = rank, s.kind = "comm", s.name = "all_reduce", s.group = "dp", s.group_size = 4, s.nodes = 2,
    s.members_per_node = 2, s.bytes = bytes, s.median_s = seconds, s.spread = 0.05, s.repeats = 5;
    return s;
}

// A small profile whose samples follow known figures: GEMMs at 2 TFLOP/s, a collective of
// 50 µs latency and 2 GB/s bus bandwidth.
ClusterProfile synthetic_profile() {
    ClusterProfile p;
    p.measured_at = "2026-11-29T06:40:00Z";
    p.job = "jobs/x.toml";
    p.gpu = "cpu";
    p.precision = "fp32";
    p.ptd_version = "0.1.0";
    p.ranks_per_host = 4;
    p.hosts.push_back({"node-a", "a", 4, "AMD EPYC", 2, 0, 23.5, "Haswell", "cpu", ""});
    p.hosts.push_back({"node-b", "b", 4, "AMD EPYC", 2, 1, 23.5, "Haswell", "cpu", ""});
    for (int r = 0; r < 8; ++r) {
        ProfileSample g;
        g.host = r / 4, g.rank = r, g.kind = "gemm", g.name = "qkv.fwd", g.dtype = "f32", g.shape = {128, 96, 64};
        g.flops = 2.0 * 128 * 96 * 64, g.median_s = g.flops / 2e12, g.spread = 0.01, g.repeats = 5;
        p.samples.push_back(g);
        const double factor = ptd::collective_bus_factor("all_reduce", 4);
        for (double bytes : {4096.0, 262144.0, 4194304.0}) {
            ProfileSample c = comm_sample(r, bytes, 50e-6 + bytes * factor / 2e9);
            c.host = r / 4;
            p.samples.push_back(c);
        }
    }
    ProfileSample copy;
    copy.kind = "memory", copy.name = "copy", copy.bytes = 1e9, copy.median_s = 0.1, copy.spread = 0, copy.repeats = 5;
    p.samples.push_back(copy);
    ProfileSample pass;  // the engine's own layer forward, in the step's order
    pass.kind = "layer", pass.name = "layer.fwd", pass.dtype = "f32", pass.shape = {2, 64, 64, 2, 2, 128, 2, 2, 1};
    pass.median_s = 2e-4, pass.spread = 0.1, pass.repeats = 40;
    p.samples.push_back(pass);
    ProfileSample burst = pass;  // dpwait: a step-long burst and the DP group it waits for
    burst.name = "step.compute.dp_max", burst.group = "dp", burst.group_size = 2, burst.micro_batches = 4;
    burst.median_s = 3e-3, burst.mean_s = 3.2e-3, burst.repeats = 8;
    p.samples.push_back(burst);
    ptd::fit_profile(p);
    return p;
}

TEST(ClusterProfile, FitRecoversTheFiguresTheSamplesFollow) {
    const ClusterProfile p = synthetic_profile();
    EXPECT_NEAR(p.gemm_tflops, 2.0, 1e-9);
    ASSERT_EQ(p.gemms.size(), 1u);
    EXPECT_NEAR(p.gemms[0].tflops, 2.0, 1e-9);
    EXPECT_EQ(p.gemms[0].samples, 8);
    EXPECT_NEAR(p.memory_gbps, 10.0, 1e-9);
    ASSERT_EQ(p.collectives.size(), 1u);
    const auto& c = p.collectives[0];
    EXPECT_EQ(c.op, "all_reduce");
    EXPECT_EQ(c.group_size, 4);
    EXPECT_EQ(c.nodes, 2);
    EXPECT_NEAR(c.latency_s, 50e-6, 1e-12);
    EXPECT_NEAR(c.busbw_gbps, 2.0, 1e-9);
    EXPECT_EQ(c.sizes, 3);
    EXPECT_LT(c.max_residual, 1e-9);
}

TEST(ClusterProfile, NegativeInterceptIsRefittedThroughTheOrigin) {
    ClusterProfile p;
    // Pure bandwidth with noise that would give a negative latency: the fit goes through 0.
    p.samples = {comm_sample(0, 1e6, 0.0009), comm_sample(0, 4e6, 0.0041)};
    ptd::fit_profile(p);
    ASSERT_EQ(p.collectives.size(), 1u);
    EXPECT_EQ(p.collectives[0].latency_s, 0.0);
    EXPECT_GT(p.collectives[0].busbw_gbps, 0.0);
}

TEST(ClusterProfile, RoundTripKeepsEveryFigureAndSample) {
    const ClusterProfile p = synthetic_profile();
    const std::string text = ptd::profile_toml(p);
    auto back = ptd::load_profile_text(text, "prof.toml");
    ASSERT_TRUE(back) << back.error().str() << text;
    EXPECT_EQ(back->measured_at, p.measured_at);
    EXPECT_EQ(back->gpu, "cpu");
    ASSERT_EQ(back->hosts.size(), 2u);
    EXPECT_EQ(back->hosts[1].name, "node-b");
    EXPECT_EQ(back->hosts[1].blas_core, "Haswell");
    EXPECT_EQ(back->hosts[0].usable_cores, 0) << "not recorded: not written";
    EXPECT_EQ(back->hosts[1].usable_cores, 1);
    ASSERT_EQ(back->samples.size(), p.samples.size());
    for (size_t i = 0; i < p.samples.size(); ++i) {
        EXPECT_EQ(back->samples[i].kind, p.samples[i].kind);
        EXPECT_EQ(back->samples[i].shape, p.samples[i].shape);
        EXPECT_DOUBLE_EQ(back->samples[i].median_s, p.samples[i].median_s);
        EXPECT_DOUBLE_EQ(back->samples[i].bytes, p.samples[i].bytes);
        EXPECT_EQ(back->samples[i].group, p.samples[i].group);
        EXPECT_EQ(back->samples[i].group_size, p.samples[i].group_size);
        EXPECT_EQ(back->samples[i].micro_batches, p.samples[i].micro_batches);
    }
    EXPECT_DOUBLE_EQ(back->gemm_tflops, p.gemm_tflops);
    ASSERT_EQ(back->collectives.size(), 1u);
    EXPECT_DOUBLE_EQ(back->collectives[0].busbw_gbps, p.collectives[0].busbw_gbps);
    EXPECT_DOUBLE_EQ(back->collectives[0].latency_s, p.collectives[0].latency_s);
    // Refitting what was read gives the same figures: the raw samples are complete.
    ClusterProfile refit = *back;
    ptd::fit_profile(refit);
    EXPECT_EQ(ptd::profile_toml(refit), text);
}

// The text with `from` (which must occur) replaced.
std::string with(std::string text, const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return text;
}

// The 1-based line of the first occurrence of `needle`.
int line_of(const std::string& text, const std::string& needle) {
    const size_t at = text.find(needle);
    return at == std::string::npos ? 0 : 1 + (int)std::count(text.begin(), text.begin() + (long)at, '\n');
}

TEST(ClusterProfile, BadProfilesAreRefusedWithFileLineAndField) {
    const std::string good = ptd::profile_toml(synthetic_profile());
    struct Case {
        const char* what;
        std::string text;
        std::string field;
        int line;          // 0: not checked
        std::string says;
    };
    const std::string sample_line = "{ host = 1, rank = 4, kind = \"gemm\"";
    const Case cases[] = {
        {"corrupt", with(good, "\n[fit]\n", "\n[fit\n"), "", line_of(good, "\n[fit]\n") + 1, ""},
        {"truncated", good.substr(0, good.find("\n[fit]\n")), "fit", 0, "missing"},
        {"truncated mid-line", good.substr(0, good.find("samples = [") + 40), "", 0, ""},
        {"wrong schema", with(good, "\"ptd.profile/1\"", "\"ptd.profile/0\""), "schema", line_of(good, "schema ="), "ptd.profile/0"},
        {"foreign", ptd_test::read_file(kJob), "schema", 1, "not a PTD cluster profile"},
        {"negative time", with(good, "median_s = 0.1,", "median_s = -1,"), "raw.samples", line_of(good, "median_s = 0.1,"),
         "allowed: 0"},
        {"unknown sample kind", with(good, "kind = \"memory\"", "kind = \"disk\""), "raw.samples", line_of(good, "kind = \"memory\""),
         "disk"},
        {"short GEMM shape", with(good, "shape = [128, 96, 64], flops", "shape = [128, 96], flops"), "shape",
         line_of(good, "shape = [128, 96, 64], flops"), "[M, N, K]"},
        {"short layer shape", with(good, "shape = [2, 64, 64, 2, 2, 128, 2, 2, 1]", "shape = [2, 64, 64]"), "shape",
         line_of(good, "shape = [2, 64, 64, 2, 2, 128, 2, 2, 1]"), "nine positive integers"},
        {"step burst without its length", with(good, ", micro_batches = 4", ""), "micro_batches", line_of(good, "micro_batches = 4"),
         "step burst"},
        {"step burst of another group", with(good, "group = \"dp\", group_size = 2", "group = \"tp\", group_size = 2"), "group",
         line_of(good, "micro_batches = 4"), "tp"},
        {"step burst of one member", with(good, "group_size = 2, micro_batches", "group_size = 1, micro_batches"), "group_size",
         line_of(good, "micro_batches = 4"), "got 1"},
        {"host out of range", with(good, sample_line, "{ host = 7, rank = 4, kind = \"gemm\""), "host", line_of(good, sample_line),
         "got 7"},
        {"more usable cores than the machine's", with(good, "usable_cores = 1", "usable_cores = 3"), "usable_cores",
         line_of(good, "usable_cores = 1"), "got 3"},
        {"unknown key", with(good, "gemm_tflops =", "gemm_tflop ="), "fit.gemm_tflop", line_of(good, "gemm_tflops ="), "did you mean"},
    };
    TempDir dir("ptd_profile");
    for (const Case& c : cases) {
        const std::string path = dir / "bad.toml";
        std::ofstream(path) << c.text;
        auto r = ptd::load_profile(path);
        ASSERT_FALSE(r) << c.what;
        const std::string msg = r.error().str();
        EXPECT_NE(msg.find(path), std::string::npos) << c.what << ": names the file\n" << msg;
        if (c.line > 0) {
            EXPECT_NE(msg.find(path + ":" + std::to_string(c.line) + ":"), std::string::npos) << c.what << "\n" << msg;
        }
        if (!c.field.empty()) {
            EXPECT_NE(msg.find(c.field), std::string::npos) << c.what << "\n" << msg;
        }
        if (!c.says.empty()) {
            EXPECT_NE(msg.find(c.says), std::string::npos) << c.what << "\n" << msg;
        }
    }
    // Not a file at all.
    auto dir_given = ptd::load_profile(dir.path.string());
    ASSERT_FALSE(dir_given);
    EXPECT_NE(dir_given.error().str().find("directory"), std::string::npos) << dir_given.error().str();
}

TEST(ClusterProfile, OtherHardwareIsRefusedNamingBoth) {
    ClusterProfile p = synthetic_profile();
    p.gpu = "h100-sxm";
    const ptd::JobSpec job = ptd_test::load_asset("tiny-gpt-8rank.toml");
    auto r = ptd::check_profile_for_job(p, "prof.toml", job);
    ASSERT_FALSE(r);
    const std::string msg = r.error().str();
    EXPECT_NE(msg.find("\"h100-sxm\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"cpu\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("cluster.profile"), std::string::npos) << msg;
    p.gpu = "cpu";
    EXPECT_TRUE(ptd::check_profile_for_job(p, "prof.toml", job));
}

TEST(PreflightRule, TwoHostsAgainstTheFaster) {
    auto v = ptd::flag_slow_hosts({1.0, 1.31});
    EXPECT_FALSE(v[0].flagged);
    EXPECT_TRUE(v[1].flagged);
    EXPECT_NEAR(v[1].slower, 0.31, 1e-12);
    v = ptd::flag_slow_hosts({1.0, 1.1});  // 10 %: under the 15 % floor
    EXPECT_FALSE(v[1].flagged);
}

TEST(PreflightRule, ManyHostsNeedBothTheMadAndThePercentage) {
    // Eight hosts within ±2 % and one 31 % slower: only that one.
    std::vector<double> r = {1.0, 1.01, 0.99, 1.02, 0.98, 1.0, 1.01, 0.99, 1.31};
    auto v = ptd::flag_slow_hosts(r);
    for (size_t i = 0; i + 1 < r.size(); ++i) EXPECT_FALSE(v[i].flagged) << i;
    EXPECT_TRUE(v.back().flagged);
    EXPECT_NEAR(v.back().slower, 0.31, 1e-12);
    // Widely spread hosts: 20 % slower than the median is within 3 MADs, not flagged.
    v = ptd::flag_slow_hosts({0.7, 0.85, 1.0, 1.15, 1.2});
    EXPECT_FALSE(v.back().flagged);
}

// Links: four hosts, host 3's links 10× slower at 4 MiB and 2× at 4 KiB; an odd 4 KiB
// figure on one healthy link does not move the verdict.
TEST(PreflightRule, LinksOfOneHostSlowerAreNamed) {
    std::vector<ptd::LinkSample> s;
    for (int a = 0; a < 4; ++a)
        for (int b = a + 1; b < 4; ++b) {
            const bool slow = b == 3;
            s.push_back({a, b, 4096, (slow ? 2 : 1) * 1e-4 * (a == 0 && b == 1 ? 30 : 1)});
            s.push_back({a, b, 4 << 20, (slow ? 10 : 1) * 4e-3});
        }
    const auto v = ptd::judge_links(4, s);
    ASSERT_TRUE(v.judged);
    for (int h = 0; h < 3; ++h) EXPECT_FALSE(v.hosts[(size_t)h].flagged) << h;
    EXPECT_TRUE(v.hosts[3].flagged);
    ASSERT_EQ(v.slow_links.size(), 3u);
    for (const auto& l : v.slow_links) {
        EXPECT_EQ(l.b, 3);
        EXPECT_DOUBLE_EQ(l.bytes, 4 << 20);
        EXPECT_NEAR(l.bandwidth_slower, 9.0, 1e-9);
        EXPECT_NEAR(l.reference_s, 4e-3, 1e-12);
    }
    // Two hosts: their one link has no other to be compared with.
    const auto two = ptd::judge_links(2, {{0, 1, 4 << 20, 1.0}});
    EXPECT_FALSE(two.judged);
    EXPECT_FALSE(two.hosts[0].flagged || two.hosts[1].flagged);
}

// ---- ptd calibrate as a process ---------------------------------------------------------

TEST(Calibrate, EightRankJobWritesAProfile) {
    TempDir dir("ptd_calibrate");
    const std::string prof = dir / "prof.toml";
    const auto r = run_captured(kPtd + " calibrate " + kJob + " --quick -o " + prof + " --run-root " + (dir / "runs"));
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("probe(s) per rank"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("[1/"), std::string::npos) << "a progress line per probe and host\n" << r.out;
    EXPECT_NE(r.out.find("wrote " + prof), std::string::npos) << r.out;
    auto p = ptd::load_profile(prof);
    ASSERT_TRUE(p) << p.error().str();
    ASSERT_EQ(p->hosts.size(), 1u);
    // dpwait: the step bursts of the DP pair, fitted and said.
    const ptd::DpWaitFigure wait = ptd::dp_wait_figure(*p);
    EXPECT_EQ(wait.group, 2);
    EXPECT_GT(wait.burst_s, 0);
    EXPECT_NE(r.out.find("fitted: a step's wait for the slowest of dp×2: "), std::string::npos) << r.out;
    if (p->hosts[0].cores_for_ranks() < 8) {
        // 8 ranks on fewer cores: the step probe trains 6 steps and refines the profile from
        // steps 2–6 (the first warms up).
        EXPECT_NE(r.out.find("step probe: host localhost (local) runs 8 ranks on"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("8 rank(s), 5 step(s)"), std::string::npos) << r.out;
        EXPECT_NE(r.out.find("a TP collective of 32768 bytes costs"), std::string::npos) << r.out;
        ASSERT_EQ(p->refined_from.size(), 1u);
        EXPECT_NE(p->refined_from[0].find("-steps"), std::string::npos);
    } else {
        EXPECT_NE(r.out.find("step probe: not needed"), std::string::npos) << r.out;
        EXPECT_TRUE(p->refined_from.empty());
    }
    EXPECT_EQ(p->gpu, "cpu");
    EXPECT_TRUE(p->quick);
    ASSERT_EQ(p->hosts.size(), 1u);
    EXPECT_EQ(p->hosts[0].ranks, 8);
    EXPECT_FALSE(p->hosts[0].cpu_model.empty());
    EXPECT_FALSE(p->hosts[0].blas_core.empty());
    EXPECT_GT(p->gemm_tflops, 0);
    EXPECT_GT(p->memory_gbps, 0);
    std::set<int> ranks;
    for (const auto& s : p->samples) ranks.insert(s.rank);
    EXPECT_EQ(ranks.size(), 8u);
    std::set<std::string> groups;
    for (const auto& c : p->collectives) {
        groups.insert(c.group + "/" + c.op);
        EXPECT_GT(c.busbw_gbps, 0) << c.group << " " << c.op;
        EXPECT_EQ(c.sizes, 3);
    }
    for (const char* g : {"tp/all_reduce", "dp/reduce_scatter", "dp/all_gather", "world/all_reduce", "pp/p2p"})
        EXPECT_TRUE(groups.count(g)) << g;
}

// The tensor-parallel calls of a real run, per step and rank, as its timeline records them:
// what the estimator's engine model counts (tests/estimate/engine_profile_time.cpp counts
// them by hand); then `ptd calibrate --from-run` puts the run's in-step cost of those calls
// into the profile, and the estimate takes it.
TEST(Calibrate, ARunRefinesTheProfileItsCallsCountedByTheModel) {
    TempDir dir("ptd_calibrate");
    const std::string prof = dir / "prof.toml";
    const auto cal = run_captured(kPtd + " calibrate " + kJob + " --quick -o " + prof + " --run-root " + (dir / "runs"));
    ASSERT_EQ(cal.rc, 0) << cal.out << cal.err;
    {  // the probes between compute bursts, their mean kept
        auto p = ptd::load_profile(prof);
        ASSERT_TRUE(p) << p.error().str();
        int in_step = 0;
        for (const auto& s : p->samples)
            if (s.kind == "comm" && s.between_s > 0 && s.group == "tp") {
                ++in_step;
                EXPECT_GT(s.mean_s, 0);
            }
        // Where the 8 ranks share the host's cores: all-reduce, reduce-scatter, all-gather on
        // every rank (the step probe's replacing two of them); else none.
        ASSERT_EQ(p->hosts.size(), 1u);
        EXPECT_EQ(in_step, p->hosts[0].cores < 8 ? 3 * 8 : 0);
    }
    const auto run = run_captured(kPtd + " launch " + kJob + " --steps 4 --run-root " + (dir / "runs") +
                                  " --run-id train -- --timeline-steps 4");
    ASSERT_EQ(run.rc, 0) << run.out << run.err;
    const std::string run_dir = dir / "runs/train";
    // Per step: rank 0 (stage 0) and rank 4 (stage 1), against the model's calls per step.
    const ptd::JobSpec job = ptd_test::loaded(ptd::load_job_file_with_overrides(kJob, {}, ptd_test::presets()));
    ClusterProfile flat;
    flat.gpu = "cpu", flat.ranks_per_host = 8;
    flat.hosts.push_back({"h", "h", 8, "cpu", 2, 0, 1, "", "cpu", ""});
    for (const char* op : {"all_gather", "reduce_scatter", "all_reduce"})
        for (double bytes : {4096.0, 1e9}) {
            ProfileSample c = comm_sample(0, bytes, 1.0);
            c.name = op, c.group = "tp", c.group_size = 2, c.members_per_node = 2, c.nodes = 1;
            flat.samples.push_back(c);
        }
    const ptd::Estimate model = ptd::estimate_job(job, &flat);
    for (int rank : {0, 4}) {
        const std::string tsv = ptd_test::read_file(run_dir + "/timeline/" + ptd::timeline_file_name(rank));
        std::map<int, int> per_step, grad_per_step;  // a micro-batch's TP calls; the gradient phase's (micro-batch −1)
        std::istringstream in(tsv);
        for (std::string line; std::getline(in, line);) {
            if (line.rfind("tp\t", 0) != 0) continue;
            std::istringstream f(line.substr(3));
            int step = 0, mb = 0;
            f >> step >> mb;
            ++(mb >= 0 ? per_step : grad_per_step)[step];
        }
        ASSERT_FALSE(per_step.empty()) << tsv;
        const int stage = rank / 4;
        for (auto [step, n] : per_step)
            EXPECT_EQ(n, (int)std::lround(model.micro_batches * model.stages[(size_t)stage].tp_s)) << "rank " << rank << " step " << step;
        // SP: each replicated tensor's gradient summed over TP, as engine_stage_tail counts them:
        // per layer (2 here) two LayerNorms' weight and bias and two row-parallel biases; the
        // learned positions on the first stage, the final LayerNorm on the last.
        ASSERT_EQ(grad_per_step.size(), per_step.size()) << tsv;
        for (auto [step, n] : grad_per_step) EXPECT_EQ(n, 2 * 6 + (stage == 0 ? 1 : 2)) << "rank " << rank << " step " << step;
    }
    // Refined from the run.
    const auto refine = run_captured(kPtd + " calibrate --from-run " + run_dir + " --profile " + prof);
    ASSERT_EQ(refine.rc, 0) << refine.out << refine.err;
    EXPECT_NE(refine.out.find("a TP collective of 32768 bytes costs"), std::string::npos) << refine.out;
    EXPECT_NE(refine.out.find("a gradient all-reduce of 256 bytes"), std::string::npos) << refine.out;
    auto p = ptd::load_profile(prof);
    ASSERT_TRUE(p) << p.error().str();
    ASSERT_FALSE(p->refined_from.empty());
    EXPECT_EQ(p->refined_from.back(), "train");
    int from_run = 0;
    for (const auto& s : p->samples)
        if (s.kind == "comm" && s.between_s > 0 && s.group == "tp" && s.name != "all_reduce") {  // SP: no TP all-reduce in a layer
            ++from_run;
            EXPECT_EQ(s.bytes, 2.0 * 64 * 64 * 4) << "micro_batch · seq · hidden · fp32";
            EXPECT_GE(s.repeats, 72) << "every call of a step";
        }
    EXPECT_EQ(from_run, 2 * 8) << "all-gather and reduce-scatter (SP) on every rank, the probes' replaced";
    // The gradient phase's all-reduces: hidden f32 words, every rank, the probes' all-reduce replaced.
    int grad_from_run = 0;
    for (const auto& s : p->samples)
        if (s.kind == "comm" && s.between_s > 0 && s.group == "tp" && s.name == "all_reduce") {
            ++grad_from_run;
            EXPECT_EQ(s.bytes, 64.0 * 4) << "hidden · fp32";
            EXPECT_GE(s.repeats, 3 * 13) << "every gradient call of steps 2–4";
        }
    EXPECT_EQ(grad_from_run, 8);
    // The step's data-parallel calls, once a step (ZeRO-1, dp 2): the gradient reduce-scatter
    // at the stage's f32 gradients and the weights' all-gather, every rank, from steps 2–4.
    const ptd::Estimate counted = ptd::estimate_job(job);
    int reduce_from_run = 0, gather_from_run = 0;
    for (const auto& s : p->samples) {
        if (s.kind != "comm" || s.between_s <= 0 || s.group != "dp" || s.name == "all_reduce") continue;  // all-reduce: the probe's
        const double params = counted.stages[(size_t)(s.rank / 4)].params_count;
        EXPECT_EQ(s.repeats, 3) << s.name << " rank " << s.rank;
        EXPECT_EQ(s.bytes, params * 4) << s.name << ": f32 gradients or fp32 weights, rank " << s.rank;
        reduce_from_run += s.name == "reduce_scatter";
        gather_from_run += s.name == "all_gather";
    }
    EXPECT_EQ(reduce_from_run, 8);
    EXPECT_EQ(gather_from_run, 8);
    EXPECT_NE(refine.out.find("the DP gradient reduction"), std::string::npos) << refine.out;
    // A call's cost is that of a typical step: each step's mean call, the median over steps
    // 2–4 (the first warms up), not the mean over every call (one slow step would set it).
    {
        const std::string tsv = ptd_test::read_file(run_dir + "/timeline/" + ptd::timeline_file_name(0));
        std::map<int, std::vector<double>> calls;
        std::istringstream in(tsv);
        for (std::string line; std::getline(in, line);) {
            if (line.rfind("tp\t", 0) != 0) continue;
            std::istringstream f(line);
            std::string kind;
            long long step, mb, chunk, stream, start, end;
            f >> kind >> step >> mb >> chunk >> stream >> start >> end;
            if (step >= 2 && mb >= 0) calls[(int)step].push_back((double)(end - start) / 1e9);
        }
        ASSERT_EQ(calls.size(), 3u) << tsv;
        std::vector<double> means;
        for (auto& [step, v] : calls) means.push_back(std::accumulate(v.begin(), v.end(), 0.0) / (double)v.size());
        std::sort(means.begin(), means.end());
        bool seen = false;
        for (const auto& s : p->samples)
            if (s.kind == "comm" && s.between_s > 0 && s.group == "tp" && s.rank == 0 && s.name == "all_gather") {
                seen = true;
                EXPECT_NEAR(s.mean_s, means[1], 1e-3 * means[1]);  // the timeline read back in seconds, rounded
            }
        EXPECT_TRUE(seen);
    }
    const auto est = run_captured(kPtd + " estimate " + kJob + " --profile " + prof);
    ASSERT_EQ(est.rc, 0) << est.err;
    EXPECT_NE(est.out.find("from profile"), std::string::npos) << est.out;

    // A profile of other hosts: refused, naming the run's host and the profile's.
    ClusterProfile other = synthetic_profile();
    std::ofstream(dir / "other.toml") << ptd::profile_toml(other);
    const auto refused = run_captured(kPtd + " calibrate --from-run " + run_dir + " --profile " + (dir / "other.toml"));
    EXPECT_EQ(refused.rc, 2);
    EXPECT_NE(refused.err.find("host \"localhost (local)\" ran the job but the profile"), std::string::npos) << refused.err;
    EXPECT_NE(refused.err.find("\"node-a\", \"node-b\""), std::string::npos) << refused.err;
}

// `ptd calibrate` of tiny-local (tp 2 · pp 2) on the fixture's sshd as one host of 4 slots,
// the engine uploaded: the command up to its -o / --run-id (the hostfile written in `dir`).
std::string calibrate_over_ssh(const SshdFixture& sshd, const TempDir& dir) {
    std::ofstream(dir / "hosts") << sshd.user << "@127.0.0.1:" << sshd.port << " slots=4\n";
    return kPtd + " calibrate " PTD_SOURCE_DIR "/assets/jobs/tiny-local.toml --hosts " + (dir / "hosts") + " --upload --known-hosts " +
           sshd.known_hosts + " --ssh-config " + sshd.ssh_config + " --set launch.identity=" + sshd.identity + " --run-root " +
           (dir / "runs");
}

// Over SSH with --upload: the fixture's sshd on 127.0.0.1, one host of 4 slots (tiny-local:
// tp 2 · pp 2); the profile names the host as the hostfile does.
TEST(Calibrate, OverSshWithUpload) {
    unsetenv("SSH_AUTH_SOCK");
    SshdFixture sshd;
    if (std::string why = sshd.start(); !why.empty()) GTEST_SKIP() << why;
    sshd.trust_host_key();
    TempDir dir("ptd_calibrate");
    const auto r = run_captured(calibrate_over_ssh(sshd, dir) + " --quick -o " + (dir / "p.toml"));
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
    auto p = ptd::load_profile(dir / "p.toml");
    ASSERT_TRUE(p) << p.error().str();
    ASSERT_EQ(p->hosts.size(), 1u);
    EXPECT_NE(p->hosts[0].name.find("127.0.0.1"), std::string::npos) << p->hosts[0].name;
    EXPECT_EQ(p->hosts[0].ranks, 4);
    std::set<std::string> groups;
    for (const auto& c : p->collectives) groups.insert(c.group);
    EXPECT_EQ(groups, (std::set<std::string>{"pp", "tp", "world"}));  // dp = 1: no dp group
}

// --collect: the profile assembled again from the run directory's rank logs (what a Slurm
// run leaves); a run whose rank did not finish is refused naming the log.
TEST(Calibrate, CollectFromARunDirectory) {
    TempDir dir("ptd_calibrate");
    const auto r = run_captured(kPtd + " calibrate " + kJob + " --quick -o " + (dir / "live.toml") + " --run-root " + (dir / "runs") +
                                " --run-id cal");
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
    const auto c = run_captured(kPtd + " calibrate --collect " + (dir / "runs/cal") + " -o " + (dir / "collected.toml"));
    ASSERT_EQ(c.rc, 0) << c.out << c.err;
    auto live = ptd::load_profile(dir / "live.toml");
    auto collected = ptd::load_profile(dir / "collected.toml");
    ASSERT_TRUE(live && collected);
    EXPECT_EQ(collected->samples.size(), live->samples.size());
    EXPECT_EQ(collected->hosts.size(), 1u);
    EXPECT_TRUE(collected->quick);
    EXPECT_DOUBLE_EQ(collected->gemm_tflops, live->gemm_tflops);
    ASSERT_EQ(collected->collectives.size(), live->collectives.size());
    EXPECT_GE(live->hosts[0].usable_cores, 1);
    EXPECT_LE(live->hosts[0].usable_cores, live->hosts[0].cores);
    // The host's usable cores are the union of its ranks' masks, capped by a CPU quota: one
    // rank cannot tell whether its mask is its own or shared, the host's lines together can.
    auto with_masks = [&](auto mask_of_rank, const std::string& name) {
        for (int rank = 0; rank < 8; ++rank) {
            const std::string path = dir / ("runs/cal/rank-" + std::to_string(rank) + ".log");
            std::string text = ptd_test::read_file(path);
            const size_t at = text.find("\"cpus\":[");
            if (at == std::string::npos) return std::optional<ClusterProfile>{};
            text.replace(at, text.find(']', at) + 1 - at, mask_of_rank(rank));
            std::ofstream(path, std::ios::trunc) << text;
        }
        const auto run = run_captured(kPtd + " calibrate --collect " + (dir / "runs/cal") + " -o " + (dir / name));
        EXPECT_EQ(run.rc, 0) << run.out << run.err;
        auto p = ptd::load_profile(dir / name);
        return p ? std::optional<ClusterProfile>{*p} : std::nullopt;
    };
    const auto one_cpuset = with_masks([](int) { return std::string("\"cpus\":[0]"); }, "cpuset.toml");
    ASSERT_TRUE(one_cpuset);
    EXPECT_EQ(one_cpuset->hosts[0].usable_cores, 1) << "8 ranks in one 1-core cpuset";
    EXPECT_TRUE(one_cpuset->hosts[0].shares_cores());
    const auto own = with_masks([](int rank) { return "\"cpus\":[" + std::to_string(rank % 2) + "]"; }, "own.toml");
    ASSERT_TRUE(own);
    EXPECT_EQ(own->hosts[0].usable_cores, 2) << "ranks bound to core 0 or core 1: both cores";
    // A log from an engine that did not report its mask: the machine's count stands.
    const auto older = with_masks([](int) { return std::string("\"cpus_unknown\":[0]"); }, "older.toml");
    ASSERT_TRUE(older);
    EXPECT_EQ(older->hosts[0].usable_cores, 0);
    // A rank log cut before its "done" line.
    const std::string log = dir / "runs/cal/rank-5.log";
    const std::string text = ptd_test::read_file(log);
    std::ofstream(log, std::ios::trunc) << text.substr(0, text.find("\"kind\":\"done\"") - 60);
    const auto cut = run_captured(kPtd + " calibrate --collect " + (dir / "runs/cal") + " -o " + (dir / "cut.toml"));
    EXPECT_NE(cut.rc, 0);
    EXPECT_NE(cut.err.find("rank-5.log"), std::string::npos) << cut.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "cut.toml"));
}

// An engine wrapper that runs the real ptd-engine, except on rank 3, which `action` ends.
std::string engine_wrapper(const TempDir& dir, const std::string& action) {
    const std::string path = dir / "engine.sh";
    std::ofstream(path) << "#!/bin/sh\nif [ \"$RANK\" = 3 ]; then\n  " << action << "\nfi\nexec " PTD_BIN_DIR "/ptd-engine \"$@\"\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path;
}

TEST(Calibrate, ARankThatDiesEndsItNamingTheHost) {
    TempDir dir("ptd_calibrate");
    const std::string engine = engine_wrapper(dir, "exit 3");
    const std::string run_id = "cal-dies-" + std::to_string(getpid());
    const auto r = run_captured(kPtd + " calibrate " + kJob + " --quick -o " + (dir / "p.toml") + " --run-root " + (dir / "runs") +
                                " --engine " + engine + " --run-id " + run_id);
    EXPECT_EQ(r.rc, 1) << r.out << r.err;  // a failed rank: exit 1 (docs/cli.md)
    EXPECT_NE(r.err.find("failed: rank 3"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("localhost"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("no profile written"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "p.toml"));
    EXPECT_TRUE(ptd_test::survivors_after(run_id, 5).empty()) << "every other rank was stopped";
}

TEST(Calibrate, AProbeThatHangsEndsItNamingTheRankAndHost) {
    TempDir dir("ptd_calibrate");
    // Rank 3 stops itself once it is probing (SIGSTOP: silent, its peers wait for it in
    // their next collective), as a hung probe would.
    const std::string engine = engine_wrapper(dir, "(sleep 1; kill -STOP $$) &");
    const auto t0 = std::chrono::steady_clock::now();
    const std::string run_id = "cal-hangs-" + std::to_string(getpid());
    const auto r = run_captured(kPtd + " calibrate " + kJob + " -o " + (dir / "p.toml") + " --run-root " + (dir / "runs") +
                                " --engine " + engine + " --stall-timeout 4 --run-id " + run_id);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(r.rc, 0) << r.out << r.err;
    // Whichever notices first names the rank and its host: the engines' liveness monitor
    // (after --stall-timeout, 4 s: the frozen rank 3), or the calibration's own check (1.5 ×
    // --stall-timeout, 6 s: a silent rank; inside a collective any member of the group can
    // look the same) when the monitor's teardown has not ended the run by then.
    const bool by_calibration = r.err.find("on host 0 (localhost (local)) made no progress for 6 s") != std::string::npos;
    const bool by_monitor =
        r.err.find("liveness monitor: ") != std::string::npos && r.err.find("rank 3 (pid") != std::string::npos;
    EXPECT_TRUE(by_calibration || by_monitor) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir / "p.toml"));
    EXPECT_LT(s, 60) << "the stall ends the calibration, not the collectives' 300 s timeout";
    EXPECT_TRUE(ptd_test::survivors_after(run_id, 5).empty()) << "the stopped rank too";
}

// A host lost mid-calibration: its sshd (and every process it started, the ranks among
// them) killed once the probes are under way. The calibration ends non-zero naming the
// host, writes no profile and leaves no process of the run behind.
TEST(Calibrate, AHostLostMidCalibrationEndsItNamingTheHost) {
    unsetenv("SSH_AUTH_SOCK");
    SshdFixture sshd;
    if (std::string why = sshd.start(); !why.empty()) GTEST_SKIP() << why;
    sshd.trust_host_key();
    TempDir dir("ptd_calibrate");
    const std::string run_id = "cal-lost-" + std::to_string(getpid());
    const std::string cmd = calibrate_over_ssh(sshd, dir) + " --run-id " + run_id + " -o " + (dir / "p.toml") + " >" + (dir / "out") +
                            " 2>" + (dir / "err");
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
        _exit(127);
    }
    // Once a few probes have reported, the host goes away.
    const auto t0 = std::chrono::steady_clock::now();
    while (ptd_test::read_file(dir / "out").find("[3/") == std::string::npos &&
           std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const bool probing = ptd_test::read_file(dir / "out").find("[3/") != std::string::npos;
    sshd.kill_all();
    int status = 0;
    for (int i = 0; i < 1200 && waitpid(child, &status, WNOHANG) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (waitpid(child, &status, WNOHANG) == 0) kill(child, SIGKILL), waitpid(child, &status, 0), status = -1;
    const std::string out = ptd_test::read_file(dir / "out"), err = ptd_test::read_file(dir / "err");
    ASSERT_TRUE(probing) << "the probes never started\n" << out << err;
    ASSERT_TRUE(WIFEXITED(status)) << "ptd calibrate did not end within 60 s of the host going away\n" << out << err;
    EXPECT_EQ(WEXITSTATUS(status), 1) << out << err;
    EXPECT_NE(err.find("127.0.0.1"), std::string::npos) << "names the host\n" << err;
    EXPECT_NE(err.find("no profile written"), std::string::npos) << err;
    EXPECT_FALSE(std::filesystem::exists(dir / "p.toml"));
    EXPECT_TRUE(ptd_test::survivors_after(run_id, 5).empty()) << "no process of the run left";
}

// Two local "hosts" (nodes) of one rank each, each pinned to its own core; a busy process
// shares host 1's core. The preflight must flag host 1 and say what it holds in the layout:
// PP stage 1 (tiny-gpt, tp 1 · pp 2).
TEST(Preflight, ASlowHostIsFlaggedAndMappedOntoTheLayout) {
    if (std::system("command -v taskset >/dev/null 2>&1") != 0 || std::thread::hardware_concurrency() < 2)
        GTEST_SKIP() << "needs taskset and 2 cores";
    TempDir dir("ptd_preflight");
    const std::string engine = dir / "engine.sh";
    // node = RANK / LOCAL_WORLD_SIZE: each host's rank on core `node`.
    std::ofstream(engine) << "#!/bin/sh\nnode=$((RANK / LOCAL_WORLD_SIZE))\nexec taskset -c $node " PTD_BIN_DIR "/ptd-engine \"$@\"\n";
    std::filesystem::permissions(engine, std::filesystem::perms::owner_all);
    const std::string sets =
        " --set cluster.nodes=2 --set cluster.gpus_per_node=1 --set parallel.tp=1 --set parallel.pp=2"
        " --set parallel.sequence_parallel=false";
    const std::string cmd = kPtd + " calibrate " + kJob + " --check --run-root " + (dir / "runs") + " --engine " + engine + sets;
    // Two busy loops pinned to host 1's core for the length of the check: its rank gets at
    // most a third of the core, host 0's all of its own (less what else runs on the machine,
    // which is why no run without the loops is asserted: on a shared test machine another
    // process can make either core slow).
    std::vector<pid_t> busy;
    for (int i = 0; i < 2; ++i) {
        const pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(1, &one);
            sched_setaffinity(0, sizeof one, &one);
            for (unsigned long spin = 0;; spin = spin * 3 + 1) asm volatile("" : "+r"(spin));
        }
        busy.push_back(pid);
    }
    const auto slow = run_captured(cmd);
    // ptd launch --preflight runs the same check first and does not start the ranks.
    const auto launch = run_captured(kPtd + " launch " + kJob + " --preflight --steps 1 --run-root " + (dir / "runs") +
                                     " --engine " + engine + sets);
    for (pid_t pid : busy) kill(pid, SIGKILL), waitpid(pid, nullptr, 0);
    EXPECT_EQ(launch.rc, 1) << launch.out << launch.err;
    EXPECT_NE(launch.out.find("host 1 (localhost (local)) is "), std::string::npos) << launch.out;
    EXPECT_NE(launch.err.find("not launching"), std::string::npos) << launch.err;
    EXPECT_EQ(launch.out.find("step 1"), std::string::npos) << "no rank trained\n" << launch.out;
    EXPECT_EQ(slow.rc, 1) << "a flagged host fails the check\n" << slow.out << slow.err;
    EXPECT_NE(slow.out.find("host 1 (localhost (local)) is "), std::string::npos) << slow.out;
    EXPECT_NE(slow.out.find("% slower at GEMMs; it holds PP stage 1 of DP replica 0 (TP rank 0) and would slow every step by"),
              std::string::npos)
        << slow.out;
    EXPECT_NE(slow.out.find("host 0 (localhost (local)): ok"), std::string::npos) << slow.out;
    EXPECT_NE(slow.out.find("1 of 2 host(s) flagged"), std::string::npos) << slow.out;
}

// A CPU quota on one host's rank (CFS bandwidth control: cgroup v2 cpu.max, or cgroup v1's
// cpu.cfs_quota_us where the cpu controller is mounted there): 20 ms of CPU per 100 ms,
// a fifth of a core, whatever else runs. Two local "hosts" of one rank each (tiny-gpt,
// tp 1 · pp 2): the preflight flags host 1 and maps it to PP stage 1. The cgroup is removed
// afterwards (its rank has exited with the check).
TEST(Preflight, AHostUnderACpuQuotaIsFlaggedAndMapped) {
    namespace fs = std::filesystem;
    const ptd_test::CpuQuotaCgroup quota("ptd-test-quota-" + std::to_string(getpid()), 20000);
    if (!quota.skip.empty()) GTEST_SKIP() << quota.skip;
    TempDir dir("ptd_preflight");
    const std::string engine = dir / "engine.sh";
    // node = RANK / LOCAL_WORLD_SIZE: host 1's rank moves itself into the cgroup first.
    std::ofstream(engine) << "#!/bin/sh\nif [ $((RANK / LOCAL_WORLD_SIZE)) = 1 ]; then echo $$ > " << quota.procs()
                          << " || exit 9; fi\nexec " PTD_BIN_DIR "/ptd-engine \"$@\"\n";
    fs::permissions(engine, fs::perms::owner_all);
    const auto r = run_captured(kPtd + " calibrate " + kJob + " --check --run-root " + (dir / "runs") + " --engine " + engine +
                                " --set cluster.nodes=2 --set cluster.gpus_per_node=1 --set parallel.tp=1 --set parallel.pp=2"
                                " --set parallel.sequence_parallel=false");
    EXPECT_EQ(r.rc, 1) << r.out << r.err;
    EXPECT_NE(r.out.find("host 1 (localhost (local)) is "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("% slower at GEMMs; it holds PP stage 1 of DP replica 0 (TP rank 0)"), std::string::npos) << r.out;
    EXPECT_EQ(ptd_test::read_file(quota.procs()), "") << "no process left in the cgroup";
}

// Three "hosts": network namespaces on a bridge (tests/netns_hosts.h), an sshd in each, one
// rank per host (dp 3); host 2's link (10.231.77.4) slowed both ways with a real queueing
// discipline (tc netem, or tc tbf where the kernel has no netem). The preflight must name
// that host, each of its two links with both ends and how much slower, the DP group that
// crosses them, and leave the other hosts' links ok.
TEST(Preflight, ASlowLinkIsNamedWithItsHostsAndGroups) {
    NetnsHosts net(3);
    if (!net.skip.empty()) GTEST_SKIP() << net.skip;
    if (std::string why = net.slow_link(3, 200, 5); !why.empty()) GTEST_SKIP() << why;
    unsetenv("SSH_AUTH_SOCK");
    SshdFixture sshd[3];
    for (int i = 0; i < 3; ++i)
        if (std::string why = sshd[i].start(net.name(i + 1), net.address(i + 1)); !why.empty()) GTEST_SKIP() << why;
    TempDir dir("ptd_preflight");
    std::string known, hosts;
    for (int i = 0; i < 3; ++i) {
        std::ofstream(sshd[i].dir + "/authorized_keys") << ptd_test::read_file(sshd[0].identity + ".pub");
        known += sshd[i].known_hosts_line();
        hosts += sshd[i].user + "@" + net.address(i + 1) + " slots=1\n";
    }
    std::ofstream(dir / "known_hosts") << known;
    std::ofstream(dir / "hosts") << hosts;
    // Each rank's Gloo pairs listen on its namespace's interface (GLOO_* is forwarded).
    const std::string hosts_and_job = kJob + " --hosts " + (dir / "hosts") + " --upload --known-hosts " + (dir / "known_hosts") +
                                      " --ssh-config " + sshd[0].ssh_config + " --set launch.identity=" + sshd[0].identity +
                                      " --set launch.connect_timeout_s=5 --run-root " + (dir / "runs") +
                                      " --set cluster.nodes=3 --set cluster.gpus_per_node=1 --set parallel.tp=1 --set parallel.pp=1"
                                      " --set parallel.sequence_parallel=false --set training.global_batch=6";
    const auto r = run_captured("GLOO_SOCKET_IFNAME=eth0 " + kPtd + " calibrate --check " + hosts_and_job);
    const std::string slow = "host 2 (" + sshd[2].user + "@" + net.address(3) + ")";
    EXPECT_EQ(r.rc, 1) << "slowed with " << net.slowed_with << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find(slow + " has slow links"), std::string::npos) << r.out;
    for (int other : {0, 1}) {
        const std::string link = "link " + slow + " ↔ host " + std::to_string(other) + " (" + sshd[other].user + "@" +
                                 net.address(other + 1) + "): ";
        EXPECT_NE(r.out.find(link), std::string::npos) << link << "\n" << r.out;
    }
    EXPECT_NE(r.out.find("% slower (4 MiB exchanges take "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("crossed by 1 DP group (ranks 0, 1, 2)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("of DP gradient reduction (fp32, as the engine reduces) cross it per step"), std::string::npos) << r.out;
    // (Not their GEMMs: three ranks time-share this machine's cores, so which host computes
    // slowest is not this test's to say.)
    for (int ok : {0, 1})
        EXPECT_NE(r.out.find("host " + std::to_string(ok) + " (" + sshd[ok].user + "@" + net.address(ok + 1) + "): links ok"),
                  std::string::npos)
            << r.out;
    // Named before a launch too: ptd launch --preflight runs the same check and does not start.
    const auto launch = run_captured("GLOO_SOCKET_IFNAME=eth0 " + kPtd + " launch --preflight --steps 1 " + hosts_and_job);
    EXPECT_EQ(launch.rc, 1) << launch.out << launch.err;
    EXPECT_NE(launch.out.find(slow + " has slow links"), std::string::npos) << launch.out;
    EXPECT_NE(launch.err.find("not launching"), std::string::npos) << launch.err;
    EXPECT_EQ(launch.out.find("step 1"), std::string::npos) << "no rank trained\n" << launch.out;
}

// ptd estimate / plan with a profile: --profile, or [cluster] profile relative to the job
// file; the note says where and when it was measured and which figures the time model will
// take from it; other hardware and a bad profile are refused.
TEST(Calibrate, EstimateAndPlanNameTheProfile) {
    TempDir dir("ptd_calibrate");
    ClusterProfile p = synthetic_profile();
    std::ofstream(dir / "prof.toml") << ptd::profile_toml(p);
    const auto est = run_captured(kPtd + " estimate " + kJob + " --profile " + (dir / "prof.toml"));
    ASSERT_EQ(est.rc, 0) << est.err;
    EXPECT_NE(est.out.find("profile: " + (dir / "prof.toml") + " (measured 2026-11-29T06:40:00Z on node-a, node-b)"), std::string::npos)
        << est.out;
    EXPECT_NE(est.out.find("the time figures above come from it"), std::string::npos) << est.out;
    EXPECT_NE(est.out.find("TP comm"), std::string::npos) << est.out;
    EXPECT_NE(est.out.find("from profile"), std::string::npos) << est.out;
    EXPECT_NE(est.out.find("GEMM throughput: 2 TFLOP/s"), std::string::npos) << est.out;
    EXPECT_NE(est.out.find("all_reduce over dp (4 ranks, 2 nodes): latency 50 µs, bus bandwidth 2 GB/s"), std::string::npos) << est.out;
    const auto json = run_captured(kPtd + " estimate " + kJob + " --json --profile " + (dir / "prof.toml"));
    ASSERT_EQ(json.rc, 0) << json.err;
    const auto doc = nlohmann::json::parse(json.out);
    EXPECT_EQ(doc["profile"]["measured_at"], "2026-11-29T06:40:00Z");
    EXPECT_EQ(doc["profile"]["used_by_time_model"], true);
    EXPECT_EQ(doc["time_source"], "profile");
    EXPECT_EQ(doc["interval"]["source"], "cluster_profile");
    // A job another framework runs: the profile is named, not used, and the reason given.
    const auto megatron = run_captured(kPtd + " estimate " + kJob + " --set estimate.activation_profile=megatron --profile " +
                                       (dir / "prof.toml"));
    ASSERT_EQ(megatron.rc, 0) << megatron.err;
    EXPECT_NE(megatron.out.find("not used for the time figures: the time model takes a profile's figures for jobs the "
                                "bundled engine runs"), std::string::npos) << megatron.out;
    EXPECT_NE(megatron.out.find("from preset"), std::string::npos) << megatron.out;
    const auto plan = run_captured(kPtd + " plan " + kJob + " --top 2 --profile " + (dir / "prof.toml"));
    ASSERT_EQ(plan.rc, 0) << plan.err;
    EXPECT_NE(plan.out.find("profile: "), std::string::npos) << plan.out;

    // [cluster] profile, relative to the job file's folder (not the current one).
    std::filesystem::create_directories(dir / "jobs");
    std::ofstream(dir / "jobs/prof.toml") << ptd::profile_toml(p);
    std::ofstream(dir / "jobs/job.toml") << with(ptd_test::read_file(kJob), "[cluster]\n", "[cluster]\nprofile = \"prof.toml\"\n");
    const auto keyed = run_captured("cd / && " + kPtd + " estimate " + (dir / "jobs/job.toml"));
    ASSERT_EQ(keyed.rc, 0) << keyed.err;
    EXPECT_NE(keyed.out.find("profile: " + (dir / "jobs/prof.toml")), std::string::npos) << keyed.out;

    // Measured on other hardware: refused, naming both.
    p.gpu = "h100-sxm";
    std::ofstream(dir / "jobs/prof.toml") << ptd::profile_toml(p);
    const auto other = run_captured(kPtd + " estimate " + (dir / "jobs/job.toml"));
    EXPECT_EQ(other.rc, 2);
    EXPECT_NE(other.err.find("measured on \"h100-sxm\" hardware, but this job runs on \"cpu\""), std::string::npos) << other.err;
    // A bad profile named by the job: both the job's key and the profile's line.
    std::ofstream(dir / "jobs/prof.toml") << "schema = \"ptd.profile/1\"\nmeasured_at = 3\n";
    const auto bad = run_captured(kPtd + " estimate " + (dir / "jobs/job.toml"));
    EXPECT_EQ(bad.rc, 2);
    EXPECT_NE(bad.err.find("job.toml:"), std::string::npos) << bad.err;
    EXPECT_NE(bad.err.find("cluster.profile"), std::string::npos) << bad.err;
    EXPECT_NE(bad.err.find("prof.toml:2:"), std::string::npos) << bad.err;
    EXPECT_NE(bad.err.find("measured_at"), std::string::npos) << bad.err;
}

TEST(Preflight, OneHealthyHostThenTheLaunch) {
    TempDir dir("ptd_preflight");
    const auto r = run_captured(kPtd + " launch " + kJob + " --preflight --steps 1 --run-root " + (dir / "runs"));
    EXPECT_EQ(r.rc, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("0 of 1 host(s) flagged"), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("done: every rank finished"), std::string::npos) << r.err;
}

// --exclude-hosts leaves hostfile entries out; the dry run shows the hosts that remain.
TEST(Preflight, ExcludeHostsDropsNamedHosts) {
    TempDir dir("ptd_preflight");
    const std::string hosts = dir / "hosts";
    std::ofstream(hosts) << "# three hosts, one rank each\nnode-a slots=1\nnode-b slots=1\nnode-c slots=1\n";
    const std::string base = kPtd + " calibrate " + kJob + " --dry-run --hosts " + hosts +
                             " --set cluster.nodes=2 --set cluster.gpus_per_node=1 --set parallel.tp=1 --set parallel.pp=2"
                             " --set parallel.sequence_parallel=false --run-root " + (dir / "runs");
    const auto r = run_captured(base + " --exclude-hosts node-b");
    ASSERT_EQ(r.rc, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("node-a"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("node-c"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("node-b"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--probe"), std::string::npos) << "the ranks run the probes\n" << r.out;
    const auto unknown = run_captured(base + " --exclude-hosts node-x");
    EXPECT_EQ(unknown.rc, 2) << unknown.out << unknown.err;
    EXPECT_NE(unknown.err.find(hosts), std::string::npos) << unknown.err;
    EXPECT_NE(unknown.err.find("--exclude-hosts: got \"node-x\""), std::string::npos) << unknown.err;
    EXPECT_NE(unknown.err.find("allowed: node-a, node-b, node-c"), std::string::npos) << unknown.err;
    const auto without_hosts = run_captured(kPtd + " calibrate " + kJob + " --dry-run --exclude-hosts node-b");
    EXPECT_EQ(without_hosts.rc, 2);
    EXPECT_NE(without_hosts.err.find("needs --hosts FILE"), std::string::npos) << without_hosts.err;
}

}  // namespace
