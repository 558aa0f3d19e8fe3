// cuda_devices.h — the CUDA backend's device query (built only when ENABLE_CUDA is on).
// Plain C interface so host code compiled as C++23 can call into the C++20 .cu file.
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Writes one line per visible CUDA device ("cuda:0 NVIDIA H100 80GB HBM3, 79.1 GiB,
// sm_90, 132 SMs") into buf. Returns the device count, or -1 with the CUDA error text in
// buf when the runtime or driver is unavailable.
int ptd_cuda_describe_devices(char* buf, size_t buf_size);

#ifdef __cplusplus
}
#endif
