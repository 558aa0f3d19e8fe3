// app_window.h — the GLFW window, the OpenGL context and the ImGui frame loop. The loop
// sleeps in glfwWaitEventsTimeout while nothing happens, so an idle studio uses no CPU.
#pragma once

#include <string>

#include "studio_state.h"

namespace ptd::studio {

struct WindowOptions {
    int width = 1400, height = 900;
    std::string screenshot;  // render `frames` frames, save the last one here, exit
    int frames = 3;          // (counted after background work — planner, launch — has ended)
    double settle_timeout_s = 300;  // screenshot anyway after this long
    // Screenshots only: where the mouse is, in window pixels (the real pointer is ignored so
    // screenshots do not depend on where the display's pointer happens to be). < 0 = nowhere.
    float mouse_x = -1, mouse_y = -1;
};

struct WindowResult {
    int exit_code = 0;
    bool no_display = false;  // GLFW could not open a window: `error` says why
    std::string error;
};

WindowResult run_window(StudioState& s, const WindowOptions& opt);

}  // namespace ptd::studio
