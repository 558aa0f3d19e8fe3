// cmd_schedule.h — `ptd schedule JOB` (the predicted pipeline timeline as a Unicode chart,
// with a measured one from a run directory under it) and `ptd trace RUN_DIR` (Chrome
// trace event JSON from a run's measured timeline files). docs/cli.md.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "ptd/model/speed_interval.h"
#include "ptd/spec/presets.h"
#include "ptd/timeline/timeline.h"
#include "term.h"

namespace ptd {

struct ScheduleArgs {
    std::string job;
    std::vector<std::string> sets;
    std::string steps_of;  // run directory whose measured timeline is drawn under the prediction
    std::string trace;     // write the predicted timeline as Chrome trace JSON here
    std::string profile;   // --profile FILE: a cluster profile (ptd calibrate); else cluster.profile
    bool json = false;
};
int cmd_schedule(const ScheduleArgs& a, const PresetCatalog& presets, FILE* out, FILE* err);

struct TraceArgs {
    std::string run_dir;
    std::string out;       // trace.json path
};
int cmd_trace(const TraceArgs& a, FILE* out, FILE* err);

// The chart: one row per stage (and per measured rank), `t.makespan_s` over the width.
// `measured` may be empty; its blocks are one step, times from 0. With a known
// `step_interval` (job_speed_interval of the step) the header gives the step's error bars.
std::string render_schedule_text(const Timeline& t, const std::vector<TimelineBlock>& measured, const Term& term,
                                 const SpeedInterval& step_interval = {});

// One step of a measured timeline: the blocks of the last step every rank recorded,
// shifted so the step's first block starts at 0; rows = ranks.
std::vector<TimelineBlock> measured_step(const std::vector<MeasuredRank>& ranks, int* step_out = nullptr);

}  // namespace ptd
