// layout_model.cpp — the rank-layout view's model: grid geometry, hit-testing, colours,
// group highlighting and pan/zoom, all arithmetic on the current RankLayout; the Live
// run's stragglers (read from its measured timeline) that the grid marks. The memory
// heat colours and the predicted memory in the tooltip come from memory_model.cpp.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "layout_view.h"
#include "run_view.h"
#include "studio_state.h"

namespace ptd::studio {

static constexpr float kMargin = 6;       // space between the label column / header and the cells
static constexpr float kFitMinCell = 28;  // "fit" never shrinks cells below readable rank numbers
static constexpr float kFitMaxCell = 150;

static float cell_h_for(float cw) { return std::max(4.0f, std::round(cw * 0.56f)); }
static float gap_x_for(float cw) { return std::max(1.0f, std::round(cw * 0.06f)); }
static float gap_y_for(float cw) { return std::max(3.0f, std::round(cw * 0.16f)); }

static float fit_cell_w(const LayoutViewState& v, int cols, int rows) {
    if (cols <= 0 || rows <= 0) return 48;
    const float avail_w = v.canvas_w - LayoutViewState::kLabelW - 2 * kMargin;
    const float avail_h = v.canvas_h - LayoutViewState::kHeaderH - 2 * kMargin;
    const float by_w = avail_w / ((float)cols * 1.06f);
    const float by_h = avail_h / ((float)rows * 0.72f);
    return std::clamp(std::floor(std::min(by_w, by_h)), kFitMinCell, kFitMaxCell);
}

static float cell_w_of(const StudioState& s, int cols, int rows) {
    return s.view.cell_w > 0 ? s.view.cell_w : fit_cell_w(s.view, cols, rows);
}

GridGeometry grid_geometry(const StudioState& s) {
    GridGeometry g;
    g.label_w = LayoutViewState::kLabelW;
    g.header_h = LayoutViewState::kHeaderH;
    if (!s.layout) return g;
    const RankLayout& L = *s.layout;
    g.cols = std::max(1, L.req.gpus_per_node);
    g.rows = L.nodes;
    g.world = L.world;
    g.cell_w = cell_w_of(s, g.cols, g.rows);
    g.cell_h = cell_h_for(g.cell_w);
    g.gap_x = gap_x_for(g.cell_w);
    g.gap_y = gap_y_for(g.cell_w);
    // "Fit" fills the canvas both ways (a wide cluster left the lower half empty with cells of
    // one shape): cells stretch to the canvas width (up to kFitMaxCell) and height (up to twice
    // as tall as wide); a grid too wide for readable cells scrolls sideways but still fills
    // the height, and one too tall for them scrolls down but still fills the width.
    if (s.view.cell_w <= 0) {
        const float avail_w = s.view.canvas_w - g.label_w - 2 * kMargin;
        const float avail_h = s.view.canvas_h - g.header_h - 2 * kMargin;
        const float fill_w = std::floor((avail_w + g.gap_x) / (float)g.cols - g.gap_x);
        const float fill_h = std::floor((avail_h + g.gap_y) / (float)g.rows - g.gap_y);
        g.cell_w = std::max(g.cell_w, std::min(fill_w, kFitMaxCell));
        g.cell_h = std::max(g.cell_h, std::min(fill_h, 2 * g.cell_w));
    }
    g.origin_x = g.label_w + kMargin - s.view.pan_x;
    g.origin_y = g.header_h + kMargin - s.view.pan_y;
    return g;
}

int pick_rank(const StudioState& s, float x, float y) {
    if (!s.layout) return -1;
    const GridGeometry g = grid_geometry(s);
    if (x < g.label_w || y < g.header_h || x >= s.view.canvas_w || y >= s.view.canvas_h) return -1;
    const float lx = x - g.origin_x, ly = y - g.origin_y;
    if (lx < 0 || ly < 0) return -1;
    const long long col = (long long)(lx / g.pitch_x());
    const long long row = (long long)(ly / g.pitch_y());
    if (col >= g.cols || row >= g.rows) return -1;
    if (lx - (float)col * g.pitch_x() >= g.cell_w || ly - (float)row * g.pitch_y() >= g.cell_h) return -1;
    const long long rank = row * g.cols + col;
    return rank < g.world ? (int)rank : -1;
}

int colour_index(const StudioState& s, int rank) {
    if (!s.layout || rank < 0 || rank >= s.layout->world) return 0;
    const RankLayout& L = *s.layout;
    switch (s.view.colour_by) {
        case ColourBy::tp: return group_colour_key(L, ColorBy::tp, rank);
        case ColourBy::dp: return group_colour_key(L, ColorBy::dp, rank);
        case ColourBy::cp: return group_colour_key(L, ColorBy::cp, rank);
        case ColourBy::ep: return L.ep_groups.group_of[rank];
        case ColourBy::expert_tp: {
            const int etp = folded_expert_tp(s);
            return etp > 0 ? rank / etp : group_colour_key(L, ColorBy::tp, rank);
        }
        case ColourBy::pp:
        case ColourBy::predicted_memory:
        case ColourBy::live_memory: return group_colour_key(L, ColorBy::pp, rank);
    }
    return 0;
}

Rgb cell_rgb(const StudioState& s, int rank) {
    switch (s.view.colour_by) {
        case ColourBy::predicted_memory: {
            const std::optional<double> f = predicted_rank_heat(s, rank);
            return f ? heat_rgb(*f) : kHeatNoData;
        }
        case ColourBy::live_memory: {
            const std::optional<double> f = live_rank_heat(s, rank);
            return f ? heat_rgb(*f) : kHeatNoData;
        }
        default: return group_rgb(colour_index(s, rank));
    }
}

bool live_matches_layout(const StudioState& s) {
    return s.layout && s.live.run.active && (int)s.live.run.ranks.size() == s.layout->world;
}

void refresh_stragglers(StudioState& s) {
    StragglerMarks& m = s.stragglers;
    if (!s.live.run.active) {
        if (!m.run_dir.empty()) m = StragglerMarks{};
        return;
    }
    const std::string dir = live_run_dir(s);
    const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    const bool other_run = dir != m.run_dir;
    if (!other_run && (m.revision == s.live.run.revision || (s.live.run.live && now - m.read_at < 2.0))) return;
    m.run_dir = dir, m.revision = s.live.run.revision, m.read_at = now;
    m.report.reset();  // no run directory or no timeline (yet): nothing to mark
    if (dir.empty()) return;
    if (auto rep = run_stragglers(dir)) m.report = std::move(*rep);
}

const RankComputeTime* rank_straggler(const StudioState& s, int rank) {
    if (!s.stragglers.report || !live_matches_layout(s)) return nullptr;
    for (const RankComputeTime& r : s.stragglers.report->ranks)
        if (r.rank == rank && r.verdict.flagged) return &r;
    return nullptr;
}

std::string straggler_host(const StudioState& s, int rank) {
    const LiveRun& run = s.live.run;
    if (rank < 0 || rank >= (int)run.ranks.size()) return "?";
    const int h = run.ranks[(size_t)rank].host;
    if (h < 0 || h >= (int)run.manifest.hosts.size()) return "?";
    return "host " + std::to_string(h) + " (" + run.manifest.hosts[(size_t)h] + ")";
}

bool node_has_straggler(const StudioState& s, int node) {
    if (!s.stragglers.report || !live_matches_layout(s)) return false;
    for (const RankComputeTime& r : s.stragglers.report->ranks)
        if (r.verdict.flagged && r.rank < s.layout->world && s.layout->ranks[(size_t)r.rank].node == node) return true;
    return false;
}

std::optional<double> live_rank_heat(const StudioState& s, int rank) {
    if (!live_matches_layout(s)) return std::nullopt;
    const std::optional<double> bytes = live_rank_memory_bytes(s, rank);
    if (!bytes) return std::nullopt;
    // On GPUs the measure that matters is the device's usable memory, as for the
    // prediction; the cpu preset's "memory" is nominal, so there the ramp spans the ranks.
    const Estimate* e = job_estimate(s);
    if (e && e->usable_bytes > 0 && s.job.cluster.gpu.name != "cpu") return *bytes / e->usable_bytes;
    const double most = live_max_memory_bytes(s);
    return most > 0 ? *bytes / most : std::optional<double>{};
}

int colour_count(const StudioState& s) {
    if (!s.layout) return 0;
    switch (s.view.colour_by) {
        case ColourBy::tp: return s.layout->groups[DIM_TP].count;
        case ColourBy::pp: return s.layout->degree[DIM_PP];
        case ColourBy::dp: return s.layout->degree[DIM_DP];
        case ColourBy::cp: return s.layout->degree[DIM_CP];
        case ColourBy::ep: return s.layout->ep_groups.count;
        case ColourBy::expert_tp: {
            const int etp = folded_expert_tp(s);
            return etp > 0 ? s.layout->world / etp : s.layout->groups[DIM_TP].count;
        }
        case ColourBy::predicted_memory:
        case ColourBy::live_memory: return 0;
    }
    return 0;
}

int active_rank(const StudioState& s) {
    if (!s.layout) return -1;
    const int r = s.view.pinned >= 0 ? s.view.pinned : s.view.hover;
    return r < s.layout->world ? r : -1;
}

std::span<const int32_t> group_members(const StudioState& s, int rank, Dim dim) {
    if (!s.layout || rank < 0 || rank >= s.layout->world) return {};
    const GroupSet& g = s.layout->groups[dim];
    const int gi = g.group_of[rank];
    return {g.begin(gi), g.end(gi)};
}

bool tp_group_spans_nodes(const StudioState& s, int rank) {
    if (!s.layout || rank < 0 || rank >= s.layout->world) return false;
    const GroupSet& g = s.layout->groups[DIM_TP];
    return g.spans_nodes[g.group_of[rank]] != 0;
}

int folded_expert_tp(const StudioState& s) {
    if (!s.layout) return 0;
    const int etp = s.layout->req.etp;
    return etp > 0 && etp != s.layout->req.tp && s.layout->world % etp == 0 ? etp : 0;
}

std::span<const int32_t> ep_group_members(const StudioState& s, int rank) {
    if (!s.layout || rank < 0 || rank >= s.layout->world) return {};
    const GroupSet& g = s.layout->ep_groups;
    const int gi = g.group_of[rank];
    return {g.begin(gi), g.end(gi)};
}

// "12-15" for a run, else "1, 5, 9, 13", shortened past 8 members.
static std::string members_text(std::span<const int32_t> m) {
    if (m.empty()) return "-";
    bool run = true;
    for (size_t i = 1; i < m.size(); ++i) run = run && m[i] == m[i - 1] + 1;
    if (run && m.size() > 2) return std::to_string(m.front()) + "-" + std::to_string(m.back());
    std::string out;
    const size_t shown = m.size() > 8 ? 6 : m.size();
    for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + std::to_string(m[i]);
    if (shown < m.size()) out += ", ... " + std::to_string(m.back()) + " (" + std::to_string(m.size()) + " ranks)";
    return out;
}

std::string rank_tooltip(const StudioState& s, int rank) {
    if (!s.layout || rank < 0 || rank >= s.layout->world) return {};
    const RankLayout& L = *s.layout;
    const RankPlace& p = L.ranks[rank];
    char buf[512];
    std::string host;
    if (p.node < (int)s.job.cluster.hosts.size()) host = ", host " + s.job.cluster.hosts[p.node];
    std::snprintf(buf, sizeof buf, "rank %d\ntp %d, cp %d, dp %d, pp %d\nnode %d%s, local GPU %d\n", rank,
                  p.coord[DIM_TP], p.coord[DIM_CP], p.coord[DIM_DP], p.coord[DIM_PP], p.node, host.c_str(),
                  p.local_gpu);
    std::string out = buf;
    if (const Estimate* e = job_estimate(s); e && p.coord[DIM_PP] < (int)e->stages.size()) {
        const double bytes = e->stages[p.coord[DIM_PP]].mem.total();
        const MemoryUnit u = memory_unit(*e);
        out += "predicted memory " + format_memory(bytes, u) + " of " + format_memory(e->usable_bytes, u) + " usable";
        if (bytes > e->usable_bytes) out += " (OOM +" + format_memory(bytes - e->usable_bytes, u) + ")";
        else if (e->usable_bytes > 0) out += " (" + std::to_string((int)std::lround(100 * bytes / e->usable_bytes)) + "%)";
        out += "\n";
    }
    if (const std::optional<double> live = live_matches_layout(s) ? live_rank_memory_bytes(s, rank) : std::nullopt)
        out += "live memory " + human_bytes(*live) + " (step " + std::to_string(s.live.run.ranks[rank].last_step) +
               ", " + s.live.run.ranks[rank].state + ")\n";
    if (const RankComputeTime* slow = rank_straggler(s, rank))
        out += fmt("straggler (measured): computes %.0f%% slower than the other ranks of PP stage %d\n(%s per step against %s, "
                   "%d steps of the timeline) on %s\n",
                   slow->verdict.slower * 100, slow->stage, seconds_text(slow->compute_s).c_str(), seconds_text(slow->peers_s).c_str(),
                   slow->steps, straggler_host(s, rank).c_str());
    auto spans = [](const GroupSet& g, int r) { return g.spans_nodes[g.group_of[r]] ? "  (spans nodes!)" : ""; };
    out += "TP group: " + members_text(group_members(s, rank, DIM_TP)) + spans(L.groups[DIM_TP], rank);
    out += "\nPP group: " + members_text(group_members(s, rank, DIM_PP));
    out += "\nDP group: " + members_text(group_members(s, rank, DIM_DP));
    if (const GroupSet& g = L.dp_shard_groups; g.count > 0)  // hsdp: whom this rank shards the states with
        out += "\nDP shard group: " + members_text(std::span<const int32_t>(g.begin(g.group_of[rank]), (size_t)g.size)) +
               spans(g, rank);
    if (L.degree[DIM_CP] > 1)
        out += "\nCP group: " + members_text(group_members(s, rank, DIM_CP)) + spans(L.groups[DIM_CP], rank);
    if (L.req.ep > 1) out += "\nEP group: " + members_text(ep_group_members(s, rank)) + spans(L.ep_groups, rank);
    if (const int etp = folded_expert_tp(s)) {
        const int first = rank / etp * etp;
        std::vector<int32_t> members(etp);
        for (int k = 0; k < etp; ++k) members[k] = first + k;
        out += "\nexpert TP group: " + members_text(members);
        if (L.ranks[first].node != L.ranks[first + etp - 1].node) out += "  (spans nodes!)";
    }
    return out;
}

std::vector<std::string> layout_warnings(const StudioState& s) {
    std::vector<std::string> out;
    if (!s.layout) return out;
    out = layout_span_warnings(s.job, *s.layout);
    // bits: a layout PTD simulates but Megatron-LM's interleaved schedule refuses (job_spec.h).
    if (runs_megatron_core(s.job.training.framework))
        if (auto refused = megatron_interleaved_refusal(s.job))
            out.push_back("Megatron-LM would refuse this layout: " + refused->key + ": " + refused->message);
    return out;
}

std::string layout_headline(const StudioState& s) {
    if (!s.layout) return "no layout: the job is not valid";
    const RankLayout& L = *s.layout;
    char buf[400];
    std::snprintf(buf, sizeof buf, "%d ranks = %s, order %s, %d node%s \xC3\x97 %d GPUs", L.world,
                  layout_degrees_text(s.job, L).c_str(), L.order_used.c_str(), L.nodes, L.nodes == 1 ? "" : "s",
                  L.req.gpus_per_node);
    return buf;
}

// ---- Input -----------------------------------------------------------------------------

static void clamp_pan(StudioState& s) {
    const GridGeometry g = grid_geometry(s);
    const float view_w = s.view.canvas_w - g.label_w - kMargin;
    const float view_h = s.view.canvas_h - g.header_h - kMargin;
    const float max_x = std::max(0.0f, g.content_w() + kMargin - view_w);
    const float max_y = std::max(0.0f, g.content_h() + kMargin - view_h);
    s.view.pan_x = std::clamp(s.view.pan_x, 0.0f, max_x);
    s.view.pan_y = std::clamp(s.view.pan_y, 0.0f, max_y);
}

void layout_resize(StudioState& s, float canvas_w, float canvas_h) {
    s.view.canvas_w = std::max(1.0f, canvas_w);
    s.view.canvas_h = std::max(1.0f, canvas_h);
    clamp_pan(s);
}

void layout_hover(StudioState& s, float x, float y) { s.view.hover = x < 0 || y < 0 ? -1 : pick_rank(s, x, y); }

void layout_click(StudioState& s, float x, float y) {
    const int r = pick_rank(s, x, y);
    s.view.pinned = r < 0 || r == s.view.pinned ? -1 : r;
}

void layout_pan(StudioState& s, float dx, float dy) {
    s.view.pan_x -= dx;
    s.view.pan_y -= dy;
    clamp_pan(s);
}

void layout_zoom(StudioState& s, float x, float y, float steps) {
    if (!s.layout || steps == 0) return;
    const GridGeometry before = grid_geometry(s);
    const float cw = std::clamp(before.cell_w * std::pow(1.15f, steps), LayoutViewState::kMinCell,
                                LayoutViewState::kMaxCell);
    s.view.cell_w = std::round(cw);
    const GridGeometry after = grid_geometry(s);
    // Keep the grid point under the mouse where it is.
    const float fx = (x - before.origin_x) / before.pitch_x(), fy = (y - before.origin_y) / before.pitch_y();
    s.view.pan_x = after.label_w + kMargin - (x - fx * after.pitch_x());
    s.view.pan_y = after.header_h + kMargin - (y - fy * after.pitch_y());
    clamp_pan(s);
}

void layout_fit(StudioState& s) {
    s.view.cell_w = 0;
    s.view.pan_x = s.view.pan_y = 0;
    clamp_pan(s);
}

void set_colour_by(StudioState& s, ColourBy c) { s.view.colour_by = c; }

}  // namespace ptd::studio
