// lt_standin_test_api.h — the seam between test_cublaslt_standin's two translation units:
// the device-layer test (test_cublaslt_standin.cpp) and its simulator side
// (test_cublaslt_standin_sim.cpp, PTD_CUDA_SIM). Plain types only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_gpu_test_api.h"

namespace ptd::engine {
struct EngineConfig;
}

namespace lt_standin_test {

// n random values in [-1, 1) of DTypeLt `type` (0 f32, 1 bf16, 2 f16).
void fill_random(void* p, int type, int64_t n, uint32_t seed);

// Every GEMM the engine makes for one micro-batch of `cfg`'s rank (forward, output head,
// backward, embedding), traced by the cuda-sim backend in shapes-only mode: real shapes and
// addresses, nothing computed. Returns "" or the error.
std::string model_gemms(const ptd::engine::EngineConfig& cfg, std::vector<cuda_gpu_test::GemmSpec>* out);

// Every kernel launch configuration the shapes-only runs have checked in this process, one
// line per launch site's kernel: "<kernel as written at the launch> <max threads per block>
// <max dynamic shared memory bytes> <launches>".
std::string launch_shapes_text();

}  // namespace lt_standin_test
