// runtime.h — the thin host-side layer over the CUDA runtime that the CUDA backend uses:
// device memory, copies, memset, streams, events, synchronisation and memory info.
// Two implementations behind one declaration: runtime_cuda.cpp calls cudart (namespace
// ptd::cuda::dev, built with ENABLE_CUDA), runtime_sim.cpp backs "device" memory with host
// memory and runs every stream synchronously (namespace ptd::cuda::sim, always built).
// A .cpp selects the simulator by defining PTD_CUDA_SIM before including this header.
// Kept C++20 and free of CUDA headers and <expected>: nvcc-compiled kernels include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#if defined(PTD_CUDA_SIM)
#include <cstring>
#include <functional>
#include <utility>
#endif

#if defined(PTD_CUDA_SIM)
#define PTD_CUDA_NS sim
namespace ptd::cuda::sim {
struct Stream;  // runtime_sim.cpp
struct Event;
struct Graph;
using StreamHandle = Stream*;
using EventHandle = Event*;
using GraphHandle = Graph*;
}  // namespace ptd::cuda::sim
#else
#define PTD_CUDA_NS dev
struct CUstream_st;  // = cudaStream_t / cudaEvent_t without including cuda_runtime.h
struct CUevent_st;
struct CUgraphExec_st;  // = cudaGraphExec_t
namespace ptd::cuda::dev {
using StreamHandle = CUstream_st*;
using EventHandle = CUevent_st*;
using GraphHandle = CUgraphExec_st*;
}  // namespace ptd::cuda::dev
#endif

namespace ptd::cuda::PTD_CUDA_NS {

// The result of a runtime call: code 0 is success; otherwise the CUDA error code (the sim
// uses the same numbers for the errors it can raise) and a message that names the call, its
// arguments and, in the real runtime, the file:line of the cudart call.
struct Status {
    int code = 0;
    std::string message;
    bool ok() const { return code == 0; }
};
// The error codes the simulator raises (cudaError_t's values).
enum : int {
    kErrInvalidValue = 1,        // cudaErrorInvalidValue
    kErrMemoryAllocation = 2,    // cudaErrorMemoryAllocation
    kErrInvalidDevicePointer = 17,  // cudaErrorInvalidDevicePointer
    kErrNoDevice = 100,          // cudaErrorNoDevice
    kErrInvalidResourceHandle = 400,  // cudaErrorInvalidResourceHandle
    kErrStreamCaptureUnsupported = 900,  // cudaErrorStreamCaptureUnsupported
    kErrStreamCaptureInvalidated = 901,  // cudaErrorStreamCaptureInvalidated
    kErrStreamCaptureImplicit = 906,     // cudaErrorStreamCaptureImplicit
};

enum class CopyKind { host_to_device, device_to_host, device_to_device, host_to_host };

// Devices. The sim has exactly one device, 0.
Status device_count(int* count);
Status set_device(int device);
Status device_synchronize();
// Free and total device memory. The sim reports capacity - allocated bytes against its
// configurable capacity (sim_set_capacity).
Status mem_get_info(size_t* free_bytes, size_t* total_bytes);

// Device memory: 256-byte aligned (as cudaMalloc). `tag` names the buffer in error messages
// and in the sim's allocation table.
Status malloc_device(void** ptr, size_t bytes, const char* tag);
Status free_device(void* ptr);  // nullptr is a no-op, as cudaFree

// Copies and memset: the *_async forms are ordered on `stream` (nullptr = the default
// stream); the plain forms complete before returning.
Status memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind, StreamHandle stream);
Status memcpy_sync(void* dst, const void* src, size_t bytes, CopyKind kind);
Status memset_async(void* dst, int value, size_t bytes, StreamHandle stream);

#if !defined(PTD_CUDA_SIM)
// Page-locked host memory (cudaHostAlloc): a copy from or to it is one asynchronous DMA on
// the stream, where from pageable memory cudaMemcpyAsync first stages the bytes through a
// driver buffer and returns only then. The price: a source must stay unchanged until the
// stream has passed the copy (the CUDA backend's host staging; the simulator build checks it
// by write-protecting the block meanwhile, cuda_backend.cpp).
Status malloc_host(void** ptr, size_t bytes);
Status free_host(void* ptr);  // nullptr is a no-op, as cudaFreeHost
#endif

// Streams and events. event_record + stream_wait_event order work across streams without
// blocking the host.
Status stream_create(StreamHandle* stream);
Status stream_destroy(StreamHandle stream);
Status stream_synchronize(StreamHandle stream);
Status event_create(EventHandle* event);  // timing enabled
Status event_destroy(EventHandle event);
Status event_record(EventHandle event, StreamHandle stream);
Status stream_wait_event(StreamHandle stream, EventHandle event);
Status event_synchronize(EventHandle event);
// Milliseconds between two recorded events (the sim: host time between the records).
Status event_elapsed_ms(float* ms, EventHandle start, EventHandle end);

// CUDA graphs: the work enqueued on `stream` between stream_begin_capture and
// stream_end_capture is recorded, not run — kernel launches with their grid, block and
// arguments by value (a pointer argument is the pointer: a replay reads and writes the same
// device addresses), copies and memsets — and stream_end_capture instantiates it as one
// graph that graph_launch replays on a stream with one launch. The capture is global
// (cudaStreamCaptureModeGlobal): while it runs, anything that would synchronise the host
// with the device (device/stream/event synchronize, memcpy_sync) or allocate or free
// device memory is refused with kErrStreamCaptureUnsupported and invalidates the capture,
// so stream_end_capture then fails with kErrStreamCaptureInvalidated naming the first
// refused call; a launch on the default stream while another stream captures is refused
// with kErrStreamCaptureImplicit. The simulator enforces these rules itself (cudart does on
// a GPU) and runs each recorded node at replay; it also refuses a device-to-host copy during
// capture — stricter than cudart, which records one into pinned memory — because the host
// could only read those bytes after a replay, never at capture time.
Status stream_begin_capture(StreamHandle stream);
Status stream_end_capture(StreamHandle stream, GraphHandle* graph);
Status graph_launch(GraphHandle graph, StreamHandle stream);
Status graph_destroy(GraphHandle graph);  // nullptr is a no-op

// PTD_CUDA_SYNC_CHECK=1: the device build waits for the device after every kernel launch,
// cuBLASLt call, copy and memset, so an asynchronous fault (an illegal address, a misaligned
// access) is reported naming the op that caused it instead of surfacing at the step's one
// download. "" or "0": off (the default). Parsed once per process; anything else is an error
// naming the variable, the value and what is allowed.
// sync_check_mode: 0 off, 1 on, -1 bad value (then *error says why).
inline int sync_check_mode(const char* value, std::string* error) {
    if (!value || !*value || std::string(value) == "0") return 0;
    if (std::string(value) == "1") return 1;
    if (error) *error = std::string("PTD_CUDA_SYNC_CHECK: got \"") + value + "\"; allowed: 0 or unset (off), 1 (on)";
    return -1;
}
// The check itself: ok when the mode is off or the device finished `what` cleanly; else the
// fault, naming `what` (the simulator runs every op synchronously: always ok there).
Status sync_check(const char* what);

#if defined(PTD_CUDA_SIM)
// Simulator only: the capacity mem_get_info reports and malloc_device enforces (default
// 80 GiB, an H100's), the bytes currently allocated, and whether ptr lies inside a live
// allocation of at least `bytes` bytes from ptr.
void sim_set_capacity(size_t bytes);
size_t sim_allocated_bytes();
bool sim_is_device_range(const void* ptr, size_t bytes);
// Simulator only, "shapes only": allocations reserve address space that faults when touched
// (PROT_NONE, nothing committed), copies and memsets move nothing, launches are checked but
// not run, and lt_matmul checks each call and appends it to a trace (blaslt.h,
// sim_take_lt_trace) instead of computing it — so every launch and GEMM the engine makes at
// a full model size takes microseconds, with the real addresses and alignments. Set it
// before the backend allocates; it is per process.
void sim_set_shapes_only(bool on);
bool sim_shapes_only();
// Simulator only, racecheck (PTD_CUDA_SIM_RACECHECK=1, or sim_set_racecheck): every launch
// runs three times from the same device memory — its blocks in the seeded order, in the
// reverse order, and interleaved (up to four blocks resident, one stretch between barriers
// of each in turn) — and every device allocation is compared bit for bit with the first; a
// difference (a block reads what another block writes, two blocks write one element, an
// atomic sum whose bits depend on the order) aborts naming the kernel, the order, the
// allocation, the offset and both bytes. Two copies of all device memory per launch: for tests.
void sim_set_racecheck(bool on);
bool sim_racecheck();
// Simulator only, memcheck (PTD_CUDA_SIM_MEMCHECK, or sim_set_memcheck before the first
// allocation): every device allocation is its own mapping between two PROT_NONE guard pages,
// so a kernel's load or store outside it faults, and the fault handler (sim.cpp) names the
// kernel, launch site, block, thread, the address and the nearest allocation, then the
// process dies. Two placements, because the guard pages are 4 KiB and an allocation can
// touch only one of them: `end` (PTD_CUDA_SIM_MEMCHECK=1 or end) puts the END of the
// requested size flush against the guard after it (the first byte past the end faults; the
// start is then only as aligned as the size allows, docs/engine.md), `start` puts the START
// flush against the guard before it (the byte before faults; 4096-byte aligned). The bytes
// between the allocation and its other guard hold a canary (0xFF) that is checked after every
// launch: a write there stops the process naming the kernel and the allocation. Reads there
// are caught only by the other placement.
enum class SimMemcheck : uint8_t { off, end, start };
// Installs the fault handler (sim.cpp) and this OS thread's alternate signal stack; called by
// every memcheck allocation and launch, so host code touching device memory is covered too.
void sim_memcheck_install_handler();
void sim_set_memcheck(SimMemcheck mode);
SimMemcheck sim_memcheck();
// Parses a PTD_CUDA_SIM_MEMCHECK value (unset, "" and "0": off; "1" and "end": end; "start");
// false with `error` naming the variable, the value and what is allowed.
bool sim_memcheck_mode(const char* value, SimMemcheck* mode, std::string* error);
// For the fault handler (async-signal context, no locks, no allocation): writes into `out`
// where `addr` lies relative to the nearest live device allocation (its tag, base, size and
// the offset past its end or before its start); false when `addr` is in no allocation's
// mapping (guards included) — then `out` names the nearest allocation, if any.
bool sim_describe_address(uintptr_t addr, char* out, size_t size);
// After a launch under memcheck: empty when every allocation's canary bytes are intact, else
// which allocation, which side and the offset of the first changed byte.
std::string sim_check_canaries();
// The alignment `p` would have on a GPU, where every allocation starts 256-byte aligned: the
// alignment of its offset from its allocation's start (at most 256); for an address outside
// every allocation, the address's own alignment. Under memcheck's `end` placement the two differ.
size_t sim_gpu_alignment(const void* p);
// The live device allocations (start, bytes, tag), for the racecheck's snapshots.
struct SimAllocation {
    uintptr_t start;
    size_t bytes;
    std::string tag;
};
std::vector<SimAllocation> sim_allocations();
// Simulator only, graph capture (above): whether any stream is capturing now (a cheap
// check every launch makes), and the recording of one launch, lt_matmul or other op
// enqueued on `stream`. sim_capture_node returns kErrStreamCaptureImplicit for the default
// stream while another stream captures, and false in *recorded when `stream` is not
// capturing (the caller then runs the op now). `what` names the op (the kernel and its
// launch site); `fixed` holds what the graph bakes in, each value named ("grid",
// "argument 2") with its bytes; `run` does the op at replay.
struct SimGraphNode {
    std::string what;
    std::vector<std::pair<std::string, std::vector<unsigned char>>> fixed;
    std::function<void()> run;
};
// Appends one baked-in value (its bytes) to a node's `fixed`.
template <class T>
void sim_graph_fix(SimGraphNode& node, std::string field, const T& value) {
    std::vector<unsigned char> bytes(sizeof value);
    std::memcpy(bytes.data(), &value, sizeof value);
    node.fixed.emplace_back(std::move(field), std::move(bytes));
}
bool sim_capture_active();
Status sim_capture_node(StreamHandle stream, SimGraphNode node, bool* recorded);
// The recorded nodes of a graph, in order (for tests and the replay check).
size_t sim_graph_size(GraphHandle graph);
// Where two graphs differ: empty when they have the same nodes with the same baked-in bytes,
// else the first node that differs, naming the op, the argument index and both values as
// bytes. A driver that captures micro-batch j again and compares it with the graph it
// replays detects a host value (a scale, a pointer) that changed since the capture.
std::string sim_graph_difference(GraphHandle replayed, GraphHandle recaptured);
#endif

// Prints "file:line: expr: message" and aborts when a Status is not ok — for callers where a
// runtime failure is fatal (llm.c's cudaCheck).
[[noreturn]] void check_failed(const Status& status, const char* expr, const char* file, int line);

}  // namespace ptd::cuda::PTD_CUDA_NS

#define PTD_CUDA_CHECK(expr)                                                                     \
    do {                                                                                         \
        const ::ptd::cuda::PTD_CUDA_NS::Status ptd_check_status_ = (expr);                      \
        if (!ptd_check_status_.ok())                                                             \
            ::ptd::cuda::PTD_CUDA_NS::check_failed(ptd_check_status_, #expr, __FILE__, __LINE__); \
    } while (0)
