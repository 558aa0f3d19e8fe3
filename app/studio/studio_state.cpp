// studio_state.cpp — the job side of the view-model: fields, edits, derive + validate.
// The rank-layout view's geometry and input handling are in layout_model.cpp.
#include "studio_state.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "layout_view.h"
#include "ptd/plan/batch_choice.h"
#include "ptd/spec/stack_defaults.h"

namespace ptd::studio {

// ---- Fields ----------------------------------------------------------------------------

static const IntField kIntFields[] = {
    {"model.layers", "layers", "Transformer blocks", 1, 100000, [](JobSpec& j) -> int& { return j.model.layers; }},
    {"model.hidden", "hidden", "Model width h", 1, 1 << 20, [](JobSpec& j) -> int& { return j.model.hidden; }},
    {"model.heads", "heads", "Attention (query) heads", 1, 65536, [](JobSpec& j) -> int& { return j.model.heads; }},
    {"model.kv_heads", "kv_heads", "Key/value heads (GQA when fewer than heads)", 1, 65536,
     [](JobSpec& j) -> int& { return j.model.kv_heads; }},
    {"model.ffn_hidden", "ffn_hidden", "MLP inner width", 1, 1 << 23, [](JobSpec& j) -> int& { return j.model.ffn_hidden; }},
    {"model.vocab", "vocab", "Vocabulary size", 1, 1 << 28, [](JobSpec& j) -> int& { return j.model.vocab; }},
    {"model.seq_len", "seq_len", "Training sequence length", 1, 1 << 26, [](JobSpec& j) -> int& { return j.model.seq_len; }},
    {"cluster.nodes", "nodes", "Machines in the cluster", 1, 1 << 20, [](JobSpec& j) -> int& { return j.cluster.nodes; }},
    {"cluster.gpus_per_node", "gpus_per_node", "GPUs in each machine", 1, 1024,
     [](JobSpec& j) -> int& { return j.cluster.gpus_per_node; }},
    {"parallel.tp", "tp", "Tensor parallel: each layer's matrices split over tp GPUs", 1, 1 << 20,
     [](JobSpec& j) -> int& { return j.parallel.tp; }},
    {"parallel.pp", "pp", "Pipeline parallel: the layers split into pp stages", 1, 1 << 20,
     [](JobSpec& j) -> int& { return j.parallel.pp; }},
    {"parallel.dp", "dp", "Data parallel replicas (derived from the GPU count unless given)", 1, 1 << 24,
     [](JobSpec& j) -> int& { return j.parallel.dp; }},
    {"parallel.cp", "cp", "Context parallel: each sequence split over cp GPUs", 1, 1 << 20,
     [](JobSpec& j) -> int& { return j.parallel.cp; }},
    {"parallel.ep", "ep", "Expert parallel: the routed experts split over ep GPUs (divides dp x cp; MoE models)", 1,
     1 << 20, [](JobSpec& j) -> int& { return j.parallel.ep; }},
    {"parallel.expert_tp", "expert_tp", "Tensor parallel of the experts' matrices; 0 = the same as tp", 0, 1 << 20,
     [](JobSpec& j) -> int& { return j.parallel.expert_tp; }},
    {"parallel.vpp", "vpp", "Virtual pipeline chunks per stage (interleaved 1F1B)", 1, 1024,
     [](JobSpec& j) -> int& { return j.parallel.vpp; }},
    {"parallel.zero", "zero", "ZeRO stage 0..3", 0, 3, [](JobSpec& j) -> int& { return j.parallel.zero; }},
    {"parallel.dp_replicate", "dp_replicate",
     "Replicas of the sharded states (HSDP): they shard over dp / dp_replicate ranks, gradients all-reduced across", 1,
     1 << 20, [](JobSpec& j) -> int& { return j.parallel.dp_replicate; }},
    {"training.micro_batch", "micro_batch", "Sequences per micro-batch per replica", 1, 1 << 20,
     [](JobSpec& j) -> int& { return j.training.micro_batch; }},
    {"training.global_batch", "global_batch", "Sequences per step (micro_batch x dp unless given)", 1, 1 << 30,
     [](JobSpec& j) -> int& { return j.training.global_batch; }},
};

std::span<const IntField> int_fields() { return kIntFields; }

const IntField* find_int_field(std::string_view key) {
    for (const IntField& f : kIntFields)
        if (key == f.key) return &f;
    return nullptr;
}

static constexpr std::array<std::string_view, 12> kOtherPanelKeys = {
    "model.preset", "model", "cluster.gpu", "parallel.sequence_parallel", "parallel.recompute", "parallel.order",
    "training.precision",
    // job_file_model.h's fields
    "model.hf_config", "cluster.intra_gbps", "cluster.inter_gbps", "cluster.hosts", "parallel.distributed_optimizer"};

bool is_panel_key(std::string_view key) {
    if (find_int_field(key)) return true;
    return std::find(kOtherPanelKeys.begin(), kOtherPanelKeys.end(), key) != kOtherPanelKeys.end();
}

const char* colour_by_label(ColourBy c) {
    switch (c) {
        case ColourBy::tp: return "TP group";
        case ColourBy::pp: return "PP stage";
        case ColourBy::dp: return "DP replica";
        case ColourBy::cp: return "CP rank";
        case ColourBy::ep: return "EP group";
        case ColourBy::expert_tp: return "Expert TP group";
        case ColourBy::predicted_memory: return "Predicted memory";
        case ColourBy::live_memory: return "Live memory";
    }
    return "?";
}

// ---- State -----------------------------------------------------------------------------

StudioState make_state(PresetCatalog presets, JobSpec job) {
    StudioState s;
    s.presets = std::move(presets);
    s.job = std::move(job);
    s.original = s.job;
    s.job_label = job_display_name(s.job);
    recompute(s);
    launch_init(s);
    job_file_init(s);  // the job as given is the saved one
    return s;
}

void recompute(StudioState& s) {
    JobSpec& job = s.job;
    s.diagnostics.clear();
    s.layout.reset();
    ++s.revision;
    s.params = count_parameters(job.model);  // safe for any field values
    const ModelSpec* base = job.origin.model_base ? &*job.origin.model_base : s.presets.find_model(job.origin.model_preset);
    s.job_panel.model_edited = base && *base != job.model;

    // Range checks first: validate_job divides by the degrees, so they must be sane.
    for (const IntField& f : kIntFields) {
        if (std::string_view(f.key) == "parallel.dp" && !job.origin.dp_given) continue;
        if (std::string_view(f.key) == "training.global_batch" && !job.origin.global_batch_given) continue;
        const int v = f.ref(job);
        if (v < f.min || v > f.max)
            s.diagnostics.push_back({job.where(f.key), f.key,
                                     "got " + std::to_string(v) + "; allowed: " + std::to_string(f.min) + " .. " +
                                         std::to_string(f.max)});
    }
    if (!s.diagnostics.empty()) return;

    std::vector<Diagnostic> derived = derive_job_defaults(job);
    std::vector<Diagnostic> checked = validate_job(job);
    const bool dp_underivable = !derived.empty();
    s.diagnostics = std::move(derived);
    for (Diagnostic& d : checked) {
        // "tp·pp·dp·cp ≠ world" repeats "cannot derive dp" when dp was not given.
        if (dp_underivable && d.key == "parallel.dp") continue;
        s.diagnostics.push_back(std::move(d));
    }
    if (!s.diagnostics.empty()) return;
    // A bare job (no [parallel] table) is valid input for the planner but has no layout to
    // draw, estimate or launch until one is chosen: no_layout_message() says so.
    if (!job.has_layout()) return;
    choose_unwritten_batching(job);  // batchchoice: as the loader does, after every edit

    const long long world = (long long)job.parallel.tp * job.parallel.pp * job.parallel.dp * job.parallel.cp;
    if (world > kMaxStudioRanks) {
        s.diagnostics.push_back({job.where("cluster.nodes"), "cluster.nodes",
                                 std::to_string(world) + " ranks is more than the studio lays out; allowed: at most " +
                                     std::to_string(kMaxStudioRanks) + " ranks"});
        return;
    }
    auto layout = job_layout(job);
    if (!layout) {
        s.diagnostics = layout.error().diagnostics;
        return;
    }
    s.layout = std::move(*layout);
    const int w = s.layout->world;
    if (s.view.hover >= w) s.view.hover = -1;
    if (s.view.pinned >= w) s.view.pinned = -1;
    layout_resize(s, s.view.canvas_w, s.view.canvas_h);  // re-clamp the pan
}

bool edit_int(StudioState& s, std::string_view key, int value) {
    const IntField* f = find_int_field(key);
    if (!f) return false;
    f->ref(s.job) = value;
    if (key.starts_with("parallel.")) s.job.origin.no_layout = false;  // the user is choosing the layout
    if (key == "parallel.dp") s.job.origin.dp_given = true;
    if (key == "training.global_batch") s.job.origin.global_batch_given = true;
    if (key == "training.micro_batch") s.job.origin.micro_batch_given = true;  // batchchoice
    if (key == "parallel.vpp") s.job.origin.vpp_given = true;
    recompute(s);
    return true;
}

bool edit_cost_input(StudioState& s, std::string_view key, double value) {
    if (!std::isfinite(value) || value < 0) return false;
    if (key == "training.tokens") s.job.training.tokens = value;
    else if (key == "cluster.gpu_hour_usd") s.job.cluster.gpu_hour_usd = value;
    else return false;
    recompute(s);
    return true;
}

bool set_model_preset(StudioState& s, std::string_view name) {
    const ModelSpec* m = s.presets.find_model(name);
    if (!m) return false;
    s.job.model = *m;
    s.job.origin.model_preset = m->name;
    s.job.origin.model_hf_config.clear();
    s.job.origin.model_base = *m;
    recompute(s);
    return true;
}

bool set_gpu_preset(StudioState& s, std::string_view name) {
    const GpuSpec* g = s.presets.find_gpu(name);
    if (!g) return false;
    s.job.cluster.gpu = *g;
    s.job.origin.gpu_preset = g->name;
    s.job.origin.gpu_base = *g;
    recompute(s);
    return true;
}

void set_recompute(StudioState& s, Recompute r) {
    s.job.parallel.recompute = r;
    s.job.origin.recipe_keys_written |= kRecipeRecompute;  // chosen now, not the performance recipe's
    s.job.origin.no_layout = false;
    recompute(s);
}

void set_precision(StudioState& s, Precision p) {
    s.job.training.precision = p;
    s.job.origin.precision_defaulted = false;  // chosen now; no longer follows the GPU
    recompute(s);
}

void set_sequence_parallel(StudioState& s, bool on) {
    s.job.parallel.sequence_parallel = on;
    s.job.origin.stack_keys_written |= stack_key_bit(StackKey::sequence_parallel);  // chosen now, not the stack's
    s.job.origin.no_layout = false;
    recompute(s);
}

void set_order(StudioState& s, std::string order) {
    s.job.parallel.order = std::move(order);
    s.job.origin.no_layout = false;
    recompute(s);
}

bool is_derived(const StudioState& s, std::string_view key) {
    if (key == "parallel.dp") return !s.job.origin.dp_given;
    if (key == "training.global_batch") return !s.job.origin.global_batch_given;
    if (key == "training.micro_batch") return !s.job.origin.micro_batch_given;  // batchchoice: chosen
    return false;
}

bool set_derived(StudioState& s, std::string_view key, bool derived) {
    if (key == "parallel.dp") s.job.origin.dp_given = !derived, s.job.origin.no_layout = false;
    else if (key == "training.global_batch") s.job.origin.global_batch_given = !derived;
    else if (key == "training.micro_batch") s.job.origin.micro_batch_given = !derived;  // batchchoice
    else return false;
    recompute(s);
    return true;
}

void revert(StudioState& s) {
    s.job = s.original;
    recompute(s);
}

bool job_valid(const StudioState& s) { return s.diagnostics.empty() && s.layout.has_value(); }

std::string no_layout_message(const StudioState& s) {
    if (!s.diagnostics.empty() || s.job.has_layout()) return {};
    std::string m = "no layout chosen \u2014 run the planner";
    if (s.job.training.global_batch < 1) m += " (after setting training.global_batch, which the job does not give)";
    return m;
}

std::vector<std::string> field_errors(const StudioState& s, std::string_view key) {
    std::vector<std::string> out;
    for (const Diagnostic& d : s.diagnostics)
        if (d.key == key) out.push_back(d.message);
    return out;
}

std::string field_error(const StudioState& s, std::string_view key) {
    for (const Diagnostic& d : s.diagnostics)
        if (d.key == key) return d.message;
    return {};
}

std::vector<const Diagnostic*> unplaced_diagnostics(const StudioState& s) {
    std::vector<const Diagnostic*> out;
    for (const Diagnostic& d : s.diagnostics)
        if (!is_panel_key(d.key)) out.push_back(&d);
    return out;
}

// ---- Summary ---------------------------------------------------------------------------

JobSummary job_summary(const StudioState& s) {
    JobSummary r;
    r.parameters = s.params.total;
    r.world = s.job.world_size();
    r.dp = s.job.parallel.dp;
    const long long per_step = (long long)s.job.training.micro_batch * s.job.parallel.dp;
    r.grad_accum = per_step > 0 ? (int)(s.job.training.global_batch / per_step) : 0;
    r.tokens_per_step = (int64_t)s.job.training.global_batch * s.job.model.seq_len;
    return r;
}

StackDefaultsView stack_defaults_view(const StudioState& s) {
    return {stack_label(s.job), s.job.origin.stack_defaults};
}

std::string job_display_name(const JobSpec& job) {
    const std::string& f = job.origin.file;
    if (f.empty()) return "<unnamed>";
    const auto slash = f.find_last_of('/');
    return slash == std::string::npos ? f : f.substr(slash + 1);
}

const char* main_tab_name(MainTab t) {
    switch (t) {
        case MainTab::layout: return "layout";
        case MainTab::memory: return "memory";
        case MainTab::planner: return "planner";
        case MainTab::launch: return "launch";
        case MainTab::live: return "live";
        case MainTab::job_file: return "job";
        case MainTab::schedule: return "schedule";
        case MainTab::compare: return "compare";
    }
    return "layout";
}

std::optional<MainTab> parse_main_tab(std::string_view name) {
    for (MainTab t : {MainTab::layout, MainTab::memory, MainTab::planner, MainTab::launch, MainTab::live, MainTab::job_file, MainTab::schedule,
                      MainTab::compare})
        if (name == main_tab_name(t)) return t;
    return std::nullopt;
}

bool studio_tick(StudioState& s) {
    bool changed = false;
    changed |= launch_tick(s);  // each background activity adds its tick here
    changed |= live_tick(s);    // a followed run directory
    changed |= planner_tick(s); // the planner's background search
    return changed;
}

double studio_wakeup_s(const StudioState& s) {
    if (launch_running(s)) return 0.1;  // launcher events arrive on other threads
    if (s.live.run.live) return 0.1;    // a followed run directory grows
    if (planner_running(s)) return 0.05;  // planner progress
    return 0;
}

}  // namespace ptd::studio
