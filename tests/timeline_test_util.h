// timeline_test_util.h — reading a simulated pipeline schedule back in the schedule tests:
// when a given block started.
#pragma once

#include <vector>

#include "ptd/timeline/timeline.h"

namespace ptd_test {

// The start of `pass` of micro-batch `mb` on `stage` among the placed blocks (-1 when absent).
inline double start_of(const std::vector<ptd::PlacedOp>& placed, int stage, ptd::Pass pass, int mb) {
    for (const ptd::PlacedOp& po : placed)
        if (po.stage == stage && po.op.pass == pass && po.op.micro_batch == mb) return po.start_s;
    return -1.0;
}

}  // namespace ptd_test
