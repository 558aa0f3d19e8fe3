// memory_model.cpp — the Memory & speed tab's view-model: the cached estimate, the stage
// bars and their hit-testing, the step-time bar, the throughput figures and the heat ramp
// the rank grid uses for predicted memory. Pure arithmetic and text on ptd::Estimate.
#include "memory_model.h"

#include "estimate_view.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "studio_state.h"

namespace ptd::studio {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

// ---- The cached estimate ---------------------------------------------------------------

const Estimate* job_estimate(const StudioState& s) {
    EstimateCache& c = s.memory.cache;
    if (c.revision != s.revision) {
        c.revision = s.revision;
        c.estimate.reset();
        if (job_valid(s)) {
            const auto t0 = std::chrono::steady_clock::now();
            // The job's cluster profile, as ptd estimate uses it; one that does not load leaves
            // the preset's figures and says why.
            auto profile = load_job_profile(s.job);
            const ClusterProfile* p = profile && *profile ? &(*profile)->profile : nullptr;
            c.profile_note = !profile ? profile.error().one_line() : p ? profile_note(**profile) : std::string();
            c.estimate = estimate_job(s.job, p);
            c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            ++c.computations;
        }
    }
    return c.estimate ? &*c.estimate : nullptr;
}

// ---- Units -----------------------------------------------------------------------------

MemoryUnit memory_unit(const Estimate& e) {
    double largest = 0;
    for (const StageEstimate& st : e.stages) largest = std::max(largest, st.mem.total());
    if (largest < 0.5 * kGiB) return MemoryUnit{1024.0 * 1024.0, "MiB"};
    return MemoryUnit{};
}

std::string format_memory(double bytes, MemoryUnit u) { return fmt("%.2f %s", bytes / u.bytes, u.name); }

std::string format_thousands(double v) { return thousands(v); }

// ---- Memory per stage ------------------------------------------------------------------

const char* mem_part_label(MemPart p) {
    switch (p) {
        case MemPart::params: return "parameters";
        case MemPart::grads: return "gradients";
        case MemPart::optimizer: return "optimizer";
        case MemPart::activations: return "activations";
        case MemPart::overheads: return "overheads";
    }
    return "?";
}

double mem_part_bytes(const MemoryBreakdown& m, MemPart p) {
    switch (p) {
        case MemPart::params: return m.params;
        case MemPart::grads: return m.grads;
        case MemPart::optimizer: return m.optimizer;
        case MemPart::activations: return m.activations;
        case MemPart::overheads: return m.overheads();
    }
    return 0;
}

// A "nice" tick step (1, 2 or 5 × 10^k units) giving about `target` ticks over `range`.
static double tick_step(double range, int target) {
    if (range <= 0) return 1;
    const double raw = range / target;
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (m * mag >= raw) return m * mag;
    return 10 * mag;
}

MemoryChart memory_chart(const StudioState& s, float width, float height) {
    MemoryChart c;
    const Estimate* e = job_estimate(s);
    if (!e || e->stages.empty()) return c;
    c.unit = memory_unit(*e);
    c.capacity_bytes = e->capacity_bytes;
    c.usable_bytes = e->usable_bytes;
    c.worst = e->worst_stage;
    c.fits = e->fits;
    double largest = 0;
    for (const StageEstimate& st : e->stages) largest = std::max(largest, st.mem.total());
    const MemoryScale sc = s.memory.scale;
    c.zoomed = sc == MemoryScale::stages ||
               (sc == MemoryScale::automatic && largest < kZoomBelow * std::min(c.usable_bytes, c.capacity_bytes));
    c.scale_bytes = (c.zoomed ? largest : std::max(largest, c.capacity_bytes)) * 1.04;
    if (c.scale_bytes <= 0) c.scale_bytes = 1;
    c.bar_x0 = MemoryViewState::kLabelW;
    c.bar_x1 = std::max(c.bar_x0 + 40.0f, width - MemoryViewState::kValueW);
    c.usable_x = c.x_of(c.usable_bytes);
    c.capacity_x = c.x_of(c.capacity_bytes);

    const int n = (int)e->stages.size();
    c.row_h = std::clamp(std::floor(height / (float)n), MemoryViewState::kMinRow, MemoryViewState::kMaxRow);
    c.content_h = c.row_h * (float)n;
    const float bar_h = std::max(10.0f, std::round(c.row_h * 0.72f));
    c.bars.reserve((size_t)n);
    for (int i = 0; i < n; ++i) {
        const StageEstimate& st = e->stages[(size_t)i];
        StageBar b;
        b.index = i;
        b.stage = st.stage;
        b.total = st.mem.total();
        b.over = b.total > c.usable_bytes;
        b.worst = i == c.worst;
        b.y0 = (float)i * c.row_h + std::floor((c.row_h - bar_h) * 0.5f);
        b.y1 = b.y0 + bar_h;
        double acc = 0;
        b.edge[0] = c.x_of(0);
        for (int p = 0; p < kMemParts; ++p) {
            b.bytes[(size_t)p] = mem_part_bytes(st.mem, (MemPart)p);
            acc += b.bytes[(size_t)p];
            b.edge[(size_t)p + 1] = c.x_of(acc);
        }
        b.label = fmt("stage %d", st.stage);
        b.value = b.over ? "OOM +" + format_memory(b.total - c.usable_bytes, c.unit) : format_memory(b.total, c.unit);
        c.bars.push_back(std::move(b));
    }

    // Axis ticks in the chart's unit, about one per 70 px.
    const double range = c.scale_bytes / c.unit.bytes;
    const double step = tick_step(range, std::max(2, (int)((c.bar_x1 - c.bar_x0) / 70.0f)));
    for (double v = 0; v <= range + 1e-9; v += step)
        c.ticks.push_back({c.x_of(v * c.unit.bytes), step < 1 ? fmt("%.*f", step < 0.1 ? 2 : 1, v) : fmt("%.0f", v)});
    return c;
}

MemoryHit memory_hit(const MemoryChart& c, float x, float y) {
    MemoryHit h;
    if (c.bars.empty() || c.row_h <= 0 || y < 0 || x < 0) return h;
    const int row = (int)(y / c.row_h);
    if (row >= (int)c.bars.size()) return h;
    h.stage = row;
    const StageBar& b = c.bars[(size_t)row];
    if (y < b.y0 || y >= b.y1) return h;
    for (int p = 0; p < kMemParts; ++p)
        if (x >= b.edge[(size_t)p] && x < b.edge[(size_t)p + 1]) {
            h.part = p;
            break;
        }
    return h;
}

std::string stage_tooltip(const StudioState& s, int index) {
    const Estimate* e = job_estimate(s);
    if (!e || index < 0 || index >= (int)e->stages.size()) return {};
    const StageEstimate& st = e->stages[(size_t)index];
    const MemoryBreakdown& m = st.mem;
    const MemoryUnit u = memory_unit(*e);
    auto v = [&](double bytes) { return fmt("%10.2f %s", bytes / u.bytes, u.name); };
    std::string out = fmt("stage %d: %d layer%s", st.stage, st.layers, st.layers == 1 ? "" : "s");
    if (st.has_embedding) out += ", embedding";
    if (st.has_output) out += ", output layer + loss";
    if (index == e->worst_stage && e->stages.size() > 1) out += "  (worst stage)";
    out += fmt("\nmost loaded rank, %.3g micro-batches in flight\n\n", st.in_flight);
    out += "parameters    " + v(m.params) + "\n";
    out += "gradients     " + v(m.grads) + "\n";
    out += "optimizer     " + v(m.optimizer) + "\n";
    out += "activations   " + v(m.activations) + "\n";
    out += "overheads     " + v(m.overheads()) + "\n";
    out += "  temp buffers" + v(m.temp) + "\n";
    out += "  CUDA context" + v(m.cuda_context) + "\n";
    out += "  NCCL        " + v(m.nccl) + "\n";
    out += "  fragment.   " + v(m.fragmentation) + "\n";
    out += "total         " + v(m.total()) + "\n";
    if (m.host > 0) out += "host (offload)" + v(m.host) + "  not on the GPU\n";
    out += "usable        " + v(e->usable_bytes);
    if (e->usable_bytes < e->capacity_bytes) out += fmt("  (of %.2f %s)", e->capacity_bytes / u.bytes, u.name);
    out += "\n";
    if (m.total() > e->usable_bytes)
        out += "OOM: " + format_memory(m.total() - e->usable_bytes, u) + " over the usable memory";
    else
        out += fmt("fits: %.0f%% of usable, ", e->usable_bytes > 0 ? 100 * m.total() / e->usable_bytes : 0.0) +
               format_memory(e->usable_bytes - m.total(), u) + " to spare";
    return out;
}

std::string memory_headline(const StudioState& s) {
    const Estimate* e = job_estimate(s);
    if (!e || e->stages.empty()) return "no estimate: the job is not valid";
    const MemoryUnit u = memory_unit(*e);
    const StageEstimate& w = e->stages[(size_t)e->worst_stage];
    const double total = w.mem.total();
    if (total > e->usable_bytes)
        return fmt("OOM: stage %d needs %s, %s more than the %s usable", w.stage, format_memory(total, u).c_str(),
                   format_memory(total - e->usable_bytes, u).c_str(), format_memory(e->usable_bytes, u).c_str());
    std::string line = fmt(e->host_fits ? "fits: worst stage %d uses %s of %s usable (%.0f%%)"
                                        : "GPU fits, the node's host RAM does not (offload): worst stage %d uses %s of %s usable (%.0f%%)",
                           w.stage, format_memory(total, u).c_str(),
                           format_memory(e->usable_bytes, u).c_str(), e->usable_bytes > 0 ? 100 * total / e->usable_bytes : 0.0);
    // The peak's error bars (MemoryInterval): where their top does not fit, say so.
    const MemoryInterval& iv = e->memory_interval;
    if (iv.known)
        line += fmt("; %.0f%%: ", iv.band.confidence * 100) + format_memory(iv.peak_bytes.lo, u) + " – " +
                format_memory(iv.peak_bytes.hi, u) + (iv.fits_at_top ? "" : ", whose top does not fit");
    return line;
}

// ---- Step time -------------------------------------------------------------------------

const char* time_part_label(TimePart p) {
    switch (p) {
        case TimePart::compute: return "compute";
        case TimePart::tp_comm: return "TP comm";
        case TimePart::cp_comm: return "CP comm";
        case TimePart::ep_comm: return "EP comm";
        case TimePart::pp_comm: return "PP p2p";
        case TimePart::bubble: return "PP bubble";
        case TimePart::dp_comm: return "DP comm";
        case TimePart::optimizer: return "optimizer";
    }
    return "?";
}

double time_part_seconds(const TimeBreakdown& t, TimePart p) {
    switch (p) {
        case TimePart::compute: return t.compute;
        case TimePart::tp_comm: return t.tp_comm;
        case TimePart::cp_comm: return t.cp_comm;
        case TimePart::ep_comm: return t.ep_comm;
        case TimePart::pp_comm: return t.pp_comm;
        case TimePart::bubble: return t.bubble;
        case TimePart::dp_comm: return t.dp_comm;
        case TimePart::optimizer: return t.optimizer;
    }
    return 0;
}

TimeBar time_bar(const Estimate& e, float x0, float width) {
    TimeBar b;
    b.x0 = x0;
    b.x1 = x0 + std::max(0.0f, width);
    b.total = e.time.total();
    // The order of `ptd estimate`'s table; the optional terms only when present.
    static constexpr TimePart kOrder[] = {TimePart::compute, TimePart::tp_comm, TimePart::cp_comm,
                                          TimePart::ep_comm, TimePart::pp_comm, TimePart::bubble,
                                          TimePart::dp_comm, TimePart::optimizer};
    double acc = 0;
    for (TimePart p : kOrder) {
        const double sec = time_part_seconds(e.time, p);
        const bool optional = p == TimePart::cp_comm || p == TimePart::ep_comm || p == TimePart::pp_comm;
        if (optional && sec <= 0) continue;
        TimeSegment seg;
        seg.part = p;
        seg.seconds = sec;
        seg.x0 = b.total > 0 ? b.x0 + (float)(acc / b.total) * (b.x1 - b.x0) : b.x0;
        acc += sec;
        seg.x1 = b.total > 0 ? b.x0 + (float)(acc / b.total) * (b.x1 - b.x0) : b.x0;
        b.segments.push_back(seg);
    }
    return b;
}

int time_hit(const TimeBar& b, float x) {
    for (size_t i = 0; i < b.segments.size(); ++i)
        if (x >= b.segments[i].x0 && x < b.segments[i].x1) return (int)i;
    return -1;
}

std::string time_segment_text(const TimeBar& b, int index) {
    if (index < 0 || index >= (int)b.segments.size()) return {};
    const TimeSegment& s = b.segments[(size_t)index];
    return fmt("%s: %.3f s, %.1f%% of the step", time_part_label(s.part), s.seconds,
               b.total > 0 ? 100 * s.seconds / b.total : 0.0);
}

// ---- Throughput ------------------------------------------------------------------------

std::string flops_convention_text(AttentionFlops c) {
    return c == AttentionFlops::full ? "full s\xC2\xB2 (PaLM)" : "causal s\xC2\xB2/2 (Megatron)";
}

std::vector<CostRow> training_rows(const StudioState& s) {
    const Estimate* e = job_estimate(s);
    return e ? training_cost_rows(e->training) : std::vector<CostRow>{};
}

std::vector<Figure> throughput_figures(const StudioState& s) {
    std::vector<Figure> out;
    const Estimate* e = job_estimate(s);
    if (!e) return out;
    const int world = std::max(1, s.job.world_size());
    const std::string conv = flops_convention_text(e->flops.convention);
    const SpeedInterval& iv = e->speed;
    // "80%: lo – hi" for a figure's interval, each end formatted as the figure is.
    auto range = [&](const Range& r, auto&& text) {
        return iv.known ? fmt("%.0f%%: ", iv.band.confidence * 100) + text(r.lo) + " – " + text(r.hi) : std::string();
    };
    auto percent = [](double v) { return fmt("%.1f%%", v * 100); };
    const std::string interval_help =
        iv.known ? " The range under the value: " + iv.basis() + " put the truth there " +
                       fmt("%.0f%%", iv.band.confidence * 100) + " of the time (docs/estimators.md, \"Error bars\")."
                 : "";
    out.push_back({"MFU", percent(e->mfu), "attention FLOPs: " + conv,
                   "Model FLOPs utilisation: model FLOPs per token x tokens/s / (GPUs x dense peak). Model FLOPs "
                   "follow PaLM appendix B: 6 x matmul parameters per token plus the attention-score term, counted " +
                       conv + " (estimate.attention_flops). Recomputation is not counted." + interval_help,
                   range(iv.mfu, percent)});
    out.push_back({"HFU", percent(e->hfu), "incl. recompute",
                   "Hardware FLOPs utilisation: like MFU, but counting the FLOPs the GPUs execute, recomputed "
                   "activations included." + interval_help,
                   range(iv.hfu, percent)});
    out.push_back({"tokens/s", format_thousands(e->tokens_per_s), fmt("whole job, %d GPUs", world),
                   "Tokens per step (global_batch x seq_len) / step time." + interval_help,
                   range(iv.tokens_per_s, [](double v) { return format_thousands(v); })});
    out.push_back({"tokens/s per GPU", format_thousands(e->tokens_per_s / world), "", "tokens/s / GPUs." + interval_help,
                   range(iv.tokens_per_s, [&](double v) { return format_thousands(v / world); })});
    // Small figures (the CPU preset) keep three significant digits instead of reading 0.0.
    auto tflops = [](double v) { return v >= 10 ? fmt("%.1f", v) : fmt("%.3g", v); };
    out.push_back({"TFLOP/s per GPU", tflops(e->model_tflops_per_gpu),
                   "hardware " + tflops(e->hardware_tflops_per_gpu) + ", peak " +
                       (e->peak_tflops >= 100 ? fmt("%.0f", e->peak_tflops) : tflops(e->peak_tflops)),
                   "Model FLOPs per second per GPU (hardware: with recomputation); the peak is the GPU's dense "
                   "peak for the job's precision." + interval_help,
                   range(iv.model_tflops_per_gpu, tflops)});
    auto seconds = [](double v) { return fmt("%.3f s", v); };
    const std::string& note = s.memory.cache.profile_note;
    out.push_back({"step time", seconds(e->step_s),
                   fmt("%d micro-batch%s", e->micro_batches, e->micro_batches == 1 ? "" : "es") + (e->time_from_profile ? ", from profile" : ""),
                   "One optimizer step on the critical path through the slowest stage: the bar below." +
                       (e->time_from_profile ? " Every time comes from the cluster profile (" + note + ")."
                        : !e->time_source_why.empty() ? " From the preset: " + e->time_source_why + "."
                        : !note.empty() ? " " + note : std::string()) +
                       interval_help,
                   range(iv.step_s, seconds)});
    return out;
}

std::string speed_interval_line(const StudioState& s) {
    const Estimate* e = job_estimate(s);
    if (!e) return {};
    const SpeedInterval& iv = e->speed;
    if (!iv.known) return "no error bars: " + iv.why_unknown.substr(iv.why_unknown.rfind("no interval: ", 0) == 0 ? 13 : 0);
    return fmt("error bars: %.0f%% intervals from the estimate's error on ", iv.band.confidence * 100) + iv.basis() +
           iv.one_sided() + "; your own cluster may differ";
}

// ---- Predicted memory on the rank grid -------------------------------------------------

std::optional<double> predicted_rank_bytes(const StudioState& s, int rank) {
    if (!s.layout || rank < 0 || rank >= s.layout->world) return std::nullopt;
    const Estimate* e = job_estimate(s);
    const int stage = s.layout->ranks[rank].coord[DIM_PP];
    if (!e || stage < 0 || stage >= (int)e->stages.size()) return std::nullopt;
    return e->stages[(size_t)stage].mem.total();
}

std::optional<double> predicted_rank_fraction(const StudioState& s, int rank) {
    const std::optional<double> b = predicted_rank_bytes(s, rank);
    const Estimate* e = b ? job_estimate(s) : nullptr;
    if (!e || e->usable_bytes <= 0) return std::nullopt;
    return *b / e->usable_bytes;
}

std::string predicted_rank_short(const StudioState& s, int rank) {
    const std::optional<double> b = predicted_rank_bytes(s, rank);
    if (!b) return {};
    const MemoryUnit u = memory_unit(*job_estimate(s));
    return fmt(*b / u.bytes >= 100 ? "%.0f %s" : "%.1f %s", *b / u.bytes, u.name);
}

HeatScale predicted_heat_scale(const StudioState& s) {
    HeatScale h;
    const Estimate* e = job_estimate(s);
    if (!e || e->stages.empty() || e->usable_bytes <= 0) return h;
    double largest = 0, smallest = e->stages[0].mem.total();
    for (const StageEstimate& st : e->stages) {
        largest = std::max(largest, st.mem.total());
        smallest = std::min(smallest, st.mem.total());
    }
    h.relative = largest > smallest * 1.001 && largest < kHeatRelativeBelow * e->usable_bytes;
    h.low_bytes = h.relative ? smallest : 0;
    h.full_bytes = h.relative ? largest : e->usable_bytes;
    return h;
}

std::optional<double> predicted_rank_heat(const StudioState& s, int rank) {
    const std::optional<double> b = predicted_rank_bytes(s, rank);
    const HeatScale h = b ? predicted_heat_scale(s) : HeatScale{};
    if (h.full_bytes <= h.low_bytes) return std::nullopt;
    return (*b - h.low_bytes) / (h.full_bytes - h.low_bytes);
}

Rgb heat_rgb(double fraction) {
    if (!(fraction <= 1.0)) return kHeatOom;  // also NaN
    struct Stop {
        double at;
        double r, g, b;
    };
    // r − b rises monotonically along the ramp, so warmer always means fuller.
    static constexpr Stop kStops[] = {
        {0.00, 100, 150, 215}, {0.50, 120, 200, 150}, {0.80, 230, 210, 100}, {1.00, 245, 150, 70}};
    const double f = std::max(0.0, fraction);
    for (size_t i = 1; i < std::size(kStops); ++i) {
        const Stop& a = kStops[i - 1];
        const Stop& b = kStops[i];
        if (f <= b.at) {
            const double t = (f - a.at) / (b.at - a.at);
            auto mix = [t](double x, double y) { return (uint8_t)std::lround(x + (y - x) * t); };
            return Rgb{mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
        }
    }
    return Rgb{245, 150, 70};
}

}  // namespace ptd::studio
