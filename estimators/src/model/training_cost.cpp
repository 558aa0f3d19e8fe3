// training_cost.cpp — the arithmetic of training_cost.h: a run's time, GPU-hours, money,
// energy, checkpoints and goodput from one layout's step time. Pure (no I/O); the formulas and
// their sources are in docs/estimators.md "Time and cost to train".
#include "ptd/model/training_cost.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "ptd/model/estimate.h"

namespace ptd {

double young_interval_s(double save_s, double mtbf_s) {
    if (save_s <= 0 || mtbf_s <= 0) return 0;
    return std::sqrt(2.0 * save_s * mtbf_s);
}

double checkpoint_goodput(double interval_s, double save_s, double restart_s, double mtbf_s) {
    if (interval_s <= 0) return 0;
    const double period = interval_s + save_s;
    const double saving = interval_s / period;
    const double failing = mtbf_s > 0 ? 1.0 - (restart_s + period / 2.0) / mtbf_s : 1.0;
    return std::clamp(saving * failing, 0.0, 1.0);
}

double checkpoint_bytes_per_param(const TrainingSpec& t) {
    const OptimizerStateWidths w = optimizer_state_widths(t);
    const double moments = t.optimizer == Optimizer::sgd ? w.exp_avg : w.exp_avg + w.exp_avg_sq;
    // fp32 training keeps no master copy: the weights are the master (memory.cpp, state_bytes_per_param).
    if (t.precision == Precision::fp32) return 4.0 + moments;
    return 2.0 + w.main + moments;
}

double checkpoint_total_bytes(const TrainingSpec& training, const ParamCounts& params) {
    return (double)(params.total + params.mtp) * checkpoint_bytes_per_param(training);
}

double default_host_power_w(const ClusterSpec& cluster, std::string* source) {
    // (system maximum, GPUs in it, the GPU's TDP, the system): the node's other parts at their maximum.
    struct Dgx {
        const char* gpu;
        double system_w;
        int gpus;
        double gpu_w;
        const char* system;
    };
    static constexpr Dgx kDgx[] = {
        {"v100-32gb", 10000, 16, 300, "DGX-2 datasheet 10 kW system power"},
        {"a100-40gb", 6500, 8, 400, "DGX A100 datasheet 6.5 kW max"},
        {"a100-80gb", 6500, 8, 400, "DGX A100 datasheet 6.5 kW max"},
        {"h100-sxm", 10200, 8, 700, "DGX H100 datasheet ~10.2 kW max"},
        {"h200", 10200, 8, 700, "DGX H200 datasheet ~10.2 kW max"},
        {"b200", 14300, 8, 1000, "DGX B200 datasheet ~14.3 kW max"},
    };
    for (const Dgx& d : kDgx) {
        if (cluster.gpu.name != d.gpu) continue;
        const double per_gpu = (d.system_w - d.gpus * d.gpu_w) / d.gpus;
        if (source) {
            char buf[256];
            std::snprintf(buf, sizeof buf, "%s less %d × %.0f W GPUs = %.1f W per GPU; an upper bound", d.system, d.gpus,
                          d.gpu_w, per_gpu);
            *source = buf;
        }
        return per_gpu * std::max(cluster.gpus_per_node, 1);
    }
    if (source) *source = "not known for this GPU (no published system figure): set cluster.host_power_w";
    return 0;
}

TrainingCostInputs training_cost_inputs(const JobSpec& job, double step_s, Range step_range, double step_confidence,
                                        double tokens_per_step, double checkpoint_bytes) {
    const ClusterSpec& c = job.cluster;
    TrainingCostInputs in;
    in.step_s = step_s;
    in.step_range = step_range;
    in.step_confidence = step_confidence;
    in.tokens_per_step = tokens_per_step;
    in.tokens = job.training.tokens;
    in.steps = job.training.steps;
    in.gpus = c.world_size();
    in.nodes = c.nodes;
    in.checkpoint_bytes = checkpoint_bytes;
    in.job_interval_steps = job.launch.checkpoint_every;
    CostSources& s = in.sources;
    s.budget = in.tokens > 0 ? "training.tokens" : "training.steps";
    in.gpu_power_w = c.gpu.power_w;
    // The preset's figure unless the job changed it (a job built in code may name its preset
    // without keeping the preset's GPU as origin.gpu_base).
    const bool preset_power = !job.origin.gpu_preset.empty() &&
                              (!job.origin.gpu_base || c.gpu.power_w == job.origin.gpu_base->power_w);
    s.gpu_power = c.gpu.power_w <= 0 ? "not known for this GPU: set cluster.gpu.power_w"
                  : preset_power     ? job.origin.gpu_preset + " preset: datasheet TDP"
                                     : std::string("cluster.gpu.power_w");
    if (c.host_power_w > 0) {
        in.host_power_w = c.host_power_w;
        s.host_power = "cluster.host_power_w";
    } else {
        in.host_power_w = default_host_power_w(c, &s.host_power);
    }
    in.pue = c.pue > 0 ? c.pue : kDefaultPue;
    s.pue = c.pue > 0 ? "cluster.pue" : "default: Google's 2023 fleet average, 2024 Environmental Report";
    in.gpu_hour_usd = c.gpu_hour_usd;
    s.price = c.gpu_hour_usd > 0 ? "cluster.gpu_hour_usd" : "not given: set cluster.gpu_hour_usd";
    if (c.storage_gbps > 0) {
        in.storage_gbps = c.storage_gbps;
        s.storage = "cluster.storage_gbps";
    } else {
        in.storage_gbps = kLlama3StorageGbpsPerGpu * in.gpus;
        s.storage = "default: 0.122 GB/s per GPU, Llama 3's 2 TB/s sustained for 16,384 GPUs, arXiv 2407.21783 §3.3.1";
    }
    if (c.failures_per_gpu_hour > 0) {
        in.failures_per_gpu_hour = c.failures_per_gpu_hour;
        s.failures = "cluster.failures_per_gpu_hour";
    } else {
        in.failures_per_gpu_hour = kLlama3FailuresPerGpuHour;
        s.failures = "default: Llama 3's 419 unexpected interruptions in 54 days on 16,384 H100, arXiv 2407.21783 §3.3.4";
    }
    return in;
}

TrainingCost training_cost(const TrainingCostInputs& in) {
    TrainingCost r;
    r.inputs = in;
    if (in.step_s <= 0 || in.tokens_per_step <= 0 || in.gpus <= 0) return r;
    r.known = true;
    r.steps = in.tokens > 0 ? std::ceil(in.tokens / in.tokens_per_step) : (double)in.steps;
    r.tokens = r.steps * in.tokens_per_step;
    r.compute_s = r.steps * in.step_s;
    const bool ranged = in.step_range.hi > 0;
    if (ranged) r.compute_range = {r.steps * in.step_range.lo, r.steps * in.step_range.hi};

    r.checkpoint_bytes = in.checkpoint_bytes;
    if (in.storage_gbps > 0) r.save_s = r.load_s = in.checkpoint_bytes / (in.storage_gbps * 1e9);
    if (in.failures_per_gpu_hour > 0) r.mtbf_s = 3600.0 / (in.failures_per_gpu_hour * in.gpus);
    r.interval_s = young_interval_s(r.save_s, r.mtbf_s);
    // No save time or no failures: one checkpoint at the end, nothing lost on the way.
    r.goodput = r.interval_s > 0 ? checkpoint_goodput(r.interval_s, r.save_s, r.load_s, r.mtbf_s) : 1.0;
    if (r.interval_s > 0) r.interval_steps = std::max(1.0, std::round(r.interval_s / in.step_s));
    if (r.goodput <= 0) return r;  // failures outpace the saves: no finite wall time

    const double gpus = in.gpus;
    auto scaled = [&](double per_compute_s) {  // a figure ∝ wall time, and its interval
        return std::pair<double, Range>{r.compute_s / r.goodput * per_compute_s,
                                        ranged ? Range{r.compute_range.lo / r.goodput * per_compute_s,
                                                       r.compute_range.hi / r.goodput * per_compute_s}
                                               : Range{}};
    };
    std::tie(r.wall_s, r.wall_range) = scaled(1.0);
    r.expected_failures = r.mtbf_s > 0 ? r.wall_s / r.mtbf_s : 0;
    // Each failure throws away on average half an interval of work (Young's model).
    r.expected_steps_lost = r.expected_failures * r.interval_steps / 2;
    if (in.job_interval_steps > 0) {
        r.job_interval_s = (double)in.job_interval_steps * in.step_s;
        r.job_goodput = checkpoint_goodput(r.job_interval_s, r.save_s, r.load_s, r.mtbf_s);
        if (r.job_goodput > 0 && r.mtbf_s > 0) {
            r.job_expected_failures = r.compute_s / r.job_goodput / r.mtbf_s;
            r.job_expected_steps_lost = r.job_expected_failures * (double)in.job_interval_steps / 2;
        }
    }
    std::tie(r.gpu_hours, r.gpu_hours_range) = scaled(gpus / 3600.0);
    if (in.gpu_hour_usd > 0) {
        r.has_cost = true;
        std::tie(r.cost_usd, r.cost_range) = scaled(gpus / 3600.0 * in.gpu_hour_usd);
    }
    if (in.gpu_power_w > 0) {
        r.has_energy = true;
        r.power_kw = (gpus * in.gpu_power_w + in.nodes * in.host_power_w) * in.pue / 1000.0;
        std::tie(r.energy_kwh, r.energy_range) = scaled(r.power_kw / 3600.0);
    }
    return r;
}

TrainingCost layout_training_cost(const JobSpec& job, double step_s, double tokens_per_s, double rank_state_bytes) {
    TrainingCost c = training_cost(training_cost_inputs(job, step_s, Range{}, 0, tokens_per_s * step_s,
                                                        checkpoint_total_bytes(job.training, count_parameters(job.model))));
    c.checkpoint_rank_bytes = rank_state_bytes;
    return c;
}

}  // namespace ptd
