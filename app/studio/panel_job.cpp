// panel_job.cpp — the job panel (left side): model, cluster, parallel and training
// fields, each with its validation message in red underneath, and a summary footer; the
// File menu (Open / Save / Save as / recent files), its Open / Save as popup and the
// unsaved-changes prompt, whose logic is in job_file_model.h.
#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <optional>

#include "layout_view.h"  // mlaio: model_shape_details
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
    const bool derivable = key == "parallel.dp" || key == "training.global_batch" || key == "training.micro_batch";
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
            ImGui::SetTooltip(key == "parallel.dp"              ? "Derive dp from the GPU count: world / (tp x pp x cp)"
                              : key == "training.micro_batch" ? "Choose the fastest micro-batch that fits (with a global batch)"
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

// A Hugging Face config.json as the model: a path and Import; errors in red underneath.
void hf_import_row(StudioState& s) {
    row_label("HF config", "Import a Hugging Face config.json as the model (Llama, Mistral, Mixtral, Qwen2, Qwen3, "
                           "Qwen3-MoE, DeepSeek-V2/V3, GPT-2, GPT-NeoX); the job's seq_len is kept");
    const bool bad = !s.file.hf_error.empty() || !field_error(s, "model.hf_config").empty();
    const float button_w = ImGui::CalcTextSize("Import").x + ImGui::GetStyle().FramePadding.x * 2;
    bool go = false;
    {
        InvalidFrame frame(bad);
        ImGui::SetNextItemWidth(-button_w - ImGui::GetStyle().ItemSpacing.x);
        go = ImGui::InputTextWithHint("##hf_path", "path/to/config.json", &s.file.hf_path,
                                      ImGuiInputTextFlags_EnterReturnsTrue);
    }
    ImGui::SameLine();
    go |= ImGui::Button("Import");
    if (go) import_hf_model(s, s.file.hf_path);
    ImGui::Indent(kLabelCol);
    if (!s.file.hf_error.empty()) text_wrapped_coloured(colour::error, s.file.hf_error);
    for (const std::string& m : field_errors(s, "model.hf_config")) text_wrapped_coloured(colour::error, m);
    if (!s.job.origin.model_hf_config.empty())
        text_wrapped_coloured(colour::text_dim, "model from " + s.job.origin.model_hf_config);
    for (const std::string& n : s.job.origin.notes) text_wrapped_coloured(colour::text_dim, "note: " + n);
    ImGui::Unindent(kLabelCol);
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
    // mlaio: head_dim, MLA ranks, experts' width, shared experts, dense first layers, MTP.
    if (const std::string details = model_shape_details(m); !details.empty())
        text_wrapped_coloured(colour::text_dim, details);
    ImGui::Unindent(kLabelCol);
    hf_import_row(s);
    int_rows(s, "model.");
}

void bandwidth_row(StudioState& s, const char* key, const char* label, const char* help) {
    const bool intra = std::string_view(key) == "cluster.intra_gbps";
    ImGui::PushID(key);
    row_label(label, help);
    double v = intra ? s.job.cluster.intra_gbps : s.job.cluster.inter_gbps;
    {
        InvalidFrame frame(!bandwidth_error(s, key).empty());
        ImGui::SetNextItemWidth(intra ? -ImGui::GetFrameHeight() - ImGui::CalcTextSize("auto").x - 14 : -FLT_MIN);
        if (ImGui::InputDouble("##v", &v, 0, 0, "%.1f")) set_bandwidth(s, key, v);
    }
    if (intra) {
        ImGui::SameLine();
        bool autov = intra_is_auto(s);
        if (ImGui::Checkbox("auto", &autov)) set_intra_auto(s, autov);
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("Take the GPU preset's link bandwidth (link_gbps)");
    }
    ImGui::PopID();
    if (std::string e = bandwidth_error(s, key); !e.empty()) {
        ImGui::Indent(kLabelCol);
        text_wrapped_coloured(colour::error, e);
        ImGui::Unindent(kLabelCol);
    }
}

// cluster.hosts: one host per line.
void hosts_row(StudioState& s) {
    sync_hosts_text(s);
    row_label("hosts", "One host name or address per node, one per line (cluster.hosts); empty = "
                       "launch.hostfile, or this machine for local runs");
    const int lines = std::clamp((int)s.job.cluster.hosts.size() + 1, 2, 6);
    std::string text = s.file.hosts_text;
    {
        InvalidFrame frame(!s.file.hosts_error.empty() || !field_error(s, "cluster.hosts").empty());
        if (ImGui::InputTextMultiline("##hosts", &text, ImVec2(-FLT_MIN, ImGui::GetTextLineHeight() * (float)lines + 8)))
            set_hosts_text(s, text);
    }
    ImGui::Indent(kLabelCol);
    if (!s.file.hosts_error.empty()) text_wrapped_coloured(colour::error, s.file.hosts_error);
    for (const std::string& m : field_errors(s, "cluster.hosts")) text_wrapped_coloured(colour::error, m);
    if (s.job.cluster.hosts.empty() && s.file.hosts_error.empty()) ImGui::TextDisabled("none: the hostfile, or local");
    ImGui::Unindent(kLabelCol);
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
    // Three significant figures below 100 (the cpu preset's 0.1 read as "0 TFLOP/s").
    if (const double peak = g.peak_tflops(prec); peak > 0)
        ImGui::TextDisabled(peak >= 100 ? "%.0f GiB, %.0f TFLOP/s %s" : "%.0f GiB, %.3g TFLOP/s %s", g.memory_gib, peak,
                            to_string(prec));
    else
        ImGui::TextDisabled("%.0f GiB, no %s peak in the preset", g.memory_gib, to_string(prec));
    ImGui::Unindent(kLabelCol);
    bandwidth_row(s, "cluster.intra_gbps", "intra GB/s",
                  "Per-GPU bandwidth inside a node (NVLink/xGMI/PCIe), GB/s; auto = the GPU preset's link_gbps");
    bandwidth_row(s, "cluster.inter_gbps", "inter GB/s", "Per-GPU bandwidth across nodes (the network), GB/s");
    hosts_row(s);
}

void section_parallel(StudioState& s) {
    if (!s.job.has_layout()) {  // a bare job: the fields below are placeholders until chosen
        ImGui::PushTextWrapPos(0.0f);
        ImGui::TextDisabled("%s", display_text("None chosen yet \u2014 the Planner tab picks one; editing a field "
                                                "chooses this one.").c_str());
        ImGui::PopTextWrapPos();
    }
    int_rows(s, "parallel.");
    row_label("seq. parallel", "Megatron sequence parallelism: split LayerNorm/dropout activations across the TP group");
    {
        InvalidFrame frame(!field_error(s, "parallel.sequence_parallel").empty());
        bool sp = s.job.parallel.sequence_parallel;
        if (ImGui::Checkbox("##sequence_parallel", &sp)) set_sequence_parallel(s, sp);
    }
    errors_under(s, "parallel.sequence_parallel");
    row_label("dist. optimizer", "Megatron's distributed optimizer: fp32 optimizer state sharded over DP (needs zero = 0)");
    {
        InvalidFrame frame(!field_error(s, "parallel.distributed_optimizer").empty());
        bool dopt = s.job.parallel.distributed_optimizer;
        if (ImGui::Checkbox("##distributed_optimizer", &dopt)) set_distributed_optimizer(s, dopt);
    }
    errors_under(s, "parallel.distributed_optimizer");
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

// What the job's stack runs for the keys it leaves out (`ptd estimate`'s "stack:" list);
// hovering a row shows the stack's own flag or recipe line it comes from.
void section_stack(StudioState& s) {
    const StackDefaultsView v = stack_defaults_view(s);
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextDisabled("%s", display_text(v.stack + ": what it runs for the keys this job does not write").c_str());
    if (v.rows.empty()) ImGui::TextDisabled("none: the job writes every key that bears on it");
    for (const StackDefault& d : v.rows) {
        ImGui::TextUnformatted(display_text(d.key + " = " + d.value).c_str());
        if (ImGui::IsItemHovered() && !d.source.empty()) ImGui::SetTooltip("%s", display_text(d.source).c_str());
    }
    ImGui::PopTextWrapPos();
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
    // Wrapped at the panel's edge: a long status ("no layout chosen: run the planner") was cut.
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextUnformatted(value);
    ImGui::PopTextWrapPos();
    if (col) ImGui::PopStyleColor();
}

void summary(const StudioState& s) {
    const JobSummary j = job_summary(s);
    char buf[160];
    summary_row("parameters", human_count((double)j.parameters).c_str());
    std::snprintf(buf, sizeof buf, "%d GPUs (%d node%s \xC3\x97 %d)", j.world, s.job.cluster.nodes,
                  s.job.cluster.nodes == 1 ? "" : "s", s.job.cluster.gpus_per_node);
    summary_row("world size", buf);
    // Every degree the layout has (ep, expert tp and vpp too), as the grid's headline says it.
    if (s.layout) summary_row("parallel", layout_degrees_text(s.job, *s.layout).c_str());
    // dp and accumulation show "-" while the job is invalid (dp may not be derivable then).
    const bool valid = job_valid(s);
    std::snprintf(buf, sizeof buf, "%d replica%s", j.dp, j.dp == 1 ? "" : "s");
    summary_row("data parallel", valid ? buf : "-");
    std::snprintf(buf, sizeof buf, "%d micro-batch%s per step", j.grad_accum, j.grad_accum == 1 ? "" : "es");
    summary_row("grad accumulation", valid ? buf : "-");
    summary_row("tokens per step", human_count((double)j.tokens_per_step).c_str());
    if (valid) {
        summary_row("status", "valid", colour::ok);
    } else if (std::string why = no_layout_message(s); !why.empty()) {
        summary_row("status", display_text(why).c_str(), colour::accent);
    } else {
        std::snprintf(buf, sizeof buf, "%zu problem%s (in red above)", s.diagnostics.size(),
                      s.diagnostics.size() == 1 ? "" : "s");
        summary_row("status", buf, colour::error);
    }
}

// ---- Files ---------------------------------------------------------------------------------

constexpr const char* kOpenPopup = "Open job";
constexpr const char* kSavePopup = "Save job as";
constexpr const char* kPromptPopup = "Unsaved changes";

void open_recent(StudioState& s, const std::string& path) {
    if (std::string e = request_open(s, path); !e.empty()) {
        // Show why in the Open popup, with the file in the path field.
        file_dialog_show(s, FileDialog::open);
        file_dialog_set_path(s, path);
        s.file.dialog_error = e;
    }
}

// Save to the job's file; on failure the Save as popup opens with the reason.
void save_now(StudioState& s) {
    if (std::string e = save_job(s); !e.empty()) {
        file_dialog_show(s, FileDialog::save_as);
        s.file.dialog_error = e;
    }
}

void file_menu(StudioState& s) {
    if (ImGui::MenuItem("Open...", "Ctrl+O")) file_dialog_show(s, FileDialog::open);
    if (ImGui::BeginMenu("Open recent", !s.file.recent.empty())) {
        for (const std::string& r : s.file.recent)
            if (ImGui::MenuItem(r.c_str())) open_recent(s, r);
        ImGui::EndMenu();
    }
    ImGui::Separator();
    if (ImGui::MenuItem("Save", "Ctrl+S")) save_now(s);
    if (ImGui::MenuItem("Save as...", "Ctrl+Shift+S")) file_dialog_show(s, FileDialog::save_as);
    ImGui::Separator();
    if (ImGui::MenuItem("Revert", nullptr, false, job_modified(s))) request_revert(s);
}

void shortcuts(StudioState& s) {
    const ImGuiIO& io = ImGui::GetIO();
    if (!io.KeyCtrl || ImGui::IsPopupOpen(nullptr, ImGuiPopupFlags_AnyPopupId)) return;
    // imgui 1.86 indexes keys by the backend's key codes; GLFW's letters are their ASCII.
    if (ImGui::IsKeyPressed('O', false)) file_dialog_show(s, FileDialog::open);
    if (ImGui::IsKeyPressed('S', false)) {
        if (io.KeyShift) file_dialog_show(s, FileDialog::save_as);
        else save_now(s);
    }
}

// The Open / Save as popup: the listed folder, its sub-folders and .toml files, recent
// files (Open), a path field, the error, OK / Cancel.
void file_dialog(StudioState& s, FileDialog kind) {
    JobFileState& f = s.file;
    const char* name = kind == FileDialog::open ? kOpenPopup : kSavePopup;
    if (f.dialog == kind && !f.dialog_opened) {
        ImGui::OpenPopup(name);
        f.dialog_opened = true;
    }
    const ImGuiViewport* vp = ImGui::GetMainViewport();
    ImGui::SetNextWindowPos(ImVec2(vp->WorkPos.x + vp->WorkSize.x * 0.5f, vp->WorkPos.y + vp->WorkSize.y * 0.5f),
                            ImGuiCond_Appearing, ImVec2(0.5f, 0.5f));
    ImGui::SetNextWindowSize(ImVec2(std::min(760.0f, vp->WorkSize.x - 40), std::min(520.0f, vp->WorkSize.y - 40)),
                             ImGuiCond_Appearing);
    if (!ImGui::BeginPopupModal(name, nullptr, ImGuiWindowFlags_NoSavedSettings)) return;
    if (f.dialog != kind) {  // closed by the model
        ImGui::CloseCurrentPopup();
        ImGui::EndPopup();
        return;
    }
    const ImGuiStyle& st = ImGui::GetStyle();
    // Folder line: Up, then the folder.
    ImGui::BeginDisabled(f.dialog_folder == "/");
    if (ImGui::Button("Up")) file_dialog_click(s, {"..", true});
    ImGui::EndDisabled();
    ImGui::SameLine();
    ImGui::AlignTextToFramePadding();
    ImGui::TextDisabled("in");
    ImGui::SameLine();
    ImGui::TextUnformatted(f.dialog_folder.c_str());

    // Below the lists: the path row and one line of hint, or the error's wrapped height.
    const float wrap_w = ImGui::GetContentRegionAvail().x;
    const float note_h = f.dialog_error.empty()
                             ? ImGui::GetTextLineHeight()
                             : ImGui::CalcTextSize(display_text(f.dialog_error).c_str(), nullptr, false, wrap_w).y;
    const float footer = ImGui::GetFrameHeightWithSpacing() + note_h + st.ItemSpacing.y * 2 + st.WindowPadding.y;
    const float list_h = std::max(ImGui::GetTextLineHeight() * 4, ImGui::GetContentRegionAvail().y - footer);
    const bool with_recent = kind == FileDialog::open && !f.recent.empty();
    const float list_w = with_recent ? ImGui::GetContentRegionAvail().x * 0.55f : 0.0f;
    bool accept = false;
    ImGui::PushStyleColor(ImGuiCol_ChildBg, colour::canvas);
    ImGui::BeginChild("##listing", ImVec2(list_w, list_h), true);
    const std::vector<FolderEntry> listing = f.listing;  // a click may refresh it
    for (const FolderEntry& e : listing) {
        const std::string label = e.folder ? e.name + "/" : e.name;
        const bool chosen = !e.folder && f.dialog_path == f.dialog_folder + "/" + e.name;
        if (e.folder) ImGui::PushStyleColor(ImGuiCol_Text, colour::accent);
        if (ImGui::Selectable(label.c_str(), chosen, ImGuiSelectableFlags_AllowDoubleClick)) {
            file_dialog_click(s, e);
            if (!e.folder && ImGui::IsMouseDoubleClicked(0)) accept = true;
        }
        if (e.folder) ImGui::PopStyleColor();
    }
    if (listing.size() <= 1) ImGui::TextDisabled("(no .toml files or folders here)");
    ImGui::EndChild();
    if (with_recent) {
        ImGui::SameLine();
        ImGui::BeginChild("##recent", ImVec2(0, list_h), true);
        ImGui::TextDisabled("Recent");
        for (const std::string& r : f.recent) {
            const auto slash = r.find_last_of('/');
            const std::string label = r.substr(slash + 1) + "  " + r.substr(0, slash);
            if (ImGui::Selectable(label.c_str(), f.dialog_path == r, ImGuiSelectableFlags_AllowDoubleClick)) {
                file_dialog_set_path(s, r);
                if (ImGui::IsMouseDoubleClicked(0)) accept = true;
            }
            if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", r.c_str());
        }
        ImGui::EndChild();
    }
    ImGui::PopStyleColor();

    // Path field; Enter is OK.
    const char* ok = kind == FileDialog::open ? "Open" : "Save";
    const float buttons_w = ImGui::CalcTextSize(ok).x + ImGui::CalcTextSize("Cancel").x + st.FramePadding.x * 4 +
                            st.ItemSpacing.x * 2;
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted(kind == FileDialog::open ? "File" : "Save as");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(-buttons_w);
    if (ImGui::IsWindowAppearing()) ImGui::SetKeyboardFocusHere();
    std::string path = f.dialog_path;
    if (ImGui::InputTextWithHint("##path", kind == FileDialog::open ? "a .toml job file, or a folder" : "name.toml",
                                 &path, ImGuiInputTextFlags_EnterReturnsTrue)) {
        file_dialog_set_path(s, path);
        accept = true;
    } else if (path != f.dialog_path) {
        file_dialog_set_path(s, path);
    }
    ImGui::SameLine();
    accept |= ImGui::Button(ok);
    ImGui::SameLine();
    const bool cancel = ImGui::Button("Cancel") || ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape), false);
    if (!f.dialog_error.empty()) text_wrapped_coloured(colour::error, f.dialog_error);
    else if (kind == FileDialog::save_as)
        ImGui::TextDisabled("The TOML `ptd` reads (docs/job-spec.md); .toml is added when missing.");

    if (cancel) {
        file_dialog_close(s);
        ImGui::CloseCurrentPopup();
    } else if (accept && file_dialog_accept(s)) {
        ImGui::CloseCurrentPopup();
    }
    ImGui::EndPopup();
}

void unsaved_prompt(StudioState& s) {
    if (prompt_visible(s) && !ImGui::IsPopupOpen(kPromptPopup)) ImGui::OpenPopup(kPromptPopup);
    const ImGuiViewport* vp = ImGui::GetMainViewport();
    ImGui::SetNextWindowPos(ImVec2(vp->WorkPos.x + vp->WorkSize.x * 0.5f, vp->WorkPos.y + vp->WorkSize.y * 0.5f),
                            ImGuiCond_Appearing, ImVec2(0.5f, 0.5f));
    ImGui::SetNextWindowSize(ImVec2(460, 0), ImGuiCond_Appearing);
    const ImGuiWindowFlags flags = ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_AlwaysAutoResize;
    if (!ImGui::BeginPopupModal(kPromptPopup, nullptr, flags)) return;
    if (!prompt_visible(s)) {
        ImGui::CloseCurrentPopup();
        ImGui::EndPopup();
        return;
    }
    ImGui::PushTextWrapPos(440);
    ImGui::TextUnformatted(prompt_text(s).c_str());
    ImGui::PopTextWrapPos();
    if (!s.file.prompt_error.empty()) text_wrapped_coloured(colour::error, s.file.prompt_error);
    ImGui::Spacing();
    std::optional<PromptChoice> choice;
    if (prompt_offers_save(s)) {
        if (ImGui::Button(s.file.path.empty() ? "Save as..." : "Save")) choice = PromptChoice::save;
        ImGui::SameLine();
    }
    if (ImGui::Button(prompt_offers_save(s) ? "Discard" : "Discard changes")) choice = PromptChoice::discard;
    ImGui::SameLine();
    if (ImGui::Button("Cancel") || ImGui::IsKeyPressed(ImGui::GetKeyIndex(ImGuiKey_Escape), false))
        choice = PromptChoice::cancel;
    if (choice) {
        prompt_answer(s, *choice);
        if (!prompt_visible(s)) ImGui::CloseCurrentPopup();
    }
    ImGui::EndPopup();
}

}  // namespace

void draw_job_panel(StudioState& s) {
    // Title row: "JOB <file>*", then File and Revert on the right.
    ImGui::PushStyleColor(ImGuiCol_Text, colour::accent);
    ImGui::TextUnformatted("JOB");
    ImGui::PopStyleColor();
    ImGui::SameLine();
    ImGui::TextUnformatted(job_title(s).c_str());
    if (ImGui::IsItemHovered())
        ImGui::SetTooltip("%s%s", s.file.path.empty() ? "not saved to a file yet" : s.file.path.c_str(),
                          job_modified(s) ? "\n* = unsaved changes" : "");
    const ImGuiStyle& st = ImGui::GetStyle();
    const float file_w = ImGui::CalcTextSize("File").x + st.FramePadding.x * 2;
    const float revert_w = ImGui::CalcTextSize("Revert").x + st.FramePadding.x * 2;
    ImGui::SameLine(ImGui::GetContentRegionMax().x - revert_w - file_w - st.ItemSpacing.x);
    if (ImGui::SmallButton("File")) ImGui::OpenPopup("##file_menu");
    if (ImGui::BeginPopup("##file_menu")) {
        file_menu(s);
        ImGui::EndPopup();
    }
    ImGui::SameLine();
    ImGui::BeginDisabled(!job_modified(s));
    if (ImGui::SmallButton("Revert")) request_revert(s);
    ImGui::EndDisabled();
    if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
        ImGui::SetTooltip("Undo every edit: back to the job as opened or last saved");
    if (!s.file.message.empty()) {
        ImGui::PushStyleColor(ImGuiCol_Text, colour::text_dim);
        ImGui::PushTextWrapPos(0.0f);
        const std::string m = display_text(s.file.message);
        ImGui::TextUnformatted(m.c_str());
        ImGui::PopTextWrapPos();
        ImGui::PopStyleColor();
    }
    ImGui::Separator();
    shortcuts(s);
    file_dialog(s, FileDialog::open);
    file_dialog(s, FileDialog::save_as);
    unsaved_prompt(s);

    const float footer_h = ImGui::GetTextLineHeightWithSpacing() * 7 + ImGui::GetStyle().ItemSpacing.y * 2;
    ImGui::BeginChild("##job_fields", ImVec2(0, -footer_h), false);
    section(s, "Model", section_model);
    section(s, "Cluster", section_cluster);
    section(s, "Parallel", section_parallel);
    section(s, "Training", section_training);
    section(s, "Stack defaults", section_stack);
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
