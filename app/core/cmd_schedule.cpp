// cmd_schedule.cpp — `ptd schedule` and `ptd trace`: the pipeline timeline in the terminal
// (one row per stage, micro-batch numbers in the blocks, the bubble visible, a time
// axis and the batch legend with the job's own numbers) and as Chrome trace JSON.
#include "cmd_schedule.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "ptd/model/estimate.h"
#include "ptd/spec/cluster_profile.h"

namespace ptd {

namespace {

void print_errors(FILE* err, const Error& e) { std::fprintf(err, "%s", e.str().c_str()); }

std::string fmt_time(double s) { return seconds_text(s); }

// Foreground colours for the passes on a TTY (forward blue, backward green, recompute
// yellow, DP magenta, optimizer cyan); plain characters otherwise.
std::string paint(const Term& t, BlockKind k, const std::string& cell) {
    if (!t.color) return cell;
    const char* c = "";
    switch (k) {
        case BlockKind::forward: c = "\x1b[34m"; break;
        case BlockKind::backward: c = "\x1b[32m"; break;
        case BlockKind::recompute: c = "\x1b[33m"; break;
        case BlockKind::dp_comm: case BlockKind::send: case BlockKind::recv: case BlockKind::tp_comm: c = "\x1b[35m"; break;
        case BlockKind::optimizer: c = "\x1b[36m"; break;
        case BlockKind::weight_grad: c = "\x1b[92m"; break;  // zb: ZB-H1's W, beside backward's green
    }
    return std::string(c) + cell + "\x1b[0m";
}

const char* fill_of(BlockKind k) {
    switch (k) {
        case BlockKind::forward: return "▒";
        case BlockKind::backward: return "█";
        case BlockKind::recompute: return "▓";
        case BlockKind::optimizer: return "o";
        case BlockKind::weight_grad: return "░";  // zb
        default: return "~";
    }
}

// One chart row: each cell shows the block covering its middle; a block's first cells
// carry its micro-batch number; nothing running is the bubble '·'.
std::string render_row(const std::vector<const TimelineBlock*>& blocks, double span, int cols, const Term& term) {
    std::string row;
    const TimelineBlock* prev = nullptr;
    int digit = 0;
    std::string number;
    for (int c = 0; c < cols; ++c) {
        const double mid = (c + 0.5) * span / cols;
        const TimelineBlock* hit = nullptr;
        for (const TimelineBlock* b : blocks)
            if (b->start_s <= mid && mid < b->end_s) {
                hit = b;
                break;
            }
        if (!hit) {
            row += "·";
            prev = nullptr;
            continue;
        }
        if (hit != prev) {
            digit = 0;
            number = hit->micro_batch >= 0 ? std::to_string(hit->micro_batch) : "";
            prev = hit;
        }
        std::string cell = digit < (int)number.size() ? std::string(1, number[(size_t)digit]) : fill_of(hit->kind);
        ++digit;
        row += paint(term, hit->kind, cell);
    }
    return row;
}

std::string axis(double span, int cols, int label_w) {
    std::string ticks(cols, ' '), labels;
    const int n = 4;
    std::string line(label_w, ' ');
    std::string marks;
    const int every = std::max(1, cols / n);
    for (int c = 0; c < cols; ++c) marks += (c % every == 0 && c + every / 2 < cols) || c == cols - 1 ? "┬" : "─";
    line += marks + "\n" + std::string(label_w, ' ');
    std::string lab;
    for (int k = 0; k <= n; ++k) {
        const int col = k == n ? cols - 1 : k * std::max(1, cols / n);
        const std::string text = fmt_time(span * (col + (k == n ? 1 : 0)) / cols);
        if ((int)lab.size() < col) lab += std::string((size_t)(col - (int)lab.size()), ' ');
        if (k == n && (int)lab.size() + (int)text.size() > cols) lab.resize((size_t)std::max(0, cols - (int)text.size()));
        lab += text + " ";
    }
    return line + lab + "\n";
}

}  // namespace

std::vector<TimelineBlock> measured_step(const std::vector<MeasuredRank>& ranks, int* step_out) {
    // The last step every rank recorded.
    int step = -1;
    bool first = true;
    for (const MeasuredRank& r : ranks) {
        int last = -1;
        for (const TimelineBlock& b : r.blocks) last = std::max(last, b.step);
        step = first ? last : std::min(step, last);
        first = false;
    }
    std::vector<TimelineBlock> out;
    double t0 = INFINITY;
    for (const MeasuredRank& r : ranks)
        for (const TimelineBlock& b : r.blocks)
            if (b.step == step) {
                out.push_back(b);
                t0 = std::min(t0, b.start_s);
            }
    for (TimelineBlock& b : out) b.start_s -= t0, b.end_s -= t0;
    if (step_out) *step_out = step;
    return out;
}

std::string render_schedule_text(const Timeline& t, const std::vector<TimelineBlock>& measured, const Term& term,
                                 const SpeedInterval& step_interval) {
    std::string s;
    double span = t.makespan_s;
    for (const TimelineBlock& b : measured) span = std::max(span, b.end_s);
    const int label_w = 12;
    const int cols = std::max(20, std::min(160, term.width - label_w - 1));
    s += bold(term, "Schedule") + ": " + t.schedule + ", p = " + std::to_string(t.stages) + ", m = " +
         std::to_string(t.micro_batches) + " micro-batches per replica; step " + fmt_time(t.makespan_s) +
         (step_interval.known ? " (" + std::to_string((int)std::lround(step_interval.band.confidence * 100)) +
                                    "%: " + fmt_time(step_interval.step_s.lo) + " – " + fmt_time(step_interval.step_s.hi) + ")"
                              : std::string()) +
         "\n";
    s += "  " + batch_legend(t) + "\n\n";
    auto rows_of = [&](const std::vector<TimelineBlock>& blocks, int row, int stream) {
        std::vector<const TimelineBlock*> out;
        for (const TimelineBlock& b : blocks)
            if (b.row == row && b.stream == stream) out.push_back(&b);
        return out;
    };
    for (int st = 0; st < t.stages; ++st) {
        char label[32];
        std::snprintf(label, sizeof label, "%-*s", label_w, ("stage " + std::to_string(st)).c_str());
        s += label + render_row(rows_of(t.blocks, st, kStreamCompute), span, cols, term) + "\n";
        // The communication stream (DP tail) only where it is wide enough to show.
        auto comm = rows_of(t.blocks, st, kStreamComm);
        const std::string comm_row = render_row(comm, span, cols, term);
        if (comm_row.find('~') != std::string::npos) s += std::string(label_w, ' ') + comm_row + "\n";
    }
    if (!measured.empty()) {
        std::vector<int> ranks;
        for (const TimelineBlock& b : measured)
            if (std::find(ranks.begin(), ranks.end(), b.row) == ranks.end()) ranks.push_back(b.row);
        std::sort(ranks.begin(), ranks.end());
        s += dim(term, "measured") + "\n";
        for (int r : ranks) {
            char label[32];
            std::snprintf(label, sizeof label, "%-*s", label_w, ("rank " + std::to_string(r)).c_str());
            s += label + render_row(rows_of(measured, r, kStreamCompute), span, cols, term) + "\n";
        }
    }
    s += axis(span, cols, label_w);
    double busy = 0;
    for (double b : t.busy_s) busy = std::max(busy, b);
    s += "\n  " + paint(term, BlockKind::forward, "▒") + " forward  " + paint(term, BlockKind::backward, "█") +
         " backward  " + paint(term, BlockKind::recompute, "▓") + " recompute  · idle (bubble)  " +
         paint(term, BlockKind::dp_comm, "~") + " DP communication  " + paint(term, BlockKind::optimizer, "o") +
         " optimizer; digits: micro-batch\n";
    // zb: ZB-H1's deferred weight-gradient blocks, named only where the schedule has them.
    if (std::any_of(t.blocks.begin(), t.blocks.end(), [](const TimelineBlock& b) { return b.kind == BlockKind::weight_grad; }))
        s += "  " + paint(term, BlockKind::weight_grad, "░") + " weight gradient (ZB-H1's W block, deferred into the bubbles)\n";
    char line[256];
    std::snprintf(line, sizeof line, "  pipeline drains at %s; bubble %.1f%% of the step on the busiest stage\n",
                  fmt_time(t.pipeline_s).c_str(), t.makespan_s > 0 ? 100.0 * (t.pipeline_s - busy) / t.makespan_s : 0.0);
    s += line;
    return s;
}

int cmd_schedule(const ScheduleArgs& a, const PresetCatalog& presets, FILE* out, FILE* err) {
    auto job = load_job_arg(a.job, presets, a.sets);
    if (!job) {
        print_errors(err, job.error());
        return kExitConfig;
    }
    if (!job->has_layout()) {
        print_errors(err, Error(Diagnostic{SourceLoc{job->origin.file}, "parallel",
                                           "the job chooses no layout (no [parallel] table); `ptd schedule` draws a "
                                           "given layout: run `ptd plan " + a.job + "` and write one"}));
        return kExitConfig;
    }
    // With a cluster profile the prediction is the one ptd estimate --profile makes.
    auto profile = load_job_profile(*job, a.profile);
    if (!profile) {
        print_errors(err, profile.error());
        return kExitConfig;
    }
    const ClusterProfile* cluster_profile = *profile ? &(*profile)->profile : nullptr;
    const Timeline t = predicted_timeline(*job, cluster_profile);
    // The step's error bars, as ptd estimate gives them (docs/estimators.md, "Error bars").
    const SpeedInterval step_interval = cluster_profile && profile_unused_reason(*job).empty()
                                            ? estimate_job(*job, cluster_profile).speed
                                            : job_speed_interval(*job, SpeedPoint{.step_s = t.makespan_s});
    std::vector<TimelineBlock> measured;
    if (!a.steps_of.empty()) {
        auto ranks = read_measured_timeline(a.steps_of);
        if (!ranks) {
            print_errors(err, ranks.error());
            return kExitConfig;
        }
        measured = measured_step(*ranks);
    }
    if (!a.trace.empty()) {
        std::ofstream f(a.trace, std::ios::binary);
        f << chrome_trace_json(t.blocks, "stage");
        f.close();
        if (!f) {
            print_errors(err, Error(Diagnostic{SourceLoc{a.trace}, "--trace", "cannot write the trace file"}));
            return kExitRuntime;
        }
    }
    if (a.json) {
        nlohmann::json blocks = nlohmann::json::array();
        for (const TimelineBlock& b : t.blocks)
            blocks.push_back({{"kind", block_kind_name(b.kind)}, {"stage", b.row}, {"stream", b.stream},
                              {"micro_batch", b.micro_batch}, {"chunk", b.chunk}, {"start_s", b.start_s}, {"end_s", b.end_s}});
        nlohmann::json doc = {{"schema", "ptd.schedule/1"}, {"schedule", t.schedule}, {"stages", t.stages},
                              {"vpp", t.vpp}, {"micro_batches", t.micro_batches}, {"micro_batch", t.micro_batch},
                              {"dp", t.dp}, {"global_batch", t.global_batch}, {"pipeline_s", t.pipeline_s},
                              {"step_s", t.makespan_s}, {"legend", batch_legend(t)}, {"blocks", blocks}};
        doc["step_interval"] = step_interval.known ? nlohmann::json{{"confidence", step_interval.band.confidence},
                                                                    {"lo", step_interval.step_s.lo},
                                                                    {"hi", step_interval.step_s.hi}}
                                                   : nlohmann::json(nullptr);
        doc["profile"] = *profile ? nlohmann::json{{"path", (*profile)->path}, {"source", (*profile)->source},
                                                   {"measured_at", (*profile)->profile.measured_at}}
                                  : nlohmann::json(nullptr);
        std::fprintf(out, "%s\n", doc.dump(1).c_str());
        return kExitOk;
    }
    std::fprintf(out, "%s", render_schedule_text(t, measured, detect_term(out), step_interval).c_str());
    if (*profile) std::fprintf(out, "  prediction with the cluster %s\n", profile_note(**profile).c_str());
    if (!a.trace.empty()) std::fprintf(err, "wrote %s (open it in https://ui.perfetto.dev or chrome://tracing)\n", a.trace.c_str());
    return kExitOk;
}

int cmd_trace(const TraceArgs& a, FILE* out, FILE* err) {
    auto ranks = read_measured_timeline(a.run_dir);
    if (!ranks) {
        print_errors(err, ranks.error());
        return kExitConfig;
    }
    std::vector<TimelineBlock> blocks;
    for (const MeasuredRank& r : *ranks) blocks.insert(blocks.end(), r.blocks.begin(), r.blocks.end());
    // The engine writes wall-clock times: start the trace at the earliest block of any rank.
    double t0 = INFINITY;
    for (const TimelineBlock& b : blocks) t0 = std::min(t0, b.start_s);
    for (TimelineBlock& b : blocks) b.start_s -= t0, b.end_s -= t0;
    std::ofstream f(a.out, std::ios::binary);
    f << chrome_trace_json(blocks, "rank");
    f.close();
    if (!f) {
        print_errors(err, Error(Diagnostic{SourceLoc{a.out}, "-o", "cannot write the trace file"}));
        return kExitRuntime;
    }
    std::fprintf(out, "wrote %s: %zu blocks from %zu ranks (open it in https://ui.perfetto.dev or chrome://tracing)\n",
                 a.out.c_str(), blocks.size(), ranks->size());
    return kExitOk;
}

}  // namespace ptd
