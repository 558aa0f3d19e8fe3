// cuda_backend.h — the factories of the CUDA compute backend (cuda_backend.cpp, compiled
// twice): ptd::cuda::sim::make_cuda_backend is the `cuda-sim` backend (the CUDA simulator,
// always built), ptd::cuda::dev::make_cuda_backend the `cuda` backend on a real device
// (built with ENABLE_CUDA only). No CUDA header here: host C++23 code includes it.
#pragma once

#include <memory>
#include <string>

namespace ptd::engine {
class Backend;
}

namespace ptd::cuda::sim {
// The simulated device has the ordinal 0 only. Null with *error set when the device
// cannot be used.
std::unique_ptr<engine::Backend> make_cuda_backend(int device, std::string* error);
}  // namespace ptd::cuda::sim

namespace ptd::cuda::dev {
// Selects `device` (cudaSetDevice) for this thread and creates the streams and the
// cuBLASLt handle and workspace. Null with *error set (the CUDA error text) when the device
// cannot be selected; a later CUDA failure stops the process with its location.
std::unique_ptr<engine::Backend> make_cuda_backend(int device, std::string* error);
}  // namespace ptd::cuda::dev
