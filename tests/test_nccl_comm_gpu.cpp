// test_nccl_comm_gpu.cpp — the NCCL communicator on a real device (ctest label `gpu`;
// every test skips with a message when no CUDA device is usable). NCCL refuses two ranks
// on one GPU and the machines we are lent have one, so these are one-rank communicators
// made exactly as make_nccl_groups makes them (id through a real KV store,
// ncclCommInitRank, the watchdog): every operation and dtype runs through NCCL and must
// leave the data as a one-member group defines it. Multi-rank collectives, reduce-scatter
// / all-gather across ranks and p2p FIFO order across 2 ranks need 2 GPUs: not here.
#include <gtest/gtest.h>

#include "gpu_test_device.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "nccl_comm.h"
#include "ptd/engine/kv_store.h"

using namespace ptd;
using namespace ptd::engine;

namespace {

// "" when a device is usable, else why not (the CUDA error text).
std::string no_device_reason() {
    int n = 0;
    if (cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess) return cudaGetErrorString(e);
    if (n == 0) return "no CUDA device visible";
    return "";
}

#define REQUIRE_GPU()                                                                    \
    do {                                                                                 \
        if (std::string why = no_device_reason(); !why.empty())                          \
            PTD_GPU_TEST_NO_DEVICE("needs a CUDA device (label gpu): " + why);           \
    } while (0)

struct OneRankComm {
    std::unique_ptr<KvServer> server;
    std::unique_ptr<KvClient> store;
    cudaStream_t stream = nullptr;
    float* scratch = nullptr;
    std::unique_ptr<Communicator> comm;
    std::vector<std::string> failures;

    void init(const std::string& group) {
        ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
        ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
        ASSERT_EQ(cudaMalloc((void**)&scratch, sizeof(float)), cudaSuccess);
        KvServerOptions o;
        o.bind_addr = "127.0.0.1";
        o.port = 0;
        auto s = KvServer::start(o);
        ASSERT_TRUE(s) << s.error().str();
        server = std::move(*s);
        auto c = KvClient::connect("127.0.0.1", server->port(), 30);
        ASSERT_TRUE(c) << c.error().str();
        store = std::move(*c);
        CommOptions co;
        co.run_id = "gpu-test";
        auto made = make_nccl_communicator(*store, NcclGroupKey{co.run_id, group, 0, {0}, 0}, co,
                                           [this](const std::string& what) {
                                               failures.push_back(what);
                                               throw std::runtime_error(what);  // must not return into NCCL
                                           },
                                           stream, scratch);
        ASSERT_TRUE(made) << made.error().str();
        comm = std::move(*made);
    }
    ~OneRankComm() {
        comm.reset();
        if (scratch) cudaFree(scratch);
        if (stream) cudaStreamDestroy(stream);
    }
};

template <class T>
std::vector<T> round_trip(OneRankComm& c, const std::vector<T>& host, const std::function<void(void*)>& op) {
    void* dev = nullptr;
    EXPECT_EQ(cudaMalloc(&dev, host.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    op(dev);
    EXPECT_EQ(cudaStreamSynchronize(c.stream), cudaSuccess);
    std::vector<T> out(host.size());
    EXPECT_EQ(cudaMemcpy(out.data(), dev, host.size() * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(dev);
    return out;
}

}  // namespace

TEST(NcclCommGpu, EveryDtypeAllReducesToItselfOnOneRank) {
    REQUIRE_GPU();
    OneRankComm c;
    c.init("world");
    const std::vector<float> f32{1.5f, -2.25f, 3e-8f, 7.0f, 1e30f};
    EXPECT_EQ(round_trip(c, f32, [&](void* x) { c.comm->all_reduce(x, 5, DType::f32, ReduceOp::sum); }), f32);
    const std::vector<double> f64{1.0 / 3, -2.5, 1e300};
    EXPECT_EQ(round_trip(c, f64, [&](void* x) { c.comm->all_reduce(x, 3, DType::f64, ReduceOp::max); }), f64);
    const std::vector<int32_t> i32{1, -7, 2147483647};
    EXPECT_EQ(round_trip(c, i32, [&](void* x) { c.comm->all_reduce(x, 3, DType::i32, ReduceOp::sum); }), i32);
    const std::vector<uint16_t> b16{f32_to_bf16_bits(1.5f), f32_to_bf16_bits(-3.0f), f32_to_bf16_bits(0.1f)};
    EXPECT_EQ(round_trip(c, b16, [&](void* x) { c.comm->all_reduce(x, 3, DType::bf16, ReduceOp::sum); }), b16);
    const std::vector<uint16_t> h16{f32_to_f16_bits(1.5f), f32_to_f16_bits(-3.0f), f32_to_f16_bits(0.1f)};
    EXPECT_EQ(round_trip(c, h16, [&](void* x) { c.comm->all_reduce(x, 3, DType::f16, ReduceOp::sum); }), h16);
    EXPECT_TRUE(c.failures.empty());
}

TEST(NcclCommGpu, InPlaceReduceScatterAllGatherBroadcastBarrierOnOneRank) {
    REQUIRE_GPU();
    OneRankComm c;
    c.init("dp");
    // One rank: its slice is the whole buffer (NCCL's in-place offsets are rank·count = 0).
    const std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8};
    EXPECT_EQ(round_trip(c, x, [&](void* p) { c.comm->reduce_scatter(p, 8, DType::f32, ReduceOp::sum); }), x);
    EXPECT_EQ(round_trip(c, x, [&](void* p) { c.comm->all_gather(p, 8, DType::f32); }), x);
    EXPECT_EQ(round_trip(c, x, [&](void* p) { c.comm->broadcast(p, 8, DType::f32, 0); }), x);
    c.comm->barrier();
    EXPECT_TRUE(c.failures.empty());
}

TEST(NcclCommGpu, AbortedCommunicatorsReportInsteadOfCallingNccl) {
    REQUIRE_GPU();
    OneRankComm c;
    c.init("tp");
    EXPECT_TRUE(abort_nccl_communicators("test"));
    EXPECT_FALSE(abort_nccl_communicators("again"));
    float* x = nullptr;
    ASSERT_EQ(cudaMalloc((void**)&x, 4 * sizeof(float)), cudaSuccess);
    EXPECT_THROW(c.comm->all_reduce(x, 4, DType::f32, ReduceOp::sum), std::runtime_error);
    ASSERT_EQ(c.failures.size(), 1u);
    EXPECT_NE(c.failures[0].find("tp group 0 (global ranks 0) all_reduce: the communicators were aborted"),
              std::string::npos)
        << c.failures[0];
    cudaFree(x);
}
