// run_view.cpp — the run dashboard: per-rank state folded from LaunchEvents, drawn as
// fixed columns. Colour goes through term.h (so NO_COLOR and non-TTYs stay plain) and is
// added after padding, so the columns line up with and without it; lines are cut to the
// terminal width counting only visible characters, never wrapped.
#include "run_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "term.h"

namespace ptd {

namespace {

// First `w` code points of plain text, with "…" as the last one when cut.
std::string clip(const std::string& s, int w) {
    if (text_width(s) <= w) return s;
    std::string out;
    int n = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        const unsigned char ch = (unsigned char)s[i];
        if ((ch & 0xC0) != 0x80 && ++n > w - 1) break;
        out += s[i];
    }
    return out + "…";
}

// `s` cut to `width` visible columns: ANSI escape sequences are copied but not counted,
// and a reset is appended when a coloured line was cut so the colour does not leak.
std::string cut_to_width(const std::string& s, int width) {
    if (width <= 0) return s;
    std::string out;
    int visible = 0;
    bool escapes = false;
    for (size_t i = 0; i < s.size();) {
        if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '[') {
            size_t j = i + 2;
            while (j < s.size() && !((unsigned char)s[j] >= 0x40 && (unsigned char)s[j] <= 0x7E)) ++j;
            out.append(s, i, std::min(j + 1, s.size()) - i);
            escapes = true;
            i = j + 1;
            continue;
        }
        const unsigned char ch = (unsigned char)s[i];
        size_t len = ch < 0x80 ? 1 : (ch >> 5) == 0x6 ? 2 : (ch >> 4) == 0xE ? 3 : (ch >> 3) == 0x1E ? 4 : 1;
        len = std::min(len, s.size() - i);
        if (visible == width) {
            if (escapes) out += "\x1b[0m";
            return out;
        }
        out.append(s, i, len);
        ++visible;
        i += len;
    }
    return out;
}

int digits(long long v) {
    int d = 1;
    for (v = std::llabs(v); v >= 10; v /= 10) ++d;
    return d;
}

// Column widths (the values are padded to these, the header names too).
constexpr int kStateW = 9, kLossW = 7, kRateW = 9, kMfuW = 6, kMemW = 19, kStepTimeW = 9;
// With a prediction the speed columns hold "measured / predicted".
constexpr int kRatePredW = 20, kStepTimePredW = 17;

// A measured value outside the prediction's interval is painted yellow (on a colour
// terminal): the prediction missed it.
bool outside(const Range& r, double v) { return v < r.lo || v > r.hi; }
std::string plain(const Term&, std::string_view text) { return std::string(text); }

}  // namespace

std::string human_bytes(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (!std::isfinite(bytes)) return "?";
    double v = std::fabs(bytes);
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        ++u;
    }
    const char* sign = bytes < 0 ? "-" : "";
    if (u == 0) return fmt("%s%.0f B", sign, v);
    return fmt(v < 10 ? "%s%.2f %s" : v < 100 ? "%s%.1f %s" : "%s%.0f %s", sign, v, units[u]);
}

std::string sparkline(const std::vector<double>& values, int n) {
    static const char* const kBlocks[] = {"▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
    std::vector<double> v;
    for (size_t i = values.size() > (size_t)std::max(0, n) ? values.size() - (size_t)n : 0; i < values.size(); ++i)
        if (std::isfinite(values[i])) v.push_back(values[i]);
    if (v.empty()) return "";
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    const double range = *hi - *lo;
    std::string out;
    for (double x : v) {
        // A flat series sits in the middle rather than on the floor.
        const int level = range > 1e-12 * std::max(1.0, std::fabs(*hi)) ? (int)std::lround((x - *lo) / range * 7.0) : 3;
        out += kBlocks[std::clamp(level, 0, 7)];
    }
    return out;
}

RunView::RunView(const RunManifest& m) {
    run_id_ = m.run_id;
    job_name_ = m.job_name;
    world_ = m.world_size;
    const int n = std::max<int>(m.world_size, (int)m.ranks.size());
    ranks_.resize((size_t)std::max(0, n));
    for (const RunManifestRank& mr : m.ranks) {
        if (mr.rank < 0 || mr.rank >= n) continue;
        Rank& r = ranks_[(size_t)mr.rank];
        r.host = mr.host;
        r.tp = mr.tp;
        r.pp = mr.pp;
        r.dp = mr.dp;
    }
    set_manifest(m);
}

void RunView::set_manifest(const RunManifest& m) {
    if (!m.run_id.empty()) run_id_ = m.run_id;
    if (!m.job_name.empty()) job_name_ = m.job_name;
    if (!m.state.empty()) state_ = m.state;
    if (!m.reason.empty()) reason_ = m.reason;
    if (is_final_run_state(m.state)) exit_code_ = m.exit_code;
    if (m.steps > 0) steps_ = m.steps;
    manifest_failed_rank_ = m.failed_rank;
    if (m.scheduler)
        scheduler_ = (m.scheduler->kind == "k8s" ? "JobSet " : "Slurm job ") + m.scheduler->job_id +
                     (m.scheduler->state.empty() ? "" : " " + m.scheduler->state);
    hosts_ = m.hosts;
    host_width_ = 4;
    for (const std::string& h : hosts_) host_width_ = std::max(host_width_, std::min(24, text_width(h)));
    for (const RunManifestRank& mr : m.ranks) {
        if (mr.rank < 0 || mr.rank >= (int)ranks_.size()) continue;
        Rank& r = ranks_[(size_t)mr.rank];
        r.host = mr.host;
        if (mr.pid > 0) {
            r.pid = mr.pid;
            r.started = true;
        }
        if (mr.exit_code) r.exit_code = mr.exit_code;
    }
}

void RunView::note_line(Rank& r, std::string line) {
    r.lines.push_back(std::move(line));
    while (r.lines.size() > kLastLines) r.lines.pop_front();
}

void RunView::apply(const LaunchEvent& ev) {
    Rank* r = ev.rank >= 0 && ev.rank < (int)ranks_.size() ? &ranks_[(size_t)ev.rank] : nullptr;
    switch (ev.kind) {
        case LaunchEventKind::rank_started:
            if (!r) break;
            r->started = true;
            if (ev.pid > 0) r->pid = ev.pid;
            if (state_ == "starting") state_ = "running";
            break;
        case LaunchEventKind::output:
            if (!r) break;
            r->started = true;
            note_line(*r, ev.text);
            break;
        case LaunchEventKind::metric: {
            if (!r || !ev.metric) break;
            r->started = true;
            const MetricRecord& m = *ev.metric;
            take_place_and_memory(*r, m);
            switch (m.kind) {
                case MetricKind::start:
                    if (steps_ == 0) steps_ = m.steps_total;
                    break;
                case MetricKind::step:
                    r->step = m.step;
                    r->has_step = true;
                    r->loss = m.loss;
                    r->tokens_per_s = m.tokens_per_s;
                    r->step_s = m.times.step;
                    r->mfu = m.mfu;
                    r->losses.push_back(m.loss);
                    while (r->losses.size() > kHistory) r->losses.pop_front();
                    break;
                case MetricKind::end:
                    r->step = std::max(r->step, m.step);
                    break;
                case MetricKind::error: r->error = m.message; break;
                default: break;
            }
            break;
        }
        case LaunchEventKind::rank_exited:
            if (r) r->exit_code = ev.exit_code;
            break;
        case LaunchEventKind::host_failed:
            for (Rank& x : ranks_)
                if (x.host == ev.host) note_line(x, "host failed: " + ev.text);
            if (reason_.empty()) reason_ = ev.text;
            break;
        case LaunchEventKind::stopping:
            if (reason_.empty()) reason_ = ev.text;
            break;
        case LaunchEventKind::restart:
            // The ranks start again (restart.h): what ended the last attempt is history now.
            restarts_.push_back(ev.text);
            for (Rank& x : ranks_) {
                x.exit_code.reset();
                x.error.clear();
            }
            reason_.clear();
            break;
        case LaunchEventKind::finished:
            finished_ = true;
            exit_code_ = ev.exit_code;
            if (!is_final_run_state(state_))
                state_ = final_run_state(ev.exit_code);
            if (reason_.empty() && ev.exit_code != 0) reason_ = ev.text;
            break;
        default: break;
    }
}

bool RunView::all_exited() const {
    return std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.exit_code.has_value(); });
}

int RunView::failed_rank() const {
    if (manifest_failed_rank_ >= 0 && manifest_failed_rank_ < (int)ranks_.size()) return manifest_failed_rank_;
    for (size_t i = 0; i < ranks_.size(); ++i)
        if (ranks_[i].exit_code && *ranks_[i].exit_code != 0) return (int)i;
    return -1;
}

std::vector<std::string> RunView::last_lines(int rank, int n) const {
    if (rank < 0 || rank >= (int)ranks_.size() || n <= 0) return {};
    const auto& lines = ranks_[(size_t)rank].lines;
    const size_t first = lines.size() > (size_t)n ? lines.size() - (size_t)n : 0;
    return {lines.begin() + (long)first, lines.end()};
}

std::vector<double> RunView::loss_history(int rank) const {
    if (rank < 0 || rank >= (int)ranks_.size()) return {};
    return {ranks_[(size_t)rank].losses.begin(), ranks_[(size_t)rank].losses.end()};
}

std::string RunView::header_line(bool color) const {
    const Term t{color, 0};
    int step = 0;
    for (const Rank& r : ranks_) step = std::max(step, r.step);
    std::string hosts = fmt("%zu host%s", hosts_.size(), hosts_.size() == 1 ? "" : "s");
    if (!hosts_.empty()) {
        hosts += " (";
        for (size_t i = 0; i < hosts_.size() && i < 4; ++i) hosts += (i ? ", " : "") + hosts_[i];
        if (hosts_.size() > 4) hosts += fmt(", +%zu", hosts_.size() - 4);
        hosts += ")";
    }
    const std::string state = state_.empty() ? "unknown" : state_;
    const std::string painted = state == "failed" ? red(t, state)
                              : state == "finished" ? green(t, state)
                              : state == "running" ? green(t, state)
                                                   : yellow(t, state);
    std::string out = bold(t, "run " + run_id_) + " · " + (job_name_.empty() ? "?" : job_name_) + " · " + hosts + " · " +
                      fmt("%d rank%s", (int)ranks_.size(), ranks_.size() == 1 ? "" : "s") + " · " + painted;
    if (is_final_run_state(state) && exit_code_ != 0) out += fmt(" (exit %d)", exit_code_);
    if (!scheduler_.empty()) out += " · " + scheduler_;
    out += " · step " + std::to_string(step) + "/" + (steps_ > 0 ? std::to_string(steps_) : "?");
    return out;
}

std::string RunView::prediction_line(bool color) const {
    if (!prediction_) return "";
    const Term t{color, 0};
    const RunPrediction& p = *prediction_;
    if (!p.available) return dim(t, "predicted: none: " + p.why_none);
    const SpeedInterval& iv = p.speed;
    auto count = [](double v) {  // "15.4K": the rate without its "/s"
        std::string r = human_rate(v);
        return r.substr(0, r.size() - 2);
    };
    std::string out = "predicted: step " + bold(t, human_seconds(p.step_s));
    if (iv.known) out += " [" + human_seconds(iv.step_s.lo) + " … " + human_seconds(iv.step_s.hi) + "]";
    out += ", " + bold(t, count(p.tokens_per_s)) + " tokens/s";
    if (iv.known) out += " [" + count(iv.tokens_per_s.lo) + " … " + count(iv.tokens_per_s.hi) + "]";
    out += dim(t, "; from the " + prediction_source_text(p) + "; " + prediction_interval_text(p));
    if (!p.note.empty()) out += dim(t, "; " + p.note);
    return out;
}

int RunView::rate_w() const { return predicting() ? kRatePredW : kRateW; }
int RunView::step_time_w() const { return predicting() ? kStepTimePredW : kStepTimeW; }

std::string RunView::rank_line(int rank, bool color, bool spark) const {
    if (rank < 0 || rank >= (int)ranks_.size()) return "";
    const Term t{color, 0};
    const Rank& r = ranks_[(size_t)rank];
    const int rank_w = std::max(4, digits((long long)ranks_.size() - 1));
    const int step_w = std::max(5, 2 * digits(steps_) + 1);  // as in render()'s column names

    std::string host = r.host >= 0 && r.host < (int)hosts_.size() ? hosts_[(size_t)r.host] : "?";
    std::string coords = r.tp >= 0 ? fmt("%d,%d,%d", r.tp, r.pp, r.dp) : "-";

    std::string state;
    std::string (*paint)(const Term&, std::string_view) = dim;
    if (r.exit_code) {
        if (*r.exit_code == 0) state = "done", paint = green;
        else if (*r.exit_code == -1) state = "lost", paint = red;
        else state = "exit " + std::to_string(*r.exit_code), paint = red;
    } else if (finished_ || is_final_run_state(state_)) {
        state = "ended", paint = yellow;  // the run is over but no exit was recorded
    } else if (r.started) {
        state = "running", paint = green;
    } else {
        state = "starting", paint = yellow;
    }

    const std::string step = r.has_step || r.step > 0 ? std::to_string(r.step) + "/" + (steps_ > 0 ? std::to_string(steps_) : "?") : "-";
    const std::string loss = r.has_step ? fmt("%.4f", r.loss) : "-";
    std::string rate = r.has_step ? human_rate(r.tokens_per_s) : "-";
    std::string step_time = r.has_step && r.step_s > 0 ? human_seconds(r.step_s) : "-";
    bool rate_missed = false, step_missed = false;
    if (predicting()) {
        const RunPrediction& p = *prediction_;
        rate += " / " + human_rate(p.tokens_per_s);
        step_time += " / " + human_seconds(p.step_s);
        if (p.speed.known && r.has_step) {
            rate_missed = outside(p.speed.tokens_per_s, r.tokens_per_s);
            step_missed = r.step_s > 0 && outside(p.speed.step_s, r.step_s);
        }
    }
    const std::string mfu = r.has_step ? fmt("%.1f%%", 100.0 * r.mfu) : "-";
    std::string mem = "-";
    if (r.has_memory) {
        mem = human_bytes(r.mem_total);
        if (r.mem_total_predicted) mem += " / " + human_bytes(*r.mem_total_predicted);
    }

    std::string out = pad_left(std::to_string(rank), rank_w) + "  " + pad_right(clip(host, host_width_), host_width_) + "  " +
                      pad_right(coords, 8) + "  " + paint(t, pad_right(state, kStateW)) + " " + pad_left(step, step_w) +
                      "  " + pad_left(loss, kLossW) + "  " + (rate_missed ? yellow : plain)(t, pad_left(rate, rate_w())) + "  " +
                      (step_missed ? yellow : plain)(t, pad_left(step_time, step_time_w())) + "  " + pad_left(mfu, kMfuW) +
                      "  " + pad_right(mem, kMemW);
    if (spark) {
        const std::vector<double> losses(r.losses.begin(), r.losses.end());
        out += "  " + sparkline(losses, kSparkSteps);
    }
    // Trailing blanks would only pad the terminal.
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
}

std::string RunView::render(bool color, int width, bool sparklines) const {
    const Term t{color, width};
    std::string out = cut_to_width(header_line(color), width) + "\n";
    if (prediction_) out += cut_to_width(prediction_line(color), width) + "\n";
    const int rank_w = std::max(4, digits((long long)ranks_.size() - 1));
    const int step_w = std::max(5, 2 * digits(steps_) + 1);
    std::string cols = pad_left("rank", rank_w) + "  " + pad_right("host", host_width_) + "  " + pad_right("tp,pp,dp", 8) +
                       "  " + pad_right("state", kStateW) + " " + pad_left("step", step_w) + "  " + pad_left("loss", kLossW) +
                       "  " + pad_left(predicting() ? "tokens/s / predicted" : "tokens/s", rate_w()) + "  " +
                       pad_left(predicting() ? "step / predicted" : "step time", step_time_w()) + "  " + pad_left("MFU", kMfuW) + "  " +
                       pad_right("memory / predicted", kMemW);
    if (sparklines) cols += "  loss (last " + std::to_string(kSparkSteps) + ")";
    out += cut_to_width(dim(t, cols), width) + "\n";
    for (int i = 0; i < (int)ranks_.size(); ++i) out += cut_to_width(rank_line(i, color, sparklines), width) + "\n";
    for (const std::string& r : restarts_) out += cut_to_width(yellow(t, r), width) + "\n";
    return out;
}

const char* final_run_state(int exit_code) { return exit_code == 0 ? "finished" : exit_code == 130 ? "stopped" : "failed"; }

}  // namespace ptd
