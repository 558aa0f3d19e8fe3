// live_model.cpp — folding LaunchEvents into per-rank series, the Live panel's view state
// (grouping, hidden lines, step range) and following a run directory.
#include "live_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <system_error>

#include "run_view.h"
#include "studio_state.h"

namespace ptd::studio {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

double steady_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string exit_state(int code) { return code == 0 ? "done" : code == -1 ? "lost" : "exit " + std::to_string(code); }

void note_line(LiveRank& r, bool is_stderr, std::string text) {
    r.log.push_back({is_stderr, std::move(text)});
    while (r.log.size() > kLiveLogLines) {
        r.log.pop_front();
        ++r.log_dropped;
    }
}

void note_event(LiveRun& run, std::string text) {
    run.events.push_back(std::move(text));
    while (run.events.size() > 200) run.events.pop_front();
}

// Calls fn(values, pyramid) for every value array of a series and its pyramid.
template <class Fn>
void for_each_array(LiveSeries& s, Fn&& fn) {
    fn(s.loss, s.pyramids.loss);
    fn(s.tokens_per_s, s.pyramids.tokens_per_s);
    fn(s.mfu, s.pyramids.mfu);
    fn(s.step_s, s.pyramids.step_s);
    for (size_t c = 0; c < (size_t)MEM_CAT_COUNT; ++c) {
        fn(s.mem_current[c], s.pyramids.mem_current[c]);
        fn(s.mem_predicted[c], s.pyramids.mem_predicted[c]);
    }
}

// Drop the entries of steps ≥ `step` (a resumed run going back over them).
void truncate_from(LiveSeries& s, int step) {
    const size_t keep = (size_t)(std::lower_bound(s.steps.begin(), s.steps.end(), step) - s.steps.begin());
    s.steps.resize(keep);
    for_each_array(s, [keep](std::vector<float>& v, MinMaxPyramid& p) {
        v.resize(keep);
        p.truncate(keep);
    });
}

void add_step(LiveRank& r, const MetricRecord& m) {
    LiveSeries& s = r.series;
    if (!s.steps.empty() && m.step <= s.steps.back()) truncate_from(s, m.step);
    s.steps.push_back(m.step);
    s.loss.push_back((float)m.loss);
    s.tokens_per_s.push_back((float)m.tokens_per_s);
    s.mfu.push_back((float)m.mfu);
    s.step_s.push_back(m.times.step > 0 ? (float)m.times.step : kNaN);
    for (int c = 0; c < MEM_CAT_COUNT; ++c) {
        const MemFigure& f = m.memory[(size_t)c];
        s.mem_current[(size_t)c].push_back(m.has_memory ? (float)f.current : kNaN);
        s.mem_predicted[(size_t)c].push_back(m.has_memory && f.predicted ? (float)*f.predicted : kNaN);
    }
    for_each_array(s, [](const std::vector<float>& v, MinMaxPyramid& p) { p.extend(v); });
}

void set_rank_exit(LiveRank& r, int code) {
    r.exit_code = code;
    r.state = exit_state(code);
}

}  // namespace

// ---- The run ---------------------------------------------------------------------------

void live_begin(LiveRun& run, const RunManifest& m) {
    const uint64_t revision = run.revision, generation = run.generation;
    run = LiveRun{};
    run.revision = revision + 1;
    run.generation = generation + 1;
    run.active = true;
    run.live = true;
    run.manifest = m;
    run.state = m.state.empty() ? "starting" : m.state;
    run.steps_total = m.steps;
    const int n = std::max<int>(m.world_size, (int)m.ranks.size());
    run.ranks.resize((size_t)std::max(0, n));
    for (int i = 0; i < (int)run.ranks.size(); ++i) run.ranks[(size_t)i].rank = i;
    for (const RunManifestRank& mr : m.ranks) {
        if (mr.rank < 0 || mr.rank >= n) continue;
        LiveRank& r = run.ranks[(size_t)mr.rank];
        r.host = mr.host;
        r.local_rank = mr.local_rank;
        r.tp = mr.tp;
        r.pp = mr.pp;
        r.dp = mr.dp;
        r.pid = mr.pid;
    }
}

void live_set_manifest(LiveRun& run, const RunManifest& m) {
    bool changed = false;
    auto set = [&](auto& field, const auto& value) {
        if (field != value) {
            field = value;
            changed = true;
        }
    };
    // The manifest's state only moves forward: a followed directory's events may already
    // have said "running" while the manifest still says "starting".
    if (!m.state.empty() && (m.state != "starting" || run.state.empty())) set(run.state, m.state);
    if (!m.reason.empty()) set(run.reason, m.reason);
    if (is_final_run_state(m.state)) set(run.exit_code, m.exit_code);
    if (m.steps > 0) set(run.steps_total, m.steps);
    for (const RunManifestRank& mr : m.ranks) {
        if (mr.rank < 0 || mr.rank >= (int)run.ranks.size()) continue;
        LiveRank& r = run.ranks[(size_t)mr.rank];
        if (mr.pid > 0) set(r.pid, mr.pid);
    }
    // Exit codes come as rank_exited events, after the rank's last lines.
    const RunManifest keep_ranks = run.manifest;
    run.manifest = m;
    if (run.manifest.ranks.size() < keep_ranks.ranks.size()) run.manifest.ranks = keep_ranks.ranks;
    if (changed) ++run.revision;
}

void live_apply(LiveRun& run, const LaunchEvent& ev) {
    LiveRank* r = ev.rank >= 0 && ev.rank < (int)run.ranks.size() ? &run.ranks[(size_t)ev.rank] : nullptr;
    auto started = [&](LiveRank& x) {
        if (x.state == "starting") x.state = "running";
        if (run.state == "starting" || run.state.empty()) run.state = "running";
    };
    switch (ev.kind) {
        case LaunchEventKind::host_connecting:
        case LaunchEventKind::host_ready:
            note_event(run, ev.text);
            break;
        case LaunchEventKind::host_failed:
            note_event(run, "host failed: " + ev.text);
            for (LiveRank& x : run.ranks) {
                if (x.host != ev.host || x.exit_code) continue;
                x.state = "lost";
                note_line(x, true, "host failed: " + ev.text);
            }
            if (run.reason.empty()) run.reason = ev.text;
            break;
        case LaunchEventKind::rank_started:
            if (!r) return;
            if (ev.pid > 0) r->pid = ev.pid;
            started(*r);
            break;
        case LaunchEventKind::output:
            if (!r) return;
            started(*r);
            note_line(*r, ev.is_stderr, ev.text);
            break;
        case LaunchEventKind::metric: {
            if (!r || !ev.metric) return;
            started(*r);
            const MetricRecord& m = *ev.metric;
            take_place_and_memory(*r, m);
            switch (m.kind) {
                case MetricKind::start:
                    if (run.steps_total == 0) run.steps_total = m.steps_total;
                    break;
                case MetricKind::step:
                    add_step(*r, m);
                    r->last_step = m.step;  // may go back on a resume
                    r->last_loss = m.loss;
                    r->has_step = true;
                    run.max_step = std::max(run.max_step, m.step);
                    break;
                case MetricKind::end:
                    r->last_step = std::max(r->last_step, m.step);
                    run.max_step = std::max(run.max_step, m.step);
                    break;
                case MetricKind::warning:
                    note_line(*r, true, "warning: " + m.message);
                    break;
                case MetricKind::error:
                    r->error = m.message;
                    note_line(*r, true, "error: " + m.message);
                    break;
                case MetricKind::checkpoint: break;
                case MetricKind::probe: break;  // a calibration's lines (ptd calibrate); the Live tab shows training
            }
            break;
        }
        case LaunchEventKind::rank_exited:
            if (!r) return;
            set_rank_exit(*r, ev.exit_code);
            break;
        case LaunchEventKind::restart:
            // The ranks start again from a checkpoint: a marker on the plots at its step, and
            // the failed attempt's exits are history.
            note_event(run, ev.text);
            run.restart_steps.push_back(std::max(0, ev.step));
            for (LiveRank& x : run.ranks)
                if (x.exit_code) x.exit_code.reset(), x.state = "restarting";
            run.reason.clear();
            break;
        case LaunchEventKind::stopping:
            note_event(run, "stopping: " + ev.text);
            if (run.reason.empty()) run.reason = ev.text;
            break;
        case LaunchEventKind::finished:
            run.live = false;
            run.exit_code = ev.exit_code;
            if (!is_final_run_state(run.state))
                run.state = final_run_state(ev.exit_code);
            if (run.reason.empty() && ev.exit_code != 0) run.reason = ev.text;
            note_event(run, "finished: " + ev.text);
            break;
    }
    ++run.revision;
}

// ---- Lines -------------------------------------------------------------------------------

const char* live_metric_title(LiveMetric m) {
    switch (m) {
        case LiveMetric::loss: return "Loss";
        case LiveMetric::tokens_per_s: return "Tokens/s";
        case LiveMetric::step_time: return "Step time";
        case LiveMetric::mfu: return "MFU";
        case LiveMetric::memory: return "Memory";
    }
    return "?";
}

std::optional<PlotLevel> live_predicted_level(const LiveRun& run, LiveMetric m) {
    if (!run.prediction || !run.prediction->available) return std::nullopt;
    const RunPrediction& p = *run.prediction;
    const Range* band = nullptr;
    PlotLevel level;
    if (m == LiveMetric::tokens_per_s) level.value = p.tokens_per_s, band = &p.speed.tokens_per_s;
    else if (m == LiveMetric::step_time) level.value = p.step_s, band = &p.speed.step_s;
    else return std::nullopt;
    if (p.speed.known) level.has_band = true, level.lo = band->lo, level.hi = band->hi;
    return level;
}

std::optional<double> live_recent_median(const LiveRun& run, LiveMetric m, int steps) {
    std::vector<double> values;
    for (const LiveRank& r : run.ranks) {
        const SeriesView v = live_rank_series(r, m, MEM_TOTAL, false);
        for (size_t i = v.values.size() > (size_t)std::max(0, steps) ? v.values.size() - (size_t)steps : 0; i < v.values.size(); ++i)
            if (std::isfinite(v.values[i])) values.push_back(v.values[i]);
    }
    if (values.empty()) return std::nullopt;
    const size_t mid = values.size() / 2;
    std::nth_element(values.begin(), values.begin() + (long)mid, values.end());
    const double upper = values[mid];
    if (values.size() % 2 == 1) return upper;
    return (*std::max_element(values.begin(), values.begin() + (long)mid) + upper) / 2;
}

const char* live_aggregate_label(LiveAggregate a) {
    switch (a) {
        case LiveAggregate::rank: return "per rank";
        case LiveAggregate::tp_group: return "by TP group";
        case LiveAggregate::pp_stage: return "by PP stage";
        case LiveAggregate::all: return "all ranks";
    }
    return "?";
}

LiveAggregate live_default_aggregate(int ranks) {
    return ranks > kLiveRanksPerRankMax ? LiveAggregate::pp_stage : LiveAggregate::rank;
}

std::vector<LiveGroup> live_groups(const LiveRun& run, LiveAggregate a) {
    std::vector<LiveGroup> out;
    const int n = (int)run.ranks.size();
    if (a == LiveAggregate::rank) {
        out.resize((size_t)n);
        for (int i = 0; i < n; ++i) {
            out[(size_t)i].id = i;
            out[(size_t)i].label = "rank " + std::to_string(i);
            out[(size_t)i].members = {i};
        }
        return out;
    }
    if (a == LiveAggregate::all) {
        out.push_back({0, "all ranks", {}});
        for (int i = 0; i < n; ++i) out[0].members.push_back(i);
        return out;
    }
    if (a == LiveAggregate::pp_stage) {
        std::map<int, std::vector<int>> by_stage;
        for (int i = 0; i < n; ++i) by_stage[run.ranks[(size_t)i].pp].push_back(i);
        for (auto& [stage, members] : by_stage)
            out.push_back({stage, "PP stage " + std::to_string(stage), std::move(members)});
        return out;
    }
    // TP groups: the ranks that differ only in their tp coordinate, numbered in the order of
    // their lowest rank (the layout tab numbers them the same way for the usual orders).
    std::map<std::pair<int, int>, int> index;  // (dp, pp) → group
    for (int i = 0; i < n; ++i) {
        const LiveRank& r = run.ranks[(size_t)i];
        auto [it, fresh] = index.try_emplace({r.dp, r.pp}, (int)out.size());
        if (fresh) out.push_back({(int)out.size(), "TP group " + std::to_string(out.size()), {}});
        out[(size_t)it->second].members.push_back(i);
    }
    return out;
}

SeriesView live_rank_series(const LiveRank& r, LiveMetric m, int mem_cat, bool predicted) {
    const LiveSeries& s = r.series;
    const LiveSeries::Pyramids& p = s.pyramids;
    const size_t c = (size_t)std::clamp(mem_cat, 0, MEM_CAT_COUNT - 1);
    if (predicted) {
        if (m != LiveMetric::memory) return {};
        return {s.steps, s.mem_predicted[c], &p.mem_predicted[c]};
    }
    switch (m) {
        case LiveMetric::loss: return {s.steps, s.loss, &p.loss};
        case LiveMetric::tokens_per_s: return {s.steps, s.tokens_per_s, &p.tokens_per_s};
        case LiveMetric::step_time: return {s.steps, s.step_s, &p.step_s};
        case LiveMetric::mfu: return {s.steps, s.mfu, &p.mfu};
        case LiveMetric::memory: return {s.steps, s.mem_current[c], &p.mem_current[c]};
    }
    return {};
}

void live_mean_series(const LiveRun& run, std::span<const int> members, LiveMetric m, int mem_cat, bool predicted,
                      std::vector<int>& steps, std::vector<float>& values) {
    steps.clear();
    values.clear();
    int lo = std::numeric_limits<int>::max(), hi = std::numeric_limits<int>::min();
    size_t points = 0;
    for (int rank : members) {
        if (rank < 0 || rank >= (int)run.ranks.size()) continue;
        const SeriesView v = live_rank_series(run.ranks[(size_t)rank], m, mem_cat, predicted);
        if (v.steps.empty() || v.values.empty()) continue;
        lo = std::min(lo, v.steps.front());
        hi = std::max(hi, v.steps.back());
        points += v.steps.size();
    }
    if (points == 0) return;
    // Steps are dense in practice (1, 2, 3, ...): sum into arrays indexed by step. A sparse
    // range (a resume far ahead) falls back to a map.
    const long long width = (long long)hi - lo + 1;
    if (width <= (long long)points * 4 + 1024) {
        std::vector<double> sum((size_t)width, 0.0);
        std::vector<int> count((size_t)width, 0);
        for (int rank : members) {
            if (rank < 0 || rank >= (int)run.ranks.size()) continue;
            const SeriesView v = live_rank_series(run.ranks[(size_t)rank], m, mem_cat, predicted);
            for (size_t i = 0; i < v.steps.size() && i < v.values.size(); ++i) {
                if (!std::isfinite(v.values[i])) continue;
                const size_t k = (size_t)(v.steps[i] - lo);
                sum[k] += v.values[i];
                ++count[k];
            }
        }
        for (size_t k = 0; k < (size_t)width; ++k) {
            if (count[k] == 0) continue;
            steps.push_back(lo + (int)k);
            values.push_back((float)(sum[k] / count[k]));
        }
        return;
    }
    std::map<int, std::pair<double, int>> acc;
    for (int rank : members) {
        if (rank < 0 || rank >= (int)run.ranks.size()) continue;
        const SeriesView v = live_rank_series(run.ranks[(size_t)rank], m, mem_cat, predicted);
        for (size_t i = 0; i < v.steps.size() && i < v.values.size(); ++i) {
            if (!std::isfinite(v.values[i])) continue;
            auto& [sum, count] = acc[v.steps[i]];
            sum += v.values[i];
            ++count;
        }
    }
    for (const auto& [step, sc] : acc) {
        steps.push_back(step);
        values.push_back((float)(sc.first / sc.second));
    }
}

void live_median_series(const LiveRun& run, std::span<const int> members, LiveMetric m, int mem_cat, bool predicted,
                        std::vector<int>& steps, std::vector<float>& median, std::vector<float>& lo,
                        std::vector<float>& hi) {
    steps.clear(), median.clear(), lo.clear(), hi.clear();
    std::map<int, std::vector<float>> at;  // step → the members' values there
    for (int rank : members) {
        if (rank < 0 || rank >= (int)run.ranks.size()) continue;
        const SeriesView v = live_rank_series(run.ranks[(size_t)rank], m, mem_cat, predicted);
        for (size_t i = 0; i < v.steps.size() && i < v.values.size(); ++i)
            if (std::isfinite(v.values[i])) at[v.steps[i]].push_back(v.values[i]);
    }
    for (auto& [step, vals] : at) {
        std::sort(vals.begin(), vals.end());
        const size_t n = vals.size();
        steps.push_back(step);
        median.push_back(n % 2 ? vals[n / 2] : (float)(((double)vals[n / 2 - 1] + vals[n / 2]) / 2));
        lo.push_back(vals.front());
        hi.push_back(vals.back());
    }
}

std::vector<LiveOutlier> live_outliers(LiveState& live, LiveMetric m) {
    std::vector<LiveOutlier> out;
    if (live.view.aggregate == LiveAggregate::rank) return out;
    const std::vector<LiveGroup>& groups = live_lines(live);
    for (size_t g = 0; g < groups.size(); ++g) {
        if (groups[g].members.size() < 3) continue;
        std::vector<std::pair<int, const LiveRank*>> last;  // (rank, its series) with a last value
        std::vector<float> values;
        std::vector<int> steps;
        for (int r : groups[g].members) {
            const SeriesView v = live_rank_series(live.run.ranks[(size_t)r], m, live.view.mem_cat, false);
            if (v.values.empty() || !std::isfinite(v.values.back())) continue;
            last.push_back({r, &live.run.ranks[(size_t)r]});
            values.push_back(v.values.back());
            steps.push_back(v.steps.back());
        }
        if (values.size() < 3) continue;
        std::vector<float> sorted = values;
        std::sort(sorted.begin(), sorted.end());
        const size_t n = sorted.size();
        const double med = n % 2 ? sorted[n / 2] : ((double)sorted[n / 2 - 1] + sorted[n / 2]) / 2;
        std::vector<double> dev;
        for (float v : values) dev.push_back(std::abs(v - med));
        std::sort(dev.begin(), dev.end());
        const double mad = n % 2 ? dev[n / 2] : (dev[n / 2 - 1] + dev[n / 2]) / 2;
        for (size_t k = 0; k < values.size(); ++k) {
            const double d = std::abs(values[k] - med);
            if (d > 3 * 1.4826 * mad && d > 0.05 * std::abs(med))
                out.push_back({last[k].first, (int)g, steps[k], values[k], (float)med});
        }
    }
    return out;
}

const std::vector<LiveGroup>& live_lines(LiveState& live) {
    LiveView::Cache& c = live.view.cache;
    if (c.groups_generation != live.run.generation || c.groups_aggregate != live.view.aggregate) {
        c.groups = live_groups(live.run, live.view.aggregate);
        c.groups_generation = live.run.generation;
        c.groups_aggregate = live.view.aggregate;
    }
    if (live.view.hidden.size() != c.groups.size()) live.view.hidden.assign(c.groups.size(), 0);
    return c.groups;
}

SeriesView live_line_series(LiveState& live, int line, LiveMetric m, bool predicted) {
    const std::vector<LiveGroup>& groups = live_lines(live);
    if (line < 0 || line >= (int)groups.size()) return {};
    if (predicted && m != LiveMetric::memory) return {};
    const LiveRun& run = live.run;
    if (live.view.aggregate == LiveAggregate::rank) {
        const int rank = groups[(size_t)line].members.front();
        return live_rank_series(run.ranks[(size_t)rank], m, live.view.mem_cat, predicted);
    }
    LiveView::Cache::Slot& slot = live.view.cache.slots[predicted ? kLiveMetricCount : (size_t)m];
    const bool regroup = slot.aggregate != live.view.aggregate || slot.steps.size() != groups.size() ||
                         (m == LiveMetric::memory && slot.mem_cat != live.view.mem_cat);
    const double now = steady_s();
    // While a run is live its revision changes with every line: recompute the means at most
    // 4 times a second then; the last ≤ 0.25 s of steps show up on the next refresh.
    const bool stale = slot.revision != run.revision && (!run.live || now - slot.computed_at >= 0.25);
    if (regroup || stale) {
        slot.steps.resize(groups.size());
        slot.values.resize(groups.size());
        slot.pyramids.resize(groups.size());
        slot.band_steps.resize(groups.size());
        slot.band_values.resize(groups.size());
        std::vector<float> lo, hi;
        for (size_t g = 0; g < groups.size(); ++g) {
            live_median_series(run, groups[g].members, m, live.view.mem_cat, predicted, slot.steps[g], slot.values[g], lo,
                               hi);
            slot.pyramids[g].assign(slot.values[g]);  // O(steps), like the median itself
            std::vector<int>& bs = slot.band_steps[g];
            std::vector<float>& bv = slot.band_values[g];
            bs.clear(), bv.clear();
            for (size_t i = 0; i < slot.steps[g].size(); ++i) {
                bs.insert(bs.end(), {slot.steps[g][i], slot.steps[g][i]});
                bv.insert(bv.end(), {lo[i], hi[i]});
            }
        }
        slot.revision = run.revision;
        slot.aggregate = live.view.aggregate;
        slot.mem_cat = live.view.mem_cat;
        slot.computed_at = now;
    }
    return {slot.steps[(size_t)line], slot.values[(size_t)line], &slot.pyramids[(size_t)line]};
}

SeriesView live_line_band(LiveState& live, int line, LiveMetric m) {
    if (live.view.aggregate == LiveAggregate::rank) return {};
    if (live_line_series(live, line, m, false).steps.empty()) return {};  // refreshes the slot
    const LiveView::Cache::Slot& slot = live.view.cache.slots[(size_t)m];
    if (line < 0 || line >= (int)slot.band_steps.size()) return {};
    return {slot.band_steps[(size_t)line], slot.band_values[(size_t)line], nullptr};
}

bool live_line_visible(const LiveState& live, int line) {
    return line >= 0 && (line >= (int)live.view.hidden.size() || !live.view.hidden[(size_t)line]);
}

void live_toggle_line(LiveState& live, int line) {
    live_lines(live);
    if (line < 0 || line >= (int)live.view.hidden.size()) return;
    live.view.hidden[(size_t)line] ^= 1;
}

void live_show_all(LiveState& live, bool visible) {
    live_lines(live);
    std::fill(live.view.hidden.begin(), live.view.hidden.end(), visible ? 0 : 1);
}

void live_set_aggregate(LiveState& live, LiveAggregate a) {
    if (live.view.aggregate == a) return;
    live.view.aggregate = a;
    live.view.hidden.clear();  // the lines are different ones now
    live_lines(live);
}

// ---- Step range --------------------------------------------------------------------------

StepRange live_data_range(const LiveRun& run) {
    int lo = std::numeric_limits<int>::max(), hi = std::numeric_limits<int>::min();
    for (const LiveRank& r : run.ranks) {
        if (r.series.steps.empty()) continue;
        lo = std::min(lo, r.series.steps.front());
        hi = std::max(hi, r.series.steps.back());
    }
    if (lo > hi) return {0, 0};
    return {(double)lo, (double)hi};
}

StepRange live_x_range(const LiveState& live) {
    StepRange r;
    if (live.view.follow) {
        const StepRange d = live_data_range(live.run);
        r.hi = d.hi;
        r.lo = live.view.span > 0 ? d.hi - live.view.span : d.lo;
    } else {
        r.lo = live.view.x0;
        r.hi = live.view.x1;
    }
    if (!(r.hi - r.lo >= 1)) r.hi = r.lo + 1;
    return r;
}

void live_set_follow(LiveState& live, bool follow) {
    if (follow == live.view.follow) return;
    if (!follow) {
        const StepRange r = live_x_range(live);
        live.view.x0 = r.lo;
        live.view.x1 = r.hi;
    } else {
        live.view.span = live.view.x1 - live.view.x0;
        const StepRange d = live_data_range(live.run);
        if (live.view.span >= d.hi - d.lo) live.view.span = 0;  // it showed everything
    }
    live.view.follow = follow;
}

void live_zoom(LiveState& live, double at, float steps) {
    const double factor = std::pow(0.8, (double)steps);  // one wheel notch in = 80 % of the range
    const StepRange r = live_x_range(live);
    const StepRange d = live_data_range(live.run);
    const double full = std::max(1.0, d.hi - d.lo);
    const double width = std::clamp((r.hi - r.lo) * factor, 4.0, full * 4);
    if (live.view.follow) {
        live.view.span = width >= full ? 0 : width;
        return;
    }
    const double t = r.hi > r.lo ? std::clamp((at - r.lo) / (r.hi - r.lo), 0.0, 1.0) : 0.5;
    live.view.x0 = at - t * width;
    live.view.x1 = live.view.x0 + width;
}

void live_pan(LiveState& live, double d_steps) {
    live_set_follow(live, false);
    live.view.x0 += d_steps;
    live.view.x1 += d_steps;
}

void live_reset_view(LiveState& live) {
    live.view.follow = true;
    live.view.span = 0;
}

int nearest_step_index(std::span<const int> steps, double x) {
    if (steps.empty()) return -1;
    const auto it = std::lower_bound(steps.begin(), steps.end(), x, [](int s, double v) { return (double)s < v; });
    if (it == steps.begin()) return 0;
    if (it == steps.end()) return (int)steps.size() - 1;
    const int i = (int)(it - steps.begin());
    return x - steps[(size_t)i - 1] <= steps[(size_t)i] - x ? i - 1 : i;
}

std::vector<LiveReadoutRow> live_readout(LiveState& live, LiveMetric m, double at) {
    std::vector<LiveReadoutRow> out;
    const int lines = (int)live_lines(live).size();
    for (int line = 0; line < lines; ++line) {
        if (!live_line_visible(live, line)) continue;
        const SeriesView v = live_line_series(live, line, m, false);
        const int i = nearest_step_index(v.steps, at);
        if (i < 0 || i >= (int)v.values.size()) continue;
        LiveReadoutRow row{line, v.steps[(size_t)i], v.values[(size_t)i], kNaN};
        if (const std::optional<PlotLevel> level = live_predicted_level(live.run, m)) row.predicted = (float)level->value;
        if (m == LiveMetric::memory) {
            const SeriesView p = live_line_series(live, line, m, true);
            const int j = nearest_step_index(p.steps, row.step);
            if (j >= 0 && j < (int)p.values.size() && p.steps[(size_t)j] == row.step) row.predicted = p.values[(size_t)j];
        }
        out.push_back(row);
    }
    return out;
}

// ---- Directories -------------------------------------------------------------------------

std::string live_run_job_file(const StudioState& s) {
    if (!s.live.run.active) return "";
    const std::string dir = live_run_dir(s);
    if (dir.empty()) return "";
    std::error_code ec;
    const std::filesystem::path job = std::filesystem::absolute(std::filesystem::path(dir) / "job.toml", ec);
    return !ec && std::filesystem::is_regular_file(job, ec) ? job.lexically_normal().string() : "";
}

bool live_run_job_in_editor(const StudioState& s) {
    const std::string file = live_run_job_file(s);
    if (file.empty() || s.job.origin.file.empty()) return false;
    std::error_code ec;
    return std::filesystem::equivalent(file, s.job.origin.file, ec);
}

Result<void> live_open_run_dir(StudioState& s, const std::string& dir) {
    auto follower = RunFollower::open(dir);
    if (!follower) return std::unexpected(follower.error());
    LiveState& live = s.live;
    live.follower = std::shared_ptr<RunFollower>(std::move(*follower));
    live.dir = dir;
    live.bytes_read = 0;
    live.last_poll = -1;
    live_begin(live.run, live.follower->manifest());
    live_set_aggregate(live, live_default_aggregate((int)live.run.ranks.size()));
    // The prediction the launch made: the run's job.toml with the profile its manifest
    // records (the same one `ptd watch RUN_DIR` shows).
    live.run.prediction = predict_run_dir(dir, live.follower->manifest());
    live.follow_generation = live.run.generation;
    live.view.hidden.clear();
    live.view.hover_step.reset();
    live.view.log_rank = 0;
    live_reset_view(live);
    live_tick(s);  // the first chunk now, so the panel is not empty on the first frame
    return {};
}

bool live_tick(StudioState& s) {
    LiveState& live = s.live;
    if (!live.follower) return false;
    if (live.run.generation != live.follow_generation) {  // a launch replaced the run shown
        live.follower.reset();
        live.dir.clear();
        return false;
    }
    const double now = steady_s();
    // A live directory grows a few lines a second: poll it 10 times a second. While there
    // is a backlog (a finished run being loaded) read on every frame, for at most ~10 ms.
    const bool backlog = live.last_poll < 0;
    if (!backlog && now - live.last_poll < 0.1) return false;
    bool changed = false;
    for (int i = 0; i < 64; ++i) {
        std::vector<LaunchEvent> events = live.follower->poll();
        const uint64_t before = live.run.revision;
        live_set_manifest(live.run, live.follower->manifest());
        for (const LaunchEvent& ev : events) {
            live.bytes_read += ev.text.size() + 1;
            live_apply(live.run, ev);
        }
        changed = changed || !events.empty() || live.run.revision != before;
        if (events.empty() || live.follower->done() || steady_s() - now > 0.010) break;
    }
    // Keep reading every frame until a poll comes back empty (the backlog is read).
    live.last_poll = changed && !live.follower->done() ? -1 : now;
    if (live.follower->done()) {
        live.follower.reset();  // the run is over and every line read
        live.run.live = false;
    }
    return changed;
}

std::vector<std::string> live_recent_run_dirs(const std::string& root, int max) {
    namespace fs = std::filesystem;
    std::vector<std::pair<fs::file_time_type, std::string>> found;
    std::error_code ec;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
        const fs::path manifest = it->path() / "manifest.json";
        std::error_code e2;
        const auto t = fs::last_write_time(manifest, e2);
        if (!e2) found.emplace_back(t, it->path().string());
    }
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second > b.second;
    });
    std::vector<std::string> out;
    for (auto& [t, p] : found) {
        if ((int)out.size() >= max) break;
        out.push_back(std::move(p));
    }
    return out;
}

std::optional<double> live_rank_memory_bytes(const StudioState& s, int rank) {
    const LiveRun& run = s.live.run;
    if (!run.active || rank < 0 || rank >= (int)run.ranks.size()) return std::nullopt;
    const LiveRank& r = run.ranks[(size_t)rank];
    if (!r.has_memory) return std::nullopt;
    return r.mem_total;
}

double live_max_memory_bytes(const StudioState& s) {
    double m = 0;
    if (!s.live.run.active) return 0;
    for (const LiveRank& r : s.live.run.ranks)
        if (r.has_memory) m = std::max(m, r.mem_total);
    return m;
}

}  // namespace ptd::studio
