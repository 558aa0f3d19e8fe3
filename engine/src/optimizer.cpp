// optimizer.cpp — gradient reduction, the global gradient norm, and AdamW with ZeRO-1.
//
// ZeRO-1 (Rajbhandari et al. 2020, "P_os"): the flat gradient buffer is reduce-scattered
// over data parallel so each rank holds the summed gradients of its 1/dp shard; Adam's
// m and v exist only for the shard; after the update the shards of the parameters are
// all-gathered. In fp32 training the parameters are their own master copy; in bf16/fp16
// (Megatron's mixed precision and distributed optimizer) the optimizer keeps f32 master
// weights for its shard next to m and v, updates them from the f32 main grads, and
// rounds them into the 16-bit model weights, which are then all-gathered. The flat
// buffers are padded (build_model) so that the dp shards are equal, as NCCL's
// reduce-scatter and all-gather require; the padding is zeros and in no tensor.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "ptd/engine/trainer.h"
#include "timing.h"

namespace ptd::engine {

double learning_rate(const TrainingSpec& t, int64_t k) {
    if (t.warmup > 0 && k < t.warmup) return t.lr * (double)(k + 1) / (double)t.warmup;
    const double span = std::max<int64_t>(1, (int64_t)t.steps - t.warmup);
    const double progress = std::clamp((double)(k - t.warmup) / span, 0.0, 1.0);
    return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(3.14159265358979323846 * progress));
}

// Calls f(tensor, begin, end) for the part of each tensor that lies in this rank's shard.
template <class F>
void for_each_in_shard(Model& model, const OptimizerState& st, F&& f) {
    const int64_t lo = st.shard_offset, hi = st.shard_offset + st.shard_numel;
    for (ParamTensor& t : model.tensors) {
        const int64_t b = std::max(lo, t.offset), e = std::min(hi, t.offset + t.numel);
        if (b < e) f(t, b, e);
    }
}

OptimizerState make_optimizer(Backend& be, Model& model, float weight_decay) {
    const EngineConfig& c = model.cfg;
    OptimizerState st;
    if (c.zero >= 1 && c.dp > 1) {
        // Equal shards of the padded flat buffer, each a multiple of kShardAlignElements.
        st.sharded = true;
        st.shard_numel = model.flat_numel / c.dp;
        st.shard_offset = st.shard_numel * c.dp_rank;
    } else {
        st.shard_numel = model.numel;
    }
    st.m = (float*)be.alloc(MEM_OPTIMIZER, (size_t)st.shard_numel * sizeof(float), "adam.m");
    st.v = (float*)be.alloc(MEM_OPTIMIZER, (size_t)st.shard_numel * sizeof(float), "adam.v");
    // The step's scalars (loss, Σg², loss scale, norm, clip and grad scale, found-inf): one
    // device buffer in every precision, allocated here, before the allocator is sealed.
    st.scalars = (double*)be.alloc(MEM_WORKSPACE, STEP_SCALAR_COUNT * sizeof(double), "step scalars");
    if (c.mixed()) {
        // Megatron initialises the main params from the model params (bf16 → f32, exact).
        st.master = (float*)be.alloc(MEM_OPTIMIZER, (size_t)st.shard_numel * sizeof(float), "master_params");
        be.convert(st.master, DType::f32, dtype_offset(model.params, st.shard_offset, c.act), c.act, st.shard_numel);
    }
    // The update of every tensor range of the shard, planned once: the backend keeps the
    // list (a GPU backend in device memory) and runs it as one multi-tensor AdamW per step.
    std::vector<Backend::AdamWRange> ranges;
    for_each_in_shard(model, st, [&](ParamTensor& t, int64_t b, int64_t e) {
        const int64_t local = b - st.shard_offset;
        Backend::AdamWRange r;
        r.p = st.master ? st.master + local : (float*)model.params + b;
        r.g = model.grads + b;
        r.m = st.m + local, r.v = st.v + local;
        r.model_p = st.master ? dtype_offset(model.params, b, c.act) : nullptr;
        r.n = e - b;
        r.weight_decay = t.weight_decay ? weight_decay : 0.0f;
        ranges.push_back(r);
    });
    be.plan_adamw(ranges.data(), (int)ranges.size());
    return st;
}

void free_optimizer(Backend& be, OptimizerState& st) {
    be.plan_adamw(nullptr, 0);
    be.release(st.m);
    be.release(st.v);
    be.release(st.master);
    be.release(st.scalars);
    st.m = st.v = st.master = nullptr;
    st.scalars = nullptr;
}

void reduce_gradients(Model& model, const OptimizerState& st, CommGroups& groups, StepTimes& times) {
    const EngineConfig& c = model.cfg;
    CommOnStream on_comm(*model.be, model.comm_ready, model.comm_done);  // the whole reduction
    if (c.sequence_parallel) {
        const auto t0 = clock_type::now();
        for (ParamTensor& t : model.tensors)
            if (t.tp_partial_grad) {
                const auto t1 = clock_type::now();
                groups.tp->all_reduce_sum(t.g, t.numel);
                // A `tp` block of no micro-batch (-1) per call: the gradient phase's TP calls
                // wait for the scheduler differently from a backward's (docs/engine.md,
                // "Measured timeline"), and the step probe prices them from these blocks.
                if (times.timeline) times.timeline->add(BlockKind::tp_comm, -1, -1, kStreamComm, t1);
            }
        times.tp_comm += since(t0);
    }
    const auto t0 = clock_type::now();
    if (groups.embedding && c.model.tied_embeddings) {
        // Tied embeddings across the pipeline: the input copy (first stage) and the output
        // copy (last stage) are one parameter; sum their gradients.
        ParamTensor* tied = c.first ? model.wte : model.wout;
        groups.embedding->all_reduce_sum(tied->g, tied->numel);
    }
    if (c.dp > 1) {
        if (!st.sharded) groups.dp->all_reduce_sum(model.grads, model.numel);
        else groups.dp->reduce_scatter(model.grads, st.shard_numel, DType::f32, ReduceOp::sum);
    }
    times.dp_comm += since(t0);
    if (times.timeline) times.timeline->add(BlockKind::dp_comm, -1, -1, kStreamComm, t0);
}

void accumulate_grad_squares(Model& model, OptimizerState& st) {
    const EngineConfig& c = model.cfg;
    // Without ZeRO every dp replica holds the same summed gradients: count them on replica 0.
    if (!st.sharded && c.dp_rank != 0) return;
    // Summed per tensor range in a device double, then added (the order the host sum had).
    double* acc = st.scalars + SCALAR_GRAD_SQUARES;
    for_each_in_shard(model, st, [&](ParamTensor& t, int64_t b, int64_t e) {
        if (t.in_norm) model.be->sum_squares(acc, model.grads + b, e - b);
    });
}

void optimizer_step(Model& model, OptimizerState& st, CommGroups& groups, float lr, StepTimes& times) {
    const auto t0 = clock_type::now();
    // Counted before the device knows whether the step is skipped; the trainer takes it
    // back after its one read of the step scalars when found-inf was set.
    ++st.step;
    model.be->adamw_step(lr, kAdamBeta1, kAdamBeta2, kAdamEps, st.scalars, st.step, model.cfg.act);  // make_optimizer's plan
    model.be->fill(model.grads, DType::f32, 0.0f, model.flat_numel);
    times.optimizer += since(t0);
    if (times.timeline) times.timeline->add(BlockKind::optimizer, -1, -1, kStreamCompute, t0);
    if (st.sharded) {
        const auto t1 = clock_type::now();
        CommOnStream on_comm(*model.be, model.comm_ready, model.comm_done);
        groups.dp->all_gather(model.params, st.shard_numel, model.cfg.act);
        times.dp_comm += since(t1);
        // The step's third `dp` block: the step probe prices the parameter all-gather from it.
        if (times.timeline) times.timeline->add(BlockKind::dp_comm, -1, -1, kStreamComm, t1);
    }
}

}  // namespace ptd::engine
