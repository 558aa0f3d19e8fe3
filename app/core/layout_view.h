// layout_view.h — the rank layout for people (a node grid in the terminal) and for
// programs (stable JSON, schema "ptd.layout/1", documented in docs/cli.md).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ptd/hostfile.h"
#include "ptd/spec/job_spec.h"
#include "group_colours.h"
#include "ptd/layout/job_layout.h"  // job_layout: the layout these views draw
#include "ptd/layout/layout.h"
#include "term.h"

namespace ptd {

struct LayoutViewOptions {
    ColorBy color_by = ColorBy::tp;
    int max_nodes = 16;  // nodes drawn before eliding the middle; 0 = all
};

// Node grid + legend + group summary + warnings, ending in a newline.
std::string render_layout_text(const JobSpec& job, const RankLayout& layout,
                               const std::vector<HostEntry>& hosts, const LayoutViewOptions& opt,
                               const Term& term);

nlohmann::json layout_json(const JobSpec& job, const RankLayout& layout, const std::vector<HostEntry>& hosts);

// A few lines: model (with parameter count), cluster, parallel degrees, batch.
std::string job_summary_text(const JobSpec& job, const Term& term);
nlohmann::json job_json(const JobSpec& job);

// mlaio: the shape keys of recent open models that the model sets (head_dim ≠ hidden/heads,
// MLA ranks, routed experts' width, shared experts, dense first layers, MTP), as one line for
// the CLI summaries and the studio's job panel; "" for the classic layout.
std::string model_shape_details(const ModelSpec& m);
// The same keys for JSON (only those set), merged into a model object.
void add_model_shape_json(nlohmann::json& model, const ModelSpec& m);

}  // namespace ptd
