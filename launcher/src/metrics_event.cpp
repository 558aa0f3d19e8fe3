// metrics_event.cpp — reads one line of a rank's stdout as a `ptd.metrics/1` record
// (docs/metrics.md). It is fed every line every rank writes, so it must accept anything:
// it never throws, bounds the JSON nesting it hands to the parser, and reports the first
// field that is not what the schema says (name, what was given, what was expected).
#include "json_describe.h"
#include "ptd/metrics_event.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

namespace ptd {

namespace {

using json = nlohmann::json;

// Deeper than any metrics line (the deepest is memory.<cat>.current: 3); a line nested
// much deeper is not ours and is refused before it reaches the parser.
constexpr int kMaxDepth = 32;

const char* const kKindNames[] = {"start", "step", "checkpoint", "warning", "error", "end", "probe"};
const char* const kProbeKinds[] = {"host", "plan", "gemm", "attention", "memory", "elementwise", "host_op", "layer", "comm", "link", "done"};
const char* const kMemNames[] = {"params", "grads", "optimizer", "activations", "communication", "workspace", "total"};


// Nesting depth of [ and { outside strings, stopping as soon as it exceeds kMaxDepth.
bool nesting_ok(std::string_view s) {
    int depth = 0;
    bool in_string = false, escaped = false;
    for (char c : s) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            if (++depth > kMaxDepth) return false;
        } else if (c == '}' || c == ']') {
            --depth;
        }
    }
    return true;
}

// Reads typed fields out of one JSON object; the first problem sticks (later reads are
// no-ops) and names the field by its dotted path.
class FieldReader {
public:
    FieldReader(const json& obj, std::string prefix, std::string* problem) : obj_(obj), prefix_(std::move(prefix)), problem_(problem) {}

    bool ok() const { return ok_; }

    // Present → nullptr-safe pointer to the value; absent and required → problem.
    const json* find(const char* key, bool required, const char* expected) {
        if (!ok_) return nullptr;
        auto it = obj_.find(key);
        if (it == obj_.end()) {
            if (required) fail(key, "is missing", expected);
            return nullptr;
        }
        return &*it;
    }

    void number(const char* key, double& out, bool required = false) {
        const char* expected = "a number";
        const json* v = find(key, required, expected);
        if (!v) return;
        if (!v->is_number()) return fail(key, "is " + describe_json(*v), expected);
        const double d = v->get<double>();
        if (!std::isfinite(d)) return fail(key, "is " + describe_json(*v), "a finite number");
        out = d;
    }

    // Integers in [lo, hi]; a float with an integral value is accepted (other writers may
    // print 3.0), a fractional or out-of-range one is not.
    void integer(const char* key, int& out, bool required = false, long long lo = 0,
                 long long hi = std::numeric_limits<int>::max()) {
        const std::string expected = "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
        const json* v = find(key, required, expected.c_str());
        if (!v) return;
        long long value = 0;
        if (v->is_number_integer() && !v->is_number_unsigned()) {
            value = v->get<std::int64_t>();
        } else if (v->is_number_unsigned()) {
            const std::uint64_t u = v->get<std::uint64_t>();
            if (u > (std::uint64_t)hi) return fail(key, "is " + describe_json(*v), expected);
            value = (long long)u;
        } else if (v->is_number_float()) {
            const double d = v->get<double>();
            if (!std::isfinite(d) || d != std::floor(d) || d < (double)lo || d > (double)hi)
                return fail(key, "is " + describe_json(*v), expected);
            value = (long long)d;
        } else {
            return fail(key, "is " + describe_json(*v), expected);
        }
        if (value < lo || value > hi) return fail(key, "is " + describe_json(*v), expected);
        out = (int)value;
    }

    void boolean(const char* key, bool& out, bool required = false) {
        const json* v = find(key, required, "true or false");
        if (!v) return;
        if (!v->is_boolean()) return fail(key, "is " + describe_json(*v), "true or false");
        out = v->get<bool>();
    }

    void string(const char* key, std::string& out, bool required = false) {
        const json* v = find(key, required, "a string");
        if (!v) return;
        if (!v->is_string()) return fail(key, "is " + describe_json(*v), "a string");
        out = v->get_ref<const std::string&>();
    }

    // An object field: a reader over it (or nullopt when absent / not an object).
    std::optional<FieldReader> object(const char* key, bool required = false) {
        const json* v = find(key, required, "an object");
        if (!v) return std::nullopt;
        if (!v->is_object()) {
            fail(key, "is " + describe_json(*v), "an object");
            return std::nullopt;
        }
        return FieldReader(*v, path(key) + ".", problem_);
    }

    // A nested reader's failure becomes this reader's.
    void absorb(const FieldReader& inner) { ok_ = ok_ && inner.ok_; }

    void fail(const char* key, const std::string& given, const std::string& expected) {
        if (!ok_) return;
        ok_ = false;
        if (problem_) *problem_ = "field \"" + path(key) + "\" " + given + ", expected " + expected;
    }

private:
    std::string path(const char* key) const { return prefix_ + key; }
    const json& obj_;
    std::string prefix_;
    std::string* problem_;
    bool ok_ = true;
};

void read_coords(FieldReader& r, MetricRecord& m) {
    if (auto c = r.object("coords")) {
        c->integer("tp", m.tp);
        c->integer("pp", m.pp);
        c->integer("dp", m.dp);
        r.absorb(*c);
    }
}

void read_memory(FieldReader& r, MetricRecord& m) {
    auto mem = r.object("memory");
    if (!mem) return;
    for (int c = 0; c < MEM_CAT_COUNT && mem->ok(); ++c) {
        auto cat = mem->object(kMemNames[c]);
        if (!cat) continue;
        MemFigure& f = m.memory[(size_t)c];
        cat->number("current", f.current, true);
        cat->number("peak", f.peak, true);
        // `predicted` is null for categories the estimators do not predict.
        if (const json* p = cat->find("predicted", false, "a number or null"); p && !p->is_null()) {
            double v = 0;
            cat->number("predicted", v);
            if (cat->ok()) f.predicted = v;
        }
        mem->absorb(*cat);
    }
    r.absorb(*mem);
    m.has_memory = r.ok();
}

void read_times(FieldReader& r, MetricRecord& m) {
    auto t = r.object("time");
    if (!t) return;
    t->number("step", m.times.step);
    t->number("compute", m.times.compute);
    t->number("tp_comm", m.times.tp_comm);
    t->number("pp_comm", m.times.pp_comm);
    t->number("pipeline_idle", m.times.pipeline_idle);
    t->number("dp_comm", m.times.dp_comm);
    t->number("optimizer", m.times.optimizer);
    r.absorb(*t);
}

// A "probe" line: `kind` decides which fields are required (docs/metrics.md).
void read_probe(FieldReader& r, const json& j, ProbeRecord& p) {
    r.string("kind", p.kind, true);
    if (!r.ok()) return;
    bool known = false;
    for (const char* k : kProbeKinds) known = known || p.kind == k;
    if (!known) return r.fail("kind", "is " + describe_json(*j.find("kind")), "host, plan, gemm, attention, memory, elementwise, host_op, layer, comm, link or done");
    const bool measured = p.kind != "host" && p.kind != "plan" && p.kind != "done";
    if (p.kind == "host") {
        r.string("hostname", p.hostname, true);
        r.integer("node", p.node, true);
        r.integer("local_rank", p.local_rank);
        r.string("cpu_model", p.cpu_model);
        r.integer("cores", p.cores);
        r.integer("cpu_quota", p.cpu_quota);
        // The affinity mask as CPU ids (sched_getaffinity: at most CPU_SETSIZE of them).
        constexpr const char* kCpus = "an array of distinct CPU ids, each an integer in 0..1023";
        if (const json* cpus = r.find("cpus", false, kCpus)) {
            if (!cpus->is_array()) return r.fail("cpus", "is " + describe_json(*cpus), kCpus);
            for (const json& c : *cpus) {
                if (!c.is_number_integer() || c.get<long long>() < 0 || c.get<long long>() > 1023 ||
                    std::find(p.cpus.begin(), p.cpus.end(), c.get<int>()) != p.cpus.end())
                    return r.fail("cpus", "is " + describe_json(*cpus), kCpus);
                p.cpus.push_back(c.get<int>());
            }
        }
        r.integer("threads", p.threads);
        r.number("memory_bytes", p.memory_bytes);
        r.string("backend", p.backend);
        r.string("precision", p.precision);
        r.string("engine_version", p.engine_version);
        r.boolean("quick", p.quick);
        if (auto b = r.object("blas")) {
            b->string("core", p.blas_core);
            r.absorb(*b);
        }
        // The GPUs' description when the rank runs on CUDA; null on the CPU backend.
        if (const json* g = r.find("gpu", false, "a string or null"); g && !g->is_null()) r.string("gpu", p.device);
    }
    if (p.kind == "plan") {
        r.integer("probes", p.probes, true);
        r.number("expected_s", p.expected_s, true);
        r.integer("warmup", p.warmup, true);
        r.integer("repeats", p.repeats, true, 1);
    }
    if (p.kind == "done") {
        r.integer("probes", p.probes, true);
        r.number("seconds", p.seconds, true);
    }
    if (!measured) return;
    r.string("name", p.name, true);
    r.number("median_s", p.median_s, true);
    r.number("mean_s", p.mean_s);
    r.number("between_s", p.between_s);
    r.number("spread", p.spread, true);
    r.integer("repeats", p.repeats, true, 1);
    r.string("dtype", p.dtype);
    const bool gemm_like = p.kind == "gemm" || p.kind == "attention";
    r.number("flops", p.flops, gemm_like);
    r.number("bytes", p.bytes, p.kind == "comm" || p.kind == "memory" || p.kind == "link");
    r.number("elements", p.elements);
    r.number("tflops", p.tflops);
    r.number("gbps", p.gbps);
    r.number("algbw_gbps", p.algbw_gbps);
    r.number("busbw_gbps", p.busbw_gbps);
    r.number("bus_factor", p.bus_factor);
    if ((gemm_like || p.kind == "layer") && r.ok()) {
        // gemm: [M, N, K]; attention: [B, H, T, D]; layer: the engine's pass at this rank's shape
        const size_t dims = p.kind == "gemm" ? 3 : p.kind == "attention" ? 4 : 9;
        const char* expected = p.kind == "gemm"        ? "[M, N, K]: three positive integers"
                               : p.kind == "attention" ? "[B, H, T, D]: four positive integers"
                                                       : "[B, T, h, heads, kv heads, ffn, tp, sp + 1, recompute + 1]: nine positive integers";
        const json* shape = r.find("shape", true, expected);
        if (!shape) return;
        if (!shape->is_array() || shape->size() != dims) return r.fail("shape", "is " + describe_json(*shape), expected);
        for (const json& e : *shape) {
            if (!e.is_number_integer() || e.get<long long>() < 1)
                return r.fail("shape", "is " + describe_json(*shape), expected);
            p.shape.push_back(e.get<long long>());
        }
    }
    if (p.kind == "link") {  // an exchange between the first ranks of two nodes
        r.integer("node", p.node, true);
        r.integer("peer_node", p.peer_node, true);
        r.integer("peer_rank", p.peer_rank, true);
    }
    if (p.kind == "layer" && (r.find("group", false, "") || r.find("group_size", false, "") ||
                              r.find("micro_batches", false, ""))) {
        // dpwait: a step-long burst names its group (dp), the group's size and its length, all three.
        r.string("group", p.group, true);
        if (r.ok() && p.group != "dp") return r.fail("group", "is \"" + p.group + "\"", "\"dp\" (a step burst's group)");
        r.integer("group_size", p.group_size, true, 2);
        r.integer("micro_batches", p.micro_batches, true, 1);
    }
    if (p.kind == "comm") {
        r.string("group", p.group, true);
        r.integer("group_size", p.group_size, true, 2);
        r.integer("nodes", p.nodes, true, 1);
        r.integer("members_per_node", p.members_per_node, true, 1);
    }
}

}  // namespace

const char* metric_kind_name(MetricKind k) {
    const int i = (int)k;
    return i >= 0 && i < (int)std::size(kKindNames) ? kKindNames[i] : "?";
}

const char* mem_cat_name(MemCat c) { return c >= 0 && c < MEM_CAT_COUNT ? kMemNames[c] : "?"; }

std::optional<MetricRecord> parse_metrics_line(std::string_view line, std::string* problem) {
    if (problem) problem->clear();
    // Plain log text (anything not starting with '{' after blanks) is not a problem, just
    // not a metric; this also keeps the JSON parser off every ordinary stderr line.
    while (!line.empty() && (line.back() == '\r' || line.back() == '\n' || line.back() == ' ' || line.back() == '\t'))
        line.remove_suffix(1);
    size_t first = 0;
    while (first < line.size() && (line[first] == ' ' || line[first] == '\t')) ++first;
    if (first == line.size() || line[first] != '{') return std::nullopt;
    auto set_problem = [&](std::string p) {
        if (problem) *problem = std::move(p);
        return std::nullopt;
    };
    if (!nesting_ok(line)) return set_problem("nested deeper than " + std::to_string(kMaxDepth) + " levels, expected a metrics object");
    const json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return set_problem("not valid JSON (truncated or garbled), expected one JSON object per line");
    if (!j.is_object()) return set_problem("not a JSON object");

    MetricRecord m;
    FieldReader r(j, "", problem);
    {
        const json* schema = r.find("schema", true, "\"ptd.metrics/1\"");
        if (!schema) return std::nullopt;
        if (!schema->is_string() || schema->get_ref<const std::string&>() != "ptd.metrics/1") {
            r.fail("schema", "is " + describe_json(*schema), "\"ptd.metrics/1\"");
            return std::nullopt;
        }
    }
    std::string event;
    r.string("event", event, true);
    if (!r.ok()) return std::nullopt;
    bool known = false;
    for (int k = 0; k < (int)std::size(kKindNames); ++k)
        if (event == kKindNames[k]) {
            m.kind = (MetricKind)k;
            known = true;
        }
    if (!known) {
        r.fail("event", "is " + describe_json(*j.find("event")), "start, step, checkpoint, warning, error, end or probe");
        return std::nullopt;
    }
    r.string("run_id", m.run_id);
    r.integer("rank", m.rank, true);
    // `time` is Unix seconds on every event except `step`, where it is the step's times.
    if (m.kind != MetricKind::step) r.number("time", m.time);

    switch (m.kind) {
        case MetricKind::start: {
            r.integer("world_size", m.world_size, true, 1);
            read_coords(r, m);
            r.integer("steps", m.steps_total);
            r.number("peak_tflops", m.peak_tflops);
            r.string("data", m.data);
            r.string("run_dir", m.run_dir);
            if (const json* v = r.find("resumed_from", false, "an integer or null"); v && !v->is_null()) {
                int step = 0;
                r.integer("resumed_from", step);
                if (r.ok()) m.resumed_from = step;
            }
            read_memory(r, m);
            break;
        }
        case MetricKind::step:
            r.integer("step", m.step, true);
            read_coords(r, m);
            r.number("loss", m.loss, true);
            r.number("lr", m.lr);
            r.number("grad_norm", m.grad_norm);
            r.boolean("clipped", m.clipped);
            r.number("tokens", m.tokens);
            r.number("tokens_per_s", m.tokens_per_s);
            r.number("tflops", m.tflops);
            r.number("mfu", m.mfu);
            read_times(r, m);
            read_memory(r, m);
            break;
        case MetricKind::checkpoint:
            r.integer("step", m.step, true);
            r.string("dir", m.dir);
            r.number("bytes", m.bytes);
            r.string("sha256", m.sha256);
            r.number("seconds", m.seconds);
            break;
        case MetricKind::warning:
        case MetricKind::error: r.string("message", m.message, true); break;
        case MetricKind::end:
            r.integer("step", m.step, true);
            r.integer("steps_run", m.steps_run);
            r.number("seconds", m.seconds);
            read_memory(r, m);
            break;
        case MetricKind::probe: read_probe(r, j, m.probe); break;
    }
    if (!r.ok()) return std::nullopt;
    return m;
}

}  // namespace ptd
