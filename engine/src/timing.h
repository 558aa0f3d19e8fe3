// timing.h — wall-clock helpers for the step's time split (metrics `time`): one clock, one
// "seconds since", and a scope that adds its duration to an accumulator.
#pragma once

#include <chrono>
#include <vector>

#include "ptd/timeline/timeline.h"

namespace ptd::engine {

using clock_type = std::chrono::steady_clock;

inline double since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Adds the seconds this object lived to *acc (nothing when acc is null).
struct ScopedSeconds {
    double* acc;
    clock_type::time_point t0 = clock_type::now();
    explicit ScopedSeconds(double* a) : acc(a) {}
    ~ScopedSeconds() {
        if (acc) *acc += since(t0);
    }
};

// The measured timeline of one step (docs/engine.md, "Measured timeline"): one vector
// push per block while the step runs, written through TimelineWriter after it, so the
// recording costs no I/O inside the step.
struct RecordedBlock {
    BlockKind kind;
    int micro_batch, chunk, stream;
    clock_type::time_point start, end;
};
struct TimelineRecorder {
    std::vector<RecordedBlock> blocks;
    void add(BlockKind kind, int micro_batch, int chunk, int stream, clock_type::time_point start) {
        blocks.push_back({kind, micro_batch, chunk, stream, start, clock_type::now()});
    }
};

// The time of one TP collective: added to the step's tp_comm and, on recorded steps, a
// `tp` block on the communication stream (docs/engine.md, "Measured timeline").
template <class Comm>
struct ScopedTpComm {
    const Comm& c;
    clock_type::time_point t0 = clock_type::now();
    explicit ScopedTpComm(const Comm& comm) : c(comm) {}
    ~ScopedTpComm() {
        if (c.tp_seconds) *c.tp_seconds += since(t0);
        if (c.timeline) c.timeline->add(BlockKind::tp_comm, c.micro_batch, c.chunk, kStreamComm, t0);
    }
};

}  // namespace ptd::engine
