// compare_view.cpp — two layouts side by side for `ptd estimate A B` and the studio's
// Compare view (compare_view.h).
#include "compare_view.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "estimate_view.h"
#include "layout_view.h"
#include "ptd/export/export.h"

namespace ptd {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

// Numbers within 0.5% of each other read as the same (the text shows 3 digits).
bool numbers_differ(double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) != std::isnan(b);
    return std::abs(a - b) > 0.005 * std::max(std::abs(a), std::abs(b));
}

// lower: a smaller number is better (memory, time); else a larger one (tokens/s, MFU).
CompareRow number_row(const char* section, std::string label, double va, double vb, std::string a, std::string b,
                      bool lower) {
    CompareRow r{section, std::move(label), std::move(a), std::move(b), va, vb};
    r.differs = numbers_differ(va, vb);
    if (r.differs && !std::isnan(va) && !std::isnan(vb)) r.better = (va < vb) == lower ? -1 : +1;
    return r;
}

CompareRow text_row(const char* section, std::string label, std::string a, std::string b) {
    CompareRow r{section, std::move(label), std::move(a), std::move(b), kNone, kNone};
    r.differs = r.a != r.b;
    return r;
}

std::string time_text(double s) { return s >= 1 ? fmt("%.2f s", s) : fmt("%.1f ms", s * 1e3); }

std::string layout_text(const CompareSide& s) {
    if (auto L = job_layout(s.job)) return layout_degrees_text(s.job, *L);
    return layout_label(s.job);
}

}  // namespace

std::vector<CompareRow> compare_rows(const CompareSide& a, const CompareSide& b) {
    std::vector<CompareRow> rows;
    const ParallelSpec &pa = a.job.parallel, &pb = b.job.parallel;
    rows.push_back(text_row("layout", "degrees", layout_text(a), layout_text(b)));
    rows.push_back(text_row("layout", "order", pa.order, pb.order));
    rows.push_back(number_row("layout", "micro-batch", a.job.training.micro_batch, b.job.training.micro_batch,
                              std::to_string(a.job.training.micro_batch), std::to_string(b.job.training.micro_batch), false));
    rows.back().better = 0;  // neither is better in itself
    rows.push_back(text_row("layout", "recompute", to_string(pa.recompute), to_string(pb.recompute)));
    rows.push_back(text_row("layout", "optimizer state",
                            pa.distributed_optimizer ? "distributed" : "zero " + std::to_string(pa.zero),
                            pb.distributed_optimizer ? "distributed" : "zero " + std::to_string(pb.zero)));

    const size_t stages = std::max(a.est.stages.size(), b.est.stages.size());
    auto stage_gib = [](const Estimate& e, size_t i) { return i < e.stages.size() ? e.stages[i].mem.total() / kGiB : kNone; };
    auto gib_text = [](double v) { return std::isnan(v) ? std::string("-") : fmt("%.2f GiB", v); };
    for (size_t i = 0; i < stages; ++i) {
        const double va = stage_gib(a.est, i), vb = stage_gib(b.est, i);
        rows.push_back(number_row("memory", "stage " + std::to_string(i), va, vb, gib_text(va), gib_text(vb), true));
    }
    rows.push_back(number_row("memory", "usable", a.est.usable_bytes / kGiB, b.est.usable_bytes / kGiB,
                              gib_text(a.est.usable_bytes / kGiB), gib_text(b.est.usable_bytes / kGiB), false));
    rows.back().better = 0;
    rows.push_back(text_row("memory", "fits", a.est.fits ? "yes" : "no (OOM)", b.est.fits ? "yes" : "no (OOM)"));
    if (rows.back().differs) rows.back().better = a.est.fits ? -1 : +1;

    rows.push_back(number_row("step time", "step", a.est.step_s, b.est.step_s, time_text(a.est.step_s), time_text(b.est.step_s), true));
    const TimeBreakdown &ta = a.est.time, &tb = b.est.time;
    const std::pair<const char*, double TimeBreakdown::*> terms[] = {
        {"compute", &TimeBreakdown::compute}, {"TP comm", &TimeBreakdown::tp_comm}, {"CP comm", &TimeBreakdown::cp_comm},
        {"EP comm", &TimeBreakdown::ep_comm}, {"PP comm", &TimeBreakdown::pp_comm}, {"bubble", &TimeBreakdown::bubble},
        {"DP comm", &TimeBreakdown::dp_comm}, {"optimizer", &TimeBreakdown::optimizer}, {"offload", &TimeBreakdown::offload}};
    for (auto [name, member] : terms) {
        if (ta.*member == 0 && tb.*member == 0) continue;  // a term neither layout has
        rows.push_back(number_row("step time", name, ta.*member, tb.*member, time_text(ta.*member), time_text(tb.*member), true));
    }

    rows.push_back(number_row("speed", "tokens/s", a.est.tokens_per_s, b.est.tokens_per_s, thousands(a.est.tokens_per_s),
                              thousands(b.est.tokens_per_s), false));
    rows.push_back(number_row("speed", "MFU", a.est.mfu, b.est.mfu, fmt("%.1f%%", a.est.mfu * 100), fmt("%.1f%%", b.est.mfu * 100),
                              false));

    const std::vector<FormatExportability> xa = exportability(a.job), xb = exportability(b.job);
    for (size_t i = 0; i < xa.size() && i < xb.size(); ++i) {
        auto word = [](const FormatExportability& x) { return x.ok ? std::string("yes") : "no: " + x.key; };
        rows.push_back(text_row("export", to_string(xa[i].format), word(xa[i]), word(xb[i])));
        if (rows.back().differs) rows.back().better = xa[i].ok ? -1 : +1;
    }
    return rows;
}

std::string render_compare_text(const CompareSide& a, const CompareSide& b, const Term& term) {
    const std::vector<CompareRow> rows = compare_rows(a, b);
    int wl = 16, wa = text_width(a.name), wb = text_width(b.name);
    for (const CompareRow& r : rows) {
        wl = std::max(wl, text_width(r.label) + 2);
        wa = std::max(wa, text_width(r.a));
        wb = std::max(wb, text_width(r.b));
    }
    std::string out = bold(term, "A") + " " + a.name + "\n" + bold(term, "B") + " " + b.name + "\n";
    int differences = 0;
    std::string section;
    for (const CompareRow& r : rows) {
        if (r.section != section) {
            section = r.section;
            out += "\n" + bold(term, pad_right(section, wl + 2)) + bold(term, pad_left("A", wa)) + "   " +
                   bold(term, pad_left("B", wb)) + "\n";
        }
        differences += r.differs;
        auto cell = [&](const std::string& v, int w, bool better) {
            const std::string padded = pad_left(v, w);
            return better ? green(term, padded) : padded;
        };
        std::string line = (r.differs ? "* " : "  ") + pad_right(r.label, wl) + cell(r.a, wa, r.better < 0) + "   " +
                           cell(r.b, wb, r.better > 0);
        out += (r.differs ? bold(term, line) : line) + "\n";
    }
    out += "\n" + dim(term, fmt("%d of %zu rows differ (marked *; the better side in green where there is one)", differences,
                                rows.size())) + "\n";
    return out;
}

nlohmann::json compare_json(const CompareSide& a, const CompareSide& b) {
    using nlohmann::json;
    json rows = json::array();
    int differences = 0;
    for (const CompareRow& r : compare_rows(a, b)) {
        differences += r.differs;
        rows.push_back({{"section", r.section}, {"label", r.label}, {"a", r.a}, {"b", r.b}, {"differs", r.differs},
                        {"better", r.better < 0 ? "a" : r.better > 0 ? "b" : ""}});
    }
    json doc;
    doc["schema"] = "ptd.estimate-compare/1";
    doc["a"] = estimate_json(a.job, a.est);
    doc["a"]["name"] = a.name;
    doc["b"] = estimate_json(b.job, b.est);
    doc["b"]["name"] = b.name;
    doc["rows"] = std::move(rows);
    doc["differences"] = differences;
    return doc;
}

}  // namespace ptd
