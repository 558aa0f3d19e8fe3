// runtime_cuda.cpp — runtime.h over cudart (ptd_cuda_dev, ENABLE_CUDA only). Every failing
// cudart call becomes a Status with the CUDA error code and "file:line: call: error text",
// so a caller that prints the Status points at the failing call here, and PTD_CUDA_CHECK
// adds the caller's own location (llm.c's cudaCheck, with the message kept).
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#include "runtime.h"

namespace ptd::cuda::dev {

namespace {
Status status_of(cudaError_t err, const char* call, const char* file, int line) {
    if (err == cudaSuccess) return {};
    cudaGetLastError();  // clear the sticky-free error so the next call is not blamed for it
    return Status{(int)err, std::string(file) + ":" + std::to_string(line) + ": " + call + ": " +
                                cudaGetErrorName(err) + ": " + cudaGetErrorString(err)};
}
#define PTD_CUDART(call) status_of((call), #call, __FILE__, __LINE__)

cudaMemcpyKind kind_of(CopyKind k) {
    switch (k) {
        case CopyKind::host_to_device: return cudaMemcpyHostToDevice;
        case CopyKind::device_to_host: return cudaMemcpyDeviceToHost;
        case CopyKind::device_to_device: return cudaMemcpyDeviceToDevice;
        case CopyKind::host_to_host: return cudaMemcpyHostToHost;
    }
    return cudaMemcpyDefault;
}
}  // namespace

Status device_count(int* count) {
    *count = 0;
    return PTD_CUDART(cudaGetDeviceCount(count));
}
Status set_device(int device) { return PTD_CUDART(cudaSetDevice(device)); }
Status device_synchronize() { return PTD_CUDART(cudaDeviceSynchronize()); }
Status mem_get_info(size_t* free_bytes, size_t* total_bytes) { return PTD_CUDART(cudaMemGetInfo(free_bytes, total_bytes)); }

Status malloc_device(void** ptr, size_t bytes, const char* tag) {
    *ptr = nullptr;
    Status s = PTD_CUDART(cudaMalloc(ptr, bytes));
    if (!s.ok()) s.message += " (" + std::to_string(bytes) + " bytes for '" + (tag ? tag : "") + "')";
    return s;
}
Status free_device(void* ptr) { return PTD_CUDART(cudaFree(ptr)); }
Status malloc_host(void** ptr, size_t bytes) {
    *ptr = nullptr;
    Status s = PTD_CUDART(cudaHostAlloc(ptr, bytes, cudaHostAllocDefault));
    if (!s.ok()) s.message += " (" + std::to_string(bytes) + " bytes of pinned host memory)";
    return s;
}
Status free_host(void* ptr) { return PTD_CUDART(cudaFreeHost(ptr)); }

Status sync_check(const char* what) {
    static const int mode = [] {
        std::string error;
        const int m = sync_check_mode(std::getenv("PTD_CUDA_SYNC_CHECK"), &error);
        if (m < 0) {
            std::fprintf(stderr, "ptd-engine: %s\n", error.c_str());
            std::exit(2);
        }
        return m;
    }();
    if (mode == 0) return {};
    const cudaError_t err = cudaDeviceSynchronize();
    if (err == cudaSuccess) return {};
    return Status{(int)err, std::string("PTD_CUDA_SYNC_CHECK=1: the device faulted in ") + what + ": " +
                                cudaGetErrorName(err) + ": " + cudaGetErrorString(err)};
}

Status memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind, StreamHandle stream) {
    if (Status s = PTD_CUDART(cudaMemcpyAsync(dst, src, bytes, kind_of(kind), stream)); !s.ok()) return s;
    return sync_check("memcpy_async");
}
Status memcpy_sync(void* dst, const void* src, size_t bytes, CopyKind kind) {
    return PTD_CUDART(cudaMemcpy(dst, src, bytes, kind_of(kind)));
}
Status memset_async(void* dst, int value, size_t bytes, StreamHandle stream) {
    if (Status s = PTD_CUDART(cudaMemsetAsync(dst, value, bytes, stream)); !s.ok()) return s;
    return sync_check("memset_async");
}

Status stream_create(StreamHandle* stream) { return PTD_CUDART(cudaStreamCreateWithFlags(stream, cudaStreamNonBlocking)); }
Status stream_destroy(StreamHandle stream) { return PTD_CUDART(cudaStreamDestroy(stream)); }
Status stream_synchronize(StreamHandle stream) { return PTD_CUDART(cudaStreamSynchronize(stream)); }
Status event_create(EventHandle* event) { return PTD_CUDART(cudaEventCreate(event)); }
Status event_destroy(EventHandle event) { return PTD_CUDART(cudaEventDestroy(event)); }
Status event_record(EventHandle event, StreamHandle stream) { return PTD_CUDART(cudaEventRecord(event, stream)); }
Status stream_wait_event(StreamHandle stream, EventHandle event) {
    return PTD_CUDART(cudaStreamWaitEvent(stream, event, 0));
}
Status event_synchronize(EventHandle event) { return PTD_CUDART(cudaEventSynchronize(event)); }
Status event_elapsed_ms(float* ms, EventHandle start, EventHandle end) {
    return PTD_CUDART(cudaEventElapsedTime(ms, start, end));
}

Status stream_begin_capture(StreamHandle stream) {
    return PTD_CUDART(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
}
Status stream_end_capture(StreamHandle stream, GraphHandle* graph) {
    *graph = nullptr;
    cudaGraph_t captured = nullptr;
    if (Status s = PTD_CUDART(cudaStreamEndCapture(stream, &captured)); !s.ok()) return s;
    Status s = PTD_CUDART(cudaGraphInstantiate(graph, captured, 0));
    cudaGraphDestroy(captured);  // the executable graph keeps what it needs
    return s;
}
Status graph_launch(GraphHandle graph, StreamHandle stream) {
    if (Status s = PTD_CUDART(cudaGraphLaunch(graph, stream)); !s.ok()) return s;
    return sync_check("graph_launch");
}
Status graph_destroy(GraphHandle graph) { return graph ? PTD_CUDART(cudaGraphExecDestroy(graph)) : Status{}; }

void check_failed(const Status& status, const char* expr, const char* file, int line) {
    std::fprintf(stderr, "%s:%d: %s failed (error %d): %s\n", file, line, expr, status.code, status.message.c_str());
    std::fflush(stderr);
    std::abort();
}

}  // namespace ptd::cuda::dev
