// device_select.cpp — backend and device choice of one rank, the backend factory and the
// GPU memory accounting (device_select.h). Pure C++: the CUDA facts arrive as plain
// values (CudaProbe, DeviceMemInfo) so every branch is testable on a machine without one.
#include "device_select.h"

#include <cstdlib>

#include "ptd/engine/backend.h"
#include "cuda_backend.h"

namespace ptd::engine {

const char* backend_request_name(BackendRequest r) {
    switch (r) {
        case BackendRequest::auto_select: return "auto";
        case BackendRequest::cpu: return "cpu";
        case BackendRequest::cuda: return "cuda";
        case BackendRequest::cuda_sim: return "cuda-sim";
    }
    return "?";
}

const char* backend_kind_name(BackendKind k) {
    switch (k) {
        case BackendKind::cpu: return "cpu";
        case BackendKind::cuda: return "cuda";
        case BackendKind::cuda_sim: return "cuda-sim";
    }
    return "?";
}

Result<BackendRequest> parse_backend_request(std::string_view text, const std::string& where) {
    for (BackendRequest r : {BackendRequest::auto_select, BackendRequest::cpu, BackendRequest::cuda, BackendRequest::cuda_sim})
        if (text == backend_request_name(r)) return r;
    return fail({}, where, "got " + quote_input(text) + "; allowed: auto, cpu, cuda, cuda-sim");
}

namespace {

// How the message shows the variable: "CUDA_VISIBLE_DEVICES=3", "CUDA_VISIBLE_DEVICES unset".
std::string visible_devices_text(const char* cvd) {
    if (!cvd) return "CUDA_VISIBLE_DEVICES unset";
    return std::string("CUDA_VISIBLE_DEVICES=") + (*cvd ? quote_input(cvd) : "\"\" (no device)");
}

// Why CUDA cannot be used here, or "" when it can (built with CUDA, ≥ 1 device visible).
std::string cuda_unavailable_reason(const CudaProbe& probe, const char* cvd) {
    if (!probe.built_with_cuda)
        return "this ptd-engine was built without CUDA (CPU-only build: install the CUDA toolkit so that nvcc is "
               "on PATH or in /usr/local/cuda/bin, configure with -DENABLE_CUDA=ON and rebuild)";
    if (probe.device_count < 0)
        return "no CUDA device is usable: " + (probe.error.empty() ? std::string("the CUDA runtime failed") : probe.error) +
               " (" + visible_devices_text(cvd) + ")";
    if (probe.device_count == 0) return "no CUDA device is visible (" + visible_devices_text(cvd) + ")";
    return "";
}

// CUDA_VISIBLE_DEVICES names exactly one device: a scheduler or the user narrowed it to this rank's GPU.
bool names_one_device(const char* cvd) {
    if (!cvd) return false;
    std::string_view v(cvd);
    while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
    while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
    return !v.empty() && v.find(',') == std::string_view::npos;
}

}  // namespace

std::string multi_rank_refusal(BackendKind kind, int world, bool built_with_nccl) {
    if (kind != BackendKind::cuda || world <= 1 || built_with_nccl) return "";
    return "--backend cuda with " + std::to_string(world) +
           " ranks: this ptd-engine was built without NCCL (nccl.h and libnccl were not found under the CUDA "
           "toolkit when it was configured), and the CUDA backend's buffers are device memory that the Gloo "
           "communicator cannot read. Allowed: one rank with --backend cuda; more ranks with --backend cpu or "
           "cuda-sim; or rebuild with NCCL installed (docs/engine.md, \"The NCCL communicator\")";
}

Result<BackendChoice> choose_backend(BackendRequest request, const std::string& gpu_preset, const CudaProbe& probe,
                                     int local_rank, const std::function<const char*(const char*)>& getenv_fn) {
    const char* cvd = getenv_fn ? getenv_fn("CUDA_VISIBLE_DEVICES") : std::getenv("CUDA_VISIBLE_DEVICES");
    BackendChoice c;
    c.requested = request;
    switch (request) {
        case BackendRequest::cpu: c.kind = BackendKind::cpu; return c;
        case BackendRequest::cuda_sim: c.kind = BackendKind::cuda_sim; return c;
        case BackendRequest::auto_select:
            if (gpu_preset == "cpu") {
                c.kind = BackendKind::cpu;
                return c;
            }
            // A GPU job never drops to the CPU by itself: 64 ranks of a 70B job training on
            // a laptop's cores is a mistake, not a fallback. --backend cpu says it on purpose.
            if (std::string why = cuda_unavailable_reason(probe, cvd); !why.empty())
                return fail({}, "cluster.gpu",
                            "the job asks for GPU " + quote_input(gpu_preset) + ", but " + why +
                                "; allowed: run it where that GPU is, or --backend cpu to run the job's layout on "
                                "this host's CPUs on purpose (--backend cuda-sim: the CUDA simulator)");
            break;
        case BackendRequest::cuda:
            if (std::string why = cuda_unavailable_reason(probe, cvd); !why.empty())
                return fail({}, "--backend", "got \"cuda\", but " + why + "; allowed here: cpu, cuda-sim, or auto (the CPU with a warning)");
            break;
    }
    c.kind = BackendKind::cuda;
    if (names_one_device(cvd)) {
        c.device = 0;
        c.device_source = visible_devices_text(cvd) + ": the one device this rank sees";
        return c;
    }
    if (local_rank < 0 || local_rank >= probe.device_count)
        return fail({}, "LOCAL_RANK",
                    "got " + std::to_string(local_rank) + ", but " + std::to_string(probe.device_count) +
                        " CUDA device(s) are visible to this rank (" + visible_devices_text(cvd) +
                        "); allowed: LOCAL_RANK 0 .. " + std::to_string(probe.device_count - 1) +
                        " — one rank per GPU (ptd launch starts LOCAL_RANK 0 .. GPUs − 1 per host), or narrow "
                        "CUDA_VISIBLE_DEVICES to the rank's GPU");
    c.device = local_rank;
    c.device_source = "LOCAL_RANK " + std::to_string(local_rank) + " of " + std::to_string(probe.device_count) +
                      " visible device(s), " + visible_devices_text(cvd);
    return c;
}

std::string BackendChoice::describe() const {
    switch (kind) {
        case BackendKind::cpu: return "cpu";
        case BackendKind::cuda_sim: return "cuda-sim (the CUDA simulator, on the CPU)";
        case BackendKind::cuda: return "cuda device " + std::to_string(device) + " (" + device_source + ")";
    }
    return "?";
}

nlohmann::json BackendChoice::to_json() const {
    nlohmann::json j;
    j["backend"] = backend_kind_name(kind);
    j["requested"] = backend_request_name(requested);
    j["ordinal"] = kind == BackendKind::cuda ? nlohmann::json(device) : nlohmann::json(nullptr);
    j["source"] = device_source.empty() ? nlohmann::json(nullptr) : nlohmann::json(device_source);
    return j;
}

Result<std::unique_ptr<Backend>> make_backend(const BackendChoice& choice, int threads) {
    switch (choice.kind) {
        case BackendKind::cpu: return make_cpu_backend(threads);
        case BackendKind::cuda_sim:
        case BackendKind::cuda: {
            std::string error;
            std::unique_ptr<Backend> be;
            if (choice.kind == BackendKind::cuda_sim) be = ptd::cuda::sim::make_cuda_backend(0, &error);
#ifdef PTD_HAVE_CUDA
            else be = ptd::cuda::dev::make_cuda_backend(choice.device, &error);
#else
            else error = "this ptd-engine was built without CUDA; allowed: cpu, cuda-sim";
#endif
            if (!be)
                return fail({}, "--backend",
                            std::string("cannot start the ") + backend_kind_name(choice.kind) + " backend on " +
                                choice.describe() + ": " + error);
            return be;
        }
    }
    return fail({}, "--backend", "unknown backend kind");
}

DeviceMemAccounting account_device_memory(const DeviceMemReadings& r) {
    DeviceMemAccounting a;
    auto add_note = [&](const std::string& n) { a.note += (a.note.empty() ? "" : "; ") + n; };
    auto plausible = [](const DeviceMemInfo& m) { return m.total_bytes > 0 && m.free_bytes >= 0 && m.free_bytes <= m.total_bytes; };
    if (!r.at_start) {
        add_note("cuda_context: no cudaMemGetInfo reading at start-up");
    } else if (!plausible(*r.at_start)) {
        add_note("cuda_context: implausible reading at start-up (free " + std::to_string(r.at_start->free_bytes) +
                 " of total " + std::to_string(r.at_start->total_bytes) + " bytes)");
    } else {
        a.total_bytes = r.at_start->total_bytes;
        a.cuda_context_bytes = r.at_start->total_bytes - r.at_start->free_bytes;
    }
    if (!r.before_comm || !r.after_comm) {
        add_note("nccl_buffers: no cudaMemGetInfo readings around communicator init");
    } else if (!plausible(*r.before_comm) || !plausible(*r.after_comm)) {
        add_note("nccl_buffers: implausible reading around communicator init");
    } else if (r.after_comm->free_bytes > r.before_comm->free_bytes) {
        add_note("nccl_buffers: free memory grew by " + std::to_string(r.after_comm->free_bytes - r.before_comm->free_bytes) +
                 " bytes across communicator init (something else freed memory then); not measured");
    } else {
        a.nccl_buffer_bytes = r.before_comm->free_bytes - r.after_comm->free_bytes;
        if (!a.total_bytes) a.total_bytes = r.before_comm->total_bytes;
    }
    return a;
}

nlohmann::json device_memory_json(const DeviceMemAccounting& a) {
    auto opt = [](const std::optional<int64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
    return {{"cuda_context", opt(a.cuda_context_bytes)},
            {"nccl_buffers", opt(a.nccl_buffer_bytes)},
            {"total", opt(a.total_bytes)},
            {"note", a.note.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.note)}};
}

}  // namespace ptd::engine
