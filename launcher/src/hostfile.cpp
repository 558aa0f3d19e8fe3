// hostfile.cpp — DeepSpeed-style hostfiles and the job's host list.
#include "ptd/hostfile.h"

#include "ptd/common/file_read.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ptd {

static bool valid_host_char(char c) {
    return std::isalnum((unsigned char)c) || c == '-' || c == '.' || c == '_' || c == ':' || c == '%';
}

static bool parse_port(std::string_view s, int& port) {
    int v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || v < 1 || v > 65535) return false;
    port = v;
    return true;
}

Result<std::vector<HostEntry>> parse_hostfile(std::string_view text, const std::string& file) {
    // A byte-order mark (some Windows editors write one) is not part of the first host.
    text = strip_utf8_bom(text);
    std::vector<HostEntry> hosts;
    std::vector<Diagnostic> problems;
    auto error = [&](int line, int column, std::string msg) {
        problems.push_back({SourceLoc{file, line, column}, "hostfile", std::move(msg)});
    };
    int line_no = 0;
    size_t pos = 0;
    while (pos <= text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string_view::npos) end = text.size();
        std::string_view line = text.substr(pos, end - pos);
        pos = end + 1;
        ++line_no;
        if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
        // Split on blanks, remembering each token's column.
        std::vector<std::pair<std::string_view, int>> tokens;
        for (size_t i = 0; i < line.size();) {
            while (i < line.size() && std::isspace((unsigned char)line[i])) ++i;
            size_t j = i;
            while (j < line.size() && !std::isspace((unsigned char)line[j])) ++j;
            if (j > i) tokens.push_back({line.substr(i, j - i), (int)i + 1});
            i = j;
        }
        if (tokens.empty()) continue;

        HostEntry e;
        e.line = line_no;
        std::string_view spec = tokens[0].first;
        if (auto at = spec.find('@'); at != std::string_view::npos) {
            e.user = std::string(spec.substr(0, at));
            spec = spec.substr(at + 1);
            if (e.user.empty()) {
                error(line_no, tokens[0].second, "empty user before '@'; allowed: [user@]host[:port] slots=N");
                continue;
            }
        }
        std::string_view host = spec, port;
        if (!spec.empty() && spec.front() == '[') {  // [ipv6]:port
            auto close = spec.find(']');
            if (close == std::string_view::npos) {
                error(line_no, tokens[0].second, "unclosed '[' in " + quote_input(tokens[0].first));
                continue;
            }
            host = spec.substr(1, close - 1);
            std::string_view rest = spec.substr(close + 1);
            if (!rest.empty() && rest.front() == ':') port = rest.substr(1);
            else if (!rest.empty()) {
                error(line_no, tokens[0].second, "unexpected " + quote_input(rest) + " after ']'");
                continue;
            }
        } else if (std::count(spec.begin(), spec.end(), ':') == 1) {
            auto colon = spec.find(':');
            host = spec.substr(0, colon);
            port = spec.substr(colon + 1);
        }
        if (host.empty() || !std::all_of(host.begin(), host.end(), valid_host_char)) {
            error(line_no, tokens[0].second,
                  "invalid host " + quote_input(tokens[0].first) +
                      "; allowed: [user@]host[:port] with letters, digits, '-', '.', '_' (IPv6 in brackets)");
            continue;
        }
        e.host = std::string(host);
        if (!port.empty() && !parse_port(port, e.port)) {
            error(line_no, tokens[0].second, "invalid port " + quote_input(port) + "; allowed: 1 .. 65535");
            continue;
        }
        bool ok = true;
        for (size_t t = 1; t < tokens.size() && ok; ++t) {
            std::string_view tok = tokens[t].first;
            if (tok.starts_with("slots=")) {
                std::string_view v = tok.substr(6);
                int slots = 0;
                auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), slots);
                if (ec != std::errc() || p != v.data() + v.size() || slots < 1 || slots > 1024) {
                    error(line_no, tokens[t].second,
                          "invalid slots " + quote_input(v) + "; allowed: an integer 1 .. 1024");
                    ok = false;
                }
                e.slots = slots;
            } else {
                error(line_no, tokens[t].second,
                      "unexpected " + quote_input(tok) + "; allowed after the host: slots=N");
                ok = false;
            }
        }
        if (!ok) continue;
        bool duplicate = false;
        for (const HostEntry& prev : hosts)
            if (prev.host == e.host && prev.port == e.port) {
                error(line_no, tokens[0].second,
                      "host \"" + e.host + "\" is listed twice (first on line " + std::to_string(prev.line) +
                          "); allowed: each host once, with slots=N for its ranks");
                duplicate = true;
            }
        if (!duplicate) hosts.push_back(std::move(e));
    }
    if (!problems.empty()) return std::unexpected(Error(std::move(problems)));
    if (hosts.empty()) return fail(SourceLoc{file}, "hostfile", "lists no hosts; expected lines like \"node1 slots=8\"");
    return hosts;
}

Result<std::vector<HostEntry>> read_hostfile(const std::string& path) {
    auto text = read_regular_file(path, file_kind::hostfile, "hostfile");
    if (!text) return std::unexpected(text.error());
    return parse_hostfile(*text, path);
}

Result<std::vector<HostEntry>> resolve_hosts(const JobSpec& job, const std::string& hostfile_override) {
    const ClusterSpec& c = job.cluster;
    std::vector<HostEntry> hosts;
    std::string source;
    if (!hostfile_override.empty() || !job.launch.hostfile.empty()) {
        std::filesystem::path path = hostfile_override.empty() ? job.launch.hostfile : hostfile_override;
        if (hostfile_override.empty() && path.is_relative() && !job.origin.file.empty() && job.origin.file[0] != '<')
            path = std::filesystem::path(job.origin.file).parent_path() / path;
        auto parsed = read_hostfile(path.string());
        if (!parsed) return std::unexpected(parsed.error());
        hosts = std::move(*parsed);
        source = path.string();
    } else if (!c.hosts.empty()) {
        for (const std::string& h : c.hosts) hosts.push_back(HostEntry{h, "", 0, 0, 0});
        source = "cluster.hosts";
    } else if (job.launch.mode == LaunchMode::local) {
        for (int n = 0; n < c.nodes; ++n) hosts.push_back(HostEntry{"localhost", "", 0, 0, 0});
        return hosts;
    } else {
        return fail(job.where("launch.mode"), "launch.mode",
                    "\"ssh\" needs hosts; allowed: launch.hostfile, cluster.hosts, or --hosts FILE");
    }
    return check_hosts_for_job(job, std::move(hosts), source);
}

Result<std::vector<HostEntry>> check_hosts_for_job(const JobSpec& job, std::vector<HostEntry> hosts,
                                                   const std::string& source) {
    const ClusterSpec& c = job.cluster;
    if ((int)hosts.size() != c.nodes)
        return fail(SourceLoc{source}, "hostfile",
                    "lists " + std::to_string(hosts.size()) + " hosts but the job has cluster.nodes = " +
                        std::to_string(c.nodes) + "; allowed: one host per node");
    for (const HostEntry& h : hosts)
        if (h.slots != 0 && h.slots != c.gpus_per_node)
            return fail(SourceLoc{source, h.line, 0}, "hostfile",
                        "host \"" + h.host + "\" has slots=" + std::to_string(h.slots) +
                            " but cluster.gpus_per_node = " + std::to_string(c.gpus_per_node) +
                            "; allowed: slots equal to gpus_per_node");
    return hosts;
}

}  // namespace ptd
