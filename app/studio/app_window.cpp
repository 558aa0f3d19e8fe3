// app_window.cpp — GLFW + OpenGL 3 + Dear ImGui. The UI thread polls input, draws the
// panels from the view-model and presents; it never computes anything itself.
#include "app_window.h"

#include <cfloat>
#include <cstdio>

#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>

#include <GLFW/glfw3.h>

#include "screenshot.h"

#include <chrono>
#include <thread>
#include "ui.h"

namespace ptd::studio {
namespace {

std::string g_glfw_error;
int g_activity = 0;  // input or window events since the last frame

void on_glfw_error(int code, const char* what) {
    g_glfw_error = what ? what : "unknown error";
    (void)code;
}

// Our callbacks note that something happened (so the loop renders) and pass the event on
// to ImGui's backend.
void on_cursor_pos(GLFWwindow*, double, double) { ++g_activity; }
void on_mouse_button(GLFWwindow* w, int b, int a, int m) {
    ++g_activity;
    ImGui_ImplGlfw_MouseButtonCallback(w, b, a, m);
}
void on_scroll(GLFWwindow* w, double x, double y) {
    ++g_activity;
    ImGui_ImplGlfw_ScrollCallback(w, x, y);
}
void on_key(GLFWwindow* w, int k, int sc, int a, int m) {
    ++g_activity;
    ImGui_ImplGlfw_KeyCallback(w, k, sc, a, m);
    if (k == GLFW_KEY_Q && a == GLFW_PRESS && (m & GLFW_MOD_CONTROL)) glfwSetWindowShouldClose(w, GLFW_TRUE);
}
void on_char(GLFWwindow* w, unsigned c) {
    ++g_activity;
    ImGui_ImplGlfw_CharCallback(w, c);
}
void on_focus(GLFWwindow* w, int f) {
    ++g_activity;
    ImGui_ImplGlfw_WindowFocusCallback(w, f);
}
void on_enter(GLFWwindow* w, int e) {
    ++g_activity;
    ImGui_ImplGlfw_CursorEnterCallback(w, e);
}
void on_window_event(GLFWwindow*, int, int) { ++g_activity; }
void on_refresh(GLFWwindow*) { ++g_activity; }

}  // namespace

WindowResult run_window(StudioState& s, const WindowOptions& opt) {
    WindowResult res;
    glfwSetErrorCallback(on_glfw_error);
    if (!glfwInit()) {
        res.no_display = true;
        res.error = "glfw: " + (g_glfw_error.empty() ? std::string("glfwInit failed") : g_glfw_error);
        return res;
    }
    glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
    glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 0);
    std::string title = "PTD Studio - " + job_title(s);  // "*" when modified; kept current below
    GLFWwindow* win = glfwCreateWindow(opt.width, opt.height, title.c_str(), nullptr, nullptr);
    if (!win) {
        res.no_display = true;
        res.error = "glfw: " + (g_glfw_error.empty() ? std::string("cannot create a window") : g_glfw_error);
        glfwTerminate();
        return res;
    }
    glfwMakeContextCurrent(win);
    const bool shooting = !opt.screenshot.empty();
    glfwSwapInterval(shooting ? 0 : 1);  // vsync when interactive

    IMGUI_CHECKVERSION();
    ImGui::CreateContext();
    ImGuiIO& io = ImGui::GetIO();
    io.IniFilename = nullptr;  // fixed layout: nothing to remember between runs
    io.ConfigFlags |= ImGuiConfigFlags_NavEnableKeyboard;
    ui::apply_theme();
    ImGui_ImplGlfw_InitForOpenGL(win, false);
    glfwSetCursorPosCallback(win, on_cursor_pos);
    glfwSetMouseButtonCallback(win, on_mouse_button);
    glfwSetScrollCallback(win, on_scroll);
    glfwSetKeyCallback(win, on_key);
    glfwSetCharCallback(win, on_char);
    glfwSetWindowFocusCallback(win, on_focus);
    glfwSetCursorEnterCallback(win, on_enter);
    glfwSetWindowSizeCallback(win, on_window_event);
    glfwSetFramebufferSizeCallback(win, on_window_event);
    glfwSetWindowRefreshCallback(win, on_refresh);
    ImGui_ImplOpenGL3_Init("#version 130");

    ui::Frame frame;
    int busy = 3;  // frames still to draw after the last event (ImGui settles over a few)
    int drawn = 0;
    int idle_frames = 0;  // screenshots: frames drawn since background work ended
    bool settle_timed_out = false;
    const auto settle_deadline =
        std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                               std::chrono::duration<double>(opt.settle_timeout_s));
    for (;;) {
        // Closing the window (or Ctrl+Q) asks about unsaved changes first (job_file_model.h):
        // the job panel draws the prompt, and s.file.quit_now ends the loop.
        if (glfwWindowShouldClose(win)) {
            glfwSetWindowShouldClose(win, GLFW_FALSE);
            request_quit(s);
            g_activity = 1;
        }
        if (s.file.quit_now) break;
        if (shooting || busy > 0) glfwPollEvents();
        else if (const double wake = studio_wakeup_s(s); wake > 0) glfwWaitEventsTimeout(wake);
        else glfwWaitEventsTimeout(0.5);  // idle: wakes twice a second and draws nothing
        if (studio_tick(s)) g_activity = 1;
        if (g_activity) {
            g_activity = 0;
            busy = 3;
        } else if (busy > 0) {
            --busy;
        } else if (!shooting && !io.WantTextInput) {
            continue;  // woke up from the timeout with nothing to do: draw nothing
        }

        ImGui_ImplOpenGL3_NewFrame();
        ImGui_ImplGlfw_NewFrame();
        if (shooting)
            io.MousePos = opt.mouse_x >= 0 && opt.mouse_y >= 0 ? ImVec2(opt.mouse_x, opt.mouse_y)
                                                               : ImVec2(-FLT_MAX, -FLT_MAX);
        ImGui::NewFrame();
        ui::draw_studio(s, frame);
        ImGui::Render();
        if (std::string t = "PTD Studio - " + job_title(s); t != title) {
            title = std::move(t);
            glfwSetWindowTitle(win, title.c_str());
        }

        int fb_w = 0, fb_h = 0;
        glfwGetFramebufferSize(win, &fb_w, &fb_h);
        glViewport(0, 0, fb_w, fb_h);
        glClearColor(20 / 255.f, 22 / 255.f, 27 / 255.f, 1.0f);
        glClear(GL_COLOR_BUFFER_BIT);
        ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());

        // A screenshot shows the settled window: background work (a planner search, a
        // launched run) finished and `frames` frames drawn since. While waiting, sleep
        // between frames so the studio does not take the CPU from the work it waits for.
        if (shooting) {
            const bool background = studio_wakeup_s(s) > 0;
            idle_frames = background ? 0 : idle_frames + 1;
            if (background && !settle_timed_out && std::chrono::steady_clock::now() > settle_deadline) {
                std::fprintf(stderr, "ptd-studio: screenshot: background work still running after %.0f s; taking it now\n",
                             opt.settle_timeout_s);
                settle_timed_out = true;
            }
            if (background && !settle_timed_out) std::this_thread::sleep_for(std::chrono::milliseconds(40));
        }
        if (shooting && ++drawn >= opt.frames && (idle_frames >= opt.frames || settle_timed_out)) {
            const Image img = read_back_buffer(fb_w, fb_h);
            std::string err;
            if (write_png(opt.screenshot, img, &err)) {
                std::printf("screenshot: %d\xC3\x97%d, %zu distinct colours, %s\n", img.width, img.height,
                            distinct_colours(img), opt.screenshot.c_str());
            } else {
                std::fprintf(stderr, "ptd-studio: %s\n", err.c_str());
                res.exit_code = 1;
            }
            break;
        }
        glfwSwapBuffers(win);
    }

    ImGui_ImplOpenGL3_Shutdown();
    ImGui_ImplGlfw_Shutdown();
    ImGui::DestroyContext();
    glfwDestroyWindow(win);
    glfwTerminate();
    return res;
}

}  // namespace ptd::studio
