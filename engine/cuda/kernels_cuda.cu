// kernels_cuda.cu — the device build of the CUDA backend's kernels: nvcc compiles every
// kernels/*.cuh here into namespace ptd::cuda::dev (dialect.cuh maps to CUDA). The same
// sources compile as host C++ for the simulator in kernels_sim.cpp.
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
