// nccl_comm.h — the NCCL communicator of ptd-engine's CUDA path: the Communicator
// interface (ptd/engine/comm.h) one call to one NCCL call. Built only when ENABLE_CUDA is
// on and NCCL (nccl.h, libnccl) is found under the CUDA toolkit (PTD_HAVE_NCCL).
//
// Streams: every operation of every group is enqueued on the one `comm_stream` passed to
// make_nccl_groups and returns without waiting for the device (except barrier(), which
// waits for its all-reduce). Ordering against compute is the CALLER's job: record an
// event on the compute stream after the producer and make the comm stream wait on it
// before the collective, and the reverse before a consumer reads the result
// (cudaEventRecord / cudaStreamWaitEvent). Buffers must stay untouched until then.
//
// Failure: a NCCL call that returns an error goes to the FailureHandler (does not
// return). A watchdog thread polls ncclCommGetAsyncError and the KV store's liveness
// verdict; on either it calls ncclCommAbort on every communicator of the rank, so no
// collective stays hung on a dead peer, and reports through the FailureHandler.
#pragma once

#include <cuda_runtime_api.h>

#include "nccl_id.h"
#include "ptd/engine/comm.h"

namespace ptd::engine {

// A fresh ncclGetUniqueId (works without a GPU); the error names NCCL's message.
Result<NcclUniqueIdBytes> nccl_new_unique_id();

// Every group of `rank` under `layout` as NCCL communicators on the current CUDA device
// (cudaSetDevice first), in make_gloo_groups' order (world, tp, pp, dp, embedding) and
// with its group numbering, each group's id exchanged through `store` (nccl_id.h). Size-1
// groups are self communicators. The watchdog polls store.abort_reason. Errors (id
// exchange timeout, ncclCommInitRank failing) are returned, naming the group. `store`
// must outlive the groups (the watchdog reads it until the last group is destroyed).
Result<CommGroups> make_nccl_groups(KvClient& store, const RankLayout& layout, int rank, const CommOptions& options,
                                    FailureHandler on_failure, cudaStream_t comm_stream);

// One communicator: exchanges the group's id through `store`, ncclCommInitRank on the
// current device, watched by the process's watchdog. `members.size()` may be 1 (a real
// NCCL communicator of one rank; make_nccl_groups uses self communicators there).
// `barrier_scratch` is one device float the barrier reduces (shared by all groups).
Result<std::unique_ptr<Communicator>> make_nccl_communicator(KvClient& store, const NcclGroupKey& key,
                                                             const CommOptions& options, FailureHandler on_failure,
                                                             cudaStream_t comm_stream, float* barrier_scratch);

// Abort every NCCL communicator of this process now (idempotent; false when there was
// nothing left to abort). For the store monitor's abort callback, before it exits: a
// collective then cannot keep the GPU busy waiting for a peer that is gone.
bool abort_nccl_communicators(const std::string& why);

}  // namespace ptd::engine
