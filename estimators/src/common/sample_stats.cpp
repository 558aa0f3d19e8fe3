// sample_stats.cpp — quantiles and the median / spread / mean of timed repeats (sample_stats.h).
#include "ptd/common/sample_stats.h"

#include <algorithm>
#include <cmath>

namespace ptd {

double quantile(std::vector<double> values, double q) {
    if (values.empty()) return 0;
    std::sort(values.begin(), values.end());
    const double at = std::clamp(q, 0.0, 1.0) * (double)(values.size() - 1);
    const size_t lo = (size_t)std::floor(at), hi = std::min(lo + 1, values.size() - 1);
    return values[lo] + (at - (double)lo) * (values[hi] - values[lo]);
}

SampleStats sample_stats(const std::vector<double>& seconds) {
    SampleStats st;
    st.repeats = (int)seconds.size();
    if (seconds.empty()) return st;
    st.median_s = quantile(seconds, 0.5);
    st.spread = st.median_s > 0 ? (quantile(seconds, 0.75) - quantile(seconds, 0.25)) / st.median_s : 0;
    double sum = 0;
    for (double s : seconds) sum += s;
    st.mean_s = sum / (double)seconds.size();
    return st;
}

}  // namespace ptd
