// outliers.h — the one robust rule PTD uses to call a member of a set of peers slow: a
// host at GEMMs or over its links (the preflight, ptd calibrate --check) and a rank against
// the ranks of its pipeline stage (stragglers in a run's measured timeline). One rule, so
// "slow" means the same everywhere (docs/launcher.md, "Preflight" and "Stragglers").
#pragma once

#include <vector>

namespace ptd {

// Each peer has a time ratio (any positive time measure of the same work; larger = slower).
// A peer is flagged when its value exceeds the median m by more than kSlowMads robust
// standard deviations (1.4826 · MAD over the peers: the MAD of a normal sample, scaled to
// its standard deviation; Rousseeuw & Croux 1993, Leys et al. 2013, who recommend 3 as the
// cut-off) AND is at least kSlowMinSlower above m. With fewer than 3 peers the MAD says
// nothing: the fastest is the reference, and only the second rule applies.
inline constexpr double kSlowMads = 3.0;
inline constexpr double kSlowMinSlower = 0.15;

// The median (the mean of the middle two for an even count); 0 for none.
double median(std::vector<double> values);

struct SlowVerdict {
    double slower = 0;    // value / reference − 1: 0.31 = 31 % slower
    bool flagged = false;
};
std::vector<SlowVerdict> flag_slow(const std::vector<double>& values);

}  // namespace ptd
