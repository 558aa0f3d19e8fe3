// overlap_p2p.cpp — megatron's overlapped pipeline send / receive under the interleaved schedule
// (parallel.overlap_p2p_comm, which the NeMo / Megatron-Bridge recipes switch on): the
// estimate, the job file, the Megatron export.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/export/export.h"

#include "job_test_util.h"

namespace {

using namespace ptd;

// llama3-70b-h100.toml runs TP 8 · PP 4 · VP 5 over 8 nodes: every pipeline hop crosses nodes.
JobSpec interleaved_job(bool overlap_p2p, const std::vector<std::string>& more = {}) {
    std::vector<std::string> sets = {std::string("parallel.overlap_p2p_comm=") + (overlap_p2p ? "true" : "false")};
    sets.insert(sets.end(), more.begin(), more.end());
    return ptd_test::load_asset("llama3-70b-h100.toml", sets);
}

// Megatron's interleaved schedule with overlap_p2p_comm posts a chunk's send / receive and waits
// only before the chunk that needs it: the hop runs beside the next chunk's compute. The hop is
// far shorter than a chunk here, so what is left is the SM-contention cost (overlapped_cost:
// c·σ/(1 + σ)), the same for every hop.
TEST(OverlapP2p, InterleavedHopRunsBesideTheNextChunk) {
    const Estimate exposed = estimate_job(interleaved_job(false));
    const Estimate hidden = estimate_job(interleaved_job(true));
    ASSERT_GT(exposed.time.pp_comm, 0.0);
    const double sigma = time_model_constants().overlap_slowdown;
    EXPECT_NEAR(hidden.time.pp_comm, exposed.time.pp_comm * sigma / (1.0 + sigma), 1e-9 * exposed.time.pp_comm);
    EXPECT_LT(hidden.step_s, exposed.step_s);
    EXPECT_NEAR(exposed.step_s - hidden.step_s, exposed.time.pp_comm - hidden.time.pp_comm,
                0.02 * (exposed.time.pp_comm - hidden.time.pp_comm));
    // What is computed does not change.
    EXPECT_DOUBLE_EQ(hidden.time.compute, exposed.time.compute);
}

// Megatron turns the overlap off without interleaving (arguments.py) and the other frameworks'
// pipelines send their own way: there the key changes nothing.
TEST(OverlapP2p, OnlyMegatronsInterleavedSchedule) {
    for (const std::vector<std::string>& sets :
         {std::vector<std::string>{"parallel.vpp=1"}, std::vector<std::string>{"training.framework=deepspeed", "parallel.vpp=1"},
          std::vector<std::string>{"parallel.schedule=zb-h1", "parallel.vpp=1"}}) {
        std::string what;
        for (const std::string& s : sets) what += s + " ";
        const Estimate off = estimate_job(interleaved_job(false, sets));
        const Estimate on = estimate_job(interleaved_job(true, sets));
        EXPECT_GT(off.time.pp_comm, 0.0) << what;
        EXPECT_DOUBLE_EQ(on.time.pp_comm, off.time.pp_comm) << what;
        EXPECT_DOUBLE_EQ(on.step_s, off.step_s) << what;
    }
}

// The job file: Megatron-LM's default (on) is not written; false is, and reads back.
TEST(OverlapP2p, JobFileKeyRoundTrips) {
    const JobSpec off = interleaved_job(false);
    EXPECT_FALSE(off.parallel.overlap_p2p_comm);
    EXPECT_TRUE(ptd_test::load_asset("llama3-70b-h100.toml").parallel.overlap_p2p_comm);
    const std::string text = save_job_toml(off);
    EXPECT_TRUE(ptd_test::contains(text, "overlap_p2p_comm = false")) << text;
    EXPECT_FALSE(ptd_test::contains(save_job_toml(interleaved_job(true)), "overlap_p2p_comm")) << text;
    EXPECT_FALSE(ptd_test::job_from_text(text, "roundtrip.toml").parallel.overlap_p2p_comm);
    const std::string bad = ptd_test::load_error("llama3-70b-h100.toml", {"parallel.overlap_p2p_comm=maybe"});
    EXPECT_TRUE(ptd_test::contains(bad, "overlap_p2p_comm")) << bad;
}

// Megatron-LM overlaps by default with interleaving, so only a job that keeps every hop exposed
// needs a flag to run as estimated.
TEST(OverlapP2p, MegatronExportTurnsItOffOnlyWhenTheJobDoes) {
    auto args_of = [](const JobSpec& job) {
        auto out = export_job(job, ExportFormat::megatron);
        EXPECT_TRUE(out) << (out ? "" : out.error().str());
        return out ? out->text : std::string();
    };
    EXPECT_TRUE(ptd_test::contains(args_of(interleaved_job(false)), "--no-overlap-p2p-communication"));
    EXPECT_FALSE(ptd_test::contains(args_of(interleaved_job(true)), "overlap-p2p"));
    EXPECT_FALSE(ptd_test::contains(args_of(interleaved_job(false, {"parallel.vpp=1"})), "overlap-p2p"));
}

}  // namespace
