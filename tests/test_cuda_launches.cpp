// test_cuda_launches.cpp — how many kernel launches and cuBLASLt calls the engine makes on
// the CUDA backend, and its pinned host staging (issue 30 point 5: fewer, larger launches),
// launches counted on the cuda-sim
// backend in shapes-only mode (runtime.h: every launch and GEMM is checked and recorded with
// the real addresses, nothing is computed), at GPT-2 124M's shapes (T = 1024, bf16). Each
// test pins what one transformer layer's forward or backward makes and which work rides in
// a GEMM (epilogue, beta = 1) instead of a kernel of its own. The numerics of the same paths
// are proven elsewhere: the cuda-sim engine against the CPU backend's losses
// (test_engine_train EngineCudaSim), the kernels against the CPU (test_cuda_kernels).
#define PTD_CUDA_SIM 1
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "blaslt.h"
#include "cuda_backend.h"
#include "job_test_util.h"
#include "ptd/engine/comm.h"
#include "ptd/engine/model.h"
#include "ptd/layout/job_layout.h"
#include "sim/sim.h"

namespace {

namespace sim = ptd::cuda::sim;
using namespace ptd::engine;

// Kernel launches so far (every launch site, shapes-only mode).
uint64_t launches_so_far() {
    uint64_t n = 0;
    for (const auto& [name, shape] : sim::sim_launch_shapes()) n += shape.launches;
    return n;
}

// What one piece of the step made: kernel launches and the cuBLASLt calls, in order.
struct Counts {
    uint64_t launches = 0;
    std::vector<sim::LtMatmul> gemms;
};

// GPT-2 124M at T = 1024 in bf16 on one rank (micro-batch `mb`), built on a shapes-only
// cuda-sim backend; `count(f)` runs f and returns what it launched.
class ShapesOnlyEngine {
public:
    explicit ShapesOnlyEngine(int mb, const std::vector<std::string>& sets = {}) {
        std::vector<std::string> all = {"model.preset=gpt2-124m", "model.seq_len=1024", "parallel.tp=1",
                                        "parallel.pp=1", "cluster.gpus_per_node=1", "training.precision=bf16",
                                        "training.micro_batch=" + std::to_string(mb),
                                        "training.global_batch=" + std::to_string(mb)};
        all.insert(all.end(), sets.begin(), sets.end());
        const ptd::JobSpec job = ptd_test::load_asset("gpt2-124m-local.toml", all);
        auto layout = ptd::job_layout(job);
        EXPECT_TRUE(layout.has_value()) << (layout ? "" : layout.error().str());
        auto c = make_engine_config(job, *layout, 0);
        EXPECT_TRUE(c.has_value()) << (c ? "" : c.error().str());
        cfg = *c;
        sim::sim_set_shapes_only(true);
        sim::sim_set_capacity(size_t{1} << 46);
        std::string error;
        be = sim::make_cuda_backend(0, &error);
        EXPECT_TRUE(be) << error;
        model = build_model(*be, cfg, 1);
        acts = alloc_activations(*be, cfg);
        tp = make_self_communicator("tp", 0);
        comm = StageComm{tp.get(), &tp_s};
        (void)sim::sim_take_lt_trace();
    }
    ~ShapesOnlyEngine() {
        free_activations(*be, acts);
        free_model(model);
        be.reset();
        sim::sim_set_shapes_only(false);
        (void)sim::sim_take_lt_trace();
    }
    template <class F>
    Counts count(F&& f) {
        const uint64_t before = launches_so_far();
        (void)sim::sim_take_lt_trace();
        f();
        return Counts{launches_so_far() - before, sim::sim_take_lt_trace()};
    }
    LayerActs& layer() { return acts.slot_layers[0][0]; }

    EngineConfig cfg;
    std::unique_ptr<Backend> be;
    Model model;
    Activations acts;
    std::unique_ptr<Communicator> tp;
    double tp_s = 0;
    StageComm comm;
};

// One layer's forward on one TP rank: the output projection's bias rides in its GEMM's bias
// epilogue, and the MLP's down projection writes the layer output itself — bias epilogue,
// the residual read as cuBLASLt's C with beta = 1 (C ≠ D) — so the layer launches five
// kernels of its own (the first norm, the head-major split of q, k, v, the causal softmax,
// the context's merge back, the fused residual add + second norm) and no copy, bias add or
// residual add (eight kernels before issue 30 point 5).
TEST(CudaLaunches, OneTpRankLayerForwardFoldsBiasAndResidualIntoGemms) {
    ShapesOnlyEngine e(1);
    LayerActs& x = e.layer();
    void* out = e.acts.out.lnf_in;
    const Counts f = e.count([&] { layer_forward(e.model, e.acts, 0, x, out, e.comm); });
    EXPECT_EQ(f.launches, 5u);
    ASSERT_EQ(f.gemms.size(), 6u);  // qkv, scores, context, output projection, fc1, fc2
    const sim::LtMatmul& proj = f.gemms[3];
    EXPECT_EQ(proj.epilogue, sim::Epilogue::bias) << "the attention output projection's bias is not in its epilogue";
    EXPECT_EQ(proj.bias, e.model.layers[0].bo->p);
    const sim::LtMatmul& fc2 = f.gemms[5];
    EXPECT_EQ(fc2.epilogue, sim::Epilogue::bias);
    EXPECT_EQ(fc2.bias, e.model.layers[0].b2->p);
    EXPECT_EQ(fc2.beta, 1.0f);
    EXPECT_EQ(fc2.C, x.ln2_in) << "the residual is not the GEMM's C";
    EXPECT_EQ(fc2.D, out) << "the GEMM does not write the layer output";
}

// One layer's backward: the residual stream's gradient stays in place (din = dout) and each
// norm's backward adds its input gradient to it (accumulate_dx) — no copy + add. Kernels:
// two bias gradients of the row-parallel biases (column partials + finish: 2 each), the two
// column-parallel bias gradients after their weight-gradient GEMMs (2 each), each norm's
// backward (its weight gradients, 2, and dx, 1), the softmax backward, and attention's
// permutes (q, k, v and dctx split head-major, dq, dk, dv merged back): 18 (19 before).
TEST(CudaLaunches, LayerBackwardAccumulatesTheResidualGradientInTheNorms) {
    ShapesOnlyEngine e(1);
    LayerActs& x = e.layer();
    void* out = e.acts.out.lnf_in;
    (void)e.count([&] { layer_forward(e.model, e.acts, 0, x, out, e.comm); });
    const Counts b = e.count([&] { layer_backward(e.model, e.acts, 0, x, e.acts.d_stream, e.acts.d_stream, e.comm); });
    EXPECT_EQ(b.launches, 18u);
    // fc2: dW, dx with the GELU backward; fc1: dW, dx; output projection: dx, dW;
    // attention: dP, dQ, dK, dV; qkv: dW, dx.
    EXPECT_EQ(b.gemms.size(), 12u);
}

// Attention's products (issue 30 point 5, as llm.c): with q, k, v permuted head-major, the
// scores and the context in the forward and dP, dQ, dK, dV in the backward are ONE strided-
// batched cuBLASLt call each over every (sequence, head) — micro-batch 4 × 12 heads = 48
// batches (GPT-2: no GQA) — not one call per sequence (4 each before); the kernel launches
// do not grow with the micro-batch either.
TEST(CudaLaunches, AttentionProductsAreOneStridedBatchOverEverySequenceAndHead) {
    ShapesOnlyEngine e(4);
    LayerActs& x = e.layer();
    void* out = e.acts.out.lnf_in;
    const int64_t heads = 4 * 12, T = 1024, D = 64;
    const Counts f = e.count([&] { layer_forward(e.model, e.acts, 0, x, out, e.comm); });
    EXPECT_EQ(f.launches, 5u);
    ASSERT_EQ(f.gemms.size(), 6u);  // qkv, scores, context, output projection, fc1, fc2
    for (size_t i : {1, 2}) EXPECT_EQ(f.gemms[i].batch, heads) << "forward GEMM " << i;
    EXPECT_EQ(f.gemms[1].m * f.gemms[1].n * f.gemms[1].k, T * T * D) << "scores: one T×T×D product per head";
    EXPECT_EQ(f.gemms[2].m * f.gemms[2].n * f.gemms[2].k, T * D * T) << "context: one T×D×T product per head";
    const Counts b = e.count([&] { layer_backward(e.model, e.acts, 0, x, e.acts.d_stream, e.acts.d_stream, e.comm); });
    EXPECT_EQ(b.launches, 18u);
    ASSERT_EQ(b.gemms.size(), 12u);  // fc2 ×2, fc1 ×2, output projection ×2, dP, dQ, dK, dV, qkv ×2
    for (size_t i : {6, 7, 8, 9}) {
        EXPECT_EQ(b.gemms[i].batch, heads) << "backward attention GEMM " << i;
        EXPECT_EQ(b.gemms[i].m * b.gemms[i].n * b.gemms[i].k, T * T * D) << "backward attention GEMM " << i;
    }
}

// Host staging (issue 30 point 5): the backend's host blocks are pinned on a GPU, so an
// upload from one is an asynchronous DMA and the block must not change until the stream is
// synchronised. The simulator write-protects the block meanwhile: a host write between the
// upload and the next download faults (as it would race on a GPU); after the download the
// block is writable again, and uploads from other host memory protect nothing.
class CudaHostStagingDeath : public ::testing::Test {
protected:
    void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(CudaHostStagingDeath, AWriteWhileAnUploadIsInFlightFaultsUntilTheNextDownload) {
    std::string error;
    auto be = sim::make_cuda_backend(0, &error);
    ASSERT_TRUE(be) << error;
    auto* staging = static_cast<int32_t*>(be->alloc_host(64 * sizeof(int32_t), "token ids (host staging)"));
    void* dev = be->alloc(MEM_WORKSPACE, 64 * sizeof(int32_t), "tokens");
    for (int i = 0; i < 64; ++i) staging[i] = i;
    be->upload(dev, staging, 64 * sizeof(int32_t));
    EXPECT_DEATH(staging[3] = 7, "") << "the host wrote a staging block while its upload was in flight";
    int32_t back[64] = {};
    be->download(back, dev, sizeof back);  // synchronises: the upload is done
    EXPECT_EQ(back[63], 63);
    staging[3] = 7;  // writable again
    int32_t pageable[4] = {1, 2, 3, 4};
    be->upload(dev, pageable, sizeof pageable);
    pageable[0] = 9;  // not a host block: staged at once, nothing protected
    be->release(dev);
    be->release_host(staging);
}

}  // namespace
