// estimate_view.cpp — text tables and JSON for `ptd estimate` and `ptd plan`.
#include "estimate_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "ptd/export/export.h"
#include "ptd/model/model_stats.h"
#include "ptd/spec/stack_defaults.h"
#include "training_cost_view.h"

namespace ptd {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string gib(double bytes) { return fmt("%.2f", bytes / kGiB); }


bool same_memory(const MemoryBreakdown& a, const MemoryBreakdown& b) {
    return a.params == b.params && a.grads == b.grads && a.optimizer == b.optimizer && a.activations == b.activations &&
           a.temp == b.temp && a.cuda_context == b.cuda_context && a.nccl == b.nccl && a.fragmentation == b.fragmentation;
}

const char* attention_convention(AttentionFlops c) {
    return c == AttentionFlops::full ? "full s² (PaLM)" : "causal s²/2 (Megatron)";
}

std::string zero_label(int zero, bool dist_opt) { return dist_opt ? "dopt" : std::to_string(zero); }
// offload: "+o" optimizer offloaded to host, "+op" optimizer and parameters.
std::string offload_suffix(OffloadDevice opt, bool params) {
    return params ? "+op" : opt != OffloadDevice::none ? "+o" : "";
}

// Plain status text (colour is added after padding so the columns line up).
std::string status_text(const Estimate& est, const MemoryBreakdown& mem) {
    const double total = mem.total();
    if (total > est.usable_bytes) return fmt("OOM +%.1f GiB", (total - est.usable_bytes) / kGiB);
    return fmt("ok %.0f%%", est.capacity_bytes > 0 ? 100.0 * total / est.capacity_bytes : 0.0);
}

nlohmann::json memory_json(const MemoryBreakdown& m) {
    return {{"params", m.params},           {"grads", m.grads},   {"optimizer", m.optimizer},
            {"activations", m.activations}, {"temp", m.temp},     {"cuda_context", m.cuda_context},
            {"nccl", m.nccl},               {"fragmentation", m.fragmentation}, {"total", m.total()},
            {"host", m.host}};
}

// stackdef: the job's stack and the defaults it supplied (docs/cli.md "ptd estimate --json").
nlohmann::json stack_json(const JobSpec& job) {
    nlohmann::json defaults = nlohmann::json::array();
    for (const StackDefault& d : job.origin.stack_defaults)
        defaults.push_back({{"key", d.key}, {"value", d.value}, {"source", d.source}});
    return {{"framework", to_string(job.training.framework)},
            {"version", framework_version_text(job.training.framework_version)},
            {"label", stack_label(job)},
            {"defaults", defaults}};
}

nlohmann::json time_json(const TimeBreakdown& t) {
    return {{"compute", t.compute}, {"tp_comm", t.tp_comm}, {"cp_comm", t.cp_comm},     {"ep_comm", t.ep_comm},
            {"pp_comm", t.pp_comm}, {"bubble", t.bubble},   {"dp_comm", t.dp_comm},     {"optimizer", t.optimizer},
            {"offload", t.offload}, {"total", t.total()}};
}

nlohmann::json range_json(const Range& r) { return {{"lo", r.lo}, {"hi", r.hi}}; }

// The band behind an interval (ptd.estimate/1 "interval" and ptd.plan/1 "interval").
nlohmann::json band_json(const ErrorBand& b) {
    return {{"known", true},         {"confidence", b.confidence}, {"source", to_string(b.source)},
            {"runs", b.runs},        {"runs_of", b.runs_of},       {"fallback", b.fallback},
            {"error_lo", b.error_lo}, {"error_hi", b.error_hi}};
}
nlohmann::json band_json(const SpeedInterval& s) {
    return s.known ? band_json(s.band) : nlohmann::json{{"known", false}, {"reason", s.why_unknown}};
}

// "80%" of a band's confidence.
std::string confidence_text(const SpeedInterval& s) { return fmt("%.0f%%", s.band.confidence * 100); }

// "−18.7% … +4.3%": an interval as shares of its figure.
std::string relative_text(double lo_factor, double hi_factor) {
    auto pct = [](double f) {
        const double v = (f - 1) * 100;
        return (v < 0 ? "−" : "+") + fmt("%.1f%%", std::fabs(v));
    };
    return pct(lo_factor) + " … " + pct(hi_factor);
}

}  // namespace

std::string memory_interval_line(const MemoryInterval& m, double usable_bytes, double unit, const char* unit_name) {
    if (!m.known)
        return "peak error bars: none: " + m.why_unknown.substr(m.why_unknown.rfind("no interval: ", 0) == 0 ? 13 : 0);
    const Range& r = m.peak_bytes;
    std::string line = fmt("peak %.0f%%: %.2f – %.2f %s from the estimate's error on ", m.band.confidence * 100,
                           r.lo / unit, r.hi / unit, unit_name) +
                       m.basis();
    if (r.lo > usable_bytes) return line + ": over the usable memory across the whole range";
    if (m.peak > usable_bytes) return line + ": the estimate is over the usable memory, the bottom of the range is not";
    if (!m.fits_at_top)
        return line + fmt(": its top is %.2f %s over the %.2f %s usable, so the job may not fit where the estimate runs "
                          "low; leave more headroom",
                          (r.hi - usable_bytes) / unit, unit_name, usable_bytes / unit, unit_name);
    return line + ": fits across the range";
}

std::string interval_basis_line(const SpeedInterval& s) {
    if (!s.known) return "error bars: none: " + s.why_unknown.substr(s.why_unknown.rfind("no interval: ", 0) == 0 ? 13 : 0);
    if (s.band.source == IntervalSource::cluster_profile)
        return "error bars: " + confidence_text(s) + " intervals from " + s.basis() + " (docs/estimators.md, \"Error bars\")";
    return "error bars: " + confidence_text(s) + " intervals from the estimate's error on " + s.basis() + s.one_sided() +
           "; your own cluster may differ (docs/estimators.md, \"Error bars\")";
}

std::string thousands(double v) {
    std::string digits = fmt("%.0f", v), out;
    const size_t n = digits.size();
    for (size_t i = 0; i < n; ++i) {
        out += digits[i];
        if (digits[i] != '-' && (n - i - 1) % 3 == 0 && i + 1 < n) out += ',';
    }
    return out;
}

std::string layout_label(int tp, int pp, int dp, int cp, int ep, int vpp) {
    std::string s = fmt("tp%d·pp%d·dp%d", tp, pp, dp);
    if (cp > 1) s += fmt("·cp%d", cp);
    if (ep > 1) s += fmt("·ep%d", ep);
    if (vpp > 1) s += fmt("·vpp%d", vpp);
    return s;
}

std::string layout_label(const JobSpec& job) {
    const ParallelSpec& p = job.parallel;
    std::string s = layout_label(p.tp, p.pp, p.dp, p.cp, p.ep, p.vpp);
    if (job.model.experts > 1 && p.etp() != p.tp) s += fmt("·etp%d", p.etp());  // etp
    return s;
}

// ---- estimate --------------------------------------------------------------------------

std::string render_estimate_text(const JobSpec& job, const Estimate& est, const Term& term) {
    const ModelSpec& m = job.model;
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    std::string out;

    // Header: what is being estimated, in one line.
    out += bold(term, m.name) + fmt(" (%s params) on %d × %s", human_count((double)est.params.total).c_str(),
                                    job.world_size(), job.cluster.gpu.name.c_str());
    out += " · " + layout_label(job);
    out += fmt(" · mb %d · global %d · %d micro-batch%s · %s · %s · recompute %s · SP %s · flash %s\n", t.micro_batch,
               t.global_batch, est.micro_batches, est.micro_batches == 1 ? "" : "es",
               (std::string(to_string(t.precision)) +
                (t.fp8 != Fp8Recipe::none ? std::string(" + fp8 ") + to_string(t.fp8) : std::string()))  // issue 15 fp8
                   .c_str(),
               p.distributed_optimizer ? "distributed optimizer" : fmt("zero %d", p.zero).c_str(),
               (std::string(to_string(p.recompute)) +
                (p.recompute == Recompute::selective && p.recompute_style != RecomputeStyle::megatron
                     ? std::string(" (") + to_string(p.recompute_style) + ")"
                     : std::string()) +
                (p.recompute == Recompute::selective && p.recompute_style == RecomputeStyle::megatron &&
                         p.recompute_modules != kRecomputeCoreAttn  // recmod: Megatron-core's module list
                     ? [&] {
                           std::string words;
                           for (const std::string& w : recompute_module_words(p.recompute_modules))
                               words += (words.empty() ? " (" : ", ") + w;
                           return words + ")";
                       }()
                     : std::string()))
                   .c_str(),
               p.sequence_parallel ? "on" : "off", t.flash_attention ? "on" : "off");
    {  // nccl: the network the collective times assume, named by what the hardware has
        std::string line = "network: " + describe_network(job);
        if (!job.origin.network_source.empty()) line += " · " + job.origin.network_source;
        // A network nobody described is a guess: say so where the eye lands (notes say how to fix it).
        const bool generic = job.origin.network_generic && job.cluster.gpu.link != GpuLink::loopback;
        out += (generic ? yellow(term, line + " — GENERIC, see notes") : dim(term, line)) + "\n";
    }
    // stackdef (issue 29 point 1): what the stack supplied for the keys the job left unwritten.
    if (!job.origin.stack_defaults.empty()) {
        out += dim(term, "stack: " + stack_label(job) + " · defaults for keys the job does not write:") + "\n";
        size_t w = 0;
        for (const StackDefault& d : job.origin.stack_defaults) w = std::max(w, d.key.size() + 3 + d.value.size());
        for (const StackDefault& d : job.origin.stack_defaults) {
            const std::string kv = d.key + " = " + d.value;
            out += dim(term, "  " + kv + std::string(w + 2 - kv.size(), ' ') + d.source) + "\n";
        }
    }
    if (p.offload_optimizer != OffloadDevice::none || p.offload_params)
        out += fmt("offload: optimizer %s · parameters %s\n", to_string(p.offload_optimizer), p.offload_params ? "cpu" : "none");

    // Memory: one row per run of consecutive stages with the same breakdown.
    // Tiny jobs (the CPU engine's) would read 0.00 GiB everywhere: show them in MiB.
    double largest = 0;
    for (const StageEstimate& s : est.stages) largest = std::max(largest, s.mem.total());
    const bool mib = largest < 0.5 * kGiB;
    const double unit = mib ? 1024.0 * 1024.0 : kGiB;
    out += "\n" + bold(term, mib ? "memory per GPU, MiB" : "memory per GPU, GiB") +
           dim(term, " (most loaded rank of each pipeline stage)") + "\n";
    const int wl = 12;
    std::vector<std::pair<const char*, int>> cols = {
        {"layers", 6}, {"params", 8},  {"grads", 8},    {"optimizer", 10}, {"activations", 12}, {"temp", 7},
        {"CUDA ctx", 9}, {"NCCL", 6}, {"frag", 6},     {"total", 8},      {"capacity", 9}};
    // Widen a column whose numbers outgrow it (≥ 100 GiB): two spaces before each value.
    for (const StageEstimate& sg : est.stages) {
        const double vs[] = {sg.mem.params, sg.mem.grads, sg.mem.optimizer, sg.mem.activations, sg.mem.temp,
                             sg.mem.cuda_context, sg.mem.nccl, sg.mem.fragmentation, sg.mem.total(), est.capacity_bytes};
        for (size_t c = 0; c < std::size(vs); ++c)
            cols[c + 1].second = std::max(cols[c + 1].second, text_width(fmt("%.2f", vs[c] / unit)) + 2);
    }
    std::string head = "  " + pad_right("stage", wl);
    for (auto [name, w] : cols) head += pad_left(name, w);
    out += bold(term, head + "  status") + "\n";
    const auto& st = est.stages;
    for (size_t i = 0; i < st.size();) {
        size_t j = i + 1;
        while (j < st.size() && same_memory(st[j].mem, st[i].mem) && st[j].layers == st[i].layers) ++j;
        const bool worst = est.worst_stage >= (int)i && est.worst_stage < (int)j;
        const MemoryBreakdown& mem = st[i].mem;
        std::string label = j - i == 1 ? fmt("stage %d", st[i].stage) : fmt("stages %d–%d", st[i].stage, st[j - 1].stage);
        std::string row = "  " + pad_right(label, wl);
        const double values[] = {mem.params, mem.grads, mem.optimizer, mem.activations, mem.temp,
                                 mem.cuda_context, mem.nccl, mem.fragmentation, mem.total(), est.capacity_bytes};
        row += pad_left(std::to_string(st[i].layers), cols[0].second);
        for (size_t c = 0; c < std::size(values); ++c) row += pad_left(fmt("%.2f", values[c] / unit), cols[c + 1].second);
        const std::string status = status_text(est, mem);
        const bool oom = mem.total() > est.usable_bytes;
        row += "  " + (oom ? red(term, status) : green(term, status));
        if (worst && st.size() > 1) row += (oom ? red(term, "  ◀ worst") : bold(term, "  ◀ worst"));
        out += row + "\n";
        i = j;
    }
    if (est.usable_bytes < est.capacity_bytes)
        out += dim(term, fmt("  usable %.2f of %.2f GiB (estimate.headroom %.0f%%)\n", est.usable_bytes / kGiB,
                             est.capacity_bytes / kGiB, job.estimate.headroom * 100));
    out += dim(term, "  " + memory_interval_line(est.memory_interval, est.usable_bytes, unit, mib ? "MiB" : "GiB")) + "\n";
    if (!est.fits && (est.stages.empty() || est.stages[(size_t)est.worst_stage].mem.total() > est.usable_bytes))  // else the host RAM (below)
        out += red(term, fmt("  OOM: stage %d needs %.2f GiB, %.2f GiB more than the %.2f GiB usable",
                             est.stages.empty() ? 0 : est.stages[(size_t)est.worst_stage].stage,
                             est.stages.empty() ? 0.0 : est.stages[(size_t)est.worst_stage].mem.total() / kGiB,
                             est.stages.empty() ? 0.0 : (est.stages[(size_t)est.worst_stage].mem.total() - est.usable_bytes) / kGiB,
                             est.usable_bytes / kGiB)) + "\n";

    // offload: host memory per GPU (each stage's) and per node, against the node's RAM.
    if (est.host_bytes_per_node > 0) {
        double per_gpu = 0;
        for (const StageEstimate& sg : est.stages) per_gpu = std::max(per_gpu, sg.mem.host);
        std::string line = fmt("  host memory (offloaded): %.2f GiB per GPU, %.2f GiB per node", per_gpu / kGiB,
                               est.host_bytes_per_node / kGiB);
        if (est.host_capacity_bytes > 0)
            line += fmt(" of %.0f GiB host RAM%s", est.host_capacity_bytes / kGiB,
                        job.cluster.host_memory_gib > 0 ? " (cluster.host_memory_gib)" : " (the GPU generation's DGX)");
        else
            line += " (host RAM unknown: set cluster.host_memory_gib to check it)";
        out += (est.host_fits ? line : red(term, line + ": does NOT fit")) + "\n";
    }

    // Time.
    const TimeBreakdown& tb = est.time;
    const double total = tb.total();
    out += "\n" + bold(term, "time per step") + dim(term, " (critical path through the slowest stage)") + "\n";
    const std::pair<const char*, double> rows[] = {
        {"compute", tb.compute}, {"TP comm", tb.tp_comm}, {"CP comm", tb.cp_comm},         {"EP comm", tb.ep_comm},
        {"PP p2p", tb.pp_comm},  {"bubble", tb.bubble},   {"DP comm exposed", tb.dp_comm}, {"optimizer", tb.optimizer}};
    // With a cluster profile each line says where its figure comes from.
    const std::string source = est.time_from_profile ? "   from profile"
                             : !est.time_source_why.empty() ? "   from preset" : "";
    for (auto [name, s] : rows)
        out += "  " + pad_right(name, 16) + pad_left(fmt("%.3f s", s), 12) +
               pad_left(fmt("%.1f%%", total > 0 ? 100.0 * s / total : 0.0), 8) + (s > 0 ? source : std::string()) + "\n";
    if (tb.offload > 0)  // offload: PCIe copies and the CPU optimizer step the GPU waits for
        out += "  " + pad_right("offload PCIe+CPU", 16) + pad_left(fmt("%.3f s", tb.offload), 12) +
               pad_left(fmt("%.1f%%", total > 0 ? 100.0 * tb.offload / total : 0.0), 8) + "\n";
    const SpeedInterval& iv = est.speed;
    out += "  " + bold(term, pad_right("total step", 16) + pad_left(fmt("%.3f s", est.step_s), 12)) +
           (iv.known ? fmt("   %s interval %.3f – %.3f s", confidence_text(iv).c_str(), iv.step_s.lo, iv.step_s.hi)
                     : std::string()) + "\n";

    // Throughput and utilisation, each with its interval.
    auto within = [&](const Range& r, const std::string& text) { return iv.known ? " (" + text + ")" : std::string(); };
    out += "\n" + bold(term, "throughput ") + thousands(est.tokens_per_s) + " tokens/s" +
           within(iv.tokens_per_s, confidence_text(iv) + ": " + thousands(iv.tokens_per_s.lo) + " – " +
                                       thousands(iv.tokens_per_s.hi)) +
           fmt(" · model %.1f TFLOP/s per GPU", est.model_tflops_per_gpu) +
           within(iv.model_tflops_per_gpu,
                  fmt("%.1f – %.1f", iv.model_tflops_per_gpu.lo, iv.model_tflops_per_gpu.hi)) +
           fmt(" · hardware %.1f TFLOP/s per GPU (peak %.3g)\n", est.hardware_tflops_per_gpu, est.peak_tflops);
    out += bold(term, "MFU ") + fmt("%.1f%%", est.mfu * 100) +
           within(iv.mfu, fmt("%s: %.1f – %.1f%%", confidence_text(iv).c_str(), iv.mfu.lo * 100, iv.mfu.hi * 100)) +
           fmt(" · HFU %.1f%%", est.hfu * 100) + within(iv.hfu, fmt("%.1f – %.1f%%", iv.hfu.lo * 100, iv.hfu.hi * 100)) +
           fmt(" · attention FLOPs: %s\n", attention_convention(est.flops.convention));
    out += dim(term, interval_basis_line(iv)) + "\n";

    // cost: the whole run (training_cost_view.cpp), each figure with where it comes from.
    if (const std::vector<CostRow> cost = training_cost_rows(est.training); !cost.empty()) {
        out += "\n" + bold(term, "time and cost to train") + "\n";
        for (const CostRow& r : cost)
            out += "  " + pad_right(r.label, 16) + r.value + dim(term, "  · " + r.source) + "\n";
    }

    if (!est.notes.empty()) {
        out += "\n" + bold(term, "notes") + "\n";
        for (const std::string& n : est.notes) out += "  - " + n + "\n";
    }
    return out;
}

nlohmann::json estimate_interval_json(const SpeedInterval& s) {
    nlohmann::json j = band_json(s);
    if (s.known) {
        j["step_s"] = range_json(s.step_s);
        j["tokens_per_s"] = range_json(s.tokens_per_s);
        j["model_tflops_per_gpu"] = range_json(s.model_tflops_per_gpu);
        j["hardware_tflops_per_gpu"] = range_json(s.hardware_tflops_per_gpu);
        j["mfu"] = range_json(s.mfu);
        j["hfu"] = range_json(s.hfu);
    }
    return j;
}

nlohmann::json memory_interval_json(const MemoryInterval& m) {
    if (!m.known) return {{"known", false}, {"reason", m.why_unknown}};
    nlohmann::json j = band_json(m.band);
    j["peak_bytes"] = range_json(m.peak_bytes);
    j["fits_at_top"] = m.fits_at_top;
    return j;
}

nlohmann::json estimate_json(const JobSpec& job, const Estimate& est) {
    const ParallelSpec& p = job.parallel;
    const TrainingSpec& t = job.training;
    nlohmann::json stages = nlohmann::json::array();
    for (const StageEstimate& s : est.stages)
        stages.push_back({{"stage", s.stage},
                          {"layers", s.layers},
                          {"has_embedding", s.has_embedding},
                          {"has_output", s.has_output},
                          {"in_flight", s.in_flight},
                          {"parameters", s.params_count},
                          {"memory", memory_json(s.mem)},
                          {"fits", s.mem.total() <= est.usable_bytes},
                          {"activation_bytes_per_microbatch", s.act_per_microbatch},
                          {"per_microbatch_s",
                           {{"forward", s.fwd_s}, {"backward", s.bwd_s}, {"recompute", s.recompute_s}, {"tp", s.tp_s},
                            {"cp", s.cp_s}, {"ep", s.ep_s}, {"p2p", s.p2p_s}}},
                          {"dp_s", s.dp_s}});
    return {
        {"schema", "ptd.estimate/1"},
        {"job", job.origin.file},
        {"model", job.model.name},
        {"world", job.world_size()},
        {"gpu", job.cluster.gpu.name},
        {"layout",
         {{"tp", p.tp}, {"pp", p.pp}, {"dp", p.dp}, {"cp", p.cp}, {"ep", p.ep}, {"vpp", p.vpp},
          {"zero", p.zero}, {"distributed_optimizer", p.distributed_optimizer},
          {"sequence_parallel", p.sequence_parallel}, {"recompute", to_string(p.recompute)}, {"order", p.order},
          {"micro_batch", t.micro_batch}, {"global_batch", t.global_batch}, {"micro_batches", est.micro_batches},
          {"precision", to_string(t.precision)}, {"flash_attention", t.flash_attention},
          {"offload_optimizer", to_string(p.offload_optimizer)}, {"offload_params", p.offload_params}}},
        {"capacity_bytes", est.capacity_bytes},
        {"host",
         {{"bytes_per_node", est.host_bytes_per_node}, {"capacity_bytes_per_node", est.host_capacity_bytes},
          {"fits", est.host_fits}, {"pcie_gbps", est.pcie_gbps}}},
        {"usable_bytes", est.usable_bytes},
        {"fits", est.fits},
        {"worst_stage", est.worst_stage},
        {"peak_bytes", est.stages.empty() ? 0.0 : est.stages[(size_t)est.worst_stage].mem.total()},
        {"stages", stages},
        {"time", time_json(est.time)},
        {"step_s", est.step_s},
        {"tokens_per_s", est.tokens_per_s},
        {"model_tflops_per_gpu", est.model_tflops_per_gpu},
        {"hardware_tflops_per_gpu", est.hardware_tflops_per_gpu},
        {"peak_tflops", est.peak_tflops},
        {"mfu", est.mfu},
        {"hfu", est.hfu},
        {"interval", estimate_interval_json(est.speed)},
        {"memory_interval", memory_interval_json(est.memory_interval)},
        {"training", training_cost_json(est.training)},
        {"time_source", est.time_from_profile ? "profile" : "preset"},
        {"flops",
         {{"convention", to_string(est.flops.convention)}, {"model_per_token", est.flops.model_per_token},
          {"hardware_per_token", est.flops.hardware_per_token}, {"attention_per_token", est.flops.attention_per_token},
          {"params_matmul", est.flops.params_matmul}}},
        {"vocab_padded", est.vocab_padded},
        {"parameters", {{"total", est.params.total}, {"active", est.params.active}, {"non_embedding", est.params.non_embedding}}},
        {"notes", est.notes},
        {"stack", stack_json(job)},
    };
}

// ---- plan ------------------------------------------------------------------------------

namespace {

const char* order_of(const JobSpec& job, const LayoutChoice& c) {
    return c.order >= 0 && c.order < kPlannerOrderCount ? kPlannerOrders[c.order] : job.parallel.order.c_str();
}

// planfw: "megatron,torchtitan": the frameworks that run a row (--any-framework).
std::string frameworks_text(const std::vector<Framework>& fws) {
    std::string s;
    for (Framework f : fws) s += (s.empty() ? "" : ",") + std::string(to_string(f));
    return s.empty() ? "none" : s;
}

std::string plan_table(const JobSpec& job, const std::vector<PlanEntry>& entries, const Term& term, bool any_framework) {
    const std::vector<std::pair<const char*, int>> cols = {
        {"rank", 5}, {"tp", 4}, {"pp", 4}, {"dp", 6}, {"cp", 5}, {"ep", 4}, {"vpp", 4}, {"mb", 4},
        {"zero", 6}, {"recompute", 11}, {"sp", 4}, {"overlap", 9}, {"order", 16}, {"peak GiB", 10}, {"headroom GiB", 14},
        {"step s", 9}, {"tokens/s", 12}, {"MFU", 7}};
    std::vector<std::pair<const char*, int>> widths = cols;
    // cost: the whole run's wall clock, and its cost and energy where the job gives what they need.
    const bool cost_col = job.cluster.gpu_hour_usd > 0, energy_col = job.cluster.gpu.power_w > 0;
    widths.push_back({"train", 12});
    if (cost_col) widths.push_back({"cost", 10});
    if (energy_col) widths.push_back({"energy", 12});
    // etp: MoE jobs get an etp column after ep (the experts' tensor parallelism the search chose).
    const bool moe = job.model.experts > 1;
    constexpr size_t kEtpColumn = 6;
    if (moe) widths.insert(widths.begin() + kEtpColumn, {"etp", 4});
    // hsdp: a "rep" column after zero (parallel.dp_replicate) where a listed row has replicas
    // or (fold) stands for a replica count besides its own.
    const bool replicas = std::any_of(entries.begin(), entries.end(), [](const PlanEntry& e) {
        return e.choice.dp_replicate > 1 ||
               std::any_of(e.folded.begin(), e.folded.end(), [](const FoldedVariant& v) { return v.dp_replicate > 1; });
    });
    constexpr size_t kRepColumn = 9;  // after zero (one further right with the etp column)
    const size_t rep_column = kRepColumn + (moe ? 1 : 0);
    if (replicas) widths.insert(widths.begin() + rep_column, {"rep", 5});
    if (any_framework) widths.push_back({"frameworks", 12});  // planfw
    std::vector<std::vector<std::string>> rows;
    for (size_t i = 0; i < entries.size(); ++i) {
        const LayoutChoice& c = entries[i].choice;
        const LayoutScore& s = entries[i].score;
        rows.push_back({
            std::to_string(i + 1), std::to_string(c.tp), std::to_string(c.pp), std::to_string(c.dp),
            std::to_string(c.cp), std::to_string(c.ep),
            // zb: ZB-H1 / DualPipe run one chunk per stage: the vpp cell names the schedule.
            c.pp > 1 && (c.schedule == PipelineSchedule::zb_h1 || c.schedule == PipelineSchedule::dualpipe)
                ? std::string(to_string(c.schedule)) : std::to_string(c.vpp),
            std::to_string(c.micro_batch),
            zero_label(c.zero, c.distributed_optimizer) + offload_suffix(c.offload_optimizer, c.offload_params), to_string(c.recompute), c.sequence_parallel ? "on" : "off",
            overlap_words(c), order_of(job, c), gib(s.peak_bytes), gib(s.usable_bytes - s.peak_bytes), fmt("%.3f", s.step_s),
            thousands(s.tokens_per_s), fmt("%.1f%%", s.mfu * 100)});
        const TrainingCost& run = entries[i].training;  // cost
        const bool finite = run.known && run.goodput > 0;
        rows.back().push_back(finite ? duration_text(run.wall_s) : "—");
        if (cost_col) rows.back().push_back(finite && run.has_cost ? usd_text(run.cost_usd) : "—");
        if (energy_col) rows.back().push_back(finite && run.has_energy ? energy_text(run.energy_kwh) : "—");
        if (moe) rows.back().insert(rows.back().begin() + kEtpColumn, std::to_string(c.etp > 0 ? c.etp : c.tp));  // etp
        if (replicas) rows.back().insert(rows.back().begin() + rep_column, std::to_string(c.dp_replicate));  // hsdp
        if (any_framework) rows.back().push_back(frameworks_text(entries[i].frameworks));  // planfw
        // A value wider than its column (≥ 100 GiB, big clusters' tokens/s) widens it.
        for (size_t k = 0; k < widths.size(); ++k)
            widths[k].second = std::max(widths[k].second, text_width(rows.back()[k]) + 2);
    }
    std::string out, head;
    for (auto [name, w] : widths) head += pad_left(name, w);
    out += bold(term, head) + "\n";
    for (const auto& cells : rows) {
        std::string row;
        for (size_t k = 0; k < widths.size(); ++k) row += pad_left(cells[k], widths[k].second);
        out += row + "\n";
    }
    return out;
}

// Per export format: whether `ptd export --format F` can write this layout, and if not
// the job key that blocks it (issue 12, item 10).
nlohmann::json exports_json(const JobSpec& job, const PlanEntry& e) {
    nlohmann::json out = nlohmann::json::object();
    for (const FormatExportability& x : exportability(apply_plan_entry(job, e))) {
        nlohmann::json one = {{"ok", x.ok}};
        if (!x.ok) {
            one["key"] = x.key;
            one["reason"] = x.reason;
        }
        out[to_string(x.format)] = one;
    }
    return out;
}

// Which listed layouts some format cannot express, one line per (format, key, reason) with
// the ranks it applies to ("Pareto ranks 30-35, 38: not exportable to megatron (...)"), so
// forty ZeRO-3 rows give one line, not forty.
std::string exports_text(const JobSpec& job, const std::vector<PlanEntry>& entries, const char* list) {
    struct Blocked {
        std::string what;          // "megatron (parallel.zero): got 3; ..."
        std::vector<size_t> ranks;  // 1-based, ascending
    };
    std::vector<Blocked> groups;  // in order of first appearance
    for (size_t i = 0; i < entries.size(); ++i)
        for (const FormatExportability& x : exportability(apply_plan_entry(job, entries[i]))) {
            if (x.ok) continue;
            const std::string what = fmt("%s (%s): %s", to_string(x.format), x.key.c_str(), x.reason.c_str());
            auto it = std::find_if(groups.begin(), groups.end(), [&](const Blocked& g) { return g.what == what; });
            if (it == groups.end()) it = groups.insert(groups.end(), Blocked{what, {}});
            it->ranks.push_back(i + 1);
        }
    std::string out;
    for (const Blocked& g : groups) {
        std::string ranks;  // runs of consecutive ranks as "a-b"
        for (size_t k = 0; k < g.ranks.size();) {
            size_t end = k;
            while (end + 1 < g.ranks.size() && g.ranks[end + 1] == g.ranks[end] + 1) ++end;
            ranks += (ranks.empty() ? "" : ", ") + std::to_string(g.ranks[k]);
            if (end > k) ranks += "-" + std::to_string(g.ranks[end]);
            k = end + 1;
        }
        out += fmt("  %s rank%s %s: not exportable to %s\n", list, g.ranks.size() > 1 ? "s" : "", ranks.c_str(),
                   g.what.c_str());
    }
    return out;
}

nlohmann::json entry_json_base(const JobSpec& job, const PlanEntry& e);

nlohmann::json entry_json(const JobSpec& job, const PlanEntry& e, const std::optional<ErrorBand>& band,
                          bool options_any_framework) {
    const LayoutChoice& c = e.choice;
    nlohmann::json j = entry_json_base(job, e);
    // This row's interval under the plan's band (computed for listed rows only).
    const LayoutScore& s = e.score;
    if (const SpeedInterval iv = band ? speed_interval(*band, SpeedPoint{s.step_s, s.tokens_per_s, 0, 0, s.mfu, s.hfu})
                                      : SpeedInterval{};
        iv.known)
        j["interval"] = {{"step_s", range_json(iv.step_s)}, {"tokens_per_s", range_json(iv.tokens_per_s)},
                         {"mfu", range_json(iv.mfu)}, {"hfu", range_json(iv.hfu)}};
    else
        j["interval"] = nullptr;
    // memband: whether this row's peak still fits at the top of the memory error bars.
    if (const MemoryInterval m = job_memory_interval(job, s.peak_bytes, s.usable_bytes); m.known)
        j["memory_interval"] = {{"peak_bytes", range_json(m.peak_bytes)}, {"fits_at_top", m.fits_at_top}};
    else
        j["memory_interval"] = nullptr;
    if (job.model.experts > 1) j["expert_tp"] = c.etp > 0 ? c.etp : c.tp;  // etp: MoE only (dense output unchanged)
    if (!e.frameworks.empty() || options_any_framework) {  // planfw: --any-framework
        nlohmann::json fws = nlohmann::json::array();
        for (Framework f : e.frameworks) fws.push_back(to_string(f));
        j["frameworks"] = fws;
    }
    if (c.pp > 1 && (c.schedule == PipelineSchedule::zb_h1 || c.schedule == PipelineSchedule::dualpipe))
        j["schedule"] = to_string(c.schedule);  // zb: only where it is not Megatron-LM's own
    nlohmann::json folded = nlohmann::json::array();  // fold
    for (const FoldedVariant& v : e.folded)
        folded.push_back({{"vpp", v.vpp}, {"tp_comm_overlap", v.tp_comm_overlap}, {"tokens_per_s", v.tokens_per_s},
                          {"peak_bytes", v.peak_bytes}, {"dp_replicate", v.dp_replicate}});
    j["folded"] = folded;
    return j;
}

nlohmann::json entry_json_base(const JobSpec& job, const PlanEntry& e) {
    const LayoutChoice& c = e.choice;
    const LayoutScore& s = e.score;
    return {{"tp", c.tp}, {"pp", c.pp}, {"dp", c.dp}, {"cp", c.cp}, {"ep", c.ep}, {"vpp", c.vpp},
            {"micro_batch", c.micro_batch}, {"zero", c.zero}, {"distributed_optimizer", c.distributed_optimizer},
            {"dp_replicate", c.dp_replicate},
            {"sequence_parallel", c.sequence_parallel}, {"recompute", to_string(c.recompute)},
            {"order", order_of(job, c)}, {"layers_per_stage", e.layers_per_stage},
            {"peak_bytes", s.peak_bytes}, {"usable_bytes", s.usable_bytes},
            {"headroom_bytes", s.usable_bytes - s.peak_bytes}, {"fits", s.fits}, {"worst_stage", s.worst_stage},
            {"step_s", s.step_s}, {"tokens_per_s", s.tokens_per_s}, {"mfu", s.mfu}, {"hfu", s.hfu},
            {"time", time_json(s.time)}, {"worst_memory", memory_json(s.worst_mem)},
            {"offload_optimizer", to_string(c.offload_optimizer)}, {"offload_params", c.offload_params},
            {"host_bytes_per_node", s.host_bytes_per_node},
            {"training", training_cost_json(e.training)},
            {"overlap_grad_reduce", c.overlap_grad_reduce}, {"overlap_param_gather", c.overlap_param_gather},
            {"tp_comm_overlap", c.tp_comm_overlap},
            {"exports", exports_json(job, e)}};
}

}  // namespace

std::optional<ErrorBand> plan_error_band(const JobSpec& job, const PlanResult& plan, const PlanOptions& options,
                                         std::string* why) {
    if (options.profile && profile_unused_reason(job).empty() && !plan.top.empty()) {
        // The profile's band at the best layout, on the planned cluster.
        JobSpec planned = job;
        if (options.gpus > 0) planned.cluster.nodes = options.gpus / job.cluster.gpus_per_node, planned.cluster.hosts.clear();
        const PlanEntry& best = plan.top.front();
        return profile_error_band(planned, *options.profile, best.choice, best.layers_per_stage, best.score.step_s);
    }
    return job_error_band(job, why);
}

size_t rows_within_error(const JobSpec& job, const PlanResult& plan) { return rows_within_error(job_error_band(job), plan); }

size_t rows_within_error(const std::optional<ErrorBand>& band, const PlanResult& plan) {
    if (!band || plan.top.empty()) return 0;
    size_t n = 1;
    while (n < plan.top.size() &&
           within_error(*band, plan.top[n].score.tokens_per_s, plan.top.front().score.tokens_per_s))
        ++n;
    return n;
}

namespace {

// The plan's error-bar header: how wide every row's interval is, and from which runs.
std::string plan_interval_line(const JobSpec& job, const std::optional<ErrorBand>& band) {
    if (!band) return interval_basis_line(job_speed_interval(job, {}));
    const SpeedInterval s = speed_interval(*band, SpeedPoint{1, 1, 1, 1, 1, 1});
    return fmt("error bars (%.0f%%, from %s%s): each row's tokens/s and MFU %s, step time %s",
               band->confidence * 100, s.basis().c_str(), s.one_sided().c_str(),
               relative_text(s.tokens_per_s.lo, s.tokens_per_s.hi).c_str(),
               relative_text(s.step_s.lo, s.step_s.hi).c_str());
}

// memband: how far a row's memory peak may reach above its estimate, and which of the listed
// rows would no longer fit there ("" without a band: CPUs).
std::string plan_memory_line(const JobSpec& job, const std::vector<PlanEntry>& rows) {
    const std::optional<ErrorBand> band = job_memory_error_band(job);
    if (!band || rows.empty()) return "";
    std::string over;
    for (size_t i = 0; i < rows.size(); ++i)
        if (!memory_interval(*band, rows[i].score.peak_bytes, rows[i].score.usable_bytes).fits_at_top)
            over += (over.empty() ? "" : ", ") + std::to_string(i + 1);
    const MemoryInterval unit = memory_interval(*band, 1, 1);  // the band as factors of a peak
    return fmt("memory error bars (%.0f%%, from %s): each row's peak %s; ", band->confidence * 100, band_basis(*band).c_str(),
               relative_text(unit.peak_bytes.lo, unit.peak_bytes.hi).c_str()) +
           (over.empty() ? "every listed layout fits at its top"
                         : "at its top layout" + std::string(over.find(',') == std::string::npos ? " " : "s ") + over +
                               " would not fit (more headroom: --headroom)");
}

// Whether the first rows are a ranking or the estimate's noise.
std::string plan_overlap_line(const std::optional<ErrorBand>& band, const PlanResult& plan) {
    const size_t n = rows_within_error(band, plan);
    if (n >= 2)
        return fmt("within error: %s layouts 1–%zu are within the estimate's error of each other (their tokens/s "
                   "intervals overlap the best's), so their order is not a prediction; choose among them by headroom "
                   "or what your stack runs",
                   n == plan.top.size() ? "all listed" : "the top", n);
    if (n == 1 && plan.top.size() >= 2)
        return "within error: layout 1 is faster than layout 2 by more than the estimate's error (their tokens/s "
               "intervals do not overlap)";
    return "";
}

// With --unfold (fold off), when every listed row is one layout at different interleaving
// depths (an uneven model whose layers split many ways, e.g. DeepSeek-V3's 61), the table
// shows one choice, not ten: say so.
std::string plan_depth_line(const PlanResult& plan) {
    if (plan.top.size() < 3) return "";
    const LayoutChoice& first = plan.top.front().choice;
    // The same layout but for the depth, TP overlap and replicas included.
    auto same_but_depth = [&first](const LayoutChoice& c) {
        return same_up_to_fold(first, c) && c.tp_comm_overlap == first.tp_comm_overlap &&
               c.dp_replicate == first.dp_replicate;
    };
    std::vector<int> depths;
    double lo = plan.top.front().score.tokens_per_s, hi = lo;
    for (const PlanEntry& e : plan.top) {
        if (!same_but_depth(e.choice)) return "";
        depths.push_back(e.choice.vpp);
        lo = std::min(lo, e.score.tokens_per_s), hi = std::max(hi, e.score.tokens_per_s);
    }
    std::sort(depths.begin(), depths.end());
    std::string list;
    for (int d : depths) list += (list.empty() ? "" : ", ") + std::to_string(d);
    return fmt("rows 1–%zu are one layout at %zu interleaving depths (vpp %s), %.1f%% apart in tokens/s; "
               "without --unfold each layout is one row (or see the Pareto front below)",
               plan.top.size(), depths.size(), list.c_str(), hi > 0 ? (hi / lo - 1) * 100 : 0.0);
}

// "2–4, 7, 11–13": the depths of `variants` (ascending), runs of consecutive ones as ranges.
std::string depth_ranges(const std::vector<FoldedVariant>& variants) {
    std::string out;
    for (size_t i = 0; i < variants.size();) {
        size_t j = i;
        while (j + 1 < variants.size() && variants[j + 1].vpp == variants[j].vpp + 1) ++j;
        out += (out.empty() ? "" : ", ") + std::to_string(variants[i].vpp);
        if (j > i) out += (j == i + 1 ? ", " : "–") + std::to_string(variants[j].vpp);
        i = j + 1;
    }
    return out;
}

// fold: the rows that stand for their layout at several interleaving depths, TP-overlap
// settings or replica counts ("" when no row folds any).
std::string plan_folded_line(const PlanResult& plan) {
    std::string rows;
    int shown = 0, more = 0;
    for (size_t i = 0; i < plan.top.size(); ++i) {
        if (plan.top[i].folded.empty()) continue;
        if (shown == 4) {
            ++more;
            continue;
        }
        rows += (rows.empty() ? "" : "; ") + folded_row_text(fmt("row %zu", i + 1), plan.top[i]);
        ++shown;
    }
    if (rows.empty()) return "";
    if (more > 0) rows += fmt("; %d more rows", more);
    return "one row per layout, at its fastest interleaving depth, TP overlap and replicas: " + rows +
           " (--unfold lists each as a row)";
}

}  // namespace

// cost: what the listed rows are ordered by, for the table's title.
const char* objective_title(PlanObjective o) {
    switch (o) {
        case PlanObjective::time: return "time to train (expected wall clock)";
        case PlanObjective::cost: return "cost to train";
        case PlanObjective::energy: return "energy to train";
        case PlanObjective::throughput: break;
    }
    return "tokens/s";
}

std::string plan_framework_line(const JobSpec& job, const PlanResult& plan) {
    if (plan.any_framework)
        return "frameworks: the layouts any framework runs (--any-framework); the last column names those that run each "
               "row, the time model is " + std::string(to_string(job.training.framework)) + "'s";
    const FrameworkRules& r = framework_rules(plan.framework, plan.framework_version);
    std::string line = std::string("framework: ") + to_string(plan.framework) + " (" + r.runs + ") bounds the search: " +
                       r.lacks + (r.has_format ? std::string("; every row exports to ") + to_string(r.format) : std::string()) +
                       "; --any-framework widens it";
    if (plan.refused > 0) line += fmt("; %lld layouts its export refuses left out", (long long)plan.refused);
    return line;
}

std::string render_plan_text(const JobSpec& job, const PlanResult& plan, const PlanOptions& options, const Term& term) {
    const int world = options.gpus > 0 ? options.gpus : job.world_size();
    std::string out;
    out += bold(term, job.model.name) +
           fmt(" on %d × %s (%.0f GiB each), global batch %d, headroom %.0f%% (%s)\n", world, job.cluster.gpu.name.c_str(),
               job.cluster.gpu.memory_gib, job.training.global_batch, plan.headroom * 100, plan.headroom_source.c_str());
    out += dim(term, plan_framework_line(job, plan)) + "\n";
    const std::optional<ErrorBand> band = plan_error_band(job, plan, options);
    out += dim(term, plan_interval_line(job, band)) + "\n";
    if (plan.top.empty()) {
        out += "\n" + red(term, plan.refused == 0       ? std::string("no layout fits")
                                 : plan.any_framework ? std::string("no fitting layout runs on any framework")
                                                      : "no fitting layout exports to " + std::string(to_string(plan.framework))) +
               "\n";
    } else {
        out += "\n" + bold(term, fmt("top %zu %s by %s", plan.top.size(), plan.top.size() == 1 ? "layout" : "layouts",
                                      objective_title(options.objective))) + "\n";
        out += plan_table(job, plan.top, term, plan.any_framework);
        if (const std::string overlap = plan_overlap_line(band, plan); !overlap.empty())
            out += yellow(term, "within error: ") + overlap.substr(14) + "\n";
        if (const std::string depth = plan_depth_line(plan); !depth.empty()) out += dim(term, depth) + "\n";
        if (const std::string folded = plan_folded_line(plan); !folded.empty()) out += dim(term, folded) + "\n";
        if (const std::string mem = plan_memory_line(job, plan.top); !mem.empty()) out += dim(term, mem) + "\n";
        out += "\n" + bold(term, "Pareto front") + dim(term, " (no other fitting layout is both faster and has more headroom)") + "\n";
        out += plan_table(job, plan.pareto, term, plan.any_framework);
    }
    if (!plan.top.empty()) {
        const std::string blocked = exports_text(job, plan.top, "top") + exports_text(job, plan.pareto, "Pareto");
        out += "\n" + bold(term, "export: ") +
               (blocked.empty() ? std::string("every layout above exports to megatron, deepspeed, torchtitan, torchtitan-toml\n")
                                : std::string("every layout above exports to each format, except\n") + blocked);
    }
    if (!plan.why_best.empty()) out += "\n" + bold(term, "why: ") + plan.why_best + "\n";
    if (!plan.too_big.empty()) out += yellow(term, "too many GPUs: ") + plan.too_big + "\n";
    if (!job.has_layout())
        out += bold(term, "your layout: ") + "none chosen (the job has no [parallel] table); `ptd export --plan` exports the best\n";
    else if (plan.job_refused)  // planfw: it fits, but its framework's export cannot write it
        out += bold(term, "your layout: ") + "fits, but " + job_refusal_text(plan) + "\n";
    else if (plan.job_rank >= 0 && !plan.job_in_space)  // planfw: e.g. a sharding its framework runs as another
        out += bold(term, "your layout: ") +
               fmt("outside the search space (%s); %d of the %lld feasible layouts are faster\n", layout_label(job).c_str(),
                   plan.job_rank, (long long)plan.feasible);
    else if (plan.job_rank >= 0)
        out += bold(term, "your layout: ") + fmt("rank %d of %lld feasible (%s)\n", plan.job_rank + 1, (long long)plan.feasible,
                                                 layout_label(job).c_str());
    else
        out += bold(term, "your layout: ") +
               fmt("not ranked (it does not fit with %.0f%% of the GPU left free, or lies outside the search space; the why line says which)\n",
                   plan.headroom * 100);
    out += dim(term, fmt("searched %lld layouts, evaluated %lld (%lld schedules simulated), %lld fit%s, in %.2f s%s\n",
                         (long long)plan.enumerated, (long long)plan.evaluated, (long long)plan.simulated,
                         (long long)plan.feasible,
                         plan.refused > 0 ? fmt(" and run (%lld more fit but the export refuses them)", (long long)plan.refused).c_str() : "",
                         plan.seconds, plan.cancelled ? " (cancelled)" : ""));
    if (plan.equivalent_hidden > 0)
        out += dim(term, fmt("%lld fitting layouts with exactly the same predicted numbers as a listed one are not repeated\n",
                             (long long)plan.equivalent_hidden));
    return out;
}

nlohmann::json plan_json(const JobSpec& job, const PlanResult& plan, const PlanOptions& options) {
    nlohmann::json top = nlohmann::json::array(), pareto = nlohmann::json::array();
    const std::optional<ErrorBand> band = plan_error_band(job, plan, options);
    for (const PlanEntry& e : plan.top) top.push_back(entry_json(job, e, band, plan.any_framework));
    for (const PlanEntry& e : plan.pareto) pareto.push_back(entry_json(job, e, band, plan.any_framework));
    return {{"schema", "ptd.plan/1"},
            {"job", job.origin.file},
            {"model", job.model.name},
            {"gpus", options.gpus > 0 ? options.gpus : job.world_size()},
            {"gpu", job.cluster.gpu.name},
            {"global_batch", job.training.global_batch},
            {"headroom", plan.headroom},
            {"headroom_source", plan.headroom_source},
            {"framework", plan.any_framework ? "any" : to_string(plan.framework)},
            {"refused_by_framework", plan.refused},
            {"refused_why", plan.refused_why},
            {"job_refused", plan.job_refused},
            {"offload_within_error", plan.offload_within_error},
            {"interval", band ? band_json(speed_interval(*band, {})) : band_json(job_speed_interval(job, {}))},
            {"within_error_of_best", rows_within_error(band, plan)},
            {"objective", to_string(options.objective)},
            {"top", top},
            {"pareto", pareto},
            {"why_best", plan.why_best},
            {"too_big", plan.too_big},
            {"busy_gpus", plan.busy_gpus},
            {"job_has_layout", job.has_layout()},
            {"job_rank", plan.job_rank},
            {"job_in_space", plan.job_in_space},
            {"enumerated", plan.enumerated},
            {"evaluated", plan.evaluated},
            {"simulated", plan.simulated},
            {"feasible", plan.feasible},
            {"equivalent_hidden", plan.equivalent_hidden},
            {"folded", plan.folded},
            {"seconds", plan.seconds},
            {"cancelled", plan.cancelled}};
}

std::string folded_row_text(const std::string& who, const PlanEntry& e) {
    if (e.folded.empty()) return "";
    std::vector<FoldedVariant> depths;  // this row's TP overlap and replicas at other depths
    std::vector<int> replicas;          // hsdp: this row's TP overlap at other replica counts
    double replicas_slowest = e.score.tokens_per_s;
    const FoldedVariant* other_overlap = nullptr;  // the fastest with the other TP overlap
    for (const FoldedVariant& v : e.folded) {
        if (v.tp_comm_overlap != e.choice.tp_comm_overlap) {
            if (!other_overlap || v.tokens_per_s > other_overlap->tokens_per_s) other_overlap = &v;
        } else if (v.dp_replicate == e.choice.dp_replicate) {
            depths.push_back(v);
        } else {
            if (std::find(replicas.begin(), replicas.end(), v.dp_replicate) == replicas.end())
                replicas.push_back(v.dp_replicate);
            replicas_slowest = std::min(replicas_slowest, v.tokens_per_s);
        }
    }
    std::sort(replicas.begin(), replicas.end());
    const double best = e.score.tokens_per_s;
    auto slower = [best](double t) { return t > 0 ? (best / t - 1) * 100 : 0.0; };
    std::string s = who;
    std::string own;  // the row's own settings that its variants differ in, in brackets
    if (e.choice.vpp > 1 || !depths.empty()) own = fmt("vpp %d", e.choice.vpp);
    if (e.choice.dp_replicate > 1 || !replicas.empty())
        own += (own.empty() ? "" : ", ") + fmt("dp_replicate %d", e.choice.dp_replicate);
    if (!own.empty()) s += " (" + own + ")";
    std::vector<std::string> also;
    if (!depths.empty()) {
        double slowest = best;
        for (const FoldedVariant& v : depths) slowest = std::min(slowest, v.tokens_per_s);
        also.push_back(" also at vpp " + depth_ranges(depths) + fmt(", within %.1f%%", slower(slowest)));
    }
    if (!replicas.empty()) {
        std::string list;
        for (int r : replicas) list += (list.empty() ? "" : ", ") + std::to_string(r);
        also.push_back((also.empty() ? " also" : " and") + (" at dp_replicate " + list) +
                       fmt(", within %.1f%%", slower(replicas_slowest)));
    }
    if (other_overlap)
        also.push_back(std::string(e.choice.tp_comm_overlap ? " without" : " with") +
                       fmt(" TP overlap, %.1f%% slower", slower(other_overlap->tokens_per_s)) +
                       (other_overlap->vpp != e.choice.vpp ? fmt(" (at vpp %d)", other_overlap->vpp) : std::string()));
    for (size_t i = 0; i < also.size(); ++i) s += (i == 0 ? "" : ",") + also[i];
    return s;
}

}  // namespace ptd
