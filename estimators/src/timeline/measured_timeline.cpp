// measured_timeline.cpp — the measured-timeline files of a run directory's timeline/
// folder (one text file per rank, docs/metrics.md): the small writer the trainer calls and
// the reader, with exact errors.
#include "ptd/timeline/timeline.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ptd/common/file_read.h"

namespace ptd {

// ---- measured-timeline files -------------------------------------------------------------

std::string timeline_file_name(int rank) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "rank-%05d.tsv", rank);
    return buf;
}

Result<TimelineWriter> TimelineWriter::open(const std::string& path, const MeasuredRankHeader& h) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return fail(SourceLoc{path}, "", std::string("cannot create the timeline file: ") + std::strerror(errno));
    std::fprintf(f, "ptd-timeline 1 rank=%d stage=%d dp=%d tp=%d cp=%d\n", h.rank, h.stage, h.dp, h.tp, h.cp);
    std::fprintf(f, "# kind\tstep\tmicro_batch\tchunk\tstream\tstart_ns\tend_ns\n");
    return TimelineWriter(f, path);
}

TimelineWriter::~TimelineWriter() {
    if (file_) std::fclose(file_);
}

void TimelineWriter::record(BlockKind kind, int step, int micro_batch, int chunk, int stream, int64_t start_ns,
                            int64_t end_ns) {
    assert(file_ && end_ns >= start_ns);
    std::fprintf(file_, "%s\t%d\t%d\t%d\t%d\t%lld\t%lld\n", block_kind_name(kind), step, micro_batch, chunk, stream,
                 (long long)start_ns, (long long)end_ns);
}

Result<void> TimelineWriter::flush() {
    if (file_ && (std::fflush(file_) != 0 || std::ferror(file_)))
        return fail(SourceLoc{path_}, "", std::string("cannot write the timeline file: ") + std::strerror(errno));
    return {};
}

Result<void> TimelineWriter::close() {
    if (!file_) return {};
    const bool bad = std::fflush(file_) != 0 || std::ferror(file_);
    const int err = errno;
    const bool close_bad = std::fclose(file_) != 0;
    file_ = nullptr;
    if (bad || close_bad)
        return fail(SourceLoc{path_}, "", std::string("cannot write the timeline file: ") + std::strerror(err));
    return {};
}

namespace {

template <class T>
bool parse_int(std::string_view s, T& out) {
    if (s.empty()) return false;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && ptr == s.data() + s.size();
}

}  // namespace

Result<MeasuredRank> parse_measured_rank(std::string_view text, const std::string& path) {
    MeasuredRank out;
    text = strip_utf8_bom(text);
    int line_no = 0;
    bool header_seen = false;
    size_t at = 0;
    auto bad = [&](int column, const std::string& key, const std::string& msg) {
        return fail(SourceLoc{path, line_no, column}, key, msg);
    };
    while (at < text.size()) {
        size_t nl = text.find('\n', at);
        const bool last_line = nl == std::string_view::npos;
        std::string_view line = text.substr(at, last_line ? std::string_view::npos : nl - at);
        at = last_line ? text.size() : nl + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (!header_seen) {
            // ptd-timeline 1 rank=R stage=S dp=D tp=T cp=C
            constexpr std::string_view magic = "ptd-timeline 1";
            if (line.substr(0, magic.size()) != magic)
                return bad(1, "header", "got " + quote_input(line) + "; expected the first line \"ptd-timeline 1 rank=R stage=S dp=D tp=T cp=C\" (a ptd timeline file, version 1)");
            std::string_view rest = line.substr(magic.size());
            const char* keys[] = {"rank", "stage", "dp", "tp", "cp"};
            int* fields[] = {&out.header.rank, &out.header.stage, &out.header.dp, &out.header.tp, &out.header.cp};
            for (int k = 0; k < 5; ++k) {
                const std::string want = std::string(" ") + keys[k] + "=";
                size_t pos = rest.find(want);
                if (pos == std::string_view::npos)
                    return bad(1, keys[k], std::string("missing ") + keys[k] + "= in the header " + quote_input(line));
                std::string_view val = rest.substr(pos + want.size());
                val = val.substr(0, val.find(' '));
                if (!parse_int(val, *fields[k]) || *fields[k] < 0)
                    return bad((int)(magic.size() + pos + want.size() + 1), keys[k],
                               "got " + quote_input(val) + "; allowed: a whole number ≥ 0");
            }
            header_seen = true;
            continue;
        }
        if (line.empty() || line.front() == '#') continue;
        std::string_view f[7];
        int n = 0;
        size_t col[7] = {};
        size_t s = 0;
        while (n < 8) {
            size_t tab = line.find('\t', s);
            if (n == 7) return bad((int)s + 1, "line", "more than 7 tab-separated fields; expected kind, step, micro_batch, chunk, stream, start_ns, end_ns");
            col[n] = s;
            f[n++] = line.substr(s, tab == std::string_view::npos ? std::string_view::npos : tab - s);
            if (tab == std::string_view::npos) break;
            s = tab + 1;
        }
        if (n < 7)
            return bad(1, "line", "got " + std::to_string(n) + " tab-separated field" + (n == 1 ? "" : "s") + " in " +
                                      quote_input(line) + "; expected 7: kind, step, micro_batch, chunk, stream, start_ns, end_ns (the file may be cut short)");
        TimelineBlock b;
        b.row = out.header.rank;
        auto kind = block_kind_from_name(f[0]);
        if (!kind) {
            std::string allowed;
            for (int k = 0; k < kBlockKindCount; ++k) allowed += (k ? ", " : "") + std::string(block_kind_name((BlockKind)k));
            return bad(1, "kind", "got " + quote_input(f[0]) + "; allowed: " + allowed);
        }
        b.kind = *kind;
        int64_t start = 0, end = 0;
        struct IntField {
            const char* name;
            int* out;
            int min;
        } ints[] = {{"step", &b.step, 0}, {"micro_batch", &b.micro_batch, -1}, {"chunk", &b.chunk, -1}, {"stream", &b.stream, 0}};
        for (int k = 0; k < 4; ++k)
            if (!parse_int(f[k + 1], *ints[k].out) || *ints[k].out < ints[k].min)
                return bad((int)col[k + 1] + 1, ints[k].name,
                           "got " + quote_input(f[k + 1]) + "; allowed: a whole number ≥ " + std::to_string(ints[k].min));
        if (!parse_int(f[5], start) || start < 0)
            return bad((int)col[5] + 1, "start_ns", "got " + quote_input(f[5]) + "; allowed: nanoseconds, a whole number ≥ 0");
        if (!parse_int(f[6], end) || end < start)
            return bad((int)col[6] + 1, "end_ns",
                       "got " + quote_input(f[6]) + "; allowed: nanoseconds, a whole number ≥ start_ns (" + std::to_string(start) + ")");
        b.start_s = (double)start * 1e-9;
        b.end_s = (double)end * 1e-9;
        out.blocks.push_back(b);
    }
    if (!header_seen) return fail(SourceLoc{path, 1, 1}, "header", "empty file; expected the header \"ptd-timeline 1 rank=R stage=S dp=D tp=T cp=C\"");
    return out;
}

Result<MeasuredRank> read_measured_rank(const std::string& path) {
    static constexpr FileKind kind{"a timeline file", 256 * kMiB};
    auto text = read_regular_file(path, kind);
    if (!text) return std::unexpected(text.error());
    return parse_measured_rank(*text, path);
}

Result<std::vector<MeasuredRank>> read_measured_timeline(const std::string& run_dir) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::path(run_dir) / "timeline";
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        return fail(SourceLoc{dir.string()}, "", "no timeline folder; the run recorded no measured timeline (expected " +
                                                     dir.string() + "/rank-NNNNN.tsv files)");
    std::vector<std::string> files;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.rfind("rank-", 0) == 0 && name.size() > 9 && name.substr(name.size() - 4) == ".tsv")
            files.push_back(it->path().string());
    }
    if (ec) return fail(SourceLoc{dir.string()}, "", "cannot list the folder: " + ec.message());
    if (files.empty()) return fail(SourceLoc{dir.string()}, "", "no rank-NNNNN.tsv files in the folder");
    std::sort(files.begin(), files.end());
    std::vector<MeasuredRank> out;
    for (const std::string& f : files) {
        auto r = read_measured_rank(f);
        if (!r) return std::unexpected(r.error());
        out.push_back(std::move(*r));
    }
    std::sort(out.begin(), out.end(), [](const MeasuredRank& a, const MeasuredRank& b) { return a.header.rank < b.header.rank; });
    return out;
}

}  // namespace ptd
