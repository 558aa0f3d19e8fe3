// commands.cpp — validate, layout, presets, estimate, plan and export.
#include "commands.h"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "cmd_launch.h"
#include "compare_view.h"
#include "estimate_view.h"
#include "ptd/model/estimate.h"
#include "ptd/spec/cluster_profile.h"
#include "ptd/spec/job_overrides.h"
#include "ptd/model/model_stats.h"
#include "ptd/plan/planner.h"

namespace ptd {

Result<JobSpec> load_job_arg(const std::string& arg, const PresetCatalog& presets,
                             const std::vector<std::string>& overrides) {
    if (arg == "@default") return apply_overrides(default_job(presets), overrides, presets);
    if (arg == "@tiny") return apply_overrides(tiny_local_job(presets), overrides, presets);
    return load_job_file_with_overrides(arg, overrides, presets);
}

static nlohmann::json diagnostics_json(const Error& e) {
    nlohmann::json arr = nlohmann::json::array();
    for (const Diagnostic& d : e.diagnostics)
        arr.push_back({{"file", d.where.file},
                       {"line", d.where.line},
                       {"column", d.where.column},
                       {"key", d.key},
                       {"message", d.message}});
    return arr;
}

static void print_error(FILE* err, const Error& e) {
    Term t = detect_term(err);
    for (const Diagnostic& d : e.diagnostics) {
        std::string line = format_diagnostic(d);
        // Colour the "error:" word on a TTY.
        if (auto pos = line.find("error: "); t.color && pos != std::string::npos)
            line = line.substr(0, pos) + red(t, "error:") + line.substr(pos + 6);
        std::fprintf(err, "%s\n", line.c_str());
    }
}

// load_job_arg for a subcommand that needs the job: nullopt when it does not load, its
// diagnostics then printed to `err`.
static std::optional<JobSpec> load_job_or_report(const std::string& arg, const PresetCatalog& presets,
                                                 const std::vector<std::string>& overrides, FILE* err) {
    auto job = load_job_arg(arg, presets, overrides);
    if (!job) {
        print_error(err, job.error());
        return std::nullopt;
    }
    return std::move(*job);
}

// The job's cluster profile (--profile, else cluster.profile) for estimate and plan:
// false when one is named but cannot be used (the error then printed to `err`).
static bool load_profile_or_report(const JobSpec& job, const std::string& override_path, std::optional<JobProfile>& out,
                                   FILE* err) {
    auto p = load_job_profile(job, override_path);
    if (!p) {
        print_error(err, p.error());
        return false;
    }
    out = std::move(*p);
    return true;
}

// What an estimate or plan says about the profile it was given: which figures it holds and
// whether the time model took them (`used`; else `why_not`).
static std::string profile_text(const JobProfile& jp, bool used, const std::string& why_not) {
    std::string t = profile_note(jp) + "\n";
    t += used ? "  the time figures above come from it (the bundled engine op by op, docs/estimators.md):\n"
              : "  not used for the time figures: " + why_not + "; it holds:\n";
    for (const std::string& l : profile_figures(jp.profile)) t += "    " + l + "\n";
    return t;
}
static nlohmann::json profile_json(const JobProfile& jp, bool used) {
    nlohmann::json hosts = nlohmann::json::array();
    for (const ProfileHost& h : jp.profile.hosts) hosts.push_back(h.name);
    return {{"path", jp.path}, {"source", jp.source}, {"measured_at", jp.profile.measured_at}, {"hosts", hosts},
            {"used_by_time_model", used}, {"figures", profile_figures(jp.profile)}};
}

// The planner's layouts for `job` (default options), for a subcommand that needs the best
// one: nullopt when the planner fails or none fits, the error then printed to `err` — for
// none, at `key`, as `none_before` + the planner's reason + `none_after`.
static std::optional<PlanResult> plan_or_report(const JobSpec& job, FILE* err, const char* key,
                                                const std::string& none_before, const std::string& none_after) {
    auto plan = plan_layouts(job, PlanOptions{});
    if (!plan) {
        print_error(err, plan.error());
        return std::nullopt;
    }
    if (plan->top.empty()) {
        print_error(err, Error(Diagnostic{SourceLoc{job.origin.file}, key, none_before + plan->why_best + none_after}));
        return std::nullopt;
    }
    return std::move(*plan);
}

int cmd_validate(const ValidateArgs& a, const PresetCatalog& presets, FILE* out, FILE* err) {
    int rc = kExitOk;
    nlohmann::json results = nlohmann::json::array();
    Term term = detect_term(out);
    for (const std::string& path : a.jobs) {
        auto job = load_job_arg(path, presets, a.sets);
        if (a.json) {
            nlohmann::json r = {{"file", path}, {"valid", (bool)job}};
            if (job) {
                r["job"] = job_json(*job);
                r["notes"] = job->origin.notes;
                // bits: valid for PTD, refused by the framework the job names.
                if (auto refused = runs_megatron_core(job->training.framework) ? megatron_interleaved_refusal(*job) : std::nullopt)
                    r["warnings"] = diagnostics_json(Error(*refused));
            }
            else r["errors"] = diagnostics_json(job.error());
            results.push_back(std::move(r));
        } else if (job) {
            if (a.print) {
                std::fprintf(out, "%s", save_job_toml(*job).c_str());
            } else {
                std::fprintf(out, "%s %s\n", green(term, "valid:").c_str(), path.c_str());
                std::fprintf(out, "%s", job_summary_text(*job, term).c_str());
            }
            Term err_term = detect_term(err);
            if (!job->has_layout())
                std::fprintf(err, "%s: %s no layout chosen (no [parallel] table): `ptd plan %s` searches one%s\n",
                             path.c_str(), yellow(err_term, "note:").c_str(), path.c_str(),
                             job->training.global_batch < 1 ? "; it needs training.global_batch, which is not given" : "");
            for (const std::string& note : job->origin.notes)
                std::fprintf(err, "%s: %s %s\n", path.c_str(), yellow(err_term, "note:").c_str(), note.c_str());
            // bits: valid for PTD, refused by the framework the job names (training.framework).
            if (auto refused = runs_megatron_core(job->training.framework) ? megatron_interleaved_refusal(*job) : std::nullopt)
                std::fprintf(err, "%s%s: %s %s: Megatron-LM would refuse this layout: %s\n", path.c_str(),
                             refused->where.line > 0 ? (":" + std::to_string(refused->where.line)).c_str() : "",
                             yellow(err_term, "warning:").c_str(), refused->key.c_str(), refused->message.c_str());
        } else {
            print_error(err, job.error());
            std::fprintf(err, "%s: %zu problem%s\n", path.c_str(), job.error().diagnostics.size(),
                         job.error().diagnostics.size() == 1 ? "" : "s");
        }
        if (!job) rc = kExitConfig;
    }
    if (a.json) {
        nlohmann::json doc = {{"schema", "ptd.validate/1"}, {"results", results}};
        std::fprintf(out, "%s\n", doc.dump(2).c_str());
    }
    return rc;
}

int cmd_layout(const LayoutArgs& a, const PresetCatalog& presets, FILE* out, FILE* err) {
    std::optional<JobSpec> job = load_job_or_report(a.job, presets, a.sets, err);
    if (!job) return kExitConfig;
    if (auto no_layout = require_layout(*job, "`ptd layout`"); !no_layout.empty()) {
        print_error(err, Error(std::move(no_layout)));
        return kExitConfig;
    }
    auto hosts = resolve_hosts(*job, a.hosts);
    if (!hosts) {
        print_error(err, hosts.error());
        return kExitConfig;
    }
    auto layout = job_layout(*job);
    if (!layout) {
        print_error(err, layout.error());
        return kExitConfig;
    }
    if (a.json) {
        std::fprintf(out, "%s\n", layout_json(*job, *layout, *hosts).dump().c_str());
        return kExitOk;
    }
    Term term = detect_term(out);
    LayoutViewOptions opt;
    opt.color_by = a.color_by;
    opt.max_nodes = a.all ? 0 : 16;
    std::fprintf(out, "%s\n%s", job_summary_text(*job, term).c_str(),
                 render_layout_text(*job, *layout, *hosts, opt, term).c_str());
    return kExitOk;
}

// The cluster preset a job naming GPU preset `gpu` gets without `cluster.preset`, or "" when
// none uses it (the job then gets the generic network the estimate flags).
static std::string default_cluster_name(const PresetCatalog& presets, const std::string& gpu) {
    const ClusterPreset* c = presets.default_cluster_for_gpu(gpu);
    return c ? c->name : std::string();
}

// Width of the longest name in `items` (each with a .name), at least `floor`: the text
// tables' first column fits every preset name.
template <class T>
static int name_width(const std::vector<T>& items, int floor) {
    int w = floor;
    for (const T& item : items) w = std::max(w, static_cast<int>(item.name.size()));
    return w;
}

int cmd_presets(const PresetsArgs& a, const PresetCatalog& presets, FILE* out, FILE* err) {
    if (a.json) {
        nlohmann::json models = nlohmann::json::array(), gpus = nlohmann::json::array(), clusters = nlohmann::json::array();
        for (const ModelSpec& m : presets.models) {
            ParamCounts pc = count_parameters(m);
            models.push_back({{"name", m.name}, {"arch", to_string(m.arch)}, {"layers", m.layers},
                              {"hidden", m.hidden}, {"heads", m.heads}, {"kv_heads", m.kv_heads},
                              {"ffn_hidden", m.ffn_hidden}, {"vocab", m.vocab}, {"seq_len", m.seq_len},
                              {"experts", m.experts}, {"top_k", m.top_k}, {"parameters", pc.total}});
            add_model_shape_json(models.back(), m);  // mlaio
        }
        for (const GpuSpec& g : presets.gpus) {
            std::string cluster = default_cluster_name(presets, g.name);
            gpus.push_back({{"name", g.name}, {"description", g.description}, {"memory_gib", g.memory_gib},
                            {"fp32_tflops", g.fp32_tflops}, {"tf32_tflops", g.tf32_tflops},
                            {"bf16_tflops", g.bf16_tflops}, {"fp16_tflops", g.fp16_tflops},
                            {"fp8_tflops", g.fp8_tflops}, {"hbm_gbps", g.hbm_gbps}, {"link_gbps", g.link_gbps},
                            {"link", to_string(g.link)},
                            {"default_cluster", cluster.empty() ? nlohmann::json(nullptr) : nlohmann::json(cluster)}});
        }
        for (const ClusterPreset& c : presets.clusters)
            clusters.push_back({{"name", c.name}, {"description", c.description}, {"gpu", c.gpu},
                                {"gpus_per_node", c.gpus_per_node}, {"nics_per_node", c.nics_per_node},
                                {"nic_gbps", c.nic_gbps}, {"rail_optimized", c.rail_optimized}, {"nvls", c.nvls},
                                {"intra_gbps", c.intra_gbps}, {"nvlink_domain", c.nvlink_domain > 0 ? c.nvlink_domain : c.gpus_per_node},
                                {"host_memory_gib", c.host_memory_gib}, {"pcie_gbps", c.pcie_gbps}});
        nlohmann::json doc = {{"schema", "ptd.presets/1"}, {"origin", presets.origin}, {"models", models},
                              {"gpus", gpus}, {"clusters", clusters}};
        std::fprintf(out, "%s\n", doc.dump(2).c_str());
        return kExitOk;
    }
    Term t = detect_term(out);
    std::fprintf(out, "%s %s\n\n", bold(t, "presets from").c_str(), presets.origin.c_str());
    std::fprintf(out, "%s\n", bold(t, "models    name            arch   params  layers  hidden  heads  kv  ffn     vocab    seq").c_str());
    for (const ModelSpec& m : presets.models) {
        ParamCounts pc = count_parameters(m);
        std::fprintf(out, "          %-15s %-6s %6.2fB %6d %7d %6d %3d %6d %8d %6d%s\n", m.name.c_str(),
                     to_string(m.arch), pc.total / 1e9, m.layers, m.hidden, m.heads, m.kv_heads, m.ffn_hidden,
                     m.vocab, m.seq_len,
                     (std::string(m.experts > 1 ? " MoE " + std::to_string(m.experts) + "×top-" + std::to_string(m.top_k) : "") +
                      (model_shape_details(m).empty() ? "" : (m.experts > 1 ? "; " : " ") + model_shape_details(m)))  // mlaio
                         .c_str());
    }
    // GPUs: dense peaks in TFLOP/s, bandwidths in GB/s one direction; "default cluster" is the
    // network a job naming only the GPU gets (generic: one 200 Gb/s NIC per GPU, which the
    // estimate flags; one machine: loopback between processes, no NICs).
    const int gw = name_width(presets.gpus, 4);
    const int cw = name_width(presets.clusters, 15);
    int kw = 9;  // "link kind"
    for (const GpuSpec& g : presets.gpus) kw = std::max(kw, static_cast<int>(std::string_view(to_string(g.link)).size()));
    std::fprintf(out, "\n%s\n", bold(t, fmt("gpus      %-*s   memory    fp32    tf32    bf16    fp16     fp8    HBM  link  %-*s  %-*s  description",
                                                  gw, "name", kw, "link kind", cw, "default cluster")).c_str());
    std::fprintf(out, "          %*s             ---------- dense TFLOP/s ----------   GB/s  GB/s\n", gw, "");
    for (const GpuSpec& g : presets.gpus) {
        std::string cluster = default_cluster_name(presets, g.name);
        std::fprintf(out, "          %-*s %5.0f GiB %7.1f %7.1f %7.1f %7.1f %7.1f %6.0f %5.0f  %-*s  %-*s  %s\n", gw, g.name.c_str(),
                     g.memory_gib, g.fp32_tflops, g.tf32_tflops, g.bf16_tflops, g.fp16_tflops, g.fp8_tflops,
                     g.hbm_gbps, g.link_gbps, kw, to_string(g.link), cw, !cluster.empty() ? cluster.c_str() : g.link == GpuLink::loopback ? "one machine" : "generic",
                     g.description.c_str());
    }
    // Clusters: what `cluster.preset = "NAME"` gives a job (any key the job writes wins).
    std::fprintf(out, "\n%s\n", bold(t, fmt("clusters  %-*s  %-*s  GPUs/node  NICs per node     rail  NVLS  link GB/s  NVLink domain",
                                                  cw, "name", gw, "gpu")).c_str());
    for (const ClusterPreset& c : presets.clusters) {
        std::string nics = fmt("%d × %g Gb/s", c.nics_per_node, c.nic_gbps);
        std::fprintf(out, "          %-*s  %-*s  %9d  %s  %-4s  %-4s  %9.0f  %13d\n", cw, c.name.c_str(), gw,
                     c.gpu.c_str(), c.gpus_per_node, pad_right(nics, 16).c_str(), c.rail_optimized ? "yes" : "no", c.nvls ? "yes" : "no",
                     c.intra_gbps, c.nvlink_domain > 0 ? c.nvlink_domain : c.gpus_per_node);
    }
    return kExitOk;
}

static void print_notes(FILE* err, const std::string& who, const std::vector<std::string>& notes) {
    Term t = detect_term(err);
    for (const std::string& note : notes)
        std::fprintf(err, "%s: %s %s\n", who.c_str(), yellow(t, "note:").c_str(), note.c_str());
}

// `ptd estimate A B`: each job as `ptd estimate` reads it alone (--set and --profile apply
// to both), then the two side by side. A job without a layout cannot be compared: which
// layout the planner picks is `ptd plan`'s question.
static int cmd_estimate_compare(const EstimateArgs& a, const PresetCatalog& presets, FILE* out, FILE* err) {
    std::vector<CompareSide> sides;
    for (const std::string& arg : {a.job, a.compare}) {
        std::optional<JobSpec> job = load_job_or_report(arg, presets, a.sets, err);
        if (!job) return kExitConfig;
        if (!job->has_layout()) {
            std::fprintf(err, "ptd estimate: error: %s has no [parallel] table, so no layout to compare; allowed: jobs "
                              "that name a layout (`ptd plan` chooses one)\n",
                         quote_input(arg).c_str());
            return kExitConfig;
        }
        std::optional<JobProfile> profile;
        if (!load_profile_or_report(*job, a.profile, profile, err)) return kExitConfig;
        const Estimate est = estimate_job(*job, profile ? &profile->profile : nullptr);
        print_notes(err, arg, job->origin.notes);
        sides.push_back({arg, std::move(*job), est});
    }
    if (a.json) std::fprintf(out, "%s\n", compare_json(sides[0], sides[1]).dump(2).c_str());
    else std::fprintf(out, "%s", render_compare_text(sides[0], sides[1], detect_term(out)).c_str());
    return kExitOk;
}

// The keys besides the layout that apply_plan_entry sets from the planner's choice, as the
// job file would write them (they leave the stack-defaults list the estimate prints).
static std::string planned_keys_text(const JobSpec& job) {
    const ParallelSpec& p = job.parallel;
    auto b = [](bool v) { return v ? "true" : "false"; };
    return fmt("distributed_optimizer = %s, zero = %d, overlap_grad_reduce = %s, overlap_param_gather = %s, "
               "tp_comm_overlap = %s, recompute = \"%s\"",
               b(p.distributed_optimizer), p.zero, b(p.overlap_grad_reduce), b(p.overlap_param_gather), b(p.tp_comm_overlap),
               to_string(p.recompute));
}

int cmd_estimate(const EstimateArgs& a, const PresetCatalog& presets, FILE* out, FILE* err) {
    if (!a.compare.empty()) return cmd_estimate_compare(a, presets, out, err);
    std::optional<JobSpec> job = load_job_or_report(a.job, presets, a.sets, err);
    if (!job) return kExitConfig;
    // A job without a layout (no [parallel] table) is estimated at the planner's best
    // layout, and says so: the user never wrote tp = pp = 1, dp = world.
    std::string chosen_by_planner;
    if (!job->has_layout()) {
        const std::optional<PlanResult> plan =
            plan_or_report(*job, err, "parallel",
                           "no layout chosen (the job has no [parallel] table), and the planner finds none that fits: ", "");
        if (!plan) return kExitConfig;
        *job = apply_plan_entry(*job, plan->top.front());
        // planfw: estimated with the headroom the planner left, so "usable" reads the same.
        job->estimate.headroom = plan->headroom;
        chosen_by_planner = "no layout chosen in the job (no [parallel] table): estimating the planner's best for " +
                            std::string(to_string(job->training.framework)) + ", " + layout_label(*job) + " micro-batch " +
                            std::to_string(job->training.micro_batch) + fmt(", leaving %.0f%% of GPU memory free (", plan->headroom * 100) +
                            plan->headroom_source + "), with " + planned_keys_text(*job) + "; `ptd plan " + a.job +
                            "` lists the alternatives";
        if (!plan->too_big.empty()) chosen_by_planner += "; " + plan->too_big;
    }
    std::optional<JobProfile> profile;
    if (!load_profile_or_report(*job, a.profile, profile, err)) return kExitConfig;
    const Estimate est = estimate_job(*job, profile ? &profile->profile : nullptr);
    if (a.json) {
        nlohmann::json doc = estimate_json(*job, est);
        doc["layout_source"] = chosen_by_planner.empty() ? "job" : "planner";
        if (profile) doc["profile"] = profile_json(*profile, profile_unused_reason(*job).empty());
        std::fprintf(out, "%s\n", doc.dump(2).c_str());
        return kExitOk;
    }
    print_notes(err, a.job, job->origin.notes);
    if (!chosen_by_planner.empty()) print_notes(err, a.job, {chosen_by_planner});
    std::fprintf(out, "%s", render_estimate_text(*job, est, detect_term(out)).c_str());
    if (profile) std::fprintf(out, "\n%s", profile_text(*profile, profile_unused_reason(*job).empty(), profile_unused_reason(*job)).c_str());
    return kExitOk;  // an OOM is an answer, not a failure: the table marks it
}

int cmd_plan(const PlanArgs& a, const PresetCatalog& presets, FILE* out, FILE* err) {
    std::optional<JobSpec> job = load_job_or_report(a.job, presets, a.sets, err);
    if (!job) return kExitConfig;
    PlanOptions opt;
    opt.top_k = a.top;
    opt.gpus = a.gpus;
    opt.headroom = a.headroom;
    opt.tp_beyond_node = a.tp_beyond_node;
    opt.any_framework = a.any_framework;  // planfw
    opt.try_zb_h1 = a.try_zb_h1, opt.try_dualpipe = a.try_dualpipe;  // zb
    opt.exhaustive = a.exhaustive;
    opt.threads = a.threads;
    opt.fold = !a.unfold;
    for (PlanObjective o : {PlanObjective::throughput, PlanObjective::time, PlanObjective::cost, PlanObjective::energy})
        if (a.objective == to_string(o)) opt.objective = o;  // cost: the CLI checked the word
    std::optional<JobProfile> profile;
    if (!load_profile_or_report(*job, a.profile, profile, err)) return kExitConfig;
    if (profile) opt.profile = &profile->profile;
    auto plan = plan_layouts(*job, opt);
    if (!plan) {
        print_error(err, plan.error());
        return kExitConfig;
    }
    if (a.json) {
        nlohmann::json doc = plan_json(*job, *plan, opt);
        if (profile) doc["profile"] = profile_json(*profile, profile_unused_reason(*job).empty());
        std::fprintf(out, "%s\n", doc.dump(2).c_str());
        return kExitOk;
    }
    print_notes(err, a.job, job->origin.notes);
    std::fprintf(out, "%s", render_plan_text(*job, *plan, opt, detect_term(out)).c_str());
    if (profile) std::fprintf(out, "\n%s", profile_text(*profile, profile_unused_reason(*job).empty(), profile_unused_reason(*job)).c_str());
    return kExitOk;
}

int cmd_export(const ExportArgs& a, const PresetCatalog& presets, FILE* out, FILE* err) {
    std::optional<JobSpec> job = load_job_or_report(a.job, presets, a.sets, err);
    if (!job) return kExitConfig;
    JobSpec chosen = *job;
    std::string plan_fallback;  // with --plan: what to say when the best layout cannot be written
    if (!a.plan) {
        if (auto no_layout = require_layout(*job, "`ptd export` (without --plan)"); !no_layout.empty()) {
            print_error(err, Error(std::move(no_layout)));
            return kExitConfig;
        }
    }
    if (a.plan) {
        const std::optional<PlanResult> plan =
            plan_or_report(*job, err, "", "--plan: no layout of this model fits on the cluster (", "); nothing to export");
        if (!plan) return kExitConfig;
        chosen = apply_plan_entry(*job, plan->top.front());
        for (size_t i = 1; i < plan->top.size() && plan_fallback.empty() && a.k8s_form.empty(); ++i) {
            const JobSpec other = apply_plan_entry(*job, plan->top[i]);
            if (export_job(other, a.format)) {
                const ParallelSpec& q = other.parallel;
                plan_fallback = "--plan: the planner's best layout cannot be written as --format " +
                                std::string(to_string(a.format)) + " (the key is named below); the best one that can is rank " +
                                std::to_string(i + 1) + " of `ptd plan`: " + layout_label(other) +
                                ", zero " + std::to_string(q.zero) + (q.distributed_optimizer ? " + distributed optimizer" : "") +
                                ", recompute " + to_string(q.recompute) + ", micro-batch " +
                                std::to_string(other.training.micro_batch) + "; set those keys with --set to export it";
            }
        }
        if (plan_fallback.empty())
            plan_fallback = "--plan: no layout the planner lists can be written as --format " + std::string(to_string(a.format));
        print_notes(err, a.job, {"--plan: exporting the planner's best layout " +
                                 layout_label(chosen) + ", micro-batch " +
                                 std::to_string(chosen.training.micro_batch) + " (" + plan->why_best + ")"});
    }
    if (!a.k8s_form.empty()) return export_k8s(chosen, {a.k8s_form == "trainjob", a.image, a.run_root, a.run_id}, out, err);
    auto exported = a.launcher ? export_launch(chosen, a.format, *a.launcher) : export_job(chosen, a.format);
    if (!exported) {
        if (a.plan) print_notes(err, a.job, {plan_fallback});
        print_error(err, exported.error());
        return kExitConfig;
    }
    std::fprintf(out, "%s", exported->text.c_str());
    std::fflush(out);  // the whole export before its notes when both go to one file
    print_notes(err, a.job, exported->notes);
    return kExitOk;
}

int print_job_overview(const JobSpec& job, FILE* out, FILE* err) {
    Term term = detect_term(out);
    if (!job.has_layout()) {
        std::fprintf(out, "%s\nno layout chosen (no [parallel] table): run `ptd plan %s`\n", job_summary_text(job, term).c_str(),
                     job.origin.file.c_str());
        return kExitOk;
    }
    auto hosts = resolve_hosts(job);
    auto layout = job_layout(job);
    if (!layout || !hosts) {
        print_error(err, layout ? hosts.error() : layout.error());
        return kExitConfig;
    }
    LayoutViewOptions opt;
    opt.color_by = ColorBy::pp;
    std::fprintf(out, "%s\n%s\n%s", job_summary_text(job, term).c_str(),
                 render_layout_text(job, *layout, *hosts, opt, term).c_str(),
                 render_estimate_text(job, estimate_job(job), term).c_str());
    return kExitOk;
}

}  // namespace ptd
