// write_timeline_fixture.cpp — writes a measured timeline (timeline/rank-NNNNN.tsv) into
// RUN_DIR for JOB with TimelineWriter, for the studio screenshot and CLI tests until
// ptd-engine records real ones: each rank of DP replica 0 (tp = cp = 0) gets its stage's
// predicted blocks for two steps, the second with the last stage's backward blocks 1.5×
// as long and everything after them shifted — so "measured differs" has something to mark.
#include <cstdio>
#include <filesystem>

#include "ptd/model/estimate.h"
#include "ptd/layout/layout.h"
#include "ptd/spec/presets.h"
#include "ptd/timeline/timeline.h"

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: write_timeline_fixture JOB RUN_DIR\n");
        return 2;
    }
    auto job = ptd::load_job_file(argv[1], ptd::embedded_presets());
    if (!job) {
        std::fprintf(stderr, "%s", job.error().str().c_str());
        return 2;
    }
    const ptd::Timeline t = ptd::predicted_timeline(*job);
    const std::filesystem::path dir = std::filesystem::path(argv[2]) / "timeline";
    std::filesystem::create_directories(dir);
    ptd::LayoutRequest req;
    req.tp = job->parallel.tp, req.cp = job->parallel.cp, req.dp = job->parallel.dp, req.pp = job->parallel.pp;
    req.ep = job->parallel.ep, req.order = job->parallel.order, req.gpus_per_node = job->cluster.gpus_per_node;
    auto layout = ptd::make_layout(req);
    if (!layout) return 2;
    const double step_ns = t.makespan_s * 1.6e9;
    for (int stage = 0; stage < t.stages; ++stage) {
        const int rank = layout->rank_of(0, 0, 0, stage);
        auto w = ptd::TimelineWriter::open((dir / ptd::timeline_file_name(rank)).string(), {rank, stage, 0, 0, 0});
        if (!w) {
            std::fprintf(stderr, "%s", w.error().str().c_str());
            return 1;
        }
        for (int step = 0; step < 2; ++step) {
            double shift = 0;
            for (const ptd::TimelineBlock& b : t.blocks) {
                if (b.row != stage) continue;
                double dur = b.end_s - b.start_s;
                const double start = b.start_s + shift;
                if (step == 1 && stage == t.stages - 1 && b.kind == ptd::BlockKind::backward) {
                    shift += 0.5 * dur;
                    dur *= 1.5;
                }
                const double base = step * step_ns;
                w->record(b.kind, step, b.micro_batch, b.chunk, b.stream, (int64_t)(base + start * 1e9),
                          (int64_t)(base + (start + dur) * 1e9));
            }
        }
        if (auto r = w->close(); !r) {
            std::fprintf(stderr, "%s", r.error().str().c_str());
            return 1;
        }
    }
    std::printf("wrote %d rank files to %s\n", t.stages, dir.c_str());
    return 0;
}
