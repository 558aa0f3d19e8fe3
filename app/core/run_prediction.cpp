// run_prediction.cpp — a run's speed prediction from its job and cluster profile
// (run_prediction.h). The figures and their interval are estimate_job's, unchanged: this
// file only chooses the job and the profile and says where they came from.
#include "run_prediction.h"

#include <cmath>
#include <filesystem>

#include "ptd/model/estimate.h"
#include "term.h"

namespace ptd {

namespace fs = std::filesystem;

RunProfileRecord profile_record(const JobProfile& p) {
    std::error_code ec;
    const fs::path abs = fs::absolute(p.path, ec);
    return {(ec ? fs::path(p.path) : abs.lexically_normal()).string(), p.source, p.profile.measured_at};
}

RunPrediction predict_run(const JobSpec& job, const std::optional<JobProfile>& profile) {
    RunPrediction out;
    out.gpu = job.cluster.gpu.name;
    if (profile) out.profile = profile_record(*profile);
    if (!job.has_layout()) {
        out.why_none = "the job has no layout ([parallel] table): nothing to predict";
        return out;
    }
    if (const std::vector<Diagnostic> problems = validate_job(job); !problems.empty()) {
        out.why_none = "the job has problems: " + Error(problems).one_line();
        return out;
    }
    const Estimate est = estimate_job(job, profile ? &profile->profile : nullptr);
    out.available = true;
    out.step_s = est.step_s;
    out.tokens_per_s = est.tokens_per_s;
    out.speed = est.speed;
    if (profile && !est.time_from_profile)
        out.profile_unused = est.time_source_why.empty() ? "the time model does not take its figures" : est.time_source_why;
    return out;
}

RunPrediction predict_run_dir(const std::string& run_dir, const RunManifest& manifest, const std::string& override_path) {
    RunPrediction none;
    const std::string job_path = (fs::path(run_dir) / "job.toml").string();
    auto presets = load_presets();
    if (!presets) {
        none.why_none = "the presets cannot be loaded: " + presets.error().one_line();
        return none;
    }
    auto job = load_job_file(job_path, *presets);
    if (!job) {
        none.why_none = "the run's job cannot be read: " + job.error().one_line();
        return none;
    }
    none.gpu = job->cluster.gpu.name;
    // The profile: --profile, else what the launch recorded (an absolute path, whatever the
    // job file said), else the job's own key (which load_job_profile resolves).
    const std::string path = !override_path.empty() ? override_path : manifest.profile ? manifest.profile->path : "";
    auto profile = load_job_profile(*job, path);
    if (!profile) {
        none.why_none = "the cluster profile cannot be used: " + profile.error().one_line();
        none.profile_problem = profile.error().str();
        if (override_path.empty() && manifest.profile) none.profile = manifest.profile;
        return none;
    }
    if (*profile && override_path.empty() && manifest.profile) (*profile)->source = manifest.profile->source;
    RunPrediction out = predict_run(*job, *profile);
    if (*profile && override_path.empty() && manifest.profile && !manifest.profile->measured_at.empty() &&
        manifest.profile->measured_at != (*profile)->profile.measured_at)
        out.note = "the profile was measured again since the run started (then " + manifest.profile->measured_at + ", now " +
                   (*profile)->profile.measured_at + "): this prediction uses it as it is now";
    if (!override_path.empty() && manifest.profile)
        out.note = "--profile replaces the run's own profile " + manifest.profile->path;
    return out;
}

std::string prediction_source_text(const RunPrediction& p) {
    if (p.profile && !p.profile_unused.empty())
        return "\"" + p.gpu + "\" preset's figures (the profile " + p.profile->path + " is not used: " + p.profile_unused + ")";
    if (p.profile) {
        std::string t = "profile " + p.profile->path;
        if (!p.profile->measured_at.empty()) t += " (measured " + p.profile->measured_at + ")";
        return t;
    }
    return "\"" + p.gpu + "\" preset's figures";
}

std::string prediction_interval_text(const RunPrediction& p) {
    const SpeedInterval& s = p.speed;
    if (!s.known) {
        const std::string& why = s.why_unknown;
        return "no interval: " + why.substr(why.rfind("no interval: ", 0) == 0 ? 13 : 0);
    }
    return fmt("%.0f%% interval from ", s.band.confidence * 100) + s.basis();
}

std::string human_seconds(double s) {
    if (!std::isfinite(s)) return "?";
    if (s < 1e-3) return fmt("%.0f µs", s * 1e6);
    if (s < 1) return fmt(s < 0.01 ? "%.2f ms" : s < 0.1 ? "%.1f ms" : "%.0f ms", s * 1e3);
    return fmt(s < 10 ? "%.2f s" : s < 100 ? "%.1f s" : "%.0f s", s);
}

std::string human_rate(double v) {
    if (v >= 1e9) return fmt("%.2fG/s", v / 1e9);
    if (v >= 1e6) return fmt("%.2fM/s", v / 1e6);
    if (v >= 1e4) return fmt("%.1fK/s", v / 1e3);
    return fmt("%.0f/s", v);
}

}  // namespace ptd
