// cmd_calibrate.cpp — `ptd calibrate JOB`: the job's ranks started as probes through the
// launcher `ptd launch` uses, one progress line per probe and host, then the cluster
// profile (fitted and written), or with --check the preflight verdict per host mapped onto
// the job's layout. Everything about the probes themselves is in engine/src/probe.cpp;
// the profile's format and fit in estimators/src/spec/cluster_profile.cpp.
#include "cmd_calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <set>
#include <thread>

#include "commands.h"
#include "ptd/common/file_read.h"
#include "ptd/hostfile.h"
#include "ptd/layout/job_layout.h"
#include "ptd/layout/layout.h"
#include "ptd/model/estimate.h"
#include "ptd/run_dir.h"
#include "ptd/spec/cluster_profile.h"

namespace ptd {

LinkVerdicts judge_links(int host_count, const std::vector<LinkSample>& samples) {
    LinkVerdicts v;
    v.ratio.assign((size_t)std::max(host_count, 0), 1.0);
    v.hosts.assign(v.ratio.size(), HostVerdict{});
    // A link's time: one exchange at every message size measured (its latency end and its
    // bandwidth end, weighed by the time each takes, as a step's traffic would be).
    std::map<std::pair<int, int>, double> total, largest;
    std::set<int> seen;
    for (const LinkSample& l : samples) v.largest_bytes = std::max(v.largest_bytes, l.bytes);
    for (const LinkSample& l : samples) {
        total[{l.a, l.b}] += l.seconds;
        if (l.bytes == v.largest_bytes) largest[{l.a, l.b}] = l.seconds;
        seen.insert(l.a), seen.insert(l.b);
    }
    if (host_count < 3 || (int)seen.size() < 3) return v;
    v.judged = true;
    // A host's time: the median over its links; its ratio: that over the median host's.
    std::vector<std::vector<double>> per_host((size_t)host_count);
    for (const auto& [link, t] : total) per_host[(size_t)link.first].push_back(t), per_host[(size_t)link.second].push_back(t);
    std::vector<double> host_time;
    for (const auto& t : per_host)
        if (!t.empty()) host_time.push_back(median(t));
    const double ref = median(host_time);
    for (size_t h = 0; h < per_host.size(); ++h)
        if (!per_host[h].empty() && ref > 0) v.ratio[h] = median(per_host[h]) / ref;
    v.hosts = flag_slow(v.ratio);
    // Each link of a flagged host against the reference link: the median of the links
    // between unflagged hosts (of every link when each has a flagged end).
    std::vector<double> healthy, all, healthy_large, all_large;
    for (const auto& [link, t] : total) {
        const bool ok = !v.hosts[(size_t)link.first].flagged && !v.hosts[(size_t)link.second].flagged;
        all.push_back(t), all_large.push_back(largest[link]);
        if (ok) healthy.push_back(t), healthy_large.push_back(largest[link]);
    }
    const double ref_total = median(healthy.empty() ? all : healthy);
    const double ref_large = median(healthy_large.empty() ? all_large : healthy_large);
    for (const auto& [link, t] : total) {
        if (!v.hosts[(size_t)link.first].flagged && !v.hosts[(size_t)link.second].flagged) continue;
        SlowLink l;
        l.a = link.first, l.b = link.second, l.bytes = v.largest_bytes, l.seconds = largest[link], l.reference_s = ref_large;
        l.slower = ref_total > 0 ? t / ref_total - 1 : 0;
        l.bandwidth_slower = ref_large > 0 ? l.seconds / ref_large - 1 : 0;
        if (l.slower >= kSlowMinSlower) v.slow_links.push_back(l);
    }
    return v;
}

namespace {

std::string utc_now_iso() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::string bytes_text(double b) {
    char buf[32];
    if (b >= (1 << 20)) std::snprintf(buf, sizeof buf, "%.3g MiB", b / (1 << 20));
    else std::snprintf(buf, sizeof buf, "%.3g KiB", b / 1024);
    return buf;
}

// One progress line's figure for a probe.
std::string probe_figure(const ProbeRecord& p) {
    char buf[160];
    if (p.kind == "attention" && p.shape.size() == 4)
        std::snprintf(buf, sizeof buf, "%s %s [B %lld, H %lld, T %lld, D %lld]: %.3g TFLOP/s", p.name.c_str(), p.dtype.c_str(),
                      p.shape[0], p.shape[1], p.shape[2], p.shape[3], p.tflops);
    else if (p.kind == "gemm")
        std::snprintf(buf, sizeof buf, "%s %s [%lld×%lld×%lld]: %.3g TFLOP/s", p.name.c_str(), p.dtype.c_str(),
                      p.shape.size() == 3 ? p.shape[0] : 0, p.shape.size() == 3 ? p.shape[1] : 0,
                      p.shape.size() == 3 ? p.shape[2] : 0, p.tflops);
    else if (p.kind == "comm")
        if (p.between_s > 0)  // between compute bursts (probe comm_in_step): its mean is what a step pays
            std::snprintf(buf, sizeof buf, "%s %s×%d %s after compute: %.3g ms, mean %.3g ms", p.name.c_str(), p.group.c_str(),
                          p.group_size, bytes_text(p.bytes).c_str(), p.median_s * 1e3, p.mean_s * 1e3);
        else
            std::snprintf(buf, sizeof buf, "%s %s×%d %s: %.3g ms, bus %.3g GB/s", p.name.c_str(), p.group.c_str(), p.group_size,
                          bytes_text(p.bytes).c_str(), p.median_s * 1e3, p.busbw_gbps);
    else if (p.kind == "layer" && p.group_size > 1)  // dpwait: a step-long burst, own or the group's slowest
        std::snprintf(buf, sizeof buf, "%s %s (%d micro-batch%s, %s×%d): %.3g ms, mean %.3g ms", p.name.c_str(), p.dtype.c_str(),
                      p.micro_batches, p.micro_batches == 1 ? "" : "es", p.group.c_str(), p.group_size, p.median_s * 1e3,
                      p.mean_s * 1e3);
    else if (p.kind == "layer")  // the engine's own pass, in the step's order; per layer for layer.*
        std::snprintf(buf, sizeof buf, "%s %s: %.3g ms", p.name.c_str(), p.dtype.c_str(), p.median_s * 1e3);
    else if (p.kind == "host_op")
        std::snprintf(buf, sizeof buf, "%s: %.3g µs per op", p.name.c_str(), p.median_s * 1e6);
    else
        std::snprintf(buf, sizeof buf, "%s: %.3g GB/s", p.name.c_str(), p.gbps);
    return buf;
}

// "0–3", "1", "0, 2" for a set of coordinates.
std::string span_text(const std::set<int>& s) {
    if (s.empty()) return "";
    const int lo = *s.begin(), hi = *s.rbegin();
    if ((int)s.size() == hi - lo + 1) return lo == hi ? std::to_string(lo) : std::to_string(lo) + "–" + std::to_string(hi);
    std::string t;
    for (int x : s) t += (t.empty() ? "" : ", ") + std::to_string(x);
    return t;
}

// What a host holds in the layout: "PP stage 1 of DP replicas 0–1 (TP ranks 0–1)".
std::string holdings(const RankLayout& layout, const std::vector<int>& ranks) {
    std::set<int> pp, dp, tp;
    for (int r : ranks) {
        const RankPlace& p = layout.ranks[(size_t)r];
        pp.insert(p.coord[DIM_PP]), dp.insert(p.coord[DIM_DP]), tp.insert(p.coord[DIM_TP]);
    }
    return std::string("PP stage") + (pp.size() > 1 ? "s " : " ") + span_text(pp) + " of DP replica" +
           (dp.size() > 1 ? "s " : " ") + span_text(dp) + " (TP rank" + (tp.size() > 1 ? "s " : " ") + span_text(tp) + ")";
}

}  // namespace

// The profile replaces an older one whole or not at all: written beside it, then renamed.
Result<void> write_profile_file(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp-" + std::to_string((long)getpid());
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        f << text;
        f.close();
        if (!f) {
            std::remove(tmp.c_str());
            return fail(SourceLoc{path}, "-o", "cannot write " + quote_input(tmp) + ": " + std::strerror(errno));
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string why = std::strerror(errno);
        std::remove(tmp.c_str());
        return fail(SourceLoc{path}, "-o", "cannot replace " + quote_input(path) + ": " + why);
    }
    return {};
}

namespace {

struct RankProgress {
    int planned = 0, measured = 0;
    bool done = false;
    std::chrono::steady_clock::time_point last;
    std::string last_probe = "(none yet)";
};

// What one calibration collected, by rank and host (from a live run or from a run
// directory's logs).
struct ProbeRun {
    std::vector<std::string> host_names;    // "1 (node-b)": for messages
    std::vector<std::string> host_display;  // "node-b": the profile's host names
    std::vector<std::vector<int>> host_ranks;
    std::vector<int> host_of;               // rank → host
    std::vector<ProbeRecord> host_line;     // rank → its "host" probe line
    std::vector<std::vector<ProbeRecord>> records;  // rank → its measured probes
};

// The probe lines of a running calibration as they arrive, from the launcher's events or
// from a submitted Slurm job's rank logs alike: the plan line once, a line per probe and
// host (from the host's first rank), each rank's records for the profile, and how far each
// rank got (for the stall check).
struct ProbeProgress {
    std::string what;                     // "ptd calibrate" or "ptd calibrate --check"
    std::string gpu_preset;               // the job's GPU preset, named in the plan line
    std::vector<std::string> host_names;  // "1 (node-b)"
    std::vector<int> host_of;             // rank → host
    std::vector<int> host_first;          // host → its first rank
    std::vector<RankProgress> ranks;
    std::vector<std::vector<ProbeRecord>> records;
    std::vector<ProbeRecord> host_line;
    bool plan_printed = false;
    // A Slurm job's nodes are known only once it runs (the plan names them node-0, node-1,
    // ...): each host is then named by its first rank's hostname as it reports it.
    bool hosts_from_probes = false;

    ProbeProgress(std::string what_, const LaunchPlan& plan) : what(std::move(what_)), gpu_preset(plan.job.cluster.gpu.name) {
        const size_t world = plan.ranks.size();
        // "host 1 (node-b)": by index too, as a local job's hosts all read "localhost".
        for (const HostPlan& h : plan.hosts) {
            host_names.push_back(std::to_string(host_names.size()) + " (" + h.display + ")");
            host_first.push_back(h.ranks.empty() ? -1 : h.ranks.front());
        }
        host_of.resize(world);
        for (const RankPlan& r : plan.ranks) host_of[(size_t)r.rank] = r.host;
        ranks.resize(world);
        for (RankProgress& p : ranks) p.last = std::chrono::steady_clock::now();
        records.resize(world);
        host_line.resize(world);
    }

    void on_metric(int rank, const MetricRecord& m, FILE* out, FILE* err) {
        if (rank < 0 || (size_t)rank >= ranks.size()) return;
        RankProgress& rp = ranks[(size_t)rank];
        rp.last = std::chrono::steady_clock::now();
        if (m.kind == MetricKind::error)
            std::fprintf(err, "%s: rank %d on host %s: %s\n", what.c_str(), rank, host_names[(size_t)host_of[(size_t)rank]].c_str(),
                         m.message.c_str());
        if (m.kind != MetricKind::probe) return;
        const ProbeRecord& p = m.probe;
        if (p.kind == "host") {
            host_line[(size_t)rank] = p;
            const int h = host_of[(size_t)rank];
            if (hosts_from_probes && host_first[(size_t)h] == rank && !p.hostname.empty())
                host_names[(size_t)h] = std::to_string(h) + " (" + p.hostname + ")";
        } else if (p.kind == "plan") {
            rp.planned = p.probes;
            if (!plan_printed) {
                plan_printed = true;
                std::fprintf(out,
                             "%s: %d probe(s) per rank, %d warm-up + %d timed run(s) each; expected ≈ %.2g s "
                             "at the \"%s\" preset's figures (what calibration replaces)\n",
                             what.c_str(), p.probes, p.warmup, p.repeats, p.expected_s, gpu_preset.c_str());
            }
        } else if (p.kind == "done") {
            rp.done = true;
        } else {
            records[(size_t)rank].push_back(p);
            ++rp.measured;
            rp.last_probe = p.name;
            const int h = host_of[(size_t)rank];
            if (host_first[(size_t)h] == rank)
                std::fprintf(out, "  host %s [%d/%d] %s\n", host_names[(size_t)h].c_str(), rp.measured, rp.planned,
                             probe_figure(p).c_str());
        }
    }
};

// The groups of the layout that have members on both hosts of a link: their collectives
// (or sends) cross it. "1 DP group (ranks 0, 2), 1 PP group (ranks 2, 3)"; the kinds in
// `dims` for the cost.
std::string groups_crossing(const RankLayout& layout, const std::vector<int>& host_of, int a, int b, std::set<Dim>& dims) {
    static const char* const kName[DIM_COUNT] = {"TP", "CP", "DP", "PP"};
    std::string out;
    for (Dim d : {DIM_TP, DIM_CP, DIM_DP, DIM_PP}) {
        const GroupSet& g = layout.groups[d];
        if (g.size <= 1) continue;
        std::vector<std::string> crossing;
        for (int gi = 0; gi < g.count; ++gi) {
            bool on_a = false, on_b = false;
            std::string members;
            for (const int32_t* m = g.begin(gi); m != g.end(gi); ++m) {
                on_a = on_a || host_of[(size_t)*m] == a, on_b = on_b || host_of[(size_t)*m] == b;
                members += (members.empty() ? "" : ", ") + std::to_string(*m);
            }
            if (on_a && on_b) crossing.push_back(members);
        }
        if (crossing.empty()) continue;
        dims.insert(d);
        out += (out.empty() ? "" : "; ") + std::to_string(crossing.size()) + " " + kName[d] + " group" + (crossing.size() > 1 ? "s" : "") +
               " (ranks ";
        for (size_t i = 0; i < crossing.size() && i < 4; ++i) out += (i ? " | " : "") + crossing[i];
        out += crossing.size() > 4 ? " | …)" : ")";
    }
    return out.empty() ? "no group of the layout" : out;
}

// The preflight's link lines (docs/launcher.md, "Preflight"): each host flagged for its
// links, each of its slow links with both hosts, how much slower, the groups crossing it
// and what that would cost per step. Returns the hosts flagged here and not already for
// GEMMs.
int report_links(const LinkVerdicts& lv, const JobSpec& job, const RankLayout& layout, const ProbeRun& pr,
                 const std::vector<HostVerdict>& gemm_verdict, FILE* out) {
    if (!lv.judged) {
        if (pr.host_ranks.size() == 2)
            std::fprintf(out, "links: the one link between 2 hosts is measured but not judged (a link is compared with other "
                              "links: that takes 3 hosts or more)\n");
        return 0;
    }
    // Parameters per stage and micro-batches per step, for the traffic that crosses a link.
    const Estimate est = estimate_job(job);
    int newly = 0;
    for (size_t h = 0; h < lv.hosts.size(); ++h) {
        if (!lv.hosts[h].flagged) {
            std::fprintf(out, "host %s: links ok (%+.0f%% against the median host)\n", pr.host_names[h].c_str(), lv.hosts[h].slower * 100);
            continue;
        }
        if (!gemm_verdict[h].flagged) ++newly;
        std::fprintf(out, "host %s has slow links: its median link is %.0f%% slower than the median host's\n", pr.host_names[h].c_str(),
                     lv.hosts[h].slower * 100);
        for (const SlowLink& l : lv.slow_links) {
            if (l.a != (int)h && l.b != (int)h) continue;
            const int other = l.a == (int)h ? l.b : l.a;
            std::set<Dim> dims;
            const std::string groups = groups_crossing(layout, pr.host_of, l.a, l.b, dims);
            // What crosses the link per step (bytes each way), and the extra time at the
            // measured pace: a ring collective moves 2(n−1)/n of the buffer through each of
            // its links (all-reduce; reduce-scatter + all-gather under ZeRO-1 alike), at the
            // pace of its slowest link (nccl-tests' bus-bandwidth convention).
            double dp_bytes = 0, pp_bytes = 0;
            const GroupSet& dpg = layout.groups[DIM_DP];
            if (dims.count(DIM_DP))
                for (int gi = 0; gi < dpg.count; ++gi) {
                    const int stage = layout.ranks[(size_t)*dpg.begin(gi)].coord[DIM_PP];
                    if (stage < (int)est.stages.size())
                        dp_bytes = std::max(dp_bytes, 2.0 * (dpg.size - 1) / dpg.size * est.stages[(size_t)stage].params_count * 4);
                }
            if (dims.count(DIM_PP)) {
                const double act = job.training.precision == Precision::fp32 ? 4 : 2;
                const double tp_split = job.parallel.sequence_parallel ? layout.degree[DIM_TP] : 1;
                pp_bytes = 2.0 * est.micro_batches * job.training.micro_batch * job.model.seq_len * job.model.hidden * act / tp_split;
            }
            std::fprintf(out, "  link host %s ↔ host %s: %.0f%% slower (%s exchanges take %s against %s on the other links); crossed by %s",
                         pr.host_names[h].c_str(), pr.host_names[(size_t)other].c_str(), l.slower * 100, bytes_text(l.bytes).c_str(),
                         seconds_text(l.seconds).c_str(), seconds_text(l.reference_s).c_str(), groups.c_str());
            const double extra_per_byte = l.bytes > 0 ? std::max(0.0, l.seconds - l.reference_s) / l.bytes : 0;
            std::string costed;
            if (dp_bytes > 0) costed += bytes_text(dp_bytes) + " of DP gradient reduction (fp32, as the engine reduces)";
            if (pp_bytes > 0) costed += (costed.empty() ? "" : " and ") + bytes_text(pp_bytes) + " of PP activations and their gradients";
            if (!costed.empty())
                std::fprintf(out, "; would add ≈ %s per step (%s cross it per step%s)", seconds_text((dp_bytes + pp_bytes) * extra_per_byte).c_str(),
                             costed.c_str(), dims.count(DIM_TP) || dims.count(DIM_CP) ? "; its TP/CP traffic is not costed" : "");
            std::fprintf(out, "\n");
        }
    }
    return newly;
}

// The cores host h's ranks may run on together: the union of their affinity masks, capped
// by the lowest CPU limit one reports and the machine's count; 0 when a rank's line has no
// mask (an older engine). One rank cannot tell a mask of its own from one it shares with the
// host's other ranks; the host's lines together can.
int usable_cores_of(const ProbeRun& pr, size_t h) {
    std::set<int> cpus;
    int quota = 0;
    for (int rank : pr.host_ranks[h]) {
        const ProbeRecord& line = pr.host_line[(size_t)rank];
        if (line.cpus.empty()) return 0;
        cpus.insert(line.cpus.begin(), line.cpus.end());
        if (line.cpu_quota > 0 && (quota == 0 || line.cpu_quota < quota)) quota = line.cpu_quota;
    }
    int cores = (int)cpus.size();
    if (quota > 0) cores = std::min(cores, quota);
    const int machine = pr.host_line[(size_t)pr.host_ranks[h].front()].cores;
    return machine > 0 ? std::min(cores, machine) : cores;
}

// The profile from what the ranks measured, then the preflight verdict (--check) or the
// profile written.
int finish_calibration(const CalibrateArgs& a, const JobSpec& job, const RankLayout& layout, const ProbeRun& pr,
                       const std::string& run_dir, double wall, FILE* out, FILE* err) {
    const std::string what = a.check ? "ptd calibrate --check" : "ptd calibrate";
    const size_t world = pr.host_of.size(), host_count = pr.host_ranks.size();
    // The profile: hosts as their ranks described them, every sample, the fitted figures.
    ClusterProfile prof;
    prof.measured_at = utc_now_iso();
    prof.job = a.launch.job;
    prof.gpu = job.cluster.gpu.name;
    prof.precision = to_string(job.training.precision);
    prof.quick = a.quick || a.check;
    prof.ranks_per_host = (int)pr.host_ranks.front().size();
    for (size_t h = 0; h < host_count; ++h) {
        ProfileHost ph;
        ph.name = pr.host_display[h];
        ph.ranks = (int)pr.host_ranks[h].size();
        const ProbeRecord& hl = pr.host_line[(size_t)pr.host_ranks[h].front()];
        ph.hostname = hl.hostname, ph.cpu_model = hl.cpu_model, ph.cores = hl.cores;
        ph.usable_cores = usable_cores_of(pr, h);
        ph.memory_gib = hl.memory_bytes / (1024.0 * 1024 * 1024);
        ph.blas_core = hl.blas_core, ph.backend = hl.backend, ph.gpu = hl.device;
        if (prof.ptd_version.empty()) prof.ptd_version = hl.engine_version;
        prof.hosts.push_back(ph);
    }
    std::vector<LinkSample> links;  // the preflight's, not the profile's (no model takes them yet)
    for (size_t r = 0; r < world; ++r)
        for (const ProbeRecord& p : pr.records[r]) {
            if (p.kind == "link") {
                if (p.peer_rank < 0 || (size_t)p.peer_rank >= world) continue;
                const int a = pr.host_of[r], b = pr.host_of[(size_t)p.peer_rank];
                if (a != b) links.push_back({std::min(a, b), std::max(a, b), p.bytes, p.median_s});
                continue;
            }
            ProfileSample s;
            s.host = pr.host_of[r], s.rank = (int)r, s.kind = p.kind, s.name = p.name, s.dtype = p.dtype;
            for (long long x : p.shape) s.shape.push_back((int)x);
            s.flops = p.flops, s.bytes = p.bytes, s.group = p.group;
            s.group_size = p.group_size, s.nodes = p.nodes, s.members_per_node = p.members_per_node;
            s.median_s = p.median_s, s.spread = p.spread, s.repeats = p.repeats;
            s.mean_s = p.mean_s, s.between_s = p.between_s, s.micro_batches = p.micro_batches;
            prof.samples.push_back(s);
        }
    prof.seconds = wall;
    fit_profile(prof);

    if (a.check) {
        // Per sustained GEMM probe (throughput over many time slices: a shared core shows
        // there, not in one call's median): each host's median over its ranks, divided by
        // the median over hosts.
        std::map<std::string, std::vector<std::vector<double>>> per_probe;  // key → host → rank times
        for (const ProfileSample& s : prof.samples)
            if (s.kind == "gemm" && s.name.ends_with(".sustained")) {
                auto& v = per_probe[s.name];
                v.resize(host_count);
                v[(size_t)s.host].push_back(s.median_s);
            }
        std::vector<std::vector<double>> host_ratios(host_count);
        for (auto& [name, hosts] : per_probe) {
            std::vector<double> host_time;
            for (auto& t : hosts) host_time.push_back(median(t));
            const double ref = median(host_time);
            if (ref <= 0) continue;
            for (size_t h = 0; h < host_count; ++h)
                if (!hosts[h].empty()) host_ratios[h].push_back(host_time[h] / ref);
        }
        std::vector<double> ratio;
        for (auto& r : host_ratios) ratio.push_back(median(r));
        const auto verdict = flag_slow_hosts(ratio);
        int flagged = 0;
        for (size_t h = 0; h < host_count; ++h) {
            const ProfileHost& ph = prof.hosts[h];
            const auto& ranks = pr.host_ranks[h];
            const bool generic_blas = ph.blas_core == "Prescott" || ph.blas_core == "Generic";
            if (verdict[h].flagged) {
                ++flagged;
                std::fprintf(out,
                             "host %s is %.0f%% slower at GEMMs; it holds %s and would slow every step by ≈ %.0f%% "
                             "(every rank waits for it at the next collective)\n",
                             pr.host_names[h].c_str(), verdict[h].slower * 100, holdings(layout, ranks).c_str(), verdict[h].slower * 100);
            } else {
                std::fprintf(out, "host %s: ok (GEMMs %+.0f%% against the reference; holds %s)\n", pr.host_names[h].c_str(), verdict[h].slower * 100,
                             holdings(layout, ranks).c_str());
            }
            if (generic_blas)
                std::fprintf(out, "host %s: its BLAS runs the generic \"%s\" kernels (set OPENBLAS_CORETYPE; docs/performance.md)\n",
                             pr.host_names[h].c_str(), ph.blas_core.c_str());
        }
        flagged += report_links(judge_links((int)host_count, links), job, layout, pr, verdict, out);
        std::fprintf(out, "%s: %d of %zu host(s) flagged (rule: ≥ %.0f%% and %.0f MADs slower than the median host); %.1f s\n",
                     what.c_str(), flagged, host_count, kSlowMinSlower * 100, kSlowMads, wall);
        return flagged ? kExitRuntime : kExitOk;
    }

    const std::string path = a.output.empty() ? run_dir + "/profile.toml" : a.output;
    if (auto w = write_profile_file(path, profile_toml(prof)); !w) {
        std::fprintf(err, "%s: %s\n", what.c_str(), w.error().one_line().c_str());
        return kExitRuntime;
    }
    std::fprintf(out, "fitted: GEMMs %.3g TFLOP/s (the job's mix), memory %.3g GB/s, one op %.3g µs\n", prof.gemm_tflops,
                 prof.memory_gbps, prof.host_op_s * 1e6);
    for (const CollectiveFigure& c : prof.collectives)
        std::fprintf(out, "fitted: %s %s×%d (%d node%s): latency %.3g µs, bus %.3g GB/s (largest residual %.0f%%)\n", c.op.c_str(),
                     c.group.c_str(), c.group_size, c.nodes, c.nodes == 1 ? "" : "s", c.latency_s * 1e6, c.busbw_gbps,
                     c.max_residual * 100);
    if (const DpWaitFigure w = dp_wait_figure(prof); w.group > 1) std::fprintf(out, "fitted: %s\n", describe_dp_wait(w).c_str());  // dpwait
    std::fprintf(out, "wrote %s (%zu samples from %zu rank(s) on %zu host(s)) in %.1f s\n", path.c_str(), prof.samples.size(), world,
                 host_count, wall);
    return kExitOk;
}

// --collect RUN_DIR: the probe lines of a calibration run's rank logs (a Slurm run's, or a
// finished local / SSH one's), through the same profile or preflight.
int collect_calibration(const CalibrateArgs& a, const PresetCatalog& presets, std::chrono::steady_clock::time_point t_start,
                        FILE* out, FILE* err) {
    const std::string& dir = a.collect;
    auto manifest = read_manifest(dir);
    if (!manifest) {
        std::fprintf(err, "%s", manifest.error().str().c_str());
        return kExitConfig;
    }
    CalibrateArgs b = a;
    b.launch.job = dir + "/job.toml";
    auto job = load_job_arg(b.launch.job, presets, {});
    if (!job) {
        std::fprintf(err, "%s", job.error().str().c_str());
        return kExitConfig;
    }
    auto layout = job_layout(*job);
    if (!layout) {
        std::fprintf(err, "%s", layout.error().str().c_str());
        return kExitConfig;
    }
    ProbeRun pr;
    const size_t world = manifest->ranks.size();
    pr.host_of.resize(world), pr.host_line.resize(world), pr.records.resize(world);
    pr.host_ranks.resize(manifest->hosts.size());
    for (size_t h = 0; h < manifest->hosts.size(); ++h) {
        pr.host_display.push_back(manifest->hosts[h]);
        pr.host_names.push_back(std::to_string(h) + " (" + manifest->hosts[h] + ")");
    }
    for (const RunManifestRank& mr : manifest->ranks) {
        if (mr.rank < 0 || (size_t)mr.rank >= world || mr.host < 0 || (size_t)mr.host >= pr.host_ranks.size()) continue;
        pr.host_of[(size_t)mr.rank] = mr.host;
        pr.host_ranks[(size_t)mr.host].push_back(mr.rank);
    }
    for (size_t r = 0; r < world; ++r) {
        const std::string path = dir + "/rank-" + std::to_string(r) + ".log";
        auto text = read_regular_file(path, file_kind::data, "--collect");
        if (!text) {
            std::fprintf(err, "%s", text.error().str().c_str());
            return kExitConfig;
        }
        bool done = false;
        int line_no = 0;
        for (size_t at = 0; at < text->size();) {
            const size_t nl = std::min(text->find('\n', at), text->size());
            const std::string_view line(text->data() + at, nl - at);
            at = nl + 1, ++line_no;
            std::string problem;
            auto m = parse_metrics_line(line, &problem);
            if (!m && line.find("\"event\":\"probe\"") != std::string_view::npos) {
                std::fprintf(err, "%s:%d: error: --collect: a probe line the engine did not write: %s\n", path.c_str(), line_no, problem.c_str());
                return kExitConfig;
            }
            if (!m || m->kind != MetricKind::probe) continue;
            const ProbeRecord& p = m->probe;
            if (p.kind == "host") pr.host_line[r] = p;
            else if (p.kind == "done") done = true;
            else if (p.kind != "plan") pr.records[r].push_back(p);
        }
        if (!done) {
            std::fprintf(err,
                         "%s: error: --collect: rank %zu did not finish its probes (no \"done\" line after %zu probe(s)); allowed: "
                         "the run directory of a calibration whose ranks all finished\n",
                         path.c_str(), r, pr.records[r].size());
            return kExitRuntime;
        }
    }
    // A scheduler placed the ranks (no launcher of ours watched them): the manifest could only
    // name its hosts node-0, node-1, ...; each is named by the hostname its first rank reported.
    if (manifest->launcher.pid == 0)
        for (size_t h = 0; h < pr.host_ranks.size(); ++h) {
            if (pr.host_ranks[h].empty()) continue;
            const std::string& name = pr.host_line[(size_t)pr.host_ranks[h].front()].hostname;
            if (name.empty()) continue;
            pr.host_display[h] = name;
            pr.host_names[h] = std::to_string(h) + " (" + name + ")";
        }
    b.quick = pr.host_line.front().quick;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    return finish_calibration(b, *job, *layout, pr, dir, wall, out, err);
}

// --slurm --submit: sbatch the probe script, follow the job's run directory (the rank logs
// on the file system every node shares, squeue / sacct for the job's state) with the same
// line per probe and host as a local calibration, and once Slurm reports the job over,
// assemble the profile from the rank logs as --collect does. A job that fails, is
// cancelled or runs out of time writes no profile; its state and the logs are named.
int calibrate_through_slurm(const CalibrateArgs& a, const LaunchPlan& plan, const std::string& what, const PresetCatalog& presets,
                            std::chrono::steady_clock::time_point t_start, FILE* out, FILE* err) {
    if (int rc = write_slurm(plan, out, err, true); rc != kExitOk) return rc;
    auto follower = RunFollower::open(plan.run_dir);
    if (!follower) {
        std::fprintf(err, "%s", follower.error().str().c_str());
        return kExitRuntime;
    }
    std::fprintf(out, "%s: %zu rank(s) on %zu node(s) probing %s through Slurm; waiting for the job (Ctrl-C leaves it to "
                      "Slurm: ptd stop cancels it, ptd calibrate --collect assembles it later)\n",
                 what.c_str(), plan.ranks.size(), plan.hosts.size(), a.launch.job.c_str());
    std::fflush(out);
    ProbeProgress pp(what, plan);
    pp.hosts_from_probes = true;
    for (;;) {
        for (const LaunchEvent& ev : (*follower)->poll())
            if (ev.kind == LaunchEventKind::metric && ev.metric) pp.on_metric(ev.rank, *ev.metric, out, err);
        std::fflush(out);
        if ((*follower)->done()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    const RunManifest& m = (*follower)->manifest();
    if (m.state != "finished") {
        // The follower's reason names the job, Slurm's state and srun's first failed rank.
        const std::string job_id = m.scheduler ? m.scheduler->job_id : "?";
        const std::string reason = m.reason.empty() ? "Slurm job " + job_id + " " + m.state : m.reason;
        std::fprintf(err, "%s: failed: %s\nno profile written. Logs: %s\n", what.c_str(), reason.c_str(), plan.run_dir.c_str());
        return kExitRuntime;
    }
    CalibrateArgs collected = a;
    collected.collect = plan.run_dir;
    return collect_calibration(collected, presets, t_start, out, err);
}

}  // namespace

int cmd_calibrate(const CalibrateArgs& a, const PresetCatalog& presets, FILE* out, FILE* err) {
    if (!a.collect.empty()) return collect_calibration(a, presets, std::chrono::steady_clock::now(), out, err);
    if (!a.from_run.empty()) return refine_profile_from_run(a, presets, out, err);
    if (a.launch.job.empty()) {
        std::fprintf(err, "ptd calibrate: error: JOB: missing; allowed: a job file, @default or @tiny (or --collect RUN_DIR)\n");
        return kExitConfig;
    }
    const auto t_start = std::chrono::steady_clock::now();
    auto job = load_job_arg(a.launch.job, presets, sets_with_slurm_flags(a.launch));
    if (!job) {
        std::fprintf(err, "%s", job.error().str().c_str());
        return kExitConfig;
    }
    LaunchArgs la = a.launch;
    la.engine_args.insert(la.engine_args.begin(), "--probe");
    if (a.quick || a.check) la.engine_args.insert(la.engine_args.begin() + 1, "--quick");
    // The engines' own liveness monitor names a rank that stops (a frozen or lost process)
    // after stall_s; the calibration's check below names a rank that is alive but whose
    // probe never ends, after 1.5 × stall_s.
    char stall[32];
    std::snprintf(stall, sizeof stall, "%g", a.stall_s);
    la.engine_args.insert(la.engine_args.end(), {"--stall-timeout", stall});
    auto opts = launch_options(la);
    if (!opts) {
        std::fprintf(err, "%s", opts.error().str().c_str());
        return kExitConfig;
    }
    auto plan = make_launch_plan(*job, *opts);
    if (!plan) {
        std::fprintf(err, "%s", plan.error().str().c_str());
        return kExitConfig;
    }
    if (a.launch.dry_run) {
        std::fputs(format_dry_run(*plan).c_str(), out);
        // What a real launch would refuse before starting a rank (a GPU job here without GPUs).
        if (std::string refusal = a.launch.slurm ? "" : local_gpu_refusal(*plan); !refusal.empty()) {
            std::fprintf(err, "%s\n", format_diagnostic({plan->job.where("cluster.gpu"), "cluster.gpu", refusal}).c_str());
            return kExitRuntime;  // as the real launch: the job is valid, this machine cannot run it
        }
        return kExitOk;
    }
    if (a.launch.slurm && !a.launch.submit) return write_slurm(*plan, out, err);
    auto layout = job_layout(plan->job);
    if (!layout) {
        std::fprintf(err, "%s", layout.error().str().c_str());
        return kExitConfig;
    }
    const std::string what = a.check ? "ptd calibrate --check" : "ptd calibrate";
    if (a.launch.slurm) return calibrate_through_slurm(a, *plan, what, presets, t_start, out, err);
    const size_t world = plan->ranks.size(), host_count = plan->hosts.size();
    ProbeProgress pp(what, *plan);
    const std::vector<std::string>& host_names = pp.host_names;
    const std::vector<int>& host_of = pp.host_of;
    std::vector<RankProgress>& progress = pp.ranks;
    const std::string run_dir = plan->run_dir;

    auto launcher = Launcher::start(std::move(*plan));
    if (!launcher) {
        std::fprintf(err, "%s", launcher.error().str().c_str());
        return kExitRuntime;
    }
    Launcher& run = **launcher;
    std::fprintf(out, "%s: %zu rank(s) on %zu host(s) probing %s; logs in %s\n", what.c_str(), world, host_count,
                 a.launch.job.c_str(), run_dir.c_str());
    bool stalled = false;
    std::string stall_reason, engine_error;
    LaunchEvent ev;
    for (;;) {
        if (!run.next_event(ev, 0.2)) {
            if (run.finished()) break;
        } else {
            if (ev.kind == LaunchEventKind::host_failed)
                std::fprintf(err, "%s: host %s: %s\n", what.c_str(), run.plan().hosts[(size_t)ev.host].display.c_str(), ev.text.c_str());
            // The engines' own diagnosis of a lost or frozen peer (their liveness monitor names
            // the rank and its host), kept for the failure message.
            if (ev.kind == LaunchEventKind::output && ev.is_stderr && engine_error.empty() &&
                ev.text.find(": error: aborting: ") != std::string::npos)
                engine_error = ev.text;
            if (ev.kind == LaunchEventKind::metric && ev.metric) pp.on_metric(ev.rank, *ev.metric, out, err);
            if (ev.kind == LaunchEventKind::finished) break;
        }
        std::fflush(out);
        // A probe that hangs in a live rank: the rank with the fewest probes done (its
        // peers have gone on to the next collective and wait there for it), the one silent
        // the longest among those, once it has been silent 1.5 × stall_s.
        if (!stalled) {
            const auto now = std::chrono::steady_clock::now();
            int quiet = -1;
            for (size_t r = 0; r < world; ++r) {
                if (progress[r].done) continue;
                const RankProgress& q = progress[(size_t)std::max(quiet, 0)];
                if (quiet < 0 || progress[r].measured < q.measured || (progress[r].measured == q.measured && progress[r].last < q.last))
                    quiet = (int)r;
            }
            const bool silent_everywhere = std::all_of(progress.begin(), progress.end(), [&](const RankProgress& p) {
                return p.done || std::chrono::duration<double>(now - p.last).count() >= 1.5 * a.stall_s;
            });
            if (quiet >= 0 && silent_everywhere) {
                stalled = true;
                stall_reason = "rank " + std::to_string(quiet) + " on host " + host_names[(size_t)host_of[(size_t)quiet]] +
                               " made no progress for " + std::to_string((int)(1.5 * a.stall_s)) +
                               " s (last probe done: " + progress[(size_t)quiet].last_probe + ")";
                std::fprintf(err, "%s: %s; stopping every rank\n", what.c_str(), stall_reason.c_str());
                run.stop();
            }
        }
    }
    const int rc = run.wait();
    const LaunchOutcome o = run.outcome();
    if (stalled || rc != 0) {
        std::string reason = stalled ? stall_reason : o.reason;
        if (!stalled && o.failed_host >= 0 && reason.find(host_names[(size_t)o.failed_host]) == std::string::npos)
            reason += " (host " + host_names[(size_t)o.failed_host] + ")";
        std::fprintf(err, "%s: failed: %s\n", what.c_str(), reason.c_str());
        if (!engine_error.empty()) std::fprintf(err, "%s: the ranks' liveness monitor: %s\n", what.c_str(), engine_error.c_str());
        if (!o.last_stderr.empty() && o.failed_rank >= 0) {
            std::fprintf(err, "last stderr lines of rank %d:\n", o.failed_rank);
            for (const std::string& l : o.last_stderr) std::fprintf(err, "  | %s\n", l.c_str());
        }
        std::fprintf(err, "no profile written; every rank was stopped. Logs: %s\n", run_dir.c_str());
        return kExitRuntime;
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();

    ProbeRun pr;
    pr.host_names = host_names;
    for (const HostPlan& h : run.plan().hosts) pr.host_ranks.push_back(h.ranks), pr.host_display.push_back(h.display);
    pr.host_of = host_of;
    pr.host_line = pp.host_line;
    pr.records = std::move(pp.records);
    const int written = finish_calibration(a, run.plan().job, *layout, pr, run_dir, wall, out, err);
    if (written != kExitOk || a.check || a.no_step_probe) return written;
    return step_probe(a, a.output.empty() ? run_dir + "/profile.toml" : a.output, run_dir, presets, out, err);
}

}  // namespace ptd
