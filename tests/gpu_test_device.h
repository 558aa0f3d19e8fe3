// gpu_test_device.h — what a `gpu`-labelled test does when the CUDA runtime offers no device.
// It skips only where this machine has no NVIDIA GPU (nvidia-smi missing or listing none) or
// the GPUs were hidden on purpose (CUDA_VISIBLE_DEVICES empty or -1). Where nvidia-smi lists a
// GPU that the runtime cannot use — a driver older than the CUDA runtime needs (CUDA 13:
// R580 or newer), or a broken install — the test FAILS, naming the GPU, the driver and the
// CUDA version the test was built with: a skip would look green on exactly the machine where
// the GPU path has never run.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#ifndef PTD_CUDA_TOOLKIT_VERSION
#define PTD_CUDA_TOOLKIT_VERSION "unknown"
#endif

namespace gpu_test {

// The decision. `smi` is nvidia-smi's "name, driver_version" lines ("" when it is missing or
// failed), `runtime_error` why the CUDA runtime has no device, `cvd` CUDA_VISIBLE_DEVICES
// (null when unset). Returns "" to skip, else the failure message.
inline std::string unusable_gpu_failure(const std::string& smi, const std::string& runtime_error, const char* cvd,
                                        const std::string& cuda_version) {
    if (cvd && (std::string(cvd).empty() || std::string(cvd) == "-1")) return "";  // hidden on purpose
    std::string first;
    for (size_t at = 0; at < smi.size();) {
        const size_t end = smi.find('\n', at);
        std::string line = smi.substr(at, end == std::string::npos ? std::string::npos : end - at);
        at = end == std::string::npos ? smi.size() : end + 1;
        if (line.find(',') != std::string::npos) {
            first = line;
            break;
        }
    }
    if (first.empty()) return "";  // no NVIDIA GPU on this machine: skipping is right
    const size_t comma = first.find(',');
    std::string name = first.substr(0, comma), driver = first.substr(comma + 1);
    while (!driver.empty() && driver.front() == ' ') driver.erase(0, 1);
    return "nvidia-smi lists a GPU (" + name + ", driver " + driver + ") but the CUDA runtime cannot use it: " +
           runtime_error + ". This test was built with CUDA " + cuda_version +
           " (CUDA 13 needs driver R580 or newer; nvidia-smi's header shows the newest CUDA the driver supports). "
           "Update the driver or build against a CUDA the driver supports; a skip here would hide the GPU.";
}

// nvidia-smi's "name, driver_version" per GPU, or "" when it is missing or fails.
inline std::string nvidia_smi_gpus() {
    FILE* p = popen("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null", "r");
    if (!p) return "";
    std::string out;
    char buf[256];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    return pclose(p) == 0 ? out : "";
}

}  // namespace gpu_test

// Inside a test or SetUp, where the CUDA runtime gave no device for `reason`: fail when
// nvidia-smi sees a GPU (see above), else skip with the reason.
#define PTD_GPU_TEST_NO_DEVICE(reason)                                                                          \
    do {                                                                                                        \
        const std::string ptd_reason_ = (reason);                                                               \
        const std::string ptd_failure_ = gpu_test::unusable_gpu_failure(                                        \
            gpu_test::nvidia_smi_gpus(), ptd_reason_, std::getenv("CUDA_VISIBLE_DEVICES"), PTD_CUDA_TOOLKIT_VERSION); \
        if (!ptd_failure_.empty()) FAIL() << ptd_failure_;                                                      \
        GTEST_SKIP() << ptd_reason_;                                                                            \
    } while (0)
