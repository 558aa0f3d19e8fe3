// bench_gpu.h — what bench_engine asks of a CUDA device: open it, time one bf16 GEMM through
// the engine's cuBLASLt layer (blaslt.h) with CUDA events (runtime.h), close it. Plain types
// only, so bench_engine.cpp (compiled once, C++23) can call both builds of bench_gpu.cpp:
//   bench_gpu::dev  the real runtime and cuBLASLt (only when the build has CUDA), and
//   bench_gpu::sim  the CUDA simulator and the cuBLASLt reference: the smoke row CI runs,
//                   whose figures measure the simulator, never a GPU.
#pragma once

#include <cstdint>
#include <string>

namespace bench_gpu {

struct DeviceInfo {
    std::string error;  // non-empty: no usable device (the CUDA runtime's own text)
    std::string name;   // "NVIDIA H100 80GB HBM3"; the simulator names itself
    std::string line;   // the device as `ptd-engine --devices` lists it
    int64_t free_bytes = 0, total_bytes = 0;  // cudaMemGetInfo once the context exists
};

// One GEMM as the engine's backend calls it, row-major: C[M,N] = op(A)[M,K]·op(B)[K,N] for
// `batch` independent products (strided, as attention's per-head GEMMs), bf16 A and B, f32
// accumulation. f32_accumulate: C is the fp32 main grad and the product adds into it
// (beta = 1, a weight gradient); otherwise C is bf16 and overwritten (an activation).
struct GemmCase {
    bool ta = false, tb = false;
    int64_t m = 0, n = 0, k = 0, batch = 1;
    bool f32_accumulate = false;
    double flop() const { return 2.0 * (double)m * (double)n * (double)k * (double)batch; }
};

// Best of `reps` timed repetitions; each repetition runs as many back-to-back calls as fill
// about `rep_ms` (sized from one timed call after the warm-up), timed by two CUDA events.
struct TimingPlan {
    int reps = 5;
    double rep_ms = 25;
};

struct GemmTiming {
    std::string error;  // non-empty: the call was refused or failed (lt_validate's or CUDA's message)
    double best_ms = 0;  // per call, best repetition
    int calls_per_rep = 0;
};

namespace sim {
DeviceInfo open_device();
GemmTiming time_gemm(const GemmCase& g, const TimingPlan& plan);
// Frees the cuBLASLt handles, workspaces and stream (the CUDA context stays: the runtime
// layer has no device reset, and its few hundred MiB are accounted in free_bytes).
void close_device();
}  // namespace sim

#ifdef PTD_BENCH_HAVE_CUDA
namespace dev {
DeviceInfo open_device();
GemmTiming time_gemm(const GemmCase& g, const TimingPlan& plan);
void close_device();
}  // namespace dev
#endif

}  // namespace bench_gpu
