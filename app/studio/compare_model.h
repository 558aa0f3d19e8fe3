// compare_model.h — the studio's Compare tab (issue 33 point 5): a layout pinned from the
// current job or a planner row, beside the job as edited now, as the rows of
// compare_view.h (the same rows `ptd estimate A B` prints). No ImGui.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compare_view.h"

namespace ptd::studio {

struct StudioState;

struct CompareState {
    std::optional<CompareSide> pinned;  // side A; side B is always the job as edited
};

// Pin the current job (valid, with a layout): false (nothing changes) otherwise.
bool compare_pin_job(StudioState& s, std::string name = "");
// Pin a planner row (as planner_apply_row would apply it), without changing the job; false
// for a row that is not there or a stale search.
bool compare_pin_plan_row(StudioState& s, int row);
// Pin a job loaded elsewhere (ptd-studio --compare FILE); false without a layout.
bool compare_pin(StudioState& s, JobSpec job, std::string name);
void compare_unpin(StudioState& s);
// The current job as side B: "current job" and its estimate; none while it is not valid.
std::optional<CompareSide> compare_current(const StudioState& s);
// The rows of pinned (A) against current (B); empty when either is missing.
std::vector<CompareRow> compare_view_rows(const StudioState& s);

}  // namespace ptd::studio
