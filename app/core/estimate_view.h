// estimate_view.h — an Estimate and a PlanResult for people (terminal tables, colour only
// on a TTY) and for programs (stable JSON, schemas "ptd.estimate/1" and "ptd.plan/1",
// documented in docs/cli.md). Bytes are shown in GiB with two decimals.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "ptd/model/estimate.h"
#include "ptd/spec/job_spec.h"
#include "ptd/plan/planner.h"
#include "term.h"

namespace ptd {

// Header line, memory table (one row per run of identical stages), time breakdown,
// throughput / MFU line, notes. Ends in a newline.
std::string render_estimate_text(const JobSpec& job, const Estimate& est, const Term& term);
nlohmann::json estimate_json(const JobSpec& job, const Estimate& est);
// An estimate's "interval" object: the band (known, confidence, source, runs, runs_of,
// fallback, error_lo, error_hi) and each speed figure's {lo, hi}; {known: false, reason}.
nlohmann::json estimate_interval_json(const SpeedInterval& s);
// An estimate's "memory_interval" object: the band as "interval"'s (source measured_memory),
// the worst stage's total as peak_bytes {lo, hi} and fits_at_top; {known: false, reason}.
nlohmann::json memory_interval_json(const MemoryInterval& m);
// "peak 80%: 52.10 – 58.40 GiB from the estimate's error on 25 measured hopper (H100, H200)
// dense runs: fits across the range" (the line under `ptd estimate`'s memory table, in its unit).
std::string memory_interval_line(const MemoryInterval& m, double usable_bytes, double unit, const char* unit_name);
// "error bars: 80% intervals from the estimate's error on 90 published hopper (H100, H200)
// runs; ..." or "error bars: none: ..." (the line under `ptd estimate`'s speeds).
std::string interval_basis_line(const SpeedInterval& s);
// How many of the plan's top rows, best first, have tokens/s intervals that overlap the
// best's (the best counted; 0 without an interval): those are within the estimate's error
// of each other.
size_t rows_within_error(const JobSpec& job, const PlanResult& plan);
size_t rows_within_error(const std::optional<ErrorBand>& band, const PlanResult& plan);
// The band of a plan's rows: with options.profile feeding the job's time model, the
// profile's band at the best layout; else the job's published-run band (none: `why`).
std::optional<ErrorBand> plan_error_band(const JobSpec& job, const PlanResult& plan, const PlanOptions& options,
                                         std::string* why = nullptr);

// Top-k table, Pareto front, why the best wins, the job's own rank, search counts.
// `job` is the job as planned (its world size may come from --gpus).
// planfw: the plan header's second line: which framework bounded the search and what it left
// out (or that --any-framework searched them all).
std::string plan_framework_line(const JobSpec& job, const PlanResult& plan);
std::string render_plan_text(const JobSpec& job, const PlanResult& plan, const PlanOptions& options,
                             const Term& term);
nlohmann::json plan_json(const JobSpec& job, const PlanResult& plan, const PlanOptions& options);
// fold: what a plan row stands for besides itself, in words, `who` naming it ("row 1" → "row 1
// (vpp 16) also at vpp 1–15, 17–30, within 3.5%, without TP overlap, 0.8% slower"; "row 2
// (dp_replicate 2) also at dp_replicate 1, 4, within 1.2%"; "" when it folds nothing).
std::string folded_row_text(const std::string& who, const PlanEntry& e);

// "tp8·pp4·dp2·vpp5": the degrees greater than one after tp·pp·dp.
std::string layout_label(int tp, int pp, int dp, int cp, int ep, int vpp);
// etp: the job's, with "·etpN" where a MoE job's expert_tp differs from tp (MoE parallel folding).
std::string layout_label(const JobSpec& job);

// A whole number with thousands separators: 1234567 → "1,234,567".
std::string thousands(double v);

}  // namespace ptd
