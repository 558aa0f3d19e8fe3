// panel_launch.cpp — being written (issue 6).
#include "ui.h"

namespace ptd::studio::ui {

void draw_launch_panel(StudioState& s) {
    (void)s;
    ImGui::TextDisabled("This panel is being built.");
}

}  // namespace ptd::studio::ui
