// overlap.cpp — what communication hides behind compute, and what is left exposed after a
// stage's last backward block: the data-parallel gradient reduction (Megatron's
// overlap_grad_reduce starts it during the last backward), the parameter all-gather of a
// sharded optimizer (overlap_param_gather hides it behind the next forward), ZeRO-3's
// per-micro-batch gathers (prefetched), and the optimizer step itself (memory bound).
// Sources: Megatron-LM's DDP and distributed optimizer (docs/source/api-guide/
// dist_optimizer.md; arguments --overlap-grad-reduce, --overlap-param-gather); ZeRO-3
// prefetching — Rajbhandari et al. 2020 §7 and DeepSpeed's stage3_prefetch_bucket_size.
// Offload: the PCIe copies and the CPU optimizer step of ZeRO-Offload (Ren et al. 2021 §4,
// CPU-Adam throughput from its §5 measurements) and Megatron's --optimizer-cpu-offload.
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

    // offload (ZeRO-Offload, Ren et al. 2021 §4.1-4.2): each step the gradient shard goes
    // device→host (16-bit in DeepSpeed, Megatron's fp32 main grads), the CPU steps (every GPU
    // process of the node shares its cores), the updated 16-bit parameters come back. The
    // gradient copy overlaps the last backward as the reduction does; the parameter copy is
    // pipelined with the CPU step (DeepSpeed's CPU-Adam copies each updated tile while the next
    // steps; Megatron's --overlap-cpu-optimizer-d2h-h2d), so the longer of the two shows.
    // ZeRO-3's offload_param fetches the shard host→device before each gather (forward and
    // backward of every micro-batch), prefetched behind compute on the copy engines. The
    // one-step delayed parameter update (DPU) is not modelled: it changes the training math.
    if (L.offload_optimizer || L.offload_params) {
        const double param_bytes = opt_params * L.e;  // this rank's 16-bit parameter shard
        if (L.offload_optimizer) {
            tail.offload_d2h_s = opt_params * (L.zero == 0 ? 4.0 : L.e) / L.pcie;
            tail.cpu_optimizer_s = opt_params * L.gpus_per_node / L.cpu_adam_params_per_s;
            tail.offload_h2d_s = L.offload_params ? 0.0 : param_bytes / L.pcie;  // with offload_params they stay on host
            tail.optimizer_s = 0;  // the GPU no longer steps
        } else {
            tail.offload_d2h_s = param_bytes / L.pcie;  // GPU step, then the shard goes back to host
        }
        if (L.offload_params) tail.offload_param_fetch_s = 2.0 * L.mbs * param_bytes / L.pcie;
        const double d2h_exposed = L.offload_optimizer && es.overlap_grad_reduce
                                       ? std::max(0.0, tail.offload_d2h_s - bwd_s)
                                       : tail.offload_d2h_s;
        const double fetch_exposed = std::max(0.0, tail.offload_param_fetch_s - L.mbs * (fwd_s + bwd_s));
        tail.offload_s = d2h_exposed + std::max(tail.cpu_optimizer_s, tail.offload_h2d_s) + fetch_exposed;
    }
    return tail;
}

}  // namespace ptd::est
