// sample_stats.h — the statistics of a set of timings that every part of PTD reads the same
// way: a quantile (linear between order statistics, NumPy's default), and the median,
// spread and mean of timed repeats as the probes report them and the profile keeps them.
#pragma once

#include <vector>

namespace ptd {

// The q-quantile of `values` (q in [0, 1]; 0.5 = the median), linear between order
// statistics (Hyndman & Fan type 7); 0 for none.
double quantile(std::vector<double> values, double q);

// Median, spread (interquartile range / median) and mean of timed repeats, seconds. The
// mean is what a step that calls the op many times pays per call: on shared cores the
// times are heavy-tailed (a collective waits whenever a peer is descheduled).
struct SampleStats {
    double median_s = 0, spread = 0, mean_s = 0;
    int repeats = 0;
};
SampleStats sample_stats(const std::vector<double>& seconds);

}  // namespace ptd
