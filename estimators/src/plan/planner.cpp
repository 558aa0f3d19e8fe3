// planner.cpp — exhaustive layout search with safe pruning. Every valid (tp, cp, pp, dp, ep,
// vpp, micro_batch, zero, recompute, sequence_parallel, order) of the job's model on the
// world size is scored by evaluate_layout; fitting layouts are ranked by tokens/s in a
// bounded top-k heap and an incremental Pareto set (throughput vs headroom), so memory
// stays small however large the search. Pruning relies only on the estimator's proven
// monotonicity (peak memory grows with micro_batch, and none ≥ selective ≥ full
// recompute), so it never drops a layout that fits. The step time comes from a simulation
// of the pipeline schedule, too costly for every layout: a screening pass bounds it, and
// only layouts whose place the bounds leave open are simulated (branch and bound), so
// the answers equal simulating all. The screening pass runs on every hardware thread, one
// (tp, cp, pp) group at a time per thread, its results put back in enumeration order, so the
// plan does not depend on the thread count. A listed row stands for its layout at every
// interleaving depth and TP-overlap setting (fold). The search is bounded by what the job's framework runs
// (framework_rules: its sharding, offload, dimensions, overlap keys), and every layout it
// lists or compares passes that framework's export (planfw). docs/planner.md explains it.
#include "ptd/plan/planner.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ptd/layout/layout.h"
#include "ptd/model/speed_interval.h"
#include "ptd/spec/stack_defaults.h"
#include "ptd/spec/pipeline_layout.h"

namespace ptd {

// ---- Frameworks (planfw) ----------------------------------------------------------------
// What each framework's version that PTD exports to runs (export.cpp names the versions;
// docs/planner.md "Frameworks" gives the sources).

// One framework's rules: its name, what it runs, its export format (none: has_format false).
static FrameworkRules rules_for(Framework f, const char* runs, const ExportFormat* format) {
    FrameworkRules r;
    r.framework = f, r.runs = runs;
    r.has_format = format != nullptr;
    if (format) r.format = *format;
    return r;
}

const FrameworkRules& framework_rules(Framework f, int framework_version) {
    static const ExportFormat kMegatronArgs = ExportFormat::megatron, kDsConfig = ExportFormat::deepspeed,
                              kTitanConfig = ExportFormat::torchtitan, kTitanToml = ExportFormat::torchtitan_toml,
                              kBridgeScript = ExportFormat::nemo;
    // ZeRO-1 is its distributed optimizer (--use-distributed-optimizer, Megatron's own
    // buckets); it has no ZeRO-2/3; --optimizer-cpu-offload needs the distributed optimizer.
    static const FrameworkRules kMegatron = [] {
        FrameworkRules r = rules_for(Framework::megatron, "Megatron-LM main d98e8a6", &kMegatronArgs);
        r.distributed_optimizer = r.offload_optimizer = true;
        r.lacks = "no ZeRO-2/3 (ZeRO-1 is its distributed optimizer), no parameter offload";
        return r;
    }();
    // NeMo 2 / Megatron-Bridge run Megatron-Core: Megatron's rules, written as a Bridge script.
    static const FrameworkRules kNemo = [] {
        FrameworkRules r = kMegatron;
        r.framework = Framework::nemo;
        r.runs = "NeMo 2 / Megatron-Bridge on Megatron-Core";
        r.format = kBridgeScript;
        return r;
    }();
    // Its pipeline engine runs ZeRO 0 or 1 only (zero2_with_pp false); ZeRO-Offload (stage ≥ 1),
    // offload_param (stage 3); Ulysses is another algorithm than ring context parallelism;
    // DeepSpeed-MoE splits experts over ep only; no interleaved schedule; ZeRO-1/2 gather the
    // updated parameters after the step; TP overlap is model code, not ds_config.
    static const FrameworkRules kDeepSpeed = [] {
        FrameworkRules r = rules_for(Framework::deepspeed, "DeepSpeed master edaa722, Megatron-DeepSpeed", &kDsConfig);
        r.zero1 = r.zero2 = r.zero3 = r.offload_optimizer = r.offload_all = true;
        r.cp = r.expert_tp = r.vpp = r.overlap_param_gather = r.tp_comm_overlap = false;
        r.lacks = "no context parallelism, no interleaved schedule (vpp), no expert TP, ZeRO-2/3 only without pipeline";
        return r;
    }();
    // Data-parallel ranks shard with FSDP2 (reshard after forward ≈ ZeRO-3, never ≈ ZeRO-2;
    // under pipelining both gather once per step and reduce after the last micro-batch:
    // effective_sharding, ttfsdp); DDP (replicate) only for pure data parallelism;
    // enable_cpu_offload moves parameters, gradients and optimizer state together; op-level SAC
    // is recompute_style "torchtitan-op" (allowed then); its TP overlap is async TP
    // (parallel.async_tp), left as the job says.
    static const FrameworkRules kTorchtitan = [] {
        FrameworkRules r = rules_for(Framework::torchtitan, "torchtitan main b5bcd76", &kTitanConfig);
        r.zero0_pure_dp_only = r.zero2 = r.zero2_with_pp = r.zero3 = r.zero3_with_pp = r.offload_all = true;
        r.selective_recompute = r.tp_comm_overlap = false;
        r.lacks = "no ZeRO-1 or distributed optimizer (FSDP2 shards like ZeRO-2/3), offload only of everything, "
                  "no Megatron-style selective recompute";
        return r;
    }();
    // A torchtitan dated before the Python config system (9810191, 2026-02-23) read TOML files.
    static const FrameworkRules kTorchtitanToml = [] {
        FrameworkRules r = kTorchtitan;
        r.runs = "torchtitan v0.2.x and before, TOML configs";
        r.format = kTitanToml;
        return r;
    }();
    constexpr int kTitanPythonConfigsFrom = 202603;  // the first whole month of them
    // FSDP's sharding strategies: NO_SHARD / DDP (zero 0), SHARD_GRAD_OP (2), FULL_SHARD (3);
    // CPUOffload(offload_params=True) moves parameters, gradients and the step;
    // checkpoint_wrapper wraps whole layers. No export of its own.
    static const FrameworkRules kFsdp = [] {
        FrameworkRules r = rules_for(Framework::pytorch_fsdp, "PyTorch FSDP: HF accelerate, Lightning", nullptr);
        r.zero2 = r.zero3 = r.offload_all = true;
        r.tp = r.pp = r.cp = r.ep = r.expert_tp = r.vpp = r.sequence_parallel = false;
        r.selective_recompute = r.tp_comm_overlap = false;
        r.lacks = "data parallelism only (no tensor, pipeline, context or expert parallelism), whole-layer recompute";
        return r;
    }();
    // llm-foundry trains on Composer's PyTorch FSDP (fsdp_config: the same sharding strategies,
    // activation_checkpointing of whole blocks): FSDP's rules.
    static const FrameworkRules kLlmFoundry = [] {
        FrameworkRules r = kFsdp;
        r.framework = Framework::llm_foundry;
        r.runs = "Composer's PyTorch FSDP";
        return r;
    }();
    switch (f) {
        case Framework::megatron: return kMegatron;
        case Framework::nemo: return kNemo;
        case Framework::deepspeed: return kDeepSpeed;
        case Framework::torchtitan:
            return framework_version > 0 && framework_version < kTitanPythonConfigsFrom ? kTorchtitanToml : kTorchtitan;
        case Framework::pytorch_fsdp: return kFsdp;
        case Framework::llm_foundry: return kLlmFoundry;
    }
    return kMegatron;
}

const FrameworkRules& any_framework_rules() {
    static const FrameworkRules kAny = [] {
        FrameworkRules r;
        r.runs = "any framework";
        r.has_format = false;
        r.zero1 = r.zero2 = r.zero2_with_pp = r.zero3 = r.zero3_with_pp = r.distributed_optimizer = true;
        r.offload_optimizer = r.offload_all = true;
        r.lacks = "";
        return r;
    }();
    return kAny;
}

FrameworkRules search_rules(const JobSpec& job, const PlanOptions& options) {
    FrameworkRules r = options.any_framework ? any_framework_rules()
                                             : framework_rules(job.training.framework, job.training.framework_version);
    if (job.estimate.activation_profile == ActivationProfile::ptd_engine) r.zero1 = true;  // the engine's ZeRO-1
    return r;
}

bool rules_allow(const FrameworkRules& r, const LayoutChoice& c, const JobSpec& job) {
    const int etp = c.etp > 0 ? c.etp : c.tp;
    if ((!r.tp && c.tp > 1) || (!r.pp && c.pp > 1) || (!r.cp && c.cp > 1) || (!r.ep && c.ep > 1) ||
        (!r.expert_tp && etp != c.tp) || (!r.vpp && c.vpp > 1) || (!r.sequence_parallel && c.sequence_parallel))
        return false;
    if (!r.selective_recompute && c.recompute == Recompute::selective &&
        !(r.framework == Framework::torchtitan && job.parallel.recompute_style == RecomputeStyle::torchtitan_op))
        return false;
    const bool pure_dp = c.tp == 1 && c.pp == 1 && c.cp == 1 && c.ep == 1;
    if (c.distributed_optimizer) {
        if (!r.distributed_optimizer || c.zero != 0) return false;
    } else if (c.zero == 0) {
        if (!r.zero0 || (r.zero0_pure_dp_only && !pure_dp && c.dp * c.cp > 1)) return false;
    } else if (c.zero == 1) {
        if (!r.zero1) return false;
    } else if (c.zero == 2) {
        if (!r.zero2 || (c.pp > 1 && !r.zero2_with_pp)) return false;
    } else if (!r.zero3 || (c.pp > 1 && !r.zero3_with_pp)) {
        return false;
    }
    const bool opt = c.offload_optimizer != OffloadDevice::none;
    if (c.offload_params) return r.offload_all && opt && c.zero == 3;
    if (opt) return r.offload_optimizer && (c.zero >= 1 || c.distributed_optimizer);
    return true;
}

bool framework_runs(Framework f, const JobSpec& job, const PlanEntry& entry) {
    const FrameworkRules& r = framework_rules(f, job.training.framework_version);
    if (!rules_allow(r, entry.choice, job)) return false;
    if (!r.has_format) return true;
    JobSpec framed = apply_plan_entry(job, entry);
    framed.training.framework = f;
    return export_job(framed, r.format).has_value();
}

// planfw: "grad+param+tp", the overlap keys a layout runs with ("none" without).
std::string overlap_words(const LayoutChoice& c) {
    std::string s;
    if (c.overlap_grad_reduce) s += "grad";
    if (c.overlap_param_gather) s += s.empty() ? "param" : "+param";
    if (c.tp_comm_overlap) s += s.empty() ? "tp" : "+tp";
    return s.empty() ? "none" : s;
}

double default_headroom(Framework f) {
    // docs/planner.md "Headroom": the memory model's median error against measured runs is
    // 4.0% (bench_memory, 20 runs); Megatron-core allocates parameters and gradients in
    // contiguous buffers, so its caching allocator fragments least; ZeRO's and FSDP's
    // per-module gathers and reduce-scatters allocate and free shard-sized buffers every
    // micro-batch, and fragment more than estimate.fragmentation's 5% average.
    switch (f) {
        case Framework::megatron:
        case Framework::nemo: return 0.05;
        case Framework::deepspeed: return 0.10;
        case Framework::torchtitan: return 0.10;
        case Framework::pytorch_fsdp:
        case Framework::llm_foundry: return 0.10;
    }
    return 0.10;
}

double plan_headroom(const JobSpec& job, const PlanOptions& options, std::string* source) {
    if (options.headroom >= 0) {
        if (source) *source = "--headroom";
        return options.headroom;
    }
    if (job.origin.headroom_given) {
        if (source) *source = "estimate.headroom";
        return job.estimate.headroom;
    }
    if (source) *source = std::string(to_string(job.training.framework)) + "'s default";
    return default_headroom(job.training.framework);
}

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// An export refusal as one clause: its first problem's key and message, without the file
// position (the plan names the layout, not a line of the job).
std::string export_refusal_reason(const Error& e) {
    if (e.diagnostics.empty()) return "refused";
    const Diagnostic& d = e.diagnostics.front();
    return d.key.empty() ? d.message : d.key + ": " + d.message;
}

// Layout `entry` of `planned` in `format`, as the plan checks it: ZB-H1 / DualPipe were asked
// for (--zb-h1, --dualpipe, the job's schedule) knowing their forks run them, so the rest of
// the layout must export.
Result<ExportOutput> export_layout(const JobSpec& planned, const PlanEntry& entry, ExportFormat format) {
    JobSpec applied = apply_plan_entry(planned, entry);
    if (entry.choice.schedule == PipelineSchedule::zb_h1 || entry.choice.schedule == PipelineSchedule::dualpipe)
        applied.parallel.schedule = PipelineSchedule::automatic;
    return export_job(applied, format);
}

double headroom_of(const LayoutScore& s) { return s.usable_bytes - s.peak_bytes; }

// etp: the experts' tensor-parallel size a choice runs with (its etp 0 means tp).
int effective_etp(const LayoutChoice& c) { return c.etp > 0 ? c.etp : c.tp; }

}  // namespace

bool same_choice(const LayoutChoice& a, const LayoutChoice& b) {
    return a.tp == b.tp && a.pp == b.pp && a.dp == b.dp && a.cp == b.cp && a.ep == b.ep && a.vpp == b.vpp &&
           a.micro_batch == b.micro_batch && a.zero == b.zero && a.distributed_optimizer == b.distributed_optimizer &&
           a.sequence_parallel == b.sequence_parallel && a.recompute == b.recompute && a.order == b.order &&
           a.offload_optimizer == b.offload_optimizer && a.offload_params == b.offload_params &&
           effective_schedule(a.schedule, a.vpp) == effective_schedule(b.schedule, b.vpp) &&  // zb: "1f1b" = auto at vpp 1
           effective_etp(a) == effective_etp(b) &&  // etp
           a.dp_replicate == b.dp_replicate;         // hsdp
}

// fold: 1F1B and the interleaved schedule are one family of depths (vpp 1 and vpp > 1), and
// a sharded layout's replica counts one family of sharding groups (hsdp: dp_replicate 1).
static LayoutChoice depth_free(LayoutChoice c) {
    const PipelineSchedule s = effective_schedule(c.schedule, c.vpp);
    if (s == PipelineSchedule::one_f_one_b || s == PipelineSchedule::interleaved) c.schedule = PipelineSchedule::automatic, c.vpp = 1;
    c.dp_replicate = 1;
    return c;
}

bool same_up_to_fold(const LayoutChoice& a, const LayoutChoice& b) {
    return a.overlap_grad_reduce == b.overlap_grad_reduce && a.overlap_param_gather == b.overlap_param_gather &&
           same_choice(depth_free(a), depth_free(b));
}

namespace {

// A fitting layout as the search keeps it. layers_per_stage is a function of pp, so it is
// rebuilt at the end instead of being copied into every candidate.
struct Candidate {
    LayoutChoice choice;
    LayoutScore score;
    int64_t seq = 0;  // enumeration index: the last tie-break, so results never depend on pruning
};

// The ranking order: faster first, then more headroom, then fewer GPUs per model replica,
// then enumeration order.
bool better(const Candidate& a, const Candidate& b) {
    if (a.score.tokens_per_s != b.score.tokens_per_s) return a.score.tokens_per_s > b.score.tokens_per_s;
    double ha = headroom_of(a.score), hb = headroom_of(b.score);
    if (ha != hb) return ha > hb;
    int ra = a.choice.tp * a.choice.pp, rb = b.choice.tp * b.choice.pp;
    if (ra != rb) return ra < rb;
    return a.seq < b.seq;
}

// a dominates b: at least as fast and as much headroom, and ahead in ranking order (so
// exact duplicates keep only their first and the front is independent of visiting order).
bool dominates(const Candidate& a, const Candidate& b) {
    return a.score.tokens_per_s >= b.score.tokens_per_s && headroom_of(a.score) >= headroom_of(b.score) && better(a, b);
}

// The best `n` candidates by `better`, without exact twins: layouts with the same predicted
// tokens/s and peak (rank orders that place no group differently, ...) would fill the list
// with copies, so only the first of them by ranking is kept. Ordered set + index by
// (tokens/s, peak): O(log n) per offer, so a caller may ask for every fitting layout.
class BestKept {
public:
    // fold: with `fold`, one entry per layout up to its depth and TP overlap (same_up_to_fold).
    BestKept(size_t n, bool fold) : n_(n), fold_(fold) {}
    // Returns true when `cand` was a twin of a kept candidate (kept or replacing it), or
    // (fold) a variant of a kept layout (kept as its row or among its folded variants).
    bool offer(const Candidate& cand) {
        if (n_ == 0) return false;
        const Key key = key_of(cand);
        const auto twin = by_key_.find(key);
        if (twin != by_key_.end() || (fold_ && folded_keys_.count(key))) {
            if (fold_) {
                // A twin of another layout's row or folded variant, and a variant of a row of
                // its own: folded into that row when no faster, else hidden as the twin.
                auto same = by_family_.find(family(cand.choice));
                if (same != by_family_.end() && (twin == by_key_.end() || same->second != twin->second)) {
                    if (!better(cand, *same->second)) add_folded(same->first, cand);
                    return true;
                }
            }
            if (twin != by_key_.end() && better(cand, *twin->second)) {
                const Candidate old = *twin->second;
                erase(twin->second);
                insert(cand);
                if (fold_ && family(old.choice) != family(cand.choice)) reelect(family(old.choice));
            }
            return true;  // (a twin of a folded variant, with no row of its own layout: hidden)
        }
        if (fold_) {
            if (auto same = by_family_.find(family(cand.choice)); same != by_family_.end()) {
                const Family f = same->first;
                if (better(cand, *same->second)) {
                    add_folded(f, *same->second);
                    erase(same->second);
                    insert(cand);
                } else {
                    add_folded(f, cand);
                }
                return true;
            }
        }
        if (kept_.size() >= n_) {
            auto worst = std::prev(kept_.end());
            if (!better(cand, *worst)) return false;
            if (fold_) take_folded(family(worst->choice));
            erase(worst);
        }
        insert(cand);
        return false;
    }
    std::vector<Candidate> sorted() const { return {kept_.begin(), kept_.end()}; }
    // fold: a kept candidate's folded variants, its own TP overlap first, then by ascending
    // vpp and replicas (empty without folding). When the list is full, only those as fast as its last row:
    // exactly the variants that rank among the listed speeds, whatever was folded before.
    std::vector<FoldedVariant> folded(const Candidate& kept) const {
        std::vector<FoldedVariant> out;
        if (auto f = folded_.find(family(kept.choice)); f != folded_.end())
            for (const Candidate& c : f->second)
                if (c.score.tokens_per_s >= entry_tokens_per_s())  // folded before the list filled up
                    out.push_back({c.choice.vpp, c.choice.tp_comm_overlap, c.score.tokens_per_s, c.score.peak_bytes,
                                   c.choice.dp_replicate});
        const bool own = kept.choice.tp_comm_overlap;
        std::sort(out.begin(), out.end(), [own](const FoldedVariant& a, const FoldedVariant& b) {
            if (a.tp_comm_overlap != b.tp_comm_overlap) return a.tp_comm_overlap == own;
            if (a.vpp != b.vpp) return a.vpp < b.vpp;
            return a.dp_replicate < b.dp_replicate;
        });
        return out;
    }
    // fold: every folded variant of every row (as folded() gives them).
    std::vector<Candidate> all_folded() const {
        std::vector<Candidate> out;
        for (const auto& [family, variants] : folded_)
            for (const Candidate& c : variants)
                if (c.score.tokens_per_s >= entry_tokens_per_s()) out.push_back(c);
        return out;
    }
    // The tokens/s a layout must reach to still enter (or tie into) the list; −∞ while it
    // has room, +∞ when it keeps nothing.
    double entry_tokens_per_s() const {
        if (n_ == 0) return std::numeric_limits<double>::infinity();
        return kept_.size() < n_ ? -std::numeric_limits<double>::infinity() : std::prev(kept_.end())->score.tokens_per_s;
    }

private:
    using Key = std::pair<double, double>;
    struct Better {
        bool operator()(const Candidate& a, const Candidate& b) const { return better(a, b); }
    };
    using Kept = std::set<Candidate, Better>;
    // fold: a layout up to its depth, TP overlap and replicas — every field same_up_to_fold
    // compares (depth_free leaves vpp 1 to every schedule the key names, and one replica).
    using Family = std::array<int, 15>;
    static Family family(const LayoutChoice& choice) {
        const LayoutChoice c = depth_free(choice);
        return {c.tp, c.pp, c.dp, c.cp, c.ep, c.micro_batch, c.zero, c.distributed_optimizer,
                c.sequence_parallel, (int)c.recompute, c.order, (int)c.offload_optimizer * 2 + c.offload_params,
                (int)c.schedule, effective_etp(c),
                c.overlap_grad_reduce * 2 + c.overlap_param_gather};
    }
    static Key key_of(const Candidate& c) { return {c.score.tokens_per_s, c.score.peak_bytes}; }
    void insert(const Candidate& c) {
        const Kept::iterator it = kept_.insert(c).first;
        by_key_.emplace(key_of(c), it);
        if (fold_) by_family_[family(c.choice)] = it;
    }
    void erase(Kept::iterator it) {
        by_key_.erase(key_of(*it));
        if (fold_) by_family_.erase(family(it->choice));
        kept_.erase(it);
    }
    // fold: folded variants by layout, and their numbers (a later twin of one is hidden).
    void add_folded(const Family& f, const Candidate& c) {
        folded_[f].push_back(c);
        folded_keys_.insert(key_of(c));
    }
    std::vector<Candidate> take_folded(const Family& f) {
        auto it = folded_.find(f);
        if (it == folded_.end()) return {};
        std::vector<Candidate> variants = std::move(it->second);
        folded_.erase(it);
        for (const Candidate& c : variants) folded_keys_.erase(folded_keys_.find(key_of(c)));
        return variants;
    }
    // fold: a twin of another layout took this layout's row: its fastest folded variant takes
    // the row back and the others fold into it again (each offered anew, best first).
    void reelect(const Family& f) {
        std::vector<Candidate> variants = take_folded(f);
        std::sort(variants.begin(), variants.end(), [](const Candidate& a, const Candidate& b) { return better(a, b); });
        for (const Candidate& c : variants) offer(c);
    }
    size_t n_;
    bool fold_;
    Kept kept_;
    std::map<Key, Kept::iterator> by_key_;
    std::map<Family, Kept::iterator> by_family_;
    std::map<Family, std::vector<Candidate>> folded_;
    std::multiset<Key> folded_keys_;
};

// Everything the enumeration needs, computed once per search.
struct Space {
    int world = 0, layers = 0, global_batch = 0, max_micro_batch = 1, seq_len = 0;
    int experts = 0, job_ep = 1;
    int job_etp = 0;  // moe2: parallel.expert_tp the job fixes (0 = tp: the search keeps etp = tp)
    bool vary_ep = true, vary_zero = true;
    // The bundled engine runs the job (estimate.activation_profile = "ptd-engine"): only what
    // it implements is searched — no context or expert parallelism, ZeRO 0 or 1 (no
    // distributed optimizer, no ZeRO-2/3, no offload).
    bool engine_only = false;
    bool try_zb_h1 = false, try_dualpipe = false;  // zb
    int job_zero = 0;
    bool job_distributed_optimizer = false;
    OffloadDevice job_offload_optimizer = OffloadDevice::none;  // offload, when zero is not varied
    bool job_offload_params = false;
    // hsdp: the job's parallel.dp_replicate (also tried where the stack allows it) and the GPUs of
    // a node: the search also tries each sharded layout with its states sharded inside a node
    // and replicated across nodes (torch FSDP's HYBRID_SHARD default, fms-fsdp's HSDP).
    int job_dp_replicate = 1, gpus_per_node = 1;
    // The dimensions of each kPlannerOrders entry, fastest first, and (last) the job's own order
    // (parse_rank_order, layout.h): where dp sits in a layout's rank order.
    std::array<std::array<Dim, DIM_COUNT>, kPlannerOrderCount + 1> order_dims{};
    std::vector<int> tps;               // valid tensor-parallel degrees
    std::vector<int> cps;               // context-parallel degrees (1 first)
    std::vector<Recompute> recomputes;  // ascending activation memory: full, selective, none
    std::vector<int> orders;            // indices into kPlannerOrders (or −1: the job's)
    std::vector<std::vector<int>> lps;  // layers_per_stage by pp (empty when pp divides layers)
    // Interleaved schedules on an uneven split: per model chunk, balanced over pp·vpp chunks
    // (the first and last chunks one layer short, as Llama 3 405B ran), by [pp][vpp].
    std::vector<std::vector<std::vector<int>>> chunk_lps;
    // bits: the job runs Megatron-LM's interleaved schedule (training.framework = "megatron":
    // Megatron-LM, NeMo, Megatron-Bridge), with the job's group size N (0 = pp).
    bool megatron_schedule = false;
    int job_mb_group = 0;
    // etp: the expert_tp values tried under each tp, by tp (0 = tp, listed first): {0} for a
    // dense model, {the job's} where it fixes expert_tp, else the divisors of tp. The model
    // for expert_layout_problems (job_spec.h), the rules validate_job applies.
    std::vector<std::vector<int>> etps;
    const ModelSpec* model = nullptr;
    // planfw: what the framework runs (rules_allow, applied to every layout visited) and the
    // overlap keys the planner sets: grad reduce and param gather on wherever they apply (in
    // the time model they only ever hide communication, overlap.cpp), tp_comm_overlap tried
    // both ways (its GEMMs run in pieces, which can cost more than it hides).
    FrameworkRules rules;
    const JobSpec* job = nullptr;
    bool set_overlap = true;  // false: the job's overlap keys (the bundled engine has none of them)
    bool job_overlap_grad_reduce = false, job_overlap_param_gather = false, job_tp_comm_overlap = false;
};

// planfw: the overlap keys a layout runs with (see Space::set_overlap).
void set_overlap_keys(const Space& sp, LayoutChoice& c) {
    if (!sp.set_overlap) {
        c.overlap_grad_reduce = sp.job_overlap_grad_reduce;
        c.overlap_param_gather = sp.job_overlap_param_gather && (c.zero >= 1 || c.distributed_optimizer);
        c.tp_comm_overlap = sp.job_tp_comm_overlap && c.sequence_parallel;
        return;
    }
    const bool replicas = (long long)c.dp * c.cp > 1;
    c.overlap_grad_reduce = sp.rules.overlap_grad_reduce && replicas;
    c.overlap_param_gather = sp.rules.overlap_param_gather && replicas && (c.zero >= 1 || c.distributed_optimizer) &&
                             (c.overlap_grad_reduce || c.zero == 3);
    c.tp_comm_overlap = false;  // tried both ways by for_each_layout
}
// Whether for_each_layout also tries the layout with tp_comm_overlap on.
bool try_tp_comm_overlap(const Space& sp, const LayoutChoice& c) {
    return sp.set_overlap && sp.rules.tp_comm_overlap && c.tp > 1 && c.sequence_parallel && !sp.job->parallel.async_tp;
}

// bits: the interleaved group size a layout is scored (estimate.cpp derive) and applied
// (apply_plan_entry) with: the job's N in Megatron's range [pp, max(pp, m)], 0 (= pp) when
// the job leaves it out or the layout does not interleave.
int plan_mb_group(int job_group, int pp, int vpp, long long microbatches) {
    return vpp < 2 ? 0 : (int)microbatch_group_in_range(job_group, pp, microbatches);
}

// planfw: rules_allow's sharding part, where the enumeration knows it (before recompute,
// micro-batch and the rest are looped over).
bool sharding_allowed(const FrameworkRules& r, int zero, bool dist_opt, int tp, int pp, int cp, int ep, int dp) {
    LayoutChoice c;
    c.tp = tp, c.pp = pp, c.cp = cp, c.ep = ep, c.dp = dp, c.zero = zero, c.distributed_optimizer = dist_opt;
    static const JobSpec kNone;  // rules_allow reads the job only for selective recompute, absent here
    return rules_allow(r, c, kNone);
}

// hsdp: data-parallel coordinates one node holds consecutively under rank order `order`
// (kPlannerOrders index, −1 the job's own): the node's ranks over the stride of dp, the product
// of the degrees the order lists before dp (ep lives inside dp).
long long dp_ranks_per_node(const Space& sp, int order, int tp, int cp, int pp, int dp) {
    const int degree[DIM_COUNT] = {tp, cp, dp, pp};  // indexed by Dim
    long long stride = 1;
    for (Dim d : sp.order_dims[order >= 0 && order < kPlannerOrderCount ? order : kPlannerOrderCount]) {
        if (d == DIM_DP) break;
        stride *= degree[d];
    }
    return stride >= sp.gpus_per_node || sp.gpus_per_node % stride != 0 ? 1 : std::min<long long>(dp, sp.gpus_per_node / stride);
}

// hsdp: the replica counts a sharded layout is tried with: 1, the job's parallel.dp_replicate,
// and those that shard the states over whole nodes' data-parallel ranks and replicate them
// across the rest — where the stack runs it (replicate_problem, job_spec.h) and the group
// keeps more than one rank: the ranks one node holds (dp_ranks_per_node), and under ZeRO 2 / 3
// also 2, 4, 8 … such nodes, up to half the data-parallel ranks. A group inside a node keeps
// the gathers on NVLink; ZeRO-3 shards the weights and gradients too, so the group's size
// decides whether a large model fits at all (a 70B model's 16 bytes per parameter need 32 or
// more ranks of 80 GB), and a larger group fits with its gathers leaving as few nodes as that
// allows. The distributed optimizer and ZeRO 1 shard the Adam states alone (12 bytes per
// parameter): past a node's group they gain little memory for a search twice as large, and
// are tried at the node's group only. Other group sizes are left to the job's own
// dp_replicate.
void replicate_options(const Space& sp, int order, int tp, int cp, int pp, int dp, int ep, int etp, int zero,
                       bool dist_opt, std::vector<int>& out) {
    out.assign(1, 1);
    if (sp.engine_only || (zero == 0 && !dist_opt)) return;
    auto add = [&](int r) {
        if (r > 1 && std::find(out.begin(), out.end(), r) == out.end() &&
            replicate_problem(*sp.model, sp.rules.framework, zero, dist_opt, tp, cp, dp, ep, etp, r).empty())
            out.push_back(r);
    };
    add(sp.job_dp_replicate);
    const long long node_group = dp_ranks_per_node(sp, order, tp, cp, pp, dp);
    for (long long group = node_group; group < dp && (zero >= 2 || group == node_group); group *= 2)
        if (group > 1 && dp % group == 0) add((int)(dp / group));
}

// The layers_per_stage the search passes for (pp, vpp): empty for an even split.
const std::vector<int>& layers_for(const Space& sp, int pp, int vpp) {
    if (vpp > 1 && pp < (int)sp.chunk_lps.size() && vpp < (int)sp.chunk_lps[pp].size() && !sp.chunk_lps[pp][vpp].empty())
        return sp.chunk_lps[pp][vpp];
    return sp.lps[pp];
}

// One (tp, cp, pp) of the space: every layout sharing them is visited together, and pruning
// never looks across groups, so groups can be searched apart (screen_layouts' threads) and
// their layouts put back in this order.
struct LayoutGroup {
    int tp = 1, cp = 1, pp = 1;
};

// The groups of the space in visiting order: the (tp, cp, pp) whose replicas divide the world
// and whose data-parallel degree divides the global batch.
std::vector<LayoutGroup> layout_groups(const Space& sp) {
    std::vector<LayoutGroup> groups;
    for (int tp : sp.tps)
        for (int cp : sp.cps) {
            if (sp.world % ((long long)tp * cp) != 0) continue;
            for (int pp = 1; pp <= (sp.rules.pp ? sp.layers : 1); ++pp) {  // planfw
                const long long replica = (long long)tp * pp * cp;
                if (sp.world % replica != 0 || sp.global_batch % (sp.world / replica) != 0) continue;
                groups.push_back({tp, cp, pp});
            }
        }
    return groups;
}

// Visit every layout of one group in a fixed order. visit(choice, lps, pruned) returns
// 1 when the layout fits, 0 when not, −1 to stop; it is called for pruned layouts too
// (pruned = true, no evaluation expected) so that counting and job lookup see them.
// Returns false when stopped.
template <class Visit>
bool for_each_layout_in(const Space& sp, const LayoutGroup& g, bool prune, Visit&& visit) {
    // planfw: a layout, then (where it fits and the framework has it) the same with
    // tp_comm_overlap on: memory is the same, only the time differs.
    auto visit_overlap = [&](const LayoutChoice& c, const std::vector<int>& lps, bool pruned) {
        const int fit = visit(c, lps, pruned);
        if (fit == 1 && try_tp_comm_overlap(sp, c)) {
            LayoutChoice o = c;
            o.tp_comm_overlap = true;
            if (visit(o, lps, false) < 0) return -1;
        }
        return fit;
    };
    std::vector<int> mbs, vpps, eps, reps;  // per group; no allocation in the inner loops
    mbs.reserve(64), vpps.reserve(16), eps.reserve(16), reps.reserve(16);
    const int nr = (int)sp.recomputes.size();
    const int tp = g.tp, cp = g.cp, pp = g.pp;
    // Sequence parallelism splits each context-parallel rank's s / cp tokens over tp.
    const bool sp_ok = tp > 1 && sp.seq_len % cp == 0 && (sp.seq_len / cp) % tp == 0;
    const int dp = (int)(sp.world / ((long long)tp * pp * cp));
    const int per_replica = sp.global_batch / dp;
    micro_batch_candidates(per_replica, sp.max_micro_batch, mbs);
    vpps.assign(1, 1);
    if (!sp.rules.vpp) {
        // planfw: one model chunk per stage (DeepSpeed's pipeline engine)
    } else if (pp > 1 && !sp.chunk_lps[pp].empty()) {
        // An uneven pp, or torchtitan's own splits (ttsplit): every depth with a split.
        for (int v = 2; v < (int)sp.chunk_lps[pp].size(); ++v)
            if (!sp.chunk_lps[pp][(size_t)v].empty()) vpps.push_back(v);
    } else if (pp > 1 && sp.layers % pp == 0) {
        for (int v = 2; v <= sp.layers / pp; ++v)
            if ((sp.layers / pp) % v == 0) vpps.push_back(v);
    }
    for (int etp : sp.etps[tp]) {  // etp: one pass for a dense model or a fixed expert_tp
    eps.clear();
    bool default_order_only = false;  // moe2: folding (expert_tp ≠ tp) needs the default order
    if (sp.experts < 2) {
        eps.push_back(1);
    } else {
        // moe2 / etp: ep divides experts and dp·cp, or with expert_tp ≠ tp the expert groups
        // fold tp·cp·dp (ep·expert_tp divides it) — validate_job's rules, called here.
        auto ep_ok = [&](int e) {
            return (expert_layout_problems(*sp.model, tp, cp, dp, e, etp, true) & ~kEtpOrder) == 0;
        };
        if (!sp.vary_ep) {
            if (ep_ok(sp.job_ep)) eps.push_back(sp.job_ep);
        } else {
            for (int e = 1; e <= sp.experts; ++e)
                if (ep_ok(e)) eps.push_back(e);
        }
        default_order_only = (expert_layout_problems(*sp.model, tp, cp, dp, 1, etp, false) & kEtpOrder) != 0;
    }
    for (int seq_par = 0; seq_par <= (sp_ok && sp.rules.sequence_parallel ? 1 : 0); ++seq_par)
        for (int ep : eps)
            for (int z = 0; z < (sp.vary_zero ? 5 : 1); ++z) {
                // zero 0, distributed optimizer, zero 1, 2, 3 (2/3 only without pipeline).
                int zero = sp.vary_zero ? (z < 2 ? 0 : z - 1) : sp.job_zero;
                bool dist_opt = sp.vary_zero ? z == 1 : sp.job_distributed_optimizer;
                // ttfsdp: zero 3 with pp only as the job's own (torchtitan: zero 2's FSDP2, visited as 2).
                if (zero == 3 && pp > 1 && (sp.vary_zero || !sp.rules.zero3_with_pp)) continue;
                if (zero == 2 && pp > 1 && !sp.rules.zero2_with_pp) continue;
                if (sp.engine_only && (zero >= 2 || dist_opt)) continue;
                if (sp.vary_zero && !sharding_allowed(sp.rules, zero, dist_opt, tp, pp, cp, ep, dp)) continue;  // planfw
                for (int order : sp.orders) {
                    if (default_order_only && order != 0) continue;  // moe2: kPlannerOrders[0] is the default order
                    replicate_options(sp, order, tp, cp, pp, dp, ep, etp, zero, dist_opt, reps);
                    for (int rep : reps)
                    for (int vpp : vpps)
                    for (PipelineSchedule sched : {PipelineSchedule::automatic, PipelineSchedule::zb_h1, PipelineSchedule::dualpipe}) {
                        // zb: ZB-H1 and DualPipe run one chunk per stage, where allowed;
                        // DualPipe on an even pp and an even split.
                        if (sched != PipelineSchedule::automatic && (pp < 2 || vpp > 1)) continue;
                        if (sched == PipelineSchedule::zb_h1 && !sp.try_zb_h1) continue;
                        if (sched == PipelineSchedule::dualpipe && (!sp.try_dualpipe || pp % 2 != 0 || sp.layers % pp != 0)) continue;
                        const std::vector<int>& lps = layers_for(sp, pp, vpp);
                        LayoutChoice c;
                        c.schedule = sched;
                        c.tp = tp, c.pp = pp, c.dp = dp, c.cp = cp, c.ep = ep, c.vpp = vpp;
                        c.etp = etp;  // moe2 / etp
                        c.zero = zero, c.distributed_optimizer = dist_opt;
                        c.dp_replicate = rep;  // hsdp
                        c.sequence_parallel = seq_par == 1, c.order = order;
                        if (!sp.vary_zero) {
                            c.offload_optimizer = sp.job_offload_optimizer;
                            c.offload_params = sp.job_offload_params;
                        }
                        // offload: with the search varying ZeRO, a sharded optimizer may
                        // also be offloaded (+ ZeRO-3's parameters), but only where the
                        // same layout does not fit without: offload buys memory with PCIe
                        // and CPU time, so it is in the space only where it is needed.
                        const int n_offload = !sp.vary_zero || (zero == 0 && !dist_opt) ? 0 : zero == 3 ? 2 : 1;
                        int alive = nr;  // recompute levels that may still fit at larger mb
                        int alive_offload[2] = {nr, nr};
                        for (int mb : mbs) {
                            if (vpp > 1 && (per_replica / mb) % pp != 0) continue;  // interleaving: m % pp == 0
                            if (vpp > 1 && sp.megatron_schedule &&
                                !megatron_runs_interleaved(pp, vpp, per_replica / mb,
                                                           plan_mb_group(sp.job_mb_group, pp, vpp, per_replica / mb)))
                                continue;  // bits: Megatron-LM refuses it (job_spec.h)
                            if (sched == PipelineSchedule::dualpipe && ((per_replica / mb) < 2 * pp || (per_replica / mb) % 2 != 0))
                                continue;  // DualPipe: an even m ≥ 2·pp
                            c.micro_batch = mb;
                            for (int r = 0; r < nr; ++r) {
                                c.recompute = sp.recomputes[r];
                                if (sp.vary_zero && !rules_allow(sp.rules, c, *sp.job)) continue;  // planfw
                                set_overlap_keys(sp, c);
                                bool pruned = prune && r >= alive;
                                int fit = visit_overlap(c, lps, pruned);
                                if (fit < 0) return false;
                                // Memory only grows with mb and with less recompute.
                                if (!pruned && fit == 0 && prune) alive = r;
                                if (fit == 1) continue;  // fits without offload (pruned: does not)
                                for (int k = 0; k < n_offload; ++k) {
                                    LayoutChoice o = c;
                                    o.offload_optimizer = OffloadDevice::cpu;
                                    o.offload_params = k == 1;
                                    if (sp.vary_zero && !rules_allow(sp.rules, o, *sp.job)) continue;  // planfw
                                    const bool pruned_o = prune && r >= alive_offload[k];
                                    const int fit_o = visit_overlap(o, lps, pruned_o);
                                    if (fit_o < 0) return false;
                                    if (!pruned_o && fit_o == 0 && prune) alive_offload[k] = r;
                                }
                            }
                        }
                    }
                }
            }
    }  // etp
    return true;
}

// Every layout of the space, group by group (for_each_layout_in).
template <class Visit>
bool for_each_layout(const Space& sp, bool prune, Visit&& visit) {
    for (const LayoutGroup& g : layout_groups(sp))
        if (!for_each_layout_in(sp, g, prune, visit)) return false;
    return true;
}

std::string order_name(const EstimateContext& ctx, int order) {
    return order >= 0 && order < kPlannerOrderCount ? kPlannerOrders[order] : ctx.job.parallel.order;
}

// "tp4·pp2·dp4 mb2", with cp/ep/vpp when used.
std::string label(const LayoutChoice& c) {
    std::string s = "tp" + std::to_string(c.tp) + "·pp" + std::to_string(c.pp) + "·dp" + std::to_string(c.dp);
    if (c.cp > 1) s += "·cp" + std::to_string(c.cp);
    if (c.ep > 1) s += "·ep" + std::to_string(c.ep);
    if (effective_etp(c) != c.tp) s += "·etp" + std::to_string(c.etp);  // etp: MoE parallel folding
    if (c.dp_replicate > 1) s += " (" + std::to_string(c.dp_replicate) + " replicas)";  // hsdp
    if (c.vpp > 1) s += " vpp" + std::to_string(c.vpp);
    if (c.pp > 1 && (c.schedule == PipelineSchedule::zb_h1 || c.schedule == PipelineSchedule::dualpipe))
        s += std::string(" ") + to_string(c.schedule);  // zb
    return s + " mb" + std::to_string(c.micro_batch);
}

// The label plus the settings in which `c` differs from `other` (all of them when other is null).
std::string label(const EstimateContext& ctx, const LayoutChoice& c, const LayoutChoice* other) {
    std::string s = label(c);
    if (!other || c.zero != other->zero || c.distributed_optimizer != other->distributed_optimizer)
        s += c.distributed_optimizer ? " dist-opt" : " zero" + std::to_string(c.zero);
    if (!other || c.sequence_parallel != other->sequence_parallel) s += c.sequence_parallel ? " sp" : " no-sp";
    if (!other || c.recompute != other->recompute) s += std::string(" recompute ") + to_string(c.recompute);
    if (other && c.order != other->order) s += " order " + order_name(ctx, c.order);
    // etp: against a layout that folds its experts differently, name this one's expert_tp too
    // (the label shows it only where it differs from tp).
    if (other && ctx.job.model.experts > 1 && effective_etp(c) == c.tp && effective_etp(*other) != other->tp &&
        effective_etp(c) != effective_etp(*other))
        s += " etp" + std::to_string(c.tp);
    if ((!other && (c.offload_optimizer != OffloadDevice::none || c.offload_params)) ||
        (other && (c.offload_optimizer != other->offload_optimizer || c.offload_params != other->offload_params)))
        s += c.offload_params ? " offload optimizer+params" : c.offload_optimizer != OffloadDevice::none ? " offload optimizer" : " no offload";
    // planfw: the overlap keys, where they differ.
    if (other && (c.overlap_grad_reduce != other->overlap_grad_reduce || c.overlap_param_gather != other->overlap_param_gather ||
                  c.tp_comm_overlap != other->tp_comm_overlap))
        s += " overlap " + overlap_words(c);
    return s;
}

std::string fmt(const char* f, double a, double b = 0, double c = 0) {
    char buf[128];
    std::snprintf(buf, sizeof buf, f, a, b, c);
    return buf;
}

// offload: what an offloading layout trades — device memory moved to host RAM for PCIe and
// CPU time per step ("" for a layout without offload).
std::string offload_clause(const LayoutScore& s, const char* who) {
    if (s.host_bytes_per_node <= 0) return "";
    return std::string("; ") + who +
           fmt(" offloads %.1f GiB per node to host memory for %.3g s of PCIe + CPU optimizer per step",
               s.host_bytes_per_node / kGiB, s.time.offload);
}
// The same for a pair: said once when both offload. `b_who` names the second layout ("the
// runner-up", "your layout").
std::string offload_clause(const LayoutScore& a, const LayoutScore& b, const char* b_who = "the runner-up") {
    if (a.host_bytes_per_node > 0 && b.host_bytes_per_node > 0)
        return fmt("; both offload to host memory (%.1f vs %.1f GiB per node", a.host_bytes_per_node / kGiB,
                   b.host_bytes_per_node / kGiB) +
               fmt(", %.3g s vs %.3g s of PCIe + CPU optimizer per step)", a.time.offload, b.time.offload);
    return offload_clause(a, "the winner") + offload_clause(b, b_who);
}

// A throughput gain in percent, with the digits that keep it from reading "0.0%".
std::string gain_text(double pct) {
    if (pct >= 1) return fmt("%.0f%%", pct);
    if (pct >= 0.1) return fmt("%.1f%%", pct);
    if (pct >= 0.01) return fmt("%.2f%%", pct);
    return "under 0.01%";
}

// One line: why layout `a` (the best) beats `b`, a strictly slower one: the runner-up, or the
// job's own layout when the search ranks it (b_is_job; what the user asked about, rather than
// a near twin of the winner). It says what is traded: the step-time terms `a` saves most (the
// largest, and the next when it saves at least a quarter as much), the terms it pays more for
// (up to two, each over 0.5% of b's step), the peak memory either way, and the bubble shares.
std::string why_best_line(const EstimateContext& ctx, const Candidate& a, const Candidate& b, bool b_is_job = false) {
    std::string la = label(ctx, a.choice, &b.choice), lb = label(ctx, b.choice, &a.choice);
    const TimeBreakdown &ta = a.score.time, &tb = b.score.time;
    double ra = a.score.tokens_per_s, rb = b.score.tokens_per_s;
    struct Term {
        const char* name;
        double a, b;
    };
    // planfw: compute split into what differs for a reason of its own: the slowest pipeline
    // stage's excess over the mean stage (imbalance) and the recomputed forward; the rest is
    // the work itself (GEMM efficiency at the layout's shapes).
    auto work = [](const TimeBreakdown& t) { return std::max(0.0, t.compute - t.recompute - t.imbalance); };
    const Term terms[] = {{"compute", work(ta), work(tb)},
                          {"pipeline-stage imbalance", ta.imbalance, tb.imbalance},
                          {"recompute", ta.recompute, tb.recompute},
                          {"exposed TP communication", ta.tp_comm, tb.tp_comm},
                          {"exposed CP communication", ta.cp_comm, tb.cp_comm},
                          {"exposed expert all-to-all", ta.ep_comm, tb.ep_comm},
                          {"pipeline send/recv", ta.pp_comm, tb.pp_comm},
                          {"pipeline bubble", ta.bubble, tb.bubble},
                          {"exposed DP communication", ta.dp_comm, tb.dp_comm},
                          {"optimizer step", ta.optimizer, tb.optimizer},
                          {"offload PCIe + CPU optimizer", ta.offload, tb.offload}};
    std::vector<const Term*> saves, costs;  // largest change first
    for (const Term& t : terms) (t.b > t.a ? saves : costs).push_back(&t);
    std::stable_sort(saves.begin(), saves.end(), [](const Term* x, const Term* y) { return x->b - x->a > y->b - y->a; });
    std::stable_sort(costs.begin(), costs.end(), [](const Term* x, const Term* y) { return x->a - x->b > y->a - y->b; });
    const double notable = 0.005 * b.score.step_s;
    // Times as "%.3g" seconds; rounding residue of a term that is zero (a bubble of 1e-16 s) reads 0.
    auto secs = [](double v) { return fmt("%.3g", std::abs(v) < 1e-9 ? 0.0 : v); };
    std::string s = la + " beats " + (b_is_job ? "your layout " : "") + lb + " by " + gain_text((ra / rb - 1) * 100) +
                    " tokens/s: ";
    // a is strictly faster, so some term is smaller; guard anyway (equal times never get here).
    const Term* top = saves.empty() ? &terms[0] : saves[0];
    // A saving in percent with the digits a small one needs (never "0% less").
    auto less = [](const Term* t) { return gain_text(t->b > 0 ? (t->b - t->a) / t->b * 100 : 0) + " less "; };
    s += less(top) + top->name + " (" + secs(top->a) + " s vs " + secs(top->b) + " s per step)";
    if (saves.size() > 1 && saves[1]->b - saves[1]->a >= 0.25 * (top->b - top->a) && saves[1]->b - saves[1]->a > notable)
        s += " and " + less(saves[1]) + saves[1]->name + " (" + secs(saves[1]->a) + " s vs " + secs(saves[1]->b) + " s)";
    std::string paid;
    for (size_t i = 0; i < costs.size() && i < 2; ++i)
        if (costs[i]->a - costs[i]->b > notable)
            paid += (paid.empty() ? "" : ", ") + secs(costs[i]->a - costs[i]->b) + " s more " + costs[i]->name + " (" +
                    secs(costs[i]->a) + " s vs " + secs(costs[i]->b) + " s)";
    // Small models (the cpu preset) peak below a GiB; keep their digits.
    double unit = std::max(a.score.peak_bytes, b.score.peak_bytes) < kGiB ? kGiB / 1024 : kGiB;
    const char* u = unit == kGiB ? "GiB" : "MiB";
    const double more = (a.score.peak_bytes - b.score.peak_bytes) / unit;
    const std::string peak = fmt("peak %.1f vs %.1f ", a.score.peak_bytes / unit, b.score.peak_bytes / unit) + u + " per GPU";
    if (more >= 0.05) paid += (paid.empty() ? "" : " and ") + fmt("%.1f ", more) + u + " more memory (" + peak + ")";
    s += paid.empty() ? "; it pays nothing in step time" : "; it pays " + paid;
    if (more <= -0.05) s += fmt(" and even needs %.1f ", -more) + u + " less memory (" + peak + ")";
    else if (more < 0.05) s += ", same memory (" + peak + ")";
    double sa = a.score.step_s > 0 ? ta.bubble / a.score.step_s : 0,
           sb = b.score.step_s > 0 ? tb.bubble / b.score.step_s : 0;
    // planfw: the bubble shares only where they read differently ("bubble 0% vs 0%" says nothing).
    if (fmt("%.0f", sa * 100) != fmt("%.0f", sb * 100)) s += fmt(", bubble %.0f%% vs %.0f%%", sa * 100, sb * 100);
    return s + offload_clause(a.score, b.score, b_is_job ? "your layout" : "the runner-up");
}

// 16384 → "16,384".
std::string thousands(long long v) {
    std::string digits = std::to_string(v), s;
    for (size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
        s += digits[i];
    }
    return s;
}

std::string join(const std::vector<int>& v) {
    std::string s;
    for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
    return s;
}

// ---- the steps of plan_layouts --------------------------------------------------------

// The inputs a search cannot start without: whole nodes, a model with layers and heads, a
// fixed cp that divides the world, a global batch.
Result<void> check_plan_inputs(const JobSpec& job, const PlanOptions& options, int world) {
    const int gpn = job.cluster.gpus_per_node;
    if (gpn < 1)
        return fail(job.where("cluster.gpus_per_node"), "cluster.gpus_per_node",
                    "got " + std::to_string(gpn) + "; allowed: at least 1");
    if (options.gpus < 0 || world < 1 || world % gpn != 0)
        return fail({}, "gpus",
                    "got " + std::to_string(world) + " GPUs, not a multiple of cluster.gpus_per_node (" +
                        std::to_string(gpn) + "); allowed: a positive multiple of " + std::to_string(gpn) +
                        " (whole nodes)");
    const ModelSpec& m = job.model;
    const int cp = std::max(job.parallel.cp, 1);  // the job's, kept when vary_cp is off
    if (m.layers < 1 || m.heads < 1)
        return fail(job.where("model"), "model", "the model has no layers or heads; nothing to plan");
    if (!options.vary_cp && world % cp != 0)
        return fail(
            job.where("parallel.cp"), "parallel.cp",
            "got " + std::to_string(cp) + ", which does not divide the " + std::to_string(world) + " GPUs planned for");
    if (job.training.global_batch < 1) {
        if (!job.origin.global_batch_given)
            return std::unexpected(Error(require_global_batch(job, "`ptd plan`")));
        return fail(job.where("training.global_batch"), "training.global_batch",
                    "got " + std::to_string(job.training.global_batch) +
                        "; the planner keeps the global batch fixed, so it must be ≥ 1");
    }
    return {};
}

// The search space of a job on `world` GPUs (`planned`: the job as the estimator sees it).
Space make_space(const JobSpec& job, const JobSpec& planned, const PlanOptions& options, int world) {
    const ModelSpec& m = job.model;
    const int cp = std::max(job.parallel.cp, 1);  // the job's, kept when vary_cp is off
    Space sp;
    sp.world = world, sp.layers = m.layers, sp.seq_len = m.seq_len;
    sp.global_batch = job.training.global_batch;
    sp.max_micro_batch = std::max(options.max_micro_batch, 1);
    sp.experts = m.experts, sp.job_ep = std::max(job.parallel.ep, 1), sp.vary_ep = options.vary_ep;
    sp.job_etp = m.experts > 1 ? job.parallel.expert_tp : 0;  // moe2
    // etp: a MoE job that leaves expert_tp at 0 (= tp) has it searched over the divisors of tp
    // (Megatron-core's MoE parallel folding: the published DeepSeek-V3 / Qwen3-MoE runs use
    // TP 2 with expert_tp 1); one that fixes it keeps it, unless options.vary_expert_tp.
    const bool search_etp = m.experts > 1 && (sp.job_etp == 0 || options.vary_expert_tp);
    sp.model = &m;
    sp.vary_zero = options.vary_zero, sp.job_zero = job.parallel.zero;
    sp.megatron_schedule = runs_megatron_core(job.training.framework);  // bits
    sp.job_mb_group = job.parallel.microbatch_group_size;
    // zb: a job that names ZB-H1 or DualPipe runs where they exist: search them too.
    sp.try_zb_h1 = options.try_zb_h1 || job.parallel.schedule == PipelineSchedule::zb_h1;
    sp.try_dualpipe = options.try_dualpipe || job.parallel.schedule == PipelineSchedule::dualpipe;
    sp.job_distributed_optimizer = job.parallel.distributed_optimizer;
    // planfw: the framework bounds the search (--any-framework: the union of them all).
    sp.rules = search_rules(job, options);
    sp.job = &job;
    sp.job_overlap_grad_reduce = job.parallel.overlap_grad_reduce;
    sp.job_overlap_param_gather = job.parallel.overlap_param_gather;
    sp.job_tp_comm_overlap = job.parallel.tp_comm_overlap;
    sp.job_offload_optimizer = job.parallel.offload_optimizer, sp.job_offload_params = job.parallel.offload_params;
    // gb200: TP stays within NVLink's reach — a node, or a multi-node NVLink domain (NVL72).
    const int nvlink_reach = planned.cluster.job_nvlink_domain();
    for (int tp = 1; tp <= m.heads; ++tp) {
        bool kv_ok = m.kv_heads <= 0 || m.kv_heads % tp == 0 || tp % m.kv_heads == 0;
        bool ffn_ok = m.ffn_hidden <= 0 || m.ffn_hidden % tp == 0;
        // moe2: the shared experts split tp ways; the routed experts too unless expert_tp is fixed.
        if (m.experts > 1 && m.shared_expert_ffn_hidden > 0 && m.shared_expert_ffn_hidden % tp != 0) ffn_ok = false;
        // etp: when expert_tp is searched, a tp that does not divide them keeps its expert_tp ≠ tp layouts.
        if (m.experts > 1 && m.moe_ffn_hidden > 0 && m.moe_ffn_hidden % tp != 0 && !search_etp &&
            (sp.job_etp == 0 || sp.job_etp == tp))
            ffn_ok = false;
        if (tp > 1 && !sp.rules.tp) break;  // planfw
        if (m.heads % tp == 0 && kv_ok && ffn_ok && (options.tp_beyond_node || tp <= nvlink_reach) &&
            (world / (options.vary_cp ? 1 : cp)) % tp == 0)
            sp.tps.push_back(tp);
    }
    // etp: the expert_tp values per tp: expert_tp = tp (0) first, then tp's other divisors, largest first.
    sp.etps.resize(sp.tps.empty() ? 1 : (size_t)sp.tps.back() + 1);
    for (int tp : sp.tps) {
        std::vector<int>& list = sp.etps[(size_t)tp];
        list.push_back(search_etp ? 0 : sp.job_etp);
        if (search_etp && sp.rules.expert_tp)  // planfw: DeepSpeed-MoE splits experts over ep only
            for (int d = tp - 1; d >= 1; --d)
                if (tp % d == 0) list.push_back(d);
    }
    // Context parallel (Megatron): each sequence is cut into 2·cp chunks for load-balanced
    // causal attention, so cp must divide seq_len / 2; cp divides the world.
    sp.engine_only = job.estimate.activation_profile == ActivationProfile::ptd_engine;
    sp.job_dp_replicate = std::max(1, job.parallel.dp_replicate);  // hsdp
    sp.gpus_per_node = std::max(1, job.cluster.gpus_per_node);
    for (int i = 0; i <= kPlannerOrderCount; ++i)
        if (const auto dims = parse_rank_order(i < kPlannerOrderCount ? kPlannerOrders[i] : job.parallel.order))
            sp.order_dims[(size_t)i] = *dims;
        else
            sp.order_dims[(size_t)i] = {DIM_TP, DIM_CP, DIM_DP, DIM_PP};  // validate_job refused it already
    if (sp.engine_only) {
        sp.vary_ep = false;
        // planfw: the bundled engine runs it: its own ZeRO-1 (and ZeRO 0: search_rules), none
        // of the frameworks' overlap keys; the framework's export still checks what is listed.
        sp.set_overlap = false;
    }
    if (!sp.rules.ep) sp.vary_ep = false;  // planfw: ep stays the job's (1 for a dense model); rules_allow checks it
    if (options.vary_cp && !sp.engine_only && sp.rules.cp) {
        for (int c = 1; c <= world; ++c)
            if (world % c == 0 && (c == 1 || (m.seq_len > 0 && m.seq_len % (2 * c) == 0))) sp.cps.push_back(c);
    } else {
        sp.cps = {cp};
    }
    if (options.vary_recompute && !rules_allow(sp.rules, [] { LayoutChoice c; c.recompute = Recompute::selective; return c; }(), job))
        sp.recomputes = {Recompute::full, Recompute::none};  // planfw: no selective recompute in this framework
    else if (options.vary_recompute)
        sp.recomputes = {Recompute::full, Recompute::selective, Recompute::none};
    else
        sp.recomputes = {job.parallel.recompute};
    if (options.vary_order)
        for (int i = 0; i < kPlannerOrderCount; ++i) sp.orders.push_back(i);
    else
        sp.orders = {layout_choice_of(job).order};
    sp.lps.resize(m.layers + 1);
    sp.chunk_lps.resize(m.layers + 1);
    if (job.training.framework == Framework::torchtitan) {
        // ttsplit: torchtitan splits every pp·vpp its own way (apply_torchtitan_split): the
        // search passes that split, for each depth torchtitan can fill.
        const int version = job.training.framework_version;
        for (int pp = 2; pp <= m.layers; ++pp) {
            if (world % pp != 0) continue;
            sp.lps[pp] = torchtitan_default_split(m.layers, pp, version);
            sp.chunk_lps[pp].resize((size_t)((m.layers + 2) / pp) + 1);
            for (int v = 2; v <= (m.layers + 2) / pp; ++v)
                sp.chunk_lps[pp][(size_t)v] = torchtitan_default_split(m.layers, pp * v, version);
        }
        return sp;
    }
    for (int pp = 1; pp <= m.layers; ++pp)
        if (m.layers % pp != 0 && world % pp == 0) sp.lps[pp] = balanced_layers_per_stage(m.layers, pp);
    for (int pp = 2; pp <= m.layers; ++pp) {
        if (m.layers % pp == 0 || world % pp != 0) continue;
        // Every chunk keeps at least one layer; chunk lists for vpp 2 .. layers/pp.
        sp.chunk_lps[pp].resize((size_t)(m.layers / pp) + 1);
        for (int v = 2; v <= m.layers / pp; ++v) sp.chunk_lps[pp][(size_t)v] = balanced_layers_per_stage(m.layers, pp * v);
    }
    return sp;
}

// The counting pass (no evaluation): the total for progress, and whether the job's own
// layout is in the space at all.
struct SpaceCount {
    int64_t total = 0;
    bool own_in_space = false;
};

SpaceCount count_space(const Space& sp, const JobSpec& job, const LayoutChoice& own) {
    const std::vector<int>& own_lps = job.parallel.layers_per_stage;
    SpaceCount n;
    for_each_layout(sp, false, [&](const LayoutChoice& c, const std::vector<int>& lps, bool) {
        ++n.total;
        if (job.has_layout() && same_choice(c, own) &&
            (own_lps.empty() || own_lps == (lps.empty() ? balanced_layers_per_stage(sp.layers, c.pp) : lps)))
            n.own_in_space = true;
        return 0;  // "does not fit": the count includes every offload variant the search may visit
    });
    return n;
}

// Why the space holds no layout at all, in the user's terms: no tensor-parallel degree, a
// cluster too big for the batch, or a batch no data-parallel degree divides.
std::unexpected<Error> empty_space_error(const JobSpec& job, const Space& sp, const PlanOptions& options) {
    const int world = sp.world, cp = std::max(job.parallel.cp, 1);
    std::vector<int> dps;
    for (int tp : sp.tps)
        for (int c : sp.cps)
            for (int pp = 1; pp <= sp.layers; ++pp)
                if (world % ((long long)tp * pp * c) == 0) dps.push_back(world / (tp * pp * c));
    std::sort(dps.begin(), dps.end());
    dps.erase(std::unique(dps.begin(), dps.end()), dps.end());
    if (sp.tps.empty())
        return fail(job.where("parallel.tp"), "parallel.tp",
                    "no tensor-parallel degree is possible: tp must divide heads (" + std::to_string(job.model.heads) +
                        "), ffn_hidden and the " + std::to_string(world / (options.vary_cp ? 1 : cp)) +
                        " GPUs per context group" + (options.tp_beyond_node ? "" : ", and stay within a node"));
    // Every replica needs at least one sequence per step: with dp > global_batch the
    // cluster is simply too big for the batch, which is worth saying in those words.
    if (!dps.empty() && dps.front() > sp.global_batch)
        return fail(job.where("training.global_batch"), "training.global_batch",
                    "global_batch " + std::to_string(sp.global_batch) + " seqs cannot keep " +
                        thousands(world) + " GPUs busy: the fewest data-parallel replicas any layout " +
                        "of this model leaves is " + std::to_string(dps.front()) +
                        ", each needing at least one sequence per step; allowed: a global batch that is a "
                        "multiple of one of dp " + join(dps) + ", or fewer GPUs (--gpus)");
    return fail(job.where("training.global_batch"), "training.global_batch",
                "got " + std::to_string(sp.global_batch) +
                    ", not divisible by any data-parallel degree possible on " + std::to_string(world) +
                    " GPUs (dp: " + join(dps) + "); allowed: a multiple of one of them");
}

// One layout after screening: its exact memory and bounds on its step time.
struct Screened {
    LayoutChoice choice;
    int64_t seq;
    double peak_bytes, lo_s, hi_s;
    bool fits;
};

// Pass 1's result: every evaluated layout, and the two layouts the "nothing fits" line names.
struct Screening {
    std::vector<Screened> screened;
    Candidate smallest;    // the least peak memory seen
    Candidate least_host;  // offload: the least host need among layouts that fit the GPU but not the host
    int64_t enumerated = 0;
    bool done = false;     // false: cancelled by options.progress
};

// One group's share of pass 1 (screen_group), merged in group order by screen_layouts.
struct GroupScreening {
    std::vector<Screened> screened;  // seq counted within the group
    Candidate smallest, least_host;  // as Screening's, within the group (peak_bytes / host_bytes_per_node −1: none)
    int64_t enumerated = 0, evaluated = 0, feasible = 0;
};

// What the threads of pass 1 share: the next group to take, running totals for progress and
// the stop flag (cancelled, or a worker failed).
struct ScreeningShared {
    std::atomic<size_t> next_group{0};
    std::atomic<int64_t> enumerated{0}, evaluated{0};
    std::atomic<bool> stop{false};
};

// Pass 1 over one group: every layout's memory (exact: pruning and feasibility need it) and
// bounds on its step time, without simulating the pipeline schedule. `on_batch` runs after
// every 4096 evaluations of the thread (`thread_evaluated`, over all its groups) with the
// shared totals updated; it returns false to stop.
template <class OnBatch>
void screen_group(const EstimateContext& ctx, const Space& sp, const LayoutGroup& g, const PlanOptions& options,
                  bool want_hi, GroupScreening& r, ScreeningShared& shared, int64_t& thread_evaluated,
                  OnBatch&& on_batch) {
    r.smallest.score.peak_bytes = -1;
    r.least_host.score.host_bytes_per_node = -1;
    // offload: the search visits a layout's offload variants right after the layout itself.
    // Offloading takes exactly its states (and their fragmentation) off each stage, so when the
    // layout's worst stage minus what offload takes off it still exceeds the usable memory, the
    // variant cannot fit and is skipped like a pruned layout (only when pruning).
    LayoutScore last_plain;
    bool last_plain_valid = false;
    const double fragmentation = ctx.job.estimate.fragmentation;
    int64_t reported_enumerated = 0, reported_evaluated = 0;
    auto report = [&] {
        shared.enumerated.fetch_add(r.enumerated - reported_enumerated, std::memory_order_relaxed);
        shared.evaluated.fetch_add(r.evaluated - reported_evaluated, std::memory_order_relaxed);
        reported_enumerated = r.enumerated, reported_evaluated = r.evaluated;
    };
    for_each_layout_in(sp, g, !options.exhaustive, [&](const LayoutChoice& c, const std::vector<int>& lps, bool pruned) {
        const int64_t seq = r.enumerated++;
        const bool variant = options.vary_zero && (c.offload_optimizer != OffloadDevice::none || c.offload_params);
        if (!variant) last_plain_valid = false;
        if (pruned) return 0;
        if (variant && last_plain_valid && !options.exhaustive) {
            const MemoryBreakdown& w = last_plain.worst_mem;
            const double removed = w.optimizer + (c.zero >= 2 ? w.grads : 0.0) + (c.offload_params ? w.params : 0.0);
            if (last_plain.peak_bytes - removed * (1 + fragmentation) > last_plain.usable_bytes) return 0;
        }
        if (shared.stop.load(std::memory_order_relaxed)) return -1;
        StepBounds bounds;
        bounds.want_hi = want_hi;
        const LayoutScore score = evaluate_layout(ctx, c, lps, nullptr, &bounds);
        if (!variant) last_plain = score, last_plain_valid = true;
        ++r.evaluated;
        if (++thread_evaluated % 4096 == 0) {
            report();
            if (!on_batch()) return -1;
        }
        r.screened.push_back(Screened{c, seq, score.peak_bytes, bounds.lo_s, bounds.hi_s, score.fits});
        if (!score.fits) {
            if (score.peak_bytes <= score.usable_bytes) {  // offload: only the host RAM is short
                if (r.least_host.score.host_bytes_per_node < 0 ||
                    score.host_bytes_per_node < r.least_host.score.host_bytes_per_node)
                    r.least_host = Candidate{c, score, seq};
            } else if (r.smallest.score.peak_bytes < 0 || score.peak_bytes < r.smallest.score.peak_bytes) {
                r.smallest = Candidate{c, score, seq};
            }
            return 0;
        }
        ++r.feasible;
        return 1;
    });
    report();
}

// How many threads pass 1 runs: options.threads, or one per hardware thread (at least one),
// never more than there are groups.
int screening_threads(const PlanOptions& options, size_t groups) {
    int n = options.threads > 0 ? options.threads : (int)std::thread::hardware_concurrency();
    n = std::max(n, 1);
    return (int)std::min<size_t>((size_t)n, std::max<size_t>(groups, 1));
}

// Pass 1, screening: every layout's memory and step-time bounds (screen_group), the groups
// shared out over threads that each take the next group when done with one. The groups'
// layouts are put back in enumeration order (seq renumbered over the whole space), so the
// plan is the same on any number of threads. options.progress is called from the calling
// thread only, and stops every thread when it returns false. Counts evaluated and feasible
// layouts into `out`. `want_hi`: the upper bound is needed (only job_rank uses it).
Screening screen_layouts(const EstimateContext& ctx, const Space& sp, const PlanOptions& options, bool want_hi,
                         int64_t total, PlanResult& out) {
    const std::vector<LayoutGroup> groups = layout_groups(sp);
    std::vector<GroupScreening> parts(groups.size());
    ScreeningShared shared;
    const int threads = screening_threads(options, groups.size());
    int running = threads;  // workers not yet done, under `done_mutex`
    std::mutex done_mutex;
    std::condition_variable done;
    std::vector<std::exception_ptr> failed((size_t)threads);
    auto progress_ok = [&] {
        const int64_t evaluated = shared.evaluated.load(std::memory_order_relaxed);
        const int64_t enumerated = std::max<int64_t>(shared.enumerated.load(std::memory_order_relaxed), 1);
        return options.progress(evaluated, evaluated * total / enumerated);
    };
    // With several threads and a progress callback the calling thread only watches: it reports
    // progress every 20 ms (and passes a cancel on) until the workers are done. Alone, it
    // searches and reports every 4096 of its evaluations.
    const bool watch = options.progress && threads > 1;
    auto work = [&](int worker) {
        try {
            auto on_batch = [&] {
                if (watch || worker != 0 || !options.progress) return true;
                if (progress_ok()) return true;
                shared.stop.store(true, std::memory_order_relaxed);
                return false;
            };
            int64_t evaluated = 0;
            for (size_t g; (g = shared.next_group.fetch_add(1)) < groups.size() && !shared.stop.load();)
                screen_group(ctx, sp, groups[g], options, want_hi, parts[g], shared, evaluated, on_batch);
        } catch (...) {
            failed[(size_t)worker] = std::current_exception();
            shared.stop.store(true);
        }
        std::lock_guard lock(done_mutex);
        --running;
        done.notify_one();
    };
    std::vector<std::thread> pool;
    pool.reserve((size_t)threads);
    for (int w = watch ? 0 : 1; w < threads; ++w) pool.emplace_back(work, w);
    if (!watch) work(0);
    if (watch) {
        std::unique_lock lock(done_mutex);
        while (!done.wait_for(lock, std::chrono::milliseconds(20), [&] { return running == 0; })) {
            lock.unlock();  // the callback runs without the lock a finishing worker takes
            if (!shared.stop.load() && !progress_ok()) shared.stop.store(true);
            lock.lock();
        }
    }
    for (std::thread& t : pool) t.join();
    for (const std::exception_ptr& e : failed)
        if (e) std::rethrow_exception(e);

    Screening r;
    r.smallest.score.peak_bytes = -1;
    r.least_host.score.host_bytes_per_node = -1;
    r.done = !shared.stop.load();
    size_t evaluated = 0;
    for (const GroupScreening& p : parts) evaluated += p.screened.size();
    r.screened.reserve(evaluated);
    for (GroupScreening& p : parts) {
        const int64_t offset = r.enumerated;
        for (Screened& e : p.screened) {
            e.seq += offset;
            r.screened.push_back(e);
        }
        std::vector<Screened>().swap(p.screened);  // each group's copy freed once merged
        // The first of equals wins, as in one pass over the whole space.
        if (p.smallest.score.peak_bytes >= 0 &&
            (r.smallest.score.peak_bytes < 0 || p.smallest.score.peak_bytes < r.smallest.score.peak_bytes)) {
            r.smallest = p.smallest;
            r.smallest.seq += offset;
        }
        if (p.least_host.score.host_bytes_per_node >= 0 &&
            (r.least_host.score.host_bytes_per_node < 0 ||
             p.least_host.score.host_bytes_per_node < r.least_host.score.host_bytes_per_node)) {
            r.least_host = p.least_host;
            r.least_host.seq += offset;
        }
        r.enumerated += p.enumerated;
        out.evaluated += p.evaluated;
        out.feasible += p.feasible;
    }
    return r;
}

// Pass 2: the schedule simulated only where the bounds leave a layout's place open. The
// bounds carry a relative slack far above rounding, so "cannot reach" is never a rounding
// artefact; every number reported is the simulated one.
class Simulated {
public:
    Simulated(const EstimateContext& ctx, const Space& sp, const std::vector<Screened>& screened,
              double tokens_per_step, PlanResult& out)
        : ctx_(ctx), sp_(sp), screened_(screened), tokens_per_step_(tokens_per_step), out_(out),
          exact_of_(screened.size(), -1) {}

    // Screened layout i, simulated once.
    const Candidate& get(size_t i) {
        if (exact_of_[i] < 0) {
            const Screened& r = screened_[i];
            exact_of_[i] = (int32_t)exact_.size();
            exact_.push_back(Candidate{r.choice, evaluate_layout(ctx_, r.choice, layers_for(sp_, r.choice.pp, r.choice.vpp), nullptr), r.seq});
            ++out_.simulated;
        }
        return exact_[(size_t)exact_of_[i]];
    }
    bool has(size_t i) const { return exact_of_[i] >= 0; }
    const LayoutChoice& screened_choice(size_t i) const { return screened_[i].choice; }
    bool screened_fits(size_t i) const { return screened_[i].fits; }
    // Screened layout i's place among those simulated (index into all()), or −1.
    int32_t simulated_index(size_t i) const { return exact_of_[i]; }
    // The tokens/s screened layout i can at most / at least reach.
    double most_tokens(size_t i) const { return tokens_per_step_ / screened_[i].lo_s * (1 + kSlack); }
    double least_tokens(size_t i) const { return tokens_per_step_ / screened_[i].hi_s * (1 - kSlack); }
    // Every layout simulated so far, in the order simulated.
    const std::vector<Candidate>& all() const { return exact_; }

private:
    static constexpr double kSlack = 1e-9;
    const EstimateContext& ctx_;
    const Space& sp_;
    const std::vector<Screened>& screened_;
    double tokens_per_step_;
    PlanResult& out_;
    std::vector<int32_t> exact_of_;  // index into exact_
    std::vector<Candidate> exact_;
};

// planfw: which simulated layouts the plan may list or compare. A layout is listable when
// the job's framework runs it — its export of the job with the layout applied succeeds
// (export_job: every refusal the export knows, not only what rules_allow bounds) — and, for
// an offload layout, when no layout fits without offload or it beats the best one that does
// by more than the estimate's error (job_error_band: the published runs' residuals).
// Checked lazily and once per layout: an export check costs about 4.5 µs, some four
// evaluations (bench_planner), so it runs on the layouts the plan lists, compares or ranks
// the job's against, not on every layout that fits (hundreds of thousands for a MoE model).
class Listable {
public:
    Listable(const JobSpec& planned, const Space& sp, const PlanOptions& options, Simulated& sim, PlanResult& out)
        : planned_(planned), sp_(sp), sim_(sim), out_(out),
          check_export_(!options.any_framework && sp.rules.has_format), any_framework_(options.any_framework),
          band_(job_error_band(planned)) {}

    bool runnable(size_t i) {
        auto it = runnable_.find(i);
        if (it != runnable_.end()) return it->second;
        bool ok = true;
        const LayoutChoice& c = sim_.screened_choice(i);
        if (check_export_) {
            const auto exported = export_layout(planned_, PlanEntry{c, layers_for(sp_, c.pp, c.vpp), {}, {}}, sp_.rules.format);
            ok = exported.has_value();
            if (!ok && out_.refused_why.empty() && sim_.screened_fits(i)) out_.refused_why = export_refusal_reason(exported.error());
        } else if (any_framework_) {
            // --any-framework: the union of the rules holds layouts no one framework runs
            // (DeepSpeed's ZeRO-1 with Megatron's interleaving, ...): listed only if one does.
            const PlanEntry entry{c, layers_for(sp_, c.pp, c.vpp), {}, {}};
            ok = std::any_of(std::begin(kFrameworks), std::end(kFrameworks),
                             [&](Framework f) { return framework_runs(f, planned_, entry); });
        }
        if (!ok && sim_.screened_fits(i)) ++out_.refused;
        runnable_.emplace(i, ok);
        return ok;
    }
    // The best runnable fitting layout without offload (branch and bound over `fitting`,
    // most promising first), and from it the bar an offload layout must clear: its tokens/s
    // interval must lie above the best's (within_error: low·(1 + hi) < high·(1 + lo)). Every
    // fitting offload layout under the bar is counted (`left out`; those faster than the best
    // without offload also in out.offload_within_error), simulated only where its bounds
    // straddle the bar.
    void find_best_without_offload(const std::vector<size_t>& fitting) {
        for (size_t i : fitting) {
            if (offloads(sim_.screened_choice(i))) continue;
            if (best_plain_ >= 0 && sim_.most_tokens(i) < best_plain_) break;
            if (runnable(i) && sim_.get(i).score.tokens_per_s > best_plain_) {
                best_plain_ = sim_.get(i).score.tokens_per_s;
                best_plain_index_ = i;
            }
        }
        if (best_plain_ < 0) return;  // nothing fits without offload: every offload layout may be listed
        bar_ = band_ ? best_plain_ * (1 + band_->error_hi) / (1 + band_->error_lo) : best_plain_;
        for (size_t i : fitting) {
            if (!offloads(sim_.screened_choice(i)) || sim_.least_tokens(i) > bar_) continue;
            if (sim_.most_tokens(i) <= best_plain_ || sim_.get(i).score.tokens_per_s <= best_plain_) {
                ++left_out_;
            } else if (sim_.get(i).score.tokens_per_s <= bar_) {
                ++left_out_;
                ++out_.offload_within_error;
            }
        }
    }
    bool listable(size_t i) {
        if (bar_ >= 0 && offloads(sim_.screened_choice(i)) &&
            (sim_.most_tokens(i) <= bar_ || sim_.get(i).score.tokens_per_s <= bar_))
            return false;
        return runnable(i);
    }
    int64_t left_out() const { return left_out_; }
    double best_plain() const { return best_plain_; }
    // The best layout without offload (null when none fits), as simulated.
    const Candidate* best_plain_layout() { return best_plain_ >= 0 ? &sim_.get(best_plain_index_) : nullptr; }
    static bool offloads(const LayoutChoice& c) { return c.offload_optimizer != OffloadDevice::none || c.offload_params; }

private:
    const JobSpec& planned_;
    const Space& sp_;
    Simulated& sim_;
    PlanResult& out_;
    bool check_export_, any_framework_;
    std::optional<ErrorBand> band_;
    double best_plain_ = -1, bar_ = -1;  // bar_ < 0: no bar (nothing fits without offload)
    size_t best_plain_index_ = 0;
    int64_t left_out_ = 0;
    std::unordered_map<size_t, bool> runnable_;
};

// The two highest distinct simulated tokens/s among the fitting layouts (−1: none).
struct BestTwo {
    double first = -1, second = -1;
};

// Branch and bound for the ranked list: visit by promise, simulate, stop once the next
// layout's best possible tokens/s is below what the list needs (and below the runner-up's,
// for why_best). `fitting` is sorted most promising first.
BestTwo rank_top(Simulated& sim, const std::vector<size_t>& fitting, BestKept& heap, Listable& listable) {
    BestTwo best;
    for (size_t i : fitting) {
        const double need = std::min(heap.entry_tokens_per_s(), best.second >= 0 ? best.second : -1.0);
        if (sim.most_tokens(i) < need) break;
        if (!listable.listable(i)) continue;  // planfw
        const Candidate& c = sim.get(i);
        heap.offer(c);
        const double t = c.score.tokens_per_s;
        if (t > best.first) best.second = best.first, best.first = t;
        else if (t < best.first && t > best.second) best.second = t;
    }
    return best;
}

// The Pareto front (throughput vs headroom): by headroom, most first. A layout whose best
// possible tokens/s is below the fastest simulated one with at least its headroom is
// dominated by that one, and so is anything it would dominate: only the others are simulated.
void simulate_pareto_candidates(Simulated& sim, const std::vector<Screened>& screened, std::vector<size_t> by_room,
                                Listable& listable) {
    std::sort(by_room.begin(), by_room.end(), [&](size_t a, size_t b) {
        return screened[a].peak_bytes != screened[b].peak_bytes ? screened[a].peak_bytes < screened[b].peak_bytes : a < b;
    });
    double fastest = -1;
    for (size_t i : by_room) {
        if (!sim.has(i) && sim.most_tokens(i) < fastest) continue;
        if (sim.get(i).score.tokens_per_s > fastest && listable.listable(i)) fastest = sim.get(i).score.tokens_per_s;  // planfw
    }
}

// The job's own rank: how many fitting layouts are faster; those surely faster or surely
// not count without simulation.
int64_t count_faster(Simulated& sim, const std::vector<size_t>& fitting, double own_tokens_per_s, Listable& listable) {
    int64_t higher = 0;
    for (size_t i : fitting) {
        if (!sim.has(i) && sim.most_tokens(i) <= own_tokens_per_s) continue;
        // planfw: the layouts the plan may list only. One surely faster needs no simulation
        // unless it offloads (the offload bar needs its tokens/s); its export check is needed
        // (about 4.5 µs, bench_planner).
        if (!sim.has(i) && sim.least_tokens(i) > own_tokens_per_s && !Listable::offloads(sim.screened_choice(i))) {
            if (listable.runnable(i)) ++higher;
        } else if (sim.get(i).score.tokens_per_s > own_tokens_per_s && listable.listable(i)) {
            ++higher;
        }
    }
    return higher;
}

// What the simulated layouts decide, in enumeration order: best, runner-up, ties and the
// Pareto front (and, with keep_fitting_scores, every fitting tokens/s into `out`).
struct Decision {
    std::vector<const Candidate*> fit_exact;  // the simulated layouts that fit, by enumeration
    Candidate best, runner;
    bool have_best = false, have_runner = false;
    int64_t ties = 0;  // other layouts with the best's tokens/s
    std::vector<Candidate> pareto;
};

Decision decide(const Simulated& sim, const std::vector<size_t>& fitting, Listable& listable, const BestTwo& top,
                const PlanOptions& options, PlanResult& out) {
    Decision d;
    // planfw: the simulated fitting layouts the plan may list (Listable).
    for (size_t i : fitting)
        if (sim.simulated_index(i) >= 0 && listable.listable(i)) d.fit_exact.push_back(&sim.all()[(size_t)sim.simulated_index(i)]);
    std::sort(d.fit_exact.begin(), d.fit_exact.end(), [](const Candidate* a, const Candidate* b) { return a->seq < b->seq; });
    for (const Candidate* each : d.fit_exact) {
        const Candidate& cand = *each;
        const double t = cand.score.tokens_per_s;
        if (t == top.first) {
            if (!d.have_best || better(cand, d.best)) d.best = cand;
            d.ties += d.have_best ? 1 : 0;
            d.have_best = true;
        } else if (t == top.second && (!d.have_runner || better(cand, d.runner))) {
            d.runner = cand, d.have_runner = true;
        }
        if (options.keep_fitting_scores) out.fitting_tokens_per_s.push_back(t);
        if (std::none_of(d.pareto.begin(), d.pareto.end(), [&](const Candidate& p) { return dominates(p, cand); })) {
            std::erase_if(d.pareto, [&](const Candidate& p) { return dominates(cand, p); });
            d.pareto.push_back(cand);
        }
    }
    std::sort(d.pareto.begin(), d.pareto.end(), better);
    return d;
}

// planfw: a runner-up that is the best layout with other overlap keys explains nothing the
// overlap column does not show: the why line then compares with the best layout that differs
// in more (branch and bound over `fitting`, most promising first).
void runner_beyond_overlap_keys(Simulated& sim, const std::vector<size_t>& fitting, Listable& listable, Decision& d) {
    if (!d.have_best || !d.have_runner || !same_choice(d.runner.choice, d.best.choice)) return;
    const double best = d.best.score.tokens_per_s;
    bool found = false;
    Candidate runner;
    for (size_t i : fitting) {
        if (found && sim.most_tokens(i) < runner.score.tokens_per_s) break;
        if (same_choice(sim.screened_choice(i), d.best.choice)) continue;
        const Candidate& c = sim.get(i);
        if (c.score.tokens_per_s >= best || !listable.listable(i)) continue;
        if (!found || better(c, runner)) runner = c, found = true;
    }
    d.runner = runner;
    d.have_runner = found;
}

// Fitting layouts left out of the list because a listed one has the same predicted numbers.
// fold: a row's folded variants are named with it, so their twins are hidden like a row's,
// and a variant itself is counted as folded, not as anyone's twin.
int64_t count_equivalent_hidden(const std::vector<Candidate>& listed, const std::vector<const Candidate*>& fit_exact,
                                const std::vector<Candidate>& folded) {
    std::set<std::pair<double, double>> keys;
    std::set<int64_t> folded_seqs;
    for (const Candidate& c : listed) keys.emplace(c.score.tokens_per_s, c.score.peak_bytes);
    for (const Candidate& c : folded) keys.emplace(c.score.tokens_per_s, c.score.peak_bytes), folded_seqs.insert(c.seq);
    int64_t hidden = 0;
    for (const Candidate* c : fit_exact)
        hidden += keys.count({c->score.tokens_per_s, c->score.peak_bytes}) && !folded_seqs.count(c->seq);
    return hidden - (int64_t)listed.size();
}

// The job's own layout as the why line sees it: scored by the search, or (outside the
// search space, but valid on this world) as `ptd estimate` scores it.
struct OwnLayout {
    LayoutChoice choice;
    LayoutScore score;
    bool in_space = false, scored = false;
};

// " ; N other layouts tie with it on tokens/s", or "" without ties.
std::string ties_clause(int64_t ties) {
    if (ties <= 0) return "";
    return "; " + std::to_string(ties) + (ties == 1 ? " other layout ties" : " other layouts tie") + " with it on tokens/s";
}

// why: one line on why the best layout beats the job's own layout (where it is slower) or
// the runner-up, what nothing fitting means, or that the search was cancelled.
std::string why_best_text(const EstimateContext& ctx, const PlanResult& out, int64_t total, const Screening& screening,
                          const Decision& d, const OwnLayout& own, const Candidate* best_plain) {
    // Compared also when it does not fit: the line then says that first and what else it costs.
    const bool vs_own = d.have_best && own.scored && own.score.tokens_per_s < d.best.score.tokens_per_s;
    std::string why;
    if (out.cancelled) {
        why = "search cancelled after " + std::to_string(out.evaluated) + " of about " + std::to_string(total) +
              " layouts; the ranking covers only those";
    } else if (out.feasible == 0 && out.refused > 0) {
        // planfw: layouts fit, but none runs on the job's framework (or, --any-framework, on any).
        why = std::to_string(out.refused) + (out.refused == 1 ? " layout fits" : " layouts fit") + ", but " +
              (out.any_framework ? std::string("no framework's export takes ") + (out.refused == 1 ? "it" : "any of them")
                                 : "the " + std::string(to_string(out.framework)) + " export refuses " +
                                       (out.refused == 1 ? "it" : "each") +
                                       (out.refused_why.empty() ? std::string() : ": " + out.refused_why)) +
              "; change what it names" + (out.any_framework ? "" : ", or widen the search with --any-framework");
    } else if (out.feasible == 0) {
        const Candidate& smallest = screening.smallest;
        double capacity = ctx.job.cluster.gpu.memory_gib, usable = smallest.score.usable_bytes / kGiB;
        if (smallest.score.peak_bytes >= 0) {
            why = "no layout fits: smallest peak is " + fmt("%.1f", smallest.score.peak_bytes / kGiB) + " GiB per GPU at " +
                  label(ctx, smallest.choice, nullptr) + ", capacity " + fmt("%.1f", capacity) + " GiB";
            if (ctx.job.estimate.headroom > 0)
                why += fmt(" (usable %.1f GiB with %.0f%% headroom)", usable, ctx.job.estimate.headroom * 100);
        } else {
            why = "no layout fits";
        }
        // offload: layouts that fit the GPUs only by offloading more than the host RAM holds.
        const LayoutScore& lh = screening.least_host.score;
        if (lh.host_bytes_per_node >= 0)
            why += fmt("; offloading fits the GPUs (%.1f GiB per GPU", lh.peak_bytes / kGiB) + " at " +
                   label(ctx, screening.least_host.choice, nullptr) +
                   fmt(") but needs %.0f GiB of host memory per node, more than the %.0f GiB there",
                       lh.host_bytes_per_node / kGiB, lh.host_capacity_bytes / kGiB);
    } else if (d.have_best && Listable::offloads(d.best.choice) && best_plain) {
        // planfw: an offload layout is listed first only when it wins by more than the
        // estimate's error: compare it with the best layout that does not offload.
        why = why_best_line(ctx, d.best, *best_plain) + "; more than the estimate's error, so offloading is worth it";
    } else if (vs_own) {
        // why: the job's own layout is what the user asked about; compare with it rather
        // than with the runner-up (often a near twin of the best).
        why = why_best_line(ctx, d.best, Candidate{own.choice, own.score, -1}, true);
        if (!own.in_space) why += "; your layout lies outside the planner's search space";
        why += ties_clause(d.ties);
    } else if (!d.have_runner) {  // one distinct tokens/s among the fitting layouts
        why = label(ctx, d.best.choice, nullptr) +
              (d.ties == 0 ? " is the only layout that fits"
                           : " ties all " + std::to_string(d.ties) + " other fitting layouts on tokens/s and is listed first") +
              offload_clause(d.best.score, "it");
    } else {
        why = why_best_line(ctx, d.best, d.runner) + ties_clause(d.ties);
    }
    // planfw: offload that nothing fits without; offload left out because its gain is noise.
    if (!out.cancelled && d.have_best && Listable::offloads(d.best.choice) && !best_plain)
        why += "; it offloads because no layout fits without offload";
    if (!out.cancelled && out.offload_within_error > 0)
        why += "; " + std::to_string(out.offload_within_error) +
               (out.offload_within_error == 1 ? " faster layout with" : " faster layouts with") +
               " CPU offload left out: they beat the best without offload by less than the estimate's error";
    // why: a job layout that does not fit is why the planner prefers another; one outside the
    // search space that is faster than everything searched is worth saying too. Either first.
    if (!out.cancelled && out.feasible > 0 && own.scored && !own.score.fits) {
        const double unit = own.score.usable_bytes < kGiB ? kGiB / 1024 : kGiB;
        // Over the plan's headroom but inside the GPU: `ptd estimate`, which leaves no headroom
        // unless the job writes one, calls the same layout "ok"; say which margin it misses.
        const double capacity = ctx.job.cluster.gpu.memory_gib * kGiB, headroom = ctx.job.estimate.headroom;
        const bool host_fits = own.score.host_capacity_bytes <= 0 || own.score.host_bytes_per_node <= own.score.host_capacity_bytes;
        const bool within_gpu = headroom > 0 && own.score.peak_bytes <= capacity && host_fits;
        why = "your layout " + label(ctx, own.choice, nullptr) +
              (within_gpu ? fmt(" leaves less than the plan's %.0f%% headroom free (", headroom * 100) : std::string(" does not fit (")) +
              fmt(unit == kGiB ? "peak %.1f GiB per GPU, %.1f GiB usable" : "peak %.1f MiB per GPU, %.1f MiB usable",
                  own.score.peak_bytes / unit, own.score.usable_bytes / unit) +
              (within_gpu ? fmt(" of %.1f GiB; --headroom 0 ranks it", capacity / kGiB) : std::string()) + ")" +
              (d.have_best && own.score.tokens_per_s > d.best.score.tokens_per_s
                   ? ", though it would be " + gain_text((own.score.tokens_per_s / d.best.score.tokens_per_s - 1) * 100) +
                         " faster than the best that fits"
                   : std::string()) +
              "; " + why;
    } else if (d.have_best && own.scored && own.score.fits && own.score.tokens_per_s > d.best.score.tokens_per_s) {
        why = "your layout " + label(ctx, own.choice, nullptr) + " lies outside the planner's search space and is " +
              gain_text((own.score.tokens_per_s / d.best.score.tokens_per_s - 1) * 100) +
              " faster than the best it found; " + why;
    }
    return why;
}

// When the best layout idles more than options.max_bubble_share of its step in the pipeline
// bubble, the global batch is too small for this many GPUs: find how many it can keep busy
// (the same search on fewer whole nodes, halving) and say so plainly in out.too_big.
void check_batch_keeps_gpus_busy(const JobSpec& job, const PlanOptions& options, int world, PlanResult& out) {
    if (out.cancelled || out.top.empty() || options.max_bubble_share < 0) return;
    const LayoutScore& b = out.top.front().score;
    const double share = b.step_s > 0 ? b.time.bubble / b.step_s : 0;
    if (share <= options.max_bubble_share) return;
    const int gpn = job.cluster.gpus_per_node;
    PlanOptions sub = options;
    sub.max_bubble_share = -1, sub.top_k = 1, sub.top_k_unfit = 0, sub.keep_fitting_scores = false;
    sub.progress = nullptr;
    for (int nodes = world / gpn / 2; nodes >= 1; nodes /= 2) {
        sub.gpus = nodes * gpn;
        auto smaller = plan_layouts(job, sub);
        if (!smaller || smaller->top.empty()) continue;
        const LayoutScore& sb = smaller->top.front().score;
        if (sb.step_s > 0 && sb.time.bubble / sb.step_s <= options.max_bubble_share) {
            out.busy_gpus = sub.gpus;
            break;
        }
    }
    out.too_big = "global_batch " + std::to_string(job.training.global_batch) + " seqs cannot keep " + thousands(world) +
                  " GPUs busy: the best layout idles " + fmt("%.0f", share * 100) + "% of each step in the pipeline bubble; ";
    out.too_big += out.busy_gpus > 0
                       ? "at most " + thousands(out.busy_gpus) + " GPUs give ≤ " +
                             fmt("%.0f", options.max_bubble_share * 100) + "% bubble"
                       : "no smaller whole-node cluster gives ≤ " + fmt("%.0f", options.max_bubble_share * 100) +
                             "% bubble either";
    out.too_big += "; consider a larger global batch or fewer GPUs";
}

}  // namespace

// cost: an objective needs the figure it orders by (a price for cost, the GPU's power for energy).
static Result<void> check_objective(const JobSpec& job, PlanObjective objective) {
    if (objective == PlanObjective::cost && job.cluster.gpu_hour_usd <= 0)
        return fail(job.where("cluster"), "cluster.gpu_hour_usd",
                    "not given; --objective cost needs the price of a GPU-hour (USD): set cluster.gpu_hour_usd "
                    "(e.g. --set cluster.gpu_hour_usd=2.5)");
    if (objective == PlanObjective::energy && job.cluster.gpu.power_w <= 0)
        return fail(job.where("cluster.gpu"), "cluster.gpu.power_w",
                    "not known for GPU " + job.cluster.gpu.name +
                        "; --objective energy needs the GPU's power under load (W): set cluster.gpu.power_w");
    return {};
}

// cost: the listed rows by the objective's figure, tokens/s (the search's order) on ties.
static void order_by_objective(std::vector<PlanEntry>& rows, PlanObjective objective) {
    if (objective == PlanObjective::throughput) return;
    std::stable_sort(rows.begin(), rows.end(), [&](const PlanEntry& a, const PlanEntry& b) {
        return objective_value(a, objective) < objective_value(b, objective);
    });
}

// The search, step by step (docs/planner.md): check the inputs, build the space, count it,
// screen every layout (memory exact, step time bounded), simulate the schedule where the
// bounds leave a layout's place open, then rank, explain and check the batch.
Result<PlanResult> plan_layouts(const JobSpec& job, const PlanOptions& options) {
    const auto t0 = std::chrono::steady_clock::now();
    const int world = options.gpus > 0 ? options.gpus : job.world_size();
    if (auto bad = check_plan_inputs(job, options, world); !bad) return std::unexpected(bad.error());
    if (auto bad = check_objective(job, options.objective); !bad) return std::unexpected(bad.error());

    // The job the estimator sees: the planned world size and the headroom (asked for, the
    // job's, or its framework's default: plan_headroom).
    JobSpec planned = job;
    planned.cluster.nodes = world / job.cluster.gpus_per_node;
    planned.cluster.hosts.clear();
    std::string headroom_source;
    planned.estimate.headroom = plan_headroom(job, options, &headroom_source);
    const EstimateContext ctx = make_estimate_context(planned, options.profile);
    const Space sp = make_space(job, planned, options, world);

    OwnLayout own;
    own.choice = layout_choice_of(job);
    // ttfsdp: a torchtitan job's zero 3 under pipelining is the run the search visits as zero 2
    // (the same estimate); the job's own word stays in what the plan says of it.
    LayoutChoice searched_as = own.choice;
    if (sp.vary_zero && sp.rules.zero3_with_pp && own.choice.pp > 1 && own.choice.zero == 3) searched_as.zero = 2;
    const SpaceCount count = count_space(sp, job, searched_as);
    if (count.total == 0) return empty_space_error(job, sp, options);
    own.in_space = own.scored = count.own_in_space;

    PlanResult out;
    out.any_framework = options.any_framework;
    out.framework = job.training.framework;
    out.framework_version = job.training.framework_version;
    out.headroom = planned.estimate.headroom;
    out.headroom_source = headroom_source;
    if (own.in_space) own.score = evaluate_layout(ctx, own.choice, layers_for(sp, own.choice.pp, own.choice.vpp), nullptr);  // same inputs as in the search
    // why: the job's own layout outside the search space (an order not in kPlannerOrders, a
    // custom stage split, a micro-batch above max_micro_batch, tp beyond a node, a sharding
    // its framework runs as another: planfw) but valid on this world: scored as `ptd
    // estimate` scores it, and ranked among the layouts the search lists.
    if (!own.in_space && job.has_layout() && world == job.world_size() && validate_job(job).empty()) {
        own.score = evaluate_layout(ctx, own.choice, job.parallel.layers_per_stage, nullptr);
        own.scored = true;
    }
    const Screening screening = screen_layouts(ctx, sp, options, own.scored && own.score.fits, count.total, out);
    out.cancelled = !screening.done;
    out.enumerated = screening.enumerated;

    const std::vector<Screened>& screened = screening.screened;
    Simulated sim(ctx, sp, screened, (double)job.training.global_batch * job.model.seq_len, out);
    std::vector<size_t> fitting, unfitting;
    for (size_t i = 0; i < screened.size(); ++i) (screened[i].fits ? fitting : unfitting).push_back(i);
    // Most promising first (smallest step-time floor), enumeration order on ties.
    auto by_promise = [&](size_t a, size_t b) {
        return screened[a].lo_s != screened[b].lo_s ? screened[a].lo_s < screened[b].lo_s : a < b;
    };
    if (options.simulate_all)
        for (size_t i = 0; i < screened.size(); ++i) sim.get(i);
    if (options.keep_fitting_scores) {
        for (size_t i : fitting) {
            sim.get(i);
            if (options.progress && out.simulated % 4096 == 0 && !options.progress(out.evaluated, out.evaluated)) {
                out.cancelled = true;
                break;
            }
        }
    }
    std::sort(fitting.begin(), fitting.end(), by_promise);
    Listable listable(planned, sp, options, sim, out);  // planfw
    listable.find_best_without_offload(fitting);
    BestKept heap((size_t)std::max(options.top_k, 0), options.fold);
    const BestTwo top = rank_top(sim, fitting, heap, listable);
    simulate_pareto_candidates(sim, screened, fitting, listable);
    const int64_t higher =
        own.scored && own.score.fits ? count_faster(sim, fitting, own.score.tokens_per_s, listable) : 0;
    // Near misses, ranked like `top`: only what the framework runs.
    BestKept unfit((size_t)std::max(options.top_k_unfit, 0), options.fold);
    std::sort(unfitting.begin(), unfitting.end(), by_promise);
    for (size_t i : unfitting) {
        if (sim.most_tokens(i) < unfit.entry_tokens_per_s()) break;
        if (listable.runnable(i)) unfit.offer(sim.get(i));
    }

    Decision d = decide(sim, fitting, listable, top, options, out);
    runner_beyond_overlap_keys(sim, fitting, listable, d);
    const std::vector<Candidate> listed = heap.sorted();
    out.equivalent_hidden += count_equivalent_hidden(listed, d.fit_exact, heap.all_folded());
    if (screening.done && options.progress) options.progress(out.evaluated, out.evaluated);

    auto entry = [&](const Candidate& c) {
        PlanEntry e{c.choice, layers_for(sp, c.choice.pp, c.choice.vpp), c.score,
                    layout_training_cost(planned, c.score.step_s, c.score.tokens_per_s,
                                         c.score.worst_mem.params + c.score.worst_mem.optimizer),
                    {}};
        if (options.any_framework)  // planfw: which frameworks run it
            for (Framework f : kFrameworks)
                if (framework_runs(f, planned, e)) e.frameworks.push_back(f);
        return e;
    };
    for (const Candidate& c : listed) {
        out.top.push_back(entry(c));
        out.top.back().folded = heap.folded(c);  // fold
        out.folded += (int64_t)out.top.back().folded.size();
    }
    order_by_objective(out.top, options.objective);
    for (const Candidate& c : d.pareto) out.pareto.push_back(entry(c));
    for (const Candidate& c : unfit.sorted()) {
        out.unfit.push_back(entry(c));
        out.unfit.back().folded = unfit.folded(c);  // fold
    }
    std::sort(out.fitting_tokens_per_s.begin(), out.fitting_tokens_per_s.end(), std::greater<>());
    out.job_rank = own.scored && own.score.fits && !out.cancelled ? (int)higher : -1;
    // The job's own layout, where it fits, must also be one its framework's export takes to be
    // ranked among the layouts the plan lists (as the search's own are).
    if (out.job_rank >= 0 && !options.any_framework && sp.rules.has_format && job.has_layout()) {
        const PlanEntry own_entry{own.choice, own.in_space ? layers_for(sp, own.choice.pp, own.choice.vpp) : job.parallel.layers_per_stage, {}, {}};
        if (const auto exported = export_layout(planned, own_entry, sp.rules.format); !exported) {
            out.job_rank = -1;
            out.job_refused = true;
            if (out.refused_why.empty()) out.refused_why = export_refusal_reason(exported.error());
        }
    }
    out.job_in_space = own.in_space;
    // planfw: `feasible` counts what the plan may list: less the offload layouts the bar left
    // out and the layouts the framework's export refused (of those checked: every fitting one
    // with keep_fitting_scores).
    out.feasible -= listable.left_out() + out.refused;
    out.why_best = why_best_text(ctx, out, count.total, screening, d, own, listable.best_plain_layout());
    check_batch_keeps_gpus_busy(job, options, world, out);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

std::string job_refusal_text(const PlanResult& r) {
    return "`ptd export --format " + std::string(to_string(framework_rules(r.framework, r.framework_version).format)) +
           "` refuses it: " + r.refused_why;
}

const char* to_string(PlanObjective o) {
    switch (o) {
        case PlanObjective::throughput: return "throughput";
        case PlanObjective::time: return "time";
        case PlanObjective::cost: return "cost";
        case PlanObjective::energy: return "energy";
    }
    return "throughput";
}

double objective_value(const PlanEntry& e, PlanObjective objective) {
    const TrainingCost& t = e.training;
    // A run that never finishes (failures outpace the saves) or has no figure sorts last.
    const double never = std::numeric_limits<double>::infinity();
    switch (objective) {
        case PlanObjective::throughput: return -e.score.tokens_per_s;
        case PlanObjective::time: return t.goodput > 0 ? t.wall_s : never;
        case PlanObjective::cost: return t.has_cost && t.goodput > 0 ? t.cost_usd : never;
        case PlanObjective::energy: return t.has_energy && t.goodput > 0 ? t.energy_kwh : never;
    }
    return never;
}

int64_t plan_rank_of(const PlanResult& plan, double tokens_per_s) {
    const auto& v = plan.fitting_tokens_per_s;  // descending
    return 1 + (std::lower_bound(v.begin(), v.end(), tokens_per_s, std::greater<>()) - v.begin());  // strictly faster
}

void micro_batch_candidates(long long per_replica, int most, std::vector<int>& out) {
    out.clear();
    for (long long mb = 1; mb <= std::min<long long>(per_replica, most); ++mb)
        if (per_replica % mb == 0) out.push_back((int)mb);
}

JobSpec apply_plan_entry(const JobSpec& job, const PlanEntry& entry) {
    JobSpec out = job;
    const LayoutChoice& c = entry.choice;
    ParallelSpec& p = out.parallel;
    p.tp = c.tp, p.pp = c.pp, p.dp = c.dp, p.cp = c.cp, p.ep = c.ep, p.vpp = c.vpp;
    p.zero = c.zero;
    p.distributed_optimizer = c.distributed_optimizer;
    p.dp_replicate = c.dp_replicate;  // hsdp
    p.sequence_parallel = c.sequence_parallel;
    p.recompute = c.recompute;
    // recmod: the job's module list belongs to its selective recompute; another choice drops it
    // (validate_job allows a list only with selective), as the estimate ignored it.
    if (c.recompute != Recompute::selective) p.recompute_modules = kRecomputeCoreAttn;
    p.offload_optimizer = c.offload_optimizer;  // offload
    p.offload_params = c.offload_params;
    p.schedule = c.schedule;  // zb
    // etp: the searched expert_tp (0 = tp); a job's fixed value stays as written when chosen.
    if (job.model.experts > 1 && c.etp != p.expert_tp) p.expert_tp = effective_etp(c) != c.tp ? c.etp : 0;
    if (c.order >= 0 && c.order < kPlannerOrderCount) p.order = kPlannerOrders[c.order];  // else: the job's own
    // A layout string the job wrote holds only for the split it gives.
    if (entry.layers_per_stage != p.layers_per_stage || c.pp != job.parallel.pp || c.vpp != job.parallel.vpp)
        p.pipeline_layout.clear();
    p.layers_per_stage = entry.layers_per_stage;
    // overlap (planfw): the keys the layout was scored with — the planner's where the framework
    // has them, else the job's — cleared where the layout has nothing for them to act on (no
    // sharded optimizer, no sequence parallelism), as the estimate ignored them there
    // (validate_job refuses those combinations).
    p.overlap_grad_reduce = c.overlap_grad_reduce;
    p.overlap_param_gather = c.overlap_param_gather && (c.zero != 0 || c.distributed_optimizer);
    p.tp_comm_overlap = c.tp_comm_overlap && !(c.tp > 1 && !c.sequence_parallel);
    // stackdef: the keys the layout was scored with are the job's own now, not its stack's.
    // They leave the list of stack defaults too, which `ptd estimate` prints as what the stack
    // supplied: a bare job listed "distributed_optimizer = false" beside an estimate made with it on.
    std::vector<std::string> chosen = {"parallel.recompute", "parallel.recompute_modules", "parallel.layers_per_stage",
                                       "training.micro_batch", "parallel.vpp"};
    for (StackKey k : {StackKey::sequence_parallel, StackKey::distributed_optimizer, StackKey::overlap_grad_reduce,
                       StackKey::overlap_param_gather, StackKey::tp_comm_overlap}) {
        out.origin.stack_keys_written |= stack_key_bit(k);
        chosen.push_back(stack_key_name(k));
    }
    out.origin.recipe_keys_written |= kRecipeRecompute | kRecipeRecomputeModules;  // mbrecipe: likewise
    std::erase_if(out.origin.stack_defaults,
                  [&chosen](const StackDefault& d) { return std::find(chosen.begin(), chosen.end(), d.key) != chosen.end(); });
    out.training.micro_batch = c.micro_batch;
    out.origin.micro_batch_given = out.origin.vpp_given = true;  // batchchoice: the plan's own now
    // bits: the group size the layout was scored with (a job's N outside the new layout's range,
    // or on a layout without interleaving, would not validate or export).
    p.microbatch_group_size = plan_mb_group(job.parallel.microbatch_group_size, c.pp, c.vpp,
                                            c.micro_batch * c.dp > 0 ? job.training.global_batch / ((long long)c.micro_batch * c.dp) : 0);
    // dp and global batch are now part of the plan: saving must write them, not re-derive.
    out.origin.dp_given = true;
    out.origin.global_batch_given = true;
    out.origin.no_layout = false;  // a bare job now has its layout
    return out;
}

}  // namespace ptd
