// test_cuda_sim.cpp — the CUDA simulator (engine/cuda/sim), the dialect it runs
// (engine/cuda/dialect.cuh), the simulator's runtime (runtime_sim.cpp) and the cuBLASLt
// reference (blaslt_ref.cpp). The kernels live in cuda_sim_kernels.cuh, shared with the
// nvcc-compiled `gpu` test; the mutants there (a barrier removed) must fail here.
#define PTD_CUDA_SIM 1
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "blaslt.h"
#include "cuda_sim_kernels.cuh"
#include "ptd/engine/dtype.h"
#include "runtime.h"

namespace sim = ptd::cuda::sim;
namespace tk = ptd::cuda::sim::test_kernels;
using sim::bf16;
using sim::f16;

namespace {

std::string seed_note() {
    return " (launch seed 0x" + [] {
        char buf[24];
        std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)sim::last_launch_seed());
        return std::string(buf);
    }() + ", PTD_CUDA_SIM_SEED=" + std::to_string(sim::base_seed()) + ")";
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

// ---- reductions and the mutants -----------------------------------------------------------

// Sums of 256-element blocks with the shared-memory tree; false when any block is wrong.
template <bool kSync>
bool tree_sum_correct(int launch) {
    const int blocks = 4, n = blocks * 256 - 37;  // a partial last block
    const std::vector<float> x = random_floats(n, 100 + launch);
    std::vector<float> out(blocks, 0.0f);
    PTD_LAUNCH((tk::tree_sum<kSync>), blocks, 256, 0, nullptr, x.data(), out.data(), n);
    for (int b = 0; b < blocks; ++b) {
        double ref = 0;
        for (int i = b * 256; i < std::min(n, (b + 1) * 256); ++i) ref += x[i];
        if (!(std::fabs(out[b] - ref) <= 1e-4)) return false;
    }
    return true;
}

TEST(CudaSimReduce, TreeSumWithBarriersIsRightForEverySeed) {
    for (int launch = 0; launch < 20; ++launch) EXPECT_TRUE(tree_sum_correct<true>(launch)) << seed_note();
}

// The same kernel without its __syncthreads: the simulator's random thread order and the
// poisoned shared memory make it fail — in every launch, not by luck in some.
TEST(CudaSimReduce, MutantTreeSumWithoutBarriersFails) {
    int failures = 0;
    for (int launch = 0; launch < 20; ++launch) failures += !tree_sum_correct<false>(launch);
    EXPECT_EQ(failures, 20) << "the barrier-free tree reduction passed in " << 20 - failures << " of 20 launches";
}

template <bool kSync>
bool mean_var_correct(int launch) {
    const int rows = 3, cols = 1000, threads = 256;
    const std::vector<float> x = random_floats((size_t)rows * cols, 200 + launch, 0.0f, 4.0f);
    std::vector<float> mean(rows), var(rows);
    PTD_LAUNCH((tk::row_mean_var<kSync>), rows, threads, 0, nullptr, x.data(), mean.data(), var.data(), cols);
    for (int r = 0; r < rows; ++r) {
        double m = 0, v = 0;
        for (int c = 0; c < cols; ++c) m += x[r * cols + c];
        m /= cols;
        for (int c = 0; c < cols; ++c) v += (x[r * cols + c] - m) * (x[r * cols + c] - m);
        v /= cols;
        if (!(std::fabs(mean[r] - m) <= 1e-4 && std::fabs(var[r] - v) <= 1e-4)) return false;
    }
    return true;
}

TEST(CudaSimReduce, TwoReductionsThroughOneSmem32AreRightWithTheTrailingBarrier) {
    for (int launch = 0; launch < 20; ++launch) EXPECT_TRUE(mean_var_correct<true>(launch)) << seed_note();
}

// The subtler mutant: only the barrier after the reduction is gone, so a warp that runs ahead
// into the second reduction overwrites smem32 before a slower warp has read it. The
// simulator lets warps drift apart (one of its two scheduling policies runs a warp all the
// way to the next barrier first), so most launches fail.
TEST(CudaSimReduce, MutantWithoutTheTrailingBarrierFailsAcrossSeeds) {
    int failures = 0;
    for (int launch = 0; launch < 20; ++launch) failures += !mean_var_correct<false>(launch);
    std::printf("the mutant without the trailing barrier failed in %d of 20 launches\n", failures);
    EXPECT_GE(failures, 5) << "the mutant passed in " << 20 - failures << " of 20 launches";
}

TEST(CudaSimReduce, DialectBlockReduceSumAndMax) {
    const int rows = 5, cols = 777;
    std::vector<float> x = random_floats((size_t)rows * cols, 7, -3.0f, 3.0f);
    x[2 * cols + 500] = 42.0f;
    for (int threads : {32, 64, 256, 1024}) {
        std::vector<float> sum(rows), max(rows);
        PTD_LAUNCH(tk::row_sum_max, rows, threads, 0, nullptr, x.data(), sum.data(), max.data(), cols);
        for (int r = 0; r < rows; ++r) {
            double s = 0;
            float m = -INFINITY;
            for (int c = 0; c < cols; ++c) {
                s += x[r * cols + c];
                m = std::max(m, x[r * cols + c]);
            }
            EXPECT_NEAR(sum[r], s, 1e-3) << "threads " << threads << " row " << r << seed_note();
            EXPECT_EQ(max[r], m) << "threads " << threads << " row " << r << seed_note();
        }
    }
}

// ---- scheduling: random order per launch, reproducible from the seed -----------------------

std::vector<unsigned> arrival_order() {
    unsigned counter = 0;
    std::vector<unsigned> ticket(128);
    PTD_LAUNCH(tk::arrival_order, 1, 128, 0, nullptr, &counter, ticket.data());
    return ticket;
}

TEST(CudaSimSchedule, ThreadOrderChangesPerLaunchAndReplaysFromTheSeed) {
    const uint64_t saved = sim::base_seed();
    sim::set_seed(12345);
    const std::vector<unsigned> a = arrival_order(), b = arrival_order();
    EXPECT_NE(a, b) << "two launches ran their threads in the same order";
    sim::set_seed(12345);
    EXPECT_EQ(arrival_order(), a) << "the same base seed must replay the same order";
    EXPECT_EQ(arrival_order(), b);
    sim::set_seed(54321);
    EXPECT_NE(arrival_order(), a) << "another base seed, another order";
    std::vector<unsigned> sorted = a;
    std::sort(sorted.begin(), sorted.end());
    for (unsigned i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], i);
    // Not simply 0..127 either.
    std::vector<unsigned> identity(128);
    std::iota(identity.begin(), identity.end(), 0u);
    EXPECT_NE(a, identity);
    sim::set_seed(saved);
}

// Each host thread has its own simulator state: launches from two threads at once (as two
// engine ranks in one process would make them) do not disturb each other.
TEST(CudaSimSchedule, LaunchesFromTwoHostThreadsAtOnce) {
    bool ok[2] = {false, false};
    std::thread t0([&] {
        ok[0] = true;
        for (int launch = 0; launch < 10; ++launch) ok[0] = ok[0] && tree_sum_correct<true>(launch);
    });
    std::thread t1([&] {
        ok[1] = true;
        for (int launch = 0; launch < 10; ++launch) ok[1] = ok[1] && mean_var_correct<true>(launch);
    });
    t0.join();
    t1.join();
    EXPECT_TRUE(ok[0]);
    EXPECT_TRUE(ok[1]);
}

// ---- poison ---------------------------------------------------------------------------------

TEST(CudaSimPoison, UninitialisedSharedReadIsNaN) {
    std::vector<float> out(64, 0.0f);
    PTD_LAUNCH(tk::read_shared, 1, 64, 0, nullptr, out.data(), 40);
    for (int i = 0; i < 64; ++i) {
        if (i < 40)
            EXPECT_EQ(out[i], 1.0f + i);
        else
            EXPECT_TRUE(std::isnan(out[i])) << "shared element " << i << " was never written but reads " << out[i];
    }
}

// ---- warp ops -------------------------------------------------------------------------------

TEST(CudaSimWarp, ShufflesAndVotes) {
    const int n = 64;
    std::vector<int> in(n), out(8 * n, -7);
    for (int i = 0; i < n; ++i) in[i] = (i * 7 + 3) % 50;  // lane 1 of warp 0 holds... see below
    in[33] = 40;                                             // only warp 1 has a 40
    PTD_LAUNCH(tk::warp_ops, 1, n, 0, nullptr, in.data(), out.data());
    for (int t = 0; t < n; ++t) {
        const int w = t / 32 * 32, l = t % 32;
        const int* o = &out[8 * t];
        EXPECT_EQ(o[0], in[w + (l ^ 5)]) << "shfl_xor lane " << t;
        EXPECT_EQ(o[1], l + 3 < 32 ? in[t + 3] : in[t]) << "shfl_down lane " << t;
        EXPECT_EQ(o[2], l >= 2 ? in[t - 2] : in[t]) << "shfl_up lane " << t;
        EXPECT_EQ(o[3], in[w + 7]) << "shfl lane " << t;
        EXPECT_EQ(o[4], in[w + (l & ~15) + 3]) << "shfl width 16 lane " << t;
        unsigned ballot = 0;
        bool any = false, all = true;
        for (int k = 0; k < 32; ++k) {
            if (in[w + k] % 3 == 0) ballot |= 1u << k;
            any = any || in[w + k] == 40;
            all = all && in[w + k] >= 0;
        }
        EXPECT_EQ((unsigned)o[5], ballot) << "ballot lane " << t;
        EXPECT_EQ(o[6], any ? 1 : 0) << "any lane " << t;
        EXPECT_EQ(o[7], all ? 1 : 0) << "all lane " << t;
    }
}

TEST(CudaSimWarp, SyncwarpOrdersLanesAndItsMutantFails) {
    const int n = 128;
    std::vector<int> in(n), out(n);
    for (int i = 0; i < n; ++i) in[i] = i * 3;
    int mutant_failures = 0;
    for (int launch = 0; launch < 10; ++launch) {
        PTD_LAUNCH((tk::warp_reverse<true>), 1, n, 0, nullptr, in.data(), out.data());
        for (int t = 0; t < n; ++t) ASSERT_EQ(out[t], in[t - t % 32 + 31 - t % 32]) << seed_note();
        PTD_LAUNCH((tk::warp_reverse<false>), 1, n, 0, nullptr, in.data(), out.data());
        for (int t = 0; t < n; ++t)
            if (out[t] != in[t - t % 32 + 31 - t % 32]) {
                ++mutant_failures;
                break;
            }
    }
    EXPECT_EQ(mutant_failures, 10) << "without __syncwarp, lanes read their neighbours' slots before the write";
}

TEST(CudaSimWarp, WarpReductionsAndPartialWarpPoison) {
    // 48 threads: warp 1 has 16 lanes; a shuffle from a lane that does not exist reads poison.
    const int n = 48;
    std::vector<float> in(n), sum(n), max(n), last(n);
    for (int i = 0; i < n; ++i) in[i] = (float)((i * 5) % 17) - 3.0f;
    PTD_LAUNCH(tk::warp_reduce, 1, n, 0, nullptr, in.data(), sum.data(), max.data(), last.data());
    float s0 = 0, m0 = -INFINITY;
    for (int i = 0; i < 32; ++i) {
        s0 += in[i];
        m0 = std::max(m0, in[i]);
    }
    for (int i = 0; i < 32; ++i) {
        EXPECT_EQ(sum[i], s0);
        EXPECT_EQ(max[i], m0);
        EXPECT_EQ(last[i], in[31]);
    }
    for (int i = 32; i < n; ++i) {
        EXPECT_TRUE(std::isnan(sum[i])) << "a reduction over a partial warp must not look valid";
        EXPECT_TRUE(std::isnan(last[i])) << "lane 31 of warp 1 does not exist";
    }
}

// ---- atomics, dynamic shared memory, vector loads ---------------------------------------------

TEST(CudaSimAtomics, HistogramSumMaxCas) {
    const int n = 5000;
    std::vector<int> in(n);
    for (int i = 0; i < n; ++i) in[i] = (i * 37) % 101;
    std::vector<int> hist(16, 0);
    float fsum = 0.0f;
    int imax = -1;
    unsigned cas_bits = 0, count = 0;  // 0.0f
    PTD_LAUNCH(tk::atomics, 7, 128, 0, nullptr, in.data(), n, hist.data(), &fsum, &imax, &cas_bits, &count);
    std::vector<int> ref(16, 0);
    double sum = 0;
    for (int v : in) {
        ++ref[v % 16];
        sum += v;
    }
    EXPECT_EQ(hist, ref);
    EXPECT_EQ(fsum, (float)sum);  // integers below 2^24: exact in any order
    EXPECT_EQ(imax, 100);
    EXPECT_EQ(count, (unsigned)n);
    float cas_sum;
    std::memcpy(&cas_sum, &cas_bits, 4);
    EXPECT_EQ(cas_sum, (float)n);
}

TEST(CudaSimSharedMemory, DynamicSharedReverse) {
    const int threads = 96, blocks = 3;
    const std::vector<float> x = random_floats(threads * blocks, 3);
    std::vector<float> y(x.size(), 0.0f);
    PTD_LAUNCH(tk::reverse_dynamic, blocks, threads, threads * sizeof(float), nullptr, x.data(), y.data());
    for (int b = 0; b < blocks; ++b)
        for (int t = 0; t < threads; ++t) EXPECT_EQ(y[b * threads + t], x[b * threads + threads - 1 - t]);
}

TEST(CudaSimVector, Pack128CopyWithTailInEveryType) {
    for (int64_t n : {0, 5, 64, 1001}) {
        std::vector<float> xf = random_floats((size_t)n + 8, 11, -100.0f, 100.0f);
        alignas(16) static float f_in[1024], f_out[1024];
        alignas(16) static bf16 b_in[1024], b_out[1024];
        for (int64_t i = 0; i < n; ++i) {
            f_in[i] = xf[i];
            b_in[i] = sim::from_f32<bf16>(xf[i]);
        }
        PTD_LAUNCH((tk::scale2_vec<float>), 3, 32, 0, nullptr, f_in, f_out, n);
        PTD_LAUNCH((tk::scale2_vec<bf16>), 3, 32, 0, nullptr, b_in, b_out, n);
        for (int64_t i = 0; i < n; ++i) {
            EXPECT_EQ(f_out[i], 2.0f * f_in[i]) << "n " << n << " i " << i;
            EXPECT_EQ(sim::bf16_bits(b_out[i]), sim::bf16_bits(sim::from_f32<bf16>(2.0f * sim::to_f32(b_in[i]))))
                << "n " << n << " i " << i;
        }
    }
}

// ---- what the simulator refuses, loudly -----------------------------------------------------

namespace bad {
__global__ void barrier_in_branch(int* out) {
    if (threadIdx.x < 16) __syncthreads();  // the other threads exit without arriving
    out[threadIdx.x] = 1;
}
__global__ void two_barriers(int* out) {
    if (threadIdx.x % 2)
        __syncthreads();
    else
        __syncthreads();
    out[threadIdx.x] = 1;
}
__global__ void divergent_shuffle(float* out) {
    float v = (float)threadIdx.x;
    if (threadIdx.x % 32 < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}
__global__ void partial_mask(float* out) {
    out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, (float)threadIdx.x, 1);
}
__global__ void too_much_static_shared(float* out) {
    PTD_SHARED(float, big, 13000);  // 52000 bytes > 48 KiB
    big[threadIdx.x] = 1.0f;
    out[0] = big[0];
}
__global__ void misaligned_load(const float* x, float* out) {
    const auto p = ptd::cuda::sim::load128(x + 1);
    out[0] = p[0];
}
__global__ void nothing(int*) {}
__global__ void last_block_wins(int* out) {  // every block writes out[0]: the order decides
    if (threadIdx.x == 0) out[0] = (int)blockIdx.x;
}
__global__ void own_element(int* out) {  // race-free: each block writes its own element
    if (threadIdx.x == 0) out[blockIdx.x] = (int)blockIdx.x;
}
// Every block reads the counter, waits at a barrier, then writes it plus one: blocks run one
// after another in any order give blocks; blocks whose stretches interleave lose updates.
__global__ void split_increment(int* counter) {
    PTD_SHARED(int, seen, 1);
    if (threadIdx.x == 0) seen[0] = counter[0];
    __syncthreads();
    if (threadIdx.x == 0) counter[0] = seen[0] + 1;
}
// Out-of-bounds accesses for memcheck: a guard for i < n that is off by one (<= n), and an
// index shifted down by one (thread 0 of block 0 touches element -1).
__global__ void copy_one_past_the_end(const float* in, float* out, int n) {
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) out[i] = in[i];
    if (i == n) out[i] = 0.0f;
}
__global__ void read_one_past_the_end(const float* in, float* out, int n) {
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i <= n) out[i < n ? i : 0] = in[i];
}
__global__ void write_one_before_the_start(float* out, int n) {
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) out[i - 1] = 1.0f;
}
__global__ void read_one_before_the_start(const float* in, float* out, int n) {
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) out[i] = in[i - 1];
}
// Recursion deep enough to run through a fiber's 256 KiB stack, 1 KiB a level (every level
// touches its whole frame, so the first page past the stack, the guard, is hit).
__device__ __noinline__ int deep(int depth) {
    volatile char pad[1024];
    for (int i = 0; i < 1024; i += 256) pad[i] = (char)depth;
    return depth == 0 ? pad[0] : deep(depth - 1) + pad[512];
}
__global__ void overflow_stack(int* out) { out[0] = deep(1000); }
__global__ void copy_vec(const float* in, float* out, int n) {  // in bounds: 128-bit where whole
    const int i = 4 * (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i + 4 <= n) ptd::cuda::sim::store128(out + i, ptd::cuda::sim::load128(in + i));
    else
        for (int k = i; k < n; ++k) out[k] = in[k];
}
}  // namespace bad

class CudaSimDeath : public ::testing::Test {
protected:
    void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(CudaSimDeath, BarrierInDivergentCodeIsReported) {
    std::vector<int> out(64);
    EXPECT_DEATH(PTD_LAUNCH(bad::barrier_in_branch, 1, 64, 0, nullptr, out.data()),
                 "__syncthreads in divergent code.*has exited.*replay: PTD_CUDA_SIM_SEED=");
}

TEST_F(CudaSimDeath, ThreadsAtDifferentBarriersAreReported) {
    std::vector<int> out(64);
    EXPECT_DEATH(PTD_LAUNCH(bad::two_barriers, 1, 64, 0, nullptr, out.data()), "different __syncthreads");
}

TEST_F(CudaSimDeath, DivergentWarpCollectiveIsReported) {
    std::vector<float> out(32);
    EXPECT_DEATH(PTD_LAUNCH(bad::divergent_shuffle, 1, 32, 0, nullptr, out.data()),
                 "not every lane reached the same warp collective");
}

TEST_F(CudaSimDeath, PartialWarpMaskIsReported) {
    std::vector<float> out(32);
    EXPECT_DEATH(PTD_LAUNCH(bad::partial_mask, 1, 32, 0, nullptr, out.data()), "mask 0x0000ffff leaves out lanes");
}

TEST_F(CudaSimDeath, StaticSharedBeyond48KiBIsReported) {
    std::vector<float> out(1);
    EXPECT_DEATH(PTD_LAUNCH(bad::too_much_static_shared, 1, 32, 0, nullptr, out.data()),
                 "PTD_SHARED big .52000 bytes.*the limit is 49152");
}

TEST_F(CudaSimDeath, MisalignedVectorLoadIsReported) {
    alignas(16) float x[8] = {};
    float out[1];
    EXPECT_DEATH(PTD_LAUNCH(bad::misaligned_load, 1, 1, 0, nullptr, x, out), "load128 at address .*not 16-byte aligned");
}

TEST_F(CudaSimDeath, LaunchOverTheThreadLimitAborts) {
    int x = 0;
    EXPECT_DEATH(PTD_LAUNCH(bad::nothing, 1, 2048, 0, nullptr, &x),
                 "test_cuda_sim.cpp:[0-9]+: launch of bad::nothing.*2048 threads; at most 1024 per block");
}

TEST_F(CudaSimDeath, BadSeedInTheEnvironmentExitsWithAMessage) {
    EXPECT_EXIT(
        {
            setenv("PTD_CUDA_SIM_SEED", "12abc", 1);
            (void)sim::base_seed();
        },
        ::testing::ExitedWithCode(2), "PTD_CUDA_SIM_SEED='12abc' is not an unsigned 64-bit integer");
}

TEST(CudaSimLaunch, LimitsAreChecked) {
    auto check = [](dim3 grid, dim3 block, size_t smem) {
        const sim::LaunchConfig c{"k", __FILE__, __LINE__, reinterpret_cast<const void*>(&bad::nothing), grid, block,
                                  smem};
        return sim::check_launch(c);
    };
    EXPECT_EQ(check(dim3(1000), dim3(1024), 0), "");
    EXPECT_NE(check(dim3(1), dim3(1025), 0).find("1025 threads; at most 1024"), std::string::npos);
    EXPECT_NE(check(dim3(1), dim3(32, 32, 2), 0).find("2048 threads"), std::string::npos);
    EXPECT_NE(check(dim3(1), dim3(1, 1, 65), 0).find("the limits are (1024, 1024, 64)"), std::string::npos);
    EXPECT_NE(check(dim3(1, 65536), dim3(32), 0).find("grid (1, 65536, 1)"), std::string::npos);
    EXPECT_NE(check(dim3(0), dim3(32), 0).find("at least 1"), std::string::npos);
    EXPECT_EQ(check(dim3(1), dim3(32), 48 * 1024), "");
    const std::string over = check(dim3(1), dim3(32), 48 * 1024 + 4);
    EXPECT_NE(over.find("exceeds the kernel's limit of 49152"), std::string::npos) << over;
    EXPECT_NE(over.find("PTD_SET_MAX_DYNAMIC_SMEM"), std::string::npos) << over;
}

TEST(CudaSimLaunch, DynamicSharedAbove48KiBNeedsTheOptIn) {
    const int threads = 128;
    const size_t smem = 100 * 1024;  // needs the opt-in, as on CUDA
    const sim::LaunchConfig c{"reverse_dynamic", __FILE__, __LINE__,
                              reinterpret_cast<const void*>(&tk::reverse_dynamic), dim3(1), dim3(threads), smem};
    EXPECT_NE(sim::check_launch(c), "");
    PTD_SET_MAX_DYNAMIC_SMEM(tk::reverse_dynamic, smem);
    EXPECT_EQ(sim::check_launch(c), "");
    const std::vector<float> x = random_floats(threads, 5);
    std::vector<float> y(threads);
    PTD_LAUNCH(tk::reverse_dynamic, 1, threads, smem, nullptr, x.data(), y.data());
    for (int t = 0; t < threads; ++t) EXPECT_EQ(y[t], x[threads - 1 - t]);
}

// ---- 16-bit types: bit-identical to cuda_bf16.h / cuda_fp16.h -------------------------------

TEST(CudaSimTypes, WideningEveryBitPattern) {
    for (uint32_t b = 0; b < 65536; ++b) {
        const uint16_t h = (uint16_t)b;
        const float ours_bf = sim::to_f32(sim::bf16_from_bits(h));
        const float eng_bf = ptd::engine::bf16_bits_to_f32(h);
        ASSERT_EQ(std::memcmp(&ours_bf, &eng_bf, 4), 0) << "bf16 bits 0x" << std::hex << b;
        const float ours_h = sim::to_f32(sim::f16_from_bits(h));
        const float eng_h = ptd::engine::f16_bits_to_f32(h);
        if (std::isnan(eng_h)) {
            // cuda_fp16.h's host __half2float returns the canonical NaN (sign and payload dropped).
            uint32_t u;
            std::memcpy(&u, &ours_h, 4);
            ASSERT_EQ(u, 0x7fffffffu) << "f16 bits 0x" << std::hex << b;
        } else {
            ASSERT_EQ(std::memcmp(&ours_h, &eng_h, 4), 0) << "f16 bits 0x" << std::hex << b;
        }
    }
}

// Rounding: every 16-bit value, the midpoints between neighbours (ties to even) and their
// neighbours one float ulp away, plus a stride through all 2^32 float patterns.
TEST(CudaSimTypes, RoundingMatchesTheEngineConverters) {
    auto check = [](float f) {
        const uint16_t ours_bf = sim::bf16_bits(sim::from_f32<bf16>(f));
        const uint16_t ours_h = sim::f16_bits(sim::from_f32<f16>(f));
        if (std::isnan(f)) {
            // __float2bfloat16_rn / __float2half_rn return the canonical NaN 0x7fff (dtype.h keeps
            // the payload instead: both are NaN).
            EXPECT_EQ(ours_bf, 0x7fff);
            EXPECT_EQ(ours_h, 0x7fff);
            return;
        }
        ASSERT_EQ(ours_bf, ptd::engine::f32_to_bf16_bits(f)) << "bf16 of " << f;
        ASSERT_EQ(ours_h, ptd::engine::f32_to_f16_bits(f)) << "f16 of " << f;
    };
    for (uint32_t b = 0; b < 65536; ++b) {
        const float bf = ptd::engine::bf16_bits_to_f32((uint16_t)b);
        const float hf = ptd::engine::f16_bits_to_f32((uint16_t)b);
        for (float base : {bf, hf}) {
            check(base);
            check(std::nextafter(base, INFINITY));
            check(std::nextafter(base, -INFINITY));
        }
        // halfway to the next bf16 value, and to the next f16 value
        const float bf_next = ptd::engine::bf16_bits_to_f32((uint16_t)(b + 1));
        if (std::isfinite(bf) && std::isfinite(bf_next) && ((b & 0x7fff) != 0x7fff)) {
            const float mid = (float)(((double)bf + (double)bf_next) / 2);
            check(mid);
            check(std::nextafter(mid, INFINITY));
            check(std::nextafter(mid, -INFINITY));
        }
        const float hf_next = ptd::engine::f16_bits_to_f32((uint16_t)(b + 1));
        if (std::isfinite(hf) && std::isfinite(hf_next) && ((b & 0x7fff) != 0x7fff)) {
            const float mid = (float)(((double)hf + (double)hf_next) / 2);
            check(mid);
        }
    }
    for (uint64_t u = 0; u < (1ull << 32); u += 4099) {
        float f;
        const uint32_t u32 = (uint32_t)u;
        std::memcpy(&f, &u32, 4);
        check(f);
    }
    // The edges: the largest f16, the overflow threshold 65520, subnormal steps.
    for (float f : {65504.0f, 65519.99f, 65520.0f, 1e10f, 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f, 3.39e38f, 3.4e38f})
        for (float s : {1.0f, -1.0f}) check(f * s);
    EXPECT_EQ(sim::f16_bits(sim::from_f32<f16>(65520.0f)), 0x7c00);
    EXPECT_EQ(sim::f16_bits(sim::from_f32<f16>(65519.99f)), 0x7bff);
    EXPECT_EQ(sim::bf16_bits(sim::from_f32<bf16>(3.4e38f)), 0x7f80);  // rounds up to inf
}

// ---- runtime_sim -----------------------------------------------------------------------------

TEST(CudaSimRuntime, MallocIsAlignedPoisonedAndAccounted) {
    const size_t before = sim::sim_allocated_bytes();
    void* p = nullptr;
    ASSERT_TRUE(sim::malloc_device(&p, 1000, "test").ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
    EXPECT_EQ(sim::sim_allocated_bytes(), before + 1024);
    EXPECT_TRUE(std::isnan(static_cast<float*>(p)[10])) << "new device memory is poisoned";
    EXPECT_TRUE(sim::sim_is_device_range(p, 1000));
    EXPECT_FALSE(sim::sim_is_device_range(p, 1025));
    size_t free_b = 0, total = 0;
    sim::sim_set_capacity(1 << 20);
    ASSERT_TRUE(sim::mem_get_info(&free_b, &total).ok());
    EXPECT_EQ(total, 1u << 20);
    EXPECT_EQ(free_b, (1u << 20) - sim::sim_allocated_bytes());
    void* q = nullptr;
    const sim::Status oom = sim::malloc_device(&q, 2 << 20, "too big");
    EXPECT_EQ(oom.code, sim::kErrMemoryAllocation);
    EXPECT_NE(oom.message.find("'too big'): out of memory"), std::string::npos) << oom.message;
    EXPECT_EQ(q, nullptr);
    sim::sim_set_capacity(size_t{80} << 30);
    ASSERT_TRUE(sim::free_device(p).ok());
    EXPECT_EQ(sim::sim_allocated_bytes(), before);
    EXPECT_EQ(sim::free_device(p).code, sim::kErrInvalidValue) << "double free is an error";
    EXPECT_TRUE(sim::free_device(nullptr).ok());
}

TEST(CudaSimRuntime, CopiesMemsetStreamsAndEvents) {
    std::vector<float> host(100), back(100, 0.0f);
    std::iota(host.begin(), host.end(), 0.0f);
    void *d1 = nullptr, *d2 = nullptr;
    PTD_CUDA_CHECK(sim::malloc_device(&d1, 400, "d1"));
    PTD_CUDA_CHECK(sim::malloc_device(&d2, 400, "d2"));
    sim::StreamHandle s1 = nullptr, s2 = nullptr;
    sim::EventHandle e1 = nullptr, e2 = nullptr;
    PTD_CUDA_CHECK(sim::stream_create(&s1));
    PTD_CUDA_CHECK(sim::stream_create(&s2));
    PTD_CUDA_CHECK(sim::event_create(&e1));
    PTD_CUDA_CHECK(sim::event_create(&e2));
    PTD_CUDA_CHECK(sim::event_record(e1, s1));
    PTD_CUDA_CHECK(sim::memcpy_async(d1, host.data(), 400, sim::CopyKind::host_to_device, s1));
    PTD_CUDA_CHECK(sim::event_record(e2, s1));
    PTD_CUDA_CHECK(sim::stream_wait_event(s2, e2));
    PTD_CUDA_CHECK(sim::memcpy_async(d2, d1, 400, sim::CopyKind::device_to_device, s2));
    PTD_CUDA_CHECK(sim::memset_async(d1, 0, 200, s2));
    PTD_CUDA_CHECK(sim::stream_synchronize(s2));
    PTD_CUDA_CHECK(sim::memcpy_sync(back.data(), d2, 400, sim::CopyKind::device_to_host));
    EXPECT_EQ(back, host);
    PTD_CUDA_CHECK(sim::memcpy_sync(back.data(), d1, 400, sim::CopyKind::device_to_host));
    for (int i = 0; i < 100; ++i) EXPECT_EQ(back[i], i < 50 ? 0.0f : host[i]);
    float ms = -1;
    PTD_CUDA_CHECK(sim::event_elapsed_ms(&ms, e1, e2));
    EXPECT_GE(ms, 0.0f);

    // Wrong copy kinds and out-of-range device sides are errors, not silent copies.
    sim::Status st = sim::memcpy_sync(back.data(), d1, 400, sim::CopyKind::host_to_device);
    EXPECT_EQ(st.code, sim::kErrInvalidValue);
    EXPECT_NE(st.message.find("not inside one device allocation"), std::string::npos) << st.message;
    st = sim::memcpy_sync(d1, host.data(), 404, sim::CopyKind::host_to_device);
    EXPECT_EQ(st.code, sim::kErrInvalidValue) << "a copy past the end of the allocation";
    st = sim::memcpy_sync(d1, d2, 4, sim::CopyKind::host_to_device);
    EXPECT_NE(st.message.find("src"), std::string::npos) << st.message;
    EXPECT_EQ(sim::memset_async(host.data(), 0, 4, nullptr).code, sim::kErrInvalidValue);

    sim::EventHandle never = nullptr;
    PTD_CUDA_CHECK(sim::event_create(&never));
    EXPECT_EQ(sim::event_elapsed_ms(&ms, never, e2).code, sim::kErrInvalidResourceHandle);
    PTD_CUDA_CHECK(sim::event_destroy(never));
    PTD_CUDA_CHECK(sim::event_destroy(e1));
    PTD_CUDA_CHECK(sim::event_destroy(e2));
    PTD_CUDA_CHECK(sim::stream_destroy(s1));
    PTD_CUDA_CHECK(sim::stream_destroy(s2));
    EXPECT_EQ(sim::stream_destroy(s1).code, sim::kErrInvalidResourceHandle);
    PTD_CUDA_CHECK(sim::free_device(d1));
    PTD_CUDA_CHECK(sim::free_device(d2));
    int count = 0;
    PTD_CUDA_CHECK(sim::device_count(&count));
    EXPECT_EQ(count, 1);
    EXPECT_EQ(sim::set_device(1).code, 101);
}

TEST_F(CudaSimDeath, CheckMacroPrintsTheCallerLocation) {
    EXPECT_DEATH(PTD_CUDA_CHECK(sim::free_device(reinterpret_cast<void*>(0x1000))),
                 "test_cuda_sim.cpp:[0-9]+: sim::free_device.* failed \\(error 1\\): free_device\\(0x1000\\): not the "
                 "start of a live device allocation");
}

// ---- CUDA graphs (runtime.h): capture records, replay runs, hazards are refused -----------

// A stream, three device buffers of n floats and x uploaded: what the graph tests capture.
struct GraphFixture {
    static constexpr int64_t n = 100;
    sim::StreamHandle stream = nullptr;
    float *x = nullptr, *y = nullptr, *z = nullptr;
    GraphFixture() {
        PTD_CUDA_CHECK(sim::stream_create(&stream));
        for (float** p : {&x, &y, &z}) PTD_CUDA_CHECK(sim::malloc_device((void**)p, n * sizeof(float), "graph test"));
        upload(random_floats(n, 7));
    }
    ~GraphFixture() {
        for (float* p : {x, y, z}) PTD_CUDA_CHECK(sim::free_device(p));
        PTD_CUDA_CHECK(sim::stream_destroy(stream));
    }
    void upload(const std::vector<float>& v) {
        PTD_CUDA_CHECK(sim::memcpy_sync(x, v.data(), n * sizeof(float), sim::CopyKind::host_to_device));
    }
    std::vector<float> download(const float* d) {
        std::vector<float> v(n);
        PTD_CUDA_CHECK(sim::memcpy_sync(v.data(), d, n * sizeof(float), sim::CopyKind::device_to_host));
        return v;
    }
    // y = 2·x (a kernel), z = y (a copy), then z[0..n/2) zeroed (a memset) — all on `stream`
    void enqueue(int64_t elements = n) {
        PTD_LAUNCH((tk::scale2_vec<float>), 2, 32, 0, stream, x, y, elements);
        PTD_CUDA_CHECK(sim::memcpy_async(z, y, n * sizeof(float), sim::CopyKind::device_to_device, stream));
        PTD_CUDA_CHECK(sim::memset_async(z, 0, n / 2 * sizeof(float), stream));
    }
    sim::GraphHandle capture(int64_t elements = n) {
        PTD_CUDA_CHECK(sim::stream_begin_capture(stream));
        enqueue(elements);
        sim::GraphHandle graph = nullptr;
        PTD_CUDA_CHECK(sim::stream_end_capture(stream, &graph));
        return graph;
    }
    void expect_z_is_twice(const std::vector<float>& xs) {
        const std::vector<float> zs = download(z);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(zs[i], i < n / 2 ? 0.0f : 2.0f * xs[i]) << "element " << i;
    }
};

TEST(CudaSimGraph, CaptureRecordsWithoutRunningAndEachReplayReadsTheBuffersAnew) {
    GraphFixture f;
    const uint64_t launches = sim::launch_count();
    sim::GraphHandle graph = f.capture();
    EXPECT_EQ(sim::sim_graph_size(graph), 3u) << "a launch, a copy and a memset";
    EXPECT_EQ(sim::launch_count(), launches) << "a captured launch does not run";
    for (float v : f.download(f.y)) ASSERT_TRUE(std::isnan(v)) << "y is still the allocation's poison";

    for (uint32_t replay = 0; replay < 3; ++replay) {  // new inputs in the same buffer each time
        const std::vector<float> xs = random_floats(GraphFixture::n, 20 + replay);
        f.upload(xs);
        PTD_CUDA_CHECK(sim::graph_launch(graph, f.stream));
        f.expect_z_is_twice(xs);
    }
    EXPECT_EQ(sim::launch_count(), launches + 3) << "one kernel launch per replay";
    PTD_CUDA_CHECK(sim::graph_destroy(graph));
    EXPECT_EQ(sim::graph_launch(graph, f.stream).code, sim::kErrInvalidResourceHandle);
}

TEST(CudaSimGraph, AReferenceGemmIsRecordedAndReplayed) {
    GraphFixture f;  // x as a 10×10 column-major matrix: z = x·x
    sim::LtMatmul p;
    p.m = p.n = p.k = 10;
    p.A = p.B = f.x;
    p.D = f.z;
    p.lda = p.ldb = p.ldd = 10;
    PTD_CUDA_CHECK(sim::stream_begin_capture(f.stream));
    PTD_CUDA_CHECK(sim::lt_matmul(p, f.stream));
    sim::GraphHandle graph = nullptr;
    PTD_CUDA_CHECK(sim::stream_end_capture(f.stream, &graph));
    ASSERT_EQ(sim::sim_graph_size(graph), 1u);
    for (float v : f.download(f.z)) ASSERT_TRUE(std::isnan(v)) << "the GEMM ran during the capture";
    const std::vector<float> xs = f.download(f.x);
    PTD_CUDA_CHECK(sim::graph_launch(graph, f.stream));
    const std::vector<float> zs = f.download(f.z);
    for (int i = 0; i < 10; ++i)
        for (int j = 0; j < 10; ++j) {
            double ref = 0;
            for (int k = 0; k < 10; ++k) ref += (double)xs[i + 10 * k] * xs[k + 10 * j];
            ASSERT_NEAR(zs[i + 10 * j], ref, 1e-5) << i << "," << j;
        }
    PTD_CUDA_CHECK(sim::graph_destroy(graph));
}

// Each call a GPU refuses during a capture is refused with cudaErrorStreamCaptureUnsupported,
// and the capture then ends with cudaErrorStreamCaptureInvalidated naming it.
TEST(CudaSimGraph, HostSyncsAllocationsAndDownloadsDuringCaptureAreRefused) {
    GraphFixture f;
    std::vector<float> host(GraphFixture::n);
    sim::EventHandle event = nullptr;
    PTD_CUDA_CHECK(sim::event_create(&event));
    void* extra = nullptr;
    PTD_CUDA_CHECK(sim::malloc_device(&extra, 256, "freed during capture"));
    const struct {
        const char* call;
        std::function<sim::Status()> run;
    } hazards[] = {
        {"stream_synchronize", [&] { return sim::stream_synchronize(f.stream); }},
        {"device_synchronize", [&] { return sim::device_synchronize(); }},
        {"event_synchronize", [&] { return sim::event_synchronize(event); }},
        {"memcpy_sync", [&] { return sim::memcpy_sync(host.data(), f.z, 4, sim::CopyKind::device_to_host); }},
        {"device to host", [&] {
             return sim::memcpy_async(host.data(), f.z, 4, sim::CopyKind::device_to_host, f.stream);
         }},
        {"malloc_device", [&] {
             void* p = nullptr;
             return sim::malloc_device(&p, 256, "during capture");
         }},
        {"free_device", [&] { return sim::free_device(extra); }},
    };
    for (const auto& h : hazards) {
        SCOPED_TRACE(h.call);
        PTD_CUDA_CHECK(sim::stream_begin_capture(f.stream));
        f.enqueue();
        const sim::Status refused = h.run();
        EXPECT_EQ(refused.code, sim::kErrStreamCaptureUnsupported);
        EXPECT_NE(refused.message.find(h.call), std::string::npos) << refused.message;
        EXPECT_NE(refused.message.find("captures a CUDA graph"), std::string::npos) << refused.message;
        EXPECT_EQ(sim::memset_async(f.z, 0, 4, f.stream).code, sim::kErrStreamCaptureInvalidated)
            << "work after the refusal joins no graph";
        sim::GraphHandle graph = nullptr;
        const sim::Status ended = sim::stream_end_capture(f.stream, &graph);
        EXPECT_EQ(ended.code, sim::kErrStreamCaptureInvalidated);
        EXPECT_NE(ended.message.find(h.call), std::string::npos) << ended.message;
        EXPECT_EQ(graph, nullptr);
    }
    // the default stream while another captures; a second capture; end without a capture
    PTD_CUDA_CHECK(sim::stream_begin_capture(f.stream));
    EXPECT_EQ(sim::memset_async(f.z, 0, 4, nullptr).code, sim::kErrStreamCaptureImplicit);
    EXPECT_EQ(sim::stream_begin_capture(f.stream).code, sim::kErrStreamCaptureUnsupported);
    sim::GraphHandle graph = nullptr;
    EXPECT_EQ(sim::stream_end_capture(f.stream, &graph).code, sim::kErrStreamCaptureInvalidated);
    EXPECT_EQ(sim::stream_end_capture(f.stream, &graph).code, sim::kErrInvalidValue);
    EXPECT_EQ(sim::stream_begin_capture(nullptr).code, sim::kErrInvalidResourceHandle);
    // after all that, nothing is left capturing: plain work runs again
    PTD_CUDA_CHECK(sim::free_device(extra));
    PTD_CUDA_CHECK(sim::event_destroy(event));
    f.enqueue();
    f.expect_z_is_twice(f.download(f.x));
}

TEST_F(CudaSimDeath, AKernelOnTheDefaultStreamDuringACaptureAborts) {
    GraphFixture f;
    PTD_CUDA_CHECK(sim::stream_begin_capture(f.stream));
    EXPECT_DEATH(PTD_LAUNCH((tk::scale2_vec<float>), 2, 32, 0, nullptr, f.x, f.y, GraphFixture::n),
                 "launch of .*scale2_vec.* during a graph capture: .*default stream");
    sim::GraphHandle graph = nullptr;
    PTD_CUDA_CHECK(sim::stream_end_capture(f.stream, &graph));
    PTD_CUDA_CHECK(sim::graph_destroy(graph));
}

// A host value the graph baked in (here the element count) that the host would pass
// differently now: a second capture of the same work names it.
TEST(CudaSimGraph, ARecaptureNamesTheBakedInValueThatChanged) {
    GraphFixture f;
    sim::GraphHandle first = f.capture(), same = f.capture(), fewer = f.capture(GraphFixture::n - 4);
    EXPECT_EQ(sim::sim_graph_difference(first, same), "");
    const std::string diff = sim::sim_graph_difference(first, fewer);
    EXPECT_NE(diff.find("node 0 (launch of (tk::scale2_vec<float>)"), std::string::npos) << diff;
    EXPECT_NE(diff.find("argument 2 is 0x0000000000000060 now but 0x0000000000000064 in the graph"), std::string::npos)
        << diff;
    for (sim::GraphHandle g : {first, same, fewer}) PTD_CUDA_CHECK(sim::graph_destroy(g));
}

// ---- blaslt_ref against a naive row-major double GEMM ----------------------------------------
//
// The engine's mapping: row-major R[M,N] = P[M,K]·Q[K,N] is column-major Rᵀ = Qᵀ·Pᵀ, so the
// cuBLASLt call has m = N, n = M, k = K, Q in the A slot and P in the B slot. trans_a = true
// means Q is stored as its transpose (a [N,K] weight, PyTorch's Linear layout); trans_b = true
// means P is stored as [K,M]. Bias along m = one value per output column of R.

struct Buffer {
    sim::DTypeLt type;
    std::vector<float> f;
    std::vector<bf16> b;
    std::vector<f16> h;
    Buffer(sim::DTypeLt t, size_t n, float fill = NAN) : type(t) {
        if (t == sim::DTypeLt::f32) f.assign(n, fill);
        if (t == sim::DTypeLt::bf16) b.assign(n, sim::from_f32<bf16>(fill));
        if (t == sim::DTypeLt::f16) h.assign(n, sim::from_f32<f16>(fill));
    }
    void* data() {
        return type == sim::DTypeLt::f32 ? (void*)f.data() : type == sim::DTypeLt::bf16 ? (void*)b.data() : (void*)h.data();
    }
    // Stores v rounded to the buffer's type and returns the value actually stored.
    double set(size_t i, double v) {
        if (type == sim::DTypeLt::f32) return f[i] = (float)v;
        if (type == sim::DTypeLt::bf16) return sim::to_f32(b[i] = sim::from_f32<bf16>((float)v));
        return sim::to_f32(h[i] = sim::from_f32<f16>((float)v));
    }
    double get(size_t i) const {
        if (type == sim::DTypeLt::f32) return f[i];
        if (type == sim::DTypeLt::bf16) return sim::to_f32(b[i]);
        return sim::to_f32(h[i]);
    }
};

struct GemmCase {
    bool trans_a, trans_b;
    sim::Epilogue epilogue;
    sim::DTypeLt in_type, out_type;
    float alpha, beta;
    bool in_place;
    int batch;
};

std::string describe(const GemmCase& c) {
    return std::string("trans_a=") + (c.trans_a ? "T" : "N") + " trans_b=" + (c.trans_b ? "T" : "N") +
           " epilogue=" + sim::epilogue_name(c.epilogue) + " in=" + sim::dtype_lt_name(c.in_type) +
           " out=" + sim::dtype_lt_name(c.out_type) + " alpha=" + std::to_string(c.alpha) +
           " beta=" + std::to_string(c.beta) + (c.in_place ? " in-place" : "") + " batch=" + std::to_string(c.batch);
}

void run_gemm_case(const GemmCase& c) {
    SCOPED_TRACE(describe(c));
    const int64_t M = 5, N = 12, K = 7;  // N = cuBLASLt's m: bias length, aux rows
    const int64_t pad = 3;               // every ld exceeds the rows it covers
    // Row-major storage of the logical matrices (strides per batch):
    const int64_t ldq = (c.trans_a ? K : N) + pad, rows_q = c.trans_a ? N : K;  // Q [K,N] or Qᵀ [N,K]
    const int64_t ldp = (c.trans_b ? M : K) + pad, rows_p = c.trans_b ? K : M;  // P [M,K] or Pᵀ [K,M]
    const int64_t ldr = N + pad, ld_aux = 16;
    const int64_t stride_q = ldq * rows_q + 5, stride_p = ldp * rows_p + 2, stride_r = ldr * M + 4,
                  stride_aux = ld_aux * M + 8;
    const int B = c.batch;
    Buffer Qb(c.in_type, stride_q * B), Pb(c.in_type, stride_p * B), Cb(c.out_type, stride_r * B),
        Db(c.out_type, stride_r * B), aux(c.out_type, stride_aux * B), bias(c.out_type, std::max(M, N));
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
    // logical values (as stored, i.e. after rounding)
    std::vector<double> P(B * M * K), Q(B * K * N), C(B * M * N), A(B * M * N), bias_v(N);
    for (int b = 0; b < B; ++b) {
        for (int64_t i = 0; i < M; ++i)
            for (int64_t p = 0; p < K; ++p)
                P[(b * M + i) * K + p] =
                    Pb.set(b * stride_p + (c.trans_b ? p * ldp + i : i * ldp + p), dist(rng));
        for (int64_t p = 0; p < K; ++p)
            for (int64_t j = 0; j < N; ++j)
                Q[(b * K + p) * N + j] =
                    Qb.set(b * stride_q + (c.trans_a ? j * ldq + p : p * ldq + j), dist(rng));
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
                C[(b * M + i) * N + j] = Cb.set(b * stride_r + i * ldr + j, dist(rng));
                A[(b * M + i) * N + j] = aux.set(b * stride_aux + i * ld_aux + j, dist(rng));  // dgelu input
            }
    }
    for (int64_t j = 0; j < N; ++j) bias_v[j] = bias.set(j, dist(rng));
    if (c.in_place) Db = Cb;  // D starts as C and the call reads C from D

    sim::LtMatmul p;
    p.trans_a = c.trans_a;
    p.trans_b = c.trans_b;
    p.m = N;
    p.n = M;
    p.k = K;
    p.alpha = c.alpha;
    p.beta = c.beta;
    p.A = Qb.data();
    p.a_type = c.in_type;
    p.lda = ldq;
    p.stride_a = stride_q;
    p.B = Pb.data();
    p.b_type = c.in_type;
    p.ldb = ldp;
    p.stride_b = stride_p;
    p.C = c.in_place ? Db.data() : Cb.data();
    p.c_type = c.out_type;
    p.ldc = ldr;
    p.stride_c = stride_r;
    p.D = Db.data();
    p.d_type = c.out_type;
    p.ldd = ldr;
    p.stride_d = stride_r;
    p.batch = B;
    p.epilogue = c.epilogue;
    const bool has_bias = c.epilogue == sim::Epilogue::bias || c.epilogue == sim::Epilogue::gelu_bias ||
                          c.epilogue == sim::Epilogue::gelu_aux_bias || c.epilogue == sim::Epilogue::bgradb;
    if (has_bias) {
        p.bias = bias.data();
        p.bias_type = c.out_type;
    }
    const bool has_aux = c.epilogue == sim::Epilogue::gelu_aux || c.epilogue == sim::Epilogue::gelu_aux_bias ||
                         c.epilogue == sim::Epilogue::dgelu;
    if (has_aux) {
        p.aux = aux.data();
        p.ld_aux = ld_aux;
        p.stride_aux = stride_aux;
    }
    const sim::Status st = sim::lt_matmul(p, nullptr);
    ASSERT_TRUE(st.ok()) << st.message;

    // The naive row-major reference, in double.
    const double out_tol = c.out_type == sim::DTypeLt::f32 ? 1e-5 : c.out_type == sim::DTypeLt::bf16 ? 1.0 / 128 : 1.0 / 1024;
    auto gelu = [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); };
    auto dgelu = [&](double x) {  // numeric derivative of the same function: independent of blaslt.h's formula
        const double h = 1e-6;
        return (gelu(x + h) - gelu(x - h)) / (2 * h);
    };
    for (int b = 0; b < B; ++b)
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
                double x = 0;
                for (int64_t q = 0; q < K; ++q) x += P[(b * M + i) * K + q] * Q[(b * K + q) * N + j];
                x = c.alpha * x + (c.beta != 0 ? c.beta * C[(b * M + i) * N + j] : 0.0);
                double pre = x;
                switch (c.epilogue) {
                    case sim::Epilogue::none: case sim::Epilogue::bgradb: break;
                    case sim::Epilogue::bias: x += bias_v[j]; break;
                    case sim::Epilogue::gelu: case sim::Epilogue::gelu_aux: x = gelu(x); break;
                    case sim::Epilogue::gelu_bias: case sim::Epilogue::gelu_aux_bias:
                        pre = x + bias_v[j];
                        x = gelu(pre);
                        break;
                    case sim::Epilogue::dgelu: x *= dgelu(A[(b * M + i) * N + j]); break;
                }
                const double got = Db.get(b * stride_r + i * ldr + j);
                ASSERT_NEAR(got, x, out_tol * std::max(1.0, std::fabs(x))) << "batch " << b << " R[" << i << "," << j << "]";
                if (c.epilogue == sim::Epilogue::gelu_aux || c.epilogue == sim::Epilogue::gelu_aux_bias) {
                    ASSERT_NEAR(aux.get(b * stride_aux + i * ld_aux + j), pre, out_tol * std::max(1.0, std::fabs(pre)))
                        << "aux batch " << b << " [" << i << "," << j << "]";
                }
            }
    if (c.epilogue == sim::Epilogue::bgradb) {
        // Σ over k of op(B) = the row sums of P: one per row of R (cuBLASLt's n).
        for (int64_t i = 0; i < M; ++i) {
            double s = 0;
            for (int64_t q = 0; q < K; ++q) s += P[i * K + q];
            ASSERT_NEAR(bias.get(i), s, out_tol * std::max(1.0, std::fabs(s))) << "bias gradient " << i;
        }
    }
    // Padding between rows and batches is untouched (NaN fill of D stays where nothing is written).
    if (!c.in_place) {
        EXPECT_TRUE(std::isnan(Db.get(N))) << "D's padding after the first row was written";
        EXPECT_TRUE(std::isnan(Db.get(stride_r - 1))) << "D's padding between batches was written";
    }
}

TEST(CudaSimBlasLt, ReferenceMatchesNaiveRowMajorGemmInEveryCombination) {
    using E = sim::Epilogue;
    using T = sim::DTypeLt;
    int cases = 0;
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            for (E e : {E::none, E::bias, E::gelu, E::gelu_bias, E::gelu_aux, E::gelu_aux_bias, E::dgelu, E::bgradb})
                for (auto [in, out] : {std::pair{T::f32, T::f32}, std::pair{T::bf16, T::f32}, std::pair{T::bf16, T::bf16},
                                       std::pair{T::f16, T::f16}})
                    for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.75f, -1.25f}})
                        for (bool in_place : {false, true})
                            for (int batch : {1, 3}) {
                                if (in_place && beta == 0.0f) continue;
                                if (e == E::bgradb && batch != 1) continue;
                                run_gemm_case(GemmCase{ta, tb, e, in, out, alpha, beta, in_place, batch});
                                ++cases;
                                if (HasFatalFailure()) return;
                            }
    EXPECT_EQ(cases, 4 * (7 * 4 * 3 * 2 + 1 * 4 * 3 * 1));
}

// beta == 0: C is not read, so NaN (or garbage, or a null pointer) in C does not leak into D.
TEST(CudaSimBlasLt, BetaZeroLeavesCUnread) {
    std::vector<float> a = {1, 2, 3, 4}, b = {1, 0, 0, 1}, c = {NAN, NAN, NAN, NAN}, d(4, -1.0f);
    sim::LtMatmul p;
    p.m = p.n = p.k = 2;
    p.A = a.data();
    p.lda = 2;
    p.B = b.data();
    p.ldb = 2;
    p.C = c.data();
    p.ldc = 2;
    p.D = d.data();
    p.ldd = 2;
    ASSERT_TRUE(sim::lt_matmul(p, nullptr).ok());
    EXPECT_EQ(d, a);
    p.C = nullptr;
    EXPECT_TRUE(sim::lt_matmul(p, nullptr).ok());
    p.beta = 1.0f;
    EXPECT_NE(sim::lt_matmul(p, nullptr).message.find("beta != 0 but C is null"), std::string::npos);
}

// The mapping the engine uses, worked once by hand: row-major C[2,2] = A[2,3]·B[3,2] is the
// column-major Cᵀ = Bᵀ·Aᵀ — m = N = 2, n = M = 2, k = K = 3, B in the A slot (ld N), A in the
// B slot (ld K), C as D with ld N; no transposes and no copies.
TEST(CudaSimBlasLt, WorkedExampleRowMajorAsColumnMajor) {
    const float A[2 * 3] = {1, 2, 3,   //
                            4, 5, 6};  // row-major [2,3]
    const float B[3 * 2] = {7, 8,      //
                            9, 10,     //
                            11, 12};   // row-major [3,2]
    float C[2 * 2] = {0, 0, 0, 0};
    sim::LtMatmul p;
    p.m = 2;  // N
    p.n = 2;  // M
    p.k = 3;  // K
    p.A = B;
    p.lda = 2;  // B as column-major [N,K] = Bᵀ
    p.B = A;
    p.ldb = 3;  // A as column-major [K,M] = Aᵀ
    p.D = C;
    p.ldd = 2;
    ASSERT_TRUE(sim::lt_matmul(p, nullptr).ok());
    // 1·7+2·9+3·11 = 58, 1·8+2·10+3·12 = 64, 4·7+5·9+6·11 = 139, 4·8+5·10+6·12 = 154
    const float expected[4] = {58, 64, 139, 154};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(C[i], expected[i]) << i;

    // A Linear layer with the weight stored [out, in] = W[N,K]: Y = X·Wᵀ + b is trans_a = T
    // with W in the A slot (ld K), X in the B slot (ld K), and the bias epilogue (along N).
    const float W[2 * 3] = {1, 0, -1,  //
                            2, 1, 0};  // [N=2, K=3]
    const float bias[2] = {0.5f, -0.5f};
    float Y[2 * 2] = {};
    p.trans_a = true;
    p.A = W;
    p.lda = 3;
    p.B = A;
    p.ldb = 3;
    p.D = Y;
    p.epilogue = sim::Epilogue::bias;
    p.bias = bias;
    ASSERT_TRUE(sim::lt_matmul(p, nullptr).ok());
    // X row 0 = (1,2,3): W·x = (1-3, 2+2) = (-2, 4) + b = (-1.5, 3.5); row 1 = (4,5,6): (-2, 13) + b
    const float expected_y[4] = {-1.5f, 3.5f, -1.5f, 12.5f};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(Y[i], expected_y[i]) << i;
}

TEST(CudaSimBlasLt, RejectsWhatCublasLtRejects) {
    float buf[64] = {};
    auto base = [&] {
        sim::LtMatmul p;
        p.m = 4;
        p.n = 3;
        p.k = 2;
        p.A = p.B = buf;
        p.C = p.D = buf;
        p.lda = 4;
        p.ldb = 2;
        p.ldc = p.ldd = 4;
        return p;
    };
    auto message = [](const sim::LtMatmul& p) {
        const sim::Status s = sim::lt_matmul(p, nullptr);
        EXPECT_EQ(s.code, s.ok() ? 0 : sim::kErrInvalidValue);
        return s.message;
    };
    EXPECT_EQ(message(base()), "");
    {
        auto p = base();
        p.lda = 3;
        EXPECT_NE(message(p).find("lda = 3 is less than the 4 rows of A as stored (m×k)"), std::string::npos) << message(p);
        p.trans_a = true;  // stored k×m: 2 rows, lda 3 is fine
        EXPECT_EQ(message(p), "");
    }
    {
        auto p = base();
        p.ldb = 1;
        EXPECT_NE(message(p).find("ldb = 1"), std::string::npos);
    }
    {
        auto p = base();
        p.a_type = sim::DTypeLt::bf16;
        EXPECT_NE(message(p).find("A and B must have the same type"), std::string::npos);
        p.b_type = sim::DTypeLt::bf16;
        p.c_type = p.d_type = sim::DTypeLt::f16;
        EXPECT_NE(message(p).find("not a cuBLASLt combination"), std::string::npos);
        p.d_type = sim::DTypeLt::bf16;
        EXPECT_NE(message(p).find("C and D must have the same type"), std::string::npos);
    }
    {
        auto p = base();
        p.beta = 1.0f;
        p.ldc = 8;  // in place with a different ld
        EXPECT_NE(message(p).find("in place (C == D) needs ldc == ldd"), std::string::npos);
    }
    {
        auto p = base();
        p.epilogue = sim::Epilogue::bias;
        EXPECT_NE(message(p).find("needs a bias pointer"), std::string::npos);
        p.bias = buf;
        p.bias_type = sim::DTypeLt::bf16;
        EXPECT_NE(message(p).find("bias type is D's"), std::string::npos);
    }
    {
        auto p = base();
        p.epilogue = sim::Epilogue::gelu_aux;
        p.aux = buf;
        p.ld_aux = 4;
        EXPECT_NE(message(p).find("divisible by 8"), std::string::npos);
        p.ld_aux = 8;
        EXPECT_EQ(message(p), "");
    }
    {
        auto p = base();
        p.batch = 2;
        p.stride_d = 4;  // overlapping output batches
        EXPECT_NE(message(p).find("makes the batches of D overlap"), std::string::npos);
    }
    {
        // Side by side inside the leading dimension (per-head outputs in the columns of
        // one [T, H·D] row-major matrix): disjoint, so allowed.
        auto p = base();
        p.batch = 2;
        p.ldc = p.ldd = 8;
        p.stride_c = p.stride_d = 4;
        EXPECT_EQ(message(p), "");
        p.stride_c = p.stride_d = 3;  // rows 3..6 of batch 1 overlap rows 0..3 of batch 0
        EXPECT_NE(message(p).find("makes the batches of D overlap"), std::string::npos);
    }
    {
        auto p = base();
        p.k = 0;
        EXPECT_NE(message(p).find("must be at least 1"), std::string::npos);
    }
}

}  // namespace

// PTD_CUDA_SYNC_CHECK (runtime.h): unset, "" and "0" are off, "1" on, anything else an error
// naming the variable, the value and what is allowed. (The check itself needs a device; the
// simulator runs every op synchronously, so its sync_check is always ok.)
TEST(CudaSyncCheck, ParsesTheVariableAndRejectsOtherValues) {
    std::string error;
    EXPECT_EQ(sim::sync_check_mode(nullptr, &error), 0);
    EXPECT_EQ(sim::sync_check_mode("", &error), 0);
    EXPECT_EQ(sim::sync_check_mode("0", &error), 0);
    EXPECT_EQ(sim::sync_check_mode("1", &error), 1);
    EXPECT_EQ(error, "");
    EXPECT_EQ(sim::sync_check_mode("yes", &error), -1);
    EXPECT_EQ(error, "PTD_CUDA_SYNC_CHECK: got \"yes\"; allowed: 0 or unset (off), 1 (on)");
    EXPECT_TRUE(sim::sync_check("anything").ok());
}

// The rule for fused epilogues shared by both cuBLASLt layers (blaslt.h): 16-byte pointers,
// leading dimensions and batch strides; a plain GEMM is not subject to it.
TEST(CudaSimLt, FusedEpilogueNeeds16ByteOperandsElseNoAlgorithm) {
    alignas(256) static float mem[1024];
    sim::LtMatmul p;
    p.m = 16, p.n = 8, p.k = 8;
    p.A = p.B = p.D = mem;
    p.lda = 16, p.ldb = 8, p.ldd = p.ldc = 16;
    p.epilogue = sim::Epilogue::gelu_aux, p.aux = mem, p.ld_aux = 16;
    EXPECT_TRUE(sim::lt_epilogue_runnable(p).ok());
    p.aux = mem + 2;  // 8 bytes past a 16-byte boundary
    sim::Status s = sim::lt_epilogue_runnable(p);
    EXPECT_EQ(s.code, sim::kLtNoAlgorithm);
    EXPECT_NE(s.message.find("aux at"), std::string::npos) << s.message;
    p.aux = mem, p.lda = 18;  // 72 bytes: not a multiple of 16
    s = sim::lt_epilogue_runnable(p);
    EXPECT_NE(s.message.find("leading dimension of A = 18 × 4 bytes is not a multiple of 16"), std::string::npos)
        << s.message;
    p.epilogue = sim::Epilogue::none, p.aux = nullptr;
    EXPECT_TRUE(sim::lt_epilogue_runnable(p).ok());
    p.A = reinterpret_cast<const char*>(mem) + 2;  // not even f32-aligned: lt_validate refuses
    s = sim::lt_validate(p);
    EXPECT_NE(s.message.find("A at"), std::string::npos) << s.message;
    EXPECT_NE(s.message.find("is not aligned to its f32 elements (4 bytes)"), std::string::npos) << s.message;
}

// Racecheck (runtime.h): each launch again from the same memory in the reverse block order,
// every device allocation compared bit for bit. A kernel whose blocks write one element is
// stopped naming the kernel, the allocation and the byte; one whose blocks keep to their own
// elements runs.
TEST(CudaSimRacecheck, ReverseBlockOrderExposesBlocksThatDependOnEachOther) {
    void* d = nullptr;
    ASSERT_TRUE(sim::malloc_device(&d, 16 * sizeof(int), "race out").ok());
    int* out = static_cast<int*>(d);
    sim::sim_set_racecheck(true);
    EXPECT_DEATH(PTD_LAUNCH(bad::last_block_wins, 4, 32, 0, nullptr, out),
                 "racecheck: bad::last_block_wins .*device allocation 'race out' byte 0 is");
    PTD_LAUNCH(bad::own_element, 16, 32, 0, nullptr, out);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], i);
    sim::sim_set_racecheck(false);
    ASSERT_TRUE(sim::free_device(d).ok());
}

// The interleaved order: blocks resident together, their stretches between barriers taken in
// turn. A read-barrier-write of one counter gives the same bits in the seeded and the reverse
// order (every block runs whole), and loses updates only when blocks interleave.
TEST(CudaSimRacecheck, InterleavedBlocksExposeAReadThenWriteAcrossABarrier) {
    void* d = nullptr;
    ASSERT_TRUE(sim::malloc_device(&d, sizeof(int), "counter").ok());
    int* counter = static_cast<int*>(d);
    *counter = 0;
    PTD_LAUNCH(bad::split_increment, 4, 32, 0, nullptr, counter);
    EXPECT_EQ(*counter, 4);  // without racecheck: one block after another
    sim::sim_set_racecheck(true);
    EXPECT_DEATH(PTD_LAUNCH(bad::split_increment, 4, 32, 0, nullptr, counter),
                 "racecheck: bad::split_increment .*device allocation 'counter' byte 0 is 8 after the blocks ran in one "
                 "order and 5 with 4 blocks resident and their threads interleaved between barriers");
    sim::sim_set_racecheck(false);
    ASSERT_TRUE(sim::free_device(d).ok());
}

// ---- memcheck (runtime.h) ------------------------------------------------------------------

TEST(CudaSimMemcheck, ParsesTheVariableAndRejectsOtherValues) {
    sim::SimMemcheck mode = sim::SimMemcheck::end;
    std::string error;
    ASSERT_TRUE(sim::sim_memcheck_mode(nullptr, &mode, &error));
    EXPECT_EQ(mode, sim::SimMemcheck::off);
    ASSERT_TRUE(sim::sim_memcheck_mode("0", &mode, &error));
    EXPECT_EQ(mode, sim::SimMemcheck::off);
    ASSERT_TRUE(sim::sim_memcheck_mode("1", &mode, &error));
    EXPECT_EQ(mode, sim::SimMemcheck::end);
    ASSERT_TRUE(sim::sim_memcheck_mode("end", &mode, &error));
    EXPECT_EQ(mode, sim::SimMemcheck::end);
    ASSERT_TRUE(sim::sim_memcheck_mode("start", &mode, &error));
    EXPECT_EQ(mode, sim::SimMemcheck::start);
    EXPECT_EQ(error, "");
    EXPECT_FALSE(sim::sim_memcheck_mode("yes", &mode, &error));
    EXPECT_EQ(error, "PTD_CUDA_SIM_MEMCHECK: got \"yes\"; allowed: 0 or unset (off), 1 or end (allocations end at a "
                     "guard page), start (allocations start at a guard page)");
}

// Memcheck with one placement for the test's lifetime; allocations made under it are freed
// before it is switched off again (the placement is chosen when memory is allocated).
class CudaSimMemcheck : public ::testing::TestWithParam<sim::SimMemcheck> {
protected:
    static constexpr int n = 37;  // 148 bytes: neither a multiple of 16 nor of 256
    void SetUp() override {
        GTEST_FLAG_SET(death_test_style, "threadsafe");
        sim::sim_set_memcheck(GetParam());
        void* p = nullptr;
        ASSERT_TRUE(sim::malloc_device(&p, n * sizeof(float), "memcheck in").ok());
        in = static_cast<float*>(p);
        ASSERT_TRUE(sim::malloc_device(&p, n * sizeof(float), "memcheck out").ok());
        out = static_cast<float*>(p);
        for (int i = 0; i < n; ++i) in[i] = (float)i;
    }
    void TearDown() override {
        EXPECT_TRUE(sim::free_device(in).ok());
        EXPECT_TRUE(sim::free_device(out).ok());
        sim::sim_set_memcheck(sim::SimMemcheck::off);
    }
    float* in = nullptr;
    float* out = nullptr;
};

// A kernel that stays inside its allocations runs and gives the right values, in both
// placements; so does one using 128-bit accesses, which the GPU allows at any 16-byte
// offset from an allocation's (256-byte aligned) start.
TEST_P(CudaSimMemcheck, InBoundsKernelsRun) {
    if (GetParam() == sim::SimMemcheck::start) EXPECT_EQ(reinterpret_cast<uintptr_t>(in) % 4096, 0u);
    else EXPECT_EQ((reinterpret_cast<uintptr_t>(in) + n * sizeof(float)) % 4096, 0u);  // its end at the guard
    EXPECT_EQ(sim::sim_gpu_alignment(in), 256u);
    EXPECT_EQ(sim::sim_gpu_alignment(in + 4), 16u);
    EXPECT_EQ(sim::sim_gpu_alignment(in + 1), 4u);
    PTD_LAUNCH(bad::copy_vec, 2, 8, 0, nullptr, in, out, n);
    for (int i = 0; i < n; ++i) EXPECT_EQ(out[i], (float)i) << i;
}

INSTANTIATE_TEST_SUITE_P(Placements, CudaSimMemcheck, ::testing::Values(sim::SimMemcheck::end, sim::SimMemcheck::start),
                         [](const auto& info) { return info.param == sim::SimMemcheck::end ? "End" : "Start"; });

// The access faults at the guard page; the message names the kernel, its launch site, the
// block and thread, read or write, the address and where it lies from the nearest allocation.
using CudaSimMemcheckEnd = CudaSimMemcheck;
TEST_P(CudaSimMemcheckEnd, OneElementPastTheEndFaultsNamingTheThread) {
    EXPECT_DEATH(PTD_LAUNCH(bad::copy_one_past_the_end, 2, 32, 0, nullptr, in, out, n),
                 "memcheck: invalid write by bad::copy_one_past_the_end launched at .*test_cuda_sim.cpp:[0-9]+, "
                 "grid \\(2, 1, 1\\) block \\(32, 1, 1\\), in block \\(1, 0, 0\\) thread \\(5, 0, 0\\):\n"
                 "  address 0x[0-9a-f]+ is 0 bytes past the end of device allocation 'memcheck out' \\(base "
                 "0x[0-9a-f]+, 148 bytes\\)");
    EXPECT_DEATH(PTD_LAUNCH(bad::read_one_past_the_end, 2, 32, 0, nullptr, in, out, n),
                 "memcheck: invalid read by bad::read_one_past_the_end .* in block \\(1, 0, 0\\) thread \\(5, 0, 0\\):\n"
                 "  address 0x[0-9a-f]+ is 0 bytes past the end of device allocation 'memcheck in' \\(base");
    // The byte before the start is canary here (the start's guard is a page away): a write
    // there is found after the launch and the other placement is named.
    EXPECT_DEATH(PTD_LAUNCH(bad::write_one_before_the_start, 2, 32, 0, nullptr, out, n),
                 "memcheck: bad::write_one_before_the_start at .*test_cuda_sim.cpp:[0-9]+ .*a kernel wrote 4 bytes "
                 "before the start of device allocation 'memcheck out' \\(base 0x[0-9a-f]+, 148 bytes\\).*"
                 "PTD_CUDA_SIM_MEMCHECK=start");
}
// Host code touching device memory is covered too: the cuBLASLt reference GEMM reading an A
// one element shorter than m × k (a size error lt_validate cannot see) faults at that element.
TEST_P(CudaSimMemcheckEnd, AReferenceGemmReadingPastAnOperandFaults) {
    void *a = nullptr, *b = nullptr, *d = nullptr;
    ASSERT_TRUE(sim::malloc_device(&a, (16 * 8 - 1) * sizeof(float), "A short by one").ok());
    ASSERT_TRUE(sim::malloc_device(&b, 8 * 8 * sizeof(float), "B").ok());
    ASSERT_TRUE(sim::malloc_device(&d, 16 * 8 * sizeof(float), "D").ok());
    std::fill_n(static_cast<float*>(a), 16 * 8 - 1, 1.0f);
    std::fill_n(static_cast<float*>(b), 8 * 8, 1.0f);
    sim::LtMatmul p;
    p.m = 16, p.n = 8, p.k = 8;
    p.A = a, p.B = b, p.D = d;
    p.lda = 16, p.ldb = 8, p.ldd = p.ldc = 16;
    EXPECT_DEATH((void)sim::lt_matmul(p, nullptr),
                 "memcheck: invalid read outside any kernel .*\n  address 0x[0-9a-f]+ is 0 bytes past the end of "
                 "device allocation 'A short by one' \\(base 0x[0-9a-f]+, 508 bytes\\)");
    for (void* x : {a, b, d}) ASSERT_TRUE(sim::free_device(x).ok());
}
INSTANTIATE_TEST_SUITE_P(Placement, CudaSimMemcheckEnd, ::testing::Values(sim::SimMemcheck::end),
                         [](const auto&) { return "End"; });

using CudaSimMemcheckStart = CudaSimMemcheck;
TEST_P(CudaSimMemcheckStart, OneElementBeforeTheStartFaultsNamingTheThread) {
    EXPECT_DEATH(PTD_LAUNCH(bad::write_one_before_the_start, 2, 32, 0, nullptr, out, n),
                 "memcheck: invalid write by bad::write_one_before_the_start launched at .*test_cuda_sim.cpp:[0-9]+, "
                 "grid \\(2, 1, 1\\) block \\(32, 1, 1\\), in block \\(0, 0, 0\\) thread \\(0, 0, 0\\):\n"
                 "  address 0x[0-9a-f]+ is 4 bytes before the start of device allocation 'memcheck out' \\(base "
                 "0x[0-9a-f]+, 148 bytes\\)");
    EXPECT_DEATH(PTD_LAUNCH(bad::read_one_before_the_start, 2, 32, 0, nullptr, in, out, n),
                 "memcheck: invalid read by bad::read_one_before_the_start .* in block \\(0, 0, 0\\) thread "
                 "\\(0, 0, 0\\):\n  address 0x[0-9a-f]+ is 4 bytes before the start of device allocation 'memcheck in'");
    // Past the end is canary in this placement: the write is found after the launch.
    EXPECT_DEATH(PTD_LAUNCH(bad::copy_one_past_the_end, 2, 32, 0, nullptr, in, out, n),
                 "memcheck: bad::copy_one_past_the_end at .*a kernel wrote 0 bytes past the end of device allocation "
                 "'memcheck out'.*PTD_CUDA_SIM_MEMCHECK=end");
}
INSTANTIATE_TEST_SUITE_P(Placement, CudaSimMemcheckStart, ::testing::Values(sim::SimMemcheck::start),
                         [](const auto&) { return "Start"; });

// A thread running out of its fiber stack hits the guard page below it; under memcheck the
// report says so, naming the thread.
TEST_P(CudaSimMemcheckEnd, StackOverflowIsNamed) {
    EXPECT_DEATH(PTD_LAUNCH(bad::overflow_stack, 1, 1, 0, nullptr, reinterpret_cast<int*>(out)),
                 "memcheck: invalid write by bad::overflow_stack .* in block \\(0, 0, 0\\) thread \\(0, 0, 0\\):\n"
                 "  address 0x[0-9a-f]+ is in the guard page below the thread's 256 KiB stack");
}

// A freed allocation's pages are unmapped: a kernel still using the pointer faults.
TEST(CudaSimMemcheckFreed, UseAfterFreeFaults) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    sim::sim_set_memcheck(sim::SimMemcheck::end);
    void* p = nullptr;
    ASSERT_TRUE(sim::malloc_device(&p, 64 * sizeof(float), "freed").ok());
    void* keep = nullptr;
    ASSERT_TRUE(sim::malloc_device(&keep, 64 * sizeof(float), "kept").ok());
    ASSERT_TRUE(sim::free_device(p).ok());
    EXPECT_DEATH(PTD_LAUNCH(bad::write_one_before_the_start, 1, 32, 0, nullptr, static_cast<float*>(p) + 1, 32),
                 "memcheck: invalid write by bad::write_one_before_the_start .*in no allocation's pages");
    ASSERT_TRUE(sim::free_device(keep).ok());
    sim::sim_set_memcheck(sim::SimMemcheck::off);
}
