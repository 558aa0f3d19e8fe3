// straggler_view.h — the end of `ptd launch` and `ptd watch`: which rank (and host) of the
// run computed slower than the ranks of its pipeline stage, from its measured timeline
// (ptd/timeline/stragglers.h), in words a user can act on.
#pragma once

#include <string>

#include "ptd/run_dir.h"
#include "ptd/timeline/stragglers.h"
#include "term.h"

namespace ptd {

// "" when the run recorded no timeline (or none of it yet); else one line per slow rank
// with its host and by how much, or one line saying none is.
std::string straggler_text(const StragglerReport& report, const RunManifest& manifest, const Term& t);
// The same from a run directory (its timeline/ as far as written, and its manifest).
std::string run_straggler_text(const std::string& run_dir, const RunManifest& manifest, const Term& t);

// For a live dashboard: the run's straggler lines, read again at most every `every_s`
// seconds (a frame is drawn several times a second; the timeline grows once a step).
class LiveStragglers {
public:
    explicit LiveStragglers(double every_s = 2.0) : every_s_(every_s) {}
    const std::string& text(const std::string& run_dir, const RunManifest& manifest, const Term& t);

private:
    double every_s_;
    double read_at_ = -1e300;
    std::string text_;
};

}  // namespace ptd
