// schedule_model.cpp — the Schedule tab's model: predicted and measured timelines, the
// Gantt rows, hit-testing and tooltips (see schedule_model.h).
#include "schedule_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cmd_schedule.h"
#include "ptd/model/estimate.h"
#include "run_prediction.h"
#include "studio_state.h"

namespace ptd::studio {

std::string live_run_dir(const StudioState& s) {
    const std::string& id = s.live.run.manifest.run_id;
    auto names_run = [&](const std::string& d) { return !d.empty() && std::filesystem::path(d).filename() == id; };
    if (names_run(s.launch.run_dir)) return s.launch.run_dir;
    if (names_run(s.live.dir)) return s.live.dir;
    return s.live.dir.empty() ? s.launch.run_dir : s.live.dir;
}

namespace {

void follow_ended_run(StudioState& s) {
    ScheduleViewState& v = s.schedule;
    const LiveRun& run = s.live.run;
    if (!run.active || run.live || (run.state != "finished" && run.state != "failed" && run.state != "stopped")) return;
    const std::string dir = live_run_dir(s);
    if (dir.empty() || dir == v.followed_run) return;
    v.followed_run = dir;
    std::error_code ec;
    if (!std::filesystem::is_directory(std::filesystem::path(dir) / "timeline", ec)) return;  // recorded none
    schedule_load_measured(s, dir);
}

}  // namespace

void schedule_refresh(StudioState& s) {
    ScheduleViewState& v = s.schedule;
    follow_ended_run(s);
    if (v.revision == s.revision) return;
    v.revision = s.revision;
    v.predicted.reset();
    v.profile.reset();
    v.profile_error.clear();
    v.hover_row = v.hover_block = -1;
    if (job_valid(s) && s.job.has_layout()) {
        // The job's cluster profile (cluster.profile), as ptd schedule, ptd estimate and a
        // launch of the job predict (run_prediction.h); one that does not load leaves the
        // preset's prediction, and the legend says why.
        auto profile = load_job_profile(s.job);
        if (!profile) v.profile_error = profile.error().one_line();
        else if (*profile) v.profile = profile_record(**profile);
        v.predicted = predicted_timeline(s.job, profile && *profile ? &(*profile)->profile : nullptr);
        RunPrediction source;
        source.gpu = s.job.cluster.gpu.name;
        source.profile = v.profile;
        if (v.profile) source.profile_unused = profile_unused_reason(s.job);
        v.prediction_source = prediction_source_text(source);
    }
    schedule_set_rows(s, v.replica);  // the job's layout may have changed
    schedule_fit(v);
}

void schedule_set_rows(StudioState& s, int replica) {
    ScheduleViewState& v = s.schedule;
    v.replica_ranks.clear();
    v.hover_row = v.hover_block = -1;
    if (!v.predicted || !s.layout || replica < 0 || replica >= s.layout->degree[DIM_DP]) {
        v.replica = -1;
        return;
    }
    v.replica = replica;
    const RankLayout& l = *s.layout;
    for (int pp = 0; pp < l.degree[DIM_PP]; ++pp)
        for (int cp = 0; cp < l.degree[DIM_CP]; ++cp)
            for (int tp = 0; tp < l.degree[DIM_TP]; ++tp)
                v.replica_ranks.push_back({l.rank_of(tp, cp, replica, pp), pp, tp, cp});
    std::sort(v.replica_ranks.begin(), v.replica_ranks.end(),
              [](const auto& a, const auto& b) { return a.rank < b.rank; });
}

std::pair<double, double> schedule_view(const ScheduleViewState& v, double span) {
    if (v.view_t1 <= v.view_t0 || span <= 0) return {0.0, span};
    return {v.view_t0, v.view_t1};
}

void schedule_zoom(ScheduleViewState& v, double span, double at_s, double factor) {
    if (span <= 0 || !(factor > 0)) return;
    auto [t0, t1] = schedule_view(v, span);
    const double width = std::clamp((t1 - t0) * factor, span * 1e-6, span);
    const double frac = t1 > t0 ? std::clamp((at_s - t0) / (t1 - t0), 0.0, 1.0) : 0.5;
    double n0 = at_s - frac * width;
    n0 = std::clamp(n0, 0.0, span - width);
    if (width >= span) return schedule_fit(v);
    v.view_t0 = n0;
    v.view_t1 = n0 + width;
}

void schedule_pan(ScheduleViewState& v, double span, double delta_s) {
    auto [t0, t1] = schedule_view(v, span);
    const double width = t1 - t0;
    if (width >= span) return;  // the whole span is shown: nothing to pan
    v.view_t0 = std::clamp(t0 + delta_s, 0.0, span - width);
    v.view_t1 = v.view_t0 + width;
}

bool nested_block(const TimelineBlock& b) { return b.kind == BlockKind::recompute && b.stream == kStreamCompute; }

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
    v.measured_dp.clear();
    for (const TimelineBlock& b : v.measured) {
        int stage = 0, dp = 0;
        for (const MeasuredRank& r : *ranks)
            if (r.header.rank == b.row) stage = r.header.stage, dp = r.header.dp;
        v.measured_stage.push_back(stage);
        v.measured_dp.push_back(dp);
    }
    v.show_measured = true;
    return true;
}

std::vector<GanttRow> gantt_rows(const ScheduleViewState& v) {
    std::vector<GanttRow> rows;
    if (v.predicted && v.replica >= 0) {
        const bool tp = v.predicted->tp > 1, cp = v.predicted->cp > 1;
        for (const auto& r : v.replica_ranks) {
            std::string label = "rank " + std::to_string(r.rank) + " (s" + std::to_string(r.stage);
            if (tp) label += " t" + std::to_string(r.tp);
            if (cp) label += " c" + std::to_string(r.cp);
            rows.push_back({false, r.stage, label + ")", r.rank});
        }
    } else if (v.predicted) {
        for (int st = 0; st < v.predicted->stages; ++st) rows.push_back({false, st, "stage " + std::to_string(st)});
    }
    if (v.show_measured) {
        std::vector<int> ranks;
        for (size_t k = 0; k < v.measured.size(); ++k) {
            const TimelineBlock& b = v.measured[k];
            const int shown = v.replica >= 0 ? v.replica : v.measured_all_replicas ? -1 : 0;  // -1: every replica
            if (shown >= 0 && k < v.measured_dp.size() && v.measured_dp[k] != shown) continue;
            if (std::find(ranks.begin(), ranks.end(), b.row) == ranks.end()) ranks.push_back(b.row);
        }
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
    // Parts of a block (a recompute forward inside its backward, a TP collective, a p2p
    // transfer) have no block of their own in the prediction: they are not compared.
    if (i >= 0 && i < (int)v.measured.size()) {
        const TimelineBlock& b = v.measured[(size_t)i];
        if (nested_block(b) || b.kind == BlockKind::tp_comm || b.kind == BlockKind::send || b.kind == BlockKind::recv)
            return false;
    }
    const TimelineBlock* p = predicted_counterpart(v, i);
    if (!p) return true;
    const TimelineBlock& m = v.measured[(size_t)i];
    // The engine's backward holds its recompute forwards; the prediction draws that part as
    // a block just before: compare the measured backward with both.
    double p_start = p->start_s;
    if (p->kind == BlockKind::backward && v.predicted)
        for (const TimelineBlock& r : v.predicted->blocks)
            if (r.kind == BlockKind::recompute && r.row == p->row && r.micro_batch == p->micro_batch &&
                r.chunk == p->chunk && r.end_s == p->start_s)
                p_start = r.start_s;
    const double tol = 0.2 * (p->end_s - p_start);
    return std::abs((m.end_s - m.start_s) - (p->end_s - p_start)) > tol || std::abs(m.start_s - p_start) > tol;
}

std::vector<GanttSpan> gantt_spans(const ScheduleViewState& v, const GanttRow& row, double view0, double view1,
                                   double px_per_s, double min_px) {
    std::vector<GanttSpan> spans;
    const std::vector<TimelineBlock>* list = row.measured ? &v.measured : v.predicted ? &v.predicted->blocks : nullptr;
    if (!list) return spans;
    const double narrow_s = min_px / std::max(px_per_s, 1e-300), pixel_s = 1 / std::max(px_per_s, 1e-300);
    auto kind = [&](int k) { return (*list)[(size_t)k].kind; };
    // Blocks by span. A span of narrow touching blocks is one phase of the schedule: a run of
    // one kind (warm-up forwards, cool-down backwards) or an alternation of kinds (1F1B's
    // steady state); a run that changes kind after two or more blocks, or an alternation
    // that repeats a kind, starts the next span.
    std::vector<std::vector<int>> groups;
    bool open = false, alternating = false;
    double open_end = 0;
    for (size_t k = 0; k < list->size(); ++k) {
        const TimelineBlock& b = (*list)[k];
        if (b.row != row.id || b.stream != kStreamCompute || nested_block(b)) continue;
        if (b.end_s < view0 || b.start_s > view1) continue;
        const bool narrow = b.end_s - b.start_s < narrow_s;
        bool join = open && narrow && b.start_s - open_end < pixel_s;
        if (join) {
            std::vector<int>& g = groups.back();
            const BlockKind prev = kind(g.back());
            if (!alternating && b.kind != prev) {
                if (g.size() == 1) alternating = true;  // F then B: the alternation begins
                else join = false;                      // a run of one kind ends
            } else if (alternating && b.kind == prev) {
                // The alternation ended with its last block: that one starts a run of its kind.
                const int moved = g.back();
                g.pop_back();
                groups.push_back({moved});
                alternating = false;
            }
        }
        if (join) {
            groups.back().push_back((int)k);
        } else {
            groups.push_back({(int)k});
            alternating = false;
        }
        open = narrow;
        open_end = std::max(join ? open_end : b.end_s, b.end_s);
    }
    for (const std::vector<int>& g : groups) {
        GanttSpan s;
        s.first = g.front(), s.last = g.back(), s.blocks = (int)g.size();
        s.start_s = (*list)[(size_t)g.front()].start_s;
        for (int k : g) {
            const TimelineBlock& b = (*list)[(size_t)k];
            s.end_s = std::max(s.end_s, b.end_s);
            if (b.micro_batch >= 0) {
                s.mb_lo = s.mb_lo < 0 ? b.micro_batch : std::min(s.mb_lo, b.micro_batch);
                s.mb_hi = std::max(s.mb_hi, b.micro_batch);
            }
            s.forward |= b.kind == BlockKind::forward;
            s.backward |= b.kind == BlockKind::backward;
            s.other |= b.kind != BlockKind::forward && b.kind != BlockKind::backward;
        }
        spans.push_back(s);
    }
    return spans;
}

std::string span_label(const GanttSpan& s) {
    if (s.mb_lo < 0) return "";
    std::string out = s.forward && s.backward ? "F/B" : s.forward ? "F" : s.backward ? "B" : "";
    if (s.other) out += "+";
    out += (out.empty() ? "" : " ") + std::to_string(s.mb_lo);
    if (s.mb_hi > s.mb_lo) out += "-" + std::to_string(s.mb_hi);
    return out;
}

double row_idle_share(const ScheduleViewState& v, const GanttRow& row) {
    if (row.measured || !v.predicted || v.predicted->makespan_s <= 0) return 0;
    const Timeline& t = *v.predicted;
    if (row.id < 0 || row.id >= (int)t.busy_s.size()) return 0;
    return std::clamp(1 - t.busy_s[(size_t)row.id] / t.makespan_s, 0.0, 1.0);
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

SchedulePredictionNote schedule_prediction_note(const StudioState& s) {
    const ScheduleViewState& v = s.schedule;
    SchedulePredictionNote note;
    if (!v.predicted) return note;
    std::string& t = note.text;
    t = "prediction: estimate_job of the edited job with the " + v.prediction_source + ", step " + ms(v.predicted->makespan_s);
    if (!v.profile_error.empty()) t += " (its cluster.profile cannot be used: " + v.profile_error + ")";
    if (!v.show_measured || v.run_dir.empty() || v.run_dir != live_run_dir(s) || !s.live.run.prediction) return note;
    const RunPrediction& run = *s.live.run.prediction;
    if (!run.available) {
        t += "; the Live run has no prediction (" + run.why_none + ")";
        return note;
    }
    // The same prediction: the same step from the same figures (a profile the time model
    // does not take for the job counts as none).
    auto figures = [](const std::optional<RunProfileRecord>& p, bool unused) -> std::optional<RunProfileRecord> {
        return unused ? std::nullopt : p;
    };
    const bool same_figures =
        figures(run.profile, !run.profile_unused.empty()) == figures(v.profile, !profile_unused_reason(s.job).empty());
    const double step = v.predicted->makespan_s;
    const bool same_step = std::abs(run.step_s - step) <= 1e-9 * std::max(run.step_s, step);
    if (same_figures && same_step) {
        t += "; the same prediction the Live tab draws dashed for this run";
        return note;
    }
    note.not_the_live_runs = true;
    t += "; not this run's own prediction (the Live tab's dashed lines: step " + ms(run.step_s) + " from the " +
         prediction_source_text(run) + "): the run's job or profile is not the edited job's";
    return note;
}

std::string block_tooltip(const ScheduleViewState& v, const GanttRow& row, int index) {
    const TimelineBlock* b = row_block(v, row, index);
    if (!b) return "";
    std::string t = kind_words(b->kind);
    if (b->micro_batch >= 0) t += ", micro-batch " + std::to_string(b->micro_batch);
    if (b->chunk >= 0 && v.predicted && v.predicted->vpp > 1) t += ", chunk " + std::to_string(b->chunk);
    if (!row.measured && row.rank >= 0) t += " on rank " + std::to_string(row.rank) + ", stage " + std::to_string(row.id) + " (predicted)";
    else t += (row.measured ? " on rank " : " on stage ") + std::to_string(row.id) + (row.measured ? " (measured)" : " (predicted)");
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
                 (measured_differs(v, index) ? "  (differs by > 20%)" : "") + "\n(estimate_job with the " +
                 v.prediction_source + ")";
        else t += "\nno predicted block to compare with";
    }
    return t;
}

}  // namespace ptd::studio
