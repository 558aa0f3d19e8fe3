// test_studio_launch.cpp — the Launch panel's view-model with real processes and no window:
// the default choice of job, why Launch is disabled, hosts typed in the panel, the dry-run
// preview, a real launch of the tiny job feeding the Live panel's data and the log console,
// a failing rank's banner, and Stop.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "launch_model.h"
#include "launcher_test_util.h"
#include "live_model.h"
#include "studio_state.h"
#include "studio_test_util.h"

using namespace ptd;
using namespace ptd::studio;

namespace {

StudioState default_state() { return ptd_test::default_studio_state(); }

// Ticks (as the UI's frames do) until the run ends; false on timeout (the run is stopped).
bool tick_until_finished(StudioState& s, double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (launch_running(s) || launch_tick(s)) {
        if (std::chrono::steady_clock::now() > until) {
            launch_stop(s);
            while (launch_running(s)) launch_tick(s), std::this_thread::sleep_for(std::chrono::milliseconds(20));
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    launch_tick(s);
    return true;
}

std::string temp_run_root() { return ptd_test::scratch_dir("studio-launch"); }

}  // namespace

TEST(LaunchPanel, DefaultsToTheTinyJobWhenTheEditedOneIsForGpus) {
    StudioState s = default_state();  // 7B on 4 × 8 H100
    ASSERT_TRUE(s.launch.tiny_job);
    EXPECT_EQ(s.launch.which, LaunchWhich::tiny);
    EXPECT_TRUE(launch_is_local(s));
    s.launch.run_root = temp_run_root();
    EXPECT_EQ(launch_blocked_reason(s), "");

    const PresetCatalog& presets = embedded_presets();
    auto tiny = load_job_text("[model]\npreset = \"tiny-gpt\"\n[cluster]\nnodes = 1\ngpus_per_node = 2\ngpu = \"cpu\"\n"
                              "[training]\nprecision = \"fp32\"\n",
                              "<cpu job>", presets);
    ASSERT_TRUE(tiny) << tiny.error().str();
    StudioState cpu = make_state(presets, *tiny);
    EXPECT_EQ(cpu.launch.which, LaunchWhich::edited);  // a CPU job runs as it is
}

TEST(LaunchPanel, LaunchIsDisabledWithTheReason) {
    StudioState s = default_state();
    s.launch.run_root = temp_run_root();
    s.launch.which = LaunchWhich::edited;
    ASSERT_TRUE(edit_int(s, "parallel.tp", 3));  // 32 heads are not divisible by 3
    const std::string why = launch_blocked_reason(s);
    EXPECT_NE(why.find("problem"), std::string::npos) << why;

    s.launch.which = LaunchWhich::tiny;
    EXPECT_EQ(launch_blocked_reason(s), "");
    // Hosts typed in the panel are a hostfile: a bad line is named.
    s.launch.hosts_text = "# comment only is no hosts\n";
    EXPECT_EQ(launch_blocked_reason(s), "");
    EXPECT_TRUE(launch_is_local(s));
    s.launch.hosts_text = "host-a slots=4\nhost-a slots=4\n";
    std::string bad = launch_blocked_reason(s);
    EXPECT_NE(bad.find("hosts (Launch panel):2"), std::string::npos) << bad;
    s.launch.hosts_text = "alice@host-a:2222 slots=3\n";
    bad = launch_blocked_reason(s);
    EXPECT_NE(bad.find("slots=3"), std::string::npos) << bad;
    EXPECT_FALSE(launch_is_local(s));
}

TEST(LaunchPanel, PreviewShowsEachHostsCommands) {
    StudioState s = default_state();
    s.launch.run_root = temp_run_root();
    s.launch.hosts_text = "alice@host-a:2222 slots=4\n";
    s.launch.upload = true;
    launch_preview(s);
    EXPECT_TRUE(s.launch.preview_ok) << s.launch.preview;
    EXPECT_NE(s.launch.preview.find("ssh alice@host-a:2222 printf"), std::string::npos) << s.launch.preview;
    EXPECT_NE(s.launch.preview.find("ptd-engine (") , std::string::npos) << s.launch.preview;  // uploaded
    s.launch.hosts_text = "bad host line with words\n";
    launch_preview(s);
    EXPECT_FALSE(s.launch.preview_ok);
}

TEST(LaunchPanel, OneClickTrainsTheTinyJobAndFillsTheLivePanel) {
    StudioState s = default_state();
    s.launch.run_root = temp_run_root();
    s.launch.steps = 3;
    ASSERT_TRUE(launch_start(s)) << s.launch.banner;
    EXPECT_TRUE(launch_running(s));
    EXPECT_EQ(launch_blocked_reason(s), "a run is in progress; stop it first");
    EXPECT_GT(studio_wakeup_s(s), 0);  // the window keeps ticking while it runs
    ASSERT_TRUE(tick_until_finished(s, 120));
    ASSERT_TRUE(s.launch.outcome);
    EXPECT_EQ(s.launch.outcome->exit_code, 0) << s.launch.outcome->reason;
    EXPECT_TRUE(s.launch.banner.empty()) << s.launch.banner;
    ASSERT_EQ(s.live.run.ranks.size(), 4u);
    for (const LiveRank& r : s.live.run.ranks) {
        EXPECT_EQ(r.last_step, 3) << "rank " << r.rank;
        EXPECT_EQ(r.state, "done") << "rank " << r.rank;
        EXPECT_EQ(r.series.step_s.size(), 3u) << "rank " << r.rank;  // measured step times
    }
    // The launched job's speed prediction, which the Live tab draws dashed: estimate_job's
    // (the tiny job has no profile; the CPU has no interval, and says why).
    ASSERT_TRUE(s.live.run.prediction);
    ASSERT_TRUE(s.live.run.prediction->available) << s.live.run.prediction->why_none;
    EXPECT_DOUBLE_EQ(s.live.run.prediction->step_s, predict_run(*s.launch.tiny_job, std::nullopt).step_s);
    EXPECT_FALSE(s.live.run.prediction->speed.known);
    EXPECT_FALSE(s.live.run.prediction->speed.why_unknown.empty());
    EXPECT_FALSE(s.live.run.manifest.profile);
    EXPECT_FALSE(s.live.run.live);
    EXPECT_EQ(s.launch.hosts[0].state, "ready");
    // The console shows rank 0's log, filtered.
    EXPECT_FALSE(console_lines(s).empty());
    s.launch.console_filter = "step 2/";
    const auto filtered = console_lines(s);
    ASSERT_EQ(filtered.size(), 1u);
    EXPECT_NE(filtered[0].text->find("loss"), std::string::npos);
}

TEST(LaunchPanel, FailingRankRaisesABannerWithItsStderr) {
    StudioState s = default_state();
    const std::string dir = temp_run_root();
    s.launch.run_root = dir;
    const std::string engine = dir + "/fake-engine";
    ptd_test::write_file(engine, "#!/bin/sh\nif [ \"$RANK\" = 1 ]; then echo 'rank 1: out of memory' >&2; exit 3; fi\nsleep 300\n",
                         0755);
    s.launch.tiny_job->launch.engine = engine;
    ASSERT_TRUE(launch_start(s)) << s.launch.banner;
    ASSERT_TRUE(tick_until_finished(s, 60));
    EXPECT_EQ(s.launch.outcome->exit_code, 3);
    EXPECT_NE(s.launch.banner.find("rank 1 on localhost (local) exited with code 3"), std::string::npos) << s.launch.banner;
    ASSERT_FALSE(s.launch.banner_lines.empty());
    EXPECT_EQ(s.launch.banner_lines.back(), "rank 1: out of memory");
    EXPECT_EQ(s.launch.console_rank, 1);  // the console jumps to the failing rank
    EXPECT_EQ(s.live.run.ranks[1].state, "exit 3");
}

TEST(LaunchPanel, StopEndsEveryRankWithoutABanner) {
    StudioState s = default_state();
    const std::string dir = temp_run_root();
    s.launch.run_root = dir;
    const std::string engine = dir + "/fake-engine";
    ptd_test::write_file(engine, "#!/bin/sh\necho up\nsleep 300 & sleep 300\n", 0755);
    s.launch.tiny_job->launch.engine = engine;
    ASSERT_TRUE(launch_start(s));
    const std::string run_id = s.live.run.manifest.run_id;
    for (int i = 0; i < 100 && ptd_test::processes_of_run(run_id).size() < 8; ++i) {
        launch_tick(s);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    launch_stop(s);
    ASSERT_TRUE(tick_until_finished(s, 30));
    EXPECT_TRUE(s.launch.outcome->stopped_by_user);
    EXPECT_EQ(s.launch.outcome->exit_code, 130);
    EXPECT_TRUE(s.launch.banner.empty()) << s.launch.banner;
    EXPECT_TRUE(ptd_test::survivors_after(run_id, 3).empty());
}

TEST(LaunchPanel, LaunchingTheEditedJobTurnsTheGridIntoALiveHeatmap) {
    const PresetCatalog& presets = embedded_presets();
    auto job = load_job_file(std::string(PTD_SOURCE_DIR) + "/assets/jobs/tiny-local.toml", presets);
    ASSERT_TRUE(job) << job.error().str();
    StudioState s = make_state(presets, *job);
    ASSERT_EQ(s.launch.which, LaunchWhich::edited);
    EXPECT_FALSE(live_matches_layout(s));
    EXPECT_FALSE(live_rank_heat(s, 0));
    s.launch.run_root = temp_run_root();
    s.launch.steps = 2;
    ASSERT_TRUE(launch_start(s)) << s.launch.banner;
    EXPECT_EQ(s.view.colour_by, ColourBy::live_memory);
    ASSERT_TRUE(tick_until_finished(s, 120));
    ASSERT_TRUE(live_matches_layout(s));
    double hottest = 0;
    for (int r = 0; r < 4; ++r) {
        const auto heat = live_rank_heat(s, r);
        ASSERT_TRUE(heat) << "rank " << r;
        EXPECT_GT(*heat, 0.0);
        EXPECT_LE(*heat, 1.0);
        hottest = std::max(hottest, *heat);
    }
    EXPECT_DOUBLE_EQ(hottest, 1.0);  // cpu preset: the ramp spans the ranks
    // Stage 0 (embedding) holds more than stage 1 (tp 2, pp 2: ranks 2, 3 are stage 1).
    EXPECT_GT(*live_rank_heat(s, 0), *live_rank_heat(s, 2));
    EXPECT_NE(rank_tooltip(s, 1).find("live memory"), std::string::npos) << rank_tooltip(s, 1);
}

// A GPU job on a machine without GPUs: Launch raises the launcher's refusal (the GPU the job
// asks for, --backend cpu) and starts nothing; ticking "on CPUs (--backend cpu)" runs it.
TEST(LaunchPanel, GpuJobWithoutGpusRefusesUntilRunOnCpusIsTicked) {
    const PresetCatalog& presets = embedded_presets();
    auto job = load_job_file(std::string(PTD_SOURCE_DIR) + "/assets/jobs/tiny-local.toml", presets);
    ASSERT_TRUE(job) << job.error().str();
    job->cluster.gpu = *presets.find_gpu("h100-sxm");
    StudioState s = make_state(presets, *job);
    s.launch.which = LaunchWhich::edited;
    s.launch.run_root = temp_run_root();
    s.launch.steps = 1;
    if (!launch_start(s)) {
        EXPECT_NE(s.launch.banner.find("cluster.gpu: the job asks for"), std::string::npos) << s.launch.banner;
        EXPECT_NE(s.launch.banner.find("--backend cpu"), std::string::npos) << s.launch.banner;
        EXPECT_FALSE(launch_running(s));
    } else {  // this machine has the GPUs: nothing to refuse
        ASSERT_TRUE(tick_until_finished(s, 120));
        GTEST_SKIP() << "a CUDA device is visible here";
    }
    s.launch.backend_cpu = true;
    ASSERT_TRUE(launch_start(s)) << s.launch.banner;
    ASSERT_TRUE(tick_until_finished(s, 120));
    ASSERT_TRUE(s.launch.outcome);
    EXPECT_EQ(s.launch.outcome->exit_code, 0) << s.launch.outcome->reason;
}
