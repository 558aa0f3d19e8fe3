// cluster_profile.cpp — fitting, writing and reading the cluster profile
// (cluster_profile.h). Reading goes through the job reader's TableReader, so a bad profile
// gets the same located messages as a bad job file.
#include "ptd/spec/cluster_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <tuple>

#include "job_toml_internal.h"
#include "ptd/common/outliers.h"
#include "ptd/common/sample_stats.h"
#include "ptd/spec/job_spec.h"

namespace ptd {

namespace file_kind {
inline constexpr FileKind cluster_profile{"a cluster profile", 64 * kMiB};
}

double collective_bus_factor(std::string_view op, int n) {
    if (n <= 1 || op == "p2p") return 1.0;
    if (op == "all_reduce") return 2.0 * (n - 1) / n;
    return (double)(n - 1) / n;  // reduce_scatter, all_gather, all_to_all
}

namespace {

double median_of(const std::vector<double>& v) { return median(v); }

// t = a + b·x by least squares; a < 0 (noise at the latency end) → through the origin.
void fit_line(const std::vector<double>& x, const std::vector<double>& t, double& a, double& b) {
    const double n = (double)x.size();
    double sx = 0, st = 0, sxx = 0, sxt = 0;
    for (size_t i = 0; i < x.size(); ++i) sx += x[i], st += t[i], sxx += x[i] * x[i], sxt += x[i] * t[i];
    const double den = n * sxx - sx * sx;
    if (x.size() >= 2 && den > 0) {
        b = (n * sxt - sx * st) / den;
        a = (st - b * sx) / n;
    } else {
        a = -1;
    }
    if (a < 0 || b <= 0) {
        a = 0;
        b = sxx > 0 ? sxt / sxx : 0;
    }
}

}  // namespace

void fit_profile(ClusterProfile& p) {
    p.gemms.clear(), p.bandwidths.clear(), p.collectives.clear();
    p.gemm_tflops = p.memory_gbps = p.host_op_s = 0;
    double flops = 0, seconds = 0;
    std::map<std::tuple<std::string, std::string, std::vector<int>>, std::vector<double>> gemm;
    std::map<std::string, std::vector<double>> bandwidth;
    std::vector<double> host_op;
    // (op, group, size, nodes, per node) → bytes → per-rank median times
    std::map<std::tuple<std::string, std::string, int, int, int>, std::map<double, std::vector<double>>> comm;
    for (const ProfileSample& s : p.samples) {
        if (s.median_s <= 0) continue;
        if (s.kind == "gemm" || s.kind == "attention") {
            gemm[{s.name, s.dtype, s.shape}].push_back(s.flops / s.median_s / 1e12);
            // The overall figure is the linear layers' mix; attention has its own figures.
            if (s.kind == "gemm") flops += s.flops, seconds += s.median_s;
        } else if (s.kind == "memory" || s.kind == "elementwise") {
            bandwidth[s.name].push_back(s.bytes / s.median_s / 1e9);
        } else if (s.kind == "host_op") {
            host_op.push_back(s.median_s);
        } else if (s.kind == "comm" && s.between_s <= 0) {  // the bus-bandwidth fit: back-to-back calls
            comm[{s.name, s.group, s.group_size, s.nodes, s.members_per_node}][s.bytes].push_back(s.median_s);
        }
    }
    p.gemm_tflops = seconds > 0 ? flops / seconds / 1e12 : 0;
    for (auto& [key, v] : gemm)
        p.gemms.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), median_of(v), (int)v.size()});
    for (auto& [name, v] : bandwidth) {
        p.bandwidths.push_back({name, median_of(v), (int)v.size()});
        if (name == "copy") p.memory_gbps = p.bandwidths.back().gbps;
    }
    p.host_op_s = median_of(host_op);
    for (auto& [key, by_size] : comm) {
        CollectiveFigure f;
        std::tie(f.op, f.group, f.group_size, f.nodes, f.members_per_node) = key;
        const double factor = collective_bus_factor(f.op, f.group_size);
        std::vector<double> x, t;
        for (auto& [bytes, times] : by_size) x.push_back(bytes * factor), t.push_back(median_of(times));
        double a = 0, b = 0;
        fit_line(x, t, a, b);
        f.latency_s = a;
        f.busbw_gbps = b > 0 ? 1.0 / b / 1e9 : 0;
        f.sizes = (int)x.size();
        for (size_t i = 0; i < x.size(); ++i)
            f.max_residual = std::max(f.max_residual, std::abs(a + b * x[i] - t[i]) / t[i]);
        p.collectives.push_back(f);
    }
}

// ---- writing ----------------------------------------------------------------------------

namespace {

std::string ints_text(const std::vector<int>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

// One sample as an inline table on one line (only the fields its kind has).
std::string sample_line(const ProfileSample& s) {
    std::string l = "  { host = " + std::to_string(s.host) + ", rank = " + std::to_string(s.rank) +
                    ", kind = " + toml_quote(s.kind) + ", name = " + toml_quote(s.name);
    if (!s.dtype.empty()) l += ", dtype = " + toml_quote(s.dtype);
    if (s.kind == "gemm" || s.kind == "attention") l += ", shape = " + ints_text(s.shape) + ", flops = " + toml_double(s.flops);
    if (s.kind == "layer") l += ", shape = " + ints_text(s.shape);
    if (s.kind == "layer" && s.group_size > 0)  // dpwait: a step-long burst and the group it waits for
        l += ", group = " + toml_quote(s.group) + ", group_size = " + std::to_string(s.group_size) +
             ", micro_batches = " + std::to_string(s.micro_batches);
    if (s.bytes > 0) l += ", bytes = " + toml_double(s.bytes);
    if (s.kind == "comm")
        l += ", group = " + toml_quote(s.group) + ", group_size = " + std::to_string(s.group_size) +
             ", nodes = " + std::to_string(s.nodes) + ", members_per_node = " + std::to_string(s.members_per_node);
    if (s.between_s > 0) l += ", between_s = " + toml_double(s.between_s);
    l += ", median_s = " + toml_double(s.median_s);
    if (s.mean_s > 0) l += ", mean_s = " + toml_double(s.mean_s);
    l += ", spread = " + toml_double(s.spread) +
         ", repeats = " + std::to_string(s.repeats) + " },\n";
    return l;
}

}  // namespace

std::string profile_toml(const ClusterProfile& p) {
    TomlWriter w;
    w.comment("Cluster profile written by `ptd calibrate` (docs/estimators.md, \"Cluster profiles\").");
    w.comment("[fit] holds the figures fitted from the samples in [raw]; a job uses it through");
    w.comment("[cluster] profile = \"this file\" or `ptd estimate --profile`.");
    w.str("schema", kProfileSchema);
    w.str("measured_at", p.measured_at);
    w.str("job", p.job);
    w.str("gpu", p.gpu, "the job's cluster.gpu preset: the hardware this profile describes");
    w.str("precision", p.precision);
    w.str("ptd_version", p.ptd_version);
    w.boolean("quick", p.quick);
    w.dbl("seconds", p.seconds);
    w.int_("ranks_per_host", p.ranks_per_host);
    if (!p.refined_from.empty()) w.strings("refined_from", p.refined_from);
    for (const ProfileHost& h : p.hosts) {
        w.header("[host]");  // TomlWriter writes "[" + name + "]": "[[host]]", an array of tables
        w.str("name", h.name);
        w.str("hostname", h.hostname);
        w.int_("ranks", h.ranks);
        w.str("cpu_model", h.cpu_model);
        w.int_("cores", h.cores);
        if (h.usable_cores > 0) w.int_("usable_cores", h.usable_cores);
        w.dbl("memory_gib", h.memory_gib);
        w.str("blas_core", h.blas_core);
        w.str("backend", h.backend);
        w.str("gpu", h.gpu);
    }
    w.header("fit");
    w.dbl("gemm_tflops", p.gemm_tflops, "all GEMM samples: Σ flops / Σ median time");
    w.dbl("memory_gbps", p.memory_gbps, "device copy, bytes read + written");
    w.dbl("host_op_s", p.host_op_s, "one tiny op, issue to completion");
    for (const GemmFigure& g : p.gemms) {
        w.header("[fit.gemm]");
        w.str("name", g.name);
        w.str("dtype", g.dtype);
        w.ints("shape", g.shape);
        w.dbl("tflops", g.tflops);
        w.int_("samples", g.samples);
    }
    for (const BandwidthFigure& b : p.bandwidths) {
        w.header("[fit.bandwidth]");
        w.str("name", b.name);
        w.dbl("gbps", b.gbps);
        w.int_("samples", b.samples);
    }
    for (const CollectiveFigure& c : p.collectives) {
        w.header("[fit.collective]");
        w.str("op", c.op);
        w.str("group", c.group);
        w.int_("group_size", c.group_size);
        w.int_("nodes", c.nodes);
        w.int_("members_per_node", c.members_per_node);
        w.dbl("latency_s", c.latency_s);
        w.dbl("busbw_gbps", c.busbw_gbps);
        w.int_("sizes", c.sizes);
        w.dbl("max_residual", c.max_residual);
    }
    std::string text = w.text();
    text += "\n[raw]\n# every probe of every rank: median, mean and spread (IQR / median) of `repeats` timed runs\nsamples = [\n";
    for (const ProfileSample& s : p.samples) text += sample_line(s);
    text += "]\n";
    return text;
}

// ---- reading ----------------------------------------------------------------------------

namespace {

constexpr double kHuge = 1e30;

const std::vector<std::string> kSampleKinds = {"gemm", "attention", "memory", "elementwise", "host_op", "layer", "comm"};
const std::vector<std::string> kOps = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p"};

// Each element of an array of tables, read by `read(reader, index)`.
template <class Read>
void each_table(TomlContext& ctx, TableReader& parent, std::string_view key, const char* what, Read&& read) {
    const toml::array* arr = parent.subarray(key);
    if (!arr) return;
    const std::string prefix = parent.full_key(key);
    for (size_t i = 0; i < arr->size(); ++i) {
        const toml::node& e = *arr->get(i);
        const std::string name = prefix + "[" + std::to_string(i) + "]";
        if (!e.as_table()) {
            ctx.error(ctx.loc(e), name, std::string("expected ") + what);
            continue;
        }
        TableReader r(ctx, *e.as_table(), name);
        read(r, name);
        r.finish();
    }
}

void read_sample(TableReader& r, ProfileSample& s, int hosts) {
    for (const char* k : {"kind", "name", "median_s", "spread", "repeats", "host", "rank"}) r.require(k, "every sample has it");
    r.read_int("host", s.host, 0, std::max(0, hosts - 1));
    r.read_int("rank", s.rank, 0, 1 << 24);
    int kind = 0;
    if (r.read_word("kind", kind, kSampleKinds)) s.kind = kSampleKinds[(size_t)kind];
    r.read_string("name", s.name);
    r.read_string("dtype", s.dtype);
    r.read_double("median_s", s.median_s, 0, 1e6);
    r.read_double("mean_s", s.mean_s, 0, 1e6);
    r.read_double("spread", s.spread, 0, kHuge);
    r.read_int("repeats", s.repeats, 1, 1 << 20);
    r.read_double("bytes", s.bytes, 0, kHuge);
    r.read_double("flops", s.flops, 0, kHuge);
    if (s.kind == "gemm" || s.kind == "attention") {
        r.require("shape", s.kind == "gemm" ? "a GEMM sample's [M, N, K]" : "an attention sample's [B, H, T, D]");
        r.require("flops", "a GEMM or attention sample's FLOPs");
        r.read_int_array("shape", s.shape, 1, 1 << 30);  // three of them: checked by the caller, which names the sample
    }
    if (s.kind == "layer") {
        r.require("shape", "a layer sample's [B, T, h, heads, kv heads, ffn, tp, sp + 1, recompute + 1]");
        r.read_int_array("shape", s.shape, 1, 1 << 30);
        if (r.has("group_size") || r.has("group") || r.has("micro_batches")) {  // dpwait: step.compute*
            for (const char* k : {"group", "group_size", "micro_batches"}) r.require(k, "a step burst sample has it");
            static const std::vector<std::string> kBurstGroups = {"dp"};
            int group = 0;
            if (r.read_word("group", group, kBurstGroups)) s.group = kBurstGroups[(size_t)group];
            r.read_int("group_size", s.group_size, 2, 1 << 24);
            r.read_int("micro_batches", s.micro_batches, 1, 1 << 24);
        }
    }
    if (s.kind == "comm") {
        for (const char* k : {"group", "group_size", "nodes", "members_per_node", "bytes"}) r.require(k, "a collective sample has it");
        r.read_string("group", s.group);
        r.read_int("group_size", s.group_size, 2, 1 << 24);
        r.read_int("nodes", s.nodes, 1, 1 << 24);
        r.read_int("members_per_node", s.members_per_node, 1, 1 << 24);
        r.read_double("between_s", s.between_s, 0, 1e6);
    }
}

}  // namespace

Result<ClusterProfile> load_profile_text(std::string_view text, const std::string& file) {
    auto parsed = parse_toml(strip_utf8_bom(text), file);
    if (!parsed) return std::unexpected(parsed.error());
    const toml::table& doc = *parsed;
    TomlContext ctx{file, {}, {}};
    ClusterProfile p;
    TableReader top(ctx, doc, "");
    // The schema first: a file that is not a profile (a job file, say) gets one clear line
    // instead of a list of unknown keys.
    std::string schema;
    if (!top.has("schema"))
        return fail(SourceLoc{file, 1, 1}, "schema",
                    std::string("missing: this is not a PTD cluster profile; allowed: schema = \"") + kProfileSchema +
                        "\" (written by `ptd calibrate`)");
    if (!top.read_string("schema", schema)) return std::unexpected(Error(ctx.diagnostics));
    if (schema != kProfileSchema)
        return fail(top.where("schema"), "schema",
                    "got " + quote_input(schema) + "; allowed: \"" + kProfileSchema +
                        "\" (a profile from another PTD version: calibrate again with this one)");
    const char* required[] = {"measured_at", "job", "gpu", "precision", "ranks_per_host", "host", "fit", "raw"};
    for (const char* k : required) top.require(k, "every profile has it (a truncated file?)");
    top.read_string("measured_at", p.measured_at);
    top.read_string("job", p.job);
    top.read_string("gpu", p.gpu);
    top.read_string("precision", p.precision);
    top.read_string("ptd_version", p.ptd_version);
    top.read_bool("quick", p.quick);
    top.read_double("seconds", p.seconds, 0, 1e9);
    top.read_int("ranks_per_host", p.ranks_per_host, 1, 1 << 20);
    top.read_string_array("refined_from", p.refined_from);
    each_table(ctx, top, "host", "[[host]] tables", [&](TableReader& r, const std::string&) {
        ProfileHost h;
        // The writer always writes ranks, and 0 is not a host's count: a host without it would
        // be written back as `ranks = 0`, which this reader refuses (fuzz_cluster_profile).
        for (const char* k : {"name", "ranks"}) r.require(k, "every host has it");
        r.read_string("name", h.name);
        r.read_string("hostname", h.hostname);
        r.read_int("ranks", h.ranks, 1, 1 << 20);
        r.read_string("cpu_model", h.cpu_model);
        r.read_int("cores", h.cores, 0, 1 << 20);
        r.read_int("usable_cores", h.usable_cores, 0, h.cores > 0 ? h.cores : 1 << 20);  // a part of the machine
        r.read_double("memory_gib", h.memory_gib, 0, kHuge);
        r.read_string("blas_core", h.blas_core);
        r.read_string("backend", h.backend);
        r.read_string("gpu", h.gpu);
        p.hosts.push_back(h);
    });
    if (const toml::table* fit = top.subtable("fit")) {
        TableReader f(ctx, *fit, "fit");
        f.read_double("gemm_tflops", p.gemm_tflops, 0, kHuge);
        f.read_double("memory_gbps", p.memory_gbps, 0, kHuge);
        f.read_double("host_op_s", p.host_op_s, 0, 1e6);
        each_table(ctx, f, "gemm", "[[fit.gemm]] tables", [&](TableReader& r, const std::string&) {
            GemmFigure g;
            r.read_string("name", g.name);
            r.read_string("dtype", g.dtype);
            r.read_int_array("shape", g.shape, 1, 1 << 30);
            r.read_double("tflops", g.tflops, 0, kHuge);
            r.read_int("samples", g.samples, 0, 1 << 30);
            p.gemms.push_back(g);
        });
        each_table(ctx, f, "bandwidth", "[[fit.bandwidth]] tables", [&](TableReader& r, const std::string&) {
            BandwidthFigure b;
            r.read_string("name", b.name);
            r.read_double("gbps", b.gbps, 0, kHuge);
            r.read_int("samples", b.samples, 0, 1 << 30);
            p.bandwidths.push_back(b);
        });
        each_table(ctx, f, "collective", "[[fit.collective]] tables", [&](TableReader& r, const std::string&) {
            CollectiveFigure c;
            // The writer writes each of these, and their defaults are outside what is read back
            // (fuzz_cluster_profile): a figure without one is refused here, naming it.
            for (const char* k : {"op", "group_size", "nodes", "members_per_node"}) r.require(k, "every fitted collective has it");
            int op = 0;
            if (r.read_word("op", op, kOps)) c.op = kOps[(size_t)op];
            r.read_string("group", c.group);
            r.read_int("group_size", c.group_size, 2, 1 << 24);
            r.read_int("nodes", c.nodes, 1, 1 << 24);
            r.read_int("members_per_node", c.members_per_node, 1, 1 << 24);
            r.read_double("latency_s", c.latency_s, 0, 1e6);
            r.read_double("busbw_gbps", c.busbw_gbps, 0, kHuge);
            r.read_int("sizes", c.sizes, 0, 1 << 20);
            r.read_double("max_residual", c.max_residual, 0, kHuge);
            p.collectives.push_back(c);
        });
        f.finish();
    }
    if (const toml::table* raw = top.subtable("raw")) {
        TableReader rr(ctx, *raw, "raw");
        rr.require("samples", "the measured samples");
        each_table(ctx, rr, "samples", "one inline table per sample", [&](TableReader& r, const std::string& name) {
            ProfileSample s;
            read_sample(r, s, (int)p.hosts.size());
            if (s.kind == "gemm" && s.shape.size() != 3 && !s.shape.empty())
                ctx.error(r.where("shape"), name + ".shape", "got " + std::to_string(s.shape.size()) +
                                                                 " numbers; allowed: [M, N, K], three positive integers");
            if (s.kind == "attention" && s.shape.size() != 4 && !s.shape.empty())
                ctx.error(r.where("shape"), name + ".shape", "got " + std::to_string(s.shape.size()) +
                                                                 " numbers; allowed: [B, H, T, D], four positive integers");
            if (s.kind == "layer" && s.shape.size() != 9 && !s.shape.empty())
                ctx.error(r.where("shape"), name + ".shape",
                          "got " + std::to_string(s.shape.size()) +
                              " numbers; allowed: [B, T, h, heads, kv heads, ffn, tp, sp + 1, recompute + 1], nine positive integers");
            p.samples.push_back(s);
        });
        rr.finish();
    }
    top.finish();
    if (!ctx.diagnostics.empty()) return std::unexpected(Error(std::move(ctx.diagnostics)));
    return p;
}

Result<ClusterProfile> load_profile(const std::string& path) {
    auto text = read_regular_file(path, file_kind::cluster_profile);
    if (!text) return std::unexpected(text.error());
    return load_profile_text(*text, path);
}

Result<std::optional<JobProfile>> load_job_profile(const JobSpec& job, const std::string& override_path) {
    JobProfile jp;
    if (!override_path.empty()) {
        jp.path = override_path, jp.source = "--profile";
    } else if (!job.cluster.profile.empty()) {
        // Relative to the job file's folder, as the ranks resolve training.data.
        const std::filesystem::path given(job.cluster.profile);
        const std::filesystem::path folder = std::filesystem::path(job.origin.file).parent_path();
        jp.path = given.is_absolute() || folder.empty() ? given.string() : (folder / given).string();
        jp.source = "cluster.profile";
    } else {
        return std::nullopt;
    }
    auto p = load_profile(jp.path);
    if (!p) {
        Error e = p.error();
        if (jp.source == "cluster.profile") {
            const SourceLoc at = job.where("cluster.profile");
            e.diagnostics.insert(e.diagnostics.begin(), Diagnostic{at, "cluster.profile", "names " + quote_input(jp.path) + ", which cannot be used:"});
        }
        return std::unexpected(e);
    }
    if (auto ok = check_profile_for_job(*p, jp.path, job); !ok) return std::unexpected(ok.error());
    jp.profile = std::move(*p);
    return jp;
}

std::string profile_note(const JobProfile& jp) {
    const ClusterProfile& p = jp.profile;
    std::string hosts;
    for (size_t i = 0; i < p.hosts.size() && i < 3; ++i) hosts += (i ? ", " : "") + p.hosts[i].name;
    if (p.hosts.size() > 3) hosts += ", … (" + std::to_string(p.hosts.size()) + " hosts)";
    return "profile: " + jp.path + " (measured " + p.measured_at + " on " + hosts + (p.quick ? ", --quick" : "") + ")";
}

DpWaitFigure dp_wait_figure(const ClusterProfile& p) {
    std::map<int, double> own, slowest;  // rank → mean seconds
    int group = 0;
    for (const ProfileSample& s : p.samples) {
        if (s.kind != "layer" || !s.name.starts_with("step.compute") || s.median_s <= 0) continue;
        (s.name == "step.compute" ? own : slowest)[s.rank] = s.mean_s > 0 ? s.mean_s : s.median_s;
        group = s.group_size;
    }
    std::vector<double> bursts, waits;
    for (const auto& [rank, o] : own)
        if (auto it = slowest.find(rank); it != slowest.end()) bursts.push_back(o), waits.push_back(std::max(0.0, it->second - o));
    DpWaitFigure f;
    if (bursts.empty() || group <= 1) return f;
    f.group = group, f.burst_s = quantile(bursts, 0.5), f.wait_s = quantile(waits, 0.5);
    return f;
}

std::string describe_dp_wait(const DpWaitFigure& w) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "a step's wait for the slowest of dp×%d: %.3g ms after a %.3g ms burst of its micro-batches", w.group,
                  w.wait_s * 1e3, w.burst_s * 1e3);
    return buf;
}

std::vector<std::string> profile_figures(const ClusterProfile& p) {
    char buf[256];
    std::vector<std::string> lines;
    std::snprintf(buf, sizeof buf, "GEMM throughput: %.3g TFLOP/s over the job's GEMM mix, %zu shape(s) measured", p.gemm_tflops,
                  p.gemms.size());
    lines.push_back(buf);
    std::snprintf(buf, sizeof buf, "memory bandwidth: %.3g GB/s; element-wise kernels: %zu measured", p.memory_gbps, p.bandwidths.size());
    lines.push_back(buf);
    std::snprintf(buf, sizeof buf, "host cost of one op: %.3g µs", p.host_op_s * 1e6);
    lines.push_back(buf);
    for (const CollectiveFigure& c : p.collectives) {
        std::snprintf(buf, sizeof buf, "%s over %s (%d ranks, %d node%s): latency %.3g µs, bus bandwidth %.3g GB/s", c.op.c_str(),
                      c.group.c_str(), c.group_size, c.nodes, c.nodes == 1 ? "" : "s", c.latency_s * 1e6, c.busbw_gbps);
        lines.push_back(buf);
    }
    if (const DpWaitFigure w = dp_wait_figure(p); w.group > 1) lines.push_back(describe_dp_wait(w));
    return lines;
}

Result<void> check_profile_for_job(const ClusterProfile& p, const std::string& profile_path, const JobSpec& job) {
    if (p.gpu == job.cluster.gpu.name) return {};
    return fail(job.where("cluster.gpu"), "cluster.profile",
                "the profile " + quote_input(profile_path) + " was measured on \"" + p.gpu + "\" hardware, but this job runs on \"" +
                    job.cluster.gpu.name + "\"; allowed: a profile calibrated with a job on \"" + job.cluster.gpu.name +
                    "\" (ptd calibrate)");
}

}  // namespace ptd
