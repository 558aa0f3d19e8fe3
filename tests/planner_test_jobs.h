// planner_test_jobs.h — the two planner-scale jobs whose layouts the planner-speed tests
// (test_pspeed, test_pspeed2) score by the thousand: Llama 3 70B on 64 H100 nodes with the
// cluster's NVLink SHARP (bench_planner's job, its 50 GB/s per GPU across nodes), and
// Mixtral 8x7B with expert parallelism — groups on and off the node, all-reduce and
// all-gather. Load them with job_test_util.h's job_from_text.
#pragma once

namespace ptd_test {

inline constexpr const char* kLlama70bPlannerJob = R"(
[model]
preset = "llama3-70b"

[cluster]
nodes = 64
gpus_per_node = 8
gpu = "h100-sxm"
inter_gbps = 50.0

[parallel]
tp = 8
pp = 4

[training]
micro_batch = 1
global_batch = 1024
)";

inline constexpr const char* kMixtralPlannerJob = R"(
[model]
preset = "mixtral-8x7b"

[cluster]
nodes = 16
gpus_per_node = 8
gpu = "h100-sxm"

[parallel]
tp = 2
pp = 4
ep = 8

[training]
micro_batch = 1
global_batch = 512
)";

}  // namespace ptd_test
