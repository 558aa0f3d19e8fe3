// layer_test_util.h — one hand-built transformer layer (est::LayoutDerived) for the tests that
// check the per-layer memory and time functions term by term (recompute_modules.cpp,
// memory_efficient_norm.cpp), and the TP all-gather the async-TP tests count in.
#pragma once

#include "model/estimate_internal.h"

namespace ptd_test {

// A bare Llama-style layer: T = 4096 tokens, h = 4096, 32 heads of 128 (one KV head per rank),
// SwiGLU MLP of 14336, tp = 8 with SP, flash attention, bf16, H100 figures, no recompute.
inline ptd::est::LayoutDerived llama_layer_tp8() {
    ptd::est::LayoutDerived L{};
    L.t = 8, L.p = 1, L.v = 1, L.c = 1, L.ep = 1, L.dp = 1, L.b = 1, L.mbs = 1;
    L.s_local = 4096, L.tokens = 4096, L.e = 2, L.vocab = 128256;
    L.h = 4096, L.d = 128, L.d_qk = 128, L.d_v = 128, L.heads_l = 4, L.kv_l = 1, L.f_l = 14336.0 / 8;
    L.sp = true, L.flash = true, L.dropout = false, L.swiglu = true;
    L.peak = 989e12, L.hbm = 0.8 * 3350e9, L.gemm_eff_max = 0.68, L.flash_eff = 0.5, L.elementwise_factor = 1.0;
    L.fp8 = ptd::Fp8Recipe::none;
    L.rc = ptd::Recompute::none, L.rc_style = ptd::RecomputeStyle::megatron, L.rc_modules = ptd::kRecomputeCoreAttn;
    return L;
}

// One TP all-gather of a micro-batch's 16-bit activations (tokens × hidden) on the job's
// cluster under a tp 8 · dp 8 layout, and the micro-batches a rank runs per step: the unit the
// async-TP tests count exposed collectives in.
struct TpGather {
    double all_gather_s;
    double micro_batches;
};
inline TpGather tp8_dp8_gather(const ptd::JobSpec& j) {
    ptd::est::LayoutDerived L{};
    L.t = 8, L.c = 1, L.dp = 8, L.p = 1, L.ep = 1, L.edp = 8;
    ptd::est::assign_group_links(j.cluster, j.parallel.order.c_str(), L);
    const double tokens = (double)j.training.micro_batch * j.model.seq_len;
    return {ptd::est::nccl_time(ptd::est::Collective::all_gather, 2.0 * tokens * j.model.hidden, L.net_tp),
            (double)j.training.global_batch / (j.training.micro_batch * 8)};
}

}  // namespace ptd_test
