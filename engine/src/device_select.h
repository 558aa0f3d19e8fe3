// device_select.h — which compute backend and which GPU one ptd-engine rank uses
// (`ptd-engine --backend auto|cpu|cuda|cuda-sim`), decided by a pure function of the flag,
// the job's GPU preset, what this binary and machine offer and the environment, so every
// branch is unit-tested without a GPU; the one backend factory the trainer calls; and the
// GPU memory the engine cannot tag itself (CUDA context, NCCL buffers), computed from
// cudaMemGetInfo readings the CUDA runtime layer takes. Plain C++: no CUDA headers here.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ptd/common/diagnostic.h"

namespace ptd::engine {

class Backend;

// What `--backend` asks for. auto: CUDA for a job on a GPU preset when this binary has
// CUDA and a device is visible, else the CPU with a warning.
enum class BackendRequest { auto_select, cpu, cuda, cuda_sim };
// The backend a rank runs.
enum class BackendKind { cpu, cuda, cuda_sim };

const char* backend_request_name(BackendRequest r);  // "auto", "cpu", "cuda", "cuda-sim"
const char* backend_kind_name(BackendKind k);        // "cpu", "cuda", "cuda-sim"
// "auto", "cpu", "cuda" or "cuda-sim"; anything else is an error naming `where`, the
// value and what is allowed.
Result<BackendRequest> parse_backend_request(std::string_view text, const std::string& where = "--backend");

// What this binary and machine offer, as ptd-engine found out at start-up.
struct CudaProbe {
    bool built_with_cuda = false;  // the binary has the CUDA backend (ENABLE_CUDA at build time)
    int device_count = -1;         // devices visible to this process; -1 = the runtime failed
    std::string error;             // the CUDA runtime's error text when device_count < 0
};

struct BackendChoice {
    BackendKind kind = BackendKind::cpu;
    BackendRequest requested = BackendRequest::auto_select;
    int device = -1;               // CUDA device ordinal in this process; -1 unless kind == cuda
    std::string device_source;     // why this device: "LOCAL_RANK 3 (CUDA_VISIBLE_DEVICES unset)", …

    // "cpu", "cuda device 0 (CUDA_VISIBLE_DEVICES=3: the launcher's one device)", … for
    // the start-up line.
    std::string describe() const;
    // The metrics `start` event's "device" object (docs/metrics.md).
    nlohmann::json to_json() const;
};

// The decision. `gpu_preset` is the job's cluster.gpu name ("cpu" = a CPU job);
// `local_rank` is the rank's LOCAL_RANK (read_rank_env); `getenv_fn` reads
// CUDA_VISIBLE_DEVICES (null = std::getenv).
//   cpu      → cpu, whatever the job and machine;
//   cuda-sim → the CUDA simulator (host memory, no device);
//   cuda     → CUDA on this rank's device, or an error: no CUDA in this build (how to
//              build it), no device visible (the CUDA error text and CUDA_VISIBLE_DEVICES);
//   auto     → cpu for a "cpu" job; for a GPU job cuda as above, and where `cuda` would
//              fail for want of CUDA or a device, an error on cluster.gpu naming the GPU
//              the job asks for, what this host lacks, and --backend cpu as the way to
//              run the layout on CPUs on purpose (never a silent CPU run).
// The device: 0 when CUDA_VISIBLE_DEVICES names exactly one device (a scheduler narrowed
// it to the rank's GPU), else LOCAL_RANK (ptd launch keeps every GPU visible); one outside the visible devices is an error
// naming both (also under auto: a wrong mapping is not a reason to train on the CPU).
Result<BackendChoice> choose_backend(BackendRequest request, const std::string& gpu_preset, const CudaProbe& probe,
                                     int local_rank, const std::function<const char*(const char*)>& getenv_fn = {});

// Whether `world` ranks on `kind` have a communicator that can read their buffers: "" when
// they do, else the refusal (what was asked, what this binary lacks, what to do). The CUDA
// backend's buffers are device memory, which NCCL reads and Gloo (host memory) cannot: a
// binary built without NCCL refuses --backend cuda with more than one rank instead of
// handing device pointers to Gloo.
std::string multi_rank_refusal(BackendKind kind, int world, bool built_with_nccl);

// The one factory of compute backends. `threads` is for the CPU backend.
// cuda-sim is the CUDA backend under the simulator (engine/cuda/cuda_backend.cpp).
Result<std::unique_ptr<Backend>> make_backend(const BackendChoice& choice, int threads);

// ---- GPU memory the tagged allocator cannot see (issue 14, item 4) ------------------
// One cudaMemGetInfo reading (bytes). The CUDA runtime layer fills it; this file only
// computes with it.
struct DeviceMemInfo {
    int64_t free_bytes = 0;
    int64_t total_bytes = 0;
};

// Readings at the three points of start-up, in this order:
//   at_start     after the context exists (cudaSetDevice + cudaFree(0)), before any
//                allocation of ours;
//   before_comm  right before the NCCL communicators are created;
//   after_comm   right after they are (ncclCommInitRank allocates its buffers then).
struct DeviceMemReadings {
    std::optional<DeviceMemInfo> at_start, before_comm, after_comm;
};

// The metrics line's "device_memory" object:
//   cuda_context  = total − free at start: the CUDA context and everything else already
//                   resident on the device (other processes' memory too: on a shared GPU
//                   it over-counts, and the note says so);
//   nccl_buffers  = free(before_comm) − free(after_comm);
//   total         = the device's memory.
// A field is null with a "note" when its readings are missing or impossible (free >
// total, or free grew across communicator init, i.e. something else freed memory then).
struct DeviceMemAccounting {
    std::optional<int64_t> cuda_context_bytes, nccl_buffer_bytes, total_bytes;
    std::string note;  // "" when every field was measured
};
DeviceMemAccounting account_device_memory(const DeviceMemReadings& r);
nlohmann::json device_memory_json(const DeviceMemAccounting& a);

}  // namespace ptd::engine
