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
// runs more ranks than it has cores, the probes cannot show what a step's collectives wait
// for the scheduler; the job then trains 3 steps (RUN_DIR + "-steps", through the same
// launcher) and --from-run refines the profile with them. Elsewhere it says it is not needed.
int step_probe(const CalibrateArgs& a, const std::string& profile_path, const std::string& calibration_run_dir,
               const PresetCatalog& presets, FILE* out, FILE* err);

// Writes a profile through a temporary file renamed over `path` (never half a file).
Result<void> write_profile_file(const std::string& path, const std::string& text);

// --from-run RUN_DIR (calibrate_from_run.cpp): the run's in-step TP collective costs replace
// the probes' in the profile (-o OUT, else the profile in place). Exit 0, or 2 with a
// located message (no profile, hosts the profile did not measure, no TP or world collective in the timeline).
int refine_profile_from_run(const CalibrateArgs& a, const PresetCatalog& presets, FILE* out, FILE* err);


// Outlier rule of the preflight (docs/launcher.md, "Preflight"). Each host has a ratio:
// for every GEMM probe, the median over the host's ranks of its time divided by the median
// over hosts, and the host's ratio is the median of those over the probes (1 = typical).
// A host is flagged when its ratio exceeds the median ratio m by more than kPreflightMads
// robust standard deviations (1.4826 · MAD over hosts) AND is at least kPreflightMinSlower
// above m. With fewer than 3 hosts the MAD says nothing: the fastest host is the
// reference, and only the second rule applies.
inline constexpr double kPreflightMads = 3.0;
inline constexpr double kPreflightMinSlower = 0.15;

struct HostVerdict {
    double slower = 0;            // ratio / reference − 1: 0.31 = 31 % slower
    bool flagged = false;
};
std::vector<HostVerdict> flag_slow_hosts(const std::vector<double>& ratio);

// Exit codes: 0 profile written (or, with --check, no host flagged); 1 a rank, host or
// probe failed (the message names the host), or --check flagged a host; 2 a bad job/flag.
int cmd_calibrate(const CalibrateArgs& a, const PresetCatalog& presets, FILE* out, FILE* err);

}  // namespace ptd
