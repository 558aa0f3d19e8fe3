// predicted_timeline.cpp — a job's whole step as data: every block of every pipeline stage
// placed by the schedule simulation (model/schedule.cpp) with the estimate's durations,
// then the data-parallel tail and the optimizer, for `ptd schedule`, the studio's Schedule
// tab and traces.
#include "ptd/timeline/timeline.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "ptd/model/estimate.h"

namespace ptd {

// ---- the predicted timeline -------------------------------------------------------------

const char* block_kind_name(BlockKind k) {
    switch (k) {
        case BlockKind::forward: return "fwd";
        case BlockKind::backward: return "bwd";
        case BlockKind::recompute: return "recompute";
        case BlockKind::send: return "send";
        case BlockKind::recv: return "recv";
        case BlockKind::tp_comm: return "tp";
        case BlockKind::dp_comm: return "dp";
        case BlockKind::optimizer: return "optimizer";
        case BlockKind::weight_grad: return "wgrad";
    }
    return "?";
}

std::optional<BlockKind> block_kind_from_name(std::string_view name) {
    for (int i = 0; i < kBlockKindCount; ++i)
        if (name == block_kind_name((BlockKind)i)) return (BlockKind)i;
    return std::nullopt;
}

Timeline predicted_timeline(const JobSpec& job, const ClusterProfile* profile) {
    const Estimate est = estimate_job(job, profile);
    Timeline t;
    const int p = (int)est.stages.size(), v = std::max(1, job.parallel.vpp), m = est.micro_batches;
    t.stages = p, t.vpp = v, t.micro_batches = m;
    t.micro_batch = job.training.micro_batch, t.dp = job.parallel.dp, t.global_batch = job.training.global_batch;
    t.tp = job.parallel.tp, t.cp = job.parallel.cp;
    const PipelineSchedule sched = p > 1 ? effective_schedule(job.parallel.schedule, v) : PipelineSchedule::one_f_one_b;
    t.schedule = p <= 1 ? "no pipeline (gradient accumulation)"
               : sched == PipelineSchedule::zb_h1    ? "ZB-H1 (zero bubble; W deferred)"
               : sched == PipelineSchedule::dualpipe ? "DualPipe (closed form: no block order simulated)"
               : v > 1  ? "interleaved 1F1B (v = " + std::to_string(v) + ")"
                        : "1F1B";
    const bool split_w = sched == PipelineSchedule::zb_h1;
    std::vector<double> fwd((size_t)p * v), bwd((size_t)p * v), wgt(split_w ? (size_t)p * v : 0), stage_end((size_t)p);
    for (int s = 0; s < p; ++s)
        for (int c = 0; c < v; ++c) {
            const ChunkTime& ct = est.stages[(size_t)s].chunks[(size_t)c];
            fwd[(size_t)(c * p + s)] = ct.fwd.total();
            bwd[(size_t)(c * p + s)] = ct.bwd.total() - (split_w ? ct.bwd.wgrad : 0.0);
            if (split_w) wgt[(size_t)(c * p + s)] = ct.bwd.wgrad;
        }
    // Shared cores: the estimate's processor sharing (schedule.h CoreSharing), from
    // the same blocks' shared parts, so the blocks end where the estimate's step ends.
    std::vector<double> fwd_c, bwd_c, wgt_c;
    CoreSharing sharing;
    if (est.share_cores > 0) {
        fwd_c.assign(fwd.size(), 0.0), bwd_c.assign(bwd.size(), 0.0), wgt_c.assign(wgt.size(), 0.0);
        const bool collectives_share = stage_collectives_share_cores(est.share_cores, est.share_ranks_per_stage);
        ProbedBusy busy;
        for (int s = 0; s < p; ++s)
            for (int c = 0; c < v; ++c) {
                const ChunkTime& ct = est.stages[(size_t)s].chunks[(size_t)c];
                const size_t cell = (size_t)(c * p + s);
                busy.add(ct.fwd), busy.add(ct.bwd);
                fwd_c[cell] = core_shared_part(ct.fwd, collectives_share);
                bwd_c[cell] = core_shared_part(ct.bwd, collectives_share) - (split_w ? ct.bwd.wgrad : 0.0);
                if (split_w) wgt_c[cell] = ct.bwd.wgrad;
            }
        sharing = CoreSharing{.cores = est.share_cores, .ranks_per_stage = est.share_ranks_per_stage,
                              .measured_share = est.share_measured, .busy = busy.fraction(), .fwd_compute = fwd_c,
                              .bwd_compute = bwd_c, .wgt_compute = wgt_c};
    }
    std::vector<PlacedOp> placed;
    PipelineDurations pd;
    if (est.share_cores > 0) pd.sharing = &sharing;
    pd.p = p, pd.v = v, pd.m = m, pd.fwd = fwd, pd.bwd = bwd;
    pd.schedule = sched, pd.wgt = wgt;
    pd.group = v > 1 ? job.parallel.microbatch_group_size : 0;  // l405: Megatron's N (0 = p)
    pd.hop = est.pipeline_hops_s;  // p2pdep
    if (sched == PipelineSchedule::dualpipe) {
        // The estimate's closed form: each rank's end, no blocks.
        t.pipeline_s = est.pipeline_s;
        for (int s = 0; s < p; ++s) stage_end[(size_t)s] = est.stages[(size_t)s].pipeline_end_s;
    } else {
        t.pipeline_s = simulate_pipeline(pd, stage_end, &placed);
    }

    t.blocks.reserve(placed.size() * 2 + (size_t)p * 3);
    for (const PlacedOp& po : placed) {
        const BlockTime& bt = po.op.pass == Pass::forward ? est.stages[(size_t)po.stage].chunks[(size_t)po.op.chunk].fwd
                                                          : est.stages[(size_t)po.stage].chunks[(size_t)po.op.chunk].bwd;
        TimelineBlock b;
        b.row = po.stage;
        b.micro_batch = po.op.micro_batch;
        b.chunk = po.op.chunk;
        if (po.op.pass == Pass::weight) {  // ZB-H1's W: weight-gradient GEMMs only
            b.kind = BlockKind::weight_grad;
            b.start_s = po.start_s;
            b.end_s = po.end_s;
            b.compute_s = bt.wgrad;
            t.blocks.push_back(b);
            continue;
        }
        double start = po.start_s;
        if (po.op.pass == Pass::backward && bt.recompute > 0) {
            TimelineBlock r = b;
            r.kind = BlockKind::recompute;
            r.start_s = start;
            r.end_s = std::min(start + bt.recompute, po.end_s);  // shared cores may shorten the block
            r.compute_s = bt.recompute;
            t.blocks.push_back(r);
            start = r.end_s;
        }
        b.kind = po.op.pass == Pass::forward ? BlockKind::forward : BlockKind::backward;
        b.start_s = start;
        b.end_s = po.end_s;
        b.compute_s = bt.compute - (split_w && po.op.pass == Pass::backward ? bt.wgrad : 0.0);
        b.tp_s = bt.tp, b.cp_s = bt.cp, b.ep_s = bt.ep, b.p2p_s = bt.p2p;
        t.blocks.push_back(b);
    }

    // The tail (estimate.h StageTail): gradient reduction ending its exposed part after the
    // stage's last backward; after every stage's (the clipping all-reduce) the optimizer
    // step, then the exposed parameter gather.
    const bool zero3 = job.parallel.zero == 3;
    double sync = t.pipeline_s;
    for (int s = 0; s < p; ++s) sync = std::max(sync, stage_end[(size_t)s] + est.stages[(size_t)s].tail.grad_exposed_s);
    for (int s = 0; s < p; ++s) {
        const StageTail& tl = est.stages[(size_t)s].tail;
        const double e = stage_end[(size_t)s];
        // One block of the tail on this stage's row (start and end as computed: no
        // start + length, which would round differently).
        auto tail_block = [&](BlockKind kind, int stream, double start, double end, double overlapped) {
            t.blocks.push_back(
                TimelineBlock{.kind = kind, .row = s, .stream = stream, .start_s = start, .end_s = end, .overlapped_s = overlapped});
        };
        if (tl.grad_s > 0) {
            const double shown = zero3 ? tl.grad_exposed_s : tl.grad_s;
            tail_block(BlockKind::dp_comm, kStreamComm, e + tl.grad_exposed_s - shown, e + tl.grad_exposed_s,
                       zero3 ? tl.grad_s + tl.param_s - tl.grad_exposed_s : shown - tl.grad_exposed_s);
        }
        if (tl.optimizer_s > 0) tail_block(BlockKind::optimizer, kStreamCompute, sync, sync + tl.optimizer_s, 0.0);
        if (tl.offload_s > 0) {  // offload: the exposed PCIe copies and the CPU optimizer step
            const double start = sync + tl.optimizer_s;
            tail_block(BlockKind::optimizer, kStreamCompute, start, start + tl.offload_s, 0.0);
        }
        if (tl.param_exposed_s > 0) {
            const double start = sync + tl.optimizer_s + tl.offload_s;
            tail_block(BlockKind::dp_comm, kStreamComm, start, start + tl.param_exposed_s, tl.param_s - tl.param_exposed_s);
        }
    }
    std::stable_sort(t.blocks.begin(), t.blocks.end(), [](const TimelineBlock& a, const TimelineBlock& b) {
        return a.row != b.row ? a.row < b.row : a.start_s < b.start_s;
    });
    t.busy_s.assign((size_t)p, 0.0);
    t.makespan_s = t.pipeline_s;
    for (const TimelineBlock& b : t.blocks) {
        if (b.stream == kStreamCompute) t.busy_s[(size_t)b.row] += b.end_s - b.start_s;
        t.makespan_s = std::max(t.makespan_s, b.end_s);
    }
    return t;
}

std::string batch_legend(const Timeline& t) {
    return "micro-batch " + std::to_string(t.micro_batch) + " × accumulation " + std::to_string(t.micro_batches) +
           " × DP " + std::to_string(t.dp) + " = global batch " + std::to_string(t.global_batch) + " sequences";
}

}  // namespace ptd
