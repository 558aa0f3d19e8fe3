// test_cublaslt_standin_sim.cpp — the simulator side of test_cublaslt_standin (this TU is
// compiled with PTD_CUDA_SIM): random operands in the 16-bit formats, and the trace of every
// GEMM the model makes, from the cuda-sim backend in shapes-only mode (runtime.h), as the
// plain GemmSpecs of cuda_gpu_test_api.h.
#define PTD_CUDA_SIM 1
#include <random>

#include "blaslt.h"
#include "cuda_backend.h"
#include "cuda_gpu_test_api.h"
#include "lt_standin_test_api.h"
#include "ptd/engine/backend.h"
#include "ptd/engine/comm.h"
#include "ptd/engine/model.h"
#include "sim/sim.h"

namespace lt_standin_test {

namespace sim = ptd::cuda::sim;

void fill_random(void* p, int type, int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) {
        const float v = u(rng);
        switch ((sim::DTypeLt)type) {
            case sim::DTypeLt::f32: static_cast<float*>(p)[i] = v; break;
            case sim::DTypeLt::bf16: static_cast<sim::bf16*>(p)[i] = sim::from_f32<sim::bf16>(v); break;
            case sim::DTypeLt::f16: static_cast<sim::f16*>(p)[i] = sim::from_f32<sim::f16>(v); break;
        }
    }
}

std::string model_gemms(const ptd::engine::EngineConfig& cfg, std::vector<cuda_gpu_test::GemmSpec>* out) {
    using namespace ptd::engine;
    sim::sim_set_shapes_only(true);
    sim::sim_set_capacity(size_t{1} << 46);
    std::string error;
    {
        auto be = sim::make_cuda_backend(0, &error);
        if (!be) {
            sim::sim_set_shapes_only(false);
            return error;
        }
        Model m = build_model(*be, cfg, 1);
        Activations a = alloc_activations(*be, cfg);
        auto tp = make_self_communicator("tp", 0);
        double tp_s = 0;
        StageComm c{tp.get(), &tp_s};
        auto& layers = a.slot_layers[0];
        const size_t L = layers.size();
        // One micro-batch: forward, the output head (last stage), backward, the embedding.
        if (cfg.first) embedding_forward(m, a, a.slot_tokens[0], layers[0].ln1_in, c);
        for (int li = 0; li < cfg.layers; ++li) {
            void* next = li + 1 < cfg.layers ? layers[(size_t)(li + 1) % L].ln1_in : cfg.last ? a.out.lnf_in : a.d_stream;
            layer_forward(m, a, li, layers[(size_t)li % L], next, c);
        }
        if (cfg.last) output_forward_backward(m, a, 1.0f, a.d_stream, nullptr, c);
        for (int li = cfg.layers - 1; li >= 0; --li) layer_backward(m, a, li, layers[(size_t)li % L], a.d_stream, a.d_stream, c);
        if (cfg.first) embedding_backward(m, a, a.slot_tokens[0], a.d_stream, c);
        free_activations(*be, a);
        free_model(m);
    }
    sim::sim_set_shapes_only(false);
    for (const sim::LtMatmul& p : sim::sim_take_lt_trace()) {
        cuda_gpu_test::GemmSpec s;
        s.trans_a = p.trans_a, s.trans_b = p.trans_b, s.m = p.m, s.n = p.n, s.k = p.k, s.alpha = p.alpha, s.beta = p.beta;
        s.ab_type = (int)p.a_type, s.cd_type = (int)p.d_type, s.epilogue = (int)p.epilogue;
        s.lda = p.lda, s.ldb = p.ldb, s.ldc = p.ldc, s.ldd = p.ldd;
        s.stride_a = p.stride_a, s.stride_b = p.stride_b, s.stride_c = p.stride_c, s.stride_d = p.stride_d;
        s.batch = p.batch, s.ld_aux = p.ld_aux, s.stride_aux = p.stride_aux;
        s.A = p.A, s.B = p.B, s.C = p.C, s.D = p.D, s.bias = p.bias, s.aux = p.aux;
        if (p.a_type != p.b_type || p.c_type != p.d_type || (p.bias && p.bias_type != p.d_type))
            return "a traced call has types GemmSpec cannot carry";
        out->push_back(s);
    }
    return "";
}

std::string launch_shapes_text() {
    std::string text;
    for (const auto& [name, shape] : sim::sim_launch_shapes()) {
        std::string one = name;
        for (char& ch : one)
            if (ch == ' ') ch = '_';  // "(bias_add_kernel<T, k_vec>)": one field
        text += one + " " + std::to_string(shape.max_threads) + " " + std::to_string(shape.max_dynamic_smem) + " " +
                std::to_string(shape.launches) + "\n";
    }
    return text;
}

}  // namespace lt_standin_test
