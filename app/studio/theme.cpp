// theme.cpp — the studio's dark theme and the group palette.
#include "ui.h"

#include "group_colours.h"

namespace ptd::studio::ui {

ImU32 group_colour(int index) {
    // The palette `ptd layout` uses in the terminal, so a rank has the same colour in both.
    const Rgb c = group_rgb(index);
    return IM_COL32(c.r, c.g, c.b, 255);
}

void apply_theme() {
    ImGui::StyleColorsDark();
    ImGuiStyle& st = ImGui::GetStyle();
    st.WindowPadding = ImVec2(10, 10);
    st.FramePadding = ImVec2(6, 4);
    st.ItemSpacing = ImVec2(8, 6);
    st.ItemInnerSpacing = ImVec2(6, 4);
    st.IndentSpacing = 14;
    st.ScrollbarSize = 12;
    st.GrabMinSize = 10;
    st.WindowBorderSize = 0;
    st.ChildBorderSize = 0;
    st.PopupBorderSize = 1;
    st.FrameBorderSize = 0;
    st.WindowRounding = 0;
    st.ChildRounding = 4;
    st.FrameRounding = 4;
    st.PopupRounding = 4;
    st.ScrollbarRounding = 6;
    st.GrabRounding = 3;
    st.TabRounding = 4;

    ImVec4* c = st.Colors;
    auto rgb = [](int r, int g, int b, float a = 1.0f) { return ImVec4(r / 255.f, g / 255.f, b / 255.f, a); };
    c[ImGuiCol_Text] = rgb(222, 226, 232);
    c[ImGuiCol_TextDisabled] = rgb(130, 136, 148);
    c[ImGuiCol_WindowBg] = rgb(20, 22, 27);
    c[ImGuiCol_ChildBg] = rgb(28, 31, 38);
    c[ImGuiCol_PopupBg] = rgb(34, 37, 45, 0.98f);
    c[ImGuiCol_Border] = rgb(58, 63, 75);
    c[ImGuiCol_FrameBg] = rgb(42, 46, 56);
    c[ImGuiCol_FrameBgHovered] = rgb(52, 58, 70);
    c[ImGuiCol_FrameBgActive] = rgb(60, 68, 84);
    c[ImGuiCol_TitleBg] = rgb(20, 22, 27);
    c[ImGuiCol_TitleBgActive] = rgb(20, 22, 27);
    c[ImGuiCol_MenuBarBg] = rgb(24, 26, 32);
    c[ImGuiCol_ScrollbarBg] = rgb(28, 31, 38);
    c[ImGuiCol_ScrollbarGrab] = rgb(66, 72, 86);
    c[ImGuiCol_ScrollbarGrabHovered] = rgb(82, 90, 106);
    c[ImGuiCol_ScrollbarGrabActive] = rgb(96, 104, 122);
    c[ImGuiCol_CheckMark] = rgb(110, 176, 240);
    c[ImGuiCol_SliderGrab] = rgb(110, 176, 240);
    c[ImGuiCol_SliderGrabActive] = rgb(140, 196, 250);
    c[ImGuiCol_Button] = rgb(48, 54, 66);
    c[ImGuiCol_ButtonHovered] = rgb(62, 72, 90);
    c[ImGuiCol_ButtonActive] = rgb(74, 90, 116);
    c[ImGuiCol_Header] = rgb(40, 45, 56);
    c[ImGuiCol_HeaderHovered] = rgb(52, 60, 76);
    c[ImGuiCol_HeaderActive] = rgb(62, 72, 92);
    c[ImGuiCol_Separator] = rgb(52, 57, 68);
    c[ImGuiCol_Tab] = rgb(34, 38, 46);
    c[ImGuiCol_TabHovered] = rgb(62, 72, 92);
    c[ImGuiCol_TabActive] = rgb(50, 60, 80);
    c[ImGuiCol_TabUnfocused] = rgb(34, 38, 46);
    c[ImGuiCol_TabUnfocusedActive] = rgb(50, 60, 80);
    c[ImGuiCol_TextSelectedBg] = rgb(110, 176, 240, 0.35f);
    c[ImGuiCol_NavHighlight] = rgb(110, 176, 240);
}

}  // namespace ptd::studio::ui
