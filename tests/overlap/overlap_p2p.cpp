// overlap_p2p.cpp — megatron's overlapped pipeline send / receive under the interleaved schedule
// (parallel.overlap_p2p_comm, which the NeMo / Megatron-Bridge recipes switch on): the
// estimate (the block's SM cost, the receiver's wait per link), the job file, the Megatron export.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/model/schedule.h"
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

// The schedule's makespan of an estimate's own blocks, with or without its hops, each block
// `longer` seconds longer.
double makespan_of(const Estimate& est, int p, int v, bool with_hops, double longer = 0) {
    std::vector<double> f((size_t)p * v), b((size_t)p * v), end((size_t)p);
    for (int s = 0; s < p; ++s)
        for (int c = 0; c < v; ++c) {
            f[(size_t)(c * p + s)] = est.stages[(size_t)s].chunks[(size_t)c].fwd.total() + longer;
            b[(size_t)(c * p + s)] = est.stages[(size_t)s].chunks[(size_t)c].bwd.total() + longer;
        }
    PipelineDurations d{p, v, est.micro_batches, f, b};
    if (with_hops) d.hop = est.pipeline_hops_s;
    return simulate_pipeline(d, end);
}

// p2pdep: the overlapped send leaves its SM cost in the block, but the receiving stage still
// waits for the bytes: every link's hop is the send's own time (here each crosses nodes: the
// blocking send's time per hop), and the step is longer than the same blocks with no wait,
// but no longer than the same blocks each a hop longer (a wait after a block delays no more
// than a longer block would: the planner's upper bound rests on it).
TEST(OverlapP2p, TheReceiverStillWaitsForTheBytes) {
    const Estimate exposed = estimate_job(interleaved_job(false));
    const Estimate hidden = estimate_job(interleaved_job(true));
    EXPECT_TRUE(exposed.pipeline_hops_s.empty());
    ASSERT_EQ(hidden.pipeline_hops_s.size(), 4u);
    const double hop = exposed.stages[1].chunks[0].fwd.p2p;  // one blocking send: the whole hop
    ASSERT_GT(hop, 0.0);
    for (double h : hidden.pipeline_hops_s) EXPECT_NEAR(h, hop, 1e-12) << "every link crosses nodes";
    const double with = makespan_of(hidden, 4, 5, true), without = makespan_of(hidden, 4, 5, false);
    EXPECT_NEAR(with, hidden.pipeline_s, 1e-9 * with);
    EXPECT_GT(with - without, 0.0);
    EXPECT_LE(with, makespan_of(hidden, 4, 5, false, hop) * (1 + 1e-12));
    EXPECT_TRUE(ptd_test::any_note(hidden, "pipeline sends (p2pdep)"));
    EXPECT_FALSE(ptd_test::any_note(exposed, "pipeline sends (p2pdep)"));
}

// On GB200 NVL72 a 128-GPU job is two 64-GPU NVLink domains; with PP outermost (stride 32) two
// stages share a domain: links 0 → 1 and 2 → 3 are NVLink, 1 → 2 and the ring's 3 → 0 leave it
// over the NICs. Each link waits its own hop, and the note names both.
TEST(OverlapP2p, EachLinkWaitsItsOwnHop) {
    const JobSpec job = interleaved_job(true, {"cluster.preset=gb200-nvl72", "cluster.nodes=32", "cluster.gpus_per_node=4",
                                               "cluster.gpu=gb200", "cluster.inter_gbps=50", "parallel.vpp=4",
                                               "training.global_batch=256"});
    ASSERT_EQ(job.world_size(), 128);
    const Estimate est = estimate_job(job);
    ASSERT_EQ(est.pipeline_hops_s.size(), 4u);
    const std::vector<double>& h = est.pipeline_hops_s;
    EXPECT_LT(h[0], h[1]);
    EXPECT_DOUBLE_EQ(h[0], h[2]);
    EXPECT_DOUBLE_EQ(h[1], h[3]);
    EXPECT_LT(h[0], 0.25 * h[1]) << "NVLink at 900 GB/s against a 400 Gb/s NIC";
    EXPECT_TRUE(ptd_test::any_note(est, "2 of 4 links that leave a node"));
}

// When the PP group's stages do not fill domains evenly — 192 GB200 in 64-GPU domains, stages
// 24 ranks apart: stages 0–2, 3–5 and 6–7 share a domain — the ring's last link (7 → 0) leaves
// its domain too, though stage 8 would not start a new one.
TEST(OverlapP2p, TheRingsLastLinkLeavesTheDomain) {
    const JobSpec job = interleaved_job(true, {"cluster.preset=gb200-nvl72", "cluster.nodes=48", "cluster.gpus_per_node=4",
                                               "cluster.gpu=gb200", "cluster.inter_gbps=50", "parallel.tp=8", "parallel.pp=8",
                                               "parallel.vpp=5", "training.global_batch=48"});
    ASSERT_EQ(job.world_size(), 192);
    ASSERT_EQ(job.parallel.dp, 3);
    const Estimate est = estimate_job(job);
    ASSERT_EQ(est.pipeline_hops_s.size(), 8u);
    const std::vector<double>& h = est.pipeline_hops_s;
    const double nvlink = h[0], nic = h[2];
    EXPECT_LT(nvlink, nic);
    for (int s : {0, 1, 3, 4, 6}) EXPECT_DOUBLE_EQ(h[(size_t)s], nvlink) << "link " << s;
    for (int s : {2, 5, 7}) EXPECT_DOUBLE_EQ(h[(size_t)s], nic) << "link " << s;
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
