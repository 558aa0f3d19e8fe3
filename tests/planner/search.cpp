// search.cpp — the layout planner: pruning never changes the answer (compared with
// exhaustive search under tight memory), the estimator properties pruning relies on,
// every planned layout fits and validates, the job's own rank, options, MoE, errors,
// cancellation, the why-best line, and that screening layouts by step-time
// bounds finds what simulating every schedule finds.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptd/plan/planner.h"
#include "ptd/spec/presets.h"

#include "job_test_util.h"

namespace {

using namespace ptd;
using namespace ptd_test;


// A valid job: `model` on nodes × gpn `gpu`, global batch gb, laid out tp1·pp1·dp(world).
JobSpec make_job(const char* model, const char* gpu, int nodes, int gpn, int gb) {
    JobSpec job = default_job(presets());
    const ModelSpec* m = presets().find_model(model);
    const GpuSpec* g = presets().find_gpu(gpu);
    EXPECT_TRUE(m && g) << model << " / " << gpu;
    job.model = *m;
    job.origin.model_preset = model;
    job.cluster.gpu = *g;
    job.origin.gpu_preset = gpu;
    job.cluster.nodes = nodes;
    job.cluster.gpus_per_node = gpn;
    job.cluster.intra_gbps = g->link_gbps;
    job.training.precision = g->bf16_tflops > 0 ? Precision::bf16 : Precision::fp32;
    job.training.global_batch = gb;
    job.training.micro_batch = 1;
    job.parallel = {};
    job.parallel.dp = nodes * gpn;
    EXPECT_TRUE(validate_job(job).empty()) << format_diagnostics(validate_job(job));
    return job;
}

const char* const kAssetJobs[] = {"tiny-local.toml", "gpt2-124m-local.toml", "llama3-8b-h100.toml",
                                  "llama3-70b-h100.toml", "gpt3-175b-a100.toml"};

PlanResult plan(const JobSpec& job, PlanOptions o = {}) {
    auto r = plan_layouts(job, o);
    EXPECT_TRUE(r) << (r ? "" : r.error().str());
    return r ? *r : PlanResult{};
}

// plan(job, [](PlanOptions& o) { o.top_k = 3; }): options edited in place.
template <class Edit>
PlanResult plan(const JobSpec& job, Edit edit) {
    PlanOptions o;
    edit(o);
    return plan(job, o);
}

bool same(const LayoutChoice& a, const LayoutChoice& b) {
    return a.tp == b.tp && a.pp == b.pp && a.dp == b.dp && a.cp == b.cp && a.ep == b.ep && a.vpp == b.vpp &&
           a.micro_batch == b.micro_batch && a.zero == b.zero && a.distributed_optimizer == b.distributed_optimizer &&
           a.sequence_parallel == b.sequence_parallel && a.recompute == b.recompute && a.order == b.order;
}

std::string describe(const LayoutChoice& c) {
    return "tp" + std::to_string(c.tp) + " pp" + std::to_string(c.pp) + " dp" + std::to_string(c.dp) + " ep" +
           std::to_string(c.ep) + " vpp" + std::to_string(c.vpp) + " mb" + std::to_string(c.micro_batch) + " zero" +
           std::to_string(c.zero) + (c.distributed_optimizer ? " dopt" : "") + (c.sequence_parallel ? " sp" : "") +
           " " + to_string(c.recompute) + " order" + std::to_string(c.order);
}

void expect_same_entries(const std::vector<PlanEntry>& a, const std::vector<PlanEntry>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(same(a[i].choice, b[i].choice))
            << what << " #" << i << ": " << describe(a[i].choice) << " vs " << describe(b[i].choice);
        EXPECT_EQ(a[i].score.tokens_per_s, b[i].score.tokens_per_s) << what << " #" << i;
        EXPECT_EQ(a[i].layers_per_stage, b[i].layers_per_stage) << what << " #" << i;
    }
}

// Two searches of one job gave the same answer: the feasible count, the job's rank, the
// why-best line, the top list and the Pareto front.
void expect_same_answer(const PlanResult& a, const PlanResult& b, const std::string& what) {
    EXPECT_EQ(a.feasible, b.feasible) << what;
    EXPECT_EQ(a.job_rank, b.job_rank) << what;
    EXPECT_EQ(a.why_best, b.why_best) << what;
    expect_same_entries(a.top, b.top, what + " top");
    expect_same_entries(a.pareto, b.pareto, what + " pareto");
}

// Pruning relies on two properties of the estimator; check them directly over every
// layout of a few small jobs so a violation names the layout rather than a search diff.
// (1) peak memory never decreases as micro_batch grows, all else equal;
// (2) peak memory with recompute full ≤ selective ≤ none, all else equal.
TEST(Planner, EstimatorIsMonotonicWherePruningAssumesIt) {
    struct Case {
        const char* model;
        int gb;
        bool flash;
    };
    for (Case cs : {Case{"tiny-gpt", 16, true}, Case{"gpt2-124m", 16, true}, Case{"gpt2-124m", 16, false},
                    Case{"llama2-7b", 64, true}, Case{"llama2-7b", 64, false}, Case{"mixtral-8x7b", 16, true}}) {
        JobSpec job = make_job(cs.model, "h100-sxm", 1, 8, cs.gb);
        job.training.flash_attention = cs.flash;
        const EstimateContext ctx = make_estimate_context(job);
        const ModelSpec& m = job.model;
        int checked = 0;
        for (int tp : {1, 2, 4, 8})
            for (int pp = 1; pp <= std::min(8, m.layers); ++pp) {
                if (m.heads % tp || 8 % (tp * pp) || (m.kv_heads % tp && tp % m.kv_heads)) continue;
                const int dp = 8 / (tp * pp);
                if (cs.gb % dp) continue;
                std::vector<int> lps = m.layers % pp ? balanced_layers_per_stage(m.layers, pp) : std::vector<int>{};
                for (int zero : {0, 1})
                    for (bool sp : {false, true}) {
                        if (sp && tp == 1) continue;
                        double prev_mb[3] = {0, 0, 0};
                        for (int mb = 1; mb <= cs.gb / dp; ++mb) {
                            if ((cs.gb / dp) % mb) continue;
                            double prev = 0;
                            int r = 0;
                            for (Recompute rc : {Recompute::full, Recompute::selective, Recompute::none}) {
                                LayoutChoice c{.tp = tp,
                                               .pp = pp,
                                               .dp = dp,
                                               .micro_batch = mb,
                                               .zero = zero,
                                               .sequence_parallel = sp,
                                               .recompute = rc};
                                double peak = evaluate_layout(ctx, c, lps, nullptr).peak_bytes;
                                EXPECT_GE(peak, prev)
                                    << cs.model << (cs.flash ? " " : " no-flash ") << describe(c) << ": recompute "
                                    << to_string(rc) << " needs less memory than the level below it";
                                EXPECT_GE(peak, prev_mb[r])
                                    << cs.model << (cs.flash ? " " : " no-flash ") << describe(c)
                                    << ": less memory than at a smaller micro_batch";
                                prev = prev_mb[r++] = peak;
                                ++checked;
                            }
                        }
                    }
            }
        EXPECT_GT(checked, 50) << cs.model;
    }
}

// Pruned and exhaustive searches must agree exactly, at memory capacities where many
// layouts do not fit (swept between the smallest peak and the fastest layout's peak).
TEST(Planner, PruningMatchesExhaustiveSearch) {
    struct Case {
        const char* model;
        const char* gpu;
        int nodes, gpn, gb;
    };
    const Case cases[] = {{"tiny-gpt", "cpu", 1, 4, 16},        {"gpt2-124m", "a100-80gb", 1, 4, 32},
                          {"gpt2-124m", "a100-80gb", 2, 8, 64}, {"llama2-7b", "h100-sxm", 1, 8, 64},
                          {"llama2-7b", "h100-sxm", 2, 8, 64},  {"llama2-7b", "h100-sxm", 4, 8, 128}};
    int64_t saved = 0, tight_cases = 0;
    for (const Case& cs : cases) {
        JobSpec job = make_job(cs.model, cs.gpu, cs.nodes, cs.gpn, cs.gb);
        // Peaks of the unconstrained search: the fastest layout's and the smallest.
        job.cluster.gpu.memory_gib = 1e6;
        PlanResult loose = plan(job, [&](PlanOptions& o) { o.exhaustive = true; });
        ASSERT_FALSE(loose.pareto.empty());
        const double lo = loose.pareto.back().score.peak_bytes;  // most headroom = smallest peak
        const double hi = loose.pareto.front().score.peak_bytes;
        ASSERT_LE(lo, hi);
        std::vector<double> caps;
        for (double f : {1.0, 1.02, 1.1, 1.3, 1.6, 2.0}) caps.push_back(std::min(lo * f, hi * 1.05));
        // Also halfway between the full- and selective-recompute peaks of the deepest
        // pipeline (one or two layers per stage), where recompute pruning is most fragile.
        {
            const int world = cs.nodes * cs.gpn;
            int pp = 1;
            for (int p = 2; p <= std::min(world, job.model.layers); ++p)
                if (world % p == 0 && cs.gb % (world / p) == 0) pp = p;
            std::vector<int> lps =
                job.model.layers % pp ? balanced_layers_per_stage(job.model.layers, pp) : std::vector<int>{};
            const EstimateContext ctx = make_estimate_context(job);
            LayoutChoice c{.tp = 1, .pp = pp, .dp = world / pp, .recompute = Recompute::full};
            double full = evaluate_layout(ctx, c, lps, nullptr).peak_bytes;
            c.recompute = Recompute::selective;
            caps.push_back((full + evaluate_layout(ctx, c, lps, nullptr).peak_bytes) / 2);
        }
        for (double cap : caps) {
            job.cluster.gpu.memory_gib = cap / (1024.0 * 1024 * 1024);
            const std::string what = std::string(cs.model) + " " + std::to_string(cs.nodes) + "×" +
                                     std::to_string(cs.gpn) + " at " + std::to_string(job.cluster.gpu.memory_gib) +
                                     " GiB";
            PlanResult pruned = plan(job, [&](PlanOptions& o) { o.top_k = 8; });
            PlanResult full = plan(job, [&](PlanOptions& o) {
                o.top_k = 8;
                o.exhaustive = true;
            });
            EXPECT_EQ(full.evaluated, full.enumerated) << what;
            EXPECT_EQ(pruned.enumerated, full.enumerated) << what;
            EXPECT_LE(pruned.evaluated, full.evaluated) << what;
            expect_same_answer(pruned, full, what);
            saved += full.evaluated - pruned.evaluated;
            if (full.feasible > 0 && full.feasible < full.enumerated / 2) ++tight_cases;
        }
    }
    EXPECT_GT(saved, 0) << "pruning never skipped an evaluation";
    EXPECT_GE(tight_cases, 6) << "too few cases where most layouts do not fit";
}

TEST(Planner, TopEntriesFitValidateAndMatchEstimateJob) {
    for (const char* name : kAssetJobs) {
        JobSpec job = load_asset(name);
        PlanResult r = plan(job);
        ASSERT_FALSE(r.top.empty()) << name << ": " << r.why_best;
        EXPECT_LE(r.top.size(), 10u);
        EXPECT_GE(r.enumerated, r.feasible) << name;
        EXPECT_GE(r.enumerated, r.evaluated) << name;
        EXPECT_FALSE(r.cancelled);
        for (size_t i = 0; i < r.top.size(); ++i) {
            const PlanEntry& e = r.top[i];
            EXPECT_TRUE(e.score.fits) << name;
            EXPECT_LE(e.score.peak_bytes, e.score.usable_bytes) << name;
            if (i > 0) {
                EXPECT_LE(e.score.tokens_per_s, r.top[i - 1].score.tokens_per_s) << name << " #" << i;
            }
            JobSpec applied = apply_plan_entry(job, e);
            auto diags = validate_job(applied);
            EXPECT_TRUE(diags.empty()) << name << " #" << i << " " << describe(e.choice) << ": "
                                       << format_diagnostics(diags);
            if (!diags.empty()) continue;
            Estimate est = estimate_job(applied);
            EXPECT_TRUE(est.fits) << name << " #" << i;
            EXPECT_NEAR(est.tokens_per_s, e.score.tokens_per_s, 1e-9 * e.score.tokens_per_s) << name << " #" << i;
        }
        // Pareto: by throughput, each slower entry has strictly more headroom; the best is on it.
        ASSERT_FALSE(r.pareto.empty());
        EXPECT_TRUE(same(r.pareto.front().choice, r.top.front().choice)) << name;
        for (size_t i = 1; i < r.pareto.size(); ++i) {
            const LayoutScore &a = r.pareto[i - 1].score, &b = r.pareto[i].score;
            EXPECT_GT(a.tokens_per_s, b.tokens_per_s) << name << " pareto #" << i;
            EXPECT_GT(b.usable_bytes - b.peak_bytes, a.usable_bytes - a.peak_bytes) << name << " pareto #" << i;
        }
    }
}

TEST(Planner, FindsTheJobsOwnLayoutRank) {
    for (const char* name : kAssetJobs) {
        JobSpec job = load_asset(name);
        Estimate own = estimate_job(job);
        PlanResult r = plan(job);
        if (!own.fits) {
            EXPECT_EQ(r.job_rank, -1) << name;
            continue;
        }
        ASSERT_GE(r.job_rank, 0) << name;
        // job_rank layouts are strictly faster. The listed ranking hides exact twins, so walk
        // the full list: at most job_rank entries are faster than the job's layout, the rest
        // not (the planner's layouts turn on overlap keys the job leaves off, so the job's own
        // speed need not be listed: planfw).
        PlanResult deep = plan(job, [&](PlanOptions& o) { o.top_k = (int)r.feasible; });
        size_t i = 0;
        while (i < deep.top.size() && deep.top[i].score.tokens_per_s > own.tokens_per_s) ++i;
        EXPECT_LE((int)i, r.job_rank) << name;
        for (size_t k = i; k < deep.top.size(); ++k) EXPECT_LE(deep.top[k].score.tokens_per_s, own.tokens_per_s) << name;
        // Every feasible layout is a row, a row's exact twin or (fold) a variant folded into a row.
        EXPECT_EQ((int64_t)deep.top.size() + deep.equivalent_hidden + deep.folded, r.feasible) << name;
    }
    // A layout the job cannot have on this world size is not ranked.
    JobSpec job = load_asset("llama3-8b-h100.toml");
    EXPECT_EQ(plan(job, [&](PlanOptions& o) { o.gpus = 16; }).job_rank, -1);
}

TEST(Planner, CancellationStopsTheSearch) {
    JobSpec job = load_asset("llama3-70b-h100.toml");
    auto exhaustive = [](PlanOptions& o) { o.exhaustive = true; };
    PlanResult whole = plan(job, exhaustive);
    ASSERT_GT(whole.evaluated, 3 * 4096) << "the case is too small to cancel midway";
    int calls = 0;
    int64_t last = 0;
    // One thread: the progress calls and the stop fall on exact counts.
    PlanResult r = plan(job, [&](PlanOptions& o) {
        o.exhaustive = true;
        o.threads = 1;
        o.progress = [&](int64_t done, int64_t total) {
            ++calls;
            EXPECT_GT(done, last);
            EXPECT_GE(total, done);
            last = done;
            return done < 2 * 4096;
        };
    });
    EXPECT_TRUE(r.cancelled);
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(r.evaluated, 2 * 4096);
    EXPECT_LT(r.enumerated, whole.enumerated);
    EXPECT_EQ(r.job_rank, -1);
    EXPECT_TRUE(contains(r.why_best, "cancelled")) << r.why_best;

    // Several threads: a cancel from the calling thread's progress stops them all.
    PlanResult many = plan(job, [&](PlanOptions& o) {
        o.exhaustive = true;
        o.threads = 4;
        o.progress = [&](int64_t done, int64_t) { return done < 2 * 4096; };
    });
    EXPECT_TRUE(many.cancelled);
    EXPECT_GE(many.evaluated, 2 * 4096);
    EXPECT_LT(many.evaluated, whole.evaluated);
    EXPECT_TRUE(contains(many.why_best, "cancelled")) << many.why_best;

    // Not cancelled: progress ends with (evaluated, evaluated).
    int64_t final_done = -1, final_total = -1;
    PlanResult ok = plan(job, [&](PlanOptions& o) {
        o.progress = [&](int64_t d, int64_t t) {
            final_done = d, final_total = t;
            return true;
        };
    });
    EXPECT_FALSE(ok.cancelled);
    EXPECT_EQ(final_done, ok.evaluated);
    EXPECT_EQ(final_total, ok.evaluated);
}

// fold: a plan lists each layout once, at its fastest interleaving depth, TP overlap and
// replica count (hsdp, tests/hybrid_sharding has the zero 3 case), the
// others folded into its row; unfolded, the same layouts are all rows. Checked on every
// feasible layout (top_k large enough for all) and on a short list, whose folded variants
// must rank among the listed rows' speeds.
TEST(Planner, FoldingListsEachLayoutOnceWithItsOtherDepthsAndTpOverlap) {
    for (const JobSpec& job : {make_job("gpt2-124m", "h100-sxm", 1, 8, 64), load_asset("llama3-70b-h100.toml")}) {
        const PlanResult flat = plan(job, [](PlanOptions& o) {
            o.top_k = 1 << 20;
            o.fold = false;
        });
        const PlanResult all = plan(job, [](PlanOptions& o) { o.top_k = 1 << 20; });
        const std::string what = job.model.name;
        ASSERT_EQ((int64_t)all.top.size() + all.equivalent_hidden + all.folded, all.feasible) << what;
        EXPECT_GT(all.folded, 0) << what << ": nothing to fold, the case shows nothing";
        EXPECT_EQ(flat.folded, 0) << what;
        for (const PlanEntry& e : flat.top) EXPECT_TRUE(e.folded.empty()) << what;
        for (size_t i = 0; i < all.top.size(); ++i) {
            const PlanEntry& row = all.top[i];
            for (size_t k = 0; k < i; ++k)
                EXPECT_FALSE(same_up_to_fold(all.top[k].choice, row.choice)) << what << ": rows " << k << " and " << i;
            // Every unfolded row of its layout is the row itself, one of its folded variants, or
            // an exact twin (the same tokens/s and peak) of another row or folded variant,
            // hidden as an unfolded plan hides twins. (An unfolded plan lists one of exact twins; the row may
            // be the one it hid.)
            auto twin_of_a_row = [&](const PlanEntry& f) {
                for (const PlanEntry& o : all.top) {
                    if (o.score.tokens_per_s == f.score.tokens_per_s && o.score.peak_bytes == f.score.peak_bytes) return true;
                    for (const FoldedVariant& v : o.folded)
                        if (v.tokens_per_s == f.score.tokens_per_s && v.peak_bytes == f.score.peak_bytes) return true;
                }
                return false;
            };
            bool seen = false;
            for (const PlanEntry& f : flat.top) {
                if (f.score.tokens_per_s == row.score.tokens_per_s && f.score.peak_bytes == row.score.peak_bytes) seen = true;
                if (!same_up_to_fold(f.choice, row.choice) || twin_of_a_row(f)) continue;
                EXPECT_LE(f.score.tokens_per_s, row.score.tokens_per_s) << what << " row " << i;
                bool named = f.choice.vpp == row.choice.vpp && f.choice.tp_comm_overlap == row.choice.tp_comm_overlap &&
                             f.choice.dp_replicate == row.choice.dp_replicate;
                for (const FoldedVariant& v : row.folded)
                    named |= v.vpp == f.choice.vpp && v.tp_comm_overlap == f.choice.tp_comm_overlap &&
                             v.dp_replicate == f.choice.dp_replicate;
                EXPECT_TRUE(named) << what << " row " << i << ": unfolded " << describe(f.choice) << " not in it";
            }
            EXPECT_TRUE(seen) << what << " row " << i << " (" << describe(row.choice) << ") is not an unfolded row";
            for (const FoldedVariant& v : row.folded) {
                EXPECT_LE(v.tokens_per_s, row.score.tokens_per_s) << what << " row " << i;
                EXPECT_FALSE(v.vpp == row.choice.vpp && v.tp_comm_overlap == row.choice.tp_comm_overlap &&
                             v.dp_replicate == row.choice.dp_replicate)
                    << what << " row " << i;
            }
        }
        // A short list: ten layouts, their variants no slower than the tenth row.
        const PlanResult ten = plan(job, [](PlanOptions& o) { o.top_k = 10; });
        ASSERT_EQ(ten.top.size(), 10u) << what;
        for (size_t i = 0; i < ten.top.size(); ++i) {
            EXPECT_TRUE(same(ten.top[i].choice, all.top[i].choice)) << what << " #" << i;
            for (const FoldedVariant& v : ten.top[i].folded)
                EXPECT_GE(v.tokens_per_s, ten.top.back().score.tokens_per_s) << what << " #" << i;
        }
    }
}

// The screening pass shares the space's (tp, cp, pp) groups out over threads and puts their
// layouts back in enumeration order: every number of threads gives the same plan, near misses,
// counts and the job's rank included, for dense, MoE and offload searches.
TEST(Planner, ThePlanIsTheSameOnAnyNumberOfThreads) {
    struct Case {
        JobSpec job;
        const char* what;
    };
    std::vector<Case> cases;
    for (const char* name : {"llama3-70b-h100.toml", "gpt3-175b-a100.toml"}) cases.push_back({load_asset(name), name});
    cases.push_back({make_job("mixtral-8x7b", "h100-sxm", 2, 8, 64), "mixtral-8x7b on 16 h100"});
    JobSpec tight = make_job("llama2-7b", "h100-sxm", 1, 8, 64);
    tight.cluster.gpu.memory_gib = 24;  // most layouts overflow: near misses and the smallest peak
    cases.push_back({tight, "llama2-7b on 24 GiB"});
    for (const Case& c : cases) {
        auto options = [](int threads) {
            return [threads](PlanOptions& o) {
                o.threads = threads;
                o.top_k = 40;
                o.top_k_unfit = 8;
                o.vary_zero = true;
            };
        };
        const PlanResult one = plan(c.job, options(1));
        for (int threads : {2, 3, 8}) {
            const PlanResult r = plan(c.job, options(threads));
            const std::string what = std::string(c.what) + ", " + std::to_string(threads) + " threads";
            expect_same_answer(one, r, what);
            expect_same_entries(one.unfit, r.unfit, what + " unfit");
            EXPECT_EQ(one.enumerated, r.enumerated) << what;
            EXPECT_EQ(one.evaluated, r.evaluated) << what;
            EXPECT_EQ(one.simulated, r.simulated) << what;
            EXPECT_EQ(one.equivalent_hidden, r.equivalent_hidden) << what;
            EXPECT_FALSE(r.cancelled) << what;
        }
    }
}

TEST(Planner, NothingFitsGivesAnEmptyPlanAndSaysWhy) {
    JobSpec job = make_job("gpt3-175b", "a100-80gb", 1, 8, 8);
    PlanResult r = plan(job);
    EXPECT_TRUE(r.top.empty());
    EXPECT_TRUE(r.pareto.empty());
    EXPECT_EQ(r.feasible, 0);
    EXPECT_EQ(r.job_rank, -1);
    EXPECT_GT(r.enumerated, 0);
    const std::string prefix = "no layout fits: smallest peak is ";
    ASSERT_EQ(r.why_best.rfind(prefix, 0), 0u) << r.why_best;
    double peak = std::stod(r.why_best.substr(prefix.size()));
    EXPECT_GT(peak, 80.0) << r.why_best;  // 175B parameters on 8 GPUs: hundreds of GiB each
    EXPECT_TRUE(contains(r.why_best, "capacity 80.0 GiB") || contains(r.why_best, "capacity 79")) << r.why_best;
    EXPECT_TRUE(contains(r.why_best, "tp8")) << r.why_best;  // the smallest peak shards most
}

TEST(Planner, GpusOverrideAndErrors) {
    JobSpec job = load_asset("llama3-8b-h100.toml");
    PlanResult r = plan(job, [&](PlanOptions& o) { o.gpus = 32; });
    ASSERT_FALSE(r.top.empty());
    for (const PlanEntry& e : r.top) {
        EXPECT_EQ(e.choice.tp * e.choice.pp * e.choice.dp * e.choice.cp, 32);
        JobSpec applied = apply_plan_entry(job, e);
        applied.cluster.nodes = 4;  // the caller's part when the world size changes
        EXPECT_TRUE(validate_job(applied).empty()) << format_diagnostics(validate_job(applied));
    }
    EXPECT_EQ(r.job_rank, -1);  // dp 4 on 8 GPUs is not a 32-GPU layout

    PlanOptions twelve;
    twelve.gpus = 12;
    auto bad = plan_layouts(job, twelve);
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error().diagnostics[0].key, "gpus");
    EXPECT_TRUE(contains(bad.error().str(), "12") && contains(bad.error().str(), "gpus_per_node (8)"))
        << bad.error().str();
    PlanOptions negative;
    negative.gpus = -8;
    EXPECT_FALSE(plan_layouts(job, negative));

    // 4 heads and 4 layers cap tp·pp at 16 on 32 ranks, so without context parallelism dp ≥ 2:
    // an odd batch has no layout (cp 2 would make dp 1 possible).
    JobSpec tiny = make_job("tiny-gpt", "cpu", 8, 4, 32);
    tiny.training.global_batch = 7;
    PlanOptions no_cp;
    no_cp.vary_cp = false;
    auto none = plan_layouts(tiny, no_cp);
    ASSERT_FALSE(none);
    EXPECT_EQ(none.error().diagnostics[0].key, "training.global_batch");
    EXPECT_TRUE(contains(none.error().str(), "got 7") && contains(none.error().str(), "dp: 2, 4, 8"))
        << none.error().str();
}

TEST(Planner, MixtureOfExpertsVariesExpertParallelism) {
    JobSpec job = make_job("mixtral-8x7b", "h100-sxm", 2, 8, 64);
    PlanResult r = plan(job, [&](PlanOptions& o) { o.top_k = 1 << 20; });
    PlanResult fixed = plan(job, [&](PlanOptions& o) {
        o.top_k = 4;
        o.vary_ep = false;
    });
    EXPECT_GT(r.enumerated, fixed.enumerated);
    int with_ep = 0;
    for (const PlanEntry& e : r.top) {
        EXPECT_EQ(8 % e.choice.ep, 0);
        // etp: ep divides dp·cp, or with the experts folded (expert_tp ≠ tp) ep·expert_tp divides tp·cp·dp.
        if (e.choice.etp == 0 || e.choice.etp == e.choice.tp) EXPECT_EQ((e.choice.dp * e.choice.cp) % e.choice.ep, 0);
        else EXPECT_EQ((e.choice.tp * e.choice.dp * e.choice.cp) % (e.choice.ep * e.choice.etp), 0);
        with_ep += e.choice.ep > 1;
    }
    EXPECT_GT(with_ep, 0) << "no fitting layout with ep > 1";
    for (const PlanEntry& e : fixed.top) EXPECT_EQ(e.choice.ep, 1);
    for (const PlanEntry& e : r.top)
        if (e.choice.ep == 8) {
            EXPECT_TRUE(validate_job(apply_plan_entry(job, e)).empty());
            break;
        }
}

TEST(Planner, UnevenPipelinesAndInterleaving) {
    // gpt2-124m has 12 layers: pp 8 needs an explicit split, pp 2/3/4/6 allow vpp.
    JobSpec job = make_job("gpt2-124m", "h100-sxm", 1, 8, 64);
    PlanResult r = plan(job, [&](PlanOptions& o) {
        o.top_k = 1 << 20;
        o.fold = false;  // every depth its own row
    });
    ASSERT_EQ(r.feasible, (int64_t)r.top.size() + r.equivalent_hidden);  // exact twins are listed once
    int uneven = 0, interleaved = 0;
    for (const PlanEntry& e : r.top) {
        const LayoutChoice& c = e.choice;
        if (12 % c.pp != 0) {
            ++uneven;
            ASSERT_EQ((int)e.layers_per_stage.size(), c.pp);
            int sum = 0;
            for (int l : e.layers_per_stage) sum += l;
            EXPECT_EQ(sum, 12);
            EXPECT_EQ(c.vpp, 1);
        } else {
            EXPECT_TRUE(e.layers_per_stage.empty());
        }
        if (c.vpp > 1) {
            ++interleaved;
            EXPECT_EQ(12 % (c.pp * c.vpp), 0);
            EXPECT_EQ((64 / (c.dp * c.micro_batch)) % c.pp, 0) << describe(c);
        }
        EXPECT_LE(c.tp, 8);
        EXPECT_TRUE(c.sequence_parallel ? c.tp > 1 : true);
        EXPECT_TRUE(c.zero < 2 || c.pp == 1);
        EXPECT_TRUE(!c.distributed_optimizer || c.zero == 0);
    }
    EXPECT_GT(uneven, 0);
    EXPECT_GT(interleaved, 0);
    for (const PlanEntry& e : r.top)
        if (12 % e.choice.pp != 0) {
            auto diags = validate_job(apply_plan_entry(job, e));
            EXPECT_TRUE(diags.empty()) << format_diagnostics(diags);
            break;
        }
}

TEST(Planner, OptionsRestrictTheSearch) {
    JobSpec job = load_asset("llama3-8b-h100.toml");
    PlanResult all = plan(job);

    PlanResult tight = plan(job, [&](PlanOptions& o) { o.headroom = 0.3; });
    EXPECT_LT(tight.feasible, all.feasible);
    const double cap = job.cluster.gpu.memory_gib * 1024.0 * 1024 * 1024;
    for (const PlanEntry& e : tight.top) {
        EXPECT_NEAR(e.score.usable_bytes, 0.7 * cap, 1.0);
        EXPECT_LE(e.score.peak_bytes, 0.7 * cap);
    }

    job.parallel.order = "tp-pp-ep-dp-cp";  // not one of kPlannerOrders
    PlanResult fixed = plan(job, [&](PlanOptions& o) {
        o.vary_zero = false;
        o.vary_recompute = false;
        o.vary_order = false;
    });
    ASSERT_FALSE(fixed.top.empty());
    EXPECT_LT(fixed.enumerated, all.enumerated / 10);
    for (const PlanEntry& e : fixed.top) {
        EXPECT_EQ(e.choice.order, -1);
        EXPECT_EQ(e.choice.zero, 1);
        EXPECT_FALSE(e.choice.distributed_optimizer);
        EXPECT_EQ(e.choice.recompute, Recompute::selective);
        EXPECT_EQ(apply_plan_entry(job, e).parallel.order, "tp-pp-ep-dp-cp");
    }
    EXPECT_GE(fixed.job_rank, 0);  // the job's own order is the one searched

    // tp beyond a node: 2 GPUs per node caps tp at 2 unless allowed.
    JobSpec narrow = make_job("llama2-7b", "h100-sxm", 8, 2, 64);
    int max_tp = 0, max_tp_beyond = 0;
    for (const PlanEntry& e : plan(narrow, [&](PlanOptions& o) { o.top_k = 1 << 20; }).top)
        max_tp = std::max(max_tp, e.choice.tp);
    for (const PlanEntry& e : plan(narrow, [&](PlanOptions& o) {
                                  o.top_k = 1 << 20;
                                  o.tp_beyond_node = true;
                              }).top)
        max_tp_beyond = std::max(max_tp_beyond, e.choice.tp);
    EXPECT_EQ(max_tp, 2);
    EXPECT_GT(max_tp_beyond, 2);

    // why: the job as `all` planned it; the order set above took its own layout out of the
    // space, and the why line compares the best with the job's own layout when that is ranked.
    PlanResult none = plan(load_asset("llama3-8b-h100.toml"), [&](PlanOptions& o) { o.top_k = 0; });
    EXPECT_TRUE(none.top.empty());
    EXPECT_EQ(none.feasible, all.feasible);
    EXPECT_EQ(none.why_best, all.why_best);

    PlanResult mb = plan(job, [&](PlanOptions& o) {
        o.top_k = 1 << 20;
        o.max_micro_batch = 2;
    });
    for (const PlanEntry& e : mb.top) EXPECT_LE(e.choice.micro_batch, 2);
}

TEST(Planner, WhyBestNamesBothLayoutsAndTheDifference) {
    JobSpec job = load_asset("llama3-70b-h100.toml");
    PlanResult r = plan(job);
    ASSERT_GE(r.top.size(), 2u);
    const std::string& w = r.why_best;
    const LayoutChoice& c = r.top[0].choice;
    const std::string head = "tp" + std::to_string(c.tp) + "·pp" + std::to_string(c.pp) + "·dp" + std::to_string(c.dp);
    EXPECT_EQ(w.rfind(head, 0), 0u) << w;
    EXPECT_TRUE(contains(w, " beats ") && contains(w, "% tokens/s: ") && contains(w, "% less ") &&
                contains(w, " s per step)") && contains(w, "GiB per GPU"))
        << w;
    EXPECT_EQ(w.find('\n'), std::string::npos);

    // One fitting layout: said so.
    JobSpec one = make_job("tiny-gpt", "cpu", 1, 1, 1);
    PlanResult single = plan(one, [&](PlanOptions& o) {
        o.vary_zero = false;
        o.vary_recompute = false;
        o.vary_order = false;
    });
    ASSERT_EQ(single.feasible, 1);
    EXPECT_TRUE(contains(single.why_best, "is the only layout that fits")) << single.why_best;
}

TEST(Planner, ApplyPlanEntrySetsTheLayout) {
    JobSpec job = load_asset("llama3-70b-h100.toml");
    PlanEntry e;
    e.choice = {.tp = 4,
                .pp = 3,
                .dp = 5,
                .cp = 1,
                .ep = 1,
                .vpp = 1,
                .micro_batch = 2,
                .zero = 1,
                .distributed_optimizer = false,
                .sequence_parallel = true,
                .recompute = Recompute::full,
                .order = 2};
    e.layers_per_stage = balanced_layers_per_stage(80, 3);
    JobSpec a = apply_plan_entry(job, e);
    EXPECT_EQ(a.parallel.tp, 4);
    EXPECT_EQ(a.parallel.pp, 3);
    EXPECT_EQ(a.parallel.dp, 5);
    EXPECT_EQ(a.parallel.vpp, 1);
    EXPECT_EQ(a.parallel.zero, 1);
    EXPECT_FALSE(a.parallel.distributed_optimizer);
    EXPECT_TRUE(a.parallel.sequence_parallel);
    EXPECT_EQ(a.parallel.recompute, Recompute::full);
    EXPECT_EQ(a.parallel.order, kPlannerOrders[2]);
    EXPECT_EQ(a.parallel.layers_per_stage, e.layers_per_stage);
    EXPECT_EQ(a.training.micro_batch, 2);
    EXPECT_EQ(a.training.global_batch, job.training.global_batch);
    EXPECT_TRUE(a.origin.dp_given);
    EXPECT_EQ(a.cluster, job.cluster);  // world size changes are the caller's
}

// The studio's extras: the best non-fitting layouts, and every fitting layout's tokens/s
// so any layout can be ranked after the search (as job_rank ranks the job's own).
TEST(Planner, KeepsNearMissesAndRanksAnyLayout) {
    JobSpec job = load_asset("llama3-70b-h100.toml");
    PlanResult r = plan(job, [](PlanOptions& o) {
        o.top_k_unfit = 8;
        o.keep_fitting_scores = true;
    });
    ASSERT_EQ(r.unfit.size(), 8u);
    for (size_t i = 0; i < r.unfit.size(); ++i) {
        EXPECT_FALSE(r.unfit[i].score.fits) << i;
        if (i > 0) {
            EXPECT_GE(r.unfit[i - 1].score.tokens_per_s, r.unfit[i].score.tokens_per_s) << i;
        }
    }
    ASSERT_EQ((int64_t)r.fitting_tokens_per_s.size(), r.feasible);
    EXPECT_TRUE(std::is_sorted(r.fitting_tokens_per_s.rbegin(), r.fitting_tokens_per_s.rend()));
    ASSERT_GE(r.job_rank, 0);
    EXPECT_EQ(plan_rank_of(r, estimate_job(job).tokens_per_s), r.job_rank + 1);
    EXPECT_EQ(plan_rank_of(r, r.top[0].score.tokens_per_s), 1);
    EXPECT_EQ(plan_rank_of(r, 0.0), r.feasible + 1);
    // Off by default: nothing extra is kept.
    PlanResult plain = plan(job);
    EXPECT_TRUE(plain.unfit.empty());
    EXPECT_TRUE(plain.fitting_tokens_per_s.empty());
    expect_same_entries(plain.top, r.top, "top with and without the extras");
}

}  // namespace

// ---- context parallelism, bare jobs, and clusters too big for the global batch ----

// A job that states no layout (no [parallel] table), as the planner's users write them:
// model, cluster, global batch.
JobSpec bare_job(const char* model, const char* gpu, int nodes, int gpn, int gb) {
    JobSpec job = make_job(model, gpu, nodes, gpn, nodes * gpn);
    job.origin.no_layout = true;
    job.training.global_batch = gb;
    EXPECT_TRUE(validate_job(job).empty()) << format_diagnostics(validate_job(job));
    return job;
}

TEST(PlannerScope, SearchesContextParallelism) {
    // Before: cp was kept at the job's 1, and Llama-3 8B on 16,384 GPUs (global batch 2048)
    // got pp32 with a 92% bubble at 0.6% MFU as its best layout.
    // With 1024 sequences tp8 leaves dp 2048 > 1024: the pipeline (a bubble) or cp must take
    // the other factor 2, and cp costs only its overlapped K/V exchange.
    JobSpec job = bare_job("llama3-8b", "h100-sxm", 2048, 8, 1024);
    job.cluster.inter_gbps = 50;
    PlanResult r = plan(job, [&](PlanOptions& o) { o.top_k = 500; });
    ASSERT_FALSE(r.top.empty());
    bool some_cp = false;
    for (const PlanEntry& e : r.top) {
        some_cp = some_cp || e.choice.cp > 1;
        EXPECT_EQ(job.model.seq_len % (2 * e.choice.cp), e.choice.cp == 1 ? job.model.seq_len % 2 : 0);
    }
    EXPECT_TRUE(some_cp);
    const PlanEntry& best = r.top.front();
    EXPECT_GT(best.choice.cp, 1);
    EXPECT_LT(best.score.time.bubble / best.score.step_s, 0.5);
    EXPECT_GT(best.score.mfu, 0.1);
    // Every planned layout (cp included) validates once applied.
    for (size_t i = 0; i < std::min<size_t>(r.top.size(), 50); ++i) {
        JobSpec applied = apply_plan_entry(job, r.top[i]);
        EXPECT_TRUE(validate_job(applied).empty()) << format_diagnostics(validate_job(applied));
    }
    // vary_cp = false keeps the job's cp.
    PlanResult fixed = plan(job, [&](PlanOptions& o) {
        o.top_k = 500;
        o.vary_cp = false;
    });
    for (const PlanEntry& e : fixed.top) EXPECT_EQ(e.choice.cp, 1);
    EXPECT_LT(fixed.enumerated, r.enumerated);
    ASSERT_FALSE(fixed.top.empty());
    EXPECT_LT(fixed.top.front().score.tokens_per_s, best.score.tokens_per_s);
    // With cp the estimator divides activations by cp: the same layout otherwise holds less.
    LayoutChoice c = best.choice;
    const EstimateContext ctx = make_estimate_context(job);
    LayoutChoice half = c;
    half.cp = c.cp / 2, half.dp = c.dp * 2;
    if (job.training.global_batch % (half.dp * half.micro_batch) == 0) {
        LayoutScore a = evaluate_layout(ctx, c, best.layers_per_stage, nullptr);
        LayoutScore b = evaluate_layout(ctx, half, best.layers_per_stage, nullptr);
        EXPECT_LT(a.worst_mem.activations, b.worst_mem.activations);
    }
}

TEST(PlannerScope, SaysWhenTheClusterIsTooBigForTheGlobalBatch) {
    // 64 sequences cannot keep 16,384 GPUs busy: every layout idles in the bubble.
    JobSpec job = bare_job("llama3-8b", "h100-sxm", 2048, 8, 64);
    PlanResult r = plan(job);
    ASSERT_FALSE(r.top.empty());
    EXPECT_TRUE(contains(r.too_big, "global_batch 64 seqs cannot keep 16,384 GPUs busy")) << r.too_big;
    EXPECT_TRUE(contains(r.too_big, "larger global batch or fewer GPUs")) << r.too_big;
    EXPECT_GT(r.busy_gpus, 0);
    EXPECT_LT(r.busy_gpus, 16384);
    EXPECT_TRUE(contains(r.too_big, "at most")) << r.too_big;
    // The GPU count it names does keep the bubble under the threshold.
    PlanResult smaller = plan(job, [&](PlanOptions& o) { o.gpus = r.busy_gpus; });
    ASSERT_FALSE(smaller.top.empty());
    const LayoutScore& s = smaller.top.front().score;
    EXPECT_LE(s.time.bubble / s.step_s, PlanOptions{}.max_bubble_share);
    EXPECT_TRUE(smaller.too_big.empty()) << smaller.too_big;
    // A cluster the batch fills says nothing.
    EXPECT_TRUE(plan(bare_job("llama3-8b", "h100-sxm", 2, 8, 2048)).too_big.empty());

    // When even one sequence per replica is too many replicas, the error says so plainly.
    JobSpec tiny = bare_job("tiny-gpt", "cpu", 64, 4, 1);
    tiny.model.seq_len = 2;  // no context parallelism possible
    auto none = plan_layouts(tiny, {});
    ASSERT_FALSE(none);
    EXPECT_TRUE(contains(none.error().str(), "global_batch 1 seqs cannot keep 256 GPUs busy")) << none.error().str();
}

TEST(PlannerScope, BareJobPlansFromModelAndClusterAlone) {
    auto job = load_asset("llama3-405b-bare.toml");
    ASSERT_FALSE(job.has_layout());
    PlanResult r = plan(job);
    ASSERT_FALSE(r.top.empty());
    EXPECT_EQ(r.job_rank, -1);  // no layout of its own to rank
    for (const PlanEntry& e : r.top) EXPECT_EQ((long long)e.choice.tp * e.choice.pp * e.choice.dp * e.choice.cp, 16384);
    JobSpec applied = apply_plan_entry(job, r.top.front());
    EXPECT_TRUE(applied.has_layout());
    EXPECT_TRUE(validate_job(applied).empty()) << format_diagnostics(validate_job(applied));

    // Without a global batch: an error naming the key, not 16,384 invented sequences.
    job.training.global_batch = 0;
    job.origin.global_batch_given = false;
    auto none = plan_layouts(job, {});
    ASSERT_FALSE(none);
    EXPECT_EQ(none.error().diagnostics[0].key, "training.global_batch");
    EXPECT_TRUE(contains(none.error().str(), "not given")) << none.error().str();
}

// ---- screening by bounds, simulating only where they leave a doubt ----

// The planner simulates the pipeline schedule only for layouts whose place the step-time
// bounds leave open. Everything it reports must equal simulating every layout: the top-k,
// the Pareto front, the near misses, the job's rank, why-best, the hidden twins; on small
// jobs (every layout simulated is cheap there), tight and loose memory, with and without a
// layout of their own, plus the asset jobs.
TEST(PlannerScreening, ScreeningFindsWhatSimulatingEveryLayoutFinds) {
    struct Case {
        JobSpec job;
        std::string what;
    };
    std::vector<Case> cases;
    cases.push_back({make_job("tiny-gpt", "cpu", 1, 4, 16), "tiny-gpt 1×4"});
    cases.push_back({make_job("gpt2-124m", "a100-80gb", 2, 8, 64), "gpt2-124m 2×8"});
    cases.push_back({make_job("llama2-7b", "h100-sxm", 4, 8, 128), "llama2-7b 4×8"});
    {
        JobSpec tight = make_job("llama2-7b", "h100-sxm", 2, 8, 64);
        tight.cluster.gpu.memory_gib = 30;
        cases.push_back({tight, "llama2-7b 2×8 at 30 GiB"});
    }
    cases.push_back({bare_job("llama2-7b", "h100-sxm", 4, 8, 256), "bare llama2-7b 4×8"});
    for (const char* name : kAssetJobs) cases.push_back({load_asset(name), name});
    int64_t saved = 0;
    for (const Case& cs : cases) {
        for (int top_k : {1, 10}) {
            const std::string what = cs.what + " top " + std::to_string(top_k);
            auto options = [&](PlanOptions& o) {
                o.top_k = top_k;
                o.top_k_unfit = 5;
            };
            PlanResult fast = plan(cs.job, options);
            PlanResult all = plan(cs.job, [&](PlanOptions& o) {
                options(o);
                o.simulate_all = true;
                o.keep_fitting_scores = true;  // every fitting layout's simulated tokens/s
            });
            // Against the plain list of every fitting layout's simulated tokens/s: the best,
            // and the job's rank (1 + strictly faster).
            ASSERT_EQ((int64_t)all.fitting_tokens_per_s.size(), all.feasible) << what;
            if (!fast.top.empty()) {
                EXPECT_EQ(fast.top.front().score.tokens_per_s, all.fitting_tokens_per_s.front()) << what;
            }
            if (fast.job_rank >= 0) {
                EXPECT_EQ(fast.job_rank + 1, plan_rank_of(all, estimate_job(cs.job).tokens_per_s)) << what;
            }
            EXPECT_EQ(all.simulated, all.evaluated) << what;
            EXPECT_LE(fast.simulated, fast.evaluated) << what;
            EXPECT_EQ(fast.equivalent_hidden, all.equivalent_hidden) << what;
            expect_same_answer(fast, all, what);
            expect_same_entries(fast.unfit, all.unfit, what + " unfit");
            saved += fast.evaluated - fast.simulated;
        }
    }
    EXPECT_GT(saved, 0) << "screening never spared a simulation";
}

// What the planner prints for a layout is that layout's `ptd estimate`: step time and
// tokens/s of every listed entry (top and Pareto) equal estimate_job of the applied job.
TEST(PlannerScreening, ListedNumbersAreTheSimulatedEstimate) {
    for (const char* name : {"llama3-405b-bare.toml", "gpt3-175b-a100.toml", "llama3-70b-h100.toml"}) {
        const JobSpec job = load_asset(name);
        PlanResult r = plan(job);
        ASSERT_FALSE(r.top.empty()) << name;
        EXPECT_LT(r.simulated, r.evaluated) << name;
        std::vector<PlanEntry> listed = r.top;
        listed.insert(listed.end(), r.pareto.begin(), r.pareto.end());
        for (const PlanEntry& e : listed) {
            const Estimate est = estimate_job(apply_plan_entry(job, e));
            EXPECT_EQ(est.step_s, e.score.step_s) << name << " " << describe(e.choice);
            EXPECT_EQ(est.tokens_per_s, e.score.tokens_per_s) << name << " " << describe(e.choice);
            EXPECT_EQ(est.time.bubble, e.score.time.bubble) << name << " " << describe(e.choice);
        }
    }
}

// ---- why: the why-best line says what the best layout trades, against the job's own layout ----

// The gain in the line, parsed back: "... by 56% tokens/s" → 56.
static double why_gain(const std::string& why) {
    const size_t by = why.find(" by ");
    if (by == std::string::npos) return -1;
    return why.compare(by + 4, 5, "under") == 0 ? 0.005 : std::atof(why.c_str() + by + 4);
}

// When the job's own layout fits and ranks below the best, the line compares the best with it
// (what the user asked about), not with a near twin of the best, and says what is traded:
// the term saved, what is paid for it, and the memory either way.
TEST(PlannerWhy, ComparesWithTheJobsOwnLayout) {
    const JobSpec job = load_asset("gpt3-175b-a100.toml");  // tp8·pp8·dp16, full recompute
    const PlanResult r = plan(job);
    ASSERT_GT(r.job_rank, 0);
    ASSERT_FALSE(r.top.empty());
    const std::string& w = r.why_best;
    const LayoutChoice& c = r.top[0].choice;
    EXPECT_EQ(w.rfind("tp" + std::to_string(c.tp) + "·pp" + std::to_string(c.pp) + "·dp" + std::to_string(c.dp), 0), 0u) << w;
    EXPECT_TRUE(contains(w, " beats your layout tp8·pp8·dp16 mb1 ")) << w;
    EXPECT_TRUE(contains(w, "recompute full")) << w;  // the job's setting where the best differs
    // The gain is the best's over the job's own estimate.
    const double own = estimate_job(job).tokens_per_s;
    EXPECT_NEAR(why_gain(w), (r.top[0].score.tokens_per_s / own - 1) * 100, 0.5) << w;
    EXPECT_TRUE(contains(w, "% less ") && contains(w, " s per step)")) << w;
    EXPECT_TRUE(contains(w, "; it pays ")) << w;
    EXPECT_TRUE(contains(w, " more memory (peak ") || contains(w, " less memory (peak ") ||
                contains(w, ", same memory (peak "))
        << w;
    EXPECT_EQ(w.find('\n'), std::string::npos);
}

// The job's own layout at the top (or no layout at all): the runner-up is the comparison.
TEST(PlannerWhy, RunnerUpWhenTheJobIsBestOrHasNoLayout) {
    const JobSpec job = load_asset("gpt3-175b-a100.toml");
    const PlanResult first = plan(job);
    ASSERT_FALSE(first.top.empty());
    const JobSpec best = apply_plan_entry(job, first.top[0]);
    const PlanResult again = plan(best);
    EXPECT_EQ(again.job_rank, 0);
    EXPECT_FALSE(contains(again.why_best, "your layout")) << again.why_best;
    EXPECT_TRUE(contains(again.why_best, " beats ")) << again.why_best;
    const PlanResult bare = plan(load_asset("llama3-405b-bare.toml"));
    EXPECT_FALSE(contains(bare.why_best, "your layout")) << bare.why_best;
}

// A job layout that does not fit is why another is preferred: the line opens with that, then
// compares the best with it (what else is traded) or says it would have been faster.
TEST(PlannerWhy, SaysWhenTheJobsLayoutDoesNotFit) {
    JobSpec job = load_asset("llama3-70b-h100.toml");
    job.parallel.tp = 1, job.parallel.pp = 1, job.parallel.vpp = 1, job.parallel.cp = 1;
    job.parallel.dp = job.world_size();
    job.parallel.zero = 0, job.parallel.distributed_optimizer = false, job.parallel.sequence_parallel = false;
    job.parallel.overlap_param_gather = false, job.parallel.tp_comm_overlap = false;
    job.parallel.layers_per_stage.clear();
    for (Recompute rc : {Recompute::selective, Recompute::full}) {
        job.parallel.recompute = rc;
        ASSERT_TRUE(validate_job(job).empty()) << format_diagnostics(validate_job(job));
        const Estimate own = estimate_job(job);
        ASSERT_FALSE(own.fits);  // 70B of unsharded weights and Adam states per GPU
        const PlanResult r = plan(job);
        ASSERT_FALSE(r.top.empty());
        EXPECT_EQ(r.job_rank, -1);
        const std::string& w = r.why_best;
        EXPECT_EQ(w.rfind("your layout tp1·pp1·dp" + std::to_string(job.parallel.dp), 0), 0u) << w;
        EXPECT_TRUE(contains(w, " does not fit (peak ") && contains(w, " GiB usable)")) << w;
        if (own.tokens_per_s < r.top[0].score.tokens_per_s)  // what else the best trades against it
            EXPECT_TRUE(contains(w, " beats your layout ") && contains(w, " less memory (peak ")) << w;
        else
            EXPECT_TRUE(contains(w, ", though it would be ") && contains(w, " faster than the best that fits; ")) << w;
    }
}

// A layout that fits the GPU but not the plan's headroom (ptd estimate, without a headroom,
// calls it "ok") is named for the margin it misses, not as one that does not fit.
TEST(PlannerWhy, SaysWhenTheJobsLayoutMissesOnlyTheHeadroom) {
    JobSpec job = load_asset("llama3-70b-h100.toml");
    job.training.micro_batch = 2;
    ASSERT_TRUE(validate_job(job).empty()) << format_diagnostics(validate_job(job));
    const Estimate own = estimate_job(job);  // estimate.headroom 0: the whole GPU
    ASSERT_TRUE(own.fits);
    const PlanResult r = plan(job);          // megatron's 5%
    ASSERT_GT(r.headroom, 0.0);
    const std::string& w = r.why_best;
    EXPECT_TRUE(contains(w, " leaves less than the plan's 5% headroom free (peak ") &&
                contains(w, " GiB usable of 79.6 GiB; --headroom 0 ranks it)")) << w;
    EXPECT_FALSE(contains(w, "does not fit")) << w;
}

// Every line says what is paid, and no gain reads "0.0%": the runner-up of a large search is
// often within a hair of the best, so small gains keep their digits.
TEST(PlannerWhy, NamesTheTradeAndNeverReadsZeroPercent) {
    for (const char* name : kAssetJobs) {
        const JobSpec job = load_asset(name);
        for (const JobSpec& j : {job, apply_plan_entry(job, plan(job).top.at(0))}) {  // vs own, vs runner-up
            const PlanResult r = plan(j);
            const std::string& w = r.why_best;
            if (!contains(w, " beats ")) continue;
            EXPECT_TRUE(contains(w, "; it pays ")) << name << ": " << w;
            EXPECT_FALSE(contains(w, "by 0.0%") || contains(w, "by 0%")) << name << ": " << w;
            EXPECT_GT(why_gain(w), 0) << name << ": " << w;
            EXPECT_FALSE(contains(w, "e-1")) << name << ": " << w;  // no rounding residue like 8.88e-16 s
        }
    }
}

// A job layout the search does not hold (here a rank order outside kPlannerOrders) is still
// what the user asked about: it is scored as `ptd estimate` scores it, and the line compares
// the best with it (or says it is faster than anything searched), and says it lies outside.
TEST(PlannerWhy, ComparesWithTheJobsLayoutOutsideTheSearchSpace) {
    JobSpec job = load_asset("llama3-8b-h100.toml");
    job.parallel.order = "tp-pp-ep-dp-cp";  // not one of kPlannerOrders
    ASSERT_TRUE(validate_job(job).empty());
    const PlanResult r = plan(job);
    ASSERT_FALSE(r.top.empty());
    // planfw: ranked among the layouts the search lists (1 + how many are strictly faster).
    ASSERT_GE(r.job_rank, 0);
    EXPECT_EQ(r.job_rank, std::count_if(r.top.begin(), r.top.end(), [&](const PlanEntry& e) {
                  return e.score.tokens_per_s > estimate_job(job).tokens_per_s;
              }) + (r.job_rank >= (int)r.top.size() ? r.job_rank - (int)r.top.size() : 0));
    EXPECT_TRUE(contains(r.why_best, "your layout ")) << r.why_best;
    EXPECT_TRUE(contains(r.why_best, "lies outside the planner's search space")) << r.why_best;
    if (estimate_job(job).tokens_per_s < r.top[0].score.tokens_per_s) {
        EXPECT_TRUE(contains(r.why_best, " beats your layout ") && contains(r.why_best, "order tp-pp-ep-dp-cp")) << r.why_best;
    }
}
