// run_prediction.h — the estimator's speed prediction for a run, shown beside what its ranks
// measure: `ptd launch`'s dashboard, `ptd watch` and the studio's Live and Schedule tabs.
// It is one estimate_job of the run's job with the run's cluster profile (none = the GPU
// preset's figures): step time and tokens/s, and their interval (speed_interval.h) where
// one is known; where none is, the reason the estimator gave, never a made-up band.
//
// A launch records the profile it used in the run's manifest (RunProfileRecord: absolute
// path, source, measured_at), so reading the run directory later gives the same
// prediction: the run's job.toml with that profile.
#pragma once

#include <optional>
#include <string>

#include "ptd/launch.h"
#include "ptd/model/speed_interval.h"
#include "ptd/run_dir.h"
#include "ptd/spec/cluster_profile.h"
#include "ptd/spec/presets.h"

namespace ptd {

struct RunPrediction {
    bool available = false;     // an estimate was made (step_s, tokens_per_s, speed)
    std::string why_none;       // when !available: why there is no prediction
    double step_s = 0;
    double tokens_per_s = 0;    // whole job (as the ranks' tokens_per_s: global batch / step)
    SpeedInterval speed;        // known = false: speed.why_unknown says why there is no interval
    std::optional<RunProfileRecord> profile;  // the profile given; none = the preset's figures
    std::string profile_unused; // a profile was given but the time model keeps the preset's
                                // figures for this job: why (estimate_job's time_source_why)
    std::string gpu;            // the job's cluster.gpu preset name
    std::string note;           // a remark on where the figures come from ("" = none), e.g. a
                                // profile re-measured since the run started
    std::string profile_problem;  // the profile named could not be used (then !available): the
                                  // located error, for a caller that refuses a bad --profile
};

// The profile as a manifest records it (path made absolute).
RunProfileRecord profile_record(const JobProfile& p);

// estimate_job(job, profile) as a prediction. A job without a layout or with problems
// (validate_job) has none, and says why.
RunPrediction predict_run(const JobSpec& job, const std::optional<JobProfile>& profile);

// The prediction of a run directory: its job.toml (with the compiled-in presets) and the
// profile `override_path` names (ptd watch --profile), else the one the manifest recorded,
// else the job's cluster.profile. Never fails: a job or profile that cannot be used gives
// a prediction with available = false and why_none saying which file and what is wrong.
RunPrediction predict_run_dir(const std::string& run_dir, const RunManifest& manifest,
                              const std::string& override_path = "");

// "\"cpu\" preset's figures", "profile /abs/prof.toml (measured 2026-11-29T06:40:00Z)", or
// "\"h100-sxm\" preset's figures (the profile FILE is not used: WHY)".
std::string prediction_source_text(const RunPrediction& p);
// "80% interval from 46 published hopper (H100, H200) runs" or "no interval: WHY".
std::string prediction_interval_text(const RunPrediction& p);

// Durations and rates for the dashboard: "66.0 ms", "1.25 s"; "15.4K/s".
std::string human_seconds(double s);
std::string human_rate(double per_second);

}  // namespace ptd
