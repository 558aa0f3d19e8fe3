// schedule.cpp — the pipeline schedule (Megatron-LM's 1F1B and interleaved 1F1B orders,
// ZB-H1 of Qi et al. 2023 / sail-sg's zero-bubble fork, DualPipe's closed form from the
// DeepSeek-V3 report, arXiv 2412.19437 Table 2) and the event simulation that places its
// blocks (the estimator's step time comes from it; the planner screens with its bounds).
#include "ptd/model/schedule.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <limits>
#include <unordered_map>
#include <cassert>
#include <cmath>
#include <cstring>

namespace ptd {

// ---- the schedule ---------------------------------------------------------------------

int schedule_warmup(int p, int v, int m, int stage, int group) {
    if (v <= 1) return std::min(p - stage - 1, m);
    // forward_backward_pipelining_with_interleaving (get_pp_rank_microbatches): the group
    // size N = microbatch_group_size_per_vp_stage, p by default (l405).
    const int n = group > 0 ? group : p;
    return std::min(2 * (p - stage - 1) + (v - 1) * n, m * v);
}

namespace {

// Forward (or backward) block k of a stage → (chunk, micro-batch): Megatron's tables,
// micro-batches in groups of N (get_schedule_table; N = `group`, p when 0; the last group
// may be smaller), each group through every chunk in turn.
ScheduleOp virtual_op(int p, int v, int m, int k, Pass pass, int group) {
    ScheduleOp op;
    op.pass = pass;
    if (v <= 1) {
        op.chunk = 0;
        op.micro_batch = k;
        return op;
    }
    const int g = group > 0 ? group : p, full = m / g;
    if (k < full * g * v) {
        const int group = k / (g * v), rem = k % (g * v);
        op.chunk = rem / g;
        op.micro_batch = group * g + rem % g;
    } else {
        const int rem = k - full * g * v, r = m - full * g;
        op.chunk = rem / r;
        op.micro_batch = full * g + rem % r;
    }
    if (pass == Pass::backward) op.chunk = v - 1 - op.chunk;
    return op;
}

}  // namespace

ScheduleOp schedule_op(int p, int v, int m, int stage, int j, int group) {
    const int n = m * v, w = schedule_warmup(p, v, m, stage, group);
    assert(j >= 0 && j < 2 * n);
    if (j < w) return virtual_op(p, v, m, j, Pass::forward, group);
    const int steady = 2 * (n - w);
    if (j < w + steady) {
        const int q = j - w;
        return q % 2 == 0 ? virtual_op(p, v, m, w + q / 2, Pass::forward, group)
                          : virtual_op(p, v, m, q / 2, Pass::backward, group);
    }
    return virtual_op(p, v, m, (n - w) + (j - w - steady), Pass::backward, group);
}

std::vector<ScheduleOp> stage_schedule(int p, int v, int m, int stage, int group) {
    std::vector<ScheduleOp> out;
    out.reserve((size_t)2 * m * v);
    for (int j = 0; j < 2 * m * v; ++j) out.push_back(schedule_op(p, v, m, stage, j, group));
    return out;
}

ScheduleOp schedule_op_zb_h1(int p, int m, int stage, int j) {
    assert(j >= 0 && j < 3 * m);
    const int w = std::min(p - stage - 1, m), d = std::min(stage, m - w), triples = m - w - d;
    auto op = [](Pass pass, int mb) { return ScheduleOp{pass, 0, mb}; };
    if (j < w) return op(Pass::forward, j);  // warm-up, as 1F1B
    j -= w;
    if (j < 2 * d) return op(j % 2 == 0 ? Pass::forward : Pass::backward, j % 2 == 0 ? w + j / 2 : j / 2);  // W deferred
    j -= 2 * d;
    if (j < 3 * triples) {
        const int k = d + j / 3;
        return j % 3 == 0 ? op(Pass::forward, w + k) : j % 3 == 1 ? op(Pass::backward, k) : op(Pass::weight, k - d);
    }
    j -= 3 * triples;
    if (j < 2 * w) {  // cool-down
        const int k = m - w + j / 2;
        return j % 2 == 0 ? op(Pass::backward, k) : op(Pass::weight, k - d);
    }
    j -= 2 * w;
    return op(Pass::weight, m - d + j);  // the deferred W blocks fill the end
}

int schedule_block_count(PipelineSchedule sched, int v, int m) {
    return sched == PipelineSchedule::zb_h1 ? 3 * m : 2 * m * v;
}

ScheduleOp schedule_op(PipelineSchedule sched, int p, int v, int m, int stage, int j, int group) {
    assert(sched != PipelineSchedule::dualpipe);
    if (sched == PipelineSchedule::zb_h1) return schedule_op_zb_h1(p, m, stage, j);
    return schedule_op(p, v, m, stage, j, group);
}

std::vector<ScheduleOp> stage_schedule(PipelineSchedule sched, int p, int v, int m, int stage, int group) {
    std::vector<ScheduleOp> out;
    const int n = schedule_block_count(sched, v, m);
    out.reserve((size_t)n);
    for (int j = 0; j < n; ++j) out.push_back(schedule_op(sched, p, v, m, stage, j, group));
    return out;
}

namespace {

// Shared cores: the schedule placed in time order under processor sharing (schedule.h CoreSharing).
// Each stage runs one block at a time: first its compute part, a work of `compute / e`
// lone-rank seconds (e = 1 + (measured_share − 1) · busy, the share each rank had while the
// probes ran) done at min(1, cores / (n · e / measured_share)) lone-rank seconds per second
// (n: the host's ranks in a compute part now, ranks_per_stage per stage), then its
// communication part (duration − compute) in wall time. Events are block starts and phase
// ends; between two of them every rate is constant, so each step advances to the nearest
// end exactly. The dependencies are simulate_pipeline's.
double simulate_pipeline_shared(const PipelineDurations& d, std::span<double> stage_end, std::vector<PlacedOp>* out) {
    const CoreSharing& sh = *d.sharing;
    const PipelineSchedule sched = d.schedule;
    const int p = d.p, v = d.v, m = d.m, ops = schedule_block_count(sched, v, m);
    assert(d.hop.empty() && "shared cores: the bundled engine sends inside its blocks");
    assert(sh.cores > 0 && sh.ranks_per_stage > 0 && sh.measured_share > 0 && sh.busy >= 0 && sh.busy <= 1);
    const double effective = 1 + (sh.measured_share - 1) * sh.busy;
    assert((int)sh.fwd_compute.size() == p * v && (int)sh.bwd_compute.size() == p * v);
    const size_t cells = (size_t)p * v * m;
    std::vector<double> fend(cells, -1.0), bend(cells, -1.0), clock((size_t)p, 0.0);
    std::vector<double> work((size_t)p, 0.0), wait((size_t)p, 0.0), start((size_t)p, 0.0);
    std::vector<int> pos((size_t)p, 0);
    std::vector<char> busy((size_t)p, 0);
    std::vector<ScheduleOp> cur((size_t)p);
    auto at = [&](int stage, int chunk, int mb) { return ((size_t)chunk * m + mb) * p + stage; };
    if (out) out->reserve(out->size() + (size_t)p * ops);
    double now = 0;
    long long remaining = (long long)p * ops;
    while (remaining > 0) {
        // Start every block whose stage is free and whose input is there.
        for (int s = 0; s < p; ++s) {
            if (busy[(size_t)s] || pos[(size_t)s] >= ops) continue;
            const ScheduleOp op = schedule_op(sched, p, v, m, s, pos[(size_t)s], d.group);
            const int c = op.chunk, i = op.micro_batch;
            double ready = 0;
            if (op.pass == Pass::weight) ready = bend[at(s, c, i)];
            else if (op.pass == Pass::forward) ready = s > 0 ? fend[at(s - 1, c, i)] : c > 0 ? fend[at(p - 1, c - 1, i)] : 0;
            else ready = s < p - 1 ? bend[at(s + 1, c, i)] : c < v - 1 ? bend[at(0, c + 1, i)] : fend[at(s, c, i)];
            if (ready < 0) continue;
            const size_t cell = (size_t)(c * p + s);
            const double dur = op.pass == Pass::forward ? d.fwd[cell] : op.pass == Pass::backward ? d.bwd[cell] : d.wgt[cell];
            const std::span<const double> part = op.pass == Pass::forward ? sh.fwd_compute
                                               : op.pass == Pass::backward ? sh.bwd_compute
                                                                            : sh.wgt_compute;
            const double compute = std::clamp(cell < part.size() ? part[cell] : 0.0, 0.0, dur);
            cur[(size_t)s] = op;
            busy[(size_t)s] = 1;
            start[(size_t)s] = now;
            work[(size_t)s] = compute / effective;
            wait[(size_t)s] = dur - compute;
        }
        int computing = 0, active = 0;
        for (int s = 0; s < p; ++s) {
            if (!busy[(size_t)s]) continue;
            ++active;
            if (work[(size_t)s] > 0) ++computing;
        }
        if (active == 0) {  // nothing runs and nothing can start: the order has a cycle
            std::fprintf(stderr, "ptd: internal error: pipeline schedule deadlocked (p = %d, v = %d, m = %d, group = %d)\n",
                         p, v, m, d.group);
            std::abort();
        }
        const double rate = std::min(1.0, sh.cores / (sh.ranks_per_stage * computing * effective / sh.measured_share));
        // The nearest phase end.
        double dt = std::numeric_limits<double>::infinity();
        for (int s = 0; s < p; ++s) {
            if (!busy[(size_t)s]) continue;
            dt = std::min(dt, work[(size_t)s] > 0 ? work[(size_t)s] / rate : wait[(size_t)s]);
        }
        now += dt;
        for (int s = 0; s < p; ++s) {
            if (!busy[(size_t)s]) continue;
            const bool in_compute = work[(size_t)s] > 0;
            double& left = in_compute ? work[(size_t)s] : wait[(size_t)s];
            left -= in_compute ? rate * dt : dt;
            // Within rounding of zero: this phase ended now (the stage that set dt exactly).
            if (left > 1e-12 * std::max(now, 1e-300)) continue;
            left = 0;
            if (in_compute && wait[(size_t)s] > 0) continue;  // on to its communication
            const ScheduleOp& op = cur[(size_t)s];
            if (op.pass != Pass::weight) (op.pass == Pass::forward ? fend : bend)[at(s, op.chunk, op.micro_batch)] = now;
            clock[(size_t)s] = now;
            if (out) out->push_back(PlacedOp{s, op, start[(size_t)s], now});
            busy[(size_t)s] = 0;
            ++pos[(size_t)s];
            --remaining;
        }
    }
    double makespan = 0;
    for (int s = 0; s < p; ++s) {
        stage_end[(size_t)s] = clock[(size_t)s];
        makespan = std::max(makespan, clock[(size_t)s]);
    }
    return makespan;
}

}  // namespace

double simulate_pipeline(const PipelineDurations& d, std::span<double> stage_end, std::vector<PlacedOp>* out) {
    if (d.sharing) return simulate_pipeline_shared(d, stage_end, out);
    const PipelineSchedule sched = d.schedule;
    const int p = d.p, v = d.v, m = d.m, ops = schedule_block_count(sched, v, m);
    assert(p >= 1 && v >= 1 && m >= 1 && (int)d.fwd.size() == p * v && (int)d.bwd.size() == p * v);
    assert(sched != PipelineSchedule::dualpipe && (sched != PipelineSchedule::zb_h1 || (v == 1 && (int)d.wgt.size() == p)));
    assert((int)stage_end.size() == p && (d.hop.empty() || (int)d.hop.size() == p));
    thread_local std::vector<double> fend, bend, clock, last_f, last_b;
    thread_local std::vector<int> pos;
    const size_t cells = (size_t)p * v * m;
    fend.assign(cells, -1.0);
    bend.assign(cells, -1.0);
    clock.assign((size_t)p, 0.0);
    last_f.assign((size_t)p, 0.0);   // p2pdep: the end of the stage's last forward (0: none yet)
    last_b.assign((size_t)p, -1.0);  // and of its last backward (−1: none yet)
    pos.assign((size_t)p, 0);
    auto at = [&](int stage, int chunk, int mb) { return ((size_t)chunk * m + mb) * p + stage; };
    if (out) out->reserve(out->size() + (size_t)p * ops);
    long long remaining = (long long)p * ops;
    // Sweeps alternate direction: forwards flow to higher stages, backwards to lower ones.
    for (int sweep = 0; remaining > 0; ++sweep) {
        bool progressed = false;
        for (int k = 0; k < p; ++k) {
            const int s = sweep % 2 == 0 ? k : p - 1 - k;
            while (pos[(size_t)s] < ops) {
                const ScheduleOp op = schedule_op(sched, p, v, m, s, pos[(size_t)s], d.group);
                const int c = op.chunk, i = op.micro_batch;
                double ready = 0;
                int from = s;  // the stage of the block it waits for
                if (op.pass == Pass::weight) {
                    ready = bend[at(s, c, i)];  // its B, earlier on the same stage
                } else if (op.pass == Pass::forward) {
                    if (s > 0) ready = fend[at(from = s - 1, c, i)];
                    else if (c > 0) ready = fend[at(from = p - 1, c - 1, i)];
                } else {
                    if (s < p - 1) ready = bend[at(from = s + 1, c, i)];
                    else if (c < v - 1) ready = bend[at(from = 0, c + 1, i)];
                    else ready = fend[at(s, c, i)];
                }
                if (ready < 0) break;  // the block it waits for is not placed yet
                // p2pdep: a forward crosses the link after the stage it came from, a backward
                // the link after its own stage (the wrap-around's is link p − 1 either way). The
                // bytes move once the receive is posted too: after the stage's previous block of
                // the same pass (its first backward's, after the block before it).
                if (from != s && !d.hop.empty()) {
                    const double posted = op.pass == Pass::forward ? last_f[(size_t)s]
                                          : last_b[(size_t)s] >= 0 ? last_b[(size_t)s]
                                                                   : clock[(size_t)s];
                    ready = std::max(ready, posted) + d.hop[(size_t)(op.pass == Pass::forward ? from : s)];
                }
                const double start = std::max(clock[(size_t)s], ready);
                const size_t cell = (size_t)(c * p + s);
                const double dur = op.pass == Pass::forward ? d.fwd[cell] : op.pass == Pass::backward ? d.bwd[cell] : d.wgt[cell];
                const double end = start + dur;
                if (op.pass != Pass::weight) (op.pass == Pass::forward ? fend : bend)[at(s, c, i)] = end;
                if (op.pass != Pass::weight) (op.pass == Pass::forward ? last_f : last_b)[(size_t)s] = end;
                clock[(size_t)s] = end;
                if (out) out->push_back(PlacedOp{s, op, start, end});
                ++pos[(size_t)s];
                --remaining;
                progressed = true;
            }
        }
        // oompt: a block order with a cycle (e.g. Megatron's interleaved order with a group size
        // N < pp, which job validation refuses) leaves blocks unplaced; the makespan of the
        // placed ones would be wrong, so this check stays on in release builds.
        if (!progressed) {
            std::fprintf(stderr,
                         "ptd: internal error: pipeline schedule deadlocked (p = %d, v = %d, m = %d, group = %d): "
                         "the block order has a cycle\n",
                         p, v, m, d.group);
            std::abort();
        }
    }
    double makespan = 0;
    for (int s = 0; s < p; ++s) {
        stage_end[(size_t)s] = clock[(size_t)s];
        makespan = std::max(makespan, clock[(size_t)s]);
    }
    return makespan;
}

namespace {

// The schedule of (p, v, m) compiled to a topological order of its blocks: for each,
// the positions of the block before it on its stage and of the block it waits for
// (0 = none: position 0 holds time 0) and which duration it takes. Evaluating it is one
// max and one add per block. The planner asks for few distinct (p, v, m) — the short
// schedules of pipeline_makespan depend on p and v only — so a few are kept per thread.
struct CompiledSchedule {
    PipelineSchedule sched = PipelineSchedule::automatic;
    int p = 0, v = 0, m = 0;
    int group = 0;  // l405: the interleaved group size (0 = p)
    struct Step {
        int32_t prev, dep, dur;  // positions (1-based) and index into [fwd…, bwd…]
        int32_t link;            // p2pdep: 1 + the link dep's bytes cross (simulate_pipeline), 0 = same stage
        int32_t posted;          // p2pdep: the position after which its receive is posted (simulate_pipeline)
    };
    std::vector<Step> steps;
    std::vector<int32_t> last;  // per stage: position of its last block
};

CompiledSchedule compile_schedule(PipelineSchedule sched, int p, int v, int m, int group) {
    CompiledSchedule cs;
    cs.sched = sched, cs.p = p, cs.v = v, cs.m = m, cs.group = group;
    std::vector<double> ones((size_t)p * v, 1.0), end((size_t)p);
    std::vector<PlacedOp> placed;
    PipelineDurations d{p, v, m, ones, ones, sched, sched == PipelineSchedule::zb_h1 ? std::span<const double>(ones) : std::span<const double>(), group};
    simulate_pipeline(d, end, &placed);  // the placement order is a topological order
    // pspeed5: the simulation places a stage's ready blocks one after another, so each step
    // waited for the one just before it (its `prev`), one max and one add of latency per
    // block. Ordered by their end with unit durations instead, the blocks of one level (one
    // per stage, none waiting for another) come together and the processor runs them side
    // by side. Still a topological order: a block ends after every block it waits for, and a
    // stage's blocks keep their order. The evaluation is the same max and add per block on
    // the same operands, so the answers are the same bits.
    std::stable_sort(placed.begin(), placed.end(), [](const PlacedOp& a, const PlacedOp& b) { return a.end_s < b.end_s; });
    const size_t cells = (size_t)p * v * m;
    std::vector<int32_t> fpos(cells, 0), bpos(cells, 0), stage_pos((size_t)p, 0);
    std::vector<int32_t> last_f((size_t)p, 0), last_b((size_t)p, -1);  // p2pdep: as simulate_pipeline's
    auto at = [&](int stage, int chunk, int mb) { return ((size_t)chunk * m + mb) * p + stage; };
    cs.steps.reserve(placed.size());
    for (size_t k = 0; k < placed.size(); ++k) {
        const PlacedOp& po = placed[k];
        const int s = po.stage, c = po.op.chunk, i = po.op.micro_batch;
        const int32_t pos = (int32_t)k + 1;
        int32_t dep = 0;
        int from = s;
        if (po.op.pass == Pass::weight) {
            dep = bpos[at(s, c, i)];
        } else if (po.op.pass == Pass::forward) {
            if (s > 0) dep = fpos[at(from = s - 1, c, i)];
            else if (c > 0) dep = fpos[at(from = p - 1, c - 1, i)];
            fpos[at(s, c, i)] = pos;
        } else {
            if (s < p - 1) dep = bpos[at(from = s + 1, c, i)];
            else if (c < v - 1) dep = bpos[at(from = 0, c + 1, i)];
            else dep = fpos[at(s, c, i)];
            bpos[at(s, c, i)] = pos;
        }
        const int32_t dur = (po.op.pass == Pass::forward ? 0 : po.op.pass == Pass::backward ? p * v : 2 * p * v) + c * p + s;
        const int32_t link = from == s ? 0 : 1 + (po.op.pass == Pass::forward ? from : s);
        const int32_t posted = po.op.pass == Pass::forward ? last_f[(size_t)s]
                             : po.op.pass == Pass::weight  ? 0
                             : last_b[(size_t)s] >= 0      ? last_b[(size_t)s]
                                                           : stage_pos[(size_t)s];
        cs.steps.push_back({stage_pos[(size_t)s], dep, dur, link, posted});
        if (po.op.pass == Pass::forward) last_f[(size_t)s] = pos;
        if (po.op.pass == Pass::backward) last_b[(size_t)s] = pos;
        stage_pos[(size_t)s] = pos;
    }
    cs.last = stage_pos;
    return cs;
}

const CompiledSchedule& compiled_schedule(PipelineSchedule sched, int p, int v, int m, int group) {
    thread_local std::vector<CompiledSchedule> cache;
    thread_local size_t next = 0;
    for (const CompiledSchedule& cs : cache)
        if (cs.sched == sched && cs.p == p && cs.v == v && cs.m == m && cs.group == group) return cs;
    constexpr size_t kKept = 256;
    if (cache.size() < kKept) {
        cache.push_back(compile_schedule(sched, p, v, m, group));
        return cache.back();
    }
    cache[next] = compile_schedule(sched, p, v, m, group);
    const CompiledSchedule& out = cache[next];
    next = (next + 1) % kKept;
    return out;
}

// The makespan of a compiled schedule for durations d (m from the schedule).
double run_compiled(const CompiledSchedule& cs, const PipelineDurations& d, std::span<double> stage_end) {
    thread_local std::vector<double> end, dur;
    end.resize(cs.steps.size() + 1);
    end[0] = 0;
    const size_t pv = (size_t)cs.p * cs.v;
    dur.resize(3 * pv);
    std::copy(d.fwd.begin(), d.fwd.end(), dur.begin());
    std::copy(d.bwd.begin(), d.bwd.end(), dur.begin() + (ptrdiff_t)pv);
    std::copy(d.wgt.begin(), d.wgt.end(), dur.begin() + (ptrdiff_t)(2 * pv));
    const CompiledSchedule::Step* st = cs.steps.data();
    double* e = end.data();
    const double* du = dur.data();
    // p2pdep: a dependency across stages waits out its link's hop ([0] = none).
    thread_local std::vector<double> hops;
    hops.assign((size_t)cs.p + 1, 0.0);
    std::copy(d.hop.begin(), d.hop.end(), hops.begin() + 1);
    const double* hp = hops.data();
    // (Without a hop the posted block's end, on the same stage, is no later than prev's.)
    for (size_t k = 0, n = cs.steps.size(); k < n; ++k)
        e[k + 1] = std::max(e[st[k].prev], std::max(e[st[k].dep], e[st[k].posted]) + hp[st[k].link]) + du[st[k].dur];
    double makespan = 0;
    for (int s = 0; s < cs.p; ++s) {
        stage_end[(size_t)s] = e[cs.last[(size_t)s]];
        makespan = std::max(makespan, stage_end[(size_t)s]);
    }
    return makespan;
}

}  // namespace

namespace {

// pspeed: 1F1B (v = 1) without placing blocks one by one. Round r of stage s is its forward
// of micro-batch r + w_s (w_s = p − 1 − s warm-up forwards) and then its backward of
// micro-batch r; a forward waits for the previous stage's forward of the round before, a
// backward for the next stage's backward of the same round (the last stage's for its own
// forward). With T_s = f_s + b_s and ψ(a) = b_0 + … + b_a, the end of stage a's forward in
// round r plus ψ(a) is a longest walk over rounds in which each round is spent on one stage
// and earns its T, a walk moves at most one stage deeper per round and any number of stages
// up (a jump collects the backwards it passes, which ψ accounts for); the warm-up earns f on
// the rounds a stage waits. The longest such walk spends every round it need not spend
// elsewhere on one stage k (its "loop stage"): the stages it must descend through on the way
// to k and out of it, and T_k for the rest (at least one round). So for m ≥ p each stage's
// end is a maximum over loop stages k of lines in m:
//   y0_c   = T_0 + … + T_c + (p − 1 − c)·max(f_0 … f_c)           (forward of round 0 on c)
//   In_k   = max( max_{c ≥ k−1} y0_c,  max_{c_lo ≤ c < k−1} y0_c + Σ_{j=c+1}^{k−1} (T_j − T_k) )
//   W(ρ)   = max_k In_k + (m − p + ρ)·T_k + Σ_{j=k+1}^{ρ} (T_j − T_k)   (0 ≤ ρ < p)
//   end_s  = max_{ρ ≥ s} [ W(ρ) + (p − 1 − ρ)·max(b_s … b_ρ) ] − (b_0 + … + b_{s−1})
// where W(ρ) is the best walk at round m − p + ρ that respects the cool-down (stage a has
// no forward after round m − p + a), c_lo = k − (m − p) − ρ when ρ ≤ k (the walk must reach
// k in time; 0 otherwise, and always when m ≥ 2p − 1), and the last term the cool-down's
// backwards, the rounds after ρ spent on the stage with the longest backward among s … ρ
// (the cool-down only lets a stage repeat backwards from round m − p + s on). Stages with equal
// T give equal lines (descending through equal stages costs nothing), so only the first of
// each run of equal T is a loop stage, and runs of equal b share their suffix maximum: a
// balanced split (≤ 4 kinds of stage) costs O(p). Equal to simulate_pipeline up to rounding
// (tests/schedule/fast_makespan.cpp checks it against the simulation; m < p keeps the general path).
double one_f_one_b_closed_form(const PipelineDurations& d, std::span<double> stage_end) {
    const int p = d.p, m = d.m;
    const double *f = d.fwd.data(), *b = d.bwd.data();
    assert(p >= 2 && m >= p && d.v == 1);
    constexpr double kNone = -std::numeric_limits<double>::infinity();
    // S: prefix sums of T (S[c] = T_0 + … + T_c); g[k]: a loop stage's exit constant (below),
    // kNone elsewhere; loops: the loop stages in order.
    thread_local std::vector<double> T, S, y0, suffix_y0, W, in_from, g;
    thread_local std::vector<int> loops;
    T.resize((size_t)p), S.resize((size_t)p), y0.resize((size_t)p), suffix_y0.resize((size_t)p), in_from.resize((size_t)p);
    W.assign((size_t)p, kNone);
    g.assign((size_t)p, kNone);
    loops.clear();
    double sum_t = 0, max_f = kNone;
    for (int c = 0; c < p; ++c) {
        T[(size_t)c] = f[c] + b[c];
        sum_t += T[(size_t)c];
        S[(size_t)c] = sum_t;
        max_f = std::max(max_f, f[c]);
        y0[(size_t)c] = sum_t + (p - 1 - c) * max_f;
    }
    double best = kNone;
    for (int c = p - 1; c >= 0; --c) suffix_y0[(size_t)c] = best = std::max(best, y0[(size_t)c]);
    bool any_limited = false;
    for (int k = 0; k < p; ++k) {
        const double tk = T[(size_t)k];
        if (k > 0 && tk == T[(size_t)k - 1]) continue;  // same lines as the run's first stage
        loops.push_back(k);
        // in_from[c]: In_k over entries from stages ≥ c (jumps from c ≥ k − 1, descents below).
        // At least one round on k: a walk that ends on k (ρ ≤ k) after m − p + ρ rounds can
        // have descended from c ≥ k − (m − p) − ρ only; no limit when m − p ≥ k (always when
        // m ≥ 2p − 1), and then only in_from[0] is needed.
        const bool limited = m - p < k;
        any_limited = any_limited || limited;
        if (limited)
            for (int c = std::max(k - 1, 0); c < p; ++c) in_from[(size_t)c] = suffix_y0[(size_t)c];
        double in = suffix_y0[(size_t)std::max(k - 1, 0)], descent = 0;
        for (int c = k - 2; c >= 0; --c) {
            descent += T[(size_t)c + 1] - tk;
            in = std::max(in, y0[(size_t)c] + descent);
            if (limited) in_from[(size_t)c] = in;
        }
        for (int rho = 0; rho <= k; ++rho) {
            const double entry = limited ? in_from[(size_t)std::max(0, k - (m - p) - rho)] : in;
            W[(size_t)rho] = std::max(W[(size_t)rho], entry + (double)(m - p + rho) * tk);
        }
        // pspeed4: the walk's exit from k, W(ρ > k) = In_k + (m − p + ρ)·T_k + Σ_{j=k+1}^{ρ} (T_j − T_k)
        // = g_k + S[ρ] with g_k = In_k + (m − p + k)·T_k − S[k]: one sweep below for every loop stage.
        g[(size_t)k] = in + (double)(m - p + k) * tk - S[(size_t)k];
    }
    double G = kNone;  // max g_k over the loop stages k < ρ
    for (int rho = 0; rho < p; ++rho) {
        W[(size_t)rho] = std::max(W[(size_t)rho], S[(size_t)rho] + G);
        G = std::max(G, g[(size_t)rho]);
    }
    // end_s = max_{j ≥ s} H_j − Σ_{i<s} b_i with H_j = max_{ρ ≥ j} W(ρ) + (p − 1 − ρ)·b_j.
    // pspeed4: where b changes, H_j needs the maximum over ρ ≥ j afresh. From a loop stage k_i
    // to the stage before the next one, T is T_{k_i} and W is the maximum of fixed lines in ρ:
    // the entries of the loop stages after, k_i's own line (its entry, continued by its exit
    // g_{k_i} + S[ρ]) and the earlier exits' S[ρ] + G. So W(ρ) − ρ·b_j is convex on each such
    // segment and its maximum over a part of one lies at an end: the candidates are j, the end
    // of j's segment, and each later segment's two ends. A limited walk's entry depends on ρ
    // otherwise than linearly: then every ρ is scanned.
    auto best_from = [&](int j, double bj) {
        double h = kNone;
        auto at = [&](int rho) { h = std::max(h, W[(size_t)rho] + (p - 1 - rho) * bj); };
        if (any_limited) {
            for (int rho = j; rho < p; ++rho) at(rho);
            return h;
        }
        auto segment_end = [&](std::vector<int>::const_iterator next) { return (next == loops.cend() ? p : *next) - 1; };
        auto next = std::upper_bound(loops.cbegin(), loops.cend(), j);
        at(j);
        at(segment_end(next));
        for (; next != loops.cend(); ++next) at(*next), at(segment_end(next + 1));
        return h;
    };
    double b_before = 0;
    for (int s = 0; s < p; ++s) b_before += b[s];
    double h = kNone, suffix_h = h, makespan = 0;
    for (int j = p - 1; j >= 0; --j) {
        if (j < p - 1 && b[j] == b[j + 1]) h = std::max(h, W[(size_t)j] + (p - 1 - j) * b[j]);
        else h = best_from(j, b[j]);
        suffix_h = std::max(suffix_h, h);
        b_before -= b[j];
        stage_end[(size_t)j] = suffix_h - b_before;
        makespan = std::max(makespan, stage_end[(size_t)j]);
    }
    return makespan;
}

double pipeline_makespan_uncached(const PipelineDurations& d, std::span<double> stage_end) {
    const int p = d.p, v = d.v, m = d.m;
    const PipelineSchedule sched = d.schedule;
    const bool split = sched == PipelineSchedule::zb_h1;
    if (p > 1 && v == 1 && !split && m >= p && d.hop.empty()) return one_f_one_b_closed_form(d, stage_end);  // pspeed (pspeed2: first)
    // One micro-batch through the slowest stage (all its chunks, forward and backward):
    // no steady state adds less per micro-batch.
    double t_max = 0;
    for (int s = 0; s < p; ++s) {
        double t = 0;
        for (int c = 0; c < v; ++c) t += d.fwd[(size_t)(c * p + s)] + d.bwd[(size_t)(c * p + s)] + (split ? d.wgt[(size_t)(c * p + s)] : 0.0);
        t_max = std::max(t_max, t);
    }
    if (p == 1) {  // gradient accumulation: m micro-batches back to back
        stage_end[0] = m * t_max;
        return stage_end[0];
    }
    // Short schedules are placed block by block. Longer ones reach a steady state in which
    // each further q micro-batches (1; for the interleaved schedule a group of p) add the
    // same time to every stage's end: one slowest-stage micro-batch each for 1F1B with its
    // usual stages, more when a chain across stages is slower (interleaved chunks going
    // round the ring), never less than t_max. The shortcut places schedules of m1, m1 + q and m1 + 2q micro-batches
    // (compiled, cached per thread) and, when both increments agree on every stage, adds
    // the rest arithmetically; otherwise it doubles m1, down to the full simulation.
    // (Interleaved with m not a multiple of p — which the planner never asks for — always
    // takes the full simulation: its partial last group breaks the period.)
    // l405: the period of the interleaved schedule is its group of N micro-batches (p by default).
    const int group = v > 1 && d.group > 0 && d.group != p ? d.group : 0, g = group > 0 ? group : p;
    if (v > 1 && m % g != 0) return simulate_pipeline(d, stage_end);
    const int q = v <= 1 ? 1 : g;
    int m1 = v <= 1 ? 2 * p : g * ((2 * p + g - 1) / g);
    thread_local std::vector<double> e0, e1;
    while (m1 + 2 * q < m) {
        e0.resize((size_t)p);
        e1.resize((size_t)p);
        run_compiled(compiled_schedule(sched, p, v, m1, group), d, e0);
        run_compiled(compiled_schedule(sched, p, v, m1 + q, group), d, e1);
        run_compiled(compiled_schedule(sched, p, v, m1 + 2 * q, group), d, stage_end);
        bool steady = true;
        for (int s = 0; s < p && steady; ++s) {
            const double a = e1[(size_t)s] - e0[(size_t)s], b = stage_end[(size_t)s] - e1[(size_t)s];
            // Equal increments at the slowest stage's rate or above: a plateau at a
            // faster stage's rate (before the slowest takes over) is not the steady state.
            steady = std::abs(a - b) <= 1e-10 * stage_end[(size_t)s] && b >= q * t_max * (1 - 1e-12);
        }
        if (steady) {
            const double groups = (double)(m - m1 - 2 * q) / q;
            double makespan = 0;
            for (int s = 0; s < p; ++s) {
                stage_end[(size_t)s] += groups * (stage_end[(size_t)s] - e1[(size_t)s]);
                makespan = std::max(makespan, stage_end[(size_t)s]);
            }
            return makespan;
        }
        m1 *= 2;  // stays a multiple of the group
    }
    // Short schedules recur across the planner's layouts (same p, v, m, other durations):
    // small ones are compiled once and cached like the shortcut's.
    if ((long long)schedule_block_count(sched, v, m) * p <= 16384) return run_compiled(compiled_schedule(sched, p, v, m, group), d, stage_end);
    return simulate_pipeline(d, stage_end);
}

// Remembered makespans, keyed by everything the result depends on (schedule, p, v, m and
// every duration, compared exactly), so a repeated question costs a hash and a compare.
// The planner asks repeated questions: layouts that differ only in ZeRO stage, optimizer
// sharding or a memory-only choice have the same blocks. Direct-mapped, per thread; its
// entries keep their buffers, so nothing is allocated once they have grown.
struct MakespanMemo {
    struct Entry {
        uint64_t hash = 0;
        int p = 0, v = 0, m = 0;
        PipelineSchedule sched = PipelineSchedule::automatic;
        int group = 0;  // l405
        size_t hops = 0;  // p2pdep: how many of `durations` are d.hop (at their end)
        bool used = false;
        uint64_t stamp = 0;  // last use
        std::vector<double> durations, stage_end;
        double makespan = 0;
    };
    static constexpr size_t kEntries = 8192;
    std::vector<Entry> entries = std::vector<Entry>(kEntries);
    uint64_t clock = 0;
};

uint64_t hash_durations(const PipelineDurations& d) {
    // One xor and one odd multiply per word (pspeed3), in four lanes that take every fourth
    // word of a span: a single chain waits out the multiply's latency at every word, four
    // chains overlap (a 64-stage pipeline hashes 128 durations per question).
    constexpr uint64_t kOdd = 0x9e3779b97f4a7c15ull;
    uint64_t lane[4] = {1469598103934665603ull, 0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull};
    auto word = [](double x) {
        uint64_t bits;
        std::memcpy(&bits, &x, sizeof bits);
        return bits;
    };
    lane[0] = (lane[0] ^ ((uint64_t)d.p << 40 ^ (uint64_t)d.v << 20 ^ (uint64_t)d.m ^ (uint64_t)d.schedule << 60)) * kOdd;
    lane[1] = (lane[1] ^ (uint64_t)d.group) * kOdd;  // l405
    uint64_t span_id = 0;
    for (auto span : {d.fwd, d.bwd, d.wgt, d.hop}) {  // p2pdep: the hops too
        // Each span's length goes in, so moving a word from one span to the next changes the hash.
        lane[2] = (lane[2] ^ (span.size() << 8 ^ span_id++)) * kOdd;
        const double* x = span.data();
        size_t i = 0;
        for (const size_t n = span.size(); i + 4 <= n; i += 4)
            for (int k = 0; k < 4; ++k) lane[k] = (lane[k] ^ word(x[i + (size_t)k])) * kOdd;
        for (int k = 0; i < span.size(); ++i, ++k) lane[k] = (lane[k] ^ word(x[i])) * kOdd;
    }
    uint64_t h = lane[0];
    for (int k = 1; k < 4; ++k) h = (h ^ (lane[k] + 0x632be59bd9b4e019ull * (uint64_t)k)) * kOdd;
    // splitmix64's finaliser: the slot index takes the low bits, which the multiplies leave weak.
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

bool same_durations(const std::vector<double>& kept, size_t kept_hops, const PipelineDurations& d) {
    const size_t n1 = d.fwd.size(), n2 = d.bwd.size(), n3 = d.wgt.size(), n4 = d.hop.size();
    if (kept.size() != n1 + n2 + n3 + n4 || kept_hops != n4) return false;
    return std::equal(d.fwd.begin(), d.fwd.end(), kept.begin()) &&
           std::equal(d.bwd.begin(), d.bwd.end(), kept.begin() + (ptrdiff_t)n1) &&
           std::equal(d.wgt.begin(), d.wgt.end(), kept.begin() + (ptrdiff_t)(n1 + n2)) &&
           std::equal(d.hop.begin(), d.hop.end(), kept.begin() + (ptrdiff_t)(n1 + n2 + n3));
}

MakespanMemo& makespan_memo() {
    thread_local MakespanMemo memo;
    return memo;
}

}  // namespace

void clear_pipeline_makespan_memo() {
    MakespanMemo& memo = makespan_memo();
    for (MakespanMemo::Entry& e : memo.entries) e.used = false, e.stamp = 0;
    memo.clock = 0;
}

// pspeed2: the pipeline depth from which 1F1B's closed form goes through the memo.
constexpr int kMemoFrom1F1B = 16;

double pipeline_makespan(const PipelineDurations& d, std::span<double> stage_end) {
    if (d.schedule == PipelineSchedule::dualpipe) return dualpipe_makespan(d, {}, stage_end);
    if (d.sharing) return simulate_pipeline_shared(d, stage_end, nullptr);  // shared cores: no shortcut, no memo
    // pspeed: 1F1B's closed form (and p = 1) costs less than the memo's hash, compare and copy
    // on short pipelines; pspeed2: its loops grow with p times the kinds of stage, the memo's
    // with p alone, so from 16 stages on a repeated question (layouts that differ in ZeRO
    // stage, optimizer sharding or offload only) is answered from the memo.
    if (d.v == 1 && d.schedule != PipelineSchedule::zb_h1 && (d.p == 1 || d.m >= d.p) && d.p < kMemoFrom1F1B && d.hop.empty())
        return pipeline_makespan_uncached(d, stage_end);
    MakespanMemo& memo = makespan_memo();
    const uint64_t h = hash_durations(d);
    // Two ways per set: a question replaces the older of the two.
    const size_t set = (size_t)(h % (MakespanMemo::kEntries / 2)) * 2;
    for (size_t k = set; k < set + 2; ++k) {
        MakespanMemo::Entry& e = memo.entries[k];
        if (e.used && e.hash == h && e.p == d.p && e.v == d.v && e.m == d.m && e.sched == d.schedule &&
            e.group == d.group && same_durations(e.durations, e.hops, d)) {
            std::copy(e.stage_end.begin(), e.stage_end.end(), stage_end.begin());
            e.stamp = ++memo.clock;
            return e.makespan;
        }
    }
    MakespanMemo::Entry& e = memo.entries[memo.entries[set].stamp <= memo.entries[set + 1].stamp ? set : set + 1];
    e.stamp = ++memo.clock;
    const double makespan = pipeline_makespan_uncached(d, stage_end);
    e.used = true;
    e.hash = h;
    e.p = d.p, e.v = d.v, e.m = d.m, e.sched = d.schedule, e.group = d.group, e.hops = d.hop.size();
    e.durations.assign(d.fwd.begin(), d.fwd.end());
    e.durations.insert(e.durations.end(), d.bwd.begin(), d.bwd.end());
    e.durations.insert(e.durations.end(), d.wgt.begin(), d.wgt.end());
    e.durations.insert(e.durations.end(), d.hop.begin(), d.hop.end());  // p2pdep
    e.stage_end.assign(stage_end.begin(), stage_end.end());
    e.makespan = makespan;
    return makespan;
}

double dualpipe_makespan(const PipelineDurations& d, std::span<const double> fb_hidden, std::span<double> stage_end) {
    const int p = d.p, m = d.m;
    assert(d.v == 1 && p >= 2 && p % 2 == 0 && (int)stage_end.size() == p);
    double makespan = 0;
    for (int r = 0; r < p; ++r) {
        // Rank r runs stage r for one direction and stage p − 1 − r for the other, half the
        // micro-batches each: per micro-batch the mean of the two.
        const int mirror = p - 1 - r, half_rank = std::min(r, mirror);
        auto mean = [&](std::span<const double> x) { return x.empty() ? 0.0 : 0.5 * (x[(size_t)r] + x[(size_t)mirror]); };
        const double f = mean(d.fwd), w = mean(d.wgt), b_full = mean(d.bwd) + w, hidden = mean(fb_hidden);
        const double f_and_b = f + b_full - hidden;
        // F&B pairs on this rank in DeepSeek's DualPipe.step(): 2·(m/2 − p + h + 1) in the
        // main phase (the middle ranks' first one not overlapped) and p/2 − h − 1 after it.
        const double pairs = std::max(0, m - 3 * p / 2 + half_rank + 1 - (half_rank == p / 2 - 1 ? 1 : 0));
        const double bubble = std::max(0.0, (p / 2.0 - 1.0) * (f_and_b + b_full - 3.0 * w));
        stage_end[(size_t)r] = m * (f + b_full) - pairs * hidden + bubble;
        makespan = std::max(makespan, stage_end[(size_t)r]);
    }
    return makespan;
}

double pipeline_makespan_lower(const PipelineDurations& d, std::span<double> stage_end_lo) {
    // Shared cores make blocks shorter than their durations: the bounds below would
    // not bound; the placement itself is the (exact) bound.
    if (d.sharing) return simulate_pipeline_shared(d, stage_end_lo, nullptr);
    const int p = d.p, v = d.v, m = d.m;
    assert((int)stage_end_lo.size() == p);
    assert(d.schedule != PipelineSchedule::dualpipe && "DualPipe's closed form needs no bounds");
    // ZB-H1: a stage may end with deferred W blocks while the stages before it drain, so
    // only each stage's own floor bounds the makespan (no drain term).
    const bool split = d.schedule == PipelineSchedule::zb_h1;
    double fill = 0, drain = 0, lower = 0;  // chunk 0's forwards / backwards on the stages before s
    for (int s = 0; s < p; ++s) {
        double busy = 0;
        for (int c = 0; c < v; ++c) busy += d.fwd[(size_t)(c * p + s)] + d.bwd[(size_t)(c * p + s)] + (split ? d.wgt[(size_t)(c * p + s)] : 0.0);
        stage_end_lo[(size_t)s] = fill + m * busy;
        lower = std::max(lower, stage_end_lo[(size_t)s] + (split ? 0.0 : drain));
        const double hop = d.hop.empty() ? 0.0 : d.hop[(size_t)s];  // p2pdep: the link to stage s + 1
        fill += d.fwd[(size_t)s] + hop;
        drain += d.bwd[(size_t)s] + hop;
    }
    return lower;
}

double pipeline_makespan_upper(const PipelineDurations& d) {
    if (d.sharing) {  // shared cores: exact, as pipeline_makespan_lower
        std::vector<double> end((size_t)d.p);
        return simulate_pipeline_shared(d, end, nullptr);
    }
    double f_max = 0, b_max = 0;
    for (double x : d.fwd) f_max = std::max(f_max, x);
    for (double x : d.bwd) b_max = std::max(b_max, x);
    // p2pdep: the longest hop after every block bounds each link's hop after those whose
    // receiver is on another stage.
    double hop_max = 0;
    for (double x : d.hop) hop_max = std::max(hop_max, x);
    f_max += hop_max, b_max += hop_max;
    assert(d.schedule != PipelineSchedule::dualpipe && "DualPipe's closed form needs no bounds");
    if (d.schedule == PipelineSchedule::zb_h1) {
        // Every block raised to the longest of all: equal F, B and W blocks take
        // 3m + p − 1 blocks' time (the paper's bubble (p − 1)(F + B − W) at F = B = W), and
        // p − m more when m < p (the fill and drain are not covered); tests/schedule/zero_bubble.cpp
        // checks both against the simulation.
        double u = std::max(f_max, b_max);
        for (double x : d.wgt) u = std::max(u, x);
        return u * (3.0 * d.m + d.p - 1 + std::max(0, d.p - d.m));
    }
    // The schedule with every forward f_max and every backward b_max is at least as long.
    // Its makespan is the longest path through the schedule's blocks, a·f + b·r per path,
    // so g(r) = makespan(f = 1, b = r) is convex and piecewise linear in r: the chord
    // between two sampled ratios lies above it. Ratios outside the samples fall back to
    // max(f, b) times the unit-block makespan g(1).
    static constexpr double kRatios[] = {0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0};
    constexpr size_t kN = std::size(kRatios);
    constexpr size_t kOne = 3;  // kRatios[kOne] == 1
    // Samples are simulated on first use (NaN until then): a layout needs two of them.
    thread_local std::unordered_map<uint64_t, std::array<double, kN>> cache;
    // l405: + the group size N (p < 2^15, v ≤ 1024, m < 2^22, N < 2^16 in any job).
    const uint64_t key = (uint64_t)d.p << 49 | (uint64_t)d.v << 38 | (uint64_t)d.m << 16 | (uint64_t)(d.group & 0xffff);
    auto it = cache.find(key);
    if (it == cache.end()) {
        if (cache.size() >= 65536) cache.clear();
        std::array<double, kN> unknown;
        unknown.fill(std::numeric_limits<double>::quiet_NaN());
        it = cache.emplace(key, unknown).first;
    }
    std::array<double, kN>& g = it->second;
    auto sample = [&](size_t k) {
        if (std::isnan(g[k])) {
            thread_local std::vector<double> ones, ratio, end;
            ones.assign((size_t)d.p * d.v, 1.0);
            ratio.assign((size_t)d.p * d.v, kRatios[k]);
            end.resize((size_t)d.p);
            PipelineDurations unit{d.p, d.v, d.m, ones, ratio};
            unit.group = d.group;  // l405
            g[k] = pipeline_makespan(unit, end);
        }
        return g[k];
    };
    if (f_max > 0) {
        const double r = b_max / f_max;
        for (size_t k = 0; k + 1 < kN; ++k)
            if (r >= kRatios[k] && r <= kRatios[k + 1]) {
                const double w = (r - kRatios[k]) / (kRatios[k + 1] - kRatios[k]);
                return f_max * ((1 - w) * sample(k) + w * sample(k + 1));
            }
    }
    return std::max(f_max, b_max) * sample(kOne);
}

}  // namespace ptd
