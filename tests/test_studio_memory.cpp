// test_studio_memory.cpp — the Memory & speed tab's view-model without a window: stage bars
// add up to the estimate, over-capacity stages are flagged, hit-testing finds the segment
// under the mouse, the step-time bar adds up to the step, the rank grid's predicted-memory
// colours follow memory, the tooltip names host and memory, and the estimate is cached
// per job revision.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "studio_state.h"
#include "studio_test_util.h"

using namespace ptd;
using namespace ptd::studio;

namespace {

StudioState default_state() {
    return ptd_test::default_studio_state(1000, 600);
}

}  // namespace

TEST(StudioMemory, EstimateIsCachedPerRevision) {
    StudioState s = default_state();
    EXPECT_EQ(s.memory.cache.computations, 0) << "nothing is estimated until someone asks";
    const Estimate* e = job_estimate(s);
    ASSERT_TRUE(e);
    EXPECT_EQ(s.memory.cache.computations, 1);
    EXPECT_EQ(s.memory.cache.revision, s.revision);
    // Asking again, drawing, hovering: the same estimate, no recomputation.
    EXPECT_EQ(job_estimate(s), e);
    (void)memory_chart(s, 900, 400);
    (void)throughput_figures(s);
    layout_hover(s, 200, 100);
    (void)rank_tooltip(s, 3);
    EXPECT_EQ(s.memory.cache.computations, 1);
    // An edit bumps the revision: one recomputation, with the new job's numbers.
    const double before = e->stages[0].mem.activations;
    ASSERT_TRUE(edit_int(s, "training.micro_batch", 2));
    const Estimate* e2 = job_estimate(s);
    ASSERT_TRUE(e2);
    EXPECT_EQ(s.memory.cache.computations, 2);
    EXPECT_GT(e2->stages[0].mem.activations, before);
    EXPECT_EQ(job_estimate(s), e2);
    EXPECT_EQ(s.memory.cache.computations, 2);
    // An invalid job has no estimate (and estimate_job is not called on it).
    ASSERT_TRUE(edit_int(s, "parallel.tp", 3));
    EXPECT_EQ(job_estimate(s), nullptr);
    EXPECT_EQ(s.memory.cache.computations, 2);
    EXPECT_TRUE(memory_chart(s, 900, 400).bars.empty());
    EXPECT_TRUE(throughput_figures(s).empty());
}

TEST(StudioMemory, EstimateIsFastEnoughForTheUiThread) {
    StudioState s = default_state();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) {
        ++s.revision;  // force a recomputation
        ASSERT_TRUE(job_estimate(s));
    }
    const double per = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 20;
    std::printf("estimate_job, 7B on 32 GPUs: %.1f us per call\n", per * 1e6);
    EXPECT_LT(per, 0.005) << "estimate_job of a 7B job on 32 GPUs took " << per * 1e3 << " ms";
    EXPECT_GT(s.memory.cache.seconds, 0);
}

TEST(StudioMemory, SegmentsSumToTheStageTotal) {
    StudioState s = default_state();
    ASSERT_TRUE(edit_int(s, "parallel.pp", 4));  // 4 stages: embedding first, output last
    const Estimate& e = *job_estimate(s);
    const MemoryChart c = memory_chart(s, 1000, 300);
    ASSERT_EQ(c.bars.size(), 4u);
    EXPECT_STREQ(c.unit.name, "GiB");
    for (const StageBar& b : c.bars) {
        const MemoryBreakdown& m = e.stages[(size_t)b.index].mem;
        const double sum = std::accumulate(b.bytes.begin(), b.bytes.end(), 0.0);
        EXPECT_NEAR(sum, m.total(), m.total() * 1e-12) << b.label;
        EXPECT_DOUBLE_EQ(b.total, m.total());
        EXPECT_DOUBLE_EQ(b.bytes[(size_t)MemPart::overheads], m.temp + m.cuda_context + m.nccl + m.fragmentation);
        // The segments tile the bar from 0 to the total, left to right.
        EXPECT_FLOAT_EQ(b.edge[0], c.bar_x0);
        EXPECT_NEAR(b.edge[kMemParts], c.x_of(m.total()), 0.01);
        for (int p = 0; p < kMemParts; ++p) EXPECT_LE(b.edge[(size_t)p], b.edge[(size_t)p + 1]);
        EXPECT_GT(b.y1, b.y0);
        EXPECT_FALSE(b.over);
        EXPECT_EQ(b.value.find("OOM"), std::string::npos);
    }
    EXPECT_TRUE(c.fits);
    EXPECT_TRUE(c.bars[(size_t)e.worst_stage].worst);
    EXPECT_EQ(std::count_if(c.bars.begin(), c.bars.end(), [](const StageBar& b) { return b.worst; }), 1);
    // The capacity line: the GPU's memory minus the headroom, inside the scale.
    EXPECT_DOUBLE_EQ(c.capacity_bytes, s.job.cluster.gpu.memory_gib * 1024.0 * 1024.0 * 1024.0);
    EXPECT_NEAR(c.usable_bytes, c.capacity_bytes * (1 - s.job.estimate.headroom), 1.0);
    EXPECT_LE(c.usable_x, c.capacity_x);
    EXPECT_LE(c.capacity_x, c.bar_x1);
    EXPECT_GE(c.ticks.size(), 3u);
    EXPECT_NE(memory_headline(s).find("fits"), std::string::npos);
}

TEST(StudioMemory, OverCapacityStageIsFlagged) {
    StudioState s = default_state();
    ASSERT_TRUE(edit_int(s, "training.micro_batch", 32));  // 7B, tp4·pp2: stage 0 needs ~146 GiB of the 79.6
    const Estimate& e = *job_estimate(s);
    ASSERT_FALSE(e.fits);
    const MemoryChart c = memory_chart(s, 1000, 300);
    ASSERT_FALSE(c.bars.empty());
    EXPECT_FALSE(c.fits);
    int over = 0;
    for (const StageBar& b : c.bars) {
        EXPECT_EQ(b.over, b.total > c.usable_bytes) << b.label;
        if (!b.over) continue;
        ++over;
        EXPECT_EQ(b.value.rfind("OOM +", 0), 0u) << b.value;
        EXPECT_GT(b.edge[kMemParts], c.usable_x);
    }
    EXPECT_GE(over, 1);
    EXPECT_TRUE(c.bars[(size_t)e.worst_stage].over);
    EXPECT_EQ(memory_headline(s).rfind("OOM", 0), 0u) << memory_headline(s);
    EXPECT_NE(stage_tooltip(s, e.worst_stage).find("OOM"), std::string::npos);
}

TEST(StudioMemory, HitTestFindsStageAndSegment) {
    StudioState s = default_state();
    ASSERT_TRUE(edit_int(s, "parallel.pp", 4));
    const MemoryChart c = memory_chart(s, 1000, 300);
    ASSERT_EQ(c.bars.size(), 4u);
    for (const StageBar& b : c.bars) {
        const float y = (b.y0 + b.y1) * 0.5f;
        for (int p = 0; p < kMemParts; ++p) {
            if (b.edge[(size_t)p + 1] - b.edge[(size_t)p] < 1) continue;  // too thin to aim at
            const MemoryHit h = memory_hit(c, (b.edge[(size_t)p] + b.edge[(size_t)p + 1]) * 0.5f, y);
            EXPECT_EQ(h.stage, b.index);
            EXPECT_EQ(h.part, p) << b.label << " " << mem_part_label((MemPart)p);
        }
        // On the label, or right of the bar: the stage, no segment.
        EXPECT_EQ(memory_hit(c, 10, y).stage, b.index);
        EXPECT_EQ(memory_hit(c, 10, y).part, -1);
        EXPECT_EQ(memory_hit(c, b.edge[kMemParts] + 2, y).part, -1);
    }
    // Activations are the largest part of stage 0 here: the middle of the bar hits something.
    EXPECT_EQ(memory_hit(c, 500, -1).stage, -1);
    EXPECT_EQ(memory_hit(c, 500, c.content_h + 1).stage, -1);
    // The stage tooltip lists every category with the unit.
    const std::string tip = stage_tooltip(s, 2);
    for (const char* word : {"stage 2", "parameters", "gradients", "optimizer", "activations", "overheads",
                             "CUDA context", "NCCL", "total", "usable", "GiB"})
        EXPECT_NE(tip.find(word), std::string::npos) << word << " in\n" << tip;
}

TEST(StudioMemory, ManyStagesShrinkThenScroll) {
    StudioState s = default_state();
    ASSERT_TRUE(edit_int(s, "cluster.nodes", 32));  // 256 GPUs
    ASSERT_TRUE(edit_int(s, "parallel.tp", 2));
    ASSERT_TRUE(edit_int(s, "parallel.pp", 32));   // llama2-7b has 32 layers
    ASSERT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    const MemoryChart c = memory_chart(s, 1000, 300);
    ASSERT_EQ(c.bars.size(), 32u);
    EXPECT_GE(c.row_h, MemoryViewState::kMinRow);
    EXPECT_GT(c.content_h, 300) << "32 rows at the minimum height scroll";
    EXPECT_EQ(memory_hit(c, 10, c.bars[31].y0 + 1).stage, 31);
}

TEST(StudioMemory, TinyJobsUseMiB) {
    const PresetCatalog& presets = embedded_presets();
    StudioState s = make_state(presets, tiny_local_job(presets));
    ASSERT_TRUE(job_valid(s));
    const MemoryChart c = memory_chart(s, 800, 300);
    ASSERT_FALSE(c.bars.empty());
    EXPECT_STREQ(c.unit.name, "MiB");
    EXPECT_NE(c.bars[0].value.find("MiB"), std::string::npos);
}

TEST(StudioMemory, StepTimePartsSumToStepTime) {
    StudioState s = default_state();
    const Estimate& e = *job_estimate(s);
    const TimeBar b = time_bar(e, 100, 600);
    double sum = 0;
    for (const TimeSegment& seg : b.segments) sum += seg.seconds;
    EXPECT_NEAR(sum, e.step_s, e.step_s * 1e-9);
    EXPECT_NEAR(b.total, e.step_s, e.step_s * 1e-9);
    // The five main terms are always there, in order; the segments tile the bar.
    std::vector<TimePart> parts;
    for (const TimeSegment& seg : b.segments) parts.push_back(seg.part);
    for (TimePart p : {TimePart::compute, TimePart::tp_comm, TimePart::bubble, TimePart::dp_comm, TimePart::optimizer})
        EXPECT_NE(std::ranges::find(parts, p), parts.end()) << time_part_label(p);
    EXPECT_EQ(parts.front(), TimePart::compute);
    EXPECT_FLOAT_EQ(b.segments.front().x0, 100);
    EXPECT_NEAR(b.segments.back().x1, 700, 0.01);
    for (size_t i = 1; i < b.segments.size(); ++i) EXPECT_FLOAT_EQ(b.segments[i].x0, b.segments[i - 1].x1);
    // Hit-testing: the middle of each visible segment is that segment.
    for (size_t i = 0; i < b.segments.size(); ++i) {
        if (b.segments[i].x1 - b.segments[i].x0 < 1) continue;
        EXPECT_EQ(time_hit(b, (b.segments[i].x0 + b.segments[i].x1) * 0.5f), (int)i);
    }
    EXPECT_EQ(time_hit(b, 99), -1);
    EXPECT_EQ(time_hit(b, 701), -1);
    EXPECT_NE(time_segment_text(b, 0).find("compute: "), std::string::npos);
    EXPECT_NE(time_segment_text(b, 0).find("% of the step"), std::string::npos);
}

TEST(StudioMemory, ThroughputFiguresShowTheFlopsConvention) {
    StudioState s = default_state();
    const Estimate& e = *job_estimate(s);
    const std::vector<Figure> f = throughput_figures(s);
    ASSERT_EQ(f.size(), 6u);
    EXPECT_EQ(f[0].label, "MFU");
    char mfu[32];
    std::snprintf(mfu, sizeof mfu, "%.1f%%", e.mfu * 100);
    EXPECT_EQ(f[0].value, mfu);
    EXPECT_NE(f[0].note.find(flops_convention_text(e.flops.convention)), std::string::npos);
    EXPECT_NE(f[0].note.find("PaLM"), std::string::npos) << "the default job counts full attention";
    EXPECT_EQ(f[1].label, "HFU");
    EXPECT_EQ(f[2].label, "tokens/s");
    EXPECT_EQ(f[2].value, format_thousands(e.tokens_per_s));
    EXPECT_EQ(f[3].value, format_thousands(e.tokens_per_s / 32));
    EXPECT_EQ(format_thousands(1234567.2), "1,234,567");
    EXPECT_EQ(flops_convention_text(AttentionFlops::causal).find("causal"), 0u);
}

TEST(StudioMemory, PredictedMemoryColoursFollowMemory) {
    StudioState s = default_state();
    ASSERT_TRUE(edit_int(s, "parallel.pp", 4));  // stages with different memory
    set_colour_by(s, ColourBy::predicted_memory);
    EXPECT_EQ(colour_count(s), 0) << "a heat ramp, no palette";
    const RankLayout& L = *s.layout;
    const Estimate& e = *job_estimate(s);
    std::vector<std::pair<double, int>> by_memory;  // (bytes, rank) for one rank per stage
    for (int r = 0; r < L.world; ++r) {
        const int stage = L.ranks[r].coord[DIM_PP];
        ASSERT_EQ(*predicted_rank_bytes(s, r), e.stages[(size_t)stage].mem.total());
        if (L.ranks[r].coord[DIM_TP] == 0 && L.ranks[r].coord[DIM_DP] == 0) by_memory.push_back({e.stages[(size_t)stage].mem.total(), r});
    }
    std::ranges::sort(by_memory);
    ASSERT_EQ(by_memory.size(), 4u);
    ASSERT_LT(by_memory.front().first, by_memory.back().first) << "the stages differ";
    // More memory → a warmer cell (red minus blue rises along the ramp).
    auto warmth = [&](int r) {
        const Rgb c = cell_rgb(s, r);
        return (int)c.r - (int)c.b;
    };
    for (size_t i = 1; i < by_memory.size(); ++i) {
        if (by_memory[i].first == by_memory[i - 1].first) continue;
        EXPECT_GT(warmth(by_memory[i].second), warmth(by_memory[i - 1].second))
            << "rank " << by_memory[i].second << " holds more than rank " << by_memory[i - 1].second;
    }
    // 7B at pp 4 uses ~15% of an H100: the ramp spans the stages, smallest to largest.
    const HeatScale hs = predicted_heat_scale(s);
    EXPECT_TRUE(hs.relative);
    EXPECT_DOUBLE_EQ(hs.low_bytes, by_memory.front().first);
    EXPECT_DOUBLE_EQ(hs.full_bytes, by_memory.back().first);
    EXPECT_DOUBLE_EQ(*predicted_rank_heat(s, by_memory.front().second), 0.0);
    EXPECT_DOUBLE_EQ(*predicted_rank_heat(s, by_memory.back().second), 1.0);
    for (double f = 0.05; f <= 1.0; f += 0.05) {
        const Rgb a = heat_rgb(f - 0.05), b = heat_rgb(f);
        EXPECT_GT((int)b.r - (int)b.b, (int)a.r - (int)a.b) << f;
    }
    // Over capacity: the OOM red; the palette modes are untouched.
    EXPECT_EQ(heat_rgb(1.2).r, kHeatOom.r);
    ASSERT_TRUE(edit_int(s, "training.micro_batch", 32));
    const int worst = job_estimate(s)->worst_stage;
    const int r = std::ranges::find_if(L.ranks, [&](const RankPlace& p) { return p.coord[DIM_PP] == worst; }) - L.ranks.begin();
    EXPECT_GT(*predicted_rank_fraction(s, r), 1.0);
    EXPECT_FALSE(predicted_heat_scale(s).relative) << "near or over capacity the ramp is the usable memory";
    EXPECT_DOUBLE_EQ(*predicted_rank_heat(s, r), *predicted_rank_fraction(s, r));
    EXPECT_EQ(cell_rgb(s, r).r, kHeatOom.r);
    EXPECT_EQ(cell_rgb(s, r).g, kHeatOom.g);
    set_colour_by(s, ColourBy::dp);
    EXPECT_EQ(cell_rgb(s, r).r, group_rgb(L.ranks[r].coord[DIM_DP]).r);
    EXPECT_EQ(cell_rgb(s, r).b, group_rgb(L.ranks[r].coord[DIM_DP]).b);
}

TEST(StudioMemory, RankTooltipHasHostAndPredictedMemory) {
    StudioState s = default_state();
    const std::string plain = rank_tooltip(s, 13);
    EXPECT_NE(plain.find("node 1"), std::string::npos) << plain;
    EXPECT_NE(plain.find("predicted memory "), std::string::npos) << plain;
    const Estimate& e = *job_estimate(s);
    const std::string mem = format_memory(e.stages[0].mem.total(), memory_unit(e));  // rank 13 is on stage 0
    EXPECT_NE(plain.find(mem), std::string::npos) << mem << " in\n" << plain;
    EXPECT_NE(plain.find("usable"), std::string::npos);
    // With host names, the rank's host is named.
    s.job.cluster.hosts = {"gpu-a01", "gpu-a02", "gpu-a03", "gpu-a04"};
    recompute(s);
    ASSERT_TRUE(job_valid(s)) << s.diagnostics[0].message;
    const std::string named = rank_tooltip(s, 13);
    EXPECT_NE(named.find("host gpu-a02"), std::string::npos) << named;
    EXPECT_NE(named.find("local GPU 5"), std::string::npos) << named;
}

// Every speed figure carries its interval (Estimate::speed, published runs of the GPU's
// generation), formatted as the figure is; the line under "Speed" says where it comes from.
// On a CPU there are no published runs: no ranges, and the line says so.
TEST(StudioMemory, SpeedFiguresCarryTheirInterval) {
    StudioState s = default_state();
    ASSERT_TRUE(set_gpu_preset(s, "h100-sxm"));
    const Estimate& e = *job_estimate(s);
    ASSERT_TRUE(e.speed.known);
    const std::vector<Figure> f = throughput_figures(s);
    ASSERT_EQ(f.size(), 6u);
    for (const Figure& x : f) EXPECT_EQ(x.range.rfind("80%: ", 0), 0u) << x.label << ": " << x.range;
    char mfu[64], step[64];
    std::snprintf(mfu, sizeof mfu, "80%%: %.1f%% – %.1f%%", e.speed.mfu.lo * 100, e.speed.mfu.hi * 100);
    std::snprintf(step, sizeof step, "80%%: %.3f s – %.3f s", e.speed.step_s.lo, e.speed.step_s.hi);
    EXPECT_EQ(f[0].range, mfu);
    EXPECT_EQ(f[5].label, "step time");
    EXPECT_EQ(f[5].range, step);
    EXPECT_EQ(f[2].range, "80%: " + format_thousands(e.speed.tokens_per_s.lo) + " – " +
                              format_thousands(e.speed.tokens_per_s.hi));
    const std::string line = speed_interval_line(s);
    EXPECT_NE(line.find("published hopper (H100, H200) dense runs"), std::string::npos) << line;
    // The memory headline carries the peak's interval (MemoryInterval).
    ASSERT_TRUE(e.memory_interval.known);
    EXPECT_NE(memory_headline(s).find("; 80%: "), std::string::npos) << memory_headline(s);
    EXPECT_NE(line.find(std::to_string(e.speed.band.runs)), std::string::npos) << line;

    ASSERT_TRUE(set_gpu_preset(s, "cpu"));
    ASSERT_TRUE(job_estimate(s));
    for (const Figure& x : throughput_figures(s)) EXPECT_TRUE(x.range.empty()) << x.label;
    EXPECT_EQ(speed_interval_line(s).rfind("no error bars: no published runs on CPUs", 0), 0u) << speed_interval_line(s);
}

// cost: the Memory & speed tab's "Time and cost to train" rows are `ptd estimate`'s, follow the
// budget and price typed into the tab, and invent no price.
TEST(StudioMemory, TrainingCostRowsFollowBudgetAndPrice) {
    StudioState s = default_state();
    ASSERT_TRUE(set_gpu_preset(s, "h100-sxm"));
    std::vector<CostRow> rows = training_rows(s);
    ASSERT_FALSE(rows.empty());
    auto row = [&](const std::string& label) {
        for (const CostRow& r : rows)
            if (r.label == label) return r;
        ADD_FAILURE() << "no row " << label;
        return CostRow{};
    };
    EXPECT_EQ(row("budget").source, "training.steps");
    EXPECT_EQ(row("cost").value, "not given");
    EXPECT_NE(row("energy").source.find("h100-sxm preset: datasheet TDP"), std::string::npos) << row("energy").source;
    EXPECT_NE(row("save every").source.find("Young/Daly"), std::string::npos);
    const uint64_t before = s.revision;
    ASSERT_TRUE(edit_cost_input(s, "training.tokens", 1e12));
    ASSERT_TRUE(edit_cost_input(s, "cluster.gpu_hour_usd", 2));
    EXPECT_GT(s.revision, before);
    EXPECT_FALSE(edit_cost_input(s, "cluster.gpu_hour_usd", -1));
    EXPECT_FALSE(edit_cost_input(s, "training.lr", 1));
    rows = training_rows(s);
    const Estimate& e = *job_estimate(s);
    EXPECT_EQ(rows, training_cost_rows(e.training));
    EXPECT_EQ(row("budget").source, "training.tokens, rounded up to whole steps");
    EXPECT_EQ(row("cost").value.rfind(usd_text(e.training.cost_usd), 0), 0u) << row("cost").value;
    EXPECT_DOUBLE_EQ(e.training.cost_usd, e.training.gpu_hours * 2);
}
