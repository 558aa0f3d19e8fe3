// runtime_sim.cpp — runtime.h for the simulator: "device" memory is host memory (256-byte
// aligned, poisoned with 0xFF at allocation so a read of never-written device memory gives
// NaN), tracked in a table so copies and memsets check that their device side lies inside a
// live allocation and their host side does not; one device with a configurable capacity for
// mem_get_info; streams run synchronously, so events only record host time. Under memcheck
// (runtime.h) each allocation is its own mapping between two PROT_NONE guard pages. A graph
// capture records what is enqueued on the capturing stream as nodes (SimGraphNode) and
// refuses the calls a GPU refuses during a capture; graph_launch runs the nodes in order.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include "runtime.h"

namespace ptd::cuda::sim {

struct Stream {};
struct Event {
    bool recorded = false;
    std::chrono::steady_clock::time_point when;
};
struct Graph {
    std::vector<SimGraphNode> nodes;
};

namespace {

struct Allocation {
    size_t bytes;
    std::string tag;
    size_t reserved = 0;  // shapes only: the PROT_NONE mapping's length (0: host memory)
    // memcheck only: the mapping (front guard page, data pages, rear guard page); the data
    // pages hold the allocation and the canary bytes around it
    uintptr_t map_base = 0;
    size_t map_length = 0;
    uintptr_t data_lo() const { return map_base + kGuardPage; }
    uintptr_t data_hi() const { return map_base + map_length - kGuardPage; }
    static constexpr size_t kGuardPage = 4096;
};
std::atomic<bool> g_shapes_only{false};
struct State {
    std::mutex mutex;
    std::map<uintptr_t, Allocation> allocations;  // by start address
    size_t allocated = 0;
    size_t capacity = size_t{80} << 30;
    std::set<Stream*> streams;
    std::set<Event*> events;
    // graph capture: the stream that captures (nullptr: none), the graph it builds and the
    // first refused call, which invalidates the capture
    Stream* capture_stream = nullptr;
    Graph* capture_graph = nullptr;
    std::string capture_invalidated;
    std::set<Graph*> graphs;
};
std::atomic<bool> g_capture_active{false};  // State::capture_stream != nullptr, read without the lock
State& state() {
    static State s;
    return s;
}

Status error(int code, std::string message) { return Status{code, std::move(message)}; }

// The allocation containing [p, p + bytes), or nullptr. Caller holds the mutex.
const Allocation* find_range(State& s, const void* p, size_t bytes, uintptr_t* start = nullptr) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = s.allocations.upper_bound(a);
    if (it == s.allocations.begin()) return nullptr;
    --it;
    if (a < it->first || a + bytes > it->first + it->second.bytes) return nullptr;
    if (start) *start = it->first;
    return &it->second;
}
bool overlaps_device(State& s, const void* p, size_t bytes) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = s.allocations.upper_bound(a + (bytes ? bytes - 1 : 0));
    if (it == s.allocations.begin()) return false;
    --it;
    return it->first + it->second.bytes > a;
}
std::string hex(const void* p) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", p);
    return buf;
}
bool stream_ok(State& s, StreamHandle stream) { return stream == nullptr || s.streams.count(stream) != 0; }

// A call a GPU refuses while a stream captures (it would wait for the device, or change the
// memory the graph was captured against): the error, and the capture is invalidated.
// Caller holds the mutex.
Status refuse_during_capture(State& s, const std::string& call, const char* because) {
    if (!s.capture_stream) return {};
    std::string message = call + ": not permitted while stream " + hex(s.capture_stream) +
                          " captures a CUDA graph: it would " + because + "; the capture is invalidated";
    if (s.capture_invalidated.empty()) s.capture_invalidated = message;
    return error(kErrStreamCaptureUnsupported, std::move(message));
}
// Work enqueued on `stream`: recorded into the graph when `stream` captures (*recorded
// true), refused on the default stream while another stream captures (the legacy default
// stream would synchronise with it), otherwise left to the caller to run now. Caller holds
// the mutex.
Status record_locked(State& s, StreamHandle stream, SimGraphNode&& node, bool* recorded) {
    *recorded = false;
    if (!s.capture_stream) return {};
    if (stream == nullptr) {
        std::string message = node.what + ": enqueued on the default stream while stream " + hex(s.capture_stream) +
                              " captures a CUDA graph: the default stream would synchronise with it; the capture "
                              "is invalidated";
        if (s.capture_invalidated.empty()) s.capture_invalidated = message;
        return error(kErrStreamCaptureImplicit, std::move(message));
    }
    if (stream != s.capture_stream) return {};
    if (!s.capture_invalidated.empty())
        return error(kErrStreamCaptureInvalidated,
                     node.what + ": the capture was already invalidated by: " + s.capture_invalidated);
    s.capture_graph->nodes.push_back(std::move(node));
    *recorded = true;
    return {};
}

// Checks one side of a copy: device sides must lie inside one allocation, host sides outside all.
Status check_side(State& s, const void* p, size_t bytes, bool device, const char* call, const char* side) {
    if (bytes == 0) return {};
    if (!p) return error(kErrInvalidValue, std::string(call) + ": " + side + " is null");
    if (device) {
        if (!find_range(s, p, bytes))
            return error(kErrInvalidValue, std::string(call) + ": " + side + " " + hex(p) + " + " +
                                               std::to_string(bytes) + " bytes is not inside one device allocation");
    } else if (overlaps_device(s, p, bytes)) {
        return error(kErrInvalidValue, std::string(call) + ": " + side + " " + hex(p) +
                                           " is device memory but the copy kind says host");
    }
    return {};
}

// Streams and events are heap objects kept in a table of live handles (State::streams,
// State::events), so a stale or foreign handle is an error, as cudart reports it.
template <class T>
Status create_handle(std::set<T*> State::*live, T** out) {
    State& s = state();
    std::lock_guard lock(s.mutex);
    *out = new T;
    (s.*live).insert(*out);
    return {};
}
template <class T>
Status destroy_handle(std::set<T*> State::*live, T* handle, const char* unknown) {
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (!handle || !(s.*live).erase(handle)) return error(kErrInvalidResourceHandle, unknown);
    delete handle;
    return {};
}

}  // namespace

Status device_count(int* count) {
    *count = 1;
    return {};
}
Status set_device(int device) {
    if (device != 0)
        return error(101, "set_device(" + std::to_string(device) + "): the simulator has one device, 0");  // cudaErrorInvalidDevice
    return {};
}
Status device_synchronize() {
    State& s = state();
    std::lock_guard lock(s.mutex);
    return refuse_during_capture(s, "device_synchronize", "wait for the device");
}

Status mem_get_info(size_t* free_bytes, size_t* total_bytes) {
    State& s = state();
    std::lock_guard lock(s.mutex);
    *total_bytes = s.capacity;
    *free_bytes = s.capacity > s.allocated ? s.capacity - s.allocated : 0;
    return {};
}

Status malloc_device(void** ptr, size_t bytes, const char* tag) {
    *ptr = nullptr;
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (Status e = refuse_during_capture(s, "malloc_device(" + std::to_string(bytes) + " bytes, '" + (tag ? tag : "") + "')",
                                         "allocate device memory");
        !e.ok())
        return e;
    const size_t rounded = (bytes + 255) / 256 * 256;
    if (s.allocated + rounded > s.capacity)
        return error(kErrMemoryAllocation, "malloc_device(" + std::to_string(bytes) + " bytes, '" + (tag ? tag : "") +
                                               "'): out of memory, " + std::to_string(s.allocated) + " of " +
                                               std::to_string(s.capacity) + " bytes in use");
    if (g_shapes_only) {
        const size_t length = rounded == 0 ? 256 : rounded;
        void* r = mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (r == MAP_FAILED)
            return error(kErrMemoryAllocation, "malloc_device(" + std::to_string(bytes) + " bytes): no address space");
        s.allocations[reinterpret_cast<uintptr_t>(r)] = Allocation{bytes, tag ? tag : "", length};
        s.allocated += rounded;
        *ptr = r;
        return {};
    }
    if (const SimMemcheck mode = sim_memcheck(); mode != SimMemcheck::off) {
        sim_memcheck_install_handler();
        // [guard page][data pages: canary, the allocation, canary][guard page]
        const size_t guard = Allocation::kGuardPage;
        const size_t data = (std::max<size_t>(bytes, 1) + guard - 1) / guard * guard;
        void* m = mmap(nullptr, data + 2 * guard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            return error(kErrMemoryAllocation, "malloc_device(" + std::to_string(bytes) + " bytes, '" +
                                                   (tag ? tag : "") + "'): memcheck cannot map its pages");
        const uintptr_t base = reinterpret_cast<uintptr_t>(m);
        mprotect(m, guard, PROT_NONE);
        mprotect(reinterpret_cast<void*>(base + guard + data), guard, PROT_NONE);
        std::memset(reinterpret_cast<void*>(base + guard), 0xff, data);  // poison and canary alike
        const uintptr_t start = mode == SimMemcheck::start ? base + guard : base + guard + data - bytes;
        Allocation a{bytes, tag ? tag : ""};
        a.map_base = base;
        a.map_length = data + 2 * guard;
        s.allocations[start] = a;
        s.allocated += rounded;
        *ptr = reinterpret_cast<void*>(start);
        return {};
    }
    void* p = std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
    if (!p)
        return error(kErrMemoryAllocation,
                     "malloc_device(" + std::to_string(bytes) + " bytes, '" + (tag ? tag : "") + "'): host allocation failed");
    std::memset(p, 0xff, rounded == 0 ? 256 : rounded);  // poison: uninitialised device memory reads as NaN
    s.allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{bytes, tag ? tag : ""};
    s.allocated += rounded;
    *ptr = p;
    return {};
}

Status free_device(void* ptr) {
    if (!ptr) return {};
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (Status e = refuse_during_capture(s, "free_device(" + hex(ptr) + ")", "free device memory"); !e.ok()) return e;
    auto it = s.allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == s.allocations.end())
        return error(kErrInvalidValue, "free_device(" + hex(ptr) + "): not the start of a live device allocation");
    s.allocated -= (it->second.bytes + 255) / 256 * 256;
    const size_t reserved = it->second.reserved;
    const uintptr_t map_base = it->second.map_base;
    const size_t map_length = it->second.map_length;
    s.allocations.erase(it);
    if (reserved) munmap(ptr, reserved);
    else if (map_length) munmap(reinterpret_cast<void*>(map_base), map_length);  // a later access faults
    else std::free(ptr);
    return {};
}

Status memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind, StreamHandle stream) {
    State& s = state();
    {
        std::lock_guard lock(s.mutex);
        if (!stream_ok(s, stream)) return error(kErrInvalidResourceHandle, "memcpy_async: unknown stream");
        const bool dst_dev = kind == CopyKind::host_to_device || kind == CopyKind::device_to_device;
        const bool src_dev = kind == CopyKind::device_to_host || kind == CopyKind::device_to_device;
        if (Status e = check_side(s, dst, bytes, dst_dev, "memcpy", "dst"); !e.ok()) return e;
        if (Status e = check_side(s, src, bytes, src_dev, "memcpy", "src"); !e.ok()) return e;
        if (s.capture_stream) {
            const std::string what = "memcpy_async(dst " + hex(dst) + ", src " + hex(src) + ", " +
                                     std::to_string(bytes) + " bytes)";
            if (kind == CopyKind::device_to_host && (stream == s.capture_stream || stream == nullptr))
                return refuse_during_capture(s, what + " device to host",
                                             "hand the host bytes that only a replay of the graph produces");
            bool recorded = false;
            SimGraphNode node{"memcpy_async", {}, [=] { PTD_CUDA_CHECK(memcpy_async(dst, src, bytes, kind, nullptr)); }};
            sim_graph_fix(node, "dst", dst), sim_graph_fix(node, "src", src), sim_graph_fix(node, "bytes", bytes);
            sim_graph_fix(node, "kind", kind);
            if (Status e = record_locked(s, stream, std::move(node), &recorded); !e.ok() || recorded) return e;
        }
    }
    if (bytes && !g_shapes_only) std::memmove(dst, src, bytes);
    return {};
}
Status memcpy_sync(void* dst, const void* src, size_t bytes, CopyKind kind) {
    {
        State& s = state();
        std::lock_guard lock(s.mutex);
        if (Status e = refuse_during_capture(s, "memcpy_sync(dst " + hex(dst) + ", src " + hex(src) + ", " +
                                                    std::to_string(bytes) + " bytes)",
                                             "wait for the device");
            !e.ok())
            return e;
    }
    return memcpy_async(dst, src, bytes, kind, nullptr);
}
Status memset_async(void* dst, int value, size_t bytes, StreamHandle stream) {
    State& s = state();
    {
        std::lock_guard lock(s.mutex);
        if (!stream_ok(s, stream)) return error(kErrInvalidResourceHandle, "memset_async: unknown stream");
        if (Status e = check_side(s, dst, bytes, true, "memset", "dst"); !e.ok()) return e;
        if (s.capture_stream) {
            bool recorded = false;
            SimGraphNode node{"memset_async", {}, [=] { PTD_CUDA_CHECK(memset_async(dst, value, bytes, nullptr)); }};
            sim_graph_fix(node, "dst", dst), sim_graph_fix(node, "value", value), sim_graph_fix(node, "bytes", bytes);
            if (Status e = record_locked(s, stream, std::move(node), &recorded); !e.ok() || recorded) return e;
        }
    }
    if (bytes && !g_shapes_only) std::memset(dst, value, bytes);
    return {};
}

Status stream_create(StreamHandle* stream) { return create_handle(&State::streams, stream); }
Status stream_destroy(StreamHandle stream) {
    return destroy_handle(&State::streams, stream, "stream_destroy: unknown stream");
}
Status stream_synchronize(StreamHandle stream) {
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (!stream_ok(s, stream)) return error(kErrInvalidResourceHandle, "stream_synchronize: unknown stream");
    return refuse_during_capture(s, "stream_synchronize(" + hex(stream) + ")", "wait for the device");
}
Status event_create(EventHandle* event) { return create_handle(&State::events, event); }
Status event_destroy(EventHandle event) { return destroy_handle(&State::events, event, "event_destroy: unknown event"); }
Status event_record(EventHandle event, StreamHandle stream) {
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (!event || !s.events.count(event)) return error(kErrInvalidResourceHandle, "event_record: unknown event");
    if (!stream_ok(s, stream)) return error(kErrInvalidResourceHandle, "event_record: unknown stream");
    event->recorded = true;
    event->when = std::chrono::steady_clock::now();
    return {};
}
Status stream_wait_event(StreamHandle stream, EventHandle event) {
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (!event || !s.events.count(event)) return error(kErrInvalidResourceHandle, "stream_wait_event: unknown event");
    if (!stream_ok(s, stream)) return error(kErrInvalidResourceHandle, "stream_wait_event: unknown stream");
    return {};  // the recorded work is already done: streams run synchronously
}
Status event_synchronize(EventHandle event) {
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (!event || !s.events.count(event)) return error(kErrInvalidResourceHandle, "event_synchronize: unknown event");
    return refuse_during_capture(s, "event_synchronize(" + hex(event) + ")", "wait for the device");
}
Status event_elapsed_ms(float* ms, EventHandle start, EventHandle end) {
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (!start || !end || !s.events.count(start) || !s.events.count(end))
        return error(kErrInvalidResourceHandle, "event_elapsed_ms: unknown event");
    if (!start->recorded || !end->recorded)
        return error(kErrInvalidResourceHandle, "event_elapsed_ms: an event was never recorded");
    *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
    return {};
}

Status stream_begin_capture(StreamHandle stream) {
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (!stream || !s.streams.count(stream))
        return error(kErrInvalidResourceHandle, "stream_begin_capture: unknown stream (the default stream cannot capture)");
    if (s.capture_stream)
        return error(kErrStreamCaptureUnsupported, "stream_begin_capture(" + hex(stream) + "): stream " +
                                                       hex(s.capture_stream) + " is already capturing");
    s.capture_stream = stream;
    s.capture_graph = new Graph;
    s.capture_invalidated.clear();
    g_capture_active = true;
    return {};
}
Status stream_end_capture(StreamHandle stream, GraphHandle* graph) {
    *graph = nullptr;
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (!stream || stream != s.capture_stream)
        return error(kErrInvalidValue, "stream_end_capture(" + hex(stream) + "): the stream is not capturing");
    Graph* built = std::exchange(s.capture_graph, nullptr);
    s.capture_stream = nullptr;
    g_capture_active = false;
    if (!s.capture_invalidated.empty()) {
        delete built;
        return error(kErrStreamCaptureInvalidated,
                     "stream_end_capture: the capture was invalidated by: " + std::exchange(s.capture_invalidated, {}));
    }
    s.graphs.insert(built);
    *graph = built;
    return {};
}
Status graph_launch(GraphHandle graph, StreamHandle stream) {
    State& s = state();
    {
        std::lock_guard lock(s.mutex);
        if (!graph || !s.graphs.count(graph)) return error(kErrInvalidResourceHandle, "graph_launch: unknown graph");
        if (!stream_ok(s, stream)) return error(kErrInvalidResourceHandle, "graph_launch: unknown stream");
        if (s.capture_stream)
            return refuse_during_capture(s, "graph_launch(" + hex(graph) + ")",
                                         "nest one graph in another, which the simulator does not model");
    }
    for (const SimGraphNode& node : graph->nodes) node.run();  // in order: streams run synchronously
    return {};
}
Status graph_destroy(GraphHandle graph) {
    if (!graph) return {};
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (!s.graphs.erase(graph)) return error(kErrInvalidResourceHandle, "graph_destroy: unknown graph");
    delete graph;
    return {};
}
bool sim_capture_active() { return g_capture_active.load(std::memory_order_relaxed); }
Status sim_capture_node(StreamHandle stream, SimGraphNode node, bool* recorded) {
    State& s = state();
    std::lock_guard lock(s.mutex);
    return record_locked(s, stream, std::move(node), recorded);
}
size_t sim_graph_size(GraphHandle graph) { return graph ? graph->nodes.size() : 0; }
std::string sim_graph_difference(GraphHandle replayed, GraphHandle recaptured) {
    const auto hex_bytes = [](const std::vector<unsigned char>& b) {
        std::string out = "0x";
        char buf[3];
        for (size_t i = b.size(); i-- > 0;) {  // little-endian: the most significant byte first
            std::snprintf(buf, sizeof buf, "%02x", b[i]);
            out += buf;
        }
        return out;
    };
    const auto& a = replayed->nodes;
    const auto& b = recaptured->nodes;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        if (a[i].what != b[i].what)
            return "node " + std::to_string(i) + ": the graph has " + a[i].what + ", the new capture " + b[i].what;
        for (size_t j = 0; j < a[i].fixed.size() && j < b[i].fixed.size(); ++j)
            if (a[i].fixed[j] != b[i].fixed[j])
                return "node " + std::to_string(i) + " (" + a[i].what + "): " + a[i].fixed[j].first + " is " +
                       hex_bytes(b[i].fixed[j].second) + " now but " + hex_bytes(a[i].fixed[j].second) +
                       " in the graph, which baked it in at capture";
    }
    if (a.size() != b.size())
        return "the graph has " + std::to_string(a.size()) + " nodes, the new capture " + std::to_string(b.size());
    return {};
}

void sim_set_capacity(size_t bytes) {
    State& s = state();
    std::lock_guard lock(s.mutex);
    s.capacity = bytes;
}
size_t sim_allocated_bytes() {
    State& s = state();
    std::lock_guard lock(s.mutex);
    return s.allocated;
}
bool sim_is_device_range(const void* ptr, size_t bytes) {
    State& s = state();
    std::lock_guard lock(s.mutex);
    return find_range(s, ptr, bytes) != nullptr;
}

Status sync_check(const char*) { return {}; }  // every simulated op has finished when it returns

void sim_set_shapes_only(bool on) { g_shapes_only = on; }

namespace {
std::atomic<int> g_racecheck{-1};  // -1: not read from the environment yet
}
void sim_set_racecheck(bool on) { g_racecheck = on ? 1 : 0; }
bool sim_racecheck() {
    int v = g_racecheck.load();
    if (v < 0) {
        const char* env = std::getenv("PTD_CUDA_SIM_RACECHECK");
        if (!env || !*env || std::strcmp(env, "0") == 0) v = 0;
        else if (std::strcmp(env, "1") == 0) v = 1;
        else {
            std::fprintf(stderr, "ptd cuda-sim: PTD_CUDA_SIM_RACECHECK: got \"%s\"; allowed: 0 or unset (off), 1 (on)\n",
                         env);
            std::exit(2);
        }
        int expected = -1;
        g_racecheck.compare_exchange_strong(expected, v);
        v = g_racecheck.load();
    }
    return v == 1;
}
namespace {
std::atomic<int> g_memcheck{-1};  // -1: not read from the environment yet, else a SimMemcheck
}
bool sim_memcheck_mode(const char* value, SimMemcheck* mode, std::string* error) {
    if (!value || !*value || std::strcmp(value, "0") == 0) *mode = SimMemcheck::off;
    else if (std::strcmp(value, "1") == 0 || std::strcmp(value, "end") == 0) *mode = SimMemcheck::end;
    else if (std::strcmp(value, "start") == 0) *mode = SimMemcheck::start;
    else {
        if (error)
            *error = std::string("PTD_CUDA_SIM_MEMCHECK: got \"") + value +
                     "\"; allowed: 0 or unset (off), 1 or end (allocations end at a guard page), start (allocations "
                     "start at a guard page)";
        return false;
    }
    return true;
}
void sim_set_memcheck(SimMemcheck mode) { g_memcheck = (int)mode; }
SimMemcheck sim_memcheck() {
    int v = g_memcheck.load();
    if (v < 0) {
        SimMemcheck mode;
        std::string message;
        if (!sim_memcheck_mode(std::getenv("PTD_CUDA_SIM_MEMCHECK"), &mode, &message)) {
            std::fprintf(stderr, "ptd cuda-sim: %s\n", message.c_str());
            std::exit(2);
        }
        int expected = -1;
        g_memcheck.compare_exchange_strong(expected, (int)mode);
        v = g_memcheck.load();
    }
    return (SimMemcheck)v;
}

bool sim_describe_address(uintptr_t addr, char* out, size_t size) {
    // No lock: called from the fault handler of a process about to die. The launching thread
    // holds no runtime lock while a kernel runs.
    State& s = state();
    const Allocation* nearest = nullptr;
    uintptr_t nearest_start = 0, best = UINTPTR_MAX;
    for (const auto& [start, a] : s.allocations) {
        const uintptr_t end = start + a.bytes;
        const uintptr_t distance = addr < start ? start - addr : addr >= end ? addr - end + 1 : 0;
        if (distance < best) best = distance, nearest = &a, nearest_start = start;
    }
    if (!nearest) {
        std::snprintf(out, size, "address %#" PRIxPTR " is not near any device allocation (none is live)", addr);
        return false;
    }
    const Allocation& a = *nearest;
    const uintptr_t end = nearest_start + a.bytes;
    char where[160];
    if (addr >= end)
        std::snprintf(where, sizeof where, "%" PRIuPTR " bytes past the end", addr - end);
    else if (addr < nearest_start)
        std::snprintf(where, sizeof where, "%" PRIuPTR " bytes before the start", nearest_start - addr);
    else
        std::snprintf(where, sizeof where, "inside (offset %" PRIuPTR ")", addr - nearest_start);
    const bool mapped = a.map_length && addr >= a.map_base && addr < a.map_base + a.map_length;
    std::snprintf(out, size, "address %#" PRIxPTR " is %s of device allocation '%s' (base %#" PRIxPTR ", %zu bytes)%s",
                  addr, where, a.tag.c_str(), nearest_start, a.bytes,
                  mapped ? "" : "; it lies in no allocation's pages (a freed allocation, host memory or a wild pointer)");
    return mapped;
}

std::string sim_check_canaries() {
    State& s = state();
    std::lock_guard lock(s.mutex);
    for (const auto& [start, a] : s.allocations) {
        if (!a.map_length) continue;
        const auto check = [&](uintptr_t lo, uintptr_t hi, bool before) -> std::string {
            static const std::vector<unsigned char> canary(Allocation::kGuardPage, 0xff);  // slack < a page
            if (std::memcmp(reinterpret_cast<const void*>(lo), canary.data(), hi - lo) == 0) return {};
            for (uintptr_t p = lo; p < hi; ++p)
                if (*reinterpret_cast<const unsigned char*>(p) != 0xff) {
                    char buf[320];
                    std::snprintf(buf, sizeof buf,
                                  "a kernel wrote %" PRIuPTR " bytes %s of device allocation '%s' (base %#" PRIxPTR
                                  ", %zu bytes): the canary byte there is 0x%02x, not 0xff",
                                  before ? start - p : p - (start + a.bytes), before ? "before the start" : "past the end",
                                  a.tag.c_str(), start, a.bytes, *reinterpret_cast<const unsigned char*>(p));
                    return buf;
                }
            return {};
        };
        if (std::string e = check(a.data_lo(), start, true); !e.empty()) return e;
        if (std::string e = check(start + a.bytes, a.data_hi(), false); !e.empty()) return e;
    }
    return {};
}

size_t sim_gpu_alignment(const void* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    uintptr_t start = 0;
    {
        State& s = state();
        std::lock_guard lock(s.mutex);
        if (!find_range(s, p, 1, &start)) start = 0;
    }
    const uintptr_t offset = a - start;
    if (offset == 0 && start != 0) return 256;
    size_t alignment = 1;
    while (alignment < 256 && offset % (alignment * 2) == 0) alignment *= 2;
    return alignment;
}

std::vector<SimAllocation> sim_allocations() {
    State& s = state();
    std::lock_guard lock(s.mutex);
    std::vector<SimAllocation> out;
    for (const auto& [start, a] : s.allocations)
        if (!a.reserved) out.push_back({start, a.bytes, a.tag});
    return out;
}
bool sim_shapes_only() { return g_shapes_only; }

void check_failed(const Status& status, const char* expr, const char* file, int line) {
    std::fprintf(stderr, "%s:%d: %s failed (error %d): %s\n", file, line, expr, status.code, status.message.c_str());
    std::fflush(stderr);
    std::abort();
}

}  // namespace ptd::cuda::sim
