// bench_timeline.cpp — the cost of recording the measured timeline, without the noise of a
// whole training run: one step's worth of blocks recorded the way ptd-engine does it
// (engine/src/timing.h: TimelineRecorder::add, a steady-clock read and a vector push per
// block, around work of zero length) and then written and flushed through TimelineWriter
// (estimators, the same code the trainer's write_timeline_step calls), repeated; the median
// per step. Compare with a step time: the figure is what --timeline-all adds to each step
// of each rank. Prints figures only (no assertions).
//
//   ./build/bin/bench_timeline [BLOCKS_PER_STEP] [STEPS]     (defaults 88, 2000: the tiny
//   8-rank job with recompute off records 88 blocks per rank and step)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "timing.h"  // engine/src: TimelineRecorder, the trainer's recorder

int main(int argc, char** argv) {
    using namespace ptd;
    using ptd::engine::clock_type;
    const int blocks = argc > 1 ? std::atoi(argv[1]) : 88;
    const int steps = argc > 2 ? std::atoi(argv[2]) : 2000;
    if (blocks < 1 || steps < 1) {
        std::fprintf(stderr, "usage: bench_timeline [BLOCKS_PER_STEP ≥ 1] [STEPS ≥ 1]\n");
        return 2;
    }
    const std::string dir = (std::filesystem::temp_directory_path() / ("ptd-bench-timeline-" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(dir);
    auto w = TimelineWriter::open(dir + "/" + timeline_file_name(0), {0, 0, 0, 0, 0});
    if (!w) {
        std::fprintf(stderr, "%s", w.error().str().c_str());
        return 1;
    }
    std::vector<double> record_s, write_s;
    size_t reserve = 0;
    const int64_t epoch = 1'700'000'000'000'000'000;
    const auto t_base = clock_type::now();
    for (int step = 0; step < steps; ++step) {
        engine::TimelineRecorder rec;
        rec.blocks.reserve(reserve);
        const auto t0 = clock_type::now();
        for (int b = 0; b < blocks; ++b) rec.add(BlockKind::forward, b % 8, 0, b % 2, clock_type::now());
        const auto t1 = clock_type::now();
        for (const engine::RecordedBlock& b : rec.blocks)
            w->record(b.kind, step, b.micro_batch, b.chunk, b.stream,
                      epoch + std::chrono::duration_cast<std::chrono::nanoseconds>(b.start - t_base).count(),
                      epoch + std::chrono::duration_cast<std::chrono::nanoseconds>(b.end - t_base).count());
        if (auto ok = w->flush(); !ok) {
            std::fprintf(stderr, "%s", ok.error().str().c_str());
            return 1;
        }
        const auto t2 = clock_type::now();
        reserve = std::max(reserve, rec.blocks.size());
        record_s.push_back(std::chrono::duration<double>(t1 - t0).count());
        write_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    }
    (void)w->close();
    std::filesystem::remove_all(dir);
    auto median = [](std::vector<double> v) {
        std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
        return v[v.size() / 2];
    };
    const double rec_us = median(record_s) * 1e6, wr_us = median(write_s) * 1e6;
    std::printf("timeline recording: %d blocks per step, median over %d steps: record %.1f us (%.0f ns per block), "
                "write + flush %.1f us; total %.1f us per step and rank\n",
                blocks, steps, rec_us, rec_us * 1e3 / blocks, wr_us, rec_us + wr_us);
    for (double step_ms : {10.0, 67.4, 300.0})
        std::printf("  = %.3f%% of a %.1f ms step\n", (rec_us + wr_us) / (step_ms * 1e3) * 100, step_ms);
    return 0;
}
