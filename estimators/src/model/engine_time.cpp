// engine_time.cpp — the bundled engine's step, op by op, timed with a cluster profile.
//
// When the job runs on ptd-engine (estimate.activation_profile = "ptd-engine") and a cluster
// profile measured its hosts, a forward or backward block is the sum of the engine's own
// calls (engine/src/model.cpp: layer_forward, layer_backward, embedding_*, output_loss,
// output_forward_backward), each at the time the profile measured for it (profile_times.h):
// the linear layers' GEMMs by name and shape, the attention core, the element-wise kernels
// by the bytes they move, the tensor-parallel all-gathers and reduce-scatters (all-reduces
// without SP) at their message sizes, the pipeline's p2p. The tail is the engine's
// (optimizer.cpp reduce_gradients, optimizer_step; trainer.cpp): the SP-partial gradients'
// TP all-reduces (one per tensor), the tied embedding's all-reduce across the pipeline, the
// flat gradient buffer's DP all-reduce (reduce-scatter with ZeRO-1), the world all-reduce of
// loss and Σg², AdamW over the shard, and ZeRO-1's parameter all-gather — none overlapped.
// The blocks are then placed by the same 1F1B schedule simulation as any job's.
//
// Shared cores (more ranks than cores): the probes ran on every rank at once, as training
// does, and the profile keeps each op's mean call time, so an op's time already holds what
// sharing the cores costs it (profile_times.cpp call_seconds).
//
// On a GPU without a cluster profile (L.engine_device: issue 30 point 8) the same op list is
// timed from the GPU preset instead — the engine's real kernels, launch for launch:
//   - a GEMM (cuBLASLt) 2·M·N·K / (peak · gemm_efficiency(M, N, K)), the generation's
//     calibrated GEMM ceiling and shape factor (compute.cpp; docs/accuracy.md fits them);
//   - flash attention (kernels/flash.cuh) its executed FLOPs at flash_eff of peak: the
//     forward half of the nominal 4·B·H·T²·D (causal tiles skipped, Dao 2023 §3.1), the
//     backward 7 of the forward's 2 T×T×D products (dK/dV: S, dP, dV, dK; dQ: S, dP, dQ —
//     P is recomputed in both kernels), halved the same way, plus Δ = Σ dctx·ctx at HBM
//     bandwidth; the materialised path its strided-batched GEMMs at the GEMM rate and the
//     softmax's [B·H, T, T] passes at HBM bandwidth, with the backend's launch count (each
//     product one strided-batched GEMM call over every sequence and head, between the
//     head-major permutes of q, k, v, the context and the gradients: cuda_backend.cpp);
//   - an element-wise kernel its bytes at hbm_eff of the HBM bandwidth;
//   - TP collectives and the pipeline's p2p as NCCL runs them (collectives.cpp).
// Launches are asynchronous on one stream, so their host cost overlaps the kernels before
// them and adds no time here; every launch is still counted (OpSum::ops).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "estimate_internal.h"
#include "profile_times.h"

namespace ptd::est {

namespace {

struct OpSum {
    double compute = 0, tp = 0, p2p = 0;
    int ops = 0;  // backend calls (each costs the host's op time)
};

struct EngineShape {
    double R, Rl, h, H, G, D, F, QKV, Vl, B, T, e;
    int t;
    bool sp, ln, bias, swiglu, rope;
    std::string dtype;
};

EngineShape engine_shape(const LayoutDerived& L) {
    EngineShape s;
    s.B = L.b, s.T = L.s_local, s.R = L.b * L.s_local;
    s.t = L.t;
    s.sp = L.sp && L.t > 1;
    s.Rl = s.sp ? s.R / L.t : s.R;
    s.h = L.h, s.H = L.heads_l, s.G = L.kv_l, s.D = L.d, s.F = L.f_l;
    s.QKV = (s.H + 2 * s.G) * s.D;
    s.Vl = L.vocab / L.t;
    s.e = L.e;
    s.ln = L.layernorm;
    s.bias = L.m->bias;
    s.swiglu = L.swiglu;
    s.rope = L.m->position == Position::rope;
    s.dtype = L.act_dtype;
    return s;
}

// Seconds of one collective on the device model (NCCL's algorithms over the group's links).
double device_collective_s(const std::string& op, double bytes, const GroupNet& g) {
    return nccl_time(op == "all_reduce" ? Collective::all_reduce : Collective::all_gather, bytes, g);
}

struct Ops {
    const ProfileTimes& pt;
    const EngineShape& s;
    const LayoutDerived* dev = nullptr;  // the device model (L.engine_device), else the profile's times
    OpSum sum;
    double gemm_seconds(double M, double N, double K) const {
        return 2.0 * M * N * K / (dev->peak * gemm_efficiency(M, N, K, dev->gemm_eff_max));
    }
    void gemm(const char* name, double M, double N, double K) {
        sum.compute += dev ? gemm_seconds(M, N, K) : pt.gemm_s(name, s.dtype, M, N, K);
        ++sum.ops;
    }
    void attention(bool backward) {
        const double fwd = 4.0 * s.B * s.H * s.T * s.T * s.D;
        if (!dev) {
            sum.compute += pt.attention_s(backward ? "attention.bwd" : "attention.fwd", s.dtype, backward ? 2 * fwd : fwd);
            ++sum.ops;
            return;
        }
        if (dev->flash) {
            const double executed = 0.5 * (backward ? 3.5 * fwd : fwd);
            sum.compute += executed / (dev->peak * dev->flash_eff);
            if (backward) sum.compute += 2 * s.R * s.H * s.D * s.e / dev->hbm;  // Δ
            sum.ops += backward ? 3 : 1;
            return;
        }
        // Materialised (cuda_backend.cpp attention_forward / attention_backward): q, k, v
        // permuted head-major, then each product ONE strided-batched GEMM over every (b, h).
        // The permutes' passes over qkv and ctx (B·T·(H + 2G)·D and B·T·H·D elements against
        // a softmax pass's B·H·T·T) are counted as launches, not in the time.
        const double tt = s.B * s.H * s.T * s.T;
        const double product = gemm_seconds(s.T, s.T, s.D) * s.B * s.H;  // one T×T×D product per (b, h)
        if (!backward) {
            sum.compute += 2 * product + 2 * tt * s.e / dev->hbm;  // S, P·V; softmax in place
            sum.ops += 5;                                          // split qkv, S, softmax, P·V, merge ctx
        } else {
            sum.compute += 4 * product + 3 * tt * s.e / dev->hbm;  // dP, dQ, dK, dV; softmax backward
            sum.ops += 8;  // split qkv and dctx, dP, softmax backward, dQ, dK, dV, merge dqkv
        }
    }
    // An element-wise kernel moving `elements` × `passes` activation elements.
    void elem(const char* kernel, double elements, double passes, double bytes_per = 0) {
        const double bytes = elements * passes * (bytes_per > 0 ? bytes_per : s.e);
        sum.compute += dev ? bytes / dev->hbm : pt.bytes_s(kernel, bytes);
        ++sum.ops;
    }
    void tp(const char* op, double bytes) {
        if (s.t > 1)
            sum.tp += dev ? device_collective_s(op, bytes, dev->net_tp) : std::max(0.0, pt.collective_s(op, "tp", s.t, bytes));
        ++sum.ops;
    }
    // Exit of a TP region: reduce-scatter with SP, else all-reduce (model.cpp tp_reduce).
    void tp_reduce() {
        if (s.t > 1) tp(s.sp ? "reduce_scatter" : "all_reduce", s.R * s.h * s.e);
    }
    void tp_gather() {
        if (s.sp) tp("all_gather", s.R * s.h * s.e);
    }
    const char* norm() const { return s.ln ? "layernorm.fwd" : "rmsnorm.fwd"; }
    const char* act() const { return s.swiglu ? "swiglu.fwd" : "gelu.fwd"; }

    void layer_forward() {
        elem(norm(), s.Rl * s.h, 2);
        tp_gather();
        gemm("qkv.fwd", s.R, s.QKV, s.h);
        if (s.rope) elem("copy", s.R * s.QKV, 2), ++sum.ops;  // two rope calls (queries, keys)
        attention(false);
        gemm("attn_proj.fwd", s.R, s.h, s.H * s.D);  // its bias in the epilogue when t = 1
        tp_reduce();
        if (s.bias && s.t > 1) elem("copy", s.Rl * s.h, 2);  // bias add on the reduced rows
        elem(norm(), s.Rl * s.h, 3);                          // add + norm
        tp_gather();
        gemm("mlp_up.fwd", s.R, s.F, s.h);
        if (s.swiglu) gemm("mlp_up.fwd", s.R, s.F, s.h), elem(act(), s.R * s.F, 3);
        gemm("mlp_down.fwd", s.R, s.h, s.F);  // t = 1: bias epilogue and the residual as C (beta 1)
        if (s.t == 1) return;
        tp_reduce();
        elem("copy", s.Rl * s.h, 3);  // bias + residual add on the reduced rows: one kernel (bias_residual_add)
    }
    void layer_backward(bool selective) {
        if (s.bias) elem("copy", s.Rl * s.h, 1);  // bias grad
        tp_gather();
        gemm("mlp_down.wgrad", s.h, s.F, s.R);
        gemm("mlp_down.dgrad", s.R, s.F, s.h);
        if (s.swiglu) {
            elem(act(), s.R * s.F, 5);
            gemm("mlp_up.wgrad", s.F, s.h, s.R), gemm("mlp_up.dgrad", s.R, s.h, s.F);
            gemm("mlp_up.wgrad", s.F, s.h, s.R), gemm("mlp_up.dgrad", s.R, s.h, s.F);
        } else {
            gemm("mlp_up.wgrad", s.F, s.h, s.R), gemm("mlp_up.dgrad", s.R, s.h, s.F);
        }
        if (s.bias) elem("copy", s.R * s.F, 1);  // up-projection bias grad
        tp_reduce();
        elem(norm(), s.Rl * s.h, 5);  // norm backward, += into the residual gradient (accumulate_dx)
        if (s.bias) elem("copy", s.Rl * s.h, 1);
        tp_gather();
        gemm("attn_proj.dgrad", s.R, s.H * s.D, s.h);
        gemm("attn_proj.wgrad", s.h, s.H * s.D, s.R);
        if (selective) attention(false);
        attention(true);
        if (s.rope) elem("copy", s.R * s.QKV, 2), ++sum.ops;
        gemm("qkv.wgrad", s.QKV, s.h, s.R);
        gemm("qkv.dgrad", s.R, s.h, s.QKV);
        if (s.bias) elem("copy", s.R * s.QKV, 1);
        tp_reduce();
        elem(norm(), s.Rl * s.h, 5);
    }
    void embedding_forward() {
        elem("copy", s.R * s.h, 2);  // row gather from the table
        tp_reduce();
        if (s.sp) elem("copy", s.Rl * s.h, 2);
        if (!s.rope) elem("copy", s.Rl * s.h, 3);  // learned positions added
    }
    void embedding_backward() {
        if (!s.rope) elem("copy", s.Rl * s.h, 2);
        tp_gather();
        if (dev) {
            // The CUDA backend groups the rows by token first (kernels/embedding.cuh): the
            // [chunks, Vl] int32 counts zeroed, counted and prefixed, the rows' ids, ranks and
            // positions, the offsets' scan — a memset and four launches.
            const double chunks = std::ceil(s.R / 512.0);
            elem("copy", chunks * s.Vl, 3, 4);
            elem("copy", s.R, 4, 4);
            elem("copy", s.Vl, 2, 4);
            sum.ops += 2;
        }
        elem("copy", s.R * s.h, 3);  // scatter-add into the table's gradient
    }
    // The loss: the last stage's final norm, logits (f32) and cross entropy; with tp > 1
    // Megatron's phases around two small TP all-reduces (model.cpp output_loss).
    void output_forward() {
        elem(norm(), s.Rl * s.h, 2);
        tp_gather();
        gemm("lm_head.fwd", s.R, s.Vl, s.h);
        if (s.t == 1) {
            elem("softmax_xent", s.R * s.Vl, 2, 4);
        } else {
            elem("softmax_xent", s.R * s.Vl, 1, 4);
            tp("all_reduce", s.R * 4);
            elem("softmax_xent", s.R * s.Vl, 1, 4);
            tp("all_reduce", 2 * s.R * 4);
            elem("softmax_xent", s.R * s.Vl, 2, 4);
        }
    }
    void output_backward() {
        elem("softmax_xent", s.R * s.Vl, 2, 4);  // dlogits in place
        gemm("lm_head.wgrad", s.Vl, s.h, s.R);
        gemm("lm_head.dgrad", s.R, s.h, s.Vl);
        tp_reduce();
        elem(norm(), s.Rl * s.h, 4);
    }
};

}  // namespace

// The profile's times, or (device model) an empty profile whose host op cost is 0.
const ProfileTimes& times_of(const LayoutDerived& L) {
    static const ProfileTimes none{};
    return L.profile_times ? *L.profile_times : none;
}

ChunkTime engine_block_time(const LayoutDerived& L, double layers, bool first, bool last) {
    const ProfileTimes& pt = times_of(L);
    const LayoutDerived* dev = L.profile_times ? nullptr : &L;
    const EngineShape s = engine_shape(L);
    const bool selective = L.rc == Recompute::selective, full = L.rc == Recompute::full;
    Ops f{pt, s, dev, {}}, b{pt, s, dev, {}}, rc{pt, s, dev, {}};
    f.layer_forward();
    b.layer_backward(selective);
    if (full) rc.layer_forward();
    auto scaled = [&](const OpSum& o, double n) {
        OpSum r;
        r.compute = n * (o.compute + o.ops * pt.host_op_s);
        r.tp = n * o.tp;
        return r;
    };
    OpSum F = scaled(f.sum, layers), B = scaled(b.sum, layers), RC = scaled(rc.sum, layers);
    // The embedding's and the head's ops, each side apart: measured passes replace them one by one.
    Ops ef_ops{pt, s, dev, {}}, eb_ops{pt, s, dev, {}}, of_ops{pt, s, dev, {}}, ob_ops{pt, s, dev, {}};
    if (first) ef_ops.embedding_forward(), eb_ops.embedding_backward();
    if (last) of_ops.output_forward(), ob_ops.output_backward();
    OpSum EF = scaled(ef_ops.sum, 1), EB = scaled(eb_ops.sum, 1), OF = scaled(of_ops.sum, 1), OB = scaled(ob_ops.sum, 1);
    // The engine's own passes, timed by the profile in the step's order at this rank's shape
    // (the `layer` probe): their compute replaces the sum of the isolated ops — what lies
    // between those ops in a step (element-wise passes over colder operands, the BLAS and
    // OpenMP threads waking, the operand widening) is inside it. The head's loss and its
    // gradient run at the start of the backward block, as the engine runs them.
    if (!dev) {
        const std::vector<int> shape = {(int)s.B, (int)s.T, (int)s.h, (int)s.H, (int)s.G, (int)s.F, s.t, s.sp ? 2 : 1,
                                        (int)L.rc + 1};
        auto pass = [&](const char* name) { return pt.pass_s(name, s.dtype, shape); };
        const double lf = pass("layer.fwd"), lb = pass("layer.bwd");
        if (lf >= 0 && lb >= 0) {
            F.compute = layers * lf;
            B.compute = layers * lb;  // with full recompute the rebuilt forward is inside it
            RC.compute = 0;
            // The TP collectives inside the passes, where every rank has a core: measured
            // there with every peer in the same pass. On shared cores the in-step samples
            // (the step probe's run) stand.
            const double lft = pass("layer.fwd.tp"), lbt = pass("layer.bwd.tp");
            if (s.t > 1 && pt.shared_cores == 0 && lft >= 0 && lbt >= 0) F.tp = layers * lft, B.tp = layers * lbt, RC.tp = 0;
        }
        const double ef = pass("embedding.fwd"), eb = pass("embedding.bwd"), hd = pass("head.fwd_bwd");
        if (first && ef >= 0 && eb >= 0) EF.compute = ef, EB.compute = eb;
        if (last && hd >= 0) OF.compute = 0, OB.compute = hd;
        // The embedding's and the head's TP calls likewise, from their passes where every rank
        // has a core: timed back to back, a few small calls there swung a tiny TP2 job's
        // predicted step 3× between calibrations minutes apart (each call waiting for the
        // scheduler as it does not inside a pass).
        if (s.t > 1 && pt.shared_cores == 0) {
            const double eft = pass("embedding.fwd.tp"), ebt = pass("embedding.bwd.tp"), hdt = pass("head.fwd_bwd.tp");
            if (first && eft >= 0 && ebt >= 0) EF.tp = eft, EB.tp = ebt;
            if (last && hdt >= 0) OF.tp = 0, OB.tp = hdt;
        }
    }
    const OpSum FE{EF.compute + OF.compute, EF.tp + OF.tp}, BE{EB.compute + OB.compute, EB.tp + OB.tp};
    ChunkTime c;
    c.fwd.compute = F.compute + FE.compute;
    c.fwd.tp = F.tp + FE.tp;
    c.bwd.compute = B.compute + BE.compute;
    c.bwd.recompute = RC.compute;
    c.bwd.tp = B.tp + BE.tp + RC.tp;
    // One hop each way across the stage boundary: this rank's [Rl, h] rows.
    if (L.p > 1) {
        const double hop = dev ? p2p_time(s.Rl * s.h * s.e, L.net_pp)
                               : std::max(0.0, pt.collective_s("p2p", "pp", L.p, s.Rl * s.h * s.e));
        c.fwd.p2p = hop;
        c.bwd.p2p = hop;
    }
    return c;
}

StageTail engine_stage_tail(const LayoutDerived& L, int stage, double params, double step_compute_s) {
    const ProfileTimes& pt = times_of(L);
    const bool dev = !L.profile_times;
    const EngineShape s = engine_shape(L);
    const bool first = stage == 0, last = stage == L.p - 1;
    StageTail tail;
    auto device_net = [&](const std::string& group) -> const GroupNet& {
        if (group == "tp") return L.net_tp;
        if (group == "dp") return L.net_dp;
        if (group == "embedding") return L.net_pp;
        return L.dp > 1 ? L.net_dp : L.p > 1 ? L.net_pp : L.net_tp;  // the world: its widest group's links
    };
    auto coll = [&](const char* op, const char* group, int n, double bytes) {
        if (n <= 1) return 0.0;
        return dev ? device_collective_s(op, bytes, device_net(group))
                   : std::max(0.0, pt.collective_s(op, group, n, bytes)) + pt.host_op_s;
    };
    auto bytes_s = [&](const char* kernel, double bytes) { return dev ? bytes / L.hbm : pt.bytes_s(kernel, bytes); };
    // SP: each replicated tensor's gradient (norms, the row-parallel biases, learned
    // positions) is summed over the TP group, one all-reduce per tensor, f32.
    double grad = 0;
    if (s.sp) {
        const double layers = (double)L.m->layers / L.p;
        const double per_layer = (s.ln ? 4 : 2) + (s.bias ? 2 : 0);
        grad += layers * per_layer * coll("all_reduce", "tp", s.t, s.h * 4);
        if (last) grad += (s.ln ? 2 : 1) * coll("all_reduce", "tp", s.t, s.h * 4);
        if (first && !s.rope) grad += coll("all_reduce", "tp", s.t, L.m->seq_len * s.h * 4);
    }
    // The tied embedding's two copies (first and last stage) summed across the pipeline.
    if (L.p > 1 && L.m->tied_embeddings && (first || last)) grad += coll("all_reduce", "embedding", 2, s.Vl * s.h * 4);
    // The flat f32 gradient buffer over the data-parallel group.
    const double flat = params;
    const char* grad_op = L.optimizer_sharded ? "reduce_scatter" : "all_reduce";
    if (L.dp > 1) grad += coll(grad_op, "dp", L.dp, flat * 4);
    // dpwait: and it starts when the group's slowest member gets there (profile_times.h
    // dp_wait) — unless the profile timed that call inside real steps, wait included.
    if (L.dp > 1 && !dev && !pt.timed_in_step(grad_op, "dp", L.dp, flat * 4)) grad += pt.dp_wait(L.dp, step_compute_s);
    // Loss and Σg² in one f64 all-reduce over the world.
    const int world = L.world();  // the engine runs no context parallelism: c = 1
    grad += coll("all_reduce", "world", world, 16);
    tail.grad_s = tail.grad_exposed_s = grad;
    // AdamW over this rank's shard (p, g, m, v read, p, m, v written: 7 f32 words), the
    // gradient buffer cleared, Σg² over the shard.
    const double shard = L.optimizer_sharded && L.dp > 1 ? flat / L.dp : flat;
    tail.optimizer_s = bytes_s("adamw", 7 * 4 * shard) + bytes_s("copy", 4 * flat) + bytes_s("copy", 4 * shard) +
                       3 * pt.host_op_s;
    if (L.optimizer_sharded && L.dp > 1) tail.param_s = tail.param_exposed_s = coll("all_gather", "dp", L.dp, flat * s.e);
    return tail;
}

}  // namespace ptd::est
