// cuda_devices.cu — enumerate CUDA devices through the runtime API (C++20, nvcc).
#include "cuda_devices.h"

#include <cstdio>

#include <cuda_runtime.h>

extern "C" int ptd_cuda_describe_devices(char* buf, size_t buf_size) {
    if (buf_size == 0) return -1;
    buf[0] = '\0';
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        std::snprintf(buf, buf_size, "%s:%d: cudaGetDeviceCount: %s", __FILE__, __LINE__, cudaGetErrorString(err));
        return -1;
    }
    size_t used = 0;
    for (int d = 0; d < count && used < buf_size; ++d) {
        cudaDeviceProp prop{};
        err = cudaGetDeviceProperties(&prop, d);
        if (err != cudaSuccess) {
            std::snprintf(buf, buf_size, "%s:%d: cudaGetDeviceProperties(%d): %s", __FILE__, __LINE__, d,
                          cudaGetErrorString(err));
            return -1;
        }
        int n = std::snprintf(buf + used, buf_size - used, "cuda:%d %s, %.1f GiB, sm_%d%d, %d SMs\n", d, prop.name,
                              prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), prop.major, prop.minor,
                              prop.multiProcessorCount);
        if (n < 0) break;
        used += (size_t)n;
    }
    return count;
}
