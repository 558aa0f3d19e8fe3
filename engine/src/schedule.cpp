// schedule.cpp — the pipeline schedule of one step (Narayanan et al. 2021, §2.2).
//
// vpp = 1, plain 1F1B (PipeDream-Flush): stage i runs min(p − i − 1, m) warm-up forwards,
// then alternates one forward and one backward, then drains the remaining backwards. At
// most p − i micro-batches are in flight on stage i, which is exactly the number of
// activation slots model.cpp allocates (and the estimators predict).
//
// vpp = v > 1, interleaved 1F1B (Megatron's order): stage i holds v model chunks; chunk c
// is virtual stage c·p + i. The k-th forward (k = 0..m·v − 1) runs chunk (k / p) % v on
// micro-batch (k / (p·v))·p + k % p; the k-th backward chunk v − 1 − (k / p) % v on the
// same micro-batch formula (m % p == 0 is required, as in Megatron). Warm-up forwards:
// min(2(p − i − 1) + (v − 1)·p, m·v), then forward(warm-up + k) / backward(k), then the
// remaining backwards. At most min(2(p − i − 1) + (v − 1)·p + 1, m·v) chunks are in
// flight: the activation pool's size (a free list of chunk slots, checked never to run dry).
//
// Point-to-point: a chunk's output goes to the next virtual stage (stage i + 1, same chunk;
// from stage p − 1 to stage 0, chunk + 1), gradients the reverse. Tag = 2·(c·m + j) for
// the activations the sender's chunk c computed for micro-batch j, + 1 for gradients:
// unique per (chunk, micro-batch, direction); with v = 1 that is 2j / 2j + 1 as before.
// Sends are asynchronous from a per-(chunk, micro-batch) buffer, receives block.
//
// Why this cannot deadlock: only receives block, so a deadlock needs a cycle of receives
// each waiting on an op its peer has not reached yet. The (chunk, micro-batch) of the k-th
// forward (backward) is the same on every stage, so stage i's k-th forward waits only on
// stage i − 1's k-th forward (stage 0's: on stage p − 1's (k − p)-th), and the k-th
// backward only on stage i + 1's k-th backward (stage p − 1's: on stage 0's (k − p)-th).
// Stage i − 1 runs two more warm-up forwards than stage i (one hop down, one hop back), so
// before its k-th forward it has waited only on backwards < k − w(i) − 2 of stage i, all of
// which stage i ran before reaching its own k-th forward; symmetrically for backwards, and
// the (v − 1)·p extra warm-ups of every stage cover the wrap-around from stage p − 1 to
// stage 0 (p forwards earlier). So every receive's send is issued by a peer that waits only
// on ops that come earlier, and the wait graph is acyclic. (Also checked exhaustively by a
// simulation of async sends / blocking receives for p ≤ 8, v ≤ 4, m ≤ 5p: no deadlock,
// and the in-flight peak equals the pool size on every stage.)
#include <chrono>
#include <deque>
#include <vector>

#include "ptd/engine/failure.h"
#include "ptd/engine/trainer.h"
#include "timing.h"

namespace ptd::engine {

namespace {

struct PipelineRun {
    Model& model;
    Activations& acts;
    CommGroups& groups;
    const StepBatch& batch;
    StepTimes& times;
    StageComm comm;
    double loss_sum = 0;
    std::vector<int32_t> host_ids;
    std::deque<int> free_slots;        // FIFO: with v = 1 micro-batch j gets slot j % slots
    std::vector<int> slot_of;          // [c·m + j]

    const EngineConfig& cfg() const { return model.cfg; }
    int idx(int c, int j) const { return c * cfg().grad_accum + j; }
    bool has_embedding(int c) const { return cfg().first && c == 0; }
    bool has_head(int c) const { return cfg().last && c == cfg().vpp - 1; }
    uint32_t tag(int sender_chunk, int j, int dir) const { return (uint32_t)(2 * idx(sender_chunk, j) + dir); }

    // Token ids of micro-batch j: inputs are positions 0..s−1, targets 1..s of each sequence.
    void upload_tokens(int j, int32_t* dst, bool targets) {
        const int64_t b = cfg().micro_batch, s = cfg().seq;
        const std::vector<int32_t>& seq = batch.sequences[(size_t)j];
        host_ids.resize((size_t)(b * s));
        for (int64_t r = 0; r < b; ++r)
            for (int64_t t = 0; t < s; ++t) host_ids[(size_t)(r * s + t)] = seq[(size_t)(r * (s + 1) + t + (targets ? 1 : 0))];
        model.be->upload(dst, host_ids.data(), host_ids.size() * sizeof(int32_t));
    }

    // The output head of micro-batch j: loss, and the gradient of its input into `d`.
    void head(int j, float* d) {
        const EngineConfig& c = cfg();
        upload_tokens(j, acts.out.targets, true);
        // Mean over every token of the global batch: 1 / (b · s · m · dp); the DP sum
        // of gradients then needs no further scaling.
        const float scale = (float)(1.0 / ((double)c.rows() * c.grad_accum * c.dp));
        const double loss = output_forward_backward(model, acts, scale, d, comm);
        if (c.tp_rank == 0) loss_sum += loss;
    }

    void forward(int ch, int j) {
        const EngineConfig& c = cfg();
        if (free_slots.empty())
            fatal_run_error("internal error: the activation pool (" + std::to_string(c.slots) +
                            " slots) ran dry at the forward of chunk " + std::to_string(ch) + ", micro-batch " +
                            std::to_string(j));
        const int slot = free_slots.front();
        free_slots.pop_front();
        slot_of[(size_t)idx(ch, j)] = slot;
        std::vector<LayerActs>& layers = acts.slot_layers[(size_t)slot];
        const int nl = c.chunk_layers[(size_t)ch], l0 = c.chunk_first(ch);
        const int64_t n = c.rows_local() * c.model.hidden;
        float* stage_in = nl == 0 ? acts.out.lnf_in : layers[0].ln1_in;
        if (has_embedding(ch)) {
            upload_tokens(j, acts.slot_tokens[(size_t)slot], false);
            embedding_forward(model, acts, acts.slot_tokens[(size_t)slot], stage_in, comm);
        } else {
            const bool wrap = c.pp_rank == 0;  // from the last stage's previous chunk
            const auto t0 = clock_type::now();
            groups.pp->recv(stage_in, n, wrap ? c.pp - 1 : c.pp_rank - 1, tag(wrap ? ch - 1 : ch, j, 0));
            times.pipeline_idle += since(t0);
        }
        float* send = acts.send_fwd.empty() ? nullptr : acts.send_fwd[(size_t)idx(ch, j)];
        for (int li = 0; li < nl; ++li) {
            float* out = li + 1 < nl     ? layers[(size_t)li + 1].ln1_in
                         : has_head(ch) ? acts.out.lnf_in
                                        : send;
            layer_forward(model, acts, l0 + li, layers[(size_t)li], out, comm);
        }
        if (has_head(ch)) {
            // Interleaved: this chunk's backward may come later, while the head's buffers
            // exist once; so the head runs now and its input gradient waits in d_head.
            if (c.vpp > 1) head(j, acts.d_head[(size_t)j]);
        } else {
            const int to = c.pp_rank == c.pp - 1 ? 0 : c.pp_rank + 1;
            const auto t0 = clock_type::now();
            groups.pp->send(send, n, to, tag(ch, j, 0));
            times.pp_comm += since(t0);
        }
    }

    void backward(int ch, int j) {
        const EngineConfig& c = cfg();
        const int slot = slot_of[(size_t)idx(ch, j)];
        std::vector<LayerActs>& layers = acts.slot_layers[(size_t)slot];
        const int nl = c.chunk_layers[(size_t)ch], l0 = c.chunk_first(ch);
        const int64_t n = c.rows_local() * c.model.hidden;
        float* d = acts.d_stream;
        if (has_head(ch)) {
            if (c.vpp > 1) d = acts.d_head[(size_t)j];
            else head(j, d);
        } else {
            const bool wrap = c.pp_rank == c.pp - 1;  // from the first stage's next chunk
            const auto t0 = clock_type::now();
            groups.pp->recv(d, n, wrap ? 0 : c.pp_rank + 1, tag(wrap ? ch + 1 : ch, j, 1));
            times.pipeline_idle += since(t0);
        }
        for (int li = nl - 1; li >= 0; --li) {
            LayerActs& la = layers[(size_t)li];
            // Full recompute: rebuild this layer's saved tensors from its kept input first.
            if (c.recompute_full) layer_forward(model, acts, l0 + li, la, acts.w_dres, comm);
            layer_backward(model, acts, l0 + li, la, d, d, comm);
        }
        if (has_embedding(ch)) {
            embedding_backward(model, acts, acts.slot_tokens[(size_t)slot], d, comm);
        } else {
            float* buf = acts.send_bwd[(size_t)idx(ch, j)];
            model.be->copy(buf, d, n);
            const int to = c.pp_rank == 0 ? c.pp - 1 : c.pp_rank - 1;
            const auto t0 = clock_type::now();
            groups.pp->send(buf, n, to, tag(ch, j, 1));
            times.pp_comm += since(t0);
        }
        free_slots.push_back(slot);
    }
};

}  // namespace

double run_pipeline_step(Model& model, Activations& acts, CommGroups& groups, const StepBatch& batch,
                         StepTimes& times) {
    const EngineConfig& c = model.cfg;
    PipelineRun run{model, acts, groups, batch, times, StageComm{groups.tp.get(), &times.tp_comm}, 0, {}, {}, {}};
    for (int s = 0; s < c.slots; ++s) run.free_slots.push_back(s);
    const int m = c.grad_accum, p = c.pp, v = c.vpp;
    run.slot_of.assign((size_t)(m * v), -1);
    if (v == 1) {
        const int warmup = std::min(c.pp - c.pp_rank - 1, m);
        for (int j = 0; j < warmup; ++j) run.forward(0, j);
        for (int k = 0; k < m - warmup; ++k) {
            run.forward(0, warmup + k);
            run.backward(0, k);
        }
        for (int k = m - warmup; k < m; ++k) run.backward(0, k);
    } else {
        const int total = m * v;
        auto micro = [&](int k) { return (k / (p * v)) * p + k % p; };
        auto fchunk = [&](int k) { return (k / p) % v; };
        auto bchunk = [&](int k) { return v - 1 - (k / p) % v; };
        const int warmup = std::min(2 * (p - c.pp_rank - 1) + (v - 1) * p, total);
        for (int k = 0; k < warmup; ++k) run.forward(fchunk(k), micro(k));
        for (int k = 0; k < total - warmup; ++k) {
            run.forward(fchunk(warmup + k), micro(warmup + k));
            run.backward(bchunk(k), micro(k));
        }
        for (int k = total - warmup; k < total; ++k) run.backward(bchunk(k), micro(k));
    }
    if (c.pp > 1) {
        const auto t0 = clock_type::now();
        groups.pp->wait_sends();
        times.pp_comm += since(t0);
    }
    return run.loss_sum;
}

}  // namespace ptd::engine
