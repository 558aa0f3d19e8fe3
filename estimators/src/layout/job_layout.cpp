// job_layout.cpp — the LayoutRequest of a job (job_layout.h).
#include "ptd/layout/job_layout.h"

namespace ptd {

Result<RankLayout> job_layout(const JobSpec& job) {
    const ParallelSpec& p = job.parallel;
    LayoutRequest req;
    req.tp = p.tp;
    req.cp = p.cp;
    req.dp = p.dp;
    req.pp = p.pp;
    req.ep = p.ep;
    req.gpus_per_node = job.cluster.gpus_per_node;
    req.order = p.order;
    req.etp = job.model.experts > 1 ? p.expert_tp : 0;  // moe2
    req.dp_replicate = p.dp_replicate;                 // hsdp
    return make_layout(req);
}

}  // namespace ptd
