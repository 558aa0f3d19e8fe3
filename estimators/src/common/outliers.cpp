// outliers.cpp — the robust "slower than its peers" rule (outliers.h): median and MAD, or
// the fastest of fewer than three.
#include "ptd/common/outliers.h"

#include <utility>

#include "ptd/common/sample_stats.h"

#include <algorithm>
#include <cmath>

namespace ptd {

double median(std::vector<double> x) { return quantile(std::move(x), 0.5); }

std::vector<SlowVerdict> flag_slow(const std::vector<double>& values) {
    std::vector<SlowVerdict> v(values.size());
    if (values.empty()) return v;
    const bool robust = values.size() >= 3;
    const double ref = robust ? median(values) : *std::min_element(values.begin(), values.end());
    double sigma = 0;
    if (robust) {
        std::vector<double> dev;
        for (double r : values) dev.push_back(std::abs(r - ref));
        sigma = 1.4826 * median(dev);  // MAD as a standard deviation of a normal sample
    }
    for (size_t i = 0; i < values.size(); ++i) {
        v[i].slower = ref > 0 ? values[i] / ref - 1 : 0;
        const bool far = !robust || values[i] - ref > kSlowMads * sigma;
        v[i].flagged = far && v[i].slower >= kSlowMinSlower;
    }
    return v;
}

}  // namespace ptd
