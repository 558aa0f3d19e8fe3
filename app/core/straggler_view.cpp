// straggler_view.cpp — the straggler lines below the dashboard (straggler_view.h).
#include "straggler_view.h"

#include <cstdio>

namespace ptd {

std::string straggler_text(const StragglerReport& rep, const RunManifest& m, const Term& t) {
    if (rep.ranks.empty()) return "";
    std::string out;
    const std::string basis = std::to_string(rep.steps) + " step" + (rep.steps == 1 ? "" : "s") + " of the measured timeline";
    for (const RankComputeTime& r : rep.ranks) {
        if (!r.verdict.flagged) continue;
        std::string host = "?";
        if (r.rank < (int)m.ranks.size() && m.ranks[(size_t)r.rank].host >= 0 && m.ranks[(size_t)r.rank].host < (int)m.hosts.size())
            host = "host " + std::to_string(m.ranks[(size_t)r.rank].host) + " (" + m.hosts[(size_t)m.ranks[(size_t)r.rank].host] + ")";
        char buf[512];
        std::snprintf(buf, sizeof buf,
                      "straggler: rank %d on %s computes %.0f%% slower than the other ranks of PP stage %d (%s per step against %s; "
                      "%s): every rank waits for it at the next collective, so each step takes ≈ %s longer",
                      r.rank, host.c_str(), r.verdict.slower * 100, r.stage, seconds_text(r.compute_s).c_str(), seconds_text(r.peers_s).c_str(),
                      basis.c_str(), seconds_text(r.compute_s - r.peers_s).c_str());
        out += yellow(t, buf) + "\n";
    }
    if (out.empty())
        out = "stragglers: none (no rank computes both ≥ " + std::to_string((int)(kSlowMinSlower * 100)) +
              "% slower than its pipeline stage's others and by ≥ " + std::to_string((int)(kStragglerMinStepShare * 100)) +
              "% of the " + seconds_text(rep.step_s) + " step; " + basis + ")\n";
    return out;
}

std::string run_straggler_text(const std::string& run_dir, const RunManifest& manifest, const Term& t) {
    auto rep = run_stragglers(run_dir);
    if (!rep) return "";  // no timeline recorded: nothing to say
    return straggler_text(*rep, manifest, t);
}

}  // namespace ptd
