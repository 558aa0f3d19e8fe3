// blaslt_cuda.h — the real cuBLASLt layer's call on a handle and workspace the caller owns
// (ptd_cuda_dev only; includes cublasLt.h). lt_matmul uses it with its per-stream handle and
// device workspace; tests use it with the validating stand-in library (tests/cublaslt_standin)
// and host memory, so the exact descriptor, heuristic and fallback sequence runs without a GPU.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "blaslt.h"

namespace ptd::cuda::dev {

// lt_matmul's checks, descriptors, heuristic (told the pointers' alignment), candidate
// fallback and per-shape algorithm cache, on `handle` with `workspace`.
Status lt_matmul_on(const LtMatmul& p, cublasLtHandle_t handle, void* workspace, size_t workspace_bytes,
                    cudaStream_t stream);

// Drops every cached algorithm (a test that swaps libraries or handles starts clean).
void lt_forget_plans();

}  // namespace ptd::cuda::dev
