// job_layout.h — the rank layout a job describes: its [parallel] degrees and order with
// cluster.gpus_per_node, through make_layout. ptd-engine, the launcher, `ptd` and the studio
// all place ranks by this one function, so a new layout key reaches them all at once.
#pragma once

#include "ptd/common/diagnostic.h"
#include "ptd/spec/job_spec.h"
#include "ptd/layout/layout.h"

namespace ptd {

Result<RankLayout> job_layout(const JobSpec& job);

}  // namespace ptd
