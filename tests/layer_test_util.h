// layer_test_util.h — one hand-built transformer layer (est::LayoutDerived) for the tests that
// check the per-layer memory and time functions term by term (test_recmod, test_menorm).
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

}  // namespace ptd_test
