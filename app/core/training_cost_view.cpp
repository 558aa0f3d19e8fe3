// training_cost_view.cpp — rows, cells and JSON of a TrainingCost (training_cost_view.h).
#include "training_cost_view.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "estimate_view.h"
#include "term.h"

namespace ptd {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string bytes_decimal(double b) {
    if (b >= 1e15) return fmt("%.2f PB", b / 1e15);
    if (b >= 1e12) return fmt("%.2f TB", b / 1e12);
    if (b >= 1e9) return fmt("%.1f GB", b / 1e9);
    return fmt("%.1f MB", b / 1e6);
}

std::string count_text(double n) {  // 1.07M, 6.40M, 123.4K
    if (n >= 1e9) return fmt("%.2fB", n / 1e9);
    if (n >= 1e6) return fmt("%.2fM", n / 1e6);
    if (n >= 1e4) return fmt("%.1fK", n / 1e3);
    return n >= 100 ? fmt("%.0f", n) : fmt("%.1f", n);
}

// " (80%: lo – hi)" when the step time had an interval.
template <class F>
std::string range_text(const TrainingCost& c, const Range& r, F text) {
    if (r.hi <= 0) return "";
    std::string lo = text(r.lo);
    const std::string hi = text(r.hi);
    // "188.6 – 241.9 days", not "188.6 days – 241.9 days"
    if (const size_t a = lo.rfind(' '), b = hi.rfind(' ');
        a != std::string::npos && b != std::string::npos && lo.substr(a) == hi.substr(b))
        lo.resize(a);
    return " (" + fmt("%.0f%%", c.inputs.step_confidence * 100) + ": " + lo + " – " + hi + ")";
}

std::string power_text(double kw) { return kw >= 1000 ? fmt("%.2f MW", kw / 1000) : fmt("%.1f kW", kw); }

std::string per_gpu_hour_text(double usd) { return usd >= 100 ? fmt("$%.0f", usd) : fmt("$%.2f", usd); }

nlohmann::json range_or_null(const Range& r) {
    if (r.hi <= 0) return nullptr;
    return {{"lo", r.lo}, {"hi", r.hi}};
}

}  // namespace

std::string duration_text(double s) { return duration_text(s, s); }

std::string duration_text(double s, double unit_of) {
    if (unit_of >= 2 * 86400.0) return fmt("%.1f days", s / 86400.0);
    if (unit_of >= 2 * 3600.0) return fmt("%.1f h", s / 3600.0);
    if (unit_of >= 120.0) return fmt("%.1f min", s / 60.0);
    return fmt("%.1f s", s);
}

std::string energy_text(double kwh) {
    if (kwh >= 1e6) return fmt("%.2f GWh", kwh / 1e6);
    if (kwh >= 1e3) return fmt("%.1f MWh", kwh / 1e3);
    return fmt("%.1f kWh", kwh);
}

std::string usd_text(double usd) {
    if (usd >= 1e9) return fmt("$%.2fB", usd / 1e9);
    if (usd >= 1e6) return fmt("$%.2fM", usd / 1e6);
    if (usd >= 1e4) return fmt("$%.1fK", usd / 1e3);
    return fmt("$%.0f", usd);
}

std::vector<CostRow> training_cost_rows(const TrainingCost& c) {
    std::vector<CostRow> rows;
    if (!c.known) return rows;
    const TrainingCostInputs& in = c.inputs;
    rows.push_back({"budget",
                    fmt("%s tokens = %s steps of %s tokens", human_count(c.tokens).c_str(), thousands(c.steps).c_str(),
                        human_count(in.tokens_per_step).c_str()),
                    in.sources.budget + (in.tokens > 0 ? ", rounded up to whole steps" : "")});
    // An interval's ends in its point's unit: "113.0 min (80%: 108.3 – 138.9 min)".
    auto in_unit_of = [](double point) { return [point](double s) { return duration_text(s, point); }; };
    rows.push_back({"training steps", duration_text(c.compute_s) + range_text(c, c.compute_range, in_unit_of(c.compute_s)),
                    "steps × predicted step time, its interval"});
    if (c.goodput <= 0) {
        rows.push_back({"wall clock", "never finishes",
                        "a failure every " + duration_text(c.mtbf_s) + " outpaces the checkpoint saves"});
    } else {
        rows.push_back({"wall clock",
                        duration_text(c.wall_s) + range_text(c, c.wall_range, in_unit_of(c.wall_s)) +
                            fmt(", goodput %.1f%%", c.goodput * 100),
                        fmt("training steps ÷ goodput: checkpoint saves and %.0f expected failure%s, each costing a "
                            "load and half an interval of work (re-queue and start-up not counted)",
                            c.expected_failures, std::round(c.expected_failures) == 1 ? "" : "s")});
        rows.push_back({"GPU-hours", count_text(c.gpu_hours) + range_text(c, c.gpu_hours_range, count_text),
                        "wall clock × " + thousands(in.gpus) + " GPUs"});
        if (c.has_cost)
            rows.push_back({"cost", usd_text(c.cost_usd) + range_text(c, c.cost_range, usd_text),
                            "GPU-hours × " + per_gpu_hour_text(in.gpu_hour_usd) + " [" + in.sources.price + "]"});
        else
            rows.push_back({"cost", "not given", "set cluster.gpu_hour_usd (USD per GPU-hour); PTD assumes no price"});
        if (c.has_energy)
            rows.push_back({"energy", energy_text(c.energy_kwh) + range_text(c, c.energy_range, energy_text),
                            fmt("%s = (%s GPUs × %.0f W [%s] + %s node%s × %.2f kW besides the GPUs [%s]) "
                                "× PUE %.2f [%s]",
                                power_text(c.power_kw).c_str(), thousands(in.gpus).c_str(), in.gpu_power_w,
                                in.sources.gpu_power.c_str(), thousands(in.nodes).c_str(), in.nodes == 1 ? "" : "s",
                                in.host_power_w / 1000.0,
                                in.sources.host_power.c_str(), in.pue, in.sources.pue.c_str())});
        else
            rows.push_back({"energy", "not known", in.sources.gpu_power});
    }
    rows.push_back({"checkpoint",
                    bytes_decimal(c.checkpoint_bytes) + " in total, " + fmt("%.2f GiB", c.checkpoint_rank_bytes / kGiB) +
                        " per rank",
                    "weights + optimizer states (no gradients), each shard once; per rank: the most loaded rank's"});
    if (c.save_s > 0)
        rows.push_back({"save / load", duration_text(c.save_s) + " / " + duration_text(c.load_s),
                        fmt("at %.0f GB/s [%s]; the step waits for a save", in.storage_gbps, in.sources.storage.c_str())});
    if (c.interval_s > 0)
        rows.push_back({"save every",
                        duration_text(c.interval_s) + fmt(" ≈ %s steps", thousands(c.interval_steps).c_str()) +
                            (c.interval_s >= c.compute_s ? " (longer than the run: one save at its end)" : ""),
                        fmt("Young/Daly √(2 · save · MTBF); MTBF %s at %.3g failures per GPU-hour [%s]",
                            duration_text(c.mtbf_s).c_str(), in.failures_per_gpu_hour, in.sources.failures.c_str())});
    // issue 31: the job's own interval (what `ptd launch` passes as --checkpoint-every) beside it.
    if (in.job_interval_steps > 0 && c.goodput > 0)
        rows.push_back({"job interval",
                        fmt("%s steps = %s: ", thousands((double)in.job_interval_steps).c_str(), duration_text(c.job_interval_s).c_str()) +
                            (c.job_goodput > 0 ? fmt("goodput %.1f%%, ≈ %s steps lost to %.1f expected failures", c.job_goodput * 100,
                                                     thousands(std::round(c.job_expected_steps_lost)).c_str(), c.job_expected_failures)
                                               : std::string("never finishes: failures outpace the saves")),
                        fmt("launch.checkpoint_every; at the Young/Daly interval: goodput %.1f%%, ≈ %s steps lost",
                            c.goodput * 100, thousands(std::round(c.expected_steps_lost)).c_str())});
    return rows;
}

nlohmann::json training_cost_json(const TrainingCost& c) {
    if (!c.known) return nullptr;
    const TrainingCostInputs& in = c.inputs;
    const CostSources& s = in.sources;
    const bool finite = c.goodput > 0;
    return {
        {"steps", c.steps},
        {"tokens", c.tokens},
        {"tokens_per_step", in.tokens_per_step},
        {"compute_s", c.compute_s},
        {"compute_s_interval", range_or_null(c.compute_range)},
        {"interval_confidence", c.compute_range.hi > 0 ? nlohmann::json(in.step_confidence) : nlohmann::json(nullptr)},
        {"goodput", c.goodput},
        {"wall_s", finite ? nlohmann::json(c.wall_s) : nlohmann::json(nullptr)},
        {"wall_s_interval", range_or_null(c.wall_range)},
        {"expected_failures", c.expected_failures},
        {"gpus", in.gpus},
        {"gpu_hours", finite ? nlohmann::json(c.gpu_hours) : nlohmann::json(nullptr)},
        {"gpu_hours_interval", range_or_null(c.gpu_hours_range)},
        {"gpu_hour_usd", in.gpu_hour_usd > 0 ? nlohmann::json(in.gpu_hour_usd) : nlohmann::json(nullptr)},
        {"cost_usd", c.has_cost ? nlohmann::json(c.cost_usd) : nlohmann::json(nullptr)},
        {"cost_usd_interval", c.has_cost ? range_or_null(c.cost_range) : nlohmann::json(nullptr)},
        {"power",
         {{"gpu_w", in.gpu_power_w}, {"host_w_per_node", in.host_power_w}, {"pue", in.pue}, {"total_kw", c.power_kw}}},
        {"energy_kwh", c.has_energy ? nlohmann::json(c.energy_kwh) : nlohmann::json(nullptr)},
        {"energy_kwh_interval", c.has_energy ? range_or_null(c.energy_range) : nlohmann::json(nullptr)},
        {"checkpoint",
         {{"total_bytes", c.checkpoint_bytes},
          {"per_rank_bytes", c.checkpoint_rank_bytes},
          {"storage_gbps", in.storage_gbps},
          {"save_s", c.save_s},
          {"load_s", c.load_s},
          {"failures_per_gpu_hour", in.failures_per_gpu_hour},
          {"mtbf_s", c.mtbf_s},
          {"interval_s", c.interval_s},
          {"interval_steps", c.interval_steps},
          {"expected_steps_lost", c.expected_steps_lost}}},
        {"job_interval",
         in.job_interval_steps > 0 ? nlohmann::json{{"steps", in.job_interval_steps},
                                                    {"interval_s", c.job_interval_s},
                                                    {"goodput", c.job_goodput},
                                                    {"expected_failures", c.job_expected_failures},
                                                    {"expected_steps_lost", c.job_expected_steps_lost}}
                                   : nlohmann::json(nullptr)},
        {"sources",
         {{"budget", s.budget}, {"gpu_power", s.gpu_power}, {"host_power", s.host_power}, {"pue", s.pue},
          {"price", s.price}, {"storage", s.storage}, {"failures", s.failures}}},
    };
}

}  // namespace ptd
