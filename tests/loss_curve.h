// loss_curve.h — a run's loss curve read back from its rank logs, for the restart tests
// (launcher/restart.cpp, test_launcher_slurm.cpp) that compare a disturbed run with an
// undisturbed one bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <utility>

#include "process_test_util.h"  // read_file
#include "ptd/metrics_event.h"

namespace ptd_test {

// (rank, step) → the loss and gradient norm of that step's last report, from the rank logs:
// a step trained again after a restart replaces the one the failure threw away.
using Curve = std::map<std::pair<int, int>, std::pair<double, double>>;
inline Curve loss_curve(const std::string& run_dir, int world) {
    Curve c;
    for (int r = 0; r < world; ++r) {
        std::istringstream lines(read_file(run_dir + "/rank-" + std::to_string(r) + ".log"));
        for (std::string l; std::getline(lines, l);)
            if (auto m = ptd::parse_metrics_line(l); m && m->kind == ptd::MetricKind::step) c[{r, m->step}] = {m->loss, m->grad_norm};
    }
    return c;
}

// Bit for bit: every rank's loss and gradient norm at every step of `got` equal `want`'s
// (EXPECT_EQ on the doubles), and `want` has `rank_steps` entries.
inline void expect_same_curve(const Curve& want, const Curve& got, size_t rank_steps) {
    ASSERT_EQ(want.size(), rank_steps);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [key, value] : want) {
        ASSERT_TRUE(got.count(key)) << "rank " << key.first << " step " << key.second;
        EXPECT_EQ(got.at(key).first, value.first) << "loss of rank " << key.first << " step " << key.second;
        EXPECT_EQ(got.at(key).second, value.second) << "grad norm of rank " << key.first << " step " << key.second;
    }
}

// After a resume at another dp (--exclude-failed): rank 0's loss at every step of `want`
// (an undisturbed run of `steps` steps) against `got`'s. Up to the first step after the
// checkpoint of `resumed_from` the same bits (the loaded weights alone); later within 1e-5
// relative, as the gradient sums run in another order (test_engine_train ResumeAtAnotherDp).
inline void expect_curve_after_reshard(const Curve& want, const Curve& got, int resumed_from, size_t steps) {
    ASSERT_EQ(want.size(), steps);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [key, value] : want) {
        ASSERT_TRUE(got.count(key)) << "rank " << key.first << " step " << key.second;
        if (key.second <= resumed_from + 1)
            EXPECT_EQ(got.at(key).first, value.first) << "step " << key.second;
        else
            EXPECT_NEAR(got.at(key).first, value.first, 1e-5 * std::abs(value.first)) << "step " << key.second;
    }
}

}  // namespace ptd_test
