// stragglers.cpp — each rank's compute per step from its measured timeline, compared with
// the ranks of its pipeline stage (stragglers.h).
#include "ptd/timeline/stragglers.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "ptd/common/file_read.h"

namespace ptd {

namespace {

// Compute seconds per step of one rank: forward, backward and weight-gradient blocks (a
// recompute block is nested in its backward block) less the tensor-parallel collectives
// recorded inside them (those of a micro-batch; the gradient phase's, micro-batch −1, lie
// outside every compute block).
std::map<int, double> compute_per_step(const MeasuredRank& r) {
    std::map<int, double> per_step;
    for (const TimelineBlock& b : r.blocks) {
        const double d = b.end_s - b.start_s;
        switch (b.kind) {
            case BlockKind::forward:
            case BlockKind::backward:
            case BlockKind::weight_grad: per_step[b.step] += d; break;
            case BlockKind::tp_comm:
                if (b.micro_batch >= 0) per_step[b.step] -= d;
                break;
            default: break;
        }
    }
    return per_step;
}

}  // namespace

std::vector<int> StragglerReport::slow_ranks() const {
    std::vector<int> out;
    for (const RankComputeTime& r : ranks)
        if (r.verdict.flagged) out.push_back(r.rank);
    return out;
}

StragglerReport find_stragglers(const std::vector<MeasuredRank>& ranks) {
    StragglerReport rep;
    std::map<int, std::vector<size_t>> by_stage;
    std::vector<double> step_spans;
    for (const MeasuredRank& m : ranks) {
        RankComputeTime t;
        t.rank = m.header.rank, t.stage = m.header.stage;
        std::vector<double> steps;
        for (const auto& [step, s] : compute_per_step(m)) steps.push_back(std::max(0.0, s));
        std::map<int, std::pair<double, double>> span;  // step → first start, last end
        for (const TimelineBlock& b : m.blocks) {
            auto [it, fresh] = span.try_emplace(b.step, b.start_s, b.end_s);
            if (!fresh) it->second = {std::min(it->second.first, b.start_s), std::max(it->second.second, b.end_s)};
        }
        std::vector<double> spans;
        for (const auto& [step, se] : span) spans.push_back(se.second - se.first);
        if (!spans.empty()) step_spans.push_back(median(spans));
        t.steps = (int)steps.size();
        t.compute_s = median(steps);
        rep.steps = std::max(rep.steps, t.steps);
        if (t.steps == 0) continue;  // nothing recorded yet
        by_stage[t.stage].push_back(rep.ranks.size());
        rep.ranks.push_back(t);
    }
    rep.step_s = median(step_spans);
    for (auto& [stage, members] : by_stage) {
        std::vector<double> values;
        for (size_t i : members) values.push_back(rep.ranks[i].compute_s);
        const std::vector<SlowVerdict> v = flag_slow(values);
        const double ref = values.size() >= 3 ? median(values) : *std::min_element(values.begin(), values.end());
        for (size_t k = 0; k < members.size(); ++k) {
            RankComputeTime& t = rep.ranks[members[k]];
            t.verdict = v[k], t.peers_s = ref;
            t.verdict.flagged = t.verdict.flagged && t.compute_s - ref >= kStragglerMinStepShare * rep.step_s;
        }
    }
    std::sort(rep.ranks.begin(), rep.ranks.end(), [](const RankComputeTime& a, const RankComputeTime& b) { return a.rank < b.rank; });
    return rep;
}

Result<StragglerReport> run_stragglers(const std::string& run_dir) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::path(run_dir) / "timeline";
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return fail(SourceLoc{dir.string()}, "", "no timeline folder; the run recorded no measured timeline");
    std::vector<MeasuredRank> ranks;
    static constexpr FileKind kind{"a timeline file", 256 * kMiB};
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.rfind("rank-", 0) != 0 || !name.ends_with(".tsv")) continue;
        auto text = read_regular_file(it->path().string(), kind);
        if (!text) return std::unexpected(text.error());
        // A live rank's file: keep whole lines only, and drop its last step when the file
        // does not end where a step was flushed (the trainer writes a step's blocks at once).
        const bool cut = !text->empty() && text->back() != '\n';
        if (cut) text->erase(text->rfind('\n') == std::string::npos ? 0 : text->rfind('\n') + 1);
        auto r = parse_measured_rank(*text, it->path().string());
        if (!r) return std::unexpected(r.error());
        if (cut && !r->blocks.empty()) {
            const int last = r->blocks.back().step;
            std::erase_if(r->blocks, [&](const TimelineBlock& b) { return b.step == last; });
        }
        ranks.push_back(std::move(*r));
    }
    if (ec) return fail(SourceLoc{dir.string()}, "", "cannot list the folder: " + ec.message());
    return find_stragglers(ranks);
}

}  // namespace ptd
