// calibrate_from_run.cpp — `ptd calibrate --from-run RUN_DIR`: refine a cluster profile with
// what a real training run measured (issue 27 point 5).
//
// The probes time each collective back to back and between compute bursts; a training step
// makes its tensor-parallel collectives between the engine's own kernels, with its own
// peers' skew, and on shared cores that costs more than any probe shows (docs/estimators.md,
// "Cluster profile"). The run's measured timeline (RUN_DIR/timeline/rank-*.tsv) holds every
// one of those calls as a `tp` block. Per rank, the blocks of every recorded step but the
// first (warm-up) become the profile's in-step samples of the TP group: a micro-batch's
// blocks at the job's activation message (micro_batch · seq_len · hidden · activation
// bytes), the gradient phase's (micro-batch −1, with SP: the replicated tensors' gradient
// all-reduces) at hidden f32 words; each the median over steps of each step's mean call
// (mean_s), the median and spread of the calls, and the compute between consecutive calls.
// A step's `dp` blocks become once-a-step samples (the median over steps): the first, the
// gradient reduction, the DP group's all-reduce or ZeRO-1 reduce-scatter at the stage's f32
// gradients; the second, the world all-reduce of loss and Σg² (16 bytes); the third (ZeRO-1)
// the DP group's all-gather of the stage's weights. They replace the probes' in-step samples
// of the same op and group; everything else the profile measured stays. The run must have
// run on the hosts the profile measured, with the GPU and precision it names.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "cmd_calibrate.h"
#include "commands.h"
#include "ptd/common/file_read.h"
#include "ptd/common/sample_stats.h"
#include "ptd/model/estimate.h"
#include "ptd/run_dir.h"
#include "ptd/spec/cluster_profile.h"
#include "ptd/timeline/timeline.h"

namespace ptd {

namespace {

// One kind of TP call in a rank's recorded steps: every call's time, each step's calls, and
// the compute between consecutive calls of a step.
struct TpCalls {
    std::vector<double> calls, gaps;
    std::map<int, std::vector<double>> of_step;
    double prev_end = -1;
    int prev_step = -1;
    void add(const TimelineBlock& b) {
        calls.push_back(b.end_s - b.start_s);
        of_step[b.step].push_back(b.end_s - b.start_s);
        if (b.step == prev_step && prev_end >= 0 && b.start_s >= prev_end) gaps.push_back(b.start_s - prev_end);
        prev_end = b.end_s, prev_step = b.step;
    }
    // The mean call of a typical step: each step's mean, then the median over the steps. On
    // shared cores the steps are bimodal (tiny TP2·DP2, 4 ranks on 2 cores, idle machine: a TP
    // call's mean 0.29–0.31 ms in two steps, 0.89–3.3 ms in three, where the scheduler kept
    // the TP peers apart); a step's time is what is predicted and measured (the median step),
    // so one slow step must not set every call's cost.
    SampleStats typical_step() const {
        SampleStats c = sample_stats(calls);
        std::vector<double> step_means;
        for (const auto& [step, v] : of_step) step_means.push_back(sample_stats(v).mean_s);
        if (!step_means.empty()) c.mean_s = quantile(step_means, 0.5);
        return c;
    }
};

// A call made once a step (a `dp` block): its time each step, and the gap since the block
// before it in the step (none for the first).
struct OnceAStep {
    std::vector<double> times, gaps;
    void add(const TimelineBlock& b, const TimelineBlock* before) {
        times.push_back(b.end_s - b.start_s);
        if (before) gaps.push_back(std::max(0.0, b.start_s - before->end_s));
    }
    // One call a step: the typical step's is the median over the steps, as for TpCalls.
    SampleStats typical_step() const {
        SampleStats c = sample_stats(times);
        c.mean_s = c.median_s;
        return c;
    }
};

}  // namespace

int refine_profile_from_run(const CalibrateArgs& a, const PresetCatalog& presets, FILE* out, FILE* err) {
    const std::string& dir = a.from_run;
    const char* who = "ptd calibrate --from-run";
    auto manifest = read_manifest(dir);
    if (!manifest) {
        std::fprintf(err, "%s", manifest.error().str().c_str());
        return kExitConfig;
    }
    const std::string job_path = (std::filesystem::path(dir) / "job.toml").string();
    auto job = load_job_arg(job_path, presets, {});
    if (!job) {
        std::fprintf(err, "%s", job.error().str().c_str());
        return kExitConfig;
    }
    // The profile to refine: --profile FILE, else the run's job's cluster.profile.
    auto base = load_job_profile(*job, a.base_profile);
    if (!base) {
        std::fprintf(err, "%s", base.error().str().c_str());
        return kExitConfig;
    }
    if (!*base) {
        std::fprintf(err, "%s: error: %s: no profile to refine: the run's job names no cluster.profile; allowed: "
                          "--profile FILE (a profile ptd calibrate wrote for these hosts)\n", who, job_path.c_str());
        return kExitConfig;
    }
    ClusterProfile prof = std::move((*base)->profile);
    const std::string out_path = a.output.empty() ? (*base)->path : a.output;
    // Hosts: every host of the run must be one the profile measured (by the launcher's name).
    std::vector<int> host_in_profile(manifest->hosts.size(), -1);
    for (size_t h = 0; h < manifest->hosts.size(); ++h) {
        for (size_t k = 0; k < prof.hosts.size(); ++k)
            if (prof.hosts[k].name == manifest->hosts[h]) host_in_profile[h] = (int)k;
        if (host_in_profile[h] < 0) {
            std::fprintf(err, "%s: error: %s/manifest.json: host \"%s\" ran the job but the profile %s did not measure it; "
                              "allowed: a run on the profile's hosts (", who, dir.c_str(), manifest->hosts[h].c_str(),
                         (*base)->path.c_str());
            for (size_t k = 0; k < prof.hosts.size(); ++k) std::fprintf(err, "%s\"%s\"", k ? ", " : "", prof.hosts[k].name.c_str());
            std::fprintf(err, ")\n");
            return kExitConfig;
        }
    }
    const int t = job->parallel.tp;
    auto ranks = read_measured_timeline(dir);
    if (!ranks) {
        std::fprintf(err, "%s", ranks.error().str().c_str());
        return kExitConfig;
    }
    const double act_bytes = job->training.precision == Precision::fp32 ? 4.0 : 2.0;
    const double bytes = (double)job->training.micro_batch * job->model.seq_len * job->model.hidden * act_bytes;
    const bool sp = job->parallel.sequence_parallel;
    // The data-parallel group and each stage's parameters, as the time model counts them.
    const LayoutChoice layout = layout_choice_of(*job);
    const bool sharded = layout.zero >= 1 && layout.dp > 1;
    std::vector<double> stage_params;
    for (const StageEstimate& st : estimate_job(*job).stages) stage_params.push_back(st.params_count);
    if (stage_params.empty()) stage_params.push_back(0);
    const int ranks_per_node = std::max(1, job->cluster.gpus_per_node);
    const int dp_inner = layout.tp * layout.cp * layout.ep;  // ranks between two DP members (order tp-cp-ep-dp-pp)
    const int dp_nodes = std::max(1, layout.dp / std::max(1, std::min(layout.dp, ranks_per_node / std::max(1, dp_inner))));
    std::vector<ProfileSample> added;
    int steps_used = 0;
    for (const MeasuredRank& mr : *ranks) {
        int first = 1 << 30, last = -1;
        for (const TimelineBlock& b : mr.blocks) first = std::min(first, b.step), last = std::max(last, b.step);
        const int from = last > first ? first + 1 : first;  // the first recorded step warms up
        // A micro-batch's TP calls (activations) and the gradient phase's (micro-batch −1: the
        // SP-replicated tensors' gradient sums, `hidden` f32 words each) are two kinds of call.
        TpCalls act, grad;
        std::map<int, std::vector<const TimelineBlock*>> dp_of_step;
        for (const TimelineBlock& b : mr.blocks) {
            if (b.step < from) continue;
            if (b.kind == BlockKind::dp_comm) dp_of_step[b.step].push_back(&b);
            if (b.kind == BlockKind::tp_comm) (b.micro_batch >= 0 ? act : grad).add(b);
        }
        // A step's `dp` blocks (optimizer.cpp, trainer.cpp): the gradient reduction (the DP
        // all-reduce or ZeRO-1 reduce-scatter, the tied embedding's sum before it), the world
        // all-reduce of the loss and Σg² (16 bytes), and with ZeRO-1 the parameter all-gather.
        OnceAStep reduce, world, gather;
        for (auto& [step, blocks] : dp_of_step) {
            if (blocks.size() < 2) continue;
            reduce.add(*blocks[0], nullptr);
            world.add(*blocks[1], blocks[0]);
            if (blocks.size() >= 3) gather.add(*blocks[2], blocks[1]);
        }
        steps_used = std::max(steps_used, last - from + 1);
        const auto& rr = manifest->ranks;
        const auto it = std::find_if(rr.begin(), rr.end(), [&](const RunManifestRank& x) { return x.rank == mr.header.rank; });
        if (it == rr.end() || it->host < 0 || it->host >= (int)host_in_profile.size()) continue;
        // One in-step sample of this rank: `n` members over `nodes` hosts, a typical step's call.
        auto add_sample = [&](const char* op, const char* group, int n, int nodes, double call_bytes, const SampleStats& c,
                              const std::vector<double>& gaps) {
            ProfileSample s;
            s.host = host_in_profile[(size_t)it->host], s.rank = mr.header.rank;
            s.kind = "comm", s.name = op, s.group = group, s.group_size = n;
            s.nodes = nodes, s.members_per_node = std::max(1, n / nodes);
            s.bytes = call_bytes;
            s.median_s = c.median_s, s.mean_s = c.mean_s, s.spread = c.spread, s.repeats = c.repeats;
            s.between_s = std::max(1e-9, quantile(gaps, 0.5));
            added.push_back(s);
        };
        auto tp_sample = [&](const TpCalls& calls, const char* op, double call_bytes) {
            if (t > 1 && !calls.calls.empty()) add_sample(op, "tp", t, 1, call_bytes, calls.typical_step(), calls.gaps);
        };
        auto once_sample = [&](const OnceAStep& calls, const char* op, const char* group, int n, int nodes, double call_bytes) {
            if (n > 1 && !calls.times.empty()) add_sample(op, group, n, nodes, call_bytes, calls.typical_step(), calls.gaps);
        };
        if (sp) tp_sample(act, "all_gather", bytes), tp_sample(act, "reduce_scatter", bytes);
        else tp_sample(act, "all_reduce", bytes);
        tp_sample(grad, "all_reduce", (double)job->model.hidden * 4);
        once_sample(world, "all_reduce", "world", manifest->world_size, std::max(1, (int)manifest->hosts.size()), 16);
        // The data-parallel calls at this stage's flat buffer: f32 gradients, 16-bit (or f32) weights.
        const double flat = stage_params[(size_t)std::clamp(mr.header.stage, 0, (int)stage_params.size() - 1)];
        once_sample(reduce, sharded ? "reduce_scatter" : "all_reduce", "dp", layout.dp, dp_nodes, flat * 4);
        if (sharded) once_sample(gather, "all_gather", "dp", layout.dp, dp_nodes, flat * act_bytes);
    }
    if (added.empty()) {
        std::fprintf(err, "%s: error: %s/timeline: no tensor-parallel, data-parallel or world collective recorded; allowed: a run of more "
                          "than one rank with its timeline (ptd-engine records the first steps unless --timeline-steps 0)\n",
                     who, dir.c_str());
        return kExitConfig;
    }
    // The run's in-step samples replace the probes' of the same op and group.
    std::erase_if(prof.samples, [&](const ProfileSample& s) {
        return s.kind == "comm" && s.between_s > 0 && std::any_of(added.begin(), added.end(), [&](const ProfileSample& a) {
                   return a.name == s.name && a.group == s.group;
               });
    });
    prof.samples.insert(prof.samples.end(), added.begin(), added.end());
    prof.refined_from.push_back(manifest->run_id);
    fit_profile(prof);
    if (auto w = write_profile_file(out_path, profile_toml(prof)); !w) {
        std::fprintf(err, "%s", w.error().str().c_str());
        return kExitRuntime;
    }
    auto median_mean = [&](const char* group, double of_bytes) {
        std::vector<double> means;
        for (const ProfileSample& s : added)
            if (s.group == group && s.bytes == of_bytes) means.push_back(s.mean_s);
        return quantile(means, 0.5);
    };
    const double grad_bytes = (double)job->model.hidden * 4;
    std::fprintf(out, "%s: %zu rank(s), %d step(s):", dir.c_str(), ranks->size(), steps_used);
    const char* sep = "";
    if (const double m = median_mean("tp", bytes); m > 0)
        std::fprintf(out, " a TP collective of %.0f bytes costs %.3g ms in the step", bytes, m * 1e3), sep = ",";
    if (const double m = median_mean("tp", grad_bytes); m > 0 && grad_bytes != bytes)
        std::fprintf(out, "%s a gradient all-reduce of %.0f bytes %.3g ms", sep, grad_bytes, m * 1e3), sep = ",";
    if (const double m = median_mean("world", 16); m > 0)
        std::fprintf(out, "%s the world all-reduce of the loss %.3g ms", sep, m * 1e3), sep = ",";
    std::vector<double> dp_means;
    for (const ProfileSample& s : added)
        if (s.group == "dp" && s.name != "all_gather") dp_means.push_back(s.mean_s);
    if (!dp_means.empty()) std::fprintf(out, "%s the DP gradient reduction %.3g ms", sep, quantile(dp_means, 0.5) * 1e3);
    std::fprintf(out, " (median over ranks of each rank's mean); they replace the probes' in-step samples\n");
    std::fprintf(out, "wrote %s\n", out_path.c_str());
    return 0;
}

int step_probe(const CalibrateArgs& a, const std::string& profile_path, const std::string& calibration_run_dir,
               const PresetCatalog& presets, FILE* out, FILE* err) {
    auto prof = load_profile(profile_path);
    if (!prof) {
        std::fprintf(err, "%s", prof.error().str().c_str());
        return kExitRuntime;
    }
    const ProfileHost* shared = nullptr;
    for (const ProfileHost& h : prof->hosts)
        if (h.shares_cores()) shared = &h;
    if (!shared) {
        std::fprintf(out, "step probe: not needed (every host has a core per rank)\n");
        return kExitOk;
    }
    const auto run_dir = std::filesystem::path(calibration_run_dir);
    // Steps 2.. of the run become the in-step samples (the first warms up). Two steps were too
    // few: on 2 shared cores one scheduler stall in one of them moved a tiny TP job's
    // predicted step 4× between two calibrations (docs/estimators.md, runs G and H).
    constexpr int kSteps = 6;
    LaunchArgs la = a.launch;
    la.steps = kSteps;
    if (std::none_of(la.engine_args.begin(), la.engine_args.end(), [](const std::string& x) { return x.starts_with("--timeline"); }))
        la.engine_args.insert(la.engine_args.end(), {"--timeline-steps", std::to_string(kSteps)});
    la.run_root = run_dir.parent_path().string();
    la.run_id = run_dir.filename().string() + "-steps";
    la.preflight = false;
    std::fprintf(out, "step probe: host %s runs %d ranks on %d cores, where a step's collectives wait for the scheduler as "
                      "no probe shows; training %d steps (logs in %s)\n",
                 shared->name.c_str(), shared->ranks, shared->cores_for_ranks(), kSteps, (run_dir.parent_path() / la.run_id).string().c_str());
    FILE* quiet = std::fopen("/dev/null", "w");
    const int rc = cmd_launch(la, presets, quiet ? quiet : out, err);
    if (quiet) std::fclose(quiet);
    if (rc != kExitOk) {
        std::fprintf(err, "step probe: the %d training steps failed (exit %d); the profile keeps the probes' figures: %s\n", kSteps,
                     rc, profile_path.c_str());
        return rc;
    }
    CalibrateArgs r;
    r.from_run = (run_dir.parent_path() / la.run_id).string();
    r.base_profile = profile_path;
    r.output = profile_path;
    return refine_profile_from_run(r, presets, out, err);
}

}  // namespace ptd
