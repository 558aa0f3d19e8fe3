// planner_model.cpp — the Planner tab's background search and table (planner_model.h).
// The worker thread owns a copy of the job and publishes (evaluated, total) and, at the
// end, the whole Result<PlanResult> under one mutex; the UI thread copies them out in
// planner_tick and builds the rows there, so nothing the UI reads is shared.
#include "planner_model.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <mutex>
#include <thread>

#include "ptd/model/estimate.h"
#include "studio_state.h"

namespace ptd::studio {

// ---- The worker ------------------------------------------------------------------------

class PlannerWorker {
public:
    // What it searched; immutable after construction, so the UI thread may read it.
    const JobSpec job;
    const PlannerSettings settings;

    struct Snapshot {
        int64_t evaluated = 0, total = 0;
        bool finished = false;
        std::optional<Result<PlanResult>> result;  // empty when cancelled before it began
    };

    PlannerWorker(JobSpec j, PlannerSettings st, PlanOptions opt) : job(std::move(j)), settings(st) {
        opt.progress = [this](int64_t done, int64_t total) {
            {
                std::lock_guard lock(mutex_);
                evaluated_ = done;
                total_ = total;
            }
            return !cancel_.load(std::memory_order_relaxed);
        };
        thread_ = std::thread([this, opt = std::move(opt)] { run(opt); });  // last: every member is ready
    }
    ~PlannerWorker() {
        cancel();
        if (thread_.joinable()) thread_.join();
    }
    PlannerWorker(const PlannerWorker&) = delete;
    PlannerWorker& operator=(const PlannerWorker&) = delete;

    void cancel() { cancel_.store(true, std::memory_order_relaxed); }
    // The latest progress; the result once (later calls see finished without it).
    Snapshot take() {
        std::lock_guard lock(mutex_);
        Snapshot s{evaluated_, total_, finished_, std::move(result_)};
        result_.reset();
        return s;
    }
    bool finished() {
        std::lock_guard lock(mutex_);
        return finished_;
    }

private:
    void run(const PlanOptions& opt) {
        std::optional<Result<PlanResult>> r;
        if (!cancel_.load(std::memory_order_relaxed)) r = plan_layouts(job, opt);
        std::lock_guard lock(mutex_);
        result_ = std::move(r);
        finished_ = true;
    }

    std::mutex mutex_;
    int64_t evaluated_ = 0, total_ = 0;
    bool finished_ = false;
    std::optional<Result<PlanResult>> result_;
    std::atomic<bool> cancel_{false};
    std::thread thread_;
};

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

int planned_world(const JobSpec& job, const PlannerSettings& st) { return st.gpus > 0 ? st.gpus : job.world_size(); }

// The inputs a search depends on besides the layout: model, cluster (hosts do not matter;
// nodes not when the search was for a given GPU count), training but micro_batch, and
// [estimate]. Not cp: the planner searches it like tp and pp.
bool plan_inputs_differ(const JobSpec& a, const JobSpec& b, bool ignore_nodes) {
    if (a.model != b.model || a.estimate != b.estimate) return true;
    ClusterSpec ca = a.cluster, cb = b.cluster;
    ca.hosts.clear(), cb.hosts.clear();
    if (ignore_nodes) ca.nodes = cb.nodes;
    if (ca != cb) return true;
    TrainingSpec ta = a.training, tb = b.training;
    ta.micro_batch = tb.micro_batch;
    return ta != tb;
}

PlanOptions options_of(const PlannerSettings& st) {
    PlanOptions o;
    o.gpus = st.gpus;
    o.top_k = st.top_k;
    o.top_k_unfit = st.top_k;
    o.keep_fitting_scores = true;
    o.headroom = st.job_headroom ? -1 : st.headroom;
    o.tp_beyond_node = st.tp_beyond_node;
    o.any_framework = st.any_framework;  // planfw
    // One hardware thread stays with the UI thread, so the window keeps drawing while the
    // search runs (the plan is the same on any number of threads).
    const unsigned hardware = std::thread::hardware_concurrency();  // 0: unknown
    o.threads = hardware > 1 ? (int)hardware - 1 : 1;
    return o;
}

const char* order_of(const JobSpec& planned, const LayoutChoice& c) {
    return c.order >= 0 && c.order < kPlannerOrderCount ? kPlannerOrders[c.order] : planned.parallel.order.c_str();
}

bool all_equal(const std::vector<int>& v) {
    return std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) == v.end();
}

// Two layers_per_stage lists describe the same split (empty = balanced; any two even
// splits are the same, whether listed per stage or per vpp chunk).
bool same_split(const std::vector<int>& a, const std::vector<int>& b, int layers, int pp) {
    if (a == b) return true;
    const std::vector<int> na = a.empty() ? balanced_layers_per_stage(layers, pp) : a;
    const std::vector<int> nb = b.empty() ? balanced_layers_per_stage(layers, pp) : b;
    return na == nb || (all_equal(na) && all_equal(nb));
}

enum class RowMatch { none, row, folded };

// Whether the job's layout is row r's: the row itself, or (fold) one of the variants folded
// into it — the same layout at another interleaving depth or replica count.
RowMatch row_match(const JobSpec& job, const JobSpec& planned, const PlanRow& r) {
    const LayoutChoice& c = r.entry.choice;
    const ParallelSpec& p = job.parallel;
    if (!job.has_layout()) return RowMatch::none;  // a bare job's placeholder tp1·pp1 is no row
    const bool same_but_fold = c.tp == p.tp && c.pp == p.pp && c.dp == p.dp && c.cp == p.cp && c.ep == p.ep &&
                               c.micro_batch == job.training.micro_batch && c.zero == p.zero &&
                               c.distributed_optimizer == p.distributed_optimizer &&
                               c.sequence_parallel == p.sequence_parallel && c.recompute == p.recompute &&
                               p.order == order_of(planned, c) &&
                               same_split(p.layers_per_stage, r.entry.layers_per_stage, job.model.layers, p.pp);
    if (!same_but_fold) return RowMatch::none;
    const int replicas = std::max(1, p.dp_replicate);
    if (c.vpp == p.vpp && c.dp_replicate == replicas) return RowMatch::row;
    for (const FoldedVariant& v : r.entry.folded)
        if (v.vpp == p.vpp && v.dp_replicate == replicas) return RowMatch::folded;
    return RowMatch::none;
}

void rebuild_view(PlannerState& p) {
    p.view.clear();
    for (int i = 0; i < (int)p.rows.size(); ++i)
        if (p.rows[i].fits || !p.fits_only) p.view.push_back(i);
    const PlanColumn col = p.sort_column;
    auto key = [&](const PlanRow& r) -> double {
        const LayoutChoice& c = r.entry.choice;
        const LayoutScore& sc = r.entry.score;
        switch (col) {
            case PlanColumn::rank: return r.fits ? (double)r.number : 1e18;
            case PlanColumn::tokens_per_s: return sc.tokens_per_s;
            case PlanColumn::mfu: return sc.mfu;
            case PlanColumn::step_s: return sc.step_s;
            case PlanColumn::peak: return sc.peak_bytes;
            case PlanColumn::headroom: return sc.usable_bytes - sc.peak_bytes;
            case PlanColumn::tp: return c.tp;
            case PlanColumn::pp: return c.pp;
            case PlanColumn::dp: return c.dp;
            case PlanColumn::cp: return c.cp;
            case PlanColumn::ep: return c.ep;
            case PlanColumn::etp: return c.etp > 0 ? c.etp : c.tp;  // etp
            case PlanColumn::vpp: return c.vpp;
            case PlanColumn::micro_batch: return c.micro_batch;
            case PlanColumn::zero: return c.distributed_optimizer ? 0.5 : c.zero;  // 0, dist-opt, 1, 2, 3
            case PlanColumn::recompute: return (double)c.recompute;                // none, selective, full
            case PlanColumn::sp: return c.sequence_parallel ? 1 : 0;
            case PlanColumn::order: return 0;  // compared as text below
        }
        return 0;
    };
    const bool asc = p.sort_ascending;
    // Ties keep the planner's order (best first) in either direction.
    std::stable_sort(p.view.begin(), p.view.end(), [&](int ia, int ib) {
        const PlanRow &a = p.rows[ia], &b = p.rows[ib];
        if (col == PlanColumn::order) {
            const int cmp = std::string_view(order_of(p.planned_job, a.entry.choice))
                                .compare(order_of(p.planned_job, b.entry.choice));
            return asc ? cmp < 0 : cmp > 0;
        }
        const double ka = key(a), kb = key(b);
        return asc ? ka < kb : ka > kb;
    });
}

void build_rows(PlannerState& p) {
    p.rows.clear();
    p.small_units = false;
    if (!p.result) return;
    const PlanResult& r = *p.result;
    double largest = 0;
    for (const PlanEntry& e : r.top) {
        p.rows.push_back({e, true, plan_rank_of(r, e.score.tokens_per_s), (int64_t)p.rows.size() + 1});
        largest = std::max(largest, e.score.peak_bytes);
    }
    for (const PlanEntry& e : r.unfit) {
        p.rows.push_back({e, false, 0, 0});
        largest = std::max(largest, e.score.peak_bytes);
    }
    p.small_units = !p.rows.empty() && largest < 0.5 * kGiB;
    rebuild_view(p);
}

void refresh_job_rank(StudioState& s) {
    PlannerState& p = s.planner;
    JobRank r;
    p.rank_revision = s.revision;
    p.rank_generation = p.result_generation;
    if (!p.result) {
        p.job_rank = r;
        return;
    }
    if (planner_stale(s)) {
        r.kind = JobRank::Kind::stale;
    } else if (!no_layout_message(s).empty()) {
        r.kind = JobRank::Kind::no_layout;
    } else if (!job_valid(s)) {
        r.kind = JobRank::Kind::invalid;
    } else if (s.job.world_size() != planned_world(p.planned_job, p.planned_settings)) {
        r.kind = JobRank::Kind::different_gpus;
    } else {
        // Score the job's layout exactly as the search scored its candidates.
        JobSpec planned = s.job;
        planned.cluster.hosts.clear();
        planned.estimate.headroom = p.result->headroom;  // planfw: the headroom the search left (plan_headroom)
        const EstimateContext ctx = make_estimate_context(planned);
        const LayoutScore sc = evaluate_layout(ctx, layout_choice_of(s.job), s.job.parallel.layers_per_stage, nullptr);
        r.peak_bytes = sc.peak_bytes;
        r.usable_bytes = sc.usable_bytes;
        r.tokens_per_s = sc.tokens_per_s;
        if (sc.fits && p.result->job_refused) {
            r.kind = JobRank::Kind::refused;  // the search's own check of this layout (not stale: the same job)
        } else if (sc.fits) {
            r.kind = JobRank::Kind::ranked;
            r.rank = plan_rank_of(*p.result, sc.tokens_per_s);
            r.of = p.result->feasible;
        } else {
            r.kind = JobRank::Kind::no_fit;
        }
    }
    if (r.kind != JobRank::Kind::stale && r.kind != JobRank::Kind::invalid && r.kind != JobRank::Kind::no_layout)
        for (int i = 0; i < (int)p.rows.size(); ++i)
            if (const RowMatch m = row_match(s.job, p.planned_job, p.rows[i]); m != RowMatch::none) {
                r.row = i;
                r.folded = m == RowMatch::folded;
                break;
            }
    p.job_rank = r;
}

std::string memory_text(const PlannerState& p, double bytes) {
    return p.small_units ? fmt("%.1f MiB", bytes / (kGiB / 1024)) : fmt("%.1f GiB", bytes / kGiB);
}

}  // namespace

// ---- Options ---------------------------------------------------------------------------

std::string planner_setting_error(const StudioState& s, std::string_view key) {
    const PlannerSettings& st = s.planner.settings;
    if (key == "top_k" && (st.top_k < 1 || st.top_k > 10000))
        return "top_k: got " + std::to_string(st.top_k) + "; allowed: 1 .. 10000";
    if (key == "headroom" && !st.job_headroom && !(st.headroom >= 0 && st.headroom <= 0.9))
        return "headroom: got " + fmt("%g%%", st.headroom * 100) + "; allowed: 0 .. 90%";
    if (key == "gpus" && st.gpus != 0) {
        const int gpn = s.job.cluster.gpus_per_node;
        if (st.gpus < 0 || st.gpus > (1 << 24) || gpn < 1 || st.gpus % gpn != 0)
            return "gpus: got " + std::to_string(st.gpus) + "; allowed: 0 (the job's " +
                   std::to_string(s.job.world_size()) + ") or a multiple of cluster.gpus_per_node (" +
                   std::to_string(gpn) + "), whole nodes";
    }
    return {};
}

const char* plan_column_label(PlanColumn c) {
    switch (c) {
        case PlanColumn::rank: return "#";
        case PlanColumn::tokens_per_s: return "tokens/s";
        case PlanColumn::mfu: return "MFU";
        case PlanColumn::step_s: return "step";
        case PlanColumn::peak: return "peak mem";
        case PlanColumn::headroom: return "headroom";
        case PlanColumn::tp: return "tp";
        case PlanColumn::pp: return "pp";
        case PlanColumn::dp: return "dp";
        case PlanColumn::cp: return "cp";
        case PlanColumn::ep: return "ep";
        case PlanColumn::etp: return "etp";
        case PlanColumn::vpp: return "vpp";
        case PlanColumn::micro_batch: return "mb";
        case PlanColumn::zero: return "zero";
        case PlanColumn::recompute: return "recompute";
        case PlanColumn::sp: return "SP";
        case PlanColumn::order: return "order";
    }
    return "?";
}

const char* plan_column_help(PlanColumn c) {
    switch (c) {
        case PlanColumn::rank: return "Place in the list, best first, as ptd plan numbers its rows (a row's tooltip gives its rank among all fitting layouts)";
        case PlanColumn::tokens_per_s: return "Predicted training throughput of the whole job";
        case PlanColumn::mfu: return "Model FLOPs utilisation: model FLOPs / step time / (GPUs x peak)";
        case PlanColumn::step_s: return "Predicted time of one training step (iteration)";
        case PlanColumn::peak: return "Predicted peak memory of the most loaded GPU";
        case PlanColumn::headroom: return "Usable memory left on the most loaded GPU (negative: does not fit)";
        case PlanColumn::tp: return "Tensor parallel degree";
        case PlanColumn::pp: return "Pipeline parallel stages";
        case PlanColumn::dp: return "Data parallel replicas";
        case PlanColumn::cp: return "Context parallel degree: each sequence split over cp ranks (ring attention)";
        case PlanColumn::ep: return "Expert parallel degree (MoE models)";
        case PlanColumn::etp:
            return "Expert tensor parallel degree (MoE models): the experts split this many ways, tp unless the "
                   "layout folds them (Megatron --expert-tensor-parallel-size)";
        case PlanColumn::vpp:
            return "Virtual pipeline chunks per stage (interleaved 1F1B); \"+\": the same layout also runs at other depths, "
                   "folded into this row (hover it for them)";
        case PlanColumn::micro_batch: return "Micro-batch size (sequences per replica per micro-step)";
        case PlanColumn::zero: return "ZeRO stage, or dopt = Megatron's distributed optimizer; rN = N replicas of the sharded states (HSDP); "
                   "\"+\": the same layout also runs at other replica counts, folded into this row (hover it for them)";
        case PlanColumn::recompute: return "Activation recomputation";
        case PlanColumn::sp: return "Megatron sequence parallelism";
        case PlanColumn::order: return "Rank order, fastest-varying first";
    }
    return "";
}

std::string group_thousands(int64_t v) {
    std::string digits = std::to_string(v < 0 ? -v : v), out;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
        out += digits[i];
    }
    return v < 0 ? "-" + out : out;
}

std::string plan_cell_text(const StudioState& s, const PlanRow& row, PlanColumn c) {
    const LayoutChoice& ch = row.entry.choice;
    const LayoutScore& sc = row.entry.score;
    switch (c) {
        case PlanColumn::rank: return row.fits ? group_thousands(row.number) : "-";
        case PlanColumn::tokens_per_s: return group_thousands(std::llround(sc.tokens_per_s));
        case PlanColumn::mfu: return fmt("%.1f%%", sc.mfu * 100);
        case PlanColumn::step_s: return fmt(sc.step_s < 10 ? "%.3f s" : "%.1f s", sc.step_s);
        case PlanColumn::peak: return memory_text(s.planner, sc.peak_bytes);
        case PlanColumn::headroom: return memory_text(s.planner, sc.usable_bytes - sc.peak_bytes);
        case PlanColumn::tp: return std::to_string(ch.tp);
        case PlanColumn::pp: return std::to_string(ch.pp);
        case PlanColumn::dp: return std::to_string(ch.dp);
        case PlanColumn::cp: return std::to_string(ch.cp);
        case PlanColumn::ep: return std::to_string(ch.ep);
        case PlanColumn::etp:  // etp: "-" for a dense model, which has no experts to split
            return s.planner.planned_job.model.experts > 1 ? std::to_string(ch.etp > 0 ? ch.etp : ch.tp) : "-";
        case PlanColumn::vpp: {  // fold: "16+" when the row also stands for other depths of its layout
            bool depths = false;
            for (const FoldedVariant& v : row.entry.folded) depths |= v.vpp != ch.vpp;
            return std::to_string(ch.vpp) + (depths ? "+" : "");
        }
        case PlanColumn::micro_batch: return std::to_string(ch.micro_batch);
        case PlanColumn::zero: {  // hsdp: "3 r16" for 16 replicas of the sharded states, fold: "+"
            bool replicas = false;  // when the row also stands for other replica counts
            for (const FoldedVariant& v : row.entry.folded) replicas |= v.dp_replicate != ch.dp_replicate;
            return (ch.distributed_optimizer ? std::string("dopt") : std::to_string(ch.zero)) +
                   (ch.dp_replicate > 1 ? " r" + std::to_string(ch.dp_replicate) : "") + (replicas ? "+" : "");
        }
        case PlanColumn::recompute: return to_string(ch.recompute);
        case PlanColumn::sp: return ch.sequence_parallel ? "on" : "off";
        case PlanColumn::order: return order_of(s.planner.planned_job, ch);
    }
    return {};
}

// ---- Running ---------------------------------------------------------------------------

std::string planner_blocker(const StudioState& s) {
    for (const char* key : {"top_k", "headroom", "gpus"})
        if (std::string e = planner_setting_error(s, key); !e.empty()) return e;
    for (const Diagnostic& d : s.diagnostics) {
        const std::string_view k = d.key;
        if (k.starts_with("model") || k.starts_with("cluster") || k.starts_with("estimate") || k == "parallel.cp")
            return "fix " + d.key + " in the job panel first: " + d.message;
    }
    if (!s.job.has_layout() && s.job.training.global_batch < 1)
        return "the job gives no global batch and no layout to derive one from: set training.global_batch "
               "(sequences per step) in the job panel";
    if (!s.job.origin.global_batch_given && !s.job.origin.dp_given && !field_error(s, "parallel.dp").empty())
        return "the global batch is derived from dp, which cannot be derived (" + field_error(s, "parallel.dp") +
               "): fix tp / pp / cp, or give training.global_batch (untick auto)";
    return {};
}

bool planner_start(StudioState& s) {
    PlannerState& p = s.planner;
    if (p.worker) {
        p.worker->cancel();
        p.retired.push_back(std::move(p.worker));
    }
    p.error = planner_blocker(s);
    if (!p.error.empty()) {
        p.status = PlannerStatus::failed;
        return false;
    }
    p.worker = std::make_shared<PlannerWorker>(s.job, p.settings, options_of(p.settings));
    p.status = PlannerStatus::running;
    p.evaluated = p.total = 0;
    p.started_s = now_s();
    ++p.starts;
    return true;
}

bool planner_autostart(StudioState& s) {
    if (s.planner.status != PlannerStatus::never_run || !planner_blocker(s).empty()) return false;
    return planner_start(s);
}

void planner_cancel(StudioState& s) {
    if (s.planner.worker) s.planner.worker->cancel();
}

bool planner_tick(StudioState& s) {
    PlannerState& p = s.planner;
    bool changed = false;
    // A retired worker has been cancelled; once it says it is done, joining is immediate.
    std::erase_if(p.retired, [](const std::shared_ptr<PlannerWorker>& w) { return w->finished(); });
    if (p.worker) {
        PlannerWorker::Snapshot snap = p.worker->take();
        if (snap.evaluated != p.evaluated || snap.total != p.total) {
            p.evaluated = snap.evaluated;
            p.total = snap.total;
            changed = true;
        }
        if (snap.finished) {
            if (!snap.result) {
                p.status = PlannerStatus::cancelled;  // before it began: the last result stays
            } else if (!*snap.result) {
                p.status = PlannerStatus::failed;
                p.error.clear();
                for (const Diagnostic& d : snap.result->error().diagnostics)
                    p.error += (p.error.empty() ? "" : "\n") + (d.key.empty() ? "" : d.key + ": ") + d.message;
            } else {
                p.result = std::move(**snap.result);
                p.planned_job = p.worker->job;
                p.planned_settings = p.worker->settings;
                p.status = p.result->cancelled ? PlannerStatus::cancelled : PlannerStatus::done;
                p.error.clear();
                ++p.result_generation;
                build_rows(p);
            }
            p.worker.reset();
            changed = true;
        }
    }
    if (p.rank_revision != s.revision || p.rank_generation != p.result_generation) {
        refresh_job_rank(s);
        changed = true;
    }
    return changed;
}

bool planner_running(const StudioState& s) { return s.planner.worker || !s.planner.retired.empty(); }

bool planner_wait(StudioState& s, double timeout_s) {
    const double end = now_s() + timeout_s;
    for (;;) {
        planner_tick(s);
        if (!planner_running(s)) return true;
        if (now_s() > end) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

bool planner_stale(const StudioState& s) {
    const PlannerState& p = s.planner;
    if (!p.result) return false;
    return p.settings != p.planned_settings || plan_inputs_differ(s.job, p.planned_job, p.planned_settings.gpus > 0);
}

// ---- Table operations ------------------------------------------------------------------

void planner_set_fits_only(StudioState& s, bool fits_only) {
    s.planner.fits_only = fits_only;
    rebuild_view(s.planner);
}

void planner_sort(StudioState& s, PlanColumn column, bool ascending) {
    s.planner.sort_column = column;
    s.planner.sort_ascending = ascending;
    rebuild_view(s.planner);
}

std::optional<JobSpec> planner_row_job(const StudioState& s, int row) {
    const PlannerState& p = s.planner;
    if (row < 0 || row >= (int)p.rows.size() || !p.result || planner_stale(s)) return std::nullopt;
    const PlanRow& r = p.rows[(size_t)row];
    JobSpec job = apply_plan_entry(s.job, r.entry);
    job.parallel.order = order_of(p.planned_job, r.entry.choice);
    const int world = planned_world(p.planned_job, p.planned_settings), gpn = job.cluster.gpus_per_node;
    if (world != job.world_size() && gpn > 0) job.cluster.nodes = world / gpn;
    return job;
}

bool planner_apply_row(StudioState& s, int row) {
    std::optional<JobSpec> job = planner_row_job(s, row);
    if (!job) return false;
    s.job = std::move(*job);
    recompute(s);
    return true;
}

bool planner_row_is_job(const StudioState& s, int row) {
    const PlannerState& p = s.planner;
    return row >= 0 && row < (int)p.rows.size() && row_match(s.job, p.planned_job, p.rows[(size_t)row]) != RowMatch::none;
}

// ---- Text ------------------------------------------------------------------------------

std::string job_rank_text(const StudioState& s) {
    const JobRank& r = s.planner.job_rank;
    const int world = planned_world(s.planner.planned_job, s.planner.planned_settings);
    switch (r.kind) {
        case JobRank::Kind::none: return {};
        case JobRank::Kind::stale: return "the job changed since this search: re-run to rank it";
        case JobRank::Kind::invalid: return "your job has problems (in red in the job panel): no layout to rank";
        case JobRank::Kind::no_layout: return "your job has no layout yet: click a row to apply one";
        case JobRank::Kind::different_gpus:
            return "your job uses " + std::to_string(s.job.world_size()) + " GPUs; this search was for " +
                   std::to_string(world);
        case JobRank::Kind::no_fit:
            return "your job does not fit: peak " + memory_text(s.planner, r.peak_bytes) + " per GPU, " +
                   memory_text(s.planner, r.usable_bytes) + " usable";
        case JobRank::Kind::refused:
            return "your job fits, but " + job_refusal_text(*s.planner.result);
        case JobRank::Kind::ranked: {
            std::string t = "your job ranks #" + group_thousands(r.rank) + " of " + group_thousands(r.of) +
                            " fitting layout" + (r.of == 1 ? "" : "s");
            if (s.planner.result && s.planner.result->cancelled) t += " (of those searched before the cancel)";
            return t;
        }
    }
    return {};
}

std::string job_row_note(const StudioState& s) {
    const JobRank& r = s.planner.job_rank;
    const bool placed = r.kind == JobRank::Kind::ranked || r.kind == JobRank::Kind::no_fit;
    if (placed && r.row >= 0 && r.row < (int)s.planner.rows.size()) {
        if (!r.folded) return " (highlighted below)";
        const LayoutChoice& c = s.planner.rows[(size_t)r.row].entry.choice;
        const ParallelSpec& p = s.job.parallel;
        std::string at;
        if (p.vpp != c.vpp) at += "vpp " + std::to_string(p.vpp);
        if (std::max(1, p.dp_replicate) != c.dp_replicate)
            at += (at.empty() ? "" : ", ") + std::string("dp_replicate ") + std::to_string(std::max(1, p.dp_replicate));
        const int64_t number = s.planner.rows[(size_t)r.row].number;  // 0: a row that does not fit
        return " (highlighted below: folded into " + (number > 0 ? "row " + std::to_string(number) : std::string("that row")) +
               ", listed at its fastest; yours is its " + at + " variant)";
    }
    if (r.kind == JobRank::Kind::ranked) return " (not among the rows listed)";
    return {};
}

std::string planner_progress_text(const StudioState& s) {
    const PlannerState& p = s.planner;
    if (!p.worker) return {};
    if (p.total <= 0) return "counting layouts...";
    return "evaluated " + group_thousands(p.evaluated) + " of about " + group_thousands(p.total) + " layouts";
}

std::string planner_summary_text(const StudioState& s) {
    const PlannerState& p = s.planner;
    if (!p.result) return {};
    const PlanResult& r = *p.result;
    std::string t = "searched " + group_thousands(r.enumerated) + " layouts, evaluated " + group_thousands(r.evaluated) +
                    ", " + group_thousands(r.feasible) + " fit, in " + fmt("%.2f s", r.seconds);
    if (r.cancelled) t += " (cancelled: partial results)";
    return t;
}

std::string planner_bounds_text(const StudioState& s) {
    const PlannerState& p = s.planner;
    if (!p.result) return {};
    const PlanResult& r = *p.result;
    std::string t;
    if (r.any_framework) {
        t = "the layouts any framework runs (any framework)";
    } else {
        const FrameworkRules& rules = framework_rules(r.framework, r.framework_version);
        t = std::string("framework ") + to_string(r.framework) + " (" + rules.runs + "): " + rules.lacks;
        if (r.refused > 0) t += "; " + group_thousands(r.refused) + " layouts its export refuses left out";
    }
    return t + fmt("; headroom %.0f%% (", r.headroom * 100) + r.headroom_source + ")";
}

}  // namespace ptd::studio
