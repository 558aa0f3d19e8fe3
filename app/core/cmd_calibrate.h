// cmd_calibrate.h — `ptd calibrate JOB`: start the job's ranks as probes (`ptd-engine
// --probe`) through the same launcher as `ptd launch` (local, SSH, Slurm), show a line per
// probe and host, and write the cluster profile (ptd/spec/cluster_profile.h); with
// --check, the preflight instead: flag hosts slower than the rest and map them onto the
// job's layout.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "cmd_launch.h"
#include "ptd/common/outliers.h"
#include "ptd/spec/presets.h"

namespace ptd {

struct CalibrateArgs {
    LaunchArgs launch;            // the job, --hosts, --slurm, --upload, ... as `ptd launch` takes them
    std::string output;           // -o PROFILE ("" = RUN_DIR/profile.toml)
    bool quick = false;           // fewer repeats and message sizes
    bool check = false;           // the preflight: flag slow hosts, write no profile
    double stall_s = 120;         // a rank silent this long while probing ends the calibration
    std::string collect;          // --collect RUN_DIR: the profile from a finished run's rank logs (Slurm)
    std::string from_run;         // --from-run RUN_DIR: refine a profile with a training run's measured timeline
    std::string base_profile;     // --profile FILE: the profile --from-run refines (else the run's job's cluster.profile)
    bool no_step_probe = false;   // --no-step-probe: never end with the training step probe
};

// The step probe (calibrate_from_run.cpp): where a host of the profile at `profile_path`
// runs more ranks than the cores they may use (ProfileHost::shares_cores), the probes cannot
// show what a step's collectives wait for the scheduler; the job then trains 6 steps
// (RUN_DIR + "-steps", through the same launcher) and --from-run refines the profile with
// steps 2–6. Elsewhere it says it is not needed.
int step_probe(const CalibrateArgs& a, const std::string& profile_path, const std::string& calibration_run_dir,
               const PresetCatalog& presets, FILE* out, FILE* err);

// Writes a profile through a temporary file renamed over `path` (never half a file).
Result<void> write_profile_file(const std::string& path, const std::string& text);

// --from-run RUN_DIR (calibrate_from_run.cpp): the run's in-step TP collective costs replace
// the probes' in the profile (-o OUT, else the profile in place). Exit 0, or 2 with a
// located message (no profile, hosts the profile did not measure, no TP or world collective in the timeline).
int refine_profile_from_run(const CalibrateArgs& a, const PresetCatalog& presets, FILE* out, FILE* err);


// Outlier rules of the preflight (docs/launcher.md, "Preflight"), both ptd::flag_slow
// (ptd/common/outliers.h: ≥ 3 MADs and ≥ 15 % above the median; the fastest as the
// reference with fewer than 3 hosts):
// - GEMMs: each host has a ratio: for every sustained GEMM probe, the median over the
//   host's ranks of its time divided by the median over hosts; the host's ratio is the
//   median of those over the probes (1 = typical).
// - Links: each host's first rank exchanges messages with every other host's first rank
//   (the engine's "link" probes, at the smallest and the largest message); a link's time
//   is one exchange at each size, a host's the median over its links, its ratio that over
//   the median host's. A link is only judged against other links: 3 hosts or more.
using HostVerdict = SlowVerdict;
inline std::vector<HostVerdict> flag_slow_hosts(const std::vector<double>& ratio) { return flag_slow(ratio); }

// One measured exchange between two hosts (the first ranks of each): hosts a < b, the
// message size, the median time of one exchange.
struct LinkSample {
    int a = 0, b = 0;
    double bytes = 0, seconds = 0;
};
// A link the rule names. Its time is one exchange at every size measured (latency and
// bandwidth ends together); `slower` compares that with the reference link (the median
// link between hosts not flagged); `seconds` and `bandwidth_slower` are the same at the
// largest message alone (what bulk traffic, a DP gradient reduction, sees).
struct SlowLink {
    int a = 0, b = 0;
    double bytes = 0, seconds = 0, reference_s = 0, slower = 0, bandwidth_slower = 0;
};
struct LinkVerdicts {
    bool judged = false;               // ≥ 3 hosts with link samples: a link has others to be compared with
    std::vector<double> ratio;         // per host (1 = typical)
    std::vector<HostVerdict> hosts;    // per host
    std::vector<SlowLink> slow_links;  // the links of flagged hosts that are ≥ kSlowMinSlower slower
    double largest_bytes = 0;          // the largest message measured
};
LinkVerdicts judge_links(int host_count, const std::vector<LinkSample>& samples);

// Exit codes: 0 profile written (or, with --check, no host flagged); 1 a rank, host or
// probe failed (the message names the host), or --check flagged a host; 2 a bad job/flag.
int cmd_calibrate(const CalibrateArgs& a, const PresetCatalog& presets, FILE* out, FILE* err);

}  // namespace ptd
