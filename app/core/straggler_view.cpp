// straggler_view.cpp — the straggler lines below the dashboard (straggler_view.h).
#include "straggler_view.h"

#include <chrono>
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

const std::string& LiveStragglers::text(const std::string& run_dir, const RunManifest& manifest, const Term& t) {
    const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    if (now - read_at_ < every_s_) return text_;
    read_at_ = now;
    // Lines folded at spaces to the terminal's width: the live block redraws by counting
    // lines, so none may wrap on its own.
    Term plain = t;
    plain.color = false;
    const std::string text = run_straggler_text(run_dir, manifest, plain);
    const int width = t.width > 20 ? t.width - 1 : 1 << 30;
    text_.clear();
    for (size_t at = 0; at < text.size();) {
        const size_t nl = std::min(text.find('\n', at), text.size());
        std::string line = text.substr(at, nl - at), folded;
        at = nl + 1;
        const bool slow = line.starts_with("straggler:");
        while (text_width(line) > width) {
            size_t cut = line.size();
            for (size_t i = 0, w = 0; i < line.size(); ++i) {  // the last space within the width
                if (((unsigned char)line[i] & 0xC0) != 0x80 && ++w > (size_t)width) break;
                if (line[i] == ' ') cut = i;
            }
            if (cut == line.size()) break;  // one word wider than the terminal
            folded += (slow ? yellow(t, line.substr(0, cut)) : line.substr(0, cut)) + "\n";
            line = "  " + line.substr(cut + 1);
        }
        text_ += folded + (slow ? yellow(t, line) : line) + "\n";
    }
    return text_;
}

}  // namespace ptd
