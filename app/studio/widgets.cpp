// widgets.cpp — small custom widgets shared by the panels, drawn with ImDrawList.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "ui.h"

namespace ptd::studio::ui {

std::string display_text(std::string_view s) {
    // The default font covers U+0020..U+00FF; spell the rest the way a terminal user would.
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = (unsigned char)s[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
        if (i + len > s.size()) len = 1;
        uint32_t cp = c;
        if (len == 2) cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
        if (len == 3) cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
        if (len == 4) cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
        if (cp < 0x100) {
            out.append(s.substr(i, len));
        } else {
            switch (cp) {
                case 0x2265: out += ">="; break;
                case 0x2264: out += "<="; break;
                case 0x2260: out += "!="; break;
                case 0x2192: out += "->"; break;
                case 0x2190: out += "<-"; break;
                case 0x2026: out += "..."; break;
                case 0x22EE: out += ":"; break;
                case 0x2013:
                case 0x2014:
                case 0x2212: out += "-"; break;
                case 0x2018:
                case 0x2019: out += "'"; break;
                case 0x201C:
                case 0x201D: out += "\""; break;
                case 0x2248: out += "~"; break;
                case 0x221A: out += "sqrt"; break;
                case 0x22C5:
                case 0x2219: out += "\xC2\xB7"; break;  // middle dot
                default: out += "?"; break;
            }
        }
        i += len;
    }
    return out;
}

void text_wrapped_coloured(ImU32 col, std::string_view text) {
    const std::string t = display_text(text);
    ImGui::PushStyleColor(ImGuiCol_Text, col);
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextUnformatted(t.c_str(), t.c_str() + t.size());
    ImGui::PopTextWrapPos();
    ImGui::PopStyleColor();
}

void help_marker(const char* text) {
    ImGui::TextDisabled("(?)");
    if (ImGui::IsItemHovered()) {
        ImGui::BeginTooltip();
        ImGui::PushTextWrapPos(ImGui::GetFontSize() * 32.0f);
        ImGui::TextUnformatted(text);
        ImGui::PopTextWrapPos();
        ImGui::EndTooltip();
    }
}

static void dashed_line(ImDrawList* dl, ImVec2 p, ImVec2 q, ImU32 col, float thickness, float dash, float gap) {
    const float dx = q.x - p.x, dy = q.y - p.y;
    const float len = std::sqrt(dx * dx + dy * dy);
    if (len <= 0) return;
    const float ux = dx / len, uy = dy / len;
    for (float t = 0; t < len; t += dash + gap) {
        const float e = std::min(t + dash, len);
        dl->AddLine(ImVec2(p.x + ux * t, p.y + uy * t), ImVec2(p.x + ux * e, p.y + uy * e), col, thickness);
    }
}

void dashed_rect(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col, float thickness, float dash, float gap) {
    dashed_line(dl, a, ImVec2(b.x, a.y), col, thickness, dash, gap);
    dashed_line(dl, ImVec2(b.x, a.y), b, col, thickness, dash, gap);
    dashed_line(dl, b, ImVec2(a.x, b.y), col, thickness, dash, gap);
    dashed_line(dl, ImVec2(a.x, b.y), a, col, thickness, dash, gap);
}

// A dash, a gap, a dot as long as the line is thick, a gap, and again.
static void dash_dot_line(ImDrawList* dl, ImVec2 p, ImVec2 q, ImU32 col, float thickness, float dash, float gap) {
    const float dx = q.x - p.x, dy = q.y - p.y;
    const float len = std::sqrt(dx * dx + dy * dy);
    if (len <= 0) return;
    const float ux = dx / len, uy = dy / len;
    auto seg = [&](float t, float e) {
        e = std::min(e, len);
        if (t < len) dl->AddLine(ImVec2(p.x + ux * t, p.y + uy * t), ImVec2(p.x + ux * e, p.y + uy * e), col, thickness);
    };
    for (float t = 0; t < len; t += dash + 2 * gap + thickness) {
        seg(t, t + dash);
        seg(t + dash + gap, t + dash + gap + thickness);
    }
}

void dash_dot_rect(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col, float thickness, float dash, float gap) {
    dash_dot_line(dl, a, ImVec2(b.x, a.y), col, thickness, dash, gap);
    dash_dot_line(dl, ImVec2(b.x, a.y), b, col, thickness, dash, gap);
    dash_dot_line(dl, b, ImVec2(a.x, b.y), col, thickness, dash, gap);
    dash_dot_line(dl, ImVec2(a.x, b.y), a, col, thickness, dash, gap);
}

void corner_marker(ImDrawList* dl, ImVec2 a, ImVec2 b, float size, ImU32 col) {
    dl->AddTriangleFilled(ImVec2(b.x - size, a.y), ImVec2(b.x, a.y), ImVec2(b.x, a.y + size), col);
}

void flow_same_line(float next_w, float spacing) {
    const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
    if (ImGui::GetItemRectMax().x + spacing + next_w <= right) ImGui::SameLine(0, spacing);
}

static float swatch_width(Swatch kind) {
    const float h = ImGui::GetTextLineHeight();
    return kind == Swatch::fill ? h : h * 1.6f;
}

float legend_item_width(Swatch kind, const char* label) {
    return swatch_width(kind) + 5 + ImGui::CalcTextSize(label).x;
}

void legend_item(Swatch kind, ImU32 col, const char* label) {
    const float h = ImGui::GetTextLineHeight();
    const ImVec2 p = ImGui::GetCursorScreenPos();
    const float w = swatch_width(kind);
    ImGui::Dummy(ImVec2(w, h));
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 a(p.x + 1, p.y + 1), b(p.x + w - 1, p.y + h - 1);
    switch (kind) {
        case Swatch::fill: dl->AddRectFilled(a, b, col, 2.0f); break;
        case Swatch::solid: dl->AddRect(a, b, col, 0, 0, 2.0f); break;
        case Swatch::dashed: dashed_rect(dl, a, b, col, 2.0f, 4.0f, 3.0f); break;
        case Swatch::dotted: dashed_rect(dl, a, b, col, 2.0f, 2.0f, 2.5f); break;
        case Swatch::long_dashed: dashed_rect(dl, a, b, col, 2.0f, 7.0f, 3.0f); break;
        case Swatch::dash_dot: dash_dot_rect(dl, a, b, col, 2.0f, 5.0f, 2.0f); break;
        case Swatch::thin: dl->AddRect(a, b, col, 0, 0, 1.0f); break;
        case Swatch::corner:
            dl->AddRectFilled(a, b, group_colour(0), 2.0f);
            corner_marker(dl, a, b, h * 0.55f, col);
            break;
    }
    ImGui::SameLine(0, 5);
    ImGui::TextUnformatted(label);
}

void draw_job_problems(const StudioState& s, const char* missing, const char* comes_back) {
    ImGui::Spacing();
    if (std::string why = no_layout_message(s); !why.empty()) {
        why[0] = (char)std::toupper((unsigned char)why[0]);
        text_wrapped_coloured(colour::accent, display_text(why + "."));
        ImGui::PushTextWrapPos(0.0f);
        ImGui::TextDisabled("The job gives a model, a cluster and a global batch; the Planner tab searches every "
                            "layout, and clicking a row applies it. The %s comes back then.", missing);
        ImGui::PopTextWrapPos();
        return;
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, "No %s: the job has %zu problem%s", missing, s.diagnostics.size(),
                  s.diagnostics.size() == 1 ? "" : "s");
    text_wrapped_coloured(colour::error, buf);
    ImGui::TextDisabled("Fix the fields marked red in the job panel; %s as soon as the job is valid.", comes_back);
    ImGui::Spacing();
    ImGui::Separator();
    ImGui::Spacing();
    for (const Diagnostic& d : s.diagnostics) {
        ImGui::PushStyleColor(ImGuiCol_Text, colour::accent);
        ImGui::Bullet();
        ImGui::TextUnformatted(d.key.empty() ? "job" : d.key.c_str());
        ImGui::PopStyleColor();
        ImGui::Indent(ImGui::GetStyle().IndentSpacing + 8);
        text_wrapped_coloured(colour::error, d.message);
        ImGui::Unindent(ImGui::GetStyle().IndentSpacing + 8);
        ImGui::Spacing();
    }
}

}  // namespace ptd::studio::ui
