// bench_score_dump.cpp — every number evaluate_layout returns, in hexfloat, for the
// published runs' own layouts and variations of them (tp, pp, vpp, micro-batch, ZeRO,
// recompute, SP, rank order, 1F1B / interleaved / ZB-H1 / DualPipe; about 97,000 layouts),
// each without detail, with bounds and with detail (pspeed2). Not a figure: run it on two
// builds and compare the outputs (cmp) to show that a speed change moved no number.
//   ./build/bin/bench_score_dump [published_runs.toml] > scores.txt
#include <cstdio>
#include <string>
#include <vector>
#include "ptd/model/estimate.h"
#include "ptd/plan/planner.h"
#include "ptd/spec/presets.h"
#include "accuracy/published_run.h"
using namespace ptd;
static void put(const char* k, double x) { std::printf(" %s=%a", k, x); }
static void score_line(const LayoutScore& s) {
    put("tok", s.tokens_per_s); put("step", s.step_s); put("peak", s.peak_bytes); put("mfu", s.mfu); put("hfu", s.hfu);
    std::printf(" fits=%d ws=%d", (int)s.fits, s.worst_stage);
    const TimeBreakdown& t = s.time;
    put("c", t.compute); put("tp", t.tp_comm); put("cp", t.cp_comm); put("ep", t.ep_comm); put("pp", t.pp_comm);
    put("bub", t.bubble); put("dp", t.dp_comm); put("opt", t.optimizer); put("off", t.offload);
    const MemoryBreakdown& m = s.worst_mem;
    put("mp", m.params); put("mg", m.grads); put("mo", m.optimizer); put("ma", m.activations); put("mt", m.temp);
    put("mf", m.fragmentation); put("mh", m.host); put("hb", s.host_bytes_per_node);
}
static long n_eval = 0;
static void eval_all(const EstimateContext& ctx, const LayoutChoice& c, const std::vector<int>& lps, const std::string& tag) {
    std::printf("%s tp%d pp%d dp%d cp%d ep%d v%d mb%d z%d do%d sp%d rc%d o%d s%d:", tag.c_str(), c.tp, c.pp, c.dp, c.cp, c.ep, c.vpp,
                c.micro_batch, c.zero, (int)c.distributed_optimizer, (int)c.sequence_parallel, (int)c.recompute, c.order, (int)c.schedule);
    LayoutScore a = evaluate_layout(ctx, c, lps, nullptr);
    score_line(a);
    StepBounds b; b.want_hi = true;
    LayoutScore bs = evaluate_layout(ctx, c, lps, nullptr, &b);
    put("lo", b.lo_s); put("hi", b.hi_s); put("bpeak", bs.peak_bytes);
    Estimate e;
    LayoutScore d = evaluate_layout(ctx, c, lps, &e);
    std::printf(" |D"); score_line(d); put("pipe", e.pipeline_s); put("sync", e.tail_sync_s);
    for (const StageEstimate& s : e.stages) { put("e", s.pipeline_end_s); put("f", s.fwd_s); put("b", s.bwd_s); put("mt", s.mem.total()); }
    std::printf("\n");
    n_eval += 3;
}
int main(int argc, char** argv) {
    auto presets = load_presets();
    if (!presets) {
        std::fprintf(stderr, "%s\n", presets.error().str().c_str());
        return 1;
    }
    const std::string path = argc > 1 ? argv[1] : std::string(PTD_SOURCE_DIR) + "/bench/accuracy/published_runs.toml";
    std::vector<Run> runs = load_runs(path, *presets);
    for (const Run& r : runs) {
        if (!r.skip.empty()) continue;
        const JobSpec& job = r.job;
        EstimateContext ctx = make_estimate_context(job);
        LayoutChoice own = layout_choice_of(job);
        eval_all(ctx, own, job.parallel.layers_per_stage, r.name + " own");
        const int world = job.world_size();
        const ModelSpec& m = job.model;
        for (int tp : {1, 2, 4, 8}) for (int pp : {1, 2, 3, 4, 6, 8, 16}) for (int v : {1, 2, 3}) {
            if (m.heads % tp || (m.kv_heads > 0 && m.kv_heads % tp && tp % m.kv_heads) || m.ffn_hidden % tp) continue;
            if (pp > m.layers || (v > 1 && (pp < 2 || m.layers % (pp * v)))) continue;
            const int cp = std::max(own.cp, 1), ep = std::max(own.ep, 1);
            if (world % (tp * pp * cp)) continue;
            const int dp = world / (tp * pp * cp);
            if ((dp * cp) % ep || job.training.global_batch % dp) continue;
            std::vector<int> lps = (pp > 1 && m.layers % pp) ? balanced_layers_per_stage(m.layers, pp) : std::vector<int>{};
            if (v > 1 && !lps.empty()) continue;
            for (int mb : {1, 2}) for (int zero : {0, 1, 3}) for (int rc = 0; rc < 3; ++rc) for (int sp : {0, 1}) for (int o : {0, 2})
            for (PipelineSchedule sch : {PipelineSchedule::automatic, PipelineSchedule::zb_h1, PipelineSchedule::dualpipe}) {
                if (sp && tp == 1) continue;
                const int per = job.training.global_batch / dp;
                if (per % mb) continue;
                const int mbs = per / mb;
                if (v > 1 && (mbs % pp)) continue;
                if (sch != PipelineSchedule::automatic && (pp < 2 || v > 1)) continue;
                if (sch == PipelineSchedule::dualpipe && (pp % 2 || m.layers % pp || mbs < 2 * pp || mbs % 2)) continue;
                if ((zero + rc + sp + o + mb + (int)sch) % 3 && !(tp == own.tp && pp == own.pp)) continue;  // thin the space
                LayoutChoice c = own;
                c.tp = tp, c.pp = pp, c.dp = dp, c.cp = cp, c.ep = ep, c.vpp = v, c.micro_batch = mb, c.zero = zero;
                c.distributed_optimizer = false, c.sequence_parallel = sp, c.recompute = (Recompute)rc, c.order = o, c.schedule = sch;
                c.offload_optimizer = OffloadDevice::none, c.offload_params = false;
                eval_all(ctx, c, lps, r.name);
            }
        }
    }
    std::fprintf(stderr, "%ld evaluations\n", n_eval);
    return 0;
}
