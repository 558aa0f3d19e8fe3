// ui.h — the drawing side of ptd-studio: one draw_* function per panel (panel_*.cpp),
// the theme, and the custom widgets they share. Panels only read the view-model
// (studio_state.h) and call its edit/input functions; they hold no job logic.
#pragma once

#include <string>
#include <string_view>

#include <imgui.h>

#include "studio_state.h"

namespace ptd::studio::ui {

// ---- Theme (theme.cpp) -------------------------------------------------------------------

namespace colour {
inline constexpr ImU32 background = IM_COL32(20, 22, 27, 255);
inline constexpr ImU32 canvas = IM_COL32(26, 28, 34, 255);
inline constexpr ImU32 text_dim = IM_COL32(150, 156, 168, 255);
inline constexpr ImU32 accent = IM_COL32(110, 176, 240, 255);
inline constexpr ImU32 error = IM_COL32(255, 110, 110, 255);
inline constexpr ImU32 warning = IM_COL32(245, 190, 80, 255);
inline constexpr ImU32 ok = IM_COL32(110, 210, 140, 255);
inline constexpr ImU32 cell_text = IM_COL32(22, 24, 28, 255);
// Outlines of the active rank's groups.
inline constexpr ImU32 tp_outline = IM_COL32(255, 255, 255, 255);
inline constexpr ImU32 pp_outline = IM_COL32(255, 140, 0, 255);
inline constexpr ImU32 dp_outline = IM_COL32(200, 90, 255, 255);
inline constexpr ImU32 cp_outline = IM_COL32(40, 220, 235, 255);
inline constexpr ImU32 ep_outline = IM_COL32(90, 235, 90, 255);
inline constexpr ImU32 etp_outline = IM_COL32(255, 230, 60, 255);
inline constexpr ImU32 spans_nodes = IM_COL32(235, 50, 50, 255);
// A straggler of the Live run (a slow rank, measured), on the grid and its node's label.
inline constexpr ImU32 straggler = IM_COL32(255, 64, 160, 255);
}  // namespace colour

void apply_theme();
// Cell colour of group/coordinate `index`: the same 24 hues as `ptd layout` in a terminal.
ImU32 group_colour(int index);
inline constexpr int kPaletteSize = kGroupPaletteSize;

// ---- Widgets (widgets.cpp) ---------------------------------------------------------------

enum class Swatch { fill, solid, dashed, dotted, corner, long_dashed, dash_dot, thin };

// Text the default font can draw: symbols outside Latin-1 (≥, →, …) become ASCII.
std::string display_text(std::string_view utf8);
// Wrapped text in one colour.
void text_wrapped_coloured(ImU32 col, std::string_view text);
// "(?)" that shows `text` on hover.
void help_marker(const char* text);
// Rectangle outlines drawn as dashes or dots (ImDrawList has only solid lines).
void dashed_rect(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col, float thickness, float dash, float gap);
// The same with a dot between the dashes.
void dash_dot_rect(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col, float thickness, float dash, float gap);
// Small filled triangle in the top-right corner of [a, b]: "this TP group spans nodes".
void corner_marker(ImDrawList* dl, ImVec2 a, ImVec2 b, float size, ImU32 col);
// SameLine(0, spacing) when an item `next_w` wide still fits on the current line, else
// nothing (the next item starts a new line).
void flow_same_line(float next_w, float spacing);
// Width legend_item(kind, col, label) takes.
float legend_item_width(Swatch kind, const char* label);
// The job's problems, one per key, for a panel that cannot show anything without a valid
// job: "No <missing>: the job has N problems", then "... <what> come(s) back as soon as ...".
void draw_job_problems(const StudioState& s, const char* missing, const char* comes_back);
// A legend entry: a sample swatch drawn by `kind` followed by a label, on the current line.
void legend_item(Swatch kind, ImU32 col, const char* label);

// ---- Panels ------------------------------------------------------------------------------

struct Frame {
    float job_panel_w = 360;
};

// The whole window for one frame: top bar, job panel on the left, tabs on the right.
void draw_studio(StudioState& s, const Frame& f);
void draw_job_panel(StudioState& s);       // panel_job.cpp
void draw_layout_panel(StudioState& s);    // panel_layout.cpp
void draw_job_file_panel(StudioState& s);  // panel_job_file.cpp
void draw_memory_panel(StudioState& s);    // panel_memory.cpp: memory per stage, MFU, step time
void draw_planner_panel(StudioState& s);   // panel_planner.cpp
void draw_launch_panel(StudioState& s);    // panel_launch.cpp
void draw_live_panel(StudioState& s);      // panel_live.cpp
void draw_schedule_panel(StudioState& s);  // panel_schedule.cpp: the pipeline timeline
void draw_compare_panel(StudioState& s);   // panel_compare.cpp: a pinned layout beside the job

}  // namespace ptd::studio::ui
