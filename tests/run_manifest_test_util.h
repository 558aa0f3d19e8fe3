// run_manifest_test_util.h — the rank table of a run manifest (ptd.run/1) as the launcher
// writes it, for the tests that build a manifest by hand (run directories, the studio's Live tab).
#pragma once

#include <vector>

#include "ptd/run_dir.h"

namespace ptd_test {

// The ranks of a tp × dp × pp run in Megatron's order (rank = tp + t·dp + t·d·pp), `per_host`
// consecutive ranks a host.
inline std::vector<ptd::RunManifestRank> manifest_ranks(int tp, int dp, int pp, int per_host) {
    std::vector<ptd::RunManifestRank> ranks;
    for (int r = 0; r < tp * dp * pp; ++r) {
        ptd::RunManifestRank mr;
        mr.rank = r;
        mr.host = r / per_host;
        mr.local_rank = r % per_host;
        mr.tp = r % tp;
        mr.dp = (r / tp) % dp;
        mr.pp = r / (tp * dp);
        ranks.push_back(mr);
    }
    return ranks;
}

}  // namespace ptd_test
