// compare_view.h — two layouts side by side (issue 33 point 5): memory per stage, every
// step-time term, tokens/s, MFU and whether the job's framework exports it, each row with
// the two values and whether they differ. `ptd estimate A.toml B.toml` prints it (text or
// --json, schema ptd.estimate-compare/1); the studio's Compare view draws the same rows, so
// the terminal and the window cannot disagree.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ptd/model/estimate.h"
#include "ptd/spec/job_spec.h"
#include "term.h"

namespace ptd {

// One side: a job (with its layout) and its estimate.
struct CompareSide {
    std::string name;  // what the user called it: a file name, "current job", "plan row 3"
    JobSpec job;
    Estimate est;
};

// One row of the comparison. `a` and `b` are the values as shown; `va`, `vb` the numbers
// behind them (NaN for text rows). `differs`: the values are not the same (numbers: more
// than 0.5% apart). `better`: which side is better on this row (-1 a, +1 b, 0 neither or
// not a figure with a direction).
struct CompareRow {
    std::string section;  // "layout", "memory", "step time", "speed", "export"
    std::string label;
    std::string a, b;
    double va = 0, vb = 0;
    bool differs = false;
    int better = 0;
};

// The rows, in order: layout (degrees, micro-batch, recompute, ZeRO), memory per stage
// (GiB; stages past the shorter pipeline show "-") and fits, step time and each of its
// terms, tokens/s, MFU, and the export to the job's framework (yes, or the refusal).
std::vector<CompareRow> compare_rows(const CompareSide& a, const CompareSide& b);

// The rows as a table, differing rows marked "*" (bold on a terminal) and the better side
// in green.
std::string render_compare_text(const CompareSide& a, const CompareSide& b, const Term& term);
// {"schema": "ptd.estimate-compare/1", "a": {...}, "b": {...}, "rows": [{section, label,
// a, b, differs, better}, ...], "differences": N}; a and b are the estimates as `ptd
// estimate --json` writes them.
nlohmann::json compare_json(const CompareSide& a, const CompareSide& b);

}  // namespace ptd
