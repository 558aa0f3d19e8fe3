// schedule_model.cpp — the Schedule tab's model: predicted and measured timelines, the
// Gantt rows, hit-testing and tooltips (see schedule_model.h).
#include "schedule_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cmd_schedule.h"
#include "studio_state.h"

namespace ptd::studio {

void schedule_refresh(StudioState& s) {
    ScheduleViewState& v = s.schedule;
    if (v.revision == s.revision) return;
    v.revision = s.revision;
    v.predicted.reset();
    v.hover_row = v.hover_block = -1;
    if (job_valid(s) && s.job.has_layout()) v.predicted = predicted_timeline(s.job);
}

bool schedule_load_measured(StudioState& s, const std::string& run_dir) {
    ScheduleViewState& v = s.schedule;
    v.run_dir = run_dir;
    v.measured.clear();
    v.measured_stage.clear();
    v.measured_error.clear();
    auto ranks = read_measured_timeline(run_dir);
    if (!ranks) {
        v.measured_error = ranks.error().str();
        return false;
    }
    v.measured = measured_step(*ranks, &v.measured_step);
    for (const TimelineBlock& b : v.measured) {
        int stage = 0;
        for (const MeasuredRank& r : *ranks)
            if (r.header.rank == b.row) stage = r.header.stage;
        v.measured_stage.push_back(stage);
    }
    v.show_measured = true;
    return true;
}

std::vector<GanttRow> gantt_rows(const ScheduleViewState& v) {
    std::vector<GanttRow> rows;
    if (v.predicted)
        for (int st = 0; st < v.predicted->stages; ++st) rows.push_back({false, st, "stage " + std::to_string(st)});
    if (v.show_measured) {
        std::vector<int> ranks;
        for (const TimelineBlock& b : v.measured)
            if (std::find(ranks.begin(), ranks.end(), b.row) == ranks.end()) ranks.push_back(b.row);
        std::sort(ranks.begin(), ranks.end());
        for (int r : ranks) rows.push_back({true, r, "rank " + std::to_string(r)});
    }
    return rows;
}

double gantt_span(const ScheduleViewState& v) {
    double span = v.predicted ? v.predicted->makespan_s : 0;
    if (v.show_measured)
        for (const TimelineBlock& b : v.measured) span = std::max(span, b.end_s);
    return span;
}

const TimelineBlock* row_block(const ScheduleViewState& v, const GanttRow& row, int index) {
    const std::vector<TimelineBlock>* list = row.measured ? &v.measured : v.predicted ? &v.predicted->blocks : nullptr;
    if (!list || index < 0 || index >= (int)list->size()) return nullptr;
    return &(*list)[(size_t)index];
}

int block_at(const ScheduleViewState& v, const GanttRow& row, double t) {
    const std::vector<TimelineBlock>* list = row.measured ? &v.measured : v.predicted ? &v.predicted->blocks : nullptr;
    if (!list) return -1;
    for (size_t k = 0; k < list->size(); ++k) {
        const TimelineBlock& b = (*list)[k];
        if (b.row == row.id && b.stream == kStreamCompute && b.start_s <= t && t < b.end_s) return (int)k;
    }
    return -1;
}

const TimelineBlock* predicted_counterpart(const ScheduleViewState& v, int i) {
    if (!v.predicted || i < 0 || i >= (int)v.measured.size()) return nullptr;
    const TimelineBlock& m = v.measured[(size_t)i];
    const int stage = v.measured_stage[(size_t)i];
    for (const TimelineBlock& b : v.predicted->blocks)
        if (b.row == stage && b.kind == m.kind && b.micro_batch == m.micro_batch &&
            (b.chunk == m.chunk || (b.chunk <= 0 && m.chunk <= 0)) && b.stream == m.stream)
            return &b;
    return nullptr;
}

bool measured_differs(const ScheduleViewState& v, int i) {
    const TimelineBlock* p = predicted_counterpart(v, i);
    if (!p) return true;
    const TimelineBlock& m = v.measured[(size_t)i];
    const double tol = 0.2 * (p->end_s - p->start_s);
    return std::abs((m.end_s - m.start_s) - (p->end_s - p->start_s)) > tol || std::abs(m.start_s - p->start_s) > tol;
}

namespace {
std::string ms(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, s < 1e-3 ? "%.1f us" : "%.2f ms", s < 1e-3 ? s * 1e6 : s * 1e3);
    return buf;
}
std::string kind_words(BlockKind k) {
    switch (k) {
        case BlockKind::forward: return "forward";
        case BlockKind::backward: return "backward";
        case BlockKind::recompute: return "recompute";
        case BlockKind::send: return "p2p send";
        case BlockKind::recv: return "p2p receive";
        case BlockKind::tp_comm: return "TP collective";
        case BlockKind::dp_comm: return "DP communication";
        case BlockKind::optimizer: return "optimizer step";
        case BlockKind::weight_grad: return "weight gradient (W)";  // zb
    }
    return "?";
}
}  // namespace

std::string block_tooltip(const ScheduleViewState& v, const GanttRow& row, int index) {
    const TimelineBlock* b = row_block(v, row, index);
    if (!b) return "";
    std::string t = kind_words(b->kind);
    if (b->micro_batch >= 0) t += ", micro-batch " + std::to_string(b->micro_batch);
    if (b->chunk >= 0 && v.predicted && v.predicted->vpp > 1) t += ", chunk " + std::to_string(b->chunk);
    t += (row.measured ? " on rank " : " on stage ") + std::to_string(row.id) + (row.measured ? " (measured)" : " (predicted)");
    t += "\nstart " + ms(b->start_s) + ", duration " + ms(b->end_s - b->start_s);
    if (!row.measured && b->compute_s > 0 && (b->tp_s + b->cp_s + b->ep_s + b->p2p_s) > 0) {
        t += "\ncompute " + ms(b->compute_s);
        if (b->tp_s > 0) t += ", TP " + ms(b->tp_s);
        if (b->cp_s > 0) t += ", CP " + ms(b->cp_s);
        if (b->ep_s > 0) t += ", EP " + ms(b->ep_s);
        if (b->p2p_s > 0) t += ", p2p " + ms(b->p2p_s);
    }
    if (b->overlapped_s > 0) t += "\n" + ms(b->overlapped_s) + " more hidden behind compute";
    if (row.measured) {
        if (const TimelineBlock* p = predicted_counterpart(v, index))
            t += "\npredicted: start " + ms(p->start_s) + ", duration " + ms(p->end_s - p->start_s) +
                 (measured_differs(v, index) ? "  (differs by > 20%)" : "");
        else t += "\nno predicted block to compare with";
    }
    return t;
}

}  // namespace ptd::studio
