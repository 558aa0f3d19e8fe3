// layout.cpp — rank layout: coordinates, nodes and parallel groups of every global rank.
//
// Follows the rank-numbering semantics of Megatron-LM's RankGenerator
// (megatron/core/parallel_state.py): the order string lists the dimensions fastest-varying
// first and a rank is the mixed-radix number of its coordinates. The code here is our own:
// everything is built in O(world) passes over flat arrays, without per-group allocations,
// so 100k-1M ranks take milliseconds. docs/layout.md explains the choices.
#include "ptd/layout/layout.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ptd {

namespace {

constexpr const char* kAllowedNames = "tp, cp, ep, dp, pp";
constexpr const char* kDefaultOrder = "tp-cp-ep-dp-pp";
const char* const kDegreeKeys[DIM_COUNT] = {"parallel.tp", "parallel.cp", "parallel.dp",
                                            "parallel.pp"};

// Parsed order string: dense dims fastest first, plus where "ep" sits relative to "dp".
struct ParsedOrder {
    std::array<Dim, DIM_COUNT> dims{};
    bool ep_before_dp = true;
};

std::string quoted(std::string_view s) { return quote_input(s); }  // shortened, escaped

std::string with_commas(int64_t v) {
    std::string digits = std::to_string(v < 0 ? -v : v);
    std::string out;
    int n = static_cast<int>(digits.size());
    for (int i = 0; i < n; ++i) {
        if (i > 0 && (n - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return v < 0 ? "-" + out : out;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
}

// "Did you mean" for a mistyped name. The names are two letters, so the generic
// closest_match would call every two-letter word close; accept only one edit or swapped
// letters ("dpp", "t", "pt").
std::string suggest_name(std::string_view given, const std::vector<std::string>& names) {
    auto one_edit = [](std::string_view a, std::string_view b) {
        if (a.size() > b.size()) std::swap(a, b);
        if (b.size() - a.size() > 1) return false;
        size_t i = 0;
        while (i < a.size() && a[i] == b[i]) ++i;
        if (a.size() == b.size()) return a.substr(i + (i < a.size())) == b.substr(i + (i < b.size()));
        return a.substr(i) == b.substr(i + 1);
    };
    std::vector<std::string> close;
    for (const std::string& n : names) {
        std::string sorted_given(given), sorted_name(n);
        std::sort(sorted_given.begin(), sorted_given.end());
        std::sort(sorted_name.begin(), sorted_name.end());
        if (one_edit(given, n) || sorted_given == sorted_name) close.push_back(quoted(n));
    }
    if (close.size() == 1) return close[0];
    if (close.size() == 2) return close[0] + " or " + close[1];
    return "";  // nothing close, or too many to help
}

// Parses `order`; every problem found becomes one diagnostic under "parallel.order".
Result<ParsedOrder> parse_order_full(const std::string& order) {
    std::string lower(order);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string_view text = trim(lower);
    if (text.empty()) text = kDefaultOrder;

    const std::vector<std::string> names = {"tp", "cp", "ep", "dp", "pp"};
    std::vector<Diagnostic> problems;
    auto problem = [&](std::string msg) {
        problems.push_back(Diagnostic{SourceLoc{}, "parallel.order", std::move(msg)});
    };

    // Position of each name in the string (-1 = absent); index into `names`.
    int position[5] = {-1, -1, -1, -1, -1};
    std::vector<int> sequence;  // name indices in the order written
    size_t start = 0;
    int index = 0;
    while (true) {
        size_t dash = text.find('-', start);
        std::string_view token =
            trim(text.substr(start, dash == std::string_view::npos ? std::string_view::npos
                                                                   : dash - start));
        ++index;
        if (token.empty()) {
            problem("got " + quoted(order) + ": name " + std::to_string(index) +
                    " is empty; write names joined by single '-', e.g. \"" + kDefaultOrder +
                    "\"; allowed names: " + kAllowedNames);
        } else {
            auto it = std::find(names.begin(), names.end(), token);
            if (it == names.end()) {
                std::string msg = "got " + quoted(order) + ": unknown dimension " + quoted(token);
                std::string hint = suggest_name(token, names);
                if (!hint.empty()) msg += " (did you mean " + hint + "?)";
                msg += "; allowed names: ";
                msg += kAllowedNames;
                problem(std::move(msg));
            } else {
                int k = static_cast<int>(it - names.begin());
                if (position[k] >= 0) {
                    problem("got " + quoted(order) + ": dimension " + quoted(token) +
                            " appears more than once; each of " + kAllowedNames +
                            " may appear at most once");
                } else {
                    position[k] = static_cast<int>(sequence.size());
                    sequence.push_back(k);
                }
            }
        }
        if (dash == std::string_view::npos) break;
        start = dash + 1;
    }
    if (!problems.empty()) return std::unexpected(Error(std::move(problems)));

    // names index -> Dim (ep has none).
    constexpr int kToDim[5] = {DIM_TP, DIM_CP, -1, DIM_DP, DIM_PP};
    ParsedOrder out;
    int n = 0;
    for (int k : sequence)
        if (kToDim[k] >= 0) out.dims[n++] = static_cast<Dim>(kToDim[k]);
    // Missing dense dims go last, in the default order tp, cp, dp, pp.
    for (Dim d : {DIM_TP, DIM_CP, DIM_DP, DIM_PP}) {
        bool present = false;
        for (int i = 0; i < n; ++i) present |= out.dims[i] == d;
        if (!present) out.dims[n++] = d;
    }
    // ep left out: right before dp (Megatron's default "...-ep-dp-..."). dp is always in
    // `position` or appended after everything written, so a written ep before it stays before.
    const int ep_pos = position[2], dp_pos = position[3];
    out.ep_before_dp = ep_pos < 0 || dp_pos < 0 || ep_pos < dp_pos;
    return out;
}

std::string order_string(const ParsedOrder& p) {
    std::string s;
    for (Dim d : p.dims) {
        if (d == DIM_DP && p.ep_before_dp) s += "ep-";
        s += dim_name(d);
        if (d == DIM_DP && !p.ep_before_dp) s += "-ep";
        s += '-';
    }
    s.pop_back();
    return s;
}

// Allowed values of ep for a given dp·cp, as text ("1, 2, 4, 8"); long lists are cut.
std::string divisors_text(int64_t n) {
    std::vector<int64_t> small, large;
    for (int64_t i = 1; i * i <= n; ++i) {
        if (n % i == 0) {
            small.push_back(i);
            if (i != n / i) large.push_back(n / i);
        }
    }
    small.insert(small.end(), large.rbegin(), large.rend());
    std::string s;
    constexpr size_t kMax = 16;
    for (size_t i = 0; i < small.size(); ++i) {
        if (small.size() > kMax && i == kMax - 2) {
            s += "..., ";
            i = small.size() - 1;
        }
        s += std::to_string(small[i]);
        if (i + 1 < small.size()) s += ", ";
    }
    return s;
}

// Fills spans_nodes and returns how many groups span more than one node. Members are
// sorted by rank, so a group spans nodes exactly when its first and last member differ.
int fill_spans(GroupSet& g, const std::vector<RankPlace>& ranks) {
    g.spans_nodes.assign(static_cast<size_t>(g.count), 0);
    if (g.size == 1) return 0;
    int spanning = 0;
    for (int i = 0; i < g.count; ++i) {
        const int32_t first = *g.begin(i);
        const int32_t last = *(g.end(i) - 1);
        const bool spans = ranks[static_cast<size_t>(first)].node != ranks[static_cast<size_t>(last)].node;
        g.spans_nodes[static_cast<size_t>(i)] = spans ? 1 : 0;
        spanning += spans;
    }
    return spanning;
}

// Groups of one dense dimension with degree n and stride s. The world splits into blocks
// of s·n consecutive ranks; inside a block, the ranks base + k·s (k < n) form a group for
// each base in [block start, block start + s). Numbering groups block by block, base by
// base, numbers them by their smallest member.
void build_dense_groups(GroupSet& g, int world, int n, int s) {
    g.size = n;
    g.count = world / n;
    g.members.resize(static_cast<size_t>(world));
    g.group_of.resize(static_cast<size_t>(world));
    int32_t* members = g.members.data();
    int32_t* group_of = g.group_of.data();
    const int64_t block = static_cast<int64_t>(s) * n;
    int32_t gi = 0;
    for (int64_t start = 0; start < world; start += block) {
        for (int64_t base = start; base < start + s; ++base, ++gi) {
            int32_t* out = members + static_cast<int64_t>(gi) * n;
            int64_t r = base;
            for (int k = 0; k < n; ++k, r += s) {
                out[k] = static_cast<int32_t>(r);
                group_of[r] = gi;
            }
        }
    }
}

}  // namespace

const char* dim_name(Dim d) {
    switch (d) {
        case DIM_TP: return "tp";
        case DIM_CP: return "cp";
        case DIM_DP: return "dp";
        case DIM_PP: return "pp";
        default: return "?";
    }
}

Result<std::array<Dim, DIM_COUNT>> parse_rank_order(const std::string& order) {
    auto parsed = parse_order_full(order);
    if (!parsed) return std::unexpected(std::move(parsed.error()));
    return parsed->dims;
}

Result<std::string> check_canonical_rank_order(const std::string& order) {
    auto parsed = parse_order_full(order);
    if (!parsed) return std::unexpected(std::move(parsed.error()));
    // A permutation of all five names spelled exactly: five '-'-separated tokens, each one
    // of the lowercase names (parse_order_full already rejected unknown and repeated ones).
    int names = 0;
    bool exact = !order.empty();
    size_t start = 0;
    while (exact) {
        const size_t dash = order.find('-', start);
        const std::string token = order.substr(start, dash == std::string::npos ? std::string::npos : dash - start);
        exact = token == "tp" || token == "cp" || token == "ep" || token == "dp" || token == "pp";
        ++names;
        if (dash == std::string::npos) break;
        start = dash + 1;
    }
    if (exact && names == 5) return order;
    const std::string meant = order_string(*parsed);
    std::string msg = "got " + quoted(order) + "; allowed: all five of " + kAllowedNames +
                      ", each once, in lowercase, joined by '-' (fastest-varying first), e.g. " +
                      quoted(kDefaultOrder) + " (the default)";
    msg += " — " + quoted(order) + " would mean " + quoted(meant) + "; write that";
    return std::unexpected(Error(Diagnostic{SourceLoc{}, "parallel.order", std::move(msg)}));
}

Result<RankLayout> make_layout(const LayoutRequest& req) {
    std::vector<Diagnostic> problems;
    auto problem = [&](std::string key, std::string msg) {
        problems.push_back(Diagnostic{SourceLoc{}, std::move(key), std::move(msg)});
    };

    const int deg_in[DIM_COUNT] = {req.tp, req.cp, req.dp, req.pp};
    bool degrees_ok = true;
    for (int d = 0; d < DIM_COUNT; ++d) {
        if (deg_in[d] < 1) {
            problem(kDegreeKeys[d], "got " + std::to_string(deg_in[d]) + "; allowed: an integer >= 1 (" +
                                        dim_name(static_cast<Dim>(d)) +
                                        " is a parallel degree; 1 means not split)");
            degrees_ok = false;
        }
    }
    if (req.ep < 1) {
        problem("parallel.ep", "got " + std::to_string(req.ep) +
                                   "; allowed: an integer >= 1 that divides dp·cp (1 = no expert parallelism)");
        degrees_ok = false;
    }
    if (req.gpus_per_node < 1) {
        problem("cluster.gpus_per_node",
                "got " + std::to_string(req.gpus_per_node) + "; allowed: an integer >= 1");
    }

    int64_t world64 = 0;
    if (degrees_ok) {
        world64 = 1;
        bool overflow = false;
        for (int d = 0; d < DIM_COUNT; ++d) {
            world64 *= deg_in[d];
            if (world64 > INT32_MAX) overflow = true;  // stop growing past int64 too
            if (overflow) break;
        }
        if (overflow || world64 > kMaxLayoutRanks) {
            std::string product = "tp " + std::to_string(req.tp) + " × cp " + std::to_string(req.cp) +
                                  " × dp " + std::to_string(req.dp) + " × pp " + std::to_string(req.pp);
            std::string got;
            if (overflow) {
                // Exact product may not fit int64; show it as a double.
                double w = 1.0 * req.tp * req.cp * req.dp * req.pp;
                char buf[64];
                std::snprintf(buf, sizeof buf, "%.3g", w);
                got = product + " ≈ " + buf + " ranks";
            } else {
                got = product + " = " + with_commas(world64) + " ranks";
            }
            problem("parallel", "got " + got + "; allowed: at most " + with_commas(kMaxLayoutRanks) +
                                    " ranks in a layout");
            degrees_ok = false;
        }
        const int64_t data = static_cast<int64_t>(req.dp) * req.cp;
        // Only for worlds within the limit: dp·cp ≤ 2^24 keeps the divisor list cheap.
        // moe2: folded expert groups (etp ≠ tp) are checked below instead.
        const bool folded = req.etp > 0 && req.etp != req.tp;
        if (folded && degrees_ok && req.ep >= 1 && (data * req.tp) % ((int64_t)req.ep * req.etp) != 0) {
            problem("parallel.expert_tp", "got " + std::to_string(req.etp) + " with ep " + std::to_string(req.ep) +
                                              ": ep·expert_tp must divide tp·cp·dp = " + with_commas(data * req.tp));
            degrees_ok = false;
        }
        if (folded && degrees_ok && req.order != "tp-cp-ep-dp-pp") {
            problem("parallel.expert_tp", "got " + std::to_string(req.etp) + " with order \"" + req.order +
                                              "\"; allowed: the default order tp-cp-ep-dp-pp, or expert_tp = 0 (= tp)");
            degrees_ok = false;
        }
        if (!folded && degrees_ok && req.ep >= 1 && data % req.ep != 0) {
            problem("parallel.ep", "got " + std::to_string(req.ep) + ", but ep must divide dp·cp = " +
                                       with_commas(data) + " (dp " + std::to_string(req.dp) + " × cp " +
                                       std::to_string(req.cp) + "); allowed ep: " + divisors_text(data));
            degrees_ok = false;
        }
    }

    auto parsed = parse_order_full(req.order);
    if (!parsed) {
        for (auto& d : parsed.error().diagnostics) problems.push_back(std::move(d));
    }
    if (!problems.empty()) return std::unexpected(Error(std::move(problems)));

    // ---- dense layout -------------------------------------------------------------------
    RankLayout L;
    L.req = req;
    L.world = static_cast<int>(world64);
    L.order = parsed->dims;
    L.ep_before_dp = parsed->ep_before_dp;
    L.order_used = order_string(*parsed);
    for (int d = 0; d < DIM_COUNT; ++d) L.degree[d] = deg_in[d];
    {
        int s = 1;
        for (Dim d : L.order) {
            L.stride[d] = s;
            s *= L.degree[d];
        }
    }
    const int world = L.world;
    const int gpn = req.gpus_per_node;
    L.nodes = static_cast<int>((world64 + gpn - 1) / gpn);

    // Coordinates by odometer over the order (fastest dim first): no divisions per rank.
    L.ranks.resize(static_cast<size_t>(world));
    {
        int32_t c[DIM_COUNT] = {0, 0, 0, 0};
        int32_t node = 0, local = 0;
        for (int r = 0; r < world; ++r) {
            RankPlace& p = L.ranks[static_cast<size_t>(r)];
            p.coord[0] = c[0];
            p.coord[1] = c[1];
            p.coord[2] = c[2];
            p.coord[3] = c[3];
            p.node = node;
            p.local_gpu = local;
            if (++local == gpn) {
                local = 0;
                ++node;
            }
            for (Dim d : L.order) {
                if (++c[d] < L.degree[d]) break;
                c[d] = 0;
            }
        }
    }

    for (int d = 0; d < DIM_COUNT; ++d) {
        build_dense_groups(L.groups[d], world, L.degree[d], L.stride[d]);
        int spanning = fill_spans(L.groups[d], L.ranks);
        if (d == DIM_TP) L.tp_groups_spanning_nodes = spanning;
    }

    // ---- expert layout ------------------------------------------------------------------
    // The ranks sharing tp and pp coordinates form a "data block" of cp·dp ranks. Number
    // them d = c_fast + n_fast·c_slow, where fast/slow are cp/dp in order-string order;
    // rank offsets grow with d. Expert parallelism splits d into (ep, edp): ep is the
    // faster part when "ep" is written before "dp" (or left out), the slower part otherwise.
    // For orders where ep sits next to dp (and cp next to dp, or cp = 1) this is exactly
    // Megatron's expert RankGenerator over "order minus cp"; for other orders it keeps the
    // expert TP and PP groups equal to the dense ones (see docs/layout.md).
    const int ep = req.ep;
    const int cp = L.degree[DIM_CP], dp = L.degree[DIM_DP];
    const int ndata = cp * dp;
    const bool folded_groups = req.etp > 0 && req.etp != req.tp;  // moe2: built below
    const int edp = folded_groups ? 1 : ndata / ep;
    int pos_cp = 0, pos_dp = 0;
    for (int i = 0; i < DIM_COUNT; ++i) {
        if (L.order[i] == DIM_CP) pos_cp = i;
        if (L.order[i] == DIM_DP) pos_dp = i;
    }
    const Dim fast = pos_cp < pos_dp ? DIM_CP : DIM_DP;
    const Dim slow = fast == DIM_CP ? DIM_DP : DIM_CP;
    const int n_fast = L.degree[fast];
    const int s_fast = L.stride[fast], s_slow = L.stride[slow];
    std::vector<int32_t> offset(static_cast<size_t>(ndata));  // rank offset of data index d
    for (int d = 0; d < ndata; ++d)
        offset[static_cast<size_t>(d)] = (d % n_fast) * s_fast + (d / n_fast) * s_slow;
    const bool ep_fast = L.ep_before_dp;
    // data index of (expert coordinate e, expert-dp coordinate x)
    auto data_of = [&](int e, int x) { return ep_fast ? e + ep * x : x + edp * e; };

    GroupSet& EG = L.ep_groups;
    GroupSet& XG = L.expert_dp_groups;
    EG.size = ep;
    EG.count = world / ep;
    XG.size = edp;
    XG.count = world / edp;
    EG.members.resize(static_cast<size_t>(world));
    EG.group_of.resize(static_cast<size_t>(world));
    XG.members.resize(static_cast<size_t>(world));
    XG.group_of.resize(static_cast<size_t>(world));
    // Records the next group of G: its members member(k), k < size.
    auto add_group = [](GroupSet& G, int32_t& next, int size, auto member) {
        int32_t* out = G.members.data() + static_cast<int64_t>(next) * size;
        for (int k = 0; k < size; ++k) {
            const int32_t m = member(k);
            out[k] = m;
            G.group_of[static_cast<size_t>(m)] = next;
        }
        ++next;
    };
    int32_t next_e = 0, next_x = 0;
    for (int r = 0; r < world && !folded_groups; ++r) {
        const RankPlace& p = L.ranks[static_cast<size_t>(r)];
        const int d = p.coord[fast] + n_fast * p.coord[slow];
        const int e = ep_fast ? d % ep : d / edp;
        const int x = ep_fast ? d / ep : d % edp;
        const int32_t base = r - offset[static_cast<size_t>(d)];
        // A group's smallest member is its coordinate-0 member: visiting ranks in
        // increasing order meets group leaders in increasing order.
        if (e == 0) add_group(EG, next_e, ep, [&](int k) { return base + offset[static_cast<size_t>(data_of(k, x))]; });
        if (x == 0) add_group(XG, next_x, edp, [&](int k) { return base + offset[static_cast<size_t>(data_of(e, k))]; });
    }
    // moe2: MoE parallel folding (Megatron-core parallel_state.py: a second RankGenerator over
    // "tp-ep-dp-pp" with tp = expert_tp, cp = 1): inside each stage's block of tp·cp·dp
    // consecutive ranks (default order: pp outermost) rank a + etp·(e + ep·x) has expert-TP
    // coordinate a, expert coordinate e and expert-DP coordinate x.
    if (folded_groups) {
        const int etp = req.etp, block = L.degree[DIM_TP] * ndata, fedp = block / (etp * ep);
        XG.size = fedp;
        XG.count = world / fedp;
        XG.members.resize(static_cast<size_t>(world));
        next_e = 0, next_x = 0;
        for (int r = 0; r < world; ++r) {
            const int local = r % block, base = r - local, a = local % etp, e = (local / etp) % ep, x = local / (etp * ep);
            if (e == 0) add_group(EG, next_e, ep, [&](int k) { return base + a + etp * (k + ep * x); });
            if (x == 0) add_group(XG, next_x, fedp, [&](int k) { return base + a + etp * (e + ep * k); });
        }
    }
    fill_spans(EG, L.ranks);
    fill_spans(XG, L.ranks);
    // hsdp: the sharding groups. A group's smallest member has cp coordinate 0 and the first dp
    // coordinate of its block; its members are every cp coordinate with the block's dp ones.
    if (req.dp_replicate > 1 && dp % req.dp_replicate == 0) {
        GroupSet& SG = L.dp_shard_groups;
        const int shard_dp = dp / req.dp_replicate;
        SG.size = shard_dp * cp;
        SG.count = world / SG.size;
        SG.members.resize(static_cast<size_t>(world));
        SG.group_of.resize(static_cast<size_t>(world));
        std::vector<int32_t> members(static_cast<size_t>(SG.size));
        int32_t next_s = 0;
        for (int r = 0; r < world; ++r) {
            const RankPlace& p = L.ranks[static_cast<size_t>(r)];
            if (p.coord[DIM_CP] != 0 || p.coord[DIM_DP] % shard_dp != 0) continue;
            for (int c = 0; c < cp; ++c)
                for (int k = 0; k < shard_dp; ++k)
                    members[static_cast<size_t>(c * shard_dp + k)] =
                        L.rank_of(p.coord[DIM_TP], c, p.coord[DIM_DP] + k, p.coord[DIM_PP]);
            std::sort(members.begin(), members.end());
            add_group(SG, next_s, SG.size, [&](int k) { return members[static_cast<size_t>(k)]; });
        }
        fill_spans(SG, L.ranks);
    }
    return L;
}

}  // namespace ptd
