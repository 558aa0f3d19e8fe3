// compare_model.cpp — the Compare tab's model: pinning a layout and comparing it with the
// edited job (compare_model.h).
#include "compare_model.h"

#include "studio_state.h"

namespace ptd::studio {

bool compare_pin(StudioState& s, JobSpec job, std::string name) {
    if (!job.has_layout() || !validate_job(job).empty()) return false;
    Estimate est = estimate_job(job);
    s.compare.pinned = CompareSide{std::move(name), std::move(job), std::move(est)};
    return true;
}

bool compare_pin_job(StudioState& s, std::string name) {
    const Estimate* e = job_estimate(s);
    if (!job_valid(s) || !s.layout || !e) return false;
    s.compare.pinned = CompareSide{name.empty() ? s.job_label + " (pinned)" : std::move(name), s.job, *e};
    return true;
}

bool compare_pin_plan_row(StudioState& s, int row) {
    std::optional<JobSpec> job = planner_row_job(s, row);  // the row as "apply" would write it
    if (!job) return false;
    return compare_pin(s, std::move(*job), "planner row #" + std::to_string(s.planner.rows[(size_t)row].number));
}

void compare_unpin(StudioState& s) { s.compare.pinned.reset(); }

std::optional<CompareSide> compare_current(const StudioState& s) {
    const Estimate* e = job_estimate(s);
    if (!job_valid(s) || !s.layout || !e) return std::nullopt;
    return CompareSide{s.job_label + " (as edited)", s.job, *e};
}

std::vector<CompareRow> compare_view_rows(const StudioState& s) {
    const std::optional<CompareSide> b = compare_current(s);
    if (!s.compare.pinned || !b) return {};
    return compare_rows(*s.compare.pinned, *b);
}

}  // namespace ptd::studio
