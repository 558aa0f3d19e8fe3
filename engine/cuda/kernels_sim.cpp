// kernels_sim.cpp — the simulator build of the CUDA backend's kernels: the very kernels/*.cuh
// sources nvcc compiles in kernels_cuda.cu, compiled as host C++ with PTD_CUDA_SIM, so
// dialect.cuh maps them onto the CPU simulator (engine/cuda/sim) in namespace ptd::cuda::sim.
#ifndef PTD_CUDA_SIM
#define PTD_CUDA_SIM 1
#endif

#include "kernels.h"

#include "kernels/elementwise.cuh"
#include "kernels/activations.cuh"
#include "kernels/norms.cuh"
#include "kernels/rope.cuh"

// ---- kernb ----
#include "kernels/attention.cuh"
#include "kernels/flash.cuh"
#include "kernels/xent.cuh"
#include "kernels/embedding.cuh"
#include "kernels/reduce.cuh"
#include "kernels/optimizer.cuh"
#include "kernels/bias.cuh"
