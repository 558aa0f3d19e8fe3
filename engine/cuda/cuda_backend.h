// cuda_backend.h — the factories of the CUDA compute backend (cuda_backend.cpp, compiled
// twice): ptd::cuda::sim::make_cuda_backend is the `cuda-sim` backend (the CUDA simulator,
// always built), ptd::cuda::dev::make_cuda_backend the `cuda` backend on a real device
// (built with ENABLE_CUDA only). No CUDA header here: host C++23 code includes it.
#pragma once

#include <memory>

namespace ptd::engine {
class Backend;
}

namespace ptd::cuda::sim {
// The simulated device has the ordinal 0 only.
std::unique_ptr<engine::Backend> make_cuda_backend(int device);
}  // namespace ptd::cuda::sim

namespace ptd::cuda::dev {
// Selects `device` (cudaSetDevice) for this thread and creates the streams and the
// cuBLASLt handle and workspace; a CUDA failure stops the process with its location.
std::unique_ptr<engine::Backend> make_cuda_backend(int device);
}  // namespace ptd::cuda::dev
