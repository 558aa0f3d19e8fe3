// schedule.cpp — the 1F1B pipeline schedule of one step (Narayanan et al. 2021, §2.2,
// PipeDream-Flush): stage i runs min(p − i − 1, m) warm-up forwards, then alternates one
// forward and one backward, then drains the remaining backwards. At most p − i
// micro-batches are in flight on stage i, which is exactly the number of activation
// slots model.cpp allocates (and the estimators predict).
//
// Point-to-point: activations go to stage i + 1 with tag 2j, gradients to stage i − 1
// with tag 2j + 1. Sends are asynchronous from a per-micro-batch buffer, receives block;
// that order cannot deadlock because every receive matches a send its peer issues before
// it waits on anything from this stage.
#include <chrono>
#include <vector>

#include "ptd/engine/trainer.h"

namespace ptd::engine {

namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

struct PipelineRun {
    Model& model;
    Activations& acts;
    CommGroups& groups;
    const StepBatch& batch;
    StepTimes& times;
    StageComm comm;
    double loss_sum = 0;
    std::vector<int32_t> host_ids;

    const EngineConfig& cfg() const { return model.cfg; }

    // Token ids of micro-batch j: inputs are positions 0..s−1, targets 1..s of each sequence.
    void upload_tokens(int j, int32_t* dst, bool targets) {
        const int64_t b = cfg().micro_batch, s = cfg().seq;
        const std::vector<int32_t>& seq = batch.sequences[(size_t)j];
        host_ids.resize((size_t)(b * s));
        for (int64_t r = 0; r < b; ++r)
            for (int64_t t = 0; t < s; ++t) host_ids[(size_t)(r * s + t)] = seq[(size_t)(r * (s + 1) + t + (targets ? 1 : 0))];
        model.be->upload(dst, host_ids.data(), host_ids.size() * sizeof(int32_t));
    }

    void forward(int j) {
        const EngineConfig& c = cfg();
        const int slot = j % c.slots;
        std::vector<LayerActs>& layers = acts.slot_layers[(size_t)slot];
        const int64_t n = c.rows_local() * c.model.hidden;
        float* stage_in = layers.empty() ? acts.out.lnf_in : layers[0].ln1_in;
        if (c.first) {
            upload_tokens(j, acts.slot_tokens[(size_t)slot], false);
            embedding_forward(model, acts, acts.slot_tokens[(size_t)slot], stage_in, comm);
        } else {
            const auto t0 = clock_type::now();
            groups.pp->recv(stage_in, n, c.pp_rank - 1, (uint32_t)(2 * j));
            times.pipeline_idle += since(t0);
        }
        for (int li = 0; li < c.layers; ++li) {
            float* out = li + 1 < c.layers ? layers[(size_t)li + 1].ln1_in
                         : c.last          ? acts.out.lnf_in
                                           : acts.send_fwd[(size_t)j];
            layer_forward(model, acts, li, layers[(size_t)li], out, comm);
        }
        if (!c.last) {
            const auto t0 = clock_type::now();
            groups.pp->send(acts.send_fwd[(size_t)j], n, c.pp_rank + 1, (uint32_t)(2 * j));
            times.pp_comm += since(t0);
        }
    }

    void backward(int j) {
        const EngineConfig& c = cfg();
        const int slot = j % c.slots;
        std::vector<LayerActs>& layers = acts.slot_layers[(size_t)slot];
        const int64_t n = c.rows_local() * c.model.hidden;
        float* d = acts.d_stream;
        if (c.last) {
            upload_tokens(j, acts.out.targets, true);
            // Mean over every token of the global batch: 1 / (b · s · m · dp); the DP sum
            // of gradients then needs no further scaling.
            const float scale = (float)(1.0 / ((double)c.rows() * c.grad_accum * c.dp));
            const double loss = output_forward_backward(model, acts, scale, d, comm);
            if (c.tp_rank == 0) loss_sum += loss;
        } else {
            const auto t0 = clock_type::now();
            groups.pp->recv(d, n, c.pp_rank + 1, (uint32_t)(2 * j + 1));
            times.pipeline_idle += since(t0);
        }
        for (int li = c.layers - 1; li >= 0; --li) {
            LayerActs& la = layers[(size_t)li];
            // Full recompute: rebuild this layer's saved tensors from its kept input first.
            if (c.recompute_full) layer_forward(model, acts, li, la, acts.w_dres, comm);
            layer_backward(model, acts, li, la, d, d, comm);
        }
        if (c.first) {
            embedding_backward(model, acts, acts.slot_tokens[(size_t)slot], d, comm);
        } else {
            float* buf = acts.send_bwd[(size_t)j];
            model.be->copy(buf, d, n);
            const auto t0 = clock_type::now();
            groups.pp->send(buf, n, c.pp_rank - 1, (uint32_t)(2 * j + 1));
            times.pp_comm += since(t0);
        }
    }
};

}  // namespace

double run_pipeline_step(Model& model, Activations& acts, CommGroups& groups, const StepBatch& batch,
                         StepTimes& times) {
    const EngineConfig& c = model.cfg;
    PipelineRun run{model, acts, groups, batch, times, StageComm{groups.tp.get(), &times.tp_comm}, 0, {}};
    const int m = c.grad_accum;
    const int warmup = std::min(c.pp - c.pp_rank - 1, m);
    for (int j = 0; j < warmup; ++j) run.forward(j);
    for (int k = 0; k < m - warmup; ++k) {
        run.forward(warmup + k);
        run.backward(k);
    }
    for (int k = m - warmup; k < m; ++k) run.backward(k);
    if (c.pp > 1) {
        const auto t0 = clock_type::now();
        groups.pp->wait_sends();
        times.pp_comm += since(t0);
    }
    return run.loss_sum;
}

}  // namespace ptd::engine
