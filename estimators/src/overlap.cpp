// overlap.cpp — what communication hides behind compute, and what is left exposed after a
// stage's last backward block: the data-parallel gradient reduction (Megatron's
// overlap_grad_reduce starts it during the last backward), the parameter all-gather of a
// sharded optimizer (overlap_param_gather hides it behind the next forward), ZeRO-3's
// per-micro-batch gathers (prefetched), and the optimizer step itself (memory bound).
// Sources: Megatron-LM's DDP and distributed optimizer (docs/source/api-guide/
// dist_optimizer.md; arguments --overlap-grad-reduce, --overlap-param-gather); ZeRO-3
// prefetching — Rajbhandari et al. 2020 §7 and DeepSpeed's stage3_prefetch_bucket_size.
// docs/estimators.md writes every term out.
#include "estimate_internal.h"

#include <algorithm>

namespace ptd::est {

StageTail stage_tail(const EstimateContext& ctx, const LayoutDerived& L, const DpTraffic& dp, double dense_params,
                     double expert_params, double fwd_s, double bwd_s) {
    const JobSpec& job = ctx.job;
    const EstimateSpec& es = job.estimate;
    const int N = L.dp * L.c;
    // Exposed DP time. Gradient reduction overlaps the backward of the last micro-batch
    // (from the end of the stage's last backward block, the schedule simulation below
    // places it); parameter gathering overlaps the first forward of the next iteration.
    // ZeRO-3's per-micro-batch traffic overlaps all compute (prefetch) but for the last
    // micro-batch's reduce-scatter.
    StageTail tail;
    tail.grad_s = dp.grad_s;
    tail.param_s = dp.param_s;
    if (L.zero == 3) {
        tail.grad_exposed_s = std::max(0.0, dp.grad_s + dp.param_s - L.mbs * (fwd_s + bwd_s)) + dp.grad_s / L.mbs;
    } else if (L.zero == 2 && L.p > 1) {
        // Per-micro-batch reduce-scatters (collectives.cpp) hide behind the backwards but
        // the last micro-batch's; the parameter gather as below.
        tail.grad_exposed_s = std::max(0.0, dp.grad_s - L.mbs * bwd_s) + dp.grad_s / L.mbs;
        tail.param_exposed_s = es.overlap_param_gather ? std::max(0.0, dp.param_s - fwd_s) : dp.param_s;
    } else {
        tail.grad_exposed_s = es.overlap_grad_reduce ? std::max(0.0, dp.grad_s - bwd_s) : dp.grad_s;
        tail.param_exposed_s = es.overlap_param_gather ? std::max(0.0, dp.param_s - fwd_s) : dp.param_s;
    }

    // Optimizer step: memory bound over this rank's optimizer shard. Adam touches
    // grad (4), master (4+4), m (4+4), v (4+4), writes the weight: ~30 bytes/param.
    const bool sharded = L.optimizer_sharded;
    const double opt_params = dense_params / (sharded ? N : 1) + expert_params / (sharded ? L.edp : 1);
    const double opt_bytes = job.training.optimizer == Optimizer::sgd ? 18.0 : 30.0;
    tail.optimizer_s = opt_params * opt_bytes / L.hbm;
    return tail;
}

}  // namespace ptd::est
