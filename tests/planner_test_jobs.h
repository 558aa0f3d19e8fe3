// planner_test_jobs.h — the planner-scale jobs whose layouts the planner-speed tests
// (schedule/fast_makespan.cpp, planner/kept_answers.cpp) score by the thousand: Llama 3 70B
// on 64 H100 nodes with the cluster's NVLink SHARP (bench_planner's job:
// assets/jobs/llama3-70b-h100-64nodes.toml, kLlama70bPlannerAsset), and Mixtral 8x7B with
// expert parallelism — groups on and off the node, all-reduce and all-gather (load it with
// job_test_util.h's job_from_text).
#pragma once

namespace ptd_test {

inline constexpr const char* kLlama70bPlannerAsset = "llama3-70b-h100-64nodes.toml";  // load_asset

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
