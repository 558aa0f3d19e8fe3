// bench_layout.cpp — how long make_layout takes for growing worlds. Prints figures only
// (no assertions): best-of-N milliseconds per build and ranks built per second.
//
//   ./build/bin/bench_layout            default repetitions
//   ./build/bin/bench_layout 50         50 repetitions per size
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ptd/layout/layout.h"

namespace {

struct Case {
    const char* name;
    ptd::LayoutRequest req;
};

}  // namespace

int main(int argc, char** argv) {
    int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 0;

    // TP 8 inside a node, PP 16, the rest data parallel (MoE cases add ep and cp).
    const Case cases[] = {
        {"tp8 pp16 dp8", {.tp = 8, .cp = 1, .dp = 8, .pp = 16}},
        {"tp8 pp16 dp128", {.tp = 8, .cp = 1, .dp = 128, .pp = 16}},
        {"tp8 pp16 dp1024", {.tp = 8, .cp = 1, .dp = 1024, .pp = 16}},
        {"tp8 cp2 pp16 dp512 ep8", {.tp = 8, .cp = 2, .dp = 512, .pp = 16, .ep = 8}},
        {"tp8 pp16 dp1024 order tp-pp-dp", {.tp = 8, .cp = 1, .dp = 1024, .pp = 16, .order = "tp-pp-dp"}},
        {"tp8 pp16 dp8192 (1M ranks)", {.tp = 8, .cp = 1, .dp = 8192, .pp = 16}},
    };

    std::printf("%-34s %10s %6s %12s %12s %14s\n", "layout", "ranks", "reps", "best ms", "median ms",
                "ranks/s (best)");
    for (const Case& c : cases) {
        const int world = c.req.tp * c.req.cp * c.req.dp * c.req.pp;
        const int n = reps > 0 ? reps : std::clamp(20'000'000 / std::max(world, 1), 5, 200);
        const int count = n;
        std::vector<double> times(static_cast<size_t>(count));
        long long checksum = 0;
        for (int i = 0; i < count; ++i) {
            auto t0 = std::chrono::steady_clock::now();
            auto layout = ptd::make_layout(c.req);
            auto t1 = std::chrono::steady_clock::now();
            if (!layout) {
                std::printf("%s: %s", c.name, layout.error().str().c_str());
                return 1;
            }
            checksum += layout->tp_groups_spanning_nodes + layout->groups[ptd::DIM_DP].members.back();
            times[i] = std::chrono::duration<double, std::milli>(t1 - t0).count();
        }
        std::sort(times.begin(), times.end());
        const double best = times[0], median = times[count / 2];
        std::printf("%-34s %10d %6d %12.3f %12.3f %14.3g\n", c.name, world, count, best, median,
                    world / (best / 1e3));
        if (checksum == -1) std::printf("(unreachable)\n");  // keeps the work observable
    }
    return 0;
}
