// stragglers.h — the slow rank of a run, found in its measured timeline. Data-parallel
// collectives make every rank's step time equal (each waits for the slowest at the next
// collective), so step times cannot show it; compute can. Each rank's compute per step is
// its forward, backward and weight-gradient blocks less the tensor-parallel collectives
// nested in them (waiting for a slow TP peer happens there); a rank is compared with the
// ranks of its own pipeline stage, which do the same work, by the robust rule of
// ptd/common/outliers.h, and named only when what it adds to the step matters: at least
// kStragglerMinStepShare of the median step (docs/launcher.md, "Stragglers"). On a busy or
// oversubscribed machine ranks take turns on the cores and a rank's few milliseconds of
// compute vary by tens of percent from step to step while the step waits on communication;
// such a rank is unusual but not what slows the run.
#pragma once

#include <string>
#include <vector>

#include "ptd/common/diagnostic.h"
#include "ptd/common/outliers.h"
#include "ptd/timeline/timeline.h"

namespace ptd {

inline constexpr double kStragglerMinStepShare = 0.05;

struct RankComputeTime {
    int rank = 0, stage = 0;
    int steps = 0;          // steps of the timeline it was measured over
    double compute_s = 0;   // median over those steps of the rank's compute per step
    double peers_s = 0;     // the reference of its stage (median of its peers, or the fastest of < 3)
    SlowVerdict verdict;    // against that reference; flagged also needs the step share
};

struct StragglerReport {
    std::vector<RankComputeTime> ranks;  // by rank
    int steps = 0;                       // the most steps any rank was measured over
    double step_s = 0;                   // median step (first block's start to last block's end) over ranks
    std::vector<int> slow_ranks() const;
};

// The verdict over the ranks' timelines (any order; ranks of one stage are peers).
StragglerReport find_stragglers(const std::vector<MeasuredRank>& ranks);

// A run directory's timeline/ as far as it is written: a live rank's file may end in a
// line cut short or in a step not yet complete, which is left out. An error when there is
// no timeline folder or a file is not a timeline.
Result<StragglerReport> run_stragglers(const std::string& run_dir);

}  // namespace ptd
