// bench_studio.cpp — CPU time of one ptd-studio UI frame (ImGui::NewFrame → draw_studio →
// ImGui::Render, i.e. everything but the OpenGL upload and the buffer swap) for the
// heavy cases of issue 9: the rank layout of a 16,384-rank job and the Live tab with 64
// ranks × 10,000 steps. No window: an ImGui context with a built font atlas and a fixed
// display size is all the panels need, so it runs anywhere (CI, ssh, no GPU).
//
//   bench_studio [--frames N] [--width W --height H]
//
// Prints, per scenario, the median and 95th percentile of the frame's thread CPU time and
// wall time over N frames (after 10 warm-up frames), and the vertices ImGui produced.
// Target: under 8 ms per frame.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <time.h>

#include <imgui.h>

#include "ptd/spec/job_spec.h"
#include "ptd/spec/presets.h"
#include "studio_state.h"
#include "ui.h"

using namespace ptd;
using namespace ptd::studio;

namespace {

double thread_cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

double wall_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t i = std::min(v.size() - 1, (size_t)std::lround(p * (double)(v.size() - 1)));
    return v[i];
}

struct Scenario {
    const char* name;
    StudioState* state;
    ImVec2 mouse;                               // (-1, -1) = no mouse
    std::function<void(StudioState&, int)> before_frame;  // e.g. new steps arriving
};

// 64 ranks (tp 4 × pp 2 × dp 8 on 8 hosts), `steps` steps each, with memory by category.
RunManifest synthetic_manifest(int ranks, int steps) {
    RunManifest m;
    m.run_id = "bench-run";
    m.job_name = "synthetic";
    m.state = "running";
    m.world_size = ranks;
    m.steps = steps;
    for (int h = 0; h < ranks / 8; ++h) m.hosts.push_back("node-" + std::to_string(h));
    for (int r = 0; r < ranks; ++r) {
        RunManifestRank mr;
        mr.rank = r;
        mr.host = r / 8;
        mr.local_rank = r % 8;
        mr.tp = r % 4;
        mr.dp = (r / 4) % 8;
        mr.pp = r / 32;
        mr.pid = 1000 + r;
        m.ranks.push_back(mr);
    }
    return m;
}

LaunchEvent synthetic_step(int rank, int step) {
    MetricRecord m;
    m.kind = MetricKind::step;
    m.rank = rank;
    m.step = step;
    const double t = step * 0.001;
    m.loss = 2.0 + 8.0 * std::exp(-t * 3) + 0.05 * std::sin(step * 0.37 + rank);
    m.tokens_per_s = 24000 + 800 * std::sin(step * 0.05 + rank * 0.3) + (step % 997 == 0 ? -9000 : 0);
    m.mfu = m.tokens_per_s / 60000.0;
    m.has_memory = true;
    const double gib = 1024.0 * 1024 * 1024;
    const double stage = rank / 32;
    const double base[MEM_CAT_COUNT] = {4 * gib, 4 * gib, 8 * gib, (12 - 4 * stage) * gib, 0.5 * gib, 1 * gib, 0};
    double total = 0;
    for (int c = 0; c < MEM_TOTAL; ++c) {
        const double wobble = c == MEM_ACTIVATIONS || c == MEM_WORKSPACE ? 0.03 * std::sin(step * 0.11 + rank) : 0;
        m.memory[(size_t)c].current = base[c] * (1 + wobble);
        m.memory[(size_t)c].peak = base[c] * 1.05;
        if (c < MEM_COMMUNICATION) m.memory[(size_t)c].predicted = base[c];
        total += m.memory[(size_t)c].current;
    }
    m.memory[MEM_TOTAL].current = total;
    m.memory[MEM_TOTAL].peak = total * 1.02;
    m.memory[MEM_TOTAL].predicted = 29 * gib - 4 * stage * gib;
    LaunchEvent ev;
    ev.kind = LaunchEventKind::metric;
    ev.rank = rank;
    ev.metric = m;
    return ev;
}

void fill_live_run(StudioState& s, int ranks, int steps) {
    live_begin(s.live.run, synthetic_manifest(ranks, steps + 10000));
    for (int r = 0; r < ranks; ++r) {
        LaunchEvent started;
        started.kind = LaunchEventKind::rank_started;
        started.rank = r;
        started.pid = 1000 + r;
        live_apply(s.live.run, started);
    }
    for (int step = 1; step <= steps; ++step)
        for (int r = 0; r < ranks; ++r) live_apply(s.live.run, synthetic_step(r, step));
}

void frame(StudioState& s, ImVec2 mouse, const ui::Frame& f) {
    ImGuiIO& io = ImGui::GetIO();
    io.DeltaTime = 1.0f / 60;
    io.MousePos = mouse.x >= 0 ? mouse : ImVec2(-FLT_MAX, -FLT_MAX);
    ImGui::NewFrame();
    ui::draw_studio(s, f);
    ImGui::Render();
}

// The middle of a cell of the layout grid on screen, so the hover path (the tooltip and the
// outlines of the rank's groups) is timed; (-1, -1) if no cell was found. grid_geometry
// places cells relative to the canvas, whose screen origin only the panel knows: move the
// mouse right along a line until the panel reports a hovered rank, step back to the cell's
// left and top edges, and go to the middle from there.
ImVec2 mouse_over_a_cell(StudioState& s, const ui::Frame& f, float width, float height) {
    auto hovered_at = [&](float x, float y) {
        frame(s, ImVec2(x, y), f);
        return s.view.hover;
    };
    for (float y = std::floor(height * 0.5f); y < height * 0.6f; y += 5) {
        for (float x = 0; x < width; x += 3) {
            const int r = hovered_at(x, y);
            if (r < 0) continue;
            float left = x, top = y;
            while (left > 0 && hovered_at(left - 1, y) == r) --left;
            while (top > 0 && hovered_at(left, top - 1) == r) --top;
            const GridGeometry g = grid_geometry(s);
            return ImVec2(left + std::floor(g.cell_w * 0.5f), top + std::floor(g.cell_h * 0.5f));
        }
    }
    return ImVec2(-1, -1);
}

}  // namespace

int main(int argc, char** argv) {
    int frames = 200;
    float width = 1600, height = 1000;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--frames") && i + 1 < argc) frames = std::max(1, std::atoi(argv[++i]));
        else if (!std::strcmp(argv[i], "--width") && i + 1 < argc) width = (float)std::atof(argv[++i]);
        else if (!std::strcmp(argv[i], "--height") && i + 1 < argc) height = (float)std::atof(argv[++i]);
        else {
            std::fprintf(stderr, "usage: bench_studio [--frames N] [--width W --height H]\n");
            return 2;
        }
    }

    IMGUI_CHECKVERSION();
    ImGui::CreateContext();
    ImGuiIO& io = ImGui::GetIO();
    io.IniFilename = nullptr;
    io.DisplaySize = ImVec2(width, height);
    // The OpenGL3 backend sets this; without it a frame is limited to 64K vertices per list.
    io.BackendFlags |= ImGuiBackendFlags_RendererHasVtxOffset;
    unsigned char* pixels = nullptr;
    int tw = 0, th = 0;
    io.Fonts->GetTexDataAsRGBA32(&pixels, &tw, &th);  // builds the atlas; no texture needed
    ui::apply_theme();

    const PresetCatalog& presets = embedded_presets();
    // 1. The default job (7B) on 2048 nodes × 8 GPUs with tp 8 × pp 8 (dp 256, which the
    //    default global batch of 256 divides): 16,384 ranks, as tests/studio_screenshot.sh.
    StudioState layout = make_state(presets, default_job(presets));
    edit_int(layout, "cluster.nodes", 2048);
    edit_int(layout, "parallel.tp", 8);
    edit_int(layout, "parallel.pp", 8);
    if (!job_valid(layout) || layout.layout->world != 16384) {
        std::fprintf(stderr, "bench_studio: the 16,384-rank job is not valid\n");
        return 1;
    }
    layout.select_tab = MainTab::layout;
    StudioState layout_hover = layout;

    // 2. The Live tab: 64 ranks × 10,000 steps.
    const double t0 = wall_ms();
    StudioState live = make_state(presets, default_job(presets));
    fill_live_run(live, 64, 10000);
    live.select_tab = MainTab::live;
    std::printf("synthetic run: 64 ranks x 10,000 steps folded in %.0f ms\n", wall_ms() - t0);
    StudioState live_grouped = live;
    live_set_aggregate(live_grouped.live, LiveAggregate::tp_group);
    StudioState live_streaming = live;
    int next_step = 10001;

    ui::Frame f;
    const ImVec2 cell = mouse_over_a_cell(layout_hover, f, width, height);
    if (cell.x >= 0) frame(layout_hover, cell, f);
    if (cell.x < 0 || layout_hover.view.hover < 0) {
        std::fprintf(stderr, "bench_studio: found no cell of the layout grid to hover\n");
        return 1;
    }
    std::printf("layout: the mouse hovers rank %d at (%.0f, %.0f)\n", layout_hover.view.hover, cell.x, cell.y);

    const float plot_x = width * 0.75f, plot_y = height * 0.4f;  // over the tokens/s plot (crosshair + readout)
    std::vector<Scenario> scenarios = {
        {"layout, 16,384 ranks", &layout, ImVec2(-1, -1), nullptr},
        {"layout, 16,384 ranks, mouse over a rank", &layout_hover, cell, nullptr},
        {"live, 64 ranks x 10,000 steps, per rank", &live, ImVec2(-1, -1), nullptr},
        {"live, same, hovering a plot", &live, ImVec2(plot_x, plot_y), nullptr},
        {"live, same, by TP group (16 medians, bands)", &live_grouped, ImVec2(-1, -1), nullptr},
        {"live, streaming: +1 step on all 64 ranks per frame", &live_streaming, ImVec2(-1, -1),
         [&](StudioState& s, int) {
             for (int r = 0; r < 64; ++r) live_apply(s.live.run, synthetic_step(r, next_step));
             ++next_step;
         }},
    };

    std::printf("frame = ImGui::NewFrame + draw_studio + ImGui::Render at %.0fx%.0f, %d frames after 10 warm-up frames\n\n",
                width, height, frames);
    std::printf("%-52s %10s %10s %10s %10s %9s\n", "scenario", "cpu med", "cpu p95", "wall med", "wall p95", "vertices");
    std::string over;
    for (Scenario& sc : scenarios) {
        for (int i = 0; i < 10; ++i) {
            if (sc.before_frame) sc.before_frame(*sc.state, i);
            frame(*sc.state, sc.mouse, f);
        }
        std::vector<double> cpu, wall;
        int vertices = 0;
        for (int i = 0; i < frames; ++i) {
            if (sc.before_frame) sc.before_frame(*sc.state, i);  // data arriving: not part of the frame
            const double c0 = thread_cpu_ms(), w0 = wall_ms();
            frame(*sc.state, sc.mouse, f);
            cpu.push_back(thread_cpu_ms() - c0);
            wall.push_back(wall_ms() - w0);
            vertices = ImGui::GetDrawData()->TotalVtxCount;
        }
        const double med = percentile(cpu, 0.5), p95 = percentile(cpu, 0.95);
        if (med > 8.0) over += std::string(over.empty() ? "" : "; ") + sc.name;
        std::printf("%-52s %7.2f ms %7.2f ms %7.2f ms %7.2f ms %9d\n", sc.name, med, p95, percentile(wall, 0.5),
                    percentile(wall, 0.95), vertices);
    }
    std::printf("\ntarget: median under 8 ms per frame: %s%s\n", over.empty() ? "met" : "missed by: ", over.c_str());
    ImGui::DestroyContext();
    return 0;
}
