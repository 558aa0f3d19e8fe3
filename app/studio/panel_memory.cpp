// panel_memory.cpp — the Memory & speed tab: one stacked bar per pipeline stage (parameters,
// gradients, optimizer, activations, overheads) against the usable-memory line, red when a
// stage runs out of memory; then MFU, HFU, tokens/s, TFLOP/s and the step-time bar. Both
// bars are an InvisibleButton with everything drawn on its ImDrawList; their geometry,
// hit-testing and text come from memory_model.h, and the estimate behind them is computed
// once per job revision (job_estimate).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ui.h"

namespace ptd::studio::ui {
namespace {

constexpr ImU32 kMemColour[kMemParts] = {
    IM_COL32(86, 156, 230, 255),   // parameters
    IM_COL32(160, 124, 232, 255),  // gradients
    IM_COL32(235, 160, 75, 255),   // optimizer
    IM_COL32(95, 190, 130, 255),   // activations
    IM_COL32(140, 146, 160, 255),  // overheads
};

// The step-time terms take none of the memory categories' colours above (the same orange
// read "optimizer" in the memory bars and "TP comm" in the step-time bar under them; issue
// 33); DP communication and the optimizer step are the Schedule tab's colours for them.
ImU32 time_colour(TimePart p) {
    switch (p) {
        case TimePart::compute: return IM_COL32(215, 205, 170, 255);
        case TimePart::tp_comm: return IM_COL32(232, 100, 90, 255);
        case TimePart::cp_comm: return IM_COL32(230, 110, 170, 255);
        case TimePart::ep_comm: return IM_COL32(170, 200, 60, 255);
        case TimePart::pp_comm: return IM_COL32(160, 110, 70, 255);
        case TimePart::bubble: return IM_COL32(100, 85, 85, 255);
        case TimePart::dp_comm: return IM_COL32(215, 90, 215, 255);
        case TimePart::optimizer: return IM_COL32(90, 200, 210, 255);
    }
    return colour::text_dim;
}

constexpr ImU32 kUsableLine = IM_COL32(235, 80, 80, 255);
constexpr ImU32 kCapacityLine = IM_COL32(170, 176, 190, 255);
constexpr ImU32 kGridLine = IM_COL32(255, 255, 255, 18);
constexpr ImU32 kRowHover = IM_COL32(255, 255, 255, 14);
constexpr ImU32 kBright = IM_COL32(235, 238, 245, 255);


// A vertical dashed line (dashed_rect would draw it twice, out of phase).
void dashed_vline(ImDrawList* dl, float x, float y0, float y1, ImU32 col, float thickness, float dash, float gap) {
    for (float y = y0; y < y1; y += dash + gap) dl->AddLine(ImVec2(x, y), ImVec2(x, std::min(y + dash, y1)), col, thickness);
}

// Text centred in [x0, x1] at y when it fits there; returns whether it was drawn.
bool text_in(ImDrawList* dl, float x0, float x1, float y, ImU32 col, const char* t) {
    const ImVec2 ts = ImGui::CalcTextSize(t);
    if (ts.x > x1 - x0 - 6) return false;
    dl->AddText(ImVec2(std::floor((x0 + x1 - ts.x) * 0.5f), y), col, t);
    return true;
}

// "stage 3" right-aligned in the label column, with a marker on the worst stage.
void stage_label(ImDrawList* dl, ImVec2 p0, const StageBar& b, bool hovered) {
    const float fh = ImGui::GetFontSize();
    const ImVec2 ts = ImGui::CalcTextSize(b.label.c_str());
    const float y = p0.y + std::floor((b.y0 + b.y1 - fh) * 0.5f);
    const float x = p0.x + MemoryViewState::kLabelW - 10 - ts.x;
    const ImU32 col = b.over ? colour::error : b.worst || hovered ? kBright : colour::text_dim;
    dl->AddText(ImVec2(x, y), col, b.label.c_str());
    if (b.worst) {
        const float m = fh * 0.5f, cx = x - 8, cy = y + fh * 0.5f;
        dl->AddTriangleFilled(ImVec2(cx - m * 0.8f, cy - m), ImVec2(cx - m * 0.8f, cy + m), ImVec2(cx + m * 0.4f, cy),
                              b.over ? colour::error : colour::warning);
    }
}

// The scrolling rows of stage bars. `c` was laid out for this canvas width.
void stage_rows(StudioState& s, const MemoryChart& c, float w) {
    ImGuiIO& io = ImGui::GetIO();
    const ImVec2 p0 = ImGui::GetCursorScreenPos();
    ImGui::InvisibleButton("##mem_rows", ImVec2(w, c.content_h));
    const bool hovered = ImGui::IsItemHovered();
    const MemoryHit hit = hovered ? memory_hit(c, io.MousePos.x - p0.x, io.MousePos.y - p0.y) : MemoryHit{};
    s.memory.hover_stage = hit.stage;
    s.memory.hover_part = hit.part;

    ImDrawList* dl = ImGui::GetWindowDrawList();
    const float fh = ImGui::GetFontSize();
    const float top = dl->GetClipRectMin().y - p0.y, bottom = dl->GetClipRectMax().y - p0.y;
    const int first = std::max(0, (int)std::floor(top / c.row_h));
    const int last = std::min((int)c.bars.size() - 1, (int)std::ceil(bottom / c.row_h));

    // Tick grid lines behind the bars.
    for (const AxisTick& t : c.ticks)
        dl->AddLine(ImVec2(p0.x + t.x, p0.y + std::max(0.0f, top)), ImVec2(p0.x + t.x, p0.y + std::min(c.content_h, bottom)),
                    kGridLine);

    for (int i = first; i <= last; ++i) {
        const StageBar& b = c.bars[(size_t)i];
        const bool row_hovered = hit.stage == i;
        if (row_hovered)
            dl->AddRectFilled(ImVec2(p0.x, p0.y + (float)i * c.row_h), ImVec2(p0.x + w, p0.y + (float)(i + 1) * c.row_h),
                              kRowHover, 3.0f);
        stage_label(dl, p0, b, row_hovered);
        const float y0 = p0.y + b.y0, y1 = p0.y + b.y1;
        // Background track up to the scale, then the segments.
        dl->AddRectFilled(ImVec2(p0.x + c.bar_x0, y0), ImVec2(p0.x + c.bar_x1, y1), IM_COL32(255, 255, 255, 8), 2.0f);
        for (int p = 0; p < kMemParts; ++p) {
            const float x0 = p0.x + b.edge[(size_t)p], x1 = p0.x + b.edge[(size_t)p + 1];
            if (x1 - x0 < 0.5f) continue;
            dl->AddRectFilled(ImVec2(x0, y0), ImVec2(x1, y1), kMemColour[p]);
            if (x1 - x0 >= 3) dl->AddLine(ImVec2(x1 - 0.5f, y0), ImVec2(x1 - 0.5f, y1), IM_COL32(20, 22, 27, 160));
        }
        if (b.over) {  // the part past the usable line, hatched red
            const float ux = p0.x + c.usable_x, ex = p0.x + b.edge[kMemParts];
            dl->AddRectFilled(ImVec2(ux, y0), ImVec2(ex, y1), IM_COL32(235, 60, 60, 110));
            dl->PushClipRect(ImVec2(ux, y0), ImVec2(ex, y1), true);
            for (float x = ux - (y1 - y0); x < ex; x += 7)
                dl->AddLine(ImVec2(x, y1), ImVec2(x + (y1 - y0), y0), IM_COL32(255, 200, 200, 150), 1.5f);
            dl->PopClipRect();
            dl->AddRect(ImVec2(p0.x + c.bar_x0 - 1, y0 - 1), ImVec2(ex + 1, y1 + 1), colour::error, 2.0f, 0, 1.5f);
        }
        if (row_hovered && hit.part >= 0)
            dl->AddRect(ImVec2(p0.x + b.edge[(size_t)hit.part] - 1, y0 - 1), ImVec2(p0.x + b.edge[(size_t)hit.part + 1] + 1, y1 + 1),
                        kBright, 0, 0, 2.0f);
        // Total (or the overflow) right of the scale.
        const float ty = p0.y + std::floor((b.y0 + b.y1 - fh) * 0.5f);
        dl->AddText(ImVec2(p0.x + c.bar_x1 + 10, ty), b.over ? colour::error : row_hovered ? kBright : colour::text_dim,
                    b.value.c_str());
    }
    // Capacity (dashed, when a headroom makes it differ) and usable memory lines over every row.
    if (c.capacity_x - c.usable_x >= 2 && c.capacity_x <= c.bar_x1)
        dashed_vline(dl, p0.x + c.capacity_x, p0.y, p0.y + c.content_h, kCapacityLine, 1.5f, 5.0f, 4.0f);
    if (c.usable_x <= c.bar_x1)
        dl->AddLine(ImVec2(p0.x + c.usable_x, p0.y), ImVec2(p0.x + c.usable_x, p0.y + c.content_h), kUsableLine, 2.0f);

    if (hovered && hit.stage >= 0) {
        ImGui::BeginTooltip();
        if (hit.part >= 0) {
            const StageBar& b = c.bars[(size_t)hit.stage];
            ImGui::PushStyleColor(ImGuiCol_Text, kMemColour[hit.part]);
            ImGui::Text("%s: %s", mem_part_label((MemPart)hit.part), format_memory(b.bytes[(size_t)hit.part], c.unit).c_str());
            ImGui::PopStyleColor();
            ImGui::Separator();
        }
        ImGui::TextUnformatted(stage_tooltip(s, hit.stage).c_str());
        ImGui::EndTooltip();
    }
}

// Tick labels above the bars, in the chart's unit (fixed while the rows scroll).
void axis_header(const MemoryChart& c) {
    const float fh = ImGui::GetFontSize();
    const ImVec2 p0 = ImGui::GetCursorScreenPos();
    ImGui::Dummy(ImVec2(c.bar_x1 + MemoryViewState::kValueW, fh + 4));
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 us = ImGui::CalcTextSize(c.unit.name);
    dl->AddText(ImVec2(p0.x + MemoryViewState::kLabelW - 10 - us.x, p0.y), colour::text_dim, c.unit.name);
    float right = -1e9f;
    for (const AxisTick& t : c.ticks) {
        const ImVec2 ts = ImGui::CalcTextSize(t.text.c_str());
        // Centred on its tick, except the first, which starts at 0 (clear of the unit).
        const float x = std::floor(p0.x + t.x - (&t == &c.ticks.front() ? 0.0f : ts.x * 0.5f));
        if (x < right + 6) continue;
        dl->AddText(ImVec2(x, p0.y), colour::text_dim, t.text.c_str());
        dl->AddLine(ImVec2(p0.x + t.x, p0.y + fh + 1), ImVec2(p0.x + t.x, p0.y + fh + 4), colour::text_dim);
        right = x + ts.x;
    }
    if (c.usable_x > c.bar_x1) {  // zoomed to the stages: say where the line is
        const std::string t = "usable " + format_memory(c.usable_bytes, c.unit) + " ->";
        const ImVec2 ts = ImGui::CalcTextSize(t.c_str());
        dl->AddText(ImVec2(std::max(right + 12, p0.x + c.bar_x1 + MemoryViewState::kValueW - ts.x), p0.y), kUsableLine,
                    t.c_str());
    }
}

// Swatch legend for the five parts and the two lines.
void memory_legend(const MemoryChart& c, const JobSpec& job) {
    ImGui::AlignTextToFramePadding();
    for (int p = 0; p < kMemParts; ++p) {
        const char* label = mem_part_label((MemPart)p);
        if (p > 0) flow_same_line(legend_item_width(Swatch::fill, label), 14);
        legend_item(Swatch::fill, kMemColour[p], label);
        if (p == (int)MemPart::overheads && ImGui::IsItemHovered())
            ImGui::SetTooltip("temporary and communication buffers, CUDA context, NCCL buffers, fragmentation");
    }
    char usable[96];
    if (c.usable_bytes < c.capacity_bytes)
        std::snprintf(usable, sizeof usable, "usable %s (headroom %.3g%%)", format_memory(c.usable_bytes, c.unit).c_str(),
                      job.estimate.headroom * 100);
    else
        std::snprintf(usable, sizeof usable, "GPU memory %s", format_memory(c.capacity_bytes, c.unit).c_str());
    const float h = ImGui::GetTextLineHeight();
    flow_same_line(h * 1.6f + 5 + ImGui::CalcTextSize(usable).x, 22);
    {
        const ImVec2 p = ImGui::GetCursorScreenPos();
        ImGui::Dummy(ImVec2(h * 1.6f, h));
        ImGui::GetWindowDrawList()->AddLine(ImVec2(p.x + h * 0.8f, p.y), ImVec2(p.x + h * 0.8f, p.y + h), kUsableLine, 2.0f);
        ImGui::SameLine(0, 5);
        ImGui::TextUnformatted(usable);
    }
    if (c.capacity_x - c.usable_x >= 2) {
        char cap[64];
        std::snprintf(cap, sizeof cap, "GPU memory %s", format_memory(c.capacity_bytes, c.unit).c_str());
        flow_same_line(h * 1.6f + 5 + ImGui::CalcTextSize(cap).x, 14);
        const ImVec2 p = ImGui::GetCursorScreenPos();
        ImGui::Dummy(ImVec2(h * 1.6f, h));
        dashed_vline(ImGui::GetWindowDrawList(), p.x + h * 0.8f, p.y, p.y + h, kCapacityLine, 1.5f, 4.0f, 3.0f);
        ImGui::SameLine(0, 5);
        ImGui::TextUnformatted(cap);
    }
    if (c.bars.size() > 1) {
        const char* worst = "worst stage";
        flow_same_line(h + 5 + ImGui::CalcTextSize(worst).x, 14);
        const ImVec2 p = ImGui::GetCursorScreenPos();
        ImGui::Dummy(ImVec2(h, h));
        const float m = h * 0.5f, cx = p.x + h * 0.5f, cy = p.y + h * 0.5f;
        ImGui::GetWindowDrawList()->AddTriangleFilled(ImVec2(cx - m * 0.8f, cy - m), ImVec2(cx - m * 0.8f, cy + m),
                                                      ImVec2(cx + m * 0.4f, cy), c.fits ? colour::warning : colour::error);
        ImGui::SameLine(0, 5);
        ImGui::TextUnformatted(worst);
    }
}

// The speed figures as small cards that wrap.
void figures(const StudioState& s) {
    const std::vector<Figure> f = throughput_figures(s);
    const ImGuiStyle& st = ImGui::GetStyle();
    const float fh = ImGui::GetFontSize();
    const float pad = 8;
    for (size_t i = 0; i < f.size(); ++i) {
        const std::string note = display_text(f[i].note), range = display_text(f[i].range);
        const float w = std::max({ImGui::CalcTextSize(f[i].label.c_str()).x, ImGui::CalcTextSize(f[i].value.c_str()).x * 1.5f,
                                  ImGui::CalcTextSize(note.c_str()).x, ImGui::CalcTextSize(range.c_str()).x, 90.0f}) +
                        2 * pad;
        // A fourth line for the interval, when there is one.
        const float h = fh * (range.empty() ? 3.5f : 4.5f) + 2 * pad + 4;
        if (i > 0) flow_same_line(w, 8);
        const ImVec2 p = ImGui::GetCursorScreenPos();
        ImGui::InvisibleButton(f[i].label.c_str(), ImVec2(w, h));
        ImDrawList* dl = ImGui::GetWindowDrawList();
        dl->AddRectFilled(p, ImVec2(p.x + w, p.y + h), ImGui::GetColorU32(ImGuiCol_FrameBg), st.FrameRounding);
        dl->AddText(ImVec2(p.x + pad, p.y + pad), colour::text_dim, f[i].label.c_str());
        // The value at 1.5× (the default font is a bitmap; 1.5 stays legible).
        ImFont* font = ImGui::GetFont();
        dl->AddText(font, fh * 1.5f, ImVec2(p.x + pad, p.y + pad + fh + 2), i < 2 ? colour::accent : kBright,
                    f[i].value.c_str());
        dl->AddText(ImVec2(p.x + pad, p.y + pad + fh * 2.5f + 4), colour::text_dim, note.c_str());
        if (!range.empty()) dl->AddText(ImVec2(p.x + pad, p.y + pad + fh * 3.5f + 4), colour::warning, range.c_str());
        if (ImGui::IsItemHovered()) {
            ImGui::BeginTooltip();
            ImGui::PushTextWrapPos(fh * 32);
            ImGui::TextUnformatted(display_text(f[i].help).c_str());
            ImGui::PopTextWrapPos();
            ImGui::EndTooltip();
        }
    }
}

void step_time(StudioState& s, const Estimate& e) {
    ImGuiIO& io = ImGui::GetIO();
    const float fh = ImGui::GetFontSize();
    const float w = std::max(100.0f, ImGui::GetContentRegionAvail().x);
    const float h = fh + 14;
    const ImVec2 p0 = ImGui::GetCursorScreenPos();
    ImGui::InvisibleButton("##step_time", ImVec2(w, h));
    const TimeBar b = time_bar(e, 0, w);
    const bool hovered = ImGui::IsItemHovered();
    const int hit = hovered ? time_hit(b, io.MousePos.x - p0.x) : -1;
    s.memory.hover_time = hit;
    ImDrawList* dl = ImGui::GetWindowDrawList();
    dl->AddRectFilled(p0, ImVec2(p0.x + w, p0.y + h), IM_COL32(255, 255, 255, 8), 3.0f);
    for (size_t i = 0; i < b.segments.size(); ++i) {
        const TimeSegment& g = b.segments[i];
        if (g.x1 - g.x0 < 0.5f) continue;
        const ImVec2 a(p0.x + g.x0, p0.y), z(p0.x + g.x1, p0.y + h);
        dl->AddRectFilled(a, z, time_colour(g.part));
        if (g.x1 - g.x0 >= 3) dl->AddLine(ImVec2(z.x - 0.5f, a.y), ImVec2(z.x - 0.5f, z.y), IM_COL32(20, 22, 27, 160));
        char t[64];
        std::snprintf(t, sizeof t, "%s %.3f s", time_part_label(g.part), g.seconds);
        if (!text_in(dl, a.x, z.x, p0.y + 7, colour::cell_text, t)) text_in(dl, a.x, z.x, p0.y + 7, colour::cell_text, time_part_label(g.part));
        if ((int)i == hit) dl->AddRect(ImVec2(a.x - 1, a.y - 1), ImVec2(z.x + 1, z.y + 1), kBright, 0, 0, 2.0f);
    }
    if (hit >= 0) ImGui::SetTooltip("%s", time_segment_text(b, hit).c_str());

    // Legend: every term with its seconds and share (the zero ones too, dimmed).
    for (size_t i = 0; i < b.segments.size(); ++i) {
        const TimeSegment& g = b.segments[i];
        char t[80];
        std::snprintf(t, sizeof t, "%s %.3f s (%.1f%%)", time_part_label(g.part), g.seconds,
                      b.total > 0 ? 100 * g.seconds / b.total : 0.0);
        if (i > 0) flow_same_line(legend_item_width(Swatch::fill, t), 14);
        if (g.seconds <= 0) ImGui::PushStyleColor(ImGuiCol_Text, colour::text_dim);
        legend_item(Swatch::fill, time_colour(g.part), t);
        if (g.seconds <= 0) ImGui::PopStyleColor();
    }
}

// cost: the whole run (training.tokens, else steps) as `ptd estimate` prints it: figure, value
// and source; a source too long for its column shows whole on hover.
void training_cost_table(StudioState& s) {
    const std::vector<CostRow> rows = training_rows(s);
    if (rows.empty()) return;
    ImGui::Spacing();
    ImGui::TextUnformatted("Time and cost to train");
    ImGui::SameLine();
    ImGui::TextDisabled("%s", s.job.training.tokens > 0 ? "(training.tokens at this step time)"
                                                         : "(training.steps at this step time; set training.tokens for a token budget)");
    ImGui::SameLine();
    help_marker("The run's wall clock is the training steps divided by the goodput that checkpoint saves and "
                "failures leave (Young/Daly interval); GPU-hours, cost and energy follow the wall clock. Defaults "
                "and their sources: docs/estimators.md, \"Time and cost to train\".");
    // The two inputs a user most often changes here: the token budget and the price.
    double tokens = s.job.training.tokens, price = s.job.cluster.gpu_hour_usd;
    ImGui::SetNextItemWidth(ImGui::CalcTextSize("0000000000000000").x);
    if (ImGui::InputDouble("tokens##budget", &tokens, 0, 0, "%.4g")) edit_cost_input(s, "training.tokens", tokens);
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("training.tokens: the token budget (e.g. 15e12); 0 = not given: training.steps");
    ImGui::SameLine();
    ImGui::SetNextItemWidth(ImGui::CalcTextSize("000000000").x);
    if (ImGui::InputDouble("USD per GPU-hour##price", &price, 0, 0, "%.2f"))
        edit_cost_input(s, "cluster.gpu_hour_usd", price);
    if (ImGui::IsItemHovered()) ImGui::SetTooltip("cluster.gpu_hour_usd: your price per GPU-hour; 0 = not given (PTD has no default price)");
    if (!ImGui::BeginTable("##training_cost", 3, ImGuiTableFlags_SizingStretchProp | ImGuiTableFlags_RowBg)) return;
    ImGui::TableSetupColumn("figure", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableSetupColumn("value", ImGuiTableColumnFlags_WidthFixed);
    ImGui::TableSetupColumn("source", ImGuiTableColumnFlags_WidthStretch);
    for (const CostRow& r : rows) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextDisabled("%s", display_text(r.label).c_str());
        ImGui::TableNextColumn();
        const bool missing = r.value == "not given" || r.value == "not known" || r.value == "never finishes";
        const std::string value = display_text(r.value);
        if (missing) ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(colour::warning), "%s", value.c_str());
        else ImGui::TextUnformatted(value.c_str());
        ImGui::TableNextColumn();
        const std::string source = display_text(r.source);
        ImGui::TextDisabled("%s", source.c_str());
        if (ImGui::IsItemHovered() && ImGui::CalcTextSize(source.c_str()).x > ImGui::GetColumnWidth())
            ImGui::SetTooltip("%s", source.c_str());
    }
    ImGui::EndTable();
}

}  // namespace

void draw_memory_panel(StudioState& s) {
    const Estimate* e = job_estimate(s);
    if (!e || e->stages.empty()) {
        draw_job_problems(s, "estimate", "memory and speed come back");
        return;
    }

    // ---- Memory per stage ----
    ImGui::TextUnformatted("Memory per GPU");
    ImGui::SameLine();
    ImGui::TextDisabled("(most loaded rank of each pipeline stage)");
    ImGui::SameLine();
    help_marker("estimate_job's memory model: parameters, gradients and optimizer state from the precision, "
                "optimizer, ZeRO stage / distributed optimizer and the layers on the stage; activations for the "
                "micro-batches in flight at the 1F1B peak (Korthikanti et al. 2022); overheads = temporary and "
                "communication buffers, CUDA context, NCCL buffers, fragmentation. Formulas: docs/estimators.md.");
    const char* scale_label = "Scale";
    const float radios = ImGui::CalcTextSize("Scale  auto  GPU memory  largest stage").x + 6 * ImGui::GetFrameHeight();
    flow_same_line(radios, 24);
    ImGui::TextDisabled("%s", scale_label);
    for (auto [sc, label] : {std::pair{MemoryScale::automatic, "auto"}, std::pair{MemoryScale::gpu, "GPU memory"},
                             std::pair{MemoryScale::stages, "largest stage"}}) {
        ImGui::SameLine();
        if (ImGui::RadioButton(label, s.memory.scale == sc)) s.memory.scale = sc;
        if (sc == MemoryScale::automatic && ImGui::IsItemHovered())
            ImGui::SetTooltip("The largest stage when it uses under 10%% of the usable memory, else the GPU's memory");
    }
    // Amber where the job fits at the estimate but not at the top of its memory error bars.
    const bool top_over = e->memory_interval.known && !e->memory_interval.fits_at_top;
    text_wrapped_coloured(!e->fits ? colour::error : top_over ? colour::warning : colour::ok, memory_headline(s));
    if (e->host_bytes_per_node > 0) {  // offload: what the node's host RAM holds
        char host[192];
        if (e->host_capacity_bytes > 0)
            std::snprintf(host, sizeof host, "Host memory (offloaded): %.1f GiB per node of %.0f GiB%s",
                          e->host_bytes_per_node / (1024.0 * 1024 * 1024), e->host_capacity_bytes / (1024.0 * 1024 * 1024),
                          e->host_fits ? "" : " - does not fit");
        else
            std::snprintf(host, sizeof host, "Host memory (offloaded): %.1f GiB per node (host RAM not given: unchecked)",
                          e->host_bytes_per_node / (1024.0 * 1024 * 1024));
        text_wrapped_coloured(e->host_fits ? colour::ok : colour::error, host);
    }
    ImGui::Spacing();

    // Room for the rows: what is left after the legend and the speed section (as measured
    // last frame), at least a few rows.
    static float below = 260;
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    const float fh = ImGui::GetFontSize();
    const float rows_h = std::max(3 * MemoryViewState::kMinRow, avail.y - below - (fh + 4) - ImGui::GetStyle().ItemSpacing.y);
    MemoryChart c = memory_chart(s, avail.x, rows_h);
    const bool scroll = c.content_h > rows_h + 0.5f;
    if (scroll) c = memory_chart(s, avail.x - ImGui::GetStyle().ScrollbarSize, rows_h);
    axis_header(c);
    ImGui::BeginChild("##mem_scroll", ImVec2(avail.x, std::min(c.content_h, rows_h)), false,
                      scroll ? ImGuiWindowFlags_None : ImGuiWindowFlags_NoScrollbar | ImGuiWindowFlags_NoScrollWithMouse);
    stage_rows(s, c, scroll ? avail.x - ImGui::GetStyle().ScrollbarSize : avail.x);
    ImGui::EndChild();
    const float below_top = ImGui::GetCursorPosY();
    ImGui::Spacing();
    memory_legend(c, s.job);

    // ---- Speed ----
    ImGui::Spacing();
    ImGui::Separator();
    ImGui::Spacing();
    ImGui::TextUnformatted("Speed");
    ImGui::SameLine();
    ImGui::TextDisabled("(predicted; attention FLOPs counted %s)", display_text(flops_convention_text(e->flops.convention)).c_str());
    text_wrapped_coloured(colour::text_dim, speed_interval_line(s));
    figures(s);
    ImGui::Spacing();
    ImGui::TextUnformatted("Step time");
    ImGui::SameLine();
    ImGui::TextDisabled("%.3f s on the critical path through the slowest stage", e->step_s);
    step_time(s, *e);
    training_cost_table(s);
    if (!e->notes.empty()) {
        ImGui::Spacing();
        for (const std::string& n : e->notes) text_wrapped_coloured(colour::text_dim, "- " + n);
    }
    ImGui::TextDisabled("estimated in %.2f ms; formulas in docs/estimators.md", s.memory.cache.seconds * 1e3);
    below = ImGui::GetCursorPosY() - below_top;
}

}  // namespace ptd::studio::ui
