// planner_model.h — the view-model of the Planner tab: runs plan_layouts (planner.h) on a
// worker thread over a copy of the job, hands progress and results to the UI thread
// through a mutex-protected snapshot, and turns the result into a filterable, sortable
// table whose rows can be applied to the job. No ImGui here: panel_planner.cpp draws what
// these functions compute, and tests/test_studio_planner.cpp drives it without a window.
//
// Threading: only planner_start / planner_cancel / planner_tick touch the worker, all on
// the UI thread, and none of them waits for it (a superseded search is cancelled and
// joined later, once it has noticed). The worker never sees StudioState.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ptd/spec/job_spec.h"
#include "ptd/plan/planner.h"

namespace ptd::studio {

struct StudioState;

// ---- Options ---------------------------------------------------------------------------

// The Planner tab's search options (PlanOptions in planner.h, as `ptd plan` offers them).
struct PlannerSettings {
    int top_k = 50;              // fitting layouts listed (and as many non-fitting), 1..10000
    bool job_headroom = true;    // leave the job's headroom free (estimate.headroom, else its framework's default); else `headroom`
    double headroom = 0.10;      // fraction of GPU memory to leave free, 0..0.9
    bool tp_beyond_node = false; // also try tp larger than a node
    bool any_framework = false;  // planfw: every framework's layouts, not only training.framework's
    int gpus = 0;                // world size to plan for; 0 = the job's cluster
    bool operator==(const PlannerSettings&) const = default;
};

// Why a setting cannot be used: "" when fine, else a message naming the setting and what
// is allowed. `key` is "top_k", "headroom" or "gpus".
std::string planner_setting_error(const StudioState& s, std::string_view key);

// ---- Table -----------------------------------------------------------------------------

// Table columns, in display order.
enum class PlanColumn {
    rank, tokens_per_s, mfu, step_s, peak, headroom,
    tp, pp, dp, cp, ep, etp, vpp, micro_batch, zero, recompute, sp, order  // etp: expert_tp (MoE)
};
inline constexpr int kPlanColumns = 18;
const char* plan_column_label(PlanColumn c);  // "#", "tokens/s", "MFU", ..., "order"
const char* plan_column_help(PlanColumn c);   // one line for the header's tooltip

// One row: a planned layout and where it stands.
struct PlanRow {
    PlanEntry entry;
    bool fits = true;
    int64_t rank = 0;  // fitting rows: 1 + fitting layouts strictly faster; 0 = does not fit
    // Fitting rows: the row's place in the list, best first (1, 2, 3, ...), as `ptd plan`
    // numbers its rows: the "#" column (rank skipped numbers where layouts the list leaves
    // out are faster, and the CLI's column does not; issue 33). 0 = does not fit.
    int64_t number = 0;
};

// Text of one cell: "458,677", "66.8%", "2.29 s", "53.9 GiB", "-3.2 GiB", "dopt", "on".
std::string plan_cell_text(const StudioState& s, const PlanRow& row, PlanColumn c);

// ---- State -----------------------------------------------------------------------------

enum class PlannerStatus { never_run, running, done, cancelled, failed };

// Where the current job's layout stands in the last search.
struct JobRank {
    enum class Kind {
        none,            // no search finished yet
        stale,           // the job's model, cluster or batch changed since (or the options)
        invalid,         // the job has problems: no layout to rank
        no_layout,       // the job states no layout ([parallel] absent): nothing to rank yet
        different_gpus,  // the search was for another GPU count
        no_fit,          // the layout does not fit (peak > usable)
        refused,         // it fits, but the framework's export refuses it (PlanResult::job_refused)
        ranked,          // rank of `of`
    } kind = Kind::none;
    int64_t rank = 0, of = 0;                 // ranked: #rank among `of` fitting layouts
    double peak_bytes = 0, usable_bytes = 0;  // ranked / no_fit: the layout's worst stage
    double tokens_per_s = 0;
    int row = -1;                             // index into PlannerState::rows of the job's layout, -1 = not listed
    bool folded = false;                      // fold: the job's layout is a variant folded into `row` (vpp, dp_replicate)
};

class PlannerWorker;  // the background search; planner_model.cpp

struct PlannerState {
    PlannerSettings settings;
    bool fits_only = true;               // the table hides layouts that do not fit
    PlanColumn sort_column = PlanColumn::rank;
    bool sort_ascending = true;

    PlannerStatus status = PlannerStatus::never_run;
    int64_t evaluated = 0, total = 0;    // progress of the running search; total 0 = still counting
    std::string error;                   // failed / refused: why, naming the key
    double started_s = 0;                // steady-clock seconds when the running search began

    // The last search that finished (completed, or cancelled with partial results):
    std::optional<PlanResult> result;
    JobSpec planned_job;                 // the job it searched (a copy)
    PlannerSettings planned_settings;    // and the options
    std::vector<PlanRow> rows;           // result's fitting rows (best first), then non-fitting
    std::vector<int> view;               // indices into rows: filtered and sorted, display order
    JobRank job_rank;                    // of the current job; refreshed by planner_tick
    bool small_units = false;            // every peak under 0.5 GiB (CPU jobs): memory in MiB
    int starts = 0;                      // searches started so far (tests count them)

    // Internal: the running search and cancelled ones still winding down.
    std::shared_ptr<PlannerWorker> worker;
    std::vector<std::shared_ptr<PlannerWorker>> retired;
    uint64_t rank_revision = 0;          // StudioState::revision job_rank was computed for
    uint64_t rank_generation = 0;        // result_generation job_rank was computed for
    uint64_t result_generation = 0;      // bumped whenever `result` changes
};

// ---- Running ---------------------------------------------------------------------------

// Why the current job cannot be planned, "" when it can: the model, cluster, batch and
// estimate settings must be free of problems (parallel problems are fine: the planner
// replaces the layout), and the options valid.
std::string planner_blocker(const StudioState& s);
// Start a search of the current job with the current settings; a running one is cancelled.
// Returns false (status failed, `error` says why) when planner_blocker is not "".
bool planner_start(StudioState& s);
// Start one when none ever ran and the job can be planned (the tab's first showing).
bool planner_autostart(StudioState& s);
// Ask the running search to stop; its partial result arrives through planner_tick.
void planner_cancel(StudioState& s);
// Once per frame on the UI thread (studio_tick calls it): take in progress and a finished
// result, reap cancelled workers, refresh job_rank after edits. Never blocks. Returns
// true when something the tab shows changed.
bool planner_tick(StudioState& s);
// Whether a search (or a cancelled one still stopping) is under way.
bool planner_running(const StudioState& s);
// Tests and screenshots: tick until no search runs or `timeout_s` passed; true = finished.
bool planner_wait(StudioState& s, double timeout_s);

// The result no longer describes the job: its model, cluster, batch or estimate settings,
// or the options, changed since the search. Layout-only edits (tp, pp, ..., micro_batch,
// as applying a row makes) do not make it stale.
bool planner_stale(const StudioState& s);

// ---- Table operations ------------------------------------------------------------------

void planner_set_fits_only(StudioState& s, bool fits_only);
void planner_sort(StudioState& s, PlanColumn column, bool ascending);
// Apply rows[row]'s layout (tp, pp, dp, cp, ep, vpp, micro_batch, zero, distributed
// optimizer, recompute, sequence parallel, order, layers_per_stage; dp and global batch
// become given; nodes follow a search for another GPU count) to the job and recompute.
// False, changing nothing, for a bad index or a stale result.
bool planner_apply_row(StudioState& s, int row);
// The job planner_apply_row would make of `row` (the current job otherwise unchanged);
// none for a row that is not there or a stale search.
std::optional<JobSpec> planner_row_job(const StudioState& s, int row);
// Whether rows[row] is the current job's layout.
bool planner_row_is_job(const StudioState& s, int row);

// ---- Text ------------------------------------------------------------------------------

// "your job ranks #7 of 1,234 fitting layouts", "your job does not fit: ...", ...
std::string job_rank_text(const StudioState& s);
// Where the job's layout is in the table, to follow job_rank_text: " (highlighted below)";
// for a variant folded into a row (fold), which row and at which vpp / dp_replicate; " (not
// among the rows listed)" for a ranked layout the table does not hold; empty otherwise.
std::string job_row_note(const StudioState& s);
// "evaluated 4,096 of about 12,030 layouts" while running; "" otherwise.
std::string planner_progress_text(const StudioState& s);
// "searched 15,354 layouts, evaluated 12,030, 11,028 fit, in 0.02 s" for the last result.
std::string planner_summary_text(const StudioState& s);
// planfw: what bounded the last search and the memory it left free, e.g. "framework megatron
// (Megatron-LM main d98e8a6): no ZeRO-2/3 ...; headroom 5% (megatron's default)"; "" before one.
std::string planner_bounds_text(const StudioState& s);
// "1,234,567"
std::string group_thousands(int64_t v);

}  // namespace ptd::studio
