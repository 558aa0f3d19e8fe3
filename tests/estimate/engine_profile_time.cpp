// engine_profile_time.cpp — the bundled engine's time model with a cluster profile
// (estimators/src/model/engine_time.cpp, profile_times.cpp): the engine's collectives
// counted call by call as model.cpp makes them, each op at the time the profile measured,
// the mean of heavy-tailed calls preferred to the median, the in-step wait added, the
// interval from the ranks' spread, ranks sharing a host's cores faster while others wait, and a
// framework other than the engine left on its preset;
// without a profile, on a GPU, the same op list timed from the GPU preset (the device model).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/model/estimate.h"
#include "ptd/spec/cluster_profile.h"
#include "ptd/timeline/timeline.h"

#include "job_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;

ProfileSample comm(int rank, const std::string& op, const std::string& group, int n, double bytes, double seconds) {
    ProfileSample s;
    s.host = 0, s.rank = rank, s.kind = "comm", s.name = op, s.group = group, s.group_size = n, s.nodes = 1,
    s.members_per_node = n, s.bytes = bytes, s.median_s = seconds, s.repeats = 5;
    return s;
}

// A profile where every collective of `group` costs `seconds` whatever its size (two sizes,
// the same time: a flat curve) and nothing else costs anything: what the model says for the
// group is then `seconds` × the calls it counts.
ClusterProfile flat_profile(const std::string& group, int n, double seconds) {
    ClusterProfile p;
    p.measured_at = "2026-11-29T08:00:00Z", p.job = "x.toml", p.gpu = "cpu", p.precision = "fp32";
    p.ranks_per_host = 8;
    p.hosts.push_back({"node-a", "a", 8, "cpu", 2, 0, 23.5, "Haswell", "cpu", ""});
    for (const char* op : {"all_gather", "reduce_scatter", "all_reduce"})
        for (double bytes : {4096.0, 1e9}) p.samples.push_back(comm(0, op, group, n, bytes, seconds));
    return p;
}

// tiny-gpt's MLP GEMMs (micro-batch 2 × 64 rows, h 64, ffn 256) at 1 GFLOP/s; the others
// interpolate at the same rate.
void add_gemms_at_one_gflops(ClusterProfile& p) {
    for (auto [name, M, N, K] : {std::tuple{"mlp_up.fwd", 128, 256, 64}, {"mlp_down.fwd", 128, 64, 256}}) {
        ProfileSample g;
        g.kind = "gemm", g.name = name, g.dtype = "f32", g.shape = {M, N, K}, g.flops = 2.0 * M * N * K;
        g.median_s = g.flops / 1e9, g.repeats = 5;
        p.samples.push_back(g);
    }
}

// `p` without its step-long bursts (the dpwait probe).
ClusterProfile without_bursts(ClusterProfile p) {
    std::erase_if(p.samples, [](const ProfileSample& s) { return s.name.starts_with("step.compute"); });
    return p;
}

// tiny-gpt-8rank: TP 2 (SP) · PP 2 · DP 2, 4 layers (2 per stage), 4 micro-batches, GPT
// blocks. Per micro-batch and layer the engine makes 2 all-gathers and 2 reduce-scatters
// forward (model.cpp layer_forward: norm → gather, attention → reduce; norm → gather, MLP →
// reduce) and as many backward. Stage 0 adds the embedding's reduce-scatter forward and
// all-gather backward: 2·4 + 1 = 9 each way, 18 per micro-batch, 72 per step. Stage 1 adds
// the output's gather and the cross entropy's two all-reduces forward, its reduce-scatter
// backward: 11 + 9 = 20, 80 per step — what the engine's own timeline records (72 and 80
// `tp` blocks per step on ranks 0 and 4; test_calibrate checks it against a real run).
TEST(EngineProfileTime, CountsTheEnginesTensorParallelCalls) {
    const JobSpec job = load_asset("tiny-gpt-8rank.toml");
    const ClusterProfile p = flat_profile("tp", 2, 1e-3);
    const Estimate e = estimate_job(job, &p);
    ASSERT_TRUE(e.time_from_profile);
    ASSERT_EQ(e.stages.size(), 2u);
    EXPECT_NEAR(e.stages[0].tp_s, 18e-3, 1e-12);
    EXPECT_NEAR(e.stages[1].tp_s, 20e-3, 1e-12);
    EXPECT_EQ(e.time.compute, 0.0);
    // With a core per rank the step is the slowest stage's calls, 4 micro-batches; on the
    // profile's shared cores (8 ranks, 2 cores, 4 ranks a stage) too: the calls keep their
    // probed time (StageCollectivesShrinkOnlyWhereTheStageFitsTheCores).
    ClusterProfile own_cores = p;
    own_cores.hosts[0].cores = 8;
    EXPECT_NEAR(estimate_job(job, &own_cores).time.tp_comm, 80e-3, 1e-12);
    EXPECT_NEAR(e.time.tp_comm, 80e-3, 1e-12);
}

// Without sequence parallelism each TP region ends in one all-reduce and starts without a
// gather: 2 per layer each way; the embedding's reduction forward only; the output's two
// cross-entropy all-reduces forward, its all-reduce backward.
TEST(EngineProfileTime, CountsAllReducesWithoutSequenceParallelism) {
    const JobSpec job = load_asset("tiny-gpt-8rank.toml", {"parallel.sequence_parallel=false"});
    const ClusterProfile p = flat_profile("tp", 2, 1e-3);
    const Estimate e = estimate_job(job, &p);
    EXPECT_NEAR(e.stages[0].tp_s, (2 * 2 + 1 + 2 * 2) * 1e-3, 1e-12);
    EXPECT_NEAR(e.stages[1].tp_s, (2 * 2 + 2 + 2 * 2 + 1) * 1e-3, 1e-12);
}

// Twice the GEMM time in every sample: twice the compute (nothing else costs anything).
TEST(EngineProfileTime, ComputeFollowsTheMeasuredGemms) {
    const JobSpec job = load_asset("tiny-gpt-8rank.toml", {"cluster.gpus_per_node=1", "parallel.tp=1", "parallel.pp=1",
                                                           "parallel.zero=0", "parallel.sequence_parallel=false"});
    auto profile_at = [&](double tflops) {
        ClusterProfile p = flat_profile("world", 8, 0);
        const double R = 2 * 64, h = 64, F = 256;
        for (auto [name, M, N, K] : {std::tuple{"mlp_up.fwd", R, F, h}, {"mlp_down.fwd", R, h, F}}) {
            ProfileSample g;
            g.kind = "gemm", g.name = name, g.dtype = "f32", g.shape = {(int)M, (int)N, (int)K}, g.flops = 2 * M * N * K;
            g.median_s = g.flops / (tflops * 1e12), g.repeats = 5;
            p.samples.push_back(g);
        }
        return p;
    };
    const ClusterProfile fast = profile_at(0.1), slow = profile_at(0.05);
    const Estimate a = estimate_job(job, &fast), b = estimate_job(job, &slow);
    ASSERT_GT(a.time.compute, 0.0);
    EXPECT_NEAR(b.time.compute, 2 * a.time.compute, 1e-9 * a.time.compute);
    // The MLP up projection forward, exactly as measured: 2·R·F·h FLOPs at 0.1 TFLOP/s per
    // call, 4 layers, 8 micro-batches, among the other GEMMs at the interpolated rate.
    EXPECT_GT(a.time.compute, 8 * 4 * (2.0 * 128 * 256 * 64) / 0.1e12);
}

// A collective's calls are heavy-tailed on shared cores: the model takes their mean there
// (8 ranks on 2 cores), the median where each rank has a core (a slow repeat is noise).
TEST(EngineProfileTime, TakesTheMeanCallOnSharedCoresElseTheMedian) {
    const JobSpec job = load_asset("tiny-gpt-8rank.toml");
    ClusterProfile p = flat_profile("tp", 2, 1e-3);
    for (ProfileSample& s : p.samples) s.mean_s = 3e-3;
    EXPECT_NEAR(estimate_job(job, &p).stages[1].tp_s, 20 * 3e-3, 1e-12);
    p.hosts[0].cores = 8;
    EXPECT_NEAR(estimate_job(job, &p).stages[1].tp_s, 20 * 1e-3, 1e-12);
}

// Probed between compute bursts, a call costs what it cost there plus the bytes' growth
// along the back-to-back curve from that size.
TEST(EngineProfileTime, InStepSamplesAddTheWaitForPeers) {
    const JobSpec job = load_asset("tiny-gpt-8rank.toml");
    ClusterProfile p = flat_profile("tp", 2, 1e-3);
    const double act = 2 * 64 * 64 * 4;  // micro_batch · seq · hidden · fp32: the TP message
    for (const char* op : {"all_gather", "reduce_scatter", "all_reduce"}) {
        ProfileSample s = comm(0, op, "tp", 2, act, 5e-3);
        s.between_s = 1e-4;
        p.samples.push_back(s);
    }
    const Estimate e = estimate_job(job, &p);
    EXPECT_NEAR(e.stages[0].tp_s, 18 * 5e-3, 1e-12);  // every stage-0 call is at or above `act`
}

// dpwait: the step's data-parallel collective waits for the group's slowest member. Two
// ranks' step-long bursts: rank 0 took 20 ms of its own, rank 1 22 ms, the group's slowest
// 25 ms on both: waits 5 and 3 ms, their median 4 ms, over a 21 ms burst. tiny-gpt-8rank as
// DP 2 (tp 1, pp 1) computes nothing in this profile but its DP and world collectives (1 ms
// each, flat): a step of no compute waits nothing. With 1 GFLOP/s GEMMs the step computes
// C seconds and waits 4 ms · √(C / 21 ms); a DP 4 layout of the same profile waits
// expected_slowest_of(4) / expected_slowest_of(2) times as long at the same step; a
// gradient reduction the profile timed inside real steps (the step probe, --from-run)
// holds its wait already and gets none added.
TEST(EngineProfileTime, DataParallelCallWaitsForTheSlowestMembersStep) {
    JobSpec job = load_asset("tiny-gpt-8rank.toml");
    job.cluster.gpus_per_node = 2, job.parallel.tp = 1, job.parallel.pp = 1, job.parallel.dp = 2;
    job.parallel.sequence_parallel = false;
    ClusterProfile p = flat_profile("dp", 2, 1e-3);
    p.hosts[0].cores = 8;  // a core per rank: the step's compute is the blocks' sum
    for (double bytes : {16.0, 1e9}) p.samples.push_back(comm(0, "all_reduce", "world", 2, bytes, 1e-3));
    auto burst = [&](int rank, const char* name, double seconds) {
        ProfileSample s;
        s.host = 0, s.rank = rank, s.kind = "layer", s.name = name, s.dtype = "f32", s.shape = {2, 64, 64, 4, 4, 256, 1, 1, 1};
        s.group = "dp", s.group_size = 2, s.micro_batches = 4, s.median_s = s.mean_s = seconds, s.repeats = 8;
        p.samples.push_back(s);
    };
    const Estimate none = estimate_job(job, &p);
    burst(0, "step.compute", 20e-3), burst(0, "step.compute.dp_max", 25e-3);
    burst(1, "step.compute", 22e-3), burst(1, "step.compute.dp_max", 25e-3);
    const std::vector<std::string> figures = profile_figures(p);  // what `ptd estimate --profile` lists
    EXPECT_NE(std::find(figures.begin(), figures.end(), "a step's wait for the slowest of dp×2: 4 ms after a 21 ms burst of its micro-batches"),
              figures.end());
    EXPECT_NEAR(estimate_job(job, &p).time.dp_comm, none.time.dp_comm, 1e-12);  // no compute: no wait
    add_gemms_at_one_gflops(p);
    ClusterProfile q = without_bursts(p);
    const Estimate without = estimate_job(job, &q);
    const Estimate e = estimate_job(job, &p);
    const double C = e.time.compute;  // one stage: the step's compute
    ASSERT_GT(C, 0);
    EXPECT_NEAR(e.time.dp_comm - without.time.dp_comm, 4e-3 * std::sqrt(C / 21e-3), 1e-9);

    JobSpec dp4 = job;
    dp4.cluster.gpus_per_node = 4, dp4.parallel.dp = 4, dp4.training.global_batch = 32;  // the same step per rank
    ClusterProfile p4 = p, q4 = without_bursts(p);
    const double w4 = estimate_job(dp4, &p4).time.dp_comm - estimate_job(dp4, &q4).time.dp_comm;
    EXPECT_NEAR(w4 / (e.time.dp_comm - without.time.dp_comm), expected_slowest_of(4) / expected_slowest_of(2), 1e-6);

    // The gradient reduction (ZeRO-1: a reduce-scatter of the stage's f32 gradients) timed
    // inside real steps.
    const double grads = e.stages[0].params_count * 4.0;
    ProfileSample in_step = comm(0, "reduce_scatter", "dp", 2, grads, 1e-3);
    in_step.between_s = 1e-3;
    ClusterProfile timed = p, timed_without = without_bursts(p);
    timed.samples.push_back(in_step), timed_without.samples.push_back(in_step);
    EXPECT_NEAR(estimate_job(job, &timed).time.dp_comm, estimate_job(job, &timed_without).time.dp_comm, 1e-12);
}

// The interval: every op at its ranks' 10th and 90th percentile. Two ranks 1 ms and 3 ms:
// quantiles 1.2 and 2.8 ms around the median 2 ms; every term of this step is a TP call, so
// the step scales with them: 0.6 and 1.4 times the 2 ms step, twice the 1 ms profile's —
// the probes' band e ∈ [1/1.4 − 1, 1/0.6 − 1]. On CPU hosts the closed loop's band (the
// model's own error) is added to it in quadrature; a GPU host's profile keeps the probes'.
TEST(EngineProfileTime, IntervalFromTheRanksSpreadAndTheModelsOwnError) {
    const JobSpec job = load_asset("tiny-gpt-8rank.toml");
    const ClusterProfile one = flat_profile("tp", 2, 1e-3);
    ClusterProfile p = one;
    for (ProfileSample s : std::vector<ProfileSample>(p.samples)) s.rank = 1, s.median_s = 3e-3, p.samples.push_back(s);
    const Estimate e = estimate_job(job, &p);
    ASSERT_TRUE(e.speed.known);
    EXPECT_EQ(e.speed.band.source, IntervalSource::cluster_profile);
    EXPECT_NEAR(e.step_s, 2 * estimate_job(job, &one).step_s, 1e-9);
    const ErrorBand model = closed_loop_residuals().band();
    ASSERT_GT(model.runs, 0);
    const double lo = -std::hypot(1 / 1.4 - 1, model.error_lo), hi = std::hypot(1 / 0.6 - 1, model.error_hi);
    EXPECT_NEAR(e.speed.step_s.lo, e.step_s / (1 + hi), 1e-9);
    EXPECT_NEAR(e.speed.step_s.hi, e.step_s / (1 + lo), 1e-9);
    EXPECT_NE(e.speed.band.runs_of.find("the model's own error"), std::string::npos) << e.speed.band.runs_of;
    ClusterProfile gpu_host = p;
    gpu_host.hosts[0].gpu = "H100";
    const Estimate g = estimate_job(job, &gpu_host);
    EXPECT_NEAR(g.speed.step_s.lo, 0.6 * g.step_s, 1e-9);
    EXPECT_NEAR(g.speed.step_s.hi, 1.4 * g.step_s, 1e-9);
    EXPECT_NE(g.speed.band.runs_of.find("not measured"), std::string::npos) << g.speed.band.runs_of;
}

// Shared cores: 8 ranks on 2 cores (the profile's host). The probes timed every rank computing at
// once, but in the pipeline's fill and drain some ranks wait and those computing have the
// cores: the step is shorter than the measured blocks placed end to end would make it, never
// shorter than the host's work over its cores (each op's probed time × 8 ranks / 4 ranks per
// core, over 2 cores), and the predicted timeline ends where the step does. With a core per
// rank (the same op times, cores = 8) the blocks are placed as measured.
TEST(EngineProfileTime, SharedCoresFreeTheCoresOfWaitingStages) {
    const JobSpec job = load_asset("tiny-gpt-8rank.toml");
    ClusterProfile p = flat_profile("tp", 2, 1e-4);
    add_gemms_at_one_gflops(p);  // compute is most of the step
    ClusterProfile own_cores = p;
    own_cores.hosts[0].cores = 8;
    const Estimate shared = estimate_job(job, &p), apart = estimate_job(job, &own_cores);
    ASSERT_GT(shared.time.compute, 0.0);
    EXPECT_EQ(shared.share_cores, 2.0);
    EXPECT_EQ(shared.share_measured, 4.0);
    EXPECT_EQ(shared.share_ranks_per_stage, 4.0);  // tp 2 · dp 2
    EXPECT_EQ(apart.share_cores, 0.0);
    EXPECT_LT(shared.pipeline_s, apart.pipeline_s * 0.95);
    // The work bound: per micro-batch each stage computes its blocks' compute; 4 ranks run
    // each stage; the probed times are 4× a lone rank's; 2 cores.
    double work = 0;
    for (const StageEstimate& st : shared.stages)
        for (const ChunkTime& ct : st.chunks) work += 4 * shared.micro_batches * (ct.fwd.compute + ct.bwd.compute) / 4 / 2;
    EXPECT_GE(shared.pipeline_s, work * (1 - 1e-12));
    EXPECT_NEAR(shared.time.total(), shared.step_s, 1e-9 * shared.step_s);
    EXPECT_NEAR(predicted_timeline(job, &p).makespan_s, shared.step_s, 1e-9 * shared.step_s);
    EXPECT_NEAR(predicted_timeline(job, &own_cores).makespan_s, apart.step_s, 1e-9 * apart.step_s);
    // The cores the ranks may run on, not the machine's: the same 8 ranks in one 2-core cpuset
    // of a 64-core machine (usable_cores, the union of their masks) share as on 2 cores; a
    // profile from before usable_cores was recorded has only the machine's count.
    ClusterProfile cpuset = p;
    cpuset.hosts[0].cores = 64, cpuset.hosts[0].usable_cores = 2;
    const Estimate in_cpuset = estimate_job(job, &cpuset);
    EXPECT_EQ(in_cpuset.share_cores, 2.0);
    EXPECT_EQ(in_cpuset.step_s, shared.step_s);
    cpuset.hosts[0].usable_cores = 0;
    EXPECT_EQ(estimate_job(job, &cpuset).share_cores, 0.0);
}

// A stage's TP calls shrink while the other stage waits only where the stage's ranks then fit
// the cores. tiny-gpt-8rank runs each stage on 4 ranks (tp 2 · dp 2) over 2 cores: a woken
// member still queues behind runnable ranks, so its TP calls keep their probed time (80 calls
// of 1 ms on stage 1 a step, as CountsTheEnginesTensorParallelCalls counts them) and the fill
// and drain are a bubble. With dp 1 (2 ranks a stage on the 2 cores) the calls shrink and the
// waiting stage's time is no bubble — where the probed ranks also computed: ranks that did
// nothing but call left their cores idle while waiting (LoneBlocksRunAtTheShareTheProbedRanksHad),
// and their calls, contended by no one, keep their time.
TEST(EngineProfileTime, StageCollectivesShrinkOnlyWhereTheStageFitsTheCores) {
    ClusterProfile p = flat_profile("tp", 2, 1e-3);
    const Estimate crowded = estimate_job(load_asset("tiny-gpt-8rank.toml"), &p);
    ASSERT_EQ(crowded.share_cores, 2.0);
    ASSERT_EQ(crowded.share_ranks_per_stage, 4.0);
    EXPECT_FALSE(stage_collectives_share_cores(crowded.share_cores, crowded.share_ranks_per_stage));
    EXPECT_NEAR(crowded.time.tp_comm, 80e-3, 1e-9);
    EXPECT_GT(crowded.time.bubble, 0.0);
    EXPECT_NEAR(predicted_timeline(load_asset("tiny-gpt-8rank.toml"), &p).makespan_s, crowded.step_s,
                1e-9 * crowded.step_s);

    const JobSpec one_replica = load_asset("tiny-gpt-8rank.toml", {"cluster.gpus_per_node=4"});
    const Estimate idle = estimate_job(one_replica, &p);
    ASSERT_EQ(idle.share_ranks_per_stage, 2.0);
    EXPECT_TRUE(stage_collectives_share_cores(idle.share_cores, idle.share_ranks_per_stage));
    EXPECT_NEAR(idle.time.tp_comm, 160e-3, 1e-9);  // one replica: 8 micro-batches of stage 1's 20 calls
    add_gemms_at_one_gflops(p);
    const Estimate fits = estimate_job(one_replica, &p);
    EXPECT_LT(fits.time.tp_comm, 160e-3 * (1 - 1e-3));
    EXPECT_EQ(fits.time.bubble, 0.0);
    EXPECT_NEAR(predicted_timeline(one_replica, &p).makespan_s, fits.step_s, 1e-9 * fits.step_s);
}

// The probes timed every rank at once, but a rank blocked in its TP calls left its core to the
// others: tiny-gpt-8rank's ranks (4 a core) computed busy b of their probed time, shared the
// core with e = 1 + 3b ranks on average, and a compute part is its probed time over e in
// lone-rank seconds (schedule.h CoreSharing::busy). The first forward runs alone — 4 ranks of
// one stage, each counting e / 4 of a rank against the 2 cores — and takes that part at
// min(1, 2 / e) of a lone rank's speed, then its TP calls at their probed time. With TP calls
// of 10 ms the ranks computed under a third of the time (e < 2): the block is longer than
// taking each rank as computing all the time (e = 4, the model before) makes it, half its
// compute part plus its calls.
TEST(EngineProfileTime, LoneBlocksRunAtTheShareTheProbedRanksHad) {
    const JobSpec job = load_asset("tiny-gpt-8rank.toml");
    ClusterProfile p = flat_profile("tp", 2, 1e-2);
    add_gemms_at_one_gflops(p);
    const Estimate e = estimate_job(job, &p);
    ProbedBusy busy;
    for (const StageEstimate& st : e.stages)
        for (const ChunkTime& ct : st.chunks) busy.add(ct.fwd), busy.add(ct.bwd);
    const double b = busy.fraction(), share = 1 + 3 * b;
    ASSERT_GT(b, 0.1);
    ASSERT_LT(b, 0.3);
    const BlockTime& f = e.stages[0].chunks[0].fwd;
    const double compute = core_shared_part(f, false);
    ASSERT_GT(compute, 0.0);
    const Timeline t = predicted_timeline(job, &p);
    const TimelineBlock* first = nullptr;
    for (const TimelineBlock& blk : t.blocks)
        if (blk.row == 0 && blk.kind == BlockKind::forward && blk.micro_batch == 0) first = &blk;
    ASSERT_NE(first, nullptr);
    EXPECT_NEAR(first->start_s, 0.0, 1e-12);
    EXPECT_NEAR(first->end_s - first->start_s, compute / share / std::min(1.0, 2 / share) + (f.total() - compute),
                1e-9 * f.total());
    EXPECT_GT(first->end_s - first->start_s, compute / 2 + (f.total() - compute) + 1e-6);
}

// The engine's own passes, timed in the step's order at the rank's shape (the `layer` probe),
// replace the sum of the isolated ops: tiny-gpt on one rank, 4 layers, 8 micro-batches of
// 2 × 64 rows, a layer's forward 1 ms and backward 2 ms: 8 · 4 · 3 ms of compute. Passes
// timed at another shape (another micro-batch) are not this job's: the ops' sum stands.
ProfileSample pass_sample(const std::string& name, std::vector<int> shape, double seconds) {
    ProfileSample s;
    s.kind = "layer", s.name = name, s.dtype = "f32", s.shape = std::move(shape), s.median_s = seconds, s.repeats = 40;
    return s;
}

TEST(EngineProfileTime, TheEnginesOwnPassesReplaceTheSumOfItsOps) {
    const JobSpec job = load_asset("tiny-gpt-8rank.toml", {"cluster.gpus_per_node=1", "parallel.tp=1", "parallel.pp=1",
                                                           "parallel.zero=0", "parallel.sequence_parallel=false"});
    const std::vector<int> shape = {2, 64, 64, 4, 4, 256, 1, 1, 1};  // B, T, h, heads, kv, ffn, tp, sp + 1, rc + 1
    ClusterProfile p = flat_profile("world", 8, 0);
    p.hosts[0].cores = 8;
    ClusterProfile other = p;
    p.samples.push_back(pass_sample("layer.fwd", shape, 1e-3));
    p.samples.push_back(pass_sample("layer.bwd", shape, 2e-3));
    const Estimate e = estimate_job(job, &p);
    EXPECT_NEAR(e.time.compute, 8 * 4 * 3e-3, 1e-12);
    // The embedding's and the head's passes add theirs (their ops cost nothing here).
    p.samples.push_back(pass_sample("embedding.fwd", shape, 1e-4));
    p.samples.push_back(pass_sample("embedding.bwd", shape, 2e-4));
    p.samples.push_back(pass_sample("head.fwd_bwd", shape, 5e-4));
    EXPECT_NEAR(estimate_job(job, &p).time.compute, 8 * (4 * 3e-3 + 8e-4), 1e-12);
    std::vector<int> mb4 = shape;
    mb4[0] = 4;
    other.samples.push_back(pass_sample("layer.fwd", mb4, 1e-3));
    other.samples.push_back(pass_sample("layer.bwd", mb4, 2e-3));
    EXPECT_EQ(estimate_job(job, &other).time.compute, 0.0);
}

// With TP, where every rank has a core, the passes' own TP time (every peer in the same pass)
// replaces the counted calls at the probed curve; on shared cores the counted calls stand (their
// in-step samples come from the step probe's run).
TEST(EngineProfileTime, ThePassesTensorParallelTimeWhereEveryRankHasACore) {
    const JobSpec job = load_asset("tiny-gpt-8rank.toml");
    const std::vector<int> shape = {2, 64, 64, 2, 2, 128, 2, 2, 1};
    ClusterProfile p = flat_profile("tp", 2, 1e-3);
    for (const char* name : {"layer.fwd", "layer.bwd"}) p.samples.push_back(pass_sample(name, shape, 1e-9));
    p.samples.push_back(pass_sample("layer.fwd.tp", shape, 1e-2));
    p.samples.push_back(pass_sample("layer.bwd.tp", shape, 2e-2));
    EXPECT_NEAR(estimate_job(job, &p).stages[0].tp_s, 18e-3, 1e-12) << "8 ranks on 2 cores: the counted calls";
    p.hosts[0].cores = 8;
    // Stage 0: 2 layers at 10 + 20 ms, and the embedding's two calls at the curve's 1 ms.
    EXPECT_NEAR(estimate_job(job, &p).stages[0].tp_s, 2 * 3e-2 + 2e-3, 1e-12);
    // The embedding's and the head's passes with their own TP time replace their calls too.
    for (const char* name : {"embedding.fwd", "embedding.bwd", "head.fwd_bwd"}) p.samples.push_back(pass_sample(name, shape, 1e-9));
    p.samples.push_back(pass_sample("embedding.fwd.tp", shape, 3e-4));
    p.samples.push_back(pass_sample("embedding.bwd.tp", shape, 4e-4));
    p.samples.push_back(pass_sample("head.fwd_bwd.tp", shape, 5e-3));
    const Estimate e = estimate_job(job, &p);
    EXPECT_NEAR(e.stages[0].tp_s, 2 * 3e-2 + 7e-4, 1e-12);
    EXPECT_NEAR(e.stages[1].tp_s, 2 * 3e-2 + 5e-3, 1e-12);
}

// A job another framework runs keeps the preset's model, and says why.
TEST(EngineProfileTime, OtherFrameworksKeepThePreset) {
    const JobSpec engine = load_asset("tiny-gpt-8rank.toml");
    const JobSpec megatron = load_asset("tiny-gpt-8rank.toml", {"estimate.activation_profile=megatron"});
    const ClusterProfile p = flat_profile("tp", 2, 1.0);
    const Estimate with = estimate_job(megatron, &p), without = estimate_job(megatron);
    EXPECT_FALSE(with.time_from_profile);
    EXPECT_NE(with.time_source_why.find("ptd-engine"), std::string::npos);
    EXPECT_EQ(with.step_s, without.step_s);
    EXPECT_TRUE(profile_unused_reason(engine).empty());
}

// ---- the device model (issue 30 point 8): ptd-engine on a GPU preset without a profile ----

// GPT-2 124M/350M at T = 1024 on one H100, bf16, one micro-batch of `mb` per step.
JobSpec gpt2_on_h100(const std::string& preset, int mb, bool flash) {
    return job_from_text("[model]\npreset = \"" + preset + "\"\nseq_len = 1024\n[cluster]\nnodes = 1\ngpus_per_node = 1\n"
                         "gpu = \"h100-sxm\"\n[training]\nmicro_batch = " + std::to_string(mb) + "\nglobal_batch = " +
                         std::to_string(mb) + "\nprecision = \"bf16\"\nflash_attention = " + (flash ? "true" : "false") +
                         "\n[estimate]\nactivation_profile = \"ptd-engine\"\n");
}

// The two attention paths differ only in the attention core, so the step's difference is
// that core's time on every layer, by hand from the device model's formulas
// (engine_time.cpp): flash at flash_eff on its executed FLOPs (forward half the nominal
// 4·B·H·T²·D, backward 3.5× that, plus Δ's bytes), the materialised path six T×T×D GEMMs per
// (b, h) at the GEMM rate and five [B·H, T, T] softmax passes at HBM bandwidth.
TEST(EngineDeviceTime, AttentionIsTheEnginesFlashOrMaterialisedKernels) {
    const Estimate flash = estimate_job(gpt2_on_h100("gpt2-124m", 8, true));
    const Estimate probs = estimate_job(gpt2_on_h100("gpt2-124m", 8, false));
    EXPECT_FALSE(flash.time_from_profile);
    bool noted = false;
    for (const std::string& n : flash.notes) noted |= n.find("time model ptd-engine on h100-sxm") != std::string::npos;
    EXPECT_TRUE(noted) << "the estimate does not say it timed the engine's kernels";
    const GpuSpec& gpu = *presets().find_gpu("h100-sxm");
    const KernelEfficiency k = time_model_constants().kernel(GpuGeneration::hopper);
    const double B = 8, T = 1024, H = 12, D = 64, layers = 12, e = 2;
    const double peak = gpu.bf16_tflops * 1e12, hbm = gpu.hbm_gbps * 1e9 * time_model_constants().hbm_eff;
    const double fwd = 4 * B * H * T * T * D;
    const double flash_layer = 0.5 * fwd / (peak * k.flash_eff) + 0.5 * 3.5 * fwd / (peak * k.flash_eff) +
                               2 * B * T * H * D * e / hbm;
    const double product = 2 * T * T * D / (peak * gemm_efficiency(T, T, D, k.gemm_eff_max)) * B * H;
    const double probs_layer = 6 * product + 5 * B * H * T * T * e / hbm;
    EXPECT_NEAR(probs.step_s - flash.step_s, layers * (probs_layer - flash_layer), 1e-9 * probs.step_s);
    EXPECT_GT(probs.step_s, flash.step_s);
}

// GPT-2 350M at T = 1024 on one H100 at the micro-batch bench_engine --predict picks (64, the
// largest power of two that fits 80 GiB with flash attention): flash attention lifts the
// predicted MFU by more than ten points over the materialised scores, and the figure stays
// below the GEMM ceiling (the model adds the attention and memory-bound work). The issue's
// target for it (≥ 45%) is a bench figure: bench_engine --backend cuda --predict prints it
// (48.5% since the bias and residual ride in the GEMMs and the residual gradient in the norm
// backward, issue 30 point 5; 45.4% before that, after the 2026-11-29 refit of hopper's
// gemm_eff_max to 0.66; this job's figure, 47.9% (44.8% before), counts the same step with
// estimate_job's own FLOPs convention).
TEST(EngineDeviceTime, Gpt2_350mOnOneH100FlashLiftsTheMfu) {
    const Estimate flash = estimate_job(gpt2_on_h100("gpt2-350m", 64, true));
    const Estimate probs = estimate_job(gpt2_on_h100("gpt2-350m", 64, false));
    EXPECT_GT(flash.mfu, probs.mfu + 0.10);
    EXPECT_GT(flash.mfu, 0.40);
    EXPECT_LT(flash.mfu, time_model_constants().kernel(GpuGeneration::hopper).gemm_eff_max);
}

}  // namespace
