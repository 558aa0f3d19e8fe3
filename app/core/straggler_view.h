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

}  // namespace ptd
