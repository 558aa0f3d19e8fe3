// panel_job.cpp — the job panel (left side): model, cluster, parallel and training
// fields, each with its validation message in red underneath, and a summary footer.
#include <cfloat>
#include <cstdio>

#include "ui.h"  // before imgui_stdlib.h, which needs imgui.h

#include <imgui_stdlib.h>

namespace ptd::studio::ui {
namespace {

constexpr float kLabelCol = 112;

void row_label(const char* label, const char* help) {
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted(label);
    if (help && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", help);
    ImGui::SameLine(kLabelCol);
}

// Red frame around an input whose field has a problem.
struct InvalidFrame {
    bool on;
    explicit InvalidFrame(bool bad) : on(bad) {
        if (!on) return;
        ImGui::PushStyleColor(ImGuiCol_FrameBg, IM_COL32(82, 34, 38, 255));
        ImGui::PushStyleColor(ImGuiCol_Border, colour::error);
        ImGui::PushStyleVar(ImGuiStyleVar_FrameBorderSize, 1.0f);
    }
    ~InvalidFrame() {
        if (!on) return;
        ImGui::PopStyleVar();
        ImGui::PopStyleColor(2);
    }
};

void errors_under(const StudioState& s, std::string_view key) {
    for (const std::string& m : field_errors(s, key)) {
        ImGui::Indent(kLabelCol);
        text_wrapped_coloured(colour::error, m);
        ImGui::Unindent(kLabelCol);
    }
}

void int_row(StudioState& s, const IntField& f) {
    const std::string_view key = f.key;
    const bool derivable = key == "parallel.dp" || key == "training.global_batch";
    ImGui::PushID(f.key);
    row_label(f.label, f.help);
    int v = f.ref(s.job);
    {
        InvalidFrame frame(!field_error(s, key).empty());
        ImGui::SetNextItemWidth(derivable ? -ImGui::GetFrameHeight() - ImGui::CalcTextSize("auto").x - 14 : -FLT_MIN);
        if (ImGui::InputInt("##v", &v, 1, 10)) edit_int(s, key, v);
    }
    if (derivable) {
        ImGui::SameLine();
        bool derived = is_derived(s, key);
        if (ImGui::Checkbox("auto", &derived)) set_derived(s, key, derived);
        if (ImGui::IsItemHovered())
            ImGui::SetTooltip(key == "parallel.dp" ? "Derive dp from the GPU count: world / (tp x pp x cp)"
                                                   : "Derive global_batch as micro_batch x dp");
    }
    ImGui::PopID();
    errors_under(s, key);
}

void int_rows(StudioState& s, std::string_view table) {
    for (const IntField& f : int_fields())
        if (std::string_view(f.key).starts_with(table)) int_row(s, f);
}

template <class E>
void enum_combo(StudioState& s, const char* id, const char* key, E current, std::initializer_list<E> values,
                void (*set)(StudioState&, E)) {
    InvalidFrame frame(!field_error(s, key).empty());
    ImGui::SetNextItemWidth(-FLT_MIN);
    if (ImGui::BeginCombo(id, to_string(current))) {
        for (E v : values)
            if (ImGui::Selectable(to_string(v), v == current)) set(s, v);
        ImGui::EndCombo();
    }
}

void section_model(StudioState& s) {
    const JobSpec& job = s.job;
    row_label("preset", "Model preset (assets/presets/models.toml); editing a field below keeps it as the base");
    std::string preview = job.origin.model_preset.empty() ? job.model.name : job.origin.model_preset;
    if (!job.origin.model_hf_config.empty() && job.origin.model_preset.empty()) preview += " (HF config)";
    if (s.job_panel.model_edited) preview += " (customised)";
    ImGui::SetNextItemWidth(-FLT_MIN);
    if (ImGui::BeginCombo("##model_preset", preview.c_str())) {
        for (const ModelSpec& m : s.presets.models) {
            char item[160];
            std::snprintf(item, sizeof item, "%-16s %s, %s", m.name.c_str(), to_string(m.arch),
                          human_count((double)count_parameters(m).total).c_str());
            if (ImGui::Selectable(item, m.name == job.origin.model_preset)) set_model_preset(s, m.name);
        }
        ImGui::EndCombo();
    }
    errors_under(s, "model.preset");
    errors_under(s, "model");
    ImGui::Indent(kLabelCol);
    const ModelSpec& m = job.model;
    char arch[160];
    std::snprintf(arch, sizeof arch, "%s: %s, %s, %s%s", to_string(m.arch), to_string(m.norm), to_string(m.activation),
                  to_string(m.position), m.tied_embeddings ? ", tied embeddings" : "");
    text_wrapped_coloured(colour::text_dim, arch);
    ImGui::Unindent(kLabelCol);
    int_rows(s, "model.");
}

void section_cluster(StudioState& s) {
    int_rows(s, "cluster.");
    const JobSpec& job = s.job;
    row_label("gpu", "GPU preset (assets/presets/gpus.toml)");
    {
        InvalidFrame frame(!field_error(s, "cluster.gpu").empty());
        ImGui::SetNextItemWidth(-FLT_MIN);
        const std::string preview = job.origin.gpu_preset.empty() ? job.cluster.gpu.name : job.origin.gpu_preset;
        if (ImGui::BeginCombo("##gpu_preset", preview.c_str())) {
            for (const GpuSpec& g : s.presets.gpus) {
                const std::string item = g.name + "  " + display_text(g.description);
                if (ImGui::Selectable(item.c_str(), g.name == job.origin.gpu_preset)) set_gpu_preset(s, g.name);
            }
            ImGui::EndCombo();
        }
    }
    errors_under(s, "cluster.gpu");
    const GpuSpec& g = job.cluster.gpu;
    ImGui::Indent(kLabelCol);
    const Precision prec = job.training.precision;
    if (g.peak_tflops(prec) > 0)
        ImGui::TextDisabled("%.0f GiB, %.0f TFLOP/s %s", g.memory_gib, g.peak_tflops(prec), to_string(prec));
    else
        ImGui::TextDisabled("%.0f GiB, no %s peak in the preset", g.memory_gib, to_string(prec));
    ImGui::TextDisabled("%.0f GB/s intra, %.0f GB/s inter", job.cluster.intra_gbps, job.cluster.inter_gbps);
    if (ImGui::IsItemHovered())
        ImGui::SetTooltip("Per-GPU bandwidth inside a node (NVLink/xGMI/PCIe) and across nodes (network)");
    ImGui::Unindent(kLabelCol);
}

void section_parallel(StudioState& s) {
    int_rows(s, "parallel.");
    row_label("seq. parallel", "Megatron sequence parallelism: split LayerNorm/dropout activations across the TP group");
    {
        InvalidFrame frame(!field_error(s, "parallel.sequence_parallel").empty());
        bool sp = s.job.parallel.sequence_parallel;
        if (ImGui::Checkbox("##sequence_parallel", &sp)) set_sequence_parallel(s, sp);
    }
    errors_under(s, "parallel.sequence_parallel");
    row_label("recompute", "Activation recomputation: none, selective (attention core), full (whole layer)");
    enum_combo<Recompute>(s, "##recompute", "parallel.recompute", s.job.parallel.recompute,
                          {Recompute::none, Recompute::selective, Recompute::full}, set_recompute);
    errors_under(s, "parallel.recompute");
    row_label("order", "Rank order, fastest-varying first (Megatron: tp-cp-ep-dp-pp)");
    {
        InvalidFrame frame(!field_error(s, "parallel.order").empty());
        ImGui::SetNextItemWidth(-FLT_MIN);
        std::string order = s.job.parallel.order;
        if (ImGui::InputText("##order", &order)) set_order(s, order);
    }
    errors_under(s, "parallel.order");
}

void section_training(StudioState& s) {
    int_rows(s, "training.");
    row_label("precision", "Math precision of weights/activations");
    enum_combo<Precision>(s, "##precision", "training.precision", s.job.training.precision,
                          {Precision::fp32, Precision::bf16, Precision::fp16}, set_precision);
    errors_under(s, "training.precision");
}

void section(StudioState& s, const char* title, void (*body)(StudioState&)) {
    ImGui::SetNextItemOpen(true, ImGuiCond_Once);
    if (ImGui::CollapsingHeader(title)) {
        ImGui::Spacing();
        body(s);
        ImGui::Spacing();
    }
}

void summary_row(const char* label, const char* value, ImU32 col = 0) {
    ImGui::TextDisabled("%s", label);
    ImGui::SameLine(kLabelCol + 34);
    if (col) ImGui::PushStyleColor(ImGuiCol_Text, col);
    ImGui::TextUnformatted(value);
    if (col) ImGui::PopStyleColor();
}

void summary(const StudioState& s) {
    const JobSummary j = job_summary(s);
    char buf[160];
    summary_row("parameters", human_count((double)j.parameters).c_str());
    std::snprintf(buf, sizeof buf, "%d GPUs (%d node%s \xC3\x97 %d)", j.world, s.job.cluster.nodes,
                  s.job.cluster.nodes == 1 ? "" : "s", s.job.cluster.gpus_per_node);
    summary_row("world size", buf);
    // dp and accumulation are placeholders while the job is invalid (dp may not be derivable).
    const bool valid = job_valid(s);
    std::snprintf(buf, sizeof buf, "%d replica%s", j.dp, j.dp == 1 ? "" : "s");
    summary_row("data parallel", valid ? buf : "-");
    std::snprintf(buf, sizeof buf, "%d micro-batch%s per step", j.grad_accum, j.grad_accum == 1 ? "" : "es");
    summary_row("grad accumulation", valid ? buf : "-");
    summary_row("tokens per step", human_count((double)j.tokens_per_step).c_str());
    if (valid) {
        summary_row("status", "valid", colour::ok);
    } else {
        std::snprintf(buf, sizeof buf, "%zu problem%s (in red above)", s.diagnostics.size(),
                      s.diagnostics.size() == 1 ? "" : "s");
        summary_row("status", buf, colour::error);
    }
}

}  // namespace

void draw_job_panel(StudioState& s) {
    // Title row: "Job  <file>" and Revert on the right.
    ImGui::PushStyleColor(ImGuiCol_Text, colour::accent);
    ImGui::TextUnformatted("JOB");
    ImGui::PopStyleColor();
    ImGui::SameLine();
    ImGui::TextUnformatted(s.job_label.c_str());
    if (ImGui::IsItemHovered() && !s.job.origin.file.empty()) ImGui::SetTooltip("%s", s.job.origin.file.c_str());
    const float revert_w = ImGui::CalcTextSize("Revert").x + ImGui::GetStyle().FramePadding.x * 2;
    ImGui::SameLine(ImGui::GetContentRegionMax().x - revert_w);
    if (ImGui::SmallButton("Revert")) revert(s);
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("Undo every edit: back to the job as loaded");
    ImGui::Separator();

    const float footer_h = ImGui::GetTextLineHeightWithSpacing() * 7 + ImGui::GetStyle().ItemSpacing.y * 2;
    ImGui::BeginChild("##job_fields", ImVec2(0, -footer_h), false);
    section(s, "Model", section_model);
    section(s, "Cluster", section_cluster);
    section(s, "Parallel", section_parallel);
    section(s, "Training", section_training);
    const auto other = unplaced_diagnostics(s);
    if (!other.empty()) {
        ImGui::Spacing();
        ImGui::TextDisabled("Other problems");
        for (const Diagnostic* d : other) text_wrapped_coloured(colour::error, d->key + ": " + d->message);
    }
    ImGui::EndChild();

    ImGui::Separator();
    ImGui::PushStyleColor(ImGuiCol_Text, colour::accent);
    ImGui::TextUnformatted("SUMMARY");
    ImGui::PopStyleColor();
    summary(s);
}

}  // namespace ptd::studio::ui
