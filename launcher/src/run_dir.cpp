// run_dir.cpp — the run directory (docs/metrics.md#run-directory): the manifest
// (schema ptd.run/1) and its checked reader, the writer the launcher's supervisor uses,
// and the follower that `ptd watch` and the studio use to replay a live or finished run
// as LaunchEvents. The writer flushes every line and replaces the manifest atomically, so
// a reader in another process only ever sees whole manifests and whole lines, plus at
// most one partial last line per log, which the follower holds back until it completes.
#include "json_describe.h"
#include "ptd/run_dir.h"

#include "ptd/common/file_read.h"
#include "ptd/k8s.h"
#include "ptd/slurm.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ptd {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr const char* kRunSchema = "ptd.run/1";
// A line longer than this without a newline is delivered in pieces (as the transports do).
constexpr size_t kMaxLine = 1 << 20;
// Bytes read from one log per poll: a huge finished log is replayed over several polls
// instead of as one enormous batch of events.
constexpr long kMaxReadPerPoll = 4 << 20;
// Rank logs a writer keeps open at once.
constexpr size_t kMaxOpenLogs = 128;
// Seconds between two questions to the scheduler (squeue) about one run: ptd watch polls
// every second and the studio more often, and a controller serves a whole cluster.
constexpr double kSchedulerPollS = 2;

double now_s() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Checked reads of manifest fields; every problem is collected (like the job loaders), each
// naming the file, the field's path and what was given and expected.
class ManifestReader {
public:
    explicit ManifestReader(std::string file) : file_(std::move(file)) {}

    void problem(const std::string& key, const std::string& message) {
        diags_.push_back(Diagnostic{SourceLoc{file_, 0, 0}, key, message});
    }
    const json* get(const json& obj, const std::string& prefix, const char* key, bool required, const char* expected) {
        auto it = obj.find(key);
        if (it == obj.end()) {
            if (required) problem(prefix + key, std::string("missing; expected ") + expected);
            return nullptr;
        }
        return &*it;
    }
    // A top-level field that must be an array or an object (`type`): nullptr when it is missing
    // or of another type, with the problem noted.
    const json* container(const json& obj, const char* key, bool required, json::value_t type, const char* expected) {
        const json* v = get(obj, "", key, required, expected);
        if (v && v->type() != type) {
            problem(key, "got " + describe_json(*v) + ", expected " + expected);
            return nullptr;
        }
        return v;
    }
    // Each element of the top-level array `key`, when it is an object, to f(element, "key[i].",
    // i); any other element is a problem. The array itself, or nullptr as container() says.
    template <class F>
    const json* each_object(const json& obj, const char* key, bool required, const char* expected, F&& f) {
        const json* a = container(obj, key, required, json::value_t::array, expected);
        for (size_t i = 0; a && i < a->size(); ++i) {
            const json& e = (*a)[i];
            const std::string at = std::string(key) + "[" + std::to_string(i) + "]";
            if (e.is_object()) f(e, at + ".", i);
            else problem(at, "got " + describe_json(e) + ", expected an object");
        }
        return a;
    }
    void string(const json& obj, const std::string& prefix, const char* key, std::string& out, bool required = false) {
        const json* v = get(obj, prefix, key, required, "a string");
        if (!v) return;
        if (!v->is_string()) return problem(prefix + key, "got " + describe_json(*v) + ", expected a string");
        out = v->get_ref<const std::string&>();
    }
    void number(const json& obj, const std::string& prefix, const char* key, double& out, bool required = false) {
        const json* v = get(obj, prefix, key, required, "a number");
        if (!v) return;
        if (!v->is_number()) return problem(prefix + key, "got " + describe_json(*v) + ", expected a number");
        out = v->get<double>();
    }
    void boolean(const json& obj, const std::string& prefix, const char* key, bool& out, bool required = false) {
        const json* v = get(obj, prefix, key, required, "true or false");
        if (!v) return;
        if (!v->is_boolean()) return problem(prefix + key, "got " + describe_json(*v) + ", expected true or false");
        out = v->get<bool>();
    }
    // An integer in [lo, hi]; returns false when present but wrong.
    bool integer_value(const json& v, const std::string& path, long long lo, long long hi, long long& out) {
        const std::string expected = "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
        bool ok = false;
        if (v.is_number_unsigned()) {
            const auto u = v.get<std::uint64_t>();
            ok = u <= (std::uint64_t)hi;
            if (ok) out = (long long)u;
        } else if (v.is_number_integer()) {
            out = v.get<std::int64_t>();
            ok = true;
        }
        if (ok && (out < lo || out > hi)) ok = false;
        if (!ok) problem(path, "got " + describe_json(v) + ", expected " + expected);
        return ok;
    }
    template <class Int>
    void integer(const json& obj, const std::string& prefix, const char* key, Int& out, bool required = false,
                 long long lo = 0, long long hi = std::numeric_limits<int>::max()) {
        const json* v = get(obj, prefix, key, required, "an integer");
        if (!v) return;
        long long value = 0;
        if (integer_value(*v, prefix + key, lo, hi, value)) out = (Int)value;
    }
    Result<RunManifest> result(RunManifest m) {
        if (!diags_.empty()) return std::unexpected(Error(std::move(diags_)));
        return m;
    }
    const std::string& file() const { return file_; }

private:
    std::string file_;
    std::vector<Diagnostic> diags_;
};

// Writes `text` to `path` through `path.tmp` + rename, so readers never see half a file.
Result<void> write_atomically(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) return fail(SourceLoc{tmp}, "", std::string("cannot write: ") + std::strerror(errno));
    const bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0;
    const int saved = errno;
    std::fclose(f);
    if (!wrote) {
        std::remove(tmp.c_str());
        return fail(SourceLoc{tmp}, "", std::string("cannot write: ") + std::strerror(saved));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        std::remove(tmp.c_str());
        return fail(SourceLoc{path}, "", std::string("cannot replace: ") + std::strerror(err));
    }
    return {};
}


// One log line as the event a live launch gives for it: `metric` when it parses as a
// metrics line, else `output` (the log mixes both streams, so is_stderr stays false).
LaunchEvent line_event(int rank, int host, std::string line, double t) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    LaunchEvent ev;
    ev.rank = rank;
    ev.host = host;
    ev.time = t;
    if (auto rec = parse_metrics_line(line)) {
        ev.kind = LaunchEventKind::metric;
        ev.metric = std::move(rec);
    } else {
        ev.kind = LaunchEventKind::output;
    }
    ev.text = std::move(line);
    return ev;
}

std::string log_path(const std::string& dir, int rank) { return dir + "/rank-" + std::to_string(rank) + ".log"; }

// ---- Liveness of processes on this machine, from /proc.

// A /proc file of this machine (a few hundred bytes; the kernel reports size 0, so the
// size-capped reader for user files does not apply). "" when it cannot be read.
std::string read_small_file(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return "";
    std::string text;
    char buf[4096];
    size_t n;
    while (text.size() < (1u << 20) && (n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    const bool ok = !std::ferror(f);
    std::fclose(f);
    return ok ? text : "";
}

std::string this_boot_id() {
    std::string id = read_small_file("/proc/sys/kernel/random/boot_id");
    while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
    return id;
}

// State letter and start time (clock ticks since boot) of a process; false when there is
// no such process.
bool process_stat(long pid, char& state, unsigned long long& start_time) {
    if (pid <= 0) return false;
    const std::string stat = read_small_file("/proc/" + std::to_string(pid) + "/stat");
    const size_t close_paren = stat.rfind(')');  // the command name may hold spaces and ')'
    if (close_paren == std::string::npos || close_paren + 2 >= stat.size()) return false;
    // Fields after the name: 3 state, ..., 22 starttime.
    const char* p = stat.c_str() + close_paren + 2;
    state = *p;
    for (int field = 3; field < 22 && *p; ++field) {
        while (*p && *p != ' ') ++p;
        while (*p == ' ') ++p;
    }
    start_time = std::strtoull(p, nullptr, 10);
    return true;
}

bool running_state(char state) { return state != 'Z' && state != 'X' && state != 'x'; }

// The launcher is alive: the pid runs and started when the manifest says it did.
bool launcher_alive(const RunLauncherInfo& l) {
    char state = 0;
    unsigned long long start = 0;
    return process_stat(l.pid, state, start) && running_state(state) && (l.start_time == 0 || start == l.start_time);
}

// A rank's process is alive: the pid runs and carries the run's PTD_RUN_ID (every rank
// gets it), so another process that reused the pid does not count.
bool rank_alive(long pid, const std::string& run_id) {
    char state = 0;
    unsigned long long start = 0;
    if (!process_stat(pid, state, start) || !running_state(state)) return false;
    const std::string env = read_small_file("/proc/" + std::to_string(pid) + "/environ");
    const std::string needle = "PTD_RUN_ID=" + run_id;
    for (size_t at = 0; at < env.size();) {
        const size_t end = env.find('\0', at);
        if (env.compare(at, (end == std::string::npos ? env.size() : end) - at, needle) == 0) return true;
        if (end == std::string::npos) break;
        at = end + 1;
    }
    return false;
}

// "rank 5", "ranks 0-3", "ranks 0, 2, 5".
std::string rank_list(const std::vector<int>& ranks) {
    if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
    bool contiguous = true;
    for (size_t i = 1; i < ranks.size(); ++i) contiguous &= ranks[i] == ranks[i - 1] + 1;
    if (contiguous && !ranks.empty()) return "ranks " + std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
    std::string s = "ranks ";
    for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
    return s;
}

}  // namespace

Result<void> write_new_file(const std::string& path, const std::string& text, unsigned mode) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) return fail(SourceLoc{path}, "", std::string("cannot create: ") + std::strerror(errno));
    bool ok = true;
    for (size_t off = 0; ok && off < text.size();) {
        const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        ok = n > 0;
        if (ok) off += (size_t)n;
    }
    const int saved = errno;
    if (::close(fd) != 0) ok = false;
    if (!ok) return fail(SourceLoc{path}, "", std::string("cannot write: ") + std::strerror(saved));
    return {};
}

RunLauncherInfo this_launcher() {
    RunLauncherInfo l;
    l.pid = (long)getpid();
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) l.host = host;
    l.boot_id = this_boot_id();
    char state = 0;
    process_stat(l.pid, state, l.start_time);
    return l;
}

// ---------------------------------------------------------------------------------------
// Manifest

bool is_final_run_state(const std::string& state) { return state == "finished" || state == "failed" || state == "stopped"; }

RunManifest initial_manifest(const LaunchPlan& plan) {
    RunManifest m;
    m.run_id = plan.run_id;
    m.job_name = plan.job.model.name;
    m.job_file = plan.job.origin.file;
    m.state = "starting";
    m.started = now_s();
    m.world_size = (int)plan.ranks.size();
    // The stop step: the last --steps among the engine arguments wins, as in CLI11.
    m.steps = plan.job.training.steps;
    if (!plan.ranks.empty()) {
        const auto& argv = plan.ranks.front().argv;
        for (size_t i = 0; i + 1 < argv.size(); ++i)
            if (argv[i] == "--steps") m.steps = std::atoi(argv[i + 1].c_str());
        for (const std::string& a : argv)
            if (a.rfind("--steps=", 0) == 0) m.steps = std::atoi(a.c_str() + 8);
    }
    m.local = plan.local;
    m.master_addr = plan.master_addr;
    m.master_port = plan.master_port;
    for (const HostPlan& h : plan.hosts) m.hosts.push_back(h.display);
    for (const RankPlan& r : plan.ranks) {
        RunManifestRank mr;
        mr.rank = r.rank;
        mr.host = r.host;
        mr.local_rank = r.local_rank;
        mr.tp = r.tp;
        mr.pp = r.pp;
        mr.dp = r.dp;
        m.ranks.push_back(mr);
    }
    m.profile = plan.profile;
    m.max_restarts = plan.max_restarts;
    return m;
}

std::string manifest_to_json(const RunManifest& m) {
    ojson j;
    j["schema"] = kRunSchema;
    j["run_id"] = m.run_id;
    j["job_name"] = m.job_name;
    j["job_file"] = m.job_file;
    j["state"] = m.state;
    j["started"] = m.started;
    j["ended"] = m.ended;
    j["world_size"] = m.world_size;
    j["steps"] = m.steps;
    j["local"] = m.local;
    j["master_addr"] = m.master_addr;
    j["master_port"] = m.master_port;
    j["hosts"] = m.hosts;
    ojson ranks = ojson::array();
    for (const RunManifestRank& r : m.ranks) {
        ojson jr;
        jr["rank"] = r.rank;
        jr["host"] = r.host;
        jr["local_rank"] = r.local_rank;
        jr["tp"] = r.tp;
        jr["pp"] = r.pp;
        jr["dp"] = r.dp;
        jr["pid"] = r.pid;
        jr["exit_code"] = r.exit_code ? ojson(*r.exit_code) : ojson(nullptr);
        ranks.push_back(std::move(jr));
    }
    j["ranks"] = std::move(ranks);
    j["exit_code"] = m.exit_code;
    j["failed_rank"] = m.failed_rank;
    j["reason"] = m.reason;
    if (m.launcher.pid > 0) {
        ojson l;
        l["pid"] = m.launcher.pid;
        l["host"] = m.launcher.host;
        l["boot_id"] = m.launcher.boot_id;
        l["start_time"] = m.launcher.start_time;
        j["launcher"] = std::move(l);
    }
    if (m.profile) {
        ojson p;
        p["path"] = m.profile->path;
        p["source"] = m.profile->source;
        p["measured_at"] = m.profile->measured_at;
        j["profile"] = std::move(p);
    }
    if (m.scheduler) {
        ojson s;
        s["kind"] = m.scheduler->kind;
        s["job_id"] = m.scheduler->job_id;
        s["state"] = m.scheduler->state;
        j["scheduler"] = std::move(s);
    }
    if (m.max_restarts > 0) j["max_restarts"] = m.max_restarts;
    if (!m.restarts.empty()) {
        ojson rs = ojson::array();
        for (const RestartRecord& r : m.restarts) {
            ojson jr;
            jr["attempt"] = r.attempt;
            jr["rank"] = r.rank;
            jr["host"] = r.host;
            jr["reason"] = r.reason;
            jr["time"] = r.time;
            jr["failed_at_step"] = r.failed_at_step;
            jr["resumed_from"] = r.resumed_from;
            jr["steps_lost"] = r.steps_lost;
            jr["seconds_lost"] = r.seconds_lost >= 0 ? ojson(r.seconds_lost) : ojson(nullptr);
            if (r.excluded_host >= 0) {
                jr["excluded_host"] = r.excluded_host;
                jr["excluded_host_name"] = r.excluded_host_name;
                jr["layout"] = r.layout;
            }
            rs.push_back(std::move(jr));
        }
        j["restarts"] = std::move(rs);
    }
    if (m.goodput) {
        ojson g;
        g["wall_s"] = m.goodput->wall_s;
        g["training_s"] = m.goodput->training_s;
        g["goodput"] = m.goodput->goodput;
        g["steps"] = m.goodput->steps;
        g["steps_lost"] = m.goodput->steps_lost;
        g["seconds_lost"] = m.goodput->seconds_lost;
        g["restarts"] = m.goodput->restarts;
        j["goodput"] = std::move(g);
    }
    // Invalid UTF-8 (a reason quoting a path) is replaced rather than throwing.
    return j.dump(2, ' ', false, ojson::error_handler_t::replace) + "\n";
}

// One restart object: an entry of the manifest's "restarts", or a line of restarts.jsonl.
// `world_size`: the ranks of the world the record's failure happened in (a record of the
// manifest before an --exclude-failed restart: a bigger one; the caller checks those).
static RestartRecord read_restart(ManifestReader& rd, const json& e, const std::string& prefix, size_t i, int world_size,
                                  size_t hosts) {
    RestartRecord r;
    rd.integer(e, prefix, "attempt", r.attempt, true, (long long)i + 1, (long long)i + 1);
    rd.integer(e, prefix, "rank", r.rank, false, -1, std::max(0, world_size - 1));
    rd.integer(e, prefix, "host", r.host, false, -1, std::max<long long>(0, (long long)hosts - 1));
    rd.string(e, prefix, "reason", r.reason);
    rd.number(e, prefix, "time", r.time);
    rd.integer(e, prefix, "failed_at_step", r.failed_at_step, false, 0);
    rd.integer(e, prefix, "resumed_from", r.resumed_from, false, 0);
    rd.integer(e, prefix, "steps_lost", r.steps_lost, false, 0);
    if (const json* x = rd.get(e, prefix, "seconds_lost", false, "a number or null"); x && !x->is_null())
        rd.number(e, prefix, "seconds_lost", r.seconds_lost);
    rd.integer(e, prefix, "excluded_host", r.excluded_host, false, -1, std::max<long long>(0, (long long)hosts - 1));
    rd.string(e, prefix, "excluded_host_name", r.excluded_host_name, false);
    rd.string(e, prefix, "layout", r.layout, false);
    return r;
}

Result<std::vector<RestartRecord>> restarts_from_lines(const std::string& text, const std::string& file, int world_size,
                                                       size_t hosts) {
    ManifestReader rd(file);
    std::vector<RestartRecord> out;
    size_t start = 0;
    for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
        const std::string at = "line " + std::to_string(out.size() + 1);
        const json j = json::parse(text.substr(start, nl - start), nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded() || !j.is_object()) {
            rd.problem(at, "not a JSON restart object");
            break;
        }
        out.push_back(read_restart(rd, j, at + ": ", out.size(), world_size, hosts));
    }
    if (auto ok = rd.result({}); !ok) return std::unexpected(ok.error());
    return out;
}

Result<RunManifest> manifest_from_json(const std::string& text, const std::string& file) {
    ManifestReader rd(file);
    const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
        rd.problem("", text.empty() ? "the file is empty; expected a ptd.run/1 JSON object"
                                    : "not valid JSON (truncated or garbled); expected a ptd.run/1 JSON object");
        return rd.result({});
    }
    if (!j.is_object()) {
        rd.problem("", "got " + describe_json(j) + ", expected a ptd.run/1 JSON object");
        return rd.result({});
    }
    RunManifest m;
    if (const json* s = rd.get(j, "", "schema", true, "\"ptd.run/1\"")) {
        if (!s->is_string() || s->get_ref<const std::string&>() != kRunSchema) {
            // Another schema means every other field may mean something else: stop here.
            rd.problem("schema", "got " + describe_json(*s) + ", expected \"ptd.run/1\"");
            return rd.result({});
        }
    } else {
        return rd.result({});
    }
    rd.string(j, "", "run_id", m.run_id, true);
    rd.string(j, "", "job_name", m.job_name);
    rd.string(j, "", "job_file", m.job_file);
    if (const json* s = rd.get(j, "", "state", true, "starting, running, restarting, finished, failed or stopped")) {
        const std::string v = s->is_string() ? s->get<std::string>() : "";
        if (v == "starting" || v == "running" || v == "restarting" || is_final_run_state(v)) m.state = v;
        else rd.problem("state", "got " + describe_json(*s) + ", expected starting, running, restarting, finished, failed or stopped");
    }
    rd.number(j, "", "started", m.started);
    rd.number(j, "", "ended", m.ended);
    rd.integer(j, "", "world_size", m.world_size, true, 1);
    rd.integer(j, "", "steps", m.steps);
    rd.boolean(j, "", "local", m.local);
    rd.string(j, "", "master_addr", m.master_addr);
    rd.integer(j, "", "master_port", m.master_port, false, 0, 65535);
    if (const json* h = rd.container(j, "hosts", true, json::value_t::array, "an array of host names")) {
        for (size_t i = 0; i < h->size(); ++i) {
            const json& e = (*h)[i];
            if (e.is_string()) m.hosts.push_back(e.get<std::string>());
            else rd.problem("hosts[" + std::to_string(i) + "]", "got " + describe_json(e) + ", expected a string");
        }
        if (h->empty()) rd.problem("hosts", "is empty, expected at least one host name");
    }
    const json* rs = rd.each_object(j, "ranks", true, "an array of rank objects", [&](const json& e, const std::string& prefix, size_t i) {
        RunManifestRank r;
        // Ranks are listed in order: entry i is global rank i.
        rd.integer(e, prefix, "rank", r.rank, true, (long long)i, (long long)i);
        const long long last_host = std::max<long long>(0, (long long)m.hosts.size() - 1);
        rd.integer(e, prefix, "host", r.host, true, 0, last_host);
        rd.integer(e, prefix, "local_rank", r.local_rank);
        rd.integer(e, prefix, "tp", r.tp);
        rd.integer(e, prefix, "pp", r.pp);
        rd.integer(e, prefix, "dp", r.dp);
        rd.integer(e, prefix, "pid", r.pid, false, 0, std::numeric_limits<long>::max());
        if (const json* x = rd.get(e, prefix, "exit_code", false, "an integer or null"); x && !x->is_null()) {
            long long code = 0;
            if (rd.integer_value(*x, prefix + "exit_code", -1, 255, code)) r.exit_code = (int)code;
        }
        m.ranks.push_back(r);
    });
    if (rs) {
        if ((int)rs->size() != m.world_size && m.world_size > 0)
            rd.problem("ranks", "has " + std::to_string(rs->size()) + " entries, expected world_size (" +
                                    std::to_string(m.world_size) + ")");
    }
    rd.integer(j, "", "exit_code", m.exit_code, false, std::numeric_limits<int>::min(), std::numeric_limits<int>::max());
    rd.integer(j, "", "failed_rank", m.failed_rank, false, -1);
    rd.string(j, "", "reason", m.reason);
    if (const json* l = rd.container(j, "launcher", false, json::value_t::object, "an object")) {
        rd.integer(*l, "launcher.", "pid", m.launcher.pid, true, 1, std::numeric_limits<long>::max());
        rd.string(*l, "launcher.", "host", m.launcher.host);
        rd.string(*l, "launcher.", "boot_id", m.launcher.boot_id);
        rd.integer(*l, "launcher.", "start_time", m.launcher.start_time, false, 0, std::numeric_limits<long long>::max());
    }
    if (const json* p = rd.container(j, "profile", false, json::value_t::object, "an object")) {
        RunProfileRecord r;
        rd.string(*p, "profile.", "path", r.path, true);
        rd.string(*p, "profile.", "source", r.source);
        rd.string(*p, "profile.", "measured_at", r.measured_at);
        if (r.path.empty()) rd.problem("profile.path", "is empty, expected the profile file's path");
        m.profile = std::move(r);
    }
    if (const json* s = rd.container(j, "scheduler", false, json::value_t::object, "an object")) {
        RunSchedulerRecord r;
        rd.string(*s, "scheduler.", "kind", r.kind, true);
        rd.string(*s, "scheduler.", "job_id", r.job_id, true);
        rd.string(*s, "scheduler.", "state", r.state);
        if (r.kind != "slurm" && r.kind != "k8s")
            rd.problem("scheduler.kind", "got " + quote_input(r.kind) + ", expected \"slurm\" or \"k8s\"");
        if (r.job_id.empty()) rd.problem("scheduler.job_id", "is empty, expected the scheduler's job id");
        m.scheduler = std::move(r);
    }
    rd.integer(j, "", "max_restarts", m.max_restarts, false, 0, 1000);
    rd.each_object(j, "restarts", false, "an array of restart objects", [&](const json& e, const std::string& prefix, size_t i) {
        // Up to the last restart that left a host out, a record names a rank of the bigger
        // world before it (world_size is the world after): not bounded by world_size there;
        // later records are.
        bool shrinks_later = false;
        if (const json* all = j.is_object() && j.contains("restarts") ? &j["restarts"] : nullptr; all && all->is_array())
            for (size_t k = i; k < all->size() && !shrinks_later; ++k)
                shrinks_later = (*all)[k].is_object() && (*all)[k].contains("excluded_host");
        m.restarts.push_back(read_restart(rd, e, prefix, i, shrinks_later ? std::numeric_limits<int>::max() : m.world_size, m.hosts.size()));
    });
    if (const json* g = rd.container(j, "goodput", false, json::value_t::object, "an object")) {
        RunGoodput gp;
        rd.number(*g, "goodput.", "wall_s", gp.wall_s);
        rd.number(*g, "goodput.", "training_s", gp.training_s);
        rd.number(*g, "goodput.", "goodput", gp.goodput);
        rd.integer(*g, "goodput.", "steps", gp.steps, false, 0);
        rd.integer(*g, "goodput.", "steps_lost", gp.steps_lost, false, 0);
        rd.number(*g, "goodput.", "seconds_lost", gp.seconds_lost);
        rd.integer(*g, "goodput.", "restarts", gp.restarts, false, 0);
        m.goodput = gp;
    }
    return rd.result(std::move(m));
}

Result<RunManifest> read_manifest(const std::string& run_dir) {
    const std::string path = run_dir + "/manifest.json";
    std::error_code exists_ec;
    if (!fs::exists(path, exists_ec))
        return fail(SourceLoc{path}, "",
                    std::string("cannot read the run manifest: ") + std::strerror(ENOENT) +
                        " (is this a run directory written by `ptd launch`?)");
    auto text = read_regular_file(path, file_kind::run_manifest);  // no FIFO, no endless file
    if (!text) return std::unexpected(text.error());
    return manifest_from_json(*text, path);
}

// ---------------------------------------------------------------------------------------
// Writer

Result<std::unique_ptr<RunDirWriter>> RunDirWriter::create(const std::string& dir, const std::string& job_toml,
                                                           const RunManifest& manifest) {
    std::error_code ec;
    const fs::path parent = fs::path(dir).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (ec || (!parent.empty() && !fs::is_directory(parent, ec)))
        return fail(SourceLoc{dir}, "",
                    "cannot create the run directory: its folder " + parent.string() + ": " +
                        (ec ? ec.message() : "not a directory"));
    // The run directory is the run's own: made here, never an existing one (whose job.toml
    // or sbatch.sh would be overwritten).
    if (::mkdir(dir.c_str(), 0755) != 0) {
        const int err = errno;
        if (err == EEXIST)
            return fail(SourceLoc{dir}, "",
                        "the run directory already exists (a run with this id, or another file); nothing in it was "
                        "changed; allowed: a new run id (--run-id) or another run root (--run-root)");
        return fail(SourceLoc{dir}, "", std::string("cannot create the run directory: ") + std::strerror(err));
    }
    std::unique_ptr<RunDirWriter> w(new RunDirWriter());
    w->dir_ = dir;
    if (auto r = write_new_file(dir + "/job.toml", job_toml); !r) return std::unexpected(r.error());
    if (auto r = w->write_manifest(manifest); !r) return std::unexpected(r.error());
    return w;
}

RunDirWriter::~RunDirWriter() {
    for (auto& [rank, f] : logs_)
        if (f) std::fclose(f);
}

void RunDirWriter::append_line(int rank, const std::string& line) {
    if (rank < 0) return;
    std::lock_guard lock(mu_);
    auto it = logs_.find(rank);
    if (it == logs_.end()) {
        // Thousands of ranks would exhaust file descriptors (the SSH sockets need them too):
        // keep a bounded set open; a closed log is reopened for append when needed.
        if (logs_.size() >= kMaxOpenLogs) {
            auto victim = logs_.begin();
            if (victim->first == rank) ++victim;
            if (victim->second) std::fclose(victim->second);
            logs_.erase(victim);
        }
        it = logs_.emplace(rank, std::fopen(log_path(dir_, rank).c_str(), "ab")).first;
    }
    FILE* f = it->second;
    if (!f) {
        logs_.erase(it);  // try again with the next line
        return;           // disk full or removed: the line still reaches the live events
    }
    // One write per line (text + newline) so a concurrent reader sees whole lines, then
    // flush so `ptd watch` and a post-mortem both have it.
    std::string buf;
    buf.reserve(line.size() + 1);
    buf += line;
    buf += '\n';
    std::fwrite(buf.data(), 1, buf.size(), f);
    std::fflush(f);
}

bool launcher_is_alive(const RunLauncherInfo& launcher) { return launcher.pid > 0 && launcher_alive(launcher); }

Result<void> write_manifest_file(const std::string& run_dir, const RunManifest& m) {
    return write_atomically(run_dir + "/manifest.json", manifest_to_json(m));
}

Result<void> RunDirWriter::write_manifest(const RunManifest& m) {
    std::lock_guard lock(mu_);
    return write_atomically(dir_ + "/manifest.json", manifest_to_json(m));
}

// ---------------------------------------------------------------------------------------
// Follower

Result<std::unique_ptr<RunFollower>> RunFollower::open(const std::string& run_dir, RunFollowOptions options) {
    std::error_code ec;
    if (!fs::exists(run_dir, ec))
        return fail(SourceLoc{run_dir}, "", "no such run directory");
    if (!fs::is_directory(run_dir, ec))
        return fail(SourceLoc{run_dir}, "", "not a directory; expected a run directory (runs/<run-id>)");
    auto m = read_manifest(run_dir);
    if (!m) return std::unexpected(m.error());
    std::unique_ptr<RunFollower> f(new RunFollower());
    f->dir_ = run_dir;
    f->options_ = options;
    f->recorded_state_ = m->state;
    f->manifest_ = std::move(*m);
    return f;
}

RunFollower::~RunFollower() = default;

std::vector<LaunchEvent> RunFollower::poll() {
    std::vector<LaunchEvent> out;
    if (finished_sent_) return out;
    const double t = now_s();

    // 1. The manifest first: anything it reports (an exit, the final state) was preceded by
    //    the lines the writer flushed, so reading the logs after it misses none of them.
    //    A manifest that does not parse (written by hand, or a writer without the rename)
    //    is skipped: the previous one stays until a whole one is there.
    if (auto m = read_manifest(dir_)) {
        manifest_ = std::move(*m);
        recorded_state_ = manifest_.state;
    }
    if (tails_.size() < manifest_.ranks.size()) {
        for (size_t r = tails_.size(); r < manifest_.ranks.size(); ++r) {
            Tail tail;
            tail.path = log_path(dir_, (int)r);
            tails_.push_back(std::move(tail));
        }
    }
    // A Slurm run's restarts are the batch script's (launch_plan.cpp, slurm_restart_loop).
    if (manifest_.scheduler && manifest_.restarts.empty())
        if (auto rs = restarts_from_lines(read_small_file(dir_ + "/restarts.jsonl"), dir_ + "/restarts.jsonl",
                                          manifest_.world_size, manifest_.hosts.size()))
            manifest_.restarts = std::move(*rs);
    // Restarts the launcher recorded since the last poll (restart.h).
    for (; restarts_sent_ < manifest_.restarts.size(); ++restarts_sent_) {
        const RestartRecord& rr = manifest_.restarts[restarts_sent_];
        LaunchEvent ev;
        ev.kind = LaunchEventKind::restart;
        ev.rank = rr.rank;
        ev.host = rr.host;
        ev.text = restart_text(rr, std::max(manifest_.max_restarts, rr.attempt));
        ev.time = rr.time;
        ev.step = rr.resumed_from;
        out.push_back(std::move(ev));
    }
    bool final_state = is_final_run_state(manifest_.state);
    // A run handed to a scheduler: its state there (pending, running, ...) until the
    // manifest or the scheduler says the run is over.
    if (manifest_.scheduler && !final_state) {
        ask_scheduler(t);
        if (!scheduler_hosts_.empty() && scheduler_hosts_.size() == manifest_.hosts.size()) manifest_.hosts = scheduler_hosts_;
        if (scheduler_answered_) {
            manifest_.scheduler->state = scheduler_state_;
            if (scheduler_state_ == "RUNNING" && manifest_.state == "starting") manifest_.state = "running";
        }
    }
    // A later manifest never lists fewer ranks, but a hand-edited one might.
    const size_t n = std::min(tails_.size(), manifest_.ranks.size());

    bool drained = true;
    for (size_t r = 0; r < n; ++r) {
        Tail& tail = tails_[r];
        const RunManifestRank& mr = manifest_.ranks[r];
        struct stat st {};
        const bool exists = ::stat(tail.path.c_str(), &st) == 0;
        if (exists) {
            tail.has_log = true;
            tail.mtime = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
        }

        // 2. rank_started once: its pid is known or its log exists.
        if (!tail.started && (mr.pid > 0 || exists)) {
            tail.started = true;
            LaunchEvent ev;
            ev.kind = LaunchEventKind::rank_started;
            ev.rank = (int)r;
            ev.host = mr.host;
            ev.pid = mr.pid;
            const std::string host = mr.host >= 0 && mr.host < (int)manifest_.hosts.size() ? manifest_.hosts[(size_t)mr.host] : "?";
            ev.text = "rank " + std::to_string(r) + " on " + host + (mr.pid > 0 ? " (pid " + std::to_string(mr.pid) + ")" : "");
            ev.time = t;
            out.push_back(std::move(ev));
        }

        // 3. New bytes of the log, as whole lines.
        if (exists) {
            if (st.st_size < tail.offset) {  // replaced or truncated: start over
                tail.offset = 0;
                tail.partial.clear();
            }
            if (st.st_size > tail.offset) {
                if (FILE* f = std::fopen(tail.path.c_str(), "rb")) {
                    if (std::fseek(f, tail.offset, SEEK_SET) == 0) {
                        const long want = std::min<long>(kMaxReadPerPoll, (long)st.st_size - tail.offset);
                        std::string buf((size_t)want, '\0');
                        const size_t got = std::fread(buf.data(), 1, buf.size(), f);
                        buf.resize(got);
                        tail.offset += (long)got;
                        if (tail.offset < (long)st.st_size) drained = false;
                        size_t start = 0;
                        auto emit = [&](std::string line) {
                            out.push_back(line_event((int)r, mr.host, std::move(line), t));
                            const LaunchEvent& ev = out.back();
                            if (ev.metric && ev.metric->kind == MetricKind::end) tail.sent_end = true;
                        };
                        for (size_t nl; (nl = buf.find('\n', start)) != std::string::npos; start = nl + 1) {
                            tail.partial.append(buf, start, nl - start);
                            emit(std::move(tail.partial));
                            tail.partial.clear();
                        }
                        tail.partial.append(buf, start, std::string::npos);
                        while (tail.partial.size() >= kMaxLine) {
                            emit(tail.partial.substr(0, kMaxLine));
                            tail.partial.erase(0, kMaxLine);
                        }
                    } else {
                        drained = false;
                    }
                    std::fclose(f);
                } else {
                    drained = false;
                }
            }
        }
    }

    // 3b. Nobody may ever write the end into the manifest: derive it from the ranks.
    if (!final_state && drained && derived_state_.empty()) derive_end(t);
    if (!final_state && !derived_state_.empty()) {
        manifest_.state = derived_state_;
        manifest_.reason = decided_;
        if (derived_failed_rank_ >= 0) manifest_.failed_rank = derived_failed_rank_;
        if (manifest_.ended == 0) manifest_.ended = t;
        for (size_t r = 0; r < n; ++r)
            if (tails_[r].sent_end && !manifest_.ranks[r].exit_code) manifest_.ranks[r].exit_code = 0;
        final_state = true;
    }

    // 4. Exits, after the rank's lines.
    for (size_t r = 0; r < n; ++r) {
        Tail& tail = tails_[r];
        const RunManifestRank& mr = manifest_.ranks[r];
        if (tail.exited || !mr.exit_code) continue;
        if (!drained) continue;  // let its lines catch up first
        // A partial last line of an exited rank will never complete: deliver it.
        if (!tail.partial.empty()) {
            out.push_back(line_event((int)r, mr.host, std::move(tail.partial), t));
            tail.partial.clear();
        }
        tail.exited = true;
        LaunchEvent ev;
        ev.kind = LaunchEventKind::rank_exited;
        ev.rank = (int)r;
        ev.host = mr.host;
        ev.exit_code = *mr.exit_code;
        ev.text = "rank " + std::to_string(r) + " exited " + std::to_string(*mr.exit_code);
        ev.time = t;
        out.push_back(std::move(ev));
    }

    // 5. The end: final state and nothing left to read.
    if (final_state && drained) {
        for (size_t r = 0; r < n; ++r) {
            Tail& tail = tails_[r];
            if (tail.partial.empty()) continue;
            out.push_back(line_event((int)r, manifest_.ranks[r].host, std::move(tail.partial), t));
            tail.partial.clear();
        }
        LaunchEvent ev;
        ev.kind = LaunchEventKind::finished;
        ev.exit_code = manifest_.exit_code;
        ev.rank = manifest_.failed_rank;
        ev.text = manifest_.reason.empty() ? "run " + manifest_.state : manifest_.reason;
        ev.time = t;
        out.push_back(std::move(ev));
        done_ = true;
        finished_sent_ = true;
    }
    return out;
}

// A JobSet's pods (k8s.h): their phases, and their logs copied into the run directory's rank
// logs (each "[rank R] line" of a pod's log), which the follower then reads as any run's. A log
// is replaced (atomically, so a reader sees the old or the new one) only when the pod's copy
// is longer: a run directory the pods share already holds the ranks' own logs.
void RunFollower::ask_k8s() {
    std::string why;
    const auto state = k8s_job_state(manifest_.scheduler->job_id, std::max<int>(1, (int)manifest_.hosts.size()), &why);
    scheduler_answered_ = state.has_value();
    if (!state) return;
    scheduler_state_ = state->state;
    k8s_outcome_ = k8s_outcome(*state);
    scheduler_reason_ = k8s_outcome_.words;
    // The Kubernetes nodes the pods run on, in place of the plan's "node-0" ..., once every
    // node's pod is scheduled.
    std::vector<std::string> hosts(manifest_.hosts.size());
    for (const K8sPod& pod : state->pods)
        if (pod.node >= 0 && pod.node < (int)hosts.size() && !pod.host.empty()) hosts[(size_t)pod.node] = pod.host;
    if (!hosts.empty() && std::none_of(hosts.begin(), hosts.end(), [](const std::string& h) { return h.empty(); }))
        scheduler_hosts_ = hosts;
    for (const K8sPod& pod : state->pods) {
        if (pod.phase == "Pending" || pod.phase.empty() || k8s_logs_final_.count(pod.name)) continue;
        const std::string log = k8s_pod_log(pod.name);
        // An ended pod's log no longer grows: read once more, then never again.
        if (pod.phase == "Succeeded" || pod.phase == "Failed") k8s_logs_final_.insert(pod.name);
        if (pod.node == state->failed_node && pod.phase == "Failed") derived_failed_rank_ = k8s_failed_rank(log);
        for (const auto& [rank, text] : k8s_rank_lines(log)) {
            if (rank < 0 || rank >= (int)manifest_.ranks.size()) continue;
            const std::string path = log_path(dir_, rank);
            struct stat st {};
            if (::stat(path.c_str(), &st) == 0 && (size_t)st.st_size >= text.size()) continue;
            (void)write_atomically(path, text);
        }
    }
}

void RunFollower::ask_scheduler(double now) {
    if (scheduler_asked_ > 0 && now - scheduler_asked_ < kSchedulerPollS) return;
    scheduler_asked_ = now;
    if (manifest_.scheduler->kind == "k8s") return ask_k8s();
    const auto state = slurm_job_state(manifest_.scheduler->job_id);
    scheduler_answered_ = state.has_value();
    if (state) {
        scheduler_state_ = state->state;
        scheduler_reason_ = state->reason;
        // The job's real nodes, in place of the plan's "node-0" ...: srun places ranks on the
        // allocation's nodes in its order, one block of ranks per node.
        if (!state->nodes.empty() && state->nodes.size() == manifest_.hosts.size()) scheduler_hosts_ = state->nodes;
    }
}

void RunFollower::derive_end(double now) {
    const size_t n = std::min(tails_.size(), manifest_.ranks.size());
    if (n == 0) return;
    std::vector<int> ended, open;
    for (size_t r = 0; r < n; ++r) (tails_[r].sent_end ? ended : open).push_back((int)r);
    auto decide = [&](const std::string& state, std::string how) {
        derived_state_ = state;
        decided_ = std::move(how);
    };
    // The scheduler, while it answers, knows best: a pending job has no output for hours,
    // a job it ended (time limit, scancel, a lost node) may leave ranks that never said so.
    if (manifest_.scheduler && scheduler_answered_ && manifest_.scheduler->kind == "k8s") {
        if (k8s_outcome_.run_state.empty()) return;
        std::string how = "JobSet " + manifest_.scheduler->job_id + " " + scheduler_state_ + ": " + k8s_outcome_.words;
        if (k8s_outcome_.run_state == "failed" && derived_failed_rank_ >= 0)
            how += "; rank " + std::to_string(derived_failed_rank_) + " exited first";
        decide(k8s_outcome_.run_state, how);
        return;
    }
    if (manifest_.scheduler && scheduler_answered_) {
        const SlurmOutcome o = slurm_outcome(scheduler_state_);
        if (o.run_state.empty()) return;
        const std::string& id = manifest_.scheduler->job_id;
        std::string how = "Slurm job " + id + " " + scheduler_state_ + ": " + o.words;
        if (o.run_state == "failed") {
            const std::string job_out = read_small_file(dir_ + "/slurm-" + id + ".out");
            // The script's preflight (ptd launch --slurm --preflight) stopped the job before any
            // rank trained: its own words, not a training rank's failure (a failed probe's srun
            // error names a probing task).
            if (const auto stop = slurm_preflight_stop(job_out)) {
                how += "; " + *stop;
            } else if (auto f = srun_first_failure(job_out); f && f->rank < (int)n) {
                // srun names the task (= global rank) that failed first in the job's output.
                derived_failed_rank_ = f->rank;
                how += "; rank " + std::to_string(f->rank) + " on " + f->node + ": " + f->what;
            }
        }
        decide(o.run_state, how);
        return;
    }
    const std::string ended_note = ended.empty() ? "" : "; " + rank_list(ended) + " sent end";
    if (open.empty()) {
        decide("finished", n == 1 ? "rank 0 sent end" : "all " + std::to_string(n) + " ranks sent end");
        return;
    }

    // The launcher on this machine: while it runs, it records the end itself.
    const RunLauncherInfo& l = manifest_.launcher;
    const bool launcher_here = l.pid > 0 && !l.boot_id.empty() && l.boot_id == this_boot_id();
    bool launcher_gone = false;
    if (launcher_here) {
        if (launcher_alive(l)) return;
        launcher_gone = true;
        if (manifest_.local) {
            // Local ranks are this machine's processes: look at each one.
            std::vector<int> alive, dead, never;
            for (int r : open) {
                const long pid = manifest_.ranks[(size_t)r].pid;
                if (pid <= 0) never.push_back(r);
                else if (rank_alive(pid, manifest_.run_id)) alive.push_back(r);
                else dead.push_back(r);
            }
            if (!alive.empty()) return;  // they outlived it: follow them until they end
            std::string how = "launcher pid " + std::to_string(l.pid) + " gone and ";
            if (!dead.empty()) how += rank_list(dead) + " dead (pids not running)";
            if (!never.empty()) how += std::string(dead.empty() ? "" : ", ") + rank_list(never) + " never started";
            decide("failed", how + ended_note);
            return;
        }
    }

    // Ranks elsewhere (SSH hosts, Slurm nodes): only their logs tell. Not before any of
    // them wrote anything (a Slurm job may wait in the queue for hours).
    double newest = 0;
    std::vector<int> silent;
    for (int r : open) {
        if (!tails_[(size_t)r].has_log) continue;
        newest = std::max(newest, tails_[(size_t)r].mtime);
        silent.push_back(r);
    }
    if (silent.empty()) return;
    const double quiet = now - newest;
    if (quiet < options_.stale_after_s) return;
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.0f", std::floor(quiet));
    std::string how = "no output from " + rank_list(silent) + " for " + secs + " s" +
                      (silent.size() > 1 ? " or more" : "") + " (ptd watch --stale-after " +
                      std::to_string((long long)std::llround(options_.stale_after_s)) + ")";
    if (launcher_gone) how = "launcher pid " + std::to_string(l.pid) + " gone and " + how;
    decide("failed", how + ended_note);
}

}  // namespace ptd
