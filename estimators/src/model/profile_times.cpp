// profile_times.cpp — one op's time from a cluster profile's probes (profile_times.h).
#include "profile_times.h"

#include "ptd/common/sample_stats.h"
#include "ptd/model/estimate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

namespace ptd::est {

namespace {

// Value at `x` on a curve of (x, y) points sorted by x: linear between points (points at
// the same x: the later one); the first point's value below it (a collective under its
// smallest probed size costs its latency); the last segment's slope past the end.
double curve_at(const std::vector<std::pair<double, double>>& pts, double x) {
    if (pts.empty()) return -1;
    if (x <= pts.front().first || pts.size() == 1) {
        if (pts.size() == 1 && x > pts.front().first) return pts.front().second * x / pts.front().first;
        return pts.front().second;
    }
    for (size_t i = 1; i < pts.size(); ++i)
        if (x <= pts[i].first) {
            const auto [x0, y0] = pts[i - 1];
            const auto [x1, y1] = pts[i];
            return x1 > x0 ? y0 + (y1 - y0) * (x - x0) / (x1 - x0) : y1;
        }
    const auto [x0, y0] = pts[pts.size() - 2];
    const auto [x1, y1] = pts.back();
    const double slope = x1 > x0 ? std::max(0.0, (y1 - y0) / (x1 - x0)) : 0.0;
    return y1 + slope * (x - x1);
}

// What one call costs a step that makes many. Where a host shares its cores (more ranks
// than cores), the mean of the timed repeats: every rank probed at once, as it trains, so
// the calls were descheduled as they will be in training, and the times are heavy-tailed (a
// collective waits whenever a peer is off its core) — the median would count none of that.
// Where every rank has a core, the median: a rare slow repeat there is a disturbance (on
// this 2-core machine, 1 of 9 all-gathers of 2 ranks at ~10 ms against 0.08 ms, while a
// step's hundreds of calls cost 0.14 ms each), and 9 repeats' mean would make it a tenth of
// every call. The median also where the mean was not kept.
double call_seconds(const ProfileSample& s, bool shared_cores) {
    return shared_cores && s.mean_s > 0 ? s.mean_s : s.median_s;
}

// The same at the q-quantile of what the probe knows of its mean: the mean of `repeats`
// calls is uncertain by σ/√repeats (the standard error), σ read from the spread as a normal
// distribution's (IQR = 1.349 σ). A step sums many calls, so it is the mean's uncertainty,
// not one call's spread, that carries into the step. q = 0.5 is the call time itself.
double call_seconds_at(const ProfileSample& s, double q, bool shared_cores) {
    const double z = 3.204 * (q - 0.5);  // Φ⁻¹(q), exact at 0.1, 0.5 and 0.9
    const double sigma = s.spread * s.median_s / 1.349;
    const double se = sigma / std::sqrt((double)std::max(1, s.repeats));
    const double t = call_seconds(s, shared_cores);
    return std::max(0.1 * t, t + z * se);
}

}  // namespace

ProfileTimes make_profile_times(const ClusterProfile& p, double q) {
    ProfileTimes t;
    // Group the samples by what they measured, then take the median over the ranks.
    std::map<std::tuple<std::string, std::string, std::vector<int>>, std::pair<double, std::vector<double>>> gemm;
    std::map<std::string, std::vector<double>> bw;
    std::map<std::tuple<std::string, std::string, double, bool>, std::pair<int, std::vector<double>>> comm;
    std::vector<double> host_op;
    std::map<std::tuple<std::string, std::string, std::vector<int>>, std::vector<double>> passes;
    bool shared_cores = false;
    for (const ProfileHost& h : p.hosts) shared_cores |= h.shares_cores() && h.gpu.empty();
    for (const ProfileSample& s : p.samples) {
        if (s.median_s <= 0) continue;
        const double per_call = call_seconds_at(s, q, shared_cores);
        if (s.kind == "gemm" || s.kind == "attention") {
            // The sustained probe times the same GEMM over many time slices: it is the
            // preflight's, not an op's time.
            if (s.name.find(".sustained") != std::string::npos) continue;
            auto& g = gemm[{s.name, s.dtype, s.shape}];
            g.first = s.flops;
            g.second.push_back(per_call);
        } else if (s.kind == "memory" || s.kind == "elementwise") {
            if (s.bytes > 0) bw[s.name].push_back(s.bytes / per_call);
        } else if (s.kind == "host_op") {
            host_op.push_back(per_call);
        } else if (s.kind == "layer" && !s.name.starts_with("step.compute")) {  // the bursts: dp_wait_figure below
            passes[{s.name, s.dtype, s.shape}].push_back(per_call);
        } else if (s.kind == "comm") {
            auto& c = comm[{s.name, s.group, s.bytes, s.between_s > 0}];
            c.first = s.group_size;
            c.second.push_back(per_call);
        }
    }
    for (auto& [key, v] : gemm) {
        const auto& [name, dtype, shape] = key;
        ProfileTimes::Gemm g;
        g.name = name, g.dtype = dtype, g.flops = v.first, g.seconds = quantile(v.second, q);
        if (shape.size() == 3) g.M = shape[0], g.N = shape[1], g.K = shape[2];
        t.gemms.push_back(g);
    }
    for (auto& [name, v] : bw) t.bandwidth[name] = quantile(v, 1 - q);  // the slow end: less bandwidth
    for (auto& [key, v] : comm) {
        const auto& [op, group, bytes, in_step] = key;
        ProfileTimes::Curve& c = t.comm[{op, group}];
        c.group_size = v.first;
        (in_step ? c.in_step : c.points).emplace_back(bytes, quantile(v.second, q));
    }
    for (auto& [key, c] : t.comm) std::sort(c.points.begin(), c.points.end()), std::sort(c.in_step.begin(), c.in_step.end());
    t.host_op_s = quantile(host_op, q);
    for (auto& [key, v] : passes) t.passes[key] = quantile(v, q);
    const DpWaitFigure w = dp_wait_figure(p);
    t.dp_wait_group = w.group, t.dp_wait_burst_s = w.burst_s, t.dp_wait_s = w.wait_s;
    // One host only: with several, which stages share which cores depends on the placement.
    if (p.hosts.size() == 1 && shared_cores) {
        t.shared_cores = p.hosts[0].cores_for_ranks();
        t.shared_ranks_per_core = (double)p.hosts[0].ranks / t.shared_cores;
    }
    return t;
}

double ProfileTimes::gemm_s(const std::string& name, const std::string& dtype, double M, double N, double K) const {
    const double flops = 2.0 * M * N * K;
    for (const Gemm& g : gemms)
        if (g.name == name && g.dtype == dtype && g.M == M && g.N == N && g.K == K) return g.seconds;
    return rate_s([](const Gemm& g) { return g.name.rfind("attention", 0) != 0; }, dtype, flops);
}

double ProfileTimes::pass_s(const std::string& name, const std::string& dtype, const std::vector<int>& shape) const {
    const auto it = passes.find({name, dtype, shape});
    return it == passes.end() ? -1 : it->second;
}

double ProfileTimes::attention_s(const std::string& name, const std::string& dtype, double flops) const {
    const double t = rate_s([&](const Gemm& g) { return g.name == name; }, dtype, flops);
    return t > 0 ? t : rate_s([](const Gemm& g) { return g.name.rfind("attention", 0) != 0; }, dtype, flops);
}

// Seconds of `flops` at the achieved FLOP/s of the probed GEMMs `pick` chooses in `dtype`
// (else in any dtype: better than none), interpolated against log FLOPs; a size outside the
// measured range takes the nearest rate. 0 when nothing was probed.
double ProfileTimes::rate_s(const std::function<bool(const Gemm&)>& pick, const std::string& dtype, double flops) const {
    std::vector<std::pair<double, double>> rate;  // (log flops, flop/s)
    for (const Gemm& g : gemms)
        if (pick(g) && g.dtype == dtype && g.seconds > 0) rate.emplace_back(std::log(g.flops), g.flops / g.seconds);
    if (rate.empty())
        for (const Gemm& g : gemms)
            if (pick(g) && g.seconds > 0) rate.emplace_back(std::log(g.flops), g.flops / g.seconds);
    if (rate.empty() || flops <= 0) return 0;
    std::sort(rate.begin(), rate.end());
    const double x = std::clamp(std::log(flops), rate.front().first, rate.back().first);
    const double r = curve_at(rate, x);
    return r > 0 ? flops / r : 0;
}

double ProfileTimes::bytes_s(const std::string& name, double bytes) const {
    auto it = bandwidth.find(name);
    if (it == bandwidth.end()) it = bandwidth.find("copy");
    if (it == bandwidth.end() || it->second <= 0) return 0;
    return bytes / it->second;
}

double ProfileTimes::dp_wait(int n, double step_compute_s) const {
    if (n <= 1 || dp_wait_group <= 1 || dp_wait_s <= 0 || dp_wait_burst_s <= 0 || step_compute_s <= 0) return 0;
    return dp_wait_s * expected_slowest_of(n) / expected_slowest_of(dp_wait_group) *
           std::sqrt(step_compute_s / dp_wait_burst_s);
}

namespace {

// The curve a collective takes: the group as probed, if it had these n members; else a
// probed group of n members (the tied-embedding pair, a layout the planner tries); else the
// probed group of the op nearest in size, its time scaled (`scale`) by the bus-bandwidth
// factors (more members move more bytes per rank: all-reduce 2(n−1)/n, ...). Null when the
// op was never probed.
const ProfileTimes::Curve* curve_for(const std::map<std::pair<std::string, std::string>, ProfileTimes::Curve>& comm,
                                     const std::string& op, const std::string& group, int n, double& scale) {
    auto it = comm.find({op, group});
    if (it != comm.end() && it->second.group_size != n) it = comm.end();
    if (it == comm.end())
        for (auto j = comm.begin(); j != comm.end(); ++j)
            if (j->first.first == op && j->second.group_size == n && (it == comm.end() || j->first.second == "world")) it = j;
    scale = 1;
    if (it == comm.end()) {
        for (auto j = comm.begin(); j != comm.end(); ++j)
            if (j->first.first == op && (it == comm.end() || std::abs(j->second.group_size - n) < std::abs(it->second.group_size - n)))
                it = j;
        if (it == comm.end()) return nullptr;
        const double f = collective_bus_factor(op, it->second.group_size);
        scale = f > 0 ? collective_bus_factor(op, n) / f : 1;
    }
    return &it->second;
}

// An in-step sample speaks for messages near its size (within 4×): the wait it holds
// belongs to that call in that step; far from it the back-to-back curve stands. The
// nearest such sample, or null.
const std::pair<double, double>* in_step_near(const ProfileTimes::Curve& c, double bytes) {
    const std::pair<double, double>* at = nullptr;
    for (const auto& j : c.in_step)
        if (j.first <= 4 * bytes && bytes <= 4 * j.first &&
            (!at || std::abs(std::log(j.first / bytes)) < std::abs(std::log(at->first / bytes))))
            at = &j;
    return at;
}

}  // namespace

double ProfileTimes::collective_s(const std::string& op, const std::string& group, int n, double bytes) const {
    if (n <= 1) return 0;
    double scale = 1;
    const Curve* c = curve_for(comm, op, group, n, scale);
    if (!c) return -1;
    const std::pair<double, double>* at = in_step_near(*c, bytes);
    if (!at) return c->points.empty() ? -1 : scale * curve_at(c->points, bytes);
    const double growth = c->points.empty() ? 0.0 : curve_at(c->points, bytes) - curve_at(c->points, at->first);
    return scale * std::max(0.0, at->second + growth);
}

bool ProfileTimes::timed_in_step(const std::string& op, const std::string& group, int n, double bytes) const {
    double scale = 1;
    const Curve* c = n > 1 ? curve_for(comm, op, group, n, scale) : nullptr;
    return c && in_step_near(*c, bytes);
}

}  // namespace ptd::est
