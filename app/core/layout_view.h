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

// Every degree the job's layout has, for headlines: "tp 2 × cp 1 × dp 32 × pp 4", then
// ", ep 8" (ep > 1), ", expert tp 1" (expert_tp ≠ tp), ", vpp 5" (vpp > 1). The first four
// multiply to the world; ep and expert tp regroup ranks inside it.
std::string layout_degrees_text(const JobSpec& job, const RankLayout& layout);

// The groups that span nodes, by kind: TP, CP, EP and (expert_tp ≠ tp) expert TP. Their
// collectives are the ones on the critical path of each layer (TP all-reduces, CP's ring
// of keys and values, EP's token all-to-all), so each kind with any group across nodes gets
// one warning line naming how many, what crosses and the two link speeds. `ptd layout`
// and the studio's grid print the same lines.
struct SpanningGroups {
    const char* kind;   // "TP", "CP", "EP", "expert TP"
    int spanning = 0;   // groups that cover more than one node
    int count = 0;      // groups of this kind
};
std::vector<SpanningGroups> spanning_groups(const RankLayout& layout);
std::vector<std::string> layout_span_warnings(const JobSpec& job, const RankLayout& layout);

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
