// training_cost.h — what a whole training run costs (issue 28 point 5): the wall-clock time
// of a token budget (or a step count) with the step time's interval, GPU-hours, money,
// energy, the checkpoint's size and save / load time, the checkpoint interval that loses the
// least to failures (Young 1974, Daly 2006) and the goodput it leaves. Arithmetic over figures
// the estimate already has (step time, tokens per step, parameter counts) and the job's
// cluster keys; no I/O. Every default has its source here and in docs/estimators.md
// ("Time and cost to train").
#pragma once

#include <cstdint>
#include <string>

#include "ptd/model/model_stats.h"
#include "ptd/model/speed_interval.h"
#include "ptd/spec/job_spec.h"

namespace ptd {

// ---- defaults, each with its source ------------------------------------------------------
// Llama 3 (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv 2407.21783, §3.3.4): "During a
// 54-day snapshot period of pre-training, we experienced a total of 466 job interruptions ... 419
// were unexpected interruptions", on 16,384 H100 GPUs: 419 / (54 · 24 h · 16,384) per GPU-hour.
inline constexpr double kLlama3FailuresPerGpuHour = 419.0 / (54.0 * 24.0 * 16384.0);
// The same paper, §3.3.1 (Storage): Tectonic "supports a sustainable throughput of 2 TB/s" for the
// 16,384-GPU run: 2,000 GB/s / 16,384 GPUs of checkpoint bandwidth per GPU of the job.
inline constexpr double kLlama3StorageGbpsPerGpu = 2000.0 / 16384.0;
// Power usage effectiveness of a hyperscale data centre: Google's fleet-wide trailing-twelve-
// month PUE for 2023 was 1.10 (Google 2024 Environmental Report). The Uptime Institute's 2024
// survey average over all data centres is 1.56; set cluster.pue for yours.
inline constexpr double kDefaultPue = 1.10;

// Where a figure came from, for people ("cluster.gpu_hour_usd", "h100-sxm preset: datasheet TDP").
struct CostSources {
    std::string budget, gpu_power, host_power, pue, price, storage, failures;
};

// The run's inputs: one layout's step, the job's budget, the cluster's figures.
struct TrainingCostInputs {
    double step_s = 0;            // predicted step time, s
    Range step_range;             // its interval (hi = 0: none)
    double step_confidence = 0;   // the share of outcomes the interval holds (0.8)
    double tokens_per_step = 0;   // tokens one step trains (global batch · sequence)
    double tokens = 0;            // the budget; 0 = train `steps` steps
    int64_t steps = 0;
    int gpus = 0, nodes = 0;
    double gpu_power_w = 0;       // per GPU under load; 0 = not known: no energy
    double host_power_w = 0;      // per node besides its GPUs; 0 = none counted
    double pue = 1;               // facility ÷ IT power
    double gpu_hour_usd = 0;      // 0 = not given: no cost
    double checkpoint_bytes = 0;  // the whole job's checkpoint (every distinct shard once)
    double storage_gbps = 0;      // the job's checkpoint bandwidth, GB/s (1e9 B/s)
    double failures_per_gpu_hour = 0;
    int64_t job_interval_steps = 0;  // issue 31: launch.checkpoint_every (0 = the job names none)
    CostSources sources;
};

struct TrainingCost {
    bool known = false;           // false: no step time or no tokens per step (nothing below)
    double steps = 0;             // steps to train: ceil(tokens / tokens_per_step), or `steps`
    double tokens = 0;            // tokens those steps train
    double compute_s = 0;         // steps × step_s: the training steps alone
    Range compute_range;          // under the step time's interval (hi = 0: none)
    // checkpoints: written and read whole at the storage's bandwidth; the step waits for a save
    double checkpoint_bytes = 0;
    double checkpoint_rank_bytes = 0;  // the most loaded rank's weights + optimizer states (set by the estimate)
    double save_s = 0, load_s = 0;
    double mtbf_s = 0;            // the job's mean time between failures: 1 / (rate · gpus)
    double interval_s = 0;        // Young: sqrt(2 · save_s · mtbf_s)
    double interval_steps = 0;    // interval_s / step_s, at least 1
    double goodput = 0;           // compute_s / wall_s at that interval (0: failures outpace the saves)
    double wall_s = 0;            // expected wall clock: compute_s / goodput
    Range wall_range;
    double expected_failures = 0; // wall_s / mtbf_s
    double expected_steps_lost = 0;  // expected_failures · interval_steps / 2: work trained again
    // issue 31: the same at the job's own interval (launch.checkpoint_every steps), when it names one
    double job_interval_s = 0;    // job_interval_steps · step_s (0: none named)
    double job_goodput = 0;
    double job_expected_failures = 0, job_expected_steps_lost = 0;
    double gpu_hours = 0;         // wall_s · gpus / 3600: the GPUs reserved, failures included
    Range gpu_hours_range;
    bool has_cost = false;        // cluster.gpu_hour_usd given
    double cost_usd = 0;
    Range cost_range;
    bool has_energy = false;      // the GPU's power known
    double power_kw = 0;          // the job's draw at the meter: (gpus · gpu_w + nodes · host_w) · pue
    double energy_kwh = 0;        // power_kw · wall_s / 3600
    Range energy_range;
    TrainingCostInputs inputs;    // what the figures were computed from, with their sources
};

// The run's figures; every time figure is expected wall time unless named compute_.
TrainingCost training_cost(const TrainingCostInputs& in);

// Young (1974, "A first order approximation to the optimum checkpoint interval", CACM 17(9)):
// the interval of work between checkpoints that loses the least, sqrt(2 · save · MTBF).
double young_interval_s(double save_s, double mtbf_s);
// The share of wall time that trains with a save of save_s every interval_s of work, a restart
// of restart_s and failures every mtbf_s (first order, as Young and Daly 2006, "A higher order
// estimate of the optimum checkpoint interval for restart dumps", FGCS 22(3)): each failure
// loses the restart and on average half an interval with its save, so
// goodput = τ / (τ + δ) · (1 − (R + (τ + δ) / 2) / M), clamped to [0, 1].
double checkpoint_goodput(double interval_s, double save_s, double restart_s, double mtbf_s);

// Bytes one parameter takes in a checkpoint: the weights in the training dtype and the
// optimizer's states (master weights, moments) at their widths; gradients are not saved.
double checkpoint_bytes_per_param(const TrainingSpec& training);
// The whole model's checkpoint: every parameter (MTP modules included) once.
double checkpoint_total_bytes(const TrainingSpec& training, const ParamCounts& params);

// A node's power besides its GPUs when cluster.host_power_w is not given: the DGX of the GPU
// (datasheet maximum system power less its GPUs' TDP, per GPU × gpus_per_node), 0 where no
// such system is published; `source` says which.
double default_host_power_w(const ClusterSpec& cluster, std::string* source);

// The inputs for one layout of `job` (its cluster keys or their defaults, with sources).
TrainingCostInputs training_cost_inputs(const JobSpec& job, double step_s, Range step_range, double step_confidence,
                                        double tokens_per_step, double checkpoint_bytes);

// The run of one layout of `job` at a step time and throughput (a planner row): no interval
// (the plan's rows share one band, its header says how wide); per-rank checkpoint from
// `rank_state_bytes` (the most loaded rank's weights + optimizer states).
TrainingCost layout_training_cost(const JobSpec& job, double step_s, double tokens_per_s, double rank_state_bytes);

}  // namespace ptd
