// test_device_select.cpp — `ptd-engine --backend` and the device of each rank
// (engine/src/device_select.h): every branch of the pure choice function, the backend
// factory, the GPU memory accounting, and the engine binary's flag as a process.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <map>
#include <string>

#include "device_select.h"
#include "gpu_test_device.h"
#include "ptd/engine/backend.h"

using namespace ptd::engine;

namespace {

// A fake environment: only the variables in `vars` are set.
std::function<const char*(const char*)> env_of(std::map<std::string, std::string> vars) {
    auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
    return [shared](const char* name) -> const char* {
        auto it = shared->find(name);
        return it == shared->end() ? nullptr : it->second.c_str();
    };
}

const auto kNoEnv = env_of({});
const CudaProbe kNoCudaBuild{false, -1, ""};
const CudaProbe kNoDriver{true, -1, "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version"};
const CudaProbe kZeroDevices{true, 0, ""};
const CudaProbe kFourGpus{true, 4, ""};
const CudaProbe kOneGpu{true, 1, ""};

std::string message(const ptd::Error& e) { return e.str(); }

}  // namespace

TEST(BackendRequest, ParsesEveryNameAndRejectsOthers) {
    EXPECT_EQ(*parse_backend_request("auto"), BackendRequest::auto_select);
    EXPECT_EQ(*parse_backend_request("cpu"), BackendRequest::cpu);
    EXPECT_EQ(*parse_backend_request("cuda"), BackendRequest::cuda);
    EXPECT_EQ(*parse_backend_request("cuda-sim"), BackendRequest::cuda_sim);
    auto bad = parse_backend_request("gpu");
    ASSERT_FALSE(bad);
    EXPECT_NE(message(bad.error()).find("--backend: got \"gpu\"; allowed: auto, cpu, cuda, cuda-sim"), std::string::npos)
        << message(bad.error());
    EXPECT_FALSE(parse_backend_request("CUDA"));
    EXPECT_FALSE(parse_backend_request(""));
}

TEST(ChooseBackend, CpuIsCpuWhateverTheJobAndMachine) {
    for (const CudaProbe& p : {kNoCudaBuild, kNoDriver, kFourGpus}) {
        auto c = choose_backend(BackendRequest::cpu, "h100-sxm", p, 3, kNoEnv);
        ASSERT_TRUE(c);
        EXPECT_EQ(c->kind, BackendKind::cpu);
        EXPECT_EQ(c->device, -1);
    }
}

TEST(ChooseBackend, CudaSimNeedsNoDevice) {
    auto c = choose_backend(BackendRequest::cuda_sim, "h100-sxm", kNoCudaBuild, 0, kNoEnv);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->kind, BackendKind::cuda_sim);
    EXPECT_EQ(c->device, -1);
    EXPECT_EQ(c->to_json()["backend"], "cuda-sim");
}

TEST(ChooseBackend, AutoOnACpuJobIsCpuEvenWithGpus) {
    auto c = choose_backend(BackendRequest::auto_select, "cpu", kFourGpus, 0, kNoEnv);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->kind, BackendKind::cpu);
}

TEST(ChooseBackend, AutoOnAGpuJobPicksCudaAndTheLocalRanksDevice) {
    auto c = choose_backend(BackendRequest::auto_select, "h100-sxm", kFourGpus, 2, kNoEnv);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->kind, BackendKind::cuda);
    EXPECT_EQ(c->device, 2);
    EXPECT_EQ(c->device_source, "LOCAL_RANK 2 of 4 visible device(s), CUDA_VISIBLE_DEVICES unset");
    EXPECT_EQ(c->describe(), "cuda device 2 (LOCAL_RANK 2 of 4 visible device(s), CUDA_VISIBLE_DEVICES unset)");
    const auto j = c->to_json();
    EXPECT_EQ(j["backend"], "cuda");
    EXPECT_EQ(j["requested"], "auto");
    EXPECT_EQ(j["ordinal"], 2);
    EXPECT_FALSE(j.contains("fallback"));
}

// A GPU job where this host has no usable GPU refuses under auto, naming the GPU the job
// asks for, what the host lacks and --backend cpu, the explicit way (issue 28 point 6).
TEST(ChooseBackend, AutoOnAGpuJobRefusesWhenBuiltWithoutCuda) {
    auto c = choose_backend(BackendRequest::auto_select, "h100-sxm", kNoCudaBuild, 0, kNoEnv);
    ASSERT_FALSE(c);
    const std::string m = message(c.error());
    EXPECT_NE(m.find("cluster.gpu: the job asks for GPU \"h100-sxm\", but "), std::string::npos) << m;
    EXPECT_NE(m.find("built without CUDA"), std::string::npos) << m;
    EXPECT_NE(m.find("-DENABLE_CUDA=ON"), std::string::npos) << m;  // how to build it
    EXPECT_NE(m.find("--backend cpu to run the job's layout on this host's CPUs on purpose"), std::string::npos) << m;
}

TEST(ChooseBackend, AutoOnAGpuJobRefusesWithTheCudaErrorAndVisibleDevicesWhenNoDevice) {
    auto c = choose_backend(BackendRequest::auto_select, "a100-80gb", kNoDriver, 0, env_of({{"CUDA_VISIBLE_DEVICES", "1"}}));
    ASSERT_FALSE(c);
    EXPECT_NE(message(c.error()).find("CUDA driver version is insufficient"), std::string::npos) << message(c.error());
    EXPECT_NE(message(c.error()).find("CUDA_VISIBLE_DEVICES=\"1\""), std::string::npos) << message(c.error());

    auto none = choose_backend(BackendRequest::auto_select, "h100-sxm", kZeroDevices, 0, env_of({{"CUDA_VISIBLE_DEVICES", ""}}));
    ASSERT_FALSE(none);
    EXPECT_NE(message(none.error()).find("no CUDA device is visible (CUDA_VISIBLE_DEVICES=\"\" (no device))"),
              std::string::npos)
        << message(none.error());
    // The CPU job and the explicit CPU request are untouched.
    EXPECT_TRUE(choose_backend(BackendRequest::auto_select, "cpu", kNoCudaBuild, 0, kNoEnv));
    EXPECT_TRUE(choose_backend(BackendRequest::cpu, "h100-sxm", kNoCudaBuild, 0, kNoEnv));
}

TEST(ChooseBackend, ExplicitCudaWithoutCudaOrDeviceIsAnError) {
    auto no_build = choose_backend(BackendRequest::cuda, "h100-sxm", kNoCudaBuild, 0, kNoEnv);
    ASSERT_FALSE(no_build);
    EXPECT_NE(message(no_build.error()).find("--backend: got \"cuda\", but this ptd-engine was built without CUDA"),
              std::string::npos)
        << message(no_build.error());

    auto no_driver = choose_backend(BackendRequest::cuda, "h100-sxm", kNoDriver, 0, kNoEnv);
    ASSERT_FALSE(no_driver);
    EXPECT_NE(message(no_driver.error()).find("CUDA driver version is insufficient"), std::string::npos);
    EXPECT_NE(message(no_driver.error()).find("CUDA_VISIBLE_DEVICES unset"), std::string::npos);

    auto zero = choose_backend(BackendRequest::cuda, "cpu", kZeroDevices, 0, kNoEnv);
    ASSERT_FALSE(zero);
    EXPECT_NE(message(zero.error()).find("no CUDA device is visible"), std::string::npos);
}

// The gpu tests' rule (gpu_test_device.h): no NVIDIA GPU, or GPUs hidden on purpose → skip;
// nvidia-smi lists a GPU the CUDA runtime cannot use → a failure naming GPU, driver, CUDA.
TEST(GpuTestDevice, FailsWhenNvidiaSmiSeesAGpuTheRuntimeCannotUse) {
    const std::string smi = "NVIDIA H100 80GB HBM3, 550.54.15\n";
    const std::string f = gpu_test::unusable_gpu_failure(smi, "CUDA driver version is insufficient for CUDA runtime version",
                                                         nullptr, "13.0.88");
    EXPECT_NE(f.find("nvidia-smi lists a GPU (NVIDIA H100 80GB HBM3, driver 550.54.15)"), std::string::npos) << f;
    EXPECT_NE(f.find("CUDA driver version is insufficient"), std::string::npos) << f;
    EXPECT_NE(f.find("built with CUDA 13.0.88"), std::string::npos) << f;
    EXPECT_NE(f.find("R580"), std::string::npos) << f;
    EXPECT_EQ(gpu_test::unusable_gpu_failure("", "no driver", nullptr, "13.0"), "");       // no GPU: skip
    EXPECT_EQ(gpu_test::unusable_gpu_failure(smi, "no device", "", "13.0"), "");           // hidden: skip
    EXPECT_EQ(gpu_test::unusable_gpu_failure(smi, "no device", "-1", "13.0"), "");
    EXPECT_NE(gpu_test::unusable_gpu_failure(smi, "no device", "0", "13.0"), "");          // visible yet unusable
}

// A CUDA build without NCCL would hand device pointers to Gloo: more than one rank on the
// CUDA backend is refused, naming what is missing and what to do; everything else passes.
TEST(MultiRankBackend, CudaWithoutNcclRefusesMoreThanOneRank) {
    const std::string no = multi_rank_refusal(BackendKind::cuda, 8, false);
    EXPECT_NE(no.find("--backend cuda with 8 ranks: this ptd-engine was built without NCCL"), std::string::npos) << no;
    EXPECT_NE(no.find("one rank with --backend cuda"), std::string::npos) << no;
    EXPECT_NE(no.find("rebuild with NCCL"), std::string::npos) << no;
    EXPECT_EQ(multi_rank_refusal(BackendKind::cuda, 1, false), "");
    EXPECT_EQ(multi_rank_refusal(BackendKind::cuda, 8, true), "");
    EXPECT_EQ(multi_rank_refusal(BackendKind::cuda_sim, 8, false), "");  // host memory: Gloo reads it
    EXPECT_EQ(multi_rank_refusal(BackendKind::cpu, 8, false), "");
}

TEST(ChooseBackend, ExplicitCudaOnACpuJobUsesTheDevice) {
    auto c = choose_backend(BackendRequest::cuda, "cpu", kOneGpu, 0, kNoEnv);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->kind, BackendKind::cuda);
    EXPECT_EQ(c->device, 0);
}

TEST(ChooseBackend, OneVisibleDeviceMeansDeviceZeroWhateverTheLocalRank) {
    // ptd launch narrows CUDA_VISIBLE_DEVICES to the rank's GPU: LOCAL_RANK 5 sees one device.
    for (const char* cvd : {"5", " 5 ", "GPU-8f3c2a10-1b2c-4d5e-8f90-0123456789ab"}) {
        auto c = choose_backend(BackendRequest::cuda, "h100-sxm", kOneGpu, 5, env_of({{"CUDA_VISIBLE_DEVICES", cvd}}));
        ASSERT_TRUE(c) << cvd << ": " << message(c.error());
        EXPECT_EQ(c->device, 0) << cvd;
        EXPECT_NE(c->device_source.find("the one device this rank sees"), std::string::npos) << c->device_source;
    }
}

TEST(ChooseBackend, SeveralVisibleDevicesAreIndexedByLocalRank) {
    auto c = choose_backend(BackendRequest::auto_select, "h100-sxm", kFourGpus, 3, env_of({{"CUDA_VISIBLE_DEVICES", "4,5,6,7"}}));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->device, 3);
    EXPECT_NE(c->device_source.find("CUDA_VISIBLE_DEVICES=\"4,5,6,7\""), std::string::npos) << c->device_source;
}

TEST(ChooseBackend, LocalRankOutsideTheVisibleDevicesIsAnErrorNamingBoth) {
    for (BackendRequest r : {BackendRequest::cuda, BackendRequest::auto_select}) {
        auto c = choose_backend(r, "h100-sxm", kFourGpus, 5, env_of({{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}}));
        ASSERT_FALSE(c) << backend_request_name(r);
        const std::string m = message(c.error());
        EXPECT_NE(m.find("LOCAL_RANK: got 5, but 4 CUDA device(s) are visible"), std::string::npos) << m;
        EXPECT_NE(m.find("CUDA_VISIBLE_DEVICES=\"0,1,2,3\""), std::string::npos) << m;
        EXPECT_NE(m.find("allowed: LOCAL_RANK 0 .. 3"), std::string::npos) << m;
    }
}

TEST(MakeBackend, EachKindMakesItsBackendAndAMissingDeviceIsAnErrorNotACrash) {
    BackendChoice cpu;
    auto be = make_backend(cpu, 1);
    ASSERT_TRUE(be);
    EXPECT_STREQ((*be)->name(), "cpu");
    BackendChoice sim;
    sim.kind = BackendKind::cuda_sim;
    sim.device = 0;
    auto s = make_backend(sim, 1);
    ASSERT_TRUE(s) << s.error().str();
    EXPECT_STREQ((*s)->name(), "cuda-sim");
    // A real CUDA backend on a device that is not there (here: no GPU at all; on a GPU
    // machine: an ordinal past the last device) is a clean error naming the backend.
    BackendChoice cuda;
    cuda.kind = BackendKind::cuda;
    cuda.device = 4096;
    auto none = make_backend(cuda, 1);
    ASSERT_FALSE(none);
    EXPECT_NE(none.error().str().find("cannot start the cuda backend"), std::string::npos) << none.error().str();
}

// ---- GPU memory accounting -------------------------------------------------------------

TEST(DeviceMemory, ContextIsTotalMinusFreeAtStartAndNcclIsTheDropAcrossInit) {
    constexpr int64_t GiB = 1LL << 30, MiB = 1LL << 20;
    DeviceMemReadings r;
    r.at_start = DeviceMemInfo{80 * GiB - 530 * MiB, 80 * GiB};
    r.before_comm = DeviceMemInfo{70 * GiB, 80 * GiB};  // our allocations happened in between
    r.after_comm = DeviceMemInfo{70 * GiB - 610 * MiB, 80 * GiB};
    const DeviceMemAccounting a = account_device_memory(r);
    ASSERT_TRUE(a.cuda_context_bytes && a.nccl_buffer_bytes && a.total_bytes);
    EXPECT_EQ(*a.cuda_context_bytes, 530 * MiB);
    EXPECT_EQ(*a.nccl_buffer_bytes, 610 * MiB);
    EXPECT_EQ(*a.total_bytes, 80 * GiB);
    EXPECT_EQ(a.note, "");
    const auto j = device_memory_json(a);
    EXPECT_EQ(j["cuda_context"], 530 * MiB);
    EXPECT_EQ(j["nccl_buffers"], 610 * MiB);
    EXPECT_EQ(j["total"], 80 * GiB);
    EXPECT_TRUE(j["note"].is_null());
}

TEST(DeviceMemory, NoCommunicatorInitMeansNoNcclFigureAndANote) {
    DeviceMemReadings r;
    r.at_start = DeviceMemInfo{900, 1000};
    const DeviceMemAccounting a = account_device_memory(r);
    EXPECT_EQ(a.cuda_context_bytes, 100);
    EXPECT_FALSE(a.nccl_buffer_bytes);
    EXPECT_NE(a.note.find("nccl_buffers: no cudaMemGetInfo readings"), std::string::npos) << a.note;
    EXPECT_TRUE(device_memory_json(a)["nccl_buffers"].is_null());
}

TEST(DeviceMemory, ImpossibleReadingsAreNotMeasuredNotClamped) {
    DeviceMemReadings r;
    r.at_start = DeviceMemInfo{1200, 1000};     // free > total
    r.before_comm = DeviceMemInfo{500, 1000};
    r.after_comm = DeviceMemInfo{700, 1000};    // free grew across init
    const DeviceMemAccounting a = account_device_memory(r);
    EXPECT_FALSE(a.cuda_context_bytes);
    EXPECT_FALSE(a.nccl_buffer_bytes);
    EXPECT_NE(a.note.find("implausible reading at start-up (free 1200 of total 1000 bytes)"), std::string::npos) << a.note;
    EXPECT_NE(a.note.find("free memory grew by 200 bytes"), std::string::npos) << a.note;

    DeviceMemReadings none;
    const DeviceMemAccounting b = account_device_memory(none);
    EXPECT_FALSE(b.cuda_context_bytes || b.nccl_buffer_bytes || b.total_bytes);
    EXPECT_NE(b.note.find("cuda_context: no cudaMemGetInfo reading at start-up"), std::string::npos) << b.note;
}

// ---- the engine binary -----------------------------------------------------------------

namespace {

struct Proc {
    int rc = -1;
    std::string out;
};

Proc run(const std::string& cmd) {
    Proc p;
    FILE* f = popen((cmd + " 2>&1").c_str(), "r");
    if (!f) return p;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) p.out.append(buf.data(), n);
    int st = pclose(f);
    p.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return p;
}

const std::string kEngine = std::string(PTD_BIN_DIR) + "/ptd-engine";
const std::string kTinyJob = std::string(PTD_SOURCE_DIR) + "/assets/jobs/tiny-local.toml";
// The tiny job as one rank on a GPU preset (fp32: the job then trains on the CPU too).
const std::string kOneRank = " --set cluster.gpus_per_node=1 --set parallel.tp=1 --set parallel.pp=1 "
                             "--set training.precision=fp32 --steps 1 --run-dir " +
                             std::string(PTD_BIN_DIR) + "/../test_device_select_run";

}  // namespace

TEST(EngineBackendFlag, BadValueIsAUsageErrorNamingTheFlag) {
    Proc p = run(kEngine + " --job " + kTinyJob + " --backend gpu");
    EXPECT_EQ(p.rc, 2) << p.out;
    EXPECT_NE(p.out.find("--backend: got \"gpu\"; allowed: auto, cpu, cuda, cuda-sim"), std::string::npos) << p.out;
}

TEST(EngineBackendFlag, ListDevicesStillWorks) {
    Proc p = run(kEngine + " --list-devices");
    EXPECT_EQ(p.rc, 0) << p.out;
    EXPECT_NE(p.out.find("cpu"), std::string::npos) << p.out;
}

TEST(EngineBackendFlag, StartEventCarriesTheBackendAndDevice) {
    Proc p = run("WORLD_SIZE=1 RANK=0 " + kEngine + " --job " + kTinyJob + kOneRank + " --backend cpu");
    ASSERT_EQ(p.rc, 0) << p.out;
    EXPECT_NE(p.out.find("\"device\":{\"backend\":\"cpu\",\"ordinal\":null,\"requested\":\"cpu\""),
              std::string::npos)
        << p.out;
    EXPECT_NE(p.out.find(", backend cpu\n"), std::string::npos) << p.out;  // the start-up line
}

// This machine has no usable GPU (or a CPU-only build): auto on a GPU job refuses naming
// the host, an explicit cuda exits with the reason, --backend cpu runs it.
TEST(EngineBackendFlag, AutoOnAGpuJobWithoutADeviceRefusesAndCudaFails) {
    Proc probe = run(kEngine + " --devices");
    if (probe.out.find("cuda:") != std::string::npos) GTEST_SKIP() << "a CUDA device is visible here: " << probe.out;
    Proc a = run("WORLD_SIZE=1 RANK=0 " + kEngine + " --job " + kTinyJob + kOneRank + " --set cluster.gpu=h100-sxm");
    EXPECT_EQ(a.rc, 2) << a.out;
    EXPECT_NE(a.out.find("ptd-engine: rank 0 on host "), std::string::npos) << a.out;
    EXPECT_NE(a.out.find("cluster.gpu: the job asks for GPU \"h100-sxm\", but "), std::string::npos) << a.out;
    EXPECT_EQ(a.out.find("\"event\":\"step\""), std::string::npos) << a.out;  // nothing trained
    Proc cpu = run("WORLD_SIZE=1 RANK=0 " + kEngine + " --job " + kTinyJob + kOneRank +
                   " --set cluster.gpu=h100-sxm --backend cpu");
    EXPECT_EQ(cpu.rc, 0) << cpu.out;

    Proc c = run("WORLD_SIZE=1 RANK=0 " + kEngine + " --job " + kTinyJob + kOneRank +
                 " --set cluster.gpu=h100-sxm --backend cuda");
    EXPECT_EQ(c.rc, 2) << c.out;
    EXPECT_NE(c.out.find("error: --backend: got \"cuda\", but "), std::string::npos) << c.out;
}

// libcublasLt costs every process that maps it ~0.5 s of CPU at start; the CPU backend never
// calls it, so it is loaded at the first cuBLASLt call (engine/cuda/cublaslt_lazy.cpp), not
// at start. This binary links the whole engine, as ptd-engine does: nothing is mapped
// before that call, and the call then loads the library and reaches it.
#if defined(PTD_HAVE_CUDA)
#include <cublasLt.h>

#include <fstream>
#include <sstream>

namespace {
bool cublaslt_mapped() {
    std::ifstream maps("/proc/self/maps");
    std::stringstream ss;
    ss << maps.rdbuf();
    return ss.str().find("libcublasLt") != std::string::npos;
}
}  // namespace

TEST(CudaLibraries, CublasLtIsLoadedAtItsFirstCallNotAtStart) {
    EXPECT_FALSE(cublaslt_mapped()) << "libcublasLt was mapped at process start";
    EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
    EXPECT_TRUE(cublaslt_mapped()) << "the first cuBLASLt call did not load libcublasLt";
}
#endif
