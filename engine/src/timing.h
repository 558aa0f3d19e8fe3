// timing.h — wall-clock helpers for the step's time split (metrics `time`): one clock, one
// "seconds since", and a scope that adds its duration to an accumulator.
#pragma once

#include <chrono>

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

}  // namespace ptd::engine
