// chrome_trace.cpp — timeline blocks (predicted or measured) as Chrome trace JSON, for
// chrome://tracing and Perfetto.
#include "ptd/timeline/timeline.h"

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

namespace ptd {

// ---- Chrome trace JSON -----------------------------------------------------------------

std::string chrome_trace_json(const std::vector<TimelineBlock>& blocks, const char* what) {
    using nlohmann::json;
    json events = json::array();
    std::vector<std::pair<int, int>> tracks;  // (pid, tid) seen
    std::vector<int> pids;
    for (const TimelineBlock& b : blocks) {
        if (std::find(pids.begin(), pids.end(), b.row) == pids.end()) pids.push_back(b.row);
        const std::pair<int, int> tr{b.row, b.stream};
        if (std::find(tracks.begin(), tracks.end(), tr) == tracks.end()) tracks.push_back(tr);
    }
    std::sort(pids.begin(), pids.end());
    std::sort(tracks.begin(), tracks.end());
    for (int pid : pids) {
        events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0},
                          {"args", {{"name", std::string(what) + " " + std::to_string(pid)}}}});
        events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", pid}}}});
    }
    for (auto [pid, tid] : tracks)
        events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                          {"args", {{"name", tid == kStreamCompute ? "compute" : tid == kStreamComm ? "communication" : "stream " + std::to_string(tid)}}}});
    auto us = [](double s) { return s * 1e6; };
    const bool chunked = std::any_of(blocks.begin(), blocks.end(), [](const TimelineBlock& b) { return b.chunk > 0; });
    // A predicted backward's recompute part is a block of its own just before it (same row,
    // micro-batch and chunk, ending where the backward starts): the backward's slice spans
    // both and the recompute is nested in it, as in a measured trace (the engine's
    // recompute forwards run inside its backward blocks). The recompute slice is written
    // after its parent so viewers that nest by order see it inside.
    std::vector<int> recompute_of(blocks.size(), -1);
    std::vector<char> deferred(blocks.size(), 0);
    for (size_t i = 0; i + 1 < blocks.size(); ++i) {
        const TimelineBlock &r = blocks[i], &b = blocks[i + 1];
        if (r.kind == BlockKind::recompute && b.kind == BlockKind::backward && r.row == b.row && r.stream == b.stream &&
            r.micro_batch == b.micro_batch && r.chunk == b.chunk && r.step == b.step && r.end_s == b.start_s) {
            recompute_of[i + 1] = (int)i;
            deferred[i] = 1;
        }
    }
    for (size_t bi = 0; bi < blocks.size(); ++bi) {
        if (deferred[bi]) continue;
        const int nested = recompute_of[bi];
        const int passes = nested >= 0 ? 2 : 1;
        for (int pass = 0; pass < passes; ++pass) {
            const TimelineBlock& b = pass == 0 ? blocks[bi] : blocks[(size_t)nested];
            const double slice_start = pass == 0 && nested >= 0 ? blocks[(size_t)nested].start_s : b.start_s;
            std::string name = block_kind_name(b.kind);
            if (b.micro_batch >= 0) name += " mb " + std::to_string(b.micro_batch);
            if (chunked && b.chunk >= 0) name += " chunk " + std::to_string(b.chunk);
            json args = {{"step", b.step}};
            if (b.micro_batch >= 0) args["micro_batch"] = b.micro_batch;
            if (b.chunk >= 0) args["chunk"] = b.chunk;
            if (b.overlapped_s > 0) args["overlapped_ms"] = b.overlapped_s * 1e3;
            events.push_back({{"name", name}, {"cat", block_kind_name(b.kind)}, {"ph", "X"}, {"ts", us(slice_start)},
                              {"dur", us(b.end_s - slice_start)}, {"pid", b.row}, {"tid", b.stream}, {"args", args}});
            // Predicted blocks: their parts as nested slices (compute first, then the
            // communication inside the block, the p2p hop last).
            const double parts[] = {b.compute_s, b.tp_s, b.cp_s, b.ep_s, b.p2p_s};
            const char* names[] = {"compute", "TP comm", "CP comm", "EP all-to-all", "p2p"};
            int nonzero = 0;
            for (double x : parts) nonzero += x > 0;
            if (nonzero < 2) continue;
            double at = b.start_s;
            for (int k = 0; k < 5; ++k) {
                if (parts[k] <= 0) continue;
                events.push_back({{"name", names[k]}, {"cat", "part"}, {"ph", "X"}, {"ts", us(at)}, {"dur", us(parts[k])},
                                  {"pid", b.row}, {"tid", b.stream}});
                at += parts[k];
            }
        }
    }
    json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
    return doc.dump(1) + "\n";
}

}  // namespace ptd
